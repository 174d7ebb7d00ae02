//! The MachineSet controller: keeps `spec.replicas` Machines that match its selector.
//!
//! Machines that match the selector and have no controller are adopted. A missing Machine is made
//! from the template: the bootstrap config template and the infrastructure machine template are
//! cloned by the `spec.template.spec` contract (KubeadmConfigTemplate → KubeadmConfig,
//! Metal3MachineTemplate → Metal3Machine, or any provider's pair), all three objects sharing one
//! name. Extra Machines are deleted in `spec.deletion.order` (Random, Newest, Oldest), after those
//! marked `cluster.x-k8s.io/delete-machine` and those that are not healthy.
//!
//! Machines are listed live (not from a cache) before scaling: a stale read would create or delete
//! twice.
//!
//! Nothing is created until every template the set's Machines are cloned from resolves: a missing
//! template (or a kind the API does not serve) is named in `ScalingUp` (reason
//! `ScalingUpBlocked`) and the set waits. A Machine whose creation the API refuses (a quota, an
//! invalid template) takes back the clones made for it, so retries leave nothing behind, and the
//! refusal is named in the same condition.

use crate::contract::{self, ContractError};
use crate::machine::READY;
use crate::{ANNOTATION_DELETE_MACHINE, LABEL_SET_NAME};
use capstan_model::capi::v1beta2::{Machine, MachineSet, ReplicaStatus};
use capstan_model::meta::{
    ContractVersionedObjectReference, LABEL_CLUSTER_NAME, LabelSelector, selector_matches,
};
use capstan_runtime::conditions::{self, FALSE, TRUE};
use capstan_runtime::patch::{self, PatchError};
use capstan_runtime::watches::WatchError;
use capstan_runtime::{Action, Context, Reconciler};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rand::Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The controller's name.
pub const MACHINE_SET_CONTROLLER: &str = "machineset";
/// At most this many Machines are created or deleted per pass (the next pass continues).
pub const SCALE_BURST: usize = 10;
/// How often a set whose Machines are not all ready is looked at again.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(15);

/// Condition types of a MachineSet (v1beta2).
pub const SCALING_UP: &str = "ScalingUp";
/// `ScalingUp`'s reason while Machines are missing and none can be made.
pub const REASON_SCALING_UP_BLOCKED: &str = "ScalingUpBlocked";
pub const SCALING_DOWN: &str = "ScalingDown";
pub const MACHINES_READY: &str = "MachinesReady";

/// Why a MachineSet pass failed.
#[derive(Debug, thiserror::Error)]
pub enum MachineSetError {
    #[error("provider template")]
    Contract(#[from] ContractError),
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
    #[error("MachineSet has no namespace")]
    NoNamespace,
}

fn api_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> MachineSetError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| MachineSetError::Api {
        action,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// Which Machines go first when scaling down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionOrder {
    Random,
    Newest,
    Oldest,
}

impl DeletionOrder {
    /// The order `spec.deletion.order` names (Random when unset or unknown).
    pub fn parse(order: Option<&str>) -> Self {
        match order {
            Some("Newest") => Self::Newest,
            Some("Oldest") => Self::Oldest,
            _ => Self::Random,
        }
    }
}

/// How urgently a Machine should go when its set shrinks: marked ones first, then those that are
/// not healthy, then the rest.
fn deletion_priority(machine: &Machine) -> u8 {
    if machine
        .annotations()
        .contains_key(ANNOTATION_DELETE_MACHINE)
        || machine.metadata.deletion_timestamp.is_some()
    {
        0
    } else if !conditions::is_true(
        &machine.status.clone().unwrap_or_default().conditions,
        READY,
    ) {
        1
    } else {
        2
    }
}

/// The names of `count` Machines to delete from `machines`, in `order` (pure, table-tested;
/// `random` gives each Machine its tie-breaker for [`DeletionOrder::Random`]).
pub fn pick_for_deletion(
    machines: &[Machine],
    count: usize,
    order: DeletionOrder,
    random: &mut impl FnMut() -> u64,
) -> Vec<String> {
    let mut ranked: Vec<(u8, i64, u64, String)> = machines
        .iter()
        .map(|m| {
            let created = m
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second());
            let age_key = match order {
                DeletionOrder::Newest => -created,
                DeletionOrder::Oldest => created,
                DeletionOrder::Random => 0,
            };
            (deletion_priority(m), age_key, random(), m.name_any())
        })
        .collect();
    ranked.sort();
    ranked
        .into_iter()
        .take(count)
        .map(|(_, _, _, name)| name)
        .collect()
}

