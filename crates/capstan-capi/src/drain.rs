//! Draining a Node before its Machine goes: cordon, then evict its Pods through the `policy/v1`
//! Eviction subresource, so the API server enforces PodDisruptionBudgets (a 429 answer means "not
//! now": the Pod blocks the drain and is named in the Machine's condition).
//!
//! One call is one pass: it evicts what it can and reports what remains; the Machine controller
//! calls it again on the next pass until nothing remains or the drain timeout has passed.
//! DaemonSet Pods (their controller would recreate them at once), mirror Pods (the kubelet owns
//! them), finished Pods and Pods labelled `cluster.x-k8s.io/drain: skip` (Cluster API's label for
//! Pods a drain must not evict) are left alone.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Annotation the kubelet puts on mirror Pods.
pub const ANNOTATION_MIRROR: &str = "kubernetes.io/config.mirror";

/// Label that keeps a Pod out of drains when its value is [`DRAIN_SKIP`].
pub const LABEL_DRAIN: &str = "cluster.x-k8s.io/drain";
/// The value of [`LABEL_DRAIN`] that skips the Pod.
pub const DRAIN_SKIP: &str = "skip";

/// Why a drain pass could not run.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("cordoning Node {node}")]
    Cordon {
        node: String,
        source: Box<kube::Error>,
    },
    #[error("listing the Pods of Node {node}")]
    List {
        node: String,
        source: Box<kube::Error>,
    },
}

/// What one drain pass found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainOutcome {
    /// Pods evicted in this pass (`namespace/name`).
    pub evicted: Vec<String>,
    /// Pods evicted earlier that are still terminating.
    pub terminating: Vec<String>,
    /// Pods whose eviction was refused, with why (a PodDisruptionBudget, typically).
    pub blocked: Vec<(String, String)>,
    /// Pods left alone (DaemonSet, mirror, finished, labelled to be skipped).
    pub skipped: usize,
}

impl DrainOutcome {
    /// Whether the Node holds no Pod that still has to go.
    pub fn done(&self) -> bool {
        self.evicted.is_empty() && self.terminating.is_empty() && self.blocked.is_empty()
    }

    /// A one-line summary for conditions: the first blocking Pod with its reason, and counts.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some((pod, why)) = self.blocked.first() {
            let more = self.blocked.len() - 1;
            parts.push(match (pod.is_empty(), more) {
                // Not a Pod's refusal: the pass itself could not finish (the workload API).
                (true, _) => why.clone(),
                (false, 0) => format!("Pod {pod} cannot be evicted ({why})"),
                (false, more) => format!("Pod {pod} cannot be evicted ({why}) and {more} more"),
            });
        }
        if !self.evicted.is_empty() || !self.terminating.is_empty() {
            parts.push(format!(
                "{} Pods evicted, waiting for them to terminate",
                self.evicted.len() + self.terminating.len()
            ));
        }
        parts.join("; ")
    }
}

/// What to do with one Pod on a draining Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodAction {
    /// Leave it (DaemonSet, mirror, finished or skip-labelled Pod).
    Skip,
    /// Evicted already; wait for it to go.
    Wait,
    /// Evict it.
    Evict,
}

/// How a drain treats `pod`.
pub fn classify(pod: &Pod) -> PodAction {
    let daemon_set = pod
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let mirror = pod.annotations().contains_key(ANNOTATION_MIRROR);
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    let labelled_skip = pod
        .labels()
        .get(LABEL_DRAIN)
        .is_some_and(|v| v == DRAIN_SKIP);
    if daemon_set || mirror || finished || labelled_skip {
        PodAction::Skip
    } else if pod.metadata.deletion_timestamp.is_some() {
        PodAction::Wait
    } else {
        PodAction::Evict
    }
}

