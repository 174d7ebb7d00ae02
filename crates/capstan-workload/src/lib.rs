//! Access to workload clusters.
//!
//! Every controller that reaches into a workload cluster (Machine for `nodeRef` and drains,
//! KubeadmControlPlane for etcd and `kubeadm-config`, ClusterResourceSet, MachineHealthCheck, the
//! bootstrap-token refresher) asks one [`WorkloadAccess`] for a client by [`ClusterKey`]. Sharing one
//! access layer keeps one connection per workload cluster, however many controllers use it.
//!
//! - [`KubeconfigAccess`] is the real one: it builds the client from the cluster's
//!   `<cluster>-kubeconfig` Secret (key `value`, as Cluster API writes it), caches it while the
//!   Secret's resourceVersion is unchanged and the API answers, re-probes a cached client at most every
//!   [`PROBE_INTERVAL`], and rebuilds it after a failed probe (reconnecting).
//! - A simulated backend (`capstan-sim`) implements the same trait for the clusters it plays and hands
//!   everything else to a [`KubeconfigAccess`].
//!
//! [`EtcdMembership`] is how KubeadmControlPlane sees and changes the etcd members of a workload
//! cluster's stacked etcd; a real implementation reaches etcd through the workload API server, a
//! simulated one plays the members of a simulated cluster.
//!
//! A workload cluster that cannot be reached is an ordinary, expected state while it comes up: callers
//! get [`WorkloadError`] and requeue.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a cached client is trusted before its API is probed again.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a probe may take before the workload API counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The key of the kubeconfig in `<cluster>-kubeconfig` Secrets.
pub const KUBECONFIG_KEY: &str = "value";

/// A Cluster by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterKey {
    pub namespace: String,
    pub name: String,
}

impl ClusterKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The name of the Secret that holds this cluster's admin kubeconfig.
    pub fn kubeconfig_secret(&self) -> String {
        format!("{}-kubeconfig", self.name)
    }
}

impl fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a workload cluster could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("Secret {namespace}/{secret} (the workload kubeconfig) does not exist yet")]
    NoKubeconfig { namespace: String, secret: String },
    #[error("Secret {namespace}/{secret} has no key `{KUBECONFIG_KEY}`")]
    NoKubeconfigKey { namespace: String, secret: String },
    #[error("reading Secret {namespace}/{secret}")]
    ReadSecret {
        namespace: String,
        secret: String,
        source: kube::Error,
    },
    #[error("Secret {namespace}/{secret} does not hold a usable kubeconfig: {reason}")]
    BadKubeconfig {
        namespace: String,
        secret: String,
        reason: String,
    },
    #[error("the workload API of cluster {cluster} does not answer")]
    Unreachable {
        cluster: ClusterKey,
        source: kube::Error,
    },
    #[error("the workload API of cluster {cluster} did not answer within {PROBE_TIMEOUT:?}")]
    ProbeTimeout { cluster: ClusterKey },
    #[error("cluster {cluster}: {reason}")]
    Other { cluster: ClusterKey, reason: String },
}

/// Hands out clients for workload clusters.
pub trait WorkloadAccess: Send + Sync + 'static {
    /// A client for the workload API of `cluster`, connected and answering.
    fn client<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>>;

    /// Drops what is cached for `cluster` (it was deleted, or a caller saw its client fail).
    fn forget(&self, cluster: &ClusterKey);
}

/// A shared [`WorkloadAccess`].
pub type SharedWorkloadAccess = Arc<dyn WorkloadAccess>;

/// One member of a workload cluster's etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMember {
    /// The member's name: the Node name of the control-plane machine it runs on.
    pub name: String,
    /// The member id etcd assigned.
    pub id: u64,
    /// Whether the member answers and is in sync.
    pub healthy: bool,
    /// Whether this member is the raft leader.
    pub leader: bool,
}

/// The etcd membership of workload clusters (stacked etcd, one member per control-plane Node).
pub trait EtcdMembership: Send + Sync + 'static {
    /// The current members of `cluster`'s etcd.
    fn members<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Vec<EtcdMember>, WorkloadError>>;

    /// Removes the member called `name` (idempotent: a member already gone is success).
    fn remove_member<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>>;

    /// Moves raft leadership to the member called `to` (before the current leader's machine goes).
    fn move_leader<'a>(
        &'a self,
        cluster: &'a ClusterKey,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>>;
}

