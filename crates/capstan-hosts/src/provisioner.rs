//! The provisioner: coarse, idempotent verbs the host state machine calls, each answering where the
//! operation stands ([`Progress`]) rather than waiting for it.
//!
//! [`VirtualMediaProvisioner`] is the one implementation. It drives the host's BMC (a
//! [`capstan_drivers::Bmc`], Redfish or fake) and, for inspection, deployment and cleaning, an
//! agent booted from virtual media: a session is persisted in a Secret owned by the host (token,
//! media id, operation, whether the host was booted), registered with the [`AgentRegistry`], and
//! the agent's heartbeats say how far it got. Because the session is persisted before the host is
//! booted and the boot is recorded once done, a restart of capstan in the middle of an operation
//! neither boots the host a second time nor starts the operation over: the agent keeps going and
//! reports to the new process.
//!
//! Who runs the agent is injected ([`AgentLauncher`]): the host itself ([`HostBoots`]), or for
//! `fake://` BMCs in demos and scale tests an in-process agent
//! ([`crate::simulated_agent::SimulatedAgents`]) answering through the same registry, so they run
//! every line of this module but the HTTP hop.

use crate::agent_server::{AgentRegistry, HostKey, SessionSpec};
use capstan_drivers::{Bmc, BmcError, BootDevice, Outcome, PowerState};
use capstan_model::agent::{
    CleanCommand, CleanMode, Command, DeployCommand, Heartbeat, StepKind, StepPhase, StepReport,
};
use capstan_model::metal3::{BareMetalHost, HardwareDetails, RootDeviceHints};
use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use rand::RngCore;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Label on the Secrets that hold agent sessions.
pub const SESSION_LABEL: &str = "capstan.io/agent-session";
/// How long a booted host gets to have its agent call back.
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// How long a running step may go without a heartbeat.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How soon to look again while an agent works.
const POLL: Duration = Duration::from_secs(2);
/// How soon to look again after a power change was requested.
const POWER_POLL: Duration = Duration::from_secs(1);

/// Where an operation stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress<T = ()> {
    /// Finished.
    Done(T),
    /// Under way: look again after `requeue`. `note` says what is happening, for status.
    Busy {
        requeue: Duration,
        note: Option<String>,
    },
    /// Failed; the message says what went wrong and what to do. The next call starts afresh.
    Failed(String),
}

impl<T> Progress<T> {
    fn busy(requeue: Duration) -> Self {
        Self::Busy {
            requeue,
            note: None,
        }
    }
}

