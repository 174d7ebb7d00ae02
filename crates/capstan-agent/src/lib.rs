//! capstan's agent: runs in the provisioning ramdisk, inspects the host, writes images and config
//! drives, cleans disks — whatever capstan's answer to its last heartbeat says.
//!
//! - [`http`]: a small blocking HTTP client.
//! - [`inspect`]: hardware from `/proc` and `/sys`.
//! - [`disk`]: root device hints, partition tables, the config-drive partition, cleaning.
//! - [`qcow2`]: qcow2 to raw.
//! - [`deploy`]: image download, digest, write.
//! - [`checksum`]: the digest from a checksum file, when the image's checksum is a URL.
//!
//! [`Agent::run`] is the whole life of the agent: heartbeat, start the commanded step in a worker
//! thread if its operation is new, report how it goes, repeat. The protocol is in
//! [`capstan_model::agent`].

pub mod checksum;
pub mod deploy;
pub mod disk;
pub mod http;
pub mod inspect;
pub mod qcow2;

use capstan_model::agent::{
    CONFIG_DRIVE_PATH, Command, HEARTBEAT_PATH, Heartbeat, HeartbeatResponse, ImageChecksum,
    Progress, StepKind, StepPhase, StepReport,
};
use capstan_model::metal3::{HardwareDetails, RootDeviceHints};
use inspect::SystemRoot;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The agent's version, reported with every heartbeat.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the agent talks to and what it works on.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Base URL of the provisioning server.
    pub url: String,
    /// The bearer token. Never printed.
    pub token: String,
    /// `/` on a host; a fake tree in tests.
    pub system: SystemRoot,
    /// Where device nodes are (`/dev`); a directory of files in tests.
    pub dev: PathBuf,
    /// Stop after this many heartbeats (tests); `None`: for ever.
    pub max_heartbeats: Option<u64>,
}

#[derive(Default)]
struct State {
    hardware: Option<HardwareDetails>,
    step: Option<StepReport>,
    started: HashSet<String>,
}

