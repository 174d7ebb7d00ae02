//! `capstan serve` killed with SIGKILL while a cluster is being created (twice: while the first
//! control plane's host is claimed, and after its `kubeadm init` while the others join) and while
//! its control plane rolls out a new Kubernetes version, each time restarted on the same data
//! directory.
//!
//! Real: the API server and its SQLite store (what survives a SIGKILL is what it made durable),
//! every controller, the CLI and kubectl, and the kill itself. Simulated (`crates/capstan-sim`):
//! the machines (`fake://` BMCs) and the workload cluster, whose store lives in the same data
//! directory and is resumed after the restart; the simulator lists every node that ran
//! `kubeadm init` in the workload's ConfigMap `kube-system/capstan-sim-kubeadm-init`.
//!
//! Checked: the cluster converges after each restart (4 Machines Running, then the control plane
//! at the new version); no Machine that existed at a kill is lost (except outdated control-plane
//! Machines, which the rollout replaces); `kubeadm init` ran on exactly one node; and no host was
//! ever claimed twice: every change to every BareMetalHost is recorded from a watch that resumes
//! after each restart from the last resourceVersion it saw, and no host's `consumerRef` ever goes
//! from one Metal3Machine to another without being released in between, no Metal3Machine ever
//! holds two hosts, and at the end each Metal3Machine has its own host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const NEW: &str = "v1.32.1";

/// What the steps of the restart test share: nextest terminates a test after 300 s
/// (`.config/nextest.toml`), so a step stuck near the end fails with its own diagnosis (which
/// step, the objects' state, the server log) just before, instead of being killed without one.
const TEST_BUDGET: Duration = Duration::from_secs(285);

/// A deadline shared by several steps.
struct Budget {
    end: Instant,
}

impl Budget {
    fn new(total: Duration) -> Self {
        Budget {
            end: Instant::now() + total,
        }
    }

    /// `limit`, or what is left of the budget when that is less.
    fn step(&self, limit: Duration) -> Duration {
        limit.min(self.end.saturating_duration_since(Instant::now()))
    }
}

/// One observed state of a host: (resourceVersion, host, consumer).
type Sighting = (u64, String, Option<String>);

/// Records every change to BareMetalHosts from a raw watch (`kubectl get --raw`), resumable.
struct HostWatch {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
    seen: Arc<Mutex<Vec<Sighting>>>,
}

impl HostWatch {
    fn start(
        kubeconfig: &Path,
        from: u64,
        seen: Arc<Mutex<Vec<Sighting>>>,
        errors: Arc<Mutex<Vec<String>>>,
    ) -> HostWatch {
        let url = format!(
            "/apis/metal3.io/v1alpha1/baremetalhosts?watch=true&resourceVersion={from}&timeoutSeconds=3600"
        );
        let mut child = Command::new("kubectl")
            .args(["get", "--raw", &url])
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (seen_by_reader, errors_by_reader) = (seen.clone(), errors.clone());
        let reader = std::thread::spawn(move || {
            let events =
                serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>();
            for event in events {
                let Ok(event) = event else { break };
                let object = &event["object"];
                if event["type"] == "ERROR" {
                    errors_by_reader.lock().unwrap().push(object.to_string());
                    continue;
                }
                let rv: u64 = object["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let consumer = if event["type"] == "DELETED" {
                    None
                } else {
                    object["spec"]["consumerRef"]["name"]
                        .as_str()
                        .map(str::to_owned)
                };
                seen_by_reader
                    .lock()
                    .unwrap()
                    .push((rv, name(object).to_owned(), consumer));
            }
        });
        HostWatch {
            child,
            reader: Some(reader),
            seen,
        }
    }

    /// Stops the watch; returns the last resourceVersion seen.
    fn stop(mut self) -> u64 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(rv, _, _)| *rv)
            .max()
            .unwrap_or(0)
    }
}

