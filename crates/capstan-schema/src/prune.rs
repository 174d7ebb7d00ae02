//! Pruning: removal of the fields a structural schema does not define.
//!
//! As the API server does before storing a custom resource: fields not in `properties` are
//! dropped unless `additionalProperties` or `x-kubernetes-preserve-unknown-fields` keeps them;
//! `apiVersion`, `kind` and `metadata` are kept at the root and in embedded resources, and
//! `metadata` itself is left alone (Kubernetes prunes ObjectMeta separately).

use capstan_model::path::FieldPath;
use serde_json::Value;

use crate::schema::{AdditionalProperties, Schema};

/// Removes unknown fields from `value` (the whole object of a custom resource); returns the
/// paths removed, in document order.
pub fn prune(schema: &Schema, value: &mut Value) -> Vec<FieldPath> {
    let mut removed = Vec::new();
    prune_node(schema, value, &FieldPath::root(), true, &mut removed);
    removed
}

const TYPE_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn prune_node(
    schema: &Schema,
    value: &mut Value,
    path: &FieldPath,
    root: bool,
    removed: &mut Vec<FieldPath>,
) {
    match value {
        Value::Object(map) => {
            let resource = root || schema.embedded_resource;
            let keeps_everything = schema.preserve_unknown_fields
                || matches!(
                    schema.additional_properties,
                    Some(AdditionalProperties::Allowed(true) | AdditionalProperties::Schema(_))
                );
            map.retain(|name, _| {
                let known = keeps_everything
                    || schema.properties.contains_key(name)
                    || (resource && TYPE_FIELDS.contains(&name.as_str()));
                if !known {
                    removed.push(path.key(name.as_str()));
                }
                known
            });
            for (name, child) in map.iter_mut() {
                if resource && name == "metadata" {
                    continue;
                }
                let child_schema =
                    schema
                        .properties
                        .get(name)
                        .or(match &schema.additional_properties {
                            Some(AdditionalProperties::Schema(additional)) => Some(additional),
                            _ => None,
                        });
                if let Some(child_schema) = child_schema {
                    prune_node(
                        child_schema,
                        child,
                        &path.key(name.as_str()),
                        false,
                        removed,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item_schema, item, &path.index(i), false, removed);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pruned(schema: Value, mut value: Value) -> (Value, Vec<String>) {
        let removed = prune(&Schema::from_value(&schema).expect("schema"), &mut value);
        (value, removed.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn unknown_fields_are_removed_and_reported() {
        let schema = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let (value, removed) = pruned(
            schema,
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "odd": 1},
                   "spec": {"list": [{"a": 1, "b": 2}], "labels": {"x": {"v": 1, "w": 2}},
                            "free": {"anything": {"goes": true}}, "extra": 1},
                   "status": {}}),
        );
        assert_eq!(
            value,
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "odd": 1},
                   "spec": {"list": [{"a": 1}], "labels": {"x": {"v": 1}}, "free": {"anything": {"goes": true}}}})
        );
        assert_eq!(
            removed,
            ["status", "spec.extra", "spec.list[0].b", "spec.labels.x.w"]
        );
    }

    #[test]
    fn embedded_resources_keep_their_type_fields() {
        let schema = json!({"type": "object", "properties": {"template": {"type": "object",
            "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}}});
        let (value, removed) = pruned(
            schema,
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "spec": {"y": 1}, "z": 1}}),
        );
        assert_eq!(
            value,
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "spec": {}}})
        );
        assert_eq!(removed, ["template.z", "template.spec.y"]);
    }
}
