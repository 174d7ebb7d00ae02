//! The MachineDeployment controller: one MachineSet per Machine template, found by the template's
//! hash (label `machine-template-hash`), rolled out by `spec.rollout.strategy`.
//!
//! - RollingUpdate (default `maxSurge: 1`, `maxUnavailable: 0`): the new set grows while the total
//!   stays within `replicas + maxSurge`; old sets shrink while at least `replicas - maxUnavailable`
//!   Machines stay available.
//! - OnDelete: old sets keep the Machines they have but never replace one; the new set makes up the
//!   difference as old Machines are deleted by hand.
//!
//! Revisions count up in the `machinedeployment.clusters.x-k8s.io/revision` annotation (a set that
//! comes back, on a roll-back, gets the next revision). `spec.paused` stops scaling and rollouts;
//! `spec.rollout.after` forces one new set once that time has passed (it enters the hash then).
//! Old sets scaled to zero are deleted.
//!
//! The hash covers the typed template (what capstan models of it): a change to a field the model
//! does not know does not roll out. The new set's template is the deployment's raw template, so no
//! field is lost.

use crate::contract;
use crate::machineset::selector_string;
use crate::{ANNOTATION_REVISION, LABEL_TEMPLATE_HASH};
use capstan_model::capi::v1beta2::{MachineDeployment, MachineSet, ReplicaStatus};
use capstan_model::meta::{LABEL_CLUSTER_NAME, LABEL_DEPLOYMENT_NAME, selector_matches};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::patch::{self, PatchError};
use capstan_runtime::{Action, Context, Reconciler};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const MACHINE_DEPLOYMENT_CONTROLLER: &str = "machinedeployment";
/// How often a deployment that is rolling out or waiting for `rollout.after` is looked at again.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(15);

/// Condition types of a MachineDeployment (v1beta2).
pub const AVAILABLE: &str = "Available";
pub const ROLLING_OUT: &str = "RollingOut";

/// Why a MachineDeployment pass failed.
#[derive(Debug, thiserror::Error)]
pub enum MachineDeploymentError {
    #[error("writing")]
    Patch(#[from] PatchError),
    #[error("{action} {kind} {namespace}/{name}")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("MachineDeployment has no namespace")]
    NoNamespace,
}

fn api_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> MachineDeploymentError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| MachineDeploymentError::Api {
        action,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// The rollout strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    RollingUpdate {
        max_surge: i32,
        max_unavailable: i32,
    },
    OnDelete,
}

/// An `int-or-percent` of `total`; percentages round up for surge and down for unavailability.
fn int_or_percent(value: Option<&Value>, total: i32, default: i32, round_up: bool) -> i32 {
    match value {
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(default)
            .max(0),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(percent) => {
                let scaled = i64::from(total) * percent;
                let value = if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                };
                i32::try_from(value).unwrap_or(default).max(0)
            }
            None => s.parse().unwrap_or(default).max(0),
        },
        _ => default,
    }
}

/// The strategy of `deployment` with its limits resolved against `replicas`.
pub fn strategy(deployment: &MachineDeployment, replicas: i32) -> Strategy {
    let strategy = deployment
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.strategy.as_ref());
    if strategy.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("OnDelete") {
        return Strategy::OnDelete;
    }
    let rolling = strategy.and_then(|s| s.get("rollingUpdate"));
    let max_surge = int_or_percent(rolling.and_then(|r| r.get("maxSurge")), replicas, 1, true);
    let mut max_unavailable = int_or_percent(
        rolling.and_then(|r| r.get("maxUnavailable")),
        replicas,
        0,
        false,
    );
    if max_surge == 0 && max_unavailable == 0 {
        // Nothing could ever move otherwise.
        max_unavailable = 1;
    }
    Strategy::RollingUpdate {
        max_surge,
        max_unavailable,
    }
}

/// The template hash: of the typed template, and of `rollout.after` once it has passed.
pub fn template_hash(deployment: &MachineDeployment, now: jiff::Timestamp) -> String {
    let mut template = deployment.spec.template.clone();
    template.metadata.labels.remove(LABEL_TEMPLATE_HASH);
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(&template).unwrap_or_default());
    if let Some(after) = deployment
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.after.as_deref())
        && after.parse::<jiff::Timestamp>().is_ok_and(|t| t <= now)
    {
        hasher.update(after.as_bytes());
    }
    let digest = hasher.finalize();
    digest.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

