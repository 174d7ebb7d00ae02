//! The Kubernetes node image, booted: `capstan image build` makes it from the Kubernetes binaries
//! `scripts/peers.sh` builds (`CAPSTAN_PEERS_BIN`, else `scripts/peers.sh --dir`), and QEMU
//! (software emulation) boots its qcow2 from the disk, as a machine would (SeaBIOS, SYSLINUX),
//! grown to 8 GiB, with a NoCloud seed whose user data runs a check script, and a NIC whose
//! user-mode network reaches nothing beyond the guest (`restrict=on`; a static address and gateway
//! from the seed, as Metal3 gives one): nothing can be pulled.
//!
//! The guest reports on its serial console (`capstan-node: …`) and powers off; the test checks
//! that containerd and the kubelet are enabled and containerd runs; the kubelet, kubeadm and
//! kubectl are v1.35.4; swap is off, `br_netfilter` and `overlay` are loaded, IP forwarding and
//! bridge netfilter are on; the root partition grew to the disk; every image `kubeadm config images
//! list` names is in containerd's `k8s.io` namespace; containerd's sandbox image is kubeadm's
//! pause; and kubeadm's own preflight checks (`kubeadm init phase preflight`, which asks the
//! container runtime for each image and would pull a missing one) pass, finding every image.
//! Beside that, the build's outputs: the qcow2's `.sha256` and the manifest's versions and
//! digests.

