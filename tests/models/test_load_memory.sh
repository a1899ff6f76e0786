#!/usr/bin/env bash
# Loading a large model must not hold two copies of its weights: peak
# resident memory of `kiln info BIG.onnx` stays under 1.3x the file size.
#   test_load_memory.sh KILN_BINARY BIG_MODEL.onnx
set -euo pipefail
kiln=$1 model=$2
[ -f "$model" ] || { echo "FAIL: $model missing (tests/models/export_models.py --big makes it)"; exit 1; }
size_kb=$(( $(stat -c %s "$model") / 1024 ))
log=$(mktemp)
/usr/bin/time -v "$kiln" info "$model" >/dev/null 2>"$log"
rss_kb=$(awk -F: '/Maximum resident set size/{gsub(/ /,"",$2); print $2}' "$log")
rm -f "$log"
ratio=$(awk -v r="$rss_kb" -v s="$size_kb" 'BEGIN{printf "%.3f", r/s}')
echo "model ${size_kb} KiB, peak RSS ${rss_kb} KiB, ratio ${ratio}"
awk -v r="$rss_kb" -v s="$size_kb" 'BEGIN{exit !(r < 1.3*s)}'
