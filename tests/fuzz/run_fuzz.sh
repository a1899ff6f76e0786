#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time over a copy of its seed
# corpus (new inputs go to a scratch folder, not the repository). Fails if
# the fuzzer finds a crash, leak, timeout or sanitizer report; then the
# whole report is printed and the input that caused it is kept in
# ${KILN_FUZZ_ARTIFACTS:-./fuzz-artifacts} (ctest runs this in build/tests)
# and printed in base64, so a finding in CI can be replayed:
#   base64 -d > crash && FUZZ_BINARY crash
#   run_fuzz.sh FUZZ_BINARY SEED_CORPUS_DIR SECONDS [LIBFUZZER_FLAG...]
# Extra flags (a -dict=, a longer -timeout=, a fixed -seed= and -runs=)
# come after the defaults, so they win.
set -euo pipefail
bin=$1 seeds=$2 secs=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$work/cache} # fuzz_pipeline compiles kernels
set +e
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" "$work/corpus" "$seeds" >"$work/log" 2>&1
status=$?
set -e
grep -m1 '^INFO: Seed:' "$work/log" || true
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  echo "fuzzing found a problem (exit $status):"
  grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$work/log" | tail -120
  keep=${KILN_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}
  mkdir -p "$keep"
  for a in "$work"/artifacts/*; do
    [ -e "$a" ] || continue
    cp "$a" "$keep/"
    echo "artifact $(basename "$a") (kept in $keep), base64:"
    base64 -w0 "$a"; echo
  done
  exit 1
fi
tail -25 "$work/log"
echo "fuzz: $(basename "$bin") ran ${secs}s with no finding"
