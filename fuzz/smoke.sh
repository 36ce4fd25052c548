#!/usr/bin/env bash
# Fuzz smoke run: builds every cargo-fuzz target and runs each for a short, bounded
# time from the checked-in seed corpus (corpus/<target>/). Exits non-zero when a
# target crashes (panic, failed assertion, timeout or out-of-memory); the input that
# did it is saved under fuzz/artifacts/<target>/ and named in the output.
#
#   bash fuzz/smoke.sh                   # every target, 20 s each
#   FUZZ_SECONDS=300 bash fuzz/smoke.sh  # longer
#   bash fuzz/smoke.sh normalizer        # one target
#
# Only the stable toolchain exists here: RUSTC_BOOTSTRAP=1 lets it accept the
# unstable flags cargo-fuzz may pass to rustc (a sanitizer, build-std; see
# fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTC_BOOTSTRAP=1
seconds="${FUZZ_SECONDS:-20}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(frame_decoder normalizer)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# Panics and assertions are the oracle (the crates are safe Rust), so no sanitizer:
# the build is quicker and every execution cheaper. Debug assertions and overflow
# checks stay on (cargo-fuzz's default).
flags=(--fuzz-dir fuzz --sanitizer none --debug-assertions)
for target in "${targets[@]}"; do
    cargo fuzz build "${flags[@]}" "$target"
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for target in "${targets[@]}"; do
    echo "== fuzzing $target for ${seconds}s"
    # New units go to a scratch directory first in the list, so the checked-in seed
    # corpus is only read.
    mkdir -p "$work/$target"
    if ! cargo fuzz run "${flags[@]}" "$target" "$work/$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz smoke: crash in ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz smoke: ${#targets[@]} targets ran ${seconds}s each without a crash"
