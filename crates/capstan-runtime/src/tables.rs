//! Objects read from memory, for every controller of a process from one watch per kind.
//!
//! Controllers read the same objects on most passes: a host's BMC credentials, a machine's
//! bootstrap config and infrastructure machine, the Cluster a config belongs to. Read from the API
//! each time, these reads were most of the requests of a cluster creation. A [`WatchTable`] keeps
//! what one watch of a kind delivers, per (namespace, name), projected to what its readers need (a
//! whole object without its managed fields, or only whether a Cluster is paused); an
//! [`ObjectCache`] is a table of whole objects that falls back to a live read (each held as the
//! object itself or, in the untyped tables of referenced kinds, as its JSON: see [`Held`]);
//! [`ObjectCaches`] holds one cache per kind for the whole process.
//!
//! What a table is fed: one watch of the kind, started on first use and stopped with the
//! controllers — for a typed kind, the changes of the kind's store for the whole process
//! ([`crate::stores`]), whose objects the table then holds rather than copies; objects readers
//! fetched live when the table could not answer; and `observe`, for an
//! object seen by another watch (a controller's trigger, before it queues the objects that read it,
//! so their next reconcile sees that version) or just written. A newer resourceVersion is never
//! replaced by an older one, whichever feed delivers first, and a deletion is kept as a tombstone so
//! a late older version cannot revive it. A relist replaces the table when it is complete, keeping
//! anything newer a trigger delivered meanwhile.
//!
//! What it answers ([`Entry`]): an object it holds, as last seen; nothing until the first list is
//! complete, so absence is never answered from memory — an object not held (never seen, or seen
//! deleted) is read live by [`ObjectCache`], and a just-created object is found. An object held in
//! memory can be older than the API's by as long as the watch lags: a reader that knows the version
//! it needs asks [`ObjectCache::get_at_least`], one that must not act on an older version reads
//! with [`ObjectCache::get_live`].

use crate::CancellationToken;
use crate::stores::{Change, SharedStore, StoredKind};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::NamespaceResourceScope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// The annotation `kubectl apply` writes: a copy of the whole object.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `object` without what no reader needs and what would double its size in memory: its managed
/// fields and the `last-applied-configuration` copy.
pub fn slim<K: Resource>(mut object: K) -> K {
    strip(&mut object);
    object
}

/// Drops `object`'s managed fields and `last-applied-configuration` copy in place (see [`slim`]).
pub fn strip<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// An object read untyped (from a cache of [`DynamicObject`]s), as the typed model `T`.
pub fn decode<T: DeserializeOwned>(object: &DynamicObject) -> Result<T, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

/// (namespace, or empty for a cluster-scoped object; name).
type Key = (String, String);

fn key_of<K: Resource>(object: &K) -> Option<Key> {
    Some((
        object.namespace().unwrap_or_default(),
        object.meta().name.clone()?,
    ))
}

fn version_of<K: Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

/// What a table knows of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<V> {
    /// The object as last seen (projected), and its resourceVersion when numeric.
    Held { value: V, version: Option<u64> },
    /// Not answered from memory: the first list is not complete, the object was never seen, or it
    /// was seen deleted.
    Unknown,
}

/// One object as last seen: its resourceVersion (when numeric), its projection (`None` once deleted).
#[derive(Clone, Debug)]
struct Seen<V> {
    version: Option<u64>,
    value: Option<V>,
}

impl<V> Seen<V> {
    /// Whether `self` may replace `stored`: not when both versions are known and it is older, and
    /// at the same version only a deletion (a trigger may hand over a deleted object's last state
    /// after the table's own watch recorded the deletion) or, when `shared`, the shared store's
    /// own object in place of a copy the table was handed (an object this process just wrote),
    /// so the table holds no copy of its own.
    fn supersedes(&self, stored: &Seen<V>, shared: bool) -> bool {
        match (self.version, stored.version) {
            (Some(new), Some(old)) => {
                new > old
                    || (new == old && (self.value.is_none() || (shared && stored.value.is_some())))
            }
            _ => true,
        }
    }
}

/// The objects of one kind as the watch, live reads and triggers delivered them.
struct Table<V> {
    entries: HashMap<Key, Seen<V>>,
    /// The objects of a (re)list in progress, swapped in when it is complete.
    listing: Option<HashMap<Key, Seen<V>>>,
    /// Whether a first list has been completed.
    synced: bool,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            listing: None,
            synced: false,
        }
    }
}

