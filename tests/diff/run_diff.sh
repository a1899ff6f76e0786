#!/usr/bin/env bash
# kiln's differential test: a compiling device (cpu, or $KILN_DIFF_DEVICE,
# e.g. vulkan) against the reference device.
#
#   run_diff.sh KILN_DIFF_BINARY SOURCE_DIR
#
# Generates, into a temporary folder,
#   - the op sweep (tests/diff/gen_op_sweep.py): every op the cpu device
#     claims over odd / non-vector-width sizes, broadcasting and
#     non-contiguous (transposed, strided, reversed) inputs; each model must
#     be compiled with no node left to ref (--fail-on-fallback), except the
#     mixed_* ones, which put ref steps between compiled ones on purpose;
#   - on the cpu, the sweep's RNN/GRU/LSTM models once more with
#     KILN_RECURRENT_ROUTINE=0: the unrolled step kernels other devices
#     compile, where the cpu otherwise runs its own recurrent routine; and
#     its QDQ convolutions with KILN_QDQ_INTEGER=1 and =0 (ConvInteger and
#     float, whichever the machine's default is);
#   - with it, the control-flow cases (tests/diff/gen_control_flow.py, cf_*:
#     If, nested If, Loop with scan outputs and with a data-dependent trip
#     count, Scan), whose bodies must compile as well;
#   - KILN_DIFF_COUNT (default 200; at least KILN_DIFF_MIN_RANDOM, default 200) random graphs (tests/diff/gen_random_graphs.py)
#     with seed KILN_DIFF_SEED (default: from the time; printed),
# and runs kiln_diff over them (cpu vs ref, rtol 1e-3, atol 1e-4). Fails on
# any mismatch, on a generator failure, or if fewer than 200 random graphs
# ran. A failure prints the seed: rerun with KILN_DIFF_SEED=S to reproduce,
# or run kiln_diff on the kept models (KILN_DIFF_KEEP=1 keeps the folder).
#
# Compiled kernels are cached in $KILN_CACHE_DIR (default: kiln_diff_cache
# next to the binary), so later runs only compile the new random graphs.
# KILN_DIFF_JOBS (default 2) kiln_diff processes run side by side.
#
# Needs /usr/bin/python3 (or $KILN_PYTHON) with onnx and numpy; without them
# prints SKIP and exits 77, or fails when KILN_REQUIRE_PYTHON=1.
# KILN_DIFF_MODELS=DIR takes the models from DIR/sweep and DIR/random
# instead (made by KILN_DIFF_KEEP=1 elsewhere, or by the three generators):
# for a machine whose Python has another onnx, or none (the GPU machine).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 KILN_DIFF_BINARY SOURCE_DIR" >&2
  exit 2
fi
bin=$1 src=$2
py=${KILN_PYTHON:-/usr/bin/python3}
count=${KILN_DIFF_COUNT:-200}
jobs=${KILN_DIFF_JOBS:-2}
seed=${KILN_DIFF_SEED:-$(( $(date +%s) % 1000000 ))}
device=${KILN_DIFF_DEVICE:-cpu}
# The issue's bar is 200 random graphs per run for cpu; a slower device (the
# Vulkan one on lavapipe compiles every shader through glslc and LLVM) may
# run fewer (KILN_DIFF_COUNT) with KILN_DIFF_MIN_RANDOM set to match.
min_random=${KILN_DIFF_MIN_RANDOM:-200}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$(cd "$(dirname "$bin")" && pwd)/kiln_diff_cache}

models=${KILN_DIFF_MODELS:-}
if [ -z "$models" ] && ! "$py" -c 'import onnx, numpy' > /dev/null 2>&1; then
  if [ "${KILN_REQUIRE_PYTHON:-}" = 1 ]; then
    echo "FAIL: KILN_REQUIRE_PYTHON=1 but $py with onnx and numpy is missing" >&2
    exit 1
  fi
  echo "SKIP: $py with onnx and numpy is needed to generate the models"
  exit 77
fi
if [ ! -x "$bin" ]; then
  echo "FAIL: $bin is not an executable" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_diff.XXXXXX") || exit 1
if [ "${KILN_DIFF_KEEP:-}" = 1 ]; then
  echo "keeping the models in $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
echo "device $device vs ref; seed $seed (reproduce with KILN_DIFF_SEED=$seed), kernel cache $KILN_CACHE_DIR"

if [ -n "$models" ]; then
  echo "models from $models (KILN_DIFF_MODELS): the seed above does not apply to them"
  cp -r "$models/sweep" "$models/random" "$tmp/" || exit 1
  : > "$tmp/gen_random.log"
