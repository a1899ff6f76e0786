/* Movement ops driven by index or mask data: Gather, GatherElements,
 * GatherND, Scatter, ScatterElements, ScatterND, OneHot, Compress,
 * NonZero, Unique.
 *
 * Every index read from data is range-checked (kiln_mv_wrap_index):
 * out-of-range is a KILN_OUT_OF_RANGE error naming the input, the value
 * and the valid range. OneHot is the exception the spec defines: an index
 * outside [-depth, depth) yields an all-off row.
 */
#include "ops/movement_internal.h"

#include <math.h>

static kiln_status_t require_int_indices(const kiln_tensor *t, int input, const char *name) {
  if (!kiln_dtype_is_int(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected int32 or int64, got %s", input, name,
                      kiln_dtype_name(t->dtype));
  return NULL;
}

/* ---- Gather ------------------------------------------------------------- */

kiln_status_t kiln_mv_infer_Gather(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *x = kiln_mv_in_type(ctx, 0), *idx = kiln_mv_in_type(ctx, 1);
  if (!x || x->rank < 0 || !idx || idx->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data): expected rank >= 1, got 0");
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  int r = x->rank - 1 + idx->rank;
  if (r > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank %d exceeds the maximum rank", r);
  int64_t out[KILN_MAX_RANK];
  int k = 0;
  for (int d = 0; d < axis; d++) out[k++] = x->dims[d];
  for (int d = 0; d < idx->rank; d++) out[k++] = idx->dims[d];
  for (int d = axis + 1; d < x->rank; d++) out[k++] = x->dims[d];
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Gather(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  KILN_TRY(require_int_indices(idx, 1, "indices"));
  if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data): expected rank >= 1, got 0");
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  int r = x->rank - 1 + idx->rank;
  if (r > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank %d exceeds the maximum rank", r);
  int64_t out[KILN_MAX_RANK];
  int k = 0;
  for (int d = 0; d < axis; d++) out[k++] = x->dims[d];
  for (int d = 0; d < idx->rank; d++) out[k++] = idx->dims[d];
  for (int d = axis + 1; d < x->rank; d++) out[k++] = x->dims[d];
  int64_t n = x->dims[axis], outer = kiln_mv_prod(x->dims, 0, axis), inner = kiln_mv_prod(x->dims, axis + 1, x->rank);
  for (int64_t i = 0; i < idx->numel; i++) { /* validate before allocating */
    int64_t v;
    KILN_TRY(kiln_mv_wrap_index(kiln_load_i64(idx->data, idx->dtype, i), n, "input 1 (indices)", &v));
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, r, out, &y));
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < idx->numel; i++) {
      int64_t v = kiln_load_i64(idx->data, idx->dtype, i);
      if (v < 0) v += n;
      KILN_TRY(kiln_mv_copy(y, (o * idx->numel + i) * inner, x, (o * n + v) * inner, inner));
    }
  }
  return NULL;
}

/* ---- GatherElements ----------------------------------------------------- */

/* indices (and updates, for scatter) have data's rank; on every axis but
 * `axis` their dims may not exceed data's. */
static kiln_status_t check_elements_shape(const kiln_tensor *x, const kiln_tensor *idx, int axis) {
  char s0[256], s1[256];
  bool ok = idx->rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++) ok = d == axis || idx->dims[d] <= x->dims[d];
  if (!ok)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (indices): shape %s must have data's rank and fit in data %s off axis %d",
                      kiln_shape_str(idx->rank, idx->dims, s1, sizeof s1),
                      kiln_shape_str(x->rank, x->dims, s0, sizeof s0), axis);
  return NULL;
}

