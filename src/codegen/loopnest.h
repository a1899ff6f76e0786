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
  int parallel_dims;     /* outer loops flattened into the parallel loop; -1 = choose for threads;
                            KILN_PARALLEL_UNTIL_REDUCTION = every loop outside the first one a
                            reduction depends on (GPU mapping: one work item per element, no
                            reduction computed twice) */
  int64_t min_chunk_elems; /* elements of work per parallel chunk at least */
  int unroll_inner;      /* 0/1: ask the compiler to unroll the inner loop */
  int thread_tile;       /* GPU mapping: each thread computes this many consecutive elements of the
                            innermost thread dim (0/1: one), when a reduction reads that dim and the
                            tile divides its extent; their reductions run in one loop, so what they
                            share (MatMul's row of A, Conv's weights) is loaded once per step */
  int group_threads;     /* GPU mapping: threads per group for the contraction template (64 or 256; 0: no
                            template): a nest that is a sum of products (MatMul, Gemm, Conv) is computed in
                            output tiles per group through local memory (kiln_contraction_tiles) */
  bool narrow_indices;   /* GPU mapping (C-family dialects): index arithmetic in 32-bit ints where
                            kiln_loop_nest_fits_int32 holds (int64 buffers keep 64-bit) */
  int min_groups;        /* the template shrinks its tiles until it has this many groups (the device's compute
                            units, a few times over), and leaves a nest too small for half of them to one
                            thread per output */
  int row_threads;       /* GPU mapping: threads per group for cooperative rows (a power of two unless
                            row_subgroups; 0: none): a nest whose reductions all sit at its innermost
                            parallel loop (Softmax, LayerNorm, ReduceMean over trailing axes) computes each
                            row in one group (kiln_cooperative_rows), halved down to 32 for short rows */
  bool row_subgroups;    /* cooperative rows combine their partial results with the dialect's subgroup
                            operations first (GLSL: GL_KHR_shader_subgroup_arithmetic) */
  bool tensorize_gemm;   /* C dialect: contractions over strided matrices become GEMM calls (kiln_gemm_call),
                            tagged convolutions kiln_rt.conv calls (kiln_conv_call) */
  int jam_inner;         /* GPU mapping: the innermost loop, when it is the one serial loop and at most this
                            long, is jammed (kiln_schedule_jam_inner); 0: never */
  bool gemm_any_size;    /* with tensorize_gemm: GEMM calls for products of any size (the cpu's interpreter:
                            the call beats interpreted loops even where it does not beat compiled ones) */
} kiln_loop_schedule;

#define KILN_PARALLEL_UNTIL_REDUCTION (-2)
#define KILN_MAX_THREAD_TILE 8
#define KILN_MAX_JAM 64 /* the longest innermost loop kiln_schedule_jam_inner unrolls */

/* What a loop of the nest becomes. */
typedef enum kiln_loop_kind {
  KILN_LOOP_SERIAL,     /* a plain loop */
  KILN_LOOP_PARALLEL,   /* flattened into the thread pool's parallel loop (cpu) */
  KILN_LOOP_VECTOR,     /* the innermost, contiguous loop, left to the C compiler to vectorize */
  KILN_LOOP_UNROLL,     /* the innermost loop, unrolled (unroll_inner) */
  KILN_LOOP_GPU_THREAD, /* flattened over GPU threads / work items (KILN_PARALLEL_UNTIL_REDUCTION) */
  KILN_LOOP_GPU_BLOCK,  /* split over GPU groups and the threads of each (the contraction template) */
} kiln_loop_kind;

/* The contraction template (TVM's shared-memory GEMM schedule, CUTLASS's
 * threadblock tile): a nest whose element is f(sum_k a * b) (nested sums,
 * outermost first, flattened row-major into one k) with every output loop
 * read by a alone (an M loop), by b alone (an N loop) or by both or neither
 * (a batch loop). Group g computes a tile_m x tile_n block of (M, N) for
 * one batch index; in steps of tile_k over k, its threads first copy a's
 * tile_k x tile_m values and b's tile_k x tile_n values into the two local
 * buffers (zero outside M, N, K), wait at a barrier, then each thread
 * accumulates its (tile_m / threads_m) x (tile_n / threads_n) outputs from
 * local memory, and wait again. The epilogue f and the store run per
 * output once the sums are done. Rows of a thread's block are threads_m
 * apart and columns threads_n apart, so a group's stores and its reads of
 * b's local tile are contiguous across neighbouring threads. */
