//! CustomResourceDefinitions as plain typed data, and a set of them to look schemas up in.
//!
//! Only `apiextensions.k8s.io/v1` CRDs are read. Loading a directory takes every CRD in it and
//! ignores other objects, so a bundle that also holds Deployments or RBAC can be pointed at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use capstan_manifest::{LoadedObject, ManifestError, split_api_version};
use capstan_model::path::FieldPath;
use serde_json::Value;

use crate::schema::{Schema, SchemaError, SchemaInterner};

/// The `apiVersion` of the CRDs this module reads.
pub const CRD_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// Why CRDs could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrdError {
    /// The files could not be read or parsed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),

    /// A CRD lacks a field or has one of the wrong type.
    #[error("{location}: CustomResourceDefinition {name}: `{field}` {problem}; fix the definition")]
    Invalid {
        /// `file:line` of the field (or of the CRD).
        location: String,
        /// `metadata.name` of the CRD, if it has one.
        name: String,
        /// Path of the field within the CRD.
        field: String,
        /// What is wrong.
        problem: &'static str,
    },

    /// A version's `openAPIV3Schema` could not be parsed.
    #[error(
        "{location}: CustomResourceDefinition {name}, version {version}: invalid openAPIV3Schema"
    )]
    Schema {
        /// `file:line` of the schema.
        location: String,
        /// `metadata.name` of the CRD.
        name: String,
        /// The version.
        version: String,
        /// What the schema parser found.
        #[source]
        source: Box<SchemaError>,
    },

    /// Two CRDs define the same group and kind.
    #[error(
        "{second}: a CustomResourceDefinition for {kind}.{group} is defined twice (first at {first}); keep one"
    )]
    Duplicate {
        /// The group.
        group: String,
        /// The kind.
        kind: String,
        /// Where the first one came from.
        first: String,
        /// Where the second one came from.
        second: String,
    },
}

/// Whether objects of a CRD live in namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Objects live in a namespace.
    Namespaced,
    /// Objects are cluster-wide.
    Cluster,
}

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub column_type: String,
    /// Optional format of the column.
    pub format: Option<String>,
    /// Description of the column.
    pub description: Option<String>,
    /// 0 for the default view, higher for `-o wide`.
    pub priority: i32,
    /// JSONPath of the value, e.g. `.status.phase`.
    pub json_path: String,
}

/// The `scale` subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleSubresource {
    /// JSONPath of the desired replicas (`.spec.replicas`).
    pub spec_replicas_path: String,
    /// JSONPath of the observed replicas (`.status.replicas`).
    pub status_replicas_path: String,
    /// JSONPath of the label selector, if any.
    pub label_selector_path: Option<String>,
}

/// The subresources of a version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subresources {
    /// Whether `/status` is a subresource.
    pub status: bool,
    /// The `/scale` subresource, if any.
    pub scale: Option<ScaleSubresource>,
}

/// One version of a CRD.
#[derive(Clone, Debug)]
pub struct CrdVersion {
    /// Version name (`v1beta1`).
    pub name: String,
    /// Whether the API serves it.
    pub served: bool,
    /// Whether objects are stored in it (exactly one version is).
    pub storage: bool,
    /// Whether it is deprecated.
    pub deprecated: bool,
    /// The warning returned to clients using it, if any.
    pub deprecation_warning: Option<String>,
    /// The parsed `schema.openAPIV3Schema`, if the version has one.
    pub schema: Option<Schema>,
    /// `additionalPrinterColumns`.
    pub additional_printer_columns: Vec<PrinterColumn>,
    /// `subresources`.
    pub subresources: Subresources,
}

/// A CustomResourceDefinition.
#[derive(Clone, Debug)]
pub struct CrdInfo {
    /// `metadata.name` (`clusters.cluster.x-k8s.io`).
    pub name: String,
    /// API group.
    pub group: String,
    /// Kind (`Cluster`).
    pub kind: String,
    /// List kind (`ClusterList`).
    pub list_kind: String,
    /// Plural resource name (`clusters`).
    pub plural: String,
    /// Singular resource name (`cluster`); the lower-cased kind when not given.
    pub singular: String,
    /// Short names (`cl`).
    pub short_names: Vec<String>,
    /// Categories (`cluster-api`).
    pub categories: Vec<String>,
    /// Scope.
    pub scope: Scope,
    /// Versions in the order of the definition.
    pub versions: Vec<CrdVersion>,
    /// The definition as loaded, for serving it back.
    pub definition: Value,
}

impl CrdInfo {
    /// Reads a CRD from its JSON value.
    ///
    /// # Errors
    /// [`CrdError::Invalid`] for missing or mistyped fields, [`CrdError::Schema`] for a schema
    /// that does not parse.
    pub fn from_value(value: &Value) -> Result<Self, CrdError> {
        Self::from_value_shared(value, &mut SchemaInterner::new())
    }

