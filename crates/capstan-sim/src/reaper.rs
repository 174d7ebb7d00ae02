//! Stops playing a workload cluster once its Cluster is gone.
//!
//! A simulated cluster holds a store (a writer thread and its connections), an API server and, with
//! `listen`, an HTTPS listener. Without this task each deleted Cluster's simulation lived as long as
//! the process, and its store directory stayed on disk. The task follows Clusters with one watch:
//! a deleted Cluster's simulation is stopped and its store directory (`STATE_DIR/NS/NAME/UID`)
//! removed; after each (re)list, simulations and store directories of Clusters that no longer
//! exist (deleted while capstan was down, or while the watch was reconnecting) go the same way.

use crate::Simulator;
use capstan_runtime::{RuntimeError, Task, TaskEnv};
use capstan_workload::ClusterKey;
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// The task that stops the simulation of deleted Clusters (see the module overview).
pub(crate) struct Reaper {
    sim: Arc<Simulator>,
}

impl Reaper {
    pub(crate) fn new(sim: Arc<Simulator>) -> Self {
        Self { sim }
    }

    /// Stops simulating the Cluster `object` was and removes its store directory.
    fn reap(&self, object: &DynamicObject) {
        let (Some(namespace), Some(name)) = (&object.metadata.namespace, &object.metadata.name)
        else {
            return;
        };
        let key = ClusterKey {
            namespace: namespace.clone(),
            name: name.clone(),
        };
        if self.sim.cluster(&key).is_some() {
            tracing::info!(cluster = %key, "simulated workload API stopped: its Cluster is gone");
        }
        self.sim.drop_cluster(&key);
        if let (Some(base), Some(uid)) = (&self.sim.settings.state_dir, &object.metadata.uid) {
            remove_dir(&base.join(namespace).join(name).join(uid));
        }
    }

    /// After a (re)list: drops what belongs to no listed Cluster.
    fn sweep(&self, listed: &[DynamicObject]) {
        let keys: HashSet<ClusterKey> = listed
            .iter()
            .filter_map(|c| {
                Some(ClusterKey {
                    namespace: c.metadata.namespace.clone()?,
                    name: c.metadata.name.clone()?,
                })
            })
            .collect();
        for key in self.sim.keys() {
            if !keys.contains(&key) {
                tracing::info!(cluster = %key, "simulated workload API stopped: its Cluster is gone");
                self.sim.drop_cluster(&key);
            }
        }
        let Some(base) = &self.sim.settings.state_dir else {
            return;
        };
        let uids: HashSet<&str> = listed
            .iter()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        // STATE_DIR/NAMESPACE/NAME/UID: a store whose Cluster uid is not listed is an old one's.
        for namespace in subdirectories(base) {
            for name in subdirectories(&namespace) {
                for uid_dir in subdirectories(&name) {
                    let stale = uid_dir
                        .file_name()
                        .and_then(|u| u.to_str())
                        .is_some_and(|uid| !uids.contains(uid));
                    if stale {
                        remove_dir(&uid_dir);
                    }
                }
            }
        }
    }
}

fn subdirectories(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {
            tracing::debug!(dir = %dir.display(), "removed a deleted cluster's workload store")
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        // Only disk space is lost; the next sweep tries again.
        Err(err) => {
            tracing::warn!(dir = %dir.display(), error = %err, "could not remove a deleted cluster's workload store")
        }
    }
}

impl Task for Reaper {
    fn name(&self) -> &'static str {
        "simulated-cluster-reaper"
    }

    fn run(self: Box<Self>, env: TaskEnv) -> BoxFuture<'static, Result<(), RuntimeError>> {
        Box::pin(async move {
            let resource = ApiResource {
                group: "cluster.x-k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                plural: "clusters".into(),
            };
            let clusters: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
            let mut events = watcher(clusters, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut listing: Option<Vec<DynamicObject>> = None;
            loop {
                let event = tokio::select! {
                    () = env.shutdown.cancelled() => return Ok(()),
                    event = events.next() => event,
                };
                match event {
                    None => return Ok(()),
                    // The watcher retries with backoff; nothing is dropped on an error.
                    Some(Err(err)) => {
                        tracing::debug!(error = %err, "watching Clusters for the simulation");
                    }
                    Some(Ok(watcher::Event::Delete(cluster))) => self.reap(&cluster),
                    Some(Ok(watcher::Event::Apply(_))) => {}
                    Some(Ok(watcher::Event::Init)) => listing = Some(Vec::new()),
                    Some(Ok(watcher::Event::InitApply(cluster))) => {
                        if let Some(listing) = listing.as_mut() {
                            listing.push(cluster);
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        if let Some(listed) = listing.take() {
                            self.sweep(&listed);
                        }
                    }
                }
            }
        })
    }
}
