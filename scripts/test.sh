#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs every test of the
# workspace (unit, integration, end-to-end, doc tests) plus formatting and lint checks.
#
# The tests themselves run in a network namespace of their own with only a loopback interface: every
# server a test starts listens on 127.0.0.1, and an address outside the machine (a cluster's VIP, a
# BMC address in an example) fails at once instead of being tried for real.
set -euo pipefail
cd "$(dirname "$0")/.."

# One clean build: incremental state would only add gigabytes to the target directory.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# First the README's main job as a newcomer runs it, before anything else installs a package
# (in CI without libvirt's development files, which the main job must install itself).
scripts/main-job-check.sh
scripts/install-deps.sh
# The real Kubernetes peers (kube-apiserver, kubelet, kubeadm, etcd, …), built from the Go modules
# pinned in tools/peers/ while the network is there, or found in their cache: in the background,
# where the Go compiler fills the cores cargo leaves idle (linking, single-crate stretches).
peers_log=$(mktemp)
scripts/peers.sh >"$peers_log" 2>&1 &
peers_pid=$!
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Build everything while the network is still there (crates.io), then test without it.
cargo build --workspace --all-targets --quiet
# The end-to-end tests build boot media from Debian packages (`apt-get download` into capstan's
# package cache); fetch them now, while the network is there.
warm=$(mktemp -d)
target/debug/capstan ramdisk build --out "$warm/ramdisk" --agent target/debug/capstan-agent >/dev/null
target/debug/capstan ramdisk test-image --out "$warm/images" >/dev/null
# The Debian cloud-init image of the real-VM cluster test and the KVM provider's real-VM test
# (debootstrap's root filesystem is cached).
target/debug/capstan ramdisk cloud-image --out "$warm/cloud" >/dev/null
# The offline-install test's bundle carries capstan's package and the Debian packages it depends on
# (`apt-get download` into the same cache).
scripts/package.sh --bin-dir target/debug --out "$warm/dist" --compression gzip >/dev/null
target/debug/capstan bundle create --deb "$(ls "$warm"/dist/capstan_*_amd64.deb)" --out "$warm/bundle.tar" >/dev/null
rm -rf "$warm"
# The real Kubernetes peers, built beside the Rust build (started above).
if ! wait "$peers_pid"; then
    echo "scripts/peers.sh failed:" >&2
    cat "$peers_log" >&2
    exit 1
fi
CAPSTAN_PEERS_BIN=$(tail -n 1 "$peers_log")
export CAPSTAN_PEERS_BIN
rm -f "$peers_log"
# The Kubernetes node image's root filesystem (debootstrap) and its OCI image archives, cached for
# the node image tests while the network is there.
node_warm=$(mktemp -d)
target/debug/capstan image archives --kubernetes-bin "${CAPSTAN_PEERS_BIN:-$(scripts/peers.sh)}" --out "$node_warm" >/dev/null
rm -rf "$node_warm"

# A libvirtd (and its virtlogd) an earlier run of this suite started inside that run's network
# namespace outlives the run; its VMs could not reach this run's servers, and the tests refuse it.
# Such leftovers are stopped; a libvirtd of the machine's own namespace is left alone.
own_namespace=$(readlink /proc/self/ns/net)
for daemon in libvirtd virtlogd; do
    for pid in $(pgrep -x "$daemon" || true); do
        if [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$own_namespace" ]; then
            echo "stopping $daemon (pid $pid), left in another network namespace by an earlier run" >&2
            kill "$pid" 2>/dev/null || true
            tail --pid="$pid" -f /dev/null
        fi
    done
done

isolated=()
if [ "$(id -u)" -eq 0 ] && unshare --net true 2>/dev/null; then
    isolated=(unshare --net sh -c 'ip link set lo up && exec "$@"' isolated)
else
    echo "not root or no unshare: tests run in the machine's own network namespace" >&2
fi

if cargo nextest --version >/dev/null 2>&1; then
    # Per-test processes with a hard per-test time limit (.config/nextest.toml).
    "${isolated[@]}" cargo nextest run --workspace --all-targets --no-tests=warn
else
    echo "cargo-nextest not found: running cargo test (no per-test time limit)" >&2
    "${isolated[@]}" timeout --kill-after=30s 45m cargo test --workspace --all-targets
fi
"${isolated[@]}" cargo test --workspace --doc
