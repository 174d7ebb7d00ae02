//! The owner-reference garbage collector of the embedded API server (a real cluster runs its own in
//! kube-controller-manager, so standalone controllers leave this off).
//!
//! It has to see every kind, including CRDs applied at runtime, so it works untyped
//! (`Api<DynamicObject>` over discovery) and is driven by watches: one watch per listable kind feeds
//! an **owner graph** kept in memory — for each object that has owners, or is named as an owner, or
//! is being deleted with a collector finalizer: its identity, ownerReferences and finalizers, and the
//! uids of its dependents (the owner index). Objects that own nothing and are owned by nothing are
//! not kept, so memory follows the owner graph, not the collections, and nothing is ever listed
//! whole except by a watch's own (paged) first list.
//!
//! Watch events put objects on a work queue; each item is one object, acted on as:
//!
//! - an owner being deleted with the `orphan` finalizer: its dependents lose their reference to it,
//!   then the finalizer is removed;
//! - an owner being deleted with the `foregroundDeletion` finalizer: its dependents are deleted
//!   (foreground too, so whole trees go bottom-up); once none that block it (`blockOwnerDeletion`)
//!   remain, the finalizer is removed;
//! - a dependent none of whose owners exist any more is deleted in the background; one with some
//!   owners gone keeps the rest and drops the dangling references.
//!
//! What queues an item: a dependent that appears or whose owners change, an owner that goes (its
//! dependents), an owner entering deletion with a collector finalizer, a dependent of such an owner
//! that goes or lets go of it. An owner is missing only if a live read by name (in the dependent's
//! namespace) says so or returns another uid — never because the graph lacks it. Every write
//! carries a precondition (the dependent's uid, or a JSON-patch test of the exact value being
//! replaced), so an item acted on from a stale graph fails harmlessly instead of clobbering. Failed
//! items are retried with a per-object backoff. A watch that has to list again (its resourceVersion
//! expired) drops from the graph what the new list no longer has, as if it had seen the deletion.
//!
//! The served kinds are discovered again every `interval` (a CRD added or removed); discovery reads
//! no objects.

use capstan_runtime::controller::{ErrorChain, failure_level};
use capstan_runtime::metrics::ReconcileResult;
use capstan_runtime::{RuntimeError, Task, TaskEnv};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Name of the garbage collector (metrics, logs).
pub const GC_CONTROLLER: &str = "garbage-collector";
/// Finalizer asking for dependents to be orphaned.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// Finalizer asking for dependents to be deleted first.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// How often the served kinds are discovered again unless configured otherwise.
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);
/// Items acted on at once (each is a few requests; deletes wait for a commit).
const CONCURRENCY: usize = 16;
/// First retry delay of a failed item; doubled per failure up to [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How long the first lists of every kind may take before items are acted on anyway.
const INITIAL_SYNC_WAIT: Duration = Duration::from_secs(60);

/// Why an item (or one of its steps) failed.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("discovering the served kinds")]
    Discovery(#[source] kube::Error),
    #[error("reading owner {kind} {name}")]
    ReadOwner {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("{verb} {kind} {name}")]
    Write {
        verb: &'static str,
        kind: String,
        name: String,
        source: kube::Error,
    },
}

/// A listable, watchable, deletable kind.
#[derive(Debug)]
struct Kind {
    resource: ApiResource,
    scope: Scope,
}

impl Kind {
    fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match (&self.scope, namespace) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(client.clone(), ns, &self.resource)
            }
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// A kind by (group, plural).
type KindKey = (String, String);

/// Every served kind the collector manages, by (group, plural), and by (group, kind) to resolve
/// owner references.
#[derive(Debug, Default)]
struct Kinds {
    by_resource: BTreeMap<KindKey, Arc<Kind>>,
    by_kind: HashMap<(String, String), Arc<Kind>>,
}

/// Kinds never watched: Events are not owners and churn constantly (and both Event groups are one
/// stored resource).
fn skipped(resource: &ApiResource) -> bool {
    resource.plural == "events" && matches!(resource.group.as_str(), "" | "events.k8s.io")
}

async fn discover(client: &Client) -> Result<Kinds, GcError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(GcError::Discovery)?;
    let mut kinds = Kinds::default();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if skipped(&resource) || !supports(&caps) {
                continue;
            }
            let kind = Arc::new(Kind {
                scope: caps.scope.clone(),
                resource: resource.clone(),
            });
            kinds.by_kind.insert(
                (resource.group.clone(), resource.kind.clone()),
                kind.clone(),
            );
            kinds
                .by_resource
                .insert((resource.group.clone(), resource.plural.clone()), kind);
        }
    }
    Ok(kinds)
}

fn supports(caps: &ApiCapabilities) -> bool {
    [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::PATCH]
        .iter()
        .all(|v| caps.supports_operation(v))
}

/// What the collector reads of an object: identity, owners, finalizers, deletion.
#[derive(Clone, Debug, PartialEq)]
struct Lean {
    uid: String,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    finalizers: Vec<String>,
    deleting: bool,
}

