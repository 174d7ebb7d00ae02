//! The controller harness: a [`Reconciler`] says what it reconciles and how; the harness runs it with
//! `kube_runtime::Controller` and adds what every capstan controller shares.
//!
//! Around each reconcile the harness:
//! - skips the object when it, or the Cluster it belongs to, is paused (`cluster.x-k8s.io/paused`
//!   annotation, or `spec.paused` on the Cluster; the Cluster's pause comes from the process's
//!   shared [`ClusterPauses`]), or its kind's own pause says so ([`Reconciler::paused`]), and
//!   re-triggers it when that Cluster changes;
//! - adds the controller's finalizer before the first reconcile and, once the object is being
//!   deleted, calls [`Reconciler::cleanup`] on every pass until it answers [`Cleanup::Done`]; only
//!   then is the finalizer removed (cleanup that waits for other objects to go takes many passes);
//! - hands the reconciler a [`Context`] with the client and an event recorder;
//! - records metrics (reconciles by result, duration, errors, in flight);
//! - requeues failures with a per-object exponential backoff (1 s doubling to 5 min), forgotten on
//!   the next success.
//!
//! Reconcilers stay level-triggered: they look at the object as it is, make one pass, write status
//! once, and return an [`Action`]. A failed pass is retried by the requeue, never by a loop inside.

use crate::events::EventRecorder;
use crate::index::KeyIndex;
use crate::metrics::{ControllerMetrics, ReconcileResult};
use crate::pauses::{
    ClusterPauses, Pause, cluster_is_paused, cluster_resource, has_paused_annotation,
};
use crate::secrets::SecretCache;
use crate::stores::Change;
use crate::tables::{ObjectCache, ObjectCaches};
use crate::watches::{Cache, WatchError};
use crate::{CancellationToken, RuntimeError, Task, TaskEnv};
use capstan_model::meta::LABEL_CLUSTER_NAME;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::{self, Action, Config, Controller};
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// First retry delay after a failed reconcile.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry delay after repeated failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What a controller reconciles and how.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind this controller reconciles.
    type Object: Resource<DynamicType = (), Scope: ApiScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// Why a reconcile failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The controller's name: the metrics label, the event reporter and the log target.
    fn name(&self) -> &'static str;

    /// How many objects are reconciled at once (one object is never reconciled twice at once).
    /// Ten, as Cluster API's controllers default to (`--*-concurrency`): a reconcile spends most
    /// of its time waiting for the API, so fewer leave the processor idle while a queue of a
    /// thousand clusters' objects waits (at two, the control-plane controller alone bounded how
    /// fast 1,000 clusters came up).
    fn concurrency(&self) -> u16 {
        10
    }

    /// The finalizer this controller owns, when it has cleanup to do before an object goes away.
    /// With one, [`Reconciler::cleanup`] runs once the object is being deleted.
    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    /// Whether `object` is paused by a rule of its own kind besides Cluster API's
    /// (`cluster.x-k8s.io/paused`, which the harness always honours): a paused object is left
    /// alone entirely, its finalizer included (a BareMetalHost's `baremetalhost.metal3.io/paused`,
    /// which `clusterctl move` sets before it copies hosts away).
    fn paused(&self, _object: &Self::Object) -> bool {
        false
    }

    /// The Cluster an object belongs to (same namespace), whose pause also pauses the object. The
    /// default reads the `cluster.x-k8s.io/cluster-name` label.
    fn cluster_name(&self, object: &Self::Object) -> Option<String> {
        object.labels().get(LABEL_CLUSTER_NAME).cloned()
    }

    /// The Secrets (in the object's namespace) a reconcile of `object` reads. The harness
    /// re-triggers the object when one of them changes, after the process's Secret cache
    /// ([`Context::secrets`]) has seen that change, so the next reconcile reads it.
    fn secret_names(&self, _object: &Self::Object) -> Vec<String> {
        Vec::new()
    }

    /// Whether [`Reconciler::secret_names`] names any: the harness then watches Secrets.
    fn follows_secrets(&self) -> bool {
        false
    }

    /// Whether objects follow their Cluster's pause. When true, the harness watches Clusters and
    /// re-triggers their objects when a Cluster changes (so unpausing resumes them).
    fn follows_cluster_pause(&self) -> bool {
        false
    }

    /// Namespaced kinds (read untyped) whose objects name this controller's objects as owners and
    /// that a reconcile reads from the process's object caches ([`Context::objects`]): the harness
    /// watches each, records every change in its cache and only then wakes the owners, so the
    /// reconcile a change wakes reads that change from memory.
    fn cached_kinds(&self) -> Vec<ApiResource> {
        Vec::new()
    }

    /// Adds triggers to the controller: `owns`, `watches` with a mapping, periodic requeues.
    fn configure(
        &self,
        controller: Controller<Self::Object>,
        _client: &Client,
    ) -> Controller<Self::Object> {
        controller
    }

    /// [`Reconciler::configure`] for controllers whose triggers feed the process's object caches
    /// (see [`crate::watches::watches_cached`]); the default ignores the caches.
    fn configure_with_caches(
        &self,
        controller: Controller<Self::Object>,
        client: &Client,
        _objects: &ObjectCaches,
    ) -> Controller<Self::Object> {
        self.configure(controller, client)
    }

    /// Brings the world in line with `object` (which is not being deleted when the controller has a
    /// finalizer).
    fn reconcile(
        &self,
        object: Arc<Self::Object>,
        context: Arc<Context>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Releases what `object` holds before its finalizer is removed: one pass of it, called again
    /// (on changes and on the returned requeue) until it answers [`Cleanup::Done`]. Only called for
    /// controllers with a finalizer.
    fn cleanup(
        &self,
        _object: Arc<Self::Object>,
        _context: Arc<Context>,
    ) -> impl Future<Output = Result<Cleanup, Self::Error>> + Send {
        async { Ok(Cleanup::Done) }
    }
}

