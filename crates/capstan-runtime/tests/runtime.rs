//! The runtime against the embedded API server in-process: the in-process client (typed model
//! objects, watches), Lease leader election (exclusion, release, stepping down, expiry) and the
//! standalone health router.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_model::ipam::{IPPool, IpPoolSpec, Pool};
use capstan_runtime::{
    CancellationToken, ControllerMetrics, Health, LeaderElectionConfig, LeaderElector,
    RuntimeError, health_router, metrics_registry,
};
use capstan_store::{Store, StoreOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tower::ServiceExt;

/// Upper bound for anything the tests wait on.
const WAIT: Duration = Duration::from_secs(30);

/// An empty ConfigMap called `name`.
fn named_config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

async fn api() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap();
    (dir, in_process_client(server.router()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_client_reads_writes_and_watches_typed_objects() {
    let (_dir, client) = api().await;
    let pools: Api<IPPool> = Api::namespaced(client.clone(), "default");
    let mut watch = watcher(pools.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let pool = IPPool::new(
        "provisioning",
        Some("default"),
        IpPoolSpec {
            name_prefix: "prov".into(),
            pools: vec![Pool {
                start: Some("10.0.0.10".into()),
                end: Some("10.0.0.20".into()),
                ..Pool::default()
            }],
            ..IpPoolSpec::default()
        },
    );
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert!(created.uid().is_some());
    // Read back as written, with upstream's default allocation strategy filled in.
    let mut defaulted = pool.spec.clone();
    defaulted.allocation_strategy = Some("sequential".into());
    assert_eq!(pools.get("provisioning").await.unwrap().spec, defaulted);
    let seen = tokio::time::timeout(WAIT, watch.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.name_any(), "provisioning");

    let maps: Api<ConfigMap> = Api::default_namespaced(client);
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            ..ObjectMeta::default()
        },
        data: Some([("a".to_owned(), "1".to_owned())].into()),
        ..ConfigMap::default()
    };
    maps.create(&PostParams::default(), &map).await.unwrap();
    assert_eq!(maps.get("settings").await.unwrap().data, map.data);
}

fn election(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        namespace: "kube-system".into(),
        name: "test-controllers".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(100),
    }
}

type Leading = mpsc::UnboundedSender<(&'static str, bool)>;

/// A `lead` function that reports when its term starts and ends.
fn lead(
    identity: &'static str,
    tx: Leading,
) -> impl FnMut(CancellationToken) -> futures::future::BoxFuture<'static, Result<(), RuntimeError>>
{
    move |term| {
        let tx = tx.clone();
        Box::pin(async move {
            tx.send((identity, true)).unwrap();
            term.cancelled().await;
            tx.send((identity, false)).unwrap();
            Ok(())
        })
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(&'static str, bool)>) -> (&'static str, bool) {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_release_step_down_and_expiry() {
    let (_dir, client) = api().await;
    let (tx, mut rx) = mpsc::unbounded_channel();

    let a_stop = CancellationToken::new();
    let a_health = Health::default();
    let a = tokio::spawn(LeaderElector::new(client.clone(), election("a")).run(
        a_stop.clone(),
        a_health.clone(),
        lead("a", tx.clone()),
    ));
    assert_eq!(next(&mut rx).await, ("a", true));
    assert!(a_health.is_leader());

    // While "a" renews, nobody else can take the Lease.
    let mut other = LeaderElector::new(client.clone(), election("c"));
    assert!(!other.try_acquire_or_renew().await.unwrap());

    let b_stop = CancellationToken::new();
    let b_health = Health::default();
    let b = tokio::spawn(LeaderElector::new(client.clone(), election("b")).run(
        b_stop.clone(),
        b_health.clone(),
        lead("b", tx.clone()),
    ));

    // "a" shuts down and releases: "b" takes over well before the Lease could have expired.
    a_stop.cancel();
    assert_eq!(next(&mut rx).await, ("a", false));
    let released = Instant::now();
    a.await.unwrap().unwrap();
    assert!(!a_health.is_leader());
    assert_eq!(next(&mut rx).await, ("b", true));
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "took {:?}",
        released.elapsed()
    );

    // Someone else writes the Lease: "b" finds it lost at its next renewal and steps down.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let mut lease = leases.get("test-controllers").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace("test-controllers", &PostParams::default(), &lease)
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, ("b", false));

    // The intruder never renews: once its Lease expires, "b" leads again.
    let lost = Instant::now();
    assert_eq!(next(&mut rx).await, ("b", true));
    assert!(
        lost.elapsed() >= Duration::from_secs(2),
        "took over after {:?}",
        lost.elapsed()
    );
    assert!(b_health.is_leader());

    b_stop.cancel();
    assert_eq!(next(&mut rx).await, ("b", false));
    b.await.unwrap().unwrap();
    let released = leases.get("test-controllers").await.unwrap();
    assert_eq!(released.spec.unwrap().holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_router_reports_readiness_and_metrics() {
    let metrics = ControllerMetrics::default();
    metrics.record(
        "demo",
        capstan_runtime::metrics::ReconcileResult::Success,
        Duration::from_millis(2),
    );
    let health = Health::default();
    let router = health_router(health.clone(), metrics_registry(&metrics));
    let get = |path: &'static str| {
        let router = router.clone();
        async move {
            let response = router
                .oneshot(
                    http::Request::get(path)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = response.status();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            (status, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    assert_eq!(get("/readyz").await.0, 503);
    health.set_running(true);
    assert_eq!(
        get("/readyz").await,
        (http::StatusCode::OK, "ok (standby)".to_owned())
    );
    health.set_leader(true);
    assert_eq!(get("/readyz").await.1, "ok (leader)");
    let (status, text) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.contains(
            "capstan_controller_reconciles_total{controller=\"demo\",result=\"success\"} 1"
        ),
        "{text}"
    );
}

/// Polls `check` until it holds, failing after [`WAIT`].
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_pauses_follow_pausing_unpausing_and_deleting_a_cluster() {
    use capstan_runtime::pauses::{ClusterPauses, Pause, cluster_resource};
    use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
    let (_dir, client) = api().await;
    let shutdown = CancellationToken::new();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &cluster_resource());
    let mut existing = DynamicObject::new("before", &cluster_resource()).within("default");
    existing.data = serde_json::json!({"spec": {"paused": true}});
    clusters
        .create(&PostParams::default(), &existing)
        .await
        .unwrap();

    let pauses = ClusterPauses::new(client.clone(), shutdown.clone());
    // The first lookup starts the watch; until it has listed, nothing is known (the list may
    // already be complete when the lookup reads the table: the watch runs on another thread).
    let first = pauses.lookup("default", "before");
    assert!(
        first == Pause::Unknown || pauses.is_synced(),
        "{first:?} answered before the first list"
    );
    until("the first list", || pauses.is_synced()).await;
    assert_eq!(pauses.lookup("default", "before"), Pause::Paused);

    let created = DynamicObject::new("c1", &cluster_resource())
        .within("default")
        .data(serde_json::json!({"spec": {"paused": false}}));
    clusters
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    until("c1 running", || {
        pauses.lookup("default", "c1") == Pause::Running
    })
    .await;

    let patch = |value: serde_json::Value| Patch::Merge(value);
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &patch(serde_json::json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    until("c1 paused by spec", || {
        pauses.lookup("default", "c1") == Pause::Paused
    })
    .await;
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &patch(serde_json::json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    until("c1 unpaused", || {
        pauses.lookup("default", "c1") == Pause::Running
    })
    .await;
    let annotated = serde_json::json!({"metadata": {"annotations": {capstan_model::meta::ANNOTATION_PAUSED: ""}}});
    clusters
        .patch("c1", &PatchParams::default(), &patch(annotated))
        .await
        .unwrap();
    until("c1 paused by annotation", || {
        pauses.lookup("default", "c1") == Pause::Paused
    })
    .await;
    let unannotated = serde_json::json!({"metadata": {"annotations": {capstan_model::meta::ANNOTATION_PAUSED: null}}});
    clusters
        .patch("c1", &PatchParams::default(), &patch(unannotated))
        .await
        .unwrap();
    until("c1 running again", || {
        pauses.lookup("default", "c1") == Pause::Running
    })
    .await;
    clusters
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    until("c1 forgotten", || {
        pauses.lookup("default", "c1") == Pause::Unknown
    })
    .await;

    // What a controller's trigger saw is known at once, before the cache's own watch delivers it.
    let mut current = clusters.get("before").await.unwrap();
    current.data["spec"]["paused"] = serde_json::json!(false);
    let unpaused = clusters
        .replace("before", &PostParams::default(), &current)
        .await
        .unwrap();
    pauses.observe(&unpaused);
    assert_eq!(pauses.lookup("default", "before"), Pause::Running);
    shutdown.cancel();
}

/// A controller of ConfigMaps that records, per reconcile, the value of the Secret its ConfigMap
/// names (`data.secret`) as read through the process's Secret cache.
struct SecretReader {
    seen: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl SecretReader {
    fn last(seen: &std::sync::Mutex<Vec<(String, String)>>, reader: &str) -> Option<String> {
        seen.lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(name, _)| name == reader)
            .map(|(_, value)| value.clone())
    }
}

impl capstan_runtime::Reconciler for SecretReader {
    type Object = ConfigMap;
    type Error = kube::Error;

    fn name(&self) -> &'static str {
        "secret-reader"
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn secret_names(&self, map: &ConfigMap) -> Vec<String> {
        map.data
            .as_ref()
            .and_then(|d| d.get("secret").cloned())
            .into_iter()
            .collect()
    }

    fn follows_secrets(&self) -> bool {
        true
    }

    async fn reconcile(
        &self,
        map: Arc<ConfigMap>,
        context: Arc<capstan_runtime::Context>,
    ) -> Result<capstan_runtime::Action, kube::Error> {
        let namespace = map.namespace().unwrap_or_default();
        let value = match self.secret_names(&map).first() {
            Some(name) => match context.secrets().get(&namespace, name).await? {
                Some(secret) => secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get("value"))
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    .unwrap_or_default(),
                None => "<none>".to_owned(),
            },
            None => "<unnamed>".to_owned(),
        };
        self.seen.lock().unwrap().push((map.name_any(), value));
        Ok(capstan_runtime::Action::await_change())
    }
}

fn secret_with(name: &str, value: &str) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "value".to_owned(),
                k8s_openapi::ByteString(value.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

/// A Secret update, deletion and re-creation is seen by the reconcile it triggers (the cache has
/// the new version before the reader is queued), and objects are re-triggered through the Cluster
/// index when their Cluster is unpaused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_see_secret_changes_and_follow_their_cluster_through_the_index() {
    use capstan_runtime::pauses::cluster_resource;
    use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
    let (_dir, client) = api().await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &cluster_resource());
    secrets
        .create(&PostParams::default(), &secret_with("creds", "one"))
        .await
        .unwrap();
    let reader = |name: &str, cluster: Option<&str>| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: cluster.map(|c| {
                [(
                    capstan_model::meta::LABEL_CLUSTER_NAME.to_owned(),
                    c.to_owned(),
                )]
                .into()
            }),
            ..ObjectMeta::default()
        },
        data: Some([("secret".to_owned(), "creds".to_owned())].into()),
        ..ConfigMap::default()
    };
    maps.create(&PostParams::default(), &reader("host", None))
        .await
        .unwrap();

    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let (client, shutdown, seen) = (client.clone(), shutdown.clone(), seen.clone());
        async move {
            capstan_runtime::run(
                client,
                capstan_runtime::RunOptions::new(shutdown),
                move || {
                    vec![capstan_runtime::controller_task(SecretReader {
                        seen: seen.clone(),
                    })]
                },
            )
            .await
        }
    });
    let last = |reader: &str| SecretReader::last(&seen, reader);
    until("the first read", || last("host").as_deref() == Some("one")).await;

    // Updated: the ConfigMap is unchanged, so only the Secret trigger wakes the reader, and the
    // reconcile it wakes must read the new data (a cache behind the trigger would read "one" and
    // never be woken again).
    let patch = serde_json::json!({"data": {"value": "dHdv"}});
    secrets
        .patch("creds", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until("the update", || last("host").as_deref() == Some("two")).await;

    secrets
        .delete("creds", &DeleteParams::default())
        .await
        .unwrap();
    until("the deletion", || last("host").as_deref() == Some("<none>")).await;
    secrets
        .create(&PostParams::default(), &secret_with("creds", "three"))
        .await
        .unwrap();
    until("the re-creation", || {
        last("host").as_deref() == Some("three")
    })
    .await;

    // An object of a paused Cluster is not reconciled; the Cluster's unpause finds it through the
    // index and reconciles it.
    let mut paused = DynamicObject::new("c1", &cluster_resource()).within("default");
    paused.data = serde_json::json!({"spec": {"paused": true}});
    clusters
        .create(&PostParams::default(), &paused)
        .await
        .unwrap();
    maps.create(&PostParams::default(), &reader("member", Some("c1")))
        .await
        .unwrap();
    maps.create(&PostParams::default(), &reader("marker", None))
        .await
        .unwrap();
    // The marker is reconciled after the member was queued (one watch, in order): by then the
    // member's reconcile has found its Cluster paused.
    until("the marker", || last("marker").is_some()).await;
    assert_eq!(
        last("member"),
        None,
        "reconciled although its Cluster is paused"
    );
    clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    until("the member after the unpause", || last("member").is_some()).await;

    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_cache_answers_from_its_watch_and_reads_live_what_it_does_not_hold() {
    use capstan_runtime::tables::{LAST_APPLIED, ObjectCache};
    use kube::api::{DeleteParams, Patch, PatchParams};
    let (_dir, client) = api().await;
    let shutdown = CancellationToken::new();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let map = |name: &str, value: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some([(LAST_APPLIED.to_owned(), "{}".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("key".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    };
    let value = |map: &ConfigMap| map.data.as_ref().unwrap()["key"].clone();
    maps.create(&PostParams::default(), &map("before", "one"))
        .await
        .unwrap();

    let cache: ObjectCache<ConfigMap> = ObjectCache::typed(client.clone(), shutdown.clone());
    // Nothing held yet: read live (which starts the watch).
    let read = cache.get("default", "before").await.unwrap().unwrap();
    assert_eq!(value(&read), "one");
    assert!(
        read.annotations().get(LAST_APPLIED).is_none() && read.managed_fields().is_empty(),
        "kept without the applied copy and managed fields"
    );
    until("the first list", || cache.is_synced()).await;
    assert!(cache.peek("default", "missing").is_none());
    assert!(cache.get("default", "missing").await.unwrap().is_none());

    // A change reaches the cache through its watch.
    let changed = maps
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"key": "two"}})),
        )
        .await
        .unwrap();
    until("the change", || {
        cache
            .peek("default", "before")
            .is_some_and(|m| value(&m) == "two")
    })
    .await;
    // A reader that needs a version the cache has not seen yet reads it live.
    let newer = maps
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"key": "three"}})),
        )
        .await
        .unwrap();
    let at_least = cache
        .get_at_least("default", "before", newer.resource_version().as_deref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(value(&at_least), "three");
    assert_ne!(changed.resource_version(), newer.resource_version());
    // An older version (from another watch) never replaces a newer one.
    cache.observe(&changed);
    assert_eq!(value(&cache.peek("default", "before").unwrap()), "three");

    // Deleted: not answered from memory any more (a live read says it is gone).
    maps.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    until("the deletion", || cache.peek("default", "before").is_none()).await;
    assert!(cache.get("default", "before").await.unwrap().is_none());
    shutdown.cancel();
}

