//! Store semantics against a real SQLite database on disk: preconditions, resourceVersion order,
//! pagination, watch replay and resume, compaction (Gone), group commit under concurrency, backup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_store::{EventType, ObjectKey, Store, StoreError, StoreOptions, WatchItem};
use serde_json::json;
use std::time::Duration;

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap()
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("cluster.x-k8s.io/clusters", "default", name)
}

fn obj(name: &str, n: u64) -> serde_json::Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": name, "namespace": "default"}, "spec": {"n": n}})
}

#[tokio::test]
async fn writes_get_increasing_versions_and_preconditions_hold() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let a = store.create(key("a"), obj("a", 1)).await.unwrap();
    let b = store.create(key("b"), obj("b", 1)).await.unwrap();
    assert!(b.resource_version > a.resource_version);
    assert_eq!(
        a.value().unwrap()["metadata"]["resourceVersion"],
        a.resource_version.to_string()
    );
    assert!(matches!(
        store.create(key("a"), obj("a", 2)).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let stale = a.resource_version;
    let a2 = store
        .update(key("a"), obj("a", 2), Some(stale))
        .await
        .unwrap();
    assert!(matches!(
        store.update(key("a"), obj("a", 3), Some(stale)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store.update(key("zz"), obj("zz", 1), None).await,
        Err(StoreError::NotFound(_))
    ));
    let gone = store
        .delete(key("a"), Some(a2.resource_version))
        .await
        .unwrap();
    assert!(gone.resource_version > a2.resource_version);
    assert!(store.get(key("a")).await.unwrap().is_none());
    assert_eq!(store.head(), gone.resource_version);
}

#[tokio::test]
async fn concurrent_conflicting_updates_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let base = store.create(key("c"), obj("c", 0)).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..16 {
        let store = store.clone();
        let rv = base.resource_version;
        tasks.push(tokio::spawn(async move {
            store.update(key("c"), obj("c", n), Some(rv)).await
        }));
    }
    let mut won = 0;
    let mut conflicts = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::Conflict { .. }) => conflicts += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!((won, conflicts), (1, 15));
}

#[tokio::test]
async fn lists_page_in_key_order_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..25 {
        store
            .create(key(&format!("o{i:02}")), obj(&format!("o{i:02}"), i))
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(
                "cluster.x-k8s.io/clusters".into(),
                Some("default".into()),
                after.clone(),
                Some(10),
                Some(Box::new(|v: &serde_json::Value| {
                    v["spec"]["n"].as_u64().unwrap().is_multiple_of(2)
                })),
            )
            .await
            .unwrap();
        names.extend(page.items.iter().map(|o| o.key.name.clone()));
        match page.continue_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("o{i:02}"))
        .collect();
    assert_eq!(names, expected);
}

async fn next_event(stream: &mut capstan_store::WatchStream) -> (EventType, String, u64) {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchItem::Event(e) => return (e.event_type, e.key.name.clone(), e.resource_version),
            WatchItem::Bookmark(_) => continue,
        }
    }
}

#[tokio::test]
async fn watches_replay_from_a_version_then_follow_live_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let first = store.create(key("w1"), obj("w1", 0)).await.unwrap();
    store.create(key("w2"), obj("w2", 0)).await.unwrap();
    // Another resource's changes must not appear.
    store
        .create(
            ObjectKey::new("/secrets", "default", "s"),
            json!({"metadata": {}}),
        )
        .await
        .unwrap();
    let mut watch = store
        .watch(
            "cluster.x-k8s.io/clusters".into(),
            None,
            first.resource_version,
            None,
        )
        .unwrap();
    assert_eq!(next_event(&mut watch).await.1, "w2");
    store.update(key("w1"), obj("w1", 1), None).await.unwrap();
    store.delete(key("w2"), None).await.unwrap();
    let (t1, n1, v1) = next_event(&mut watch).await;
    let (t2, n2, v2) = next_event(&mut watch).await;
    assert_eq!(
        (t1, n1.as_str(), t2, n2.as_str()),
        (EventType::Modified, "w1", EventType::Deleted, "w2")
    );
    assert!(v2 > v1);
}

/// A watch of every Cluster from the start, with a bookmark every 20 ms.
fn clusters_with_bookmarks(store: &Store) -> capstan_store::WatchStream {
    store
        .watch(
            "cluster.x-k8s.io/clusters".into(),
            None,
            0,
            Some(Duration::from_millis(20)),
        )
        .unwrap()
}

