/* Transformer-era ops of opsets 18-28 (family "transformer"):
 *
 *   Gelu-20            the formula of kiln.Gelu (one kernel: ops/fused.c)
 *   Swish-24           x * sigmoid(alpha x)
 *   SwiGLU-28          Swish_alpha(A) * B, A and B of one shape
 *   Mish-18            x * tanh(softplus(x))
 *   RMSNormalization-23  X / sqrt(mean(X^2 over axis..) + eps), times scale
 *   GroupNormalization-18/21  scale and bias per group (18) or per channel (21)
 *   RotaryEmbedding-23 RoPE over [B, H, S, D] or [B, S, H*D] (num_heads)
 *   LinearAttention-27 the linear / gated / delta / gated_delta recurrences
 *   CausalConvWithState-27  a depthwise causal Conv1d over past state ++ input
 *
 * Reference kernels in the nn style (ops/nn_internal.h): values read as
 * double, computed in double, rounded once on store, except where the ONNX
 * function casts an intermediate to the input's type (the normalized value
 * of RMS- and GroupNormalization-21, a CausalConvWithState's convolution
 * before its activation): that rounding is kept. */
#include "ops/nn_internal.h"
#include "ops/gradient.h"

#include <math.h>
#include <stdio.h>


static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

/* Input i's type if present and a tensor, else NULL. */
static const kiln_type *in_type(const kiln_infer_ctx *ctx, int i) {
  if (i >= ctx->n_inputs || !ctx->inputs[i] || ctx->inputs[i]->kind != KILN_TYPE_TENSOR) return NULL;
  return ctx->inputs[i];
}

static bool want_output(const kiln_kernel_ctx *ctx, int i) { return i < ctx->n_outputs && ctx->output_wanted[i]; }

/* Inputs i and j of one dtype; an error naming both otherwise. */
static kiln_status_t same_dtype(const kiln_tensor *a, int i, const char *an, const kiln_tensor *b, int j,
                                const char *bn) {
  if (a->dtype != b->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input %d (%s)", j, bn,
                      kiln_dtype_name(b->dtype), kiln_dtype_name(a->dtype), i, an);
  return NULL;
}

static kiln_status_t require_rank(const kiln_tensor *t, int i, const char *name, int rank, const char *layout) {
  char s[256];
  if (t->rank != rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected rank %d (%s)", i, name,
                      kiln_shape_str(t->rank, t->dims, s, sizeof s), rank, layout);
  return NULL;
}

/* A stash_type attribute: a float dtype. */
static kiln_status_t stash_dtype(const kiln_node *node) {
  int64_t st = kiln_attr_int(node, "stash_type", 1);
  if (!kiln_dtype_is_valid((int)st) || !kiln_dtype_is_float((kiln_dtype)st))
    return kiln_error(KILN_INVALID_MODEL, "attribute stash_type: %lld is not a float dtype", (long long)st);
  return NULL;
}

/* ---- elementwise activations ------------------------------------------------- */

static kiln_status_t gelu_mode_check(const kiln_node *node) {
  const char *a = kiln_attr_string(node, "approximate", "none");
  if (strcmp(a, "none") && strcmp(a, "tanh"))
    return kiln_error(KILN_INVALID_MODEL, "attribute approximate: \"%s\", expected \"none\" or \"tanh\"", a);
  return NULL;
}

static kiln_status_t gelu_infer(kiln_infer_ctx *ctx) {
  KILN_TRY(gelu_mode_check(ctx->node));
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t gelu_kernel(kiln_kernel_ctx *ctx) {
  KILN_TRY(gelu_mode_check(ctx->node));
  return kiln_gelu_ref_kernel(ctx);
}

static kiln_status_t unary_infer(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

typedef double (*unary_fn)(double x, double alpha);

static double swish(double x, double alpha) { return x * sigmoid(alpha * x); }

static double mish(double x, double alpha) {
  (void)alpha;
  double sp = x > 30 ? x : log1p(exp(x)); /* softplus; exact in double past 30 */
  return x * tanh(sp);
}

static kiln_status_t unary_kernel(kiln_kernel_ctx *ctx, unary_fn f, double alpha) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, x->dtype, x->rank, x->dims, &y));
  for (int64_t i = 0; i < x->numel; i++) kiln_store_f64(y->data, y->dtype, i, f(kiln_load_f64(x->data, x->dtype, i), alpha));
  return NULL;
}

static kiln_status_t swish_kernel(kiln_kernel_ctx *ctx) {
  return unary_kernel(ctx, swish, kiln_attr_float(ctx->node, "alpha", 1.0f));
}

