//! The Cluster API core controllers against two in-process capstan API servers: the management
//! cluster, and a workload cluster reached through a small `WorkloadAccess`. The tests play the
//! providers by hand, writing exactly the fields the contracts say (KubeadmConfig
//! `status.dataSecretName`/`initialization.dataSecretCreated`, Metal3Machine `spec.providerID` and
//! `status.initialization.provisioned`, Metal3Cluster `spec.controlPlaneEndpoint`, the control
//! plane's `status.initialization.controlPlaneInitialized`) and registering Nodes with the
//! providerID in the workload API.
//!
//! Every wait polls a condition with a deadline ([`WAIT`]); nothing sleeps to synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_capi::machine::READY;
use capstan_model::capi::v1beta2::{Cluster, Machine, MachineDeployment, MachineSet};
use capstan_runtime::{CancellationToken, RunOptions};
use capstan_store::{Store, StoreOptions};
use capstan_workload::{ClusterKey, WorkloadAccess, WorkloadError};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Upper bound for anything a test waits on.
const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "default";
/// How often a waiting test looks again.
const POLL: Duration = Duration::from_millis(100);

/// Polls `check` until it returns `Some`, failing the test after [`WAIT`] with `what`.
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

/// The workload cluster of every Cluster: one in-process API server.
struct OneWorkload(Client);

impl WorkloadAccess for OneWorkload {
    fn client<'a>(
        &'a self,
        _cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }

    fn forget(&self, _cluster: &ClusterKey) {}
}

async fn api_server(dir: &tempfile::TempDir, name: &str) -> ApiServer {
    let store = Store::open(&dir.path().join(name), StoreOptions::default()).unwrap();
    ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap()
}

struct Env {
    _dir: tempfile::TempDir,
    _servers: (ApiServer, ApiServer),
    client: Client,
    workload: Client,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn kubeadm_config() -> ApiResource {
    resource(
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfig",
        "kubeadmconfigs",
    )
}
fn kubeadm_config_template() -> ApiResource {
    resource(
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
    )
}
fn metal3_machine() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "Metal3Machine",
        "metal3machines",
    )
}
fn metal3_machine_template() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "Metal3MachineTemplate",
        "metal3machinetemplates",
    )
}
fn metal3_cluster() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "Metal3Cluster",
        "metal3clusters",
    )
}
fn control_plane() -> ApiResource {
    resource(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    )
}

fn dynamic(client: &Client, resource: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, resource)
}

async fn create(client: &Client, resource: &ApiResource, value: Value) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(value).unwrap();
    dynamic(client, resource)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

async fn patch_status(client: &Client, resource: &ApiResource, name: &str, status: Value) {
    dynamic(client, resource)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
}

fn provider_id(machine: &str) -> String {
    format!("metal3://{NS}/host-{machine}/{machine}")
}

