//! Durable, versioned object store over SQLite (WAL) with a change log for watches.
//!
//! This is the storage layer of `capstan serve`: a key-value store of JSON objects where every write
//! gets the next value of one global, monotonic `resourceVersion`, every change is appended to a change
//! log in the same transaction, and watchers replay the log from any retained version before following
//! live changes. It knows nothing of Kubernetes semantics (generation, finalizers, owners): the API
//! server builds those on top of its three verbs — create, update with a precondition, delete.
//!
//! Durability: a write is acknowledged only after its transaction has committed with
//! `synchronous=FULL` in WAL mode. One writer thread applies writes in batches (group commit), so many
//! concurrent writers share each fsync; each write in a batch runs in its own savepoint so that one
//! failing precondition does not affect the others.
//!
//! Labels: `metadata.labels` of every object is kept in a label index in the object's transaction,
//! so a list that selects by labels ([`ListQuery::labels`]) reads only the objects it selects.

mod key;
mod labels;
pub mod limits;
mod schema;
mod watch;
mod writer;

pub use key::ObjectKey;
pub use labels::LabelTerm;
pub use watch::{EventType, WatchEvent, WatchItem, WatchStream};

/// How many of a resource's newest changes [`Store::state_at`] looks through.
pub const PAST_STATE_SCAN: i64 = 10_000;

/// An object's state at an earlier resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PastState {
    /// It existed with this value.
    Existed(String),
    /// It had been deleted.
    Absent,
    /// The change log no longer says.
    Unknown,
}

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, oneshot};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Create of a key that exists.
    #[error("{0} already exists")]
    AlreadyExists(ObjectKey),
    /// Update or delete of a key that does not exist.
    #[error("{0} not found")]
    NotFound(ObjectKey),
    /// The precondition's resourceVersion is not the stored one.
    #[error("{key} has been modified: expected resourceVersion {expected}, stored {actual}")]
    Conflict {
        key: ObjectKey,
        expected: u64,
        actual: u64,
    },
    /// A watch asked for changes older than the retained log.
    #[error(
        "resourceVersion {requested} is too old: changes up to {compacted} have been compacted"
    )]
    Gone { requested: u64, compacted: u64 },
    /// The object is not a JSON object with a metadata map.
    #[error("the stored value must be a JSON object")]
    NotAnObject,
    /// SQLite failed.
    #[error("database error")]
    Database(#[from] rusqlite::Error),
    /// Stored bytes are not JSON (the database was altered outside capstan).
    #[error("stored object is not valid JSON")]
    Corrupt(#[from] serde_json::Error),
    /// The object is nested deeper than [`limits::MAX_DEPTH`]; nothing was written.
    #[error("{key} is nested {depth} levels deep; the limit is {limit}")]
    TooDeep {
        key: ObjectKey,
        depth: usize,
        limit: usize,
    },
    /// The serialised object is larger than [`limits::MAX_OBJECT_BYTES`]; nothing was written.
    #[error("{key} is {bytes} bytes serialised; the limit is {limit}")]
    TooLarge {
        key: ObjectKey,
        bytes: usize,
        limit: usize,
    },
    /// The stored row of the key cannot be parsed (written by an older capstan, or altered outside
    /// it); `capstan undecodable --remove` removes such rows.
    #[error("the stored row of {0} cannot be decoded; `capstan undecodable --remove` removes it")]
    Undecodable(ObjectKey),
    /// A purge of a row that decodes: it is an ordinary object, deleted through the API.
    #[error("the stored row of {0} decodes; delete it through the API")]
    Decodable(ObjectKey),
    /// The batch's transaction did not commit; nothing of it was written.
    #[error("commit failed: {0}")]
    CommitFailed(String),
    /// The writer thread is gone (the store is shutting down).
    #[error("the store is shut down")]
    Closed,
    /// Creating the data directory or reading a snapshot failed.
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A predicate a list keeps objects by.
pub type Filter = Box<dyn Fn(&serde_json::Value) -> bool + Send + 'static>;

/// A stored object: its key, the resourceVersion of its last write, and its JSON text (which carries
/// the same resourceVersion in `metadata.resourceVersion`).
#[derive(Clone, Debug)]
pub struct StoredObject {
    pub key: ObjectKey,
    pub resource_version: u64,
    pub json: Arc<str>,
}

impl StoredObject {
    /// The object parsed.
    pub fn value(&self) -> Result<serde_json::Value, StoreError> {
        Ok(serde_json::from_str(&self.json)?)
    }
}

/// The result of a list: a page of objects in key order, the store's resourceVersion when the list
/// was read, and the key to continue after if the page was cut short.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<StoredObject>,
    pub resource_version: u64,
    pub continue_after: Option<(String, String)>,
}

/// What a list reads: objects of `resource` (in `namespace`, or all namespaces), in (namespace,
/// name) order, after the key `after`, that satisfy every label term (answered by the label index,
/// without parsing) and then `keep` (on the parsed object), at most `limit` of them.
pub struct ListQuery {
    pub resource: String,
    pub namespace: Option<String>,
    pub after: Option<(String, String)>,
    pub limit: Option<usize>,
    pub labels: Vec<LabelTerm>,
    pub keep: Option<Filter>,
}

impl ListQuery {
    /// Every object of `resource` in `namespace` (or all namespaces).
    pub fn new(resource: impl Into<String>, namespace: Option<String>) -> Self {
        Self {
            resource: resource.into(),
            namespace,
            after: None,
            limit: None,
            labels: Vec::new(),
            keep: None,
        }
    }
}

/// Tuning of a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// How many change-log entries to keep for watch resumption.
    pub retained_events: u64,
    /// How many writes one transaction may group.
    pub max_batch: usize,
    /// Read connections, opened with the store and kept: at most this many reads run at once, and
    /// further reads wait for a connection. Opening one per read beyond the pool cost more than the
    /// wait (a fresh connection configures itself and reads the schema before its first query, and
    /// its page cache starts cold).
    pub readers: usize,
    /// The page cache of each connection, in KiB (SQLite's own default is 2,048). A store holding
    /// few objects, of which a process opens many, keeps it small: it is most of what an idle
    /// connection costs once its pages were read.
    pub page_cache_kib: u32,
    /// How many committed changes are buffered for live watchers; a watcher that falls further
    /// behind catches up from the change log. The buffer is allocated whole when the store opens,
    /// and it keeps the last `event_buffer` changed objects alive until they are overwritten.
    pub event_buffer: usize,
    /// How many prepared statements each connection keeps for reuse (each holds its compiled
    /// program, tens of KiB for a list): a store that serves few requests keeps few.
    pub statement_cache: usize,
}

