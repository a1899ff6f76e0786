/* gemm_small_impl.h — the small-M kernels (see kiln_gemm_small_fn in
 * gemm_internal.h) written once with GCC/clang vector extensions and
 * included by kernel files that set:
 *
 *   SMALL_FN(name)  the name of each generated function
 *   SMALL_ATTR      function attributes (e.g. a target ISA), may be empty
 *   SMALL_W         floats per vector (4: SSE/NEON, 8: AVX)
 *   SMALL_NR        columns per strip of the packed B they read (a multiple of SMALL_W)
 *
 * The compiler turns each vector statement into the ISA's instructions; B
 * is streamed once per group of up to KILN_GEMM_SMALL_M rows. */

/* Unaligned, and may alias the floats it is loaded from. */
typedef float SMALL_FN(vec) __attribute__((vector_size(SMALL_W * 4), aligned(4), may_alias));
#define SVEC SMALL_FN(vec)

static SMALL_ATTR inline SVEC SMALL_FN(load)(const float *p) { return *(const SVEC *)p; }

static SMALL_ATTR inline void SMALL_FN(store)(float *p, SVEC v) { *(SVEC *)p = v; }

static SMALL_ATTR inline float SMALL_FN(finish)(float acc, const float *c, const kiln_gemm_store *st, int64_t i,
                                                int64_t j) {
  float v = st->alpha * acc;
  if (st->bias_row) v += st->bias_row[i];
  if (st->bias_col) v += st->bias_col[j];
  if (st->beta != 0.0f) v += st->beta * *c;
  return v;
}

#define SMALL_CHUNK 512 /* columns per pass of small_rows: m x 2 KiB of sums */

/* B row-major: per pass over a chunk of columns, four rows of B update the
 * sums of every row of A. */
static SMALL_ATTR void SMALL_FN(small_rows)(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa,
                                            int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc,
                                            const kiln_gemm_store *st) {
  SVEC acc[KILN_GEMM_SMALL_M][SMALL_CHUNK / SMALL_W];
  for (int64_t j0 = 0; j0 < nb; j0 += SMALL_CHUNK) {
    int64_t w = nb - j0 < SMALL_CHUNK ? nb - j0 : SMALL_CHUNK;
    int64_t nv = w / SMALL_W; /* whole vectors; the rest is done in scalar */
    int64_t wv = nv * SMALL_W;
    float tail[KILN_GEMM_SMALL_M][SMALL_W];
    for (int64_t i = 0; i < m; i++) {
      for (int64_t v = 0; v < nv; v++) acc[i][v] = (SVEC){0};
      for (int64_t j = 0; j < SMALL_W; j++) tail[i][j] = 0.0f;
    }
    const float *bc = b + j0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      const float *b0 = bc + p * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
      for (int64_t i = 0; i < m; i++) {
        const float *ai = a + i * rsa + p * csa;
        float x0 = ai[0], x1 = ai[csa], x2 = ai[2 * csa], x3 = ai[3 * csa];
        SVEC *ac = acc[i];
        for (int64_t v = 0; v < nv; v++) {
          int64_t j = v * SMALL_W;
          ac[v] += x0 * SMALL_FN(load)(b0 + j) + x1 * SMALL_FN(load)(b1 + j) + x2 * SMALL_FN(load)(b2 + j) +
                   x3 * SMALL_FN(load)(b3 + j);
        }
        for (int64_t j = wv; j < w; j++) tail[i][j - wv] += x0 * b0[j] + x1 * b1[j] + x2 * b2[j] + x3 * b3[j];
      }
    }
    for (; p < k; p++) {
      const float *b0 = bc + p * ldb;
      for (int64_t i = 0; i < m; i++) {
        float x0 = a[i * rsa + p * csa];
        for (int64_t v = 0; v < nv; v++) acc[i][v] += x0 * SMALL_FN(load)(b0 + v * SMALL_W);
        for (int64_t j = wv; j < w; j++) tail[i][j - wv] += x0 * b0[j];
      }
    }
    for (int64_t i = 0; i < m; i++) {
      float *ci = c + i * ldc + j0;
      for (int64_t v = 0; v < nv; v++) {
        float s[SMALL_W];
        SMALL_FN(store)(s, acc[i][v]);
        for (int j = 0; j < SMALL_W; j++) ci[v * SMALL_W + j] = SMALL_FN(finish)(s[j], &ci[v * SMALL_W + j], st, i,
                                                                                 j0 + v * SMALL_W + j);
      }
      for (int64_t j = wv; j < w; j++) ci[j] = SMALL_FN(finish)(tail[i][j - wv], &ci[j], st, i, j0 + j);
    }
  }
}

/* Packed B: two strips of SMALL_NR columns at a time (two sequential
 * streams), sums in registers: the body is instantiated per row count M
 * (a constant), or a run-time m left the sums in memory, each update a
 * load and a store (a GEMV ran at a third of its speed). */
