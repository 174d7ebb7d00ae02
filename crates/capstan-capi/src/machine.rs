//! The Machine controller.
//!
//! A Machine comes up in three contract steps, each visible as a condition that says what it waits
//! for: the bootstrap config's `dataSecretName` is copied to `spec.bootstrap.dataSecretName`
//! (BootstrapConfigReady); the infrastructure machine's `providerID` to `spec.providerID` once it
//! is provisioned (InfrastructureReady); the workload Node with that providerID becomes
//! `status.nodeRef` (NodeReady, NodeHealthy). The Node gets the Machine's `node-role.kubernetes.io/*`
//! and `node.cluster.x-k8s.io/*` labels, and `node-role.kubernetes.io/worker` when the Machine is
//! not a control-plane one.
//!
//! Deletion is a state machine of passes ([`DeletionStep`]): pre-drain hooks → drain (bounded by
//! `spec.deletion.nodeDrainTimeoutSeconds`, default [`DEFAULT_NODE_DRAIN_TIMEOUT`]) → pre-terminate
//! hooks → infrastructure machine gone → bootstrap config gone → Node deleted → finalizer removed.

use crate::MACHINE_FINALIZER;
use crate::contract::{self, ContractError, Referenced};
use crate::drain::{self, DrainError, DrainOutcome};
use capstan_model::capi::v1beta2::{Machine, MachineDeletionStatus, MachineStatus};
use capstan_model::meta::{LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::conditions::{self, FALSE, TRUE, UNKNOWN};
use capstan_runtime::patch::{self, PatchError};
use capstan_runtime::tables::ObjectCaches;
use capstan_runtime::{Action, Cleanup, Context, Reconciler};
use capstan_workload::{ClusterKey, KubeconfigAccess, SharedWorkloadAccess, WorkloadError};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The controller's name.
pub const MACHINE_CONTROLLER: &str = "machine";
/// How long a drain may take when the Machine does not say: bounded, so a Pod that can never be
/// evicted does not hold a Machine forever (upstream's default waits forever).
pub const DEFAULT_NODE_DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a Machine that waits (on a provider or its Node) is looked at again.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(10);
/// How often a Running Machine's Node health is checked.
pub const HEALTH_REQUEUE: Duration = Duration::from_secs(60);
/// How often a deletion step is retried while it waits.
pub const DELETE_REQUEUE: Duration = Duration::from_secs(2);

/// Annotation prefix of hooks that hold a Machine before its Node is drained.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
/// Annotation prefix of hooks that hold a Machine before its infrastructure is deleted.
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
/// Annotation that skips the drain.
pub const ANNOTATION_EXCLUDE_DRAIN: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
/// Label prefixes copied from a Machine to its Node.
pub const NODE_LABEL_PREFIXES: &[&str] = &["node-role.kubernetes.io/", "node.cluster.x-k8s.io/"];
/// The role label every worker Node gets.
pub const LABEL_WORKER_ROLE: &str = "node-role.kubernetes.io/worker";

/// Phases of a Machine.
pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_PROVISIONING: &str = "Provisioning";
pub const PHASE_PROVISIONED: &str = "Provisioned";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_DELETING: &str = "Deleting";

/// Condition types of a Machine (v1beta2).
pub const BOOTSTRAP_CONFIG_READY: &str = "BootstrapConfigReady";
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
pub const NODE_READY: &str = "NodeReady";
pub const NODE_HEALTHY: &str = "NodeHealthy";
pub const READY: &str = "Ready";
pub const UP_TO_DATE: &str = "UpToDate";
/// v1beta2's `Available`: Ready for at least `spec.minReadySeconds`.
pub const AVAILABLE: &str = "Available";
pub const DELETING: &str = "Deleting";

/// Why a Machine pass failed.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("provider object")]
    Contract(#[from] ContractError),
    #[error("writing")]
    Patch(#[from] PatchError),
    #[error("workload cluster")]
    Workload(#[from] WorkloadError),
    #[error("drain")]
    Drain(#[from] DrainError),
    #[error("{action} Node {node}")]
    Node {
        action: &'static str,
        node: String,
        source: Box<kube::Error>,
    },
    #[error("reading Cluster {namespace}/{name}")]
    Cluster {
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("Machine has no namespace")]
    NoNamespace,
}

/// The Machine controller.
pub struct MachineController {
    workloads: Option<SharedWorkloadAccess>,
    fallback: OnceLock<SharedWorkloadAccess>,
}

impl MachineController {
    /// A controller reaching workload clusters through `workloads` (a kubeconfig-based access on
    /// the management client when `None`).
    pub fn new(workloads: Option<SharedWorkloadAccess>) -> Self {
        Self {
            workloads,
            fallback: OnceLock::new(),
        }
    }

    fn workloads(&self, client: &Client) -> SharedWorkloadAccess {
        match &self.workloads {
            Some(w) => w.clone(),
            None => self
                .fallback
                .get_or_init(|| Arc::new(KubeconfigAccess::new(client.clone())))
                .clone(),
        }
    }
}

/// Where the bootstrap step stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapState {
    /// `spec.bootstrap.dataSecretName` is set.
    Ready,
    /// The config exists but has no data Secret yet (why, when it says).
    Waiting(String),
    /// The referenced config does not exist.
    Missing(String),
}

/// Where the infrastructure step stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfraState {
    /// Provisioned, with this providerID.
    Provisioned,
    /// Not provisioned yet (why).
    Waiting(String),
    /// The referenced infrastructure machine does not exist.
    Missing(String),
}

/// Where the Node step stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// No providerID yet: nothing to look for.
    NoProviderId,
    /// The workload cluster cannot be reached (why).
    Unreachable(String),
    /// No Node with the providerID (yet).
    NotFound(String),
    /// The Node, and whether it is Ready (with its Ready message).
    Found {
        name: String,
        ready: bool,
        message: String,
    },
}

/// What a pass saw, the input of [`compute_status`].
#[derive(Clone, Debug)]
pub struct Observed {
    pub bootstrap: BootstrapState,
    /// The bootstrap config reports that the node's bootstrap failed (its `BootstrapSucceeded`
    /// condition is False): `(reason, message)`, shown on the Machine's `BootstrapConfigReady`.
    pub bootstrap_failure: Option<(String, String)>,
    pub infrastructure: InfraState,
    pub node: NodeState,
    pub addresses: Option<Vec<Value>>,
    pub failure_domain: Option<String>,
    pub node_info: Option<Value>,
}

/// The phase from the steps reached (upstream's order).
pub fn phase(observed: &Observed, deleting: bool) -> &'static str {
    if deleting {
        PHASE_DELETING
    } else if matches!(observed.node, NodeState::Found { .. }) {
        PHASE_RUNNING
    } else if observed.infrastructure == InfraState::Provisioned {
        PHASE_PROVISIONED
    } else if observed.bootstrap == BootstrapState::Ready {
        PHASE_PROVISIONING
    } else {
        PHASE_PENDING
    }
}

