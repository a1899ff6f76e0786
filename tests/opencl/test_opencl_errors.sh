#!/bin/bash
# test_opencl_errors.sh KILN MODELS_DIR
# The OpenCL device turns each failure into a clear error, never a crash:
# "no OpenCL ICD, no platform, a kernel that fails to build (its build log
# in the message), out of device memory". Each case runs kiln under
# `timeout` and checks the exit status and the message (device_errors.sh):
#   1. no ICD loader: KILN_OPENCL_LIBRARY=/nonexistent/... and a library
#      that is not a loader (libc): `kiln devices` succeeds and prints
#      "opencl absent: <why>"; `kiln run M --device opencl` fails saying the
#      device is not there and why; `kiln run M` (default device) works.
#   2. no platform: OCL_ICD_VENDORS naming an empty folder: the same.
#   3. a program that fails to build: KILN_OPENCL_BUILD_OPTIONS defining
#      `float` away, with an empty KILN_CACHE_DIR: prepare fails (no silent
#      fallback to ref) with the driver's build log in the message, and
#      nothing is cached.
#   4. out of device memory: KILN_OPENCL_MEMORY_LIMIT=20M makes ResNet-50
#      fail at prepare naming the limit; a malformed limit makes the device
#      absent naming the variable; a limit that does not bind runs.
# (The compile and allocation slots are also tested directly by
# unit.test_device_runtime: a broken kernel's build log, a 1 PiB buffer.)
# Exit 0 pass, 1 fail, 2 usage or missing model, 77 no OpenCL device here.
set -u
KILN=${1:?usage: $0 KILN MODELS_DIR}
DIR=${2:?usage: $0 KILN MODELS_DIR}
LIMIT_S=${KILN_TEST_TIMEOUT_S:-300} # per command
DEVICE=opencl
. "$(dirname "$0")/../device_errors.sh"
device_errors_setup

echo "== 1. no ICD loader"
absent_cases "KILN_OPENCL_LIBRARY=/nonexistent" \
  "no OpenCL ICD loader: cannot open /nonexistent/libOpenCL.so.1 .*No such file" \
  KILN_OPENCL_LIBRARY=/nonexistent/libOpenCL.so.1
NOT_LOADER=$(ldd "$KILN" 2>/dev/null | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p' | head -n 1)
if [ -n "$NOT_LOADER" ] && [ -f "$NOT_LOADER" ]; then
  absent_cases "KILN_OPENCL_LIBRARY=libc" "$NOT_LOADER is not an OpenCL 1.2 ICD loader \(it has no clGetPlatformIDs\)" \
    "KILN_OPENCL_LIBRARY=$NOT_LOADER"
else
  echo "FAIL: cannot find the libc kiln links (ldd $KILN)"; fail=1
fi

echo "== 2. no platform"
mkdir -p "$TMP/no_vendors"
absent_cases "OCL_ICD_VENDORS=empty folder" "no OpenCL platform: the ICD loader found no driver" \
  "OCL_ICD_VENDORS=$TMP/no_vendors"

echo "== 3. a program that fails to build"
expect_error "a build failure: kiln run --device opencl" \
  "opencl: building the [0-9]+ kernels of graph '[^']*' for .* failed \(CL_BUILD_PROGRAM_FAILURE\); build log:.*kiln_no_such_type" \
  "KILN_OPENCL_BUILD_OPTIONS=-Dfloat=kiln_no_such_type" "KILN_CACHE_DIR=$TMP/cache1" \
  -- run "$SMALL" --device opencl --input "input=$SMALL_IN"
if grep -q "^output:" "$TMP/out.$n_cases"; then echo "FAIL: the failed build printed outputs"; fail=1; fi
if [ -d "$TMP/cache1/opencl" ] && find "$TMP/cache1/opencl" -name '*.bin' | grep -q .; then
  echo "FAIL: a failed build left a binary in the cache:"; find "$TMP/cache1/opencl" | sed 's/^/  /'; fail=1
fi
# The same cache folder then builds and caches the program.
expect_ok "the same model builds without the bad options" "^output: f32 \[4,10\]" "KILN_CACHE_DIR=$TMP/cache1" \
  -- run "$SMALL" --device opencl --input "input=$SMALL_IN"
if ! find "$TMP/cache1/opencl" -name '*.bin' 2>/dev/null | grep -q .; then
  echo "FAIL: a successful build left no binary in the cache"; fail=1
fi

echo "== 4. out of device memory"
expect_error "KILN_OPENCL_MEMORY_LIMIT=20M: ResNet-50" \
  "opencl: out of device memory allocating [0-9.]+ (bytes|KiB|MiB|GiB) \(limit 20\.0 MiB set by KILN_OPENCL_MEMORY_LIMIT, [0-9.]+ (bytes|KiB|MiB) in use\)" \
  KILN_OPENCL_MEMORY_LIMIT=20M -- run "$BIG" --device opencl --input "input=$BIG_IN"
if grep -q "^output:" "$TMP/out.$n_cases"; then echo "FAIL: the capped run printed outputs"; fail=1; fi
absent_cases "KILN_OPENCL_MEMORY_LIMIT=lots" "KILN_OPENCL_MEMORY_LIMIT=lots is not a byte count" \
  KILN_OPENCL_MEMORY_LIMIT=lots
expect_ok "KILN_OPENCL_MEMORY_LIMIT=1G (does not bind): mlp" "^output: f32 \[4,10\]" \
  KILN_OPENCL_MEMORY_LIMIT=1G -- run "$SMALL" --device opencl --input "input=$SMALL_IN"

echo "$n_cases commands checked"
[ $fail -eq 0 ] && echo PASS
exit $fail
