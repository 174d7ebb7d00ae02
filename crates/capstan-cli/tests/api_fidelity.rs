//! A differential API fidelity battery: the same requests, in the same order, sent to a real
//! kube-apiserver v1.35.4 on etcd v3.6.6 (`capstan_testkit::kube`, binaries from
//! `scripts/peers.sh`) and to a real `capstan serve` process, and the two answers compared field
//! by field — status code, content type, `Warning` headers and body — after normalising what any
//! two servers legitimately differ in (uids, timestamps, resourceVersions, continue tokens,
//! generated names, managedFields times, Table ages, server addresses; see `harness.rs`).
//!
//! Areas: CRUD and error Status bodies on ConfigMaps, Secrets and a neutral `example.com` CRD
//! applied to both servers from the same JSON; every patch type and server-side apply with a
//! field-manager conflict and with force; label and field selectors, paging and Table output;
//! discovery of what both serve; deletion held by finalizers; status subresource writes.
//!
//! Every difference that remains is listed, with its reason, in
//! `tests/api_fidelity/known_differences.txt`: the test fails on a difference not listed there
//! and on a listed one that no longer occurs, so the list is always the measured state
//! (`CAPSTAN_UPDATE_KNOWN_DIFFERENCES=1` rewrites it, keeping the reasons). Nothing is simulated:
//! no controller manager runs beside kube-apiserver, so nothing here depends on controllers
//! (no garbage collection, no namespace deletion, no Service IPs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The harness sits beside its list of known differences.
#[path = "api_fidelity/harness.rs"]
mod harness;
mod support;

use capstan_testkit::kube::KubeApiserver;
use harness::{Battery, Request};
use http::Method;
use serde_json::{Value, json};
use support::Serve;

const NS: &str = "/api/v1/namespaces/fidelity";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/fidelity/widgets";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn get(path: impl Into<String>) -> Request {
    Request::new(Method::GET, path)
}

fn post(path: impl Into<String>, body: Value) -> Request {
    Request::new(Method::POST, path).body(JSON, body)
}

fn put(path: impl Into<String>, body: Value) -> Request {
    Request::new(Method::PUT, path).body(JSON, body)
}

fn patch(path: impl Into<String>, content_type: &str, body: Value) -> Request {
    Request::new(Method::PATCH, path).body(content_type, body)
}

fn delete(path: impl Into<String>) -> Request {
    Request::new(Method::DELETE, path)
}

fn configmap(name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "fidelity", "labels": labels},
        "data": data,
    })
}

fn widget(name: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "fidelity", "labels": labels},
        "spec": spec,
    })
}

/// The neutral CRD both servers get: a namespaced kind with a status subresource, printer
/// columns (one at priority 1, one a date) and value rules to break.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
                "shortNames": ["wd"],
                "categories": ["fidelity"],
            },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                "color": {"type": "string", "enum": ["red", "blue"]},
                                "tags": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "phase": {"type": "string"},
                                "observed": {"type": "integer"},
                            },
                        },
                    },
                }},
            }],
        },
    })
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "fidelity"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    })
}

/// Discovery views: only what both servers serve is compared, sorted by name so that an entry
/// is compared with the same entry of the other server (the order of resources in a group
/// version carries no meaning; the order of groups, kubectl's preference, is compared in
/// `apis-order`).
fn keep_resources(names: &'static [&'static str]) -> impl Fn(&mut Value) {
    move |body| {
        if let Some(resources) = body["resources"].as_array_mut() {
            resources.retain(|r| names.contains(&r["name"].as_str().unwrap_or_default()));
            resources.sort_by_key(|r| r["name"].as_str().unwrap_or_default().to_owned());
        }
    }
}

/// A refusal's causes in field order, for refusals whose cause order carries no meaning.
fn sort_causes_by_field(body: &mut Value) {
    if let Some(causes) = body["details"]["causes"].as_array_mut() {
        causes.sort_by_key(|c| c["field"].as_str().unwrap_or_default().to_owned());
    }
}

