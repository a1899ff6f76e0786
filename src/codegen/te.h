/* te.h — tensor expressions: the IR between graph ops and loop nests.
 *
 * A kernel computes one output tensor element by element: out[i0..in] =
 * body(i0..in), where `body` is an expression over index variables, loads
 * from the kernel's buffers at computed linear indices, arithmetic, select,
 * casts, math calls, and reductions (TE_REDUCE: a combine over a reduction
 * variable's range). Expressions are hash-consed in a te_builder: building
 * the same expression twice returns the same node, so common
 * subexpressions and repeated reductions are shared by construction.
 *
 * Ops lower to "tensor views" (te_tensor): a view is either a buffer (a
 * kernel argument: graph input, weight, or the output of another kernel) or
 * a compute (an op applied to other views). te_at() asks a view for the
 * expression of one element; for a compute view it inlines the op, which is
 * how fusion happens (TVM's compute_inline): a chain of elementwise,
 * broadcast and movement ops becomes one expression, read straight from the
 * chain's inputs.
 *
 * All nodes live in the builder's arena and die with it. Not thread-safe.
 */
#ifndef KILN_CODEGEN_TE_H
#define KILN_CODEGEN_TE_H

#include "ir/graph.h"

typedef enum te_op {
  TE_CONST,  /* literal: f (floats) or i (ints, bools) */
  TE_VAR,    /* index variable `var` (int64) */
  TE_LOAD,   /* buffers[buf][a] */
  /* unary (a) */
  TE_NEG, TE_NOT, TE_ABS, TE_CAST, /* TE_CAST converts a to dtype */
  TE_CALL1,  /* fn(a): exp, log, tanh, sqrt, erf, ... (fn names the C helper) */
  /* binary (a, b) */
  TE_ADD, TE_SUB, TE_MUL, TE_DIV, TE_MOD, TE_MIN, TE_MAX,
  TE_LT, TE_LE, TE_EQ, TE_NE, TE_AND, TE_OR, TE_XOR,
  TE_CALL2,  /* fn(a, b): pow, fmod, ... */
  TE_SELECT, /* a ? b : c */
  TE_REDUCE, /* combine(init, body over var in [0, extent)); combine in `rop` */
} te_op;

typedef enum te_reduce_op { TE_RSUM, TE_RPROD, TE_RMAX, TE_RMIN } te_reduce_op;

typedef struct te_expr te_expr;
struct te_expr {
  te_op op;
  kiln_dtype dtype;  /* result type; comparisons give BOOL; indices I64 */
  double f;          /* TE_CONST of float dtype */
  int64_t i;         /* TE_CONST of integer/bool dtype */
  int var;           /* TE_VAR; TE_REDUCE: its reduction variable */
  int buf;           /* TE_LOAD */
  int64_t extent;    /* TE_REDUCE */
  te_reduce_op rop;  /* TE_REDUCE */
  const char *fn;    /* TE_CALL1/2: static string */
  te_expr *a, *b, *c;
  uint64_t hash;
  int id;            /* dense id within the builder (for renderers' tables) */
  te_expr *next_in_bucket;
};

/* A kernel argument. */
typedef struct te_buffer {
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int value_id; /* the graph value it holds, or -1 for scratch */
  bool constant; /* a graph constant: the same data at every launch (a runtime call may prepare it once) */
} te_buffer;

typedef struct te_builder te_builder;

kiln_status_t te_builder_create(te_builder **out);
void te_builder_destroy(te_builder *b);
/* Sticky out-of-memory: builders return NULL after a failed allocation and
 * te_builder_status reports it once at the end. */
kiln_status_t te_builder_status(const te_builder *b);

/* Buffers: index in the kernel's argument list. */
int te_add_buffer(te_builder *b, kiln_dtype dtype, int rank, const int64_t *dims, int value_id);
int te_buffer_count(const te_builder *b);
const te_buffer *te_get_buffer(const te_builder *b, int i);
/* Marks buffer i as holding a graph constant (te_buffer.constant). */
void te_buffer_set_constant(te_builder *b, int i);
/* Fresh index variable. */
int te_new_var(te_builder *b);
/* Index variable `var` runs over [0, extent): index divisions and
 * remainders by constants built afterwards simplify with that range. */
