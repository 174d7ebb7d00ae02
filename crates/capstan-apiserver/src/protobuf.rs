//! The Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`): the `k8s\0` magic,
//! then a `runtime.Unknown` envelope holding the type (`apiVersion`, `kind`) and the object's
//! protobuf bytes, transcoded to and from the JSON form the rest of the server works with.
//!
//! The messages known here are the ones clients send as protobuf in practice (kubectl ≥ 1.32's
//! `create namespace|secret|configmap|serviceaccount|token|role|rolebinding|clusterrole|…`,
//! `auth can-i|whoami`, evictions) and what comes back (those objects, their
//! lists, `Status`, `DeleteOptions`), described by their field numbers in Kubernetes' `generated.proto`
//! files; other kinds answer `415` to protobuf bodies and are served as JSON. Unknown fields in a
//! decoded message are skipped, as protobuf readers do.
//!
//! Why a small table-driven codec rather than generated types: `k8s-pb` has prost types but no
//! JSON mapping or descriptors to drive one, and `k8s-rs-pb` 0.5's reflection deadlocks while
//! initialising the `core/v1` descriptors (every file lists itself as its dependency).

use base64::Engine;
use serde_json::{Map, Value, json};

/// The protobuf media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What prefixes every protobuf-encoded Kubernetes object.
const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be transcoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf prefix")]
    Magic,
    #[error("the protobuf message is truncated or malformed")]
    Malformed,
    #[error("{api_version}, Kind={kind} has no protobuf form here")]
    UnknownType { api_version: String, kind: String },
    #[error("the object has no apiVersion or kind")]
    NoType,
}

