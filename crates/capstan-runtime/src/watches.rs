//! Triggers from related kinds, and cached reads.
//!
//! A controller is woken by changes to its own kind and to the kinds its objects reference or own:
//! a Machine by its infrastructure machine and bootstrap config, a MachineSet by its Machines. The
//! mappers here turn a changed object into the objects to reconcile — by owner reference
//! ([`owners_of_kind`]), or by a label that names the object ([`named_by_label`]) — and
//! [`watch_related`] adds such a watch for a kind known only at run time (a provider's kind given by
//! group and kind, read untyped).
//!
//! [`Cache`] reads the store of one kind for the whole process ([`crate::stores`]), for controllers
//! that read many objects on every pass (a Cluster's Machines, the hosts a Metal3Machine may
//! claim): reads come from memory instead of a list request each. A cache can lag behind a write
//! the controller just made; readers whose decisions would double an action on a stale read
//! (creating replicas) list live.

use crate::stores::SharedStore;
use crate::tables::ObjectCache;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

/// How long a new cache may take to list its kind before reads fail (and the reconcile is retried).
pub const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a cache or a kind could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the cache of {kind} did not fill within {CACHE_SYNC_TIMEOUT:?}")]
    NotSynced { kind: String },
    #[error("the cache of {kind} stopped")]
    Stopped { kind: String },
    #[error("discovering {group}/{kind}")]
    Discovery {
        group: String,
        kind: String,
        source: Box<kube::Error>,
    },
    #[error("the API serves no kind {kind} in group {group}")]
    UnknownKind { group: String, kind: String },
}

/// The objects of kind `Owner` that `object` names in its ownerReferences (controller or not).
pub fn owners_of_kind<Owner, K>(object: &K) -> Vec<ObjectRef<Owner>>
where
    Owner: Resource<DynamicType = ()>,
    K: Resource,
{
    let kind = Owner::kind(&());
    let group = Owner::group(&());
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == kind && group_of(&o.api_version) == group)
        .map(|o| {
            let reference = ObjectRef::new(&o.name);
            match object.meta().namespace.as_deref() {
                Some(namespace) => reference.within(namespace),
                None => reference,
            }
        })
        .collect()
}

fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default()
}

/// The object of kind `Target` in `object`'s namespace whose name is `object`'s `label` value.
pub fn named_by_label<Target, K>(object: &K, label: &str) -> Option<ObjectRef<Target>>
where
    Target: Resource<DynamicType = ()>,
    K: Resource,
{
    let name = object.meta().labels.as_ref()?.get(label)?;
    let reference = ObjectRef::new(name);
    Some(match object.meta().namespace.as_deref() {
        Some(namespace) => reference.within(namespace),
        None => reference,
    })
}

/// Adds a watch of the kind `resource` (read untyped) that wakes the objects of `K` it names as
/// owners. A kind the API does not serve makes the watch retry with backoff (logged by kube), so a
/// controller may name provider kinds that are installed later.
pub fn watch_related<K>(
    controller: Controller<K>,
    client: &Client,
    resource: &ApiResource,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    controller.watches_with(
        Api::<DynamicObject>::all_with(client.clone(), resource),
        resource.clone(),
        watcher::Config::default(),
        |object: DynamicObject| owners_of_kind::<K, _>(&object),
    )
}

/// Adds a watch of the namespaced kind `Other` that records every change in `cache` (the process's
/// cache of the kind, [`crate::tables::ObjectCaches::typed`]) and only then wakes the objects
/// `mapper` names: a reconcile woken by a change reads that change from the cache.
pub fn watches_cached<K, Other, I>(
    controller: Controller<K>,
    client: &Client,
    cache: ObjectCache<Other>,
    mapper: impl Fn(Other) -> I + Sync + Send + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    Other: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    I: 'static + IntoIterator<Item = ObjectRef<K>>,
    I::IntoIter: Send,
{
    // The same objects the cache holds (all of the kind, or those with its label).
    let config = cache.table().watch_config();
    let changed = watcher(Api::<Other>::all(client.clone()), config)
        .default_backoff()
        .inspect(move |event| {
            if let Ok(event) = event {
                cache.observe_event(event);
            }
        })
        .touched_objects();
    controller.watches_stream(changed, mapper)
}

/// The [`ApiResource`] of `kind` in `group`: from capstan's catalogue of kinds (at their storage
/// version) when it knows the kind, else from the API's discovery (its preferred version).
pub async fn resolve_kind(
    client: &Client,
    group: &str,
    kind: &str,
) -> Result<(ApiResource, bool), WatchError> {
    if let Some(info) = capstan_model::kinds::KINDS
        .iter()
        .find(|k| k.group == group && k.kind == kind)
    {
        let version = info.storage_version;
        return Ok((
            ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: info.api_version(version),
                kind: kind.to_owned(),
                plural: info.plural.to_owned(),
            },
            info.scope == capstan_model::resource::Scope::Namespaced,
        ));
    }
    let discovered = kube::discovery::group(client, group)
        .await
        .map_err(|source| WatchError::Discovery {
            group: group.to_owned(),
            kind: kind.to_owned(),
            source: Box::new(source),
        })?;
    let (resource, capabilities): (ApiResource, ApiCapabilities) = discovered
        .recommended_kind(kind)
        .ok_or_else(|| WatchError::UnknownKind {
            group: group.to_owned(),
            kind: kind.to_owned(),
        })?;
    Ok((resource, capabilities.scope == Scope::Namespaced))
}

/// Every object of `K`, read from the kind's store for the whole process ([`crate::stores`]).
pub struct Cache<K: Resource<DynamicType = ()> + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
}

impl<K> Clone for Cache<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// The objects `store` holds (the kind's store for the whole process).
    pub fn of(store: &SharedStore<K>) -> Self {
        Self {
            store: store.reader(),
        }
    }

    /// Waits until the first list has filled the cache.
    pub async fn synced(&self) -> Result<(), WatchError> {
        let kind = K::kind(&()).into_owned();
        match tokio::time::timeout(CACHE_SYNC_TIMEOUT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(WatchError::Stopped { kind }),
            Err(_) => Err(WatchError::NotSynced { kind }),
        }
    }

    /// The object `name` in `namespace`, as last seen.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// The objects in `namespace` for which `keep` holds.
    pub fn list(&self, namespace: &str, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.store
            .state_filter(|o| o.namespace().as_deref() == Some(namespace) && keep(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn owned_by(refs: &[(&str, &str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                owner_references: Some(
                    refs.iter()
                        .map(|(api_version, kind, name)| OwnerReference {
                            api_version: (*api_version).into(),
                            kind: (*kind).into(),
                            name: (*name).into(),
                            ..OwnerReference::default()
                        })
                        .collect(),
                ),
                labels: Some([("owner".to_owned(), "x".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn owners_match_kind_and_group() {
        use capstan_model::capi::v1beta2::{Machine, MachineSet};
        let object = owned_by(&[
            ("cluster.x-k8s.io/v1beta1", "MachineSet", "a"),
            ("cluster.x-k8s.io/v1beta2", "Machine", "b"),
            ("other.io/v1", "MachineSet", "c"),
        ]);
        let sets: Vec<String> = owners_of_kind::<MachineSet, _>(&object)
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        assert_eq!(sets, ["ns/a"]);
        assert_eq!(owners_of_kind::<Machine, _>(&object).len(), 1);
        let named = named_by_label::<MachineSet, _>(&object, "owner").unwrap();
        assert_eq!(named.name, "x");
        assert!(named_by_label::<MachineSet, _>(&object, "missing").is_none());
    }
}
