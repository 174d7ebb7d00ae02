//! A host's network as OpenStack `network_data.json`, the format BareMetalHost `networkData`
//! Secrets carry and cloud-init applies on first boot.
//!
//! What cloud-init does with the document shapes what is written here:
//! - physical links are found by MAC address; their `id` is only a reference within the document;
//! - bonds are named `bond0`, `bond1`, … in document order whatever their `id` (so the spec requires
//!   those names), take the `ethernet_mac_address` given, and every `bond_*` key becomes a bonding
//!   parameter;
//! - VLANs are named `<parent>.<vlan_id>`, which is also the `id` written here;
//! - DNS servers and search domains are applied per network (`dns_nameservers`, `dns_search`), so
//!   they are written on the network holding the default route as well as in `services`.
//!
//! Nova's schema for the document requires `network_id` on every network; it is set to the
//! network's subnet (or `dhcp4-<link>`), which cloud-init ignores.

use std::net::IpAddr;

use capstan_model::network_data::{Link, Network, NetworkData, Route, Service, ipv4_netmask};
use ipnet::IpNet;

use crate::spec::{BondMode, LacpRate, XmitHashPolicy};

/// A host's interfaces and addresses, parsed and checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HostInterfaces {
    /// Physical NICs, in spec order.
    pub phys: Vec<Phy>,
    /// Bonds, in spec order.
    pub bonds: Vec<BondLink>,
    /// VLANs, in spec order.
    pub vlans: Vec<VlanLink>,
    /// Addresses, in spec order.
    pub addresses: Vec<HostAddress>,
    /// Static routes, in spec order.
    pub routes: Vec<StaticRoute>,
    /// Resolver settings.
    pub dns: ResolverSettings,
}

/// A physical NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Phy {
    pub name: String,
    /// Lower-case, colon-separated.
    pub mac: String,
    pub mtu: Option<u32>,
}

/// A bond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BondLink {
    pub name: String,
    pub mode: BondMode,
    pub members: Vec<String>,
    /// The first member's MAC.
    pub mac: String,
    pub mtu: Option<u32>,
    pub miimon: Option<u32>,
    pub lacp_rate: Option<LacpRate>,
    pub xmit_hash_policy: Option<XmitHashPolicy>,
    pub updelay: Option<u32>,
    pub downdelay: Option<u32>,
}

/// A VLAN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VlanLink {
    pub id: u16,
    pub parent: String,
    /// The parent's MAC.
    pub mac: String,
    pub mtu: Option<u32>,
}

impl VlanLink {
    /// The interface name cloud-init gives the VLAN.
    pub fn name(&self) -> String {
        vlan_name(&self.parent, self.id)
    }
}

/// The interface name of VLAN `id` on `parent`.
pub(crate) fn vlan_name(parent: &str, id: u16) -> String {
    format!("{parent}.{id}")
}

/// How an address is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AddressKind {
    /// A static address and its subnet.
    Static(IpNet),
    /// IPv4 DHCP.
    Dhcp4,
}

/// An address on an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostAddress {
    pub link: String,
    pub kind: AddressKind,
    pub gateway: Option<IpAddr>,
}

/// A static route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StaticRoute {
    pub to: IpNet,
    pub via: IpAddr,
}

/// DNS servers and search domains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResolverSettings {
    pub nameservers: Vec<IpAddr>,
    pub search: Vec<String>,
}

