/* Normalizations: BatchNormalization (inference and training modes),
 * InstanceNormalization, LayerNormalization, LRN and
 * MeanVarianceNormalization. Statistics are computed in double, with
 * population (biased) variance. */
#include "ops/nn_internal.h"

#include <math.h>

/* For every element of a tensor of shape (rank, dims), the flat index of
 * its group when the axes with reduce[i] set are reduced away: the index
 * into the tensor of shape dims-with-reduced-axes-set-to-1. Fills
 * keys[0..numel) and the number of groups. */
static kiln_status_t group_keys(int rank, const int64_t *dims, const bool *reduce, int64_t **out_keys,
                                int64_t *out_groups) {
  int64_t kept[KILN_MAX_RANK], ks[KILN_MAX_RANK];
  for (int i = 0; i < rank; i++) kept[i] = reduce[i] ? 1 : dims[i];
  nn_row_major_strides(rank, kept, ks);
  int64_t numel = kiln_shape_numel(rank, dims);
  int64_t *keys = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *keys);
  if (!keys) return KILN_OOM();
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t e = 0; e < numel; e++) {
    int64_t k = 0;
    for (int i = 0; i < rank; i++)
      if (!reduce[i]) k += idx[i] * ks[i];
    keys[e] = k;
    nn_next_index(rank, dims, idx);
  }
  *out_keys = keys;
  *out_groups = kiln_shape_numel(rank, kept);
  return NULL;
}

/* Mean and population variance of each group (arrays of `groups`). */
static kiln_status_t group_moments(const double *x, int64_t numel, const int64_t *keys, int64_t groups, double **out_mean,
                                   double **out_var) {
  size_t g = (size_t)(groups > 0 ? groups : 1);
  double *mean = calloc(g, sizeof *mean), *var = calloc(g, sizeof *var);
  int64_t *cnt = calloc(g, sizeof *cnt);
  if (!mean || !var || !cnt) {
    free(mean);
    free(var);
    free(cnt);
    return KILN_OOM();
  }
  for (int64_t e = 0; e < numel; e++) {
    mean[keys[e]] += x[e];
    cnt[keys[e]]++;
  }
  for (int64_t k = 0; k < groups; k++) mean[k] = cnt[k] ? mean[k] / (double)cnt[k] : NAN;
  for (int64_t e = 0; e < numel; e++) {
    double d = x[e] - mean[keys[e]];
    var[keys[e]] += d * d;
  }
  for (int64_t k = 0; k < groups; k++) var[k] = cnt[k] ? var[k] / (double)cnt[k] : NAN;
  free(cnt);
  *out_mean = mean;
  *out_var = var;
  return NULL;
}

static kiln_status_t require_rank_at_least(const kiln_tensor *x, int r, const char *layout) {
  char s[256];
  if (x->rank < r)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected rank >= %d (%s)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s), r, layout);
  return NULL;
}

/* ---- BatchNormalization --------------------------------------------------- */

kiln_status_t nn_batch_norm_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  char s[256];
  if (x->rank >= 0 && x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): shape %s, expected rank >= 2 (N, C, ...)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  kiln_type_copy(&ctx->outputs[0], x);
  /* Running (and, before opset 14, saved) statistics: shaped like input 3 (mean). */
  const kiln_type *mean = ctx->n_inputs > 3 ? ctx->inputs[3] : NULL;
  int64_t c = x->rank >= 2 ? x->dims[1] : -1;
  for (int i = 1; i < ctx->n_outputs && i < 5; i++) {
    if (mean && mean->rank >= 0)
      kiln_type_copy(&ctx->outputs[i], mean);
    else
      kiln_infer_set(ctx, i, mean && mean->dtype ? mean->dtype : x->dtype, 1, &c);
  }
  return NULL;
}

