//! `capstan convert [FILE…] [-i]`: Cluster API manifests from `v1alpha4` / `v1beta1` to `v1beta2`.
//!
//! clusterctl does not upgrade Cluster API objects; this does, for the kinds capstan serves, with
//! the conversion its API server runs on every write (`capstan_apiserver::conversion::
//! ModelConverter`, i.e. `capstan_model::convert`), so `convert` and `capstan serve` cannot
//! disagree. Cluster API `v1alpha4` objects are first taken to `v1beta1`
//! (`capstan_model::convert::v1alpha4`, an `apiVersion` rewrite: `v1beta1` only added fields).
//!
//! Every converted object is converted back through the server's conversion and compared with the
//! input. The only differences allowed are those that mean the same in `v1beta2`: the version in a
//! reference (`v1beta2` references name the API group; the contract picks the version), a
//! reference namespace that is the object's own, a duration written another way (`5m` read back
//! as `5m0s`), kubeadm's own `apiVersion`/`kind`, and kubeadm settings `v1beta2` takes from
//! elsewhere when they agree with it (the Cluster's `clusterNetwork`, the control plane's
//! `spec.version`, the Cluster's name; Metal3Cluster `noCloudProvider` as `cloudProviderEnabled`).
//! Anything else would be lost: the document is refused with `file:line`, the field and what to
//! do, and nothing is written (not to stdout, not to any file of an `-i` run).
//!
//! The `clusterName` fields every version requires (of Machines, MachineSets, MachineDeployments
//! and MachineHealthChecks) are filled, when the input lacks them, from the other `clusterName` or
//! the cluster-name labels the object carries, with a note; an object that names no Cluster is
//! refused.
//!
//! Documents that are not Cluster API objects (Secrets, BareMetalHosts, IPPools, other providers'
//! infrastructure kinds, other groups) pass through unchanged, as do objects already in
//! `v1beta2`. The text of every unchanged part is kept, comments included (see
//! `capstan_manifest::rewrite_stream`).
//!
//! Exit codes: 0 converted (or nothing to convert), 1 refused (nothing written), 2 a file could
//! not be read or parsed (nothing written).

use std::io::Read;
use std::path::{Path, PathBuf};

use capstan_apiserver::conversion::{Converter, ModelConverter};
use capstan_manifest::{LoadedObject, STDIN_NAME};
use capstan_model::convert::{parse_nanos, stash::Stash, v1alpha4};
use capstan_model::kinds::KINDS;
use capstan_model::meta::{LABEL_CLUSTER_NAME, group_of, version_of};
use capstan_model::path::{FieldPath, PathSegment};
use serde_json::Value;

use crate::output::{Exit, Style, out};
use crate::stderr::errln;

/// The version everything is converted to.
const TARGET: &str = "v1beta2";

/// The Cluster API groups whose kinds are converted.
const CAPI_GROUPS: &[&str] = &[
    "cluster.x-k8s.io",
    "addons.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "infrastructure.cluster.x-k8s.io",
];

const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";

/// Arguments of `capstan convert`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit codes: 0 converted (or nothing to convert); 1 refused: a document cannot be converted without \
losing something (each reason printed with file:line, the field and what to do; nothing written); \
2 a file could not be read or is not valid YAML (nothing written).")]
pub struct Args {
    /// Manifest files (multi-document YAML or JSON), or `-` for stdin (the default).
    paths: Vec<PathBuf>,
    /// Rewrite the files in place (each atomically) instead of writing to stdout.
    #[arg(short = 'i', long)]
    in_place: bool,
}

/// Why a document is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    /// `file:line`.
    location: String,
    /// The field (dotted path) or the object.
    field: String,
    problem: String,
    hint: String,
}

/// One input: its name for messages, its path (none for stdin) and its text.
struct Input {
    name: String,
    path: Option<PathBuf>,
    text: String,
}

