//! One simulated workload cluster: a capstan API server of its own (the cluster's "kube-apiserver"),
//! reached in-process, and what kubeadm and the kubelets would write into it.

use crate::SimError;
use crate::cloud_config::Bootstrap;
use capstan_apiserver::{ApiServer, Auth};
use capstan_store::{Store, StoreOptions};
use capstan_workload::{ClusterKey, EtcdMember};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The group `kubeadm init` gives its default bootstrap tokens (`auth-extra-groups`), which
/// kubeadm's join RBAC (the CSR auto-approval, reading `kubeadm-config`) is bound to.
const KUBEADM_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// kubeadm's default bootstrap token TTL (`bootstrapTokens[].ttl`).
const KUBEADM_TOKEN_TTL: jiff::SignedDuration = jiff::SignedDuration::from_hours(24);

/// A token's `expiration` as kubeadm writes it: RFC 3339, whole seconds, `KUBEADM_TOKEN_TTL` after
/// `now`.
fn token_expiration(now: jiff::Timestamp) -> String {
    let at = now + KUBEADM_TOKEN_TTL;
    at.round(jiff::Unit::Second)
        .map_or_else(|_| at.to_string(), |t| t.to_string())
}

/// A stand-in for the hash a kubelet computes over a static pod's manifest: 32 hex digits, stable
/// for the same pod and image, different when the image (the version) changes.
fn manifest_hash(pod: &str, image: &str) -> String {
    let fold = |seed: u64| {
        format!("{pod}\n{image}").bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        fold(0xcbf2_9ce4_8422_2325),
        fold(0x8422_2325_cbf2_9ce4)
    )
}

/// The four conditions a kubelet posts, in its order (`Ready` last) and as it words them; when its Node stops
/// reporting, the node lifecycle controller sets all four `Unknown` with one reason.
fn kubelet_conditions(ready: bool, now: &str) -> serde_json::Value {
    let conditions: [(&str, &str, &str, &str); 4] = if ready {
        [
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            (
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            (
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]
    } else {
        let gone = (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        );
        [
            ("MemoryPressure", gone.0, gone.1, gone.2),
            ("DiskPressure", gone.0, gone.1, gone.2),
            ("PIDPressure", gone.0, gone.1, gone.2),
            ("Ready", gone.0, gone.1, gone.2),
        ]
    };
    conditions
        .iter()
        .map(|(kind, status, reason, message)| {
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now})
        })
        .collect()
}
use std::sync::{Arc, Mutex};

/// The static pods kubeadm runs on every control-plane node.
pub const CONTROL_PLANE_COMPONENTS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
];

/// The annotation kubeadm puts on the etcd static Pod: the member's client URL.
pub const ANNOTATION_ETCD_CLIENT_URLS: &str = "kubeadm.kubernetes.io/etcd.advertise-client-urls";
/// The annotation kubeadm puts on the kube-apiserver static Pod: its advertise address and port.
pub const ANNOTATION_APISERVER_ENDPOINT: &str =
    "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint";

/// ConfigMap in the workload's `kube-system`: every node that ran `kubeadm init`, one name a line
/// (key [`INIT_NODES_KEY`]), so that a second init is visible to tests and users.
pub const INIT_RECORD: &str = "capstan-sim-kubeadm-init";
/// The key of [`INIT_RECORD`] that lists the nodes.
pub const INIT_NODES_KEY: &str = "nodes";
/// ConfigMap in the workload's `kube-system`: the etcd members as JSON (key `members`), so that the
/// membership survives a restart of the process that simulates it.
pub const ETCD_RECORD: &str = "capstan-sim-etcd";

