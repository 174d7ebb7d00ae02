//! Host networkData: every BareMetalHost's `spec.networkData` Secret, parsed as OpenStack
//! network_data.json, and the rules on it — undefined links, gateways outside their subnet, link
//! MACs the host does not have, the same static address on two hosts, and a control-plane VIP that
//! is also a host's address. The same link and gateway rules apply where CAPM3 renders network
//! data: Metal3DataTemplate links and IPPool gateways; a VIP inside an IPPool range counts as a
//! host address.
//!
//! MAC policy: with inspection data (`status.hardware.nics`), every physical link's MAC must be one
//! of the inspected NICs' MACs or the bootMACAddress (an error otherwise). Without inspection data
//! only a host with exactly one physical link is checked, against bootMACAddress, as a warning: a
//! host with several links may configure NICs that nothing in the set describes. Bond and VLAN
//! MACs are not checked (bonds may carry any MAC; VLANs take their parent's). Case and `-`/`:`
//! separators are ignored.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use capstan_model::metal3::BareMetalHost;
use capstan_model::network_data::{Network, NetworkData, netmask_prefix};
use capstan_model::path::FieldPath;
use ipnet::IpNet;
use serde_json::Value;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Location, Severity};
use crate::embedded::{self, EmbeddedDoc, Encoding};
use crate::index::{Entry, Index, Ref, View, field_path};

/// One host's parsed networkData.
#[derive(Debug)]
pub(crate) struct HostNetwork<'a> {
    /// Position of the BareMetalHost in the index.
    pub host: usize,
    /// The networkData document, inside its Secret.
    pub doc: EmbeddedDoc<'a>,
    /// The typed document.
    pub data: NetworkData,
}

impl HostNetwork<'_> {
    fn at(&self, path: &str) -> Location {
        self.doc.at(&FieldPath::parse(path))
    }

    /// The names the host's interfaces get from this networkData: link ids (bonds and VLANs are
    /// named by id) and cloud-init's `PARENT.VLANID` names for VLANs.
    pub fn interface_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for link in &self.data.links {
            names.insert(link.id.clone());
            if let (Some(parent), Some(vlan)) = (&link.vlan_link, link.vlan_id) {
                names.insert(format!("{parent}.{vlan}"));
            }
        }
        names
    }
}

/// The networkData of every host whose Secret is in the set and readable, reporting Secrets that
/// are not.
pub(crate) fn collect<'a>(
    index: &Index<'a>,
    _partial: bool,
    out: &mut Vec<Diagnostic>,
) -> Vec<HostNetwork<'a>> {
    let mut networks = Vec::new();
    for (position, entry) in index.entries.iter().enumerate() {
        let View::Host(host) = &entry.view else {
            continue;
        };
        let Some(reference) = host
            .spec
            .network_data
            .as_ref()
            .and_then(|r| Ref::secret(r, FieldPath::parse("spec.networkData")))
        else {
            continue;
        };
        // A missing Secret is a dangling reference, reported by the reference rules.
        let Some(secret) = index.resolve(&reference, entry.namespace()) else {
            continue;
        };
        if !matches!(secret.view, View::Secret) {
            continue;
        }
        if let Some(network) = read(position, entry, secret, &reference, out) {
            networks.push(network);
        }
    }
    networks
}

