//! Sets of field paths, as server-side apply tracks ownership: the `FieldsV1` form of
//! `metadata.managedFields` (`f:<field>`, `k:<keys as JSON>`, `v:<value as JSON>`, `i:<index>`,
//! and `.` for "this node itself"), set algebra, and the path text used in conflict messages
//! (`.spec.containers[name="app"].image`).
//!
//! A set is a tree: each node holds the path elements that are members (owned) and the children
//! that lead to deeper members. A node can be both (`{".": {}, "f:a": {}}`).

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Why a `fieldsV1` document could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FieldSetError {
    #[error("fieldsV1 must be a JSON object at {0:?}")]
    NotAnObject(String),
    #[error("fieldsV1 key {0:?} is not a field (f:), key (k:), value (v:) or index (i:)")]
    BadKey(String),
}

/// One step of a field path. The derived order (fields, then keys, values, indexes) is the order
/// in which `fieldsV1` lists them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A named field or map key.
    Field(String),
    /// An item of an associative list, by its key fields (name, JSON text of the value), sorted by
    /// name.
    Key(Vec<(String, String)>),
    /// An item of a set-like list, by the JSON text of its value.
    Value(String),
    /// An item of a list by position.
    Index(usize),
}

impl PathElement {
    /// The `fieldsV1` key.
    fn encode(&self) -> String {
        match self {
            Self::Field(name) => format!("f:{name}"),
            Self::Key(keys) => {
                let mut text = String::from("k:{");
                for (i, (name, value)) in keys.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&Value::String(name.clone()).to_string());
                    text.push(':');
                    text.push_str(value);
                }
                text.push('}');
                text
            }
            Self::Value(value) => format!("v:{value}"),
            Self::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(key: &str) -> Result<Self, FieldSetError> {
        let bad = || FieldSetError::BadKey(key.to_owned());
        let (prefix, rest) = key.split_at_checked(2).ok_or_else(bad)?;
        match prefix {
            "f:" => Ok(Self::Field(rest.to_owned())),
            "v:" => {
                let value: Value = serde_json::from_str(rest).map_err(|_| bad())?;
                Ok(Self::Value(value.to_string()))
            }
            "i:" => rest.parse().map(Self::Index).map_err(|_| bad()),
            "k:" => {
                let value: Value = serde_json::from_str(rest).map_err(|_| bad())?;
                let fields = value.as_object().ok_or_else(bad)?;
                let mut keys: Vec<(String, String)> = fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect();
                keys.sort();
                Ok(Self::Key(keys))
            }
            _ => Err(bad()),
        }
    }

    /// The element as conflict messages print it.
    fn display(&self) -> String {
        match self {
            Self::Field(name) => format!(".{name}"),
            Self::Key(keys) => format!(
                "[{}]",
                keys.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Self::Value(value) => format!("[={value}]"),
            Self::Index(i) => format!("[{i}]"),
        }
    }
}

/// A field path.
pub type Path = Vec<PathElement>;

/// A path as kube-apiserver prints it: `.spec.containers[name="app"].image`.
pub fn path_text(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds a path (the empty path is not a member of anything and is ignored).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether the path is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether `element` itself is a member of this node.
    pub fn has_member(&self, element: &PathElement) -> bool {
        self.members.contains(element)
    }

    /// The subset below `element` (paths relative to it).
    pub fn child(&self, element: &PathElement) -> Option<&FieldSet> {
        self.children.get(element).filter(|c| !c.is_empty())
    }

    /// The members of this node and the elements with children, each once.
    pub fn elements(&self) -> BTreeSet<&PathElement> {
        self.members.iter().chain(self.children.keys()).collect()
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out.prune_empty();
        out
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(pe.clone(), rest);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(pe.clone(), both);
                }
            }
        }
        out
    }

    /// Keeps only the paths for which `keep` (given the first element) holds.
    pub fn filter_top(&self, keep: impl Fn(&PathElement) -> bool) -> FieldSet {
        FieldSet {
            members: self.members.iter().filter(|pe| keep(pe)).cloned().collect(),
            children: self
                .children
                .iter()
                .filter(|(pe, _)| keep(pe))
                .map(|(pe, c)| (pe.clone(), c.clone()))
                .collect(),
        }
    }

    /// Sets the node below `element` (paths relative to it), replacing what was there.
    pub fn set_child(&mut self, element: PathElement, child: FieldSet) {
        if child.is_empty() {
            self.children.remove(&element);
        } else {
            self.children.insert(element, child);
        }
    }

    /// Makes `element` a member of this node.
    pub fn insert_member(&mut self, element: PathElement) {
        self.members.insert(element);
    }

    /// Removes `element` as a member of this node (its children stay).
    pub fn remove_member(&mut self, element: &PathElement) {
        self.members.remove(element);
    }

    fn prune_empty(&mut self) {
        self.children.retain(|_, c| !c.is_empty());
    }

    /// Every member path, in `fieldsV1` order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for pe in self.elements() {
            prefix.push(pe.clone());
            if self.members.contains(pe) {
                out.push(prefix.clone());
            }
            if let Some(child) = self.children.get(pe) {
                child.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `fieldsV1` document.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for pe in self.elements() {
            let mut node = match self.children.get(pe).filter(|c| !c.is_empty()) {
                Some(child) => match child.to_fields_v1() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                None => Map::new(),
            };
            if self.members.contains(pe) && !node.is_empty() {
                let mut with_dot = Map::new();
                with_dot.insert(".".into(), Value::Object(Map::new()));
                with_dot.extend(node);
                node = with_dot;
            }
            out.insert(pe.encode(), Value::Object(node));
        }
        Value::Object(out)
    }

    /// Reads a `fieldsV1` document.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, FieldSetError> {
        let map = value
            .as_object()
            .ok_or_else(|| FieldSetError::NotAnObject(value.to_string()))?;
        let mut set = FieldSet::new();
        for (key, node) in map {
            if key == "." {
                continue;
            }
            let pe = PathElement::decode(key)?;
            let inner = node
                .as_object()
                .ok_or_else(|| FieldSetError::NotAnObject(key.clone()))?;
            if inner.is_empty() || inner.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let child = FieldSet::from_fields_v1(node)?;
            if !child.is_empty() {
                set.children.insert(pe, child);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    #[test]
    fn fields_v1_round_trips_with_dots_keys_and_values() {
        let doc = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}},
        });
        let set = FieldSet::from_fields_v1(&doc).unwrap();
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.has(&[f("metadata")]));
        let item = PathElement::Key(vec![("name".into(), "\"app\"".into())]);
        assert!(set.has(&[f("spec"), f("containers"), item.clone()]));
        assert_eq!(set.to_fields_v1(), doc);
        assert_eq!(
            path_text(&[f("spec"), f("containers"), item, f("image")]),
            ".spec.containers[name=\"app\"].image"
        );
        assert_eq!(
            path_text(&[
                f("metadata"),
                f("finalizers"),
                PathElement::Value("\"a\"".into())
            ]),
            ".metadata.finalizers[=\"a\"]"
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("spec"), f("a")]);
        a.insert(&[f("spec"), f("b")]);
        let mut b = FieldSet::new();
        b.insert(&[f("spec"), f("b")]);
        b.insert(&[f("data")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("spec"), f("b")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("spec"), f("a")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn bad_documents_are_errors() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:notjson": {}})).is_err());
    }
}
