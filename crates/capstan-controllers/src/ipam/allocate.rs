//! Address selection for an IPPool, as pure functions: which addresses a pool's ranges hold, which
//! are taken, and which one a claim gets.
//!
//! The rules follow Metal3's ip-address-manager:
//! - a range is `start`..=`end`, `start` up to the end of `subnet`, or a whole `subnet`; a whole
//!   subnet excludes its network address and (IPv4 wider than /31) its broadcast address;
//! - gateways (the pool's and each range's) are never handed out;
//! - ranges are tried in the order they are listed, each from its lowest address up;
//! - a claim named in `preAllocations` gets exactly that address, which must lie in a range; every
//!   other claim skips all pre-allocated addresses;
//! - the prefix, gateway and DNS servers of an allocation come from its range, else from the pool;
//! - IPAddress objects are named `<namePrefix>-<address with '.' and ':' as '-'>` (the pool's name
//!   when `namePrefix` is empty), so two allocations of one address collide on the name and the
//!   API server's create refuses the second.

use capstan_model::ipam::{IpPoolSpec, Pool};
use ipnet::IpNet;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Why a claim cannot be given an address. The message is written to the claim's
/// `status.errorMessage`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// Every address of every range is taken (the message matches Metal3's).
    #[error("Exhausted IP Pools")]
    Exhausted,
    #[error("pools[{index}]: {reason}")]
    InvalidRange { index: usize, reason: String },
    #[error("pre-allocated address {address:?} is not a valid IP address")]
    InvalidPreAllocation { address: String },
    #[error("pre-allocated address {address} is outside the pool's ranges")]
    PreAllocationOutOfRange { address: IpAddr },
    #[error("pre-allocated address {address} is already allocated to another claim")]
    PreAllocationTaken { address: IpAddr },
}

/// An address chosen for a claim, with the network facts the IPAddress carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub address: IpAddr,
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    pub dns_servers: Option<Vec<String>>,
}

/// One range of a pool as first and last address (inclusive), as 128-bit numbers so IPv4 and IPv6
/// iterate alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    first: u128,
    last: u128,
    v4: bool,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_u128(value: u128, v4: bool) -> Option<IpAddr> {
    if v4 {
        u32::try_from(value)
            .ok()
            .map(|v| IpAddr::V4(std::net::Ipv4Addr::from(v)))
    } else {
        Some(IpAddr::V6(std::net::Ipv6Addr::from(value)))
    }
}

fn parse_ip(text: &str) -> Option<IpAddr> {
    text.trim().parse().ok()
}

fn invalid(index: usize, reason: impl Into<String>) -> AllocationError {
    AllocationError::InvalidRange {
        index,
        reason: reason.into(),
    }
}

/// The addresses of `range` (the `index`th of the pool).
fn span(index: usize, range: &Pool) -> Result<Span, AllocationError> {
    let subnet = range
        .subnet
        .as_deref()
        .map(|s| {
            s.trim()
                .parse::<IpNet>()
                .map_err(|_| invalid(index, format!("subnet {s:?} is not a CIDR")))
        })
        .transpose()?;
    let start = range
        .start
        .as_deref()
        .map(|s| {
            parse_ip(s).ok_or_else(|| invalid(index, format!("start {s:?} is not an IP address")))
        })
        .transpose()?;
    let end = range
        .end
        .as_deref()
        .map(|s| {
            parse_ip(s).ok_or_else(|| invalid(index, format!("end {s:?} is not an IP address")))
        })
        .transpose()?;
    let (first, last, v4) = match (start, end, subnet) {
        (Some(start), Some(end), _) => {
            if start.is_ipv4() != end.is_ipv4() {
                return Err(invalid(index, "start and end are of different IP families"));
            }
            (to_u128(start), to_u128(end), start.is_ipv4())
        }
        (Some(start), None, Some(net)) => {
            if start.is_ipv4() != net.addr().is_ipv4() {
                return Err(invalid(
                    index,
                    "start and subnet are of different IP families",
                ));
            }
            (to_u128(start), to_u128(usable_last(net)), start.is_ipv4())
        }
        (None, end, Some(net)) => {
            let last = end.unwrap_or_else(|| usable_last(net));
            if last.is_ipv4() != net.addr().is_ipv4() {
                return Err(invalid(
                    index,
                    "end and subnet are of different IP families",
                ));
            }
            (
                to_u128(usable_first(net)),
                to_u128(last),
                net.addr().is_ipv4(),
            )
        }
        (Some(_), None, None) => return Err(invalid(index, "start needs an end or a subnet")),
        (None, _, None) => return Err(invalid(index, "needs a start or a subnet")),
    };
    if first > last {
        return Err(invalid(
            index,
            "the range is empty (its start is after its end)",
        ));
    }
    if let Some(net) = subnet {
        let inside = |v: u128| from_u128(v, v4).is_some_and(|ip| net.contains(&ip));
        if !inside(first) || !inside(last) {
            return Err(invalid(
                index,
                format!("the range does not lie within subnet {net}"),
            ));
        }
    }
    Ok(Span { first, last, v4 })
}