/// A running simulated workload cluster.
pub struct SimCluster {
    pub key: ClusterKey,
    pub server: ApiServer,
    pub client: Client,
    /// Stacked etcd: one member per control-plane node.
    pub etcd: Mutex<Vec<EtcdMember>>,
    /// Leadership changed since the last membership change: real etcd then refuses the next
    /// removal for a few seconds (its strict reconfiguration check), so the simulation refuses the
    /// next one once.
    pub leader_changed: std::sync::atomic::AtomicBool,
    /// The loopback HTTPS URL kubectl can use, when the listener runs.
    pub url: Mutex<Option<String>>,
    /// Stops the listener.
    pub shutdown: capstan_runtime::CancellationToken,
    /// Serialises read-modify-writes of the simulator's own records.
    records: tokio::sync::Mutex<()>,
    /// Held while the listener starts, so it starts once.
    pub(crate) listener_start: tokio::sync::Mutex<()>,
    /// Kept so a temporary store lives as long as the cluster.
    _temp: Option<tempfile::TempDir>,
}

impl SimCluster {
    /// The directory of the store of the Cluster `key` with uid `uid` under `state_dir`. The uid
    /// keeps a Cluster created again under the same name from finding its predecessor's store.
    pub fn store_dir(state_dir: &Path, key: &ClusterKey, uid: &str) -> PathBuf {
        state_dir.join(&key.namespace).join(&key.name).join(uid)
    }

