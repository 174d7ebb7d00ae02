//! Structural defaulting: `default` values filled in where a field is absent.
//!
//! As the API server does for custom resources: a property with a `default` is set when it is
//! missing, or `null` while the property is not `nullable`; defaults apply recursively through
//! properties, `additionalProperties` and array `items`, including inside values that were just
//! defaulted. `metadata` at the root is left alone.

use serde_json::Value;

use crate::schema::{AdditionalProperties, Schema};

/// Fills in defaults in `value` (the whole object of a custom resource) according to `schema`.
pub fn apply_defaults(schema: &Schema, value: &mut Value) {
    default_node(schema, value, true);
}

fn default_node(schema: &Schema, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            for (name, property) in &schema.properties {
                let Some(default) = &property.default else {
                    continue;
                };
                if root && name == "metadata" {
                    continue;
                }
                let absent = match map.get(name) {
                    None => true,
                    Some(Value::Null) => !property.nullable,
                    Some(_) => false,
                };
                if absent {
                    map.insert(name.clone(), default.clone());
                }
            }
            for (name, child) in map.iter_mut() {
                if root && name == "metadata" {
                    continue;
                }
                if let Some(property) = schema.properties.get(name) {
                    default_node(property, child, false);
                } else if let Some(AdditionalProperties::Schema(additional)) =
                    &schema.additional_properties
                {
                    default_item(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for item in items {
                    default_item(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Defaults a value that has no key of its own (an array item or an `additionalProperties`
/// value): a non-nullable `null` takes the schema's default.
fn default_item(schema: &Schema, item: &mut Value) {
    if item.is_null()
        && !schema.nullable
        && let Some(default) = &schema.default
    {
        *item = default.clone();
    }
    default_node(schema, item, false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaulted(schema: Value, mut value: Value) -> Value {
        apply_defaults(&Schema::from_value(&schema).expect("schema"), &mut value);
        value
    }

    #[test]
    fn absent_and_null_fields_take_defaults() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "default": 1},
            "mode": {"type": "string", "default": "a"},
            "keep": {"type": "string", "nullable": true, "default": "k"},
            "given": {"type": "string", "default": "d"}}}}});
        assert_eq!(
            defaulted(
                schema,
                json!({"spec": {"mode": null, "keep": null, "given": "g"}})
            ),
            json!({"spec": {"mode": "a", "keep": null, "given": "g", "replicas": 1}})
        );
    }

    #[test]
    fn defaults_apply_inside_items_additional_properties_and_defaulted_values() {
        let schema = json!({"type": "object", "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer", "default": 80}}}},
            "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}},
            "nested": {"type": "object", "default": {}, "properties": {"inner": {"type": "string", "default": "x"}}}}});
        assert_eq!(
            defaulted(
                schema,
                json!({"list": [{}, {"port": 8080}], "map": {"a": {}, "b": {"on": false}}})
            ),
            json!({"list": [{"port": 80}, {"port": 8080}], "map": {"a": {"on": true}, "b": {"on": false}},
                   "nested": {"inner": "x"}})
        );
    }

    #[test]
    fn null_items_take_the_item_default() {
        let schema = json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string", "default": "d"}}}});
        assert_eq!(
            defaulted(schema, json!({"l": [null, "x"]})),
            json!({"l": ["d", "x"]})
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_left_alone() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"default": 1}}}}});
        assert_eq!(
            defaulted(schema, json!({"spec": [1]})),
            json!({"spec": [1]})
        );
    }
}