/// The status a Machine should have (pure: the table-tested core).
/// Whether the Machine is available at `now` (RFC 3339) and why: Ready, and for at least
/// `spec.minReadySeconds` (from its `Ready` condition's last transition).
fn available(
    machine: &Machine,
    conditions: &[capstan_model::meta::Condition],
    now: &str,
) -> (bool, &'static str) {
    let Some(ready) = conditions::get(conditions, READY).filter(|c| c.status == TRUE) else {
        return (false, "NotReady");
    };
    let min_ready = i64::from(machine.spec.min_ready_seconds.unwrap_or(0).max(0));
    if min_ready == 0 {
        return (true, "Available");
    }
    let since = ready
        .last_transition_time
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let now = now.parse::<jiff::Timestamp>().ok();
    match (since, now) {
        (Some(since), Some(now)) if now.as_second() - since.as_second() >= min_ready => {
            (true, "Available")
        }
        _ => (false, "WaitingForMinReadySeconds"),
    }
}

pub fn compute_status(
    machine: &Machine,
    observed: &Observed,
    deleting: bool,
    now: &str,
) -> MachineStatus {
    let mut status = machine.status.clone().unwrap_or_default();
    let generation = machine.metadata.generation;
    let mut set = |type_: &str, state: &str, reason: &str, message: String| {
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(type_, state, reason, message, generation),
            now,
        );
    };
    match &observed.bootstrap {
        BootstrapState::Ready => match &observed.bootstrap_failure {
            // The data was delivered but the node reported a failing step: the node will not
            // join, and this is why.
            Some((reason, message)) => set(BOOTSTRAP_CONFIG_READY, FALSE, reason, message.clone()),
            None => set(
                BOOTSTRAP_CONFIG_READY,
                TRUE,
                "DataSecretAvailable",
                String::new(),
            ),
        },
        BootstrapState::Waiting(why) => set(
            BOOTSTRAP_CONFIG_READY,
            FALSE,
            "WaitingForDataSecret",
            why.clone(),
        ),
        BootstrapState::Missing(why) => set(
            BOOTSTRAP_CONFIG_READY,
            FALSE,
            "BootstrapConfigDoesNotExist",
            why.clone(),
        ),
    }
    match &observed.infrastructure {
        InfraState::Provisioned => set(INFRASTRUCTURE_READY, TRUE, "Provisioned", String::new()),
        InfraState::Waiting(why) => set(
            INFRASTRUCTURE_READY,
            FALSE,
            "WaitingForInfrastructure",
            why.clone(),
        ),
        InfraState::Missing(why) => set(
            INFRASTRUCTURE_READY,
            FALSE,
            "InfrastructureDoesNotExist",
            why.clone(),
        ),
    }
    let (node_ready, node_reason, node_message) = match &observed.node {
        NodeState::NoProviderId => (
            UNKNOWN,
            "WaitingForProviderID",
            "waiting for the infrastructure machine's providerID".to_owned(),
        ),
        NodeState::Unreachable(why) => (UNKNOWN, "WorkloadClusterUnreachable", why.clone()),
        NodeState::NotFound(why) => (UNKNOWN, "WaitingForNode", why.clone()),
        NodeState::Found { ready: true, .. } => (TRUE, "NodeReady", String::new()),
        NodeState::Found {
            ready: false,
            message,
            name,
        } => (
            FALSE,
            "NodeNotReady",
            format!("Node {name} is not Ready: {message}"),
        ),
    };
    set(NODE_READY, node_ready, node_reason, node_message.clone());
    set(NODE_HEALTHY, node_ready, node_reason, node_message);
    let ready = observed.bootstrap == BootstrapState::Ready
        && observed.infrastructure == InfraState::Provisioned
        && matches!(observed.node, NodeState::Found { ready: true, .. })
        && !deleting;
    set(
        READY,
        if ready { TRUE } else { FALSE },
        if ready {
            "Ready"
        } else if deleting {
            "Deleting"
        } else {
            "NotReady"
        },
        String::new(),
    );
    let (available, available_reason) = available(machine, &status.conditions, now);
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            AVAILABLE,
            if available { TRUE } else { FALSE },
            available_reason,
            String::new(),
            generation,
        ),
        now,
    );

    let mut init = status
        .initialization
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if observed.bootstrap == BootstrapState::Ready {
        init["bootstrapDataSecretCreated"] = json!(true);
    }
    if observed.infrastructure == InfraState::Provisioned {
        init["infrastructureProvisioned"] = json!(true);
    }
    // Upstream's `initialization` has at least one field: none latched yet, none written.
    status.initialization = init
        .as_object()
        .is_some_and(|fields| !fields.is_empty())
        .then_some(init);
    if let NodeState::Found { name, .. } = &observed.node {
        status.node_ref = Some(json!({"name": name}));
    }
    if observed.addresses.is_some() {
        status.addresses.clone_from(&observed.addresses);
    }
    if observed.failure_domain.is_some() {
        status.failure_domain.clone_from(&observed.failure_domain);
    }
    if observed.node_info.is_some() {
        status.node_info.clone_from(&observed.node_info);
    }
    status.phase = Some(phase(observed, deleting).to_owned());
    status.observed_generation = generation;
    status
}