/// What happened to one input.
struct Converted {
    text: String,
    converted: usize,
    documents: usize,
    rewritten_whole: Vec<usize>,
    notes: Vec<String>,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.paths.clone()
    };
    let mut inputs = Vec::new();
    for path in &paths {
        match read_input(path, args.in_place) {
            Ok(input) => inputs.push(input),
            Err(message) => {
                errln!("{} {message}", style.error("error:"));
                return Ok(Exit::Unreadable);
            }
        }
    }
    let mut parsed = Vec::new();
    for input in &inputs {
        match capstan_manifest::parse_documents(&input.name, &input.text) {
            Ok(documents) => parsed.push(documents),
            Err(err) => {
                errln!("{} {err}", style.error("error:"));
                errln!("nothing was written");
                return Ok(Exit::Unreadable);
            }
        }
    }
    let clusters = Clusters::collect(parsed.iter().flatten());
    let mut results = Vec::new();
    let mut refusals = Vec::new();
    for (input, documents) in inputs.iter().zip(&parsed) {
        match convert_input(input, documents, &clusters) {
            Ok(converted) => results.push(converted),
            Err(mut found) => refusals.append(&mut found),
        }
    }
    if !refusals.is_empty() {
        for r in &refusals {
            errln!(
                "{} {}: {}: {}\n  {} {}",
                style.error("error:"),
                r.location,
                r.field,
                r.problem,
                style.warning("fix:"),
                r.hint
            );
        }
        errln!(
            "{} document field(s) cannot be converted to {TARGET} without loss; nothing was written",
            refusals.len()
        );
        return Ok(Exit::Invalid);
    }
    for (input, result) in inputs.iter().zip(&results) {
        for note in &result.notes {
            errln!("{} {note}", style.warning("note:"));
        }
        for document in &result.rewritten_whole {
            errln!(
                "{} {}: document {} was written anew as a whole; its comments are not kept",
                style.warning("note:"),
                input.name,
                document + 1
            );
        }
    }
    if args.in_place {
        for (input, result) in inputs.iter().zip(&results) {
            let Some(path) = &input.path else { continue };
            if result.text != input.text
                && let Err(err) = write_atomically(path, &result.text)
            {
                errln!("{} {}: {err}", style.error("error:"), path.display());
                return Ok(Exit::Unreadable);
            }
        }
    } else {
        let mut first = true;
        for result in &results {
            if !first && !result.text.starts_with("---") {
                out!("---\n");
            }
            out!("{}", result.text);
            first = false;
        }
    }
    for (input, result) in inputs.iter().zip(&results) {
        errln!(
            "{} {}: {} of {} document(s) to {TARGET}",
            style.ok("converted:"),
            input.name,
            result.converted,
            result.documents
        );
    }
    Ok(Exit::Ok)
}

