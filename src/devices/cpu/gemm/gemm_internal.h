/* gemm_internal.h — the pieces of kiln_sgemm shared between the driver
 * (gemm.c), the packing routines (gemm_pack.c) and the per-ISA micro-kernel
 * files (kernel_*.c). Not for use outside src/devices/cpu/gemm and its test.
 *
 * Data layouts (MR x NR is the micro-kernel's register tile):
 * - packed A block: panels of MR rows; panel q holds, for p = 0..kc-1, the MR
 *   values op(A)[i0 + q*MR + r][p0 + p] (r = 0..MR-1; rows past M are 0).
 * - packed B: strips of NR columns; strip s holds, for p = 0..k-1, the NR
 *   values op(B)[p][s*NR + j] (columns past N are 0). A micro-panel for
 *   k-block p0.. of strip s starts at strip_base + p0 * NR.
 */
#ifndef KILN_DEVICES_CPU_GEMM_INTERNAL_H
#define KILN_DEVICES_CPU_GEMM_INTERNAL_H

#include "devices/cpu/gemm/gemm.h"

/* How a micro-kernel writes its tile: c = alpha * acc + beta * c + bias.
 * beta == 0: c is not read. bias_row (mr values) / bias_col (nr values) are
 * already offset to the tile; NULL when absent. */
typedef struct kiln_gemm_store {
  float alpha, beta;
  const float *bias_row;
  const float *bias_col;
  /* Only for kernels with copies_b, and only with mr == MR: also store the
   * kc x NR micro-panel of B as read into this 64-byte aligned buffer,
   * packed (rows NR apart). NULL: no copy. */
  float *b_copy;
} kiln_gemm_store;

/* Register tile: the mr x nr (mr <= MR, nr <= NR) product of mr rows of A
 * and a KC x NR micro-panel of B over kc steps, stored into c.
 * A's element (i, p) is at a[i*rsa + p*csa], where rsa == 1 or csa == 1: a
 * packed panel (rsa 1, csa MR) or A read in place (transposed: rsa 1,
 * csa lda; row-major: rsa lda, csa 1). Only rows < mr of A are read.
 * B's element (p, j) is at bp[p*bs + j]: packed (bs NR, 64-byte aligned) or
 * read in place from a row-major B (bs ldb; then nr == NR). */
typedef void (*kiln_gemm_micro_fn)(int64_t kc, const float *a, int64_t rsa, int64_t csa, const float *bp,
                                   int64_t bs, float *c, int64_t ldc, int mr, int nr, const kiln_gemm_store *st);

/* Small-M paths (m <= KILN_GEMM_SMALL_M): A is read in place (row i, step p
 * at a[i*rsa + p*csa]); the result for columns [n0, n0+nb) is stored in c
 * (already offset to row 0, column n0) with st (bias_col offset to n0,
 * bias_row offset to row 0).
 * - rows: B in place, row-major K x N (b offset to column n0).
 * - packed: B packed (bp = first strip of the range, nb a multiple of NR or
 *   the end of N).
 * - dots: B in place, stored N x K (b offset to row n0). */
#define KILN_GEMM_SMALL_M 4
typedef void (*kiln_gemm_small_fn)(int64_t m, int64_t nb, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                   const float *b, int64_t ldb, float *c, int64_t ldc, const kiln_gemm_store *st);

/* The tiny path (kiln_sgemm of a few thousand products: attention's
 * 16 x 16 heads): no packing of A, no blocking, B copied once by the
 * driver into bp, k rows of nv whole vectors (zero past n), so A's element
 * (i, p) at a[i*rsa + p*csa] times bp's row p gives row i of c (n columns
 * stored with st; bias_row indexed from row 0). nv is 1..KILN_GEMM_TINY_NV. */
#define KILN_GEMM_TINY_NV 4
#define KILN_GEMM_TINY_K 128            /* the most k of the tiny path (bp stays on the stack: 32 KiB) */
#define KILN_GEMM_TINY_PRODUCTS 32768   /* and the most m * n * k (below, see gemm.c's tiny()) */
typedef void (*kiln_gemm_tiny_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                                  const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st);
/* Per kernel set (gemm_tiny.c: one file, compiled with multiply-adds
 * contracted, which the other kernel files are not). */