void te_set_var_extent(te_builder *b, int var, int64_t extent);
int te_var_count(const te_builder *b);
int te_expr_count(const te_builder *b);
/* Whether the builder holds an expression of dtype dt (any it interned,
 * used by the kernel or not): a half cast inside a fused kernel whose
 * buffers are all f32 needs the dialect's half conversions too. */
bool te_has_dtype(const te_builder *b, kiln_dtype dt);

te_expr *te_const_f(te_builder *b, kiln_dtype dtype, double v);
te_expr *te_const_i(te_builder *b, kiln_dtype dtype, int64_t v);
te_expr *te_var(te_builder *b, int var);
te_expr *te_load(te_builder *b, int buf, te_expr *index);
te_expr *te_unary(te_builder *b, te_op op, te_expr *a);
te_expr *te_cast(te_builder *b, kiln_dtype to, te_expr *a);
te_expr *te_call1(te_builder *b, const char *fn, te_expr *a);
/* Arithmetic on indices folds constants (i*1, i+0, c1*c2, ...). */
te_expr *te_binary(te_builder *b, te_op op, te_expr *a, te_expr *x);
te_expr *te_call2(te_builder *b, const char *fn, te_expr *a, te_expr *x);
te_expr *te_select(te_builder *b, te_expr *cond, te_expr *a, te_expr *x);
te_expr *te_reduce(te_builder *b, te_reduce_op rop, int var, int64_t extent, te_expr *body);

/* Index helpers (int64 arithmetic with folding). */
te_expr *te_idx(te_builder *b, int64_t v);
te_expr *te_iadd(te_builder *b, te_expr *a, te_expr *x);
te_expr *te_imul(te_builder *b, te_expr *a, int64_t c);
te_expr *te_idiv(te_builder *b, te_expr *a, int64_t c);
te_expr *te_imod(te_builder *b, te_expr *a, int64_t c);

/* The type a comparison of a and b compares in (C's usual arithmetic
 * conversions as the renderers apply them: f64, then a float, then int64,
 * then uint32 for two uint32s, else int32). */
kiln_dtype te_compare_dtype(kiln_dtype a, kiln_dtype b);

/* e with every use of index variable `var` replaced by `with` (reduction
 * variables are kept, so a substituted reduction still loops over the same
 * variable as the original: renderers can run both in one loop). What does
 * not read `var` is returned as is, so copies share it by construction. */
te_expr *te_substitute(te_builder *b, te_expr *e, int var, te_expr *with);

/* True if `e` reads index variable `var` (outside reductions binding it). */
bool te_uses_var(const te_expr *e, int var);

/* An integer index expression as sum coef[i] * v<var[i]> + c0 (at most
 * 2 * KILN_MAX_RANK + 2 variables). */
typedef struct te_affine {
  int n;
  int var[2 * KILN_MAX_RANK + 2];
  int64_t coef[2 * KILN_MAX_RANK + 2];
  int64_t c0;
} te_affine;
/* Whether e is affine in its variables (sums, differences, negations and
 * products with integer constants, without overflow); fills out. */
bool te_affine_of(const te_expr *e, te_affine *out);
/* The coefficient of `var` (0 when absent). */
int64_t te_affine_coef(const te_affine *a, int var);

/* ---- tensor views ---------------------------------------------------------- */

typedef enum te_view_kind {
  TE_VIEW_BUFFER,
  TE_VIEW_COMPUTE,
} te_view_kind;

typedef struct te_tensor te_tensor;
/* Builds element idx[0..rank) of a compute view. */
typedef te_expr *(*te_compute_fn)(te_builder *b, const te_tensor *self, te_expr *const *idx);

struct te_tensor {
  te_view_kind kind;
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int buf;                      /* BUFFER */
  te_compute_fn compute;        /* COMPUTE */
  const te_tensor *in[8];       /* COMPUTE: operand views */
  int n_in;
  int64_t p[4 * KILN_MAX_RANK]; /* COMPUTE: op parameters (perm, starts, axes...) */
  double fp[4];                 /* COMPUTE: float parameters (alpha, beta...) */
  int ip;                       /* COMPUTE: a small enum parameter (which unary op...) */
  const char *sp;               /* COMPUTE: a string that outlives the lowering (a math fn; an attribute of the graph's node) */
};

