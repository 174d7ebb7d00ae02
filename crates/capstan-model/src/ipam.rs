//! Metal3 IP address management (`ipam.metal3.io/v1alpha1`): IPPool, IPClaim and IPAddress.
//!
//! A pool hands out addresses from its ranges to claims; each allocation is an IPAddress object
//! owned by the pool and pointing at its claim.

use crate::meta::ObjectReference;
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// API group of the Metal3 IPAM kinds.
pub const GROUP: &str = "ipam.metal3.io";

/// One address range of a pool: `start`..=`end`, or a whole `subnet`.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    pub start: Option<String>,
    pub end: Option<String>,
    pub subnet: Option<String>,
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    pub dns_servers: Option<Vec<String>>,
}

/// IPPool spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolSpec {
    pub cluster_name: Option<String>,
    #[serde(default)]
    pub name_prefix: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<Pool>,
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    pub dns_servers: Option<Vec<String>>,
    /// Claim name → address fixed in advance.
    pub pre_allocations: Option<BTreeMap<String, String>>,
    pub allocation_strategy: Option<String>,
}

/// IPPool status: which claim holds which address.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolStatus {
    /// Claim name → allocated address.
    pub indexes: Option<BTreeMap<String, String>>,
    pub last_updated: Option<String>,
}

resource!(
    /// A pool of IP addresses.
    IPPool, IpPoolSpec, IpPoolStatus, "ipam.metal3.io", "v1alpha1", "ippools", Namespaced
);

/// IPClaim spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpClaimSpec {
    #[serde(default)]
    pub pool: ObjectReference,
}

/// IPClaim status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpClaimStatus {
    pub address: Option<ObjectReference>,
    pub error_message: Option<String>,
}

resource!(
    /// A request for one address from a pool.
    IPClaim, IpClaimSpec, IpClaimStatus, "ipam.metal3.io", "v1alpha1", "ipclaims", Namespaced
);

/// IPAddress spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressSpec {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub pool: ObjectReference,
    #[serde(default)]
    pub claim: ObjectReference,
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    pub dns_servers: Option<Vec<String>>,
}

resource!(
    /// One allocated address.
    IPAddress, IpAddressSpec, serde_json::Value, "ipam.metal3.io", "v1alpha1", "ipaddresses", Namespaced
);
