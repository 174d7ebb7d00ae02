//! Which Clusters are paused, for every controller of the process from one watch.
//!
//! Every reconcile of a controller that follows its Cluster's pause asks whether that Cluster is
//! paused. Reading the Cluster from the API each time was the most frequent request of a cluster
//! creation (a read per reconcile, tens of thousands for a hundred clusters); [`ClusterPauses`]
//! answers from memory instead. It keeps only what the answer needs — per Cluster its
//! resourceVersion and whether it is paused — so a thousand Clusters cost a few kilobytes.
//!
//! What it is fed: one watch of Clusters, started on first use and stopped with the controllers,
//! and [`ClusterPauses::observe`], called by each controller's own Cluster trigger before it queues
//! the Cluster's objects. So a reconcile woken by a Cluster change sees that change (an unpause is
//! never missed because the cache was behind the trigger); a newer version is never replaced by an
//! older one, whichever of the two feeds delivers first.
//!
//! What it answers ([`Pause`]): only "not paused" is final. A Cluster the cache holds as paused is
//! confirmed by a read (pauses are rare and short-lived, and an unpause must not be missed), and a
//! Cluster it does not know yet (just created, or the cache still filling) is read as before.

use crate::CancellationToken;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The `cluster.x-k8s.io` Cluster as the pause check reads it: untyped, so no Cluster version or
/// shape can make a read fail.
pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// Whether `meta` carries the pause annotation (its value does not matter, as in CAPI).
pub fn has_paused_annotation(meta: &kube::api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capstan_model::meta::ANNOTATION_PAUSED))
}

/// Whether `cluster` pauses its objects: the annotation, or `spec.paused`.
pub fn cluster_is_paused(cluster: &DynamicObject) -> bool {
    has_paused_annotation(&cluster.metadata)
        || cluster.data["spec"]["paused"].as_bool() == Some(true)
}

/// What the cache knows of one Cluster's pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// The Cluster exists and is not paused: final.
    Running,
    /// The Cluster was paused when last seen: confirm with a read before skipping work.
    Paused,
    /// The cache does not know (not filled yet, the Cluster not seen yet, or deleted): read it.
    Unknown,
}

/// One Cluster as last seen: its resourceVersion (when numeric) and its pause, `None` once deleted.
#[derive(Clone, Copy, Debug)]
struct Seen {
    version: Option<u64>,
    paused: Option<bool>,
}

impl Seen {
    /// Whether `self` may replace `stored`: not when both versions are known and it is older.
    fn supersedes(&self, stored: &Seen) -> bool {
        match (self.version, stored.version) {
            (Some(new), Some(old)) => new >= old,
            _ => true,
        }
    }
}

type ClusterId = (String, String);

/// The Clusters as the watch and the triggers delivered them.
#[derive(Default)]
struct Table {
    clusters: HashMap<ClusterId, Seen>,
    /// The Clusters of a (re)list in progress, swapped in when it is complete.
    listing: Option<HashMap<ClusterId, Seen>>,
    /// Whether a first list has been completed.
    synced: bool,
}

impl Table {
    fn lookup(&self, namespace: &str, name: &str) -> Pause {
        if !self.synced {
            return Pause::Unknown;
        }
        match self
            .clusters
            .get(&(namespace.to_owned(), name.to_owned()))
            .and_then(|seen| seen.paused)
        {
            Some(false) => Pause::Running,
            Some(true) => Pause::Paused,
            None => Pause::Unknown,
        }
    }

    /// Records a Cluster (or its deletion) in the known set and in a list in progress, unless a
    /// newer version is there.
    fn apply(&mut self, cluster: &DynamicObject, deleted: bool) {
        let Some(id) = id_of(cluster) else {
            return;
        };
        let new = seen(cluster, deleted);
        for map in std::iter::once(&mut self.clusters).chain(self.listing.as_mut()) {
            match map.get_mut(&id) {
                Some(stored) if !new.supersedes(stored) => {}
                Some(stored) => *stored = new,
                None => {
                    map.insert(id.clone(), new);
                }
            }
        }
    }

    fn follow(&mut self, event: watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Apply(cluster) => self.apply(&cluster, false),
            watcher::Event::Delete(cluster) => self.apply(&cluster, true),
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply(cluster) => {
                let (Some(id), Some(listing)) = (id_of(&cluster), self.listing.as_mut()) else {
                    return;
                };
                let new = seen(&cluster, false);
                if listing.get(&id).is_none_or(|stored| new.supersedes(stored)) {
                    listing.insert(id, new);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.clusters = listing;
                }
                self.synced = true;
            }
        }
    }
}

struct Inner {
    client: Client,
    shutdown: CancellationToken,
    started: AtomicBool,
    table: Mutex<Table>,
}

