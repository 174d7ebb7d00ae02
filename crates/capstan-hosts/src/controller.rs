//! The BareMetalHost reconciler: reads what a pass needs (credentials, the provisioner for the
//! host's BMC, the config drive), runs the state machine once, then writes the outcome — status
//! once, Events for transitions and failures, annotation removals, HardwareData. The finalizer is
//! the controller harness's: deletion runs the same machine in [`Reconciler::cleanup`] until the
//! host is released.
//!
//! [`settle`] (what a step does to the status) and [`operational_status`] are plain functions, so
//! the machine's table tests (`machine/table.rs`, against [`crate::fixture`]) check a whole pass
//! without a server.
//!
//! Failures are counted in `status.errorCount` and retried after an exponential backoff measured
//! from `status.lastUpdated`, so a retry waits its turn even when the status write that recorded the
//! failure wakes the controller at once.

use crate::agent_server::{AgentRegistry, HostKey};
use crate::config_drive::{ConfigDrive, ConfigDriveError, parse_mapping};
use crate::machine::{self, ANNOTATION_PAUSED, Effects, FINALIZER, Pass, Step};
use crate::provisioner::{AgentLauncher, HostBoots, Provisioner, VirtualMediaProvisioner};
use crate::simulated_agent::SimulatedAgents;
use crate::state::{OperationalStatus, ProvisioningState};
use capstan_drivers::{ConnectOptions, Credentials, Driver, TrustAnchors};
use capstan_model::meta::Condition;
use capstan_model::metal3::{
    BareMetalHost, BareMetalHostStatus, HardwareData, HardwareDataSpec, OperationMetric,
};
use capstan_runtime::secrets::SecretCache;
use capstan_runtime::tables::ObjectCaches;
use capstan_runtime::{Action, Cleanup, Context, EventType, Reconciler};
use capstan_runtime::{conditions, patch};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The controller's name (metrics, events, logs).
pub const HOST_CONTROLLER: &str = "baremetalhost";
/// The condition that tells what the host's current operation is doing.
pub const CONDITION_PROGRESS: &str = "OperationProgress";

