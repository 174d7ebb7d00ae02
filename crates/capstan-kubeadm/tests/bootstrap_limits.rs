//! The KubeadmConfig controller against an in-process capstan API server, with bootstrap data that
//! cannot be had: files whose `contentFrom` Secrets add up to more than a machine's bootstrap data
//! may hold, and a reference to a key the Secret does not have. Each is refused with a condition
//! that says which it is, before anything is rendered or the init lock is taken.
//!
//! Every wait polls a condition with a deadline ([`WAIT`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_kubeadm::bootstrap::{
    BootstrapController, BootstrapSettings, MAX_BOOTSTRAP_DATA_BYTES, REASON_DATA_TOO_LARGE,
};
use capstan_runtime::{CancellationToken, RunOptions};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(50);
const NS: &str = "default";

/// An API server on a store in a new temporary directory (kept alive by the `TempDir`).
async fn api_server() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().unwrap();
    let store = capstan_store::Store::open(
        &dir.path().join("state.db"),
        capstan_store::StoreOptions::default(),
    )
    .unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap();
    (dir, server)
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1beta2".into(),
        api_version: format!("{group}/v1beta2"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn create(client: &kube::Client, r: &ApiResource, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, r)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

/// A control-plane Machine of Cluster `c` and its KubeadmConfig, named `name`, with `files`.
async fn control_plane_machine(client: &kube::Client, name: &str, files: Value) {
    let labels =
        json!({"cluster.x-k8s.io/cluster-name": "c", "cluster.x-k8s.io/control-plane": ""});
    create(
        client,
        &resource(
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            "kubeadmconfigs",
        ),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "clusterConfiguration": {"apiServer": {"certSANs": ["192.0.2.10"]}},
                "initConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.name }}"}},
                "files": files,
            },
        }),
    )
    .await;
    create(
        client,
        &resource("cluster.x-k8s.io", "Machine", "machines"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"clusterName": "c", "version": "v1.30.5",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": name}},
        }),
    )
    .await;
}

/// The `DataSecretAvailable` condition of config `name` once its reason is `reason`.
async fn condition_with_reason(client: &kube::Client, name: &str, reason: &str) -> Value {
    let configs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &resource(
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            "kubeadmconfigs",
        ),
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let config = configs.get(name).await.unwrap();
        let condition = config.data["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "DataSecretAvailable"))
            .cloned()
            .unwrap_or(Value::Null);
        if condition["reason"] == reason {
            return condition;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "config {name}: no {reason} condition; the last was {condition}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contents_over_the_bootstrap_data_limit_are_refused_before_they_are_read() {
    let (_dir, server) = api_server().await;
    let client = in_process_client(server.router());
    let shutdown = CancellationToken::new();
    let controllers = tokio::spawn(capstan_runtime::run(
        in_process_client(server.router()),
        RunOptions::new(shutdown.clone()),
        || {
            vec![capstan_runtime::controller_task(BootstrapController::new(
                BootstrapSettings::default(),
            ))]
        },
    ));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    // A 2 MB Secret: it fits the API's write limit on its own.
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("big".into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    "blob".to_owned(),
                    ByteString(vec![b'x'; 2_000_000]),
                )])),
                ..Secret::default()
            },
        )
        .await
        .unwrap();
    create(
        &client,
        &resource("cluster.x-k8s.io", "Cluster", "clusters"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": NS},
            "spec": {"controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443}},
        }),
    )
    .await;
    // 200 files from the one 2 MB Secret: 400 MB of contents.
    let files: Vec<Value> = (0..200)
        .map(|i| json!({"path": format!("/etc/big-{i}"), "contentFrom": {"secret": {"name": "big", "key": "blob"}}}))
        .collect();
    control_plane_machine(&client, "huge", json!(files)).await;
    let condition = condition_with_reason(&client, "huge", REASON_DATA_TOO_LARGE).await;
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{MAX_BOOTSTRAP_DATA_BYTES} bytes")),
        "the limit is named: {message}"
    );
    assert!(
        message.contains("200 files") && message.contains("Secret default/big"),
        "{message}"
    );
    assert!(!message.contains("does not exist"), "{message}");
    // Nothing was rendered, and the init lock was not taken for a config that cannot render.
    assert!(secrets.get_opt("huge").await.unwrap().is_none());
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get_opt("c-lock")
            .await
            .unwrap()
            .is_none()
    );

    // A key the Secret does not have: the Secret exists, and the condition says so.
    control_plane_machine(
        &client,
        "no-key",
        json!([{"path": "/etc/x", "contentFrom": {"secret": {"name": "big", "key": "other"}}}]),
    )
    .await;
    let condition = condition_with_reason(&client, "no-key", "MissingSecret").await;
    let message = condition["message"].as_str().unwrap();
    assert!(
        message
            .contains("key \"other\" of Secret default/big, which has no such key (it has: blob)"),
        "{message}"
    );
    assert!(!message.contains("does not exist"), "{message}");
    shutdown.cancel();
    controllers.await.unwrap().unwrap();
}