/// Two kinds of one group version (Metal3Machine and Metal3Cluster are both
/// `infrastructure.cluster.x-k8s.io/v1beta2`; here ConfigMap and Secret, both `v1`) each get a
/// cache of their own kind. When they shared one, whichever kind asked first decided what the
/// cache watched and read live: the other kind's objects were answered from the wrong kind, or
/// as missing (a Machine being deleted then left its Metal3Machine, and the host it holds, behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_one_api_version_has_its_own_object_cache() {
    use capstan_runtime::tables::ObjectCaches;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ApiResource;
    let (_dir, client) = api().await;
    let shutdown = CancellationToken::new();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &named_config_map("shared-name"))
        .await
        .unwrap();
    for name in ["shared-name", "only-a-secret"] {
        secrets
            .create(
                &PostParams::default(),
                &Secret {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..ObjectMeta::default()
                    },
                    ..Secret::default()
                },
            )
            .await
            .unwrap();
    }

    let caches = ObjectCaches::new(client.clone(), shutdown.clone());
    let map_resource = ApiResource::erase::<ConfigMap>(&());
    let secret_resource = ApiResource::erase::<Secret>(&());
    assert_eq!(map_resource.api_version, secret_resource.api_version);
    let map_cache = caches.dynamic(&map_resource);
    assert!(
        map_cache
            .get("default", "shared-name")
            .await
            .unwrap()
            .is_some()
    );
    until("the first list of ConfigMaps", || map_cache.is_synced()).await;

    let secret_cache = caches.dynamic(&secret_resource);
    let kind_of = |object: &kube::api::DynamicObject| {
        object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default()
    };
    let shared = secret_cache
        .get("default", "shared-name")
        .await
        .unwrap()
        .expect("the Secret");
    assert_eq!(
        kind_of(&shared),
        "Secret",
        "a ConfigMap answered for a Secret"
    );
    assert!(
        secret_cache
            .get("default", "only-a-secret")
            .await
            .unwrap()
            .is_some(),
        "a Secret that exists was answered as missing"
    );
    until("the first list of Secrets", || secret_cache.is_synced()).await;
    let held = secret_cache.peek("default", "only-a-secret").unwrap();
    assert_eq!(kind_of(&held), "Secret");
    assert!(map_cache.peek("default", "only-a-secret").is_none());
    shutdown.cancel();
}

