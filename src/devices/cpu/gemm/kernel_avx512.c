/* kernel_avx512.c — the AVX-512 kernel set: the 14 x 32 micro-kernel (28
 * zmm accumulators, two B vectors per k step, A broadcast; any 1..14 rows,
 * A packed or in place, B packed or in place and optionally copied while
 * read), the small-M streaming kernels, and packing by in-register 16 x 16
 * transposes. Compiled with a target attribute so the library needs no
 * -march flag; the driver only calls these on CPUs with AVX-512F/BW/VL/DQ. */
#include "devices/cpu/gemm/gemm_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define MR 14
#define NR 32

static KILN_AVX512 inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* c = alpha * acc + beta * c + bias for one row of up to 32 columns. */
static KILN_AVX512 inline void store_row(float *c, __m512 acc0, __m512 acc1, int nr, const kiln_gemm_store *st,
                                         int i) {
  __m512 alpha = _mm512_set1_ps(st->alpha);
  __mmask16 m0 = tail_mask(nr), m1 = tail_mask(nr - 16);
  acc0 = _mm512_mul_ps(acc0, alpha);
  acc1 = _mm512_mul_ps(acc1, alpha);
  if (st->bias_row) {
    __m512 br = _mm512_set1_ps(st->bias_row[i]);
    acc0 = _mm512_add_ps(acc0, br);
    acc1 = _mm512_add_ps(acc1, br);
  }
  if (st->bias_col) {
    acc0 = _mm512_add_ps(acc0, _mm512_maskz_loadu_ps(m0, st->bias_col));
    acc1 = _mm512_add_ps(acc1, _mm512_maskz_loadu_ps(m1, st->bias_col + 16));
  }
  if (st->beta != 0.0f) {
    __m512 beta = _mm512_set1_ps(st->beta);
    acc0 = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m0, c), acc0);
    acc1 = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m1, c + 16), acc1);
  }
  _mm512_mask_storeu_ps(c, m0, acc0);
  _mm512_mask_storeu_ps(c + 16, m1, acc1);
}

#define ALWAYS_INLINE __attribute__((always_inline))
#define KILN_PF_A 16 /* k steps ahead to prefetch packed A */
#define KILN_PF_B 16 /* k steps ahead to prefetch packed B in the small-M path */

/* The register tile, for R = 1..14 rows (R is a constant after inlining, so
 * the accumulators become registers). A's element (i, p) is at
 * a[i*rsa + p*csa] with either rsa == 1 (packed panel: csa = MR, or A
 * transposed in place: csa = lda) or csa == 1 (A row-major in place: the
 * rows are reached from five base pointers and the scaled offsets 1, 2, 4
 * and 8 * lda). B's row p of the micro-panel is at bp + p*bs: bs = NR
 * when packed, ldb when read in place (then nr == NR). */