elif ! "$py" "$src/tests/diff/gen_op_sweep.py" "$tmp/sweep" > "$tmp/gen_sweep.log" 2>&1; then
  cat "$tmp/gen_sweep.log"
  echo "FAIL: gen_op_sweep.py failed" >&2
  exit 1
elif ! "$py" "$src/tests/diff/gen_control_flow.py" "$tmp/sweep" > "$tmp/gen_control_flow.log" 2>&1; then
  cat "$tmp/gen_control_flow.log"
  echo "FAIL: gen_control_flow.py failed" >&2
  exit 1
elif ! "$py" "$src/tests/diff/gen_random_graphs.py" "$tmp/random" --count "$count" --seed "$seed" \
     > "$tmp/gen_random.log" 2>&1; then
  cat "$tmp/gen_random.log"
  echo "FAIL: gen_random_graphs.py failed" >&2
  exit 1
fi
grep -i rejected "$tmp/gen_random.log"


# kiln's own temporary files (glslc's sources and SPIR-V, the JIT's objects)
# go to a folder that must be empty at the end: a process that ends in _exit
# (each case runs in a forked child) once left a directory behind per case.
export TMPDIR="$tmp/tmpdir"
mkdir -p "$TMPDIR" || exit 1

# Runs kiln_diff over the files listed in $1 in $jobs processes; output in $2.
run_split() {
  local list=$1 out=$2
  shift 2
  local n
  n=$(wc -l < "$list")
  local per=$(( (n + jobs - 1) / jobs ))
  [ "$per" -ge 1 ] || per=1
  split -l "$per" -d "$list" "$list.part."
  local pids=() rcs=0
  for part in "$list".part.*; do
    xargs -d '\n' "$bin" --devices "$device,ref" --seed "$seed" "$@" < "$part" > "$part.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || rcs=1
  done
  cat "$list".part.*.out > "$out"
  return $rcs
}

status=0
# Sweep models named mixed_* run nodes on ref on purpose; the others must
# compile entirely.
# KILN_DIFF_SWEEP_MATCH: only the sweep models whose names match this
# extended regex (a device setting's own test, e.g. the GPU contraction
# template at another group size).
match=${KILN_DIFF_SWEEP_MATCH:-.}
# Integer and bool results (dtype_*) compile on the devices whose dialect
# stores them (cpu, opencl, cuda); vulkan's GLSL stores f32, so there they
# are mixed: ref computes them, the rest is compiled.
mixed='^mixed_'
[ "$device" = vulkan ] && mixed='^(mixed|dtype)_'
# A Loop whose carried tokens grow: its body's general spec leaves the
# Concat's shape to the run, which only the cpu specializes then
# (kiln_plan_target.specialize_at_run_time); elsewhere ref appends.
[ "$device" != cpu ] && mixed="$mixed|^cf_loop_growing"
# Gathers and scatters whose indices only the run knows compile where the plan can check
# their range on the host first (host memory: the cpu); elsewhere ref (a
# RotaryEmbedding's run-time positions gather the caches' rows so, and the
# losses' run-time targets their log-probabilities and weights).
[ "$device" != cpu ] && mixed="$mixed|^(Gather(ND|Elements)?|Scatter(ND|Elements))_runtime_|^RotaryEmbedding_runtime_pos_|^(NLL|SCE)_runtime_"
(cd "$tmp/sweep" && ls -- *.onnx) | grep -E -- "$match" | grep -Ev -- "$mixed" | sed "s:^:$tmp/sweep/:" > "$tmp/sweep.list"
(cd "$tmp/sweep" && ls -- *.onnx) | grep -E -- "$match" | grep -E -- "$mixed" | sed "s:^:$tmp/sweep/:" > "$tmp/mixed.list"
if [ ! -s "$tmp/sweep.list" ] && [ ! -s "$tmp/mixed.list" ]; then
  echo "FAIL: no sweep model matches KILN_DIFF_SWEEP_MATCH='$match'"
  exit 1
fi
(cd "$tmp/random" && ls -- *.onnx 2>/dev/null) | sed "s:^:$tmp/random/:" > "$tmp/random.list"

start=$(date +%s)
: > "$tmp/sweep.out"
[ -s "$tmp/sweep.list" ] && run_split "$tmp/sweep.list" "$tmp/sweep.out" --fail-on-fallback
if [ -s "$tmp/mixed.list" ]; then
  xargs -d '\n' "$bin" --devices "$device,ref" --seed "$seed" --report-fallbacks < "$tmp/mixed.list" >> "$tmp/sweep.out" 2>&1
