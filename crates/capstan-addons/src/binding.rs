//! ClusterResourceSetBinding entries: which resources of which ClusterResourceSet were applied to one
//! cluster, with their hash and time; and the rule deciding whether a resource is (re-)applied.
//!
//! One binding per Cluster, named after it and owned by it (so it goes with the Cluster); each
//! ClusterResourceSet that selected the cluster has one entry in `spec.bindings`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `spec.strategy` of a ClusterResourceSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Apply each resource once; never again, even when it changes (the default).
    ApplyOnce,
    /// Re-apply a resource whenever its content hash changes.
    Reconcile,
}

impl Strategy {
    /// Parses `spec.strategy` (absent or empty means `ApplyOnce`, as upstream).
    pub fn parse(strategy: Option<&str>) -> Option<Self> {
        match strategy.unwrap_or_default() {
            "" | "ApplyOnce" => Some(Self::ApplyOnce),
            "Reconcile" => Some(Self::Reconcile),
            _ => None,
        }
    }
}

/// One resource of one ClusterResourceSet as applied to the binding's cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceBinding {
    pub name: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default)]
    pub applied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<String>,
}

/// The entry of one ClusterResourceSet in a binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSetBinding {
    pub cluster_resource_set_name: String,
    #[serde(default)]
    pub resources: Vec<ResourceBinding>,
}

/// Reads `spec.bindings`, skipping entries that do not have the binding shape (they are kept as
/// they are by [`merge_entry`], which works on the raw values).
pub fn entries(bindings: &[Value]) -> Vec<ResourceSetBinding> {
    bindings
        .iter()
        .filter_map(|b| serde_json::from_value(b.clone()).ok())
        .collect()
}

/// The entry of `set` in `bindings`.
pub fn entry_of<'a>(
    bindings: &'a [ResourceSetBinding],
    set: &str,
) -> Option<&'a ResourceSetBinding> {
    bindings.iter().find(|b| b.cluster_resource_set_name == set)
}

/// Whether a resource with content `hash` must be applied, given what the binding recorded.
pub fn needs_apply(strategy: Strategy, recorded: Option<&ResourceBinding>, hash: &str) -> bool {
    match recorded {
        Some(recorded) if recorded.applied => match strategy {
            Strategy::ApplyOnce => false,
            Strategy::Reconcile => recorded.hash.as_deref() != Some(hash),
        },
        _ => true,
    }
}

/// `bindings` with the entry of `entry.cluster_resource_set_name` replaced (or appended), or
/// removed when `entry` is `None` for that set; other entries untouched.
pub fn merge_entry(
    bindings: &[Value],
    set: &str,
    entry: Option<&ResourceSetBinding>,
) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(bindings.len() + 1);
    let mut placed = false;
    for existing in bindings {
        if existing["clusterResourceSetName"].as_str() == Some(set) {
            if let Some(entry) = entry
                && !placed
                && let Ok(value) = serde_json::to_value(entry)
            {
                merged.push(value);
                placed = true;
            }
        } else {
            merged.push(existing.clone());
        }
    }
    if !placed
        && let Some(entry) = entry
        && let Ok(value) = serde_json::to_value(entry)
    {
        merged.push(value);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recorded(applied: bool, hash: &str) -> ResourceBinding {
        ResourceBinding {
            name: "cni".into(),
            kind: "ConfigMap".into(),
            hash: Some(hash.into()),
            applied,
            last_applied_time: None,
        }
    }

    #[test]
    fn apply_rules_by_strategy() {
        use Strategy::{ApplyOnce, Reconcile};
        let table = [
            // (strategy, recorded, hash now, apply?)
            (ApplyOnce, None, "h1", true),
            (ApplyOnce, Some(recorded(true, "h1")), "h1", false),
            (ApplyOnce, Some(recorded(true, "h1")), "h2", false),
            (ApplyOnce, Some(recorded(false, "h1")), "h1", true),
            (Reconcile, None, "h1", true),
            (Reconcile, Some(recorded(true, "h1")), "h1", false),
            (Reconcile, Some(recorded(true, "h1")), "h2", true),
            (Reconcile, Some(recorded(false, "h1")), "h1", true),
        ];
        for (strategy, recorded, hash, expected) in table {
            assert_eq!(
                needs_apply(strategy, recorded.as_ref(), hash),
                expected,
                "{strategy:?} {recorded:?} {hash}"
            );
        }
    }

    #[test]
    fn strategy_defaults_to_apply_once() {
        assert_eq!(Strategy::parse(None), Some(Strategy::ApplyOnce));
        assert_eq!(Strategy::parse(Some("")), Some(Strategy::ApplyOnce));
        assert_eq!(
            Strategy::parse(Some("Reconcile")),
            Some(Strategy::Reconcile)
        );
        assert_eq!(Strategy::parse(Some("Sometimes")), None);
    }

    #[test]
    fn merging_replaces_only_the_named_set() {
        let bindings = vec![
            json!({"clusterResourceSetName": "a", "resources": []}),
            json!({"clusterResourceSetName": "b", "resources": [], "future": 1}),
        ];
        let entry = ResourceSetBinding {
            cluster_resource_set_name: "a".into(),
            resources: vec![recorded(true, "h")],
        };
        let merged = merge_entry(&bindings, "a", Some(&entry));
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0]["resources"][0]["hash"], "h");
        assert_eq!(merged[1]["future"], 1);
        let other = ResourceSetBinding {
            cluster_resource_set_name: "c".into(),
            ..entry.clone()
        };
        let added = merge_entry(&bindings, "c", Some(&other));
        assert_eq!(added.len(), 3);
        let removed = merge_entry(&bindings, "a", None);
        assert_eq!(removed, vec![bindings[1].clone()]);
        assert_eq!(entries(&bindings).len(), 2);
    }
}
