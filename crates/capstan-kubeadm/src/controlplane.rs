//! The KubeadmControlPlane controller (`controlplane.cluster.x-k8s.io/v1beta2`).
//!
//! One pass, one change at a time:
//! 1. Find the Cluster whose `spec.controlPlaneRef` names this control plane; ensure the cluster's
//!    certificates and, once the Cluster has a `controlPlaneEndpoint`, the admin kubeconfig, whose
//!    client certificate is renewed when less than half of its year is left
//!    ([`certs::ensure_kubeconfig`]); its expiry is recorded in [`ANNOTATION_KUBECONFIG_EXPIRY`].
//! 2. List its Machines (labels `cluster.x-k8s.io/cluster-name`, `cluster.x-k8s.io/control-plane`,
//!    `cluster.x-k8s.io/control-plane-name`) and make sure each has its KubeadmConfig and infra
//!    machine (same name, owned by the Machine): the Machine is created first, so a restart between
//!    the creates only leaves work the next pass finishes.
//! 3. Initialised = the workload API answers and has `kube-system/kubeadm-config` (what kubeadm init
//!    writes); remembered in status once seen.
//! 4. Decide: no Machine → create the first (init configuration); not initialised, or a Machine not
//!    ready (no `nodeRef`) or being deleted → wait; a Machine a MachineHealthCheck handed over
//!    (`OwnerRemediated` False) → remove it (never the last one; the scale-up replaces it);
//!    outdated Machines (version, the hash of the kubeadm config spec and machine template,
//!    created before a passed `spec.rollout.after`, or certificates expiring within
//!    `spec.rollout.before.certificatesExpiryDays` — v1beta1 `rolloutBefore` — by
//!    [`ANNOTATION_CERTIFICATES_EXPIRY`], recorded on each Machine's KubeadmConfig once it has a
//!    Node) → roll: create while below `replicas + maxSurge`,
//!    else remove the oldest outdated (maxSurge 0: remove first, then create); otherwise scale to
//!    `replicas` (join one at a time, remove the oldest first).
//! 5. Removing a Machine: refuse when the etcd members left would be fewer than a quorum of the
//!    smaller cluster; move raft leadership off its member, remove the member, then delete the
//!    Machine.
//! 6. Status: `replicas`, `readyReplicas`, `availableReplicas`, `upToDateReplicas` (and
//!    `updatedReplicas`), `version` (oldest Machine's), `initialization.controlPlaneInitialized` (and
//!    `initialized`, `ready`), `selector` (for `scale`), conditions `Available`, `SpecAccepted`,
//!    `RollingOut`, `Scaling`, `MachinesReady`, `EtcdClusterHealthy`. A pass that waits for a
//!    Machine to get a Node says why that Machine is not ready (its first condition that is not
//!    True, which carries its bootstrap config's or infrastructure machine's reason): in `Scaling`,
//!    in `MachinesReady`, and during a rollout in `RollingOut` (`the rollout waits for Machine M to
//!    get a Node: InfrastructureReady … NoAvailableHost: …`).
//!
//! Refused with a condition and a Warning Event naming what to do: replicas below 1; a version more
//! than one minor above the oldest Machine's (kubeadm upgrades one minor at a time); `maxSurge: 0`
//! with fewer than 3 replicas (the replacement would remove the only etcd quorum); removing a
//! Machine while etcd is degraded. An even replica count is accepted, as Cluster API accepts it,
//! with a Warning: it tolerates no more failures than one Machine fewer.

use crate::bootstrap::{BootstrapError, api_error};
use crate::certs;
use crate::kubeadm_api::KubeVersion;
use capstan_model::capi::v1beta2::{Cluster, Machine};
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_model::meta::{Condition, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::conditions::{self, FALSE, TRUE, UNKNOWN};
use capstan_runtime::{Action, Cleanup, Context, EventType, Reconciler};
use capstan_workload::{ClusterKey, SharedEtcdMembership, SharedWorkloadAccess};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Name of the controller.
pub const CONTROLLER: &str = "kubeadm-control-plane";
/// Finalizer of KubeadmControlPlanes: their Machines go first.
pub const FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";
/// Label naming the control plane a Machine belongs to.
pub const LABEL_CONTROL_PLANE_NAME: &str = "cluster.x-k8s.io/control-plane-name";
/// Annotation on Machines: the hash of the spec they were made from.
pub const ANNOTATION_SPEC_HASH: &str = "controlplane.capstan.io/spec-hash";
/// Annotation on Machines: `init` for the Machine that runs `kubeadm init`, else `join`.
pub const ANNOTATION_ROLE: &str = "controlplane.capstan.io/kubeadm-role";
/// Annotation with when a control-plane machine's certificates expire (RFC 3339), as Cluster API
/// records it: on the Machine's KubeadmConfig, written by this controller (the Node's registration,
/// when `kubeadm init|join` made the certificates, plus [`NODE_CERTIFICATE_VALIDITY`]); on the
/// Machine itself only as a user's override, which wins.
pub const ANNOTATION_CERTIFICATES_EXPIRY: &str = "machine.cluster.x-k8s.io/certificates-expiry";
/// Annotation on a KubeadmControlPlane: when the client certificate of the admin kubeconfig
/// (`<cluster>-kubeconfig`) expires (RFC 3339), so it can be shown without reading the Secret.
pub const ANNOTATION_KUBECONFIG_EXPIRY: &str =
    "controlplane.capstan.io/kubeconfig-certificate-expiry";
/// How long the certificates kubeadm makes on a node are valid.
pub const NODE_CERTIFICATE_VALIDITY: jiff::SignedDuration =
    jiff::SignedDuration::from_secs(365 * 24 * 3600);
/// How often a control plane that is changing is looked at again (the workload cluster and etcd are
/// not watched).
const PROGRESS: Duration = Duration::from_secs(5);
/// How often a control plane waiting on its (watched) Machines is looked at again.
const WAITING_ON_MACHINES: Duration = Duration::from_secs(30);
/// How often a settled control plane is looked at again.
const SETTLED: Duration = Duration::from_secs(60);

/// What the control-plane controller needs besides the API.
#[derive(Clone, Default)]
pub struct ControlPlaneSettings {
    /// Access to workload clusters (`kubeadm-config`); without it the control plane never counts as
    /// initialised.
    pub workloads: Option<SharedWorkloadAccess>,
    /// etcd membership; without it Machines are removed without touching etcd.
    pub etcd: Option<SharedEtcdMembership>,
}

/// The KubeadmControlPlane controller.
pub struct ControlPlaneController {
    settings: ControlPlaneSettings,
}

impl ControlPlaneController {
    pub fn new(settings: ControlPlaneSettings) -> Self {
        Self { settings }
    }
}

fn kcp_resource() -> ApiResource {
    ApiResource {
        group: "controlplane.cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
        kind: "KubeadmControlPlane".into(),
        plural: "kubeadmcontrolplanes".into(),
    }
}

fn machine_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    }
}

