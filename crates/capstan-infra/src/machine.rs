//! The InfraMachine contract over an [`InfraMachineProvider`].
//!
//! One pass of [`InfraMachineController`]:
//!
//! 1. Deleted → [`InfraMachineProvider::release`] ([`Reconciler::cleanup`]); the harness removes
//!    the finalizer once it reports done.
//! 2. No finalizer yet → the harness adds it (the write triggers the next pass).
//! 3. Owner `Machine` (owner reference of kind `Machine` in `cluster.x-k8s.io`) → wait until set.
//! 4. The Cluster (`Machine.spec.clusterName`) → wait until it exists and reports
//!    `status.initialization.infrastructureProvisioned`.
//! 5. Bootstrap data (`Machine.spec.bootstrap.dataSecretName`, key `value`) → wait until the Secret
//!    exists (not needed any more once the machine is provisioned).
//! 6. [`InfraMachineProvider::ensure`] → `Done` writes `spec.providerID` and the provisioned status;
//!    `Waiting` writes the `Ready` condition with the provider's reason (and the provider's other
//!    conditions, if it gives any).
//!
//! `status.initialization.provisioned` is one-way, as the contract says: once true it stays true.
//! The controller is triggered by changes to its objects, to their owner Machines (bootstrap data
//! appears there) and to Clusters (pause and infrastructure readiness), plus whatever the provider
//! watches in [`InfraMachineProvider::configure`].

use crate::status::{self, conditions_of};
use crate::{
    InfraError, Progress, REASON_DELETING, REASON_PROVISIONED, REASON_WAITING_FOR_BOOTSTRAP_DATA,
    REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE, REASON_WAITING_FOR_OWNER, Waiting, api_error,
};
use capstan_model::capi::v1beta2::{Cluster, Machine};
use capstan_model::meta::Condition;
use capstan_runtime::tables::{ObjectCaches, decode};
use capstan_runtime::watches::watches_cached;
use capstan_runtime::{Action, Cleanup, Context, Reconciler};
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

/// The group of the CAPI core kinds.
const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// One address of a machine, as `status.addresses` lists them (`InternalIP`, `ExternalIP`,
/// `Hostname`, `InternalDNS`, `ExternalDNS`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineAddress {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

impl MachineAddress {
    pub fn new(type_: &str, address: impl Into<String>) -> Self {
        Self {
            type_: type_.to_owned(),
            address: address.into(),
        }
    }
}

/// What a provisioned machine reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Provisioned {
    /// `spec.providerID`: what the workload Node's `spec.providerID` is matched against.
    pub provider_id: String,
    pub addresses: Vec<MachineAddress>,
    pub failure_domain: Option<String>,
    /// Further conditions the provider keeps (e.g. whether the Node got its providerID).
    pub conditions: Vec<Condition>,
    /// Look again after this long (for follow-up work after provisioning).
    pub requeue_after: Option<std::time::Duration>,
}

/// A Machine's bootstrap data (the `value` of its data Secret). Never log it.
#[derive(Clone)]
pub struct BootstrapData {
    /// The Secret it was read from.
    pub secret_name: String,
    /// The data (a cloud-config or an Ignition document).
    pub value: Vec<u8>,
    /// `cloud-config` unless the Secret's `format` says otherwise.
    pub format: String,
}

impl Debug for BootstrapData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapData")
            .field("secret_name", &self.secret_name)
            .field("format", &self.format)
            .field("value", &format_args!("<{} bytes>", self.value.len()))
            .finish()
    }
}

/// What [`InfraMachineProvider::ensure`] gets.
#[derive(Debug)]
pub struct MachineRequest<'a, M> {
    /// The infrastructure machine.
    pub machine: &'a M,
    /// Its owner Machine.
    pub owner: &'a Machine,
    /// The Cluster's name (in the machine's namespace).
    pub cluster_name: &'a str,
    /// The bootstrap data; `None` only once the machine is already provisioned and the Secret is
    /// gone.
    pub bootstrap: Option<BootstrapData>,
    /// Whether `status.initialization.provisioned` is already true.
    pub already_provisioned: bool,
}

/// What [`InfraMachineProvider::release`] gets.
#[derive(Debug)]
pub struct ReleaseRequest<'a, M> {
    pub machine: &'a M,
    /// The owner Machine, when it still exists.
    pub owner: Option<&'a Machine>,
}

