#!/bin/sh
# test_vulkan_bench_profile.sh KILN MODELS_DIR [DEVICE]
# Issue 4: "Each MobileNetV2 run is recorded into at most a few command
# buffers and one queue submission (counted by the runtime and printed by
# kiln bench --profile), not one per kernel." Checks, on DEVICE (default
# vulkan):
#   kiln info MODEL --device D   says 0 nodes on ref (nothing falls back);
#   kiln bench MODEL --device D --iterations 3 --warmup 1 --profile
#     prints "device work per timed run: vulkan:N: last run: S queue
#     submission(s), C command buffer(s), K dispatches" with S == 1, C <= 3
#     and K > 1 (the kernels really ran on the device, in one submission).
# Exit 0 pass, 1 fail, 2 usage or missing model, 77 no such device.
set -u
KILN=${1:?usage: $0 KILN MODELS_DIR [DEVICE]}
DIR=${2:?usage: $0 KILN MODELS_DIR [DEVICE]}
DEV=${3:-vulkan}
MODEL=$DIR/mobilenet_v2.onnx
MAX_CB=3
if [ ! -f "$MODEL" ]; then
  echo "FAIL: $MODEL is missing: export the models first (/usr/bin/python3 tests/models/export_models.py $DIR)"
  exit 2
fi
if ! "$KILN" devices 2>/dev/null | grep -q "^ *$DEV\b\|^ *$DEV:"; then
  if ! "$KILN" devices 2>/dev/null | grep -q "vulkan"; then
    echo "SKIP: no Vulkan device:"; "$KILN" devices 2>&1 | sed 's/^/  /'
    exit 77
  fi
fi
TMP=${TMPDIR:-/tmp}/kiln_vk_bench.$$
trap 'rm -f "$TMP".*' EXIT
fail=0

t0=$(date +%s)
if ! "$KILN" info "$MODEL" --device "$DEV" >"$TMP.info" 2>&1; then
  echo "FAIL: kiln info $MODEL --device $DEV failed:"; sed 's/^/  /' "$TMP.info"; exit 1
fi
line=$(grep -E "[0-9]+ nodes on ref" "$TMP.info" | head -n 1)
echo "kiln info: $line"
n_ref=$(printf '%s\n' "$line" | sed -n 's/.*, \([0-9][0-9]*\) nodes on ref.*/\1/p')
if [ -z "$n_ref" ]; then
  echo "FAIL: kiln info printed no '..., N nodes on ref' line:"; sed 's/^/  /' "$TMP.info"; fail=1
elif [ "$n_ref" -ne 0 ]; then
  echo "FAIL: $n_ref mobilenet_v2 nodes fall back to ref on $DEV:"; sed -n '/fell back to ref:/,$p' "$TMP.info" | sed 's/^/  /'
  fail=1
fi
t1=$(date +%s)

if ! "$KILN" bench "$MODEL" --device "$DEV" --iterations 3 --warmup 1 --profile >"$TMP.bench" 2>&1; then
  echo "FAIL: kiln bench --profile failed:"; sed 's/^/  /' "$TMP.bench"; exit 1
fi
line=$(grep "device work per timed run:" "$TMP.bench" | head -n 1)
echo "kiln bench --profile: $line"
subs=$(printf '%s\n' "$line" | sed -n 's/.*last run: \([0-9][0-9]*\) queue submission.*/\1/p')
cbs=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9][0-9]*\) command buffer.*/\1/p')
disp=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9][0-9]*\) dispatches.*/\1/p')
if [ -z "$subs" ] || [ -z "$cbs" ] || [ -z "$disp" ]; then
  echo "FAIL: kiln bench --profile printed no parsable 'device work per timed run: ...' line:"
  sed 's/^/  /' "$TMP.bench"; fail=1
else
  echo "per MobileNetV2 run: $subs queue submission(s), $cbs command buffer(s), $disp dispatches"
  [ "$subs" -eq 1 ] || { echo "FAIL: $subs queue submissions per run, expected 1"; fail=1; }
  [ "$cbs" -le $MAX_CB ] || { echo "FAIL: $cbs command buffers per run, expected at most $MAX_CB"; fail=1; }
  [ "$disp" -gt 1 ] || { echo "FAIL: $disp dispatches per run: the model did not run on the device"; fail=1; }
fi
t2=$(date +%s)
echo "kiln info: $((t1 - t0)) s, kiln bench: $((t2 - t1)) s"
[ $fail -eq 0 ] && echo PASS
exit $fail
