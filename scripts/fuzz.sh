#!/usr/bin/env bash
# Runs capstan's fuzz targets (fuzz/, cargo-fuzz + libFuzzer on the nightly toolchain) for a given
# time each, then prints executions, corpus size and crashes per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      # default: 600 s each, every target
#
# Corpora grow in fuzz/corpus/TARGET (seeded from fuzz/seeds/TARGET); a crash leaves its input in
# fuzz/artifacts/TARGET/ — reproduce it with `cargo +nightly fuzz run TARGET FILE`, then make it a
# regression test beside the code it broke. Exit status: 1 when any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
shift || true
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cd fuzz
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
# One build, then the built binaries are run directly: a campaign fuzzes exactly the code it
# started with, even if the sources change meanwhile. FUZZ_SKIP_BUILD=1 reuses the last build (to
# run two campaigns side by side).
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
    cargo +nightly fuzz build
fi
bin_dir="target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"
mkdir -p logs
failed=0
printf '%-16s %8s %14s %10s %8s %s\n' TARGET SECONDS EXECUTIONS EXEC/S CORPUS RESULT
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    if [ -d "seeds/$target" ]; then
        cp -n "seeds/$target"/* "corpus/$target/" 2>/dev/null || true
    fi
    log="logs/$target.log"
    status=0
    mkdir -p "artifacts/$target"
    "$bin_dir/$target" -artifact_prefix="artifacts/$target/" "corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(find "corpus/$target" -type f | wc -l)
    if [ "$status" -eq 0 ]; then
        result=ok
    else
        result="CRASH (see fuzz/$log, fuzz/artifacts/$target/)"
        failed=1
    fi
    printf '%-16s %8s %14s %10s %8s %s\n' "$target" "$seconds" "${runs:-?}" "${rate:-?}" "$corpus" "$result"
done
exit "$failed"
