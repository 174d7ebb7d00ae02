#!/usr/bin/env bash
# Builds the real Kubernetes peers capstan's tests run against — kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubeadm, kubectl, kube-proxy, etcd, etcdctl,
# coredns, pause, crane and clusterctl — from the Go modules pinned in tools/peers/, and caches them.
#
#   scripts/peers.sh            build what is missing; print the directory that holds the binaries
#   scripts/peers.sh --dir      print that directory without building (it may not exist yet)
#   scripts/peers.sh --only etcd|kubernetes|coredns|crane|clusterctl|pause   build one module only
#
# The binaries land in one directory (`--dir`); each module's build is stamped with a hash of its
# go.mod, go.sum and sources, its flags and the Go version, so a changed pin rebuilds only its own
# module and an unchanged tree costs well under a second. Go's own build cache ($(go env GOCACHE))
# makes a rebuild after a small change fast too.
#
# Flags are upstream's (hack/lib/golang.sh, hack/lib/version.sh): -trimpath, tags selinux,notest,
# CGO_ENABLED=0 except the kubelet, versions stamped with -ldflags -X (an unstamped kubeadm refuses to
# run: it cannot tell which images and etcd version belong to it).
#
# Environment:
#   CAPSTAN_PEERS_CACHE   where builds are cached (default ~/.cache/capstan/peers)
#   GOFLAGS, GOPROXY      honoured as go honours them
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/tools/peers

only=
print_dir_only=
while [ $# -gt 0 ]; do
  case $1 in
    --dir) print_dir_only=1 ;;
    --only) only=${2:?--only needs a module name}; shift ;;
    *) echo "usage: scripts/peers.sh [--dir] [--only MODULE]" >&2; exit 2 ;;
  esac
  shift
done

if ! command -v go >/dev/null; then
  echo "go is not on PATH: the peers are built from Go modules (Go 1.26 or newer)" >&2
  exit 2
fi

cache=${CAPSTAN_PEERS_CACHE:-$HOME/.cache/capstan/peers}
bin=$cache/bin
if [ -n "$print_dir_only" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin" "$cache/stamps"
# One build at a time per cache (two test runs starting together wait for each other).
exec 9>"$cache/.lock"
flock 9

say() { printf '==> %s\n' "$*" >&2; }

# The versions, and the Kubernetes release's date, from the pins themselves.
pinned() { (cd "$root/$1" && go list -m -f "$3" "$2"); }
k8s_version=$(pinned kubernetes k8s.io/kubernetes '{{.Version}}')
etcd_version=$(pinned etcd go.etcd.io/etcd/server/v3 '{{.Version}}')
coredns_version=$(pinned coredns github.com/coredns/coredns '{{.Version}}')
pause_version=3.10.1

# Builds PACKAGES of MODULE into $bin unless its stamp says they were built from exactly these
# pins, flags and Go: each module is keyed on its own, so a change to one pin rebuilds only it.
# build MODULE CGO LDFLAGS PACKAGE...
build() {
  local module=$1 cgo=$2 ldflags=$3
  shift 3
  local stamp=$cache/stamps/$module-cgo$cgo key
  key=$( (go version; echo "$cgo $ldflags $*"; cd "$root/$module" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) \
    -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return 0
  fi
  say "building $* ($module, CGO_ENABLED=$cgo)"
  local started=$SECONDS
  (cd "$root/$module" && CGO_ENABLED=$cgo go build -trimpath -tags selinux,notest \
    -ldflags "$ldflags" -o "$bin/" "$@")
  say "built in $((SECONDS - started)) s"
  echo "$key" >"$stamp"
}

wanted() { [ -z "$only" ] || [ "$only" = "$1" ]; }

if wanted kubernetes; then
  minor=${k8s_version#v1.}
  minor=${minor%%.*}
  # The release date stands in for the build date, so the same pins give the same binaries.
  build_date=$(pinned kubernetes k8s.io/kubernetes '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}')
  stamp_flags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp_flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    stamp_flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
  done
  build kubernetes 0 "-s -w$stamp_flags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy
  build kubernetes 1 "-s -w$stamp_flags" k8s.io/kubernetes/cmd/kubelet
fi
if wanted etcd; then
  build etcd 0 "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=release-$etcd_version" \
    go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3
  # `go build` names go.etcd.io/etcd/server/v3's binary after the element before the major
  # version: server.
  if [ -f "$bin/server" ]; then
    mv "$bin/server" "$bin/etcd"
  fi
fi
if wanted coredns; then
  build coredns 0 "-s -w -X github.com/coredns/coredns/coremain.GitCommit=release-$coredns_version" \
    github.com/coredns/coredns
fi
if wanted crane; then
  build crane 0 "-s -w" github.com/google/go-containerregistry/cmd/crane
fi
if wanted clusterctl; then
  capi_version=$(pinned clusterctl sigs.k8s.io/cluster-api '{{.Version}}')
  capi_minor=${capi_version#v1.}
  capi_minor=${capi_minor%%.*}
  capi=sigs.k8s.io/cluster-api/version
  build clusterctl 0 "-s -w -X $capi.gitVersion=$capi_version -X $capi.gitMajor=1 -X $capi.gitMinor=$capi_minor -X $capi.gitTreeState=clean" \
    sigs.k8s.io/cluster-api/cmd/clusterctl
fi
if wanted pause; then
  build pause 0 "-s -w -X main.version=$pause_version" .
fi

# What was built, with versions and checksums, for the notes and for `capstan image build`: written
# once per build (checksumming 650 MB on every cached run would cost seconds).
if [ -n "$only" ] || [ ! -f "$cache/versions.json" ] || [ -n "$(find "$bin" -newer "$cache/versions.json" -print -quit)" ]; then
(
  cd "$bin"
  printf '{\n  "kubernetes": "%s",\n  "etcd": "%s",\n  "coredns": "%s",\n  "pause": "%s",\n  "binaries": {\n' \
    "$k8s_version" "$etcd_version" "$coredns_version" "$pause_version"
  first=1
  for f in *; do
    [ -f "$f" ] || continue
    [ -n "$first" ] || printf ',\n'
    first=
    printf '    "%s": {"sha256": "%s", "bytes": %s}' "$f" "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")"
  done
  printf '\n  }\n}\n'
) >"$cache/versions.json.new"
mv "$cache/versions.json.new" "$cache/versions.json"
fi
echo "$bin"
