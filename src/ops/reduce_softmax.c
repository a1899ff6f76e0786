/* Softmax, LogSoftmax, Hardmax and LpNormalization: ops that normalize
 * each row along an axis. Computed in double, rounded back once, except
 * f16/bf16 Softmax and LogSoftmax, which round at each step of their ONNX
 * function body as ONNX's reference computes it (see half_row below).
 *
 * Before opset 13, Softmax/LogSoftmax/Hardmax coerce the input to 2-D at
 * `axis` (default 1): a row is everything from `axis` on. From 13 a row
 * is the one axis `axis` (default -1). */
#include "ops/reduce_internal.h"

#include <math.h>

/* A row is n elements at base + k * inner, for each of outer * inner bases. */
typedef struct row_layout {
  int64_t outer, n, inner;
} row_layout;

static kiln_status_t softmax_layout(const kiln_kernel_ctx *ctx, const kiln_tensor *x, row_layout *l) {
  int r = x->rank;
  if (ctx->opset < 13) {
    int64_t axis = kiln_attr_int(ctx->node, "axis", 1);
    if (axis < -r || axis > r)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis %lld out of range [%d, %d] for rank %d",
                        (long long)axis, -r, r, r);
    if (axis < 0) axis += r;
    l->outer = 1;
    l->n = 1;
    for (int d = 0; d < r; d++) {
      if (d < axis)
        l->outer *= x->dims[d];
      else
        l->n *= x->dims[d];
    }
    l->inner = 1;
    return NULL;
  }
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", -1), r, "attribute axis", &axis));
  kiln_reduce_split_dims(x, axis, &l->outer, &l->n, &l->inner);
  return NULL;
}

typedef enum { NORM_SOFTMAX, NORM_LOG_SOFTMAX, NORM_HARDMAX } softmax_kind;


/* One f16/bf16 row (max m) of Softmax or LogSoftmax, rounded to dt after
 * every step of the function body, as ONNX's reference (numpy, ml_dtypes)
 * does: d = x - m, e = exp(d) (taken in f32, then rounded), s = sum(e),
 * then e / s, or d - log(s) for LogSoftmax (the function body's form; the
 * reference's own LogSoftmax takes log of the rounded softmax, which is
 * -inf wherever a probability underflows: x - m below about -17.3 in f16).
 * The sum rounds as the reference's reduction does: ml_dtypes' bfloat16
 * adds one element at a time, rounding each partial sum; numpy's float16
 * does that too when the axis is strided (inner > 1), but along the
 * contiguous axis it accumulates in float pairwise and rounds once, which
 * for these terms is the exact sum rounded once. An unrounded bf16 sum
 * leaves attention outputs an ulp off ONNX's. */
static void half_row(const kiln_tensor *x, kiln_tensor *y, const row_layout *l, int64_t base, double m,
                     softmax_kind kind) {
  kiln_dtype dt = x->dtype;
  bool round_each = dt == KILN_DTYPE_BF16 || l->inner > 1;
  double s = 0.0;
  for (int64_t k = 0; k < l->n; k++) {
    double d = kiln_round_to_dtype(dt, kiln_load_f64(x->data, dt, base + k * l->inner) - m);
    s += kiln_round_to_dtype(dt, (float)exp(d));
    if (round_each) s = kiln_round_to_dtype(dt, s);
  }
  s = kiln_round_to_dtype(dt, s);
  double log_s = kiln_round_to_dtype(dt, (float)log(s));
  for (int64_t k = 0; k < l->n; k++) {
    int64_t at = base + k * l->inner;
    double d = kiln_round_to_dtype(dt, kiln_load_f64(x->data, dt, at) - m);
    double v = kind == NORM_SOFTMAX ? kiln_round_to_dtype(dt, (float)exp(d)) / s : d - log_s;
    kiln_store_f64(y->data, dt, at, kiln_round_to_dtype(dt, v));
  }
}

static kiln_status_t softmax_common(kiln_kernel_ctx *ctx, softmax_kind kind) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_reduce_check_dtype(x, KILN_DT_FLOATS, "input 0 (input)"));
  row_layout l;
  KILN_TRY(softmax_layout(ctx, x, &l));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  kiln_dtype dt = x->dtype;
  for (int64_t o = 0; o < l.outer; o++) {
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.n * l.inner + i;
      if (kind == NORM_HARDMAX) { /* 1 at the first maximum (a NaN counts as the maximum) */
        int64_t best = 0;
        for (int64_t k = 1; k < l.n; k++) {
          double v = kiln_load_f64(x->data, dt, base + k * l.inner);
          double b = kiln_load_f64(x->data, dt, base + best * l.inner);
          if (!isnan(b) && (isnan(v) || v > b)) best = k;
        }
        for (int64_t k = 0; k < l.n; k++) kiln_store_f64(y->data, dt, base + k * l.inner, k == best ? 1.0 : 0.0);
        continue;
      }
      double m = -INFINITY;
      for (int64_t k = 0; k < l.n; k++) {
        double v = kiln_load_f64(x->data, dt, base + k * l.inner);
        if (v > m || isnan(v)) m = v;
        if (isnan(m)) break;
      }
      if (dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16) {
        half_row(x, y, &l, base, m, kind);
        continue;
      }
      double sum = 0.0;
      for (int64_t k = 0; k < l.n; k++) sum += exp(kiln_load_f64(x->data, dt, base + k * l.inner) - m);
      double log_sum = log(sum);
      for (int64_t k = 0; k < l.n; k++) {
        int64_t at = base + k * l.inner;
        double v = kiln_load_f64(x->data, dt, at) - m;
        kiln_store_f64(y->data, dt, at, kind == NORM_SOFTMAX ? exp(v) / sum : v - log_sum);
      }
    }
  }
  return NULL;
}

kiln_status_t kiln_reduce_softmax_kernel(kiln_kernel_ctx *ctx) { return softmax_common(ctx, NORM_SOFTMAX); }
kiln_status_t kiln_reduce_logsoftmax_kernel(kiln_kernel_ctx *ctx) { return softmax_common(ctx, NORM_LOG_SOFTMAX); }
kiln_status_t kiln_reduce_hardmax_kernel(kiln_kernel_ctx *ctx) { return softmax_common(ctx, NORM_HARDMAX); }

/* LpNormalization (opset 1): x / ||x||_p along axis, p in {1, 2}. */
kiln_status_t kiln_reduce_lpnorm_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_reduce_check_dtype(x, KILN_DT_FLOATS, "input 0 (input)"));
  int64_t p = kiln_attr_int(ctx->node, "p", 2);
  if (p != 1 && p != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute p must be 1 or 2, got %lld", (long long)p);
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) must have rank >= 1, got a scalar");
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", -1), x->rank, "attribute axis", &axis));
  row_layout l;
  kiln_reduce_split_dims(x, axis, &l.outer, &l.n, &l.inner);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  kiln_dtype dt = x->dtype;
  for (int64_t o = 0; o < l.outer; o++) {
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.n * l.inner + i;
      double norm = 0.0;
      for (int64_t k = 0; k < l.n; k++) {
        double v = kiln_load_f64(x->data, dt, base + k * l.inner);
        norm += p == 1 ? fabs(v) : v * v;
      }
      if (p == 2) norm = sqrt(norm);
      for (int64_t k = 0; k < l.n; k++) {
        int64_t at = base + k * l.inner;
        /* a zero norm (an all-zero row) gives 0, not 0/0, as the spec states */
        kiln_store_f64(y->data, dt, at, norm == 0 ? 0.0 : kiln_load_f64(x->data, dt, at) / norm);
      }
    }
  }
  return NULL;
}
