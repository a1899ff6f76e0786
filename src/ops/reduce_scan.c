/* CumSum, CumProd and TopK: ops that walk each row along one axis in order. */
#include "ops/reduce_internal.h"

#include <math.h>

/* ---- CumSum and CumProd -------------------------------------------------- */

/* Running sums (or products) along `axis` (input 1, a scalar). exclusive:
 * each output leaves out its own element (an exclusive product starts at
 * 1); reverse: the scan runs from the end. Floats accumulate in double;
 * integers exactly, wrapping modulo 2^64 (then 2^bits on store) like numpy. */
static kiln_status_t scan_kernel(kiln_kernel_ctx *ctx, bool product) {
  kiln_tensor *x, *axis_t, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &axis_t));
  KILN_TRY(kiln_reduce_check_dtype(x, KILN_DT_NUMERIC, "input 0 (x)"));
  int64_t axis64;
  KILN_TRY(kiln_reduce_read_scalar_int(axis_t, "input 1 (axis)", &axis64));
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (x) must have rank >= 1, got a scalar");
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(axis64, x->rank, "input 1 (axis)", &axis));
  bool exclusive = kiln_attr_int(ctx->node, "exclusive", 0) != 0;
  bool reverse = kiln_attr_int(ctx->node, "reverse", 0) != 0;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  int64_t outer, n, inner;
  kiln_reduce_split_dims(x, axis, &outer, &n, &inner);
  kiln_dtype dt = x->dtype;
  bool is_float = kiln_dtype_is_float(dt);
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * n * inner + i;
      double facc = product ? 1.0 : 0.0;
      uint64_t iacc = product ? 1 : 0;
      for (int64_t s = 0; s < n; s++) {
        int64_t at = base + (reverse ? n - 1 - s : s) * inner;
        if (is_float) {
          double v = kiln_load_f64(x->data, dt, at);
          if (!exclusive) facc = product ? facc * v : facc + v;
          kiln_store_f64(y->data, dt, at, facc);
          if (exclusive) facc = product ? facc * v : facc + v;
        } else {
          uint64_t v = kiln_load_u64(x->data, dt, at);
          if (!exclusive) iacc = product ? iacc * v : iacc + v;
          kiln_store_i64(y->data, dt, at, (int64_t)iacc);
          if (exclusive) iacc = product ? iacc * v : iacc + v;
        }
      }
    }
  }
  return NULL;
}

kiln_status_t kiln_reduce_cumsum_kernel(kiln_kernel_ctx *ctx) { return scan_kernel(ctx, false); }

/* CumProd (opset 26): CumSum's scan with a product; the same attributes. */
kiln_status_t kiln_reduce_cumprod_kernel(kiln_kernel_ctx *ctx) { return scan_kernel(ctx, true); }

/* ---- TopK ---------------------------------------------------------------- */

/* The k of a TopK node: attribute "k" before opset 10, input 1 after. */
static kiln_status_t topk_read_k(const kiln_node *node, int opset, const kiln_tensor *k_t, int64_t *out) {
  if (opset < 10) {
    const kiln_attr *a = kiln_node_attr(node, "k");
    if (!a) return kiln_error(KILN_INVALID_ARGUMENT, "attribute k is required before opset 10");
    *out = a->i;
    return NULL;
  }
  if (!k_t) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K) is required but absent");
  if (k_t->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K) must be int64, got %s", kiln_dtype_name(k_t->dtype));
  return kiln_reduce_read_scalar_int(k_t, "input 1 (K)", out);
}

kiln_status_t kiln_reduce_topk_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->inputs[0];
  kiln_dtype dt = in ? in->dtype : KILN_DTYPE_UNDEFINED;
  if (!in || in->rank < 0) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    kiln_infer_set(ctx, 1, KILN_DTYPE_I64, -1, NULL);
    return NULL;
  }
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", -1), in->rank, "attribute axis", &axis));
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < in->rank; d++) dims[d] = in->dims[d];
  int64_t k = -1;
  const kiln_tensor *k_t = ctx->n_inputs > 1 ? ctx->consts[1] : NULL;
  if (ctx->opset < 10 || k_t) {
    KILN_TRY(topk_read_k(ctx->node, ctx->opset, k_t, &k));
    if (k < 0 || (dims[axis] >= 0 && k > dims[axis]))
      return kiln_error(KILN_INVALID_ARGUMENT, "k = %lld out of range [0, %lld]", (long long)k,
                        (long long)dims[axis]);
  }
  dims[axis] = k;
  kiln_infer_set(ctx, 0, dt, in->rank, dims);
  kiln_infer_set(ctx, 1, KILN_DTYPE_I64, in->rank, dims);
  return NULL;
}

