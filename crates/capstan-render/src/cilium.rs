//! Cilium: the user's own rendered manifest (`cilium install --dry-run` output), checked against
//! what this cluster needs, patched when allowed, and shipped to the new cluster by a
//! ClusterResourceSet; plus the exact `cilium install` command and Helm values that render a
//! manifest which needs no patching.
//!
//! What the cluster needs from Cilium, and why:
//! - `KUBERNETES_SERVICE_HOST`/`PORT` = the VIP on the agent and operator: kube-proxy is skipped, so
//!   the `kubernetes` Service address does not work until Cilium runs; without the VIP the agent
//!   waits for itself (`dial tcp 10.96.0.1:443: i/o timeout`).
//! - `kube-proxy-replacement: "true"`: kubeadm skips its kube-proxy phase.
//! - `routing-mode: native` over the pod CIDR with `auto-direct-node-routes`, and `ipam:
//!   kubernetes`: pod ranges are the per-node ranges kubeadm assigns from the pod CIDR, routed
//!   without tunnels.
//! - `enable-bgp-control-plane: "true"` when the spec has BGP.

use std::path::Path;

use capstan_manifest::LoadedObject;
use capstan_model::capi::{v1beta1 as capi1, v1beta2 as capi2};
use capstan_model::core::{ByteString, ConfigMap, Secret};
use capstan_model::meta::{LABEL_CLUSTER_NAME, LabelSelector};
use capstan_model::path::FieldPath;
use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::cluster::object_meta;
use crate::error::{Problem, RenderError};
use crate::validate::Plan;
use crate::{CapiVersion, LABEL_CNI, encode};

/// Key of the manifest in the ConfigMap (or Secret) the ClusterResourceSet applies.
pub const MANIFEST_KEY: &str = "cilium.yaml";

/// ConfigMaps are limited to 1 MiB in total; leave room for metadata.
const MAX_MANIFEST_BYTES: usize = 1_000_000;

/// Client-side `kubectl apply` keeps a copy of the object in an annotation limited to 256 KiB.
const CLIENT_SIDE_APPLY_LIMIT: usize = 256 * 1024;

/// The manifest after checking: its text and what was learned from it.
#[derive(Debug)]
pub(crate) struct CheckedManifest {
    /// The text to ship: the file as it was, or re-serialised after fixes.
    pub text: String,
    /// Cilium's namespace (of the `cilium-config` ConfigMap).
    pub namespace: String,
    /// Cilium version from the agent's image tag (`1.16.5`).
    pub image_version: Option<String>,
    /// Whether the manifest holds Secrets (then it is shipped in a Secret, not a ConfigMap).
    pub has_secrets: bool,
    /// One line per fix applied, and other remarks.
    pub notices: Vec<String>,
}

/// A setting the cluster needs in `cilium-config`.
struct Setting {
    key: &'static str,
    value: String,
    why: &'static str,
}

fn required_settings(plan: &Plan<'_>) -> Vec<Setting> {
    let native_cidr_key = if plan.pod_cidr.addr().is_ipv4() {
        "ipv4-native-routing-cidr"
    } else {
        "ipv6-native-routing-cidr"
    };
    let mut settings = vec![
        Setting {
            key: "kube-proxy-replacement",
            value: "true".to_owned(),
            why: "kubeadm skips kube-proxy, so Cilium must replace it",
        },
        Setting {
            key: "routing-mode",
            value: "native".to_owned(),
            why: "pods are routed natively, without tunnels",
        },
        Setting {
            key: native_cidr_key,
            value: plan.pod_cidr.to_string(),
            why: "the native-routing CIDR is the pod CIDR",
        },
        Setting {
            key: "auto-direct-node-routes",
            value: "true".to_owned(),
            why: "nodes on one L2 network route pod ranges directly",
        },
        Setting {
            key: "ipam",
            value: "kubernetes".to_owned(),
            why: "pod ranges are the per-node ranges kubeadm assigns from the pod CIDR",
        },
    ];
    if plan.bgp.is_some() {
        settings.push(Setting {
            key: "enable-bgp-control-plane",
            value: "true".to_owned(),
            why: "the spec configures BGP",
        });
    }
    settings
}