#[tokio::test]
async fn bookmarks_never_run_ahead_of_delivered_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut watch = clusters_with_bookmarks(&store);
    let created = store.create(key("b1"), obj("b1", 0)).await.unwrap();
    let mut seen_event = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchItem::Event(e) => {
                assert_eq!(e.resource_version, created.resource_version);
                seen_event = true;
            }
            WatchItem::Bookmark(rv) => {
                if rv >= created.resource_version {
                    assert!(seen_event, "bookmark {rv} sent before the event it covers");
                    break;
                }
            }
        }
    }
}

#[tokio::test]
async fn a_watch_on_a_quiet_kind_gets_bookmarks_while_other_kinds_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut watch = clusters_with_bookmarks(&store);
    let mut written = 0;
    for i in 0..20u64 {
        let key = ObjectKey::new("cluster.x-k8s.io/machines", "default", format!("m{i}"));
        written = store
            .create(key, obj("m", i))
            .await
            .unwrap()
            .resource_version;
    }
    // Machines are written without pause: were bookmarks sent only after quiet, none would come.
    let writer = store.clone();
    let busy = tokio::spawn(async move {
        for i in 0u64.. {
            let key = ObjectKey::new("cluster.x-k8s.io/machines", "busy", format!("b{i}"));
            if writer.create(key, obj("b", i)).await.is_err() {
                return;
            }
        }
    });
    let bookmark = loop {
        match tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("no bookmark within 10 s while other kinds were written")
            .unwrap()
            .unwrap()
        {
            WatchItem::Event(e) => panic!("an event of another kind was sent: {:?}", e.key),
            WatchItem::Bookmark(rv) if rv >= written => break rv,
            WatchItem::Bookmark(_) => {}
        }
    };
    busy.abort();
    assert!(bookmark <= store.head());
}

#[tokio::test]
async fn compacted_versions_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        retained_events: 10,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("state.db"), options).unwrap();
    for i in 0..40 {
        store
            .create(key(&format!("g{i}")), obj("g", i))
            .await
            .unwrap();
    }
    assert!(store.compacted() > 0);
    assert!(matches!(
        store.watch("cluster.x-k8s.io/clusters".into(), None, 1, None),
        Err(StoreError::Gone { .. })
    ));
    assert!(
        store
            .watch(
                "cluster.x-k8s.io/clusters".into(),
                None,
                store.head() - 5,
                None
            )
            .is_ok()
    );
}

#[tokio::test]
async fn state_survives_reopen_and_backup_is_a_consistent_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let head = {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        for i in 0..50 {
            store
                .create(key(&format!("r{i}")), obj("r", i))
                .await
                .unwrap();
        }
        store.backup(dir.path().join("backup.db")).await.unwrap();
        store.head()
    };
    let reopened = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(reopened.head(), head);
    assert_eq!(
        reopened
            .count("cluster.x-k8s.io/clusters".into())
            .await
            .unwrap(),
        50
    );
    let restored = Store::open(&dir.path().join("backup.db"), StoreOptions::default()).unwrap();
    assert_eq!(restored.head(), head);
    assert_eq!(
        restored
            .count("cluster.x-k8s.io/clusters".into())
            .await
            .unwrap(),
        50
    );
    let next = restored
        .create(key("after"), obj("after", 0))
        .await
        .unwrap();
    assert_eq!(next.resource_version, head + 1);
}

#[tokio::test]
async fn a_backup_taken_from_outside_while_writing_is_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    for i in 0..20 {
        store
            .create(key(&format!("b{i}")), obj("b", i))
            .await
            .unwrap();
    }
    let target = dir.path().join("copy.db");
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 20..200 {
                store
                    .create(key(&format!("b{i}")), obj("b", i))
                    .await
                    .unwrap();
            }
        })
    };
    let (p, t) = (path.clone(), target.clone());
    tokio::task::spawn_blocking(move || capstan_store::backup_file(&p, &t))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    let copy = Store::open(&target, StoreOptions::default()).unwrap();
    let count = copy
        .count("cluster.x-k8s.io/clusters".into())
        .await
        .unwrap();
    // A prefix of the writes, exactly: every object up to the copy's head, none after.
    assert_eq!(count, copy.head(), "one object per write in this test");
    assert!(count >= 20);
}

