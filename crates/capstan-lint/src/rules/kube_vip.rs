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
    /// The index `i` of the file in `files`.
    pub file: usize,
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
                found.push(KubeVip { file: i, doc, env });
            }
        }
    }
    found
}

/// Whether the init node's preKubeadmCommands switch kube-vip to `super-admin.conf`: a command
/// mentions it, or runs a file (named by path in the command) whose content mentions it. The
/// kube-vip manifests themselves (`skip`) do not count: commands name them to edit them.
fn switches_to_super_admin(config: &KubeadmConfigSpec, skip: &[usize]) -> bool {
    const SUPER_ADMIN: &str = "super-admin.conf";
    config.pre_kubeadm_commands.iter().any(|command| {
        command.contains(SUPER_ADMIN)
            || config.files.iter().enumerate().any(|(i, file)| {
                !skip.contains(&i)
                    && !file.path.is_empty()
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

/// The path of a volume of the kube-vip Pod that mounts `super-admin.conf`, if any.
fn super_admin_mount(kube_vip: &KubeVip<'_>) -> Option<FieldPath> {
    let volumes = kube_vip
        .doc
        .doc
        .value
        .pointer("/spec/volumes")?
        .as_array()?;
    volumes.iter().enumerate().find_map(|(i, volume)| {
        let path = volume.pointer("/hostPath/path")?.as_str()?;
        path.ends_with("super-admin.conf")
            .then(|| FieldPath::parse(&format!("spec.volumes[{i}].hostPath.path")))
    })
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
        let kube_vip_files: Vec<usize> = found.iter().map(|k| k.file).collect();
        let switched = switches_to_super_admin(&kcp.config, &kube_vip_files);
        if let Some(mount) = super_admin_mount(first) {
            // The manifest itself uses super-admin.conf: right for `kubeadm init` on ≥ 1.29 only.
            let joins = kcp.replicas.unwrap_or(1) > 1;
            let problem = if !version.at_least(1, 29) {
                Some(format!(
                    "kubeadm {version} does not write super-admin.conf (it exists from 1.29)"
                ))
            } else if joins && !switched {
                Some("only the first control-plane node (kubeadm init) has super-admin.conf; on joining nodes the mount is an empty directory and kube-vip cannot start".to_owned())
            } else {
                None
            };
            if let Some(problem) = problem {
                out.push(
                    Diagnostic::new(
                        id::KUBE_VIP_SUPER_ADMIN,
                        "kube-vip mounts super-admin.conf on every control-plane node",
                        first.doc.at(&mount),
                    )
                    .why(problem)
                    .hint("mount /etc/kubernetes/admin.conf in the manifest, and switch it to super-admin.conf in preKubeadmCommands only when /run/kubeadm/kubeadm.yaml exists (the init node) on Kubernetes ≥ 1.29")
                    .related("Kubernetes version", entry.at(&FieldPath::parse("spec.version"))),
                );
            }
            continue;
        }
        if version.at_least(1, 29) && !switched {
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

    #[test]
    fn super_admin_in_the_manifest_breaks_joins() {
        // The manifest mounts super-admin.conf itself and nothing switches it for joining nodes.
        let mounted = BASE
            .replacen("          - name: kubeconfig\n            hostPath:\n              path: /etc/kubernetes/admin.conf", "          - name: kubeconfig\n            hostPath:\n              path: /etc/kubernetes/super-admin.conf", 1)
            .replacen("super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml; fi", "admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml; fi", 2);
        assert_ne!(mounted, BASE);
        let report = lint_text(&mounted);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::KUBE_VIP_SUPER_ADMIN)
            .unwrap_or_else(|| panic!("{}", report.render_human(false)));
        assert!(
            d.why
                .as_deref()
                .is_some_and(|w| w.contains("joining nodes")),
            "{d:?}"
        );
        assert_eq!(
            d.location.embedded_path.as_deref(),
            Some("spec.volumes[0].hostPath.path")
        );
        // A single control plane never joins: fine on 1.29+.
        let single = mounted.replacen("  replicas: 3\n", "  replicas: 1\n", 1);
        assert!(!has_rule(&lint_text(&single), id::KUBE_VIP_SUPER_ADMIN));
        // Before 1.29 kubeadm does not write the file at all.
        let old = single.replace("v1.31.4", "v1.28.9");
        assert!(has_rule(&lint_text(&old), id::KUBE_VIP_SUPER_ADMIN));
    }
}
