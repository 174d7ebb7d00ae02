//! The owner-reference garbage collector of the embedded API server (a real cluster runs its own in
//! kube-controller-manager, so standalone controllers leave this off).
//!
//! It has to see every kind, including CRDs applied at runtime, so it works untyped
//! (`Api<DynamicObject>` over discovery) and level-triggered: a **sweep** lists every object of every
//! listable kind, builds the owner graph from `ownerReferences` (by uid) and acts on what it sees:
//!
//! - an owner being deleted with the `orphan` finalizer: its dependents lose their reference to it,
//!   then the finalizer is removed;
//! - an owner being deleted with the `foregroundDeletion` finalizer: its dependents are deleted
//!   (foreground too, so whole trees go bottom-up); once none that block it (`blockOwnerDeletion`)
//!   remain, the finalizer is removed;
//! - an object none of whose owners exist any more is deleted in the background; one with some
//!   owners gone keeps the rest and drops the dangling references.
//!
//! An owner is missing only if a live read by name (in the dependent's namespace) says so or returns
//! another uid — never because a list happened to miss it. Every write carries a precondition (the
//! dependent's uid, or a JSON-patch test of the exact value being replaced), so a sweep working from
//! a stale picture fails harmlessly instead of clobbering. A failed write is retried by the next
//! sweep.
//!
//! Sweeps run every `interval`, and as soon as a watch on any kind reports a deletion or an object
//! entering deletion (watches are started for every kind a sweep discovers). Bursts coalesce into
//! one sweep.

use capstan_runtime::controller::ErrorChain;
use capstan_runtime::metrics::ReconcileResult;
use capstan_runtime::{RuntimeError, Task, TaskEnv};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Name of the garbage collector (metrics, logs).
pub const GC_CONTROLLER: &str = "garbage-collector";
/// Finalizer asking for dependents to be orphaned.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// Finalizer asking for dependents to be deleted first.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// How often a full sweep runs unless configured otherwise.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Why a sweep (or one of its steps) failed.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("discovering the served kinds")]
    Discovery(#[source] kube::Error),
    #[error("listing {kind}")]
    List { kind: String, source: kube::Error },
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
    #[error("{failed} of the sweep's steps failed")]
    Incomplete { failed: usize },
}

/// A listable, deletable kind.
#[derive(Clone, Debug)]
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

/// Every served kind the collector manages, by (group, plural), and by (group, kind) to resolve
/// owner references.
#[derive(Debug, Default)]
struct Kinds {
    by_resource: BTreeMap<(String, String), Kind>,
    by_kind: HashMap<(String, String), Kind>,
}

/// Kinds never swept: Events are not owners and churn constantly (and both Event groups are one
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
            let kind = Kind {
                scope: caps.scope.clone(),
                resource: resource.clone(),
            };
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

/// One object as the sweep saw it: its metadata only (see [`lean`]).
#[derive(Clone, Debug)]
struct Node {
    kind: Arc<Kind>,
    object: DynamicObject,
}

/// Objects read per list request of a sweep: memory follows the page, not the collection.
const LIST_PAGE: u32 = 500;

/// Whether a sweep has anything to do with `object` itself: it has owners, or it is an owner being
/// deleted with `orphan` or `foregroundDeletion`. Other objects matter only as owners, and those are
/// read by name when a dependent names them (once per sweep).
fn relevant(object: &DynamicObject) -> bool {
    !object.owner_references().is_empty()
        || (object.metadata.deletion_timestamp.is_some()
            && object
                .finalizers()
                .iter()
                .any(|f| f == ORPHAN_FINALIZER || f == FOREGROUND_FINALIZER))
}

/// `object` reduced to what the collector reads: identity, owners, finalizers, deletion.
fn lean(object: DynamicObject) -> DynamicObject {
    let metadata = object.metadata;
    DynamicObject {
        types: object.types,
        metadata: kube::api::ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            owner_references: metadata.owner_references,
            finalizers: metadata.finalizers,
            deletion_timestamp: metadata.deletion_timestamp,
            ..kube::api::ObjectMeta::default()
        },
        data: serde_json::Value::Null,
    }
}