/// How one field is encoded.
#[derive(Clone, Copy, Debug)]
enum Type {
    Str,
    Bytes,
    I64,
    I32,
    Bool,
    /// `meta/v1` Time: `{seconds, nanos}` on the wire, RFC 3339 in JSON.
    Time,
    /// `map<string,string>`.
    MapStr,
    /// `map<string,bytes>` (base64 in JSON).
    MapBytes,
    /// Bytes holding JSON (`FieldsV1.Raw`, `RawExtension.raw`).
    Json,
    Msg(&'static str),
}

/// One field: number, JSON name, type, repeated.
type Field = (u32, &'static str, Type, bool);

const fn f(number: u32, name: &'static str, t: Type) -> Field {
    (number, name, t, false)
}

const fn r(number: u32, name: &'static str, t: Type) -> Field {
    (number, name, t, true)
}

use Type::{Bool, Bytes, I32, I64, Json, MapBytes, MapStr, Msg, Str, Time};

/// The messages, by name (field numbers from Kubernetes' `generated.proto`).
const MESSAGES: &[(&str, &[Field])] = &[
    (
        "Unknown",
        &[
            f(1, "typeMeta", Msg("runtime.TypeMeta")),
            f(2, "raw", Bytes),
            f(3, "contentEncoding", Str),
            f(4, "contentType", Str),
        ],
    ),
    (
        "runtime.TypeMeta",
        &[f(1, "apiVersion", Str), f(2, "kind", Str)],
    ),
    (
        "ObjectMeta",
        &[
            f(1, "name", Str),
            f(2, "generateName", Str),
            f(3, "namespace", Str),
            f(4, "selfLink", Str),
            f(5, "uid", Str),
            f(6, "resourceVersion", Str),
            f(7, "generation", I64),
            f(8, "creationTimestamp", Time),
            f(9, "deletionTimestamp", Time),
            f(10, "deletionGracePeriodSeconds", I64),
            f(11, "labels", MapStr),
            f(12, "annotations", MapStr),
            r(13, "ownerReferences", Msg("OwnerReference")),
            r(14, "finalizers", Str),
            r(17, "managedFields", Msg("ManagedFieldsEntry")),
        ],
    ),
    (
        "OwnerReference",
        &[
            f(1, "kind", Str),
            f(3, "name", Str),
            f(4, "uid", Str),
            f(5, "apiVersion", Str),
            f(6, "controller", Bool),
            f(7, "blockOwnerDeletion", Bool),
        ],
    ),
    (
        "ManagedFieldsEntry",
        &[
            f(1, "manager", Str),
            f(2, "operation", Str),
            f(3, "apiVersion", Str),
            f(4, "time", Time),
            f(6, "fieldsType", Str),
            f(7, "fieldsV1", Msg("FieldsV1")),
            f(8, "subresource", Str),
        ],
    ),
    ("FieldsV1", &[f(1, "Raw", Json)]),
    (
        "ListMeta",
        &[
            f(1, "selfLink", Str),
            f(2, "resourceVersion", Str),
            f(3, "continue", Str),
            f(4, "remainingItemCount", I64),
        ],
    ),
    (
        "Status",
        &[
            f(1, "metadata", Msg("ListMeta")),
            f(2, "status", Str),
            f(3, "message", Str),
            f(4, "reason", Str),
            f(5, "details", Msg("StatusDetails")),
            f(6, "code", I32),
        ],
    ),
    (
        "StatusDetails",
        &[
            f(1, "name", Str),
            f(2, "group", Str),
            f(3, "kind", Str),
            r(4, "causes", Msg("StatusCause")),
            f(5, "retryAfterSeconds", I32),
            f(6, "uid", Str),
        ],
    ),
    (
        "StatusCause",
        &[
            f(1, "reason", Str),
            f(2, "message", Str),
            f(3, "field", Str),
        ],
    ),
    (
        "DeleteOptions",
        &[
            f(1, "gracePeriodSeconds", I64),
            f(2, "preconditions", Msg("Preconditions")),
            f(3, "orphanDependents", Bool),
            f(4, "propagationPolicy", Str),
            r(5, "dryRun", Str),
        ],
    ),
    (
        "Preconditions",
        &[f(1, "uid", Str), f(2, "resourceVersion", Str)],
    ),
    (
        "Namespace",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("NamespaceSpec")),
            f(3, "status", Msg("NamespaceStatus")),
        ],
    ),
    ("NamespaceSpec", &[r(1, "finalizers", Str)]),
    (
        "NamespaceStatus",
        &[
            f(1, "phase", Str),
            r(2, "conditions", Msg("NamespaceCondition")),
        ],
    ),
    (
        "NamespaceCondition",
        &[
            f(1, "type", Str),
            f(2, "status", Str),
            f(4, "lastTransitionTime", Time),
            f(5, "reason", Str),
            f(6, "message", Str),
        ],
    ),
    (
        "Secret",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "data", MapBytes),
            f(3, "type", Str),
            f(4, "stringData", MapStr),
            f(5, "immutable", Bool),
        ],
    ),
    (
        "ConfigMap",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "data", MapStr),
            f(3, "binaryData", MapBytes),
            f(4, "immutable", Bool),
        ],
    ),
    (
        "ServiceAccount",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            r(2, "secrets", Msg("ObjectReference")),
            r(3, "imagePullSecrets", Msg("LocalObjectReference")),
            f(4, "automountServiceAccountToken", Bool),
        ],
    ),
    (
        "ObjectReference",
        &[
            f(1, "kind", Str),
            f(2, "namespace", Str),
            f(3, "name", Str),
            f(4, "uid", Str),
            f(5, "apiVersion", Str),
            f(6, "resourceVersion", Str),
            f(7, "fieldPath", Str),
        ],
    ),
    ("LocalObjectReference", &[f(1, "name", Str)]),
    (
        "TokenRequest",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("TokenRequestSpec")),
            f(3, "status", Msg("TokenRequestStatus")),
        ],
    ),
    (
        "TokenRequestSpec",
        &[
            r(1, "audiences", Str),
            f(3, "boundObjectRef", Msg("BoundObjectReference")),
            f(4, "expirationSeconds", I64),
        ],
    ),
    (
        "TokenRequestStatus",
        &[f(1, "token", Str), f(2, "expirationTimestamp", Time)],
    ),
    (
        "BoundObjectReference",
        &[
            f(1, "kind", Str),
            f(2, "apiVersion", Str),
            f(3, "name", Str),
            f(4, "uid", Str),
        ],
    ),
    (
        "Eviction",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "deleteOptions", Msg("DeleteOptions")),
        ],
    ),
    (
        "NamespaceList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("Namespace")),
        ],
    ),
    (
        "SecretList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("Secret")),
        ],
    ),
    (
        "ConfigMapList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("ConfigMap")),
        ],
    ),
    (
        "ServiceAccountList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("ServiceAccount")),
        ],
    ),
    // rbac.authorization.k8s.io/v1
    (
        "PolicyRule",
        &[
            r(1, "verbs", Str),
            r(2, "apiGroups", Str),
            r(3, "resources", Str),
            r(4, "resourceNames", Str),
            r(5, "nonResourceURLs", Str),
        ],
    ),
    (
        "Role",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            r(2, "rules", Msg("PolicyRule")),
        ],
    ),
    (
        "ClusterRole",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            r(2, "rules", Msg("PolicyRule")),
            f(3, "aggregationRule", Msg("AggregationRule")),
        ],
    ),
    (
        "AggregationRule",
        &[r(1, "clusterRoleSelectors", Msg("LabelSelector"))],
    ),
    (
        "LabelSelector",
        &[
            f(1, "matchLabels", MapStr),
            r(2, "matchExpressions", Msg("LabelSelectorRequirement")),
        ],
    ),
    (
        "LabelSelectorRequirement",
        &[f(1, "key", Str), f(2, "operator", Str), r(3, "values", Str)],
    ),
    (
        "RoleBinding",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            r(2, "subjects", Msg("Subject")),
            f(3, "roleRef", Msg("RoleRef")),
        ],
    ),
    (
        "ClusterRoleBinding",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            r(2, "subjects", Msg("Subject")),
            f(3, "roleRef", Msg("RoleRef")),
        ],
    ),
    (
        "Subject",
        &[
            f(1, "kind", Str),
            f(2, "apiGroup", Str),
            f(3, "name", Str),
            f(4, "namespace", Str),
        ],
    ),
    (
        "RoleRef",
        &[f(1, "apiGroup", Str), f(2, "kind", Str), f(3, "name", Str)],
    ),
    (
        "RoleList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("Role")),
        ],
    ),
    (
        "ClusterRoleList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("ClusterRole")),
        ],
    ),
    (
        "RoleBindingList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("RoleBinding")),
        ],
    ),
    (
        "ClusterRoleBindingList",
        &[
            f(1, "metadata", Msg("ListMeta")),
            r(2, "items", Msg("ClusterRoleBinding")),
        ],
    ),
    // authorization.k8s.io/v1
    (
        "SelfSubjectAccessReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("SelfSubjectAccessReviewSpec")),
            f(3, "status", Msg("SubjectAccessReviewStatus")),
        ],
    ),
    (
        "SelfSubjectAccessReviewSpec",
        &[
            f(1, "resourceAttributes", Msg("ResourceAttributes")),
            f(2, "nonResourceAttributes", Msg("NonResourceAttributes")),
        ],
    ),
    (
        "SubjectAccessReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("SubjectAccessReviewSpec")),
            f(3, "status", Msg("SubjectAccessReviewStatus")),
        ],
    ),
    (
        "LocalSubjectAccessReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("SubjectAccessReviewSpec")),
            f(3, "status", Msg("SubjectAccessReviewStatus")),
        ],
    ),
    (
        "SubjectAccessReviewSpec",
        &[
            f(1, "resourceAttributes", Msg("ResourceAttributes")),
            f(2, "nonResourceAttributes", Msg("NonResourceAttributes")),
            f(3, "user", Str),
            r(4, "groups", Str),
            f(6, "uid", Str),
        ],
    ),
    (
        "ResourceAttributes",
        &[
            f(1, "namespace", Str),
            f(2, "verb", Str),
            f(3, "group", Str),
            f(4, "version", Str),
            f(5, "resource", Str),
            f(6, "subresource", Str),
            f(7, "name", Str),
        ],
    ),
    (
        "NonResourceAttributes",
        &[f(1, "path", Str), f(2, "verb", Str)],
    ),
    (
        "SubjectAccessReviewStatus",
        &[
            f(1, "allowed", Bool),
            f(2, "reason", Str),
            f(3, "evaluationError", Str),
            f(4, "denied", Bool),
        ],
    ),
    (
        "SelfSubjectRulesReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("SelfSubjectRulesReviewSpec")),
            f(3, "status", Msg("SubjectRulesReviewStatus")),
        ],
    ),
    ("SelfSubjectRulesReviewSpec", &[f(1, "namespace", Str)]),
    (
        "SubjectRulesReviewStatus",
        &[
            r(1, "resourceRules", Msg("ResourceRule")),
            r(2, "nonResourceRules", Msg("NonResourceRule")),
            f(3, "incomplete", Bool),
            f(4, "evaluationError", Str),
        ],
    ),
    (
        "ResourceRule",
        &[
            r(1, "verbs", Str),
            r(2, "apiGroups", Str),
            r(3, "resources", Str),
            r(4, "resourceNames", Str),
        ],
    ),
    (
        "NonResourceRule",
        &[r(1, "verbs", Str), r(2, "nonResourceURLs", Str)],
    ),
    // authentication.k8s.io/v1 (and v1beta1, the same messages)
    (
        "SelfSubjectReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "status", Msg("SelfSubjectReviewStatus")),
        ],
    ),
    (
        "SelfSubjectReviewStatus",
        &[f(1, "userInfo", Msg("UserInfo"))],
    ),
    (
        "UserInfo",
        &[f(1, "username", Str), f(2, "uid", Str), r(3, "groups", Str)],
    ),
    (
        "TokenReview",
        &[
            f(1, "metadata", Msg("ObjectMeta")),
            f(2, "spec", Msg("TokenReviewSpec")),
            f(3, "status", Msg("TokenReviewStatus")),
        ],
    ),
    (
        "TokenReviewSpec",
        &[f(1, "token", Str), r(2, "audiences", Str)],
    ),
    (
        "TokenReviewStatus",
        &[
            f(1, "authenticated", Bool),
            f(2, "user", Msg("UserInfo")),
            f(3, "error", Str),
            r(4, "audiences", Str),
        ],
    ),
];

