//! The MachineHealthCheck controller between two in-process capstan API servers: the management API
//! holds the Cluster, Machines and the check; a second API plays the workload cluster and holds the
//! Nodes. The test plays the other controllers by hand: it writes the Cluster's initialisation, the
//! Machines' `nodeRef`, infrastructure and owners, and the Nodes' conditions.
//!
//! Every wait polls a condition against a deadline ([`WAIT`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::in_process_client;
use capstan_apiserver::{ApiServer, Auth};
use capstan_capi::healthcheck::MachineHealthCheckController;
use capstan_capi::nodewatch::{NodeWatches, WatchState};
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_sim::workload::SimCluster;
use capstan_store::{Store, StoreOptions};
use capstan_workload::{ClusterKey, WorkloadAccess, WorkloadError};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
const NS: &str = "default";
const CLUSTER: &str = "work";
/// A cluster whose workload API never answers.
const UNREACHABLE: &str = "unreachable";

/// Plays the one workload cluster of this test.
struct TestWorkload(Client);

impl WorkloadAccess for TestWorkload {
    fn client<'a>(
        &'a self,
        cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move {
            if cluster == &ClusterKey::new(NS, CLUSTER) {
                Ok(self.0.clone())
            } else if cluster.name == UNREACHABLE {
                Err(WorkloadError::ProbeTimeout {
                    cluster: cluster.clone(),
                    timeout: capstan_workload::PROBE_TIMEOUT,
                })
            } else {
                Err(WorkloadError::NoKubeconfig {
                    namespace: cluster.namespace.clone(),
                    secret: cluster.kubeconfig_secret(),
                })
            }
        })
    }

    fn forget(&self, _cluster: &ClusterKey) {}
}

async fn api_server(dir: &tempfile::TempDir, name: &str) -> ApiServer {
    let store = Store::open(&dir.path().join(name), StoreOptions::default()).unwrap();
    ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap()
}

fn capi(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn node_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Node".into(),
        plural: "nodes".into(),
    }
}

/// The workload API of the test: a capstan API server, plus the Node list when that server does not
/// serve Nodes itself yet (the built-in kind is being added to the embedded API separately). The
/// controller only lists Nodes, so serving that one request is all the stand-in does.
async fn workload_api(server: &ApiServer) -> (Client, Option<Arc<Mutex<Vec<Value>>>>) {
    let plain = in_process_client(server.router());
    let served = plain
        .list_core_api_resources("v1")
        .await
        .unwrap()
        .resources
        .iter()
        .any(|r| r.kind == "Node");
    if served {
        return (plain, None);
    }
    let nodes: Arc<Mutex<Vec<Value>>> = Arc::default();
    let listed = nodes.clone();
    let router = axum::Router::new()
        .route(
            "/api/v1/nodes",
            axum::routing::get(move || {
                let items = listed.lock().unwrap().clone();
                async move {
                    axum::Json(json!({
                        "apiVersion": "v1", "kind": "NodeList",
                        "metadata": {"resourceVersion": "1"}, "items": items,
                    }))
                }
            }),
        )
        .fallback_service(server.router());
    (in_process_client(router), Some(nodes))
}

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn ago(minutes: i64) -> String {
    let t = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(minutes);
    t.round(jiff::Unit::Second).unwrap().to_string()
}

struct Env {
    _dir: tempfile::TempDir,
    /// The controller's Node watches (to look at their state).
    watches: NodeWatches,
    management: Client,
    workload: Client,
    /// The Nodes, when the test serves their list itself.
    node_list: Option<Arc<Mutex<Vec<Value>>>>,
    shutdown: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), capstan_runtime::RuntimeError>>,
}

