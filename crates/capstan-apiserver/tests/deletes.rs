//! Deletes beside a concurrent writer: a delete guarded only by the object's uid (what a garbage
//! collector sends) lands when another write (a controller's status) comes between the server's
//! read and its write, instead of being answered with a conflict the caller takes for "the object
//! was replaced"; a wrong uid or a stale resourceVersion is still a conflict.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Error, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Deletes with the same uid precondition, each beside a writer of the object's data.
const DELETES: usize = 30;

fn guarded_by(uid: Option<String>, resource_version: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..DeleteParams::default()
    }
}

fn is_conflict(result: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(result, Err(Error::Api(e)) if e.code == 409)
}

#[test]
fn a_delete_guarded_by_uid_lands_beside_a_writer_and_a_wrong_precondition_conflicts() {
    let server = support::start();
    support::racing_runtime().block_on(async {
        let client = server.client().await;
        let maps: Api<ConfigMap> = Api::namespaced(client, "default");
        let held = |name: &str| -> ConfigMap {
            serde_json::from_value(json!({
                "metadata": {"name": name, "finalizers": ["example.com/hold"]},
                "data": {"written": "0"},
            }))
            .unwrap()
        };

        // A wrong uid and a stale resourceVersion are the caller's conflicts.
        let first = maps.create(&PostParams::default(), &held("guarded")).await.unwrap();
        let wrong_uid = maps
            .delete("guarded", &guarded_by(Some("not-its-uid".into()), None))
            .await;
        assert!(is_conflict(&wrong_uid), "wrong uid: {wrong_uid:?}");
        maps.patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"written": "1"}})),
        )
        .await
        .unwrap();
        let stale = maps
            .delete(
                "guarded",
                &guarded_by(first.uid(), first.resource_version()),
            )
            .await;
        assert!(is_conflict(&stale), "stale resourceVersion: {stale:?}");
        assert!(
            maps.get("guarded")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none(),
            "a refused delete marked the object"
        );

        let mut refused = Vec::new();
        for round in 0..DELETES {
            let name = format!("beside-a-writer-{round}");
            let created = maps.create(&PostParams::default(), &held(&name)).await.unwrap();
            // A controller writing the object all the while, as the Metal3Machine controller
            // writes the status of a Metal3Machine whose Machine just went.
            let stop = Arc::new(AtomicBool::new(false));
            let written = Arc::new(AtomicU64::new(0));
            let writer = {
                let (maps, name, stop, written) =
                    (maps.clone(), name.clone(), stop.clone(), written.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let count = written.fetch_add(1, Ordering::Relaxed) + 1;
                        maps.patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"data": {"written": count.to_string()}})),
                        )
                        .await
                        .unwrap();
                    }
                })
            };
            while written.load(Ordering::Relaxed) < 2 {
                tokio::task::yield_now().await;
            }
            let deleted = maps.delete(&name, &guarded_by(created.uid(), None)).await;
            stop.store(true, Ordering::Relaxed);
            writer.await.unwrap();
            match deleted {
                Ok(_) => {
                    let marked = maps.get(&name).await.unwrap();
                    assert!(
                        marked.metadata.deletion_timestamp.is_some(),
                        "{name}: the delete was answered but the object is not being deleted"
                    );
                }
                Err(err) => refused.push((name, err.to_string().chars().take(120).collect::<String>())),
            }
        }
        assert!(
            refused.is_empty(),
            "{} of {DELETES} deletes guarded by the right uid refused beside a writer: {refused:#?}",
            refused.len()
        );
    });
}
