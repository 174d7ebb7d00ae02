//! The hypervisor driver: libvirt behind a few coarse, idempotent verbs.
//!
//! Everything the provider asks of a hypervisor goes through [`Driver`]: how much room a
//! hypervisor has ([`Driver::capacity`]), a volume in a pool ([`Driver::ensure_volume`], with its
//! content when it is created), a domain defined and running ([`Driver::ensure_domain`]), its
//! state ([`Driver::domain`]), and their removal ([`Driver::delete_domain`],
//! [`Driver::delete_volume`]) — each with one config type in and one error type out. Asking twice
//! is asking once: a volume or domain that exists is found by name, not created again, and
//! removing one that is gone succeeds.
//!
//! libvirt's C library blocks, so every verb runs on tokio's blocking pool. Connections are opened
//! once per URI and kept; one that fails is dropped and reopened on the next call, so a hypervisor
//! that went away and came back is picked up again.
//!
//! libvirt's own `test:///` driver (a simulated hypervisor with the real API) has no data path:
//! volume uploads are not supported there, so on it a volume is created at its size and its
//! content, already verified by the caller, is not sent ([`Written::Simulated`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once};
use virt::connect::Connect;
use virt::domain::{Domain, DomainState};
use virt::error::ErrorNumber;
use virt::storage_pool::StoragePool;
use virt::storage_vol::StorageVol;
use virt::stream::Stream;

/// URI schemes capstan accepts for hypervisors.
pub const SCHEMES: &[&str] = &[
    "qemu",
    "qemu+ssh",
    "qemu+tls",
    "qemu+tcp",
    "qemu+unix",
    "test",
];

/// Why a driver verb failed. Messages name the hypervisor and the object; the libvirt error is the
/// source.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(
        "hypervisor URI {uri:?} has an unknown scheme: use qemu:///system, qemu+ssh://USER@HOST/system, qemu+tls://HOST/system or test:///default"
    )]
    UnknownScheme { uri: String },
    #[error("cannot connect to hypervisor {uri}: {message}")]
    Unreachable { uri: String, message: String },
    #[error(
        "hypervisor {uri} refused the credentials: check the Secret named by credentialsSecretRef"
    )]
    AuthFailed { uri: String },
    #[error(
        "hypervisor {uri} has no storage pool {pool:?}: define it (virsh pool-define-as) or set the hypervisor's pool"
    )]
    NoPool { uri: String, pool: String },
    #[error("{verb} {what} on {uri}: {message}")]
    Libvirt {
        verb: &'static str,
        what: String,
        uri: String,
        message: String,
    },
    #[error("reading {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the driver's worker thread stopped")]
    Worker(#[source] tokio::task::JoinError),
}

impl DriverError {
    /// Whether the hypervisor could not be reached at all (as opposed to refusing one request).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// How much a hypervisor has and how much its domains take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub cpus: u32,
    pub memory_bytes: u64,
    /// vCPUs of the defined domains (running or not).
    pub used_vcpus: u32,
    /// Current memory of the defined domains.
    pub used_memory_bytes: u64,
    /// Free bytes in the pool.
    pub pool_available_bytes: u64,
    /// The names of the defined domains.
    pub domains: std::collections::BTreeSet<String>,
    /// The volumes in the pool and their capacity in bytes.
    pub volumes: std::collections::BTreeMap<String, u64>,
}

/// A volume in a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeConfig {
    pub pool: String,
    pub name: String,
    pub capacity_bytes: u64,
    /// `qcow2` or `raw`.
    pub format: String,
    /// A qcow2 overlay's backing file (path on the hypervisor) and its format.
    pub backing: Option<(String, String)>,
}

/// What a new volume is filled with.
#[derive(Clone, Debug, Default)]
pub enum Content {
    /// Nothing (a blank disk, or an overlay).
    #[default]
    Empty,
    /// These bytes.
    Bytes(Vec<u8>),
    /// This local file's bytes.
    File(std::path::PathBuf),
}

/// What [`Driver::ensure_volume`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The volume was there already.
    Existing { path: String },
    /// Created now, with its content.
    Created { path: String },
    /// Created now; the hypervisor is simulated and has no data path, so the content was not sent.
    Simulated { path: String },
}