impl Env {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let management = in_process_client(api_server(&dir, "management.db").await.router());
        let workload_server = api_server(&dir, "workload.db").await;
        let (workload, node_list) = workload_api(&workload_server).await;
        let access = Arc::new(TestWorkload(workload.clone()));
        Self::run(dir, management, workload, node_list, |c| c, access)
    }

    /// The controller against `workload` (a simulated workload cluster) for cluster [`CLUSTER`];
    /// every other cluster's workload API never answers. Its periodic resync is a day, so any pass
    /// within a test's deadline came from a change or a running timeout.
    async fn start_simulated(workload: Client) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let management = in_process_client(api_server(&dir, "management.db").await.router());
        let access = Arc::new(TestWorkload(workload.clone()));
        Self::run(
            dir,
            management,
            workload,
            None,
            |c| c.with_resync(Duration::from_secs(24 * 3600)),
            access,
        )
    }

    fn run(
        dir: tempfile::TempDir,
        management: Client,
        workload: Client,
        node_list: Option<Arc<Mutex<Vec<Value>>>>,
        tune: impl FnOnce(MachineHealthCheckController) -> MachineHealthCheckController,
        access: Arc<TestWorkload>,
    ) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "capstan=debug,kube=warn".into()),
            )
            .with_test_writer()
            .try_init();
        let controller = tune(MachineHealthCheckController::new(access));
        let watches = controller.node_watches().clone();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(capstan_runtime::run(
            management.clone(),
            RunOptions::new(shutdown.clone()),
            move || vec![controller_task(controller.clone())],
        ));
        Self {
            watches,
            _dir: dir,
            management,
            workload,
            node_list,
            shutdown,
            running,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.running)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    fn machines(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.management.clone(), NS, &capi("Machine", "machines"))
    }

    fn checks(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            NS,
            &capi("MachineHealthCheck", "machinehealthchecks"),
        )
    }

    async fn create(&self, api: &Api<DynamicObject>, object: Value) -> DynamicObject {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap()
    }

    /// A Machine of the cluster owned by `owner` (kind), with the status the Machine controller and
    /// the infrastructure provider would have written.
    async fn machine(&self, name: &str, owner: &str, node: Option<&str>, extra: Value) {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        if owner == "KubeadmControlPlane" {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        let mut object = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": owner, "name": "owner",
                    "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
                }],
            },
            "spec": {
                "clusterName": CLUSTER,
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": name},
            },
        });
        json_patch_merge(&mut object, &extra);
        self.create(&self.machines(), object).await;
        let mut status = json!({
            "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
            "conditions": [{
                "type": "InfrastructureReady", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": ago(60),
            }],
        });
        if let Some(node) = node {
            status["nodeRef"] = json!({"name": node});
        }
        self.machines()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .unwrap();
    }

    /// A Node whose Ready condition has had `status` for `minutes`.
    async fn node(&self, name: &str, ready: &str, minutes: i64) {
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"conditions": [{
                "type": "Ready", "status": ready, "reason": "KubeletReady",
                "lastHeartbeatTime": ago(0), "lastTransitionTime": ago(minutes),
            }]},
        });
        match &self.node_list {
            Some(list) => list.lock().unwrap().push(node),
            None => {
                let api: Api<DynamicObject> =
                    Api::all_with(self.workload.clone(), &node_resource());
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(node.clone()).unwrap(),
                )
                .await
                .unwrap();
                // Node status is a subresource: a create leaves it out, as the kubelet's first
                // status update is what sets it.
                api.patch_status(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"status": node["status"]})),
                )
                .await
                .unwrap();
            }
        }
    }

    /// The Cluster, its infrastructure provisioned and control plane initialised.
    async fn cluster(&self) {
        self.cluster_named(CLUSTER).await;
    }

    fn clusters(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.management.clone(), NS, &capi("Cluster", "clusters"))
    }

    async fn cluster_named(&self, name: &str) {
        let clusters = self.clusters();
        self.create(
            &clusters,
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": name, "namespace": NS}, "spec": {"paused": false}}),
        )
        .await;
        clusters
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true}}})),
            )
            .await
            .unwrap();
    }

    async fn machine_condition(&self, machine: &str, type_: &str) -> Option<Value> {
        let machine = self.machines().get_opt(machine).await.unwrap()?;
        machine.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    }

    async fn check_status(&self) -> Value {
        self.checks().get("workers").await.unwrap().data["status"].clone()
    }
}

