//! Metal3Machine: the [`InfraMachineProvider`] that puts a Machine on a BareMetalHost.
//!
//! `ensure`, one step per pass:
//!
//! 1. **Find the host**: the one named by the `metal3.io/BareMetalHost` annotation, or the one this
//!    process claimed for it, or (after a restart between claiming and annotating) the one whose
//!    `spec.consumerRef` names this machine — from the host cache, each confirmed by a live read.
//! 2. **Claim** one otherwise: a random `available` host matching `spec.hostSelector` (narrowed to
//!    the Machine's failure domain when hosts are labelled with it; chosen from the host cache, not
//!    a list per claim) gets `spec.consumerRef` by a
//!    merge patch carrying the host's `resourceVersion`. Two machines racing for one host: the
//!    server accepts one write and refuses the other with a conflict, and the loser selects again
//!    on its next pass, so no host is ever claimed twice, whatever the concurrency or restarts.
//!    No host → `Ready` False `NoAvailableHost` and `AssociateBareMetalHost` False
//!    `AssociateBareMetalHostFailed` (upstream CAPM3's condition), and a Warning Event, naming the
//!    selector, the namespace's hosts (matching, available, claimed) and what to do. Once a host is
//!    held, `AssociateBareMetalHost` is True.
//! 3. **Configure** the host (a resourceVersion-guarded merge patch of the fields this provider
//!    owns): `image` (url, checksum, checksumType, format), `userData` (a copy of the Machine's
//!    bootstrap data in Secret `<m3m>-user-data`), `metaData` (Secret `<m3m>-metadata`:
//!    `metal3-name`, `metal3-namespace`, plus the Metal3Data rendering if any), `networkData` (the
//!    host's own Secret when it names one, else the Metal3Data rendering, else none), `online`, and
//!    `automatedCleaningMode` from the Metal3Machine.
//! 4. **Wait** for the host to be `provisioned` with the image, then report providerID
//!    `metal3://NS/HOST/M3M`, the host's addresses and failure domain.
//! 5. **Label the Node**: through [`WorkloadAccess`], the workload Node labelled
//!    `metal3.io/uuid=<host uid>` gets the same `spec.providerID` (condition `NodeProviderID`).
//!
//! `release`: clear `image`, `userData` and the data this provider set (honouring
//! `automatedCleaningMode`), wait for the host to leave `provisioned`/`deprovisioning`, then clear
//! `consumerRef` — the host is back in the pool only once it is deprovisioned.

use crate::data::{self, RenderedData};
use crate::host::{
    self, ANNOTATION_HOST, LABEL_FAILURE_DOMAIN, LABEL_UUID, NetworkDataChoice, STATE_PROVISIONED,
};
use crate::{Metal3Error, api};
use capstan_infra::{
    InfraMachineProvider, MachineRequest, Progress, Provisioned, ReleaseRequest, Waiting,
};
use capstan_model::capm3::v1beta2::Metal3Machine;
use capstan_model::meta::{Condition, LABEL_CLUSTER_NAME};
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::conditions;
use capstan_runtime::{Context, EventType};
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rand::Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The Metal3Machine controller's name.
pub const MACHINE_CONTROLLER: &str = "metal3machine";
/// The finalizer that holds a Metal3Machine until its host is released.
pub const MACHINE_FINALIZER: &str = "metal3machine.infrastructure.cluster.x-k8s.io";
/// Condition: whether the workload Node carries the providerID.
pub const CONDITION_NODE_PROVIDER_ID: &str = "NodeProviderID";
/// Condition: whether the machine holds a BareMetalHost (upstream CAPM3's v1beta2 condition; its
/// v1beta1 one is `AssociateBMH`).
pub const CONDITION_ASSOCIATE_HOST: &str = "AssociateBareMetalHost";
/// Reason of [`CONDITION_ASSOCIATE_HOST`] when no host could be claimed (upstream's).
pub const REASON_ASSOCIATE_HOST_FAILED: &str = "AssociateBareMetalHostFailed";
/// Reason of [`CONDITION_ASSOCIATE_HOST`] once a host is held (upstream's).
pub const REASON_ASSOCIATE_HOST_SUCCESS: &str = "AssociateBareMetalHostSuccess";
/// How often a machine without a host looks again (a freed host also triggers it at once).
const NO_HOST_RETRY: Duration = Duration::from_secs(60);
/// How soon a machine that lost a claim race selects again.
const CLAIM_CONFLICT_RETRY: Duration = Duration::from_millis(50);
/// How often the Node is looked for until it carries the providerID.
const NODE_RETRY: Duration = Duration::from_secs(5);

