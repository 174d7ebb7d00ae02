//! Kubeadm bootstrap (`bootstrap.cluster.x-k8s.io`) and control plane (`controlplane.cluster.x-k8s.io`)
//! kinds.
//!
//! `KubeadmConfigSpec` is shared by both versions: the fields that differ between v1beta1 and v1beta2
//! (`extraArgs` as a map or a list, `clusterConfiguration.networking` only in v1beta1) are typed so that
//! either form reads, and writers pick the form of the version they emit.

pub mod v1beta1;
pub mod v1beta2;

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// API group of KubeadmConfig and KubeadmConfigTemplate.
pub const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
/// API group of KubeadmControlPlane.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";

/// Extra command-line arguments: a map in v1beta1, a list of `{name, value}` in v1beta2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ExtraArgs {
    /// v1beta1 form.
    Map(BTreeMap<String, String>),
    /// v1beta2 form.
    List(Vec<Arg>),
}

/// One argument in the v1beta2 list form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Arg {
    pub name: String,
    pub value: String,
}

impl ExtraArgs {
    /// The value of argument `name`, whichever form is used.
    pub fn get(&self, name: &str) -> Option<&str> {
        match self {
            Self::Map(m) => m.get(name).map(String::as_str),
            Self::List(l) => l.iter().find(|a| a.name == name).map(|a| a.value.as_str()),
        }
    }

    /// The arguments in the form `version` (`v1beta1` or `v1beta2`) writes.
    pub fn for_version(pairs: &[(&str, &str)], version: &str) -> Self {
        if version == "v1beta1" {
            Self::Map(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        } else {
            Self::List(
                pairs
                    .iter()
                    .map(|(k, v)| Arg {
                        name: (*k).to_owned(),
                        value: (*v).to_owned(),
                    })
                    .collect(),
            )
        }
    }
}

/// Pod and service networking of a kubeadm cluster (v1beta1 only; v1beta2 reads it from the Cluster).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    pub pod_subnet: Option<String>,
    pub service_subnet: Option<String>,
    pub dns_domain: Option<String>,
}

/// Settings of one control-plane component (API server, controller manager, scheduler).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneComponent {
    pub extra_args: Option<ExtraArgs>,
    #[serde(rename = "certSANs")]
    pub cert_sans: Option<Vec<String>>,
    pub extra_volumes: Option<serde_json::Value>,
}

/// kubeadm ClusterConfiguration as embedded in a KubeadmConfigSpec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfiguration {
    pub networking: Option<Networking>,
    pub api_server: Option<ControlPlaneComponent>,
    pub controller_manager: Option<ControlPlaneComponent>,
    pub scheduler: Option<ControlPlaneComponent>,
    pub etcd: Option<serde_json::Value>,
    pub dns: Option<serde_json::Value>,
    pub kubernetes_version: Option<String>,
    pub cluster_name: Option<String>,
    pub control_plane_endpoint: Option<String>,
    pub image_repository: Option<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
}

/// How kubeadm registers the node.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRegistration {
    pub name: Option<String>,
    pub cri_socket: Option<String>,
    pub kubelet_extra_args: Option<ExtraArgs>,
    pub taints: Option<serde_json::Value>,
    pub ignore_preflight_errors: Option<Vec<String>>,
}

/// kubeadm InitConfiguration (first control-plane node).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitConfiguration {
    pub node_registration: Option<NodeRegistration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: Option<serde_json::Value>,
    pub bootstrap_tokens: Option<serde_json::Value>,
    pub patches: Option<serde_json::Value>,
    pub timeouts: Option<serde_json::Value>,
}

/// kubeadm JoinConfiguration (further control-plane nodes and workers).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinConfiguration {
    pub node_registration: Option<NodeRegistration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_phases: Vec<String>,
    pub control_plane: Option<serde_json::Value>,
    pub discovery: Option<serde_json::Value>,
    pub patches: Option<serde_json::Value>,
    pub timeouts: Option<serde_json::Value>,
}

/// A file written on the node before kubeadm runs.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    #[serde(default)]
    pub path: String,
    pub owner: Option<String>,
    pub permissions: Option<String>,
    pub encoding: Option<String>,
    pub append: Option<bool>,
    pub content: Option<String>,
    pub content_from: Option<serde_json::Value>,
}

/// A user created on the node.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub name: String,
    pub gecos: Option<String>,
    pub groups: Option<String>,
    pub home_dir: Option<String>,
    pub inactive: Option<bool>,
    pub shell: Option<String>,
    pub passwd: Option<String>,
    pub primary_group: Option<String>,
    pub lock_password: Option<bool>,
    pub sudo: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
}

/// The bootstrap configuration of a node: kubeadm configuration plus cloud-init extras.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigSpec {
    pub cluster_configuration: Option<ClusterConfiguration>,
    pub init_configuration: Option<InitConfiguration>,
    pub join_configuration: Option<JoinConfiguration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    pub disk_setup: Option<serde_json::Value>,
    pub mounts: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_kubeadm_commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_kubeadm_commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<User>,
    pub ntp: Option<serde_json::Value>,
    pub format: Option<String>,
    pub verbosity: Option<i32>,
    pub ignition: Option<serde_json::Value>,
}

impl KubeadmConfigSpec {
    /// Every shell command this spec runs, in order: boot, pre-kubeadm and post-kubeadm commands.
    pub fn all_commands(&self) -> impl Iterator<Item = &str> {
        self.boot_commands
            .iter()
            .chain(&self.pre_kubeadm_commands)
            .chain(&self.post_kubeadm_commands)
            .map(String::as_str)
    }

    /// The file written at `path`, if any.
    pub fn file(&self, path: &str) -> Option<&File> {
        self.files.iter().find(|f| f.path == path)
    }
}

/// Status of a KubeadmConfig.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigStatus {
    pub ready: Option<bool>,
    pub data_secret_name: Option<String>,
    pub observed_generation: Option<i64>,
    pub initialization: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::meta::Condition>,
}

/// The spec of a KubeadmConfigTemplate: a template of KubeadmConfigSpecs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KubeadmConfigTemplateSpec {
    #[serde(default)]
    pub template: KubeadmConfigTemplateResource,
}

/// The template body of a KubeadmConfigTemplate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KubeadmConfigTemplateResource {
    #[serde(default, skip_serializing_if = "crate::kubeadm::is_empty_meta")]
    pub metadata: crate::capi::v1beta1::TemplateMeta,
    #[serde(default)]
    pub spec: KubeadmConfigSpec,
}

/// Status of a KubeadmControlPlane.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneStatus {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub updated_replicas: Option<i32>,
    pub up_to_date_replicas: Option<i32>,
    pub initialized: Option<bool>,
    pub ready: Option<bool>,
    pub version: Option<String>,
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::meta::Condition>,
}

pub(crate) fn is_empty_meta(meta: &crate::capi::v1beta1::TemplateMeta) -> bool {
    meta.labels.is_empty() && meta.annotations.is_empty()
}
