/* cpu_internal.h — the cpu device's side of a plan (runtime/plan.h).
 *
 * The shared plan claims nodes (what codegen/lower.c can lower), fuses
 * them, plans the arena and runs the steps; the cpu device supplies the
 * hooks (cpu_plan.c): each KERNEL step scheduled and rendered as C (MatMul,
 * Gemm and 1x1 products tensorized onto the packed SGEMM micro-kernels,
 * convolutions onto the measured conv algorithms below, both reached
 * through the runtime table of cpu_rt.c), every kernel compiled in one JIT
 * batch, and launch_step running a step at once on the thread pool.
 *
 * A cpu_exec is used by one thread at a time (its scratch is reused).
 */
#ifndef KILN_DEVICES_CPU_CPU_INTERNAL_H
#define KILN_DEVICES_CPU_CPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/threadpool.h"
#include "codegen/kiln_rt.h"
#include "codegen/lower.h"
#include "devices/cpu/interp/interp.h"
#include "runtime/plan.h"

typedef enum cpu_step_kind {
  CPU_STEP_KERNEL, /* a generated, fused kernel */
  CPU_STEP_REF,    /* a host step (the plan runs it) */
} cpu_step_kind;

typedef void (*cpu_kernel_fn)(const kiln_rt *rt, void *const *buffers);

/* How kernels are made ready (KILN_JIT; cpu_plan.c): */
typedef enum cpu_jit_mode {
  CPU_JIT_TIERED, /* default: kernels the JIT cache has are loaded; the others start on the
                     interpreter and are compiled in the background, then swapped in */
  CPU_JIT_SYNC,   /* every kernel compiled before the first run (what benchmarks time) */
  CPU_JIT_OFF,    /* the interpreter only (also when no C compiler is found) */
} cpu_jit_mode;

/* The cpu's compiled form of plan step i (cpu_exec.steps[i]); node and
 * args mirror the plan step (args borrowed from it). A kernel runs fn
 * when it is set, else its interpreter form; the background compile sets
 * fn once (an atomic store: a launch reads it once, at its start). */
typedef struct cpu_step {
  cpu_step_kind kind;
  const kiln_node *node;
  int n_args;
  const int *args;
  char *source;            /* rendered C until compiled; owned */
  _Atomic(cpu_kernel_fn) fn;
  struct kiln_jit_module *module; /* what fn lives in; owned */
  struct kiln_interp_kernel *interp; /* the precompiled form; owned */
  /* A movement kernel's form as copies (interp.h's run_moves), taken over
   * the compiled kernel where its runs are long: interp where there is
   * one, else made for this (KILN_JIT=sync); owned when not interp. */
  struct kiln_interp_kernel *moves;
  kiln_rt_state *rt_state; /* what its runtime calls prepared (kiln_rt.h's state slot); owned */
} cpu_step;

typedef struct cpu_exec {
  const kiln_graph *g; /* borrowed */
  cpu_step *steps;     /* one per plan step (allocated for every node: steps <= nodes); owned */
  int n_steps;
  cpu_jit_mode mode;
  /* The background compile (tiered): started by plan_compile, joined by
   * plan_end (so the cache is complete for the next session). */
  pthread_t compiler;
  bool compiling;
  /* Tiered, with every core running the session: the background compile
   * waits for the first run's last kernel (after_step) so it does not
   * take the cores that run it (RetinaNet's cold start at 2 threads of 2
   * cores: 4.3 -> 3.4 s); the batch to compile until then; owned. */
  struct cpu_batch *pending;
  int after_step;
  atomic_bool compiled;  /* the background compile has finished */
  atomic_int kernels_jit, kernels_interp; /* steps on each tier now (for describe) */
  kiln_threadpool *pool; /* owned, or the parent executable's (pool_borrowed) */
  bool pool_borrowed;
  kiln_rt rt;          /* what generated code calls (cpu_rt.c finds the exec from it) */
  float *scratch;      /* convolution scratch shared by every launch (they run one at a time); owned */
  size_t scratch_bytes;
  kiln_status_t rt_error; /* what a runtime call of the running launch reported (kiln_rt.fail); owned */
  /* Constant B operands packed for the SGEMM, shared by every launch that
   * multiplies by the same weights (an unrolled RNN's steps all read R):
   * one reference each here (cpu_rt.c), released by plan_end. */
  struct cpu_packed_b **packed;
  int n_packed, cap_packed;
} cpu_exec;

