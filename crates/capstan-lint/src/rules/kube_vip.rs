//! kube-vip as a static pod written by a KubeadmControlPlane: the deprecated `vip_address`
//! variable, and the Kubernetes ≥ 1.29 requirement to run the first control-plane node's kube-vip
//! with `super-admin.conf`.
//!
//! A kube-vip pod is a `files[]` entry whose content parses as a Pod with a container whose image
//! contains `kube-vip`, or any Pod in a file whose path ends in `kube-vip.yaml`.

use capstan_model::kubeadm::KubeadmConfigSpec;
use capstan_model::path::FieldPath;
use capstan_model::version::KubernetesVersion;
use serde_json::Value;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::embedded::{self, EmbeddedDoc, Encoding};
use crate::index::{Entry, KCP_CONFIG_PATH};

/// One environment variable of the kube-vip container.
#[derive(Debug)]
pub(crate) struct EnvVar {
    pub name: String,
    pub value: Option<String>,
    /// Path in the embedded Pod.
    pub path: FieldPath,
}

/// A kube-vip container found in a KubeadmConfigSpec's files.
#[derive(Debug)]
pub(crate) struct KubeVip<'a> {
    /// The Pod document, inside `files[i].content`.
    pub doc: EmbeddedDoc<'a>,
    pub env: Vec<EnvVar>,
}

impl KubeVip<'_> {
    /// The value of variable `name`, with its path.
    pub fn var(&self, name: &str) -> Option<&EnvVar> {
        self.env.iter().find(|e| e.name == name)
    }
}

/// How a file's content is encoded, or `None` for encodings lint does not read (gzip).
pub(crate) fn file_encoding(encoding: Option<&str>) -> Option<Encoding> {
    match encoding.unwrap_or_default() {
        "" => Some(Encoding::Plain),
        "base64" | "b64" => Some(Encoding::Base64),
        _ => None,
    }
}

/// Every kube-vip container in the files of `config` (at `config_path` in `entry`).
pub(crate) fn find<'a>(
    entry: &Entry<'a>,
    config: &KubeadmConfigSpec,
    config_path: &FieldPath,
) -> Vec<KubeVip<'a>> {
    let mut found = Vec::new();
    for (i, file) in config.files.iter().enumerate() {
        let Some(encoding) = file_encoding(file.encoding.as_deref()) else {
            continue;
        };
        let by_path = file.path.ends_with("kube-vip.yaml");
        let field = config_path.key("files").index(i).key("content");
        for doc in embedded::documents(entry.obj, &field, encoding) {
            if doc.kind() != "Pod" {
                continue;
            }
            let containers = doc
                .doc
                .value
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut env = Vec::new();
            let mut is_kube_vip = false;
            for (c, container) in containers.iter().enumerate() {
                let image = container
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !(by_path || image.contains("kube-vip")) {
                    continue;
                }
                is_kube_vip = true;
                let vars = container.get("env").and_then(Value::as_array);
                for (e, var) in vars.into_iter().flatten().enumerate() {
                    let Some(name) = var.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    env.push(EnvVar {
                        name: name.to_owned(),
                        value: var.get("value").and_then(Value::as_str).map(str::to_owned),
                        path: FieldPath::parse(&format!("spec.containers[{c}].env[{e}]")),
                    });
                }
            }
            if is_kube_vip {
                found.push(KubeVip { doc, env });
            }
        }
    }
    found
}

/// Whether the init node's preKubeadmCommands switch kube-vip to `super-admin.conf`: a command
/// mentions it, or runs a file (named by path in the command) whose content mentions it.
fn switches_to_super_admin(config: &KubeadmConfigSpec) -> bool {
    const SUPER_ADMIN: &str = "super-admin.conf";
    config.pre_kubeadm_commands.iter().any(|command| {
        command.contains(SUPER_ADMIN)
            || config.files.iter().any(|file| {
                !file.path.is_empty()
                    && command.contains(file.path.as_str())
                    && file_text(file).is_some_and(|t| t.contains(SUPER_ADMIN))
            })
    })
}

