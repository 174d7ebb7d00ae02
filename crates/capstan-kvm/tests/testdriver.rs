//! The KVM provider against the embedded API server, in-process, and libvirt's own `test:///`
//! driver: a real libvirt driver (the same API, domains, pools, volumes and errors) that simulates
//! hypervisors, so scale, a full hypervisor, an unreachable one and restarts are cheap to show.
//! Custom hypervisors are node descriptions in files (`test:///PATH`), with the CPUs and memory a
//! test wants. The CAPI core and bootstrap parts are played by hand, as their contracts say: the
//! Cluster reports its infrastructure provisioned, each Machine names its bootstrap data Secret.
//!
//! Every wait polls a condition until a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_kvm::Driver;
use capstan_kvm::machine::{NAME_PREFIX, domain_name};
use capstan_model::kvm::v1beta2::{KVMCluster, KVMMachine};
use capstan_runtime::{CancellationToken, RunOptions};
use capstan_store::{Store, StoreOptions};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::Digest;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);
const BOOTSTRAP: &str =
    "#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm.yaml\n";

struct Env {
    dir: tempfile::TempDir,
    client: Client,
    driver: Arc<Driver>,
    shutdown: CancellationToken,
    namespace: String,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A simulated hypervisor with `cpus` CPUs and `memory_mib` of memory, its pool called `default`.
fn hypervisor_file(dir: &Path, name: &str, cpus: u32, memory_mib: u64) -> String {
    let path = dir.join(format!("{name}.xml"));
    std::fs::write(
        &path,
        format!(
            "<node><cpu><mhz>2000</mhz><model>capstan</model><nodes>1</nodes><sockets>1</sockets><cores>{cpus}</cores><threads>1</threads></cpu>\
<memory>{}</memory>\
<pool type='dir'><name>default</name><uuid>35bb2ad9-388a-cdfe-461a-b8907f6e53fe</uuid><target><path>/{name}-pool</path></target></pool>\
<network><name>default</name><uuid>004b96e1-2d78-c30f-5aa5-f03c87d21e69</uuid><bridge name='virbr0'/><forward/>\
<ip address='192.168.122.1' netmask='255.255.255.0'/></network></node>",
            memory_mib * 1024
        ),
    )
    .unwrap();
    format!("test://{}", path.display())
}

fn start_controllers(client: &Client, driver: Arc<Driver>) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    let client = client.clone();
    tokio::spawn(async move {
        capstan_runtime::run(client, options, move || {
            capstan_kvm::controllers(driver.clone(), None)
        })
        .await
    });
    shutdown
}

async fn start(namespace: &str) -> Env {
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
    let driver = Driver::new();
    let shutdown = start_controllers(&client, driver.clone());
    create(
        &client,
        "v1",
        "Namespace",
        "namespaces",
        None,
        json!({"metadata": {"name": namespace}}),
    )
    .await;
    Env {
        dir,
        client,
        driver,
        shutdown,
        namespace: namespace.to_owned(),
    }
}

fn api(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
    mut object: Value,
) -> kube::api::DynamicObject {
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
    api(client, api_version, kind, plural, namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
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

fn owner(kind: &str, object: &kube::api::DynamicObject) -> Value {
    json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": object.name_any(), "uid": object.uid().unwrap()}])
}

/// A Cluster whose infrastructure is KVMCluster `name` with `hypervisors`, provisioned as the
/// Cluster controller would report it.
async fn cluster(env: &Env, name: &str, hypervisors: Value) {
    let ns = Some(env.namespace.as_str());
    let cluster = create(&env.client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters", ns, json!({
        "metadata": {"name": name},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": name}},
    }))
    .await;
    api(
        &env.client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        ns,
    )
    .patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"initialization": {"infrastructureProvisioned": true}}})),
    )
    .await
    .unwrap();
    create(&env.client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMCluster", "kvmclusters", ns, json!({
        "metadata": {"name": name, "ownerReferences": owner("Cluster", &cluster), "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {"controlPlaneEndpoint": {"host": "192.168.122.5", "port": 6443}, "hypervisors": hypervisors,
                 "dnsServers": ["192.168.122.1"], "ntpServers": ["192.168.122.1"]},
    }))
    .await;
}