/// `value` with every object's keys sorted, so its hash does not depend on key order.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The hash of what Machines are made from besides the version: the kubeadm config spec and the
/// machine template.
pub fn spec_hash(spec: &Value) -> String {
    let relevant = json!({
        "kubeadmConfigSpec": spec.get("kubeadmConfigSpec"),
        "infrastructureRef": spec.pointer("/machineTemplate/spec/infrastructureRef"),
        "metadata": spec.pointer("/machineTemplate/metadata"),
    });
    let digest = Sha256::digest(canonical(&relevant).to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The kubeadm config spec of a new Machine: init (ClusterConfiguration + InitConfiguration) for the
/// first, join with `controlPlane` for the others.
pub fn machine_config_spec(kcp_spec: &Value, init: bool) -> Value {
    let mut spec = kcp_spec
        .get("kubeadmConfigSpec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Value::Object(map) = &mut spec {
        if init {
            map.remove("joinConfiguration");
        } else {
            map.remove("initConfiguration");
            map.remove("clusterConfiguration");
            let join = map.entry("joinConfiguration").or_insert_with(|| json!({}));
            if let Value::Object(join) = join {
                join.entry("controlPlane").or_insert_with(|| json!({}));
            }
        }
    }
    spec
}

/// One Machine as the decision sees it.
#[derive(Clone, Debug)]
struct Member {
    machine: Machine,
    ready: bool,
    up_to_date: bool,
    deleting: bool,
    /// A MachineHealthCheck asked the owner to remediate it (`OwnerRemediated` False).
    unhealthy: bool,
    /// Its certificates expire within `rollout.before.certificatesExpiryDays`.
    certificates_expiring: bool,
}

impl Member {
    fn node(&self) -> Option<String> {
        self.machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|n| n.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// What a pass does.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Create {
        init: bool,
    },
    Remove(String),
    Wait(String),
    /// Nothing changes until `machine` has a Node; `message` says what it waits for itself.
    WaitForMachine {
        machine: String,
        message: String,
    },
    Refuse {
        reason: &'static str,
        message: String,
    },
    Settled,
}

/// The conditions that say why a Machine is not ready, in the order it needs them.
const MACHINE_PREREQUISITES: [&str; 3] =
    ["BootstrapConfigReady", "InfrastructureReady", "NodeReady"];

/// Why `machine` is not ready, from its own conditions: the first of
/// [`MACHINE_PREREQUISITES`] that is not True, as `TYPE REASON: MESSAGE` (its message carries
/// the bootstrap config's or infrastructure machine's reason, e.g. a Metal3Machine's
/// `NoAvailableHost` and which hosts exist), else its `Ready` reason.
fn not_ready_because(machine: &Machine) -> Option<String> {
    let conditions = machine.status.as_ref().map(|s| s.conditions.as_slice())?;
    let describe = |c: &Condition| {
        let mut text = c.type_.clone();
        if let Some(reason) = c.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push(' ');
            text.push_str(reason);
        }
        if let Some(message) = c.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(": ");
            text.push_str(message);
        }
        text
    };
    MACHINE_PREREQUISITES
        .iter()
        .filter_map(|t| conditions::get(conditions, t))
        .find(|c| c.status != TRUE)
        .or_else(|| conditions::get(conditions, "Ready").filter(|c| c.status != TRUE))
        .map(describe)
}

/// `MachinesReady`, as upstream aggregates its Machines' `Ready`: True `Ready` when every one is,
/// True `NoReplicas` without Machines, else False `NotReady` (Unknown `ReadyUnknown` when none is
/// False) naming each Machine that is not, and why.
fn machines_ready(members: &[Member], generation: Option<i64>) -> Condition {
    if members.is_empty() {
        return conditions::condition("MachinesReady", TRUE, "NoReplicas", "", generation);
    }
    let mut lines = Vec::new();
    let mut any_false = false;
    for member in members {
        let ready = member
            .machine
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, "Ready"));
        match ready.map(|c| c.status.as_str()) {
            Some(TRUE) => continue,
            Some(FALSE) => any_false = true,
            _ => {}
        }
        let why =
            not_ready_because(&member.machine).unwrap_or_else(|| "no Ready condition yet".into());
        lines.push(format!("* Machine {}: {why}", member.machine.name_any()));
    }
    if lines.is_empty() {
        return conditions::condition("MachinesReady", TRUE, "Ready", "", generation);
    }
    let (status, reason) = if any_false {
        (FALSE, "NotReady")
    } else {
        (UNKNOWN, "ReadyUnknown")
    };
    conditions::condition(
        "MachinesReady",
        status,
        reason,
        lines.join("\n"),
        generation,
    )
}

fn max_surge(spec: &Value) -> i64 {
    spec.pointer("/rollout/strategy/rollingUpdate/maxSurge")
        .and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .unwrap_or(1)
}

/// The next step, from the Machines and the spec.
fn decide(members: &[Member], replicas: i64, surge: i64, initialized: bool) -> Step {
    if let Some(deleting) = members.iter().find(|m| m.deleting) {
        return Step::Wait(format!(
            "Machine {} is being deleted",
            deleting.machine.name_any()
        ));
    }
    if members.is_empty() {
        return Step::Create { init: !initialized };
    }
    if let Some(sick) = members.iter().find(|m| m.unhealthy) {
        let name = sick.machine.name_any();
        if members.len() < 2 {
            return Step::Refuse {
                reason: "RemediationNotPossible",
                message: format!(
                    "Machine {name} needs remediation, but it is the only control-plane Machine: replacing it would lose etcd and the cluster; repair the node, or scale to 3 replicas first"
                ),
            };
        }
        if let Some(other) = members.iter().find(|m| !m.ready && !m.unhealthy) {
            return Step::Wait(format!(
                "Machine {name} needs remediation; waiting for Machine {} to get a Node first",
                other.machine.name_any()
            ));
        }
        // The etcd quorum check of the removal still applies.
        return Step::Remove(name);
    }
    if !initialized {
        return Step::Wait(
            "waiting for the first control-plane Machine to initialize the cluster".into(),
        );
    }
    if let Some(pending) = members.iter().find(|m| !m.ready) {
        let machine = pending.machine.name_any();
        let mut message =
            format!("waiting for Machine {machine} to get a Node before the next change");
        if let Some(why) = not_ready_because(&pending.machine) {
            message.push_str(": ");
            message.push_str(&why);
        }
        return Step::WaitForMachine { machine, message };
    }
    let count = i64::try_from(members.len()).unwrap_or(i64::MAX);
    let oldest = |outdated_only: bool| {
        members
            .iter()
            .filter(|m| !outdated_only || !m.up_to_date)
            .min_by_key(|m| {
                (
                    m.machine.metadata.creation_timestamp.clone().map(|t| t.0),
                    m.machine.name_any(),
                )
            })
            .map(|m| m.machine.name_any())
    };
    if members.iter().any(|m| !m.up_to_date) {
        if surge == 0 && replicas < 3 {
            return Step::Refuse {
                reason: "MaxSurgeZeroNeedsThreeReplicas",
                message: format!(
                    "a rollout with maxSurge 0 removes a Machine before adding one, which with {replicas} replica(s) loses etcd quorum; set spec.rollout.strategy.rollingUpdate.maxSurge to 1 or use 3 or more replicas"
                ),
            };
        }
        if count < replicas + surge {
            return Step::Create { init: false };
        }
        return oldest(true).map_or(Step::Settled, Step::Remove);
    }
    if count < replicas {
        return Step::Create { init: false };
    }
    if count > replicas {
        return oldest(false).map_or(Step::Settled, Step::Remove);
    }
    Step::Settled
}

