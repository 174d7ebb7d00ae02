//! One store per kind for the whole process: every object of a kind held once, whoever reads it.
//!
//! Before, each reader of a kind kept its own copy: each controller the store of its own kind, a
//! second controller of the same kind (the host controller and the simulated boot) another, the
//! list caches of the Cluster and Metal3 controllers theirs, and the object tables theirs. At 1,000
//! clusters (4,000 Machines, hosts, bootstrap configs) those copies were most of the process's
//! memory. A [`SharedStore`] is one watch of a kind feeding one `kube_runtime` reflector store;
//! everything else follows it:
//! - a controller of the kind reads its objects from the store and is triggered by its changes
//!   (`Controller::for_shared_stream`), each change delivered after the store applied it;
//! - list readers ([`crate::watches::Cache`]) read the store;
//! - an object table of the kind ([`crate::tables::ObjectCache`]) holds the store's own `Arc`s, so
//!   its entries cost a map slot rather than a copy.
//!
//! Objects are held without managed fields and the `last-applied-configuration` copy
//! ([`crate::tables::strip`]). The watch starts on first use and stops with the process's
//! controllers (or the leadership term).
//!
//! What a subscriber receives ([`Change`]): each applied or deleted object once the store holds that
//! state, and after every (re)list the whole store. A subscriber that joins after the first list
//! receives the whole store first; the subscriber list is locked while a change is delivered, so it
//! misses nothing between that snapshot and the next change.

use crate::CancellationToken;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// A change of the store, as a subscriber receives it.
#[derive(Debug)]
pub enum Change<K> {
    /// The object as the store now holds it (the same allocation).
    Applied(Arc<K>),
    /// The object's last state; the store no longer holds it.
    Deleted(Arc<K>),
    /// A (re)list completed: every object the store now holds.
    Listed(Vec<Arc<K>>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied(object) => Change::Applied(object.clone()),
            Change::Deleted(object) => Change::Deleted(object.clone()),
            Change::Listed(objects) => Change::Listed(objects.clone()),
        }
    }
}

/// A kind a [`SharedStore`] can hold: decoded from its watch, shared between tasks.
pub trait StoredKind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> StoredKind for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

struct Inner<K: StoredKind> {
    client: Client,
    shutdown: CancellationToken,
    reader: Store<K>,
    /// Taken by the watch task when it starts (so `None` once started).
    writer: Mutex<Option<Writer<K>>>,
    /// Whether a first list completed (the reader's own readiness cannot be polled).
    listed: AtomicBool,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Change<K>>>>,
}

/// Every object of one kind, held once for the process (cheap to clone). See the module
/// documentation.
pub struct SharedStore<K: StoredKind> {
    inner: Arc<Inner<K>>,
}

impl<K: StoredKind> Clone for SharedStore<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: StoredKind> Debug for SharedStore<K> {
    // Never the objects themselves (a store may hold Secrets).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("kind", &K::kind(&()))
            .finish_non_exhaustive()
    }
}