static kiln_status_t mish_kernel(kiln_kernel_ctx *ctx) { return unary_kernel(ctx, mish, 0); }

/* SwiGLU: no broadcasting, A and B of one shape and dtype. */
static kiln_status_t swiglu_infer(kiln_infer_ctx *ctx) {
  const kiln_type *a = in_type(ctx, 0), *b = in_type(ctx, 1);
  if (a && b) {
    char s[256], t[256];
    if (a->dtype && b->dtype && a->dtype != b->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): dtype %s, expected %s like input 0 (A)",
                        kiln_dtype_name(b->dtype), kiln_dtype_name(a->dtype));
    bool differ = a->rank >= 0 && b->rank >= 0 && a->rank != b->rank;
    for (int i = 0; !differ && a->rank >= 0 && i < a->rank && i < b->rank; i++)
      differ = a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i];
    if (differ)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): shape %s, expected %s like input 0 (A) (no broadcasting)",
                        kiln_shape_str(b->rank, b->dims, s, sizeof s), kiln_shape_str(a->rank, a->dims, t, sizeof t));
    if (a->rank < 0 && b->rank >= 0) return kiln_infer_same_as_input(ctx, 1, 0);
  }
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t swiglu_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(nn_require_float(a, 0, "A"));
  KILN_TRY(same_dtype(a, 0, "A", b, 1, "B"));
  char s[256], t[256];
  if (a->rank != b->rank || memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B): shape %s, expected %s like input 0 (A) (no broadcasting)",
                      kiln_shape_str(b->rank, b->dims, s, sizeof s), kiln_shape_str(a->rank, a->dims, t, sizeof t));
  double alpha = kiln_attr_float(ctx->node, "alpha", 1.0f);
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, a->dtype, a->rank, a->dims, &y));
  for (int64_t i = 0; i < a->numel; i++) {
    double av = kiln_load_f64(a->data, a->dtype, i), bv = kiln_load_f64(b->data, b->dtype, i);
    kiln_store_f64(y->data, y->dtype, i, swish(av, alpha) * bv);
  }
  return NULL;
}

/* ---- RMSNormalization ---------------------------------------------------------- */

/* axis normalized into [0, rank); an error naming X's rank otherwise. */
static kiln_status_t norm_axis(const kiln_node *node, int rank, int *out) {
  int64_t axis = kiln_attr_int(node, "axis", -1);
  if (rank < 1 || axis < -rank || axis >= rank)
    return kiln_error(KILN_INVALID_MODEL, "attribute axis: %lld out of range for input 0 (X) of rank %d",
                      (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NULL;
}

static kiln_status_t rms_norm_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = in_type(ctx, 0), *scale = in_type(ctx, 1);
  KILN_TRY(stash_dtype(ctx->node));
  if (!x) return NULL;
  if (x->rank >= 0) {
    int axis;
    KILN_TRY(norm_axis(ctx->node, x->rank, &axis));
  }
  /* Y has the scale's type (V), X's shape. */
  kiln_infer_set(ctx, 0, scale && scale->dtype ? scale->dtype : x->dtype, x->rank, x->dims);
  return NULL;
}

static kiln_status_t rms_norm_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *scale, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &scale));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(nn_require_float(scale, 1, "scale"));
  KILN_TRY(stash_dtype(ctx->node));
  int axis;
  KILN_TRY(norm_axis(ctx->node, x->rank, &axis));
  int64_t sstr[KILN_MAX_RANK];
  KILN_TRY(nn_broadcast_strides(scale->rank, scale->dims, x->rank, x->dims, "input 1 (scale)", sstr));
  double eps = kiln_attr_float(ctx->node, "epsilon", 1e-5f);
  int64_t outer = kiln_shape_numel(axis, x->dims), inner = kiln_shape_numel(x->rank - axis, x->dims + axis);
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, scale->dtype, x->rank, x->dims, &y));
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t o = 0; o < outer; o++) {
    int64_t base = o * inner;
    double ms = 0;
    for (int64_t j = 0; j < inner; j++) {
      double v = kiln_load_f64(x->data, x->dtype, base + j);
      ms += v * v;
    }
    double inv = 1.0 / sqrt(ms / (double)inner + eps);
    for (int64_t j = 0; j < inner; j++) {
      int64_t so = 0;
      for (int i = 0; i < x->rank; i++) so += idx[i] * sstr[i];
      /* The function casts the normalized value to X's type, then scales in V. */
      double n = kiln_round_to_dtype(x->dtype, kiln_load_f64(x->data, x->dtype, base + j) * inv);
      kiln_store_f64(y->data, y->dtype, base + j, n * kiln_load_f64(scale->data, scale->dtype, so));
      nn_next_index(x->rank, x->dims, idx);
    }
  }
  return NULL;
}

