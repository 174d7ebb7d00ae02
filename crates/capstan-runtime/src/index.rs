//! Objects by a key (their Cluster's name), kept by the watch that feeds a controller.
//!
//! A controller that follows its Cluster's pause is re-triggered for every object of a Cluster when
//! that Cluster changes. Finding those objects by scanning the controller's whole store made every
//! Cluster event cost O(all objects of the kind) — for a thousand clusters a few thousand objects
//! per event, thousands of events, in every such controller. [`KeyIndex`] answers "the objects of
//! this Cluster" from a map kept by the same watch stream that fills the controller's store, so a
//! lookup costs the number of objects it returns.
//!
//! Why it is never behind the controller: [`KeyIndex::follow`] sees each change of the store that
//! feeds the controller ([`crate::stores`]) before the object's reconcile is queued, so an object
//! whose reconcile found its Cluster paused is already indexed when the Cluster's unpause is
//! mapped. A completed (re)list replaces the map: objects deleted while the watch was down leave
//! with the old one. An index that holds an object no longer there only costs a trigger that finds
//! nothing.

use crate::stores::Change;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// (namespace, key): the key is looked up within a namespace, as a Cluster names its objects.
type Slot = (String, String);
/// (namespace, name) of one object.
type Id = (String, String);
/// What an object is filed under.
type KeysOf<K> = dyn Fn(&K) -> Vec<String> + Send + Sync;

#[derive(Default)]
struct Map {
    by_key: HashMap<Slot, BTreeSet<String>>,
    keys_of: HashMap<Id, Vec<String>>,
}

impl Map {
    fn set(&mut self, id: Id, mut keys: Vec<String>) {
        keys.sort();
        keys.dedup();
        if self.keys_of.get(&id) == Some(&keys) {
            return;
        }
        self.remove(&id);
        if keys.is_empty() {
            return;
        }
        for key in &keys {
            self.by_key
                .entry((id.0.clone(), key.clone()))
                .or_default()
                .insert(id.1.clone());
        }
        self.keys_of.insert(id, keys);
    }

    fn remove(&mut self, id: &Id) {
        let Some(old) = self.keys_of.remove(id) else {
            return;
        };
        for key in old {
            let slot = (id.0.clone(), key);
            if let Some(names) = self.by_key.get_mut(&slot) {
                names.remove(&id.1);
                if names.is_empty() {
                    self.by_key.remove(&slot);
                }
            }
        }
    }
}

#[derive(Default)]
struct State {
    current: Map,
}

/// The objects of `K` by keys computed from each object (its Cluster's name, the Secrets it
/// reads), within a namespace.
pub struct KeyIndex<K> {
    key: Arc<KeysOf<K>>,
    state: Arc<Mutex<State>>,
}

impl<K> Clone for KeyIndex<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            state: self.state.clone(),
        }
    }
}

fn id_of<K: Resource>(object: &K) -> Id {
    (object.namespace().unwrap_or_default(), object.name_any())
}

