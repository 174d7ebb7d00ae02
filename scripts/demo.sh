#!/usr/bin/env bash
# capstan's main job on a fresh machine: build, render the bundled example, lint it, start the embedded
# management plane and apply the example to it, then show it with kubectl and capstan.
# Leaves `capstan serve` running (its PID is in .capstan/serve.pid) so you can keep using kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet
capstan=target/release/capstan

$capstan render examples/capi-1.yaml -o out/capi-1
$capstan lint out/capi-1

mkdir -p .capstan
if [ -f .capstan/serve.pid ] && kill -0 "$(cat .capstan/serve.pid)" 2>/dev/null; then
  kill "$(cat .capstan/serve.pid)" && wait "$(cat .capstan/serve.pid)" 2>/dev/null || true
fi
coproc SERVE { exec $capstan serve --data-dir .capstan --listen 127.0.0.1:6443; }
echo "$SERVE_PID" > .capstan/serve.pid
read -r ready <&"${SERVE[0]}"   # the server prints one line when it is ready
echo "$ready"

export KUBECONFIG=$PWD/.capstan/kubeconfig
$capstan apply -f out/capi-1/hosts -f out/capi-1/cluster
kubectl get baremetalhosts,clusters,kubeadmcontrolplanes,machinedeployments
$capstan describe bmh capi-1-cp-0 | head -20
echo
echo "capstan serve is running (pid $SERVE_PID); KUBECONFIG=$KUBECONFIG"