/* Drops the exec's references to its shared packed B operands (cpu_rt.c). */
void kiln_cpu_release_packed(cpu_exec *x);

/* The table generated code gets (cpu_rt.c); rt must then live inside a
 * cpu_exec (cpu_exec.rt): its calls reach the exec's scratch and error. */
kiln_rt kiln_cpu_rt(kiln_threadpool *pool, int threads);

/* Whether the cpu runs host step `node` on a routine of its own
 * (kiln_cpu_host_kernel: the plan target's host_routine), judged from the
 * dtypes the plan knows; a run whose values a routine does not take (ref
 * words their error) still goes to ref. */
bool kiln_cpu_host_routine_of(const kiln_graph *g, const kiln_node *node);
/* Whether kernel step `step` of g's plan runs on a row routine in the
 * precompiled tier (cpu_rows.c), and which: *out filled when true. */
bool kiln_cpu_rows_of(const kiln_graph *g, const kiln_plan_step *step, kiln_interp_rows *out);
/* The device's host_kernel hook (cpu_host.c): Gemm and MatMul host steps on the SGEMM. */
kiln_status_t kiln_cpu_host_kernel(void *state, kiln_kernel_ctx *ctx, bool *handled);
/* op(B) for the SGEMM, packed once per plan when B is a constant of the
 * plan's graph read by node n's input `input`; sub: the block of b
 * multiplied (ldb apart rows). NULL: not a constant, or no memory (pack
 * per call). *slot: this call's reference, destroy it after the GEMM. */
const void *kiln_cpu_host_packed_b(cpu_exec *x, const kiln_node *n, int input, const kiln_tensor *b, const float *sub,
                                   bool trans_b, int64_t k, int64_t nn, int64_t ldb, kiln_rt_state **slot);
/* RNN, GRU and LSTM as one host routine (cpu_rnn.c); *handled false:
 * left to ref (another dtype, or inputs ref rejects with its error). */
kiln_status_t kiln_cpu_host_recurrent(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled);
/* Whether the routine runs this node (an f32 X): the plan says so, and
 * the optimizer keeps the node whole for it. */
bool kiln_cpu_recurrent_routine(const kiln_graph *g, const kiln_node *node);
/* ONNX Attention's decoder step as one host routine (cpu_attention.c);
 * *handled false: left to ref (shapes ref rejects, with its error). */
kiln_status_t kiln_cpu_host_attention(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled);
/* Whether the routine runs this node (kiln_attention_decode_step). */
bool kiln_cpu_attention_routine(const kiln_graph *g, const kiln_node *node);

/* A routine over planes (cpu_planes.c): plane(job, x + i * in_size,
 * y + i * out_size, scratch) for every plane i over the pool, scratch
 * `scratch` floats per chunk of planes (out of memory: oom_message through
 * rt->fail), then the epilogue over the plane (a tile of one row: base 0,
 * row out_size). Everything is borrowed. */
typedef struct kiln_cpu_planes {
  const kiln_rt *rt;
  const char *oom_message;
  void (*plane)(const void *job, const float *x, float *y, float *scratch);
  const void *job;
  const float *x;
  float *y;
  int64_t in_size, out_size;
  size_t scratch;
  kiln_rt_epilogue_fn epilogue;
  void *const *epilogue_buffers;
} kiln_cpu_planes;
void kiln_cpu_run_planes(const kiln_cpu_planes *p, int64_t planes);

/* kiln_rt.pooling (cpu_pool.c): MaxPool and AveragePool as separable passes. */
void kiln_cpu_pool(const kiln_rt *rt, const kiln_rt_pool_args *a);
/* kiln_rt.resample (cpu_resample.c): Resize tables as separable passes. */
void kiln_cpu_resample(const kiln_rt *rt, const kiln_rt_resample_args *a);

/* ConvTranspose (a->transposed; cpu_conv_transpose.c): SGEMM then col2im,
 * with a's bias, residual and clip or epilogue. cols: scratch of
 * kiln_conv_transpose_scratch_bytes(a) bytes, 64-byte aligned. */