impl Lean {
    fn of(object: DynamicObject) -> Option<Self> {
        let metadata = object.metadata;
        Some(Self {
            uid: metadata.uid?,
            namespace: metadata.namespace,
            name: metadata.name.unwrap_or_default(),
            owners: metadata.owner_references.unwrap_or_default(),
            finalizers: metadata.finalizers.unwrap_or_default(),
            deleting: metadata.deletion_timestamp.is_some(),
        })
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Being deleted and waiting for the collector (orphaning or foreground).
    fn awaits_collector(&self) -> bool {
        self.deleting
            && (self.has_finalizer(ORPHAN_FINALIZER) || self.has_finalizer(FOREGROUND_FINALIZER))
    }

    fn state(&self) -> OwnerState {
        if self.deleting && self.has_finalizer(FOREGROUND_FINALIZER) {
            OwnerState::WaitingForDependents
        } else if self.deleting && self.has_finalizer(ORPHAN_FINALIZER) {
            OwnerState::Orphaning
        } else {
            OwnerState::Present
        }
    }
}

/// An object as last seen, with its kind.
#[derive(Clone, Debug)]
struct Seen {
    kind: Arc<Kind>,
    object: Lean,
    /// The list generation of its kind's watch it was last seen in (a new list drops what it
    /// misses).
    epoch: u64,
}

impl Seen {
    fn label(&self) -> String {
        match &self.object.namespace {
            Some(ns) => format!("{ns}/{}", self.object.name),
            None => self.object.name.clone(),
        }
    }

    fn api(&self, client: &Client) -> Api<DynamicObject> {
        self.kind.api(client, self.object.namespace.as_deref())
    }

    fn write_error(&self, verb: &'static str) -> impl FnOnce(kube::Error) -> GcError {
        let kind = self.kind.resource.kind.clone();
        let name = self.label();
        move |source| GcError::Write {
            verb,
            kind,
            name,
            source,
        }
    }

    /// Whether this is the object `reference` (of a dependent in `namespace`) names.
    fn is_referenced_by(&self, reference: &OwnerReference, namespace: Option<&str>) -> bool {
        self.kind.resource.kind == reference.kind
            && self.kind.resource.group == capstan_model::meta::group_of(&reference.api_version)
            && self.object.name == reference.name
            && match self.kind.scope {
                Scope::Cluster => self.object.namespace.is_none(),
                Scope::Namespaced => self.object.namespace.as_deref() == namespace,
            }
    }
}

/// One object of the owner graph.
#[derive(Debug, Default)]
struct Node {
    /// The object, once a watch (or a live read of it as an owner) has seen it; `None` for an owner
    /// known only from its dependents' references.
    seen: Option<Seen>,
    /// The uids of the objects that name this one as an owner.
    dependents: HashSet<String>,
    /// A watch saw it go: a live read made before that (still in flight then) must not bring it
    /// back as present.
    gone: bool,
}

/// The owner graph: objects with owners, objects named as owners, and owners awaiting the
/// collector — by uid.
#[derive(Debug, Default)]
struct Graph {
    nodes: HashMap<String, Node>,
}

impl Graph {
    /// Records `object` of `kind` as a watch saw it; returns the uids whose items it queues.
    fn apply(&mut self, kind: &Arc<Kind>, object: Lean, epoch: u64) -> Vec<String> {
        let uid = object.uid.clone();
        let known = self.nodes.contains_key(&uid);
        if !known && object.owners.is_empty() && !object.awaits_collector() {
            // Neither owned nor (yet) named as an owner: nothing to keep.
            return Vec::new();
        }
        let old = self
            .nodes
            .get(&uid)
            .and_then(|n| n.seen.as_ref())
            .map(|s| s.object.clone());
        let mut wake = Vec::new();
        let old_owners: Vec<String> = old
            .iter()
            .flat_map(|o| o.owners.iter().map(|r| r.uid.clone()))
            .collect();
        let new_owners: Vec<String> = object.owners.iter().map(|r| r.uid.clone()).collect();
        for gone in old_owners.iter().filter(|u| !new_owners.contains(u)) {
            if let Some(owner) = self.nodes.get_mut(gone) {
                owner.dependents.remove(&uid);
                // An owner orphaning or deleting in the foreground waits for this.
                if owner
                    .seen
                    .as_ref()
                    .is_some_and(|s| s.object.awaits_collector())
                {
                    wake.push(gone.clone());
                }
            }
            self.prune(gone);
        }
        for added in new_owners.iter().filter(|u| !old_owners.contains(u)) {
            self.nodes
                .entry(added.clone())
                .or_default()
                .dependents
                .insert(uid.clone());
        }
        let owners_changed = old.as_ref().is_none_or(|o| o.owners != object.owners);
        let deletion_changed = old
            .as_ref()
            .is_none_or(|o| o.deleting != object.deleting || o.finalizers != object.finalizers);
        if !object.owners.is_empty() && !object.deleting && owners_changed {
            wake.push(uid.clone());
        }
        if object.awaits_collector() && deletion_changed {
            wake.push(uid.clone());
        }
        if deletion_changed && object.deleting {
            // A dependent of a foreground deletion entered deletion: its owner looks again.
            for owner in &new_owners {
                if self
                    .nodes
                    .get(owner)
                    .and_then(|n| n.seen.as_ref())
                    .is_some_and(|s| s.object.awaits_collector())
                {
                    wake.push(owner.clone());
                }
            }
        }
        let node = self.nodes.entry(uid.clone()).or_default();
        node.seen = Some(Seen {
            kind: kind.clone(),
            object,
            epoch,
        });
        node.gone = false;
        self.prune(&uid);
        wake
    }