fn read_input(path: &Path, in_place: bool) -> Result<Input, String> {
    if path.as_os_str() == "-" {
        if in_place {
            return Err("-i/--in-place needs files, not standard input".to_owned());
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("{STDIN_NAME}: {e}"))?;
        return Ok(Input {
            name: STDIN_NAME.to_owned(),
            path: None,
            text,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Input {
        name: path.display().to_string(),
        path: Some(path.to_owned()),
        text,
    })
}

/// Writes beside the file and renames over it, so a reader sees the old text or the new, never
/// part of it. The file's permissions are kept.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{file_name}.capstan-convert"));
    std::fs::write(&temporary, text)?;
    if let Ok(metadata) = std::fs::metadata(path) {
        std::fs::set_permissions(&temporary, metadata.permissions())?;
    }
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

fn convert_input(
    input: &Input,
    documents: &[LoadedObject],
    clusters: &Clusters,
) -> Result<Converted, Vec<Refusal>> {
    let mut new_values = Vec::with_capacity(documents.len());
    let mut refusals = Vec::new();
    let mut converted = 0;
    let mut notes = Vec::new();
    for document in documents {
        let mut value = document.value.clone();
        let changed = if value.get("kind").and_then(Value::as_str) == Some("List")
            && let Some(items) = value.get_mut("items").and_then(Value::as_array_mut)
        {
            let mut any = false;
            for (i, item) in items.iter_mut().enumerate() {
                let base = FieldPath::root().key("items").index(i);
                any |= convert_object(document, &base, item, clusters, &mut refusals, &mut notes);
            }
            any
        } else {
            convert_object(
                document,
                &FieldPath::root(),
                &mut value,
                clusters,
                &mut refusals,
                &mut notes,
            )
        };
        if changed {
            converted += 1;
            new_values.push(Some(value));
        } else {
            new_values.push(None);
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let rewrite = capstan_manifest::rewrite_stream(&input.text, documents, &new_values);
    Ok(Converted {
        text: rewrite.text,
        converted,
        documents: documents.iter().filter(|d| !d.value.is_null()).count(),
        rewritten_whole: rewrite.rewritten_whole,
        notes,
    })
}

/// The location of a field of the object at `base` in `document`.
fn location(document: &LoadedObject, base: &FieldPath, field: &FieldPath) -> String {
    document.location(&join(base, field))
}

fn join(base: &FieldPath, field: &FieldPath) -> FieldPath {
    field
        .segments()
        .iter()
        .fold(base.clone(), |path, segment| match segment {
            PathSegment::Key(k) => path.key(k.as_str()),
            PathSegment::Index(i) => path.index(*i),
        })
}

/// Converts one object in place if it is a Cluster API object in an older version; says whether
/// it changed. Refusals are collected.
fn convert_object(
    document: &LoadedObject,
    base: &FieldPath,
    object: &mut Value,
    clusters: &Clusters,
    refusals: &mut Vec<Refusal>,
    notes: &mut Vec<String>,
) -> bool {
    let (Some(api_version), Some(kind)) = (
        object.get("apiVersion").and_then(Value::as_str),
        object.get("kind").and_then(Value::as_str),
    ) else {
        return false;
    };
    let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
    let group = group_of(&api_version);
    let version = version_of(&api_version);
    if !CAPI_GROUPS.contains(&group) {
        return false;
    }
    let refuse = |field: &str, problem: String, hint: String| Refusal {
        location: location(document, base, &FieldPath::parse(field)),
        field: field.to_owned(),
        problem,
        hint,
    };
    let Some(info) = KINDS.iter().find(|k| k.group == group && k.kind == kind) else {
        if let Some(home) = KINDS
            .iter()
            .find(|k| k.kind == kind && CAPI_GROUPS.contains(&k.group))
        {
            refusals.push(refuse(
                "apiVersion",
                format!("{kind} is not a kind of {group}: it belongs to {}", home.group),
                format!(
                    "write `apiVersion: {}/{version}` (the {group} group holds the provider's kinds, e.g. KVMCluster), then convert again",
                    home.group
                ),
            ));
        } else if group == INFRASTRUCTURE {
            notes.push(format!(
                "{}: {kind} ({api_version}) is another provider's kind; left as it is",
                document.location(base)
            ));
        } else {
            refusals.push(refuse(
                "kind",
                format!("{kind} ({group}) is not a kind capstan models, so it cannot be converted here"),
                "convert it with Cluster API's own conversion (apply it to a management cluster running Cluster API 1.11 or later and read it back as v1beta2), or leave it out of the input".to_owned(),
            ));
        }
        return false;
    };
    if version == TARGET {
        return false;
    }
    let mut v1beta1 = if info.versions.contains(&version) {
        object.clone()
    } else if version == "v1alpha4" && v1alpha4::handles(group, &kind) {
        match v1alpha4::to_v1beta1(object.clone()) {
            Ok(v) => v,
            Err(v1alpha4::V1alpha4Error::Leftovers(leftovers)) => {
                for l in leftovers {
                    refusals.push(refuse(
                        l.path,
                        format!("{} is a v1alpha3 field; v1alpha4 and later keep it in {}", l.path, l.moved_to),
                        format!("move it to {} (an API server would drop it silently), then convert again", l.moved_to),
                    ));
                }
                return false;
            }
            Err(err) => {
                refusals.push(refuse(
                    "apiVersion",
                    err.to_string(),
                    "check apiVersion and kind".to_owned(),
                ));
                return false;
            }
        }
    } else {
        let known: Vec<String> = info.versions.iter().map(|v| info.api_version(v)).collect();
        let extra = if v1alpha4::handles(group, &kind) {
            format!(", {group}/v1alpha4")
        } else {
            String::new()
        };
        refusals.push(refuse(
            "apiVersion",
            format!("{api_version} is a version of {kind} capstan does not know"),
            format!(
                "capstan converts {}{extra} to {TARGET}; take older objects through their provider's or Cluster API's conversion first",
                known.join(", ")
            ),
        ));
        return false;
    };
    if !fill_cluster_name(document, base, group, &kind, &mut v1beta1, refusals, notes) {
        return false;
    }
    let from_version = version_of(
        v1beta1
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    )
    .to_owned();
    // What the server stores on a write.
    let mut result = match ModelConverter.convert(group, &kind, v1beta1.clone(), TARGET) {
        Ok(v) => v,
        Err(err) => {
            refusals.push(Refusal {
                location: document.location(base),
                field: kind.clone(),
                problem: err,
                hint: "fix the field named, then convert again".to_owned(),
            });
            return false;
        }
    };
    let annotation = |v: &Value| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(capstan_model::convert::CONVERSION_DATA_ANNOTATION))
            .cloned()
    };
    if annotation(&result).is_some() && annotation(&result) != annotation(&v1beta1) {
        capstan_model::convert::stash::strip(&mut result);
    }
    // What the server gives back when the object is read in the version it was written in.
    let back = match ModelConverter.convert(group, &kind, result.clone(), &from_version) {
        Ok(v) => v,
        Err(err) => {
            refusals.push(Refusal {
                location: document.location(base),
                field: kind.clone(),
                problem: format!("the converted object does not convert back: {err}"),
                hint: "report this with the input".to_owned(),
            });
            return false;
        }
    };
    let context = Context {
        original: &v1beta1,
        converted: &result,
        clusters,
    };
    for (pointer, entry) in differences(&back, &v1beta1) {
        if let Some((problem, hint)) = context.loss(&pointer, &entry) {
            let field = pointer_path(&pointer);
            refusals.push(Refusal {
                location: location(document, base, &field),
                field: field.to_string(),
                problem,
                hint,
            });
        }
    }
    *object = result;
    true
}

/// The `clusterName` fields a kind requires: every version declares them required, and
/// `v1beta2`'s schema refuses the object without them.
fn cluster_name_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("cluster.x-k8s.io", "Machine" | "MachineHealthCheck") => &["spec.clusterName"],
        ("cluster.x-k8s.io", "MachineSet" | "MachineDeployment") => {
            &["spec.clusterName", "spec.template.spec.clusterName"]
        }
        _ => &[],
    }
}