/// A Machine of `cluster` with bootstrap data, and its KVMMachine with `spec`.
async fn machine(env: &Env, cluster: &str, name: &str, spec: Value) {
    let ns = Some(env.namespace.as_str());
    create(
        &env.client,
        "v1",
        "Secret",
        "secrets",
        ns,
        json!({
            "metadata": {"name": format!("{name}-bootstrap")},
            "stringData": {"value": BOOTSTRAP, "format": "cloud-config"},
        }),
    )
    .await;
    let owner_machine = create(&env.client, "cluster.x-k8s.io/v1beta2", "Machine", "machines", ns, json!({
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": name}},
    }))
    .await;
    create(&env.client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMMachine", "kvmmachines", ns, json!({
        "metadata": {"name": name, "ownerReferences": owner("Machine", &owner_machine), "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": spec,
    }))
    .await;
}

fn image(env: &Env) -> Value {
    let path = env.dir.path().join("base.qcow2");
    let bytes = b"QFI\xfb not a real image: the test hypervisor has no data path".to_vec();
    std::fs::write(&path, &bytes).unwrap();
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    json!({"url": format!("file://{}", path.display()), "checksum": digest})
}

async fn kvm_machine(env: &Env, name: &str) -> Option<KVMMachine> {
    Api::<KVMMachine>::namespaced(env.client.clone(), &env.namespace)
        .get_opt(name)
        .await
        .unwrap()
}

