//! Structural OpenAPI v3 schemas of capstan's own kinds (Cluster API, kubeadm, Metal3, IPAM, Cilium
//! BGP and the KVM provider), generated from capstan-model's types in every served version.
//!
//! What a schema says follows the Rust type it comes from: every sub-schema is inlined (CRD schemas
//! cannot hold references), doc comments become descriptions (what `kubectl explain` prints), an
//! `Option` is `nullable`, integers carry the formats Kubernetes writes (`int32`, `int64`), and a
//! `serde_json::Value` (content the model keeps without reading it) is
//! `x-kubernetes-preserve-unknown-fields`.
//!
//! Two strictness levels, because the model names every field of capstan's own kinds but only the
//! fields capstan acts on of the kinds it shares with upstream providers:
//! - [`Strictness::Own`] (the KVM kinds): the model's schema is the whole contract.
//! - [`Strictness::Upstream`] (everything else): the model's schema is completed with the upstream
//!   CRD's (`kinds/upstream.json`: the providers' published `openAPIV3Schema` of each kind
//!   version, reduced to its structure and validations, CEL rules included, without
//!   descriptions). Every field upstream has is added where the model does not name it, a
//!   `serde_json::Value` field takes upstream's shape, and upstream's required fields, enums,
//!   bounds, patterns, formats, defaults, CEL rules (`x-kubernetes-validations`), list and map
//!   types and nullability apply, in `status` as in `spec` (status fields the model names for the
//!   other API version are kept, see `Part`). The model's types and descriptions win where both
//!   say something (a test fails when they disagree), so `kubectl explain` prints the model's
//!   documentation.
//!
//! Either way objects are closed below the root except where upstream (or, for the KVM kinds, the
//! model) keeps unknown fields, so an unknown field is pruned, or refused with
//! `fieldValidation=Strict` naming its path, as kube-apiserver does.
//!
//! Model fields carry two capstan-specific keywords that become standard ones here:
//! `x-capstan-required` (a field that must be given even though the Rust type defaults it) and
//! `x-capstan-default` (a default written into stored objects; schemars' own defaults, derived from
//! `Default` implementations, are dropped because they only describe what the reader assumes).

use crate::Schema;
use capstan_model::resource::Resource;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// How closed a kind's objects are (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// capstan's own kinds: the model's schema alone.
    Own,
    /// Kinds shared with upstream providers: the model's schema completed with upstream's.
    Upstream,
}

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const REQUIRED_MARK: &str = "x-capstan-required";
const DEFAULT_MARK: &str = "x-capstan-default";

/// The structural schema the model alone gives the typed object `T` (before any completion with an
/// upstream schema).
pub fn generate<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$defs");
    }
    structural(&mut schema);
    schema
}