/// The Metal3Machine side of the Metal3 provider.
#[derive(Clone, Default)]
pub struct Metal3MachineProvider {
    workloads: Option<SharedWorkloadAccess>,
    /// Hosts this process claimed, by machine (namespace, name): found again on the next pass
    /// even before the host cache has seen the claim.
    claims: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, String), String>>>,
}

impl Metal3MachineProvider {
    /// A provider that sets Node providerIDs through `workloads` (none: Nodes are left alone and the
    /// `NodeProviderID` condition says so).
    pub fn new(workloads: Option<SharedWorkloadAccess>) -> Self {
        Self {
            workloads,
            claims: std::sync::Arc::default(),
        }
    }
}

/// The name of the Secret holding a machine's copy of its bootstrap data.
pub fn user_data_secret(machine: &str) -> String {
    format!("{machine}-user-data")
}

/// The name of the Secret holding a machine's metaData.
pub fn meta_data_secret(machine: &str) -> String {
    format!("{machine}-metadata")
}

fn owner_reference(machine: &Metal3Machine) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: machine.api_version.clone(),
        kind: "Metal3Machine".into(),
        name: machine.name_any(),
        uid: machine.uid()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

fn host_key(annotation: &str) -> Option<(&str, &str)> {
    annotation.split_once('/')
}

impl Metal3MachineProvider {
    /// The host this machine holds: the one its annotation names, else the one this process
    /// claimed for it, else one whose consumerRef names it in the host cache (a claim made before a
    /// restart, or by an older version). With `live_fallback` (releasing, when no annotation says
    /// which), a live list settles what the cache may not show yet.
    async fn find_host(
        &self,
        context: &Context,
        machine: &Metal3Machine,
        live_fallback: bool,
    ) -> Result<Option<BareMetalHost>, Metal3Error> {
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
        let read = |host_name: String| {
            let (hosts, namespace) = (hosts.clone(), namespace.clone());
            async move {
                hosts.get_opt(&host_name).await.map_err(api(
                    "reading",
                    "BareMetalHost",
                    &namespace,
                    &host_name,
                ))
            }
        };
        let ours = |host: &BareMetalHost| {
            host::is_consumer(host.spec.consumer_ref.as_ref(), &namespace, &name)
        };
        let annotated = machine
            .annotations()
            .get(ANNOTATION_HOST)
            .and_then(|a| host_key(a))
            .filter(|(host_namespace, _)| *host_namespace == namespace)
            .map(|(_, host_name)| host_name.to_owned());
        let remembered = self.claimed(&namespace, &name);
        for host_name in annotated.iter().chain(remembered.iter()) {
            if let Some(host) = read(host_name.clone()).await?
                && ours(&host)
            {
                return Ok(Some(host));
            }
        }
        let cache = context.cache::<BareMetalHost>().await?;
        if let Some(cached) = cache.list(&namespace, |h| ours(h)).first()
            && let Some(host) = read(cached.name_any()).await?
            && ours(&host)
        {
            return Ok(Some(host));
        }
        if !live_fallback || annotated.is_some() || remembered.is_some() {
            return Ok(None);
        }
        let all = hosts.list(&ListParams::default()).await.map_err(api(
            "listing",
            "BareMetalHost",
            &namespace,
            "",
        ))?;
        Ok(all.items.into_iter().find(|h| ours(h)))
    }

    /// The host this process claimed for machine `namespace/name`.
    fn claimed(&self, namespace: &str, name: &str) -> Option<String> {
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn remember_claim(&self, namespace: &str, name: &str, host: Option<String>) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        match host {
            Some(host) => claims.insert(key, host),
            None => claims.remove(&key),
        };
    }