/// Fills the `clusterName` fields `object` lacks (hand-written manifests, the KVM design's
/// MachineDeployment among them, sometimes name the Cluster only by label): from the other
/// `clusterName` field, else from the `cluster.x-k8s.io/cluster-name` label of the object, else of
/// its template — names the object itself gives, never a guess from the other documents. Each
/// fill is a note; when nothing names the Cluster, or the two labels name different ones, the
/// object is refused (false).
fn fill_cluster_name(
    document: &LoadedObject,
    base: &FieldPath,
    group: &str,
    kind: &str,
    object: &mut Value,
    refusals: &mut Vec<Refusal>,
    notes: &mut Vec<String>,
) -> bool {
    let fields: Vec<FieldPath> = cluster_name_fields(group, kind)
        .iter()
        .map(|f| FieldPath::parse(f))
        .collect();
    let text = |path: &FieldPath| {
        path.lookup(object)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let missing: Vec<&FieldPath> = fields.iter().filter(|f| text(f).is_none()).collect();
    if missing.is_empty() {
        return true;
    }
    let labels: Vec<FieldPath> = fields
        .iter()
        .map(|f| {
            let owner = f
                .parent()
                .and_then(|spec| spec.parent())
                .unwrap_or_else(FieldPath::root);
            join(&owner, &FieldPath::parse("metadata.labels")).key(LABEL_CLUSTER_NAME)
        })
        .collect();
    let named_by_labels: Vec<(String, &FieldPath)> = labels
        .iter()
        .filter_map(|l| text(l).map(|name| (name, l)))
        .collect();
    let from_field = fields.iter().find_map(|f| text(f).map(|name| (name, f)));
    let source = match (from_field, named_by_labels.as_slice()) {
        (Some(found), _) => found,
        (None, [(a, a_at), (b, b_at), ..]) if a != b => {
            refusals.push(Refusal {
                location: location(document, base, b_at),
                field: missing[0].to_string(),
                problem: format!(
                    "{} is required in {TARGET} and the Cluster labels disagree: {a_at} is {a:?}, {b_at} is {b:?}",
                    missing[0]
                ),
                hint: format!(
                    "set {} to the name of the Cluster these machines belong to (and make the labels agree), then convert again",
                    names(&fields)
                ),
            });
            return false;
        }
        (None, [found, ..]) => (found.0.clone(), found.1),
        (None, []) => {
            refusals.push(Refusal {
                location: location(document, base, missing[0]),
                field: missing[0].to_string(),
                problem: format!(
                    "{} {} required in {TARGET} and nothing in the object names its Cluster (no clusterName, no {LABEL_CLUSTER_NAME} label)",
                    names(&missing),
                    if missing.len() > 1 { "are" } else { "is" }
                ),
                hint: format!(
                    "set {} to the name of the Cluster these machines belong to (or label the object {LABEL_CLUSTER_NAME}: NAME), then convert again",
                    names(&fields)
                ),
            });
            return false;
        }
    };
    let (name, from) = (source.0, source.1.clone());
    for field in missing {
        set_text(object, field, &name);
        notes.push(format!(
            "{}: {kind} {}: {field} set to {name:?}, from {from}",
            location(document, base, &from),
            object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ));
    }
    true
}

/// `a`, `a and b`: field paths for a message.
fn names(fields: &[impl std::borrow::Borrow<FieldPath>]) -> String {
    let names: Vec<String> = fields.iter().map(|f| f.borrow().to_string()).collect();
    names.join(" and ")
}

/// Sets the string at `path` (keys only), making the objects on the way.
fn set_text(object: &mut Value, path: &FieldPath, text: &str) {
    let mut current = object;
    for segment in path.segments() {
        let PathSegment::Key(key) = segment else {
            return;
        };
        if !current.is_object() {
            *current = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = current else {
            return;
        };
        current = map.entry(key.clone()).or_insert(Value::Null);
    }
    *current = Value::String(text.to_owned());
}

/// One difference between the object read back and the input: what reading back gives
/// (`replaces`) and what the input had (`value`); `None` is "absent".
#[derive(Debug)]
struct Difference {
    value: Option<Value>,
    replaces: Option<Value>,
}

/// The differences between two objects, by JSON Pointer, as the conversion's own stash computes
/// them.
fn differences(read_back: &Value, input: &Value) -> Vec<(String, Difference)> {
    let stash = Stash::between(read_back, input);
    if stash.is_empty() {
        return Vec::new();
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&stash.to_json()) else {
        return Vec::new();
    };
    let mut leaves = Vec::new();
    for (pointer, record) in map {
        leaf_differences(
            pointer,
            record.get("value").cloned(),
            record.get("replaces").cloned(),
            &mut leaves,
        );
    }
    leaves
}

/// Splits a difference of whole objects into one per field, so each field is judged (and
/// reported at its own line) alone.
fn leaf_differences(
    pointer: String,
    value: Option<Value>,
    replaces: Option<Value>,
    out: &mut Vec<(String, Difference)>,
) {
    let child = |key: &str| format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
    match (value, replaces) {
        (Some(Value::Object(value)), None) if !value.is_empty() => {
            for (key, v) in value {
                leaf_differences(child(&key), Some(v), None, out);
            }
        }
        (None, Some(Value::Object(replaces))) if !replaces.is_empty() => {
            for (key, r) in replaces {
                leaf_differences(child(&key), None, Some(r), out);
            }
        }
        (Some(Value::Object(mut value)), Some(Value::Object(mut replaces))) => {
            let keys: Vec<String> = value.keys().chain(replaces.keys()).cloned().collect();
            let mut seen = std::collections::BTreeSet::new();
            for key in keys {
                if !seen.insert(key.clone()) {
                    continue;
                }
                let (v, r) = (value.remove(&key), replaces.remove(&key));
                if v != r {
                    leaf_differences(child(&key), v, r, out);
                }
            }
        }
        (value, replaces) => out.push((pointer, Difference { value, replaces })),
    }
}

/// A JSON Pointer as a field path.
fn pointer_path(pointer: &str) -> FieldPath {
    pointer
        .split('/')
        .skip(1)
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .fold(FieldPath::root(), |path, token| {
            match token.parse::<usize>() {
                Ok(i) if !token.starts_with('+') => path.index(i),
                _ => path.key(token),
            }
        })
}

/// The Clusters of the input, for kubeadm settings `v1beta2` takes from them.
struct Clusters {
    clusters: Vec<ClusterFacts>,
}

struct ClusterFacts {
    name: String,
    namespace: Option<String>,
    control_plane: Option<String>,
    pods: Option<String>,
    services: Option<String>,
    service_domain: String,
}

impl Clusters {
    fn collect<'a>(documents: impl Iterator<Item = &'a LoadedObject>) -> Self {
        let mut clusters = Vec::new();
        for document in documents {
            let objects: Vec<&Value> = match document.value.get("items").and_then(Value::as_array) {
                Some(items) => items.iter().collect(),
                None => vec![&document.value],
            };
            for object in objects {
                let is_cluster = object.get("kind").and_then(Value::as_str) == Some("Cluster")
                    && object
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .is_some_and(|v| group_of(v) == "cluster.x-k8s.io");
                if !is_cluster {
                    continue;
                }
                let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
                let blocks = |p: &str| {
                    object.pointer(p).and_then(Value::as_array).map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                };
                clusters.push(ClusterFacts {
                    name: text("/metadata/name").unwrap_or_default(),
                    namespace: text("/metadata/namespace"),
                    control_plane: text("/spec/controlPlaneRef/name"),
                    pods: blocks("/spec/clusterNetwork/pods/cidrBlocks"),
                    services: blocks("/spec/clusterNetwork/services/cidrBlocks"),
                    service_domain: text("/spec/clusterNetwork/serviceDomain")
                        .unwrap_or_else(|| "cluster.local".to_owned()),
                });
            }
        }
        Self { clusters }
    }

    /// The Cluster an object belongs to: the one whose control plane it is, the one its
    /// cluster-name label or `spec.clusterName` names, or the only one.
    fn of(&self, object: &Value) -> Option<&ClusterFacts> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str);
        let namespace = text("/metadata/namespace");
        let same_namespace = |c: &&ClusterFacts| c.namespace.as_deref() == namespace;
        let name = text("/metadata/name");
        if text("/kind") == Some("KubeadmControlPlane")
            && let Some(found) = self
                .clusters
                .iter()
                .filter(same_namespace)
                .find(|c| c.control_plane.as_deref() == name)
        {
            return Some(found);
        }
        let label = object
            .pointer("/metadata/labels")
            .and_then(|l| l.get(LABEL_CLUSTER_NAME))
            .and_then(Value::as_str)
            .or_else(|| text("/spec/clusterName"));
        if let Some(label) = label {
            return self
                .clusters
                .iter()
                .filter(same_namespace)
                .find(|c| c.name == label);
        }
        match self.clusters.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}

