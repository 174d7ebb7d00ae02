//! The KubeadmControlPlane controller (`controlplane.cluster.x-k8s.io/v1beta2`).
//!
//! One pass, one change at a time. `ControlPlaneController::pass` runs the phases in this order,
//! each in its own module, as Cluster API's `controlplane/kubeadm/internal/controllers` do:
//! 1. `cluster`: the Cluster whose `spec.controlPlaneRef` names this control plane.
//! 2. `certificates`: the cluster's CAs and service-account keys.
//! 3. `kubeconfig`: once the Cluster has a `controlPlaneEndpoint`, the admin kubeconfig (renewed
//!    when less than half of its year is left; its expiry in [`ANNOTATION_KUBECONFIG_EXPIRY`]).
//! 4. `machines`: its Machines (labels `cluster.x-k8s.io/cluster-name`,
//!    `cluster.x-k8s.io/control-plane`, `cluster.x-k8s.io/control-plane-name`), each with its
//!    KubeadmConfig and infra machine; `certificates` then records when each one's certificates
//!    expire ([`ANNOTATION_CERTIFICATES_EXPIRY`]).
//! 5. `status` reads whether the control plane is initialised: the workload API answers and has
//!    `kube-system/kubeadm-config` (what kubeadm init writes); remembered in status once seen.
//! 6. The pass's one `Step`, from the first decision phase that does not continue (`next_step`):
//!    `validation` (what `SpecAccepted` refuses), `kubeconfig` (no endpoint yet: wait),
//!    `machines` (an unusable machine template), `scale` (a Machine being deleted: wait; no
//!    Machine: the first, with the init configuration), `remediation` (a Machine a
//!    MachineHealthCheck handed over), `scale` (not initialised, or a Machine without a Node:
//!    wait), `rollout` (outdated Machines), `scale` (to `spec.replicas`).
//! 7. `scale` takes the step: creates a Machine, or removes one after `etcd` moved leadership
//!    off its member and removed the member, only while the members left keep a quorum.
//! 8. `status`: replicas, version, initialisation and the conditions, then when to look again.
//!
//! A control plane being deleted goes through `delete` instead: its Machines go first.
//!
//! A phase that reads or writes the API returns a `PhaseOutcome`: continue, with what it found, or
//! stop the pass with a `Requeue`. A decision phase is a pure function of what the pass found and
//! returns a `Decision`: continue, or the step; so the decisions are tested without a server. A
//! pass ends with a `Requeue`, which becomes the runtime's `Action`; there is no other retry.
//!
//! Refused with a condition and a Warning Event naming what to do: replicas below 1; a version more
//! than one minor above the oldest Machine's (kubeadm upgrades one minor at a time); `maxSurge: 0`
//! with fewer than 3 replicas (the replacement would remove the only etcd quorum); removing a
//! Machine while etcd is degraded. An even replica count is accepted, as Cluster API accepts it,
//! with a Warning: it tolerates no more failures than one Machine fewer.

mod certificates;
mod cluster;
mod delete;
pub mod etcd;
mod kubeconfig;
mod machines;
mod remediation;
mod rollout;
mod scale;
mod status;
mod validation;

pub use certificates::{certificates_expire_within, certificates_expiry};
pub use machines::{machine_config_spec, spec_hash};

use crate::certs::CertError;
use capstan_model::capi::v1beta2::{Cluster, Machine};
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_model::meta::Condition;
use capstan_runtime::conditions;
use capstan_runtime::{Action, Cleanup, Context, Reconciler};
use capstan_workload::{ClusterKey, SharedEtcdMembership, SharedWorkloadAccess};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use machines::Member;
use serde_json::Value;
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

/// Why a pass over a KubeadmControlPlane failed; the runtime retries it.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("certificates")]
    Certs(#[from] CertError),
    #[error("KubeadmControlPlane {name} has no namespace")]
    NoNamespace { name: String },
    #[error("decoding Cluster {namespace}/{name}")]
    DecodeCluster {
        namespace: String,
        name: String,
        source: serde_json::Error,
    },
}

/// Wraps an API failure with what was being done to which object.
fn api_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> ControlPlaneError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| ControlPlaneError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

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

/// When a pass's control plane is looked at again: what a pass ends with. Machines are watched;
/// only the workload cluster (initialisation, etcd) needs polling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requeue {
    /// Only when it or an object it watches changes: it is gone, or no Cluster names it yet.
    OnChange,
    /// Soon ([`PROGRESS`]): it is changing, or waits on what is not watched.
    Progress,
    /// Later ([`WAITING_ON_MACHINES`]): an initialised control plane waits on its Machines.
    WaitingOnMachines,
    /// Rarely ([`SETTLED`]): nothing is left to change.
    Settled,
}

