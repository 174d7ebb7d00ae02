//! Access to workload clusters.
//!
//! Every controller that reaches into a workload cluster (Machine for `nodeRef` and drains,
//! KubeadmControlPlane for etcd and `kubeadm-config`, ClusterResourceSet, MachineHealthCheck, the
//! bootstrap-token refresher) asks one [`WorkloadAccess`] for a client by [`ClusterKey`]. Sharing one
//! access layer keeps one connection per workload cluster, however many controllers use it.
//!
//! - [`KubeconfigAccess`] is the real one: it builds the client from the cluster's
//!   `<cluster>-kubeconfig` Secret (key `value`, as Cluster API writes it) and keeps it while the
//!   Secret's resourceVersion is unchanged. A cached client is probed (`GET /version`) at most every
//!   [`ProbeSettings::interval`] by one caller at a time, and dropped only after
//!   [`ProbeSettings::failure_threshold`] failed probes in a row, as Cluster API's ClusterCache does:
//!   a control plane that is merely slow (a loaded machine, software emulation, an API server busy
//!   starting its controllers) is not reported unreachable on one late answer, and is not made
//!   slower by every controller opening new TLS connections to it at once. A new client must
//!   answer its first probe.
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
/// How long a probe may take before it counts as failed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many probes of a cached client must fail in a row before it is dropped.
pub const PROBE_FAILURE_THRESHOLD: u32 = 5;
/// How long the first probe of a new client may take: it also pays the TCP and TLS handshakes
/// (Cluster API's client timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after a failed connection attempt the next one may start.
pub const RECONNECT_INTERVAL: Duration = Duration::from_secs(10);

/// How [`KubeconfigAccess`] checks the clients it caches (Cluster API's ClusterCache defaults:
/// every 10 s, 5 s each, disconnected after 5 failures in a row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    /// How long a probed client is handed out before it is probed again.
    pub interval: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// Failed probes in a row after which the cached client is dropped and the cluster reported
    /// unreachable.
    pub failure_threshold: u32,
    /// How long the first probe of a new client may take.
    pub connect_timeout: Duration,
    /// How long after a failed connection attempt the next may start. One attempt per cluster
    /// runs at a time; callers meanwhile, and until this has passed after a failure, get
    /// [`WorkloadError::NotConnected`] at once instead of each opening a connection of its own to
    /// an API server that is already not keeping up.
    pub reconnect_interval: Duration,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            interval: PROBE_INTERVAL,
            timeout: PROBE_TIMEOUT,
            failure_threshold: PROBE_FAILURE_THRESHOLD,
            connect_timeout: CONNECT_TIMEOUT,
            reconnect_interval: RECONNECT_INTERVAL,
        }
    }
}
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
    #[error("the workload API of cluster {cluster} did not answer within {timeout:?}")]
    ProbeTimeout {
        cluster: ClusterKey,
        timeout: Duration,
    },
    #[error("the workload API of cluster {cluster} is not connected: {reason}")]
    NotConnected { cluster: ClusterKey, reason: String },
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

    /// Says a caller saw its client for `cluster` fail (or the cluster is going): what is cached
    /// is not handed out again before it was checked. [`KubeconfigAccess`] probes the cached
    /// client on the next [`WorkloadAccess::client`] call, keeping it if it answers and counting a
    /// failure if not; a Secret that changed or is gone drops it.
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
    /// When the client was last probed, or a probe of it began; `None` when a caller saw it fail
    /// and it must be probed before it is handed out again.
    probed: Option<Instant>,
    /// Probes that failed in a row.
    failures: u32,
}

/// What to do with the cached client of a cluster, decided under the cache's lock.
enum Cache {
    /// Probed recently: hand it out.
    Fresh(Client),
    /// Due for a probe, which this caller now runs (the entry is marked probed, so concurrent
    /// callers get the client meanwhile instead of probing too).
    Probe(Client),
    /// Nothing usable: build a client from the Secret.
    Build,
}

/// A connection attempt to a cluster without a cached client: under way, or failed.
struct Attempt {
    /// When it started, or when it failed.
    since: Instant,
    /// Why it failed; `None` while it runs.
    failed: Option<String>,
}

/// Clients built from `<cluster>-kubeconfig` Secrets read through the management cluster's client.
pub struct KubeconfigAccess {
    management: Client,
    probes: ProbeSettings,
    cache: Mutex<HashMap<ClusterKey, Cached>>,
    attempts: Mutex<HashMap<ClusterKey, Attempt>>,
}

