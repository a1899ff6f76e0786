#!/usr/bin/env bash
# Random ONNX Attention cases against a float64 numpy truth, and malformed
# Attention models that must fail with a clean one-line error
# (tests/ops/gen_attention_cases.py).
#
#   run_attention_cases.sh KILN_CONFORMANCE KILN SOURCE_DIR [runner options...]
#
# Extra options go to kiln_conformance (e.g. --timeout 300, --device cpu).
# Needs /usr/bin/python3 (or $KILN_PYTHON) with onnx and numpy; without them
# it prints SKIP and exits 77, or fails when KILN_REQUIRE_PYTHON=1.
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 KILN_CONFORMANCE KILN SOURCE_DIR [runner options...]" >&2
  exit 2
fi
conf=$1 kiln=$2 src=$3
shift 3
py=${KILN_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_attention.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! "$py" -c 'import onnx, numpy' > /dev/null 2>&1; then
  if [ "${KILN_REQUIRE_PYTHON:-}" = 1 ]; then
    echo "FAIL: KILN_REQUIRE_PYTHON=1 but $py with onnx and numpy is missing" >&2
    exit 1
  fi
  echo "SKIP: $py with onnx and numpy is needed to generate the attention cases"
  exit 77
fi
"$py" "$src/tests/ops/gen_attention_cases.py" "$tmp/data" || { echo "FAIL: gen_attention_cases.py failed" >&2; exit 1; }

status=0
echo "== suite attention"
n_cases=$(ls -d "$tmp/data/attention"/*/ | wc -l)
"$conf" --data "$tmp/data" --suite attention "$@" > "$tmp/attention.log" 2>&1 || status=1
grep -v '^PASS ' "$tmp/attention.log"
grep -q "^suite attention on .*: $n_cases/$n_cases passed" "$tmp/attention.log" || status=1

echo "== malformed models"
errs=$tmp/data/errors
for m in "$errs"/*.onnx; do
  name=$(basename "$m" .onnx)
  args=()
  for f in "$errs/$name".*.npy; do
    [ -e "$f" ] || continue
    in=${f#"$errs/$name".}
    args+=(--input "${in%.npy}=$f")
  done
  timeout 60 "$kiln" run "$m" "${args[@]}" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  pat=$(cat "$errs/$name.expect")
  if [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -qE "^kiln: error: .*$pat" "$tmp/err"; then
    echo "ok   $name: $(cut -c1-160 "$tmp/err")"
  else
    echo "FAIL $name (exit $rc, wanted /$pat/):"
    head -5 "$tmp/err"
    status=1
  fi
done
[ $status -eq 0 ] && echo "attention cases: OK" || echo "attention cases: FAILED"
exit $status
