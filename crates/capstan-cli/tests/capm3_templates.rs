//! The cluster CAPM3 users generate: `tests/fixtures/capm3-clusterctl-cluster.yaml` has the
//! kinds, apiVersions and fields `clusterctl generate cluster` produces from CAPM3's clusterctl
//! template (v1beta2 Cluster, KubeadmControlPlane, MachineDeployment and KubeadmConfigTemplate;
//! v1beta1 Metal3Cluster, Metal3MachineTemplates with `dataTemplate` and no `hostSelector`, and
//! Metal3DataTemplates with only `clusterName`), with its `${VARIABLES}`. The test fills them in
//! as clusterctl does (`${X}`, `${X:=default}`, `${X:-default}`; the two
//! `*_KUBEADM_EXTRA_CONFIG` blocks with commands and files in the shape of CAPM3's
//! `example_variables.rc`, including a jinja variable nothing defines) for 3 control planes and
//! 1 worker, and applies the result unchanged with kubectl, with four unlabelled hosts.
//!
//! Real: the API server, every controller, kubectl and the CLI. Simulated
//! (`crates/capstan-sim`): the machines (`fake://` BMCs) and the workload cluster, whose nodes
//! read the bootstrap data as cloud-init would (jinja from the host's meta data; an undefined
//! variable rendered as cloud-init renders it) and register when it runs `kubeadm init|join`.
//!
//! Checked: the Cluster is Provisioned, 3 control-plane and 1 worker Machines are Running with
//! `metal3://` providerIDs on their Nodes and the template's version, Metal3Data were rendered
//! from the data templates, and `capstan describe cluster` shows the tree.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use support::*;

