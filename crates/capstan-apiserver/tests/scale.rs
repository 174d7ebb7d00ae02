//! The `scale` subresource beside a concurrent writer: a patch of `spec.replicas` that names no
//! resourceVersion (what `kubectl scale` and controllers send) is retried by the server when
//! another write (a controller's status) lands between its read and its write, rather than
//! answered with a conflict; one that names a stale resourceVersion is a conflict.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[test]
fn scales_beside_a_status_writer_all_land_and_a_stale_version_conflicts() {
    let server = support::start();
    support::racing_runtime().block_on(async {
        let client = server.client().await;
        let deployments: Api<Deployment> = Api::namespaced(client, "default");
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        }))
        .unwrap();
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();

        // A controller writing the Deployment's status all the while, as KubeadmControlPlane's
        // and MachineDeployment's controllers write theirs while `kubectl scale` runs.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let statuses = deployments.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut generation = 0_i64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    generation += 1;
                    statuses
                        .patch_status(
                            "web",
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"status": {"observedGeneration": generation}})),
                        )
                        .await
                        .unwrap();
                }
                generation
            })
        };
        let mut failures = Vec::new();
        for replicas in 2..42_i32 {
            match deployments
                .patch_scale(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
                )
                .await
            {
                Ok(scale) => assert_eq!(scale.spec.unwrap().replicas, Some(replicas)),
                Err(e) => failures.push(format!("scale to {replicas}: {e}")),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let status_writes = writer.await.unwrap();
        assert!(status_writes > 1, "the status writer ran");
        assert!(failures.is_empty(), "{failures:#?}");
        let stored = deployments.get("web").await.unwrap();
        assert_eq!(stored.spec.unwrap().replicas, Some(41));

        // A patch naming a resourceVersion that is no longer current is a precondition: 409.
        let stale = deployments
            .patch_scale(
                "web",
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 5}}),
                ),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&stale, kube::Error::Api(status) if status.code == 409),
            "{stale}"
        );
    });
}