typedef struct kiln_contraction_tiles {
  int n_red;                          /* 0: not tiled */
  const te_expr *red[KILN_MAX_RANK];  /* the nested sums, outermost first */
  const te_expr *a, *b;               /* the product's factors (a reads the M loops, b the N loops) */
  int n_m, n_n, n_batch;
  int m_loops[KILN_MAX_RANK], n_loops[KILN_MAX_RANK], batch_loops[KILN_MAX_RANK]; /* output loop levels */
  int64_t m, n, k, batch;             /* extents (products of their loops'; k: of the sums') */
  int tile_m, tile_n, tile_k;
  int threads_m, threads_n;
  int64_t groups_m, groups_n;         /* tiles along M and N: groups = batch * groups_m * groups_n */
} kiln_contraction_tiles;

/* Cooperative rows (the GPU mapping of row reductions): group g computes
 * row g of the nest's parallel loops. Each reduction placed at the row's
 * level, with the reductions directly inside it that combine the same way
 * (ReduceSum over several axes: one flattened loop), is split over the
 * group's threads, thread t folding elements t, t + threads, ...; the
 * partial results meet in local memory (a halving tree, or the subgroups'
 * own arithmetic first), and every thread then reads the row's value. The
 * row's elements are stored strided over the threads the same way. */
typedef struct kiln_cooperative_rows {
  int threads;      /* 0: not cooperative */
  bool subgroups;   /* combine within each subgroup first (the dialect's subgroup operations) */
  int64_t rows;     /* groups: the product of the parallel loops' extents */
} kiln_cooperative_rows;

/* A reduction and the reductions directly inside it with the same combine,
 * iterated as one flattened loop of `extent` (cooperative rows). */
typedef struct kiln_reduce_chain {
  const te_expr *red[KILN_MAX_RANK]; /* outermost first */
  int n;
  int64_t extent;                    /* the product of their extents (INT64_MAX past it) */
} kiln_reduce_chain;
void kiln_reduce_chain_of(const te_expr *red, kiln_reduce_chain *out);

/* Tensorization (TVM's tensorize) onto a GEMM primitive, the cpu's packed
 * SGEMM micro-kernels behind kiln_rt.sgemm: a nest whose element is
 * f(sum over k of a * b) with a and b direct f32 loads at affine indices,
 * each a strided matrix per batch index (its M or N run and its K run
 * one stride each, one of them 1), and the output loops ordered batch,
 * M, N. The C dialect renders one call per batch index, C row-major in
 * the output (ldc = n), and f, when it is more than the sum, as the call's
 * per-tile epilogue reading the product where the sum was. */
typedef struct kiln_gemm_call {
  bool ok;                       /* false: not tensorized */
  const te_expr *sum;            /* the outermost sum: the epilogue's raw product */
  int a_buf, b_buf;              /* te buffers of A (M x K) and B (K x N) */
  bool trans_a, trans_b;         /* stored K x M / N x K */
  int64_t m, n, k, batch;
  int64_t lda, ldb;
  int64_t a_off, b_off;          /* elements to the first matrix */
  int n_m, n_n, n_batch;
  int m_loops[KILN_MAX_RANK], n_loops[KILN_MAX_RANK], batch_loops[KILN_MAX_RANK]; /* output loop levels */
  int64_t a_stride[KILN_MAX_RANK], b_stride[KILN_MAX_RANK]; /* elements per step of each batch loop (0: broadcast) */
  /* An integer sum (kiln_rt.igemm): factors int32(a) - a's zero point and
   * int32(b) - b's, a and b uint8 or int8 loads; each zero point a
   * constant (zp_buf -1) or an 8-bit load at a fixed element. The output
   * is int32 or float (the epilogue's, stored over the int32 product). */
  bool integer;
  bool a_signed, b_signed;
  int a_zp_buf, b_zp_buf;
  bool a_zp_signed, b_zp_signed;
  int64_t a_zp, b_zp; /* the constant, or the element of zp_buf */
} kiln_gemm_call;

/* Tensorization onto the runtime's convolution (kiln_rt.conv, the cpu's
 * measured conv algorithms): a nest whose element is f(the sum of a
 * te_conv_tag) for the output index the tag was built for, f reading no
 * other reduction. The C dialect renders one call, f (when it is more
 * than the sum) as its per-tile epilogue. */