    /// Tries to claim a host; `Ok(None)` with a Waiting when none could be.
    async fn claim(
        &self,
        request: &MachineRequest<'_, Metal3Machine>,
        context: &Context,
    ) -> Result<Result<BareMetalHost, Waiting>, Metal3Error> {
        let machine = request.machine;
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
        let selector = machine.spec.host_selector.clone().unwrap_or_default();
        // Candidates come from the host cache: a host it shows free that was claimed meanwhile is
        // refused by the resourceVersion guard below, and the machine selects again.
        let cache = context.cache::<BareMetalHost>().await?;
        let owned = |hosts: Vec<std::sync::Arc<BareMetalHost>>| -> Vec<BareMetalHost> {
            hosts.iter().map(|h| (**h).clone()).collect()
        };
        let matching = owned(cache.list(&namespace, |h| selector.matches(host::labels(h))));
        let failure_domain = request
            .owner
            .spec
            .failure_domain
            .as_deref()
            .or(machine.spec.failure_domain.as_deref());
        let candidates = host::candidates(&matching, &selector, failure_domain);
        if candidates.is_empty() {
            let all = owned(cache.list(&namespace, |_| true));
            let message = host::no_host_message(&all, &selector, &namespace);
            let already_said = capstan_infra::machine::machine_conditions(machine)
                .iter()
                .any(|c| c.type_ == "Ready" && c.message.as_deref() == Some(message.as_str()));
            if !already_said {
                context
                    .publish(
                        machine,
                        EventType::Warning,
                        "NoAvailableHost",
                        "ClaimHost",
                        message.clone(),
                    )
                    .await;
            }
            // As upstream reports it, so what reads CAPM3's conditions finds it, and on Ready.
            let associate = conditions::condition(
                CONDITION_ASSOCIATE_HOST,
                conditions::FALSE,
                REASON_ASSOCIATE_HOST_FAILED,
                message.clone(),
                machine.metadata.generation,
            );
            return Ok(Err(Waiting::new("NoAvailableHost", message)
                .with_condition(associate)
                .retry_after(NO_HOST_RETRY)));
        }
        let pick = rand::rng().random_range(0..candidates.len());
        let chosen = candidates[pick];
        let host_name = chosen.name_any();
        let patch = json!({
            "metadata": {
                "resourceVersion": chosen.resource_version(),
                "labels": {LABEL_CLUSTER_NAME: request.cluster_name},
            },
            "spec": {"consumerRef": {
                "apiVersion": machine.api_version,
                "kind": "Metal3Machine",
                "name": name,
                "namespace": namespace,
                "uid": machine.uid(),
            }},
        });
        match hosts
            .patch(&host_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(host) => {
                tracing::info!(machine = %name, host = %host_name, namespace = %namespace, "claimed host");
                self.remember_claim(&namespace, &name, Some(host_name.clone()));
                context
                    .publish(
                        machine,
                        EventType::Normal,
                        "HostClaimed",
                        "ClaimHost",
                        format!("claimed BareMetalHost {namespace}/{host_name}"),
                    )
                    .await;
                Ok(Ok(host))
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Err(Waiting::new(
                "HostClaimConflict",
                format!("BareMetalHost {namespace}/{host_name} changed while claiming it; selecting again"),
            )
            .retry_after(CLAIM_CONFLICT_RETRY))),
            Err(err) => Err(api("claiming", "BareMetalHost", &namespace, &host_name)(err)),
        }
    }

