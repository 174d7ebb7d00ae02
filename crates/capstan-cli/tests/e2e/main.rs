//! End to end, with real machines: `capstan serve` drives two QEMU virtual machines (software
//! emulation) through sushy-tools' Redfish emulator backed by libvirt, booting them into the
//! provisioning ramdisk over virtual media.
//!
//! Checked: both hosts reach `available` with hardware that matches the VMs (MAC, RAM, disk);
//! a raw and a qcow2 image of the project's test OS are provisioned, the VMs boot them from their
//! disks and print the config drive's name and addresses on their serial consoles; `capstan
//! serve` killed in the middle of provisioning and restarted resumes without deploying twice;
//! deprovisioning cleans back to `available`; a wrong image checksum is a provisioning error and
//! the host is not provisioned; deleting a host powers it off and removes it; a wrong BMC password
//! is a registration error; an unreachable BMC backs off and recovers when it comes back; BMC
//! passwords never reach the server log, Events, status or `describe`.
//!
//! Phase times per host are printed (run with `--nocapture` to see them).
//!
//! The second test, in [`real_cluster`], builds a cluster on such machines: real cloud-init runs
//! capstan's kubeadm bootstrap data in them. The third, in [`kvm_cluster`], builds one whose control
//! plane and workers are VMs capstan's KVM provider makes on the same libvirt. The fourth, in
//! [`offline_install`], installs capstan's Debian package from an offline bundle in a VM with no
//! network and runs it as a systemd service. The fifth, in [`node_image`], boots the Kubernetes
//! node image `capstan image build` makes and checks that kubeadm finds everything it needs on it.
//! The sixth, in [`real_kubernetes`], provisions that image on two machines of a bridge and
//! brings up a real Kubernetes cluster on them from capstan's bootstrap data (real kubeadm,
//! kubelet, containerd, etcd and kube-apiserver), drains its worker away and deletes it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kvm_cluster;
mod node_image;
mod offline_install;
mod real_cluster;
mod real_kubernetes;
mod testbed;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testbed::{Libvirt, Serve, Sushy, Vm};

const PASSWORD: &str = "e2e-bmc-secret-7f3a";

/// The capstan under test: this build's, or the one `CAPSTAN_E2E_CAPSTAN` names (a release build,
/// when capstan's own CPU time is what a run measures).
fn capstan_bin() -> PathBuf {
    std::env::var_os("CAPSTAN_E2E_CAPSTAN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_capstan")))
}

/// The ramdisk's agent: a binary of this package, so cargo builds it (current) with the tests.
fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_capstan-agent"))
}

/// `capstan ramdisk build --out OUT` with the agent of this build; its output.
fn build_ramdisk(out: &Path) -> String {
    let (ok, built) = capstan(
        &[
            "ramdisk",
            "build",
            "--out",
            out.to_str().unwrap(),
            "--agent",
            agent_bin().to_str().unwrap(),
        ],
        Path::new("/dev/null"),
    );
    assert!(ok, "{built}");
    built
}

fn capstan(args: &[&str], kubeconfig: &Path) -> (bool, String) {
    let out = Command::new(capstan_bin())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    status_and_output(&out)
}