/// The first address of a subnet handed out: after the network address, except for /31, /32
/// (RFC 3021 point-to-point links) and /127, /128, where every address is usable.
fn usable_first(net: IpNet) -> IpAddr {
    let network = to_u128(net.network());
    let v4 = net.addr().is_ipv4();
    let all_usable = net.max_prefix_len() - net.prefix_len() <= 1;
    let first = if all_usable { network } else { network + 1 };
    from_u128(first, v4).unwrap_or(net.network())
}

/// The last address of a subnet handed out: before the IPv4 broadcast address (IPv6 has none).
fn usable_last(net: IpNet) -> IpAddr {
    match net {
        IpNet::V4(v4) if v4.prefix_len() < 31 => {
            let broadcast = u32::from(v4.broadcast());
            IpAddr::V4(std::net::Ipv4Addr::from(broadcast.saturating_sub(1)))
        }
        _ => net.broadcast(),
    }
}

/// `address` in canonical text form (`fd00::1`, never `fd00:0::0001`).
pub fn canonical(address: &str) -> Option<String> {
    parse_ip(address).map(|ip| ip.to_string())
}

/// The name of the IPAddress object for `address` in a pool named `pool_name` with `name_prefix`.
pub fn address_name(name_prefix: &str, pool_name: &str, address: IpAddr) -> String {
    let prefix = if name_prefix.is_empty() {
        pool_name
    } else {
        name_prefix
    };
    let rendered = address.to_string().replace(['.', ':'], "-");
    format!("{prefix}-{rendered}")
        .trim_end_matches('-')
        .to_owned()
}

/// What is already taken in a pool, apart from the claim being served.
#[derive(Clone, Debug, Default)]
pub struct Taken {
    /// Addresses held by other claims' IPAddress objects.
    pub addresses: BTreeSet<IpAddr>,
    /// Names of existing IPAddress objects in the namespace (an address whose object name is taken
    /// cannot be created, whatever that object says).
    pub names: BTreeSet<String>,
}

