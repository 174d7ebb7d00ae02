//! The node image's OCI archives in a real containerd: `capstan image archives` builds the images
//! kubeadm wants from the Kubernetes binaries `scripts/peers.sh` builds (`CAPSTAN_PEERS_BIN`, else
//! `scripts/peers.sh --dir`), and Debian's containerd 1.6, started here as root in a network
//! namespace of its own with its root, state and socket in a temporary directory, imports each
//! with `ctr images import`. Checked: every image `kubeadm config images list` names is in the
//! `k8s.io` namespace under its reference with the manifest digest capstan wrote, complete and
//! unpacked; and the pause image runs under runc (as its unprivileged user) until SIGTERM stops
//! it, exiting 0. And a directory with a binary missing, of another release or not executable is
//! refused before anything is built, naming the binary and what to do.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The Kubernetes binaries: `CAPSTAN_PEERS_BIN`, else where `scripts/peers.sh` puts them.
fn peers_bin() -> PathBuf {
    // Each must be there (a missing one fails the test, naming scripts/peers.sh).
    for binary in [
        "kubeadm",
        "kubelet",
        "kube-apiserver",
        "etcd",
        "coredns",
        "pause",
    ] {
        capstan_testkit::peers::binary(binary);
    }
    capstan_testkit::peers::bin_dir()
}

/// Kills `pid` once `limit` has passed, unless dropped first: a hung containerd or ctr fails the
/// test instead of stopping the suite.
struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.take();
    }
}

fn kill_after(pid: u32, limit: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    Watchdog(Some(tx))
}

/// A containerd of its own: root, state, socket under `dir`, no CRI plugin, its own network
/// namespace; killed (and its shims with it) when dropped.
struct Containerd {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

/// The container the test runs; removed with its shim when the test ends, however it ends.
const PAUSE_CONTAINER: &str = "capstan-pause-test";

impl Drop for Containerd {
    fn drop(&mut self) {
        // A shim outlives its containerd: the task goes first (a passing test has removed it).
        for args in [
            &["tasks", "rm", "--force", PAUSE_CONTAINER][..],
            &["containers", "rm", PAUSE_CONTAINER][..],
        ] {
            let _ = self
                .ctr_command()
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    fn start(dir: &Path) -> Containerd {
        let socket = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
"#,
                root = dir.join("root").display(),
                state = dir.join("state").display(),
                socket = socket.display(),
                opt = dir.join("opt").display(),
            ),
        )
        .unwrap();
        let log = dir.join("containerd.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("unshare")
            .args(["--net", "containerd", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect(
                "starting containerd (install the containerd package: scripts/install-deps.sh)",
            );
        Containerd { child, socket, log }
    }

    /// `ctr` against this containerd in the `k8s.io` namespace; it waits for the socket itself.
    fn ctr(&self, args: &[&str]) -> String {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--connect-timeout", "60s", "--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctr {args:?}: {}{}\n--- containerd's log ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ctr_command(&self) -> Command {
        let mut command = Command::new("ctr");
        command.arg("--address").arg(&self.socket).args([
            "--connect-timeout",
            "60s",
            "--namespace",
            "k8s.io",
        ]);
        command
    }
}

#[test]
fn the_archives_import_into_containerd_under_kubeadms_references_and_pause_runs() {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|ids| ids.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    assert!(
        is_root,
        "this test runs containerd: run it as root (scripts/test.sh does)"
    );
    let peers = peers_bin();
    let work = tempfile::tempdir().unwrap();
    let archives = work.path().join("archives");
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["image", "archives", "--kubernetes-bin"])
        .arg(&peers)
        .arg("--out")
        .arg(&archives)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "capstan image archives: {}\n(the kube-proxy image's iptables come from the node root filesystem, which debootstrap makes: scripts/test.sh builds the node image once while the network is there)",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing: Vec<Value> =
        serde_json::from_slice(&std::fs::read(archives.join("images.json")).unwrap()).unwrap();

    let version = Command::new(peers.join("kubeadm"))
        .args(["version", "-o", "short"])
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    assert_eq!(version, "v1.35.4");
    let listed = Command::new(peers.join("kubeadm"))
        .args(["config", "images", "list", "--kubernetes-version", &version])
        .output()
        .unwrap();
    assert!(listed.status.success());
    let wanted: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(wanted.len(), 7, "{wanted:?}");
    assert_eq!(listing.len(), wanted.len(), "{listing:?}");

    let daemon_dir = work.path().join("containerd");
    std::fs::create_dir_all(&daemon_dir).unwrap();
    let containerd = Containerd::start(&daemon_dir);
    let _watchdog = kill_after(containerd.child.id(), Duration::from_secs(240));
    for entry in &listing {
        let file = archives.join(entry["file"].as_str().unwrap());
        containerd.ctr(&["images", "import", file.to_str().unwrap()]);
    }

    // REF TYPE DIGEST SIZE PLATFORMS LABELS: each under kubeadm's reference with capstan's digest.
    let images = containerd.ctr(&["images", "ls"]);
    let names: Vec<&str> = images
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names.len(),
        wanted.len(),
        "nothing else was imported:\n{images}"
    );
    for reference in &wanted {
        let entry = listing
            .iter()
            .find(|e| e["reference"] == reference.as_str())
            .unwrap_or_else(|| panic!("capstan wrote no archive for {reference}: {listing:?}"));
        let digest = entry["manifestDigest"].as_str().unwrap();
        let line = images
            .lines()
            .find(|l| l.split_whitespace().next() == Some(reference.as_str()))
            .unwrap_or_else(|| panic!("{reference} is not in containerd:\n{images}"));
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            columns[1], "application/vnd.oci.image.manifest.v1+json",
            "{line}"
        );
        assert_eq!(columns[2], digest, "{line}");
        assert!(line.contains("linux/amd64"), "{line}");
    }
    // REF TYPE DIGEST STATUS SIZE UNPACKED: every blob there, and a snapshot to run from.
    let checked = containerd.ctr(&["images", "check"]);
    for reference in &wanted {
        let line = checked
            .lines()
            .find(|l| l.split_whitespace().next() == Some(reference.as_str()))
            .unwrap_or_else(|| panic!("{reference} not checked:\n{checked}"));
        assert!(line.contains("complete"), "{line}");
        assert!(line.trim_end().ends_with("true"), "not unpacked: {line}");
    }