fn ready(machine: &KVMMachine) -> Option<(bool, String, String)> {
    let status = machine.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((
        condition.status == "True",
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

async fn wait_provisioned(env: &Env, name: &str) -> KVMMachine {
    // Shows the machine's status, which says why, when the wait is about to fail.
    let deadline = Instant::now() + WAIT;
    poll(&format!("KVMMachine {name} provisioned"), || async {
        let machine = kvm_machine(env, name).await?;
        if Instant::now() + Duration::from_millis(200) > deadline {
            panic!(
                "KVMMachine {name} not provisioned: {}",
                serde_json::to_string(&machine.status).unwrap()
            );
        }
        let provisioned = machine
            .status
            .as_ref()?
            .initialization
            .as_ref()?
            .get("provisioned")?
            .as_bool()?;
        provisioned.then_some(machine)
    })
    .await
}

async fn wait_reason(env: &Env, name: &str, reason: &str) -> String {
    let deadline = Instant::now() + WAIT;
    poll(
        &format!("KVMMachine {name} Ready reason {reason}"),
        || async {
            let machine = kvm_machine(env, name).await?;
            if Instant::now() + Duration::from_millis(200) > deadline {
                panic!(
                    "KVMMachine {name} has no Ready reason {reason}: {}",
                    serde_json::to_string(&machine.status).unwrap()
                );
            }
            let (_, actual, message) = ready(&machine)?;
            (actual == reason).then_some(message)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_spread_over_hypervisors_and_leave_nothing_behind() {
    let env = start("spread").await;
    let hv1 = hypervisor_file(env.dir.path(), "hv1", 16, 32 << 10);
    let hv2 = hypervisor_file(env.dir.path(), "hv2", 16, 32 << 10);
    cluster(
        &env,
        "c1",
        json!([{"name": "hv1", "uri": hv1}, {"name": "hv2", "uri": hv2}]),
    )
    .await;
    let image = image(&env);
    const COUNT: usize = 6;
    for i in 0..COUNT {
        machine(&env, "c1", &format!("m{i}"), json!({
            "resources": {"cpu": 2, "memory": "4Gi", "disk": "20Gi", "dockerVolumeSize": "5Gi"},
            "image": image,
            "volumes": [{"name": "etcd", "size": "2Gi", "mountPath": "/var/lib/etcd"}],
            "networks": [{"network": "default", "address": format!("192.168.122.{}/24", 10 + i), "gateway": "192.168.122.1"}],
        }))
        .await;
    }
    let mut per_hypervisor = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..COUNT {
        let machine = wait_provisioned(&env, &format!("m{i}")).await;
        let status = machine.status.clone().unwrap();
        let hypervisor = status.hypervisor.clone().unwrap();
        let uuid = machine.uid().unwrap();
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some(format!("libvirt://{hypervisor}/{uuid}").as_str())
        );
        assert_eq!(status.failure_domain.as_deref(), Some(hypervisor.as_str()));
        assert_eq!(status.domain_state.as_deref(), Some("running"));
        assert_eq!(status.domain_uuid.as_deref(), Some(uuid.as_str()));
        let addresses = status.addresses.clone().unwrap();
        assert_eq!(
            addresses[0],
            json!({"type": "InternalIP", "address": format!("192.168.122.{}", 10 + i)})
        );
        *per_hypervisor.entry(hypervisor).or_default() += 1;
    }
    // 4Gi each on two 32Gi hypervisors, placed on the one with most free memory: spread evenly.
    assert_eq!(
        per_hypervisor.values().copied().collect::<Vec<_>>(),
        vec![COUNT / 2, COUNT / 2],
        "{per_hypervisor:?}"
    );
    for uri in [&hv1, &hv2] {
        let domains = env.driver.domains(uri, NAME_PREFIX).await.unwrap();
        assert_eq!(domains.len(), COUNT / 2, "{domains:?}");
        let volumes = env
            .driver
            .volumes(uri, "default", NAME_PREFIX)
            .await
            .unwrap();
        // One base image, and per machine: root, docker, etcd, cidata.
        assert_eq!(volumes.len(), 1 + 4 * COUNT / 2, "{volumes:?}");
        assert_eq!(volumes.iter().filter(|v| v.contains("-base-")).count(), 1);
    }
    // Asking again changes nothing: the controller's next passes found everything by name.
    let machines: Api<KVMMachine> = Api::namespaced(env.client.clone(), &env.namespace);
    for i in 0..COUNT {
        machines
            .delete(&format!("m{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    poll("every KVMMachine gone", || async {
        machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    for uri in [&hv1, &hv2] {
        assert!(
            env.driver
                .domains(uri, NAME_PREFIX)
                .await
                .unwrap()
                .is_empty()
        );
        let volumes = env
            .driver
            .volumes(uri, "default", NAME_PREFIX)
            .await
            .unwrap();
        assert_eq!(
            volumes.len(),
            1,
            "only the base image stays, as the pool's cache: {volumes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hypervisor_faults_are_conditions_that_say_what_to_do() {
    let env = start("faults").await;
    let small = hypervisor_file(env.dir.path(), "small", 2, 512);
    cluster(
        &env,
        "c1",
        json!([
            {"name": "small", "uri": small},
            {"name": "gone", "uri": "qemu+tcp://127.0.0.1:1/system"},
        ]),
    )
    .await;
    // Too big for the small one; the other does not answer.
    machine(
        &env,
        "c1",
        "big",
        json!({"resources": {"cpu": 1, "memory": "1Gi", "disk": "1Gi"}}),
    )
    .await;
    let message = wait_reason(&env, "big", "NoHypervisorFits").await;
    assert!(
        message.contains("small: 1024 MiB of memory asked, 512 MiB free"),
        "{message}"
    );
    assert!(
        message.contains("gone: cannot connect to hypervisor qemu+tcp://127.0.0.1:1/system"),
        "{message}"
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    poll("a NoHypervisorFits Event", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("NoHypervisorFits"))
            .then_some(())
    })
    .await;
    // A wrong checksum: refused before anything is made.
    let mut image = image(&env);
    image["checksum"] = json!("0".repeat(64));
    machine(
        &env,
        "c1",
        "badimage",
        json!({"resources": {"cpu": 1, "memory": "128Mi", "disk": "1Gi"}, "image": image}),
    )
    .await;
    let message = wait_reason(&env, "badimage", "ImageChecksumMismatch").await;
    assert!(
        message.contains("fix the checksum or the image"),
        "{message}"
    );
    assert!(
        env.driver
            .domains(&small, NAME_PREFIX)
            .await
            .unwrap()
            .is_empty()
    );
    // A bad size is refused by the API server, naming the field, and never stored.
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachine",
        "metadata": {"name": "badsize"}, "spec": {"resources": {"memory": "lots"}}}))
    .unwrap();
    let refused = api(
        &env.client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMMachine",
        "kvmmachines",
        Some(env.namespace.as_str()),
    )
    .create(&PostParams::default(), &bad)
    .await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("spec.resources.memory"),
                "{status:?}"
            );
        }
        other => panic!("a KVMMachine with memory \"lots\" was not refused: {other:?}"),
    }
    let machines: Api<KVMMachine> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(machines.get_opt("badsize").await.unwrap().is_none());
    // An unknown scheme on the cluster.
    let ns = Some(env.namespace.as_str());
    api(
        &env.client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMCluster",
        "kvmclusters",
        ns,
    )
    .patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"hypervisors": [{"name": "x", "uri": "vbox:///session"}]}})),
    )
    .await
    .unwrap();
    let clusters: Api<KVMCluster> = Api::namespaced(env.client.clone(), &env.namespace);
    poll("KVMCluster UnknownHypervisorScheme", || async {
        let cluster = clusters.get("c1").await.ok()?;
        let condition = cluster
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (condition.reason.as_deref() == Some("UnknownHypervisorScheme")
            && condition
                .message
                .as_deref()
                .is_some_and(|m| m.contains("vbox:///session") && m.contains("qemu:///system")))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_adopts_its_vms_and_never_defines_twice() {
    let env = start("restart").await;
    // libvirt's shared default test hypervisor: every connection of the process sees one state,
    // so a second driver (a restarted capstan) sees what the first made.
    cluster(
        &env,
        "c1",
        json!([{"name": "hv", "uri": "test:///default", "pool": "default-pool"}]),
    )
    .await;
    machine(
        &env,
        "c1",
        "m0",
        json!({"resources": {"cpu": 1, "memory": "64Mi", "disk": "1Gi"}}),
    )
    .await;
    let first = wait_provisioned(&env, "m0").await;
    let domain = domain_name(&env.namespace, "m0");
    // A machine whose volumes were made before a crash, but no domain yet.
    let m1_domain = domain_name(&env.namespace, "m1");
    env.driver
        .ensure_volume(
            "test:///default",
            capstan_kvm::driver::VolumeConfig {
                pool: "default-pool".into(),
                name: format!("{m1_domain}-root.qcow2"),
                capacity_bytes: 1 << 30,
                format: "qcow2".into(),
                backing: None,
            },
            capstan_kvm::driver::Content::Empty,
        )
        .await
        .unwrap();
    env.shutdown.cancel();
    let driver = Driver::new();
    let _restarted = StopOnDrop(start_controllers(&env.client, driver.clone()));
    machine(
        &env,
        "c1",
        "m1",
        json!({"resources": {"cpu": 1, "memory": "64Mi", "disk": "1Gi"}}),
    )
    .await;
    let second = wait_provisioned(&env, "m1").await;
    assert_ne!(first.spec.provider_id, second.spec.provider_id);
    let prefix = format!("{NAME_PREFIX}{}-", env.namespace);
    assert_eq!(
        driver.domains("test:///default", &prefix).await.unwrap(),
        vec![domain.clone(), m1_domain.clone()]
    );
    let volumes = driver
        .volumes("test:///default", "default-pool", &prefix)
        .await
        .unwrap();
    assert_eq!(
        volumes
            .iter()
            .filter(|v| v.ends_with("-root.qcow2"))
            .count(),
        2,
        "{volumes:?}"
    );
    // The restarted controller still owns m0: deleting it removes its domain.
    Api::<KVMMachine>::namespaced(env.client.clone(), &env.namespace)
        .delete("m0", &DeleteParams::default())
        .await
        .unwrap();
    poll("m0's domain gone", || async {
        (driver.domains("test:///default", &prefix).await.unwrap() == vec![m1_domain.clone()])
            .then_some(())
    })
    .await;
    Api::<KVMMachine>::namespaced(env.client.clone(), &env.namespace)
        .delete("m1", &DeleteParams::default())
        .await
        .unwrap();
    poll("every volume gone", || async {
        driver
            .volumes("test:///default", "default-pool", &prefix)
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
}

struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What a test HTTP server answers for one path: each request takes the next answer (the last
/// one repeats). An answer is a status, a Content-Length and a body (the length may differ from
/// the body: a server that lies).
type Answer = (u16, u64, Vec<u8>);

/// An HTTP/1.1 server on 127.0.0.1 serving `answers` by path, recording each request's head.
struct ImageServer {
    port: u16,
    requests: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn image_server(answers: Vec<(&'static str, Vec<Answer>)>) -> ImageServer {
    serve_images(answers, None).await
}

/// [`image_server`], speaking HTTPS with `tls` when given.
async fn serve_images(
    answers: Vec<(&'static str, Vec<Answer>)>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> ImageServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let answers = Arc::new(std::sync::Mutex::new(
        answers
            .into_iter()
            .map(|(path, list)| (path.to_owned(), list))
            .collect::<std::collections::HashMap<_, _>>(),
    ));
    let recorded = requests.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let recorded = recorded.clone();
            let answers = answers.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    // A client that refuses the certificate ends the handshake: nothing to answer.
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(socket).await {
                            answer(stream, recorded, answers).await;
                        }
                    }
                    None => answer(socket, recorded, answers).await,
                }
            });
        }
    });
    ImageServer { port, requests }
}