use super::capstan;
use super::testbed::run_ok;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `capstan image build --kubernetes-bin PEERS --out OUT`; its output.
pub fn build_node_image(peers: &Path, out: &Path) -> String {
    let (ok, built) = capstan(
        &[
            "image",
            "build",
            "--kubernetes-bin",
            peers.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        Path::new("/dev/null"),
    );
    assert!(
        ok,
        "{built}\n(the root filesystem comes from debootstrap: scripts/test.sh builds the node image once while the network is there)"
    );
    built
}

/// The Kubernetes binaries: `CAPSTAN_PEERS_BIN`, else where `scripts/peers.sh` puts them.
fn peers_bin() -> PathBuf {
    // Each must be there (a missing one fails the test, naming scripts/peers.sh).
    for binary in [
        "kubeadm",
        "kubelet",
        "kubectl",
        "kube-apiserver",
        "etcd",
        "coredns",
        "pause",
    ] {
        capstan_testkit::peers::binary(binary);
    }
    capstan_testkit::peers::bin_dir()
}

/// The guest's NIC.
const MAC: &str = "52:54:00:c4:95:01";

/// The guest's checks, each a `capstan-node:` line on the console; then it powers off.
const GUEST_SCRIPT: &str = r#"#!/bin/bash
set -u
say() { echo "capstan-node: $*" >/dev/ttyS0; }
say "enabled containerd=$(systemctl is-enabled containerd) kubelet=$(systemctl is-enabled kubelet)"
# Joins the boot's own start job of containerd and returns once it is up (or failed).
systemctl start containerd
say "containerd $(systemctl is-active containerd)"
say "kubelet $(kubelet --version)"
say "kubeadm $(kubeadm version -o short)"
say "kubectl $(kubectl version --client | head -n 1)"
say "swaps $(tail -n +2 /proc/swaps | wc -l)"
say "modules $(lsmod | awk '$1 == "br_netfilter" || $1 == "overlay" { print $1 }' | sort | tr '\n' ' ')"
say "sysctl ip_forward=$(cat /proc/sys/net/ipv4/ip_forward) ipv6-forwarding=$(cat /proc/sys/net/ipv6/conf/default/forwarding) bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)"
say "root size $(df -B1M --output=size / | tail -n 1 | tr -d ' ') MiB"
say "route $(ip route show default)"
# The image ships no SSH host keys; cloud-init made this machine its own before sshd started.
say "ssh $(systemctl is-active ssh) host keys $(ls /etc/ssh/ssh_host_*_key | wc -l) $(sha256sum /etc/ssh/ssh_host_ed25519_key.pub | cut -c1-16)"
version=$(kubeadm version -o short)
ctr --namespace k8s.io images ls --quiet >/run/capstan-images 2>&1
for image in $(kubeadm config images list --kubernetes-version "$version"); do
  if grep -qxF "$image" /run/capstan-images; then say "image present $image"; else say "image missing $image"; fi
done
say "sandbox $(containerd config dump | grep -o 'sandbox_image = .*')"
# The version in a config file: without one, kubeadm would ask dl.k8s.io for the latest release.
printf 'apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: %s\n' "$version" >/run/capstan-kubeadm.yaml
kubeadm init phase preflight --config /run/capstan-kubeadm.yaml -v=1 >/run/capstan-preflight 2>&1
say "preflight exit $?"
grep -E 'image exists|pulling|WARNING|ERROR|error' /run/capstan-preflight | sed 's/^/capstan-node-preflight: /' >/dev/ttyS0
say "done"
systemctl poweroff
"#;

#[test]
fn the_node_image_boots_with_containerd_kubeadm_and_every_image_kubeadm_wants() {
    let peers = peers_bin();
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let mut phases: Vec<(&str, f64)> = Vec::new();
    let mut t = Instant::now();

    let out = work.join("out");
    let built = build_node_image(&peers, &out);
    phases.push(("image build", t.elapsed().as_secs_f64()));
    t = Instant::now();

    // The outputs: the qcow2, its sha256 in sha256sum's format, the manifest.
    let qcow2 = out.join("node-v1.35.4.qcow2");
    assert!(qcow2.is_file(), "{built}");
    let sums = std::fs::read_to_string(out.join("node-v1.35.4.qcow2.sha256")).unwrap();
    let computed = run_ok(Command::new("sha256sum").arg(&qcow2));
    let digest = computed.split_whitespace().next().unwrap();
    assert_eq!(sums, format!("{digest}  node-v1.35.4.qcow2\n"));
    assert!(
        built.contains(&format!("{digest}  {}", qcow2.display())),
        "{built}"
    );
    let info: Value = serde_json::from_str(&run_ok(
        Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(&qcow2),
    ))
    .unwrap();
    assert_eq!(info["format"], "qcow2");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("node-v1.35.4.json")).unwrap()).unwrap();
    assert_eq!(manifest["kubernetesVersion"], "v1.35.4");
    assert_eq!(manifest["disk"]["sha256"], digest);
    assert_eq!(manifest["disk"]["format"], "qcow2");
    assert_eq!(manifest["sandboxImage"], "registry.k8s.io/pause:3.10.1");
    assert!(
        manifest["debian"]["packages"]["containerd"]
            .as_str()
            .is_some_and(|v| v.starts_with("1.6.")),
        "{}",
        manifest["debian"]["packages"]["containerd"]
    );
    for name in [
        "kubelet",
        "kubeadm",
        "kubectl",
        "kube-apiserver",
        "etcd",
        "coredns",
        "pause",
    ] {
        let sum = run_ok(Command::new("sha256sum").arg(peers.join(name)));
        assert_eq!(
            manifest["binaries"][name]["sha256"],
            sum.split_whitespace().next().unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        manifest["binaries"]["kubelet"]["installedAs"],
        "/usr/bin/kubelet"
    );
    assert_eq!(manifest["binaries"]["etcd"]["version"], "3.6.6");
    let images = manifest["images"].as_array().unwrap();
    assert_eq!(images.len(), 7, "{images:?}");
    for image in images {
        assert!(
            image["manifestDigest"]
                .as_str()
                .is_some_and(|d| d.starts_with("sha256:")),
            "{image}"
        );
    }
    phases.push(("outputs checked", t.elapsed().as_secs_f64()));
    t = Instant::now();

    // The seed: the check script as user data, and a static address with a gateway as Metal3's
    // network data gives a machine (kubeadm advertises the address of the default route's NIC).
    let iso = work.join("seed.iso");
    let network_config = format!(
        "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: \"{MAC}\"\n    subnets:\n      - type: static\n        address: 10.0.2.15/24\n        gateway: 10.0.2.2\n"
    );
    super::testbed::nocloud_seed(
        &work.join("seed"),
        &iso,
        "instance-id: capstan-node-0\nlocal-hostname: node-0\n",
        Some(&network_config),
        "/root/node-check.sh",
        GUEST_SCRIPT,
    );
    // A disk bigger than the image, as a machine's is: the root partition grows into it.
    let disk = work.join("disk.qcow2");
    super::testbed::qcow2_overlay(&qcow2, &disk, Some("8G"));
    let console = work.join("console.log");
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-m", "2560", "-smp", "2", "-nographic"])
        .arg("-nic")
        .arg(format!("user,model=virtio-net-pci,restrict=on,mac={MAC}"))
        .args(["-monitor", "none", "-no-reboot", "-serial"])
        .arg(format!("file:{}", console.display()))
        .arg("-drive")
        .arg(format!("file={},if=virtio,format=qcow2", disk.display()))
        .arg("-drive")
        .arg(format!(
            "file={},if=virtio,format=raw,readonly=on",
            iso.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The guest powers itself off when its checks end; a hung guest is killed.
    let _watchdog = super::testbed::kill_after(qemu.id(), Duration::from_secs(20 * 60));
    let status = qemu.wait().unwrap();
    phases.push(("VM: boot and checks", t.elapsed().as_secs_f64()));
    let log = String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with("capstan-node"))
        .collect();
    let report = lines.join("\n");
    let tail = super::testbed::last_lines(&log, 40);
    assert!(
        report.contains("capstan-node: done"),
        "qemu {status}; the guest did not finish its checks:\n{report}\n--- console tail ---\n{tail}"
    );
    eprintln!("{report}");
    for expected in [
        "capstan-node: enabled containerd=enabled kubelet=enabled",
        "capstan-node: containerd active",
        "capstan-node: kubelet Kubernetes v1.35.4",
        "capstan-node: kubeadm v1.35.4",
        "capstan-node: kubectl Client Version: v1.35.4",
        "capstan-node: swaps 0",
        "capstan-node: modules br_netfilter overlay",
        "capstan-node: sysctl ip_forward=1 ipv6-forwarding=1 bridge-nf-call-iptables=1",
        "capstan-node: sandbox sandbox_image = \"registry.k8s.io/pause:3.10.1\"",
        "capstan-node: preflight exit 0",
    ] {
        assert!(report.contains(expected), "no {expected:?} in:\n{report}");
    }
    let size: u64 = report
        .lines()
        .find_map(|l| l.strip_prefix("capstan-node: root size "))
        .and_then(|s| s.trim_end_matches(" MiB").parse().ok())
        .unwrap_or(0);
    assert!(
        size > 6 * 1024,
        "the root did not grow to the 8 GiB disk: {size} MiB\n{report}"
    );
    assert!(!report.contains("image missing"), "{report}");
    let ssh = report
        .lines()
        .find_map(|l| l.strip_prefix("capstan-node: ssh "))
        .unwrap_or_default();
    assert!(ssh.starts_with("active host keys "), "{report}");
    assert!(!ssh.starts_with("active host keys 0"), "{report}");
    let listed = run_ok(Command::new(peers.join("kubeadm")).args([
        "config",
        "images",
        "list",
        "--kubernetes-version",
        "v1.35.4",
    ]));
    for image in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            report.contains(&format!("capstan-node: image present {image}")),
            "{image}:\n{report}"
        );
        // kubeadm asked the runtime (CRI) and found it: nothing to pull.
        assert!(
            report.contains(&format!("image exists: {image}")),
            "kubeadm's preflight did not find {image}:\n{report}"
        );
    }
    assert!(!report.contains("pulling"), "{report}");
    assert!(
        !report.contains("inconsistent with that used by kubeadm"),
        "containerd's sandbox image is not kubeadm's:\n{report}"
    );
    for (name, seconds) in &phases {
        eprintln!("node image: {name}: {seconds:.1} s");
    }
}