/// The labels a Machine's Node should carry (only the ones capstan manages).
pub fn node_labels(machine: &Machine) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = machine
        .labels()
        .iter()
        .filter(|(k, _)| NODE_LABEL_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !machine.labels().contains_key(LABEL_CONTROL_PLANE) {
        labels.entry(LABEL_WORKER_ROLE.to_owned()).or_default();
    }
    labels
}

fn cluster_key(machine: &Machine, namespace: &str) -> ClusterKey {
    ClusterKey::new(namespace, machine.spec.cluster_name.clone())
}

fn node_error(action: &'static str, node: &str) -> impl FnOnce(kube::Error) -> MachineError {
    let node = node.to_owned();
    move |source| MachineError::Node {
        action,
        node,
        source: Box::new(source),
    }
}

/// The failure a bootstrap config reports for its node (condition `BootstrapSucceeded` False, as
/// capstan's kubeadm bootstrap records the node's step reports): `(reason, message)`.
fn bootstrap_failure(config: &kube::api::DynamicObject) -> Option<(String, String)> {
    config.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "BootstrapSucceeded" && c["status"] == "False")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or("BootstrapFailed").to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// The provider kinds a Machine references that its reconciles read from the process's caches (the
/// harness wakes a Machine when one it owns changes, after recording the change there).
fn cached_kinds() -> &'static [ApiResource] {
    static KINDS: OnceLock<Vec<ApiResource>> = OnceLock::new();
    KINDS.get_or_init(|| {
        crate::cluster::provider_kinds(&["Metal3Machine", "KVMMachine", "KubeadmConfig"])
    })
}

impl MachineController {
    /// Reads the bootstrap step; copies `dataSecretName` into the spec when the config has one.
    async fn bootstrap(
        &self,
        machine: &mut Machine,
        namespace: &str,
        client: &Client,
        objects: &ObjectCaches,
    ) -> Result<(BootstrapState, Option<(String, String)>), MachineError> {
        let spec_name = machine
            .spec
            .bootstrap
            .data_secret_name
            .clone()
            .filter(|n| !n.is_empty());
        let Some(reference) = machine
            .spec
            .bootstrap
            .config_ref
            .clone()
            .filter(|r| !r.name.is_empty())
        else {
            return Ok((
                if spec_name.is_some() {
                    BootstrapState::Ready
                } else {
                    BootstrapState::Missing(
                        "neither spec.bootstrap.configRef nor spec.bootstrap.dataSecretName is set"
                            .into(),
                    )
                },
                None,
            ));
        };
        let api = Referenced::resolve(client, namespace, &reference).await?;
        let Some(config) = api.get_cached(objects, cached_kinds()).await? else {
            return Ok((
                if spec_name.is_some() {
                    BootstrapState::Ready
                } else {
                    BootstrapState::Missing(format!(
                        "{} {} does not exist",
                        reference.kind, reference.name
                    ))
                },
                None,
            ));
        };
        api.adopt(
            &config,
            contract::owner_reference(machine, true),
            &["MachineSet"],
            &[(LABEL_CLUSTER_NAME, machine.spec.cluster_name.as_str())],
        )
        .await?;
        let failure = bootstrap_failure(&config);
        let state = match contract::data_secret_name(&config) {
            Some(name) => {
                if spec_name.as_deref() != Some(name.as_str()) {
                    let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
                    if let Some(updated) = patch::patch_field(
                        &machines,
                        &*machine,
                        "spec",
                        &json!({}),
                        &json!({"bootstrap": {"dataSecretName": name}}),
                    )
                    .await?
                    {
                        *machine = updated;
                    }
                }
                BootstrapState::Ready
            }
            None if spec_name.is_some() => BootstrapState::Ready,
            None => BootstrapState::Waiting(match contract::not_ready_reason(&config) {
                Some(why) => format!(
                    "{} {} has no data Secret yet: {why}",
                    reference.kind, reference.name
                ),
                None => format!(
                    "{} {} has no data Secret yet",
                    reference.kind, reference.name
                ),
            }),
        };
        Ok((state, failure))
    }

