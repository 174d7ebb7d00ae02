//! The simulated workload backend: capstan playing the workload clusters it creates, for demos,
//! tests and benchmarks where no real machines boot. It is switched on explicitly
//! (`capstan serve --simulate-workloads`) and only acts on hosts with `fake://` BMCs and VMs on
//! `test://` hypervisors — the machines whose hardware is already simulated — so it never stands
//! in for a real peer.
//!
//! # What is simulated, exactly
//!
//! - **A node booting its bootstrap data.** When a `fake://` BareMetalHost is `provisioned` with
//!   `spec.userData`, [`boot::BootController`] reads that Secret as cloud-init would: it renders
//!   `## template: jinja` variables (`{{ ds.meta_data.* }}`) from the host's meta data (uid as
//!   `uuid`, name, hostname, the metaData Secret's keys), parses the cloud-config, takes
//!   `/run/kubeadm/kubeadm.yaml` from `write_files` and sees whether `runcmd` runs `kubeadm init` or
//!   `kubeadm join`. No command is executed and no file is written.
//! - **`kubeadm init`**: the cluster's API server starts — a capstan API server of its own over a
//!   small SQLite store (in the data directory, or a temporary one), reached in-process; the
//!   InitConfiguration's bootstrap tokens, the `kubeadm-config` ConfigMap and the first Node are
//!   written, with the control plane's static pods and the first etcd member.
//! - **`kubeadm join`**: refused (a Warning Event `JoinRefused` on the host, retried) unless the
//!   bootstrap token exists in the workload's `kube-system` (`bootstrap-token-<id>` with the same
//!   secret); then the Node registers. A control-plane join also gets the static pods and an etcd
//!   member. The discovery CA hash is not checked.
//! - **The kubelet**: the Node gets its name (`nodeRegistration.name`, else the hostname), the
//!   `node-labels` and `provider-id` of `kubeletExtraArgs`, the host's addresses, the kubelet version
//!   and a `Ready` condition, once.
//! - **etcd**: [`EtcdMembership`] over the members recorded above (ids, health, leader).
//! - **Access**: [`WorkloadAccess`] hands out in-process clients for the clusters played here;
//!   every other cluster is "unreachable" until its control plane runs `kubeadm init` in the
//!   simulation. A cluster's kubeconfig is never used: its endpoint (a VIP on the hosts' network)
//!   is not where the simulated API is, and is never dialled.
//! - **kubectl**: with [`SimSettings::listen`], each workload API also listens on a loopback HTTPS
//!   port with a certificate from the cluster's CA ([`listener`]); the Cluster is annotated with the
//!   URL and `capstan kubeconfig CLUSTER` prints a kubeconfig for it.
//! - **Faults and delays**, by annotation on the BareMetalHost: `sim.capstan.io/boot-delay:
//!   "<seconds>"` (the node comes up that long after the host is provisioned),
//!   `sim.capstan.io/fault: never-join` (the node never appears), `bootstrap-fail` (a Warning Event
//!   `BootstrapFailed` naming the failing command, no Node), `not-ready` (the Node's `Ready` turns
//!   `Unknown`, as when the kubelet stops).
//!
//! - **VMs on simulated hypervisors**: a KVMMachine provisioned on a hypervisor whose libvirt URI
//!   is `test://` (libvirt's simulated hypervisor, whose domains run nothing) boots the same way
//!   ([`kvm_boot`]), from its Machine's bootstrap data; the node's hostname is the KVMMachine's name.
//!
//! Not simulated: containers, pods other than the static ones, kube-proxy, CNI, the kubelet's
//! heartbeats, certificate checks of the bootstrap data.

pub mod boot;
pub mod cloud_config;
pub mod kvm_boot;
pub mod listener;
pub mod workload;

use capstan_workload::{ClusterKey, EtcdMember, EtcdMembership, WorkloadAccess, WorkloadError};
use futures::future::BoxFuture;
use kube::Client;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use workload::SimCluster;

/// Annotation: a fault to play on a host (`never-join`, `bootstrap-fail`, `not-ready`).
pub const ANNOTATION_FAULT: &str = "sim.capstan.io/fault";
/// Annotation: seconds between the host being provisioned and its node coming up.
pub const ANNOTATION_BOOT_DELAY: &str = "sim.capstan.io/boot-delay";

/// Why a simulation step failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{what}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("opening the store of workload cluster {cluster}")]
    Store {
        cluster: ClusterKey,
        source: capstan_store::StoreError,
    },
    #[error("starting the API of workload cluster {cluster}")]
    Server {
        cluster: ClusterKey,
        source: capstan_apiserver::ServerError,
    },
    #[error("the HTTPS listener of workload cluster {cluster}: {reason}")]
    Tls { cluster: ClusterKey, reason: String },
    #[error("workload cluster {cluster}: {what}")]
    Workload {
        cluster: ClusterKey,
        what: String,
        source: Box<kube::Error>,
    },
    #[error("{verb} {kind} {namespace}/{name}")]
    Management {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
}

