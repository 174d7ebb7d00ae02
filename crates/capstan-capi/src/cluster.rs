//! The Cluster controller.
//!
//! Each pass: owner references on the infrastructure cluster and control plane, the
//! `controlPlaneEndpoint` copied from the infrastructure cluster (or the control plane, when it
//! provides one), `initialization`, replica counts of the control plane and workers, conditions,
//! and the phase (Pending → Provisioning → Provisioned; Deleting).
//!
//! Deletion takes as many passes as it needs, in order: MachineDeployments, MachineSets and worker
//! Machines first; once they are gone the control plane; once it is gone the infrastructure
//! cluster; then the finalizer goes.

use crate::CLUSTER_FINALIZER;
use crate::contract::{self, ContractError, Referenced};
use capstan_model::capi::v1beta2::{
    Cluster, ClusterStatus, Machine, MachineDeployment, MachineSet,
};
use capstan_model::meta::{LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::patch::{self, PatchError};
use capstan_runtime::watches::{WatchError, named_by_label};
use capstan_runtime::{Action, Cleanup, Context, Reconciler};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PropagationPolicy};
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const CLUSTER_CONTROLLER: &str = "cluster";
/// How often a Cluster that waits on a provider is looked at again, in case a provider kind is not
/// watched (kinds capstan does not know).
pub const WAIT_REQUEUE: Duration = Duration::from_secs(30);
/// How often a deleting Cluster checks whether the current step's objects are gone.
pub const DELETE_REQUEUE: Duration = Duration::from_secs(5);

/// Phases of a Cluster.
pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_PROVISIONING: &str = "Provisioning";
pub const PHASE_PROVISIONED: &str = "Provisioned";
pub const PHASE_DELETING: &str = "Deleting";

/// Condition types of a Cluster (v1beta2).
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
pub const CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";
pub const CONTROL_PLANE_AVAILABLE: &str = "ControlPlaneAvailable";
pub const WORKERS_AVAILABLE: &str = "WorkersAvailable";
pub const AVAILABLE: &str = "Available";
pub const DELETING: &str = "Deleting";

/// Why a Cluster pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("provider object")]
    Contract(#[from] ContractError),
    #[error("writing")]
    Patch(#[from] PatchError),
    #[error("cache")]
    Cache(#[from] WatchError),
    #[error("deleting {kind} {namespace}/{name}")]
    Delete {
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("Cluster has no namespace")]
    NoNamespace,
}

/// The Cluster controller.
#[derive(Clone, Debug, Default)]
pub struct ClusterController;

/// What a pass saw of the provider objects and children, the input of [`compute_status`].
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The infrastructure cluster, when referenced and found.
    pub infrastructure: Option<Value>,
    /// Whether `spec.infrastructureRef` is set.
    pub infrastructure_referenced: bool,
    /// The control plane, when referenced and found.
    pub control_plane: Option<Value>,
    /// Whether `spec.controlPlaneRef` is set.
    pub control_plane_referenced: bool,
    /// Control-plane Machines (without a control-plane object: the cluster's own).
    pub control_plane_machines: Vec<MachineSummary>,
    /// Worker Machines.
    pub workers: Vec<MachineSummary>,
    /// Whether `spec.controlPlaneEndpoint` is (or is being) set.
    pub endpoint_set: bool,
}

/// What the Cluster counts of one Machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSummary {
    pub has_node: bool,
    pub ready: bool,
    pub available: bool,
    pub up_to_date: bool,
}

impl MachineSummary {
    fn of(machine: &Machine) -> Self {
        let status = machine.status.clone().unwrap_or_default();
        let ready = conditions::is_true(&status.conditions, crate::machine::READY);
        Self {
            has_node: status.node_ref.is_some(),
            ready,
            available: conditions::get(&status.conditions, crate::machine::AVAILABLE)
                .map_or(ready, |c| c.status == TRUE),
            up_to_date: conditions::get(&status.conditions, crate::machine::UP_TO_DATE)
                .is_none_or(|c| c.status != FALSE),
        }
    }
}

fn counts(machines: &[MachineSummary], desired: Option<i64>) -> Value {
    let n = |f: fn(&MachineSummary) -> bool| machines.iter().filter(|m| f(m)).count();
    json!({
        "desiredReplicas": desired.unwrap_or(machines.len() as i64),
        "replicas": machines.len(),
        "readyReplicas": n(|m| m.ready),
        "availableReplicas": n(|m| m.available),
        "upToDateReplicas": n(|m| m.up_to_date),
    })
}

