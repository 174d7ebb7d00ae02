//! The KubeadmConfig controller (`bootstrap.cluster.x-k8s.io/v1beta2`): a Machine's bootstrap data,
//! as Cluster API's kubeadm bootstrap provider makes it.
//!
//! One pass:
//! 1. Find the Machine (owner reference, else the Machine whose `spec.bootstrap.configRef` names
//!    the config) and its Cluster; fold bootstrap reports into `BootstrapSucceeded`. Once the
//!    Machine has its `nodeRef` the bootstrap has ended: close the config's reports
//!    ([`report::close`]), so its token takes nothing more.
//! 2. Data already written (Secret `<config>`): keep a joining node's bootstrap token alive in the
//!    workload cluster until the Machine has a `nodeRef`; nothing is ever rendered twice.
//! 3. Wait for the Cluster's `controlPlaneEndpoint`.
//! 4. Control plane not initialised (`Cluster.status.initialization.controlPlaneInitialized`):
//!    workers and joining control planes wait. The files' `contentFrom` and the users'
//!    `passwdFrom` Secrets are resolved, their sizes bounded before any is read
//!    ([`MAX_BOOTSTRAP_DATA_BYTES`]); then a control-plane config with init/cluster
//!    configuration takes the init lock (ConfigMap `<cluster>-lock`, data `lock-information`
//!    `{"machineName": …}`, owned by the Cluster, as Cluster API keeps it) and renders
//!    `kubeadm init`. The lock outlives restarts; it is released once the control plane is
//!    initialised, or taken over when its holder Machine no longer exists. So `kubeadm init` is
//!    rendered for one Machine per cluster.
//! 5. Initialised: create a bootstrap token in the workload cluster (Secret
//!    `kube-system/bootstrap-token-<id>`, type `bootstrap.kubernetes.io/token`) and render
//!    `kubeadm join` (with `controlPlane` and the cluster's keys on control-plane Machines).
//! 6. Write the data Secret (`cluster.x-k8s.io/secret`, keys `value` and `format`, owned by the
//!    config) and then status: `dataSecretName`, `initialization.dataSecretCreated`, `ready`,
//!    conditions.
//!
//! Conditions: `Ready`, `DataSecretAvailable` (reasons `WaitingForMachine`,
//! `WaitingForControlPlaneEndpoint`, `WaitingForControlPlaneInitialized`, `WaitingForInitLock`,
//! `WaitingForWorkloadCluster`, `InvalidSpec`, `MissingSecret`, `BootstrapDataTooLarge`,
//! `DataSecretCreated`) and
//! `BootstrapSucceeded` from the node's reports ([`crate::report`]).