/// The pause of every Cluster, shared by the controllers of one process (cheap to clone).
#[derive(Clone)]
pub struct ClusterPauses {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ClusterPauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPauses")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

fn id_of(cluster: &DynamicObject) -> Option<ClusterId> {
    Some((cluster.namespace()?, cluster.metadata.name.clone()?))
}

fn seen(cluster: &DynamicObject, deleted: bool) -> Seen {
    Seen {
        version: cluster
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok()),
        paused: (!deleted).then(|| cluster_is_paused(cluster)),
    }
}

impl ClusterPauses {
    /// A cache that reads Clusters through `client`; its watch starts on first use and stops
    /// when `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                shutdown,
                started: AtomicBool::new(false),
                table: Mutex::new(Table::default()),
            }),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // The table holds plain values: still consistent after a panic elsewhere.
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the first list of Clusters has been read.
    pub fn is_synced(&self) -> bool {
        self.table().synced
    }

    /// What is known of the pause of Cluster `name` in `namespace` (starts the watch on first use).
    pub fn lookup(&self, namespace: &str, name: &str) -> Pause {
        self.start();
        self.table().lookup(namespace, name)
    }

    /// Records `cluster` as seen by another watch (a controller's trigger), unless a newer version
    /// is already known.
    pub fn observe(&self, cluster: &DynamicObject) {
        self.table().apply(cluster, false);
    }

    fn start(&self) {
        if self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let cache = self.clone();
        let api = Api::<DynamicObject>::all_with(self.inner.client.clone(), &cluster_resource());
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    event = stream.next() => match event {
                        Some(Ok(event)) => cache.table().follow(event),
                        Some(Err(err)) => tracing::debug!(
                            error = %crate::controller::ErrorChain(&err),
                            "Cluster pause watch"
                        ),
                        None => break,
                    },
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, version: &str, paused: bool, annotated: bool) -> DynamicObject {
        let mut object = DynamicObject::new(name, &cluster_resource()).within("ns");
        object.metadata.resource_version = Some(version.into());
        if annotated {
            object.metadata.annotations = Some(
                [(
                    capstan_model::meta::ANNOTATION_PAUSED.to_owned(),
                    String::new(),
                )]
                .into(),
            );
        }
        object.data = json!({"spec": {"paused": paused}});
        object
    }

    #[test]
    fn answers_only_once_the_first_list_is_complete() {
        let mut cache = Table::default();
        cache.follow(watcher::Event::Init);
        cache.follow(watcher::Event::InitApply(cluster("a", "5", false, false)));
        assert_eq!(cache.lookup("ns", "a"), Pause::Unknown, "still listing");
        cache.follow(watcher::Event::InitDone);
        assert_eq!(cache.lookup("ns", "a"), Pause::Running);
        assert_eq!(cache.lookup("ns", "b"), Pause::Unknown, "never seen");
        assert_eq!(
            cache.lookup("other", "a"),
            Pause::Unknown,
            "another namespace"
        );
    }

    #[test]
    fn pauses_by_spec_or_annotation_and_never_goes_back_a_version() {
        let mut cache = Table::default();
        cache.follow(watcher::Event::Init);
        cache.follow(watcher::Event::InitDone);
        cache.follow(watcher::Event::Apply(cluster("a", "5", true, false)));
        assert_eq!(cache.lookup("ns", "a"), Pause::Paused);
        // A controller's trigger saw the unpause first; the cache's watch delivers the older
        // version afterwards: the newer one stands.
        cache.apply(&cluster("a", "7", false, false), false);
        assert_eq!(cache.lookup("ns", "a"), Pause::Running);
        cache.follow(watcher::Event::Apply(cluster("a", "6", true, false)));
        assert_eq!(cache.lookup("ns", "a"), Pause::Running);
        cache.follow(watcher::Event::Apply(cluster("a", "8", false, true)));
        assert_eq!(
            cache.lookup("ns", "a"),
            Pause::Paused,
            "the annotation pauses"
        );
        // Deleted: unknown (read), and a late trigger of an older version does not revive it.
        cache.follow(watcher::Event::Delete(cluster("a", "9", false, true)));
        assert_eq!(cache.lookup("ns", "a"), Pause::Unknown);
        cache.apply(&cluster("a", "8", false, false), false);
        assert_eq!(cache.lookup("ns", "a"), Pause::Unknown);
    }

    #[test]
    fn a_relist_replaces_what_was_known_but_keeps_newer_triggers() {
        let mut cache = Table::default();
        cache.follow(watcher::Event::Init);
        cache.follow(watcher::Event::InitApply(cluster("gone", "3", true, false)));
        cache.follow(watcher::Event::InitDone);
        assert_eq!(cache.lookup("ns", "gone"), Pause::Paused);
        cache.follow(watcher::Event::Init);
        cache.apply(&cluster("new", "12", false, false), false);
        cache.follow(watcher::Event::InitApply(cluster("new", "10", true, false)));
        cache.follow(watcher::Event::InitDone);
        assert_eq!(
            cache.lookup("ns", "gone"),
            Pause::Unknown,
            "not in the new list"
        );
        assert_eq!(
            cache.lookup("ns", "new"),
            Pause::Running,
            "the newer trigger stands"
        );
    }
}
