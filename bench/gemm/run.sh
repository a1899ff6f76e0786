#!/bin/sh
# Builds bench_sgemm (kiln's gemm + OpenBLAS + oneDNN) and runs it at 1
# and 2 threads. Needs libopenblas-dev and libdnnl-dev (apt); the library
# itself depends on neither.
#
#   bench/gemm/run.sh [build-dir] [-- extra bench_sgemm args, e.g. --runs 31]
#
# OpenBLAS and oneDNN take their thread counts from the environment, set
# here per run; OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are cleared so OpenBLAS
# picks its own kernel for this CPU, and OPENBLAS_THREAD_TIMEOUT is lowered
# so its idle workers stop spinning (and stealing a core from the library
# timed next) within microseconds instead of ~0.1 s.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gemm-bench}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
mkdir -p "$build"
# The gemm and base sources only (the rest of libkiln is not needed), at -O2
# like the default RelWithDebInfo library build.
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
   -I"$root/src" -I"$root/include" -I/usr/include/x86_64-linux-gnu/openblas-pthread \
   "$root/bench/gemm/bench_sgemm.c" "$root"/src/devices/cpu/gemm/*.c "$root"/src/base/*.c \
   -o "$build/bench_sgemm" -lopenblas -ldnnl -lpthread -lm -ldl
for t in 1 2; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
      OPENBLAS_THREAD_TIMEOUT=4 "$build/bench_sgemm" --threads $t "$@"
done
