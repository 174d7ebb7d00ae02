//! Mixed API versions in one cluster: the capi-1 bundle with its Cluster in `v1beta2` (from
//! `capstan render --api-version v1beta2`) and its KubeadmControlPlane and MachineDeployment in
//! `v1beta1`, each carrying fields users set that only one version has a place for (v1beta1's
//! `useExperimentalRetryJoin`, `revisionHistoryLimit`, `progressDeadlineSeconds`) and fields whose
//! shape differs between the versions (durations, `rolloutStrategy` → `rollout.strategy`,
//! `strategy.rollingUpdate.deletePolicy` → `deletion.order`, `kubeletExtraArgs` maps → lists).
//!
//! Real: the API server (it stores `v1beta2` and converts every read and write), every
//! controller (which read and write `v1beta2`, status by merge patch), the CLI and kubectl.
//! Simulated (`crates/capstan-sim`): the machines (`fake://` BMCs) and the workload cluster.
//!
//! Checked: the cluster comes up (4 Machines Running, Cluster Provisioned); each object read in
//! both versions carries the same values in the fields both versions have (spec and status);
//! every field the user wrote reads back unchanged in the version it was written in after the
//! controllers wrote status many times; and a later write in the other version (a v1beta2 patch of
//! the v1beta1 KubeadmControlPlane, a v1beta1 patch of the MachineDeployment) keeps the fields
//! that version cannot hold.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::*;

fn load(path: &Path) -> Vec<Value> {
    capstan_manifest::load_path(path)
        .unwrap()
        .into_iter()
        .map(|o| o.value)
        .collect()
}

/// Every leaf of `expected` is in `actual` with the same value (lists compared whole).
fn contains(actual: &Value, expected: &Value, path: &str, missing: &mut Vec<String>) {
    match expected {
        Value::Object(fields) => {
            for (key, value) in fields {
                contains(
                    &actual[key.as_str()],
                    value,
                    &format!("{path}.{key}"),
                    missing,
                );
            }
        }
        other if actual != other => missing.push(format!("{path}: wrote {other}, read {actual}")),
        _ => {}
    }
}

fn assert_contains(actual: &Value, expected: &Value, what: &str) {
    let mut missing = Vec::new();
    contains(actual, expected, "", &mut missing);
    assert!(
        missing.is_empty(),
        "{what}: fields lost or changed: {missing:#?}"
    );
}

fn kcp(version: &str) -> String {
    format!("kubeadmcontrolplanes.{version}.controlplane.cluster.x-k8s.io")
}
fn md(version: &str) -> String {
    format!("machinedeployments.{version}.cluster.x-k8s.io")
}
fn cluster(version: &str) -> String {
    format!("clusters.{version}.cluster.x-k8s.io")
}

