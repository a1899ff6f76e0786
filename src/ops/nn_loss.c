/* Dropout, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. */
#include "ops/nn_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>

/* ---- Dropout ---------------------------------------------------------------- */

/* splitmix64: small, good enough for dropout masks. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static kiln_dtype dropout_mask_dtype(int opset, kiln_dtype data) {
  return opset >= 10 ? KILN_DTYPE_BOOL : data;
}

kiln_status_t nn_dropout_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  kiln_type_copy(&ctx->outputs[0], x);
  if (ctx->n_outputs > 1) kiln_infer_set(ctx, 1, dropout_mask_dtype(ctx->opset, x->dtype), x->rank, x->dims);
  return NULL;
}

kiln_status_t nn_dropout_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y, *mask = NULL;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  bool float8 = kiln_dtype_is_narrow_float(x->dtype) && x->dtype != KILN_DTYPE_F4E2M1 && x->dtype != KILN_DTYPE_F8E8M0;
  if (!(float8 && ctx->opset >= 22)) KILN_TRY(nn_require_float(x, 0, "data")); /* float8 from Dropout-22 */
  double ratio = kiln_attr_float(ctx->node, "ratio", 0.5f);
  bool training = false;
  /* Before opset 12 training is not a run-time choice: opset 7-11 are
   * always inference, and for opset 1-6 an inference runtime treats
   * is_test=0 the same way (as every exporter's consumer does). From opset
   * 12, the ratio and training_mode inputs decide. */
  if (ctx->opset >= 12) {
    kiln_tensor *r = kiln_kernel_input(ctx, 1), *tm = kiln_kernel_input(ctx, 2);
    if (r) {
      if (r->numel != 1 || !kiln_dtype_is_float(r->dtype))
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (ratio): expected a float scalar, got %s with %lld elements",
                          kiln_dtype_name(r->dtype), (long long)r->numel);
      ratio = kiln_load_f64(r->data, r->dtype, 0);
    }
    if (tm) {
      if (tm->numel != 1 || tm->dtype != KILN_DTYPE_BOOL)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (training_mode): expected a bool scalar, got %s with %lld elements",
                          kiln_dtype_name(tm->dtype), (long long)tm->numel);
      training = ((const uint8_t *)tm->data)[0] != 0;
    }
  }
  if (training && !(ratio >= 0 && ratio <= 1))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (ratio): %g, expected in [0, 1]", ratio);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  if (ctx->n_outputs > 1 && ctx->output_wanted[1])
    KILN_TRY(kiln_kernel_output_tensor(ctx, 1, dropout_mask_dtype(ctx->opset, x->dtype), x->rank, x->dims, &mask));
  if (!training || ratio == 0) {
    memcpy(y->data, x->data, kiln_tensor_nbytes(x));
    if (mask)
      for (int64_t i = 0; i < mask->numel; i++) kiln_store_f64(mask->data, mask->dtype, i, 1.0);
    return NULL;
  }
  uint64_t state;
  const kiln_attr *seed = kiln_node_attr(ctx->node, "seed");
  if (seed && seed->type == KILN_ATTR_INT) {
    state = (uint64_t)seed->i;
  } else {
    static _Atomic uint64_t calls;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    state = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (atomic_fetch_add(&calls, 1) * 0x2545f4914f6cdd1dull);
  }
  double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  for (int64_t i = 0; i < x->numel; i++) {
    double u = (double)(splitmix64(&state) >> 11) * 0x1.0p-53; /* uniform in [0, 1) */
    bool keep = u >= ratio;
    kiln_store_f64(y->data, y->dtype, i, keep ? kiln_load_f64(x->data, x->dtype, i) * scale : 0.0);
    if (mask) kiln_store_f64(mask->data, mask->dtype, i, keep ? 1.0 : 0.0);
  }
  return NULL;
}

/* ---- NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss ------------------- */

enum loss_reduction { LOSS_NONE, LOSS_SUM, LOSS_MEAN };

static kiln_status_t loss_reduction(const kiln_node *node, enum loss_reduction *out) {
  const char *r = kiln_attr_string(node, "reduction", "mean");
  if (!strcmp(r, "none"))
    *out = LOSS_NONE;
  else if (!strcmp(r, "sum"))
    *out = LOSS_SUM;
  else if (!strcmp(r, "mean"))
    *out = LOSS_MEAN;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute reduction: '%s', expected none, sum or mean", r);
  return NULL;
}

/* Output type: (N, d1, ..., dk) for reduction none, else a scalar. */
static kiln_status_t loss_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  enum loss_reduction red = LOSS_MEAN;
  KILN_TRY(loss_reduction(ctx->node, &red));
  char s[256];
  if (x->rank >= 0 && x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: shape %s, expected rank >= 2 (N, C, d1, ...)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  if (red != LOSS_NONE) {
    kiln_infer_set(ctx, 0, x->dtype, 0, NULL);
  } else if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
  } else {
    int64_t dims[KILN_MAX_RANK];
    dims[0] = x->dims[0];
    for (int i = 2; i < x->rank; i++) dims[i - 1] = x->dims[i];
    kiln_infer_set(ctx, 0, x->dtype, x->rank - 1, dims);
  }
  return NULL;
}

