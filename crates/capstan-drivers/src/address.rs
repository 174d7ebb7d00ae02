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

/// One BMC address scheme capstan has a driver for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// The scheme before `://`, without a transport (`redfish-virtualmedia`).
    pub name: &'static str,
    /// The driver that serves it.
    pub driver: Driver,
    /// Whether `+http` / `+https` may follow the name to choose the transport.
    pub transports: bool,
    /// What it is, for messages.
    pub description: &'static str,
}

/// The BMC address schemes capstan's drivers serve, the one to prefer first: the single list that
/// registration ([`BmcAddress::parse`]), `capstan render` and `capstan lint` judge addresses by, so
/// that none of them accepts an address another refuses.
pub const SCHEMES: &[Scheme] = &[
    Scheme {
        name: "redfish-virtualmedia",
        driver: Driver::Redfish,
        transports: true,
        description: "Redfish virtual media",
    },
    Scheme {
        name: "redfish",
        driver: Driver::Redfish,
        transports: true,
        description: "Redfish",
    },
    Scheme {
        name: "fake",
        driver: Driver::Fake,
        transports: false,
        description: "a simulated BMC",
    },
];

/// Why capstan cannot drive a BMC address's scheme. Each message ends with what to use instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemeError {
    /// No `scheme://`: Metal3 takes a bare host for IPMI.
    #[error(
        "an address without a scheme is IPMI to Metal3, which is not supported yet; {}",
        use_instead()
    )]
    NoScheme,
    /// A scheme Metal3 knows (`ipmi`, `redfish-uefihttp`, `idrac-virtualmedia`, …) and capstan
    /// has no driver for.
    #[error("{scheme}:// is not supported yet; {}", use_instead())]
    NotSupported {
        /// The scheme's driver part, without a transport.
        scheme: String,
    },
    /// A scheme neither capstan nor Metal3 knows (or a transport other than `+http`/`+https`).
    #[error("{scheme}:// is not a BMC address scheme; {}", use_instead())]
    Unknown {
        /// The scheme as written.
        scheme: String,
    },
}

/// What to write instead of an address capstan cannot drive, from [`SCHEMES`]: `use
/// redfish-virtualmedia:// (Redfish virtual media) or redfish:// (Redfish), optionally with +http
/// or +https (…), or fake:// for a simulated BMC`.
pub fn use_instead() -> String {
    let real: Vec<&Scheme> = SCHEMES
        .iter()
        .filter(|s| s.driver != Driver::Fake)
        .collect();
    let named: Vec<String> = real
        .iter()
        .map(|s| format!("{}:// ({})", s.name, s.description))
        .collect();
    let mut text = format!("use {}", or_list(&named));
    let with_transports: Vec<&str> = real
        .iter()
        .filter(|s| s.transports)
        .map(|s| s.name)
        .collect();
    if let Some(first) = with_transports.first() {
        let which = if with_transports.len() == real.len() {
            String::new()
        } else {
            format!(" ({})", with_transports.join(", "))
        };
        text.push_str(&format!(
            ", optionally with +http or +https{which} ({first}+https://HOST/redfish/v1/Systems/ID)"
        ));
    }
    let simulated: Vec<String> = SCHEMES
        .iter()
        .filter(|s| s.driver == Driver::Fake)
        .map(|s| format!("{}://", s.name))
        .collect();
    if !simulated.is_empty() {
        text.push_str(&format!(
            ", or {} for {}",
            simulated.join(" or "),
            "a simulated BMC"
        ));
    }
    text
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The scheme of `address` among [`SCHEMES`], with the transport it asks for (HTTPS unless
/// `+http` says otherwise; the fake driver has none, reported as HTTP).
pub fn scheme_of(address: &str) -> Result<(&'static Scheme, Transport), SchemeError> {
    let Some((written, _)) = address.split_once("://") else {
        return Err(SchemeError::NoScheme);
    };
    let (name, transport) = match written.split_once('+') {
        Some((name, transport)) => (name, Some(transport)),
        None => (written, None),
    };
    let Some(scheme) = SCHEMES.iter().find(|s| s.name == name) else {
        return Err(match parse_bmc_scheme(address) {
            Some((driver, _)) => SchemeError::NotSupported {
                scheme: driver.to_owned(),
            },
            None => SchemeError::Unknown {
                scheme: written.to_owned(),
            },
        });
    };
    let transport = match (transport, scheme.transports) {
        (None, true) => Transport::Https,
        (None, false) => Transport::Http,
        (Some("https"), true) => Transport::Https,
        (Some("http"), true) => Transport::Http,
        (Some(_), _) => {
            return Err(SchemeError::Unknown {
                scheme: written.to_owned(),
            });
        }
    };
    Ok((scheme, transport))
}

impl BmcAddress {
    /// Parses `address`; a scheme capstan has no driver for is [`BmcError::Unsupported`].
    pub fn parse(address: &str) -> Result<Self, BmcError> {
        let invalid = |reason: &str| BmcError::InvalidAddress {
            address: without_userinfo(address),
            reason: reason.to_owned(),
        };
        let (scheme, transport) =
            scheme_of(address).map_err(|err| BmcError::Unsupported(err.to_string()))?;
        let driver = scheme.driver;
        let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
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
    fn every_listed_scheme_parses_with_each_transport_it_takes() {
        for scheme in SCHEMES {
            let mut written = vec![scheme.name.to_owned()];
            if scheme.transports {
                written.push(format!("{}+http", scheme.name));
                written.push(format!("{}+https", scheme.name));
            }
            for w in written {
                let address = BmcAddress::parse(&format!("{w}://10.0.0.5/redfish/v1/Systems/1"))
                    .unwrap_or_else(|e| panic!("{w}: {e}"));
                assert_eq!(address.driver, scheme.driver, "{w}");
            }
        }
    }

    #[test]
    fn unsupported_schemes_say_what_to_use() {
        assert_eq!(
            scheme_of("ipmi://10.0.0.1:623").unwrap_err().to_string(),
            "ipmi:// is not supported yet; use redfish-virtualmedia:// (Redfish virtual media) or \
             redfish:// (Redfish), optionally with +http or +https \
             (redfish-virtualmedia+https://HOST/redfish/v1/Systems/ID), or fake:// for a simulated BMC"
        );
        assert_eq!(
            scheme_of("redfish-uefihttp+https://x").unwrap_err(),
            SchemeError::NotSupported {
                scheme: "redfish-uefihttp".into()
            }
        );
        assert_eq!(scheme_of("10.0.0.1").unwrap_err(), SchemeError::NoScheme);
        assert_eq!(
            scheme_of("vmware://x").unwrap_err(),
            SchemeError::Unknown {
                scheme: "vmware".into()
            }
        );
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
            "redfish-uefihttp+https://x",
            "fake+https://x",
        ] {
            let err = BmcAddress::parse(address).unwrap_err();
            assert!(matches!(err, BmcError::Unsupported(_)), "{address}: {err}");
            assert!(
                err.to_string()
                    .contains("use redfish-virtualmedia:// (Redfish virtual media)"),
                "{err}"
            );
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