/* ---- GroupNormalization ------------------------------------------------------- */

static kiln_status_t group_count(const kiln_node *node, int64_t *out) {
  const kiln_attr *a = kiln_node_attr(node, "num_groups");
  if (!a || a->type != KILN_ATTR_INT) return kiln_error(KILN_INVALID_MODEL, "attribute num_groups (int) is required");
  if (a->i < 1) return kiln_error(KILN_INVALID_MODEL, "attribute num_groups: %lld, expected >= 1", (long long)a->i);
  *out = a->i;
  return NULL;
}

static kiln_status_t group_norm_infer(kiln_infer_ctx *ctx) {
  int64_t groups;
  KILN_TRY(group_count(ctx->node, &groups));
  if (ctx->opset >= 21) KILN_TRY(stash_dtype(ctx->node));
  const kiln_type *x = in_type(ctx, 0);
  if (x && x->rank >= 0 && x->rank < 2) {
    char s[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected rank >= 2 (N, C, ...)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  }
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t group_norm_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[3] = {"X", "scale", "bias"};
  kiln_tensor *in[3], *y;
  for (int i = 0; i < 3; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(nn_require_float(in[i], i, names[i]));
    if (i) KILN_TRY(same_dtype(in[0], 0, "X", in[i], i, names[i]));
  }
  kiln_tensor *x = in[0];
  char s[256];
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected rank >= 2 (N, C, ...)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  int64_t groups;
  KILN_TRY(group_count(ctx->node, &groups));
  if (ctx->opset >= 21) KILN_TRY(stash_dtype(ctx->node));
  int64_t batch = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  if (c % groups)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): %lld channels, not divisible by num_groups %lld",
                      (long long)c, (long long)groups);
  /* Opset 21 made scale and bias per channel; opset 18 had them per group. */
  bool per_channel = ctx->opset >= 21;
  int64_t np = per_channel ? c : groups;
  for (int i = 1; i < 3; i++)
    if (in[i]->rank != 1 || in[i]->dims[0] != np)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected [%lld] (one per %s at opset %d)", i,
                        names[i], kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s), (long long)np,
                        per_channel ? "channel" : "group", ctx->opset);
  double eps = kiln_attr_float(ctx->node, "epsilon", 1e-5f);
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, x->dtype, x->rank, x->dims, &y));
  int64_t cg = c / groups, run = cg * inner; /* a group's elements are contiguous */
  for (int64_t b = 0; b < batch; b++)
    for (int64_t g = 0; g < groups; g++) {
      int64_t base = (b * groups + g) * run;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < run; j++) mean += kiln_load_f64(x->data, x->dtype, base + j);
      mean = run ? mean / (double)run : 0;
      for (int64_t j = 0; j < run; j++) {
        double d = kiln_load_f64(x->data, x->dtype, base + j) - mean;
        var += d * d;
      }
      var = run ? var / (double)run : 0;
      double inv = 1.0 / sqrt(var + eps);
      for (int64_t j = 0; j < run; j++) {
        int64_t p = per_channel ? g * cg + j / (inner ? inner : 1) : g;
        double n = (kiln_load_f64(x->data, x->dtype, base + j) - mean) * inv;
        if (per_channel) n = kiln_round_to_dtype(x->dtype, n); /* the function's cast back to X's type */
        double v = n * kiln_load_f64(in[1]->data, in[1]->dtype, p) + kiln_load_f64(in[2]->data, in[2]->dtype, p);
        kiln_store_f64(y->data, y->dtype, base + j, v);
      }
    }
  return NULL;
}

/* ---- RotaryEmbedding ------------------------------------------------------------ */

typedef struct rope_shape {
  bool packed;              /* X is [B, S, H*D] (else [B, H, S, D]) */
  int64_t batch, seq, heads, head, rot; /* rot: the rotated prefix of each head (even) */
} rope_shape;

