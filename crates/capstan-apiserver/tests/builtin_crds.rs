//! The CustomResourceDefinitions `capstan serve` stores for capstan's own kinds: written once
//! with Cluster API's contract labels, left alone when somebody else's definition is there,
//! replaced when an older capstan wrote them. MachinePool, which capstan does not reconcile, is
//! served for tools that list it and refused on write, through kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::{ANNOTATION_BUILT_IN, ApiServer, Auth};
use capstan_store::{ObjectKey, Store, StoreOptions};
use serde_json::{Value, json};
use std::sync::Arc;

const CLUSTERS: &str = "clusters.cluster.x-k8s.io";

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(
        "apiextensions.k8s.io/customresourcedefinitions",
        "",
        name.to_owned(),
    )
}

async fn stored(store: &Store, name: &str) -> Value {
    store
        .get(key(name))
        .await
        .unwrap()
        .unwrap()
        .value()
        .unwrap()
}

#[tokio::test]
async fn capstans_kinds_are_published_once_and_others_definitions_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store.clone(),
        Arc::new(ModelConverter),
        Auth { tokens: vec![] },
    )
    .await
    .unwrap();

    let written = server.publish_builtin_crds().await.unwrap();
    assert!(written > 20, "{written}");
    let clusters = stored(&store, CLUSTERS).await;
    assert_eq!(
        clusters["metadata"]["labels"],
        json!({"cluster.x-k8s.io/v1beta2": "v1beta2", "cluster.x-k8s.io/v1beta1": "v1beta1"})
    );
    assert_eq!(
        clusters["metadata"]["annotations"][ANNOTATION_BUILT_IN],
        env!("CARGO_PKG_VERSION")
    );
    let storage: Vec<&str> = clusters["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["storage"] == true)
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(storage, ["v1beta2"]);
    let version = clusters["metadata"]["resourceVersion"].clone();

    // Nothing changed: nothing written, the stored object untouched.
    assert_eq!(server.publish_builtin_crds().await.unwrap(), 0);
    assert_eq!(
        stored(&store, CLUSTERS).await["metadata"]["resourceVersion"],
        version
    );

    // A definition an older capstan wrote, now different, is replaced.
    let mut older = stored(&store, CLUSTERS).await;
    older["metadata"]["annotations"][ANNOTATION_BUILT_IN] = json!("0.0.1");
    older["spec"]["names"]["shortNames"] = json!([]);
    let current = store.get(key(CLUSTERS)).await.unwrap().unwrap();
    store
        .update(key(CLUSTERS), older, Some(current.resource_version))
        .await
        .unwrap();
    assert_eq!(server.publish_builtin_crds().await.unwrap(), 1);
    let replaced = stored(&store, CLUSTERS).await;
    assert_eq!(replaced["spec"]["names"]["shortNames"], json!(["cl"]));

    // Somebody else's definition (upstream's, without the annotation) is left as it is.
    let mut upstream = stored(&store, CLUSTERS).await;
    upstream["metadata"]["annotations"] = json!({});
    upstream["spec"]["names"]["shortNames"] = json!([]);
    let current = store.get(key(CLUSTERS)).await.unwrap().unwrap();
    store
        .update(key(CLUSTERS), upstream, Some(current.resource_version))
        .await
        .unwrap();
    assert_eq!(server.publish_builtin_crds().await.unwrap(), 0);
    assert_eq!(
        stored(&store, CLUSTERS).await["spec"]["names"]["shortNames"],
        json!([])
    );
}

#[test]
fn machine_pools_are_listed_and_refused_on_write() {
    let server = support::start();
    let definition = capstan_apiserver::registry::capstan_crds()
        .into_iter()
        .find(|c| c["metadata"]["name"] == "machinepools.cluster.x-k8s.io")
        .unwrap();
    support::ok(&support::kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&definition.to_string()),
    ));
    let listed = support::ok(&support::kubectl(
        &server,
        &["get", "machinepools.cluster.x-k8s.io", "-A", "-o", "json"],
        None,
    ));
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["items"], json!([]));
    let pool = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
        "metadata": {"name": "pool", "namespace": "default"},
        "spec": {"clusterName": "c", "replicas": 1},
    });
    let out = support::kubectl(&server, &["apply", "-f", "-"], Some(&pool.to_string()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted");
    assert!(
        stderr.contains(capstan_apiserver::registry::MACHINE_POOL_REFUSAL),
        "{stderr}"
    );
}
