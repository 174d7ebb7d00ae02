//! Cluster API core: the controllers of `cluster.x-k8s.io` kinds.
//!
//! They speak to providers only through the Cluster API contracts (fields on the referenced
//! infrastructure, bootstrap and control-plane objects, read untyped by [`contract`]), so any
//! provider that honours the contracts plugs in; they reach workload clusters through
//! `capstan-workload`.
//!
//! - [`cluster`]: Cluster — phases, `controlPlaneEndpoint` from the infrastructure cluster, owner
//!   references on the infrastructure and control-plane objects, `initialization`, conditions,
//!   replica counts, and deletion in order (workers → control plane → infrastructure).
//! - [`machine`]: Machine — bootstrap `dataSecretName` → infrastructure `providerID` → `nodeRef`,
//!   node-role labels on the Node, phases, conditions that say what the Machine waits for, and
//!   deletion (pre-drain hooks, [`drain`], pre-terminate hooks, infrastructure → bootstrap → Node).
//! - [`machineset`]: MachineSet — replicas, deletion order, adoption, templates cloned by the
//!   `spec.template.spec` contract.
//! - [`machinedeployment`]: MachineDeployment — MachineSets by template hash, RollingUpdate and
//!   OnDelete, revisions, pause, `rollout.after`.
//! - [`healthcheck`]: MachineHealthCheck — unhealthy Nodes and Machines that never got one,
//!   `maxUnhealthy`/`unhealthyRange`, remediation of MachineSet-owned Machines; [`nodewatch`]
//!   watches the Nodes of each workload cluster a check looks at.
//!
//! Every write is a merge patch of the fields the controller owns (`capstan_runtime::patch`).

pub mod cluster;
pub mod contract;
pub mod drain;
pub mod healthcheck;
pub mod machine;
pub mod machinedeployment;
pub mod machineset;
pub mod nodewatch;

use capstan_runtime::{Task, controller_task};
use capstan_workload::SharedWorkloadAccess;

/// Finalizer of the Cluster controller.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";
/// Finalizer of the Machine controller.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// Label on a MachineSet's Machines naming the set.
pub const LABEL_SET_NAME: &str = "cluster.x-k8s.io/set-name";
/// Label with the hash of the Machine template a MachineSet was made from.
pub const LABEL_TEMPLATE_HASH: &str = "machine-template-hash";
/// Annotation with a MachineSet's revision in its MachineDeployment.
pub const ANNOTATION_REVISION: &str = "machinedeployment.clusters.x-k8s.io/revision";
/// Annotation that marks a Machine to be deleted first when its set scales down.
pub const ANNOTATION_DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// Annotation of cloned objects: the template they came from.
pub const ANNOTATION_CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
/// Annotation of cloned objects: the template's group and kind.
pub const ANNOTATION_CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// The Cluster API core controllers. `workloads` reaches workload clusters (Nodes, drains); `None`
/// builds a kubeconfig-based access on the management client when the controller starts.
pub fn controllers(workloads: Option<SharedWorkloadAccess>) -> Vec<Box<dyn Task>> {
    vec![
        controller_task(cluster::ClusterController),
        controller_task(machine::MachineController::new(workloads)),
        controller_task(machineset::MachineSetController),
        controller_task(machinedeployment::MachineDeploymentController),
    ]
}
