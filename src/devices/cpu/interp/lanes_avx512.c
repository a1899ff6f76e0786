/* The AVX-512 build of the interpreter's lane loops (lanes_impl.h): the
 * same source under a target pragma (F, BW, DQ, VL, 512-bit vectors
 * preferred); kiln_lanes() only returns it when the CPU has all four. The
 * JIT compiles for the host (-march=native), so on such a CPU the
 * precompiled tier's loops are vectorized as widely as the compiled ones. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")
#endif
#define LANES_TABLE kiln_lanes_avx512
#define LANES_NAME "avx512"
#include "devices/cpu/interp/lanes_impl.h"
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int kiln_lanes_avx512_unused; /* ISO C: no empty translation unit */
#endif
