/* igemm_kernel_x86.c — the integer GEMM's x86 micro-kernels (igemm_internal.h):
 * 6 x 16 int32 accumulators (12 ymm, named), per K pair two B vectors and an A
 * word broadcast per row. AVX2: vpmaddwd + vpaddd; AVX-VNNI and AVX-512
 * VNNI (its 256-bit form, AVX512VL): the same pair product fused into one
 * vpdpwssd. Each is compiled with a target attribute and only called when
 * cpu_features says the CPU has it. They differ from the AVX2 one in the
 * multiply-add alone, which is exact in both (no saturation: vpdpwssd,
 * not vpdpwssds). The quads kernels: AVX2's vpmaddubsw serves B whose
 * values lie within +-64 of its zero point; the VNNI ones' vpdpbusd any
 * int8 B - zero point (first run on an AVX-512 VNNI EPYC, Zen 4). */
#include "devices/cpu/gemm/igemm_internal.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MR IGEMM_MR
#define NR IGEMM_NR

/* The kernel body with MADD(acc, a, b) = acc + pair products of a and b.
 * The accumulators are twelve named variables, not an array: with
 * acc[MR][2] GCC copied every accumulator through another register each K
 * step (24 extra moves per 12 multiply-adds), and the VNNI quads kernel ran
 * at 155-165 GMAC/s in L1 on a Zen 4 against vpdpbusd's 230; named, it
 * runs at 230. */
#if IGEMM_MR != 6
#error "the x86 integer micro-kernels are written for six rows"
#endif
#define IGEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define IGEMM_ACC_DECLARE(r) __m256i acc##r##0 = _mm256_setzero_si256(), acc##r##1 = _mm256_setzero_si256();
#define IGEMM_ACC_STEP(r, MADD)                  \
  {                                              \
    __m256i av = _mm256_set1_epi32(a[r]);        \
    acc##r##0 = MADD(acc##r##0, av, b0);         \
    acc##r##1 = MADD(acc##r##1, av, b1);         \
  }
#define IGEMM_ACC_FULL_ROW(r)                                       \
  {                                                                 \
    __m256i *row = (__m256i *)(c + r * ldc);                        \
    if (accumulate) {                                               \
      acc##r##0 = _mm256_add_epi32(acc##r##0, _mm256_loadu_si256(row));     \
      acc##r##1 = _mm256_add_epi32(acc##r##1, _mm256_loadu_si256(row + 1)); \
    }                                                               \
    _mm256_storeu_si256(row, acc##r##0);                            \
    _mm256_storeu_si256(row + 1, acc##r##1);                        \
  }
#define IGEMM_ACC_TILE_ROW(r)                                   \
  _mm256_storeu_si256((__m256i *)tile[r], acc##r##0);           \
  _mm256_storeu_si256((__m256i *)(tile[r] + 8), acc##r##1);
#define IGEMM_KERNEL_BODY(MADD)                                                                     \
  IGEMM_ROWS(IGEMM_ACC_DECLARE)                                                                     \
  for (int64_t p = 0; p < kp; p++) {                                                                \
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + p * NR));                                \
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + p * NR + 8));                            \
    const int32_t *a = ap + p * MR;                                                                 \
    IGEMM_ACC_STEP(0, MADD) IGEMM_ACC_STEP(1, MADD) IGEMM_ACC_STEP(2, MADD)                         \
    IGEMM_ACC_STEP(3, MADD) IGEMM_ACC_STEP(4, MADD) IGEMM_ACC_STEP(5, MADD)                         \
  }                                                                                                 \
  if (mr == MR && nr == NR) {                                                                       \
    IGEMM_ROWS(IGEMM_ACC_FULL_ROW)                                                                  \
    return;                                                                                         \
  }                                                                                                 \
  int32_t tile[MR][NR];                                                                             \
  IGEMM_ROWS(IGEMM_ACC_TILE_ROW)                                                                    \
  for (int r = 0; r < mr; r++)                                                                      \
    for (int j = 0; j < nr; j++)                                                                    \
      c[r * ldc + j] = accumulate ? (int32_t)((uint32_t)c[r * ldc + j] + (uint32_t)tile[r][j]) : tile[r][j];

