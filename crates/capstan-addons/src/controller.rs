//! The ClusterResourceSet controller.
//!
//! One pass over a ClusterResourceSet:
//! 1. reads the ConfigMaps and Secrets `spec.resources` names (a missing one, a Secret of the wrong
//!    type or data that is not YAML/JSON is a problem named in the condition and an Event; the other
//!    resources still go ahead, as upstream);
//! 2. selects the Clusters of its namespace that `spec.clusterSelector` matches (an empty selector
//!    matches none, as upstream) and that are not being deleted;
//! 3. for each Cluster whose control plane is initialised (`status.initialization.
//!    controlPlaneInitialized`, or the v1beta1 `ControlPlaneInitialized` condition), applies into its
//!    workload API every resource the binding says needs it (`ApplyOnce`: not yet applied;
//!    `Reconcile`: not applied or changed since), every document tried and each failure recorded;
//! 4. records the outcome per resource in the Cluster's ClusterResourceSetBinding (hash, applied,
//!    lastAppliedTime; created owned by the Cluster) and the pass as the `ResourcesApplied`
//!    condition, with Events when it changes.
//!
//! Deleting a ClusterResourceSet removes its entries from the bindings (a binding left empty is
//! deleted); what was applied stays in the workload clusters, as upstream.
//!
//! The controller is re-triggered by changes to Clusters (selection, initialisation), to ConfigMaps
//! and Secrets it names, and retries every [`RETRY`] while anything failed (a kind the workload API
//! does not serve yet, an unreachable cluster).

use crate::apply::{Discovery, apply_all};
use crate::binding::{
    ResourceBinding, ResourceSetBinding, Strategy, entries, entry_of, merge_entry, needs_apply,
};
use crate::resources::{ResourceData, ResourceError, ResourceKind};
use capstan_model::capi::v1beta2::ClusterResourceSetBindingSpec;
use capstan_model::capi::v1beta2::{ClusterResourceSet, ClusterResourceSetBinding};
use capstan_model::meta::{LABEL_CLUSTER_NAME, LabelSelector, selector_matches};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::controller::ErrorChain;
use capstan_runtime::{Action, Cleanup, Context, EventType, Reconciler};
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const CONTROLLER: &str = "clusterresourceset";
/// Finalizer of ClusterResourceSets: their binding entries are removed before they go.
pub const FINALIZER: &str = "addons.cluster.x-k8s.io";
/// The condition that reports whether the resources are applied to every selected cluster.
pub const CONDITION_RESOURCES_APPLIED: &str = "ResourcesApplied";

/// Reconciles again after this long without a change, in case a watch event was lost.
const RESYNC: Duration = Duration::from_secs(600);
/// Retries this soon while something failed.
pub const RETRY: Duration = Duration::from_secs(30);
/// At most this many problems are spelled out in the condition message.
const MAX_PROBLEMS_SHOWN: usize = 5;

/// Why a pass failed (it is retried with backoff). Problems of the resources or the workload
/// clusters are not errors: they are reported in the condition.
#[derive(Debug, thiserror::Error)]
pub enum ClusterResourceSetError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("ClusterResourceSet {name} has no namespace")]
    NoNamespace { name: String },
}

fn api_error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> ClusterResourceSetError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| ClusterResourceSetError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// The v1beta2 Cluster, read untyped: only labels, deletion and initialisation matter here.
fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// Whether a selector selects anything at all (an empty one selects no Cluster).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// Whether `selector` selects a Cluster labelled `labels`.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    !selector_is_empty(selector) && selector_matches(selector, labels)
}

/// Whether a Cluster's control plane is initialised: the v1beta2 `status.initialization` field, or
/// the v1beta1 `ControlPlaneInitialized` condition (kept by conversion under `deprecated`, or
/// written by a v1beta1-era controller).
pub fn control_plane_initialized(status: &Value) -> bool {
    if status["initialization"]["controlPlaneInitialized"].as_bool() == Some(true) {
        return true;
    }
    let initialized = |conditions: &Value| {
        conditions.as_array().is_some_and(|list| {
            list.iter()
                .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == conditions::TRUE)
        })
    };
    initialized(&status["conditions"])
        || initialized(&status["deprecated"]["v1beta1"]["conditions"])
}