fn file_text(file: &capstan_model::kubeadm::File) -> Option<String> {
    let content = file.content.as_deref()?;
    match file_encoding(file.encoding.as_deref())? {
        Encoding::Plain => Some(content.to_owned()),
        Encoding::Base64 => {
            use base64::Engine as _;
            let compact: String = content.split_whitespace().collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
    }
}

/// Runs the kube-vip rules on every KubeadmControlPlane.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let config_path = FieldPath::parse(KCP_CONFIG_PATH);
    for (entry, kcp) in ctx.index.control_planes() {
        let found = find(entry, &kcp.config, &config_path);
        for kube_vip in &found {
            vip_address(kube_vip, out);
        }
        let Some(first) = found.first() else {
            continue;
        };
        let Ok(version) = kcp.version.parse::<KubernetesVersion>() else {
            continue;
        };
        if version.at_least(1, 29) && !switches_to_super_admin(&kcp.config) {
            out.push(
                Diagnostic::new(
                    id::KUBE_VIP_SUPER_ADMIN,
                    format!("kube-vip on Kubernetes {version} is not switched to super-admin.conf for `kubeadm init`"),
                    first.doc.at(&FieldPath::root()),
                )
                .why("from 1.29 admin.conf has no rights until init finishes, so kube-vip cannot take its lease (`leases.coordination.k8s.io \"plndr-cp-lock\" is forbidden`), the VIP never comes up and init times out")
                .hint("in preKubeadmCommands, when /run/kubeadm/kubeadm.yaml exists, `sed -i 's#path: /etc/kubernetes/admin.conf#path: /etc/kubernetes/super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml`, and switch back in postKubeadmCommands")
                .related("Kubernetes version", entry.at(&FieldPath::parse("spec.version"))),
            );
        }
    }
}

fn vip_address(kube_vip: &KubeVip<'_>, out: &mut Vec<Diagnostic>) {
    let Some(var) = kube_vip.var("vip_address") else {
        return;
    };
    let value = var.value.clone().unwrap_or_default();
    let (address, prefix) = match value.split_once('/') {
        Some((a, p)) => (a.to_owned(), Some(p.to_owned())),
        None => (value.clone(), None),
    };
    let why = match &prefix {
        Some(_) => format!("with a CIDR suffix (\"{value}\") the lookup fails: `lookup {value}: no such host`, and the VIP never comes up"),
        None => "`vip_address` is deprecated and resolved as a name; a suffix added later breaks it (`lookup ADDRESS/32: no such host`)".to_owned(),
    };
    let subnet =
        prefix.unwrap_or_else(|| if address.contains(':') { "128" } else { "32" }.to_owned());
    out.push(
        Diagnostic::new(
            id::KUBE_VIP_VIP_ADDRESS,
            "kube-vip uses `vip_address`, which kube-vip resolves as a hostname",
            kube_vip.doc.at(&var.path),
        )
        .why(why)
        .hint(format!(
            "set `address: {address}` and `vip_subnet: \"{subnet}\"` instead"
        )),
    );
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text};

    #[test]
    fn vip_address_with_and_without_suffix() {
        let bad = BASE.replacen(
            "- name: address\n              value: 10.250.250.29",
            "- name: vip_address\n              value: 10.250.250.29/32",
            1,
        );
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::KUBE_VIP_VIP_ADDRESS)
            .expect("finding");
        assert!(d.why.as_deref().is_some_and(|w| w.contains("no such host")));
        assert_eq!(
            d.hint.as_deref(),
            Some("set `address: 10.250.250.29` and `vip_subnet: \"32\"` instead")
        );
        assert_eq!(
            d.location.embedded_path.as_deref(),
            Some("spec.containers[0].env[5]")
        );
        // The line is the env entry's line inside the block scalar.
        let line = BASE
            .lines()
            .position(|l| l.contains("- name: address"))
            .expect("line")
            + 1;
        assert_eq!(d.location.line as usize, line);
        let bad = BASE.replacen("- name: address\n", "- name: vip_address\n", 1);
        assert!(has_rule(&lint_text(&bad), id::KUBE_VIP_VIP_ADDRESS));
        assert!(!has_rule(&lint_text(BASE), id::KUBE_VIP_VIP_ADDRESS));
    }

    #[test]
    fn super_admin_switch_on_1_29() {
        let bad = BASE.replacen(
            "super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml; fi",
            "admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml; fi",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::KUBE_VIP_SUPER_ADMIN));
        // Not needed before 1.29.
        let old = bad.replace("v1.31.4", "v1.28.9");
        assert!(!has_rule(&lint_text(&old), id::KUBE_VIP_SUPER_ADMIN));
        assert!(!has_rule(&lint_text(BASE), id::KUBE_VIP_SUPER_ADMIN));
    }
}