/// An infrastructure provider's machine side: the part that differs between providers.
pub trait InfraMachineProvider: Send + Sync + 'static {
    /// The infrastructure machine kind (e.g. Metal3Machine).
    type Machine: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// Why a provider step failed (retried with backoff).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The controller's name.
    fn name(&self) -> &'static str;
    /// The finalizer that holds the object until [`Self::release`] is done.
    fn finalizer(&self) -> &'static str;
    /// Objects reconciled at once: ten, as every controller's default (see
    /// [`capstan_runtime::Reconciler::concurrency`]).
    fn concurrency(&self) -> u16 {
        10
    }
    /// Extra triggers (watches of provider kinds).
    fn configure(
        &self,
        controller: Controller<Self::Machine>,
        _client: &Client,
    ) -> Controller<Self::Machine> {
        controller
    }
    /// Brings the machine towards provisioned; idempotent, one step per call.
    fn ensure(
        &self,
        request: &MachineRequest<'_, Self::Machine>,
        context: &Context,
    ) -> impl Future<Output = Result<Progress<Provisioned>, Self::Error>> + Send;
    /// Releases what the machine holds; idempotent, one step per call.
    fn release(
        &self,
        request: &ReleaseRequest<'_, Self::Machine>,
        context: &Context,
    ) -> impl Future<Output = Result<Progress<()>, Self::Error>> + Send;
}

/// The controller of an [`InfraMachineProvider`]'s kind.
pub struct InfraMachineController<P> {
    provider: Arc<P>,
}

impl<P: InfraMachineProvider> InfraMachineController<P> {
    pub fn new(provider: P) -> Self {
        Self {
            provider: Arc::new(provider),
        }
    }
}

type InfraResult<T, P> = Result<T, InfraError<<P as InfraMachineProvider>::Error>>;

/// The owner Machine's name, from the owner references.
pub fn owner_machine_name(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references.as_ref().and_then(|refs| {
        refs.iter()
            .find(|r| {
                r.kind == "Machine" && capstan_model::meta::group_of(&r.api_version) == CAPI_GROUP
            })
            .map(|r| r.name.clone())
    })
}

