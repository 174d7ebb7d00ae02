//! Server-side apply and field ownership against the embedded API, driven by real kubectl
//! (1.33 on PATH, and 1.27/1.31 from the Cloud SDK) and at the HTTP level: `managedFields`
//! entries per manager and operation, conflicts naming fields and managers, `--force-conflicts`
//! taking ownership, removal of fields an applier stops applying, list items owned per manager,
//! and client-side writes recorded as `Update`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use support::raw::request;
use support::{Server, kubectl_at, start};

const SDK_BIN: &str = "/usr/lib/google-cloud-sdk/bin";

fn run(bin: &Path, server: &Server, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let out = kubectl_at(bin, server, args, stdin);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(bin: &Path, server: &Server, args: &[&str], stdin: Option<&str>) -> String {
    let (success, stdout, stderr) = run(bin, server, args, stdin);
    assert!(success, "kubectl {args:?} failed: {stderr}\n{stdout}");
    stdout
}

fn get_json(bin: &Path, server: &Server, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&ok(bin, server, &all, None)).unwrap()
}

/// The `fieldsV1` of `manager`'s entry with `operation`, or null.
fn owned(object: &Value, manager: &str, operation: &str) -> Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .map_or(Value::Null, |e| e["fieldsV1"].clone())
}

fn config_map(data: &[(&str, &str)], labels: &[(&str, &str)]) -> String {
    let map = |pairs: &[(&str, &str)]| -> Value {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
    });
    if !labels.is_empty() {
        object["metadata"]["labels"] = map(labels);
    }
    if !data.is_empty() {
        object["data"] = map(data);
    }
    object.to_string()
}

/// The whole ownership story with one kubectl binary.
fn ownership_story(bin: &Path) {
    let server = start();
    let cm = |args: &[&str], manifest: String| {
        let mut all = vec!["apply", "--server-side", "-f", "-"];
        all.extend_from_slice(args);
        run(bin, &server, &all, Some(&manifest))
    };

    // Created by apply: one Apply entry owning exactly what was applied.
    let (success, _, stderr) = cm(&[], config_map(&[("a", "1"), ("b", "2")], &[("team", "x")]));
    assert!(success, "{stderr}");
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(
        owned(&object, "kubectl", "Apply"),
        json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}),
        "{object}"
    );
    assert!(
        object["metadata"].get("annotations").is_none(),
        "nothing but what was applied: {object}"
    );
    let entry = &object["metadata"]["managedFields"][0];
    assert_eq!(entry["apiVersion"], "v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(
        entry["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{entry}"
    );

    // Another manager changing an owned field: a conflict naming the field and the manager.
    let (success, _, stderr) = cm(
        &["--field-manager=tuner"],
        config_map(&[("a", "changed")], &[]),
    );
    assert!(!success, "a conflicting apply succeeded");
    assert!(
        stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.a"),
        "{stderr}"
    );
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(
        object["data"]["a"], "1",
        "a refused apply changed the object"
    );

    // Forced, it takes the field.
    let (success, _, stderr) = cm(
        &["--field-manager=tuner", "--force-conflicts"],
        config_map(&[("a", "changed")], &[]),
    );
    assert!(success, "{stderr}");
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(object["data"]["a"], "changed");
    assert_eq!(
        owned(&object, "tuner", "Apply"),
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        owned(&object, "kubectl", "Apply"),
        json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}})
    );

    // A client-side write is an Update entry, and appliers then conflict with it.
    ok(
        bin,
        &server,
        &["label", "configmap", "settings", "extra=1"],
        None,
    );
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(
        owned(&object, "kubectl-label", "Update"),
        json!({"f:metadata": {"f:labels": {"f:extra": {}}}}),
        "{object}"
    );
    let (success, _, stderr) = cm(
        &[],
        config_map(&[("b", "2")], &[("team", "x"), ("extra", "2")]),
    );
    assert!(!success);
    assert!(
        stderr.contains("conflict with \"kubectl-label\" using v1: .metadata.labels.extra"),
        "{stderr}"
    );

    // What the applier stops applying goes, unless someone else owns it.
    let (success, _, stderr) = cm(&[], config_map(&[("c", "3")], &[]));
    assert!(success, "{stderr}");
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(
        object["data"],
        json!({"a": "changed", "c": "3"}),
        "b should be removed, a kept (tuner owns it): {object}"
    );
    assert_eq!(
        object["metadata"]["labels"],
        json!({"extra": "1"}),
        "team should be removed, extra kept (kubectl-label owns it)"
    );
    assert_eq!(
        owned(&object, "kubectl", "Apply"),
        json!({"f:data": {"f:c": {}}})
    );

    // Re-applying the same configuration changes nothing.
    let rv = object["metadata"]["resourceVersion"].clone();
    let (success, _, stderr) = cm(&[], config_map(&[("c", "3")], &[]));
    assert!(success, "{stderr}");
    let again = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(again["metadata"]["resourceVersion"], rv);
}

