//! Writing only what a controller owns: status merge patches that carry just the changed owned
//! fields, conditions merged with the Kubernetes transition-time rules, and finalizers added and
//! removed with a `resourceVersion` precondition.

use capstan_model::meta::Condition;
use capstan_runtime::conditions::{self, set_condition};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::fmt::Debug;

/// The conditions in `object`'s `status.conditions` (none when absent or malformed).
pub fn conditions_of(object: &Value) -> Vec<Condition> {
    object
        .pointer("/status/conditions")
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default()
}

/// A merge patch of `status` holding each of `owned` whose value differs from `object`'s, plus
/// `conditions` merged into the object's (kept transition times); `None` when nothing changed.
pub fn status_patch(
    object: &Value,
    owned: Map<String, Value>,
    new_conditions: Vec<Condition>,
    now: &str,
) -> Option<Value> {
    let current = object.get("status").cloned().unwrap_or(Value::Null);
    let mut patch = Map::new();
    for (field, value) in owned {
        if current.get(&field) != Some(&value)
            && !(value.is_null() && current.get(&field).is_none())
        {
            patch.insert(field, value);
        }
    }
    let mut merged = conditions_of(object);
    let mut changed = false;
    for condition in new_conditions {
        changed |= set_condition(&mut merged, condition, now);
    }
    if changed {
        patch.insert(
            "conditions".into(),
            serde_json::to_value(&merged).unwrap_or(Value::Null),
        );
    }
    (!patch.is_empty()).then(|| json!({ "status": patch }))
}

/// A `Ready` condition.
pub fn ready(
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    conditions::condition(
        crate::CONDITION_READY,
        if status {
            conditions::TRUE
        } else {
            conditions::FALSE
        },
        reason,
        message,
        generation,
    )
}

/// Applies a status merge patch to `name`.
pub async fn patch_status<K>(api: &Api<K>, name: &str, patch: &Value) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
}

/// Adds `finalizer` to `object` unless present; `true` when a write was made (it triggers the next
/// reconcile). The write is guarded by the object's resourceVersion.
pub async fn add_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.meta().resource_version,
    }});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}

/// Removes `finalizer` from `object` if present, guarded by the object's resourceVersion.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if !object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let finalizers: Vec<&String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.meta().resource_version,
    }});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_patch_carries_only_changed_fields() {
        let object = json!({"status": {"ready": true, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}});
        let mut owned = Map::new();
        owned.insert("ready".into(), json!(true));
        owned.insert("failureDomain".into(), json!("fd-1"));
        owned.insert(
            "addresses".into(),
            json!([{"type": "InternalIP", "address": "10.0.0.1"}]),
        );
        let patch = status_patch(&object, owned, Vec::new(), "2026-01-01T00:00:00Z");
        assert_eq!(patch, Some(json!({"status": {"failureDomain": "fd-1"}})));
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let object = json!({"status": {"ready": false, "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForHost", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let mut owned = Map::new();
        owned.insert("ready".into(), json!(false));
        owned.insert("failureDomain".into(), Value::Null);
        let patch = status_patch(
            &object,
            owned,
            vec![ready(false, "WaitingForHost", "m", None)],
            "2026-01-02T00:00:00Z",
        );
        assert_eq!(patch, None);
    }

    #[test]
    fn condition_change_writes_the_merged_list() {
        let object = json!({"status": {"conditions": [
            {"type": "Other", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let patch = status_patch(
            &object,
            Map::new(),
            vec![ready(true, "Provisioned", "", Some(3))],
            "2026-01-02T00:00:00Z",
        )
        .unwrap_or_default();
        let conditions = patch["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["type"], "Ready");
        assert_eq!(conditions[1]["lastTransitionTime"], "2026-01-02T00:00:00Z");
    }
}
