//! The shipped controllers against the embedded API server, in-process (and once over TLS with a
//! kubeconfig): IPAM allocation order, pre-allocations, release and reuse, exhaustion and recovery,
//! concurrent claims across two controller instances, the paused annotation (on the claim and on its
//! Cluster), Events, garbage collection (background, orphan, foreground) and metrics.
//!
//! Every wait is on a watch or a metrics notification, bounded by [`WAIT`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::tls::Credentials;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_controllers::ipam::{
    ADDRESS_FINALIZER, CLAIM_CONTROLLER, CLAIM_FINALIZER, LABEL_CLAIM, LABEL_POOL,
};
use capstan_controllers::{ControllerOptions, run_controllers};
use capstan_model::ipam::{IPAddress, IPClaim, IPPool, IpClaimSpec, IpPoolSpec, Pool};
use capstan_model::meta::{ANNOTATION_PAUSED, LABEL_CLUSTER_NAME, ObjectReference};
use capstan_runtime::metrics::ReconcileResult;
use capstan_runtime::{
    CancellationToken, ControllerMetrics, LeaderElectionConfig, RunOptions, RuntimeError,
    client_from_kubeconfig,
};
use capstan_store::{Store, StoreOptions};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Upper bound for anything a test waits on.
const WAIT: Duration = Duration::from_secs(60);
const NS: &str = "default";

/// An API server in a temp dir with the controllers running on an in-process client.
struct Env {
    _dir: tempfile::TempDir,
    server: ApiServer,
    client: Client,
    metrics: ControllerMetrics,
    instances: Vec<(CancellationToken, JoinHandle<Result<(), RuntimeError>>)>,
}

impl Env {
    async fn start() -> Self {
        // Controller logs, shown for failing tests (RUST_LOG adjusts them).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "capstan=debug,kube=warn".into()),
            )
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
        let server = ApiServer::new(
            store,
            Arc::new(ApiVersionRewrite),
            Auth { tokens: Vec::new() },
        )
        .await
        .unwrap();
        let metrics = ControllerMetrics::default();
        server
            .state()
            .metrics
            .with_registry(|r| metrics.register(r))
            .unwrap();
        let mut env = Self {
            client: in_process_client(server.router()),
            _dir: dir,
            server,
            metrics,
            instances: Vec::new(),
        };
        env.add_instance(Some(Duration::from_secs(2)));
        env
    }

    /// Starts one more set of controllers (its own client, identity and pool locks) on the same API.
    fn add_instance(&mut self, garbage_collection: Option<Duration>) {
        let shutdown = CancellationToken::new();
        let options = ControllerOptions {
            runtime: RunOptions::new(shutdown.clone()).with_metrics(self.metrics.clone()),
            garbage_collection,
            hosts: None,
            workloads: None,
            etcd: None,
            bootstrap_report_url: None,
            simulator: None,
        };
        let client = in_process_client(self.server.router());
        self.instances
            .push((shutdown, tokio::spawn(run_controllers(client, options))));
    }

    async fn stop(self) {
        for (shutdown, running) in self.instances {
            shutdown.cancel();
            tokio::time::timeout(WAIT, running)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }

    fn pools(&self) -> Api<IPPool> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn claims(&self) -> Api<IPClaim> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn addresses(&self) -> Api<IPAddress> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_pool(&self, name: &str, pools: Vec<Pool>, pre: &[(&str, &str)]) -> IPPool {
        let mut spec = IpPoolSpec {
            name_prefix: name.into(),
            pools,
            prefix: Some(24),
            gateway: Some("10.0.0.254".into()),
            ..IpPoolSpec::default()
        };
        if !pre.is_empty() {
            spec.pre_allocations = Some(
                pre.iter()
                    .map(|(c, a)| ((*c).to_owned(), (*a).to_owned()))
                    .collect(),
            );
        }
        self.pools()
            .create(&PostParams::default(), &IPPool::new(name, Some(NS), spec))
            .await
            .unwrap()
    }

    async fn create_claim(
        &self,
        name: &str,
        pool: &str,
        annotate: &[(&str, &str)],
        label: &[(&str, &str)],
    ) -> IPClaim {
        let mut claim = IPClaim::new(
            name,
            Some(NS),
            IpClaimSpec {
                pool: ObjectReference {
                    name: Some(pool.into()),
                    ..ObjectReference::default()
                },
            },
        );
        let pairs = |p: &[(&str, &str)]| {
            (!p.is_empty()).then(|| {
                p.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        claim.metadata.annotations = pairs(annotate);
        claim.metadata.labels = pairs(label);
        self.claims()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap()
    }

    /// Waits until the claim has an address and returns the IPAddress.
    async fn allocated(&self, claim: &str) -> IPAddress {
        let claim = wait_for(self.claims(), claim, |c: Option<&IPClaim>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.address.is_some() && s.error_message.is_none())
        })
        .await
        .unwrap();
        let name = claim.status.unwrap().address.unwrap().name.unwrap();
        self.addresses().get(&name).await.unwrap()
    }

    /// Waits until the claim reports an error, and returns it.
    async fn failed(&self, claim: &str) -> String {
        let claim = wait_for(self.claims(), claim, |c: Option<&IPClaim>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.error_message.is_some())
        })
        .await
        .unwrap();
        claim.status.unwrap().error_message.unwrap()
    }

    /// Waits until the pool's indexes are exactly `expected`.
    async fn indexes(&self, pool: &str, expected: &[(&str, &str)]) {
        let expected: BTreeMap<String, String> = expected
            .iter()
            .map(|(c, a)| ((*c).to_owned(), (*a).to_owned()))
            .collect();
        wait_for(self.pools(), pool, |p: Option<&IPPool>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.indexes.as_ref())
                .is_some_and(|i| *i == expected)
        })
        .await;
    }

    /// Waits until a core v1 Event with `reason` about `object` exists, and returns it.
    async fn event(&self, object: &str, reason: &str) -> Event {
        let events: Api<Event> = Api::namespaced(self.client.clone(), NS);
        let stream = watcher(events, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream.try_filter(|e| {
            futures::future::ready(
                e.involved_object.name.as_deref() == Some(object)
                    && e.reason.as_deref() == Some(reason),
            )
        }));
        tokio::time::timeout(WAIT, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no {reason} event for {object}"))
            .unwrap()
            .unwrap()
    }

    /// Waits until `n` reconciles of `controller` ended with `result`.
    async fn reconciles(&self, controller: &str, result: ReconcileResult, n: u64) {
        let mut recorded = self.metrics.subscribe();
        tokio::time::timeout(
            WAIT,
            recorded.wait_for(|_| self.metrics.reconciles(controller, result) >= n),
        )
        .await
        .unwrap()
        .unwrap();
    }
}

