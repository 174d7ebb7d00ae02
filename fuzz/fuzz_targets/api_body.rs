//! A write's request body as `capstan serve` reads it: protobuf transcoding, JSON or YAML parsing
//! (aliases bounded), and the limits every stored object must meet. The first byte picks the
//! `Content-Type` and whether the target is one of Kubernetes' own kinds.
#![no_main]

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use libfuzzer_sys::fuzz_target;

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/apply-patch+yaml",
    "application/json; charset=utf-8",
    "",
    "text/plain",
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    let content_type = CONTENT_TYPES[usize::from(selector & 0x7f) % CONTENT_TYPES.len()];
    if !content_type.is_empty() {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    let typed = selector & 0x80 != 0;
    let _ = capstan_apiserver::decode_request_body(typed, headers, Bytes::copy_from_slice(body));
});
