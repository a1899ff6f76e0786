/* kernel_generic.c — portable micro-kernel (4 x 16) and small-M kernels:
 * the fallback for CPUs without AVX2 (and for other architectures), and a
 * second opinion for the faster kernels in tests. Written with GCC/clang
 * vector extensions, which compile to SSE2 on any x86-64 and to NEON on
 * AArch64. */
#include "devices/cpu/gemm/gemm_internal.h"

#define MR 4
#define NR 16

typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));

static inline v4f load4(const float *p) { return *(const v4f *)p; }

static void micro_4x16(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *bp, int64_t bs, float *c,
                       int64_t ldc, int mr, int nr, const kiln_gemm_store *st) {
  v4f acc[MR][NR / 4] = {{{0}}};
  for (int64_t p = 0; p < kc; p++) {
    const float *b = bp + p * bs;
    v4f b0 = load4(b), b1 = load4(b + 4), b2 = load4(b + 8), b3 = load4(b + 12);
    for (int i = 0; i < MR; i++) {
      float x = i < mr ? a[i * rsa + p * csa] : 0.0f; /* rows past mr are not read */
      acc[i][0] += x * b0;
      acc[i][1] += x * b1;
      acc[i][2] += x * b2;
      acc[i][3] += x * b3;
    }
  }
  for (int i = 0; i < mr; i++) {
    float sums[NR];
    __builtin_memcpy(sums, acc[i], sizeof sums);
    for (int j = 0; j < nr; j++) {
      float *cp = &c[i * ldc + j];
      float v = st->alpha * sums[j];
      if (st->bias_row) v += st->bias_row[i];
      if (st->bias_col) v += st->bias_col[j];
      if (st->beta != 0.0f) v += st->beta * *cp;
      *cp = v;
    }
  }
}

/* The small-M kernels, 4 floats per vector, strips of 16 columns. */
#define SMALL_FN(name) kiln_gemm_generic_##name
#define SMALL_ATTR
#define SMALL_W 4
#define SMALL_NR 16
#include "devices/cpu/gemm/gemm_small_impl.h"

const kiln_gemm_kernel kiln_gemm_kernel_generic = {
    .name = "generic",
    .id = 1,
    .mr = MR,
    .nr = NR,
    .micro = micro_4x16,
    .small_rows = kiln_gemm_generic_small_rows,
    .small_packed = kiln_gemm_generic_small_packed,
    .small_dots = kiln_gemm_generic_small_dots,
    .tiny = kiln_gemm_tiny_generic,
    .tiny_w = 4,
    .pack_a = kiln_gemm_pack_a,
    .pack_b = kiln_gemm_pack_b_block,
};