static KILN_AVX512 inline ALWAYS_INLINE void tile(const int R, const int COPY, int64_t kc, const float *a,
                                                 int64_t rsa, int64_t csa, const float *bp, int64_t bs, float *c,
                                                 int64_t ldc, int nr, const kiln_gemm_store *st) {
  float *bc = COPY ? st->b_copy : NULL;
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 14
  for (int i = 0; i < R; i++) acc0[i] = acc1[i] = _mm512_setzero_ps();
#define FMA_ROW(i, expr)                             \
  do {                                               \
    if ((i) < R) {                                   \
      __m512 av = _mm512_set1_ps(expr);              \
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);    \
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);    \
    }                                                \
  } while (0)
  if (rsa == 1) {
    int64_t p = 0;
#define STEP_PACKED(o)                                                                   \
    do {                                                                                 \
      __m512 b0 = _mm512_loadu_ps(bp + (o) * bs), b1 = _mm512_loadu_ps(bp + (o) * bs + 16); \
      if (COPY) {                                                                        \
        _mm512_store_ps(bc + (o) * NR, b0);                                              \
        _mm512_store_ps(bc + (o) * NR + 16, b1);                                         \
      }                                                                                  \
      const float *a_ = a + (o) * csa;                                                   \
      FMA_ROW(0, a_[0]); FMA_ROW(1, a_[1]); FMA_ROW(2, a_[2]); FMA_ROW(3, a_[3]);        \
      FMA_ROW(4, a_[4]); FMA_ROW(5, a_[5]); FMA_ROW(6, a_[6]); FMA_ROW(7, a_[7]);        \
      FMA_ROW(8, a_[8]); FMA_ROW(9, a_[9]); FMA_ROW(10, a_[10]); FMA_ROW(11, a_[11]);    \
      FMA_ROW(12, a_[12]); FMA_ROW(13, a_[13]);                                          \
    } while (0)
    /* Prefetch C's rows into L2 during the first steps (they are needed at
     * the end; L1 would lose them, and B, to set conflicts when C's rows
     * are a power of two apart) and the packed A a few steps ahead. */
    int64_t pc = 0;
    for (; p + 4 <= kc; p += 4) {
      if (pc < R) {
        _mm_prefetch((const char *)(c + pc * ldc), _MM_HINT_T1);
        _mm_prefetch((const char *)(c + pc * ldc + 31), _MM_HINT_T1);
        pc++;
      }
      _mm_prefetch((const char *)(a + KILN_PF_A * csa), _MM_HINT_T0);
      _mm_prefetch((const char *)(a + KILN_PF_A * csa + 2 * csa), _MM_HINT_T0);
      STEP_PACKED(0);
      STEP_PACKED(1);
      STEP_PACKED(2);
      STEP_PACKED(3);
      a += 4 * csa;
      bp += 4 * bs;
      if (COPY) bc += 4 * NR;
    }
    for (; p < kc; p++) {
      STEP_PACKED(0);
      a += csa;
      bp += bs;
      if (COPY) bc += NR;
    }
#undef STEP_PACKED
  } else {
    const int64_t l = rsa;
    const float *r0 = a, *r3 = a + 3 * l, *r6 = a + 6 * l, *r9 = a + 9 * l, *r12 = a + 12 * l;
    int64_t p = 0;
#define STEP_ROWS(o)                                                                     \
    do {                                                                                 \
      __m512 b0 = _mm512_loadu_ps(bp + (o) * bs), b1 = _mm512_loadu_ps(bp + (o) * bs + 16); \
      if (COPY) {                                                                        \
        _mm512_store_ps(bc + (o) * NR, b0);                                              \
        _mm512_store_ps(bc + (o) * NR + 16, b1);                                         \
      }                                                                                  \
      FMA_ROW(0, r0[o]); FMA_ROW(1, r0[l + o]); FMA_ROW(2, r0[2 * l + o]);                \
      FMA_ROW(3, r3[o]); FMA_ROW(4, r0[4 * l + o]); FMA_ROW(5, r3[2 * l + o]);            \
      FMA_ROW(6, r6[o]); FMA_ROW(7, r3[4 * l + o]); FMA_ROW(8, r0[8 * l + o]);            \
      FMA_ROW(9, r9[o]); FMA_ROW(10, r6[4 * l + o]); FMA_ROW(11, r3[8 * l + o]);          \
      FMA_ROW(12, r12[o]); FMA_ROW(13, r9[4 * l + o]);                                    \
    } while (0)
    int64_t pc = 0;
    for (; p + 4 <= kc; p += 4) {
      if (pc < R) {
        _mm_prefetch((const char *)(c + pc * ldc), _MM_HINT_T1);
        _mm_prefetch((const char *)(c + pc * ldc + 31), _MM_HINT_T1);
        pc++;
      }
      STEP_ROWS(0);
      STEP_ROWS(1);
      STEP_ROWS(2);
      STEP_ROWS(3);
      r0 += 4, r3 += 4, r6 += 4, r9 += 4, r12 += 4;
      bp += 4 * bs;
      if (COPY) bc += 4 * NR;
    }
    for (; p < kc; p++) {
      STEP_ROWS(0);
      r0++, r3++, r6++, r9++, r12++;
      bp += bs;
      if (COPY) bc += NR;
    }
#undef STEP_ROWS
  }
