//! The `sim-boot` controller: what a `fake://` host would do once provisioned with bootstrap data.
//!
//! One pass per host: skip unless the host is `fake://`, `provisioned`, has `spec.userData` and
//! belongs to a cluster (label `cluster.x-k8s.io/cluster-name`, set when a machine claims it); wait
//! out a `sim.capstan.io/boot-delay`; read the bootstrap data ([`crate::cloud_config`]); then init or
//! join in the workload cluster ([`crate::workload`]). A Node that exists is not registered again,
//! so passes are idempotent; faults are played as the crate documentation says.
//!
//! A host with a real BMC is never booted here: its machine runs its bootstrap data itself. Once
//! such a host is claimed by a cluster and being provisioned, the pass only makes sure the
//! cluster's workload API is served where its nodes will dial it ([`Simulator::serve_for_real_nodes`]).

use crate::cloud_config::{self, KubeadmAction};
use crate::{ANNOTATION_BOOT_DELAY, ANNOTATION_FAULT, SimError, Simulator};
use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::secrets::SecretCache;
use capstan_runtime::{Action, Context, EventType, Reconciler};
use capstan_workload::ClusterKey;
use kube::api::{Api, ApiResource, DynamicObject};
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
async fn meta_data(
    secrets: &SecretCache,
    host: &BareMetalHost,
) -> Result<Map<String, Value>, SimError> {
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let mut meta = Map::new();
    meta.insert("uuid".into(), json!(host.uid().unwrap_or_default()));
    meta.insert("name".into(), json!(name));
    meta.insert("hostname".into(), json!(name));
    if let Some(secret) = host.spec.meta_data.as_ref().and_then(|r| r.name.clone()) {
        let found = secrets
            .get(&namespace, &secret)
            .await
            .map_err(management_error("reading", "Secret", &namespace, &secret))?;
        let extra = found
            .and_then(|s| s.data.clone())
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

async fn user_data(
    secrets: &SecretCache,
    host: &BareMetalHost,
) -> Result<Option<Vec<u8>>, SimError> {
    let namespace = host.namespace().unwrap_or_default();
    let Some(secret) = host.spec.user_data.as_ref().and_then(|r| r.name.clone()) else {
        return Ok(None);
    };
    let found = secrets
        .get(&namespace, &secret)
        .await
        .map_err(management_error("reading", "Secret", &namespace, &secret))?;
    Ok(found.and_then(|s| s.data.clone()).and_then(|d| {
        d.get("userData")
            .or_else(|| d.get("value"))
            .map(|v| v.0.clone())
    }))
}

/// `spec.version` of the Machine that owns the Metal3Machine consuming `host`, when there is one.
async fn machine_version(
    client: &Client,
    host: &BareMetalHost,
) -> Result<Option<String>, SimError> {
    let Some(consumer) = host.spec.consumer_ref.as_ref() else {
        return Ok(None);
    };
    let (Some(name), namespace) = (
        consumer.name.clone(),
        consumer
            .namespace
            .clone()
            .unwrap_or_else(|| host.namespace().unwrap_or_default()),
    ) else {
        return Ok(None);
    };
    let metal3_machines = ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
        kind: "Metal3Machine".into(),
        plural: "metal3machines".into(),
    };
    let Some(metal3_machine) =
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &metal3_machines)
            .get_opt(&name)
            .await
            .map_err(management_error(
                "reading",
                "Metal3Machine",
                &namespace,
                &name,
            ))?
    else {
        return Ok(None);
    };
    let Some(owner) = metal3_machine
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine")
        .map(|o| o.name.clone())
    else {
        return Ok(None);
    };
    let machines = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    };
    let machine = Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &machines)
        .get_opt(&owner)
        .await
        .map_err(management_error("reading", "Machine", &namespace, &owner))?;
    Ok(machine.and_then(|m| m.data["spec"]["version"].as_str().map(str::to_owned)))
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

impl BootController {
    /// A real host of a cluster: its node registers itself, the workload API only has to be there.
    async fn serve_for_real_host(
        &self,
        host: &BareMetalHost,
        state: &str,
    ) -> Result<Action, SimError> {
        let Some(cluster_name) = host.labels().get(LABEL_CLUSTER_NAME) else {
            return Ok(Action::await_change());
        };
        if !matches!(state, "provisioning" | "provisioned") || !self.sim.settings().listen {
            return Ok(Action::await_change());
        }
        let key = ClusterKey::new(host.namespace().unwrap_or_default(), cluster_name.clone());
        if self.sim.serve_for_real_nodes(&key).await? {
            Ok(Action::await_change())
        } else {
            // The cluster's CA Secret or endpoint is not there yet.
            Ok(Action::requeue(JOIN_RETRY))
        }
    }
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

    /// The user and meta data Secrets the boot reads: a change is in the cache before the host
    /// is queued.
    fn secret_names(&self, host: &BareMetalHost) -> Vec<String> {
        [&host.spec.user_data, &host.spec.meta_data]
            .into_iter()
            .filter_map(|r| r.as_ref().and_then(|r| r.name.clone()))
            .filter(|name| !name.is_empty())
            .collect()
    }

    fn follows_secrets(&self) -> bool {
        true
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
        if !is_fake(&host) {
            return self.serve_for_real_host(&host, state).await;
        }
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
        // From memory: the Metal3 provider writes these once per provisioning.
        let Some(data) = user_data(context.secrets(), &host).await? else {
            return Ok(Action::await_change());
        };
        let meta = meta_data(context.secrets(), &host).await?;
        let version = machine_version(client, &host).await?;
        boot(
            &self.sim,
            &*host,
            &context,
            &key,
            &data,
            &meta,
            &fault,
            &addresses(&host),
            version,
        )
        .await
    }
}

/// What a node does with its bootstrap data `data` (meta data `meta`, addresses `addresses`, its
/// Machine's Kubernetes version `version` when known) in workload cluster `key`; Events go to
/// `object` (the host or VM that boots). Idempotent.
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
    version: Option<String>,
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
            let Some(cluster) = sim.cluster_or_resume(key).await? else {
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
            if bootstrap.action == KubeadmAction::Init {
                let inits = cluster.record_init(&node_name).await?;
                if inits.len() > 1 {
                    context
                        .publish(
                            object,
                            EventType::Warning,
                            "SecondKubeadmInit",
                            "Boot",
                            format!(
                                "kubeadm init ran again in workload cluster {key}: nodes {} all initialised it (simulated)",
                                inits.join(", ")
                            ),
                        )
                        .await;
                }
            }
            // The kubelet and control-plane images are those of the node's image, which carries
            // the Machine's Kubernetes version.
            let version = version.or_else(|| bootstrap.kubernetes_version.clone());
            cluster
                .register_node(
                    &node_name,
                    &bootstrap,
                    control_plane,
                    addresses,
                    version.as_deref(),
                )
                .await?;
            if control_plane {
                let advertise = addresses
                    .iter()
                    .find(|(kind, _)| kind == "InternalIP")
                    .map(|(_, address)| address.as_str());
                cluster
                    .start_static_pods(&node_name, version.as_deref(), advertise)
                    .await?;
                cluster.add_member(&node_name);
                cluster.record_members().await?;
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
        && !crate::listener::ensure(
            sim.management(),
            &cluster,
            crate::listener::Bind::AnyLoopbackPort,
        )
        .await?
    {
        // The cluster's CA Secret is not there yet.
        return Ok(Action::requeue(JOIN_RETRY));
    }
    Ok(Action::await_change())
}