    /// Records an owner an item read live, if the graph knows it only by reference and no watch
    /// has seen it go since: a watch's view is never replaced by an older read, and a read that
    /// raced the owner's deletion must not leave it looking present for good (its dependents would
    /// keep the dangling reference).
    fn learn(&mut self, kind: &Arc<Kind>, owner: &Lean, epoch: u64) {
        if let Some(node) = self.nodes.get_mut(&owner.uid)
            && node.seen.is_none()
            && !node.gone
        {
            node.seen = Some(Seen {
                kind: kind.clone(),
                object: owner.clone(),
                epoch,
            });
        }
    }

    /// Records that the object `uid` is gone; returns the uids whose items it queues.
    fn remove(&mut self, uid: &str) -> Vec<String> {
        let Some(node) = self.nodes.remove(uid) else {
            return Vec::new();
        };
        let mut wake: Vec<String> = node.dependents.iter().cloned().collect();
        if let Some(seen) = &node.seen {
            for reference in &seen.object.owners {
                if let Some(owner) = self.nodes.get_mut(&reference.uid) {
                    owner.dependents.remove(uid);
                    if owner
                        .seen
                        .as_ref()
                        .is_some_and(|s| s.object.awaits_collector())
                    {
                        wake.push(reference.uid.clone());
                    }
                }
                self.prune(&reference.uid);
            }
        }
        if !node.dependents.is_empty() {
            // The dependents still name it: kept as an owner known only by reference, so that their
            // items read it live (and find it gone).
            self.nodes.insert(
                uid.to_owned(),
                Node {
                    seen: None,
                    dependents: node.dependents,
                    gone: true,
                },
            );
        }
        wake
    }

    /// Drops `uid` when nothing about it matters any more.
    fn prune(&mut self, uid: &str) {
        let keep = self.nodes.get(uid).is_some_and(|n| {
            !n.dependents.is_empty()
                || n.seen
                    .as_ref()
                    .is_some_and(|s| !s.object.owners.is_empty() || s.object.awaits_collector())
        });
        if !keep {
            self.nodes.remove(uid);
        }
    }

    /// The objects of `kind` last seen in a list generation before `epoch`.
    fn missed(&self, kind: &KindKey, epoch: u64) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, n)| {
                n.seen.as_ref().is_some_and(|s| {
                    s.epoch < epoch
                        && s.kind.resource.group == kind.0
                        && s.kind.resource.plural == kind.1
                })
            })
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// The state of the owner `reference` of a dependent in `namespace`, when the graph knows it.
    fn known_state(
        &self,
        reference: &OwnerReference,
        namespace: Option<&str>,
    ) -> Option<OwnerState> {
        self.nodes
            .get(&reference.uid)?
            .seen
            .as_ref()
            .filter(|s| s.is_referenced_by(reference, namespace))
            .map(|s| s.object.state())
    }

    /// What acting on `uid` takes, from the graph as it is now.
    fn plan(&self, uid: &str) -> Option<Plan> {
        let node = self.nodes.get(uid)?;
        let seen = node.seen.clone()?;
        if seen.object.awaits_collector() {
            let dependents = node
                .dependents
                .iter()
                .filter_map(|d| self.nodes.get(d)?.seen.clone())
                .map(|dependent| {
                    let states = self.owner_states(&dependent);
                    (dependent, states)
                })
                .collect();
            return Some(Plan::Owner {
                owner: seen,
                dependents,
            });
        }
        if seen.object.owners.is_empty() || seen.object.deleting {
            return None;
        }
        let owners = self.owner_states(&seen);
        Some(Plan::Dependent {
            dependent: seen,
            owners,
        })
    }

    fn owner_states(&self, dependent: &Seen) -> OwnerStates {
        dependent
            .object
            .owners
            .iter()
            .map(|r| {
                (
                    r.clone(),
                    self.known_state(r, dependent.object.namespace.as_deref()),
                )
            })
            .collect()
    }
}

/// What became of an owner reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerState {
    /// The owner exists and is not waiting for its dependents.
    Present,
    /// The owner exists, being deleted in the foreground: its dependents must go.
    WaitingForDependents,
    /// The owner exists, being deleted with orphaning: the reference is dropped.
    Orphaning,
    /// No owner by that name and uid exists.
    Absent,
}

/// A dependent's owner references, each with its state when the graph knew it.
type OwnerStates = Vec<(OwnerReference, Option<OwnerState>)>;

