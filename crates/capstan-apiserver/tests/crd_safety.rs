//! CustomResourceDefinitions that would break what the server serves are refused with a reason,
//! as kubectl shows it: a group that is not a domain, Kubernetes' protected groups without the
//! approval annotation, a redefinition of one of Kubernetes' own resources, and a definition of one
//! of capstan's kinds that does not fit the objects already stored. Writes keep working after.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{kubectl, ok, start};

fn crd(group: &str, kind: &str, plural: &str, versions: Value, annotations: Value) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "annotations": annotations},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": versions,
        },
    })
    .to_string()
}

fn version(name: &str, spec: Value) -> Value {
    json!({
        "name": name, "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": spec, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }}},
        "subresources": {"status": {}},
    })
}

fn refused(server: &support::Server, manifest: &str, reason: &str) {
    let out = kubectl(server, &["apply", "-f", "-"], Some(manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {manifest}");
    assert!(stderr.contains(reason), "{stderr}");
}

const HOST: &str = r#"{"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
  "metadata": {"name": "node-0", "namespace": "default"},
  "spec": {"online": true, "bmc": {"address": "redfish://127.0.0.1/redfish/v1/Systems/1", "credentialsName": "bmc"}}}"#;

#[test]
fn definitions_that_would_break_served_kinds_are_refused() {
    let server = start();
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});

    refused(
        &server,
        &crd(
            "apps",
            "Deployment",
            "deployments",
            json!([version("v1", open.clone())]),
            json!({}),
        ),
        "should be a domain with at least one dot",
    );
    refused(
        &server,
        &crd(
            "rbac.authorization.k8s.io",
            "Role",
            "roles",
            json!([version("v1", open.clone())]),
            json!({}),
        ),
        "protected groups must have approval annotation",
    );
    refused(
        &server,
        &crd(
            "rbac.authorization.k8s.io",
            "Role",
            "roles",
            json!([version("v1", open.clone())]),
            json!({"api-approved.kubernetes.io": "unapproved"}),
        ),
        "roles.rbac.authorization.k8s.io is one of Kubernetes' own resources",
    );
    // Roles are still Kubernetes' typed Roles.
    ok(&kubectl(
        &server,
        &["create", "role", "r", "--verb=get", "--resource=pods"],
        None,
    ));

    // A BareMetalHost is stored; definitions that do not fit it are refused.
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOST)));
    let mistyped = json!({"type": "object", "properties": {"online": {"type": "string"}, "bmc": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    refused(
        &server,
        &crd(
            "metal3.io",
            "BareMetalHost",
            "baremetalhosts",
            json!([version("v1alpha1", mistyped)]),
            json!({}),
        ),
        "default/node-0 would be invalid: spec.online",
    );
    refused(
        &server,
        &crd(
            "metal3.io",
            "BareMetalHost",
            "baremetalhosts",
            json!([version("v1beta1", open.clone())]),
            json!({}),
        ),
        "default/node-0 is stored in version \"v1alpha1\", which the definition does not have",
    );
    // Writes of the kind still work.
    ok(&kubectl(
        &server,
        &["label", "bmh", "node-0", "checked=yes"],
        None,
    ));

    // A definition that fits is accepted and serves the kind; writes keep working. (The stored
    // host has upstream's default `automatedCleaningMode`, so a fitting definition has it too.)
    let fitting = json!({"type": "object", "properties": {
        "online": {"type": "boolean"},
        "automatedCleaningMode": {"type": "string"},
        "bmc": {"type": "object", "properties": {"address": {"type": "string"}, "credentialsName": {"type": "string"}}},
    }});
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&crd(
            "metal3.io",
            "BareMetalHost",
            "baremetalhosts",
            json!([version("v1alpha1", fitting)]),
            json!({}),
        )),
    ));
    ok(&kubectl(
        &server,
        &["label", "bmh", "node-0", "checked=again", "--overwrite"],
        None,
    ));
    let out = kubectl(
        &server,
        &[
            "patch",
            "bmh",
            "node-0",
            "--type=merge",
            "-p",
            r#"{"spec":{"online":"yes"}}"#,
        ],
        None,
    );
    assert!(!out.status.success(), "the new schema is enforced");
}

/// A schema that constrains the root `metadata` beyond `name` and `generateName` is refused with
/// kube-apiserver's own message (found by applying `capstan crds` to a real kube-apiserver 1.35);
/// constraints on `name` alone are accepted, as there.
#[test]
fn schemas_that_constrain_object_meta_are_refused_as_kube_apiserver_refuses_them() {
    let server = start();
    let with_metadata = |metadata: Value| {
        json!([{
            "name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "metadata": metadata,
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }}},
        }])
    };
    refused(
        &server,
        &crd(
            "example.com",
            "Widget",
            "widgets",
            with_metadata(json!({"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }})),
            json!({}),
        ),
        "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
    );
    let accepted = crd(
        "example.com",
        "Gadget",
        "gadgets",
        with_metadata(json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 40}
        }})),
        json!({}),
    );
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(&accepted)));
}
