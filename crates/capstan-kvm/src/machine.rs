//! KVMMachine: the [`InfraMachineProvider`] that puts a Machine in a libvirt domain.
//!
//! `ensure` walks a fixed sequence of idempotent steps; what each step made is found again by name
//! on the next pass, so a pass cut short (an error, a restart, a SIGKILL) is simply resumed:
//!
//! 1. **Hypervisors**: the KVMCluster is the Cluster's `infrastructureRef` when that is a
//!    KVMCluster, else the KVMCluster labelled `cluster.x-k8s.io/cluster-name` with the Cluster's
//!    name (a cluster whose control plane is on another provider).
//! 2. **Placement** (once; kept in `status.hypervisor`): the pinned hypervisor (`spec.hypervisor`,
//!    or the Machine's failure domain), else every hypervisor the machine may use (control-plane
//!    machines only where `controlPlane` is not false); each is asked for its capacity and the one
//!    with most free memory that holds the VM's memory, vCPUs and disks wins. Machines placed but
//!    not yet built count against their hypervisor ([`reserve`]), and one placement is chosen and
//!    recorded at a time, so machines created together never overfill a hypervisor. None fits: a
//!    `NoHypervisorFits` condition and Event that say, per hypervisor, why not.
//! 3. **Base image**: `capstan-base-<digest>` in the hypervisor's pool, fetched once per
//!    hypervisor from `spec.image.url` (`file://`) and verified against `spec.image.checksum`.
//! 4. **Volumes**: the root disk (a qcow2 overlay on the base image, `resources.disk`), the
//!    container runtime's volume (`resources.dockerVolumeSize`) and each of `spec.volumes`.
//! 5. **cloud-init medium**: a NoCloud ISO ([`crate::media`]) with the bootstrap data, hostname,
//!    network config (static addresses or DHCP, DNS) and NTP.
//! 6. **Domain**: defined with the KVMMachine's UID as its UUID and MACs derived from it, started.
//!    A restarted capstan finds it by name and adopts it (same UUID), never defines a second.
//! 7. **Provisioned**: providerID `libvirt://HYPERVISOR/UUID`, addresses, failure domain (the
//!    hypervisor); the workload Node named after the machine gets the same providerID.
//!
//! `release`: the domain is stopped and undefined, then every volume and medium named above is
//! deleted; the base image stays as the pool's cache.

use crate::cluster::DEFAULT_POOL;
use crate::driver::{
    Capacity, Content, Credentials, DiskConfig, DomainConfig, Driver, DriverError, NicConfig,
    NicSource, VolumeConfig, Written,
};
use crate::image::{self, ImageError};
use crate::media::{self, Mount, Nic, NodeConfig};
use crate::{KvmError, api};
use capstan_infra::{
    InfraMachineProvider, MachineAddress, MachineRequest, Progress, Provisioned, ReleaseRequest,
    Waiting,
};
use capstan_model::capi::v1beta2::{Cluster, Machine};
use capstan_model::kvm::v1beta2::{KVMCluster, KVMMachine};
use capstan_model::kvm::{KvmHypervisor, KvmImage, quantity_bytes};
use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_runtime::conditions;
use capstan_runtime::{Context, EventType};
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;

/// The KVMMachine controller's name.
pub const MACHINE_CONTROLLER: &str = "kvmmachine";
/// The finalizer that holds a KVMMachine until its VM and volumes are gone.
pub const MACHINE_FINALIZER: &str = "kvmmachine.infrastructure.cluster.x-k8s.io";
/// Every domain and volume capstan makes starts with this.
pub const NAME_PREFIX: &str = "capstan-kvm-";
/// Condition: whether the VM runs.
pub const CONDITION_VM_RUNNING: &str = "VMRunning";
/// Condition: whether the workload Node carries the providerID.
pub const CONDITION_NODE_PROVIDER_ID: &str = "NodeProviderID";
/// The root disk when `resources.disk` is unset.
const DEFAULT_DISK: u64 = 20 << 30;
/// Memory when `resources.memory` is unset.
const DEFAULT_MEMORY: u64 = 2 << 30;
/// How often placement is tried again when no hypervisor fits or one cannot be reached.
const PLACEMENT_RETRY: Duration = Duration::from_secs(30);
/// How often the Node is looked for until it carries the providerID.
const NODE_RETRY: Duration = Duration::from_secs(5);
/// How often a provisioned VM's power state is looked at.
const WATCH_VM: Duration = Duration::from_secs(60);

/// The KVMMachine side of the KVM provider.
#[derive(Clone)]
pub struct KvmMachineProvider {
    driver: Arc<Driver>,
    workloads: Option<SharedWorkloadAccess>,
    /// Held from reading capacities until the choice is recorded, so two machines never choose
    /// from the same free room.
    placement: Arc<tokio::sync::Mutex<()>>,
    /// Held while a base image is streamed into a pool, so machines created together fetch it
    /// once.
    images: Arc<tokio::sync::Mutex<()>>,
    /// Failed fetches in a row by hypervisor URI and base volume, the last failure and when the
    /// next fetch may start (a status write wakes the machine at once; the backoff still holds).
    image_attempts: Arc<std::sync::Mutex<std::collections::HashMap<String, ImageFailure>>>,
    /// The largest image streamed into a pool.
    image_limit: u64,
    /// Base volumes (hypervisor URI and name) this process fetched or checked: a base volume
    /// found otherwise may be one a killed capstan left half written, and is read back and
    /// hashed once before it is used.
    verified_bases: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl KvmMachineProvider {
    /// A provider talking to hypervisors through `driver`, setting Node providerIDs through
    /// `workloads`.
    pub fn new(driver: Arc<Driver>, workloads: Option<SharedWorkloadAccess>) -> Self {
        Self {
            driver,
            workloads,
            placement: Arc::default(),
            images: Arc::default(),
            image_attempts: Arc::default(),
            image_limit: crate::image::MAX_IMAGE_BYTES,
            verified_bases: Arc::default(),
        }
    }

    /// The same provider, refusing images larger than `bytes`.
    #[must_use]
    pub fn with_image_limit(mut self, bytes: u64) -> Self {
        self.image_limit = bytes;
        self
    }
}

/// The libvirt domain name of a KVMMachine.
pub fn domain_name(namespace: &str, machine: &str) -> String {
    format!("{NAME_PREFIX}{namespace}-{machine}")
}

/// The providerID of a VM.
pub fn provider_id(hypervisor: &str, uuid: &str) -> String {
    format!("libvirt://{hypervisor}/{uuid}")
}

/// The name of the base-image volume for `checksum`.
pub fn base_volume(checksum: &str) -> String {
    let short: String = checksum.chars().take(16).collect();
    format!("{NAME_PREFIX}base-{}.qcow2", short.to_ascii_lowercase())
}

/// The volumes a machine's domain owns (root, container runtime, extra volumes, medium), by name.
pub fn owned_volumes(domain: &str, machine: &KVMMachine) -> Vec<String> {
    let mut names = vec![
        format!("{domain}-root.qcow2"),
        format!("{domain}-docker.qcow2"),
    ];
    names.extend(
        machine
            .spec
            .volumes
            .iter()
            .map(|v| format!("{domain}-vol-{}.qcow2", v.name)),
    );
    names.push(format!("{domain}-cidata.iso"));
    names
}

/// A locally administered MAC for NIC `index` of the VM with `uuid`.
pub fn mac_address(uuid: &str, index: usize) -> String {
    let digest = sha2::Sha256::digest(format!("{uuid}/{index}").as_bytes());
    format!(
        "52:54:00:{:02x}:{:02x}:{:02x}",
        digest[0], digest[1], digest[2]
    )
}

/// What a VM needs from a hypervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    pub vcpus: u32,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

/// A machine already placed on a hypervisor: its domain, the volumes it will own, its needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub domain: String,
    pub volumes: Vec<String>,
    pub needs: Needs,
}