/// A row an older capstan committed but nobody can parse (nested past serde_json's limit) must not
/// take the store down: it opens, lists and watches skip the row, it is listed as undecodable and
/// can be removed; new writes that deep are refused before anything is committed.
#[tokio::test]
async fn undecodable_rows_are_skipped_listed_and_removable_and_deep_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        store.create(key("good"), obj("good", 1)).await.unwrap();
    }
    let deep = format!(
        "{{\"metadata\":{{\"name\":\"poison\"}},\"spec\":{}1{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO objects (resource, namespace, name, rv, value) VALUES (?1, 'default', 'poison', 1, ?2)",
        rusqlite::params![key("x").resource, deep],
    )
    .unwrap();
    drop(conn);

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(store.undecodable(), vec![key("poison")]);
    let all = store
        .list(key("x").resource, None, None, None, None)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1);
    let filtered = store
        .list(
            key("x").resource,
            None,
            None,
            None,
            Some(Box::new(|_| true)),
        )
        .await
        .unwrap();
    assert_eq!(filtered.items.len(), 1);
    assert!(matches!(
        store.get(key("poison")).await,
        Err(StoreError::Undecodable(_))
    ));
    assert!(matches!(
        store.remove_undecodable(key("good")).await,
        Err(StoreError::Decodable(_))
    ));
    let mut watch = store
        .watch(key("x").resource, None, store.head(), None)
        .unwrap();
    let removed = store.remove_undecodable(key("poison")).await.unwrap();
    assert!(store.undecodable().is_empty());
    assert!(store.get(key("poison")).await.unwrap().is_none());
    match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
        Ok(Some(Ok(WatchItem::Event(event)))) => {
            assert_eq!(event.event_type, EventType::Deleted);
            assert_eq!(event.resource_version, removed.resource_version);
        }
        other => panic!("expected the deletion, got {other:?}"),
    }

    let mut too_deep = serde_json::json!(1);
    for _ in 0..(capstan_store::limits::MAX_DEPTH + 1) {
        too_deep = serde_json::json!([too_deep]);
    }
    let head = store.head();
    let err = store
        .create(
            key("deep"),
            serde_json::json!({"metadata": {"name": "deep"}, "spec": too_deep}),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::TooDeep { .. }), "{err}");
    assert_eq!(store.head(), head, "nothing was committed");
}

#[tokio::test]
async fn the_database_its_wal_and_backups_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.create(key("a"), obj("a", 1)).await.unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("state.db")), 0o600);
    assert_eq!(mode(&dir.path().join("state.db-wal")), 0o600);
    let target = dir.path().join("snap.db");
    store.backup(target.clone()).await.unwrap();
    assert_eq!(mode(&target), 0o600);
    let other = dir.path().join("snap2.db");
    let p = dir.path().join("state.db");
    let t = other.clone();
    tokio::task::spawn_blocking(move || capstan_store::backup_file(&p, &t))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mode(&other), 0o600);
    let restored = Store::open(&target, StoreOptions::default()).unwrap();
    assert!(restored.get(key("a")).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_reads_waits_for_the_pools_connections() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        readers: 2,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("state.db"), options).unwrap();
    for i in 0..8 {
        store
            .create(key(&format!("c{i}")), obj("c", i))
            .await
            .unwrap();
    }
    // Many more reads at once than the pool has connections: each waits for one, none opens its
    // own, and every read answers.
    let reads: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .list("cluster.x-k8s.io/clusters".into(), None, None, None, None)
                    .await
                    .unwrap();
                store.get(key(&format!("c{}", i % 8))).await.unwrap()
            })
        })
        .collect();
    for read in reads {
        assert!(read.await.unwrap().is_some());
    }
    assert_eq!(store.read_connections_opened(), 2);
    assert_eq!(store.idle_read_connections(), 2);
}

#[tokio::test]
async fn the_change_log_tells_what_an_object_was_at_a_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let first = store.create(key("a"), obj("a", 1)).await.unwrap();
    let second = store.update(key("a"), obj("a", 2), None).await.unwrap();
    let gone = store.delete(key("a"), None).await.unwrap();
    let n_at = |state: capstan_store::PastState| match state {
        capstan_store::PastState::Existed(json) => {
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["spec"]["n"].as_u64()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        n_at(
            store
                .state_at(key("a"), first.resource_version)
                .await
                .unwrap()
        ),
        Some(1)
    );
    assert_eq!(
        n_at(
            store
                .state_at(key("a"), gone.resource_version - 1)
                .await
                .unwrap()
        ),
        Some(2)
    );
    assert!(second.resource_version < gone.resource_version);
    assert_eq!(
        store
            .state_at(key("a"), gone.resource_version)
            .await
            .unwrap(),
        capstan_store::PastState::Absent
    );
    assert_eq!(
        store
            .state_at(key("a"), first.resource_version - 1)
            .await
            .unwrap(),
        capstan_store::PastState::Unknown
    );
}