/// What one pass of [`Reconciler::cleanup`] concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Everything is released: the harness removes the finalizer and the object goes.
    Done,
    /// Still waiting (for children to go, a drain, a provider): the finalizer stays and the object
    /// is looked at again on a change or after the action's requeue.
    Pending(Action),
}

/// How to address one object of a kind, by the kind's scope.
pub trait ApiScope {
    /// An `Api` that can read and write objects of `K` in `namespace` (ignored for cluster-scoped
    /// kinds).
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: Client,
        namespace: Option<&str>,
    ) -> Api<K>
    where
        Self: Sized;
}

impl ApiScope for kube::core::NamespaceResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: Client,
        namespace: Option<&str>,
    ) -> Api<K> {
        match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::default_namespaced(client),
        }
    }
}

impl ApiScope for kube::core::ClusterResourceScope {
    fn api<K: Resource<DynamicType = (), Scope = Self>>(
        client: Client,
        _namespace: Option<&str>,
    ) -> Api<K> {
        Api::all(client)
    }
}

/// What a reconcile gets besides the object.
pub struct Context {
    client: Client,
    recorder: EventRecorder,
    controller: &'static str,
    shutdown: CancellationToken,
    secrets: SecretCache,
    objects: ObjectCaches,
    pauses: ClusterPauses,
}

impl Context {
    /// A context for `controller`, reporting events as `identity`.
    pub fn new(client: Client, controller: &'static str, identity: &str) -> Self {
        let recorder = EventRecorder::new(client.clone(), controller, identity);
        let shutdown = CancellationToken::new();
        Self {
            secrets: SecretCache::new(client.clone(), shutdown.clone()),
            objects: ObjectCaches::new(client.clone(), shutdown.clone()),
            pauses: ClusterPauses::new(client.clone(), shutdown.clone()),
            client,
            recorder,
            controller,
            shutdown,
        }
    }

