//! `cluster.x-k8s.io/v1beta1` and `addons.cluster.x-k8s.io/v1beta1`.

use crate::meta::{Condition, LabelSelector, ObjectReference};
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// Network ranges of a workload cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    pub api_server_port: Option<i32>,
    pub pods: Option<NetworkRanges>,
    pub services: Option<NetworkRanges>,
    pub service_domain: Option<String>,
}

/// A list of CIDR blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    #[serde(default)]
    pub cidr_blocks: Vec<String>,
}

/// Host and port of an API server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: i32,
}

/// Cluster spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    pub paused: Option<bool>,
    pub cluster_network: Option<ClusterNetwork>,
    pub control_plane_endpoint: Option<ApiEndpoint>,
    pub control_plane_ref: Option<ObjectReference>,
    pub infrastructure_ref: Option<ObjectReference>,
    pub topology: Option<serde_json::Value>,
}

/// Cluster status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub phase: Option<String>,
    pub infrastructure_ready: Option<bool>,
    pub control_plane_ready: Option<bool>,
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// A workload cluster.
    Cluster, ClusterSpec, ClusterStatus, "cluster.x-k8s.io", "v1beta1", "clusters", Namespaced
);

/// How a Machine gets its bootstrap data.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    pub config_ref: Option<ObjectReference>,
    pub data_secret_name: Option<String>,
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
    pub infrastructure_ref: ObjectReference,
    pub version: Option<String>,
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub failure_domain: Option<String>,
    pub node_drain_timeout: Option<String>,
    pub node_deletion_timeout: Option<String>,
}

/// Machine status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    pub phase: Option<String>,
    pub bootstrap_ready: Option<bool>,
    pub infrastructure_ready: Option<bool>,
    pub node_ref: Option<ObjectReference>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// One machine of a cluster.
    Machine, MachineSpec, MachineStatus, "cluster.x-k8s.io", "v1beta1", "machines", Namespaced
);

/// Labels and annotations stamped on objects created from a template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateMeta {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

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
}

/// Replica counts of a MachineSet or MachineDeployment.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub updated_replicas: Option<i32>,
    pub phase: Option<String>,
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// A set of identical Machines.
    MachineSet, MachineSetSpec, ReplicaStatus, "cluster.x-k8s.io", "v1beta1", "machinesets", Namespaced
);

/// MachineDeployment rollout strategy.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub rolling_update: Option<serde_json::Value>,
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
    pub strategy: Option<MachineDeploymentStrategy>,
    pub min_ready_seconds: Option<i32>,
    pub paused: Option<bool>,
}

resource!(
    /// A declaratively rolled-out pool of Machines.
    MachineDeployment, MachineDeploymentSpec, ReplicaStatus, "cluster.x-k8s.io", "v1beta1", "machinedeployments", Namespaced
);

/// A node condition that marks a Machine unhealthy after a timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnhealthyCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub timeout: String,
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_conditions: Vec<UnhealthyCondition>,
    pub max_unhealthy: Option<serde_json::Value>,
    pub node_startup_timeout: Option<String>,
    pub remediation_template: Option<ObjectReference>,
}

/// MachineHealthCheck status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    pub expected_machines: Option<i32>,
    pub current_healthy: Option<i32>,
    pub remediations_allowed: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// Remediation of unhealthy Machines.
    MachineHealthCheck, MachineHealthCheckSpec, MachineHealthCheckStatus, "cluster.x-k8s.io", "v1beta1", "machinehealthchecks", Namespaced
);

/// A ConfigMap or Secret applied to matching clusters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub kind: String,
}

/// ClusterResourceSet spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceSetSpec {
    #[serde(default)]
    pub cluster_selector: LabelSelector,
    #[serde(default)]
    pub resources: Vec<ResourceRef>,
    pub strategy: Option<String>,
}

/// ClusterResourceSet status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterResourceSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// Resources (ConfigMaps, Secrets) applied to every matching workload cluster.
    ClusterResourceSet, ClusterResourceSetSpec, ClusterResourceSetStatus, "addons.cluster.x-k8s.io", "v1beta1", "clusterresourcesets", Namespaced
);

/// ClusterResourceSetBinding spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceSetBindingSpec {
    pub cluster_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<serde_json::Value>,
}

resource!(
    /// Which ClusterResourceSets have been applied to one cluster.
    ClusterResourceSetBinding, ClusterResourceSetBindingSpec, serde_json::Value, "addons.cluster.x-k8s.io", "v1beta1", "clusterresourcesetbindings", Namespaced
);