kiln_status_t nn_batch_norm_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[5] = {"X", "scale", "B", "mean", "var"};
  kiln_tensor *in[5];
  for (int i = 0; i < 5; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(nn_require_float(in[i], i, names[i]));
  }
  kiln_tensor *x = in[0];
  KILN_TRY(require_rank_at_least(x, 2, "N, C, ..."));
  if (ctx->opset < 15)
    for (int i = 1; i < 5; i++)
      if (in[i]->dtype != x->dtype && (ctx->opset < 14 || i < 3))
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input 0 (X)", i, names[i],
                          kiln_dtype_name(in[i]->dtype), kiln_dtype_name(x->dtype));
  if (in[3]->dtype != in[4]->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 4 (var): dtype %s, expected %s like input 3 (mean)",
                      kiln_dtype_name(in[4]->dtype), kiln_dtype_name(in[3]->dtype));
  int64_t batch = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  /* Before opset 9, spatial=0 gives every (channel, position) its own
   * parameters: shapes (C, D1, ..., Dn). */
  bool per_elem = ctx->opset < 9 && kiln_attr_int(ctx->node, "spatial", 1) == 0;
  int64_t np = per_elem ? c * inner : c;
  char s[256], e[256], xs[256];
  for (int i = 1; i < 5; i++) {
    if (in[i]->numel != np || (!per_elem && in[i]->rank != 1))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected %s (X is %s)", i, names[i],
                        kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s),
                        per_elem ? "X's shape without the batch axis" : kiln_shape_str(1, &c, e, sizeof e),
                        kiln_shape_str(x->rank, x->dims, xs, sizeof xs));
  }
  double eps = kiln_attr_float(ctx->node, "epsilon", 1e-5f);
  double momentum = kiln_attr_float(ctx->node, "momentum", 0.9f);
  bool training;
  if (ctx->opset >= 14) {
    training = kiln_attr_int(ctx->node, "training_mode", 0) != 0;
  } else {
    training = false;
    for (int i = 1; i < ctx->n_outputs; i++) training |= ctx->output_wanted[i];
    if (ctx->opset < 7 && kiln_attr_int(ctx->node, "is_test", 0) != 0) training = false;
  }

  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  double *xv = NULL, *pv[5] = {0}, *bmean = NULL, *bvar = NULL;
  kiln_status_t st = nn_load_all_f64(x, &xv);
  for (int i = 1; i < 5 && !st; i++) st = nn_load_all_f64(in[i], &pv[i]);
  if (!st && training) {
    bmean = calloc((size_t)(np > 0 ? np : 1), sizeof *bmean);
    bvar = calloc((size_t)(np > 0 ? np : 1), sizeof *bvar);
    if (!bmean || !bvar) st = KILN_OOM();
  }
  if (st) goto done;

  double *use_mean = pv[3], *use_var = pv[4];
  if (training) { /* batch statistics over N and the spatial axes (or N alone) */
    int64_t per = per_elem ? batch : batch * inner;
    for (int64_t b = 0; b < batch; b++)
      for (int64_t ch = 0; ch < c; ch++)
        for (int64_t j = 0; j < inner; j++) bmean[per_elem ? ch * inner + j : ch] += xv[(b * c + ch) * inner + j];
    for (int64_t k = 0; k < np; k++) bmean[k] = per > 0 ? bmean[k] / (double)per : NAN;
    for (int64_t b = 0; b < batch; b++)
      for (int64_t ch = 0; ch < c; ch++)
        for (int64_t j = 0; j < inner; j++) {
          int64_t k = per_elem ? ch * inner + j : ch;
          double d = xv[(b * c + ch) * inner + j] - bmean[k];
          bvar[k] += d * d;
        }
    for (int64_t k = 0; k < np; k++) bvar[k] = per > 0 ? bvar[k] / (double)per : NAN;
    use_mean = bmean;
    use_var = bvar;
  }
  double *yv = xv; /* computed in place */
  for (int64_t b = 0; b < batch; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t j = 0; j < inner; j++) {
        int64_t k = per_elem ? ch * inner + j : ch;
        int64_t off = (b * c + ch) * inner + j;
        yv[off] = (xv[off] - use_mean[k]) / sqrt(use_var[k] + eps) * pv[1][k] + pv[2][k];
      }
  nn_store_all_f64(y, yv);

  if (training) {
    /* Outputs 1, 2: running mean/var; before opset 14 also 3, 4: the batch's. */
    const double *src[5] = {NULL, bmean, bvar, bmean, bvar};
    for (int i = 1; i < ctx->n_outputs && i < 5; i++) {
      if (!ctx->output_wanted[i] || (ctx->opset >= 14 && i > 2)) continue;
      kiln_tensor *o;
      const kiln_tensor *like = in[i <= 2 ? i + 2 : 3];
      st = kiln_kernel_output_tensor(ctx, i, like->dtype, like->rank, like->dims, &o);
      if (st) goto done;
      for (int64_t k = 0; k < np; k++) {
        double v = src[i][k];
        if (i <= 2) v = pv[i + 2][k] * momentum + v * (1.0 - momentum);
        kiln_store_f64(o->data, o->dtype, k, v);
      }
    }
  }
done:
  free(xv);
  for (int i = 1; i < 5; i++) free(pv[i]);
  free(bmean);
  free(bvar);
  return st;
}

/* ---- InstanceNormalization ------------------------------------------------ */

