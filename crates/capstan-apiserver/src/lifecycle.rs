//! Object metadata semantics applied on every write: names (`generateName`), `uid`,
//! `creationTimestamp`, `generation` (bumped on spec changes only), the `status` subresource split,
//! and deletion with finalizers (`deletionTimestamp`).

use crate::status::{ApiError, Cause};
use serde_json::{Map, Value};

/// The current time in the form Kubernetes writes timestamps (`2026-01-02T03:04:05Z`).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn metadata_mut(object: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let obj = object
        .as_object_mut()
        .ok_or_else(|| ApiError::BadRequest("the request body must be a JSON object".into()))?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()
        .ok_or_else(|| ApiError::BadRequest("metadata must be an object".into()))
}

/// Characters Kubernetes uses for `generateName` suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())]))
        .collect()
}

/// Fills in server-owned metadata of a new object and returns its name.
pub fn prepare_create(
    object: &mut Value,
    namespace: Option<&str>,
    kind: &str,
) -> Result<String, ApiError> {
    let meta = metadata_mut(object)?;
    let name = match meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(name) => name.to_owned(),
        None => match meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(prefix) => format!("{prefix}{}", random_suffix()),
            None => {
                return Err(ApiError::Invalid {
                    group: String::new(),
                    kind: kind.to_owned(),
                    name: String::new(),
                    summary: "metadata.name: Required value: name or generateName is required"
                        .into(),
                    causes: vec![Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: name or generateName is required".into(),
                        field: "metadata.name".into(),
                    }],
                });
            }
        },
    };
    validate_name(&name, kind)?;
    meta.insert("name".into(), Value::String(name.clone()));
    match namespace {
        Some(ns) => {
            if let Some(given) = meta.get("namespace").and_then(Value::as_str)
                && !given.is_empty()
                && given != ns
            {
                return Err(ApiError::BadRequest(format!(
                    "the namespace of the provided object ({given}) does not match the namespace sent on the request ({ns})"
                )));
            }
            meta.insert("namespace".into(), Value::String(ns.to_owned()));
        }
        None => {
            meta.remove("namespace");
        }
    }
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(now()));
    if tracks_generation(kind) {
        meta.insert("generation".into(), Value::from(1));
    } else {
        meta.remove("generation");
    }
    for server_owned in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(server_owned);
    }
    Ok(name)
}

/// Whether objects of `kind` carry `metadata.generation`: custom resources and the Kubernetes kinds
/// whose spec a controller acts on do; kube-apiserver leaves it off the kinds that have no spec to
/// observe (ConfigMaps, Secrets, Namespaces, RBAC, Events …), and so does this server.
pub fn tracks_generation(kind: &str) -> bool {
    !matches!(
        kind,
        "Namespace"
            | "ConfigMap"
            | "Secret"
            | "ServiceAccount"
            | "Node"
            | "Service"
            | "Endpoints"
            | "Event"
            | "Lease"
            | "Role"
            | "ClusterRole"
            | "RoleBinding"
            | "ClusterRoleBinding"
            | "CertificateSigningRequest"
            | "ResourceQuota"
    )
}

/// Names must be DNS subdomains: lowercase alphanumerics, `-` and `.`, at most 253 characters.
/// RBAC objects only need to be a path segment (`system:discovery`), as in kube-apiserver.
fn validate_name(name: &str, kind: &str) -> Result<(), ApiError> {
    if matches!(
        kind,
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
    ) {
        if !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']) {
            return Ok(());
        }
        let message = format!(
            "Invalid value: {name:?}: may not be '.' or '..' and may not contain '/' or '%'"
        );
        return Err(ApiError::Invalid {
            group: String::new(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            summary: format!("metadata.name: {message}"),
            causes: vec![Cause {
                reason: "FieldValueInvalid".into(),
                message,
                field: "metadata.name".into(),
            }],
        });
    }
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        return Ok(());
    }
    let message = format!(
        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
    );
    Err(ApiError::Invalid {
        group: String::new(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        summary: format!("metadata.name: {message}"),
        causes: vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: "metadata.name".into(),
        }],
    })
}

