//! The single writer: applies writes in batches, one transaction per batch (group commit), one
//! savepoint per write, then acknowledges and publishes the committed changes in resourceVersion order.
//! An object's label index rows are written in its savepoint, so the index never disagrees with the
//! objects a reader sees.

use crate::watch::{EventType, WatchEvent};
use crate::{ObjectKey, StoreError, StoredObject};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, oneshot};

/// One write.
pub(crate) enum Op {
    Create {
        key: ObjectKey,
        value: serde_json::Value,
    },
    Update {
        key: ObjectKey,
        value: serde_json::Value,
        expected: Option<u64>,
    },
    Delete {
        key: ObjectKey,
        expected: Option<u64>,
    },
    /// Removes a row whose stored text cannot be parsed; refuses one that can.
    Purge { key: ObjectKey },
}

/// A write and where to send its outcome.
pub(crate) struct Request {
    pub op: Op,
    pub reply: oneshot::Sender<Result<StoredObject, StoreError>>,
}

pub(crate) struct Writer {
    pub conn: Connection,
    pub requests: std::sync::mpsc::Receiver<Request>,
    pub events: broadcast::Sender<Arc<WatchEvent>>,
    pub head: Arc<AtomicU64>,
    pub compacted: Arc<AtomicU64>,
    pub retained_events: u64,
    pub max_batch: usize,
    /// Keys of rows that could not be parsed when the store was opened; a committed write of one
    /// replaces (or removes) the bad row, so it leaves the set.
    pub undecodable: Arc<Mutex<BTreeSet<ObjectKey>>>,
    /// The resourceVersion of each resource's newest committed write.
    pub last_changes: Arc<Mutex<HashMap<String, u64>>>,
}

pub(crate) fn spawn(writer: Writer) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("capstan-store-writer".into())
        .spawn(move || writer.run())
        .map(|_| ())
        .map_err(|source| StoreError::Io {
            path: "writer thread".into(),
            source,
        })
}

impl Writer {
    fn run(mut self) {
        // Ends when every Store handle (and so every sender) is dropped.
        while let Ok(first) = self.requests.recv() {
            let mut batch = vec![first];
            while batch.len() < self.max_batch {
                match self.requests.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn commit(&mut self, batch: Vec<Request>) {
        let start_head = self.head.load(Ordering::Acquire);
        let outcome = apply_batch(&mut self.conn, &batch, start_head, self.retained_events);
        match outcome {
            Ok((results, head, compacted)) => {
                self.head.store(head, Ordering::Release);
                self.compacted.store(compacted, Ordering::Release);
                if let Ok(mut undecodable) = self.undecodable.lock()
                    && !undecodable.is_empty()
                {
                    for result in results.iter().flatten() {
                        undecodable.remove(&result.0.key);
                    }
                }
                // Before any reply: a writer that got its answer finds its write counted.
                if let Ok(mut last_changes) = self.last_changes.lock() {
                    for (_, event) in results.iter().flatten() {
                        let resource = &event.key.resource;
                        match last_changes.get_mut(resource) {
                            Some(rv) => *rv = event.resource_version,
                            None => {
                                last_changes.insert(resource.clone(), event.resource_version);
                            }
                        }
                    }
                }
                for (request, result) in batch.into_iter().zip(results) {
                    match result {
                        Ok((object, event)) => {
                            // No receivers is fine: nobody is watching.
                            let _ = self.events.send(Arc::new(event));
                            let _ = request.reply.send(Ok(object));
                        }
                        Err(err) => {
                            let _ = request.reply.send(Err(err));
                        }
                    }
                }
            }
            Err(err) => {
                tracing::error!(error = %err, "store commit failed; the batch was not written");
                let message = err.to_string();
                for request in batch {
                    let _ = request
                        .reply
                        .send(Err(StoreError::CommitFailed(message.clone())));
                }
            }
        }
    }
}

type WriteOutcome = Result<(StoredObject, WatchEvent), StoreError>;

fn apply_batch(
    conn: &mut Connection,
    batch: &[Request],
    start_head: u64,
    retained_events: u64,
) -> Result<(Vec<WriteOutcome>, u64, u64), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut head = start_head;
    let mut results = Vec::with_capacity(batch.len());
    for request in batch {
        // The savepoint's statements are prepared once and kept (rusqlite's `Savepoint` parses its
        // SQL anew for every write). A failure of one of them ends the batch: `tx` is dropped
        // uncommitted, so SQLite rolls all of it back.
        tx.prepare_cached("SAVEPOINT one_write")?.execute([])?;
        match apply_one(&tx, &request.op, head + 1) {
            Ok(done) => {
                tx.prepare_cached("RELEASE one_write")?.execute([])?;
                head += 1;
                results.push(Ok(done));
            }
            Err(err) => {
                tx.prepare_cached("ROLLBACK TO one_write")?.execute([])?;
                tx.prepare_cached("RELEASE one_write")?.execute([])?;
                results.push(Err(err));
            }
        }
    }
    let mut compacted: u64 = crate::schema::read_meta(&tx, "compacted")?;
    if head != start_head {
        tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'head'")?
            .execute([to_sql(head)])?;
        // Compact in steps of a tenth of the retention so the delete is amortised.
        let floor = head.saturating_sub(retained_events);
        if floor > compacted + retained_events / 10 {
            tx.prepare_cached("DELETE FROM events WHERE rv <= ?1")?
                .execute([to_sql(floor)])?;
            tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'compacted'")?
                .execute([to_sql(floor)])?;
            compacted = floor;
        }
    }
    tx.commit()?;
    Ok((results, head, compacted))
}

fn to_sql(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The stored resourceVersion of `key`, if it exists.
fn stored_rv(conn: &Connection, key: &ObjectKey) -> Result<Option<u64>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT rv FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        )?
        .query_row(params![key.resource, key.namespace, key.name], |row| {
            row.get::<_, i64>(0)
        })
        .optional()?
        .map(|rv| u64::try_from(rv).unwrap_or_default()))
}