/// A problem found in a pass: a condition reason and a message that says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// Reasons of the `ResourcesApplied` condition, most important first: the first one present is the
/// condition's reason.
pub const REASONS_BY_RANK: &[&str] = &[
    "InvalidStrategy",
    "UnsupportedKind",
    "ResourceNotFound",
    "WrongSecretType",
    "InvalidResource",
    "RemoteClusterClientFailed",
    "NotApplied",
];

/// What one pass found.
#[derive(Debug, Default)]
pub struct Pass {
    pub problems: Vec<Problem>,
    /// One line per resource applied in this pass.
    pub applied: Vec<String>,
    /// Selected clusters whose control plane is not initialised yet.
    pub waiting: Vec<String>,
    /// How many clusters were selected.
    pub selected: usize,
}

impl Pass {
    fn problem(&mut self, reason: &'static str, message: String) {
        self.problems.push(Problem { reason, message });
    }

    /// The `ResourcesApplied` condition this pass amounts to.
    pub fn condition(&self, generation: Option<i64>) -> capstan_model::meta::Condition {
        if !self.problems.is_empty() {
            let reason = REASONS_BY_RANK
                .iter()
                .find(|r| self.problems.iter().any(|p| p.reason == **r))
                .copied()
                .unwrap_or("NotApplied");
            let mut message: Vec<String> = self
                .problems
                .iter()
                .take(MAX_PROBLEMS_SHOWN)
                .map(|p| p.message.clone())
                .collect();
            if self.problems.len() > MAX_PROBLEMS_SHOWN {
                message.push(format!(
                    "and {} more",
                    self.problems.len() - MAX_PROBLEMS_SHOWN
                ));
            }
            return conditions::condition(
                CONDITION_RESOURCES_APPLIED,
                FALSE,
                reason,
                message.join("; "),
                generation,
            );
        }
        if !self.waiting.is_empty() {
            return conditions::condition(
                CONDITION_RESOURCES_APPLIED,
                FALSE,
                "WaitingForControlPlaneInitialized",
                format!(
                    "the control plane of Cluster {} is not initialised yet; the resources are applied once it is",
                    self.waiting.join(", ")
                ),
                generation,
            );
        }
        if self.selected == 0 {
            return conditions::condition(
                CONDITION_RESOURCES_APPLIED,
                TRUE,
                "NoMatchingCluster",
                "no Cluster in this namespace matches spec.clusterSelector",
                generation,
            );
        }
        conditions::condition(CONDITION_RESOURCES_APPLIED, TRUE, "Applied", "", generation)
    }
}

/// The ClusterResourceSet controller.
#[derive(Clone)]
pub struct ClusterResourceSetController {
    workloads: SharedWorkloadAccess,
}

impl ClusterResourceSetController {
    /// A controller reaching workload clusters through `workloads`.
    pub fn new(workloads: SharedWorkloadAccess) -> Self {
        Self { workloads }
    }
}

/// Reads one resource of `spec.resources`; `Ok(None)` with a problem recorded when it cannot be used.
async fn fetch(
    client: &Client,
    namespace: &str,
    index: usize,
    kind: &str,
    name: &str,
    pass: &mut Pass,
) -> Result<Option<ResourceData>, ClusterResourceSetError> {
    let Some(parsed) = ResourceKind::parse(kind) else {
        pass.problem(
            "UnsupportedKind",
            format!(
                "spec.resources[{index}] ({name}) has kind `{kind}`; a ClusterResourceSet applies only ConfigMap or Secret"
            ),
        );
        return Ok(None);
    };
    let not_found = |pass: &mut Pass| {
        pass.problem(
            "ResourceNotFound",
            format!(
                "{parsed} {namespace}/{name} (spec.resources[{index}]) does not exist: create it, or remove it from spec.resources; it is applied as soon as it exists"
            ),
        );
    };
    match parsed {
        ResourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            match api.get_opt(name).await.map_err(api_error(
                "reading",
                "ConfigMap",
                namespace,
                name,
            ))? {
                Some(config_map) => Ok(Some(ResourceData::from_config_map(&config_map))),
                None => {
                    not_found(pass);
                    Ok(None)
                }
            }
        }
        ResourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            match api
                .get_opt(name)
                .await
                .map_err(api_error("reading", "Secret", namespace, name))?
            {
                Some(secret) => match ResourceData::from_secret(&secret) {
                    Ok(data) => Ok(Some(data)),
                    Err(err) => {
                        pass.problem("WrongSecretType", err.to_string());
                        Ok(None)
                    }
                },
                None => {
                    not_found(pass);
                    Ok(None)
                }
            }
        }
    }
}