mod label_index {
    //! Lists by label terms against a reference matcher, for every term form, alone and in pairs,
    //! paged and whole, after creates, label-changing updates and deletes.
    use super::*;
    use capstan_store::{LabelTerm, ListQuery};
    use std::collections::BTreeMap;

    const RESOURCE: &str = "cluster.x-k8s.io/machines";

    /// Deterministic labels for object `i`: each of `a`, `b`, `c` missing or one of three values
    /// (the empty value among them), plus a label that is not a string.
    fn labels_for(i: usize, salt: usize) -> serde_json::Map<String, serde_json::Value> {
        let mut labels = serde_json::Map::new();
        for (n, key) in ["a", "b", "c"].into_iter().enumerate() {
            match (i / 4_usize.pow(n as u32) + salt) % 4 {
                0 => {}
                1 => {
                    labels.insert(key.into(), "1".into());
                }
                2 => {
                    labels.insert(key.into(), "2".into());
                }
                _ => {
                    labels.insert(key.into(), "".into());
                }
            }
        }
        if i.is_multiple_of(5) {
            labels.insert("n".into(), json!(7));
        }
        labels
    }

    fn string_labels(object: &serde_json::Value) -> BTreeMap<String, String> {
        object["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn holds(term: &LabelTerm, labels: &BTreeMap<String, String>) -> bool {
        match term {
            LabelTerm::Equals(k, v) => labels.get(k) == Some(v),
            LabelTerm::NotEquals(k, v) => labels.get(k) != Some(v),
            LabelTerm::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            LabelTerm::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            LabelTerm::Exists(k) => labels.contains_key(k),
            LabelTerm::DoesNotExist(k) => !labels.contains_key(k),
        }
    }

    fn every_term() -> Vec<LabelTerm> {
        let mut terms = Vec::new();
        for key in ["a", "b", "n", "zz"] {
            let k = || key.to_owned();
            for value in ["1", "", "7"] {
                terms.push(LabelTerm::Equals(k(), value.into()));
                terms.push(LabelTerm::NotEquals(k(), value.into()));
            }
            for values in [vec![], vec!["1"], vec!["1", "2"], vec!["", "2"]] {
                let values: Vec<String> = values.into_iter().map(str::to_owned).collect();
                terms.push(LabelTerm::In(k(), values.clone()));
                terms.push(LabelTerm::NotIn(k(), values));
            }
            terms.push(LabelTerm::Exists(k()));
            terms.push(LabelTerm::DoesNotExist(k()));
        }
        terms
    }

    async fn names(
        store: &Store,
        namespace: Option<&str>,
        terms: &[LabelTerm],
        limit: Option<usize>,
    ) -> Vec<String> {
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .query(ListQuery {
                    after: after.take(),
                    limit,
                    labels: terms.to_vec(),
                    ..ListQuery::new(RESOURCE, namespace.map(str::to_owned))
                })
                .await
                .unwrap();
            found.extend(
                page.items
                    .iter()
                    .map(|o| format!("{}/{}", o.key.namespace, o.key.name)),
            );
            match page.continue_after {
                Some(next) => after = Some(next),
                None => return found,
            }
        }
    }

