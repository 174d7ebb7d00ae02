//! The MachineHealthCheck controller.
//!
//! One pass over a MachineHealthCheck:
//! 1. **Targets**: the Machines of `spec.clusterName` (label `cluster.x-k8s.io/cluster-name`) that
//!    `spec.selector` matches and that are not being deleted.
//! 2. **Health** of each target ([`evaluate`], a pure function of the Machine, its Node, the Cluster
//!    and the time), in upstream's order: the `cluster.x-k8s.io/remediate-machine` annotation; a
//!    `nodeRef` whose Node is gone (`NodeNotFound`); unhealthy machine conditions; then, once the
//!    Cluster's infrastructure is provisioned and its control plane initialised (a control-plane
//!    Machine is judged before that, so the first one can be remediated), no Node
//!    `nodeStartupTimeout` after the Machine's infrastructure was provisioned (`NodeStartupTimeout`);
//!    a Node condition matching `unhealthyNodeConditions` for longer than its timeout
//!    (`UnhealthyNode`). Nodes are read from the workload cluster through `capstan-workload`.
//! 3. **Short-circuit**: when more targets are unhealthy than `maxUnhealthy`
//!    (`remediation.triggerIf.unhealthyLessThanOrEqualTo`) allows, or the count is outside
//!    `unhealthyRange` (`remediation.triggerIf.unhealthyInRange`), nothing is remediated: the
//!    `RemediationAllowed` condition says why, with a Warning Event.
//! 4. **Remediation**, as upstream v1beta2: each unhealthy Machine gets `HealthCheckSucceeded` False
//!    (reason and message) and, when remediation is allowed and the Machine does not carry
//!    `cluster.x-k8s.io/skip-remediation` (or the paused annotation), `OwnerRemediated` False
//!    (`WaitingForRemediation`). A Machine owned by a MachineSet is then deleted (the MachineSet
//!    creates its replacement); a KubeadmControlPlane's Machine is left to the control plane, which
//!    remediates by its own rules (one at a time, never losing etcd quorum). Healthy Machines get
//!    `HealthCheckSucceeded` True.
//! 5. **Status**: `expectedMachines`, `currentHealthy`, `remediationsAllowed`, `targets` and the
//!    conditions, as a merge patch of those fields.
//!
//! **Triggers.** A check is looked at when it changes, when a Machine it covers changes, and when a
//! Node of its cluster changes in a way that can change a verdict ([`crate::nodewatch`]: one Node
//! watch per workload cluster, started when a check first needs that cluster's Nodes, stopped when
//! no check names the cluster or the Cluster is gone); a Node change wakes only the checks whose
//! selector covers the Machine with that `nodeRef`. A running timeout (`unhealthyNodeConditions`,
//! `unhealthyMachineConditions`, `nodeStartupTimeout`) requeues the check for the moment it
//! elapses, so a Node NotReady for `timeout` is remediated then, not at the next periodic pass.
//! Otherwise a check is resynced every [`RESYNC`] while its Nodes are watched, every 30 s while
//! they cannot be.
//!
//! v1beta1 MachineHealthChecks are served converted to v1beta2 (`unhealthyConditions` →
//! `checks.unhealthyNodeConditions`, `maxUnhealthy` → `remediation.triggerIf...`), so one code path
//! serves both. External remediation (`remediation.templateRef`) is not implemented: a check that
//! names one reports it and remediates nothing.

use crate::nodewatch::{NodeChange, NodeWatches};
use capstan_model::capi::v1beta2::{MachineHealthCheck, MachineHealthChecks};
use capstan_model::meta::{ANNOTATION_PAUSED, LABEL_CLUSTER_NAME, selector_matches};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::controller::ErrorChain;
use capstan_runtime::{Action, Context, EventType, Reconciler};
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const CONTROLLER: &str = "machinehealthcheck";
/// Machine condition: whether the Machine passed its health checks.
pub const CONDITION_HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// Machine condition: False while the Machine waits for its owner to remediate it.
pub const CONDITION_OWNER_REMEDIATED: &str = "OwnerRemediated";
/// MachineHealthCheck condition: whether remediation is allowed (not short-circuited).
pub const CONDITION_REMEDIATION_ALLOWED: &str = "RemediationAllowed";
/// Machine annotation: never remediate this Machine.
pub const ANNOTATION_SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";
/// Machine annotation: remediate this Machine now (manual remediation).
pub const ANNOTATION_REMEDIATE: &str = "cluster.x-k8s.io/remediate-machine";
/// Label of control-plane Machines.
pub const LABEL_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// Upstream's default `nodeStartupTimeout`.
pub const DEFAULT_NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(600);

/// Re-checks at least this often while a cluster's Nodes cannot be watched (or read).
const RECHECK: Duration = Duration::from_secs(30);
/// Re-checks at least this often when the Nodes are watched and no timeout runs sooner (Cluster
/// API's default sync period): Node changes and Machine changes trigger a check at once, and a
/// running timeout requeues the check for the moment it elapses.
pub const RESYNC: Duration = Duration::from_secs(600);

/// Why a pass failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum HealthCheckError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("MachineHealthCheck {name} has no namespace")]
    NoNamespace { name: String },
}

fn api_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> HealthCheckError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| HealthCheckError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

fn v1beta2(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// One node condition that makes a Machine unhealthy after `timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConditionCheck {
    pub type_: String,
    pub status: String,
    pub timeout: Duration,
}

/// What a MachineHealthCheck checks, from its v1beta2 `checks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checks {
    /// `None` disables the startup check (`nodeStartupTimeoutSeconds: 0`).
    pub node_startup_timeout: Option<Duration>,
    pub unhealthy_node_conditions: Vec<NodeConditionCheck>,
    pub unhealthy_machine_conditions: Vec<NodeConditionCheck>,
}

fn seconds(value: i32) -> Duration {
    Duration::from_secs(u64::try_from(value).unwrap_or(0))
}

