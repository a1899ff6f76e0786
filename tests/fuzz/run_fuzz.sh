#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time over a copy of its seed
# corpus (new inputs go to a scratch folder, not the repository). Fails if
# the fuzzer finds a crash, leak, timeout or sanitizer report.
#   run_fuzz.sh FUZZ_BINARY SEED_CORPUS_DIR SECONDS [LIBFUZZER_FLAG...]
# Extra flags (a -dict=, a longer -timeout=) come after the defaults, so
# they win.
set -euo pipefail
bin=$1 seeds=$2 secs=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$work/cache} # fuzz_pipeline compiles kernels
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" "$work/corpus" "$seeds" 2>&1 | tail -25
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  echo "fuzzing found a problem (exit $status); artifacts:"; ls -l "$work/artifacts"
  exit 1
fi
echo "fuzz: $(basename "$bin") ran ${secs}s with no finding"