use crate::certs::{self, CertError, ClusterCertificates, KeyMaterial, Purpose};
use crate::cloudinit::{self, BootstrapData, Reporting, Role, WriteFile};
use crate::kubeadm_api::{self, ClusterFacts, Discovery, KubeVersion};
use crate::report;
use capstan_model::capi::v1beta2::{Cluster, Machine};
use capstan_model::kubeadm::v1beta2::KubeadmConfig;
use capstan_model::meta::{Condition, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::secrets::SecretCache;
use capstan_runtime::tables::ObjectCaches;
use capstan_runtime::watches::{owners_of_kind, watches_cached};
use capstan_runtime::{Action, Context, EventType, Reconciler};
use capstan_workload::{ClusterKey, SharedWorkloadAccess, WorkloadError};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Name of the controller.
pub const CONTROLLER: &str = "kubeadm-bootstrap";
/// Data key of the init lock ConfigMap (as Cluster API names it).
pub const LOCK_KEY: &str = "lock-information";
/// Annotation on the data Secret naming the bootstrap token id (the id is public; the secret half
/// is only in the data).
pub const ANNOTATION_TOKEN_ID: &str = "bootstrap.capstan.io/token-id";
/// Default lifetime of bootstrap tokens (Cluster API's default).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// Condition type: the bootstrap data Secret exists.
pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
/// How often a waiting config is looked at again.
const WAITING: Duration = Duration::from_secs(60);
/// How often a config whose data exists is looked at again.
const RESYNC: Duration = Duration::from_secs(600);
/// How long to wait before looking again at something no watch reports (the workload cluster).
const POLL: Duration = Duration::from_secs(10);

/// Why a bootstrap reconcile failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("workload cluster")]
    Workload(#[from] WorkloadError),
    #[error("certificates")]
    Certs(#[from] CertError),
    #[error("rendering the cloud-config")]
    Render(#[from] cloudinit::CloudInitError),
    #[error("{kind} {name} has no namespace")]
    NoNamespace { kind: &'static str, name: String },
    #[error("decoding Cluster {namespace}/{name}")]
    DecodeCluster {
        namespace: String,
        name: String,
        source: serde_json::Error,
    },
}

pub(crate) fn api_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> BootstrapError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| BootstrapError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// What the bootstrap controller needs besides the API.
#[derive(Clone)]
pub struct BootstrapSettings {
    /// Access to workload clusters (bootstrap tokens); without it joins wait.
    pub workloads: Option<SharedWorkloadAccess>,
    /// The base URL of the report server nodes can reach; `None` renders no reporting.
    pub report_base_url: Option<String>,
    /// Lifetime of bootstrap tokens (extended while less than [`Self::refresh_below`] is left).
    pub token_ttl: Duration,
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        Self {
            workloads: None,
            report_base_url: None,
            token_ttl: DEFAULT_TOKEN_TTL,
        }
    }
}

impl BootstrapSettings {
    /// A token whose remaining lifetime is below this is extended.
    pub fn refresh_below(&self) -> Duration {
        self.token_ttl * 2 / 3
    }
}

/// The KubeadmConfig controller.
pub struct BootstrapController {
    settings: BootstrapSettings,
    /// The uids of Clusters whose init lock this process has released since their control plane
    /// was initialized: a lock is never taken again once it is, so one release each is enough
    /// (before, every reconcile of every KubeadmConfig of an initialized cluster deleted it again).
    released_locks: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// At most this many released locks are remembered; beyond it, memory starts over (and each
/// initialized cluster's lock is released once more, which finds it gone).
const REMEMBERED_RELEASES: usize = 65_536;

impl BootstrapController {
    pub fn new(settings: BootstrapSettings) -> Self {
        Self {
            settings,
            released_locks: std::sync::Mutex::default(),
        }
    }
}

/// The KubeadmConfig kind, read untyped so no field of the spec is lost.
pub fn kubeadm_config_resource() -> ApiResource {
    ApiResource {
        group: "bootstrap.cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
        kind: "KubeadmConfig".into(),
        plural: "kubeadmconfigs".into(),
    }
}

/// What a pass decided, before status is written.
enum Outcome {
    /// The data Secret exists.
    Ready { created_now: Option<Role> },
    /// Not yet; the reason and message go into `DataSecretAvailable`.
    Waiting {
        reason: &'static str,
        message: String,
        requeue: Option<Duration>,
        warn: bool,
    },
}

fn waiting(reason: &'static str, message: impl Into<String>) -> Outcome {
    Outcome::Waiting {
        reason,
        message: message.into(),
        requeue: None,
        warn: false,
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_not_found())
}

fn owner_reference<K: Resource<DynamicType = ()>>(object: &K, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        controller: controller.then_some(true),
        block_owner_deletion: controller.then_some(true),
    }
}

/// A Cluster read untyped, as the typed model.
pub(crate) fn typed_cluster(raw: &DynamicObject) -> Result<Cluster, BootstrapError> {
    let decode_error = |source| BootstrapError::DecodeCluster {
        namespace: raw.namespace().unwrap_or_default(),
        name: raw.name_any(),
        source,
    };
    serde_json::to_value(raw)
        .and_then(serde_json::from_value)
        .map_err(decode_error)
}

/// The Machine a config bootstraps: its owner from the process's cache of Machines (this
/// controller's Machine trigger records every change there before it wakes the config), else the
/// Machine of the config's cluster that names it (listed live).
async fn find_machine(
    context: &Context,
    config: &KubeadmConfig,
    namespace: &str,
) -> Result<Option<Machine>, BootstrapError> {
    let machines: Api<Machine> = Api::namespaced(context.client().clone(), namespace);
    if let Some(owner) = config
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with("cluster.x-k8s.io/"))
    {
        return Ok(context
            .objects()
            .typed::<Machine>()
            .get(namespace, &owner.name)
            .await
            .map_err(api_error("reading", "Machine", namespace, &owner.name))?
            .map(Arc::unwrap_or_clone));
    }
    let name = config.name_any();
    let mut params = ListParams::default();
    if let Some(cluster) = config.labels().get(LABEL_CLUSTER_NAME) {
        params = params.labels(&format!("{LABEL_CLUSTER_NAME}={cluster}"));
    }
    Ok(machines
        .list(&params)
        .await
        .map_err(api_error("listing", "Machine", namespace, ""))?
        .items
        .into_iter()
        .find(|m| {
            m.spec
                .bootstrap
                .config_ref
                .as_ref()
                .is_some_and(|r| r.kind == "KubeadmConfig" && r.name == name)
        }))
}

/// Whether the Cluster says its control plane is initialised.
pub fn control_plane_initialized(cluster: &Cluster) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.get("controlPlaneInitialized"))
        .and_then(Value::as_bool)
        == Some(true)
}

fn endpoint(cluster: &Cluster) -> Option<(String, u16)> {
    let endpoint = cluster.spec.control_plane_endpoint.as_ref()?;
    if endpoint.host.is_empty() {
        return None;
    }
    let port = u16::try_from(endpoint.port)
        .ok()
        .filter(|p| *p != 0)
        .unwrap_or(6443);
    Some((endpoint.host.clone(), port))
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A new bootstrap token `id.secret`.
pub fn new_bootstrap_token() -> (String, String) {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut pick = |n: usize| -> String {
        (0..n)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect()
    };
    (pick(6), pick(16))
}

fn expiration(ttl: Duration) -> String {
    let at = jiff::Timestamp::now()
        + jiff::SignedDuration::from_secs(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2));
    at.round(jiff::Unit::Second)
        .map_or_else(|_| at.to_string(), |t| t.to_string())
}

/// The workload-cluster Secret of bootstrap token `id.secret`.
pub fn bootstrap_token_secret(id: &str, secret: &str, ttl: Duration) -> Secret {
    let data = [
        ("token-id", id.to_owned()),
        ("token-secret", secret.to_owned()),
        ("expiration", expiration(ttl)),
        ("usage-bootstrap-authentication", "true".to_owned()),
        ("usage-bootstrap-signing", "true".to_owned()),
        (
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token".to_owned(),
        ),
        (
            "description",
            "Machine bootstrap token, created by capstan".to_owned(),
        ),
    ];
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
}

/// The most bytes of bootstrap data a machine may have: the cloud-config in its data Secret,
/// and the file contents and passwords that go into it. The data Secret is written through the
/// API, whose write limit is 3 MiB, and a Secret's values travel base64-encoded (4/3 of their
/// size): 2 MiB of data is 2.67 MiB on the wire, leaving room for the rest of the Secret.
pub const MAX_BOOTSTRAP_DATA_BYTES: usize = 2 * 1024 * 1024;

/// Condition reason: the bootstrap data would be over [`MAX_BOOTSTRAP_DATA_BYTES`].
pub const REASON_DATA_TOO_LARGE: &str = "BootstrapDataTooLarge";