/// One drain pass over `node` in the workload cluster of `client`.
pub async fn drain_pass(client: &Client, node: &str) -> Result<DrainOutcome, DrainError> {
    // Each workload call is timed at debug level: a pass that waits shows where.
    let started = std::time::Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = json!({"spec": {"unschedulable": true}});
    match nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&cordon))
        .await
    {
        Ok(_) => {}
        // No Node, nothing to drain.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(DrainOutcome::default()),
        Err(source) => {
            return Err(DrainError::Cordon {
                node: node.to_owned(),
                source: Box::new(source),
            });
        }
    }
    tracing::debug!(node, elapsed = ?started.elapsed(), "drain: cordoned");
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|source| DrainError::List {
            node: node.to_owned(),
            source: Box::new(source),
        })?
        .items;
    tracing::debug!(node, pods = on_node.len(), elapsed = ?started.elapsed(), "drain: listed the Pods");
    let mut outcome = DrainOutcome::default();
    for pod in on_node {
        // The field selector is honoured by real API servers; checked again for any that ignore it.
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
            continue;
        }
        let namespace = pod.namespace().unwrap_or_default();
        let key = format!("{namespace}/{}", pod.name_any());
        match classify(&pod) {
            PodAction::Skip => outcome.skipped += 1,
            PodAction::Wait => outcome.terminating.push(key),
            PodAction::Evict => {
                let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let result = api.evict(&pod.name_any(), &EvictParams::default()).await;
                tracing::debug!(node, pod = %key, ok = result.is_ok(), elapsed = ?started.elapsed(), "drain: eviction answered");
                match result {
                    Ok(_) => outcome.evicted.push(key),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(kube::Error::Api(e)) if e.code == 429 => {
                        outcome.blocked.push((key, e.message));
                    }
                    Err(err) => outcome.blocked.push((key, err.to_string())),
                }
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    fn pod(owner: Option<&str>, mirror: bool, phase: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                owner_references: owner.map(|kind| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                annotations: mirror
                    .then(|| [(ANNOTATION_MIRROR.to_owned(), "x".to_owned())].into()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn labelled(key: &str, value: &str) -> Pod {
        let mut p = pod(Some("ReplicaSet"), false, "Running", false);
        p.metadata.labels = Some([(key.to_owned(), value.to_owned())].into());
        p
    }

    #[test]
    fn classification_table() {
        let cases = [
            (pod(None, false, "Running", false), PodAction::Evict),
            (
                pod(Some("ReplicaSet"), false, "Running", false),
                PodAction::Evict,
            ),
            (
                pod(Some("DaemonSet"), false, "Running", false),
                PodAction::Skip,
            ),
            (pod(None, true, "Running", false), PodAction::Skip),
            (pod(None, false, "Succeeded", false), PodAction::Skip),
            (pod(None, false, "Running", true), PodAction::Wait),
            (labelled(LABEL_DRAIN, DRAIN_SKIP), PodAction::Skip),
            // Only "skip" skips; any other value is drained as usual.
            (labelled(LABEL_DRAIN, "yes"), PodAction::Evict),
            (labelled("app", DRAIN_SKIP), PodAction::Evict),
        ];
        for (i, (pod, want)) in cases.iter().enumerate() {
            assert_eq!(classify(pod), *want, "case {i}");
        }
    }

    #[test]
    fn summary_names_the_blocking_pod() {
        let outcome = DrainOutcome {
            blocked: vec![(
                "app/db-0".into(),
                "would violate PodDisruptionBudget app/db".into(),
            )],
            ..DrainOutcome::default()
        };
        assert!(!outcome.done());
        assert_eq!(
            outcome.summary(),
            "Pod app/db-0 cannot be evicted (would violate PodDisruptionBudget app/db)"
        );
        // A pass that could not finish says why, without posing as a Pod's refusal.
        let unanswered = DrainOutcome {
            blocked: vec![(
                String::new(),
                "the workload API did not answer within 30s".into(),
            )],
            ..DrainOutcome::default()
        };
        assert!(!unanswered.done());
        assert_eq!(
            unanswered.summary(),
            "the workload API did not answer within 30s"
        );
        assert!(
            DrainOutcome {
                skipped: 3,
                ..DrainOutcome::default()
            }
            .done()
        );
    }
}