/// Rewrites one schemars node (and everything under it) into a structural schema node.
fn structural(node: &mut Value) {
    if let Value::Bool(_) = node {
        // `serde_json::Value`: any value at all.
        *node = json!({PRESERVE: true});
        return;
    }
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    for key in ["title", "$schema", "examples", "default", "$defs"] {
        obj.remove(key);
    }
    if let Some(default) = obj.remove(DEFAULT_MARK) {
        obj.insert("default".into(), default);
    }
    fold_null(obj);
    if let Some(value) = obj.remove("const") {
        obj.insert("enum".into(), json!([value]));
    }
    if let Some(Value::String(format)) = obj.get("format") {
        let kubernetes = match format.as_str() {
            "int8" | "int16" | "uint8" | "uint16" => Some("int32"),
            "uint32" | "uint64" | "uint" | "int" | "uint128" | "int128" => Some("int64"),
            _ => None,
        };
        if let Some(kubernetes) = kubernetes {
            obj.insert("format".into(), json!(kubernetes));
        }
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => {
            obj.remove("additionalProperties");
        }
        Some(Value::Bool(true)) => {
            // A flattened catch-all map: the type keeps fields it does not name.
            obj.remove("additionalProperties");
            obj.insert(PRESERVE.into(), json!(true));
        }
        _ => {}
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for value in props.values_mut() {
            structural(value);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(value) = obj.get_mut(key)
            && (value.is_object() || value.is_boolean())
        {
            structural(value);
        }
    }
    collect_required(obj);
    if obj.contains_key("properties") && !obj.contains_key("type") {
        obj.insert("type".into(), json!("object"));
    }
    if !obj.contains_key("type")
        && !obj.contains_key("x-kubernetes-int-or-string")
        && !obj.contains_key(PRESERVE)
    {
        // No single type: the model reads it in more than one shape (or not at all).
        obj.insert(PRESERVE.into(), json!(true));
    }
}

/// Turns schemars' ways of admitting `null` (a `"null"` type, an `anyOf` branch) into `nullable`,
/// and a remaining union of several shapes into a node without a type.
fn fold_null(obj: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = obj.get("type").cloned() {
        let mut non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if non_null.len() < types.len() {
            obj.insert("nullable".into(), json!(true));
        }
        if non_null.len() == 1 {
            obj.insert("type".into(), non_null.remove(0));
        } else {
            obj.remove("type");
        }
    }
    for junctor in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = obj.remove(junctor) else {
            continue;
        };
        let before = branches.len();
        let mut branches: Vec<Value> = branches
            .into_iter()
            .filter(|b| *b != json!({"type": "null"}))
            .collect();
        if branches.len() < before {
            obj.insert("nullable".into(), json!(true));
        }
        if branches.len() == 1 {
            if let Value::Object(only) = branches.remove(0) {
                for (key, value) in only {
                    // The field's own description (the doc comment where it is used) wins over
                    // the type's.
                    obj.entry(key).or_insert(value);
                }
                fold_null(obj);
            }
        } else if let Some(values) = enum_values(&branches) {
            obj.insert("type".into(), json!("string"));
            obj.insert("enum".into(), Value::Array(values));
        } else {
            // Several shapes (an untagged enum): kept as given, the description says which.
            obj.remove("type");
            obj.insert(PRESERVE.into(), json!(true));
        }
    }
}

/// The values of a union of string constants (a Rust enum of unit variants), if it is one.
fn enum_values(branches: &[Value]) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    for branch in branches {
        if let Some(value) = branch.get("const").filter(|v| v.is_string()) {
            values.push(value.clone());
        } else if let Some(Value::Array(more)) = branch.get("enum")
            && more.iter().all(Value::is_string)
        {
            values.extend(more.iter().cloned());
        } else {
            return None;
        }
    }
    Some(values)
}

/// Moves the `x-capstan-required` marks of an object's properties into its `required` list.
fn collect_required(obj: &mut Map<String, Value>) {
    let Some(Value::Object(props)) = obj.get_mut("properties") else {
        return;
    };
    let mut marked = Vec::new();
    for (name, prop) in props.iter_mut() {
        if let Some(p) = prop.as_object_mut()
            && p.remove(REQUIRED_MARK).is_some()
        {
            p.remove("nullable");
            marked.push(json!(name));
        }
    }
    if marked.is_empty() {
        return;
    }
    let required = obj.entry("required").or_insert_with(|| json!([]));
    if let Value::Array(list) = required {
        for name in marked {
            if !list.contains(&name) {
                list.push(name);
            }
        }
    }
}

type Key = (&'static str, &'static str, &'static str);

/// Upstream's schemas of the kinds capstan shares with upstream providers, by
/// `group/kind/version` (see the module documentation).
const UPSTREAM_SCHEMAS: &str = include_str!("kinds/upstream.json");

/// The upstream schemas, parsed once (empty if the embedded file were not JSON, which the tests
/// rule out).
pub fn upstream_schemas() -> &'static Map<String, Value> {
    static PARSED: OnceLock<Map<String, Value>> = OnceLock::new();
    PARSED.get_or_init(|| serde_json::from_str(UPSTREAM_SCHEMAS).unwrap_or_default())
}

