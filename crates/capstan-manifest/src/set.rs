//! A set of loaded objects indexed by identity, with duplicates rejected.

use std::collections::BTreeMap;

use crate::error::ManifestError;
use crate::object::{LoadedObject, ObjectId, ObjectKey};

/// Loaded objects in load order, indexed by (group, kind, namespace, name).
#[derive(Clone, Debug, Default)]
pub struct ObjectSet {
    objects: Vec<LoadedObject>,
    ids: Vec<ObjectId>,
    index: BTreeMap<ObjectKey, usize>,
    default_namespace: Option<String>,
}

impl ObjectSet {
    /// Indexes objects with namespaces as written: an object without a namespace is distinct from
    /// one in `default`.
    ///
    /// # Errors
    /// An object without identity ([`LoadedObject::id`]) or the same object twice
    /// ([`ManifestError::DuplicateObject`], naming both locations).
    pub fn new(objects: Vec<LoadedObject>) -> Result<Self, ManifestError> {
        Self::build(objects, None)
    }

    /// Indexes objects reading an absent namespace as `namespace`, as `kubectl apply -n` would.
    /// The objects themselves are not changed.
    ///
    /// # Errors
    /// As [`ObjectSet::new`].
    pub fn with_default_namespace(
        objects: Vec<LoadedObject>,
        namespace: &str,
    ) -> Result<Self, ManifestError> {
        Self::build(objects, Some(namespace.to_owned()))
    }

    fn build(
        objects: Vec<LoadedObject>,
        default_namespace: Option<String>,
    ) -> Result<Self, ManifestError> {
        let mut set = Self {
            objects: Vec::with_capacity(objects.len()),
            ids: Vec::with_capacity(objects.len()),
            index: BTreeMap::new(),
            default_namespace,
        };
        for object in objects {
            set.insert(object)?;
        }
        Ok(set)
    }

    /// Adds an object.
    ///
    /// # Errors
    /// As [`ObjectSet::new`]; the set is unchanged on error.
    pub fn insert(&mut self, object: LoadedObject) -> Result<(), ManifestError> {
        let id = object.id()?;
        let key = self.key_of(&id);
        if let Some(&first) = self.index.get(&key) {
            let first_origin = self
                .objects
                .get(first)
                .map(|o| o.origin.to_string())
                .unwrap_or_default();
            return Err(ManifestError::DuplicateObject {
                object: id.to_string(),
                first: first_origin,
                second: object.origin.to_string(),
            });
        }
        self.index.insert(key, self.objects.len());
        self.objects.push(object);
        self.ids.push(id);
        Ok(())
    }

    fn key_of(&self, id: &ObjectId) -> ObjectKey {
        match &self.default_namespace {
            Some(ns) => id.key_with_default_namespace(ns),
            None => id.key(),
        }
    }

    /// The object with this identity. With a default namespace, `None` means that namespace.
    pub fn get(
        &self,
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&LoadedObject> {
        let namespace = namespace
            .map(str::to_owned)
            .or_else(|| self.default_namespace.clone());
        self.get_key(&ObjectKey {
            group: group.to_owned(),
            kind: kind.to_owned(),
            namespace,
            name: name.to_owned(),
        })
    }

    /// The object with this key.
    pub fn get_key(&self, key: &ObjectKey) -> Option<&LoadedObject> {
        self.index.get(key).and_then(|&i| self.objects.get(i))
    }

    /// The objects in load order.
    pub fn iter(&self) -> std::slice::Iter<'_, LoadedObject> {
        self.objects.iter()
    }

    /// The objects in load order, each with its identity.
    pub fn iter_with_ids(&self) -> impl Iterator<Item = (&ObjectId, &LoadedObject)> {
        self.ids.iter().zip(&self.objects)
    }

    /// The objects of a kind, in any group.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a LoadedObject> + 'a {
        self.iter_with_ids()
            .filter(move |(id, _)| id.kind == kind)
            .map(|(_, object)| object)
    }

    /// The objects of a kind in one group.
    pub fn of_group_kind<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a LoadedObject> + 'a {
        self.iter_with_ids()
            .filter(move |(id, _)| id.kind == kind && id.group() == group)
            .map(|(_, object)| object)
    }

    /// How many objects the set holds.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The objects, in load order.
    pub fn into_objects(self) -> Vec<LoadedObject> {
        self.objects
    }
}

impl<'a> IntoIterator for &'a ObjectSet {
    type Item = &'a LoadedObject;
    type IntoIter = std::slice::Iter<'a, LoadedObject>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;

    const TEXT: &str = "\
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: capi-1
  namespace: default
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Cluster
metadata:
  name: capi-1
  namespace: default
---
apiVersion: v1
kind: Secret
metadata:
  name: capi-1
";

    #[test]
    fn objects_are_found_by_identity() {
        let set = ObjectSet::new(load_str("s.yaml", TEXT).expect("loads")).expect("set");
        assert_eq!(set.len(), 3);
        assert!(
            set.get("cluster.x-k8s.io", "Cluster", Some("default"), "capi-1")
                .is_some()
        );
        assert!(set.get("", "Secret", None, "capi-1").is_some());
        assert!(set.get("", "Secret", Some("default"), "capi-1").is_none());
        assert_eq!(set.of_kind("Metal3Cluster").count(), 1);
        assert_eq!(
            set.of_group_kind("cluster.x-k8s.io", "Metal3Cluster")
                .count(),
            0
        );
        assert_eq!((&set).into_iter().count(), 3);

        let defaulted =
            ObjectSet::with_default_namespace(load_str("s.yaml", TEXT).expect("loads"), "default")
                .expect("set");
        assert!(
            defaulted
                .get("", "Secret", Some("default"), "capi-1")
                .is_some()
        );
        assert!(defaulted.get("", "Secret", None, "capi-1").is_some());
    }

    #[test]
    fn duplicates_name_both_locations_across_versions() {
        let text = format!(
            "{TEXT}---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: capi-1\n  namespace: default\n"
        );
        let err = ObjectSet::new(load_str("s.yaml", &text).expect("loads")).expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "s.yaml:18: Cluster default/capi-1 is defined twice (first at s.yaml:1); remove or rename one of them"
        );
    }

    #[test]
    fn default_namespace_makes_implicit_and_explicit_namespaces_collide() {
        let text = format!(
            "{TEXT}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: capi-1\n  namespace: default\n"
        );
        let objects = load_str("s.yaml", &text).expect("loads");
        assert!(ObjectSet::new(objects.clone()).is_ok());
        assert!(ObjectSet::with_default_namespace(objects, "default").is_err());
    }
}
