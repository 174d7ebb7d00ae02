//! Loaded objects: a JSON value, where it came from, and the line of each of its fields.

use std::fmt;

use capstan_model::path::FieldPath;
use serde_json::Value;

use crate::error::ManifestError;
use crate::parse::Positions;

/// Where an object was read from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Display name of the source: the path as given, or `<stdin>`.
    pub file: String,
    /// 0-based index of the YAML document within the file, empty documents included. Items of
    /// one `List` document share the document's index.
    pub document: usize,
    /// 1-based line where the object starts.
    pub line: u32,
}

impl Origin {
    /// An origin at `line` of the first document of `file`.
    pub fn new(file: impl Into<String>, line: u32) -> Self {
        Self {
            file: file.into(),
            document: 0,
            line,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One object of a manifest, with the line of each of its fields.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedObject {
    /// The object as JSON; mapping order is the order in the file.
    pub value: Value,
    /// Where the object starts.
    pub origin: Origin,
    positions: Positions,
}

impl LoadedObject {
    /// An object without field positions (every field reports the origin's line), for objects that
    /// were generated rather than read.
    pub fn new(value: Value, origin: Origin) -> Self {
        Self {
            value,
            origin,
            positions: Positions::new(),
        }
    }

    pub(crate) fn with_positions(value: Value, origin: Origin, positions: Positions) -> Self {
        Self {
            value,
            origin,
            positions,
        }
    }

    /// The line of a field's key (or, for a sequence item, of the item). A path that was not in the
    /// file (a missing field, say) reports its nearest ancestor that was, and finally the line
    /// where the object starts.
    pub fn line_of(&self, path: &FieldPath) -> u32 {
        let mut current = Some(path.clone());
        while let Some(p) = current {
            if let Some(&line) = self.positions.get(&p) {
                return line;
            }
            current = p.parent();
        }
        self.origin.line
    }

    /// The line of a field's key (or sequence item) when the file has that very field; unlike
    /// [`line_of`](Self::line_of), no ancestor stands in for it.
    pub fn exact_line(&self, path: &FieldPath) -> Option<u32> {
        self.positions.get(path).copied()
    }

    /// `file:line` of a field, as diagnostics print it.
    pub fn location(&self, path: &FieldPath) -> String {
        format!("{}:{}", self.origin.file, self.line_of(path))
    }

    /// The object's identity, from `apiVersion`, `kind` and `metadata`.
    ///
    /// # Errors
    /// [`ManifestError::MissingTypeField`] without a string `apiVersion`/`kind`,
    /// [`ManifestError::MissingIdentity`] without a non-empty `metadata.name` or with a namespace
    /// that is not a string.
    pub fn id(&self) -> Result<ObjectId, ManifestError> {
        let type_field = |field: &'static str| match self.value.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(ManifestError::MissingTypeField {
                file: self.origin.file.clone(),
                line: self.line_of(&FieldPath::root().key(field)),
                field,
            }),
        };
        let api_version = type_field("apiVersion")?;
        let kind = type_field("kind")?;
        let metadata = self.value.get("metadata");
        let missing = |field: &'static str| ManifestError::MissingIdentity {
            location: self.location(&FieldPath::parse(field)),
            kind: kind.clone(),
            field,
        };
        let name = match metadata.and_then(|m| m.get("name")) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(missing("metadata.name")),
        };
        let namespace = match metadata.and_then(|m| m.get("namespace")) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(missing("metadata.namespace")),
        };
        Ok(ObjectId {
            api_version,
            kind,
            namespace,
            name,
        })
    }
}

/// The identity of an object as written: `apiVersion`, `kind`, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    /// `group/version`, or just `version` for the core group.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `metadata.namespace`; `None` when absent or empty (callers decide on a default).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectId {
    /// The API group (`cluster.x-k8s.io`); empty for the core group (`apiVersion: v1`).
    pub fn group(&self) -> &str {
        split_api_version(&self.api_version).0
    }

    /// The API version (`v1beta1`).
    pub fn version(&self) -> &str {
        split_api_version(&self.api_version).1
    }

    /// The version-independent identity, with the namespace as written.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.group().to_owned(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The version-independent identity, with an absent namespace read as `namespace`.
    pub fn key_with_default_namespace(&self, namespace: &str) -> ObjectKey {
        let mut key = self.key();
        if key.namespace.is_none() {
            key.namespace = Some(namespace.to_owned());
        }
        key
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Splits `group/version` into its parts; a bare `version` has the empty (core) group.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// What makes two objects the same object: group, kind, namespace and name. The version is not
/// part of it, as one object can be written in several versions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The API group; empty for the core group.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The namespace, if any.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.group.is_empty() {
            write!(f, "{}.{} ", self.kind, self.group)?;
        } else {
            write!(f, "{} ", self.kind)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> LoadedObject {
        let mut positions = Positions::new();
        positions.insert(FieldPath::parse("spec"), 5);
        positions.insert(FieldPath::parse("spec.replicas"), 6);
        LoadedObject::with_positions(
            value,
            Origin {
                file: "m.yaml".into(),
                document: 0,
                line: 3,
            },
            positions,
        )
    }

    #[test]
    fn line_of_falls_back_to_ancestors_then_origin() {
        let o = object(json!({}));
        assert_eq!(o.line_of(&FieldPath::parse("spec.replicas")), 6);
        assert_eq!(o.line_of(&FieldPath::parse("spec.version")), 5);
        assert_eq!(o.line_of(&FieldPath::parse("status.x")), 3);
        assert_eq!(o.location(&FieldPath::parse("spec.replicas")), "m.yaml:6");
        assert_eq!(o.origin.to_string(), "m.yaml:3");
    }

    #[test]
    fn id_reads_group_version_namespace_and_name() {
        let o = object(
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmControlPlane", "metadata": {"name": "capi-1", "namespace": "default"}}),
        );
        let id = o.id().expect("id");
        assert_eq!(id.group(), "controlplane.cluster.x-k8s.io");
        assert_eq!(id.version(), "v1beta1");
        assert_eq!(id.to_string(), "KubeadmControlPlane default/capi-1");

        let core = object(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}));
        let id = core.id().expect("id");
        assert_eq!((id.group(), id.version()), ("", "v1"));
        assert_eq!(id.namespace, None);
        assert_eq!(id.to_string(), "Secret s");
        assert_eq!(
            id.key_with_default_namespace("default")
                .namespace
                .as_deref(),
            Some("default")
        );
    }

    #[test]
    fn id_requires_a_name() {
        let o = object(json!({"apiVersion": "v1", "kind": "Secret", "spec": {}}));
        assert_eq!(
            o.id().expect_err("no name").to_string(),
            "m.yaml:3: Secret has no usable `metadata.name`; set it to a non-empty string"
        );
        let o = object(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "namespace": 3}}),
        );
        assert!(matches!(
            o.id(),
            Err(ManifestError::MissingIdentity {
                field: "metadata.namespace",
                ..
            })
        ));
    }

    #[test]
    fn keys_ignore_the_version() {
        let a = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "c"}}),
        );
        let b = object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c"}}),
        );
        assert_eq!(a.id().expect("a").key(), b.id().expect("b").key());
        assert_eq!(
            a.id().expect("a").key().to_string(),
            "Cluster.cluster.x-k8s.io c"
        );
    }
}