/// What one resource's outcome on one cluster was, as the binding records it.
fn record(
    data: &ResourceData,
    hash: &str,
    applied: bool,
    previous: Option<&ResourceBinding>,
) -> ResourceBinding {
    ResourceBinding {
        name: data.name.clone(),
        kind: data.kind.as_str().to_owned(),
        hash: Some(hash.to_owned()),
        applied,
        last_applied_time: if applied {
            Some(conditions::now())
        } else {
            previous.and_then(|p| p.last_applied_time.clone())
        },
    }
}

impl ClusterResourceSetController {
    /// Applies what needs applying to one cluster and records it in the cluster's binding.
    #[allow(clippy::too_many_arguments)]
    async fn apply_to_cluster(
        &self,
        client: &Client,
        namespace: &str,
        set: &ClusterResourceSet,
        strategy: Strategy,
        cluster: &DynamicObject,
        resources: &[(String, String, Option<ResourceData>)],
        pass: &mut Pass,
    ) -> Result<(), ClusterResourceSetError> {
        let set_name = set.name_any();
        let cluster_name = cluster.name_any();
        let bindings: Api<ClusterResourceSetBinding> = Api::namespaced(client.clone(), namespace);
        let binding = bindings.get_opt(&cluster_name).await.map_err(api_error(
            "reading",
            "ClusterResourceSetBinding",
            namespace,
            &cluster_name,
        ))?;
        let raw = binding
            .as_ref()
            .map(|b| b.spec.bindings.clone())
            .unwrap_or_default();
        let recorded = entry_of(&entries(&raw), &set_name)
            .cloned()
            .unwrap_or_default();
        let find = |kind: &str, name: &str| {
            recorded
                .resources
                .iter()
                .find(|r| r.kind == kind && r.name == name)
                .cloned()
        };
        let mut entry = ResourceSetBinding {
            cluster_resource_set_name: set_name.clone(),
            resources: Vec::new(),
        };
        let key = ClusterKey::new(namespace, &cluster_name);
        let mut workload = None;
        let mut discovery = Discovery::default();
        for (kind, name, data) in resources {
            let previous = find(kind, name);
            let Some(data) = data else {
                // Not readable now: what was recorded stays (a ConfigMap briefly gone is not
                // re-applied under ApplyOnce when it comes back).
                entry.resources.extend(previous);
                continue;
            };
            let hash = data.hash();
            if !needs_apply(strategy, previous.as_ref(), &hash) {
                entry.resources.extend(previous);
                continue;
            }
            let documents = match data.documents() {
                Ok(documents) => documents,
                Err(err) => {
                    let reason = match err {
                        ResourceError::WrongSecretType { .. } => "WrongSecretType",
                        ResourceError::Unparsable { .. } => "InvalidResource",
                    };
                    pass.problem(reason, format!("{err}: fix its data"));
                    entry
                        .resources
                        .push(record(data, &hash, false, previous.as_ref()));
                    continue;
                }
            };
            if workload.is_none() {
                match self.workloads.client(&key).await {
                    Ok(client) => workload = Some(client),
                    Err(err) => {
                        pass.problem(
                            "RemoteClusterClientFailed",
                            format!(
                                "cannot reach the workload API of Cluster {cluster_name}: {}",
                                ErrorChain(&err)
                            ),
                        );
                        return Ok(());
                    }
                }
            }
            let Some(workload) = workload.as_ref() else {
                return Ok(());
            };
            let outcomes = apply_all(
                workload,
                &mut discovery,
                &documents,
                data.kind == ResourceKind::Secret,
            )
            .await;
            let failed: Vec<String> = outcomes
                .iter()
                .filter_map(|o| o.error.as_ref().map(|e| format!("{}: {e}", o.document)))
                .collect();
            if failed.is_empty() {
                pass.applied.push(format!(
                    "applied {} {} ({} documents) to Cluster {cluster_name}",
                    data.kind,
                    data.name,
                    documents.len()
                ));
                entry
                    .resources
                    .push(record(data, &hash, true, previous.as_ref()));
            } else {
                pass.problem(
                    "NotApplied",
                    format!(
                        "Cluster {cluster_name}: {} of {} documents of {} {} not applied: {}",
                        failed.len(),
                        documents.len(),
                        data.kind,
                        data.name,
                        failed.join("; ")
                    ),
                );
                entry
                    .resources
                    .push(record(data, &hash, false, previous.as_ref()));
            }
        }
        let merged = merge_entry(&raw, &set_name, Some(&entry));
        match binding {
            None if entry.resources.is_empty() => Ok(()),
            None => {
                let uid = cluster.metadata.uid.clone().unwrap_or_default();
                let mut created = ClusterResourceSetBinding::new(
                    cluster_name.clone(),
                    Some(namespace),
                    ClusterResourceSetBindingSpec {
                        cluster_name: Some(cluster_name.clone()),
                        bindings: merged,
                    },
                );
                created.metadata = ObjectMeta {
                    labels: Some(BTreeMap::from([(
                        LABEL_CLUSTER_NAME.to_owned(),
                        cluster_name.clone(),
                    )])),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "cluster.x-k8s.io/v1beta2".into(),
                        kind: "Cluster".into(),
                        name: cluster_name.clone(),
                        uid,
                        controller: None,
                        block_owner_deletion: None,
                    }]),
                    ..created.metadata
                };
                bindings
                    .create(&PostParams::default(), &created)
                    .await
                    .map_err(api_error(
                        "creating",
                        "ClusterResourceSetBinding",
                        namespace,
                        &cluster_name,
                    ))?;
                Ok(())
            }
            Some(binding) if merged != raw => {
                // Guarded by the resourceVersion: two sets writing their entries at once conflict,
                // and the loser's pass is retried.
                let patch = json!({
                    "metadata": {"resourceVersion": binding.metadata.resource_version},
                    "spec": {"bindings": merged},
                });
                bindings
                    .patch(
                        &cluster_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_error(
                        "updating",
                        "ClusterResourceSetBinding",
                        namespace,
                        &cluster_name,
                    ))?;
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }
}