fn read<'a>(
    position: usize,
    host: &Entry<'a>,
    secret: &Entry<'a>,
    reference: &Ref,
    out: &mut Vec<Diagnostic>,
) -> Option<HostNetwork<'a>> {
    let string_field = FieldPath::parse("stringData.networkData");
    let data_field = FieldPath::parse("data.networkData");
    let (field, encoding) = if string_field.lookup(&secret.obj.value).is_some() {
        (string_field, Encoding::Plain)
    } else if data_field.lookup(&secret.obj.value).is_some() {
        (data_field, Encoding::Base64)
    } else {
        out.push(
            Diagnostic::new(
                id::NETWORK_DATA_INVALID,
                format!("{} has no `networkData` key", secret.id),
                secret.at(&FieldPath::root()),
            )
            .why("the bare-metal operator reads the host's network configuration from the key `networkData`; without it the node boots without its addresses")
            .hint("put the network_data.json document under `stringData.networkData`")
            .related("referenced from here", host.at(&reference.path)),
        );
        return None;
    };
    let invalid = |problem: String| {
        Diagnostic::new(
            id::NETWORK_DATA_INVALID,
            format!("`networkData` of {} is not valid network_data.json: {problem}", secret.id),
            Location::of(secret.obj, &field),
        )
        .why("cloud-init cannot read the document, so the node boots without its static addresses")
        .hint("write an OpenStack network_data.json document (`links`, `networks`, `services`), as JSON or YAML")
        .related("used by this host", host.at(&reference.path))
    };
    let mut docs = match embedded::parse(secret.obj, &field, encoding) {
        Ok(docs) => docs,
        Err(err) => {
            out.push(invalid(err.to_string()));
            return None;
        }
    };
    if docs.len() != 1 {
        out.push(invalid("expected exactly one mapping document".to_owned()));
        return None;
    }
    let doc = docs.pop()?;
    match serde_path_to_error::deserialize::<_, NetworkData>(&doc.doc.value) {
        Ok(data) => Some(HostNetwork {
            host: position,
            doc,
            data,
        }),
        Err(err) => {
            let path = field_path(err.path());
            let mut d = invalid(format!("`{path}`: {}", err.inner()));
            d.location = doc.at(&path);
            out.push(d);
            None
        }
    }
}

/// Runs the networkData rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for network in ctx.networks {
        let Some(entry) = ctx.index.entries.get(network.host) else {
            continue;
        };
        let View::Host(host) = &entry.view else {
            continue;
        };
        undefined_links(entry, network, out);
        gateways(entry, network, out);
        macs(entry, host, network, out);
    }
    duplicate_addresses(ctx, out);
    vip_addresses(ctx, out);
    pool_gateways(ctx, out);
    data_template_links(ctx, out);
}

fn undefined_links(host: &Entry<'_>, network: &HostNetwork<'_>, out: &mut Vec<Diagnostic>) {
    let data = &network.data;
    let defined: BTreeSet<&str> = data.links.iter().map(|l| l.id.as_str()).collect();
    let mut report = |name: &str, what: &str, path: String| {
        if defined.contains(name) {
            return;
        }
        out.push(
            Diagnostic::new(
                id::NETWORK_DATA_UNDEFINED_LINK,
                format!("{what} `{name}` is not a link defined in this networkData"),
                network.at(&path),
            )
            .why("cloud-init cannot attach it to a link that does not exist; the interface stays unconfigured and the node is unreachable")
            .hint(format!(
                "define `{name}` in `links`, or use one of: {}",
                defined.iter().copied().collect::<Vec<_>>().join(", ")
            ))
            .related("networkData of this host", host.at(&FieldPath::parse("spec.networkData"))),
        );
    };
    for (i, link) in data.links.iter().enumerate() {
        for (j, member) in link.bond_links.iter().flatten().enumerate() {
            report(member, "bond member", format!("links[{i}].bond_links[{j}]"));
        }
        if let Some(parent) = &link.vlan_link {
            report(parent, "VLAN parent", format!("links[{i}].vlan_link"));
        }
    }
    for (i, net) in data.networks.iter().enumerate() {
        report(
            &net.link,
            &format!("network `{}` link", net.id),
            format!("networks[{i}].link"),
        );
    }
}

/// The address and subnet of a static network (`ip_address` with `netmask`, or in CIDR form).
fn subnet_of(net: &Network) -> Result<Option<(IpAddr, IpNet)>, String> {
    let Some(address) = net.ip_address.as_deref() else {
        return Ok(None);
    };
    if let Ok(cidr) = address.parse::<IpNet>() {
        return Ok(Some((cidr.addr(), cidr)));
    }
    let ip: IpAddr = address
        .parse()
        .map_err(|_| format!("`{address}` is not an IP address"))?;
    let Some(mask) = net.netmask.as_deref() else {
        return Ok(None);
    };
    let prefix = netmask_prefix(mask).ok_or_else(|| format!("`{mask}` is not a valid netmask"))?;
    let subnet =
        IpNet::new(ip, prefix).map_err(|_| format!("`{mask}` does not fit `{address}`"))?;
    Ok(Some((ip, subnet)))
}