    /// Starts the workload API of `key`, storing its objects in `dir` (kept across restarts) or
    /// in a temporary directory; what an earlier run recorded there (etcd members) is read back.
    pub async fn start(key: ClusterKey, dir: Option<PathBuf>) -> Result<Arc<Self>, SimError> {
        let (dir, temp): (PathBuf, _) = match dir {
            Some(dir) => (dir, None),
            None => {
                let temp = tempfile::tempdir().map_err(|source| SimError::Io {
                    what: "creating a temporary directory for a workload store",
                    source,
                })?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        let store = Store::open(
            &dir.join("workload.db"),
            StoreOptions {
                retained_events: 1_000,
                max_batch: 16,
                readers: 1,
                // A workload cluster holds a few dozen objects and the process holds many such
                // stores (one per cluster): small page caches, statement caches, write queues
                // (allocated whole, room for one batch) and watch buffers keep each one cheap.
                // The whole database of one is a few hundred KiB and stays in the kernel's page
                // cache: a page SQLite does not hold is a read of memory, not of the disk, so each
                // connection keeps 16 KiB (at 64, SQLite held ~95 KiB per simulated cluster in a
                // 100-cluster run). The watch buffer keeps its last changed objects alive until
                // they are overwritten; its few watchers that fall further behind catch up from
                // the change log on disk.
                page_cache_kib: 16,
                event_buffer: 16,
                statement_cache: 4,
            },
        )
        .map_err(|source| SimError::Store {
            cluster: key.clone(),
            source,
        })?;
        let server = ApiServer::new(
            store,
            Arc::new(capstan_apiserver::conversion::ModelConverter),
            Auth { tokens: Vec::new() },
        )
        .await
        .map_err(|source| SimError::Server {
            cluster: key.clone(),
            source,
        })?;
        let client = capstan_apiserver::in_process_client(server.router());
        let cluster = Arc::new(Self {
            key,
            server,
            client,
            etcd: Mutex::new(Vec::new()),
            leader_changed: std::sync::atomic::AtomicBool::new(false),
            url: Mutex::new(None),
            shutdown: capstan_runtime::CancellationToken::new(),
            records: tokio::sync::Mutex::new(()),
            listener_start: tokio::sync::Mutex::new(()),
            _temp: temp,
        });
        let members = cluster.recorded_members().await?;
        *cluster.etcd() = members;
        Ok(cluster)
    }

    /// The etcd members an earlier run recorded; without a record (a store from before records
    /// were kept), one member per control-plane Node, the oldest the leader.
    async fn recorded_members(&self) -> Result<Vec<EtcdMember>, SimError> {
        let record = Api::<ConfigMap>::namespaced(self.client.clone(), "kube-system")
            .get_opt(ETCD_RECORD)
            .await
            .map_err(self.api_error("reading the etcd record"))?;
        if let Some(members) = record
            .and_then(|m| m.data)
            .and_then(|d| d.get("members").cloned())
            .and_then(|text| serde_json::from_str::<Vec<RecordedMember>>(&text).ok())
        {
            return Ok(members.into_iter().map(EtcdMember::from).collect());
        }
        let mut nodes = Api::<Node>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map_err(self.api_error("listing Nodes"))?
            .items;
        nodes.retain(|n| {
            n.labels()
                .contains_key("node-role.kubernetes.io/control-plane")
        });
        nodes.sort_by_key(|n| n.creation_timestamp().map(|t| t.0));
        let mut members = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            members.push(EtcdMember {
                name: node.name_any(),
                id: legacy_member_id(&self.key, &node.name_any()),
                healthy: true,
                leader: index == 0,
            });
        }
        Ok(members)
    }

    /// Writes the etcd members to [`ETCD_RECORD`].
    pub async fn record_members(&self) -> Result<(), SimError> {
        let _one_writer = self.records.lock().await;
        let members: Vec<RecordedMember> = self.etcd().iter().map(RecordedMember::from).collect();
        let text = serde_json::to_string(&members).unwrap_or_default();
        self.write_record(ETCD_RECORD, "members", &text).await
    }

    /// Records that node `name` ran `kubeadm init`; returns every node that ever did.
    pub async fn record_init(&self, name: &str) -> Result<Vec<String>, SimError> {
        let _one_writer = self.records.lock().await;
        let mut nodes = self.init_nodes().await?;
        if !nodes.iter().any(|n| n == name) {
            nodes.push(name.to_owned());
            self.write_record(INIT_RECORD, INIT_NODES_KEY, &nodes.join("\n"))
                .await?;
        }
        Ok(nodes)
    }

    /// The nodes that ran `kubeadm init`, from [`INIT_RECORD`].
    pub async fn init_nodes(&self) -> Result<Vec<String>, SimError> {
        let record = Api::<ConfigMap>::namespaced(self.client.clone(), "kube-system")
            .get_opt(INIT_RECORD)
            .await
            .map_err(self.api_error("reading the kubeadm init record"))?;
        Ok(record
            .and_then(|m| m.data)
            .and_then(|d| d.get(INIT_NODES_KEY).cloned())
            .map(|text| {
                text.lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn write_record(&self, name: &str, key: &str, value: &str) -> Result<(), SimError> {
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kube-system",
                "labels": {"app.kubernetes.io/managed-by": "capstan-sim"}},
            "data": {key: value},
        }))
        .unwrap_or_default();
        match maps.create(&PostParams::default(), &map).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => maps
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"data": {key: value}})),
                )
                .await
                .map(|_| ())
                .map_err(self.api_error("writing a simulator record")),
            Err(err) => Err(self.api_error("writing a simulator record")(err)),
        }
    }

    /// The loopback URL of the cluster's HTTPS listener, once it runs.
    pub fn url(&self) -> Option<String> {
        self.url.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_url(&self, url: &str) {
        *self.url.lock().unwrap_or_else(|p| p.into_inner()) = Some(url.to_owned());
    }

    pub(crate) fn etcd(&self) -> std::sync::MutexGuard<'_, Vec<EtcdMember>> {
        // Members are plain data; a panicking holder cannot leave them half-written.
        self.etcd.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the etcd member of control-plane node `name` (the first becomes leader).
    pub fn add_member(&self, name: &str) {
        let mut members = self.etcd();
        if members.iter().any(|m| m.name == name) {
            return;
        }
        let leader = members.is_empty();
        // Real etcd gives each member a random-looking 64-bit id, and a new one to a member that
        // joins again under the same name after its removal: never a position or a count.
        let mut id = rand::random::<u64>();
        while id == 0 || members.iter().any(|m| m.id == id) {
            id = rand::random::<u64>();
        }
        members.push(EtcdMember {
            name: name.to_owned(),
            id,
            healthy: true,
            leader,
        });
    }

    fn api_error(&self, what: &str) -> impl FnOnce(kube::Error) -> SimError {
        let (cluster, what) = (self.key.clone(), what.to_owned());
        move |source| SimError::Workload {
            cluster,
            what,
            source: Box::new(source),
        }
    }

    /// Whether the bootstrap token `id.secret` exists in kube-system and would authenticate.
    pub async fn token_valid(&self, token: &str) -> Result<bool, SimError> {
        let Some((id, secret)) = token.split_once('.') else {
            return Ok(false);
        };
        let name = format!("bootstrap-token-{id}");
        let found = Api::<Secret>::namespaced(self.client.clone(), "kube-system")
            .get_opt(&name)
            .await
            .map_err(self.api_error("reading the bootstrap token"))?;
        // The decision of the workload API's own bootstrap token authenticator (kube-apiserver's:
        // matching secret, not expired, for authentication), made on the stored Secret.
        let stored = found.and_then(|s| serde_json::to_value(s).ok());
        Ok(capstan_apiserver::authn::check_bootstrap_secret(
            id,
            secret,
            stored.as_ref(),
            jiff::Timestamp::now(),
        )
        .is_ok())
    }

    /// Creates the bootstrap tokens `kubeadm init` creates from InitConfiguration, as it writes
    /// them: kubeadm's default TTL (24 h) as `expiration`, both usages, and the group its join
    /// RBAC binds.
    pub async fn create_tokens(&self, tokens: &[String]) -> Result<(), SimError> {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), "kube-system");
        for token in tokens {
            let Some((id, secret)) = token.split_once('.') else {
                continue;
            };
            let object: Secret = serde_json::from_value(json!({
                "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {"token-id": id, "token-secret": secret,
                    "expiration": token_expiration(jiff::Timestamp::now()),
                    "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                    "auth-extra-groups": KUBEADM_TOKEN_GROUP},
            }))
            .unwrap_or_default();
            create_or_keep(&secrets, &object)
                .await
                .map_err(self.api_error("creating a bootstrap token"))?;
        }
        Ok(())
    }

    /// Registers Node `name` as its kubelet would: labels, providerID, addresses, Ready. The
    /// kubelet's version is `kubelet_version` (what the node's image carries), else the
    /// ClusterConfiguration's, else the cluster's.
    pub async fn register_node(
        &self,
        name: &str,
        bootstrap: &Bootstrap,
        control_plane: bool,
        addresses: &[(String, String)],
        kubelet_version: Option<&str>,
    ) -> Result<(), SimError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut labels = bootstrap.node_labels.clone();
        labels.insert("kubernetes.io/hostname".into(), name.to_owned());
        // The kubelet's own labels, then the ones `kubeadm init` marks a control plane with.
        for (key, value) in [
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/arch", "amd64"),
        ] {
            labels.insert(key.into(), value.into());
        }
        if control_plane {
            for key in [
                "node-role.kubernetes.io/control-plane",
                "node.kubernetes.io/exclude-from-external-load-balancers",
            ] {
                labels.insert(key.into(), String::new());
            }
        }
        let mut spec = json!({});
        if let Some(id) = &bootstrap.provider_id {
            spec["providerID"] = json!(id);
        }
        if control_plane {
            spec["taints"] =
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }))
        .unwrap_or_default();
        create_or_keep(&nodes, &node)
            .await
            .map_err(self.api_error("registering the Node"))?;
        // A joining kubelet runs the cluster's version, which kubeadm-config records.
        let version = match kubelet_version.or(bootstrap.kubernetes_version.as_deref()) {
            Some(version) => Some(version.to_owned()),
            None => self.cluster_version().await?,
        };
        self.set_node_ready(name, true, version.as_deref(), addresses)
            .await
    }

    /// `kubernetesVersion` of the ClusterConfiguration in `kubeadm-config`.
    pub async fn cluster_version(&self) -> Result<Option<String>, SimError> {
        let map = Api::<ConfigMap>::namespaced(self.client.clone(), "kube-system")
            .get_opt("kubeadm-config")
            .await
            .map_err(self.api_error("reading kubeadm-config"))?;
        Ok(map
            .and_then(|m| m.data)
            .and_then(|d| d.get("ClusterConfiguration").cloned())
            .and_then(|text| {
                text.lines().find_map(|l| {
                    l.trim()
                        .strip_prefix("kubernetesVersion:")
                        .map(|v| v.trim().trim_matches('"').to_owned())
                })
            }))
    }

    /// Writes the Node's Ready condition (and addresses) as its kubelet would.
    pub async fn set_node_ready(
        &self,
        name: &str,
        ready: bool,
        version: Option<&str>,
        addresses: &[(String, String)],
    ) -> Result<(), SimError> {
        let now = capstan_runtime::conditions::now();
        let mut patch = json!({"status": {"conditions": kubelet_conditions(ready, &now)}});
        if !addresses.is_empty() {
            patch["status"]["addresses"] = addresses
                .iter()
                .map(|(t, a)| json!({"type": t, "address": a}))
                .collect();
        }
        if let Some(version) = version {
            patch["status"]["nodeInfo"] = json!({"kubeletVersion": version, "kubeProxyVersion": version,
                "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "containerd://simulated",
                "osImage": "simulated", "kernelVersion": "simulated", "machineID": name, "systemUUID": name, "bootID": name});
        }
        Api::<Node>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(self.api_error("writing the Node status"))?;
        Ok(())
    }

    /// Whether Node `name` exists, and whether it is Ready.
    pub async fn node(&self, name: &str) -> Result<Option<bool>, SimError> {
        let node = Api::<Node>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(self.api_error("reading the Node"))?;
        Ok(node.map(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        }))
    }

    /// The control-plane static pods of node `name`, Running and Ready, annotated as kubeadm
    /// annotates them with the node's `advertise` address: etcd's client URL (which the real etcd
    /// membership reads to find the members) and the API server's endpoint.
    pub async fn start_static_pods(
        &self,
        name: &str,
        version: Option<&str>,
        advertise: Option<&str>,
    ) -> Result<(), SimError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "kube-system");
        // A kubelet's mirror pods are owned by its Node (so they go with it) and carry the
        // manifest's hash as `config.mirror`, by which drains and controllers leave them alone.
        let owner = Api::<Node>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(self.api_error("reading the Node"))?
            .and_then(|node| node.metadata.uid)
            .map(|uid| json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": true}]));
        for component in CONTROL_PLANE_COMPONENTS {
            let pod_name = format!("{component}-{name}");
            let image = format!(
                "registry.k8s.io/{component}:{}",
                version.unwrap_or("v0.0.0")
            );
            let hash = manifest_hash(&pod_name, &image);
            let mut annotations = json!({"kubernetes.io/config.source": "file",
                "kubernetes.io/config.hash": hash, "kubernetes.io/config.mirror": hash,
                "kubernetes.io/config.seen": capstan_runtime::conditions::now()});
            if let Some(address) = advertise {
                let host = if address.contains(':') {
                    format!("[{address}]")
                } else {
                    address.to_owned()
                };
                match component {
                    "etcd" => {
                        annotations[ANNOTATION_ETCD_CLIENT_URLS] =
                            json!(format!("https://{host}:2379"));
                    }
                    "kube-apiserver" => {
                        annotations[ANNOTATION_APISERVER_ENDPOINT] = json!(format!("{host}:6443"));
                    }
                    _ => {}
                }
            }
            let mut metadata = json!({"name": pod_name, "namespace": "kube-system",
                "labels": {"component": component, "tier": "control-plane"},
                "annotations": annotations});
            if let Some(owner) = &owner {
                metadata["ownerReferences"] = owner.clone();
            }
            let pod: Pod = serde_json::from_value(json!({
                "metadata": metadata,
                "spec": {"nodeName": name, "containers": [{"name": component, "image": image}]},
            }))
            .unwrap_or_default();
            create_or_keep(&pods, &pod)
                .await
                .map_err(self.api_error("creating a static pod"))?;
            let now = capstan_runtime::conditions::now();
            let patch = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ]}});
            pods.patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(self.api_error("writing a static pod's status"))?;
        }
        Ok(())
    }

    /// The `kubeadm-config` ConfigMap `kubeadm init` writes (ClusterConfiguration as YAML).
    pub async fn write_kubeadm_config(&self, bootstrap: &Bootstrap) -> Result<(), SimError> {
        let configuration = bootstrap.cluster_configuration.clone().unwrap_or_default();
        let text = capstan_manifest::to_yaml(&configuration);
        let map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
            "data": {"ClusterConfiguration": text},
        }))
        .unwrap_or_default();
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        create_or_keep(&maps, &map)
            .await
            .map_err(self.api_error("writing kubeadm-config"))?;
        Ok(())
    }

    /// Names of the Nodes registered.
    pub async fn node_names(&self) -> Result<Vec<String>, SimError> {
        Ok(Api::<Node>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map_err(self.api_error("listing Nodes"))?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect())
    }
}