typedef struct topk_row {
  const kiln_tensor *x;
  int64_t base, inner;
  bool largest;
} topk_row;

/* Whether row element a goes strictly before b. NaN counts as the largest
 * value. Ties keep index order (the sort is stable). */
static bool topk_before(const topk_row *r, int64_t a, int64_t b) {
  kiln_dtype dt = r->x->dtype;
  int64_t pa = r->base + a * r->inner, pb = r->base + b * r->inner;
  if (kiln_dtype_is_float(dt)) {
    double va = kiln_load_f64(r->x->data, dt, pa), vb = kiln_load_f64(r->x->data, dt, pb);
    if (r->largest) return (isnan(va) && !isnan(vb)) || va > vb;
    return (!isnan(va) && isnan(vb)) || va < vb;
  }
  uint64_t ua = kiln_load_u64(r->x->data, dt, pa), ub = kiln_load_u64(r->x->data, dt, pb);
  bool less, greater;
  if (kiln_dtype_is_signed(dt)) {
    less = (int64_t)ua < (int64_t)ub;
    greater = (int64_t)ua > (int64_t)ub;
  } else {
    less = ua < ub;
    greater = ua > ub;
  }
  return r->largest ? greater : less;
}

/* Stable bottom-up merge sort of idx[0..n) with tmp as scratch. */
static void topk_sort(const topk_row *r, int64_t *idx, int64_t *tmp, int64_t n) {
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = KILN_MIN(lo + width, n), hi = KILN_MIN(lo + 2 * width, n);
      int64_t a = lo, b = mid, t = lo;
      while (a < mid && b < hi) tmp[t++] = topk_before(r, idx[b], idx[a]) ? idx[b++] : idx[a++];
      while (a < mid) tmp[t++] = idx[a++];
      while (b < hi) tmp[t++] = idx[b++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

kiln_status_t kiln_reduce_topk_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *values, *indices;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_reduce_check_dtype(x, KILN_DT_NUMERIC, "input 0 (X)"));
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X) must have rank >= 1, got a scalar");
  int64_t k;
  KILN_TRY(topk_read_k(ctx->node, ctx->opset, kiln_kernel_input(ctx, 1), &k));
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", -1), x->rank, "attribute axis", &axis));
  bool largest = ctx->opset < 11 || kiln_attr_int(ctx->node, "largest", 1) != 0;
  /* sorted = 0 leaves the order unspecified; sorted order is a valid one. */
  int64_t outer, n, inner;
  kiln_reduce_split_dims(x, axis, &outer, &n, &inner);
  if (k < 0 || k > n)
    return kiln_error(KILN_INVALID_ARGUMENT, "k = %lld out of range [0, %lld] (size of axis %d of input 0)",
                      (long long)k, (long long)n, axis);
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = k;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, dims, &values));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 1, KILN_DTYPE_I64, x->rank, dims, &indices));
  if (k == 0 || outer * inner == 0) return NULL;
  int64_t *idx = malloc((size_t)n * 2 * sizeof *idx);
  if (!idx) return KILN_OOM();
  size_t esize = kiln_dtype_size(x->dtype);
  int64_t *id = indices->data;
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      topk_row r = {x, o * n * inner + i, inner, largest};
      for (int64_t j = 0; j < n; j++) idx[j] = j;
      topk_sort(&r, idx, idx + n, n);
      for (int64_t j = 0; j < k; j++) {
        int64_t out_at = o * k * inner + j * inner + i;
        int64_t in_at = r.base + idx[j] * inner;
        memcpy((char *)values->data + out_at * esize, (const char *)x->data + in_at * esize, esize);
        id[out_at] = idx[j];
      }
    }
  }
  free(idx);
  return NULL;
}
