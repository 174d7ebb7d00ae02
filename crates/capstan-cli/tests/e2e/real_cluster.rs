//! A cluster on real virtual machines whose bootstrap data is run by real cloud-init.
//!
//! Real: three QEMU machines (software emulation) behind sushy-tools' Redfish emulator, inspected
//! and provisioned by `capstan serve` through the provisioning ramdisk; the Debian image `capstan
//! ramdisk cloud-image` builds (Debian's kernel, systemd and cloud-init 22.4), written to their disks
//! with a config drive; cloud-init reading that config drive and running the KubeadmConfig
//! user-data capstan rendered (`## template: jinja`, write_files, users, runcmd wrapped in the step
//! runner, which reports each step to the provisioning server with curl); and every controller
//! of the management side (Cluster API core, kubeadm bootstrap and control plane, Metal3).
//!
//! Stand-ins, because no registry here ships kubeadm, kubelet or kube-apiserver:
//! - `kubeadm` in the image is capstan's TEST STAND-IN (`kubeadm-standin.py`): it checks the
//!   kubeadm configuration cloud-init wrote and, on `init`, registers the first Node with a client
//!   certificate it signs with the cluster CA key the bootstrap data put on the node (and uploads
//!   `kubeadm-config` and `cluster-info`); on `join`, it verifies the cluster CA against
//!   `caCertHashes` and registers the Node with the bootstrap token.
//! - The workload cluster's API server is a capstan API server: `serve --simulate-workloads`
//!   starts it for a cluster of real machines and serves it on `127.0.0.1:<endpoint port>`, which
//!   the guests reach as the control-plane endpoint `10.0.2.2:<port>` (QEMU's user network). For
//!   real machines nothing else is simulated: no Node, token, static pod or etcd member.
//!
//! Checked, from inside the machines (their serial consoles, where the image's reporter prints what
//! the bootstrap data left behind once cloud-init is done): every write_files entry with its mode
//! and owner (keys 0600, the test's files with their content's digest), the user, the
//! preKubeadmCommands → kubeadm → postKubeadmCommands in that order, the
//! `bootstrap-success.complete` sentinel. From the management side: the Cluster is Provisioned
//! with its control plane and worker Machines Running (Nodes found by providerID), each
//! KubeadmConfig's steps all reported as succeeded, and a third Machine whose preKubeadmCommand
//! fails shows `BootstrapCommandFailed` on its BootstrapConfigReady condition with the command and
//! its output (cloud-init runs the later steps anyway, as it does for upstream's bootstrap data, so
//! that machine joins too; the condition stays False). Phase times are printed (`--nocapture`).

use super::{PASSWORD, apply, build_ramdisk, capstan, capstan_bin, kubectl_json};
use crate::testbed::{self, Libvirt, Serve, Sushy, Vm};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const CLUSTER: &str = "rv";
/// The test's own file among the bootstrap data, with its mode.
const MARKER_PATH: &str = "/etc/capstan-e2e/marker.txt";
const MARKER_CONTENT: &str = "written by cloud-init from capstan's bootstrap data\n";
const USER: &str = "e2e-ops";
/// What the failing preKubeadmCommand prints before it fails.
const FAULT_OUTPUT: &str = "e2e fault: /var/lib/etcd is not on its own disk";

/// A BareMetalHost with its BMC Secret, labelled with its role for the machine templates.
pub fn host_yaml(name: &str, address: &str, mac: &str, role: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: {name}-bmc
stringData:
  username: admin
  password: {PASSWORD}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: {name}
  labels:
    e2e.capstan.dev/role: {role}
spec:
  online: true
  bootMACAddress: "{mac}"
  bmc:
    address: {address}
    credentialsName: {name}-bmc
"#
    )
}

/// The commands a bootstrap runs, each announcing itself on the console so their order is seen.
fn announce(what: &str) -> String {
    format!("echo \"capstan-e2e: {what} as $(id -un)\" > /dev/console")
}

fn machine_template(name: &str, role: &str, image_url: &str, checksum: &str) -> String {
    format!(
        r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: {name}
spec:
  template:
    spec:
      image:
        url: {image_url}
        checksum: {checksum}
        checksumType: sha256
        format: qcow2
      hostSelector:
        matchLabels:
          e2e.capstan.dev/role: {role}
"#
    )
}