    /// Reads the infrastructure step; copies `providerID` (and the failure domain) into the spec.
    async fn infrastructure(
        &self,
        machine: &mut Machine,
        namespace: &str,
        client: &Client,
        objects: &ObjectCaches,
    ) -> Result<
        (
            InfraState,
            Option<Vec<Value>>,
            Option<String>,
            Option<String>,
        ),
        MachineError,
    > {
        let reference = &machine.spec.infrastructure_ref;
        if reference.name.is_empty() {
            return Ok((
                InfraState::Missing("spec.infrastructureRef is not set".into()),
                None,
                None,
                None,
            ));
        }
        let api = Referenced::resolve(client, namespace, reference).await?;
        let Some(infra) = api.get_cached(objects, cached_kinds()).await? else {
            return Ok((
                InfraState::Missing(format!(
                    "{} {} does not exist",
                    reference.kind, reference.name
                )),
                None,
                None,
                machine.spec.provider_id.clone(),
            ));
        };
        api.adopt(
            &infra,
            contract::owner_reference(machine, true),
            &["MachineSet"],
            &[(LABEL_CLUSTER_NAME, machine.spec.cluster_name.as_str())],
        )
        .await?;
        let addresses = contract::at(&infra.data, "status.addresses")
            .as_array()
            .cloned();
        let failure_domain = contract::at(&infra.data, "status.failureDomain")
            .as_str()
            .map(str::to_owned);
        let provider_id = contract::at(&infra.data, "spec.providerID")
            .as_str()
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        if !contract::provisioned(&infra) || provider_id.is_none() {
            let why = contract::not_ready_reason(&infra);
            let what = if contract::provisioned(&infra) {
                "has no spec.providerID yet"
            } else {
                "is not provisioned yet"
            };
            return Ok((
                InfraState::Waiting(match why {
                    Some(why) => format!("{} {} {what}: {why}", reference.kind, reference.name),
                    None => format!("{} {} {what}", reference.kind, reference.name),
                }),
                addresses,
                failure_domain,
                machine.spec.provider_id.clone(),
            ));
        }
        let mut spec_patch = serde_json::Map::new();
        if machine.spec.provider_id != provider_id {
            spec_patch.insert("providerID".into(), json!(provider_id));
        }
        if machine.spec.failure_domain.is_none() && failure_domain.is_some() {
            spec_patch.insert("failureDomain".into(), json!(failure_domain));
        }
        if !spec_patch.is_empty() {
            let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
            if let Some(updated) = patch::patch_field(
                &machines,
                &*machine,
                "spec",
                &json!({}),
                &Value::Object(spec_patch),
            )
            .await?
            {
                *machine = updated;
            }
        }
        Ok((
            InfraState::Provisioned,
            addresses,
            failure_domain,
            provider_id,
        ))
    }

