//! The simulated workload backend against the embedded API server, in-process, with the real
//! BareMetalHost controller provisioning `fake://` hosts. The Metal3 claim and the kubeadm bootstrap
//! data are played by hand: hosts are labelled with their cluster and given a CABPK-shaped
//! cloud-config written here.
//!
//! Every wait polls a condition until a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::in_process_client;
use capstan_apiserver::{ApiServer, Auth};
use capstan_hosts::{AgentRegistry, HostController, HostSettings, ServerSettings};
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_sim::{SimSettings, Simulator};
use capstan_store::{Store, StoreOptions};
use capstan_workload::{ClusterKey, EtcdMembership, WorkloadAccess};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "default";
const TOKEN: &str = "abcdef.0123456789abcdef";

fn init_data() -> String {
    format!(
        r#"## template: jinja
#cloud-config
write_files:
- path: /etc/kubernetes/pki/ca.key
  owner: root:root
  permissions: '0600'
  content: |
    (not a key)
- path: /run/kubeadm/kubeadm.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: ClusterConfiguration
    clusterName: c1
    kubernetesVersion: v1.30.2
    controlPlaneEndpoint: 192.0.2.10:6443
    ---
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: InitConfiguration
    bootstrapTokens:
    - token: {TOKEN}
    nodeRegistration:
      name: '{{{{ ds.meta_data.name }}}}'
      kubeletExtraArgs:
        node-labels: 'metal3.io/uuid={{{{ ds.meta_data.uuid }}}}'
runcmd:
- 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
"#
    )
}

fn join_data(token: &str, provider_id: &str) -> String {
    format!(
        r#"## template: jinja
#cloud-config
write_files:
- path: /run/kubeadm/kubeadm.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: JoinConfiguration
    discovery:
      bootstrapToken:
        apiServerEndpoint: 192.0.2.10:6443
        token: {token}
        caCertHashes: [sha256:0000]
    nodeRegistration:
      name: '{{{{ ds.meta_data.name }}}}'
      kubeletExtraArgs:
      - name: node-labels
        value: 'metal3.io/uuid={{{{ ds.meta_data.uuid }}}},pool=md-0'
      - name: provider-id
        value: {provider_id}
runcmd:
- 'kubeadm join --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'
"#
    )
}

struct Env {
    _dir: tempfile::TempDir,
    client: Client,
    sim: Arc<Simulator>,
    shutdown: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> Env {
    start_with(None).await
}

async fn start_with(state_dir: Option<std::path::PathBuf>) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap();
    let client = in_process_client(server.router());
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
    let sim = Simulator::new(
        client.clone(),
        SimSettings {
            state_dir,
            listen: true,
        },
    );
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    let controller_client = client.clone();
    let boot = sim.clone();
    tokio::spawn(async move {
        capstan_runtime::run(controller_client, options, move || {
            vec![
                controller_task(HostController::new(settings.clone())),
                boot.boot_task(),
                boot.kvm_boot_task(),
                boot.reaper_task(),
            ]
        })
        .await
    });
    Env {
        _dir: dir,
        client,
        sim,
        shutdown,
    }
}

async fn create(client: &Client, api_version: &str, kind: &str, plural: &str, object: Value) {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
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

/// A host claimed for cluster c1 and provisioned with `user_data` (what Metal3 would do).
async fn host(env: &Env, name: &str, user_data: &str, annotations: Value) {
    let secret = |name: String, data: Value| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "stringData": data});
    create(
        &env.client,
        "v1",
        "Secret",
        "secrets",
        secret(
            format!("{name}-bmc"),
            json!({"username": "u", "password": "p"}),
        ),
    )
    .await;
    create(
        &env.client,
        "v1",
        "Secret",
        "secrets",
        secret(format!("{name}-user-data"), json!({"userData": user_data})),
    )
    .await;
    create(&env.client, "metal3.io/v1alpha1", "BareMetalHost", "baremetalhosts", json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}, "annotations": annotations},
        "spec": {"online": true, "bmc": {"address": format!("fake://sim/{name}"), "credentialsName": format!("{name}-bmc")},
            "image": {"url": "http://images/node.img", "checksum": "b".repeat(64), "checksumType": "sha256", "format": "raw"},
            "userData": {"name": format!("{name}-user-data"), "namespace": NS}},
    }))
    .await;
}

