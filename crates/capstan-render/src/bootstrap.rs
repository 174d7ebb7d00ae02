//! What every node runs around kubeadm: the kube-vip static pod and its Kubernetes ≥ 1.29
//! `super-admin.conf` workaround on control-plane nodes, the DNS readiness wait, login users, and
//! the kubeadm settings shared by control-plane and worker nodes (node name and `metal3.io/uuid`
//! label from Metal3's metadata, kube-proxy left to Cilium).
//!
//! The kubeadm bootstrap provider hands these to cloud-init as a Jinja template (`## template:
//! jinja`), so file contents and commands must not contain `{{`, `{%` or `{#` except where Jinja is
//! meant: the node name and UUID below.

use std::collections::BTreeMap;

use capstan_model::kubeadm::{
    ClusterConfiguration, ExtraArgs, File, InitConfiguration, JoinConfiguration, KubeadmConfigSpec,
    Networking, NodeRegistration, User,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, HostAlias, HostPathVolumeSource,
    ObjectFieldSelector, Pod, PodSpec, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::CapiVersion;
use crate::validate::Plan;

/// Where the kube-vip static pod manifest is written on control-plane nodes.
pub const KUBE_VIP_MANIFEST_PATH: &str = "/etc/kubernetes/manifests/kube-vip.yaml";
/// Where the kube-vip `super-admin.conf` script is written (Kubernetes ≥ 1.29).
pub const KUBE_VIP_PREPARE_PATH: &str = "/etc/kube-vip-prepare.sh";
/// Where the DNS wait script is written.
pub const DNS_WAIT_PATH: &str = "/etc/capstan-wait-for-dns.sh";
/// The kubeconfig kube-vip uses once the control plane is up.
const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";

/// kubeadm phase skipped on every node: Cilium replaces kube-proxy.
const SKIP_KUBE_PROXY: &str = "addon/kube-proxy";

/// The script that switches kube-vip to `super-admin.conf` for `kubeadm init` and back afterwards.
///
/// From Kubernetes 1.29 `kubeadm init` writes `admin.conf` without rights until it has bound them,
/// which needs the API server, which needs the VIP kube-vip cannot take without rights.
/// `super-admin.conf` breaks the cycle; it is a break-glass credential, so the post-kubeadm step
/// points kube-vip back at `admin.conf`. Paths can be overridden through the environment for tests.
pub const KUBE_VIP_PREPARE_SCRIPT: &str = r#"#!/bin/sh
# kube-vip holds the control plane's VIP and needs the API to run its leader election. Since
# Kubernetes 1.29, kubeadm init creates admin.conf without rights until the control plane is up,
# and the control plane cannot come up without the VIP. On the node that runs kubeadm init this
# points kube-vip at super-admin.conf; `--restore` points it back at admin.conf once init is done,
# because super-admin.conf is a break-glass credential. Joining nodes keep admin.conf.
# See https://github.com/kube-vip/kube-vip/issues/684.
set -eu
manifest="${KUBE_VIP_MANIFEST:-/etc/kubernetes/manifests/kube-vip.yaml}"
# cloud-init writes this file only on the node that runs kubeadm init; joining nodes get
# /run/kubeadm/kubeadm-join-config.yaml instead.
init_config="${KUBEADM_INIT_CONFIG:-/run/kubeadm/kubeadm.yaml}"
admin="path: /etc/kubernetes/admin.conf"
super_admin="path: /etc/kubernetes/super-admin.conf"

# Rewrites the manifest through a hidden file next to it: the kubelet ignores hidden files, and the
# rename replaces the manifest in one step.
rewrite() {
  tmp="${manifest%/*}/.kube-vip.yaml.capstan"
  sed "s#$1\$#$2#" "$manifest" > "$tmp"
  mv "$tmp" "$manifest"
}

case "${1:-prepare}" in
  prepare)
    if [ -f "$init_config" ]; then
      rewrite "$admin" "$super_admin"
    fi
    ;;
  --restore)
    if grep -q "$super_admin\$" "$manifest"; then
      rewrite "$super_admin" "$admin"
    fi
    ;;
  *)
    echo "usage: $0 [prepare|--restore]" >&2
    exit 2
    ;;
esac
"#;

/// The script that waits for a host name to resolve: `capstan-wait-for-dns.sh HOST SECONDS`.
pub const DNS_WAIT_SCRIPT: &str = r#"#!/bin/sh
# Waits until a host name resolves, so that kubeadm's image pulls do not fail while the node's
# resolver is still coming up. Usage: capstan-wait-for-dns.sh HOST TIMEOUT_SECONDS
set -u
host="$1"
timeout="$2"
deadline=$(( $(date +%s) + timeout ))
until getent hosts "$host" >/dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "capstan: $host did not resolve within $timeout seconds; check the DNS servers in this host's networkData and /etc/resolv.conf" >&2
    exit 1
  fi
  sleep 1
done
"#;

