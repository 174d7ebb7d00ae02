//! The `sim-boot` controller: what a `fake://` host would do once provisioned with bootstrap data.
//!
//! One pass per host: skip unless the host is `fake://`, `provisioned`, has `spec.userData` and
//! belongs to a cluster (label `cluster.x-k8s.io/cluster-name`, set when a machine claims it); wait
//! out a `sim.capstan.io/boot-delay`; read the bootstrap data ([`crate::cloud_config`]); then init or
//! join in the workload cluster ([`crate::workload`]). A Node that exists is not registered again,
//! so passes are idempotent; faults are played as the crate documentation says.

use crate::cloud_config::{self, KubeadmAction};
use crate::{ANNOTATION_BOOT_DELAY, ANNOTATION_FAULT, SimError, Simulator};
use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::{Action, Context, EventType, Reconciler};
use capstan_workload::ClusterKey;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const BOOT_CONTROLLER: &str = "sim-boot";
/// How soon a join waiting for the control plane or its token looks again.
const JOIN_RETRY: Duration = Duration::from_secs(2);

/// Whether `host` has a simulated (`fake://`) BMC.
pub fn is_fake(host: &BareMetalHost) -> bool {
    host.spec
        .bmc
        .as_ref()
        .is_some_and(|b| b.address.starts_with("fake://"))
}

/// Boots provisioned `fake://` hosts into their workload clusters.
pub struct BootController {
    sim: Arc<Simulator>,
}

impl BootController {
    pub fn new(sim: Arc<Simulator>) -> Self {
        Self { sim }
    }
}

fn management_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> SimError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| SimError::Management {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// The host's meta data as its config drive carries it (see `capstan-hosts`' config drive).
async fn meta_data(client: &Client, host: &BareMetalHost) -> Result<Map<String, Value>, SimError> {
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let mut meta = Map::new();
    meta.insert("uuid".into(), json!(host.uid().unwrap_or_default()));
    meta.insert("name".into(), json!(name));
    meta.insert("hostname".into(), json!(name));
    if let Some(secret) = host.spec.meta_data.as_ref().and_then(|r| r.name.clone()) {
        let found = Api::<Secret>::namespaced(client.clone(), &namespace)
            .get_opt(&secret)
            .await
            .map_err(management_error("reading", "Secret", &namespace, &secret))?;
        let extra = found
            .and_then(|s| s.data)
            .and_then(|d| d.get("metaData").cloned())
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes.0).ok());
        if let Some(Value::Object(extra)) = extra {
            if let Some(hostname) = extra
                .get("local-hostname")
                .or_else(|| extra.get("local_hostname"))
            {
                meta.insert("hostname".into(), hostname.clone());
            }
            for (k, v) in extra {
                meta.insert(k, v);
            }
        }
    }
    Ok(meta)
}

async fn user_data(client: &Client, host: &BareMetalHost) -> Result<Option<Vec<u8>>, SimError> {
    let namespace = host.namespace().unwrap_or_default();
    let Some(secret) = host.spec.user_data.as_ref().and_then(|r| r.name.clone()) else {
        return Ok(None);
    };
    let found = Api::<Secret>::namespaced(client.clone(), &namespace)
        .get_opt(&secret)
        .await
        .map_err(management_error("reading", "Secret", &namespace, &secret))?;
    Ok(found.and_then(|s| s.data).and_then(|d| {
        d.get("userData")
            .or_else(|| d.get("value"))
            .map(|v| v.0.clone())
    }))
}

/// When the host finished provisioning, from its operation history.
fn provisioned_at(host: &BareMetalHost) -> Option<jiff::Timestamp> {
    host.status
        .as_ref()?
        .operation_history
        .get("provision")?
        .end
        .as_deref()?
        .parse()
        .ok()
}

fn addresses(host: &BareMetalHost) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(hardware) = host.status.as_ref().and_then(|s| s.hardware.as_ref()) {
        for ip in hardware
            .nics
            .iter()
            .filter_map(|n| n.ip.clone())
            .filter(|ip| !ip.is_empty())
        {
            out.push(("InternalIP".to_owned(), ip));
        }
    }
    out
}

impl Reconciler for BootController {
    type Object = BareMetalHost;
    type Error = SimError;