/// `capacity` less what `placed` machines will take that the hypervisor does not count yet.
///
/// Placement is recorded before anything is made, so for a while a placed machine has no domain
/// (its memory is not in use) and only some of its volumes (the rest of its disk is still free).
/// Without reserving that, machines placed in the same moment all see the same free room and can
/// overfill one hypervisor.
pub fn reserve(capacity: &Capacity, placed: &[Placed]) -> Capacity {
    let mut left = capacity.clone();
    for machine in placed {
        if capacity.domains.contains(&machine.domain) {
            // Defined: libvirt counts its memory and the pool its volumes.
            continue;
        }
        let made: u64 = machine
            .volumes
            .iter()
            .filter_map(|name| capacity.volumes.get(name))
            .sum();
        left.used_vcpus = left.used_vcpus.saturating_add(machine.needs.vcpus);
        left.used_memory_bytes = left
            .used_memory_bytes
            .saturating_add(machine.needs.memory_bytes);
        left.pool_available_bytes = left
            .pool_available_bytes
            .saturating_sub(machine.needs.disk_bytes.saturating_sub(made));
    }
    left
}

/// Why `capacity` cannot take `needs`; `None` when it can.
pub fn does_not_fit(capacity: &Capacity, needs: &Needs) -> Option<String> {
    let free_memory = capacity
        .memory_bytes
        .saturating_sub(capacity.used_memory_bytes);
    if needs.vcpus > capacity.cpus {
        return Some(format!(
            "{} vCPUs asked, it has {} CPUs",
            needs.vcpus, capacity.cpus
        ));
    }
    if needs.memory_bytes > free_memory {
        return Some(format!(
            "{} MiB of memory asked, {} MiB free",
            needs.memory_bytes >> 20,
            free_memory >> 20
        ));
    }
    if needs.disk_bytes > capacity.pool_available_bytes {
        return Some(format!(
            "{} MiB of disk asked, {} MiB free in the pool",
            needs.disk_bytes >> 20,
            capacity.pool_available_bytes >> 20
        ));
    }
    None
}

fn size(value: Option<&str>, default: u64, field: &str) -> Result<u64, Waiting> {
    match value {
        None => Ok(default),
        Some(text) => quantity_bytes(text)
            .map_err(|error| Waiting::new("InvalidSpec", format!("{field}: {error}"))),
    }
}

/// The VM's needs from its spec.
pub fn needs(machine: &KVMMachine) -> Result<Needs, Waiting> {
    let resources = &machine.spec.resources;
    let memory = size(
        resources.memory.as_deref(),
        DEFAULT_MEMORY,
        "spec.resources.memory",
    )?;
    let mut disk = size(
        resources.disk.as_deref(),
        DEFAULT_DISK,
        "spec.resources.disk",
    )?;
    disk = disk.saturating_add(size(
        resources.docker_volume_size.as_deref(),
        0,
        "spec.resources.dockerVolumeSize",
    )?);
    for (index, volume) in machine.spec.volumes.iter().enumerate() {
        if volume.name.is_empty()
            || !volume
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(Waiting::new(
                "InvalidSpec",
                format!(
                    "spec.volumes[{index}].name {:?} must be letters, digits and '-'",
                    volume.name
                ),
            ));
        }
        if !volume.mount_path.starts_with('/') {
            return Err(Waiting::new(
                "InvalidSpec",
                format!(
                    "spec.volumes[{index}].mountPath {:?} must be an absolute path",
                    volume.mount_path
                ),
            ));
        }
        disk = disk.saturating_add(size(
            Some(&volume.size),
            0,
            &format!("spec.volumes[{index}].size"),
        )?);
    }
    Ok(Needs {
        vcpus: resources.cpu.unwrap_or(2).max(1),
        memory_bytes: memory,
        disk_bytes: disk,
    })
}

fn pool_of(hypervisor: &KvmHypervisor) -> String {
    hypervisor
        .pool
        .clone()
        .unwrap_or_else(|| DEFAULT_POOL.to_owned())
}

/// Why an image cannot be used, as a Waiting.
fn image_problem(reason: &str, message: String) -> Waiting {
    Waiting::new(reason, message).retry_after(PLACEMENT_RETRY)
}

/// The last failed fetch of a base image.
#[derive(Clone, Debug)]
struct ImageFailure {
    attempts: u32,
    waiting: Waiting,
    next: tokio::time::Instant,
}

/// How long to wait before fetching an image again after `attempts` failures in a row.
pub fn image_backoff(attempts: u32) -> Duration {
    let seconds = 5u64.saturating_mul(1 << attempts.saturating_sub(1).min(10));
    Duration::from_secs(seconds.min(300))
}

/// A failed image fetch as a condition: transient failures (a broken download, a server error)
/// are retried with backoff, the others when the spec or the image changes (and every 30 s).
fn image_wait(error: &ImageError, attempts: u32) -> Waiting {
    if error.is_transient() {
        let delay = image_backoff(attempts);
        Waiting::new(
            error.reason(),
            format!(
                "{error} (attempt {attempts}; trying again in {} s)",
                delay.as_secs()
            ),
        )
        .retry_after(delay)
    } else {
        image_problem(error.reason(), error.to_string())
    }
}

#[cfg(test)]
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_control_plane(owner: &Machine) -> bool {
    owner
        .labels()
        .contains_key("cluster.x-k8s.io/control-plane")
}

