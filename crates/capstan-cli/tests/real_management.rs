//! `capstan controllers` on a real management cluster: kube-apiserver v1.35.4 on etcd v3.6.6 (built
//! by `scripts/peers.sh` from Go modules, processes on loopback), capstan's CRDs installed with the
//! real kubectl v1.35.4, the capi-1 bundle applied with `capstan apply`, and the controllers taking it
//! to 4 Machines Running with leader election on a real Lease.
//!
//! Real: kube-apiserver, etcd, kubectl, capstan's CLI and controllers. Simulated: the machines
//! (`fake://` BMCs) and the workload clusters (`--simulate-workloads`: capstan plays their API
//! servers, Nodes and etcd), as in the README's main job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_testkit::kube::KubeApiserver;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

/// A `capstan controllers` process, killed with SIGKILL when dropped.
struct Controllers(Child);

impl Drop for Controllers {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real kube-apiserver with `capstan crds` installed and established, and the capi-1 bundle
/// (`--api-version v1beta2`, `fake://` hosts) rendered into the returned directory.
fn management_cluster() -> (KubeApiserver, tempfile::TempDir, PathBuf) {
    let api = KubeApiserver::start();
    let work = tempfile::tempdir().unwrap();
    // `capstan crds`, applied as a platform team would apply any provider's CRDs.
    let (ok, crds) = capstan(Path::new("/dev/null"), &["crds"]);
    assert!(ok, "capstan crds: {crds}");
    let crds_file = work.path().join("crds.yaml");
    std::fs::write(&crds_file, &crds).unwrap();
    api.kubectl_ok(&["apply", "--server-side", "-f", crds_file.to_str().unwrap()]);
    api.kubectl_ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout",
        "60s",
        "crd",
        "--all",
    ]);
    let bundle = work.path().join("capi-1");
    render(
        &capi_1_spec(work.path(), |text| text),
        &bundle,
        &["--api-version", "v1beta2"],
    );
    (api, work, bundle)
}

fn controllers(kubeconfig: &Path, log: &Path) -> Controllers {
    controllers_with(kubeconfig, log, &[])
}

fn controllers_with(kubeconfig: &Path, log: &Path, extra: &[&str]) -> Controllers {
    let health = format!("127.0.0.1:{}", free_port());
    let provisioning = format!("127.0.0.1:{}", free_port());
    let out = std::fs::File::create(log).unwrap();
    Controllers(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controllers", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--simulate-workloads", "--health-listen", &health])
            .args(["--provisioning-listen", &provisioning])
            .args(extra)
            .env("NO_COLOR", "1")
            .env("CAPSTAN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap(),
    )
}

