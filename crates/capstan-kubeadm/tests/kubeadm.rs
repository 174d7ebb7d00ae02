//! The kubeadm controllers against two in-process capstan API servers: the management cluster the
//! controllers run on, and a second one playing the workload cluster (bootstrap tokens,
//! `kube-system/kubeadm-config`). The test plays the other Cluster API parts by hand, as their
//! contracts say: it copies `dataSecretName` into Machines, "boots" a Machine by reading its
//! bootstrap data (an init writes `kubeadm-config` into the workload API and the etcd member joins a
//! fake `EtcdMembership`), sets `status.nodeRef`, and sets the Cluster's
//! `status.initialization.controlPlaneInitialized`.
//!
//! Every wait polls a condition with a deadline ([`WAIT`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use capstan_apiserver::ApiServer;
use capstan_apiserver::in_process_client;
use capstan_kubeadm::bootstrap::{ANNOTATION_TOKEN_ID, BootstrapController, BootstrapSettings};
use capstan_kubeadm::controlplane::{ControlPlaneController, ControlPlaneSettings};
use capstan_kubeadm::report;
use capstan_runtime::{CancellationToken, RunOptions, RuntimeError};
use capstan_workload::{ClusterKey, EtcdMember, EtcdMembership, WorkloadAccess, WorkloadError};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

mod support;

use support::{api_server, serve_reports};

const WAIT: Duration = Duration::from_secs(90);
const NS: &str = "default";
const POLL: Duration = Duration::from_millis(50);

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1beta2".into(),
        api_version: format!("{group}/v1beta2"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn machines_r() -> ApiResource {
    resource("cluster.x-k8s.io", "Machine", "machines")
}
fn clusters_r() -> ApiResource {
    resource("cluster.x-k8s.io", "Cluster", "clusters")
}
fn configs_r() -> ApiResource {
    resource(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
    )
}
fn kcps_r() -> ApiResource {
    resource(
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    )
}
fn templates_r() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io",
        "Metal3MachineTemplate",
        "metal3machinetemplates",
    )
}

/// The workload cluster: one in-process API server for every cluster the test makes.
struct Workloads {
    client: Client,
}

impl WorkloadAccess for Workloads {
    fn client<'a>(
        &'a self,
        _cluster: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move { Ok(self.client.clone()) })
    }
    fn forget(&self, _cluster: &ClusterKey) {}
}

/// etcd as a list of members; the first is the leader. Records removals and leader moves.
#[derive(Default)]
struct FakeEtcd {
    members: Mutex<Vec<EtcdMember>>,
    removed: Mutex<Vec<String>>,
    leader_moves: Mutex<Vec<String>>,
}

impl FakeEtcd {
    fn add(&self, name: &str) {
        let mut members = self.members.lock().unwrap();
        if members.iter().any(|m| m.name == name) {
            return;
        }
        let leader = members.is_empty();
        let id = members.len() as u64 + 1;
        members.push(EtcdMember {
            name: name.into(),
            id,
            healthy: true,
            leader,
        });
    }
    fn names(&self) -> BTreeSet<String> {
        self.members
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.name.clone())
            .collect()
    }
    fn leader(&self) -> Option<String> {
        self.members
            .lock()
            .unwrap()
            .iter()
            .find(|m| m.leader)
            .map(|m| m.name.clone())
    }
}

impl EtcdMembership for FakeEtcd {
    fn members<'a>(
        &'a self,
        _c: &'a ClusterKey,
    ) -> BoxFuture<'a, Result<Vec<EtcdMember>, WorkloadError>> {
        Box::pin(async move { Ok(self.members.lock().unwrap().clone()) })
    }
    fn remove_member<'a>(
        &'a self,
        _c: &'a ClusterKey,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            let mut members = self.members.lock().unwrap();
            assert!(
                !members.iter().any(|m| m.name == name && m.leader),
                "the leader {name} was removed without moving leadership first"
            );
            members.retain(|m| m.name != name);
            self.removed.lock().unwrap().push(name.to_owned());
            Ok(())
        })
    }
    fn move_leader<'a>(
        &'a self,
        _c: &'a ClusterKey,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), WorkloadError>> {
        Box::pin(async move {
            for member in self.members.lock().unwrap().iter_mut() {
                member.leader = member.name == to;
            }
            self.leader_moves.lock().unwrap().push(to.to_owned());
            Ok(())
        })
    }
}

struct Env {
    _dirs: Vec<tempfile::TempDir>,
    management: ApiServer,
    client: Client,
    workload: Client,
    workloads: Arc<Workloads>,
    etcd: Arc<FakeEtcd>,
    controllers: Option<(CancellationToken, JoinHandle<Result<(), RuntimeError>>)>,
    report_base_url: Option<String>,
    token_ttl: Duration,
    /// Every Machine the test saw run `kubeadm init`, by cluster.
    inits: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

/// The step runner of a bootstrap, written to a temporary directory and run as cloud-init runs
/// it (step logs in that directory).
struct StepRunner {
    dir: tempfile::TempDir,
    script: std::path::PathBuf,
}

impl StepRunner {
    /// Writes `runner` (the script's text) to a new temporary directory.
    fn new(runner: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("step.sh");
        std::fs::write(&script, runner).unwrap();
        Self { dir, script }
    }

    /// Runs step `index` of 4 with `command`, as `runcmd` runs each step.
    fn run(&self, index: &str, command: &str) -> std::process::Output {
        std::process::Command::new("sh")
            .arg(&self.script)
            .args([index, "4", command])
            .env("CAPSTAN_STEP_LOG_DIR", self.dir.path())
            .output()
            .unwrap()
    }
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
        let (d1, management) = api_server().await;
        let (d2, workload_server) = api_server().await;
        let client = in_process_client(management.router());
        let workload = in_process_client(workload_server.router());
        // The workload server lives as long as its router, which the client holds.
        std::mem::forget(workload_server);
        Self {
            _dirs: vec![d1, d2],
            client,
            workloads: Arc::new(Workloads {
                client: workload.clone(),
            }),
            workload,
            management,
            etcd: Arc::new(FakeEtcd::default()),
            controllers: None,
            report_base_url: None,
            token_ttl: Duration::from_secs(900),
            inits: Mutex::new(BTreeMap::new()),
        }
    }