/// When a Machine's certificates expire: its own annotation (a user's override) else its
/// KubeadmConfig's; `None` when neither is set or parses.
pub fn certificates_expiry(
    machine_annotation: Option<&str>,
    config_annotation: Option<&str>,
) -> Option<jiff::Timestamp> {
    machine_annotation
        .and_then(|t| t.parse().ok())
        .or_else(|| config_annotation.and_then(|t| t.parse().ok()))
}

/// Whether certificates expiring at `expiry` expire within `days` days of `now`.
pub fn certificates_expire_within(
    expiry: jiff::Timestamp,
    now: jiff::Timestamp,
    days: i64,
) -> bool {
    expiry < now + jiff::SignedDuration::from_hours(days.saturating_mul(24))
}

/// `spec.rollout.before.certificatesExpiryDays`, when set and positive.
fn certificates_expiry_days(spec: &Value) -> Option<i64> {
    spec.pointer("/rollout/before/certificatesExpiryDays")
        .and_then(Value::as_i64)
        .filter(|d| *d > 0)
}

/// RFC 3339 at whole seconds, as annotations carry times.
fn rfc3339(at: jiff::Timestamp) -> String {
    at.round(jiff::Unit::Second).unwrap_or(at).to_string()
}

impl ControlPlaneController {
    /// Records on the KubeadmConfig of each Machine that has a Node and no known certificate
    /// expiry when its certificates expire: the Node's registration (right after `kubeadm
    /// init|join` made them) plus [`NODE_CERTIFICATE_VALIDITY`]. Returns the expiry of each Machine
    /// by name, recorded before or now.
    async fn certificate_expiries(
        &self,
        client: &Client,
        members: &[Member],
        selector: &str,
        namespace: &str,
        key: &ClusterKey,
    ) -> Result<std::collections::HashMap<String, jiff::Timestamp>, BootstrapError> {
        let configs: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &crate::bootstrap::kubeadm_config_resource(),
        );
        let listed = configs
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(api_error("listing", "KubeadmConfig", namespace, ""))?
            .items;
        let mut expiries = std::collections::HashMap::new();
        let mut workload: Option<Client> = None;
        for member in members.iter().filter(|m| !m.deleting) {
            let name = member.machine.name_any();
            let config_name = member
                .machine
                .spec
                .bootstrap
                .config_ref
                .as_ref()
                .map_or_else(|| name.clone(), |r| r.name.clone());
            let config = listed.iter().find(|c| c.name_any() == config_name);
            let known = certificates_expiry(
                member
                    .machine
                    .annotations()
                    .get(ANNOTATION_CERTIFICATES_EXPIRY)
                    .map(String::as_str),
                config
                    .and_then(|c| c.annotations().get(ANNOTATION_CERTIFICATES_EXPIRY))
                    .map(String::as_str),
            );
            if let Some(expiry) = known {
                expiries.insert(name, expiry);
                continue;
            }
            let (Some(node), Some(_)) = (member.node(), config) else {
                continue;
            };
            if workload.is_none() {
                let Some(access) = &self.settings.workloads else {
                    break;
                };
                match access.client(key).await {
                    Ok(c) => workload = Some(c),
                    // Recorded on a later pass, once the workload API answers.
                    Err(_) => break,
                }
            }
            let Some(workload) = &workload else { break };
            let Ok(Some(registered)) =
                Api::<k8s_openapi::api::core::v1::Node>::all(workload.clone())
                    .get_opt(&node)
                    .await
                    .map(|n| n.and_then(|n| n.metadata.creation_timestamp))
            else {
                continue;
            };
            let Ok(registered) = registered.0.to_string().parse::<jiff::Timestamp>() else {
                continue;
            };
            let expiry = registered + NODE_CERTIFICATE_VALIDITY;
            let patch = json!({"metadata": {"annotations": {ANNOTATION_CERTIFICATES_EXPIRY: rfc3339(expiry)}}});
            configs
                .patch(&config_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "annotating",
                    "KubeadmConfig",
                    namespace,
                    &config_name,
                ))?;
            expiries.insert(name, expiry);
        }
        Ok(expiries)
    }
}

impl ControlPlaneController {
    async fn find_cluster(
        context: &Context,
        kcp: &KubeadmControlPlane,
        namespace: &str,
    ) -> Result<Option<Cluster>, BootstrapError> {
        let clusters: Api<Cluster> = Api::namespaced(context.client().clone(), namespace);
        let name = kcp.name_any();
        let references_this = |c: &Cluster| {
            c.spec
                .control_plane_ref
                .as_ref()
                .is_some_and(|r| r.kind == "KubeadmControlPlane" && r.name == name)
        };
        // The Cluster is usually named by an owner reference or the cluster-name label: one read
        // instead of a list of every Cluster in the namespace.
        let named = kcp
            .owner_references()
            .iter()
            .find(|o| o.kind == "Cluster")
            .map(|o| o.name.clone())
            .or_else(|| kcp.labels().get(LABEL_CLUSTER_NAME).cloned());
        // From the process's table of Clusters, which the Cluster trigger updates first.
        if let Some(named) = named
            && let Some(raw) = context
                .clusters()
                .get(namespace, &named)
                .await
                .map_err(api_error("reading", "Cluster", namespace, &named))?
            && let cluster = crate::bootstrap::typed_cluster(&raw)?
            && references_this(&cluster)
        {
            return Ok(Some(cluster));
        }
        Ok(clusters
            .list(&ListParams::default())
            .await
            .map_err(api_error("listing", "Cluster", namespace, ""))?
            .items
            .into_iter()
            .find(references_this))
    }

    async fn initialized(&self, raw_kcp: &DynamicObject, key: &ClusterKey) -> bool {
        let remembered = raw_kcp
            .data
            .pointer("/status/initialization/controlPlaneInitialized")
            .and_then(Value::as_bool)
            == Some(true);
        if remembered {
            return true;
        }
        let Some(workloads) = &self.settings.workloads else {
            return false;
        };
        let Ok(client) = workloads.client(key).await else {
            return false;
        };
        let maps: Api<ConfigMap> = Api::namespaced(client, "kube-system");
        matches!(maps.get_opt("kubeadm-config").await, Ok(Some(_)))
    }