    /// Finds the Node by providerID and keeps its labels and annotations in line.
    async fn node(
        &self,
        machine: &Machine,
        namespace: &str,
        provider_id: Option<&str>,
        client: &Client,
    ) -> Result<(NodeState, Option<Value>), MachineError> {
        let Some(provider_id) = provider_id else {
            return Ok((NodeState::NoProviderId, None));
        };
        let key = cluster_key(machine, namespace);
        let workloads = self.workloads(client);
        let workload = match workloads.client(&key).await {
            Ok(c) => c,
            Err(err) => {
                return Ok((
                    NodeState::Unreachable(
                        capstan_runtime::controller::ErrorChain(&err).to_string(),
                    ),
                    None,
                ));
            }
        };
        let nodes: Api<Node> = Api::all(workload);
        let has_id =
            |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id);
        // A known Node is read by name (one small request per health check); the list by
        // providerID is only needed until the Node is first found, or if it was replaced.
        let known = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str);
        let by_name = match known {
            Some(name) => match nodes.get_opt(name).await {
                Ok(found) => found.filter(|n| has_id(n)),
                Err(err) => {
                    workloads.forget(&key);
                    return Ok((
                        NodeState::Unreachable(format!(
                            "reading Node {name} in cluster {key}: {err}"
                        )),
                        None,
                    ));
                }
            },
            None => None,
        };
        let found = match by_name {
            Some(node) => Some(node),
            None => match nodes.list(&ListParams::default()).await {
                Ok(list) => list.items.into_iter().find(|n| has_id(n)),
                Err(err) => {
                    workloads.forget(&key);
                    return Ok((
                        NodeState::Unreachable(format!("listing Nodes in cluster {key}: {err}")),
                        None,
                    ));
                }
            },
        };
        let Some(node) = found else {
            return Ok((
                NodeState::NotFound(format!(
                    "no Node with providerID {provider_id} in cluster {key} yet"
                )),
                None,
            ));
        };
        let name = node.name_any();
        // Labels and annotations capstan manages on the Node; only missing or different ones are
        // written, so the Node's other labels are never touched.
        let mut labels = serde_json::Map::new();
        for (k, v) in node_labels(machine) {
            if node.labels().get(&k) != Some(&v) {
                labels.insert(k, json!(v));
            }
        }
        let owner = machine
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true));
        let wanted_annotations = [
            (
                "cluster.x-k8s.io/cluster-name",
                Some(machine.spec.cluster_name.clone()),
            ),
            (
                "cluster.x-k8s.io/cluster-namespace",
                Some(namespace.to_owned()),
            ),
            ("cluster.x-k8s.io/machine", Some(machine.name_any())),
            ("cluster.x-k8s.io/owner-kind", owner.map(|o| o.kind.clone())),
            ("cluster.x-k8s.io/owner-name", owner.map(|o| o.name.clone())),
        ];
        let mut annotations = serde_json::Map::new();
        for (k, v) in wanted_annotations {
            if let Some(v) = v
                && node.annotations().get(k) != Some(&v)
            {
                annotations.insert(k.to_owned(), json!(v));
            }
        }
        if !labels.is_empty() || !annotations.is_empty() {
            let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
            nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(node_error("labelling", &name))?;
        }
        let status = node.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready");
        let node_info = status
            .node_info
            .as_ref()
            // Whole, as upstream copies it: its fields are all required in `status.nodeInfo`.
            .and_then(|info| serde_json::to_value(info).ok());
        Ok((
            NodeState::Found {
                name,
                ready: ready.is_some_and(|c| c.status == "True"),
                message: ready
                    .and_then(|c| c.message.clone())
                    .unwrap_or_else(|| "no Ready condition yet".into()),
            },
            node_info,
        ))
    }

    async fn cluster_deleting(
        &self,
        machine: &Machine,
        namespace: &str,
        context: &Context,
    ) -> Result<bool, MachineError> {
        let cluster = context
            .clusters()
            .get(namespace, &machine.spec.cluster_name)
            .await
            .map_err(|source| MachineError::Cluster {
                namespace: namespace.to_owned(),
                name: machine.spec.cluster_name.clone(),
                source: Box::new(source),
            })?;
        Ok(cluster.is_none_or(|c| c.metadata.deletion_timestamp.is_some()))
    }
}

/// The steps of a Machine's deletion, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionStep {
    /// A pre-drain hook annotation holds the Machine.
    PreDrainHook(String),
    /// The Node is being drained.
    Draining(String),
    /// A pre-terminate hook annotation holds the Machine.
    PreTerminateHook(String),
    /// The infrastructure machine is being deleted.
    DeletingInfrastructure,
    /// The bootstrap config is being deleted.
    DeletingBootstrap,
    /// All released.
    Done,
}

impl DeletionStep {
    fn reason(&self) -> &'static str {
        match self {
            Self::PreDrainHook(_) => "WaitingForPreDrainHook",
            Self::Draining(_) => "DrainingNode",
            Self::PreTerminateHook(_) => "WaitingForPreTerminateHook",
            Self::DeletingInfrastructure => "WaitingForInfrastructureDeletion",
            Self::DeletingBootstrap => "WaitingForBootstrapDeletion",
            Self::Done => "DeletionCompleted",
        }
    }

    fn message(&self) -> String {
        match self {
            Self::PreDrainHook(hook) => format!("waiting for pre-drain hook {hook} to be removed"),
            Self::Draining(summary) => format!("draining Node: {summary}"),
            Self::PreTerminateHook(hook) => {
                format!("waiting for pre-terminate hook {hook} to be removed")
            }
            Self::DeletingInfrastructure => {
                "waiting for the infrastructure machine to be deleted".into()
            }
            Self::DeletingBootstrap => "waiting for the bootstrap config to be deleted".into(),
            Self::Done => String::new(),
        }
    }
}

/// The first hook annotation with `prefix`, if any.
pub fn hook(machine: &Machine, prefix: &str) -> Option<String> {
    machine
        .annotations()
        .keys()
        .find(|k| k.starts_with(prefix))
        .cloned()
}

/// Whether the drain timeout has passed since `started` (RFC 3339) at `now`.
pub fn drain_timed_out(machine: &Machine, started: Option<&str>, now: jiff::Timestamp) -> bool {
    let timeout = machine
        .spec
        .deletion
        .as_ref()
        .and_then(|d| d.node_drain_timeout_seconds)
        .filter(|s| *s > 0)
        .map_or(DEFAULT_NODE_DRAIN_TIMEOUT, |s| {
            Duration::from_secs(u64::from(s.unsigned_abs()))
        });
    let Some(started) = started.and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
        return false;
    };
    let elapsed = now.as_second().saturating_sub(started.as_second());
    elapsed >= i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX)
}

impl Reconciler for MachineController {
    type Object = Machine;
    type Error = MachineError;