fn fields(message: &str) -> Option<&'static [Field]> {
    MESSAGES
        .iter()
        .find(|(name, _)| *name == message)
        .map(|(_, fields)| *fields)
}

/// The message of a top-level `apiVersion`/`kind`, if it has a protobuf form here.
fn top_level(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("v1" | "meta.k8s.io/v1", "Status" | "DeleteOptions") => Some(if kind == "Status" {
            "Status"
        } else {
            "DeleteOptions"
        }),
        (
            "v1",
            "Namespace" | "Secret" | "ConfigMap" | "ServiceAccount" | "NamespaceList"
            | "SecretList" | "ConfigMapList" | "ServiceAccountList",
        ) => MESSAGES
            .iter()
            .find(|(name, _)| *name == kind)
            .map(|(name, _)| *name),
        ("authentication.k8s.io/v1", "TokenRequest") => Some("TokenRequest"),
        (
            "rbac.authorization.k8s.io/v1",
            "Role"
            | "ClusterRole"
            | "RoleBinding"
            | "ClusterRoleBinding"
            | "RoleList"
            | "ClusterRoleList"
            | "RoleBindingList"
            | "ClusterRoleBindingList",
        )
        | (
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview"
            | "SubjectAccessReview"
            | "LocalSubjectAccessReview"
            | "SelfSubjectRulesReview",
        )
        | ("authentication.k8s.io/v1", "TokenReview")
        | ("authentication.k8s.io/v1" | "authentication.k8s.io/v1beta1", "SelfSubjectReview") => {
            MESSAGES
                .iter()
                .find(|(name, _)| *name == kind)
                .map(|(name, _)| *name)
        }
        ("policy/v1" | "policy/v1beta1", "Eviction") => Some("Eviction"),
        _ => None,
    }
}