/// The agent.
pub struct Agent {
    config: AgentConfig,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Agent {
    pub fn new(config: AgentConfig) -> Self {
        Self {
            config,
            state: Arc::default(),
        }
    }

    /// Heartbeats until `max_heartbeats` (or for ever), starting commanded steps.
    pub fn run(&self) {
        let mut beats = 0u64;
        let mut failures = 0u32;
        loop {
            let interval = match self.heartbeat() {
                Ok(response) => {
                    if failures > 0 {
                        println!("capstan-agent: reached {} again", self.config.url);
                    }
                    failures = 0;
                    self.start(response.command);
                    Duration::from_secs(u64::from(response.heartbeat_seconds.clamp(1, 60)))
                }
                Err(message) => {
                    failures += 1;
                    // Log the first failure and then every tenth, not every few seconds.
                    if failures == 1 || failures.is_multiple_of(10) {
                        println!(
                            "capstan-agent: heartbeat to {} failed ({failures}x): {message}",
                            self.config.url
                        );
                    }
                    Duration::from_secs(u64::from(failures.min(5)))
                }
            };
            beats += 1;
            if self.config.max_heartbeats.is_some_and(|m| beats >= m) {
                return;
            }
            // The heartbeat cadence itself: the agent has nothing else to wait on.
            std::thread::sleep(interval);
        }
    }

    fn heartbeat(&self) -> Result<HeartbeatResponse, String> {
        let beat = {
            let state = lock(&self.state);
            Heartbeat {
                agent_version: VERSION.into(),
                hardware: state.hardware.clone(),
                step: state.step.clone(),
            }
        };
        let url = http::Url::join(&self.config.url, HEARTBEAT_PATH).map_err(|e| e.to_string())?;
        let body = serde_json::to_vec(&beat).map_err(|e| e.to_string())?;
        let auth = format!("Bearer {}", self.config.token);
        let response = http::request(
            "POST",
            &url,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            Some(&body),
            Duration::from_secs(20),
        )
        .map_err(|e| error_chain(&e))?;
        if response.status != 200 {
            return Err(format!("HTTP {}", response.status));
        }
        let bytes = response.bytes(1 << 20).map_err(|e| error_chain(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("bad response: {e}"))
    }

    /// Starts the command's step in a worker thread, unless its operation already ran.
    fn start(&self, command: Command) {
        let Some(operation) = command.operation().map(str::to_owned) else {
            return;
        };
        let kind = match &command {
            Command::Inspect { .. } => StepKind::Inspect,
            Command::Deploy(_) => StepKind::Deploy,
            Command::Clean(_) => StepKind::Clean,
            Command::Wait => return,
        };
        {
            let mut state = lock(&self.state);
            if !state.started.insert(operation.clone()) {
                return;
            }
            state.step = Some(StepReport {
                operation: operation.clone(),
                kind,
                phase: StepPhase::Running,
                progress: None,
                error: None,
            });
        }
        println!("capstan-agent: starting {} {operation}", step_name(kind));
        let state = self.state.clone();
        let config = self.config.clone();
        std::thread::spawn(move || {
            let report = {
                let state = state.clone();
                let operation = operation.clone();
                let last_percent = Mutex::new(u64::MAX);
                move |progress: Progress| {
                    if let Some(total) = progress.bytes_total.filter(|t| *t > 0) {
                        let percent = progress.bytes_done * 100 / total;
                        let mut last = last_percent.lock().unwrap_or_else(|p| p.into_inner());
                        if *last == u64::MAX
                            || percent >= *last + 10
                            || percent == 100 && *last != 100
                        {
                            println!(
                                "capstan-agent: {} {percent}% ({} MiB)",
                                progress.stage,
                                progress.bytes_done >> 20
                            );
                            *last = percent;
                        }
                    }
                    let mut s = lock(&state);
                    if let Some(step) = s.step.as_mut().filter(|s| s.operation == operation) {
                        step.progress = Some(progress);
                    }
                }
            };
            let result = match &command {
                Command::Inspect { .. } => {
                    let hardware = inspect::inspect(&config.system);
                    lock(&state).hardware = Some(hardware);
                    Ok(())
                }
                Command::Deploy(deploy) => run_deploy(&config, deploy, &report),
                Command::Clean(clean) => {
                    run_clean(&config, clean.root_device_hints.as_ref(), &report)
                }
                Command::Wait => Ok(()),
            };
            let mut s = lock(&state);
            if let Some(step) = s.step.as_mut().filter(|s| s.operation == operation) {
                match result {
                    Ok(()) => {
                        println!("capstan-agent: {} {operation} succeeded", step_name(kind));
                        step.phase = StepPhase::Succeeded;
                    }
                    Err(message) => {
                        println!(
                            "capstan-agent: {} {operation} failed: {message}",
                            step_name(kind)
                        );
                        step.phase = StepPhase::Failed;
                        step.error = Some(message);
                    }
                }
            }
        });
    }
}

fn step_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Inspect => "inspect",
        StepKind::Deploy => "deploy",
        StepKind::Clean => "clean",
    }
}

/// An error with its sources, `a: b: c`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn root_device(
    config: &AgentConfig,
    hints: Option<&RootDeviceHints>,
) -> Result<(PathBuf, u64), String> {
    let devices = inspect::block_devices(&config.system);
    let device = disk::choose_root_device(&devices, hints).map_err(|e| error_chain(&e))?;
    println!(
        "capstan-agent: root device /dev/{} ({} GiB)",
        device.name,
        device.size_bytes >> 30
    );
    Ok((config.dev.join(&device.name), device.size_bytes))
}