impl<V: Clone> Table<V> {
    fn lookup(&self, namespace: &str, name: &str) -> Entry<V> {
        if !self.synced {
            return Entry::Unknown;
        }
        match self.entries.get(&(namespace.to_owned(), name.to_owned())) {
            Some(Seen {
                version,
                value: Some(value),
            }) => Entry::Held {
                value: value.clone(),
                version: *version,
            },
            _ => Entry::Unknown,
        }
    }

    /// Records an object (or its deletion) in the known set and in a list in progress, unless a
    /// newer version is there (see [`Seen::supersedes`] for `shared`).
    fn apply(&mut self, key: Key, new: Seen<V>, shared: bool) {
        for map in std::iter::once(&mut self.entries).chain(self.listing.as_mut()) {
            match map.get_mut(&key) {
                Some(stored) if !new.supersedes(stored, shared) => {}
                Some(stored) => *stored = new.clone(),
                None => {
                    map.insert(key.clone(), new.clone());
                }
            }
        }
    }

    fn record<K: Resource>(&mut self, object: &K, deleted: bool, project: impl Fn(&K) -> V) {
        let Some(key) = key_of(object) else {
            return;
        };
        self.apply(
            key,
            Seen {
                version: version_of(object),
                value: (!deleted).then(|| project(object)),
            },
            false,
        );
    }

    /// Records one change of the kind's shared store, holding `share` of the store's own objects.
    /// A completed list replaces the table, keeping only the entries newer than the list's (an
    /// object this process wrote meanwhile); one the list lacks is read live when asked.
    fn follow_shared<K: Resource>(&mut self, change: &Change<K>, share: fn(&Arc<K>) -> V) {
        let seen = |object: &Arc<K>, deleted: bool| Seen {
            version: version_of(&**object),
            value: (!deleted).then(|| share(object)),
        };
        match change {
            Change::Applied(object) | Change::Deleted(object) => {
                if let Some(key) = key_of(&**object) {
                    let deleted = matches!(change, Change::Deleted(_));
                    self.apply(key, seen(object, deleted), true);
                }
            }
            Change::Listed(objects) => {
                let mut listed: HashMap<Key, Seen<V>> = objects
                    .iter()
                    .filter_map(|object| Some((key_of(&**object)?, seen(object, false))))
                    .collect();
                for (key, held) in self.entries.drain() {
                    if let Some(in_list) = listed.get_mut(&key)
                        && matches!((held.version, in_list.version), (Some(h), Some(l)) if h > l)
                    {
                        *in_list = held;
                    }
                }
                self.entries = listed;
                self.listing = None;
                self.synced = true;
            }
        }
    }