impl Requeue {
    fn action(self) -> Action {
        match self {
            Self::OnChange => Action::await_change(),
            Self::Progress => Action::requeue(PROGRESS),
            Self::WaitingOnMachines => Action::requeue(WAITING_ON_MACHINES),
            Self::Settled => Action::requeue(SETTLED),
        }
    }
}

/// What a phase of a pass that reads or writes the API tells the pass.
#[derive(Debug)]
enum PhaseOutcome<T> {
    /// The phase is done: the next one runs, with what this one found.
    Continue(T),
    /// The pass ends here, later phases (status included) do not run; it is looked at again then.
    Stop(Requeue),
}

/// Why a control plane does not go on: a condition reason and a message naming what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The condition reason (`EtcdQuorumAtRisk`, …).
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// The one thing a pass does: a change, a wait or a refusal.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Create a Machine; `init` makes it the one that runs `kubeadm init`.
    Create { init: bool },
    /// Remove this Machine, its etcd member first.
    Remove(String),
    /// Nothing changes yet; the message says what the pass waits for.
    Wait(String),
    /// Nothing changes until `machine` has a Node; `message` says what it waits for itself.
    WaitForMachine { machine: String, message: String },
    /// Nothing changes until someone acts on the refusal.
    Refuse(Refusal),
    /// Nothing is left to change.
    Settled,
}

/// What one decision phase concludes about the pass's [`Step`].
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Nothing for this phase to decide: the next phase decides.
    Continue,
    /// This phase decides the step; the phases after it are not asked.
    Decided(Step),
}

impl Decision {
    /// This decision, or when this phase continues, what `next` decides.
    fn then(self, next: impl FnOnce() -> Decision) -> Decision {
        match self {
            Self::Continue => next(),
            decided @ Self::Decided(_) => decided,
        }
    }

    /// The step decided; [`Step::Settled`] when every phase continued.
    fn step(self) -> Step {
        match self {
            Self::Continue => Step::Settled,
            Self::Decided(step) => step,
        }
    }
}

/// The step the Machines call for, once the spec, the endpoint and the machine template are fine.
/// The order is the order of precedence: a deletion in progress finishes first; the first Machine
/// needs nothing else; a Machine handed over for remediation is dealt with (or refused) before the
/// waits for initialisation and for Nodes, which it might otherwise hold up; a rollout comes before
/// scaling, which would otherwise remove up-to-date Machines to reach the replica count.
fn decide(members: &[Member], replicas: i64, surge: i64, initialized: bool) -> Step {
    scale::wait_for_deletions(members)
        .then(|| scale::create_first(members, initialized))
        .then(|| remediation::decide(members))
        .then(|| scale::wait_for_initialization(initialized))
        .then(|| scale::wait_for_nodes(members))
        .then(|| rollout::decide(members, replicas, surge))
        .then(|| scale::to_replicas(members, replicas))
        .step()
}

/// What the pass found before it decides, as [`next_step`] reads it.
struct Findings<'a> {
    judgement: &'a validation::SpecJudgement,
    endpoint: kubeconfig::ControlPlaneEndpoint,
    cluster_name: &'a str,
    template_problem: Option<&'a Refusal>,
    members: &'a [Member],
    replicas: i64,
    surge: i64,
    initialized: bool,
}

/// The pass's step: a refused spec first (nothing may change), then a missing endpoint (nothing can
/// be made without one), then an unusable machine template, then what the Machines call for.
fn next_step(found: &Findings<'_>) -> Step {
    validation::refuse(found.judgement)
        .then(|| kubeconfig::wait_for_endpoint(found.endpoint, found.cluster_name))
        .then(|| machines::refuse_template(found.template_problem))
        .then(|| {
            Decision::Decided(decide(
                found.members,
                found.replicas,
                found.surge,
                found.initialized,
            ))
        })
        .step()
}

/// The KubeadmControlPlane one pass reconciles, as every phase reads it.
struct Pass<'a> {
    kcp: &'a KubeadmControlPlane,
    context: &'a Context,
    name: String,
    namespace: String,
    /// The raw spec (fields the typed object does not model).
    spec: Value,
    generation: Option<i64>,
    /// When the pass started, as conditions record transitions.
    now: String,
    /// The conditions as the pass found them.
    previous: Vec<Condition>,
    /// Whether status already says the control plane is initialised.
    remembered_initialized: bool,
}

impl Pass<'_> {
    fn client(&self) -> &Client {
        self.context.client()
    }

    /// The controller reference the control plane's certificates and kubeconfig carry.
    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: KubeadmControlPlane::api_version(&()).into_owned(),
            kind: KubeadmControlPlane::kind(&()).into_owned(),
            name: self.name.clone(),
            uid: self.kcp.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