/// The status a Cluster should have, from what a pass observed (pure: the table-tested core).
pub fn compute_status(
    cluster: &Cluster,
    observed: &Observed,
    deleting: bool,
    now: &str,
) -> ClusterStatus {
    let mut status = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let infra = observed.infrastructure.as_ref().map(as_dynamic);
    let infra_provisioned = infra.as_ref().is_some_and(contract::provisioned);
    let cp = observed.control_plane.as_ref().map(as_dynamic);
    let cp_initialized = match &cp {
        Some(cp) => contract::control_plane_initialized(cp),
        None if !observed.control_plane_referenced => {
            observed.control_plane_machines.iter().any(|m| m.has_node)
        }
        None => false,
    };
    let mut init = status
        .initialization
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    // Once true, these stay true (the contract's "initialization" is a one-way latch).
    if infra_provisioned || !observed.infrastructure_referenced {
        init["infrastructureProvisioned"] = json!(true);
    }
    if cp_initialized {
        init["controlPlaneInitialized"] = json!(true);
    }
    let infra_done = init["infrastructureProvisioned"].as_bool() == Some(true);
    let cp_done = init["controlPlaneInitialized"].as_bool() == Some(true);
    // Upstream's `initialization` has at least one field: none latched yet, none written.
    status.initialization = init
        .as_object()
        .is_some_and(|fields| !fields.is_empty())
        .then_some(init);

    let set = |status: &mut ClusterStatus, type_: &str, ok: bool, reason: &str, message: String| {
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(
                type_,
                if ok { TRUE } else { FALSE },
                reason,
                message,
                generation,
            ),
            now,
        );
    };
    let infra_ref = cluster.spec.infrastructure_ref.as_ref();
    match (infra_ref, &infra) {
        (None, _) => set(
            &mut status,
            INFRASTRUCTURE_READY,
            true,
            "NoInfrastructure",
            String::new(),
        ),
        (Some(r), None) => set(
            &mut status,
            INFRASTRUCTURE_READY,
            false,
            "InfrastructureDoesNotExist",
            format!("{} {} does not exist", r.kind, r.name),
        ),
        (Some(r), Some(object)) if !infra_provisioned => set(
            &mut status,
            INFRASTRUCTURE_READY,
            false,
            "WaitingForInfrastructure",
            match contract::not_ready_reason(object) {
                Some(why) => format!("{} {} is not provisioned: {why}", r.kind, r.name),
                None => format!("{} {} is not provisioned yet", r.kind, r.name),
            },
        ),
        (Some(_), Some(_)) => set(
            &mut status,
            INFRASTRUCTURE_READY,
            true,
            "Provisioned",
            String::new(),
        ),
    }
    let cp_ref = cluster.spec.control_plane_ref.as_ref();
    if cp_done {
        set(
            &mut status,
            CONTROL_PLANE_INITIALIZED,
            true,
            "Initialized",
            String::new(),
        );
    } else {
        let message = match (cp_ref, &cp) {
            (Some(r), None) => format!("{} {} does not exist", r.kind, r.name),
            (Some(r), Some(object)) => match contract::not_ready_reason(object) {
                Some(why) => format!("waiting for {} {} to initialise: {why}", r.kind, r.name),
                None => format!("waiting for {} {} to initialise", r.kind, r.name),
            },
            (None, _) => "waiting for a control-plane Machine with a Node".to_owned(),
        };
        set(
            &mut status,
            CONTROL_PLANE_INITIALIZED,
            false,
            "WaitingForControlPlane",
            message,
        );
    }
    let cp_available = match &cp {
        Some(object) => {
            let available = contract::at(&object.data, "status.conditions")
                .as_array()
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some(AVAILABLE))
                })
                .map(|c| c.get("status").and_then(Value::as_str) == Some(TRUE));
            available.unwrap_or(cp_done)
        }
        None => cp_done,
    };
    set(
        &mut status,
        CONTROL_PLANE_AVAILABLE,
        cp_available,
        if cp_available {
            "Available"
        } else {
            "NotAvailable"
        },
        String::new(),
    );
    let workers_available = observed.workers.iter().all(|m| m.available);
    let not_available = observed.workers.iter().filter(|m| !m.available).count();
    set(
        &mut status,
        WORKERS_AVAILABLE,
        workers_available,
        if workers_available {
            "Available"
        } else {
            "NotAvailable"
        },
        if workers_available {
            String::new()
        } else {
            format!(
                "{not_available} of {} worker Machines not available",
                observed.workers.len()
            )
        },
    );
    let available = infra_done && cp_available && workers_available && !deleting;
    set(
        &mut status,
        AVAILABLE,
        available,
        if available {
            "Available"
        } else {
            "NotAvailable"
        },
        String::new(),
    );
    if deleting {
        set(&mut status, DELETING, true, "Deleting", String::new());
    }

    let cp_desired = cp
        .as_ref()
        .and_then(|o| contract::at(&o.data, "spec.replicas").as_i64());
    status.control_plane = Some(match &cp {
        Some(object) => json!({
            "desiredReplicas": cp_desired,
            "replicas": contract::at(&object.data, "status.replicas").as_i64().unwrap_or(0),
            "readyReplicas": contract::at(&object.data, "status.readyReplicas").as_i64().unwrap_or(0),
            "availableReplicas": contract::at(&object.data, "status.availableReplicas").as_i64().unwrap_or(0),
            "upToDateReplicas": contract::at(&object.data, "status.upToDateReplicas").as_i64().unwrap_or(0),
        }),
        None => counts(&observed.control_plane_machines, None),
    });
    status.workers = Some(counts(&observed.workers, None));
    if let Some(domains) = infra
        .as_ref()
        .map(|o| contract::at(&o.data, "status.failureDomains"))
        .filter(|d| !d.is_null())
    {
        status.failure_domains = Some(domains.clone());
    }
    status.phase = Some(phase(observed, infra_done, deleting).to_owned());
    status.observed_generation = generation;
    status
}