impl StoreOptions {
    fn tuning(&self) -> schema::ConnectionTuning {
        schema::ConnectionTuning {
            page_cache_kib: self.page_cache_kib,
            statement_cache: self.statement_cache,
        }
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retained_events: 100_000,
            max_batch: 512,
            readers: 4,
            page_cache_kib: 2_048,
            event_buffer: 4_096,
            statement_cache: 16,
        }
    }
}

/// The object store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    tuning: schema::ConnectionTuning,
    writes: std::sync::mpsc::SyncSender<writer::Request>,
    readers: Mutex<Vec<Connection>>,
    /// One permit per read connection: a read holds one while it runs.
    read_slots: Arc<tokio::sync::Semaphore>,
    /// Read connections opened since the store opened (the pool's, and any reopened to replace
    /// one lost to a failed read).
    read_connections_opened: std::sync::atomic::AtomicUsize,
    events: broadcast::Sender<Arc<WatchEvent>>,
    head: Arc<AtomicU64>,
    compacted: Arc<AtomicU64>,
    /// Rows found undecodable at open and not rewritten since: lists and watches skip them.
    undecodable: Arc<Mutex<BTreeSet<ObjectKey>>>,
    /// The resourceVersion of each resource's newest write since the store opened.
    last_changes: Arc<Mutex<HashMap<String, u64>>>,
    /// The head when the store opened: a resource not written since changed at or before it.
    opened_at: u64,
}

