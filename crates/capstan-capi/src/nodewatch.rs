//! Watches on the Nodes of workload clusters, one per cluster, for the MachineHealthCheck controller.
//!
//! This is Cluster API's cluster cache tracker pattern, cut to what health checks need:
//! - [`NodeWatches::ensure`] starts one watch per workload cluster the first time a check needs
//!   its Nodes; later calls are free. The watch runs in a task of its own, so a workload API that
//!   does not answer never holds up a reconcile or another cluster's watch.
//! - Each watch gets its client from the shared `capstan-workload` access layer; when the watch
//!   fails it drops that client (so the next one is built afresh, e.g. from a renewed kubeconfig)
//!   and reconnects with a backoff of [`BACKOFF_INITIAL`] doubling to [`BACKOFF_MAX`].
//! - Only changes that can change a health verdict are passed on ([`NodeChange`]): a Node
//!   appearing or going, or the type, status or transition time of one of its conditions
//!   changing. Heartbeats (`lastHeartbeatTime`, other status) are not, so a thousand kubelets
//!   reporting in do not wake the checks. After every (re)list the Nodes are compared with what was
//!   seen before, so changes missed while disconnected are passed on too (level-triggered).
//! - A watch stops when [`NodeWatches::stop`] is called (its Cluster is gone), when the predicate
//!   given to [`NodeWatches::set_needed`] says no check needs the cluster any more, or when nobody
//!   listens to the changes (the controller stopped); both are looked at before every connection
//!   attempt and every [`SWEEP`].

use capstan_runtime::CancellationToken;
use capstan_runtime::controller::ErrorChain;
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::mpsc;

/// First delay before reconnecting a failed watch.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
/// Longest delay between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How often an idle watch checks whether it is still needed.
pub const SWEEP: Duration = Duration::from_secs(60);

/// A change of a Node that may change a health verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeChange {
    pub cluster: ClusterKey,
    pub node: String,
}

/// Where one cluster's watch is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// Getting a client or listing; `attempt` counts failures since the last success.
    Connecting {
        attempt: u32,
        last_error: Option<String>,
    },
    /// Listed and following changes.
    Watching,
}

struct Watch {
    id: u64,
    stop: CancellationToken,
    state: Arc<Mutex<WatchState>>,
}

type Needed = Arc<dyn Fn(&ClusterKey) -> bool + Send + Sync>;