impl Written {
    pub fn path(&self) -> &str {
        match self {
            Self::Existing { path } | Self::Created { path } | Self::Simulated { path } => path,
        }
    }
}

/// One disk of a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    /// Path on the hypervisor (from [`Written::path`]).
    pub path: String,
    /// `qcow2` or `raw`.
    pub format: String,
    /// Guest device (`vda`, `vdb`, `sda`).
    pub target: String,
    /// Read-only (the cloud-init medium: an ISO 9660 image on a virtio disk, which every cloud
    /// kernel reads, where a CD-ROM would need an IDE or SCSI driver).
    pub read_only: bool,
}

/// One NIC of a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NicSource {
    Network(String),
    Bridge(String),
    /// QEMU's user-mode networking.
    User,
}

/// A NIC with the MAC capstan chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicConfig {
    pub source: NicSource,
    pub mac: String,
}

/// A domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainConfig {
    pub name: String,
    pub uuid: String,
    pub vcpus: u32,
    pub memory_bytes: u64,
    pub disks: Vec<DiskConfig>,
    pub nics: Vec<NicConfig>,
    /// Where the serial console is logged on the hypervisor (local QEMU only).
    pub console_log: Option<String>,
    /// libvirt domain type (`kvm`, `qemu`); the simulated hypervisor always gets `test`.
    pub domain_type: String,
}

/// A domain's power state, in libvirt's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainStatus {
    pub uuid: String,
    pub state: String,
    pub running: bool,
}