/// The phase, as upstream computes it: Pending, Provisioning once something is referenced,
/// Provisioned once the infrastructure is and the endpoint is set, Deleting while deleted.
pub fn phase(
    observed: &Observed,
    infrastructure_provisioned: bool,
    deleting: bool,
) -> &'static str {
    if deleting {
        PHASE_DELETING
    } else if infrastructure_provisioned && observed.endpoint_set {
        PHASE_PROVISIONED
    } else if observed.infrastructure_referenced || observed.control_plane_referenced {
        PHASE_PROVISIONING
    } else {
        PHASE_PENDING
    }
}

fn as_dynamic(data: &Value) -> DynamicObject {
    DynamicObject {
        types: None,
        metadata: Default::default(),
        data: data.clone(),
    }
}

fn is_control_plane(machine: &Machine) -> bool {
    machine.labels().contains_key(LABEL_CONTROL_PLANE)
}

fn of_cluster<K: Resource>(object: &K, cluster: &str) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CLUSTER_NAME))
        .is_some_and(|c| c == cluster)
}

impl ClusterController {
    async fn observe(
        &self,
        cluster: &Cluster,
        namespace: &str,
        context: &Context,
    ) -> Result<
        (
            Observed,
            Option<Referenced>,
            Option<DynamicObject>,
            Option<Referenced>,
            Option<DynamicObject>,
        ),
        ClusterError,
    > {
        let client = context.client();
        let name = cluster.name_any();
        let mut observed = Observed {
            infrastructure_referenced: cluster.spec.infrastructure_ref.is_some(),
            control_plane_referenced: cluster.spec.control_plane_ref.is_some(),
            endpoint_set: cluster
                .spec
                .control_plane_endpoint
                .as_ref()
                .is_some_and(|e| !e.host.is_empty() && e.port > 0),
            ..Observed::default()
        };
        let (infra_api, infra) = match &cluster.spec.infrastructure_ref {
            Some(r) if !r.name.is_empty() => {
                let api = Referenced::resolve(client, namespace, r).await?;
                let object = read_referenced(&api, context, cluster).await?;
                (Some(api), object)
            }
            _ => (None, None),
        };
        let (cp_api, cp) = match &cluster.spec.control_plane_ref {
            Some(r) if !r.name.is_empty() => {
                let api = Referenced::resolve(client, namespace, r).await?;
                let object = read_referenced(&api, context, cluster).await?;
                (Some(api), object)
            }
            _ => (None, None),
        };
        observed.infrastructure = infra.as_ref().map(|o| o.data.clone());
        observed.control_plane = cp.as_ref().map(|o| o.data.clone());
        let machines = context.cache::<Machine>().await?;
        for machine in machines.list(namespace, |m| {
            m.spec.cluster_name == name || of_cluster(m, &name)
        }) {
            let summary = MachineSummary::of(&machine);
            if is_control_plane(&machine) {
                observed.control_plane_machines.push(summary);
            } else {
                observed.workers.push(summary);
            }
        }
        Ok((observed, infra_api, infra, cp_api, cp))
    }

