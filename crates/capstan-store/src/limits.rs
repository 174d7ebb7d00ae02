//! Bounds every stored object is held to, so that whatever is committed can be read back.
//!
//! `serde_json` refuses to parse JSON nested deeper than 128 levels. Before these bounds, an object
//! nested 131–256 levels (built from YAML, or grown by a patch) was serialised and committed but could
//! never be parsed again, which broke every list and watch of its kind. The store now refuses such an
//! object before the write; [`MAX_DEPTH`] leaves room for the envelopes clients parse objects inside
//! (a list's `items`, a watch event, a Table row).

use serde_json::Value;

/// Deepest nesting of mappings and sequences a stored object may have (the object itself is 1).
pub const MAX_DEPTH: usize = 100;

/// Largest serialised object the store accepts (the request limit of kube-apiserver).
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// The nesting depth of `value`: 0 for a scalar, 1 for an empty or flat object or array.
///
/// Iterative, so that a value nested far deeper than the limit cannot exhaust the stack here.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, level)) = pending.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level);
                pending.extend(items.iter().map(|v| (v, level + 1)));
            }
            Value::Object(fields) => {
                deepest = deepest.max(level);
                pending.extend(fields.values().map(|v| (v, level + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// How deep `serde_json` parses into a `Value` before it gives up ("recursion limit exceeded").
const SERDE_JSON_RECURSION_LIMIT: usize = 128;

/// Whether stored text parses as a JSON `Value`, without building it: valid JSON (skipping a value
/// does not count depth in `serde_json`, so nesting is measured separately).
pub fn decodes(json: &str) -> bool {
    text_depth(json) < SERDE_JSON_RECURSION_LIMIT
        && serde_json::from_str::<serde::de::IgnoredAny>(json).is_ok()
}

/// The deepest bracket nesting of JSON text, strings skipped.
fn text_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> Value {
        let mut value = Value::from(1);
        for _ in 0..levels {
            value = serde_json::json!({ "a": value });
        }
        value
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&Value::from(1)), 0);
        assert_eq!(depth(&serde_json::json!({})), 1);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(depth(&nested(150)), 150);
    }

    #[test]
    fn what_serde_json_cannot_read_back_is_deeper_than_the_limit() {
        let text = serde_json::to_string(&nested(200)).unwrap();
        assert!(!decodes(&text));
        let text = serde_json::to_string(&nested(MAX_DEPTH)).unwrap();
        assert!(decodes(&text));
        assert_eq!(text_depth(r#"{"a":"[[{\\","b":[{}]}"#), 3);
        for levels in [126, 127, 128, 129] {
            let text = serde_json::to_string(&nested(levels)).unwrap();
            assert_eq!(
                decodes(&text),
                serde_json::from_str::<Value>(&text).is_ok(),
                "{levels}"
            );
        }
        // A list around it, as clients read it, still parses.
        let list = serde_json::json!({"items": [nested(MAX_DEPTH)]});
        assert!(decodes(&serde_json::to_string(&list).unwrap()));
    }
}
