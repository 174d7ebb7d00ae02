//! The namespace lifecycle, as kube-controller-manager's namespace controller runs it: a deleted
//! Namespace is `Terminating` while its `spec.finalizers` hold `kubernetes`; meanwhile everything in
//! it is deleted (objects with finalizers are marked and waited for); once it is empty the
//! `kubernetes` finalizer is removed and the Namespace goes.

use crate::ApiState;
use crate::conversion::EVENTS_STORAGE;
use crate::lifecycle;
use capstan_store::{ObjectKey, StoreError};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often terminating namespaces are looked at again (their contents' finalizers are removed by
/// other writers, which this loop does not watch).
const RESYNC: Duration = Duration::from_millis(500);

/// The finalizer the namespace lifecycle owns.
pub const FINALIZER: &str = "kubernetes";

/// Starts the namespace lifecycle loop; it ends when the server is dropped.
pub fn spawn(state: Weak<ApiState>) {
    tokio::spawn(async move {
        // The namespaces' change marker at the last pass that found none terminating: while it
        // holds, a pass would find nothing to do, so an idle server reads nothing.
        let mut settled_at: Option<u64> = None;
        loop {
            let Some(strong) = state.upgrade() else {
                return;
            };
            // Read before the pass: a write during it changes the marker and is seen next time.
            let marker = strong.store.last_change("/namespaces");
            if settled_at != Some(marker) {
                settled_at = match reconcile_all(&strong).await {
                    Ok(terminating) => (terminating == 0).then_some(marker),
                    Err(err) => {
                        tracing::warn!(error = %err, "namespace lifecycle pass failed");
                        None
                    }
                };
            }
            drop(strong);
            tokio::time::sleep(RESYNC).await;
        }
    });
}

/// Storage resources of every namespaced kind served.
fn namespaced_resources(state: &ApiState) -> BTreeSet<String> {
    state
        .registry()
        .iter()
        .filter(|c| c.scope == capstan_schema::Scope::Namespaced)
        .map(|c| {
            if c.kind == "Event" && matches!(c.group.as_str(), "" | "events.k8s.io") {
                EVENTS_STORAGE.to_owned()
            } else {
                format!("{}/{}", c.group, c.plural)
            }
        })
        .collect()
}

/// One pass over every terminating namespace; how many there were.
pub async fn reconcile_all(state: &Arc<ApiState>) -> Result<usize, StoreError> {
    let namespaces = state
        .store
        .list("/namespaces".into(), None, None, None, None)
        .await?;
    let mut terminating = 0;
    for stored in namespaces.items {
        let value = stored.value()?;
        if lifecycle::is_being_deleted(&value) {
            terminating += 1;
            reconcile(state, &stored.key.name).await?;
        }
    }
    Ok(terminating)
}

/// Deletes the contents of a terminating namespace and, once it is empty, finalizes it.
async fn reconcile(state: &Arc<ApiState>, namespace: &str) -> Result<(), StoreError> {
    let mut remaining = 0usize;
    for resource in namespaced_resources(state) {
        let page = state
            .store
            .list(resource, Some(namespace.to_owned()), None, None, None)
            .await?;
        for item in page.items {
            remaining += 1;
            let mut object = item.value()?;
            let result = if lifecycle::finalizers(&object).is_empty() {
                state
                    .store
                    .delete(item.key.clone(), Some(item.resource_version))
                    .await
                    .map(|_| ())
            } else if lifecycle::is_being_deleted(&object) {
                Ok(())
            } else {
                if lifecycle::mark_deleted(&mut object).is_err() {
                    continue;
                }
                state
                    .store
                    .update(item.key.clone(), object, Some(item.resource_version))
                    .await
                    .map(|_| ())
            };
            match result {
                // Changed or gone meanwhile: the next pass sees it.
                Ok(()) | Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => {}
                Err(err) => return Err(err),
            }
        }
    }
    let key = ObjectKey::new("/namespaces", "", namespace);
    let Some(current) = state.store.get(key.clone()).await? else {
        return Ok(());
    };
    let mut object = current.value()?;
    let mut changed = false;
    if object["status"]["phase"] != "Terminating" {
        object["status"] = json!({
            "phase": "Terminating",
            "conditions": [{"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain", "message": "the namespace still holds objects", "lastTransitionTime": lifecycle::now()}],
        });
        changed = true;
    }
    if remaining == 0
        && let Some(list) = object["spec"]["finalizers"].as_array_mut()
        && list.iter().any(|f| f == FINALIZER)
    {
        list.retain(|f| f != FINALIZER);
        changed = true;
    }
    let result = if remaining == 0 && lifecycle::finalizers(&object).is_empty() {
        state
            .store
            .delete(key, Some(current.resource_version))
            .await
            .map(|_| ())
    } else if changed {
        state
            .store
            .update(key, object, Some(current.resource_version))
            .await
            .map(|_| ())
    } else {
        Ok(())
    };
    match result {
        Ok(()) | Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

/// A Namespace's `spec.finalizers` (they hold its deletion like metadata finalizers do).
pub fn spec_finalizers(object: &Value) -> Vec<String> {
    if object["kind"] != "Namespace" || object["apiVersion"] != "v1" {
        return Vec::new();
    }
    object["spec"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
