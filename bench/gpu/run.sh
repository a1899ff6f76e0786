#!/usr/bin/env bash
# bench/gpu/run.sh — kiln-vulkan vs PyTorch CUDA on one NVIDIA GPU (issue 4, item 7).
#
#   bash bench/gpu/run.sh [--quick] [--kiln PATH] [--build-dir DIR] [--work DIR] [--md FILE]
#                         [--json FILE] [--budget SECONDS] [--jobs N] [--python PY]
#                         [--torch-device cuda|cpu] [--allow-cpu-vulkan] [--cpu-check]
#                         [-- DRIVER OPTIONS]
#
# In one command (sized for the H200 machine's 10-minute limit, build included):
#   1. finds and prints the NVIDIA GPU (nvidia-smi), the Vulkan loader
#      (libvulkan.so.1), the NVIDIA Vulkan driver (nvidia_icd.json and the
#      library it names) and a GLSL compiler (libshaderc_shared, glslc or
#      $KILN_GLSLC); each missing piece is a clear error, and what
#      build-gpu-carry/ (made here by bench/gpu/prepare_carry.sh) brings is
#      used where the machine lacks it;
#   2. builds kiln (cmake Release, -DKILN_VULKAN=ON, target kiln, all cores)
#      into --build-dir (default build-gpu) unless --kiln names a binary, and
#      at the same time exports the ONNX models with torch (bench_gpu.py export);
#   3. checks that `kiln devices` lists the NVIDIA GPU as a Vulkan device;
#   4. times ResNet-50 (batch 1, 32) and the BERT-base encoder (batch 1, 8) on
#      kiln-vulkan and PyTorch CUDA eager fp32 (TF32 off) and fp16, interleaved,
#      and a 4096^3 fp32 GEMM against cuBLAS; then, in the time the fp32 work
#      left, each cell again with `kiln bench --fp16` interleaved with torch
#      fp16 (and the GEMM in fp16 vs cuBLAS half) (bench_gpu.py bench); prints
#      the table and writes it as Markdown to --md (default $OUT/gpubench.md
#      when $OUT is set, else WORK/gpubench.md) and as JSON to --json.
#
# Every phase runs under `timeout`; the whole run ends by --budget seconds
# (default 560; --quick 400) after it started, printing the table of what ran.
#
# --quick           fewer timed runs (6 per cell, 4 GEMMs): checks the harness, not for the record
# --kiln PATH       use this kiln binary, build nothing
# --python PY       a python with torch (default: $PYTHON, else the first of python3, /usr/bin/python3 with torch)
# --torch-device cpu  run torch on the CPU (no GPU needed; the report then says NOT CUDA and labels
#                   every torch figure CPU)
# --allow-cpu-vulkan  accept a Vulkan device that is not NVIDIA (lavapipe), for checking the harness
# --cpu-check       = --torch-device cpu --allow-cpu-vulkan --quick with tiny models (ResNet-50 at
#                   64x64 batch 1, a 2-layer BERT at seq 32 batch 1, a 256^3 GEMM): the local test
# DRIVER OPTIONS (after --) go to bench_gpu.py: --models resnet50:1,bert:8 --image-size N
#                   --bert-layers N --seq N --gemm-n N --gemm-chain K --no-gemm --iterations K
#                   --rounds R --warmup W --cudnn-benchmark --device-stats --no-kiln-fp16 (kiln fp32 only)
#                   --no-fp16 (no fp16 at all) (bench_gpu.py --help)
set -u -o pipefail

T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CARRY=${KILN_GPU_CARRY:-$ROOT/build-gpu-carry}
KILN_GPU_NO_CMAKE=${KILN_GPU_NO_CMAKE:-} # set: build with cc directly even where cmake exists (tests that path)

QUICK=0
KILN=
BUILD_DIR=$ROOT/build-gpu
WORK=${TMPDIR:-/tmp}/kiln-gpubench
MD=
JSON=
BUDGET=
JOBS=$(nproc 2>/dev/null || echo 4)
PY=${PYTHON:-}
TORCH_DEVICE=cuda
ALLOW_CPU_VK=0
CPU_CHECK=0
DRIVER_ARGS=()

