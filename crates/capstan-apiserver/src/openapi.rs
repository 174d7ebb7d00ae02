//! OpenAPI v3 documents (`/openapi/v3`, `/openapi/v3/apis/GROUP/VERSION`): one schema per kind with its
//! group-version-kind, and the resource paths with their operations. kubectl reads them for `explain`
//! and to learn that the server validates fields itself (the `fieldValidation` parameter on PATCH),
//! which keeps its client-side validation out of the way.

use crate::registry::{Registry, api_version};
use serde_json::{Value, json};

/// The schema name of a kind: reversed group, version, kind (`io.x-k8s.cluster.v1beta1.Cluster`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = if group.is_empty() {
        vec!["io", "k8s", "api", "core"]
    } else {
        group.split('.').rev().collect()
    };
    format!("{}.{version}.{kind}", reversed.join("."))
}

fn hash(text: &str) -> String {
    // FNV-1a: the hash only has to change when the document does (clients cache by it).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// The `openAPIV3Schema` of `version` as the definition wrote it.
fn raw_schema(definition: &Value, version: &str) -> Option<Value> {
    definition["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
        .filter(|s| !s.is_null())
}

/// `/openapi/v3`: where each group-version's document is.
pub fn root(registry: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = Vec::new();
    for crd in registry.iter() {
        for v in crd.served_versions() {
            let gv = (crd.group.clone(), v.name.clone());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
    }
    gvs.sort();
    for (group, version) in gvs {
        let prefix = if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        };
        let doc = group_version(registry, &group, &version).to_string();
        paths.insert(
            prefix.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{prefix}?hash={}", hash(&doc))}),
        );
    }
    json!({"paths": paths})
}

fn parameter(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// The document of one group-version.
pub fn group_version(registry: &Registry, group: &str, version: &str) -> Value {
    let mut schemas = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    for crd in registry.iter().filter(|c| c.group == group) {
        if !crd.version(version).is_some_and(|v| v.served) {
            continue;
        }
        let gvk = json!({"group": group, "version": version, "kind": crd.kind});
        let name = schema_name(group, version, &crd.kind);
        let mut schema =
            raw_schema(&crd.definition, version).unwrap_or_else(|| json!({"type": "object"}));
        if let Some(obj) = schema.as_object_mut() {
            obj.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        schemas.insert(name.clone(), schema);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let content = json!({"application/json": {"schema": reference}});
        let op = |action: &str, params: Vec<Value>| {
            json!({
                "operationId": format!("{action}{}", crd.kind),
                "parameters": params,
                "responses": {"200": {"description": "OK", "content": content}},
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        let write_params = || {
            vec![
                parameter("dryRun"),
                parameter("fieldManager"),
                parameter("fieldValidation"),
            ]
        };
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{}/{version}", group)
        };
        let collection = if crd.scope == capstan_schema::Scope::Namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", crd.plural)
        } else {
            format!("{base}/{}", crd.plural)
        };
        let mut patch = op("patch", write_params());
        if let Some(obj) = patch.as_object_mut() {
            obj.insert(
                "requestBody".into(),
                json!({"content": {"application/merge-patch+json": {"schema": {"type": "object"}}, "application/apply-patch+yaml": {"schema": {"type": "object"}}}}),
            );
        }
        paths.insert(
            collection.clone(),
            json!({"get": op("list", vec![parameter("labelSelector"), parameter("fieldSelector"), parameter("limit"), parameter("continue"), parameter("watch")]), "post": op("post", write_params())}),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({"get": op("get", Vec::new()), "put": op("put", write_params()), "patch": patch, "delete": op("delete", vec![parameter("dryRun")])}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "capstan", "version": api_version(group, version)},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_name_every_kind_with_its_gvk_and_field_validation() {
        let registry = Registry::builtin().unwrap();
        assert_eq!(
            schema_name("cluster.x-k8s.io", "v1beta1", "Cluster"),
            "io.x-k8s.cluster.v1beta1.Cluster"
        );
        let root = root(&registry);
        assert!(
            root["paths"]["apis/metal3.io/v1alpha1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .contains("?hash=")
        );
        let doc = group_version(&registry, "metal3.io", "v1alpha1");
        let bmh = &doc["components"]["schemas"]["io.metal3.v1alpha1.BareMetalHost"];
        assert_eq!(
            bmh["x-kubernetes-group-version-kind"][0]["kind"],
            "BareMetalHost"
        );
        let patch = &doc["paths"]["/apis/metal3.io/v1alpha1/namespaces/{namespace}/baremetalhosts/{name}"]
            ["patch"];
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }
}
