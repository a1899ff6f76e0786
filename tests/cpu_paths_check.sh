#!/usr/bin/env bash
# Checks that a CPU test pass (tests/cpu_paths.cmake) really takes the
# narrower paths: with the pass's KILN_CPU_DISABLE (set by ctest), the cpu
# device that `kiln devices` describes must report
#   - no feature the pass turns off,
#   - the pass's SGEMM micro-kernel,
#   - generated C compiled with -mno-<feature> for each feature the machine
#     has (`kiln devices` without KILN_CPU_DISABLE) that the pass turns off.
#
#   cpu_paths_check.sh KILN PASS        PASS: avx2 | portable
#
# The convolution paths choose from the same feature flags
# (src/devices/cpu/cpu_conv.c, detect_isa), and unit.test_jit checks that
# generated code sees exactly the ISA macros those flags allow.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 KILN avx2|portable" >&2
  exit 2
fi
kiln=$1 pass=$2
case "$pass" in
  avx2) want_env=avx512 kernel=avx2 lanes=avx2 off="avx512f avx512cd avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 avx512_vbmi amx"
        need="avx2 fma" mno="avx512f:-mno-avx512f" ;;
  portable) want_env=all kernel=generic lanes=generic
        off="sse4_1 sse4_2 avx f16c fma avx2 avx_vnni avx512f avx512cd avx512dq avx512bw avx512vl avx512_vnni amx"
        need="" mno="sse4_1:-mno-sse4.1 sse4_2:-mno-sse4.2 avx:-mno-avx f16c:-mno-f16c fma:-mno-fma avx2:-mno-avx2 avx512f:-mno-avx512f" ;;
  *) echo "unknown pass '$pass'" >&2; exit 2 ;;
esac
if [ "${KILN_CPU_DISABLE:-}" != "$want_env" ]; then
  echo "FAIL: the $pass pass must run with KILN_CPU_DISABLE=$want_env (got '${KILN_CPU_DISABLE:-}')"
  exit 1
fi

# "cpu        fused kernels, N physical cores, FEATURES; SGEMM kernel K; precompiled kernels L; JIT MODE; generated C FLAGS"
line=$("$kiln" devices | grep -m1 '^cpu ') || { echo "FAIL: kiln devices lists no cpu device"; exit 1; }
native=$(env -u KILN_CPU_DISABLE "$kiln" devices | grep -m1 '^cpu ') || { echo "FAIL: no cpu device natively"; exit 1; }
echo "native: $native"
echo "$pass:  $line"
feats() { sed -e 's/^cpu *fused kernels, [0-9]* physical cores, //' -e 's/; SGEMM kernel .*//' <<<"$1"; }
have=" $(feats "$line") " had=" $(feats "$native") "
got_kernel=$(sed -n 's/.*; SGEMM kernel \([^;]*\);.*/\1/p' <<<"$line")
got_lanes=$(sed -n 's/.*; precompiled kernels \([^;]*\);.*/\1/p' <<<"$line")
flags=" $(sed -n 's/.*; generated C //p' <<<"$line") "

status=0
for f in $off; do
  case "$have" in *" $f "*) echo "FAIL: feature $f is still on"; status=1 ;; esac
done
for f in $need; do
  case "$have" in *" $f "*) ;; *) echo "FAIL: feature $f is off (the $pass pass needs it)"; status=1 ;; esac
done
if [ "$got_kernel" != "$kernel" ]; then
  echo "FAIL: SGEMM kernel '$got_kernel', the $pass pass must use '$kernel'"
  status=1
fi
if [ "$got_lanes" != "$lanes" ]; then
  echo "FAIL: precompiled kernels '$got_lanes', the $pass pass must use '$lanes'"
  status=1
fi
for pair in $mno; do
  f=${pair%%:*} flag=${pair#*:}
  case "$had" in
    *" $f "*) case "$flags" in *" $flag "*) ;; *) echo "FAIL: generated C lacks $flag (the machine has $f)"; status=1 ;; esac ;;
  esac
done
[ $status -eq 0 ] && echo "$pass paths: OK (SGEMM $got_kernel, precompiled $got_lanes, generated C$flags)"
exit $status