say() { printf '[run.sh %4ds] %s\n' $(($(date +%s) - T0)) "$*"; }
die() {
  printf '\nrun.sh: ERROR: %s\n' "$*" >&2
  exit 2
}
usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
  --quick) QUICK=1 ;;
  --kiln) KILN=$2; shift ;;
  --build-dir) BUILD_DIR=$2; shift ;;
  --work) WORK=$2; shift ;;
  --md) MD=$2; shift ;;
  --json) JSON=$2; shift ;;
  --budget) BUDGET=$2; shift ;;
  --jobs) JOBS=$2; shift ;;
  --python) PY=$2; shift ;;
  --torch-device) TORCH_DEVICE=$2; shift ;;
  --allow-cpu-vulkan) ALLOW_CPU_VK=1 ;;
  --cpu-check) CPU_CHECK=1 ;;
  -h | --help) usage; exit 0 ;;
  --) shift; DRIVER_ARGS+=("$@"); break ;;
  *) die "unknown option '$1' (bench_gpu.py's options go after --; see --help)" ;;
  esac
  shift
done
case "$TORCH_DEVICE" in cuda | cpu) ;; *) die "--torch-device takes cuda or cpu" ;; esac
if [ "$CPU_CHECK" = 1 ]; then
  TORCH_DEVICE=cpu ALLOW_CPU_VK=1 QUICK=1
  # lavapipe on a small shared machine can take long per submission.
  export KILN_VULKAN_TIMEOUT_S=${KILN_VULKAN_TIMEOUT_S:-600}
  DRIVER_ARGS=(--models resnet50:1,bert:1 --image-size 64 --bert-layers 2 --seq 32 --gemm-n 256 --gemm-chain 3
    --torch-threads 1 "${DRIVER_ARGS[@]}")
fi
[ -n "$BUDGET" ] || BUDGET=$([ "$QUICK" = 1 ] && echo 400 || echo 560)
DEADLINE=$((T0 + BUDGET))
left() { echo $((DEADLINE - $(date +%s))); }
mkdir -p "$WORK" || die "cannot create --work $WORK"
WORK=$(cd "$WORK" && pwd)
if [ -z "$MD" ]; then MD=${OUT:+$OUT/gpubench.md}; MD=${MD:-$WORK/gpubench.md}; fi
if [ -z "$JSON" ]; then JSON=${OUT:+$OUT/gpubench.json}; JSON=${JSON:-$WORK/gpubench.json}; fi
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$WORK/kiln-cache}
export PYTHONUNBUFFERED=1
QUICK_ARG=()
[ "$QUICK" = 1 ] && QUICK_ARG=(--quick)
say "bench/gpu: budget ${BUDGET}s, work $WORK, report $MD; torch on $TORCH_DEVICE$([ "$QUICK" = 1 ] && echo ', --quick')"

# ---- 1. the machine ------------------------------------------------------------------------
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
# find_lib NAME: the path the dynamic linker would use (ld.so.cache, then LD_LIBRARY_PATH), or nothing.
find_lib() {
  local p d
  p=$("$LDCONFIG" -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }')
  if [ -n "$p" ]; then echo "$p"; return; fi
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    if [ -n "$d" ] && [ -e "$d/$1" ]; then echo "$d/$1"; return; fi
  done
}
add_ld_path() { export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; }

GPU_NAME= NV_DRIVER=
if command -v nvidia-smi >/dev/null 2>&1; then
  q=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed -n 1p)
  if [ $? -eq 0 ] && [ -n "$q" ] && ! grep -qi 'fail\|error\|not found' <<<"$q"; then
    GPU_NAME=$(cut -d, -f1 <<<"$q" | sed 's/^ *//;s/ *$//')
    NV_DRIVER=$(cut -d, -f2 <<<"$q" | sed 's/^ *//;s/ *$//')
    say "GPU: $q"
  else
    say "nvidia-smi failed: $q"
  fi
else
  say "nvidia-smi: not found"