    /// Creates the KubeadmConfig and infra machine of `machine` when missing.
    async fn complete_machine(
        client: &Client,
        machine: &Machine,
        kcp_spec: &Value,
        namespace: &str,
    ) -> Result<Result<(), String>, BootstrapError> {
        let name = machine.name_any();
        let owner = OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: name.clone(),
            uid: machine.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let labels = machine.labels().clone();
        let configs: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &crate::bootstrap::kubeadm_config_resource(),
        );
        if configs
            .get_opt(&name)
            .await
            .map_err(api_error("reading", "KubeadmConfig", namespace, &name))?
            .is_none()
        {
            let init = machine
                .annotations()
                .get(ANNOTATION_ROLE)
                .map(String::as_str)
                == Some("init");
            let object = json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmConfig",
                "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
                "spec": machine_config_spec(kcp_spec, init),
            });
            let object: DynamicObject =
                serde_json::from_value(object).map_err(|e| BootstrapError::Api {
                    verb: "building",
                    kind: "KubeadmConfig",
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                    source: Box::new(kube::Error::SerdeError(e)),
                })?;
            match configs.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                Err(e) => return Err(api_error("creating", "KubeadmConfig", namespace, &name)(e)),
            }
        }
        let reference = &machine.spec.infrastructure_ref;
        let template_ref = kcp_spec
            .pointer("/machineTemplate/spec/infrastructureRef")
            .cloned()
            .unwrap_or(Value::Null);
        let template_kind = template_ref
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let template_name = template_ref
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let group = reference.api_group.clone();
        let discovered = match kube::discovery::group(client, &group).await {
            Ok(found) => found,
            Err(err) => {
                return Ok(Err(format!(
                    "API group {group} of spec.machineTemplate.spec.infrastructureRef is not served ({err}); install its provider"
                )));
            }
        };
        let (Some((machine_kind, _)), Some((template_api, _))) = (
            discovered.recommended_kind(&reference.kind),
            discovered.recommended_kind(&template_kind),
        ) else {
            return Ok(Err(format!(
                "API group {group} serves no {} or {template_kind}; check spec.machineTemplate.spec.infrastructureRef",
                reference.kind
            )));
        };
        let infra: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &machine_kind);
        if infra
            .get_opt(&name)
            .await
            .map_err(api_error("reading", "infra machine", namespace, &name))?
            .is_some()
        {
            return Ok(Ok(()));
        }
        let templates: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &template_api);
        let Some(template) = templates.get_opt(&template_name).await.map_err(api_error(
            "reading",
            "infra machine template",
            namespace,
            &template_name,
        ))?
        else {
            return Ok(Err(format!(
                "{template_kind} {namespace}/{template_name} named by spec.machineTemplate.spec.infrastructureRef does not exist; create it"
            )));
        };
        let mut infra_labels = template
            .data
            .pointer("/spec/template/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Value::Object(map) = &mut infra_labels {
            for (k, v) in &labels {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
        let object = json!({
            "apiVersion": machine_kind.api_version,
            "kind": machine_kind.kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": infra_labels,
                "annotations": template.data.pointer("/spec/template/metadata/annotations").cloned().unwrap_or_else(|| json!({})),
                "ownerReferences": [owner],
            },
            "spec": template.data.pointer("/spec/template/spec").cloned().unwrap_or_else(|| json!({})),
        });
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|e| BootstrapError::Api {
                verb: "building",
                kind: "infra machine",
                namespace: namespace.to_owned(),
                name: name.clone(),
                source: Box::new(kube::Error::SerdeError(e)),
            })?;
        match infra.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(Ok(())),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Ok(())),
            Err(e) => Err(api_error("creating", "infra machine", namespace, &name)(e)),
        }
    }

    async fn create_machine(
        client: &Client,
        kcp: &KubeadmControlPlane,
        kcp_spec: &Value,
        cluster: &str,
        namespace: &str,
        init: bool,
    ) -> Result<Result<String, String>, BootstrapError> {
        let Some(template_ref) = kcp_spec.pointer("/machineTemplate/spec/infrastructureRef") else {
            return Ok(Err("spec.machineTemplate.spec.infrastructureRef is missing; name the infra machine template".into()));
        };
        let template_kind = template_ref
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(kind) = template_kind
            .strip_suffix("Template")
            .filter(|k| !k.is_empty())
        else {
            return Ok(Err(format!(
                "spec.machineTemplate.spec.infrastructureRef.kind {template_kind:?} is not a …Template kind; name the infra machine template"
            )));
        };
        let suffix: String = {
            use rand::Rng;
            const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
            let mut rng = rand::rng();
            (0..5)
                .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
                .collect()
        };
        let kcp_name = kcp.name_any();
        let name = format!("{kcp_name}-{suffix}");
        let mut labels = kcp_spec
            .pointer("/machineTemplate/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let mut annotations = kcp_spec
            .pointer("/machineTemplate/metadata/annotations")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Value::Object(map) = &mut labels {
            map.insert(LABEL_CLUSTER_NAME.into(), json!(cluster));
            map.insert(LABEL_CONTROL_PLANE.into(), json!(""));
            map.insert(LABEL_CONTROL_PLANE_NAME.into(), json!(kcp_name));
        }
        if let Value::Object(map) = &mut annotations {
            map.insert(ANNOTATION_SPEC_HASH.into(), json!(spec_hash(kcp_spec)));
            map.insert(
                ANNOTATION_ROLE.into(),
                json!(if init { "init" } else { "join" }),
            );
        }
        let mut spec = json!({
            "clusterName": cluster,
            "version": kcp.spec.version,
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
            "infrastructureRef": {"apiGroup": template_ref.get("apiGroup").cloned().unwrap_or(Value::Null), "kind": kind, "name": name},
        });
        if let Some(deletion) = kcp_spec.pointer("/machineTemplate/spec/deletion") {
            spec["deletion"] = deletion.clone();
        }
        let object = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                    "kind": "KubeadmControlPlane",
                    "name": kcp_name,
                    "uid": kcp.uid().unwrap_or_default(),
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": spec,
        });
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|e| BootstrapError::Api {
                verb: "building",
                kind: "Machine",
                namespace: namespace.to_owned(),
                name: name.clone(),
                source: Box::new(kube::Error::SerdeError(e)),
            })?;
        let machines: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &machine_resource());
        machines
            .create(&PostParams::default(), &object)
            .await
            .map_err(api_error("creating", "Machine", namespace, &name))?;
        Ok(Ok(name))
    }

    /// Takes `member` out of etcd and deletes its Machine, unless that would lose quorum.
    async fn remove(
        &self,
        client: &Client,
        member: &Member,
        key: &ClusterKey,
        namespace: &str,
    ) -> Result<Result<String, (&'static str, String)>, BootstrapError> {
        let name = member.machine.name_any();
        if let (Some(etcd), Some(node)) = (&self.settings.etcd, member.node()) {
            let members = match etcd.members(key).await {
                Ok(members) => members,
                Err(err) => {
                    return Ok(Err((
                        "EtcdUnreachable",
                        format!("cannot read etcd members before removing Machine {name}: {err}"),
                    )));
                }
            };
            if let Some(target) = members.iter().find(|m| m.name == node) {
                let remaining: Vec<_> = members.iter().filter(|m| m.name != node).collect();
                let healthy = remaining.iter().filter(|m| m.healthy).count();
                let quorum = remaining.len() / 2 + 1;
                if remaining.is_empty() || healthy < quorum {
                    return Ok(Err((
                        "EtcdQuorumAtRisk",
                        format!(
                            "removing Machine {name} (etcd member {node}) would leave {healthy} healthy of {} etcd members, fewer than the quorum of {quorum}; repair the unhealthy members first",
                            remaining.len()
                        ),
                    )));
                }
                if target.leader
                    && let Some(next) = remaining.iter().find(|m| m.healthy)
                {
                    if let Err(err) = etcd.move_leader(key, &next.name).await {
                        return Ok(Err((
                            "EtcdLeaderMoveFailed",
                            format!("moving etcd leadership from {node} to {}: {err}", next.name),
                        )));
                    }
                    tracing::info!(cluster = %key, from = %node, to = %next.name, "moved etcd leadership");
                }
                if let Err(err) = etcd.remove_member(key, &node).await {
                    return Ok(Err((
                        "EtcdMemberRemovalFailed",
                        format!("removing etcd member {node}: {err}"),
                    )));
                }
                tracing::info!(cluster = %key, member = %node, "removed etcd member");
            }
        }
        let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
        match machines.delete(&name, &DeleteParams::background()).await {
            Ok(_) => Ok(Ok(name)),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Ok(name)),
            Err(e) => Err(api_error("deleting", "Machine", namespace, &name)(e)),
        }
    }
}

