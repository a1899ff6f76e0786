#!/usr/bin/env bash
# The device-neutral core names no device: src/runtime/ (session.c
# included) holds no "cpu", "vulkan", "opencl" or "cuda" (any case, as a
# word or a prefix of one), so a new device is its own folder plus one line
# in devices/providers.c. Exits 1 and prints the lines that do.
#   scripts/no_device_names.sh [DIR...]   (default: src/runtime)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dirs=("$@")
[ ${#dirs[@]} -eq 0 ] && dirs=("$root/src/runtime")
hits=$(grep -rniE '\b(cpu|vulkan|opencl|cuda)' --include='*.[ch]' "${dirs[@]}")
if [ -n "$hits" ]; then
  echo "FAIL: the device-neutral core names devices:"
  printf '%s\n' "$hits" | sed 's/^/  /'
  exit 1
fi
echo "PASS: ${dirs[*]} name no device"
