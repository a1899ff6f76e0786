#!/usr/bin/env bash
# bench/gpu/prepare_carry.sh — run HERE (Debian 12, x86-64) before a GPU session:
# fills build-gpu-carry/ (ignored by git through /build*/, ~12 MB) with what
# the H200 machine's CUDA image may lack, for the run tool's `carry`:
#
#   include/   vulkan/*.h, vk_video/*.h, shaderc/*.h   kiln's build needs only these headers
#   lib/       libvulkan.so.1 (the loader) and libglvnd's libraries (libGLdispatch.so.0,
#              which NVIDIA's Vulkan driver library needs, and the rest of the set that
#              .library/device/README.md found working: libGLX, libEGL, libGL, libOpenGL, libGLESv2)
#   glslc/     glslc (a wrapper script) + glslc.bin + libshaderc.so.1: Debian's glslc,
#              which links libshaderc.so.1 (and carries glslang and SPIRV-Tools itself);
#              the wrapper points the dynamic linker at the copy beside it
#
# run.sh uses each only where the machine has none of its own. Usage:
#   bash bench/gpu/prepare_carry.sh [DIR]        (default: <repo>/build-gpu-carry)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DST=${1:-$ROOT/build-gpu-carry}
[ "$(uname -m)" = x86_64 ] || { echo "prepare_carry.sh: this machine is $(uname -m); the H200 machine is x86-64" >&2; exit 2; }
rm -rf "$DST"
mkdir -p "$DST/include" "$DST/lib" "$DST/glslc"

# Headers (C only; vulkan.hpp and friends are C++ and large).
for d in vulkan vk_video shaderc; do
  [ -d "/usr/include/$d" ] || { echo "prepare_carry.sh: /usr/include/$d missing (apt-get install libvulkan-dev libshaderc-dev)" >&2; exit 2; }
  mkdir -p "$DST/include/$d"
  cp -a /usr/include/$d/*.h "$DST/include/$d/"
done

# Shared libraries of these Debian packages: the installed copies, else
# downloaded with apt-get and unpacked in a temporary folder.
PKGS="libvulkan1 libglvnd0 libglx0 libegl1 libopengl0 libgl1 libgles2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in $PKGS; do
  if dpkg -s "$p" >/dev/null 2>&1; then
    files=$(dpkg -L "$p" | grep -E '/lib/x86_64-linux-gnu/[^/]+\.so[.0-9]*$' || true)
  else
    (cd "$tmp" && apt-get download "$p" >/dev/null) || { echo "prepare_carry.sh: cannot get $p" >&2; exit 2; }
    dpkg -x "$tmp"/${p}_*.deb "$tmp/root"
    files=$(find "$tmp/root" -path '*/x86_64-linux-gnu/*.so*' \( -type f -o -type l \))
  fi
  # Only the soname (libX.so.N), as a plain file: links travel as links.
  for f in $files; do
    case "$(basename "$f")" in *.so.[0-9] | *.so.[0-9][0-9]) cp -L "$f" "$DST/lib/" ;; esac
  done
done
[ -e "$DST/lib/libvulkan.so.1" ] && [ -e "$DST/lib/libGLdispatch.so.0" ] || { echo "prepare_carry.sh: libvulkan.so.1 or libGLdispatch.so.0 missing" >&2; exit 2; }

# glslc and its libshaderc.so.1.
GLSLC=$(command -v glslc) || { echo "prepare_carry.sh: no glslc here (apt-get install glslc)" >&2; exit 2; }
SHADERC=$(ldd "$GLSLC" | awk '$1 == "libshaderc.so.1" { print $3 }')
[ -n "$SHADERC" ] || { echo "prepare_carry.sh: ldd $GLSLC names no libshaderc.so.1" >&2; exit 2; }
cp "$GLSLC" "$DST/glslc/glslc.bin"
cp -L "$SHADERC" "$DST/glslc/libshaderc.so.1"
cat >"$DST/glslc/glslc" <<'EOF'
#!/bin/sh
# glslc with the libshaderc.so.1 beside it (carried by bench/gpu/prepare_carry.sh).
d=$(dirname "$0")
LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/glslc.bin" "$@"
EOF
chmod +x "$DST/glslc/glslc"
env -u LD_LIBRARY_PATH "$DST/glslc/glslc" --version | sed -n 1p
LD_LIBRARY_PATH="$DST/glslc" ldd "$DST/glslc/glslc.bin" | grep shaderc
du -sh "$DST"
ls -l "$DST/lib" "$DST/glslc"