#[test]
fn a_v1beta1_control_plane_and_workers_under_a_v1beta2_cluster_come_up_and_lose_nothing() {
    let work = tempfile::tempdir().unwrap();
    let spec = capi_1_spec(work.path(), |text| text);
    let old = work.path().join("v1beta1");
    let new = work.path().join("v1beta2");
    render(&spec, &old, &[]);
    render(&spec, &new, &["--api-version", "v1beta2"]);
    let v1beta2_cluster = load(&new.join("cluster/cluster.yaml"))
        .into_iter()
        .find(|o| o["kind"] == "Cluster")
        .unwrap();
    assert_eq!(v1beta2_cluster["apiVersion"], "cluster.x-k8s.io/v1beta2");

    let mut objects = load(&old.join("cluster/cluster.yaml"));
    let mut applied_kcp = Value::Null;
    let mut applied_md = Value::Null;
    let mut applied_cluster = Value::Null;
    for object in objects.iter_mut() {
        match object["kind"].as_str().unwrap() {
            "Cluster" => {
                *object = v1beta2_cluster.clone();
                object["metadata"]["annotations"] = json!({"example.com/owner": "platform"});
                object["spec"]["clusterNetwork"]["serviceDomain"] = json!("cluster.local");
                applied_cluster = object.clone();
            }
            "KubeadmControlPlane" => {
                assert_eq!(
                    object["apiVersion"],
                    "controlplane.cluster.x-k8s.io/v1beta1"
                );
                object["metadata"]["annotations"] = json!({"example.com/owner": "platform"});
                let spec = &mut object["spec"];
                spec["kubeadmConfigSpec"]["useExperimentalRetryJoin"] = json!(true);
                spec["machineTemplate"]["nodeDrainTimeout"] = json!("1m30s");
                spec["machineTemplate"]["metadata"] = json!({"labels": {"tier": "control-plane"}});
                spec["rolloutStrategy"] =
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}});
                spec["remediationStrategy"] = json!({"maxRetry": 3, "retryPeriod": "30s"});
                applied_kcp = object.clone();
            }
            "MachineDeployment" => {
                assert_eq!(object["apiVersion"], "cluster.x-k8s.io/v1beta1");
                object["metadata"]["annotations"] = json!({"example.com/owner": "platform"});
                let spec = &mut object["spec"];
                spec["revisionHistoryLimit"] = json!(4);
                spec["progressDeadlineSeconds"] = json!(700);
                spec["minReadySeconds"] = json!(5);
                spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate":
                    {"maxSurge": 0, "maxUnavailable": 1, "deletePolicy": "Oldest"}});
                spec["template"]["spec"]["nodeDrainTimeout"] = json!("2m0s");
                applied_md = object.clone();
            }
            _ => {}
        }
    }
    let manifest = work.path().join("mixed.yaml");
    std::fs::write(&manifest, capstan_manifest::to_yaml_documents(&objects)).unwrap();

    let server = Serve::start_in(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    apply(
        &kc,
        &[
            &old.join("hosts"),
            &old.join("cluster/cilium.yaml"),
            &manifest,
        ],
    );
    wait_machines_running(&kc, &log, 4, Duration::from_secs(240));
    until("Cluster Provisioned", Duration::from_secs(60), &log, || {
        cluster_provisioned(&kc, "capi-1")
    });
    until(
        "KubeadmControlPlane status settled",
        Duration::from_secs(60),
        &log,
        || {
            let status = get(&kc, &kcp("v1beta2"), "capi-1-control-plane")["status"].clone();
            if status["readyReplicas"] == 3 && status["upToDateReplicas"] == 3 {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    );

    // What users wrote reads back unchanged in the version they wrote it in, after the
    // controllers wrote status many times.
    let kcp1 = get(&kc, &kcp("v1beta1"), "capi-1-control-plane");
    let kcp2 = get(&kc, &kcp("v1beta2"), "capi-1-control-plane");
    let md1 = get(&kc, &md("v1beta1"), "capi-1-workers");
    let md2 = get(&kc, &md("v1beta2"), "capi-1-workers");
    let cluster1 = get(&kc, &cluster("v1beta1"), "capi-1");
    let cluster2 = get(&kc, &cluster("v1beta2"), "capi-1");
    assert_contains(
        &kcp1["spec"],
        &applied_kcp["spec"],
        "KubeadmControlPlane v1beta1 spec",
    );
    assert_contains(
        &kcp1["metadata"]["annotations"],
        &applied_kcp["metadata"]["annotations"],
        "KubeadmControlPlane annotations",
    );
    assert_contains(
        &md1["spec"],
        &applied_md["spec"],
        "MachineDeployment v1beta1 spec",
    );
    assert_contains(
        &cluster2["spec"],
        &applied_cluster["spec"],
        "Cluster v1beta2 spec",
    );
    assert_contains(
        &cluster2["metadata"]["annotations"],
        &applied_cluster["metadata"]["annotations"],
        "Cluster annotations",
    );
    // The same fields in the other version's shape.
    let s1 = &kcp1["spec"];
    let s2 = &kcp2["spec"];
    assert_eq!(s2["version"], s1["version"]);
    assert_eq!(s2["replicas"], s1["replicas"]);
    assert_eq!(
        s2["machineTemplate"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        90
    );
    assert_eq!(
        s2["machineTemplate"]["metadata"]["labels"]["tier"],
        "control-plane"
    );
    assert_eq!(
        s2["machineTemplate"]["spec"]["infrastructureRef"]["name"],
        "capi-1-control-plane"
    );
    assert_eq!(
        s2["machineTemplate"]["spec"]["infrastructureRef"]["apiGroup"],
        "infrastructure.cluster.x-k8s.io"
    );
    assert_eq!(s2["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(s2["remediation"]["maxRetry"], 3);
    assert_eq!(s2["remediation"]["retryPeriodSeconds"], 30);
    assert_eq!(
        s2["kubeadmConfigSpec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!([{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}])
    );
    assert_eq!(
        s2["kubeadmConfigSpec"]["preKubeadmCommands"],
        s1["kubeadmConfigSpec"]["preKubeadmCommands"]
    );
    assert_eq!(
        s2["kubeadmConfigSpec"]["files"],
        s1["kubeadmConfigSpec"]["files"]
    );
    assert!(
        s2["kubeadmConfigSpec"]
            .get("useExperimentalRetryJoin")
            .is_none()
    );
    let (t1, t2) = (&kcp1["status"], &kcp2["status"]);
    assert_eq!(t1["initialized"], true, "{t1}");
    assert_eq!(t1["readyReplicas"], 3, "{t1}");
    assert_eq!(t1["updatedReplicas"], 3, "{t1}");
    assert_eq!(
        t2["initialization"]["controlPlaneInitialized"], true,
        "{t2}"
    );
    for field in ["replicas", "version", "selector", "observedGeneration"] {
        assert_eq!(t1[field], t2[field], "KubeadmControlPlane status.{field}");
    }
    assert_eq!(
        t1["readyReplicas"],
        t2["deprecated"]["v1beta1"]["readyReplicas"]
    );
    assert_eq!(
        t1["updatedReplicas"],
        t2["deprecated"]["v1beta1"]["updatedReplicas"]
    );
    assert_eq!(t1["v1beta2"]["conditions"], t2["conditions"]);
    assert_eq!(t1["conditions"], t2["deprecated"]["v1beta1"]["conditions"]);

    let (s1, s2) = (&md1["spec"], &md2["spec"]);
    assert_eq!(s2["replicas"], s1["replicas"]);
    assert_eq!(s2["selector"], s1["selector"]);
    assert_eq!(s2["template"]["spec"]["minReadySeconds"], 5);
    assert_eq!(
        s2["template"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        120
    );
    assert_eq!(
        s2["template"]["spec"]["version"],
        s1["template"]["spec"]["version"]
    );
    assert_eq!(s2["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(
        s2["rollout"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    assert_eq!(s2["deletion"]["order"], "Oldest");
    assert!(s2.get("revisionHistoryLimit").is_none());
    let (t1, t2) = (&md1["status"], &md2["status"]);
    assert_eq!(t1["readyReplicas"], 1, "{t1}");
    assert_eq!(t1["updatedReplicas"], 1, "{t1}");
    for field in ["replicas", "phase", "selector", "observedGeneration"] {
        assert_eq!(t1[field], t2[field], "MachineDeployment status.{field}");
    }
    assert_eq!(
        t1["readyReplicas"],
        t2["deprecated"]["v1beta1"]["readyReplicas"]
    );

    let (s1, s2) = (&cluster1["spec"], &cluster2["spec"]);
    assert_eq!(s1["controlPlaneEndpoint"], s2["controlPlaneEndpoint"]);
    assert_eq!(s1["clusterNetwork"], s2["clusterNetwork"]);
    assert_eq!(s1["controlPlaneRef"]["kind"], "KubeadmControlPlane");
    assert_eq!(
        s1["controlPlaneRef"]["apiVersion"],
        "controlplane.cluster.x-k8s.io/v1beta1"
    );
    assert_eq!(
        s1["infrastructureRef"]["name"],
        s2["infrastructureRef"]["name"]
    );
    let (t1, t2) = (&cluster1["status"], &cluster2["status"]);
    assert_eq!(t1["phase"], "Provisioned");
    assert_eq!(t1["phase"], t2["phase"]);
    assert_eq!(
        t1["controlPlaneReady"],
        t2["initialization"]["controlPlaneInitialized"]
    );
    assert_eq!(
        t1["infrastructureReady"],
        t2["initialization"]["infrastructureProvisioned"]
    );

    // A write in the other version keeps what that version cannot hold.
    kubectl_ok(
        &kc,
        &[
            "patch",
            &kcp("v1beta2"),
            "capi-1-control-plane",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"changed-via":"v1beta2"}},"spec":{"machineTemplate":{"spec":{"deletion":{"nodeDrainTimeoutSeconds":120}}}}}"#,
        ],
    );
    let kcp1 = get(&kc, &kcp("v1beta1"), "capi-1-control-plane");
    assert_eq!(kcp1["metadata"]["labels"]["changed-via"], "v1beta2");
    assert_eq!(kcp1["spec"]["machineTemplate"]["nodeDrainTimeout"], "2m0s");
    let mut expected = applied_kcp["spec"].clone();
    expected["machineTemplate"]["nodeDrainTimeout"] = json!("2m0s");
    assert_contains(
        &kcp1["spec"],
        &expected,
        "KubeadmControlPlane after a v1beta2 write",
    );

    kubectl_ok(
        &kc,
        &[
            "patch",
            &md("v1beta1"),
            "capi-1-workers",
            "--type=merge",
            "-p",
            r#"{"spec":{"revisionHistoryLimit":5}}"#,
        ],
    );
    let md1 = get(&kc, &md("v1beta1"), "capi-1-workers");
    let md2 = get(&kc, &md("v1beta2"), "capi-1-workers");
    let mut expected = applied_md["spec"].clone();
    expected["revisionHistoryLimit"] = json!(5);
    assert_contains(
        &md1["spec"],
        &expected,
        "MachineDeployment after a v1beta1 write",
    );
    assert_eq!(md2["spec"]["deletion"]["order"], "Oldest");
    assert_eq!(md2["spec"]["template"]["spec"]["minReadySeconds"], 5);

    // Controllers go on writing status; nothing changes the user's fields (no new rollout
    // either: the same Machines stay).
    let machines = machines_running(&kc, 4).unwrap();
    kubectl_ok(
        &kc,
        &["scale", &md("v1beta1"), "capi-1-workers", "--replicas=1"],
    );
    let md1 = get(&kc, &md("v1beta1"), "capi-1-workers");
    assert_contains(
        &md1["spec"],
        &expected,
        "MachineDeployment after kubectl scale",
    );
    let after = machines_running(&kc, 4).unwrap();
    let names = |ms: &[Value]| ms.iter().map(|m| name(m).to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&machines), names(&after));
    drop(server);
}