/// A shared [`EtcdMembership`].
pub type SharedEtcdMembership = Arc<dyn EtcdMembership>;

struct Cached {
    client: Client,
    secret_version: Option<String>,
    probed: Instant,
}

/// Clients built from `<cluster>-kubeconfig` Secrets read through the management cluster's client.
pub struct KubeconfigAccess {
    management: Client,
    cache: Mutex<HashMap<ClusterKey, Cached>>,
}

impl KubeconfigAccess {
    pub fn new(management: Client) -> Self {
        Self {
            management,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Cached>> {
        // Cached clients stay valid whatever a panicking holder was doing.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn connect(&self, cluster: &ClusterKey) -> Result<Client, WorkloadError> {
        let secret_name = cluster.kubeconfig_secret();
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), &cluster.namespace);
        let secret = secrets
            .get_opt(&secret_name)
            .await
            .map_err(|source| WorkloadError::ReadSecret {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
                source,
            })?
            .ok_or_else(|| WorkloadError::NoKubeconfig {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
            })?;
        let version = secret.metadata.resource_version.clone();
        let fresh = {
            let cache = self.cache();
            cache.get(cluster).and_then(|cached| {
                (cached.secret_version == version && cached.probed.elapsed() < PROBE_INTERVAL)
                    .then(|| cached.client.clone())
            })
        };
        if let Some(client) = fresh {
            return Ok(client);
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(KUBECONFIG_KEY))
            .ok_or_else(|| WorkloadError::NoKubeconfigKey {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
            })?;
        let client = client_from_kubeconfig_bytes(&bytes.0)
            .await
            .map_err(|reason| WorkloadError::BadKubeconfig {
                namespace: cluster.namespace.clone(),
                secret: secret_name.clone(),
                reason,
            })?;
        let probing = Instant::now();
        probe(cluster, &client).await?;
        tracing::debug!(%cluster, probe = ?probing.elapsed(), "workload client built");
        self.cache().insert(
            cluster.clone(),
            Cached {
                client: client.clone(),
                secret_version: version,
                probed: Instant::now(),
            },
        );
        Ok(client)
    }
}

impl WorkloadAccess for KubeconfigAccess {
    fn client<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move {
            let result = self.connect(cluster).await;
            if result.is_err() {
                self.forget(cluster);
            }
            result
        })
    }

    fn forget(&self, cluster: &ClusterKey) {
        self.cache().remove(cluster);
    }
}

/// Checks that `client`'s API answers (`GET /version`) within [`PROBE_TIMEOUT`].
pub async fn probe(cluster: &ClusterKey, client: &Client) -> Result<(), WorkloadError> {
    match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(WorkloadError::Unreachable {
            cluster: cluster.clone(),
            source,
        }),
        Err(_) => Err(WorkloadError::ProbeTimeout {
            cluster: cluster.clone(),
        }),
    }
}

/// A client for the current context of a kubeconfig given as YAML bytes. The error says what is wrong
/// with the kubeconfig without quoting it (it holds credentials).
pub async fn client_from_kubeconfig_bytes(bytes: &[u8]) -> Result<Client, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())?;
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|e| format!("it is not a kubeconfig ({e})"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("its current context is not usable ({e})"))?;
    // No client-side retries: a drain's Eviction must see its 429 at once (capstan-runtime's client).
    capstan_runtime::controller_client(config)
        .map_err(|e| format!("building a client failed ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_secret_name_follows_cluster_api() {
        assert_eq!(
            ClusterKey::new("ns", "capi-1").kubeconfig_secret(),
            "capi-1-kubeconfig"
        );
        assert_eq!(ClusterKey::new("ns", "capi-1").to_string(), "ns/capi-1");
    }

    #[tokio::test]
    async fn garbage_kubeconfig_is_refused_without_echoing_it() {
        let err = client_from_kubeconfig_bytes(b"password: hunter2\n")
            .await
            .err()
            .unwrap_or_default();
        assert!(!err.is_empty());
        assert!(!err.contains("hunter2"), "{err}");
        let err = client_from_kubeconfig_bytes(&[0xff, 0xfe])
            .await
            .err()
            .unwrap_or_default();
        assert!(err.contains("UTF-8"), "{err}");
    }
}
