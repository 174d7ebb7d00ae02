//! capstan's controllers, and how to run them.
//!
//! - [`ipam`]: the Metal3 IPAM pool allocator (IPClaim → IPAddress from an IPPool).
//! - [`capstan_hosts`]: the BareMetalHost controller (when [`ControllerOptions::hosts`] is set).
//! - [`capstan_capi`]: the Cluster API core controllers (Cluster, Machine, MachineSet,
//!   MachineDeployment), reaching workload clusters through [`ControllerOptions::workloads`].
//! - [`capstan_kubeadm`]: the KubeadmConfig and KubeadmControlPlane controllers.
//! - [`capstan_metal3`]: the Metal3 infrastructure provider (Metal3Cluster, Metal3Machine).
//! - [`capstan_kvm`]: the KVM infrastructure provider (KVMCluster, KVMMachine as libvirt domains),
//!   on the process's shared libvirt driver (no hypervisor is dialled until a KVMMachine names one).
//! - [`capstan_sim`]: the simulated workload backend's boot controller (when
//!   [`ControllerOptions::simulator`] is set).
//! - [`capstan_addons`]: the ClusterResourceSet controller, and [`capstan_capi::healthcheck`]: the
//!   MachineHealthCheck controller (both when [`ControllerOptions::workloads`] is set: they reach
//!   into workload clusters).
//! - [`gc`]: the owner-reference garbage collector, for the embedded API server only (a real
//!   cluster has its own).
//!
//! [`run_controllers`] starts every shipped controller on a client — the in-process one for
//! `capstan serve`, a kubeconfig one for standalone `capstan controllers` — and returns on shutdown.
//! [`crds`] lists the CustomResourceDefinitions the controllers need on a real cluster.

pub mod gc;
pub mod ipam;

pub use capstan_kubeadm::report::router as bootstrap_report_router;
use capstan_runtime::{RunOptions, RuntimeError, Task, controller_task};
use kube::Client;
use serde_json::Value;
use std::time::Duration;

/// How [`run_controllers`] runs.
#[derive(Clone)]
pub struct ControllerOptions {
    /// Shutdown, metrics, health, identity and leader election.
    pub runtime: RunOptions,
    /// Run the garbage collector (the embedded API has no other), discovering the served kinds
    /// again this often; `None` against a real cluster.
    pub garbage_collection: Option<Duration>,
    /// Run the BareMetalHost controller with these settings (it needs the provisioning server
    /// that shares its agent registry running in the same process).
    pub hosts: Option<capstan_hosts::HostSettings>,
    /// How controllers reach workload clusters; `None` is a kubeconfig-based access
    /// (`<cluster>-kubeconfig` Secrets) on the management client.
    pub workloads: Option<capstan_workload::SharedWorkloadAccess>,
    /// The etcd membership of workload clusters (KubeadmControlPlane); `None` is the real one
    /// (`capstan_etcd::KubeadmEtcd`) over the workload access.
    pub etcd: Option<capstan_workload::SharedEtcdMembership>,
    /// Base URL (reachable by nodes) of the server that mounts `capstan_kubeadm::report::router`;
    /// `None` renders bootstrap data without step reporting.
    pub bootstrap_report_url: Option<String>,
    /// Run the simulated workload backend's boot controller (`capstan serve --simulate-workloads`).
    pub simulator: Option<std::sync::Arc<capstan_sim::Simulator>>,
}

impl std::fmt::Debug for ControllerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerOptions")
            .field("runtime", &self.runtime)
            .field("garbage_collection", &self.garbage_collection)
            .field("hosts", &self.hosts)
            .field("workloads", &self.workloads.is_some())
            .field("etcd", &self.etcd.is_some())
            .field("bootstrap_report_url", &self.bootstrap_report_url)
            .field("simulator", &self.simulator.is_some())
            .finish()
    }
}

impl ControllerOptions {
    /// For controllers in the same process as the embedded API server: no leader election, with
    /// the garbage collector.
    pub fn embedded(runtime: RunOptions) -> Self {
        Self {
            runtime,
            garbage_collection: Some(gc::DEFAULT_DISCOVERY_INTERVAL),
            hosts: None,
            workloads: None,
            etcd: None,
            bootstrap_report_url: None,
            simulator: None,
        }
    }

    /// For controllers against a separate API server (`runtime` normally carries leader election):
    /// no garbage collector.
    pub fn standalone(runtime: RunOptions) -> Self {
        Self {
            runtime,
            garbage_collection: None,
            hosts: None,
            workloads: None,
            etcd: None,
            bootstrap_report_url: None,
            simulator: None,
        }
    }
}

