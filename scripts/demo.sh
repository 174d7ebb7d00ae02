#!/usr/bin/env bash
# capstan's main job on a fresh clone: build, render the bundled example cluster (examples/capi-1.yaml),
# lint it, start the embedded management plane, apply the hosts and watch them go through their
# lifecycle, then apply the cluster and watch it come up: hosts claimed and provisioned with kubeadm
# bootstrap data, the control plane initialised and joined, the worker, Cilium by ClusterResourceSet.
#
#   scripts/demo.sh          run the demo; `capstan serve` keeps running afterwards (it says how to stop it)
#   scripts/demo.sh stop     stop the server a previous run left running
#
# The example's BMCs are real Redfish addresses on 127.0.0.1:8000 that nothing answers on a fresh
# machine, so the demo renders the bundle with `--fake-bmcs`: each host's BMC becomes capstan's
# in-memory fake BMC (fake://), whose simulated agent inspects and provisions in a fraction of a
# second. The server runs with --simulate-workloads: capstan also plays each workload cluster (its
# API server, its Nodes registering when a host's bootstrap data would run kubeadm). Only the
# machines and the workload clusters are simulated; the API, the store and every controller (hosts,
# Cluster API core, kubeadm bootstrap and control plane, Metal3, ClusterResourceSet,
# MachineHealthCheck) are the real ones.
#
# What it leaves behind, and says so: out/capi-1 (the rendered bundle) and .capstan/demo (the server's
# data directory, kubeconfig, log and pid file), and the running server. On any failure it stops the
# server it started.
#
# Environment:
#   CAPSTAN_DEMO_PROFILE  dev (default) or release: the cargo profile to build and run. dev is the
#                         fastest cold build (workspace crates unoptimised, dependencies at
#                         opt-level 1), plenty for simulated machines; release is the optimised one
#   CARGO_TARGET_DIR      honoured as cargo honours it
#   CAPSTAN_BIN           a capstan binary to use instead of building one
#   CAPSTAN_DEMO_LISTEN   the API's address (default 127.0.0.1:6443, or a free port when that is taken)
#   CAPSTAN_DEMO_TIMEOUT  seconds to wait for each step of the hosts' lifecycle (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."

data_dir=.capstan/demo
bundle=out/capi-1
pid_file=$data_dir/serve.pid
step_timeout=${CAPSTAN_DEMO_TIMEOUT:-120}

say() { printf '\n==> %s\n' "$*"; }

# Whether a process runs (a zombie waiting for its reaper does not).
alive() {
  [ -r "/proc/$1/stat" ] && ! awk '{ sub(/.*\) /, ""); exit $1 != "Z" }' "/proc/$1/stat"
}

# The pid in the pid file, if that process is still a `capstan serve` (not a recycled pid).
running_server() {
  [ -f "$pid_file" ] || return 1
  local pid
  pid=$(cat "$pid_file")
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'capstan serve' || return 1
  echo "$pid"
}

stop_server() {
  local pid
  if ! pid=$(running_server); then
    rm -f "$pid_file"
    echo "no demo server is running"
    return 0
  fi
  kill "$pid"
  local deadline=$((SECONDS + 30))
  while alive "$pid"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "capstan serve (pid $pid) did not stop within 30 s of SIGTERM; sending SIGKILL" >&2
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  rm -f "$pid_file"
  echo "stopped capstan serve (pid $pid); its data stays in $data_dir"
}

if [ "${1:-}" = stop ]; then
  stop_server
  exit 0
