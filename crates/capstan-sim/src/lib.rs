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
//! - **etcd**: [`EtcdMembership`] over the members recorded above (ids, health, leader), kept in
//!   the workload's ConfigMap `kube-system/capstan-sim-etcd` so they survive a restart.
//! - **Restarts**: a workload store lives under `STATE_DIR/NAMESPACE/NAME/CLUSTER-UID/`; after a
//!   restart a cluster whose control plane was initialised is resumed from it on first use, and a
//!   Cluster created again under the same name starts empty. Once a Cluster is deleted its
//!   simulation stops and its store directory is removed (`reaper`).
//! - **Init record**: every node that runs `kubeadm init` is listed in the workload's ConfigMap
//!   `kube-system/capstan-sim-kubeadm-init` (key `nodes`), and a second one is a Warning Event
//!   `SecondKubeadmInit` on its host, so tests and users can see that a cluster was initialised
//!   once.
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
//! - **Clusters of real machines**: for a host with a real BMC nothing above is played. Once it
//!   is claimed by a cluster and provisioning, the cluster's API is started (empty) and served on
//!   `127.0.0.1:<controlPlaneEndpoint port>` ([`Simulator::serve_for_real_nodes`]); the machines'
//!   own bootstrap (cloud-init running the bootstrap data, `kubeadm init|join`) registers their
//!   Nodes there. This is how the end-to-end test with virtual machines gets a workload API, as no
//!   kube-apiserver is installable here: the machine side is real, the API server is capstan's.
//!   The same holds for VMs on real hypervisors (any libvirt URI but `test`): once a KVMMachine is
//!   placed on one, its cluster's API is served on the endpoint port ([`kvm_boot`]).
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
mod reaper;
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
    #[error("workload cluster {cluster}: its Cluster object is not in the management cluster")]
    NoCluster { cluster: ClusterKey },
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
        let dir = match &self.settings.state_dir {
            Some(base) => Some(SimCluster::store_dir(
                base,
                key,
                &self.cluster_uid(key).await?,
            )),
            None => None,
        };
        let cluster = SimCluster::start(key.clone(), dir).await?;
        tracing::info!(cluster = %key, "simulated workload API started");
        self.clusters().insert(key.clone(), cluster.clone());
        Ok(cluster)
    }

    /// The simulated cluster `key`: running, or resumed from the store an earlier run of the
    /// simulation left (its control plane ran `kubeadm init` before a restart); `None` when it
    /// was never initialised.
    pub async fn cluster_or_resume(
        &self,
        key: &ClusterKey,
    ) -> Result<Option<Arc<SimCluster>>, SimError> {
        if let Some(cluster) = self.cluster(key) {
            return Ok(Some(cluster));
        }
        let Some(base) = &self.settings.state_dir else {
            return Ok(None);
        };
        // Cheap first: no directory, no store (every cluster before its init).
        if !base.join(&key.namespace).join(&key.name).is_dir() {
            return Ok(None);
        }
        let _one_at_a_time = self.starting.lock().await;
        if let Some(cluster) = self.cluster(key) {
            return Ok(Some(cluster));
        }
        let uid = match self.cluster_uid(key).await {
            Ok(uid) => uid,
            Err(SimError::NoCluster { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let dir = SimCluster::store_dir(base, key, &uid);
        if !dir.join("workload.db").is_file() {
            return Ok(None);
        }
        let cluster = SimCluster::start(key.clone(), Some(dir)).await?;
        tracing::info!(cluster = %key, "simulated workload API resumed from its store");
        self.clusters().insert(key.clone(), cluster.clone());
        Ok(Some(cluster))
    }

    /// The uid of the Cluster object `key`.
    async fn cluster_uid(&self, key: &ClusterKey) -> Result<String, SimError> {
        let found = listener::cluster_api(&self.management, &key.namespace)
            .get_opt(&key.name)
            .await
            .map_err(|source| SimError::Management {
                verb: "reading",
                kind: "Cluster",
                namespace: key.namespace.clone(),
                name: key.name.clone(),
                source: Box::new(source),
            })?;
        found
            .and_then(|c| c.metadata.uid)
            .ok_or_else(|| SimError::NoCluster {
                cluster: key.clone(),
            })
    }

    /// Serves the workload API of cluster `key`, whose machines are real, where its nodes dial it:
    /// the cluster's API starts empty (no Node, token or static pod is simulated) and listens on
    /// the port of its `controlPlaneEndpoint` ([`listener::Bind::EndpointPort`]). `Ok(false)` while
    /// the cluster's CA Secret or endpoint is missing.
    pub async fn serve_for_real_nodes(&self, key: &ClusterKey) -> Result<bool, SimError> {
        let cluster = self.start_cluster(key).await?;
        if cluster.url().is_some() {
            return Ok(true);
        }
        // One listener per cluster, also when several of its hosts are reconciled at once.
        let _one_at_a_time = self.starting.lock().await;
        listener::ensure(&self.management, &cluster, listener::Bind::EndpointPort).await
    }

    /// Stops simulating `key` (its Cluster is gone).
    pub fn drop_cluster(&self, key: &ClusterKey) {
        if let Some(cluster) = self.clusters().remove(key) {
            cluster.shutdown.cancel();
        }
    }

    /// The clusters simulated now.
    fn keys(&self) -> Vec<ClusterKey> {
        self.clusters().keys().cloned().collect()
    }

    /// The task that stops simulating a Cluster once it is deleted and removes its store
    /// directory; run it beside [`Simulator::boot_task`].
    pub fn reaper_task(self: &Arc<Self>) -> Box<dyn capstan_runtime::Task> {
        Box::new(reaper::Reaper::new(self.clone()))
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

    /// The simulated cluster `cluster` (resumed if an earlier run initialised it), or why not.
    async fn simulated(&self, cluster: &ClusterKey) -> Result<Arc<SimCluster>, WorkloadError> {
        self.cluster_or_resume(cluster)
            .await
            .map_err(|err| WorkloadError::Other {
                cluster: cluster.clone(),
                reason: err.to_string(),
            })?
            .ok_or_else(|| Self::not_simulated(cluster))
    }

    /// Keeps the etcd members of `cluster` across restarts.
    async fn record(cluster: &SimCluster) -> Result<(), WorkloadError> {
        cluster
            .record_members()
            .await
            .map_err(|err| WorkloadError::Other {
                cluster: cluster.key.clone(),
                reason: err.to_string(),
            })
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
            match self.cluster_or_resume(cluster).await {
                Ok(Some(simulated)) => return Ok(simulated.client.clone()),
                Ok(None) => {}
                Err(err) => {
                    return Err(WorkloadError::Other {
                        cluster: cluster.clone(),
                        reason: err.to_string(),
                    });
                }
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
            let simulated = self.simulated(cluster).await?;
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
            let simulated = self.simulated(cluster).await?;
            let present = simulated.etcd().iter().any(|m| m.name == name);
            if present
                && simulated
                    .leader_changed
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                // As real etcd answers a membership change right after a leader change (code 14,
                // "etcdserver: unhealthy cluster"); the control plane's next pass succeeds.
                return Err(WorkloadError::Other {
                    cluster: cluster.clone(),
                    reason: "etcd refuses membership changes until the member asked has been connected to every other member for 5 seconds (its strict reconfiguration check, after a start or a leader change); the removal is retried (simulated: the first removal after a leader change is refused once)".into(),
                });
            }
            {
                let mut members = simulated.etcd();
                let was_leader = members.iter().any(|m| m.name == name && m.leader);
                members.retain(|m| m.name != name);
                if was_leader && let Some(next) = members.first_mut() {
                    next.leader = true;
                }
            }
            Self::record(&simulated).await
        })
    }

    fn move_leader<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let simulated = self.simulated(cluster).await?;
            {
                let mut members = simulated.etcd();
                if !members.iter().any(|m| m.name == to) {
                    return Err(WorkloadError::Other {
                        cluster: cluster.clone(),
                        reason: format!("no etcd member called {to}"),
                    });
                }
                let moved = members.iter().any(|m| m.leader && m.name != to);
                for member in members.iter_mut() {
                    member.leader = member.name == to;
                }
                if moved {
                    simulated
                        .leader_changed
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Self::record(&simulated).await
        })
    }
}
