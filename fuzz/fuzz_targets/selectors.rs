//! Label and field selectors as `capstan serve` parses them from `labelSelector` and
//! `fieldSelector`; what parses is matched against an object, as lists and watches do.
#![no_main]

use capstan_apiserver::selectors::{FieldSelector, LabelSelector, labels_of};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (label, field) = text.split_once('\n').unwrap_or((text, text));
    let object = json!({"metadata": {"name": "n", "namespace": "default",
                                     "labels": {"app": "web", "tier": "front", "x.io/y": ""}},
                        "spec": {"nodeName": "a"}, "status": {"phase": "Running"}});
    if let Ok(selector) = LabelSelector::parse(label) {
        let _ = selector.matches(&labels_of(&object));
        let _ = selector.is_empty();
    }
    if let Ok(selector) = FieldSelector::parse(field) {
        let _ = selector.matches(&object);
    }
});
