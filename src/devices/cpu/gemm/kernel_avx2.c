/* kernel_avx2.c — AVX2 + FMA micro-kernel: 6 x 16 (12 ymm accumulators,
 * two B vectors per step, A broadcast), for CPUs without AVX-512. Compiled
 * with a target attribute; the driver only calls it when AVX2 and FMA are
 * usable. Packing uses the portable routines; the small-M kernels are the
 * portable ones (gemm_small_impl.h) compiled for AVX2. */
#include "devices/cpu/gemm/gemm_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KILN_AVX2 __attribute__((target("avx2,fma")))
#define ALWAYS_INLINE __attribute__((always_inline))
#define MR 6
#define NR 16

/* Lane mask for the first n (0..8) of 8 floats. */
static KILN_AVX2 inline __m256i lane_mask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 0 ? 0 : n), idx);
}

static KILN_AVX2 inline ALWAYS_INLINE void store_row(float *c, __m256 acc0, __m256 acc1, int nr,
                                                     const kiln_gemm_store *st, int i) {
  __m256 alpha = _mm256_set1_ps(st->alpha);
  acc0 = _mm256_mul_ps(acc0, alpha);
  acc1 = _mm256_mul_ps(acc1, alpha);
  if (st->bias_row) {
    __m256 br = _mm256_set1_ps(st->bias_row[i]);
    acc0 = _mm256_add_ps(acc0, br);
    acc1 = _mm256_add_ps(acc1, br);
  }
  if (nr == NR) {
    if (st->bias_col) {
      acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(st->bias_col));
      acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(st->bias_col + 8));
    }
    if (st->beta != 0.0f) {
      __m256 beta = _mm256_set1_ps(st->beta);
      acc0 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c), acc0);
      acc1 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + 8), acc1);
    }
    _mm256_storeu_ps(c, acc0);
    _mm256_storeu_ps(c + 8, acc1);
    return;
  }
  __m256i m0 = lane_mask(nr), m1 = lane_mask(nr - 8);
  if (st->bias_col) {
    acc0 = _mm256_add_ps(acc0, _mm256_maskload_ps(st->bias_col, m0));
    acc1 = _mm256_add_ps(acc1, _mm256_maskload_ps(st->bias_col + 8, m1));
  }
  if (st->beta != 0.0f) {
    __m256 beta = _mm256_set1_ps(st->beta);
    acc0 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c, m0), acc0);
    acc1 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c + 8, m1), acc1);
  }
  _mm256_maskstore_ps(c, m0, acc0);
  _mm256_maskstore_ps(c + 8, m1, acc1);
}

/* R = 1..6 rows; A's element (i, p) at a[i*rsa + p*csa] (see gemm_internal.h). */
static KILN_AVX2 inline ALWAYS_INLINE void tile(const int R, int64_t kc, const float *a, int64_t rsa, int64_t csa,
                                               const float *bp, int64_t bs, float *c, int64_t ldc, int nr,
                                               const kiln_gemm_store *st) {
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) {
    _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < kc; p++) {
    __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    const float *a_ = a + p * csa;
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      __m256 av = _mm256_broadcast_ss(a_ + i * rsa);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
    bp += bs;
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) store_row(c + i * ldc, acc0[i], acc1[i], nr, st, i);
}

static KILN_AVX2 void micro(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *bp, int64_t bs,
                            float *c, int64_t ldc, int mr, int nr, const kiln_gemm_store *st) {
  switch (mr) {
  case 6: tile(6, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 5: tile(5, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 4: tile(4, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 3: tile(3, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 2: tile(2, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  default: tile(1, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  }
}

/* The small-M kernels, 8 floats per vector, strips of 16 columns. */
#define SMALL_FN(name) avx2_##name
#define SMALL_ATTR KILN_AVX2
#define SMALL_W 8
#define SMALL_NR NR
#include "devices/cpu/gemm/gemm_small_impl.h"

const kiln_gemm_kernel kiln_gemm_kernel_avx2 = {
    .name = "avx2",
    .id = 2,
    .mr = MR,
    .nr = NR,
    .micro = micro,
    .small_rows = avx2_small_rows,
    .small_packed = avx2_small_packed,
    .small_dots = avx2_small_dots,
    .tiny = kiln_gemm_tiny_avx2,
    .tiny_w = 8,
    .pack_a = kiln_gemm_pack_a,
    .pack_b = kiln_gemm_pack_b_block,
};

#else
/* Not an x86-64 GCC/clang build: no AVX2 kernel (a NULL name tells the driver). */
const kiln_gemm_kernel kiln_gemm_kernel_avx2 = {0};
#endif
