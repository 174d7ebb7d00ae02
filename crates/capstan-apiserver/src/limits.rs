//! What a write may commit, checked on every write path (create, update, YAML bodies, server-side
//! apply, the result of every patch) before the store is asked to write anything.
//!
//! - The request body is at most [`MAX_REQUEST_BYTES`] (kube-apiserver's 3 MiB); larger ones are
//!   answered 413 with a `Status` naming the limit.
//! - An object is nested at most [`capstan_store::limits::MAX_DEPTH`] levels: whatever is stored
//!   must parse again, in a list or a watch event too.
//! - Metadata has the types Kubernetes gives it (`labels` a map of strings, `finalizers` a list of
//!   strings, ...) and label keys and values their syntax: capstan's own controllers decode objects
//!   with typed metadata, and one object they cannot decode must not stop them.
//! - A Secret's `data` (and a ConfigMap's `binaryData`) values are base64. Errors name the key,
//!   never the value.

use crate::status::{ApiError, Cause};
use base64::Engine;
use serde_json::{Map, Value};

/// Largest request body accepted.
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// Most nodes a YAML request body may expand to, aliases included: an alias bomb is refused after
/// a few tens of MiB of work instead of hundreds (a 3 MiB body of real objects stays far below).
pub const MAX_YAML_NODES: usize = 250_000;

/// Largest total size of an object's annotations (keys and values), as in Kubernetes.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The 413 answer for a body over [`MAX_REQUEST_BYTES`].
pub fn body_too_large() -> ApiError {
    ApiError::TooLarge(format!(
        "the request body is larger than the limit of {MAX_REQUEST_BYTES} bytes"
    ))
}

/// Refuses a parsed body nested deeper than the store keeps (cheap; done before any other work).
pub fn check_depth(kind: &str, object: &Value) -> Result<(), ApiError> {
    let depth = capstan_store::limits::depth(object);
    let limit = capstan_store::limits::MAX_DEPTH;
    if depth <= limit {
        return Ok(());
    }
    let message = format!("the object is nested {depth} levels deep; the limit is {limit}");
    Err(ApiError::Invalid {
        group: String::new(),
        kind: kind.to_owned(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary: message.clone(),
        causes: vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: String::new(),
        }],
    })
}

/// Everything [`check_depth`] checks, plus metadata types and syntax and the base64 of Secrets and
/// ConfigMaps (core group only).
pub fn check_object(group: &str, kind: &str, object: &Value) -> Result<(), ApiError> {
    check_depth(kind, object)?;
    let mut causes = Vec::new();
    match object.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(metadata)) => check_metadata(metadata, &mut causes),
        Some(_) => causes.push(invalid("metadata", "must be an object")),
    }
    if group.is_empty() {
        match kind {
            "Secret" => check_base64_map(object, "data", &mut causes),
            "ConfigMap" => {
                check_string_map(object.get("data"), "data", &mut causes);
                check_base64_map(object, "binaryData", &mut causes);
            }
            _ => {}
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        group: group.to_owned(),
        kind: kind.to_owned(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary: causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", "),
        causes,
    })
}