    /// Writes (creating or replacing) Secret `name` with `data`, owned by `machine`.
    async fn ensure_secret(
        &self,
        context: &Context,
        machine: &Metal3Machine,
        name: &str,
        data: BTreeMap<String, ByteString>,
    ) -> Result<(), Metal3Error> {
        let namespace = machine.namespace().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(context.client().clone(), &namespace);
        // From memory: an older copy costs at most a patch that writes the same data again.
        let current = context
            .secrets()
            .get(&namespace, name)
            .await
            .map_err(api("reading", "Secret", &namespace, name))?;
        match current {
            Some(secret) if secret.data.as_ref() == Some(&data) => Ok(()),
            Some(_) => {
                let patch = json!({"data": data});
                let updated = secrets
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(api("updating", "Secret", &namespace, name))?;
                context.secrets().observe(&updated);
                Ok(())
            }
            None => {
                let mut labels = BTreeMap::new();
                if let Some(cluster) = machine.labels().get(LABEL_CLUSTER_NAME) {
                    labels.insert(LABEL_CLUSTER_NAME.to_owned(), cluster.clone());
                }
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(namespace.clone()),
                        labels: Some(labels),
                        owner_references: owner_reference(machine).map(|o| vec![o]),
                        ..Default::default()
                    },
                    data: Some(data),
                    type_: Some("Opaque".into()),
                    ..Default::default()
                };
                match secrets.create(&PostParams::default(), &secret).await {
                    Ok(created) => {
                        context.secrets().observe(&created);
                        Ok(())
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                    Err(err) => Err(api("creating", "Secret", &namespace, name)(err)),
                }
            }
        }
    }

    /// Points the host at the image and data; `true` when a write was made.
    async fn configure_host(
        &self,
        request: &MachineRequest<'_, Metal3Machine>,
        context: &Context,
        host: &BareMetalHost,
        rendered: Option<&RenderedData>,
    ) -> Result<Result<bool, Waiting>, Metal3Error> {
        let machine = request.machine;
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let Some(image) = machine.spec.image.as_ref().filter(|i| !i.url.is_empty()) else {
            return Ok(Err(Waiting::new(
                "NoImage",
                "spec.image.url of the Metal3Machine (from its Metal3MachineTemplate) is empty: set the image to deploy",
            )));
        };
        // Bootstrap data is copied once; after provisioning the host keeps what it booted with.
        if host.spec.user_data.is_none()
            && let Some(bootstrap) = &request.bootstrap
        {
            let mut data = BTreeMap::new();
            data.insert("userData".to_owned(), ByteString(bootstrap.value.clone()));
            data.insert(
                "format".to_owned(),
                ByteString(bootstrap.format.clone().into_bytes()),
            );
            self.ensure_secret(context, machine, &user_data_secret(&name), data)
                .await?;
        }
        let mut meta = serde_json::Map::new();
        meta.insert("metal3-name".into(), json!(host.name_any()));
        meta.insert("metal3-namespace".into(), json!(namespace));
        if let Some(rendered) = rendered {
            for (k, v) in &rendered.meta_data {
                meta.insert(k.clone(), v.clone());
            }
        }
        let mut meta_secret = BTreeMap::new();
        meta_secret.insert(
            "metaData".to_owned(),
            ByteString(serde_json::to_vec(&Value::Object(meta)).unwrap_or_default()),
        );
        self.ensure_secret(context, machine, &meta_data_secret(&name), meta_secret)
            .await?;
        let ours = data::network_data_names(&name);
        let network = host::network_data_choice(
            host.spec
                .network_data
                .as_ref()
                .and_then(|r| r.name.as_deref()),
            rendered.and_then(|r| r.network_data_secret.as_deref()),
            &ours,
        );
        let mut spec = serde_json::Map::new();
        let wanted_image = json!({
            "url": image.url,
            "checksum": image.checksum,
            "checksumType": image.checksum_type,
            "format": image.any_format(),
        });
        let current_image = host.spec.image.as_ref().map(|i| {
            json!({"url": i.url, "checksum": i.checksum, "checksumType": i.checksum_type, "format": i.format})
        });
        if current_image.as_ref() != Some(&wanted_image) {
            spec.insert("image".into(), wanted_image);
        }
        if host.spec.user_data.is_none() {
            spec.insert(
                "userData".into(),
                json!({"name": user_data_secret(&name), "namespace": namespace}),
            );
        }
        if host.spec.meta_data.as_ref().and_then(|r| r.name.as_deref())
            != Some(meta_data_secret(&name).as_str())
        {
            spec.insert(
                "metaData".into(),
                json!({"name": meta_data_secret(&name), "namespace": namespace}),
            );
        }
        if let NetworkDataChoice::Rendered(secret) = &network
            && host
                .spec
                .network_data
                .as_ref()
                .and_then(|r| r.name.as_deref())
                != Some(secret.as_str())
        {
            spec.insert(
                "networkData".into(),
                json!({"name": secret, "namespace": namespace}),
            );
        }
        if !host.spec.online {
            spec.insert("online".into(), json!(true));
        }
        if let Some(mode) = &machine.spec.automated_cleaning_mode
            && host.spec.automated_cleaning_mode.as_ref() != Some(mode)
        {
            spec.insert("automatedCleaningMode".into(), json!(mode));
        }
        if spec.is_empty() {
            return Ok(Ok(false));
        }
        let host_name = host.name_any();
        let patch = json!({"metadata": {"resourceVersion": host.resource_version()}, "spec": spec});
        match Api::<BareMetalHost>::namespaced(context.client().clone(), &namespace)
            .patch(&host_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(Ok(true)),
            // The host changed meanwhile: its watch event brings the next pass.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Ok(true)),
            Err(err) => Err(api("configuring", "BareMetalHost", &namespace, &host_name)(
                err,
            )),
        }
    }

    /// Sets `spec.providerID` on the workload Node labelled with the host's uid.
    async fn link_node(
        &self,
        cluster: &ClusterKey,
        host: &BareMetalHost,
        provider_id: &str,
        generation: Option<i64>,
    ) -> (Condition, Option<Duration>) {
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
                    "this controller runs without workload cluster access; the Node's providerID is left to the cloud provider".into(),
                ),
                None,
            );
        };
        let uid = host.uid().unwrap_or_default();
        let client = match workloads.client(cluster).await {
            Ok(client) => client,
            Err(err) => {
                return (
                    condition(
                        conditions::FALSE,
                        "WorkloadUnreachable",
                        format!(
                            "waiting for the workload API: {}",
                            capstan_runtime::controller::ErrorChain(&err)
                        ),
                    ),
                    Some(NODE_RETRY),
                );
            }
        };
        let nodes: Api<Node> = Api::all(client);
        let found = nodes
            .list(&ListParams::default().labels(&format!("{LABEL_UUID}={uid}")))
            .await;
        let node = match found {
            Ok(list) => list.items.into_iter().next(),
            Err(err) => {
                workloads.forget(cluster);
                return (
                    condition(
                        conditions::FALSE,
                        "WorkloadUnreachable",
                        format!("listing Nodes: {err}"),
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
                    format!("no Node labelled {LABEL_UUID}={uid} in the workload cluster yet"),
                ),
                Some(NODE_RETRY),
            );
        };
        let node_name = node.name_any();
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            Some(id) if id == provider_id => {}
            Some(other) if !other.is_empty() => {
                return (
                    condition(
                        conditions::FALSE,
                        "ProviderIDMismatch",
                        format!(
                            "Node {node_name} already has providerID {other}, not {provider_id}: the kubelet's --provider-id disagrees with the host; fix the bootstrap data"
                        ),
                    ),
                    None,
                );
            }
            _ => {
                let patch = json!({"spec": {"providerID": provider_id}});
                if let Err(err) = nodes
                    .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    return (
                        condition(
                            conditions::FALSE,
                            "NodePatchFailed",
                            format!("setting providerID of Node {node_name}: {err}"),
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
}

impl InfraMachineProvider for Metal3MachineProvider {
    type Machine = Metal3Machine;
    type Error = Metal3Error;

    fn name(&self) -> &'static str {
        MACHINE_CONTROLLER
    }

    fn finalizer(&self) -> &'static str {
        MACHINE_FINALIZER
    }

    fn configure(
        &self,
        controller: Controller<Metal3Machine>,
        client: &Client,
    ) -> Controller<Metal3Machine> {
        let store = controller.store();
        controller.watches(
            Api::<BareMetalHost>::all(client.clone()),
            watcher::Config::default(),
            move |host: BareMetalHost| {
                let namespace = host.namespace().unwrap_or_default();
                match &host.spec.consumer_ref {
                    Some(consumer) if consumer.kind.as_deref() == Some("Metal3Machine") => consumer
                        .name
                        .as_ref()
                        .map(|name| {
                            ObjectRef::new(name)
                                .within(consumer.namespace.as_deref().unwrap_or(&namespace))
                        })
                        .into_iter()
                        .collect::<Vec<_>>(),
                    Some(_) => Vec::new(),
                    // A free host: every machine of the namespace still looking for one.
                    None if host::unclaimable(&host).is_none() => store
                        .state()
                        .into_iter()
                        .filter(|m| {
                            m.namespace().as_deref() == Some(namespace.as_str())
                                && !m.annotations().contains_key(ANNOTATION_HOST)
                                && m.metadata.deletion_timestamp.is_none()
                        })
                        .map(|m| ObjectRef::from_obj(&*m))
                        .collect(),
                    None => Vec::new(),
                }
            },
        )
    }

    async fn ensure(
        &self,
        request: &MachineRequest<'_, Metal3Machine>,
        context: &Context,
    ) -> Result<Progress<Provisioned>, Metal3Error> {
        let machine = request.machine;
        let namespace = machine.namespace().unwrap_or_default();
        let host = match self.find_host(context, machine, false).await? {
            Some(host) => host,
            None => match self.claim(request, context).await? {
                Ok(host) => host,
                Err(waiting) => return Ok(Progress::Waiting(waiting)),
            },
        };
        let associated = conditions::condition(
            CONDITION_ASSOCIATE_HOST,
            conditions::TRUE,
            REASON_ASSOCIATE_HOST_SUCCESS,
            format!("BareMetalHost {namespace}/{}", host.name_any()),
            machine.metadata.generation,
        );
        Ok(match self.ensure_on_host(request, context, host).await? {
            Progress::Done(mut provisioned) => {
                provisioned.conditions.push(associated);
                Progress::Done(provisioned)
            }
            Progress::Waiting(waiting) => Progress::Waiting(waiting.with_condition(associated)),
        })
    }

    async fn release(
        &self,
        request: &ReleaseRequest<'_, Metal3Machine>,
        context: &Context,
    ) -> Result<Progress<()>, Metal3Error> {
        self.release_host(request, context).await
    }
}

impl Metal3MachineProvider {
    /// Steps 3 to 5 on the host the machine holds.
    async fn ensure_on_host(
        &self,
        request: &MachineRequest<'_, Metal3Machine>,
        context: &Context,
        host: BareMetalHost,
    ) -> Result<Progress<Provisioned>, Metal3Error> {
        let machine = request.machine;
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let host_name = host.name_any();
        let annotation = format!("{namespace}/{host_name}");
        if machine.annotations().get(ANNOTATION_HOST) != Some(&annotation) {
            let patch = json!({"metadata": {"annotations": {ANNOTATION_HOST: annotation}}});
            Api::<Metal3Machine>::namespaced(client.clone(), &namespace)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api("annotating", "Metal3Machine", &namespace, &name))?;
        }
        let rendered = match data::rendered_data(client, machine, &host).await? {
            Progress::Done(rendered) => rendered,
            Progress::Waiting(waiting) => return Ok(Progress::Waiting(waiting)),
        };
        if !request.already_provisioned {
            match self
                .configure_host(request, context, &host, rendered.as_ref())
                .await?
            {
                Ok(true) => {
                    return Ok(Progress::Waiting(Waiting::new(
                        "Provisioning",
                        format!(
                            "BareMetalHost {namespace}/{host_name} configured with the image and bootstrap data"
                        ),
                    )));
                }
                Ok(false) => {}
                Err(waiting) => return Ok(Progress::Waiting(waiting)),
            }
        }
        let status = host.status.clone().unwrap_or_default();
        if status.error_type.as_deref().is_some_and(|e| !e.is_empty()) {
            return Ok(Progress::Waiting(Waiting::new(
                "HostError",
                format!(
                    "BareMetalHost {namespace}/{host_name}: {}: {}",
                    status.error_type.unwrap_or_default(),
                    status.error_message
                ),
            )));
        }
        let state = host::state(&host);
        let image_url = machine.spec.image.as_ref().map(|i| i.url.as_str());
        let deployed = status.provisioning.image.as_ref().map(|i| i.url.as_str());
        if state != STATE_PROVISIONED || (!request.already_provisioned && deployed != image_url) {
            return Ok(Progress::Waiting(Waiting::new(
                "WaitingForHostProvisioning",
                format!(
                    "BareMetalHost {namespace}/{host_name} is {state:?}, waiting for provisioned"
                ),
            )));
        }
        let provider_id = host::provider_id(&namespace, &host_name, &name);
        let failure_domain = request
            .owner
            .spec
            .failure_domain
            .clone()
            .or_else(|| host.labels().get(LABEL_FAILURE_DOMAIN).cloned());
        let already_linked = capstan_infra::machine::machine_conditions(machine)
            .iter()
            .any(|c| c.type_ == CONDITION_NODE_PROVIDER_ID && c.status == conditions::TRUE);
        let (node_condition, requeue_after) = if already_linked {
            (None, None)
        } else {
            let cluster = ClusterKey::new(namespace.clone(), request.cluster_name);
            let (condition, requeue) = self
                .link_node(&cluster, &host, &provider_id, machine.metadata.generation)
                .await;
            (Some(condition), requeue)
        };
        Ok(Progress::Done(Provisioned {
            provider_id,
            addresses: host::addresses(&host),
            failure_domain,
            conditions: node_condition.into_iter().collect(),
            requeue_after,
        }))
    }

    /// Releases the host the machine holds, one step per pass (see the module's `release`).
    async fn release_host(
        &self,
        request: &ReleaseRequest<'_, Metal3Machine>,
        context: &Context,
    ) -> Result<Progress<()>, Metal3Error> {
        let machine = request.machine;
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let Some(host) = self.find_host(context, machine, true).await? else {
            self.remember_claim(&namespace, &name, None);
            self.delete_secrets(client, &namespace, &name).await?;
            return Ok(Progress::Done(()));
        };
        let host_name = host.name_any();
        let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
        let ours = data::network_data_names(&name);
        let mut spec = serde_json::Map::new();
        if host.spec.image.is_some() {
            spec.insert("image".into(), Value::Null);
        }
        if host.spec.user_data.is_some() {
            spec.insert("userData".into(), Value::Null);
        }
        if host.spec.meta_data.as_ref().and_then(|r| r.name.as_deref())
            == Some(meta_data_secret(&name).as_str())
        {
            spec.insert("metaData".into(), Value::Null);
        }
        if host
            .spec
            .network_data
            .as_ref()
            .and_then(|r| r.name.as_deref())
            .is_some_and(|n| ours.iter().any(|o| o == n))
        {
            spec.insert("networkData".into(), Value::Null);
        }
        if let Some(mode) = &machine.spec.automated_cleaning_mode
            && host.spec.automated_cleaning_mode.as_ref() != Some(mode)
        {
            spec.insert("automatedCleaningMode".into(), json!(mode));
        }
        if !spec.is_empty() && host.metadata.deletion_timestamp.is_none() {
            let patch =
                json!({"metadata": {"resourceVersion": host.resource_version()}, "spec": spec});
            match crate::tolerate_conflict(
                hosts
                    .patch(&host_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            ) {
                Ok(()) => {}
                Err(err) => {
                    return Err(api(
                        "deprovisioning",
                        "BareMetalHost",
                        &namespace,
                        &host_name,
                    )(err));
                }
            }
            return Ok(Progress::Waiting(Waiting::new(
                "Deprovisioning",
                format!("deprovisioning BareMetalHost {namespace}/{host_name}"),
            )));
        }
        let state = host::state(&host);
        if host.metadata.deletion_timestamp.is_none()
            && matches!(state, "provisioning" | "provisioned" | "deprovisioning")
        {
            return Ok(Progress::Waiting(Waiting::new(
                "Deprovisioning",
                format!(
                    "waiting for BareMetalHost {namespace}/{host_name} to finish deprovisioning (now {state:?})"
                ),
            )));
        }
        let patch = json!({
            "metadata": {"resourceVersion": host.resource_version(), "labels": {LABEL_CLUSTER_NAME: null}},
            "spec": {"consumerRef": null},
        });
        match hosts
            .patch(&host_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                return Ok(Progress::Waiting(
                    Waiting::new(
                        "Releasing",
                        format!("releasing BareMetalHost {namespace}/{host_name}"),
                    )
                    .retry_after(CLAIM_CONFLICT_RETRY),
                ));
            }
            Err(err) => {
                return Err(api("releasing", "BareMetalHost", &namespace, &host_name)(
                    err,
                ));
            }
        }
        context
            .publish(
                machine,
                EventType::Normal,
                "HostReleased",
                "ReleaseHost",
                format!("released BareMetalHost {namespace}/{host_name}"),
            )
            .await;
        self.delete_secrets(client, &namespace, &name).await?;
        Ok(Progress::Done(()))
    }
}

impl Metal3MachineProvider {
    async fn delete_secrets(
        &self,
        client: &Client,
        namespace: &str,
        machine: &str,
    ) -> Result<(), Metal3Error> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        for name in [user_data_secret(machine), meta_data_secret(machine)] {
            match secrets.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(api("deleting", "Secret", namespace, &name)(err)),
            }
        }
        Ok(())
    }
}
