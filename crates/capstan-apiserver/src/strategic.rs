//! Strategic merge patch (`application/strategic-merge-patch+json`) for Kubernetes' own kinds, as
//! kube-apiserver applies it: maps merge, `null` deletes, and lists merge by their merge key where
//! the Kubernetes types declare `patchStrategy: merge` (containers by `name`, container ports by
//! `containerPort`, Service ports by `port`, conditions by `type`, `metadata.finalizers` as a set …)
//! and are replaced otherwise. The directives: `$patch: replace|delete|merge` on maps and list
//! items, `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys`.
//!
//! Custom resources have no merge keys, so kube-apiserver refuses strategic merge on them (`415`);
//! clients then fall back to a JSON merge patch. The same is done here.

use serde_json::{Map, Value};
use std::borrow::Borrow;

/// Why a strategic merge patch cannot be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StrategicError {
    #[error("unknown patch directive {0:?}")]
    UnknownDirective(String),
    #[error("{0}: the patch element has no merge key {1:?}")]
    MissingMergeKey(String, String),
    #[error("{0}: $setElementOrder and $deleteFromPrimitiveList must be lists")]
    NotAList(String),
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// How a list field merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replaced by the patch's list.
    Replace,
    /// Merged element by element on this key.
    MergeKey(&'static str),
    /// A set of scalars: the patch's values are added.
    MergeScalars,
}

/// The merge strategy of the list at `field` under `parent` (the map key that holds it), taken from
/// the `patchStrategy`/`patchMergeKey` tags of the Kubernetes types. `items` disambiguates the few
/// names used by more than one type (`ports`, `addresses`).
pub fn strategy<V: Borrow<Value>>(parent: Option<&str>, field: &str, items: &[V]) -> ListStrategy {
    let first_has = |key: &str| items.iter().any(|i| i.borrow().get(key).is_some());
    match field {
        "finalizers" if parent == Some("metadata") => ListStrategy::MergeScalars,
        "podCIDRs" => ListStrategy::MergeScalars,
        "ownerReferences" if parent == Some("metadata") => ListStrategy::MergeKey("uid"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
        | "resourceClaimStatuses"
        | "allocatedResourcesStatus"
        | "env" => ListStrategy::MergeKey("name"),
        "podIPs" | "hostIPs" => ListStrategy::MergeKey("ip"),
        "secrets" if items.iter().all(|i| i.borrow().is_object()) => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "resizePolicy" => ListStrategy::MergeKey("resourceName"),
        "conditions" => ListStrategy::MergeKey("type"),
        "ports" if first_has("containerPort") => ListStrategy::MergeKey("containerPort"),
        "ports" if first_has("port") && parent == Some("spec") => ListStrategy::MergeKey("port"),
        "addresses" if first_has("type") && !first_has("ip") => ListStrategy::MergeKey("type"),
        _ => ListStrategy::Replace,
    }
}

/// Applies a strategic merge patch to `original`.
pub fn apply(original: &Value, patch: &Value) -> Result<Value, StrategicError> {
    match (original, patch) {
        (Value::Object(o), Value::Object(p)) => merge_map(Some(o), p, "", None),
        (_, Value::Object(p)) => merge_map(None, p, "", None),
        _ => Ok(patch.clone()),
    }
}

fn merge_map(
    original: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
    path: &str,
    _parent: Option<&str>,
) -> Result<Value, StrategicError> {
    match patch.get(PATCH).and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove(PATCH);
            return Ok(strip_directives(Value::Object(replaced)));
        }
        Some("delete") => return Ok(Value::Null),
        Some("merge") | None => {}
        Some(other) => return Err(StrategicError::UnknownDirective(other.to_owned())),
    }
    let mut result = original.cloned().unwrap_or_default();
    // Deletions from scalar lists and element orders apply after the lists merged.
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (key, value) in patch {
        if key == PATCH || key == RETAIN_KEYS {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER) {
            let list = value
                .as_array()
                .ok_or_else(|| StrategicError::NotAList(format!("{path}.{field}")))?;
            orders.push((field.to_owned(), list.clone()));
            continue;
        }
        if key.starts_with(DELETE_PRIMITIVE) {
            continue;
        }
        let child_path = format!("{path}.{key}");
        if value.is_null() {
            result.remove(key);
            continue;
        }
        let merged = match (result.get(key), value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                merge_map(Some(o), p, &child_path, Some(key))?
            }
            (_, Value::Object(p)) => merge_map(None, p, &child_path, Some(key))?,
            (current, Value::Array(items)) => {
                let current = current.and_then(Value::as_array);
                let hint: Vec<&Value> = current.into_iter().flatten().chain(items).collect();
                let parent_key = path.rsplit('.').next().filter(|s| !s.is_empty());
                merge_list(
                    current.map(Vec::as_slice),
                    items,
                    &strategy(parent_key, key, &hint),
                    &child_path,
                )?
            }
            (_, scalar) => scalar.clone(),
        };
        if merged.is_null() && value.is_object() {
            // `$patch: delete` on a map removes it.
            result.remove(key);
        } else {
            result.insert(key.clone(), merged);
        }
    }
    for (key, value) in patch {
        let Some(field) = key.strip_prefix(DELETE_PRIMITIVE) else {
            continue;
        };
        let gone = value
            .as_array()
            .ok_or_else(|| StrategicError::NotAList(format!("{path}.{field}")))?;
        if let Some(Value::Array(list)) = result.get_mut(field) {
            list.retain(|v| !gone.contains(v));
        }
    }
    for (field, order) in orders {
        let parent_key = path.rsplit('.').next().filter(|s| !s.is_empty());
        let original_list = original
            .and_then(|o| o.get(&field))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Array(list)) = result.get_mut(&field) {
            let key = match strategy(parent_key, &field, list) {
                ListStrategy::MergeKey(k) => Some(k),
                _ => None,
            };
            *list = reorder(std::mem::take(list), &order, &original_list, key);
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS).and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        result.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Value::Object(result))
}

