/* gemm.h — kiln's single-precision matrix multiply for the cpu device.
 *
 *   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C + bias,  then epilogue
 *
 * All matrices are row-major. op(X) is X or, with trans_x, X transposed: with
 * trans_a, A is stored K x M (lda >= M); without, M x K (lda >= K). Likewise
 * B is K x N (ldb >= N) or, with trans_b, N x K (ldb >= K). ldc >= N.
 *
 * Typical use:
 *
 *   kiln_sgemm_args g = {.m = M, .n = N, .k = K, .alpha = 1, .a = x, .lda = K,
 *                        .b = w, .ldb = N, .c = y, .ldc = N};
 *   kiln_sgemm(pool, &g);                     // pool may be NULL: one thread
 *
 * Weights can be packed once (at session creation) and reused:
 *
 *   void *pw = aligned_alloc(64, kiln_sgemm_packed_b_size(K, N));
 *   kiln_sgemm_pack_b(false, K, N, w, N, pw);
 *   g.b = NULL; g.packed_b = pw;              // trans_b / ldb are then ignored
 *
 * The packed layout depends on the micro-kernel chosen for this CPU, so a
 * packed buffer is only valid in the process that packed it. It must be
 * 64-byte aligned; it is read-only during kiln_sgemm and may be shared by
 * concurrent calls.
 *
 * Semantics:
 * - beta == 0 means C is not read (it may hold NaN or garbage), as in BLAS.
 * - alpha == 0 or K == 0: A and B are not read; C = beta * C + bias.
 * - bias (borrowed, may be NULL): bias_axis 1 adds bias[i] to row i (length
 *   M), 2 adds bias[j] to column j (length N), 0 ignores it. It is not scaled
 *   by alpha.
 * - epilogue (may be NULL) is called once for every element of C, in tiles
 *   (rows m0..m0+mb, columns n0..n0+nb; `c` points at element (m0, n0), ldc
 *   is args->ldc) right after the tile's final value is stored, while it is
 *   still in cache. Tiles do not overlap and cover C exactly; they may be
 *   called from several threads at once, in any order.
 * - All pointers are borrowed; A, B and C must not overlap.
 * - packed_b must come from kiln_sgemm_pack_b with the same K and at least
 *   N columns; otherwise C is filled with NaN.
 *
 * Threading: kiln_sgemm splits the work over the pool's threads (the caller
 * is one of them). The function keeps no state between calls except the
 * CPU-feature dispatch, so concurrent calls on different pools are fine.
 * Temporary packing buffers are allocated per call; if that allocation
 * fails, the call falls back to an unblocked path that needs no memory.
 */
#ifndef KILN_DEVICES_CPU_GEMM_GEMM_H
#define KILN_DEVICES_CPU_GEMM_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kiln_threadpool kiln_threadpool; /* base/threadpool.h */

/* Called for each finished tile of C (see above). */
typedef void (*kiln_gemm_epilogue_fn)(void *ctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb,
                                      int64_t nb);

enum { KILN_GEMM_BIAS_NONE = 0, KILN_GEMM_BIAS_ROW = 1, KILN_GEMM_BIAS_COL = 2 };

typedef struct kiln_sgemm_args {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float *a;
  int64_t lda;
  const float *b;
  int64_t ldb;
  const void *packed_b; /* from kiln_sgemm_pack_b; when set, b/ldb/trans_b are ignored */
  float beta;
  float *c;
  int64_t ldc;
  const float *bias;
  int bias_axis; /* 0 none, 1 per-row (m), 2 per-column (n) */
  kiln_gemm_epilogue_fn epilogue;
  void *epilogue_ctx;
} kiln_sgemm_args;

/* Runs the multiply described by args (see the top of this file). pool may be NULL. */
void kiln_sgemm(kiln_threadpool *pool, const kiln_sgemm_args *args);

/* Bytes needed to pack a K x N op(B); 0 if k or n is negative or the size overflows. */
size_t kiln_sgemm_packed_b_size(int64_t k, int64_t n);

/* Whether kiln_sgemm reads an unpacked op(B) of a call with m rows in place,
 * once, on its small-M path (GEMV-like shapes, bound by memory bandwidth):
 * packing such a B once buys no speed and costs a copy of it, made at the
 * first run (VGG's fc6: 411 MB). */
bool kiln_sgemm_streams_b(int64_t m, bool trans_b);

/* Packs op(B) (K x N; stored N x K when trans_b) into `packed`, which must be
 * 64-byte aligned and hold kiln_sgemm_packed_b_size(k, n) bytes. */
void kiln_sgemm_pack_b(bool trans_b, int64_t k, int64_t n, const float *b, int64_t ldb, void *packed);

/* Packs rows [p0, p0 + kb) of a K x N B (not transposed; b points at row
 * p0) into `packed`, as kiln_sgemm_pack_b(false, k, n, ...) would: a B made
 * a block of rows at a time (Winograd's transformed weights) is packed
 * without a whole copy of it. Every row packed once makes the same buffer. */
void kiln_sgemm_pack_b_rows(int64_t k, int64_t n, int64_t p0, int64_t kb, const float *b, int64_t ldb, void *packed);

/* The name of the micro-kernel in use ("avx512", "avx2" or "generic"), for logs and benches. */
const char *kiln_sgemm_kernel_name(void);

#endif
