/* Pooling: AveragePool, MaxPool (with Indices), LpPool, their Global
 * forms, and MaxUnpool. A window over the spatial axes of an
 * (N, C, D1, ..., Dn) tensor; positions in the padding are skipped (and,
 * for AveragePool with count_include_pad, counted). */
#include "ops/nn_internal.h"

#include <math.h>

enum pool_kind { POOL_AVG, POOL_MAX, POOL_LP };

static double lp_attr_p(const kiln_node *node) {
  const kiln_attr *a = kiln_node_attr(node, "p");
  if (a && a->type == KILN_ATTR_INT) return (double)a->i;
  if (a && a->type == KILN_ATTR_FLOAT) return a->f;
  return 2.0;
}

static kiln_status_t check_pool_dtype(const kiln_tensor *x, enum pool_kind kind, int opset) {
  /* MaxPool accepts int8/uint8 since opset 12. */
  if (kind == POOL_MAX && opset >= 12 && (x->dtype == KILN_DTYPE_I8 || x->dtype == KILN_DTYPE_U8)) return NULL;
  return nn_require_float(x, 0, "X");
}

static kiln_status_t check_pool_rank(int rank, const int64_t *dims) {
  char s[256];
  if (rank >= 0 && rank < 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank >= 3 (N, C, spatial...), got shape %s",
                      kiln_shape_str(rank, dims, s, sizeof s));
  return NULL;
}

static bool pool_ceil_mode(const kiln_node *node, enum pool_kind kind, int opset) {
  return kind != POOL_LP && opset >= 10 && kiln_attr_int(node, "ceil_mode", 0) != 0;
}

static kiln_status_t pool_infer(kiln_infer_ctx *ctx, enum pool_kind kind) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    if (kind == POOL_MAX) kiln_infer_set(ctx, 1, KILN_DTYPE_I64, -1, NULL);
    return NULL;
  }
  int n = x->rank - 2;
  kiln_window w;
  KILN_TRY(kiln_window_init(ctx->node, n, x->dims + 2, NULL, true, pool_ceil_mode(ctx->node, kind, ctx->opset), &w));
  int64_t dims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  for (int i = 0; i < n; i++) dims[2 + i] = w.out[i];
  kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
  if (kind == POOL_MAX) kiln_infer_set(ctx, 1, KILN_DTYPE_I64, x->rank, dims);
  return NULL;
}

