//! Parsing a BareMetalHost `bmc.address` into the driver, transport, endpoint and system path.

use crate::BmcError;
use capstan_model::metal3::parse_bmc_scheme;

/// Which driver serves an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// `redfish://`, `redfish-virtualmedia://` (both with optional `+http` / `+https`).
    Redfish,
    /// `fake://`: the in-memory [`crate::FakeBmc`].
    Fake,
}

/// How the driver reaches the BMC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Http,
    Https,
}

/// A parsed `bmc.address`, e.g. `redfish+https://10.0.0.5:8443/redfish/v1/Systems/1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BmcAddress {
    pub driver: Driver,
    pub transport: Transport,
    /// Host name or IP address; IPv6 without brackets.
    pub host: String,
    pub port: u16,
    /// The system's Redfish path (`/redfish/v1/Systems/<id>`); `None` to discover the single
    /// system from `/redfish/v1/Systems`.
    pub system_path: Option<String>,
}

const SUPPORTED: &str =
    "supported schemes: redfish, redfish-virtualmedia (with +http or +https), fake";

impl BmcAddress {
    /// Parses `address`; a scheme capstan has no driver for is [`BmcError::Unsupported`].
    pub fn parse(address: &str) -> Result<Self, BmcError> {
        let invalid = |reason: &str| BmcError::InvalidAddress {
            address: without_userinfo(address),
            reason: reason.to_owned(),
        };
        let Some((scheme, rest)) = address.split_once("://") else {
            return Err(BmcError::Unsupported(format!(
                "BMC address {address:?} has no scheme (a bare host means IPMI, which capstan does not drive); {SUPPORTED}"
            )));
        };
        let (driver, transport) = if scheme == "fake" {
            (Driver::Fake, Transport::Http)
        } else {
            match parse_bmc_scheme(address) {
                Some(("redfish" | "redfish-virtualmedia", transport)) => (
                    Driver::Redfish,
                    if transport == Some("http") {
                        Transport::Http
                    } else {
                        Transport::Https
                    },
                ),
                Some((driver, _)) => {
                    return Err(BmcError::Unsupported(format!(
                        "BMC driver {driver:?} is not implemented; {SUPPORTED}"
                    )));
                }
                None => {
                    return Err(BmcError::Unsupported(format!(
                        "unknown BMC address scheme {scheme:?}; {SUPPORTED}"
                    )));
                }
            }
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(invalid(
                "credentials belong in the credentials Secret, not the address",
            ));
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| invalid("bad host or port"))?;
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let path = path
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let default_port = match transport {
            Transport::Http => 80,
            Transport::Https => 443,
        };
        Ok(Self {
            driver,
            transport,
            host: host.to_owned(),
            port: port.unwrap_or(default_port),
            system_path: (!path.is_empty()).then(|| path.to_owned()),
        })
    }

    /// `host:port` as it appears in messages and the `Host` header.
    pub fn endpoint(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `address` with any `user:password@` removed, so that a password never reaches a message.
fn without_userinfo(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return address.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>@{}", &rest[at + 1..]),
        None => address.to_owned(),
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`; `None` when malformed.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some((host, port));
    }
    match authority.split_once(':') {
        None => Some((authority, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn redfish_addresses() {
        let a =
            BmcAddress::parse("redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/1/")
                .unwrap();
        assert_eq!(a.driver, Driver::Redfish);
        assert_eq!(a.transport, Transport::Http);
        assert_eq!(a.endpoint(), "127.0.0.1:8000");
        assert_eq!(a.system_path.as_deref(), Some("/redfish/v1/Systems/1"));

        let a = BmcAddress::parse("redfish://[fd00::5]").unwrap();
        assert_eq!(a.transport, Transport::Https);
        assert_eq!(a.port, 443);
        assert_eq!(a.host, "fd00::5");
        assert_eq!(a.system_path, None);
    }

    #[test]
    fn other_schemes() {
        assert_eq!(
            BmcAddress::parse("fake://node-1").unwrap().driver,
            Driver::Fake
        );
        for address in [
            "ipmi://10.0.0.1",
            "10.0.0.1",
            "vmware://x",
            "redfish+ftp://x",
        ] {
            let err = BmcAddress::parse(address).unwrap_err();
            assert!(matches!(err, BmcError::Unsupported(_)), "{address}: {err}");
            assert!(err.to_string().contains("supported schemes"), "{err}");
        }
        for address in ["redfish://", "redfish://h:notaport", "redfish://u:p@h/"] {
            let err = BmcAddress::parse(address).unwrap_err();
            assert!(
                matches!(err, BmcError::InvalidAddress { .. }),
                "{address}: {err}"
            );
            assert!(!err.to_string().contains(":p@"), "{err}");
        }
    }
}