/// Whether objects of `apiVersion`/`kind` have a protobuf form here.
pub fn supports(api_version: &str, kind: &str) -> bool {
    top_level(api_version, kind).is_some()
}

// --- the wire ---

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        // Truncation is the point: seven bits at a time.
        #[allow(clippy::cast_possible_truncation)]
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    out.push(value as u8);
}

fn put_key(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key(out, number, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.bytes.split_first().ok_or(ProtobufError::Malformed)?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if n > self.bytes.len() {
            return Err(ProtobufError::Malformed);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn length_delimited(&mut self) -> Result<&'a [u8], ProtobufError> {
        let n = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Malformed)?;
        self.take(n)
    }

    fn skip(&mut self, wire: u64) -> Result<(), ProtobufError> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.take(8).map(|_| ()),
            2 => self.length_delimited().map(|_| ()),
            5 => self.take(4).map(|_| ()),
            _ => Err(ProtobufError::Malformed),
        }
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn time_text(seconds: i64, nanos: i32) -> Option<String> {
    let ts = jiff::Timestamp::new(seconds, nanos).ok()?;
    Some(if nanos == 0 {
        format!("{ts:.0}")
    } else {
        format!("{ts}")
    })
}

/// Decodes a map entry (`key = 1`, `value = 2`).
fn map_entry(bytes: &[u8], binary: bool) -> Result<(String, Value), ProtobufError> {
    let mut reader = Reader { bytes };
    let (mut key, mut value) = (String::new(), json!(""));
    while !reader.bytes.is_empty() {
        let tag = reader.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => {
                key = String::from_utf8_lossy(reader.length_delimited()?).into_owned();
            }
            (2, 2) => {
                let raw = reader.length_delimited()?;
                value = if binary {
                    json!(b64().encode(raw))
                } else {
                    json!(String::from_utf8_lossy(raw))
                };
            }
            (_, wire) => reader.skip(wire)?,
        }
    }
    Ok((key, value))
}