static kiln_status_t pool_kernel(kiln_kernel_ctx *ctx, enum pool_kind kind) {
  kiln_tensor *x, *y, *ind = NULL;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(check_pool_dtype(x, kind, ctx->opset));
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  int n = x->rank - 2;
  kiln_window w;
  KILN_TRY(kiln_window_init(ctx->node, n, x->dims + 2, NULL, true, pool_ceil_mode(ctx->node, kind, ctx->opset), &w));
  bool count_pad = kind == POOL_AVG && ctx->opset >= 7 && kiln_attr_int(ctx->node, "count_include_pad", 0) != 0;
  int64_t storage_order = kiln_attr_int(ctx->node, "storage_order", 0);
  if (storage_order != 0 && storage_order != 1)
    return kiln_error(KILN_INVALID_MODEL, "attribute storage_order: %lld, expected 0 (row major) or 1 (column major)",
                      (long long)storage_order);
  double p = lp_attr_p(ctx->node);
  if (kind == POOL_LP && !(p > 0)) return kiln_error(KILN_INVALID_MODEL, "attribute p: %g, expected > 0", p);

  int64_t ydims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  for (int i = 0; i < n; i++) ydims[2 + i] = w.out[i];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, ydims, &y));
  if (kind == POOL_MAX && ctx->n_outputs > 1 && ctx->output_wanted[1])
    KILN_TRY(kiln_kernel_output_tensor(ctx, 1, KILN_DTYPE_I64, x->rank, ydims, &ind));
  if (y->numel == 0) return NULL;

  double *xv;
  KILN_TRY(nn_load_all_f64(x, &xv));
  int64_t planes = x->dims[0] * x->dims[1];
  int64_t in_sp = kiln_shape_numel(n, w.in), out_sp = kiln_shape_numel(n, w.out);
  int64_t xs[KILN_MAX_RANK], col[KILN_MAX_RANK];
  nn_row_major_strides(n, w.in, xs);
  for (int i = 0; i < n; i++) /* column-major strides, for storage_order 1 */
    col[i] = i == 0 ? 1 : col[i - 1] * w.in[i - 1];
  int64_t yi = 0;
  for (int64_t plane = 0; plane < planes; plane++) {
    const double *xp = xv + plane * in_sp;
    int64_t o[KILN_MAX_RANK] = {0};
    for (int64_t j = 0; j < out_sp; j++, yi++) {
      double acc = kind == POOL_MAX ? -INFINITY : 0.0;
      int64_t best = -1, count = 0;
      int64_t k[KILN_MAX_RANK] = {0};
      do {
        int64_t off = 0, coff = 0;
        bool inside = true, in_padded = true;
        for (int i = 0; i < n; i++) {
          int64_t pos = o[i] * w.stride[i] + k[i] * w.dilation[i] - w.pad_begin[i];
          if (pos < 0 || pos >= w.in[i]) inside = false;
          if (pos < -w.pad_begin[i] || pos >= w.in[i] + w.pad_end[i]) in_padded = false;
          off += pos * xs[i];
          coff += pos * col[i];
        }
        if (count_pad && in_padded) count++;
        if (!inside) continue;
        double v = xp[off];
        if (kind == POOL_MAX) {
          if (best < 0 || v > acc || (isnan(v) && !isnan(acc))) {
            acc = v;
            best = storage_order ? coff : off;
          }
        } else if (kind == POOL_AVG) {
          acc += v;
          if (!count_pad) count++;
        } else {
          acc += pow(fabs(v), p);
        }
      } while (nn_next_index(n, w.kernel, k));
      double r;
      if (kind == POOL_AVG)
        r = count > 0 ? acc / (double)count : NAN;
      else if (kind == POOL_LP)
        r = pow(acc, 1.0 / p);
      else
        r = acc;
      if (kind == POOL_MAX && best < 0 && !kiln_dtype_is_float(y->dtype))
        r = y->dtype == KILN_DTYPE_I8 ? -128.0 : 0.0; /* empty window: the type's lowest value */
      kiln_store_f64(y->data, y->dtype, yi, r);
      if (ind) ((int64_t *)ind->data)[yi] = best < 0 ? -1 : plane * in_sp + best;
      nn_next_index(n, w.out, o);
    }
  }
  free(xv);
  return NULL;
}

kiln_status_t nn_average_pool_infer(kiln_infer_ctx *ctx) { return pool_infer(ctx, POOL_AVG); }
kiln_status_t nn_average_pool_kernel(kiln_kernel_ctx *ctx) { return pool_kernel(ctx, POOL_AVG); }
kiln_status_t nn_max_pool_infer(kiln_infer_ctx *ctx) { return pool_infer(ctx, POOL_MAX); }
kiln_status_t nn_max_pool_kernel(kiln_kernel_ctx *ctx) { return pool_kernel(ctx, POOL_MAX); }
kiln_status_t nn_lp_pool_infer(kiln_infer_ctx *ctx) { return pool_infer(ctx, POOL_LP); }
kiln_status_t nn_lp_pool_kernel(kiln_kernel_ctx *ctx) { return pool_kernel(ctx, POOL_LP); }