/// The libvirt driver.
#[derive(Default)]
pub struct Driver {
    connections: Mutex<HashMap<String, Arc<Connect>>>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

/// Checks that `uri` has a scheme capstan supports.
pub fn check_uri(uri: &str) -> Result<(), DriverError> {
    let scheme = uri.split_once("://").map(|(s, _)| s).unwrap_or_default();
    if SCHEMES.contains(&scheme) {
        Ok(())
    } else {
        Err(DriverError::UnknownScheme {
            uri: uri.to_owned(),
        })
    }
}

/// Whether `uri` names libvirt's simulated hypervisor.
pub fn is_simulated(uri: &str) -> bool {
    uri.starts_with("test://")
}

fn libvirt(
    verb: &'static str,
    what: impl Into<String>,
    uri: &str,
) -> impl FnOnce(virt::error::Error) -> DriverError {
    let (what, uri) = (what.into(), uri.to_owned());
    move |error| DriverError::Libvirt {
        verb,
        what,
        uri,
        message: error.message().to_owned(),
    }
}

fn is_code(error: &virt::error::Error, code: ErrorNumber) -> bool {
    matches!(error.code(), virt::enumutil::Enum::Known(c) if c == code)
}

fn not_found(error: &virt::error::Error) -> bool {
    is_code(error, ErrorNumber::NoDomain)
        || is_code(error, ErrorNumber::NoStorageVolume)
        || is_code(error, ErrorNumber::NoStoragePool)
}

fn state_name(state: DomainState) -> &'static str {
    match state {
        DomainState::Running => "running",
        DomainState::Blocked => "blocked",
        DomainState::Paused => "paused",
        DomainState::Shutdown => "shutting down",
        DomainState::Shutoff => "shut off",
        DomainState::Crashed => "crashed",
        DomainState::PMSuspended => "suspended",
        DomainState::NoState => "no state",
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// The volume XML of `config`.
pub fn volume_xml(config: &VolumeConfig) -> String {
    let backing = config
        .backing
        .as_ref()
        .map_or_else(String::new, |(path, format)| {
            format!(
                "<backingStore><path>{}</path><format type='{}'/></backingStore>",
                xml_escape(path),
                xml_escape(format)
            )
        });
    format!(
        "<volume><name>{}</name><capacity unit='bytes'>{}</capacity><target><format type='{}'/></target>{backing}</volume>",
        xml_escape(&config.name),
        config.capacity_bytes,
        xml_escape(&config.format),
    )
}

/// The domain XML of `config` with libvirt domain type `domain_type` (`kvm`, `qemu` for software
/// emulation, `test` on the simulated hypervisor).
pub fn domain_xml(config: &DomainConfig, domain_type: &str) -> String {
    let mut devices = String::new();
    for disk in &config.disks {
        devices.push_str(&format!(
            "<disk type='file' device='disk'><driver name='qemu' type='{}'/><source file='{}'/><target dev='{}' bus='virtio'/>{}</disk>",
            xml_escape(&disk.format),
            xml_escape(&disk.path),
            xml_escape(&disk.target),
            if disk.read_only { "<readonly/>" } else { "" }
        ));
    }
    for nic in &config.nics {
        let source = match &nic.source {
            NicSource::Network(name) => {
                format!(
                    "<interface type='network'><source network='{}'/>",
                    xml_escape(name)
                )
            }
            NicSource::Bridge(name) => {
                format!(
                    "<interface type='bridge'><source bridge='{}'/>",
                    xml_escape(name)
                )
            }
            NicSource::User => "<interface type='user'>".to_owned(),
        };
        devices.push_str(&format!(
            "{source}<mac address='{}'/><model type='virtio'/></interface>",
            xml_escape(&nic.mac)
        ));
    }
    let log = config
        .console_log
        .as_ref()
        .map_or_else(String::new, |path| {
            format!("<log file='{}' append='on'/>", xml_escape(path))
        });
    devices.push_str(&format!(
        "<serial type='pty'>{log}<target port='0'/></serial><console type='pty'><target type='serial' port='0'/></console>"
    ));
    let kib = config.memory_bytes / 1024;
    format!(
        "<domain type='{domain_type}'><name>{}</name><uuid>{}</uuid><memory unit='KiB'>{kib}</memory><vcpu>{}</vcpu>\
<os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os><features><acpi/></features>\
<on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>\
<devices>{devices}</devices></domain>",
        xml_escape(&config.name),
        xml_escape(&config.uuid),
        config.vcpus,
    )
}

impl Driver {
    pub fn new() -> Arc<Self> {
        static QUIET: Once = Once::new();
        // libvirt prints every error to stderr by default; they are returned instead.
        QUIET.call_once(virt::error::clear_error_callback);
        Arc::new(Self::default())
    }

    /// The process's driver: one connection per hypervisor, whoever asks.
    pub fn shared() -> Arc<Self> {
        static SHARED: std::sync::OnceLock<Arc<Driver>> = std::sync::OnceLock::new();
        SHARED.get_or_init(Self::new).clone()
    }

    fn connection(&self, uri: &str) -> Result<Arc<Connect>, DriverError> {
        check_uri(uri)?;
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(connection) = connections.get(uri)
            && connection.is_alive().unwrap_or(false)
        {
            return Ok(connection.clone());
        }
        connections.remove(uri);
        let connection = Connect::open(Some(uri)).map_err(|error| {
            if is_code(&error, ErrorNumber::AuthFailed) {
                DriverError::AuthFailed {
                    uri: uri.to_owned(),
                }
            } else {
                DriverError::Unreachable {
                    uri: uri.to_owned(),
                    message: error.message().to_owned(),
                }
            }
        })?;
        let connection = Arc::new(connection);
        connections.insert(uri.to_owned(), connection.clone());
        Ok(connection)
    }

    /// Forgets the connection to `uri` (after an error that may mean it broke).
    fn forget(&self, uri: &str) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uri);
    }

