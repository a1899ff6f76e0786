#!/usr/bin/env bash
# Gradient check (tests/grad/gen_grad_cases.py writes the cases into a
# temporary folder).
#
#   run_gradcheck.sh GRADCHECK_BINARY SOURCE_DIR [KILN_DIFF_BINARY]
#
# With $KILN_GRAD_DEVICE unset or ref: every gradient of the float64 cases
# against central finite differences on ref (gradcheck). With another
# device (cpu, vulkan, ...): the float32 cases' models with their gradients
# as outputs (gradcheck --emit) run on that device and on ref by kiln_diff,
# every output compared (rtol 1e-3, atol 1e-4); the nodes the device leaves
# to ref are listed (FALLBACK lines), not failed: forward ops such as the
# losses have no compute definition yet.
#
# Needs /usr/bin/python3 (or $KILN_PYTHON) with onnx and numpy; without them
# prints SKIP and exits 77, or fails when KILN_REQUIRE_PYTHON=1.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 GRADCHECK_BINARY SOURCE_DIR [KILN_DIFF_BINARY]" >&2
  exit 2
fi
bin=$1 src=$2 diff=${3:-}
py=${KILN_PYTHON:-/usr/bin/python3}
device=${KILN_GRAD_DEVICE:-ref}
if ! "$py" -c 'import onnx, numpy' > /dev/null 2>&1; then
  if [ "${KILN_REQUIRE_PYTHON:-}" = 1 ]; then
    echo "FAIL: KILN_REQUIRE_PYTHON=1 but $py with onnx and numpy is missing" >&2
    exit 1
  fi
  echo "SKIP: $py with onnx and numpy is needed to write the cases"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_grad.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ "$device" = ref ]; then
  "$py" "$src/tests/grad/gen_grad_cases.py" "$tmp" || exit 1
  exec "$bin" --device ref "$tmp"/*.onnx
fi
if [ -z "$diff" ]; then
  echo "FAIL: KILN_GRAD_DEVICE=$device needs the kiln_diff binary (third argument)" >&2
  exit 1
fi
mkdir "$tmp/cases" "$tmp/grads" || exit 1
"$py" "$src/tests/grad/gen_grad_cases.py" "$tmp/cases" --dtype float32 || exit 1
"$bin" --emit "$tmp/grads" "$tmp/cases"/*.onnx > "$tmp/emit.log" || { cat "$tmp/emit.log"; exit 1; }
tail -1 "$tmp/emit.log"
"$diff" --devices "$device,ref" --report-fallbacks "$tmp/grads"/*.onnx