void kiln_gemm_tiny_avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                           const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st);
void kiln_gemm_tiny_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                         const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st);
void kiln_gemm_tiny_generic(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                            const float *bp, int nv, float *c, int64_t ldc, const kiln_gemm_store *st);

/* Packing routines: same contract as kiln_gemm_pack_a / kiln_gemm_pack_b_block below. */
typedef void (*kiln_gemm_pack_a_fn)(bool trans_a, const float *a, int64_t lda, int64_t i0, int64_t mb, int64_t p0,
                                    int64_t kb, int mr, float *out);
typedef void (*kiln_gemm_pack_b_fn)(bool trans_b, const float *b, int64_t ldb, int64_t p0, int64_t kb, int64_t j0,
                                    int64_t nb, int nr, float *out, int64_t strip_stride);

typedef struct kiln_gemm_kernel {
  const char *name;
  int id; /* stored in packed B to detect a layout mismatch */
  int mr, nr;
  kiln_gemm_micro_fn micro;
  bool copies_b; /* micro honours kiln_gemm_store.b_copy */
  kiln_gemm_small_fn small_rows, small_packed, small_dots; /* NULL: blocked path */
  kiln_gemm_tiny_fn tiny;                                  /* NULL: no tiny path */
  int tiny_w;                                              /* floats per vector of tiny's bp */
  kiln_gemm_pack_a_fn pack_a;                              /* never NULL */
  kiln_gemm_pack_b_fn pack_b;                              /* never NULL */
} kiln_gemm_kernel;

/* Per-ISA kernels; NULL-named when not compiled in. Availability is decided
 * by the driver from the CPU features. */
extern const kiln_gemm_kernel kiln_gemm_kernel_avx512;
extern const kiln_gemm_kernel kiln_gemm_kernel_avx2;
extern const kiln_gemm_kernel kiln_gemm_kernel_generic;

/* The kernel kiln_sgemm uses now. */
const kiln_gemm_kernel *kiln_gemm_active_kernel(void);
/* For tests and benches: force a kernel by name ("avx512", "avx2",
 * "generic"); NULL restores automatic choice. Returns false (and changes
 * nothing) if the kernel is unknown or this CPU cannot run it. Not
 * thread-safe: call it only while no kiln_sgemm runs. The environment
 * variable KILN_GEMM_KERNEL does the same at first use. */
bool kiln_gemm_force_kernel(const char *name);
/* For tests: override the cache blocking (0 = automatic). */
void kiln_gemm_set_blocking(int64_t mc, int64_t kc, int64_t nc);
/* For tests: simulate failing allocations. 1: every packing buffer (the
 * unblocked fallbacks run); 2: only the per-thread A buffers of the blocked
 * path (as in a nested call that cannot allocate). 0: off. */
void kiln_gemm_test_alloc_failure(int mode);
/* For tests: 1 makes the blocked path read A in place, 2 makes it pack A,
 * 0 lets it decide by the reuse of A. */
void kiln_gemm_test_direct_a(int mode);
/* The same for B (only a row-major, unpacked B can be read in place):
 * 1 in place only, 2 packed in a shared phase, 3 in place with each thread
 * packing the micro-panels it reuses, 0 decides. */
void kiln_gemm_test_direct_b(int mode);
/* For tests: 1 keeps the multi-threaded blocked path from packing B for
 * all of K at once (it then packs a KC x NC block per k-slice, with a
 * barrier each), 0 lets it decide by size. */
void kiln_gemm_test_no_full_k(int mode);
/* For tests and benches: the most rows that take the small-M path, with
 * and without a packed B (-1: the defaults). */
void kiln_gemm_set_small_m(int64_t max_m);
/* For tests and benches: the most m * n * k that takes the tiny path (0:
 * none; -1: the default). */
void kiln_gemm_set_tiny_max(int64_t max_products);

/* Packing (gemm_pack.c). */
void kiln_gemm_pack_a(bool trans_a, const float *a, int64_t lda, int64_t i0, int64_t mb, int64_t p0, int64_t kb,
                      int mr, float *out);
/* Packs columns [j0, j0+nb) of rows [p0, p0+kb) of op(B); strip s goes to
 * out + s * strip_stride. */
void kiln_gemm_pack_b_block(bool trans_b, const float *b, int64_t ldb, int64_t p0, int64_t kb, int64_t j0,
                            int64_t nb, int nr, float *out, int64_t strip_stride);

#endif
