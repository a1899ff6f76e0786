#!/bin/bash
# test_cuda_errors.sh KILN MODELS_DIR FAKE_LIBCUDA
# The CUDA device on a machine with no GPU: every failure a clear error,
# never a crash, and the driver bookkeeping (memory, staging, modules,
# launches, CUDA graphs) exercised against a fake driver
# (tests/cuda/fake_libcuda.c: the driver API on host memory, which checks
# every copy's range and every launch's function but runs no kernel, so
# the outputs of these runs are meaningless and never compared). NVRTC is
# the real one: every cubin the fake loads is NVRTC's for the fake's
# compute capability.
#   1. no driver (a missing library, a library that is not the driver),
#      the driver without a device (cuInit's CUDA_ERROR_NO_DEVICE, zero
#      devices), no NVRTC: `kiln devices` says why, `--device cuda` fails
#      saying why, the default device still runs.
#   2. the fake device listed: name, sm_XY, SMs, warp, memory.
#   3. a kernel NVRTC cannot compile (its log in the message), a compute
#      capability NVRTC does not know, a cubin the driver refuses.
#   4. out of device memory: the device's memory, KILN_CUDA_MEMORY_LIMIT,
#      a malformed limit.
#   5. runs on the fake: one CUDA graph launch per segment (or, with
#      KILN_CUDA_GRAPHS=0 or a driver that refuses capture, launches step
#      by step); the second prepare loads the cubin from the cache.
# Exit 0 pass, 1 fail, 2 usage or missing model, 77 no NVRTC.
set -u
KILN=${1:?usage: $0 KILN MODELS_DIR FAKE_LIBCUDA}
DIR=${2:?usage: $0 KILN MODELS_DIR FAKE_LIBCUDA}
FAKE=${3:?usage: $0 KILN MODELS_DIR FAKE_LIBCUDA}
LIMIT_S=${KILN_TEST_TIMEOUT_S:-300} # per command
DEVICE=cuda
if [ ! -f "$FAKE" ]; then echo "FAIL: the fake driver $FAKE is missing"; exit 2; fi
export KILN_CUDA_LIBRARY=$FAKE
if KILN_CUDA_LIBRARY=$FAKE "$KILN" devices 2>&1 | grep -q "NVRTC is not"; then
  echo "SKIP: no NVRTC here:"; "$KILN" devices 2>&1 | grep '^cuda' | sed 's/^/  /'
  exit 77
fi
. "$(dirname "$0")/../device_errors.sh"
device_errors_setup
export KILN_CACHE_DIR=$TMP/cache
RUN_SMALL=(run "$SMALL" --device cuda --input "input=$SMALL_IN")

echo "== 1. no driver, no device, no NVRTC"
absent_cases "KILN_CUDA_LIBRARY=/nonexistent" "no CUDA driver: cannot open /nonexistent/libcuda.so.1 .*No such file" \
  KILN_CUDA_LIBRARY=/nonexistent/libcuda.so.1
