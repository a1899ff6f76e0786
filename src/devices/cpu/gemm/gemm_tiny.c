/* gemm_tiny.c — the tiny-problem kernel (gemm_tiny_impl.h) for each kernel
 * set: portable, AVX2 and AVX-512 (target attributes; the driver calls
 * each only on CPUs that have it). This file alone is compiled with a * b
 * + c contracted into one multiply-add (CMakeLists.txt): the kernel is
 * written with vector extensions, and without contraction each product
 * and sum stayed two instructions (the 16x16x16 product 1.5x slower);
 * contraction over the intrinsic kernel files slowed RegNet's grouped
 * convolutions by a quarter instead. */
#include "devices/cpu/gemm/gemm_internal.h"

#define TINY_FN(name) generic_##name
#define TINY_ATTR
#define TINY_W 4
#include "devices/cpu/gemm/gemm_tiny_impl.h"
#undef TINY_FN
#undef TINY_ATTR
#undef TINY_W

void kiln_gemm_tiny_generic(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                            const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st) {
  generic_tiny(m, n, k, a, rsa, csa, bp, nv, c, ldc, st);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TINY_FN(name) avx2_##name
#define TINY_ATTR __attribute__((target("avx2,fma")))
#define TINY_W 8
#include "devices/cpu/gemm/gemm_tiny_impl.h"
#undef TINY_FN
#undef TINY_ATTR
#undef TINY_W

#define TINY_FN(name) avx512_##name
#define TINY_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define TINY_W 16
#include "devices/cpu/gemm/gemm_tiny_impl.h"
#undef TINY_FN
#undef TINY_ATTR
#undef TINY_W

__attribute__((target("avx2,fma"))) void kiln_gemm_tiny_avx2(int64_t m, int64_t n, int64_t k, const float *a,
                                                              int64_t rsa, int64_t csa, const float *bp, int nv,
                                                              float *c, int64_t ldc, const kiln_gemm_store *st) {
  avx2_tiny(m, n, k, a, rsa, csa, bp, nv, c, ldc, st);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void
kiln_gemm_tiny_avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *bp,
                      int nv, float *c, int64_t ldc, const kiln_gemm_store *st) {
  avx512_tiny(m, n, k, a, rsa, csa, bp, nv, c, ldc, st);
}
#else
/* Not x86-64: the kernel sets past the portable one are absent (NULL-named). */
void kiln_gemm_tiny_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *bp,
                         int nv, float *c, int64_t ldc, const kiln_gemm_store *st) {
  kiln_gemm_tiny_generic(m, n, k, a, rsa, csa, bp, nv, c, ldc, st);
}
void kiln_gemm_tiny_avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                           const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st) {
  kiln_gemm_tiny_generic(m, n, k, a, rsa, csa, bp, nv, c, ldc, st);
}
#endif