kiln_status_t kiln_mv_infer_GatherElements(kiln_infer_ctx *ctx) {
  const kiln_type *idx = kiln_mv_in_type(ctx, 1);
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  if (!idx || idx->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  kiln_infer_set(ctx, 0, dt, idx->rank, idx->dims);
  return NULL;
}

/* Flat offset into data of indices element at coord, its axis coordinate
 * replaced by the (checked) index value. */
static kiln_status_t elements_offset(const kiln_tensor *x, const kiln_tensor *idx, int axis, const int64_t *coord,
                                     int64_t i, const int64_t *xstride, int64_t *out) {
  int64_t v;
  KILN_TRY(kiln_mv_wrap_index(kiln_load_i64(idx->data, idx->dtype, i), x->dims[axis], "input 1 (indices)", &v));
  int64_t off = 0;
  for (int d = 0; d < x->rank; d++) off += (d == axis ? v : coord[d]) * xstride[d];
  *out = off;
  return NULL;
}

kiln_status_t kiln_mv_kernel_GatherElements(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  KILN_TRY(require_int_indices(idx, 1, "indices"));
  if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data): expected rank >= 1, got 0");
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  KILN_TRY(check_elements_shape(x, idx, axis));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, idx->rank, idx->dims, &y));
  int64_t xstride[KILN_MAX_RANK], coord[KILN_MAX_RANK] = {0};
  kiln_mv_strides(x->rank, x->dims, xstride);
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t off;
    KILN_TRY(elements_offset(x, idx, axis, coord, i, xstride, &off));
    KILN_TRY(kiln_mv_copy(y, i, x, off, 1));
    kiln_mv_next_coord(idx->rank, idx->dims, coord);
  }
  return NULL;
}

/* ---- GatherND ----------------------------------------------------------- */

kiln_status_t kiln_mv_infer_GatherND(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *x = kiln_mv_in_type(ctx, 0), *idx = kiln_mv_in_type(ctx, 1);
  int64_t b = ctx->opset >= 12 ? kiln_attr_int(ctx->node, "batch_dims", 0) : 0;
  if (!x || x->rank < 0 || !idx || idx->rank < 1 || idx->dims[idx->rank - 1] < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int64_t k = idx->dims[idx->rank - 1];
  if (b < 0 || b >= KILN_MIN(x->rank, idx->rank) || k > x->rank - b)
    return kiln_error(KILN_INVALID_ARGUMENT, "batch_dims %lld and index depth %lld invalid for data rank %d, indices rank %d",
                      (long long)b, (long long)k, x->rank, idx->rank);
  int64_t out[KILN_MAX_RANK];
  int r = 0;
  int64_t total = idx->rank - 1 + x->rank - b - k;
  if (total > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank exceeds the maximum rank");
  for (int d = 0; d < idx->rank - 1; d++) out[r++] = idx->dims[d];
  for (int64_t d = b + k; d < x->rank; d++) out[r++] = x->dims[d];
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_GatherND(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  KILN_TRY(require_int_indices(idx, 1, "indices"));
  int64_t b = ctx->opset >= 12 ? kiln_attr_int(ctx->node, "batch_dims", 0) : 0;
  if (x->rank < 1 || idx->rank < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "data and indices must have rank >= 1 (got %d, %d)", x->rank, idx->rank);
  int64_t k = idx->dims[idx->rank - 1];
  if (b < 0 || b >= KILN_MIN(x->rank, idx->rank))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute batch_dims %lld must be in [0, %d)", (long long)b,
                      KILN_MIN(x->rank, idx->rank));
  if (k > x->rank - b)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (indices): last dim %lld exceeds data rank %d - batch_dims %lld",
                      (long long)k, x->rank, (long long)b);
  for (int d = 0; d < b; d++)
    if (idx->dims[d] != x->dims[d])
      return kiln_error(KILN_INVALID_ARGUMENT, "batch dim %d: indices has %lld, data has %lld", d,
                        (long long)idx->dims[d], (long long)x->dims[d]);
  int64_t out[KILN_MAX_RANK];
  int r = 0;
  if (idx->rank - 1 + x->rank - b - k > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "output rank exceeds the maximum rank");
  for (int d = 0; d < idx->rank - 1; d++) out[r++] = idx->dims[d];
  for (int64_t d = b + k; d < x->rank; d++) out[r++] = x->dims[d];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, r, out, &y));
  int64_t xstride[KILN_MAX_RANK];
  kiln_mv_strides(x->rank, x->dims, xstride);
  int64_t n_batch = kiln_mv_prod(x->dims, 0, (int)b);
  int64_t batch_block = kiln_mv_prod(x->dims, (int)b, x->rank);
  int64_t slice = kiln_mv_prod(x->dims, (int)(b + k), x->rank);
  int64_t per_batch = kiln_mv_prod(idx->dims, (int)b, idx->rank - 1); /* tuples per batch */
  for (int64_t bi = 0; bi < n_batch; bi++) {
    for (int64_t t = 0; t < per_batch; t++) {
      int64_t tup = bi * per_batch + t, off = bi * batch_block;
      for (int64_t j = 0; j < k; j++) {
        int64_t v;
        KILN_TRY(kiln_mv_wrap_index(kiln_load_i64(idx->data, idx->dtype, tup * k + j), x->dims[b + j],
                                    "input 1 (indices)", &v));
        off += v * xstride[b + j];
      }
      KILN_TRY(kiln_mv_copy(y, tup * slice, x, off, slice));
    }
  }
  return NULL;
}