NOT_DRIVER=$(ldd "$KILN" 2>/dev/null | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p' | head -n 1)
if [ -n "$NOT_DRIVER" ] && [ -f "$NOT_DRIVER" ]; then
  absent_cases "KILN_CUDA_LIBRARY=libc" "$NOT_DRIVER is not a CUDA driver kiln can use \(it has no cuInit\)" \
    "KILN_CUDA_LIBRARY=$NOT_DRIVER"
else
  echo "FAIL: cannot find the libc kiln links (ldd $KILN)"; fail=1
fi
absent_cases "cuInit: no device" "cuInit failed: CUDA_ERROR_NO_DEVICE \(100\): no CUDA-capable device" \
  FAKE_CUDA_INIT_ERROR=100
absent_cases "zero devices" "the CUDA driver 13.0 sees no device" FAKE_CUDA_DEVICES=0
absent_cases "no NVRTC" "the driver is there but NVRTC is not: cannot load NVRTC /nonexistent/libnvrtc.so" \
  KILN_NVRTC=/nonexistent/libnvrtc.so

echo "== 2. the device listed"
expect_ok "kiln devices" "^cuda:0 +kiln fake CUDA device \(NVIDIA, sm_90; CUDA driver 13.0, NVRTC [0-9.]+; 1.0 GiB; 132 SMs; warp 32" \
  -- devices
expect_ok "kiln devices: the shared fields" "vendor: NVIDIA; memory: device \(1.0 GiB\); compute units: 132; subgroup size: 32; driver: CUDA driver 13.0" \
  -- devices

echo "== 3. kernels that do not compile or load"
expect_error "an NVRTC failure: kiln run --device cuda" \
  "NVRTC: compiling 'the [0-9]+ kernels of graph '[^']*'' for sm_90: NVRTC_ERROR_COMPILATION.*kiln_no_such_type" \
  "KILN_NVRTC_OPTIONS=-Dfloat=kiln_no_such_type" -- "${RUN_SMALL[@]}"
if grep -q "^output:" "$TMP/out.$n_cases"; then echo "FAIL: the failed compile printed outputs"; fail=1; fi
expect_error "a compute capability NVRTC does not know (sm_11)" "NVRTC: compiling .* for sm_11" FAKE_CUDA_CC=11 \
  -- "${RUN_SMALL[@]}"
expect_error "a cubin the driver refuses" \
  "loading the cubin of the [0-9]+ kernels of graph '[^']*' for sm_90 on .*cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU \(209" \
  FAKE_CUDA_MODULE_ERROR=209 -- "${RUN_SMALL[@]}"

echo "== 4. out of device memory"
expect_error "a 20 MB device: ResNet-50" \
  "cuda: out of device memory allocating [0-9.]+ (bytes|KiB|MiB) on kiln fake CUDA device \(the device has 19.1 MiB\): cuda: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY" \
  FAKE_CUDA_MEMORY=20000000 -- run "$BIG" --device cuda --input "input=$BIG_IN"
if grep -q "^output:" "$TMP/out.$n_cases"; then echo "FAIL: the failed run printed outputs"; fail=1; fi
expect_error "KILN_CUDA_MEMORY_LIMIT=20M: ResNet-50" \
  "cuda: out of device memory allocating [0-9.]+ (bytes|KiB|MiB) \(limit 20\.0 MiB set by KILN_CUDA_MEMORY_LIMIT" \
  KILN_CUDA_MEMORY_LIMIT=20M -- run "$BIG" --device cuda --input "input=$BIG_IN"
absent_cases "KILN_CUDA_MEMORY_LIMIT=lots" "KILN_CUDA_MEMORY_LIMIT=lots is not a byte count" KILN_CUDA_MEMORY_LIMIT=lots

echo "== 5. runs on the fake driver"
rm -rf "$KILN_CACHE_DIR"
expect_ok "kiln info: compiled by NVRTC, segments as graphs" \
  "^cuda: [0-9]+ kernels in one module \([0-9]+ bytes of CUDA C\) for sm_90, compiled by NVRTC" \
  -- info "$BIG" --device cuda
grep -Eq "^cuda: ([1-9][0-9]*) of \1 segments captured as CUDA graphs" "$TMP/out.$n_cases" ||
  { echo "FAIL: not every segment became a CUDA graph:"; grep '^cuda:' "$TMP/out.$n_cases" | sed 's/^/  /'; fail=1; }
expect_ok "kiln info again: the cubin from the cache" "^cuda: [0-9]+ kernels .* loaded from the cubin cache" \
  -- info "$BIG" --device cuda
expect_ok "kiln run: graph launches" \
  "^fake cuda: 1 modules loaded, [1-9][0-9]* launches \([1-9][0-9]* from [1-9][0-9]* graph launches\)" \
  FAKE_CUDA_STATS=1 -- "${RUN_SMALL[@]}"
grep -q "^output: f32 \[4,10\]" "$TMP/out.$n_cases" || { echo "FAIL: the run printed no output"; fail=1; }
expect_ok "kiln run, KILN_CUDA_GRAPHS=0: launches step by step" \
  "^fake cuda: 1 modules loaded, [1-9][0-9]* launches \(0 from 0 graph launches\)" \
  FAKE_CUDA_STATS=1 KILN_CUDA_GRAPHS=0 -- "${RUN_SMALL[@]}"
expect_ok "a driver that refuses capture" "^cuda: 0 of [1-9][0-9]* segments captured as CUDA graphs: the driver refused stream capture" \
  FAKE_CUDA_NO_GRAPHS=1 -- info "$SMALL" --device cuda
expect_ok "kiln bench: several runs of ResNet-50" "^fake cuda: 1 modules loaded, [1-9][0-9]* launches" \
  FAKE_CUDA_STATS=1 -- bench "$BIG" --device cuda --iterations 3 --warmup 1

echo "$n_cases commands checked"
[ $fail -eq 0 ] && echo PASS
exit $fail
