#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs every test of the
# workspace (unit, integration, doc tests) plus formatting and lint checks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --all-targets
cargo test --workspace --doc