/// The `network_data.json` document of a host.
pub(crate) fn network_data(interfaces: &HostInterfaces) -> NetworkData {
    let mut links =
        Vec::with_capacity(interfaces.phys.len() + interfaces.bonds.len() + interfaces.vlans.len());
    for phy in &interfaces.phys {
        links.push(Link {
            id: phy.name.clone(),
            type_: "phy".to_owned(),
            ethernet_mac_address: Some(phy.mac.clone()),
            mtu: phy.mtu,
            ..Link::default()
        });
    }
    for bond in &interfaces.bonds {
        let mut link = Link {
            id: bond.name.clone(),
            type_: "bond".to_owned(),
            ethernet_mac_address: Some(bond.mac.clone()),
            mtu: bond.mtu,
            bond_mode: Some(bond.mode.as_str().to_owned()),
            bond_links: Some(bond.members.clone()),
            ..Link::default()
        };
        let options = [
            ("bond_miimon", bond.miimon.map(serde_json::Value::from)),
            (
                "bond_lacp_rate",
                bond.lacp_rate.map(|r| serde_json::Value::from(r.as_str())),
            ),
            (
                "bond_xmit_hash_policy",
                bond.xmit_hash_policy
                    .map(|p| serde_json::Value::from(p.as_str())),
            ),
            ("bond_updelay", bond.updelay.map(serde_json::Value::from)),
            (
                "bond_downdelay",
                bond.downdelay.map(serde_json::Value::from),
            ),
        ];
        for (key, value) in options {
            if let Some(value) = value {
                link.extra.insert(key.to_owned(), value);
            }
        }
        links.push(link);
    }
    for vlan in &interfaces.vlans {
        links.push(Link {
            id: vlan.name(),
            type_: "vlan".to_owned(),
            mtu: vlan.mtu,
            vlan_id: Some(vlan.id),
            vlan_link: Some(vlan.parent.clone()),
            vlan_mac_address: Some(vlan.mac.clone()),
            ..Link::default()
        });
    }

    let dns_network = dns_network_index(&interfaces.addresses);
    let mut networks: Vec<Network> = interfaces
        .addresses
        .iter()
        .enumerate()
        .map(|(index, address)| {
            let mut network = match &address.kind {
                AddressKind::Static(net) => Network {
                    id: format!("network{index}"),
                    type_: if net.addr().is_ipv4() { "ipv4" } else { "ipv6" }.to_owned(),
                    link: address.link.clone(),
                    network_id: Some(net.trunc().to_string()),
                    ip_address: Some(net.addr().to_string()),
                    netmask: Some(netmask(net)),
                    ..Network::default()
                },
                AddressKind::Dhcp4 => Network {
                    id: format!("network{index}"),
                    type_: "ipv4_dhcp".to_owned(),
                    link: address.link.clone(),
                    network_id: Some(format!("dhcp4-{}", address.link)),
                    ..Network::default()
                },
            };
            if let Some(gateway) = address.gateway {
                network.routes.push(default_route(gateway));
            }
            if Some(index) == dns_network {
                network.dns_nameservers = interfaces
                    .dns
                    .nameservers
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                network.dns_search.clone_from(&interfaces.dns.search);
            }
            network
        })
        .collect();
    for route in &interfaces.routes {
        let carrier = interfaces.addresses.iter().position(|a| match &a.kind {
            AddressKind::Static(net) => net.contains(&route.via),
            AddressKind::Dhcp4 => false,
        });
        if let Some(network) = carrier.and_then(|i| networks.get_mut(i)) {
            network.routes.push(Route {
                network: route.to.trunc().addr().to_string(),
                netmask: netmask(&route.to),
                gateway: route.via.to_string(),
                services: Vec::new(),
            });
        }
    }

    NetworkData {
        links,
        networks,
        services: interfaces
            .dns
            .nameservers
            .iter()
            .map(|address| Service {
                type_: "dns".to_owned(),
                address: address.to_string(),
            })
            .collect(),
    }
}

/// The network that carries the resolver settings: the one with the IPv4 default route, else the
/// one with any default route, else the first static one, else the first.
fn dns_network_index(addresses: &[HostAddress]) -> Option<usize> {
    let with_gateway = |v4: bool| {
        addresses
            .iter()
            .position(|a| a.gateway.is_some_and(|g| g.is_ipv4() == v4))
    };
    with_gateway(true)
        .or_else(|| with_gateway(false))
        .or_else(|| {
            addresses
                .iter()
                .position(|a| matches!(a.kind, AddressKind::Static(_)))
        })
        .or_else(|| (!addresses.is_empty()).then_some(0))
}

fn default_route(gateway: IpAddr) -> Route {
    let any = if gateway.is_ipv4() { "0.0.0.0" } else { "::" };
    Route {
        network: any.to_owned(),
        netmask: any.to_owned(),
        gateway: gateway.to_string(),
        services: Vec::new(),
    }
}

/// Dotted netmask for IPv4, the mask address for IPv6 (`ffff:ffff:ffff:ffff::`).
fn netmask(net: &IpNet) -> String {
    match net {
        IpNet::V4(v4) => ipv4_netmask(v4.prefix_len()),
        IpNet::V6(v6) => v6.netmask().to_string(),
    }
}

