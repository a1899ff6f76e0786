#!/usr/bin/env bash
# The README's example: the bundled classifier must name the right class for
# every bundled sample (sample_<class>.npy), through the public C API.
set -euo pipefail
example=$1 src=$2
fails=0
for f in "$src"/examples/models/sample_*.npy; do
  want=$(basename "$f" .npy); want=${want#sample_}
  out=$("$example" "$src/examples/models/shapes.onnx" "$f" "$src/examples/models/shapes_labels.txt")
  top=$(echo "$out" | awk '/ 1\. /{print $2}')
  if [ "$top" = "$want" ]; then echo "ok   $want"; else echo "FAIL $want: got '$top'"; echo "$out"; fails=$((fails+1)); fi
done
[ "$fails" -eq 0 ]