/// The list's resourceVersion: where a watch that misses nothing starts.
fn list_version(kubeconfig: &Path) -> u64 {
    let out = kubectl_ok(
        kubeconfig,
        &["get", "--raw", "/apis/metal3.io/v1alpha1/baremetalhosts"],
    );
    let list: Value = serde_json::from_str(&out).unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// No host went from one consumer to another without a release, no consumer held two hosts.
fn check_claims(sightings: &[Sighting]) {
    let mut sorted = sightings.to_vec();
    sorted.sort_by_key(|(rv, _, _)| *rv);
    let mut current: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut host_of: BTreeMap<String, String> = BTreeMap::new();
    for (rv, host, consumer) in &sorted {
        let before = current.get(host).cloned().flatten();
        if let (Some(before), Some(now)) = (&before, consumer)
            && before != now
        {
            panic!("host {host} went from {before} to {now} without a release (rv {rv})");
        }
        if let Some(now) = consumer {
            if let Some(other) = host_of.get(now)
                && other != host
            {
                panic!("{now} claimed {other} and then {host} (rv {rv})");
            }
            host_of.insert(now.clone(), host.clone());
        }
        current.insert(host.clone(), consumer.clone());
        // At every moment, one host per consumer.
        let mut holders: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
        for (h, c) in &current {
            if let Some(c) = c {
                holders.entry(c).or_default().push(h);
            }
        }
        for (c, hosts) in holders {
            assert!(hosts.len() == 1, "{c} holds {hosts:?} at rv {rv}");
        }
    }
}

fn machine_names(kc: &Path) -> BTreeSet<String> {
    try_items(kc, "machines.v1beta2.cluster.x-k8s.io")
        .unwrap_or_default()
        .iter()
        .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
        .map(|m| name(m).to_owned())
        .collect()
}

/// `Ok` once the workload cluster of capi-1 (its kubeconfig written to `workload`) has 4 Nodes.
fn four_nodes(kc: &Path, workload: &Path) -> Result<(), String> {
    workload_kubeconfig(kc, "capi-1", workload)?;
    let nodes = try_items(workload, "nodes")?;
    if nodes.len() == 4 {
        Ok(())
    } else {
        Err(format!("{} nodes", nodes.len()))
    }
}

#[test]
fn sigkill_during_creation_and_rollout_loses_nothing_and_claims_nothing_twice() {
    let budget = Budget::new(TEST_BUDGET);
    let work = tempfile::tempdir().unwrap();
    let spec = capi_1_spec(work.path(), |text| text);
    let bundle = work.path().join("bundle");
    render(&spec, &bundle, &[]);
    let data = work.path().join("data");
    let log = work.path().join("serve.log");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));

    let server = Serve::start(&data, &log);
    let kc = server.kubeconfig.clone();
    let watch = HostWatch::start(&kc, list_version(&kc), seen.clone(), errors.clone());
    apply_bundle(&kc, &bundle);

    // Kill 1: a host is claimed, no Machine has a Node yet.
    until(
        "a host claimed before any Machine runs",
        budget.step(Duration::from_secs(120)),
        &log,
        || {
            let claimed = consumers(&kc)?;
            if !claimed.is_empty() {
                Ok(())
            } else {
                Err("no host claimed".to_owned())
            }
        },
    );
    let at_kill_1 = machine_names(&kc);
    let running = machines_running(&kc, 4).is_ok();
    assert!(!running, "the cluster came up before the first kill");
    server.sigkill();
    let rv = watch.stop();
    let server = Serve::start(&data, &log);
    let kc = server.kubeconfig.clone();
    let watch = HostWatch::start(&kc, rv, seen.clone(), errors.clone());

    // Kill 2: the control plane is initialised, the others are joining.
    until_explained(
        "one Machine Running, not all",
        budget.step(Duration::from_secs(180)),
        &log,
        || cluster_state(&kc),
        || {
            let machines = try_items(&kc, "machines.v1beta2.cluster.x-k8s.io")?;
            let running = machines
                .iter()
                .filter(|m| m["status"]["phase"] == "Running")
                .count();
            if (1..4).contains(&running) {
                Ok(())
            } else {
                Err(format!("{running} Running"))
            }
        },
    );
    let at_kill_2 = machine_names(&kc);
    server.sigkill();
    let rv = watch.stop();
    let server = Serve::start(&data, &log);
    let kc = server.kubeconfig.clone();
    let watch = HostWatch::start(&kc, rv, seen.clone(), errors.clone());

    let up = until_explained(
        "4 machines Running after the restarts",
        budget.step(Duration::from_secs(240)),
        &log,
        || cluster_state(&kc),
        || machines_running(&kc, 4),
    );
    until(
        "Cluster Provisioned",
        budget.step(Duration::from_secs(60)),
        &log,
        || cluster_provisioned(&kc, "capi-1"),
    );
    let up: BTreeSet<String> = up.iter().map(|m| name(m).to_owned()).collect();
    for (kill, before) in [(1, &at_kill_1), (2, &at_kill_2)] {
        let lost: Vec<&String> = before.difference(&up).collect();
        assert!(
            lost.is_empty(),
            "machines lost across kill {kill}: {lost:?}"
        );
    }
    let workload = work.path().join("capi-1.kubeconfig");
    until(
        "workload kubeconfig",
        budget.step(Duration::from_secs(60)),
        &log,
        || four_nodes(&kc, &workload),
    );
    let inits = kubeadm_inits(&workload).unwrap();
    assert_eq!(inits.len(), 1, "kubeadm init ran on {inits:?}");

    // Kill 3: during a rollout of the control plane (no spare host: maxSurge 0).
    kubectl_ok(
        &kc,
        &[
            "patch",
            "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
            "capi-1-control-plane",
            "--type=merge",
            "-p",
            &json!({"spec": {"version": NEW, "rollout": {"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0}}}}})
            .to_string(),
        ],
    );
    until_explained(
        "the rollout under way",
        budget.step(Duration::from_secs(180)),
        &log,
        || cluster_state(&kc),
        || {
            let machines = try_items(&kc, "machines.v1beta2.cluster.x-k8s.io")?;
            let new = machines
                .iter()
                .filter(|m| m["spec"]["version"] == NEW)
                .count();
            let deleting = machines
                .iter()
                .any(|m| m["metadata"]["deletionTimestamp"].is_string());
            if (new >= 1 || deleting) && new < 3 {
                Ok(())
            } else {
                Err(format!("{new} new machines, deleting: {deleting}"))
            }
        },
    );
    let machines_at_kill_3 = items(&kc, "machines.v1beta2.cluster.x-k8s.io");
    server.sigkill();
    let rv = watch.stop();
    let server = Serve::start(&data, &log);
    let kc = server.kubeconfig.clone();
    let watch = HostWatch::start(&kc, rv, seen.clone(), errors.clone());

    let done = until_explained(
        "the rollout finished after the restart",
        budget.step(Duration::from_secs(300)),
        &log,
        || cluster_state(&kc),
        || {
            let machines = machines_running(&kc, 4)?;
            let new = machines
                .iter()
                .filter(|m| m["spec"]["version"] == NEW)
                .count();
            if new == 3 {
                Ok(machines)
            } else {
                Err(format!("{new} of 3 control-plane machines at {NEW}"))
            }
        },
    );
    let done_names: BTreeSet<&str> = done.iter().map(name).collect();
    for machine in &machines_at_kill_3 {
        let outdated = machine["spec"]["version"] != NEW
            && machine["metadata"]["labels"]
                .get("cluster.x-k8s.io/control-plane")
                .is_some();
        assert!(
            outdated || done_names.contains(name(machine)),
            "machine {} (version {}) lost across the kill during the rollout",
            name(machine),
            machine["spec"]["version"]
        );
    }
    until(
        "4 Nodes at the end",
        budget.step(Duration::from_secs(60)),
        &log,
        || four_nodes(&kc, &workload),
    );
    let inits = kubeadm_inits(&workload).unwrap();
    assert_eq!(inits.len(), 1, "kubeadm init ran on {inits:?}");

    // The claims, as the watch saw every one of them, and as they are now.
    let now = consumers(&kc).unwrap();
    let metal3_machines: BTreeSet<String> = items(&kc, "metal3machines")
        .iter()
        .map(|m| name(m).to_owned())
        .collect();
    let rv = watch.stop();
    assert!(rv > 0);
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "the host watch failed: {errors:?}");
    let sightings = seen.lock().unwrap().clone();
    assert!(
        sightings.iter().any(|(_, _, c)| c.is_some()),
        "the watch saw no claim"
    );
    check_claims(&sightings);
    let consumed: BTreeSet<String> = now.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(
        consumed.len(),
        now.len(),
        "a Metal3Machine holds two hosts: {now:?}"
    );
    assert_eq!(consumed, metal3_machines, "hosts and Metal3Machines differ");
    drop(server);
}

#[test]
fn the_claim_check_catches_a_host_taken_over() {
    let ok: Vec<Sighting> = vec![
        (1, "h1".into(), None),
        (2, "h1".into(), Some("m1".into())),
        (3, "h1".into(), None),
        (4, "h1".into(), Some("m2".into())),
    ];
    check_claims(&ok);
    let taken_over: Vec<Sighting> = vec![
        (1, "h1".into(), Some("m1".into())),
        (2, "h1".into(), Some("m2".into())),
    ];
    assert!(std::panic::catch_unwind(|| check_claims(&taken_over)).is_err());
    let two_hosts: Vec<Sighting> = vec![
        (1, "h1".into(), Some("m1".into())),
        (2, "h2".into(), Some("m1".into())),
    ];
    assert!(std::panic::catch_unwind(|| check_claims(&two_hosts)).is_err());
}