/* ---- scatter reductions ------------------------------------------------- */

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MIN, RED_MAX } reduction;

static kiln_status_t reduction_of(const kiln_node *node, int opset, kiln_dtype dt, reduction *out) {
  const char *r = opset >= 16 ? kiln_attr_string(node, "reduction", "none") : "none";
  if (!strcmp(r, "none"))
    *out = RED_NONE;
  else if (!strcmp(r, "add"))
    *out = RED_ADD;
  else if (!strcmp(r, "mul"))
    *out = RED_MUL;
  else if (!strcmp(r, "min"))
    *out = RED_MIN;
  else if (!strcmp(r, "max"))
    *out = RED_MAX;
  else
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute reduction: unknown value '%s'", r);
  if (*out != RED_NONE && (dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128))
    return kiln_error(KILN_UNSUPPORTED, "reduction '%s' on %s data", r, kiln_dtype_name(dt));
  return NULL;
}

/* y[di] = reduce(y[di], u[si]). */
static kiln_status_t scatter_one(kiln_tensor *y, int64_t di, const kiln_tensor *u, int64_t si, reduction red) {
  if (red == RED_NONE) return kiln_mv_copy(y, di, u, si, 1);
  kiln_dtype dt = y->dtype;
  if (kiln_dtype_is_float(dt)) {
    double a = kiln_load_f64(y->data, dt, di), b = kiln_load_f64(u->data, dt, si), r;
    switch (red) {
      case RED_ADD: r = a + b; break;
      case RED_MUL: r = a * b; break;
      case RED_MIN: r = isnan(a) || isnan(b) ? NAN : fmin(a, b); break;
      default: r = isnan(a) || isnan(b) ? NAN : fmax(a, b); break;
    }
    kiln_store_f64(y->data, dt, di, r);
  } else if (dt == KILN_DTYPE_BOOL) {
    bool a = ((uint8_t *)y->data)[di] != 0, b = ((const uint8_t *)u->data)[si] != 0;
    ((uint8_t *)y->data)[di] = (red == RED_ADD || red == RED_MAX) ? (a || b) : (a && b);
  } else if (dt == KILN_DTYPE_U64) {
    uint64_t a = kiln_load_u64(y->data, dt, di), b = kiln_load_u64(u->data, dt, si), r;
    r = red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MIN ? KILN_MIN(a, b) : KILN_MAX(a, b);
    kiln_store_i64(y->data, dt, di, (int64_t)r);
  } else {
    int64_t a = kiln_load_i64(y->data, dt, di), b = kiln_load_i64(u->data, dt, si), r;
    switch (red) { /* wrapping arithmetic, as numpy's fixed-width ints */
      case RED_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
      case RED_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
      case RED_MIN: r = KILN_MIN(a, b); break;
      default: r = KILN_MAX(a, b); break;
    }
    kiln_store_i64(y->data, dt, di, r);
  }
  return NULL;
}

/* ---- Scatter / ScatterElements ----------------------------------------- */

kiln_status_t kiln_mv_infer_ScatterElements(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }
kiln_status_t kiln_mv_infer_Scatter(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

kiln_status_t kiln_mv_kernel_ScatterElements(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *u, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &u));
  KILN_TRY(require_int_indices(idx, 1, "indices"));
  if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data): expected rank >= 1, got 0");
  if (u->dtype != x->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (updates): dtype %s differs from data's %s",
                      kiln_dtype_name(u->dtype), kiln_dtype_name(x->dtype));
  if (!kiln_shape_equal(u->rank, u->dims, idx->rank, idx->dims)) {
    char s1[256], s2[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (updates): shape %s differs from indices' %s",
                      kiln_shape_str(u->rank, u->dims, s2, sizeof s2), kiln_shape_str(idx->rank, idx->dims, s1, sizeof s1));
  }
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  KILN_TRY(check_elements_shape(x, idx, axis));
  reduction red;
  KILN_TRY(reduction_of(ctx->node, ctx->opset, x->dtype, &red));
  KILN_TRY(kiln_tensor_clone(x, &y));
  KILN_TRY(kiln_kernel_set_output(ctx, 0, y));
  int64_t xstride[KILN_MAX_RANK], coord[KILN_MAX_RANK] = {0};
  kiln_mv_strides(x->rank, x->dims, xstride);
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t off;
    KILN_TRY(elements_offset(x, idx, axis, coord, i, xstride, &off));
    KILN_TRY(scatter_one(y, off, u, i, red));
    kiln_mv_next_coord(idx->rank, idx->dims, coord);
  }
  return NULL;
}

