//! The conversion-data annotation: what one version cannot hold, kept so that converting back
//! restores it.
//!
//! A stash is a JSON object kept in the `cluster.x-k8s.io/conversion-data` annotation. Each key is a
//! JSON Pointer (RFC 6901) into the object *in the other version*; each value says what belongs there:
//!
//! ```json
//! {
//!   "/spec/kubeadmConfigSpec/clusterConfiguration/networking": {"value": {"podSubnet": "10.244.0.0/16"}},
//!   "/spec/machineTemplate/nodeDrainTimeout": {"value": "5m", "replaces": "5m0s"},
//!   "/spec/controlPlaneRef/namespace": {"replaces": "default"}
//! }
//! ```
//!
//! `value` is what the field must hold (absent: the field must not exist); `replaces` is what the plain
//! conversion puts there (absent: the plain conversion leaves the field out). An entry is applied only
//! where the field still holds exactly `replaces`, so a field changed in the other version since the
//! stash was written keeps its new value instead of being rolled back.
//!
//! Stashes are computed, not hand-written per field: after converting, the converter converts the
//! result straight back and records the difference from the original (see [`Stash::between`]), so
//! every field the target version cannot express, and every value that would not survive the trip
//! (a `5m` that would come back as `5m0s`, a reference namespace, an unknown field), is kept.
//!
//! Upstream Cluster API writes the same annotation with a different payload (the whole hub object).
//! Such a value is not a stash: it is left alone as an ordinary annotation, and when a stash has to be
//! written over it, the stash records it like any other field, so it comes back too.
//!
//! An object is converted back only after its stash is taken out, which also drops an `annotations`
//! (or `metadata`) map left empty, so when a stash is needed it is computed against the object read
//! that way ([`strip`]); an empty map the original had is then recorded too.

use serde_json::{Map, Value};

/// The annotation that carries the stash, named as upstream names it.
pub const CONVERSION_DATA_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data";

const VALUE: &str = "value";
const REPLACES: &str = "replaces";

/// One difference: at a pointer, `replaces` (what the plain conversion yields) becomes `value`.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    pointer: String,
    replaces: Option<Value>,
    value: Option<Value>,
}

/// A set of differences between a plainly converted object and the object it must become.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stash {
    entries: Vec<Entry>,
}

impl Stash {
    /// The differences that turn `converted` into `wanted`. Objects are compared key by key and
    /// arrays of the same length item by item, so entries are as deep (and as small) as possible.
    pub fn between(converted: &Value, wanted: &Value) -> Self {
        let mut stash = Stash::default();
        let mut pointer = String::new();
        diff(converted, wanted, &mut pointer, &mut stash.entries);
        stash
    }

    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Applies every entry whose field still holds what the entry replaces.
    pub fn apply(&self, object: &mut Value) {
        for entry in &self.entries {
            apply_entry(object, entry);
        }
    }

    /// The stash as the annotation's JSON.
    pub fn to_json(&self) -> String {
        let mut map = Map::new();
        for entry in &self.entries {
            let mut record = Map::new();
            if let Some(value) = &entry.value {
                record.insert(VALUE.into(), value.clone());
            }
            if let Some(replaces) = &entry.replaces {
                record.insert(REPLACES.into(), replaces.clone());
            }
            map.insert(entry.pointer.clone(), Value::Object(record));
        }
        Value::Object(map).to_string()
    }

    /// Reads an annotation value; `None` if it is not a stash (upstream's payload, or anything else).
    pub fn from_json(text: &str) -> Option<Self> {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
            return None;
        };
        if map.is_empty() {
            return None;
        }
        let mut entries = Vec::with_capacity(map.len());
        for (pointer, record) in map {
            let Value::Object(mut record) = record else {
                return None;
            };
            if !pointer.starts_with('/') || record.keys().any(|k| k != VALUE && k != REPLACES) {
                return None;
            }
            entries.push(Entry {
                pointer,
                value: record.remove(VALUE),
                replaces: record.remove(REPLACES),
            });
        }
        Some(Self { entries })
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn diff(converted: &Value, wanted: &Value, pointer: &mut String, out: &mut Vec<Entry>) {
    match (converted, wanted) {
        (Value::Object(have), Value::Object(want)) => {
            for (key, wanted_value) in want {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape(key));
                match have.get(key) {
                    Some(have_value) => diff(have_value, wanted_value, pointer, out),
                    None => out.push(Entry {
                        pointer: pointer.clone(),
                        replaces: None,
                        value: Some(wanted_value.clone()),
                    }),
                }
                pointer.truncate(len);
            }
            for (key, have_value) in have {
                if !want.contains_key(key) {
                    out.push(Entry {
                        pointer: format!("{pointer}/{}", escape(key)),
                        replaces: Some(have_value.clone()),
                        value: None,
                    });
                }
            }
        }
        (Value::Array(have), Value::Array(want)) if have.len() == want.len() => {
            for (index, (have_item, want_item)) in have.iter().zip(want).enumerate() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&index.to_string());
                diff(have_item, want_item, pointer, out);
                pointer.truncate(len);
            }
        }
        _ if converted != wanted => out.push(Entry {
            pointer: pointer.clone(),
            replaces: Some(converted.clone()),
            value: Some(wanted.clone()),
        }),
        _ => {}
    }
}

