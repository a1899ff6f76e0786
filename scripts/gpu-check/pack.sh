#!/usr/bin/env bash
# Packs what the lent GPU machine needs to check kiln into .gpu/ (ignored through
# .git/info/exclude; the device tool carries at most 64 MiB): kiln's binaries
# from a build here, glslc and the Vulkan loader with its GL dispatch libraries
# (the machine has the NVIDIA driver but no loader), the ONNX 1.12 node tests,
# the onnx 1.23 node cases (tests/conformance/latest_cases.sh, into
# BUILD_DIR/onnx-node-latest as the suite's fixture writes them), the
# differential test's models (the sweep's f16/bf16 and transformer cases among them), and the zoo and bench models with their
# weights stubbed (bench/zoo/weights_stub.py: graph and statistics only; the
# machine refills them).
#
#   scripts/gpu-check/pack.sh [BUILD_DIR]     (default build)
#
# Then, with the device tool: run `bash scripts/gpu-check/run.sh` with carry [".gpu"]
# (see that script). Uses Debian's /usr/bin/python3 (onnx, numpy) and apt-get download.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
py=/usr/bin/python3
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gpu/ >> .git/info/exclude; }
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/debs .gpu/models
for b in kiln tests/kiln_conformance tests/kiln_diff; do strip -o ".gpu/bin/$(basename "$b")" "$build/$b"; done
cp "$(command -v glslc)" .gpu/bin/
cp -L /usr/lib/x86_64-linux-gnu/libshaderc.so.1 .gpu/lib/
(cd .gpu/debs && apt-get download -q libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 > /dev/null 2>&1)
tar czf .gpu/node.tgz -C "$($py -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')/backend/test/data" node
tests/conformance/latest_cases.sh . "$build/onnx-node-latest" > /dev/null
tar czf .gpu/node_latest.tgz -C "$build/onnx-node-latest" node
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$py tests/diff/gen_op_sweep.py "$tmp/sweep" > /dev/null
$py tests/diff/gen_control_flow.py "$tmp/sweep" > /dev/null
$py tests/diff/gen_random_graphs.py "$tmp/random" --count 200 --seed 4242 > /dev/null
tar czf .gpu/diffmodels.tgz -C "$tmp" sweep random
$py bench/zoo/weights_stub.py strip-zoo bench/.zoo .gpu/zoo --max-input-bytes 200000 > /dev/null
for m in resnet50 mobilenet_v2 transformer_encoder bert_encoder; do
  $py bench/zoo/weights_stub.py strip "$build/models/$m.onnx" ".gpu/models/$m.onnx" > /dev/null
  cp "$build/models/$m.input.npy" .gpu/models/
done
du -sh .gpu
