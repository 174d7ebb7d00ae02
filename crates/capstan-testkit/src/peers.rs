//! The real Kubernetes binaries `scripts/peers.sh` builds from the Go modules pinned in
//! `tools/peers/` (kube-apiserver, kubelet, kubeadm, kubectl, etcd, …): found through
//! `CAPSTAN_PEERS_BIN` (which `scripts/test.sh` exports), else the cache directory
//! `scripts/peers.sh --dir` names. A missing binary fails the test with what to run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory that holds the peers.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPSTAN_PEERS_BIN") {
        return PathBuf::from(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers.sh");
    let out = Command::new(&script)
        .arg("--dir")
        .output()
        .unwrap_or_else(|err| panic!("running {} --dir: {err}", script.display()));
    assert!(
        out.status.success(),
        "{} --dir failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The peer binary `name` (`etcd`, `kube-apiserver`, `kubectl`, …).
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} does not exist: run scripts/peers.sh (it builds the Kubernetes peers from tools/peers/) or set CAPSTAN_PEERS_BIN",
        path.display()
    );
    path
}
