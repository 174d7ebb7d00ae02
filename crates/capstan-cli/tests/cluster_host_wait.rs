//! An upgrade that cannot proceed says why: a one-control-plane cluster on exactly one
//! BareMetalHost is asked for a new Kubernetes version. The rollout (maxSurge 1, the default, and
//! the only choice with one replica) adds a Machine before removing the old one, and no host is
//! left for it. capstan must say so where people look — the new Metal3Machine's
//! `AssociateBareMetalHost` condition (what upstream CAPM3 reports), the KubeadmControlPlane's
//! `MachinesReady` and `RollingOut` conditions, and `capstan describe cluster`'s root cause with
//! what to add — while the Cluster stays available. Then a host is added and the upgrade
//! completes, which shows the wait was for the host alone.
//!
//! Real: the API server and store, every controller, the CLI and kubectl. Simulated
//! (`crates/capstan-sim`): the machines (`fake://` BMCs) and the workload cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::*;

const OLD: &str = "v1.31.4";
const NEW: &str = "v1.32.1";
const KCP: &str = "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io";
const MACHINES: &str = "machines.v1beta2.cluster.x-k8s.io";

/// capi-1 cut down to one control-plane replica on its first host, without workers.
fn one_host_spec(dir: &Path) -> std::path::PathBuf {
    capi_1_spec(dir, |text| {
        let text = text
            .replacen("  replicas: 3", "  replicas: 1", 1)
            .replace("workerPools:\n  - name: workers\n    replicas: 1\n", "");
        let cut = text.find("\n  - name: capi-1-cp-1").unwrap();
        let text = text[..cut].to_owned() + "\n";
        assert!(!text.contains("workerPools"), "{text}");
        text
    })
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// `k=v` for each of the host's labels a Metal3Machine's `matchLabels` names.
fn selector_pairs(metal3_machine: &Value) -> Vec<String> {
    metal3_machine["spec"]["hostSelector"]["matchLabels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// A BareMetalHost with `labels` and a `fake://` BMC, with its BMC Secret.
fn host_manifest(name: &str, labels: &Value) -> String {
    let objects = [
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc-secret"), "namespace": "default"},
            "stringData": {"username": "admin", "password": "password"},
        }),
        json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {
                "online": true,
                "bmc": {
                    "address": format!("fake://capi-1/{name}"),
                    "credentialsName": format!("{name}-bmc-secret"),
                },
            },
        }),
    ];
    capstan_manifest::to_yaml_documents(&objects)
}

