#!/bin/bash
# test_vulkan_errors.sh KILN MODELS_DIR
# The Vulkan device turns each failure into a clear error, never a crash:
# "out of device memory, device lost, no Vulkan loader or no device, a
# shader that fails to compile — each a clear error naming what happened; a
# kiln built with Vulkan support still runs on a machine without it (the
# device is then simply absent)". Each case runs kiln under `timeout` and
# checks the exit status (failure expected: non-zero, not a signal, not a
# timeout) AND the message:
#   1. no loader: KILN_VULKAN_LOADER=/nonexistent/... (and a library that is
#      not a loader): `kiln devices` succeeds and prints "vulkan absent:
#      <dlopen's reason>"; `kiln run M --device vulkan` fails saying the
#      device is not there and why; `kiln run M` (default device) works.
#   2. no ICD / no device: VK_ICD_FILENAMES, VK_DRIVER_FILES =
#      /nonexistent.json, and an ICD manifest naming a missing driver: same,
#      with the loader's reason.
#   3. shader compiler: KILN_VULKAN_SHADER_COMPILER=glslc with KILN_GLSLC a
#      missing file or a glslc whose --version fails (device absent), and a
#      glslc that answers --version but is killed while compiling or is gone
#      by then (`kiln run --device vulkan` fails at prepare rather than
#      silently running on ref); an empty KILN_CACHE_DIR each, so that
#      kernels must be compiled. The message names the program.
#   4. out of device memory: KILN_VULKAN_MEMORY_LIMIT=20M makes ResNet-50
#      fail at prepare with "vulkan: out of device memory allocating X (limit
#      20.0 MiB set by KILN_VULKAN_MEMORY_LIMIT, Y in use)"; a malformed
#      limit is an error naming the variable; a limit that does not bind and
#      no limit run.
# (Device lost cannot be provoked on lavapipe; it is not tested here.)
# Exit 0 pass, 1 fail, 2 usage or missing model, 77 no Vulkan device here.
set -u
KILN=${1:?usage: $0 KILN MODELS_DIR}
DIR=${2:?usage: $0 KILN MODELS_DIR}
LIMIT_S=${KILN_TEST_TIMEOUT_S:-300} # per command
DEVICE=vulkan
. "$(dirname "$0")/../device_errors.sh"
device_errors_setup

echo "== 1. no Vulkan loader"
absent_cases "KILN_VULKAN_LOADER=/nonexistent" \
  "cannot load the Vulkan loader /nonexistent/libvulkan.so.1 \(set by KILN_VULKAN_LOADER\): .*No such file" \
  KILN_VULKAN_LOADER=/nonexistent/libvulkan.so.1
# A library that is there but is not a Vulkan loader.
NOT_LOADER=$(ldd "$KILN" 2>/dev/null | sed -n 's/.*libc\.so\.6 => \([^ ]*\).*/\1/p' | head -n 1)
if [ -n "$NOT_LOADER" ] && [ -f "$NOT_LOADER" ]; then
  expect_ok "KILN_VULKAN_LOADER=libc: kiln devices" \
    "^vulkan +absent: .*$NOT_LOADER \(set by KILN_VULKAN_LOADER\) has no vkGetInstanceProcAddr" \
    "KILN_VULKAN_LOADER=$NOT_LOADER" -- devices
else
  echo "FAIL: cannot find the libc kiln links (ldd $KILN)"; fail=1
fi

echo "== 2. no Vulkan driver (ICD)"
NO_ICD="no Vulkan driver \(ICD\) found by the loader \(vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER"
absent_cases "VK_ICD_FILENAMES=/nonexistent.json" "$NO_ICD; VK_ICD_FILENAMES=/nonexistent.json\)" \
  VK_ICD_FILENAMES=/nonexistent.json
absent_cases "VK_DRIVER_FILES=/nonexistent.json" "$NO_ICD; VK_DRIVER_FILES=/nonexistent.json\)" \
  VK_DRIVER_FILES=/nonexistent.json
# A manifest that exists but names a driver library that does not.
cat >"$TMP/broken_icd.json" <<EOF
{"file_format_version": "1.0.0", "ICD": {"library_path": "$TMP/no_such_driver.so", "api_version": "1.3.0"}}
EOF
absent_cases "ICD manifest naming a missing driver" "$NO_ICD; VK_ICD_FILENAMES=$TMP/broken_icd.json\)" \
  "VK_ICD_FILENAMES=$TMP/broken_icd.json"

echo "== 3. shader compiler cannot run"
absent_cases "KILN_GLSLC=/nonexistent/glslc" \
  "no shader compiler: .*glslc: cannot run KILN_GLSLC=/nonexistent/glslc: No such file or directory" \
  KILN_VULKAN_SHADER_COMPILER=glslc KILN_GLSLC=/nonexistent/glslc "KILN_CACHE_DIR=$TMP/cache1"
