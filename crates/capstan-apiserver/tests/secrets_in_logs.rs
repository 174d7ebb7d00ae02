//! No Secret value reaches the server's logs at any level: every path that handles a Secret (valid,
//! refused for bad data or bad metadata, patched, listed, watched, described, deleted) runs with
//! every target at TRACE (hyper, h2 and rustls included), and the captured log is searched for the
//! values in plain text and in base64.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use support::raw::{request, request_as};
use support::{kubectl, start};

const PLAIN: &str = "pw-Zq81-never-logged";
const NOT_BASE64: &str = "raw!pw-Zq81-never-logged-either";
/// The secret half of a bootstrap token (and a wrong one presented for the same id).
const TOKEN_SECRET: &str = "zq81neverlogged0";
const WRONG_TOKEN_SECRET: &str = "zq81neverlogged1";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn secret_values_never_reach_the_log_at_any_level() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .init();
    let server = start();
    let secrets = "/api/v1/namespaces/default/secrets";
    let good = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"}, "stringData": {"username": "admin", "password": PLAIN}});
    let (code, body) = request(
        &server,
        "POST",
        secrets,
        "application/json",
        good.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    let bad_data = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"password": NOT_BASE64}});
    let (code, body) = request(
        &server,
        "POST",
        secrets,
        "application/json",
        bad_data.to_string().as_bytes(),
    );
    assert_eq!(code, 422);
    assert!(!body.contains(NOT_BASE64), "{body}");
    let bad_meta = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad", "labels": ["x"]}, "stringData": {"password": PLAIN}});
    let (code, body) = request(
        &server,
        "POST",
        secrets,
        "application/json",
        bad_meta.to_string().as_bytes(),
    );
    assert_eq!(code, 422);
    assert!(!body.contains(PLAIN), "{body}");
    let (code, _) = request(
        &server,
        "PATCH",
        &format!("{secrets}/bmc"),
        "application/merge-patch+json",
        format!(r#"{{"data": {{"password": "{NOT_BASE64}"}}}}"#).as_bytes(),
    );
    assert_eq!(code, 422);
    let (code, _) = request(
        &server,
        "PATCH",
        &format!("{secrets}/bmc"),
        "application/json-patch+json",
        br#"[{"op":"move","from":"/data/password","path":"/data"},{"op":"remove","path":"/nope"}]"#,
    );
    assert_eq!(code, 422);
    for path in [
        format!("{secrets}/bmc"),
        secrets.to_owned(),
        format!("{secrets}?labelSelector=a%3Db"),
        format!("{secrets}?watch=true&timeoutSeconds=1"),
    ] {
        let (code, _) = request(&server, "GET", &path, "application/json", b"");
        assert_eq!(code, 200, "{path}");
    }
    let described = kubectl(&server, &["describe", "secret", "bmc"], None);
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains("password"), "{described}");
    assert!(!described.contains(PLAIN), "{described}");
    let (code, _) = request(
        &server,
        "DELETE",
        &format!("{secrets}/bmc"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200);

    // Bootstrap tokens, accepted and refused, are not logged either.
    let token_secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": "bootstrap-token-zq81ab", "namespace": "kube-system"},
        "stringData": {"token-id": "zq81ab", "token-secret": TOKEN_SECRET, "usage-bootstrap-authentication": "true"}});
    let (code, body) = request(
        &server,
        "POST",
        "/api/v1/namespaces/kube-system/secrets",
        "application/json",
        token_secret.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    for (secret, expected) in [(TOKEN_SECRET, 200), (WRONG_TOKEN_SECRET, 401)] {
        let token = format!("zq81ab.{secret}");
        let (code, body) = request_as(
            &server,
            Some(&token),
            "GET",
            "/api",
            "application/json",
            b"",
        );
        assert_eq!(code, expected, "{body}");
    }

    let log = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log captured nothing"
    );
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(PLAIN);
    for secret in [
        PLAIN,
        NOT_BASE64,
        encoded.as_str(),
        TOKEN_SECRET,
        WRONG_TOKEN_SECRET,
    ] {
        assert!(!log.contains(secret), "{secret:?} is in the log");
    }
}
