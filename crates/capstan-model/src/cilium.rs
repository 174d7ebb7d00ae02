//! Cilium BGP control plane v2 kinds (`cilium.io/v2`, cluster-scoped): CiliumBGPClusterConfig (which
//! nodes run which BGP instances and peers), CiliumBGPPeerConfig (per-peer settings and the selector of
//! advertisements) and CiliumBGPAdvertisement (what is announced).

use crate::meta::LabelSelector;
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// API group of the Cilium kinds.
pub const GROUP: &str = "cilium.io";

/// A reference to a CiliumBGPPeerConfig by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerConfigReference {
    #[serde(default)]
    pub name: String,
}

/// One BGP peer of an instance.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeer {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "peerASN")]
    pub peer_asn: Option<i64>,
    pub peer_address: Option<String>,
    pub peer_config_ref: Option<PeerConfigReference>,
}

/// One BGP instance (a local ASN and its peers).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpInstance {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "localASN")]
    pub local_asn: Option<i64>,
    pub local_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<BgpPeer>,
}

/// CiliumBGPClusterConfig spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpClusterConfigSpec {
    pub node_selector: Option<LabelSelector>,
    #[serde(default)]
    pub bgp_instances: Vec<BgpInstance>,
}

resource!(
    /// Which nodes run which BGP instances and peers.
    CiliumBGPClusterConfig, BgpClusterConfigSpec, serde_json::Value, "cilium.io", "v2", "ciliumbgpclusterconfigs", Cluster
);

/// An address family and the advertisements announced in it.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BgpFamily {
    #[serde(default)]
    pub afi: String,
    #[serde(default)]
    pub safi: String,
    pub advertisements: Option<LabelSelector>,
}

/// BGP timers.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpTimers {
    pub connect_retry_time_seconds: Option<i32>,
    pub hold_time_seconds: Option<i32>,
    pub keep_alive_time_seconds: Option<i32>,
}

/// BGP graceful restart.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpGracefulRestart {
    #[serde(default)]
    pub enabled: bool,
    pub restart_time_seconds: Option<i32>,
}

/// CiliumBGPPeerConfig spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerConfigSpec {
    pub timers: Option<BgpTimers>,
    pub ebgp_multihop: Option<i32>,
    pub graceful_restart: Option<BgpGracefulRestart>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<BgpFamily>,
    pub auth_secret_ref: Option<String>,
    pub transport: Option<serde_json::Value>,
}

resource!(
    /// Settings shared by BGP peers, and which advertisements they announce.
    CiliumBGPPeerConfig, BgpPeerConfigSpec, serde_json::Value, "cilium.io", "v2", "ciliumbgppeerconfigs", Cluster
);

/// One thing to advertise.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementEntry {
    #[serde(default)]
    pub advertisement_type: String,
    pub selector: Option<LabelSelector>,
    pub service: Option<serde_json::Value>,
    pub attributes: Option<serde_json::Value>,
}

/// CiliumBGPAdvertisement spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BgpAdvertisementSpec {
    #[serde(default)]
    pub advertisements: Vec<BgpAdvertisementEntry>,
}

resource!(
    /// What BGP announces: PodCIDRs, service addresses.
    CiliumBGPAdvertisement, BgpAdvertisementSpec, serde_json::Value, "cilium.io", "v2", "ciliumbgpadvertisements", Cluster
);