#[test]
fn capi_1_comes_up_on_a_real_kube_apiserver() {
    let (api, work, bundle) = management_cluster();
    let kubeconfig = api.kubeconfig.clone();

    let log = work.path().join("controllers.log");
    let _controllers = controllers(&kubeconfig, &log);
    apply_bundle(&kubeconfig, &bundle);

    let machines = wait_machines_running(&kubeconfig, &log, 4, Duration::from_secs(300));
    let nodes: Vec<&str> = machines
        .iter()
        .map(|m| m["status"]["nodeRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 4, "{nodes:?}");
    for machine in &machines {
        let provider_id = machine["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(provider_id.starts_with("metal3://"), "{provider_id}");
    }

    // Every host was provisioned exactly once: each is provisioned and consumed by one Machine.
    let hosts = items(&kubeconfig, "baremetalhosts");
    assert_eq!(hosts.len(), 4);
    for host in &hosts {
        assert_eq!(
            host["status"]["provisioning"]["state"],
            "provisioned",
            "{}",
            name(host)
        );
        assert!(
            host["spec"]["consumerRef"]["name"].is_string(),
            "{}",
            name(host)
        );
    }

    // The control plane is initialised and its (simulated) etcd has one healthy member per
    // control-plane Node.
    let kcp = &items(
        &kubeconfig,
        "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
    )[0];
    let etcd = condition(kcp, "EtcdClusterHealthy").expect("EtcdClusterHealthy");
    assert_eq!(etcd["status"], "True", "{etcd}");
    assert_eq!(kcp["status"]["readyReplicas"], 3, "{}", kcp["status"]);

    // The leader holds a real Lease in the real API server.
    let leases = api.kubectl_ok(&["get", "leases", "-A", "-o", "name"]);
    assert!(
        leases.contains("capstan"),
        "no capstan Lease among: {leases}"
    );

    // The cluster's kubeconfig Secret and CA were written into the real management cluster.
    let secrets = api.kubectl_ok(&["get", "secrets", "-o", "name"]);
    for secret in ["capi-1-kubeconfig", "capi-1-ca", "capi-1-etcd"] {
        assert!(
            secrets.contains(&format!("secret/{secret}")),
            "{secret} missing: {secrets}"
        );
    }
}

/// The identity in the Lease `kube-system/capstan-controllers`, once someone holds it.
fn lease_holder(api: &KubeApiserver) -> Result<String, String> {
    let out = api.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        "capstan-controllers",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    let holder = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !holder.is_empty() {
        Ok(holder)
    } else {
        Err(format!(
            "no holder yet: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Two `capstan controllers` on one real management cluster; the leader is SIGKILLed while the
/// cluster is being created, after `kubeadm init` and while the other control planes join. The
/// other takes over the Lease and finishes: 4 Machines Running, every Machine that existed at the
/// kill kept, `kubeadm init` on exactly one node, each host claimed by exactly one Metal3Machine.
#[test]
fn the_standby_takes_over_when_the_leader_is_killed_mid_creation() {
    let (api, work, bundle) = management_cluster();
    let kubeconfig = api.kubeconfig.clone();
    // Both play the workload clusters from one directory, so the one that takes over resumes the
    // simulated clusters the other started (as a real workload cluster outlives its controllers).
    let workloads = work.path().join("workloads");
    let workloads_flag = ["--workloads-dir", workloads.to_str().unwrap()];
    let logs = [work.path().join("a.log"), work.path().join("b.log")];
    let mut running = vec![
        Some(controllers_with(&kubeconfig, &logs[0], &workloads_flag)),
        Some(controllers_with(&kubeconfig, &logs[1], &workloads_flag)),
    ];
    let holder = until("a leader", Duration::from_secs(60), &logs[0], || {
        lease_holder(&api)
    });
    let leader = until(
        "the Lease holder's log saying so",
        Duration::from_secs(30),
        &logs[0],
        || {
            logs.iter()
                .position(|log| {
                    std::fs::read_to_string(log)
                        .unwrap_or_default()
                        .lines()
                        .any(|line| line.contains("became leader") && line.contains(&holder))
                })
                .ok_or_else(|| format!("no log names {holder} as leader"))
        },
    );
    let standby = 1 - leader;

    apply_bundle(&kubeconfig, &bundle);
    // Mid-creation: the first control plane has its Node (kubeadm init ran), the rest do not yet.
    let before = until(
        "kubeadm init on the first control plane",
        Duration::from_secs(120),
        &logs[leader],
        || {
            let machines = try_items(&kubeconfig, "machines.v1beta2.cluster.x-k8s.io")?;
            let with_node = machines
                .iter()
                .filter(|m| m["status"]["nodeRef"]["name"].is_string())
                .count();
            if (1..4).contains(&with_node) {
                Ok(machines)
            } else {
                Err(format!("{with_node} Machines with a Node"))
            }
        },
    );
    let names_before: Vec<String> = before.iter().map(|m| name(m).to_owned()).collect();
    // Dropping a Controllers sends SIGKILL (`Child::kill`) and reaps it.
    drop(running[leader].take());

    let new_holder = until(
        "the standby holding the Lease",
        Duration::from_secs(60),
        &logs[standby],
        || {
            lease_holder(&api).and_then(|h| {
                if h == holder {
                    Err(format!("still {h}"))
                } else {
                    Ok(h)
                }
            })
        },
    );
    until(
        "the standby's log saying it leads",
        Duration::from_secs(30),
        &logs[standby],
        || {
            let log = std::fs::read_to_string(&logs[standby]).unwrap_or_default();
            log.lines()
                .any(|line| line.contains("became leader") && line.contains(&new_holder))
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );

    let machines = wait_machines_running(&kubeconfig, &logs[standby], 4, Duration::from_secs(240));
    let names_after: Vec<&str> = machines.iter().map(name).collect();
    for machine in &names_before {
        assert!(
            names_after.contains(&machine.as_str()),
            "Machine {machine} existed at the kill and is gone: {names_after:?}"
        );
    }
    let claims = consumers(&kubeconfig).unwrap();
    let metal3_machines: std::collections::BTreeSet<&str> =
        claims.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(claims.len(), 4, "{claims:?}");
    assert_eq!(
        metal3_machines.len(),
        4,
        "a Metal3Machine holds two hosts: {claims:?}"
    );

    let workload = work.path().join("capi-1.kubeconfig");
    until(
        "the workload kubeconfig",
        Duration::from_secs(30),
        &logs[standby],
        || workload_kubeconfig(&kubeconfig, "capi-1", &workload),
    );
    let inits = until(
        "the kubeadm init record",
        Duration::from_secs(30),
        &logs[standby],
        || kubeadm_inits(&workload),
    );
    assert_eq!(inits.len(), 1, "kubeadm init ran on {inits:?}");
    drop(running);
}