/// How the simulation runs.
#[derive(Clone, Debug, Default)]
pub struct SimSettings {
    /// Where workload stores live (kept across restarts); `None` uses temporary directories.
    pub state_dir: Option<PathBuf>,
    /// Serve each workload API on a loopback HTTPS port (for kubectl), once the cluster's CA
    /// Secret exists.
    pub listen: bool,
}

/// The simulated workload backend. Share it as the [`WorkloadAccess`] and [`EtcdMembership`] of
/// the controllers, and run [`Simulator::boot_task`] beside them.
pub struct Simulator {
    management: Client,
    settings: SimSettings,
    clusters: Mutex<HashMap<ClusterKey, Arc<SimCluster>>>,
    starting: tokio::sync::Mutex<()>,
}

impl Simulator {
    /// A simulator reading hosts through `management`.
    pub fn new(management: Client, settings: SimSettings) -> Arc<Self> {
        Arc::new(Self {
            management,
            settings,
            clusters: Mutex::new(HashMap::new()),
            starting: tokio::sync::Mutex::new(()),
        })
    }

    fn clusters(&self) -> MutexGuard<'_, HashMap<ClusterKey, Arc<SimCluster>>> {
        // The map holds handles only; a panicking holder leaves it consistent.
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The simulated cluster `key`, if its control plane was initialised.
    pub fn cluster(&self, key: &ClusterKey) -> Option<Arc<SimCluster>> {
        self.clusters().get(key).cloned()
    }

    /// How many workload clusters are simulated.
    pub fn len(&self) -> usize {
        self.clusters().len()
    }

    /// Whether no workload cluster is simulated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The simulated cluster `key`, started if needed (`kubeadm init`).
    pub async fn start_cluster(&self, key: &ClusterKey) -> Result<Arc<SimCluster>, SimError> {
        if let Some(cluster) = self.cluster(key) {
            return Ok(cluster);
        }
        let _one_at_a_time = self.starting.lock().await;
        if let Some(cluster) = self.cluster(key) {
            return Ok(cluster);
        }
        let cluster = SimCluster::start(key.clone(), self.settings.state_dir.as_deref()).await?;
        tracing::info!(cluster = %key, "simulated workload API started");
        self.clusters().insert(key.clone(), cluster.clone());
        Ok(cluster)
    }

    /// Stops simulating `key` (its Cluster is gone).
    pub fn drop_cluster(&self, key: &ClusterKey) {
        if let Some(cluster) = self.clusters().remove(key) {
            cluster.shutdown.cancel();
        }
    }

    /// The controller that boots provisioned `fake://` hosts.
    pub fn boot_task(self: &Arc<Self>) -> Box<dyn capstan_runtime::Task> {
        capstan_runtime::controller_task(boot::BootController::new(self.clone()))
    }

    /// The controller that boots provisioned KVMMachines on `test://` hypervisors.
    pub fn kvm_boot_task(self: &Arc<Self>) -> Box<dyn capstan_runtime::Task> {
        capstan_runtime::controller_task(kvm_boot::KvmBootController::new(self.clone()))
    }

    /// The settings.
    pub fn settings(&self) -> &SimSettings {
        &self.settings
    }

    /// The management client.
    pub fn management(&self) -> &Client {
        &self.management
    }

    fn not_simulated(cluster: &ClusterKey) -> WorkloadError {
        WorkloadError::Other {
            cluster: cluster.clone(),
            reason: "its control plane has not run kubeadm init in the simulation yet".into(),
        }
    }
}

impl WorkloadAccess for Simulator {
    fn client<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move {
            if let Some(simulated) = self.cluster(cluster) {
                return Ok(simulated.client.clone());
            }
            // Never the kubeconfig: with the simulation on, a cluster's endpoint (a VIP on the
            // hosts' network) is not where its API is, and must not be dialled.
            Err(Self::not_simulated(cluster))
        })
    }

    fn forget(&self, _cluster: &ClusterKey) {
        // In-process clients of simulated clusters stay valid for the cluster's lifetime.
    }
}

impl EtcdMembership for Simulator {
    fn members<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Vec<EtcdMember>, WorkloadError>> {
        Box::pin(async move {
            let simulated = self
                .cluster(cluster)
                .ok_or_else(|| Self::not_simulated(cluster))?;
            let members = simulated.etcd().clone();
            Ok(members)
        })
    }

    fn remove_member<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let simulated = self
                .cluster(cluster)
                .ok_or_else(|| Self::not_simulated(cluster))?;
            let mut members = simulated.etcd();
            let was_leader = members.iter().any(|m| m.name == name && m.leader);
            members.retain(|m| m.name != name);
            if was_leader && let Some(next) = members.first_mut() {
                next.leader = true;
            }
            Ok(())
        })
    }

    fn move_leader<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let simulated = self
                .cluster(cluster)
                .ok_or_else(|| Self::not_simulated(cluster))?;
            let mut members = simulated.etcd();
            if !members.iter().any(|m| m.name == to) {
                return Err(WorkloadError::Other {
                    cluster: cluster.clone(),
                    reason: format!("no etcd member called {to}"),
                });
            }
            for member in members.iter_mut() {
                member.leader = member.name == to;
            }
            Ok(())
        })
    }
}