/* The geometry from X's rank and dims (dims may hold -1 in inference). */
static kiln_status_t rope_shape_of(const kiln_node *node, int rank, const int64_t *dims, rope_shape *r) {
  char s[256];
  if (rank != 3 && rank != 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected [B, H, S, D] or [B, S, H*D]",
                      kiln_shape_str(rank, dims, s, sizeof s));
  r->packed = rank == 3;
  r->batch = dims[0];
  int64_t num_heads = kiln_attr_int(node, "num_heads", 0);
  if (num_heads < 0) return kiln_error(KILN_INVALID_MODEL, "attribute num_heads: %lld, expected > 0", (long long)num_heads);
  if (r->packed) {
    if (num_heads == 0)
      return kiln_error(KILN_INVALID_MODEL, "attribute num_heads is required for a 3-D input 0 (X) [B, S, H*D]");
    r->seq = dims[1];
    r->heads = num_heads;
    if (dims[2] >= 0 && dims[2] % num_heads)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): hidden size %lld not divisible by num_heads %lld",
                        (long long)dims[2], (long long)num_heads);
    r->head = dims[2] >= 0 ? dims[2] / num_heads : -1;
  } else {
    r->heads = dims[1];
    r->seq = dims[2];
    r->head = dims[3]; /* num_heads, if given, is not read (as the ONNX reference) */
  }
  int64_t rot = kiln_attr_int(node, "rotary_embedding_dim", 0);
  if (rot < 0 || rot % 2 || (r->head >= 0 && rot > r->head))
    return kiln_error(KILN_INVALID_MODEL, "attribute rotary_embedding_dim: %lld, expected an even number <= head size %lld",
                      (long long)rot, (long long)r->head);
  r->rot = rot ? rot : r->head;
  if (r->rot >= 0 && r->rot % 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): head size %lld is odd (a rotation needs pairs)",
                      (long long)r->rot);
  return NULL;
}

static kiln_status_t rope_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = in_type(ctx, 0);
  if (!x) return NULL;
  if (x->rank >= 0) {
    rope_shape r;
    KILN_TRY(rope_shape_of(ctx->node, x->rank, x->dims, &r));
  }
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t rope_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *cosc, *sinc, *pos = kiln_kernel_input(ctx, 3), *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &cosc));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &sinc));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(same_dtype(x, 0, "X", cosc, 1, "cos_cache"));
  KILN_TRY(same_dtype(x, 0, "X", sinc, 2, "sin_cache"));
  rope_shape r;
  KILN_TRY(rope_shape_of(ctx->node, x->rank, x->dims, &r));
  bool interleaved = kiln_attr_int(ctx->node, "interleaved", 0) != 0;
  int64_t half = r.rot / 2;
  char s[256], e[256];
  /* Caches: [max_pos, rot/2] indexed by position_ids [B, S], or [B, S, rot/2]. */
  int64_t want[3] = {r.batch, r.seq, half}, max_pos = 0;
  if (pos) {
    if (pos->dtype != KILN_DTYPE_I64)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (position_ids): dtype %s, expected int64", kiln_dtype_name(pos->dtype));
    if (pos->rank != 2 || pos->dims[0] != r.batch || pos->dims[1] != r.seq)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (position_ids): shape %s, expected %s (batch, sequence)",
                        kiln_shape_str(pos->rank, pos->dims, s, sizeof s), kiln_shape_str(2, want, e, sizeof e));
    max_pos = cosc->rank == 2 ? cosc->dims[0] : 0;
  }
  for (int i = 1; i < 3; i++) {
    const kiln_tensor *c = i == 1 ? cosc : sinc;
    bool ok = pos ? c->rank == 2 && c->dims[0] == max_pos && c->dims[1] == half
                  : c->rank == 3 && c->dims[0] == r.batch && c->dims[1] == r.seq && c->dims[2] == half;
    if (!ok)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected %s", i, i == 1 ? "cos_cache" : "sin_cache",
                        kiln_shape_str(c->rank, c->dims, s, sizeof s),
                        pos ? (snprintf(e, sizeof e, "[%s, %lld] (positions, rotary dim / 2)",
                                        i == 1 ? "max_position" : "cos_cache's positions", (long long)half), e)
                            : kiln_shape_str(3, want, e, sizeof e));
  }
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, x->dtype, x->rank, x->dims, &y));
  for (int64_t b = 0; b < r.batch; b++)
    for (int64_t t = 0; t < r.seq; t++) {
      int64_t row = (b * r.seq + t) * half; /* cache row without position ids */
      if (pos) {
        int64_t p = ((const int64_t *)pos->data)[b * r.seq + t];
        if (p < 0 || p >= max_pos)
          return kiln_error(KILN_OUT_OF_RANGE, "input 3 (position_ids): %lld at [%lld, %lld] outside the caches' %lld positions",
                            (long long)p, (long long)b, (long long)t, (long long)max_pos);
        row = p * half;
      }
      for (int64_t h = 0; h < r.heads; h++) {
        int64_t base = r.packed ? (b * r.seq + t) * r.heads * r.head + h * r.head : ((b * r.heads + h) * r.seq + t) * r.head;
        for (int64_t i = 0; i < half; i++) {
          int64_t i1 = interleaved ? base + 2 * i : base + i, i2 = interleaved ? i1 + 1 : i1 + half;
          double c = kiln_load_f64(cosc->data, cosc->dtype, row + i), sn = kiln_load_f64(sinc->data, sinc->dtype, row + i);
          double x1 = kiln_load_f64(x->data, x->dtype, i1), x2 = kiln_load_f64(x->data, x->dtype, i2);
          kiln_store_f64(y->data, y->dtype, i1, c * x1 - sn * x2);
          kiln_store_f64(y->data, y->dtype, i2, sn * x1 + c * x2);
        }
        for (int64_t d = r.rot; d < r.head; d++)
          kiln_store_f64(y->data, y->dtype, base + d, kiln_load_f64(x->data, x->dtype, base + d));
      }
    }
  return NULL;
}

