//! BMC drivers for the BareMetalHost controller: one [`Bmc`] interface of coarse, idempotent verbs
//! (power, reboot, one-time boot, virtual media, inventory), with the driver chosen by the scheme
//! of the host's `bmc.address`.
//!
//! - [`redfish`]: Redfish over HTTP(S), for `redfish://` and `redfish-virtualmedia://` addresses
//!   (with an optional `+http` / `+https` transport).
//! - [`fake`]: an in-memory BMC for `fake://` addresses, shipped in the product for demos and
//!   scale tests, with request counters.
//!
//! [`SCHEMES`] lists the address schemes these drivers serve; [`scheme_of`] judges an address by
//! it, for `capstan render` and `capstan lint` as for registration.
//!
//! Verbs that change something return an [`Outcome`]: [`Outcome::Unchanged`] when the BMC was
//! already in the asked-for state and no request was sent, [`Outcome::Requested`] when a request
//! was accepted and the caller should come back later to observe its effect (BMCs apply power
//! changes asynchronously).

pub mod address;
pub mod error;
pub mod fake;
mod http;
pub mod networks;
pub mod redfish;
pub mod tls;

pub use address::{BmcAddress, Driver, SCHEMES, Scheme, SchemeError, Transport, scheme_of};
pub use error::BmcError;
pub use fake::{FakeBmc, FakeCounters};
pub use networks::{BmcNetworks, NetworksError};
pub use redfish::RedfishBmc;
pub use tls::{TrustAnchors, TrustAnchorsError};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What every [`Bmc`] verb returns: boxed so that `dyn Bmc` works.
pub type BmcFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BmcError>> + Send + 'a>>;

/// A baseboard management controller, reduced to the verbs a BareMetalHost controller needs.
///
/// Every verb is idempotent: asking for the state the BMC is already in sends no change request.
pub trait Bmc: Send + Sync + fmt::Debug {
    /// The system's current power state.
    fn power_state(&self) -> BmcFuture<'_, PowerState>;
    /// Powers the system on (`true`) or hard off (`false`); no request when it is already there
    /// (or already on its way there).
    fn set_power(&self, on: bool) -> BmcFuture<'_, Outcome>;
    /// Hard-restarts the system; a system that is off is powered on.
    fn reboot(&self) -> BmcFuture<'_, Outcome>;
    /// Boots from `device` on the next boot only.
    fn set_one_time_boot(&self, device: BootDevice) -> BmcFuture<'_, Outcome>;
    /// Inserts the image at `image_url` into the virtual CD/DVD drive; nothing when that image
    /// is already inserted, and another inserted image is ejected first.
    fn insert_virtual_media<'a>(&'a self, image_url: &'a str) -> BmcFuture<'a, Outcome>;
    /// Ejects whatever the virtual CD/DVD drive holds; nothing when it is empty.
    fn eject_virtual_media(&self) -> BmcFuture<'_, Outcome>;
    /// What the system is made of, as far as the BMC tells.
    fn inventory(&self) -> BmcFuture<'_, SystemInventory>;
}

/// The effect of a verb that may change the BMC's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The BMC was already in the asked-for state; nothing was sent.
    Unchanged,
    /// A change was requested; the caller should requeue and observe it.
    Requested,
}

/// A system's power state, as Redfish reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    /// Anything else (`Paused`, a missing field).
    Unknown,
}

/// A device to boot from once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootDevice {
    /// The virtual (or physical) CD/DVD drive.
    Cd,
    /// Network boot.
    Pxe,
    /// The local disk.
    Hdd,
}

impl BootDevice {
    /// The Redfish `BootSourceOverrideTarget` value.
    pub fn redfish_name(self) -> &'static str {
        match self {
            Self::Cd => "Cd",
            Self::Pxe => "Pxe",
            Self::Hdd => "Hdd",
        }
    }
}

/// The hardware of one system. Fields the BMC does not expose are `None` or empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemInventory {
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
    pub cpu_count: Option<u32>,
    pub cpu_model: Option<String>,
    pub memory_mib: Option<u64>,
    pub nics: Vec<Nic>,
    pub disks: Vec<Disk>,
}

/// A network interface.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nic {
    pub name: String,
    pub mac_address: Option<String>,
    pub speed_mbps: Option<u64>,
}

/// A storage drive.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Disk {
    pub name: String,
    pub size_bytes: Option<u64>,
    /// `HDD`, `SSD`, … as the BMC reports it.
    pub media_type: Option<String>,
    pub model: Option<String>,
    pub serial_number: Option<String>,
}

/// The credentials a BMC accepts, read from the host's credentials Secret.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    password: String,
}

impl Credentials {
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}

// The password must never reach logs or error messages, so Debug leaves it out.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How to talk to a BMC.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Accept any server certificate (the BMH's `disableCertificateVerification`).
    pub disable_certificate_verification: bool,
    /// The CAs an HTTPS BMC's certificate must chain to, unless verification is disabled.
    pub trust: TrustAnchors,
    /// The bound on each request, connection and TLS handshake included.
    pub timeout: Duration,
    /// The networks the BMC may be in; `None` for any. Every address the BMC's name resolves to
    /// is checked before a connection is made to it.
    pub permitted: Option<BmcNetworks>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            disable_certificate_verification: false,
            trust: TrustAnchors::system(),
            timeout: Duration::from_secs(30),
            permitted: None,
        }
    }
}

/// A driver for the BMC at `address`, chosen by its scheme: `redfish` and `redfish-virtualmedia`
/// (optionally `+http` / `+https`) get a [`RedfishBmc`], `fake` a [`FakeBmc`]; any other scheme is
/// [`BmcError::Unsupported`]. Nothing is sent until the first verb.
pub fn connect(
    address: &str,
    credentials: Credentials,
    options: ConnectOptions,
) -> Result<Box<dyn Bmc>, BmcError> {
    let address = BmcAddress::parse(address)?;
    match address.driver {
        Driver::Redfish => Ok(Box::new(RedfishBmc::new(address, credentials, options)?)),
        Driver::Fake => Ok(Box::new(FakeBmc::shared(&address))),
    }
}
