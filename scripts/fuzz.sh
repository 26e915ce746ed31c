#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each (default 60), one after another.
#
#   scripts/fuzz.sh [SECONDS]
#
# cargo-fuzz needs nightly-only sanitizer flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them. New corpus entries land in fuzz/corpus/<target>/ (shrink them with
# `cargo fuzz cmin <target>` before committing); crashes land in fuzz/artifacts/<target>/ and
# belong in fuzz/regressions/<target>/ once understood, where the corpus-replay test picks
# them up. Exits non-zero if any target crashed.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: $0 [SECONDS]   (a positive whole number, default 60)" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
    exit 2
fi

cd "$(dirname "$0")/../fuzz"
# The fuzz crate is its own workspace with its own target dir (fuzz/target, git-ignored).
unset CARGO_TARGET_DIR
export RUSTC_BOOTSTRAP=1

targets=$(cargo fuzz list)
failed=()
for target in $targets; do
    echo "=== fuzz target ${target}: ${seconds}s"
    mkdir -p "corpus/${target}"
    if ! cargo fuzz run "$target" "corpus/${target}" -- -max_total_time="$seconds"; then
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -ne 0 ]; then
    echo "crashed or failed: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
echo "all targets ran ${seconds}s without a crash: ${targets//$'\n'/ }"