kiln_status_t nn_instance_norm_infer(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

kiln_status_t nn_instance_norm_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[3] = {"input", "scale", "B"};
  kiln_tensor *in[3], *y;
  for (int i = 0; i < 3; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(nn_require_float(in[i], i, names[i]));
  }
  kiln_tensor *x = in[0];
  KILN_TRY(require_rank_at_least(x, 2, "N, C, spatial..."));
  int64_t batch = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  char s[256], e[256];
  for (int i = 1; i < 3; i++) {
    if (in[i]->dtype != x->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input 0", i, names[i],
                        kiln_dtype_name(in[i]->dtype), kiln_dtype_name(x->dtype));
    if (in[i]->rank != 1 || in[i]->dims[0] != c)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected [%lld] (input is %s)", i, names[i],
                        kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s), (long long)c,
                        kiln_shape_str(x->rank, x->dims, e, sizeof e));
  }
  double eps = kiln_attr_float(ctx->node, "epsilon", 1e-5f);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  double *xv;
  KILN_TRY(nn_load_all_f64(x, &xv));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t ch = 0; ch < c; ch++) {
      double *p = xv + (b * c + ch) * inner, mean = 0, var = 0;
      for (int64_t j = 0; j < inner; j++) mean += p[j];
      mean = inner ? mean / (double)inner : 0;
      for (int64_t j = 0; j < inner; j++) var += (p[j] - mean) * (p[j] - mean);
      var = inner ? var / (double)inner : 0;
      double scale = kiln_load_f64(in[1]->data, in[1]->dtype, ch), bias = kiln_load_f64(in[2]->data, in[2]->dtype, ch);
      for (int64_t j = 0; j < inner; j++) p[j] = (p[j] - mean) / sqrt(var + eps) * scale + bias;
    }
  nn_store_all_f64(y, xv);
  free(xv);
  return NULL;
}

/* ---- LayerNormalization ----------------------------------------------------- */

static kiln_status_t layer_norm_stash_dtype(const kiln_node *node, kiln_dtype *out) {
  int64_t st = kiln_attr_int(node, "stash_type", 1);
  if (!kiln_dtype_is_valid((int)st) || !kiln_dtype_is_float((kiln_dtype)st))
    return kiln_error(KILN_INVALID_MODEL, "attribute stash_type: %lld is not a float dtype", (long long)st);
  *out = (kiln_dtype)st;
  return NULL;
}

kiln_status_t nn_layer_norm_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  kiln_dtype u = KILN_DTYPE_F32;
  KILN_TRY(layer_norm_stash_dtype(ctx->node, &u));
  kiln_type_copy(&ctx->outputs[0], x);
  if (x->rank < 0) {
    for (int i = 1; i < ctx->n_outputs; i++) kiln_infer_set(ctx, i, u, -1, NULL);
    return NULL;
  }
  int64_t axis = kiln_attr_int(ctx->node, "axis", -1);
  if (axis < -x->rank || axis >= x->rank)
    return kiln_error(KILN_INVALID_MODEL, "attribute axis: %lld out of range for input 0 (X) of rank %d",
                      (long long)axis, x->rank);
  if (axis < 0) axis += x->rank;
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < axis ? x->dims[i] : 1;
  for (int i = 1; i < ctx->n_outputs && i < 3; i++) kiln_infer_set(ctx, i, u, x->rank, dims);
  return NULL;
}

kiln_status_t nn_layer_norm_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *scale, *bias = kiln_kernel_input(ctx, 2), *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &scale));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(nn_require_float(scale, 1, "Scale"));
  if (bias) KILN_TRY(nn_require_float(bias, 2, "B"));
  kiln_dtype u = KILN_DTYPE_F32;
  KILN_TRY(layer_norm_stash_dtype(ctx->node, &u));
  int64_t axis = kiln_attr_int(ctx->node, "axis", -1);
  if (x->rank == 0 || axis < -x->rank || axis >= x->rank)
    return kiln_error(KILN_INVALID_MODEL, "attribute axis: %lld out of range for input 0 (X) of rank %d",
                      (long long)axis, x->rank);
  if (axis < 0) axis += x->rank;
  int64_t sstr[KILN_MAX_RANK], bstr[KILN_MAX_RANK];
  KILN_TRY(nn_broadcast_strides(scale->rank, scale->dims, x->rank, x->dims, "input 1 (Scale)", sstr));
  if (bias) KILN_TRY(nn_broadcast_strides(bias->rank, bias->dims, x->rank, x->dims, "input 2 (B)", bstr));
  int64_t outer = kiln_shape_numel((int)axis, x->dims), inner = kiln_shape_numel(x->rank - (int)axis, x->dims + axis);
  double eps = kiln_attr_float(ctx->node, "epsilon", 1e-5f);

  int64_t sdims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) sdims[i] = i < axis ? x->dims[i] : 1;
  kiln_tensor *mean_t = NULL, *inv_t = NULL;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  if (ctx->n_outputs > 1 && ctx->output_wanted[1]) KILN_TRY(kiln_kernel_output_tensor(ctx, 1, u, x->rank, sdims, &mean_t));
  if (ctx->n_outputs > 2 && ctx->output_wanted[2]) KILN_TRY(kiln_kernel_output_tensor(ctx, 2, u, x->rank, sdims, &inv_t));
  double *xv;
  KILN_TRY(nn_load_all_f64(x, &xv));
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t o = 0; o < outer; o++) {
    double *p = xv + o * inner, mean = 0, var = 0;
    for (int64_t j = 0; j < inner; j++) mean += p[j];
    mean = inner ? mean / (double)inner : 0;
    for (int64_t j = 0; j < inner; j++) var += (p[j] - mean) * (p[j] - mean);
    var = inner ? var / (double)inner : 0;
    double inv = 1.0 / sqrt(var + eps);
    for (int64_t j = 0; j < inner; j++) {
      int64_t so = 0, bo = 0;
      for (int i = 0; i < x->rank; i++) {
        so += idx[i] * sstr[i];
        if (bias) bo += idx[i] * bstr[i];
      }
      double v = (p[j] - mean) * inv * kiln_load_f64(scale->data, scale->dtype, so);
      if (bias) v += kiln_load_f64(bias->data, bias->dtype, bo);
      p[j] = v;
      nn_next_index(x->rank, x->dims, idx);
    }
    if (mean_t) kiln_store_f64(mean_t->data, u, o, mean);
    if (inv_t) kiln_store_f64(inv_t->data, u, o, inv);
  }
  nn_store_all_f64(y, xv);
  free(xv);
  return NULL;
}