impl Checks {
    /// The checks of `spec.checks`, with upstream's defaults.
    pub fn from_spec(checks: Option<&MachineHealthChecks>) -> Self {
        let convert = |list: &[capstan_model::capi::v1beta2::UnhealthyCondition]| {
            list.iter()
                .map(|c| NodeConditionCheck {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    timeout: seconds(c.timeout_seconds),
                })
                .collect()
        };
        Self {
            node_startup_timeout: match checks.and_then(|c| c.node_startup_timeout_seconds) {
                None => Some(DEFAULT_NODE_STARTUP_TIMEOUT),
                Some(0) => None,
                Some(s) => Some(seconds(s)),
            },
            unhealthy_node_conditions: checks
                .map(|c| convert(&c.unhealthy_node_conditions))
                .unwrap_or_default(),
            unhealthy_machine_conditions: checks
                .map(|c| convert(&c.unhealthy_machine_conditions))
                .unwrap_or_default(),
        }
    }
}

/// A condition as the health evaluation reads it (of a Node or a Machine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedCondition {
    pub type_: String,
    pub status: String,
    pub since: Option<jiff::Timestamp>,
}

/// What the health evaluation knows about one target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    pub machine: String,
    pub control_plane: bool,
    /// The `remediate-machine` annotation is set.
    pub remediate_annotation: bool,
    /// `status.nodeRef.name`.
    pub node_ref: Option<String>,
    /// The Node's conditions when it exists; `None` when the Node named by `node_ref` is gone (or
    /// there is no `node_ref`).
    pub node: Option<Vec<ObservedCondition>>,
    pub machine_conditions: Vec<ObservedCondition>,
    /// When the Machine's infrastructure was provisioned; `None` while it is not.
    pub infrastructure_since: Option<jiff::Timestamp>,
}

/// The Cluster's state as the health evaluation needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    pub infrastructure_provisioned: bool,
    pub control_plane_initialized: bool,
}

/// The verdict on one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Healthy now; look again after `recheck` when a timeout is running.
    Healthy { recheck: Option<Duration> },
    /// Unhealthy: the reason and message of `HealthCheckSucceeded` False.
    Unhealthy {
        reason: &'static str,
        message: String,
    },
}

fn elapsed(since: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Duration {
    since
        .and_then(|s| Duration::try_from(now.duration_since(s)).ok())
        .unwrap_or_default()
}

fn human(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Checks conditions against `checks`: the first that has held past its timeout, or how long until
/// the next could.
fn held_too_long(
    checks: &[NodeConditionCheck],
    observed: &[ObservedCondition],
    now: jiff::Timestamp,
    recheck: &mut Option<Duration>,
) -> Option<(String, Duration)> {
    for check in checks {
        let Some(found) = observed
            .iter()
            .find(|c| c.type_ == check.type_ && c.status == check.status)
        else {
            continue;
        };
        let held = elapsed(found.since, now);
        if held >= check.timeout {
            return Some((format!("{}={}", check.type_, check.status), check.timeout));
        }
        let left = check.timeout - held;
        *recheck = Some(recheck.map_or(left, |r| r.min(left)));
    }
    None
}

/// Whether `target` is healthy under `checks` at `now`.
pub fn evaluate(
    checks: &Checks,
    cluster: ClusterState,
    target: &Target,
    now: jiff::Timestamp,
) -> Health {
    if target.remediate_annotation {
        return Health::Unhealthy {
            reason: "HasRemediateAnnotation",
            message: format!(
                "Machine {} has the {ANNOTATION_REMEDIATE} annotation",
                target.machine
            ),
        };
    }
    if let (Some(node), None) = (&target.node_ref, &target.node) {
        return Health::Unhealthy {
            reason: "NodeNotFound",
            message: format!("Node {node} of Machine {} has been deleted", target.machine),
        };
    }
    let mut recheck = None;
    if let Some((condition, timeout)) = held_too_long(
        &checks.unhealthy_machine_conditions,
        &target.machine_conditions,
        now,
        &mut recheck,
    ) {
        return Health::Unhealthy {
            reason: "UnhealthyMachine",
            message: format!(
                "Machine {} has condition {condition} for more than {}",
                target.machine,
                human(timeout)
            ),
        };
    }
    // Nothing is held against Machines of a cluster that cannot have Nodes yet — except control-plane
    // Machines, so that the first one can be remediated.
    if !cluster.infrastructure_provisioned
        || (!cluster.control_plane_initialized && !target.control_plane)
    {
        return Health::Healthy { recheck };
    }
    let Some(node) = &target.node else {
        let (Some(timeout), Some(since)) =
            (checks.node_startup_timeout, target.infrastructure_since)
        else {
            return Health::Healthy { recheck };
        };
        let waited = elapsed(Some(since), now);
        if waited >= timeout {
            return Health::Unhealthy {
                reason: "NodeStartupTimeout",
                message: format!(
                    "Machine {} has no Node {} after its infrastructure was provisioned (nodeStartupTimeout)",
                    target.machine,
                    human(timeout)
                ),
            };
        }
        let left = timeout - waited;
        return Health::Healthy {
            recheck: Some(recheck.map_or(left, |r: Duration| r.min(left))),
        };
    };
    if let Some((condition, timeout)) =
        held_too_long(&checks.unhealthy_node_conditions, node, now, &mut recheck)
    {
        return Health::Unhealthy {
            reason: "UnhealthyNode",
            message: format!(
                "Node {} of Machine {} has condition {condition} for more than {}",
                target.node_ref.as_deref().unwrap_or_default(),
                target.machine,
                human(timeout)
            ),
        };
    }
    Health::Healthy { recheck }
}

/// When remediation may happen, from `remediation.triggerIf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Always (no limit set).
    Always,
    /// While at most this many targets are unhealthy (`maxUnhealthy`, resolved against the count
    /// of targets when a percentage).
    AtMost(Value),
    /// While the unhealthy count is within `[min-max]` (`unhealthyRange`).
    InRange(String),
}

impl Trigger {
    /// Reads `spec.remediation.triggerIf`.
    pub fn from_remediation(remediation: Option<&Value>) -> Self {
        let trigger = remediation.map(|r| &r["triggerIf"]);
        if let Some(range) = trigger.and_then(|t| t["unhealthyInRange"].as_str()) {
            return Self::InRange(range.to_owned());
        }
        match trigger.map(|t| &t["unhealthyLessThanOrEqualTo"]) {
            Some(value) if !value.is_null() => Self::AtMost(value.clone()),
            _ => Self::Always,
        }
    }

    /// How many remediations are allowed with `unhealthy` of `total` targets unhealthy; `Err` with
    /// the message when remediation is short-circuited (or the setting is invalid).
    pub fn allowed(&self, total: usize, unhealthy: usize) -> Result<usize, String> {
        match self {
            // Upstream defaults maxUnhealthy to 100%.
            Self::Always => Ok(total.saturating_sub(unhealthy)),
            Self::AtMost(value) => {
                let max = int_or_percent(value, total).ok_or_else(|| {
                    format!("maxUnhealthy (unhealthyLessThanOrEqualTo) `{value}` is not a number or a percentage: fix it")
                })?;
                if unhealthy > max {
                    Err(format!(
                        "{unhealthy} of {total} Machines are unhealthy, more than maxUnhealthy {value} ({max}) allows: remediation is held back until fewer are unhealthy"
                    ))
                } else {
                    Ok(max - unhealthy)
                }
            }
            Self::InRange(range) => {
                let (min, max) = parse_range(range).ok_or_else(|| {
                    format!("unhealthyRange `{range}` is not of the form [min-max]: fix it")
                })?;
                if unhealthy < min || unhealthy > max {
                    Err(format!(
                        "{unhealthy} of {total} Machines are unhealthy, outside unhealthyRange {range}: remediation is held back"
                    ))
                } else {
                    Ok(max - unhealthy)
                }
            }
        }
    }
}

/// An int-or-string count: `3`, `"3"` or `"40%"` of `total` (rounded down, as upstream).
pub fn int_or_percent(value: &Value, total: usize) -> Option<usize> {
    if let Some(n) = value.as_u64() {
        return usize::try_from(n).ok();
    }
    let text = value.as_str()?.trim();
    match text.strip_suffix('%') {
        Some(percent) => {
            let percent: usize = percent.trim().parse().ok()?;
            Some(total * percent / 100)
        }
        None => text.parse().ok(),
    }
}

/// `[1-3]` → (1, 3).
pub fn parse_range(range: &str) -> Option<(usize, usize)> {
    let inner = range.trim().strip_prefix('[')?.strip_suffix(']')?;
    let (min, max) = inner.split_once('-')?;
    let (min, max): (usize, usize) = (min.trim().parse().ok()?, max.trim().parse().ok()?);
    (min <= max).then_some((min, max))
}

/// Who remediates a Machine, from its controller owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A MachineSet: the Machine is deleted and the MachineSet replaces it.
    MachineSet,
    /// A KubeadmControlPlane: it remediates by its own rules.
    ControlPlane,
    /// Anything else (or none): the Machine is only marked.
    Other,
}