    /// Reads a CRD from its JSON value, sharing sub-schemas and compiled patterns with every
    /// other schema parsed with `interner` (see [`Schema::from_value_shared`]).
    ///
    /// # Errors
    /// As [`CrdInfo::from_value`].
    pub fn from_value_shared(
        value: &Value,
        interner: &mut SchemaInterner,
    ) -> Result<Self, CrdError> {
        Self::read(value, &|_| "<value>".to_owned(), interner)
    }

    /// Reads a CRD from a loaded object; errors name the file and line.
    ///
    /// # Errors
    /// As [`CrdInfo::from_value`].
    pub fn from_object(object: &LoadedObject) -> Result<Self, CrdError> {
        Self::read(
            &object.value,
            &|path| object.location(path),
            &mut SchemaInterner::new(),
        )
    }

    fn read(
        value: &Value,
        locate: &dyn Fn(&FieldPath) -> String,
        interner: &mut SchemaInterner,
    ) -> Result<Self, CrdError> {
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_owned();
        let fields = Fields {
            value,
            name: &name,
            locate,
        };
        if fields.string(&FieldPath::parse("apiVersion"))? != CRD_API_VERSION
            || fields.string(&FieldPath::parse("kind"))? != "CustomResourceDefinition"
        {
            return Err(fields.invalid(
                &FieldPath::parse("apiVersion"),
                "must be apiextensions.k8s.io/v1 with kind CustomResourceDefinition",
            ));
        }
        let kind = fields.string(&FieldPath::parse("spec.names.kind"))?;
        let scope = match fields.string(&FieldPath::parse("spec.scope"))?.as_str() {
            "Namespaced" => Scope::Namespaced,
            "Cluster" => Scope::Cluster,
            _ => {
                return Err(fields.invalid(
                    &FieldPath::parse("spec.scope"),
                    "must be Namespaced or Cluster",
                ));
            }
        };
        let versions_path = FieldPath::parse("spec.versions");
        let Some(Value::Array(version_values)) = versions_path.lookup(value) else {
            return Err(fields.invalid(&versions_path, "must be a list of versions"));
        };
        let versions = (0..version_values.len())
            .map(|i| fields.version(&versions_path.index(i), interner))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            group: fields.string(&FieldPath::parse("spec.group"))?,
            list_kind: fields
                .optional_string(&FieldPath::parse("spec.names.listKind"))?
                .unwrap_or_else(|| format!("{kind}List")),
            plural: fields.string(&FieldPath::parse("spec.names.plural"))?,
            singular: fields
                .optional_string(&FieldPath::parse("spec.names.singular"))?
                .unwrap_or_else(|| kind.to_lowercase()),
            short_names: fields.strings(&FieldPath::parse("spec.names.shortNames"))?,
            categories: fields.strings(&FieldPath::parse("spec.names.categories"))?,
            kind,
            scope,
            versions,
            definition: value.clone(),
            name,
        })
    }

    /// A version by name.
    pub fn version(&self, name: &str) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// The storage version.
    pub fn storage_version(&self) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.storage)
    }

    /// The served versions, in the order of the definition.
    pub fn served_versions(&self) -> impl Iterator<Item = &CrdVersion> {
        self.versions.iter().filter(|v| v.served)
    }
}

/// Typed reads of a CRD's fields, with errors naming their location.
struct Fields<'a> {
    value: &'a Value,
    name: &'a str,
    locate: &'a dyn Fn(&FieldPath) -> String,
}