impl Reconciler for ClusterResourceSetController {
    type Object = ClusterResourceSet;
    type Error = ClusterResourceSetError;

    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    fn configure(
        &self,
        controller: Controller<ClusterResourceSet>,
        client: &Client,
    ) -> Controller<ClusterResourceSet> {
        let by_cluster = controller.store();
        let by_config_map = controller.store();
        let by_secret = controller.store();
        controller
            .watches_with(
                Api::<DynamicObject>::all_with(client.clone(), &cluster_resource()),
                cluster_resource(),
                watcher::Config::default(),
                move |cluster: DynamicObject| {
                    let labels = cluster.labels().clone();
                    by_cluster
                        .state()
                        .into_iter()
                        .filter(|set| {
                            set.metadata.namespace == cluster.metadata.namespace
                                && selects(&set.spec.cluster_selector, &labels)
                        })
                        .map(|set| ObjectRef::from_obj(&*set))
                        .collect::<Vec<_>>()
                },
            )
            .watches(
                Api::<ConfigMap>::all(client.clone()),
                watcher::Config::default(),
                move |config_map: ConfigMap| {
                    naming(&by_config_map, "ConfigMap", &config_map.metadata)
                },
            )
            .watches(
                Api::<Secret>::all(client.clone()),
                watcher::Config::default(),
                move |secret: Secret| naming(&by_secret, "Secret", &secret.metadata),
            )
    }

