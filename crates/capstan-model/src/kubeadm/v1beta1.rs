//! `bootstrap.cluster.x-k8s.io/v1beta1` and `controlplane.cluster.x-k8s.io/v1beta1`.

use super::{
    KubeadmConfigSpec, KubeadmConfigStatus, KubeadmConfigTemplateSpec, KubeadmControlPlaneStatus,
};
use crate::capi::v1beta1::TemplateMeta;
use crate::meta::ObjectReference;
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

resource!(
    /// Bootstrap configuration of one Machine.
    KubeadmConfig, KubeadmConfigSpec, KubeadmConfigStatus, "bootstrap.cluster.x-k8s.io", "v1beta1", "kubeadmconfigs", Namespaced
);

resource!(
    /// Template of KubeadmConfigs for MachineDeployments.
    KubeadmConfigTemplate, KubeadmConfigTemplateSpec, serde_json::Value, "bootstrap.cluster.x-k8s.io", "v1beta1", "kubeadmconfigtemplates", Namespaced
);

/// The Machine template of a KubeadmControlPlane.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplate {
    #[serde(default, skip_serializing_if = "super::is_empty_meta")]
    pub metadata: TemplateMeta,
    #[serde(default)]
    pub infrastructure_ref: ObjectReference,
    pub node_drain_timeout: Option<String>,
}

/// KubeadmControlPlane spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneSpec {
    pub replicas: Option<i32>,
    /// The Kubernetes version of the control plane (`v1.31.4`); required, as upstream.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true))]
    pub version: String,
    #[serde(default)]
    pub machine_template: KubeadmControlPlaneMachineTemplate,
    #[serde(default)]
    pub kubeadm_config_spec: KubeadmConfigSpec,
    pub rollout_strategy: Option<serde_json::Value>,
    pub remediation_strategy: Option<serde_json::Value>,
}

resource!(
    /// A kubeadm-managed control plane.
    KubeadmControlPlane, KubeadmControlPlaneSpec, KubeadmControlPlaneStatus, "controlplane.cluster.x-k8s.io", "v1beta1", "kubeadmcontrolplanes", Namespaced
);