fn worker_pool(name: &str, pre_commands: &[String]) -> String {
    let pre: String = pre_commands
        .iter()
        .map(|c| format!("        - {}\n", serde_json::to_string(c).unwrap()))
        .collect();
    format!(
        r#"apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: {name}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: "{{{{ ds.meta_data.name }}}}"
          kubeletExtraArgs:
            node-labels: metal3.io/uuid={{{{ ds.meta_data.uuid }}}}
      preKubeadmCommands:
{pre}      postKubeadmCommands:
        - {post}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {name}
spec:
  clusterName: {CLUSTER}
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: {name}
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: {name}
    spec:
      clusterName: {CLUSTER}
      version: v1.31.4
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {name}
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: {name}
"#,
        post = serde_json::to_string(&announce(&format!("{name} post 1"))).unwrap(),
    )
}

fn cluster_yaml(api_port: u16, image_url: &str, checksum: &str) -> String {
    let marker = MARKER_CONTENT.trim_end();
    let pre1 = serde_json::to_string(&announce("control plane pre 1")).unwrap();
    let pre2 = serde_json::to_string(&format!(
        "test -f {MARKER_PATH} && {}",
        announce("control plane pre 2 (marker present)")
    ))
    .unwrap();
    let post1 = serde_json::to_string(&announce("control plane post 1")).unwrap();
    let mut yaml = format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: {CLUSTER}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: [10.244.0.0/16]
  controlPlaneEndpoint:
    host: 10.0.2.2
    port: {api_port}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: {CLUSTER}-control-plane
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3Cluster
    name: {CLUSTER}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Cluster
metadata:
  name: {CLUSTER}
spec:
  controlPlaneEndpoint:
    host: 10.0.2.2
    port: {api_port}
  cloudProviderEnabled: false
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: {CLUSTER}-control-plane
spec:
  replicas: 1
  version: v1.31.4
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: Metal3MachineTemplate
      name: {CLUSTER}-control-plane
  kubeadmConfigSpec:
    initConfiguration:
      nodeRegistration:
        name: "{{{{ ds.meta_data.name }}}}"
        kubeletExtraArgs:
          node-labels: metal3.io/uuid={{{{ ds.meta_data.uuid }}}}
    joinConfiguration:
      nodeRegistration:
        name: "{{{{ ds.meta_data.name }}}}"
        kubeletExtraArgs:
          node-labels: metal3.io/uuid={{{{ ds.meta_data.uuid }}}}
    files:
      - path: {MARKER_PATH}
        owner: root:adm
        permissions: "0640"
        content: |
          {marker}
    users:
      - name: {USER}
        shell: /bin/bash
        groups: adm
        sudo: ALL=(ALL) NOPASSWD:ALL
    preKubeadmCommands:
      - {pre1}
      - {pre2}
    postKubeadmCommands:
      - {post1}
---
"#
    );
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-control-plane"),
        "control-plane",
        image_url,
        checksum,
    ));
    yaml.push_str("---\n");
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-workers"),
        "worker",
        image_url,
        checksum,
    ));
    yaml.push_str("---\n");
    yaml.push_str(&worker_pool(
        &format!("{CLUSTER}-workers"),
        &[announce(&format!("{CLUSTER}-workers pre 1"))],
    ));
    yaml.push_str("---\n");
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-broken"),
        "broken-worker",
        image_url,
        checksum,
    ));
    yaml.push_str("---\n");
    yaml.push_str(&worker_pool(
        &format!("{CLUSTER}-broken"),
        &[format!("echo '{FAULT_OUTPUT}' >&2; exit 3")],
    ));
    yaml
}