impl<'a> Pass<'a> {
    /// Starts a pass: the raw object, at least as new as the one this reconcile was handed, from
    /// the process's cache (read live only when it is behind); gone, the pass waits for a change.
    async fn start(
        kcp: &'a KubeadmControlPlane,
        context: &'a Context,
    ) -> Result<PhaseOutcome<Self>, ControlPlaneError> {
        let name = kcp.name_any();
        let namespace = kcp
            .namespace()
            .ok_or_else(|| ControlPlaneError::NoNamespace { name: name.clone() })?;
        let Some(raw) = context
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
            return Ok(PhaseOutcome::Stop(Requeue::OnChange));
        };
        Ok(PhaseOutcome::Continue(Pass {
            kcp,
            context,
            spec: raw.data.get("spec").cloned().unwrap_or(Value::Null),
            generation: kcp.metadata.generation,
            now: conditions::now(),
            previous: kcp
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
            remembered_initialized: raw
                .data
                .pointer("/status/initialization/controlPlaneInitialized")
                .and_then(Value::as_bool)
                == Some(true),
            name,
            namespace,
        }))
    }
}

impl ControlPlaneController {
    /// One pass: the phases in order (see the module's overview), then when to look again.
    async fn pass(
        &self,
        kcp: &KubeadmControlPlane,
        context: &Context,
    ) -> Result<Requeue, ControlPlaneError> {
        let pass = match Pass::start(kcp, context).await? {
            PhaseOutcome::Continue(pass) => pass,
            PhaseOutcome::Stop(requeue) => return Ok(requeue),
        };
        let cluster = match cluster::find(&pass).await? {
            PhaseOutcome::Continue(cluster) => cluster,
            PhaseOutcome::Stop(requeue) => return Ok(requeue),
        };
        let cluster_name = cluster.name_any();
        let key = ClusterKey::new(&pass.namespace, &cluster_name);
        let certificates = certificates::ensure(&pass, &cluster_name).await?;
        let endpoint = kubeconfig::reconcile(
            &pass,
            &cluster,
            &key,
            &certificates,
            self.settings.workloads.as_ref(),
        )
        .await?;
        let selector = machines::selector(&cluster_name, &pass.name);
        let mut members = machines::list(&pass, &selector).await?;
        certificates::judge_expiries(
            &pass,
            &mut members,
            &selector,
            &key,
            self.settings.workloads.as_ref(),
        )
        .await?;
        let template_problem = machines::complete(&pass, &members).await?;
        let initialized = status::initialized(&pass, &key, self.settings.workloads.as_ref()).await;
        let replicas = i64::from(kcp.spec.replicas.unwrap_or(1));
        let judgement = validation::judge(replicas, &kcp.spec.version, &members, pass.generation);
        let step = next_step(&Findings {
            judgement: &judgement,
            endpoint,
            cluster_name: &cluster_name,
            template_problem: template_problem.as_ref(),
            members: &members,
            replicas,
            surge: rollout::max_surge(&pass.spec),
            initialized,
        });
        let accepted = validation::accepted(&judgement, &step, pass.generation);
        let taken = match scale::take(
            &pass,
            &step,
            &members,
            &cluster_name,
            &key,
            self.settings.etcd.as_deref(),
        )
        .await?
        {
            PhaseOutcome::Continue(taken) => taken,
            PhaseOutcome::Stop(requeue) => return Ok(requeue),
        };
        let accepted = taken.spec_accepted(accepted, pass.generation);
        validation::warn(&pass, &accepted).await;
        // A refused removal says why in EtcdClusterHealthy; otherwise etcd's own view does, once
        // there is an etcd to ask.
        let etcd_healthy = match (taken.etcd_healthy, self.settings.etcd.as_deref()) {
            (Some(refused), _) => Some(refused),
            (None, Some(etcd)) if initialized => {
                let nodes: Vec<String> = members
                    .iter()
                    .filter(|m| !m.deleting)
                    .filter_map(machines::Member::node)
                    .collect();
                Some(etcd::health(etcd, &key, &nodes, pass.generation).await)
            }
            (None, _) => None,
        };
        status::write(
            &pass,
            status::Report {
                members: &members,
                step: &step,
                initialized,
                accepted,
                scaling: taken.scaling,
                etcd_healthy,
                cluster_name: &cluster_name,
            },
        )
        .await?;
        Ok(status::requeue(&step, initialized))
    }
}

impl Reconciler for ControlPlaneController {
    type Object = KubeadmControlPlane;
    type Error = ControlPlaneError;

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

    async fn reconcile(
        &self,
        kcp: Arc<KubeadmControlPlane>,
        context: Arc<Context>,
    ) -> Result<Action, ControlPlaneError> {
        self.pass(&kcp, &context).await.map(Requeue::action)
    }

