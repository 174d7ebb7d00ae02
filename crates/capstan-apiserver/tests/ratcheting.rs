//! Validation ratcheting, as kube-apiserver does it: after a CustomResourceDefinition tightens its
//! schema, objects stored before stay writable (labels, other fields) while a value that breaks the
//! new rule is unchanged, and a changed value is held to the rule. The same keeps objects stored by
//! an earlier capstan writable when capstan's own kinds check more than they did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{kubectl, ok, start};

fn widgets(size: Value) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": size,
                        "count": {"type": "integer"},
                    }},
                }}},
            }],
        },
    })
    .to_string()
}

#[test]
fn values_stored_before_a_schema_tightened_ratchet_until_changed() {
    let server = start();
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&widgets(json!({"type": "string"}))),
    ));
    let widget = r#"{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": "huge", "count": 1}}"#;
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(widget)));
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&widgets(
            json!({"type": "string", "enum": ["small", "large"]}),
        )),
    ));
    // Unchanged, the old value stays: labels and other fields can still be written.
    ok(&kubectl(&server, &["label", "widget", "w1", "a=b"], None));
    ok(&kubectl(
        &server,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"count":2}}"#,
        ],
        None,
    ));
    // Changed, it is held to the new rule.
    let refused = kubectl(
        &server,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":"tiny"}}"#,
        ],
        None,
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("spec.size") && stderr.contains("\"tiny\""),
        "{stderr}"
    );
    ok(&kubectl(
        &server,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":"small"}}"#,
        ],
        None,
    ));
    let stored = ok(&kubectl(
        &server,
        &[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.size} {.spec.count} {.metadata.labels.a}",
        ],
        None,
    ));
    assert_eq!(stored.trim(), "small 2 b");
    // A new object gets no such grace.
    let new = kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&widget.replace("w1", "w2")),
    );
    assert!(!new.status.success());
}
