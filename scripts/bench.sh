#!/usr/bin/env bash
# Every benchmark with its yardstick: installs Debian's etcd-server (the durable-store comparison), then
#   - capstan bench store: the embedded API vs etcd (creates/updates per second, watch latency with 100
#     watchers, memory and restart time at 100,000 objects)
#   - capstan bench hosts: 1,000 fake BareMetalHosts to available and provisioned (time, CPU, peak RSS)
#   - capstan bench image-write: the agent's raw image write against dd
#   - criterion: render and lint of 1,000-host bundles
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v etcd >/dev/null; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
fi
cargo build --release --quiet -p capstan-cli
target/release/capstan bench store "$@"
target/release/capstan bench hosts --count 1000
target/release/capstan bench image-write --size-mib 1024
cargo bench --quiet -p capstan-render -p capstan-lint
