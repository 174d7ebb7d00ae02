//! Every patch kind `capstan serve` accepts (JSON patch, merge patch, strategic merge patch, the
//! merge of server-side apply) against an object. The first byte picks the kind; the rest is the
//! object and the patch, split at the first NUL (a fixed Deployment when the object is not JSON).
//! Besides "no panic": a merge patch applied twice gives what it gave once (RFC 7386).
#![no_main]

use capstan_apiserver::patching::{PatchKind, apply};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const KINDS: [PatchKind; 4] = [
    PatchKind::Json,
    PatchKind::Merge,
    PatchKind::Strategic,
    PatchKind::Apply,
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let kind = KINDS[usize::from(selector) % KINDS.len()];
    let (object, patch) = match rest.iter().position(|b| *b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&b""[..], rest),
    };
    let target: Value = serde_json::from_slice(object).unwrap_or_else(|_| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "labels": {"a": "b"}, "finalizers": ["x"]},
               "spec": {"replicas": 1, "template": {"spec": {
                   "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}],
                   "volumes": [{"name": "v", "emptyDir": {}}]}}}})
    });
    let Ok(patch) = serde_json::from_slice::<Value>(patch) else {
        return;
    };
    let Ok(once) = apply(kind, &target, &patch) else {
        return;
    };
    if kind == PatchKind::Merge {
        let twice = apply(kind, &once, &patch).expect("a merge patch applies to its own result");
        assert_eq!(once, twice, "a merge patch is idempotent");
    }
});