/* ---- LinearAttention -------------------------------------------------------------- */

typedef enum la_rule { LA_LINEAR, LA_GATED, LA_DELTA, LA_GATED_DELTA } la_rule;

typedef struct la_params {
  la_rule rule;
  bool gating, delta;
  int64_t q_heads, kv_heads;
} la_params;

static kiln_status_t la_params_of(const kiln_node *node, la_params *p) {
  static const char *rules[4] = {"linear", "gated", "delta", "gated_delta"};
  const char *u = kiln_attr_string(node, "update_rule", "gated_delta");
  int k = 0;
  while (k < 4 && strcmp(u, rules[k])) k++;
  if (k == 4)
    return kiln_error(KILN_INVALID_MODEL, "attribute update_rule: \"%s\", expected linear, gated, delta or gated_delta", u);
  p->rule = (la_rule)k;
  p->gating = p->rule == LA_GATED || p->rule == LA_GATED_DELTA;
  p->delta = p->rule == LA_DELTA || p->rule == LA_GATED_DELTA;
  const kiln_attr *qa = kiln_node_attr(node, "q_num_heads"), *ka = kiln_node_attr(node, "kv_num_heads");
  if (!qa || qa->type != KILN_ATTR_INT || !ka || ka->type != KILN_ATTR_INT)
    return kiln_error(KILN_INVALID_MODEL, "attributes q_num_heads and kv_num_heads (int) are required");
  p->q_heads = qa->i;
  p->kv_heads = ka->i;
  if (p->q_heads < 1 || p->kv_heads < 1 || p->q_heads % p->kv_heads)
    return kiln_error(KILN_INVALID_MODEL, "attributes q_num_heads %lld and kv_num_heads %lld: q_num_heads must be a positive multiple of kv_num_heads >= 1",
                      (long long)p->q_heads, (long long)p->kv_heads);
  return NULL;
}

/* Which optional inputs the rule needs: decay (4) for gated rules, beta (5) for delta rules. */
static kiln_status_t la_check_optional(const la_params *p, bool has_decay, bool has_beta, const char *rule) {
  if (p->gating != has_decay)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 4 (decay): %s for update_rule %s", p->gating ? "required" : "not allowed", rule);
  if (p->delta != has_beta)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 5 (beta): %s for update_rule %s", p->delta ? "required" : "not allowed", rule);
  return NULL;
}

static int64_t div_or_unknown(int64_t a, int64_t b) { return a >= 0 ? a / b : -1; }

static kiln_status_t la_infer(kiln_infer_ctx *ctx) {
  la_params p;
  KILN_TRY(la_params_of(ctx->node, &p));
  KILN_TRY(la_check_optional(&p, in_type(ctx, 4) != NULL, in_type(ctx, 5) != NULL,
                             kiln_attr_string(ctx->node, "update_rule", "gated_delta")));
  const kiln_type *q = in_type(ctx, 0), *v = in_type(ctx, 2), *past = in_type(ctx, 3);
  if (!q) return NULL;
  char s[256];
  for (int i = 0; i < 3; i++) {
    const kiln_type *t = in_type(ctx, i);
    if (t && t->rank >= 0 && t->rank != 3)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: shape %s, expected rank 3 (B, T, H*D)", i,
                        kiln_shape_str(t->rank, t->dims, s, sizeof s));
  }
  int64_t b = q->rank == 3 ? q->dims[0] : -1, t = q->rank == 3 ? q->dims[1] : -1;
  int64_t dk = q->rank == 3 ? div_or_unknown(q->dims[2], p.q_heads) : -1;
  int64_t dv = v && v->rank == 3 ? div_or_unknown(v->dims[2], p.kv_heads) : -1;
  int64_t od[3] = {b, t, dv >= 0 ? p.q_heads * dv : -1};
  kiln_infer_set(ctx, 0, q->dtype, 3, od);
  int64_t sd[4] = {b, p.kv_heads, dk, dv};
  if (past && past->rank == 4)
    for (int i = 0; i < 4; i++)
      if (sd[i] < 0) sd[i] = past->dims[i];
  kiln_infer_set(ctx, 1, past && past->dtype ? past->dtype : q->dtype, 4, sd);
  return NULL;
}

