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
//! - [`Strictness::Own`] (the KVM kinds): objects are closed, so unknown fields are pruned (or
//!   refused with `fieldValidation=Strict`), and the validations written on the model's fields
//!   (required fields, enums, patterns, minimums, defaults) apply.
//! - [`Strictness::Upstream`] (everything else): below the root every object also keeps the fields
//!   the model does not name, so nothing a user (or an upstream controller) writes is ever pruned,
//!   while the named fields are type-checked.
//!
//! Model fields carry two capstan-specific keywords that become standard ones here:
//! `x-capstan-required` (a field that must be given even though the Rust type defaults it) and
//! `x-capstan-default` (a default written into stored objects; schemars' own defaults, derived from
//! `Default` implementations, are dropped because they only describe what the reader assumes).

use capstan_model::resource::Resource;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// How closed a kind's objects are (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// capstan's own kinds: closed objects, full validation.
    Own,
    /// Kinds shared with upstream providers: named fields typed, unknown fields kept.
    Upstream,
}

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const REQUIRED_MARK: &str = "x-capstan-required";
const DEFAULT_MARK: &str = "x-capstan-default";

/// The structural schema of the typed object `T`.
pub fn generate<T: JsonSchema>(strictness: Strictness) -> Value {
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
    structural(&mut schema, strictness, true);
    schema
}

/// Rewrites one schemars node (and everything under it) into a structural schema node.
fn structural(node: &mut Value, strictness: Strictness, root: bool) {
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
            structural(value, strictness, false);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(value) = obj.get_mut(key)
            && (value.is_object() || value.is_boolean())
        {
            structural(value, strictness, false);
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
    if strictness == Strictness::Upstream
        && !root
        && obj.get("type") == Some(&json!("object"))
        && !obj.contains_key("additionalProperties")
        && !is_object_meta(obj)
    {
        obj.insert(PRESERVE.into(), json!(true));
    }
}

/// Whether a node is Kubernetes' ObjectMeta (which has its own handling and is never pruned).
fn is_object_meta(obj: &Map<String, Value>) -> bool {
    obj.get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key("managedFields") && p.contains_key("ownerReferences"))
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

fn insert<T: JsonSchema + Resource>(map: &mut BTreeMap<Key, Value>, strictness: Strictness) {
    map.insert((T::GROUP, T::KIND, T::VERSION), generate::<T>(strictness));
}

/// Every typed kind's schema by (group, kind, version), generated once.
fn all() -> &'static BTreeMap<Key, Value> {
    static SCHEMAS: OnceLock<BTreeMap<Key, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        use Strictness::{Own, Upstream};
        use capstan_model::{capi, capm3, cilium, ipam, kubeadm, kvm, metal3};
        let mut m = BTreeMap::new();
        macro_rules! kinds {
            ($strictness:expr; $($ty:ty),* $(,)?) => {
                $(insert::<$ty>(&mut m, $strictness);)*
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
        m
    })
}

/// The generated schema of one of capstan's kinds in `version`, or `None` for kinds the model does
/// not type.
pub fn schema(group: &str, kind: &str, version: &str) -> Option<&'static Value> {
    all()
        .iter()
        .find(|((g, k, v), _)| *g == group && *k == kind && *v == version)
        .map(|(_, schema)| schema)
}

#[cfg(test)]
mod tests;