/// A size for messages: bytes below 1 KiB, else KiB or MiB with one decimal, and the bytes.
fn size_text(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    let tenths = |unit: usize| {
        let tenths = bytes.saturating_mul(10) / unit;
        format!("{}.{}", tenths / 10, tenths % 10)
    };
    if bytes >= MIB {
        format!("{} MiB ({bytes} bytes)", tenths(MIB))
    } else if bytes >= KIB {
        format!("{} KiB ({bytes} bytes)", tenths(KIB))
    } else {
        format!("{bytes} bytes")
    }
}

/// Why a config's files cannot be had (yet): the message says what to fix.
enum Unresolved {
    /// A referenced Secret or key does not exist.
    Missing(String),
    /// The contents add up to more than [`MAX_BOOTSTRAP_DATA_BYTES`].
    TooLarge(String),
}

/// One key of a Secret the cache holds, not yet read.
struct SecretValue {
    secret: Arc<Secret>,
    key: String,
    namespace: String,
}

impl SecretValue {
    fn len(&self) -> usize {
        self.secret
            .data
            .as_ref()
            .and_then(|d| d.get(&self.key))
            .map_or(0, |v| v.0.len())
    }

    fn text(&self) -> String {
        secret_text(&self.secret, &self.key).unwrap_or_default()
    }
}

/// Where a file's content comes from.
enum Content<'a> {
    Inline(&'a str),
    Secret(SecretValue),
}

impl Content<'_> {
    fn len(&self) -> usize {
        match self {
            Content::Inline(text) => text.len(),
            Content::Secret(value) => value.len(),
        }
    }

    fn text(&self) -> String {
        match self {
            Content::Inline(text) => (*text).to_owned(),
            Content::Secret(value) => value.text(),
        }
    }

    /// Where file `index` at `path` gets this content from, for messages.
    fn origin(&self, index: usize, path: &str) -> String {
        match self {
            Content::Inline(_) => format!("spec.files[{index}] ({path})"),
            Content::Secret(value) => format!(
                "spec.files[{index}] ({path}) from key {:?} of Secret {}/{}",
                value.key,
                value.namespace,
                value.secret.name_any()
            ),
        }
    }
}

impl BootstrapController {
    /// Keeps the token of a joining node alive until its Machine has a `nodeRef`. Returns when to
    /// look again.
    async fn refresh_token(
        &self,
        data: &Secret,
        machine: &Machine,
        cluster: &ClusterKey,
    ) -> Result<Option<Duration>, BootstrapError> {
        let Some(id) = data.annotations().get(ANNOTATION_TOKEN_ID) else {
            return Ok(None);
        };
        if machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .is_some()
        {
            return Ok(None);
        }
        let Some(workloads) = &self.settings.workloads else {
            return Ok(None);
        };
        let client = match workloads.client(cluster).await {
            Ok(client) => client,
            Err(err) => {
                tracing::debug!(cluster = %cluster, error = %err, "token refresh waits for the workload API");
                return Ok(Some(POLL));
            }
        };
        let tokens: Api<Secret> = Api::namespaced(client, "kube-system");
        let name = format!("bootstrap-token-{id}");
        let ttl = self.settings.token_ttl;
        match tokens.get_opt(&name).await.map_err(api_error(
            "reading",
            "workload Secret",
            "kube-system",
            &name,
        ))? {
            Some(token) => {
                let remaining = secret_text(&token, "expiration")
                    .and_then(|e| e.parse::<jiff::Timestamp>().ok())
                    .map(|at| at.duration_since(jiff::Timestamp::now()));
                let below = jiff::SignedDuration::try_from(self.settings.refresh_below())
                    .unwrap_or(jiff::SignedDuration::ZERO);
                if remaining.is_none_or(|r| r < below) {
                    let patch = json!({"data": {"expiration": base64_of(&expiration(ttl))}});
                    tokens
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(api_error(
                            "refreshing",
                            "workload Secret",
                            "kube-system",
                            &name,
                        ))?;
                    tracing::info!(cluster = %cluster, token_id = %id, "bootstrap token refreshed");
                }
            }
            None => {
                // Expired and removed by the token cleaner before the node joined: bring the same
                // token back, since the node's data carries it.
                let value = secret_text(data, "value").unwrap_or_default();
                let pattern = format!(r"\b{}\.([a-z0-9]{{16}})\b", regex::escape(id));
                let found = regex::Regex::new(&pattern).ok().and_then(|re| {
                    re.captures(&value)
                        .and_then(|c| c.get(1))
                        .map(|m| m.as_str().to_owned())
                });
                if let Some(secret) = found {
                    match tokens
                        .create(
                            &PostParams::default(),
                            &bootstrap_token_secret(id, &secret, ttl),
                        )
                        .await
                    {
                        Ok(_) => {
                            tracing::info!(cluster = %cluster, token_id = %id, "bootstrap token recreated")
                        }
                        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                        Err(e) => {
                            return Err(api_error(
                                "creating",
                                "workload Secret",
                                "kube-system",
                                &name,
                            )(e));
                        }
                    }
                }
            }
        }
        Ok(Some((ttl / 3).max(Duration::from_secs(1))))
    }