typedef struct kiln_conv_call {
  bool ok;              /* false: not tensorized */
  const te_conv_tag *tag; /* borrowed from the builder */
  bool w_constant;      /* the weights' buffer is a graph constant */
  /* f as the call's own epilogue, when it is clip?(sum + bias[co]? +
   * add[i]?) in any order of the sum's terms (Conv's bias, a residual Add
   * at the output's index, Relu or Clip): the buffers (-1: none) and the
   * bounds; then the call needs no generated epilogue. */
  bool native;
  int bias_buf, add_buf;
  bool clip;
  float lo, hi;
  bool y_cn; /* the nest's loops are [co, n, spatial...]: kiln_rt_conv_args.y_cn (the element is the plain sum) */
} kiln_conv_call;

/* Tensorization onto the runtime's pooling (kiln_rt.pooling): a nest whose
 * element is f(a te_pool_tag's value) for the output index the tag was
 * built for, f reading no reduction. The C dialect renders one call, f
 * (when it is more than the pool) as its per-tile epilogue. */
typedef struct kiln_pool_call {
  bool ok;
  const te_pool_tag *tag; /* borrowed from the builder */
  bool scratch;           /* the output is not f32: the routine pools into its scratch, the epilogue stores */
} kiln_pool_call;

/* Tensorization onto the runtime's resampling (kiln_rt.resample), as
 * kiln_pool_call. */
typedef struct kiln_resample_call {
  bool ok;
  const te_resample_tag *tag; /* borrowed from the builder */
} kiln_resample_call;

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
  kiln_loop_kind kinds[KILN_MAX_RANK]; /* per output loop */
  /* Thread tiling (thread_tile > 1, GPU mapping only): thread t computes
   * elements base + j (j < thread_tile) of loop parallel_dims - 1, base =
   * its index in that loop times thread_tile; tile_values[j] is the element
   * with that loop's variable v replaced by v + j (tile_values[0] = value),
   * and every site of all of them is in `sites`. */
  int thread_tile;
  /* Jam (jam_inner > 1, GPU mapping only): the innermost loop, serial
   * after the parallel dims, is not a loop: tile_values[j] is the element
   * at its index j (the variable replaced by the constant), and every
   * site of all of them is in `sites`, so the copies' reductions run as
   * one loop and what their bodies share (attention's scores, which do
   * not depend on the head dim) is computed once per iteration. */
  int jam_inner;
  const te_expr *tile_values[KILN_MAX_JAM];
  kiln_contraction_tiles tiles;   /* tiles.n_red > 0: rendered by the contraction template */
  kiln_cooperative_rows rows;     /* rows.threads > 0: one group per row (not with tiles or thread tiles) */
  kiln_gemm_call gemm;            /* gemm.ok: rendered as GEMM calls (C dialect) */
  kiln_conv_call conv;            /* conv.ok: rendered as a kiln_rt.conv call (C dialect) */
  kiln_pool_call pool;            /* pool.ok: rendered as a kiln_rt.pooling call (C dialect) */
  kiln_resample_call resample;    /* resample.ok: rendered as a kiln_rt.resample call (C dialect) */
  bool index32;                   /* narrow_indices held: render int64 index values as 32-bit ints */
} kiln_loop_nest;

/* Threads (GPU) or parallel iterations (cpu) of a nest: the elements of
 * its parallel dims, divided by the thread tile; with the contraction
 * template or cooperative rows, groups times threads per group. */
int64_t kiln_loop_nest_threads(const kiln_loop_nest *nest);
/* The dispatch of a GPU-mapped nest: groups of kiln_loop_nest_group_size
 * threads, or of `group` when any size does (one thread per element then,
 * the last group partly idle), laid out over x and, past max_per_dim
 * groups in x, over y (out[2] = 1). Every kernel checks its flattened
 * group or thread index against its count, so the rounding is harmless.
 * KILN_UNSUPPORTED when max_per_dim squared is not enough. */