impl Store {
    /// Opens (creating if needed) the store in `path` (a SQLite file).
    pub fn open(path: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StoreError::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        // The database holds Secrets: created owner-only before SQLite opens it, and SQLite gives
        // the WAL and shared-memory files the database file's mode.
        create_private_file(path)?;
        let conn = schema::open_writer(path, options.tuning())?;
        let head: u64 = schema::read_meta(&conn, "head")?;
        let compacted: u64 = schema::read_meta(&conn, "compacted")?;
        let head = Arc::new(AtomicU64::new(head));
        let compacted = Arc::new(AtomicU64::new(compacted));
        let (events, _) = broadcast::channel(options.event_buffer.max(1));
        // The queue is allocated whole when the store opens: room for one batch while another
        // commits (a writer finding it full waits on a blocking thread until the commit is done).
        let (writes, requests) = std::sync::mpsc::sync_channel(options.max_batch.max(1));
        let mut readers = Vec::with_capacity(options.readers);
        for _ in 0..options.readers {
            readers.push(schema::open_reader(path, options.tuning())?);
        }
        let undecodable = match readers.first() {
            Some(conn) => scan_undecodable(conn)?,
            None => scan_undecodable(&schema::open_reader(path, options.tuning())?)?,
        };
        for key in &undecodable {
            // The key only: the row's text may hold secrets.
            tracing::error!(
                resource = %key.resource,
                namespace = %key.namespace,
                name = %key.name,
                "a stored object cannot be decoded; it is skipped by lists and watches \
                 (`capstan undecodable` lists such rows, `--remove` removes them)"
            );
        }
        let undecodable = Arc::new(Mutex::new(undecodable));
        let last_changes = Arc::new(Mutex::new(HashMap::new()));
        let opened_at = head.load(Ordering::Acquire);
        writer::spawn(writer::Writer {
            conn,
            requests,
            events: events.clone(),
            head: head.clone(),
            compacted: compacted.clone(),
            retained_events: options.retained_events,
            max_batch: options.max_batch,
            undecodable: undecodable.clone(),
            last_changes: last_changes.clone(),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                tuning: options.tuning(),
                writes,
                read_slots: Arc::new(tokio::sync::Semaphore::new(options.readers.max(1))),
                read_connections_opened: std::sync::atomic::AtomicUsize::new(readers.len()),
                readers: Mutex::new(readers),
                events,
                head,
                compacted,
                undecodable,
                last_changes,
                opened_at,
            }),
        })
    }

    /// Keys of stored rows that cannot be decoded (found when the store was opened, not rewritten
    /// or removed since).
    pub fn undecodable(&self) -> Vec<ObjectKey> {
        self.inner
            .undecodable
            .lock()
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Removes the row of `key` if its stored text cannot be decoded; an ordinary object is refused
    /// with [`StoreError::Decodable`]. Watchers see a deletion carrying only the key.
    pub async fn remove_undecodable(&self, key: ObjectKey) -> Result<StoredObject, StoreError> {
        self.write(writer::Op::Purge { key }).await
    }

    fn is_undecodable(&self, key: &ObjectKey) -> bool {
        self.inner
            .undecodable
            .lock()
            .is_ok_and(|keys| !keys.is_empty() && keys.contains(key))
    }

    /// The resourceVersion of the last committed write.
    pub fn head(&self) -> u64 {
        self.inner.head.load(Ordering::Acquire)
    }

    /// The newest resourceVersion whose change has been dropped from the log.
    pub fn compacted(&self) -> u64 {
        self.inner.compacted.load(Ordering::Acquire)
    }

    /// Creates `key` with `value`; fails if it exists. `value.metadata.resourceVersion` is set.
    pub async fn create(
        &self,
        key: ObjectKey,
        value: serde_json::Value,
    ) -> Result<StoredObject, StoreError> {
        self.write(writer::Op::Create { key, value }).await
    }

    /// Replaces `key` with `value`; fails if it does not exist or, with `expected`, if its stored
    /// resourceVersion differs.
    pub async fn update(
        &self,
        key: ObjectKey,
        value: serde_json::Value,
        expected: Option<u64>,
    ) -> Result<StoredObject, StoreError> {
        self.write(writer::Op::Update {
            key,
            value,
            expected,
        })
        .await
    }

    /// Deletes `key`; fails if it does not exist or, with `expected`, if its resourceVersion differs.
    /// Returns the object as it was, with the resourceVersion of the deletion.
    pub async fn delete(
        &self,
        key: ObjectKey,
        expected: Option<u64>,
    ) -> Result<StoredObject, StoreError> {
        self.write(writer::Op::Delete { key, expected }).await
    }

    async fn write(&self, op: writer::Op) -> Result<StoredObject, StoreError> {
        let (reply, answer) = oneshot::channel();
        // The queue is bounded: a full one blocks, which is the back-pressure we want, but not on
        // the async runtime's threads — only then is the send handed to a blocking thread.
        match self.inner.writes.try_send(writer::Request { op, reply }) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(request)) => {
                let writes = self.inner.writes.clone();
                tokio::task::spawn_blocking(move || writes.send(request).map_err(|_| ()))
                    .await
                    .map_err(|_| StoreError::Closed)?
                    .map_err(|_| StoreError::Closed)?;
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Err(StoreError::Closed),
        }
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Reads one object. A row that cannot be decoded is [`StoreError::Undecodable`].
    pub async fn get(&self, key: ObjectKey) -> Result<Option<StoredObject>, StoreError> {
        if self.is_undecodable(&key) {
            return Err(StoreError::Undecodable(key));
        }
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT rv, value FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            )?
            .query_row(params![key.resource, key.namespace, key.name], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })
            .optional()
            .map(|found| {
                found.map(|(rv, json)| StoredObject {
                    key,
                    resource_version: u64::try_from(rv).unwrap_or_default(),
                    json: json.into(),
                })
            })
            .map_err(StoreError::from)
        })
        .await
    }

    /// Lists objects of `resource` (in `namespace`, or all namespaces), in (namespace, name) order,
    /// starting after `after`, keeping those `keep` accepts, at most `limit` of them.
    ///
    /// Without a filter, objects are returned as stored text without being parsed: large lists
    /// stay cheap in memory and time. Rows that cannot be decoded are skipped.
    pub async fn list(
        &self,
        resource: String,
        namespace: Option<String>,
        after: Option<(String, String)>,
        limit: Option<usize>,
        keep: Option<Filter>,
    ) -> Result<ListPage, StoreError> {
        self.query(ListQuery {
            resource,
            namespace,
            after,
            limit,
            labels: Vec::new(),
            keep,
        })
        .await
    }

    /// Lists what `query` selects: see [`ListQuery`]. Objects are parsed only when the query has a
    /// [`ListQuery::keep`] filter, and then only those that satisfy its label terms.
    pub async fn query(&self, query: ListQuery) -> Result<ListPage, StoreError> {
        let ListQuery {
            resource,
            namespace,
            after,
            limit,
            labels,
            keep,
        } = query;
        let undecodable = self.inner.undecodable.clone();
        self.read(move |conn| {
            let skipped = undecodable
                .lock()
                .map(|keys| {
                    keys.iter()
                        .filter(|k| k.resource == resource)
                        .map(|k| (k.namespace.clone(), k.name.clone()))
                        .collect::<BTreeSet<_>>()
                })
                .unwrap_or_default();
            let tx = conn.unchecked_transaction()?;
            let head: u64 = schema::read_meta(&tx, "head")?;
            let (after_ns, after_name) = after.unwrap_or_default();
            let sql = labels::list_sql(
                &resource,
                namespace.as_deref(),
                (&after_ns, &after_name),
                &labels,
            );
            let mut stmt = tx.prepare_cached(&sql.text)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(sql.params))?;
            let mut items = Vec::new();
            let mut continue_after = None;
            while let Some(row) = rows.next()? {
                let namespace: String = row.get(0)?;
                let name: String = row.get(1)?;
                if !skipped.is_empty() && skipped.contains(&(namespace.clone(), name.clone())) {
                    continue;
                }
                let json: String = row.get(3)?;
                if let Some(keep) = &keep {
                    match serde_json::from_str(&json) {
                        Ok(value) if keep(&value) => {}
                        Ok(_) => continue,
                        Err(_) => {
                            // Altered outside capstan since the store was opened.
                            tracing::warn!(%resource, %namespace, %name, "skipping a stored object that cannot be decoded");
                            continue;
                        }
                    }
                }
                let key = ObjectKey {
                    resource: resource.clone(),
                    namespace,
                    name,
                };
                if limit.is_some_and(|l| items.len() >= l) {
                    continue_after = items
                        .last()
                        .map(|last: &StoredObject| (last.key.namespace.clone(), last.key.name.clone()));
                    break;
                }
                items.push(StoredObject {
                    key,
                    resource_version: u64::try_from(row.get::<_, i64>(2)?).unwrap_or_default(),
                    json: json.into(),
                });
            }
            drop(rows);
            drop(stmt);
            tx.finish()?;
            Ok(ListPage {
                items,
                resource_version: head,
                continue_after,
            })
        })
        .await
    }

    /// Counts objects per resource (for metrics and `capstan bench`).
    pub async fn count(&self, resource: String) -> Result<u64, StoreError> {
        self.read(move |conn| {
            let n: i64 = conn
                .prepare_cached("SELECT COUNT(*) FROM objects WHERE resource = ?1")?
                .query_row([resource], |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or_default())
        })
        .await
    }

    /// Counts the objects of `resource` in `namespace` (for quotas: answered by the primary key's
    /// range, without reading the objects).
    pub async fn count_in(&self, resource: String, namespace: String) -> Result<u64, StoreError> {
        self.read(move |conn| {
            let n: i64 = conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM objects WHERE resource = ?1 AND namespace = ?2",
                )?
                .query_row(params![resource, namespace], |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or_default())
        })
        .await
    }

    /// Follows changes of `resource` (in `namespace`, or all) after resourceVersion `after`.
    /// Fails with [`StoreError::Gone`] if that version is older than the retained log.
    /// With `bookmarks`, a [`WatchItem::Bookmark`] is sent that often, however busy the store: every
    /// change of the watched resource up to the bookmark's version has been delivered.
    pub fn watch(
        &self,
        resource: String,
        namespace: Option<String>,
        after: u64,
        bookmarks: Option<std::time::Duration>,
    ) -> Result<WatchStream, StoreError> {
        watch::start(self.clone(), resource, namespace, after, bookmarks)
    }

    /// Read connections open and idle in the pool (for metrics and tests).
    pub fn idle_read_connections(&self) -> usize {
        self.inner.readers.lock().map_or(0, |pool| pool.len())
    }

    /// A resourceVersion that changes whenever `resource` is written (created, updated or deleted
    /// objects of it): the newest such write's, or, before the first since the store opened, the
    /// head at opening. A value read before a read of the resource's objects and unchanged after it
    /// means nothing was written since that read began (caches of rarely written kinds key on it).
    pub fn last_change(&self, resource: &str) -> u64 {
        self.inner
            .last_changes
            .lock()
            .ok()
            .and_then(|changes| changes.get(resource).copied())
            .unwrap_or(self.inner.opened_at)
    }

    /// Read connections opened since the store opened (for metrics and tests).
    pub fn read_connections_opened(&self) -> usize {
        self.inner.read_connections_opened.load(Ordering::Relaxed)
    }

    /// What `key` was at resourceVersion `at`, as far as the change log tells: the last value written
    /// at or before `at` within the newest [`PAST_STATE_SCAN`] changes of its resource. A watch that
    /// resumes with a selector needs this to know whether the client had the object.
    pub async fn state_at(&self, key: ObjectKey, at: u64) -> Result<PastState, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT type, value FROM (
                     SELECT type, namespace, name, value, rv FROM events
                     WHERE resource = ?1 AND rv <= ?2 ORDER BY rv DESC LIMIT ?5)
                 WHERE namespace = ?3 AND name = ?4 ORDER BY rv DESC LIMIT 1",
            )?;
            let found = stmt
                .query_row(
                    params![
                        key.resource,
                        i64::try_from(at).unwrap_or(i64::MAX),
                        key.namespace,
                        key.name,
                        PAST_STATE_SCAN
                    ],
                    |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
                )
                .optional()?;
            Ok(match found {
                None => PastState::Unknown,
                Some((code, _)) if EventType::from_code(code) == EventType::Deleted => {
                    PastState::Absent
                }
                Some((_, value)) => PastState::Existed(value),
            })
        })
        .await
    }

    /// Writes a consistent snapshot of the whole store to `target` while the store keeps serving.
    pub async fn backup(&self, target: PathBuf) -> Result<(), StoreError> {
        self.read(move |conn| snapshot_into(conn, &target)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.inner.events.subscribe()
    }

    /// Runs `f` on a pooled read connection off the async runtime, once one is free.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        // Waiting here, not on a blocking thread: a burst of reads queues without holding threads.
        let slot = self
            .inner
            .read_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let pooled = inner.readers.lock().map_err(|_| StoreError::Closed)?.pop();
            let conn = match pooled {
                Some(conn) => conn,
                // The pool lost a connection to a read that panicked: open its replacement.
                None => {
                    inner
                        .read_connections_opened
                        .fetch_add(1, Ordering::Relaxed);
                    schema::open_reader(&inner.path, inner.tuning)?
                }
            };
            let result = f(&conn);
            if let Ok(mut pool) = inner.readers.lock() {
                pool.push(conn);
            }
            result
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    /// Reads the change log after `after` for `resource`, up to `limit` entries (watch catch-up).
    pub(crate) fn read_log(
        conn: &Connection,
        resource: &str,
        namespace: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<WatchEvent>, StoreError> {
        let mut stmt = conn.prepare_cached(
            "SELECT rv, type, namespace, name, value FROM events
             WHERE rv > ?1 AND resource = ?2 AND (?3 IS NULL OR namespace = ?3) ORDER BY rv LIMIT ?4",
        )?;
        let rows = stmt.query_map(
            params![
                i64::try_from(after).unwrap_or(i64::MAX),
                resource,
                namespace,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |row| {
                Ok(WatchEvent {
                    resource_version: u64::try_from(row.get::<_, i64>(0)?).unwrap_or_default(),
                    event_type: EventType::from_code(row.get::<_, i64>(1)?),
                    key: ObjectKey {
                        resource: resource.to_owned(),
                        namespace: row.get(2)?,
                        name: row.get(3)?,
                    },
                    json: Arc::from(row.get::<_, String>(4)?),
                })
            },
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

/// Finds the rows whose text cannot be decoded: one pass over the table, no value kept.
fn scan_undecodable(conn: &Connection) -> Result<BTreeSet<ObjectKey>, StoreError> {
    let mut stmt = conn.prepare("SELECT resource, namespace, name, value FROM objects")?;
    let mut rows = stmt.query([])?;
    let mut found = BTreeSet::new();
    while let Some(row) = rows.next()? {
        let text = row.get_ref(3)?.as_str().unwrap_or_default();
        if !limits::decodes(text) {
            found.insert(ObjectKey {
                resource: row.get(0)?,
                namespace: row.get(1)?,
                name: row.get(2)?,
            });
        }
    }
    Ok(found)
}

/// Opens a read-only connection for tools (`capstan get` against a stopped server's data dir).
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    Ok(Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?)
}

/// Writes a consistent snapshot of the store file at `database` to `target` without opening it for
/// writing: safe while a server is running on it (SQLite gives the copy one read transaction).
pub fn backup_file(database: &Path, target: &Path) -> Result<(), StoreError> {
    if !database.exists() {
        return Err(StoreError::Io {
            path: database.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no store here"),
        });
    }
    let conn = schema::open_reader(database, StoreOptions::default().tuning())?;
    snapshot_into(&conn, target)
}

/// Writes a snapshot of the database of `conn` to `target`. The snapshot holds Secrets: `target`
/// is created owner-only and empty first (SQLite writes into an empty file), so no moment exists in
/// which another user could open it.
fn snapshot_into(conn: &Connection, target: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: target.to_path_buf(),
        source,
    };
    if target.exists() {
        std::fs::remove_file(target).map_err(io)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target)
        .map_err(io)?;
    conn.execute("VACUUM INTO ?1", [target.to_string_lossy().into_owned()])?;
    Ok(())
}

/// Creates `path` owner-only (0600) if it does not exist. An existing file keeps its mode: a
/// group- or world-readable one is reported, never changed behind the owner's back.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{mode:o}"),
                    "the store holds Secrets but other users may read it; `chmod 600` it (and its -wal and -shm files)"
                );
            }
            Ok(())
        }
        Err(err) => Err(io(err)),
    }
}