    async fn write_status(
        &self,
        cluster: &Cluster,
        namespace: &str,
        client: &Client,
        status: &ClusterStatus,
    ) -> Result<(), ClusterError> {
        let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
        let before = cluster.status.clone().unwrap_or_default();
        patch::patch_status(&api, cluster, &before, status).await?;
        Ok(())
    }
}

impl Reconciler for ClusterController {
    type Object = Cluster;
    type Error = ClusterError;

    fn name(&self) -> &'static str {
        CLUSTER_CONTROLLER
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(CLUSTER_FINALIZER)
    }

    fn cluster_name(&self, object: &Cluster) -> Option<String> {
        object.meta().name.clone()
    }

    fn configure(&self, controller: Controller<Cluster>, client: &Client) -> Controller<Cluster> {
        controller
            .watches(
                Api::<Machine>::all(client.clone()),
                watcher::Config::default(),
                |m: Machine| named_by_label::<Cluster, _>(&m, LABEL_CLUSTER_NAME),
            )
            .watches(
                Api::<MachineDeployment>::all(client.clone()),
                watcher::Config::default(),
                |m: MachineDeployment| named_by_label::<Cluster, _>(&m, LABEL_CLUSTER_NAME),
            )
            .watches(
                Api::<MachineSet>::all(client.clone()),
                watcher::Config::default(),
                |m: MachineSet| named_by_label::<Cluster, _>(&m, LABEL_CLUSTER_NAME),
            )
    }

    fn cached_kinds(&self) -> Vec<ApiResource> {
        cached_kinds().to_vec()
    }

    async fn reconcile(
        &self,
        cluster: Arc<Cluster>,
        context: Arc<Context>,
    ) -> Result<Action, ClusterError> {
        // The harness skips paused objects of other kinds; a Cluster pauses itself.
        if cluster.spec.paused == Some(true) {
            return Ok(Action::await_change());
        }
        let namespace = cluster.namespace().ok_or(ClusterError::NoNamespace)?;
        let client = context.client().clone();
        let (mut observed, infra_api, infra, cp_api, cp) =
            self.observe(&cluster, &namespace, &context).await?;
        let owner = contract::owner_reference(&*cluster, false);
        let label = [(LABEL_CLUSTER_NAME, cluster.name_any())];
        let labels: Vec<(&str, &str)> = label.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if let (Some(api), Some(object)) = (&infra_api, &infra) {
            api.adopt(object, owner.clone(), &[], &labels).await?;
        }
        if let (Some(api), Some(object)) = (&cp_api, &cp) {
            api.adopt(object, owner.clone(), &[], &labels).await?;
        }
        // The endpoint comes from the infrastructure cluster (or a control plane that provides
        // one), and is never changed once set: every kubeconfig and certificate names it.
        let mut current = (*cluster).clone();
        if !observed.endpoint_set
            && let Some((host, port)) = infra
                .as_ref()
                .and_then(contract::control_plane_endpoint)
                .or_else(|| cp.as_ref().and_then(contract::control_plane_endpoint))
        {
            let api: Api<Cluster> = Api::namespaced(client.clone(), &namespace);
            let before = json!({});
            let after = json!({"controlPlaneEndpoint": {"host": host, "port": port}});
            if let Some(updated) =
                patch::patch_field(&api, &*cluster, "spec", &before, &after).await?
            {
                current = updated;
            }
            observed.endpoint_set = true;
        }
        let status = compute_status(&cluster, &observed, false, &conditions::now());
        self.write_status(&current, &namespace, &client, &status)
            .await?;
        let settled = status.phase.as_deref() == Some(PHASE_PROVISIONED)
            && conditions::is_true(&status.conditions, CONTROL_PLANE_INITIALIZED);
        Ok(if settled {
            Action::await_change()
        } else {
            Action::requeue(WAIT_REQUEUE)
        })
    }

    async fn cleanup(
        &self,
        cluster: Arc<Cluster>,
        context: Arc<Context>,
    ) -> Result<Cleanup, ClusterError> {
        let namespace = cluster.namespace().ok_or(ClusterError::NoNamespace)?;
        let name = cluster.name_any();
        let client = context.client().clone();
        let (observed, infra_api, infra, cp_api, cp) =
            self.observe(&cluster, &namespace, &context).await?;
        let mut status = compute_status(&cluster, &observed, true, &conditions::now());
        let step = deletion_step(
            &context,
            &namespace,
            &name,
            infra_api.as_ref().zip(infra.as_ref()).is_some(),
            cp_api.as_ref().zip(cp.as_ref()).is_some(),
        )
        .await?;
        let message = match &step {
            DeletionStep::Workers(n) => format!(
                "waiting for {n} MachineDeployments, MachineSets and worker Machines to be deleted"
            ),
            DeletionStep::ControlPlane => "waiting for the control plane to be deleted".to_owned(),
            DeletionStep::Infrastructure => {
                "waiting for the infrastructure cluster to be deleted".to_owned()
            }
            DeletionStep::Done => String::new(),
        };
        conditions::set_condition(
            &mut status.conditions,
            conditions::condition(
                DELETING,
                TRUE,
                "Deleting",
                message,
                cluster.metadata.generation,
            ),
            &conditions::now(),
        );
        self.write_status(&cluster, &namespace, &client, &status)
            .await?;
        match step {
            DeletionStep::Workers(_) => {
                delete_workers(&context, &namespace, &name).await?;
                Ok(Cleanup::Pending(Action::requeue(DELETE_REQUEUE)))
            }
            DeletionStep::ControlPlane => {
                if let Some(api) = &cp_api {
                    api.delete().await?;
                }
                Ok(Cleanup::Pending(Action::requeue(DELETE_REQUEUE)))
            }
            DeletionStep::Infrastructure => {
                if let Some(api) = &infra_api {
                    api.delete().await?;
                }
                Ok(Cleanup::Pending(Action::requeue(DELETE_REQUEUE)))
            }
            DeletionStep::Done => Ok(Cleanup::Done),
        }
    }
}

