/* render_internal.h — the one C-family emitter behind every renderer.
 *
 * kiln_render_c (render_c.c) and kiln_render_glsl (render_glsl.c) walk a
 * loop nest the same way: each non-trivial subexpression becomes a `const`
 * local in the innermost scope that needs it (the DAG is hash-consed, so
 * shared subexpressions are computed once), each reduction becomes an
 * accumulator and a loop at the level the scheduler hoisted it to. What
 * differs between the languages is a few dozen strings and a handful of
 * hooks: type names, literal syntax, math function names, NaN-propagating
 * min/max, loads, casts. Those live in a render_dialect (tinygrad's
 * CStyleLanguage); the walk lives in render.c. Entry points, buffer
 * declarations and thread indexing are each renderer's own.
 *
 * Internal to src/codegen/render*.c. Not thread-safe per context (one
 * context renders one kernel); dialects are immutable tables.
 */
#ifndef KILN_CODEGEN_RENDER_INTERNAL_H
#define KILN_CODEGEN_RENDER_INTERNAL_H

#include "base/strbuf.h"
#include "codegen/loopnest.h"

typedef struct render_ctx render_ctx;

typedef struct render_dialect {
  const char *what; /* "C renderer": prefixes error messages */
  /* Type name of a local holding a value of dt; NULL if the target has none. */
  const char *(*value_type)(const render_ctx *r, kiln_dtype dt);
  /* Literals into buf. */
  void (*int_literal)(const render_ctx *r, kiln_dtype dt, int64_t v, char *buf, size_t n);
  void (*float_literal)(const render_ctx *r, kiln_dtype dt, double v, char *buf, size_t n);
  /* Name of the target function for TE_CALL1/TE_CALL2 `fn` (lower.c names
   * the C helpers); NULL if the target has none. */
  const char *(*call_name)(const char *fn);
  /* Appends the right-hand side of `const T eN = ...` for ops that differ
   * between targets: TE_LOAD, TE_ABS, TE_CAST, TE_MIN, TE_MAX, TE_MOD.
   * a, b: operand names (already converted when convert_operands). Returns
   * false if the op cannot be expressed. */
  bool (*special)(render_ctx *r, const te_expr *e, const char *a, const char *b);
  /* Accumulator initial value of a reduction into buf. */
  void (*reduce_init)(const render_ctx *r, const te_expr *red, char *buf, size_t n);
  /* Appends the statement `acc = combine(acc, x);` (no indent, with "\n"). */
  void (*reduce_combine)(render_ctx *r, const te_expr *red, const char *acc, const char *x);
  /* Emits the statement storing `value` at element `index` (text: the
   * row-major linear index) of the nest's output buffer, indented. */
  void (*store)(render_ctx *r, const kiln_loop_nest *nest, const char *index, const te_expr *value);
  /* Operands of a different type than an op computes in are converted with
   * a constructor, `T(x)` (GLSL has almost no implicit conversions); C
   * relies on its usual arithmetic conversions. */
  bool convert_operands;
} render_dialect;

struct render_ctx {
  const render_dialect *d;
  const te_builder *b;
  kiln_strbuf *s;      /* output, borrowed */
  int *emitted;        /* scope depth an expression was emitted at, or -1; owned */
  int *scope_stack;    /* expression ids emitted, in order, for unwinding; owned */
  int n_stack, cap_stack;
  int depth;
  int indent;
  bool bad;            /* an expression the renderer cannot express */
  char why[160];       /* what it was (first one), for the error message */
  /* Dialect state (GLSL). */
  bool idx64;          /* index arithmetic in 64-bit integers */
  bool idx32;          /* C dialect on a GPU: int64 (index) values as int (kiln_loop_nest_fits_int32 said so) */
  const char *buf_prefix; /* buffer names: prefix + index ("b") */
  /* Loop passes per thread: a driver that stops every loop of an
   * invocation once their passes together reach max_trips (llvmpipe:
   * 65535, silently) fails the render past it (render_trips_enter). */
  int64_t max_trips;      /* 0: no limit */
  int64_t trips_spent;    /* passes of the loops rendered so far, each loop's trips * (count + 1) */
  /* C on CPUs: a leaf f32/f64 reduction of at least 32 elements keeps
   * up to reduce_lanes partial accumulators (halved down to 8 until the
   * extent holds eight steps), combined at the end, so the compiler can
   * vectorize it (a single accumulator is a serial chain it may not
   * reorder); 0/1: one accumulator. */
  int reduce_lanes;
  int64_t trips;          /* product of the enclosing loops' counts */
  int64_t trip_stack[3 * KILN_MAX_RANK + 8];
  int n_trips;
};