size_t kiln_conv_transpose_scratch_bytes(const kiln_rt_conv_args *a);
void kiln_conv_transpose_run(kiln_threadpool *pool, const kiln_rt_conv_args *a, float *cols);
/* ConvInteger (a->integer; cpu_conv_integer.c): per image and group, the
 * window as columns (im2col, the padding x_zero; none for a pointwise
 * convolution) and kiln_igemm with W as A (per-channel zero points as row
 * zero points), the int32 tiles through a->iepilogue; with yq NULL the
 * sums are tiles of the scratch. scratch: kiln_conv_integer_scratch_bytes
 * bytes, 64-byte aligned. Out of memory: an error, yq unwritten. */
size_t kiln_conv_integer_scratch_bytes(const kiln_rt_conv_args *a);
kiln_status_t kiln_conv_integer_run(kiln_threadpool *pool, const kiln_rt_conv_args *a, void *scratch);

/* The cpu device's plan hooks (cpu_plan.c). */
kiln_status_t kiln_cpu_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                  kiln_plan_target *out_target, void **out_state);
kiln_status_t kiln_cpu_plan_compile(kiln_device *dev, void *state, kiln_plan *plan, const kiln_plan_bindings *bind);
kiln_status_t kiln_cpu_launch_step(kiln_device *dev, void *state, const kiln_plan *plan, int step,
                                   const kiln_plan_bindings *bind);
void kiln_cpu_plan_end(kiln_device *dev, void *state, kiln_plan *plan);

/* ---- convolutions (cpu_conv.c), NCHW f32 ------------------------------------ */

typedef struct kiln_conv_geom {
  int nsp; /* spatial dims, 1-3 */
  int64_t n, ci, co, group;
  int64_t in_sp[3], out_sp[3], k[3], stride[3], dil[3], pad_begin[3];
  int64_t kdim, osize; /* Ci/group * prod(k), prod(out spatial) */
  /* y is [co, n, out spatial]: the output's first two axes swapped (a
   * Transpose fused after a weight gradient's Conv, kiln_rt_conv_args.y_cn).
   * Only BATCHED and IM2ROW write it (group 1). */
  bool y_cn;
} kiln_conv_geom;

typedef enum kiln_conv_algo {
  KILN_CONV_AUTO = 0,
  KILN_CONV_GEMM,      /* 1x1, stride 1, no padding: SGEMM on the input */
  KILN_CONV_IM2COL,    /* general: im2col + SGEMM */
  KILN_CONV_DEPTHWISE, /* direct depthwise loops, any kernel */
  KILN_CONV_DW3X3,     /* vectorized 3x3 depthwise, stride 1 or 2 */
  KILN_CONV_WINOGRAD,  /* F(4x4, 3x3), stride 1, constant weights */
  KILN_CONV_GEMM_T,    /* GEMM as Y^T = X^T W^T: prepacked weights, output transposed back (small planes) */
  KILN_CONV_IM2COL_T,  /* IM2COL the same way */
  KILN_CONV_PW,        /* 1x1, stride 1, no padding, group 1, constant weights: direct register-tiled kernel
                          (cpu_conv_pw.c) on the activations in place, weights prepacked */
  KILN_CONV_IM2COL_PW, /* 2-D, constant weights: im2col of a band of output rows (in L2), then the direct
                          pointwise kernel on it */
  KILN_CONV_ROWS,      /* 2-D, group 1, constant weights, small Ci*k*k, stride 1 or 2, AVX-512: im2col of 48
                          pixels at a time in L1, then the direct pointwise kernel (cpu_conv_rows.c) */
  KILN_CONV_DW_DIRECT, /* 3x3 depthwise, stride 1 or 2, AVX-512: reads the input in place, padding as
                          masked lanes (cpu_conv_dw.c) */
  KILN_CONV_DWK,       /* depthwise, 1-D or 2-D, any kernel, stride, dilation and padding, AVX2: padded rows
                          split into column phases, every tap a contiguous run (cpu_conv_dwk.c) */
  KILN_CONV_TAPS,      /* 2-D, group 1, stride 1, constant weights: one GEMM per kernel tap over the outputs
                          whose input for it is inside the image (cpu_conv_taps.c): no products of padding */
  KILN_CONV_BATCHED,   /* group 1: the im2col columns of every image side by side, one SGEMM for the whole
                          batch (Y^T[N*HW, Co], M = batch * osize), moved back to NCHW tile by tile; weights
                          read in place when not constant (small planes, where a GEMM per image is a GEMV) */
  KILN_CONV_IM2ROW,    /* group 1: a row of K per (image, output pixel), the kernel's last axis copied as runs,
                          one SGEMM per chunk of images with W^T as B (weight gradients: a small output plane,
                          a kernel as large as the forward output) */
  KILN_CONV_N_ALGOS
} kiln_conv_algo;

