#!/bin/bash
# kiln's check on a lent GPU machine (NVIDIA; the device tool), from the repo
# root, after scripts/gpu-check/pack.sh made .gpu/ here:
#
#   bash scripts/gpu-check/run.sh [PHASE...] < /dev/null     (carry [".gpu"])
#
# Phases, in this order by default; each has a time cap (seconds, env CAP_<PHASE>)
# so the whole call ends inside the device tool's limit, and writes as it goes,
# so what ran before a cap is reported:
#   setup   machine facts; Vulkan loader from .gpu/debs; refill the stubbed models
#   smoke   `kiln devices`, one model on cuda, `kiln verify` mobilenet_v2 cuda vs ref
#   probe   cold (empty cache) and warm session + first run on cuda
#   peer    kiln cuda vs PyTorch on the same GPU (bench/gpu/peer.py)
#   latest  the onnx 1.23 node cases expected to pass (issue 13), on cuda, as conf does
#   conf    the ONNX 1.12 node cases expected to pass, on cuda, one process per case,
#           16 at a time (a process per case: a cap loses no finished result)
#   zoo     every zoo model on cuda against ONNX Runtime (tests/zoo/check_zoo.py), 3 shards
#   diff    the differential test's models, cuda vs ref (kiln_diff, 12 shards)
#   vulkan  the node cases on the Vulkan device, when the NVIDIA driver gives one
# Results go to $OUT (the device tool brings them back): log.txt and one file per phase.
# The caps add up to more than one call of the device tool may run (600 s), so a
# session runs it in two calls back to back (the machine stays warm only ~30 s
# between them; a cold one redoes setup by itself), timeout_s 590 each:
#   bash scripts/gpu-check/run.sh setup smoke latest diff < /dev/null   (issue 13 first)
#   bash scripts/gpu-check/run.sh zoo probe peer conf < /dev/null
# KILN_GPU_JOBS (default 16) sets how many cases run at once.
# Uses the machine's python3 (its image has torch, onnx, onnxruntime, numpy).
# Learned on the first H200 run (2026-12-04): a bare `wait` also waits for the
# `tee` of this script's own log and hangs; NVRTC makes each case's first run
# take 1.4-5 s, so the node suite takes minutes even 16 at a time.
set -u
O=${OUT:-/tmp/gpu_out}
mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
R=$PWD G=$PWD/.gpu
# A rehearsal anywhere: KILN_GPU_DEVICE=cpu KILN_GPU_PYTHON=bench/.venv/bin/python (no dpkg, no PyTorch peer).
export DEV=${KILN_GPU_DEVICE:-cuda} PY=${KILN_GPU_PYTHON:-python3}
K=$G/bin/kiln CONF=$G/bin/kiln_conformance DIFF=$G/bin/kiln_diff
EXPECT=$R/tests/conformance/expected_pass.txt EXPECT_LATEST=$R/tests/conformance/expected_pass_onnx_latest.txt
phases=${*:-setup smoke latest diff zoo probe peer conf vulkan}
JOBS=${KILN_GPU_JOBS:-16}
[ -f /tmp/zoo/manifest.json ] || [[ " $phases " == *" setup "* ]] || phases="setup $phases"
export PATH=$G/bin:$PATH LD_LIBRARY_PATH=$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
  [ -f "$f" ] && export VK_DRIVER_FILES=$f VK_ICD_FILENAMES=$f && break
