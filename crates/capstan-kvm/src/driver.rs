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
    // libvirt's simulated hypervisor behind a remote libvirtd (tests of authentication).
    "test+tcp",
    "test+tls",
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
        "hypervisor {uri} refused the credentials: check the Secret named by credentialsSecretRef{hint}"
    )]
    AuthFailed { uri: String, hint: &'static str },
    #[error(
        "hypervisor {uri}: ssh could not verify the hypervisor's host key ({problem}): put its host key (the output of `ssh-keyscan -p PORT HOST`) under known_hosts in the Secret named by credentialsSecretRef, or in the known_hosts of the user capstan runs as"
    )]
    HostKeyUnverified { uri: String, problem: &'static str },
    #[error(
        "hypervisor {uri}: the URI's own command= parameter cannot be combined with a known_hosts in the Secret named by credentialsSecretRef: drop one of them"
    )]
    KnownHostsWithCommand { uri: String },
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
    #[error("writing the hypervisor's credentials to {path}")]
    Credentials {
        path: String,
        source: std::io::Error,
    },
    #[error("{what} on {uri}: its content was not kept (see the reason given for the image)")]
    ContentRejected { what: String, uri: String },
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
#[derive(Debug, Default)]
pub enum Content {
    /// Nothing (a blank disk, or an overlay).
    #[default]
    Empty,
    /// These bytes.
    Bytes(Vec<u8>),
    /// This local file's bytes.
    File(std::path::PathBuf),
    /// Chunks as they arrive (an image being downloaded and verified): the volume is kept only
    /// when the sender ends with [`Chunk::Done`].
    Stream(tokio::sync::mpsc::Receiver<Chunk>),
}

/// One message of a [`Content::Stream`].
#[derive(Debug)]
pub enum Chunk {
    /// More of the content.
    Data(bytes::Bytes),
    /// All of it, verified: keep the volume.
    Done,
    /// The content is not to be kept (its digest did not match, the download broke); the sender
    /// knows why. A stream that ends without `Done` counts as this.
    Failed,
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

/// How capstan authenticates to a hypervisor, from the Secret its `credentialsSecretRef` names.
/// Never printed: `Debug` shows which parts are present, not their values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// SASL (qemu+tcp, qemu+tls) or libssh user name (`username`).
    pub username: Option<String>,
    /// Its password (`password`).
    pub password: Option<String>,
    /// TLS client certificate, its key and the CA that signed the hypervisor's certificate
    /// (`tls.crt`, `tls.key`, `ca.crt`; PEM), for `qemu+tls://`.
    pub client_certificate: Option<String>,
    pub client_key: Option<String>,
    pub ca_certificate: Option<String>,
    /// An ssh private key (`ssh-privatekey`), for `qemu+ssh://`.
    pub ssh_private_key: Option<String>,
    /// The hypervisor's ssh host keys (`known_hosts`, lines of ssh's known_hosts format), for
    /// `qemu+ssh://`: when given, the only keys the hypervisor may show.
    pub ssh_known_hosts: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username.is_some())
            .field("password", &self.password.is_some())
            .field("client_certificate", &self.client_certificate.is_some())
            .field("client_key", &self.client_key.is_some())
            .field("ca_certificate", &self.ca_certificate.is_some())
            .field("ssh_private_key", &self.ssh_private_key.is_some())
            .field("ssh_known_hosts", &self.ssh_known_hosts.is_some())
            .finish()
    }
}

impl Credentials {
    /// From a Secret's data (`username`, `password`, `tls.crt`, `tls.key`, `ca.crt`,
    /// `ssh-privatekey`, `known_hosts`); keys that are absent stay unset.
    pub fn from_secret_data(data: &std::collections::BTreeMap<String, Vec<u8>>) -> Self {
        let text = |key: &str| {
            data.get(key)
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                .filter(|value| !value.is_empty())
        };
        Self {
            username: text("username"),
            password: text("password"),
            client_certificate: text("tls.crt"),
            client_key: text("tls.key"),
            ca_certificate: text("ca.crt"),
            ssh_private_key: text("ssh-privatekey"),
            ssh_known_hosts: text("known_hosts"),
        }
    }