struct Shared {
    workloads: SharedWorkloadAccess,
    watches: Mutex<HashMap<ClusterKey, Watch>>,
    changes: Mutex<Option<mpsc::UnboundedSender<NodeChange>>>,
    needed: Mutex<Option<Needed>>,
    next_id: std::sync::atomic::AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps and handles: a panicking holder leaves them usable.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The Node watches of all workload clusters health checks look at.
#[derive(Clone)]
pub struct NodeWatches {
    shared: Arc<Shared>,
}

impl NodeWatches {
    /// Watches that reach workload clusters through `workloads`.
    pub fn new(workloads: SharedWorkloadAccess) -> Self {
        Self {
            shared: Arc::new(Shared {
                workloads,
                watches: Mutex::new(HashMap::new()),
                changes: Mutex::new(None),
                needed: Mutex::new(None),
                next_id: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// A fresh stream of the changes every watch sees (replacing an earlier stream, whose watches
    /// keep running and now feed this one).
    pub fn changes(&self) -> mpsc::UnboundedReceiver<NodeChange> {
        let (sender, receiver) = mpsc::unbounded_channel();
        *lock(&self.shared.changes) = Some(sender);
        receiver
    }

    /// Tells the watches how to know whether their cluster is still needed.
    pub fn set_needed(&self, needed: impl Fn(&ClusterKey) -> bool + Send + Sync + 'static) {
        *lock(&self.shared.needed) = Some(Arc::new(needed));
    }

    /// Starts watching the Nodes of `cluster` unless that already happens.
    pub fn ensure(&self, cluster: &ClusterKey) {
        let mut watches = lock(&self.shared.watches);
        if watches.contains_key(cluster) {
            return;
        }
        let stop = CancellationToken::new();
        let state = Arc::new(Mutex::new(WatchState::Connecting {
            attempt: 0,
            last_error: None,
        }));
        let id = self
            .shared
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        watches.insert(
            cluster.clone(),
            Watch {
                id,
                stop: stop.clone(),
                state: state.clone(),
            },
        );
        tracing::debug!(cluster = %cluster, "starting the Node watch");
        tokio::spawn(run(self.shared.clone(), cluster.clone(), id, stop, state));
    }

    /// Stops watching the Nodes of `cluster` (its Cluster is gone, or nothing checks it).
    pub fn stop(&self, cluster: &ClusterKey) {
        if let Some(watch) = lock(&self.shared.watches).remove(cluster) {
            tracing::debug!(cluster = %cluster, "stopping the Node watch");
            watch.stop.cancel();
        }
    }

    /// Where the watch of `cluster` is; `None` when it is not watched.
    pub fn state(&self, cluster: &ClusterKey) -> Option<WatchState> {
        lock(&self.shared.watches)
            .get(cluster)
            .map(|w| lock(&w.state).clone())
    }

    /// Whether the Nodes of `cluster` are listed and followed right now.
    pub fn is_watching(&self, cluster: &ClusterKey) -> bool {
        self.state(cluster) == Some(WatchState::Watching)
    }

    /// The clusters watched.
    pub fn clusters(&self) -> Vec<ClusterKey> {
        let mut keys: Vec<ClusterKey> = lock(&self.shared.watches).keys().cloned().collect();
        keys.sort();
        keys
    }
}

impl Shared {
    fn needed(&self, cluster: &ClusterKey) -> bool {
        let needed = lock(&self.needed).clone();
        needed.is_none_or(|needed| needed(cluster))
    }

    /// Whether the changes still have a listener (the controller runs).
    fn listening(&self) -> bool {
        lock(&self.changes)
            .as_ref()
            .is_some_and(|sender| !sender.is_closed())
    }

    /// Passes a change on; `false` when nobody listens any more.
    fn send(&self, change: NodeChange) -> bool {
        lock(&self.changes)
            .as_ref()
            .is_some_and(|sender| sender.send(change).is_ok())
    }

    /// Forgets the watch of `cluster` if it is still watch `id` (not one started after it).
    fn remove(&self, cluster: &ClusterKey, id: u64) {
        let mut watches = lock(&self.watches);
        if watches.get(cluster).is_some_and(|w| w.id == id) {
            watches.remove(cluster);
        }
    }
}

/// What of a Node a health verdict depends on: its conditions' types, statuses and transition
/// times.
pub fn node_signature(node: &Node) -> String {
    let mut conditions: Vec<String> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}@{}",
                c.type_,
                c.status,
                c.last_transition_time
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default()
            )
        })
        .collect();
    conditions.sort();
    conditions.join(",")
}

/// The Nodes a watch has seen, by name, and which of them changed.
#[derive(Debug, Default)]
pub struct SeenNodes {
    seen: BTreeMap<String, String>,
    relisting: Option<BTreeMap<String, String>>,
}

impl SeenNodes {
    /// A Node was added or modified: `true` when its signature changed.
    pub fn apply(&mut self, name: &str, signature: String) -> bool {
        self.seen.get(name) != Some(&signature) && {
            self.seen.insert(name.to_owned(), signature);
            true
        }
    }

    /// A Node was deleted: `true` when it had been seen.
    pub fn delete(&mut self, name: &str) -> bool {
        self.seen.remove(name).is_some()
    }

    /// A (re)list starts.
    pub fn relist_start(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    /// A Node of the (re)list.
    pub fn relist_item(&mut self, name: &str, signature: String) {
        self.relisting
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_owned(), signature);
    }