kiln_status_t kiln_mv_kernel_Scatter(kiln_kernel_ctx *ctx) { return kiln_mv_kernel_ScatterElements(ctx); }

/* ---- ScatterND ---------------------------------------------------------- */

kiln_status_t kiln_mv_infer_ScatterND(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

kiln_status_t kiln_mv_kernel_ScatterND(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *idx, *u, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &idx));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &u));
  KILN_TRY(require_int_indices(idx, 1, "indices"));
  if (u->dtype != x->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (updates): dtype %s differs from data's %s",
                      kiln_dtype_name(u->dtype), kiln_dtype_name(x->dtype));
  if (x->rank < 1 || idx->rank < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "data and indices must have rank >= 1 (got %d, %d)", x->rank, idx->rank);
  int64_t k = idx->dims[idx->rank - 1];
  if (k > x->rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (indices): last dim %lld exceeds data rank %d", (long long)k,
                      x->rank);
  /* updates.shape == indices.shape[:-1] + data.shape[k:] */
  int64_t want[KILN_MAX_RANK];
  int wr = 0;
  if (idx->rank - 1 + x->rank - k > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "updates rank too large");
  for (int d = 0; d < idx->rank - 1; d++) want[wr++] = idx->dims[d];
  for (int64_t d = k; d < x->rank; d++) want[wr++] = x->dims[d];
  if (!kiln_shape_equal(u->rank, u->dims, wr, want)) {
    char s1[256], s2[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (updates): shape %s, expected %s",
                      kiln_shape_str(u->rank, u->dims, s1, sizeof s1), kiln_shape_str(wr, want, s2, sizeof s2));
  }
  reduction red;
  KILN_TRY(reduction_of(ctx->node, ctx->opset, x->dtype, &red));
  KILN_TRY(kiln_tensor_clone(x, &y));
  KILN_TRY(kiln_kernel_set_output(ctx, 0, y));
  int64_t xstride[KILN_MAX_RANK];
  kiln_mv_strides(x->rank, x->dims, xstride);
  int64_t slice = kiln_mv_prod(x->dims, (int)k, x->rank);
  int64_t n_tup = kiln_mv_prod(idx->dims, 0, idx->rank - 1);
  for (int64_t t = 0; t < n_tup; t++) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t v;
      KILN_TRY(kiln_mv_wrap_index(kiln_load_i64(idx->data, idx->dtype, t * k + j), x->dims[j], "input 1 (indices)",
                                  &v));
      off += v * xstride[j];
    }
    for (int64_t e = 0; e < slice; e++) KILN_TRY(scatter_one(y, off + e, u, t * slice + e, red));
  }
  return NULL;
}

/* ---- OneHot ------------------------------------------------------------- */

static kiln_status_t onehot_depth(const kiln_tensor *t, int64_t *out) {
  if (t->numel != 1 || t->dtype == KILN_DTYPE_STRING || t->dtype == KILN_DTYPE_C64 || t->dtype == KILN_DTYPE_C128)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (depth): expected a numeric scalar");
  double d = kiln_load_f64(t->data, t->dtype, 0);
  if (!(d >= 0) || d > (double)((int64_t)1 << 40))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (depth): invalid value %g", d);
  *out = kiln_dtype_is_float(t->dtype) ? (int64_t)d : kiln_load_i64(t->data, t->dtype, 0);
  return NULL;
}