    /// A digest of everything in it, to notice a changed Secret without keeping a second copy.
    fn fingerprint(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        for part in [
            &self.username,
            &self.password,
            &self.client_certificate,
            &self.client_key,
            &self.ca_certificate,
            &self.ssh_private_key,
            &self.ssh_known_hosts,
        ] {
            match part {
                Some(value) => {
                    hash.update([1]);
                    hash.update((value.len() as u64).to_le_bytes());
                    hash.update(value.as_bytes());
                }
                None => hash.update([0]),
            }
        }
        hash.finalize().into()
    }
}

thread_local! {
    /// The user name and password libvirt's auth callback answers with, set on the thread that
    /// opens a connection for exactly as long as the open takes (libvirt calls back on that
    /// thread; the callback is a plain function, so it cannot carry them itself).
    static ANSWERS: std::cell::RefCell<Option<(String, String)>> = const { std::cell::RefCell::new(None) };
}

/// libvirt's question for credentials: user names from the Secret's `username`, secrets from its
/// `password`; what is not there is left unanswered, so libvirt refuses rather than guesses.
#[allow(clippy::ptr_arg)] // The signature virt's callback type requires.
fn answer_credentials(questions: &mut Vec<virt::connect::ConnectCredential>) {
    use virt::connect::ConnectCredentialType as Asked;
    ANSWERS.with(|answers| {
        let answers = answers.borrow();
        for question in questions.iter_mut() {
            question.result = match (question.typed, answers.as_ref()) {
                (Asked::UserName | Asked::AuthName | Asked::EchoPrompt, Some((user, _))) => {
                    Some(user.clone())
                }
                (Asked::Passphrase | Asked::NoEchoPrompt, Some((_, password))) => {
                    Some(password.clone())
                }
                (Asked::Realm, _) => Some(question.def_result.clone()),
                _ => None,
            };
        }
    });
}

/// An open connection and the credentials it was opened with.
struct Open {
    connection: Arc<Connect>,
    fingerprint: Option<[u8; 32]>,
}

/// The libvirt driver.
#[derive(Default)]
pub struct Driver {
    connections: Mutex<HashMap<String, Open>>,
    /// Credentials by hypervisor URI, from [`Driver::set_credentials`].
    credentials: Mutex<HashMap<String, Credentials>>,
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
    uri.starts_with("test://") || uri.starts_with("test+")
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

    /// Authenticates to `uri` with `credentials` from now on (`None`: as the user capstan runs
    /// as, with its ssh keys and `/etc/pki/libvirt`). A change reopens the connection.
    pub fn set_credentials(&self, uri: &str, credentials: Option<Credentials>) {
        let mut all = self.credentials.lock().unwrap_or_else(|p| p.into_inner());
        match credentials {
            Some(credentials) => all.insert(uri.to_owned(), credentials),
            None => all.remove(uri),
        };
    }