/* Allocates the per-expression tables; r is fully initialized. */
kiln_status_t render_init(render_ctx *r, const render_dialect *d, const te_builder *b, kiln_strbuf *s);
void render_free(render_ctx *r);
/* Records the first reason the kernel cannot be rendered. */
void render_fail(render_ctx *r, const char *fmt, ...) KILN_PRINTF(2, 3);

void render_indent(render_ctx *r);
void render_open_scope(render_ctx *r);
void render_close_scope(render_ctx *r);
/* How an expression is referred to: a literal, vN, rN or eN. */
void render_name_of(render_ctx *r, const te_expr *e, char *buf, size_t n);
/* Emits e and everything it needs as locals of the current scope. */
/* Records that e was declared (under its render_name_of name) in the
 * current scope by the caller: render_ensure will not compute it again. */
void render_mark_emitted(render_ctx *r, const te_expr *e);
void render_ensure(render_ctx *r, const te_expr *e);
/* Name of e as an operand of type `want` (converted when the dialect needs
 * explicit conversions and the target types differ). */
void render_operand(render_ctx *r, const te_expr *e, kiln_dtype want, char *buf, size_t n);
/* One indented line of printf text (at most 1 KiB) and "\n". */
void render_line(render_ctx *r, const char *fmt, ...) KILN_PRINTF(2, 3);
/* `const T v<vars[i]> = ...` for each (var, extent), row-major from the
 * index text `flat` (index type T). */
void render_unflatten(render_ctx *r, const char *flat, const int *vars, const int64_t *extents, int n);
/* The same for the nest's output loops at levels loops[0..n). */
void render_unflatten_loops(render_ctx *r, const kiln_loop_nest *nest, const char *flat, const int *loops, int n);
/* Enters / leaves a loop of `count` iterations (render_loop_open and
 * render_loop_close do it; templates call it around their own loops). */
/* Enters a loop of `count` iterations per pass of the enclosing ones (its
 * passes count against max_trips); _unrolled: a loop of constant count
 * marked for unrolling (render_gpu_dialect.unroll), which the driver
 * unrolls, so it spends none. render_trips_leave closes either. */
void render_trips_enter(render_ctx *r, int64_t count);
void render_trips_enter_unrolled(render_ctx *r, int64_t count);
void render_trips_leave(render_ctx *r);
/* Emits `for (T vN = 0; vN < extent; vN++) {` (indented) and opens a scope. */
void render_loop_open(render_ctx *r, int var, int64_t extent);
/* Closes a scope opened by render_loop_open and emits `}`. */
void render_loop_close(render_ctx *r);
/* Emits the reductions placed at output level `level` (owner NULL) or inside
 * reduction `owner`, in dependency order. */
void render_emit_sites(render_ctx *r, const kiln_loop_nest *nest, int level, const te_expr *owner);
/* The element of a C-family kernel at flat parallel index `f` (render_c.c):
 * shared by the C and CUDA renderers. */
void render_c_element(render_ctx *r, const kiln_loop_nest *nest);
/* Stores `value` (emitted) at the row-major index of the output loops'
 * v<var>, with `offset` added to loop offset_loop's index (a thread tile's
 * copy), through the dialect's store. */
void render_store(render_ctx *r, const kiln_loop_nest *nest, int offset_loop, int offset, const te_expr *value);
/* `  T *b<i> = (T *)buffers[i];` for every te buffer (render_c.c). */
void render_c_declare_buffers(render_ctx *r, const kiln_loop_nest *nest);
/* The entry point NAME of a nest with gemm.ok and its helpers
 * (render_gemm.c): GEMM calls through kiln_rt.sgemm. */
void render_c_gemm(render_ctx *r, const kiln_loop_nest *nest, const char *name);
/* `static void NAME_epilogue(void *vctx, float *c, int64_t ldc, ...) {`: the
 * opening of a kiln_rt_epilogue_fn a tensorized kernel passes to its call. */