type Answers = Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<Answer>>>>;

/// Reads one request from `socket` and answers it from `answers`.
async fn answer<S>(mut socket: S, recorded: Arc<std::sync::Mutex<Vec<String>>>, answers: Answers)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    recorded.lock().unwrap().push(head);
    let (status, length, body) = {
        let mut answers = answers.lock().unwrap();
        match answers.get_mut(&path) {
            Some(list) if list.len() > 1 => list.remove(0),
            Some(list) => list[0].clone(),
            None => (404, 0, Vec::new()),
        }
    };
    let response =
        format!("HTTP/1.1 {status} X\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.write_all(&body).await;
    let _ = socket.shutdown().await;
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_images_are_streamed_verified_retried_and_limited() {
    let env = start("httpimage").await;
    let hv = hypervisor_file(env.dir.path(), "hv", 16, 32 << 10);
    cluster(&env, "c1", json!([{"name": "hv", "uri": hv}])).await;
    // 3 MiB, so the image passes in several chunks.
    let image: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    let length = image.len() as u64;
    let mut tampered = image.clone();
    tampered[1 << 20] ^= 1;
    let server = image_server(vec![
        // A server error first: retried with backoff.
        (
            "/os.img",
            vec![(503, 0, Vec::new()), (200, length, image.clone())],
        ),
        ("/tampered.img", vec![(200, length, tampered)]),
        // Announces more than capstan streams into a pool.
        ("/huge.img", vec![(200, 1 << 40, Vec::new())]),
        // Ends early.
        ("/short.img", vec![(200, length, image[..1 << 20].to_vec())]),
    ])
    .await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let secret_url = format!(
        "http://imguser:hunter2-pw@127.0.0.1:{}/os.img?token=t0ken-xyz",
        server.port
    );
    let spec = |url: String, checksum: &str| {
        json!({"resources": {"cpu": 1, "memory": "128Mi", "disk": "1Gi"},
               "image": {"url": url, "checksum": checksum}})
    };
    machine(&env, "c1", "good", spec(secret_url, &sha256_hex(&image))).await;
    let message = wait_reason(&env, "good", "ImageDownloadFailed").await;
    assert!(
        message.contains("HTTP 503") && message.contains("trying again in 5 s"),
        "{message}"
    );
    assert!(
        message.contains(&format!("http://127.0.0.1:{}/os.img", server.port)),
        "the image is named by its redacted URL: {message}"
    );
    let provisioned = wait_provisioned(&env, "good").await;
    assert!(provisioned.spec.provider_id.is_some());
    let heads = server.requests.lock().unwrap().clone();
    assert_eq!(heads.len(), 2, "{heads:?}");
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b"imguser:hunter2-pw")
    };
    for head in &heads {
        assert!(
            head.starts_with("GET /os.img?token=t0ken-xyz HTTP/1.1"),
            "{head}"
        );
        assert!(
            head.lines()
                .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Basic {basic}"))),
            "{head}"
        );
    }

    machine(
        &env,
        "c1",
        "tampered",
        // The digest of what it should have served (not the cached image's: a base volume is
        // found by digest, and one of that digest is there already).
        spec(
            format!("{base}/tampered.img"),
            &sha256_hex(b"the image it should be"),
        ),
    )
    .await;
    let message = wait_reason(&env, "tampered", "ImageChecksumMismatch").await;
    assert!(
        message.contains("fix the checksum or the image"),
        "{message}"
    );
    machine(
        &env,
        "c1",
        "huge",
        spec(format!("{base}/huge.img"), &"1".repeat(64)),
    )
    .await;
    let message = wait_reason(&env, "huge", "ImageTooLarge").await;
    assert!(message.contains("1099511627776 bytes"), "{message}");
    machine(
        &env,
        "c1",
        "short",
        spec(format!("{base}/short.img"), &"2".repeat(64)),
    )
    .await;
    let message = wait_reason(&env, "short", "ImageDownloadFailed").await;
    assert!(message.contains("short.img"), "{message}");
    // Only the verified image is in the pool; the others left nothing.
    let volumes = env
        .driver
        .volumes(&hv, "default", NAME_PREFIX)
        .await
        .unwrap();
    let bases: Vec<&String> = volumes.iter().filter(|v| v.contains("-base-")).collect();
    assert_eq!(
        bases,
        vec![&capstan_kvm::machine::base_volume(&sha256_hex(&image))],
        "{volumes:?}"
    );
    // No condition or Event shows the URL's password or token.
    let machines: Api<KVMMachine> = Api::namespaced(env.client.clone(), &env.namespace);
    let statuses: Vec<String> = machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| serde_json::to_string(&m.status).unwrap())
        .collect();
    let statuses = statuses.join("\n");
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let events =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    for secret in ["hunter2-pw", "t0ken-xyz"] {
        assert!(
            !events.contains(secret),
            "an Event shows {secret}: {events}"
        );
        assert!(
            !statuses.contains(secret),
            "a status shows {secret}: {statuses}"
        );
    }
}

