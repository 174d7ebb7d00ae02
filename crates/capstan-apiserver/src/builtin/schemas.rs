//! Structural OpenAPI v3 schemas of Kubernetes' own kinds, generated from the `k8s-openapi` types:
//! every sub-schema inlined (CRD schemas cannot hold references), descriptions kept for
//! `kubectl explain`.

use k8s_openapi::api;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The schema of one `k8s-openapi` type, inlined and made structural.
fn schema_of<T: JsonSchema>() -> Value {
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

/// Every typed kind's schema by (group, kind), generated once.
fn all() -> &'static BTreeMap<(&'static str, &'static str), Value> {
    static SCHEMAS: OnceLock<BTreeMap<(&'static str, &'static str), Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut m = BTreeMap::new();
        m.insert(("", "Namespace"), schema_of::<api::core::v1::Namespace>());
        m.insert(("", "Secret"), schema_of::<api::core::v1::Secret>());
        m.insert(("", "ConfigMap"), schema_of::<api::core::v1::ConfigMap>());
        m.insert(("", "Event"), schema_of::<api::core::v1::Event>());
        m.insert(("", "Pod"), schema_of::<api::core::v1::Pod>());
        m.insert(("", "Node"), schema_of::<api::core::v1::Node>());
        m.insert(("", "Service"), schema_of::<api::core::v1::Service>());
        m.insert(("", "Endpoints"), schema_of::<api::core::v1::Endpoints>());
        m.insert(
            ("", "ServiceAccount"),
            schema_of::<api::core::v1::ServiceAccount>(),
        );
        m.insert(
            ("discovery.k8s.io", "EndpointSlice"),
            schema_of::<api::discovery::v1::EndpointSlice>(),
        );
        m.insert(
            ("apps", "Deployment"),
            schema_of::<api::apps::v1::Deployment>(),
        );
        m.insert(
            ("apps", "DaemonSet"),
            schema_of::<api::apps::v1::DaemonSet>(),
        );
        m.insert(
            ("apps", "StatefulSet"),
            schema_of::<api::apps::v1::StatefulSet>(),
        );
        m.insert(
            ("apps", "ReplicaSet"),
            schema_of::<api::apps::v1::ReplicaSet>(),
        );
        m.insert(
            ("policy", "PodDisruptionBudget"),
            schema_of::<api::policy::v1::PodDisruptionBudget>(),
        );
        m.insert(
            ("rbac.authorization.k8s.io", "Role"),
            schema_of::<api::rbac::v1::Role>(),
        );
        m.insert(
            ("rbac.authorization.k8s.io", "ClusterRole"),
            schema_of::<api::rbac::v1::ClusterRole>(),
        );
        m.insert(
            ("rbac.authorization.k8s.io", "RoleBinding"),
            schema_of::<api::rbac::v1::RoleBinding>(),
        );
        m.insert(
            ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            schema_of::<api::rbac::v1::ClusterRoleBinding>(),
        );
        m.insert(
            ("certificates.k8s.io", "CertificateSigningRequest"),
            schema_of::<api::certificates::v1::CertificateSigningRequest>(),
        );
        m.insert(
            ("coordination.k8s.io", "Lease"),
            schema_of::<api::coordination::v1::Lease>(),
        );
        m.insert(
            ("events.k8s.io", "Event"),
            schema_of::<api::events::v1::Event>(),
        );
        m
    })
}

/// The upstream schema of a Kubernetes kind, or `None` for kinds that are not Kubernetes' own.
pub fn schema(group: &str, kind: &str) -> Option<&'static Value> {
    all()
        .iter()
        .find(|((g, k), _)| *g == group && *k == kind)
        .map(|(_, v)| v)
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
}