    fn follow<K: Resource>(&mut self, event: &watcher::Event<K>, project: impl Fn(&K) -> V) {
        match event {
            watcher::Event::Apply(object) => self.record(object, false, project),
            watcher::Event::Delete(object) => self.record(object, true, project),
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                let (Some(key), Some(listing)) = (key_of(object), self.listing.as_mut()) else {
                    return;
                };
                let new = Seen {
                    version: version_of(object),
                    value: Some(project(object)),
                };
                if listing
                    .get(&key)
                    .is_none_or(|stored| new.supersedes(stored, false))
                {
                    listing.insert(key, new);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.entries = listing;
                }
                self.synced = true;
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.values().filter(|s| s.value.is_some()).count()
    }
}

/// How a table's watch reports its failures (a Secret table must not quote what it decodes).
pub type ErrorLog = fn(kind: &str, err: &watcher::Error);

fn log_watch_error(kind: &str, err: &watcher::Error) {
    tracing::debug!(kind, error = %crate::controller::ErrorChain(err), "object table watch");
}

/// A feed from the kind's shared store: how to subscribe, and what to hold of each of its objects.
struct SharedFeed<K, V> {
    subscribe: Box<dyn Fn() -> mpsc::UnboundedReceiver<Change<K>> + Send + Sync>,
    share: fn(&Arc<K>) -> V,
}

struct TableInner<K: Resource, V> {
    api: Api<K>,
    /// When set, the table follows the kind's shared store instead of a watch of its own.
    shared: Option<SharedFeed<K, V>>,
    kind: String,
    /// When set, only objects carrying this label are held (and watched).
    label: Option<&'static str>,
    shutdown: CancellationToken,
    started: AtomicBool,
    table: Mutex<Table<V>>,
    project: fn(&K) -> V,
    log_error: ErrorLog,
}

/// Every object of one kind as last seen, projected to what its readers need, shared by the
/// controllers of one process (cheap to clone). See the module documentation.
pub struct WatchTable<K: Resource, V> {
    inner: Arc<TableInner<K, V>>,
}

impl<K: Resource, V> Clone for WatchTable<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Resource, V> Debug for WatchTable<K, V> {
    // Never the objects themselves (a table may hold Secrets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchTable")
            .field("kind", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl<K, V> WatchTable<K, V>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync,
    V: Clone + Send + 'static,
{
    /// A table of what `api` (every namespace) serves, keeping `project` of each object; its watch
    /// starts on first use and stops when `shutdown` is cancelled.
    pub fn new(
        api: Api<K>,
        kind: impl Into<String>,
        shutdown: CancellationToken,
        project: fn(&K) -> V,
    ) -> Self {
        Self {
            inner: Arc::new(TableInner {
                api,
                kind: kind.into(),
                label: None,
                shared: None,
                shutdown,
                started: AtomicBool::new(false),
                table: Mutex::new(Table::default()),
                project,
                log_error: log_watch_error,
            }),
        }
    }

    /// The same table, reporting watch failures through `log_error` (before first use).
    #[must_use]
    pub fn with_error_log(self, log_error: ErrorLog) -> Self {
        self.configured(|inner| inner.log_error = log_error)
    }

    /// The same table, holding only the objects that carry `label` (before first use): its watch
    /// asks the API for those alone, so a kind of which the readers need a few objects (reports
    /// among every ConfigMap of a management cluster) costs memory for those few.
    #[must_use]
    pub fn with_label(self, label: &'static str) -> Self {
        self.configured(|inner| inner.label = Some(label))
    }

    /// The same table, following `store` (the kind's store for the whole process) instead of a
    /// watch of its own and holding `share` of the store's objects (before first use).
    #[must_use]
    pub fn following(self, store: SharedStore<K>, share: fn(&Arc<K>) -> V) -> Self
    where
        K: StoredKind,
    {
        self.configured(|inner| {
            inner.shared = Some(SharedFeed {
                subscribe: Box::new(move || store.subscribe()),
                share,
            });
        })
    }

    /// The same table with `change` made to its settings; only before first use, while no clone
    /// shares it (a shared table is returned unchanged).
    fn configured(self, change: impl FnOnce(&mut TableInner<K, V>)) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                change(&mut inner);
                Self {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => Self { inner },
        }
    }

    /// How a watch of the objects this table holds is set up (the table's own, and a trigger's
    /// that feeds it).
    pub fn watch_config(&self) -> watcher::Config {
        match self.inner.label {
            Some(label) => watcher::Config::default().labels(label),
            None => watcher::Config::default(),
        }
    }

    /// Whether the table holds objects like `object` (it carries the table's label, if any).
    fn holds_kind_of(&self, object: &K) -> bool {
        self.inner
            .label
            .is_none_or(|label| object.labels().contains_key(label))
    }

    fn table(&self) -> MutexGuard<'_, Table<V>> {
        // The table holds plain values: still consistent after a panic elsewhere.
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the first list has been read.
    pub fn is_synced(&self) -> bool {
        self.table().synced
    }

    /// How many objects the table holds.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether the table holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What is known of `name` in `namespace` (empty for a cluster-scoped kind); starts the watch
    /// on first use.
    pub fn lookup(&self, namespace: &str, name: &str) -> Entry<V> {
        self.start();
        self.table().lookup(namespace, name)
    }

    /// Records `object` as seen by another watch or written by this process, unless a newer
    /// version is already known.
    pub fn observe(&self, object: &K) {
        // An object the table's watch does not follow would never be updated.
        if self.holds_kind_of(object) {
            self.table().record(object, false, self.inner.project);
        }
    }

    /// Records that `object` was deleted (seen by another watch, or deleted by this process).
    pub fn observe_deleted(&self, object: &K) {
        self.table().record(object, true, self.inner.project);
    }

    /// Records one event of another watch of the kind (a controller's trigger); list boundaries
    /// belong to the table's own watch.
    pub fn observe_event(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                self.observe(object);
            }
            watcher::Event::Delete(object) => self.observe_deleted(object),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn start(&self) {
        if self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let table = self.clone();
        let shutdown = self.inner.shutdown.clone();
        if let Some(feed) = &self.inner.shared {
            let mut changes = (feed.subscribe)();
            let share = feed.share;
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        change = changes.recv() => match change {
                            Some(change) => table.table().follow_shared(&change, share),
                            None => break,
                        },
                    }
                }
            });
            return;
        }
        let api = self.inner.api.clone();
        let config = self.watch_config();
        tokio::spawn(async move {
            use futures::StreamExt;
            let stream = watcher(api, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let project = table.inner.project;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    event = stream.next() => match event {
                        Some(Ok(event)) => table.table().follow(&event, project),
                        Some(Err(err)) => (table.inner.log_error)(&table.inner.kind, &err),
                        None => break,
                    },
                }
            }
        });
    }
}

