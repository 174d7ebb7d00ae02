//! Writes that touch only what a controller owns: a JSON merge patch (RFC 7386) computed from the
//! value a controller read and the value it wants, sent to the object or its `status` subresource.
//!
//! Why not a PUT of the typed object: a typed struct knows only the fields it models, so replacing an
//! object with it drops whatever other writers (other controllers, other API versions) put there.
//! A merge patch of the difference names only the fields this pass changed.
//!
//! Lists are replaced whole by a merge patch, so a patch that changes a list (conditions, addresses,
//! finalizers) carries the `resourceVersion` it was computed from: a concurrent writer of the same
//! list makes it fail with a conflict, and the requeue recomputes it from fresh data, instead of
//! silently dropping the other writer's entries.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::fmt::Debug;

/// Why a patch was not written.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("serialising {what} of {kind} {name}")]
    Serialise {
        what: &'static str,
        kind: String,
        name: String,
        source: serde_json::Error,
    },
    #[error("patching {what} of {kind} {name}")]
    Api {
        what: &'static str,
        kind: String,
        name: String,
        source: Box<kube::Error>,
    },
}

impl PatchError {
    /// Whether the write lost an optimistic-concurrency race (the requeue will retry with fresh data).
    pub fn is_conflict(&self) -> bool {
        crate::controller::is_conflict(self)
    }
}

/// The JSON merge patch that turns `before` into `after`: changed and added members with their new
/// value, removed members as `null`, unchanged members left out. `None` when nothing changed.
pub fn merge_diff(before: &Value, after: &Value) -> Option<Value> {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut patch = Map::new();
            for (key, new) in a {
                match b.get(key) {
                    Some(old) => {
                        if let Some(diff) = merge_diff(old, new) {
                            patch.insert(key.clone(), diff);
                        }
                    }
                    None if new.is_null() => {}
                    None => {
                        patch.insert(key.clone(), new.clone());
                    }
                }
            }
            for key in b.keys() {
                if !a.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if before == after => None,
        // A member set to null means "remove" in a merge patch: a null value is sent as such.
        _ => Some(after.clone()),
    }
}

/// Whether `patch` replaces a list (which merge patches do whole).
fn replaces_a_list(patch: &Value) -> bool {
    match patch {
        Value::Array(_) => true,
        Value::Object(members) => members.values().any(replaces_a_list),
        _ => false,
    }
}

/// The merge patch of `before` → `after` under `field` (`"status"`, `"spec"`, `"metadata"`), guarded
/// by `resource_version` when it replaces a list. `None` when nothing changed.
pub fn field_patch<T: Serialize>(
    field: &str,
    before: &T,
    after: &T,
    resource_version: Option<&str>,
) -> Result<Option<Value>, serde_json::Error> {
    let before = serde_json::to_value(before)?;
    let after = serde_json::to_value(after)?;
    let Some(diff) = merge_diff(&before, &after) else {
        return Ok(None);
    };
    let guarded = replaces_a_list(&diff);
    let mut patch = Map::new();
    patch.insert(field.to_owned(), diff);
    if guarded && let Some(version) = resource_version {
        patch.insert(
            "metadata".into(),
            serde_json::json!({"resourceVersion": version}),
        );
    }
    Ok(Some(Value::Object(patch)))
}

fn serialise_error<K: Resource<DynamicType = ()>>(
    what: &'static str,
    object: &K,
) -> impl FnOnce(serde_json::Error) -> PatchError {
    let kind = K::kind(&()).into_owned();
    let name = object.name_any();
    move |source| PatchError::Serialise {
        what,
        kind,
        name,
        source,
    }
}

fn api_error<K: Resource<DynamicType = ()>>(
    what: &'static str,
    object: &K,
) -> impl FnOnce(kube::Error) -> PatchError {
    let kind = K::kind(&()).into_owned();
    let name = object.name_any();
    move |source| PatchError::Api {
        what,
        kind,
        name,
        source: Box::new(source),
    }
}

/// Writes the status fields that differ between `before` and `after` to `object`'s `status`
/// subresource. Returns the written object, or `None` when nothing changed (no request is made).
pub async fn patch_status<K, S>(
    api: &Api<K>,
    object: &K,
    before: &S,
    after: &S,
) -> Result<Option<K>, PatchError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let Some(patch) = field_patch(
        "status",
        before,
        after,
        object.meta().resource_version.as_deref(),
    )
    .map_err(serialise_error("status", object))?
    else {
        return Ok(None);
    };
    api.patch_status(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(Some)
    .map_err(api_error("status", object))
}

/// Writes the members of `field` (`"spec"` or `"metadata"`) that differ between `before` and `after`
/// to `object`. Returns the written object, or `None` when nothing changed.
pub async fn patch_field<K, T>(
    api: &Api<K>,
    object: &K,
    field: &'static str,
    before: &T,
    after: &T,
) -> Result<Option<K>, PatchError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    T: Serialize,
{
    let Some(patch) = field_patch(
        field,
        before,
        after,
        object.meta().resource_version.as_deref(),
    )
    .map_err(serialise_error(field, object))?
    else {
        return Ok(None);
    };
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(Some)
    .map_err(api_error(field, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_diff_table() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1}), None),
            (json!({"a": 1}), json!({"a": 2}), Some(json!({"a": 2}))),
            (json!({"a": 1}), json!({}), Some(json!({"a": null}))),
            (json!({}), json!({"a": null}), None),
            (
                json!({"a": {"b": 1, "c": 2}}),
                json!({"a": {"b": 1, "c": 3, "d": 4}}),
                Some(json!({"a": {"c": 3, "d": 4}})),
            ),
            (
                json!({"l": [1, 2]}),
                json!({"l": [1, 2, 3]}),
                Some(json!({"l": [1, 2, 3]})),
            ),
            (
                json!({"a": {"b": 1}}),
                json!({"a": 5}),
                Some(json!({"a": 5})),
            ),
        ];
        for (before, after, want) in cases {
            assert_eq!(merge_diff(&before, &after), want, "{before} → {after}");
        }
    }

    #[test]
    fn list_changes_carry_the_resource_version() {
        let before = json!({"phase": "A", "conditions": [{"type": "Ready"}]});
        let scalar = json!({"phase": "B", "conditions": [{"type": "Ready"}]});
        assert_eq!(
            field_patch("status", &before, &scalar, Some("7")).unwrap(),
            Some(json!({"status": {"phase": "B"}}))
        );
        let list = json!({"phase": "A", "conditions": []});
        assert_eq!(
            field_patch("status", &before, &list, Some("7")).unwrap(),
            Some(json!({"status": {"conditions": []}, "metadata": {"resourceVersion": "7"}}))
        );
        assert_eq!(
            field_patch("status", &before, &before, Some("7")).unwrap(),
            None
        );
    }

    #[test]
    fn applying_the_diff_yields_the_target() {
        let before = json!({"a": {"b": 1, "c": [1]}, "x": "y"});
        let after = json!({"a": {"c": [2], "d": {"e": true}}, "z": 0});
        let patch = merge_diff(&before, &after).unwrap();
        let mut patched = before.clone();
        json_patch::merge(&mut patched, &patch);
        assert_eq!(patched, after);
    }
}