fn gateways(host: &Entry<'_>, network: &HostNetwork<'_>, out: &mut Vec<Diagnostic>) {
    for (i, net) in network.data.networks.iter().enumerate() {
        if !net.is_static() {
            continue;
        }
        let subnet = match subnet_of(net) {
            Ok(Some((_, subnet))) => subnet,
            Ok(None) => continue,
            Err(problem) => {
                out.push(
                    Diagnostic::new(
                        id::NETWORK_DATA_GATEWAY,
                        format!("network `{}`: {problem}", net.id),
                        network.at(&format!("networks[{i}]")),
                    )
                    .why("the address cannot be configured, so the node has no address on this network")
                    .hint("write `ip_address` as a plain address and `netmask` as a dotted mask such as 255.255.255.0")
                    .related("networkData of this host", host.at(&FieldPath::parse("spec.networkData"))),
                );
                continue;
            }
        };
        for (j, route) in net.routes.iter().enumerate() {
            let Ok(gateway) = route.gateway.parse::<IpAddr>() else {
                continue;
            };
            let link_local = match gateway {
                IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
                IpAddr::V4(_) => false,
            };
            if gateway.is_unspecified() || link_local || subnet.contains(&gateway) {
                continue;
            }
            out.push(
                Diagnostic::new(
                    id::NETWORK_DATA_GATEWAY,
                    format!(
                        "gateway {gateway} of network `{}` is outside its subnet {}",
                        net.id,
                        subnet.trunc()
                    ),
                    network.at(&format!("networks[{i}].routes[{j}].gateway")),
                )
                .why("a route via a gateway that is not on the address's subnet cannot be installed (`Nexthop has invalid gateway`); the node has no route out")
                .hint("fix the address, the netmask or the gateway so that the gateway lies inside the subnet")
                .related("networkData of this host", host.at(&FieldPath::parse("spec.networkData"))),
            );
        }
    }
}

/// A MAC address in canonical form (lower case, `:`-separated).
pub(crate) fn canonical_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

fn macs(
    entry: &Entry<'_>,
    host: &BareMetalHost,
    network: &HostNetwork<'_>,
    out: &mut Vec<Diagnostic>,
) {
    let boot = host.spec.boot_mac_address.as_deref().map(canonical_mac);
    let inspected: BTreeSet<String> = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .map(|h| {
            h.nics
                .iter()
                .filter_map(|n| n.mac.as_deref())
                .map(canonical_mac)
                .collect()
        })
        .unwrap_or_default();
    let physical: Vec<(usize, &str)> = network
        .data
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_bond() && !l.is_vlan())
        .filter_map(|(i, l)| Some((i, l.ethernet_mac_address.as_deref()?)))
        .collect();
    if !inspected.is_empty() {
        for (i, mac) in physical {
            let mac_c = canonical_mac(mac);
            if inspected.contains(&mac_c) || boot.as_deref() == Some(mac_c.as_str()) {
                continue;
            }
            out.push(
                Diagnostic::new(
                    id::NETWORK_DATA_MAC_UNKNOWN,
                    format!(
                        "link `{}` has MAC {mac}, which {} does not have",
                        network.data.links.get(i).map_or("", |l| l.id.as_str()),
                        entry.id
                    ),
                    network.at(&format!("links[{i}].ethernet_mac_address")),
                )
                .why("cloud-init matches links to interfaces by MAC; this link configures nothing and the node misses its address")
                .hint(format!(
                    "use one of the inspected MACs: {}",
                    inspected.iter().cloned().collect::<Vec<_>>().join(", ")
                ))
                .related("inspected NICs", entry.at(&FieldPath::parse("status.hardware.nics"))),
            );
        }
    } else if let (Some(boot), [(i, mac)]) = (boot, physical.as_slice())
        && canonical_mac(mac) != boot
    {
        out.push(
                Diagnostic::new(
                    id::NETWORK_DATA_MAC_UNKNOWN,
                    format!(
                        "the only physical link `{}` has MAC {mac}, not the bootMACAddress {boot} of {}",
                        network.data.links.get(*i).map_or("", |l| l.id.as_str()),
                        entry.id
                    ),
                    network.at(&format!("links[{i}].ethernet_mac_address")),
                )
                .with_severity(Severity::Warning)
                .why("without inspection data lint cannot see the host's other NICs; if this is the provisioning NIC, cloud-init will not find it")
                .hint("copy the MAC from `spec.bootMACAddress` or from `status.hardware.nics` once the host is inspected")
                .related("bootMACAddress", entry.at(&FieldPath::parse("spec.bootMACAddress"))),
            );
    }
}

