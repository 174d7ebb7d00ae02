//! Which Clusters are paused, for every controller of the process from one watch.
//!
//! Every reconcile of a controller that follows its Cluster's pause asks whether that Cluster is
//! paused. Reading the Cluster from the API each time was the most frequent request of a cluster
//! creation (a read per reconcile, tens of thousands for a hundred clusters); [`ClusterPauses`]
//! answers from memory instead, from the process's table of Clusters ([`crate::tables`]; each
//! Cluster without its managed fields), which the reconciles that read their Cluster share.
//!
//! What it is fed: one watch of Clusters, started on first use and stopped with the controllers,
//! and [`ClusterPauses::observe`], called by each controller's own Cluster trigger before it queues
//! the Cluster's objects. So a reconcile woken by a Cluster change sees that change (an unpause is
//! never missed because the cache was behind the trigger); a newer version is never replaced by an
//! older one, whichever of the two feeds delivers first.
//!
//! What it answers ([`Pause`]): only "not paused" is final. A Cluster the cache holds as paused is
//! confirmed by a read (pauses are rare and short-lived, and an unpause must not be missed), and a
//! Cluster it does not know yet (just created, or the cache still filling) is read as before.

use crate::CancellationToken;
use crate::tables::{Entry, Held, ObjectCache};
use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;

/// The `cluster.x-k8s.io` Cluster as the pause check reads it: untyped, so no Cluster version or
/// shape can make a read fail.
pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// Whether `meta` carries the pause annotation (its value does not matter, as in CAPI).
pub fn has_paused_annotation(meta: &kube::api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(capstan_model::meta::ANNOTATION_PAUSED))
}

/// Whether `cluster` pauses its objects: the annotation, or `spec.paused`.
pub fn cluster_is_paused(cluster: &DynamicObject) -> bool {
    has_paused_annotation(&cluster.metadata)
        || cluster.data["spec"]["paused"].as_bool() == Some(true)
}

/// What the cache knows of one Cluster's pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// The Cluster exists and is not paused: final.
    Running,
    /// The Cluster was paused when last seen: confirm with a read before skipping work.
    Paused,
    /// The cache does not know (not filled yet, the Cluster not seen yet, or deleted): read it.
    Unknown,
}

impl Pause {
    fn of(entry: Entry<Held<DynamicObject>>) -> Self {
        match entry {
            Entry::Held { value, .. } => match value.object() {
                Some(cluster) if cluster_is_paused(&cluster) => Pause::Paused,
                Some(_) => Pause::Running,
                None => Pause::Unknown,
            },
            Entry::Unknown => Pause::Unknown,
        }
    }
}

/// The pause of every Cluster, shared by the controllers of one process (cheap to clone): the
/// process's table of Clusters, which readers of a Cluster share ([`ClusterPauses::clusters`]).
#[derive(Clone)]
pub struct ClusterPauses {
    clusters: ObjectCache<DynamicObject>,
}

impl std::fmt::Debug for ClusterPauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPauses")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

impl ClusterPauses {
    /// A cache that reads Clusters through `client`; its watch starts on first use and stops
    /// when `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Self {
        Self {
            clusters: ObjectCache::dynamic(client, shutdown, &cluster_resource()),
        }
    }

    /// Whether the first list of Clusters has been read.
    pub fn is_synced(&self) -> bool {
        self.clusters.is_synced()
    }

    /// What is known of the pause of Cluster `name` in `namespace` (starts the watch on first use).
    pub fn lookup(&self, namespace: &str, name: &str) -> Pause {
        Pause::of(self.clusters.table().lookup(namespace, name))
    }

    /// Records `cluster` as seen by another watch (a controller's trigger), unless a newer version
    /// is already known.
    pub fn observe(&self, cluster: &DynamicObject) {
        self.clusters.observe(cluster);
    }

    /// Records one event of another watch of Clusters (a controller's trigger).
    pub fn observe_event(&self, event: &watcher::Event<DynamicObject>) {
        self.clusters.observe_event(event);
    }

    /// The Clusters themselves, as last seen (untyped; see [`ObjectCache`]): what reconciles that
    /// read their Cluster use instead of a read each. Controllers that follow their Cluster's
    /// pause record each Cluster change here before they queue the Cluster's objects.
    pub fn clusters(&self) -> &ObjectCache<DynamicObject> {
        &self.clusters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(paused: bool, annotated: bool) -> DynamicObject {
        let mut object = DynamicObject::new("a", &cluster_resource()).within("ns");
        if annotated {
            object.metadata.annotations = Some(
                [(
                    capstan_model::meta::ANNOTATION_PAUSED.to_owned(),
                    String::new(),
                )]
                .into(),
            );
        }
        object.data = json!({"spec": {"paused": paused}});
        object
    }

    fn held(object: DynamicObject) -> Entry<Held<DynamicObject>> {
        Entry::Held {
            value: Held::Object(std::sync::Arc::new(object)),
            version: None,
        }
    }

    #[test]
    fn pauses_by_spec_or_annotation_and_knows_nothing_of_an_unknown_cluster() {
        assert_eq!(Pause::of(held(cluster(false, false))), Pause::Running);
        assert_eq!(Pause::of(held(cluster(true, false))), Pause::Paused);
        assert_eq!(Pause::of(held(cluster(false, true))), Pause::Paused);
        assert_eq!(Pause::of(Entry::Unknown), Pause::Unknown);
    }
}
