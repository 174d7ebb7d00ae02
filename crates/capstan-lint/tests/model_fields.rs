//! `unknown-field` knows every field upstream defines: for every kind version lint types, an object
//! with every property of the upstream CRD's schema (outside `status`) is linted, and gets no
//! `unknown-field` finding (the schema lint prunes with is the one `capstan serve` admits the kind
//! with, capstan's model completed with the upstream CRD's), nor an `invalid-field` one (the typed
//! model reads every upstream field it names).
//!
//! Needs the upstream CRDs beside this checkout (as in CI); without them the test has nothing to
//! compare against and says so.

use std::path::Path;

use capstan_lint::{LintOptions, lint, rule_id as id};
use capstan_manifest::{LoadedObject, Origin, load_path};
use serde_json::{Map, Value, json};

/// A value for `schema` with every property set, as deep as the schema goes.
fn sample(schema: &Value, depth: usize) -> Value {
    if depth > 40 {
        return Value::Null;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return json!(1);
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut out = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    let value = sample(property, depth + 1);
                    if !value.is_null() {
                        out.insert(name.clone(), value);
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                let value = sample(&schema["additionalProperties"], depth + 1);
                if !value.is_null() {
                    out.insert("key".into(), value);
                }
            }
            Value::Object(out)
        }
        Some("array") => {
            let item = sample(&schema["items"], depth + 1);
            if item.is_null() {
                json!([])
            } else {
                json!([item])
            }
        }
        Some("string") => match schema["format"].as_str() {
            Some("date-time") => json!("2025-01-01T00:00:00Z"),
            Some("int-or-string") => json!(1),
            _ => json!("x"),
        },
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        _ => Value::Null,
    }
}

#[test]
fn lint_knows_every_upstream_field_of_the_kinds_it_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds");
    if !dir.is_dir() {
        eprintln!("no upstream CRDs at {}: nothing to compare", dir.display());
        return;
    }
    let mut objects = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                for crd in load_path(&path).expect("CRD loads") {
                    let spec = &crd.value["spec"];
                    let (Some(group), Some(kind)) =
                        (spec["group"].as_str(), spec["names"]["kind"].as_str())
                    else {
                        continue;
                    };
                    for version in spec["versions"].as_array().into_iter().flatten() {
                        let Some(name) = version["name"].as_str() else {
                            continue;
                        };
                        if capstan_model::kinds::lookup(&format!("{group}/{name}"), kind).is_err() {
                            continue;
                        }
                        let mut object = sample(&version["schema"]["openAPIV3Schema"], 0);
                        let Some(fields) = object.as_object_mut() else {
                            continue;
                        };
                        fields.remove("status");
                        fields.insert("apiVersion".into(), json!(format!("{group}/{name}")));
                        fields.insert("kind".into(), json!(kind));
                        fields.insert(
                            "metadata".into(),
                            json!({"name": "sample", "namespace": "default"}),
                        );
                        objects.push(LoadedObject::new(
                            object,
                            Origin::new(format!("{kind}.{group}/{name}"), 1),
                        ));
                    }
                }
            }
        }
    }
    assert!(
        objects.len() > 20,
        "only {} typed kinds found",
        objects.len()
    );
    let report = lint(
        objects,
        &LintOptions {
            partial: true,
            schemas: None,
        },
    );
    let mut gaps: Vec<String> = report
        .diagnostics
        .iter()
        .filter_map(|d| match d.rule {
            r if r == id::UNKNOWN_FIELD => {
                Some(format!("{}: {}", d.location.file, d.location.path))
            }
            // A sample the model cannot read is not judged at all: that must not go unnoticed.
            r if r == id::INVALID_FIELD => {
                Some(format!("{}: not judged, {}", d.location.file, d.message))
            }
            _ => None,
        })
        .collect();
    gaps.sort();
    gaps.dedup();
    assert!(
        gaps.is_empty(),
        "lint refuses upstream fields:\n{}",
        gaps.join("\n")
    );
}