    fn name(&self) -> &'static str {
        MACHINE_CONTROLLER
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(MACHINE_FINALIZER)
    }

    fn cluster_name(&self, object: &Machine) -> Option<String> {
        Some(object.spec.cluster_name.clone()).filter(|c| !c.is_empty())
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn cached_kinds(&self) -> Vec<ApiResource> {
        cached_kinds().to_vec()
    }

    async fn reconcile(
        &self,
        machine: Arc<Machine>,
        context: Arc<Context>,
    ) -> Result<Action, MachineError> {
        let namespace = machine.namespace().ok_or(MachineError::NoNamespace)?;
        let client = context.client().clone();
        let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        // The cluster-name label ties the Machine to its Cluster (pause, counts, deletion).
        if !machine.spec.cluster_name.is_empty()
            && machine.labels().get(LABEL_CLUSTER_NAME) != Some(&machine.spec.cluster_name)
        {
            let patch =
                json!({"metadata": {"labels": {LABEL_CLUSTER_NAME: machine.spec.cluster_name}}});
            patch::patch_field(
                &machines,
                &*machine,
                "metadata",
                &json!({}),
                &patch["metadata"],
            )
            .await?;
            return Ok(Action::await_change());
        }
        // Spec writes below return the object at its new resourceVersion, which the status patch
        // is then guarded by.
        let mut current = (*machine).clone();
        let objects = context.objects();
        let (bootstrap, bootstrap_failure) = self
            .bootstrap(&mut current, &namespace, &client, objects)
            .await?;
        let (infrastructure, addresses, failure_domain, provider_id) = self
            .infrastructure(&mut current, &namespace, &client, objects)
            .await?;
        let (node, node_info) = self
            .node(&machine, &namespace, provider_id.as_deref(), &client)
            .await?;
        let observed = Observed {
            bootstrap,
            bootstrap_failure,
            infrastructure,
            node,
            addresses,
            failure_domain,
            node_info,
        };
        let status = compute_status(&machine, &observed, false, &conditions::now());
        let before = machine.status.clone().unwrap_or_default();
        patch::patch_status(&machines, &current, &before, &status).await?;
        let waiting_to_be_available = conditions::get(&status.conditions, AVAILABLE)
            .is_some_and(|c| c.reason.as_deref() == Some("WaitingForMinReadySeconds"));
        Ok(
            if status.phase.as_deref() == Some(PHASE_RUNNING) && !waiting_to_be_available {
                Action::requeue(HEALTH_REQUEUE)
            } else {
                Action::requeue(WAIT_REQUEUE)
            },
        )
    }

    async fn cleanup(
        &self,
        machine: Arc<Machine>,
        context: Arc<Context>,
    ) -> Result<Cleanup, MachineError> {
        let namespace = machine.namespace().ok_or(MachineError::NoNamespace)?;
        let client = context.client().clone();
        let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        let before = machine.status.clone().unwrap_or_default();
        let mut status = before.clone();
        status.phase = Some(PHASE_DELETING.to_owned());
        let now_text = conditions::now();
        let step = self
            .deletion_step(&machine, &namespace, &context, &mut status, &now_text)
            .await?;
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(
                DELETING,
                TRUE,
                step.reason(),
                step.message(),
                machine.metadata.generation,
            ),
            &now_text,
        );
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(READY, FALSE, "Deleting", "", machine.metadata.generation),
            &now_text,
        );
        let patching = std::time::Instant::now();
        patch::patch_status(&machines, &*machine, &before, &status).await?;
        if let DeletionStep::Draining(summary) = &step {
            tracing::debug!(machine = %machine.name_any(), %summary, patch = ?patching.elapsed(), "draining");
        }
        Ok(match step {
            DeletionStep::Done => Cleanup::Done,
            _ => Cleanup::Pending(Action::requeue(DELETE_REQUEUE)),
        })
    }
}