/// One item's work, with what the graph knew when it was planned (`None`: read the owner live).
#[derive(Debug)]
enum Plan {
    /// An object with owners, not being deleted.
    Dependent {
        dependent: Seen,
        owners: OwnerStates,
    },
    /// An owner being deleted with `orphan` or `foregroundDeletion`, with its dependents.
    Owner {
        owner: Seen,
        dependents: Vec<(Seen, OwnerStates)>,
    },
}

/// What acting on an item found out.
#[derive(Debug, Default)]
struct Outcome {
    /// Owners read live that exist, to record in the graph (no need to read them again).
    learned: Vec<(Arc<Kind>, Lean)>,
    failed: usize,
}

impl Outcome {
    fn fail(&mut self, err: &GcError) {
        // A write from a stale graph fails its precondition with a conflict, harmlessly: the
        // retry acts on the graph the watches have brought up to date.
        if failure_level(err) == tracing::Level::DEBUG {
            tracing::debug!(controller = GC_CONTROLLER, "conflict, {err}; retrying");
        } else {
            tracing::warn!(controller = GC_CONTROLLER, error = %ErrorChain(err), "collecting failed");
        }
        self.failed += 1;
    }
}

fn is_status(err: &kube::Error, check: fn(&kube::core::Status) -> bool) -> bool {
    matches!(err, kube::Error::Api(status) if check(status))
}

/// Failures an item can ignore: the object changed or went away since it was seen; its watch
/// event brings the next look.
fn is_stale(err: &kube::Error) -> bool {
    is_status(err, kube::core::Status::is_not_found)
        || is_status(err, kube::core::Status::is_conflict)
        || is_status(err, kube::core::Status::is_invalid)
}

/// Acts on one planned item.
struct Work<'a> {
    client: &'a Client,
    kinds: &'a Kinds,
    outcome: Outcome,
}