/// Where a Cluster's deletion stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionStep {
    /// This many MachineDeployments, MachineSets and worker Machines remain.
    Workers(usize),
    /// Workers are gone; the control plane remains (including its Machines).
    ControlPlane,
    /// The control plane is gone; the infrastructure cluster remains.
    Infrastructure,
    /// Everything is gone.
    Done,
}

async fn deletion_step(
    context: &Context,
    namespace: &str,
    cluster: &str,
    infra_exists: bool,
    cp_exists: bool,
) -> Result<DeletionStep, ClusterError> {
    let client = context.client();
    let deployments = Api::<MachineDeployment>::namespaced(client.clone(), namespace)
        .list(&label_selector(cluster))
        .await
        .map_err(list_error("MachineDeployment", namespace))?
        .items
        .len();
    let sets = Api::<MachineSet>::namespaced(client.clone(), namespace)
        .list(&label_selector(cluster))
        .await
        .map_err(list_error("MachineSet", namespace))?
        .items
        .len();
    let machines = Api::<Machine>::namespaced(client.clone(), namespace)
        .list(&label_selector(cluster))
        .await
        .map_err(list_error("Machine", namespace))?
        .items;
    let workers = machines.iter().filter(|m| !is_control_plane(m)).count();
    let control_plane_machines = machines.len() - workers;
    let remaining = deployments + sets + workers;
    Ok(if remaining > 0 {
        DeletionStep::Workers(remaining)
    } else if cp_exists || control_plane_machines > 0 {
        DeletionStep::ControlPlane
    } else if infra_exists {
        DeletionStep::Infrastructure
    } else {
        DeletionStep::Done
    })
}

fn label_selector(cluster: &str) -> kube::api::ListParams {
    kube::api::ListParams::default().labels(&format!("{LABEL_CLUSTER_NAME}={cluster}"))
}

fn list_error(kind: &'static str, namespace: &str) -> impl FnOnce(kube::Error) -> ClusterError {
    let namespace = namespace.to_owned();
    move |source| ClusterError::Delete {
        kind,
        namespace,
        name: String::new(),
        source: Box::new(source),
    }
}