impl MachineController {
    /// Runs the current deletion step once and says where deletion stands.
    async fn deletion_step(
        &self,
        machine: &Machine,
        namespace: &str,
        context: &Context,
        status: &mut MachineStatus,
        now_text: &str,
    ) -> Result<DeletionStep, MachineError> {
        if let Some(hook) = hook(machine, PRE_DRAIN_HOOK_PREFIX) {
            return Ok(DeletionStep::PreDrainHook(hook));
        }
        let node_name = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let client = context.client();
        let cluster_deleting = self.cluster_deleting(machine, namespace, context).await?;
        let key = cluster_key(machine, namespace);
        // No drain when the whole cluster goes (its workloads go with it) or when excluded.
        if let Some(node) = &node_name
            && !cluster_deleting
            && !machine.annotations().contains_key(ANNOTATION_EXCLUDE_DRAIN)
        {
            let deletion = status
                .deletion
                .get_or_insert_with(MachineDeletionStatus::default);
            if deletion.node_drain_start_time.is_none() {
                tracing::info!(machine = %machine.name_any(), %node, "draining the Node");
            }
            let started = deletion
                .node_drain_start_time
                .get_or_insert_with(|| now_text.to_owned())
                .clone();
            if !drain_timed_out(machine, Some(&started), jiff::Timestamp::now()) {
                let outcome = match self.workloads(client).client(&key).await {
                    Ok(workload) => drain::drain_pass(&workload, node).await?,
                    Err(err) => DrainOutcome {
                        blocked: vec![(
                            String::new(),
                            capstan_runtime::controller::ErrorChain(&err).to_string(),
                        )],
                        ..DrainOutcome::default()
                    },
                };
                if !outcome.done() {
                    return Ok(DeletionStep::Draining(outcome.summary()));
                }
            }
        }
        if let Some(hook) = hook(machine, PRE_TERMINATE_HOOK_PREFIX) {
            return Ok(DeletionStep::PreTerminateHook(hook));
        }
        let infra_ref = &machine.spec.infrastructure_ref;
        if !infra_ref.name.is_empty() {
            let api = Referenced::resolve(client, namespace, infra_ref).await?;
            if api
                .get_cached(context.objects(), cached_kinds())
                .await?
                .is_some()
            {
                api.delete().await?;
                return Ok(DeletionStep::DeletingInfrastructure);
            }
        }
        if let Some(reference) = machine
            .spec
            .bootstrap
            .config_ref
            .as_ref()
            .filter(|r| !r.name.is_empty())
        {
            let api = Referenced::resolve(client, namespace, reference).await?;
            if api
                .get_cached(context.objects(), cached_kinds())
                .await?
                .is_some()
            {
                api.delete().await?;
                return Ok(DeletionStep::DeletingBootstrap);
            }
        }
        if let Some(node) = &node_name
            && !cluster_deleting
        {
            // Best effort: a workload cluster that does not answer must not keep the Machine.
            match self.workloads(client).client(&key).await {
                Ok(workload) => {
                    let nodes: Api<Node> = Api::all(workload);
                    match nodes.delete(node, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(err) => {
                            tracing::warn!(machine = %machine.name_any(), node, error = %err, "deleting the Node failed; continuing")
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(machine = %machine.name_any(), node, error = %capstan_runtime::controller::ErrorChain(&err), "workload cluster unreachable; the Node is left behind")
                }
            }
        }
        Ok(DeletionStep::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::capi::v1beta2::{MachineDeletion, MachineSpec};

    #[test]
    fn available_is_ready_for_min_ready_seconds() {
        let ready_at = |status: &str| {
            vec![capstan_model::meta::Condition {
                type_: READY.into(),
                status: status.into(),
                last_transition_time: Some("2030-01-01T00:00:00Z".into()),
                ..Default::default()
            }]
        };
        let mut waiting = machine(&[]);
        waiting.spec.min_ready_seconds = Some(30);
        // (machine, its conditions, now) → (available, reason)
        let cases = [
            (
                machine(&[]),
                ready_at(TRUE),
                "2030-01-01T00:00:00Z",
                (true, "Available"),
            ),
            (
                machine(&[]),
                ready_at(FALSE),
                "2030-01-01T00:00:00Z",
                (false, "NotReady"),
            ),
            (
                machine(&[]),
                vec![],
                "2030-01-01T00:00:00Z",
                (false, "NotReady"),
            ),
            (
                waiting.clone(),
                ready_at(TRUE),
                "2030-01-01T00:00:29Z",
                (false, "WaitingForMinReadySeconds"),
            ),
            (
                waiting,
                ready_at(TRUE),
                "2030-01-01T00:00:30Z",
                (true, "Available"),
            ),
        ];
        for (machine, conditions, now, expected) in cases {
            assert_eq!(available(&machine, &conditions, now), expected, "{now}");
        }
        // compute_status writes it beside Ready.
        let status = compute_status(
            &machine(&[]),
            &observed(
                BootstrapState::Ready,
                InfraState::Provisioned,
                NodeState::NoProviderId,
            ),
            false,
            "2030-01-01T00:00:00Z",
        );
        let condition = conditions::get(&status.conditions, AVAILABLE)
            .unwrap_or_else(|| panic!("no Available"));
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_deref()),
            (FALSE, Some("NotReady"))
        );
    }

    fn machine(labels: &[(&str, &str)]) -> Machine {
        let mut m = Machine::new(
            "m",
            Some("ns"),
            MachineSpec {
                cluster_name: "c".into(),
                ..MachineSpec::default()
            },
        );
        m.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        m
    }

    fn observed(
        bootstrap: BootstrapState,
        infrastructure: InfraState,
        node: NodeState,
    ) -> Observed {
        Observed {
            bootstrap,
            bootstrap_failure: None,
            infrastructure,
            node,
            addresses: None,
            failure_domain: None,
            node_info: None,
        }
    }

    #[test]
    fn a_failed_bootstrap_step_shows_on_the_machine() {
        let config: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": "m"},
            "status": {"conditions": [{"type": "BootstrapSucceeded", "status": "False",
                "reason": "BootstrapCommandFailed",
                "message": "step 1/3 failed with exit code 1: sh /etc/prepare.sh"}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let failure = bootstrap_failure(&config);
        assert_eq!(
            failure.as_ref().map(|(reason, _)| reason.as_str()),
            Some("BootstrapCommandFailed")
        );
        let mut seen = observed(
            BootstrapState::Ready,
            InfraState::Provisioned,
            NodeState::NoProviderId,
        );
        seen.bootstrap_failure = failure;
        let status = compute_status(&machine(&[]), &seen, false, "t");
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == BOOTSTRAP_CONFIG_READY)
            .unwrap_or_else(|| panic!("no {BOOTSTRAP_CONFIG_READY}"));
        assert_eq!(condition.status, FALSE);
        assert_eq!(condition.reason.as_deref(), Some("BootstrapCommandFailed"));
        assert!(
            condition
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("sh /etc/prepare.sh")
        );
        // Without a report, delivered data is all the Machine knows.
        seen.bootstrap_failure = None;
        let status = compute_status(&machine(&[]), &seen, false, "t");
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == BOOTSTRAP_CONFIG_READY && c.status == TRUE)
        );
    }

    #[test]
    fn phases_and_conditions_table() {
        let found = |ready| NodeState::Found {
            name: "n".into(),
            ready,
            message: "kubelet not ready".into(),
        };
        let waiting = || InfraState::Waiting("Metal3Machine m is not provisioned yet".into());
        let cases = [
            (
                observed(
                    BootstrapState::Waiting("KubeadmConfig m has no data Secret yet".into()),
                    waiting(),
                    NodeState::NoProviderId,
                ),
                false,
                PHASE_PENDING,
                FALSE,
                "WaitingForDataSecret",
            ),
            (
                observed(
                    BootstrapState::Missing("x".into()),
                    waiting(),
                    NodeState::NoProviderId,
                ),
                false,
                PHASE_PENDING,
                FALSE,
                "BootstrapConfigDoesNotExist",
            ),
            (
                observed(BootstrapState::Ready, waiting(), NodeState::NoProviderId),
                false,
                PHASE_PROVISIONING,
                FALSE,
                "WaitingForInfrastructure",
            ),
            (
                observed(
                    BootstrapState::Ready,
                    InfraState::Provisioned,
                    NodeState::NotFound("no Node".into()),
                ),
                false,
                PHASE_PROVISIONED,
                UNKNOWN,
                "WaitingForNode",
            ),
            (
                observed(
                    BootstrapState::Ready,
                    InfraState::Provisioned,
                    NodeState::Unreachable("down".into()),
                ),
                false,
                PHASE_PROVISIONED,
                UNKNOWN,
                "WorkloadClusterUnreachable",
            ),
            (
                observed(BootstrapState::Ready, InfraState::Provisioned, found(false)),
                false,
                PHASE_RUNNING,
                FALSE,
                "NodeNotReady",
            ),
            (
                observed(BootstrapState::Ready, InfraState::Provisioned, found(true)),
                false,
                PHASE_RUNNING,
                TRUE,
                "NodeReady",
            ),
            (
                observed(BootstrapState::Ready, InfraState::Provisioned, found(true)),
                true,
                PHASE_DELETING,
                TRUE,
                "NodeReady",
            ),
        ];
        for (i, (observed, deleting, want_phase, want_status, want_reason)) in
            cases.into_iter().enumerate()
        {
            let status = compute_status(&machine(&[]), &observed, deleting, "t");
            assert_eq!(status.phase.as_deref(), Some(want_phase), "case {i}");
            // The condition of the first step not done says what the Machine waits for.
            let waiting_on = [BOOTSTRAP_CONFIG_READY, INFRASTRUCTURE_READY, NODE_READY]
                .iter()
                .filter_map(|t| conditions::get(&status.conditions, t))
                .find(|c| c.status != TRUE)
                .or_else(|| conditions::get(&status.conditions, NODE_READY))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                (waiting_on.status.as_str(), waiting_on.reason.as_deref()),
                (want_status, Some(want_reason)),
                "case {i}"
            );
            let ready = want_phase == PHASE_RUNNING && want_status == TRUE;
            assert_eq!(
                conditions::is_true(&status.conditions, READY),
                ready,
                "case {i}"
            );
        }
    }