fn identity<'a>(item: &'a Value, key: Option<&str>) -> Option<&'a Value> {
    match key {
        Some(k) => item.get(k),
        None => Some(item),
    }
}

/// Orders a merged list by `$setElementOrder`: the listed elements in that order; elements the
/// patch did not list (the server's own) keep their place relative to the listed ones they
/// preceded in the original.
fn reorder(list: Vec<Value>, order: &[Value], original: &[Value], key: Option<&str>) -> Vec<Value> {
    let position = |item: &Value| {
        let id = identity(item, key)?;
        order
            .iter()
            .position(|o| identity(o, key).is_some_and(|oid| oid == id))
    };
    let original_index = |item: &Value| {
        let id = identity(item, key)?;
        original.iter().position(|o| identity(o, key) == Some(id))
    };
    let (mut listed, server_only): (Vec<Value>, Vec<Value>) =
        list.into_iter().partition(|i| position(i).is_some());
    listed.sort_by_key(|i| position(i).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(listed.len() + server_only.len());
    let mut pending = server_only.into_iter().peekable();
    for item in listed {
        let before = original_index(&item).unwrap_or(usize::MAX);
        while let Some(next) = pending.peek() {
            if original_index(next).unwrap_or(usize::MAX) < before {
                out.extend(pending.next());
            } else {
                break;
            }
        }
        out.push(item);
    }
    out.extend(pending);
    out
}

fn merge_list(
    original: Option<&[Value]>,
    patch: &[Value],
    strategy: &ListStrategy,
    path: &str,
) -> Result<Value, StrategicError> {
    match strategy {
        ListStrategy::Replace => Ok(strip_directives(Value::Array(patch.to_vec()))),
        ListStrategy::MergeScalars => {
            let mut out: Vec<Value> = original.unwrap_or_default().to_vec();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeKey(key) => {
            if patch
                .iter()
                .any(|i| i.get(PATCH).and_then(Value::as_str) == Some("replace"))
            {
                let rest: Vec<Value> = patch
                    .iter()
                    .filter(|i| i.get(PATCH).is_none())
                    .cloned()
                    .collect();
                return Ok(strip_directives(Value::Array(rest)));
            }
            let mut out: Vec<Value> = original.unwrap_or_default().to_vec();
            for item in patch {
                let Some(item_map) = item.as_object() else {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                    continue;
                };
                let id = item_map.get(*key).ok_or_else(|| {
                    StrategicError::MissingMergeKey(path.to_owned(), (*key).to_owned())
                })?;
                let found = out.iter().position(|o| o.get(*key) == Some(id));
                match item_map.get(PATCH).and_then(Value::as_str) {
                    Some("delete") => {
                        out.retain(|o| o.get(*key) != Some(id));
                    }
                    Some("merge") | None => match found {
                        Some(i) => {
                            let merged = merge_map(out[i].as_object(), item_map, path, None)?;
                            out[i] = merged;
                        }
                        None => out.push(merge_map(None, item_map, path, None)?),
                    },
                    Some(other) => {
                        return Err(StrategicError::UnknownDirective(other.to_owned()));
                    }
                }
            }
            Ok(Value::Array(out))
        }
    }
}

/// Removes directives from a value that replaces what was there.
fn strip_directives(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_directives).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(original: Value, patch: Value, expected: Value) {
        assert_eq!(apply(&original, &patch).unwrap(), expected, "patch {patch}");
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        check(
            json!({"a": 1, "b": {"c": 2, "d": 3}}),
            json!({"a": null, "b": {"c": 5}, "e": "x"}),
            json!({"b": {"c": 5, "d": 3}, "e": "x"}),
        );
    }

    #[test]
    fn containers_merge_by_name_and_unkeyed_lists_replace() {
        check(
            json!({"spec": {"containers": [{"name": "a", "image": "a:1", "args": ["x", "y"]}, {"name": "b", "image": "b:1"}]}}),
            json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}}),
            json!({"spec": {"containers": [{"name": "a", "image": "a:1", "args": ["x", "y"]}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}}),
        );
        check(
            json!({"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}),
            json!({"spec": {"containers": [{"name": "a", "args": ["z"]}]}}),
            json!({"spec": {"containers": [{"name": "a", "args": ["z"]}]}}),
        );
    }

    #[test]
    fn pod_ips_merge_by_ip_node_cidrs_as_a_set_and_slice_addresses_replace() {
        check(
            json!({"status": {"podIPs": [{"ip": "10.0.0.1"}]}}),
            json!({"status": {"podIPs": [{"ip": "fd00::1"}]}}),
            json!({"status": {"podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}}),
        );
        check(
            json!({"spec": {"podCIDRs": ["10.244.0.0/24"]}}),
            json!({"spec": {"podCIDRs": ["fd00:10:244::/64"]}}),
            json!({"spec": {"podCIDRs": ["10.244.0.0/24", "fd00:10:244::/64"]}}),
        );
        // `+listType=set` without a patch strategy: a strategic merge replaces it.
        check(
            json!({"endpoints": [{"addresses": ["10.0.0.1"]}]}),
            json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
            json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
        );
    }

    #[test]
    fn patch_delete_and_replace_directives() {
        check(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
            json!({"spec": {"containers": [{"name": "b"}]}}),
        );
        check(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "c"}, {"$patch": "replace"}]}}),
            json!({"spec": {"containers": [{"name": "c"}]}}),
        );
        check(
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"c": "3", "$patch": "replace"}}}),
            json!({"metadata": {"labels": {"c": "3"}}}),
        );
        check(
            json!({"metadata": {"labels": {"a": "1"}}, "x": 1}),
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
            json!({"metadata": {}, "x": 1}),
        );
        assert!(matches!(
            apply(&json!({}), &json!({"a": {"$patch": "explode"}})),
            Err(StrategicError::UnknownDirective(_))
        ));
    }

    #[test]
    fn finalizers_are_a_set_with_order_and_deletions() {
        // What client-side `kubectl apply` and `kubectl edit` send: never stored as keys.
        check(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"], "finalizers": ["c"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        );
        check(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"finalizers": ["a", "c"]}}),
        );
        // A list under another parent is not a set: it is replaced.
        check(
            json!({"spec": {"finalizers": ["kubernetes"]}}),
            json!({"spec": {"finalizers": ["other"]}}),
            json!({"spec": {"finalizers": ["other"]}}),
        );
    }

    #[test]
    fn set_element_order_keeps_server_only_items_in_place() {
        // The listed elements follow the order; `server` (not listed) stays ahead of `b`, which it
        // preceded in the original.
        check(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "server"}, {"name": "b"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "x"}]}}),
            json!({"spec": {"containers": [{"name": "server"}, {"name": "b", "image": "x"}, {"name": "a"}]}}),
        );
    }

    #[test]
    fn ports_conditions_and_env_use_their_keys() {
        check(
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
            json!({"spec": {"ports": [{"port": 80, "name": "http", "targetPort": 8080}, {"port": 443, "name": "https"}]}}),
        );
        check(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]}}),
        );
        check(
            json!({"env": [{"name": "A", "value": "1"}]}),
            json!({"env": [{"name": "B", "value": "2"}]}),
            json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}),
        );
        assert!(matches!(
            apply(&json!({"env": []}), &json!({"env": [{"value": "2"}]})),
            Err(StrategicError::MissingMergeKey(..))
        ));
    }

    #[test]
    fn retain_keys_clears_other_members() {
        check(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        );
    }
}