impl Node {
    fn uid(&self) -> &str {
        self.object.metadata.uid.as_deref().unwrap_or_default()
    }

    fn name(&self) -> String {
        self.object.name_any()
    }

    fn namespace(&self) -> Option<&str> {
        self.object.metadata.namespace.as_deref()
    }

    fn label(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{ns}/{}", self.name()),
            None => self.name(),
        }
    }

    fn is_deleting(&self) -> bool {
        self.object.metadata.deletion_timestamp.is_some()
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.object.finalizers().iter().any(|f| f == finalizer)
    }

    fn owners(&self) -> &[OwnerReference] {
        self.object.owner_references()
    }

    fn api(&self, client: &Client) -> Api<DynamicObject> {
        self.kind.api(client, self.namespace())
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
}

fn is_status(err: &kube::Error, check: fn(&kube::core::Status) -> bool) -> bool {
    matches!(err, kube::Error::Api(status) if check(status))
}

/// Failures a sweep can ignore: the object changed or went away since it was listed; the next
/// sweep sees the new state.
fn is_stale(err: &kube::Error) -> bool {
    is_status(err, kube::core::Status::is_not_found)
        || is_status(err, kube::core::Status::is_conflict)
        || is_status(err, kube::core::Status::is_invalid)
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

/// An owner reference resolved: uid, namespace (none for cluster-scoped), name.
type OwnerKey = (String, Option<String>, String);

struct Sweep<'a> {
    client: &'a Client,
    kinds: &'a Kinds,
    nodes: HashMap<String, Node>,
    /// Owners read by name during this sweep, by (uid, namespace, name): each is read once.
    read_owners: std::sync::Mutex<HashMap<OwnerKey, OwnerState>>,
    failed: usize,
}

