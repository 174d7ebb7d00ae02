//! Objects as server-side apply sees them: JSON walked along the kind's schema, where maps are
//! structs (named fields), granular maps or atomic, and lists are atomic, sets of scalars or
//! associative lists keyed by some of their items' fields. On that view: the set of fields a
//! value sets, the comparison of two values (added, modified, removed fields), the merge of an
//! applied configuration into an object, and the removal of a set of fields.
//!
//! List semantics come from the schema's `x-kubernetes-list-type`/`-list-map-keys`; for
//! Kubernetes' own kinds (and every object's `metadata`), whose generated schemas do not carry
//! them, from the merge keys of the Kubernetes types (the same table strategic merge uses), with
//! the extra key fields upstream declares (`protocol` for ports, defaulting to `TCP`).
//! A list with neither is atomic, as for custom resources upstream.

use crate::fieldset::{FieldSet, Path, PathElement};
use crate::strategic::{ListStrategy, strategy};
use capstan_schema::{ListType, MapType, Schema};
use serde_json::{Map, Value};
use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// How the items of a list are told apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// The list is one value.
    Atomic,
    /// Scalars, each its own item.
    Set,
    /// Objects identified by these fields.
    Map(Vec<String>),
}

/// `ObjectMeta`'s schema, shared by every kind's `metadata`.
fn object_meta() -> Option<&'static Schema> {
    static META: OnceLock<Option<Schema>> = OnceLock::new();
    META.get_or_init(|| {
        crate::builtin::schemas::schema("", "Namespace")
            .and_then(|namespace| Schema::from_value(&namespace["properties"]["metadata"]).ok())
    })
    .as_ref()
}

/// Where a value sits: its schema node (none: everything deduced from the value) and the field
/// names the Kubernetes types' merge keys are looked up by.
#[derive(Clone, Debug)]
pub struct Shape<'s> {
    schema: Option<&'s Schema>,
    builtin: bool,
    root: bool,
    parent: Option<String>,
    field: Option<String>,
}

impl<'s> Shape<'s> {
    /// The shape of a whole object of a kind with this schema; `builtin` for Kubernetes' own kinds.
    pub fn root(schema: Option<&'s Schema>, builtin: bool) -> Self {
        Self {
            schema,
            builtin,
            root: true,
            parent: None,
            field: None,
        }
    }

    fn child(&self, key: &str) -> Shape<'s> {
        let meta = self.root && key == "metadata";
        Shape {
            schema: if meta {
                object_meta()
            } else {
                self.schema.and_then(|s| s.property(key))
            },
            builtin: self.builtin || meta,
            root: false,
            parent: self.field.clone(),
            field: Some(key.to_owned()),
        }
    }

    fn item(&self) -> Shape<'s> {
        Shape {
            schema: self.schema.and_then(|s| s.items.as_deref()),
            builtin: self.builtin,
            root: false,
            parent: self.parent.clone(),
            field: self.field.clone(),
        }
    }

    /// Whether `key` is a declared field of this struct (as opposed to a map entry).
    fn is_named_field(&self, key: &str) -> bool {
        self.schema.is_some_and(|s| s.properties.contains_key(key))
    }

    fn map_atomic(&self) -> bool {
        self.schema
            .is_some_and(|s| s.map_type == Some(MapType::Atomic))
    }

    /// Structs that Kubernetes' own types hold by value: always present in a typed object, so
    /// never themselves added or removed (only their fields are).
    fn is_value_struct(&self) -> bool {
        self.builtin
            && self.schema.is_some_and(|s| !s.properties.is_empty())
            && matches!(
                self.field.as_deref(),
                Some("spec" | "status" | "metadata" | "template" | "strategy" | "updateStrategy")
            )
    }

    pub fn list_kind<V: Borrow<Value>>(&self, items: &[V]) -> ListKind {
        match self.schema.and_then(|s| s.list_type) {
            Some(ListType::Atomic) => return ListKind::Atomic,
            Some(ListType::Set) => return ListKind::Set,
            Some(ListType::Map) => {
                let keys = self
                    .schema
                    .map(|s| s.list_map_keys.clone())
                    .unwrap_or_default();
                return if keys.is_empty() {
                    ListKind::Atomic
                } else {
                    ListKind::Map(keys)
                };
            }
            None => {}
        }
        if !self.builtin {
            return ListKind::Atomic;
        }
        let Some(field) = self.field.as_deref() else {
            return ListKind::Atomic;
        };
        // Where Kubernetes' `+listType` and patch strategy part ways (a strategic merge replaces
        // these lists whole): an EndpointSlice endpoint's `addresses` is a set, a container's
        // `resources.claims` a map by name.
        match (self.parent.as_deref(), field) {
            (Some("endpoints"), "addresses")
                if items
                    .iter()
                    .all(|i| !i.borrow().is_object() && !i.borrow().is_array()) =>
            {
                return ListKind::Set;
            }
            (Some("resources"), "claims") => return ListKind::Map(vec!["name".to_owned()]),
            _ => {}
        }
        match strategy(self.parent.as_deref(), field, items) {
            ListStrategy::Replace => ListKind::Atomic,
            ListStrategy::MergeScalars => ListKind::Set,
            ListStrategy::MergeKey(key) => ListKind::Map(match key {
                "containerPort" | "port" => vec![key.to_owned(), "protocol".to_owned()],
                "topologyKey" => vec![key.to_owned(), "whenUnsatisfiable".to_owned()],
                other => vec![other.to_owned()],
            }),
        }
    }
}