/// What the rollout knows of one MachineSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetState {
    pub name: String,
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.replicas`.
    pub actual: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Revision, for the order old sets shrink in (oldest first).
    pub revision: i64,
}

/// New `spec.replicas` for the new set and each old set (pure: the table-tested rollout step).
pub fn plan(
    replicas: i32,
    strategy: Strategy,
    new: &SetState,
    old: &[SetState],
) -> (i32, Vec<(String, i32)>) {
    match strategy {
        Strategy::OnDelete => {
            // Old sets keep what they have; the new set fills the rest.
            let old_actual: i32 = old.iter().map(|s| s.actual.min(s.desired)).sum();
            let old_plan = old
                .iter()
                .map(|s| (s.name.clone(), s.actual.min(s.desired)))
                .collect();
            ((replicas - old_actual).max(0), old_plan)
        }
        Strategy::RollingUpdate {
            max_surge,
            max_unavailable,
        } => {
            if old.iter().all(|s| s.desired == 0 && s.actual == 0) {
                return (replicas, old.iter().map(|s| (s.name.clone(), 0)).collect());
            }
            // The new set grows while the total stays within replicas + maxSurge.
            let total_desired: i32 = new.desired + old.iter().map(|s| s.desired).sum::<i32>();
            let max_total = replicas + max_surge;
            let new_desired = if new.desired >= replicas {
                replicas
            } else if total_desired >= max_total {
                new.desired
            } else {
                new.desired + (max_total - total_desired).min(replicas - new.desired)
            };
            // Old sets shrink while at least replicas - maxUnavailable Machines stay available:
            // their unavailable Machines first, then available ones, oldest set first.
            let mut ordered: Vec<SetState> = old.to_vec();
            ordered.sort_by_key(|s| s.revision);
            let min_available = replicas - max_unavailable;
            let all_actual: i32 = new.actual + old.iter().map(|s| s.actual).sum::<i32>();
            let new_unavailable = (new.desired - new.available).max(0);
            let mut budget = all_actual - min_available - new_unavailable;
            if budget > 0 {
                for set in &mut ordered {
                    let cut = (set.desired - set.available).max(0).min(budget);
                    set.desired -= cut;
                    budget -= cut;
                }
                let available: i32 = new.available + old.iter().map(|s| s.available).sum::<i32>();
                let mut removable = (available - min_available).max(0);
                for set in &mut ordered {
                    let cut = set.desired.min(removable);
                    set.desired -= cut;
                    removable -= cut;
                }
            }
            (
                new_desired,
                ordered.into_iter().map(|s| (s.name, s.desired)).collect(),
            )
        }
    }
}

fn revision_of(set: &MachineSet) -> i64 {
    set.annotations()
        .get(ANNOTATION_REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn state_of(set: &MachineSet) -> SetState {
    let status = set.status.clone().unwrap_or_default();
    SetState {
        name: set.name_any(),
        desired: set.spec.replicas.unwrap_or(0),
        actual: status.replicas.unwrap_or(0),
        available: status.available_replicas.unwrap_or(0),
        revision: revision_of(set),
    }
}

/// The deployment's status from its sets (pure).
pub fn compute_status(
    deployment: &MachineDeployment,
    new: Option<&MachineSet>,
    sets: &[MachineSet],
    replicas: i32,
    strategy: Strategy,
    now: &str,
) -> ReplicaStatus {
    let mut status = deployment.status.clone().unwrap_or_default();
    let sum = |f: fn(&ReplicaStatus) -> Option<i32>| {
        sets.iter()
            .map(|s| s.status.as_ref().and_then(f).unwrap_or(0))
            .sum::<i32>()
    };
    let actual = sum(|s| s.replicas);
    let available = sum(|s| s.available_replicas);
    status.replicas = Some(actual);
    status.ready_replicas = Some(sum(|s| s.ready_replicas));
    status.available_replicas = Some(available);
    let up_to_date = new
        .and_then(|s| s.status.as_ref())
        .and_then(|s| s.replicas)
        .unwrap_or(0);
    status.up_to_date_replicas = Some(up_to_date);
    crate::machineset::set_v1beta1_counters(
        &mut status,
        &[
            ("readyReplicas", sum(|s| s.ready_replicas)),
            ("availableReplicas", available),
            ("updatedReplicas", up_to_date),
            ("unavailableReplicas", (replicas - available).max(0)),
        ],
    );
    status.selector = Some(selector_string(&deployment.spec.selector));
    status.observed_generation = deployment.metadata.generation;
    status.phase = Some(
        if actual < replicas {
            "ScalingUp"
        } else if actual > replicas {
            "ScalingDown"
        } else {
            "Running"
        }
        .to_owned(),
    );
    let max_unavailable = match strategy {
        Strategy::RollingUpdate {
            max_unavailable, ..
        } => max_unavailable,
        Strategy::OnDelete => 0,
    };
    let is_available = available >= replicas - max_unavailable;
    let generation = deployment.metadata.generation;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            AVAILABLE,
            if is_available { TRUE } else { FALSE },
            if is_available {
                "Available"
            } else {
                "NotAvailable"
            },
            if is_available {
                String::new()
            } else {
                format!("{available} of {replicas} Machines available")
            },
            generation,
        ),
        now,
    );
    let rolling = up_to_date < replicas || actual != up_to_date;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            ROLLING_OUT,
            if rolling { TRUE } else { FALSE },
            if rolling {
                "RollingOut"
            } else {
                "NotRollingOut"
            },
            if rolling {
                format!("{up_to_date} of {replicas} Machines up to date")
            } else {
                String::new()
            },
            generation,
        ),
        now,
    );
    status
}

/// The MachineDeployment controller.
#[derive(Clone, Debug, Default)]
pub struct MachineDeploymentController;

impl MachineDeploymentController {
    /// Creates the set for the current template, with `replicas` and `revision`.
    async fn create_set(
        &self,
        deployment: &MachineDeployment,
        hash: &str,
        replicas: i32,
        revision: i64,
        namespace: &str,
        client: &Client,
    ) -> Result<MachineSet, MachineDeploymentError> {
        let name = format!("{}-{hash}", deployment.name_any());
        let deployments: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::erase::<MachineDeployment>(&()),
        );
        let raw = deployments
            .get(&deployment.name_any())
            .await
            .map_err(api_error(
                "reading",
                "MachineDeployment",
                namespace,
                &deployment.name_any(),
            ))?;
        let mut template = raw
            .data
            .get("spec")
            .and_then(|s| s.get("template"))
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        template["metadata"]["labels"][LABEL_TEMPLATE_HASH] = json!(hash);
        template["metadata"]["labels"][LABEL_DEPLOYMENT_NAME] = json!(deployment.name_any());
        template["metadata"]["labels"][LABEL_CLUSTER_NAME] = json!(deployment.spec.cluster_name);
        let mut selector =
            serde_json::to_value(&deployment.spec.selector).unwrap_or_else(|_| json!({}));
        selector["matchLabels"][LABEL_TEMPLATE_HASH] = json!(hash);
        let mut spec = json!({
            "clusterName": deployment.spec.cluster_name,
            "replicas": replicas,
            "selector": selector,
            "template": template,
        });
        if let Some(deletion) = &deployment.spec.deletion {
            spec["deletion"] = json!(deletion);
        }
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineSet",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    LABEL_CLUSTER_NAME: deployment.spec.cluster_name,
                    LABEL_DEPLOYMENT_NAME: deployment.name_any(),
                    LABEL_TEMPLATE_HASH: hash,
                },
                "annotations": {ANNOTATION_REVISION: revision.to_string()},
                "ownerReferences": [contract::owner_reference(deployment, true)],
            },
            "spec": spec,
        }))
        .map_err(|e| {
            api_error("building", "MachineSet", namespace, &name)(kube::Error::SerdeError(e))
        })?;
        let sets: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::erase::<MachineSet>(&()),
        );
        match sets.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // Made by an earlier pass whose read of the sets was stale: the same set, by name.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => {
                return Err(api_error("creating", "MachineSet", namespace, &name)(
                    source,
                ));
            }
        }
        Api::<MachineSet>::namespaced(client.clone(), namespace)
            .get(&name)
            .await
            .map_err(api_error("reading", "MachineSet", namespace, &name))
    }
}

impl Reconciler for MachineDeploymentController {
    type Object = MachineDeployment;
    type Error = MachineDeploymentError;

    fn name(&self) -> &'static str {
        MACHINE_DEPLOYMENT_CONTROLLER
    }

    fn cluster_name(&self, object: &MachineDeployment) -> Option<String> {
        Some(object.spec.cluster_name.clone()).filter(|c| !c.is_empty())
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn configure(
        &self,
        controller: Controller<MachineDeployment>,
        client: &Client,
    ) -> Controller<MachineDeployment> {
        controller.owns(
            Api::<MachineSet>::all(client.clone()),
            watcher::Config::default(),
        )
    }

    async fn reconcile(
        &self,
        deployment: Arc<MachineDeployment>,
        context: Arc<Context>,
    ) -> Result<Action, MachineDeploymentError> {
        let namespace = deployment
            .namespace()
            .ok_or(MachineDeploymentError::NoNamespace)?;
        let name = deployment.name_any();
        let client = context.client().clone();
        if deployment.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), &namespace);
        if deployment.labels().get(LABEL_CLUSTER_NAME) != Some(&deployment.spec.cluster_name)
            && !deployment.spec.cluster_name.is_empty()
        {
            let patch =
                json!({"metadata": {"labels": {LABEL_CLUSTER_NAME: deployment.spec.cluster_name}}});
            deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "labelling",
                    "MachineDeployment",
                    &namespace,
                    &name,
                ))?;
            return Ok(Action::await_change());
        }
        let uid = deployment.metadata.uid.clone().unwrap_or_default();
        let sets_api: Api<MachineSet> = Api::namespaced(client.clone(), &namespace);
        let mut sets: Vec<MachineSet> = Vec::new();
        for set in sets_api
            .list(&ListParams::default().labels(&format!(
                "{LABEL_CLUSTER_NAME}={}",
                deployment.spec.cluster_name
            )))
            .await
            .map_err(api_error("listing", "MachineSet", &namespace, ""))?
            .items
        {
            let controlled = set
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid);
            let orphan = !set
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true));
            if controlled {
                sets.push(set);
            } else if orphan
                && set.metadata.deletion_timestamp.is_none()
                && selector_matches(&deployment.spec.selector, &set.labels().clone())
            {
                let mut refs = set.owner_references().to_vec();
                refs.push(contract::owner_reference(&*deployment, true));
                let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": set.metadata.resource_version}});
                sets_api
                    .patch(
                        &set.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_error(
                        "adopting",
                        "MachineSet",
                        &namespace,
                        &set.name_any(),
                    ))?;
                sets.push(set);
            }
        }
        let replicas = deployment.spec.replicas.unwrap_or(1).max(0);
        let strategy = strategy(&deployment, replicas);
        let hash = template_hash(&deployment, jiff::Timestamp::now());
        let paused = deployment.spec.paused == Some(true);
        let max_revision = sets.iter().map(revision_of).max().unwrap_or(0);
        let mut new = sets
            .iter()
            .find(|s| s.labels().get(LABEL_TEMPLATE_HASH) == Some(&hash))
            .cloned();
        if !paused {
            if new.is_none() {
                let initial = if sets.is_empty() { replicas } else { 0 };
                let created = self
                    .create_set(
                        &deployment,
                        &hash,
                        initial,
                        max_revision + 1,
                        &namespace,
                        &client,
                    )
                    .await?;
                sets.push(created.clone());
                new = Some(created);
            } else if let Some(set) = &new
                && revision_of(set) < max_revision
            {
                // A template that comes back (a roll-back) is the newest revision again.
                let patch = json!({"metadata": {"annotations": {ANNOTATION_REVISION: (max_revision + 1).to_string()}}});
                sets_api
                    .patch(
                        &set.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_error(
                        "annotating",
                        "MachineSet",
                        &namespace,
                        &set.name_any(),
                    ))?;
            }
            if let Some(new_set) = &new {
                let new_state = state_of(new_set);
                let old: Vec<SetState> = sets
                    .iter()
                    .filter(|s| s.name_any() != new_set.name_any())
                    .map(state_of)
                    .collect();
                let (new_replicas, old_plan) = plan(replicas, strategy, &new_state, &old);
                let mut changes: Vec<(String, i32)> = old_plan
                    .into_iter()
                    .filter(|(n, r)| old.iter().any(|s| &s.name == n && s.desired != *r))
                    .collect();
                if new_state.desired != new_replicas {
                    changes.push((new_state.name.clone(), new_replicas));
                }
                for (set_name, set_replicas) in changes {
                    let patch = json!({"spec": {"replicas": set_replicas}});
                    sets_api
                        .patch(&set_name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(api_error("scaling", "MachineSet", &namespace, &set_name))?;
                }
                // Old sets that have shrunk to nothing are history.
                for set in sets.iter().filter(|s| s.name_any() != new_state.name) {
                    let state = state_of(set);
                    if state.desired == 0
                        && state.actual == 0
                        && set.metadata.deletion_timestamp.is_none()
                    {
                        match sets_api
                            .delete(&state.name, &DeleteParams::background())
                            .await
                        {
                            Ok(_) => {}
                            Err(kube::Error::Api(e)) if e.code == 404 => {}
                            Err(source) => {
                                return Err(api_error(
                                    "deleting",
                                    "MachineSet",
                                    &namespace,
                                    &state.name,
                                )(source));
                            }
                        }
                    }
                }
            }
        }
        let status = compute_status(
            &deployment,
            new.as_ref(),
            &sets,
            replicas,
            strategy,
            &conditions::now(),
        );
        let before = deployment.status.clone().unwrap_or_default();
        patch::patch_status(&deployments, &*deployment, &before, &status).await?;
        let revision = new
            .as_ref()
            .map(revision_of)
            .unwrap_or(max_revision)
            .max(max_revision);
        if deployment.annotations().get(ANNOTATION_REVISION) != Some(&revision.to_string())
            && revision > 0
        {
            let patch =
                json!({"metadata": {"annotations": {ANNOTATION_REVISION: revision.to_string()}}});
            deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api_error(
                    "annotating",
                    "MachineDeployment",
                    &namespace,
                    &name,
                ))?;
        }
        let after_pending = deployment
            .spec
            .rollout
            .as_ref()
            .and_then(|r| r.after.as_deref())
            .and_then(|a| a.parse::<jiff::Timestamp>().ok())
            .is_some_and(|t| t > jiff::Timestamp::now());
        let settled = status.replicas == Some(replicas)
            && status.up_to_date_replicas == Some(replicas)
            && status.available_replicas == Some(replicas);
        Ok(if settled && !after_pending {
            Action::await_change()
        } else {
            Action::requeue(WAIT_REQUEUE)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::capi::v1beta2::{MachineDeploymentRollout, MachineDeploymentSpec};

    fn set(name: &str, desired: i32, actual: i32, available: i32, revision: i64) -> SetState {
        SetState {
            name: name.into(),
            desired,
            actual,
            available,
            revision,
        }
    }

    #[test]
    fn rolling_update_table() {
        let rolling = |s, u| Strategy::RollingUpdate {
            max_surge: s,
            max_unavailable: u,
        };
        struct Case {
            name: &'static str,
            replicas: i32,
            strategy: Strategy,
            new: SetState,
            old: Vec<SetState>,
            want_new: i32,
            want_old: Vec<i32>,
        }
        let cases = [
            Case {
                name: "fresh scale up",
                replicas: 3,
                strategy: rolling(1, 0),
                new: set("n", 1, 1, 1, 1),
                old: vec![],
                want_new: 3,
                want_old: vec![],
            },
            Case {
                name: "scale down",
                replicas: 1,
                strategy: rolling(1, 0),
                new: set("n", 3, 3, 3, 1),
                old: vec![],
                want_new: 1,
                want_old: vec![],
            },
            Case {
                name: "surge one, keep all old",
                replicas: 3,
                strategy: rolling(1, 0),
                new: set("n", 0, 0, 0, 2),
                old: vec![set("o", 3, 3, 3, 1)],
                want_new: 1,
                want_old: vec![3],
            },
            Case {
                name: "new one available, drop one old",
                replicas: 3,
                strategy: rolling(1, 0),
                new: set("n", 1, 1, 1, 2),
                old: vec![set("o", 3, 3, 3, 1)],
                want_new: 1,
                want_old: vec![2],
            },
            Case {
                name: "then surge again",
                replicas: 3,
                strategy: rolling(1, 0),
                new: set("n", 1, 1, 1, 2),
                old: vec![set("o", 2, 2, 2, 1)],
                want_new: 2,
                want_old: vec![2],
            },
            Case {
                name: "new not available yet: no old removed",
                replicas: 3,
                strategy: rolling(1, 0),
                new: set("n", 1, 1, 0, 2),
                old: vec![set("o", 3, 3, 3, 1)],
                want_new: 1,
                want_old: vec![3],
            },
            Case {
                name: "maxSurge 0 on bare metal: remove first",
                replicas: 2,
                strategy: rolling(0, 1),
                new: set("n", 0, 0, 0, 2),
                old: vec![set("o", 2, 2, 2, 1)],
                want_new: 0,
                want_old: vec![1],
            },
            Case {
                name: "maxSurge 0, then replace",
                replicas: 2,
                strategy: rolling(0, 1),
                new: set("n", 0, 0, 0, 2),
                old: vec![set("o", 1, 1, 1, 1)],
                want_new: 1,
                want_old: vec![1],
            },
            Case {
                name: "old sets shrink oldest first",
                replicas: 2,
                strategy: rolling(0, 2),
                new: set("n", 0, 0, 0, 3),
                old: vec![set("b", 1, 1, 1, 2), set("a", 1, 1, 1, 1)],
                want_new: 0,
                want_old: vec![0, 0],
            },
            Case {
                name: "on delete keeps old",
                replicas: 3,
                strategy: Strategy::OnDelete,
                new: set("n", 0, 0, 0, 2),
                old: vec![set("o", 3, 2, 2, 1)],
                want_new: 1,
                want_old: vec![2],
            },
        ];
        for case in cases {
            let (new, old) = plan(case.replicas, case.strategy, &case.new, &case.old);
            assert_eq!(new, case.want_new, "{}: new", case.name);
            let mut old_by_name: Vec<(String, i32)> = old;
            old_by_name.sort();
            let mut want: Vec<(String, i32)> = case
                .old
                .iter()
                .map(|s| s.name.clone())
                .zip(case.want_old)
                .collect();
            want.sort();
            assert_eq!(old_by_name, want, "{}: old", case.name);
        }
    }

    #[test]
    fn strategy_parsing() {
        let mut md = MachineDeployment::new("d", Some("ns"), MachineDeploymentSpec::default());
        assert_eq!(
            strategy(&md, 3),
            Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 0
            }
        );
        md.spec.rollout = Some(MachineDeploymentRollout {
            after: None,
            strategy: Some(
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": "50%"}}),
            ),
        });
        assert_eq!(
            strategy(&md, 3),
            Strategy::RollingUpdate {
                max_surge: 2,
                max_unavailable: 1
            }
        );
        md.spec.rollout = Some(MachineDeploymentRollout {
            after: None,
            strategy: Some(json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}})),
        });
        assert_eq!(
            strategy(&md, 3),
            Strategy::RollingUpdate {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        md.spec.rollout = Some(MachineDeploymentRollout {
            after: None,
            strategy: Some(json!({"type": "OnDelete"})),
        });
        assert_eq!(strategy(&md, 3), Strategy::OnDelete);
    }

    #[test]
    fn hash_follows_template_and_rollout_after() {
        let mut md = MachineDeployment::new("d", Some("ns"), MachineDeploymentSpec::default());
        let now: jiff::Timestamp = "2026-06-01T00:00:00Z"
            .parse()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let base = template_hash(&md, now);
        assert_eq!(base.len(), 10);
        md.spec.template.spec.version = Some("v1.33.1".into());
        let bumped = template_hash(&md, now);
        assert_ne!(base, bumped);
        md.spec.rollout = Some(MachineDeploymentRollout {
            after: Some("2026-07-01T00:00:00Z".into()),
            strategy: None,
        });
        assert_eq!(
            template_hash(&md, now),
            bumped,
            "a future rolloutAfter changes nothing yet"
        );
        let later: jiff::Timestamp = "2026-07-02T00:00:00Z"
            .parse()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        assert_ne!(
            template_hash(&md, later),
            bumped,
            "a passed rolloutAfter rolls out once"
        );
    }
}