impl Env {
    async fn start() -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "capstan=debug,kube=warn".into()),
            )
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let management = api_server(&dir, "management.db").await;
        let workload_server = api_server(&dir, "workload.db").await;
        let client = in_process_client(management.router());
        let workload = in_process_client(workload_server.router());
        let shutdown = CancellationToken::new();
        let access: capstan_workload::SharedWorkloadAccess =
            Arc::new(OneWorkload(workload.clone()));
        let runtime = {
            let client = client.clone();
            let options = RunOptions::new(shutdown.clone());
            tokio::spawn(async move {
                capstan_runtime::run(client, options, move || {
                    capstan_capi::controllers(Some(access.clone()))
                })
                .await
                .unwrap();
            })
        };
        let mut env = Self {
            _dir: dir,
            _servers: (management, workload_server),
            client,
            workload,
            shutdown,
            tasks: vec![runtime],
        };
        env.play_providers();
        env
    }

    /// Plays the bootstrap and infrastructure providers: every KubeadmConfig gets a data Secret
    /// name; every Metal3Machine is provisioned with a providerID, and its Node registers in the
    /// workload cluster, Ready.
    fn play_providers(&mut self) {
        let client = self.client.clone();
        self.tasks.push(tokio::spawn(async move {
            let configs = Api::<DynamicObject>::all_with(client.clone(), &kubeadm_config());
            let mut stream = watcher(configs, watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(config)) = stream.next().await {
                if config.data["status"]["dataSecretName"].is_string() || config.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = config.name_any();
                let _ = dynamic(&client, &kubeadm_config())
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"dataSecretName": format!("{name}-bootstrap"), "initialization": {"dataSecretCreated": true}}})))
                    .await;
            }
        }));
        let client = self.client.clone();
        let workload = self.workload.clone();
        self.tasks.push(tokio::spawn(async move {
            let machines = Api::<DynamicObject>::all_with(client.clone(), &metal3_machine());
            let mut stream = watcher(machines, watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(m3m)) = stream.next().await {
                if m3m.data["spec"]["providerID"].is_string() || m3m.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = m3m.name_any();
                let id = provider_id(&name);
                let api = dynamic(&client, &metal3_machine());
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"providerID": id}}))).await;
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true}, "ready": true, "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}})))
                    .await;
                register_node(&workload, &name, &id).await;
            }
        }));
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.abort();
        }
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn cluster_objects(&self, name: &str) {
        create(
            &self.client,
            &metal3_cluster(),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Cluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"controlPlaneEndpoint": {"host": "192.0.2.100", "port": 6443}},
            }),
        )
        .await;
        create(&self.client, &control_plane(), json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "version": "v1.33.1",
                     "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": name}}}},
        }))
        .await;
        create(&self.client, &resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"), json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Cluster", "name": name},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": name},
            },
        }))
        .await;
    }

    async fn templates(&self, name: &str, image: &str) {
        create(&self.client, &metal3_machine_template(), json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3MachineTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"spec": {"image": {"url": image, "checksum": format!("{image}.sha256"), "checksumType": "sha256", "format": "raw"}, "hostSelector": {"matchLabels": {"pool": "workers"}}}}},
        }))
        .await;
        let _ = dynamic(&self.client, &kubeadm_config_template())
            .create(&PostParams::default(), &serde_json::from_value(json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
                "metadata": {"name": "workers", "namespace": NS},
                "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}]}}}}},
            })).unwrap())
            .await;
    }

    async fn deployment(&self, cluster: &str, name: &str, replicas: i32, infra_template: &str) {
        create(&self.client, &resource("cluster.x-k8s.io", "v1beta2", "MachineDeployment", "machinedeployments"), json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterName": cluster,
                "replicas": replicas,
                "selector": {"matchLabels": {"pool": name}},
                "template": {
                    "metadata": {"labels": {"pool": name, "node-role.kubernetes.io/storage": ""}},
                    "spec": {
                        "clusterName": cluster,
                        "version": "v1.33.1",
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "workers"}},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": infra_template},
                    },
                },
            },
        }))
        .await;
    }

    /// Running Machines of `deployment`, when exactly `count` exist and all are Running and Ready.
    async fn running(&self, deployment: &str, count: usize) -> Option<Vec<Machine>> {
        let machines = self
            .machines()
            .list(
                &ListParams::default()
                    .labels(&format!("cluster.x-k8s.io/deployment-name={deployment}")),
            )
            .await
            .ok()?
            .items;
        let running: Vec<Machine> = machines
            .into_iter()
            .filter(|m| {
                let status = m.status.clone().unwrap_or_default();
                m.metadata.deletion_timestamp.is_none()
                    && status.phase.as_deref() == Some("Running")
                    && status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == READY && c.status == "True")
            })
            .collect();
        let all = self
            .machines()
            .list(
                &ListParams::default()
                    .labels(&format!("cluster.x-k8s.io/deployment-name={deployment}")),
            )
            .await
            .ok()?
            .items
            .len();
        (running.len() == count && all == count).then_some(running)
    }
}