impl Sweep<'_> {
    fn fail(&mut self, err: &GcError) {
        tracing::warn!(controller = GC_CONTROLLER, error = %ErrorChain(err), "sweep step failed");
        self.failed += 1;
    }

    /// The state of the owner `reference` of `dependent`.
    async fn owner_state(
        &self,
        dependent: &Node,
        reference: &OwnerReference,
    ) -> Result<OwnerState, GcError> {
        let group = capstan_model::meta::group_of(&reference.api_version).to_owned();
        let Some(kind) = self.kinds.by_kind.get(&(group, reference.kind.clone())) else {
            // A kind this API does not serve (or cannot list): leave the reference alone.
            return Ok(OwnerState::Present);
        };
        let namespace = match kind.scope {
            Scope::Cluster => None,
            // A namespaced owner of a cluster-scoped object can never resolve.
            Scope::Namespaced => match dependent.namespace() {
                Some(ns) => Some(ns),
                None => return Ok(OwnerState::Absent),
            },
        };
        let seen = self.nodes.get(&reference.uid).filter(|n| {
            n.kind.resource.kind == reference.kind
                && n.namespace() == namespace
                && n.name() == reference.name
        });
        let cache_key = (
            reference.uid.clone(),
            namespace.map(str::to_owned),
            reference.name.clone(),
        );
        if seen.is_none()
            && let Some(state) = self
                .read_owners
                .lock()
                .ok()
                .and_then(|read| read.get(&cache_key).copied())
        {
            return Ok(state);
        }
        let owner = match seen {
            Some(node) => node.object.clone(),
            // Not kept by this sweep: confirm with a live read before believing it gone.
            None => match kind
                .api(self.client, namespace)
                .get_opt(&reference.name)
                .await
                .map_err(|source| GcError::ReadOwner {
                    kind: reference.kind.clone(),
                    name: reference.name.clone(),
                    source,
                })? {
                Some(owner) if owner.metadata.uid.as_deref() == Some(reference.uid.as_str()) => {
                    owner
                }
                _ => {
                    if let Ok(mut read) = self.read_owners.lock() {
                        read.insert(cache_key, OwnerState::Absent);
                    }
                    return Ok(OwnerState::Absent);
                }
            },
        };
        let deleting = owner.metadata.deletion_timestamp.is_some();
        let finalizers = owner.finalizers();
        let state = if deleting && finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            OwnerState::WaitingForDependents
        } else if deleting && finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            OwnerState::Orphaning
        } else {
            OwnerState::Present
        };
        if seen.is_none()
            && let Ok(mut read) = self.read_owners.lock()
        {
            read.insert(cache_key, state);
        }
        Ok(state)
    }

    /// Replaces `node`'s ownerReferences by `keep`, if they are still what the sweep saw.
    async fn set_owners(&self, node: &Node, keep: Vec<OwnerReference>) -> Result<(), GcError> {
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/ownerReferences", "value": node.owners()},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": keep},
        ]))
        .map_err(|e| node.write_error("building the owner patch of")(kube::Error::SerdeError(e)))?;
        match node
            .api(self.client)
            .patch(
                &node.name(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Err(e) if !is_stale(&e) => Err(node.write_error("updating the owners of")(e)),
            _ => Ok(()),
        }
    }

    /// Deletes `node` (only the object the sweep saw: the uid is a precondition).
    async fn delete(&self, node: &Node, policy: PropagationPolicy) -> Result<(), GcError> {
        let params = DeleteParams {
            propagation_policy: Some(policy),
            preconditions: Some(Preconditions {
                uid: Some(node.uid().to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match node.api(self.client).delete(&node.name(), &params).await {
            Err(e) if !is_stale(&e) => Err(node.write_error("deleting")(e)),
            _ => Ok(()),
        }
    }

    /// Removes `finalizer` from `node`, if it is still where the sweep saw it.
    async fn remove_finalizer(&self, node: &Node, finalizer: &str) -> Result<(), GcError> {
        let Some(index) = node.object.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{index}");
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": path, "value": finalizer},
            {"op": "remove", "path": path},
        ]))
        .map_err(|e| {
            node.write_error("building the finalizer patch of")(kube::Error::SerdeError(e))
        })?;
        match node
            .api(self.client)
            .patch(
                &node.name(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Err(e) if !is_stale(&e) => Err(node.write_error("removing a finalizer of")(e)),
            _ => Ok(()),
        }
    }

    /// The dependents of `owner` in this sweep, with the reference that ties them.
    fn dependents_of(&self, owner: &Node) -> Vec<(Node, OwnerReference)> {
        self.nodes
            .values()
            .filter_map(|n| {
                n.owners()
                    .iter()
                    .find(|r| r.uid == owner.uid())
                    .map(|r| (n.clone(), r.clone()))
            })
            .collect()
    }

    /// Owners being deleted with `orphan` or `foregroundDeletion`.
    async fn finish_owners(&mut self) {
        let deleting: Vec<Node> = self
            .nodes
            .values()
            .filter(|n| n.is_deleting())
            .filter(|n| n.has_finalizer(ORPHAN_FINALIZER) || n.has_finalizer(FOREGROUND_FINALIZER))
            .cloned()
            .collect();
        for owner in deleting {
            let dependents = self.dependents_of(&owner);
            if owner.has_finalizer(ORPHAN_FINALIZER) {
                let mut orphaned = true;
                for (dependent, _) in &dependents {
                    let keep = dependent
                        .owners()
                        .iter()
                        .filter(|r| r.uid != owner.uid())
                        .cloned()
                        .collect();
                    if let Err(err) = self.set_owners(dependent, keep).await {
                        self.fail(&err);
                        orphaned = false;
                    }
                }
                // Orphaning must be complete before the owner may go.
                if orphaned && let Err(err) = self.remove_finalizer(&owner, ORPHAN_FINALIZER).await
                {
                    self.fail(&err);
                }
            } else {
                let mut blocked = false;
                for (dependent, reference) in &dependents {
                    let blocks = reference.block_owner_deletion == Some(true);
                    // A dependent another owner still holds survives: it only lets go of this one.
                    let mut held_elsewhere = false;
                    let mut unsure = false;
                    for other in dependent.owners().iter().filter(|r| r.uid != owner.uid()) {
                        match self.owner_state(dependent, other).await {
                            Ok(OwnerState::Present) => held_elsewhere = true,
                            Ok(_) => {}
                            Err(err) => {
                                self.fail(&err);
                                unsure = true;
                            }
                        }
                    }
                    if unsure {
                        blocked |= blocks;
                        continue;
                    }
                    if held_elsewhere {
                        let keep = dependent
                            .owners()
                            .iter()
                            .filter(|r| r.uid != owner.uid())
                            .cloned()
                            .collect();
                        if let Err(err) = self.set_owners(dependent, keep).await {
                            self.fail(&err);
                            blocked |= blocks;
                        }
                        continue;
                    }
                    blocked |= blocks;
                    if !dependent.is_deleting()
                        && let Err(err) =
                            self.delete(dependent, PropagationPolicy::Foreground).await
                    {
                        self.fail(&err);
                    }
                }
                // Blocking dependents are gone only when a later sweep no longer sees them.
                if !blocked
                    && let Err(err) = self.remove_finalizer(&owner, FOREGROUND_FINALIZER).await
                {
                    self.fail(&err);
                }
            }
        }
    }

    /// Objects with owners that are gone.
    async fn collect_dependents(&mut self) {
        let dependents: Vec<Node> = self
            .nodes
            .values()
            .filter(|n| !n.owners().is_empty() && !n.is_deleting())
            .cloned()
            .collect();
        for dependent in dependents {
            let mut states = Vec::with_capacity(dependent.owners().len());
            let mut unknown = false;
            for reference in dependent.owners() {
                match self.owner_state(&dependent, reference).await {
                    Ok(state) => states.push((reference.clone(), state)),
                    Err(err) => {
                        self.fail(&err);
                        unknown = true;
                    }
                }
            }
            if unknown {
                continue;
            }
            // Owners in orphaning or foreground deletion are handled with their owner.
            let solid = states.iter().any(|(_, s)| *s == OwnerState::Present);
            let absent = states
                .iter()
                .filter(|(_, s)| *s == OwnerState::Absent)
                .count();
            let waiting = states
                .iter()
                .any(|(_, s)| *s == OwnerState::WaitingForDependents);
            let result = if absent == 0 {
                Ok(())
            } else if solid || states.iter().any(|(_, s)| *s == OwnerState::Orphaning) {
                let keep = states
                    .into_iter()
                    .filter(|(_, s)| *s != OwnerState::Absent)
                    .map(|(r, _)| r)
                    .collect();
                self.set_owners(&dependent, keep).await
            } else if waiting {
                Ok(())
            } else {
                tracing::info!(
                    controller = GC_CONTROLLER,
                    kind = %dependent.kind.resource.kind,
                    object = %dependent.label(),
                    "deleting an object whose owners are gone"
                );
                self.delete(&dependent, PropagationPolicy::Background).await
            };
            if let Err(err) = result {
                self.fail(&err);
            }
        }
    }
}

/// One full pass. Returns the kinds it saw (to watch) or why it could not look.
///
/// Lists are read a page at a time and only objects the sweep acts on are kept, as metadata: an
/// idle server's memory does not swing with the size of its collections.
async fn sweep(client: &Client) -> Result<(Kinds, usize), GcError> {
    let kinds = discover(client).await?;
    let mut nodes = HashMap::new();
    let mut failed = 0;
    for kind in kinds.by_resource.values() {
        let shared = Arc::new(kind.clone());
        let api = kind.api(client, None);
        let mut params = ListParams::default().limit(LIST_PAGE);
        loop {
            match api.list(&params).await {
                Ok(list) => {
                    for object in list.items {
                        if !relevant(&object) {
                            continue;
                        }
                        if let Some(uid) = object.metadata.uid.clone() {
                            nodes.insert(
                                uid,
                                Node {
                                    kind: shared.clone(),
                                    object: lean(object),
                                },
                            );
                        }
                    }
                    match list.metadata.continue_.filter(|token| !token.is_empty()) {
                        Some(token) => params = params.continue_token(&token),
                        None => break,
                    }
                }
                Err(source) => {
                    let err = GcError::List {
                        kind: kind.resource.kind.clone(),
                        source,
                    };
                    tracing::warn!(controller = GC_CONTROLLER, error = %ErrorChain(&err), "sweep step failed");
                    failed += 1;
                    break;
                }
            }
        }
    }
    let mut sweep = Sweep {
        client,
        kinds: &kinds,
        nodes,
        read_owners: std::sync::Mutex::new(HashMap::new()),
        failed,
    };
    sweep.finish_owners().await;
    sweep.collect_dependents().await;
    let failed = sweep.failed;
    Ok((kinds, failed))
}

/// Whether a watch event should trigger a sweep: something went, or started going.
fn wakes(event: &watcher::Event<DynamicObject>) -> bool {
    match event {
        watcher::Event::Delete(_) => true,
        watcher::Event::Apply(object) => object.metadata.deletion_timestamp.is_some(),
        _ => false,
    }
}

/// The garbage collector as a runtime [`Task`].
#[derive(Clone, Debug)]
pub struct GarbageCollector {
    interval: Duration,
}

impl GarbageCollector {
    /// A collector that sweeps every `interval` (and on deletions).
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
    let wake = Arc::new(Notify::new());
    let mut watches: BTreeMap<(String, String), JoinHandle<()>> = BTreeMap::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(controller = GC_CONTROLLER, every = ?interval, "garbage collector started");
    loop {
        tokio::select! {
            () = env.shutdown.cancelled() => break,
            _ = tick.tick() => {}
            () = wake.notified() => {}
        }
        let _running = env.metrics.in_flight(GC_CONTROLLER);
        let started = Instant::now();
        let result = match sweep(&env.client).await {
            Ok((kinds, failed)) => {
                // Watch what exists now; stop watching what is no longer served.
                watches.retain(|key, handle| {
                    let keep = kinds.by_resource.contains_key(key);
                    if !keep {
                        handle.abort();
                    }
                    keep
                });
                for (key, kind) in &kinds.by_resource {
                    if !watches.contains_key(key) {
                        let api: Api<DynamicObject> =
                            Api::all_with(env.client.clone(), &kind.resource);
                        let wake = wake.clone();
                        let stop = env.shutdown.clone();
                        let handle = tokio::spawn(async move {
                            // The backoff matters beyond politeness: an in-process client whose
                            // store is gone fails without ever yielding, and a watcher without a
                            // backoff would then spin on one worker thread for ever.
                            watcher::watcher(api, watcher::Config::default())
                                .default_backoff()
                                .take_until(stop.cancelled_owned())
                                .for_each(|event| {
                                    if event.as_ref().is_ok_and(wakes) {
                                        wake.notify_one();
                                    }
                                    futures::future::ready(())
                                })
                                .await;
                        });
                        watches.insert(key.clone(), handle);
                    }
                }
                if failed == 0 {
                    Ok(())
                } else {
                    Err(GcError::Incomplete { failed })
                }
            }
            Err(err) => Err(err),
        };
        let outcome = match &result {
            Ok(()) => ReconcileResult::Success,
            Err(err) => {
                tracing::warn!(controller = GC_CONTROLLER, error = %ErrorChain(err), "sweep");
                ReconcileResult::Error
            }
        };
        env.metrics
            .record(GC_CONTROLLER, outcome, started.elapsed());
    }
    // Wait for the watches to end so none outlives the API it watches.
    for handle in watches.into_values() {
        handle.abort();
        let _ = handle.await;
    }
    tracing::info!(controller = GC_CONTROLLER, "garbage collector stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_deletions_wake_the_collector() {
        let mut object = DynamicObject::new(
            "x",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        assert!(!wakes(&watcher::Event::Apply(object.clone())));
        assert!(wakes(&watcher::Event::Delete(object.clone())));
        object.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(wakes(&watcher::Event::Apply(object)));
        assert!(!wakes(&watcher::Event::InitDone));
    }

    #[test]
    fn events_are_not_swept() {
        let event = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
        assert!(skipped(&event));
        let config_map = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        assert!(!skipped(&config_map));
    }
}