/// A label selector in the string form the API and the `scale` subresource use.
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.clone().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            _ => format!("!{}", req.key),
        });
    }
    parts.join(",")
}

/// The status of a set with `machines` (pure); `blocked` says why missing Machines cannot be made.
pub fn compute_status(
    set: &MachineSet,
    machines: &[Machine],
    desired: i32,
    blocked: Option<&str>,
    now: &str,
) -> ReplicaStatus {
    let mut status = set.status.clone().unwrap_or_default();
    let count = |keep: &dyn Fn(&Machine) -> bool| {
        i32::try_from(machines.iter().filter(|m| keep(m)).count()).unwrap_or(i32::MAX)
    };
    let ready =
        count(&|m| conditions::is_true(&m.status.clone().unwrap_or_default().conditions, READY));
    let replicas = count(&|_| true);
    status.replicas = Some(replicas);
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(ready);
    status.up_to_date_replicas = Some(replicas);
    set_v1beta1_counters(
        &mut status,
        &[
            ("readyReplicas", ready),
            ("availableReplicas", ready),
            ("fullyLabeledReplicas", replicas),
        ],
    );
    status.selector = Some(selector_string(&set.spec.selector));
    status.observed_generation = set.metadata.generation;
    let generation = set.metadata.generation;
    let up = replicas < desired;
    let down = replicas > desired;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            SCALING_UP,
            if up { TRUE } else { FALSE },
            match (up, blocked) {
                (true, Some(_)) => REASON_SCALING_UP_BLOCKED,
                (true, None) => "ScalingUp",
                (false, _) => "NotScalingUp",
            },
            match (up, blocked) {
                (true, Some(why)) => {
                    format!("scaling up from {replicas} to {desired} replicas is blocked: {why}")
                }
                (true, None) => format!("scaling up from {replicas} to {desired} replicas"),
                (false, _) => String::new(),
            },
            generation,
        ),
        now,
    );
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            SCALING_DOWN,
            if down { TRUE } else { FALSE },
            if down {
                "ScalingDown"
            } else {
                "NotScalingDown"
            },
            if down {
                format!("scaling down from {replicas} to {desired} replicas")
            } else {
                String::new()
            },
            generation,
        ),
        now,
    );
    let all_ready = ready == replicas;
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(
            MACHINES_READY,
            if all_ready { TRUE } else { FALSE },
            if all_ready { "Ready" } else { "NotReady" },
            if all_ready {
                String::new()
            } else {
                format!("{} of {replicas} Machines not ready", replicas - ready)
            },
            generation,
        ),
        now,
    );
    status
}

/// The MachineSet controller.
#[derive(Clone, Debug, Default)]
pub struct MachineSetController;

fn is_controlled_by(machine: &Machine, uid: &str) -> bool {
    machine
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn has_controller(machine: &Machine) -> bool {
    machine
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true))
}

/// A random five-character suffix for new Machines' names (lowercase letters and digits, as the
/// API server's generateName uses).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The API's refusal of a write that a retry with the same input cannot change (a quota, an
/// invalid object), as its message; `None` for anything else.
fn refusal(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(status) if matches!(status.code, 403 | 422) => {
            Some(status.message.clone())
        }
        _ => None,
    }
}

/// Why a template cannot be cloned now, when the cause is the template (or its kind) rather than
/// the API failing us.
fn unresolvable(err: &ContractError) -> Option<String> {
    match err {
        ContractError::Missing { .. } => Some(format!("{err}; create it")),
        // A kind the API does not serve; failing to ask the API is retried instead.
        ContractError::Resolve {
            source: source @ WatchError::UnknownKind { .. },
            ..
        } => Some(format!("{err}: {source}")),
        ContractError::Resolve { .. } => None,
        ContractError::Api { source, .. } => refusal(source).map(|why| format!("{err}: {why}")),
    }
}