impl KvmMachineProvider {
    /// The KVMCluster whose hypervisors the machine uses.
    async fn kvm_cluster(
        &self,
        client: &Client,
        namespace: &str,
        cluster_name: &str,
    ) -> Result<Option<KVMCluster>, KvmError> {
        let clusters: Api<KVMCluster> = Api::namespaced(client.clone(), namespace);
        let cluster = Api::<Cluster>::namespaced(client.clone(), namespace)
            .get_opt(cluster_name)
            .await
            .map_err(api("reading", "Cluster", namespace, cluster_name))?;
        if let Some(reference) = cluster
            .as_ref()
            .and_then(|c| c.spec.infrastructure_ref.as_ref())
            && reference.kind == "KVMCluster"
            && !reference.name.is_empty()
        {
            return clusters.get_opt(&reference.name).await.map_err(api(
                "reading",
                "KVMCluster",
                namespace,
                &reference.name,
            ));
        }
        let labelled = clusters
            .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER_NAME}={cluster_name}")))
            .await
            .map_err(api("listing", "KVMCluster", namespace, ""))?;
        Ok(labelled.items.into_iter().next())
    }

    /// Every other KVMMachine already placed, by hypervisor URI: read from the API server, not
    /// a cache, so the placement recorded a moment ago is in it.
    async fn placed(
        &self,
        client: &Client,
        machine: &KVMMachine,
    ) -> Result<std::collections::HashMap<String, Vec<Placed>>, KvmError> {
        let all = Api::<KVMMachine>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(api("listing", "KVMMachine", "", ""))?;
        let mut placed = std::collections::HashMap::<String, Vec<Placed>>::new();
        for other in all.items {
            if other.uid() == machine.uid() {
                continue;
            }
            let Some(uri) = other.status.as_ref().and_then(|s| s.hypervisor_uri.clone()) else {
                continue;
            };
            // A spec that cannot be read reserves nothing: it will never be built.
            let Ok(needs) = needs(&other) else {
                continue;
            };
            let domain = domain_name(&other.namespace().unwrap_or_default(), &other.name_any());
            let volumes = owned_volumes(&domain, &other);
            placed.entry(uri).or_default().push(Placed {
                domain,
                volumes,
                needs,
            });
        }
        Ok(placed)
    }

    async fn place(
        &self,
        request: &MachineRequest<'_, KVMMachine>,
        cluster: &KVMCluster,
        needs: &Needs,
        context: &Context,
    ) -> Result<Result<KvmHypervisor, Waiting>, KvmError> {
        let machine = request.machine;
        let pin = machine
            .spec
            .hypervisor
            .clone()
            .or_else(|| request.owner.spec.failure_domain.clone());
        let control_plane = is_control_plane(request.owner);
        let candidates: Vec<&KvmHypervisor> = cluster
            .spec
            .hypervisors
            .iter()
            .filter(|h| pin.as_deref().is_none_or(|p| p == h.name))
            .filter(|h| !control_plane || h.control_plane.unwrap_or(true))
            .collect();
        if candidates.is_empty() {
            let message = match &pin {
                Some(pin) => format!(
                    "KVMCluster {} has no hypervisor {pin:?} this machine may use (spec.hypervisor or the Machine's failure domain)",
                    cluster.name_any()
                ),
                None => format!(
                    "KVMCluster {} has no hypervisor that takes control-plane machines",
                    cluster.name_any()
                ),
            };
            return Ok(Err(Waiting::new("NoHypervisor", message)));
        }
        let placed = self.placed(context.client(), machine).await?;
        let mut best: Option<(&KvmHypervisor, u64)> = None;
        let mut reasons = Vec::new();
        let asked = candidates.len();
        let mut refused = 0;
        let mut unverified = 0;
        let namespace = machine.namespace().unwrap_or_default();
        for hypervisor in candidates {
            if let Err(waiting) = self
                .authenticate(context.client(), &namespace, hypervisor)
                .await?
            {
                reasons.push(waiting.message);
                continue;
            }
            match self
                .driver
                .capacity(&hypervisor.uri, &pool_of(hypervisor))
                .await
            {
                Ok(capacity) => match does_not_fit(
                    &reserve(
                        &capacity,
                        placed.get(&hypervisor.uri).map_or(&[], Vec::as_slice),
                    ),
                    needs,
                ) {
                    Some(why) => reasons.push(format!("{}: {why}", hypervisor.name)),
                    None => {
                        let free = capacity
                            .memory_bytes
                            .saturating_sub(capacity.used_memory_bytes);
                        if best.is_none_or(|(_, f)| free > f) {
                            best = Some((hypervisor, free));
                        }
                    }
                },
                Err(error) => {
                    match error {
                        DriverError::AuthFailed { .. } => refused += 1,
                        DriverError::HostKeyUnverified { .. } => unverified += 1,
                        _ => {}
                    }
                    reasons.push(format!("{}: {error}", hypervisor.name));
                }
            }
        }
        // Every hypervisor refused the credentials (or could not be trusted): that, not room,
        // is what to fix.
        let reason = if unverified == asked {
            "HypervisorHostKeyUnverified"
        } else if refused + unverified == asked {
            "HypervisorAuthFailed"
        } else {
            "NoHypervisorFits"
        };
        match best {
            Some((hypervisor, _)) => Ok(Ok(hypervisor.clone())),
            None => {
                let message = format!(
                    "no hypervisor can hold {} vCPUs, {} MiB of memory and {} MiB of disk: {}; free room, add a hypervisor to KVMCluster {} or make the machine smaller",
                    needs.vcpus,
                    needs.memory_bytes >> 20,
                    needs.disk_bytes >> 20,
                    reasons.join("; "),
                    cluster.name_any()
                );
                context
                    .publish(
                        machine,
                        EventType::Warning,
                        reason,
                        "Place",
                        message.clone(),
                    )
                    .await;
                Ok(Err(
                    Waiting::new(reason, message).retry_after(PLACEMENT_RETRY)
                ))
            }
        }
    }

    async fn link_node(
        &self,
        cluster: &ClusterKey,
        node_name: &str,
        provider_id: &str,
        generation: Option<i64>,
    ) -> (capstan_model::meta::Condition, Option<Duration>) {
        let condition = |status: &str, reason: &str, message: String| {
            conditions::condition(
                CONDITION_NODE_PROVIDER_ID,
                status,
                reason,
                message,
                generation,
            )
        };
        let Some(workloads) = &self.workloads else {
            return (
                condition(
                    conditions::UNKNOWN,
                    "NoWorkloadAccess",
                    "this controller runs without workload cluster access; the Node's providerID is left to the kubelet".into(),
                ),
                None,
            );
        };
        let client = match workloads.client(cluster).await {
            Ok(client) => client,
            Err(error) => {
                return (
                    condition(
                        conditions::FALSE,
                        "WorkloadUnreachable",
                        format!(
                            "waiting for the workload API: {}",
                            capstan_runtime::controller::ErrorChain(&error)
                        ),
                    ),
                    Some(NODE_RETRY),
                );
            }
        };
        let nodes: Api<Node> = Api::all(client);
        let node = match nodes.get_opt(node_name).await {
            Ok(node) => node,
            Err(error) => {
                workloads.forget(cluster);
                return (
                    condition(
                        conditions::FALSE,
                        "WorkloadUnreachable",
                        format!("reading Node {node_name}: {error}"),
                    ),
                    Some(NODE_RETRY),
                );
            }
        };
        let Some(node) = node else {
            return (
                condition(
                    conditions::FALSE,
                    "WaitingForNode",
                    format!("no Node {node_name} in the workload cluster yet"),
                ),
                Some(NODE_RETRY),
            );
        };
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(id) if id == provider_id => {}
            Some(other) if !other.is_empty() => {
                return (
                    condition(
                        conditions::FALSE,
                        "ProviderIDMismatch",
                        format!(
                            "Node {node_name} already has providerID {other}, not {provider_id}: the kubelet's --provider-id disagrees with the VM; fix the bootstrap data"
                        ),
                    ),
                    None,
                );
            }
            _ => {
                let patch = json!({"spec": {"providerID": provider_id}});
                if let Err(error) = nodes
                    .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    return (
                        condition(
                            conditions::FALSE,
                            "NodePatchFailed",
                            format!("setting providerID of Node {node_name}: {error}"),
                        ),
                        Some(NODE_RETRY),
                    );
                }
            }
        }
        (
            condition(
                conditions::TRUE,
                "ProviderIDSet",
                format!("Node {node_name}"),
            ),
            None,
        )
    }

    /// Tells the driver how to authenticate to `hypervisor`: from the Secret its
    /// `credentialsSecretRef` names (in `namespace`), or as the user capstan runs as.
    async fn authenticate(
        &self,
        client: &Client,
        namespace: &str,
        hypervisor: &KvmHypervisor,
    ) -> Result<Result<(), Waiting>, KvmError> {
        let Some(reference) = hypervisor
            .credentials_secret_ref
            .as_ref()
            .filter(|r| !r.name.is_empty())
        else {
            self.driver.set_credentials(&hypervisor.uri, None);
            return Ok(Ok(()));
        };
        let secret = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(&reference.name)
            .await
            .map_err(api("reading", "Secret", namespace, &reference.name))?;
        let Some(secret) = secret else {
            return Ok(Err(Waiting::new(
                "CredentialsSecretMissing",
                format!(
                    "hypervisor {}: Secret {namespace}/{} named by its credentialsSecretRef does not exist: create it with username and password (SASL), tls.crt, tls.key and ca.crt (qemu+tls) or ssh-privatekey and known_hosts (qemu+ssh)",
                    hypervisor.name, reference.name
                ),
            )
            .retry_after(PLACEMENT_RETRY)));
        };
        let data: std::collections::BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect();
        self.driver
            .set_credentials(&hypervisor.uri, Some(Credentials::from_secret_data(&data)));
        Ok(Ok(()))
    }

    /// The CA certificates (PEM) of the Secret `spec.image.caSecretRef` names, if it names one;
    /// a missing Secret or key is a wait that says so.
    async fn image_cas(
        &self,
        client: &Client,
        machine: &KVMMachine,
    ) -> Result<Result<Option<String>, Waiting>, KvmError> {
        let Some(reference) = machine
            .spec
            .image
            .as_ref()
            .and_then(|image| image.ca_secret_ref.as_ref())
            .filter(|r| !r.name.is_empty())
        else {
            return Ok(Ok(None));
        };
        let namespace = machine.namespace().unwrap_or_default();
        let secret = Api::<Secret>::namespaced(client.clone(), &namespace)
            .get_opt(&reference.name)
            .await
            .map_err(api("reading", "Secret", &namespace, &reference.name))?;
        let pem = secret
            .and_then(|s| s.data)
            .and_then(|mut data| data.remove("ca.crt"))
            .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
            .filter(|pem| !pem.trim().is_empty());
        match pem {
            Some(pem) => Ok(Ok(Some(pem))),
            None => Ok(Err(image_problem(
                "ImageCASecretMissing",
                format!(
                    "Secret {namespace}/{} named by spec.image.caSecretRef does not exist or has no ca.crt: create it with the PEM certificate of the CA that signed the image server's certificate",
                    reference.name
                ),
            )
            .retry_after(PLACEMENT_RETRY))),
        }
    }

    /// The base image volume for `image` in `pool`, streamed there and verified when it is not
    /// there yet; its path, or why not.
    async fn ensure_base(
        &self,
        uri: &str,
        pool: &str,
        image: &KvmImage,
        extra_cas: Option<&str>,
    ) -> Result<Result<String, Waiting>, DriverError> {
        let Some(checksum) = image.checksum.as_deref().filter(|c| !c.is_empty()) else {
            return Ok(Err(image_problem(
                "ImageChecksumMissing",
                "spec.image.checksum is empty: give the image's sha256 (sha256sum IMAGE)".into(),
            )));
        };
        let name = base_volume(checksum);
        let config = VolumeConfig {
            pool: pool.to_owned(),
            name: name.clone(),
            capacity_bytes: 1,
            format: "raw".to_owned(),
            backing: None,
        };
        let key = format!("{uri} {name}");
        let verified = |key: &str| {
            self.verified_bases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(key)
        };
        let mut present = self.driver.volumes(uri, pool, &name).await?.contains(&name);
        if present && !verified(&key) {
            // Under the lock: a fetch of this process streaming into it holds it.
            let _checking = self.images.lock().await;
            if !verified(&key) {
                let algorithm = image.checksum_type.as_deref().unwrap_or("sha256");
                match self
                    .driver
                    .volume_digest(uri, pool, &name, algorithm)
                    .await?
                {
                    Some(digest) if !digest.eq_ignore_ascii_case(checksum) => {
                        tracing::warn!(
                            hypervisor = uri,
                            volume = name,
                            "a base image volume does not have its digest (an interrupted fetch); fetching it again"
                        );
                        self.driver.delete_volume(uri, pool, &name).await?;
                        present = false;
                    }
                    Some(_) | None => {
                        self.verified_bases
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(key.clone());
                    }
                }
            }
        }
        if !present {
            let earlier = self
                .image_attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            if let Some(failure) = earlier
                && failure.next > tokio::time::Instant::now()
            {
                let mut waiting = failure.waiting;
                waiting.requeue_after = Some(failure.next - tokio::time::Instant::now());
                return Ok(Err(waiting));
            }
            let _fetching = self.images.lock().await;
            // Another machine may have fetched it while this one waited.
            if !self.driver.volumes(uri, pool, &name).await?.contains(&name) {
                match self
                    .fetch_base(uri, config.clone(), image, checksum, extra_cas)
                    .await?
                {
                    Ok(()) => {
                        self.image_attempts
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&key);
                        self.verified_bases
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(key.clone());
                    }
                    Err(error) => {
                        let mut all = self
                            .image_attempts
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        let attempts = all.get(&key).map_or(1, |f| f.attempts.saturating_add(1));
                        let waiting = image_wait(&error, attempts);
                        let next = tokio::time::Instant::now()
                            + waiting.requeue_after.unwrap_or(PLACEMENT_RETRY);
                        all.insert(
                            key,
                            ImageFailure {
                                attempts,
                                waiting: waiting.clone(),
                                next,
                            },
                        );
                        tracing::warn!(hypervisor = uri, %error, attempts, "fetching a base image");
                        return Ok(Err(waiting));
                    }
                }
            }
        }
        let written = self
            .driver
            .ensure_volume(uri, config, Content::Empty)
            .await?;
        Ok(Ok(written.path().to_owned()))
    }

    /// Streams `image` into volume `config.name`, verifying it as it passes; the volume is kept
    /// only when the whole image arrived with the right digest.
    async fn fetch_base(
        &self,
        uri: &str,
        mut config: VolumeConfig,
        image: &KvmImage,
        checksum: &str,
        extra_cas: Option<&str>,
    ) -> Result<Result<(), ImageError>, DriverError> {
        let opened = match image::open(&image.url, self.image_limit, extra_cas).await {
            Ok(opened) => opened,
            Err(error) => return Ok(Err(error)),
        };
        config.capacity_bytes = opened.length;
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let checksum_type = image
            .checksum_type
            .clone()
            .unwrap_or_else(|| "sha256".to_owned());
        let checksum = checksum.to_owned();
        let pump =
            tokio::spawn(
                async move { image::pump(opened, &checksum_type, &checksum, sender).await },
            );
        let written = self
            .driver
            .ensure_volume(uri, config, Content::Stream(receiver))
            .await;
        let pumped = pump.await.unwrap_or(Err(ImageError::Receiver));
        match (written, pumped) {
            (Err(error), Ok(()) | Err(ImageError::Receiver)) => Err(error),
            (_, Err(error)) => Ok(Err(error)),
            (Ok(_), Ok(())) => Ok(Ok(())),
        }
    }

    /// Base image, volumes and medium on `hypervisor`; the disks of the domain, or why not yet.
    async fn ensure_storage(
        &self,
        request: &MachineRequest<'_, KVMMachine>,
        cluster: &KVMCluster,
        hypervisor: &KvmHypervisor,
        (domain, uuid): (&str, &str),
        fresh: bool,
        extra_cas: Option<&str>,
    ) -> Result<Result<Vec<DiskConfig>, Waiting>, DriverError> {
        let machine = request.machine;
        let uri = &hypervisor.uri;
        let pool = pool_of(hypervisor);
        let resources = &machine.spec.resources;
        let volume = |name: String,
                      capacity_bytes: u64,
                      format: &str,
                      backing: Option<(String, String)>| VolumeConfig {
            pool: pool.clone(),
            name,
            capacity_bytes,
            format: format.to_owned(),
            backing,
        };
        let mut disks = Vec::new();
        let backing = match &machine.spec.image {
            Some(image) => match self.ensure_base(uri, &pool, image, extra_cas).await? {
                Ok(path) => Some((
                    path,
                    image.format.clone().unwrap_or_else(|| "qcow2".to_owned()),
                )),
                Err(waiting) => return Ok(Err(waiting)),
            },
            None => None,
        };
        let disk_size = size(
            resources.disk.as_deref(),
            DEFAULT_DISK,
            "spec.resources.disk",
        )
        .unwrap_or(DEFAULT_DISK);
        let root = self
            .driver
            .ensure_volume(
                uri,
                volume(format!("{domain}-root.qcow2"), disk_size, "qcow2", backing),
                Content::Empty,
            )
            .await?;
        disks.push(DiskConfig {
            path: root.path().to_owned(),
            format: "qcow2".into(),
            target: "vda".into(),
            read_only: false,
        });
        let mut mounts = Vec::new();
        let mut extra: Vec<(String, u64, String)> = Vec::new();
        if let Some(docker) = resources.docker_volume_size.as_deref() {
            let bytes = size(Some(docker), 0, "spec.resources.dockerVolumeSize").unwrap_or(0);
            extra.push((
                format!("{domain}-docker.qcow2"),
                bytes,
                "/var/lib/containerd".to_owned(),
            ));
        }
        for spec in &machine.spec.volumes {
            let bytes = size(Some(&spec.size), 0, "size").unwrap_or(0);
            extra.push((
                format!("{domain}-vol-{}.qcow2", spec.name),
                bytes,
                spec.mount_path.clone(),
            ));
        }
        for (index, (name, bytes, path)) in extra.into_iter().enumerate() {
            let written: Written = self
                .driver
                .ensure_volume(
                    uri,
                    volume(name, bytes.max(1 << 20), "qcow2", None),
                    Content::Empty,
                )
                .await?;
            let letter = char::from(b'b' + u8::try_from(index).unwrap_or(0).min(23));
            let target = format!("vd{letter}");
            mounts.push(Mount {
                device: format!("/dev/{target}"),
                path,
            });
            disks.push(DiskConfig {
                path: written.path().to_owned(),
                format: "qcow2".into(),
                target,
                read_only: false,
            });
        }
        let nics = nics(machine, uuid);
        let node = NodeConfig {
            instance_id: uuid.to_owned(),
            hostname: machine.name_any(),
            nics: nics
                .iter()
                .zip(network_specs(machine))
                .map(|(nic, spec)| Nic {
                    mac: nic.mac.clone(),
                    address: spec.address.clone(),
                    gateway: spec.gateway.clone(),
                })
                .collect(),
            dns_servers: cluster.spec.dns_servers.clone(),
            ntp_servers: cluster.spec.ntp_servers.clone(),
            mounts,
        };
        let medium_name = format!("{domain}-cidata.iso");
        let content = match &request.bootstrap {
            Some(bootstrap) => match media::nocloud_iso(&node, &bootstrap.value) {
                Ok(bytes) => Content::Bytes(bytes),
                Err(error) => {
                    return Ok(Err(Waiting::new(
                        "MediumFailed",
                        format!("writing the cloud-init medium: {error}"),
                    )));
                }
            },
            None => Content::Empty,
        };
        let length = match &content {
            Content::Bytes(bytes) => bytes.len() as u64,
            _ => 1 << 20,
        };
        let medium_config = volume(medium_name, length, "raw", None);
        // Until the domain is defined nothing uses the medium, and a pass cut short may have
        // left it half written: it is written anew. Once a domain uses it, it stays.
        let medium = if fresh {
            self.driver
                .replace_volume(uri, medium_config, content)
                .await?
        } else {
            self.driver
                .ensure_volume(uri, medium_config, content)
                .await?
        };
        let letter = char::from(b'a' + u8::try_from(disks.len()).unwrap_or(25).min(25));
        disks.push(DiskConfig {
            path: medium.path().to_owned(),
            format: "raw".into(),
            target: format!("vd{letter}"),
            read_only: true,
        });
        Ok(Ok(disks))
    }
}