kiln_status_t kiln_mv_infer_OneHot(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 2);
  const kiln_type *idx = kiln_mv_in_type(ctx, 0);
  if (!idx || idx->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int r = idx->rank + 1, axis;
  if (r > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank %d exceeds the maximum rank", r);
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", -1), r, "attribute axis", &axis));
  int64_t depth = -1;
  if (kiln_mv_const(ctx, 1)) KILN_TRY(onehot_depth(kiln_mv_const(ctx, 1), &depth));
  int64_t out[KILN_MAX_RANK];
  for (int d = 0, k = 0; d < r; d++) out[d] = d == axis ? depth : idx->dims[k++];
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_OneHot(kiln_kernel_ctx *ctx) {
  kiln_tensor *idx, *dt_, *vals, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &idx));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &dt_));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &vals));
  if (idx->dtype == KILN_DTYPE_STRING || idx->dtype == KILN_DTYPE_C64 || idx->dtype == KILN_DTYPE_C128)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (indices): expected a numeric tensor, got %s",
                      kiln_dtype_name(idx->dtype));
  if (vals->numel != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (values): expected [off, on], got %lld elements",
                      (long long)vals->numel);
  int64_t depth;
  KILN_TRY(onehot_depth(dt_, &depth));
  int r = idx->rank + 1, axis;
  if (r > KILN_MAX_RANK) return kiln_error(KILN_UNSUPPORTED, "output rank %d exceeds the maximum rank", r);
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", -1), r, "attribute axis", &axis));
  int64_t out[KILN_MAX_RANK];
  for (int d = 0, k = 0; d < r; d++) out[d] = d == axis ? depth : idx->dims[k++];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, vals->dtype, r, out, &y));
  for (int64_t o = 0; o < y->numel; o++) KILN_TRY(kiln_mv_copy(y, o, vals, 0, 1));
  int64_t outer = kiln_mv_prod(idx->dims, 0, axis), inner = kiln_mv_prod(idx->dims, axis, idx->rank);
  bool is_float = kiln_dtype_is_float(idx->dtype);
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      int64_t e = o * inner + i, v;
      if (is_float) {
        double f = trunc(kiln_load_f64(idx->data, idx->dtype, e));
        if (!(f >= -(double)depth && f < (double)depth)) continue;
        v = (int64_t)f;
      } else {
        v = kiln_load_i64(idx->data, idx->dtype, e);
        if (v < -depth || v >= depth) continue; /* spec: all-off row */
      }
      if (v < 0) v += depth;
      KILN_TRY(kiln_mv_copy(y, (o * depth + v) * inner + i, vals, 1, 1));
    }
  }
  return NULL;
}

/* ---- Compress ----------------------------------------------------------- */

static bool compress_has_axis(const kiln_node *node) {
  const kiln_attr *a = kiln_node_attr(node, "axis");
  return a && a->type == KILN_ATTR_INT;
}

kiln_status_t kiln_mv_infer_Compress(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *x = kiln_mv_in_type(ctx, 0);
  if (!compress_has_axis(ctx->node)) {
    int64_t n = -1;
    kiln_infer_set(ctx, 0, dt, 1, &n);
    return NULL;
  }
  if (!x || x->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int axis;
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  int64_t out[KILN_MAX_RANK];
  memcpy(out, x->dims, sizeof out);
  out[axis] = -1;
  kiln_infer_set(ctx, 0, dt, x->rank, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Compress(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *c, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &c));
  if (c->rank != 1 || c->dtype == KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (condition): expected a 1-D bool tensor, got rank %d %s",
                      c->rank, kiln_dtype_name(c->dtype));
  bool has_axis = compress_has_axis(ctx->node);
  int axis = 0;
  int64_t outer = 1, n = x->numel, inner = 1;
  if (has_axis) {
    if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank >= 1, got 0");
    KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
    outer = kiln_mv_prod(x->dims, 0, axis);
    n = x->dims[axis];
    inner = kiln_mv_prod(x->dims, axis + 1, x->rank);
  }
  int64_t count = 0;
  for (int64_t i = 0; i < c->numel; i++) {
    if (!kiln_mv_is_nonzero(c, i)) continue;
    if (i >= n)
      return kiln_error(KILN_OUT_OF_RANGE, "input 1 (condition): true at index %lld, beyond the %lld selectable entries",
                        (long long)i, (long long)n);
    count++;
  }
  int64_t out[KILN_MAX_RANK];
  int r = 1;
  if (has_axis) {
    memcpy(out, x->dims, sizeof out);
    out[axis] = count;
    r = x->rank;
  } else {
    out[0] = count;
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, r, out, &y));
  for (int64_t o = 0; o < outer; o++) {
    int64_t k = 0;
    for (int64_t i = 0; i < c->numel && i < n; i++) {
      if (!kiln_mv_is_nonzero(c, i)) continue;
      KILN_TRY(kiln_mv_copy(y, (o * count + k) * inner, x, (o * n + i) * inner, inner));
      k++;
    }
  }
  return NULL;
}

