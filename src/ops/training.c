/* Ops of the "training" family (domain ai.onnx.preview.training): the
 * optimizers Adagrad, Momentum and Adam, and Gradient, which a session
 * expands into autodiff's backward graph when it specializes the graph
 * (passes/autodiff.c, kiln_pass_expand_gradient): its kernel never runs.
 *
 * Each optimizer takes R (learning rate, scalar) and T (update count,
 * int64 scalar), then n tensors to optimize as consecutive groups:
 * X_1..X_n, G_1..G_n, then the optimizer's state (H for Adagrad; V for
 * Momentum; V and H for Adam). Outputs are X_new_1..n followed by the new
 * states in the same order. Element-wise formulas broadcast numpy-style;
 * they are computed in double and rounded to X's type. */
#include "ops/op.h"

#include <math.h>

#define TRAINING_DOMAIN "ai.onnx.preview.training"

typedef enum optimizer_kind { OPT_ADAGRAD, OPT_MOMENTUM, OPT_ADAM } optimizer_kind;

/* Number of input groups: X, G and the state tensors. */
static int optimizer_groups(optimizer_kind kind) { return kind == OPT_ADAM ? 4 : 3; }

static kiln_status_t optimizer_count(optimizer_kind kind, int n_inputs, int n_outputs, int *out_n) {
  int groups = optimizer_groups(kind);
  int rest = n_inputs - 2;
  if (rest <= 0 || rest % groups)
    return kiln_error(KILN_INVALID_ARGUMENT, "expected R, T and %d groups of tensors (X, G, state), got %d inputs",
                      groups, n_inputs);
  int n = rest / groups;
  if (n_outputs != (groups - 1) * n)
    return kiln_error(KILN_INVALID_ARGUMENT, "%d tensors to optimize need %d outputs, the node has %d", n,
                      (groups - 1) * n, n_outputs);
  *out_n = n;
  return NULL;
}

/* Input index of group g's tensor j, and output index of output group g's tensor j. */
static int in_index(int n, int g, int j) { return 2 + g * n + j; }
static int out_index(int n, int g, int j) { return g * n + j; }

static kiln_status_t optimizer_infer(kiln_infer_ctx *ctx, optimizer_kind kind) {
  int n = 0;
  KILN_TRY(optimizer_count(kind, ctx->n_inputs, ctx->n_outputs, &n));
  int groups = optimizer_groups(kind);
  for (int j = 0; j < n; j++) {
    const kiln_type *x = ctx->inputs[in_index(n, 0, j)];
    kiln_dtype dt = x ? x->dtype : KILN_DTYPE_UNDEFINED;
    int rank = 0;
    int64_t dims[KILN_MAX_RANK];
    for (int g = 0; g < groups && rank >= 0; g++) {
      const kiln_type *t = ctx->inputs[in_index(n, g, j)];
      if (!t || t->rank < 0) {
        rank = -1;
        break;
      }
      int64_t tmp[KILN_MAX_RANK];
      int r;
      KILN_RETURN_IF_ERROR(kiln_broadcast_shapes(rank, dims, t->rank, t->dims, &r, tmp), "input %d",
                           in_index(n, g, j));
      rank = r;
      memcpy(dims, tmp, sizeof tmp);
    }
    for (int g = 0; g < groups - 1; g++) kiln_infer_set(ctx, out_index(n, g, j), dt, rank, dims);
  }
  return NULL;
}

static kiln_status_t adagrad_infer(kiln_infer_ctx *ctx) { return optimizer_infer(ctx, OPT_ADAGRAD); }
static kiln_status_t momentum_infer(kiln_infer_ctx *ctx) { return optimizer_infer(ctx, OPT_MOMENTUM); }
static kiln_status_t adam_infer(kiln_infer_ctx *ctx) { return optimizer_infer(ctx, OPT_ADAM); }

/* Offset into t of output element `flat` (of shape rank/dims) under
 * numpy broadcasting (t right-aligned, size-1 dims repeated). */
static int64_t broadcast_offset(const kiln_tensor *t, int rank, const int64_t *dims, int64_t flat) {
  int64_t off = 0, stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    int64_t i = flat % dims[d];
    flat /= dims[d];
    int td = d - (rank - t->rank);
    if (td < 0) continue;
    if (t->dims[td] != 1) off += i * stride;
    stride *= t->dims[td];
  }
  return off;
}