/// The cluster's CA (what KubeadmControlPlane writes) and an admin client certificate it signed.
fn cluster_ca() -> (String, String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_ca_cert_pem(
        &ca.pem(),
        KeyPair::from_pem(&ca_key.serialize_pem()).unwrap(),
    )
    .unwrap();
    let admin_key = KeyPair::generate().unwrap();
    let mut admin = CertificateParams::new(Vec::<String>::new()).unwrap();
    admin
        .distinguished_name
        .push(DnType::CommonName, "kubernetes-admin");
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let admin_cert = admin.signed_by(&admin_key, &issuer).unwrap();
    (
        ca.pem(),
        ca_key.serialize_pem(),
        admin_cert.pem(),
        admin_key.serialize_pem(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn init_and_join_register_nodes_and_a_missing_token_is_refused() {
    let env = start().await;
    let (ca_cert, ca_key, admin_cert, admin_key) = cluster_ca();
    create(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443}},
        }),
    )
    .await;
    create(
        &env.client,
        "v1",
        "Secret",
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "c1-ca", "namespace": NS},
            "stringData": {"tls.crt": ca_cert, "tls.key": ca_key},
        }),
    )
    .await;
    host(&env, "cp0", &init_data(), json!({})).await;
    host(
        &env,
        "w0",
        &join_data(TOKEN, "metal3://default/w0/w0-m3m"),
        json!({}),
    )
    .await;
    host(
        &env,
        "w1",
        &join_data("zzzzzz.0000000000000000", "metal3://default/w1/w1-m3m"),
        json!({}),
    )
    .await;
    host(
        &env,
        "w2",
        &join_data(TOKEN, "metal3://default/w2/w2-m3m"),
        json!({"sim.capstan.io/fault": "never-join"}),
    )
    .await;
    host(
        &env,
        "w3",
        &join_data(TOKEN, "metal3://default/w3/w3-m3m"),
        json!({"sim.capstan.io/fault": "bootstrap-fail"}),
    )
    .await;

    let key = ClusterKey::new(NS, "c1");
    let workload = poll("workload API", || {
        let sim = env.sim.clone();
        let key = key.clone();
        async move { sim.client(&key).await.ok() }
    })
    .await;
    let nodes: Api<Node> = Api::all(workload.clone());
    let hosts: Api<BareMetalHost> = Api::namespaced(env.client.clone(), NS);
    let list = poll("two Ready Nodes", || {
        let nodes = nodes.clone();
        async move {
            let list = nodes.list(&ListParams::default()).await.ok()?.items;
            let ready = list
                .iter()
                .filter(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count();
            (ready == 2).then_some(list)
        }
    })
    .await;
    let cp0 = list.iter().find(|n| n.name_any() == "cp0").unwrap();
    let w0 = list.iter().find(|n| n.name_any() == "w0").unwrap();
    let uid = |name: &str| {
        let hosts = hosts.clone();
        let name = name.to_owned();
        async move { hosts.get(&name).await.unwrap().uid().unwrap() }
    };
    assert_eq!(cp0.labels()["metal3.io/uuid"], uid("cp0").await);
    assert!(
        cp0.labels()
            .contains_key("node-role.kubernetes.io/control-plane")
    );
    assert_eq!(w0.labels()["metal3.io/uuid"], uid("w0").await);
    assert_eq!(w0.labels()["pool"], "md-0");
    assert!(
        !w0.labels()
            .contains_key("node-role.kubernetes.io/control-plane")
    );
    assert_eq!(
        w0.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("metal3://default/w0/w0-m3m")
    );
    assert!(cp0.spec.as_ref().unwrap().provider_id.is_none());
    let config = Api::<ConfigMap>::namespaced(workload.clone(), "kube-system")
        .get("kubeadm-config")
        .await
        .unwrap();
    eprintln!(
        "CONFIG {:?} W0 {}",
        config.data,
        serde_json::to_string(&w0.status).unwrap_or_default()
    );
    for node in [cp0, w0] {
        let ready = node
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(
            node.status
                .as_ref()
                .unwrap()
                .node_info
                .as_ref()
                .unwrap()
                .kubelet_version,
            "v1.30.2"
        );
    }

    // What kubeadm init leaves behind for KubeadmControlPlane.
    let pods: Vec<String> = Api::<Pod>::namespaced(workload.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    for component in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
    ] {
        assert!(pods.contains(&format!("{component}-cp0")), "{pods:?}");
    }
    let config = Api::<ConfigMap>::namespaced(workload.clone(), "kube-system")
        .get("kubeadm-config")
        .await
        .unwrap();
    assert!(config.data.unwrap()["ClusterConfiguration"].contains("kubernetesVersion: v1.30.2"));
    let members = env.sim.members(&key).await.unwrap();
    assert_eq!(members.len(), 1);
    assert!(members[0].name == "cp0" && members[0].leader && members[0].healthy);

    // The join with an unknown token is refused, visibly, and registers nothing.
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    let refusal = poll("JoinRefused", || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("JoinRefused")
                        && e.involved_object.name.as_deref() == Some("w1")
                })
        }
    })
    .await;
    let message = refusal.message.unwrap_or_default();
    assert!(message.contains("\"zzzzzz\""), "{message}");
    assert!(
        !message.contains("0000000000000000"),
        "the token secret leaked: {message}"
    );
    assert!(nodes.get_opt("w1").await.unwrap().is_none());
    assert!(
        nodes.get_opt("w2").await.unwrap().is_none(),
        "a never-join node joined"
    );

    // kubectl's way in: the loopback HTTPS listener with a certificate from the cluster CA.
    let url = poll("api-url annotation", || {
        let client = env.client.clone();
        async move {
            let resource =
                kube::api::ApiResource::erase::<capstan_model::capi::v1beta2::Cluster>(&());
            let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
            api.get("c1")
                .await
                .ok()?
                .annotations()
                .get("sim.capstan.io/api-url")
                .cloned()
        }
    })
    .await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca_cert = cluster_ca_pem(&env).await;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c1\n  context: {{cluster: c1, user: admin}}\ncurrent-context: c1\n",
        b64(&ca_cert),
        b64(&admin_cert),
        b64(&admin_key),
    );
    let remote = capstan_workload::client_from_kubeconfig_bytes(kubeconfig.as_bytes())
        .await
        .unwrap();
    let names: Vec<String> = Api::<Node>::all(remote)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // A bootstrap step that fails: visible as an Event, no Node.
    poll("BootstrapFailed", || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("BootstrapFailed")
                        && e.involved_object.name.as_deref() == Some("w3")
                })
        }
    })
    .await;
    assert!(nodes.get_opt("w3").await.unwrap().is_none());

    // A node going NotReady, as when its kubelet stops.
    hosts
        .patch(
            "w0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &json!({"metadata": {"annotations": {"sim.capstan.io/fault": "not-ready"}}}),
            ),
        )
        .await
        .unwrap();
    poll("w0 NotReady", || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get("w0").await.ok()?;
            node.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown")
                .then_some(())
        }
    })
    .await;
}

