#!/usr/bin/env bash
# Installs dependencies, builds kiln, and classifies the bundled example
# images with the bundled model on the default device.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== kiln info examples/models/shapes.onnx"
./build/kiln info examples/models/shapes.onnx | head -20
for f in examples/models/sample_*.npy; do
  echo "== kiln run examples/models/shapes.onnx --input image=$f"
  ./build/kiln run examples/models/shapes.onnx --input "image=$f"
  ./build/kiln_example examples/models/shapes.onnx "$f" examples/models/shapes_labels.txt
done
