#!/usr/bin/env bash
# Installs the system packages capstan's tests drive as real peers:
#   cloud-init  - `cloud-init devel net-convert` judges the network_data.json capstan renders
#   frr         - `vtysh --dryrun` judges the router configuration capstan renders
#   curl        - raw HTTPS requests in the API server tests (401, client certificates, TLS only)
#   sushy-tools - `sushy-emulator --fake`, the Redfish BMC the capstan-drivers tests drive (from PyPI,
#                 into the python3 on PATH; with pyenv its shims put sushy-emulator on PATH)
# kubectl is part of the machine image (1.32, with 1.27-1.33 in /usr/lib/google-cloud-sdk/bin).
# Idempotent: packages already present are not reinstalled.
set -euo pipefail

packages=(cloud-init frr curl)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  echo "installing: ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --help rather than command -v: a stale pyenv shim outlives an uninstalled package.
if ! sushy-emulator --help >/dev/null 2>&1; then
  echo "installing: sushy-tools"
  python3 -m pip install --quiet --disable-pip-version-check sushy-tools
  # pyenv only creates shims for new console scripts on a rehash.
  if command -v pyenv >/dev/null; then pyenv rehash; fi
  hash -r
fi

for tool in cloud-init vtysh curl kubectl sushy-emulator; do
  command -v "$tool" >/dev/null || { echo "install-deps: $tool is still missing" >&2; exit 1; }
done
