#!/usr/bin/env bash
# Builds capstan's release artefacts: the Debian package with its systemd units, and its debug
# symbols beside it.
#
#   scripts/package.sh                      build the `dist` profile, then package it into dist/
#   scripts/package.sh --bin-dir DIR        package the capstan and capstan-agent binaries in DIR
#                                           (e.g. target/debug: the tests package their own build)
#   scripts/package.sh --out DIR            where the artefacts go (default: dist/)
#   scripts/package.sh --compression gzip   gzip instead of xz (quicker, larger: what the tests use)
#
# It writes:
#   capstan_VERSION_amd64.deb          /usr/bin/capstan and /usr/lib/capstan/capstan-agent (debug
#                                      info and symbols split off), capstan.service (`capstan serve`) and
#                                      capstan-controllers.service (`capstan controllers`),
#                                      /etc/default/capstan*, the docs
#   capstan-dbgsym_VERSION_amd64.deb   the split debug info and symbol tables under
#                                      /usr/lib/debug/.build-id/, where gdb and addr2line find
#                                      them: install it to get function names and file:line back
#   SHA256SUMS
# VERSION is the workspace version plus the commit: 0.1.0+git20261201.3f2a9c1d8e7b, so that every
# commit's package upgrades the one before.
#
# Needs dpkg-dev (dpkg-deb, dpkg-shlibdeps) and binutils (objcopy): `scripts/install-deps.sh` has them.
set -euo pipefail
cd "$(dirname "$0")/.."


bin_dir=
out=dist
compression=xz
while [ $# -gt 0 ]; do
  case $1 in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compression) compression=$2; shift 2 ;;
    *) echo "usage: scripts/package.sh [--bin-dir DIR] [--out DIR] [--compression xz|gzip]" >&2; exit 2 ;;
  esac
done
case $compression in
  xz | gzip) ;;
  *) echo "package.sh: --compression is xz or gzip, not $compression" >&2; exit 2 ;;
esac
for tool in dpkg-deb dpkg-shlibdeps objcopy readelf; do
  command -v "$tool" >/dev/null || {
    echo "package.sh: $tool is missing: apt-get install --no-install-recommends dpkg-dev binutils" >&2
    exit 2
  }
done

if [ -z "$bin_dir" ]; then
  echo "==> building the dist profile (cargo build --profile dist)"
  cargo build --profile dist --package capstan-cli --bin capstan --bin capstan-agent
  bin_dir=${CARGO_TARGET_DIR:-target}/dist
fi
for bin in capstan capstan-agent; do
  [ -x "$bin_dir/$bin" ] || { echo "package.sh: $bin_dir/$bin does not exist" >&2; exit 2; }
done

cargo_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
date=$(git show -s --format=%cd --date=format:%Y%m%d HEAD 2>/dev/null || date -u +%Y%m%d)
version="$cargo_version+git$date.$commit"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$work/capstan
dbg=$work/capstan-dbgsym
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/lib/capstan" "$pkg/lib/systemd/system" \
  "$pkg/etc/default" "$pkg/usr/share/doc/capstan" "$dbg/DEBIAN"

# The debug info and the symbol table go into their own file, found again by build ID (and the
# binary's .gnu_debuglink). The shipped binary keeps neither: the symbol table alone is a quarter
# of its size. A panic's message still names its file:line (that is in the panic's own data);
# turning a backtrace's addresses into functions and lines needs the dbgsym package.
split_debug() {
  local from=$1 to=$2 build_id debug
  build_id=$(readelf -n "$from" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p')
  [ -n "$build_id" ] || { echo "package.sh: $from has no build ID" >&2; exit 1; }
  debug=$dbg/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
  mkdir -p "$(dirname "$debug")"
  objcopy --only-keep-debug --compress-debug-sections "$from" "$debug"
  chmod 0644 "$debug"
  objcopy --strip-all --add-gnu-debuglink="$debug" "$from" "$to"
  chmod 0755 "$to"
}
split_debug "$bin_dir/capstan" "$pkg/usr/bin/capstan"
split_debug "$bin_dir/capstan-agent" "$pkg/usr/lib/capstan/capstan-agent"

install -m 0644 packaging/deb/capstan.service packaging/deb/capstan-controllers.service "$pkg/lib/systemd/system/"
install -m 0644 packaging/deb/default-capstan "$pkg/etc/default/capstan"
install -m 0644 packaging/deb/default-capstan-controllers "$pkg/etc/default/capstan-controllers"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$pkg/DEBIAN/"
install -m 0644 README.md "$pkg/usr/share/doc/capstan/README.md"
cp -r docs "$pkg/usr/share/doc/capstan/docs"
chmod -R u=rwX,go=rX "$pkg/usr/share/doc/capstan"
printf 'capstan\nLicense: Apache-2.0\n' >"$pkg/usr/share/doc/capstan/copyright"
printf '/etc/default/capstan\n/etc/default/capstan-controllers\n' >"$pkg/DEBIAN/conffiles"

# The shared libraries the binaries link (libvirt, libc, libgcc) become Depends, with the versions
# dpkg-shlibdeps reads from the build machine's symbols files.
mkdir -p "$work/shlibs/debian"
printf 'Source: capstan\n\nPackage: capstan\nArchitecture: amd64\n' >"$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$pkg/usr/bin/capstan" "$pkg/usr/lib/capstan/capstan-agent" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
installed_size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<EOF
Package: capstan
Version: $version
Architecture: amd64
Maintainer: capstan developers <capstan@localhost>
Installed-Size: $installed_size
Depends: $depends, passwd
Section: admin
Priority: optional
Description: Cluster API for the machines you own, in one binary
 capstan renders, lints and runs Cluster API + Metal3 clusters on bare-metal hosts and KVM VMs:
 capstan serve is the management plane in one process (a Kubernetes-compatible API, the store,
 every controller and the provisioning server), run here as capstan.service;
 capstan-controllers.service runs the controllers against a real management cluster instead.
EOF

dbg_size=$(du -sk --exclude=DEBIAN "$dbg" | cut -f1)
cat >"$dbg/DEBIAN/control" <<EOF
Package: capstan-dbgsym
Version: $version
Architecture: amd64
Maintainer: capstan developers <capstan@localhost>
Installed-Size: $dbg_size
Depends: capstan (= $version)
Section: debug
Priority: optional
Description: debug symbols for capstan
 The DWARF line tables split off capstan's binaries: with this package installed, backtraces,
 gdb and addr2line show file:line again.
EOF

mkdir -p "$out"
deb=$out/capstan_${version}_amd64.deb
dbg_deb=$out/capstan-dbgsym_${version}_amd64.deb
dpkg-deb --root-owner-group "-Z$compression" --build "$pkg" "$deb" >/dev/null
dpkg-deb --root-owner-group "-Z$compression" --build "$dbg" "$dbg_deb" >/dev/null
(cd "$out" && sha256sum "$(basename "$deb")" "$(basename "$dbg_deb")" >SHA256SUMS)
echo "==> $deb ($(du -h "$deb" | cut -f1); capstan $(du -h "$pkg/usr/bin/capstan" | cut -f1) unpacked)"
echo "==> $dbg_deb ($(du -h "$dbg_deb" | cut -f1))"
echo "$deb"
