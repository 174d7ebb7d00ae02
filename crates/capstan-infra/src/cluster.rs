//! The InfraCluster contract over an [`InfraClusterProvider`].
//!
//! One pass of [`InfraClusterController`]: deleted → [`InfraClusterProvider::release`] until done,
//! then the harness removes the finalizer; otherwise (the harness added the finalizer) wait for
//! the owning `Cluster` (owner reference of kind `Cluster` in `cluster.x-k8s.io`), then ask the
//! provider. `Done` writes `spec.controlPlaneEndpoint` when the provider computed one and the spec
//! has none, `status.initialization.provisioned`, `status.ready`, `status.failureDomains` (the
//! v1beta2 list of `{name, controlPlane, attributes}`) and `Ready`; `Waiting` writes `Ready` false
//! with the reason.

use crate::status;
use crate::{
    InfraError, Progress, REASON_DELETING, REASON_PROVISIONED, REASON_WAITING_FOR_OWNER, Waiting,
    api_error,
};
use capstan_model::capi::v1beta2::Cluster;
use capstan_runtime::{Action, Cleanup, Context, Reconciler};
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Controller;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

/// One failure domain machines can be spread over.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    /// Whether control-plane machines may be placed in it.
    pub control_plane: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// What a provisioned infrastructure cluster reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterProvisioned {
    /// The endpoint the provider computed, written to `spec.controlPlaneEndpoint` if unset there.
    pub control_plane_endpoint: Option<(String, i32)>,
    pub failure_domains: Vec<FailureDomain>,
}

/// An infrastructure provider's cluster side.
pub trait InfraClusterProvider: Send + Sync + 'static {
    /// The infrastructure cluster kind (e.g. Metal3Cluster).
    type Cluster: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// Why a provider step failed (retried with backoff).
    type Error: std::error::Error + Send + Sync + 'static;

    fn name(&self) -> &'static str;
    fn finalizer(&self) -> &'static str;
    /// Brings the cluster's infrastructure towards provisioned.
    fn ensure(
        &self,
        cluster: &Self::Cluster,
        owner: &Cluster,
        context: &Context,
    ) -> impl Future<Output = Result<Progress<ClusterProvisioned>, Self::Error>> + Send;
    /// Releases what the cluster's infrastructure holds.
    fn release(
        &self,
        cluster: &Self::Cluster,
        context: &Context,
    ) -> impl Future<Output = Result<Progress<()>, Self::Error>> + Send;
}

/// The controller of an [`InfraClusterProvider`]'s kind.
pub struct InfraClusterController<P> {
    provider: Arc<P>,
}

impl<P: InfraClusterProvider> InfraClusterController<P> {
    pub fn new(provider: P) -> Self {
        Self {
            provider: Arc::new(provider),
        }
    }

    fn kind() -> String {
        P::Cluster::kind(&()).into_owned()
    }

    async fn write(
        &self,
        api: &Api<P::Cluster>,
        cluster: &P::Cluster,
        owned: Map<String, Value>,
        ready: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), InfraError<P::Error>> {
        let condition = status::ready(ready, reason, message, cluster.meta().generation);
        status::write_status(api, cluster, owned, vec![condition])
            .await
            .map_err(InfraError::Status)?;
        Ok(())
    }

    async fn write_waiting(
        &self,
        api: &Api<P::Cluster>,
        cluster: &P::Cluster,
        waiting: &Waiting,
    ) -> Result<Action, InfraError<P::Error>> {
        let value = serde_json::to_value(cluster).unwrap_or(Value::Null);
        let mut owned = Map::new();
        if !crate::machine::is_provisioned(&value) {
            owned.insert("initialization".into(), json!({"provisioned": false}));
            owned.insert("ready".into(), json!(false));
        }
        self.write(
            api,
            cluster,
            owned,
            false,
            &waiting.reason,
            &waiting.message,
        )
        .await?;
        Ok(waiting
            .requeue_after
            .map_or_else(Action::await_change, Action::requeue))
    }
}

/// The owner Cluster's name, from the owner references.
pub fn owner_cluster_name(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references.as_ref().and_then(|refs| {
        refs.iter()
            .find(|r| {
                r.kind == "Cluster"
                    && capstan_model::meta::group_of(&r.api_version) == "cluster.x-k8s.io"
            })
            .map(|r| r.name.clone())
    })
}

