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
//! The table itself is the generic one of [`crate::tables`] (its tests cover versions, tombstones
//! and relists); this module adds a watch error log that never quotes a Secret.
//! Nothing here ever logs a Secret's data, and a watch error that could quote it (a Secret that
//! cannot be decoded) is logged without its message.

use crate::CancellationToken;
use crate::tables::ObjectCache;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::runtime::watcher;

/// Every Secret as last seen, shared by the controllers of one process (cheap to clone): an
/// [`ObjectCache`] of Secrets whose watch failures never quote a Secret.
pub type SecretCache = ObjectCache<Secret>;

impl ObjectCache<Secret> {
    /// A cache that reads Secrets through `client`; its watch starts on first use and stops when
    /// `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        ObjectCache::typed(client, shutdown).with_error_log(log_watch_error)
    }
}

/// Logs a watch failure of `kind` without anything a decoder quoted from an object (also used by
/// the shared stores, any of which may hold Secrets).
pub(crate) fn log_watch_error(kind: &str, err: &watcher::Error) {
    let quotes_data = matches!(
        err,
        watcher::Error::InitialListFailed(kube::Error::SerdeError(_))
            | watcher::Error::WatchStartFailed(kube::Error::SerdeError(_))
            | watcher::Error::WatchFailed(kube::Error::SerdeError(_))
    );
    if quotes_data {
        tracing::debug!(
            kind,
            "cache watch: an object could not be decoded (values not shown)"
        );
    } else {
        tracing::debug!(kind, error = %crate::controller::ErrorChain(err), "cache watch");
    }
}