const CTLPLANE_KUBEADM_EXTRA_CONFIG: &str = r#"
    preKubeadmCommands:
      - ip link set dev enp2s0 up
      - netplan apply
      - systemctl enable --now containerd kubelet
      - if (curl -sk --max-time 10 https://{{ CLUSTER_APIENDPOINT_HOST }}:6443/healthz); then echo "vip answers"; else systemctl start keepalived; fi
    postKubeadmCommands:
      - mkdir -p /home/metal3/.kube
      - cp /etc/kubernetes/admin.conf /home/metal3/.kube/config
      - systemctl enable --now keepalived
    files:
        - path: /etc/keepalived/keepalived.conf
          content: |
            vrrp_instance VIP {
                state MASTER
                interface enp2s0
                virtual_router_id 7
                virtual_ipaddress {
                    {{ CLUSTER_APIENDPOINT_HOST }}
                }
            }
        - path: /etc/netplan/50-cloud-init.yaml
          owner: root:root
          permissions: '0644'
          content: |
            network:
                ethernets:
                    enp2s0:
                        dhcp4: true
                version: 2
"#;

const WORKERS_KUBEADM_EXTRA_CONFIG: &str = r#"
      preKubeadmCommands:
        - ip link set dev enp2s0 up
        - netplan apply
        - systemctl enable --now containerd kubelet
      files:
        - path: /etc/netplan/50-cloud-init.yaml
          owner: root:root
          permissions: '0644'
          content: |
            network:
                ethernets:
                    enp2s0:
                        dhcp4: true
                version: 2
"#;

/// clusterctl's variable substitution: `${NAME}`, `${NAME:=default}`, `${NAME:-default}`; a
/// variable without a value or a default is an error, as in clusterctl.
fn substitute(template: &str, variables: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').expect("an unclosed ${");
        let expression = &after[..end];
        let (name, default) = match expression.find(":=").or_else(|| expression.find(":-")) {
            Some(at) => (&expression[..at], Some(&expression[at + 2..])),
            None => (expression, None),
        };
        let value = match (variables.get(name), default) {
            (Some(value), _) => value.clone(),
            (None, Some(default)) => default.to_owned(),
            (None, None) => panic!("variable {name} has no value"),
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn hosts(namespace: &str, count: usize) -> String {
    let mut out = String::new();
    for i in 0..count {
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Secret
metadata:
  name: node-{i}-bmc-secret
  namespace: {namespace}
type: Opaque
stringData:
  username: admin
  password: password
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: node-{i}
  namespace: {namespace}
spec:
  online: true
  bootMACAddress: "00:60:2f:31:81:0{i}"
  bootMode: legacy
  bmc:
    address: fake://metal3/node-{i}
    credentialsName: node-{i}-bmc-secret
"#
        ));
    }
    out
}

#[test]
fn the_capm3_clusterctl_template_becomes_a_running_cluster_unchanged() {
    let work = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/capm3-clusterctl-cluster.yaml");
    let template = std::fs::read_to_string(fixture).unwrap();
    let variables: BTreeMap<&str, String> = [
        ("CLUSTER_NAME", "test1"),
        ("NAMESPACE", "metal3"),
        ("KUBERNETES_VERSION", "v1.33.1"),
        ("CONTROL_PLANE_MACHINE_COUNT", "3"),
        ("WORKER_MACHINE_COUNT", "1"),
        ("CLUSTER_APIENDPOINT_HOST", "192.168.111.249"),
        ("CLUSTER_APIENDPOINT_PORT", "6443"),
        (
            "IMAGE_URL",
            "http://172.22.0.1/images/UBUNTU_24.04_NODE_IMAGE_K8S_v1.33.1.qcow2",
        ),
        (
            "IMAGE_CHECKSUM",
            "http://172.22.0.1/images/UBUNTU_24.04_NODE_IMAGE_K8S_v1.33.1.qcow2.sha256sum",
        ),
        ("IMAGE_CHECKSUM_TYPE", "sha256"),
        ("IMAGE_FORMAT", "qcow2"),
        (
            "CTLPLANE_KUBEADM_EXTRA_CONFIG",
            CTLPLANE_KUBEADM_EXTRA_CONFIG,
        ),
        ("WORKERS_KUBEADM_EXTRA_CONFIG", WORKERS_KUBEADM_EXTRA_CONFIG),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect();
    let generated = substitute(&template, &variables);
    assert!(!generated.contains("${"), "{generated}");
    let cluster_file = work.path().join("test1.yaml");
    std::fs::write(&cluster_file, &generated).unwrap();
    let hosts_file = work.path().join("hosts.yaml");
    std::fs::write(&hosts_file, hosts("metal3", 4)).unwrap();

    let server = Serve::start_in(work.path());
    let log = server.log.clone();
    // The namespace the template names, as the CAPM3 dev environment uses it.
    let kc = work.path().join("metal3.kubeconfig");
    std::fs::copy(&server.kubeconfig, &kc).unwrap();
    kubectl_ok(&kc, &["create", "namespace", "metal3"]);
    kubectl_ok(
        &kc,
        &["config", "set-context", "--current", "--namespace=metal3"],
    );
    kubectl_ok(&kc, &["apply", "-f", hosts_file.to_str().unwrap()]);
    kubectl_ok(&kc, &["apply", "-f", cluster_file.to_str().unwrap()]);

    let machines = wait_machines_running(&kc, &log, 4, Duration::from_secs(240));
    until("Cluster Provisioned", Duration::from_secs(60), &log, || {
        cluster_provisioned(&kc, "test1")
    });
    let control_planes = machines
        .iter()
        .filter(|m| {
            m["metadata"]["labels"]
                .get("cluster.x-k8s.io/control-plane")
                .is_some()
        })
        .count();
    assert_eq!(control_planes, 3);
    for machine in &machines {
        let provider_id = machine["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(
            provider_id.starts_with("metal3://metal3/node-"),
            "{}: providerID {provider_id:?}",
            name(machine)
        );
        assert_eq!(machine["spec"]["version"], "v1.33.1");
    }
    let data = items(&kc, "metal3datas");
    assert_eq!(data.len(), 4, "one Metal3Data per machine: {data:?}");

    let workload = work.path().join("test1.kubeconfig");
    until("workload kubeconfig", Duration::from_secs(60), &log, || {
        let (ok, text) = capstan(&kc, &["kubeconfig", "test1", "-n", "metal3"]);
        if !ok {
            return Err(text);
        }
        std::fs::write(&workload, text).unwrap();
        Ok(())
    });
    let nodes = items(&workload, "nodes");
    assert_eq!(nodes.len(), 4);
    for node in &nodes {
        let provider_id = node["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(
            machines
                .iter()
                .any(|m| m["spec"]["providerID"].as_str() == Some(provider_id)),
            "node {} has providerID {provider_id:?}, which no Machine has",
            name(node)
        );
        assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.33.1");
    }
    let inits = kubeadm_inits(&workload).unwrap();
    assert_eq!(inits.len(), 1, "{inits:?}");

    let (ok, tree) = capstan(&kc, &["describe", "cluster", "test1", "-n", "metal3"]);
    assert!(ok, "describe cluster: {tree}");
    for part in [
        "Cluster/test1",
        "KubeadmControlPlane/test1",
        "MachineDeployment/test1",
    ] {
        assert!(
            tree.contains(part),
            "describe cluster lacks {part}:\n{tree}"
        );
    }
    drop(server);
}

#[test]
fn substitution_follows_clusterctl() {
    let variables: BTreeMap<&str, String> = [("A", "1".to_owned())].into_iter().collect();
    assert_eq!(
        substitute("${A} ${B:=[\"x\"]} ${C:-0} ${A:-9}", &variables),
        "1 [\"x\"] 0 1"
    );
    assert!(std::panic::catch_unwind(|| substitute("${MISSING}", &variables)).is_err());
}
