//! A second real client: the official Python `kubernetes` client (installed by
//! `scripts/install-deps.sh`, pinned) runs `tests/python/client.py` against the API server over
//! TLS — CRUD, list and watch, every patch type, a BareMetalHost through the custom objects API,
//! whoami, a ServiceAccount token with `view`, and the 401 / 403 answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

#[test]
fn the_python_kubernetes_client_drives_the_api() {
    let server = support::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&server.kubeconfig)
        .arg(&server.ca)
        .env("HOME", server.dir.path())
        .output()
        .expect("python3 runs (scripts/install-deps.sh installs the kubernetes client)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for step in [
        "create, read, replace, conflict",
        "secret stringData folded into data",
        "json, merge, strategic merge and apply patches",
        "list with a label selector and watch",
        "BareMetalHost create, get, list, patch, delete",
        "whoami, ServiceAccount token, 403 and 401",
        "done",
    ] {
        assert!(
            stdout.contains(&format!("ok: {step}")),
            "{step}: {stdout}\n{stderr}"
        );
    }
}