    fn start_controllers(&mut self) {
        let shutdown = CancellationToken::new();
        let client = in_process_client(self.management.router());
        let workloads: capstan_workload::SharedWorkloadAccess = self.workloads.clone();
        let etcd: capstan_workload::SharedEtcdMembership = self.etcd.clone();
        let bootstrap = BootstrapSettings {
            workloads: Some(workloads.clone()),
            report_base_url: self.report_base_url.clone(),
            token_ttl: self.token_ttl,
        };
        let control_plane = ControlPlaneSettings {
            workloads: Some(workloads),
            etcd: Some(etcd),
        };
        let run = capstan_runtime::run(client, RunOptions::new(shutdown.clone()), move || {
            vec![
                capstan_runtime::controller_task(BootstrapController::new(bootstrap.clone())),
                capstan_runtime::controller_task(ControlPlaneController::new(
                    control_plane.clone(),
                )),
            ]
        });
        self.controllers = Some((shutdown, tokio::spawn(run)));
    }

    async fn stop_controllers(&mut self) {
        if let Some((shutdown, running)) = self.controllers.take() {
            shutdown.cancel();
            tokio::time::timeout(WAIT, running)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }

    fn api(&self, r: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, r)
    }

    async fn create(&self, r: &ApiResource, object: Value) {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        self.api(r)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }

    async fn patch(&self, r: &ApiResource, name: &str, patch: Value) {
        self.api(r)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    async fn patch_status(&self, r: &ApiResource, name: &str, patch: Value) {
        self.api(r)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Starts a bootstrap report server on the management API and has the controllers started
    /// after it write its URL into bootstrap data: its base URL.
    async fn start_report_server(&mut self) -> String {
        let url = serve_reports(&self.management).await;
        self.report_base_url = Some(url.clone());
        url
    }

    /// The first Machine of the KubeadmControlPlane `kcp`, once its bootstrap data Secret exists
    /// (failing after `WAIT`).
    async fn first_machine_with_data(&self, kcp: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(machine) = self.kcp_machines(kcp).await.first()
                && self.secret(&machine.name_any()).await.is_some()
            {
                return machine.name_any();
            }
            assert!(tokio::time::Instant::now() < deadline, "no bootstrap data");
            tokio::time::sleep(POLL).await;
        }
    }

    /// The bootstrap data of `machine` (its cloud-config document) and the step runner script it
    /// writes.
    async fn bootstrap_data(&self, machine: &str) -> (yaml_rust2::Yaml, String) {
        let value = String::from_utf8(
            self.secret(machine).await.unwrap().data.unwrap()["value"]
                .0
                .clone(),
        )
        .unwrap();
        let doc = yaml_rust2::YamlLoader::load_from_str(&value)
            .unwrap()
            .remove(0);
        let runner = doc["write_files"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str() == Some(capstan_kubeadm::cloudinit::STEP_RUNNER_PATH))
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned();
        (doc, runner)
    }

    /// The bootstrap report condition (`report::CONDITION`) of the KubeadmConfig `config`, which
    /// must have one.
    async fn report_condition(&self, config: &str) -> Value {
        let config = self.api(&configs_r()).get(config).await.unwrap();
        config.data["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == report::CONDITION)
            .unwrap()
            .clone()
    }

    async fn secret(&self, name: &str) -> Option<Secret> {
        Api::<Secret>::namespaced(self.client.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
    }

    async fn cluster(&self, name: &str, kcp: Option<&str>) {
        let mut spec = json!({
            "controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443},
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
        });
        if let Some(kcp) = kcp {
            spec["controlPlaneRef"] = json!({"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": kcp});
        }
        self.create(
            &clusters_r(),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": spec,
            }),
        )
        .await;
    }

    async fn kcp(&self, name: &str, cluster: &str, replicas: i32, version: &str, max_surge: i32) {
        self.create(&templates_r(), json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3MachineTemplate",
            "metadata": {"name": format!("{name}-m3mt"), "namespace": NS},
            "spec": {"template": {"spec": {"image": {"url": "http://192.0.2.1/img.raw", "checksum": "http://192.0.2.1/img.raw.sha256sum", "checksumType": "sha256", "format": "raw"}, "hostSelector": {}}}},
        }))
        .await;
        self.create(&kcps_r(), json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {
                "replicas": replicas,
                "version": version,
                "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge}}},
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": format!("{name}-m3mt")}}},
                "kubeadmConfigSpec": {
                    "clusterConfiguration": {"apiServer": {"certSANs": ["192.0.2.10"]}},
                    "initConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.name }}", "kubeletExtraArgs": [{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}]}, "skipPhases": ["addon/kube-proxy"]},
                    "joinConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.name }}", "kubeletExtraArgs": [{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}]}},
                    "preKubeadmCommands": ["sh /etc/kube-vip-prepare.sh"],
                    "postKubeadmCommands": ["sh /etc/kube-vip-prepare.sh --restore"],
                },
            },
        }))
        .await;
    }

    /// Plays the Machine controller, the infrastructure provider and the nodes once: copies
    /// `dataSecretName`, boots Machines whose data exists, marks the Cluster initialised.
    async fn play(&self) {
        let machines = self
            .api(&machines_r())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let configs = self.api(&configs_r());
        let maps: Api<ConfigMap> = Api::namespaced(self.workload.clone(), "kube-system");
        for machine in machines {
            if machine.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = machine.name_any();
            let cluster = machine.data["spec"]["clusterName"]
                .as_str()
                .unwrap()
                .to_owned();
            let Some(config_name) = machine
                .data
                .pointer("/spec/bootstrap/configRef/name")
                .and_then(Value::as_str)
            else {
                continue;
            };
            let Some(config) = configs.get_opt(config_name).await.unwrap() else {
                continue;
            };
            let Some(data_name) = config
                .data
                .pointer("/status/dataSecretName")
                .and_then(Value::as_str)
            else {
                continue;
            };
            if machine.data.pointer("/status/nodeRef").is_some() {
                continue;
            }
            self.patch(
                &machines_r(),
                &name,
                json!({"spec": {"bootstrap": {"dataSecretName": data_name}}}),
            )
            .await;
            let data = self.secret(data_name).await.unwrap();
            let value = String::from_utf8(data.data.unwrap()["value"].0.clone()).unwrap();
            if value.contains("kubeadm init --config") {
                self.inits
                    .lock()
                    .unwrap()
                    .entry(cluster.clone())
                    .or_default()
                    .insert(name.clone());
                let config_map = ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some("kubeadm-config".into()),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([(
                        "ClusterConfiguration".into(),
                        "from the test".into(),
                    )])),
                    ..Default::default()
                };
                match maps.create(&PostParams::default(), &config_map).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            } else {
                assert!(value.contains("kubeadm join --config"), "{value}");
                // A join needs the token it carries to exist in the workload cluster.
                let id = data.metadata.annotations.as_ref().unwrap()[ANNOTATION_TOKEN_ID].clone();
                let tokens: Api<Secret> = Api::namespaced(self.workload.clone(), "kube-system");
                assert!(
                    tokens
                        .get_opt(&format!("bootstrap-token-{id}"))
                        .await
                        .unwrap()
                        .is_some()
                );
            }
            if machine
                .labels()
                .contains_key("cluster.x-k8s.io/control-plane")
            {
                self.etcd.add(&name);
            }
            self.patch_status(
                &machines_r(),
                &name,
                json!({"status": {"nodeRef": {"name": name}}}),
            )
            .await;
        }
        if maps.get_opt("kubeadm-config").await.unwrap().is_some() {
            for cluster in self
                .api(&clusters_r())
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                if cluster
                    .data
                    .pointer("/status/initialization/controlPlaneInitialized")
                    != Some(&json!(true))
                {
                    self.patch_status(
                        &clusters_r(),
                        &cluster.name_any(),
                        json!({"status": {"initialization": {"controlPlaneInitialized": true}}}),
                    )
                    .await;
                }
            }
        }
    }

    /// Plays until `done` holds, or fails after [`WAIT`].
    async fn converge<F, Fut>(&self, what: &str, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            self.play().await;
            if done().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn kcp_machines(&self, kcp: &str) -> Vec<DynamicObject> {
        self.api(&machines_r())
            .list(
                &ListParams::default()
                    .labels(&format!("cluster.x-k8s.io/control-plane-name={kcp}")),
            )
            .await
            .unwrap()
            .items
    }

    async fn kcp_status(&self, kcp: &str) -> Value {
        self.api(&kcps_r()).get(kcp).await.unwrap().data["status"].clone()
    }

    fn inits(&self, cluster: &str) -> BTreeSet<String> {
        self.inits
            .lock()
            .unwrap()
            .get(cluster)
            .cloned()
            .unwrap_or_default()
    }
}