    async fn reconcile(
        &self,
        set: Arc<ClusterResourceSet>,
        context: Arc<Context>,
    ) -> Result<Action, ClusterResourceSetError> {
        let name = set.name_any();
        let namespace = set
            .metadata
            .namespace
            .clone()
            .ok_or_else(|| ClusterResourceSetError::NoNamespace { name: name.clone() })?;
        let client = context.client();
        let mut pass = Pass::default();
        match Strategy::parse(set.spec.strategy.as_deref()) {
            None => pass.problem(
                "InvalidStrategy",
                format!(
                    "spec.strategy `{}` is not ApplyOnce or Reconcile: set one of them",
                    set.spec.strategy.as_deref().unwrap_or_default()
                ),
            ),
            Some(strategy) => {
                let mut resources = Vec::with_capacity(set.spec.resources.len());
                for (index, resource) in set.spec.resources.iter().enumerate() {
                    let data = fetch(
                        client,
                        &namespace,
                        index,
                        &resource.kind,
                        &resource.name,
                        &mut pass,
                    )
                    .await?;
                    resources.push((resource.kind.clone(), resource.name.clone(), data));
                }
                let clusters: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &cluster_resource());
                let selected: Vec<DynamicObject> = if selector_is_empty(&set.spec.cluster_selector)
                {
                    Vec::new()
                } else {
                    clusters
                        .list(&ListParams::default())
                        .await
                        .map_err(api_error("listing", "Cluster", &namespace, ""))?
                        .items
                        .into_iter()
                        .filter(|c| {
                            c.metadata.deletion_timestamp.is_none()
                                && selects(&set.spec.cluster_selector, c.labels())
                        })
                        .collect()
                };
                pass.selected = selected.len();
                for cluster in &selected {
                    if !control_plane_initialized(&cluster.data["status"]) {
                        pass.waiting.push(cluster.name_any());
                        continue;
                    }
                    self.apply_to_cluster(
                        client, &namespace, &set, strategy, cluster, &resources, &mut pass,
                    )
                    .await?;
                }
            }
        }
        self.report(&set, &namespace, &pass, &context).await?;
        Ok(if pass.problems.is_empty() {
            Action::requeue(RESYNC)
        } else {
            Action::requeue(RETRY)
        })
    }

    async fn cleanup(
        &self,
        set: Arc<ClusterResourceSet>,
        context: Arc<Context>,
    ) -> Result<Cleanup, ClusterResourceSetError> {
        let name = set.name_any();
        let namespace = set
            .metadata
            .namespace
            .clone()
            .ok_or_else(|| ClusterResourceSetError::NoNamespace { name: name.clone() })?;
        let bindings: Api<ClusterResourceSetBinding> =
            Api::namespaced(context.client().clone(), &namespace);
        let listed = bindings
            .list(&ListParams::default())
            .await
            .map_err(api_error(
                "listing",
                "ClusterResourceSetBinding",
                &namespace,
                "",
            ))?;
        for binding in listed.items {
            let binding_name = binding.name_any();
            let raw = &binding.spec.bindings;
            if entry_of(&entries(raw), &name).is_none() {
                continue;
            }
            let merged = merge_entry(raw, &name, None);
            if merged.is_empty() {
                let params = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: None,
                        resource_version: binding.metadata.resource_version.clone(),
                    }),
                    ..DeleteParams::default()
                };
                match bindings.delete(&binding_name, &params).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.is_not_found() => {}
                    Err(err) => {
                        return Err(api_error(
                            "deleting",
                            "ClusterResourceSetBinding",
                            &namespace,
                            &binding_name,
                        )(err));
                    }
                }
            } else {
                let patch = json!({
                    "metadata": {"resourceVersion": binding.metadata.resource_version},
                    "spec": {"bindings": merged},
                });
                bindings
                    .patch(
                        &binding_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_error(
                        "updating",
                        "ClusterResourceSetBinding",
                        &namespace,
                        &binding_name,
                    ))?;
            }
        }
        Ok(Cleanup::Done)
    }
}

/// The sets of the object's namespace that name it as a resource of `kind`.
fn naming(
    store: &kube::runtime::reflector::Store<ClusterResourceSet>,
    kind: &str,
    meta: &ObjectMeta,
) -> Vec<ObjectRef<ClusterResourceSet>> {
    store
        .state()
        .into_iter()
        .filter(|set| {
            set.metadata.namespace == meta.namespace
                && set
                    .spec
                    .resources
                    .iter()
                    .any(|r| r.kind == kind && Some(&r.name) == meta.name.as_ref())
        })
        .map(|set| ObjectRef::from_obj(&*set))
        .collect()
}

