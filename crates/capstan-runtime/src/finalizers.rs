//! Adding and removing a controller's finalizer: the one way capstan's controllers do it (the
//! [`crate::controller`] harness calls these around every reconcile; nothing else writes
//! finalizers of its own).
//!
//! The writes are JSON patches (RFC 6902) whose `test` operation guards the finalizer list as it
//! was read, as kube-runtime's finalizer helper does. A finalizer another writer added or removed
//! meanwhile makes the write fail (the requeue retries with the fresh list) instead of being
//! dropped, as a merge patch of the whole list would drop it. Unlike a `resourceVersion`
//! precondition, the guard is on the list alone: a status the same pass wrote does not make the
//! finalizer's removal fail. A failed `test` whose goal already holds (a pass woken by an older
//! event found the finalizer added, or removed, by the pass before it) is no failure: one read
//! tells, and nothing is written.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;

/// The JSON patch operations that add `finalizer` to an object whose finalizers are `current` and
/// whose resourceVersion is `version`; `None` when it holds it already.
pub fn add_operations(current: &[String], version: Option<&str>, finalizer: &str) -> Option<Value> {
    if current.iter().any(|f| f == finalizer) {
        return None;
    }
    Some(if current.is_empty() {
        // No list to test (an absent member fails a `test` in some implementations and matches
        // null in others): the object as read is the guard, and the list is written whole.
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])
    })
}

/// The JSON patch operations that remove `finalizer` from an object whose finalizers are
/// `current`; `None` when it does not hold it.
pub fn remove_operations(current: &[String], finalizer: &str) -> Option<Value> {
    let index = current.iter().position(|f| f == finalizer)?;
    let at = format!("/metadata/finalizers/{index}");
    // The entry at the index is still ours: removing by index never takes another's.
    Some(json!([
        {"op": "test", "path": at, "value": finalizer},
        {"op": "remove", "path": at},
    ]))
}

async fn send<K>(api: &Api<K>, object: &K, operations: Value) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch: json_patch::Patch =
        serde_json::from_value(operations).map_err(kube::Error::SerdeError)?;
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map(drop)
}

/// Adds `finalizer` to `object` unless it holds it; `true` when a write was made (its watch event
/// triggers the next reconcile).
pub async fn add<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(operations) = add_operations(
        object.finalizers(),
        object.meta().resource_version.as_deref(),
        finalizer,
    ) else {
        return Ok(false);
    };
    match send(api, object, operations).await {
        Ok(()) => Ok(true),
        Err(err) if failed_test(&err) => settled(api, object, finalizer, true, err).await,
        Err(err) => Err(err),
    }
}

/// Whether a write failed its `test` operation (the server answers `422 Invalid`).
fn failed_test(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 422)
}

/// After a failed `test`: the object moved on since it was read (a pass woken by an older event
/// than the newest, typically). When what the write wanted already holds (the finalizer is there,
/// or gone), nothing is wrong and no write was made; otherwise the failure stands and the requeue
/// retries with the fresh list.
async fn settled<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    want_present: bool,
    err: kube::Error,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.get_opt(&object.name_any()).await? {
        None if !want_present => Ok(false),
        Some(fresh) if fresh.finalizers().iter().any(|f| f == finalizer) == want_present => {
            Ok(false)
        }
        _ => Err(err),
    }
}

/// Removes `finalizer` from `object` if it holds it; `true` when a write was made. An object
/// already gone counts as done.
pub async fn remove<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(operations) = remove_operations(object.finalizers(), finalizer) else {
        return Ok(false);
    };
    match send(api, object, operations).await {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) if failed_test(&err) => settled(api, object, finalizer, false, err).await,
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(doc: &Value, operations: Option<Value>) -> Result<Value, String> {
        let patch: json_patch::Patch =
            serde_json::from_value(operations.unwrap_or_default()).map_err(|e| e.to_string())?;
        let mut out = doc.clone();
        json_patch::patch(&mut out, &patch).map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn adding_appends_to_the_list_as_read_and_fails_when_it_changed() {
        let ops = add_operations(&names(&["other"]), Some("3"), "ours");
        let doc = json!({"metadata": {"finalizers": ["other"], "resourceVersion": "4"}});
        assert_eq!(
            apply(&doc, ops.clone()).ok(),
            Some(json!({"metadata": {"finalizers": ["other", "ours"], "resourceVersion": "4"}}))
        );
        // Someone added a finalizer since the list was read: the write fails, nothing is lost.
        let changed = json!({"metadata": {"finalizers": ["other", "third"]}});
        assert!(apply(&changed, ops).is_err());
        assert!(add_operations(&names(&["ours"]), Some("3"), "ours").is_none());
    }

    #[test]
    fn adding_to_an_empty_list_is_guarded_by_the_object_as_read() {
        let ops = add_operations(&[], Some("3"), "ours");
        let doc = json!({"metadata": {"name": "a", "resourceVersion": "3"}});
        assert_eq!(
            apply(&doc, ops.clone()).ok(),
            Some(
                json!({"metadata": {"name": "a", "resourceVersion": "3", "finalizers": ["ours"]}})
            )
        );
        let newer = json!({"metadata": {"name": "a", "resourceVersion": "4", "finalizers": ["x"]}});
        assert!(apply(&newer, ops).is_err());
    }

    #[test]
    fn removing_takes_only_our_entry_and_fails_when_the_list_moved() {
        let ops = remove_operations(&names(&["a", "ours", "b"]), "ours");
        let doc = json!({"metadata": {"finalizers": ["a", "ours", "b"], "resourceVersion": "7"}});
        assert_eq!(
            apply(&doc, ops.clone()).ok(),
            Some(json!({"metadata": {"finalizers": ["a", "b"], "resourceVersion": "7"}}))
        );
        // A status written since (another resourceVersion) does not matter; a moved list does.
        let written =
            json!({"metadata": {"finalizers": ["a", "ours", "b"], "resourceVersion": "9"}});
        assert!(apply(&written, ops.clone()).is_ok());
        let moved = json!({"metadata": {"finalizers": ["ours", "b"]}});
        assert!(apply(&moved, ops).is_err());
        assert!(remove_operations(&names(&["a"]), "ours").is_none());
    }
}