#undef FMA_ROW
#pragma GCC unroll 14
  for (int i = 0; i < R; i++) store_row(c + i * ldc, acc0[i], acc1[i], nr, st, i);
}

/* The hot case in assembly: all 14 rows, A packed (csa == MR), B packed
 * (bs == NR), no copy of B. Written out because compilers spill
 * accumulators of the C version of this loop (28 accumulators, two B
 * vectors and the broadcast need all 32 zmm registers). zmm0..27 hold the
 * tile (row i in zmm 2i, 2i+1), zmm28/29 the B row, zmm30/31 alternate as
 * the broadcast A value. Eight k steps per iteration, each prefetching B
 * 8 steps ahead; seven prefetches per iteration cover the 448 bytes of A it
 * consumes, 18 steps ahead; the first 14 iterations prefetch one row of C
 * each into L2. The sums go to out (14 x 32, rows 32 floats apart). */
#define ASM_ROW(J, I, T, Z0, Z1)                                                \
  "vbroadcastss 56*" #J "+4*" #I "(%[a]), %%zmm" #T "\n\t"                      \
  "vfmadd231ps %%zmm28, %%zmm" #T ", %%zmm" #Z0 "\n\t"                          \
  "vfmadd231ps %%zmm29, %%zmm" #T ", %%zmm" #Z1 "\n\t"
#define ASM_STEP(J)                                                             \
  "vmovups 128*" #J "(%[b]), %%zmm28\n\t"                                       \
  "vmovups 128*" #J "+64(%[b]), %%zmm29\n\t"                                    \
  ASM_ROW(J, 0, 30, 0, 1) ASM_ROW(J, 1, 31, 2, 3) ASM_ROW(J, 2, 30, 4, 5)        \
  ASM_ROW(J, 3, 31, 6, 7) ASM_ROW(J, 4, 30, 8, 9) ASM_ROW(J, 5, 31, 10, 11)      \
  ASM_ROW(J, 6, 30, 12, 13) ASM_ROW(J, 7, 31, 14, 15) ASM_ROW(J, 8, 30, 16, 17)  \
  ASM_ROW(J, 9, 31, 18, 19) ASM_ROW(J, 10, 30, 20, 21)                           \
  ASM_ROW(J, 11, 31, 22, 23) ASM_ROW(J, 12, 30, 24, 25)                          \
  ASM_ROW(J, 13, 31, 26, 27)
#ifndef ASM_PFB_DIST
#define ASM_PFB_DIST "1024"
#endif
#ifndef ASM_PFA_DIST
#define ASM_PFA_DIST "1024"
#endif
#define ASM_PF_B(J) "prefetcht0 " ASM_PFB_DIST "+128*" #J "(%[b])\n\tprefetcht0 " ASM_PFB_DIST "+128*" #J "+64(%[b])\n\t"
#define ASM_PF_A(J) "prefetcht0 " ASM_PFA_DIST "+64*" #J "(%[a])\n\t"
#define ASM_ZERO(Z) "vpxord %%zmm" #Z ", %%zmm" #Z ", %%zmm" #Z "\n\t"
#define ASM_OUT(Z) "vmovups %%zmm" #Z ", 64*" #Z "(%[out])\n\t"