/// One upstream schema, read from the embedded file without keeping the others (the registry of
/// kinds reads each once at start; holding them all would cost megabytes for the life of the
/// process).
fn upstream_schema(key: &str) -> Option<Value> {
    let mut reader = serde_json::Deserializer::from_str(UPSTREAM_SCHEMAS);
    serde::de::DeserializeSeed::deserialize(FindEntry(key), &mut reader)
        .ok()
        .flatten()
}

/// Reads the value of one key of a JSON object, skipping the others.
struct FindEntry<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for FindEntry<'_> {
    type Value = Option<Value>;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FindEntry<'_> {
    type Value = Option<Value>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("an object of schemas")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// One typed kind version: its key, how it is served and the model's schema of it.
struct TypedKind {
    key: Key,
    strictness: Strictness,
    model: fn() -> Value,
}

fn typed<T: JsonSchema + Resource>(strictness: Strictness) -> TypedKind {
    TypedKind {
        key: (T::GROUP, T::KIND, T::VERSION),
        strictness,
        model: generate::<T>,
    }
}

impl TypedKind {
    /// The schema capstan serves: the model's, completed with upstream's for shared kinds.
    fn served(&self) -> Value {
        let mut schema = (self.model)();
        if self.strictness == Strictness::Upstream {
            let (group, kind, version) = self.key;
            match upstream_schema(&format!("{group}/{kind}/{version}")) {
                Some(theirs) => complete_root(&mut schema, &theirs),
                None => keep_unknown_below_root(&mut schema),
            }
        }
        schema
    }
}

/// Keywords in which upstream's schema is the contract: where upstream gives one it applies, where
/// it gives none the model's is dropped.
const UPSTREAM_KEYWORDS: &[&str] = &[
    "format",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "pattern",
    "default",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-validations",
];

/// Which part of an object a node is in: what users write, or what controllers report.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// `spec` (and anything else but `status`): upstream's contract whole. A field the model
    /// names that upstream's version does not have (the other served version's field, which
    /// reaches this version only through conversion) is dropped, so it is pruned or refused as
    /// upstream does.
    Spec,
    /// `status`, written by capstan's controllers: upstream's contract whole as well (fields,
    /// types, required fields, bounds, lengths, patterns, enums, formats, defaults, nullability),
    /// except that status fields the model names for the other API version are kept: conversion
    /// carries them between versions (a `v1beta1` object's `status.v1beta2` conditions, for one),
    /// and pruning them would lose what a reader of the other version sees.
    Status,
}

/// Completes a kind's schema with upstream's, below the root (`metadata` stays the model's
/// ObjectMeta).
fn complete_root(ours: &mut Value, theirs: &Value) {
    let (Some(Value::Object(our_props)), Some(Value::Object(their_props))) =
        (ours.get_mut("properties"), theirs.get("properties"))
    else {
        return;
    };
    for (name, their_prop) in their_props {
        if name == "metadata" {
            continue;
        }
        let part = if name == "status" {
            Part::Status
        } else {
            Part::Spec
        };
        match our_props.get_mut(name) {
            Some(our_prop) => complete(our_prop, their_prop, part),
            None => {
                our_props.insert(name.clone(), their_prop.clone());
            }
        }
    }
    union_required(ours, theirs);
}