/// Every static address of every host: (address, host position, location).
fn static_addresses<'n>(
    ctx: &'n Ctx<'_, '_>,
) -> impl Iterator<Item = (IpAddr, &'n HostNetwork<'n>, Location)> + 'n {
    ctx.networks.iter().flat_map(|network| {
        network
            .data
            .networks
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_static())
            .filter_map(move |(i, n)| {
                let (ip, _) = subnet_of(n).ok().flatten().or_else(|| {
                    let ip = n.ip_address.as_deref()?.parse().ok()?;
                    Some((ip, IpNet::from(ip)))
                })?;
                Some((
                    ip,
                    network,
                    network.at(&format!("networks[{i}].ip_address")),
                ))
            })
    })
}

fn duplicate_addresses(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let mut first: HashMap<IpAddr, (usize, Location)> = HashMap::new();
    for (ip, network, location) in static_addresses(ctx) {
        match first.get(&ip) {
            None => {
                first.insert(ip, (network.host, location));
            }
            Some((host, _)) if *host == network.host => {}
            Some((host, first_location)) => {
                let name = |i: usize| {
                    ctx.index
                        .entries
                        .get(i)
                        .map(|e| e.id.to_string())
                        .unwrap_or_default()
                };
                out.push(
                    Diagnostic::new(
                        id::DUPLICATE_HOST_IP,
                        format!("{ip} is the static address of both {} and {}", name(*host), name(network.host)),
                        location,
                    )
                    .why("two nodes with one address fight over it through ARP; at most one is reachable")
                    .hint("give each host its own address")
                    .related("also used here", first_location.clone()),
                );
            }
        }
    }
}

fn vip_addresses(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let mut endpoints: Vec<(IpAddr, Location)> = Vec::new();
    for entry in &ctx.index.entries {
        let host = match &entry.view {
            View::Cluster(c) => c.endpoint_host.clone(),
            View::Metal3Cluster(m) => m.control_plane_endpoint.as_ref().map(|e| e.host.clone()),
            _ => None,
        };
        if let Some(ip) = host.and_then(|h| h.parse::<IpAddr>().ok()) {
            endpoints.push((
                ip,
                entry.at(&FieldPath::parse("spec.controlPlaneEndpoint.host")),
            ));
        }
    }
    if endpoints.is_empty() {
        return;
    }
    for (ip, network, location) in static_addresses(ctx) {
        let Some((_, endpoint)) = endpoints.iter().find(|(vip, _)| *vip == ip) else {
            continue;
        };
        let host = ctx
            .index
            .entries
            .get(network.host)
            .map(|e| e.id.to_string())
            .unwrap_or_default();
        out.push(
            Diagnostic::new(
                id::VIP_IS_HOST_IP,
                format!("the control-plane endpoint {ip} is also the static address of {host}"),
                location,
            )
            .why("kube-vip announces the VIP from the leading control-plane node; while that is another node, API traffic reaches this host instead")
            .hint("pick a VIP that no host uses")
            .related("control-plane endpoint", endpoint.clone()),
        );
    }
    for (entry, pool) in ctx.index.each(|v| match v {
        View::IpPool(p) => Some(p.as_ref()),
        _ => None,
    }) {
        for (i, range) in pool.pools.iter().enumerate() {
            for (vip, endpoint) in &endpoints {
                if !pool_range_contains(range, pool.prefix, *vip) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        id::VIP_IS_HOST_IP,
                        format!("the control-plane endpoint {vip} is inside the address range of IPPool {}", entry.id),
                        entry.at(&FieldPath::parse("spec.pools").index(i)),
                    )
                    .why("the pool can hand the VIP to a machine as its own address; API traffic then reaches that machine whenever it is not the kube-vip leader")
                    .hint("move the VIP out of the pool's range, or shrink the range")
                    .related("control-plane endpoint", endpoint.clone()),
                );
            }
        }
    }
}