/// Everything but metadata and status: what `generation` tracks.
fn spec_part(object: &Value) -> Map<String, Value> {
    object
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteScope {
    /// The main resource: everything but status when the kind has a status subresource.
    Main { status_subresource: bool },
    /// The `status` subresource: only status.
    Status,
}

/// Prepares `new` to replace `old`: carries over server-owned metadata, applies the subresource split
/// and bumps `generation` when the spec changed. Returns whether anything changed at all.
pub fn prepare_update(
    old: &Value,
    new: &mut Value,
    scope: WriteScope,
    kind: &str,
) -> Result<bool, ApiError> {
    if scope == WriteScope::Status {
        let status = new.get("status").cloned();
        let mut merged = old.clone();
        if let Some(obj) = merged.as_object_mut() {
            match status {
                Some(status) => obj.insert("status".into(), status),
                None => obj.remove("status"),
            };
        }
        *new = merged;
    } else if scope
        == (WriteScope::Main {
            status_subresource: true,
        })
        && let Some(obj) = new.as_object_mut()
    {
        match old.get("status") {
            Some(status) => obj.insert("status".into(), status.clone()),
            None => obj.remove("status"),
        };
    }
    let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
    let being_deleted = old_meta.contains_key("deletionTimestamp");
    let new_meta = metadata_mut(new)?;
    for carried in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old_meta.get(carried) {
            Some(v) => new_meta.insert(carried.into(), v.clone()),
            None => new_meta.remove(carried),
        };
    }
    new_meta.remove("resourceVersion");
    if being_deleted {
        let finalizers = |m: &Map<String, Value>| -> Vec<String> {
            m.get("finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let before = finalizers(&old_meta);
        if let Some(added) = finalizers(new_meta)
            .into_iter()
            .find(|f| !before.contains(f))
        {
            let message = format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"
            );
            return Err(ApiError::Invalid {
                group: String::new(),
                kind: kind.to_owned(),
                name: old_meta
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                summary: format!("metadata.finalizers: {message}"),
                causes: vec![Cause {
                    reason: "FieldValueForbidden".into(),
                    message,
                    field: "metadata.finalizers".into(),
                }],
            });
        }
    }
    if spec_part(old) != spec_part(new) && old["metadata"].get("generation").is_some() {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(new)?.insert("generation".into(), Value::from(generation));
    }
    let mut old_cmp = old.clone();
    if let Some(m) = old_cmp["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    Ok(old_cmp != *new)
}

/// The object's finalizers (for a Namespace also its `spec.finalizers`, which hold its deletion too).
pub fn finalizers(object: &Value) -> Vec<String> {
    let mut list: Vec<String> = object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    list.extend(crate::builtin::namespaces::spec_finalizers(object));
    list
}

/// Whether the object is marked for deletion.
pub fn is_being_deleted(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// Marks an object for deletion (it has finalizers): sets `deletionTimestamp` once.
pub fn mark_deleted(object: &mut Value) -> Result<(), ApiError> {
    let meta = metadata_mut(object)?;
    if !meta.contains_key("deletionTimestamp") {
        meta.insert("deletionTimestamp".into(), Value::String(now()));
        meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
        if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
            meta.insert("generation".into(), Value::from(generation + 1));
        }
    }
    Ok(())
}

/// Adds a finalizer if missing (deletion propagation policies use `orphan` and `foregroundDeletion`).
pub fn add_finalizer(object: &mut Value, finalizer: &str) -> Result<(), ApiError> {
    let meta = metadata_mut(object)?;
    let list = meta
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(arr) = list.as_array_mut()
        && !arr.iter().any(|v| v.as_str() == Some(finalizer))
    {
        arr.push(Value::String(finalizer.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn create_fills_server_metadata_and_generates_names() {
        let mut obj =
            json!({"metadata": {"generateName": "web-", "resourceVersion": "9"}, "spec": {}});
        let name = prepare_create(&mut obj, Some("default"), "Cluster").unwrap();
        assert!(name.starts_with("web-") && name.len() == 9);
        assert_eq!(obj["metadata"]["generation"], 1);
        assert_eq!(obj["metadata"]["namespace"], "default");
        assert!(obj["metadata"]["uid"].is_string() && obj["metadata"]["resourceVersion"].is_null());
        let mut bad = json!({"metadata": {"name": "Bad_Name"}});
        assert!(matches!(
            prepare_create(&mut bad, None, "Cluster"),
            Err(ApiError::Invalid { .. })
        ));
        let mut other_ns = json!({"metadata": {"name": "a", "namespace": "x"}});
        assert!(prepare_create(&mut other_ns, Some("y"), "Cluster").is_err());
    }

    #[test]
    fn generation_moves_with_spec_only() {
        let mut old = json!({"metadata": {"name": "a", "uid": "u", "generation": 3}, "spec": {"r": 1}, "status": {"p": "x"}});
        let mut meta_only = old.clone();
        meta_only["metadata"]["labels"] = json!({"a": "b"});
        assert!(
            prepare_update(
                &old,
                &mut meta_only,
                WriteScope::Main {
                    status_subresource: true
                },
                "K"
            )
            .unwrap()
        );
        assert_eq!(meta_only["metadata"]["generation"], 3);
        let mut spec = old.clone();
        spec["spec"]["r"] = json!(2);
        spec["status"] = json!({"p": "ignored"});
        spec["metadata"]["uid"] = json!("forged");
        prepare_update(
            &old,
            &mut spec,
            WriteScope::Main {
                status_subresource: true,
            },
            "K",
        )
        .unwrap();
        assert_eq!(spec["metadata"]["generation"], 4);
        assert_eq!(
            spec["status"]["p"], "x",
            "main resource writes do not touch status"
        );
        assert_eq!(spec["metadata"]["uid"], "u");
        let mut status = old.clone();
        status["status"] = json!({"p": "y"});
        status["spec"] = json!({"r": 99});
        prepare_update(&old, &mut status, WriteScope::Status, "K").unwrap();
        assert_eq!(
            (status["spec"]["r"].clone(), status["status"]["p"].clone()),
            (json!(1), json!("y"))
        );
        let unchanged = old.clone();
        let mut same = unchanged.clone();
        assert!(
            !prepare_update(
                &old,
                &mut same,
                WriteScope::Main {
                    status_subresource: true
                },
                "K"
            )
            .unwrap()
        );
        mark_deleted(&mut old).unwrap();
        let mut add = old.clone();
        add["metadata"]["finalizers"] = json!(["new"]);
        assert!(
            prepare_update(
                &old,
                &mut add,
                WriteScope::Main {
                    status_subresource: true
                },
                "K"
            )
            .is_err()
        );
    }
}