/* ---- NonZero ------------------------------------------------------------ */

kiln_status_t kiln_mv_infer_NonZero(kiln_infer_ctx *ctx) {
  int r = kiln_mv_in_rank(ctx, 0);
  int64_t out[2] = {r < 0 ? -1 : r == 0 ? 1 : r, -1};
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 2, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_NonZero(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int64_t nnz = 0;
  for (int64_t i = 0; i < x->numel; i++) nnz += kiln_mv_is_nonzero(x, i);
  /* A scalar behaves as a 1-element vector (numpy's nonzero). */
  int rank = x->rank == 0 ? 1 : x->rank;
  int64_t dims1[KILN_MAX_RANK] = {1};
  const int64_t *dims = x->rank == 0 ? dims1 : x->dims;
  int64_t out[2] = {rank, nnz};
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, 2, out, &y));
  int64_t coord[KILN_MAX_RANK] = {0}, k = 0, *yd = y->data;
  for (int64_t i = 0; i < x->numel; i++) {
    if (kiln_mv_is_nonzero(x, i)) {
      for (int d = 0; d < rank; d++) yd[d * nnz + k] = coord[d];
      k++;
    }
    kiln_mv_next_coord(rank, dims, coord);
  }
  return NULL;
}

/* ---- Unique ------------------------------------------------------------- */

/* The input viewed as `n` slices (along the axis, or single elements when
 * flattened), each made of outer x inner elements. */
typedef struct unique_view {
  const kiln_tensor *x;
  int64_t outer, n, inner;
} unique_view;

/* numpy order: NaN after everything, NaNs equal to each other. */
static int cmp_elems(const kiln_tensor *x, int64_t a, int64_t b) {
  kiln_dtype dt = x->dtype;
  if (dt == KILN_DTYPE_STRING) {
    int c = strcmp(kiln_mv_str(x, a), kiln_mv_str(x, b));
    return (c > 0) - (c < 0);
  }
  if (kiln_dtype_is_float(dt)) {
    double va = kiln_load_f64(x->data, dt, a), vb = kiln_load_f64(x->data, dt, b);
    if (isnan(va) || isnan(vb)) return isnan(va) - isnan(vb);
    return (va > vb) - (va < vb);
  }
  if (dt == KILN_DTYPE_U64) {
    uint64_t va = kiln_load_u64(x->data, dt, a), vb = kiln_load_u64(x->data, dt, b);
    return (va > vb) - (va < vb);
  }
  int64_t va = kiln_load_i64(x->data, dt, a), vb = kiln_load_i64(x->data, dt, b);
  return (va > vb) - (va < vb);
}

/* Lexicographic comparison of slices a and b. */
static int cmp_slices(const unique_view *v, int64_t a, int64_t b) {
  for (int64_t o = 0; o < v->outer; o++)
    for (int64_t i = 0; i < v->inner; i++) {
      int c = cmp_elems(v->x, (o * v->n + a) * v->inner + i, (o * v->n + b) * v->inner + i);
      if (c) return c;
    }
  return 0;
}

