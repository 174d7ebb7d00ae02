#!/bin/sh
# Installs this capstan bundle on a machine with no network:
#   sudo ./install [capstan bundle install options, e.g. --no-start]
# 1. checks every file of the bundle against SHA256SUMS (coreutils only: nothing of the bundle is
#    trusted before that);
# 2. installs capstan's package, and the libraries it needs that this machine lacks, from the
#    bundle's own flat apt repository (debs/) and no other source;
# 3. runs `capstan bundle install` from the package it just installed, which puts the ramdisk,
#    images, CRDs and manifests in place, starts capstan.service and waits for its API.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ "$(id -u)" -ne 0 ]; then
  echo "install: run as root (sudo ./install): it installs a Debian package and a system service" >&2
  exit 2
fi
echo "==> checking the bundle (SHA256SUMS)"
if ! sha256sum --quiet --strict -c SHA256SUMS; then
  echo "install: the bundle is damaged (the files above do not match): copy it again" >&2
  exit 1
fi

echo "==> installing capstan from the bundle's packages (no network)"
apt_dir=$(mktemp -d)
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/lists/partial"
echo "deb [trusted=yes] file:$here/debs ./" >"$apt_dir/sources.list"
# Only the bundle as a source, with its own lists directory: the machine's apt configuration and
# package lists are neither used nor changed. (mktemp's directory has no spaces.)
apt_opts="-o Dir::Etc::SourceList=$apt_dir/sources.list -o Dir::Etc::SourceParts=/dev/null"
apt_opts="$apt_opts -o Dir::State::Lists=$apt_dir/lists -o APT::Get::List-Cleanup=false"
# The bundle may sit where apt's unprivileged download user cannot read (a root-only directory).
apt_opts="$apt_opts -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get -q $apt_opts update >/dev/null
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends $apt_opts install capstan

rm -rf "$apt_dir"
trap - EXIT

echo "==> capstan bundle install $here $*"
exec capstan bundle install "$here" "$@"