async fn cluster_ca_pem(env: &Env) -> String {
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), NS)
        .get("c1-ca")
        .await
        .unwrap();
    String::from_utf8(secret.data.unwrap()["tls.crt"].0.clone()).unwrap()
}

/// A VM placed on a real hypervisor boots by itself: its cluster's workload API must be served on
/// the endpoint's port before the guest runs `kubeadm`, as for a host with a real BMC. (Before,
/// only hosts with a real BMC got it, and a cluster of real VMs had no API to join.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vm_placed_on_a_real_hypervisor_gets_its_cluster_api_served_on_the_endpoint() {
    let env = start().await;
    let (ca_cert, ca_key, _, _) = cluster_ca();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    create(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"controlPlaneEndpoint": {"host": "10.0.2.2", "port": port}},
        }),
    )
    .await;
    create(
        &env.client,
        "v1",
        "Secret",
        "secrets",
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": "c1-ca", "namespace": NS},
            "stringData": {"tls.crt": ca_cert, "tls.key": ca_key},
        }),
    )
    .await;
    create(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Machine",
        "machines",
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "cp-0", "namespace": NS},
            "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "cp-0-bootstrap"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": "cp-0"}},
        }),
    )
    .await;
    let machine = Api::<DynamicObject>::namespaced_with(
        env.client.clone(),
        NS,
        &kube::api::ApiResource::erase::<capstan_model::capi::v1beta2::Machine>(&()),
    )
    .get("cp-0")
    .await
    .unwrap();
    create(
        &env.client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMMachine",
        "kvmmachines",
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachine",
            "metadata": {"name": "cp-0", "namespace": NS, "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "cp-0",
                "uid": machine.uid().unwrap()}]},
            "spec": {"image": {"url": "file:///images/node.qcow2", "checksum": "c".repeat(64)}},
        }),
    )
    .await;
    let vms: Api<capstan_model::kvm::v1beta2::KVMMachine> = Api::namespaced(env.client.clone(), NS);
    let cluster_api = Api::<DynamicObject>::namespaced_with(
        env.client.clone(),
        NS,
        &kube::api::ApiResource::erase::<capstan_model::capi::v1beta2::Cluster>(&()),
    );
    // Not placed yet: nothing is served.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "something listens on the endpoint port before the VM is placed"
    );
    // Placed on a real hypervisor (what the KVM provider records before it builds the VM).
    vms.patch_status(
        "cp-0",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            &json!({"status": {"hypervisor": "hv1", "hypervisorURI": "qemu:///system"}}),
        ),
    )
    .await
    .unwrap();
    let url = poll("the workload API on the endpoint's port", || {
        let api = cluster_api.clone();
        async move {
            api.get("c1")
                .await
                .ok()?
                .annotations()
                .get("sim.capstan.io/api-url")
                .cloned()
        }
    })
    .await;
    assert_eq!(url, format!("https://127.0.0.1:{port}"));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "no listener on the endpoint port"
    );
    // Nothing is played for a real VM: no Node appears, the guest registers its own.
    let workload = env.sim.client(&ClusterKey::new(NS, "c1")).await.unwrap();
    let nodes = Api::<Node>::all(workload)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(nodes.items.is_empty(), "a Node was simulated for a real VM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_clusters_simulation_stops_and_its_store_is_removed() {
    let state = tempfile::tempdir().unwrap();
    let env = start_with(Some(state.path().to_path_buf())).await;
    let cluster = |name: &str| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": name, "namespace": NS}, "spec": {"paused": false}})
    };
    create(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        cluster("gone"),
    )
    .await;
    create(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        cluster("kept"),
    )
    .await;
    let gone = ClusterKey {
        namespace: NS.into(),
        name: "gone".into(),
    };
    let kept = ClusterKey {
        namespace: NS.into(),
        name: "kept".into(),
    };
    env.sim.start_cluster(&gone).await.unwrap();
    env.sim.start_cluster(&kept).await.unwrap();
    let stores = |name: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(state.path().join(NS).join(name))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        stores("gone").len(),
        1,
        "the simulation keeps its store under its Cluster's uid"
    );

    let resource = kube::api::ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let clusters: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &resource);
    clusters.delete("gone", &Default::default()).await.unwrap();
    poll(
        "the deleted Cluster's simulation to stop and its store to go",
        || async { (env.sim.cluster(&gone).is_none() && stores("gone").is_empty()).then_some(()) },
    )
    .await;
    assert!(
        env.sim.cluster(&kept).is_some(),
        "another Cluster's simulation goes on"
    );
    assert_eq!(stores("kept").len(), 1);

    // A store left by a Cluster deleted while nothing watched is removed after the next list.
    let orphan = state.path().join(NS).join("kept").join("0000-old-uid");
    std::fs::create_dir_all(&orphan).unwrap();
    env.shutdown.cancel();
    let again = start_with(Some(state.path().to_path_buf())).await;
    // The new run lists the Clusters of its own (empty) API: both stores are unknown there.
    poll(
        "stores of Clusters the API does not list to be removed",
        || async { (!orphan.exists() && stores("kept").is_empty()).then_some(()) },
    )
    .await;
    drop(again);
}
