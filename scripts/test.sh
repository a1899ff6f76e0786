#!/usr/bin/env bash
# Runs kiln's whole test suite: installs dependencies, builds the normal,
# sanitizer (ASan+UBSan) and fuzzing (clang libFuzzer) trees, exports the
# PyTorch test models, makes the ONNX Runtime venv (pip) and exports the model
# zoo's suite tier, then runs everything through one ctest invocation.
# The last lines are ctest's own summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)

echo "== build: sanitizers (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null

echo "== build: fuzz targets (clang, libFuzzer)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_WERROR=ON >/dev/null
cmake --build build-fuzz -j"$jobs" >/dev/null  # the whole tree: clang must compile it warning-free too

echo "== build: release"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON \
  -DKILN_ASAN_BUILD_DIR="$PWD/build-asan" -DKILN_FUZZ_BUILD_DIR="$PWD/build-fuzz" >/dev/null
cmake --build build -j"$jobs" >/dev/null

echo "== test models (PyTorch export, /usr/bin/python3)"
/usr/bin/python3 tests/models/export_models.py build/models --big --bert

echo "== ONNX Runtime venv (scripts/python-venv.sh: bench/.venv, pip: onnxruntime, onnx, numpy)"
./scripts/python-venv.sh bench/.venv >/dev/null
echo "== newest ONNX node cases (tests/conformance/gen_onnx_node_cases.py, the venv's onnx)"
tests/conformance/latest_cases.sh "$PWD" build/onnx-node-latest
echo "== model zoo, suite tier (bench/zoo/export_zoo.py, for zoo.cpu)"
python3 bench/zoo/export_zoo.py --tier suite --out build/zoo

# What this run is on, so a failure report from another machine says so.
# Nothing here may fail the script: each probe's failure prints a note.
machine_report() {
  set +e +o pipefail
  local kiln=build/kiln
  echo "== machine"
  local model
  model=$(grep -m1 -E '^(model name|Hardware|Processor)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*:[[:space:]]*//')
  echo "cpu:       ${model:-unknown} ($(uname -m 2>/dev/null)); $(nproc 2>/dev/null || echo '?') logical CPUs"
  local simd
  simd=$(grep -m1 -E '^(flags|Features)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' |
         grep -E '^(sse4_1|sse4_2|avx|avx2|fma|f16c|bmi2|avx_vnni|avx512[a-z0-9_]*|amx[a-z0-9_]*|asimd|sve[0-9]*)$' |
         tr '\n' ' ')
  echo "simd:      ${simd:-none found} (/proc/cpuinfo)"
  local devices cpu_line
  devices=$(timeout 120 "$kiln" devices 2>/dev/null)
  cpu_line=$(grep -m1 '^cpu ' <<<"$devices" | sed 's/^cpu *//')
  echo "kiln cpu:  ${cpu_line:-(no cpu device: $kiln devices failed or found no C compiler)}"
  local t
  for t in gcc clang cmake; do
    printf '%-10s %s\n' "$t:" "$({ "$t" --version 2>/dev/null || echo 'not found'; } | head -1)"
  done
  local vk
  vk=$(grep -E '^vulkan' <<<"$devices" | sed 's/^/  kiln: /')
  if command -v vulkaninfo >/dev/null 2>&1; then
    echo "vulkan:    vulkaninfo --summary:"
    timeout 120 vulkaninfo --summary 2>/dev/null | grep -E 'deviceName|driverName|driverInfo|apiVersion' | sed 's/^[[:space:]]*/  /'
  else
    echo "vulkan:    ICDs: $(ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null | grep '\.json$' | tr '\n' ' ')"
  fi
  [ -n "$vk" ] && echo "$vk"
  local icds
  icds=$(ls /etc/OpenCL/vendors/*.icd 2>/dev/null | tr '\n' ' ')
  echo "opencl:    ICDs: ${icds:-none}"
  if command -v clinfo >/dev/null 2>&1; then
    timeout 120 clinfo -l 2>/dev/null | sed 's/^/  /'
  fi
  # Which CPU paths the suite runs: the native pass takes the machine's SGEMM
  # kernel (and matching convolution paths and -march=native generated C);
  # tests/cpu_paths.cmake registers the narrower passes.
  local kernel passes p
  kernel=$(sed -n 's/.*; SGEMM kernel \([^;]*\);.*/\1/p' <<<"$cpu_line")
  echo "passes:    native (every cpu test): SGEMM kernel ${kernel:-?}, generated C for -march=native"
  passes=$(cd build 2>/dev/null && ctest -N 2>/dev/null | sed -n 's/.*Test *#[0-9]*: \(avx2\|portable\)\.paths$/\1/p')
  for p in $passes; do
    case $p in
      avx2) echo "           avx2.* (KILN_CPU_DISABLE=avx512): SGEMM kernel avx2, generated C -mno-avx512f" ;;
      portable) echo "           portable.* (KILN_CPU_DISABLE=all): SGEMM kernel generic, generated C without SSE4/AVX/AVX2/FMA/AVX-512" ;;
    esac
  done
  [ -z "$passes" ] && echo "           (no narrower CPU pass registered on this machine)"
  set -e -o pipefail
  return 0
}
machine_report || true

echo "== lines of C per layer"
./scripts/line_budget.sh || true # a failure shows again as lint.line_budget in ctest's summary

echo "== ctest"
cd build
ctest -j"$jobs" --output-on-failure --timeout 1500
