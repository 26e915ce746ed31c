#!/usr/bin/env bash
# Runs the slot-sync differential test RUNS times in a row (default 30), the last LOADED of them
# (default 10) with both cores kept busy by two `yes` loops; stops at the first failure.
# Usage: scripts/soak-differential.sh [RUNS] [LOADED]   (log of run N in target/soak/runN.log)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
loaded=${2:-10}
mkdir -p target/soak
cargo test -p pgyard-slotsync --test differential --no-run || exit 1
for i in $(seq 1 "$runs"); do
    load_pids=()
    note=""
    if [ "$i" -gt $((runs - loaded)) ]; then
        yes >/dev/null & load_pids+=($!)
        yes >/dev/null & load_pids+=($!)
        note=" (both cores loaded)"
    fi
    start=$(date +%s)
    cargo test -p pgyard-slotsync --test differential -- --nocapture >"target/soak/run$i.log" 2>&1
    rc=$?
    [ ${#load_pids[@]} -gt 0 ] && kill "${load_pids[@]}"
    summary=$(grep -o 'differential (PostgreSQL [0-9]*): [0-9]* sync calls, [0-9]* slot rows' \
        "target/soak/run$i.log" | tr '\n' ' ')
    if [ $rc -ne 0 ]; then
        echo "run $i$note: FAILED after $(( $(date +%s) - start )) s (target/soak/run$i.log)"
        exit 1
    fi
    echo "run $i$note: passed in $(( $(date +%s) - start )) s; $summary"
done
echo "$runs of $runs runs passed"