/// The kube-vip static pod: ARP mode, control-plane VIP only, leader election over a lease.
pub(crate) fn kube_vip_pod(plan: &Plan<'_>) -> Pod {
    let kube_vip = &plan.spec.control_plane.kube_vip;
    let value = |name: &str, value: String| EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    };
    let mut env = vec![
        value("vip_arp", "true".to_owned()),
        value("port", plan.spec.control_plane.port.to_string()),
        EnvVar {
            name: "vip_nodename".to_owned(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: "spec.nodeName".to_owned(),
                }),
                ..EnvVarSource::default()
            }),
        },
    ];
    if let Some(interface) = &kube_vip.interface {
        env.push(value("vip_interface", interface.clone()));
    }
    env.extend([
        // `address` without a prefix: `vip_address` with `/32` is looked up as a host name.
        value("address", plan.vip.to_string()),
        value(
            "vip_subnet",
            if plan.vip.is_ipv4() { "32" } else { "128" }.to_owned(),
        ),
        value("cp_enable", "true".to_owned()),
        value("cp_namespace", "kube-system".to_owned()),
        // LoadBalancer Services are Cilium's (announced over BGP), not kube-vip's.
        value("svc_enable", "false".to_owned()),
        value("vip_leaderelection", "true".to_owned()),
        value("vip_leasename", "plndr-cp-lock".to_owned()),
        value(
            "vip_leaseduration",
            kube_vip.lease_duration_seconds.to_string(),
        ),
        value(
            "vip_renewdeadline",
            kube_vip.renew_deadline_seconds.to_string(),
        ),
        value("vip_retryperiod", kube_vip.retry_period_seconds.to_string()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some("kube-vip".to_owned()),
            namespace: Some("kube-system".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "kube-vip".to_owned(),
                image: Some(kube_vip.image.clone()),
                image_pull_policy: Some("IfNotPresent".to_owned()),
                args: Some(vec!["manager".to_owned()]),
                env: Some(env),
                security_context: Some(SecurityContext {
                    capabilities: Some(Capabilities {
                        add: Some(vec!["NET_ADMIN".to_owned(), "NET_RAW".to_owned()]),
                        drop: None,
                    }),
                    ..SecurityContext::default()
                }),
                volume_mounts: Some(vec![VolumeMount {
                    name: "kubeconfig".to_owned(),
                    mount_path: ADMIN_CONF.to_owned(),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            // kube-vip talks to the local API server as `kubernetes` before the VIP exists.
            host_aliases: Some(vec![HostAlias {
                ip: "127.0.0.1".to_owned(),
                hostnames: Some(vec!["kubernetes".to_owned()]),
            }]),
            host_network: Some(true),
            volumes: Some(vec![Volume {
                name: "kubeconfig".to_owned(),
                host_path: Some(HostPathVolumeSource {
                    path: ADMIN_CONF.to_owned(),
                    type_: None,
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Whether the Kubernetes version needs the `super-admin.conf` workaround.
pub(crate) fn needs_super_admin(plan: &Plan<'_>) -> bool {
    plan.version.at_least(1, 29)
}

fn node_registration(api_version: CapiVersion) -> NodeRegistration {
    NodeRegistration {
        // Metal3's metadata: the host's name, and the BareMetalHost UID CAPM3 matches nodes by.
        name: Some("{{ ds.meta_data.name }}".to_owned()),
        kubelet_extra_args: Some(ExtraArgs::for_version(
            &[("node-labels", "metal3.io/uuid={{ ds.meta_data.uuid }}")],
            api_version.as_str(),
        )),
        ..NodeRegistration::default()
    }
}

fn users(plan: &Plan<'_>) -> Vec<User> {
    plan.spec
        .users
        .iter()
        .map(|user| User {
            name: user.name.clone(),
            sudo: user.sudo.clone(),
            ssh_authorized_keys: user.ssh_authorized_keys.clone(),
            ..User::default()
        })
        .collect()
}

fn script_file(path: &str, content: &str) -> File {
    File {
        path: path.to_owned(),
        owner: Some("root:root".to_owned()),
        permissions: Some("0755".to_owned()),
        content: Some(content.to_owned()),
        ..File::default()
    }
}

/// The DNS wait's file and command, when enabled.
fn dns_wait(plan: &Plan<'_>) -> Option<(File, String)> {
    let wait = &plan.spec.dns_wait;
    wait.enabled.then(|| {
        (
            script_file(DNS_WAIT_PATH, DNS_WAIT_SCRIPT),
            format!("sh {DNS_WAIT_PATH} {} {}", wait.host, wait.timeout_seconds),
        )
    })
}

/// The bootstrap configuration of control-plane nodes (the KubeadmControlPlane's).
pub(crate) fn control_plane_config(
    plan: &Plan<'_>,
    api_version: CapiVersion,
    kube_vip_manifest: String,
) -> KubeadmConfigSpec {
    let mut files = Vec::new();
    let mut pre = Vec::new();
    let mut post = Vec::new();
    if let Some((file, command)) = dns_wait(plan) {
        files.push(file);
        pre.push(command);
    }
    files.push(File {
        path: KUBE_VIP_MANIFEST_PATH.to_owned(),
        owner: Some("root:root".to_owned()),
        permissions: Some("0644".to_owned()),
        content: Some(kube_vip_manifest),
        ..File::default()
    });
    if needs_super_admin(plan) {
        files.push(script_file(KUBE_VIP_PREPARE_PATH, KUBE_VIP_PREPARE_SCRIPT));
        pre.push(format!("sh {KUBE_VIP_PREPARE_PATH}"));
        post.push(format!("sh {KUBE_VIP_PREPARE_PATH} --restore"));
    }
    let cluster_configuration = match api_version {
        // v1beta2 takes the pod and service networks from the Cluster's clusterNetwork.
        CapiVersion::V1beta2 => None,
        CapiVersion::V1beta1 => Some(ClusterConfiguration {
            networking: Some(Networking {
                pod_subnet: Some(plan.pod_cidr.to_string()),
                service_subnet: Some(plan.service_cidr.to_string()),
                dns_domain: None,
            }),
            ..ClusterConfiguration::default()
        }),
    };
    KubeadmConfigSpec {
        cluster_configuration,
        init_configuration: Some(InitConfiguration {
            node_registration: Some(node_registration(api_version)),
            skip_phases: vec![SKIP_KUBE_PROXY.to_owned()],
            ..InitConfiguration::default()
        }),
        join_configuration: Some(JoinConfiguration {
            node_registration: Some(node_registration(api_version)),
            skip_phases: vec![SKIP_KUBE_PROXY.to_owned()],
            ..JoinConfiguration::default()
        }),
        files,
        pre_kubeadm_commands: pre,
        post_kubeadm_commands: post,
        users: users(plan),
        ..KubeadmConfigSpec::default()
    }
}

/// The bootstrap configuration of worker nodes (every pool's KubeadmConfigTemplate).
pub(crate) fn worker_config(plan: &Plan<'_>, api_version: CapiVersion) -> KubeadmConfigSpec {
    let mut files = Vec::new();
    let mut pre = Vec::new();
    if let Some((file, command)) = dns_wait(plan) {
        files.push(file);
        pre.push(command);
    }
    KubeadmConfigSpec {
        join_configuration: Some(JoinConfiguration {
            node_registration: Some(node_registration(api_version)),
            skip_phases: vec![SKIP_KUBE_PROXY.to_owned()],
            ..JoinConfiguration::default()
        }),
        files,
        pre_kubeadm_commands: pre,
        users: users(plan),
        ..KubeadmConfigSpec::default()
    }
}

/// The cloud-config the kubeadm bootstrap provider would assemble from a KubeadmConfigSpec (files
/// as `write_files`, commands as `runcmd`, users), for checking with `cloud-init schema`.
pub fn approximate_cloud_config(config: &KubeadmConfigSpec) -> serde_json::Value {
    let write_files: Vec<serde_json::Value> = config
        .files
        .iter()
        .map(|file| {
            let mut entry = BTreeMap::new();
            entry.insert("path", serde_json::json!(file.path));
            if let Some(owner) = &file.owner {
                entry.insert("owner", serde_json::json!(owner));
            }
            if let Some(permissions) = &file.permissions {
                entry.insert("permissions", serde_json::json!(permissions));
            }
            entry.insert(
                "content",
                serde_json::json!(file.content.clone().unwrap_or_default()),
            );
            serde_json::json!(entry)
        })
        .collect();
    let mut runcmd: Vec<String> = config.pre_kubeadm_commands.clone();
    runcmd.push("kubeadm init --config /run/kubeadm/kubeadm.yaml".to_owned());
    runcmd.extend(config.post_kubeadm_commands.iter().cloned());
    let users: Vec<serde_json::Value> = config
        .users
        .iter()
        .map(|user| {
            let mut entry = serde_json::json!({"name": user.name});
            if let Some(sudo) = &user.sudo {
                entry["sudo"] = serde_json::json!(sudo);
            }
            if !user.ssh_authorized_keys.is_empty() {
                entry["ssh_authorized_keys"] = serde_json::json!(user.ssh_authorized_keys);
            }
            entry
        })
        .collect();
    serde_json::json!({
        "write_files": write_files,
        "runcmd": runcmd,
        "users": users,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_contain_nothing_jinja_would_expand() {
        for script in [KUBE_VIP_PREPARE_SCRIPT, DNS_WAIT_SCRIPT] {
            for marker in ["{{", "{%", "{#"] {
                assert!(!script.contains(marker), "{marker} in\n{script}");
            }
        }
    }

    #[test]
    fn prepare_script_edits_only_the_host_path() {
        // The mount path inside the container stays admin.conf; only the host path changes.
        assert!(KUBE_VIP_PREPARE_SCRIPT.contains(r#"admin="path: /etc/kubernetes/admin.conf""#));
        assert!(!"mountPath: /etc/kubernetes/admin.conf".contains("path: /etc"));
    }
}