    #[test]
    fn node_labels_from_machine_labels() {
        let worker = machine(&[
            ("node-role.kubernetes.io/storage", ""),
            ("node.cluster.x-k8s.io/pool", "a"),
            ("app", "x"),
        ]);
        let labels = node_labels(&worker);
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            [
                "node-role.kubernetes.io/storage",
                "node-role.kubernetes.io/worker",
                "node.cluster.x-k8s.io/pool"
            ]
        );
        let cp = machine(&[(LABEL_CONTROL_PLANE, "")]);
        assert!(node_labels(&cp).is_empty());
    }

    #[test]
    fn drain_timeout_defaults_and_overrides() {
        let mut m = machine(&[]);
        let started = "2026-01-01T00:00:00Z";
        let at = |s: &str| {
            s.parse::<jiff::Timestamp>()
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        };
        assert!(!drain_timed_out(
            &m,
            Some(started),
            at("2026-01-01T00:09:59Z")
        ));
        assert!(drain_timed_out(
            &m,
            Some(started),
            at("2026-01-01T00:10:00Z")
        ));
        m.spec.deletion = Some(MachineDeletion {
            node_drain_timeout_seconds: Some(5),
            ..MachineDeletion::default()
        });
        assert!(drain_timed_out(
            &m,
            Some(started),
            at("2026-01-01T00:00:05Z")
        ));
        assert!(!drain_timed_out(&m, None, at("2030-01-01T00:00:00Z")));
    }

    #[test]
    fn hooks_are_found_by_prefix() {
        let mut m = machine(&[]);
        assert_eq!(hook(&m, PRE_DRAIN_HOOK_PREFIX), None);
        m.metadata.annotations = Some(
            [(
                format!("{PRE_DRAIN_HOOK_PREFIX}/backup"),
                "owner".to_owned(),
            )]
            .into(),
        );
        assert_eq!(
            hook(&m, PRE_DRAIN_HOOK_PREFIX).as_deref(),
            Some("pre-drain.delete.hook.machine.cluster.x-k8s.io/backup")
        );
        assert_eq!(hook(&m, PRE_TERMINATE_HOOK_PREFIX), None);
    }
}