/// The path element of a list item (its position when it lacks what identifies it).
fn item_element(kind: &ListKind, item: &Value, index: usize) -> PathElement {
    match (kind, item) {
        (ListKind::Map(keys), Value::Object(fields)) => {
            let mut found: Vec<(String, String)> = keys
                .iter()
                .filter_map(|k| match fields.get(k) {
                    Some(v) => Some((k.clone(), v.to_string())),
                    // Upstream's key defaults: ports are TCP unless said otherwise.
                    None if k == "protocol" => Some((k.clone(), "\"TCP\"".to_owned())),
                    None => None,
                })
                .collect();
            if found.iter().all(|(k, _)| k == "protocol") {
                return PathElement::Index(index);
            }
            found.sort();
            PathElement::Key(found)
        }
        (ListKind::Set, scalar) if !scalar.is_object() && !scalar.is_array() => {
            PathElement::Value(scalar.to_string())
        }
        _ => PathElement::Index(index),
    }
}

/// The items of a list by path element, first occurrence wins, in order.
fn index_items<'v>(kind: &ListKind, items: &'v [Value]) -> Vec<(PathElement, &'v Value)> {
    let mut seen = HashSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| (item_element(kind, item, i), item))
        .filter(|(pe, _)| seen.insert(pe.clone()))
        .collect()
}

/// The fields `value` sets.
pub fn field_set(value: &Value, shape: &Shape<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    collect_fields(value, shape, &mut Vec::new(), &mut set);
    set
}