/// The document as compact JSON, as the `networkData` Secret holds it. Field order is fixed by the
/// types and bond options are sorted, so the text is the same for the same host.
pub(crate) fn to_json(data: &NetworkData) -> String {
    // Serialising plain structs, strings and numbers cannot fail; an empty document is still
    // valid network data should it ever happen.
    serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn super_host() -> HostInterfaces {
        HostInterfaces {
            phys: vec![
                Phy {
                    name: "enp1s0".into(),
                    mac: "52:54:00:aa:00:01".into(),
                    mtu: Some(9000),
                },
                Phy {
                    name: "enp2s0".into(),
                    mac: "52:54:00:aa:00:02".into(),
                    mtu: Some(9000),
                },
            ],
            bonds: vec![BondLink {
                name: "bond0".into(),
                mode: BondMode::Lacp,
                members: vec!["enp1s0".into(), "enp2s0".into()],
                mac: "52:54:00:aa:00:01".into(),
                mtu: Some(9000),
                miimon: Some(100),
                lacp_rate: Some(LacpRate::Fast),
                xmit_hash_policy: Some(XmitHashPolicy::Layer34),
                updelay: None,
                downdelay: None,
            }],
            vlans: vec![VlanLink {
                id: 2000,
                parent: "bond0".into(),
                mac: "52:54:00:aa:00:01".into(),
                mtu: None,
            }],
            addresses: vec![HostAddress {
                link: "bond0.2000".into(),
                kind: AddressKind::Static("10.20.0.5/24".parse().unwrap()),
                gateway: Some("10.20.0.1".parse().unwrap()),
            }],
            routes: vec![StaticRoute {
                to: "192.168.254.0/24".parse().unwrap(),
                via: "10.20.0.254".parse().unwrap(),
            }],
            dns: ResolverSettings {
                nameservers: vec!["10.20.0.1".parse().unwrap()],
                search: vec!["lab.example".into()],
            },
        }
    }

    #[test]
    fn bond_and_vlan_links_follow_cloud_init_conventions() {
        let data = network_data(&super_host());
        let json = serde_json::to_value(&data).unwrap();
        assert_eq!(json["links"][2]["type"], "bond");
        assert_eq!(
            json["links"][2]["bond_links"],
            serde_json::json!(["enp1s0", "enp2s0"])
        );
        assert_eq!(
            json["links"][2]["ethernet_mac_address"],
            "52:54:00:aa:00:01"
        );
        assert_eq!(json["links"][2]["bond_miimon"], 100);
        assert_eq!(json["links"][2]["bond_xmit_hash_policy"], "layer3+4");
        assert_eq!(json["links"][3]["id"], "bond0.2000");
        assert_eq!(json["links"][3]["vlan_link"], "bond0");
        assert_eq!(json["links"][3]["vlan_mac_address"], "52:54:00:aa:00:01");
        let network = &json["networks"][0];
        assert_eq!(network["netmask"], "255.255.255.0");
        assert_eq!(network["network_id"], "10.20.0.0/24");
        assert_eq!(network["routes"][0]["network"], "0.0.0.0");
        assert_eq!(network["routes"][1]["network"], "192.168.254.0");
        assert_eq!(network["dns_search"], serde_json::json!(["lab.example"]));
        assert_eq!(json["services"][0]["address"], "10.20.0.1");
    }

    #[test]
    fn ipv6_and_dhcp_networks() {
        let mut host = super_host();
        host.addresses.push(HostAddress {
            link: "enp1s0".into(),
            kind: AddressKind::Dhcp4,
            gateway: None,
        });
        host.addresses.push(HostAddress {
            link: "bond0.2000".into(),
            kind: AddressKind::Static("fd00::5/64".parse().unwrap()),
            gateway: Some("fd00::1".parse().unwrap()),
        });
        let data = network_data(&host);
        assert_eq!(data.networks[1].type_, "ipv4_dhcp");
        assert_eq!(data.networks[1].ip_address, None);
        assert_eq!(data.networks[2].type_, "ipv6");
        assert_eq!(
            data.networks[2].netmask.as_deref(),
            Some("ffff:ffff:ffff:ffff::")
        );
        assert_eq!(data.networks[2].routes[0].network, "::");
    }

    #[test]
    fn json_is_compact_and_stable() {
        let a = to_json(&network_data(&super_host()));
        let b = to_json(&network_data(&super_host()));
        assert_eq!(a, b);
        assert!(!a.contains('\n'));
        assert!(
            a.starts_with("{\"links\":[{\"id\":\"enp1s0\",\"type\":\"phy\""),
            "{a}"
        );
    }
}
