//! Conversion between served versions of a kind. Objects are stored in one version per kind; every read
//! converts to the version the client asked for and every write to the storage version.
//!
//! The default converter only rewrites `apiVersion`, which is right for kinds whose versions share a
//! schema. Kinds whose shape changed between versions plug in a real conversion through [`Converter`]:
//! [`ModelConverter`] converts the Cluster API and CAPM3 kinds between v1beta1 and v1beta2 with
//! `capstan_model::convert` and rewrites `apiVersion` for everything else.
//! Core `v1` Events and `events.k8s.io/v1` Events are one resource seen in two shapes; that mapping
//! lives here because every client of the API (kubectl describe, kube-runtime's recorder) relies on it.

use serde_json::{Map, Value, json};

/// Converts objects between versions of their kind.
pub trait Converter: Send + Sync {
    /// Converts `object` (of `group`/`kind`, in whatever version its `apiVersion` says) to `to_version`.
    fn convert(
        &self,
        group: &str,
        kind: &str,
        object: Value,
        to_version: &str,
    ) -> Result<Value, String>;
}

/// Rewrites `apiVersion` only.
pub struct ApiVersionRewrite;

impl Converter for ApiVersionRewrite {
    fn convert(
        &self,
        group: &str,
        _kind: &str,
        mut object: Value,
        to_version: &str,
    ) -> Result<Value, String> {
        set_api_version(
            &mut object,
            &crate::registry::api_version(group, to_version),
        );
        Ok(object)
    }
}

/// The v1beta1 ⇄ v1beta2 conversion of `capstan_model::convert` for the kinds it handles, an
/// `apiVersion` rewrite for the rest.
pub struct ModelConverter;

impl Converter for ModelConverter {
    fn convert(
        &self,
        group: &str,
        kind: &str,
        object: Value,
        to_version: &str,
    ) -> Result<Value, String> {
        if !capstan_model::convert::handles(group, kind) {
            return ApiVersionRewrite.convert(group, kind, object, to_version);
        }
        capstan_model::convert::convert(object, &crate::registry::api_version(group, to_version))
            .map_err(|e| e.to_string())
    }
}

/// Sets `apiVersion`.
pub fn set_api_version(object: &mut Value, api_version: &str) {
    if let Some(obj) = object.as_object_mut() {
        obj.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    }
}

/// Where Events are stored: the core resource.
pub const EVENTS_STORAGE: &str = "/events";

fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    map.remove(key)
}

/// `events.k8s.io/v1` → core `v1` Event.
pub fn event_to_core(object: Value) -> Value {
    let Value::Object(mut map) = object else {
        return object;
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    if let Some(meta) = take(&mut map, "metadata") {
        out.insert("metadata".into(), meta);
    }
    let renames = [
        ("regarding", "involvedObject"),
        ("note", "message"),
        ("reason", "reason"),
        ("type", "type"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("eventTime", "eventTime"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("deprecatedSource", "source"),
        ("series", "series"),
    ];
    for (from, to) in renames {
        if let Some(v) = take(&mut map, from) {
            out.insert(to.into(), v);
        }
    }
    // kubectl describe sorts and ages events by lastTimestamp, falling back to eventTime.
    if !out.contains_key("lastTimestamp")
        && let Some(t) = out.get("eventTime").and_then(Value::as_str)
    {
        let second_precision = t
            .split('.')
            .next()
            .unwrap_or(t)
            .trim_end_matches('Z')
            .to_owned()
            + "Z";
        out.insert("lastTimestamp".into(), json!(second_precision));
        out.entry("firstTimestamp")
            .or_insert_with(|| json!(second_precision));
    }
    out.entry("count").or_insert_with(|| json!(1));
    Value::Object(out)
}

/// Core `v1` → `events.k8s.io/v1` Event.
pub fn event_from_core(object: Value) -> Value {
    let Value::Object(mut map) = object else {
        return object;
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    if let Some(meta) = take(&mut map, "metadata") {
        out.insert("metadata".into(), meta);
    }
    let renames = [
        ("involvedObject", "regarding"),
        ("message", "note"),
        ("reason", "reason"),
        ("type", "type"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("eventTime", "eventTime"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
        ("source", "deprecatedSource"),
        ("series", "series"),
    ];
    for (from, to) in renames {
        if let Some(v) = take(&mut map, from) {
            out.insert(to.into(), v);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_converter_converts_what_it_knows_and_rewrites_the_rest() {
        let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "nodeDrainTimeout": "10s"}});
        let stored = ModelConverter
            .convert("cluster.x-k8s.io", "Machine", machine.clone(), "v1beta2")
            .unwrap();
        assert_eq!(stored["spec"]["deletion"]["nodeDrainTimeoutSeconds"], 10);
        let read = ModelConverter
            .convert("cluster.x-k8s.io", "Machine", stored, "v1beta1")
            .unwrap();
        assert_eq!(read, machine);

        let host = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "spec": {"online": true}});
        let same = ModelConverter
            .convert("metal3.io", "BareMetalHost", host.clone(), "v1alpha1")
            .unwrap();
        assert_eq!(same, host);

        let bad = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "spec": {"nodeDrainTimeout": "soon"}});
        let err = ModelConverter
            .convert("cluster.x-k8s.io", "Machine", bad, "v1beta2")
            .unwrap_err();
        assert!(err.contains("spec.nodeDrainTimeout"), "{err}");
    }

    #[test]
    fn events_round_trip_between_shapes() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "BareMetalHost", "name": "h"}, "note": "registered", "reason": "Registered",
            "type": "Normal", "eventTime": "2026-01-01T00:00:00.123456Z", "reportingController": "capstan"});
        let core = event_to_core(new.clone());
        assert_eq!(core["involvedObject"]["name"], "h");
        assert_eq!(core["message"], "registered");
        assert_eq!(core["lastTimestamp"], "2026-01-01T00:00:00Z");
        let back = event_from_core(core);
        assert_eq!(back["regarding"], new["regarding"]);
        assert_eq!(back["note"], new["note"]);
    }
}