    /// The same context, whose caches stop when `shutdown` is cancelled.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.secrets = SecretCache::new(self.client.clone(), shutdown.clone());
        self.objects = ObjectCaches::new(self.client.clone(), shutdown.clone());
        self.pauses = ClusterPauses::new(self.client.clone(), shutdown.clone());
        self.shutdown = shutdown;
        self
    }

    /// The same context, reading Secrets through `secrets` (the cache of the whole process).
    #[must_use]
    pub fn with_secrets(mut self, secrets: SecretCache) -> Self {
        self.secrets = secrets;
        self
    }

    /// The same context, reading objects through `objects` and Clusters through `pauses` (the
    /// caches of the whole process).
    #[must_use]
    pub fn with_objects(mut self, objects: ObjectCaches, pauses: ClusterPauses) -> Self {
        self.objects = objects;
        self.pauses = pauses;
        self
    }

    /// Objects of any kind from memory, read live when a cache cannot answer (see
    /// [`ObjectCache`]).
    pub fn objects(&self) -> &ObjectCaches {
        &self.objects
    }

    /// Clusters (untyped) from memory, read live when the cache cannot answer; a controller that
    /// follows its Cluster's pause records each Cluster change here before it wakes the Cluster's
    /// objects.
    pub fn clusters(&self) -> &ObjectCache<DynamicObject> {
        self.pauses.clusters()
    }

    /// Secrets from memory, read live when the cache cannot answer (see [`SecretCache`]).
    pub fn secrets(&self) -> &SecretCache {
        &self.secrets
    }

    /// Every object of `K`, from the kind's store for the whole process (see [`Cache`]); waits for
    /// its first list.
    pub async fn cache<K>(&self) -> Result<Cache<K>, WatchError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let cache = Cache::of(&self.objects.store::<K>());
        cache.synced().await?;
        Ok(cache)
    }

    /// The API client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The controller's name.
    pub fn controller(&self) -> &'static str {
        self.controller
    }

    /// Publishes an Event about `object` (`events.k8s.io/v1`; `kubectl describe` shows it). Events
    /// are best effort: a failure is logged and does not fail the reconcile.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        if let Err(err) = self
            .recorder
            .publish(
                &object.object_ref(&()),
                type_,
                reason,
                action,
                Some(note.into()),
            )
            .await
        {
            tracing::warn!(
                controller = self.controller,
                object = %object.name_any(),
                reason,
                error = %err,
                "publishing an event failed"
            );
        }
    }
}

