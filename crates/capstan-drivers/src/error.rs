//! The one error type of every driver, with kinds the host controller maps to Metal3 error types.

/// Why a BMC verb failed. Messages name the BMC endpoint and never contain the password.
#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    /// The address cannot be used (no host, bad port, several systems and no system path).
    #[error("invalid BMC address {address:?}: {reason}")]
    InvalidAddress { address: String, reason: String },
    /// The BMC could not be reached: connection refused, timeout, TLS handshake failure.
    #[error("BMC {endpoint} is unreachable: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// The BMC refused the credentials (HTTP 401 or 403).
    #[error("BMC {endpoint} refused the credentials of user {username:?} (HTTP {status})")]
    Unauthorized {
        endpoint: String,
        username: String,
        status: u16,
    },
    /// A resource the driver needs does not exist, typically the system path of the address.
    #[error("BMC {endpoint} has no {resource}")]
    NotFound { endpoint: String, resource: String },
    /// The scheme, or a verb on this BMC, is not supported.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The BMC's address is outside the networks BMCs may be in ([`crate::BmcNetworks`]):
    /// nothing was sent to it.
    #[error(
        "BMC {endpoint} ({addresses}) is outside the networks BMCs may be in ({permitted}); nothing was sent to it"
    )]
    NotPermitted {
        endpoint: String,
        addresses: String,
        permitted: String,
    },
    /// The BMC answered something the driver does not understand.
    #[error("unexpected answer from BMC {endpoint}: {detail}")]
    Protocol { endpoint: String, detail: String },
}
