#!/usr/bin/env bash
# Runs kiln's whole test suite: installs dependencies, builds the normal,
# sanitizer (ASan+UBSan) and fuzzing (clang libFuzzer) trees, exports the
# PyTorch test models, then runs everything through one ctest invocation.
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
/usr/bin/python3 tests/models/export_models.py build/models --big

echo "== ctest"
cd build
ctest -j"$jobs" --output-on-failure --timeout 1500