impl<P: InfraClusterProvider> Reconciler for InfraClusterController<P> {
    type Object = P::Cluster;
    type Error = InfraError<P::Error>;

    fn name(&self) -> &'static str {
        self.provider.name()
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(self.provider.finalizer())
    }

    fn cluster_name(&self, object: &Self::Object) -> Option<String> {
        owner_cluster_name(object.meta()).or_else(|| {
            object
                .labels()
                .get(capstan_model::meta::LABEL_CLUSTER_NAME)
                .cloned()
        })
    }

    fn configure(
        &self,
        controller: Controller<Self::Object>,
        _client: &Client,
    ) -> Controller<Self::Object> {
        controller
    }

    async fn reconcile(
        &self,
        cluster: Arc<Self::Object>,
        context: Arc<Context>,
    ) -> Result<Action, Self::Error> {
        let kind = Self::kind();
        let name = cluster.name_any();
        let (namespace, api) = crate::namespaced(&*cluster, context.client())?;
        let owner = match owner_cluster_name(cluster.meta()) {
            Some(owner) => Api::<Cluster>::namespaced(context.client().clone(), &namespace)
                .get_opt(&owner)
                .await
                .map_err(api_error("reading", "Cluster", &namespace, &owner))?,
            None => None,
        };
        let Some(owner) = owner else {
            return self
                .write_waiting(
                    &api,
                    &cluster,
                    &Waiting::new(
                        REASON_WAITING_FOR_OWNER,
                        format!("waiting for a Cluster to own this {kind} (ownerReferences)"),
                    ),
                )
                .await;
        };
        match self
            .provider
            .ensure(&cluster, &owner, &context)
            .await
            .map_err(InfraError::Provider)?
        {
            Progress::Waiting(waiting) => self.write_waiting(&api, &cluster, &waiting).await,
            Progress::Done(provisioned) => {
                let value = serde_json::to_value(&*cluster).unwrap_or(Value::Null);
                let endpoint_set = value
                    .pointer("/spec/controlPlaneEndpoint/host")
                    .and_then(Value::as_str)
                    .is_some_and(|h| !h.is_empty());
                if let (Some((host, port)), false) =
                    (&provisioned.control_plane_endpoint, endpoint_set)
                {
                    let patch =
                        json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port}}});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(api_error(
                            "setting spec.controlPlaneEndpoint of",
                            &kind,
                            &namespace,
                            &name,
                        ))?;
                }
                let mut owned = Map::new();
                owned.insert("initialization".into(), json!({"provisioned": true}));
                owned.insert("ready".into(), json!(true));
                if !provisioned.failure_domains.is_empty() {
                    owned.insert(
                        "failureDomains".into(),
                        serde_json::to_value(&provisioned.failure_domains).unwrap_or(Value::Null),
                    );
                }
                self.write(&api, &cluster, owned, true, REASON_PROVISIONED, "")
                    .await?;
                Ok(Action::await_change())
            }
        }
    }

    /// The provider releases what the cluster's infrastructure holds; the harness removes the
    /// finalizer once it is done.
    async fn cleanup(
        &self,
        cluster: Arc<Self::Object>,
        context: Arc<Context>,
    ) -> Result<Cleanup, Self::Error> {
        let (_, api) = crate::namespaced(&*cluster, context.client())?;
        match self
            .provider
            .release(&cluster, &context)
            .await
            .map_err(InfraError::Provider)?
        {
            Progress::Done(()) => Ok(Cleanup::Done),
            Progress::Waiting(waiting) => {
                let waiting = waiting.or_reason(REASON_DELETING);
                let action = self.write_waiting(&api, &cluster, &waiting).await?;
                Ok(Cleanup::Pending(action))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_domains_serialise_as_the_v1beta2_list() {
        let domains = vec![FailureDomain {
            name: "rack-1".into(),
            control_plane: true,
            attributes: BTreeMap::new(),
        }];
        assert_eq!(
            serde_json::to_value(&domains).unwrap_or_default(),
            json!([{"name": "rack-1", "controlPlane": true}])
        );
    }
}
