//! A cluster's whole life on the embedded default, in one `capstan serve --simulate-workloads`:
//! created from the capi-1 example (three more worker hosts than it needs), workers scaled 1 → 3,
//! a worker Node made NotReady and remediated by the MachineHealthCheck, workers scaled back to 1,
//! a Kubernetes version bump rolled through the KubeadmControlPlane (maxSurge 0: no spare
//! control-plane host exists) and then the MachineDeployment, and the Cluster deleted.
//!
//! Real: the API server and store, every controller (BareMetalHost, Cluster API core, kubeadm
//! bootstrap and control plane, Metal3, ClusterResourceSet, MachineHealthCheck, garbage
//! collection), `capstan render`, the CLI and kubectl. Simulated (the backend that ships in
//! capstan, `crates/capstan-sim`): the machines (`fake://` BMCs and their agent) and the workload
//! cluster — its API is a capstan API server, its Nodes register when a host is provisioned with
//! bootstrap data that runs `kubeadm init|join`, a Node reports the Kubernetes version of its
//! Machine (what its image would carry), and the NotReady Node is the simulator's `not-ready`
//! fault (annotation `sim.capstan.io/fault` on its host).
//!
//! Checked: after each step the expected Machines are Running with Nodes; the rollout replaces
//! every Machine and the new version is on Machines and Nodes, using only the hosts that exist;
//! the remediated Machine is replaced and every Node is Ready again; after deletion every host is
//! `available` and unconsumed and no object of the cluster is left (Machines, MachineSets,
//! MachineDeployments, the KubeadmControlPlane, KubeadmConfigs, Metal3Machines, Metal3Data, the
//! Metal3Cluster, the Cluster's Secrets and ConfigMaps; the hosts' own agent-session Secrets,
//! owned by the hosts, are not the cluster's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use support::*;

const OLD: &str = "v1.31.4";
const NEW: &str = "v1.32.1";

fn names(objects: &[Value]) -> BTreeSet<String> {
    objects.iter().map(|o| name(o).to_owned()).collect()
}

fn is_control_plane(machine: &Value) -> bool {
    machine["metadata"]["labels"]
        .get("cluster.x-k8s.io/control-plane")
        .is_some()
}

/// Every Node of the workload cluster Ready, `count` of them, all at `version`.
fn nodes_ready(workload: &Path, count: usize, version: &str) -> Result<(), String> {
    let nodes = try_items(workload, "nodes")?;
    let summary: Vec<String> = nodes
        .iter()
        .map(|n| {
            let ready = n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"].as_str().unwrap_or("?").to_owned())
                .unwrap_or_default();
            format!(
                "{}:{}:{}",
                name(n),
                ready,
                n["status"]["nodeInfo"]["kubeletVersion"]
                    .as_str()
                    .unwrap_or("?")
            )
        })
        .collect();
    let good = summary
        .iter()
        .filter(|s| s.ends_with(&format!(":True:{version}")))
        .count();
    if nodes.len() == count && good == count {
        Ok(())
    } else {
        Err(format!(
            "nodes (want {count} Ready at {version}): {summary:?}"
        ))
    }
}

/// Names of objects of `resource` in the management cluster.
fn object_names(kc: &Path, resource: &str) -> BTreeSet<String> {
    names(&items(kc, resource))
}

/// Names of the Secrets in the management cluster, but for the hosts' own agent sessions (owned
/// by their BareMetalHost, which stays; they come and go with the hosts' operations).
fn secret_names(kc: &Path) -> BTreeSet<String> {
    let (ok, out) = kubectl(
        kc,
        &[
            "get",
            "secrets",
            "-l",
            "!capstan.io/agent-session",
            "-o",
            "name",
        ],
    );
    assert!(ok, "{out}");
    out.lines()
        .map(|l| l.trim_start_matches("secret/").to_owned())
        .collect()
}

/// Prints how long the phase that just ended took (reported, never asserted).
fn phase(clock: &mut std::time::Instant, name: &str) {
    eprintln!("phase {name}: {:.1} s", clock.elapsed().as_secs_f64());
    *clock = std::time::Instant::now();
}