    async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        uri: &str,
        work: impl FnOnce(&Connect, &str) -> Result<T, DriverError> + Send + 'static,
    ) -> Result<T, DriverError> {
        let driver = self.clone();
        let uri = uri.to_owned();
        tokio::task::spawn_blocking(move || {
            let connection = driver.connection(&uri)?;
            let result = work(&connection, &uri);
            if result.is_err() && !connection.is_alive().unwrap_or(false) {
                driver.forget(&uri);
            }
            result
        })
        .await
        .map_err(DriverError::Worker)?
    }

    /// The hypervisor's CPUs and memory, what its domains take, and the free space in `pool`.
    pub async fn capacity(
        self: &Arc<Self>,
        uri: &str,
        pool: &str,
    ) -> Result<Capacity, DriverError> {
        let pool = pool.to_owned();
        self.run(uri, move |connection, uri| {
            let node = connection.node_info().map_err(libvirt(
                "reading node info of",
                "the hypervisor",
                uri,
            ))?;
            let mut capacity = Capacity {
                cpus: node.cpus,
                memory_bytes: node.memory.saturating_mul(1024),
                ..Capacity::default()
            };
            for domain in connection
                .list_all_domains(0)
                .map_err(libvirt("listing", "domains", uri))?
            {
                if let Ok(name) = domain.name() {
                    capacity.domains.insert(name);
                }
                if let Ok(info) = domain.info() {
                    capacity.used_vcpus = capacity.used_vcpus.saturating_add(info.nr_virt_cpu);
                    // The memory a domain has now (its maximum can exceed the host's).
                    capacity.used_memory_bytes = capacity
                        .used_memory_bytes
                        .saturating_add(info.memory.saturating_mul(1024));
                }
            }
            let pool = lookup_pool(connection, uri, &pool)?;
            let info = pool.info().map_err(libvirt("reading", "the pool", uri))?;
            capacity.pool_available_bytes = info.available;
            for volume in
                pool.list_all_volumes(0)
                    .map_err(libvirt("listing", "the pool's volumes", uri))?
            {
                if let (Ok(name), Ok(info)) = (volume.name(), volume.info()) {
                    capacity.volumes.insert(name, info.capacity);
                }
            }
            Ok(capacity)
        })
        .await
    }

    /// The volume `config.name` in `config.pool`: found, or created with `content`.
    pub async fn ensure_volume(
        self: &Arc<Self>,
        uri: &str,
        config: VolumeConfig,
        content: Content,
    ) -> Result<Written, DriverError> {
        self.run(uri, move |connection, uri| {
            let pool = lookup_pool(connection, uri, &config.pool)?;
            let what = format!("volume {}/{}", config.pool, config.name);
            match pool.lookup_storage_vol_by_name(&config.name) {
                Ok(volume) => {
                    let path = volume.path().map_err(libvirt("reading", &what, uri))?;
                    return Ok(Written::Existing { path });
                }
                Err(error) if not_found(&error) => {}
                Err(error) => return Err(libvirt("looking up", what, uri)(error)),
            }
            let bytes = match content {
                Content::Empty => None,
                Content::Bytes(bytes) => Some(bytes),
                Content::File(path) => {
                    Some(std::fs::read(&path).map_err(|source| DriverError::Read {
                        path: path.display().to_string(),
                        source,
                    })?)
                }
            };
            let volume = StorageVol::create_xml(&pool, &volume_xml(&config), 0)
                .map_err(libvirt("creating", &what, uri))?;
            let path = volume.path().map_err(libvirt("reading", &what, uri))?;
            let Some(bytes) = bytes else {
                return Ok(Written::Created { path });
            };
            match upload(connection, &volume, &bytes) {
                Ok(()) => Ok(Written::Created { path }),
                Err(error) if is_code(&error, ErrorNumber::NoSupport) && is_simulated(uri) => {
                    Ok(Written::Simulated { path })
                }
                Err(error) => {
                    // Never leave a volume without its content behind: the next pass creates it anew.
                    let _ = volume.delete(0);
                    Err(libvirt("uploading", what, uri)(error))
                }
            }
        })
        .await
    }

    /// Removes volume `name` from `pool`; gone already is fine.
    pub async fn delete_volume(
        self: &Arc<Self>,
        uri: &str,
        pool: &str,
        name: &str,
    ) -> Result<(), DriverError> {
        let (pool, name) = (pool.to_owned(), name.to_owned());
        self.run(uri, move |connection, uri| {
            let pool_object = match connection.lookup_storage_pool_by_name(&pool) {
                Ok(p) => p,
                Err(error) if not_found(&error) => return Ok(()),
                Err(error) => {
                    return Err(libvirt("looking up", format!("pool {pool}"), uri)(error));
                }
            };
            let what = format!("volume {pool}/{name}");
            match pool_object.lookup_storage_vol_by_name(&name) {
                Ok(volume) => volume.delete(0).map_err(libvirt("deleting", what, uri)),
                Err(error) if not_found(&error) => Ok(()),
                Err(error) => Err(libvirt("looking up", what, uri)(error)),
            }
        })
        .await
    }

    /// The names of the volumes in `pool` starting with `prefix`.
    pub async fn volumes(
        self: &Arc<Self>,
        uri: &str,
        pool: &str,
        prefix: &str,
    ) -> Result<Vec<String>, DriverError> {
        let (pool, prefix) = (pool.to_owned(), prefix.to_owned());
        self.run(uri, move |connection, uri| {
            let pool_object = lookup_pool(connection, uri, &pool)?;
            let _ = pool_object.refresh(0);
            let mut names: Vec<String> = pool_object
                .list_volumes()
                .map_err(libvirt("listing", format!("volumes of pool {pool}"), uri))?
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .collect();
            names.sort();
            Ok(names)
        })
        .await
    }

    /// Domain `config.name`: defined if absent, started if not running. A domain of that name
    /// with another UUID is not capstan's: refused.
    pub async fn ensure_domain(
        self: &Arc<Self>,
        uri: &str,
        config: DomainConfig,
    ) -> Result<DomainStatus, DriverError> {
        self.run(uri, move |connection, uri| {
            let what = format!("domain {}", config.name);
            let domain = match connection.lookup_domain_by_name(&config.name) {
                Ok(domain) => domain,
                Err(error) if not_found(&error) => {
                    let domain_type = if is_simulated(uri) {
                        "test"
                    } else {
                        config.domain_type.as_str()
                    };
                    connection
                        .define_domain_xml(&domain_xml(&config, domain_type))
                        .map_err(libvirt("defining", &what, uri))?
                }
                Err(error) => return Err(libvirt("looking up", what, uri)(error)),
            };
            let uuid = domain.uuid_string().map_err(libvirt("reading", &what, uri))?;
            if !uuid.eq_ignore_ascii_case(&config.uuid) {
                return Err(DriverError::Libvirt {
                    verb: "adopting",
                    what,
                    uri: uri.to_owned(),
                    message: format!(
                        "a domain of that name exists with UUID {uuid}, not {}; it is not this machine's: rename or remove it",
                        config.uuid
                    ),
                });
            }
            if !domain.is_active().map_err(libvirt("reading", &what, uri))? {
                domain.create().map_err(libvirt("starting", &what, uri))?;
            }
            status(&domain, uri, &what)
        })
        .await
    }

    /// Domain `name`'s status, `None` when there is none.
    pub async fn domain(
        self: &Arc<Self>,
        uri: &str,
        name: &str,
    ) -> Result<Option<DomainStatus>, DriverError> {
        let name = name.to_owned();
        self.run(uri, move |connection, uri| {
            let what = format!("domain {name}");
            match connection.lookup_domain_by_name(&name) {
                Ok(domain) => status(&domain, uri, &what).map(Some),
                Err(error) if not_found(&error) => Ok(None),
                Err(error) => Err(libvirt("looking up", what, uri)(error)),
            }
        })
        .await
    }

    /// Powers domain `name` on or off (hard); absent is an error.
    pub async fn set_power(
        self: &Arc<Self>,
        uri: &str,
        name: &str,
        on: bool,
    ) -> Result<(), DriverError> {
        let name = name.to_owned();
        self.run(uri, move |connection, uri| {
            let what = format!("domain {name}");
            let domain = connection.lookup_domain_by_name(&name).map_err(libvirt(
                "looking up",
                &what,
                uri,
            ))?;
            let active = domain.is_active().map_err(libvirt("reading", &what, uri))?;
            match (on, active) {
                (true, false) => domain.create().map_err(libvirt("starting", what, uri)),
                (false, true) => domain.destroy().map_err(libvirt("stopping", what, uri)),
                _ => Ok(()),
            }
        })
        .await
    }

    /// Stops and undefines domain `name`; gone already is fine.
    pub async fn delete_domain(self: &Arc<Self>, uri: &str, name: &str) -> Result<(), DriverError> {
        let name = name.to_owned();
        self.run(uri, move |connection, uri| {
            let what = format!("domain {name}");
            let domain = match connection.lookup_domain_by_name(&name) {
                Ok(domain) => domain,
                Err(error) if not_found(&error) => return Ok(()),
                Err(error) => return Err(libvirt("looking up", what, uri)(error)),
            };
            if domain.is_active().map_err(libvirt("reading", &what, uri))? {
                match domain.destroy() {
                    Ok(()) => {}
                    Err(error) if is_code(&error, ErrorNumber::OperationInvalid) => {}
                    Err(error) => return Err(libvirt("stopping", what, uri)(error)),
                }
            }
            match domain.undefine() {
                Ok(()) => Ok(()),
                Err(error) if not_found(&error) => Ok(()),
                Err(error) => Err(libvirt("undefining", what, uri)(error)),
            }
        })
        .await
    }

    /// The names of the domains starting with `prefix`.
    pub async fn domains(
        self: &Arc<Self>,
        uri: &str,
        prefix: &str,
    ) -> Result<Vec<String>, DriverError> {
        let prefix = prefix.to_owned();
        self.run(uri, move |connection, uri| {
            let mut names: Vec<String> = connection
                .list_all_domains(0)
                .map_err(libvirt("listing", "domains", uri))?
                .iter()
                .filter_map(|d| d.name().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect();
            names.sort();
            Ok(names)
        })
        .await
    }
}