/// Walks the manifest's objects, fixing deviations from what the cluster needs or recording them.
struct Checker<'p> {
    plan: &'p Plan<'p>,
    fix: bool,
    problems: Vec<Problem>,
    notices: Vec<String>,
    changed: bool,
    /// Indices (into the manifest's objects) of the objects a fix changed.
    modified: Vec<usize>,
    /// Index of the object being checked.
    current: usize,
}

impl Checker<'_> {
    /// Records a deviation at `path` of `object`: as a notice saying what was patched (`fix`), or
    /// as a problem saying what is wrong.
    fn deviation(&mut self, object: &LoadedObject, path: &FieldPath, problem: String, fix: String) {
        let location = object.location(path);
        let subject = describe(object);
        if self.fix {
            self.notices
                .push(format!("{location}: {subject}: {path}: patched: {fix}"));
            self.changed = true;
            if !self.modified.contains(&self.current) {
                self.modified.push(self.current);
            }
        } else {
            self.problems.push(Problem {
                location: Some(location),
                field: Some(format!("{subject}: {path}")),
                message: problem,
            });
        }
    }

    fn missing(&mut self, file: &str, what: String) {
        self.problems.push(Problem {
            location: Some(file.to_owned()),
            field: None,
            message: format!("{what}; is this the output of `cilium install --dry-run`?"),
        });
    }

    fn check_config(&mut self, object: &mut LoadedObject) {
        let settings = required_settings(self.plan);
        for setting in settings {
            let path = FieldPath::root().key("data").key(setting.key);
            let current = object
                .value
                .get("data")
                .and_then(|d| d.get(setting.key))
                .cloned();
            let ok = current.as_ref().and_then(Value::as_str) == Some(setting.value.as_str());
            if ok {
                continue;
            }
            let was = current
                .as_ref()
                .map_or_else(|| "missing".to_owned(), ToString::to_string);
            let problem = format!(
                "is {was}; this cluster needs {:?} ({})",
                setting.value, setting.why
            );
            let fix = format!("set to {:?} (was {was}): {}", setting.value, setting.why);
            self.deviation(object, &path, problem, fix);
            if self.fix
                && let Some(map) = object.value.as_object_mut()
            {
                let data = map
                    .entry("data")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
                if !data.is_object() {
                    *data = Value::Object(serde_json::Map::new());
                }
                if let Some(data) = data.as_object_mut() {
                    data.insert(setting.key.to_owned(), Value::from(setting.value.clone()));
                }
            }
        }
    }

    /// Checks (and fixes) the API server environment of the named containers of a workload.
    fn check_env(&mut self, object: &mut LoadedObject, containers: &[(&str, &str, bool)]) {
        let wanted = [
            ("KUBERNETES_SERVICE_HOST", self.plan.vip.to_string()),
            (
                "KUBERNETES_SERVICE_PORT",
                self.plan.spec.control_plane.port.to_string(),
            ),
        ];
        for &(list, name, required) in containers {
            let list_path = FieldPath::parse("spec.template.spec").key(list);
            let index = list_path
                .lookup(&object.value)
                .and_then(Value::as_array)
                .and_then(|items| {
                    items
                        .iter()
                        .position(|c| c.get("name").and_then(Value::as_str) == Some(name))
                });
            let Some(index) = index else {
                if required {
                    self.problems.push(Problem {
                        location: Some(object.location(&list_path)),
                        field: Some(describe(object)),
                        message: format!(
                            "has no container {name:?}; is this the output of `cilium install --dry-run`?"
                        ),
                    });
                }
                continue;
            };
            let container_path = list_path.index(index);
            for (variable, value) in &wanted {
                let env_path = container_path.key("env");
                let env = env_path.lookup(&object.value).and_then(Value::as_array);
                let position = env.and_then(|env| {
                    env.iter()
                        .position(|e| e.get("name").and_then(Value::as_str) == Some(variable))
                });
                let current = position
                    .and_then(|p| env.and_then(|env| env.get(p)))
                    .cloned();
                let ok = current
                    .as_ref()
                    .and_then(|e| e.get("value"))
                    .and_then(Value::as_str)
                    == Some(value.as_str())
                    && current
                        .as_ref()
                        .is_some_and(|e| e.get("valueFrom").is_none());
                if ok {
                    continue;
                }
                let at = match position {
                    Some(p) => env_path.index(p),
                    None => env_path.clone(),
                };
                // Without kube-proxy the `kubernetes` Service address works only once Cilium
                // runs, so Cilium itself must reach the API server through the VIP.
                let was = current
                    .as_ref()
                    .and_then(|e| e.get("value"))
                    .map_or_else(|| "missing".to_owned(), ToString::to_string);
                let problem = format!(
                    "{variable} of container {name:?} is {was}; set it to the control-plane endpoint {value:?}"
                );
                let fix = format!(
                    "{variable} of container {name:?} set to the control-plane endpoint {value:?} (was {was})"
                );
                self.deviation(object, &at, problem, fix);
                if self.fix {
                    let entry = json!({"name": variable, "value": value});
                    if let Some(container) =
                        object.value.pointer_mut(&container_path.to_json_pointer())
                        && let Some(map) = container.as_object_mut()
                    {
                        let env = map.entry("env").or_insert_with(|| Value::Array(Vec::new()));
                        if !env.is_array() {
                            *env = Value::Array(Vec::new());
                        }
                        if let Some(env) = env.as_array_mut() {
                            match position {
                                Some(p) if p < env.len() => env[p] = entry,
                                _ => env.push(entry),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `Kind namespace/name` of an object, for messages.
fn describe(object: &LoadedObject) -> String {
    let text = |field: &str| {
        object
            .value
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let kind = object
        .value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = text("namespace");
    if namespace.is_empty() {
        format!("{kind} {}", text("name"))
    } else {
        format!("{kind} {namespace}/{}", text("name"))
    }
}

fn is(object: &LoadedObject, kind: &str, name: &str) -> bool {
    object.value.get("kind").and_then(Value::as_str) == Some(kind)
        && object
            .value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            == Some(name)
}

/// The Cilium version of the agent's image (`quay.io/cilium/cilium:v1.16.5@sha256:…` → `1.16.5`).
fn image_version(object: &LoadedObject) -> Option<String> {
    let containers = FieldPath::parse("spec.template.spec.containers").lookup(&object.value)?;
    let image = containers
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("cilium-agent"))?
        .get("image")?
        .as_str()?;
    let without_digest = image.split('@').next()?;
    let (_, tag) = without_digest.rsplit_once(':')?;
    // A registry port (`host:5000/cilium`) is not a tag.
    if tag.contains('/') {
        return None;
    }
    Some(tag.trim_start_matches('v').to_owned())
}

/// Reads the manifest, checks it and, when allowed, fixes it.
pub(crate) fn check_manifest(
    plan: &Plan<'_>,
    spec_dir: &Path,
) -> Result<CheckedManifest, Vec<Problem>> {
    let spec = plan.spec;
    let path = spec_dir.join(&spec.cilium.manifest);
    let file = path.display().to_string();
    let hint = install_command(plan, "kube-system", spec.cilium.version.as_deref());
    let at = FieldPath::parse("cilium.manifest");
    let text = std::fs::read_to_string(&path).map_err(|err| {
        vec![spec.source.problem(
            &at,
            format!("cannot read {file}: {err}; render the manifest with: {hint}"),
        )]
    })?;
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(vec![spec.source.problem(
            &at,
            format!(
                "{file} is {} bytes, more than a ConfigMap holds (1 MiB); leave out what the cluster does not need (Hubble UI, CRDs the operator creates)",
                text.len()
            ),
        )]);
    }
    let mut objects = capstan_manifest::load_str(&file, &text).map_err(|err| {
        vec![Problem {
            location: None,
            field: None,
            message: err.to_string(),
        }]
    })?;

    let mut checker = Checker {
        plan,
        fix: spec.cilium.fix,
        problems: Vec::new(),
        notices: Vec::new(),
        changed: false,
        modified: Vec::new(),
        current: 0,
    };
    let mut namespace = None;
    let mut version = None;
    let (mut config, mut agent, mut operator) = (false, false, false);
    for (index, object) in objects.iter_mut().enumerate() {
        checker.current = index;
        if is(object, "ConfigMap", "cilium-config") {
            config = true;
            namespace = object
                .value
                .get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            checker.check_config(object);
        } else if is(object, "DaemonSet", "cilium") {
            agent = true;
            version = image_version(object);
            checker.check_env(
                object,
                &[
                    ("containers", "cilium-agent", true),
                    ("initContainers", "config", false),
                    ("initContainers", "clean-cilium-state", false),
                ],
            );
        } else if is(object, "Deployment", "cilium-operator") {
            operator = true;
            checker.check_env(object, &[("containers", "cilium-operator", true)]);
            let replicas = object.value["spec"]["replicas"].as_u64().unwrap_or(1);
            let nodes = u64::from(spec.control_plane.replicas)
                + spec
                    .worker_pools
                    .iter()
                    .map(|p| u64::from(p.replicas))
                    .sum::<u64>();
            if replicas > nodes {
                // Cilium's chart keeps operator replicas on different nodes.
                checker.notices.push(format!(
                    "{}: {}: spec.replicas: {replicas} operator replicas, but the cluster has {nodes} node(s); the extra replicas stay Pending (render with --set operator.replicas={nodes})",
                    object.location(&FieldPath::parse("spec.replicas")),
                    describe(object),
                ));
            }
        }
    }
    for (found, what) in [
        (config, "no ConfigMap cilium-config"),
        (agent, "no DaemonSet cilium"),
        (operator, "no Deployment cilium-operator"),
    ] {
        if !found {
            checker.missing(&file, format!("{file} has {what}"));
        }
    }
    if !checker.problems.is_empty() {
        let hint = install_command(
            plan,
            namespace.as_deref().unwrap_or("kube-system"),
            spec.cilium.version.as_deref().or(version.as_deref()),
        );
        let mut problems = checker.problems;
        problems.push(spec.source.problem(
            &at,
            format!(
                "render a manifest with the settings this cluster needs: {hint}{}",
                if spec.cilium.fix {
                    ""
                } else {
                    " (or set cilium.fix: true to have them patched in)"
                }
            ),
        ));
        return Err(problems);
    }
    let has_secrets = objects
        .iter()
        .any(|o| o.value.get("kind").and_then(Value::as_str) == Some("Secret"));
    let mut notices = checker.notices;
    if let (Some(wanted), Some(found)) = (&spec.cilium.version, &version)
        && wanted.trim_start_matches('v') != found
    {
        notices.push(format!(
                "{file}: the manifest is Cilium {found}, cilium.version says {wanted}; re-render the manifest or correct cilium.version"
            ));
    }
    if has_secrets {
        notices.push(format!(
            "{file}: the manifest holds Secrets, so it is shipped in a Secret (written with mode 0600) rather than a ConfigMap"
        ));
    }
    let text = if checker.changed {
        splice(&text, &mut objects, &checker.modified)
    } else {
        text
    };
    if text.len() > CLIENT_SIDE_APPLY_LIMIT {
        notices.push(format!(
            "{file}: the manifest is larger than 256 KiB; apply cluster/cilium.yaml with `kubectl apply --server-side`"
        ));
    }
    Ok(CheckedManifest {
        text,
        namespace: namespace.unwrap_or_else(|| "kube-system".to_owned()),
        image_version: version,
        has_secrets,
        notices,
    })
}

/// Whether a line opens a YAML document (`---`, alone or followed by a space).
fn is_document_marker(line: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    line == "---" || line.starts_with("--- ") || line.starts_with("---\t")
}

/// The manifest with the documents of the modified objects re-serialised and every other line kept
/// as the user's file has it (comments, quoting, order).
///
/// Kubernetes tools read manifests as YAML 1.1, where `defaultMode: 0400` is octal (256); this crate
/// reads YAML 1.2, where it is 400. Before a modified object is written back, integers written as
/// YAML 1.1 octals in the file are given their octal value, so the output means what the input
/// meant to `kubectl` and to the ClusterResourceSet controller.
fn splice(original: &str, objects: &mut [LoadedObject], modified: &[usize]) -> String {
    let lines: Vec<&str> = original.split_inclusive('\n').collect();
    let markers: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| is_document_marker(line))
        .map(|(i, _)| i + 1)
        .collect();
    // The document holding a line: (marker before it or 0, marker after it or past the end).
    let chunk_of = |line: usize| {
        let start = markers
            .iter()
            .rev()
            .find(|m| **m < line)
            .copied()
            .unwrap_or(0);
        let end = markers
            .iter()
            .find(|m| **m > line)
            .copied()
            .unwrap_or(lines.len() + 1);
        (start, end)
    };
    let line_of = |object: &LoadedObject| usize::try_from(object.origin.line).unwrap_or(usize::MAX);
    let mut chunks: Vec<(usize, usize)> = modified
        .iter()
        .filter_map(|&i| objects.get(i))
        .map(|object| chunk_of(line_of(object)))
        .collect();
    chunks.sort_unstable();
    chunks.dedup();
    let mut replaced: Vec<((usize, usize), String)> = Vec::new();
    for chunk in chunks {
        let mut text = String::new();
        // Every object of the document is written again (a `List` document holds several), each
        // as its own document.
        for object in objects
            .iter_mut()
            .filter(|object| chunk_of(line_of(object)) == chunk)
        {
            restore_yaml11_octals(object, &lines);
            let first_line = line_of(object);
            if text.is_empty() {
                // Keep the comments (`# Source: …`) above the object.
                let above = lines
                    .get(chunk.0..first_line.saturating_sub(1).max(chunk.0))
                    .unwrap_or_default();
                text.extend(above.iter().copied().filter(|l| {
                    let t = l.trim();
                    t.is_empty() || t.starts_with('#')
                }));
            } else {
                text.push_str("---\n");
            }
            text.push_str(&capstan_manifest::to_yaml(&object.value));
        }
        replaced.push((chunk, text));
    }
    let mut out = String::with_capacity(original.len() + 256);
    let mut line = 1;
    while line <= lines.len() {
        if let Some(((_, end), text)) = replaced.iter().find(|((start, _), _)| *start + 1 == line) {
            out.push_str(text);
            line = *end;
            continue;
        }
        if let Some(text) = lines.get(line - 1) {
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        line += 1;
    }
    out
}

/// Gives integers written as YAML 1.1 octals (`0400`) their octal value.
fn restore_yaml11_octals(object: &mut LoadedObject, lines: &[&str]) {
    let mut integers = Vec::new();
    collect_integers(&object.value, &FieldPath::root(), &mut integers);
    for path in integers {
        let line_number = usize::try_from(object.line_of(&path)).unwrap_or(0);
        let Some(line) = line_number.checked_sub(1).and_then(|i| lines.get(i)) else {
            continue;
        };
        let after = match path.segments().last() {
            Some(capstan_model::path::PathSegment::Key(key)) => line
                .find(&format!("{key}:"))
                .map(|at| &line[at + key.len() + 1..]),
            Some(capstan_model::path::PathSegment::Index(_)) => {
                line.find("- ").map(|at| &line[at + 2..])
            }
            None => None,
        };
        let Some(after) = after else { continue };
        let token: String = after
            .trim_start()
            .chars()
            .take_while(|c| !matches!(c, ',' | '}' | ']' | ' ' | '#' | '\r' | '\n'))
            .collect();
        let is_octal = token.len() > 1
            && token.starts_with('0')
            && token.bytes().all(|b| (b'0'..=b'7').contains(&b));
        if let (true, Ok(value)) = (is_octal, u64::from_str_radix(&token, 8))
            && let Some(slot) = object.value.pointer_mut(&path.to_json_pointer())
        {
            *slot = Value::from(value);
        }
    }
}

fn collect_integers(value: &Value, path: &FieldPath, out: &mut Vec<FieldPath>) {
    match value {
        Value::Number(n) if n.is_u64() || n.is_i64() => out.push(path.clone()),
        Value::Object(map) => {
            for (key, child) in map {
                collect_integers(child, &path.key(key.as_str()), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect_integers(child, &path.index(i), out);
            }
        }
        _ => {}
    }
}

/// The Cilium version for the install command: the spec's, else the manifest's.
pub(crate) fn version<'a>(plan: &'a Plan<'_>, checked: &'a CheckedManifest) -> Option<&'a str> {
    plan.spec
        .cilium
        .version
        .as_deref()
        .or(checked.image_version.as_deref())
}

/// The `cilium install` command that renders a manifest this cluster accepts without fixes.
pub(crate) fn install_command(plan: &Plan<'_>, namespace: &str, version: Option<&str>) -> String {
    let mut command = String::from("cilium install");
    if let Some(version) = version {
        command.push_str(&format!(" --version {}", version.trim_start_matches('v')));
    }
    command.push_str(&format!(" --namespace {namespace}"));
    for (key, value) in helm_settings(plan) {
        command.push_str(&format!(" --set {key}={value}"));
    }
    command.push_str(&format!(" --dry-run > {}", plan.spec.cilium.manifest));
    command
}

/// The Helm settings behind both the command and the values file, as `dotted.key` → value.
fn helm_settings(plan: &Plan<'_>) -> Vec<(&'static str, String)> {
    let native_cidr_key = if plan.pod_cidr.addr().is_ipv4() {
        "ipv4NativeRoutingCIDR"
    } else {
        "ipv6NativeRoutingCIDR"
    };
    let mut settings = vec![
        ("k8sServiceHost", plan.vip.to_string()),
        ("k8sServicePort", plan.spec.control_plane.port.to_string()),
        ("kubeProxyReplacement", "true".to_owned()),
        ("routingMode", "native".to_owned()),
        (native_cidr_key, plan.pod_cidr.to_string()),
        ("autoDirectNodeRoutes", "true".to_owned()),
        ("ipam.mode", "kubernetes".to_owned()),
    ];
    if plan.bgp.is_some() {
        settings.push(("bgpControlPlane.enabled", "true".to_owned()));
    }
    settings
}

/// The same settings as a Helm values file.
pub(crate) fn helm_values(plan: &Plan<'_>) -> String {
    let mut root = Value::Object(serde_json::Map::new());
    for (key, value) in helm_settings(plan) {
        let typed = match value.as_str() {
            "true" => Value::Bool(true),
            _ if key == "k8sServicePort" => value
                .parse::<u64>()
                .map_or_else(|_| Value::from(value.clone()), Value::from),
            _ => Value::from(value),
        };
        // The keys are fixed above and never both a leaf and a parent, so indexing only ever
        // creates objects.
        match key.split_once('.') {
            Some((parent, child)) => root[parent][child] = typed,
            None => root[key] = typed,
        }
    }
    capstan_manifest::to_yaml(&root)
}

/// The ConfigMap (or Secret) holding the manifest, and the ClusterResourceSet that applies it to
/// this cluster only (selected by the CNI label and the cluster's name).
pub(crate) fn objects(
    plan: &Plan<'_>,
    checked: &CheckedManifest,
    api_version: CapiVersion,
) -> Result<Vec<Value>, RenderError> {
    let name = format!("{}-cilium", plan.spec.name);
    let mut objects = Vec::new();
    let kind = if checked.has_secrets {
        let secret = Secret {
            metadata: object_meta(plan, name.clone(), &[]),
            type_: Some("addons.cluster.x-k8s.io/resource-set".to_owned()),
            data: Some(BTreeMap::from([(
                MANIFEST_KEY.to_owned(),
                ByteString(checked.text.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        objects.push(encode(&secret)?);
        "Secret"
    } else {
        let config_map = ConfigMap {
            metadata: object_meta(plan, name.clone(), &[]),
            data: Some(BTreeMap::from([(
                MANIFEST_KEY.to_owned(),
                checked.text.clone(),
            )])),
            ..ConfigMap::default()
        };
        objects.push(encode(&config_map)?);
        "ConfigMap"
    };
    let spec = capi1::ClusterResourceSetSpec {
        cluster_selector: LabelSelector {
            match_labels: Some(BTreeMap::from([
                (LABEL_CNI.0.to_owned(), LABEL_CNI.1.to_owned()),
                (LABEL_CLUSTER_NAME.to_owned(), plan.spec.name.clone()),
            ])),
            match_expressions: None,
        },
        resources: vec![capi1::ResourceRef {
            name: name.clone(),
            kind: kind.to_owned(),
        }],
        strategy: Some(plan.spec.cilium.strategy.as_str().to_owned()),
    };
    let crs = match api_version {
        CapiVersion::V1beta1 => {
            let mut crs = capi1::ClusterResourceSet::new(name.clone(), None, spec);
            crs.metadata = object_meta(plan, name, &[]);
            encode(&crs)?
        }
        CapiVersion::V1beta2 => {
            let mut crs = capi2::ClusterResourceSet::new(name.clone(), None, spec);
            crs.metadata = object_meta(plan, name, &[]);
            encode(&crs)?
        }
    };
    objects.push(crs);
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "\
# header comment
---
# Source: a.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: keep}
data:
  x: 'quoted as written'
---
# Source: b.yaml
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: change
spec:
  mode: 0400
  list:
  - 0644
  - 10
  decimal: 0
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: first}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: second}
";

    #[test]
    fn splice_rewrites_only_changed_documents() {
        let mut objects = capstan_manifest::load_str("m.yaml", MANIFEST).unwrap();
        objects[1].value["metadata"]["labels"] = json!({"patched": "yes"});
        let text = splice(MANIFEST, &mut objects, &[1]);
        assert!(
            text.starts_with("# header comment\n---\n# Source: a.yaml\n"),
            "{text}"
        );
        assert!(
            text.contains("metadata: {name: keep}\ndata:\n  x: 'quoted as written'\n"),
            "{text}"
        );
        assert!(
            text.contains("# Source: b.yaml\napiVersion: apps/v1\n"),
            "{text}"
        );
        assert!(text.contains("patched: \"yes\""), "{text}");
        let again = capstan_manifest::load_str("m.yaml", &text).unwrap();
        assert_eq!(again.len(), 4);
        // YAML 1.1 octals keep their value; plain decimals are untouched.
        assert_eq!(again[1].value["spec"]["mode"], 256);
        assert_eq!(again[1].value["spec"]["list"], json!([420, 10]));
        assert_eq!(again[1].value["spec"]["decimal"], 0);
        assert_eq!(again[2].value["metadata"]["name"], "first");
    }

    #[test]
    fn splice_writes_every_item_of_a_changed_list() {
        let mut objects = capstan_manifest::load_str("m.yaml", MANIFEST).unwrap();
        objects[3].value["data"] = json!({"k": "v"});
        let text = splice(MANIFEST, &mut objects, &[3]);
        let again = capstan_manifest::load_str("m.yaml", &text).unwrap();
        let names: Vec<_> = again
            .iter()
            .map(|o| o.value["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["keep", "change", "first", "second"]);
        assert_eq!(again[3].value["data"]["k"], "v");
        // The DaemonSet was not touched, so its octal stays as written.
        assert!(text.contains("  mode: 0400\n"));
    }

    #[test]
    fn image_versions() {
        let object = |image: &str| {
            LoadedObject::new(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "cilium-agent", "image": image}]}}}}),
                capstan_manifest::Origin::new("m.yaml", 1),
            )
        };
        assert_eq!(
            image_version(&object("quay.io/cilium/cilium:v1.16.5@sha256:abc")).as_deref(),
            Some("1.16.5")
        );
        assert_eq!(image_version(&object("registry:5000/cilium")), None);
        assert_eq!(image_version(&object("cilium")), None);
    }
}
