//! The SQLite schema and connection set-up.
//!
//! `objects` holds the current state, `events` the change log (one row per write, in resourceVersion
//! order), `labels` the label index (one row per label of each object, written in the object's
//! transaction; see [`crate::labels`]), `meta` the store's counters (`head`: last resourceVersion;
//! `compacted`: newest version no longer in the log; `schema`: the layout's version). WAL mode lets readers proceed while the writer commits; `synchronous=FULL` makes
//! a commit durable before it is acknowledged.

use crate::StoreError;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::Path;
use std::time::Duration;

const DDL: &str = "
CREATE TABLE IF NOT EXISTS objects (
    resource  TEXT    NOT NULL,
    namespace TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    rv        INTEGER NOT NULL,
    value     TEXT    NOT NULL,
    PRIMARY KEY (resource, namespace, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    rv        INTEGER PRIMARY KEY,
    type      INTEGER NOT NULL,
    resource  TEXT    NOT NULL,
    namespace TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    value     TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_resource ON events (resource, rv);
CREATE TABLE IF NOT EXISTS labels (
    resource  TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_value ON labels (resource, key, value, namespace, name);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (key, value) VALUES ('head', 0), ('compacted', 0), ('schema', 2);
";

/// What each connection of a store keeps in memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionTuning {
    /// The page cache, in KiB.
    pub page_cache_kib: u32,
    /// How many prepared statements are kept for reuse.
    pub statement_cache: usize,
}

fn configure(conn: &Connection, tuning: ConnectionTuning) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    // A negative cache_size is a size in KiB rather than a count of pages.
    conn.pragma_update(None, "cache_size", -i64::from(tuning.page_cache_kib.max(1)))?;
    conn.set_prepared_statement_cache_capacity(tuning.statement_cache);
    Ok(())
}

/// The writer's own statements (objects, labels, change log, counters and each write's savepoint:
/// 16), which it runs on every write: its cache holds them all, with room to spare, whatever the
/// readers keep, or each write would compile them again.
pub(crate) const WRITER_STATEMENTS: usize = 24;

/// The layout version this code writes: 2 added the label index.
const SCHEMA: u64 = 2;

/// The one read-write connection, owned by the writer thread. A store of an older layout is brought
/// up to date in one transaction (the label index is filled from the stored objects).
pub(crate) fn open_writer(path: &Path, tuning: ConnectionTuning) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path)?;
    configure(
        &conn,
        ConnectionTuning {
            statement_cache: tuning.statement_cache.max(WRITER_STATEMENTS),
            ..tuning
        },
    )?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(DDL)?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if read_meta(&tx, "schema")? < SCHEMA {
        let indexed = crate::labels::fill(&tx)?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema'",
            [i64::try_from(SCHEMA).unwrap_or(i64::MAX)],
        )?;
        tracing::info!(objects = indexed, "the store's label index was built");
    }
    tx.commit()?;
    Ok(conn)
}

/// A read-only connection for the reader pool.
pub(crate) fn open_reader(path: &Path, tuning: ConnectionTuning) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    configure(&conn, tuning)?;
    Ok(conn)
}

/// Reads one counter of the `meta` table.
pub(crate) fn read_meta(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    let value: Option<i64> = conn
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?;
    Ok(value
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn tuning(page_cache_kib: u32) -> ConnectionTuning {
        ConnectionTuning {
            page_cache_kib,
            statement_cache: 16,
        }
    }

    fn cache_size(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA cache_size", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn every_connection_gets_the_page_cache_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let writer = open_writer(&path, tuning(256)).unwrap();
        let reader = open_reader(&path, tuning(128)).unwrap();
        assert_eq!(cache_size(&writer), -256);
        assert_eq!(cache_size(&reader), -128);
        // Zero would mean "no cache" to SQLite's reckoning of pages; the smallest honoured is 1 KiB.
        assert_eq!(cache_size(&open_reader(&path, tuning(0)).unwrap()), -1);
    }

    #[test]
    fn sqlite_is_built_for_many_small_connections() {
        // `.cargo/config.toml` sets it: the default (100 slots of 1,200 bytes, all touched when a
        // connection opens) made every connection cost 120 KB, and with simulated workload
        // clusters the process holds a few connections per cluster.
        let dir = tempfile::tempdir().unwrap();
        let conn = open_writer(&dir.path().join("state.db"), tuning(64)).unwrap();
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            options.iter().any(|o| o == "DEFAULT_LOOKASIDE=1200,10"),
            "{options:?}"
        );
        // Nor a first page-cache allocation of 20 pages, whatever the cache size.
        assert!(
            options.iter().any(|o| o == "DEFAULT_PCACHE_INITSZ=0"),
            "{options:?}"
        );
        // Nor a process-wide mutex around every allocation to keep memory statistics.
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }
}