/* ---- LRN ------------------------------------------------------------------ */

kiln_status_t nn_lrn_infer(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

kiln_status_t nn_lrn_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(require_rank_at_least(x, 2, "N, C, ..."));
  const kiln_attr *sa = kiln_node_attr(ctx->node, "size");
  if (!sa || sa->type != KILN_ATTR_INT) return kiln_error(KILN_INVALID_MODEL, "attribute size (int) is required");
  int64_t size = sa->i;
  if (size < 1) return kiln_error(KILN_INVALID_MODEL, "attribute size: %lld, expected >= 1", (long long)size);
  double alpha = kiln_attr_float(ctx->node, "alpha", 1e-4f), beta = kiln_attr_float(ctx->node, "beta", 0.75f);
  double bias = kiln_attr_float(ctx->node, "bias", 1.0f);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  int64_t batch = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo; /* floor and ceil of (size-1)/2 */
  double *xv;
  KILN_TRY(nn_load_all_f64(x, &xv));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t j = 0; j < inner; j++) {
        double sq = 0;
        int64_t first = ch - lo > 0 ? ch - lo : 0, last = hi < c - 1 - ch ? ch + hi : c - 1;
        for (int64_t k = first; k <= last; k++) {
          double v = xv[(b * c + k) * inner + j];
          sq += v * v;
        }
        int64_t off = (b * c + ch) * inner + j;
        kiln_store_f64(y->data, y->dtype, off, xv[off] / pow(bias + alpha / (double)size * sq, beta));
      }
  free(xv);
  return NULL;
}

/* ---- MeanVarianceNormalization ---------------------------------------------- */

kiln_status_t nn_mvn_infer(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

kiln_status_t nn_mvn_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  static const int64_t default_axes[3] = {0, 2, 3};
  int n_axes;
  const int64_t *axes = kiln_attr_ints(ctx->node, "axes", &n_axes);
  if (!kiln_node_attr(ctx->node, "axes")) {
    axes = default_axes;
    n_axes = 3;
  }
  bool reduce[KILN_MAX_RANK] = {0};
  for (int i = 0; i < n_axes; i++) {
    int64_t a = axes[i];
    if (a < -x->rank || a >= x->rank)
      return kiln_error(KILN_INVALID_MODEL, "attribute axes: axis %lld out of range for input 0 (X) of rank %d",
                        (long long)a, x->rank);
    reduce[a < 0 ? a + x->rank : a] = true;
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  double *xv = NULL, *mean = NULL, *var = NULL;
  int64_t *keys = NULL, groups = 0;
  kiln_status_t st = nn_load_all_f64(x, &xv);
  if (!st) st = group_keys(x->rank, x->dims, reduce, &keys, &groups);
  if (!st) st = group_moments(xv, x->numel, keys, groups, &mean, &var);
  if (!st) {
    /* As the ONNX function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9). */
    for (int64_t e = 0; e < x->numel; e++) xv[e] = (xv[e] - mean[keys[e]]) / (sqrt(var[keys[e]]) + 1e-9);
    nn_store_all_f64(y, xv);
  }
  free(xv);
  free(keys);
  free(mean);
  free(var);
  return st;
}