    /// The spec's `files` (their `contentFrom` read from Secrets) and the users' `passwdFrom`
    /// passwords; `Ok(Err(message))` says what to fix.
    ///
    /// Every referenced value is measured before any is read: the Secret cache hands out shared
    /// objects, so a lookup copies nothing, and only once the contents add up to no more than
    /// [`MAX_BOOTSTRAP_DATA_BYTES`] are they copied into the files. Before, 200 `contentFrom`
    /// entries naming a 2 MB Secret were expanded into 400 MB of files (and a cloud-config as
    /// large) per config, only for the write of the data Secret to be refused.
    async fn resolve_files(
        secrets: &SecretCache,
        spec: &Value,
        namespace: &str,
    ) -> Result<Result<(Vec<WriteFile>, Vec<(String, String)>), Unresolved>, BootstrapError> {
        let files = spec
            .get("files")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let users = spec
            .get("users")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut contents = Vec::with_capacity(files.len());
        let mut total = 0usize;
        // The largest single content, for the message: (bytes, where it comes from).
        let mut largest: Option<(usize, String)> = None;
        for (index, file) in files.iter().enumerate() {
            let path = file.get("path").and_then(Value::as_str).unwrap_or_default();
            let field = format!("spec.files[{index}] ({path}): contentFrom");
            let content = match file.pointer("/contentFrom/secret") {
                Some(from) => match Self::referenced(secrets, from, namespace, &field).await? {
                    Ok(found) => Content::Secret(found),
                    Err(message) => return Ok(Err(Unresolved::Missing(message))),
                },
                None => Content::Inline(
                    file.get("content")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
            };
            let size = content.len();
            total = total.saturating_add(size);
            if largest.as_ref().is_none_or(|(bytes, _)| size > *bytes) {
                largest = Some((size, content.origin(index, path)));
            }
            contents.push(content);
        }
        let mut passwords = Vec::new();
        for (index, user) in users.iter().enumerate() {
            let Some(from) = user.pointer("/passwdFrom/secret") else {
                continue;
            };
            let field = format!("spec.users[{index}]: passwdFrom");
            match Self::referenced(secrets, from, namespace, &field).await? {
                Ok(found) => {
                    total = total.saturating_add(found.len());
                    passwords.push((index, found));
                }
                Err(message) => return Ok(Err(Unresolved::Missing(message))),
            }
        }
        if total > MAX_BOOTSTRAP_DATA_BYTES {
            let largest = largest
                .map(|(bytes, origin)| format!("; the largest is {origin}: {}", size_text(bytes)))
                .unwrap_or_default();
            return Ok(Err(Unresolved::TooLarge(format!(
                "spec.files and spec.users add up to {} in {} files, over the {} a machine's bootstrap data may hold (its data Secret must fit the API's 3 MiB write limit){largest}. Put large files into the OS image, or fetch them when the machine boots (preKubeadmCommands)",
                size_text(total),
                files.len(),
                size_text(MAX_BOOTSTRAP_DATA_BYTES),
            ))));
        }
        let mut written = Vec::with_capacity(files.len());
        for (file, content) in files.iter().zip(contents) {
            let text = |field: &str| file.get(field).and_then(Value::as_str);
            written.push(WriteFile {
                path: text("path").unwrap_or_default().to_owned(),
                owner: text("owner").unwrap_or("root:root").to_owned(),
                permissions: text("permissions").unwrap_or("0644").to_owned(),
                encoding: text("encoding").map(str::to_owned),
                append: file.get("append").and_then(Value::as_bool).unwrap_or(false),
                content: content.text(),
            });
        }
        let passwords = passwords
            .into_iter()
            .map(|(index, found)| {
                let name = users[index]
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                (name, found.text())
            })
            .collect();
        Ok(Ok((written, passwords)))
    }

    /// The Secret key `from` (`{name, key}`) names, without reading its value; `Ok(Err(message))`
    /// when the Secret or the key does not exist, saying which of the two (`field` says where the
    /// reference is).
    async fn referenced(
        secrets: &SecretCache,
        from: &Value,
        namespace: &str,
        field: &str,
    ) -> Result<Result<SecretValue, String>, BootstrapError> {
        let name = from.get("name").and_then(Value::as_str).unwrap_or_default();
        let key = from.get("key").and_then(Value::as_str).unwrap_or_default();
        let Some(secret) = secrets
            .get(namespace, name)
            .await
            .map_err(api_error("reading", "Secret", namespace, name))?
        else {
            return Ok(Err(format!(
                "{field} names Secret {namespace}/{name}, which does not exist; create it"
            )));
        };
        if !secret.data.as_ref().is_some_and(|d| d.contains_key(key)) {
            let keys: Vec<&str> = secret
                .data
                .iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .collect();
            return Ok(Err(format!(
                "{field} names key {key:?} of Secret {namespace}/{name}, which has no such key (it has: {}); add the key or fix the reference",
                if keys.is_empty() {
                    "none".to_owned()
                } else {
                    keys.join(", ")
                }
            )));
        }
        Ok(Ok(SecretValue {
            secret,
            key: key.to_owned(),
            namespace: namespace.to_owned(),
        }))
    }

    /// Takes the init lock of `cluster` for `machine`; `Ok(false)` when another Machine holds it.
    async fn acquire_init_lock(
        client: &Client,
        cluster: &Cluster,
        machine: &str,
        namespace: &str,
    ) -> Result<Result<(), String>, BootstrapError> {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let name = format!("{}-lock", cluster.name_any());
        let lock = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    LABEL_CLUSTER_NAME.to_owned(),
                    cluster.name_any(),
                )])),
                owner_references: Some(vec![owner_reference(cluster, false)]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                LOCK_KEY.to_owned(),
                json!({"machineName": machine}).to_string(),
            )])),
            ..ConfigMap::default()
        };
        let existing = match maps.create(&PostParams::default(), &lock).await {
            Ok(_) => return Ok(Ok(())),
            Err(kube::Error::Api(s)) if s.is_already_exists() => maps
                .get_opt(&name)
                .await
                .map_err(api_error("reading", "ConfigMap", namespace, &name))?,
            Err(e) => return Err(api_error("creating", "ConfigMap", namespace, &name)(e)),
        };
        let Some(existing) = existing else {
            return Ok(Err(format!(
                "init lock ConfigMap {name} changed hands; retrying"
            )));
        };
        let holder = existing
            .data
            .as_ref()
            .and_then(|d| d.get(LOCK_KEY))
            .and_then(|v| serde_json::from_str::<Value>(v).ok())
            .and_then(|v| {
                v.get("machineName")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        if holder == machine {
            return Ok(Ok(()));
        }
        let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
        let holder_exists = !holder.is_empty()
            && machines
                .get_opt(&holder)
                .await
                .map_err(api_error("reading", "Machine", namespace, &holder))?
                .is_some();
        if !holder_exists {
            // The holder is gone before the control plane came up: free the lock for the next.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: existing.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match maps.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(api_error("deleting", "ConfigMap", namespace, &name)(e)),
            }
            return Ok(Err(format!(
                "init lock {name} was held by Machine {holder:?}, which no longer exists; released it"
            )));
        }
        Ok(Err(format!(
            "Machine {holder} runs kubeadm init for this cluster (lock ConfigMap {name}); this Machine joins once the control plane is initialized"
        )))
    }

    /// Deletes the init lock of the initialized `cluster`, once per process and cluster.
    async fn release_init_lock(
        &self,
        client: &Client,
        cluster: &Cluster,
        namespace: &str,
    ) -> Result<(), BootstrapError> {
        let uid = cluster.uid();
        if let Some(uid) = &uid
            && self.released_locks.lock().is_ok_and(|l| l.contains(uid))
        {
            return Ok(());
        }
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let name = format!("{}-lock", cluster.name_any());
        match maps.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_error("deleting", "ConfigMap", namespace, &name)(e)),
        }
        if let Some(uid) = uid
            && let Ok(mut locks) = self.released_locks.lock()
        {
            if locks.len() >= REMEMBERED_RELEASES {
                locks.clear();
            }
            locks.insert(uid);
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    async fn decide(
        &self,
        config: &KubeadmConfig,
        spec: &Value,
        machine: &Machine,
        cluster: &Cluster,
        namespace: &str,
        context: &Context,
    ) -> Result<Outcome, BootstrapError> {
        let (client, cache) = (context.client(), context.secrets());
        let name = config.name_any();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let cluster_name = cluster.name_any();
        let key = ClusterKey::new(namespace, &cluster_name);
        let initialized = control_plane_initialized(cluster);
        if initialized {
            self.release_init_lock(client, cluster, namespace).await?;
        }
        // From memory: the Secret trigger records a deletion before this reconcile runs, and one
        // not seen yet is read live.
        if cache
            .get(namespace, &name)
            .await
            .map_err(api_error("reading", "Secret", namespace, &name))?
            .is_some()
        {
            return Ok(Outcome::Ready { created_now: None });
        }
        let Some((host, port)) = endpoint(cluster) else {
            return Ok(waiting(
                "WaitingForControlPlaneEndpoint",
                format!("Cluster {cluster_name} has no spec.controlPlaneEndpoint yet"),
            ));
        };
        if let Some(format) = spec
            .get("format")
            .and_then(Value::as_str)
            .filter(|f| *f != "cloud-config")
        {
            return Ok(Outcome::Waiting {
                reason: "InvalidSpec",
                message: format!(
                    "spec.format {format:?} is not supported; capstan writes cloud-config (remove spec.format or set it to cloud-config)"
                ),
                requeue: None,
                warn: true,
            });
        }
        let Some(version) = machine.spec.version.clone() else {
            return Ok(Outcome::Waiting {
                reason: "InvalidSpec",
                message: format!(
                    "Machine {} has no spec.version; set the Kubernetes version",
                    machine.name_any()
                ),
                requeue: None,
                warn: true,
            });
        };
        let api = match KubeVersion::parse(&version).and_then(KubeVersion::kubeadm_api) {
            Ok(api) => api,
            Err(err) => {
                return Ok(Outcome::Waiting {
                    reason: "InvalidSpec",
                    message: err.to_string(),
                    requeue: None,
                    warn: true,
                });
            }
        };
        let control_plane = machine.labels().contains_key(LABEL_CONTROL_PLANE);
        let has = |field: &str| spec.get(field).is_some_and(|v| !v.is_null());
        let role = if initialized {
            if control_plane {
                Role::JoinControlPlane
            } else {
                Role::JoinWorker
            }
        } else {
            if !control_plane
                || (has("joinConfiguration")
                    && !has("initConfiguration")
                    && !has("clusterConfiguration"))
            {
                return Ok(waiting(
                    "WaitingForControlPlaneInitialized",
                    format!(
                        "waiting for the control plane of Cluster {cluster_name} to be initialized"
                    ),
                ));
            }
            Role::Init
        };
        // Before the init lock: a config whose files cannot be had must not hold it.
        let (files, passwords) = match Self::resolve_files(cache, spec, namespace).await? {
            Ok(resolved) => resolved,
            Err(Unresolved::TooLarge(message)) => {
                return Ok(Outcome::Waiting {
                    reason: REASON_DATA_TOO_LARGE,
                    message,
                    requeue: None,
                    warn: true,
                });
            }
            Err(Unresolved::Missing(message)) => {
                return Ok(Outcome::Waiting {
                    reason: "MissingSecret",
                    message,
                    requeue: Some(POLL),
                    warn: true,
                });
            }
        };
        if role == Role::Init
            && let Err(message) =
                Self::acquire_init_lock(client, cluster, &machine.name_any(), namespace).await?
        {
            return Ok(Outcome::Waiting {
                reason: "WaitingForInitLock",
                message,
                requeue: Some(POLL),
                warn: false,
            });
        }
        let owner_cluster = owner_reference(cluster, false);
        // The keys written to the node: every key pair for control planes, none for workers.
        let certificates: Option<ClusterCertificates>;
        let mut token_id = None;
        let documents = match role {
            Role::Init => {
                certificates = Some(
                    certs::lookup_or_generate(
                        client,
                        cache,
                        namespace,
                        &cluster_name,
                        Some(owner_cluster),
                    )
                    .await?,
                );
                let facts = ClusterFacts {
                    cluster_name: cluster_name.clone(),
                    control_plane_endpoint: host_port(&host, port),
                    kubernetes_version: version.clone(),
                    cluster_network: cluster
                        .spec
                        .cluster_network
                        .as_ref()
                        .and_then(|n| serde_json::to_value(n).ok())
                        .unwrap_or(Value::Null),
                };
                kubeadm_api::init_documents(spec, &facts, api)
            }
            Role::JoinControlPlane | Role::JoinWorker => {
                let ca = lookup_ca(cache, namespace, &cluster_name).await?;
                certificates = if role == Role::JoinControlPlane {
                    certs::lookup(cache, namespace, &cluster_name).await?
                } else {
                    None
                };
                let missing =
                    ca.is_none() || (role == Role::JoinControlPlane && certificates.is_none());
                let (Some(ca), false) = (ca, missing) else {
                    return Ok(Outcome::Waiting {
                        reason: "MissingSecret",
                        message: format!(
                            "the certificate Secrets of Cluster {cluster_name} ({}) are missing; the KubeadmControlPlane creates them",
                            Purpose::ClusterCa.secret_name(&cluster_name)
                        ),
                        requeue: Some(POLL),
                        warn: false,
                    });
                };
                let Some(workloads) = &self.settings.workloads else {
                    return Ok(waiting(
                        "WaitingForWorkloadCluster",
                        "no workload-cluster access is configured, so no bootstrap token can be created",
                    ));
                };
                let workload = match workloads.client(&key).await {
                    Ok(client) => client,
                    Err(err) => {
                        return Ok(Outcome::Waiting {
                            reason: "WaitingForWorkloadCluster",
                            message: format!("creating the bootstrap token: {err}"),
                            requeue: Some(POLL),
                            warn: false,
                        });
                    }
                };
                let (id, secret) = new_bootstrap_token();
                let tokens: Api<Secret> = Api::namespaced(workload, "kube-system");
                tokens
                    .create(
                        &PostParams::default(),
                        &bootstrap_token_secret(&id, &secret, self.settings.token_ttl),
                    )
                    .await
                    .map_err(api_error(
                        "creating",
                        "workload Secret",
                        "kube-system",
                        "bootstrap-token",
                    ))?;
                let discovery = Discovery {
                    api_server_endpoint: host_port(&host, port),
                    token: format!("{id}.{secret}"),
                    ca_cert_hash: certs::ca_cert_hash(
                        &ca,
                        &Purpose::ClusterCa.secret_name(&cluster_name),
                        namespace,
                    )?,
                };
                token_id = Some(id);
                vec![kubeadm_api::join_document(
                    spec,
                    &discovery,
                    role == Role::JoinControlPlane,
                    api,
                )]
            }
        };
        let owner_config = owner_reference(config, true);
        let reporting = match &self.settings.report_base_url {
            Some(base) => {
                let token = report::new_token();
                let secret = report::token_secret(
                    &name,
                    namespace,
                    &cluster_name,
                    owner_config.clone(),
                    &token,
                );
                let stored = certs::create_or_get(&secrets, &secret).await?;
                Some(Reporting {
                    url: report::steps_url(base, namespace, &name),
                    token: secret_text(&stored, report::TOKEN_KEY).unwrap_or(token),
                })
            }
            None => None,
        };
        let cloud_config = cloudinit::render(&BootstrapData {
            role,
            certificates: certificates.as_ref(),
            kubeadm_documents: documents,
            files,
            spec,
            passwords,
            reporting,
        })?;
        // The contents were bounded before they were read; what the cloud-config adds (keys,
        // kubeadm documents, YAML quoting) is bounded here, before the write would be refused.
        if cloud_config.len() > MAX_BOOTSTRAP_DATA_BYTES {
            return Ok(Outcome::Waiting {
                reason: REASON_DATA_TOO_LARGE,
                message: format!(
                    "the bootstrap data would be {}, over the {} a machine's bootstrap data may hold (its data Secret must fit the API's 3 MiB write limit); make spec.files smaller",
                    size_text(cloud_config.len()),
                    size_text(MAX_BOOTSTRAP_DATA_BYTES),
                ),
                requeue: None,
                warn: true,
            });
        }
        let mut data = certs::cluster_secret(
            &name,
            namespace,
            &cluster_name,
            Some(owner_config),
            BTreeMap::from([
                ("value".to_owned(), cloud_config.into_bytes()),
                ("format".to_owned(), b"cloud-config".to_vec()),
            ]),
        );
        if let Some(id) = token_id {
            data.metadata.annotations =
                Some(BTreeMap::from([(ANNOTATION_TOKEN_ID.to_owned(), id)]));
        }
        certs::create_or_get(&secrets, &data).await?;
        Ok(Outcome::Ready {
            created_now: Some(role),
        })
    }
}