/// The `Api` of one namespace of a kind (typed or untyped).
type NamespacedApi<K> = Arc<dyn Fn(&str) -> Api<K> + Send + Sync>;

/// How an [`ObjectCache`] holds one object.
#[derive(Debug)]
pub enum Held<K> {
    /// The object itself (for a cache following its kind's store, the store's own allocation).
    Object(Arc<K>),
    /// The object's JSON, decoded when read: an untyped object held as a tree of JSON values took
    /// several times the memory of its text, for objects read a few times per change.
    Json(Arc<[u8]>),
}

impl<K> Clone for Held<K> {
    fn clone(&self) -> Self {
        match self {
            Held::Object(object) => Held::Object(object.clone()),
            Held::Json(text) => Held::Json(text.clone()),
        }
    }
}

impl<K: DeserializeOwned> Held<K> {
    /// The object; `None` when its JSON no longer decodes (then it is read live).
    pub fn object(&self) -> Option<Arc<K>> {
        match self {
            Held::Object(object) => Some(object.clone()),
            Held::Json(text) => serde_json::from_slice(text).ok().map(Arc::new),
        }
    }
}

fn keep_slim<K: Resource + Clone>(object: &K) -> Arc<K> {
    Arc::new(slim(object.clone()))
}

fn hold_slim<K: Resource + Clone>(object: &K) -> Held<K> {
    Held::Object(keep_slim(object))
}

fn hold_json<K: Resource + Clone + Serialize>(object: &K) -> Held<K> {
    match serde_json::to_vec(&slim(object.clone())) {
        Ok(text) => Held::Json(text.into()),
        Err(_) => Held::Object(keep_slim(object)),
    }
}

fn hold_shared<K>(object: &Arc<K>) -> Held<K> {
    Held::Object(object.clone())
}

/// A [`WatchTable`] of whole objects (without managed fields and the applied copy) of a namespaced
/// kind, that reads live what it cannot answer (cheap to clone).
pub struct ObjectCache<K: Resource> {
    table: WatchTable<K, Held<K>>,
    namespaced: NamespacedApi<K>,
}

impl<K: Resource> Clone for ObjectCache<K> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            namespaced: self.namespaced.clone(),
        }
    }
}

/// A namespaced kind with a static type that an [`ObjectCache`] can hold: decoded from its watch,
/// shared between tasks.
pub trait CachedKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> CachedKind for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

impl<K: Resource> Debug for ObjectCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt(f)
    }
}

impl<K> ObjectCache<K>
where
    K: CachedKind,
{
    /// A cache of the namespaced kind `K`, read through `client`; its watch starts on first use
    /// and stops when `shutdown` is cancelled.
    pub fn typed(client: Client, shutdown: CancellationToken) -> Self {
        let reader = client.clone();
        Self {
            table: WatchTable::new(Api::all(client), K::kind(&()), shutdown, hold_slim),
            namespaced: Arc::new(move |namespace| Api::namespaced(reader.clone(), namespace)),
        }
    }
}