impl Fields<'_> {
    fn invalid(&self, path: &FieldPath, problem: &'static str) -> CrdError {
        CrdError::Invalid {
            location: (self.locate)(path),
            name: self.name.to_owned(),
            field: path.to_string(),
            problem,
        }
    }

    fn optional_string(&self, path: &FieldPath) -> Result<Option<String>, CrdError> {
        match path.lookup(self.value) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.invalid(path, "must be a string")),
        }
    }

    fn string(&self, path: &FieldPath) -> Result<String, CrdError> {
        match self.optional_string(path)? {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.invalid(path, "is required")),
        }
    }

    fn flag(&self, path: &FieldPath) -> Result<bool, CrdError> {
        match path.lookup(self.value) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.invalid(path, "must be a boolean")),
        }
    }

    fn strings(&self, path: &FieldPath) -> Result<Vec<String>, CrdError> {
        match path.lookup(self.value) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.invalid(path, "must be a list of strings"))
                })
                .collect(),
            Some(_) => Err(self.invalid(path, "must be a list of strings")),
        }
    }

    fn version(
        &self,
        path: &FieldPath,
        interner: &mut SchemaInterner,
    ) -> Result<CrdVersion, CrdError> {
        let name = self.string(&path.key("name"))?;
        let schema_path = path.key("schema").key("openAPIV3Schema");
        let schema = match schema_path.lookup(self.value) {
            None | Some(Value::Null) => None,
            Some(schema) => Some(Schema::from_value_shared(schema, interner).map_err(
                |source| CrdError::Schema {
                    location: (self.locate)(&schema_path),
                    name: self.name.to_owned(),
                    version: name.clone(),
                    source: Box::new(source),
                },
            )?),
        };
        let columns_path = path.key("additionalPrinterColumns");
        let columns = match columns_path.lookup(self.value) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(columns)) => (0..columns.len())
                .map(|i| self.column(&columns_path.index(i)))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(self.invalid(&columns_path, "must be a list")),
        };
        let subresources = path.key("subresources");
        let scale = subresources.key("scale");
        Ok(CrdVersion {
            served: self.flag(&path.key("served"))?,
            storage: self.flag(&path.key("storage"))?,
            deprecated: self.flag(&path.key("deprecated"))?,
            deprecation_warning: self.optional_string(&path.key("deprecationWarning"))?,
            schema,
            additional_printer_columns: columns,
            subresources: Subresources {
                status: subresources.key("status").lookup(self.value).is_some(),
                scale: match scale.lookup(self.value) {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(ScaleSubresource {
                        spec_replicas_path: self.string(&scale.key("specReplicasPath"))?,
                        status_replicas_path: self.string(&scale.key("statusReplicasPath"))?,
                        label_selector_path: self
                            .optional_string(&scale.key("labelSelectorPath"))?,
                    }),
                },
            },
            name,
        })
    }

    fn column(&self, path: &FieldPath) -> Result<PrinterColumn, CrdError> {
        let priority_path = path.key("priority");
        let priority = match priority_path.lookup(self.value) {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) => n
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| self.invalid(&priority_path, "must be a 32-bit integer"))?,
            Some(_) => return Err(self.invalid(&priority_path, "must be an integer")),
        };
        Ok(PrinterColumn {
            name: self.string(&path.key("name"))?,
            column_type: self.string(&path.key("type"))?,
            format: self.optional_string(&path.key("format"))?,
            description: self.optional_string(&path.key("description"))?,
            priority,
            json_path: self.string(&path.key("jsonPath"))?,
        })
    }
}

/// CRDs indexed by group and kind.
#[derive(Clone, Debug, Default)]
pub struct CrdSet {
    crds: Vec<CrdInfo>,
    sources: Vec<String>,
    by_group_kind: BTreeMap<(String, String), usize>,
}

impl CrdSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding one CRD given as a JSON value.
    ///
    /// # Errors
    /// As [`CrdInfo::from_value`].
    pub fn from_crd_value(value: &Value) -> Result<Self, CrdError> {
        let mut set = Self::new();
        set.insert(CrdInfo::from_value(value)?, "<value>")?;
        Ok(set)
    }

    /// The CRDs among loaded objects; other objects are ignored.
    ///
    /// # Errors
    /// Invalid CRDs, or two CRDs for the same group and kind.
    pub fn from_objects(objects: &[LoadedObject]) -> Result<Self, CrdError> {
        let mut set = Self::new();
        for object in objects {
            let is_crd = object.value.get("kind").and_then(Value::as_str)
                == Some("CustomResourceDefinition")
                && object
                    .value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| split_api_version(v).0 == "apiextensions.k8s.io");
            if is_crd {
                set.insert(CrdInfo::from_object(object)?, &object.origin.to_string())?;
            }
        }
        Ok(set)
    }

    /// The CRDs in a file or below a directory (see [`capstan_manifest::load_path`]).
    ///
    /// # Errors
    /// Unreadable files, invalid YAML, invalid or duplicate CRDs.
    pub fn load_dir(path: &Path) -> Result<Self, CrdError> {
        Self::from_objects(&capstan_manifest::load_path(path)?)
    }

    /// The CRDs in several files or directories.
    ///
    /// # Errors
    /// As [`CrdSet::load_dir`].
    pub fn load_paths(paths: &[PathBuf]) -> Result<Self, CrdError> {
        Self::from_objects(&capstan_manifest::load_paths(paths)?)
    }

    /// Adds a CRD; `source` names where it came from, for duplicate errors.
    ///
    /// # Errors
    /// [`CrdError::Duplicate`] when a CRD for the same group and kind is already present.
    pub fn insert(&mut self, crd: CrdInfo, source: &str) -> Result<(), CrdError> {
        let key = (crd.group.clone(), crd.kind.clone());
        if let Some(&first) = self.by_group_kind.get(&key) {
            return Err(CrdError::Duplicate {
                group: crd.group,
                kind: crd.kind,
                first: self.sources.get(first).cloned().unwrap_or_default(),
                second: source.to_owned(),
            });
        }
        self.by_group_kind.insert(key, self.crds.len());
        self.crds.push(crd);
        self.sources.push(source.to_owned());
        Ok(())
    }

    /// The CRD of a group and kind.
    pub fn crd(&self, group: &str, kind: &str) -> Option<&CrdInfo> {
        self.by_group_kind
            .get(&(group.to_owned(), kind.to_owned()))
            .and_then(|&i| self.crds.get(i))
    }

    /// The CRD of a group and plural resource name.
    pub fn crd_for_plural(&self, group: &str, plural: &str) -> Option<&CrdInfo> {
        self.crds
            .iter()
            .find(|crd| crd.group == group && crd.plural == plural)
    }

    /// The CRD version for an `apiVersion` (`group/version`) and kind.
    pub fn version_for(&self, api_version: &str, kind: &str) -> Option<&CrdVersion> {
        let (group, version) = split_api_version(api_version);
        self.crd(group, kind)?.version(version)
    }

    /// The schema for an `apiVersion` and kind, if that version exists and has one.
    pub fn schema_for(&self, api_version: &str, kind: &str) -> Option<&Schema> {
        self.version_for(api_version, kind)?.schema.as_ref()
    }

    /// The CRDs in insertion order.
    pub fn iter(&self) -> std::slice::Iter<'_, CrdInfo> {
        self.crds.iter()
    }

    /// How many CRDs the set holds.
    pub fn len(&self) -> usize {
        self.crds.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.crds.is_empty()
    }
}