#[test]
fn server_side_apply_with_kubectl_on_path() {
    ownership_story(Path::new("kubectl"));
}

#[test]
fn server_side_apply_with_kubectl_1_27_and_1_31() {
    for version in ["1.27", "1.31"] {
        let bin = Path::new(SDK_BIN).join(format!("kubectl.{version}"));
        assert!(bin.exists(), "{} is missing", bin.display());
        ownership_story(&bin);
    }
}

#[test]
fn client_side_apply_is_recorded_and_moves_to_server_side() {
    let bin = Path::new("kubectl");
    let server = start();
    ok(
        bin,
        &server,
        &["apply", "-f", "-"],
        Some(&config_map(&[("a", "1")], &[])),
    );
    ok(
        bin,
        &server,
        &["apply", "-f", "-"],
        Some(&config_map(&[("a", "2")], &[])),
    );
    let object = get_json(bin, &server, &["configmap", "settings"]);
    let fields = owned(&object, "kubectl-client-side-apply", "Update");
    assert_eq!(fields["f:data"], json!({".": {}, "f:a": {}}), "{object}");
    // kubectl's own server-side apply takes over what client-side apply set.
    ok(
        bin,
        &server,
        &["apply", "--server-side", "-f", "-"],
        Some(&config_map(&[("a", "3")], &[])),
    );
    let object = get_json(bin, &server, &["configmap", "settings"]);
    assert_eq!(object["data"]["a"], "3");
    assert_eq!(
        owned(&object, "kubectl", "Apply"),
        json!({"f:data": {"f:a": {}}})
    );
    let last =
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap();
    assert!(last.contains("\"3\""), "{last}");
    // Another manager is still told about the conflict.
    let (success, _, stderr) = run(
        bin,
        &server,
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        Some(&config_map(&[("a", "4")], &[])),
    );
    assert!(!success);
    assert!(
        stderr.contains("conflict with \"kubectl\": .data.a"),
        "{stderr}"
    );
}

fn deployment(manager_containers: &[&str]) -> String {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": manager_containers.iter().map(|n| json!({"name": n, "image": format!("{n}:1")})).collect::<Vec<_>>()},
            },
        },
    })
    .to_string()
}

#[test]
fn list_items_are_owned_per_manager() {
    let bin = Path::new("kubectl");
    let server = start();
    let apply = |manager: &str, manifest: String| {
        ok(
            bin,
            &server,
            &[
                "apply",
                "--server-side",
                "--field-manager",
                manager,
                "-f",
                "-",
            ],
            Some(&manifest),
        )
    };
    apply("app-team", deployment(&["app"]));
    // A second manager adds its own container to the same list: both stay.
    let sidecar = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "proxy:1"}]}}},
    });
    apply("mesh", sidecar.to_string());
    let names = |object: &Value| -> Vec<String> {
        object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let object = get_json(bin, &server, &["deployment", "web"]);
    assert_eq!(names(&object), ["app", "proxy"]);
    assert_eq!(
        owned(&object, "mesh", "Apply")["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
    // The first manager's apply leaves the other's container alone.
    apply("app-team", deployment(&["app"]));
    assert_eq!(
        names(&get_json(bin, &server, &["deployment", "web"])),
        ["app", "proxy"]
    );
    // The second manager dropping its container removes it.
    let without = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
    });
    apply("mesh", without.to_string());
    let object = get_json(bin, &server, &["deployment", "web"]);
    assert_eq!(names(&object), ["app"]);
    assert_eq!(owned(&object, "mesh", "Apply"), Value::Null);
    // Defaults stay (nobody applied them), replicas included.
    assert_eq!(object["spec"]["replicas"], 1);
}

#[test]
fn capstan_kinds_track_ownership_and_removals() {
    let bin = Path::new("kubectl");
    let server = start();
    let host = |extra: Value| {
        let mut spec = json!({"online": true, "bmc": {"address": "redfish://127.0.0.1/redfish/v1/Systems/1", "credentialsName": "bmc"}});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": {"name": "node-0", "namespace": "default"}, "spec": spec}).to_string()
    };
    ok(
        bin,
        &server,
        &["apply", "--server-side", "-f", "-"],
        Some(&host(json!({"description": "rack 1"}))),
    );
    ok(
        bin,
        &server,
        &["apply", "--server-side", "-f", "-"],
        Some(&host(json!({}))),
    );
    let object = get_json(bin, &server, &["baremetalhost", "node-0"]);
    assert!(object["spec"].get("description").is_none(), "{object}");
    assert_eq!(object["spec"]["online"], true);
    let fields = owned(&object, "kubectl", "Apply");
    assert!(fields["f:spec"].get("f:online").is_some(), "{fields}");
    assert!(fields["f:spec"].get("f:description").is_none(), "{fields}");
}