fn minor_skew(desired: &str, members: &[Member]) -> Option<String> {
    let desired_version = KubeVersion::parse(desired).ok()?;
    let oldest = members
        .iter()
        .filter_map(|m| m.machine.spec.version.as_deref())
        .filter_map(|v| KubeVersion::parse(v).ok())
        .min()?;
    (desired_version.major != oldest.major || desired_version.minor > oldest.minor + 1).then(|| {
        format!(
            "spec.version {desired} is more than one minor version above the oldest Machine's {oldest}; kubeadm upgrades one minor version at a time: set v{}.{}.x first",
            oldest.major,
            oldest.minor + 1
        )
    })
}

impl Reconciler for ControlPlaneController {
    type Object = KubeadmControlPlane;
    type Error = BootstrapError;

    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn configure(
        &self,
        controller: Controller<KubeadmControlPlane>,
        client: &Client,
    ) -> Controller<KubeadmControlPlane> {
        controller
            .owns(
                Api::<Machine>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<Cluster>::all(client.clone()),
                watcher::Config::default(),
                |cluster: Cluster| {
                    cluster
                        .spec
                        .control_plane_ref
                        .as_ref()
                        .filter(|r| r.kind == "KubeadmControlPlane")
                        .map(|r| {
                            ObjectRef::<KubeadmControlPlane>::new(&r.name)
                                .within(cluster.namespace().as_deref().unwrap_or_default())
                        })
                },
            )
    }