#[test]
fn a_cluster_scales_heals_upgrades_and_goes_away_leaving_nothing() {
    let mut clock = std::time::Instant::now();
    let work = tempfile::tempdir().unwrap();
    let spec = capi_1_spec(work.path(), |text| {
        let text = text.replace("unhealthyTimeoutSeconds: 300", "unhealthyTimeoutSeconds: 3");
        format!("{text}{}{}", extra_worker_host(1), extra_worker_host(2))
    });
    let bundle = work.path().join("bundle");
    render(&spec, &bundle, &[]);
    let server = Serve::start_in(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());

    let (ok, out) = capstan(
        &kc,
        &["apply", "-f", bundle.join("hosts").to_str().unwrap()],
    );
    assert!(ok, "apply hosts: {out}");
    // What exists before the cluster: after its deletion, exactly this must be left.
    let secrets_before = secret_names(&kc);
    let mut configmaps_of_bundle = object_names(&kc, "configmaps");
    configmaps_of_bundle.insert("capi-1-cilium".to_owned());
    let (ok, out) = capstan(
        &kc,
        &["apply", "-f", bundle.join("cluster").to_str().unwrap()],
    );
    assert!(ok, "apply cluster: {out}");

    wait_machines_running(&kc, &log, 4, Duration::from_secs(240));
    until("Cluster Provisioned", Duration::from_secs(60), &log, || {
        cluster_provisioned(&kc, "capi-1")
    });
    let workload = work.path().join("capi-1.kubeconfig");
    until("workload kubeconfig", Duration::from_secs(60), &log, || {
        workload_kubeconfig(&kc, "capi-1", &workload)
    });
    until("4 Nodes Ready", Duration::from_secs(60), &log, || {
        nodes_ready(&workload, 4, OLD)
    });

    phase(&mut clock, "created");
    // Bare metal has no spare control-plane host: the old machine goes before its replacement.
    kubectl_ok(
        &kc,
        &[
            "patch",
            "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
            "capi-1-control-plane",
            "--type=merge",
            "-p",
            r#"{"spec":{"rollout":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0}}}}}"#,
        ],
    );

    // Workers 1 → 3.
    kubectl_ok(
        &kc,
        &[
            "scale",
            "machinedeployment",
            "capi-1-workers",
            "--replicas=3",
        ],
    );
    wait_machines_running(&kc, &log, 6, Duration::from_secs(180));
    until("6 Nodes Ready", Duration::from_secs(60), &log, || {
        nodes_ready(&workload, 6, OLD)
    });

    phase(&mut clock, "scaled to 3");
    // A worker's kubelet stops: its Node turns NotReady, the MachineHealthCheck has the Machine
    // replaced (1 of 3 unhealthy is within maxUnhealthy 40%).
    let machines = items(&kc, "machines.v1beta2.cluster.x-k8s.io");
    let sick = machines
        .iter()
        .find(|m| !is_control_plane(m))
        .unwrap()
        .clone();
    let sick_name = name(&sick).to_owned();
    let metal3_machine = get(&kc, "metal3machines", &sick_name);
    let sick_host = items(&kc, "baremetalhosts")
        .into_iter()
        .find(|h| h["spec"]["consumerRef"]["name"] == sick_name.as_str())
        .map(|h| name(&h).to_owned())
        .unwrap_or_else(|| panic!("no host consumed by {sick_name}: {metal3_machine}"));
    kubectl_ok(
        &kc,
        &[
            "annotate",
            "baremetalhost",
            &sick_host,
            "sim.capstan.io/fault=not-ready",
        ],
    );
    until(
        "the NotReady worker's Machine deleted",
        Duration::from_secs(120),
        &log,
        || {
            let machines = try_items(&kc, "machines.v1beta2.cluster.x-k8s.io")?;
            match machines.iter().find(|m| name(m) == sick_name) {
                None => Ok(()),
                Some(m) if m["metadata"]["deletionTimestamp"].is_string() => Ok(()),
                Some(m) => Err(format!(
                    "{sick_name}: conditions {}",
                    m["status"]["conditions"]
                )),
            }
        },
    );
    // The kubelet is repaired (the host may be chosen again by the replacement).
    kubectl_ok(
        &kc,
        &[
            "annotate",
            "baremetalhost",
            &sick_host,
            "sim.capstan.io/fault-",
        ],
    );
    let healed = until(
        "6 machines Running after remediation",
        Duration::from_secs(180),
        &log,
        || machines_running(&kc, 6),
    );
    assert!(
        !names(&healed).contains(&sick_name),
        "the remediated machine {sick_name} is still there"
    );
    until(
        "6 Nodes Ready after remediation",
        Duration::from_secs(60),
        &log,
        || nodes_ready(&workload, 6, OLD),
    );
    let mhc = get(
        &kc,
        "machinehealthchecks.v1beta2.cluster.x-k8s.io",
        "capi-1-workers",
    );
    assert_eq!(mhc["status"]["expectedMachines"], 3, "{}", mhc["status"]);

    phase(&mut clock, "remediated");
    // Workers 3 → 1: two worker hosts free again.
    kubectl_ok(
        &kc,
        &[
            "scale",
            "machinedeployment",
            "capi-1-workers",
            "--replicas=1",
        ],
    );
    wait_machines_running(&kc, &log, 4, Duration::from_secs(180));
    until(
        "two worker hosts available",
        Duration::from_secs(120),
        &log,
        || {
            let available = try_items(&kc, "baremetalhosts")?
                .iter()
                .filter(|h| h["status"]["provisioning"]["state"] == "available")
                .count();
            if available == 2 {
                Ok(())
            } else {
                Err(format!("{available} hosts available"))
            }
        },
    );
    until("4 Nodes Ready", Duration::from_secs(60), &log, || {
        nodes_ready(&workload, 4, OLD)
    });

    phase(&mut clock, "scaled to 1");
    // The version bump: the control plane first, one machine at a time on its three hosts.
    let before = names(&items(&kc, "machines.v1beta2.cluster.x-k8s.io"));
    kubectl_ok(
        &kc,
        &[
            "patch",
            "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
            "capi-1-control-plane",
            "--type=merge",
            "-p",
            &json!({"spec": {"version": NEW}}).to_string(),
        ],
    );
    until(
        "the control plane rolled out",
        Duration::from_secs(300),
        &log,
        || {
            let machines = machines_running(&kc, 4)?;
            let new: Vec<&Value> = machines
                .iter()
                .filter(|m| is_control_plane(m) && m["spec"]["version"] == NEW)
                .collect();
            if new.len() == 3 && new.iter().all(|m| !before.contains(name(m))) {
                Ok(())
            } else {
                Err(format!("{} of 3 control-plane machines new", new.len()))
            }
        },
    );
    let kcp = get(
        &kc,
        "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
        "capi-1-control-plane",
    );
    assert_eq!(kcp["status"]["upToDateReplicas"], 3, "{}", kcp["status"]);
    assert_eq!(kcp["status"]["version"], NEW, "{}", kcp["status"]);
    phase(&mut clock, "control plane rolled out");
    kubectl_ok(
        &kc,
        &[
            "patch",
            "machinedeployments.v1beta2.cluster.x-k8s.io",
            "capi-1-workers",
            "--type=merge",
            "-p",
            &json!({"spec": {"template": {"spec": {"version": NEW}}}}).to_string(),
        ],
    );
    let upgraded = until(
        "the workers rolled out",
        Duration::from_secs(240),
        &log,
        || {
            let machines = machines_running(&kc, 4)?;
            let old: Vec<&str> = machines
                .iter()
                .filter(|m| m["spec"]["version"] != NEW || before.contains(name(m)))
                .map(name)
                .collect();
            if old.is_empty() {
                Ok(machines)
            } else {
                Err(format!("not replaced yet: {old:?}"))
            }
        },
    );
    until(
        "4 Nodes Ready at the new version",
        Duration::from_secs(60),
        &log,
        || nodes_ready(&workload, 4, NEW),
    );
    for machine in &upgraded {
        assert_eq!(machine["spec"]["version"], NEW, "{}", name(machine));
    }
    let hosts = items(&kc, "baremetalhosts");
    assert_eq!(hosts.len(), 6, "the rollout needed no new host");

    phase(&mut clock, "workers rolled out");
    // Deletion: every host back, nothing of the cluster left.
    let (ok, out) = capstan(&kc, &["delete", "cluster", "capi-1", "--timeout", "300"]);
    assert!(ok, "delete cluster: {out}");
    until(
        "nothing of the cluster left",
        Duration::from_secs(180),
        &log,
        || {
            let mut left = Vec::new();
            for resource in [
                "clusters.v1beta2.cluster.x-k8s.io",
                "machines.v1beta2.cluster.x-k8s.io",
                "machinesets.v1beta2.cluster.x-k8s.io",
                "machinedeployments.v1beta2.cluster.x-k8s.io",
                "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
                "kubeadmconfigs.v1beta2.bootstrap.cluster.x-k8s.io",
                "metal3clusters",
                "metal3machines",
                "metal3datas",
                "metal3dataclaims",
                "clusterresourcesetbindings",
            ] {
                for object in try_items(&kc, resource)? {
                    left.push(format!("{resource}/{}", name(&object)));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    );
    let hosts = until(
        "every host available",
        Duration::from_secs(180),
        &log,
        || hosts_in(&kc, "available"),
    );
    for host in &hosts {
        for field in ["consumerRef", "userData", "image"] {
            assert!(
                host["spec"][field].is_null(),
                "{} still has {field}: {}",
                name(host),
                host["spec"][field]
            );
        }
    }
    let secrets_after = until(
        "no Secret of the cluster left",
        Duration::from_secs(60),
        &log,
        || {
            let after = secret_names(&kc);
            if after == secrets_before {
                Ok(after)
            } else {
                Err(format!(
                    "left: {:?}; gone: {:?}",
                    after.difference(&secrets_before).collect::<Vec<_>>(),
                    secrets_before.difference(&after).collect::<Vec<_>>()
                ))
            }
        },
    );
    assert_eq!(secrets_after, secrets_before);
    // The ClusterResourceSet's ConfigMap is the bundle's (deleted with `capstan delete -f`);
    // nothing the controllers made (the init lock) is left.
    let configmaps_after = object_names(&kc, "configmaps");
    let extra: Vec<&String> = configmaps_after.difference(&configmaps_of_bundle).collect();
    assert!(extra.is_empty(), "ConfigMaps left: {extra:?}");
    phase(&mut clock, "deleted");
    drop(server);
}