    /// The (re)list is complete: the names of Nodes that appeared, changed or went since.
    pub fn relist_done(&mut self) -> Vec<String> {
        let listed = self.relisting.take().unwrap_or_default();
        let mut changed: Vec<String> = listed
            .iter()
            .filter(|(name, signature)| self.seen.get(*name) != Some(signature))
            .map(|(name, _)| name.clone())
            .collect();
        changed.extend(
            self.seen
                .keys()
                .filter(|name| !listed.contains_key(*name))
                .cloned(),
        );
        changed.sort();
        self.seen = listed;
        changed
    }
}

fn set_state(state: &Mutex<WatchState>, next: WatchState) {
    *lock(state) = next;
}

/// One cluster's watch: connect, list, follow; on failure back off and start over.
async fn run(
    shared: Arc<Shared>,
    cluster: ClusterKey,
    id: u64,
    stop: CancellationToken,
    state: Arc<Mutex<WatchState>>,
) {
    let mut seen = SeenNodes::default();
    let mut attempt: u32 = 0;
    let mut delay = BACKOFF_INITIAL;
    'connect: while !stop.is_cancelled() {
        if !shared.needed(&cluster) || !shared.listening() {
            break;
        }
        let failure = match shared.workloads.client(&cluster).await {
            Err(err) => ErrorChain(&err).to_string(),
            Ok(client) => {
                let mut events =
                    watcher(Api::<Node>::all(client), watcher::Config::default()).boxed();
                let mut sweep = tokio::time::interval(SWEEP);
                sweep.tick().await;
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => break 'connect,
                        _ = sweep.tick() => {
                            if shared.needed(&cluster) && shared.listening() {
                                continue
                            }
                            break 'connect
                        }
                        event = events.next() => event,
                    };
                    let changed: Vec<String> = match event {
                        None => break "the watch ended".to_owned(),
                        Some(Err(err)) => break ErrorChain(&err).to_string(),
                        Some(Ok(watcher::Event::Init)) => {
                            seen.relist_start();
                            Vec::new()
                        }
                        Some(Ok(watcher::Event::InitApply(node))) => {
                            seen.relist_item(&node_name(&node), node_signature(&node));
                            Vec::new()
                        }
                        Some(Ok(watcher::Event::InitDone)) => {
                            attempt = 0;
                            delay = BACKOFF_INITIAL;
                            set_state(&state, WatchState::Watching);
                            seen.relist_done()
                        }
                        Some(Ok(watcher::Event::Apply(node))) => {
                            let name = node_name(&node);
                            if seen.apply(&name, node_signature(&node)) {
                                vec![name]
                            } else {
                                Vec::new()
                            }
                        }
                        Some(Ok(watcher::Event::Delete(node))) => {
                            let name = node_name(&node);
                            if seen.delete(&name) {
                                vec![name]
                            } else {
                                Vec::new()
                            }
                        }
                    };
                    for node in changed {
                        tracing::debug!(cluster = %cluster, node, "Node changed");
                        let change = NodeChange {
                            cluster: cluster.clone(),
                            node,
                        };
                        if !shared.send(change) {
                            break 'connect;
                        }
                    }
                }
            }
        };
        // Checked before the next attempt: a client that no longer answers is dropped (after the
        // probe's failure threshold) and one from a renewed kubeconfig replaces it.
        shared.workloads.forget(&cluster);
        attempt = attempt.saturating_add(1);
        tracing::debug!(cluster = %cluster, attempt, retry_in = ?delay, error = %failure, "the Node watch failed; reconnecting");
        set_state(
            &state,
            WatchState::Connecting {
                attempt,
                last_error: Some(failure),
            },
        );
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
    tracing::debug!(cluster = %cluster, "the Node watch ended");
    shared.remove(&cluster, id);
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ready: &str, since: &str, heartbeat: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since, "lastHeartbeatTime": heartbeat}]},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn heartbeats_are_not_changes_transitions_are() {
        let mut seen = SeenNodes::default();
        let first = node("a", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z");
        assert!(seen.apply("a", node_signature(&first)));
        let heartbeat = node("a", "True", "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z");
        assert!(!seen.apply("a", node_signature(&heartbeat)));
        let not_ready = node(
            "a",
            "Unknown",
            "2026-01-01T00:06:00Z",
            "2026-01-01T00:05:00Z",
        );
        assert!(seen.apply("a", node_signature(&not_ready)));
        assert!(seen.delete("a"));
        assert!(!seen.delete("a"));
    }

    #[test]
    fn a_relist_reports_what_changed_while_disconnected() {
        let mut seen = SeenNodes::default();
        seen.relist_start();
        for name in ["a", "b", "c"] {
            seen.relist_item(name, format!("Ready=True@{name}"));
        }
        assert_eq!(seen.relist_done(), ["a", "b", "c"]);
        // Reconnected: b changed, c went, d came, a is as it was.
        seen.relist_start();
        seen.relist_item("a", "Ready=True@a".into());
        seen.relist_item("b", "Ready=Unknown@later".into());
        seen.relist_item("d", "Ready=True@d".into());
        assert_eq!(seen.relist_done(), ["b", "c", "d"]);
        assert!(!seen.apply("a", "Ready=True@a".into()));
    }
}
