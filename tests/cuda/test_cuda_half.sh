#!/bin/sh
# The f16/bf16 sweep models of the differential test (tests/diff/gen_op_sweep.py's
# half_cases: storage with f32 arithmetic) rendered in the CUDA C dialect and
# compiled by NVRTC for sm_90, every node claimed (test_cuda_kernels).
#   test_cuda_half.sh TEST_CUDA_KERNELS SOURCE_DIR
# Uses Debian's /usr/bin/python3 (onnx, numpy) like the differential test;
# exit 77 (skip) without it.
set -u
bin=$1
src=$2
py=${KILN_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import onnx, numpy' 2>/dev/null; then
  echo "SKIP: $py with onnx and numpy is needed to generate the models"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_cuda_half.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$py" "$src/tests/diff/gen_op_sweep.py" "$tmp" > "$tmp/gen.log" 2>&1 || { cat "$tmp/gen.log"; exit 1; }
set -- "$tmp"/dtype_f16_*.onnx "$tmp"/dtype_bf16_*.onnx "$tmp"/dtype_Cast_f16_*.onnx "$tmp"/dtype_Cast_bf16_*.onnx
[ -e "$1" ] || { echo "FAIL: no half models generated"; exit 1; }
echo "$# half models"
exec "$bin" "$@"
