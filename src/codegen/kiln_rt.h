/* kiln_rt.h — what generated kernels see of the kiln runtime.
 *
 * Generated C is compiled into its own shared object, without kiln's
 * headers; it reaches the runtime only through this table of function
 * pointers, passed to every entry point. This header is self-contained (it
 * is pasted verbatim at the top of every generated source) and is the whole
 * ABI between libkiln and generated code: change it and bump
 * KILN_RT_ABI_VERSION, which is part of the JIT cache key.
 *
 * Entry points are `void NAME(const kiln_rt *rt, void *const *buffers)`:
 * buffers[i] is the base pointer of the kernel's i-th tensor argument, in
 * the order the kernel's signature lists them.
 */
#ifndef KILN_RT_H
#define KILN_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_RT_ABI_VERSION 2

typedef void (*kiln_rt_parallel_fn)(void *ctx, int64_t begin, int64_t end, int thread);
typedef void (*kiln_rt_epilogue_fn)(void *ctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb);

/* What a fused epilogue (`kiln_epilogue`, a kiln_rt_epilogue_fn) gets as
 * ctx: the kernel's buffers and where the tile sits in its flat output:
 * element (i, j) of a tile at (m0, n0) is output element
 * base + (m0 + i) * row + n0 + j. */
typedef struct kiln_rt_epilogue_ctx {
  void *const *buffers;
  int64_t base, row;
} kiln_rt_epilogue_ctx;

typedef struct kiln_rt_sgemm_args {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float *a;
  int64_t lda;
  const float *b;
  int64_t ldb;
  const void *packed_b; /* B prepacked at session creation, or NULL */
  float beta;
  float *c;
  int64_t ldc;
  const float *bias;
  int bias_axis; /* 0 none, 1 per row (m), 2 per column (n) */
  kiln_rt_epilogue_fn epilogue;
  void *epilogue_ctx;
} kiln_rt_sgemm_args;

typedef struct kiln_rt {
  int abi_version;
  void *pool; /* the session's thread pool */
  int n_threads;
  /* Splits [0, n) into chunks of at least `grain` and runs fn on the pool. */
  void (*parallel_for)(void *pool, int64_t n, int64_t grain, kiln_rt_parallel_fn fn, void *ctx);
  /* f32 GEMM with bias and a per-tile epilogue (kiln's packed micro-kernels). */
  void (*sgemm)(void *pool, const kiln_rt_sgemm_args *args);
} kiln_rt;

#endif