/* The epilogue a convolution runs on its finished output (a generated
 * kiln_rt_epilogue_fn and the kernel's buffers), or fn NULL. */
typedef struct kiln_conv_epilogue {
  kiln_rt_epilogue_fn fn;
  void *const *buffers;
  /* native: fn's effect is exactly  v = y[i] (+ add[i] when add);
   * y[i] = clip ? min(max(v, lo), hi) : v  for flat output index i (max and
   * min keep NaN), so a path may apply it in registers and not call fn. A
   * path that does not know it calls fn, which must then be set. */
  bool native, clip;
  float lo, hi;
  const float *add;
} kiln_conv_epilogue;

/* Applies e (none when e or e->fn is NULL) to rows m < mb of `count`
 * consecutive output elements from flat index base + m * row of y. */
void kiln_conv_epilogue_apply(const kiln_conv_epilogue *e, float *y, int64_t base, int64_t row, int64_t mb,
                              int64_t count);

/* Convolutions on oneDNN (cpu_conv_dnnl.c): 2-D f32 Conv / ConvTranspose
 * of group 1 with the weights given at run time, where the library loads
 * (KILN_HAVE_DNNL at build time, libdnnl.so.2 at run time, KILN_DNNL=0
 * off). kiln_conv_dnnl_plan: *out NULL (and no error) where it does not
 * apply; the caller then runs its own algorithms. The plan is per launch
 * (its primitive, reorders and memories); run applies epi (no y_cn then). */
typedef struct kiln_conv_dnnl kiln_conv_dnnl;
/* Whether a's convolution is one oneDNN would take, from its geometry
 * alone (the library is not loaded: inference never loads it). */
bool kiln_conv_dnnl_candidate(const kiln_rt_conv_args *a);
const char *kiln_conv_dnnl_version(void); /* "2.6.3", or NULL when not loaded */
kiln_status_t kiln_conv_dnnl_plan(const kiln_rt_conv_args *a, int threads, kiln_conv_dnnl **out);
kiln_status_t kiln_conv_dnnl_run(kiln_conv_dnnl *d, kiln_threadpool *pool, const kiln_rt_conv_args *a,
                                 const kiln_conv_epilogue *epi);
void kiln_conv_dnnl_free(kiln_conv_dnnl *d);

typedef struct kiln_conv_plan kiln_conv_plan; /* one allocation: free() releases it */

kiln_status_t kiln_conv_geometry(const kiln_graph *g, const kiln_node *n, kiln_conv_geom *c);
const char *kiln_conv_algo_name(kiln_conv_algo a);
bool kiln_conv_algo_applies(const kiln_conv_geom *c, kiln_conv_algo a, bool const_weights);
/* The algorithm AUTO picks (KILN_CONV_ALGO=<name> in the environment forces
 * one where it applies). */
kiln_conv_algo kiln_conv_choose(const kiln_conv_geom *c, bool const_weights);
/* Plans c with algo (AUTO: kiln_conv_choose). w: the weights when they are
 * constant (Winograd transforms them now), else NULL. threads: the most
 * threads kiln_conv_run will use (sizes the per-thread scratch). */
kiln_status_t kiln_conv_plan_create(const kiln_conv_geom *c, kiln_conv_algo algo, const float *w, int threads,
                                    kiln_conv_plan **out);
/* The K and output plane size p's GEMMs run on: c's kdim and osize less
 * the taps and outputs that see only padding where the plan prunes them
 * (weights at run time over small planes: BATCHED, IM2ROW, IM2COL). */
void kiln_conv_plan_products(const kiln_conv_plan *p, int64_t *out_kdim, int64_t *out_osize);
/* Bytes of scratch kiln_conv_run needs (64-byte aligned), 0 for none. */
size_t kiln_conv_plan_scratch_bytes(const kiln_conv_plan *p);
/* y = conv(x, w) + bias, then epi (may be NULL) over every output element. */
void kiln_conv_run(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w, const float *bias,
                   float *y, void *scratch, const kiln_conv_epilogue *epi);