/// Whether a finished command succeeded, and its standard output followed by its standard error.
fn status_and_output(out: &std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn kubectl_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let out = Command::new("kubectl")
        .args(args)
        .args(["-o", "json"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn apply(kubeconfig: &Path, dir: &Path, name: &str, yaml: &str) {
    let file = dir.join(name);
    std::fs::write(&file, yaml).unwrap();
    let (ok, out) = capstan(&["apply", "-f", file.to_str().unwrap()], kubeconfig);
    assert!(ok, "{out}");
}

/// Follows `kubectl get bmh NAME -w` until `pred` holds for the host (bounded by `limit`).
fn wait_host(
    kubeconfig: &Path,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let mut child = Command::new("kubectl")
        .args([
            "get",
            "bmh",
            name,
            "-w",
            "-o",
            "json",
            "--output-watch-events=false",
        ])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let pid = child.id();
    let watchdog = testbed::kill_after(pid, limit);
    let mut stream = serde_json::Deserializer::from_reader(stdout).into_iter::<Value>();
    let mut last = Value::Null;
    let found = loop {
        match stream.next() {
            Some(Ok(host)) => {
                if pred(&host) {
                    break Some(host);
                }
                last = host;
            }
            _ => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    drop(watchdog);
    found.unwrap_or_else(|| {
        // The watch ended (time limit or a broken connection): one last look.
        let now = kubectl_json(kubeconfig, &["get", "bmh", name]);
        if pred(&now) {
            return now;
        }
        panic!(
            "{name}: no {what} within {limit:?}; last seen status: {:#}",
            if last.is_null() {
                &now["status"]
            } else {
                &last["status"]
            }
        )
    })
}

fn state(host: &Value) -> &str {
    host["status"]["provisioning"]["state"]
        .as_str()
        .unwrap_or("")
}

fn host_yaml(name: &str, address: &str, mac: &str, ip: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: {name}-bmc
stringData:
  username: admin
  password: {PASSWORD}
---
apiVersion: v1
kind: Secret
metadata:
  name: {name}-network
stringData:
  networkData: |
    {{"links": [{{"id": "eth0", "type": "phy", "ethernet_mac_address": "{mac}"}}],
     "networks": [{{"id": "net0", "link": "eth0", "type": "ipv4", "ip_address": "{ip}", "netmask": "255.255.255.0", "network_id": "net0"}}],
     "services": []}}
---
apiVersion: v1
kind: Secret
metadata:
  name: {name}-user
stringData:
  userData: |
    #cloud-config
    hostname: {name}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: {name}
spec:
  online: true
  bootMACAddress: "{mac}"
  bmc:
    address: {address}
    credentialsName: {name}-bmc
  networkData:
    name: {name}-network
  userData:
    name: {name}-user
"#
    )
}

#[test]
fn bare_metal_hosts_on_emulated_bmcs_and_real_vms() {
    let started = Instant::now();
    let work = tempfile::Builder::new()
        .prefix("capstan-e2e")
        .tempdir()
        .unwrap();
    let data = work.path().join("data");
    let images = work.path().join("images");
    // Artifacts: the ramdisk (with the agent) and the test OS image, from Debian packages.
    let out = build_ramdisk(&data.join("ramdisk"));
    println!("e2e: {}", out.trim());
    let (ok, out) = capstan(
        &["ramdisk", "test-image", "--out", images.to_str().unwrap()],
        Path::new("/dev/null"),
    );
    assert!(ok, "{out}");
    let sums: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(sum, path)| {
            (
                Path::new(path)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                sum.to_owned(),
            )
        })
        .collect();

    let libvirt = Libvirt::ensure();
    let sushy = Sushy::start(&libvirt, "admin", PASSWORD, None);
    let vms = [
        Vm::define(
            &libvirt,
            work.path(),
            "capstan-e2e-h0",
            640,
            5,
            "52:54:00:c0:ff:10",
        ),
        Vm::define(
            &libvirt,
            work.path(),
            "capstan-e2e-h1",
            768,
            6,
            "52:54:00:c0:ff:11",
        ),
    ];
    let provisioning_port = testbed::free_port();
    let serve_args = vec![
        "--provisioning-listen".to_owned(),
        format!("127.0.0.1:{provisioning_port}"),
        "--agent-url".to_owned(),
        format!("http://10.0.2.2:{provisioning_port}"),
        "--media-url".to_owned(),
        format!("http://127.0.0.1:{provisioning_port}"),
        "--images-dir".to_owned(),
        images.to_str().unwrap().to_owned(),
        "--boot-timeout".to_owned(),
        "600".to_owned(),
    ];
    let log = work.path().join("serve.log");
    let mut serve = Serve::start(&capstan_bin(), &data, &serve_args, &log);
    let kc = serve.kubeconfig.clone();
    let mut phases: Vec<(String, f64)> = Vec::new();

    // Register both hosts; inspection boots each VM into the ramdisk.
    for (i, vm) in vms.iter().enumerate() {
        let yaml = host_yaml(
            &format!("h{i}"),
            &sushy.system_address(&vm.uuid),
            &vm.mac,
            &format!("192.168.50.{}", 10 + i),
        );
        apply(&kc, work.path(), &format!("h{i}.yaml"), &yaml);
    }
    let t = Instant::now();
    for (i, vm) in vms.iter().enumerate() {
        let host = wait_host(
            &kc,
            &format!("h{i}"),
            "available",
            Duration::from_secs(600),
            |h| state(h) == "available",
        );
        phases.push((
            format!("h{i} registering→available"),
            t.elapsed().as_secs_f64(),
        ));
        let hw = &host["status"]["hardware"];
        let macs: Vec<&str> = hw["nics"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["mac"].as_str())
            .collect();
        assert!(
            macs.contains(&vm.mac.as_str()),
            "h{i}: NICs {macs:?} lack {}",
            vm.mac
        );
        let ram = hw["ramMebibytes"].as_i64().unwrap();
        assert!(
            (ram - i64::from(vm.memory_mib)).abs() <= i64::from(vm.memory_mib) / 10,
            "h{i}: RAM {ram} MiB for a {} MiB VM",
            vm.memory_mib
        );
        let disk = hw["storage"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "/dev/vda")
            .unwrap();
        assert_eq!(
            disk["sizeBytes"].as_u64().unwrap(),
            vm.disk_gib << 30,
            "h{i}: disk size"
        );
        assert_eq!(host["status"]["operationalStatus"], "OK");
    }
    let (ok, table) = capstan(&["get", "bmh", "-o", "wide"], &kc);
    assert!(ok && table.contains("available"), "{table}");
    println!("e2e: capstan get bmh -o wide\n{table}");

    // Provision: h0 raw, h1 qcow2. Kill capstan serve while h1 is deploying, then restart it.
    let image = |file: &str| {
        json!({"spec": {"image": {
            "url": format!("http://10.0.2.2:{provisioning_port}/images/{file}"),
            "checksum": sums[file],
            "checksumType": "sha256",
            "format": if file.ends_with(".qcow2") { "qcow2" } else { "raw" },
        }}})
    };
    let t = Instant::now();
    for (name, file) in [("h0", "disk.img"), ("h1", "disk.qcow2")] {
        let status = Command::new("kubectl")
            .args([
                "patch",
                "bmh",
                name,
                "--type",
                "merge",
                "-p",
                &image(file).to_string(),
            ])
            .env("KUBECONFIG", &kc)
            .status()
            .unwrap();
        assert!(status.success());
    }
    wait_host(
        &kc,
        "h1",
        "a running deploy",
        Duration::from_secs(600),
        |h| {
            h["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "OperationProgress"
                        && c["message"].as_str().is_some_and(|m| {
                            m.starts_with("deploy: ")
                                && !m.contains("booting")
                                && !m.contains("waiting")
                        })
                })
            })
        },
    );
    serve.kill();
    let restarted = Instant::now();
    serve = Serve::start(&capstan_bin(), &data, &serve_args, &log);
    phases.push((
        "capstan serve restart to ready".into(),
        restarted.elapsed().as_secs_f64(),
    ));
    for (i, vm) in vms.iter().enumerate() {
        let host = wait_host(
            &kc,
            &format!("h{i}"),
            "provisioned",
            Duration::from_secs(900),
            |h| state(h) == "provisioned",
        );
        phases.push((
            format!("h{i} provisioning→provisioned"),
            t.elapsed().as_secs_f64(),
        ));
        assert_eq!(host["status"]["errorCount"].as_i64().unwrap_or(0), 0);
        let t_boot = Instant::now();
        vm.wait_for_serial(
            "capstan-test-image: config drive read",
            Duration::from_secs(300),
        );
        phases.push((
            format!("h{i} OS boot→config drive read"),
            t_boot.elapsed().as_secs_f64(),
        ));
        let serial = vm.serial();
        assert!(
            serial.contains("capstan-test-image: booted from disk"),
            "{serial}"
        );
        assert!(
            serial.contains(&format!("capstan-test-image: hostname=h{i}")),
            "{serial}"
        );
        assert!(
            serial.contains(&format!(
                "capstan-test-image: address 192.168.50.{}",
                10 + i
            )),
            "{serial}"
        );
        let deploys = serial.matches("capstan-agent: starting deploy").count();
        assert_eq!(
            deploys, 1,
            "h{i} deployed {deploys} times across the restart:\n{serial}"
        );
        if let Some(rate) = serial
            .lines()
            .find(|l| l.contains("image written and verified"))
        {
            println!("e2e: h{i} {}", rate.trim());
        }
    }

    // Deprovision h0 (cleaning), then a wrong checksum: a provisioning error, never provisioned.
    let t = Instant::now();
    let status = Command::new("kubectl")
        .args([
            "patch",
            "bmh",
            "h0",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"image":null}}"#,
        ])
        .env("KUBECONFIG", &kc)
        .status()
        .unwrap();
    assert!(status.success());
    wait_host(
        &kc,
        "h0",
        "available after deprovisioning",
        Duration::from_secs(600),
        |h| state(h) == "available",
    );
    phases.push((
        "h0 deprovisioning (metadata cleaning)→available".into(),
        t.elapsed().as_secs_f64(),
    ));
    let mut bad = image("disk.img");
    bad["spec"]["image"]["checksum"] = json!("0".repeat(64));
    let status = Command::new("kubectl")
        .args([
            "patch",
            "bmh",
            "h0",
            "--type",
            "merge",
            "-p",
            &bad.to_string(),
        ])
        .env("KUBECONFIG", &kc)
        .status()
        .unwrap();
    assert!(status.success());
    let host = wait_host(
        &kc,
        "h0",
        "a provisioning error",
        Duration::from_secs(600),
        |h| h["status"]["errorType"] == "provisioning error",
    );
    let message = host["status"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("checksum mismatch") && message.contains(&sums["disk.img"]),
        "{message}"
    );
    assert_eq!(state(&host), "provisioning");

    // Deleting h1: powered off and gone.
    let (ok, out) = capstan(&["delete", "bmh", "h1", "--timeout", "300"], &kc);
    assert!(ok, "{out}");
    assert_eq!(vms[1].state(), "shut off");

    // A wrong password: a registration error that says so.
    let wrong = host_yaml(
        "wrong",
        &sushy.system_address(&vms[1].uuid),
        "52:54:00:c0:ff:99",
        "192.168.50.99",
    )
    .replace(PASSWORD, "not-the-password");
    apply(&kc, work.path(), "wrong.yaml", &wrong);
    let host = wait_host(
        &kc,
        "wrong",
        "a registration error",
        Duration::from_secs(120),
        |h| h["status"]["errorType"] == "registration error",
    );
    let message = host["status"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("401")
            || message.to_lowercase().contains("unauthorized")
            || message.contains("credentials"),
        "{message}"
    );

    // An unreachable BMC: errors with a growing count, then recovery once it answers.
    let port = testbed::free_port();
    let away = host_yaml(
        "away",
        &format!(
            "redfish+http://127.0.0.1:{port}/redfish/v1/Systems/{}",
            testbed::FAKE_SYSTEM
        ),
        "52:54:00:c0:ff:98",
        "192.168.50.98",
    );
    apply(&kc, work.path(), "away.yaml", &away);
    wait_host(
        &kc,
        "away",
        "repeated registration errors",
        Duration::from_secs(120),
        |h| h["status"]["errorCount"].as_i64().unwrap_or(0) >= 2,
    );
    let fake = Sushy::start(&libvirt, "admin", PASSWORD, Some(port));
    let host = wait_host(
        &kc,
        "away",
        "registration once the BMC answers",
        Duration::from_secs(300),
        |h| state(h) != "registering",
    );
    assert_eq!(host["status"]["errorCount"].as_i64().unwrap_or(0), 0);
    drop(fake);

    // Secrets: never in the log, status, Events or describe.
    let (_, described) = capstan(&["describe", "bmh", "h0"], &kc);
    let events = Command::new("kubectl")
        .args(["get", "events", "-A", "-o", "json"])
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let hosts = Command::new("kubectl")
        .args(["get", "bmh", "-A", "-o", "json"])
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    serve.stop();
    let server_log = std::fs::read_to_string(&log).unwrap();
    for (what, text) in [
        ("server log", server_log.as_str()),
        ("describe", described.as_str()),
        ("events", &String::from_utf8_lossy(&events.stdout)),
        ("status", &String::from_utf8_lossy(&hosts.stdout)),
    ] {
        assert!(
            !text.contains(PASSWORD),
            "the BMC password appears in the {what}"
        );
    }

    println!("e2e: phase times (seconds since the phase began, per host):");
    for (phase, seconds) in &phases {
        println!("e2e:   {phase:<48} {seconds:>7.1}");
    }
    println!("e2e: total {:.1} s", started.elapsed().as_secs_f64());
}