impl ClusterResourceSetController {
    /// Writes the `ResourcesApplied` condition when it changed, with an Event for the change, and an
    /// Event per resource applied.
    async fn report(
        &self,
        set: &ClusterResourceSet,
        namespace: &str,
        pass: &Pass,
        context: &Context,
    ) -> Result<(), ClusterResourceSetError> {
        let name = set.name_any();
        let condition = pass.condition(set.metadata.generation);
        let mut current = set.status.clone().unwrap_or_default().conditions;
        let changed =
            conditions::set_condition(&mut current, condition.clone(), &conditions::now());
        if changed {
            let sets: Api<ClusterResourceSet> =
                Api::namespaced(context.client().clone(), namespace);
            let patch = json!({"status": {"conditions": current}});
            sets.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "updating status of",
                    "ClusterResourceSet",
                    namespace,
                    &name,
                ))?;
            if condition.status == FALSE
                && condition.reason.as_deref() != Some("WaitingForControlPlaneInitialized")
            {
                context
                    .publish(
                        set,
                        EventType::Warning,
                        condition.reason.as_deref().unwrap_or("NotApplied"),
                        "Apply",
                        condition.message.clone().unwrap_or_default(),
                    )
                    .await;
            }
        }
        for applied in &pass.applied {
            context
                .publish(
                    set,
                    EventType::Normal,
                    "ResourcesApplied",
                    "Apply",
                    applied.clone(),
                )
                .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::meta::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selection_follows_upstream() {
        let empty = LabelSelector::default();
        assert!(!selects(&empty, &labels(&[("cni", "cilium")])));
        let cilium = LabelSelector {
            match_labels: Some(labels(&[("cni", "cilium")])),
            match_expressions: None,
        };
        assert!(selects(&cilium, &labels(&[("cni", "cilium"), ("x", "y")])));
        assert!(!selects(&cilium, &labels(&[("cni", "calico")])));
        let expression = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "In".into(),
                values: Some(vec!["prod".into()]),
            }]),
        };
        assert!(selects(&expression, &labels(&[("env", "prod")])));
        assert!(!selects(&expression, &labels(&[])));
    }

    #[test]
    fn initialised_by_v1beta2_field_or_v1beta1_condition() {
        assert!(!control_plane_initialized(&json!({})));
        assert!(control_plane_initialized(
            &json!({"initialization": {"controlPlaneInitialized": true}})
        ));
        assert!(!control_plane_initialized(
            &json!({"initialization": {"controlPlaneInitialized": false}})
        ));
        assert!(control_plane_initialized(
            &json!({"deprecated": {"v1beta1": {"conditions": [
                {"type": "ControlPlaneInitialized", "status": "True"}
            ]}}})
        ));
        assert!(!control_plane_initialized(&json!({"conditions": [
            {"type": "ControlPlaneInitialized", "status": "False"}
        ]})));
    }

    #[test]
    fn condition_reports_the_most_important_problem_first() {
        let mut pass = Pass {
            selected: 1,
            ..Pass::default()
        };
        assert_eq!(pass.condition(None).reason.as_deref(), Some("Applied"));
        pass.waiting.push("capi-1".into());
        assert_eq!(
            pass.condition(None).reason.as_deref(),
            Some("WaitingForControlPlaneInitialized")
        );
        pass.problem("NotApplied", "a".into());
        pass.problem("ResourceNotFound", "b".into());
        let condition = pass.condition(Some(3));
        assert_eq!(condition.status, FALSE);
        assert_eq!(condition.reason.as_deref(), Some("ResourceNotFound"));
        assert_eq!(condition.message.as_deref(), Some("a; b"));
        for i in 0..6 {
            pass.problem("NotApplied", format!("x{i}"));
        }
        assert!(
            pass.condition(None)
                .message
                .unwrap_or_default()
                .ends_with("and 3 more")
        );
        assert_eq!(
            Pass::default().condition(None).reason.as_deref(),
            Some("NoMatchingCluster")
        );
    }
}