    fn name(&self) -> &'static str {
        BOOT_CONTROLLER
    }

    fn concurrency(&self) -> u16 {
        8
    }

    async fn reconcile(
        &self,
        host: Arc<BareMetalHost>,
        context: Arc<Context>,
    ) -> Result<Action, SimError> {
        let state = host
            .status
            .as_ref()
            .map_or("", |s| s.provisioning.state.as_str());
        let (Some(cluster_name), true, true) = (
            host.labels().get(LABEL_CLUSTER_NAME).cloned(),
            is_fake(&host) && state == "provisioned",
            host.spec.user_data.is_some(),
        ) else {
            return Ok(Action::await_change());
        };
        let fault = host
            .annotations()
            .get(ANNOTATION_FAULT)
            .cloned()
            .unwrap_or_default();
        if fault == "never-join" {
            return Ok(Action::await_change());
        }
        if let Some(delay) = host
            .annotations()
            .get(ANNOTATION_BOOT_DELAY)
            .and_then(|d| d.trim().parse::<u64>().ok())
            && let Some(at) = provisioned_at(&host)
        {
            let up = at + jiff::SignedDuration::from_secs(i64::try_from(delay).unwrap_or(i64::MAX));
            let now = jiff::Timestamp::now();
            if now < up {
                let wait = up.duration_since(now).unsigned_abs();
                return Ok(Action::requeue(wait));
            }
        }
        let client = context.client();
        let namespace = host.namespace().unwrap_or_default();
        let key = ClusterKey::new(namespace.clone(), cluster_name);
        let Some(data) = user_data(client, &host).await? else {
            return Ok(Action::await_change());
        };
        let meta = meta_data(client, &host).await?;
        boot(
            &self.sim,
            &*host,
            &context,
            &key,
            &data,
            &meta,
            &fault,
            &addresses(&host),
        )
        .await
    }
}

/// What a node does with its bootstrap data `data` (meta data `meta`, addresses `addresses`) in
/// workload cluster `key`; Events go to `object` (the host or VM that boots). Idempotent.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn boot<K: kube::Resource<DynamicType = ()>>(
    sim: &Arc<Simulator>,
    object: &K,
    context: &Context,
    key: &ClusterKey,
    data: &[u8],
    meta: &Map<String, Value>,
    fault: &str,
    addresses: &[(String, String)],
) -> Result<Action, SimError> {
    let name_of_object = object.meta().name.clone().unwrap_or_default();
    let bootstrap = match cloud_config::read(data, meta) {
        Ok(bootstrap) => bootstrap,
        Err(err) => {
            context
                .publish(
                    object,
                    EventType::Warning,
                    "BootstrapFailed",
                    "Boot",
                    format!("the node cannot follow its bootstrap data: {err}"),
                )
                .await;
            return Ok(Action::await_change());
        }
    };
    if fault == "bootstrap-fail" {
        let step = bootstrap
            .commands
            .iter()
            .position(|c| c.contains("kubeadm"))
            .unwrap_or(0);
        let command: String = bootstrap
            .commands
            .get(step)
            .map(|c| c.chars().take(80).collect())
            .unwrap_or_default();
        context
            .publish(
                object,
                EventType::Warning,
                "BootstrapFailed",
                "Boot",
                format!("runcmd step {} failed (simulated): {command}", step + 1),
            )
            .await;
        return Ok(Action::await_change());
    }
    let node_name = bootstrap
        .node_name
        .clone()
        .or_else(|| {
            meta.get("hostname")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| name_of_object.clone());
    let (cluster, control_plane) = match bootstrap.action {
        KubeadmAction::Init => {
            let cluster = sim.start_cluster(key).await?;
            if cluster.node(&node_name).await?.is_none() {
                // The configuration before the tokens: a joining node reads the version.
                cluster.write_kubeadm_config(&bootstrap).await?;
                cluster.create_tokens(&bootstrap.init_tokens).await?;
            }
            (cluster, true)
        }
        KubeadmAction::Join { control_plane } => {
            let Some(cluster) = sim.cluster(key) else {
                return Ok(Action::requeue(JOIN_RETRY));
            };
            if cluster.node(&node_name).await?.is_none() {
                let token = bootstrap.token.clone().unwrap_or_default();
                if !cluster.token_valid(&token).await? {
                    let id = token.split_once('.').map_or("", |(id, _)| id);
                    context
                            .publish(
                                object,
                                EventType::Warning,
                                "JoinRefused",
                                "Boot",
                                format!("kubeadm join refused: bootstrap token {id:?} is not in kube-system of workload cluster {key} (missing or expired)"),
                            )
                            .await;
                    return Ok(Action::requeue(JOIN_RETRY));
                }
            }
            (cluster, control_plane)
        }
    };
    match cluster.node(&node_name).await? {
        None => {
            cluster
                .register_node(&node_name, &bootstrap, control_plane, addresses)
                .await?;
            if control_plane {
                cluster
                    .start_static_pods(&node_name, bootstrap.kubernetes_version.as_deref())
                    .await?;
                cluster.add_member(&node_name);
            }
            tracing::info!(cluster = %key, node = %node_name, machine = %name_of_object, "simulated node joined");
            context
                .publish(
                    object,
                    EventType::Normal,
                    "NodeJoined",
                    "Boot",
                    format!("Node {node_name} registered in workload cluster {key} (simulated)"),
                )
                .await;
        }
        Some(true) if fault == "not-ready" => {
            cluster.set_node_ready(&node_name, false, None, &[]).await?;
        }
        Some(_) => {}
    }
    if control_plane
        && sim.settings().listen
        && !crate::listener::ensure(sim.management(), &cluster).await?
    {
        // The cluster's CA Secret is not there yet.
        return Ok(Action::requeue(JOIN_RETRY));
    }
    Ok(Action::await_change())
}