typedef struct optimizer_params {
  double r, norm, eps;
  double alpha, beta, decay, norm_post;
  int64_t t;
  bool nesterov;
} optimizer_params;

static kiln_status_t read_float_scalar(const kiln_tensor *t, const char *what, double *out) {
  if (t->dtype != KILN_DTYPE_F32 && t->dtype != KILN_DTYPE_F64)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s must be float or double, got %s", what, kiln_dtype_name(t->dtype));
  if (t->numel != 1) return kiln_error(KILN_INVALID_ARGUMENT, "%s must be a scalar, has %lld elements", what,
                                       (long long)t->numel);
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return NULL;
}

static kiln_status_t read_params(const kiln_kernel_ctx *ctx, optimizer_kind kind, optimizer_params *p) {
  kiln_tensor *r_t, *t_t;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &r_t));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &t_t));
  KILN_TRY(read_float_scalar(r_t, "input 0 (R)", &p->r));
  if (t_t->dtype != KILN_DTYPE_I64 || t_t->numel != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (T) must be an int64 scalar, got %s with %lld elements",
                      kiln_dtype_name(t_t->dtype), (long long)t_t->numel);
  p->t = *(const int64_t *)t_t->data;
  const kiln_node *node = ctx->node;
  p->norm = kiln_attr_float(node, "norm_coefficient", 0.0f);
  p->eps = kiln_attr_float(node, "epsilon", 1e-6f);
  p->decay = kiln_attr_float(node, "decay_factor", 0.0f);
  p->norm_post = kiln_attr_float(node, "norm_coefficient_post", 0.0f);
  if (kind == OPT_ADAM) {
    p->alpha = kiln_attr_float(node, "alpha", 0.9f);
    p->beta = kiln_attr_float(node, "beta", 0.999f);
  }
  if (kind == OPT_MOMENTUM) {
    static const char *const required[] = {"alpha", "beta", "mode", "norm_coefficient"};
    for (size_t i = 0; i < KILN_ARRAY_SIZE(required); i++)
      if (!kiln_node_attr(node, required[i]))
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute %s is required", required[i]);
    p->alpha = kiln_attr_float(node, "alpha", 0.0f);
    p->beta = kiln_attr_float(node, "beta", 0.0f);
    const char *mode = kiln_attr_string(node, "mode", "");
    if (!strcmp(mode, "nesterov"))
      p->nesterov = true;
    else if (!strcmp(mode, "standard"))
      p->nesterov = false;
    else
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute mode must be \"standard\" or \"nesterov\", got \"%s\"", mode);
  }
  return NULL;
}

/* One update step of one element; s[0] = X, s[1] = G, s[2..] = states.
 * Writes X_new to out[0] and the new states to out[1..]. */
static void optimizer_step(optimizer_kind kind, const optimizer_params *p, const double *s, double *out) {
  double x = s[0], g = p->norm * x + s[1];
  switch (kind) {
    case OPT_ADAGRAD: {
      double r = p->r / (1.0 + (double)p->t * p->decay);
      double h = s[2] + g * g;
      out[0] = x - r * g / (sqrt(h) + p->eps);
      out[1] = h;
      break;
    }
    case OPT_MOMENTUM: {
      double beta = p->t > 0 ? p->beta : 1.0;
      double v = p->alpha * s[2] + beta * g;
      out[0] = p->nesterov ? x - p->r * (g + p->alpha * v) : x - p->r * v;
      out[1] = v;
      break;
    }
    case OPT_ADAM: {
      double v = p->alpha * s[2] + (1.0 - p->alpha) * g;
      double h = p->beta * s[3] + (1.0 - p->beta) * g * g;
      double r = p->r;
      if (p->t > 0)
        r = p->r * sqrt(1.0 - pow(p->beta, (double)p->t)) / (1.0 - pow(p->alpha, (double)p->t));
      double x_new = x - r * v / (sqrt(h) + p->eps);
      out[0] = (1.0 - p->norm_post) * x_new;
      out[1] = v;
      out[2] = h;
      break;
    }
  }
}