static kiln_status_t la_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[6] = {"query", "key", "value", "past_state", "decay", "beta"};
  la_params p;
  KILN_TRY(la_params_of(ctx->node, &p));
  kiln_tensor *in[6];
  for (int i = 0; i < 6; i++) in[i] = kiln_kernel_input(ctx, i);
  for (int i = 0; i < 3; i++) KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
  const char *rule = kiln_attr_string(ctx->node, "update_rule", "gated_delta");
  KILN_TRY(la_check_optional(&p, in[4] != NULL, in[5] != NULL, rule));
  kiln_tensor *q = in[0], *k = in[1], *v = in[2], *past = in[3], *decay = in[4], *beta = in[5];
  for (int i = 0; i < 6; i++) {
    if (!in[i]) continue;
    KILN_TRY(nn_require_float(in[i], i, names[i]));
    if (in[i]->dtype == KILN_DTYPE_F64)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype double, expected float16, bfloat16 or float", i, names[i]);
    if (i != 3 && i) KILN_TRY(same_dtype(q, 0, names[0], in[i], i, names[i]));
    if (i != 3) KILN_TRY(require_rank(in[i], i, names[i], 3, "B, T, H*D"));
  }
  char s[256], e[256];
  int64_t B = q->dims[0], T = q->dims[1], hq = p.q_heads, hkv = p.kv_heads;
  if (q->dims[2] % hq)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (query): last dim %lld not divisible by q_num_heads %lld",
                      (long long)q->dims[2], (long long)hq);
  if (v->dims[2] % hkv)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (value): last dim %lld not divisible by kv_num_heads %lld",
                      (long long)v->dims[2], (long long)hkv);
  int64_t dk = q->dims[2] / hq, dv = v->dims[2] / hkv, group = hq / hkv;
  /* Allowed last dims of each input: key hkv*dk, value any multiple of hkv,
   * decay hkv (per head) or hkv*dk (per key dim), beta hkv or 1. */
  for (int i = 1; i < 6; i++) {
    if (!in[i] || i == 3) continue;
    int64_t last = in[i]->dims[2];
    bool ok = in[i]->dims[0] == B && in[i]->dims[1] == T;
    if (i == 1) ok &= last == hkv * dk;
    if (i == 4) ok &= last == hkv || last == hkv * dk;
    if (i == 5) ok &= last == hkv || last == 1;
    if (!ok)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s does not fit query %s with %lld kv heads of size %lld",
                        i, names[i], kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s),
                        kiln_shape_str(q->rank, q->dims, e, sizeof e), (long long)hkv, (long long)dk);
  }
  int64_t sd[4] = {B, hkv, dk, dv};
  if (past && (past->rank != 4 || memcmp(past->dims, sd, sizeof sd)))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (past_state): shape %s, expected %s (B, H_kv, d_k, d_v)",
                      kiln_shape_str(past->rank, past->dims, s, sizeof s), kiln_shape_str(4, sd, e, sizeof e));
  double scale = kiln_attr_float(ctx->node, "scale", 0.0f);
  if (scale == 0) scale = 1.0 / sqrt((double)dk);

  kiln_tensor *out, *present = NULL;
  int64_t od[3] = {B, T, hq * dv};
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, q->dtype, 3, od, &out));
  if (want_output(ctx, 1)) KILN_TRY(kiln_kernel_output_uninit(ctx, 1, past ? past->dtype : q->dtype, 4, sd, &present));
  size_t dkv = (size_t)(dk * dv > 0 ? dk * dv : 1);
  double *state = malloc(dkv * sizeof *state), *vt = malloc((size_t)(dv > 0 ? dv : 1) * sizeof *vt);
  if (!state || !vt) {
    free(state);
    free(vt);
    return KILN_OOM();
  }
  bool decay_per_dim = decay && decay->dims[2] == hkv * dk;
  /* Each (batch, kv head) runs its own recurrence; its query heads read it. */
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < hkv; h++) {
      int64_t sbase = (b * hkv + h) * dk * dv;
      for (int64_t i = 0; i < dk * dv; i++) state[i] = past ? kiln_load_f64(past->data, past->dtype, sbase + i) : 0.0;
      for (int64_t t = 0; t < T; t++) {
        int64_t row = b * T + t;
        int64_t kb = row * hkv * dk + h * dk, vb = row * hkv * dv + h * dv;
        if (p.gating)
          for (int64_t d = 0; d < dk; d++) {
            int64_t gi = decay_per_dim ? row * hkv * dk + h * dk + d : row * hkv + h;
            double g = exp(kiln_load_f64(decay->data, decay->dtype, gi));
            for (int64_t m = 0; m < dv; m++) state[d * dv + m] *= g;
          }
        for (int64_t m = 0; m < dv; m++) vt[m] = kiln_load_f64(v->data, v->dtype, vb + m);
        if (p.delta) {
          double bt = kiln_load_f64(beta->data, beta->dtype, beta->dims[2] == 1 ? row : row * hkv + h);
          for (int64_t m = 0; m < dv; m++) {
            double got = 0;
            for (int64_t d = 0; d < dk; d++) got += state[d * dv + m] * kiln_load_f64(k->data, k->dtype, kb + d);
            vt[m] = bt * (vt[m] - got);
          }
        }
        for (int64_t d = 0; d < dk; d++) {
          double kd = kiln_load_f64(k->data, k->dtype, kb + d);
          for (int64_t m = 0; m < dv; m++) state[d * dv + m] += kd * vt[m];
        }
        for (int64_t j = 0; j < group; j++) {
          int64_t hqi = h * group + j, qb = row * hq * dk + hqi * dk, ob = row * hq * dv + hqi * dv;
          for (int64_t m = 0; m < dv; m++) {
            double acc = 0;
            for (int64_t d = 0; d < dk; d++) acc += kiln_load_f64(q->data, q->dtype, qb + d) * state[d * dv + m];
            kiln_store_f64(out->data, out->dtype, ob + m, scale * acc);
          }
        }
      }
      if (present)
        for (int64_t i = 0; i < dk * dv; i++) kiln_store_f64(present->data, present->dtype, sbase + i, state[i]);
    }
  free(state);
  free(vt);
  return NULL;
}

