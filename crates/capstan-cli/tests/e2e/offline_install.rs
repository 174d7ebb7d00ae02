//! The package, the service and the offline install, for real: capstan's Debian package
//! (`scripts/package.sh`, of this test run's own binaries), carried in an offline bundle
//! (`capstan bundle create`: the package and the libraries it needs, the ramdisk, an OS image, the
//! CRDs and the Cilium manifest), installed into a Debian 12 VM (systemd, no capstan, no libvirt)
//! that has **no network at all** (QEMU without a NIC) by the bundle's own `install`:
//!
//! - apt installs capstan and its libraries from the bundle alone;
//! - `capstan bundle install` puts the ramdisk and image in place and starts `capstan.service`
//!   (`systemctl enable`/`restart`), which runs as the package's `capstan` user;
//! - `capstan kubeconfig` (as root, no flags: the service's data directory is the default) gives a
//!   kubeconfig the API answers, and a `fake://` host applied through it is inspected to `available`;
//! - SIGKILL of the service's main process: systemd restarts it (`Restart=on-failure`) and the host
//!   is still there; the log is in journald.
//!
//! The guest reports each check on its serial console (`capstan-offline: …`), powers itself off, and
//! the test asserts the lines. Under software emulation it takes a few minutes.

use super::testbed::run_ok;
use super::{build_ramdisk, capstan, capstan_bin};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The guest's test: each check prints a `capstan-offline:` line on the console; the first failure
/// prints `FAIL`, the service's journal, and powers off.
const GUEST_SCRIPT: &str = r#"#!/bin/bash
set -u
say() { echo "capstan-offline: $*" >/dev/ttyS0; }
fail() {
  say "FAIL $*"
  journalctl -u capstan --no-pager -n 60 2>&1 | sed 's/^/capstan-offline-journal: /' >/dev/ttyS0
  systemctl poweroff
  exit 1
}
# Waits up to $1 seconds for the command after it to succeed.
await() {
  local limit=$1 start=$SECONDS
  shift
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$limit" ] || return 1
    sleep 1
  done
}
say "links $(ls /sys/class/net | tr '\n' ' ')"
dpkg-query -W capstan >/dev/null 2>&1 && fail "capstan is installed before the bundle"
dpkg-query -W libvirt0 >/dev/null 2>&1 && fail "libvirt0 is installed before the bundle"
mkdir -p /mnt/seed /root/bundle
mount -o ro "$(blkid -L cidata)" /mnt/seed || fail "mounting the seed"
tar -xf /mnt/seed/bundle.tar -C /root/bundle || fail "unpacking the bundle"
/root/bundle/capstan-bundle-*/install >/run/install.log 2>&1
rc=$?
sed 's/^/capstan-offline-install: /' /run/install.log >/dev/ttyS0
[ $rc -eq 0 ] || fail "install exited $rc"
say "installed $(dpkg-query -W -f='${Package} ${Version}' capstan) with libvirt0 $(dpkg-query -W -f='${Version}' libvirt0)"
say "service $(systemctl is-active capstan) enabled $(systemctl is-enabled capstan)"
pid=$(systemctl show -p MainPID --value capstan)
say "process user $(ps -o user= -p "$pid")"
capstan kubeconfig >/root/admin.kubeconfig || fail "capstan kubeconfig"
export KUBECONFIG=/root/admin.kubeconfig NO_COLOR=1
cat >/root/host.yaml <<'EOF'
apiVersion: v1
kind: Secret
metadata:
  name: offline-0-bmc
  namespace: default
type: Opaque
stringData:
  username: admin
  password: offline-bmc-secret
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: offline-0
  namespace: default
spec:
  online: true
  bootMACAddress: "52:54:00:0f:f1:01"
  bmc:
    address: fake://offline/offline-0
    credentialsName: offline-0-bmc
EOF
capstan apply -f /root/host.yaml >/dev/null || fail "capstan apply"
host_available() { capstan get bmh offline-0 | grep -qw available; }
await 240 host_available || fail "the host did not reach available: $(capstan get bmh offline-0 2>&1)"
say "host available"
kill -9 "$pid"
restarted() {
  local now
  now=$(systemctl show -p MainPID --value capstan)
  [ "$now" != 0 ] && [ "$now" != "$pid" ] && capstan get bmh offline-0
}
await 120 restarted || fail "systemd did not restart capstan after SIGKILL"
say "restarted after SIGKILL, host kept: $(capstan get bmh offline-0 | awk 'NR == 2 { print $1 }')"
journalctl -u capstan --no-pager | grep -q 'ready at' && say "journald has capstan's log"
grep -q offline-bmc-secret <(journalctl -u capstan --no-pager) && fail "the BMC password is in the journal"
say "ramdisk $(ls /var/lib/capstan/ramdisk | tr '\n' ' ')"
say "images $(ls /var/lib/capstan/images | tr '\n' ' ')"
say "done"
systemctl poweroff
"#;