fn invalid(field: &str, message: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: message.to_owned(),
        field: field.to_owned(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn check_metadata(metadata: &Map<String, Value>, causes: &mut Vec<Cause>) {
    for (field, value) in metadata {
        let path = format!("metadata.{field}");
        let wrong = |expected: &str| {
            invalid(
                &path,
                &format!("must be {expected}, not {}", type_name(value)),
            )
        };
        match (field.as_str(), value) {
            (_, Value::Null) => {}
            (
                "name" | "namespace" | "generateName" | "uid" | "resourceVersion"
                | "creationTimestamp" | "deletionTimestamp" | "selfLink",
                v,
            ) if !v.is_string() => causes.push(wrong("a string")),
            ("generation" | "deletionGracePeriodSeconds", v) if !v.is_i64() => {
                causes.push(wrong("an integer"));
            }
            ("labels", Value::Object(labels)) => check_labels(labels, causes),
            ("annotations", Value::Object(annotations)) => {
                check_annotations(annotations, causes);
            }
            ("labels" | "annotations", _) => causes.push(wrong("a map of strings")),
            ("finalizers", Value::Array(items)) if items.iter().any(|f| !f.is_string()) => {
                causes.push(invalid(&path, "must be a list of strings"));
            }
            ("finalizers", Value::Array(_)) => {}
            ("finalizers", _) => causes.push(wrong("a list of strings")),
            ("ownerReferences", Value::Array(refs)) => check_owner_references(refs, causes),
            ("ownerReferences" | "managedFields", v) if !v.is_array() => {
                causes.push(wrong("a list"));
            }
            _ => {}
        }
    }
}

fn check_owner_references(refs: &[Value], causes: &mut Vec<Cause>) {
    for (i, reference) in refs.iter().enumerate() {
        let path = format!("metadata.ownerReferences[{i}]");
        let Some(reference) = reference.as_object() else {
            causes.push(invalid(&path, "must be an object"));
            continue;
        };
        for required in ["apiVersion", "kind", "name", "uid"] {
            if !reference.get(required).is_some_and(Value::is_string) {
                causes.push(invalid(
                    &format!("{path}.{required}"),
                    "Required value: must be a string",
                ));
            }
        }
        for flag in ["controller", "blockOwnerDeletion"] {
            if reference
                .get(flag)
                .is_some_and(|v| !v.is_boolean() && !v.is_null())
            {
                causes.push(invalid(&format!("{path}.{flag}"), "must be a boolean"));
            }
        }
    }
}

fn check_labels(labels: &Map<String, Value>, causes: &mut Vec<Cause>) {
    for (key, value) in labels {
        let path = format!("metadata.labels[{key:?}]");
        if let Err(problem) = qualified_name(key) {
            causes.push(invalid(&path, &format!("the key is not valid: {problem}")));
        }
        match value {
            Value::String(text) => {
                if let Err(problem) = label_value(text) {
                    causes.push(invalid(
                        &path,
                        &format!("the value is not valid: {problem}"),
                    ));
                }
            }
            other => causes.push(invalid(
                &path,
                &format!("must be a string, not {}", type_name(other)),
            )),
        }
    }
}

fn check_annotations(annotations: &Map<String, Value>, causes: &mut Vec<Cause>) {
    let mut total = 0;
    for (key, value) in annotations {
        let path = format!("metadata.annotations[{key:?}]");
        if let Err(problem) = qualified_name(key) {
            causes.push(invalid(&path, &format!("the key is not valid: {problem}")));
        }
        match value {
            Value::String(text) => total += key.len() + text.len(),
            other => causes.push(invalid(
                &path,
                &format!("must be a string, not {}", type_name(other)),
            )),
        }
    }
    if total > MAX_ANNOTATIONS_BYTES {
        causes.push(invalid(
            "metadata.annotations",
            &format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
        ));
    }
}

fn check_string_map(map: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    match map {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (key, value) in entries {
                if !value.is_string() {
                    causes.push(invalid(
                        &format!("{field}[{key:?}]"),
                        &format!("must be a string, not {}", type_name(value)),
                    ));
                }
            }
        }
        Some(other) => causes.push(invalid(
            field,
            &format!("must be a map of strings, not {}", type_name(other)),
        )),
    }
}

/// `data` of a Secret: every value base64. The message names the key, never the value.
fn check_base64_map(object: &Value, field: &str, causes: &mut Vec<Cause>) {
    match object.get(field) {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (key, value) in entries {
                let path = format!("{field}[{key:?}]");
                if !is_config_key(key) {
                    causes.push(invalid(
                        &path,
                        "the key must consist of alphanumeric characters, '-', '_' or '.'",
                    ));
                }
                match value {
                    Value::String(text) => {
                        if base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .is_err()
                        {
                            causes.push(invalid(&path, "the value is not base64 (value hidden)"));
                        }
                    }
                    Value::Null => {}
                    other => causes.push(invalid(
                        &path,
                        &format!("must be a base64 string, not {}", type_name(other)),
                    )),
                }
            }
        }
        Some(other) => causes.push(invalid(
            field,
            &format!("must be a map of base64 strings, not {}", type_name(other)),
        )),
    }
}

fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters, as label names and values.
fn label_name(text: &str) -> Result<(), String> {
    if text.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let ok = text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into())
    }
}

/// A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name.
pub(crate) fn qualified_name(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            let prefix_ok = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                });
            if !prefix_ok {
                return Err("the prefix must be a lowercase DNS subdomain".into());
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("the name part must not be empty".into());
    }
    label_name(name)
}

/// A label value: empty, or a label name.
pub(crate) fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        Ok(())
    } else {
        label_name(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_of_the_wrong_type_is_refused_by_field() {
        let err = check_object(
            "",
            "Secret",
            &json!({"metadata": {"name": "s", "labels": ["a", "b"]}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("metadata.labels"), "{err}");
        let err = check_object(
            "",
            "ConfigMap",
            &json!({"metadata": {"name": "c", "finalizers": "x", "annotations": {"a": 1}}}),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("metadata.finalizers") && text.contains("metadata.annotations"));
        assert!(
            check_object(
                "x.io",
                "Thing",
                &json!({"metadata": {"name": "t", "ownerReferences": [{"kind": "A"}]}})
            )
            .is_err()
        );
        check_object(
            "",
            "ConfigMap",
            &json!({"metadata": {"name": "c", "labels": {"app.kubernetes.io/name": "x", "empty": ""}, "finalizers": ["a/b"]}, "data": {"k": "v"}}),
        )
        .unwrap();
    }

    #[test]
    fn label_syntax_is_kubernetes_syntax() {
        for bad in ["-a", "a-", "a b", "Ab.c/x", "/x", "x/", &"a".repeat(64)] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
        for good in ["a", "A_b.c", "cluster.x-k8s.io/cluster-name", "a1/B"] {
            assert!(qualified_name(good).is_ok(), "{good}");
        }
        assert!(label_value("").is_ok());
        assert!(label_value("has space").is_err());
    }

    #[test]
    fn secret_data_must_be_base64_and_the_error_hides_the_value() {
        let err = check_object(
            "",
            "Secret",
            &json!({"metadata": {"name": "bmc"}, "data": {"password": "hunter2!!"}}),
        )
        .unwrap_err();
        let text = format!("{err} {}", err.to_status());
        assert!(text.contains("data[\\\"password\\\"]") || text.contains("data[\"password\"]"));
        assert!(!text.contains("hunter2"), "{text}");
        check_object(
            "",
            "Secret",
            &json!({"metadata": {"name": "bmc"}, "data": {"password": "aHVudGVyMg=="}}),
        )
        .unwrap();
    }

    #[test]
    fn nesting_beyond_the_store_limit_is_refused_naming_the_limit() {
        let mut value = json!(1);
        for _ in 0..150 {
            value = json!({ "a": value });
        }
        let object = json!({"metadata": {"name": "deep"}, "spec": value});
        let err = check_object("x.io", "Thing", &object).unwrap_err();
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err.to_string().contains("limit is 100"), "{err}");
    }
}