/// Why a verb could not tell where its operation stands (the API server failed us); retried by
/// the controller's requeue.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionerError {
    #[error("{action} the agent session Secret {namespace}/{name}")]
    Session {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("the agent session Secret {namespace}/{name} is malformed: {reason}")]
    MalformedSession {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// What to deploy.
#[derive(Clone, Debug)]
pub struct DeployRequest {
    pub image_url: String,
    pub checksum: capstan_model::agent::ImageChecksum,
    pub format: capstan_model::agent::ImageFormat,
    pub root_device_hints: Option<RootDeviceHints>,
    /// The host's config drive (ISO 9660, `config-2`).
    pub config_drive: Option<Arc<Vec<u8>>>,
}

/// The verbs of a host's lifecycle. Every verb is idempotent: calling it again while its operation
/// runs only reports progress.
pub trait Provisioner: Send + Sync {
    /// Checks that the BMC answers to the credentials.
    fn validate_management_access(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>>;
    /// Inspects the host with the agent.
    fn inspect(&self) -> BoxFuture<'_, Result<Progress<HardwareDetails>, ProvisionerError>>;
    /// Writes an image and config drive with the agent, then boots the host from its disk (or
    /// leaves it off when `power_on` is false).
    fn provision<'a>(
        &'a self,
        request: &'a DeployRequest,
        power_on: bool,
    ) -> BoxFuture<'a, Result<Progress, ProvisionerError>>;
    /// Cleans the disk with the agent (when `clean`), then powers the host off.
    fn deprovision(&self, clean: bool) -> BoxFuture<'_, Result<Progress, ProvisionerError>>;
    /// Brings the host's power to `on`.
    fn set_power(&self, on: bool) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>>;
    /// Reads whether the host is powered on.
    fn power_state(&self) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>>;
    /// Gives back what the host holds: its agent session and virtual media.
    fn release(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>>;
}

/// What runs the agent of a host booted into its media. For a real host that is the host itself
/// ([`HostBoots`]: it boots the media and its agent calls the provisioning server); demos and
/// scale tests inject [`crate::simulated_agent::SimulatedAgents`], which plays the agent
/// in-process through the same registry. The provisioner knows only this trait.
pub trait AgentLauncher: Send + Sync + std::fmt::Debug {
    /// Called once `session`'s host was booted into the agent's media, and again when a process
    /// finds a booted session it did not start (capstan restarted while the agent ran).
    fn booted<'a>(
        &'a self,
        registry: &'a Arc<AgentRegistry>,
        session: &'a SessionSpec,
        bmc: &'a dyn Bmc,
    ) -> BoxFuture<'a, ()>;
}

/// Real hosts: the booted host runs the agent, which calls back; nothing to start here.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostBoots;

impl AgentLauncher for HostBoots {
    fn booted<'a>(
        &'a self,
        _registry: &'a Arc<AgentRegistry>,
        _session: &'a SessionSpec,
        _bmc: &'a dyn Bmc,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// The persisted state of one agent operation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SessionRecord {
    operation: String,
    kind: StepKind,
    token: String,
    media_id: String,
    booted: bool,
    /// The operation ended and the host was set to boot as asked; kept for deploys and cleanings
    /// until the state machine moves on, so a restart in between does not run them again.
    finished: bool,
}

/// A provisioner for one host.
pub struct VirtualMediaProvisioner {
    bmc: Box<dyn Bmc>,
    host: HostKey,
    owner: OwnerReference,
    client: Client,
    registry: Arc<AgentRegistry>,
    launcher: Arc<dyn AgentLauncher>,
    boot_timeout: Duration,
}

fn random_id(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn bmc_failure<T>(action: &str, err: &BmcError) -> Progress<T> {
    Progress::Failed(format!("{action}: {err}"))
}

impl VirtualMediaProvisioner {
    pub fn new(
        bmc: Box<dyn Bmc>,
        host: &BareMetalHost,
        client: Client,
        registry: Arc<AgentRegistry>,
        launcher: Arc<dyn AgentLauncher>,
        boot_timeout: Duration,
    ) -> Self {
        let owner = OwnerReference {
            api_version: "metal3.io/v1alpha1".into(),
            kind: "BareMetalHost".into(),
            name: host.name_any(),
            uid: host.meta().uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        Self {
            bmc,
            host: HostKey {
                namespace: host.namespace().unwrap_or_default(),
                name: host.name_any(),
            },
            owner,
            client,
            registry,
            launcher,
            boot_timeout,
        }
    }

    fn session_name(&self) -> String {
        format!("{}-agent-session", self.host.name)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.host.namespace)
    }

    fn session_error(&self, action: &'static str, source: kube::Error) -> ProvisionerError {
        ProvisionerError::Session {
            action,
            namespace: self.host.namespace.clone(),
            name: self.session_name(),
            source: Box::new(source),
        }
    }

    async fn load_session(&self) -> Result<Option<SessionRecord>, ProvisionerError> {
        let Some(secret) = self
            .secrets()
            .get_opt(&self.session_name())
            .await
            .map_err(|e| self.session_error("reading", e))?
        else {
            return Ok(None);
        };
        let data = secret.data.unwrap_or_default();
        let field = |key: &str| -> Result<String, ProvisionerError> {
            data.get(key)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| ProvisionerError::MalformedSession {
                    namespace: self.host.namespace.clone(),
                    name: self.session_name(),
                    reason: format!("no {key}"),
                })
        };
        let kind = match field("kind")?.as_str() {
            "inspect" => StepKind::Inspect,
            "deploy" => StepKind::Deploy,
            "clean" => StepKind::Clean,
            other => {
                return Err(ProvisionerError::MalformedSession {
                    namespace: self.host.namespace.clone(),
                    name: self.session_name(),
                    reason: format!("unknown kind {other:?}"),
                });
            }
        };
        Ok(Some(SessionRecord {
            operation: field("operation")?,
            kind,
            token: field("token")?,
            media_id: field("mediaId")?,
            booted: field("booted")? == "true",
            finished: data.get("finished").is_some_and(|v| v.0 == b"true"),
        }))
    }

    fn session_secret(&self, record: &SessionRecord) -> Secret {
        let kind = match record.kind {
            StepKind::Inspect => "inspect",
            StepKind::Deploy => "deploy",
            StepKind::Clean => "clean",
        };
        let data: BTreeMap<String, ByteString> = [
            ("operation", record.operation.as_str()),
            ("kind", kind),
            ("token", record.token.as_str()),
            ("mediaId", record.media_id.as_str()),
            ("booted", if record.booted { "true" } else { "false" }),
            ("finished", if record.finished { "true" } else { "false" }),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(self.session_name()),
                namespace: Some(self.host.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    SESSION_LABEL.to_owned(),
                    self.host.name.clone(),
                )])),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Secret::default()
        }
    }

    async fn save_session(
        &self,
        record: &SessionRecord,
        create: bool,
    ) -> Result<(), ProvisionerError> {
        let secret = self.session_secret(record);
        if create {
            self.delete_session().await?;
            self.secrets()
                .create(&PostParams::default(), &secret)
                .await
                .map_err(|e| self.session_error("creating", e))?;
        } else {
            self.secrets()
                .replace(&self.session_name(), &PostParams::default(), &secret)
                .await
                .map_err(|e| self.session_error("updating", e))?;
        }
        Ok(())
    }

    async fn delete_session(&self) -> Result<(), ProvisionerError> {
        match self
            .secrets()
            .delete(&self.session_name(), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(self.session_error("deleting", e)),
        }
    }

    fn spec_for(
        &self,
        record: &SessionRecord,
        command: Command,
        config_drive: Option<Arc<Vec<u8>>>,
    ) -> SessionSpec {
        SessionSpec {
            host: self.host.clone(),
            token: record.token.clone(),
            media_id: record.media_id.clone(),
            command,
            config_drive,
        }
    }

    /// Runs one agent operation of `kind` to its end: creates the session, boots the host into
    /// the agent, follows its heartbeats. `make_command` builds the command for an operation id.
    async fn run_agent_operation(
        &self,
        kind: StepKind,
        make_command: impl Fn(String) -> Command,
        config_drive: Option<Arc<Vec<u8>>>,
    ) -> Result<Progress<Heartbeat>, ProvisionerError> {
        let record = match self.load_session().await? {
            Some(record) if record.kind == kind && !record.finished => record,
            _ => {
                // A new operation: persist it before anything is booted, so a restart finds it.
                let record = SessionRecord {
                    operation: format!("{}-{}", step_name(kind), random_id(6)),
                    kind,
                    token: random_id(24),
                    media_id: random_id(16),
                    booted: false,
                    finished: false,
                };
                self.save_session(&record, true).await?;
                record
            }
        };
        let command = make_command(record.operation.clone());
        let spec = self.spec_for(&record, command, config_drive);
        // A booted session this process does not know: capstan restarted while the agent ran.
        let resumed = record.booted && !self.registry.has_session(&self.host, &record.token);
        self.registry.register(spec.clone());
        if resumed {
            // A real agent keeps going and reports to the new process; a simulated one lived in
            // the old process and is started again.
            self.launcher
                .booted(&self.registry, &spec, &*self.bmc)
                .await;
        }
        if !record.booted {
            if let Some(progress) = self.boot_into_agent(&record).await {
                return Ok(progress);
            }
            let booted = SessionRecord {
                booted: true,
                ..record.clone()
            };
            self.save_session(&booted, false).await?;
            self.launcher
                .booted(&self.registry, &spec, &*self.bmc)
                .await;
            return Ok(Progress::Busy {
                requeue: POLL,
                note: Some(format!("{}: booting the agent", step_name(kind))),
            });
        }
        let Some((registered_for, last)) = self.registry.latest(&self.host) else {
            return Ok(Progress::busy(POLL));
        };
        let Some(last) = last else {
            if registered_for > self.boot_timeout {
                self.forget_operation().await?;
                return Ok(Progress::Failed(format!(
                    "the agent did not call back within {} s of booting: check the host's console \
                     and that it reaches the provisioning server at {}",
                    self.boot_timeout.as_secs(),
                    self.registry.settings().agent_url
                )));
            }
            return Ok(Progress::Busy {
                requeue: POLL,
                note: Some(format!("{}: waiting for the agent", step_name(kind))),
            });
        };
        if last.received.elapsed() > HEARTBEAT_TIMEOUT {
            self.forget_operation().await?;
            return Ok(Progress::Failed(format!(
                "the agent stopped calling back ({} s without a heartbeat)",
                last.received.elapsed().as_secs()
            )));
        }
        match &last.heartbeat.step {
            Some(step) if step.operation == record.operation => match step.phase {
                StepPhase::Succeeded => Ok(Progress::Done(last.heartbeat.clone())),
                StepPhase::Failed => {
                    self.forget_operation().await?;
                    Ok(Progress::Failed(
                        step.error
                            .clone()
                            .unwrap_or_else(|| "the agent reported a failure".into()),
                    ))
                }
                StepPhase::Running => Ok(Progress::Busy {
                    requeue: POLL,
                    note: Some(describe_step(step)),
                }),
            },
            _ => Ok(Progress::Busy {
                requeue: POLL,
                note: Some(format!("{}: the agent is starting", step_name(kind))),
            }),
        }
    }

    /// Inserts the session's boot media and boots the host from it once. `Some` when the BMC
    /// failed.
    async fn boot_into_agent(&self, record: &SessionRecord) -> Option<Progress<Heartbeat>> {
        // Virtual media and boot overrides take effect at a cold boot (a reset keeps, on many
        // BMCs and in libvirt, the old devices), so a running host is powered off first.
        if let Err(progress) = self.ensure_off("to boot the agent").await {
            return Some(progress);
        }
        let url = self.registry.media_url(&record.media_id);
        if let Err(err) = self.bmc.insert_virtual_media(&url).await {
            return Some(bmc_failure("inserting the agent's boot media", &err));
        }
        if let Err(err) = self.bmc.set_one_time_boot(BootDevice::Cd).await {
            return Some(bmc_failure(
                "setting a one-time boot from virtual media",
                &err,
            ));
        }
        if let Err(err) = self.bmc.set_power(true).await {
            return Some(bmc_failure("booting the agent", &err));
        }
        tracing::info!(host = %self.host, operation = %record.operation, "booted into the agent");
        None
    }

    /// `Ok` once the host is off; otherwise asks for it and says to come back.
    async fn ensure_off<T>(&self, why: &str) -> Result<(), Progress<T>> {
        match self.bmc.power_state().await {
            Ok(PowerState::Off) => Ok(()),
            Ok(PowerState::PoweringOff) => Err(Progress::Busy {
                requeue: POWER_POLL,
                note: Some(format!("powering off {why}")),
            }),
            Ok(_) => match self.bmc.set_power(false).await {
                Ok(_) => Err(Progress::Busy {
                    requeue: POWER_POLL,
                    note: Some(format!("powering off {why}")),
                }),
                Err(err) => Err(bmc_failure("powering off", &err)),
            },
            Err(err) => Err(bmc_failure("reading the power state", &err)),
        }
    }

    /// Ends the current operation: its session is forgotten, its media ejected.
    async fn forget_operation(&self) -> Result<(), ProvisionerError> {
        self.registry.release(&self.host);
        self.delete_session().await
    }

    /// After an agent operation: eject, then set the power as asked. `Done` once both hold.
    async fn finish(
        &self,
        kind: Option<StepKind>,
        boot_disk: bool,
        power_on: bool,
    ) -> Result<Progress, ProvisionerError> {
        // The session is forgotten last: until then a retry finds the agent's result again.
        // Media and boot device change while the host is off, for the same reason as in
        // `boot_into_agent`.
        if let Err(progress) = self.ensure_off("to leave the agent").await {
            return Ok(progress);
        }
        if let Err(err) = self.bmc.eject_virtual_media().await {
            return Ok(bmc_failure("ejecting the agent's boot media", &err));
        }
        if power_on {
            if boot_disk && let Err(err) = self.bmc.set_one_time_boot(BootDevice::Hdd).await {
                return Ok(bmc_failure("setting a one-time boot from disk", &err));
            }
            if let Err(err) = self.bmc.set_power(true).await {
                return Ok(bmc_failure("powering on", &err));
            }
        }
        self.registry.release(&self.host);
        match (kind, self.load_session().await?) {
            (Some(StepKind::Deploy | StepKind::Clean), Some(record))
                if Some(record.kind) == kind =>
            {
                let finished = SessionRecord {
                    finished: true,
                    ..record
                };
                self.save_session(&finished, false).await?;
            }
            _ => self.delete_session().await?,
        }
        Ok(Progress::Done(()))
    }

    /// Whether the last operation of `kind` finished (and the host was set to boot as asked).
    async fn finished(&self, kind: StepKind) -> Result<bool, ProvisionerError> {
        Ok(self
            .load_session()
            .await?
            .is_some_and(|r| r.kind == kind && r.finished))
    }
}