/* ---- kiln.MaxPoolArgmax, kiln.MaxPoolGrad: MaxPool's gradient ------------
 *
 *   kiln.MaxPoolArgmax(X) -> I        MaxPool's window attributes (kernel_shape,
 *     strides, pads, dilations, auto_pad, ceil_mode): I[n, c, o] (int32) is the
 *     flat index within X's plane of the element MaxPool's output o takes
 *     (the first maximum, or the first NaN; -1 when the window has no element
 *     inside X).
 *   kiln.MaxPoolGrad(dY, I, shape) -> dX   dX (shape: int64, X's shape) is
 *     zero but for dY[n, c, o] added at I[n, c, o] of each plane; I must come
 *     from kiln.MaxPoolArgmax with the same window attributes (kernel_shape,
 *     strides, pads, dilations), which a compiled kernel reads to find, for
 *     each element of dX, the outputs whose windows hold it.
 *
 * The gradient rule of MaxPool (ops/nn_grad.c) emits them: a gather over
 * the few windows that hold each input element compiles on every device,
 * where MaxPool's Indices output and a ScatterElements do not. */

kiln_status_t nn_max_pool_argmax_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_I32, -1, NULL);
    return NULL;
  }
  int n = x->rank - 2;
  kiln_window w;
  KILN_TRY(kiln_window_init(ctx->node, n, x->dims + 2, NULL, true, kiln_attr_int(ctx->node, "ceil_mode", 0) != 0, &w));
  int64_t dims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  for (int i = 0; i < n; i++) dims[2 + i] = w.out[i];
  kiln_infer_set(ctx, 0, KILN_DTYPE_I32, x->rank, dims);
  return NULL;
}

kiln_status_t nn_max_pool_argmax_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *ind;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  int n = x->rank - 2;
  kiln_window w;
  KILN_TRY(kiln_window_init(ctx->node, n, x->dims + 2, NULL, true, kiln_attr_int(ctx->node, "ceil_mode", 0) != 0, &w));
  int64_t ydims[KILN_MAX_RANK] = {x->dims[0], x->dims[1]};
  for (int i = 0; i < n; i++) ydims[2 + i] = w.out[i];
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_I32, x->rank, ydims, &ind));
  int64_t planes = x->dims[0] * x->dims[1], in_sp = kiln_shape_numel(n, w.in), out_sp = kiln_shape_numel(n, w.out);
  if (in_sp > INT32_MAX)
    return kiln_error(KILN_UNSUPPORTED, "input 0 (X): %lld elements per plane, more than int32 indices hold",
                      (long long)in_sp);
  int64_t xs[KILN_MAX_RANK];
  nn_row_major_strides(n, w.in, xs);
  int32_t *out = ind->data;
  for (int64_t plane = 0; plane < planes; plane++) {
    int64_t o[KILN_MAX_RANK] = {0};
    for (int64_t j = 0; j < out_sp; j++) {
      double acc = -INFINITY;
      int64_t best = -1, k[KILN_MAX_RANK] = {0};
      do {
        int64_t off = 0;
        bool inside = true;
        for (int i = 0; i < n; i++) {
          int64_t pos = o[i] * w.stride[i] + k[i] * w.dilation[i] - w.pad_begin[i];
          inside &= pos >= 0 && pos < w.in[i];
          off += pos * xs[i];
        }
        if (!inside) continue;
        double v = kiln_load_f64(x->data, x->dtype, plane * in_sp + off);
        if (best < 0 || v > acc || (isnan(v) && !isnan(acc))) { /* MaxPool's choice (pool_kernel) */
          acc = v;
          best = off;
        }
      } while (nn_next_index(n, w.kernel, k));
      out[plane * out_sp + j] = (int32_t)best;
      nn_next_index(n, w.out, o);
    }
  }
  return NULL;
}

/* X's shape from input 2 (a 1-D int64 tensor of dY's rank); its batch and
 * channels must be dY's. */