impl Work<'_> {
    /// The state of the owner `reference` of `dependent`: as the graph knew it, else read live.
    async fn owner_state(
        &mut self,
        dependent: &Seen,
        reference: &OwnerReference,
        known: Option<OwnerState>,
    ) -> Result<OwnerState, GcError> {
        if let Some(state) = known {
            return Ok(state);
        }
        let group = capstan_model::meta::group_of(&reference.api_version).to_owned();
        let Some(kind) = self.kinds.by_kind.get(&(group, reference.kind.clone())) else {
            // A kind this API does not serve (or cannot list): leave the reference alone.
            return Ok(OwnerState::Present);
        };
        let namespace = match kind.scope {
            Scope::Cluster => None,
            // A namespaced owner of a cluster-scoped object can never resolve.
            Scope::Namespaced => match dependent.object.namespace.as_deref() {
                Some(ns) => Some(ns),
                None => return Ok(OwnerState::Absent),
            },
        };
        let found = kind
            .api(self.client, namespace)
            .get_opt(&reference.name)
            .await
            .map_err(|source| GcError::ReadOwner {
                kind: reference.kind.clone(),
                name: reference.name.clone(),
                source,
            })?;
        match found.and_then(Lean::of) {
            Some(owner) if owner.uid == reference.uid => {
                let state = owner.state();
                self.outcome.learned.push((kind.clone(), owner));
                Ok(state)
            }
            _ => Ok(OwnerState::Absent),
        }
    }

    /// Replaces `node`'s ownerReferences by `keep`, if they are still what was seen.
    async fn set_owners(&self, node: &Seen, keep: Vec<OwnerReference>) -> Result<(), GcError> {
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/ownerReferences", "value": node.object.owners},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": keep},
        ]))
        .map_err(|e| node.write_error("building the owner patch of")(kube::Error::SerdeError(e)))?;
        match node
            .api(self.client)
            .patch(
                &node.object.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Err(e) if !is_stale(&e) => Err(node.write_error("updating the owners of")(e)),
            _ => Ok(()),
        }
    }

    /// Deletes `node` (only the object that was seen: the uid is a precondition).
    async fn delete(&self, node: &Seen, policy: PropagationPolicy) -> Result<(), GcError> {
        let params = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(node.object.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match node
            .api(self.client)
            .delete(&node.object.name, &params)
            .await
        {
            Err(e) if !is_stale(&e) => Err(node.write_error("deleting")(e)),
            _ => Ok(()),
        }
    }

    /// Removes `finalizer` from `node`, if it is still where it was seen.
    async fn remove_finalizer(&self, node: &Seen, finalizer: &str) -> Result<(), GcError> {
        // The same patch as every controller's finalizer removal (capstan-runtime's one way).
        let Some(operations) =
            capstan_runtime::finalizers::remove_operations(&node.object.finalizers, finalizer)
        else {
            return Ok(());
        };
        let patch: json_patch::Patch = serde_json::from_value(operations).map_err(|e| {
            node.write_error("building the finalizer patch of")(kube::Error::SerdeError(e))
        })?;
        match node
            .api(self.client)
            .patch(
                &node.object.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Err(e) if !is_stale(&e) => Err(node.write_error("removing a finalizer of")(e)),
            _ => Ok(()),
        }
    }

    /// A dependent: deleted when every owner is gone; dangling references dropped when some
    /// remain.
    async fn dependent(&mut self, dependent: &Seen, owners: OwnerStates) {
        let mut states = Vec::with_capacity(owners.len());
        for (reference, known) in owners {
            match self.owner_state(dependent, &reference, known).await {
                Ok(state) => states.push((reference, state)),
                Err(err) => {
                    self.outcome.fail(&err);
                    return;
                }
            }
        }
        let absent = states
            .iter()
            .filter(|(_, s)| *s == OwnerState::Absent)
            .count();
        if absent == 0 {
            return;
        }
        // Owners in orphaning or foreground deletion are handled with their owner.
        let solid = states
            .iter()
            .any(|(_, s)| matches!(s, OwnerState::Present | OwnerState::Orphaning));
        let waiting = states
            .iter()
            .any(|(_, s)| *s == OwnerState::WaitingForDependents);
        let result = if solid {
            let keep = states
                .into_iter()
                .filter(|(_, s)| *s != OwnerState::Absent)
                .map(|(r, _)| r)
                .collect();
            self.set_owners(dependent, keep).await
        } else if waiting {
            Ok(())
        } else {
            tracing::info!(
                controller = GC_CONTROLLER,
                kind = %dependent.kind.resource.kind,
                object = %dependent.label(),
                "deleting an object whose owners are gone"
            );
            self.delete(dependent, PropagationPolicy::Background).await
        };
        if let Err(err) = result {
            self.outcome.fail(&err);
        }
    }

    /// An owner being deleted with `orphan` or `foregroundDeletion`.
    async fn owner(&mut self, owner: &Seen, dependents: Vec<(Seen, OwnerStates)>) {
        let uid = owner.object.uid.as_str();
        let without_owner = |dependent: &Seen| -> Vec<OwnerReference> {
            dependent
                .object
                .owners
                .iter()
                .filter(|r| r.uid != uid)
                .cloned()
                .collect()
        };
        if owner.object.has_finalizer(ORPHAN_FINALIZER) {
            let mut orphaned = true;
            for (dependent, _) in &dependents {
                if let Err(err) = self.set_owners(dependent, without_owner(dependent)).await {
                    self.outcome.fail(&err);
                    orphaned = false;
                }
            }
            // Orphaning must be complete before the owner may go; the dependents' own watch
            // events confirm it, so the finalizer goes once none is left in the graph.
            if orphaned
                && dependents.is_empty()
                && let Err(err) = self.remove_finalizer(owner, ORPHAN_FINALIZER).await
            {
                self.outcome.fail(&err);
            }
            return;
        }
        let mut blocked = false;
        for (dependent, owners) in &dependents {
            let blocks = owners
                .iter()
                .find(|(r, _)| r.uid == uid)
                .is_some_and(|(r, _)| r.block_owner_deletion == Some(true));
            // A dependent another owner still holds survives: it only lets go of this one.
            let mut held_elsewhere = false;
            let mut unsure = false;
            for (other, known) in owners.iter().filter(|(r, _)| r.uid != uid) {
                match self.owner_state(dependent, other, *known).await {
                    Ok(OwnerState::Present) => held_elsewhere = true,
                    Ok(_) => {}
                    Err(err) => {
                        self.outcome.fail(&err);
                        unsure = true;
                    }
                }
            }
            if unsure {
                blocked |= blocks;
                continue;
            }
            if held_elsewhere {
                if let Err(err) = self.set_owners(dependent, without_owner(dependent)).await {
                    self.outcome.fail(&err);
                    blocked |= blocks;
                }
                continue;
            }
            blocked |= blocks;
            if !dependent.object.deleting
                && let Err(err) = self.delete(dependent, PropagationPolicy::Foreground).await
            {
                self.outcome.fail(&err);
            }
        }
        // Blocking dependents are gone only once their deletions reach the graph.
        if !blocked && let Err(err) = self.remove_finalizer(owner, FOREGROUND_FINALIZER).await {
            self.outcome.fail(&err);
        }
    }
}

async fn execute(client: Client, kinds: Arc<Kinds>, plan: Plan) -> Outcome {
    let mut work = Work {
        client: &client,
        kinds: &kinds,
        outcome: Outcome::default(),
    };
    match plan {
        Plan::Dependent { dependent, owners } => work.dependent(&dependent, owners).await,
        Plan::Owner { owner, dependents } => work.owner(&owner, dependents).await,
    }
    work.outcome
}

/// What a kind's watch reports to the collector.
#[derive(Debug)]
enum Change {
    /// A (re)list begins.
    ListStarted,
    Applied(Lean),
    Deleted(String),
    /// The (re)list is complete.
    ListDone,
}