impl ObjectCache<DynamicObject> {
    /// A cache of the namespaced kind `resource`, read untyped through `client`.
    pub fn dynamic(client: Client, shutdown: CancellationToken, resource: &ApiResource) -> Self {
        let reader = client.clone();
        let namespaced_resource = resource.clone();
        Self {
            table: WatchTable::new(
                Api::all_with(client, resource),
                resource.kind.clone(),
                shutdown,
                hold_slim,
            ),
            namespaced: Arc::new(move |namespace| {
                Api::namespaced_with(reader.clone(), namespace, &namespaced_resource)
            }),
        }
    }
}

impl<K> ObjectCache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync,
{
    /// The same cache, reporting watch failures through `log_error` (before first use).
    #[must_use]
    pub fn with_error_log(self, log_error: ErrorLog) -> Self {
        Self {
            table: self.table.with_error_log(log_error),
            namespaced: self.namespaced,
        }
    }

    /// The same cache, holding each object as its JSON (see [`Held::Json`]), for an untyped kind
    /// held in many objects and read a few times per change (before first use).
    #[must_use]
    pub fn as_json(self) -> Self
    where
        K: Serialize,
    {
        Self {
            table: self.table.configured(|inner| inner.project = hold_json),
            namespaced: self.namespaced,
        }
    }

    /// The same cache, following the kind's shared store instead of a watch of its own: its
    /// entries are the store's own objects (before first use).
    #[must_use]
    pub fn following(self, store: SharedStore<K>) -> Self
    where
        K: StoredKind,
    {
        Self {
            table: self.table.following(store, hold_shared),
            namespaced: self.namespaced,
        }
    }

    /// The table underneath.
    pub fn table(&self) -> &WatchTable<K, Held<K>> {
        &self.table
    }

    /// The same cache, holding only the objects that carry `label` (see
    /// [`WatchTable::with_label`]); the others are read live each time.
    #[must_use]
    pub fn with_label(self, label: &'static str) -> Self {
        Self {
            table: self.table.with_label(label),
            namespaced: self.namespaced,
        }
    }

    /// Whether the first list has been read.
    pub fn is_synced(&self) -> bool {
        self.table.is_synced()
    }

    /// The object from memory when the cache holds it, as last seen, without starting its watch or
    /// reading live.
    pub fn peek(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        match self.table.table().lookup(namespace, name) {
            Entry::Held { value, .. } => value.object(),
            Entry::Unknown => None,
        }
    }

    /// What the table answers for `name` in `namespace`, decoded (starts the watch on first use).
    fn lookup(&self, namespace: &str, name: &str) -> Option<(Arc<K>, Option<u64>)> {
        match self.table.lookup(namespace, name) {
            Entry::Held { value, version } => Some((value.object()?, version)),
            Entry::Unknown => None,
        }
    }

    /// `name` in `namespace`: from memory when the cache holds it, else read live (and
    /// remembered). `Ok(None)` only from a live read: the object does not exist.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        match self.lookup(namespace, name) {
            Some((object, _)) => Ok(Some(object)),
            None => self.get_live(namespace, name).await,
        }
    }

    /// `name` in `namespace` as the watch last delivered it, absence included, once the first list
    /// is complete (before that, read live). Only for readers that the kind's changes wake (a
    /// trigger that feeds this cache, as [`crate::watches::watches_cached`] sets up): an object
    /// created after the answer wakes them again, so "not there yet" costs no request.
    pub async fn get_watched(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>, kube::Error> {
        match self.table.lookup(namespace, name) {
            Entry::Held { value, .. } => match value.object() {
                Some(object) => Ok(Some(object)),
                None => self.get_live(namespace, name).await,
            },
            Entry::Unknown if self.table.is_synced() => Ok(None),
            Entry::Unknown => self.get_live(namespace, name).await,
        }
    }

    /// `name` in `namespace` at `version` or newer: from memory when the cache holds such a
    /// version, else read live. A version that is not a number is read live.
    pub async fn get_at_least(
        &self,
        namespace: &str,
        name: &str,
        version: Option<&str>,
    ) -> Result<Option<Arc<K>>, kube::Error> {
        let wanted = version.and_then(|v| v.parse::<u64>().ok());
        if let (Some(wanted), Some((object, Some(held)))) = (wanted, self.lookup(namespace, name))
            && held >= wanted
        {
            return Ok(Some(object));
        }
        self.get_live(namespace, name).await
    }

    /// `name` in `namespace` read from the API (and remembered, unless the cache already holds a
    /// newer version).
    pub async fn get_live(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>, kube::Error> {
        let Some(object) = (self.namespaced)(namespace).get_opt(name).await? else {
            return Ok(None);
        };
        self.table.observe(&object);
        Ok(Some(keep_slim(&object)))
    }

    /// Records `object` as seen by another watch or written by this process.
    pub fn observe(&self, object: &K) {
        self.table.observe(object);
    }

    /// Records that `object` was deleted.
    pub fn observe_deleted(&self, object: &K) {
        self.table.observe_deleted(object);
    }

    /// Records one event of another watch of the kind (a controller's trigger).
    pub fn observe_event(&self, event: &watcher::Event<K>) {
        self.table.observe_event(event);
    }
}

/// One [`ObjectCache`] per kind for the controllers of one process (cheap to clone): each kind's
/// cache, and its watch, is made on first use.
#[derive(Clone)]
pub struct ObjectCaches {
    client: Client,
    shutdown: CancellationToken,
    caches: Arc<Mutex<HashMap<String, Box<dyn Any + Send + Sync>>>>,
}

impl Debug for ObjectCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCaches").finish_non_exhaustive()
    }
}