/// What a difference is judged against.
struct Context<'a> {
    original: &'a Value,
    converted: &'a Value,
    clusters: &'a Clusters,
}

impl Context<'_> {
    /// `None` when the difference means the same in `v1beta2`; else the problem and the fix.
    fn loss(&self, pointer: &str, d: &Difference) -> Option<(String, String)> {
        let path = pointer_path(pointer);
        let segments: Vec<String> = path
            .segments()
            .iter()
            .map(|s| match s {
                PathSegment::Key(k) => k.clone(),
                PathSegment::Index(i) => i.to_string(),
            })
            .collect();
        let last = segments.last().map(String::as_str).unwrap_or_default();
        let parent = path.parent().and_then(|p| p.lookup(self.original));
        let is_reference =
            parent.is_some_and(|p| p.get("kind").is_some() && p.get("name").is_some());
        if segments.first().map(String::as_str) == Some("status") {
            return Some((
                "the status cannot be carried over as written".to_owned(),
                "status is written by the controllers and ignored by `kubectl apply`: remove `status` from the manifest".to_owned(),
            ));
        }
        if is_reference && last == "apiVersion" {
            return None;
        }
        // A reference v1beta2 keeps by name only (Metal3 `dataTemplate`): its kind is the field's.
        let kept = path
            .parent()
            .and_then(|p| p.lookup(self.converted))
            .is_some();
        if is_reference && last == "kind" && d.replaces.is_none() && kept {
            return None;
        }
        if is_reference && last == "namespace" {
            let own = self.original.pointer("/metadata/namespace");
            return if d.value.is_none() || d.value.as_ref() == own {
                None
            } else {
                Some((
                    "v1beta2 references have no namespace: they always name an object in the referring object's namespace".to_owned(),
                    "put both objects in one namespace and remove the reference's `namespace`".to_owned(),
                ))
            };
        }
        if let (Some(Value::String(value)), Some(Value::String(replaces))) = (&d.value, &d.replaces)
            && let (Ok(a), Ok(b)) = (parse_nanos(value), parse_nanos(replaces))
        {
            return if a == b {
                None
            } else {
                Some((
                    format!("v1beta2 holds whole seconds: {value} would become {replaces}"),
                    format!("write a whole number of seconds ({replaces}) before converting"),
                ))
            };
        }
        if let Some(at) = segments.iter().position(|s| {
            s == "clusterConfiguration" || s == "initConfiguration" || s == "joinConfiguration"
        }) {
            return self.kubeadm_loss(&segments[at..], d);
        }
        if last == "noCloudProvider" && segments.len() == 2 {
            let enabled = self.converted.pointer("/spec/cloudProviderEnabled");
            if let (Some(Value::Bool(no)), Some(Value::Bool(enabled))) = (&d.value, enabled)
                && *no != *enabled
            {
                return None;
            }
        }
        let field = path.to_string();
        let hint = match last {
            "progressDeadlineSeconds" | "revisionHistoryLimit" => {
                format!("v1beta2 MachineDeployments have no {last}; remove it")
            }
            "useExperimentalRetryJoin" => {
                "v1beta2 dropped it (kubeadm retries joins itself); remove it".to_owned()
            }
            _ => "remove it, or keep this object in v1beta1 (capstan serves both versions)"
                .to_owned(),
        };
        Some((format!("{field} has no place in {TARGET}"), hint))
    }

    /// Differences under a kubeadm configuration (`segments` starts at it): each leaf of the
    /// input's value is kept only if `v1beta2` gets the same from elsewhere.
    fn kubeadm_loss(&self, segments: &[String], d: &Difference) -> Option<(String, String)> {
        let mut leaves = Vec::new();
        leaf_values(
            &segments.join("."),
            d.value.as_ref().unwrap_or(&Value::Null),
            &mut leaves,
        );
        let cluster = self.clusters.of(self.original);
        for (field, value) in leaves {
            let tail = field.split_once('.').map_or("", |(_, t)| t);
            let agrees = match tail {
                "apiVersion" | "kind" => true,
                "kubernetesVersion" => {
                    self.original.pointer("/spec/version") == Some(&value)
                        || self.original.pointer("/spec/template/spec/version") == Some(&value)
                }
                "clusterName" => cluster.is_some_and(|c| value.as_str() == Some(c.name.as_str())),
                "networking.podSubnet" => {
                    cluster.is_some_and(|c| c.pods.as_deref() == value.as_str())
                }
                "networking.serviceSubnet" => {
                    cluster.is_some_and(|c| c.services.as_deref() == value.as_str())
                }
                "networking.dnsDomain" => {
                    cluster.is_some_and(|c| value.as_str() == Some(c.service_domain.as_str()))
                }
                _ => false,
            };
            if agrees {
                continue;
            }
            let hint = match tail {
                "networking.podSubnet" => "v1beta2 takes it from the Cluster's spec.clusterNetwork.pods.cidrBlocks: set it there (and convert the Cluster in the same run), then remove it here".to_owned(),
                "networking.serviceSubnet" => "v1beta2 takes it from the Cluster's spec.clusterNetwork.services.cidrBlocks: set it there (and convert the Cluster in the same run), then remove it here".to_owned(),
                "networking.dnsDomain" => "v1beta2 takes it from the Cluster's spec.clusterNetwork.serviceDomain: set it there, then remove it here".to_owned(),
                "kubernetesVersion" => "v1beta2 takes it from spec.version: make them agree, then remove it here".to_owned(),
                "clusterName" => "v1beta2 takes it from the Cluster's name: remove it (convert the Cluster in the same run)".to_owned(),
                _ => "remove it, or keep this object in v1beta1 (capstan serves both versions)".to_owned(),
            };
            return Some((format!("{field} ({value}) has no place in {TARGET}"), hint));
        }
        None
    }
}

/// Every scalar (or empty container) below `value`, with its dotted path.
fn leaf_values(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                leaf_values(&format!("{prefix}.{k}"), v, out);
            }
        }
        _ => out.push((prefix.to_owned(), value.clone())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn pointers_become_paths() {
        assert_eq!(
            pointer_path("/spec/list/0/a~1b").to_string(),
            FieldPath::root()
                .key("spec")
                .key("list")
                .index(0)
                .key("a/b")
                .to_string()
        );
    }
}