    #[tokio::test]
    async fn label_terms_select_as_the_reference_matcher_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let mut current = BTreeMap::new();
        for i in 0..64 {
            let namespace = if i % 3 == 0 { "other" } else { "default" };
            let name = format!("m{i:02}");
            let object = json!({"metadata": {"name": name, "namespace": namespace, "labels": labels_for(i, 0)}});
            let key = ObjectKey::new(RESOURCE, namespace, &name);
            store.create(key.clone(), object.clone()).await.unwrap();
            current.insert(key, object);
        }
        // Another kind with the same labels must never appear.
        for i in 0..8 {
            let name = format!("m{i:02}");
            store
                .create(
                    ObjectKey::new("/configmaps", "default", &name),
                    json!({"metadata": {"name": name, "labels": labels_for(i, 0)}}),
                )
                .await
                .unwrap();
        }
        // Labels change on some updates, stay on others; some objects go.
        let keys: Vec<ObjectKey> = current.keys().cloned().collect();
        for (n, key) in keys.iter().enumerate() {
            match n % 4 {
                0 => {
                    let object = json!({"metadata": {"name": key.name, "namespace": key.namespace, "labels": labels_for(n, 1)}});
                    store
                        .update(key.clone(), object.clone(), None)
                        .await
                        .unwrap();
                    current.insert(key.clone(), object);
                }
                1 => {
                    let mut object = current[key].clone();
                    object["spec"] = json!({"n": n});
                    store
                        .update(key.clone(), object.clone(), None)
                        .await
                        .unwrap();
                    current.insert(key.clone(), object);
                }
                2 if n % 8 == 2 => {
                    store.delete(key.clone(), None).await.unwrap();
                    current.remove(key);
                }
                _ => {
                    let object =
                        json!({"metadata": {"name": key.name, "namespace": key.namespace}});
                    store
                        .update(key.clone(), object.clone(), None)
                        .await
                        .unwrap();
                    current.insert(key.clone(), object);
                }
            }
        }
        let terms = every_term();
        let mut selections: Vec<Vec<LabelTerm>> = vec![vec![]];
        selections.extend(terms.iter().map(|t| vec![t.clone()]));
        for (i, first) in terms.iter().enumerate() {
            // Pairs with every term of another key, and a driver after a negative term.
            for second in terms.iter().skip(i % 7).step_by(7) {
                selections.push(vec![first.clone(), second.clone()]);
            }
        }
        for terms in &selections {
            for namespace in [None, Some("default")] {
                let expected: Vec<String> = current
                    .iter()
                    .filter(|(k, _)| namespace.is_none_or(|n| k.namespace == n))
                    .filter(|(_, o)| terms.iter().all(|t| holds(t, &string_labels(o))))
                    .map(|(k, _)| format!("{}/{}", k.namespace, k.name))
                    .collect();
                assert_eq!(
                    names(&store, namespace, terms, None).await,
                    expected,
                    "{terms:?} in {namespace:?}"
                );
                assert_eq!(
                    names(&store, namespace, terms, Some(3)).await,
                    expected,
                    "{terms:?} in {namespace:?}, pages of 3"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_filter_sees_only_what_the_label_terms_selected() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        for i in 0..10 {
            let name = format!("m{i}");
            store
                .create(
                    ObjectKey::new(RESOURCE, "default", &name),
                    json!({"metadata": {"name": name, "labels": {"even": (i % 2 == 0).to_string()}}, "spec": {"n": i}}),
                )
                .await
                .unwrap();
        }
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = seen.clone();
        let page = store
            .query(ListQuery {
                labels: vec![LabelTerm::Equals("even".into(), "true".into())],
                keep: Some(Box::new(move |v: &serde_json::Value| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    v["spec"]["n"].as_u64().is_some_and(|n| n < 6)
                })),
                ..ListQuery::new(RESOURCE, None)
            })
            .await
            .unwrap();
        let names: Vec<&str> = page.items.iter().map(|o| o.key.name.as_str()).collect();
        assert_eq!(names, ["m0", "m2", "m4"]);
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::Relaxed),
            5,
            "only the selected objects are parsed"
        );
    }

    #[tokio::test]
    async fn a_store_written_before_the_index_gets_it_filled_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let store = Store::open(&path, StoreOptions::default()).unwrap();
            for i in 0..6 {
                let name = format!("m{i}");
                store
                    .create(
                        ObjectKey::new(RESOURCE, "default", &name),
                        json!({"metadata": {"name": name, "labels": {"group": (i % 3).to_string()}}}),
                    )
                    .await
                    .unwrap();
            }
        }
        // What an older capstan left: objects, no index rows, layout 1.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute("DELETE FROM labels", []).unwrap();
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'schema'", [])
            .unwrap();
        drop(conn);
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let page = store
            .query(ListQuery {
                labels: vec![LabelTerm::Equals("group".into(), "1".into())],
                ..ListQuery::new(RESOURCE, None)
            })
            .await
            .unwrap();
        let names: Vec<&str> = page.items.iter().map(|o| o.key.name.as_str()).collect();
        assert_eq!(names, ["m1", "m4"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_beyond_the_queue_wait_their_turn_and_every_write_lands_once() {
    // A queue of one: nearly every write finds it full and waits on a blocking thread.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("state.db"),
        StoreOptions {
            max_batch: 1,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let writes: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let name = format!("c{i}");
                store.create(key(&name), obj(&name, i)).await
            })
        })
        .collect();
    let mut versions = Vec::new();
    for write in writes {
        versions.push(write.await.unwrap().unwrap().resource_version);
    }
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), 200);
    assert_eq!(store.head(), *versions.last().unwrap());
    let listed = store
        .query(capstan_store::ListQuery::new(
            "cluster.x-k8s.io/clusters",
            None,
        ))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 200);
}

