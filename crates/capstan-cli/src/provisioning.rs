//! The provisioning server and BareMetalHost controller settings shared by `capstan serve` and
//! `capstan controllers`: where hosts and BMCs reach capstan, the ramdisk, the images directory.

use crate::stderr::errln;
use anyhow::Context;
use capstan_hosts::{AgentRegistry, BootMediaBuilder, HostSettings, ServerSettings};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The provisioning server's address when `--provisioning-listen` is not given.
const DEFAULT_LISTEN: &str = "127.0.0.1:6180";
/// Where it goes when [`DEFAULT_LISTEN`] is taken: a free port on the same address.
const FALLBACK_LISTEN: &str = "127.0.0.1:0";

/// Provisioning flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ProvisioningArgs {
    /// Where the provisioning server listens (plain HTTP: boot media, agent callbacks, images).
    /// Default: 127.0.0.1:6180, or a free port when that one is taken (another `capstan serve`);
    /// the address is printed at start.
    #[arg(long)]
    pub provisioning_listen: Option<SocketAddr>,
    /// Base URL the agent on a host uses to reach the provisioning server (default: the listen
    /// address). From a QEMU guest on user networking this is http://10.0.2.2:PORT.
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<String>,
    /// Base URL BMCs fetch boot media from (default: the listen address).
    #[arg(long, value_name = "URL")]
    pub media_url: Option<String>,
    /// The provisioning ramdisk made by `capstan ramdisk build` (default: DATA_DIR/ramdisk when it
    /// exists). Without one only `fake://` hosts can be inspected and provisioned.
    #[arg(long, value_name = "DIR")]
    pub ramdisk: Option<PathBuf>,
    /// A directory served under /images/ (default: DATA_DIR/images when it exists).
    #[arg(long, value_name = "DIR")]
    pub images_dir: Option<PathBuf>,
    /// A PEM bundle of CAs that HTTPS BMC certificates may chain to, besides the system's (a
    /// host's spec.bmc.disableCertificateVerification skips the check for that host).
    #[arg(long, value_name = "FILE")]
    pub bmc_ca_file: Option<PathBuf>,
    /// How long a booted host's agent has to call back, in seconds.
    #[arg(long, default_value_t = 1200)]
    pub boot_timeout: u64,
    /// Hosts reconciled at once.
    #[arg(long, default_value_t = 16)]
    pub host_concurrency: u16,
    /// How long the simulated agent of a `fake://` host takes per step, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub fake_step_ms: u64,
    /// Run no BareMetalHost controller and no provisioning server.
    #[arg(long)]
    pub no_hosts: bool,
}

/// The ramdisk as a maker of per-host boot ISOs.
#[derive(Debug)]
struct RamdiskMedia(capstan_ramdisk::Ramdisk);

impl BootMediaBuilder for RamdiskMedia {
    fn boot_iso(&self, extra_cmdline: &str) -> Result<Vec<u8>, String> {
        self.0
            .boot_iso(extra_cmdline)
            .map_err(|e| capstan_runtime::controller::ErrorChain(&e).to_string())
    }
}

/// A running provisioning server and the settings of the controller that shares its registry.
pub struct Provisioning {
    pub settings: HostSettings,
    pub url: String,
    /// Where nodes report their bootstrap steps (the same server, as hosts reach it).
    pub report_url: String,
}

/// Starts the provisioning server (until `shutdown`) and returns the host controller settings. The
/// server also takes nodes' bootstrap reports, stored through `management`.
pub async fn start(
    args: &ProvisioningArgs,
    data_dir: Option<&Path>,
    shutdown: capstan_runtime::CancellationToken,
    management: kube::Client,
) -> anyhow::Result<Option<Provisioning>> {
    if args.no_hosts {
        return Ok(None);
    }
    let bmc_trust = match &args.bmc_ca_file {
        Some(path) => capstan_drivers::TrustAnchors::with_bundle(path).context("--bmc-ca-file")?,
        None => capstan_drivers::TrustAnchors::system(),
    };
    let listener = match args.provisioning_listen {
        Some(address) => tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("listening on {address} (--provisioning-listen)"))?,
        None => match tokio::net::TcpListener::bind(DEFAULT_LISTEN).await {
            Ok(listener) => listener,
            Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
                let listener = tokio::net::TcpListener::bind(FALLBACK_LISTEN)
                    .await
                    .with_context(|| format!("listening on {FALLBACK_LISTEN} (provisioning)"))?;
                errln!(
                    "capstan: {DEFAULT_LISTEN} is in use (another capstan serve?); the provisioning server takes {} instead (--provisioning-listen chooses)",
                    listener
                        .local_addr()
                        .map_or_else(|_| "a free port".to_owned(), |a| a.to_string())
                );
                listener
            }
            Err(err) => {
                return Err(err)
                    .with_context(|| format!("listening on {DEFAULT_LISTEN} (provisioning)"));
            }
        },
    };
    let local = listener
        .local_addr()
        .context("reading the provisioning address")?;
    let url = format!("http://{local}");
    let default_dir = |name: &str| data_dir.map(|d| d.join(name)).filter(|d| d.is_dir());
    let ramdisk_dir = args.ramdisk.clone().or_else(|| default_dir("ramdisk"));
    let boot_media: Option<Arc<dyn BootMediaBuilder>> = match &ramdisk_dir {
        Some(dir) => Some(Arc::new(RamdiskMedia(
            capstan_ramdisk::Ramdisk::open(dir)
                .with_context(|| format!("opening the ramdisk in {}", dir.display()))?,
        ))),
        None => None,
    };
    let images_dir = args.images_dir.clone().or_else(|| default_dir("images"));
    let report_url = args.agent_url.clone().unwrap_or_else(|| url.clone());
    let registry = Arc::new(AgentRegistry::new(ServerSettings {
        agent_url: args.agent_url.clone().unwrap_or_else(|| url.clone()),
        media_url: args.media_url.clone().unwrap_or_else(|| url.clone()),
        images_dir,
        boot_media,
    }));
    let router = capstan_hosts::agent_server::router(registry.clone())
        .merge(capstan_controllers::bootstrap_report_router(management));
    // The same timeouts, connection cap and accept back-off as the API server.
    tokio::spawn(capstan_apiserver::conn::serve_plain(
        router,
        listener,
        capstan_apiserver::conn::ConnectionLimits::default(),
        shutdown.cancelled_owned(),
    ));
    let mut settings = HostSettings::new(registry);
    settings.concurrency = args.host_concurrency;
    settings.bmc_trust = bmc_trust;
    settings.boot_timeout = Duration::from_secs(args.boot_timeout);
    settings.fake_bmc_agents = Arc::new(capstan_hosts::simulated_agent::SimulatedAgents::new(
        Duration::from_millis(args.fake_step_ms),
    ));
    Ok(Some(Provisioning {
        settings,
        url,
        report_url,
    }))
}