/// Decodes a message to its JSON form.
fn decode_message(bytes: &[u8], message: &str) -> Result<Value, ProtobufError> {
    let table = fields(message).ok_or(ProtobufError::Malformed)?;
    let mut reader = Reader { bytes };
    let mut out = Map::new();
    while !reader.bytes.is_empty() {
        let tag = reader.varint()?;
        let (number, wire) = (tag >> 3, tag & 7);
        let Some(&(_, name, t, repeated)) = table.iter().find(|(n, ..)| u64::from(*n) == number)
        else {
            reader.skip(wire)?;
            continue;
        };
        // Varints carry two's-complement values; the casts reinterpret them as Go does.
        #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
        let value = match (t, wire) {
            (I64, 0) => json!(reader.varint()? as i64),
            (I32, 0) => json!(reader.varint()? as i64 as i32),
            (Bool, 0) => json!(reader.varint()? != 0),
            (Str, 2) => json!(String::from_utf8_lossy(reader.length_delimited()?)),
            (Bytes, 2) => json!(b64().encode(reader.length_delimited()?)),
            (Json, 2) => serde_json::from_slice(reader.length_delimited()?)
                .map_err(|_| ProtobufError::Malformed)?,
            (Time, 2) => {
                let mut inner = Reader {
                    bytes: reader.length_delimited()?,
                };
                let (mut s, mut n) = (0i64, 0i32);
                while !inner.bytes.is_empty() {
                    let tag = inner.varint()?;
                    match (tag >> 3, tag & 7) {
                        (1, 0) => s = inner.varint()? as i64,
                        (2, 0) => n = inner.varint()? as i64 as i32,
                        (_, w) => inner.skip(w)?,
                    }
                }
                if s == 0 && n == 0 {
                    continue;
                }
                time_text(s, n).map_or(Value::Null, Value::String)
            }
            (MapStr | MapBytes, 2) => {
                let (key, value) = map_entry(reader.length_delimited()?, matches!(t, MapBytes))?;
                let entry = out.entry(name).or_insert_with(|| json!({}));
                if let Some(map) = entry.as_object_mut() {
                    map.insert(key, value);
                }
                continue;
            }
            (Msg(inner), 2) => decode_message(reader.length_delimited()?, inner)?,
            (_, wire) => {
                reader.skip(wire)?;
                continue;
            }
        };
        if repeated {
            let entry = out.entry(name).or_insert_with(|| json!([]));
            if let Some(list) = entry.as_array_mut() {
                list.push(value);
            }
        } else {
            out.insert(name.to_owned(), value);
        }
    }
    // Go writes unset strings as empty; their JSON form omits them.
    out.retain(|_, v| !(v.is_null() || v.as_str().is_some_and(str::is_empty)));
    Ok(Value::Object(out))
}

