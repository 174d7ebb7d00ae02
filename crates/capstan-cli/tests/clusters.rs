//! The seeds' whole workflow on the embedded default: the capi-1 bundle from `capstan render
//! examples/capi-1.yaml --fake-bmcs`, applied unchanged to `capstan serve --simulate-workloads`.
//!
//! Real: the API server and store, the BareMetalHost controller and provisioner, the Cluster API
//! core, kubeadm bootstrap and control-plane, Metal3, ClusterResourceSet and MachineHealthCheck
//! controllers, the CLI, and kubectl. Simulated (by the backend that ships in capstan): the
//! machines (`fake://` BMCs and the agent's steps) and each workload cluster — its API is a capstan
//! API server, its Nodes register when a host is provisioned with bootstrap data that runs
//! `kubeadm init|join`, and its etcd members are recorded. See `crates/capstan-sim`.
//!
//! Checked: the Cluster reaches Provisioned; 3 control planes and 1 worker are Running with Nodes,
//! providerIDs and role labels; the Cilium ClusterResourceSet lands in the workload API (kubectl
//! against the workload kubeconfig `capstan kubeconfig capi-1` prints); `capstan describe cluster`
//! shows every object ready; the workers scale 1 → 2 → 1; deleting the Cluster takes every Machine
//! away and brings every host back to `available`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;

mod support;

use support::*;

const EXTRA_WORKER: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: capi-1-worker-1-bmc-secret
stringData:
  username: admin
  password: password
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: capi-1-worker-1
  labels:
    capstan.dev/cluster: capi-1
    capstan.dev/pool: workers
    capstan.dev/role: worker
spec:
  online: true
  bmc:
    address: fake://capi-1/capi-1-worker-1
    credentialsName: capi-1-worker-1-bmc-secret
"#;

#[test]
fn the_capi_1_bundle_becomes_a_running_cluster_scales_and_goes_away() {
    let work = tempfile::tempdir().unwrap();
    // The cluster comes up: 3 control planes, then the worker, each with a Node.
    let server = Serve::start_with_capi_1_running(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    until("Cluster Provisioned", Duration::from_secs(60), &log, || {
        let clusters = items(&kc, "clusters.cluster.x-k8s.io");
        match clusters.first() {
            Some(c) if c["status"]["phase"] == "Provisioned" => Ok(()),
            other => Err(format!("{:?}", other.map(|c| &c["status"]))),
        }
    });
    let machines = items(&kc, "machines.cluster.x-k8s.io");
    for machine in &machines {
        let provider_id = machine["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(
            provider_id.starts_with("metal3://default/capi-1-"),
            "{}: providerID {provider_id:?}",
            name(machine)
        );
    }
    let kcp = &items(&kc, "kubeadmcontrolplanes")[0];
    assert_eq!(kcp["status"]["readyReplicas"], 3, "{}", kcp["status"]);
    assert_eq!(
        kcp["status"]["initialization"]["controlPlaneInitialized"], true,
        "{}",
        kcp["status"]
    );

    // The workload cluster, as its users see it with kubectl.
    let (ok, workload_config) = capstan(&kc, &["kubeconfig", "capi-1"]);
    assert!(ok, "capstan kubeconfig capi-1: {workload_config}");
    let workload = work.path().join("capi-1.kubeconfig");
    std::fs::write(&workload, &workload_config).unwrap();
    let nodes = items(&workload, "nodes");
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    for node in &nodes {
        let provider_id = node["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(
            machines
                .iter()
                .any(|m| m["spec"]["providerID"].as_str() == Some(provider_id)),
            "node {} has providerID {provider_id:?}, which no Machine has",
            name(node)
        );
        let labels = &node["metadata"]["labels"];
        assert!(labels["metal3.io/uuid"].is_string(), "{labels}");
        if name(node).contains("worker") {
            assert!(
                labels.get("node-role.kubernetes.io/worker").is_some(),
                "the worker's Node has no worker role label: {labels}"
            );
        }
    }
    until(
        "Cilium in the workload cluster",
        Duration::from_secs(60),
        &log,
        || {
            let (ok, out) = kubectl(
                &workload,
                &[
                    "-n",
                    "kube-system",
                    "get",
                    "daemonset",
                    "cilium",
                    "-o",
                    "name",
                ],
            );
            if ok { Ok(()) } else { Err(out) }
        },
    );
    let (ok, out) = kubectl(
        &workload,
        &["-n", "kube-system", "get", "deployment", "cilium-operator"],
    );
    assert!(ok, "the Cilium operator Deployment did not land: {out}");

    // describe cluster: the tree, every object ready.
    let (ok, tree) = capstan(&kc, &["describe", "cluster", "capi-1"]);
    assert!(ok, "describe cluster: {tree}");
    for part in [
        "Cluster/capi-1",
        "KubeadmControlPlane/capi-1-control-plane",
        "MachineDeployment/capi-1-workers",
    ] {
        assert!(
            tree.contains(part),
            "describe cluster lacks {part}:\n{tree}"
        );
    }
    let (ok, json) = capstan(&kc, &["describe", "cluster", "capi-1", "-o", "json"]);
    assert!(ok, "describe cluster -o json: {json}");
    let description: Value = serde_json::from_str(&json).unwrap();
    assert!(description.is_object(), "{json}");
    // Certificate expiries: the admin kubeconfig's and, once recorded from their Nodes, each
    // control-plane Machine's (a year after it joined).
    let certificates = until(
        "certificate expiries in describe cluster",
        Duration::from_secs(120),
        &log,
        || {
            let (ok, json) = capstan(&kc, &["describe", "cluster", "capi-1", "-o", "json"]);
            if !ok {
                return Err(json);
            }
            let description: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
            let certificates = description["certificates"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if certificates.len() == 4 {
                Ok(certificates)
            } else {
                Err(format!("{certificates:?}"))
            }
        },
    );
    assert_eq!(certificates[0]["object"], "Secret/capi-1-kubeconfig");
    let in_300_days = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 300);
    for certificate in &certificates {
        let expires: jiff::Timestamp = certificate["expires"].as_str().unwrap().parse().unwrap();
        assert!(expires > in_300_days, "{certificate}");
    }
    let (ok, tree) = capstan(&kc, &["describe", "cluster", "capi-1"]);
    assert!(ok && tree.contains("\nCertificates\n"), "{tree}");

    // Workers 1 → 2 (a second host joins the pool) → 1.
    let extra = work.path().join("extra-worker.yaml");
    std::fs::write(&extra, EXTRA_WORKER).unwrap();
    let (ok, out) = capstan(&kc, &["apply", "-f", extra.to_str().unwrap()]);
    assert!(ok, "apply the extra host: {out}");
    let (ok, out) = kubectl(
        &kc,
        &[
            "scale",
            "machinedeployment",
            "capi-1-workers",
            "--replicas=2",
        ],
    );
    assert!(ok, "kubectl scale md: {out}");
    wait_machines_running(&kc, &log, 5, Duration::from_secs(180));
    let (ok, out) = kubectl(
        &kc,
        &[
            "scale",
            "machinedeployment",
            "capi-1-workers",
            "--replicas=1",
        ],
    );
    assert!(ok, "kubectl scale md: {out}");
    until("back to 4 machines", Duration::from_secs(180), &log, || {
        machines_running(&kc, 4)
    });
    until(
        "the freed worker host available again",
        Duration::from_secs(120),
        &log,
        || {
            let hosts = items(&kc, "baremetalhosts");
            let available = hosts
                .iter()
                .filter(|h| h["status"]["provisioning"]["state"] == "available")
                .count();
            if available == 1 {
                Ok(())
            } else {
                Err(format!("{available} hosts available"))
            }
        },
    );

    // Deleting the Cluster takes everything of it away and gives the hosts back.
    let (ok, out) = capstan(&kc, &["delete", "cluster", "capi-1", "--timeout", "300"]);
    assert!(ok, "delete cluster: {out}");
    until("no machines left", Duration::from_secs(120), &log, || {
        let left = items(&kc, "machines.cluster.x-k8s.io").len()
            + items(&kc, "metal3machines").len()
            + items(&kc, "kubeadmconfigs").len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!(
                "{left} machines, metal3machines and kubeadmconfigs left"
            ))
        }
    });
    until(
        "every host available",
        Duration::from_secs(180),
        &log,
        || hosts_in(&kc, "available"),
    );
    for host in items(&kc, "baremetalhosts") {
        assert!(
            host["spec"]["consumerRef"].is_null(),
            "{} is still consumed: {}",
            name(&host),
            host["spec"]["consumerRef"]
        );
    }

    // The BMC password never reached the log.
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !log_text.contains("cGFzc3dvcmQ="),
        "the base64 BMC password is in the log"
    );
}

