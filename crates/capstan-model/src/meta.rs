//! Metadata types shared by several API groups: object references in both the v1beta1 and the v1beta2
//! (contract-versioned) form, label selectors, conditions, and the well-known labels and annotations.

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

/// Label that ties an object to its Cluster.
pub const LABEL_CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// Label that marks control-plane Machines.
pub const LABEL_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// Label on a MachineDeployment's Machines naming the deployment.
pub const LABEL_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// Annotation that pauses reconciliation of an object.
pub const ANNOTATION_PAUSED: &str = "cluster.x-k8s.io/paused";

/// A full object reference, as CAPI v1beta1 and Metal3 write them (`apiVersion`, `kind`, `name`, ...).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub field_path: Option<String>,
}

impl ObjectReference {
    /// A reference to `kind` `name` in `api_version`.
    pub fn to(api_version: &str, kind: &str, name: &str) -> Self {
        Self {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
            name: Some(name.to_owned()),
            ..Self::default()
        }
    }

    /// The API group of the referenced object (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(self.api_version.as_deref().unwrap_or_default())
    }
}

/// A reference as CAPI v1beta2 writes them: group, kind and name; the version comes from the contract.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

impl ContractVersionedObjectReference {
    /// A reference to `kind` `name` in `api_group`.
    pub fn to(api_group: &str, kind: &str, name: &str) -> Self {
        Self {
            api_group: api_group.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// A reference to an object in the same namespace by name only (`{name: ...}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LocalObjectReference {
    #[serde(default)]
    pub name: String,
}

/// A reference to a Secret, optionally in another namespace (Metal3's `SecretReference`).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretReference {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// A status condition (the Kubernetes `metav1.Condition` shape, which CAPI v1beta2 and capstan use).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub observed_generation: Option<i64>,
    /// When the status last changed (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub severity: Option<String>,
}

/// The group part of an `apiVersion` (`cluster.x-k8s.io/v1beta1` → `cluster.x-k8s.io`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default()
}

/// The version part of an `apiVersion` (`cluster.x-k8s.io/v1beta1` → `v1beta1`).
pub fn version_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or(api_version, |(_, v)| v)
}

/// Whether `selector` matches `labels`, with Kubernetes semantics: an empty selector matches everything;
/// `matchLabels` and `matchExpressions` must all hold.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|req| {
        let values = req.values.as_deref().unwrap_or_default();
        let current = labels.get(&req.key);
        match req.operator.as_str() {
            "In" => current.is_some_and(|c| values.contains(c)),
            "NotIn" => current.is_none_or(|c| !values.contains(c)),
            "Exists" => current.is_some(),
            "DoesNotExist" => current.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let empty = LabelSelector::default();
        assert!(selector_matches(&empty, &labels(&[])));
        let sel = LabelSelector {
            match_labels: Some(labels(&[("a", "1")])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "b".into(),
                operator: "In".into(),
                values: Some(vec!["x".into(), "y".into()]),
            }]),
        };
        assert!(selector_matches(&sel, &labels(&[("a", "1"), ("b", "y")])));
        assert!(!selector_matches(&sel, &labels(&[("a", "1"), ("b", "z")])));
        assert!(!selector_matches(&sel, &labels(&[("b", "x")])));
    }

    #[test]
    fn api_version_parts() {
        assert_eq!(group_of("cluster.x-k8s.io/v1beta1"), "cluster.x-k8s.io");
        assert_eq!(version_of("cluster.x-k8s.io/v1beta1"), "v1beta1");
        assert_eq!(group_of("v1"), "");
        assert_eq!(version_of("v1"), "v1");
    }
}
