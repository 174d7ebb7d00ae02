//! OpenStack `network_data.json`: the network description a node reads from its config drive, as
//! BareMetalHost `spec.networkData` Secrets carry it and cloud-init consumes it.
//!
//! Links are L2 (physical NICs, bonds, VLANs), networks are L3 (static or DHCP addresses on a link,
//! with routes), services are DNS servers. Bond options beyond `bond_mode` and `bond_links`
//! (`bond_miimon`, `bond_xmit_hash_policy`, ...) are kept as extra `bond_*` keys, as CAPM3 writes them.

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// A whole `network_data.json` document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkData {
    #[serde(default)]
    pub links: Vec<Link>,
    #[serde(default)]
    pub networks: Vec<Network>,
    #[serde(default)]
    pub services: Vec<Service>,
}

/// An L2 link: a physical NIC (`phy`, and the other Nova port types), a `bond` or a `vlan`.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub id: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub ethernet_mac_address: Option<String>,
    pub mtu: Option<u32>,
    pub vif_id: Option<String>,
    pub bond_mode: Option<String>,
    pub bond_links: Option<Vec<String>>,
    pub vlan_id: Option<u16>,
    pub vlan_link: Option<String>,
    pub vlan_mac_address: Option<String>,
    /// Further `bond_*` options (`bond_miimon`, `bond_xmit_hash_policy`, `bond_lacp_rate`, ...).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Link {
    /// Whether this link is a bond.
    pub fn is_bond(&self) -> bool {
        self.type_ == "bond"
    }

    /// Whether this link is a VLAN.
    pub fn is_vlan(&self) -> bool {
        self.type_ == "vlan"
    }

    /// The MAC address this link is identified by (`vlan_mac_address` for VLANs).
    pub fn mac(&self) -> Option<&str> {
        self.ethernet_mac_address
            .as_deref()
            .or(self.vlan_mac_address.as_deref())
    }
}

/// An L3 network on a link.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Network {
    pub id: String,
    /// `ipv4`, `ipv4_dhcp`, `ipv6`, `ipv6_dhcp` or `ipv6_slaac`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The `id` of the link this network is on.
    pub link: String,
    pub network_id: Option<String>,
    pub ip_address: Option<String>,
    pub netmask: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
}

impl Network {
    /// Whether the address is static (as opposed to DHCP or SLAAC).
    pub fn is_static(&self) -> bool {
        self.type_ == "ipv4" || self.type_ == "ipv6"
    }
}

/// A route of a network.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub network: String,
    pub netmask: String,
    pub gateway: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
}

/// A network service; only `dns` is defined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

/// Nova's link types for physical and virtual ports (besides `bond` and `vlan`).
pub const PORT_LINK_TYPES: &[&str] = &[
    "bridge",
    "dvs",
    "hw_veb",
    "hyperv",
    "ovs",
    "tap",
    "vhostuser",
    "vif",
    "phy",
];

/// Bond modes Nova and cloud-init accept.
pub const BOND_MODES: &[&str] = &[
    "802.3ad",
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "balance-tlb",
    "balance-alb",
];

impl NetworkData {
    /// The link with `id`, if defined.
    pub fn link(&self, id: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.id == id)
    }
}

/// Parses a dotted IPv4 netmask (`255.255.255.0`) or an IPv6 netmask into a prefix length.
/// Returns `None` for a mask whose one-bits are not contiguous.
pub fn netmask_prefix(netmask: &str) -> Option<u8> {
    let addr: std::net::IpAddr = netmask.parse().ok()?;
    let (bits, width) = match addr {
        std::net::IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32u32),
        std::net::IpAddr::V6(v6) => (u128::from(v6), 128u32),
    };
    let ones = bits.leading_ones();
    if bits.checked_shl(ones).unwrap_or(0) != 0 || ones > width {
        return None;
    }
    u8::try_from(ones).ok()
}

/// The dotted netmask of an IPv4 prefix length (24 → `255.255.255.0`).
pub fn ipv4_netmask(prefix: u8) -> String {
    let mask: u32 = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    std::net::Ipv4Addr::from(mask).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmasks() {
        assert_eq!(netmask_prefix("255.255.255.0"), Some(24));
        assert_eq!(netmask_prefix("255.255.255.255"), Some(32));
        assert_eq!(netmask_prefix("0.0.0.0"), Some(0));
        assert_eq!(netmask_prefix("255.0.255.0"), None);
        assert_eq!(netmask_prefix("ffff:ffff:ffff:ffff::"), Some(64));
        assert_eq!(ipv4_netmask(24), "255.255.255.0");
        assert_eq!(ipv4_netmask(0), "0.0.0.0");
        assert_eq!(ipv4_netmask(32), "255.255.255.255");
    }

    #[test]
    fn bond_extras_round_trip() {
        let json = serde_json::json!({
            "links": [
                {"id": "enp1s0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"},
                {"id": "bond0", "type": "bond", "ethernet_mac_address": "52:54:00:00:00:01",
                 "bond_mode": "802.3ad", "bond_links": ["enp1s0"], "bond_xmit_hash_policy": "layer3+4", "bond_miimon": 100},
                {"id": "bond0.2000", "type": "vlan", "vlan_id": 2000, "vlan_link": "bond0", "vlan_mac_address": "52:54:00:00:00:01"}
            ],
            "networks": [{"id": "n0", "type": "ipv4", "link": "bond0.2000", "ip_address": "10.0.0.5", "netmask": "255.255.255.0",
                          "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.0.1"}]}],
            "services": [{"type": "dns", "address": "1.1.1.1"}]
        });
        let parsed: NetworkData = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            parsed.links[1].extra.get("bond_miimon"),
            Some(&serde_json::json!(100))
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), json);
    }
}