fn apply_entry(object: &mut Value, entry: &Entry) {
    let Some(path) = entry.pointer.strip_prefix('/') else {
        // The empty pointer (the whole object) is never written: objects differ below the root.
        return;
    };
    let tokens: Vec<String> = path.split('/').map(unescape).collect();
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut parent = object;
    for token in parents {
        let next = match parent {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else {
            return;
        };
        parent = next;
    }
    match parent {
        Value::Object(map) => {
            if map.get(last) != entry.replaces.as_ref() {
                return;
            }
            match &entry.value {
                Some(value) => {
                    map.insert(last.clone(), value.clone());
                }
                None => {
                    map.remove(last);
                }
            }
        }
        Value::Array(items) => {
            // Array entries only ever replace an item in place.
            let (Some(index), Some(value)) = (last.parse::<usize>().ok(), &entry.value) else {
                return;
            };
            if let Some(item) = items.get_mut(index)
                && Some(&*item) == entry.replaces.as_ref()
            {
                *item = value.clone();
            }
        }
        _ => {}
    }
}

/// Removes and returns the stash carried by `object`, if its conversion-data annotation holds one.
/// Empty `annotations` and `metadata` maps left behind are removed too (see [`strip`]).
pub fn take(object: &mut Value) -> Option<Stash> {
    let stash = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(CONVERSION_DATA_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(Stash::from_json)?;
    strip(object);
    Some(stash)
}

/// Removes the conversion-data annotation whatever it holds, then an `annotations` map and a
/// `metadata` map left empty; says whether anything changed. This is exactly what reading a stash
/// back out of an object does.
pub fn strip(object: &mut Value) -> bool {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
        changed |= annotations.remove(CONVERSION_DATA_ANNOTATION).is_some();
        if annotations.is_empty() {
            metadata.remove("annotations");
            changed = true;
        }
    }
    if metadata.is_empty()
        && let Some(map) = object.as_object_mut()
    {
        map.remove("metadata");
        changed = true;
    }
    changed
}

/// Writes `stash` into `object`'s conversion-data annotation, creating `metadata` and
/// `annotations` if needed. Fails (returning the path) if either exists but is not an object.
pub fn put(object: &mut Value, stash: &Stash) -> Result<(), &'static str> {
    let Some(root) = object.as_object_mut() else {
        return Err("the object");
    };
    let metadata = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err("metadata");
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(annotations) = annotations.as_object_mut() else {
        return Err("metadata.annotations");
    };
    annotations.insert(
        CONVERSION_DATA_ANNOTATION.into(),
        Value::String(stash.to_json()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn between_then_apply_reproduces_the_wanted_object() {
        let converted = json!({"spec": {"a": 1, "list": [1, 2, {"x": "y"}], "gone": true,
            "short": [1], "odd/key~": {"k": 1}}});
        let wanted = json!({"spec": {"a": 2, "list": [1, 3, {"x": "z", "new": null}],
            "short": [1, 2], "added": {"deep": [1]}, "odd/key~": {"k": 2}}});
        let stash = Stash::between(&converted, &wanted);
        assert_eq!(stash.entries.len(), 8, "{}", stash.to_json());
        let mut applied = converted.clone();
        stash.apply(&mut applied);
        assert_eq!(applied, wanted);
        let reread = Stash::from_json(&stash.to_json()).unwrap();
        assert_eq!(reread, stash);
        assert!(stash.to_json().contains("/spec/odd~1key~0/k"));
    }

    #[test]
    fn entries_skip_fields_changed_since() {
        let converted = json!({"spec": {"timeout": "5m0s"}});
        let wanted = json!({"spec": {"timeout": "5m", "extra": 1}});
        let stash = Stash::between(&converted, &wanted);
        let mut changed = json!({"spec": {"timeout": "10m0s"}});
        stash.apply(&mut changed);
        assert_eq!(changed, json!({"spec": {"timeout": "10m0s", "extra": 1}}));
        let mut missing_parent = json!({});
        stash.apply(&mut missing_parent);
        assert_eq!(missing_parent, json!({}));
    }

    #[test]
    fn foreign_payloads_are_not_stashes() {
        for text in [
            "",
            "not json",
            "[]",
            "{}",
            r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","spec":{}}"#,
            r#"{"/spec":1}"#,
            r#"{"/spec":{"value":1,"other":2}}"#,
        ] {
            assert_eq!(Stash::from_json(text), None, "{text}");
        }
        assert!(Stash::from_json(r#"{"/spec/a":{"value":1}}"#).is_some());
    }

    #[test]
    fn take_removes_only_what_put_added() {
        let stash = Stash::between(&json!({"a": 1}), &json!({"a": 2}));
        let mut bare = json!({"kind": "X"});
        put(&mut bare, &stash).unwrap();
        assert_eq!(take(&mut bare), Some(stash.clone()));
        assert_eq!(bare, json!({"kind": "X"}));

        let mut annotated = json!({"metadata": {"name": "n", "annotations": {"a": "b"}}});
        put(&mut annotated, &stash).unwrap();
        assert_eq!(take(&mut annotated), Some(stash.clone()));
        assert_eq!(
            annotated,
            json!({"metadata": {"name": "n", "annotations": {"a": "b"}}})
        );

        let mut odd = json!({"metadata": "x"});
        assert_eq!(put(&mut odd, &stash), Err("metadata"));
        let mut not_an_object = json!([1]);
        assert_eq!(put(&mut not_an_object, &stash), Err("the object"));
    }
}