done
chmod +x "$G"/bin/*

setup() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cpus $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
  $PY -c 'import onnxruntime, onnx, torch; print("ort", onnxruntime.__version__, "onnx", onnx.__version__, "torch", torch.__version__)'
  if command -v nvidia-smi > /dev/null; then  # only there: unpacks into /
    for f in "$G"/debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  "$K" --version || { echo "the carried kiln does not run here"; return 1; }
  mkdir -p /tmp/node /tmp/dm /tmp/models
  tar xzf "$G/node.tgz" -C /tmp/node
  mkdir -p /tmp/node_latest
  tar xzf "$G/node_latest.tgz" -C /tmp/node_latest
  tar xzf "$G/diffmodels.tgz" -C /tmp/dm
  $PY bench/zoo/weights_stub.py refill-zoo "$G/zoo" /tmp/zoo | tail -1
  for m in resnet50 mobilenet_v2 transformer_encoder bert_encoder; do
    $PY bench/zoo/weights_stub.py refill "$G/models/$m.onnx" /tmp/models/$m.onnx > /dev/null
    cp "$G/models/$m.input.npy" /tmp/models/
  done
}

smoke() {
  "$K" devices
  "$K" run /tmp/zoo/small_cnn.onnx --device $DEV --input input=/tmp/zoo/small_cnn.input.npy
  "$K" verify /tmp/models/mobilenet_v2.onnx --device $DEV --input input=/tmp/models/mobilenet_v2.input.npy
}

probe() {
  local m c
  for m in transformer_encoder mobilenet_v2 resnet50; do
    rm -rf /tmp/pcache
    for c in cold warm; do
      KILN_CACHE_DIR=/tmp/pcache "$K" bench /tmp/models/$m.onnx --device $DEV --warmup 2 --iterations 10 --json |
        $PY -c "import sys, json; t = sys.stdin.read(); d = json.loads(t[t.index('{'):])
print('$m $c: load %.1f, session %.1f, first run %.1f, median %.3f ms' % (d['load_ms'], d['session_ms'], d['first_run_ms'], d['latency_ms']['median']))"
    done
  done
}

peer() {
  $PY bench/gpu/peer.py --kiln "$K" --device $DEV --models-dir /tmp/models --iterations 20 --rounds 3
}

# $1 device, $2 output folder, $3 the cases' data folder, $4 their expected-pass list:
# one kiln_conformance per expected-pass case, JOBS at a time
conf_cases() {
  mkdir -p "$2"
  sed -n 's|^node/||p' "$4" |
    xargs -P "$JOBS" -I{} sh -c "'$CONF' --suite node --data '$3' --expect '$4' \
      --device $1 --filter '{}' > '$2/{}' 2>&1"
}

conf_report() {  # $1 output folder, $2 the expected-pass list
  grep -l 'passed in' "$1"/* < /dev/null > /tmp/done_cases
  : > /tmp/bad_cases
  [ -s /tmp/done_cases ] && xargs grep -L '; 0 of [0-9]* expected-pass cases failed' < /tmp/done_cases > /tmp/bad_cases
  echo "node cases run to the end: $(wc -l < /tmp/done_cases) of $(grep -c '^node/' "$2");" \
       "with an expected-pass failure: $(wc -l < /tmp/bad_cases)"
  local f
  for f in $(head -30 /tmp/bad_cases); do echo "--- $(basename "$f")"; grep -E '^(FAIL|CRASH|TIMEOUT)' "$f" | head -3; done
}

zoo() {
  local names i=0 pids=() only
  names=$($PY -c "import json; m = json.load(open('/tmp/zoo/manifest.json'))['models']
m.sort(key=lambda e: e['size_bytes']); print(' '.join(','.join(e['name'] for e in m[i::3]) for i in range(3)))")
  for only in $names; do
    $PY tests/zoo/check_zoo.py --kiln "$K" --zoo-dir /tmp/zoo --tier full --no-export --ort-python $PY \
      --device $DEV --timeout 150 --only "$only" > "$O/zoo.$i.txt" 2>&1 &
    pids+=($!) i=$((i + 1))
  done
  wait "${pids[@]}"
}

diff_models() {
  ls /tmp/dm/sweep/*.onnx | grep -v '/mixed_' > /tmp/dm/sweep.list
  ls /tmp/dm/sweep/mixed_*.onnx /tmp/dm/random/*.onnx > /tmp/dm/mixed.list
  split -n l/8 -d /tmp/dm/sweep.list /tmp/dm/s.
  split -n l/4 -d /tmp/dm/mixed.list /tmp/dm/m.
  local pids=() p
  for p in /tmp/dm/s.*; do
    KILN_CACHE_DIR=/tmp/dcache xargs "$DIFF" --devices $DEV,ref --fail-on-fallback < "$p" > "$O/diff.$(basename "$p").txt" 2>&1 &
    pids+=($!)
  done
  for p in /tmp/dm/m.*; do
    KILN_CACHE_DIR=/tmp/dcache xargs "$DIFF" --devices $DEV,ref --report-fallbacks < "$p" > "$O/diff.$(basename "$p").txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
}

report() {
  case $1 in
    latest) conf_report /tmp/conf_latest "$EXPECT_LATEST" ;;
    conf) conf_report /tmp/conf_cuda "$EXPECT" ;;
    zoo) cat "$O"/zoo.*.txt 2>/dev/null | grep -E '^(PASS|FAIL|ERROR|KNOWN)' | awk '{print $1}' | sort | uniq -c
         grep -hE '^(FAIL|ERROR)' "$O"/zoo.*.txt 2>/dev/null ;;
    diff) echo "diff: $(cat "$O"/diff.*.txt 2>/dev/null | grep -c '^PASS ') passed, $(cat "$O"/diff.*.txt 2>/dev/null |
            grep -c '^FAIL ') failed of $(cat /tmp/dm/sweep.list /tmp/dm/mixed.list | wc -l) models"
          grep -h '^FAIL ' "$O"/diff.*.txt 2>/dev/null | head -30 ;;
    vulkan) conf_report /tmp/conf_vulkan "$EXPECT" ;;
  esac
}

for ph in $phases; do
  el "== $ph"
  case $ph in
    setup) timeout "${CAP_SETUP:-120}" bash -c "$(declare -f setup); G=$G K=$K; setup" ;;
    smoke) timeout "${CAP_SMOKE:-120}" bash -c "$(declare -f smoke); K=$K; smoke" ;;
    probe) timeout "${CAP_PROBE:-90}" bash -c "$(declare -f probe); K=$K; probe" ;;
    peer) timeout "${CAP_PEER:-150}" bash -c "$(declare -f peer); K=$K; peer" ;;
    latest) timeout "${CAP_LATEST:-240}" bash -c "$(declare -f conf_cases); CONF=$CONF JOBS=$JOBS
              conf_cases $DEV /tmp/conf_latest /tmp/node_latest '$EXPECT_LATEST'" ;;
    conf) timeout "${CAP_CONF:-240}" bash -c "$(declare -f conf_cases); CONF=$CONF JOBS=$JOBS
            conf_cases $DEV /tmp/conf_cuda /tmp/node '$EXPECT'" ;;
    zoo) timeout "${CAP_ZOO:-240}" bash -c "$(declare -f zoo); K=$K O=$O; zoo" ;;
    diff) timeout "${CAP_DIFF:-240}" bash -c "$(declare -f diff_models); DIFF=$DIFF O=$O; diff_models" ;;
    vulkan)
      if "$K" devices 2>&1 | grep -q '^vulkan:0 .*NVIDIA'; then
        timeout "${CAP_VULKAN:-150}" bash -c "$(declare -f conf_cases); CONF=$CONF JOBS=$JOBS
          conf_cases vulkan /tmp/conf_vulkan /tmp/node '$EXPECT'"
      else
        "$K" devices 2>&1 | grep -i '^vulkan'
        continue
      fi ;;
    *) echo "unknown phase $ph"; continue ;;
  esac
  report "$ph"
done
el "done"