/// Forwards the watch of `kind` to the collector, lean, until `stop` or the channel closes.
fn spawn_watch(
    client: &Client,
    key: KindKey,
    kind: &Kind,
    changes: mpsc::Sender<(KindKey, Change)>,
    stop: capstan_runtime::CancellationToken,
) -> JoinHandle<()> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
    tokio::spawn(async move {
        // The backoff matters beyond politeness: an in-process client whose store is gone fails
        // without ever yielding, and a watcher without a backoff would then spin on one worker
        // thread for ever.
        let stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .take_until(stop.cancelled_owned());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let change = match event {
                Ok(watcher::Event::Init) => Change::ListStarted,
                Ok(watcher::Event::InitDone) => Change::ListDone,
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => match Lean::of(o) {
                    Some(lean) => Change::Applied(lean),
                    None => continue,
                },
                Ok(watcher::Event::Delete(o)) => match o.metadata.uid {
                    Some(uid) => Change::Deleted(uid),
                    None => continue,
                },
                Err(err) => {
                    tracing::debug!(controller = GC_CONTROLLER, kind = %key.1, error = %ErrorChain(&err), "watch");
                    continue;
                }
            };
            if changes.send((key.clone(), change)).await.is_err() {
                break;
            }
        }
    })
}

/// The collector's state between events.
struct Collector {
    kinds: Arc<Kinds>,
    graph: Graph,
    /// The list generation of each kind's watch.
    epochs: HashMap<KindKey, u64>,
    /// Kinds whose watch has completed a first list.
    synced: HashSet<KindKey>,
    /// Whether items are acted on (after every kind's first list, or [`INITIAL_SYNC_WAIT`]).
    ready: bool,
    queue: VecDeque<String>,
    queued: HashSet<String>,
    in_flight: HashSet<String>,
    /// Items queued again while in flight: they run once more when done.
    dirty: HashSet<String>,
    failures: HashMap<String, u32>,
    retries: BinaryHeap<Reverse<(Instant, String)>>,
}

impl Collector {
    fn new() -> Self {
        Self {
            kinds: Arc::new(Kinds::default()),
            graph: Graph::default(),
            epochs: HashMap::new(),
            synced: HashSet::new(),
            ready: false,
            queue: VecDeque::new(),
            queued: HashSet::new(),
            in_flight: HashSet::new(),
            dirty: HashSet::new(),
            failures: HashMap::new(),
            retries: BinaryHeap::new(),
        }
    }

    fn enqueue(&mut self, uids: Vec<String>) {
        for uid in uids {
            if self.in_flight.contains(&uid) {
                self.dirty.insert(uid);
            } else if self.queued.insert(uid.clone()) {
                self.queue.push_back(uid);
            }
        }
    }

    fn handle(&mut self, key: KindKey, change: Change) {
        let Some(kind) = self.kinds.by_resource.get(&key).cloned() else {
            // A kind no longer served: its watch is being stopped.
            return;
        };
        tracing::trace!(controller = GC_CONTROLLER, kind = %key.1, ?change, "change");
        match change {
            Change::ListStarted => {
                *self.epochs.entry(key).or_default() += 1;
            }
            Change::Applied(object) => {
                let epoch = self.epochs.get(&key).copied().unwrap_or_default();
                let wake = self.graph.apply(&kind, object, epoch);
                self.enqueue(wake);
            }
            Change::Deleted(uid) => {
                let wake = self.graph.remove(&uid);
                self.enqueue(wake);
            }
            Change::ListDone => {
                let epoch = self.epochs.get(&key).copied().unwrap_or_default();
                // What the new list no longer has went while the watch was away.
                for uid in self.graph.missed(&key, epoch) {
                    let wake = self.graph.remove(&uid);
                    self.enqueue(wake);
                }
                self.synced.insert(key);
                if !self.ready
                    && self
                        .kinds
                        .by_resource
                        .keys()
                        .all(|k| self.synced.contains(k))
                {
                    self.ready = true;
                }
            }
        }
    }

    /// Replaces the served kinds; returns the kinds to start watching and those to stop.
    fn set_kinds(&mut self, kinds: Kinds) -> (Vec<KindKey>, Vec<KindKey>) {
        let added: Vec<KindKey> = kinds
            .by_resource
            .keys()
            .filter(|k| !self.kinds.by_resource.contains_key(*k))
            .cloned()
            .collect();
        let removed: Vec<KindKey> = self
            .kinds
            .by_resource
            .keys()
            .filter(|k| !kinds.by_resource.contains_key(*k))
            .cloned()
            .collect();
        if !added.is_empty() || !removed.is_empty() {
            tracing::debug!(
                controller = GC_CONTROLLER,
                ?added,
                ?removed,
                "served kinds changed"
            );
        }
        for key in &removed {
            // A kind no longer served has no objects: its dependents look at their owners again.
            for uid in self.graph.missed(key, u64::MAX) {
                let wake = self.graph.remove(&uid);
                self.enqueue(wake);
            }
            self.synced.remove(key);
            self.epochs.remove(key);
        }
        self.kinds = Arc::new(kinds);
        (added, removed)
    }