elif [ $# -gt 0 ]; then
  echo "usage: scripts/demo.sh [stop]" >&2
  exit 2
fi

# --- build -------------------------------------------------------------------------------------------
profile=${CAPSTAN_DEMO_PROFILE:-dev}
if [ -n "${CAPSTAN_BIN:-}" ]; then
  capstan=$CAPSTAN_BIN
  say "using $capstan"
else
  case $profile in
    release) build_flag=--release; out_dir=release ;;
    dev) build_flag=; out_dir=debug ;;
    *) echo "CAPSTAN_DEMO_PROFILE must be dev or release, not $profile" >&2; exit 2 ;;
  esac
  # A fresh machine lacks libvirt's development files (the KVM provider links libvirt) and perhaps
  # the C toolchain: install them (as root or with sudo), or say the exact command and stop.
  say "checking the build's system packages (scripts/install-deps.sh build)"
  scripts/install-deps.sh build
  if ! command -v cargo >/dev/null; then
    echo "cargo is not on PATH: install Rust (https://rustup.rs, or Debian's rustup package) and run again" >&2
    exit 2
  fi
  say "building capstan ($profile profile; the first build compiles every dependency: several minutes, with cargo's progress below)"
  # Not --quiet: cargo's progress shows that the build is moving.
  cargo build $build_flag --package capstan-cli --bin capstan
  capstan=${CARGO_TARGET_DIR:-target}/$out_dir/capstan
fi

# --- render and lint ---------------------------------------------------------------------------------
say "rendering examples/capi-1.yaml into $bundle (BMCs replaced by capstan's fake BMCs)"
"$capstan" render examples/capi-1.yaml -o "$bundle" --fake-bmcs
say "linting $bundle"
"$capstan" lint "$bundle"

# --- the management plane ----------------------------------------------------------------------------
if pid=$(running_server); then
  say "stopping the demo server a previous run left running (pid $pid)"
  stop_server
fi
listen=${CAPSTAN_DEMO_LISTEN:-127.0.0.1:6443}
if [ -z "${CAPSTAN_DEMO_LISTEN:-}" ] && (exec 3<>/dev/tcp/127.0.0.1/6443) 2>/dev/null; then
  echo "127.0.0.1:6443 is in use; the demo's server takes a free port instead"
  listen=127.0.0.1:0
fi
say "starting capstan serve (a fresh data directory: $data_dir)"
rm -rf "$data_dir"
mkdir -p "$data_dir"
# --simulate-workloads: the example's hosts have fake BMCs, so capstan also plays each workload
# cluster (its API server, its Nodes joining); see docs/clusters.md for what is simulated.
"$capstan" serve --simulate-workloads --data-dir "$data_dir" --listen "$listen" \
  >"$data_dir/serve.out" 2>"$data_dir/serve.log" &
server_pid=$!
echo "$server_pid" >"$pid_file"
completed=
# Whatever goes wrong from here on, the server this run started does not outlive it unannounced.
on_exit() {
  if [ -z "$completed" ]; then
    echo "the demo failed; stopping the capstan serve it started (log: $data_dir/serve.log)" >&2
    stop_server >&2
  fi
}
trap on_exit EXIT

deadline=$((SECONDS + 60))
until grep -q 'ready at' "$data_dir/serve.out" 2>/dev/null; do
  if ! alive "$server_pid"; then
    echo "capstan serve exited before it was ready:" >&2
    cat "$data_dir/serve.log" >&2
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "capstan serve was not ready within 60 s (log: $data_dir/serve.log)" >&2
    exit 1
  fi
  sleep 0.1
done
cat "$data_dir/serve.out"
export KUBECONFIG=$PWD/$data_dir/kubeconfig

