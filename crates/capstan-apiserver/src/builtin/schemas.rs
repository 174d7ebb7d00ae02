//! Structural OpenAPI v3 schemas of Kubernetes' own kinds, generated from the `k8s-openapi` types:
//! every sub-schema inlined (CRD schemas cannot hold references), descriptions kept for
//! `kubectl explain`.

use k8s_openapi::api;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Kubernetes' types that are `+structType=atomic` upstream (`x-kubernetes-map-type: atomic` in
/// kube-apiserver's OpenAPI): server-side apply owns and replaces each as one value.
/// `k8s-openapi`'s schemas do not carry the marker, so it is added here by type name.
const ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.FileKeySelector",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.TopologySelectorTerm",
    "io.k8s.api.core.v1.ScopeSelector",
    "io.k8s.api.core.v1.EndpointAddress",
    "io.k8s.api.core.v1.EndpointPort",
    "io.k8s.api.discovery.v1.EndpointPort",
    "io.k8s.api.rbac.v1.Subject",
    "io.k8s.api.rbac.v1.RoleRef",
];

/// Map fields that are `+mapType=atomic` upstream: (type name, field).
const ATOMIC_MAP_FIELDS: &[(&str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector"),
    ("io.k8s.api.core.v1.ServiceSpec", "selector"),
];

/// The schema of one `k8s-openapi` type, inlined and made structural, with the atomic markers
/// kube-apiserver publishes.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    let mut defs = match schema.as_object_mut().and_then(|o| o.remove("$defs")) {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    for (name, def) in defs.iter_mut() {
        mark_atomic(name, def);
    }
    mark_atomic(&T::schema_name(), &mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("title");
    }
    let mut stack = vec![T::schema_name().into_owned()];
    inline(&mut schema, &defs, &mut stack);
    make_structural(&mut schema);
    schema
}