    /// The next item to act on, with its plan.
    fn next(&mut self) -> Option<(String, Plan)> {
        while let Some(uid) = self.queue.pop_front() {
            self.queued.remove(&uid);
            if let Some(plan) = self.graph.plan(&uid) {
                tracing::trace!(controller = GC_CONTROLLER, uid, ?plan, "acting");
                self.in_flight.insert(uid.clone());
                return Some((uid, plan));
            }
            tracing::trace!(controller = GC_CONTROLLER, uid, "nothing to do");
            self.failures.remove(&uid);
        }
        None
    }

    fn finished(&mut self, uid: String, outcome: &Outcome) {
        tracing::trace!(
            controller = GC_CONTROLLER,
            uid,
            failed = outcome.failed,
            "acted"
        );
        self.in_flight.remove(&uid);
        for (kind, owner) in &outcome.learned {
            let key = (kind.resource.group.clone(), kind.resource.plural.clone());
            let epoch = self.epochs.get(&key).copied().unwrap_or_default();
            self.graph.learn(kind, owner, epoch);
        }
        if outcome.failed > 0 {
            let failures = self.failures.entry(uid.clone()).or_default();
            *failures = failures.saturating_add(1);
            let delay = RETRY_INITIAL
                .saturating_mul(1 << (*failures - 1).min(16))
                .min(RETRY_MAX);
            self.dirty.remove(&uid);
            self.retries.push(Reverse((Instant::now() + delay, uid)));
            return;
        }
        self.failures.remove(&uid);
        if self.dirty.remove(&uid) {
            self.enqueue(vec![uid]);
        }
    }

    /// Queues the retries that are due; returns when the next one is.
    fn due_retries(&mut self) -> Option<Instant> {
        let now = Instant::now();
        while let Some(Reverse((at, _))) = self.retries.peek() {
            if *at > now {
                return Some(*at);
            }
            if let Some(Reverse((_, uid))) = self.retries.pop() {
                self.enqueue(vec![uid]);
            }
        }
        None
    }
}

/// The garbage collector as a runtime [`Task`].
#[derive(Clone, Debug)]
pub struct GarbageCollector {
    interval: Duration,
}

impl GarbageCollector {
    /// A collector that discovers the served kinds again every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self { interval }
    }
}

impl Task for GarbageCollector {
    fn name(&self) -> &'static str {
        GC_CONTROLLER
    }

    fn run(self: Box<Self>, env: TaskEnv) -> BoxFuture<'static, Result<(), RuntimeError>> {
        Box::pin(run(self.interval, env))
    }
}

