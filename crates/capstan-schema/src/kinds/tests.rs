//! The generated schemas are structural, cover every served kind and version, refuse malformed KVM
//! objects naming the field, and neither refuse nor prune anything real manifests contain: the
//! rendered example bundles, the CAPM3 clusterctl fixture, seed 003's KVM manifests, and (compared
//! field by field) the upstream CRDs' schemas.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::{Schema, ViolationKind};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shared() -> PathBuf {
    repo().join("../shared")
}

/// Where a schema breaks the structural rules, by JSON path.
fn structural_problems(node: &Value, path: &str, out: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    if obj.contains_key("$ref") {
        out.push(format!("{path}: $ref"));
    }
    for junctor in ["anyOf", "oneOf", "allOf", "not"] {
        if obj.contains_key(junctor) {
            out.push(format!("{path}: {junctor}"));
        }
    }
    let typed = obj.get("type").is_some_and(Value::is_string);
    let open = obj.get(PRESERVE) == Some(&json!(true))
        || obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    if !typed && !open {
        out.push(format!("{path}: no type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        out.push(format!("{path}: properties and additionalProperties"));
    }
    for key in [REQUIRED_MARK, DEFAULT_MARK, "title", "$schema", "const"] {
        if obj.contains_key(key) {
            out.push(format!("{path}: {key} left"));
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, prop) in props {
            structural_problems(prop, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        structural_problems(items, &format!("{path}[]"), out);
    }
    if let Some(additional) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        structural_problems(additional, &format!("{path}.*"), out);
    }
}

/// The (group, kind, version)s capstan serves that are its own (not Kubernetes' built-in kinds).
fn served() -> Vec<(&'static str, &'static str, &'static str)> {
    capstan_model::kinds::KINDS
        .iter()
        // Kubernetes' own kinds (the core group, `policy`) are the API server's, from k8s-openapi.
        .filter(|k| k.group.contains('.'))
        .flat_map(|k| k.versions.iter().map(move |v| (k.group, k.kind, *v)))
        .collect()
}

#[test]
fn every_served_kind_and_version_has_a_structural_schema() {
    let mut problems = Vec::new();
    for (group, kind, version) in served() {
        let Some(schema) = schema(group, kind, version) else {
            problems.push(format!("{group}/{version} {kind}: no schema"));
            continue;
        };
        structural_problems(schema, &format!("{kind}.{version}"), &mut problems);
        assert!(!schema.to_string().contains("$ref"));
        Schema::from_value(schema).unwrap();
        for field in ["apiVersion", "kind", "metadata", "spec"] {
            assert!(
                schema["properties"][field]["description"].is_string(),
                "{kind} {field}"
            );
        }
        assert!(schema["description"].is_string(), "{kind}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn kvm_schemas_are_closed_and_describe_their_fields() {
    let machine = schema("infrastructure.cluster.x-k8s.io", "KVMMachine", "v1beta2").unwrap();
    let spec = &machine["properties"]["spec"];
    assert!(spec.get(PRESERVE).is_none());
    let resources = &spec["properties"]["resources"];
    assert!(resources["description"].as_str().unwrap().contains("sizes"));
    assert_eq!(resources["properties"]["cpu"]["type"], "integer");
    assert_eq!(resources["properties"]["cpu"]["minimum"], 1);
    assert_eq!(resources["properties"]["cpu"]["format"], "int64");
    assert_eq!(
        resources["properties"]["memory"]["pattern"],
        capstan_model::kvm::QUANTITY_PATTERN
    );
    let image = &spec["properties"]["image"];
    assert_eq!(image["required"], json!(["url", "checksum"]));
    assert_eq!(image["properties"]["format"]["default"], "qcow2");
    assert_eq!(
        spec["properties"]["volumes"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    assert_eq!(
        machine["properties"]["status"]["properties"]["conditions"]["items"]["properties"]["lastTransitionTime"]
            ["format"],
        "date-time"
    );
    // Content the model keeps without reading it stays open.
    let status = &machine["properties"]["status"];
    assert_eq!(status["properties"]["addresses"][PRESERVE], true);
    // Upstream kinds are closed where upstream's are, and know every field upstream's do.
    let cluster = schema("cluster.x-k8s.io", "Cluster", "v1beta2").unwrap();
    assert!(cluster["properties"]["spec"].get(PRESERVE).is_none());
    assert!(cluster.get(PRESERVE).is_none());
    assert_eq!(
        cluster["properties"]["spec"]["properties"]["topology"]["properties"]["classRef"]["required"],
        json!(["name"])
    );
    assert_eq!(
        cluster["properties"]["spec"]["properties"]["clusterNetwork"]["properties"]["pods"]["properties"]
            ["cidrBlocks"]["type"],
        "array"
    );
}

/// Defaults, prunes and validates `object` as the API server admits it: the paths pruned and the
/// violations.
fn admit(schema: &Value, object: &mut Value) -> (Vec<String>, Vec<String>) {
    let schema = Schema::from_value(schema).unwrap();
    crate::apply_defaults(&schema, object);
    let pruned = crate::prune(&schema, object);
    let violations = crate::validate(&schema, object);
    (
        pruned.iter().map(ToString::to_string).collect(),
        violations.iter().map(ToString::to_string).collect(),
    )
}

fn group_version_kind(object: &Value) -> (String, String, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    (
        group.to_owned(),
        version.to_owned(),
        object["kind"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Admits every object of a served kind in `objects`; returns how many were checked and every
/// object that was refused or lost a field.
fn admit_all(source: &str, objects: &[Value]) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut problems = Vec::new();
    for object in objects {
        let (group, version, kind) = group_version_kind(object);
        let Some(schema) = schema(&group, &kind, &version) else {
            continue;
        };
        checked += 1;
        let mut admitted = object.clone();
        let (pruned, violations) = admit(schema, &mut admitted);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if !pruned.is_empty() || !violations.is_empty() {
            problems.push(format!(
                "{source}: {kind}.{version} {name}: pruned {pruned:?}, invalid {violations:?}"
            ));
        }
    }
    (checked, problems)
}

fn rendered(example: &str, api_version: capstan_render::CapiVersion) -> Vec<Value> {
    let examples = repo().join("examples");
    let spec = capstan_render::load_spec(&examples.join(example)).unwrap();
    let bundle = capstan_render::render(
        &spec,
        &examples,
        &capstan_render::RenderOptions { api_version },
    )
    .unwrap();
    let mut objects = Vec::new();
    for file in &bundle.files {
        let path = file.path.to_string_lossy().into_owned();
        if path.ends_with(".yaml") {
            let loaded = capstan_manifest::load_str(&path, &file.contents).unwrap();
            objects.extend(loaded.into_iter().map(|o| o.value));
        }
    }
    objects
}

#[test]
fn the_rendered_example_bundles_are_admitted_unchanged() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for example in ["capi-1.yaml", "super.yaml"] {
        for version in [
            capstan_render::CapiVersion::V1beta1,
            capstan_render::CapiVersion::V1beta2,
        ] {
            let (n, p) = admit_all(
                &format!("{example} ({version:?})"),
                &rendered(example, version),
            );
            checked += n;
            problems.extend(p);
        }
    }
    assert!(checked > 40, "only {checked} objects checked");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// clusterctl's variable substitution with stand-in values.
fn substitute(template: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').unwrap();
        let expression = &after[..end];
        let default = expression
            .split_once(":=")
            .or_else(|| expression.split_once(":-"));
        let value = match default {
            Some((_, default)) => default.to_owned(),
            None if expression.ends_with("_COUNT") => "1".to_owned(),
            None if expression.ends_with("_PORT") => "6443".to_owned(),
            None if expression.ends_with("_EXTRA_CONFIG") => String::new(),
            None if expression == "KUBERNETES_VERSION" => "v1.33.1".to_owned(),
            None if expression == "IMAGE_CHECKSUM_TYPE" => "sha256".to_owned(),
            None if expression == "IMAGE_FORMAT" => "qcow2".to_owned(),
            None => "test1".to_owned(),
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_capm3_clusterctl_fixture_is_admitted_unchanged() {
    let dir = repo().join("crates/capstan-cli/tests/fixtures");
    let mut checked = 0;
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = substitute(&std::fs::read_to_string(&path).unwrap());
        let objects: Vec<Value> = capstan_manifest::load_str(&path.to_string_lossy(), &text)
            .unwrap()
            .into_iter()
            .map(|o| o.value)
            .collect();
        let (n, p) = admit_all(&path.to_string_lossy(), &objects);
        checked += n;
        problems.extend(p);
    }
    assert!(checked >= 8, "only {checked} objects checked");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The YAML blocks of seed 003 that hold objects of the kinds capstan serves.
fn seed_003_objects() -> Vec<Value> {
    let dir = shared().join("seeds");
    let path = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("003_"))
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut objects = Vec::new();
    for block in text.split("```yaml").skip(1) {
        let Some((yaml, _)) = block.split_once("```") else {
            continue;
        };
        // The design's KubeadmControlPlane block is not valid YAML (and is v1alpha4, which
        // nothing serves); every block of a served kind parses.
        let Ok(loaded) = capstan_manifest::load_str("seed 003", yaml) else {
            continue;
        };
        objects.extend(loaded.into_iter().map(|o| o.value));
    }
    objects
}

#[test]
fn seed_003_kvm_manifests_round_trip() {
    let objects = seed_003_objects();
    let mut checked = 0;
    for object in &objects {
        let (group, version, kind) = group_version_kind(object);
        let Some(schema) = schema(&group, &kind, &version) else {
            continue;
        };
        checked += 1;
        let mut admitted = object.clone();
        let (pruned, violations) = admit(schema, &mut admitted);
        assert!(
            pruned.is_empty() && violations.is_empty(),
            "{kind}: {pruned:?} {violations:?}"
        );
        // The admitted object reads into the typed model and writes back as itself.
        let typed = match kind.as_str() {
            "KVMCluster" => serde_json::to_value(
                serde_json::from_value::<capstan_model::kvm::v1alpha4::KVMCluster>(
                    admitted.clone(),
                )
                .unwrap(),
            ),
            "KVMMachineTemplate" => serde_json::to_value(
                serde_json::from_value::<capstan_model::kvm::v1alpha4::KVMMachineTemplate>(
                    admitted.clone(),
                )
                .unwrap(),
            ),
            other => panic!("seed 003 has an unexpected served kind {other}"),
        }
        .unwrap();
        let mut typed = typed;
        typed["metadata"] = admitted["metadata"].clone();
        assert_eq!(typed, admitted);
        assert_eq!(admitted, *object, "{kind}: admitting changed it");
    }
    assert_eq!(checked, 3, "KVMCluster and two KVMMachineTemplates");
}

fn kvm_machine(spec: Value) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachine",
           "metadata": {"name": "m", "namespace": "default"}, "spec": spec})
}

#[test]
fn malformed_kvm_machines_are_refused_naming_the_field() {
    let schema = Schema::from_value(
        schema("infrastructure.cluster.x-k8s.io", "KVMMachine", "v1beta2").unwrap(),
    )
    .unwrap();
    let cases = [
        (
            json!({"resources": {"cpu": "two"}}),
            "spec.resources.cpu",
            ViolationKind::WrongType,
        ),
        (
            json!({"resources": {"cpu": 0}}),
            "spec.resources.cpu",
            ViolationKind::Range,
        ),
        (
            json!({"resources": {"memory": "lots"}}),
            "spec.resources.memory",
            ViolationKind::Pattern,
        ),
        (
            json!({"resources": {"disk": "1.5Gi"}}),
            "spec.resources.disk",
            ViolationKind::Pattern,
        ),
        (
            json!({"image": {"url": "file:///i.qcow2"}}),
            "spec.image.checksum",
            ViolationKind::Required,
        ),
        (
            json!({"image": {"url": "file:///i.qcow2", "checksum": "ab", "format": "vmdk"}}),
            "spec.image.format",
            ViolationKind::Enum,
        ),
        (
            json!({"volumes": [{"name": "etcd", "size": "1Gi"}]}),
            "spec.volumes[0].mountPath",
            ViolationKind::Required,
        ),
        (
            json!({"volumes": [{"name": "a", "size": "1Gi", "mountPath": "/a"},
                               {"name": "a", "size": "1Gi", "mountPath": "/b"}]}),
            "spec.volumes[1]",
            ViolationKind::Duplicate,
        ),
        (
            json!({"networks": "default"}),
            "spec.networks",
            ViolationKind::WrongType,
        ),
        (json!(null), "spec", ViolationKind::WrongType),
    ];
    for (spec, field, kind) in cases {
        let mut object = kvm_machine(spec.clone());
        crate::apply_defaults(&schema, &mut object);
        let violations = crate::validate(&schema, &object);
        assert!(
            violations
                .iter()
                .any(|v| v.path.to_string() == field && v.kind == kind),
            "{spec}: {violations:?}"
        );
    }
    // Unknown fields are pruned (refused under fieldValidation=Strict by the server).
    let mut object = kvm_machine(json!({"resources": {"cpu": 2, "gpus": 1}, "colour": "red"}));
    let pruned = crate::prune(&schema, &mut object);
    let pruned: Vec<String> = pruned.iter().map(ToString::to_string).collect();
    assert_eq!(pruned, ["spec.colour", "spec.resources.gpus"]);
    // A well-formed machine is admitted with the model's defaults filled in.
    let mut object = kvm_machine(json!({
        "resources": {"cpu": 2, "memory": "2Gi", "disk": "20Gi", "dockerVolumeSize": "5Gi"},
        "image": {"url": "file:///var/lib/images/debian.qcow2", "checksum": "0123abcd"},
        "networks": [{"network": "default"}],
        "volumes": [{"name": "etcd", "size": "2Gi", "mountPath": "/var/lib/etcd"}]}));
    crate::apply_defaults(&schema, &mut object);
    assert_eq!(crate::validate(&schema, &object), Vec::new(), "{object}");
    assert_eq!(object["spec"]["image"]["checksumType"], "sha256");
    assert_eq!(object["spec"]["image"]["format"], "qcow2");
}

#[test]
fn kvm_cluster_hypervisors_need_a_name_and_uri_and_default_to_control_plane() {
    let schema = Schema::from_value(
        schema("infrastructure.cluster.x-k8s.io", "KVMCluster", "v1alpha4").unwrap(),
    )
    .unwrap();
    let mut object = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4",
        "kind": "KVMCluster", "metadata": {"name": "c"},
        "spec": {"hypervisors": [{"name": "h1", "uri": "qemu:///system", "domainType": "qemu"},
                                 {"uri": "test:///default"}]}});
    crate::apply_defaults(&schema, &mut object);
    let violations: Vec<String> = crate::validate(&schema, &object)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("spec.hypervisors[1].name"));
    assert_eq!(object["spec"]["hypervisors"][0]["controlPlane"], true);
}

#[test]
fn upstream_kinds_refuse_what_upstream_refuses_and_keep_unknown_fields() {
    let cluster =
        Schema::from_value(schema("cluster.x-k8s.io", "Cluster", "v1beta1").unwrap()).unwrap();
    let mut object = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "c"},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": "10.0.0.0/8"}},
                 "availabilityGates": [{"conditionType": "X"}]}});
    let pruned = crate::prune(&cluster, &mut object);
    assert!(pruned.is_empty(), "{pruned:?}");
    let violations = crate::validate(&cluster, &object);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(
        violations[0].path.to_string(),
        "spec.clusterNetwork.pods.cidrBlocks"
    );
    let null_spec = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "c"}, "spec": null});
    assert!(!crate::validate(&cluster, &null_spec).is_empty());
    let kcp = Schema::from_value(
        schema(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "v1beta2",
        )
        .unwrap(),
    )
    .unwrap();
    let no_version = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane", "metadata": {"name": "k"},
        "spec": {"replicas": 1, "kubeadmConfigSpec": {}}});
    let violations = crate::validate(&kcp, &no_version);
    assert!(
        violations
            .iter()
            .any(|v| v.path.to_string() == "spec.version" && v.kind == ViolationKind::Required),
        "{violations:?}"
    );
}

