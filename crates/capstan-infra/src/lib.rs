//! Cluster API's infrastructure contracts (v1beta2), implemented once.
//!
//! An infrastructure provider (Metal3 bare-metal hosts today, libvirt VMs next) answers two small
//! traits — [`InfraMachineProvider`] and [`InfraClusterProvider`] — and this crate does everything
//! the contracts ask of every provider:
//!
//! - **InfraMachine** ([`machine::InfraMachineController`]): finds the owning `Machine` through the
//!   owner reference and waits for it; follows the Cluster's pause (through the controller harness);
//!   waits for the Cluster's infrastructure and for the Machine's bootstrap data Secret
//!   (`spec.bootstrap.dataSecretName`, key `value`, format key `format`); then asks the provider to
//!   [`ensure`](InfraMachineProvider::ensure) the machine and, once it is provisioned, writes
//!   `spec.providerID`, `status.initialization.provisioned` (and `status.ready` for v1beta1-contract
//!   readers), `status.addresses`, `status.failureDomain` and a `Ready` condition with a reason. On
//!   deletion it asks the provider to [`release`](InfraMachineProvider::release) the machine, pass
//!   after pass, and removes its finalizer only once the provider says it is done.
//! - **InfraCluster** ([`cluster::InfraClusterController`]): waits for the owning `Cluster`, asks the
//!   provider for the control-plane endpoint and failure domains, writes
//!   `spec.controlPlaneEndpoint` when the provider computes it, `status.initialization.provisioned`,
//!   `status.ready`, `status.failureDomains` and a `Ready` condition.
//! - **Templates** (`…MachineTemplate`, `…ClusterTemplate`) have nothing to reconcile: the contract
//!   only asks that they are accepted and cloned by the CAPI controllers, which the API does.
//!
//! Status is written as a JSON merge patch of the fields above only, and only when one of them
//! changed; spec writes are merge patches of `spec.providerID` (or `spec.controlPlaneEndpoint`)
//! alone. Nothing here PUTs a typed object, so fields this code does not model survive.

pub mod cluster;
pub mod machine;
pub mod status;

pub use cluster::{
    ClusterProvisioned, FailureDomain, InfraClusterController, InfraClusterProvider,
};
pub use machine::{
    BootstrapData, InfraMachineController, InfraMachineProvider, MachineAddress, MachineRequest,
    Provisioned, ReleaseRequest,
};

use std::time::Duration;

/// Where a provider is with a long operation: done with its result, or still waiting for something.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress<T> {
    /// Finished, with the outcome.
    Done(T),
    /// Not finished; the reason and message become the `Ready` condition.
    Waiting(Waiting),
}

/// What a provider is waiting for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// A CamelCase reason for the condition (`WaitingForHost`, `Deprovisioning`).
    pub reason: String,
    /// What is happening and, when a person must act, what to do.
    pub message: String,
    /// Look again after this long; `None` waits for a watched change.
    pub requeue_after: Option<Duration>,
    /// Further conditions the provider keeps beside `Ready` (e.g. whether a host is associated).
    pub conditions: Vec<capstan_model::meta::Condition>,
}

impl Waiting {
    /// Waiting for `reason`, looked at again on a watched change.
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
            requeue_after: None,
            conditions: Vec::new(),
        }
    }

    /// Also writes `condition` (merged with the object's others by type).
    #[must_use]
    pub fn with_condition(mut self, condition: capstan_model::meta::Condition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// Also looks again after `delay`.
    #[must_use]
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// With `reason` when the provider named none (a release in progress says `Deleting`).
    #[must_use]
    pub fn or_reason(mut self, reason: &str) -> Self {
        if self.reason.is_empty() {
            self.reason = reason.to_owned();
        }
        self
    }
}

impl<T> Progress<T> {
    /// Waiting for `reason`, looked at again on a watched change.
    pub fn waiting(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Waiting(Waiting::new(reason, message))
    }
}

/// The condition every infrastructure object carries.
pub const CONDITION_READY: &str = "Ready";
/// Reason: no owner (Machine or Cluster) yet.
pub const REASON_WAITING_FOR_OWNER: &str = "WaitingForOwner";
/// Reason: the Cluster's infrastructure is not provisioned yet.
pub const REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
/// Reason: the Machine has no bootstrap data yet.
pub const REASON_WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
/// Reason: provisioned.
pub const REASON_PROVISIONED: &str = "Provisioned";
/// Reason: the provider is releasing what the object holds.
pub const REASON_DELETING: &str = "Deleting";

/// Why an infrastructure reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum InfraError<E: std::error::Error + 'static> {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: String,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("{kind} {name} has no namespace")]
    NoNamespace { kind: String, name: String },
    #[error("decoding {kind} {namespace}/{name}")]
    Decode {
        kind: &'static str,
        namespace: String,
        name: String,
        source: serde_json::Error,
    },
    #[error("writing the status")]
    Status(#[source] capstan_runtime::patch::PatchError),
    #[error("provider")]
    Provider(#[source] E),
}

/// The namespace of `object` (infrastructure objects are namespaced) and an `Api` of its kind
/// there.
pub(crate) fn namespaced<K, E>(
    object: &K,
    client: &kube::Client,
) -> Result<(String, kube::Api<K>), InfraError<E>>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    E: std::error::Error + 'static,
{
    use kube::ResourceExt;
    let Some(namespace) = object.namespace() else {
        return Err(InfraError::NoNamespace {
            kind: K::kind(&()).into_owned(),
            name: object.name_any(),
        });
    };
    let api = kube::Api::namespaced(client.clone(), &namespace);
    Ok((namespace, api))
}

/// Maps a kube error of `verb` on `kind` `namespace/name` into an [`InfraError`].
pub(crate) fn api_error<E: std::error::Error + 'static>(
    verb: &'static str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> InfraError<E> {
    let (kind, namespace, name) = (kind.to_owned(), namespace.to_owned(), name.to_owned());
    move |source| InfraError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}