kiln_status_t kiln_loop_nest_dispatch(const kiln_loop_nest *nest, int group, int64_t max_per_dim, uint32_t out[3]);
/* The GPU mapping's index width: whether 32-bit signed arithmetic holds
 * every index of the nest (its extents and their product, every buffer's
 * element count, index constants, reduction extents). int64 buffers count
 * twice their elements when i64_as_pairs (GLSL reads them as int pairs),
 * and otherwise make the answer false (their values are data, not
 * indices). *oom on allocation failure (then false). */
bool kiln_loop_nest_fits_int32(const te_builder *b, const kiln_loop_nest *nest, bool i64_as_pairs, bool *oom);
/* Threads per group the launch must use (the contraction template's), or 0
 * when any group size does. */
int kiln_loop_nest_group_size(const kiln_loop_nest *nest);
/* Whether the nest's element is f(sum of a * b) (nested f32 sums, the
 * factors split into M, N and batch loops as kiln_contraction_tiles
 * describes): fills out's red, a, b, loop lists and extents, no tiles. */
bool kiln_contraction_match(const kiln_loop_nest *nest, kiln_contraction_tiles *out);
/* The same for int32 sums of int32 products (MatMulInteger's). */
bool kiln_contraction_match_i32(const kiln_loop_nest *nest, kiln_contraction_tiles *out);
/* The schedule step of the contraction template: fills nest->tiles (and
 * sets the loop kinds to GPU_BLOCK) when the nest matches and is big
 * enough to be worth it; leaves the nest as it is otherwise.
 * group_threads: 64 or 256 (square thread grids, for GPUs) or 32 (8 x 4
 * threads of up to 8 x 16 outputs, for drivers running a group as SIMD
 * lanes on one CPU core); other values leave the nest. */
void kiln_schedule_contraction_tiles(kiln_loop_nest *nest, int group_threads, int min_groups);
/* The schedule step of jamming (unroll-and-jam of the innermost loop into
 * the thread): a nest with one serial loop, the innermost, of 2 to
 * max_extent (<= KILN_MAX_JAM) iterations, where a reduction reading that
 * loop owns a reduction that does not read it (work each iteration would
 * repeat), gets jam_inner and tile_values; other nests stay as they are.
 * Not with tiles, rows, thread tiles or GEMM calls. KILN_OOM. */
kiln_status_t kiln_schedule_jam_inner(te_builder *b, kiln_loop_nest *nest, int max_extent);
/* The schedule step of tensorization: fills nest->gemm when the nest is
 * a GEMM over strided matrices of at least 8192 multiply-adds (4 or more
 * along each of M, N and K), of any size with any_size (a caller that
 * would otherwise interpret the loops: the call is far faster then). */
void kiln_schedule_gemm(const te_builder *b, kiln_loop_nest *nest, bool any_size);
/* The schedule step of tensorized convolutions: fills nest->conv (see
 * kiln_conv_call). */
void kiln_schedule_conv(const te_builder *b, kiln_loop_nest *nest);
/* The schedule step of tensorized pooling: fills nest->pool (see
 * kiln_pool_call). */
void kiln_schedule_pool(const te_builder *b, kiln_loop_nest *nest);
/* The schedule step of tensorized resampling: fills nest->resample. */
void kiln_schedule_resample(const te_builder *b, kiln_loop_nest *nest);
/* The schedule step of cooperative rows: fills nest->rows (and sets the
 * row loops to GPU_BLOCK, the rest to GPU_THREAD) when every top-level
 * reduction is an f32 one at the innermost parallel loop, each flattened
 * chain fits 32-bit counters, and the rows are either few (at most 256:
 * one thread per row would leave the device idle) or long (16 or more)
 * with some load reading consecutive elements along the chain's innermost
 * loop (so the threads' reads coalesce) and no load that neighbouring rows
 * share (MatMul-like sums: thread tiles reuse those). threads: a power of two unless
 * subgroups, halved (not below min_threads) while half of it still covers
 * the longest row (a fixed size keeps the sources of two shapes equal,
 * which GLSL's specialization constants want). A reduction chain longer
 * than long_chain (when > 0) makes the nest cooperative whatever the rows
 * (a driver that limits loop trips per thread: one thread per row would
 * run past it). Leaves a nest with tiles or thread tiles as it is. KILN_OOM
 * on allocation failure. */
kiln_status_t kiln_schedule_cooperative_rows(const te_builder *b, kiln_loop_nest *nest, int threads, int min_threads,
                                             bool subgroups, int64_t long_chain);