impl<K: StoredKind> SharedStore<K> {
    /// A store of every `K` read through `client`; its watch starts on first use and stops when
    /// `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        let writer = Writer::<K>::default();
        Self {
            inner: Arc::new(Inner {
                client,
                shutdown,
                reader: writer.as_reader(),
                writer: Mutex::new(Some(writer)),
                listed: AtomicBool::new(false),
                subscribers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The store (read by a controller, or listed); starts the watch.
    pub fn reader(&self) -> Store<K> {
        self.start();
        self.inner.reader.clone()
    }

    /// Whether `other` is this same store.
    #[cfg(test)]
    pub(crate) fn is(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the first list completed.
    pub fn is_listed(&self) -> bool {
        self.inner.listed.load(Ordering::Acquire)
    }

    /// The store's changes from now on (after the whole store, when it was listed already); starts
    /// the watch. The stream ends when the store stops.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Change<K>> {
        self.start();
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut subscribers = self.subscribers();
        if self.is_listed() {
            // Under the lock: the next change is delivered after this snapshot.
            let _ = sender.send(Change::Listed(self.inner.reader.state()));
        }
        subscribers.push(sender);
        receiver
    }

    fn subscribers(&self) -> MutexGuard<'_, Vec<mpsc::UnboundedSender<Change<K>>>> {
        // Plain senders: still usable after a panic elsewhere.
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self) {
        let Some(mut writer) = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let store = self.clone();
        tokio::spawn(async move {
            let stream = watcher(
                Api::<K>::all(store.inner.client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            // No reader needs managed fields or the `last-applied` copy; they were the larger
            // part of many objects in memory.
            .modify(crate::tables::strip);
            let mut stream = std::pin::pin!(stream);
            let shutdown = store.inner.shutdown.clone();
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    event = stream.next() => match event {
                        Some(Ok(event)) => {
                            writer.apply_watcher_event(&event);
                            store.deliver(event);
                        }
                        Some(Err(err)) => crate::secrets::log_watch_error(&K::kind(&()), &err),
                        None => break,
                    },
                }
            }
            // Subscribers' streams end: their controllers stop with the same token.
            store.subscribers().clear();
        });
    }

    /// Hands `event`, already applied to the store, to every subscriber.
    fn deliver(&self, event: watcher::Event<K>) {
        let change = match event {
            watcher::Event::Apply(object) => {
                match self.inner.reader.get(&ObjectRef::from_obj(&object)) {
                    Some(held) => Change::Applied(held),
                    None => Change::Applied(Arc::new(object)),
                }
            }
            watcher::Event::Delete(object) => Change::Deleted(Arc::new(object)),
            watcher::Event::InitDone => {
                self.inner.listed.store(true, Ordering::Release);
                Change::Listed(self.inner.reader.state())
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => return,
        };
        self.subscribers()
            .retain(|subscriber| subscriber.send(change.clone()).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn map(name: &str) -> ConfigMap {
        let mut map = ConfigMap::default();
        map.metadata.namespace = Some("ns".into());
        map.metadata.name = Some(name.into());
        map
    }

    fn names(change: &Change<ConfigMap>) -> Vec<String> {
        let objects = match change {
            Change::Applied(o) | Change::Deleted(o) => vec![o.clone()],
            Change::Listed(all) => all.clone(),
        };
        let mut names: Vec<String> = objects
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// A store fed by hand (no watch): what the watch task does per event.
    fn fed(
        store: &SharedStore<ConfigMap>,
        writer: &mut Writer<ConfigMap>,
        event: watcher::Event<ConfigMap>,
    ) {
        writer.apply_watcher_event(&event);
        store.deliver(event);
    }

    fn unstarted() -> (SharedStore<ConfigMap>, Writer<ConfigMap>) {
        // Never dialled: the test feeds the store itself.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let store = SharedStore::<ConfigMap>::new(client, CancellationToken::new());
        // Started, as far as the store knows: the test takes the writer and feeds it.
        let writer = store.inner.writer.lock().unwrap().take().unwrap();
        (store, writer)
    }

    /// What the store holds of `name`.
    fn held(store: &SharedStore<ConfigMap>, name: &str) -> Arc<ConfigMap> {
        store
            .inner
            .reader
            .get(&ObjectRef::new(name).within("ns"))
            .unwrap()
    }

    #[tokio::test]
    async fn subscribers_get_the_stores_own_objects_and_late_ones_the_whole_store_first() {
        let (store, mut writer) = unstarted();
        let mut early = store.subscribe();
        fed(&store, &mut writer, watcher::Event::Init);
        fed(&store, &mut writer, watcher::Event::InitApply(map("a")));
        fed(&store, &mut writer, watcher::Event::InitDone);
        let listed = early.recv().await.unwrap();
        assert_eq!(names(&listed), ["a"]);
        let Change::Listed(all) = listed else {
            panic!("a list")
        };
        assert!(
            Arc::ptr_eq(&all[0], &held(&store, "a")),
            "the subscriber holds the store's allocation"
        );

        fed(&store, &mut writer, watcher::Event::Apply(map("b")));
        let Change::Applied(b) = early.recv().await.unwrap() else {
            panic!("an apply")
        };
        assert!(Arc::ptr_eq(&b, &held(&store, "b")));

        let mut late = store.subscribe();
        assert_eq!(names(&late.recv().await.unwrap()), ["a", "b"]);
        fed(&store, &mut writer, watcher::Event::Delete(map("a")));
        for subscriber in [&mut early, &mut late] {
            let change = subscriber.recv().await.unwrap();
            assert!(matches!(change, Change::Deleted(_)));
            assert_eq!(names(&change), ["a"]);
        }
        assert_eq!(store.inner.reader.state().len(), 1);

        drop(late);
        fed(&store, &mut writer, watcher::Event::Apply(map("c")));
        assert_eq!(store.subscribers().len(), 1, "a gone subscriber is dropped");
    }
}