/// Why a reconcile of a host failed (the API server, not the host, failed us).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{action} {kind} {namespace}/{name}")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("provisioner")]
    Provisioner(#[from] crate::provisioner::ProvisionerError),
    #[error("host has no namespace")]
    NoNamespace,
    #[error("writing the status")]
    Status(#[from] patch::PatchError),
    #[error("serialising the status")]
    Serialise(#[source] Box<serde_json::Error>),
    #[error("the namespace's BMC networks")]
    Networks(#[from] crate::networks::NetworksError),
}

fn api_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> HostError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| HostError::Api {
        action,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// How the controller reaches BMCs and agents.
#[derive(Clone, Debug)]
pub struct HostSettings {
    /// The provisioning server's session registry.
    pub registry: Arc<AgentRegistry>,
    /// Hosts reconciled at once.
    pub concurrency: u16,
    /// The bound on each BMC request.
    pub bmc_timeout: Duration,
    /// The CAs HTTPS BMC certificates are checked against.
    pub bmc_trust: TrustAnchors,
    /// How long a booted host's agent gets to call back.
    pub boot_timeout: Duration,
    /// Who runs the agent of a `fake://` host: by default a [`SimulatedAgents`] answering after
    /// 200 ms; [`HostBoots`] when whoever plays the machine runs a real agent (integration tests
    /// do). Every other BMC's host runs its own agent.
    pub fake_bmc_agents: Arc<dyn AgentLauncher>,
}

impl HostSettings {
    pub fn new(registry: Arc<AgentRegistry>) -> Self {
        Self {
            registry,
            concurrency: 16,
            bmc_timeout: Duration::from_secs(30),
            bmc_trust: TrustAnchors::system(),
            boot_timeout: crate::provisioner::DEFAULT_BOOT_TIMEOUT,
            fake_bmc_agents: Arc::new(SimulatedAgents::new(Duration::from_millis(200))),
        }
    }
}

/// The BareMetalHost controller.
#[derive(Clone, Debug)]
pub struct HostController {
    settings: HostSettings,
}

impl HostController {
    pub fn new(settings: HostSettings) -> Self {
        Self { settings }
    }
}

fn host_key(host: &BareMetalHost) -> HostKey {
    HostKey {
        namespace: host.namespace().unwrap_or_default(),
        name: host.name_any(),
    }
}

/// The credentials of the host's BMC, with the Secret's resourceVersion; `Err` says what is wrong.
async fn read_credentials(
    secrets: &SecretCache,
    host: &BareMetalHost,
    namespace: &str,
) -> Result<Result<(Credentials, Option<String>), String>, HostError> {
    let Some(bmc) = host.spec.bmc.as_ref() else {
        return Ok(Err("spec.bmc is not set".into()));
    };
    if bmc.credentials_name.is_empty() {
        return Ok(Err(
            "spec.bmc.credentialsName is empty: name a Secret with username and password keys"
                .into(),
        ));
    }
    let found = match secrets.get(namespace, &bmc.credentials_name).await {
        // A Secret that cannot be decoded (data that is not base64, stored before the API refused
        // such Secrets): the host says which Secret, never what the decoder saw (it quotes values).
        Err(kube::Error::SerdeError(_)) => {
            return Ok(Err(format!(
                "BMC credentials Secret {namespace}/{} cannot be decoded: every value of its data must be base64 (values not shown)",
                bmc.credentials_name
            )));
        }
        found => found.map_err(api_error(
            "reading",
            "Secret",
            namespace,
            &bmc.credentials_name,
        ))?,
    };
    let Some(secret) = found else {
        return Ok(Err(format!(
            "BMC credentials Secret {namespace}/{} not found: create it with username and password keys",
            bmc.credentials_name
        )));
    };
    let data = secret.data.clone().unwrap_or_default();
    let value = |key: &str| {
        data.get(key)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .map(|v| v.trim_end_matches('\n').to_owned())
            .filter(|v| !v.is_empty())
    };
    match (value("username"), value("password")) {
        (Some(username), Some(password)) => Ok(Ok((
            Credentials::new(username, password),
            secret.metadata.resource_version.clone(),
        ))),
        _ => Ok(Err(format!(
            "BMC credentials Secret {namespace}/{} needs non-empty username and password keys",
            bmc.credentials_name
        ))),
    }
}

/// What a pass can do with the host's BMC.
#[derive(Default)]
struct BmcAccess {
    provisioner: Option<Arc<dyn Provisioner>>,
    /// Why there is no provisioner (bad address, missing credentials, a network not permitted).
    error: Option<String>,
    /// The credentials Secret's resourceVersion, when it was read.
    credentials_version: Option<String>,
    /// The [`crate::networks::CONDITION_BMC_PERMITTED`] condition, when the namespace permits
    /// some networks only.
    permitted: Option<Condition>,
}

impl BmcAccess {
    fn refused(error: String) -> Self {
        Self {
            error: Some(error),
            ..Self::default()
        }
    }
}

impl HostController {
    /// The provisioner for `host`, or why there is none. The namespace's BMC networks are
    /// checked first: a host whose BMC is outside them gets nothing read and nothing sent.
    async fn provisioner_for(
        &self,
        client: &Client,
        secrets: &SecretCache,
        host: &BareMetalHost,
        namespace: &str,
    ) -> Result<BmcAccess, HostError> {
        let Some(bmc) = host.spec.bmc.as_ref().filter(|b| !b.address.is_empty()) else {
            return Ok(BmcAccess::refused("spec.bmc.address is empty".into()));
        };
        let address = match capstan_drivers::BmcAddress::parse(&bmc.address) {
            Ok(address) => address,
            Err(err) => return Ok(BmcAccess::refused(format!("spec.bmc.address: {err}"))),
        };
        let permission = crate::networks::permission(client, namespace, &address).await?;
        if let Some(refusal) = permission.refusal {
            return Ok(BmcAccess {
                permitted: permission.condition,
                ..BmcAccess::refused(refusal)
            });
        }
        let (credentials, version) = match read_credentials(secrets, host, namespace).await? {
            Ok(found) => found,
            Err(message) => {
                return Ok(BmcAccess {
                    permitted: permission.condition,
                    ..BmcAccess::refused(message)
                });
            }
        };
        let options = ConnectOptions {
            disable_certificate_verification: bmc.disable_certificate_verification == Some(true),
            trust: self.settings.bmc_trust.clone(),
            timeout: self.settings.bmc_timeout,
            permitted: permission.networks,
        };
        let driver = match capstan_drivers::connect(&bmc.address, credentials, options) {
            Ok(driver) => driver,
            Err(err) => {
                return Ok(BmcAccess {
                    error: Some(format!("spec.bmc.address: {err}")),
                    credentials_version: version,
                    permitted: permission.condition,
                    provisioner: None,
                });
            }
        };
        let launcher: Arc<dyn AgentLauncher> = match address.driver {
            Driver::Fake => self.settings.fake_bmc_agents.clone(),
            Driver::Redfish => Arc::new(HostBoots),
        };
        let provisioner: Arc<dyn Provisioner> = Arc::new(VirtualMediaProvisioner::new(
            driver,
            host,
            client.clone(),
            self.settings.registry.clone(),
            launcher,
            self.settings.boot_timeout,
        ));
        Ok(BmcAccess {
            provisioner: Some(provisioner),
            error: None,
            credentials_version: version,
            permitted: permission.condition,
        })
    }

    /// The host's config drive from its Secrets.
    async fn config_drive(
        &self,
        secrets: &SecretCache,
        host: &BareMetalHost,
        namespace: &str,
    ) -> Result<Result<Arc<Vec<u8>>, String>, HostError> {
        let read = |field: &'static str, name: Option<String>, keys: &'static [&'static str]| {
            let secrets = secrets.clone();
            let namespace = namespace.to_owned();
            async move {
                let Some(name) = name.filter(|n| !n.is_empty()) else {
                    return Ok::<_, HostError>(Ok(None));
                };
                let Some(secret) = secrets
                    .get(&namespace, &name)
                    .await
                    .map_err(api_error("reading", "Secret", &namespace, &name))?
                else {
                    return Ok(Err(ConfigDriveError::SecretMissing {
                        field,
                        namespace,
                        name,
                    }));
                };
                let data = secret.data.clone().unwrap_or_default();
                match keys.iter().find_map(|k| data.get(*k)) {
                    Some(value) => Ok(Ok(Some(value.0.clone()))),
                    None => Ok(Err(ConfigDriveError::KeyMissing {
                        field,
                        namespace,
                        name,
                        keys: if keys.len() > 1 {
                            "userData (or value)"
                        } else {
                            keys[0]
                        },
                    })),
                }
            }
        };
        let spec = &host.spec;
        let user = read(
            "userData",
            spec.user_data.as_ref().and_then(|r| r.name.clone()),
            &["userData", "value"],
        )
        .await?;
        let network = read(
            "networkData",
            spec.network_data.as_ref().and_then(|r| r.name.clone()),
            &["networkData"],
        )
        .await?;
        let meta = read(
            "metaData",
            spec.meta_data.as_ref().and_then(|r| r.name.clone()),
            &["metaData"],
        )
        .await?;
        let built = (|| -> Result<Vec<u8>, ConfigDriveError> {
            let parse = |field: &'static str,
                         bytes: Vec<u8>,
                         name: Option<String>|
             -> Result<Value, ConfigDriveError> {
                let text = String::from_utf8(bytes).map_err(|_| ConfigDriveError::Invalid {
                    field,
                    namespace: namespace.to_owned(),
                    name: name.clone().unwrap_or_default(),
                    reason: "not UTF-8".into(),
                })?;
                parse_mapping(&text).map_err(|reason| ConfigDriveError::Invalid {
                    field,
                    namespace: namespace.to_owned(),
                    name: name.unwrap_or_default(),
                    reason,
                })
            };
            let meta_extra = match meta? {
                Some(bytes) => Some(parse(
                    "metaData",
                    bytes,
                    spec.meta_data.as_ref().and_then(|r| r.name.clone()),
                )?),
                None => None,
            };
            let network_data = match network? {
                Some(bytes) => Some(parse(
                    "networkData",
                    bytes,
                    spec.network_data.as_ref().and_then(|r| r.name.clone()),
                )?),
                None => None,
            };
            let drive = ConfigDrive {
                meta_data: ConfigDrive::meta_data(
                    host.meta().uid.as_deref().unwrap_or_default(),
                    &host.name_any(),
                    meta_extra.as_ref().and_then(Value::as_object),
                ),
                network_data,
                user_data: user?,
            };
            drive.to_iso()
        })();
        Ok(built
            .map(Arc::new)
            .map_err(|e| capstan_runtime::controller::ErrorChain(&e).to_string()))
    }
}

fn owner_reference(host: &BareMetalHost) -> OwnerReference {
    OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: "BareMetalHost".into(),
        name: host.name_any(),
        uid: host.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn seconds_since(timestamp: Option<&str>) -> Option<i64> {
    let then: jiff::Timestamp = timestamp?.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - then.as_second())
}

impl Reconciler for HostController {
    type Object = BareMetalHost;
    type Error = HostError;

    fn name(&self) -> &'static str {
        HOST_CONTROLLER
    }

    fn concurrency(&self) -> u16 {
        self.settings.concurrency
    }

    /// The BMC credentials and the config drive's Secrets: a changed one re-registers or
    /// re-renders the hosts that name it.
    fn secret_names(&self, host: &BareMetalHost) -> Vec<String> {
        let spec = &host.spec;
        spec.bmc
            .as_ref()
            .map(|b| b.credentials_name.clone())
            .into_iter()
            .chain(spec.user_data.as_ref().and_then(|r| r.name.clone()))
            .chain(spec.network_data.as_ref().and_then(|r| r.name.clone()))
            .chain(spec.meta_data.as_ref().and_then(|r| r.name.clone()))
            .filter(|name| !name.is_empty())
            .collect()
    }

    fn follows_secrets(&self) -> bool {
        true
    }

    /// A Namespace's change (its BMC networks) wakes its hosts.
    fn configure_with_caches(
        &self,
        controller: Controller<BareMetalHost>,
        client: &Client,
        objects: &ObjectCaches,
    ) -> Controller<BareMetalHost> {
        let hosts = objects.store::<BareMetalHost>().reader();
        controller.watches(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            move |namespace: Namespace| {
                let name = namespace.name_any();
                hosts
                    .state()
                    .iter()
                    .filter(|host| host.namespace().as_deref() == Some(name.as_str()))
                    .map(|host| ObjectRef::from_obj(&**host))
                    .collect::<Vec<_>>()
            },
        )
    }

    /// Added before the first pass and removed once deletion has run the machine to
    /// [`Step::Released`]; the host's own deletion states (deprovisioning, powering off) run in
    /// [`Reconciler::cleanup`].
    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// `baremetalhost.metal3.io/paused`: the host is left alone entirely, finalizer included.
    fn paused(&self, host: &BareMetalHost) -> bool {
        host.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_PAUSED))
    }

    async fn reconcile(
        &self,
        host: Arc<BareMetalHost>,
        context: Arc<Context>,
    ) -> Result<Action, HostError> {
        Ok(self.pass(&host, &context).await?.action)
    }

    /// Deletion is the state machine's too: a pass of it per call, until it releases the host.
    async fn cleanup(
        &self,
        host: Arc<BareMetalHost>,
        context: Arc<Context>,
    ) -> Result<Cleanup, HostError> {
        let outcome = self.pass(&host, &context).await?;
        if outcome.released {
            self.settings.registry.release(&host_key(&host));
            return Ok(Cleanup::Done);
        }
        Ok(Cleanup::Pending(outcome.action))
    }
}

/// What one pass concluded.
struct PassOutcome {
    action: Action,
    /// Deletion is complete: the finalizer can go.
    released: bool,
}

/// What a step does to the status, besides what the handler wrote there.
#[derive(Debug, PartialEq)]
pub struct Settled {
    pub status: BareMetalHostStatus,
    pub action: Action,
    /// The state change, for its Event.
    pub transition: Option<(ProvisioningState, ProvisioningState)>,
    /// Warning Events: (reason, note).
    pub warnings: Vec<(&'static str, String)>,
}

/// Applies `step`, decided in `state` on a host whose status was `before`, to the status the
/// handler left (`after`): the new state and operation history on a transition, the error count,
/// type and message on a failure (with the backoff as the requeue), the progress condition.
pub fn settle(
    state: ProvisioningState,
    before: &BareMetalHostStatus,
    mut after: BareMetalHostStatus,
    step: &Step,
    now: &str,
) -> Settled {
    let mut warnings = Vec::new();
    let mut transition = None;
    let action = match step {
        Step::Go(next) => {
            transition = Some((state, *next));
            after.provisioning.state = next.as_str().to_owned();
            clear_error(&mut after, true);
            if let Some(op) = machine::operation_of(state) {
                after
                    .operation_history
                    .entry(op.to_owned())
                    .or_default()
                    .end = Some(now.to_owned());
            }
            if let Some(op) = machine::operation_of(*next) {
                after.operation_history.insert(
                    op.to_owned(),
                    OperationMetric {
                        start: Some(now.to_owned()),
                        end: None,
                    },
                );
            }
            conditions::remove(&mut after.conditions, CONDITION_PROGRESS);
            Action::requeue(Duration::ZERO)
        }
        Step::Stay { requeue, note } => {
            clear_error(&mut after, false);
            match note {
                Some(note) => {
                    conditions::set_condition(
                        &mut after.conditions,
                        Condition {
                            type_: CONDITION_PROGRESS.into(),
                            status: conditions::TRUE.into(),
                            reason: Some("InProgress".into()),
                            message: Some(note.clone()),
                            ..Condition::default()
                        },
                        now,
                    );
                }
                None => {
                    conditions::remove(&mut after.conditions, CONDITION_PROGRESS);
                }
            }
            requeue.map_or_else(Action::await_change, Action::requeue)
        }
        Step::Fail(error_type, message) => {
            after.error_count = before.error_count + 1;
            after.error_type = Some(error_type.as_str().to_owned());
            after.error_message = message.clone();
            conditions::remove(&mut after.conditions, CONDITION_PROGRESS);
            warnings.push((error_reason(*error_type), message.clone()));
            Action::requeue(machine::error_backoff(after.error_count))
        }
        Step::Released => Action::await_change(),
    };
    Settled {
        status: after,
        action,
        transition,
        warnings,
    }
}

/// `status.operationalStatus` for a host with `status`.
pub fn operational_status(host: &BareMetalHost, status: &BareMetalHostStatus) -> OperationalStatus {
    if host
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(machine::ANNOTATION_DETACHED))
    {
        OperationalStatus::Detached
    } else if status.error_type.is_some() {
        OperationalStatus::Error
    } else if status.provisioning.state == ProvisioningState::Unmanaged.as_str() {
        OperationalStatus::Discovered
    } else {
        OperationalStatus::Ok
    }
}

impl HostController {
    /// One pass of the state machine over `host`, its outcome written: Events, status, effects.
    async fn pass(
        &self,
        host: &Arc<BareMetalHost>,
        context: &Context,
    ) -> Result<PassOutcome, HostError> {
        let namespace = host.namespace().ok_or(HostError::NoNamespace)?;
        let client = context.client().clone();
        let deleting = host.metadata.deletion_timestamp.is_some();
        let status = host.status.clone().unwrap_or_default();
        let state =
            ProvisioningState::parse(&status.provisioning.state).unwrap_or(ProvisioningState::None);
        // A failed operation is retried only once its backoff has passed, however soon we are woken.
        if let Some(remaining) = backoff_remaining(&status).filter(|_| !deleting) {
            return Ok(PassOutcome {
                action: Action::requeue(remaining),
                released: false,
            });
        }
        let access = self
            .provisioner_for(&client, context.secrets(), host, &namespace)
            .await?;
        let config_drive = if state == ProvisioningState::Provisioning && !deleting {
            self.config_drive(context.secrets(), host, &namespace)
                .await?
                .map(Some)
        } else {
            Ok(None)
        };
        let mut pass = Pass {
            host,
            status: status.clone(),
            provisioner: access.provisioner,
            provisioner_error: access.error,
            credentials_version: access.credentials_version,
            config_drive,
            effects: Effects::default(),
        };
        let step = machine::next_step(state, &mut pass).await?;
        let Pass {
            status: after,
            effects,
            ..
        } = pass;
        let now = conditions::now();
        let mut settled = settle(state, &status, after, &step, &now);
        match access.permitted {
            Some(condition) => {
                conditions::set_condition(&mut settled.status.conditions, condition, &now);
            }
            None => {
                conditions::remove(
                    &mut settled.status.conditions,
                    crate::networks::CONDITION_BMC_PERMITTED,
                );
            }
        }
        settled.status.operational_status = operational_status(host, &settled.status)
            .as_str()
            .to_owned();
        self.publish(context, host, &settled, &effects).await;
        if settled.status != status || host.status.is_none() {
            settled.status.last_updated = Some(now);
            // A merge patch of the fields this pass changed: fields of the status this model does
            // not know (written by newer versions or other writers) are kept.
            let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
            let before = host.status.clone().map(serde_json::to_value).transpose();
            let before = before
                .map_err(|e| HostError::Serialise(Box::new(e)))?
                .unwrap_or_else(|| json!({}));
            let after = serde_json::to_value(&settled.status)
                .map_err(|e| HostError::Serialise(Box::new(e)))?;
            patch::patch_status(&hosts, &**host, &before, &after).await?;
        }
        self.apply_effects(&client, host, &namespace, &effects)
            .await?;
        Ok(PassOutcome {
            action: settled.action,
            released: step == Step::Released,
        })
    }

    /// The pass's Events, before the status that reports the same step, so that whoever sees
    /// the status can find its Events.
    async fn publish(
        &self,
        context: &Context,
        host: &BareMetalHost,
        settled: &Settled,
        effects: &Effects,
    ) {
        if let Some((from, to)) = settled.transition {
            context
                .publish(
                    host,
                    EventType::Normal,
                    machine::transition_reason(from, to),
                    "Reconcile",
                    format!("{from} → {to}"),
                )
                .await;
        }
        for (reason, note) in &effects.events {
            context
                .publish(host, EventType::Normal, reason, "Reconcile", note.clone())
                .await;
        }
        for (reason, note) in &settled.warnings {
            context
                .publish(host, EventType::Warning, reason, "Reconcile", note.clone())
                .await;
        }
    }
}

/// How long a failed operation still waits for its backoff (measured from `status.lastUpdated`),
/// if it does.
fn backoff_remaining(status: &BareMetalHostStatus) -> Option<Duration> {
    if status.error_count == 0 || status.error_message.is_empty() {
        return None;
    }
    let wait = machine::error_backoff(status.error_count).as_secs();
    let waited = seconds_since(status.last_updated.as_deref()).unwrap_or(i64::MAX);
    let remaining = i64::try_from(wait)
        .unwrap_or(i64::MAX)
        .saturating_sub(waited);
    (remaining > 0).then(|| Duration::from_secs(remaining.unsigned_abs()))
}

impl HostController {
    async fn apply_effects(
        &self,
        client: &Client,
        host: &BareMetalHost,
        namespace: &str,
        effects: &Effects,
    ) -> Result<(), HostError> {
        let name = host.name_any();
        if !effects.remove_annotations.is_empty() {
            let removals: serde_json::Map<String, Value> = effects
                .remove_annotations
                .iter()
                .map(|k| (k.clone(), Value::Null))
                .collect();
            let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), namespace);
            hosts
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"annotations": removals}})),
                )
                .await
                .map_err(api_error(
                    "removing annotations from",
                    "BareMetalHost",
                    namespace,
                    &name,
                ))?;
        }
        let data: Api<HardwareData> = Api::namespaced(client.clone(), namespace);
        if let Some(hardware) = &effects.hardware_data {
            let mut object = HardwareData::new(
                name.clone(),
                Some(namespace),
                HardwareDataSpec {
                    hardware: Some(hardware.clone()),
                },
            );
            object.metadata.owner_references = Some(vec![owner_reference(host)]);
            let existing = data.get_opt(&name).await.map_err(api_error(
                "reading",
                "HardwareData",
                namespace,
                &name,
            ))?;
            match existing {
                Some(found) => {
                    object.metadata.resource_version = found.metadata.resource_version;
                    data.replace(&name, &PostParams::default(), &object)
                        .await
                        .map_err(api_error("updating", "HardwareData", namespace, &name))?;
                }
                None => {
                    data.create(&PostParams::default(), &object)
                        .await
                        .map_err(api_error("creating", "HardwareData", namespace, &name))?;
                }
            }
        }
        if effects.delete_hardware_data {
            match data.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(api_error("deleting", "HardwareData", namespace, &name)(e)),
            }
        }
        Ok(())
    }
}

/// Clears the last failure. `all` also forgets the count (an operation finished); otherwise the
/// count stays so the next failure of a retry backs off further.
fn clear_error(status: &mut BareMetalHostStatus, all: bool) {
    status.error_type = None;
    status.error_message.clear();
    if all {
        status.error_count = 0;
    }
}

fn error_reason(error_type: crate::state::ErrorType) -> &'static str {
    use crate::state::ErrorType as E;
    match error_type {
        E::Registration => "RegistrationError",
        E::ProvisionedRegistration => "ProvisionedRegistrationError",
        E::Inspection => "InspectionError",
        E::Preparation => "PreparationError",
        E::Provisioning => "ProvisioningError",
        E::PowerManagement => "PowerManagementError",
    }
}