/* Builds the loop nest that stores `root` into buffer out_buf. */
kiln_status_t kiln_schedule_kernel(te_builder *b, const te_tensor *root, int out_buf, const kiln_loop_schedule *s,
                                   kiln_loop_nest *out);
void kiln_loop_nest_free(kiln_loop_nest *n);

/* Renders a loop nest as a C11 function `void NAME(const kiln_rt *rt, void
 * *const *buffers)` appended to `src` (the caller adds kiln_c_preamble()
 * once per source). */
kiln_status_t kiln_render_c(const te_builder *b, const kiln_loop_nest *nest, const char *name, kiln_strbuf *src);
/* kiln_rt.h and the math helpers every generated source starts with. */
const char *kiln_c_preamble(void);

/* CUDA C: the C dialect with one thread per element of the flattened
 * parallel dims (`extern "C" __global__ void NAME(T *b0, const T *b1, ...)`,
 * launched with at least that many threads; serial loops and reductions
 * inside each thread). A source starts with kiln_cuda_preamble() once (the
 * types and math helpers, no system headers: what NVRTC compiles). */
kiln_status_t kiln_render_cuda(const te_builder *b, const kiln_loop_nest *nest, const char *name, kiln_strbuf *src);
const char *kiln_cuda_preamble(void);

/* OpenCL C: the same mapping as CUDA (`__kernel void NAME(__global uchar
 * *p0, ulong o0, ...)`: each buffer a byte pointer and a byte offset,
 * launched with at least as many work items as the flattened parallel dims
 * have elements). A source starts with kiln_opencl_preamble() once. */
kiln_status_t kiln_render_opencl(const te_builder *b, const kiln_loop_nest *nest, const char *name, kiln_strbuf *src);
const char *kiln_opencl_preamble(void);
/* What a source whose kernels store f16/bf16 needs after that preamble
 * (kiln_half.h; the C and CUDA preambles include it). */
const char *kiln_opencl_half_helpers(void);

/* ---- GLSL (Vulkan compute shaders) -------------------------------------------
 *
 * Usage (the vulkan device):
 *   kiln_loop_nest nest;
 *   kiln_schedule_glsl(b, root, 0, &nest);          // GPU parallel dims
 *   kiln_glsl_options o = kiln_glsl_options_default();
 *   kiln_schedule_cooperative_rows(b, &nest, 64, 64, props->subgroup_arithmetic, 0); // optional
 *   o.int64 = props->int64; ...
 *   uint32_t groups[3];
 *   kiln_render_glsl(b, &nest, "k12_softmax", &o, &src, groups);
 *   // vk_kernel_desc{name, src.data, te_buffer_count(b), 0}; binding i = te buffer i;
 *   // vk_stream_dispatch(..., groups[0], groups[1], groups[2]) (skip it when groups[0] is 0)
 */
/* Specialization constants of a GLSL source: constant_id first_id + i has
 * value values[i]. The renderers and the vulkan kernel generators write
 * sizes, strides and offsets as such constants instead of literals, so two
 * kernels that differ only in shapes have the same source (one SPIR-V
 * module, compiled once) and the driver still folds the values when it
 * creates the pipeline. */
typedef struct kiln_glsl_spec {
  int first_id;    /* constant_id of values[0] */
  int n, cap;
  int32_t *values; /* owned; kiln_glsl_spec_free */
  bool oom;        /* an add failed */
} kiln_glsl_spec;
/* Appends v; returns its constant_id (first_id + index), or -1 when out of memory (and sets oom). */
int kiln_glsl_spec_add(kiln_glsl_spec *s, int32_t v);
/* The constant_id of an existing entry equal to v, else appends it like kiln_glsl_spec_add. */
int kiln_glsl_spec_intern(kiln_glsl_spec *s, int32_t v);
void kiln_glsl_spec_free(kiln_glsl_spec *s); /* frees values; keeps first_id; NULL ok */