/// Completes one node of the model's schema with the matching node of upstream's.
fn complete(ours: &mut Value, theirs: &Value, part: Part) {
    let (Some(our), Some(their)) = (ours.as_object_mut(), theirs.as_object()) else {
        return;
    };
    let typed = our.contains_key("type") || our.contains_key("x-kubernetes-int-or-string");
    if !typed {
        // Content the model keeps without reading it (a `serde_json::Value`, an untagged enum):
        // upstream's shape, with the model's description.
        for key in ["type", "x-kubernetes-int-or-string"] {
            if let Some(value) = their.get(key) {
                our.insert(key.into(), value.clone());
            }
        }
    }
    for key in [PRESERVE, "nullable"] {
        match their.get(key) {
            Some(value) => our.insert(key.into(), value.clone()),
            None => our.remove(key),
        };
    }
    for key in UPSTREAM_KEYWORDS {
        match their.get(*key) {
            Some(value) => our.insert((*key).into(), value.clone()),
            None => our.remove(*key),
        };
    }
    if let Some(Value::Object(their_props)) = their.get("properties") {
        // A map in the model, a struct of known keys upstream: upstream's keys.
        our.remove("additionalProperties");
        let our_props = our
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(our_props) = our_props {
            if part == Part::Spec {
                our_props.retain(|name, _| their_props.contains_key(name));
            }
            for (name, their_prop) in their_props {
                match our_props.get_mut(name) {
                    Some(our_prop) => complete(our_prop, their_prop, part),
                    None => {
                        our_props.insert(name.clone(), their_prop.clone());
                    }
                }
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        let has_properties = our.contains_key("properties");
        match (our.get_mut(key), their.get(key)) {
            (Some(a), Some(b)) if a.is_object() && b.is_object() => complete(a, b, part),
            (None, Some(b)) if !(key == "additionalProperties" && has_properties) => {
                our.insert(key.into(), b.clone());
            }
            _ => {}
        }
    }
    union_required(ours, theirs);
}

/// Upstream's required fields of an object, in upstream's order (the order kube-apiserver reports
/// missing ones in), then any the model requires besides.
fn union_required(ours: &mut Value, theirs: &Value) {
    let Some(Value::Array(their_required)) = theirs.get("required") else {
        return;
    };
    let Some(our) = ours.as_object_mut() else {
        return;
    };
    let mut required = their_required.clone();
    if let Some(Value::Array(model)) = our.get("required") {
        for name in model {
            if !required.contains(name) {
                required.push(name.clone());
            }
        }
    }
    our.insert("required".into(), Value::Array(required));
}

/// Without an upstream schema to complete it with, a shared kind keeps below its root every field
/// the model does not name, so nothing is pruned that the model cannot check.
fn keep_unknown_below_root(schema: &mut Value) {
    fn open(node: &mut Value) {
        let Some(obj) = node.as_object_mut() else {
            return;
        };
        if obj.get("type") == Some(&json!("object")) && !obj.contains_key("additionalProperties") {
            obj.insert(PRESERVE.into(), json!(true));
        }
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            props.values_mut().for_each(open);
        }
        if let Some(items) = obj.get_mut("items") {
            open(items);
        }
    }
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if name != "metadata" {
                open(prop);
            }
        }
    }
}

