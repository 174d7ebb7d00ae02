//! Watches: replay the change log from a resourceVersion, then follow live commits.
//!
//! A watcher subscribes to the live feed *before* reading the log, so no commit can fall between the
//! two; anything seen twice is dropped by resourceVersion. A watcher that falls behind the live feed
//! (its buffer overflowed) catches up from the log again, and gets [`StoreError::Gone`] if the log no
//! longer reaches back that far. Bookmarks are only sent after re-reading the log up to the store's
//! head, so a bookmark's version never runs ahead of what the watcher has been sent.

use crate::{ObjectKey, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn code(self) -> i64 {
        match self {
            Self::Added => 0,
            Self::Modified => 1,
            Self::Deleted => 2,
        }
    }

    pub(crate) fn from_code(code: i64) -> Self {
        match code {
            0 => Self::Added,
            2 => Self::Deleted,
            _ => Self::Modified,
        }
    }

    /// The Kubernetes watch event type name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub resource_version: u64,
    pub event_type: EventType,
    pub key: ObjectKey,
    /// The object after the change (for deletions: as it was, with the deletion's resourceVersion).
    pub json: Arc<str>,
}

/// What a watch yields.
#[derive(Clone, Debug)]
pub enum WatchItem {
    /// A change.
    Event(Arc<WatchEvent>),
    /// Every change up to this resourceVersion has been sent.
    Bookmark(u64),
}

/// A running watch. Dropping it stops the watch.
pub struct WatchStream {
    receiver: mpsc::Receiver<Result<WatchItem, StoreError>>,
    task: tokio::task::JoinHandle<()>,
}

impl WatchStream {
    /// The next item; `None` when the store shut down. An `Err` ends the watch.
    pub async fn next(&mut self) -> Option<Result<WatchItem, StoreError>> {
        self.receiver.recv().await
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How many log entries one catch-up read takes.
const CATCH_UP_PAGE: usize = 1000;

pub(crate) fn start(
    store: Store,
    resource: String,
    namespace: Option<String>,
    after: u64,
    bookmarks: Option<Duration>,
) -> Result<WatchStream, StoreError> {
    let compacted = store.compacted();
    if after < compacted {
        return Err(StoreError::Gone {
            requested: after,
            compacted,
        });
    }
    let live = store.subscribe();
    let (sender, receiver) = mpsc::channel(256);
    let follower = Follower {
        store,
        resource,
        namespace,
        last: after,
        sender,
    };
    let task = tokio::spawn(follower.run(live, bookmarks));
    Ok(WatchStream { receiver, task })
}

struct Follower {
    store: Store,
    resource: String,
    namespace: Option<String>,
    /// The newest resourceVersion this watcher has been brought up to.
    last: u64,
    sender: mpsc::Sender<Result<WatchItem, StoreError>>,
}

impl Follower {
    fn wants(&self, event: &WatchEvent) -> bool {
        event.key.resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == event.key.namespace)
    }

    async fn run(
        mut self,
        mut live: broadcast::Receiver<Arc<WatchEvent>>,
        bookmarks: Option<Duration>,
    ) {
        if self.catch_up(None).await.is_err() {
            return;
        }
        // Bookmarks are periodic, not "after quiet": a watch on a quiet kind of a busy store still
        // gets them, so its resourceVersion stays inside the retained log.
        // The period and when the next bookmark is due.
        let mut bookmark = bookmarks.map(|every| (every, tokio::time::Instant::now() + every));
        loop {
            let received = match bookmark {
                Some((every, due)) => match tokio::time::timeout_at(due, live.recv()).await {
                    Ok(received) => received,
                    Err(_due) => {
                        bookmark = Some((every, tokio::time::Instant::now() + every));
                        let head = self.store.head();
                        // The live feed moves `last` with every commit, of any resource: when it
                        // has reached the head there is no log to read (an idle store reads none).
                        if head > self.last && self.catch_up(Some(head)).await.is_err() {
                            return;
                        }
                        if self
                            .sender
                            .send(Ok(WatchItem::Bookmark(self.last)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                },
                None => live.recv().await,
            };
            match received {
                Ok(event) => {
                    if event.resource_version <= self.last {
                        continue;
                    }
                    if self.wants(&event)
                        && self
                            .sender
                            .send(Ok(WatchItem::Event(event.clone())))
                            .await
                            .is_err()
                    {
                        return;
                    }
                    self.last = event.resource_version;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if self.catch_up(None).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Sends every logged change after `self.last` (up to `until` when given, which then becomes
    /// `self.last`). `Err` means the watch is over (receiver gone, or the log no longer reaches back).
    async fn catch_up(&mut self, until: Option<u64>) -> Result<(), ()> {
        loop {
            let compacted = self.store.compacted();
            if self.last < compacted {
                let _ = self
                    .sender
                    .send(Err(StoreError::Gone {
                        requested: self.last,
                        compacted,
                    }))
                    .await;
                return Err(());
            }
            let (resource, namespace, after) =
                (self.resource.clone(), self.namespace.clone(), self.last);
            let page = self
                .store
                .read(move |conn| {
                    Store::read_log(conn, &resource, namespace.as_deref(), after, CATCH_UP_PAGE)
                })
                .await;
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    let _ = self.sender.send(Err(err)).await;
                    return Err(());
                }
            };
            let mut more = page.len() == CATCH_UP_PAGE;
            for event in page {
                if until.is_some_and(|u| event.resource_version > u) {
                    more = false;
                    break;
                }
                self.last = event.resource_version;
                self.sender
                    .send(Ok(WatchItem::Event(Arc::new(event))))
                    .await
                    .map_err(|_| ())?;
            }
            if !more {
                break;
            }
        }
        if let Some(until) = until {
            self.last = self.last.max(until);
        }
        Ok(())
    }
}
