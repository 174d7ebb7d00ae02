//! Secrets read from memory, for every controller of the process from one watch.
//!
//! Controllers read Secrets on most passes: a host's BMC credentials on every host reconcile, a
//! machine's bootstrap data, a cluster's certificates and kubeconfig. Read from the API each time,
//! these were the most frequent request of a cluster creation (about a hundred per machine).
//! [`SecretCache`] answers them from one watch of Secrets instead.
//!
//! What it is fed: one watch of every Secret, started on first use and stopped with the
//! controllers; the Secrets readers fetched live when the cache could not answer; and
//! [`SecretCache::observe`], for a Secret seen by another watch (a controller's Secret trigger,
//! before it queues the objects that use the Secret, so their next reconcile sees that version)
//! or just written. A newer resourceVersion is never replaced by an older one, whichever feed
//! delivers first, and a deletion is kept as a tombstone so a late older version cannot revive it.
//!
//! What it answers: a Secret the cache holds, as last seen; anything else (the first list not
//! complete, a Secret never seen, or seen deleted) is read live, so absence is never answered from
//! memory — a Secret just created is found. A Secret held in memory can be older than the API's by
//! as long as the watch lags; a reader that must not act on an older version reads with
//! [`SecretCache::get_live`].
//!
//! What it keeps: each Secret without its managed fields and without the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation (which repeats the whole data).
//! Nothing here ever logs a Secret's data, and a watch error that could quote it (a Secret that
//! cannot be decoded) is logged without its message.

use crate::CancellationToken;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The annotation `kubectl apply` writes: a copy of the whole object, data included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

type SecretId = (String, String);

/// One Secret as last seen: its resourceVersion (when numeric), and the Secret (`None` once deleted).
#[derive(Clone, Debug)]
struct Seen {
    version: Option<u64>,
    secret: Option<Arc<Secret>>,
}

impl Seen {
    /// Whether `self` may replace `stored`: not when both versions are known and it is older, and
    /// at the same version only a deletion (a trigger may hand over a deleted Secret's last state
    /// after the cache's own watch recorded the deletion).
    fn supersedes(&self, stored: &Seen) -> bool {
        match (self.version, stored.version) {
            (Some(new), Some(old)) => new > old || (new == old && self.secret.is_none()),
            _ => true,
        }
    }
}

fn id_of(secret: &Secret) -> Option<SecretId> {
    Some((secret.namespace()?, secret.metadata.name.clone()?))
}

fn seen(secret: &Secret, deleted: bool) -> Seen {
    Seen {
        version: secret
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok()),
        secret: (!deleted).then(|| Arc::new(slim(secret.clone()))),
    }
}

/// `secret` without what no reader needs and what would double its size in memory.
fn slim(mut secret: Secret) -> Secret {
    secret.metadata.managed_fields = None;
    if let Some(annotations) = secret.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    secret
}

/// The Secrets as the watch, live reads and triggers delivered them.
#[derive(Default)]
struct Table {
    secrets: HashMap<SecretId, Seen>,
    /// The Secrets of a (re)list in progress, swapped in when it is complete.
    listing: Option<HashMap<SecretId, Seen>>,
    /// Whether a first list has been completed.
    synced: bool,
}

impl Table {
    /// The Secret when the cache may answer for it.
    fn lookup(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        if !self.synced {
            return None;
        }
        self.secrets
            .get(&(namespace.to_owned(), name.to_owned()))
            .and_then(|seen| seen.secret.clone())
    }

    /// Records a Secret (or its deletion) in the known set and in a list in progress, unless a
    /// newer version is there.
    fn apply(&mut self, secret: &Secret, deleted: bool) {
        let Some(id) = id_of(secret) else {
            return;
        };
        let new = seen(secret, deleted);
        for map in std::iter::once(&mut self.secrets).chain(self.listing.as_mut()) {
            match map.get_mut(&id) {
                Some(stored) if !new.supersedes(stored) => {}
                Some(stored) => *stored = new.clone(),
                None => {
                    map.insert(id.clone(), new.clone());
                }
            }
        }
    }