/// The address for claim `claim` of pool `pool_name` with `spec`, given what is `taken`.
pub fn allocate(
    spec: &IpPoolSpec,
    pool_name: &str,
    claim: &str,
    taken: &Taken,
) -> Result<Allocation, AllocationError> {
    let spans = spec
        .pools
        .iter()
        .enumerate()
        .map(|(i, range)| span(i, range))
        .collect::<Result<Vec<_>, _>>()?;
    let gateways: BTreeSet<IpAddr> = spec
        .gateway
        .iter()
        .chain(spec.pools.iter().filter_map(|r| r.gateway.as_ref()))
        .filter_map(|g| parse_ip(g))
        .collect();
    let pre_allocations = spec.pre_allocations.clone().unwrap_or_default();
    let facts = |index: usize, address: IpAddr| {
        let range = &spec.pools[index];
        Allocation {
            address,
            prefix: range.prefix.or(spec.prefix),
            gateway: range.gateway.clone().or_else(|| spec.gateway.clone()),
            dns_servers: range
                .dns_servers
                .clone()
                .or_else(|| spec.dns_servers.clone()),
        }
    };
    let in_span =
        |s: &Span, ip: IpAddr| s.v4 == ip.is_ipv4() && (s.first..=s.last).contains(&to_u128(ip));

    if let Some(wanted) = pre_allocations.get(claim) {
        let address = parse_ip(wanted).ok_or_else(|| AllocationError::InvalidPreAllocation {
            address: wanted.clone(),
        })?;
        let index = spans
            .iter()
            .position(|s| in_span(s, address))
            .ok_or(AllocationError::PreAllocationOutOfRange { address })?;
        if taken.addresses.contains(&address)
            || taken
                .names
                .contains(&address_name(&spec.name_prefix, pool_name, address))
        {
            return Err(AllocationError::PreAllocationTaken { address });
        }
        return Ok(facts(index, address));
    }

    let reserved: BTreeSet<IpAddr> = pre_allocations
        .iter()
        .filter(|(owner, _)| owner.as_str() != claim)
        .filter_map(|(_, address)| parse_ip(address))
        .chain(gateways)
        .collect();
    for (index, s) in spans.iter().enumerate() {
        let mut value = s.first;
        // Each skipped address is distinct and taken or reserved, so this loop runs at most
        // |taken| + |reserved| + 1 times per range, however large the range.
        while let Some(address) = from_u128(value, s.v4) {
            let free = !taken.addresses.contains(&address)
                && !reserved.contains(&address)
                && !taken
                    .names
                    .contains(&address_name(&spec.name_prefix, pool_name, address));
            if free {
                return Ok(facts(index, address));
            }
            if value == s.last {
                break;
            }
            value += 1;
        }
    }
    Err(AllocationError::Exhausted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn range(start: Option<&str>, end: Option<&str>, subnet: Option<&str>) -> Pool {
        Pool {
            start: start.map(Into::into),
            end: end.map(Into::into),
            subnet: subnet.map(Into::into),
            ..Pool::default()
        }
    }

    fn spec(pools: Vec<Pool>) -> IpPoolSpec {
        IpPoolSpec {
            name_prefix: "prov".into(),
            pools,
            prefix: Some(24),
            ..IpPoolSpec::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn taken(addresses: &[&str]) -> Taken {
        Taken {
            addresses: addresses.iter().map(|a| ip(a)).collect(),
            names: BTreeSet::new(),
        }
    }

    #[test]
    fn lowest_free_address_in_range_order() {
        let s = spec(vec![
            range(Some("10.0.0.10"), Some("10.0.0.11"), None),
            range(Some("10.0.0.2"), Some("10.0.0.3"), None),
        ]);
        let got = |t: &[&str]| allocate(&s, "pool", "c", &taken(t)).map(|a| a.address);
        assert_eq!(got(&[]), Ok(ip("10.0.0.10")));
        assert_eq!(got(&["10.0.0.10"]), Ok(ip("10.0.0.11")));
        assert_eq!(got(&["10.0.0.10", "10.0.0.11"]), Ok(ip("10.0.0.2")));
        assert_eq!(
            got(&["10.0.0.10", "10.0.0.11", "10.0.0.2", "10.0.0.3"]),
            Err(AllocationError::Exhausted)
        );
    }

    #[test]
    fn subnets_skip_network_broadcast_and_gateway() {
        let mut s = spec(vec![range(None, None, Some("192.168.1.0/30"))]);
        s.gateway = Some("192.168.1.1".into());
        assert_eq!(
            allocate(&s, "pool", "c", &Taken::default()).map(|a| a.address),
            Ok(ip("192.168.1.2"))
        );
        assert_eq!(
            allocate(&s, "pool", "c", &taken(&["192.168.1.2"])),
            Err(AllocationError::Exhausted)
        );
        let p2p = spec(vec![range(None, None, Some("10.1.0.0/31"))]);
        assert_eq!(
            allocate(&p2p, "pool", "c", &Taken::default()).map(|a| a.address),
            Ok(ip("10.1.0.0"))
        );
        let v6 = spec(vec![range(None, None, Some("fd00::/126"))]);
        assert_eq!(
            allocate(&v6, "pool", "c", &taken(&["fd00::1", "fd00::2"])).map(|a| a.address),
            Ok(ip("fd00::3"))
        );
        let start_in_subnet = spec(vec![range(Some("10.2.0.250"), None, Some("10.2.0.0/24"))]);
        assert_eq!(
            allocate(
                &start_in_subnet,
                "pool",
                "c",
                &taken(&["10.2.0.250", "10.2.0.251", "10.2.0.252", "10.2.0.253"])
            ),
            Ok(Allocation {
                address: ip("10.2.0.254"),
                prefix: Some(24),
                gateway: None,
                dns_servers: None
            })
        );
    }

    #[test]
    fn pre_allocations_are_exact_and_reserved() {
        let mut s = spec(vec![range(Some("10.0.0.1"), Some("10.0.0.5"), None)]);
        s.pre_allocations = Some(BTreeMap::from([
            ("fixed".to_owned(), "10.0.0.1".to_owned()),
            ("outside".to_owned(), "10.9.9.9".to_owned()),
        ]));
        assert_eq!(
            allocate(&s, "pool", "fixed", &Taken::default()).map(|a| a.address),
            Ok(ip("10.0.0.1"))
        );
        assert_eq!(
            allocate(&s, "pool", "other", &Taken::default()).map(|a| a.address),
            Ok(ip("10.0.0.2"))
        );
        assert_eq!(
            allocate(&s, "pool", "outside", &Taken::default()),
            Err(AllocationError::PreAllocationOutOfRange {
                address: ip("10.9.9.9")
            })
        );
        assert_eq!(
            allocate(&s, "pool", "fixed", &taken(&["10.0.0.1"])),
            Err(AllocationError::PreAllocationTaken {
                address: ip("10.0.0.1")
            })
        );
    }

    #[test]
    fn range_facts_override_pool_facts() {
        let mut s = spec(vec![Pool {
            prefix: Some(26),
            gateway: Some("10.0.0.62".into()),
            ..range(Some("10.0.0.1"), Some("10.0.0.62"), None)
        }]);
        s.gateway = Some("10.0.0.1".into());
        s.dns_servers = Some(vec!["10.0.0.53".into()]);
        let got = allocate(&s, "pool", "c", &Taken::default());
        assert_eq!(
            got,
            Ok(Allocation {
                address: ip("10.0.0.2"),
                prefix: Some(26),
                gateway: Some("10.0.0.62".into()),
                dns_servers: Some(vec!["10.0.0.53".into()]),
            })
        );
    }

    #[test]
    fn taken_names_are_skipped() {
        let s = spec(vec![range(Some("10.0.0.1"), Some("10.0.0.2"), None)]);
        let t = Taken {
            addresses: BTreeSet::new(),
            names: BTreeSet::from(["prov-10-0-0-1".to_owned()]),
        };
        assert_eq!(
            allocate(&s, "pool", "c", &t).map(|a| a.address),
            Ok(ip("10.0.0.2"))
        );
    }

    #[test]
    fn invalid_ranges_are_reported_not_panicked_on() {
        for (bad, expected) in [
            (range(Some("10.0.0.9"), Some("10.0.0.1"), None), "empty"),
            (
                range(Some("nope"), Some("10.0.0.1"), None),
                "not an IP address",
            ),
            (
                range(Some("10.0.0.1"), None, None),
                "needs an end or a subnet",
            ),
            (range(None, None, Some("10.0.0.0/33")), "not a CIDR"),
            (
                range(Some("10.0.0.1"), Some("fd00::1"), None),
                "different IP families",
            ),
            (
                range(Some("10.0.1.1"), Some("10.0.1.2"), Some("10.0.0.0/24")),
                "within subnet",
            ),
            (range(None, None, None), "needs a start or a subnet"),
        ] {
            let err = allocate(&spec(vec![bad]), "pool", "c", &Taken::default());
            assert!(
                matches!(&err, Err(AllocationError::InvalidRange { reason, .. }) if reason.contains(expected)),
                "{err:?} should mention {expected:?}"
            );
        }
    }

    #[test]
    fn names_follow_metal3() {
        assert_eq!(
            address_name("prov", "pool", ip("10.0.0.1")),
            "prov-10-0-0-1"
        );
        assert_eq!(address_name("", "pool", ip("fd00::")), "pool-fd00");
        assert_eq!(address_name("p", "pool", ip("fd00::1:2")), "p-fd00--1-2");
        assert_eq!(canonical("fd00:0::0001").as_deref(), Some("fd00::1"));
        assert_eq!(canonical("x"), None);
    }
}
