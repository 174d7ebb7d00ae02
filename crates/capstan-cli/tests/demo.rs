//! The README's main job, `scripts/demo.sh`, from a fresh clone of this repository's HEAD: it must
//! render, lint, serve, take the example's hosts to `available` (and one to `provisioned` and back),
//! say what it left running, and `scripts/demo.sh stop` must leave nothing running.
//!
//! The demo uses this test run's `capstan` (`CAPSTAN_BIN`) instead of building its own, and a free
//! API port (`CAPSTAN_DEMO_LISTEN=127.0.0.1:0`), so it neither rebuilds the workspace nor touches a
//! server the developer may have on 6443.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs `scripts/demo.sh ARGS` in `clone`, killed (and failed) after `limit`.
fn demo(clone: &Path, args: &[&str], limit: Duration) -> Output {
    use wait_timeout::ChildExt;
    let stdout = tempfile::tempfile().unwrap();
    let stderr = tempfile::tempfile().unwrap();
    let mut child = Command::new("bash")
        .arg("scripts/demo.sh")
        .args(args)
        .current_dir(clone)
        .env("CAPSTAN_BIN", env!("CARGO_BIN_EXE_capstan"))
        .env("CAPSTAN_DEMO_LISTEN", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .env_remove("CAPSTAN_DATA_DIR")
        .env_remove("CAPSTAN_LOG")
        .stdin(Stdio::null())
        .stdout(stdout.try_clone().unwrap())
        .stderr(stderr.try_clone().unwrap())
        .spawn()
        .unwrap();
    let status = match child.wait_timeout(limit).unwrap() {
        Some(status) => status,
        None => {
            let _ = child.kill();
            child.wait().unwrap()
        }
    };
    let read = |mut file: std::fs::File| {
        use std::io::{Read, Seek};
        let mut bytes = Vec::new();
        file.seek(std::io::SeekFrom::Start(0)).unwrap();
        file.read_to_end(&mut bytes).unwrap();
        bytes
    };
    Output {
        status,
        stdout: read(stdout),
        stderr: read(stderr),
    }
}

/// Whether `pid` is a live process (a zombie awaiting its reaper is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// Live processes whose working directory is inside `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

#[test]
fn the_demo_runs_from_a_fresh_clone_and_stop_leaves_nothing_running() {
    let repo = repo_root();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let dir = tempfile::tempdir().unwrap();
    let clone = dir.path().join("capstan");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    git(&clone, &["checkout", "--quiet", "--detach", &head]);

    let run = demo(&clone, &[], Duration::from_secs(600));
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let pid_file = clone.join(".capstan/demo/serve.pid");
    let pid: Option<u32> = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok());
    if !run.status.success() {
        // Nothing may be left running after a failure either.
        let left = processes_in(&clone);
        panic!(
            "demo failed ({:?}); left running: {left:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            run.status
        );
    }
    for expected in [
        "rendering examples/capi-1.yaml",
        "capstan lint: 0 errors, 0 warnings",
        "ready at https://127.0.0.1:",
        "capi-1-cp-0: available",
        "capi-1-worker-0: available",
        "capstan describe cluster capi-1",
        "Cluster/capi-1",
        "capstan serve is running:",
        "scripts/demo.sh stop",
        "KUBECONFIG=",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing:\n{stdout}\n--- stderr\n{stderr}"
        );
    }
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(
            stdout.contains("daemonset.apps/cilium"),
            "with kubectl the demo shows Cilium in the workload cluster:\n{stdout}"
        );
    }
    assert!(!stdout.contains("cilium install"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let pid = pid.expect("the demo writes the server's pid");
    assert!(stdout.contains(&format!("pid         {pid}")), "{stdout}");
    assert!(alive(pid), "the demo leaves its announced server running");
    assert_eq!(
        processes_in(&clone),
        vec![pid],
        "only the announced server runs"
    );

    let stop = demo(&clone, &["stop"], Duration::from_secs(60));
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(
        String::from_utf8_lossy(&stop.stdout)
            .contains(&format!("stopped capstan serve (pid {pid})")),
        "{}",
        String::from_utf8_lossy(&stop.stdout)
    );
    assert!(!alive(pid), "stopped");
    assert!(processes_in(&clone).is_empty(), "nothing left running");
    assert!(!pid_file.exists());
}