static kiln_status_t max_pool_grad_shape(const kiln_tensor *shape, int rank, const int64_t *dy, int64_t *dims) {
  char s[256];
  if (shape->dtype != KILN_DTYPE_I64 || shape->rank != 1 || shape->numel != rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (shape): %s %s, expected int64 [%d]", kiln_dtype_name(shape->dtype),
                      kiln_shape_str(shape->rank, shape->dims, s, sizeof s), rank);
  for (int i = 0; i < rank; i++) {
    dims[i] = ((const int64_t *)shape->data)[i];
    if (dims[i] < 0 || (i < 2 && dims[i] != dy[i]))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (shape): %s, expected X's shape, whose batch and channels are dY's",
                        kiln_shape_str(rank, dims, s, sizeof s));
  }
  return NULL;
}

kiln_status_t nn_max_pool_grad_infer(kiln_infer_ctx *ctx) {
  const kiln_type *dy = ctx->inputs[0];
  if (!dy) return NULL;
  if (dy->rank < 0 || !ctx->consts[2]) {
    kiln_infer_set(ctx, 0, dy->dtype, dy->rank, NULL);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  KILN_TRY(max_pool_grad_shape(ctx->consts[2], dy->rank, dy->dims, dims));
  kiln_infer_set(ctx, 0, dy->dtype, dy->rank, dims);
  return NULL;
}

kiln_status_t nn_max_pool_grad_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *dy, *ind, *shape, *dx;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &dy));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &ind));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &shape));
  KILN_TRY(nn_require_float(dy, 0, "dY"));
  KILN_TRY(check_pool_rank(dy->rank, dy->dims));
  char a[256], b[256];
  if (ind->dtype != KILN_DTYPE_I32 || !kiln_shape_equal(ind->rank, ind->dims, dy->rank, dy->dims))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (I): %s %s, expected int32 of dY's shape %s",
                      kiln_dtype_name(ind->dtype), kiln_shape_str(ind->rank, ind->dims, a, sizeof a),
                      kiln_shape_str(dy->rank, dy->dims, b, sizeof b));
  int64_t dims[KILN_MAX_RANK];
  KILN_TRY(max_pool_grad_shape(shape, dy->rank, dy->dims, dims));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dy->dtype, dy->rank, dims, &dx));
  int64_t planes = dims[0] * dims[1];
  int64_t in_sp = planes ? dx->numel / planes : 0, out_sp = planes ? dy->numel / planes : 0;
  const int32_t *iv = ind->data;
  for (int64_t plane = 0; plane < planes; plane++)
    for (int64_t j = 0; j < out_sp; j++) {
      int64_t i = iv[plane * out_sp + j];
      if (i < -1 || i >= in_sp)
        return kiln_error(KILN_OUT_OF_RANGE, "input 1 (I): index %lld at element %lld, expected -1 to %lld", (long long)i,
                          (long long)(plane * out_sp + j), (long long)in_sp - 1);
      if (i < 0) continue;
      int64_t e = plane * in_sp + i;
      kiln_store_f64(dx->data, dx->dtype, e,
                     kiln_load_f64(dx->data, dx->dtype, e) + kiln_load_f64(dy->data, dy->dtype, plane * out_sp + j));
    }
  return NULL;
}

/* ---- Global pools: one window covering all spatial axes ---------------- */

static kiln_status_t global_pool_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  char s[256];
  if (x->rank >= 0 && x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank >= 2 (N, C, spatial...), got shape %s",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
  return NULL;
}