static KILN_AVX512 void tile14_packed(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                      float *out) {
  int64_t n8 = kc / 8, rem = kc % 8, crows = MR, ldcb = ldc * (int64_t)sizeof(float);
  __asm__ volatile(
      ASM_ZERO(0) ASM_ZERO(1) ASM_ZERO(2) ASM_ZERO(3) ASM_ZERO(4) ASM_ZERO(5) ASM_ZERO(6) ASM_ZERO(7)
      ASM_ZERO(8) ASM_ZERO(9) ASM_ZERO(10) ASM_ZERO(11) ASM_ZERO(12) ASM_ZERO(13) ASM_ZERO(14)
      ASM_ZERO(15) ASM_ZERO(16) ASM_ZERO(17) ASM_ZERO(18) ASM_ZERO(19) ASM_ZERO(20) ASM_ZERO(21)
      ASM_ZERO(22) ASM_ZERO(23) ASM_ZERO(24) ASM_ZERO(25) ASM_ZERO(26) ASM_ZERO(27)
      "test %[n8], %[n8]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      "test %[crows], %[crows]\n\t"
      "jz 5f\n\t"
      "prefetcht1 (%[c])\n\t"
      "prefetcht1 124(%[c])\n\t"
      "add %[ldcb], %[c]\n\t"
      "dec %[crows]\n\t"
      "5:\n\t"
      ASM_PF_B(0) ASM_PF_A(0) ASM_STEP(0)
      ASM_PF_B(1) ASM_PF_A(1) ASM_STEP(1)
      ASM_PF_B(2) ASM_PF_A(2) ASM_STEP(2)
      ASM_PF_B(3) ASM_PF_A(3) ASM_STEP(3)
      ASM_PF_B(4) ASM_PF_A(4) ASM_STEP(4)
      ASM_PF_B(5) ASM_PF_A(5) ASM_STEP(5)
      ASM_PF_B(6) ASM_PF_A(6) ASM_STEP(6)
      ASM_PF_B(7) ASM_STEP(7)
      "add $448, %[a]\n\t"
      "add $1024, %[b]\n\t"
      "dec %[n8]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "test %[rem], %[rem]\n\t"
      "jz 4f\n\t"
      "3:\n\t"
      ASM_STEP(0)
      "add $56, %[a]\n\t"
      "add $128, %[b]\n\t"
      "dec %[rem]\n\t"
      "jnz 3b\n\t"
      "4:\n\t"
      ASM_OUT(0) ASM_OUT(1) ASM_OUT(2) ASM_OUT(3) ASM_OUT(4) ASM_OUT(5) ASM_OUT(6) ASM_OUT(7)
      ASM_OUT(8) ASM_OUT(9) ASM_OUT(10) ASM_OUT(11) ASM_OUT(12) ASM_OUT(13) ASM_OUT(14) ASM_OUT(15)
      ASM_OUT(16) ASM_OUT(17) ASM_OUT(18) ASM_OUT(19) ASM_OUT(20) ASM_OUT(21) ASM_OUT(22) ASM_OUT(23)
      ASM_OUT(24) ASM_OUT(25) ASM_OUT(26) ASM_OUT(27)
      : [a] "+r"(a), [b] "+r"(b), [c] "+r"(c), [n8] "+r"(n8), [rem] "+r"(rem), [crows] "+r"(crows)
      : [ldcb] "r"(ldcb), [out] "r"(out)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
        "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}
#undef ASM_ROW
#undef ASM_STEP
#undef ASM_PF_B
#undef ASM_PF_A
#undef ASM_ZERO
#undef ASM_OUT

static KILN_AVX512 void micro(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *bp, int64_t bs,
                              float *c, int64_t ldc, int mr, int nr, const kiln_gemm_store *st) {
  /* The first panel of A over a micro-panel of B read in place also packs
   * it for the panels after it (see kiln_gemm_store.b_copy). */
  if (st->b_copy && mr == MR) {
    tile(MR, 1, kc, a, rsa, csa, bp, bs, c, ldc, nr, st);
    return;
  }
  if (mr == MR && rsa == 1 && csa == MR && bs == NR) {
    float sums[MR * NR] __attribute__((aligned(64)));
    tile14_packed(kc, a, bp, c, ldc, sums);
    for (int i = 0; i < MR; i++) store_row(c + i * ldc, _mm512_load_ps(sums + i * NR), _mm512_load_ps(sums + i * NR + 16), nr, st, i);
    return;
  }
  switch (mr) {
  case 14: tile(14, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 13: tile(13, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 12: tile(12, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 11: tile(11, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 10: tile(10, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 9: tile(9, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 8: tile(8, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 7: tile(7, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 6: tile(6, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 5: tile(5, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 4: tile(4, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 3: tile(3, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  case 2: tile(2, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  default: tile(1, 0, kc, a, rsa, csa, bp, bs, c, ldc, nr, st); break;
  }
}

/* ---- small M (m <= 4): B is streamed once, A broadcast in place -------- */

#define CHUNK 1024 /* columns per pass of small_rows: m x 4 KiB of sums in L1 */

static KILN_AVX512 inline __m512 finish_vec(__m512 acc, float *c, __mmask16 mask, const kiln_gemm_store *st,
                                             int64_t i, int64_t j) {
  acc = _mm512_mul_ps(acc, _mm512_set1_ps(st->alpha));
  if (st->bias_row) acc = _mm512_add_ps(acc, _mm512_set1_ps(st->bias_row[i]));
  if (st->bias_col) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, st->bias_col + j));
  if (st->beta != 0.0f) acc = _mm512_fmadd_ps(_mm512_set1_ps(st->beta), _mm512_maskz_loadu_ps(mask, c), acc);
  return acc;
}

/* B row-major: four rows of B per pass over a chunk of columns; the sums
 * live in an L1-resident buffer. */
static KILN_AVX512 inline ALWAYS_INLINE void rows_m(const int m, int64_t nb, int64_t k, const float *a, int64_t rsa,
                                                   const float *b, int64_t ldb, float *c, int64_t ldc,
                                                   const kiln_gemm_store *st) {
  float acc[KILN_GEMM_SMALL_M * CHUNK] __attribute__((aligned(64)));
  for (int64_t j0 = 0; j0 < nb; j0 += CHUNK) {
    int64_t w = nb - j0 < CHUNK ? nb - j0 : CHUNK;
    int64_t wv = w / 16 * 16;
    __mmask16 tail = tail_mask(w - wv);
    for (int i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j += 16) _mm512_store_ps(acc + i * CHUNK + j, _mm512_setzero_ps());
    const float *bc = b + j0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      __m512 a0[KILN_GEMM_SMALL_M], a1[KILN_GEMM_SMALL_M], a2[KILN_GEMM_SMALL_M], a3[KILN_GEMM_SMALL_M];
      for (int i = 0; i < m; i++) {
        a0[i] = _mm512_set1_ps(a[i * rsa + p]);
        a1[i] = _mm512_set1_ps(a[i * rsa + p + 1]);
        a2[i] = _mm512_set1_ps(a[i * rsa + p + 2]);
        a3[i] = _mm512_set1_ps(a[i * rsa + p + 3]);
      }
      const float *b0 = bc + p * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
      int64_t j = 0;
      for (; j < wv; j += 16) {
        __m512 v0 = _mm512_loadu_ps(b0 + j), v1 = _mm512_loadu_ps(b1 + j);
        __m512 v2 = _mm512_loadu_ps(b2 + j), v3 = _mm512_loadu_ps(b3 + j);
        for (int i = 0; i < m; i++) {
          float *ap = acc + i * CHUNK + j;
          __m512 s = _mm512_fmadd_ps(a0[i], v0, _mm512_load_ps(ap));
          s = _mm512_fmadd_ps(a1[i], v1, s);
          s = _mm512_fmadd_ps(a2[i], v2, s);
          _mm512_store_ps(ap, _mm512_fmadd_ps(a3[i], v3, s));
        }
      }
      if (j < w) {
        __m512 v0 = _mm512_maskz_loadu_ps(tail, b0 + j), v1 = _mm512_maskz_loadu_ps(tail, b1 + j);
        __m512 v2 = _mm512_maskz_loadu_ps(tail, b2 + j), v3 = _mm512_maskz_loadu_ps(tail, b3 + j);
        for (int i = 0; i < m; i++) {
          float *ap = acc + i * CHUNK + j;
          __m512 s = _mm512_fmadd_ps(a0[i], v0, _mm512_load_ps(ap));
          s = _mm512_fmadd_ps(a1[i], v1, s);
          s = _mm512_fmadd_ps(a2[i], v2, s);
          _mm512_store_ps(ap, _mm512_fmadd_ps(a3[i], v3, s));
        }
      }
    }
    for (; p < k; p++) {
      const float *b0 = bc + p * ldb;
      for (int64_t j = 0; j < w; j += 16) {
        __m512 v0 = _mm512_maskz_loadu_ps(tail_mask(w - j), b0 + j);
        for (int i = 0; i < m; i++) {
          float *ap = acc + i * CHUNK + j;
          _mm512_store_ps(ap, _mm512_fmadd_ps(_mm512_set1_ps(a[i * rsa + p]), v0, _mm512_load_ps(ap)));
        }
      }
    }
    for (int i = 0; i < m; i++)
      for (int64_t j = 0; j < w; j += 16) {
        __mmask16 mk = tail_mask(w - j);
        float *cp = c + i * ldc + j0 + j;
        _mm512_mask_storeu_ps(cp, mk, finish_vec(_mm512_load_ps(acc + i * CHUNK + j), cp, mk, st, i, j0 + j));
      }
  }
}

static KILN_AVX512 void small_rows(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                   const float *b, int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st) {
  switch (m) {
  case 1: rows_m(1, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  case 2: rows_m(2, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  case 3: rows_m(3, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  default: rows_m(4, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  }
}

/* Packed B: two 32-wide strips at a time (two sequential streams), sums in
 * registers. */
static KILN_AVX512 inline ALWAYS_INLINE void packed_m(const int m, int64_t nb, int64_t k, const float *a,
                                                     int64_t rsa, const float *bp, float *c, int64_t ldc,
                                                     const kiln_gemm_store *st) {
  for (int64_t j0 = 0; j0 < nb; j0 += 2 * NR) {
    const float *s0 = bp + (j0 / NR) * k * NR;
    const bool two = j0 + NR < nb;
    const float *s1 = two ? s0 + k * NR : s0; /* re-reads strip 0 when there is no second */
    __m512 acc[KILN_GEMM_SMALL_M][4];
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
      _mm_prefetch((const char *)(s0 + (p + KILN_PF_B) * NR), _MM_HINT_T0);
      _mm_prefetch((const char *)(s0 + (p + KILN_PF_B) * NR + 16), _MM_HINT_T0);
      _mm_prefetch((const char *)(s1 + (p + KILN_PF_B) * NR), _MM_HINT_T0);
      _mm_prefetch((const char *)(s1 + (p + KILN_PF_B) * NR + 16), _MM_HINT_T0);
      __m512 b0 = _mm512_load_ps(s0 + p * NR), b1 = _mm512_load_ps(s0 + p * NR + 16);
      __m512 b2 = _mm512_load_ps(s1 + p * NR), b3 = _mm512_load_ps(s1 + p * NR + 16);
      for (int i = 0; i < m; i++) {
        __m512 x = _mm512_set1_ps(a[i * rsa + p]);
        acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        acc[i][2] = _mm512_fmadd_ps(x, b2, acc[i][2]);
        acc[i][3] = _mm512_fmadd_ps(x, b3, acc[i][3]);
      }
    }
    int64_t w = nb - j0 < 2 * NR ? nb - j0 : 2 * NR;
    for (int i = 0; i < m; i++)
      for (int v = 0; v < 4 && 16 * v < w; v++) {
        __mmask16 mk = tail_mask(w - 16 * v);
        float *cp = c + i * ldc + j0 + 16 * v;
        _mm512_mask_storeu_ps(cp, mk, finish_vec(acc[i][v], cp, mk, st, i, j0 + 16 * v));
      }
  }
}

static KILN_AVX512 void small_packed(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                     const float *bp, int64_t ldb, float *c, int64_t ldc,
                                     const kiln_gemm_store *st) {
  switch (m) {
  case 1: packed_m(1, nb, k, a, rsa, bp, c, ldc, st); break;
  case 2: packed_m(2, nb, k, a, rsa, bp, c, ldc, st); break;
  case 3: packed_m(3, nb, k, a, rsa, bp, c, ldc, st); break;
  default: packed_m(4, nb, k, a, rsa, bp, c, ldc, st); break;
  }
}

/* B stored N x K: C[i][j] is a dot product of two contiguous rows; four
 * rows of B at a time, reduced horizontally at the end. */
static KILN_AVX512 inline ALWAYS_INLINE void dots_mj(const int m, const int nj, int64_t j, int64_t k,
                                                    const float *a, int64_t rsa, const float *b, int64_t ldb,
                                                    float *c, int64_t ldc, const kiln_gemm_store *st) {
  __m512 acc[KILN_GEMM_SMALL_M][4];
  for (int i = 0; i < m; i++)
    for (int q = 0; q < nj; q++) acc[i][q] = _mm512_setzero_ps();
  const float *br = b + j * ldb;
  int64_t p = 0;
  for (; p < k; p += 16) {
    __mmask16 mk = tail_mask(k - p);
    __m512 bv[4], av[KILN_GEMM_SMALL_M];
    for (int q = 0; q < nj; q++) bv[q] = _mm512_maskz_loadu_ps(mk, br + q * ldb + p);
    for (int i = 0; i < m; i++) av[i] = _mm512_maskz_loadu_ps(mk, a + i * rsa + p);
    for (int i = 0; i < m; i++)
      for (int q = 0; q < nj; q++) acc[i][q] = _mm512_fmadd_ps(av[i], bv[q], acc[i][q]);
  }
  for (int i = 0; i < m; i++)
    for (int q = 0; q < nj; q++) {
      float v = st->alpha * _mm512_reduce_add_ps(acc[i][q]);
      float *cp = c + i * ldc + j + q;
      if (st->bias_row) v += st->bias_row[i];
      if (st->bias_col) v += st->bias_col[j + q];
      if (st->beta != 0.0f) v += st->beta * *cp;
      *cp = v;
    }
}

static KILN_AVX512 inline ALWAYS_INLINE void dots_m(const int m, int64_t nb, int64_t k, const float *a, int64_t rsa,
                                                   const float *b, int64_t ldb, float *c, int64_t ldc,
                                                   const kiln_gemm_store *st) {
  int64_t j = 0;
  for (; j + 4 <= nb; j += 4) dots_mj(m, 4, j, k, a, rsa, b, ldb, c, ldc, st);
  for (; j < nb; j++) dots_mj(m, 1, j, k, a, rsa, b, ldb, c, ldc, st);
}

static KILN_AVX512 void small_dots(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                   const float *b, int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st) {
  switch (m) {
  case 1: dots_m(1, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  case 2: dots_m(2, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  case 3: dots_m(3, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  default: dots_m(4, nb, k, a, rsa, b, ldb, c, ldc, st); break;
  }
}

/* ---- packing ------------------------------------------------------------ */

/* In-register transpose of a 16 x 16 block: o[j][i] = r[i][j]. */
static KILN_AVX512 inline __attribute__((always_inline)) void transpose16(const __m512 r[16], __m512 o[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; g++) {
    __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  /* u[4g+q], 128-bit lane L, holds column 4L+q of rows 4g..4g+3. */
  for (int q = 0; q < 4; q++) {
    __m512 w0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88), w1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
    __m512 w2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    __m512 w3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
    o[0 + q] = _mm512_shuffle_f32x4(w0, w2, 0x88);
    o[8 + q] = _mm512_shuffle_f32x4(w0, w2, 0xdd);
    o[4 + q] = _mm512_shuffle_f32x4(w1, w3, 0x88);
    o[12 + q] = _mm512_shuffle_f32x4(w1, w3, 0xdd);
  }
}

static KILN_AVX512 void pack_a(bool trans_a, const float *a, int64_t lda, int64_t i0, int64_t mb, int64_t p0,
                               int64_t kb, int mr, float *out) {
  const __mmask16 row_mask = (__mmask16)((1u << MR) - 1u);
  for (int64_t q = 0; q < mb; q += MR) {
    int rows = (int)(mb - q < MR ? mb - q : MR);
    float *dst = out + q * kb;
    if (trans_a) {
      /* Each k step is a contiguous run of rows. */
      const float *src = a + p0 * lda + i0 + q;
      __mmask16 m = tail_mask(rows);
      for (int64_t p = 0; p < kb; p++)
        _mm512_mask_storeu_ps(dst + p * MR, row_mask, _mm512_maskz_loadu_ps(m, src + p * lda));
      continue;
    }
    const float *src = a + (i0 + q) * lda + p0;
    for (int64_t p = 0; p < kb; p += 16) {
      int w = (int)(kb - p < 16 ? kb - p : 16);
      __mmask16 m = tail_mask(w);
      __m512 r[16], o[16];
      for (int i = 0; i < 16; i++) r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + i * lda + p) : _mm512_setzero_ps();
      transpose16(r, o);
      if (w == 16) {
        for (int c = 0; c < 16; c++) _mm512_mask_storeu_ps(dst + (p + c) * MR, row_mask, o[c]);
      } else {
        for (int c = 0; c < w; c++) _mm512_mask_storeu_ps(dst + (p + c) * MR, row_mask, o[c]);
      }
    }
  }
}

static KILN_AVX512 void pack_b(bool trans_b, const float *b, int64_t ldb, int64_t p0, int64_t kb, int64_t j0,
                               int64_t nb, int nr, float *out, int64_t strip_stride) {
  if (!trans_b) {
    /* Row by row, so that B is read sequentially (one long run per row
     * instead of a 128-byte piece of every row per strip). */
    int64_t full = nb / NR, rest = nb - full * NR;
    __mmask16 m0 = tail_mask(rest), m1 = tail_mask(rest - 16);
    for (int64_t p = 0; p < kb; p++) {
      const float *src = b + (p0 + p) * ldb + j0;
      float *dst = out + p * NR;
      for (int64_t s = 0; s < full; s++) {
        _mm512_store_ps(dst + s * strip_stride, _mm512_loadu_ps(src + s * NR));
        _mm512_store_ps(dst + s * strip_stride + 16, _mm512_loadu_ps(src + s * NR + 16));
      }
      if (rest) {
        _mm512_store_ps(dst + full * strip_stride, _mm512_maskz_loadu_ps(m0, src + full * NR));
        _mm512_store_ps(dst + full * strip_stride + 16, _mm512_maskz_loadu_ps(m1, src + full * NR + 16));
      }
    }
    return;
  }
  for (int64_t s = 0; s * NR < nb; s++) {
    int64_t j = j0 + s * NR;
    int cols = (int)(nb - s * NR < NR ? nb - s * NR : NR);
    float *dst = out + s * strip_stride;
    /* Columns of op(B) are rows of b: transpose 16 x 16 blocks. */
    const float *src = b + j * ldb + p0;
    for (int64_t p = 0; p < kb; p += 16) {
      int w = (int)(kb - p < 16 ? kb - p : 16);
      __mmask16 m = tail_mask(w);
      for (int half = 0; half < 2; half++) {
        __m512 r[16], o[16];
        for (int i = 0; i < 16; i++) {
          int c = half * 16 + i;
          r[i] = c < cols ? _mm512_maskz_loadu_ps(m, src + c * ldb + p) : _mm512_setzero_ps();
        }
        transpose16(r, o);
        for (int c = 0; c < w; c++) _mm512_store_ps(dst + (p + c) * NR + half * 16, o[c]);
      }
    }
  }
}

const kiln_gemm_kernel kiln_gemm_kernel_avx512 = {
    .pack_a = pack_a,
    .pack_b = pack_b,
    .name = "avx512",
    .id = 3,
    .mr = MR,
    .nr = NR,
    .micro = micro,
    .copies_b = true,
    .small_rows = small_rows,
    .small_packed = small_packed,
    .small_dots = small_dots,
    .tiny = kiln_gemm_tiny_avx512,
    .tiny_w = 16,
};

#else
/* Not an x86-64 GCC/clang build: no AVX-512 kernel (a NULL name tells the driver). */
const kiln_gemm_kernel kiln_gemm_kernel_avx512 = {0};
#endif