    fn connection(&self, uri: &str) -> Result<Arc<Connect>, DriverError> {
        check_uri(uri)?;
        let credentials = self
            .credentials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uri)
            .cloned();
        let fingerprint = credentials.as_ref().map(Credentials::fingerprint);
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = connections.get(uri)
            && open.fingerprint == fingerprint
            && open.connection.is_alive().unwrap_or(false)
        {
            return Ok(open.connection.clone());
        }
        connections.remove(uri);
        let connection = match &credentials {
            // ssh always without a terminal: a prompt would wait for ever.
            None if is_ssh(uri) => open_authenticated(uri, &Credentials::default())?,
            None => Connect::open(Some(uri)).map_err(|error| open_error(uri, &error))?,
            Some(credentials) => open_authenticated(uri, credentials)?,
        };
        let connection = Arc::new(connection);
        connections.insert(
            uri.to_owned(),
            Open {
                connection: connection.clone(),
                fingerprint,
            },
        );
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
        self.write_volume(uri, config, content, false).await
    }

    /// The volume `config.name` in `config.pool` created anew with `content`, whatever was there
    /// (a medium an interrupted pass may have left half written; never one a domain uses).
    pub async fn replace_volume(
        self: &Arc<Self>,
        uri: &str,
        config: VolumeConfig,
        content: Content,
    ) -> Result<Written, DriverError> {
        self.write_volume(uri, config, content, true).await
    }

    async fn write_volume(
        self: &Arc<Self>,
        uri: &str,
        config: VolumeConfig,
        content: Content,
        replace: bool,
    ) -> Result<Written, DriverError> {
        self.run(uri, move |connection, uri| {
            let pool = lookup_pool(connection, uri, &config.pool)?;
            let what = format!("volume {}/{}", config.pool, config.name);
            match pool.lookup_storage_vol_by_name(&config.name) {
                Ok(volume) if replace => {
                    volume.delete(0).map_err(libvirt("replacing", &what, uri))?;
                }
                Ok(volume) => {
                    let path = volume.path().map_err(libvirt("reading", &what, uri))?;
                    return Ok(Written::Existing { path });
                }
                Err(error) if not_found(&error) => {}
                Err(error) => return Err(libvirt("looking up", what, uri)(error)),
            }
            let mut source = match content {
                Content::Empty => {
                    return create(&pool, &config, uri, &what)
                        .map(|(_, path)| Written::Created { path });
                }
                Content::Bytes(bytes) => Source::Bytes(bytes),
                Content::File(path) => {
                    Source::Bytes(std::fs::read(&path).map_err(|source| DriverError::Read {
                        path: path.display().to_string(),
                        source,
                    })?)
                }
                Content::Stream(receiver) => Source::Stream(receiver),
            };
            let (volume, path) = create(&pool, &config, uri, &what)?;
            match upload(connection, &volume, config.capacity_bytes, &mut source) {
                Ok(()) => Ok(Written::Created { path }),
                Err(Upload::Libvirt(error))
                    if is_code(&error, ErrorNumber::NoSupport) && is_simulated(uri) =>
                {
                    // No data path: the content is still read to its end (a stream is verified
                    // as it goes) and only kept when it was whole.
                    if source.drain() {
                        Ok(Written::Simulated { path })
                    } else {
                        let _ = volume.delete(0);
                        Err(DriverError::ContentRejected {
                            what,
                            uri: uri.to_owned(),
                        })
                    }
                }
                Err(failure) => {
                    // Never leave a volume without its content behind: the next pass creates it anew.
                    let _ = volume.delete(0);
                    Err(match failure {
                        Upload::Libvirt(error) => libvirt("uploading", what, uri)(error),
                        Upload::Rejected => DriverError::ContentRejected {
                            what,
                            uri: uri.to_owned(),
                        },
                    })
                }
            }
        })
        .await
    }

    /// The `sha256` or `sha512` digest (hex) of volume `name`'s content, read over libvirt's
    /// stream API; `None` when the hypervisor cannot send it (the simulated one has no data path)
    /// or the volume is not there.
    pub async fn volume_digest(
        self: &Arc<Self>,
        uri: &str,
        pool: &str,
        name: &str,
        algorithm: &str,
    ) -> Result<Option<String>, DriverError> {
        use sha2::Digest;
        let (pool, name, algorithm) = (pool.to_owned(), name.to_owned(), algorithm.to_owned());
        self.run(uri, move |connection, uri| {
            let pool_object = lookup_pool(connection, uri, &pool)?;
            let what = format!("volume {pool}/{name}");
            let volume = match pool_object.lookup_storage_vol_by_name(&name) {
                Ok(volume) => volume,
                Err(error) if not_found(&error) => return Ok(None),
                Err(error) => return Err(libvirt("looking up", what, uri)(error)),
            };
            let stream = Stream::new(connection, 0).map_err(libvirt("reading", &what, uri))?;
            match volume.download(&stream, 0, 0, 0) {
                Ok(()) => {}
                Err(error) if is_code(&error, ErrorNumber::NoSupport) => return Ok(None),
                Err(error) => return Err(libvirt("reading", what, uri)(error)),
            }
            let mut sha256 = sha2::Sha256::new();
            let mut sha512 = sha2::Sha512::new();
            let mut buffer = vec![0u8; 1 << 20];
            loop {
                let read = match stream.recv(&mut buffer) {
                    Ok(read) => read,
                    Err(error) => {
                        let _ = stream.abort();
                        return Err(libvirt("reading", what, uri)(error));
                    }
                };
                let Ok(read) = usize::try_from(read) else {
                    let _ = stream.abort();
                    return Err(DriverError::Libvirt {
                        verb: "reading",
                        what,
                        uri: uri.to_owned(),
                        message: "the stream failed".into(),
                    });
                };
                if read == 0 {
                    break;
                }
                let chunk = &buffer[..read.min(buffer.len())];
                if algorithm == "sha512" {
                    sha512.update(chunk);
                } else {
                    sha256.update(chunk);
                }
            }
            stream.finish().map_err(libvirt("reading", &what, uri))?;
            let digest: Vec<u8> = if algorithm == "sha512" {
                sha512.finalize().to_vec()
            } else {
                sha256.finalize().to_vec()
            };
            Ok(Some(digest.iter().map(|b| format!("{b:02x}")).collect()))
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

fn open_error(uri: &str, error: &virt::error::Error) -> DriverError {
    let message = error.message();
    if is_code(error, ErrorNumber::AuthFailed) || is_code(error, ErrorNumber::AuthCancelled) {
        return DriverError::AuthFailed {
            uri: uri.to_owned(),
            hint: "",
        };
    }
    ssh_refusal(uri, message).unwrap_or_else(|| DriverError::Unreachable {
        uri: uri.to_owned(),
        message: message.to_owned(),
    })
}

/// What ssh said when it refused a `+ssh` connection (libvirt passes its stderr on in the
/// error's message): a host key it could not verify, or a key the hypervisor does not accept.
fn ssh_refusal(uri: &str, message: &str) -> Option<DriverError> {
    if !is_ssh(uri) {
        return None;
    }
    if message.contains("Host key verification failed") {
        let problem = if message.contains("IDENTIFICATION HAS CHANGED") {
            "it differs from the one recorded: make sure the hypervisor was reinstalled and is not impersonated before recording the new one"
        } else {
            "no key is recorded for it"
        };
        return Some(DriverError::HostKeyUnverified {
            uri: uri.to_owned(),
            problem,
        });
    }
    if message.contains("Permission denied") {
        return Some(DriverError::AuthFailed {
            uri: uri.to_owned(),
            hint: " (ssh refused its ssh-privatekey: its public key must be in the authorized_keys of the URI's user on the hypervisor)",
        });
    }
    None
}

/// Whether `uri` reaches its hypervisor through libvirt's ssh transport.
fn is_ssh(uri: &str) -> bool {
    uri.split_once("://")
        .is_some_and(|(scheme, _)| scheme.ends_with("+ssh"))
}

/// Whether `uri`'s query sets `name`.
fn has_parameter(uri: &str, name: &str) -> bool {
    uri.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.split_once('=').map_or(pair, |(key, _)| key) == name)
    })
}