fn owner_of(machine: &DynamicObject) -> Owner {
    let owners = machine
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    let controller = owners
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| owners.first());
    match controller.map(|o| o.kind.as_str()) {
        Some("MachineSet") => Owner::MachineSet,
        Some("KubeadmControlPlane") => Owner::ControlPlane,
        _ => Owner::Other,
    }
}

fn timestamp(value: &Value) -> Option<jiff::Timestamp> {
    value.as_str()?.parse().ok()
}

fn observed_conditions(conditions: &Value) -> Vec<ObservedCondition> {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ObservedCondition {
            type_: c["type"].as_str().unwrap_or_default().to_owned(),
            status: c["status"].as_str().unwrap_or_default().to_owned(),
            since: timestamp(&c["lastTransitionTime"]),
        })
        .collect()
}

fn condition_is_true(status: &Value, type_: &str) -> bool {
    let check = |list: &Value| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|c| c["type"] == type_ && c["status"] == TRUE))
    };
    check(&status["conditions"]) || check(&status["deprecated"]["v1beta1"]["conditions"])
}

/// The Cluster's state from its v1beta2 status (or the v1beta1 conditions).
pub fn cluster_state(status: &Value) -> ClusterState {
    ClusterState {
        infrastructure_provisioned: status["initialization"]["infrastructureProvisioned"]
            .as_bool()
            .unwrap_or(false)
            || condition_is_true(status, "InfrastructureReady"),
        control_plane_initialized: status["initialization"]["controlPlaneInitialized"]
            .as_bool()
            .unwrap_or(false)
            || condition_is_true(status, "ControlPlaneInitialized"),
    }
}

/// When a Machine's infrastructure was provisioned: the `InfrastructureReady` condition's transition
/// time, else (provisioned without that condition) its creation time.
fn infrastructure_since(machine: &DynamicObject) -> Option<jiff::Timestamp> {
    let status = &machine.data["status"];
    let provisioned = status["initialization"]["infrastructureProvisioned"].as_bool() == Some(true)
        || condition_is_true(status, "InfrastructureReady");
    if !provisioned {
        return None;
    }
    let from_condition = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "InfrastructureReady" && c["status"] == TRUE)
        .and_then(|c| timestamp(&c["lastTransitionTime"]));
    from_condition.or_else(|| {
        machine
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| t.0.to_string().parse().ok())
    })
}

