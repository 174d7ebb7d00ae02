//! The Metal3 provider against the embedded API server, in-process, with the real BareMetalHost
//! controller driving `fake://` hosts and a second capstan API server as the workload cluster. The
//! CAPI core and bootstrap parts are played by hand, as their contracts say: the Cluster reports
//! its infrastructure provisioned, each Machine names its bootstrap data Secret.
//!
//! Every wait polls a condition until a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::in_process_client;
use capstan_apiserver::{ApiServer, Auth};
use capstan_hosts::{AgentRegistry, HostController, HostSettings, ServerSettings};
use capstan_infra::{InfraClusterController, InfraMachineController};
use capstan_metal3::{Metal3ClusterProvider, Metal3MachineProvider};
use capstan_model::capm3::v1beta2::{Metal3Cluster, Metal3Machine};
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_store::{Store, StoreOptions};
use capstan_workload::{ClusterKey, WorkloadAccess, WorkloadError};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, Node, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "default";
const BOOTSTRAP: &str =
    "#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm.yaml\n";

/// The workload cluster: every cluster key gets the same in-process API.
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

struct Env {
    _dirs: Vec<tempfile::TempDir>,
    client: Client,
    workload: Client,
    shutdown: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn api_server() -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap();
    (dir, in_process_client(server.router()))
}

async fn start() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let (dir, client) = api_server().await;
    let (workload_dir, workload) = api_server().await;
    let registry = Arc::new(AgentRegistry::new(ServerSettings {
        agent_url: "http://127.0.0.1:1".into(),
        media_url: "http://127.0.0.1:1".into(),
        images_dir: None,
        boot_media: None,
    }));
    let mut settings = HostSettings::new(registry);
    settings.fake_bmc_agents = Arc::new(capstan_hosts::simulated_agent::SimulatedAgents::new(
        Duration::from_millis(10),
    ));
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    let workloads: capstan_workload::SharedWorkloadAccess = Arc::new(OneWorkload(workload.clone()));
    let controller_client = client.clone();
    tokio::spawn(async move {
        capstan_runtime::run(controller_client, options, move || {
            vec![
                controller_task(HostController::new(settings.clone())),
                controller_task(InfraClusterController::new(Metal3ClusterProvider)),
                controller_task(InfraMachineController::new(Metal3MachineProvider::new(
                    Some(workloads.clone()),
                ))),
            ]
        })
        .await
    });
    let env = Env {
        _dirs: vec![dir, workload_dir],
        client,
        workload,
        shutdown,
    };
    create(&env.client, "clusters", json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Cluster", "name": "c1"}},
    }))
    .await;
    // The Cluster controller's part: infrastructure provisioned.
    dynamic(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
    )
    .patch_status(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"initialization": {"infrastructureProvisioned": true}}})),
    )
    .await
    .unwrap();
    env
}

fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), NS, &resource)
}

async fn create(client: &Client, plural: &str, object: Value) -> kube::api::DynamicObject {
    let api = dynamic(
        client,
        object["apiVersion"].as_str().unwrap(),
        object["kind"].as_str().unwrap(),
        plural,
    );
    let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

async fn poll<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_hosts(env: &Env, prefix: &str, count: usize, labels: Value) {
    for i in 0..count {
        let name = format!("{prefix}{i}");
        create(
            &env.client,
            "secrets",
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-bmc"), "namespace": NS},
                "stringData": {"username": "admin", "password": "not-the-real-one"},
            }),
        )
        .await;
        create(&env.client, "baremetalhosts", json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"online": true, "bootMACAddress": format!("52:54:00:00:01:{i:02x}"),
                "bmc": {"address": format!("fake://metal3-{prefix}/{name}"), "credentialsName": format!("{name}-bmc")}},
        }))
        .await;
    }
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    poll("hosts available", || {
        let hosts = hosts.clone();
        async move {
            let list = hosts.list(&ListParams::default()).await.ok()?;
            let ready = list
                .items
                .iter()
                .filter(|h| h.name_any().starts_with(prefix))
                .filter(|h| capstan_metal3::host::state(h) == "available")
                .count();
            (ready == count).then_some(())
        }
    })
    .await;
}