/// Adds the atomic markers of the type named `name` to its schema.
fn mark_atomic(name: &str, schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if ATOMIC_STRUCTS.contains(&name) {
        obj.insert("x-kubernetes-map-type".into(), json!("atomic"));
    }
    for (_, field) in ATOMIC_MAP_FIELDS.iter().filter(|(t, _)| *t == name) {
        if let Some(Value::Object(prop)) = obj.get_mut("properties").and_then(|p| p.get_mut(*field))
        {
            prop.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
}

/// Replaces every reference to a definition by the definition itself (keeping the referring
/// schema's own keys, such as its description); a reference back into a type being inlined is
/// left for [`make_structural`].
fn inline(schema: &mut Value, defs: &Map<String, Value>, stack: &mut Vec<String>) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let target = obj
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .map(str::to_owned);
    if let Some(name) = target
        && !stack.contains(&name)
        && let Some(Value::Object(def)) = defs.get(&name)
    {
        obj.remove("$ref");
        for (key, value) in def {
            if key != "title" && !obj.contains_key(key) {
                obj.insert(key.clone(), value.clone());
            }
        }
        stack.push(name);
        inline(schema, defs, stack);
        stack.pop();
        return;
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(props)) = obj.get_mut(key) {
            for value in props.values_mut() {
                inline(value, defs, stack);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(value) = obj.get_mut(key) {
            inline(value, defs, stack);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = obj.get_mut(key) {
            for value in list {
                inline(value, defs, stack);
            }
        }
    }
}

/// Replaces what a CRD schema cannot hold: a reference left for a recursive type becomes an object
/// that keeps whatever it is given.
fn make_structural(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if obj.contains_key("$ref") {
        let description = obj.get("description").cloned();
        let mut replacement = Map::new();
        replacement.insert("type".into(), json!("object"));
        replacement.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        if let Some(d) = description {
            replacement.insert("description".into(), d);
        }
        *obj = replacement;
        return;
    }
    obj.remove("title");
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for value in props.values_mut() {
            make_structural(value);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(value) = obj.get_mut(key)
            && value.is_object()
        {
            make_structural(value);
        }
    }
}

/// The generator of every typed kind's schema by (group, kind). Only the generators are kept (a
/// schema is generated when asked for: the registry of kinds keeps each one once, in its
/// definition), and the table is built once: every request asks whether its kind is typed.
fn all() -> &'static Generators {
    static ALL: std::sync::LazyLock<Generators> = std::sync::LazyLock::new(generators);
    &ALL
}

/// Schema generators by (group, kind).
type Generators = BTreeMap<(&'static str, &'static str), fn() -> Value>;

fn generators() -> Generators {
    {
        let mut m = Generators::new();
        m.insert(("", "Namespace"), schema_of::<api::core::v1::Namespace>);
        m.insert(("", "Secret"), schema_of::<api::core::v1::Secret>);
        m.insert(("", "ConfigMap"), schema_of::<api::core::v1::ConfigMap>);
        m.insert(("", "Event"), schema_of::<api::core::v1::Event>);
        m.insert(("", "Pod"), schema_of::<api::core::v1::Pod>);
        m.insert(("", "Node"), schema_of::<api::core::v1::Node>);
        m.insert(("", "Service"), schema_of::<api::core::v1::Service>);
        m.insert(("", "Endpoints"), schema_of::<api::core::v1::Endpoints>);
        m.insert(
            ("", "ResourceQuota"),
            schema_of::<api::core::v1::ResourceQuota>,
        );
        m.insert(
            ("", "ServiceAccount"),
            schema_of::<api::core::v1::ServiceAccount>,
        );
        m.insert(
            ("discovery.k8s.io", "EndpointSlice"),
            schema_of::<api::discovery::v1::EndpointSlice>,
        );
        m.insert(
            ("apps", "Deployment"),
            schema_of::<api::apps::v1::Deployment>,
        );
        m.insert(("apps", "DaemonSet"), schema_of::<api::apps::v1::DaemonSet>);
        m.insert(
            ("apps", "StatefulSet"),
            schema_of::<api::apps::v1::StatefulSet>,
        );
        m.insert(
            ("apps", "ReplicaSet"),
            schema_of::<api::apps::v1::ReplicaSet>,
        );
        m.insert(
            ("policy", "PodDisruptionBudget"),
            schema_of::<api::policy::v1::PodDisruptionBudget>,
        );
        m.insert(
            ("rbac.authorization.k8s.io", "Role"),
            schema_of::<api::rbac::v1::Role>,
        );
        m.insert(
            ("rbac.authorization.k8s.io", "ClusterRole"),
            schema_of::<api::rbac::v1::ClusterRole>,
        );
        m.insert(
            ("rbac.authorization.k8s.io", "RoleBinding"),
            schema_of::<api::rbac::v1::RoleBinding>,
        );
        m.insert(
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            schema_of::<api::rbac::v1::ClusterRoleBinding>,
        );
        m.insert(
            ("certificates.k8s.io", "CertificateSigningRequest"),
            schema_of::<api::certificates::v1::CertificateSigningRequest>,
        );
        m.insert(
            ("coordination.k8s.io", "Lease"),
            schema_of::<api::coordination::v1::Lease>,
        );
        m.insert(
            ("events.k8s.io", "Event"),
            schema_of::<api::events::v1::Event>,
        );
        m
    }
}

/// The upstream schema of a Kubernetes kind, or `None` for kinds that are not Kubernetes' own.
pub fn schema(group: &str, kind: &str) -> Option<Value> {
    all().get(&(group, kind)).map(|generate| generate())
}

/// Whether `(group, kind)` is one of Kubernetes' own kinds (one with a schema here).
pub fn has_schema(group: &str, kind: &str) -> bool {
    all().contains_key(&(group, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_inlined_and_typed() {
        let pod = schema("", "Pod").unwrap();
        let text = pod.to_string();
        assert!(!text.contains("$ref"), "references left");
        let containers = &pod["properties"]["spec"]["properties"]["containers"];
        assert_eq!(containers["type"], "array");
        assert_eq!(containers["items"]["properties"]["name"]["type"], "string");
        assert_eq!(
            pod["properties"]["metadata"]["properties"]["labels"]["type"],
            "object"
        );
        let deployment = schema("apps", "Deployment").unwrap();
        assert_eq!(
            deployment["properties"]["spec"]["properties"]["replicas"]["type"],
            "integer"
        );
        assert!(schema("cluster.x-k8s.io", "Cluster").is_none());
    }

    /// Strips the markers this module adds.
    fn unmarked(value: &Value) -> Value {
        match value {
            Value::Object(obj) => Value::Object(
                obj.iter()
                    .filter(|(k, _)| *k != "x-kubernetes-map-type")
                    .map(|(k, v)| (k.clone(), unmarked(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(unmarked).collect()),
            other => other.clone(),
        }
    }

    fn schemars_inlined<T: JsonSchema>() -> Value {
        let generator = SchemaSettings::draft2020_12()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .into_generator();
        let mut schema = generator.into_root_schema_for::<T>().to_value();
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("$defs");
            obj.remove("title");
        }
        make_structural(&mut schema);
        schema
    }

    #[test]
    fn the_atomic_markers_are_the_only_addition_to_the_types_schemas() {
        assert_eq!(
            unmarked(&schema("", "Pod").unwrap()),
            schemars_inlined::<api::core::v1::Pod>()
        );
        assert_eq!(
            unmarked(&schema("apps", "Deployment").unwrap()),
            schemars_inlined::<api::apps::v1::Deployment>()
        );
        assert_eq!(
            unmarked(&schema("rbac.authorization.k8s.io", "RoleBinding").unwrap()),
            schemars_inlined::<api::rbac::v1::RoleBinding>()
        );
    }

    #[test]
    fn atomic_structs_and_maps_are_marked_where_kubernetes_marks_them() {
        let deployment = schema("apps", "Deployment").unwrap();
        let spec = &deployment["properties"]["spec"]["properties"];
        assert_eq!(spec["selector"]["x-kubernetes-map-type"], "atomic");
        assert!(spec["strategy"].get("x-kubernetes-map-type").is_none());
        let pod_spec = &spec["template"]["properties"]["spec"]["properties"];
        assert_eq!(pod_spec["nodeSelector"]["x-kubernetes-map-type"], "atomic");
        let env_from = &pod_spec["containers"]["items"]["properties"]["env"]["items"]["properties"]
            ["valueFrom"]["properties"];
        assert_eq!(env_from["secretKeyRef"]["x-kubernetes-map-type"], "atomic");
        assert_eq!(
            deployment["properties"]["metadata"]["properties"]["ownerReferences"]["items"]["x-kubernetes-map-type"],
            "atomic"
        );
        let service = schema("", "Service").unwrap();
        assert_eq!(
            service["properties"]["spec"]["properties"]["selector"]["x-kubernetes-map-type"],
            "atomic"
        );
        let binding = schema("rbac.authorization.k8s.io", "RoleBinding").unwrap();
        assert_eq!(
            binding["properties"]["roleRef"]["x-kubernetes-map-type"],
            "atomic"
        );
    }
}