# --- hosts -------------------------------------------------------------------------------------------
# Polls the hosts' states, printing each change, until every host (or only HOST) is in one of the
# given states: wait_for_hosts 'STATE[|STATE…]' [HOST].
wait_for_hosts() {
  local wanted=$1 only=${2:-} deadline=$((SECONDS + step_timeout)) previous= table states
  while :; do
    table=$("$capstan" get baremetalhosts --color never)
    # Cells are separated by three or more spaces; a state may contain one (registration error).
    states=$(awk 'NR == 1 { for (i = 1; i <= split($0, h, /   +/); i++) if (h[i] == "STATE") col = i; next }
                  { split($0, cell, /   +/); print cell[1] ": " cell[col] }' <<<"$table")
    [ -z "$only" ] || states=$(grep "^$only: " <<<"$states" || true)
    if [ "$states" != "$previous" ]; then
      grep -Fvx -f <(printf '%s\n' "$previous") <<<"$states" | sed 's/^/  /' || true
      previous=$states
    fi
    if [ -n "$states" ] && awk -v wanted="^($wanted)\$" '
        { sub(/^[^:]*: /, ""); if ($0 !~ wanted) bad = 1 } END { exit bad }' <<<"$states"; then
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "the hosts did not all reach $wanted within $step_timeout s:" >&2
      echo "$table" >&2
      echo "(\`capstan describe bmh NAME\` says why; the server's log is $data_dir/serve.log)" >&2
      return 1
    fi
    sleep 0.5
  done
}

say "applying the hosts: registration, inspection by the (simulated) agent, then available"
"$capstan" apply -f "$bundle/hosts"
wait_for_hosts available

# --- the cluster -------------------------------------------------------------------------------------
say "applying the cluster: Cluster, Metal3Cluster, KubeadmControlPlane, MachineDeployment, Cilium"
"$capstan" apply -f "$bundle/cluster"

# Polls the Machines, printing each change, until N of them are Running with a Node.
wait_for_machines() {
  local want=$1 deadline=$((SECONDS + step_timeout)) previous= table running
  while :; do
    table=$("$capstan" get machines --color never 2>/dev/null || true)
    if [ "$table" != "$previous" ]; then
      echo "$table" | sed 's/^/  /'
      echo
      previous=$table
    fi
    running=$(awk 'NR > 1 && / Running / && $0 !~ /<none>/ { n++ } END { print n + 0 }' <<<"$table")
    if [ "$running" -ge "$want" ]; then
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "the cluster's machines did not all reach Running within $step_timeout s" >&2
      echo "(\`capstan describe cluster capi-1\` says why; the server's log is $data_dir/serve.log)" >&2
      return 1
    fi
    sleep 1
  done
}
say "the cluster comes up: hosts claimed and provisioned with kubeadm bootstrap data, the control"
echo "    plane initialised on the first, the others joining one at a time, then the worker"
wait_for_machines 4
say "capstan describe cluster capi-1"
"$capstan" describe cluster capi-1
"$capstan" kubeconfig capi-1 >"$data_dir/capi-1.kubeconfig"
if command -v kubectl >/dev/null; then
  say "the workload cluster, as its users see it (kubeconfig: $data_dir/capi-1.kubeconfig)"
  deadline=$((SECONDS + step_timeout))
  until kubectl --kubeconfig "$data_dir/capi-1.kubeconfig" -n kube-system get daemonset cilium >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "Cilium did not arrive by ClusterResourceSet within $step_timeout s" >&2
      exit 1
    fi
    sleep 1
  done
  kubectl --kubeconfig "$data_dir/capi-1.kubeconfig" get nodes -L node-role.kubernetes.io/worker
  kubectl --kubeconfig "$data_dir/capi-1.kubeconfig" -n kube-system get daemonsets,deployments
fi

# --- what there is -----------------------------------------------------------------------------------
say "what the management plane holds"
"$capstan" get baremetalhosts
"$capstan" get clusters
"$capstan" get kubeadmcontrolplanes
"$capstan" get machinedeployments
say "capstan describe bmh capi-1-cp-0 (first lines)"
"$capstan" describe bmh capi-1-cp-0 | head -20

completed=1
cat <<EOF

capstan serve is running:
  pid         $server_pid (also in $pid_file)
  API         $(sed -n 's/.*ready at \([^ ]*\).*/\1/p' "$data_dir/serve.out")
  data dir    $data_dir (state, certificates, kubeconfig; log: $data_dir/serve.log)
  bundle      $bundle
Use it:
  export KUBECONFIG=$PWD/$data_dir/kubeconfig
  kubectl get bmh,clusters,machines          # or: $capstan get bmh
  kubectl --kubeconfig $data_dir/capi-1.kubeconfig get nodes   # the (simulated) workload cluster
  $capstan describe cluster capi-1
Stop it:
  scripts/demo.sh stop   # or: kill $server_pid
EOF