#[test]
fn apply_requests_are_checked_as_kube_apiserver_does() {
    let server = start();
    let path = "/api/v1/namespaces/default/configmaps/plain";
    let body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain"},"data":{"a":"1"}}"#;
    let apply = "application/apply-patch+yaml";

    let (code, text) = request(&server, "PATCH", path, apply, body);
    assert_eq!(code, 422, "{text}");
    assert!(text.contains("fieldManager: Required value"), "{text}");

    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=m1"),
        apply,
        body,
    );
    assert_eq!(code, 201, "{text}");
    let created: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "m1");
    assert_eq!(
        created["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );

    let with_managed = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain","managedFields":[]},"data":{"a":"2"}}"#;
    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=m2"),
        apply,
        with_managed,
    );
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("metadata.managedFields must be nil"),
        "{text}"
    );

    let wrong_version = br#"{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"plain"}}"#;
    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=m2"),
        apply,
        wrong_version,
    );
    assert_eq!(code, 400, "{text}");

    let change =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain"},"data":{"a":"2"}}"#;
    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=m2"),
        apply,
        change,
    );
    assert_eq!(code, 409, "{text}");
    let status: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"m1\": .data.a"
    );
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"m1\"", "field": ".data.a"})
    );

    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=m2&force=true"),
        apply,
        change,
    );
    assert_eq!(code, 200, "{text}");

    // `force` is for apply only; a merge patch is an Update by its manager.
    let merge = "application/merge-patch+json";
    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?force=true"),
        merge,
        br#"{"data":{"b":"1"}}"#,
    );
    assert_eq!(code, 422, "{text}");
    let (code, text) = request(
        &server,
        "PATCH",
        &format!("{path}?fieldManager=patcher"),
        merge,
        br#"{"data":{"b":"1"}}"#,
    );
    assert_eq!(code, 200, "{text}");
    let object: Value = serde_json::from_str(&text).unwrap();
    let patcher = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "patcher")
        .cloned()
        .unwrap();
    assert_eq!(patcher["operation"], "Update");
    assert_eq!(patcher["fieldsV1"], json!({"f:data": {"f:b": {}}}));

    // An update that sends an empty managedFields list clears them.
    let mut cleared = object.clone();
    cleared["metadata"]["managedFields"] = json!([]);
    let (code, text) = request(
        &server,
        "PUT",
        path,
        "application/json",
        cleared.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{text}");
    let object: Value = serde_json::from_str(&text).unwrap();
    assert!(
        object["metadata"].get("managedFields").is_none(),
        "{object}"
    );
}

/// A Service's `selector` is an atomic map in Kubernetes' types: kubectl's server-side apply owns
/// it as one field, a smaller selector replaces it, and another manager's change to any of its
/// keys conflicts on `.spec.selector` itself.
#[test]
fn atomic_fields_are_owned_and_replaced_as_a_whole_with_kubectl() {
    let bin = Path::new("kubectl");
    let server = start();
    let service = |selector: Value| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": selector, "ports": [{"port": 80}]},
        })
        .to_string()
    };
    let apply = |manager: &str, manifest: String, force: bool| {
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-f",
            "-",
        ];
        if force {
            args.push("--force-conflicts");
        }
        run(bin, &server, &args, Some(&manifest))
    };
    let (applied, _, stderr) = apply(
        "app-team",
        service(json!({"app": "web", "tier": "front"})),
        false,
    );
    assert!(applied, "{stderr}");
    let object = get_json(bin, &server, &["service", "web"]);
    assert_eq!(
        owned(&object, "app-team", "Apply")["f:spec"]["f:selector"],
        json!({})
    );
    // A smaller selector replaces the whole map.
    let (applied, _, stderr) = apply("app-team", service(json!({"app": "web"})), false);
    assert!(applied, "{stderr}");
    let object = get_json(bin, &server, &["service", "web"]);
    assert_eq!(object["spec"]["selector"], json!({"app": "web"}));
    // Adding a key is a change to the selector another manager owns.
    let (applied, _, stderr) = apply("mesh", service(json!({"app": "web", "mesh": "on"})), false);
    assert!(!applied);
    assert!(
        stderr.contains("conflict with \"app-team\": .spec.selector"),
        "{stderr}"
    );
    let (applied, _, stderr) = apply("mesh", service(json!({"app": "web", "mesh": "on"})), true);
    assert!(applied, "{stderr}");
    let object = get_json(bin, &server, &["service", "web"]);
    assert_eq!(
        object["spec"]["selector"],
        json!({"app": "web", "mesh": "on"})
    );
    assert_eq!(
        owned(&object, "mesh", "Apply")["f:spec"]["f:selector"],
        json!({})
    );
    assert!(
        owned(&object, "app-team", "Apply")["f:spec"]
            .get("f:selector")
            .is_none(),
        "{object}"
    );
}
