#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs every test of the
# workspace (unit, integration, doc tests) plus formatting and lint checks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
    # Per-test processes with a hard per-test time limit (.config/nextest.toml).
    cargo nextest run --workspace --all-targets --no-tests=warn
else
    echo "cargo-nextest not found: running cargo test (no per-test time limit)" >&2
    timeout --kill-after=30s 45m cargo test --workspace --all-targets
fi
cargo test --workspace --doc