/// Why one reconcile failed, as the harness sees it.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError<E: std::error::Error + 'static> {
    #[error("reconcile")]
    Reconcile(#[source] E),
    #[error("cleanup")]
    Cleanup(#[source] E),
    #[error("adding finalizer {finalizer}")]
    AddFinalizer {
        finalizer: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("removing finalizer {finalizer}")]
    RemoveFinalizer {
        finalizer: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("reading the owning Cluster {name}")]
    Cluster {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Per-object retry delays: doubled on every failure, forgotten on success.
#[derive(Debug, Default)]
pub struct Backoff {
    delays: Mutex<HashMap<(Option<String>, String), Duration>>,
}

impl Backoff {
    fn delays(&self) -> MutexGuard<'_, HashMap<(Option<String>, String), Duration>> {
        // A panic while holding the lock leaves plain durations behind: still usable.
        self.delays.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The delay before retrying `(namespace, name)` after one more failure.
    pub fn next(&self, namespace: Option<&str>, name: &str) -> Duration {
        let mut delays = self.delays();
        let key = (namespace.map(str::to_owned), name.to_owned());
        let delay = delays
            .get(&key)
            .map_or(BACKOFF_INITIAL, |d| (*d * 2).min(BACKOFF_MAX));
        delays.insert(key, delay);
        delay
    }

    /// Forgets the failures of `(namespace, name)`.
    pub fn reset(&self, namespace: Option<&str>, name: &str) {
        self.delays()
            .remove(&(namespace.map(str::to_owned), name.to_owned()));
    }

    /// How many objects have a pending backoff.
    pub fn len(&self) -> usize {
        self.delays().len()
    }

    /// Whether no object has a pending backoff.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything one controller's reconciles share.
struct Shared<R: Reconciler> {
    reconciler: Arc<R>,
    context: Arc<Context>,
    metrics: ControllerMetrics,
    backoff: Backoff,
    pauses: ClusterPauses,
}

async fn is_paused<R: Reconciler>(
    shared: &Shared<R>,
    object: &R::Object,
) -> Result<bool, ReconcileError<R::Error>> {
    if has_paused_annotation(object.meta()) || shared.reconciler.paused(object) {
        return Ok(true);
    }
    // Only controllers that watch Clusters honour their pause: the others would not notice the
    // Cluster being unpaused.
    if !shared.reconciler.follows_cluster_pause() {
        return Ok(false);
    }
    let (Some(cluster), Some(namespace)) = (
        shared.reconciler.cluster_name(object),
        object.meta().namespace.as_deref(),
    ) else {
        return Ok(false);
    };
    // "Running" from the shared cache is final; a pause is confirmed, and an unknown Cluster read.
    if shared.pauses.lookup(namespace, &cluster) == Pause::Running {
        return Ok(false);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        shared.context.client.clone(),
        namespace,
        &cluster_resource(),
    );
    let found = api
        .get_opt(&cluster)
        .await
        .map_err(|source| ReconcileError::Cluster {
            name: cluster.clone(),
            source,
        })?;
    Ok(found.is_some_and(|c| cluster_is_paused(&c)))
}

async fn reconcile_once<R: Reconciler>(
    object: Arc<R::Object>,
    shared: &Shared<R>,
) -> Result<Option<Action>, ReconcileError<R::Error>> {
    if is_paused(shared, &object).await? {
        return Ok(None);
    }
    let reconciler = &shared.reconciler;
    let context = shared.context.clone();
    let Some(finalizer_name) = reconciler.finalizer() else {
        return reconciler
            .reconcile(object, context)
            .await
            .map(Some)
            .map_err(ReconcileError::Reconcile);
    };
    let api = <<R::Object as Resource>::Scope as ApiScope>::api::<R::Object>(
        context.client.clone(),
        object.meta().namespace.as_deref(),
    );
    let has_finalizer = object.finalizers().iter().any(|f| f == finalizer_name);
    if object.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            // Ours is done; other finalizers hold the object.
            return Ok(Some(Action::await_change()));
        }
        return match reconciler
            .cleanup(object.clone(), context)
            .await
            .map_err(ReconcileError::Cleanup)?
        {
            Cleanup::Pending(action) => Ok(Some(action)),
            Cleanup::Done => {
                // Guarded by the finalizer list as read, not the resourceVersion: a status the
                // cleanup wrote does not fail the removal; a finalizer list that moved does.
                crate::finalizers::remove(&api, &*object, finalizer_name)
                    .await
                    .map_err(|source| ReconcileError::RemoveFinalizer {
                        finalizer: finalizer_name,
                        source: Box::new(source),
                    })?;
                Ok(Some(Action::await_change()))
            }
        };
    }
    if !has_finalizer {
        // The write triggers the next reconcile.
        crate::finalizers::add(&api, &*object, finalizer_name)
            .await
            .map_err(|source| ReconcileError::AddFinalizer {
                finalizer: finalizer_name,
                source: Box::new(source),
            })?;
        return Ok(Some(Action::await_change()));
    }
    reconciler
        .reconcile(object, context)
        .await
        .map(Some)
        .map_err(ReconcileError::Reconcile)
}

async fn reconcile<R: Reconciler>(
    object: Arc<R::Object>,
    shared: Arc<Shared<R>>,
) -> Result<Action, ReconcileError<R::Error>> {
    let name = shared.reconciler.name();
    let _running = shared.metrics.in_flight(name);
    let started = Instant::now();
    let namespace = object.meta().namespace.clone();
    let object_name = object.name_any();
    let outcome = reconcile_once(object, &shared).await;
    let result = match &outcome {
        Ok(Some(_)) => ReconcileResult::Success,
        Ok(None) => ReconcileResult::Paused,
        Err(_) => ReconcileResult::Error,
    };
    shared.metrics.record(name, result, started.elapsed());
    if result != ReconcileResult::Error {
        shared.backoff.reset(namespace.as_deref(), &object_name);
    }
    // A paused object waits for a change to itself or (through the Cluster watch) to its Cluster.
    outcome.map(|action| action.unwrap_or_else(Action::await_change))
}

fn error_policy<R: Reconciler>(
    object: Arc<R::Object>,
    error: &ReconcileError<R::Error>,
    shared: Arc<Shared<R>>,
) -> Action {
    let delay = shared
        .backoff
        .next(object.meta().namespace.as_deref(), &object.name_any());
    let controller = shared.reconciler.name();
    let name = object.name_any();
    let namespace = object.meta().namespace.as_deref().unwrap_or_default();
    if failure_level(error) == tracing::Level::DEBUG {
        tracing::debug!(controller, object = %name, namespace, retry_in = ?delay, "conflict: the object changed since it was read; retrying");
    } else {
        tracing::warn!(controller, object = %name, namespace, retry_in = ?delay, error = %ErrorChain(error), "reconcile failed");
    }
    Action::requeue(delay)
}

/// The level a failed reconcile is logged at: a conflict at debug, as the normal retry path of a
/// level-triggered controller (two writers of one object, one wins, the other's next pass reads
/// the winner's write), anything else at warn.
pub fn failure_level(error: &(dyn std::error::Error + 'static)) -> tracing::Level {
    if is_conflict(error) {
        tracing::Level::DEBUG
    } else {
        tracing::Level::WARN
    }
}

/// Whether a failure is an optimistic-concurrency conflict: the first API error in its chain is a
/// 409 for a stale `resourceVersion` (or a precondition), which the requeue retries with fresh
/// data. Not the other 409s, which a retry with fresh data does not resolve: `AlreadyExists`, and
/// a server-side apply taking fields another manager owns (`FieldManagerConflict` causes).
pub fn is_conflict(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(err) = next {
        // Reconcilers wrap kube's error as it is or boxed.
        let kube = err
            .downcast_ref::<kube::Error>()
            .or_else(|| err.downcast_ref::<Box<kube::Error>>().map(|b| &**b));
        if let Some(kube) = kube {
            return match kube {
                kube::Error::Api(status) => {
                    let field_managers = status
                        .details
                        .iter()
                        .flat_map(|d| &d.causes)
                        .any(|c| c.reason == "FieldManagerConflict");
                    status.code == 409 && !status.is_already_exists() && !field_managers
                }
                _ => false,
            };
        }
        next = err.source();
    }
    false
}

/// Formats an error with all its sources, `a: b: c`.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        write!(f, "{shown}")?;
        let mut source = self.0.source();
        while let Some(err) = source {
            // Some libraries (kube among them) put their source into their own message already.
            let text = err.to_string();
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
            }
            shown = text;
            source = err.source();
        }
        Ok(())
    }
}