/// Whether an IPPool range (`start`..=`end`, or `subnet`) contains `ip`.
fn pool_range_contains(
    range: &capstan_model::ipam::Pool,
    default_prefix: Option<i32>,
    ip: IpAddr,
) -> bool {
    if let Some(start) = range
        .start
        .as_deref()
        .and_then(|s| s.parse::<IpAddr>().ok())
    {
        let end = range.end.as_deref().and_then(|e| e.parse::<IpAddr>().ok());
        let Some(end) = end.or_else(|| {
            let prefix = u8::try_from(range.prefix.or(default_prefix)?).ok()?;
            IpNet::new(start, prefix).ok().map(|n| n.broadcast())
        }) else {
            return false;
        };
        return match (start, end, ip) {
            (IpAddr::V4(s), IpAddr::V4(e), IpAddr::V4(x)) => s <= x && x <= e,
            (IpAddr::V6(s), IpAddr::V6(e), IpAddr::V6(x)) => s <= x && x <= e,
            _ => false,
        };
    }
    range
        .subnet
        .as_deref()
        .and_then(|s| s.parse::<IpNet>().ok())
        .is_some_and(|net| net.contains(&ip))
}

/// IPPool gateways must be inside their ranges' subnets.
fn pool_gateways(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for (entry, pool) in ctx.index.each(|v| match v {
        View::IpPool(p) => Some(p.as_ref()),
        _ => None,
    }) {
        for (i, range) in pool.pools.iter().enumerate() {
            let gateway = range.gateway.as_deref().or(pool.gateway.as_deref());
            let Some(gateway) = gateway.and_then(|g| g.parse::<IpAddr>().ok()) else {
                continue;
            };
            let subnet = match (range.start.as_deref(), range.subnet.as_deref()) {
                (Some(start), _) => {
                    let prefix = range
                        .prefix
                        .or(pool.prefix)
                        .and_then(|p| u8::try_from(p).ok());
                    match (start.parse::<IpAddr>().ok(), prefix) {
                        (Some(start), Some(prefix)) => IpNet::new(start, prefix).ok(),
                        _ => None,
                    }
                }
                (None, Some(subnet)) => subnet.parse::<IpNet>().ok(),
                (None, None) => None,
            };
            let Some(subnet) = subnet else {
                continue;
            };
            if subnet.contains(&gateway) {
                continue;
            }
            let path = if range.gateway.is_some() {
                FieldPath::parse("spec.pools").index(i).key("gateway")
            } else {
                FieldPath::parse("spec.gateway")
            };
            out.push(
                Diagnostic::new(
                    id::NETWORK_DATA_GATEWAY,
                    format!("gateway {gateway} of IPPool {} is outside the range's subnet {}", entry.id, subnet.trunc()),
                    entry.at(&path),
                )
                .why("every machine addressed from this range gets a default route it cannot install, and has no route out")
                .hint("fix the gateway or the prefix so that the gateway lies inside the subnet")
                .related("the range", entry.at(&FieldPath::parse("spec.pools").index(i))),
            );
        }
    }
}