async fn delete_workers(
    context: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<(), ClusterError> {
    let client = context.client();
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    async fn delete_all<K>(
        api: Api<K>,
        cluster: &str,
        params: &DeleteParams,
        kind: &'static str,
        namespace: &str,
        keep: impl Fn(&K) -> bool,
    ) -> Result<(), ClusterError>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let items = api
            .list(&label_selector(cluster))
            .await
            .map_err(list_error(kind, namespace))?
            .items;
        for item in items
            .iter()
            .filter(|i| keep(i) && i.meta().deletion_timestamp.is_none())
        {
            let name = item.name_any();
            match api.delete(&name, params).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(ClusterError::Delete {
                        kind,
                        namespace: namespace.to_owned(),
                        name,
                        source: Box::new(source),
                    });
                }
            }
        }
        Ok(())
    }
    delete_all(
        Api::<MachineDeployment>::namespaced(client.clone(), namespace),
        cluster,
        &params,
        "MachineDeployment",
        namespace,
        |_| true,
    )
    .await?;
    delete_all(
        Api::<MachineSet>::namespaced(client.clone(), namespace),
        cluster,
        &params,
        "MachineSet",
        namespace,
        |_| true,
    )
    .await?;
    // Worker Machines are deleted directly too, not only through their sets' garbage collection,
    // so deletion does not depend on a collector being present or quick.
    delete_all(
        Api::<Machine>::namespaced(client.clone(), namespace),
        cluster,
        &params,
        "Machine",
        namespace,
        |m: &Machine| !is_control_plane(m),
    )
    .await?;
    Ok(())
}

/// A provider object the Cluster references: from the process's cache once the Cluster owns it
/// (its changes then wake the Cluster, after they reach the cache), read live before that — a
/// change to an object the Cluster does not own yet wakes nothing, so a stale cached copy would
/// fail the adoption's conditional write until the requeue's backoff ran out.
async fn read_referenced(
    api: &Referenced,
    context: &Context,
    cluster: &Cluster,
) -> Result<Option<DynamicObject>, ContractError> {
    let cached = api.get_cached(context.objects(), cached_kinds()).await?;
    let owned = cached.as_ref().is_some_and(|object| {
        object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(&o.uid) == cluster.metadata.uid.as_ref())
    });
    if owned { Ok(cached) } else { api.get().await }
}

/// The provider kinds a Cluster references that its reconciles read from the process's caches (the
/// harness wakes a Cluster when one it owns changes, after recording the change there).
fn cached_kinds() -> &'static [ApiResource] {
    static KINDS: std::sync::OnceLock<Vec<ApiResource>> = std::sync::OnceLock::new();
    KINDS.get_or_init(|| provider_kinds(&["Metal3Cluster", "KVMCluster", "KubeadmControlPlane"]))
}