typedef struct kiln_glsl_options {
  uint32_t workgroup_size;  /* invocations per workgroup (local_size_x) of a nest that takes any group size
                               (no tiles, no cooperative rows: those bring their own); 0 = 64 */
  bool int64;               /* device has shaderInt64: kernels with indices past 2^31-1 use int64 arithmetic
                               (else they are KILN_UNSUPPORTED) */
  uint32_t max_groups;      /* workgroups per dispatch dimension at most; 0 = 65535 */
  bool fp16;                /* f32 te buffers hold IEEE half (float16_t[], GL_EXT_shader_16bit_storage; the
                               device needs storageBuffer16BitAccess, vk_device_props.fp16): loads convert to
                               float, all arithmetic, reductions and shared memory stay f32, stores round to
                               float16_t (the device's f32->f16 conversion: round to nearest even on lavapipe
                               and the desktop GPUs). Element indices are unchanged (2 bytes each); a binding's
                               size must be rounded up to 4 bytes. false: f32 buffers, byte-identical source. */
  bool fp16_arith;          /* with fp16: the contraction template's local tiles hold half and it multiplies and
                               sums runs of 4 k's in half, each run's sum added to an f32 accumulator (GPUs: half
                               FMA at twice the rate, half the shared memory); false: f32 arithmetic */
  kiln_glsl_spec *spec;     /* NULL: sizes are literals in the source (byte-identical to before). Else
                               shape-dependent integers are specialization constants interned here (ids
                               from spec->first_id; borrowed; the caller frees it): see kiln_render_glsl */
  int64_t max_loop_trips;   /* the driver ends any loop after this many iterations per invocation (llvmpipe:
                               65535, with no error): a kernel that needs more is KILN_UNSUPPORTED. 0: none */
} kiln_glsl_options;

kiln_glsl_options kiln_glsl_options_default(void); /* 64, no int64, 65535, f32, no spec, no trip limit */

/* Parallel dims for a GPU: every loop down to the outermost level a
 * reduction is hoisted to (so no reduction is recomputed per element), all
 * loops when there is none. Give it a nest scheduled with parallel_dims = 0
 * (sites then keep their natural levels). */
int kiln_glsl_parallel_dims(const kiln_loop_nest *nest);
/* kiln_schedule_kernel with parallel_dims from kiln_glsl_parallel_dims. */
kiln_status_t kiln_schedule_glsl(te_builder *b, const te_tensor *root, int out_buf, kiln_loop_nest *out);

/* Renders the nest as a complete compute shader (#version 450, appended to
 * `src`): te buffer i is `layout(std430, set = 0, binding = i) buffer` (f32
 * as float[], or float16_t[] with opts->fp16, i32/u32 as int/uint[], i64 as int64_t[] or int pairs, 8/16-bit
 * inputs packed in uint[] with the buffer padded to 4 bytes; the output
 * must be f32/i32/u32/i64). Each invocation computes one iteration of the
 * flattened parallel loop (nest->parallel_dims outer loops), or one
 * workgroup one row with cooperative rows. out_groups: the dispatch size.
 * KILN_UNSUPPORTED for what GLSL cannot express here (f64/f16 data,
 * unknown math functions, 64-bit indices without opts->int64). opts NULL =
 * defaults.
 *
 * Specialization constants (opts->spec non-NULL): every integer the source
 * would print for index arithmetic (extents, strides, the divisors and
 * moduli that unflatten the parallel index, serial loop bounds, buffer
 * offsets and other index constants of the expressions, the `gid >= total`
 * bound and the dispatch span, the cooperative kernels' row count and row
 * length) is written `KS<id>` with id = kiln_glsl_spec_intern(opts->spec,
 * value), and declared `layout(constant_id = <id>) const int KS<id> = 1;`
 * before main (after the buffers and helpers), once per id, in id order.
 * Equal values share one id. Values stay literals where they decide the
 * structure or must be constant expressions: -1, 0 and 1; the workgroup
 * size (local_size_x, shared-array sizes, the cooperative loops' step);
 * binding numbers; the dtype-only shifts and masks of packed 8/16-bit
 * loads and of int pairs; float, bool and uint data constants; and every
 * integer of a kernel with 64-bit indices (opts->int64 in use). Two nests
 * that differ only in sizes (and whose distinct sizes stay distinct) then
 * render to the same source; the caller passes spec->values as the
 * pipeline's VkSpecializationInfo (vk_kernel_desc.spec, id first_id + i =
 * values[i]). Out of memory growing the list: KILN_OOM. */
kiln_status_t kiln_render_glsl(const te_builder *b, const kiln_loop_nest *nest, const char *name,
                               const kiln_glsl_options *opts, kiln_strbuf *src, uint32_t out_groups[3]);
#endif
