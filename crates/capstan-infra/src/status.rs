//! The status an infrastructure object reports: the owned fields and conditions a pass sets, merged
//! with the Kubernetes transition-time rules, written through capstan-runtime's one status writer
//! ([`capstan_runtime::patch::patch_status`]: a merge patch of what changed, guarded by the
//! resourceVersion when it replaces a list). Finalizers are the harness's
//! ([`capstan_runtime::finalizers`]).

use capstan_model::meta::Condition;
use capstan_runtime::conditions::{self, set_condition};
use capstan_runtime::patch::{self, PatchError};
use kube::Resource;
use kube::api::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::fmt::Debug;

/// The conditions in `object`'s `status.conditions` (none when absent or malformed).
pub fn conditions_of(object: &Value) -> Vec<Condition> {
    object
        .pointer("/status/conditions")
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default()
}

/// `object`'s status with each of `owned` set (a null removes the field) and `new_conditions`
/// merged into its conditions (transition times kept where the status did not change).
pub fn status_with(
    object: &Value,
    owned: Map<String, Value>,
    new_conditions: Vec<Condition>,
    now: &str,
) -> Value {
    let mut status = match object.get("status") {
        Some(Value::Object(status)) => status.clone(),
        _ => Map::new(),
    };
    for (field, value) in owned {
        if value.is_null() {
            status.remove(&field);
        } else {
            status.insert(field, value);
        }
    }
    let mut merged = conditions_of(object);
    let mut changed = false;
    for condition in new_conditions {
        changed |= set_condition(&mut merged, condition, now);
    }
    if changed {
        status.insert(
            "conditions".into(),
            serde_json::to_value(&merged).unwrap_or(Value::Null),
        );
    }
    Value::Object(status)
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

/// Writes `object`'s status with `owned` and `new_conditions` set ([`status_with`]); no request
/// when nothing changed.
pub async fn write_status<K>(
    api: &Api<K>,
    object: &K,
    owned: Map<String, Value>,
    new_conditions: Vec<Condition>,
) -> Result<(), PatchError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let value = serde_json::to_value(object).unwrap_or(Value::Null);
    let before = value
        .get("status")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let after = status_with(&value, owned, new_conditions, &conditions::now());
    patch::patch_status(api, object, &before, &after)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let after = status_with(&object, owned, Vec::new(), "2026-01-01T00:00:00Z");
        assert_eq!(
            patch::merge_diff(&object["status"], &after),
            Some(json!({"failureDomain": "fd-1"}))
        );
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let object = json!({"status": {"ready": false, "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForHost", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let mut owned = Map::new();
        owned.insert("ready".into(), json!(false));
        owned.insert("failureDomain".into(), Value::Null);
        let after = status_with(
            &object,
            owned,
            vec![ready(false, "WaitingForHost", "m", None)],
            "2026-01-02T00:00:00Z",
        );
        assert_eq!(patch::merge_diff(&object["status"], &after), None);
    }

    #[test]
    fn condition_change_writes_the_merged_list() {
        let object = json!({"status": {"conditions": [
            {"type": "Other", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        let after = status_with(
            &object,
            Map::new(),
            vec![ready(true, "Provisioned", "", Some(3))],
            "2026-01-02T00:00:00Z",
        );
        let conditions = after["conditions"].as_array().cloned().unwrap_or_default();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["type"], "Ready");
        assert_eq!(conditions[1]["lastTransitionTime"], "2026-01-02T00:00:00Z");
    }
}