impl KubeconfigAccess {
    pub fn new(management: Client) -> Self {
        Self::with_probes(management, ProbeSettings::default())
    }

    /// Access with other probe settings than Cluster API's defaults.
    pub fn with_probes(management: Client, probes: ProbeSettings) -> Self {
        Self {
            management,
            probes,
            cache: Mutex::new(HashMap::new()),
            attempts: Mutex::new(HashMap::new()),
        }
    }

    fn attempts(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Attempt>> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the connection attempt for `cluster`, or says why this caller may not make one:
    /// another is under way, or the last failed less than the reconnect interval ago. An attempt
    /// whose caller went away (its future dropped) counts as under way only for as long as one
    /// can take.
    fn claim_attempt(&self, cluster: &ClusterKey) -> Result<(), String> {
        let mut attempts = self.attempts();
        if let Some(attempt) = attempts.get(cluster) {
            let elapsed = attempt.since.elapsed();
            match &attempt.failed {
                None if elapsed < self.probes.connect_timeout + self.probes.timeout => {
                    return Err(format!(
                        "a connection attempt is under way (for {}s)",
                        elapsed.as_secs()
                    ));
                }
                Some(reason) if elapsed < self.probes.reconnect_interval => {
                    return Err(format!(
                        "the last attempt failed {}s ago ({reason}); the next starts within {}s",
                        elapsed.as_secs(),
                        (self.probes.reconnect_interval - elapsed).as_secs() + 1
                    ));
                }
                _ => {}
            }
        }
        attempts.insert(
            cluster.clone(),
            Attempt {
                since: Instant::now(),
                failed: None,
            },
        );
        Ok(())
    }

    /// Records how the claimed attempt for `cluster` ended.
    fn attempt_done(&self, cluster: &ClusterKey, outcome: Result<&Client, &WorkloadError>) {
        let mut attempts = self.attempts();
        match outcome {
            Ok(_) => {
                attempts.remove(cluster);
            }
            Err(err) => {
                attempts.insert(
                    cluster.clone(),
                    Attempt {
                        since: Instant::now(),
                        failed: Some(capstan_runtime::controller::ErrorChain(err).to_string()),
                    },
                );
            }
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterKey, Cached>> {
        // Cached clients stay valid whatever a panicking holder was doing.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the cache holds for `cluster` built from the Secret at `version`.
    fn lookup(&self, cluster: &ClusterKey, version: &Option<String>) -> Cache {
        let mut cache = self.cache();
        let Some(cached) = cache.get_mut(cluster) else {
            return Cache::Build;
        };
        if cached.secret_version != *version {
            // The kubeconfig was renewed or replaced: the old client goes.
            cache.remove(cluster);
            return Cache::Build;
        }
        match cached.probed {
            Some(at) if at.elapsed() < self.probes.interval => Cache::Fresh(cached.client.clone()),
            _ => {
                cached.probed = Some(Instant::now());
                Cache::Probe(cached.client.clone())
            }
        }
    }

    /// Records the outcome of a probe of the cached client: a failure under the threshold keeps
    /// it (`Ok`), the one that reaches it drops it (`Err`).
    fn probed(
        &self,
        cluster: &ClusterKey,
        client: Client,
        outcome: Result<(), WorkloadError>,
    ) -> Result<Client, WorkloadError> {
        let mut cache = self.cache();
        let Some(cached) = cache.get_mut(cluster) else {
            // Dropped meanwhile (the Secret changed): this probe's answer still stands.
            return outcome.map(|()| client);
        };
        match outcome {
            Ok(()) => {
                cached.failures = 0;
                Ok(client)
            }
            Err(err) => {
                cached.failures = cached.failures.saturating_add(1);
                if cached.failures >= self.probes.failure_threshold {
                    tracing::info!(%cluster, failures = cached.failures, error = %err, "the workload API failed its health probe too often; disconnected");
                    cache.remove(cluster);
                    Err(err)
                } else {
                    tracing::debug!(%cluster, failures = cached.failures, threshold = self.probes.failure_threshold, error = %err, "a health probe of the workload API failed; the client is kept");
                    Ok(client)
                }
            }
        }
    }

    async fn connect(&self, cluster: &ClusterKey) -> Result<Client, WorkloadError> {
        let secret_name = cluster.kubeconfig_secret();
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), &cluster.namespace);
        let found =
            secrets
                .get_opt(&secret_name)
                .await
                .map_err(|source| WorkloadError::ReadSecret {
                    namespace: cluster.namespace.clone(),
                    secret: secret_name.clone(),
                    source,
                })?;
        let Some(secret) = found else {
            self.cache().remove(cluster);
            return Err(WorkloadError::NoKubeconfig {
                namespace: cluster.namespace.clone(),
                secret: secret_name,
            });
        };
        let version = secret.metadata.resource_version.clone();
        match self.lookup(cluster, &version) {
            Cache::Fresh(client) => return Ok(client),
            Cache::Probe(client) => {
                let outcome = probe(cluster, &client, self.probes.timeout).await;
                return self.probed(cluster, client, outcome);
            }
            Cache::Build => {}
        }
        if let Err(reason) = self.claim_attempt(cluster) {
            return Err(WorkloadError::NotConnected {
                cluster: cluster.clone(),
                reason,
            });
        }
        let built = self.build(cluster, &secret).await;
        self.attempt_done(cluster, built.as_ref());
        let client = built?;
        self.cache().insert(
            cluster.clone(),
            Cached {
                client: client.clone(),
                secret_version: version,
                probed: Some(Instant::now()),
                failures: 0,
            },
        );
        Ok(client)
    }

    /// A new client from `secret`, answering its first probe: a cluster that never answered is
    /// unreachable, not slow.
    async fn build(&self, cluster: &ClusterKey, secret: &Secret) -> Result<Client, WorkloadError> {
        let secret_name = cluster.kubeconfig_secret();
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
        probe(cluster, &client, self.probes.connect_timeout).await?;
        tracing::debug!(%cluster, probe = ?probing.elapsed(), "workload client built");
        Ok(client)
    }
}

impl WorkloadAccess for KubeconfigAccess {
    fn client<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(self.connect(cluster))
    }

    fn forget(&self, cluster: &ClusterKey) {
        if let Some(cached) = self.cache().get_mut(cluster) {
            cached.probed = None;
        }
    }
}

/// Checks that `client`'s API answers (`GET /version`) within `timeout`.
async fn probe(
    cluster: &ClusterKey,
    client: &Client,
    timeout: Duration,
) -> Result<(), WorkloadError> {
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(WorkloadError::Unreachable {
            cluster: cluster.clone(),
            source,
        }),
        Err(_) => Err(WorkloadError::ProbeTimeout {
            cluster: cluster.clone(),
            timeout,
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

    /// A stand-in for both APIs: the management API serves `ns/c-kubeconfig` (pointing back at
    /// this server), the workload API answers `/version`, slowly while `slow` is set; every
    /// `/version` request is counted.
    struct Apis {
        url: String,
        slow: Arc<std::sync::atomic::AtomicBool>,
        versions: Arc<std::sync::atomic::AtomicUsize>,
    }

    async fn apis() -> Apis {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{url}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             current-context: c\n"
        );
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("c-kubeconfig".into()),
                namespace: Some("ns".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            data: Some(
                [(
                    KUBECONFIG_KEY.to_owned(),
                    k8s_openapi::ByteString(kubeconfig.into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let secret = serde_json::to_string(&secret).unwrap();
        let slow = Arc::new(AtomicBool::new(false));
        let versions = Arc::new(AtomicUsize::new(0));
        let (is_slow, counted) = (slow.clone(), versions.clone());
        let app = axum::Router::new()
            .route(
                "/api/v1/namespaces/ns/secrets/c-kubeconfig",
                axum::routing::get(move || {
                    let secret = secret.clone();
                    async move { ([("content-type", "application/json")], secret) }
                }),
            )
            .route(
                "/version",
                axum::routing::get(move || {
                    let (is_slow, counted) = (is_slow.clone(), counted.clone());
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        if is_slow.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                        (
                            [("content-type", "application/json")],
                            r#"{"major":"1","minor":"35","gitVersion":"v1.35.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#,
                        )
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Apis {
            url,
            slow,
            versions,
        }
    }

    /// A slow workload API is not reported unreachable on one late probe: the cached client is
    /// kept until `failure_threshold` probes failed in a row, probed at most once an interval
    /// (and again after a caller said it failed), and a new one is built once the API answers.
    #[tokio::test]
    async fn a_slow_workload_api_is_dropped_only_after_the_failure_threshold() {
        use std::sync::atomic::Ordering;
        let apis = apis().await;
        let management =
            capstan_runtime::controller_client(kube::Config::new(apis.url.parse().unwrap()))
                .unwrap();
        let access = KubeconfigAccess::with_probes(
            management,
            ProbeSettings {
                interval: Duration::from_secs(3600),
                timeout: Duration::from_millis(100),
                failure_threshold: 3,
                connect_timeout: Duration::from_millis(100),
                reconnect_interval: Duration::ZERO,
            },
        );
        let cluster = ClusterKey::new("ns", "c");

        assert!(access.client(&cluster).await.is_ok());
        assert_eq!(
            apis.versions.load(Ordering::SeqCst),
            1,
            "a new client's first probe"
        );
        // Within the interval the cached client is handed out unprobed.
        assert!(access.client(&cluster).await.is_ok());
        assert_eq!(apis.versions.load(Ordering::SeqCst), 1);

        apis.slow.store(true, Ordering::SeqCst);
        for failure in 1..3 {
            access.forget(&cluster);
            if let Err(e) = access.client(&cluster).await {
                panic!("failed probe {failure} of 3 still hands out the client: {e}");
            }
        }
        assert_eq!(apis.versions.load(Ordering::SeqCst), 3);
        access.forget(&cluster);
        match access.client(&cluster).await {
            Err(WorkloadError::ProbeTimeout { timeout, .. }) => {
                assert_eq!(timeout, Duration::from_millis(100))
            }
            Err(other) => panic!("the third failed probe in a row: {other}"),
            Ok(_) => panic!("the third failed probe in a row handed out the client"),
        }
        // Dropped: the next caller builds a new client, which must answer its first probe.
        assert!(matches!(
            access.client(&cluster).await,
            Err(WorkloadError::ProbeTimeout { .. })
        ));

        apis.slow.store(false, Ordering::SeqCst);
        assert!(access.client(&cluster).await.is_ok());
        // A probe that answers resets the count: two more late ones are tolerated again.
        apis.slow.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            access.forget(&cluster);
            assert!(access.client(&cluster).await.is_ok());
        }
        apis.slow.store(false, Ordering::SeqCst);
        access.forget(&cluster);
        assert!(access.client(&cluster).await.is_ok());
        apis.slow.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            access.forget(&cluster);
            assert!(access.client(&cluster).await.is_ok());
        }
    }

    /// Without a cached client one connection attempt runs at a time, and after one failed the
    /// next waits for the reconnect interval: callers meanwhile are answered `NotConnected` at
    /// once, without a request to the struggling API server.
    #[tokio::test]
    async fn one_connection_attempt_at_a_time_and_none_right_after_a_failure() {
        use std::sync::atomic::Ordering;
        let apis = apis().await;
        let management =
            capstan_runtime::controller_client(kube::Config::new(apis.url.parse().unwrap()))
                .unwrap();
        let access = KubeconfigAccess::with_probes(
            management,
            ProbeSettings {
                connect_timeout: Duration::from_millis(300),
                reconnect_interval: Duration::from_secs(3600),
                ..ProbeSettings::default()
            },
        );
        let cluster = ClusterKey::new("ns", "c");
        apis.slow.store(true, Ordering::SeqCst);
        let (first, second) = tokio::join!(access.client(&cluster), async {
            // Starts once the first has claimed the attempt (it is waiting on its probe).
            while apis.versions.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            access.client(&cluster).await
        });
        assert!(matches!(first, Err(WorkloadError::ProbeTimeout { .. })));
        match second {
            Err(WorkloadError::NotConnected { reason, .. }) => {
                assert!(reason.contains("under way"), "{reason}")
            }
            Err(other) => panic!("a second caller during the attempt: {other}"),
            Ok(_) => panic!("a second caller during the attempt got a client"),
        }
        apis.slow.store(false, Ordering::SeqCst);
        match access.client(&cluster).await {
            Err(err @ WorkloadError::NotConnected { .. }) => {
                let text = err.to_string();
                assert!(
                    text.contains("failed") && text.contains("did not answer within 300ms"),
                    "{text}"
                );
            }
            Err(other) => panic!("a caller right after the failed attempt: {other}"),
            Ok(_) => panic!("a caller right after the failed attempt got a client"),
        }
        assert_eq!(
            apis.versions.load(Ordering::SeqCst),
            1,
            "one request reached the API server"
        );
    }

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