kiln_status_t nn_nll_loss_infer(kiln_infer_ctx *ctx) { return loss_infer(ctx); }

kiln_status_t nn_sce_loss_infer(kiln_infer_ctx *ctx) {
  KILN_TRY(loss_infer(ctx));
  if (ctx->n_outputs > 1) KILN_TRY(kiln_infer_same_as_input(ctx, 0, 1));
  return NULL;
}

/* Loss from log-probabilities lp (shape of input 0: N, C, d...) and
 * targets; writes output 0. Names are those of the op's inputs. */
static kiln_status_t nll_from_log_prob(kiln_kernel_ctx *ctx, const kiln_tensor *x, const double *lp, const char *tname,
                                       const char *wname) {
  kiln_tensor *target, *weight = kiln_kernel_input(ctx, 2), *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &target));
  char s1[256], s2[256];
  enum loss_reduction red = LOSS_MEAN;
  KILN_TRY(loss_reduction(ctx->node, &red));
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: shape %s, expected rank >= 2 (N, C, d1, ...)",
                      kiln_shape_str(x->rank, x->dims, s1, sizeof s1));
  int64_t n = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  int64_t tdims[KILN_MAX_RANK];
  tdims[0] = n;
  for (int i = 2; i < x->rank; i++) tdims[i - 1] = x->dims[i];
  if (target->dtype != KILN_DTYPE_I32 && target->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (%s): dtype %s, expected int32 or int64", tname,
                      kiln_dtype_name(target->dtype));
  if (!kiln_shape_equal(target->rank, target->dims, x->rank - 1, tdims))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (%s): shape %s, expected %s (input 0 without its class axis)", tname,
                      kiln_shape_str(target->rank, target->dims, s1, sizeof s1),
                      kiln_shape_str(x->rank - 1, tdims, s2, sizeof s2));
  if (weight) {
    if (weight->dtype != x->dtype || weight->rank != 1 || weight->dims[0] != c)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (%s): %s%s, expected %s[%lld] (one weight per class)", wname,
                        kiln_dtype_name(weight->dtype), kiln_shape_str(weight->rank, weight->dims, s1, sizeof s1),
                        kiln_dtype_name(x->dtype), (long long)c);
  }
  const kiln_attr *ii = kiln_node_attr(ctx->node, "ignore_index");
  bool has_ignore = ii && ii->type == KILN_ATTR_INT;
  int64_t ignore = has_ignore ? ii->i : 0;
  if (red == LOSS_NONE)
    KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank - 1, tdims, &y));
  else
    KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, 0, NULL, &y));
  double sum = 0, wsum = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t j = 0; j < inner; j++) {
      int64_t ti = b * inner + j;
      int64_t t = kiln_load_i64(target->data, target->dtype, ti);
      double loss = 0, w = 0;
      if (!(has_ignore && t == ignore)) {
        if (t < 0 || t >= c)
          return kiln_error(KILN_OUT_OF_RANGE, "input 1 (%s): class %lld at position %lld out of range [0, %lld)", tname,
                            (long long)t, (long long)ti, (long long)c);
        w = weight ? kiln_load_f64(weight->data, weight->dtype, t) : 1.0;
        loss = -lp[(b * c + t) * inner + j] * w;
      }
      if (red == LOSS_NONE) kiln_store_f64(y->data, y->dtype, ti, loss);
      sum += loss;
      wsum += w;
    }
  if (red == LOSS_SUM) kiln_store_f64(y->data, y->dtype, 0, sum);
  if (red == LOSS_MEAN) kiln_store_f64(y->data, y->dtype, 0, sum / wsum); /* all ignored: NaN, as numpy */
  return NULL;
}

kiln_status_t nn_nll_loss_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "input"));
  double *xv;
  KILN_TRY(nn_load_all_f64(x, &xv));
  kiln_status_t st = nll_from_log_prob(ctx, x, xv, "target", "weight");
  free(xv);
  return st;
}

kiln_status_t nn_sce_loss_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  char s[256];
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "scores"));
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (scores): shape %s, expected rank >= 2 (N, C, d1, ...)",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  double *lp;
  KILN_TRY(nn_load_all_f64(x, &lp));
  /* log_softmax over the class axis (1), in place. */
  int64_t n = x->dims[0], c = x->dims[1], inner = kiln_shape_numel(x->rank - 2, x->dims + 2);
  for (int64_t b = 0; b < n; b++)
    for (int64_t j = 0; j < inner; j++) {
      double *p = lp + b * c * inner + j, mx = -INFINITY, se = 0;
      for (int64_t k = 0; k < c; k++) mx = fmax(mx, p[k * inner]);
      for (int64_t k = 0; k < c; k++) se += exp(p[k * inner] - mx);
      double lse = mx + log(se);
      for (int64_t k = 0; k < c; k++) p[k * inner] -= lse;
    }
  kiln_status_t st = nll_from_log_prob(ctx, x, lp, "labels", "weights");
  if (!st && ctx->n_outputs > 1 && ctx->output_wanted[1]) {
    kiln_tensor *o;
    st = kiln_kernel_output_tensor(ctx, 1, x->dtype, x->rank, x->dims, &o);
    if (!st) nn_store_all_f64(o, lp);
  }
  free(lp);
  return st;
}