/// Whether the KCP reports `replicas` ready, up-to-date Machines at `version`, with no others.
async fn settled(env: &Env, kcp: &str, replicas: i64, version: &str) -> bool {
    let status = env.kcp_status(kcp).await;
    let machines = env.kcp_machines(kcp).await;
    status["replicas"] == json!(replicas)
        && status["readyReplicas"] == json!(replicas)
        && status["upToDateReplicas"] == json!(replicas)
        && status["version"] == json!(version)
        && machines.len() as i64 == replicas
        && machines.iter().all(|m| {
            m.metadata.deletion_timestamp.is_none()
                && m.data["spec"]["version"] == json!(version)
                && m.data.pointer("/status/nodeRef").is_some()
        })
}

fn cert_of(pem_text: &str) -> Vec<u8> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes()).unwrap();
    pem.contents
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_inits_once_joins_and_writes_certificates() {
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c1", Some("c1-cp")).await;
    env.kcp("c1-cp", "c1", 3, "v1.31.2", 1).await;

    // The first Machine comes up; restart the controllers while the others join.
    env.converge("the first Machine", || async {
        env.kcp_status("c1-cp").await["readyReplicas"] == json!(1)
    })
    .await;
    env.stop_controllers().await;
    env.start_controllers();
    env.converge("three Machines", || settled(&env, "c1-cp", 3, "v1.31.2"))
        .await;
    assert_eq!(
        env.inits("c1").len(),
        1,
        "kubeadm init rendered for {:?}",
        env.inits("c1")
    );
    let status = env.kcp_status("c1-cp").await;
    assert_eq!(
        status["initialization"]["controlPlaneInitialized"],
        json!(true)
    );
    assert_eq!(
        status["selector"],
        json!("cluster.x-k8s.io/cluster-name=c1,cluster.x-k8s.io/control-plane")
    );
    assert_eq!(env.etcd.names().len(), 3);

    // Every Machine: labels, owner, its KubeadmConfig (init for one, join with controlPlane for the
    // rest) and an infra machine cloned from the template.
    let m3m = resource(
        "infrastructure.cluster.x-k8s.io",
        "Metal3Machine",
        "metal3machines",
    );
    let mut joins = 0;
    for machine in env.kcp_machines("c1-cp").await {
        let name = machine.name_any();
        assert_eq!(machine.labels()["cluster.x-k8s.io/cluster-name"], "c1");
        assert_eq!(machine.labels()["cluster.x-k8s.io/control-plane"], "");
        assert_eq!(machine.owner_references()[0].kind, "KubeadmControlPlane");
        let infra = env.api(&m3m).get(&name).await.unwrap();
        assert_eq!(
            infra.data["spec"]["image"]["url"],
            "http://192.0.2.1/img.raw"
        );
        assert_eq!(infra.owner_references()[0].name, name);
        let data = env.secret(&name).await.unwrap();
        assert_eq!(data.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
        let data = data.data.unwrap();
        assert_eq!(data["format"].0, b"cloud-config");
        let value = String::from_utf8(data["value"].0.clone()).unwrap();
        assert!(value.starts_with("## template: jinja\n#cloud-config\n"));
        assert!(value.contains("kubeadm.k8s.io/v1beta4"));
        if value.contains("kubeadm join") {
            joins += 1;
            assert!(value.contains("controlPlane: {}"), "{value}");
            assert!(value.contains("/etc/kubernetes/pki/etcd/ca.key"));
        }
        let config = env.api(&configs_r()).get(&name).await.unwrap();
        assert_eq!(
            config.data["status"]["initialization"]["dataSecretCreated"],
            json!(true)
        );
        assert_eq!(config.data["status"]["ready"], json!(true));
    }
    assert_eq!(joins, 2);
    assert!(
        Api::<ConfigMap>::namespaced(env.client.clone(), NS)
            .get_opt("c1-lock")
            .await
            .unwrap()
            .is_none(),
        "the init lock is released once initialized"
    );

    // Certificates: four Secrets of the right type, owned by the KCP; the kubeconfig's client
    // certificate is signed by the cluster CA and names the endpoint.
    for suffix in ["ca", "etcd", "proxy", "sa"] {
        let secret = env.secret(&format!("c1-{suffix}")).await.unwrap();
        assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
        assert_eq!(secret.labels()["cluster.x-k8s.io/cluster-name"], "c1");
        assert_eq!(secret.owner_references()[0].kind, "KubeadmControlPlane");
        let data = secret.data.unwrap();
        assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));
    }
    let ca = env.secret("c1-ca").await.unwrap().data.unwrap();
    let ca_pem = String::from_utf8(ca["tls.crt"].0.clone()).unwrap();
    let kubeconfig = env.secret("c1-kubeconfig").await.unwrap().data.unwrap();
    let kubeconfig = String::from_utf8(kubeconfig["value"].0.clone()).unwrap();
    assert!(
        kubeconfig.contains("server: https://192.0.2.10:6443"),
        "{kubeconfig}"
    );
    let client_cert_b64 = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
        .unwrap();
    use base64::Engine;
    let client_pem = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(client_cert_b64)
            .unwrap(),
    )
    .unwrap();
    let ca_der = cert_of(&ca_pem);
    let client_der = cert_of(&client_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    let (_, client_cert) = x509_parser::parse_x509_certificate(&client_der).unwrap();
    assert!(ca_cert.is_ca());
    client_cert
        .verify_signature(Some(ca_cert.public_key()))
        .unwrap();
    assert_eq!(client_cert.issuer(), ca_cert.subject());
    assert!(
        client_cert.subject().to_string().contains("system:masters"),
        "{}",
        client_cert.subject()
    );
    // Never regenerated: a second pass (the restart above) kept the CA the first Machine got.
    let first_init = env.inits("c1").into_iter().next().unwrap();
    let init_data = String::from_utf8(
        env.secret(&first_init).await.unwrap().data.unwrap()["value"]
            .0
            .clone(),
    )
    .unwrap();
    let ca_body: String = ca_pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let init_body: String = init_data.lines().map(str::trim).collect();
    assert!(init_body.contains(&ca_body));
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_configs_init_once_and_refresh_tokens() {
    let mut env = Env::start().await;
    env.token_ttl = Duration::from_secs(600);
    env.start_controllers();
    env.cluster("c2", None).await;
    // Two control-plane Machines whose configs both could init, and a worker.
    for (name, control_plane) in [("cp-a", true), ("cp-b", true), ("worker", false)] {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": "c2"});
        if control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        env.create(&configs_r(), json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "clusterConfiguration": {"apiServer": {"certSANs": ["192.0.2.20"]}},
                "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": "a=b"}]}},
                "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": "a=b"}]}},
                "files": [{"path": "/etc/from-secret", "permissions": "0600", "contentFrom": {"secret": {"name": "extra", "key": "conf"}}}],
            },
        }))
        .await;
        env.create(&machines_r(), json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"clusterName": "c2", "version": "v1.30.5",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": name}},
        }))
        .await;
    }
    let configs = env.api(&configs_r());
    let reason = |name: &'static str| {
        let configs = configs.clone();
        async move {
            let config = configs.get(name).await.unwrap();
            config.data["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "DataSecretAvailable"))
                .map(|c| c["reason"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default()
        }
    };
    // The contentFrom Secret is missing: said so, nothing rendered.
    let deadline = tokio::time::Instant::now() + WAIT;
    while reason("cp-a").await != "MissingSecret" && reason("cp-b").await != "MissingSecret" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no MissingSecret condition"
        );
        tokio::time::sleep(POLL).await;
    }
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "extra"}, "stringData": {"conf": "setting=1\n"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    // One init; the other control plane waits on the lock, the worker on initialization.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (a, b) = (reason("cp-a").await, reason("cp-b").await);
        if [a.as_str(), b.as_str()].contains(&"DataSecretCreated")
            && [a.as_str(), b.as_str()].contains(&"WaitingForInitLock")
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "cp-a {a}, cp-b {b}");
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(reason("worker").await, "WaitingForControlPlaneInitialized");
    let initer = if reason("cp-a").await == "DataSecretCreated" {
        "cp-a"
    } else {
        "cp-b"
    };
    let other = if initer == "cp-a" { "cp-b" } else { "cp-a" };
    let lock = Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .get("c2-lock")
        .await
        .unwrap();
    assert!(lock.data.unwrap()["lock-information"].contains(initer));
    let init_value = String::from_utf8(
        env.secret(initer).await.unwrap().data.unwrap()["value"]
            .0
            .clone(),
    )
    .unwrap();
    assert!(init_value.contains("kubeadm init --config /run/kubeadm/kubeadm.yaml"));
    assert!(
        init_value.contains("kubeadm.k8s.io/v1beta3"),
        "1.30 reads v1beta3"
    );
    assert!(init_value.contains("setting=1"), "contentFrom resolved");

    // Restarts and repeated reconciles never make a second init.
    // Each round clears the waiting config's conditions, so the condition seen afterwards was
    // written by a reconcile after the restart.
    for _round in 0..2 {
        env.stop_controllers().await;
        env.patch_status(&configs_r(), other, json!({"status": {"conditions": []}}))
            .await;
        env.start_controllers();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let config = configs.get(other).await.unwrap();
            let observed = config.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "WaitingForInitLock"));
            if observed {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(POLL).await;
        }
        assert!(
            env.secret(other).await.is_none(),
            "{other} got bootstrap data before init"
        );
    }

    // Boot the init Machine; then the others join.
    env.converge("every Machine joined", || async {
        let mut all = true;
        for name in ["cp-a", "cp-b", "worker"] {
            all &= env.secret(name).await.is_some();
        }
        all
    })
    .await;
    assert_eq!(env.inits("c2"), BTreeSet::from([initer.to_owned()]));
    let other_value = String::from_utf8(
        env.secret(other).await.unwrap().data.unwrap()["value"]
            .0
            .clone(),
    )
    .unwrap();
    assert!(other_value.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"));
    assert!(other_value.contains("controlPlane"));
    let worker = env.secret("worker").await.unwrap();
    let worker_value = String::from_utf8(worker.data.clone().unwrap()["value"].0.clone()).unwrap();
    assert!(!worker_value.contains("PRIVATE KEY"), "workers get no keys");
    assert!(!worker_value.contains("controlPlane"));
    assert!(worker_value.contains("caCertHashes"));

    // Token refresh: the worker's token, nearly expired while the Machine has no Node, is extended;
    // deleted, it comes back.
    // (Upstream's Machine status is never an empty object: the phase stays.)
    env.patch_status(
        &machines_r(),
        "worker",
        json!({"status": {"nodeRef": null, "phase": "Provisioned"}}),
    )
    .await;
    let id = worker.metadata.annotations.unwrap()[ANNOTATION_TOKEN_ID].clone();
    let tokens: Api<Secret> = Api::namespaced(env.workload.clone(), "kube-system");
    let token_name = format!("bootstrap-token-{id}");
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    tokens
        .patch(
            &token_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"expiration": soon}})),
        )
        .await
        .unwrap();
    env.patch(
        &configs_r(),
        "worker",
        json!({"metadata": {"annotations": {"test/touch": "refresh"}}}),
    )
    .await;
    let expiration = |secret: Secret| -> jiff::Timestamp {
        String::from_utf8(secret.data.unwrap()["expiration"].0.clone())
            .unwrap()
            .parse()
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let token = tokens.get(&token_name).await.unwrap();
        if expiration(token) > jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "token not refreshed"
        );
        tokio::time::sleep(POLL).await;
    }
    tokens
        .delete(&token_name, &Default::default())
        .await
        .unwrap();
    env.patch(
        &configs_r(),
        "worker",
        json!({"metadata": {"annotations": {"test/touch": "recreate"}}}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokens.get_opt(&token_name).await.unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "token not recreated"
        );
        tokio::time::sleep(POLL).await;
    }
    let recreated = tokens.get(&token_name).await.unwrap().data.unwrap();
    assert!(worker_value.contains(&format!(
        "{id}.{}",
        String::from_utf8(recreated["token-secret"].0.clone()).unwrap()
    )));
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_one_three_one_keeps_etcd_in_step() {
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c3", Some("c3-cp")).await;
    env.kcp("c3-cp", "c3", 1, "v1.31.2", 1).await;
    env.converge("one Machine", || settled(&env, "c3-cp", 1, "v1.31.2"))
        .await;
    let first = env.kcp_machines("c3-cp").await[0].name_any();
    assert_eq!(env.etcd.leader().as_deref(), Some(first.as_str()));

    env.patch(&kcps_r(), "c3-cp", json!({"spec": {"replicas": 3}}))
        .await;
    env.converge("three Machines", || settled(&env, "c3-cp", 3, "v1.31.2"))
        .await;
    assert_eq!(env.etcd.names().len(), 3);
    assert_eq!(env.inits("c3").len(), 1);
    // Make the Machine removed first (the oldest; creation times tie within a second, then the
    // name decides) the etcd leader, so leadership has to move before its member goes.
    let first_out = env
        .kcp_machines("c3-cp")
        .await
        .into_iter()
        .min_by_key(|m| {
            (
                m.metadata.creation_timestamp.clone().map(|t| t.0),
                m.name_any(),
            )
        })
        .unwrap()
        .name_any();
    for member in env.etcd.members.lock().unwrap().iter_mut() {
        member.leader = member.name == first_out;
    }

    env.patch(&kcps_r(), "c3-cp", json!({"spec": {"replicas": 1}}))
        .await;
    env.converge("one Machine again", || settled(&env, "c3-cp", 1, "v1.31.2"))
        .await;
    let left: BTreeSet<String> = env
        .kcp_machines("c3-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(env.etcd.names(), left, "etcd members follow the Machines");
    assert_eq!(env.etcd.removed.lock().unwrap().len(), 2);
    // The leader went, after handing leadership over (the fake refuses to remove a leader).
    assert!(!left.contains(&first_out));
    assert!(!env.etcd.leader_moves.lock().unwrap().is_empty());
    assert_eq!(env.etcd.leader(), left.into_iter().next());

    // An unhealthy member blocks a scale-down that would lose quorum.
    env.patch(&kcps_r(), "c3-cp", json!({"spec": {"replicas": 3}}))
        .await;
    env.converge("three Machines", || settled(&env, "c3-cp", 3, "v1.31.2"))
        .await;
    // The Machine a scale-down removes first is the oldest (then by name); one of the others
    // becomes unhealthy, so the two members left would not make a quorum.
    let next_out = env
        .kcp_machines("c3-cp")
        .await
        .into_iter()
        .min_by_key(|m| {
            (
                m.metadata.creation_timestamp.clone().map(|t| t.0),
                m.name_any(),
            )
        })
        .unwrap()
        .name_any();
    {
        let mut members = env.etcd.members.lock().unwrap();
        for member in members.iter_mut().filter(|m| m.name != next_out).take(1) {
            member.healthy = false;
        }
    }
    env.patch(&kcps_r(), "c3-cp", json!({"spec": {"replicas": 2}}))
        .await;
    env.converge("the quorum refusal", || async {
        let status = env.kcp_status("c3-cp").await;
        status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "EtcdClusterHealthy" && c["reason"] == "EtcdQuorumAtRisk")
                && c.iter()
                    .any(|c| c["type"] == "SpecAccepted" && c["reason"] == "EvenReplicas")
        })
    })
    .await;
    assert_eq!(env.kcp_machines("c3-cp").await.len(), 3);
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_rollout_with_max_surge_zero() {
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c4", Some("c4-cp")).await;
    env.kcp("c4-cp", "c4", 3, "v1.31.2", 0).await;
    env.converge("three Machines", || settled(&env, "c4-cp", 3, "v1.31.2"))
        .await;
    let before: BTreeSet<String> = env
        .kcp_machines("c4-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();

    // Two minors up is refused; one minor up rolls, never above 3 Machines.
    env.patch(&kcps_r(), "c4-cp", json!({"spec": {"version": "v1.33.0"}}))
        .await;
    env.converge("the skew refusal", || async {
        env.kcp_status("c4-cp").await["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "SpecAccepted"
                        && c["reason"] == "VersionSkewNotAllowed"
                        && c["message"]
                            .as_str()
                            .unwrap_or_default()
                            .contains("v1.32.x")
                })
            })
    })
    .await;
    assert_eq!(env.kcp_machines("c4-cp").await.len(), 3);
    env.patch(&kcps_r(), "c4-cp", json!({"spec": {"version": "v1.32.1"}}))
        .await;
    let most = std::sync::atomic::AtomicUsize::new(0);
    env.converge("the rollout", || async {
        let count = env.kcp_machines("c4-cp").await.len();
        most.fetch_max(count, std::sync::atomic::Ordering::Relaxed);
        settled(&env, "c4-cp", 3, "v1.32.1").await
    })
    .await;
    assert!(
        most.load(std::sync::atomic::Ordering::Relaxed) <= 3,
        "maxSurge 0 never adds a fourth Machine"
    );
    let after: BTreeSet<String> = env
        .kcp_machines("c4-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(before.is_disjoint(&after), "every Machine was replaced");
    assert_eq!(env.etcd.names(), after);
    assert_eq!(
        env.inits("c4").len(),
        1,
        "no second kubeadm init during the rollout"
    );
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_bootstrap_step_is_reported_on_the_config() {
    let mut env = Env::start().await;
    let url = env.start_report_server().await;
    env.start_controllers();
    env.cluster("c5", Some("c5-cp")).await;
    env.kcp("c5-cp", "c5", 1, "v1.31.2", 1).await;
    let machine = env.first_machine_with_data("c5-cp").await;
    let (doc, runner) = env.bootstrap_data(&machine).await;
    let token = String::from_utf8(
        env.secret(&report::report_object_name(&machine))
            .await
            .unwrap()
            .data
            .unwrap()["token"]
            .0
            .clone(),
    )
    .unwrap();
    assert!(runner.contains(&token));
    let runcmd = doc["runcmd"].as_vec().unwrap();
    assert_eq!(runcmd[0][4].as_str(), Some("sh /etc/kube-vip-prepare.sh"));

    // Run the runner as cloud-init would: step 1 succeeds, step 2 fails with output.
    let steps = StepRunner::new(&runner);
    let run = |index: &str, command: &str| steps.run(index, command);
    assert!(run("1", "echo fine").status.success());
    let failed = run(
        "2",
        &format!(
            "echo preparing; echo 'join failed: bad token abcdef.0123456789abcdef and {token}' >&2; exit 3"
        ),
    );
    assert_eq!(
        failed.status.code(),
        Some(3),
        "the step's exit code is kept"
    );
    assert!(
        String::from_utf8_lossy(&failed.stdout).contains("preparing"),
        "output still reaches cloud-init's log"
    );

    env.converge("the failure condition", || async {
        let config = env.api(&configs_r()).get(&machine).await.unwrap();
        config.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == report::CONDITION
                        && c["status"] == "False"
                        && c["reason"] == report::REASON_FAILED
                })
            })
    })
    .await;
    let condition = env.report_condition(&machine).await;
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.starts_with("step 2/4 failed with exit code 3: echo preparing;"),
        "{message}"
    );
    assert!(message.contains("join failed: bad token"), "{message}");
    assert!(
        !message.contains("abcdef.0123456789abcdef") && !message.contains(&token),
        "secrets redacted: {message}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), NS);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .any(|e| e.reason.as_deref() == Some(report::REASON_FAILED));
        if found {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Warning event");
        tokio::time::sleep(POLL).await;
    }
    for event in events.list(&ListParams::default()).await.unwrap().items {
        let note = event.note.unwrap_or_default();
        assert!(
            !note.contains(&token) && !note.contains("abcdef.0123456789abcdef"),
            "{note}"
        );
    }

    // A wrong token is refused and stores nothing.
    let http = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            "-H",
            "Authorization: Bearer wrong",
            "-H",
            "X-Capstan-Step: 3",
            "-H",
            "X-Capstan-Steps: 4",
            "-H",
            "X-Capstan-State: failed",
        ])
        .arg(report::steps_url(&url, NS, &machine))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&http.stdout), "401");
    let reports = Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .get(&report::report_object_name(&machine))
        .await
        .unwrap();
    assert!(!reports.data.unwrap().contains_key("step-003"));
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_close_when_the_machine_has_its_node() {
    let mut env = Env::start().await;
    env.start_report_server().await;
    env.start_controllers();
    env.cluster("c6", Some("c6-cp")).await;
    env.kcp("c6-cp", "c6", 1, "v1.31.2", 1).await;
    let machine = env.first_machine_with_data("c6-cp").await;
    let (_, runner) = env.bootstrap_data(&machine).await;
    let steps = StepRunner::new(&runner);
    let run = |index: &str, command: &str| steps.run(index, command);
    // Step 1 of 4 reported; then the Node joins (the test plays it) before the others report.
    assert!(run("1", "echo fine").status.success());
    let report_name = report::report_object_name(&machine);
    env.converge(
        "the reports closed and the bootstrap taken as done",
        || async {
            let closed = env.secret(&report_name).await.and_then(|s| {
                s.annotations()
                    .get("bootstrap.capstan.io/reports-closed")
                    .cloned()
            });
            let config = env.api(&configs_r()).get(&machine).await.unwrap();
            let succeeded = config.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c["type"] == report::CONDITION
                            && c["status"] == "True"
                            && c["message"]
                                .as_str()
                                .is_some_and(|m| m.contains("joined; reports closed with step 1/4"))
                    })
                });
            closed.is_some_and(|why| why.contains("has Node")) && succeeded
        },
    )
    .await;
    // A later report with the node's own token is refused and changes nothing.
    let late = run("2", "echo late >&2; exit 3");
    assert_eq!(late.status.code(), Some(3), "the step's exit code is kept");
    let reports = Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .get(&report_name)
        .await
        .unwrap()
        .data
        .unwrap();
    assert!(!reports.contains_key("step-002"), "{reports:?}");
    let condition = env.report_condition(&machine).await;
    assert_eq!(condition["status"], "True", "{condition}");
    env.stop_controllers().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_handed_over_for_remediation_is_replaced() {
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c6", Some("c6-cp")).await;
    env.kcp("c6-cp", "c6", 3, "v1.31.2", 1).await;
    env.converge("three Machines", || settled(&env, "c6-cp", 3, "v1.31.2"))
        .await;
    let before: BTreeSet<String> = env
        .kcp_machines("c6-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let sick = before.iter().next_back().unwrap().clone();
    // What a MachineHealthCheck writes on a KCP-owned Machine it finds unhealthy.
    env.patch_status(
        &machines_r(),
        &sick,
        json!({"status": {"conditions": [{"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    )
    .await;
    env.converge("the replacement", || async {
        let names: BTreeSet<String> = env
            .kcp_machines("c6-cp")
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        !names.contains(&sick) && settled(&env, "c6-cp", 3, "v1.31.2").await
    })
    .await;
    assert!(env.etcd.removed.lock().unwrap().contains(&sick));
    assert!(!env.etcd.names().contains(&sick));
    let after: BTreeSet<String> = env
        .kcp_machines("c6-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(
        env.etcd.names(),
        after,
        "removed {:?}",
        env.etcd.removed.lock().unwrap()
    );
    assert_eq!(env.inits("c6").len(), 1);
    env.stop_controllers().await;
}

fn annotation(object: &DynamicObject, key: &str) -> Option<String> {
    object.annotations().get(key).cloned()
}

/// `rollout.before.certificatesExpiryDays`: each control-plane Machine's certificate expiry is
/// recorded on its KubeadmConfig from its Node's registration (plus a year); a Machine whose
/// certificates expire within the days (here by the Machine annotation, the user's override, as
/// the test cannot wait a year) is rolled out like an outdated one, and only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_expiring_within_the_days_roll_the_machine_out() {
    use capstan_kubeadm::controlplane::{
        ANNOTATION_CERTIFICATES_EXPIRY, NODE_CERTIFICATE_VALIDITY,
    };
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c8", Some("c8-cp")).await;
    env.kcp("c8-cp", "c8", 3, "v1.31.2", 1).await;
    env.patch(
        &kcps_r(),
        "c8-cp",
        json!({"spec": {"rollout": {"before": {"certificatesExpiryDays": 21}}}}),
    )
    .await;
    env.converge("three Machines", || settled(&env, "c8-cp", 3, "v1.31.2"))
        .await;
    let before: BTreeSet<String> = env
        .kcp_machines("c8-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    // The nodes register (the test's nodes are named after their Machines).
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.workload.clone());
    let mut registered = BTreeMap::new();
    for name in &before {
        let node = nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
        let created: jiff::Timestamp = node
            .metadata
            .creation_timestamp
            .unwrap()
            .0
            .to_string()
            .parse()
            .unwrap();
        registered.insert(name.clone(), created);
    }
    // A Node change is not watched by the control plane: a spec-neutral touch wakes it.
    env.patch(
        &kcps_r(),
        "c8-cp",
        json!({"metadata": {"annotations": {"test/touch": "1"}}}),
    )
    .await;
    env.converge("the expiries to be recorded", || async {
        let configs = env
            .api(&configs_r())
            .list(&ListParams::default().labels("cluster.x-k8s.io/control-plane-name=c8-cp"))
            .await
            .unwrap()
            .items;
        configs.len() == 3
            && configs
                .iter()
                .all(|c| annotation(c, ANNOTATION_CERTIFICATES_EXPIRY).is_some())
    })
    .await;
    for name in &before {
        let config = env.api(&configs_r()).get(name).await.unwrap();
        let recorded: jiff::Timestamp = annotation(&config, ANNOTATION_CERTIFICATES_EXPIRY)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            recorded,
            registered[name] + NODE_CERTIFICATE_VALIDITY,
            "{name}"
        );
    }
    // A year left on each: nothing rolls.
    assert!(settled(&env, "c8-cp", 3, "v1.31.2").await);

    // One Machine's certificates expire in 10 days.
    let expiring = before.iter().next().unwrap().clone();
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 10))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    env.patch(
        &machines_r(),
        &expiring,
        json!({"metadata": {"annotations": {ANNOTATION_CERTIFICATES_EXPIRY: soon}}}),
    )
    .await;
    let saw_reason = std::sync::atomic::AtomicBool::new(false);
    env.converge("the expiring Machine to be replaced", || async {
        let rolling = env.kcp_status("c8-cp").await["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "RollingOut"
                        && c["message"]
                            .as_str()
                            .unwrap_or_default()
                            .contains("1 with certificates expiring within 21 days")
                })
            });
        if rolling {
            saw_reason.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let names: BTreeSet<String> = env
            .kcp_machines("c8-cp")
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        !names.contains(&expiring) && settled(&env, "c8-cp", 3, "v1.31.2").await
    })
    .await;
    assert!(
        saw_reason.load(std::sync::atomic::Ordering::Relaxed),
        "RollingOut named the certificates"
    );
    let after: BTreeSet<String> = env
        .kcp_machines("c8-cp")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(
        before.intersection(&after).count(),
        2,
        "only the expiring Machine was replaced: {before:?} → {after:?}"
    );
    env.stop_controllers().await;
}

/// The admin kubeconfig's client certificate is renewed once less than half of its year is left:
/// the workload API (a simulated cluster serving HTTPS with the cluster CA) accepts the old
/// certificate until then and the new one after; a kubeconfig Secret the control plane does not
/// own is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_expiry_kubeconfig_is_renewed_and_both_certificates_work() {
    use capstan_kubeadm::certs::{self, KeyMaterial};
    use capstan_kubeadm::controlplane::ANNOTATION_KUBECONFIG_EXPIRY;
    use k8s_openapi::api::core::v1::Namespace;
    let mut env = Env::start().await;
    env.start_controllers();
    env.cluster("c9", Some("c9-cp")).await;
    env.kcp("c9-cp", "c9", 1, "v1.31.2", 1).await;
    let b64 = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    let value_of =
        |secret: Secret| String::from_utf8(secret.data.unwrap()["value"].0.clone()).unwrap();
    env.converge("the kubeconfig", || async {
        env.secret("c9-kubeconfig").await.is_some()
    })
    .await;
    let first = value_of(env.secret("c9-kubeconfig").await.unwrap());
    let ca_secret = env.secret("c9-ca").await.unwrap().data.unwrap();
    let ca = KeyMaterial {
        cert: String::from_utf8(ca_secret["tls.crt"].0.clone()).unwrap(),
        key: String::from_utf8(ca_secret["tls.key"].0.clone()).unwrap(),
    };
    let fresh = certs::kubeconfig_client_expiry(first.as_bytes())
        .unwrap()
        .unwrap();
    assert!(!certs::renewal_due(fresh, jiff::Timestamp::now()));

    // The workload API, served over HTTPS with a certificate from the cluster CA.
    let workload = capstan_sim::workload::SimCluster::start(ClusterKey::new(NS, "c9"), None)
        .await
        .unwrap();
    assert!(
        capstan_sim::listener::ensure(
            &env.client,
            &workload,
            capstan_sim::listener::Bind::AnyLoopbackPort
        )
        .await
        .unwrap()
    );
    let url = workload.url().unwrap();
    let works = |kubeconfig: String| {
        let url = url.clone();
        async move {
            let kubeconfig = kubeconfig.replace("https://192.0.2.10:6443", &url);
            let client = capstan_workload::client_from_kubeconfig_bytes(kubeconfig.as_bytes())
                .await
                .unwrap();
            Api::<Namespace>::all(client)
                .list(&ListParams::default())
                .await
                .is_ok()
        }
    };
    assert!(works(first.clone()).await);
    // A certificate from another CA is refused: the check is real.
    let stranger_ca = certs::generate(certs::Purpose::ClusterCa).unwrap();
    let stranger =
        certs::client_certificate(&stranger_ca, "kubernetes-admin", Some("system:masters"))
            .unwrap();
    assert!(
        !works(certs::kubeconfig(
            "c9",
            "https://192.0.2.10:6443",
            &ca,
            &stranger
        ))
        .await
    );

    // 300 days into its year: 65 days left, inside the renewal window, still valid.
    let old = certs::client_certificate_issued_at(
        &ca,
        "kubernetes-admin",
        Some("system:masters"),
        jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * 300),
    )
    .unwrap();
    let old_kubeconfig = certs::kubeconfig("c9", "https://192.0.2.10:6443", &ca, &old);
    let old_expiry = certs::kubeconfig_client_expiry(old_kubeconfig.as_bytes())
        .unwrap()
        .unwrap();
    assert!(certs::renewal_due(old_expiry, jiff::Timestamp::now()));
    assert!(
        works(old_kubeconfig.clone()).await,
        "the old certificate is accepted until it expires"
    );
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .patch(
            "c9-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"value": b64(&old_kubeconfig)}})),
        )
        .await
        .unwrap();
    assert_eq!(
        value_of(env.secret("c9-kubeconfig").await.unwrap()),
        old_kubeconfig
    );
    // The Secret is not watched by the control plane (its periodic pass would renew it within a
    // minute): a spec-neutral touch wakes it now.
    env.patch(
        &kcps_r(),
        "c9-cp",
        json!({"metadata": {"annotations": {"test/touch": "1"}}}),
    )
    .await;
    env.converge("the renewal", || async {
        value_of(env.secret("c9-kubeconfig").await.unwrap()) != old_kubeconfig
    })
    .await;
    let renewed = value_of(env.secret("c9-kubeconfig").await.unwrap());
    let expires = certs::kubeconfig_client_expiry(renewed.as_bytes())
        .unwrap()
        .unwrap();
    assert!(!certs::renewal_due(expires, jiff::Timestamp::now()));
    assert!(expires > old_expiry);
    assert!(
        works(renewed.clone()).await,
        "the new certificate is valid against the workload API"
    );
    assert!(
        works(old_kubeconfig.clone()).await,
        "the old one is not revoked"
    );
    // The same server and CA; only the client credentials changed.
    let server_line = |k: &str| {
        k.lines()
            .find(|l| l.contains("server:"))
            .unwrap()
            .to_owned()
    };
    assert_eq!(server_line(&renewed), server_line(&old_kubeconfig));
    env.converge("the recorded expiry", || async {
        let kcp = env.api(&kcps_r()).get("c9-cp").await.unwrap();
        annotation(&kcp, ANNOTATION_KUBECONFIG_EXPIRY)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            == Some(expires)
    })
    .await;
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let event = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("KubeconfigCertificateRenewed"))
        .expect("a KubeconfigCertificateRenewed Event");
    assert!(
        !event
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("BEGIN")
    );

    // A kubeconfig Secret someone else wrote (no control-plane owner) is never renewed.
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "c10-kubeconfig", "namespace": NS},
                "data": {"value": b64(&old_kubeconfig)},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    env.cluster("c10", Some("c10-cp")).await;
    env.kcp("c10-cp", "c10", 1, "v1.31.2", 1).await;
    env.converge("the user's kubeconfig to be looked at", || async {
        env.kcp_status("c10-cp").await["observedGeneration"].is_number()
    })
    .await;
    assert_eq!(
        value_of(env.secret("c10-kubeconfig").await.unwrap()),
        old_kubeconfig
    );
    env.stop_controllers().await;
    workload.shutdown.cancel();
}