const GROUPS: &[&str] = &[
    "apps",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "rbac.authorization.k8s.io",
    "example.com",
];

fn keep_groups(body: &mut Value) {
    if let Some(groups) = body["groups"].as_array_mut() {
        groups.retain(|g| GROUPS.contains(&g["name"].as_str().unwrap_or_default()));
        groups.sort_by_key(|g| g["name"].as_str().unwrap_or_default().to_owned());
    }
    if let Some(items) = body["items"].as_array_mut() {
        items.retain(|g| GROUPS.contains(&g["metadata"]["name"].as_str().unwrap_or_default()));
        // As the legacy list: by name (the order of groups is compared in `apis-order`).
        items.sort_by_key(|g| {
            g["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        });
        // Aggregated discovery: within the groups kept, the resources both serve.
        for group in items.iter_mut() {
            for version in group["versions"].as_array_mut().into_iter().flatten() {
                if let Some(resources) = version["resources"].as_array_mut() {
                    resources.retain(|r| {
                        [
                            "deployments",
                            "customresourcedefinitions",
                            "leases",
                            "roles",
                            "widgets",
                        ]
                        .contains(&r["resource"].as_str().unwrap_or_default())
                    });
                }
            }
        }
    }
}

fn crud(b: &mut Battery) {
    b.area("crud");
    b.send(
        "namespace-create",
        post(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fidelity"}}),
        ),
    );

    // ConfigMap.
    let cm = format!("{NS}/configmaps");
    let created = b.send(
        "configmap-create",
        post(
            &cm,
            configmap("cm1", json!({"app": "a"}), json!({"k": "v"})),
        ),
    );
    b.capture("cm1-rv", &created, "/metadata/resourceVersion");
    b.send("configmap-get", get(format!("{cm}/cm1")));
    b.send(
        "configmap-create-no-user-agent",
        post(
            &cm,
            configmap("anonymous-agent", json!({}), json!({"k": "v"})),
        )
        .without_user_agent(),
    );
    b.send(
        "configmap-create-exists",
        post(&cm, configmap("cm1", json!({}), json!({}))),
    );
    b.send("configmap-get-missing", get(format!("{cm}/missing")));
    let mut update = configmap("cm1", json!({"app": "a"}), json!({"k": "v2"}));
    update["metadata"]["resourceVersion"] = json!("{{cm1-rv}}");
    b.send("configmap-update", put(format!("{cm}/cm1"), update.clone()));
    update["data"]["k"] = json!("v3");
    b.send("configmap-update-stale", put(format!("{cm}/cm1"), update));
    b.send(
        "configmap-update-name-mismatch",
        put(
            format!("{cm}/cm1"),
            configmap("other", json!({}), json!({})),
        ),
    );
    b.send(
        "configmap-create-invalid-name",
        post(&cm, configmap("Bad_Name", json!({}), json!({}))),
    );
    b.send(
        "configmap-create-invalid-key",
        post(
            &cm,
            configmap(
                "badkey",
                json!({"bad label!": "x"}),
                json!({"bad key!": "x"}),
            ),
        ),
    );
    let mut unknown = configmap("unknown", json!({}), json!({}));
    unknown["spec"] = json!({"x": 1});
    b.send("configmap-create-unknown-field", post(&cm, unknown.clone()));
    b.send(
        "configmap-create-unknown-field-strict",
        post(format!("{cm}?fieldValidation=Strict"), unknown),
    );
    b.send(
        "configmap-create-dry-run",
        post(
            format!("{cm}?dryRun=All"),
            configmap("dry", json!({}), json!({"k": "v"})),
        ),
    );
    b.send("configmap-get-dry-run", get(format!("{cm}/dry")));
    let generated = b.send(
        "configmap-create-generate-name",
        post(
            &cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"generateName": "gen-"}, "data": {"k": "v"}}),
        ),
    );
    b.capture_generated("gen-name", &generated, "/metadata/name");
    b.send("configmap-delete", delete(format!("{cm}/{{{{gen-name}}}}")));
    b.send(
        "configmap-get-deleted",
        get(format!("{cm}/{{{{gen-name}}}}")),
    );
    b.send(
        "configmap-delete-missing",
        delete(format!("{cm}/{{{{gen-name}}}}")),
    );
    b.send(
        "configmap-create-wrong-namespace",
        post(
            &cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "elsewhere", "namespace": "default"}}),
        ),
    );
    b.send(
        "configmap-create-wrong-kind",
        post(
            &cm,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kind"}}),
        ),
    );
    b.send(
        "configmap-create-malformed",
        Request::new(Method::POST, &cm).body(JSON, json!("not an object")),
    );
    b.send("unknown-resource", get(format!("{NS}/gadgets")));

    // Secret.
    let secrets = format!("{NS}/secrets");
    b.send(
        "secret-create",
        post(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1", "labels": {"app": "a"}},
                   "type": "Opaque", "data": {"a": "YWJj"}, "stringData": {"b": "def"}}),
        ),
    );
    let s1 = b.send("secret-get", get(format!("{secrets}/s1")));
    b.capture("s1-rv", &s1, "/metadata/resourceVersion");
    b.send(
        "secret-update-type",
        put(
            format!("{secrets}/s1"),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "s1", "resourceVersion": "{{s1-rv}}"},
                   "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}),
        ),
    );
    b.send(
        "secret-create-tls-invalid",
        post(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"},
                   "type": "kubernetes.io/tls", "data": {"a": "YWJj"}}),
        ),
    );
    b.send(
        "secret-create-bad-base64",
        post(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b64"},
                   "data": {"a": "%%%"}}),
        ),
    );
    b.send(
        "secret-create-immutable",
        post(
            &secrets,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "frozen"},
                   "immutable": true, "data": {"a": "YWJj"}}),
        ),
    );
    b.send(
        "secret-patch-immutable",
        patch(
            format!("{secrets}/frozen"),
            MERGE,
            json!({"data": {"a": "eHl6"}}),
        ),
    );
    b.send("secret-delete", delete(format!("{secrets}/s1")));

    // The custom kind: the same CRD on both, then its objects.
    b.area("crd");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    b.send("crd-create", post(crds, widget_crd()));
    b.until_both(
        "widgets.example.com established and served",
        &get(WIDGETS),
        |reply| reply.code == 200,
    );
    b.until_both(
        "widgets.example.com Established",
        &get(format!("{crds}/widgets.example.com")),
        |reply| {
            reply.body["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        },
    );
    b.send("crd-get", get(format!("{crds}/widgets.example.com")));
    b.send("crd-create-exists", post(crds, widget_crd()));
    let mut bad = widget_crd();
    bad["metadata"]["name"] = json!("gadgets.example.com");
    b.send("crd-create-name-mismatch", post(crds, bad));

    let created = b.send(
        "widget-create",
        post(
            WIDGETS,
            widget(
                "w1",
                json!({"app": "a"}),
                json!({"size": 3, "color": "red"}),
            ),
        ),
    );
    b.capture("w1-rv", &created, "/metadata/resourceVersion");
    b.send("widget-get", get(format!("{WIDGETS}/w1")));
    b.send(
        "widget-create-exists",
        post(WIDGETS, widget("w1", json!({}), json!({"size": 3}))),
    );
    b.send("widget-get-missing", get(format!("{WIDGETS}/missing")));
    let mut update = widget(
        "w1",
        json!({"app": "a"}),
        json!({"size": 4, "color": "blue"}),
    );
    update["metadata"]["resourceVersion"] = json!("{{w1-rv}}");
    b.send(
        "widget-update",
        put(format!("{WIDGETS}/w1"), update.clone()),
    );
    b.send("widget-update-stale", put(format!("{WIDGETS}/w1"), update));
    // kube-apiserver walks a schema's properties in Go map order, so the order of the causes
    // of one refusal changes from run to run: they are compared sorted by field.
    b.send_viewed(
        "widget-create-invalid",
        post(
            WIDGETS,
            widget("bad", json!({}), json!({"size": 0, "color": "green"})),
        ),
        sort_causes_by_field,
    );
    b.send(
        "widget-create-wrong-type",
        post(WIDGETS, widget("bad", json!({}), json!({"size": "three"}))),
    );
    b.send(
        "widget-create-required",
        post(WIDGETS, widget("bad", json!({}), json!({"color": "red"}))),
    );
    b.send(
        "widget-create-unknown-field",
        post(
            WIDGETS,
            widget("pruned", json!({}), json!({"size": 1, "shape": "round"})),
        ),
    );
    b.send(
        "widget-create-unknown-field-strict",
        post(
            format!("{WIDGETS}?fieldValidation=Strict"),
            widget("strict", json!({}), json!({"size": 1, "shape": "round"})),
        ),
    );
    b.send("widget-delete", delete(format!("{WIDGETS}/pruned")));
    b.send("widget-get-deleted", get(format!("{WIDGETS}/pruned")));
}

fn patches(b: &mut Battery) {
    b.area("patch");
    let cm = format!("{NS}/configmaps");
    b.send(
        "setup-create",
        post(
            &cm,
            configmap("p1", json!({"app": "a"}), json!({"a": "1", "b": "2"})),
        ),
    );
    let p1 = format!("{cm}/p1");
    b.send(
        "json-patch",
        patch(
            &p1,
            JSON_PATCH,
            json!([
                {"op": "replace", "path": "/data/a", "value": "x"},
                {"op": "add", "path": "/data/c", "value": "3"},
                {"op": "remove", "path": "/data/b"},
                {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
            ]),
        ),
    );
    b.send(
        "json-patch-test-fails",
        patch(
            &p1,
            JSON_PATCH,
            json!([{"op": "test", "path": "/data/a", "value": "nope"}]),
        ),
    );
    b.send(
        "json-patch-remove-missing",
        patch(
            &p1,
            JSON_PATCH,
            json!([{"op": "remove", "path": "/data/nothing"}]),
        ),
    );
    b.send(
        "json-patch-not-a-list",
        patch(&p1, JSON_PATCH, json!({"op": "add"})),
    );
    b.send(
        "merge-patch",
        patch(
            &p1,
            MERGE,
            json!({"data": {"a": null, "d": "4"}, "metadata": {"labels": {"tier": null, "x": "y"}}}),
        ),
    );
    b.send(
        "merge-patch-invalid",
        patch(&p1, MERGE, json!({"metadata": {"name": "renamed"}})),
    );
    b.send(
        "merge-patch-missing",
        patch(format!("{cm}/missing"), MERGE, json!({"data": {"a": "1"}})),
    );
    b.send(
        "strategic-patch-configmap",
        patch(&p1, STRATEGIC, json!({"data": {"e": "5", "c": null}})),
    );

    // Strategic merge on lists with merge keys: a Deployment's containers.
    let deployments = "/apis/apps/v1/namespaces/fidelity/deployments";
    b.send("deployment-create", post(deployments, deployment()));
    let web = format!("{deployments}/web");
    b.send(
        "strategic-patch-add-container",
        patch(
            &web,
            STRATEGIC,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "busybox:1.36"},
            ]}}}}),
        ),
    );
    b.send(
        "strategic-patch-change-container",
        patch(
            &web,
            STRATEGIC,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1.28"},
            ]}}}}),
        ),
    );
    b.send(
        "strategic-patch-delete-container",
        patch(
            &web,
            STRATEGIC,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"},
            ]}}}}),
        ),
    );
    b.send(
        "merge-patch-replaces-list",
        patch(
            &web,
            MERGE,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "only", "image": "busybox:1.36"},
            ]}}}}),
        ),
    );
    b.send(
        "strategic-patch-widget",
        patch(
            format!("{WIDGETS}/w1"),
            STRATEGIC,
            json!({"spec": {"size": 5}}),
        ),
    );
    b.send(
        "merge-patch-widget",
        patch(
            format!("{WIDGETS}/w1"),
            MERGE,
            json!({"spec": {"size": 5, "tags": ["a"]}}),
        ),
    );
    b.send(
        "json-patch-widget-invalid",
        patch(
            format!("{WIDGETS}/w1"),
            JSON_PATCH,
            json!([{"op": "replace", "path": "/spec/size", "value": 11}]),
        ),
    );
    b.send(
        "unsupported-patch-type",
        patch(&p1, "application/xml", json!({})),
    );

    // Server-side apply: ownership, a conflict between managers, and force.
    let ssa = format!("{cm}/ssa");
    b.send(
        "apply-create",
        patch(
            format!("{ssa}?fieldManager=alpha"),
            APPLY,
            configmap(
                "ssa",
                json!({"owner": "alpha"}),
                json!({"k": "1", "a": "x"}),
            ),
        ),
    );
    b.send(
        "apply-conflict",
        patch(
            format!("{ssa}?fieldManager=beta"),
            APPLY,
            configmap("ssa", json!({"owner": "beta"}), json!({"k": "2"})),
        ),
    );
    b.send(
        "apply-force",
        patch(
            format!("{ssa}?fieldManager=beta&force=true"),
            APPLY,
            configmap("ssa", json!({"owner": "beta"}), json!({"k": "2"})),
        ),
    );
    b.send(
        "apply-drops-field",
        patch(
            format!("{ssa}?fieldManager=alpha"),
            APPLY,
            configmap("ssa", json!({}), json!({"a": "x"})),
        ),
    );
    b.send(
        "apply-no-field-manager",
        patch(&ssa, APPLY, configmap("ssa", json!({}), json!({"k": "3"}))),
    );
    b.send(
        "apply-force-without-apply",
        patch(
            format!("{ssa}?force=true"),
            MERGE,
            json!({"data": {"z": "1"}}),
        ),
    );
    b.send(
        "update-managed-fields",
        patch(
            format!("{ssa}?fieldManager=gamma"),
            MERGE,
            json!({"data": {"g": "1"}}),
        ),
    );
    b.send(
        "apply-widget",
        patch(
            format!("{WIDGETS}/w2?fieldManager=alpha"),
            APPLY,
            widget("w2", json!({"app": "b"}), json!({"size": 2, "tags": ["x"]})),
        ),
    );
    b.send(
        "apply-widget-conflict",
        patch(
            format!("{WIDGETS}/w2?fieldManager=beta"),
            APPLY,
            widget("w2", json!({}), json!({"size": 3})),
        ),
    );
    b.send(
        "apply-widget-invalid",
        patch(
            format!("{WIDGETS}/w2?fieldManager=alpha&force=true"),
            APPLY,
            widget("w2", json!({}), json!({"size": 30})),
        ),
    );
}