/// Every kind version of the upstream CRDs in the shared reference, with its `openAPIV3Schema`:
/// `(group/kind/version, schema)`.
fn upstream_crd_schemas() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let dir = shared().join("reference/crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|sub| std::fs::read_dir(sub.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        for crd in capstan_manifest::load_path(&file).unwrap() {
            let crd = crd.value;
            let group = crd["spec"]["group"].as_str().unwrap_or_default();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
            for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
                let name = version["name"].as_str().unwrap_or_default();
                out.push((
                    format!("{group}/{kind}/{name}"),
                    version["schema"]["openAPIV3Schema"].clone(),
                ));
            }
        }
    }
    out
}

/// The keywords of an upstream schema node that `upstream.json` keeps: structure and validations
/// (descriptions and the junctors of int-or-string fields are left out).
const KEPT_KEYWORDS: &[&str] = &[
    "type",
    "nullable",
    "required",
    "properties",
    "items",
    "additionalProperties",
    PRESERVE,
    "x-kubernetes-int-or-string",
];

/// An upstream schema node reduced to what `upstream.json` keeps.
fn reduced(node: &Value) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    let mut out = Map::new();
    for (key, value) in obj {
        if !KEPT_KEYWORDS.contains(&key.as_str()) && !UPSTREAM_KEYWORDS.contains(&key.as_str()) {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("properties", Value::Object(props)) => Value::Object(
                props
                    .iter()
                    .map(|(name, prop)| (name.clone(), reduced(prop)))
                    .collect(),
            ),
            ("items" | "additionalProperties", Value::Object(_)) => reduced(value),
            ("additionalProperties", _) => continue,
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// `upstream.json` as the shared reference CRDs give it: the kind versions capstan types, one per
/// line.
fn upstream_json_from_crds() -> String {
    let typed: Vec<String> = typed_kinds()
        .iter()
        .filter(|k| k.strictness == Strictness::Upstream)
        .map(|k| format!("{}/{}/{}", k.key.0, k.key.1, k.key.2))
        .collect();
    let mut entries = BTreeMap::new();
    for (key, schema) in upstream_crd_schemas() {
        if typed.contains(&key) {
            let mut schema = reduced(&schema);
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                props.remove("metadata");
            }
            entries.insert(key, schema);
        }
    }
    let lines: Vec<String> = entries
        .iter()
        .map(|(key, schema)| format!("{}: {}", json!(key), schema))
        .collect();
    format!("{{\n{}\n}}\n", lines.join(",\n"))
}

/// `upstream.json` is what the shared reference CRDs say today; `CAPSTAN_UPDATE_UPSTREAM_SCHEMAS=1`
/// rewrites it after the reference CRDs change.
#[test]
fn the_embedded_upstream_schemas_are_the_reference_crds() {
    let expected = upstream_json_from_crds();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kinds/upstream.json");
    if std::env::var_os("CAPSTAN_UPDATE_UPSTREAM_SCHEMAS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let embedded = std::fs::read_to_string(&path).unwrap();
    assert!(
        embedded == expected,
        "{} differs from the reference CRDs; rerun with CAPSTAN_UPDATE_UPSTREAM_SCHEMAS=1",
        path.display()
    );
    let parsed: Value = serde_json::from_str(&embedded).unwrap();
    assert_eq!(parsed.as_object().unwrap().len(), upstream_schemas().len());
    let upstream = typed_kinds()
        .iter()
        .filter(|k| k.strictness == Strictness::Upstream)
        .count();
    assert_eq!(
        upstream_schemas().len(),
        upstream,
        "an upstream kind without a schema"
    );
}

/// Fields named by both the served schema and an upstream one, as compared.
static COMPARED_FIELDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Where the model's own schema (`ours`, before completion) contradicts an upstream CRD's
/// (`theirs`): a different type, or a field required only here. Those would refuse what upstream
/// accepts, or make stored objects unreadable by the model.
fn contradictions(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<String>) {
    let our_type = ours.get("type").and_then(Value::as_str);
    let their_type = theirs.get("type").and_then(Value::as_str);
    let their_int_or_string = theirs.get("x-kubernetes-int-or-string") == Some(&json!(true));
    match (our_type, their_type) {
        (Some(a), _) if their_int_or_string => {
            out.push(format!("{path}: {a} here, int-or-string upstream"));
        }
        (Some("number"), Some("integer")) | (Some(_), None) | (None, _) => {}
        (Some(a), Some(b)) if a != b => out.push(format!("{path}: {a} here, {b} upstream")),
        _ => {}
    }
    let their_required: Vec<&Value> = theirs
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().collect())
        .unwrap_or_default();
    for name in ours
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !their_required.contains(&name) {
            let name = name.as_str().unwrap_or_default();
            out.push(format!("{}: required here only", child(path, name)));
        }
    }
    if let (Some(Value::Object(ours)), Some(Value::Object(theirs))) =
        (ours.get("properties"), theirs.get("properties"))
    {
        for (name, their_prop) in theirs {
            if path.is_empty() && name == "metadata" {
                continue;
            }
            if let Some(our_prop) = ours.get(name) {
                contradictions(our_prop, their_prop, &child(path, name), out);
            }
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", ".*")] {
        if let (Some(a), Some(b)) = (
            ours.get(key).filter(|a| a.is_object()),
            theirs.get(key).filter(|b| b.is_object()),
        ) {
            contradictions(a, b, &format!("{path}{suffix}"), out);
        }
    }
}

/// Where the served schema (`ours`) does not check an object as an upstream CRD's (`theirs`)
/// does: a field upstream has that is unknown here or the other way round, a different type,
/// nullability, set of required fields, enum, bound, pattern, format, default, list or map type,
/// or unknown fields kept on one side only.
fn differences(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() { "(root)" } else { path };
    for key in ["type", "x-kubernetes-int-or-string", PRESERVE, "nullable"] {
        let (a, b) = (ours.get(key), theirs.get(key));
        if a != b && !(key == "type" && a == Some(&json!("number")) && b == Some(&json!("integer")))
        {
            out.push(format!("{at}: {key} {a:?} here, {b:?} upstream"));
        }
    }
    for key in UPSTREAM_KEYWORDS {
        let (a, b) = (ours.get(*key), theirs.get(*key));
        if a != b {
            out.push(format!("{at}: {key} {a:?} here, {b:?} upstream"));
        }
    }
    let required = |schema: &Value| -> std::collections::BTreeSet<String> {
        schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let (a, b) = (required(ours), required(theirs));
    for name in a.difference(&b) {
        out.push(format!("{}: required here only", child(path, name)));
    }
    for name in b.difference(&a) {
        out.push(format!("{}: required upstream only", child(path, name)));
    }
    let empty = Map::new();
    let our_props = ours
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let their_props = theirs
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (name, their_prop) in their_props {
        if path.is_empty() && name == "metadata" {
            continue;
        }
        match our_props.get(name) {
            Some(our_prop) => {
                COMPARED_FIELDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                differences(our_prop, their_prop, &child(path, name), out);
            }
            None => out.push(format!("{}: unknown here", child(path, name))),
        }
    }
    for name in our_props.keys() {
        if !(their_props.contains_key(name) || path.is_empty() && name == "metadata") {
            out.push(format!("{}: unknown upstream", child(path, name)));
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", ".*")] {
        match (
            ours.get(key).filter(|a| a.is_object()),
            theirs.get(key).filter(|b| b.is_object()),
        ) {
            (Some(a), Some(b)) => differences(a, b, &format!("{path}{suffix}"), out),
            (None, None) => {}
            (a, b) => out.push(format!(
                "{at}: {key} {} here, {} upstream",
                if a.is_some() { "given" } else { "none" },
                if b.is_some() { "given" } else { "none" }
            )),
        }
    }
}

/// Differences from upstream kept on purpose (listed, with the reason, in docs/api.md): status
/// fields the model names that upstream's version of the kind does not have (the other API
/// version's, carried by conversion). Every field upstream has is checked with upstream's rules,
/// in `spec` and `status` alike.
fn deliberate(difference: &str) -> bool {
    let Some((_, d)) = difference.split_once(" @ ") else {
        return false;
    };
    d.starts_with("status") && d.ends_with(": unknown upstream")
}

#[test]
fn the_model_never_contradicts_upstream() {
    let mut seen = Vec::new();
    contradictions(
        &json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}),
        &json!({"type": "object", "properties": {"a": {"type": "array"}, "b": {"type": "string"}}}),
        "",
        &mut seen,
    );
    assert_eq!(
        seen,
        ["a: required here only", "a: string here, array upstream"]
    );
    let upstream: BTreeMap<String, Value> = upstream_crd_schemas().into_iter().collect();
    let mut problems = Vec::new();
    for kind in typed_kinds() {
        let (group, name, version) = kind.key;
        let Some(theirs) = upstream.get(&format!("{group}/{name}/{version}")) else {
            continue;
        };
        let mut found = Vec::new();
        contradictions(&(kind.model)(), theirs, "", &mut found);
        problems.extend(found.into_iter().map(|p| format!("{name}.{version} @ {p}")));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_kind_version_upstream_has_checks_objects_as_upstream_does() {
    // The comparison itself sees what it is for.
    let mut seen = Vec::new();
    differences(
        &json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string", "x-kubernetes-preserve-unknown-fields": true},
            "c": {"type": "integer", "minimum": 1}}}),
        &json!({"type": "object", "properties": {"a": {"type": "string"},
            "b": {"type": "string"}, "c": {"type": "integer", "maximum": 3}}}),
        "",
        &mut seen,
    );
    assert_eq!(
        seen,
        [
            "a: required here only",
            "a: x-kubernetes-preserve-unknown-fields Some(Bool(true)) here, None upstream",
            "b: unknown here",
            "c: minimum Some(Number(1)) here, None upstream",
            "c: maximum None here, Some(Number(3)) upstream",
        ]
    );
    let mut compared = 0;
    let mut problems = Vec::new();
    for (key, theirs) in upstream_crd_schemas() {
        let mut parts = key.splitn(3, '/');
        let (group, kind, version) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let Some(ours) = schema(group, kind, version) else {
            continue;
        };
        compared += 1;
        let mut found = Vec::new();
        differences(ours, &reduced(&theirs), "", &mut found);
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("{kind}.{version} @ {p}"))
                .filter(|p| !deliberate(p)),
        );
    }
    assert!(compared >= 40, "only {compared} kind versions compared");
    let fields = COMPARED_FIELDS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{compared} kind versions, {fields} fields compared");
    assert!(fields > 3000, "only {fields} fields compared");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn one_upstream_schema_is_read_as_the_whole_file_holds_it() {
    let all = upstream_schemas();
    assert!(!all.is_empty());
    for (key, schema) in all {
        assert_eq!(upstream_schema(key).as_ref(), Some(schema), "{key}");
    }
    assert_eq!(upstream_schema("example.com/Widget/v1"), None);
}