impl<K: Resource<DynamicType = ()>> KeyIndex<K> {
    /// An empty index that files each object under each of `keys(object)` (objects without any
    /// are not filed).
    pub fn new(keys: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) -> Self {
        Self {
            key: Arc::new(keys),
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain maps: still consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one change of the store that feeds the controller (see [`crate::stores`]): a
    /// completed list replaces the whole index, so objects deleted while the watch was down go.
    pub fn follow(&self, change: &Change<K>) {
        let mut state = self.state();
        match change {
            Change::Applied(object) => {
                let (id, keys) = (id_of(&**object), (self.key)(object));
                state.current.set(id, keys);
            }
            Change::Deleted(object) => state.current.remove(&id_of(&**object)),
            Change::Listed(objects) => {
                let mut listed = Map::default();
                for object in objects {
                    listed.set(id_of(&**object), (self.key)(object));
                }
                state.current = listed;
            }
        }
    }

    /// The objects filed under `key` in `namespace`.
    pub fn lookup(&self, namespace: &str, key: &str) -> Vec<ObjectRef<K>> {
        self.state()
            .current
            .by_key
            .get(&(namespace.to_owned(), key.to_owned()))
            .map(|names| {
                names
                    .iter()
                    .map(|name| ObjectRef::new(name).within(namespace))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many objects are filed.
    pub fn len(&self) -> usize {
        self.state().current.keys_of.len()
    }

    /// Whether no object is filed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::meta::LABEL_CLUSTER_NAME;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn object(namespace: &str, name: &str, cluster: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                labels: cluster.map(|c| [(LABEL_CLUSTER_NAME.to_owned(), c.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn index() -> KeyIndex<ConfigMap> {
        KeyIndex::new(|o: &ConfigMap| {
            o.labels()
                .get(LABEL_CLUSTER_NAME)
                .cloned()
                .into_iter()
                .collect()
        })
    }

    fn applied(object: ConfigMap) -> Change<ConfigMap> {
        Change::Applied(Arc::new(object))
    }

    fn names(refs: Vec<ObjectRef<ConfigMap>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn files_objects_by_cluster_within_their_namespace() {
        let index = index();
        index.follow(&applied(object("ns", "a", Some("c1"))));
        index.follow(&applied(object("ns", "b", Some("c1"))));
        index.follow(&applied(object("ns", "c", Some("c2"))));
        index.follow(&applied(object("other", "d", Some("c1"))));
        index.follow(&applied(object("ns", "e", None)));
        assert_eq!(names(index.lookup("ns", "c1")), ["a", "b"]);
        assert_eq!(names(index.lookup("ns", "c2")), ["c"]);
        assert_eq!(names(index.lookup("other", "c1")), ["d"]);
        assert!(index.lookup("ns", "missing").is_empty());
        assert_eq!(index.len(), 4, "an object without a Cluster is not filed");
    }

    #[test]
    fn an_update_moves_the_object_and_a_delete_removes_it() {
        let index = index();
        index.follow(&applied(object("ns", "a", Some("c1"))));
        index.follow(&applied(object("ns", "a", Some("c2"))));
        assert!(index.lookup("ns", "c1").is_empty(), "moved away");
        assert_eq!(names(index.lookup("ns", "c2")), ["a"]);
        index.follow(&applied(object("ns", "a", None)));
        assert!(index.lookup("ns", "c2").is_empty(), "label removed");
        index.follow(&applied(object("ns", "a", Some("c1"))));
        index.follow(&Change::Deleted(Arc::new(object("ns", "a", Some("c1")))));
        assert!(index.lookup("ns", "c1").is_empty());
        assert!(index.is_empty());
    }

    #[test]
    fn an_object_is_filed_under_each_of_its_keys() {
        let index = KeyIndex::new(|o: &ConfigMap| {
            o.data
                .as_ref()
                .map(|d| d.values().cloned().collect())
                .unwrap_or_default()
        });
        let mut reader = object("ns", "host", None);
        reader.data = Some(
            [
                ("a".to_owned(), "creds".to_owned()),
                ("b".to_owned(), "user".to_owned()),
            ]
            .into(),
        );
        index.follow(&applied(reader.clone()));
        assert_eq!(names(index.lookup("ns", "creds")), ["host"]);
        assert_eq!(names(index.lookup("ns", "user")), ["host"]);
        reader.data = Some([("a".to_owned(), "creds2".to_owned())].into());
        index.follow(&applied(reader));
        assert!(index.lookup("ns", "creds").is_empty());
        assert!(index.lookup("ns", "user").is_empty());
        assert_eq!(names(index.lookup("ns", "creds2")), ["host"]);
    }

    #[test]
    fn a_list_replaces_the_index() {
        let index = index();
        index.follow(&Change::Listed(vec![Arc::new(object(
            "ns",
            "gone",
            Some("c1"),
        ))]));
        assert_eq!(names(index.lookup("ns", "c1")), ["gone"]);
        // The watch restarts; "gone" was deleted while it was down, "new" created.
        index.follow(&Change::Listed(vec![Arc::new(object(
            "ns",
            "new",
            Some("c1"),
        ))]));
        assert_eq!(names(index.lookup("ns", "c1")), ["new"]);
    }
}