fn lists(b: &mut Battery) {
    b.area("list");
    let cm = format!("{NS}/configmaps");
    for (name, tier, env) in [
        ("l1", "web", Some("prod")),
        ("l2", "web", None),
        ("l3", "db", Some("prod")),
        ("l4", "db", Some("dev")),
        ("l5", "cache", None),
    ] {
        let mut labels = json!({"tier": tier, "paged": "yes"});
        if let Some(env) = env {
            labels["env"] = json!(env);
        }
        b.send(
            &format!("setup-{name}"),
            post(&cm, configmap(name, labels, json!({"n": name}))),
        );
    }
    for (id, selector) in [
        ("label-equals", "tier%3Dweb"),
        ("label-in", "tier+in+(web,db)"),
        ("label-notin", "tier+notin+(web)"),
        ("label-not-exists", "paged,!env"),
        ("label-exists", "env"),
        ("label-not-equals", "paged,tier!%3Dweb"),
        ("label-several", "tier%3Ddb,env%3Dprod"),
        ("label-invalid", "tier%3D%3D%3D"),
    ] {
        b.send(id, get(format!("{cm}?labelSelector={selector}")));
    }
    for (id, selector) in [
        ("field-name", "metadata.name%3Dl1"),
        ("field-name-not", "metadata.name!%3Dl1"),
        ("field-namespace", "metadata.namespace%3Dfidelity"),
        ("field-unsupported", "data.n%3Dl1"),
    ] {
        b.send(
            id,
            get(format!("{cm}?labelSelector=paged&fieldSelector={selector}")),
        );
    }
    b.send(
        "field-secret-type",
        get(format!("{NS}/secrets?fieldSelector=type%3DOpaque")),
    );
    b.send(
        "cluster-scope",
        get("/api/v1/configmaps?labelSelector=tier%3Dweb"),
    );
    b.send(
        "widget-label",
        get(format!("{WIDGETS}?labelSelector=app%3Da")),
    );
    b.send(
        "widget-field-name",
        get(format!("{WIDGETS}?fieldSelector=metadata.name%3Dw1")),
    );
    b.send(
        "widget-field-unsupported",
        get(format!("{WIDGETS}?fieldSelector=spec.size%3D1")),
    );

    // Paging: limit and continue, remainingItemCount.
    let first = b.send(
        "page-1",
        get(format!("{cm}?labelSelector=paged%3Dyes&limit=2")),
    );
    b.capture("continue-1", &first, "/metadata/continue");
    let second = b.send(
        "page-2",
        get(format!(
            "{cm}?labelSelector=paged%3Dyes&limit=2&continue={{{{continue-1}}}}"
        )),
    );
    b.capture("continue-2", &second, "/metadata/continue");
    b.send(
        "page-3",
        get(format!(
            "{cm}?labelSelector=paged%3Dyes&limit=2&continue={{{{continue-2}}}}"
        )),
    );
    b.send(
        "page-invalid-continue",
        get(format!("{cm}?limit=2&continue=bm90LWEtdG9rZW4")),
    );
    b.send(
        "page-limit-covers-all",
        get(format!("{cm}?labelSelector=paged%3Dyes&limit=10")),
    );
    b.send("page-widgets", get(format!("{WIDGETS}?limit=1")));

    // Tables.
    b.area("table");
    let selector = "labelSelector=tier%3Dweb";
    b.send("configmaps", get(format!("{cm}?{selector}")).accept(TABLE));
    b.send(
        "configmaps-include-none",
        get(format!("{cm}?{selector}&includeObject=None")).accept(TABLE),
    );
    b.send(
        "configmaps-include-object",
        get(format!("{cm}?{selector}&includeObject=Object")).accept(TABLE),
    );
    b.send("configmap-single", get(format!("{cm}/l1")).accept(TABLE));
    b.send(
        "configmaps-limit",
        get(format!("{cm}?labelSelector=paged&limit=2")).accept(TABLE),
    );
    b.send("secrets", get(format!("{NS}/secrets")).accept(TABLE));
    b.send(
        "deployments",
        get("/apis/apps/v1/namespaces/fidelity/deployments").accept(TABLE),
    );
    b.send("widgets", get(WIDGETS).accept(TABLE));
    b.send(
        "widgets-include-object",
        get(format!("{WIDGETS}?includeObject=Object")).accept(TABLE),
    );
    b.send("widget-single", get(format!("{WIDGETS}/w1")).accept(TABLE));
    b.send("namespace-single", get(NS).accept(TABLE));
    b.send(
        "fallback-accept",
        get(format!("{cm}/l1")).accept(&format!("{TABLE}, application/json")),
    );
}