impl ObjectCaches {
    /// Caches that read through `client` and whose watches stop when `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        Self {
            client,
            shutdown,
            caches: Arc::default(),
        }
    }

    fn of<C: Clone + Send + Sync + 'static>(&self, key: String, make: impl FnOnce() -> C) -> C {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cache) = caches.get(&key).and_then(|c| c.downcast_ref::<C>()) {
            return cache.clone();
        }
        let cache = make();
        caches.insert(key, Box::new(cache.clone()));
        cache
    }

    /// The cache of the namespaced kind `K`.
    pub fn typed<K>(&self) -> ObjectCache<K>
    where
        K: CachedKind,
    {
        // Taken first: `of` holds the map's lock while it makes a cache.
        let store = self.store::<K>();
        self.of(format!("typed {}", std::any::type_name::<K>()), || {
            ObjectCache::typed(self.client.clone(), self.shutdown.clone()).following(store)
        })
    }

    /// The store of every `K` for the whole process (see [`crate::stores`]): the one the
    /// controllers of `K` read and are triggered by, and the typed table of `K` follows.
    pub fn store<K: StoredKind>(&self) -> SharedStore<K> {
        self.of(format!("store {}", std::any::type_name::<K>()), || {
            SharedStore::new(self.client.clone(), self.shutdown.clone())
        })
    }

    /// The cache of the objects of the namespaced kind `K` that carry `label` (see
    /// [`WatchTable::with_label`]).
    pub fn typed_labelled<K>(&self, label: &'static str) -> ObjectCache<K>
    where
        K: CachedKind,
    {
        self.of(
            format!("typed {} labelled {label}", std::any::type_name::<K>()),
            || ObjectCache::typed(self.client.clone(), self.shutdown.clone()).with_label(label),
        )
    }

    /// The cache of the namespaced kind `resource`, read untyped: one per kind and version (the
    /// kinds of one group version, Metal3Machine and Metal3Cluster, each have their own). It
    /// holds each object as its JSON ([`Held::Json`]): these kinds (a provider's machines, the
    /// bootstrap configs) are held in thousands and read a few times per change.
    pub fn dynamic(&self, resource: &ApiResource) -> ObjectCache<DynamicObject> {
        let key = format!("dynamic {} {}", resource.api_version, resource.kind);
        self.of(key, || {
            ObjectCache::dynamic(self.client.clone(), self.shutdown.clone(), resource).as_json()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn map(name: &str, version: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            data: Some([("key".to_owned(), value.to_owned())].into()),
            ..ConfigMap::default()
        }
    }

    fn value_of(map: &ConfigMap) -> String {
        map.data
            .as_ref()
            .map(|d| d["key"].clone())
            .unwrap_or_default()
    }

    fn value(table: &Table<String>, name: &str) -> Option<String> {
        match table.lookup("ns", name) {
            Entry::Held { value, .. } => Some(value),
            Entry::Unknown => None,
        }
    }

    #[test]
    fn answers_only_once_the_first_list_is_complete() {
        let mut table = Table::default();
        table.follow(&watcher::Event::Init, value_of);
        table.follow(&watcher::Event::InitApply(map("a", "5", "one")), value_of);
        assert_eq!(value(&table, "a"), None, "still listing: read live");
        table.follow(&watcher::Event::InitDone, value_of);
        assert_eq!(value(&table, "a").as_deref(), Some("one"));
        assert_eq!(value(&table, "b"), None, "never seen: read live");
        assert_eq!(
            table.lookup("other", "a"),
            Entry::Unknown,
            "another namespace"
        );
        assert_eq!(
            table.lookup("ns", "a"),
            Entry::Held {
                value: "one".into(),
                version: Some(5)
            }
        );
    }

    #[test]
    fn an_update_replaces_the_object_and_an_older_version_never_does() {
        let mut table = Table::default();
        table.follow(&watcher::Event::Init, value_of);
        table.follow(&watcher::Event::InitDone, value_of);
        table.follow(&watcher::Event::Apply(map("a", "5", "one")), value_of);
        assert_eq!(value(&table, "a").as_deref(), Some("one"));
        // A trigger saw the update first; the table's own watch delivers it afterwards.
        table.record(&map("a", "7", "two"), false, value_of);
        assert_eq!(value(&table, "a").as_deref(), Some("two"));
        table.follow(&watcher::Event::Apply(map("a", "7", "two")), value_of);
        table.follow(&watcher::Event::Apply(map("a", "6", "stale")), value_of);
        assert_eq!(value(&table, "a").as_deref(), Some("two"));
    }

    #[test]
    fn a_deleted_object_is_unknown_and_not_revived_by_an_older_version() {
        let mut table = Table::default();
        table.follow(&watcher::Event::Init, value_of);
        table.follow(&watcher::Event::InitApply(map("a", "5", "one")), value_of);
        table.follow(&watcher::Event::InitDone, value_of);
        table.follow(&watcher::Event::Delete(map("a", "9", "one")), value_of);
        assert_eq!(value(&table, "a"), None);
        table.record(&map("a", "8", "one"), false, value_of);
        assert_eq!(value(&table, "a"), None, "a late older version");
        table.record(&map("a", "9", "one"), false, value_of);
        assert_eq!(
            value(&table, "a"),
            None,
            "a trigger's copy of the deleted object's last state"
        );
        table.follow(&watcher::Event::Apply(map("a", "12", "again")), value_of);
        assert_eq!(
            value(&table, "a").as_deref(),
            Some("again"),
            "created again"
        );
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_relist_drops_what_is_gone_and_keeps_newer_triggers() {
        let mut table = Table::default();
        table.follow(&watcher::Event::Init, value_of);
        table.follow(&watcher::Event::InitApply(map("gone", "3", "x")), value_of);
        table.follow(&watcher::Event::InitDone, value_of);
        assert!(value(&table, "gone").is_some());
        table.follow(&watcher::Event::Init, value_of);
        table.record(&map("new", "12", "newer"), false, value_of);
        table.follow(
            &watcher::Event::InitApply(map("new", "10", "older")),
            value_of,
        );
        table.follow(&watcher::Event::InitDone, value_of);
        assert!(value(&table, "gone").is_none(), "not in the new list");
        assert_eq!(value(&table, "new").as_deref(), Some("newer"));
    }

    #[test]
    fn slim_drops_managed_fields_and_the_applied_copy_only() {
        let mut applied = map("a", "1", "one");
        applied.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        applied.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_owned(), "{\"data\":{}}".to_owned()),
                ("kept".to_owned(), "yes".to_owned()),
            ]
            .into(),
        );
        let kept = slim(applied);
        assert!(kept.metadata.managed_fields.is_none());
        let annotations = kept.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations["kept"], "yes");
        assert_eq!(value_of(&kept), "one");
    }

    fn held(table: &Table<Arc<ConfigMap>>, name: &str) -> Option<Arc<ConfigMap>> {
        match table.lookup("ns", name) {
            Entry::Held { value, .. } => Some(value),
            Entry::Unknown => None,
        }
    }

    #[test]
    fn a_table_following_the_shared_store_holds_the_stores_own_objects() {
        let mut table: Table<Arc<ConfigMap>> = Table::default();
        let listed = Arc::new(map("a", "5", "one"));
        table.follow_shared(&Change::Listed(vec![listed.clone()]), Arc::clone);
        assert!(Arc::ptr_eq(&held(&table, "a").unwrap(), &listed));

        // This process wrote version 7 and recorded it; the store's own copy replaces it when the
        // watch delivers that version, so the table keeps no copy of its own.
        table.record(&map("a", "7", "two"), false, |m| Arc::new(m.clone()));
        let written = held(&table, "a").unwrap();
        assert_eq!(value_of(&written), "two");
        let from_store = Arc::new(map("a", "7", "two"));
        table.follow_shared(&Change::Applied(from_store.clone()), Arc::clone);
        assert!(Arc::ptr_eq(&held(&table, "a").unwrap(), &from_store));
        // ... and a copy recorded after the store's, at the same version, does not replace it.
        table.record(&map("a", "7", "two"), false, |m| Arc::new(m.clone()));
        assert!(Arc::ptr_eq(&held(&table, "a").unwrap(), &from_store));
        table.follow_shared(&Change::Applied(Arc::new(map("a", "6", "old"))), Arc::clone);
        assert_eq!(
            value_of(&held(&table, "a").unwrap()),
            "two",
            "never an older version"
        );

        // A relist keeps what this process wrote after the list's version, drops what it lacks.
        table.record(&map("a", "9", "three"), false, |m| Arc::new(m.clone()));
        table.follow_shared(&Change::Applied(Arc::new(map("b", "8", "b"))), Arc::clone);
        table.follow_shared(
            &Change::Listed(vec![Arc::new(map("a", "8", "two"))]),
            Arc::clone,
        );
        assert_eq!(value_of(&held(&table, "a").unwrap()), "three");
        assert!(held(&table, "b").is_none(), "not listed: read live");

        table.follow_shared(
            &Change::Deleted(Arc::new(map("a", "10", "three"))),
            Arc::clone,
        );
        assert!(held(&table, "a").is_none());
        table.follow_shared(
            &Change::Applied(Arc::new(map("a", "9", "three"))),
            Arc::clone,
        );
        assert!(
            held(&table, "a").is_none(),
            "a deletion is not revived by an older version"
        );
    }

    #[tokio::test]
    async fn the_typed_cache_of_a_kind_follows_the_kinds_one_store() {
        // Never dialled: nothing here reads.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let objects =
            ObjectCaches::new(Client::try_from(config).unwrap(), CancellationToken::new());
        let cache = objects.typed::<ConfigMap>();
        assert!(
            cache.table().inner.shared.is_some(),
            "fed by the store, not a watch of its own"
        );
        let again = objects.typed::<ConfigMap>();
        assert!(
            Arc::ptr_eq(&cache.table().inner, &again.table().inner),
            "one table per kind"
        );
        let store = objects.store::<ConfigMap>();
        assert!(
            store.is(&objects.store::<ConfigMap>()),
            "one store per kind"
        );
    }

    #[test]
    fn an_untyped_object_held_as_json_reads_back_whole_without_managed_fields() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine",
            "metadata": {
                "namespace": "ns", "name": "m", "resourceVersion": "12",
                "annotations": {LAST_APPLIED: "{}", "keep": "me"},
                "managedFields": [{"manager": "capstan", "operation": "Update"}],
            },
            "spec": {"providerID": "metal3://ns/h/m", "image": {"url": "http://x/i.img"}},
            "status": {"ready": true, "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]},
        }))
        .unwrap();
        let mut table: Table<Held<DynamicObject>> = Table::default();
        table.follow(&watcher::Event::Init, hold_json);
        table.follow(&watcher::Event::InitApply(object.clone()), hold_json);
        table.follow(&watcher::Event::InitDone, hold_json);
        let Entry::Held { value, version } = table.lookup("ns", "m") else {
            panic!("held")
        };
        assert!(matches!(value, Held::Json(_)));
        assert_eq!(version, Some(12));
        let read = value.object().unwrap();
        assert_eq!(*read, slim(object));
        assert_eq!(
            read.annotations().get("keep").map(String::as_str),
            Some("me")
        );
        assert!(read.metadata.managed_fields.is_none());
        assert!(
            Held::<DynamicObject>::Json(b"not json".to_vec().into())
                .object()
                .is_none()
        );
    }
}
