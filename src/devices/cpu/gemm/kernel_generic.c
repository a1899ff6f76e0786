/* kernel_generic.c — portable C micro-kernel (4 x 16) and small-M kernels:
 * the fallback for CPUs without AVX2, and the reference the faster kernels
 * are tested against. */
#include "devices/cpu/gemm/gemm_internal.h"

#define MR 4
#define NR 16
#define CHUNK 256 /* columns per pass of the small-M kernels */

static inline float finish(float acc, float *c, const kiln_gemm_store *st, int64_t i, int64_t j) {
  float v = st->alpha * acc;
  if (st->bias_row) v += st->bias_row[i];
  if (st->bias_col) v += st->bias_col[j];
  if (st->beta != 0.0f) v += st->beta * *c;
  return v;
}

static void micro_4x16(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *bp, int64_t bs, float *c,
                       int64_t ldc, int mr, int nr, const kiln_gemm_store *st) {
  float acc[MR][NR] = {{0}};
  for (int64_t p = 0; p < kc; p++) {
    const float *b = bp + p * bs;
    float av[MR] = {0};
    for (int i = 0; i < mr; i++) av[i] = a[i * rsa + p * csa];
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++) acc[i][j] += av[i] * b[j];
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) c[i * ldc + j] = finish(acc[i][j], &c[i * ldc + j], st, i, j);
}

void kiln_gemm_generic_small_rows(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *b,
                       int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st) {
  float acc[KILN_GEMM_SMALL_M][CHUNK];
  for (int64_t j0 = 0; j0 < nb; j0 += CHUNK) {
    int64_t w = nb - j0 < CHUNK ? nb - j0 : CHUNK;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j++) acc[i][j] = 0.0f;
    for (int64_t p = 0; p < k; p++) {
      const float *brow = b + p * ldb + j0;
      for (int64_t i = 0; i < m; i++) {
        float av = a[i * rsa + p * csa];
        for (int64_t j = 0; j < w; j++) acc[i][j] += av * brow[j];
      }
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j++) {
        float *cp = &c[i * ldc + j0 + j];
        *cp = finish(acc[i][j], cp, st, i, j0 + j);
      }
  }
}

void kiln_gemm_generic_small_packed16(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *bp,
                         int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st) {
  for (int64_t j0 = 0; j0 < nb; j0 += NR) {
    int64_t w = nb - j0 < NR ? nb - j0 : NR;
    const float *strip = bp + (j0 / NR) * k * NR;
    float acc[KILN_GEMM_SMALL_M][NR] = {{0}};
    for (int64_t p = 0; p < k; p++)
      for (int64_t i = 0; i < m; i++) {
        float av = a[i * rsa + p * csa];
        for (int j = 0; j < NR; j++) acc[i][j] += av * strip[p * NR + j];
      }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j++) {
        float *cp = &c[i * ldc + j0 + j];
        *cp = finish(acc[i][j], cp, st, i, j0 + j);
      }
  }
}

void kiln_gemm_generic_small_dots(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *b,
                       int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nb; j++) {
      const float *brow = b + j * ldb;
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p++) acc += a[i * rsa + p * csa] * brow[p];
      float *cp = &c[i * ldc + j];
      *cp = finish(acc, cp, st, i, j);
    }
}

const kiln_gemm_kernel kiln_gemm_kernel_generic = {
    .name = "generic",
    .id = 1,
    .mr = MR,
    .nr = NR,
    .micro = micro_4x16,
    .small_rows = kiln_gemm_generic_small_rows,
    .small_packed = kiln_gemm_generic_small_packed16,
    .small_dots = kiln_gemm_generic_small_dots,
    .pack_a = kiln_gemm_pack_a,
    .pack_b = kiln_gemm_pack_b_block,
};