fn node_ref_name(machine: &DynamicObject) -> Option<String> {
    machine.data["status"]["nodeRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// Reduces a watched Machine to what [`checks_covering`] and [`checks_for_node`] read: its
/// namespace, name, labels and `status.nodeRef.name`.
fn keep_trigger_fields(machine: &mut DynamicObject) {
    let node_ref = node_ref_name(machine);
    let meta = &mut machine.metadata;
    *meta = kube::api::ObjectMeta {
        namespace: meta.namespace.take(),
        name: meta.name.take(),
        labels: meta.labels.take(),
        resource_version: meta.resource_version.take(),
        uid: meta.uid.take(),
        ..kube::api::ObjectMeta::default()
    };
    machine.data = match node_ref {
        Some(name) => json!({"status": {"nodeRef": {"name": name}}}),
        None => Value::Null,
    };
}

/// The target view of `machine`, given the workload's Nodes by name.
fn target_of(machine: &DynamicObject, nodes: &HashMap<String, Vec<ObservedCondition>>) -> Target {
    let annotations = machine.annotations();
    let node_ref = node_ref_name(machine);
    Target {
        machine: machine.name_any(),
        control_plane: machine.labels().contains_key(LABEL_CONTROL_PLANE),
        remediate_annotation: annotations.contains_key(ANNOTATION_REMEDIATE),
        node: node_ref.as_ref().and_then(|n| nodes.get(n).cloned()),
        node_ref,
        machine_conditions: observed_conditions(&machine.data["status"]["conditions"]),
        infrastructure_since: infrastructure_since(machine),
    }
}

/// The checks whose cluster and selector cover `machine`.
fn checks_covering(
    checks: &[Arc<MachineHealthCheck>],
    machine: &DynamicObject,
) -> Vec<ObjectRef<MachineHealthCheck>> {
    let labels = machine.labels();
    checks
        .iter()
        .filter(|check| {
            check.metadata.namespace == machine.metadata.namespace
                && labels.get(LABEL_CLUSTER_NAME) == Some(&check.spec.cluster_name)
                && selector_matches(&check.spec.selector, labels)
        })
        .map(|check| ObjectRef::from_obj(&**check))
        .collect()
}

/// The checks to look again after `change`: those covering the Machines whose `nodeRef` names the
/// Node. A Node no Machine references yet wakes nobody (the Machine's `nodeRef` will, when set).
fn checks_for_node(
    checks: &kube::runtime::reflector::Store<MachineHealthCheck>,
    machines: &[Arc<DynamicObject>],
    change: &NodeChange,
) -> Vec<ObjectRef<MachineHealthCheck>> {
    let all = checks.state();
    let mut refs: Vec<ObjectRef<MachineHealthCheck>> = machines
        .iter()
        .filter(|m| {
            m.metadata.namespace.as_deref() == Some(change.cluster.namespace.as_str())
                && m.labels().get(LABEL_CLUSTER_NAME) == Some(&change.cluster.name)
                && node_ref_name(m).as_deref() == Some(change.node.as_str())
        })
        .flat_map(|m| checks_covering(&all, m))
        .collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs.dedup();
    refs
}

/// The MachineHealthCheck controller.
#[derive(Clone)]
pub struct MachineHealthCheckController {
    workloads: SharedWorkloadAccess,
    nodes: NodeWatches,
    resync: Duration,
}

impl MachineHealthCheckController {
    /// A controller reading workload Nodes through `workloads`, watching them per cluster.
    pub fn new(workloads: SharedWorkloadAccess) -> Self {
        Self {
            nodes: NodeWatches::new(workloads.clone()),
            workloads,
            resync: RESYNC,
        }
    }

    /// The same controller, looking at checks whose Nodes are watched at least every `resync`
    /// (when no timeout runs sooner).
    #[must_use]
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// The per-cluster Node watches.
    pub fn node_watches(&self) -> &NodeWatches {
        &self.nodes
    }
}

/// The Machine conditions this controller owns after a verdict, or `None` when they already say so.
fn machine_conditions_after(
    machine: &DynamicObject,
    health: &Health,
    mark_for_owner: bool,
    now: &str,
) -> Option<Vec<capstan_model::meta::Condition>> {
    let mut current: Vec<capstan_model::meta::Condition> =
        serde_json::from_value(machine.data["status"]["conditions"].clone()).unwrap_or_default();
    let generation = machine.metadata.generation;
    let mut changed = false;
    match health {
        Health::Healthy { .. } => {
            changed |= conditions::set_condition(
                &mut current,
                conditions::condition(
                    CONDITION_HEALTH_CHECK_SUCCEEDED,
                    TRUE,
                    "HealthCheckSucceeded",
                    "",
                    generation,
                ),
                now,
            );
            changed |= conditions::remove(&mut current, CONDITION_OWNER_REMEDIATED);
        }
        Health::Unhealthy { reason, message } => {
            changed |= conditions::set_condition(
                &mut current,
                conditions::condition(
                    CONDITION_HEALTH_CHECK_SUCCEEDED,
                    FALSE,
                    reason,
                    message.clone(),
                    generation,
                ),
                now,
            );
            if mark_for_owner && conditions::get(&current, CONDITION_OWNER_REMEDIATED).is_none() {
                changed |= conditions::set_condition(
                    &mut current,
                    conditions::condition(
                        CONDITION_OWNER_REMEDIATED,
                        FALSE,
                        "WaitingForRemediation",
                        "Waiting for remediation",
                        generation,
                    ),
                    now,
                );
            }
        }
    }
    changed.then_some(current)
}

impl Reconciler for MachineHealthCheckController {
    type Object = MachineHealthCheck;
    type Error = HealthCheckError;

    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn cluster_name(&self, check: &MachineHealthCheck) -> Option<String> {
        Some(check.spec.cluster_name.clone()).filter(|c| !c.is_empty())
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn configure(
        &self,
        controller: Controller<MachineHealthCheck>,
        client: &Client,
    ) -> Controller<MachineHealthCheck> {
        let checks = controller.store();
        let needed_by = checks.clone();
        // A cluster's Node watch lives while some check names the cluster.
        self.nodes.set_needed(move |cluster| {
            needed_by.state().iter().any(|check| {
                check.metadata.namespace.as_deref() == Some(cluster.namespace.as_str())
                    && check.spec.cluster_name == cluster.name
            })
        });
        let machine_resource = v1beta2("Machine", "machines");
        let writer = reflector::store::Writer::new(machine_resource.clone());
        let machines = writer.as_reader();
        let machine_events = reflector(
            writer,
            watcher(
                Api::<DynamicObject>::all_with(client.clone(), &machine_resource),
                watcher::Config::default(),
            )
            // The store answers only which checks a Machine or a Node change wakes: it keeps
            // each Machine's labels and `nodeRef` name, not the whole Machine (4,000 whole
            // Machines, untyped, were tens of MiB held for those two fields).
            .modify(keep_trigger_fields),
        )
        .touched_objects();
        let checks_for_machines = checks.clone();
        let node_changes = futures::stream::unfold(self.nodes.changes(), |mut changes| async {
            changes.recv().await.map(|change| (change, changes))
        })
        .flat_map(move |change| {
            futures::stream::iter(checks_for_node(&checks, &machines.state(), &change))
        });
        controller
            .watches_stream_with(
                machine_events,
                move |machine: DynamicObject| {
                    checks_covering(&checks_for_machines.state(), &machine)
                },
                machine_resource,
            )
            .reconcile_on(node_changes)
    }

    async fn reconcile(
        &self,
        check: Arc<MachineHealthCheck>,
        context: Arc<Context>,
    ) -> Result<Action, HealthCheckError> {
        let name = check.name_any();
        let namespace = check
            .metadata
            .namespace
            .clone()
            .ok_or_else(|| HealthCheckError::NoNamespace { name: name.clone() })?;
        let client = context.client();
        let cluster_name = check.spec.cluster_name.clone();
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &v1beta2("Cluster", "clusters"));
        let Some(cluster) = clusters.get_opt(&cluster_name).await.map_err(api_error(
            "reading",
            "Cluster",
            &namespace,
            &cluster_name,
        ))?
        else {
            self.nodes.stop(&ClusterKey::new(&namespace, &cluster_name));
            self.write_status(&check, &namespace, client, StatusUpdate::blocked(
                "ClusterNotFound",
                format!("Cluster {namespace}/{cluster_name} (spec.clusterName) does not exist: create it or fix spec.clusterName"),
            ))
            .await?;
            return Ok(Action::requeue(RECHECK));
        };
        let cluster = cluster_state(&cluster.data["status"]);

        let machines: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &v1beta2("Machine", "machines"));
        let mut targets: Vec<DynamicObject> = machines
            .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER_NAME}={cluster_name}")))
            .await
            .map_err(api_error("listing", "Machine", &namespace, ""))?
            .items
            .into_iter()
            .filter(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && selector_matches(&check.spec.selector, m.labels())
            })
            .collect();
        targets.sort_by_key(ResourceExt::name_any);

        // Nodes are needed only once some target has a nodeRef.
        let mut nodes = HashMap::new();
        let key = ClusterKey::new(&namespace, &cluster_name);
        let needs_nodes = targets.iter().any(|m| node_ref_name(m).is_some());
        if needs_nodes {
            // From now on a Node change wakes this check; the list below is what it judges.
            self.nodes.ensure(&key);
            let listed = match self.workloads.client(&key).await {
                Ok(workload) => Api::<Node>::all(workload)
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string()),
                Err(err) => Err(ErrorChain(&err).to_string()),
            };
            match listed {
                Ok(list) => {
                    for node in list.items {
                        let conditions = node
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.clone())
                            .unwrap_or_default()
                            .into_iter()
                            .map(|c| ObservedCondition {
                                type_: c.type_,
                                status: c.status,
                                since: c
                                    .last_transition_time
                                    .and_then(|t| t.0.to_string().parse().ok()),
                            })
                            .collect();
                        nodes.insert(node.metadata.name.unwrap_or_default(), conditions);
                    }
                }
                Err(reason) => {
                    // Without the Nodes nothing can be judged: remediating blind could delete every
                    // healthy Machine of a cluster whose API is merely unreachable.
                    self.workloads.forget(&key);
                    self.write_status(&check, &namespace, client, StatusUpdate::blocked(
                        "RemoteConnectionFailed",
                        format!("cannot read the Nodes of Cluster {cluster_name}: {reason}; no Machine is remediated until they can be read"),
                    ))
                    .await?;
                    return Ok(Action::requeue(RECHECK));
                }
            }
        }

        let checks = Checks::from_spec(check.spec.checks.as_ref());
        let now = jiff::Timestamp::now();
        let verdicts: Vec<(DynamicObject, Health)> = targets
            .into_iter()
            .map(|m| {
                let health = evaluate(&checks, cluster, &target_of(&m, &nodes), now);
                (m, health)
            })
            .collect();
        let total = verdicts.len();
        let unhealthy = verdicts
            .iter()
            .filter(|(_, h)| matches!(h, Health::Unhealthy { .. }))
            .count();
        let external = check
            .spec
            .remediation
            .as_ref()
            .is_some_and(|r| !r["templateRef"].is_null());
        let trigger = Trigger::from_remediation(check.spec.remediation.as_ref());
        let allowed = if external {
            Err("remediation.templateRef (external remediation) is not supported: remove it to let owners remediate".to_owned())
        } else {
            trigger.allowed(total, unhealthy)
        };
        let now_text = conditions::now();
        for (machine, health) in &verdicts {
            let skip = machine
                .annotations()
                .contains_key(ANNOTATION_SKIP_REMEDIATION)
                || machine.annotations().contains_key(ANNOTATION_PAUSED);
            let remediate = allowed.is_ok() && !skip;
            self.apply_verdict(&check, machine, health, remediate, &now_text, &context)
                .await?;
        }
        let update = StatusUpdate {
            expected: total,
            healthy: total - unhealthy,
            remediations_allowed: allowed.as_ref().map_or(0, |n| *n),
            targets: verdicts.iter().map(|(m, _)| m.name_any()).collect(),
            remediation_allowed: match &allowed {
                Ok(_) => conditions::condition(
                    CONDITION_REMEDIATION_ALLOWED,
                    TRUE,
                    "RemediationAllowed",
                    "",
                    check.metadata.generation,
                ),
                Err(message) => conditions::condition(
                    CONDITION_REMEDIATION_ALLOWED,
                    FALSE,
                    if external {
                        "ExternalRemediationUnsupported"
                    } else {
                        "TooManyUnhealthy"
                    },
                    message.clone(),
                    check.metadata.generation,
                ),
            },
        };
        let newly_restricted = self
            .write_status(&check, &namespace, client, update)
            .await?;
        if newly_restricted && let Err(message) = &allowed {
            context
                .publish(
                    &*check,
                    EventType::Warning,
                    "RemediationRestricted",
                    "Remediate",
                    message.clone(),
                )
                .await;
        }
        // A running timeout is looked at again the moment it elapses; otherwise changes trigger the
        // next pass, with a long resync while they are watched and a short one while not.
        let fallback = if !needs_nodes || self.nodes.is_watching(&key) {
            self.resync
        } else {
            RECHECK
        };
        let recheck = verdicts
            .iter()
            .filter_map(|(_, h)| match h {
                Health::Healthy { recheck } => *recheck,
                Health::Unhealthy { .. } => None,
            })
            .min()
            .map_or(fallback, |d| d.min(fallback));
        Ok(Action::requeue(recheck.max(Duration::from_millis(100))))
    }
}