/* Stable merge sort of idx[0..n) by slice order; tmp has room for n. */
static void sort_slices(const unique_view *v, int64_t *idx, int64_t *tmp, int64_t n) {
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = KILN_MIN(lo + width, n), hi = KILN_MIN(lo + 2 * width, n);
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = cmp_slices(v, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

kiln_status_t kiln_mv_infer_Unique(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *x = kiln_mv_in_type(ctx, 0);
  const kiln_attr *a = kiln_node_attr(ctx->node, "axis");
  int64_t unknown = -1;
  if (a && a->type == KILN_ATTR_INT && x && x->rank >= 0) {
    int axis;
    KILN_TRY(kiln_mv_norm_axis(a->i, x->rank, "attribute axis", &axis));
    int64_t out[KILN_MAX_RANK];
    memcpy(out, x->dims, sizeof out);
    out[axis] = -1;
    kiln_infer_set(ctx, 0, dt, x->rank, out);
  } else if (a && a->type == KILN_ATTR_INT) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
  } else {
    kiln_infer_set(ctx, 0, dt, 1, &unknown);
  }
  for (int i = 1; i < ctx->n_outputs && i < 4; i++) kiln_infer_set(ctx, i, KILN_DTYPE_I64, 1, &unknown);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Unique(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->dtype == KILN_DTYPE_C64 || x->dtype == KILN_DTYPE_C128)
    return kiln_error(KILN_UNSUPPORTED, "input 0: complex dtypes are not supported");
  const kiln_attr *a = kiln_node_attr(ctx->node, "axis");
  bool has_axis = a && a->type == KILN_ATTR_INT;
  bool sorted = kiln_attr_int(ctx->node, "sorted", 1) != 0;
  unique_view v = {.x = x, .outer = 1, .n = x->numel, .inner = 1};
  int axis = 0;
  if (has_axis) {
    if (x->rank < 1) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: axis given for a scalar");
    KILN_TRY(kiln_mv_norm_axis(a->i, x->rank, "attribute axis", &axis));
    v.outer = kiln_mv_prod(x->dims, 0, axis);
    v.n = x->dims[axis];
    v.inner = kiln_mv_prod(x->dims, axis + 1, x->rank);
  }
  int64_t n = v.n;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
  int64_t *order = malloc(bytes), *tmp = malloc(bytes), *first = malloc(bytes), *counts = malloc(bytes),
          *inverse = malloc(bytes), *rank_of = malloc(bytes);
  kiln_status_t s = NULL;
  if (!order || !tmp || !first || !counts || !inverse || !rank_of) {
    s = KILN_OOM();
    goto done;
  }
  for (int64_t i = 0; i < n; i++) order[i] = i;
  sort_slices(&v, order, tmp, n);
  /* Groups in sorted order; stability makes each group's first member its
   * first occurrence. */
  int64_t ng = 0;
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || cmp_slices(&v, first[ng - 1], order[i]) != 0) {
      first[ng] = order[i];
      counts[ng] = 0;
      ng++;
    }
    counts[ng - 1]++;
    inverse[order[i]] = ng - 1;
  }
  if (!sorted) {
    /* Renumber groups by first occurrence: walking the slices in input
     * order, a slice that is its group's first member opens the next number. */
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
      if (first[inverse[i]] == i) rank_of[inverse[i]] = k++;
    for (int64_t g = 0; g < ng; g++) {
      tmp[rank_of[g]] = first[g];
      order[rank_of[g]] = counts[g];
    }
    memcpy(first, tmp, (size_t)ng * sizeof *first);
    memcpy(counts, order, (size_t)ng * sizeof *counts);
    for (int64_t i = 0; i < n; i++) inverse[i] = rank_of[inverse[i]];
  }
  int64_t ydims[KILN_MAX_RANK];
  int yrank = 1;
  if (has_axis) {
    memcpy(ydims, x->dims, sizeof ydims);
    ydims[axis] = ng;
    yrank = x->rank;
  } else {
    ydims[0] = ng;
  }
  kiln_tensor *y;
  if (!ctx->output_wanted || ctx->output_wanted[0]) {
    s = kiln_kernel_output_tensor(ctx, 0, x->dtype, yrank, ydims, &y);
    for (int64_t o = 0; !s && o < v.outer; o++)
      for (int64_t g = 0; !s && g < ng; g++)
        s = kiln_mv_copy(y, (o * ng + g) * v.inner, x, (o * n + first[g]) * v.inner, v.inner);
  }
  const int64_t *src[3] = {first, inverse, counts};
  int64_t len[3] = {ng, n, ng};
  for (int k = 0; !s && k < 3; k++) {
    if (k + 1 >= ctx->n_outputs || (ctx->output_wanted && !ctx->output_wanted[k + 1])) continue;
    kiln_tensor *t;
    s = kiln_kernel_output_tensor(ctx, k + 1, KILN_DTYPE_I64, 1, &len[k], &t);
    if (!s && len[k]) memcpy(t->data, src[k], (size_t)len[k] * sizeof(int64_t));
  }
done:
  free(order);
  free(tmp);
  free(first);
  free(counts);
  free(inverse);
  free(rank_of);
  return s;
}