/// The provider kinds capstan knows by name, at their storage version, for watches.
pub fn provider_kinds(kinds: &[&str]) -> Vec<ApiResource> {
    capstan_model::kinds::KINDS
        .iter()
        .filter(|k| kinds.contains(&k.kind))
        .map(|k| ApiResource {
            group: k.group.to_owned(),
            version: k.storage_version.to_owned(),
            api_version: k.api_version(k.storage_version),
            kind: k.kind.to_owned(),
            plural: k.plural.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::capi::v1beta2::ClusterSpec;
    use capstan_model::meta::ContractVersionedObjectReference;

    fn cluster(infra: bool, cp: bool) -> Cluster {
        Cluster::new(
            "c",
            Some("ns"),
            ClusterSpec {
                infrastructure_ref: infra.then(|| {
                    ContractVersionedObjectReference::to(
                        "infrastructure.cluster.x-k8s.io",
                        "Metal3Cluster",
                        "c",
                    )
                }),
                control_plane_ref: cp.then(|| {
                    ContractVersionedObjectReference::to(
                        "controlplane.cluster.x-k8s.io",
                        "KubeadmControlPlane",
                        "c",
                    )
                }),
                ..ClusterSpec::default()
            },
        )
    }

    #[test]
    fn phases_and_initialization_table() {
        struct Case {
            name: &'static str,
            cluster: Cluster,
            observed: Observed,
            deleting: bool,
            phase: &'static str,
            infra_ready: bool,
            cp_initialized: bool,
        }
        let provisioned = json!({"status": {"initialization": {"provisioned": true}}});
        let cases = [
            Case {
                name: "nothing referenced",
                cluster: cluster(false, false),
                observed: Observed::default(),
                deleting: false,
                phase: PHASE_PENDING,
                infra_ready: true,
                cp_initialized: false,
            },
            Case {
                name: "infra missing",
                cluster: cluster(true, true),
                observed: Observed {
                    infrastructure_referenced: true,
                    control_plane_referenced: true,
                    ..Observed::default()
                },
                deleting: false,
                phase: PHASE_PROVISIONING,
                infra_ready: false,
                cp_initialized: false,
            },
            Case {
                name: "infra provisioned, no endpoint",
                cluster: cluster(true, true),
                observed: Observed {
                    infrastructure_referenced: true,
                    control_plane_referenced: true,
                    infrastructure: Some(provisioned.clone()),
                    ..Observed::default()
                },
                deleting: false,
                phase: PHASE_PROVISIONING,
                infra_ready: true,
                cp_initialized: false,
            },
            Case {
                name: "provisioned",
                cluster: cluster(true, true),
                observed: Observed {
                    infrastructure_referenced: true,
                    control_plane_referenced: true,
                    infrastructure: Some(json!({"status": {"ready": true}})),
                    control_plane: Some(
                        json!({"status": {"initialization": {"controlPlaneInitialized": true}}}),
                    ),
                    endpoint_set: true,
                    ..Observed::default()
                },
                deleting: false,
                phase: PHASE_PROVISIONED,
                infra_ready: true,
                cp_initialized: true,
            },
            Case {
                name: "machines without control plane object",
                cluster: cluster(true, false),
                observed: Observed {
                    infrastructure_referenced: true,
                    infrastructure: Some(provisioned.clone()),
                    endpoint_set: true,
                    control_plane_machines: vec![MachineSummary {
                        has_node: true,
                        ready: true,
                        available: true,
                        up_to_date: true,
                    }],
                    ..Observed::default()
                },
                deleting: false,
                phase: PHASE_PROVISIONED,
                infra_ready: true,
                cp_initialized: true,
            },
            Case {
                name: "deleting",
                cluster: cluster(true, true),
                observed: Observed {
                    infrastructure_referenced: true,
                    infrastructure: Some(provisioned),
                    endpoint_set: true,
                    ..Observed::default()
                },
                deleting: true,
                phase: PHASE_DELETING,
                infra_ready: true,
                cp_initialized: false,
            },
        ];
        for case in cases {
            let status = compute_status(
                &case.cluster,
                &case.observed,
                case.deleting,
                "2026-01-01T00:00:00Z",
            );
            assert_eq!(status.phase.as_deref(), Some(case.phase), "{}", case.name);
            assert_eq!(
                conditions::is_true(&status.conditions, INFRASTRUCTURE_READY),
                case.infra_ready,
                "{}",
                case.name
            );
            assert_eq!(
                conditions::is_true(&status.conditions, CONTROL_PLANE_INITIALIZED),
                case.cp_initialized,
                "{}",
                case.name
            );
            let init = status.initialization.unwrap_or_default();
            assert_eq!(
                init["controlPlaneInitialized"].as_bool() == Some(true),
                case.cp_initialized,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn waiting_conditions_name_the_provider_object_and_its_reason() {
        let observed = Observed {
            infrastructure_referenced: true,
            infrastructure: Some(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NoEndpoint", "message": "set spec.controlPlaneEndpoint"}]}}),
            ),
            ..Observed::default()
        };
        let status = compute_status(&cluster(true, false), &observed, false, "t");
        let infra = conditions::get(&status.conditions, INFRASTRUCTURE_READY)
            .cloned()
            .unwrap_or_default();
        assert_eq!(infra.reason.as_deref(), Some("WaitingForInfrastructure"));
        assert_eq!(
            infra.message.as_deref(),
            Some("Metal3Cluster c is not provisioned: NoEndpoint: set spec.controlPlaneEndpoint")
        );
    }

    #[test]
    fn worker_counts() {
        let observed = Observed {
            workers: vec![
                MachineSummary {
                    has_node: true,
                    ready: true,
                    available: true,
                    up_to_date: true,
                },
                MachineSummary::default(),
            ],
            ..Observed::default()
        };
        let status = compute_status(&cluster(false, false), &observed, false, "t");
        let workers = status.workers.unwrap_or_default();
        assert_eq!(workers["replicas"], 2);
        assert_eq!(workers["readyReplicas"], 1);
        assert!(!conditions::is_true(&status.conditions, WORKERS_AVAILABLE));
    }
}