/// The id of a member rebuilt from the Nodes of a store that kept no etcd record: stable for the
/// same cluster and Node (FNV-1a of both), spread over 64 bits as real etcd ids are.
fn legacy_member_id(cluster: &ClusterKey, node: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("{cluster}/{node}").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.max(1)
}

/// An etcd member as [`ETCD_RECORD`] keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedMember {
    name: String,
    id: u64,
    healthy: bool,
    leader: bool,
}

impl From<&EtcdMember> for RecordedMember {
    fn from(m: &EtcdMember) -> Self {
        Self {
            name: m.name.clone(),
            id: m.id,
            healthy: m.healthy,
            leader: m.leader,
        }
    }
}

impl From<RecordedMember> for EtcdMember {
    fn from(m: RecordedMember) -> Self {
        Self {
            name: m.name,
            id: m.id,
            healthy: m.healthy,
            leader: m.leader,
        }
    }
}

async fn create_or_keep<K>(api: &Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_after_kubeadms_default_ttl() {
        let now: jiff::Timestamp = "2026-12-02T12:00:00.7Z".parse().unwrap();
        assert_eq!(token_expiration(now), "2026-12-03T12:00:01Z");
    }

    #[test]
    fn a_node_has_the_four_kubelet_conditions_ready_or_not() {
        let ready = kubelet_conditions(true, "t");
        let kinds: Vec<&str> = ready
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert_eq!(ready[3]["status"], "True");
        assert!(
            ready.as_array().unwrap()[..3]
                .iter()
                .all(|c| c["status"] == "False")
        );
        assert_eq!(ready[2]["reason"], "KubeletHasSufficientPID");
        let gone = kubelet_conditions(false, "t");
        assert!(
            gone.as_array()
                .unwrap()
                .iter()
                .all(|c| c["status"] == "Unknown" && c["reason"] == "NodeStatusUnknown")
        );
    }

    #[test]
    fn a_static_pods_hash_follows_its_image() {
        let a = manifest_hash("etcd-cp-0", "registry.k8s.io/etcd:v1.35.4");
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            a,
            manifest_hash("etcd-cp-0", "registry.k8s.io/etcd:v1.35.4")
        );
        assert_ne!(
            a,
            manifest_hash("etcd-cp-0", "registry.k8s.io/etcd:v1.35.5")
        );
    }
}