/* ---- CausalConvWithState ----------------------------------------------------------- */

static kiln_status_t ccs_activation(const kiln_node *node, bool *silu) {
  const char *a = kiln_attr_string(node, "activation", "none");
  if (!strcmp(a, "none")) *silu = false;
  else if (!strcmp(a, "silu") || !strcmp(a, "swish")) *silu = true;
  else return kiln_error(KILN_INVALID_MODEL, "attribute activation: \"%s\", expected none, silu or swish", a);
  return NULL;
}

static kiln_status_t ccs_infer(kiln_infer_ctx *ctx) {
  bool silu;
  KILN_TRY(ccs_activation(ctx->node, &silu));
  const kiln_type *x = in_type(ctx, 0), *w = in_type(ctx, 1);
  if (!x) return NULL;
  char s[256];
  if (x->rank >= 0 && x->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): shape %s, expected rank 3 (batch, channels, length)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  if (w && w->rank >= 0 && w->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (weight): shape %s, expected rank 3 (channels, 1, k)",
                      kiln_shape_str(w->rank, w->dims, s, sizeof s));
  kiln_type_copy(&ctx->outputs[0], x);
  int64_t k = w && w->rank == 3 ? w->dims[2] : -1;
  int64_t sd[3] = {x->rank == 3 ? x->dims[0] : -1, x->rank == 3 ? x->dims[1] : -1, k >= 1 ? k - 1 : -1};
  kiln_infer_set(ctx, 1, x->dtype, 3, sd);
  return NULL;
}

