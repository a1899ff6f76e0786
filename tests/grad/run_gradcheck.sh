#!/usr/bin/env bash
# Gradient check: writes the cases (tests/grad/gen_grad_cases.py) into a
# temporary folder and runs gradcheck over them on the device
# $KILN_GRAD_DEVICE (default ref).
#
#   run_gradcheck.sh GRADCHECK_BINARY SOURCE_DIR
#
# Needs /usr/bin/python3 (or $KILN_PYTHON) with onnx and numpy; without them
# prints SKIP and exits 77, or fails when KILN_REQUIRE_PYTHON=1.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 GRADCHECK_BINARY SOURCE_DIR" >&2
  exit 2
fi
bin=$1 src=$2
py=${KILN_PYTHON:-/usr/bin/python3}
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
"$py" "$src/tests/grad/gen_grad_cases.py" "$tmp" || exit 1
"$bin" --device "${KILN_GRAD_DEVICE:-ref}" "$tmp"/*.onnx