impl<'a> IntoIterator for &'a CrdSet {
    type Item = &'a CrdInfo;
    type IntoIter = std::slice::Iter<'a, CrdInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"], "categories": ["all"]},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1alpha1", "served": false, "storage": false, "deprecated": true},
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}},
                     "additionalPrinterColumns": [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}}
                ]
            }
        })
    }

    #[test]
    fn definitions_are_read_into_typed_data() {
        let set = CrdSet::from_crd_value(&crd()).expect("loads");
        let widget = set.crd("example.com", "Widget").expect("widget");
        assert_eq!(widget.plural, "widgets");
        assert_eq!(widget.singular, "widget");
        assert_eq!(widget.list_kind, "WidgetList");
        assert_eq!(widget.short_names, ["wd"]);
        assert_eq!(widget.scope, Scope::Namespaced);
        assert_eq!(
            widget.storage_version().map(|v| v.name.as_str()),
            Some("v1")
        );
        assert_eq!(widget.served_versions().count(), 1);
        let v1 = widget.version("v1").expect("v1");
        assert!(v1.subresources.status);
        assert_eq!(
            v1.subresources
                .scale
                .as_ref()
                .map(|s| s.spec_replicas_path.as_str()),
            Some(".spec.replicas")
        );
        assert_eq!(v1.additional_printer_columns[0].column_type, "date");
        assert!(set.schema_for("example.com/v1", "Widget").is_some());
        assert!(set.schema_for("example.com/v1alpha1", "Widget").is_none());
        assert!(set.schema_for("example.com/v2", "Widget").is_none());
        assert!(set.crd_for_plural("example.com", "widgets").is_some());
    }

    #[test]
    fn invalid_definitions_say_which_field() {
        let mut broken = crd();
        broken["spec"]["scope"] = json!("Galaxy");
        let err = CrdInfo::from_value(&broken).expect_err("scope");
        assert_eq!(
            err.to_string(),
            "<value>: CustomResourceDefinition widgets.example.com: `spec.scope` must be Namespaced or Cluster; fix the definition"
        );
        let mut broken = crd();
        broken["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["type"] = json!(3);
        assert!(matches!(
            CrdInfo::from_value(&broken),
            Err(CrdError::Schema { .. })
        ));
        assert!(CrdInfo::from_value(&json!({"kind": "CustomResourceDefinition"})).is_err());
        assert!(CrdInfo::from_value(&json!([1])).is_err());
    }

    #[test]
    fn duplicates_and_foreign_objects() {
        let text = format!(
            "{}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n{}\n",
            crd(),
            crd()
        );
        let objects = capstan_manifest::load_str("crds.yaml", &text).expect("loads");
        let err = CrdSet::from_objects(&objects).expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "crds.yaml:8: a CustomResourceDefinition for Widget.example.com is defined twice (first at crds.yaml:1); keep one"
        );
        let set = CrdSet::from_objects(&objects[..2]).expect("loads");
        assert_eq!(set.len(), 1);
    }
}
