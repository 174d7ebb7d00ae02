//! A host's `network_data.json` as `capstan lint` reads it from the networkData Secret of a
//! BareMetalHost: parsed, then every network rule run over it (links, bonds, VLANs, routes,
//! gateways, MACs against inspection data, addresses across hosts).
#![no_main]

use capstan_lint::{LintOptions, lint};
use capstan_manifest::load_str;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(network_data) = std::str::from_utf8(data) else {
        return;
    };
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "node-0-network", "namespace": "default"},
        "stringData": {"networkData": network_data}
    });
    let host = serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "node-0", "namespace": "default"},
        "spec": {"online": true, "bootMACAddress": "52:54:00:00:00:01",
                 "bmc": {"address": "fake://node-0", "credentialsName": "node-0-bmc"},
                 "networkData": {"name": "node-0-network", "namespace": "default"}},
        "status": {"hardware": {"nics": [{"name": "eth0", "mac": "52:54:00:00:00:01"}]}}
    });
    // JSON is YAML: one stream of two documents.
    let text = format!("{secret}\n---\n{host}\n");
    let Ok(objects) = load_str("fuzz.yaml", &text) else {
        return;
    };
    let _ = lint(objects, &LintOptions::default());
});