/// The cells of `column` in `kubectl get` output: the text under the column's header, up to where
/// the next column's header starts (an empty cell is an empty string, not the next column's).
fn column(table: &str, header: &str) -> Vec<String> {
    let mut lines = table.lines();
    let head = lines.next().unwrap_or_default();
    let start = head
        .find(&format!("{header} "))
        .or_else(|| head.ends_with(header).then(|| head.len() - header.len()))
        .unwrap_or_else(|| panic!("no {header} column in:\n{table}"));
    let after = start + header.len();
    let end = head[after..]
        .find(|c: char| c != ' ')
        .map_or(usize::MAX, |i| after + i);
    lines
        .map(|line| {
            let cell = line.get(start..end.min(line.len())).unwrap_or_default();
            cell.trim().to_owned()
        })
        .collect()
}

/// `kubectl get` names each KubeadmControlPlane's, Metal3Cluster's and Metal3Machine's cluster in
/// its CLUSTER column, as with upstream's CRDs: the column reads the
/// `cluster.x-k8s.io/cluster-name` label, which the bundle, the Cluster controller and the
/// machine controllers set.
#[test]
fn kubectl_get_names_the_cluster_of_control_planes_and_metal3_objects() {
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    render(&capi_1_spec(work.path(), |text| text), &bundle, &[]);
    let server = Serve::start_with_bundle(work.path(), &bundle);
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    // The control plane's first Metal3Machine and the worker pool's: the KubeadmControlPlane and
    // the MachineSet stamp them out of their templates.
    let machines = until("Metal3Machines", Duration::from_secs(120), &log, || {
        let machines = try_items(&kc, "metal3machines")?;
        let control_plane = machines
            .iter()
            .any(|m| m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"].is_string());
        if control_plane && machines.len() >= 2 {
            Ok(machines.len())
        } else {
            Err(format!(
                "{} Metal3Machines: {:?}",
                machines.len(),
                machines.iter().map(name).collect::<Vec<_>>()
            ))
        }
    });
    for (resource, count) in [
        ("kubeadmcontrolplanes", 1),
        ("metal3clusters", 1),
        ("metal3machines", machines),
    ] {
        let table = kubectl_ok(&kc, &["get", resource]);
        let clusters = column(&table, "CLUSTER");
        assert!(
            clusters.len() >= count && clusters.iter().all(|c| c == "capi-1"),
            "kubectl get {resource}: the CLUSTER column is {clusters:?}:\n{table}"
        );
    }
}