static kiln_status_t global_pool_kernel(kiln_kernel_ctx *ctx, enum pool_kind kind) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(nn_require_float(x, 0, "X"));
  char s[256];
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank >= 2 (N, C, spatial...), got shape %s",
                      kiln_shape_str(x->rank, x->dims, s, sizeof s));
  double p = lp_attr_p(ctx->node);
  if (kind == POOL_LP && !(p > 0)) return kiln_error(KILN_INVALID_MODEL, "attribute p: %g, expected > 0", p);
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, dims, &y));
  int64_t planes = y->numel, sp = kiln_shape_numel(x->rank - 2, x->dims + 2);
  for (int64_t plane = 0; plane < planes; plane++) {
    double acc = kind == POOL_MAX ? -INFINITY : 0.0;
    for (int64_t j = 0; j < sp; j++) {
      double v = kiln_load_f64(x->data, x->dtype, plane * sp + j);
      if (kind == POOL_MAX) {
        if (v > acc || isnan(v)) acc = v;
        if (isnan(v)) break;
      } else if (kind == POOL_AVG) {
        acc += v;
      } else {
        acc += pow(fabs(v), p);
      }
    }
    if (kind == POOL_AVG) acc = sp > 0 ? acc / (double)sp : NAN;
    if (kind == POOL_LP) acc = pow(acc, 1.0 / p);
    kiln_store_f64(y->data, y->dtype, plane, acc);
  }
  return NULL;
}

kiln_status_t nn_global_average_pool_infer(kiln_infer_ctx *ctx) { return global_pool_infer(ctx); }
kiln_status_t nn_global_average_pool_kernel(kiln_kernel_ctx *ctx) { return global_pool_kernel(ctx, POOL_AVG); }
kiln_status_t nn_global_max_pool_infer(kiln_infer_ctx *ctx) { return global_pool_infer(ctx); }
kiln_status_t nn_global_max_pool_kernel(kiln_kernel_ctx *ctx) { return global_pool_kernel(ctx, POOL_MAX); }
kiln_status_t nn_global_lp_pool_infer(kiln_infer_ctx *ctx) { return global_pool_infer(ctx); }
kiln_status_t nn_global_lp_pool_kernel(kiln_kernel_ctx *ctx) { return global_pool_kernel(ctx, POOL_LP); }

/* ---- MaxUnpool ------------------------------------------------------------ */

/* The unpooled spatial sizes implied by the attributes:
 * (in - 1) * stride - pad_begin - pad_end + kernel. */
static kiln_status_t unpool_shape(const kiln_node *node, int rank, const int64_t *x, int64_t *out) {
  int n = rank - 2, cnt;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &cnt);
  if (!ks) return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape is required");
  if (cnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: has %d values, expected %d (X has rank %d)", cnt, n,
                      rank);
  int scnt, pcnt;
  const int64_t *st = kiln_attr_ints(node, "strides", &scnt);
  const int64_t *pads = kiln_attr_ints(node, "pads", &pcnt);
  if (st && scnt && scnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute strides: has %d values, expected %d", scnt, n);
  if (pads && pcnt && pcnt != 2 * n)
    return kiln_error(KILN_INVALID_MODEL, "attribute pads: has %d values, expected %d", pcnt, 2 * n);
  out[0] = x[0];
  out[1] = x[1];
  for (int i = 0; i < n; i++) {
    int64_t s = st && scnt ? st[i] : 1;
    int64_t pb = pads && pcnt ? pads[i] : 0, pe = pads && pcnt ? pads[n + i] : 0;
    if (ks[i] < 1 || s < 1 || pb < 0 || pe < 0 || ks[i] > KILN_MAX_WINDOW_ATTR || s > KILN_MAX_WINDOW_ATTR ||
        pb > KILN_MAX_WINDOW_ATTR || pe > KILN_MAX_WINDOW_ATTR)
      return kiln_error(KILN_INVALID_MODEL, "attributes kernel_shape/strides/pads: invalid values on spatial axis %d", i);
    if (x[2 + i] < 0) {
      out[2 + i] = -1;
      continue;
    }
    out[2 + i] = (x[2 + i] > 0 ? (x[2 + i] - 1) * s : 0) - pb - pe + ks[i];
    if (out[2 + i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): spatial axis %d gives a negative unpooled size %lld", i,
                        (long long)out[2 + i]);
  }
  return NULL;
}