async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    condition: impl kube::runtime::wait::Condition<K>,
) -> Option<K>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + kube::Resource + 'static,
{
    tokio::time::timeout(WAIT, await_condition(api, name, condition))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {name}"))
        .unwrap()
}

fn range(start: &str, end: &str) -> Pool {
    Pool {
        start: Some(start.into()),
        end: Some(end.into()),
        ..Pool::default()
    }
}

async fn delete<K>(api: &Api<K>, name: &str)
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + kube::Resource,
{
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_get_the_lowest_free_addresses_and_release_them() {
    let env = Env::start().await;
    let pool = env
        .create_pool("prov", vec![range("10.0.0.10", "10.0.0.20")], &[])
        .await;
    let mut got = Vec::new();
    for claim in ["a", "b", "c"] {
        env.create_claim(claim, "prov", &[], &[]).await;
        got.push(env.allocated(claim).await);
    }
    let addresses: Vec<&str> = got.iter().map(|a| a.spec.address.as_str()).collect();
    assert_eq!(addresses, ["10.0.0.10", "10.0.0.11", "10.0.0.12"]);

    let first = &got[0];
    assert_eq!(first.name_any(), "prov-10-0-0-10");
    assert_eq!(first.spec.prefix, Some(24));
    assert_eq!(first.spec.gateway.as_deref(), Some("10.0.0.254"));
    assert_eq!(first.spec.pool.name.as_deref(), Some("prov"));
    assert_eq!(first.spec.claim.name.as_deref(), Some("a"));
    assert_eq!(first.labels()[LABEL_POOL], "prov");
    assert_eq!(first.labels()[LABEL_CLAIM], "a");
    assert_eq!(first.finalizers(), [ADDRESS_FINALIZER]);
    let owners: BTreeSet<(&str, &str)> = first
        .owner_references()
        .iter()
        .map(|o| (o.kind.as_str(), o.uid.as_str()))
        .collect();
    let claim_a = env.claims().get("a").await.unwrap();
    assert_eq!(
        owners,
        BTreeSet::from([
            ("IPPool", pool.uid().unwrap().as_str()),
            ("IPClaim", claim_a.uid().unwrap().as_str())
        ])
    );
    assert!(claim_a.finalizers().iter().any(|f| f == CLAIM_FINALIZER));
    env.indexes(
        "prov",
        &[("a", "10.0.0.10"), ("b", "10.0.0.11"), ("c", "10.0.0.12")],
    )
    .await;
    let allocated = env.event("a", "AddressAllocated").await;
    assert_eq!(allocated.type_.as_deref(), Some("Normal"));
    assert!(allocated.message.unwrap().contains("10.0.0.10"));

    // Deleting a claim releases its address, which the next claim reuses.
    let b = env.claims().get("b").await.unwrap();
    delete(&env.claims(), "b").await;
    wait_for(env.claims(), "b", conditions::is_deleted(&b.uid().unwrap())).await;
    assert!(
        env.addresses()
            .get_opt("prov-10-0-0-11")
            .await
            .unwrap()
            .is_none()
    );
    env.indexes("prov", &[("a", "10.0.0.10"), ("c", "10.0.0.12")])
        .await;
    env.event("b", "AddressReleased").await;
    env.create_claim("d", "prov", &[], &[]).await;
    assert_eq!(env.allocated("d").await.spec.address, "10.0.0.11");
    env.indexes(
        "prov",
        &[("a", "10.0.0.10"), ("c", "10.0.0.12"), ("d", "10.0.0.11")],
    )
    .await;

    // The API server's /metrics now counts the controllers' reconciles.
    let text = env
        .client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert!(
        text.contains("capstan_apiserver_controller_reconciles_total{controller=\"ipam-claim\",result=\"success\"}"),
        "{text}"
    );
    assert!(text.contains(
        "capstan_apiserver_controller_reconcile_duration_seconds_count{controller=\"ipam-pool\"}"
    ));
    assert!(
        env.metrics
            .reconciles(CLAIM_CONTROLLER, ReconcileResult::Success)
            >= 4
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_allocations_are_honoured_and_reserved() {
    let env = Env::start().await;
    env.create_pool(
        "fixed",
        vec![range("10.0.1.1", "10.0.1.3")],
        &[("pinned", "10.0.1.2")],
    )
    .await;
    env.create_claim("x", "fixed", &[], &[]).await;
    env.create_claim("y", "fixed", &[], &[]).await;
    let x = env.allocated("x").await.spec.address;
    let y = env.allocated("y").await.spec.address;
    let mut others = [x, y];
    others.sort();
    assert_eq!(others, ["10.0.1.1", "10.0.1.3"]);
    env.create_claim("pinned", "fixed", &[], &[]).await;
    assert_eq!(env.allocated("pinned").await.spec.address, "10.0.1.2");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_reports_and_recovers_when_it_grows() {
    let env = Env::start().await;
    env.create_pool("small", vec![range("10.0.2.1", "10.0.2.2")], &[])
        .await;
    for claim in ["p1", "p2"] {
        env.create_claim(claim, "small", &[], &[]).await;
        env.allocated(claim).await;
    }
    env.create_claim("p3", "small", &[], &[]).await;
    assert_eq!(env.failed("p3").await, "Exhausted IP Pools");
    let warning = env.event("p3", "PoolExhausted").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));

    // Growing the pool re-triggers the waiting claim.
    env.pools()
        .patch(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pools": [{"start": "10.0.2.1", "end": "10.0.2.3"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(env.allocated("p3").await.spec.address, "10.0.2.3");

    // A claim on a missing pool says so, and is served once the pool appears.
    env.create_claim("early", "later", &[], &[]).await;
    assert_eq!(env.failed("early").await, "IPPool later not found");
    env.create_pool("later", vec![range("10.0.3.1", "10.0.3.1")], &[])
        .await;
    assert_eq!(env.allocated("early").await.spec.address, "10.0.3.1");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_claims_on_two_instances_get_twenty_addresses() {
    let mut env = Env::start().await;
    // A second, independent set of controllers: allocations race across processes' worth of state,
    // and only the API's name conflicts keep them apart.
    env.add_instance(None);
    env.create_pool("busy", vec![range("10.0.4.1", "10.0.4.50")], &[])
        .await;
    let names: Vec<String> = (0..20).map(|i| format!("claim-{i:02}")).collect();
    futures::future::join_all(names.iter().map(|n| env.create_claim(n, "busy", &[], &[]))).await;
    let mut addresses = BTreeSet::new();
    for name in &names {
        addresses.insert(env.allocated(name).await.spec.address);
    }
    let expected: BTreeSet<String> = (1..=20).map(|i| format!("10.0.4.{i}")).collect();
    assert_eq!(addresses, expected);
    let objects = env
        .addresses()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(objects.len(), 20, "one IPAddress per claim");
    let expected_indexes: Vec<(String, String)> =
        futures::future::join_all(names.iter().map(|n| async {
            let claim = env.claims().get(n).await.unwrap();
            let address = env
                .addresses()
                .get(&claim.status.unwrap().address.unwrap().name.unwrap())
                .await
                .unwrap();
            (n.clone(), address.spec.address)
        }))
        .await;
    let expected_indexes: Vec<(&str, &str)> = expected_indexes
        .iter()
        .map(|(c, a)| (c.as_str(), a.as_str()))
        .collect();
    env.indexes("busy", &expected_indexes).await;
    env.stop().await;
}

fn cluster(name: &str, paused: bool) -> DynamicObject {
    let resource = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let mut object = DynamicObject::new(name, &resource).within(NS);
    object.data = json!({"spec": {"paused": paused}});
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_claims_and_claims_of_paused_clusters_wait() {
    let env = Env::start().await;
    env.create_pool("pausing", vec![range("10.0.5.1", "10.0.5.9")], &[])
        .await;
    let resource = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let clusters: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &resource);
    clusters
        .create(&PostParams::default(), &cluster("frozen", true))
        .await
        .unwrap();

    env.create_claim("held", "pausing", &[(ANNOTATION_PAUSED, "")], &[])
        .await;
    env.create_claim("member", "pausing", &[], &[(LABEL_CLUSTER_NAME, "frozen")])
        .await;
    env.reconciles(CLAIM_CONTROLLER, ReconcileResult::Paused, 2)
        .await;
    for name in ["held", "member"] {
        let claim = env.claims().get(name).await.unwrap();
        assert!(claim.status.is_none(), "{name} was reconciled while paused");
        assert!(
            claim.finalizers().is_empty(),
            "{name} got a finalizer while paused"
        );
    }

    // Unpausing the claim, and then its Cluster, lets each proceed.
    env.claims()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_PAUSED: null}}})),
        )
        .await
        .unwrap();
    let held = env.allocated("held").await.spec.address;
    clusters
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let member = env.allocated("member").await.spec.address;
    assert_ne!(held, member);
    env.stop().await;
}

