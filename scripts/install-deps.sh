#!/usr/bin/env bash
# Installs the system packages capstan needs, in two sets:
#
#   scripts/install-deps.sh build   what building and running capstan needs (the README's main job,
#                                   `scripts/demo.sh`, calls this): a C toolchain for the bundled
#                                   SQLite and ring, and libvirt's development files with pkg-config
#                                   (the KVM provider links the system libvirt)
#   scripts/install-deps.sh [test]  the build set plus everything the tests drive as real peers (below)
#   scripts/install-deps.sh --list [build|test]   print the set's Debian packages, one a line
#
# The test set's peers:
#   cloud-init  - `cloud-init devel net-convert` judges the network_data.json capstan renders
#   frr         - `vtysh --dryrun` judges the router configuration capstan renders
#   curl        - raw HTTPS requests in the API server tests (401, client certificates, TLS only)
#   sushy-tools - `sushy-emulator`, the Redfish BMC the tests drive: `--fake`, and backed by libvirt
#                 in the end-to-end test (from PyPI, with libvirt-python, into the python3 on PATH;
#                 with pyenv its shims put sushy-emulator on PATH)
#   libvirt, QEMU (qemu-system-x86, qemu-utils), tini - the end-to-end test's virtual machines
#                 (software emulation); tini reaps the QEMU processes libvirt daemonizes
#   isolinux, syslinux, mtools, dosfstools, xorriso, cpio, kmod - boot media, the test OS image,
#                 and the checks of what capstan-iso writes; `capstan ramdisk build` downloads the
#                 Debian kernel and busybox-static packages itself (apt-get download)
#   debootstrap, e2fsprogs - the root filesystem of the Debian cloud-init image the cluster
#                 end-to-end test provisions (`capstan ramdisk cloud-image`) and of the Kubernetes
#                 node image (`capstan image build`, which also needs fdisk's sfdisk)
#   containerd, runc - the node image test imports capstan's OCI image archives into a real
#                 containerd 1.6 and runs the pause image (the node image has its own from debootstrap)
#   sasl2-bin, libsasl2-modules - `saslpasswd2` and the DIGEST-MD5 mechanism: the KVM credentials
#                 test starts a libvirtd whose TCP listener asks for a SASL username and password
#   openssl     - the certificates of that test's TLS listener (a CA, server and client certificates)
#   openssh-server - `sshd`, the ssh server of that test's `qemu+ssh://` hypervisor (its remote side,
#                 `virt-ssh-helper`, comes with libvirt-daemon)
#   dpkg-dev    - `dpkg-deb` and `dpkg-shlibdeps`, which build and check capstan's Debian package
#   kubernetes (PyPI, pinned) - the official Python client, a second real client of `capstan serve`
#   cargo-nextest - the test runner (per-test processes and time limits), from crates.io
# kubectl is part of the machine image (1.32, with 1.27-1.33 in /usr/lib/google-cloud-sdk/bin).
# Idempotent: packages already present are not reinstalled. Needs root (or sudo) to install; without
# either it prints the exact command to run and exits 2.
set -euo pipefail

build_packages=(gcc libc6-dev make pkg-config libvirt-dev git)
test_packages=(cloud-init frr curl
  libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils
  tini dnsmasq-base isolinux syslinux syslinux-common mtools dosfstools xorriso cpio kmod
  debootstrap e2fsprogs fdisk containerd runc sasl2-bin libsasl2-modules openssl openssh-server dpkg-dev)

list=
if [ "${1:-}" = --list ]; then
  list=1
  shift
fi
set_name=${1:-test}
case $set_name in
  build) packages=("${build_packages[@]}") ;;
  test) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [--list] [build|test]" >&2; exit 2 ;;
esac
if [ -n "$list" ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then
    as_root=(sudo)
  else
    as_root=(missing-root)
  fi
fi

find_missing() {
  missing=()
  local p
  for p in "${packages[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]; then
      missing+=("$p")
    fi
  done
}

# Two passes: the second catches a package the first install did not leave installed.
for pass in 1 2; do
  find_missing
  [ ${#missing[@]} -gt 0 ] || break
  if [ "${as_root[*]}" = missing-root ]; then
    echo "capstan needs these Debian packages, and installing them needs root. Run:" >&2
    echo "  sudo apt-get update && sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 2
  fi
  echo "installing (pass $pass): ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
done
find_missing
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get did not install: ${missing[*]}" >&2
  exit 1
fi

if [ "$set_name" = build ]; then
  for tool in cc pkg-config; do
    command -v "$tool" >/dev/null || { echo "install-deps: $tool is still missing" >&2; exit 1; }
  done
  pkg-config --exists libvirt || { echo "install-deps: pkg-config finds no libvirt" >&2; exit 1; }
  exit 0
fi

# `apt-get download` (the ramdisk build) needs package lists even when nothing was missing.
if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
  if [ "${as_root[*]}" = missing-root ]; then
    echo "the ramdisk build needs Debian's package lists; run: sudo apt-get update" >&2
    exit 2
  fi
  "${as_root[@]}" apt-get update -qq
fi

# --help rather than command -v: a stale pyenv shim outlives an uninstalled package.
if ! sushy-emulator --help >/dev/null 2>&1 || ! python3 -c 'import libvirt' 2>/dev/null; then
  echo "installing: sushy-tools libvirt-python"
  python3 -m pip install --quiet --disable-pip-version-check sushy-tools libvirt-python
  # pyenv only creates shims for new console scripts on a rehash.
  if command -v pyenv >/dev/null; then pyenv rehash; fi
  hash -r
fi

# The official Python client drives the API server as a second real client (tests/python_client.rs).
KUBERNETES_PY_VERSION=33.1.0
if [ "$(python3 -c 'import kubernetes; print(kubernetes.__version__)' 2>/dev/null)" != "$KUBERNETES_PY_VERSION" ]; then
  echo "installing: kubernetes==$KUBERNETES_PY_VERSION (Python client)"
  python3 -m pip install --quiet --disable-pip-version-check "kubernetes==$KUBERNETES_PY_VERSION"
fi

# cargo-nextest runs the suite with a per-test time limit (.config/nextest.toml); built from crates.io.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing: cargo-nextest (cargo install, a few minutes)"
  cargo install --locked --quiet cargo-nextest
fi

for tool in cloud-init vtysh curl kubectl sushy-emulator virsh libvirtd virtlogd qemu-system-x86_64 qemu-img tini xorriso syslinux mcopy mkfs.vfat sfdisk debootstrap mkfs.ext4 containerd ctr runc saslpasswd2 openssl; do
  command -v "$tool" >/dev/null || { echo "install-deps: $tool is still missing" >&2; exit 1; }
done