/// The shipped controllers, made afresh (a leader runs a new set each term).
pub fn shipped_controllers(options: &ControllerOptions) -> Vec<Box<dyn Task>> {
    let mut tasks = vec![
        controller_task(ipam::ClaimController::new()),
        controller_task(ipam::PoolController),
    ];
    if let Some(settings) = &options.hosts {
        tasks.push(controller_task(capstan_hosts::HostController::new(
            settings.clone(),
        )));
    }
    tasks.extend(capstan_capi::controllers(options.workloads.clone()));
    tasks.extend(capstan_kubeadm::controllers(
        options.workloads.clone(),
        options.etcd.clone(),
        options.bootstrap_report_url.clone(),
    ));
    tasks.extend(capstan_metal3::controllers(options.workloads.clone()));
    tasks.extend(capstan_kvm::controllers(
        capstan_kvm::Driver::shared(),
        options.workloads.clone(),
    ));
    if let Some(simulator) = &options.simulator {
        tasks.push(simulator.boot_task());
        tasks.push(simulator.kvm_boot_task());
        tasks.push(simulator.reaper_task());
    }
    if let Some(workloads) = &options.workloads {
        tasks.push(controller_task(
            capstan_addons::ClusterResourceSetController::new(workloads.clone()),
        ));
        tasks.push(controller_task(
            capstan_capi::healthcheck::MachineHealthCheckController::new(workloads.clone()),
        ));
    }
    if let Some(interval) = options.garbage_collection {
        tasks.push(Box::new(gc::GarbageCollector::new(interval)));
    }
    tasks
}

/// Runs every shipped controller until `options.runtime.shutdown` is cancelled (or one fails).
pub async fn run_controllers(
    client: Client,
    options: ControllerOptions,
) -> Result<(), RuntimeError> {
    let mut options = options;
    let workloads = match &options.workloads {
        Some(workloads) => workloads.clone(),
        None => {
            // One access (one cached client per workload cluster) shared by every controller and
            // kept across leadership terms.
            let workloads: capstan_workload::SharedWorkloadAccess =
                std::sync::Arc::new(capstan_workload::KubeconfigAccess::new(client.clone()));
            options.workloads = Some(workloads.clone());
            workloads
        }
    };
    if options.etcd.is_none() {
        // The real clusters' etcd: members read and changed over etcd's own API with a client
        // certificate of `<cluster>-etcd`, so no control-plane Machine goes before its member.
        options.etcd = Some(std::sync::Arc::new(capstan_etcd::KubeadmEtcd::new(
            client.clone(),
            workloads,
        )));
    }
    let make = {
        let options = options.clone();
        move || shipped_controllers(&options)
    };
    capstan_runtime::run(client, options.runtime, make).await
}

/// The CustomResourceDefinitions the controllers need: capstan's own kinds (what `capstan crds`
/// prints for installing into a real cluster, and `capstan serve` stores), in the form
/// kube-apiserver accepts.
pub fn crds() -> Vec<Value> {
    capstan_apiserver::registry::capstan_crds()
        .into_iter()
        .map(|mut crd| {
            for_real_api_server(&mut crd);
            crd
        })
        .collect()
}

/// What kube-apiserver requires of a CRD beyond what capstan's own API server uses internally: the
/// root `metadata` of a version's schema may say nothing but `type: object` (kube-apiserver
/// validates ObjectMeta itself and refuses "must not specify anything other than name and
/// generateName"), while capstan's built-in schemas carry the full ObjectMeta for `kubectl
/// explain`.
fn for_real_api_server(crd: &mut Value) {
    let Some(versions) = crd["spec"]["versions"].as_array_mut() else {
        return;
    };
    for version in versions {
        if let Some(properties) = version["schema"]["openAPIV3Schema"]["properties"].as_object_mut()
            && properties.contains_key("metadata")
        {
            properties.insert("metadata".to_owned(), serde_json::json!({"type": "object"}));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_leave_object_meta_to_the_api_server() {
        for crd in crds() {
            for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
                let metadata = &version["schema"]["openAPIV3Schema"]["properties"]["metadata"];
                assert!(
                    metadata.is_null() || *metadata == serde_json::json!({"type": "object"}),
                    "{}: {metadata}",
                    crd["metadata"]["name"]
                );
            }
        }
    }

    #[test]
    fn crds_cover_the_controllers_kinds_and_nothing_core() {
        let crds = crds();
        let names: Vec<&str> = crds
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect();
        for wanted in [
            "ippools.ipam.metal3.io",
            "ipclaims.ipam.metal3.io",
            "ipaddresses.ipam.metal3.io",
            "clusters.cluster.x-k8s.io",
        ] {
            assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
        }
        assert!(crds.iter().all(|c| c["kind"] == "CustomResourceDefinition"));
        assert!(!names.iter().any(|n| *n == "secrets"
            || n.ends_with(".events.k8s.io")
            || n.ends_with("coordination.k8s.io")));
    }
}
