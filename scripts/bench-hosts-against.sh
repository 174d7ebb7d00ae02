#!/usr/bin/env bash
# `capstan bench hosts` with this tree's server beside another commit's, on one machine in one go,
# so a regression shows against a baseline measured under the same conditions rather than against a
# figure from another day or machine.
#
#   scripts/bench-hosts-against.sh [COMMIT] [bench hosts options…]
#
# COMMIT (default 7dcec28, the last figure before the cluster controllers landed) is built in release
# once, in a worktree under $CAPSTAN_BENCH_CACHE (default ~/.cache/capstan/bench/<commit>), and kept.
# The same client (this tree's `capstan bench hosts --against`) drives both servers, the baseline
# first, with the options given (e.g. `--count 10000`), and prints them side by side: time, server
# CPU per host, store writes per host, peak RSS and, by the servers' own counters, the API requests
# and reconciles per host where the two differ.
set -euo pipefail
cd "$(dirname "$0")/.."

commit=${1:-7dcec28}
[ $# -gt 0 ] && shift
full=$(git rev-parse --verify "$commit^{commit}")
cache=${CAPSTAN_BENCH_CACHE:-$HOME/.cache/capstan/bench}/$full
baseline=$cache/target/release/capstan

if [ ! -x "$baseline" ]; then
  echo "building $commit in $cache…" >&2
  if [ ! -d "$cache" ]; then
    mkdir -p "$(dirname "$cache")"
    git worktree add --detach "$cache" "$full" >/dev/null
  fi
  (cd "$cache" && cargo build --release --quiet -p capstan-cli --bin capstan)
fi
cargo build --release --quiet -p capstan-cli --bin capstan
tree_capstan=${CARGO_TARGET_DIR:-target}/release/capstan

echo "== baseline $commit, then this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', changed'))" >&2
"$tree_capstan" bench hosts --against "$baseline" "$@"