fi
if [ -z "$GPU_NAME" ] && [ "$TORCH_DEVICE" = cuda ] && [ "$ALLOW_CPU_VK" = 0 ]; then
  die "no NVIDIA GPU: nvidia-smi is missing or lists none. This bench needs an NVIDIA GPU and its driver
(--cpu-check runs the harness on the CPU with lavapipe and torch-cpu; it is not for the record)."
fi

# The Vulkan loader.
VK_LOADER=$(find_lib libvulkan.so.1)
if [ -z "$VK_LOADER" ] && [ -e "$CARRY/lib/libvulkan.so.1" ]; then
  add_ld_path "$CARRY/lib"
  VK_LOADER="$CARRY/lib/libvulkan.so.1 (carried)"
fi
[ -n "$VK_LOADER" ] || die "no Vulkan loader (libvulkan.so.1) on this machine, and none carried in $CARRY/lib.
Bring one: here, run 'bash bench/gpu/prepare_carry.sh', then name build-gpu-carry in the run tool's carry."
say "Vulkan loader: $VK_LOADER"

# The Vulkan driver (ICD). VK_DRIVER_FILES / VK_ICD_FILENAMES, if set, are used as they are.
ICD_LIST=
if [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  ICD_LIST=$(tr ':' '\n' <<<"${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-}}")
  say "Vulkan drivers from VK_DRIVER_FILES/VK_ICD_FILENAMES: $(tr '\n' ' ' <<<"$ICD_LIST")"
  for f in $ICD_LIST; do [ -e "$f" ] || say "warning: $f does not exist"; done
else
  dirs="/usr/local/nvidia/share/vulkan/icd.d /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d /usr/local/etc/vulkan/icd.d"
  IFS=: read -r -a xdg <<<"${XDG_DATA_DIRS:-}"
  for d in "${xdg[@]}"; do [ -n "$d" ] && dirs="$dirs $d/vulkan/icd.d"; done
  ICD_LIST=$(for d in $dirs; do ls -1 "$d"/*.json 2>/dev/null; done | awk '!seen[$0]++')
  say "Vulkan driver manifests: $(tr '\n' ' ' <<<"${ICD_LIST:-none}")"
  NV_ICD=$(grep -i nvidia <<<"$ICD_LIST" | head -n 1)
  if [ -n "$NV_ICD" ] && [ "$ALLOW_CPU_VK" = 0 ]; then
    # Only NVIDIA's: the loader then skips any other driver (lavapipe), and
    # finds it where the container mounts it (/usr/local/nvidia), outside its search path.
    export VK_DRIVER_FILES=$NV_ICD VK_ICD_FILENAMES=$NV_ICD
    say "using $NV_ICD (VK_DRIVER_FILES)"
  fi
fi
NV_ICD=$(grep -i nvidia <<<"$ICD_LIST" | head -n 1)
if [ -n "$NV_ICD" ]; then
  NV_LIB=$(sed -n 's/.*"library_path"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$NV_ICD" | head -n 1)
  if [ -z "$NV_LIB" ]; then
    say "warning: no library_path in $NV_ICD"
  elif [ "${NV_LIB#/}" != "$NV_LIB" ]; then
    [ -e "$NV_LIB" ] || die "the NVIDIA Vulkan manifest $NV_ICD names $NV_LIB, which does not exist"
    say "NVIDIA Vulkan driver: $NV_LIB"
  else
    p=$(find_lib "$NV_LIB")
    if [ -z "$p" ]; then
      for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
        if [ -e "$d/$NV_LIB" ]; then add_ld_path "$d"; p="$d/$NV_LIB (added $d to LD_LIBRARY_PATH)"; break; fi
      done
    fi
    [ -n "$p" ] || die "the NVIDIA Vulkan manifest $NV_ICD names $NV_LIB, which the dynamic linker cannot find"
    say "NVIDIA Vulkan driver: $p"
  fi
  # NVIDIA's GLX/Vulkan library needs libglvnd's libGLdispatch.so.0.
  GLD=$(find_lib libGLdispatch.so.0)
  if [ -z "$GLD" ] && [ -e "$CARRY/lib/libGLdispatch.so.0" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$CARRY/lib:"*) ;; *) add_ld_path "$CARRY/lib" ;; esac
    GLD="$CARRY/lib/libGLdispatch.so.0 (carried)"
  fi
  say "libGLdispatch.so.0: ${GLD:-not found (the NVIDIA driver may fail to load; bench/gpu/prepare_carry.sh carries it)}"
elif [ "$ALLOW_CPU_VK" = 0 ]; then
  die "no NVIDIA Vulkan driver manifest (nvidia_icd.json) in $(tr '\n' ' ' <<<"${dirs:-VK_DRIVER_FILES}").
Set VK_DRIVER_FILES=/path/to/nvidia_icd.json (the NVIDIA driver's; in containers often
/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json or /etc/vulkan/icd.d/nvidia_icd.json)."
fi

# The GLSL compiler: libshaderc_shared (self-contained upstream builds), else glslc.
SC=
if [ -n "${KILN_GLSLC:-}" ]; then
  [ -x "$KILN_GLSLC" ] || die "KILN_GLSLC=$KILN_GLSLC is not executable"
  SC="glslc $KILN_GLSLC (KILN_GLSLC)"
elif p=$(find_lib libshaderc_shared.so.1) && [ -n "$p" ]; then
  SC="libshaderc $p"
elif command -v glslc >/dev/null 2>&1; then
  SC="glslc $(command -v glslc)"
elif [ -x "$CARRY/glslc/glslc" ]; then
  export KILN_GLSLC=$CARRY/glslc/glslc
  SC="glslc $KILN_GLSLC (carried)"
else
  die "no GLSL compiler: no \$KILN_GLSLC, no libshaderc_shared.so.1, no glslc on PATH, none carried in $CARRY/glslc.
Bring one: here, run 'bash bench/gpu/prepare_carry.sh', then name build-gpu-carry in the run tool's carry."
fi
case "$SC" in
glslc*)
  g=$(sed 's/^glslc \([^ ]*\).*/\1/' <<<"$SC")
  v=$(timeout 20 "$g" --version 2>&1 | sed -n 1p) || die "$g --version failed: $v"
  SC="$SC: $v"
  ;;
esac
say "shader compiler: $SC"

# python with torch
if [ -z "$PY" ]; then
  for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null 2>&1 && timeout 120 "$c" -c 'import torch' >/dev/null 2>&1; then PY=$(command -v "$c"); break; fi
  done
  [ -n "$PY" ] || die "no python with torch (tried python3, /usr/bin/python3); pass --python PY"
fi
say "python: $PY"
# --device-stats: after the cells, one `kiln bench --profile` per model for
# its queue submissions / command buffers / dispatches (only if time is left).
COMMON=(--work "$WORK" --torch-device "$TORCH_DEVICE" --device-stats "${QUICK_ARG[@]}" "${DRIVER_ARGS[@]}")

# ---- 2. build kiln while the models are exported ------------------------------------------
build_kiln() {
  set -e
  local gen=() cfg=(-DCMAKE_BUILD_TYPE=Release -DKILN_VULKAN=ON)
  local cc=${CC:-$(command -v cc || command -v gcc || command -v clang || echo cc)}
  if ! printf '#include <vulkan/vulkan.h>\n' | "$cc" -E -x c - >/dev/null 2>&1; then
    [ -e "$CARRY/include/vulkan/vulkan.h" ] || { echo "no vulkan/vulkan.h here and none in $CARRY/include"; return 3; }
    cfg+=(-DKILN_VULKAN_INCLUDE_DIR="$CARRY/include")
    echo "using the carried Vulkan headers in $CARRY/include"
  fi
  if ! printf '#include <shaderc/shaderc.h>\n' | "$cc" -E -x c - >/dev/null 2>&1; then
    [ -e "$CARRY/include/shaderc/shaderc.h" ] || { echo "no shaderc/shaderc.h here and none in $CARRY/include"; return 3; }
    cfg+=(-DKILN_SHADERC_INCLUDE_DIR="$CARRY/include")
    echo "using the carried shaderc header in $CARRY/include"
  fi
  if command -v cmake >/dev/null 2>&1 && [ -z "${KILN_GPU_NO_CMAKE:-}" ]; then
    if [ ! -e "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
    cmake -S "$ROOT" -B "$BUILD_DIR" "${gen[@]}" "${cfg[@]}" | tee "$BUILD_DIR/kiln-configure.log"
    grep -q 'Vulkan device enabled' "$BUILD_DIR/kiln-configure.log" || { echo "cmake did not enable the Vulkan device"; return 3; }
    cmake --build "$BUILD_DIR" --target kiln -j "$JOBS"
  else
    # No cmake: the same sources and flags by hand (CMakeLists.txt's globs).
    echo "no cmake: compiling with $cc directly"
    local obj=$BUILD_DIR/obj inc=()
    mkdir -p "$obj" "$BUILD_DIR/generated"
    for a in "${cfg[@]}"; do case "$a" in -DKILN_*_INCLUDE_DIR=*) inc+=(-I"${a#*=}") ;; esac; done
    "$PY" -c 'import sys,json; t=open(sys.argv[1]).read(); open(sys.argv[2],"w").write("static const char kiln_rt_text[] = " + json.dumps(t) + ";\n")' \
      "$ROOT/src/codegen/kiln_rt.h" "$BUILD_DIR/generated/kiln_rt_text.h"
    (cd "$ROOT" && find src/base src/tensor src/ir src/onnx src/ops src/passes src/codegen src/runtime src/devices src/api src/cli -name '*.c') |
      xargs -P "$JOBS" -I{} sh -c 'o="$0/$(echo "$1" | tr / _).o"; '"$cc"' -std=c11 -O3 -DNDEBUG -fPIC -D_GNU_SOURCE -DKILN_HAVE_VULKAN=1 -w -I"$2/include" -I"$2/src" -I"$3" '"${inc[*]}"' -c "$2/$1" -o "$o"' \
        "$obj" {} "$ROOT" "$BUILD_DIR/generated"
    "$cc" -o "$BUILD_DIR/kiln" "$obj"/*.o -lpthread -lm -ldl
  fi
}
if [ -n "$KILN" ]; then
  [ -x "$KILN" ] && [ -f "$KILN" ] || die "--kiln $KILN is not an executable file"
  KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
  say "kiln: $KILN (given; not building)"
  BUILD_PID=
else
  KILN=$BUILD_DIR/kiln
  mkdir -p "$BUILD_DIR" || die "cannot create $BUILD_DIR"
  export ROOT BUILD_DIR CARRY JOBS PY KILN_GPU_NO_CMAKE
  export -f build_kiln
  bt=$(($(left) * 45 / 100))
  say "building kiln in $BUILD_DIR (Release, Vulkan, -j$JOBS, timeout ${bt}s; log $WORK/build.log)"
  timeout -k 5 "$bt" bash -c build_kiln >"$WORK/build.log" 2>&1 &
  BUILD_PID=$!
fi
et=$(($(left) * 55 / 100))
say "exporting the ONNX models with $PY (timeout ${et}s)"
timeout -k 5 "$et" "$PY" "$HERE/bench_gpu.py" export "${COMMON[@]}" --deadline $(($(date +%s) + et - 2))
rc=$?
if [ $rc -ne 0 ]; then
  [ -n "$BUILD_PID" ] && kill "$BUILD_PID" 2>/dev/null
  [ $rc -eq 124 ] && die "exporting the models took over ${et}s"
  die "exporting the models failed (status $rc; the message above says why)"
fi
if [ -n "$BUILD_PID" ]; then
  wait "$BUILD_PID"
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 40 "$WORK/build.log"
    [ -n "${OUT:-}" ] && cp "$WORK/build.log" "$OUT/build.log" 2>/dev/null
    [ $rc -eq 124 ] && die "building kiln took over ${bt}s (log: $WORK/build.log)"
    die "building kiln failed (status $rc; the end of $WORK/build.log is above)"
  fi
  [ -x "$KILN" ] || die "the build left no $KILN"
  say "kiln built: $KILN"
fi

# ---- 3. kiln's Vulkan device -----------------------------------------------------------------
DEVS=$(timeout 60 "$KILN" devices 2>&1)
rc=$?
[ $rc -eq 0 ] || die "'$KILN devices' failed (status $rc): $DEVS"
VK_LINES=$(grep -A1 '^vulkan' <<<"$DEVS")
PROBE=$WORK/gemm_8_c1.onnx # an 8x8 MatMul written by the export step
if [ -z "$VK_LINES" ]; then
  printf '%s\n' "$DEVS"
  why=$(timeout 60 "$KILN" bench "$PROBE" --device vulkan --warmup 0 --iterations 1 2>&1 | grep -i 'error' | sed -n 1p)
  die "kiln lists no Vulkan device${why:+: $why}
(loader $VK_LOADER; drivers ${VK_DRIVER_FILES:-the loader default}; shader compiler $SC)"
fi
if [ "$ALLOW_CPU_VK" = 1 ]; then
  DEV_LINE=$(grep '^vulkan' <<<"$DEVS" | head -n 1)
else
  DEV_LINE=$(grep '^vulkan' <<<"$DEVS" | grep -i nvidia | head -n 1)
  [ -n "$DEV_LINE" ] || die "kiln's Vulkan devices are not NVIDIA GPUs:
$VK_LINES
(--allow-cpu-vulkan accepts them for a harness check)"
fi
KDEV=$(awk '{ print $1 }' <<<"$DEV_LINE")
DEV_LINE=$(sed 's/  */ /g' <<<"$DEV_LINE")
say "kiln device: $DEV_LINE"
# One small run first, so a device that cannot run anything fails here, clearly.
probe=$(timeout 120 "$KILN" bench "$PROBE" --device "$KDEV" --warmup 0 --iterations 1 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] && probe="timed out after 120 s
$probe"
  die "kiln cannot run an 8x8 MatMul on $KDEV (status $rc):
$(sed -n 1,20p <<<"$probe")"
fi
say "probe: an 8x8 MatMul ran on $KDEV ($(grep -o 'first run [0-9.]* ms' <<<"$probe"))"

# ---- 4. the bench -----------------------------------------------------------------------------
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || true)
if [ -n "$COMMIT" ] && [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then COMMIT="$COMMIT+dirty"; fi
CMD="bash bench/gpu/run.sh"
[ "$CPU_CHECK" = 1 ] && CMD="$CMD --cpu-check"
[ "$QUICK" = 1 ] && [ "$CPU_CHECK" = 0 ] && CMD="$CMD --quick"
[ "$TORCH_DEVICE" = cpu ] && [ "$CPU_CHECK" = 0 ] && CMD="$CMD --torch-device cpu"
[ "$ALLOW_CPU_VK" = 1 ] && [ "$CPU_CHECK" = 0 ] && CMD="$CMD --allow-cpu-vulkan"
[ ${#DRIVER_ARGS[@]} -gt 0 ] && [ "$CPU_CHECK" = 0 ] && CMD="$CMD -- ${DRIVER_ARGS[*]}"
bt=$(($(left)))
[ $bt -gt 20 ] || die "no time left for the bench (${bt}s of the ${BUDGET}s budget)"
say "bench: kiln $KDEV vs torch $TORCH_DEVICE (timeout ${bt}s)"
timeout -k 10 "$bt" "$PY" "$HERE/bench_gpu.py" bench "${COMMON[@]}" --deadline $((DEADLINE - 3)) \
  --kiln "$KILN" --kiln-device "$KDEV" --kiln-device-line "$DEV_LINE" --shader-compiler "$SC" \
  --gpu-name "$GPU_NAME" --nvidia-driver "$NV_DRIVER" --kiln-commit "${COMMIT:-?}" --command "$CMD" \
  --md "$MD" --json-out "$JSON"
rc=$?
say "done (status $rc); report: $MD; raw: $JSON"
exit $rc