fn step_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Inspect => "inspect",
        StepKind::Deploy => "deploy",
        StepKind::Clean => "clean",
    }
}

fn describe_step(step: &StepReport) -> String {
    let kind = step_name(step.kind);
    match &step.progress {
        Some(p) => match p.bytes_total {
            Some(total) if total > 0 => format!(
                "{kind}: {} {}% ({} of {} MiB)",
                p.stage,
                p.bytes_done.saturating_mul(100) / total,
                p.bytes_done >> 20,
                total >> 20
            ),
            _ if p.bytes_done > 0 => format!("{kind}: {} ({} MiB)", p.stage, p.bytes_done >> 20),
            _ => format!("{kind}: {}", p.stage),
        },
        None => format!("{kind}: running"),
    }
}

impl Provisioner for VirtualMediaProvisioner {
    fn validate_management_access(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        Box::pin(async move {
            Ok(match self.bmc.power_state().await {
                Ok(_) => Progress::Done(()),
                Err(err) => Progress::Failed(format!("the BMC refused or did not answer: {err}")),
            })
        })
    }

    fn inspect(&self) -> BoxFuture<'_, Result<Progress<HardwareDetails>, ProvisionerError>> {
        Box::pin(async move {
            match self
                .run_agent_operation(
                    StepKind::Inspect,
                    |operation| Command::Inspect { operation },
                    None,
                )
                .await?
            {
                Progress::Done(heartbeat) => {
                    let Some(hardware) = heartbeat.hardware else {
                        self.forget_operation().await?;
                        return Ok(Progress::Failed(
                            "the agent finished inspecting but sent no hardware".into(),
                        ));
                    };
                    Ok(
                        match self.finish(Some(StepKind::Inspect), false, false).await? {
                            Progress::Done(()) => Progress::Done(hardware),
                            Progress::Busy { requeue, note } => Progress::Busy { requeue, note },
                            Progress::Failed(m) => Progress::Failed(m),
                        },
                    )
                }
                Progress::Busy { requeue, note } => Ok(Progress::Busy { requeue, note }),
                Progress::Failed(m) => Ok(Progress::Failed(m)),
            }
        })
    }

    fn provision<'a>(
        &'a self,
        request: &'a DeployRequest,
        power_on: bool,
    ) -> BoxFuture<'a, Result<Progress, ProvisionerError>> {
        Box::pin(async move {
            if self.finished(StepKind::Deploy).await? {
                return Ok(Progress::Done(()));
            }
            let make = |operation: String| {
                Command::Deploy(DeployCommand {
                    operation,
                    image_url: request.image_url.clone(),
                    checksum: request.checksum.clone(),
                    format: request.format,
                    root_device_hints: request.root_device_hints.clone(),
                    config_drive: request.config_drive.is_some(),
                })
            };
            match self
                .run_agent_operation(StepKind::Deploy, make, request.config_drive.clone())
                .await?
            {
                Progress::Done(_) => self.finish(Some(StepKind::Deploy), true, power_on).await,
                Progress::Busy { requeue, note } => Ok(Progress::Busy { requeue, note }),
                Progress::Failed(m) => {
                    // A failed write must not leave the host running the ramdisk with its media in.
                    let _ = self.bmc.eject_virtual_media().await;
                    let _ = self.bmc.set_power(false).await;
                    Ok(Progress::Failed(m))
                }
            }
        })
    }

    fn deprovision(&self, clean: bool) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        Box::pin(async move {
            if !clean {
                // Also forgets a finished deploy, so the next provisioning writes afresh.
                return self.finish(None, false, false).await;
            }
            if self.finished(StepKind::Clean).await? {
                return Ok(Progress::Done(()));
            }
            let make = |operation: String| {
                Command::Clean(CleanCommand {
                    operation,
                    mode: CleanMode::Metadata,
                    root_device_hints: None,
                })
            };
            match self
                .run_agent_operation(StepKind::Clean, make, None)
                .await?
            {
                Progress::Done(_) => self.finish(Some(StepKind::Clean), false, false).await,
                Progress::Busy { requeue, note } => Ok(Progress::Busy { requeue, note }),
                Progress::Failed(m) => Ok(Progress::Failed(m)),
            }
        })
    }

    fn set_power(&self, on: bool) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>> {
        Box::pin(async move {
            let state = match self.bmc.power_state().await {
                Ok(state) => state,
                Err(err) => return Ok(bmc_failure("reading the power state", &err)),
            };
            let is_on = matches!(state, PowerState::On);
            if is_on == on && matches!(state, PowerState::On | PowerState::Off) {
                return Ok(Progress::Done(on));
            }
            Ok(match self.bmc.set_power(on).await {
                Ok(Outcome::Requested | Outcome::Unchanged) => Progress::Busy {
                    requeue: POWER_POLL,
                    note: Some(format!("powering {}", if on { "on" } else { "off" })),
                },
                Err(err) => bmc_failure(if on { "powering on" } else { "powering off" }, &err),
            })
        })
    }

    fn power_state(&self) -> BoxFuture<'_, Result<Progress<bool>, ProvisionerError>> {
        Box::pin(async move {
            Ok(match self.bmc.power_state().await {
                Ok(state) => {
                    Progress::Done(matches!(state, PowerState::On | PowerState::PoweringOff))
                }
                Err(err) => bmc_failure("reading the power state", &err),
            })
        })
    }

    fn release(&self) -> BoxFuture<'_, Result<Progress, ProvisionerError>> {
        Box::pin(async move {
            self.forget_operation().await?;
            Ok(match self.bmc.eject_virtual_media().await {
                Ok(_) => Progress::Done(()),
                Err(err) => bmc_failure("ejecting virtual media", &err),
            })
        })
    }
}