/// Reads `status.initialization.provisioned`.
pub fn is_provisioned(object: &Value) -> bool {
    object
        .pointer("/status/initialization/provisioned")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

impl<P: InfraMachineProvider> InfraMachineController<P> {
    fn kind() -> String {
        P::Machine::kind(&()).into_owned()
    }

    async fn write_waiting(
        &self,
        api: &Api<P::Machine>,
        machine: &P::Machine,
        waiting: &Waiting,
    ) -> InfraResult<Action, P> {
        let value = serde_json::to_value(machine).unwrap_or(Value::Null);
        let mut owned = Map::new();
        if !is_provisioned(&value) {
            owned.insert("initialization".into(), json!({"provisioned": false}));
            owned.insert("ready".into(), json!(false));
        }
        let condition = status::ready(
            false,
            &waiting.reason,
            waiting.message.clone(),
            machine.meta().generation,
        );
        let mut conditions = vec![condition];
        conditions.extend(waiting.conditions.iter().cloned());
        status::write_status(api, machine, owned, conditions)
            .await
            .map_err(InfraError::Status)?;
        Ok(waiting
            .requeue_after
            .map_or_else(Action::await_change, Action::requeue))
    }

    async fn write_provisioned(
        &self,
        api: &Api<P::Machine>,
        machine: &P::Machine,
        provisioned: Provisioned,
    ) -> InfraResult<Action, P> {
        let value = serde_json::to_value(machine).unwrap_or(Value::Null);
        let name = machine.name_any();
        let namespace = machine.namespace().unwrap_or_default();
        if value.pointer("/spec/providerID").and_then(Value::as_str)
            != Some(provisioned.provider_id.as_str())
        {
            let patch = json!({"spec": {"providerID": provisioned.provider_id}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "setting spec.providerID of",
                    &Self::kind(),
                    &namespace,
                    &name,
                ))?;
        }
        let mut owned = Map::new();
        owned.insert("initialization".into(), json!({"provisioned": true}));
        owned.insert("ready".into(), json!(true));
        // Upstream's list holds at least one address: none known, none kept.
        let addresses = if provisioned.addresses.is_empty() {
            Value::Null
        } else {
            serde_json::to_value(&provisioned.addresses).unwrap_or(Value::Null)
        };
        owned.insert("addresses".into(), addresses);
        if let Some(domain) = &provisioned.failure_domain {
            owned.insert("failureDomain".into(), json!(domain));
        }
        let mut conditions = vec![status::ready(
            true,
            REASON_PROVISIONED,
            "",
            machine.meta().generation,
        )];
        conditions.extend(provisioned.conditions);
        status::write_status(api, machine, owned, conditions)
            .await
            .map_err(InfraError::Status)?;
        Ok(provisioned
            .requeue_after
            .map_or_else(Action::await_change, Action::requeue))
    }

    /// The owner Machine, from the process's cache of Machines (this controller's Machine trigger
    /// records every change there before it wakes the machine).
    async fn owner(
        &self,
        context: &Context,
        machine: &P::Machine,
    ) -> InfraResult<Option<Machine>, P> {
        let Some(owner) = owner_machine_name(machine.meta()) else {
            return Ok(None);
        };
        let namespace = machine.namespace().unwrap_or_default();
        Ok(context
            .objects()
            .typed::<Machine>()
            .get(&namespace, &owner)
            .await
            .map_err(api_error("reading", "Machine", &namespace, &owner))?
            .map(Arc::unwrap_or_clone))
    }

    async fn reconcile_normal(
        &self,
        api: &Api<P::Machine>,
        machine: &P::Machine,
        context: &Context,
    ) -> InfraResult<Action, P> {
        let namespace = machine.namespace().unwrap_or_default();
        let kind = Self::kind();
        let value = serde_json::to_value(machine).unwrap_or(Value::Null);
        let already_provisioned = is_provisioned(&value);
        let Some(owner) = self.owner(context, machine).await? else {
            return self
                .write_waiting(
                    api,
                    machine,
                    &Waiting::new(
                        REASON_WAITING_FOR_OWNER,
                        format!("waiting for a Machine to own this {kind} (ownerReferences)"),
                    ),
                )
                .await;
        };
        let cluster_name = owner.spec.cluster_name.clone();
        // From the process's table of Clusters, which the Cluster trigger updates first.
        let cluster: Option<Cluster> = context
            .clusters()
            .get(&namespace, &cluster_name)
            .await
            .map_err(api_error("reading", "Cluster", &namespace, &cluster_name))?
            .map(|raw| {
                decode(&raw).map_err(|source| InfraError::Decode {
                    kind: "Cluster",
                    namespace: namespace.clone(),
                    name: cluster_name.clone(),
                    source,
                })
            })
            .transpose()?;
        let infrastructure_ready = cluster.as_ref().is_some_and(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.get("infrastructureProvisioned"))
                .and_then(Value::as_bool)
                == Some(true)
        });
        if !infrastructure_ready && !already_provisioned {
            return self
                .write_waiting(
                    api,
                    machine,
                    &Waiting::new(
                        REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                        format!(
                            "waiting for Cluster {namespace}/{cluster_name} to report \
                             status.initialization.infrastructureProvisioned"
                        ),
                    ),
                )
                .await;
        }
        let bootstrap = match owner.spec.bootstrap.data_secret_name.as_deref() {
            Some(secret_name) => {
                // From memory: the bootstrap provider writes the data once and never changes it.
                let secret = context
                    .secrets()
                    .get(&namespace, secret_name)
                    .await
                    .map_err(api_error("reading", "Secret", &namespace, secret_name))?;
                secret.and_then(|secret| {
                    let data = secret.data.clone().unwrap_or_default();
                    let value = data.get("value")?.0.clone();
                    let format = data
                        .get("format")
                        .and_then(|f| String::from_utf8(f.0.clone()).ok())
                        .unwrap_or_else(|| "cloud-config".to_owned());
                    Some(BootstrapData {
                        secret_name: secret_name.to_owned(),
                        value,
                        format,
                    })
                })
            }
            None => None,
        };
        if bootstrap.is_none() && !already_provisioned {
            let message = match owner.spec.bootstrap.data_secret_name.as_deref() {
                Some(secret) => format!(
                    "waiting for bootstrap data Secret {namespace}/{secret} (key `value`) of Machine {}",
                    owner.name_any()
                ),
                None => format!(
                    "waiting for Machine {} to have spec.bootstrap.dataSecretName",
                    owner.name_any()
                ),
            };
            return self
                .write_waiting(
                    api,
                    machine,
                    &Waiting::new(REASON_WAITING_FOR_BOOTSTRAP_DATA, message),
                )
                .await;
        }
        let request = MachineRequest {
            machine,
            owner: &owner,
            cluster_name: &cluster_name,
            bootstrap,
            already_provisioned,
        };
        match self
            .provider
            .ensure(&request, context)
            .await
            .map_err(InfraError::Provider)?
        {
            Progress::Done(provisioned) => self.write_provisioned(api, machine, provisioned).await,
            Progress::Waiting(waiting) => self.write_waiting(api, machine, &waiting).await,
        }
    }

    async fn reconcile_delete(
        &self,
        api: &Api<P::Machine>,
        machine: &P::Machine,
        context: &Context,
    ) -> InfraResult<Cleanup, P> {
        let owner = self.owner(context, machine).await?;
        let request = ReleaseRequest {
            machine,
            owner: owner.as_ref(),
        };
        match self
            .provider
            .release(&request, context)
            .await
            .map_err(InfraError::Provider)?
        {
            Progress::Done(()) => Ok(Cleanup::Done),
            Progress::Waiting(waiting) => {
                let waiting = waiting.or_reason(REASON_DELETING);
                let action = self.write_waiting(api, machine, &waiting).await?;
                Ok(Cleanup::Pending(action))
            }
        }
    }
}

