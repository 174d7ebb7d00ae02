//! `capstan controllers` refuses to start where upstream Cluster API or Metal3 controllers already
//! run, unless told to (`--allow-upstream-controllers`).
//!
//! Real: `capstan controllers` as a process, kubectl, and a management cluster's API: a
//! `capstan serve --no-controllers`, and kube-apiserver v1.35.4 itself.
//! Simulated: the upstream controllers themselves — only the traces they leave in a management
//! cluster are created (the Deployment `clusterctl init` installs, a leader-election Lease renewed
//! just now); nothing runs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use support::*;

const CAPI_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: capi-controller-manager
  namespace: capi-system
spec:
  replicas: 1
  selector:
    matchLabels: {cluster.x-k8s.io/provider: cluster-api}
  template:
    metadata:
      labels: {cluster.x-k8s.io/provider: cluster-api}
    spec:
      containers:
        - name: manager
          image: registry.k8s.io/cluster-api/cluster-api-controller:v1.11.0
"#;

fn controllers(kubeconfig: &Path, extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["controllers", "--kubeconfig"])
        .arg(kubeconfig)
        .args([
            "--no-leader-election",
            "--health-listen",
            &format!("127.0.0.1:{}", free_port()),
            "--provisioning-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads stderr until `needle` (returns the text so far) or the process ends (returns `Err`
/// with its output and exit status).
fn stderr_until(child: &mut std::process::Child, needle: &str) -> Result<String, String> {
    let mut text = String::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if line.contains(needle) {
            return Ok(text);
        }
    }
    let status = child.wait().unwrap();
    Err(format!("{status}: {text}"))
}

#[test]
fn controllers_refuse_to_run_beside_upstream_ones_unless_allowed() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("serve.log");
    let server = Serve::start_with(&work.path().join("data"), &log, &["--no-controllers"]);
    refusals(&server.kubeconfig, work.path());
    drop(server);
}

/// The same against a real management cluster: kube-apiserver v1.35.4 on etcd (built by
/// `scripts/peers.sh`), holding upstream's Deployment and Lease as clusterctl's providers leave
/// them (nothing runs them: no controller manager).
#[test]
fn controllers_refuse_to_run_beside_upstream_ones_on_a_real_kube_apiserver() {
    let work = tempfile::tempdir().unwrap();
    let api = capstan_testkit::kube::KubeApiserver::start();
    refusals(&api.kubeconfig, work.path());
}

/// Starts, is refused beside clusterctl's core Deployment, starts when allowed, and is refused
/// beside a freshly renewed CAPM3 Lease once the Deployment is scaled to 0.
fn refusals(kc: &Path, work: &Path) {
    let kc = kc.to_path_buf();

    // Nothing upstream: it starts.
    let mut child = controllers(&kc, &[]);
    let started = stderr_until(&mut child, "running against");
    let _ = child.kill();
    let _ = child.wait();
    started.unwrap();

    // clusterctl's core controller Deployment: refused, naming it and the way out.
    kubectl_ok(&kc, &["create", "namespace", "capi-system"]);
    let manifest = work.join("capi.yaml");
    std::fs::write(&manifest, CAPI_DEPLOYMENT).unwrap();
    kubectl_ok(&kc, &["apply", "-f", manifest.to_str().unwrap()]);
    let mut child = controllers(&kc, &[]);
    let refused = stderr_until(&mut child, "running against").unwrap_err();
    assert!(
        refused.contains("refusing to start")
            && refused.contains("Deployment capi-system/capi-controller-manager")
            && refused.contains("--allow-upstream-controllers"),
        "{refused}"
    );
    assert!(!refused.starts_with("exit status: 0"), "{refused}");

    // Allowed: it starts and says beside what.
    let mut child = controllers(&kc, &["--allow-upstream-controllers"]);
    let started = stderr_until(&mut child, "running against");
    let _ = child.kill();
    let _ = child.wait();
    let started = started.unwrap();
    assert!(started.contains("capi-controller-manager"), "{started}");

    // Scaled to zero: no longer a reason. A CAPM3 leader-election Lease renewed just now is.
    kubectl_ok(
        &kc,
        &[
            "-n",
            "capi-system",
            "scale",
            "deployment",
            "capi-controller-manager",
            "--replicas=0",
        ],
    );
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease = format!(
        r#"
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: controller-leader-election-capm3
  namespace: capi-system
spec:
  holderIdentity: capm3-controller-manager-7d9f_0b1c
  leaseDurationSeconds: 3600
  renewTime: "{now}"
"#
    );
    let lease_file = work.join("lease.yaml");
    std::fs::write(&lease_file, lease).unwrap();
    kubectl_ok(&kc, &["apply", "-f", lease_file.to_str().unwrap()]);
    let mut child = controllers(&kc, &[]);
    let refused = stderr_until(&mut child, "running against").unwrap_err();
    assert!(
        refused.contains("Lease capi-system/controller-leader-election-capm3")
            && !refused.contains("Deployment capi-system"),
        "{refused}"
    );
}