static kiln_status_t optimizer_kernel(kiln_kernel_ctx *ctx, optimizer_kind kind) {
  int n = 0;
  KILN_TRY(optimizer_count(kind, ctx->n_inputs, ctx->n_outputs, &n));
  optimizer_params p = {0};
  KILN_TRY(read_params(ctx, kind, &p));
  int groups = optimizer_groups(kind);
  static const char *const group_names[] = {"X", "G", "state", "state"};
  for (int j = 0; j < n; j++) {
    kiln_tensor *in[4];
    int rank = 0;
    int64_t dims[KILN_MAX_RANK];
    for (int g = 0; g < groups; g++) {
      int idx = in_index(n, g, j);
      KILN_TRY(kiln_kernel_require_input(ctx, idx, &in[g]));
      if (in[g]->dtype != KILN_DTYPE_F32 && in[g]->dtype != KILN_DTYPE_F64)
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s_%d) must be float or double, got %s", idx,
                          group_names[g], j + 1, kiln_dtype_name(in[g]->dtype));
      int64_t tmp[KILN_MAX_RANK];
      int r;
      KILN_RETURN_IF_ERROR(kiln_broadcast_shapes(rank, dims, in[g]->rank, in[g]->dims, &r, tmp), "input %d", idx);
      rank = r;
      memcpy(dims, tmp, sizeof tmp);
    }
    kiln_tensor *out[3] = {NULL, NULL, NULL};
    for (int g = 0; g < groups - 1; g++) {
      int oi = out_index(n, g, j);
      if (!ctx->output_wanted[oi]) continue;
      KILN_TRY(kiln_kernel_output_tensor(ctx, oi, in[0]->dtype, rank, dims, &out[g]));
    }
    int64_t numel = kiln_shape_numel(rank, dims);
    for (int64_t e = 0; e < numel; e++) {
      double s[4], o[3];
      for (int g = 0; g < groups; g++)
        s[g] = kiln_load_f64(in[g]->data, in[g]->dtype, broadcast_offset(in[g], rank, dims, e));
      optimizer_step(kind, &p, s, o);
      for (int g = 0; g < groups - 1; g++)
        if (out[g]) kiln_store_f64(out[g]->data, out[g]->dtype, e, o[g]);
    }
  }
  return NULL;
}

static kiln_status_t adagrad_kernel(kiln_kernel_ctx *ctx) { return optimizer_kernel(ctx, OPT_ADAGRAD); }
static kiln_status_t momentum_kernel(kiln_kernel_ctx *ctx) { return optimizer_kernel(ctx, OPT_MOMENTUM); }
static kiln_status_t adam_kernel(kiln_kernel_ctx *ctx) { return optimizer_kernel(ctx, OPT_ADAM); }


/* Gradient: the gradient of attribute y with respect to each value named in
 * attribute xs, output k shaped like xs[k], which are usually its inputs. */
static kiln_status_t gradient_infer(kiln_infer_ctx *ctx) {
  for (int k = 0; k < ctx->n_outputs && k < ctx->n_inputs; k++)
    if (ctx->inputs[k]) KILN_TRY(kiln_infer_same_as_input(ctx, k, k));
  return NULL;
}

static kiln_status_t gradient_kernel(kiln_kernel_ctx *ctx) {
  (void)ctx;
  return kiln_error(KILN_INTERNAL, "Gradient reached a kernel: sessions expand it into its backward graph first");
}

/* ---- table --------------------------------------------------------------- */

static const kiln_op_def training_ops[] = {
    {TRAINING_DOMAIN, "Adagrad", 5, -1, 2, -1, adagrad_infer, adagrad_kernel, 0, .id = KILN_OP_training_Adagrad},
    {TRAINING_DOMAIN, "Momentum", 5, -1, 2, -1, momentum_infer, momentum_kernel, 0, .id = KILN_OP_training_Momentum},
    {TRAINING_DOMAIN, "Adam", 6, -1, 3, -1, adam_infer, adam_kernel, 0, .id = KILN_OP_training_Adam},
    {TRAINING_DOMAIN, "Gradient", 1, -1, 1, -1, gradient_infer, gradient_kernel, 0, .id = KILN_OP_training_Gradient},
};

const kiln_op_def *kiln_ops_training(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(training_ops);
  return training_ops;
}