/// The status fields this controller owns.
struct StatusUpdate {
    expected: usize,
    healthy: usize,
    remediations_allowed: usize,
    targets: Vec<String>,
    remediation_allowed: capstan_model::meta::Condition,
}

impl StatusUpdate {
    /// A status that remediates nothing, for a check that cannot evaluate its targets.
    fn blocked(reason: &str, message: String) -> Self {
        Self {
            expected: 0,
            healthy: 0,
            remediations_allowed: 0,
            targets: Vec::new(),
            remediation_allowed: conditions::condition(
                CONDITION_REMEDIATION_ALLOWED,
                FALSE,
                reason,
                message,
                None,
            ),
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl MachineHealthCheckController {
    /// Writes the status when it changed; returns whether `RemediationAllowed` just became False.
    async fn write_status(
        &self,
        check: &MachineHealthCheck,
        namespace: &str,
        client: &Client,
        update: StatusUpdate,
    ) -> Result<bool, HealthCheckError> {
        let name = check.name_any();
        let status = check.status.clone().unwrap_or_default();
        let mut current = status.conditions.clone();
        let was_allowed =
            conditions::get(&current, CONDITION_REMEDIATION_ALLOWED).map(|c| c.status.clone());
        let changed = conditions::set_condition(
            &mut current,
            update.remediation_allowed.clone(),
            &conditions::now(),
        );
        let counts_changed = status.expected_machines.map(i64::from)
            != Some(count(update.expected))
            || status.current_healthy.map(i64::from) != Some(count(update.healthy))
            || status.remediations_allowed.map(i64::from)
                != Some(count(update.remediations_allowed));
        if changed || counts_changed {
            let patch = json!({"status": {
                "expectedMachines": count(update.expected),
                "currentHealthy": count(update.healthy),
                "remediationsAllowed": count(update.remediations_allowed),
                "targets": update.targets,
                "conditions": current,
            }});
            Api::<MachineHealthCheck>::namespaced(client.clone(), namespace)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "updating status of",
                    "MachineHealthCheck",
                    namespace,
                    &name,
                ))?;
        }
        Ok(update.remediation_allowed.status == FALSE && was_allowed.as_deref() != Some(FALSE))
    }

    /// Marks one Machine with its verdict and, when it is unhealthy and may be remediated, hands it
    /// to its owner (deleting it when a MachineSet owns it).
    async fn apply_verdict(
        &self,
        check: &MachineHealthCheck,
        machine: &DynamicObject,
        health: &Health,
        remediate: bool,
        now: &str,
        context: &Context,
    ) -> Result<(), HealthCheckError> {
        let namespace = machine.metadata.namespace.clone().unwrap_or_default();
        let name = machine.name_any();
        let machines: Api<DynamicObject> = Api::namespaced_with(
            context.client().clone(),
            &namespace,
            &v1beta2("Machine", "machines"),
        );
        if let Some(conditions) = machine_conditions_after(machine, health, remediate, now) {
            // Guarded by the resourceVersion: the Machine controller writes other conditions of the
            // same list; on a conflict the pass is retried with the fresh Machine.
            let patch = json!({
                "metadata": {"resourceVersion": machine.metadata.resource_version},
                "status": {"conditions": conditions},
            });
            machines
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "updating status of",
                    "Machine",
                    &namespace,
                    &name,
                ))?;
            if let Health::Unhealthy { reason, message } = health {
                context
                    .publish(
                        check,
                        EventType::Normal,
                        "MachineMarkedUnhealthy",
                        "HealthCheck",
                        format!("Machine {name}: {message} ({reason})"),
                    )
                    .await;
            }
        }
        if !remediate || !matches!(health, Health::Unhealthy { .. }) {
            return Ok(());
        }
        match owner_of(machine) {
            Owner::MachineSet => {
                let params = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: machine.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match machines.delete(&name, &params).await {
                    Ok(_) => {
                        context
                            .publish(
                                check,
                                EventType::Normal,
                                "MachineRemediated",
                                "Remediate",
                                format!(
                                    "deleted unhealthy Machine {name}; its MachineSet replaces it"
                                ),
                            )
                            .await;
                        Ok(())
                    }
                    Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
                    Err(err) => Err(api_error("deleting", "Machine", &namespace, &name)(err)),
                }
            }
            Owner::ControlPlane | Owner::Other => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap_or_default()
    }