#[test]
fn an_upgrade_without_a_spare_host_says_it_waits_for_one_and_completes_once_one_is_added() {
    let work = tempfile::tempdir().unwrap();
    let spec = one_host_spec(work.path());
    let bundle = work.path().join("bundle");
    render(&spec, &bundle, &[]);
    let server = Serve::start_with_bundle(work.path(), &bundle);
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    let explain = || cluster_state(&kc);
    let old = until_explained(
        "1 machine Running",
        Duration::from_secs(240),
        &log,
        explain,
        || machines_running(&kc, 1),
    );
    let old_machine = name(&old[0]).to_owned();
    assert_eq!(old[0]["spec"]["version"], OLD);
    until("Cluster Provisioned", Duration::from_secs(60), &log, || {
        cluster_provisioned(&kc, "capi-1")
    });
    let hosts = items(&kc, "baremetalhosts");
    assert_eq!(hosts.len(), 1, "exactly one host: {hosts:?}");

    // The version bump: a new Machine first, which finds no host.
    kubectl_ok(
        &kc,
        &[
            "patch",
            KCP,
            "capi-1-control-plane",
            "--type=merge",
            "-p",
            &json!({"spec": {"version": NEW}}).to_string(),
        ],
    );
    let new_machine = until_explained(
        "the surge Machine",
        Duration::from_secs(60),
        &log,
        explain,
        || {
            let machines = try_items(&kc, MACHINES)?;
            machines
                .iter()
                .find(|m| name(m) != old_machine)
                .map(|m| name(m).to_owned())
                .ok_or_else(|| format!("{} machines", machines.len()))
        },
    );

    // The Metal3Machine says no host matches, with the selector and the counts.
    let metal3_machine = until_explained(
        "the Metal3Machine reports that no host is available",
        Duration::from_secs(120),
        &log,
        explain,
        || {
            let m3m = get(&kc, "metal3machines", &new_machine);
            let associate = condition(&m3m, "AssociateBareMetalHost")
                .ok_or_else(|| format!("no AssociateBareMetalHost condition: {}", m3m["status"]))?;
            if associate["status"] == "False"
                && associate["reason"] == "AssociateBareMetalHostFailed"
            {
                Ok(m3m)
            } else {
                Err(associate.to_string())
            }
        },
    );
    let pairs = selector_pairs(&metal3_machine);
    assert!(!pairs.is_empty(), "{}", metal3_machine["spec"]);
    let associate = condition(&metal3_machine, "AssociateBareMetalHost").unwrap();
    let message = text(&associate["message"]);
    assert!(
        message.starts_with("no available BareMetalHost"),
        "{message}"
    );
    for pair in &pairs {
        assert!(message.contains(pair.as_str()), "{pair} in {message}");
    }
    assert!(
        message
            .contains("1 BareMetalHost in namespace default, 1 matching: 0 available, 1 claimed"),
        "{message}"
    );

    // The control plane says its rollout waits on that Machine, and why.
    let (ready_message, rolling_message) = until_explained(
        "the KubeadmControlPlane reports the rollout waiting on the Machine",
        Duration::from_secs(120),
        &log,
        explain,
        || {
            let kcp = get(&kc, KCP, "capi-1-control-plane");
            let ready = condition(&kcp, "MachinesReady").ok_or("no MachinesReady")?;
            let rolling = condition(&kcp, "RollingOut").ok_or("no RollingOut")?;
            let ready_message = text(&ready["message"]);
            let rolling_message = text(&rolling["message"]);
            if ready["status"] == "False"
                && ready_message.contains(&new_machine)
                && ready_message.contains("NoAvailableHost")
                && rolling["status"] == "True"
                && rolling_message.contains(&format!("waits for Machine {new_machine}"))
                && rolling_message.contains("NoAvailableHost")
            {
                Ok((ready_message.to_owned(), rolling_message.to_owned()))
            } else {
                Err(format!("MachinesReady {ready}, RollingOut {rolling}"))
            }
        },
    );

    eprintln!("MachinesReady: {ready_message}\nRollingOut: {rolling_message}");

    // describe names the cause and what to add, though the Cluster is available.
    let described = until_explained(
        "describe cluster shows the root cause",
        Duration::from_secs(60),
        &log,
        explain,
        || {
            let (ok, out) = capstan(&kc, &["describe", "cluster", "capi-1"]);
            if ok
                && out.contains("★ Root cause")
                && out.contains(&format!("Metal3Machine/{new_machine}"))
                && out.contains("waits for a host")
            {
                Ok(out)
            } else {
                Err(out)
            }
        },
    );
    eprintln!("{described}");
    let cluster = get(&kc, "clusters.v1beta2.cluster.x-k8s.io", "capi-1");
    assert_eq!(
        condition(&cluster, "Available").unwrap()["status"],
        "True",
        "the Cluster stays available while it waits: {}",
        cluster["status"]
    );
    let cause = described
        .split("★ Root cause")
        .nth(1)
        .unwrap()
        .split("★ Machine timelines")
        .next()
        .unwrap();
    assert!(
        cause.contains(&format!(
            "Metal3Machine/{new_machine}\n    NoAvailableHost: no available BareMetalHost"
        )),
        "{cause}"
    );
    // What to do, on its own line: the host to add, and that maxSurge 0 is no way out here.
    let hint = cause
        .lines()
        .find_map(|l| l.strip_prefix("    → "))
        .unwrap_or_else(|| panic!("no hint: {cause}"));
    assert!(
        hint.starts_with(&format!(
            "KubeadmControlPlane/capi-1-control-plane's rollout waits for a host for Machine/{new_machine}:"
        )),
        "{hint}"
    );
    assert!(
        hint.contains("Add a BareMetalHost matching matchLabels {"),
        "{hint}"
    );
    for pair in &pairs {
        assert!(hint.contains(pair.as_str()), "{pair} in {hint}");
    }
    assert!(
        hint.contains("(maxSurge 0) needs 3 or more replicas"),
        "what maxSurge 0 would need: {hint}"
    );
    let (ok, json_out) = capstan(&kc, &["describe", "cluster", "capi-1", "-o", "json"]);
    assert!(ok, "{json_out}");
    let data: Value = serde_json::from_str(&json_out).unwrap();
    let hints: Vec<&str> = data["rootCauses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["hint"].as_str())
        .collect();
    assert_eq!(hints, [hint], "{data}");

    // A host with the same labels: the rollout goes on and completes.
    let labels = hosts[0]["metadata"]["labels"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "cluster.x-k8s.io/cluster-name")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<serde_json::Map<_, _>>();
    let extra = work.path().join("extra-host.yaml");
    std::fs::write(&extra, host_manifest("capi-1-cp-1", &Value::Object(labels))).unwrap();
    let (ok, out) = capstan(&kc, &["apply", "-f", extra.to_str().unwrap()]);
    assert!(ok, "apply extra host: {out}");
    until_explained(
        "the upgrade completed on the added host",
        Duration::from_secs(240),
        &log,
        explain,
        || {
            let machines = machines_running(&kc, 1)?;
            let machine = &machines[0];
            if name(machine) == new_machine && machine["spec"]["version"] == NEW {
                Ok(())
            } else {
                Err(format!(
                    "{} at {}",
                    name(machine),
                    machine["spec"]["version"]
                ))
            }
        },
    );
    until_explained(
        "the KubeadmControlPlane settled at the new version",
        Duration::from_secs(60),
        &log,
        explain,
        || {
            let kcp = get(&kc, KCP, "capi-1-control-plane");
            let status = &kcp["status"];
            let rolling = condition(&kcp, "RollingOut").cloned().unwrap_or_default();
            let ready = condition(&kcp, "MachinesReady")
                .cloned()
                .unwrap_or_default();
            if status["version"] == NEW
                && status["upToDateReplicas"] == 1
                && status["replicas"] == 1
                && rolling["status"] == "False"
                && ready["status"] == "True"
            {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    );
    let m3m = get(&kc, "metal3machines", &new_machine);
    let associate = condition(&m3m, "AssociateBareMetalHost").unwrap();
    assert_eq!(associate["status"], "True", "{associate}");
    let (ok, out) = capstan(&kc, &["describe", "cluster", "capi-1"]);
    assert!(ok, "{out}");
    assert!(!out.contains("★ Root cause"), "{out}");
}