/// A Machine (the CAPI core's part, with its bootstrap Secret) and its Metal3Machine.
async fn create_machine(env: &Env, name: &str, selector: Value) {
    create(
        &env.client,
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": format!("{name}-bootstrap"), "namespace": NS},
            "stringData": {"value": format!("{BOOTSTRAP}# {name}\n"), "format": "cloud-config"},
        }),
    )
    .await;
    let machine = create(&env.client, "machines", json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": format!("{name}-m3m")}},
    }))
    .await;
    create(&env.client, "metal3machines", json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Machine",
        "metadata": {"name": format!("{name}-m3m"), "namespace": NS,
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name, "uid": machine.uid().unwrap()}]},
        "spec": {"image": {"url": "http://images/node.img", "checksum": "a".repeat(64), "checksumType": "sha256", "diskFormat": "raw"},
            "hostSelector": selector, "automatedCleaningMode": "disabled"},
    }))
    .await;
}

fn provisioned(machine: &Metal3Machine) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i["provisioned"].as_bool())
        == Some(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn machines_claim_distinct_hosts_provision_link_nodes_and_release() {
    let env = start().await;
    create_hosts(&env, "h", 3, json!({"role": "worker"})).await;
    create_machine(&env, "m0", json!({"matchLabels": {"role": "worker"}})).await;
    create_machine(
        &env,
        "m1",
        json!({"matchExpressions": [{"key": "role", "operator": "in", "values": ["worker"]}]}),
    )
    .await;
    let machines: Api<Metal3Machine> = Api::namespaced(env.client.clone(), NS);
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);

    let mut used = BTreeSet::new();
    for name in ["m0-m3m", "m1-m3m"] {
        let machine = poll("Metal3Machine provisioned", || {
            let machines = machines.clone();
            async move { machines.get(name).await.ok().filter(provisioned) }
        })
        .await;
        let annotation = machine
            .annotations()
            .get("metal3.io/BareMetalHost")
            .cloned()
            .unwrap();
        let host_name = annotation.split_once('/').unwrap().1.to_owned();
        assert!(
            used.insert(host_name.clone()),
            "host {host_name} claimed twice"
        );
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some(format!("metal3://{NS}/{host_name}/{name}").as_str())
        );
        assert_eq!(machine.status.as_ref().unwrap().ready, Some(true));
        let host = hosts.get(&host_name).await.unwrap();
        assert_eq!(capstan_metal3::host::state(&host), "provisioned");
        assert_eq!(
            host.spec
                .consumer_ref
                .as_ref()
                .and_then(|r| r.name.as_deref()),
            Some(name)
        );
        assert_eq!(
            host.spec.image.as_ref().unwrap().url,
            "http://images/node.img"
        );
        assert_eq!(
            host.spec.image.as_ref().unwrap().format.as_deref(),
            Some("raw")
        );
        assert_eq!(
            host.spec.automated_cleaning_mode.as_deref(),
            Some("disabled")
        );
        let user_data = host
            .spec
            .user_data
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap();
        let secret = secrets.get(&user_data).await.unwrap();
        let value = String::from_utf8(secret.data.unwrap()["userData"].0.clone()).unwrap();
        let machine_name = name.trim_end_matches("-m3m");
        assert_eq!(value, format!("{BOOTSTRAP}# {machine_name}\n"));
        let meta = secrets
            .get(
                host.spec
                    .meta_data
                    .as_ref()
                    .and_then(|r| r.name.as_deref())
                    .unwrap(),
            )
            .await
            .unwrap();
        let meta: Value = serde_json::from_slice(&meta.data.unwrap()["metaData"].0).unwrap();
        assert_eq!(meta["metal3-name"], host_name.as_str());
        assert_eq!(meta["metal3-namespace"], NS);

        // The kubelet registers the Node labelled with the host's uid; the provider sets providerID.
        let nodes: Api<Node> = Api::all(env.workload.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{host_name}"), "labels": {"metal3.io/uuid": host.uid().unwrap()}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let want = machine.spec.provider_id.clone().unwrap();
        poll("Node providerID", || {
            let nodes = nodes.clone();
            let want = want.clone();
            let node_name = format!("node-{host_name}");
            async move {
                let node = nodes.get(&node_name).await.ok()?;
                (node.spec?.provider_id? == want).then_some(())
            }
        })
        .await;
    }
    assert_eq!(used.len(), 2);

    // Deletion deprovisions and releases the host back to the pool.
    let m0 = machines.get("m0-m3m").await.unwrap();
    let host_name = m0.annotations()["metal3.io/BareMetalHost"]
        .split_once('/')
        .unwrap()
        .1
        .to_owned();
    machines
        .delete("m0-m3m", &DeleteParams::default())
        .await
        .unwrap();
    poll("Metal3Machine gone", || {
        let machines = machines.clone();
        async move {
            machines
                .get_opt("m0-m3m")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    let host = hosts.get(&host_name).await.unwrap();
    assert!(
        host.spec.consumer_ref.is_none(),
        "{host_name} still consumed"
    );
    assert!(host.spec.image.is_none() && host.spec.user_data.is_none());
    assert_eq!(capstan_metal3::host::state(&host), "available");
    assert!(secrets.get_opt("m0-m3m-user-data").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_machines_race_for_five_hosts() {
    let env = start().await;
    create_hosts(&env, "r", 5, json!({"pool": "race"})).await;
    let creations = (0..10).map(|i| {
        let env = &env;
        async move {
            create_machine(
                env,
                &format!("race{i}"),
                json!({"matchLabels": {"pool": "race"}}),
            )
            .await
        }
    });
    futures::future::join_all(creations).await;
    let machines: Api<Metal3Machine> = Api::namespaced(env.client.clone(), NS);
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    // Five provisioned, five told there is no host.
    let list = poll("5 provisioned and 5 without a host", || {
        let machines = machines.clone();
        async move {
            let list = machines.list(&ListParams::default()).await.ok()?.items;
            let done = list.iter().filter(|m| provisioned(m)).count();
            let waiting = list
                .iter()
                .filter(|m| {
                    m.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.reason.as_deref() == Some("NoAvailableHost"))
                    })
                })
                .count();
            (done == 5 && waiting == 5).then_some(list)
        }
    })
    .await;
    let claimed: Vec<String> = list
        .iter()
        .filter(|m| provisioned(m))
        .map(|m| m.annotations()["metal3.io/BareMetalHost"].clone())
        .collect();
    let distinct: BTreeSet<&String> = claimed.iter().collect();
    assert_eq!(distinct.len(), 5, "a host was claimed twice: {claimed:?}");
    let consumers: BTreeSet<String> = hosts
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|h| h.spec.consumer_ref.as_ref()?.name.clone())
        .collect();
    assert_eq!(consumers.len(), 5);
    let waiting = list.iter().find(|m| !provisioned(m)).unwrap();
    let message = waiting
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(message.contains("matchLabels {pool=race}"), "{message}");
    assert!(
        message.contains("(5 BareMetalHosts in namespace")
            && message.contains("5 matching: 0 available, 5 claimed)"),
        "{message}"
    );
    // Upstream's condition says the same.
    let associate = waiting
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "AssociateBareMetalHost")
        .unwrap();
    assert_eq!(associate.status, "False");
    assert_eq!(
        associate.reason.as_deref(),
        Some("AssociateBareMetalHostFailed")
    );
    assert_eq!(associate.message.as_deref(), Some(message.as_str()));

    // Freeing one host lets a waiting machine take it.
    let freed = list.iter().find(|m| provisioned(m)).unwrap().name_any();
    machines
        .delete(&freed, &DeleteParams::default())
        .await
        .unwrap();
    poll("a waiting machine provisioned on the freed host", || {
        let machines = machines.clone();
        async move {
            let list = machines.list(&ListParams::default()).await.ok()?.items;
            (list.iter().filter(|m| provisioned(m)).count() == 5 && list.len() == 9).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_selector_matching_nothing_is_explained() {
    let env = start().await;
    create_hosts(&env, "s", 1, json!({"role": "worker"})).await;
    create_machine(&env, "lonely", json!({"matchLabels": {"role": "gpu"}})).await;
    let machines: Api<Metal3Machine> = Api::namespaced(env.client.clone(), NS);
    let message = poll("NoAvailableHost", || {
        let machines = machines.clone();
        async move {
            let machine = machines.get("lonely-m3m").await.ok()?;
            let ready = machine
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.reason.as_deref() == Some("NoAvailableHost")).then_some(ready.message?)
        }
    })
    .await;
    assert!(message.contains("matchLabels {role=gpu}"), "{message}");
    assert!(message.contains("change spec.hostSelector"), "{message}");
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    poll("NoAvailableHost Event", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?.items;
            list.iter()
                .any(|e| {
                    e.reason.as_deref() == Some("NoAvailableHost")
                        && e.message.as_deref().is_some_and(|m| m.contains("role=gpu"))
                })
                .then_some(())
        }
    })
    .await;
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    assert!(hosts.get("s0").await.unwrap().spec.consumer_ref.is_none());

    // The Metal3Cluster of the cluster: provisioned once it has an endpoint.
    let cluster = dynamic(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
    )
    .get("c1")
    .await
    .unwrap();
    create(&env.client, "metal3clusters", json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Cluster",
        "metadata": {"name": "c1", "namespace": NS,
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": cluster.uid().unwrap()}]},
        "spec": {"controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443}},
    }))
    .await;
    let clusters: Api<Metal3Cluster> = Api::namespaced(env.client.clone(), NS);
    poll("Metal3Cluster provisioned", || {
        let clusters = clusters.clone();
        async move {
            let status = clusters.get("c1").await.ok()?.status?;
            (status.initialization?["provisioned"] == true && status.ready == Some(true))
                .then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_made_before_a_restart_is_found_again_not_repeated() {
    let env = start().await;
    create_hosts(&env, "k", 2, json!({"role": "worker"})).await;
    // The machine cannot claim anything yet (its selector matches nothing)...
    create_machine(&env, "again", json!({"matchLabels": {"role": "none"}})).await;
    let machines: Api<Metal3Machine> = Api::namespaced(env.client.clone(), NS);
    poll("NoAvailableHost", || {
        let machines = machines.clone();
        async move {
            let machine = machines.get("again-m3m").await.ok()?;
            machine
                .status?
                .conditions
                .iter()
                .any(|c| c.reason.as_deref() == Some("NoAvailableHost"))
                .then_some(())
        }
    })
    .await;
    // ...then a previous run's claim of k1 (consumerRef written, annotation not yet) appears, and
    // the selector widens to both hosts: the machine must take k1 back, not claim k0 as well.
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    let machine = machines.get("again-m3m").await.unwrap();
    let claim = json!({"spec": {"consumerRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Machine",
        "name": "again-m3m", "namespace": NS, "uid": machine.uid()}}});
    hosts
        .patch("k1", &PatchParams::default(), &Patch::Merge(&claim))
        .await
        .unwrap();
    machines
        .patch(
            "again-m3m",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"hostSelector": {"matchLabels": {"role": "worker"}}}})),
        )
        .await
        .unwrap();
    let machine = poll("provisioned on k1", || {
        let machines = machines.clone();
        async move { machines.get("again-m3m").await.ok().filter(provisioned) }
    })
    .await;
    assert_eq!(
        machine.annotations()["metal3.io/BareMetalHost"],
        format!("{NS}/k1")
    );
    assert!(
        hosts.get("k0").await.unwrap().spec.consumer_ref.is_none(),
        "k0 was claimed as well"
    );
}