/// The networks of a machine: its spec's, or one NIC on libvirt's `default` network.
fn network_specs(machine: &KVMMachine) -> Vec<capstan_model::kvm::KvmNetwork> {
    if machine.spec.networks.is_empty() {
        vec![capstan_model::kvm::KvmNetwork {
            network: Some("default".into()),
            ..Default::default()
        }]
    } else {
        machine.spec.networks.clone()
    }
}

fn nics(machine: &KVMMachine, uuid: &str) -> Vec<NicConfig> {
    network_specs(machine)
        .iter()
        .enumerate()
        .map(|(index, network)| NicConfig {
            source: match (&network.bridge, &network.network) {
                _ if network.user == Some(true) => NicSource::User,
                (Some(bridge), _) => NicSource::Bridge(bridge.clone()),
                (None, Some(name)) => NicSource::Network(name.clone()),
                (None, None) => NicSource::Network("default".into()),
            },
            mac: mac_address(uuid, index),
        })
        .collect()
}

fn addresses(machine: &KVMMachine) -> Vec<MachineAddress> {
    let mut out: Vec<MachineAddress> = network_specs(machine)
        .iter()
        .filter_map(|n| n.address.as_deref())
        .map(|a| MachineAddress::new("InternalIP", a.split('/').next().unwrap_or(a)))
        .collect();
    out.push(MachineAddress::new("Hostname", machine.name_any()));
    out
}