fn json_patch_merge(target: &mut Value, patch: &Value) {
    if let (Some(target), Some(patch)) = (target.as_object_mut(), patch.as_object()) {
        for (k, v) in patch {
            match target.get_mut(k) {
                Some(existing) if existing.is_object() && v.is_object() => {
                    json_patch_merge(existing, v)
                }
                _ => {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_machines_are_marked_short_circuited_then_remediated() {
    let env = Env::start().await;
    env.cluster().await;

    env.node("node-a", "True", 30).await;
    env.node("node-b", "False", 30).await;
    env.node("node-c", "Unknown", 30).await;
    env.machine("w-healthy", "MachineSet", Some("node-a"), json!({}))
        .await;
    env.machine("w-notready", "MachineSet", Some("node-b"), json!({}))
        .await;
    env.machine(
        "w-skip",
        "MachineSet",
        Some("node-c"),
        json!({"metadata": {"annotations": {"cluster.x-k8s.io/skip-remediation": ""}}}),
    )
    .await;
    env.machine("w-nostart", "MachineSet", None, json!({}))
        .await;
    env.machine(
        "cp-gone",
        "KubeadmControlPlane",
        Some("node-deleted"),
        json!({}),
    )
    .await;
    // Not selected: another cluster's Machine with a NotReady Node of the same name.
    env.create(
        &env.machines(),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "elsewhere", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "other"}},
               "spec": {"clusterName": "other", "bootstrap": {}, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": "x"}}}),
    )
    .await;

    // At most one unhealthy Machine may be remediated at a time: four are unhealthy.
    env.create(
        &env.checks(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineHealthCheck",
            "metadata": {"name": "workers", "namespace": NS},
            "spec": {
                "clusterName": CLUSTER,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
                "checks": {
                    "nodeStartupTimeoutSeconds": 600,
                    "unhealthyNodeConditions": [
                        {"type": "Ready", "status": "False", "timeoutSeconds": 300},
                        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
                    ],
                },
                "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": 1}},
            },
        }),
    )
    .await;
    let status = eventually("remediation to be short-circuited", || async {
        let status = env.check_status().await;
        (status["expectedMachines"] == 5).then_some(status)
    })
    .await;
    assert_eq!(status["currentHealthy"], 1);
    assert_eq!(status["remediationsAllowed"], 0);
    let allowed = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "RemediationAllowed")
        .unwrap();
    assert_eq!(allowed["status"], "False");
    assert_eq!(allowed["reason"], "TooManyUnhealthy");
    assert!(
        allowed["message"]
            .as_str()
            .unwrap()
            .contains("4 of 5 Machines are unhealthy"),
        "{allowed}"
    );
    eventually("the RemediationRestricted Event", || async {
        Api::<Event>::namespaced(env.management.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("RemediationRestricted"))
    })
    .await;
    // Marked, not remediated.
    for (machine, reason) in [
        ("w-notready", "UnhealthyNode"),
        ("w-skip", "UnhealthyNode"),
        ("w-nostart", "NodeStartupTimeout"),
        ("cp-gone", "NodeNotFound"),
    ] {
        let condition = eventually("the Machine to be marked", || async {
            env.machine_condition(machine, "HealthCheckSucceeded").await
        })
        .await;
        assert_eq!(condition["status"], "False", "{machine}");
        assert_eq!(condition["reason"], reason, "{machine}");
        assert!(
            env.machine_condition(machine, "OwnerRemediated")
                .await
                .is_none(),
            "{machine}"
        );
    }
    let healthy = env
        .machine_condition("w-healthy", "HealthCheckSucceeded")
        .await
        .unwrap();
    assert_eq!(healthy["status"], "True");
    assert!(
        env.machines()
            .get_opt("elsewhere")
            .await
            .unwrap()
            .unwrap()
            .data["status"]["conditions"]
            .is_null()
    );
    let message = env
        .machine_condition("w-notready", "HealthCheckSucceeded")
        .await
        .unwrap()["message"]
        .clone();
    assert_eq!(
        message,
        "Node node-b of Machine w-notready has condition Ready=False for more than 5m"
    );

    // Lift the limit: MachineSet Machines are deleted, the skipped one and the control plane's are
    // only marked for their owner.
    env.checks()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"remediation": null}})),
        )
        .await
        .unwrap();
    eventually(
        "the MachineSet's unhealthy Machines to be deleted",
        || async {
            let notready = env.machines().get_opt("w-notready").await.unwrap();
            let nostart = env.machines().get_opt("w-nostart").await.unwrap();
            (notready.is_none() && nostart.is_none()).then_some(())
        },
    )
    .await;
    let owner = eventually(
        "the control plane's Machine to wait for its owner",
        || async { env.machine_condition("cp-gone", "OwnerRemediated").await },
    )
    .await;
    assert_eq!(owner["status"], "False");
    assert_eq!(owner["reason"], "WaitingForRemediation");
    assert!(env.machines().get_opt("cp-gone").await.unwrap().is_some());
    assert!(env.machines().get_opt("w-skip").await.unwrap().is_some());
    assert!(
        env.machine_condition("w-skip", "OwnerRemediated")
            .await
            .is_none()
    );
    assert!(env.machines().get_opt("w-healthy").await.unwrap().is_some());
    let status = eventually("the counts after remediation", || async {
        let status = env.check_status().await;
        (status["expectedMachines"] == 3).then_some(status)
    })
    .await;
    assert_eq!(status["currentHealthy"], 1);
    assert_eq!(status["targets"], json!(["cp-gone", "w-healthy", "w-skip"]));
    env.stop().await;
}

