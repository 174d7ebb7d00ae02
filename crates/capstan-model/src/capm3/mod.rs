//! Cluster API Provider Metal3 kinds (`infrastructure.cluster.x-k8s.io`): Metal3Cluster,
//! Metal3Machine, Metal3MachineTemplate, Metal3DataTemplate, Metal3DataClaim and Metal3Data, in
//! `v1beta1` and `v1beta2`.
//!
//! The two versions share most shapes; the differences (`image.format` vs `image.diskFormat`,
//! `dataTemplate` as a full or a name-only reference, failure domains as a map or a list) are carried
//! by optional fields that readers accept in either form.

use crate::meta::{Condition, ObjectReference, SecretReference};
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// API group of the infrastructure kinds.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// The API endpoint of the cluster's control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: i32,
}

/// Metal3Cluster spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3ClusterSpec {
    pub control_plane_endpoint: Option<ApiEndpoint>,
    pub cloud_provider_enabled: Option<bool>,
    pub no_cloud_provider: Option<bool>,
    pub failure_domains: Option<serde_json::Value>,
}

/// Metal3Cluster status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3ClusterStatus {
    pub ready: Option<bool>,
    pub initialization: Option<serde_json::Value>,
    /// v1beta2: a list of `{name, controlPlane, attributes}`; v1beta1: a map by name.
    pub failure_domains: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A requirement on a host label, as CAPM3 writes them (`in`, `notin`, `exists`, `=`, `!=`, ...).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostSelectorRequirement {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Which BareMetalHosts a Metal3Machine may claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<HostSelectorRequirement>,
}

impl HostSelector {
    /// Whether a host with `labels` satisfies this selector (CAPM3's operator set).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let labels_ok = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let exprs_ok = self.match_expressions.iter().all(|req| {
            let current = labels.get(&req.key);
            match req.operator.to_ascii_lowercase().as_str() {
                "in" | "=" | "==" => current.is_some_and(|c| req.values.contains(c)),
                "notin" | "!=" => current.is_none_or(|c| !req.values.contains(c)),
                "exists" => current.is_some(),
                "!" | "doesnotexist" => current.is_none(),
                _ => false,
            }
        });
        labels_ok && exprs_ok
    }
}

/// The OS image to provision (`format` in v1beta1, `diskFormat` in v1beta2).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    #[serde(default)]
    pub url: String,
    pub checksum: Option<String>,
    pub checksum_type: Option<String>,
    pub format: Option<String>,
    pub disk_format: Option<String>,
}

impl Image {
    /// The image format, whichever version's field carries it.
    pub fn any_format(&self) -> Option<&str> {
        self.format.as_deref().or(self.disk_format.as_deref())
    }
}

/// Metal3Machine spec (also the template spec of Metal3MachineTemplate).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3MachineSpec {
    pub image: Option<Image>,
    pub host_selector: Option<HostSelector>,
    pub data_template: Option<ObjectReference>,
    pub meta_data: Option<SecretReference>,
    pub network_data: Option<SecretReference>,
    pub user_data: Option<SecretReference>,
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub automated_cleaning_mode: Option<String>,
    pub custom_deploy: Option<serde_json::Value>,
    pub failure_domain: Option<String>,
}

/// Metal3Machine status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3MachineStatus {
    pub ready: Option<bool>,
    pub initialization: Option<serde_json::Value>,
    pub addresses: Option<serde_json::Value>,
    pub failure_domain: Option<String>,
    pub rendered_data: Option<ObjectReference>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Metal3MachineTemplate spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3MachineTemplateSpec {
    #[serde(default)]
    pub template: Metal3MachineTemplateResource,
    /// Whether a host deprovisioned during a rolling upgrade goes back to the same machine pool.
    pub node_reuse: Option<bool>,
}

/// The template body of a Metal3MachineTemplate.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3MachineTemplateResource {
    #[serde(default)]
    pub spec: Metal3MachineSpec,
}

/// Metal3DataTemplate spec. Its networkData and metaData templates are deep and rarely used by
/// capstan's own output, so they stay untyped JSON that lint inspects by path.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3DataTemplateSpec {
    #[serde(default)]
    pub cluster_name: String,
    pub meta_data: Option<serde_json::Value>,
    pub network_data: Option<serde_json::Value>,
    pub template_reference: Option<String>,
}

/// Metal3DataClaim spec: which Metal3DataTemplate to render one Metal3Data from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Metal3DataClaimSpec {
    #[serde(default)]
    pub template: ObjectReference,
}

/// Metal3DataClaim status: the Metal3Data rendered for the claim, or why not.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3DataClaimStatus {
    pub rendered_data: Option<ObjectReference>,
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Metal3Data spec: one rendering of a Metal3DataTemplate, at an index unique in the template.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3DataSpec {
    #[serde(default)]
    pub index: i32,
    pub template_reference: Option<String>,
    pub meta_data: Option<SecretReference>,
    pub network_data: Option<SecretReference>,
    #[serde(default)]
    pub claim: ObjectReference,
    #[serde(default)]
    pub template: ObjectReference,
}

/// Metal3Data status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metal3DataStatus {
    pub ready: Option<bool>,
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Versioned kinds.
macro_rules! capm3_version {
    ($module:ident, $version:literal) => {
        #[doc = concat!("`infrastructure.cluster.x-k8s.io/", $version, "` Metal3 kinds.")]
        pub mod $module {
            use super::*;

            resource!(
                /// The Metal3 side of a Cluster: its control-plane endpoint.
                Metal3Cluster, Metal3ClusterSpec, Metal3ClusterStatus, "infrastructure.cluster.x-k8s.io", $version, "metal3clusters", Namespaced
            );
            resource!(
                /// The Metal3 side of a Machine: the host it claims and the image it deploys.
                Metal3Machine, Metal3MachineSpec, Metal3MachineStatus, "infrastructure.cluster.x-k8s.io", $version, "metal3machines", Namespaced
            );
            resource!(
                /// Template of Metal3Machines.
                Metal3MachineTemplate, Metal3MachineTemplateSpec, serde_json::Value, "infrastructure.cluster.x-k8s.io", $version, "metal3machinetemplates", Namespaced
            );
            resource!(
                /// Template of per-machine metadata and network data.
                Metal3DataTemplate, Metal3DataTemplateSpec, serde_json::Value, "infrastructure.cluster.x-k8s.io", $version, "metal3datatemplates", Namespaced
            );
            resource!(
                /// A request for one rendering of a Metal3DataTemplate (one per Metal3Machine).
                Metal3DataClaim, Metal3DataClaimSpec, Metal3DataClaimStatus, "infrastructure.cluster.x-k8s.io", $version, "metal3dataclaims", Namespaced
            );
            resource!(
                /// One rendering of a Metal3DataTemplate: the metaData and networkData Secrets of a host.
                Metal3Data, Metal3DataSpec, Metal3DataStatus, "infrastructure.cluster.x-k8s.io", $version, "metal3datas", Namespaced
            );
        }
    };
}

capm3_version!(v1beta1, "v1beta1");
capm3_version!(v1beta2, "v1beta2");