/// Links named in Metal3DataTemplate networkData must be defined in its `links`.
fn data_template_links(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.index.entries {
        let View::DataTemplate(_) = &entry.view else {
            continue;
        };
        let base = FieldPath::parse("spec.networkData");
        let Some(data) = base.lookup(&entry.obj.value) else {
            continue;
        };
        let list = |value: &'_ Value, key: &str| -> Vec<Value> {
            value
                .get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let links = data.get("links").cloned().unwrap_or(Value::Null);
        let mut defined: BTreeSet<String> = BTreeSet::new();
        for kind in ["ethernets", "bonds", "vlans"] {
            for link in list(&links, kind) {
                if let Some(id) = link.get("id").and_then(Value::as_str) {
                    defined.insert(id.to_owned());
                }
            }
        }
        let mut named: Vec<(String, FieldPath, &str)> = Vec::new();
        for (i, bond) in list(&links, "bonds").iter().enumerate() {
            let members = bond
                .get("bondLinks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (j, member) in members.iter().enumerate() {
                if let Some(member) = member.as_str() {
                    named.push((
                        member.to_owned(),
                        base.key("links")
                            .key("bonds")
                            .index(i)
                            .key("bondLinks")
                            .index(j),
                        "bond member",
                    ));
                }
            }
        }
        for (i, vlan) in list(&links, "vlans").iter().enumerate() {
            if let Some(parent) = vlan.get("vlanLink").and_then(Value::as_str) {
                named.push((
                    parent.to_owned(),
                    base.key("links").key("vlans").index(i).key("vlanLink"),
                    "VLAN parent",
                ));
            }
        }
        let networks = data.get("networks").cloned().unwrap_or(Value::Null);
        for family in ["ipv4", "ipv4DHCP", "ipv6", "ipv6DHCP", "ipv6SLAAC"] {
            for (i, network) in list(&networks, family).iter().enumerate() {
                if let Some(link) = network.get("link").and_then(Value::as_str) {
                    named.push((
                        link.to_owned(),
                        base.key("networks").key(family).index(i).key("link"),
                        "network link",
                    ));
                }
            }
        }
        for (name, path, what) in named {
            if defined.contains(&name) {
                continue;
            }
            out.push(
                Diagnostic::new(
                    id::NETWORK_DATA_UNDEFINED_LINK,
                    format!("{what} `{name}` is not a link defined in this Metal3DataTemplate's networkData"),
                    entry.at(&path),
                )
                .why("CAPM3 cannot render networkData that names an undefined link; the machines' network configuration fails")
                .hint(format!(
                    "define `{name}` under links (ethernets, bonds or vlans), or use one of: {}",
                    defined.iter().cloned().collect::<Vec<_>>().join(", ")
                )),
            );
        }
    }
}

/// The value of `key` of a Secret in `stringData` (as written) or `data` (base64), and its path.
pub(crate) fn secret_key(secret: &Entry<'_>, key: &str) -> Option<(FieldPath, Encoding)> {
    let string_field = FieldPath::root().key("stringData").key(key);
    if matches!(
        string_field.lookup(&secret.obj.value),
        Some(Value::String(_))
    ) {
        return Some((string_field, Encoding::Plain));
    }
    let data_field = FieldPath::root().key("data").key(key);
    if matches!(data_field.lookup(&secret.obj.value), Some(Value::String(_))) {
        return Some((data_field, Encoding::Base64));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text};

    #[test]
    fn base_is_clean() {
        let report = lint_text(BASE);
        assert!(
            report.diagnostics.is_empty(),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn undefined_links() {
        let bad = BASE.replacen(r#""link": "ens2""#, r#""link": "ens9""#, 1);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::NETWORK_DATA_UNDEFINED_LINK),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn gateway_outside_subnet() {
        let bad = BASE.replacen(
            r#""gateway": "10.250.250.1""#,
            r#""gateway": "10.250.251.1""#,
            1,
        );
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::NETWORK_DATA_GATEWAY),
            "{}",
            report.render_human(false)
        );
        let bad = BASE.replacen(
            r#""netmask": "255.255.255.0""#,
            r#""netmask": "255.0.255.0""#,
            1,
        );
        assert!(has_rule(&lint_text(&bad), id::NETWORK_DATA_GATEWAY));
    }

    #[test]
    fn unknown_mac() {
        let bad = BASE.replacen(
            r#""ethernet_mac_address": "52:54:00:aa:00:01""#,
            r#""ethernet_mac_address": "52:54:00:ff:ff:ff""#,
            1,
        );
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::NETWORK_DATA_MAC_UNKNOWN)
            .expect("finding");
        assert_eq!(d.severity, crate::diagnostic::Severity::Error);
        // Case differences are not a mismatch.
        let ok = BASE.replacen(
            r#""ethernet_mac_address": "52:54:00:aa:00:01""#,
            r#""ethernet_mac_address": "52:54:00:AA:00:01""#,
            1,
        );
        assert!(!has_rule(&lint_text(&ok), id::NETWORK_DATA_MAC_UNKNOWN));
    }

    #[test]
    fn unknown_mac_without_inspection_is_a_warning() {
        let hardware = "  hardware:\n    hostname: capi-1-cp-0\n    nics:\n    - name: ens2\n      mac: 52:54:00:aa:00:01\n      ip: 192.168.122.20\n      speedGbps: 0\n      pxe: true\n";
        assert!(BASE.contains(hardware));
        let uninspected = BASE.replacen(hardware, "", 1);
        assert!(lint_text(&uninspected).diagnostics.is_empty());
        let bad = uninspected.replacen(
            r#""ethernet_mac_address": "52:54:00:aa:00:01""#,
            r#""ethernet_mac_address": "52:54:00:ff:ff:ff""#,
            1,
        );
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::NETWORK_DATA_MAC_UNKNOWN)
            .expect("finding");
        assert_eq!(d.severity, crate::diagnostic::Severity::Warning);
        assert!(!report.has_errors());
    }

    #[test]
    fn duplicate_and_vip_addresses() {
        let bad = BASE.replacen(
            r#""ip_address": "10.250.250.21""#,
            r#""ip_address": "10.250.250.20""#,
            1,
        );
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::DUPLICATE_HOST_IP),
            "{}",
            report.render_human(false)
        );
        let bad = BASE.replacen(
            r#""ip_address": "10.250.250.21""#,
            r#""ip_address": "10.250.250.29""#,
            1,
        );
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::VIP_IS_HOST_IP),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn invalid_network_data() {
        let bad = BASE.replacen(r#""links": ["#, r#""links": 7, "x": ["#, 1);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::NETWORK_DATA_INVALID),
            "{}",
            report.render_human(false)
        );
        let bad = BASE.replacen("  networkData: |", "  networkDatum: |", 1);
        assert!(has_rule(&lint_text(&bad), id::NETWORK_DATA_INVALID));
    }

    const POOLS: &str = "apiVersion: ipam.metal3.io/v1alpha1