/// The stored resourceVersion and text of `key`, if it exists (a deletion's event carries the
/// text).
fn stored(conn: &Connection, key: &ObjectKey) -> Result<Option<(u64, String)>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT rv, value FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        )?
        .query_row(params![key.resource, key.namespace, key.name], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })
        .optional()?
        .map(|(rv, v)| (u64::try_from(rv).unwrap_or_default(), v)))
}

/// Checks the bounds of [`crate::limits`], sets `metadata.resourceVersion` and returns the
/// serialised object.
fn stamp(key: &ObjectKey, mut value: serde_json::Value, rv: u64) -> Result<String, StoreError> {
    let depth = crate::limits::depth(&value);
    if depth > crate::limits::MAX_DEPTH {
        return Err(StoreError::TooDeep {
            key: key.clone(),
            depth,
            limit: crate::limits::MAX_DEPTH,
        });
    }
    let object = value.as_object_mut().ok_or(StoreError::NotAnObject)?;
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let metadata = metadata.as_object_mut().ok_or(StoreError::NotAnObject)?;
    metadata.insert(
        "resourceVersion".into(),
        serde_json::Value::String(rv.to_string()),
    );
    let json = serde_json::to_string(&value)?;
    if json.len() > crate::limits::MAX_OBJECT_BYTES {
        return Err(StoreError::TooLarge {
            key: key.clone(),
            bytes: json.len(),
            limit: crate::limits::MAX_OBJECT_BYTES,
        });
    }
    Ok(json)
}

/// What a deletion event carries: the object as it was, or, when its stored text cannot be parsed,
/// an object holding only its identity (so watchers still learn that the key is gone).
fn tombstone(key: &ObjectKey, old: &str, rv: u64) -> Result<String, StoreError> {
    match serde_json::from_str(old) {
        Ok(value) => stamp(key, value, rv),
        Err(_) => {
            let mut metadata = serde_json::Map::new();
            metadata.insert("name".into(), key.name.clone().into());
            if !key.namespace.is_empty() {
                metadata.insert("namespace".into(), key.namespace.clone().into());
            }
            stamp(
                key,
                serde_json::Value::Object(
                    [("metadata".to_owned(), serde_json::Value::Object(metadata))]
                        .into_iter()
                        .collect(),
                ),
                rv,
            )
        }
    }
}

fn apply_one(conn: &Connection, op: &Op, rv: u64) -> WriteOutcome {
    let (key, event_type, json) = match op {
        Op::Create { key, value } => {
            if stored_rv(conn, key)?.is_some() {
                return Err(StoreError::AlreadyExists(key.clone()));
            }
            let json = stamp(key, value.clone(), rv)?;
            conn.prepare_cached(
                "INSERT INTO objects (resource, namespace, name, rv, value) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![key.resource, key.namespace, key.name, to_sql(rv), json])?;
            crate::labels::write(conn, key, &crate::labels::labels_of(value))?;
            (key, EventType::Added, json)
        }
        Op::Update {
            key,
            value,
            expected,
        } => {
            let actual = stored_rv(conn, key)?.ok_or_else(|| StoreError::NotFound(key.clone()))?;
            check(key, *expected, actual)?;
            let json = stamp(key, value.clone(), rv)?;
            conn.prepare_cached(
                "UPDATE objects SET rv = ?4, value = ?5 WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
            )?
            .execute(params![key.resource, key.namespace, key.name, to_sql(rv), json])?;
            crate::labels::write(conn, key, &crate::labels::labels_of(value))?;
            (key, EventType::Modified, json)
        }
        Op::Delete { key, expected } => {
            let (actual, old) =
                stored(conn, key)?.ok_or_else(|| StoreError::NotFound(key.clone()))?;
            check(key, *expected, actual)?;
            delete_object(conn, key)?;
            crate::labels::remove(conn, key)?;
            let json = tombstone(key, &old, rv)?;
            (key, EventType::Deleted, json)
        }
        Op::Purge { key } => {
            let (_, old) = stored(conn, key)?.ok_or_else(|| StoreError::NotFound(key.clone()))?;
            if crate::limits::decodes(&old) {
                return Err(StoreError::Decodable(key.clone()));
            }
            delete_object(conn, key)?;
            crate::labels::remove(conn, key)?;
            let json = tombstone(key, &old, rv)?;
            (key, EventType::Deleted, json)
        }
    };
    conn.prepare_cached(
        "INSERT INTO events (rv, type, resource, namespace, name, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![to_sql(rv), event_type.code(), key.resource, key.namespace, key.name, json])?;
    let json: Arc<str> = json.into();
    Ok((
        StoredObject {
            key: key.clone(),
            resource_version: rv,
            json: json.clone(),
        },
        WatchEvent {
            resource_version: rv,
            event_type,
            key: key.clone(),
            json,
        },
    ))
}

fn delete_object(conn: &Connection, key: &ObjectKey) -> Result<(), StoreError> {
    conn.prepare_cached(
        "DELETE FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
    )?
    .execute(params![key.resource, key.namespace, key.name])?;
    Ok(())
}

fn check(key: &ObjectKey, expected: Option<u64>, actual: u64) -> Result<(), StoreError> {
    match expected {
        Some(expected) if expected != actual => Err(StoreError::Conflict {
            key: key.clone(),
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}