impl<P: InfraMachineProvider> Reconciler for InfraMachineController<P> {
    type Object = P::Machine;
    type Error = InfraError<P::Error>;

    fn name(&self) -> &'static str {
        self.provider.name()
    }

    fn concurrency(&self) -> u16 {
        self.provider.concurrency()
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(self.provider.finalizer())
    }

    fn configure_with_caches(
        &self,
        controller: Controller<Self::Object>,
        client: &Client,
        objects: &ObjectCaches,
    ) -> Controller<Self::Object> {
        let kind = Self::kind();
        let controller = watches_cached(
            controller,
            client,
            objects.typed::<Machine>(),
            move |owner: Machine| {
                let reference = &owner.spec.infrastructure_ref;
                (reference.kind == kind && !reference.name.is_empty()).then(|| {
                    let mut object = ObjectRef::new(&reference.name);
                    if let Some(namespace) = owner.namespace() {
                        object = object.within(&namespace);
                    }
                    object
                })
            },
        );
        self.provider.configure(controller, client)
    }

    async fn reconcile(
        &self,
        object: Arc<Self::Object>,
        context: Arc<Context>,
    ) -> Result<Action, Self::Error> {
        let (_, api) = crate::namespaced(&*object, context.client())?;
        self.reconcile_normal(&api, &object, &context).await
    }

    /// The provider releases what the machine holds; the harness removes the finalizer once it
    /// is done.
    async fn cleanup(
        &self,
        object: Arc<Self::Object>,
        context: Arc<Context>,
    ) -> Result<Cleanup, Self::Error> {
        let (_, api) = crate::namespaced(&*object, context.client())?;
        self.reconcile_delete(&api, &object, &context).await
    }
}

/// The conditions of an infrastructure machine (for tests and `describe`).
pub fn machine_conditions<M: Serialize>(machine: &M) -> Vec<Condition> {
    conditions_of(&serde_json::to_value(machine).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn owner_is_the_capi_machine_whatever_its_version() {
        let reference = |api_version: &str, kind: &str, name: &str| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            ..Default::default()
        };
        let cases = [
            (
                vec![reference("cluster.x-k8s.io/v1beta1", "Machine", "m1")],
                Some("m1"),
            ),
            (
                vec![reference("cluster.x-k8s.io/v1beta2", "Machine", "m2")],
                Some("m2"),
            ),
            (vec![reference("example.com/v1", "Machine", "other")], None),
            (
                vec![
                    reference("cluster.x-k8s.io/v1beta2", "MachineSet", "ms"),
                    reference("cluster.x-k8s.io/v1beta2", "Machine", "m3"),
                ],
                Some("m3"),
            ),
            (Vec::new(), None),
        ];
        for (refs, want) in cases {
            let meta = kube::api::ObjectMeta {
                owner_references: Some(refs.clone()),
                ..Default::default()
            };
            assert_eq!(owner_machine_name(&meta).as_deref(), want, "{refs:?}");
        }
    }

    #[test]
    fn provisioned_flag_reads_the_v1beta2_field() {
        assert!(is_provisioned(
            &json!({"status": {"initialization": {"provisioned": true}}})
        ));
        assert!(!is_provisioned(&json!({"status": {"ready": true}})));
        assert!(!is_provisioned(&json!({})));
    }

    #[test]
    fn bootstrap_data_never_shows_its_value() {
        let data = BootstrapData {
            secret_name: "s".into(),
            value: b"token: abcdef.0123456789abcdef".to_vec(),
            format: "cloud-config".into(),
        };
        let shown = format!("{data:?}");
        assert!(!shown.contains("abcdef"), "{shown}");
    }
}