impl MachineSetController {
    /// Why the set's templates cannot be cloned (one that does not exist, or whose kind is not
    /// served), when one cannot: checked before anything is created, so a set whose templates do
    /// not resolve creates nothing.
    async fn unresolved_template(
        &self,
        set: &MachineSet,
        namespace: &str,
        client: &Client,
    ) -> Result<Option<String>, MachineSetError> {
        let spec = &set.spec.template.spec;
        let bootstrap = spec
            .bootstrap
            .config_ref
            .as_ref()
            .filter(|r| !r.name.is_empty() && r.kind.ends_with("Template"))
            .map(|r| (r, "spec.template.spec.bootstrap.configRef"));
        let infrastructure = Some((
            &spec.infrastructure_ref,
            "spec.template.spec.infrastructureRef",
        ));
        for (template, field) in bootstrap.into_iter().chain(infrastructure) {
            let found = match contract::Referenced::resolve(client, namespace, template).await {
                Ok(api) => api.get().await,
                Err(err) => Err(err),
            };
            match found {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Ok(Some(format!(
                        "{} {namespace}/{} ({field}) does not exist; create it",
                        template.kind, template.name
                    )));
                }
                Err(err) => match unresolvable(&err) {
                    Some(why) => return Ok(Some(format!("{field}: {why}"))),
                    None => return Err(err.into()),
                },
            }
        }
        Ok(None)
    }

    /// Creates one Machine from the template (cloning its provider templates): its name, or
    /// `Ok(Err(why))` when the API refused it or a template could not be cloned, after taking
    /// back the clones made for it.
    async fn create_machine(
        &self,
        set: &MachineSet,
        raw_template: &Value,
        namespace: &str,
        client: &Client,
    ) -> Result<Result<String, String>, MachineSetError> {
        let name = format!("{}-{}", set.name_any(), random_suffix());
        let mut clones = Vec::new();
        let made = self
            .create_machine_named(set, raw_template, namespace, client, &name, &mut clones)
            .await;
        let blocked = match made {
            Ok(()) => return Ok(Ok(name)),
            Err(MachineSetError::Contract(err)) => unresolvable(&err)
                .ok_or(MachineSetError::Contract(err))
                .map(|why| format!("cloning the templates of Machine {name}: {why}")),
            Err(MachineSetError::Api {
                action: "creating",
                kind: "Machine",
                namespace,
                name,
                source,
            }) => refusal(&source).ok_or(MachineSetError::Api {
                action: "creating",
                kind: "Machine",
                namespace,
                name,
                source,
            }),
            Err(err) => Err(err),
        };
        // The Machine was not made: its clones would only wait for the set's deletion.
        for clone in clones {
            if let Err(err) = clone.delete().await {
                tracing::warn!(
                    machineset = %set.name_any(),
                    kind = %clone.reference.kind,
                    name = %clone.reference.name,
                    error = %capstan_runtime::controller::ErrorChain(&err),
                    "a clone made for a Machine that was not created could not be deleted"
                );
            }
        }
        blocked.map(Err)
    }

    /// [`Self::create_machine`]'s work, recording each clone in `clones` as it is made.
    async fn create_machine_named(
        &self,
        set: &MachineSet,
        raw_template: &Value,
        namespace: &str,
        client: &Client,
        name: &str,
        clones: &mut Vec<contract::Referenced>,
    ) -> Result<(), MachineSetError> {
        let owner = contract::owner_reference(set, true);
        let mut labels: BTreeMap<String, String> = set.spec.template.metadata.labels.clone();
        labels.insert(LABEL_CLUSTER_NAME.into(), set.spec.cluster_name.clone());
        labels.insert(LABEL_SET_NAME.into(), set.name_any());
        if let Some(deployment) = set.labels().get(capstan_model::meta::LABEL_DEPLOYMENT_NAME) {
            labels.insert(
                capstan_model::meta::LABEL_DEPLOYMENT_NAME.into(),
                deployment.clone(),
            );
        }
        let label_pairs: Vec<(String, String)> =
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut spec = raw_template
            .get("spec")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        spec["clusterName"] = json!(set.spec.cluster_name);
        if let Some(config) = set
            .spec
            .template
            .spec
            .bootstrap
            .config_ref
            .as_ref()
            .filter(|r| !r.name.is_empty())
        {
            let cloned = if config.kind.ends_with("Template") {
                let cloned = contract::clone_template(
                    client,
                    namespace,
                    config,
                    name,
                    &label_pairs,
                    owner.clone(),
                )
                .await?;
                clones.push(contract::Referenced::resolve(client, namespace, &cloned).await?);
                cloned
            } else {
                config.clone()
            };
            spec["bootstrap"]["configRef"] = json!(cloned);
        }
        let infra = &set.spec.template.spec.infrastructure_ref;
        let cloned: ContractVersionedObjectReference =
            contract::clone_template(client, namespace, infra, name, &label_pairs, owner.clone())
                .await?;
        clones.push(contract::Referenced::resolve(client, namespace, &cloned).await?);
        spec["infrastructureRef"] = json!(cloned);
        let annotations = raw_template
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        // The template's raw spec is sent, so template fields the typed model does not know are kept.
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [owner],
            },
            "spec": spec,
        }))
        .map_err(|e| MachineSetError::Api {
            action: "building",
            kind: "Machine",
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(kube::Error::SerdeError(e)),
        })?;
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::erase::<Machine>(&()),
        );
        api.create(&PostParams::default(), &object)
            .await
            .map_err(api_error("creating", "Machine", namespace, name))?;
        Ok(())
    }
}