/* Reads the output_shape input (1-D int64 of X's rank) into dims. */
static kiln_status_t unpool_output_shape(const kiln_tensor *os, int rank, const int64_t *x, int64_t *dims) {
  char s[256];
  if (os->dtype != KILN_DTYPE_I64 || os->rank != 1 || os->dims[0] != rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (output_shape): %s%s, expected int64 [%d]",
                      kiln_dtype_name(os->dtype), kiln_shape_str(os->rank, os->dims, s, sizeof s), rank);
  for (int i = 0; i < rank; i++) {
    dims[i] = ((const int64_t *)os->data)[i];
    if (dims[i] < 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (output_shape): negative dim %lld", (long long)dims[i]);
    if (i < 2 && x[i] >= 0 && dims[i] != x[i])
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (output_shape): dim %d is %lld, expected %lld like input 0 (X)", i,
                        (long long)dims[i], (long long)x[i]);
  }
  return NULL;
}

kiln_status_t nn_max_unpool_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  bool has_os = ctx->n_inputs > 2 && ctx->inputs[2];
  const kiln_tensor *os = has_os ? ctx->consts[2] : NULL;
  if (x->rank < 0) {
    int64_t dims[KILN_MAX_RANK], unknown[KILN_MAX_RANK];
    for (int i = 0; i < KILN_MAX_RANK; i++) unknown[i] = -1;
    if (os && os->rank == 1 && os->dims[0] >= 3 && os->dims[0] <= KILN_MAX_RANK) {
      KILN_TRY(unpool_output_shape(os, (int)os->dims[0], unknown, dims));
      kiln_infer_set(ctx, 0, x->dtype, (int)os->dims[0], dims);
    } else {
      kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    }
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  if (os) {
    KILN_TRY(unpool_output_shape(os, x->rank, x->dims, dims));
  } else if (has_os) {
    for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : -1;
  } else {
    KILN_TRY(unpool_shape(ctx->node, x->rank, x->dims, dims));
  }
  kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
  return NULL;
}

kiln_status_t nn_max_unpool_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *ind, *os = kiln_kernel_input(ctx, 2), *y;
  char a[256], b[256];
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &ind));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(check_pool_rank(x->rank, x->dims));
  if (ind->dtype != KILN_DTYPE_I64 || !kiln_shape_equal(ind->rank, ind->dims, x->rank, x->dims))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (I): %s%s, expected int64 with the shape of input 0 (X) %s",
                      kiln_dtype_name(ind->dtype), kiln_shape_str(ind->rank, ind->dims, a, sizeof a),
                      kiln_shape_str(x->rank, x->dims, b, sizeof b));
  int64_t inferred[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  KILN_TRY(unpool_shape(ctx->node, x->rank, x->dims, inferred));
  if (os)
    KILN_TRY(unpool_output_shape(os, x->rank, x->dims, dims));
  else
    memcpy(dims, inferred, sizeof dims);
  int64_t total = kiln_shape_numel(x->rank, inferred);
  if (total < 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): unpooled shape overflows");
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, dims, &y));
  /* Indices address the unpooled tensor of the inferred shape; a larger
   * output_shape holds it at its origin (zeros elsewhere). */
  int64_t is[KILN_MAX_RANK], ys[KILN_MAX_RANK];
  nn_row_major_strides(x->rank, inferred, is);
  nn_row_major_strides(x->rank, dims, ys);
  for (int64_t e = 0; e < x->numel; e++) {
    int64_t idx = ((const int64_t *)ind->data)[e];
    if (idx < 0 || idx >= total)
      return kiln_error(KILN_OUT_OF_RANGE, "input 1 (I): index %lld at position %lld out of range [0, %lld)",
                        (long long)idx, (long long)e, (long long)total);
    int64_t off = 0, rem = idx;
    bool inside = true;
    for (int i = 0; i < x->rank; i++) {
      int64_t c = rem / is[i];
      rem %= is[i];
      if (c >= dims[i]) inside = false;
      off += c * ys[i];
    }
    if (inside) kiln_store_f64(y->data, y->dtype, off, kiln_load_f64(x->data, x->dtype, e));
  }
  return NULL;
}