/// A CA (its PEM certificate) and a TLS acceptor whose certificate for 127.0.0.1 it signed.
fn site_ca_and_server() -> (String, tokio_rustls::TlsAcceptor) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "image mirror CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.pem(), ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let certificate = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![certificate.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    (ca.pem(), tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A small real qcow2 image (`qemu-img create`), its bytes.
fn qcow2(dir: &Path, name: &str, size: &str) -> Vec<u8> {
    let path = dir.join(name);
    let out = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&path)
        .arg(size)
        .output()
        .unwrap_or_else(|e| panic!("qemu-img: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_images_are_checked_against_the_ca_of_the_images_secret() {
    let env = start("httpsimage").await;
    let hv = hypervisor_file(env.dir.path(), "hv", 16, 32 << 10);
    cluster(&env, "c1", json!([{"name": "hv", "uri": hv}])).await;
    // Two images (two digests, so each is fetched on its own).
    let image = qcow2(env.dir.path(), "os.qcow2", "64M");
    let other = qcow2(env.dir.path(), "other.qcow2", "32M");
    assert_ne!(sha256_hex(&image), sha256_hex(&other));
    assert!(image.starts_with(b"QFI\xfb"));
    let (ca, tls) = site_ca_and_server();
    let (stranger_ca, _) = site_ca_and_server();
    let server = serve_images(
        vec![
            ("/os.qcow2", vec![(200, image.len() as u64, image.clone())]),
            (
                "/other.qcow2",
                vec![(200, other.len() as u64, other.clone())],
            ),
        ],
        Some(tls),
    )
    .await;
    let ns = Some(env.namespace.as_str());
    for (name, pem) in [("mirror-ca", &ca), ("stranger-ca", &stranger_ca)] {
        create(
            &env.client,
            "v1",
            "Secret",
            "secrets",
            ns,
            json!({"metadata": {"name": name}, "stringData": {"ca.crt": pem}}),
        )
        .await;
    }
    let spec = |path: &str, bytes: &[u8], ca: Option<&str>| {
        let mut image = json!({"url": format!("https://127.0.0.1:{}/{path}", server.port),
                               "checksum": sha256_hex(bytes)});
        if let Some(ca) = ca {
            image["caSecretRef"] = json!({"name": ca});
        }
        json!({"resources": {"cpu": 1, "memory": "128Mi", "disk": "1Gi"}, "image": image})
    };

    // The system's CAs do not know the mirror's, nor does another CA.
    machine(&env, "c1", "system-cas", spec("other.qcow2", &other, None)).await;
    let message = wait_reason(&env, "system-cas", "ImageCertificateUntrusted").await;
    assert!(
        message.contains("not trusted") && message.contains("spec.image.caSecretRef"),
        "{message}"
    );
    assert!(
        message.contains(&format!("https://127.0.0.1:{}/other.qcow2", server.port)),
        "{message}"
    );
    machine(
        &env,
        "c1",
        "other-ca",
        spec("other.qcow2", &other, Some("stranger-ca")),
    )
    .await;
    wait_reason(&env, "other-ca", "ImageCertificateUntrusted").await;
    machine(
        &env,
        "c1",
        "no-secret",
        spec("other.qcow2", &other, Some("absent")),
    )
    .await;
    let message = wait_reason(&env, "no-secret", "ImageCASecretMissing").await;
    assert!(message.contains("absent"), "{message}");

    // With the mirror's CA: fetched over HTTPS, verified, provisioned.
    machine(
        &env,
        "c1",
        "trusted",
        spec("os.qcow2", &image, Some("mirror-ca")),
    )
    .await;
    let provisioned = wait_provisioned(&env, "trusted").await;
    assert!(provisioned.spec.provider_id.is_some());
    let heads = server.requests.lock().unwrap().clone();
    assert_eq!(
        heads
            .iter()
            .filter(|h| h.starts_with("GET /os.qcow2 "))
            .count(),
        1,
        "{heads:?}"
    );
    assert!(
        !heads.iter().any(|h| h.starts_with("GET /other.qcow2 ")),
        "an untrusted server got a request: {heads:?}"
    );
    // Only the verified image is in the pool.
    let volumes = env
        .driver
        .volumes(&hv, "default", NAME_PREFIX)
        .await
        .unwrap();
    let bases: Vec<&String> = volumes.iter().filter(|v| v.contains("-base-")).collect();
    assert_eq!(
        bases,
        vec![&capstan_kvm::machine::base_volume(&sha256_hex(&image))],
        "{volumes:?}"
    );
    // An Event says why the untrusted ones wait.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let events = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("ImageCertificateUntrusted")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_of_one_template_take_their_own_addresses_from_an_ip_pool() {
    let env = start("ippool").await;
    let hv = hypervisor_file(env.dir.path(), "hv", 16, 32 << 10);
    cluster(&env, "c1", json!([{"name": "hv", "uri": hv}])).await;
    let ns = Some(env.namespace.as_str());
    // One spec for both, as a KVMMachineTemplate gives its machines.
    let spec = json!({"resources": {"cpu": 1, "memory": "128Mi", "disk": "1Gi"}, "image": image(&env),
                      "networks": [{"network": "default", "ipPoolRef": {"name": "vms"}}]});
    for name in ["vm-a", "vm-b"] {
        machine(&env, "c1", name, spec.clone()).await;
    }
    // capstan's IPAM controller is not running here: its part (an IPAddress for each claim,
    // named in the claim's status) is played by hand, as its contract says.
    let claims = api(
        &env.client,
        "ipam.metal3.io/v1alpha1",
        "IPClaim",
        "ipclaims",
        ns,
    );
    for (name, address) in [("vm-a", "10.0.0.10"), ("vm-b", "10.0.0.11")] {
        let claim_name = capstan_kvm::machine::ip_claim_name(name, 0);
        let claim = poll(&format!("IPClaim {claim_name}"), || async {
            claims.get_opt(&claim_name).await.unwrap()
        })
        .await;
        assert_eq!(claim.data["spec"]["pool"]["name"], "vms");
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.kind == "KVMMachine" && o.name == name),
            "{owners:?}"
        );
        // Until then the machine waits and says for what.
        let waiting = wait_reason(&env, name, "WaitingForIPAddress").await;
        assert!(waiting.contains("IPPool vms"), "{waiting}");
        let address_name = format!("vms-{}", address.replace('.', "-"));
        create(
            &env.client,
            "ipam.metal3.io/v1alpha1",
            "IPAddress",
            "ipaddresses",
            ns,
            json!({
                "metadata": {"name": address_name},
                "spec": {"address": address, "prefix": 24, "gateway": "10.0.0.1",
                         "pool": {"name": "vms"}, "claim": {"name": claim_name}},
            }),
        )
        .await;
        claims
            .patch_status(
                &claim_name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"address": {"name": address_name}}})),
            )
            .await
            .unwrap();
    }
    for (name, address) in [("vm-a", "10.0.0.10"), ("vm-b", "10.0.0.11")] {
        let provisioned = wait_provisioned(&env, name).await;
        let status = serde_json::to_value(&provisioned.status).unwrap();
        let internal: Vec<&str> = status["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["type"] == "InternalIP")
            .filter_map(|a| a["address"].as_str())
            .collect();
        assert_eq!(internal, vec![address], "{name}: {status}");
    }
    // An address given as well as a pool: refused, saying which to keep.
    let mut both = spec.clone();
    both["networks"][0]["address"] = json!("10.0.0.99/24");
    machine(&env, "c1", "vm-both", both).await;
    let message = wait_reason(&env, "vm-both", "InvalidSpec").await;
    assert!(message.contains("keep one"), "{message}");
}
