#!/usr/bin/env bash
# Installs what kiln needs to build and test, with apt-get. Idempotent: when
# everything is already installed it does nothing (no apt-get update).
#
#   build:   gcc, cmake, make, zlib (optional .npz compression)
#   tests:   clang + compiler-rt (libFuzzer, sanitizers), the official ONNX
#            backend test data, and Debian's python3 with onnx/numpy/torch/
#            torchvision (used by /usr/bin/python3 to export test models and
#            to write reference .npy files); pytest for the Python package's
#            tests (python/tests, run by ctest against /usr/bin/python3 too).
#   vulkan:  the Vulkan headers and loader, shaderc (GLSL -> SPIR-V at run
#            time; kiln dlopens both), Mesa's lavapipe driver (Vulkan on the
#            CPU, so the tests exercise the real Vulkan path), the Khronos
#            validation layer and glslc (the renderer test checks shaders with it).
#   opencl:  CL/cl.h (the OpenCL device builds against it; kiln dlopens the
#            ICD loader), the ICD loader, PoCL (OpenCL on the CPU, so the
#            tests run the real OpenCL path) and clinfo (the machine report).
#   oneDNN:  the header at build time and libdnnl.so.2 at run time: the cpu
#            device's convolutions with weights given at run time (training)
#            run on it where it loads (src/devices/cpu/cpu_conv_dnnl.c).
#   images:  the libraries ImageDecoder dlopens (libjpeg62-turbo, libpng16,
#            libtiff, libwebp, openjpeg) and jpeglib.h for its JPEG decoder
#            (src/ops/image_decode.c); Pillow for the bad-input cases' images.
#   training: OpenBLAS for Debian's torch (the training tests' PyTorch
#            reference runs 6 x 300 steps; the reference BLAS is 40x slower),
#            Fashion-MNIST and scikit-learn (digits) for the real-data
#            training benchmark (bench/train/real_data.py).
set -euo pipefail

packages=(
  build-essential cmake clang libclang-rt-14-dev zlib1g-dev time
  libonnx-testdata python3-onnx python3-numpy python3-torch python3-torchvision
  libvulkan-dev libvulkan1 libshaderc-dev mesa-vulkan-drivers vulkan-validationlayers glslc
  opencl-c-headers ocl-icd-libopencl1 pocl-opencl-icd clinfo
  libopenblas0-pthread dataset-fashion-mnist python3-sklearn
  libdnnl-dev
  libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libtiff6 libwebp7 libopenjp2-7 python3-pil
  python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