    async fn cleanup(
        &self,
        kcp: Arc<KubeadmControlPlane>,
        context: Arc<Context>,
    ) -> Result<Cleanup, ControlPlaneError> {
        delete::cleanup(&kcp, &context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use machines::tests::member;

    /// The order of the decision phases: each row is Machines and what the pass does with them.
    #[test]
    fn the_first_phase_that_decides_wins() {
        let mut sick = member("a", true, true, "2026-01-01T00:00:00Z");
        sick.unhealthy = true;
        let mut deleting = member("d", true, true, "2026-01-01T00:03:00Z");
        deleting.deleting = true;
        let ready = |name: &str, created: &str| member(name, true, true, created);
        let outdated = |name: &str, created: &str| member(name, true, false, created);
        let cases: Vec<(&str, Vec<Member>, i64, bool, Step)> = vec![
            (
                "no Machine, not initialised: init",
                vec![],
                3,
                false,
                Step::Create { init: true },
            ),
            (
                "no Machine, initialised: join",
                vec![],
                3,
                true,
                Step::Create { init: false },
            ),
            (
                "a deletion in progress comes before remediation",
                vec![
                    sick.clone(),
                    deleting.clone(),
                    ready("b", "2026-01-01T00:01:00Z"),
                ],
                3,
                true,
                Step::Wait("Machine d is being deleted".into()),
            ),
            (
                "remediation comes before the initialisation wait",
                vec![
                    sick.clone(),
                    ready("b", "2026-01-01T00:01:00Z"),
                    ready("c", "2026-01-01T00:02:00Z"),
                ],
                3,
                false,
                Step::Remove("a".into()),
            ),
            (
                "not initialised: wait",
                vec![ready("a", "2026-01-01T00:00:00Z")],
                3,
                false,
                Step::Wait(
                    "waiting for the first control-plane Machine to initialize the cluster".into(),
                ),
            ),
            (
                "a rollout comes before scaling down: the oldest outdated goes, not the oldest",
                vec![
                    ready("a", "2026-01-01T00:00:00Z"),
                    outdated("b", "2026-01-01T00:01:00Z"),
                    ready("c", "2026-01-01T00:02:00Z"),
                    ready("e", "2026-01-01T00:03:00Z"),
                ],
                3,
                true,
                Step::Remove("b".into()),
            ),
            (
                "up to date at the replica count: settled",
                vec![
                    ready("a", "2026-01-01T00:00:00Z"),
                    ready("b", "2026-01-01T00:01:00Z"),
                    ready("c", "2026-01-01T00:02:00Z"),
                ],
                3,
                true,
                Step::Settled,
            ),
        ];
        for (case, members, replicas, initialized, want) in cases {
            assert_eq!(decide(&members, replicas, 1, initialized), want, "{case}");
        }
    }

    #[test]
    fn the_spec_the_endpoint_and_the_template_come_before_the_machines() {
        let members = [member("a", true, true, "2026-01-01T00:00:00Z")];
        let template = Refusal {
            reason: "InvalidMachineTemplate",
            message: "create it".into(),
        };
        let valid = validation::judge(3, "v1.31.0", &members, None);
        let invalid = validation::judge(0, "v1.31.0", &members, None);
        use kubeconfig::ControlPlaneEndpoint::{Set, Unset};
        let cases = [
            (
                "a refused spec first",
                &invalid,
                Unset,
                Some(&template),
                "InvalidReplicas",
            ),
            ("then the endpoint", &valid, Unset, Some(&template), "Wait"),
            (
                "then the template",
                &valid,
                Set,
                Some(&template),
                "InvalidMachineTemplate",
            ),
            ("then the Machines", &valid, Set, None, "Create"),
        ];
        for (case, judgement, endpoint, template_problem, want) in cases {
            let step = next_step(&Findings {
                judgement,
                endpoint,
                cluster_name: "c",
                template_problem,
                members: &members,
                replicas: 3,
                surge: 1,
                initialized: true,
            });
            let got = match &step {
                Step::Refuse(refusal) => refusal.reason,
                Step::Wait(message) => {
                    assert_eq!(message, "Cluster c has no spec.controlPlaneEndpoint yet");
                    "Wait"
                }
                Step::Create { init: false } => "Create",
                other => panic!("{case}: {other:?}"),
            };
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn each_ending_looks_again_as_often_as_it_needs() {
        let cases = [
            (Requeue::OnChange, Action::await_change()),
            (Requeue::Progress, Action::requeue(PROGRESS)),
            (
                Requeue::WaitingOnMachines,
                Action::requeue(WAITING_ON_MACHINES),
            ),
            (Requeue::Settled, Action::requeue(SETTLED)),
        ];
        for (requeue, want) in cases {
            assert_eq!(requeue.action(), want, "{requeue:?}");
        }
    }
}
