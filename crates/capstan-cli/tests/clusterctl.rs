//! clusterctl, built from Cluster API v1.14 (`scripts/peers.sh`), against `capstan serve`: the
//! tools a team moving off kind + clusterctl keeps using find what they expect.
//!
//! Real: clusterctl itself; capstan's API server, store and every controller. Simulated (the
//! backend that ships in capstan): the machines (`fake://` BMCs) and the workload cluster's API.
//! The bundle is capi-1's from `capstan render examples/capi-1.yaml --fake-bmcs`, applied
//! unchanged.
//!
//! Checked: `clusterctl describe cluster` passes its Cluster API contract check (the stored
//! `clusters.cluster.x-k8s.io` definition at `v1beta2`), lists MachinePools (served, none), and
//! resolves the control plane and infrastructure cluster by the CRDs' contract labels — its tree
//! shows the KubeadmControlPlane 3/3, the Metal3Cluster, the MachineDeployment and all four
//! Machines Ready and Available; `clusterctl get kubeconfig` returns the `<cluster>-kubeconfig`
//! Secret's kubeconfig.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod support;

use support::*;

fn clusterctl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(capstan_testkit::peers::binary("clusterctl"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "clusterctl {args:?}: {text}");
    text
}

/// The row of `tree` that names `object` (`Kind namespace/name`), split into columns.
fn row<'a>(tree: &'a str, object: &str) -> Vec<&'a str> {
    tree.lines()
        .find(|l| l.contains(object))
        .unwrap_or_else(|| panic!("no {object} in\n{tree}"))
        .split_whitespace()
        .collect()
}

#[test]
fn clusterctl_describes_capstans_cluster_and_gets_its_kubeconfig() {
    let work = tempfile::tempdir().unwrap();
    let server = Serve::start_with_capi_1_running(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());

    // Available follows Ready (minReadySeconds 0) on the Machines' next status write.
    let mut tree = String::new();
    until("clusterctl's tree", Duration::from_secs(60), &log, || {
        tree = clusterctl(&kc, &["describe", "cluster", "capi-1", "--grouping=false"]);
        let machines: Vec<&str> = tree
            .lines()
            .filter(|l| l.contains("Machine default/capi-1-") && !l.contains("MachineDeployment"))
            .collect();
        // NAME, version | REPLICAS AVAILABLE READY UP-TO-DATE STATUS REASON ...
        let available = machines
            .iter()
            .filter(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.windows(4)
                    .any(|w| w == ["1", "1", "1", "0"] || w == ["1", "1", "1", "1"])
                    && l.contains("True")
            })
            .count();
        if machines.len() == 4 && available == 4 {
            Ok(())
        } else {
            Err(tree.clone())
        }
    });
    let cluster = row(&tree, "Cluster default/capi-1");
    assert!(
        cluster.contains(&"4/4") && cluster.contains(&"Available"),
        "{tree}"
    );
    let control_plane = row(&tree, "KubeadmControlPlane default/capi-1-control-plane");
    assert!(control_plane.contains(&"3/3"), "{tree}");
    let infrastructure = row(&tree, "Metal3Cluster default/capi-1");
    assert!(infrastructure.contains(&"True"), "{tree}");
    let workers = row(&tree, "MachineDeployment default/capi-1-workers");
    assert!(workers.contains(&"1/1"), "{tree}");

    // get kubeconfig: the Secret capstan wrote, as clusterctl reads it.
    let from_clusterctl = clusterctl(&kc, &["get", "kubeconfig", "capi-1"]);
    let (ok, secret) = kubectl(
        &kc,
        &[
            "get",
            "secret",
            "capi-1-kubeconfig",
            "-o",
            "jsonpath={.data.value}",
        ],
    );
    assert!(ok, "{secret}");
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(secret.trim())
        .unwrap();
    let secret_config = String::from_utf8(decoded).unwrap();
    assert!(
        secret_config.contains("server: https://"),
        "{secret_config}"
    );
    assert_eq!(from_clusterctl.trim(), secret_config.trim());
}