/// A driver error as a condition: unreachable hypervisors and refusals are waits with a retry,
/// named in the message.
fn driver_wait(hypervisor: &str, error: &DriverError) -> Waiting {
    let reason = match error {
        DriverError::Unreachable { .. } => "HypervisorUnreachable",
        DriverError::AuthFailed { .. } => "HypervisorAuthFailed",
        DriverError::HostKeyUnverified { .. } => "HypervisorHostKeyUnverified",
        DriverError::NoPool { .. } => "PoolMissing",
        _ => "HypervisorError",
    };
    Waiting::new(reason, format!("hypervisor {hypervisor}: {error}")).retry_after(PLACEMENT_RETRY)
}

impl KvmMachineProvider {
    /// [`driver_wait`], and a Warning Event when the hypervisor refused the credentials (the
    /// message names the Secret's role, never its content).
    async fn driver_problem(
        &self,
        machine: &KVMMachine,
        hypervisor: &str,
        error: &DriverError,
        context: &Context,
    ) -> Waiting {
        let waiting = driver_wait(hypervisor, error);
        if matches!(
            error,
            DriverError::AuthFailed { .. } | DriverError::HostKeyUnverified { .. }
        ) {
            context
                .publish(
                    machine,
                    EventType::Warning,
                    &waiting.reason,
                    "Connect",
                    waiting.message.clone(),
                )
                .await;
        }
        waiting
    }
}