    // The pause image as a sandbox runs it: its entrypoint, its user, until SIGTERM. `ctr run` in
    // the foreground ends with the task, and says why it could not start in its output.
    let pause = wanted.iter().find(|r| r.contains("/pause:")).unwrap();
    let run_log = work.path().join("ctr-run.log");
    let run_out = std::fs::File::create(&run_log).unwrap();
    let mut run = containerd
        .ctr_command()
        .args(["run", "--rm", pause, PAUSE_CONTAINER])
        .stdin(Stdio::null())
        .stdout(run_out.try_clone().unwrap())
        .stderr(run_out)
        .spawn()
        .unwrap();
    let _run_watchdog = kill_after(run.id(), Duration::from_secs(120));
    let running = |containerd: &Containerd| {
        containerd
            .ctr(&["tasks", "ls"])
            .lines()
            .any(|l| l.starts_with(PAUSE_CONTAINER) && l.contains("RUNNING"))
    };
    let mut ended = None;
    capstan_testkit::until(Duration::from_secs(60), || {
        ended = run.try_wait().ok().flatten();
        ended.is_some() || running(&containerd)
    });
    assert!(
        ended.is_none() && running(&containerd),
        "pause is not running (ctr run: {ended:?}): {}\n--- containerd's log ---\n{}",
        std::fs::read_to_string(&run_log).unwrap_or_default(),
        std::fs::read_to_string(&containerd.log).unwrap_or_default()
    );
    let processes = containerd.ctr(&["tasks", "ls"]);
    // Its process runs as the image's user, 65535 (upstream pause's).
    let pid = processes
        .lines()
        .find(|l| l.starts_with(PAUSE_CONTAINER))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .to_owned();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(uid, "65535", "{status}");
    // As the sandbox's PID 1, pause gets only the signals it has a handler for: SIGTERM before its
    // handler is in would be dropped. The kernel shows the handlers (SigCgt, bit 15 - 1: SIGTERM).
    let handles_sigterm = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            })
            .is_some_and(|mask| mask & (1 << 14) != 0)
    };
    assert!(
        capstan_testkit::until(Duration::from_secs(60), handles_sigterm),
        "pause never installed its SIGTERM handler"
    );
    containerd.ctr(&["tasks", "kill", "--signal", "SIGTERM", PAUSE_CONTAINER]);
    let finished = run.wait().unwrap();
    let said = std::fs::read_to_string(&run_log).unwrap_or_default();
    assert!(
        finished.success(),
        "pause did not exit 0 on SIGTERM: {finished}\n{said}"
    );
    assert!(said.contains("shutting down, got signal"), "{said}");
}

/// `capstan image archives` on a copy of the binaries' directory, with `change` applied to it:
/// (exit code, stderr).
fn archives_of_changed_binaries(change: impl Fn(&Path)) -> (Option<i32>, String) {
    let peers = peers_bin();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&peers).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    change(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["image", "archives", "--kubernetes-bin"])
        .arg(&dir)
        .arg("--out")
        .arg(work.path().join("out"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_or_mismatched_binary_is_refused_with_its_name_and_what_to_do() {
    let (code, stderr) = archives_of_changed_binaries(|dir| {
        std::fs::remove_file(dir.join("kube-proxy")).unwrap();
    });
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("lacks kube-proxy:"), "{stderr}");
    assert!(stderr.contains("kubernetes/server/bin"), "{stderr}");

    // A binary of another release (etcd's, under kube-proxy's name) is named with both versions.
    let (code, stderr) = archives_of_changed_binaries(|dir| {
        std::fs::remove_file(dir.join("kube-proxy")).unwrap();
        std::os::unix::fs::symlink(peers_bin().join("etcd"), dir.join("kube-proxy")).unwrap();
    });
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("kube-proxy is 3.6.6 but kubeadm is v1.35.4"),
        "{stderr}"
    );

    // A binary that cannot be run says so, and how to fix it.
    let (code, stderr) = archives_of_changed_binaries(|dir| {
        std::fs::remove_file(dir.join("pause")).unwrap();
        std::fs::copy(peers_bin().join("pause"), dir.join("pause")).unwrap();
        std::fs::set_permissions(
            dir.join("pause"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
    });
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("pause is not executable: chmod +x it"),
        "{stderr}"
    );
}
