//! `Table` responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which `kubectl get` prints:
//! a Name column, the kind's printer columns (evaluated with a JSONPath subset), and Age.

use serde_json::{Value, json};

pub use capstan_schema::PrinterColumn;

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`. Returns every match.
pub fn eval_json_path<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![value];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            current = current.into_iter().filter_map(|v| v.get(key)).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let selector = &after[..end];
            rest = &after[end + 1..];
            current = if selector == "*" {
                current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect()
            } else if let Ok(index) = selector.parse::<usize>() {
                current.into_iter().filter_map(|v| v.get(index)).collect()
            } else if let Some(filter) = selector
                .strip_prefix("?(@.")
                .and_then(|f| f.strip_suffix(')'))
            {
                let Some((field, expected)) = filter.split_once("==") else {
                    return Vec::new();
                };
                let expected = expected.trim().trim_matches(['"', '\'']);
                current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| item.get(field.trim()).and_then(Value::as_str) == Some(expected))
                    .collect()
            } else {
                return Vec::new();
            };
        } else {
            return Vec::new();
        }
    }
    current
}

/// `kubectl`-style age: `45s`, `12m`, `5h`, `3d`.
pub fn age(created: &str) -> String {
    let Ok(created) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = jiff::Timestamp::now().as_second() - created.as_second();
    let seconds = seconds.max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn cell(value: Option<&&Value>, type_: &str) -> Value {
    match value {
        None => Value::Null,
        Some(Value::String(s)) if type_ == "date" => Value::String(age(s)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) if type_ != "string" => (*v).clone(),
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(other) => Value::String(other.to_string()),
    }
}

/// Builds the Table for `objects`.
pub fn table(
    objects: &[Value],
    columns: &[PrinterColumn],
    resource_version: &str,
    continue_token: Option<&str>,
) -> Value {
    let mut definitions = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for c in columns {
        definitions.push(json!({"name": c.name, "type": c.column_type, "format": c.format.clone().unwrap_or_default(), "description": c.description.clone().unwrap_or_default(), "priority": c.priority}));
    }
    let has_age = columns.iter().any(|c| c.name.eq_ignore_ascii_case("age"));
    if !has_age {
        definitions.push(json!({"name": "Age", "type": "date", "format": "", "description": "Time since creation.", "priority": 0}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            for c in columns {
                let found = eval_json_path(o, &c.json_path);
                cells.push(if found.len() > 1 {
                    Value::String(
                        found
                            .iter()
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                } else {
                    cell(found.first(), &c.column_type)
                });
            }
            if !has_age {
                cells.push(Value::String(age(o["metadata"]["creationTimestamp"].as_str().unwrap_or_default())));
            }
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let (Some(token), Some(m)) = (continue_token, metadata.as_object_mut()) {
        m.insert("continue".into(), Value::String(token.to_owned()));
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

/// Sets each row's `object` as `includeObject` asks: `Object` the whole object, `None` nothing,
/// `Metadata` (the default) the object's metadata.
pub fn include_objects(mut table: Value, objects: &[Value], include: Option<&str>) -> Value {
    if let Some(rows) = table["rows"].as_array_mut() {
        for (row, object) in rows.iter_mut().zip(objects) {
            let Some(row) = row.as_object_mut() else {
                continue;
            };
            match include {
                Some("Object") => {
                    row.insert("object".into(), object.clone());
                }
                Some("None") => {
                    row.remove("object");
                }
                _ => {}
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_subset() {
        let v = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]},
                       "spec": {"items": [{"n": 1}, {"n": 2}]}});
        assert_eq!(eval_json_path(&v, ".status.phase"), vec![&json!("Running")]);
        assert_eq!(
            eval_json_path(&v, r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![&json!("True")]
        );
        assert_eq!(
            eval_json_path(&v, ".spec.items[*].n"),
            vec![&json!(1), &json!(2)]
        );
        assert_eq!(eval_json_path(&v, ".spec.items[1].n"), vec![&json!(2)]);
        assert!(eval_json_path(&v, ".nope.x").is_empty());
    }

    #[test]
    fn tables_have_name_columns_and_age() {
        let objects = vec![
            json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "status": {"phase": "Provisioned"}}),
        ];
        let cols = vec![PrinterColumn {
            name: "Phase".into(),
            column_type: "string".into(),
            format: None,
            description: None,
            priority: 0,
            json_path: ".status.phase".into(),
        }];
        let t = table(&objects, &cols, "7", None);
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], "Provisioned");
        assert!(t["rows"][0]["cells"][2].as_str().unwrap().ends_with('d'));
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 3);
        let whole = include_objects(t.clone(), &objects, Some("Object"));
        assert_eq!(whole["rows"][0]["object"]["status"]["phase"], "Provisioned");
        let none = include_objects(t, &objects, Some("None"));
        assert!(none["rows"][0].get("object").is_none());
    }
}