/* ---- op tags ---------------------------------------------------------------
 *
 * What a schedule may map onto a library routine instead of loops
 * (TVM's compute tags): the definition that built a reduction records
 * what it computes, and a target's schedule looks it up. A tag is a
 * promise about the expression it names, so it is only recorded where the
 * promise holds (operands read straight from buffers). */

/* A convolution (ONNX Conv, NCHW, f32, no bias): `reduce` is the sum over
 * input channels and window of x * w for output element idx[0..2+nsp).
 * transposed: an ONNX ConvTranspose (w is [ci, co/group, k...], output
 * position o gathers input i and tap k where o = i*stride - pad_begin +
 * k*dilation; pad_begin may be negative). */
typedef struct te_conv_tag {
  const te_expr *reduce;
  const te_expr *idx[2 + 3]; /* the output index the reduction was built for (hash-consed nodes) */
  int x_buf, w_buf;
  int nsp;
  bool transposed;
  int64_t n, ci, co, group;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3];
  /* ConvInteger: the int32 sum of (x - x_zp) * (w - w_zp), x and w 8-bit
   * buffers; the zero points' buffers (-1: none) and w_zp's length (1 or
   * one per output channel). */
  bool integer;
  int x_zp_buf, w_zp_buf;
  int64_t w_zp_count;
} te_conv_tag;

/* Records a tag (copied); out of memory is the builder's sticky error. */
void te_tag_conv(te_builder *b, const te_conv_tag *tag);
/* The tag recorded for this reduction, or NULL. */
const te_conv_tag *te_conv_tag_of(const te_builder *b, const te_expr *reduce);

/* A windowed pool (ONNX MaxPool without Indices, or AveragePool; NC +
 * 1-3 spatial dims, f32): `value` is the whole element for output idx —
 * the max reduction, or the average's quotient (sum over the window's
 * elements inside the input, divided by their count; with
 * count_include_pad by the count inside the input padded by pad_begin and
 * pad_end, as AveragePool's definition in lower.c builds it). */
typedef struct te_pool_tag {
  const te_expr *value;
  const te_expr *idx[2 + 3];
  int x_buf;
  int nsp;
  bool max, count_include_pad;
  int64_t n, c;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
} te_pool_tag;

/* Records a pool tag (copied); out of memory is the builder's sticky error. */
void te_tag_pool(te_builder *b, const te_pool_tag *tag);
/* The pool tag recorded for this expression, or NULL. */
const te_pool_tag *te_pool_tag_of(const te_builder *b, const te_expr *value);

/* A resampling (kiln.Resample: Resize with constant tables, f32, no
 * extrapolation value): `value` is the element for output idx, the sum
 * over each resampled axis' taps of the weights' product times x at the
 * taps' input indices (clamped into the input). Per resampled axis (at
 * most 3, in axis order): its axis, its [out, taps] int32 index table's
 * buffer and its f32 weight table's (-1: nearest, weight 1). */
typedef struct te_resample_tag {
  const te_expr *value;
  const te_expr *idx[KILN_MAX_RANK];
  int x_buf;
  int rank;
  int64_t in[KILN_MAX_RANK], out[KILN_MAX_RANK];
  int n_axes;
  int axis[3], index_buf[3], weight_buf[3];
  int64_t taps[3];
} te_resample_tag;

void te_tag_resample(te_builder *b, const te_resample_tag *tag);
const te_resample_tag *te_resample_tag_of(const te_builder *b, const te_expr *value);

te_tensor *te_view_buffer(te_builder *b, int buf);
te_tensor *te_view_compute(te_builder *b, kiln_dtype dtype, int rank, const int64_t *dims, te_compute_fn fn);
/* Element idx of view t. */
te_expr *te_at(te_builder *b, const te_tensor *t, te_expr *const *idx);
/* Element of `t` for an index of a broadcast output of rank out_rank
 * (numpy rules: leading dims missing, dims of size 1 read index 0). */
te_expr *te_at_broadcast(te_builder *b, const te_tensor *t, int out_rank, te_expr *const *idx);
/* Row-major linear index of idx in dims. */
te_expr *te_linearize(te_builder *b, int rank, const int64_t *dims, te_expr *const *idx);

#endif