kind: IPPool
metadata: {name: pool1}
spec:
  namePrefix: pool1
  pools:
  - {start: 10.250.250.100, end: 10.250.250.200, prefix: 24, gateway: 10.250.250.1}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3DataTemplate
metadata: {name: dt}
spec:
  clusterName: capi-1
  networkData:
    links:
      ethernets:
      - {type: phy, id: enp1s0, macAddress: {fromHostInterface: enp1s0}}
      bonds:
      - {id: bond0, bondMode: 802.3ad, bondLinks: [enp1s0], macAddress: {}}
      vlans:
      - {id: vlan100, vlanID: 100, vlanLink: bond0, macAddress: {}}
    networks:
      ipv4:
      - {id: v4, link: vlan100, ipAddressFromIPPool: pool1}
";

    #[test]
    fn data_templates_and_pools() {
        let report = crate::test_support::lint_text_partial(POOLS);
        assert!(
            report.diagnostics.is_empty(),
            "{}",
            report.render_human(false)
        );
        let bad = POOLS.replace("vlanLink: bond0", "vlanLink: bond1");
        let report = crate::test_support::lint_text_partial(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::NETWORK_DATA_UNDEFINED_LINK)
            .expect("finding");
        assert_eq!(d.location.path, "spec.networkData.links.vlans[0].vlanLink");
        let bad = POOLS.replace("gateway: 10.250.250.1}", "gateway: 10.250.251.1}");
        assert!(has_rule(
            &crate::test_support::lint_text_partial(&bad),
            id::NETWORK_DATA_GATEWAY
        ));
        // The VIP of BASE (10.250.250.29) inside a pool range.
        let with_pool = format!(
            "{BASE}---\n{}",
            POOLS.replace("start: 10.250.250.100", "start: 10.250.250.10")
        );
        let report = lint_text(&with_pool);
        assert!(
            has_rule(&report, id::VIP_IS_HOST_IP),
            "{}",
            report.render_human(false)
        );
        let ok = format!("{BASE}---\n{POOLS}");
        assert!(!has_rule(&lint_text(&ok), id::VIP_IS_HOST_IP));
    }
}