    fn follow(&mut self, event: watcher::Event<Secret>) {
        match event {
            watcher::Event::Apply(secret) => self.apply(&secret, false),
            watcher::Event::Delete(secret) => self.apply(&secret, true),
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply(secret) => {
                let (Some(id), Some(listing)) = (id_of(&secret), self.listing.as_mut()) else {
                    return;
                };
                let new = seen(&secret, false);
                if listing.get(&id).is_none_or(|stored| new.supersedes(stored)) {
                    listing.insert(id, new);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.secrets = listing;
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

/// Every Secret as last seen, shared by the controllers of one process (cheap to clone).
#[derive(Clone)]
pub struct SecretCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SecretCache {
    // Never the Secrets themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCache")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

impl SecretCache {
    /// A cache that reads Secrets through `client`; its watch starts on first use and stops when
    /// `shutdown` is cancelled.
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

    /// Whether the first list of Secrets has been read.
    pub fn is_synced(&self) -> bool {
        self.table().synced
    }

    /// The Secret `name` in `namespace`: from memory when the cache holds it, else read live (and
    /// remembered). `Ok(None)` only from a live read: the Secret does not exist.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        self.start();
        if let Some(secret) = self.table().lookup(namespace, name) {
            return Ok(Some(secret));
        }
        self.get_live(namespace, name).await
    }

    /// The Secret `name` in `namespace` read from the API (and remembered, unless the cache
    /// already holds a newer version).
    pub async fn get_live(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let api: Api<Secret> = Api::namespaced(self.inner.client.clone(), namespace);
        let Some(secret) = api.get_opt(name).await? else {
            return Ok(None);
        };
        self.observe(&secret);
        Ok(Some(Arc::new(slim(secret))))
    }

    /// Records `secret` as seen by another watch or written by this process, unless a newer
    /// version is already known.
    pub fn observe(&self, secret: &Secret) {
        self.table().apply(secret, false);
    }

    /// Records that `secret` was deleted (seen by another watch, or deleted by this process).
    pub fn observe_deleted(&self, secret: &Secret) {
        self.table().apply(secret, true);
    }

    /// Records one event of another watch of Secrets (a controller's Secret trigger).
    pub fn observe_event(&self, event: &watcher::Event<Secret>) {
        match event {
            watcher::Event::Apply(secret) | watcher::Event::InitApply(secret) => {
                self.observe(secret);
            }
            watcher::Event::Delete(secret) => self.observe_deleted(secret),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn start(&self) {
        if self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let cache = self.clone();
        let api = Api::<Secret>::all(self.inner.client.clone());
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
                        Some(Err(err)) => log_watch_error(&err),
                        None => break,
                    },
                }
            }
        });
    }
}

/// Logs a watch failure without anything a decoder quoted from a Secret.
fn log_watch_error(err: &watcher::Error) {
    let quotes_data = matches!(
        err,
        watcher::Error::InitialListFailed(kube::Error::SerdeError(_))
            | watcher::Error::WatchStartFailed(kube::Error::SerdeError(_))
            | watcher::Error::WatchFailed(kube::Error::SerdeError(_))
    );
    if quotes_data {
        tracing::debug!("Secret cache watch: a Secret could not be decoded (values not shown)");
    } else {
        tracing::debug!(error = %crate::controller::ErrorChain(err), "Secret cache watch");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn secret(name: &str, version: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            data: Some([("key".to_owned(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Secret::default()
        }
    }

    fn value(table: &Table, name: &str) -> Option<String> {
        let secret = table.lookup("ns", name)?;
        let data = secret.data.as_ref()?.get("key")?;
        Some(String::from_utf8_lossy(&data.0).into_owned())
    }

    #[test]
    fn answers_only_once_the_first_list_is_complete() {
        let mut table = Table::default();
        table.follow(watcher::Event::Init);
        table.follow(watcher::Event::InitApply(secret("a", "5", "one")));
        assert_eq!(value(&table, "a"), None, "still listing: read live");
        table.follow(watcher::Event::InitDone);
        assert_eq!(value(&table, "a").as_deref(), Some("one"));
        assert_eq!(value(&table, "b"), None, "never seen: read live");
        assert!(table.lookup("other", "a").is_none(), "another namespace");
    }

    #[test]
    fn an_update_replaces_the_secret_and_an_older_version_never_does() {
        let mut table = Table::default();
        table.follow(watcher::Event::Init);
        table.follow(watcher::Event::InitDone);
        table.follow(watcher::Event::Apply(secret("a", "5", "one")));
        assert_eq!(value(&table, "a").as_deref(), Some("one"));
        // A trigger saw the update first; the cache's own watch delivers it afterwards.
        table.apply(&secret("a", "7", "two"), false);
        assert_eq!(value(&table, "a").as_deref(), Some("two"));
        table.follow(watcher::Event::Apply(secret("a", "7", "two")));
        table.follow(watcher::Event::Apply(secret("a", "6", "stale")));
        assert_eq!(value(&table, "a").as_deref(), Some("two"));
    }

    #[test]
    fn a_deleted_secret_is_read_live_and_not_revived_by_an_older_version() {
        let mut table = Table::default();
        table.follow(watcher::Event::Init);
        table.follow(watcher::Event::InitApply(secret("a", "5", "one")));
        table.follow(watcher::Event::InitDone);
        table.follow(watcher::Event::Delete(secret("a", "9", "one")));
        assert_eq!(value(&table, "a"), None);
        table.apply(&secret("a", "8", "one"), false);
        assert_eq!(value(&table, "a"), None, "a late older version");
        table.apply(&secret("a", "9", "one"), false);
        assert_eq!(
            value(&table, "a"),
            None,
            "a trigger's copy of the deleted Secret's last state"
        );
        // Created again.
        table.follow(watcher::Event::Apply(secret("a", "12", "again")));
        assert_eq!(value(&table, "a").as_deref(), Some("again"));
    }

    #[test]
    fn a_relist_drops_what_is_gone_and_keeps_newer_triggers() {
        let mut table = Table::default();
        table.follow(watcher::Event::Init);
        table.follow(watcher::Event::InitApply(secret("gone", "3", "x")));
        table.follow(watcher::Event::InitDone);
        assert!(table.lookup("ns", "gone").is_some());
        table.follow(watcher::Event::Init);
        table.apply(&secret("new", "12", "newer"), false);
        table.follow(watcher::Event::InitApply(secret("new", "10", "older")));
        table.follow(watcher::Event::InitDone);
        assert!(table.lookup("ns", "gone").is_none(), "not in the new list");
        assert_eq!(value(&table, "new").as_deref(), Some("newer"));
    }

    #[test]
    fn keeps_neither_managed_fields_nor_the_applied_copy() {
        let mut applied = secret("a", "1", "one");
        applied.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        applied.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_owned(), "{\"data\":{}}".to_owned()),
                ("kept".to_owned(), "yes".to_owned()),
            ]
            .into(),
        );
        let mut table = Table::default();
        table.follow(watcher::Event::Init);
        table.follow(watcher::Event::InitDone);
        table.apply(&applied, false);
        let kept = table.lookup("ns", "a").unwrap();
        assert!(kept.metadata.managed_fields.is_none());
        let annotations = kept.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations["kept"], "yes");
    }
}
