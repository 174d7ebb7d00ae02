//! The system libvirt of a real-VM test: `virsh` against `qemu:///system`, and [`Libvirt::ensure`],
//! which starts libvirtd and virtlogd in the test's network namespace when none answers and makes
//! sure the `default` storage pool exists and runs.

use crate::until;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The hypervisor the real-VM tests use.
pub const URI: &str = "qemu:///system";

/// Where the `default` pool keeps its volumes.
pub const POOL_DIR: &str = "/var/lib/libvirt/images";

/// Runs `virsh -c qemu:///system ARGS`: whether it succeeded, and its output and errors.
pub fn virsh(args: &[&str]) -> (bool, String) {
    let out = Command::new("virsh")
        .arg("-c")
        .arg(URI)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("virsh: {e} (run scripts/install-deps.sh)"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs `virsh ARGS` and returns its output; it must succeed.
pub fn virsh_ok(args: &[&str]) -> String {
    let (ok, out) = virsh(args);
    assert!(ok, "virsh {}: {out}", args.join(" "));
    out
}

/// libvirtd and virtlogd answering in this test's network namespace, with the `default` storage
/// pool running.
pub struct Libvirt;

/// The network namespace of process `pid` (`net:[4026531840]`), when it can be read.
fn network_namespace(pid: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// The pids of running processes called `name`.
fn pids_of(name: &str) -> Vec<String> {
    let out = Command::new("pgrep").args(["-x", name]).output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

impl Libvirt {
    /// Starts the daemons if none answers (refusing one that runs in another network namespace)
    /// and the `default` pool if it is missing or stopped.
    pub fn ensure() -> Self {
        // QEMU runs in libvirtd's network namespace and its guests reach the host's loopback there
        // (10.0.2.2): a libvirtd in another namespace than this test's servers cannot work.
        let ours = network_namespace("self");
        for pid in pids_of("libvirtd") {
            let theirs = network_namespace(&pid);
            assert!(
                theirs == ours,
                "libvirtd (pid {pid}) runs in network namespace {theirs:?}, this test in {ours:?}: its \
                 VMs could not reach the test's servers. Stop it (`pkill -x libvirtd; pkill -x \
                 virtlogd`) and run the test again; it starts its own."
            );
        }
        if !virsh(&["version"]).0 {
            // QEMU runs as root: libvirt probes QEMU's capabilities as root, and with QEMU as
            // another user that cannot open /dev/kvm it finds its cache stale on every call and
            // probes again (seconds per request).
            let conf = "/etc/libvirt/qemu.conf";
            let text = std::fs::read_to_string(conf).unwrap_or_default();
            if !text.lines().any(|l| l.trim() == "user = \"root\"") {
                std::fs::write(conf, format!("{text}\nuser = \"root\"\ngroup = \"root\"\n"))
                    .unwrap();
            }
            for daemon in ["virtlogd", "libvirtd"] {
                // Under tini as a subreaper: QEMU processes libvirt daemonizes would otherwise be
                // orphaned to a PID 1 that does not reap them, and libvirt waits for the zombies.
                let _ = std::fs::remove_file(format!("/run/{daemon}.pid"));
                // `setsid -f` forks the daemon into its own session and returns at once.
                let started = Command::new("setsid")
                    .args(["-f", "tini", "-s", "--", daemon])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .unwrap_or_else(|e| panic!("{daemon}: {e} (run scripts/install-deps.sh)"));
                assert!(started.success(), "starting {daemon}");
            }
            assert!(
                until(Duration::from_secs(30), || virsh(&["version"]).0),
                "libvirtd did not answer"
            );
        }
        let (_, pools) = virsh(&["pool-list", "--all", "--name"]);
        if !pools.lines().any(|l| l.trim() == "default") {
            std::fs::create_dir_all(POOL_DIR).unwrap();
            let (ok, out) = virsh(&["pool-define-as", "default", "dir", "--target", POOL_DIR]);
            assert!(ok || out.contains("already exists"), "{out}");
        }
        let (_, info) = virsh(&["pool-info", "default"]);
        if !info.contains("running") {
            let (ok, out) = virsh(&["pool-start", "default"]);
            assert!(ok || out.contains("already active"), "{out}");
        }
        Self
    }
}