fn discovery(b: &mut Battery) {
    b.area("discovery");
    b.until_both(
        "example.com in discovery",
        &get("/apis/example.com/v1"),
        |reply| reply.code == 200,
    );
    b.send("api", get("/api"));
    b.send_viewed(
        "api-v1",
        get("/api/v1"),
        keep_resources(&[
            "configmaps",
            "secrets",
            "namespaces",
            "namespaces/status",
            "namespaces/finalize",
            "serviceaccounts",
            "serviceaccounts/token",
        ]),
    );
    b.send_viewed("apis", get("/apis"), keep_groups);
    b.send_viewed("apis-order", get("/apis"), |body| {
        // Only the relative order of the groups both serve.
        let order: Vec<Value> = body["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| GROUPS.contains(&g["name"].as_str().unwrap_or_default()))
            .map(|g| g["name"].clone())
            .collect();
        *body = Value::Array(order);
    });
    b.send("apis-example", get("/apis/example.com"));
    b.send("apis-example-v1", get("/apis/example.com/v1"));
    b.send_viewed(
        "apis-apps-v1",
        get("/apis/apps/v1"),
        keep_resources(&["deployments", "deployments/status", "deployments/scale"]),
    );
    b.send_viewed(
        "apis-apiextensions-v1",
        get("/apis/apiextensions.k8s.io/v1"),
        keep_resources(&[
            "customresourcedefinitions",
            "customresourcedefinitions/status",
        ]),
    );
    b.send("apis-missing-group", get("/apis/nothing.example.com/v1"));
    b.send_viewed(
        "apis-aggregated",
        get("/apis").accept("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
        keep_groups,
    );
}

fn finalizers(b: &mut Battery) {
    b.area("finalizers");
    let cm = format!("{NS}/configmaps");
    let mut held = configmap("held", json!({}), json!({"k": "v"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    b.send("configmap-create", post(&cm, held));
    b.send("configmap-delete", delete(format!("{cm}/held")));
    let kept = b.send("configmap-get-deleting", get(format!("{cm}/held")));
    b.capture("held-rv", &kept, "/metadata/resourceVersion");
    b.send(
        "configmap-add-finalizer",
        patch(
            format!("{cm}/held"),
            JSON_PATCH,
            json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/more"}]),
        ),
    );
    b.send(
        "configmap-update-while-deleting",
        patch(format!("{cm}/held"), MERGE, json!({"data": {"k": "v2"}})),
    );
    b.send("configmap-delete-again", delete(format!("{cm}/held")));
    b.send(
        "configmap-remove-finalizer",
        patch(
            format!("{cm}/held"),
            MERGE,
            json!({"metadata": {"finalizers": null}}),
        ),
    );
    b.send("configmap-get-gone", get(format!("{cm}/held")));

    b.send(
        "configmap-delete-precondition",
        Request::new(Method::DELETE, format!("{cm}/l5")).body(
            JSON,
            json!({"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
        ),
    );
    b.send(
        "configmap-delete-dry-run",
        delete(format!("{cm}/l5?dryRun=All")),
    );
    b.send("configmap-get-after-dry-run", get(format!("{cm}/l5")));

    let mut held = widget("held", json!({}), json!({"size": 1}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    b.send("widget-create", post(WIDGETS, held));
    b.send("widget-delete", delete(format!("{WIDGETS}/held")));
    b.send("widget-get-deleting", get(format!("{WIDGETS}/held")));
    b.send(
        "widget-list-deleting",
        get(format!("{WIDGETS}?fieldSelector=metadata.name%3Dheld")),
    );
    b.send(
        "widget-remove-finalizer",
        patch(
            format!("{WIDGETS}/held"),
            JSON_PATCH,
            json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        ),
    );
    b.send("widget-get-gone", get(format!("{WIDGETS}/held")));
    b.send(
        "delete-collection",
        delete(format!("{cm}?labelSelector=tier%3Dcache")),
    );
    b.send(
        "list-after-delete-collection",
        get(format!("{cm}?labelSelector=paged")),
    );
}

fn status(b: &mut Battery) {
    b.area("status");
    let mut with_status = widget("s1", json!({}), json!({"size": 1}));
    with_status["status"] = json!({"phase": "Ignored"});
    let created = b.send("widget-create-with-status", post(WIDGETS, with_status));
    b.capture("s1-rv", &created, "/metadata/resourceVersion");
    let s1 = format!("{WIDGETS}/s1");
    let mut write = widget("s1", json!({"changed": "yes"}), json!({"size": 9}));
    write["metadata"]["resourceVersion"] = json!("{{s1-rv}}");
    write["status"] = json!({"phase": "Ready", "observed": 1});
    let written = b.send("status-put", put(format!("{s1}/status"), write.clone()));
    b.capture("s1-rv", &written, "/metadata/resourceVersion");
    b.send("get-after-status-put", get(&s1));
    b.send("status-get", get(format!("{s1}/status")));
    b.send(
        "status-merge-patch",
        patch(
            format!("{s1}/status"),
            MERGE,
            json!({"status": {"observed": 2}, "spec": {"size": 8}}),
        ),
    );
    b.send(
        "status-json-patch-invalid",
        patch(
            format!("{s1}/status"),
            JSON_PATCH,
            json!([{"op": "add", "path": "/status/observed", "value": "two"}]),
        ),
    );
    b.send(
        "status-apply",
        patch(
            format!("{s1}/status?fieldManager=statusy"),
            APPLY,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "s1", "namespace": "fidelity"},
                   "status": {"phase": "Applied"}}),
        ),
    );
    let current = b.send("get-before-main-put", get(&s1));
    b.capture("s1-rv", &current, "/metadata/resourceVersion");
    write["status"] = json!({"phase": "FromMain"});
    write["spec"] = json!({"size": 2});
    b.send("main-put-ignores-status", put(&s1, write));
    b.send(
        "main-merge-patch-ignores-status",
        patch(
            &s1,
            MERGE,
            json!({"status": {"phase": "FromPatch"}, "metadata": {"labels": {"l": "1"}}}),
        ),
    );
    b.send("get-final", get(&s1));
    b.send(
        "status-missing-object",
        patch(
            format!("{WIDGETS}/missing/status"),
            MERGE,
            json!({"status": {"phase": "x"}}),
        ),
    );
    b.send(
        "deployment-status-patch",
        patch(
            "/apis/apps/v1/namespaces/fidelity/deployments/web/status",
            MERGE,
            json!({"status": {"replicas": 1, "observedGeneration": 1}, "spec": {"replicas": 5}}),
        ),
    );
    b.send(
        "deployment-get",
        get("/apis/apps/v1/namespaces/fidelity/deployments/web"),
    );
    b.send(
        "configmap-status-subresource",
        get(format!("{NS}/configmaps/l1/status")),
    );
}

#[test]
fn capstan_serve_answers_as_kube_apiserver_1_35() {
    let started = std::time::Instant::now();
    let kube = KubeApiserver::start();
    let work = tempfile::tempdir().unwrap();
    let serve = Serve::start_with(
        &work.path().join("data"),
        &work.path().join("serve.log"),
        &[],
    );
    let mut b = Battery::new(&kube.kubeconfig, &serve.kubeconfig);

    crud(&mut b);
    patches(&mut b);
    lists(&mut b);
    discovery(&mut b);
    finalizers(&mut b);
    status(&mut b);

    // Each server must have answered each request: a transport error panics in the harness, and
    // a 5xx is never an expected answer from the reference.
    for d in &b.differences {
        if d.path == "/code" {
            assert!(
                d.kube.as_ref().and_then(Value::as_u64).unwrap_or(0) < 500,
                "kube-apiserver answered {} with {:?}",
                d.request,
                d.kube
            );
        }
    }
    let ok = b.finish(&harness::known_differences_file());
    eprintln!("battery took {:.1?}", started.elapsed());
    assert!(
        ok,
        "the differences from kube-apiserver are not those listed in {} (see above)",
        harness::known_differences_file().display()
    );
}