# A glslc whose --version fails.
printf '#!/bin/sh\necho "glslc: broken install" >&2\nexit 3\n' >"$TMP/glslc_broken"
chmod +x "$TMP/glslc_broken"
absent_cases "glslc --version fails" "glslc: \`$TMP/glslc_broken --version\` exited with status 3" \
  KILN_VULKAN_SHADER_COMPILER=glslc "KILN_GLSLC=$TMP/glslc_broken" "KILN_CACHE_DIR=$TMP/cache2"
# A glslc that answers --version (so the device is present) but dies
# compiling: prepare fails (not a silent fallback to ref), naming the
# program and the signal, and nothing is cached.
printf '#!/bin/sh\nif [ "$1" = --version ]; then echo "glslc (kiln test double) v0"; exit 0; fi\nkill -9 $$\n' \
  >"$TMP/glslc_dies"
chmod +x "$TMP/glslc_dies"
expect_error "glslc killed while compiling: kiln run --device vulkan" \
  "vulkan: shader '[^']+' failed to compile: shader compiler: $TMP/glslc_dies was killed by signal 9" \
  KILN_VULKAN_SHADER_COMPILER=glslc "KILN_GLSLC=$TMP/glslc_dies" "KILN_CACHE_DIR=$TMP/cache3" \
  -- run "$SMALL" --device vulkan --input "input=$SMALL_IN"
if [ -d "$TMP/cache3/vulkan" ] && find "$TMP/cache3/vulkan" -name '*.spv' | grep -q .; then
  echo "FAIL: a failed compile left SPIR-V in the cache:"; find "$TMP/cache3/vulkan" | sed 's/^/  /'; fail=1
fi
# A glslc that is there at startup (answers --version) and gone when the
# first kernel compiles.
printf '#!/bin/sh\nif [ "$1" = --version ]; then echo "glslc (kiln test double) v0"; rm -f -- "$0"; exit 0; fi\nexit 9\n' \
  >"$TMP/glslc_vanishes"
chmod +x "$TMP/glslc_vanishes"
expect_error "glslc gone when compiling: kiln run --device vulkan" \
  "vulkan: shader '[^']+' failed to compile: shader compiler: cannot run $TMP/glslc_vanishes: No such file or directory" \
  KILN_VULKAN_SHADER_COMPILER=glslc "KILN_GLSLC=$TMP/glslc_vanishes" "KILN_CACHE_DIR=$TMP/cache4" \
  -- run "$SMALL" --device vulkan --input "input=$SMALL_IN"
expect_error "KILN_VULKAN_SHADER_COMPILER=bogus: kiln run --device vulkan" \
  "$NOT_AVAILABLE.*KILN_VULKAN_SHADER_COMPILER=bogus is not one of auto, libshaderc, glslc" \
  KILN_VULKAN_SHADER_COMPILER=bogus -- run "$SMALL" --device vulkan --input "input=$SMALL_IN"

echo "== 4. out of device memory"
t0=$(date +%s)
expect_error "KILN_VULKAN_MEMORY_LIMIT=20M: ResNet-50" \
  "vulkan: out of device memory allocating [0-9.]+ (bytes|KiB|MiB|GiB) \(limit 20\.0 MiB set by KILN_VULKAN_MEMORY_LIMIT, [0-9.]+ (bytes|KiB|MiB) in use\)" \
  KILN_VULKAN_MEMORY_LIMIT=20M -- run "$BIG" --device vulkan --input "input=$BIG_IN"
if grep -q "^output:" "$TMP/out.$n_cases"; then echo "FAIL: the capped run printed outputs"; fail=1; fi
t1=$(date +%s)
expect_error "KILN_VULKAN_MEMORY_LIMIT=lots" \
  "KILN_VULKAN_MEMORY_LIMIT=lots is not a byte count" \
  KILN_VULKAN_MEMORY_LIMIT=lots -- run "$SMALL" --device vulkan --input "input=$SMALL_IN"
expect_ok "KILN_VULKAN_MEMORY_LIMIT=1G (does not bind): mlp" "^output: f32 \[4,10\]" \
  KILN_VULKAN_MEMORY_LIMIT=1G -- run "$SMALL" --device vulkan --input "input=$SMALL_IN"
t2=$(date +%s)
expect_ok "no limit: ResNet-50" "^output: f32 \[1,1000\]" -- run "$BIG" --device vulkan --input "input=$BIG_IN"
t3=$(date +%s)
echo "ResNet-50 capped at 20M: $((t1 - t0)) s to fail; uncapped run: $((t3 - t2)) s"

echo "$n_cases commands checked"
[ $fail -eq 0 ] && echo PASS
exit $fail