/// Every kind version the model types.
fn typed_kinds() -> Vec<TypedKind> {
    use Strictness::{Own, Upstream};
    use capstan_model::{capi, capm3, cilium, ipam, kubeadm, kvm, metal3};
    let mut kinds = Vec::new();
    macro_rules! kinds {
        ($strictness:expr; $($ty:ty),* $(,)?) => {
            $(kinds.push(typed::<$ty>($strictness));)*
        };
    }
    kinds!(Upstream;
        capi::v1beta1::Cluster, capi::v1beta1::Machine, capi::v1beta1::MachineSet,
        capi::v1beta1::MachineDeployment, capi::v1beta1::MachineHealthCheck,
        capi::v1beta1::ClusterResourceSet, capi::v1beta1::ClusterResourceSetBinding,
        capi::v1beta2::Cluster, capi::v1beta2::Machine, capi::v1beta2::MachineSet,
        capi::v1beta2::MachineDeployment, capi::v1beta2::MachineHealthCheck,
        capi::v1beta2::ClusterResourceSet, capi::v1beta2::ClusterResourceSetBinding,
        kubeadm::v1beta1::KubeadmConfig, kubeadm::v1beta1::KubeadmConfigTemplate,
        kubeadm::v1beta1::KubeadmControlPlane,
        kubeadm::v1beta2::KubeadmConfig, kubeadm::v1beta2::KubeadmConfigTemplate,
        kubeadm::v1beta2::KubeadmControlPlane,
        capm3::v1beta1::Metal3Cluster, capm3::v1beta1::Metal3Machine,
        capm3::v1beta1::Metal3MachineTemplate, capm3::v1beta1::Metal3DataTemplate,
        capm3::v1beta1::Metal3DataClaim, capm3::v1beta1::Metal3Data,
        capm3::v1beta2::Metal3Cluster, capm3::v1beta2::Metal3Machine,
        capm3::v1beta2::Metal3MachineTemplate, capm3::v1beta2::Metal3DataTemplate,
        capm3::v1beta2::Metal3DataClaim, capm3::v1beta2::Metal3Data,
        metal3::BareMetalHost, metal3::HardwareData,
        ipam::IPPool, ipam::IPClaim, ipam::IPAddress,
        cilium::CiliumBGPClusterConfig, cilium::CiliumBGPPeerConfig,
        cilium::CiliumBGPAdvertisement,
    );
    kinds!(Own;
        kvm::v1alpha4::KVMCluster, kvm::v1alpha4::KVMMachine, kvm::v1alpha4::KVMMachineTemplate,
        kvm::v1beta2::KVMCluster, kvm::v1beta2::KVMMachine, kvm::v1beta2::KVMMachineTemplate,
    );
    kinds
}

/// Every typed kind's served schema by (group, kind, version), generated once.
fn all() -> &'static BTreeMap<Key, Value> {
    static SCHEMAS: OnceLock<BTreeMap<Key, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| typed_kinds().iter().map(|k| (k.key, k.served())).collect())
}

/// The generated schema of one of capstan's kinds in `version`, generated on each call and not
/// kept (the registry of kinds holds each served schema once, in its definition), or `None` for
/// kinds the model does not type.
pub fn served_schema(group: &str, kind: &str, version: &str) -> Option<Value> {
    typed_kinds()
        .iter()
        .find(|k| k.key == (group, kind, version))
        .map(TypedKind::served)
}

/// The generated schema of one of capstan's kinds in `version`, or `None` for kinds the model does
/// not type. Every schema is generated on the first call and kept for the life of the process:
/// for tests and tools; the API server uses [`served_schema`].
pub fn schema(group: &str, kind: &str, version: &str) -> Option<&'static Value> {
    all()
        .iter()
        .find(|((g, k, v), _)| *g == group && *k == kind && *v == version)
        .map(|(_, schema)| schema)
}

/// The schema of one of capstan's kinds in `version`, compiled for validation on first use and
/// kept for the life of the process (for `capstan lint`, which checks many objects of a few
/// kinds), or `None` for kinds the model does not type. The same schema [`served_schema`] gives
/// the API server, so lint refuses what `capstan serve` refuses.
pub fn compiled(group: &str, kind: &str, version: &str) -> Option<&'static Schema> {
    static COMPILED: OnceLock<Vec<(Key, OnceLock<Option<Schema>>)>> = OnceLock::new();
    let table = COMPILED.get_or_init(|| {
        typed_kinds()
            .iter()
            .map(|k| (k.key, OnceLock::new()))
            .collect()
    });
    let (key, cell) = table
        .iter()
        .find(|((g, k, v), _)| *g == group && *k == kind && *v == version)?;
    cell.get_or_init(|| {
        let typed = typed_kinds().into_iter().find(|k| k.key == *key)?;
        // Every generated schema compiles (the tests hold each to it).
        Schema::from_value(&typed.served()).ok()
    })
    .as_ref()
}

#[cfg(test)]
mod tests;
