/* loopnest.h — the loop nest a kernel's tensor expression lowers to, and
 * the schedule knobs that shape it.
 *
 * A kernel stores out[v0..vr) = body(v0..vr) for every output index. The
 * schedule turns that into loops: the outer `parallel_dims` loops are
 * flattened into one parallel loop split over the thread pool in chunks of
 * at least `grain` iterations; the innermost loop runs over contiguous
 * memory so the C compiler vectorizes it. Every reduction in the body is
 * computed once, at the outermost loop level where all the indices it reads
 * are bound (hoisting): Softmax's row max and row sum are computed once per
 * row, not once per element. Nested reductions that read an enclosing
 * reduction's variable are computed inside that reduction's loop.
 *
 * The knobs are data (kiln_loop_schedule) so a tuner can search them.
 */
#ifndef KILN_CODEGEN_LOOPNEST_H
#define KILN_CODEGEN_LOOPNEST_H

#include "base/strbuf.h"
#include "codegen/te.h"

typedef struct kiln_loop_schedule {
  int parallel_dims;     /* outer loops flattened into the parallel loop; -1 = choose */
  int64_t min_chunk_elems; /* elements of work per parallel chunk at least */
  int unroll_inner;      /* 0/1: ask the compiler to unroll the inner loop */
} kiln_loop_schedule;

kiln_loop_schedule kiln_loop_schedule_default(void);

/* Where each reduction is computed. */
typedef struct kiln_reduce_site {
  const te_expr *reduce;
  int level;              /* output loop level (-1: before all loops), if owner is NULL */
  const te_expr *owner;   /* enclosing reduction whose loop it lives in, or NULL */
} kiln_reduce_site;

typedef struct kiln_loop_nest {
  int rank;                       /* output loops */
  int64_t extents[KILN_MAX_RANK];
  int vars[KILN_MAX_RANK];        /* te variable of each output loop */
  int parallel_dims;              /* how many outer loops form the parallel loop */
  int64_t grain;                  /* parallel chunk size in flattened iterations */
  const te_expr *value;           /* the element to store */
  int out_buf;
  kiln_reduce_site *sites;        /* in dependency (creation) order; owned */
  int n_sites;
  bool unroll_inner;
} kiln_loop_nest;

/* Builds the loop nest that stores `root` into buffer out_buf. */
kiln_status_t kiln_schedule_kernel(te_builder *b, const te_tensor *root, int out_buf, const kiln_loop_schedule *s,
                                   kiln_loop_nest *out);
void kiln_loop_nest_free(kiln_loop_nest *n);

/* Renders a loop nest as a C11 function `void NAME(const kiln_rt *rt, void
 * *const *buffers)` appended to `src` (the caller adds kiln_c_preamble()
 * once per source). */
kiln_status_t kiln_render_c(const te_builder *b, const kiln_loop_nest *nest, const char *name, kiln_strbuf *src);
/* Renders `void NAME(void *ctx, float *c, int64_t ldc, int64_t m0, int64_t
 * n0, int64_t mb, int64_t nb)`: the element computation of a flat (rank-1,
 * reduction-free) nest applied to one finished GEMM tile, in place, with ctx
 * a kiln_rt_epilogue_ctx. Lets elementwise consumers of a MatMul/Gemm/Conv
 * run while its tile is in cache instead of as a separate pass. */
kiln_status_t kiln_render_c_epilogue(const te_builder *b, const kiln_loop_nest *nest, const char *name,
                                     kiln_strbuf *src);
/* kiln_rt.h and the math helpers every generated source starts with. */
const char *kiln_c_preamble(void);

#endif