/// A v1beta1 MachineHealthCheck (`maxUnhealthy` as a percentage, `unhealthyConditions` with duration
/// strings) is served converted and honoured the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1beta1_max_unhealthy_percentage() {
    let env = Env::start().await;
    env.cluster().await;
    env.node("n1", "True", 30).await;
    env.node("n2", "False", 30).await;
    env.node("n3", "False", 30).await;
    for (machine, node) in [("m1", "n1"), ("m2", "n2"), ("m3", "n3")] {
        env.machine(machine, "MachineSet", Some(node), json!({}))
            .await;
    }
    let v1beta1 = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "MachineHealthCheck".into(),
        plural: "machinehealthchecks".into(),
    };
    let checks: Api<DynamicObject> = Api::namespaced_with(env.management.clone(), NS, &v1beta1);
    env.create(
        &checks,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineHealthCheck",
            "metadata": {"name": "workers", "namespace": NS},
            "spec": {
                "clusterName": CLUSTER,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
                "maxUnhealthy": "40%",
                "nodeStartupTimeout": "10m",
                "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}],
            },
        }),
    )
    .await;
    // 40% of 3 targets is 1; 2 are unhealthy.
    let status = eventually("remediation to be short-circuited", || async {
        let status = env.check_status().await;
        (status["expectedMachines"] == 3).then_some(status)
    })
    .await;
    assert_eq!(status["currentHealthy"], 1);
    assert_eq!(status["remediationsAllowed"], 0);
    let condition = eventually("m2 to be marked", || async {
        env.machine_condition("m2", "HealthCheckSucceeded").await
    })
    .await;
    assert_eq!(condition["reason"], "UnhealthyNode");
    assert!(env.machines().get_opt("m2").await.unwrap().is_some());

    checks
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"maxUnhealthy": "100%"}})),
        )
        .await
        .unwrap();
    eventually("the unhealthy Machines to be deleted", || async {
        let m2 = env.machines().get_opt("m2").await.unwrap();
        let m3 = env.machines().get_opt("m3").await.unwrap();
        (m2.is_none() && m3.is_none()).then_some(())
    })
    .await;
    assert!(env.machines().get_opt("m1").await.unwrap().is_some());
    env.stop().await;
}