fn config_map(name: &str, owners: &[(&ConfigMap, bool)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            owner_references: (!owners.is_empty()).then(|| {
                owners
                    .iter()
                    .map(|(o, block)| OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: o.name_any(),
                        uid: o.uid().unwrap(),
                        block_owner_deletion: Some(*block),
                        controller: None,
                    })
                    .collect()
            }),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collector_follows_owner_references() {
    let env = Env::start().await;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let create = |m: ConfigMap| {
        let maps = maps.clone();
        async move { maps.create(&PostParams::default(), &m).await.unwrap() }
    };
    let uid_of = |m: &ConfigMap| m.uid().unwrap();

    // Background: dependents of a deleted owner go; one with a surviving owner stays, minus the
    // dangling reference; one whose owner never existed goes too.
    let owner = create(config_map("owner", &[])).await;
    let keeper = create(config_map("keeper", &[])).await;
    let dependent = create(config_map("dependent", &[(&owner, false)])).await;
    let shared = create(config_map("shared", &[(&owner, false), (&keeper, false)])).await;
    let mut ghost = config_map("ghost-owner", &[]);
    ghost.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let orphan_of_ghost = create(config_map("orphan-of-ghost", &[(&ghost, false)])).await;
    delete(&maps, "owner").await;
    wait_for(
        maps.clone(),
        "dependent",
        conditions::is_deleted(&uid_of(&dependent)),
    )
    .await;
    wait_for(
        maps.clone(),
        "orphan-of-ghost",
        conditions::is_deleted(&uid_of(&orphan_of_ghost)),
    )
    .await;
    let shared_uid = uid_of(&shared);
    let keeper_uid = uid_of(&keeper);
    let survivor = wait_for(maps.clone(), "shared", |m: Option<&ConfigMap>| {
        m.is_some_and(|m| m.owner_references().len() == 1)
    })
    .await
    .unwrap();
    assert_eq!(survivor.uid().unwrap(), shared_uid);
    assert_eq!(survivor.owner_references()[0].uid, keeper_uid);

    // Orphan: the owner goes, its dependent stays without the reference.
    let parent = create(config_map("parent", &[])).await;
    create(config_map("orphan", &[(&parent, true)])).await;
    maps.delete("parent", &DeleteParams::orphan())
        .await
        .unwrap();
    wait_for(
        maps.clone(),
        "parent",
        conditions::is_deleted(&uid_of(&parent)),
    )
    .await;
    let orphan = maps.get("orphan").await.unwrap();
    assert!(orphan.owner_references().is_empty());

    // Foreground: the owner waits for its blocking dependent (held by a finalizer here), and goes
    // only after it.
    let root = create(config_map("root", &[])).await;
    let mut leaf = config_map("leaf", &[(&root, true)]);
    leaf.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let leaf = create(leaf).await;
    maps.delete("root", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for(maps.clone(), "leaf", |m: Option<&ConfigMap>| {
        m.is_some_and(|m| m.metadata.deletion_timestamp.is_some())
    })
    .await;
    let waiting = maps.get("root").await.unwrap();
    assert!(
        waiting
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion")
    );
    maps.patch(
        "leaf",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for(maps.clone(), "leaf", conditions::is_deleted(&uid_of(&leaf))).await;
    wait_for(maps.clone(), "root", conditions::is_deleted(&uid_of(&root))).await;
    assert!(
        env.metrics.reconciles(
            capstan_controllers::gc::GC_CONTROLLER,
            ReconcileResult::Success
        ) >= 1
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_run_over_tls_from_a_kubeconfig_with_leader_election() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let creds = Credentials::load_or_create(&pki, &[]).unwrap();
    let tls = creds.server_config(&pki).unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth {
            tokens: vec![creds.admin_token.clone()],
        },
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let stop_server = CancellationToken::new();
    let serving = tokio::spawn(capstan_apiserver::serve::serve_tls(
        server.router(),
        listener,
        tls,
        stop_server.clone().cancelled_owned(),
    ));
    let kubeconfig = dir.path().join("kubeconfig");
    creds.write_kubeconfig(&kubeconfig, &url).unwrap();

    let client = client_from_kubeconfig(&kubeconfig).await.unwrap();
    let shutdown = CancellationToken::new();
    let runtime = RunOptions::new(shutdown.clone()).with_leader_election(
        LeaderElectionConfig::new(capstan_runtime::default_identity()),
    );
    let health = runtime.health.clone();
    let running = tokio::spawn(run_controllers(
        client.clone(),
        ControllerOptions::standalone(runtime),
    ));

    let pools: Api<IPPool> = Api::namespaced(client.clone(), NS);
    pools
        .create(
            &PostParams::default(),
            &IPPool::new(
                "remote",
                Some(NS),
                IpPoolSpec {
                    name_prefix: "remote".into(),
                    pools: vec![range("192.168.10.5", "192.168.10.6")],
                    ..IpPoolSpec::default()
                },
            ),
        )
        .await
        .unwrap();
    let claims: Api<IPClaim> = Api::namespaced(client.clone(), NS);
    claims
        .create(
            &PostParams::default(),
            &IPClaim::new(
                "node-0",
                Some(NS),
                IpClaimSpec {
                    pool: ObjectReference {
                        name: Some("remote".into()),
                        ..ObjectReference::default()
                    },
                },
            ),
        )
        .await
        .unwrap();
    let claim = wait_for(claims.clone(), "node-0", |c: Option<&IPClaim>| {
        c.and_then(|c| c.status.as_ref())
            .is_some_and(|s| s.address.is_some())
    })
    .await
    .unwrap();
    assert_eq!(
        claim.status.unwrap().address.unwrap().name.as_deref(),
        Some("remote-192-168-10-5")
    );
    assert!(health.is_leader() && health.is_running());
    let lease: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    assert!(
        lease
            .get("capstan-controllers")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .is_some()
    );

    shutdown.cancel();
    tokio::time::timeout(WAIT, running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!health.is_running());
    stop_server.cancel();
    let _ = tokio::time::timeout(WAIT, serving).await;
}