fn collect_fields(value: &Value, shape: &Shape<'_>, path: &mut Path, set: &mut FieldSet) {
    match value {
        Value::Object(map) => {
            if shape.map_atomic() {
                set.insert(path);
                return;
            }
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                collect_fields(child, &shape.child(key), path, set);
                let empty = child.is_null() || child.as_object().is_some_and(Map::is_empty);
                if empty || !shape.is_named_field(key) {
                    set.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let kind = shape.list_kind(items);
            if kind == ListKind::Atomic {
                set.insert(path);
                return;
            }
            let mut counts: HashMap<PathElement, usize> = HashMap::new();
            let elements: Vec<PathElement> = items
                .iter()
                .enumerate()
                .map(|(i, item)| item_element(&kind, item, i))
                .collect();
            for pe in &elements {
                *counts.entry(pe.clone()).or_default() += 1;
            }
            let item_shape = shape.item();
            let mut done = HashSet::new();
            for (pe, item) in elements.iter().zip(items) {
                if !done.insert(pe.clone()) {
                    continue;
                }
                path.push(pe.clone());
                // A repeated item is owned as a whole.
                if counts.get(pe).copied().unwrap_or(0) == 1 {
                    collect_fields(item, &item_shape, path, set);
                }
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// What changed between two values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Keeps only the fields `keep` lets through (the fields a request may change).
    pub fn filtered(&self, keep: impl Fn(&FieldSet) -> FieldSet) -> Comparison {
        Comparison {
            added: keep(&self.added),
            modified: keep(&self.modified),
            removed: keep(&self.removed),
        }
    }
}

/// Compares `old` with `new`. `metadata.managedFields` is never compared: nobody owns it, and
/// leaving it out here spares a copy of both objects without it.
pub fn compare(old: &Value, new: &Value, shape: &Shape<'_>) -> Comparison {
    compare_where(old, new, shape, |_| true)
}

/// [`compare`] limited to the top-level fields `keep` lets through: a write that can change only
/// `status` (or everything but it) is compared only there, rather than compared whole and filtered.
pub fn compare_where(
    old: &Value,
    new: &Value,
    shape: &Shape<'_>,
    keep: impl Fn(&str) -> bool,
) -> Comparison {
    let mut out = Comparison::default();
    let (Some(om), Some(nm)) = (old.as_object(), new.as_object()) else {
        compare_at(Some(old), Some(new), shape, &mut Vec::new(), &mut out);
        return out;
    };
    let keys = om
        .keys()
        .chain(nm.keys().filter(|k| !om.contains_key(*k)))
        .filter(|k| keep(k));
    let mut path = Vec::new();
    for key in keys {
        path.push(PathElement::Field(key.clone()));
        compare_at(
            om.get(key),
            nm.get(key),
            &shape.child(key),
            &mut path,
            &mut out,
        );
        path.pop();
    }
    out
}

/// Whether `key` under `path` is `metadata.managedFields`.
fn is_managed_fields(path: &Path, key: &str) -> bool {
    key == "managedFields"
        && matches!(path.as_slice(), [PathElement::Field(metadata)] if metadata == "metadata")
}

fn compare_leaf(old: Option<&Value>, new: Option<&Value>, path: &Path, out: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(a), Some(b)) if a != b => out.modified.insert(path),
        _ => {}
    }
}

fn compare_at(
    old: Option<&Value>,
    new: Option<&Value>,
    shape: &Shape<'_>,
    path: &mut Path,
    out: &mut Comparison,
) {
    let is_map = |v: Option<&Value>| v.is_none_or(Value::is_object);
    let is_list = |v: Option<&Value>| v.is_none_or(Value::is_array);
    if is_map(old) && is_map(new) {
        let (om, nm) = (
            old.and_then(Value::as_object),
            new.and_then(Value::as_object),
        );
        let empty = |m: Option<&Map<String, Value>>| m.is_none_or(Map::is_empty);
        if shape.map_atomic() || (empty(om) && empty(nm)) {
            compare_leaf(old, new, path, out);
            return;
        }
        let keys: Vec<&String> = om
            .into_iter()
            .flat_map(Map::keys)
            .chain(
                nm.into_iter()
                    .flat_map(Map::keys)
                    .filter(|k| om.is_none_or(|o| !o.contains_key(*k))),
            )
            .collect();
        for key in keys {
            if is_managed_fields(path, key) {
                continue;
            }
            path.push(PathElement::Field(key.clone()));
            compare_at(
                om.and_then(|m| m.get(key)),
                nm.and_then(|m| m.get(key)),
                &shape.child(key),
                path,
                out,
            );
            path.pop();
        }
    } else if is_list(old) && is_list(new) {
        let (ol, nl) = (
            old.and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
            new.and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        // The items only pick a list's kind: borrowed, not copied.
        let hint: Vec<&Value> = ol.iter().chain(nl).collect();
        let kind = shape.list_kind(&hint);
        if kind == ListKind::Atomic || (ol.is_empty() && nl.is_empty()) {
            compare_leaf(old, new, path, out);
            return;
        }
        let (oi, ni) = (index_items(&kind, ol), index_items(&kind, nl));
        let old_by: HashMap<&PathElement, &Value> = oi.iter().map(|(p, v)| (p, *v)).collect();
        let new_by: HashMap<&PathElement, &Value> = ni.iter().map(|(p, v)| (p, *v)).collect();
        let item_shape = shape.item();
        let elements: Vec<&PathElement> = oi
            .iter()
            .map(|(p, _)| p)
            .chain(
                ni.iter()
                    .map(|(p, _)| p)
                    .filter(|p| !old_by.contains_key(p)),
            )
            .collect();
        for pe in elements {
            path.push(pe.clone());
            compare_at(
                old_by.get(pe).copied(),
                new_by.get(pe).copied(),
                &item_shape,
                path,
                out,
            );
            path.pop();
        }
    } else {
        compare_leaf(old, new, path, out);
        return;
    }
    // A map or list that appeared or went is itself added or removed.
    if !path.is_empty() && !shape.is_value_struct() {
        match (old, new) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            _ => {}
        }
    }
}

/// `config` merged into `live`: what `config` sets wins, maps merge field by field, non-atomic
/// lists item by item (shared items in `config`'s order, `live`'s other items kept in place).
pub fn merge(live: &Value, config: &Value, shape: &Shape<'_>) -> Value {
    match (live, config) {
        (Value::Object(lm), Value::Object(cm)) if !shape.map_atomic() => {
            let mut out = lm.clone();
            for (key, cv) in cm {
                let merged = match lm.get(key) {
                    Some(lv) => merge(lv, cv, &shape.child(key)),
                    None => cv.clone(),
                };
                out.insert(key.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(ll), Value::Array(cl)) => {
            let hint: Vec<&Value> = ll.iter().chain(cl).collect();
            let kind = shape.list_kind(&hint);
            if kind == ListKind::Atomic {
                return config.clone();
            }
            let (li, ci) = (index_items(&kind, ll), index_items(&kind, cl));
            let live_by: HashMap<&PathElement, &Value> = li.iter().map(|(p, v)| (p, *v)).collect();
            let in_config: HashSet<&PathElement> = ci.iter().map(|(p, _)| p).collect();
            // Shared items come in the configuration's order; a live-only item keeps its place
            // before the next shared item.
            let mut shared = ci
                .iter()
                .map(|(p, _)| p)
                .filter(|p| live_by.contains_key(p));
            let mut next_shared = shared.next();
            let item_shape = shape.item();
            let mut out = Vec::with_capacity(li.len() + ci.len());
            let (mut l, mut c) = (0, 0);
            while l < li.len() || c < ci.len() {
                if l < li.len() && c < ci.len() {
                    if li[l].0 == ci[c].0 {
                        out.push(merge(li[l].1, ci[c].1, &item_shape));
                        if next_shared == Some(&ci[c].0) {
                            next_shared = shared.next();
                        }
                        l += 1;
                        c += 1;
                        continue;
                    }
                    if in_config.contains(&li[l].0) && next_shared.is_some_and(|n| *n != li[l].0) {
                        l += 1;
                        continue;
                    }
                }
                if l < li.len() && !in_config.contains(&li[l].0) {
                    out.push(li[l].1.clone());
                    l += 1;
                    continue;
                }
                if c < ci.len() {
                    let (pe, cv) = &ci[c];
                    out.push(match live_by.get(pe) {
                        Some(lv) => merge(lv, cv, &item_shape),
                        None => (*cv).clone(),
                    });
                    if next_shared == Some(pe) {
                        next_shared = shared.next();
                    }
                    c += 1;
                    continue;
                }
                // A shared live item already merged in the configuration's order.
                l += 1;
            }
            Value::Array(out)
        }
        _ => config.clone(),
    }
}

/// `value` without the fields in `set` (a member is removed with everything below it); maps
/// and lists left empty by the removal go too.
pub fn remove_fields(value: &Value, set: &FieldSet, shape: &Shape<'_>) -> Value {
    remove_at(value, set, shape).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove_at(value: &Value, set: &FieldSet, shape: &Shape<'_>) -> Option<Value> {
    match value {
        Value::Object(map) if !shape.map_atomic() && !map.is_empty() => {
            let mut out = Map::new();
            for (key, child) in map {
                let pe = PathElement::Field(key.clone());
                if set.has_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(below) => {
                        if let Some(kept) = remove_at(child, below, &shape.child(key)) {
                            out.insert(key.clone(), kept);
                        }
                    }
                    None => {
                        out.insert(key.clone(), child.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) if !items.is_empty() => {
            let kind = shape.list_kind(items);
            if kind == ListKind::Atomic {
                return Some(value.clone());
            }
            let item_shape = shape.item();
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let pe = item_element(&kind, item, i);
                if set.has_member(&pe) {
                    continue;
                }
                match set.child(&pe) {
                    Some(below) => {
                        if let Some(kept) = remove_at(item, below, &item_shape) {
                            out.push(kept);
                        }
                    }
                    None => out.push(item.clone()),
                }
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(value.clone()),
    }
}

/// `set` with every struct field that has members below it made a member too, so that removing
/// the set removes such a struct when nothing else holds it. An object's `metadata` is never
/// removed as a whole.
pub fn with_named_fields(set: &FieldSet, shape: &Shape<'_>) -> FieldSet {
    let mut out = set.clone();
    for pe in set.elements() {
        let Some(below) = set.child(pe) else {
            continue;
        };
        let child_shape = match pe {
            PathElement::Field(key) => shape.child(key),
            _ => shape.item(),
        };
        out.set_child(pe.clone(), with_named_fields(below, &child_shape));
        if let PathElement::Field(key) = pe
            && shape.is_named_field(key)
            && !(shape.root && key == "metadata")
        {
            out.insert_member(pe.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn pod_shape() -> Shape<'static> {
        static POD: OnceLock<Schema> = OnceLock::new();
        let schema = POD.get_or_init(|| {
            Schema::from_value(&crate::builtin::schemas::schema("", "Pod").unwrap()).unwrap()
        });
        Shape::root(Some(schema), true)
    }

    #[test]
    fn field_sets_follow_the_kubernetes_types() {
        let pod = json!({
            "metadata": {"labels": {"app": "a"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "app", "image": "i", "args": ["a", "b"], "ports": [{"containerPort": 80}]}]},
        });
        let set = field_set(&pod, &pod_shape()).to_fields_v1();
        assert_eq!(
            set,
            json!({
                "f:metadata": {"f:finalizers": {"v:\"x\"": {}}, "f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                    ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}},
                }}},
            })
        );
    }

    #[test]
    fn endpoint_slice_addresses_are_a_set_and_pod_ips_keyed_by_ip() {
        let slice = Schema::from_value(
            &crate::builtin::schemas::schema("discovery.k8s.io", "EndpointSlice").unwrap(),
        )
        .unwrap();
        let set = field_set(
            &json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}]}),
            &Shape::root(Some(&slice), true),
        );
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:addressType": {},
                "f:endpoints": {},
            }),
            "endpoints is atomic (no list type upstream), so its items are not taken apart"
        );
        let endpoint = Shape::root(Some(&slice), true).child("endpoints").item();
        assert_eq!(
            endpoint.child("addresses").list_kind(&[json!("10.0.0.1")]),
            ListKind::Set
        );
        let pod = pod_shape();
        let status = pod.child("status");
        for field in ["podIPs", "hostIPs"] {
            assert_eq!(
                status.child(field).list_kind(&[json!({"ip": "10.0.0.1"})]),
                ListKind::Map(vec!["ip".to_owned()])
            );
        }
        let container = pod.child("spec").child("containers").item();
        assert_eq!(
            container
                .child("resources")
                .child("claims")
                .list_kind(&[json!({"name": "gpu"})]),
            ListKind::Map(vec!["name".to_owned()])
        );
        let node =
            Schema::from_value(&crate::builtin::schemas::schema("", "Node").unwrap()).unwrap();
        assert_eq!(
            Shape::root(Some(&node), true)
                .child("spec")
                .child("podCIDRs")
                .list_kind(&[json!("10.244.0.0/24")]),
            ListKind::Set
        );
    }

    #[test]
    fn open_objects_own_every_key() {
        let shape = Shape::root(None, false);
        let set = field_set(&json!({"spec": {"a": 1, "list": [1, 2]}}), &shape);
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:spec": {".": {}, "f:a": {}, "f:list": {}}})
        );
    }

    #[test]
    fn comparisons_mark_new_maps_and_items() {
        let shape = pod_shape();
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        let new = json!({"metadata": {"name": "p", "labels": {"x": "y"}}, "spec": {"containers": [{"name": "a", "image": "2"}, {"name": "b", "image": "1"}]}});
        let c = compare(&old, &new, &shape);
        assert_eq!(
            c.added.to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}}}},
            })
        );
        assert_eq!(
            c.modified.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {"f:image": {}}}}})
        );
        assert!(c.removed.is_empty());
        let back = compare(&new, &old, &shape);
        assert_eq!(back.removed, c.added);
    }

    #[test]
    fn comparisons_skip_managed_fields_and_keep_to_the_fields_asked_for() {
        let shape = pod_shape();
        let old = json!({
            "metadata": {"name": "p", "managedFields": [{"manager": "a"}]},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Pending"},
        });
        let new = json!({
            "metadata": {"name": "p", "managedFields": [{"manager": "b"}], "labels": {"x": "y"}},
            "spec": {"nodeName": "n2"},
            "status": {"phase": "Running"},
        });
        let whole = compare(&old, &new, &shape);
        assert_eq!(
            whole.added.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
        );
        assert_eq!(
            whole.modified.to_fields_v1(),
            json!({"f:spec": {"f:nodeName": {}}, "f:status": {"f:phase": {}}})
        );
        let status = compare_where(&old, &new, &shape, |key| key == "status");
        assert!(status.added.is_empty());
        assert_eq!(
            status.modified.to_fields_v1(),
            json!({"f:status": {"f:phase": {}}})
        );
        let rest = compare_where(&old, &new, &shape, |key| key != "status");
        assert_eq!(rest.added, whole.added);
        assert_eq!(
            rest.modified.to_fields_v1(),
            json!({"f:spec": {"f:nodeName": {}}})
        );
    }

    #[test]
    fn merges_keep_live_items_and_config_order() {
        let shape = pod_shape();
        let only_live = merge(
            &json!({"spec": {"containers": [{"name": "a"}]}}),
            &json!({"spec": {"containers": [{"name": "b"}]}}),
            &shape,
        );
        assert_eq!(
            only_live["spec"]["containers"],
            json!([{"name": "a"}, {"name": "b"}])
        );
        let live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "side", "image": "s"}, {"name": "b", "image": "1"}]}});
        let config = json!({"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a"}, {"name": "c", "image": "3"}]}});
        let merged = merge(&live, &config, &shape);
        let names: Vec<&str> = merged["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["side", "b", "a", "c"]);
        assert_eq!(merged["spec"]["containers"][1]["image"], "2");
        assert_eq!(merged["spec"]["containers"][2]["image"], "1");
        // Atomic lists are replaced.
        let merged = merge(
            &json!({"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}),
            &json!({"spec": {"containers": [{"name": "a", "args": ["z"]}]}}),
            &shape,
        );
        assert_eq!(merged["spec"]["containers"][0]["args"], json!(["z"]));
    }

    #[test]
    fn removal_takes_items_and_leaves_emptied_containers_out() {
        let shape = pod_shape();
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let mut set = FieldSet::new();
        set.insert(&[
            PathElement::Field("metadata".into()),
            PathElement::Field("labels".into()),
            PathElement::Field("a".into()),
        ]);
        set.insert(&[
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            PathElement::Key(vec![("name".into(), "\"b\"".into())]),
        ]);
        assert_eq!(
            remove_fields(&pod, &set, &shape),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}})
        );
        let named = with_named_fields(&set, &shape);
        assert!(named.has(&[PathElement::Field("spec".into())]));
        assert!(!named.has(&[PathElement::Field("metadata".into())]));
    }
}