#[test]
fn an_offline_bundle_installs_the_package_and_its_service_in_a_vm_without_network() {
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let mut phases: Vec<(&str, f64)> = Vec::new();
    let mut t = Instant::now();
    let mut phase = |name: &'static str, t: &mut Instant| {
        phases.push((name, t.elapsed().as_secs_f64()));
        *t = Instant::now();
    };

    // The package of this test run's binaries.
    let bin_dir = capstan_bin().parent().unwrap().to_owned();
    let dist = work.join("dist");
    let packaged = run_ok(
        Command::new("bash")
            .arg(repo_root().join("scripts/package.sh"))
            .arg("--bin-dir")
            .arg(&bin_dir)
            .arg("--out")
            .arg(&dist)
            .args(["--compression", "gzip"]),
    );
    let deb = PathBuf::from(packaged.lines().last().unwrap().trim());
    assert!(deb.is_file(), "{packaged}");
    assert!(
        deb.file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("_amd64.deb")
    );
    phase("package", &mut t);

    build_ramdisk(&work.join("ramdisk"));
    let (ok, out) = capstan(
        &[
            "ramdisk",
            "test-image",
            "--out",
            work.join("os").to_str().unwrap(),
        ],
        Path::new("/dev/null"),
    );
    assert!(ok, "{out}");
    phase("ramdisk and OS image", &mut t);

    let seed = work.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    let bundle = seed.join("bundle.tar");
    let cilium = repo_root().join("examples/cilium/cilium-manifests.yaml");
    let (ok, out) = capstan(
        &[
            "bundle",
            "create",
            "--deb",
            deb.to_str().unwrap(),
            "--ramdisk",
            work.join("ramdisk").to_str().unwrap(),
            "--image",
            work.join("os/disk.qcow2").to_str().unwrap(),
            "--manifest",
            cilium.to_str().unwrap(),
            "--out",
            bundle.to_str().unwrap(),
        ],
        Path::new("/dev/null"),
    );
    assert!(
        ok,
        "{out}\n(the bundle's Debian packages come from apt: scripts/test.sh fetches them while the network is there)"
    );
    let (ok, verified) = capstan(
        &["bundle", "verify", bundle.to_str().unwrap()],
        Path::new("/dev/null"),
    );
    assert!(ok, "{verified}");
    assert!(verified.contains("package   libvirt0 "), "{verified}");
    assert!(verified.contains("ramdisk   kernel "), "{verified}");
    assert!(
        verified.contains("images/disk.qcow2") && verified.contains("crds/capstan-crds.yaml"),
        "{verified}"
    );
    phase("bundle", &mut t);

    // A VM image with room for the package (debug builds are large) and nothing of capstan's.
    let vm = work.join("vm");
    let (ok, out) = capstan(
        &[
            "ramdisk",
            "cloud-image",
            "--out",
            vm.to_str().unwrap(),
            "--root-free-mib",
            "1536",
        ],
        Path::new("/dev/null"),
    );
    assert!(
        ok,
        "{out}\n(the image's root filesystem comes from debootstrap: scripts/test.sh fetches it while the network is there)"
    );
    phase("VM image (from the cached root)", &mut t);

    let iso = work.join("seed.iso");
    super::testbed::nocloud_seed(
        &seed,
        &iso,
        "instance-id: capstan-offline-0\nlocal-hostname: offline-0\n",
        None,
        "/root/offline-test.sh",
        GUEST_SCRIPT,
    );
    let disk = work.join("disk.qcow2");
    super::testbed::qcow2_overlay(&vm.join("cloud.qcow2"), &disk, None);
    let console = work.join("console.log");
    let mut qemu = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "2048",
            "-smp",
            "2",
            "-nographic",
            "-nic",
            "none",
        ])
        .args(["-monitor", "none", "-no-reboot", "-serial"])
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(vm.join("vmlinuz"))
        .arg("-initrd")
        .arg(vm.join("initrd.img"))
        .arg("-append")
        .arg(capstan_ramdisk::cloud_image::cmdline())
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
    // The guest powers itself off when its checks end (or fail); a hung guest is killed.
    let limit = Duration::from_secs(15 * 60);
    let _watchdog = super::testbed::kill_after(qemu.id(), limit);
    let status = qemu.wait().unwrap();
    phase("VM: boot, install, checks", &mut t);
    let log = String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
    // The serial console ends lines with \r\n.
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with("capstan-offline"))
        .collect();
    let report = lines.join("\n");
    let tail = super::testbed::last_lines(&log, 30);
    assert!(
        report.contains("capstan-offline: done"),
        "qemu {status}; the guest did not finish its checks:\n{report}\n--- console tail ---\n{tail}"
    );
    assert!(!report.contains("FAIL"), "{report}");
    // Only loopback: the install had no network to fall back on.
    assert!(report.contains("capstan-offline: links lo\n"), "{report}");
    assert!(
        report.contains("capstan-offline: installed capstan 0.1.0+git"),
        "{report}"
    );
    assert!(
        report.contains("capstan-offline: service active enabled enabled"),
        "{report}"
    );
    assert!(
        report.contains("capstan-offline: process user capstan"),
        "{report}"
    );
    assert!(report.contains("ready to provision"), "{report}");
    assert!(
        report.contains("capstan-offline: host available"),
        "{report}"
    );
    assert!(
        report.contains("capstan-offline: restarted after SIGKILL, host kept: offline-0"),
        "{report}"
    );
    assert!(
        report.contains("capstan-offline: journald has capstan's log"),
        "{report}"
    );
    assert!(report.contains("initrd.img"), "{report}");
    assert!(report.contains("disk.qcow2.sha256sum"), "{report}");
    eprintln!("{report}");
    for (name, seconds) in &phases {
        eprintln!("offline install: {name}: {seconds:.1} s");
    }
}