async fn register_node(workload: &Client, name: &str, provider_id: &str) {
    let nodes: Api<Node> = Api::all(workload.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"providerID": provider_id},
    }))
    .unwrap();
    if nodes.create(&PostParams::default(), &node).await.is_err() {
        return;
    }
    let _ = nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}], "nodeInfo": {"kubeletVersion": "v1.33.1", "osImage": "Debian", "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://2.0", "kernelVersion": "6.1", "kubeProxyVersion": "", "machineID": "m", "operatingSystem": "linux", "systemUUID": "s"}}})))
        .await
        .expect("the Node's status is accepted (every required nodeInfo field is set)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_reaches_provisioned_with_endpoint_owner_refs_and_conditions() {
    let env = Env::start().await;
    env.cluster_objects("alpha").await;
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), NS);
    // The infrastructure cluster is not provisioned yet: the condition says so, naming it.
    let waiting = eventually("the Cluster to wait on its infrastructure", || async {
        let c = clusters.get("alpha").await.ok()?;
        let status = c.status.clone()?;
        let infra = status
            .conditions
            .iter()
            .find(|c| c.type_ == "InfrastructureReady")?
            .clone();
        (status.phase.as_deref() == Some("Provisioning") && infra.status == "False")
            .then_some(infra)
    })
    .await;
    assert_eq!(waiting.reason.as_deref(), Some("WaitingForInfrastructure"));
    assert!(
        waiting
            .message
            .unwrap_or_default()
            .contains("Metal3Cluster alpha")
    );

    patch_status(
        &env.client,
        &metal3_cluster(),
        "alpha",
        json!({"initialization": {"provisioned": true}, "ready": true}),
    )
    .await;
    patch_status(&env.client, &control_plane(), "alpha", json!({"initialization": {"controlPlaneInitialized": true}, "replicas": 1, "readyReplicas": 1})).await;
    let cluster = eventually("the Cluster to be Provisioned and initialised", || async {
        let c = clusters.get("alpha").await.ok()?;
        let status = c.status.clone()?;
        let init = status.initialization.clone()?;
        (status.phase.as_deref() == Some("Provisioned")
            && init["controlPlaneInitialized"] == json!(true)
            && init["infrastructureProvisioned"] == json!(true))
        .then_some(c)
    })
    .await;
    let endpoint = cluster.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("192.0.2.100", 6443)
    );
    let status = cluster.status.unwrap();
    assert_eq!(status.control_plane.unwrap()["readyReplicas"], 1);
    // The Cluster owns its infrastructure cluster and control plane.
    for r in [metal3_cluster(), control_plane()] {
        let object = dynamic(&env.client, &r).get("alpha").await.unwrap();
        assert!(
            object
                .owner_references()
                .iter()
                .any(|o| o.kind == "Cluster" && o.name == "alpha"),
            "{} not owned",
            r.kind
        );
        assert_eq!(
            object
                .labels()
                .get("cluster.x-k8s.io/cluster-name")
                .map(String::as_str),
            Some("alpha")
        );
    }
    // The status patch kept a field of upstream's status the Cluster controller does not own (a
    // field upstream does not know would be pruned, as kube-apiserver prunes it).
    let clusters_raw = dynamic(
        &env.client,
        &resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
    );
    clusters_raw
        .patch_status(
            "alpha",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"deprecated": {"v1beta1": {"failureMessage": "kept"}}}}),
            ),
        )
        .await
        .unwrap();
    patch_status(
        &env.client,
        &control_plane(),
        "alpha",
        json!({"readyReplicas": 0}),
    )
    .await;
    eventually("the control-plane counts to follow", || async {
        let c = clusters.get("alpha").await.ok()?;
        (c.status?.control_plane?["readyReplicas"] == 0).then_some(())
    })
    .await;
    let raw = clusters_raw.get("alpha").await.unwrap();
    assert_eq!(
        raw.data["status"]["deprecated"]["v1beta1"]["failureMessage"],
        json!("kept")
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_deployment_scales_rolls_out_and_labels_nodes() {
    let env = Env::start().await;
    env.cluster_objects("beta").await;
    env.templates("workers-a", "http://images.example/a.img")
        .await;
    env.templates("workers-b", "http://images.example/b.img")
        .await;
    env.deployment("beta", "pool", 1, "workers-a").await;
    let first = eventually("1 Running Machine", || env.running("pool", 1)).await;
    let machine = &first[0];
    // The contract chain: bootstrap data → providerID → nodeRef, with the clones owned by the Machine.
    assert_eq!(
        machine.spec.bootstrap.data_secret_name.as_deref(),
        Some(format!("{}-bootstrap", machine.name_any()).as_str())
    );
    assert_eq!(
        machine.spec.provider_id.as_deref(),
        Some(provider_id(&machine.name_any()).as_str())
    );
    assert_eq!(
        machine.status.clone().unwrap().node_ref.unwrap()["name"],
        json!(machine.name_any())
    );
    for r in [metal3_machine(), kubeadm_config()] {
        let clone = dynamic(&env.client, &r)
            .get(&machine.name_any())
            .await
            .unwrap();
        let owner = clone
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .cloned()
            .unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Machine", machine.name_any().as_str())
        );
        assert_eq!(
            clone
                .annotations()
                .get("cluster.x-k8s.io/cloned-from-name")
                .map(String::as_str),
            Some(if r.kind == "Metal3Machine" {
                "workers-a"
            } else {
                "workers"
            })
        );
    }
    let m3m = dynamic(&env.client, &metal3_machine())
        .get(&machine.name_any())
        .await
        .unwrap();
    assert_eq!(
        m3m.data["spec"]["image"]["url"],
        json!("http://images.example/a.img")
    );
    // Node-role labels: the Machine's, and worker for a non-control-plane Machine.
    let nodes: Api<Node> = Api::all(env.workload.clone());
    let node = eventually("the Node's role labels", || async {
        let n = nodes.get(&machine.name_any()).await.ok()?;
        n.labels()
            .contains_key("node-role.kubernetes.io/worker")
            .then_some(n)
    })
    .await;
    assert!(
        node.labels()
            .contains_key("node-role.kubernetes.io/storage")
    );
    assert_eq!(
        node.labels().get("kubernetes.io/hostname"),
        Some(&machine.name_any()),
        "other labels kept"
    );
    assert_eq!(
        node.annotations().get("cluster.x-k8s.io/machine"),
        Some(&machine.name_any())
    );

    let deployments: Api<MachineDeployment> = Api::namespaced(env.client.clone(), NS);
    let scale = |n: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch(
                    "pool",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"replicas": n}})),
                )
                .await
                .unwrap();
        }
    };
    // Up through the `scale` subresource (what `kubectl scale md` uses).
    let scaled = deployments
        .patch_scale(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    eventually("3 Running Machines", || env.running("pool", 3)).await;
    let status = eventually("the deployment status to count 3", || async {
        let s = deployments.get("pool").await.ok()?.status?;
        (s.replicas == Some(3) && s.ready_replicas == Some(3) && s.up_to_date_replicas == Some(3))
            .then_some(s)
    })
    .await;
    assert!(status.selector.unwrap_or_default().contains("pool=pool"));
    let scale_status = deployments.get_scale("pool").await.unwrap().status.unwrap();
    assert_eq!(scale_status.replicas, 3);
    assert!(
        scale_status
            .selector
            .unwrap_or_default()
            .contains("pool=pool")
    );
    scale(1).await;
    eventually("1 Running Machine", || env.running("pool", 1)).await;

    // A template change rolls out: a new MachineSet (revision 2) replaces the old one's Machines.
    deployments
        .patch("pool", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "workers-b"}}}}})))
        .await
        .unwrap();
    let sets: Api<MachineSet> = Api::namespaced(env.client.clone(), NS);
    let rolled = eventually(
        "one MachineSet at revision 2 with a Running Machine on the new template",
        || async {
            let all = sets.list(&ListParams::default()).await.ok()?.items;
            if all.len() != 1
                || all[0]
                    .annotations()
                    .get(capstan_capi::ANNOTATION_REVISION)
                    .map(String::as_str)
                    != Some("2")
            {
                return None;
            }
            let running = env.running("pool", 1).await?;
            let m3m = dynamic(&env.client, &metal3_machine())
                .get(&running[0].name_any())
                .await
                .ok()?;
            (m3m.data["spec"]["image"]["url"] == json!("http://images.example/b.img"))
                .then_some(running)
        },
    )
    .await;
    assert_ne!(rolled[0].name_any(), machine.name_any());
    assert_eq!(
        deployments
            .get("pool")
            .await
            .unwrap()
            .annotations()
            .get(capstan_capi::ANNOTATION_REVISION)
            .map(String::as_str),
        Some("2")
    );
    // The old Machine's clones and Node went with it.
    eventually(
        "the old Machine's infrastructure, bootstrap config and Node to go",
        || async {
            let m3m = dynamic(&env.client, &metal3_machine())
                .get_opt(&machine.name_any())
                .await
                .ok()?;
            let config = dynamic(&env.client, &kubeadm_config())
                .get_opt(&machine.name_any())
                .await
                .ok()?;
            let node = nodes.get_opt(&machine.name_any()).await.ok()?;
            (m3m.is_none() && config.is_none() && node.is_none()).then_some(())
        },
    )
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_deletion_goes_workers_then_control_plane_then_infrastructure() {
    let env = Env::start().await;
    env.cluster_objects("gamma").await;
    env.templates("workers-a", "http://images.example/a.img")
        .await;
    // Finalizers stand in for the control-plane and infrastructure providers' own cleanup.
    for r in [metal3_cluster(), control_plane()] {
        dynamic(&env.client, &r)
            .patch(
                "gamma",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": ["test.capstan.io/hold"]}})),
            )
            .await
            .unwrap();
    }
    env.deployment("gamma", "gpool", 2, "workers-a").await;
    eventually("2 Running Machines", || env.running("gpool", 2)).await;
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), NS);
    eventually("the Cluster finalizer", || async {
        clusters
            .get("gamma")
            .await
            .ok()?
            .finalizers()
            .iter()
            .any(|f| f == capstan_capi::CLUSTER_FINALIZER)
            .then_some(())
    })
    .await;
    clusters
        .delete("gamma", &DeleteParams::default())
        .await
        .unwrap();

    let is_deleting = |r: ApiResource| {
        let client = env.client.clone();
        async move {
            dynamic(&client, &r)
                .get("gamma")
                .await
                .ok()
                .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
        }
    };
    // Workers go first; until they are gone the control plane is not touched.
    eventually("the workers to go", || async {
        let machines = env
            .machines()
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let deployments = Api::<MachineDeployment>::namespaced(env.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        if !machines.is_empty() || !deployments.is_empty() {
            assert!(
                !is_deleting(control_plane()).await,
                "control plane deleted while workers remain"
            );
            return None;
        }
        Some(())
    })
    .await;
    eventually("the control plane to be deleted", || async {
        is_deleting(control_plane()).await.then_some(())
    })
    .await;
    let deleting = eventually(
        "the Cluster's Deleting condition to name the control plane",
        || async {
            let c = clusters.get("gamma").await.ok()?;
            let condition = c
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Deleting")?;
            condition
                .message
                .clone()?
                .contains("control plane")
                .then_some(condition)
        },
    )
    .await;
    assert_eq!(deleting.status, "True");
    assert!(
        !is_deleting(metal3_cluster()).await,
        "infrastructure deleted while the control plane remains"
    );
    dynamic(&env.client, &control_plane())
        .patch(
            "gamma",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("the infrastructure cluster to be deleted", || async {
        is_deleting(metal3_cluster()).await.then_some(())
    })
    .await;
    assert!(
        clusters.get_opt("gamma").await.unwrap().is_some(),
        "the Cluster stays until its infrastructure is gone"
    );
    dynamic(&env.client, &metal3_cluster())
        .patch(
            "gamma",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("the Cluster to go", || async {
        clusters
            .get_opt("gamma")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    env.stop().await;
}

async fn create_pod(workload: &Client, name: &str, node: &str, labels: Value, owner: Option<&str>) {
    let pods: Api<Pod> = Api::namespaced(workload.clone(), NS);
    let mut metadata = json!({"name": name, "namespace": NS, "labels": labels});
    if let Some(kind) = owner {
        metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": "agent", "uid": "00000000-0000-0000-0000-000000000001", "controller": true}]);
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_deletion_drains_by_eviction_and_names_the_blocking_pod_until_the_timeout() {
    let env = Env::start().await;
    env.cluster_objects("delta").await;
    env.templates("workers-a", "http://images.example/a.img")
        .await;
    env.deployment("delta", "dpool", 1, "workers-a").await;
    let deployments: Api<MachineDeployment> = Api::namespaced(env.client.clone(), NS);
    // A short drain timeout, so the PDB-blocked Pod holds the Machine only briefly.
    deployments
        .patch("dpool", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"template": {"spec": {"deletion": {"nodeDrainTimeoutSeconds": 4}}}}})))
        .await
        .unwrap();
    let machine = eventually("1 Running Machine with the drain timeout", || async {
        let running = env.running("dpool", 1).await?;
        running.into_iter().find(|m| {
            m.spec
                .deletion
                .as_ref()
                .and_then(|d| d.node_drain_timeout_seconds)
                == Some(4)
        })
    })
    .await;
    let node = machine.name_any();
    create_pod(&env.workload, "web", &node, json!({"app": "web"}), None).await;
    create_pod(
        &env.workload,
        "agent",
        &node,
        json!({"app": "agent"}),
        Some("DaemonSet"),
    )
    .await;
    create_pod(&env.workload, "db", &node, json!({"app": "db"}), None).await;
    let budgets = Api::<DynamicObject>::namespaced_with(
        env.workload.clone(),
        NS,
        &resource(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
        ),
    );
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "db", "namespace": NS},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    budgets
        .patch_status("db", &PatchParams::default(), &Patch::Merge(&json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}})))
        .await
        .unwrap();

    // A pre-drain hook holds the Machine before anything is evicted.
    let hook = "pre-drain.delete.hook.machine.cluster.x-k8s.io/backup";
    env.machines()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {hook: "backup-operator"}}})),
        )
        .await
        .unwrap();
    env.machines()
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.workload.clone(), NS);
    let held = eventually("the pre-drain hook to hold the Machine", || async {
        let m = env.machines().get(&node).await.ok()?;
        m.status?.conditions.into_iter().find(|c| {
            c.type_ == "Deleting" && c.reason.as_deref() == Some("WaitingForPreDrainHook")
        })
    })
    .await;
    assert!(held.message.unwrap_or_default().contains(hook));
    assert!(
        pods.get_opt("web").await.unwrap().is_some(),
        "nothing evicted while the hook holds"
    );
    env.machines()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {hook: null}}})),
        )
        .await
        .unwrap();
    let blocked = eventually(
        "the drain to evict web and name the PDB-blocked db Pod",
        || async {
            let m = env.machines().get(&node).await.ok()?;
            let condition = m
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Deleting")?;
            let message = condition.message.clone()?;
            (message.contains("default/db") && pods.get_opt("web").await.ok()?.is_none())
                .then_some(condition)
        },
    )
    .await;
    assert_eq!(blocked.reason.as_deref(), Some("DrainingNode"));
    assert!(
        blocked
            .message
            .unwrap_or_default()
            .contains("disruption budget")
    );
    let nodes: Api<Node> = Api::all(env.workload.clone());
    assert_eq!(
        nodes.get(&node).await.unwrap().spec.unwrap().unschedulable,
        Some(true),
        "cordoned"
    );
    // The drain timeout passes: the Machine goes on, its Node is deleted; the DaemonSet Pod was never evicted.
    eventually("the Machine to go after the drain timeout", || async {
        env.machines()
            .get_opt(&node)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(nodes.get_opt(&node).await.unwrap().is_none());
    assert!(
        pods.get_opt("agent").await.unwrap().is_some(),
        "DaemonSet Pod left alone"
    );
    assert!(
        pods.get_opt("db").await.unwrap().is_some(),
        "PDB-protected Pod not evicted"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_set_adopts_orphans_and_deletes_marked_machines_first() {
    let env = Env::start().await;
    env.cluster_objects("epsilon").await;
    env.templates("workers-a", "http://images.example/a.img")
        .await;
    // An orphan Machine (with its own provider objects) that the set's selector matches.
    create(
        &env.client,
        &metal3_machine(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Machine",
            "metadata": {"name": "orphan", "namespace": NS},
            "spec": {"image": {"url": "http://images.example/a.img"}},
        }),
    )
    .await;
    create(&env.client, &resource("cluster.x-k8s.io", "v1beta2", "Machine", "machines"), json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "orphan", "namespace": NS, "labels": {"pool": "set"}},
        "spec": {
            "clusterName": "epsilon",
            "bootstrap": {"dataSecretName": "orphan-bootstrap"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": "orphan"},
        },
    }))
    .await;
    create(&env.client, &resource("cluster.x-k8s.io", "v1beta2", "MachineSet", "machinesets"), json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": "set", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "epsilon"}},
        "spec": {
            "clusterName": "epsilon",
            "replicas": 2,
            "deletion": {"order": "Oldest"},
            "selector": {"matchLabels": {"pool": "set"}},
            "template": {
                "metadata": {"labels": {"pool": "set"}},
                "spec": {
                    "clusterName": "epsilon",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "workers"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "workers-a"},
                },
            },
        },
    }))
    .await;
    let sets: Api<MachineSet> = Api::namespaced(env.client.clone(), NS);
    let set_uid = sets.get("set").await.unwrap().uid().unwrap();
    let machines = eventually(
        "the orphan adopted and one Machine made: 2 Running",
        || async {
            let all = env
                .machines()
                .list(&ListParams::default().labels("pool=set"))
                .await
                .ok()?
                .items;
            let owned = all
                .iter()
                .filter(|m| {
                    m.owner_references()
                        .iter()
                        .any(|o| o.uid == set_uid && o.controller == Some(true))
                })
                .count();
            let running = all
                .iter()
                .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (all.len() == 2 && owned == 2 && running == 2).then_some(all)
        },
    )
    .await;
    let made = machines
        .iter()
        .find(|m| m.name_any() != "orphan")
        .unwrap()
        .name_any();
    // Marked for deletion: it goes first, whatever the order says.
    env.machines()
        .patch(&made, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"annotations": {capstan_capi::ANNOTATION_DELETE_MACHINE: ""}}})))
        .await
        .unwrap();
    sets.patch(
        "set",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually("only the orphan to remain", || async {
        let all = env
            .machines()
            .list(&ListParams::default().labels("pool=set"))
            .await
            .ok()?
            .items;
        (all.len() == 1 && all[0].name_any() == "orphan").then_some(())
    })
    .await;
    let status = eventually("the set's status to count 1", || async {
        let s = sets.get("set").await.ok()?.status?;
        (s.replicas == Some(1) && s.ready_replicas == Some(1)).then_some(s)
    })
    .await;
    assert_eq!(status.selector.as_deref(), Some("pool=set"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_set_with_a_missing_template_creates_nothing_and_says_why() {
    let env = Env::start().await;
    env.cluster_objects("zeta").await;
    // The bootstrap template exists; the infrastructure template does not, yet.
    env.templates("zeta-other", "http://images.example/a.img")
        .await;
    create(&env.client, &resource("cluster.x-k8s.io", "v1beta2", "MachineSet", "machinesets"), json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": "lonely", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "zeta"}},
        "spec": {
            "clusterName": "zeta",
            "replicas": 2,
            "selector": {"matchLabels": {"pool": "lonely"}},
            "template": {
                "metadata": {"labels": {"pool": "lonely"}},
                "spec": {
                    "clusterName": "zeta",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "workers"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "lonely-missing"},
                },
            },
        },
    }))
    .await;
    let sets: Api<MachineSet> = Api::namespaced(env.client.clone(), NS);
    let condition = eventually("the set to say why it cannot scale up", || async {
        let status = sets.get("lonely").await.ok()?.status?;
        status.conditions.into_iter().find(|c| {
            c.type_ == capstan_capi::machineset::SCALING_UP
                && c.reason.as_deref() == Some(capstan_capi::machineset::REASON_SCALING_UP_BLOCKED)
        })
    })
    .await;
    let message = condition.message.unwrap_or_default();
    assert!(
        message.contains("Metal3MachineTemplate default/lonely-missing (spec.template.spec.infrastructureRef) does not exist"),
        "{message}"
    );
    // Nothing was made for the Machines that could not be: no bootstrap config, no Machine.
    let of_set = ListParams::default().labels("cluster.x-k8s.io/set-name=lonely");
    let configs = dynamic(&env.client, &kubeadm_config());
    assert!(configs.list(&of_set).await.unwrap().items.is_empty());
    assert!(env.machines().list(&of_set).await.unwrap().items.is_empty());
    // Once the template exists, the set makes its Machines, each with one bootstrap config.
    create(&env.client, &metal3_machine_template(), json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3MachineTemplate",
        "metadata": {"name": "lonely-missing", "namespace": NS},
        "spec": {"template": {"spec": {"image": {"url": "http://images.example/a.img", "checksum": "http://images.example/a.img.sha256", "checksumType": "sha256", "format": "raw"}}}},
    }))
    .await;
    eventually("two Machines, with two bootstrap configs", || async {
        let machines = env.machines().list(&of_set).await.ok()?.items.len();
        let configs = configs.list(&of_set).await.ok()?.items.len();
        (machines == 2 && configs == 2).then_some(())
    })
    .await;
    env.stop().await;
}
