//! A real etcd cluster on loopback for the membership tests: `n` etcd processes with mutual TLS
//! from one etcd CA (server and peer certificates for 127.0.0.1, client certificates required), a
//! management API server holding that CA as `<cluster>-etcd`, and a workload API server holding
//! kubeadm's etcd static Pods with their advertise-URL annotations.

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_etcd::KubeadmEtcd;
use capstan_etcd::membership::ANNOTATION_ADVERTISE_CLIENT_URLS;
use capstan_kubeadm::certs::{self, KeyMaterial, Purpose};
use capstan_store::{Store, StoreOptions};
use capstan_testkit::free_port;
use capstan_workload::{ClusterKey, WorkloadAccess, WorkloadError};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, SanType};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A certificate for 127.0.0.1 and localhost, good for serving and for peers' client side.
fn member_certificate(ca: &KeyMaterial, name: &str) -> KeyMaterial {
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, KeyPair::from_pem(&ca.key).unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), name.to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer).unwrap();
    KeyMaterial {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

async fn api_server(dir: &Path) -> ApiServer {
    let store = Store::open(&dir.join("state.db"), StoreOptions::default()).unwrap();
    ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap()
}

/// The workload API of the test's cluster, as the workload access layer hands it out.
struct Workload(Client);

impl WorkloadAccess for Workload {
    fn client<'a>(&'a self, _: &'a ClusterKey) -> BoxFuture<'a, Result<Client, WorkloadError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
    fn forget(&self, _: &ClusterKey) {}
}

struct Member {
    name: String,
    process: Option<Child>,
    log: PathBuf,
}

pub struct EtcdCluster {
    pub key: ClusterKey,
    dir: tempfile::TempDir,
    ca: KeyMaterial,
    members: Vec<Member>,
    workload: ApiServer,
    _servers: Vec<ApiServer>,
}

impl EtcdCluster {
    /// `n` members called m0, m1, … with their static Pods in the workload API.
    pub async fn start(n: usize) -> Self {
        let etcd = capstan_testkit::peers::binary("etcd");
        let dir = tempfile::tempdir().unwrap();
        let ca = certs::generate(Purpose::EtcdCa).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &ca.cert).unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=https://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let cert = member_certificate(&ca, &name);
            let cert_path = dir.path().join(format!("{name}.crt"));
            let key_path = dir.path().join(format!("{name}.key"));
            std::fs::write(&cert_path, &cert.cert).unwrap();
            std::fs::write(&key_path, &cert.key).unwrap();
            let log = dir.path().join(format!("{name}.log"));
            let ca_path = dir.path().join("ca.crt");
            // kubeadm's etcd flags (its static Pod manifest), on loopback ports.
            let process = Command::new(&etcd)
                .args([
                    format!("--name={name}"),
                    format!("--data-dir={}", dir.path().join(&name).display()),
                    format!("--listen-client-urls=https://127.0.0.1:{client}"),
                    format!("--advertise-client-urls=https://127.0.0.1:{client}"),
                    format!("--listen-peer-urls=https://127.0.0.1:{peer}"),
                    format!("--initial-advertise-peer-urls=https://127.0.0.1:{peer}"),
                    format!("--initial-cluster={initial_cluster}"),
                    "--initial-cluster-state=new".to_owned(),
                    "--client-cert-auth=true".to_owned(),
                    "--peer-client-cert-auth=true".to_owned(),
                    format!("--trusted-ca-file={}", ca_path.display()),
                    format!("--peer-trusted-ca-file={}", ca_path.display()),
                    format!("--cert-file={}", cert_path.display()),
                    format!("--key-file={}", key_path.display()),
                    format!("--peer-cert-file={}", cert_path.display()),
                    format!("--peer-key-file={}", key_path.display()),
                    "--listen-metrics-urls=".to_owned(),
                ])
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(std::fs::File::options().append(true).open(&log).unwrap())
                .spawn()
                .unwrap();
            members.push(Member {
                name,
                process: Some(process),
                log,
            });
        }

        let workload_dir = dir.path().join("workload");
        std::fs::create_dir_all(&workload_dir).unwrap();
        let workload = api_server(&workload_dir).await;
        let pods: Api<Pod> = Api::namespaced(in_process_client(workload.router()), "kube-system");
        for (i, (client, _)) in ports.iter().enumerate() {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": format!("etcd-m{i}"), "namespace": "kube-system",
                    "labels": {"component": "etcd", "tier": "control-plane"},
                    "annotations": {ANNOTATION_ADVERTISE_CLIENT_URLS: format!("https://127.0.0.1:{client}")}
                },
                "spec": {"nodeName": format!("m{i}"), "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.6.6-0"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
        Self {
            key: ClusterKey::new("default", "c1"),
            dir,
            ca,
            members,
            workload,
            _servers: Vec::new(),
        }
    }

    /// The real membership, with a management cluster that holds this cluster's etcd CA.
    pub async fn membership(&mut self) -> KubeadmEtcd {
        let ca = self.ca.clone();
        self.membership_holding(&ca).await
    }

    /// The real membership, with a management cluster that holds an etcd CA of another cluster.
    pub async fn membership_with_foreign_ca(&mut self) -> KubeadmEtcd {
        let foreign = certs::generate(Purpose::EtcdCa).unwrap();
        self.membership_holding(&foreign).await
    }

    async fn membership_holding(&mut self, ca: &KeyMaterial) -> KubeadmEtcd {
        let dir = self
            .dir
            .path()
            .join(format!("management-{}", self._servers.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let management = api_server(&dir).await;
        let client = in_process_client(management.router());
        let secret = certs::cluster_secret(
            &Purpose::EtcdCa.secret_name(&self.key.name),
            &self.key.namespace,
            &self.key.name,
            None,
            BTreeMap::from([
                (certs::TLS_CRT.to_owned(), ca.cert.clone().into_bytes()),
                (certs::TLS_KEY.to_owned(), ca.key.clone().into_bytes()),
            ]),
        );
        Api::<Secret>::namespaced(client.clone(), &self.key.namespace)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        self._servers.push(management);
        let workload = Arc::new(Workload(in_process_client(self.workload.router())));
        KubeadmEtcd::new(client, workload)
    }

    /// Stops member `name` (SIGKILL: a machine that died).
    pub fn stop(&mut self, name: &str) {
        let member = self.members.iter_mut().find(|m| m.name == name).unwrap();
        if let Some(mut process) = member.process.take() {
            process.kill().unwrap();
            process.wait().unwrap();
        }
    }

    /// Polls `check` every 200 ms until it gives a value or `limit` passes (etcd gives no readiness
    /// signal a test could wait on); on timeout, fails with the members' logs.
    pub async fn until<T, F, Fut>(&self, limit: Duration, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            if Instant::now() >= deadline {
                let logs: String = self
                    .members
                    .iter()
                    .map(|m| {
                        let text = std::fs::read_to_string(&m.log).unwrap_or_default();
                        let tail: Vec<&str> = text.lines().rev().take(15).collect();
                        format!(
                            "--- {} ---\n{}\n",
                            m.name,
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        )
                    })
                    .collect();
                panic!("no {what} within {limit:?}\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut process) = member.process.take() {
                let _ = process.kill();
                let _ = process.wait();
            }
        }
    }
}