    #[allow(clippy::too_many_lines)]
    async fn reconcile(
        &self,
        kcp: Arc<KubeadmControlPlane>,
        context: Arc<Context>,
    ) -> Result<Action, BootstrapError> {
        let name = kcp.name_any();
        let namespace = kcp.namespace().ok_or_else(|| BootstrapError::NoNamespace {
            kind: "KubeadmControlPlane",
            name: name.clone(),
        })?;
        let client = context.client();
        // The raw spec (fields the typed object does not model), at least as new as the object
        // this reconcile was handed: from the process's cache, read live only when it is behind.
        let Some(raw_kcp) = context
            .objects()
            .dynamic(&kcp_resource())
            .get_at_least(&namespace, &name, kcp.meta().resource_version.as_deref())
            .await
            .map_err(api_error(
                "reading",
                "KubeadmControlPlane",
                &namespace,
                &name,
            ))?
        else {
            return Ok(Action::await_change());
        };
        let spec = raw_kcp.data.get("spec").cloned().unwrap_or(Value::Null);
        let generation = kcp.metadata.generation;
        let now = conditions::now();
        let current = kcp.status.clone().unwrap_or_default();
        let mut conds: Vec<Condition> = current.conditions.clone();

        let Some(cluster) = Self::find_cluster(&context, &kcp, &namespace).await? else {
            conditions::set_condition(
                &mut conds,
                conditions::condition(
                    "Available",
                    FALSE,
                    "WaitingForCluster",
                    format!(
                        "no Cluster in {namespace} names KubeadmControlPlane {name} in spec.controlPlaneRef"
                    ),
                    generation,
                ),
                &now,
            );
            let configs: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &namespace);
            configs
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        &json!({"status": {"conditions": conds, "observedGeneration": generation}}),
                    ),
                )
                .await
                .map_err(api_error(
                    "updating status of",
                    "KubeadmControlPlane",
                    &namespace,
                    &name,
                ))?;
            return Ok(Action::await_change());
        };
        let cluster_name = cluster.name_any();
        let key = ClusterKey::new(&namespace, &cluster_name);
        let owner = OwnerReference {
            api_version: KubeadmControlPlane::api_version(&()).into_owned(),
            kind: KubeadmControlPlane::kind(&()).into_owned(),
            name: name.clone(),
            uid: kcp.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let certificates = certs::lookup_or_generate(
            client,
            context.secrets(),
            &namespace,
            &cluster_name,
            Some(owner.clone()),
        )
        .await?;
        let endpoint = cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| !e.host.is_empty());
        if let Some(endpoint) = endpoint {
            let port = u16::try_from(endpoint.port)
                .ok()
                .filter(|p| *p != 0)
                .unwrap_or(6443);
            let outcome = certs::ensure_kubeconfig(
                &context,
                &namespace,
                &cluster_name,
                &certs::server_url(&endpoint.host, port),
                &certificates.cluster_ca,
                Some(owner),
                jiff::Timestamp::now(),
            )
            .await?;
            let expires = match outcome {
                certs::KubeconfigOutcome::Created { expires } => Some(expires),
                certs::KubeconfigOutcome::Kept { expires } => expires,
                certs::KubeconfigOutcome::Renewed { previous, expires } => {
                    // Clients cached from the old kubeconfig are rebuilt from the new one.
                    if let Some(workloads) = &self.settings.workloads {
                        workloads.forget(&key);
                    }
                    context
                        .publish(
                            &*kcp,
                            EventType::Normal,
                            "KubeconfigCertificateRenewed",
                            "RenewCertificates",
                            format!(
                                "renewed the client certificate of Secret {cluster_name}-kubeconfig, which expires at {}; the new one expires at {}",
                                rfc3339(previous),
                                rfc3339(expires)
                            ),
                        )
                        .await;
                    Some(expires)
                }
                certs::KubeconfigOutcome::NotOwned => None,
            };
            let recorded = kcp.annotations().get(ANNOTATION_KUBECONFIG_EXPIRY).cloned();
            let wanted = expires.map(rfc3339);
            if recorded != wanted {
                let raw: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &kcp_resource());
                raw.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"annotations": {ANNOTATION_KUBECONFIG_EXPIRY: wanted}}})),
                )
                .await
                .map_err(api_error("annotating", "KubeadmControlPlane", &namespace, &name))?;
            }
        }

        let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        let selector = format!(
            "{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_CONTROL_PLANE},{LABEL_CONTROL_PLANE_NAME}={name}"
        );
        let listed = machines
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error("listing", "Machine", &namespace, ""))?
            .items;
        let hash = spec_hash(&spec);
        // `spec.rollout.after`: once it has passed, Machines created before it are replaced.
        let rollout_after = spec
            .pointer("/rollout/after")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .filter(|after| *after <= jiff::Timestamp::now());
        let mut members: Vec<Member> = listed
            .into_iter()
            .map(|machine| Member {
                ready: machine
                    .status
                    .as_ref()
                    .and_then(|s| s.node_ref.as_ref())
                    .is_some(),
                up_to_date: machine.spec.version.as_deref() == Some(kcp.spec.version.as_str())
                    && machine.annotations().get(ANNOTATION_SPEC_HASH) == Some(&hash)
                    && !rollout_after.is_some_and(|after| {
                        machine
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .is_some_and(|created| created.0 < after)
                    }),
                deleting: machine.metadata.deletion_timestamp.is_some(),
                unhealthy: machine
                    .status
                    .as_ref()
                    .and_then(|s| conditions::get(&s.conditions, "OwnerRemediated"))
                    .is_some_and(|c| c.status == FALSE),
                certificates_expiring: false,
                machine,
            })
            .collect();
        // Certificates: recorded once a Machine has a Node; with
        // `rollout.before.certificatesExpiryDays`, a Machine whose certificates expire within that
        // many days is outdated.
        let expiries = self
            .certificate_expiries(client, &members, &selector, &namespace, &key)
            .await?;
        if let Some(days) = certificates_expiry_days(&spec) {
            let now = jiff::Timestamp::now();
            for member in &mut members {
                if expiries
                    .get(&member.machine.name_any())
                    .is_some_and(|e| certificates_expire_within(*e, now, days))
                {
                    member.certificates_expiring = true;
                    member.up_to_date = false;
                }
            }
        }
        let mut problem: Option<(&'static str, String)> = None;
        // A Machine with a Node had its config and infra machine; only the others are checked.
        for member in members.iter().filter(|m| !m.deleting && !m.ready) {
            if let Err(message) =
                Self::complete_machine(client, &member.machine, &spec, &namespace).await?
            {
                problem = Some(("InvalidMachineTemplate", message));
            }
        }
        let initialized = self.initialized(&raw_kcp, &key).await;
        let replicas = i64::from(kcp.spec.replicas.unwrap_or(1));
        let surge = max_surge(&spec);

        // What the spec asks for, judged before anything changes.
        let mut accepted = conditions::condition("SpecAccepted", TRUE, "Accepted", "", generation);
        let mut refusal = None;
        if replicas < 1 {
            refusal = Some((
                "InvalidReplicas",
                format!(
                    "spec.replicas is {replicas}; a control plane needs at least 1 (use 1, 3 or 5)"
                ),
            ));
        } else if let Some(message) = minor_skew(&kcp.spec.version, &members) {
            refusal = Some(("VersionSkewNotAllowed", message));
        }
        if replicas >= 2 && replicas % 2 == 0 && refusal.is_none() {
            accepted = conditions::condition(
                "SpecAccepted",
                TRUE,
                "EvenReplicas",
                format!(
                    "{replicas} replicas work, but etcd with an even member count tolerates no more failures than with {}; use an odd count",
                    replicas - 1
                ),
                generation,
            );
        }
        let step = if let Some((reason, message)) = refusal.clone() {
            accepted =
                conditions::condition("SpecAccepted", FALSE, reason, message.clone(), generation);
            Step::Refuse { reason, message }
        } else if endpoint.is_none() {
            Step::Wait(format!(
                "Cluster {cluster_name} has no spec.controlPlaneEndpoint yet"
            ))
        } else if let Some((reason, message)) = problem.clone() {
            Step::Refuse { reason, message }
        } else {
            decide(&members, replicas, surge, initialized)
        };
        if let Step::Refuse { reason, message } = &step
            && refusal.is_none()
        {
            accepted =
                conditions::condition("SpecAccepted", FALSE, reason, message.clone(), generation);
        }
        let previous_accepted = conditions::get(&current.conditions, "SpecAccepted").cloned();

        // Act.
        let mut etcd_condition = None;
        let mut scaling = conditions::condition("Scaling", FALSE, "NotScaling", "", generation);
        let mut acted = false;
        match &step {
            Step::Create { init } => {
                match Self::create_machine(client, &kcp, &spec, &cluster_name, &namespace, *init)
                    .await?
                {
                    Ok(machine) => {
                        acted = true;
                        let what = if *init {
                            "to run kubeadm init"
                        } else {
                            "to join the control plane"
                        };
                        scaling = conditions::condition(
                            "Scaling",
                            TRUE,
                            "ScalingUp",
                            format!("created Machine {machine} {what}"),
                            generation,
                        );
                        context
                            .publish(
                                &*kcp,
                                EventType::Normal,
                                "MachineCreated",
                                "Scale",
                                format!("created Machine {machine} {what}"),
                            )
                            .await;
                    }
                    Err(message) => {
                        accepted = conditions::condition(
                            "SpecAccepted",
                            FALSE,
                            "InvalidMachineTemplate",
                            message,
                            generation,
                        );
                    }
                }
            }
            Step::Remove(machine) => {
                let Some(member) = members.iter().find(|m| &m.machine.name_any() == machine) else {
                    return Ok(Action::requeue(PROGRESS));
                };
                match self.remove(client, member, &key, &namespace).await? {
                    Ok(removed) => {
                        acted = true;
                        scaling = conditions::condition(
                            "Scaling",
                            TRUE,
                            "ScalingDown",
                            format!("removing Machine {removed}"),
                            generation,
                        );
                        context
                            .publish(
                                &*kcp,
                                EventType::Normal,
                                "MachineRemoved",
                                "Scale",
                                format!("removed Machine {removed} (and its etcd member)"),
                            )
                            .await;
                    }
                    Err((reason, message)) => {
                        etcd_condition = Some(conditions::condition(
                            "EtcdClusterHealthy",
                            FALSE,
                            reason,
                            message.clone(),
                            generation,
                        ));
                        if conditions::get(&current.conditions, "EtcdClusterHealthy")
                            .and_then(|c| c.message.as_deref())
                            != Some(message.as_str())
                        {
                            context
                                .publish(&*kcp, EventType::Warning, reason, "Scale", message)
                                .await;
                        }
                    }
                }
            }
            Step::Wait(message) | Step::WaitForMachine { message, .. } => {
                scaling = conditions::condition(
                    "Scaling",
                    UNKNOWN,
                    "Waiting",
                    message.clone(),
                    generation,
                );
            }
            Step::Refuse { .. } | Step::Settled => {}
        }
        if accepted.status == FALSE || accepted.reason.as_deref() == Some("EvenReplicas") {
            let changed = previous_accepted
                .as_ref()
                .is_none_or(|p| p.message != accepted.message);
            if changed {
                context
                    .publish(
                        &*kcp,
                        EventType::Warning,
                        accepted.reason.as_deref().unwrap_or("Refused"),
                        "Validate",
                        accepted.message.clone().unwrap_or_default(),
                    )
                    .await;
            }
        }

        // Status.
        let live: Vec<&Member> = members.iter().filter(|m| !m.deleting).collect();
        let count = i32::try_from(members.len()).unwrap_or(i32::MAX);
        let ready = i32::try_from(live.iter().filter(|m| m.ready).count()).unwrap_or(i32::MAX);
        let up_to_date =
            i32::try_from(live.iter().filter(|m| m.up_to_date).count()).unwrap_or(i32::MAX);
        let version = members
            .iter()
            .filter_map(|m| m.machine.spec.version.as_deref())
            .filter_map(|v| KubeVersion::parse(v).ok().map(|p| (p, v.to_owned())))
            .min_by_key(|(p, _)| *p)
            .map(|(_, v)| v);
        let rolling = live.iter().any(|m| !m.up_to_date);
        conditions::set_condition(&mut conds, accepted, &now);
        conditions::set_condition(&mut conds, scaling, &now);
        conditions::set_condition(
            &mut conds,
            if rolling {
                conditions::condition(
                    "RollingOut",
                    TRUE,
                    "RollingOut",
                    {
                        let expiring = live.iter().filter(|m| m.certificates_expiring).count();
                        let mut message = format!(
                            "{} of {} Machines are not up to date",
                            live.len() - usize::try_from(up_to_date).unwrap_or(0),
                            live.len()
                        );
                        if expiring > 0 {
                            message.push_str(&format!(
                                " ({expiring} with certificates expiring within {} days)",
                                certificates_expiry_days(&spec).unwrap_or_default()
                            ));
                        }
                        // What holds the rollout up, so a wait that needs a person says so here.
                        if let Step::WaitForMachine { machine, .. } = &step
                            && let Some(waited) =
                                members.iter().find(|m| &m.machine.name_any() == machine)
                        {
                            message.push_str(&format!(
                                "; the rollout waits for Machine {machine} to get a Node"
                            ));
                            if let Some(why) = not_ready_because(&waited.machine) {
                                message.push_str(": ");
                                message.push_str(&why);
                            }
                        }
                        message
                    },
                    generation,
                )
            } else {
                conditions::condition("RollingOut", FALSE, "NotRollingOut", "", generation)
            },
            &now,
        );
        conditions::set_condition(
            &mut conds,
            if initialized && ready > 0 {
                conditions::condition("Available", TRUE, "Available", "", generation)
            } else if initialized {
                conditions::condition(
                    "Available",
                    FALSE,
                    "NoReadyMachines",
                    "no control-plane Machine has a Node",
                    generation,
                )
            } else {
                conditions::condition(
                    "Available",
                    FALSE,
                    "NotInitialized",
                    "the workload API has no kube-system/kubeadm-config yet",
                    generation,
                )
            },
            &now,
        );
        conditions::set_condition(&mut conds, machines_ready(&members, generation), &now);
        conditions::set_condition(
            &mut conds,
            etcd_condition.unwrap_or_else(|| {
                conditions::condition("EtcdClusterHealthy", TRUE, "Healthy", "", generation)
            }),
            &now,
        );
        let status = json!({"status": {
            "replicas": count,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "upToDateReplicas": up_to_date,
            "updatedReplicas": up_to_date,
            "version": version,
            "initialized": initialized,
            "ready": initialized && ready > 0,
            "initialization": {"controlPlaneInitialized": initialized},
            // What v1beta1 readers see as readyReplicas, updatedReplicas, unavailableReplicas.
            "deprecated": {"v1beta1": {
                "readyReplicas": ready,
                "updatedReplicas": up_to_date,
                "unavailableReplicas": (count - ready).max(0),
            }},
            "selector": format!("{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_CONTROL_PLANE}"),
            "observedGeneration": generation,
            "conditions": conds,
        }});
        let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &namespace);
        kcps.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api_error(
                "updating status of",
                "KubeadmControlPlane",
                &namespace,
                &name,
            ))?;
        // Machines are watched; only the workload cluster (initialisation, etcd) needs polling.
        Ok(match step {
            Step::Settled if !acted => Action::requeue(SETTLED),
            Step::Wait(_) | Step::WaitForMachine { .. } if initialized => {
                Action::requeue(WAITING_ON_MACHINES)
            }
            _ => Action::requeue(PROGRESS),
        })
    }

    async fn cleanup(
        &self,
        kcp: Arc<KubeadmControlPlane>,
        context: Arc<Context>,
    ) -> Result<Cleanup, BootstrapError> {
        let name = kcp.name_any();
        let namespace = kcp.namespace().unwrap_or_default();
        let machines: Api<Machine> = Api::namespaced(context.client().clone(), &namespace);
        let owned: Vec<Machine> = machines
            .list(&ListParams::default().labels(&format!("{LABEL_CONTROL_PLANE_NAME}={name}")))
            .await
            .map_err(api_error("listing", "Machine", &namespace, ""))?
            .items;
        if owned.is_empty() {
            return Ok(Cleanup::Done);
        }
        for machine in owned
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
        {
            match machines
                .delete(&machine.name_any(), &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => {
                    return Err(api_error(
                        "deleting",
                        "Machine",
                        &namespace,
                        &machine.name_any(),
                    )(e));
                }
            }
        }
        // The finalizer stays until the Machines are gone; this requeue is the retry.
        Ok(Cleanup::Pending(Action::requeue(PROGRESS)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, ready: bool, up_to_date: bool, created: &str) -> Member {
        let mut machine = Machine::new(name, None, Default::default());
        machine.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created.parse().unwrap()),
        );
        Member {
            machine,
            ready,
            up_to_date,
            deleting: false,
            unhealthy: false,
            certificates_expiring: false,
        }
    }

    #[test]
    fn certificate_expiry_prefers_the_machine_override_and_counts_days_from_the_clock() {
        let config = "2027-03-10T00:00:00Z";
        let machine = "2026-12-01T00:00:00Z";
        assert_eq!(
            certificates_expiry(Some(machine), Some(config)),
            machine.parse().ok()
        );
        assert_eq!(certificates_expiry(None, Some(config)), config.parse().ok());
        assert_eq!(
            certificates_expiry(Some("not a time"), Some(config)),
            config.parse().ok()
        );
        assert_eq!(certificates_expiry(None, None), None);
        let expiry: jiff::Timestamp = config.parse().unwrap();
        let day = jiff::SignedDuration::from_hours(24);
        // certificatesExpiryDays 21: rolled from 21 days before the expiry, not a second earlier.
        assert!(!certificates_expire_within(expiry, expiry - day * 22, 21));
        assert!(!certificates_expire_within(expiry, expiry - day * 21, 21));
        assert!(certificates_expire_within(
            expiry,
            expiry - day * 21 + jiff::SignedDuration::from_secs(1),
            21
        ));
        assert!(certificates_expire_within(expiry, expiry + day, 21));
        assert_eq!(
            certificates_expiry_days(
                &json!({"rollout": {"before": {"certificatesExpiryDays": 21}}})
            ),
            Some(21)
        );
        assert_eq!(certificates_expiry_days(&json!({"rollout": {}})), None);
    }

    #[test]
    fn init_then_join_one_at_a_time() {
        assert_eq!(decide(&[], 3, 1, false), Step::Create { init: true });
        let first = member("a", false, true, "2026-01-01T00:00:00Z");
        assert!(matches!(
            decide(std::slice::from_ref(&first), 3, 1, false),
            Step::Wait(_)
        ));
        assert!(matches!(
            decide(std::slice::from_ref(&first), 3, 1, true),
            Step::WaitForMachine { machine, .. } if machine == "a"
        ));
        let first = member("a", true, true, "2026-01-01T00:00:00Z");
        assert_eq!(
            decide(std::slice::from_ref(&first), 3, 1, true),
            Step::Create { init: false }
        );
        let three = [
            first.clone(),
            member("b", true, true, "2026-01-01T00:01:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        assert_eq!(decide(&three, 3, 1, true), Step::Settled);
        assert_eq!(decide(&three, 1, 1, true), Step::Remove("a".into()));
    }

    #[test]
    fn remediation_replaces_one_machine_and_never_the_last() {
        let mut sick = member("a", false, true, "2026-01-01T00:00:00Z");
        sick.unhealthy = true;
        assert!(matches!(
            decide(std::slice::from_ref(&sick), 1, 1, true),
            Step::Refuse {
                reason: "RemediationNotPossible",
                ..
            }
        ));
        let three = [
            sick.clone(),
            member("b", true, true, "2026-01-01T00:01:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        assert_eq!(decide(&three, 3, 1, true), Step::Remove("a".into()));
        let joining = [
            sick,
            member("b", true, true, "2026-01-01T00:01:00Z"),
            member("c", false, true, "2026-01-01T00:02:00Z"),
        ];
        assert!(matches!(decide(&joining, 3, 1, true), Step::Wait(_)));
    }

    #[test]
    fn rollout_respects_max_surge() {
        let old = [
            member("a", true, false, "2026-01-01T00:00:00Z"),
            member("b", true, false, "2026-01-01T00:01:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        assert_eq!(decide(&old, 3, 1, true), Step::Create { init: false });
        assert_eq!(decide(&old, 3, 0, true), Step::Remove("a".into()));
        assert_eq!(decide(&old[1..], 3, 0, true), Step::Create { init: false });
        assert!(matches!(
            decide(&old[..1], 1, 0, true),
            Step::Refuse {
                reason: "MaxSurgeZeroNeedsThreeReplicas",
                ..
            }
        ));
    }

    fn with_conditions(mut member: Member, conditions: Value) -> Member {
        member.machine.status =
            Some(serde_json::from_value(json!({ "conditions": conditions })).unwrap());
        member
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn a_rollout_waiting_for_a_machine_says_why_the_machine_waits() {
        let no_host = "Metal3Machine b is not provisioned yet: NoAvailableHost: no available BareMetalHost matches matchLabels {role=cp} (1 BareMetalHost in namespace ns, 1 matching: 0 available, 1 claimed): …";
        let surge = with_conditions(
            member("b", false, true, "2026-01-01T00:01:00Z"),
            json!([
                cond("BootstrapConfigReady", "True", "DataSecretAvailable", ""),
                cond(
                    "InfrastructureReady",
                    "False",
                    "WaitingForInfrastructure",
                    no_host
                ),
                cond(
                    "NodeReady",
                    "Unknown",
                    "WaitingForProviderID",
                    "waiting for the providerID"
                ),
                cond("Ready", "False", "NotReady", ""),
            ]),
        );
        let old = with_conditions(
            member("a", true, false, "2026-01-01T00:00:00Z"),
            json!([cond("Ready", "True", "Ready", "")]),
        );
        let members = [old, surge];
        let Step::WaitForMachine { machine, message } = decide(&members, 1, 1, true) else {
            panic!("not waiting for the Machine")
        };
        assert_eq!(machine, "b");
        assert_eq!(
            message,
            format!(
                "waiting for Machine b to get a Node before the next change: InfrastructureReady WaitingForInfrastructure: {no_host}"
            )
        );
        let ready = machines_ready(&members, Some(2));
        assert_eq!(ready.status, FALSE);
        assert_eq!(ready.reason.as_deref(), Some("NotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                format!("* Machine b: InfrastructureReady WaitingForInfrastructure: {no_host}")
                    .as_str()
            )
        );
        assert_eq!(
            machines_ready(&members[..1], None).reason.as_deref(),
            Some("Ready")
        );
        assert_eq!(
            machines_ready(&[], None).reason.as_deref(),
            Some("NoReplicas")
        );
    }

    #[test]
    fn hash_ignores_key_order_and_sees_changes() {
        let a = json!({"kubeadmConfigSpec": {"a": 1, "b": 2}, "machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}});
        let b = json!({"machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}, "kubeadmConfigSpec": {"b": 2, "a": 1}, "replicas": 5});
        assert_eq!(spec_hash(&a), spec_hash(&b));
        let c = json!({"kubeadmConfigSpec": {"a": 1, "b": 3}, "machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}});
        assert_ne!(spec_hash(&a), spec_hash(&c));
    }

    #[test]
    fn skew_of_more_than_one_minor_is_refused() {
        let mut m = member("a", true, true, "2026-01-01T00:00:00Z");
        m.machine.spec.version = Some("v1.30.2".into());
        assert_eq!(minor_skew("v1.31.0", std::slice::from_ref(&m)), None);
        assert!(
            minor_skew("v1.32.0", std::slice::from_ref(&m))
                .unwrap()
                .contains("v1.31.x")
        );
    }

    #[test]
    fn first_machine_inits_the_rest_join() {
        let spec = json!({"kubeadmConfigSpec": {"clusterConfiguration": {}, "initConfiguration": {"a": 1}, "joinConfiguration": {"b": 2}, "files": []}});
        let init = machine_config_spec(&spec, true);
        assert!(init.get("joinConfiguration").is_none() && init.get("initConfiguration").is_some());
        let join = machine_config_spec(&spec, false);
        assert!(
            join.get("initConfiguration").is_none() && join.get("clusterConfiguration").is_none()
        );
        assert_eq!(join["joinConfiguration"]["controlPlane"], json!({}));
    }
}