void render_c_epilogue_head(render_ctx *r, const char *name, bool integer);
/* Inside an epilogue's loops over a tile (i, j): the element, with the
 * call's result in c standing for `sum`, written back in place. */
void render_c_epilogue_element(render_ctx *r, const kiln_loop_nest *nest, const te_expr *sum);
/* The entry point NAME of a nest with conv.ok and its epilogue
 * (render_conv.c): one kiln_rt.conv call. */
void render_c_conv(render_ctx *r, const kiln_loop_nest *nest, const char *name);
void render_c_pool(render_ctx *r, const kiln_loop_nest *nest, const char *name);
void render_c_resample(render_ctx *r, const kiln_loop_nest *nest, const char *name);
/* Emits one reduction: accumulator, loop, nested sites, combine. */
void render_emit_reduce(render_ctx *r, const kiln_loop_nest *nest, const te_expr *red);

/* What a GPU language spells its own way in the group templates
 * (contraction tiles, cooperative rows). */
typedef struct render_gpu_dialect {
  const char *group_id;   /* expression: the group's flattened index, of the dialect's index type */
  const char *local_id;   /* expression: the thread's index in its group, int */
  const char *local_decl; /* qualifier of an array in the group's local memory */
  const char *barrier;    /* statement: every thread of the group waits, local writes visible */
  bool exact_groups;      /* the launch has exactly the nest's groups (else the templates check the bound) */
  const char *vec4_type;  /* four floats (vec4, float4): the contraction template's local tiles hold them when
                             each thread's block is a multiple of 4 both ways; NULL: scalar tiles */
  const char *vec4_lane;  /* printf format, arguments (array, element, lane): an lvalue naming one float of a
                             local array of vec4_type (GLSL indexes the vector; C dialects cast the array) */
  /* Half tiles (NULL: f32): the local tiles hold half_type (half4_type
   * where they hold vectors) and each run of 4 k's is multiplied and summed
   * in half, the run's sum added to the f32 accumulator; a dialect setting
   * them spells conversions as constructors (`float(x)`, GLSL). */
  const char *half_type, *half4_type;
  /* Writes the expression of the four f32s of buffer `buf` from element
   * `index` on (a multiple of 4) as one vec4_type load; false where the
   * dialect cannot (GLSL with half storage). NULL: never. */
  bool (*vec4_load)(render_ctx *r, int buf, const char *index, char *out, size_t n);
  /* Cooperative rows with subgroups: emits statements that combine each
   * subgroup's `acc` (of reduction red) into kiln_red[subgroup index],
   * wait, and define `const float r<red id>` as the combination of them
   * all (threads: the group's). NULL: the dialect has none (the halving tree is used). */
  void (*subgroup_combine)(render_ctx *r, const te_expr *red, const char *acc, int threads);
  /* Prefix of a loop of constant count that the driver must unroll (GLSL:
   * "[[unroll]] ", GL_EXT_control_flow_attributes, which Mesa's NIR honours
   * whatever the size); NULL: none, the loop's passes count. */
  const char *unroll;
} render_gpu_dialect;
/* Declares the group's local arrays a templated nest uses (nothing for
 * other nests), each `<local_decl> float name[n];`: at the top of an OpenCL
 * or CUDA kernel body, before main in GLSL (shared variables are global). */
void render_gpu_locals(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g);
/* The body of a nest with tiles.n_red > 0 (render_tiles.c), after the
 * buffer locals. Every thread of the launch must run it (no early return:
 * it has barriers). */
void render_contraction_tiles(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g);
/* The buffer the contraction template's copy of factor a (which = 0) or b
 * (1) reads four elements at a time, or -1: the factor is an f32 load at an
 * affine index with unit stride along the copy's contiguous run (a: the k
 * loops, b: the N loops), whose extent is a multiple of 4, and every
 * other coefficient and the offset multiples of 4, so that four
 * consecutive elements of the slab are one aligned vec4. */
int render_tiles_vec4_buffer(const kiln_loop_nest *nest, int which);
/* The body of a nest with rows.threads > 0 (render_rows.c), after the
 * buffer locals: returns early only for a whole group past the last row. */
void render_cooperative_rows(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g);

#endif