impl KvmMachineProvider {
    /// [`InfraMachineProvider::ensure`] once every NIC's address is known.
    async fn ensure_addressed(
        &self,
        request: &MachineRequest<'_, KVMMachine>,
        context: &Context,
    ) -> Result<Progress<Provisioned>, KvmError> {
        let machine = request.machine;
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let Some(uuid) = machine.uid() else {
            return Ok(Progress::waiting(
                "WaitingForUID",
                "the KVMMachine has no metadata.uid yet",
            ));
        };
        let Some(cluster) = self
            .kvm_cluster(client, &namespace, request.cluster_name)
            .await?
        else {
            return Ok(Progress::waiting(
                "NoKVMCluster",
                format!(
                    "no KVMCluster for Cluster {namespace}/{}: make it the Cluster's infrastructureRef, or label one {LABEL_CLUSTER_NAME}={} to lend its hypervisors",
                    request.cluster_name, request.cluster_name
                ),
            ));
        };
        let needs = match needs(machine) {
            Ok(needs) => needs,
            Err(waiting) => return Ok(Progress::Waiting(waiting)),
        };
        let status = machine.status.clone().unwrap_or_default();
        let placed = status
            .hypervisor
            .as_deref()
            .and_then(|placed| cluster.spec.hypervisors.iter().find(|h| h.name == placed));
        let hypervisor = match (placed, status.hypervisor.as_deref()) {
            (Some(hypervisor), _) => hypervisor.clone(),
            (None, Some(gone)) => {
                return Ok(Progress::waiting(
                    "HypervisorRemoved",
                    format!(
                        "the VM was placed on hypervisor {gone:?}, which KVMCluster {} no longer lists: put it back, or delete this machine",
                        cluster.name_any()
                    ),
                ));
            }
            (None, None) => {
                let _placing = self.placement.lock().await;
                let hypervisor = match self.place(request, &cluster, &needs, context).await? {
                    Ok(hypervisor) => hypervisor,
                    Err(waiting) => return Ok(Progress::Waiting(waiting)),
                };
                // Placement is written before anything is made, so a restart never places twice.
                let patch = json!({"status": {
                    "hypervisor": hypervisor.name,
                    "hypervisorURI": hypervisor.uri,
                    "pool": pool_of(&hypervisor),
                }});
                Api::<KVMMachine>::namespaced(client.clone(), &namespace)
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(api(
                        "recording the placement of",
                        "KVMMachine",
                        &namespace,
                        &name,
                    ))?;
                return Ok(Progress::Waiting(Waiting::new(
                    "Placed",
                    format!("placed on hypervisor {}", hypervisor.name),
                )));
            }
        };
        let domain = domain_name(&namespace, &name);
        let uri = hypervisor.uri.clone();
        if let Err(waiting) = self.authenticate(client, &namespace, &hypervisor).await? {
            return Ok(Progress::Waiting(waiting));
        }
        let existing = match self.driver.domain(&uri, &domain).await {
            Ok(existing) => existing,
            Err(error) => {
                return Ok(Progress::Waiting(
                    self.driver_problem(machine, &hypervisor.name, &error, context)
                        .await,
                ));
            }
        };
        let running = match existing.clone() {
            Some(status) if request.already_provisioned => status,
            _ => {
                let storage_started = std::time::Instant::now();
                let storage = match self.image_cas(context.client(), machine).await? {
                    Ok(extra_cas) => {
                        self.ensure_storage(
                            request,
                            &cluster,
                            &hypervisor,
                            (&domain, &uuid),
                            existing.is_none(),
                            extra_cas.as_deref(),
                        )
                        .await
                    }
                    Err(waiting) => Ok(Err(waiting)),
                };
                let disks = match storage {
                    Ok(Ok(disks)) => disks,
                    Ok(Err(waiting)) => {
                        if waiting.reason.starts_with("Image")
                            || waiting.reason == "UnsupportedImageURL"
                        {
                            context
                                .publish(
                                    machine,
                                    EventType::Warning,
                                    &waiting.reason,
                                    "FetchImage",
                                    waiting.message.clone(),
                                )
                                .await;
                        }
                        return Ok(Progress::Waiting(waiting));
                    }
                    Err(error) => {
                        return Ok(Progress::Waiting(
                            self.driver_problem(machine, &hypervisor.name, &error, context)
                                .await,
                        ));
                    }
                };
                let config = DomainConfig {
                    name: domain.clone(),
                    uuid: uuid.clone(),
                    vcpus: needs.vcpus,
                    memory_bytes: needs.memory_bytes,
                    disks,
                    nics: nics(machine, &uuid),
                    domain_type: hypervisor
                        .domain_type
                        .clone()
                        .unwrap_or_else(|| "kvm".to_owned()),
                    console_log: (!crate::driver::is_simulated(&uri))
                        .then(|| format!("/var/log/libvirt/qemu/{domain}-console.log")),
                };
                let storage_time = storage_started.elapsed();
                let domain_started = std::time::Instant::now();
                match self.driver.ensure_domain(&uri, config).await {
                    Ok(status) => {
                        if !request.already_provisioned {
                            context
                                .publish(
                                    machine,
                                    EventType::Normal,
                                    "VMStarted",
                                    "Provision",
                                    // The time of this pass's steps, capstan's own part of a
                                    // VM's creation.
                                    format!(
                                        "domain {domain} ({}) is {} on hypervisor {} (image, volumes and medium {:.3} s, domain defined and started {:.3} s)",
                                        status.uuid,
                                        status.state,
                                        hypervisor.name,
                                        storage_time.as_secs_f64(),
                                        domain_started.elapsed().as_secs_f64()
                                    ),
                                )
                                .await;
                        }
                        status
                    }
                    Err(error) => {
                        return Ok(Progress::Waiting(
                            self.driver_problem(machine, &hypervisor.name, &error, context)
                                .await,
                        ));
                    }
                }
            }
        };
        if status.domain_state.as_deref() != Some(running.state.as_str())
            || status.domain_uuid.as_deref() != Some(running.uuid.as_str())
        {
            let patch =
                json!({"status": {"domainState": running.state, "domainUUID": running.uuid}});
            Api::<KVMMachine>::namespaced(client.clone(), &namespace)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api(
                    "recording the domain state of",
                    "KVMMachine",
                    &namespace,
                    &name,
                ))?;
        }
        let provider_id = provider_id(&hypervisor.name, &running.uuid);
        let vm_condition = conditions::condition(
            CONDITION_VM_RUNNING,
            if running.running {
                conditions::TRUE
            } else {
                conditions::FALSE
            },
            if running.running {
                "Running"
            } else {
                "NotRunning"
            },
            format!(
                "domain {domain} on hypervisor {} is {}",
                hypervisor.name, running.state
            ),
            machine.metadata.generation,
        );
        let already_linked = capstan_infra::machine::machine_conditions(machine)
            .iter()
            .any(|c| c.type_ == CONDITION_NODE_PROVIDER_ID && c.status == conditions::TRUE);
        let (node_condition, requeue_after) = if already_linked {
            (None, Some(WATCH_VM))
        } else {
            let key = ClusterKey::new(namespace.clone(), request.cluster_name);
            let (condition, requeue) = self
                .link_node(&key, &name, &provider_id, machine.metadata.generation)
                .await;
            (Some(condition), requeue.or(Some(WATCH_VM)))
        };
        let mut extra = vec![vm_condition];
        extra.extend(node_condition);
        Ok(Progress::Done(Provisioned {
            provider_id,
            addresses: addresses(machine),
            failure_domain: Some(hypervisor.name.clone()),
            conditions: extra,
            requeue_after,
        }))
    }
}