fi
# Sweep models again on the cpu with an optimizer choice flipped (set name,
# models matching a pattern, the environment): the RNN, GRU and LSTM the cpu
# runs whole on its routine as the unrolled step kernels the other devices
# compile (passes/decompose.c); the QDQ convolutions both as ConvInteger
# (passes/qdq_integer.c, the default where the cpu has VNNI) and as float.
extra_sets=""
extra_set() {
  local name=$1 pattern=$2
  shift 2
  : > "$tmp/$name.list"
  : > "$tmp/$name.out"
  [ "$device" = cpu ] && grep -E "$pattern" "$tmp/sweep.list" > "$tmp/$name.list"
  [ -s "$tmp/$name.list" ] || return 0
  env "$@" xargs -d '\n' "$bin" --devices "$device,ref" --seed "$seed" --fail-on-fallback \
    < "$tmp/$name.list" > "$tmp/$name.out" 2>&1
  extra_sets="$extra_sets $name"
}
extra_set unrolled '/(dtype_)?(RNN|GRU|LSTM)_' KILN_RECURRENT_ROUTINE=0
extra_set qdq_integer '/dtype_QDQ_conv_' KILN_QDQ_INTEGER=1
extra_set qdq_float '/dtype_QDQ_conv_' KILN_QDQ_INTEGER=0
# three threads: kernels of the big graphs split their loops unevenly
: > "$tmp/random.out"
[ -s "$tmp/random.list" ] && run_split "$tmp/random.list" "$tmp/random.out" --report-fallbacks --threads 3

# Sweep models failing because of an open kiln bug (tests/diff/known_failures.txt:
# one model name per line, '#' comments, "DEVICE:" before the name when only
# that device has the bug): reported as XFAIL when they fail
# and as XPASS when they pass (not a failure: a crash from an out-of-bounds
# read depends on the memory layout; remove the line once the bug is fixed).
known=$src/tests/diff/known_failures.txt
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$known" 2>/dev/null |
  awk -v dev="$device" -F: 'NF == 1 { print $1 } NF == 2 && $1 == dev { print $2 }' | sort -u > "$tmp/known"

for set in sweep random $extra_sets; do
  out=$tmp/$set.out
  expected=$(cat "$tmp/$set.list" $([ "$set" = sweep ] && echo "$tmp/mixed.list") | wc -l)
  pass=0 fail=0 xfail=0
  while read -r verdict name rest; do
    name=${name%:}
    if [ "$set" = sweep ] && grep -qxF "$name" "$tmp/known"; then
      if [ "$verdict" = FAIL ]; then
        echo "XFAIL $name ${rest}"
        xfail=$((xfail + 1))
      else
        # not a failure: some listed bugs (out-of-bounds reads) only show
        # when the memory layout is unlucky
        echo "XPASS $name: passed this time (if its bug is fixed, remove it from tests/diff/known_failures.txt)"
      fi
    elif [ "$verdict" = FAIL ]; then
      echo "FAIL $name ${rest}"
      fail=$((fail + 1))
      status=1
    else
      pass=$((pass + 1))
    fi
  done < <(grep -e '^PASS ' -e '^FAIL ' "$out")
  [ "$set" != random ] && grep '^FALLBACK ' "$out"
  ran=$(grep -c -e '^PASS ' -e '^FAIL ' "$out")
  echo "$set: $ran models: $pass passed, $fail failed, $xfail known failures"
  # A crash ends a kiln_diff process early: count results, not summary lines.
  if [ "$ran" -ne "$expected" ]; then
    echo "FAIL: $set: $expected models but $ran results (did kiln_diff crash?)"
    grep -v -e '^PASS ' -e '^FAIL ' -e '^FALLBACK ' -e '^kiln_diff: ' "$out" | head -20
    status=1
  fi
  [ "$set" = random ] && random_ran=$ran
done
echo "random graphs: $(grep -c '^FALLBACK ' "$tmp/random.out") node(s) ran on ref on purpose (comparisons feeding Where, softmax over leading axes)"
echo "time: $(( $(date +%s) - start )) s"
if [ -n "$(ls -A "$TMPDIR")" ]; then
  echo "FAIL: kiln left temporary files behind: $(ls -A "$TMPDIR" | head -5 | tr '\n' ' ')"
  status=1
fi
if [ "${random_ran:-0}" -lt "$min_random" ]; then
  echo "FAIL: only ${random_ran:-0} random graphs ran; at least $min_random must"
  status=1
fi
if [ $status -eq 0 ]; then
  echo "diff: OK (seed $seed)"
else
  echo "diff: FAILED (seed $seed; reproduce with KILN_DIFF_SEED=$seed KILN_DIFF_KEEP=1 $0 $bin $src)"
fi
exit $status