/// Polls `check` until it returns `Ok` or `limit` passes, then fails with its last complaint.
pub(crate) fn until(what: &str, limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        let last = match check() {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "no {what} within {limit:?}: {last}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

pub(crate) fn items(kubeconfig: &Path, resource: &str) -> Vec<Value> {
    kubectl_json(kubeconfig, &["get", resource])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn machine_of<'a>(machines: &'a [Value], deployment: &str) -> Option<&'a Value> {
    machines
        .iter()
        .find(|m| m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == deployment)
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

/// The `capstan-report:` lines of a console log, without the prefix.
pub(crate) fn report_lines(serial: &str) -> Vec<String> {
    serial
        .lines()
        .filter_map(|l| {
            l.split_once("capstan-report: ")
                .map(|(_, r)| r.trim().to_owned())
        })
        .collect()
}

/// Index of the first console line containing `needle`, failing with the console if none.
fn position(vm: &Vm, serial: &str, needle: &str) -> usize {
    serial
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{}: no {needle:?} on the console:\n{serial}", vm.name))
}

/// What the control plane's console shows: files, user, commands in order, sentinel.
fn check_control_plane_console(vm: &Vm) {
    let serial = vm.serial();
    let report = report_lines(&serial);
    let file = |path: &str| -> Vec<String> {
        report
            .iter()
            .find(|l| l.starts_with(&format!("file {path} ")))
            .unwrap_or_else(|| panic!("{}: no report of {path}:\n{}", vm.name, report.join("\n")))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let marker = file(MARKER_PATH);
    let digest: String = Sha256::digest(MARKER_CONTENT.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        marker[2..],
        ["0640".to_owned(), "root:adm".to_owned(), digest],
        "{MARKER_PATH} as the node has it"
    );
    for key in ["ca", "etcd/ca", "front-proxy-ca", "sa"] {
        let path = format!("/etc/kubernetes/pki/{key}.key");
        assert_eq!(file(&path)[2], "0600", "{path}");
    }
    assert_eq!(file("/etc/kubernetes/pki/ca.crt")[2], "0640");
    assert_eq!(file("/run/kubeadm/kubeadm.yaml")[2], "0640");
    assert!(
        !report.iter().any(|l| l.starts_with("missing ")),
        "{}: files of the bootstrap data are missing:\n{}",
        vm.name,
        report.join("\n")
    );
    let user = report
        .iter()
        .find(|l| l.starts_with(&format!("user {USER} ")))
        .unwrap_or_else(|| panic!("no report of user {USER}:\n{}", report.join("\n")));
    assert!(
        user.contains("/bin/bash") && user.contains("adm"),
        "user {USER}: {user}"
    );
    assert!(
        report.iter().any(|l| l == "sentinel present"),
        "{}: no bootstrap-success sentinel:\n{}",
        vm.name,
        report.join("\n")
    );
    assert!(
        report.iter().any(|l| l == "cloud-init status: done"),
        "{}: cloud-init did not finish cleanly:\n{}",
        vm.name,
        report.join("\n")
    );
    // The commands ran as root, in the order of the bootstrap data: pre, kubeadm, post.
    let order = [
        "capstan-e2e: control plane pre 1 as root",
        "capstan-e2e: control plane pre 2 (marker present) as root",
        "capstan-kubeadm-standin: kubeadm init --config /run/kubeadm/kubeadm.yaml",
        "capstan-kubeadm-standin: init: done",
        "capstan-e2e: control plane post 1 as root",
        "capstan-report: sentinel present",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|needle| position(vm, &serial, needle))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "{}: the bootstrap commands ran out of order ({positions:?} for {order:?})",
        vm.name
    );
}

#[test]
fn a_cluster_of_real_vms_runs_its_bootstrap_data_with_cloud_init() {
    let started = Instant::now();
    let work = tempfile::Builder::new()
        .prefix("capstan-e2e-cluster")
        .tempdir()
        .unwrap();
    let data = work.path().join("data");
    let images = work.path().join("images");
    let mut phases: Vec<(String, f64)> = Vec::new();

    build_ramdisk(&data.join("ramdisk"));
    let t = Instant::now();
    let (ok, out) = capstan(
        &["ramdisk", "cloud-image", "--out", images.to_str().unwrap()],
        Path::new("/dev/null"),
    );
    assert!(
        ok,
        "{out}\n(the image's root filesystem comes from debootstrap: scripts/test.sh fetches it \
         while the network is there)"
    );
    phases.push((
        "cloud image (from the cached root)".into(),
        t.elapsed().as_secs_f64(),
    ));
    let sums: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(sum, path)| {
            (
                Path::new(path.trim())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                sum.trim().to_owned(),
            )
        })
        .collect();
    // Only the qcow2 is served; the raw one would just take disk space.
    let _ = std::fs::remove_file(images.join("cloud.img"));

    let libvirt = Libvirt::ensure();
    let sushy = Sushy::start(&libvirt, "admin", PASSWORD, None);
    let vms = [
        ("rv-cp", "control-plane", "52:54:00:c1:00:10"),
        ("rv-worker", "worker", "52:54:00:c1:00:11"),
        ("rv-broken", "broken-worker", "52:54:00:c1:00:12"),
    ]
    .map(|(name, role, mac)| {
        (
            Vm::define(
                &libvirt,
                work.path(),
                &format!("capstan-e2e-{name}"),
                1024,
                4,
                mac,
            ),
            name,
            role,
        )
    });
    let provisioning_port = testbed::free_port();
    let api_port = testbed::free_port();
    let serve_args = vec![
        "--simulate-workloads".to_owned(),
        "--provisioning-listen".to_owned(),
        format!("127.0.0.1:{provisioning_port}"),
        "--agent-url".to_owned(),
        format!("http://10.0.2.2:{provisioning_port}"),
        "--media-url".to_owned(),
        format!("http://127.0.0.1:{provisioning_port}"),
        "--images-dir".to_owned(),
        images.to_str().unwrap().to_owned(),
        "--boot-timeout".to_owned(),
        "900".to_owned(),
    ];
    let log = work.path().join("serve.log");
    let serve = Serve::start(&capstan_bin(), &data, &serve_args, &log);
    let kc = serve.kubeconfig.clone();

    for (vm, name, role) in &vms {
        let yaml = host_yaml(name, &sushy.system_address(&vm.uuid), &vm.mac, role);
        apply(&kc, work.path(), &format!("{name}.yaml"), &yaml);
    }
    let image_url = format!("http://10.0.2.2:{provisioning_port}/images/cloud.qcow2");
    apply(
        &kc,
        work.path(),
        "cluster.yaml",
        &cluster_yaml(api_port, &image_url, &sums["cloud.qcow2"]),
    );

    // The control plane and the worker come up; the broken worker's bootstrap fails.
    let t = Instant::now();
    let cp_machine = format!("{CLUSTER}-control-plane");
    until(
        "control plane Machine Running",
        Duration::from_secs(1500),
        || {
            let machines = items(&kc, "machines.cluster.x-k8s.io");
            let cp = machines.iter().find(|m| {
                m["metadata"]["labels"]
                    .get("cluster.x-k8s.io/control-plane")
                    .is_some()
            });
            match cp {
                Some(m) if m["status"]["phase"] == "Running" => Ok(()),
                other => Err(format!(
                    "{:#}",
                    other.map_or(Value::Null, |m| m["status"].clone())
                )),
            }
        },
    );
    phases.push((
        "control plane Machine Running".into(),
        t.elapsed().as_secs_f64(),
    ));
    until("worker Machine Running", Duration::from_secs(1200), || {
        let machines = items(&kc, "machines.cluster.x-k8s.io");
        match machine_of(&machines, &format!("{CLUSTER}-workers")) {
            Some(m) if m["status"]["phase"] == "Running" => Ok(()),
            other => Err(format!(
                "{:#}",
                other.map_or(Value::Null, |m| m["status"].clone())
            )),
        }
    });
    phases.push(("worker Machine Running".into(), t.elapsed().as_secs_f64()));
    let cluster = kubectl_json(&kc, &["get", "clusters.cluster.x-k8s.io", CLUSTER]);
    assert_eq!(
        cluster["status"]["phase"], "Provisioned",
        "{:#}",
        cluster["status"]
    );

    // The broken worker: its failing preKubeadmCommand, with its output, on the Machine.
    let broken = {
        let mut found = Value::Null;
        until(
            "the broken worker's bootstrap failure on its Machine",
            Duration::from_secs(900),
            || {
                let machines = items(&kc, "machines.cluster.x-k8s.io");
                let machine = machine_of(&machines, &format!("{CLUSTER}-broken"))
                    .cloned()
                    .unwrap_or(Value::Null);
                match condition(&machine, "BootstrapConfigReady") {
                    Some(c)
                        if c["status"] == "False" && c["reason"] == "BootstrapCommandFailed" =>
                    {
                        found = c.clone();
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        );
        found
    };
    phases.push((
        "broken worker's failure on its Machine".into(),
        t.elapsed().as_secs_f64(),
    ));
    let message = broken["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("step 1/3 failed with exit code 3")
            && message.contains("exit 3")
            && message.contains(FAULT_OUTPUT),
        "BootstrapConfigReady of the broken worker: {message}"
    );

    // From inside the machines: the control plane's console.
    let cp_vm = &vms[0].0;
    cp_vm.wait_for_serial("capstan-report: done", Duration::from_secs(300));
    check_control_plane_console(cp_vm);
    let worker_vm = &vms[1].0;
    worker_vm.wait_for_serial("capstan-report: done", Duration::from_secs(300));
    let serial = worker_vm.serial();
    let order = [
        "capstan-e2e: rv-workers pre 1 as root",
        "capstan-kubeadm-standin: join: cluster CA matches sha256:",
        "capstan-kubeadm-standin: join: done",
        "capstan-e2e: rv-workers post 1 as root",
        "capstan-report: sentinel present",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|needle| position(worker_vm, &serial, needle))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "the worker's bootstrap ran out of order ({positions:?} for {order:?})"
    );
    assert!(
        serial.contains("capstan-report: cloud-init status: done"),
        "cloud-init did not finish cleanly on the worker:\n{serial}"
    );
    assert!(
        !serial.contains("/etc/kubernetes/pki/ca.key"),
        "a worker got the cluster CA key"
    );

    // Every step of the good machines reported; the workload API has both Nodes by providerID.
    let configs = items(&kc, "kubeadmconfigs.bootstrap.cluster.x-k8s.io");
    for config in &configs {
        let name = config["metadata"]["name"].as_str().unwrap_or_default();
        let Some(c) = condition(config, "BootstrapSucceeded") else {
            panic!(
                "KubeadmConfig {name} has no BootstrapSucceeded: {:#}",
                config["status"]
            );
        };
        if name.starts_with(&format!("{CLUSTER}-broken")) {
            assert_eq!(c["status"], "False", "{name}: {c}");
        } else {
            assert_eq!(c["status"], "True", "{name}: {c}");
        }
    }
    let (ok, workload_config) = capstan(&["kubeconfig", CLUSTER], &kc);
    assert!(ok, "{workload_config}");
    let workload = work.path().join("workload.kubeconfig");
    std::fs::write(&workload, workload_config).unwrap();
    let nodes = items(&workload, "nodes");
    let machines = items(&kc, "machines.cluster.x-k8s.io");
    for deployment in [cp_machine.as_str(), &format!("{CLUSTER}-workers")] {
        let machine = machines
            .iter()
            .find(|m| {
                m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == deployment
                    || (deployment == cp_machine
                        && m["metadata"]["labels"]
                            .get("cluster.x-k8s.io/control-plane")
                            .is_some())
            })
            .unwrap();
        let provider_id = machine["spec"]["providerID"].as_str().unwrap_or_default();
        assert!(
            nodes.iter().any(|n| n["spec"]["providerID"] == provider_id),
            "no Node in the workload API has providerID {provider_id:?}: {nodes:#?}"
        );
    }

    // The join token and the step-report tokens never reach the server log, status or describe.
    // The join tokens, as the workers' bootstrap data (Secrets of type cluster.x-k8s.io/secret)
    // carries them: `token: ID.SECRET` in the JoinConfiguration.
    let mut secrets: Vec<String> = Vec::new();
    let management_secrets = items(&kc, "secrets");
    for secret in &management_secrets {
        if secret["type"] != "cluster.x-k8s.io/secret" {
            continue;
        }
        let encoded = secret["data"]["value"].as_str().unwrap_or_default();
        let data = String::from_utf8(base64_decode(encoded)).unwrap();
        for line in data.lines() {
            if let Some(token) = line.trim().strip_prefix("token: ") {
                let token = token.trim().trim_matches('"').to_owned();
                if let Some((_, secret)) = token.split_once('.') {
                    secrets.push(secret.to_owned());
                    secrets.push(token.clone());
                }
            }
        }
    }
    let join_tokens = secrets.len();
    for secret in &management_secrets {
        let name = secret["metadata"]["name"].as_str().unwrap_or_default();
        if name.ends_with("-bootstrap-report") {
            let encoded = secret["data"]["token"].as_str().unwrap_or_default();
            secrets.push(String::from_utf8(base64_decode(encoded)).unwrap());
        }
    }
    assert!(
        join_tokens >= 2 && secrets.len() - join_tokens == 3,
        "expected join tokens and three report tokens: {join_tokens} join token values, {} report tokens",
        secrets.len() - join_tokens
    );
    let (_, described) = capstan(&["describe", "cluster", CLUSTER], &kc);
    let status = format!(
        "{}{}",
        kubectl_json(&kc, &["get", "machines.cluster.x-k8s.io"]),
        kubectl_json(&kc, &["get", "kubeadmconfigs.bootstrap.cluster.x-k8s.io"])
    );
    let events = kubectl_json(&kc, &["get", "events", "-A"]).to_string();
    let server_log = std::fs::read_to_string(&log).unwrap();
    for (what, text) in [
        ("server log", server_log.as_str()),
        ("describe cluster", described.as_str()),
        ("Machine and KubeadmConfig status", status.as_str()),
        ("events", events.as_str()),
    ] {
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "a token appears in the {what}"
            );
        }
    }

    println!("e2e: phase times (seconds since the phase began):");
    for (phase, seconds) in &phases {
        println!("e2e:   {phase:<48} {seconds:>7.1}");
    }
    println!("e2e: total {:.1} s", started.elapsed().as_secs_f64());
}