fn timestamp(value: &Value) -> jiff::Timestamp {
    value.as_str().unwrap().parse().unwrap()
}

/// The simulator's `not-ready` fault on a Node: its `Ready` turns `Unknown`, as when the kubelet
/// stops. The check, resynced only once a day, is woken by its cluster's Node watch and remediates
/// when the condition has held for `timeoutSeconds` — not before, and without a periodic pass. A
/// second cluster whose workload API never answers holds nothing up; its watch reconnects with
/// backoff and stops once no check names that cluster, and the first cluster's watch stops when its
/// Cluster goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_turning_not_ready_is_remediated_at_its_timeout_without_a_periodic_pass() {
    const TIMEOUT_SECONDS: i64 = 3;
    let workload = SimCluster::start(ClusterKey::new(NS, CLUSTER), None)
        .await
        .unwrap();
    let env = Env::start_simulated(workload.client.clone()).await;
    env.cluster().await;
    env.cluster_named(UNREACHABLE).await;
    let nodes: Api<Node> = Api::all(workload.client.clone());
    for node in ["cp-0", "w-0"] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": node}})).unwrap(),
            )
            .await
            .unwrap();
        workload
            .set_node_ready(node, true, Some("v1.33.0"), &[])
            .await
            .unwrap();
    }
    env.machine("cp-0", "KubeadmControlPlane", Some("cp-0"), json!({}))
        .await;
    env.machine("w-0", "MachineSet", Some("w-0"), json!({}))
        .await;
    env.create(
        &env.machines(),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": "far-0", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": UNREACHABLE}},
               "spec": {"clusterName": UNREACHABLE, "bootstrap": {}, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": "far-0"}}}),
    )
    .await;
    env.machines()
        .patch_status(
            "far-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"nodeRef": {"name": "far-0"}}})),
        )
        .await
        .unwrap();
    let check = |name: &str, cluster: &str| {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineHealthCheck",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterName": cluster,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "checks": {
                    "nodeStartupTimeoutSeconds": 600,
                    "unhealthyNodeConditions": [
                        {"type": "Ready", "status": "False", "timeoutSeconds": TIMEOUT_SECONDS},
                        {"type": "Ready", "status": "Unknown", "timeoutSeconds": TIMEOUT_SECONDS},
                    ],
                },
            },
        })
    };
    env.create(&env.checks(), check("far", UNREACHABLE)).await;
    env.create(&env.checks(), check("workers", CLUSTER)).await;

    // Both Machines judged healthy, the Nodes watched; the other cluster's watch keeps failing.
    for machine in ["cp-0", "w-0"] {
        eventually("the Machine to be judged healthy", || async {
            env.machine_condition(machine, "HealthCheckSucceeded")
                .await
                .filter(|c| c["status"] == "True")
        })
        .await;
    }
    let key = ClusterKey::new(NS, CLUSTER);
    let far = ClusterKey::new(NS, UNREACHABLE);
    eventually("the Nodes to be watched", || async {
        env.watches.is_watching(&key).then_some(())
    })
    .await;
    eventually("the unreachable cluster's watch to retry", || async {
        matches!(
            env.watches.state(&far),
            Some(WatchState::Connecting { attempt, .. }) if attempt >= 2
        )
        .then_some(())
    })
    .await;

    // The fault.
    workload
        .set_node_ready("w-0", false, None, &[])
        .await
        .unwrap();
    workload
        .set_node_ready("cp-0", false, None, &[])
        .await
        .unwrap();
    let not_ready_since = |node: Node| {
        let ready = node
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "Unknown");
        ready
            .last_transition_time
            .unwrap()
            .0
            .to_string()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let cp_since = not_ready_since(nodes.get("cp-0").await.unwrap());
    let w_since = not_ready_since(nodes.get("w-0").await.unwrap());
    let timeout = jiff::SignedDuration::from_secs(TIMEOUT_SECONDS);

    // The control plane's Machine is marked for its owner once the condition has held for the
    // timeout, not before.
    let marked = eventually("cp-0 to be marked for remediation", || async {
        env.machine_condition("cp-0", "OwnerRemediated").await
    })
    .await;
    assert_eq!(marked["status"], "False");
    assert_eq!(marked["reason"], "WaitingForRemediation");
    let unhealthy = env
        .machine_condition("cp-0", "HealthCheckSucceeded")
        .await
        .unwrap();
    assert_eq!(unhealthy["status"], "False");
    assert_eq!(unhealthy["reason"], "UnhealthyNode");
    assert!(
        timestamp(&unhealthy["lastTransitionTime"]) >= cp_since + timeout,
        "marked at {} though the Node has been NotReady only since {cp_since}",
        unhealthy["lastTransitionTime"]
    );
    // The MachineSet's Machine is deleted (its set replaces it), after the same wait.
    eventually("w-0 to be deleted", || async {
        env.machines()
            .get_opt("w-0")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // Events are recorded after the action they report: wait for both before reading them.
    let events = eventually("the marking and remediation Events", || async {
        let events = Api::<Event>::namespaced(env.management.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        let has = |reason: &str, machine: &str| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(machine))
            })
        };
        (has("MachineMarkedUnhealthy", "") && has("MachineRemediated", "w-0")).then_some(events)
    })
    .await;
    let event_time = |reason: &str, machine: &str| {
        let event = events
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(machine))
            })
            .unwrap_or_else(|| {
                let seen: Vec<_> = events
                    .iter()
                    .map(|e| (e.reason.clone(), e.message.clone(), e.series.is_some()))
                    .collect();
                panic!("no {reason} Event for {machine}: {seen:?}")
            });
        let time = event
            .event_time
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| event.first_timestamp.as_ref().map(|t| t.0.to_string()))
            .unwrap();
        time.parse::<jiff::Timestamp>().unwrap()
    };
    // Events of one reason are folded into a series: the first marking is its time.
    let first_marked = event_time("MachineMarkedUnhealthy", "");
    let w_remediated = event_time("MachineRemediated", "w-0");
    assert!(
        first_marked >= cp_since.min(w_since) + timeout,
        "{first_marked} < {} + {timeout:?}",
        cp_since.min(w_since)
    );
    assert!(
        w_remediated >= w_since + timeout,
        "{w_remediated} < {w_since} + {timeout:?}"
    );

    // The unreachable cluster blocked nothing; its check says why it judges nothing.
    let far_status = env.checks().get("far").await.unwrap().data["status"].clone();
    let allowed = far_status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "RemediationAllowed")
        .unwrap()
        .clone();
    assert_eq!(allowed["reason"], "RemoteConnectionFailed", "{allowed}");
    assert!(env.machines().get_opt("far-0").await.unwrap().is_some());

    // No check names the unreachable cluster any more: its watch stops.
    env.checks()
        .delete("far", &Default::default())
        .await
        .unwrap();
    eventually("the unreachable cluster's watch to stop", || async {
        env.watches.state(&far).is_none().then_some(())
    })
    .await;
    // The Cluster goes: its watch stops.
    env.clusters()
        .delete(CLUSTER, &Default::default())
        .await
        .unwrap();
    eventually("the deleted cluster's watch to stop", || async {
        env.watches.state(&key).is_none().then_some(())
    })
    .await;
    assert_eq!(env.watches.clusters(), Vec::<ClusterKey>::new());
    env.stop().await;
    workload.shutdown.cancel();
}