fn run_deploy(
    config: &AgentConfig,
    deploy: &capstan_model::agent::DeployCommand,
    report: &dyn Fn(Progress),
) -> Result<(), String> {
    let (path, device_bytes) = root_device(config, deploy.root_device_hints.as_ref())?;
    let (checksum, checksum_type) = match &deploy.checksum {
        ImageChecksum::Digest { value, algorithm } => (value.clone(), *algorithm),
        ImageChecksum::Url { url, algorithm } => {
            report(Progress {
                stage: "fetching the checksum file".into(),
                bytes_done: 0,
                bytes_total: None,
            });
            let (digest, algorithm) = checksum::resolve(url, *algorithm, &deploy.image_url)
                .map_err(|e| error_chain(&e))?;
            println!(
                "capstan-agent: {} digest {digest} from {url}",
                algorithm.name()
            );
            (digest, algorithm)
        }
    };
    let job = deploy::DeployJob {
        url: &deploy.image_url,
        checksum: &checksum,
        checksum_type,
        format: deploy.format,
        device_path: &path,
        device_bytes,
    };
    let started = std::time::Instant::now();
    let written = deploy::write_image(&job, report).map_err(|e| error_chain(&e))?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "capstan-agent: image written and verified: {} MiB in {seconds:.1} s ({:.1} MiB/s)",
        written >> 20,
        (written as f64 / 1048576.0) / seconds.max(0.001)
    );
    if deploy.config_drive {
        report(Progress {
            stage: "writing config drive".into(),
            bytes_done: 0,
            bytes_total: None,
        });
        let iso = fetch_config_drive(config)?;
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        let first =
            disk::write_config_drive(&mut file, &path.display().to_string(), device_bytes, &iso)
                .map_err(|e| error_chain(&e))?;
        println!("capstan-agent: config drive written at sector {first}");
    }
    Ok(())
}

/// How long the agent keeps asking for the config drive while capstan is unreachable or restarting:
/// the image is already on disk, and failing here would make capstan deploy it all over again.
const CONFIG_DRIVE_PATIENCE: Duration = Duration::from_secs(300);

/// The host's config drive from capstan, retried (backing off up to 10 s) while the server is
/// unreachable, restarting (`401` before it has reloaded its sessions) or failing (`5xx`).
fn fetch_config_drive(config: &AgentConfig) -> Result<Vec<u8>, String> {
    let url = http::Url::join(&config.url, CONFIG_DRIVE_PATH).map_err(|e| e.to_string())?;
    let auth = format!("Bearer {}", config.token);
    let deadline = std::time::Instant::now() + CONFIG_DRIVE_PATIENCE;
    let mut wait = Duration::from_secs(1);
    loop {
        let (error, transient) = match http::request(
            "GET",
            &url,
            &[("Authorization", &auth)],
            None,
            Duration::from_secs(30),
        ) {
            Ok(response) if response.status == 200 => match response.bytes(64 << 20) {
                Ok(iso) => return Ok(iso),
                Err(e) => (error_chain(&e), true),
            },
            Ok(response) => (
                format!("HTTP {}", response.status),
                response.status == 401 || response.status >= 500,
            ),
            Err(e) => (error_chain(&e), true),
        };
        if !transient || std::time::Instant::now() + wait > deadline {
            return Err(format!("fetching the config drive: {error}"));
        }
        println!(
            "capstan-agent: fetching the config drive: {error}; retrying in {} s",
            wait.as_secs()
        );
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

fn run_clean(
    config: &AgentConfig,
    hints: Option<&RootDeviceHints>,
    report: &dyn Fn(Progress),
) -> Result<(), String> {
    // Metadata cleaning covers every disk, not only the root device: a stale table anywhere can
    // confuse the next deployment's root device choice or boot order.
    let _ = hints;
    for device in inspect::block_devices(&config.system) {
        let path = config.dev.join(&device.name);
        report(Progress {
            stage: format!("cleaning /dev/{}", device.name),
            bytes_done: 0,
            bytes_total: None,
        });
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        disk::clean_metadata(&mut file, &path.display().to_string(), device.size_bytes)
            .map_err(|e| error_chain(&e))?;
        println!("capstan-agent: cleaned /dev/{}", device.name);
    }
    Ok(())
}
