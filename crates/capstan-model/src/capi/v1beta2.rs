//! `cluster.x-k8s.io/v1beta2` and `addons.cluster.x-k8s.io/v1beta2`.
//!
//! Types that did not change shape between versions are re-used from [`super::v1beta1`].

use crate::meta::{Condition, ContractVersionedObjectReference, LabelSelector};
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

pub use super::v1beta1::{
    ApiEndpoint, ClusterNetwork, ClusterResourceSetBindingSpec, ClusterResourceSetSpec,
    ClusterResourceSetStatus, NetworkRanges, ResourceRef, TemplateMeta,
};

/// Cluster spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    pub paused: Option<bool>,
    pub cluster_network: Option<ClusterNetwork>,
    pub control_plane_endpoint: Option<ApiEndpoint>,
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    pub topology: Option<serde_json::Value>,
}

/// Cluster status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub phase: Option<String>,
    pub observed_generation: Option<i64>,
    pub initialization: Option<serde_json::Value>,
    /// Replica counts of the control plane (`desiredReplicas`, `replicas`, `readyReplicas`, ...).
    pub control_plane: Option<serde_json::Value>,
    /// Replica counts of the worker Machines.
    pub workers: Option<serde_json::Value>,
    /// Failure domains, copied from the infrastructure cluster.
    pub failure_domains: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// A workload cluster.
    Cluster, ClusterSpec, ClusterStatus, "cluster.x-k8s.io", "v1beta2", "clusters", Namespaced
);

/// How a Machine gets its bootstrap data.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    pub config_ref: Option<ContractVersionedObjectReference>,
    pub data_secret_name: Option<String>,
}

/// Node drain and deletion timeouts of a Machine.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletion {
    pub node_drain_timeout_seconds: Option<i32>,
    pub node_volume_detach_timeout_seconds: Option<i32>,
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// Machine spec (also the template spec of MachineSets and MachineDeployments).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub bootstrap: Bootstrap,
    #[serde(default)]
    pub infrastructure_ref: ContractVersionedObjectReference,
    pub version: Option<String>,
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub failure_domain: Option<String>,
    pub min_ready_seconds: Option<i32>,
    pub deletion: Option<MachineDeletion>,
}

/// Machine status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    pub phase: Option<String>,
    pub node_ref: Option<serde_json::Value>,
    pub initialization: Option<serde_json::Value>,
    pub observed_generation: Option<i64>,
    /// Addresses, copied from the infrastructure machine.
    pub addresses: Option<Vec<serde_json::Value>>,
    /// The Kubernetes version the Node runs (`nodeInfo.kubeletVersion`).
    pub node_info: Option<serde_json::Value>,
    pub failure_domain: Option<String>,
    /// Progress of the Machine's deletion.
    pub deletion: Option<MachineDeletionStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// When the steps of a Machine's deletion started.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionStatus {
    /// When draining the Node started (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub node_drain_start_time: Option<String>,
    /// When waiting for the Node's volumes to detach started (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub wait_for_node_volume_detach_start_time: Option<String>,
}

resource!(
    /// One machine of a cluster.
    Machine, MachineSpec, MachineStatus, "cluster.x-k8s.io", "v1beta2", "machines", Namespaced
);

/// A Machine template (metadata + spec) inside a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MachineTemplateSpec {
    #[serde(default)]
    pub metadata: TemplateMeta,
    #[serde(default)]
    pub spec: MachineSpec,
}

/// MachineSet spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    #[serde(default)]
    pub cluster_name: String,
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: MachineTemplateSpec,
    /// Which Machines go first when scaling down.
    pub deletion: Option<MachineSetDeletion>,
}

/// How a MachineSet or MachineDeployment picks the Machines to delete.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetDeletion {
    /// `Random` (default), `Newest` or `Oldest`.
    pub order: Option<String>,
}

/// Replica counts of a MachineSet or MachineDeployment.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub up_to_date_replicas: Option<i32>,
    /// The label selector in string form (what the `scale` subresource reports).
    pub selector: Option<String>,
    pub phase: Option<String>,
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `deprecated.v1beta1`: the v1beta1 counters (and conditions), which v1beta1 readers see as
    /// their top-level status fields.
    pub deprecated: Option<serde_json::Value>,
}

resource!(
    /// A set of identical Machines.
    MachineSet, MachineSetSpec, ReplicaStatus, "cluster.x-k8s.io", "v1beta2", "machinesets", Namespaced
);

/// Rollout settings of a MachineDeployment.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRollout {
    pub after: Option<String>,
    pub strategy: Option<serde_json::Value>,
}

/// MachineDeployment spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    #[serde(default)]
    pub cluster_name: String,
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: MachineTemplateSpec,
    pub rollout: Option<MachineDeploymentRollout>,
    pub paused: Option<bool>,
    /// Which Machines go first when scaling down.
    pub deletion: Option<MachineSetDeletion>,
}

resource!(
    /// A declaratively rolled-out pool of Machines.
    MachineDeployment, MachineDeploymentSpec, ReplicaStatus, "cluster.x-k8s.io", "v1beta2", "machinedeployments", Namespaced
);

/// A node or machine condition that marks a Machine unhealthy after a timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub timeout_seconds: i32,
}

/// What a MachineHealthCheck checks.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthChecks {
    pub node_startup_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_node_conditions: Vec<UnhealthyCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_machine_conditions: Vec<UnhealthyCondition>,
}

/// MachineHealthCheck spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub selector: LabelSelector,
    pub checks: Option<MachineHealthChecks>,
    pub remediation: Option<serde_json::Value>,
}

resource!(
    /// Remediation of unhealthy Machines.
    MachineHealthCheck, MachineHealthCheckSpec, super::v1beta1::MachineHealthCheckStatus, "cluster.x-k8s.io", "v1beta2", "machinehealthchecks", Namespaced
);

resource!(
    /// Resources (ConfigMaps, Secrets) applied to every matching workload cluster.
    ClusterResourceSet, ClusterResourceSetSpec, ClusterResourceSetStatus, "addons.cluster.x-k8s.io", "v1beta2", "clusterresourcesets", Namespaced
);

resource!(
    /// Which ClusterResourceSets have been applied to one cluster.
    ClusterResourceSetBinding, ClusterResourceSetBindingSpec, serde_json::Value, "addons.cluster.x-k8s.io", "v1beta2", "clusterresourcesetbindings", Namespaced
);