static kiln_status_t ccs_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[4] = {"input", "weight", "bias", "past_state"};
  bool silu;
  KILN_TRY(ccs_activation(ctx->node, &silu));
  kiln_tensor *in[4];
  for (int i = 0; i < 4; i++) in[i] = kiln_kernel_input(ctx, i);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &in[0]));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &in[1]));
  for (int i = 0; i < 4; i++) {
    if (!in[i]) continue;
    KILN_TRY(nn_require_float(in[i], i, names[i]));
    if (in[i]->dtype == KILN_DTYPE_F64)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype double, expected float, float16 or bfloat16", i, names[i]);
    if (i) KILN_TRY(same_dtype(in[0], 0, names[0], in[i], i, names[i]));
  }
  kiln_tensor *x = in[0], *w = in[1], *bias = in[2], *past = in[3];
  KILN_TRY(require_rank(x, 0, "input", 3, "batch, channels, length"));
  KILN_TRY(require_rank(w, 1, "weight", 3, "channels, 1, k"));
  int64_t B = x->dims[0], C = x->dims[1], L = x->dims[2], K = w->dims[2];
  char s[256];
  if (w->dims[0] != C || w->dims[1] != 1 || K < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (weight): shape %s, expected [%lld, 1, k >= 1] (depthwise)",
                      kiln_shape_str(w->rank, w->dims, s, sizeof s), (long long)C);
  if (bias && (bias->rank != 1 || bias->dims[0] != C))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (bias): shape %s, expected [%lld]",
                      kiln_shape_str(bias->rank, bias->dims, s, sizeof s), (long long)C);
  int64_t sd[3] = {B, C, K - 1};
  if (past && (past->rank != 3 || memcmp(past->dims, sd, sizeof sd))) {
    char e[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (past_state): shape %s, expected %s (batch, channels, k - 1)",
                      kiln_shape_str(past->rank, past->dims, s, sizeof s), kiln_shape_str(3, sd, e, sizeof e));
  }
  kiln_tensor *y, *present = NULL;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, x->dtype, 3, x->dims, &y));
  if (want_output(ctx, 1)) KILN_TRY(kiln_kernel_output_uninit(ctx, 1, x->dtype, 3, sd, &present));
  /* Position p of the padded row (past state, then input): p < K - 1 reads the state. */
#define PADDED(b, c, p)                                                                                         \
  ((p) < K - 1 ? (past ? kiln_load_f64(past->data, past->dtype, ((b) * C + (c)) * (K - 1) + (p)) : 0.0)        \
               : kiln_load_f64(x->data, x->dtype, ((b) * C + (c)) * L + (p) - (K - 1)))
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      double bc = bias ? kiln_load_f64(bias->data, bias->dtype, c) : 0.0;
      for (int64_t t = 0; t < L; t++) {
        double acc = bc;
        for (int64_t j = 0; j < K; j++) acc += kiln_load_f64(w->data, w->dtype, c * K + j) * PADDED(b, c, t + j);
        if (silu) {
          acc = kiln_round_to_dtype(x->dtype, acc); /* the convolution's result, in the input's type */
          acc *= sigmoid(acc);
        }
        kiln_store_f64(y->data, y->dtype, (b * C + c) * L + t, acc);
      }
      if (present)
        for (int64_t i = 0; i < K - 1; i++)
          kiln_store_f64(present->data, present->dtype, (b * C + c) * (K - 1) + i, PADDED(b, c, L + i));
    }
#undef PADDED
  return NULL;
}

/* ---- the table ------------------------------------------------------------------ */

static const kiln_op_def transformer_ops[] = {
    {"", "Gelu", 1, 1, 1, 1, gelu_infer, gelu_kernel, 0, .id = KILN_OP_Gelu, .op_class = KILN_OPCLASS_ELEMENTWISE,
     .gradient = kiln_grad_gelu},
    {"", "Swish", 1, 1, 1, 1, unary_infer, swish_kernel, 0, .id = KILN_OP_Swish},
    {"", "SwiGLU", 2, 2, 1, 1, swiglu_infer, swiglu_kernel, 0, .id = KILN_OP_SwiGLU},
    {"", "Mish", 1, 1, 1, 1, unary_infer, mish_kernel, 0, .id = KILN_OP_Mish},
    {"", "RMSNormalization", 2, 2, 1, 1, rms_norm_infer, rms_norm_kernel, 0, .id = KILN_OP_RMSNormalization},
    {"", "GroupNormalization", 3, 3, 1, 1, group_norm_infer, group_norm_kernel, 0, .id = KILN_OP_GroupNormalization},
    {"", "RotaryEmbedding", 3, 4, 1, 1, rope_infer, rope_kernel, 0, .id = KILN_OP_RotaryEmbedding},
    {"", "LinearAttention", 3, 6, 1, 2, la_infer, la_kernel, 0, .id = KILN_OP_LinearAttention},
    {"", "CausalConvWithState", 2, 4, 1, 2, ccs_infer, ccs_kernel, 0, .id = KILN_OP_CausalConvWithState},
};

const kiln_op_def *kiln_ops_transformer(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(transformer_ops);
  return transformer_ops;
}
