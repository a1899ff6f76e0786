#!/usr/bin/env bash
# The cpu device's tiers (devices/cpu/cpu_plan.c, devices/cpu/interp):
#   - with no C compiler (KILN_CC naming none, or none on PATH) the cpu
#     device still exists, says the JIT is unavailable, and runs a model on
#     its precompiled kernels with the reference's results;
#   - tiered (the default) on an empty cache: the first session answers
#     from the precompiled kernels while the JIT compiles in the
#     background; when the session ends the cache holds every kernel, and
#     a second session loads them all (no kernel left interpreted);
#   - KILN_JIT=off and KILN_JIT=sync give the same results.
#
#   test_cpu_tiers.sh KILN SOURCE_DIR MODELS_DIR
# MODELS_DIR: tests/models/export_models.py's output (mobilenet_v2, mlp);
# exits 77 (skip) without it.
set -u
kiln=$1 src=$2 models=$3
py=${KILN_PYTHON:-/usr/bin/python3}
. "$src/tests/cli/lib.sh"
fails=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_tiers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$models/mobilenet_v2.onnx" ] || ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "SKIP: needs $models/mobilenet_v2.onnx (tests/models/export_models.py) and $py with numpy"
  exit 77
fi
m=$models/mobilenet_v2.onnx
in=$models/mobilenet_v2.input.npy
want=$models/mobilenet_v2.expected.npy
# close OUT_DIR: output_0.npy within 1e-4 of the exported expectation
close() {
  "$py" -c "import numpy as np,sys; a=np.load('$1/output_0.npy'); b=np.load('$want'); sys.exit(0 if a.shape==b.shape and np.allclose(a,b,rtol=1e-3,atol=1e-4) else 1)"
}

check "no compiler: kiln devices lists cpu, JIT unavailable" \
  'KILN_CC=/nonexistent/cc "$kiln" devices | grep -q "^cpu .*JIT unavailable.*precompiled kernels only"'
KILN_CC=/nonexistent/cc KILN_CACHE_DIR="$tmp/c0" "$kiln" run "$m" --device cpu --input input="$in" --output-dir "$tmp/nocc" \
  > "$tmp/nocc.log" 2>&1
check "no compiler (KILN_CC): cpu runs MobileNetV2 on precompiled kernels" 'close "$tmp/nocc"'
check "no compiler: nothing was compiled" '[ ! -d "$tmp/c0" ] || [ -z "$(ls "$tmp/c0" | grep "\.so$")" ]'
# No cc, gcc or clang on PATH at all (the binary is called by its path).
PATH=/nonexistent KILN_CACHE_DIR="$tmp/c1" "$kiln" run "$m" --input input="$in" --output-dir "$tmp/nopath" > "$tmp/nopath.log" 2>&1
check "no compiler on PATH: the default device runs MobileNetV2" 'close "$tmp/nopath"'
check "no compiler: info shows every kernel on the precompiled tier" \
  'KILN_CC=/nonexistent/cc "$kiln" info "$m" --device cpu | grep -q "kernels: 0 compiled, [1-9][0-9]* precompiled"'

# Tiered on an empty cache.
KILN_JIT=tiered KILN_CACHE_DIR="$tmp/c2" "$kiln" run "$m" --input input="$in" --output-dir "$tmp/t1" > "$tmp/t1.log" 2>&1
check "tiered, empty cache: first session's result" 'close "$tmp/t1"'
check "tiered: the background compile filled the cache by the session's end" \
  '[ "$(ls "$tmp/c2" | grep -c "\.so$")" -gt 10 ]'
check "tiered, warm cache: a new session has every kernel compiled" \
  'KILN_JIT=tiered KILN_CACHE_DIR="$tmp/c2" "$kiln" info "$m" --device cpu | grep -q "kernels: [1-9][0-9]* compiled, 0 precompiled"'
KILN_JIT=tiered KILN_CACHE_DIR="$tmp/c2" "$kiln" run "$m" --input input="$in" --output-dir "$tmp/t2" > "$tmp/t2.log" 2>&1
check "tiered, warm cache: result" 'close "$tmp/t2"'
# Runs while the JIT works: a bench on an empty cache in tiered mode swaps
# kernels in between runs; every run's result is checked by verify below.
check "tiered bench on an empty cache runs to the end" \
  'KILN_JIT=tiered KILN_CACHE_DIR="$tmp/c3" "$kiln" bench "$m" --warmup 0 --iterations 8 > "$tmp/b.log" 2>&1'
for mode in off sync; do
  KILN_JIT=$mode KILN_CACHE_DIR="$tmp/c4" "$kiln" run "$m" --input input="$in" --output-dir "$tmp/$mode" > "$tmp/$mode.log" 2>&1
  check "KILN_JIT=$mode: result" 'close "$tmp/$mode"'
done
echo "$fails failed"
[ "$fails" -eq 0 ]