impl Reconciler for MachineSetController {
    type Object = MachineSet;
    type Error = MachineSetError;

    fn name(&self) -> &'static str {
        MACHINE_SET_CONTROLLER
    }

    fn cluster_name(&self, object: &MachineSet) -> Option<String> {
        Some(object.spec.cluster_name.clone()).filter(|c| !c.is_empty())
    }

    fn follows_cluster_pause(&self) -> bool {
        true
    }

    fn configure(
        &self,
        controller: Controller<MachineSet>,
        client: &Client,
    ) -> Controller<MachineSet> {
        controller.owns(
            Api::<Machine>::all(client.clone()),
            watcher::Config::default(),
        )
    }

    async fn reconcile(
        &self,
        set: Arc<MachineSet>,
        context: Arc<Context>,
    ) -> Result<Action, MachineSetError> {
        let namespace = set.namespace().ok_or(MachineSetError::NoNamespace)?;
        let name = set.name_any();
        let client = context.client().clone();
        if set.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let machines_api: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        let all = machines_api
            .list(
                &ListParams::default()
                    .labels(&format!("{LABEL_CLUSTER_NAME}={}", set.spec.cluster_name)),
            )
            .await
            .map_err(api_error("listing", "Machine", &namespace, ""))?
            .items;
        let mut owned = Vec::new();
        for machine in all {
            if is_controlled_by(&machine, &uid) {
                owned.push(machine);
            } else if !has_controller(&machine)
                && machine.metadata.deletion_timestamp.is_none()
                && selector_matches(&set.spec.selector, &machine.labels().clone())
            {
                // Adoption: a merge patch guarded by the resourceVersion (another set may race).
                let mut refs = machine.owner_references().to_vec();
                refs.push(contract::owner_reference(&*set, true));
                let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": machine.metadata.resource_version}});
                machines_api
                    .patch(
                        &machine.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(api_error(
                        "adopting",
                        "Machine",
                        &namespace,
                        &machine.name_any(),
                    ))?;
                owned.push(machine);
            }
        }
        let desired = set.spec.replicas.unwrap_or(1).max(0);
        let active: Vec<Machine> = owned
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        let current = i32::try_from(active.len()).unwrap_or(i32::MAX);
        let mut blocked = None;
        if current < desired {
            blocked = self.unresolved_template(&set, &namespace, &client).await?;
        }
        if current < desired && blocked.is_none() {
            let sets: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &namespace,
                &ApiResource::erase::<MachineSet>(&()),
            );
            let raw = sets.get(&name).await.map_err(api_error(
                "reading",
                "MachineSet",
                &namespace,
                &name,
            ))?;
            let template = raw
                .data
                .get("spec")
                .and_then(|s| s.get("template"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            let missing = usize::try_from(desired - current)
                .unwrap_or(0)
                .min(SCALE_BURST);
            for _ in 0..missing {
                match self
                    .create_machine(&set, &template, &namespace, &client)
                    .await?
                {
                    Ok(created) => {
                        tracing::debug!(machineset = %name, machine = %created, "created");
                    }
                    Err(why) => {
                        blocked = Some(why);
                        break;
                    }
                }
            }
        } else if current > desired {
            let excess = usize::try_from(current - desired)
                .unwrap_or(0)
                .min(SCALE_BURST);
            let order =
                DeletionOrder::parse(set.spec.deletion.as_ref().and_then(|d| d.order.as_deref()));
            let victims = {
                let mut rng = rand::rng();
                pick_for_deletion(&active, excess, order, &mut || rng.random())
            };
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            for victim in victims {
                match machines_api.delete(&victim, &params).await {
                    Ok(_) => {
                        tracing::info!(machineset = %name, machine = %victim, desired, "scaling down: deleting Machine");
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(source) => {
                        return Err(api_error("deleting", "Machine", &namespace, &victim)(
                            source,
                        ));
                    }
                }
            }
        }
        let status = compute_status(
            &set,
            &owned,
            desired,
            blocked.as_deref(),
            &conditions::now(),
        );
        let sets: Api<MachineSet> = Api::namespaced(client.clone(), &namespace);
        let before = set.status.clone().unwrap_or_default();
        patch::patch_status(&sets, &*set, &before, &status).await?;
        let settled = status.replicas == Some(desired) && status.ready_replicas == Some(desired);
        Ok(if settled {
            Action::await_change()
        } else {
            Action::requeue(WAIT_REQUEUE)
        })
    }
}

/// Writes the v1beta1 meaning of the replica counters to `status.deprecated.v1beta1`, where
/// v1beta1 readers (`kubectl get` in v1beta1, older tools) find them, keeping its conditions.
pub(crate) fn set_v1beta1_counters(
    status: &mut capstan_model::capi::v1beta2::ReplicaStatus,
    counters: &[(&str, i32)],
) {
    let deprecated = status
        .deprecated
        .get_or_insert_with(|| serde_json::json!({}));
    if !deprecated.is_object() {
        *deprecated = serde_json::json!({});
    }
    let v1beta1 = &mut deprecated["v1beta1"];
    if !v1beta1.is_object() {
        *v1beta1 = serde_json::json!({});
    }
    for (field, value) in counters {
        v1beta1[*field] = serde_json::json!(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::capi::v1beta2::{MachineSetSpec, MachineSpec, MachineStatus};
    use capstan_model::meta::Condition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn machine(name: &str, created: i64, ready: bool, marked: bool) -> Machine {
        let mut m = Machine::new(name, Some("ns"), MachineSpec::default());
        m.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created)
                .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        ));
        if marked {
            m.metadata.annotations =
                Some([(ANNOTATION_DELETE_MACHINE.to_owned(), String::new())].into());
        }
        m.status = Some(MachineStatus {
            conditions: vec![Condition {
                type_: READY.into(),
                status: if ready { TRUE } else { FALSE }.into(),
                ..Condition::default()
            }],
            ..MachineStatus::default()
        });
        m
    }

    #[test]
    fn deletion_order_table() {
        let machines = [
            machine("old", 100, true, false),
            machine("mid", 200, true, false),
            machine("new", 300, true, false),
            machine("sick", 150, false, false),
            machine("marked", 250, true, true),
        ];
        let mut counter = 0u64;
        let mut seq = || {
            counter += 1;
            counter
        };
        let cases = [
            (DeletionOrder::Oldest, 1, vec!["marked"]),
            (DeletionOrder::Oldest, 3, vec!["marked", "sick", "old"]),
            (DeletionOrder::Newest, 3, vec!["marked", "sick", "new"]),
            (
                DeletionOrder::Newest,
                5,
                vec!["marked", "sick", "new", "mid", "old"],
            ),
        ];
        for (order, n, want) in cases {
            assert_eq!(
                pick_for_deletion(&machines, n, order, &mut seq),
                want,
                "{order:?} {n}"
            );
        }
        // Random: the tie-breaker decides among equally healthy Machines; marked and sick still first.
        let mut reverse = 100u64;
        let mut down = || {
            reverse -= 1;
            reverse
        };
        let picked = pick_for_deletion(&machines, 3, DeletionOrder::Random, &mut down);
        assert_eq!(&picked[..2], ["marked", "sick"]);
        assert_eq!(DeletionOrder::parse(Some("Newest")), DeletionOrder::Newest);
        assert_eq!(DeletionOrder::parse(None), DeletionOrder::Random);
    }

    #[test]
    fn status_counts_and_scaling_conditions() {
        let mut set = MachineSet::new("s", Some("ns"), MachineSetSpec::default());
        set.spec.selector.match_labels = Some([("a".to_owned(), "1".to_owned())].into());
        let machines = [machine("a", 1, true, false), machine("b", 2, false, false)];
        let status = compute_status(&set, &machines, 3, None, "t");
        assert_eq!((status.replicas, status.ready_replicas), (Some(2), Some(1)));
        assert_eq!(status.selector.as_deref(), Some("a=1"));
        assert!(conditions::is_true(&status.conditions, SCALING_UP));
        assert!(!conditions::is_true(&status.conditions, SCALING_DOWN));
        assert!(!conditions::is_true(&status.conditions, MACHINES_READY));
        let status = compute_status(&set, &machines, 1, None, "t");
        assert!(conditions::is_true(&status.conditions, SCALING_DOWN));
    }
}
