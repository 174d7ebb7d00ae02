#!/usr/bin/env bash
# The README's main job (`scripts/demo.sh`) as a newcomer runs it on a fresh machine: without the
# build's system packages, which the main job must install itself. `scripts/test.sh` runs this
# first, before anything else installs a package.
#
# In CI (CI=true) it first removes the build packages a fresh machine of this kind lacks (those of
# `scripts/install-deps.sh --list build` that are not part of the machine image: libvirt's
# development files; the C toolchain, pkg-config and git come with the image, and cargo cannot link
# without them) and checks that pkg-config no longer finds libvirt, so that a missing install step
# in the main job fails CI instead of a user. On a developer's machine it removes nothing and says
# whether the packages were already there.
#
# The demo builds the dev profile (CAPSTAN_DEMO_PROFILE=dev) into this checkout's target directory,
# which the test build then reuses; it runs to capi-1's 4 Machines Running and is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

# The build packages the machine image does not have.
not_in_image=(libvirt-dev)

if [ "${CI:-}" = true ]; then
  present=()
  for p in "${not_in_image[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ]; then
      present+=("$p")
    fi
  done
  if [ ${#present[@]} -gt 0 ]; then
    echo "main-job-check: removing ${present[*]} (left by an earlier run on this machine) so that the main job must install it"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${present[@]}" >/dev/null
  fi
  if pkg-config --exists libvirt 2>/dev/null; then
    echo "main-job-check: pkg-config still finds libvirt after removing ${not_in_image[*]}" >&2
    exit 1
  fi
  echo "main-job-check: libvirt's development files are absent (pkg-config finds no libvirt)"
else
  if pkg-config --exists libvirt 2>/dev/null; then
    echo "main-job-check: libvirt's development files are already installed here (not CI: nothing removed), so this run does not prove the main job installs them"
  fi
fi

start=$SECONDS
CAPSTAN_DEMO_PROFILE=dev CAPSTAN_DEMO_LISTEN=127.0.0.1:0 scripts/demo.sh
echo "main-job-check: the main job took $((SECONDS - start)) s"
scripts/demo.sh stop
