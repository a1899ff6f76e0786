/* gemm_tiny_impl.h — the tiny-problem kernel (kiln_gemm_tiny_fn in
 * gemm_internal.h) written once with GCC/clang vector extensions and
 * included by each kernel file, which sets:
 *
 *   TINY_FN(name)  the name of each generated function
 *   TINY_ATTR      function attributes (e.g. a target ISA), may be empty
 *   TINY_W         floats per vector (4: SSE/NEON, 8: AVX, 16: AVX-512)
 *
 * B comes padded (gemm.c copies it: nv vectors a row), so every load is a
 * whole vector; four rows of A share each B load, their sums in registers
 * (the row count a constant per instantiation, as in gemm_small_impl.h). */

typedef float TINY_FN(vec) __attribute__((vector_size(TINY_W * 4), aligned(4), may_alias));
#define TVEC TINY_FN(vec)

/* A row's sums (n of them) scaled, biased and blended into c (st). */
static TINY_ATTR __attribute__((noinline)) void TINY_FN(tiny_finish)(const float *sums, float *cr, int64_t n,
                                                                     const kiln_gemm_store *st, int64_t i) {
  for (int64_t j = 0; j < n; j++) {
    float s = st->alpha * sums[j];
    if (st->bias_row) s += st->bias_row[i];
    if (st->bias_col) s += st->bias_col[j];
    if (st->beta != 0.0f) s += st->beta * cr[j];
    cr[j] = s;
  }
}

static TINY_ATTR inline __attribute__((always_inline)) void
TINY_FN(tiny_rows)(const int R, const int NV, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *bp,
                   float *c, int64_t ldc, int64_t n, const kiln_gemm_store *st, int64_t i0) {
  TVEC acc[4][KILN_GEMM_TINY_NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[r][v] = (TVEC){0};
  for (int64_t p = 0; p < k; p++) {
    TVEC bv[KILN_GEMM_TINY_NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) bv[v] = *(const TVEC *)(bp + (p * NV + v) * TINY_W);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      float x = a[r * rsa + p * csa];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[r][v] += x * bv[v];
    }
  }
  bool plain = st->alpha == 1.0f && st->beta == 0.0f && !st->bias_row && !st->bias_col;
  for (int r = 0; r < R; r++) {
    float *cr = c + r * ldc;
    if (plain && n == NV * TINY_W) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) *(TVEC *)(cr + v * TINY_W) = acc[r][v];
      continue;
    }
    float sums[KILN_GEMM_TINY_NV * TINY_W];
    for (int v = 0; v < NV; v++) *(TVEC *)(sums + v * TINY_W) = acc[r][v];
    TINY_FN(tiny_finish)(sums, cr, n < NV * TINY_W ? n : NV * TINY_W, st, i0 + r);
  }
}

/* Rows of A four at a time (then the last one to three), for nv = 1..4. */
#define TINY_CASE(NV)                                                                                    \
  case NV: {                                                                                             \
    int64_t i = 0;                                                                                       \
    for (; i + 4 <= m; i += 4) TINY_FN(tiny_rows)(4, NV, k, a + i * rsa, rsa, csa, bp, c + i * ldc, ldc, n, st, i); \
    switch (m - i) {                                                                                     \
      case 3: TINY_FN(tiny_rows)(3, NV, k, a + i * rsa, rsa, csa, bp, c + i * ldc, ldc, n, st, i); break; \
      case 2: TINY_FN(tiny_rows)(2, NV, k, a + i * rsa, rsa, csa, bp, c + i * ldc, ldc, n, st, i); break; \
      case 1: TINY_FN(tiny_rows)(1, NV, k, a + i * rsa, rsa, csa, bp, c + i * ldc, ldc, n, st, i); break; \
      default: break;                                                                                    \
    }                                                                                                    \
    break;                                                                                               \
  }

static TINY_ATTR void TINY_FN(tiny)(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                    const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st) {
  _Static_assert(KILN_GEMM_TINY_NV == 4, "one case per vector count");
  switch (nv) {
    TINY_CASE(1)
    TINY_CASE(2)
    TINY_CASE(3)
    TINY_CASE(4)
    default: break; /* nv is 1..KILN_GEMM_TINY_NV */
  }
}

#undef TINY_CASE
#undef TVEC