fn encode_value(out: &mut Vec<u8>, number: u32, t: Type, value: &Value) {
    match t {
        Str => {
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            put_bytes(out, number, text.as_bytes());
        }
        Bytes => {
            let raw = value
                .as_str()
                .and_then(|s| b64().decode(s).ok())
                .unwrap_or_default();
            put_bytes(out, number, &raw);
        }
        Json => put_bytes(out, number, value.to_string().as_bytes()),
        // Two's complement on the wire, as Go writes negative numbers.
        #[allow(clippy::cast_sign_loss)]
        I64 | I32 => {
            put_key(out, number, 0);
            put_varint(out, value.as_i64().unwrap_or_default() as u64);
        }
        Bool => {
            put_key(out, number, 0);
            put_varint(out, u64::from(value.as_bool().unwrap_or_default()));
        }
        Time => {
            let Some(ts) = value
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            else {
                return;
            };
            let mut inner = Vec::new();
            put_key(&mut inner, 1, 0);
            #[allow(clippy::cast_sign_loss)]
            put_varint(&mut inner, ts.as_second() as u64);
            if ts.subsec_nanosecond() != 0 {
                put_key(&mut inner, 2, 0);
                #[allow(clippy::cast_sign_loss)]
                put_varint(&mut inner, i64::from(ts.subsec_nanosecond()) as u64);
            }
            put_bytes(out, number, &inner);
        }
        MapStr | MapBytes => {
            for (key, item) in value.as_object().into_iter().flatten() {
                let mut entry = Vec::new();
                put_bytes(&mut entry, 1, key.as_bytes());
                encode_value(
                    &mut entry,
                    2,
                    if matches!(t, MapBytes) { Bytes } else { Str },
                    item,
                );
                put_bytes(out, number, &entry);
            }
        }
        Msg(inner) => put_bytes(out, number, &encode_message(value, inner)),
    }
}

/// Encodes a message from its JSON form (fields without a protobuf number are left out).
fn encode_message(value: &Value, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let Some(table) = fields(message) else {
        return out;
    };
    for &(number, name, t, repeated) in table {
        let Some(v) = value.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        if repeated {
            for item in v.as_array().into_iter().flatten() {
                encode_value(&mut out, number, t, item);
            }
        } else {
            encode_value(&mut out, number, t, v);
        }
    }
    out
}

/// Decodes a protobuf request body to the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::Magic)?;
    let envelope = decode_message(rest, "Unknown")?;
    let api_version = envelope["typeMeta"]["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kind = envelope["typeMeta"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let message = top_level(&api_version, &kind).ok_or_else(|| ProtobufError::UnknownType {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let raw = envelope["raw"]
        .as_str()
        .map(|r| b64().decode(r))
        .transpose()
        .map_err(|_| ProtobufError::Malformed)?
        .unwrap_or_default();
    let mut value = decode_message(&raw, message)?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("apiVersion".into(), json!(api_version));
        obj.insert("kind".into(), json!(kind));
    }
    Ok(value)
}

/// Encodes an object (with `apiVersion` and `kind`) in the protobuf wire form.
pub fn encode(value: &Value) -> Result<Vec<u8>, ProtobufError> {
    let api_version = value["apiVersion"].as_str().ok_or(ProtobufError::NoType)?;
    let kind = value["kind"].as_str().ok_or(ProtobufError::NoType)?;
    let message = top_level(api_version, kind).ok_or_else(|| ProtobufError::UnknownType {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })?;
    let raw = encode_message(value, message);
    let envelope = encode_message(
        &json!({
            "typeMeta": {"apiVersion": api_version, "kind": kind},
            "raw": b64().encode(raw),
        }),
        "Unknown",
    );
    let mut out = MAGIC.to_vec();
    out.extend(envelope);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip() {
        let secret = json!({
            "metadata": {"name": "bmc", "namespace": "default", "labels": {"a": "b"}, "creationTimestamp": "2026-01-02T03:04:05Z", "generation": 2, "finalizers": ["x", "y"]},
            "data": {"password": "czNjcmV0"},
            "type": "Opaque",
            "apiVersion": "v1", "kind": "Secret",
        });
        let bytes = encode(&secret).unwrap();
        assert!(bytes.starts_with(b"k8s\0"));
        assert_eq!(decode(&bytes).unwrap(), secret);
    }

    #[test]
    fn statuses_lists_and_bad_input() {
        let status = json!({"metadata": {}, "status": "Failure", "message": "no", "reason": "NotFound", "details": {"name": "x", "causes": [{"reason": "R", "message": "m"}]}, "code": 404, "apiVersion": "v1", "kind": "Status"});
        assert_eq!(decode(&encode(&status).unwrap()).unwrap(), status);
        let list = json!({"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}], "apiVersion": "v1", "kind": "ConfigMapList"});
        assert_eq!(decode(&encode(&list).unwrap()).unwrap(), list);
        assert_eq!(decode(b"{}"), Err(ProtobufError::Magic));
        assert_eq!(decode(b"k8s\0\x0a\xff"), Err(ProtobufError::Malformed));
        assert!(!supports("cluster.x-k8s.io/v1beta2", "Cluster"));
        assert!(matches!(
            encode(&json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
            Err(ProtobufError::UnknownType { .. })
        ));
    }
}