    fn ready(status: &str, since: &str) -> ObservedCondition {
        ObservedCondition {
            type_: "Ready".into(),
            status: status.into(),
            since: Some(at(since)),
        }
    }

    fn checks() -> Checks {
        Checks {
            node_startup_timeout: Some(Duration::from_secs(600)),
            unhealthy_node_conditions: vec![
                NodeConditionCheck {
                    type_: "Ready".into(),
                    status: "False".into(),
                    timeout: Duration::from_secs(300),
                },
                NodeConditionCheck {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    timeout: Duration::from_secs(300),
                },
            ],
            unhealthy_machine_conditions: Vec::new(),
        }
    }

    const UP: ClusterState = ClusterState {
        infrastructure_provisioned: true,
        control_plane_initialized: true,
    };

    fn reason(health: &Health) -> &'static str {
        match health {
            Health::Healthy { .. } => "Healthy",
            Health::Unhealthy { reason, .. } => reason,
        }
    }

    #[test]
    fn health_table() {
        let now = at("2026-01-01T01:00:00Z");
        let with_node = |conditions: Vec<ObservedCondition>| Target {
            machine: "m".into(),
            node_ref: Some("n".into()),
            node: Some(conditions),
            infrastructure_since: Some(at("2026-01-01T00:00:00Z")),
            ..Target::default()
        };
        let no_node = |since: &str| Target {
            machine: "m".into(),
            infrastructure_since: Some(at(since)),
            ..Target::default()
        };
        let not_initialised = ClusterState {
            infrastructure_provisioned: true,
            control_plane_initialized: false,
        };
        let table: Vec<(&str, ClusterState, Target, &str)> = vec![
            (
                "ready node",
                UP,
                with_node(vec![ready("True", "2026-01-01T00:10:00Z")]),
                "Healthy",
            ),
            (
                "NotReady past timeout",
                UP,
                with_node(vec![ready("False", "2026-01-01T00:50:00Z")]),
                "UnhealthyNode",
            ),
            (
                "NotReady within timeout",
                UP,
                with_node(vec![ready("False", "2026-01-01T00:58:00Z")]),
                "Healthy",
            ),
            (
                "Unknown past timeout",
                UP,
                with_node(vec![ready("Unknown", "2026-01-01T00:00:00Z")]),
                "UnhealthyNode",
            ),
            (
                "node deleted",
                UP,
                Target {
                    node: None,
                    ..with_node(Vec::new())
                },
                "NodeNotFound",
            ),
            (
                "no node past startup timeout",
                UP,
                no_node("2026-01-01T00:40:00Z"),
                "NodeStartupTimeout",
            ),
            (
                "no node within startup timeout",
                UP,
                no_node("2026-01-01T00:55:00Z"),
                "Healthy",
            ),
            (
                "no infrastructure yet",
                UP,
                Target {
                    infrastructure_since: None,
                    ..no_node("2026-01-01T00:00:00Z")
                },
                "Healthy",
            ),
            (
                "worker before control plane init",
                not_initialised,
                no_node("2026-01-01T00:00:00Z"),
                "Healthy",
            ),
            (
                "control plane machine before init",
                not_initialised,
                Target {
                    control_plane: true,
                    ..no_node("2026-01-01T00:00:00Z")
                },
                "NodeStartupTimeout",
            ),
            (
                "remediate annotation",
                UP,
                Target {
                    remediate_annotation: true,
                    ..with_node(Vec::new())
                },
                "HasRemediateAnnotation",
            ),
        ];
        for (name, cluster, target, expected) in table {
            assert_eq!(
                reason(&evaluate(&checks(), cluster, &target, now)),
                expected,
                "{name}"
            );
        }
        // A running timeout asks for a recheck when it would expire.
        assert_eq!(
            evaluate(
                &checks(),
                UP,
                &with_node(vec![ready("False", "2026-01-01T00:58:00Z")]),
                now
            ),
            Health::Healthy {
                recheck: Some(Duration::from_secs(180))
            }
        );
        // nodeStartupTimeoutSeconds: 0 disables the startup check.
        let disabled = Checks {
            node_startup_timeout: None,
            ..checks()
        };
        assert_eq!(
            reason(&evaluate(
                &disabled,
                UP,
                &no_node("2020-01-01T00:00:00Z"),
                now
            )),
            "Healthy"
        );
    }

    #[test]
    fn unhealthy_messages_name_the_node_and_timeout() {
        let target = Target {
            machine: "w-1".into(),
            node_ref: Some("node-1".into()),
            node: Some(vec![ready("False", "2026-01-01T00:00:00Z")]),
            ..Target::default()
        };
        let Health::Unhealthy { message, .. } =
            evaluate(&checks(), UP, &target, at("2026-01-01T01:00:00Z"))
        else {
            panic!("healthy")
        };
        assert_eq!(
            message,
            "Node node-1 of Machine w-1 has condition Ready=False for more than 5m"
        );
    }

    #[test]
    fn max_unhealthy_and_range() {
        let table: Vec<(Trigger, usize, usize, Result<usize, ()>)> = vec![
            (Trigger::Always, 3, 1, Ok(2)),
            (Trigger::AtMost(json!(1)), 3, 1, Ok(0)),
            (Trigger::AtMost(json!(1)), 3, 2, Err(())),
            (Trigger::AtMost(json!("40%")), 5, 2, Ok(0)),
            (Trigger::AtMost(json!("40%")), 5, 3, Err(())),
            (Trigger::AtMost(json!("100%")), 3, 3, Ok(0)),
            (Trigger::AtMost(json!("lots")), 3, 0, Err(())),
            (Trigger::InRange("[1-2]".into()), 5, 1, Ok(1)),
            (Trigger::InRange("[1-2]".into()), 5, 3, Err(())),
            (Trigger::InRange("[2-3]".into()), 5, 1, Err(())),
            (Trigger::InRange("1-2".into()), 5, 1, Err(())),
        ];
        for (trigger, total, unhealthy, expected) in table {
            assert_eq!(
                trigger.allowed(total, unhealthy).map_err(|_| ()),
                expected,
                "{trigger:?} {unhealthy}/{total}"
            );
        }
        let message = Trigger::AtMost(json!(1)).allowed(3, 2).unwrap_err();
        assert!(
            message.contains("2 of 3 Machines are unhealthy"),
            "{message}"
        );
    }

    #[test]
    fn trigger_is_read_from_v1beta2_remediation() {
        assert_eq!(Trigger::from_remediation(None), Trigger::Always);
        assert_eq!(
            Trigger::from_remediation(Some(
                &json!({"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}})
            )),
            Trigger::AtMost(json!("40%"))
        );
        assert_eq!(
            Trigger::from_remediation(Some(&json!({"triggerIf": {"unhealthyInRange": "[1-3]"}}))),
            Trigger::InRange("[1-3]".into())
        );
    }

    #[test]
    fn checks_default_and_convert() {
        let defaults = Checks::from_spec(None);
        assert_eq!(
            defaults.node_startup_timeout,
            Some(DEFAULT_NODE_STARTUP_TIMEOUT)
        );
        let spec = MachineHealthChecks {
            node_startup_timeout_seconds: Some(0),
            unhealthy_node_conditions: vec![capstan_model::capi::v1beta2::UnhealthyCondition {
                type_: "Ready".into(),
                status: "False".into(),
                timeout_seconds: 300,
            }],
            unhealthy_machine_conditions: Vec::new(),
        };
        let checks = Checks::from_spec(Some(&spec));
        assert_eq!(checks.node_startup_timeout, None);
        assert_eq!(
            checks.unhealthy_node_conditions[0].timeout,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn conditions_follow_the_verdict() {
        let machine: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "generation": 1},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
        }))
        .unwrap();
        let unhealthy = Health::Unhealthy {
            reason: "NodeNotFound",
            message: "gone".into(),
        };
        let marked =
            machine_conditions_after(&machine, &unhealthy, true, "2026-01-01T00:00:00Z").unwrap();
        let types: Vec<&str> = marked.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "HealthCheckSucceeded", "OwnerRemediated"]);
        assert_eq!(marked[2].reason.as_deref(), Some("WaitingForRemediation"));
        let held_back =
            machine_conditions_after(&machine, &unhealthy, false, "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(held_back.len(), 2);
        // Healthy again: HealthCheckSucceeded True, OwnerRemediated gone.
        let mut remarked = machine.clone();
        remarked.data["status"]["conditions"] = serde_json::to_value(&marked).unwrap();
        let healthy = machine_conditions_after(
            &remarked,
            &Health::Healthy { recheck: None },
            true,
            "2026-01-01T00:01:00Z",
        )
        .unwrap();
        let types: Vec<(&str, &str)> = healthy
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(types, [("Ready", "True"), ("HealthCheckSucceeded", "True")]);
        assert!(
            machine_conditions_after(&machine, &Health::Healthy { recheck: None }, true, "x")
                .is_some()
        );
    }

    #[test]
    fn owners() {
        let machine = |kind: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "m", "ownerReferences": [{"apiVersion": "x/v1", "kind": kind, "name": "o", "uid": "u", "controller": true}]},
            }))
            .unwrap()
        };
        assert_eq!(owner_of(&machine("MachineSet")), Owner::MachineSet);
        assert_eq!(
            owner_of(&machine("KubeadmControlPlane")),
            Owner::ControlPlane
        );
        assert_eq!(owner_of(&machine("Something")), Owner::Other);
    }

    #[test]
    fn a_machine_in_the_trigger_store_keeps_what_the_mappers_read() {
        let full: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {
                "namespace": "ns", "name": "m1", "uid": "u1", "resourceVersion": "7",
                "labels": {LABEL_CLUSTER_NAME: "c1", "pool": "workers"},
                "annotations": {"note": "x".repeat(4096)},
                "finalizers": ["machine.cluster.x-k8s.io"],
                "managedFields": [{"manager": "capstan", "operation": "Apply"}],
            },
            "spec": {"clusterName": "c1", "providerID": "metal3://ns/h/m1", "bootstrap": {"dataSecretName": "m1"}},
            "status": {"nodeRef": {"name": "n1"}, "phase": "Running", "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]},
        }))
        .unwrap();
        let mut slim = full.clone();
        keep_trigger_fields(&mut slim);
        assert_eq!(node_ref_name(&slim).as_deref(), Some("n1"));
        assert_eq!(slim.labels(), full.labels());
        assert_eq!(
            (slim.namespace(), slim.name_any()),
            (full.namespace(), full.name_any())
        );
        assert!(slim.annotations().is_empty() && slim.metadata.managed_fields.is_none());
        assert!(slim.data["spec"].is_null() && slim.data["status"]["phase"].is_null());

        let check = |name: &str, pool: &str| {
            let mut check = MachineHealthCheck::new(name, Some("ns"), Default::default());
            check.spec.cluster_name = "c1".into();
            check.spec.selector.match_labels = Some([("pool".to_owned(), pool.to_owned())].into());
            Arc::new(check)
        };
        let checks = [check("workers", "workers"), check("cp", "control-plane")];
        let names = |refs: Vec<ObjectRef<MachineHealthCheck>>| -> Vec<String> {
            refs.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(names(checks_covering(&checks, &slim)), ["workers"]);
        assert_eq!(
            names(checks_covering(&checks, &slim)),
            names(checks_covering(&checks, &full))
        );

        let mut without_node = full.clone();
        without_node.data["status"] = json!({"phase": "Provisioning"});
        keep_trigger_fields(&mut without_node);
        assert_eq!(node_ref_name(&without_node), None);
    }
}