#[tokio::test]
async fn a_labelled_cache_holds_only_the_labelled_objects_and_answers_their_absence_from_memory() {
    use capstan_runtime::tables::ObjectCache;
    let (_dir, client) = api().await;
    let shutdown = CancellationToken::new();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let map = |name: &str, labelled: bool| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labelled.then(|| [("report".to_owned(), name.to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    for (name, labelled) in [("plain", false), ("report-a", true)] {
        maps.create(&PostParams::default(), &map(name, labelled))
            .await
            .unwrap();
    }
    let cache: ObjectCache<ConfigMap> =
        ObjectCache::typed(client.clone(), shutdown.clone()).with_label("report");
    // Before the first list, absence is read live.
    assert!(
        cache
            .get_watched("default", "report-a")
            .await
            .unwrap()
            .is_some()
    );
    until("the first list", || cache.is_synced()).await;
    assert!(cache.peek("default", "report-a").is_some());
    // An object without the label is read live every time and never held: no watch would update it.
    assert!(cache.get("default", "plain").await.unwrap().is_some());
    assert!(cache.peek("default", "plain").is_none());
    assert_eq!(cache.table().len(), 1);
    // Once listed, a labelled object that does not exist is answered from memory...
    assert!(
        cache
            .get_watched("default", "report-b")
            .await
            .unwrap()
            .is_none()
    );
    // ... and one created later arrives through the watch.
    maps.create(&PostParams::default(), &map("report-b", true))
        .await
        .unwrap();
    until("the new report", || {
        cache.peek("default", "report-b").is_some()
    })
    .await;
    assert!(
        cache
            .get_watched("default", "report-b")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(cache.table().len(), 2);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_event_with_a_series_and_a_new_reason_is_another() {
    use capstan_runtime::events::EventRecorder;
    use k8s_openapi::api::events::v1::Event;
    use kube::Resource;
    use kube::runtime::events::EventType;
    let (_dir, client) = api().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let map = maps
        .create(&PostParams::default(), &named_config_map("subject"))
        .await
        .unwrap();
    let recorder = EventRecorder::new(client.clone(), "test-controller", "test-instance");
    let regarding = map.object_ref(&());
    for _ in 0..3 {
        recorder
            .publish(
                &regarding,
                EventType::Warning,
                "Stuck",
                "Reconcile",
                Some("waiting for the host".into()),
            )
            .await
            .unwrap();
    }
    recorder
        .publish(&regarding, EventType::Normal, "Ready", "Reconcile", None)
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client, "default");
    let mut listed = events.list(&Default::default()).await.unwrap().items;
    listed.sort_by_key(|e| e.reason.clone());
    let summary: Vec<_> = listed
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.type_.clone().unwrap_or_default(),
                e.series.as_ref().map(|s| s.count),
                e.regarding.as_ref().and_then(|r| r.uid.clone()),
                e.reporting_controller.clone().unwrap_or_default(),
            )
        })
        .collect();
    let uid = map.uid();
    assert_eq!(
        summary,
        [
            (
                "Ready".to_owned(),
                "Normal".to_owned(),
                None,
                uid.clone(),
                "test-controller".to_owned()
            ),
            (
                "Stuck".to_owned(),
                "Warning".to_owned(),
                Some(3),
                uid,
                "test-controller".to_owned()
            ),
        ]
    );
}
