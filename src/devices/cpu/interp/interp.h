/* interp.h — the cpu's precompiled kernels: a fused kernel run without a
 * C compiler.
 *
 * The JIT renders a kernel's loop nest as C and compiles it; this runs the
 * same nest (the same schedule: tensorized GEMM and convolution calls
 * through kiln_rt, their epilogues, the same parallel split) by
 * evaluating its tensor expression over blocks of up to KILN_LANES
 * consecutive output elements, one precompiled vector loop per expression
 * node per block (lanes.h) — numexpr's blocked evaluation, and vectorized
 * interpretation as in database engines. What makes it fast enough to be
 * a tier of its own:
 *  - a value that does not vary across the block (a constant, a bias read
 *    at the block's channel, a reduction over a row) is one scalar;
 *  - every value is cached until a loop variable it reads changes, so a
 *    reduction the schedule would hoist (Softmax's row max) is computed
 *    once per row, and a reduction whose body reads no varying index is
 *    itself evaluated in blocks along its own variable;
 *  - a load at an affine index is a contiguous or strided copy, not a
 *    gather, whenever the block's elements step through it evenly.
 * GEMMs and convolutions, most of a model's time, run the same
 * precompiled routines as the JIT's kernels, so a session on this tier
 * is slower than on the JIT's only in its fused elementwise and reduction
 * code. The cpu device runs it where the JIT is not available, and while
 * the JIT compiles in the background (cpu_plan.c).
 *
 * A kernel holds no pointer into the te_builder it came from. It may be
 * run by one launch at a time (its per-thread scratch is thread-local and
 * tagged with the launch).
 */
#ifndef KILN_DEVICES_CPU_INTERP_INTERP_H
#define KILN_DEVICES_CPU_INTERP_INTERP_H

#include "codegen/kiln_rt.h"
#include "codegen/loopnest.h"

typedef struct kiln_interp_kernel kiln_interp_kernel;

/* Builds the interpreter's form of a scheduled nest of builder b (a nest
 * for the C dialect: no GPU tiles, rows, thread tiles or jams).
 * KILN_UNSUPPORTED for an expression it cannot run (an unknown math
 * function, a dtype without lanes); KILN_OOM. */
kiln_status_t kiln_interp_kernel_create(const te_builder *b, const kiln_loop_nest *nest, kiln_interp_kernel **out);
void kiln_interp_kernel_destroy(kiln_interp_kernel *k);

/* Runs the kernel: what a generated entry point `void NAME(const kiln_rt
 * *rt, void *const *buffers)` does (buffers: the kernel's te buffers in
 * order, then its launch's state slot). Failures (out of memory) go to
 * rt->fail, as the generated code's do. */
void kiln_interp_kernel_run(const kiln_interp_kernel *k, const kiln_rt *rt, void *const *buffers);

/* A kernel of a whole op class, run on a precompiled row routine
 * (kiln_lanes_ops' softmax_rows, layernorm_rows, arg_rows) instead of its lowered
 * expression: what the interpreter's blocks cost most on (a row's
 * reductions spread over its lanes, exp of each element twice). The
 * cpu device matches them (cpu_rows.c); buffers are the kernel's, by
 * index. */
typedef enum kiln_interp_rows_kind {
  KILN_INTERP_ROWS_SOFTMAX,
  KILN_INTERP_ROWS_LOG_SOFTMAX,
  KILN_INTERP_ROWS_LAYERNORM,
  KILN_INTERP_ROWS_ARGMAX, /* out_buf: i64, one per row */
  KILN_INTERP_ROWS_ARGMIN,
} kiln_interp_rows_kind;

typedef struct kiln_interp_rows {
  kiln_interp_rows_kind kind;
  int64_t rows, n;   /* rows of n contiguous f32 elements */
  int out_buf, x_buf;
  int scale_buf, bias_buf; /* LAYERNORM: n f32 each; bias_buf -1: none */
  float eps;
  bool last;         /* ARGMAX/ARGMIN: select_last_index */
} kiln_interp_rows;

kiln_status_t kiln_interp_rows_create(const kiln_interp_rows *rows, kiln_interp_kernel **out);

/* Whether k is a movement kernel (every output element one input element
 * or a constant, by index arithmetic alone: a transpose, a concat). */
bool kiln_interp_kernel_is_movement(const kiln_interp_kernel *k);
/* Runs movement kernel k as its copies (worked out at the first call)
 * where they are long (8 elements a run on average) and either
 * contiguous (90% of the elements in copies of step 1 or fills) or
 * replace index arithmetic that selects among inputs or divides
 * (RetinaNet's head concatenation: faster than compiled). False, having
 * done nothing, where k is not such a kernel, its runs do not qualify,
 * or this launch writes an input in place. */
bool kiln_interp_kernel_run_moves(const kiln_interp_kernel *k, const kiln_rt *rt, void *const *buffers);

/* The lane loops in use ("avx2", "generic"). */
const char *kiln_interp_isa(void);

#endif
