//! Memory of many simulated workload clusters: starts `SIM_CLUSTERS` (default 100) clusters, each
//! with a control-plane Node (static pods, kubeadm-config, etcd member) and three workers, and
//! prints the process's resident memory. A measurement, not an assertion: run it with
//! `cargo test -p capstan-sim --release --test scale -- --ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_sim::cloud_config;
use capstan_sim::workload::SimCluster;
use capstan_workload::ClusterKey;
use serde_json::{Map, Value, json};

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run explicitly"]
async fn memory_of_many_simulated_clusters() {
    let count: usize = std::env::var("SIM_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let before = resident_kib();
    let meta: Map<String, Value> = json!({"uuid": "u", "name": "n", "hostname": "n"})
        .as_object()
        .cloned()
        .unwrap();
    let init = "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    kind: ClusterConfiguration\n    kubernetesVersion: v1.30.2\n    ---\n    kind: InitConfiguration\nruncmd: [kubeadm init]\n";
    let join = "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    kind: JoinConfiguration\nruncmd: [kubeadm join]\n";
    let init = cloud_config::read(init.as_bytes(), &meta).unwrap();
    let join = cloud_config::read(join.as_bytes(), &meta).unwrap();
    let started = std::time::Instant::now();
    let mut clusters = Vec::with_capacity(count);
    for i in 0..count {
        let cluster = SimCluster::start(
            ClusterKey::new("default", format!("c{i}")),
            Some(dir.path()),
        )
        .await
        .unwrap();
        if std::env::var_os("SIM_EMPTY").is_some() {
            clusters.push(cluster);
            continue;
        }
        cluster.write_kubeadm_config(&init).await.unwrap();
        cluster
            .register_node("cp-0", &init, true, &[])
            .await
            .unwrap();
        cluster
            .start_static_pods("cp-0", Some("v1.30.2"))
            .await
            .unwrap();
        cluster.add_member("cp-0");
        for w in 0..3 {
            cluster
                .register_node(&format!("w-{w}"), &join, false, &[])
                .await
                .unwrap();
        }
        clusters.push(cluster);
    }
    let after = resident_kib();
    eprintln!(
        "{count} simulated clusters (1 control plane + 3 workers each) in {:?}: RSS {} MiB before, {} MiB after, {} KiB per cluster",
        started.elapsed(),
        before / 1024,
        after / 1024,
        (after.saturating_sub(before)) / count.max(1) as u64,
    );
    assert_eq!(clusters.len(), count);
}