/* ---- direct pointwise kernel (cpu_conv_pw.c) ------------------------------------
 * Y[co, hw] = W[co, k] x X[k, hw] (+ bias[co], then the epilogue) for one
 * image: register tiles of KILN_PW_MR output channels x up to 48 pixels
 * (AVX-512; 8 with AVX2) read X in place, K in one pass; the weights are
 * packed once into blocks of KILN_PW_MR channels, [k][KILN_PW_MR] each
 * (channels past co zero). isa: 0 generic, 1 AVX2, 2 AVX-512. */
#define KILN_PW_MR 8
size_t kiln_conv_pw_packed_floats(int64_t co, int64_t k);
void kiln_conv_pw_pack(int64_t co, int64_t k, const float *w, float *packed);
typedef struct kiln_conv_pw_job {
  int64_t co, k, hw;              /* hw: columns */
  int64_t ldx, ldy;               /* row strides of X and Y (0: hw) */
  const float *packed, *x, *bias; /* bias may be NULL */
  float *y;
  int64_t y_base; /* flat index of y[0] in the epilogue's output */
  const kiln_conv_epilogue *epi; /* may be NULL */
} kiln_conv_pw_job;
void kiln_conv_pw_run(kiln_threadpool *pool, int isa, const kiln_conv_pw_job *job);

/* ---- im2col in L1 + the pointwise kernel (cpu_conv_rows.c), AVX-512 only ----------- */
#define KILN_ROWS_MAX_KDIM 1024
bool kiln_conv_rows_applies(const kiln_conv_geom *c);
size_t kiln_conv_rows_thread_floats(const kiln_conv_geom *c);
/* packed: the weights [co][kdim] packed by kiln_conv_pw_pack; scratch:
 * thread_floats (>= kiln_conv_rows_thread_floats) per thread. */
void kiln_conv_rows_run(const kiln_conv_geom *c, kiln_threadpool *pool, int isa, const float *packed, const float *x,
                        const float *bias, float *y, float *scratch, size_t thread_floats,
                        const kiln_conv_epilogue *epi);

/* ---- direct 3x3 depthwise (cpu_conv_dw.c), AVX-512 only ----------------------------- */
#define KILN_DW_MAX_OW 1024
/* True when kiln_conv_dw_direct_run handles c on this build (the caller
 * checks the CPU has AVX-512). */
bool kiln_conv_dw_direct_applies(const kiln_conv_geom *c);
void kiln_conv_dw_direct_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *x, const float *w,
                             const float *bias, float *y, const kiln_conv_epilogue *epi);

/* ---- depthwise, any window (cpu_conv_dwk.c), AVX2 + FMA ------------------------------ */
/* True when kiln_conv_dwk_run handles c on this build (the caller checks
 * the CPU has AVX2 and FMA). */
bool kiln_conv_dwk_applies(const kiln_conv_geom *c);
/* Scratch floats each thread needs. */
size_t kiln_conv_dwk_thread_floats(const kiln_conv_geom *c);

/* ---- one GEMM per tap (cpu_conv_taps.c) ------------------------------------------
 * y = conv(x, w) + bias as sum over taps of W_tap [Co, Ci] x the input
 * shifted, over each tap's rectangle of outputs whose input is inside the
 * image; wt from kiln_conv_taps_pack; no epilogue (the caller's). */
bool kiln_conv_taps_applies(const kiln_conv_geom *c);
/* The share of im2col's products that read the image, not padding. */
double kiln_conv_taps_valid_fraction(const kiln_conv_geom *c);
size_t kiln_conv_taps_weight_floats(const kiln_conv_geom *c);
void kiln_conv_taps_pack(const kiln_conv_geom *c, const float *w, float *dst);
size_t kiln_conv_taps_scratch_floats(const kiln_conv_geom *c);
void kiln_conv_taps_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *wt, const float *x,
                        const float *bias, float *y, float *scratch);
void kiln_conv_dwk_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *x, const float *w,
                       const float *bias, float *y, float *scratch, size_t thread_floats,
                       const kiln_conv_epilogue *epi);

#endif