fn lookup_pool(connection: &Connect, uri: &str, pool: &str) -> Result<StoragePool, DriverError> {
    let found = connection
        .lookup_storage_pool_by_name(pool)
        .map_err(|error| {
            if not_found(&error) {
                DriverError::NoPool {
                    uri: uri.to_owned(),
                    pool: pool.to_owned(),
                }
            } else {
                libvirt("looking up", format!("pool {pool}"), uri)(error)
            }
        })?;
    if !found.is_active().unwrap_or(false) {
        found
            .create(0)
            .map_err(libvirt("starting", format!("pool {pool}"), uri))?;
    }
    Ok(found)
}

fn status(domain: &Domain, uri: &str, what: &str) -> Result<DomainStatus, DriverError> {
    let uuid = domain
        .uuid_string()
        .map_err(libvirt("reading", what, uri))?;
    let (state, _) = domain
        .state()
        .map_err(libvirt("reading the state of", what, uri))?;
    let state = state.unwrap_or(DomainState::NoState);
    Ok(DomainStatus {
        uuid,
        state: state_name(state).to_owned(),
        running: state == DomainState::Running,
    })
}

fn upload(
    connection: &Connect,
    volume: &StorageVol,
    bytes: &[u8],
) -> Result<(), virt::error::Error> {
    let stream = Stream::new(connection, 0)?;
    volume.upload(&stream, 0, bytes.len() as u64, 0)?;
    let mut sent = 0;
    while sent < bytes.len() {
        let chunk = &bytes[sent..bytes.len().min(sent + (1 << 20))];
        let written = stream.send(chunk)?;
        sent += usize::try_from(written)
            .unwrap_or(0)
            .max(1)
            .min(chunk.len());
    }
    stream.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_by_scheme() {
        for good in [
            "qemu:///system",
            "qemu+ssh://root@hv1/system",
            "qemu+tls://hv1/system",
            "test:///default",
        ] {
            assert!(check_uri(good).is_ok(), "{good}");
        }
        for bad in ["vbox:///session", "hv1", "", "http://hv1"] {
            let error = check_uri(bad)
                .map(|()| String::new())
                .unwrap_or_else(|e| e.to_string());
            assert!(error.contains("unknown scheme"), "{bad}: {error}");
        }
    }

    #[test]
    fn domain_xml_escapes_and_carries_every_device() {
        let xml = domain_xml(
            &DomainConfig {
                name: "capstan-a<b".into(),
                uuid: "u".into(),
                vcpus: 2,
                memory_bytes: 1 << 30,
                disks: vec![
                    DiskConfig {
                        path: "/p/root.qcow2".into(),
                        format: "qcow2".into(),
                        target: "vda".into(),
                        read_only: false,
                    },
                    DiskConfig {
                        path: "/p/cidata.iso".into(),
                        format: "raw".into(),
                        target: "sda".into(),
                        read_only: true,
                    },
                ],
                nics: vec![NicConfig {
                    source: NicSource::Network("default".into()),
                    mac: "52:54:00:00:00:01".into(),
                }],
                console_log: Some("/var/log/x.log".into()),
                domain_type: "qemu".into(),
            },
            "qemu",
        );
        assert!(xml.contains("<name>capstan-a&lt;b</name>"), "{xml}");
        assert!(xml.contains("<memory unit='KiB'>1048576</memory>"));
        assert!(xml.contains("<target dev='sda' bus='virtio'/><readonly/>"));
        assert!(xml.contains("target dev='vda' bus='virtio'/></disk>"));
        assert!(xml.contains("<mac address='52:54:00:00:00:01'/>"));
        assert!(xml.contains("<log file='/var/log/x.log'"));
    }
}