/// An `ssh` that checks the hypervisor's host key against `known_hosts` only and refuses any
/// other (libvirt runs the URI's `command` with ssh's own arguments; ssh takes the first value
/// of an option, so these win over a `no_verify=1` in the URI).
fn ssh_checking_against(known_hosts: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\nexec ssh -o 'UserKnownHostsFile={}' -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o CheckHostIP=no \"$@\"\n",
        known_hosts.display()
    )
}

/// Writes `content` to `path`, readable by its owner only (keys, certificates).
fn write_private(path: &std::path::Path, content: &str) -> Result<(), DriverError> {
    write_with_mode(path, content, 0o600)
}

fn write_with_mode(path: &std::path::Path, content: &str, mode: u32) -> Result<(), DriverError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(content.as_bytes()))
        .map_err(|source| DriverError::Credentials {
            path: path.display().to_string(),
            source,
        })
}

/// `text` ending with a newline (ssh refuses a key file without one).
fn with_final_newline(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

/// `uri` with `name=value` added to its query.
fn with_parameter(uri: &str, name: &str, value: &str) -> String {
    let separator = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{separator}{name}={value}")
}

/// Opens `uri` with `credentials`: TLS client certificates and ssh keys are written to a private
/// directory that exists only while the connection is opened (libvirt reads them then), named by
/// the URI's `pkipath` / `keyfile`; user name and password answer libvirt's SASL questions.
fn open_authenticated(uri: &str, credentials: &Credentials) -> Result<Connect, DriverError> {
    use virt::connect::{ConnectAuth, ConnectCredentialType as Asked};
    let scheme = uri.split_once("://").map(|(s, _)| s).unwrap_or_default();
    let files = tempfile::Builder::new()
        .prefix("capstan-libvirt-")
        .tempdir()
        .map_err(|source| DriverError::Credentials {
            path: std::env::temp_dir().display().to_string(),
            source,
        })?;
    let mut effective = uri.to_owned();
    if scheme.ends_with("+tls")
        && let (Some(certificate), Some(key)) =
            (&credentials.client_certificate, &credentials.client_key)
    {
        write_private(&files.path().join("clientcert.pem"), certificate)?;
        write_private(&files.path().join("clientkey.pem"), key)?;
        if let Some(ca) = &credentials.ca_certificate {
            write_private(&files.path().join("cacert.pem"), ca)?;
        }
        effective = with_parameter(&effective, "pkipath", &files.path().display().to_string());
    }
    if is_ssh(uri) {
        if let Some(key) = &credentials.ssh_private_key {
            let path = files.path().join("id");
            write_private(&path, &with_final_newline(key))?;
            effective = with_parameter(&effective, "keyfile", &path.display().to_string());
        }
        if let Some(known_hosts) = &credentials.ssh_known_hosts {
            if has_parameter(uri, "command") {
                return Err(DriverError::KnownHostsWithCommand {
                    uri: uri.to_owned(),
                });
            }
            let known_hosts_path = files.path().join("known_hosts");
            write_private(&known_hosts_path, &with_final_newline(known_hosts))?;
            let ssh = files.path().join("ssh");
            write_with_mode(&ssh, &ssh_checking_against(&known_hosts_path), 0o700)?;
            effective = with_parameter(&effective, "command", &ssh.display().to_string());
        }
        // Never a prompt: an unknown host key or a refused key fails instead of waiting.
        if !has_parameter(uri, "no_tty") {
            effective = with_parameter(&effective, "no_tty", "1");
        }
    }
    let answers = credentials
        .username
        .clone()
        .map(|user| (user, credentials.password.clone().unwrap_or_default()));
    ANSWERS.with(|slot| *slot.borrow_mut() = answers);
    let mut auth = ConnectAuth::new(
        vec![
            Asked::UserName,
            Asked::AuthName,
            Asked::Passphrase,
            Asked::EchoPrompt,
            Asked::NoEchoPrompt,
            Asked::Realm,
        ],
        answer_credentials,
    );
    let opened = Connect::open_auth(Some(&effective), &mut auth, 0);
    ANSWERS.with(|slot| slot.borrow_mut().take());
    drop(files);
    // Errors name the URI as written, never the private paths added to it.
    opened.map_err(|error| open_error(uri, &error))
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

fn create(
    pool: &StoragePool,
    config: &VolumeConfig,
    uri: &str,
    what: &str,
) -> Result<(StorageVol, String), DriverError> {
    let volume = StorageVol::create_xml(pool, &volume_xml(config), 0)
        .map_err(libvirt("creating", what, uri))?;
    let path = volume.path().map_err(libvirt("reading", what, uri))?;
    Ok((volume, path))
}

/// Where an upload's bytes come from.
enum Source {
    Bytes(Vec<u8>),
    Stream(tokio::sync::mpsc::Receiver<Chunk>),
}

impl Source {
    /// Reads a stream to its end; whether it ended with `Done`.
    fn drain(&mut self) -> bool {
        match self {
            Self::Bytes(_) => true,
            Self::Stream(receiver) => loop {
                match receiver.blocking_recv() {
                    Some(Chunk::Data(_)) => {}
                    Some(Chunk::Done) => return true,
                    Some(Chunk::Failed) | None => return false,
                }
            },
        }
    }
}

/// Why an upload stopped.
enum Upload {
    Libvirt(virt::error::Error),
    /// The stream's sender said the content is not to be kept.
    Rejected,
}

fn send_all(stream: &Stream, bytes: &[u8]) -> Result<(), virt::error::Error> {
    let mut sent = 0;
    while sent < bytes.len() {
        let chunk = &bytes[sent..bytes.len().min(sent + (1 << 20))];
        let written = stream.send(chunk)?;
        sent += usize::try_from(written)
            .unwrap_or(0)
            .max(1)
            .min(chunk.len());
    }
    Ok(())
}

fn upload(
    connection: &Connect,
    volume: &StorageVol,
    length: u64,
    source: &mut Source,
) -> Result<(), Upload> {
    let stream = Stream::new(connection, 0).map_err(Upload::Libvirt)?;
    volume
        .upload(&stream, 0, length, 0)
        .map_err(Upload::Libvirt)?;
    let sent = match source {
        Source::Bytes(bytes) => send_all(&stream, bytes).map_err(Upload::Libvirt),
        Source::Stream(receiver) => loop {
            match receiver.blocking_recv() {
                Some(Chunk::Data(bytes)) => {
                    if let Err(error) = send_all(&stream, &bytes) {
                        break Err(Upload::Libvirt(error));
                    }
                }
                Some(Chunk::Done) => break Ok(()),
                Some(Chunk::Failed) | None => break Err(Upload::Rejected),
            }
        },
    };
    match sent {
        Ok(()) => stream.finish().map_err(Upload::Libvirt),
        Err(error) => {
            let _ = stream.abort();
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_refusals_say_what_to_fix() {
        let uri = "qemu+ssh://root@hv1/system";
        let unknown = ssh_refusal(
            uri,
            "Cannot recv data: No ED25519 host key is known for hv1 and you have requested strict checking.\r\nHost key verification failed.: Connection reset by peer",
        );
        assert!(
            matches!(&unknown, Some(DriverError::HostKeyUnverified { problem, .. }) if problem.contains("no key is recorded")),
            "{unknown:?}"
        );
        let changed = ssh_refusal(
            uri,
            "Cannot recv data: @@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@ Host key verification failed.",
        );
        assert!(
            matches!(&changed, Some(DriverError::HostKeyUnverified { problem, .. }) if problem.contains("differs")),
            "{changed:?}"
        );
        let refused = ssh_refusal(
            uri,
            "Cannot recv data: root@hv1: Permission denied (publickey).",
        )
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(refused.contains("authorized_keys"), "{refused}");
        assert!(refused.contains("credentialsSecretRef"), "{refused}");
        // Only ssh's words on an ssh URI are read so.
        assert!(ssh_refusal("qemu+tcp://hv1/system", "Permission denied").is_none());
        assert!(ssh_refusal(uri, "Connection refused").is_none());
    }

    #[test]
    fn query_parameters_are_found_by_name() {
        assert!(has_parameter(
            "qemu+ssh://h/system?no_verify=1&command=x",
            "command"
        ));
        assert!(has_parameter("qemu+ssh://h/system?no_tty", "no_tty"));
        assert!(!has_parameter("qemu+ssh://h/system?commands=x", "command"));
        assert!(!has_parameter("qemu+ssh://h/system", "command"));
    }

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