static SMALL_ATTR inline __attribute__((always_inline)) void
SMALL_FN(small_packed_rows)(const int M, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa,
                            const float *bp, float *c, int64_t ldc, const kiln_gemm_store *st) {
  enum { V = SMALL_NR / SMALL_W };
  for (int64_t j0 = 0; j0 < nb; j0 += 2 * SMALL_NR) {
    const float *s0 = bp + (j0 / SMALL_NR) * k * SMALL_NR;
    const float *s1 = j0 + SMALL_NR < nb ? s0 + k * SMALL_NR : s0; /* strip 0 again when alone */
    SVEC acc[KILN_GEMM_SMALL_M][2 * V];
#pragma GCC unroll 4
    for (int i = 0; i < M; i++)
#pragma GCC unroll 8
      for (int v = 0; v < 2 * V; v++) acc[i][v] = (SVEC){0};
    for (int64_t p = 0; p < k; p++) {
      SVEC bv[2 * V];
#pragma GCC unroll 4
      for (int v = 0; v < V; v++) {
        bv[v] = SMALL_FN(load)(s0 + p * SMALL_NR + v * SMALL_W);
        bv[V + v] = SMALL_FN(load)(s1 + p * SMALL_NR + v * SMALL_W);
      }
#pragma GCC unroll 4
      for (int i = 0; i < M; i++) {
        float x = a[i * rsa + p * csa];
#pragma GCC unroll 8
        for (int v = 0; v < 2 * V; v++) acc[i][v] += x * bv[v];
      }
    }
    int64_t w = nb - j0 < 2 * SMALL_NR ? nb - j0 : 2 * SMALL_NR;
    for (int i = 0; i < M; i++) {
      float sums[2 * SMALL_NR];
      for (int v = 0; v < 2 * V; v++) SMALL_FN(store)(sums + v * SMALL_W, acc[i][v]);
      float *ci = c + i * ldc + j0;
      for (int64_t j = 0; j < w; j++) ci[j] = SMALL_FN(finish)(sums[j], &ci[j], st, i, j0 + j);
    }
  }
}

static SMALL_ATTR void SMALL_FN(small_packed)(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa,
                                              int64_t csa, const float *bp, int64_t ldb, float *c, int64_t ldc,
                                              const kiln_gemm_store *st) {
  (void)ldb;
  _Static_assert(KILN_GEMM_SMALL_M == 4, "one instantiation per row count");
  switch (m) {
    case 1: SMALL_FN(small_packed_rows)(1, nb, k, a, rsa, csa, bp, c, ldc, st); break;
    case 2: SMALL_FN(small_packed_rows)(2, nb, k, a, rsa, csa, bp, c, ldc, st); break;
    case 3: SMALL_FN(small_packed_rows)(3, nb, k, a, rsa, csa, bp, c, ldc, st); break;
    case 4: SMALL_FN(small_packed_rows)(4, nb, k, a, rsa, csa, bp, c, ldc, st); break;
    default: break; /* m is 1..KILN_GEMM_SMALL_M */
  }
}

/* B stored N x K: dot products of rows, four rows of B at a time. */
static SMALL_ATTR void SMALL_FN(small_dots)(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa,
                                            int64_t csa, const float *b, int64_t ldb, float *c, int64_t ldc,
                                            const kiln_gemm_store *st) {
  int64_t kv = k / SMALL_W * SMALL_W;
  for (int64_t j0 = 0; j0 < nb; j0 += 4) {
    int nj = nb - j0 < 4 ? (int)(nb - j0) : 4;
    for (int64_t i = 0; i < m; i++) {
      const float *ai = a + i * rsa;
      SVEC acc[4] = {{0}};
      float sum[4] = {0};
      if (csa == 1) {
        for (int64_t p = 0; p < kv; p += SMALL_W) {
          SVEC av = SMALL_FN(load)(ai + p);
          for (int q = 0; q < nj; q++) acc[q] += av * SMALL_FN(load)(b + (j0 + q) * ldb + p);
        }
        for (int q = 0; q < nj; q++) {
          float s[SMALL_W];
          SMALL_FN(store)(s, acc[q]);
          for (int j = 0; j < SMALL_W; j++) sum[q] += s[j];
          for (int64_t p = kv; p < k; p++) sum[q] += ai[p] * b[(j0 + q) * ldb + p];
        }
      } else {
        for (int q = 0; q < nj; q++)
          for (int64_t p = 0; p < k; p++) sum[q] += ai[p * csa] * b[(j0 + q) * ldb + p];
      }
      for (int q = 0; q < nj; q++) {
        float *cp = c + i * ldc + j0 + q;
        *cp = SMALL_FN(finish)(sum[q], cp, st, i, j0 + q);
      }
    }
  }
}

#undef SVEC
#undef SMALL_CHUNK
