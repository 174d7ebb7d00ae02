//! The networks a BMC may be in: a list of CIDRs (a platform team's per-namespace allow-list), the
//! one check of a BMC's address against it ([`BmcNetworks::check`], before anything is read for
//! the host), and the same check of every address a BMC's name resolves to, made by the Redfish
//! driver before it connects, so that no request — and no credential — reaches a BMC outside the
//! list, whatever its name resolves to by then.

use crate::BmcError;
use crate::address::{BmcAddress, Driver};
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// Why a list of networks could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetworksError {
    #[error("{entry:?} is not a network: write a CIDR (10.0.0.0/24, fd00::/64) or an address")]
    NotANetwork { entry: String },
}

/// The networks BMC addresses must be in (an empty list permits none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BmcNetworks {
    networks: Vec<IpNet>,
}

impl BmcNetworks {
    /// Reads a list of CIDRs or addresses separated by commas or white space (`10.0.0.0/24,
    /// 192.0.2.7`); an address is a network of itself alone.
    pub fn parse(text: &str) -> Result<Self, NetworksError> {
        let networks = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| NetworksError::NotANetwork {
                        entry: entry.to_owned(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { networks })
    }

    /// Whether `ip` is in one of the networks (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.networks.iter().any(|net| net.contains(&ip))
    }

    /// Checks `address` before anything is read or sent for its host: an IP address outside the
    /// networks is [`BmcError::NotPermitted`]; a name is checked when the driver resolves it, on
    /// every connection; a `fake://` BMC is simulated in this process and reaches no network.
    pub fn check(&self, address: &BmcAddress) -> Result<(), BmcError> {
        if address.driver == Driver::Fake {
            return Ok(());
        }
        match address.host.parse::<IpAddr>() {
            Ok(ip) if !self.permits(ip) => Err(self.refusal(&address.endpoint(), &[ip])),
            _ => Ok(()),
        }
    }

    /// The refusal of a BMC at `endpoint` whose addresses are `ips`.
    pub(crate) fn refusal(&self, endpoint: &str, ips: &[IpAddr]) -> BmcError {
        BmcError::NotPermitted {
            endpoint: endpoint.to_owned(),
            addresses: ips
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            permitted: self.to_string(),
        }
    }
}

impl fmt::Display for BmcNetworks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.networks.is_empty() {
            return f.write_str("none");
        }
        let list: Vec<String> = self.networks.iter().map(IpNet::to_string).collect();
        f.write_str(&list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_are_cidrs_or_addresses() {
        let networks = BmcNetworks::parse(" 10.0.0.0/8, 192.0.2.7 fd00::1/64").unwrap();
        assert_eq!(networks.to_string(), "10.0.0.0/8, 192.0.2.7/32, fd00::/64");
        for permitted in ["10.1.2.3", "192.0.2.7", "fd00::42", "::ffff:10.0.0.1"] {
            assert!(networks.permits(permitted.parse().unwrap()), "{permitted}");
        }
        for refused in ["192.0.2.8", "11.0.0.1", "fd01::1"] {
            assert!(!networks.permits(refused.parse().unwrap()), "{refused}");
        }
        assert_eq!(
            BmcNetworks::parse("10.0.0.0/8,bmc.example").unwrap_err(),
            NetworksError::NotANetwork {
                entry: "bmc.example".into()
            }
        );
        let none = BmcNetworks::parse("").unwrap();
        assert!(!none.permits("10.0.0.1".parse().unwrap()));
        assert_eq!(none.to_string(), "none");
    }

    #[test]
    fn an_address_outside_is_refused_before_anything_is_sent() {
        let networks = BmcNetworks::parse("10.0.0.0/24").unwrap();
        let parse = |a: &str| BmcAddress::parse(a).unwrap();
        networks
            .check(&parse("redfish+http://10.0.0.5/redfish/v1/Systems/1"))
            .unwrap();
        let err = networks
            .check(&parse(
                "redfish+https://203.0.113.9:8443/redfish/v1/Systems/1",
            ))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("203.0.113.9") && text.contains("10.0.0.0/24"),
            "{text}"
        );
        // Names are checked once resolved; simulated BMCs reach no network.
        networks
            .check(&parse("redfish://bmc-0.example/redfish/v1/Systems/1"))
            .unwrap();
        networks.check(&parse("fake://node-0")).unwrap();
    }
}