#[tokio::test]
async fn a_resources_last_change_moves_with_its_writes_and_only_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let other = |name: &str| ObjectKey::new("v1/configmaps", "default", name);
    let clusters = "cluster.x-k8s.io/clusters";
    let at_open = store.last_change(clusters);
    assert_eq!(at_open, store.head());
    let created = store.create(key("a"), obj("a", 1)).await.unwrap();
    assert_eq!(store.last_change(clusters), created.resource_version);
    // Another resource's writes leave it where it was.
    store
        .create(other("m"), json!({"metadata": {"name": "m"}}))
        .await
        .unwrap();
    assert_eq!(store.last_change(clusters), created.resource_version);
    assert_eq!(store.last_change("v1/configmaps"), store.head());
    let updated = store
        .update(key("a"), obj("a", 2), Some(created.resource_version))
        .await
        .unwrap();
    assert_eq!(store.last_change(clusters), updated.resource_version);
    store.delete(key("a"), None).await.unwrap();
    assert_eq!(store.last_change(clusters), store.head());
    // A refused write is no change.
    let before = store.last_change(clusters);
    assert!(
        store
            .update(key("gone"), obj("gone", 1), Some(1))
            .await
            .is_err()
    );
    assert_eq!(store.last_change(clusters), before);
    // After a restart, a resource not written since reads as the head at opening: nothing that
    // changed before can read as unchanged against a value taken later.
    drop(store);
    let reopened = open(&dir);
    assert_eq!(reopened.last_change(clusters), reopened.head());
}

#[tokio::test]
async fn writes_that_fail_in_a_batch_leave_nothing_and_the_rest_of_the_batch_lands() {
    use capstan_store::{LabelTerm, ListQuery};
    // Each write runs in its own savepoint: a refused one is rolled back to it, and the batch's
    // other writes commit with their label index rows.
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let labelled = |name: &str, attempt: usize| json!({"metadata": {"name": name, "namespace": "default", "labels": {"attempt": attempt.to_string()}}, "spec": {}});
    let mut too_deep = json!(0);
    for _ in 0..200 {
        too_deep = json!([too_deep]);
    }
    let writes: Vec<_> = (0..96)
        .map(|i| {
            let store = store.clone();
            let deep = too_deep.clone();
            tokio::spawn(async move {
                match i % 3 {
                    // One of these wins; the others find it there.
                    0 => store.create(key("same"), labelled("same", i)).await,
                    // Refused before anything is written.
                    1 => {
                        let name = format!("deep{i}");
                        let mut value = labelled(&name, i);
                        value["spec"]["deep"] = deep;
                        store.create(key(&name), value).await
                    }
                    _ => {
                        let name = format!("c{i}");
                        store.create(key(&name), labelled(&name, i)).await
                    }
                }
            })
        })
        .collect();
    let (mut landed, mut exists, mut deep) = (Vec::new(), 0, 0);
    for write in writes {
        match write.await.unwrap() {
            Ok(object) => landed.push(object),
            Err(StoreError::AlreadyExists(_)) => exists += 1,
            Err(StoreError::TooDeep { .. }) => deep += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!((landed.len(), exists, deep), (33, 31, 32));
    // Only the writes that landed took a resourceVersion.
    assert_eq!(store.head(), 33);
    let winner = landed
        .iter()
        .find(|o| o.key.name == "same")
        .unwrap()
        .value()
        .unwrap()["metadata"]["labels"]["attempt"]
        .as_str()
        .unwrap()
        .to_owned();
    let with_attempt = |attempt: String| {
        let store = store.clone();
        async move {
            store
                .query(ListQuery {
                    labels: vec![LabelTerm::Equals("attempt".into(), attempt)],
                    ..ListQuery::new("cluster.x-k8s.io/clusters", None)
                })
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(with_attempt(winner.clone()).await, 1);
    // No refused write left a label row behind.
    for i in (0..96).filter(|i| i % 3 != 2) {
        if i.to_string() != winner {
            assert_eq!(with_attempt(i.to_string()).await, 0, "attempt {i}");
        }
    }
    let all = store
        .query(ListQuery::new("cluster.x-k8s.io/clusters", None))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 33);
    // The writer is not left inside a savepoint: the next write lands.
    store.create(key("after"), obj("after", 0)).await.unwrap();
    assert_eq!(store.head(), 34);
}