/// A [`Task`] that runs `reconciler` under the harness.
pub fn controller_task<R: Reconciler>(reconciler: R) -> Box<dyn Task> {
    Box::new(ControllerTask {
        reconciler: Arc::new(reconciler),
    })
}

struct ControllerTask<R: Reconciler> {
    reconciler: Arc<R>,
}

impl<R: Reconciler> Task for ControllerTask<R> {
    fn name(&self) -> &'static str {
        self.reconciler.name()
    }

    fn run(self: Box<Self>, env: TaskEnv) -> BoxFuture<'static, Result<(), RuntimeError>> {
        Box::pin(run_controller(self.reconciler, env))
    }
}

async fn run_controller<R: Reconciler>(
    reconciler: Arc<R>,
    env: TaskEnv,
) -> Result<(), RuntimeError> {
    let name = reconciler.name();
    let shared = Arc::new(Shared {
        reconciler: reconciler.clone(),
        context: Arc::new(
            Context::new(env.client.clone(), name, &env.identity)
                .with_shutdown(env.shutdown.child_token())
                .with_secrets(env.secrets.clone())
                .with_objects(env.objects.clone(), env.pauses.clone()),
        ),
        metrics: env.metrics.clone(),
        backoff: Backoff::default(),
        pauses: env.pauses.clone(),
    });
    // The controller reads its objects from the kind's store for the whole process (shared with
    // any other controller or reader of the kind) and is triggered by its changes, each after the
    // store holds it and after the index of its objects by Cluster, which the Cluster trigger
    // reads, has filed it (a lookup instead of a scan of the store per Cluster event).
    let mapper = reconciler.clone();
    let by_cluster =
        KeyIndex::new(move |o: &R::Object| mapper.cluster_name(o).into_iter().collect());
    let mapper = reconciler.clone();
    let by_secret = KeyIndex::new(move |o: &R::Object| mapper.secret_names(o));
    let store = env.objects.store::<R::Object>();
    let (indexed, indexed_secrets) = (by_cluster.clone(), by_secret.clone());
    let follows_secrets = reconciler.follows_secrets();
    let changes = futures::stream::unfold(store.subscribe(), |mut changes| async move {
        changes.recv().await.map(|change| (change, changes))
    });
    let objects = changes.flat_map(move |change| {
        indexed.follow(&change);
        if follows_secrets {
            indexed_secrets.follow(&change);
        }
        futures::stream::iter(match change {
            Change::Applied(object) => vec![object],
            Change::Deleted(_) => Vec::new(),
            Change::Listed(objects) => objects,
        })
    });
    let mut controller = Controller::for_shared_stream(objects, store.reader())
        .with_config(Config::default().concurrency(reconciler.concurrency()));
    if reconciler.follows_cluster_pause() {
        let pauses = env.pauses.clone();
        let changed = watcher(
            Api::<DynamicObject>::all_with(env.client.clone(), &cluster_resource()),
            watcher::Config::default(),
        )
        .default_backoff()
        .inspect(move |event| {
            // Before the objects are queued: their reconciles see at least this version.
            if let Ok(event) = event {
                pauses.observe_event(event);
            }
        })
        .touched_objects();
        controller = controller.watches_stream_with(
            changed,
            move |cluster: DynamicObject| match (
                &cluster.metadata.namespace,
                &cluster.metadata.name,
            ) {
                (Some(namespace), Some(name)) => by_cluster.lookup(namespace, name),
                _ => Vec::new(),
            },
            cluster_resource(),
        );
    }
    for resource in reconciler.cached_kinds() {
        let cache = env.objects.dynamic(&resource);
        let changed = watcher(
            Api::<DynamicObject>::all_with(env.client.clone(), &resource),
            watcher::Config::default(),
        )
        .default_backoff()
        .inspect(move |event| {
            // Before the owners are queued: their reconciles read at least this version.
            if let Ok(event) = event {
                cache.observe_event(event);
            }
        })
        .touched_objects();
        controller = controller.watches_stream_with(
            changed,
            |object: DynamicObject| crate::watches::owners_of_kind::<R::Object, _>(&object),
            resource,
        );
    }
    if follows_secrets {
        let secrets = env.secrets.clone();
        let changed = watcher(
            Api::<Secret>::all(env.client.clone()),
            watcher::Config::default(),
        )
        .inspect(move |event| {
            // Before the readers are queued: their reconciles read at least this version.
            if let Ok(event) = event {
                secrets.observe_event(event);
            }
        })
        .touched_objects();
        controller = controller.watches_stream(changed, move |secret: Secret| {
            match (&secret.metadata.namespace, &secret.metadata.name) {
                (Some(namespace), Some(name)) => by_secret.lookup(namespace, name),
                _ => Vec::new(),
            }
        });
    }
    controller = reconciler.configure_with_caches(controller, &env.client, &env.objects);
    tracing::info!(controller = name, "controller started");
    controller
        .graceful_shutdown_on(env.shutdown.clone().cancelled_owned())
        .run(reconcile::<R>, error_policy::<R>, shared.clone())
        .for_each(|result| {
            match result {
                Ok(_) => {}
                // Already logged by the error policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(controller::Error::ObjectNotFound(object)) => {
                    // Gone while a retry was scheduled: its backoff is moot.
                    shared
                        .backoff
                        .reset(object.namespace.as_deref(), &object.name);
                }
                Err(err) => {
                    tracing::warn!(controller = name, error = %ErrorChain(&err), "controller stream");
                }
            }
            futures::future::ready(())
        })
        .await;
    tracing::info!(controller = name, "controller stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.to_owned(),
            message: format!("{reason} ({code})"),
            ..kube::core::Status::default()
        }))
    }

    /// A reconciler's own error around a kube error, as the controllers write theirs (some box
    /// it, some do not).
    #[derive(Debug, thiserror::Error)]
    enum Wrapping {
        #[error("patching status of Machine m")]
        Boxed(#[source] Box<kube::Error>),
        #[error("reading Cluster c")]
        Plain(#[source] kube::Error),
    }

    #[test]
    fn a_conflict_is_logged_at_debug_and_other_failures_at_warn() {
        let conflict =
            ReconcileError::Reconcile(Wrapping::Boxed(Box::new(api_error(409, "Conflict"))));
        assert!(is_conflict(&conflict));
        assert_eq!(failure_level(&conflict), tracing::Level::DEBUG);
        let plain = ReconcileError::Cleanup(Wrapping::Plain(api_error(409, "Conflict")));
        assert_eq!(failure_level(&plain), tracing::Level::DEBUG);
        let finalizer = ReconcileError::<Wrapping>::AddFinalizer {
            finalizer: "f",
            source: Box::new(api_error(409, "Conflict")),
        };
        assert_eq!(failure_level(&finalizer), tracing::Level::DEBUG);
        // 409s that are no stale read: the object to create exists; an apply would take another
        // manager's fields. Not the retry path.
        let exists = ReconcileError::Reconcile(Wrapping::Plain(api_error(409, "AlreadyExists")));
        assert!(!is_conflict(&exists));
        assert_eq!(failure_level(&exists), tracing::Level::WARN);
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "code": 409,
            "reason": "Conflict",
            "details": {"causes": [{"reason": "FieldManagerConflict", "field": ".spec.replicas"}]},
        }))
        .unwrap();
        let managers =
            ReconcileError::Reconcile(Wrapping::Plain(kube::Error::Api(Box::new(status))));
        assert_eq!(failure_level(&managers), tracing::Level::WARN);
        for code in [500, 404, 422] {
            let other = ReconcileError::Reconcile(Wrapping::Boxed(Box::new(api_error(
                code,
                "InternalError",
            ))));
            assert!(!is_conflict(&other), "{code}");
            assert_eq!(failure_level(&other), tracing::Level::WARN, "{code}");
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let backoff = Backoff::default();
        let delays: Vec<_> = (0..12).map(|_| backoff.next(Some("ns"), "a")).collect();
        assert_eq!(delays[0], Duration::from_secs(1));
        assert_eq!(delays[1], Duration::from_secs(2));
        assert_eq!(delays[8], Duration::from_secs(256));
        assert_eq!(delays[9], BACKOFF_MAX);
        assert_eq!(delays[11], BACKOFF_MAX);
        assert_eq!(backoff.next(Some("ns"), "b"), BACKOFF_INITIAL);
        backoff.reset(Some("ns"), "a");
        assert_eq!(backoff.next(Some("ns"), "a"), BACKOFF_INITIAL);
        assert_eq!(backoff.len(), 2);
    }

    #[test]
    fn error_chain_lists_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let err = Outer(std::io::Error::other("inner"));
        assert_eq!(ErrorChain(&err).to_string(), "outer: inner");

        #[derive(Debug, thiserror::Error)]
        #[error("wrapped: {0}")]
        struct Repeats(#[source] std::io::Error);
        let err = Repeats(std::io::Error::other("inner"));
        assert_eq!(ErrorChain(&err).to_string(), "wrapped: inner");
    }
}
