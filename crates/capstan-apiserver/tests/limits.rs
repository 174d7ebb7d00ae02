//! Limits enforced before anything is committed, on every write path: nesting depth (YAML bodies,
//! server-side apply, JSON and merge patch results), request size, metadata types, Secret data.
//! A refused write leaves the kind fully usable: lists, gets and watches keep answering.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::raw::{nested, nested_yaml, request};
use support::start;

const CM: &str = "/api/v1/namespaces/default/configmaps";
const CL: &str = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters";

fn assert_kind_usable(server: &support::Server) {
    let (code, body) = request(server, "GET", CM, "application/json", b"");
    assert_eq!(code, 200, "list after a refused write: {body}");
    let (code, body) = request(
        server,
        "GET",
        &format!("{CM}?labelSelector=app%3Dx"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "selector list after a refused write: {body}");
    let (code, body) = request(
        server,
        "GET",
        &format!("{CM}?watch=true&timeoutSeconds=1"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "watch after a refused write: {body}");
    assert!(!body.contains("ERROR"), "{body}");
}

#[test]
fn objects_nested_deeper_than_the_limit_are_refused_on_every_write_path() {
    let server = start();
    // YAML body on create: the YAML parser accepts 150 levels; the store could not read them back.
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\nextra: {}\n",
        nested_yaml(150)
    );
    let (code, body) = request(&server, "POST", CM, "application/yaml", yaml.as_bytes());
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("the limit is 100"), "{body}");
    assert_kind_usable(&server);
    let (code, _) = request(
        &server,
        "GET",
        &format!("{CM}/deep"),
        "application/json",
        b"",
    );
    assert_eq!(code, 404);

    // Server-side apply creates what does not exist: the same limit.
    let (code, body) = request(
        &server,
        "PATCH",
        &format!("{CM}/deep?fieldManager=t"),
        "application/apply-patch+yaml",
        yaml.as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert_kind_usable(&server);

    // A JSON patch and a merge patch that grow an object past the limit.
    // A field whose schema keeps any content (the value of a Cluster's topology variable), so the
    // patches can grow it.
    let base = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "grows"},
        "spec": {"topology": {"classRef": {"name": "c"}, "version": "v1.33.0",
                              "variables": [{"name": "v", "value": nested(86)}]}}});
    let (code, body) = request(
        &server,
        "POST",
        CL,
        "application/json",
        base.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    let deep_path = format!("/spec/topology/variables/0/value{}", "/a".repeat(85));
    let patch = serde_json::json!([{"op": "add", "path": format!("{deep_path}/more"), "value": nested(30)}]);
    let (code, body) = request(
        &server,
        "PATCH",
        &format!("{CL}/grows"),
        "application/json-patch+json",
        patch.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("the limit is 100"), "{body}");
    let merge = serde_json::json!({"other": nested(101)});
    let (code, body) = request(
        &server,
        "PATCH",
        &format!("{CL}/grows"),
        "application/merge-patch+json",
        merge.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert_kind_usable(&server);
    let (code, body) = request(
        &server,
        "GET",
        &format!("{CL}/grows"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = request(
        &server,
        "DELETE",
        &format!("{CL}/grows"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
}

#[test]
fn bodies_over_three_mebibytes_get_a_413_status() {
    let server = start();
    let big = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(3 * 1024 * 1024)}});
    let (code, body) = request(
        &server,
        "POST",
        CM,
        "application/json",
        big.to_string().as_bytes(),
    );
    assert_eq!(code, 413, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert!(
        status["message"].as_str().unwrap().contains("3145728"),
        "{body}"
    );
}

#[test]
fn metadata_and_secret_data_capstan_cannot_decode_are_refused() {
    let server = start();
    let listed = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": ["a", "b"]}, "data": {}});
    let (code, body) = request(
        &server,
        "POST",
        "/api/v1/namespaces/default/secrets",
        "application/json",
        listed.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("metadata.labels"), "{body}");
    let bad = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"}, "data": {"password": "pl@intext-s3cret"}});
    let (code, body) = request(
        &server,
        "POST",
        "/api/v1/namespaces/default/secrets",
        "application/json",
        bad.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("password"), "{body}");
    assert!(!body.contains("pl@intext-s3cret"), "{body}");
    // An update to a valid Secret cannot slip the same value in either.
    let good = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmc"}, "stringData": {"password": "pl@intext-s3cret"}});
    let (code, body) = request(
        &server,
        "POST",
        "/api/v1/namespaces/default/secrets",
        "application/json",
        good.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = request(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/secrets/bmc",
        "application/merge-patch+json",
        br#"{"data": {"password": "not base64!"}, "metadata": {"finalizers": "x"}}"#,
    );
    assert_eq!(code, 422, "{body}");
    // Either fault may be named first (the schema check or the metadata check); the value never.
    assert!(
        body.contains("metadata.finalizers") || body.contains("data.password"),
        "{body}"
    );
    assert!(!body.contains("not base64!"), "{body}");
}

#[test]
fn a_json_patch_whose_undo_would_fail_is_answered_422_and_the_server_keeps_serving() {
    let server = start();
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"k": "v"}});
    let (code, body) = request(
        &server,
        "POST",
        CM,
        "application/json",
        cm.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    // `move` onto its own parent, then a `remove` that fails: json-patch's undo panicked here.
    let patch =
        br#"[{"op":"move","from":"/data/k","path":"/data"},{"op":"remove","path":"/nope"}]"#;
    let (code, body) = request(
        &server,
        "PATCH",
        &format!("{CM}/p"),
        "application/json-patch+json",
        patch,
    );
    assert_eq!(code, 422, "{body}");
    let (code, body) = request(&server, "GET", &format!("{CM}/p"), "application/json", b"");
    assert_eq!(code, 200, "{body}");
    let stored: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        stored["data"]["k"], "v",
        "nothing of the failed patch was written"
    );
}

/// The same patch against the `scale` subresource, which patches a view of the object: it went
/// through the library's undoing `patch` and took the connection down with a panic.
#[test]
fn a_json_patch_of_a_scale_subresource_whose_undo_would_fail_is_an_error_not_a_panic() {
    let server = start();
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    });
    let (code, body) = request(
        &server,
        "POST",
        deployments,
        "application/json",
        deployment.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    let patch =
        br#"[{"op":"move","from":"/spec/replicas","path":"/spec"},{"op":"remove","path":"/nope"}]"#;
    let (code, body) = request(
        &server,
        "PATCH",
        &format!("{deployments}/d/scale"),
        "application/json-patch+json",
        patch,
    );
    assert!(code == 400 || code == 422, "{code} {body}");
    let (code, body) = request(
        &server,
        "GET",
        &format!("{deployments}/d"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let stored: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        stored["spec"]["replicas"], 1,
        "nothing of the failed patch was written"
    );
}

/// A CustomResourceDefinition row nobody can parse (committed by an older capstan) kept the server
/// from starting. Now it starts, serves, lists the row as undecodable, and removes it on request.
#[test]
fn the_server_starts_over_an_undecodable_row_and_removes_it_on_request() {
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        drop(capstan_store::Store::open(&path, Default::default()).unwrap());
        let deep = format!(
            "{{\"metadata\":{{\"name\":\"things.x.io\"}},\"spec\":{}1{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO objects (resource, namespace, name, rv, value) VALUES ('apiextensions.k8s.io/customresourcedefinitions', '', 'things.x.io', 1, ?1)",
            [deep],
        )
        .unwrap();
        drop(conn);
        let store = capstan_store::Store::open(&path, Default::default()).unwrap();
        let server = capstan_apiserver::ApiServer::new(
            store,
            std::sync::Arc::new(capstan_apiserver::conversion::ModelConverter),
            capstan_apiserver::Auth {
                tokens: vec!["t".into()],
            },
        )
        .await
        .expect("the server starts over an undecodable row");
        let call = |method: &str, uri: &str| {
            axum::http::Request::builder()
                .method(method)
                .uri(uri)
                .header("Authorization", "Bearer t")
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let text = |response: axum::response::Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        let router = server.router();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let listed = router.clone().oneshot(call("GET", crds)).await.unwrap();
        assert_eq!(listed.status(), 200);
        let body = text(listed).await;
        assert!(!body.contains("things.x.io"), "{body}");
        let found = router
            .clone()
            .oneshot(call("GET", "/capstan/v1/undecodable"))
            .await
            .unwrap();
        let body = text(found).await;
        assert!(body.contains("things.x.io") && !body.contains("[[["), "{body}");
        let removed = router
            .clone()
            .oneshot(call(
                "DELETE",
                "/capstan/v1/undecodable?resource=apiextensions.k8s.io%2Fcustomresourcedefinitions&name=things.x.io",
            ))
            .await
            .unwrap();
        assert_eq!(removed.status(), 200, "{}", text(removed).await);
        let found = router
            .oneshot(call("GET", "/capstan/v1/undecodable"))
            .await
            .unwrap();
        assert!(!text(found).await.contains("things.x.io"));
    });
}

/// A YAML alias bomb (a few hundred bytes expanding to millions of nodes) is refused once the
/// expansion passes the bound for request bodies, well before it costs hundreds of MiB.
#[test]
fn a_yaml_alias_bomb_is_refused() {
    let server = start();
    let mut yaml = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\nextra:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for level in 1..7 {
        let prev = format!("*l{}", level - 1);
        yaml.push_str(&format!(
            "  l{level}: &l{level} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    let (code, body) = request(&server, "POST", CM, "application/yaml", yaml.as_bytes());
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("250000"),
        "the answer names the limit: {body}"
    );
    assert_kind_usable(&server);
}
