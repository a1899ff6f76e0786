/* gemm_pack.c — copies blocks of A and B into the micro-kernel's panel
 * layouts (see gemm_internal.h), zero-padding partial panels so the kernel
 * never needs a bounds check inside its k loop. */
#include "devices/cpu/gemm/gemm_internal.h"

#include <string.h>

void kiln_gemm_pack_a(bool trans_a, const float *a, int64_t lda, int64_t i0, int64_t mb, int64_t p0, int64_t kb,
                      int mr, float *out) {
  for (int64_t q = 0; q < mb; q += mr) {
    int64_t rows = mb - q < mr ? mb - q : mr;
    float *dst = out + q * kb;
    if (trans_a) {
      /* op(A)[i][p] = a[p*lda + i]: each step is a contiguous run of rows. */
      const float *src = a + p0 * lda + i0 + q;
      for (int64_t p = 0; p < kb; p++) {
        float *d = dst + p * mr;
        const float *s = src + p * lda;
        int64_t r = 0;
        for (; r < rows; r++) d[r] = s[r];
        for (; r < mr; r++) d[r] = 0.0f;
      }
    } else {
      /* op(A)[i][p] = a[i*lda + p]: gather one value from each row, in
       * chunks of 8 steps so every row is read a cache line at a time. */
      const float *src = a + (i0 + q) * lda + p0;
      int64_t p = 0;
      for (; p + 8 <= kb; p += 8) {
        for (int64_t r = 0; r < rows; r++) {
          const float *s = src + r * lda + p;
          float *d = dst + p * mr + r;
          d[0 * mr] = s[0];
          d[1 * mr] = s[1];
          d[2 * mr] = s[2];
          d[3 * mr] = s[3];
          d[4 * mr] = s[4];
          d[5 * mr] = s[5];
          d[6 * mr] = s[6];
          d[7 * mr] = s[7];
        }
        for (int64_t r = rows; r < mr; r++)
          for (int u = 0; u < 8; u++) dst[(p + u) * mr + r] = 0.0f;
      }
      for (; p < kb; p++) {
        int64_t r = 0;
        for (; r < rows; r++) dst[p * mr + r] = src[r * lda + p];
        for (; r < mr; r++) dst[p * mr + r] = 0.0f;
      }
    }
  }
}

void kiln_gemm_pack_b_block(bool trans_b, const float *b, int64_t ldb, int64_t p0, int64_t kb, int64_t j0,
                            int64_t nb, int nr, float *out, int64_t strip_stride) {
  for (int64_t s = 0; s * nr < nb; s++) {
    int64_t j = j0 + s * nr;
    int64_t cols = nb - s * nr < nr ? nb - s * nr : nr;
    float *dst = out + s * strip_stride;
    if (!trans_b) {
      const float *src = b + p0 * ldb + j;
      for (int64_t p = 0; p < kb; p++) {
        float *d = dst + p * nr;
        memcpy(d, src + p * ldb, (size_t)cols * sizeof(float));
        if (cols < nr) memset(d + cols, 0, (size_t)(nr - cols) * sizeof(float));
      }
    } else {
      /* op(B)[p][j] = b[j*ldb + p]: transpose in chunks of 8 steps. */
      const float *src = b + j * ldb + p0;
      int64_t p = 0;
      for (; p + 8 <= kb; p += 8) {
        for (int64_t c = 0; c < cols; c++) {
          const float *s_ = src + c * ldb + p;
          float *d = dst + p * nr + c;
          d[0 * nr] = s_[0];
          d[1 * nr] = s_[1];
          d[2 * nr] = s_[2];
          d[3 * nr] = s_[3];
          d[4 * nr] = s_[4];
          d[5 * nr] = s_[5];
          d[6 * nr] = s_[6];
          d[7 * nr] = s_[7];
        }
        for (int64_t c = cols; c < nr; c++)
          for (int u = 0; u < 8; u++) dst[(p + u) * nr + c] = 0.0f;
      }
      for (; p < kb; p++) {
        int64_t c = 0;
        for (; c < cols; c++) dst[p * nr + c] = src[c * ldb + p];
        for (; c < nr; c++) dst[p * nr + c] = 0.0f;
      }
    }
  }
}