/* A micro-kernel named NAME for TARGET (a target attribute string) over
 * MADD, exported as kiln_igemm_NAME (kp counts pairs or quads). */
#define IGEMM_KERNEL(NAME, TARGET, MADD)                                                                   \
  __attribute__((target(TARGET))) static void NAME(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, \
                                                   int64_t ldc, int mr, int nr, bool accumulate) {           \
    IGEMM_KERNEL_BODY(MADD)                                                                                \
  }                                                                                                        \
  const kiln_igemm_kernel_fn kiln_igemm_##NAME = NAME;

#define MADD_AVX2(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
IGEMM_KERNEL(kernel_avx2, "avx2", MADD_AVX2)

/* Quads (igemm_internal.h): 32 u8 x s8 products as 16 exact int16 pair sums
 * (the operands' range keeps vpmaddubsw from saturating), widened to 8
 * int32 sums of four by vpmaddwd with ones. */
#define MADD_QUADS_AVX2(acc, a, b) \
  _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((a), (b)), _mm256_set1_epi16(1)))
IGEMM_KERNEL(quad_kernel_avx2, "avx2", MADD_QUADS_AVX2)

/* VNNI: pairs by vpdpwssd; quads by vpdpbusd, which sums four u8 x s8
 * products per lane exactly into the int32 accumulator (wrapping, no
 * saturation: not vpdpbusds), so B may take the whole int8 range
 * (LAYOUT_QUADS_FULL), 32 products an instruction against the pairs' 16;
 * and quads with the operands' roles swapped (LAYOUT_QUADS_UB): B's bytes
 * the unsigned operand, A - its zero point the signed one, a u8
 * activation times an s8 weight whatever the activation's zero point. */
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 12)
#define MADD_AVXVNNI(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#define MADD_QUADS_AVXVNNI(acc, a, b) _mm256_dpbusd_avx_epi32((acc), (a), (b))
#define MADD_QUADS_UB_AVXVNNI(acc, a, b) _mm256_dpbusd_avx_epi32((acc), (b), (a))
IGEMM_KERNEL(kernel_avxvnni, "avx2,avxvnni", MADD_AVXVNNI)
IGEMM_KERNEL(quad_kernel_avxvnni, "avx2,avxvnni", MADD_QUADS_AVXVNNI)
IGEMM_KERNEL(quad_ub_kernel_avxvnni, "avx2,avxvnni", MADD_QUADS_UB_AVXVNNI)
#else
const kiln_igemm_kernel_fn kiln_igemm_kernel_avxvnni = NULL, kiln_igemm_quad_kernel_avxvnni = NULL,
                           kiln_igemm_quad_ub_kernel_avxvnni = NULL;
#endif

#define AVX512VNNI "avx2,avx512f,avx512vl,avx512vnni"
#define MADD_AVX512VNNI(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#define MADD_QUADS_AVX512VNNI(acc, a, b) _mm256_dpbusd_epi32((acc), (a), (b))
#define MADD_QUADS_UB_AVX512VNNI(acc, a, b) _mm256_dpbusd_epi32((acc), (b), (a))
IGEMM_KERNEL(kernel_avx512vnni, AVX512VNNI, MADD_AVX512VNNI)
IGEMM_KERNEL(quad_kernel_avx512vnni, AVX512VNNI, MADD_QUADS_AVX512VNNI)
IGEMM_KERNEL(quad_ub_kernel_avx512vnni, AVX512VNNI, MADD_QUADS_UB_AVX512VNNI)

#else
const kiln_igemm_kernel_fn kiln_igemm_kernel_avx2 = NULL, kiln_igemm_kernel_avxvnni = NULL,
                           kiln_igemm_kernel_avx512vnni = NULL, kiln_igemm_quad_kernel_avx2 = NULL,
                           kiln_igemm_quad_kernel_avxvnni = NULL, kiln_igemm_quad_kernel_avx512vnni = NULL,
                           kiln_igemm_quad_ub_kernel_avxvnni = NULL, kiln_igemm_quad_ub_kernel_avx512vnni = NULL;
#endif