/// The cluster CA's key pair (joining nodes pin its public key).
async fn lookup_ca(
    secrets: &SecretCache,
    namespace: &str,
    cluster: &str,
) -> Result<Option<KeyMaterial>, BootstrapError> {
    let name = Purpose::ClusterCa.secret_name(cluster);
    let Some(secret) = secrets
        .get(namespace, &name)
        .await
        .map_err(api_error("reading", "Secret", namespace, &name))?
    else {
        return Ok(None);
    };
    Ok(
        match (
            secret_text(&secret, certs::TLS_CRT),
            secret_text(&secret, certs::TLS_KEY),
        ) {
            (Some(cert), Some(key)) => Some(KeyMaterial { cert, key }),
            _ => None,
        },
    )
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

impl Reconciler for BootstrapController {
    type Object = KubeadmConfig;
    type Error = BootstrapError;

    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn cluster_name(&self, object: &KubeadmConfig) -> Option<String> {
        object.labels().get(LABEL_CLUSTER_NAME).cloned()
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    /// Its data Secret (named as the config) and the Secrets its files are read from: a change
    /// re-renders (a deleted data Secret is written again).
    fn secret_names(&self, config: &KubeadmConfig) -> Vec<String> {
        std::iter::once(config.name_any())
            .chain(config.spec.files.iter().filter_map(|file| {
                file.content_from
                    .as_ref()?
                    .pointer("/secret/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }))
            .collect()
    }

    fn follows_secrets(&self) -> bool {
        true
    }

    fn configure_with_caches(
        &self,
        controller: Controller<KubeadmConfig>,
        client: &Client,
        objects: &ObjectCaches,
    ) -> Controller<KubeadmConfig> {
        // Report ConfigMaps wake their config after the process's cache of them has recorded the
        // change, so each pass reads the report from memory, its absence included. Only the
        // labelled reports are followed, not every ConfigMap of the management cluster.
        let controller = watches_cached(
            controller,
            client,
            objects.typed_labelled::<ConfigMap>(report::REPORT_LABEL),
            |map: ConfigMap| owners_of_kind::<KubeadmConfig, _>(&map),
        );
        watches_cached(
            controller,
            client,
            objects.typed::<Machine>(),
            |machine: Machine| {
                machine
                    .spec
                    .bootstrap
                    .config_ref
                    .as_ref()
                    .filter(|r| r.kind == "KubeadmConfig")
                    .map(|r| {
                        ObjectRef::<KubeadmConfig>::new(&r.name)
                            .within(machine.namespace().as_deref().unwrap_or_default())
                    })
            },
        )
    }

    async fn reconcile(
        &self,
        config: Arc<KubeadmConfig>,
        context: Arc<Context>,
    ) -> Result<Action, BootstrapError> {
        let name = config.name_any();
        let namespace = config
            .namespace()
            .ok_or_else(|| BootstrapError::NoNamespace {
                kind: "KubeadmConfig",
                name: name.clone(),
            })?;
        let client = context.client();
        // The raw spec (fields the typed config does not model), at least as new as the config
        // this reconcile was handed: from the process's cache, read live only when it is behind.
        let spec = match context
            .objects()
            .dynamic(&kubeadm_config_resource())
            .get_at_least(&namespace, &name, config.meta().resource_version.as_deref())
            .await
            .map_err(api_error("reading", "KubeadmConfig", &namespace, &name))?
        {
            Some(object) => object.data.get("spec").cloned().unwrap_or(Value::Null),
            None => return Ok(Action::await_change()),
        };
        let machine = find_machine(&context, &config, &namespace).await?;
        let cluster = match &machine {
            // From the process's table of Clusters, which this controller's Cluster trigger
            // updates before it wakes the Cluster's configs.
            Some(machine) => context
                .clusters()
                .get(&namespace, &machine.spec.cluster_name)
                .await
                .map_err(api_error(
                    "reading",
                    "Cluster",
                    &namespace,
                    &machine.spec.cluster_name,
                ))?
                .map(|raw| typed_cluster(&raw))
                .transpose()?,
            None => None,
        };
        let mut requeue = None;
        let outcome = match (&machine, &cluster) {
            (None, _) => waiting(
                "WaitingForMachine",
                "no Machine references this KubeadmConfig yet",
            ),
            (Some(machine), None) => waiting(
                "WaitingForCluster",
                format!(
                    "Cluster {} of Machine {} does not exist",
                    machine.spec.cluster_name,
                    machine.name_any()
                ),
            ),
            (Some(machine), Some(cluster)) => {
                let outcome = self
                    .decide(&config, &spec, machine, cluster, &namespace, &context)
                    .await?;
                if let Outcome::Ready { .. } = outcome
                    && let Some(data) = context
                        .secrets()
                        .get(&namespace, &name)
                        .await
                        .map_err(api_error("reading", "Secret", &namespace, &name))?
                {
                    requeue = self
                        .refresh_token(
                            &data,
                            machine,
                            &ClusterKey::new(&namespace, cluster.name_any()),
                        )
                        .await?;
                }
                outcome
            }
        };

        // The bootstrap has ended once the Machine has its Node: its report token is good for
        // nothing more, so a report replayed later cannot rewrite how the bootstrap went.
        let report_name = report::report_object_name(&name);
        let node = machine
            .as_ref()
            .and_then(|m| m.status.as_ref())
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|n| n.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut closed_by_node = None;
        if let (Some(node), Some(machine)) = (&node, &machine)
            && let Some(token_secret) = context
                .secrets()
                .get(&namespace, &report_name)
                .await
                .map_err(api_error("reading", "Secret", &namespace, &report_name))?
        {
            closed_by_node = Some(node.clone());
            if report::closed_because(&token_secret).is_none() {
                let why = format!("Machine {} has Node {node}", machine.name_any());
                if report::close(client, &config, &why)
                    .await
                    .map_err(api_error(
                        "closing the bootstrap reports in",
                        "Secret",
                        &namespace,
                        &report_name,
                    ))?
                {
                    tracing::info!(namespace, config = %name, node = %node, "bootstrap reports closed: the Machine has its Node");
                }
            }
        }

        // Status: only the fields this controller owns.
        let now = conditions::now();
        let generation = config.metadata.generation;
        let current = config.status.clone().unwrap_or_default();
        let mut conds: Vec<Condition> = current.conditions.clone();
        let mut changed = false;
        let (ready, data_condition) = match &outcome {
            Outcome::Ready { .. } => (
                true,
                conditions::condition(
                    DATA_SECRET_AVAILABLE,
                    TRUE,
                    "DataSecretCreated",
                    format!("bootstrap data in Secret {name}"),
                    generation,
                ),
            ),
            Outcome::Waiting {
                reason, message, ..
            } => (
                false,
                conditions::condition(
                    DATA_SECRET_AVAILABLE,
                    FALSE,
                    reason,
                    message.clone(),
                    generation,
                ),
            ),
        };
        changed |= conditions::set_condition(&mut conds, data_condition.clone(), &now);
        let mut ready_condition = data_condition.clone();
        ready_condition.type_ = "Ready".into();
        // Reports of the node.
        let mut summary = context
            .objects()
            .typed_labelled::<ConfigMap>(report::REPORT_LABEL)
            .get_watched(&namespace, &report_name)
            .await
            .map_err(api_error("reading", "ConfigMap", &namespace, &report_name))?
            .and_then(|m| m.data.clone())
            .and_then(|d| report::summarize(&d));
        // The Node joined before the node's last reports arrived (the kubelet registers during
        // kubeadm, and reports close then): nothing failed, and the Node is the proof it worked.
        if let (Some(node), Some(current)) = (&closed_by_node, &summary)
            && current.status == conditions::UNKNOWN
        {
            summary = Some(report::Summary {
                status: TRUE,
                reason: report::REASON_SUCCEEDED,
                message: format!(
                    "Node {node} joined; reports closed with {}",
                    current.message
                ),
            });
        }
        let previous_bootstrap = conditions::get(&conds, report::CONDITION).cloned();
        if let Some(summary) = &summary {
            let condition = conditions::condition(
                report::CONDITION,
                summary.status,
                summary.reason,
                summary.message.clone(),
                generation,
            );
            changed |= conditions::set_condition(&mut conds, condition.clone(), &now);
            if summary.status == FALSE {
                ready_condition = condition;
                ready_condition.type_ = "Ready".into();
            }
        }
        changed |= conditions::set_condition(&mut conds, ready_condition, &now);
        let data_name = ready.then(|| name.clone());
        if changed
            || current.ready != Some(ready)
            || (ready && current.data_secret_name != data_name)
            || current.observed_generation != generation
        {
            let mut status = json!({
                "conditions": conds,
                "observedGeneration": generation,
            });
            if ready {
                status["ready"] = json!(true);
                status["dataSecretName"] = json!(name);
                status["initialization"] = json!({"dataSecretCreated": true});
            }
            let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &namespace);
            configs
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await
                .map_err(api_error(
                    "updating status of",
                    "KubeadmConfig",
                    &namespace,
                    &name,
                ))?;
        }
        match &outcome {
            Outcome::Ready {
                created_now: Some(role),
            } => {
                let what = match role {
                    Role::Init => "kubeadm init",
                    Role::JoinControlPlane => "kubeadm join (control plane)",
                    Role::JoinWorker => "kubeadm join",
                };
                context
                    .publish(
                        &*config,
                        EventType::Normal,
                        "DataSecretCreated",
                        "Bootstrap",
                        format!("wrote the bootstrap data ({what}) to Secret {name}"),
                    )
                    .await;
            }
            Outcome::Waiting {
                reason,
                message,
                warn: true,
                ..
            } if conditions::get(&current.conditions, DATA_SECRET_AVAILABLE)
                .and_then(|c| c.message.as_deref())
                != Some(message.as_str()) =>
            {
                context
                    .publish(
                        &*config,
                        EventType::Warning,
                        reason,
                        "Bootstrap",
                        message.clone(),
                    )
                    .await;
            }
            _ => {}
        }
        if let Some(summary) = &summary {
            let is_new = previous_bootstrap
                .as_ref()
                .is_none_or(|p| p.reason.as_deref() != Some(summary.reason));
            if is_new && summary.status == FALSE {
                context
                    .publish(
                        &*config,
                        EventType::Warning,
                        summary.reason,
                        "Bootstrap",
                        summary.message.clone(),
                    )
                    .await;
            }
        }
        // Machines, owned Secrets and ConfigMaps, and labelled configs' Clusters are watched; the
        // requeue covers what is not (a config without the cluster-name label, the workload).
        let requeue = match &outcome {
            Outcome::Waiting { requeue, .. } => requeue.unwrap_or(WAITING),
            Outcome::Ready { .. } => requeue.unwrap_or(RESYNC),
        };
        Ok(Action::requeue(requeue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_messages_have_their_unit_and_the_bytes() {
        assert_eq!(
            size_text(MAX_BOOTSTRAP_DATA_BYTES),
            "2.0 MiB (2097152 bytes)"
        );
        assert_eq!(size_text(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(size_text(12), "12 bytes");
    }

    #[test]
    fn bootstrap_tokens_have_kubeadm_shape() {
        let (id, secret) = new_bootstrap_token();
        let token = format!("{id}.{secret}");
        assert!(
            regex::Regex::new(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
                .unwrap()
                .is_match(&token)
        );
        let secret = bootstrap_token_secret(&id, "0123456789abcdef", Duration::from_secs(900));
        assert_eq!(
            secret.type_.as_deref(),
            Some("bootstrap.kubernetes.io/token")
        );
        assert_eq!(secret.metadata.name, Some(format!("bootstrap-token-{id}")));
        let expiration = secret_text(&secret, "expiration").unwrap();
        let at: jiff::Timestamp = expiration.parse().unwrap();
        assert!(at > jiff::Timestamp::now());
    }
}