async fn run(interval: Duration, env: TaskEnv) -> Result<(), RuntimeError> {
    let (changes, mut received) = mpsc::channel::<(KindKey, Change)>(1024);
    let mut collector = Collector::new();
    let mut watches: BTreeMap<KindKey, (JoinHandle<()>, capstan_runtime::CancellationToken)> =
        BTreeMap::new();
    let mut discovery = tokio::time::interval(interval);
    discovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut running = FuturesUnordered::new();
    tracing::info!(controller = GC_CONTROLLER, "garbage collector started");
    loop {
        let next_retry = collector.due_retries();
        let retry_wait = async {
            match next_retry {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let sync_wait = async {
            if collector.ready {
                std::future::pending().await
            } else {
                tokio::time::sleep_until((started + INITIAL_SYNC_WAIT).into()).await;
            }
        };
        tokio::select! {
            () = env.shutdown.cancelled() => break,
            Some((key, change)) = received.recv() => collector.handle(key, change),
            Some((uid, outcome, elapsed)) = running.next(), if !running.is_empty() => {
                let outcome: Outcome = outcome;
                let result = if outcome.failed == 0 {
                    ReconcileResult::Success
                } else {
                    ReconcileResult::Error
                };
                env.metrics.record(GC_CONTROLLER, result, elapsed);
                collector.finished(uid, &outcome);
            }
            _ = discovery.tick() => match discover(&env.client).await {
                Ok(kinds) => {
                    let (added, removed) = collector.set_kinds(kinds);
                    for key in removed {
                        if let Some((handle, stop)) = watches.remove(&key) {
                            stop.cancel();
                            handle.abort();
                        }
                    }
                    for key in added {
                        if let Some(kind) = collector.kinds.by_resource.get(&key) {
                            let stop = env.shutdown.child_token();
                            let handle = spawn_watch(&env.client, key.clone(), kind, changes.clone(), stop.clone());
                            watches.insert(key, (handle, stop));
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(controller = GC_CONTROLLER, error = %ErrorChain(&err), "discovery");
                }
            },
            () = retry_wait => {}
            () = sync_wait => {
                if !collector.ready {
                    tracing::warn!(controller = GC_CONTROLLER, "not every kind listed in time; collecting anyway");
                    collector.ready = true;
                }
            }
        }
        while collector.ready && running.len() < CONCURRENCY {
            let Some((uid, plan)) = collector.next() else {
                break;
            };
            let client = env.client.clone();
            let kinds = collector.kinds.clone();
            running.push(async move {
                let began = Instant::now();
                let outcome = execute(client, kinds, plan).await;
                (uid, outcome, began.elapsed())
            });
        }
    }
    // Wait for the watches to end so none outlives the API it watches.
    for (handle, stop) in watches.into_values() {
        stop.cancel();
        handle.abort();
        let _ = handle.await;
    }
    tracing::info!(controller = GC_CONTROLLER, "garbage collector stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind() -> Arc<Kind> {
        Arc::new(Kind {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            scope: Scope::Namespaced,
        })
    }

    fn object(uid: &str, owners: &[&str]) -> Lean {
        Lean {
            uid: uid.into(),
            namespace: Some("ns".into()),
            name: format!("cm-{uid}"),
            owners: owners
                .iter()
                .map(|o| OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: format!("cm-{o}"),
                    uid: (*o).into(),
                    ..OwnerReference::default()
                })
                .collect(),
            finalizers: Vec::new(),
            deleting: false,
        }
    }

    #[test]
    fn the_graph_keeps_only_owners_and_dependents() {
        let mut graph = Graph::default();
        let kind = kind();
        // An object with no owners, named by nobody, is not kept.
        assert!(graph.apply(&kind, object("a", &[]), 1).is_empty());
        assert!(graph.nodes.is_empty());
        // A new dependent is looked at; its owner is known by reference.
        assert_eq!(graph.apply(&kind, object("b", &["a"]), 1), ["b"]);
        assert_eq!(graph.nodes.len(), 2);
        assert!(graph.nodes["a"].seen.is_none());
        assert_eq!(
            graph.known_state(&object("b", &["a"]).owners[0], Some("ns")),
            None
        );
        // The owner seen: its state is known without a read.
        assert!(graph.apply(&kind, object("a", &[]), 1).is_empty());
        assert_eq!(
            graph.known_state(&object("b", &["a"]).owners[0], Some("ns")),
            Some(OwnerState::Present)
        );
        // An unchanged dependent is not looked at again.
        assert!(graph.apply(&kind, object("b", &["a"]), 1).is_empty());
        // The owner goes: its dependent is looked at, and finds the owner unknown (read live).
        assert_eq!(graph.remove("a"), ["b"]);
        assert_eq!(
            graph.known_state(&object("b", &["a"]).owners[0], Some("ns")),
            None
        );
        assert!(matches!(graph.plan("b"), Some(Plan::Dependent { .. })));
        // The dependent goes: nothing is left.
        graph.remove("b");
        assert!(graph.nodes.is_empty(), "{:?}", graph.nodes);
    }

    #[test]
    fn foreground_owners_are_woken_by_their_dependents() {
        let mut graph = Graph::default();
        let kind = kind();
        graph.apply(&kind, object("leaf", &["root"]), 1);
        let mut root = object("root", &[]);
        root.deleting = true;
        root.finalizers = vec![FOREGROUND_FINALIZER.into()];
        assert_eq!(graph.apply(&kind, root, 1), ["root"]);
        let Some(Plan::Owner { dependents, .. }) = graph.plan("root") else {
            panic!("root is an owner awaiting the collector");
        };
        assert_eq!(dependents.len(), 1);
        // The leaf entering deletion, then going, wakes the root each time.
        let mut leaf = object("leaf", &["root"]);
        leaf.deleting = true;
        assert_eq!(graph.apply(&kind, leaf, 1), ["root"]);
        assert_eq!(graph.remove("leaf"), ["root"]);
        let Some(Plan::Owner { dependents, .. }) = graph.plan("root") else {
            panic!("root still awaits the collector");
        };
        assert!(dependents.is_empty());
    }

    #[test]
    fn an_owner_read_live_before_its_deletion_was_seen_stays_unknown() {
        // The race behind a dependent that kept a dangling reference: its item reads owner "a"
        // live (present), the watch then reports "a" deleted, and only then the item finishes.
        let mut graph = Graph::default();
        let kind = kind();
        graph.apply(&kind, object("b", &["a", "c"]), 1);
        let read_before_the_deletion = object("a", &[]);
        assert_eq!(graph.remove("a"), ["b"]);
        graph.learn(&kind, &read_before_the_deletion, 1);
        let reference = &object("b", &["a"]).owners[0];
        assert_eq!(graph.known_state(reference, Some("ns")), None);
        // An owner not seen to go is learned as read.
        let reference_c = &object("b", &["c"]).owners[0];
        graph.learn(&kind, &object("c", &[]), 1);
        assert_eq!(
            graph.known_state(reference_c, Some("ns")),
            Some(OwnerState::Present)
        );
    }

    #[test]
    fn a_new_list_drops_what_it_missed() {
        let mut graph = Graph::default();
        let kind = kind();
        graph.apply(&kind, object("a", &[]), 1);
        graph.apply(&kind, object("b", &["a"]), 1);
        graph.apply(&kind, object("a", &[]), 1);
        // Relisted (epoch 2): only b is there any more.
        graph.apply(&kind, object("b", &["a"]), 2);
        let key = ("".to_owned(), "configmaps".to_owned());
        assert_eq!(graph.missed(&key, 2), ["a"]);
    }

    #[test]
    fn events_are_not_watched() {
        let event = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
        assert!(skipped(&event));
        let config_map = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        assert!(!skipped(&config_map));
    }
}