/// IPClaim names: one per NIC that takes its address from an IPPool.
pub fn ip_claim_name(machine: &str, nic: usize) -> String {
    format!("{machine}-nic{nic}")
}

/// Static addresses from IPPools: for each NIC with `ipPoolRef`, an IPClaim
/// [`ip_claim_name`] (owned by the KVMMachine, so it goes with it and its address returns to the
/// pool) that capstan's IPAM controller answers with an IPAddress. The machine with those
/// addresses and gateways written into its networks; `None` when no NIC takes one from a pool;
/// a wait while a claim is unanswered.
async fn pool_addresses(
    client: &Client,
    machine: &KVMMachine,
) -> Result<Result<Option<KVMMachine>, Waiting>, KvmError> {
    use capstan_model::ipam::{IPAddress, IPClaim};
    if machine
        .spec
        .networks
        .iter()
        .all(|n| n.ip_pool_ref.is_none())
    {
        return Ok(Ok(None));
    }
    let namespace = machine.namespace().unwrap_or_default();
    let name = machine.name_any();
    let claims: Api<IPClaim> = Api::namespaced(client.clone(), &namespace);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &namespace);
    let mut addressed = machine.clone();
    let mut missing = Vec::new();
    for (index, network) in addressed.spec.networks.iter_mut().enumerate() {
        let Some(pool) = network.ip_pool_ref.as_ref().map(|p| p.name.clone()) else {
            continue;
        };
        if network.address.is_some() {
            return Ok(Err(Waiting::new(
                "InvalidSpec",
                format!(
                    "spec.networks[{index}] has both address and ipPoolRef: keep one (ipPoolRef gives each machine of a template its own address)"
                ),
            )));
        }
        let claim_name = ip_claim_name(&name, index);
        let found = claims.get_opt(&claim_name).await.map_err(api(
            "reading",
            "IPClaim",
            &namespace,
            &claim_name,
        ))?;
        let Some(claim) = found else {
            let mut claim = IPClaim::new(&claim_name, Some(&namespace), Default::default());
            claim.spec.pool.name = Some(pool.clone());
            claim.spec.pool.namespace = Some(namespace.clone());
            if let Some(cluster) = machine.labels().get(LABEL_CLUSTER_NAME) {
                claim.metadata.labels = Some(
                    [(LABEL_CLUSTER_NAME.to_owned(), cluster.clone())]
                        .into_iter()
                        .collect(),
                );
            }
            claim.metadata.owner_references = machine.uid().map(|uid| {
                vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                        kind: "KVMMachine".into(),
                        name: name.clone(),
                        uid,
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    },
                ]
            });
            match claims
                .create(&kube::api::PostParams::default(), &claim)
                .await
            {
                Ok(_) => {}
                // Made by an earlier pass the cache had not seen.
                Err(kube::Error::Api(response)) if response.code == 409 => {}
                Err(error) => {
                    return Err(api("creating", "IPClaim", &namespace, &claim_name)(error));
                }
            }
            missing.push(format!("IPPool {pool} (IPClaim {claim_name} created)"));
            continue;
        };
        let status = claim.status.unwrap_or_default();
        if let Some(error) = status.error_message.filter(|e| !e.is_empty()) {
            missing.push(format!("IPPool {pool}: {error}"));
            continue;
        }
        let Some(address_name) = status.address.and_then(|a| a.name) else {
            missing.push(format!(
                "IPPool {pool} (IPClaim {claim_name} waiting for an address)"
            ));
            continue;
        };
        let Some(address) = addresses.get_opt(&address_name).await.map_err(api(
            "reading",
            "IPAddress",
            &namespace,
            &address_name,
        ))?
        else {
            missing.push(format!("IPPool {pool} (IPAddress {address_name} missing)"));
            continue;
        };
        network.address = Some(match address.spec.prefix {
            Some(prefix) => format!("{}/{prefix}", address.spec.address),
            None => address.spec.address.clone(),
        });
        if network.gateway.is_none() {
            network.gateway = address.spec.gateway.clone();
        }
    }
    if missing.is_empty() {
        Ok(Ok(Some(addressed)))
    } else {
        Ok(Err(Waiting::new(
            "WaitingForIPAddress",
            format!("waiting for addresses from IPPools: {}", missing.join("; ")),
        )
        .retry_after(Duration::from_secs(2))))
    }
}

impl InfraMachineProvider for KvmMachineProvider {
    type Machine = KVMMachine;
    type Error = KvmError;

    fn name(&self) -> &'static str {
        MACHINE_CONTROLLER
    }

    fn finalizer(&self) -> &'static str {
        MACHINE_FINALIZER
    }

    fn concurrency(&self) -> u16 {
        8
    }

    async fn ensure(
        &self,
        request: &MachineRequest<'_, KVMMachine>,
        context: &Context,
    ) -> Result<Progress<Provisioned>, KvmError> {
        match pool_addresses(context.client(), request.machine).await? {
            Err(waiting) => Ok(Progress::Waiting(waiting)),
            Ok(None) => self.ensure_addressed(request, context).await,
            Ok(Some(addressed)) => {
                let request = MachineRequest {
                    machine: &addressed,
                    owner: request.owner,
                    cluster_name: request.cluster_name,
                    bootstrap: request.bootstrap.clone(),
                    already_provisioned: request.already_provisioned,
                };
                self.ensure_addressed(&request, context).await
            }
        }
    }

    async fn release(
        &self,
        request: &ReleaseRequest<'_, KVMMachine>,
        context: &Context,
    ) -> Result<Progress<()>, KvmError> {
        let machine = request.machine;
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let status = machine.status.clone().unwrap_or_default();
        let (Some(hypervisor), Some(uri)) = (status.hypervisor, status.hypervisor_uri) else {
            // Never placed: nothing was made.
            return Ok(Progress::Done(()));
        };
        let domain = domain_name(&namespace, &name);
        let pool = status.pool.unwrap_or_else(|| DEFAULT_POOL.to_owned());
        // The hypervisor as a KVMCluster of the namespace lists it now, for its credentials (the
        // Cluster may be gone already).
        let clusters = Api::<KVMCluster>::namespaced(context.client().clone(), &namespace)
            .list(&ListParams::default())
            .await
            .map_err(api("listing", "KVMCluster", &namespace, ""))?;
        if let Some(listed) = clusters
            .items
            .iter()
            .flat_map(|c| c.spec.hypervisors.iter())
            .find(|h| h.name == hypervisor && h.uri == uri)
            && let Err(waiting) = self
                .authenticate(context.client(), &namespace, listed)
                .await?
        {
            return Ok(Progress::Waiting(waiting));
        }
        let wait = |error: DriverError| {
            let mut waiting = driver_wait(&hypervisor, &error);
            waiting.message.push_str(
                "; the VM and its volumes stay until the hypervisor answers (remove the finalizer to give up on them)",
            );
            Ok(Progress::Waiting(waiting))
        };
        if let Err(error) = self.driver.delete_domain(&uri, &domain).await {
            return wait(error);
        }
        for volume in owned_volumes(&domain, machine) {
            if let Err(error) = self.driver.delete_volume(&uri, &pool, &volume).await {
                return wait(error);
            }
        }
        context
            .publish(
                machine,
                EventType::Normal,
                "VMDeleted",
                "Release",
                format!("domain {domain} and its volumes removed from hypervisor {hypervisor}"),
            )
            .await;
        Ok(Progress::Done(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_names_what_is_short() {
        let capacity = Capacity {
            cpus: 4,
            memory_bytes: 8 << 30,
            used_vcpus: 2,
            used_memory_bytes: 6 << 30,
            pool_available_bytes: 10 << 30,
            ..Capacity::default()
        };
        let mut want = Needs {
            vcpus: 2,
            memory_bytes: 1 << 30,
            disk_bytes: 5 << 30,
        };
        assert_eq!(does_not_fit(&capacity, &want), None);
        want.memory_bytes = 3 << 30;
        assert_eq!(
            does_not_fit(&capacity, &want).as_deref(),
            Some("3072 MiB of memory asked, 2048 MiB free")
        );
        want.memory_bytes = 1 << 30;
        want.vcpus = 8;
        assert!(
            does_not_fit(&capacity, &want)
                .unwrap_or_default()
                .contains("8 vCPUs")
        );
        want.vcpus = 1;
        want.disk_bytes = 11 << 30;
        assert!(
            does_not_fit(&capacity, &want)
                .unwrap_or_default()
                .contains("in the pool")
        );
    }

    #[test]
    fn placed_machines_reserve_what_the_hypervisor_does_not_count_yet() {
        const GIB: u64 = 1 << 30;
        let needs = Needs {
            vcpus: 2,
            memory_bytes: 4 * GIB,
            disk_bytes: 27 * GIB,
        };
        let placed = |domain: &str| Placed {
            domain: domain.into(),
            volumes: vec![
                format!("{domain}-root.qcow2"),
                format!("{domain}-cidata.iso"),
            ],
            needs,
        };
        let capacity = Capacity {
            cpus: 16,
            memory_bytes: 32 * GIB,
            used_vcpus: 2,
            used_memory_bytes: 4 * GIB,
            pool_available_bytes: 100 * GIB,
            domains: ["built".to_owned()].into(),
            volumes: [
                ("built-root.qcow2".to_owned(), 20 * GIB),
                ("half-root.qcow2".to_owned(), 20 * GIB),
                ("half-2-root.qcow2".to_owned(), 20 * GIB),
            ]
            .into(),
        };
        // (placed machines, vCPUs used, memory used, pool left)
        let cases: [(Vec<Placed>, u32, u64, u64); 5] = [
            (vec![], 2, 4 * GIB, 100 * GIB),
            // Defined: already counted by libvirt and the pool.
            (vec![placed("built")], 2, 4 * GIB, 100 * GIB),
            // Placed, nothing made: all of it.
            (vec![placed("new")], 4, 8 * GIB, 73 * GIB),
            // Root disk made: only the rest of its disk ("half-2-root" is another machine's).
            (vec![placed("half")], 4, 8 * GIB, 93 * GIB),
            // More than is left: nothing, not an underflow.
            (
                vec![placed("a"), placed("b"), placed("c"), placed("d")],
                10,
                20 * GIB,
                0,
            ),
        ];
        for (placed, vcpus, memory, pool) in cases {
            let left = reserve(&capacity, &placed);
            let names: Vec<&str> = placed.iter().map(|p| p.domain.as_str()).collect();
            assert_eq!(
                (
                    left.used_vcpus,
                    left.used_memory_bytes,
                    left.pool_available_bytes
                ),
                (vcpus, memory, pool),
                "{names:?}"
            );
        }
        assert_eq!(
            does_not_fit(
                &reserve(&capacity, &[placed("a"), placed("b"), placed("c")]),
                &needs
            )
            .as_deref(),
            Some("27648 MiB of disk asked, 19456 MiB free in the pool")
        );
    }

    #[test]
    fn names_are_stable_and_distinct() {
        assert_eq!(domain_name("ns", "m1"), "capstan-kvm-ns-m1");
        assert_eq!(mac_address("u", 0), mac_address("u", 0));
        assert_ne!(mac_address("u", 0), mac_address("u", 1));
        assert!(mac_address("u", 0).starts_with("52:54:00:"));
        assert_eq!(provider_id("hv1", "abc"), "libvirt://hv1/abc");
        assert_eq!(
            base_volume("ABCDEF0123456789ff"),
            "capstan-kvm-base-abcdef0123456789.qcow2"
        );
    }

    /// Streams `image` as the provider does; what arrived and how it ended.
    async fn stream(image: &KvmImage) -> (Vec<u8>, Result<(), String>) {
        let opened = match crate::image::open(&image.url, 1 << 20, None).await {
            Ok(opened) => opened,
            Err(error) => return (Vec::new(), Err(error.reason().to_owned())),
        };
        let (sender, mut receiver) = tokio::sync::mpsc::channel(4);
        let checksum = image.checksum.clone().unwrap_or_default();
        let pump =
            tokio::spawn(
                async move { crate::image::pump(opened, "sha256", &checksum, sender).await },
            );
        let mut bytes = Vec::new();
        let mut done = false;
        while let Some(chunk) = receiver.recv().await {
            match chunk {
                crate::driver::Chunk::Data(data) => bytes.extend_from_slice(&data),
                crate::driver::Chunk::Done => done = true,
                crate::driver::Chunk::Failed => {}
            }
        }
        let result = pump
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .map_err(|e| e.reason().to_owned());
        assert_eq!(done, result.is_ok());
        (bytes, result)
    }

    #[tokio::test]
    async fn image_checksum_is_verified() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("img");
        std::fs::write(&path, b"image").unwrap_or_else(|e| panic!("{e}"));
        let good = hex(&sha2::Sha256::digest(b"image"));
        let mut image = KvmImage {
            url: format!("file://{}", path.display()),
            checksum: Some(good),
            ..KvmImage::default()
        };
        assert_eq!(stream(&image).await, (b"image".to_vec(), Ok(())));
        image.checksum = Some("00".repeat(32));
        assert_eq!(
            stream(&image).await.1,
            Err("ImageChecksumMismatch".to_owned())
        );
        image.url = "ftp://example.invalid/x.qcow2".into();
        assert_eq!(
            stream(&image).await.1,
            Err("UnsupportedImageURL".to_owned())
        );
        std::fs::write(&path, vec![0u8; (1 << 20) + 1]).unwrap_or_else(|e| panic!("{e}"));
        image.url = format!("file://{}", path.display());
        assert_eq!(stream(&image).await.1, Err("ImageTooLarge".to_owned()));
    }

    #[test]
    fn image_backoff_grows_to_five_minutes() {
        let seconds: Vec<u64> = [1, 2, 3, 7, 30].map(|a| image_backoff(a).as_secs()).into();
        assert_eq!(seconds, [5, 10, 20, 300, 300]);
    }
}
