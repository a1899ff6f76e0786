/* Ops of the "reduce" family: the Reduce* ops and ArgMax/ArgMin here;
 * Softmax, LogSoftmax, Hardmax and LpNormalization in reduce_softmax.c;
 * CumSum, CumProd and TopK in reduce_scan.c. The family table is at the bottom.
 *
 * Reductions accumulate in double for float types (rounded back once) and
 * exactly (wrapping modulo 2^64, then to the element width) for integers,
 * except where the op itself is not integer-valued (L2, LogSum,
 * LogSumExp), which goes through double and truncates like numpy's astype.
 * A reduction over an empty set gives the op's identity: 0 for sums, 1
 * for products, -inf/+inf for max/min (the type's lowest/highest for
 * integers), log(0) = -inf for LogSum and LogSumExp, NaN for a float mean.
 */
#include "ops/reduce_internal.h"
#include "ops/gradient.h"

#include <math.h>
#include <stdio.h>

/* ---- shared helpers ------------------------------------------------------ */

kiln_status_t kiln_reduce_check_dtype(const kiln_tensor *t, unsigned allowed, const char *what) {
  if ((unsigned)t->dtype < 32 && (allowed & KILN_DT_BIT(t->dtype))) return NULL;
  return kiln_error(KILN_UNSUPPORTED, "%s: element type %s is not supported by this op", what,
                    kiln_dtype_name(t->dtype));
}

kiln_status_t kiln_reduce_norm_axis(int64_t axis, int rank, const char *what, int *out) {
  if (axis < -rank || axis >= rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s %lld out of range [%d, %d) for rank %d", what, (long long)axis,
                      -rank, rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NULL;
}

kiln_status_t kiln_reduce_read_scalar_int(const kiln_tensor *t, const char *what, int64_t *out) {
  if (t->dtype != KILN_DTYPE_I64 && t->dtype != KILN_DTYPE_I32)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s must be int32 or int64, got %s", what, kiln_dtype_name(t->dtype));
  if (t->numel != 1 || t->rank > 1) {
    char s[128];
    return kiln_error(KILN_INVALID_ARGUMENT, "%s must be a scalar or a 1-element tensor, got shape %s", what,
                      kiln_shape_str(t->rank, t->dims, s, sizeof s));
  }
  *out = kiln_load_i64(t->data, t->dtype, 0);
  return NULL;
}

void kiln_reduce_split_dims(const kiln_tensor *t, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  int64_t o = 1, in = 1;
  for (int d = 0; d < axis; d++) o *= t->dims[d];
  for (int d = axis + 1; d < t->rank; d++) in *= t->dims[d];
  *outer = o;
  *n = t->dims[axis];
  *inner = in;
}

/* Lowest and highest value of an integer dtype, as bits in uint64 (signed
 * values two's-complement). */
static uint64_t int_lowest(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_I8: return (uint64_t)(int64_t)INT8_MIN;
    case KILN_DTYPE_I16: return (uint64_t)(int64_t)INT16_MIN;
    case KILN_DTYPE_I32: return (uint64_t)(int64_t)INT32_MIN;
    case KILN_DTYPE_I64: return (uint64_t)INT64_MIN;
    default: return 0;
  }
}

static uint64_t int_highest(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_I8: return INT8_MAX;
    case KILN_DTYPE_I16: return INT16_MAX;
    case KILN_DTYPE_I32: return INT32_MAX;
    case KILN_DTYPE_I64: return INT64_MAX;
    case KILN_DTYPE_U8: return UINT8_MAX;
    case KILN_DTYPE_U16: return UINT16_MAX;
    case KILN_DTYPE_U32: return UINT32_MAX;
    case KILN_DTYPE_BOOL: return 1;
    default: return UINT64_MAX;
  }
}

/* a < b for integer values held as uint64 bits of dtype dt. */
static bool int_less(kiln_dtype dt, uint64_t a, uint64_t b) {
  if (kiln_dtype_is_signed(dt)) return (int64_t)a < (int64_t)b;
  return a < b;
}

/* ---- Reduce* ------------------------------------------------------------- */

typedef enum reduce_kind {
  REDUCE_L1,
  REDUCE_L2,
  REDUCE_LOG_SUM,
  REDUCE_LOG_SUM_EXP,
  REDUCE_MAX,
  REDUCE_MIN,
  REDUCE_MEAN,
  REDUCE_PROD,
  REDUCE_SUM,
  REDUCE_SUM_SQUARE,
} reduce_kind;

/* ReduceSum takes axes as an input from opset 13, the others from 18. */
static bool axes_is_input(const kiln_node *node, int opset) {
  if (!strcmp(node->op_type, "ReduceSum")) return opset >= 13;
  return opset >= 18;
}

/* Turns an axes list into a mask over the input's dims. Empty axes reduce
 * every dim, or none when noop_with_empty_axes is set (*out_identity). */
static kiln_status_t axes_mask(int rank, const int64_t *axes, int n_axes, bool noop, bool *mask, bool *out_identity) {
  *out_identity = false;
  for (int d = 0; d < rank; d++) mask[d] = n_axes == 0;
  if (n_axes == 0) {
    if (noop) {
      *out_identity = true;
      for (int d = 0; d < rank; d++) mask[d] = false;
    }
    return NULL;
  }
  for (int i = 0; i < n_axes; i++) {
    int a = 0;
    char what[64];
    snprintf(what, sizeof what, "axes[%d]", i);
    KILN_TRY(kiln_reduce_norm_axis(axes[i], rank, what, &a));
    if (mask[a]) return kiln_error(KILN_INVALID_ARGUMENT, "axes[%d] = %lld repeats an axis", i, (long long)axes[i]);
    mask[a] = true;
  }
  return NULL;
}

/* Reads the axes of a Reduce node: from input 1 (tensor `axes_t`, may be
 * NULL) or the "axes" attribute. *out_n receives the count. */
static kiln_status_t read_axes(const kiln_node *node, int opset, const kiln_tensor *axes_t, int64_t *axes,
                               int *out_n) {
  *out_n = 0;
  if (axes_is_input(node, opset)) {
    if (!axes_t) return NULL;
    if (axes_t->dtype != KILN_DTYPE_I64 && axes_t->dtype != KILN_DTYPE_I32)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (axes) must be int64, got %s",
                        kiln_dtype_name(axes_t->dtype));
    if (axes_t->rank > 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (axes) must be 1-D, got rank %d", axes_t->rank);
    if (axes_t->numel > KILN_MAX_RANK)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (axes) has %lld entries, more than any rank allows",
                        (long long)axes_t->numel);
    for (int64_t i = 0; i < axes_t->numel; i++) axes[i] = kiln_load_i64(axes_t->data, axes_t->dtype, i);
    *out_n = (int)axes_t->numel;
    return NULL;
  }
  int n = 0;
  const int64_t *a = kiln_attr_ints(node, "axes", &n);
  if (n > KILN_MAX_RANK)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axes has %d entries, more than any rank allows", n);
  for (int i = 0; i < n; i++) axes[i] = a[i];
  *out_n = n;
  return NULL;
}

/* Output dims for a mask: reduced dims become 1 (keepdims) or vanish. */
static int reduced_dims(int rank, const int64_t *dims, const bool *mask, bool keepdims, int64_t *out) {
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (!mask[d])
      out[r++] = dims[d];
    else if (keepdims)
      out[r++] = 1;
  }
  return r;
}

static kiln_status_t reduce_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->inputs[0];
  kiln_dtype dt = in ? in->dtype : KILN_DTYPE_UNDEFINED;
  bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
  bool noop = kiln_attr_int(ctx->node, "noop_with_empty_axes", 0) != 0;
  if (!in || in->rank < 0) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  int64_t axes[KILN_MAX_RANK];
  int n_axes = 0;
  if (axes_is_input(ctx->node, ctx->opset) && ctx->n_inputs > 1 && ctx->inputs[1] && !ctx->consts[1]) {
    /* Axes computed at run time: only the rank is known, and only if kept. */
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < in->rank; d++) dims[d] = -1;
    if (keepdims)
      kiln_infer_set(ctx, 0, dt, in->rank, dims);
    else
      kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  const kiln_tensor *axes_t = ctx->n_inputs > 1 ? ctx->consts[1] : NULL;
  KILN_TRY(read_axes(ctx->node, ctx->opset, axes_t, axes, &n_axes));
  bool mask[KILN_MAX_RANK], identity;
  KILN_TRY(axes_mask(in->rank, axes, n_axes, noop, mask, &identity));
  int64_t od[KILN_MAX_RANK];
  int orank = reduced_dims(in->rank, in->dims, mask, keepdims || identity, od);
  kiln_infer_set(ctx, 0, dt, orank, od);
  return NULL;
}

/* Walks the input in row-major order while tracking the flat offset of
 * the output element each input element reduces into. */
typedef struct out_walker {
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t idx[KILN_MAX_RANK];
  int64_t step[KILN_MAX_RANK]; /* output stride of dim d, 0 if reduced */
  int64_t off;
} out_walker;

static void out_walker_init(out_walker *w, const kiln_tensor *x, const bool *mask) {
  w->rank = x->rank;
  int64_t stride = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    w->dims[d] = x->dims[d];
    w->idx[d] = 0;
    w->step[d] = mask[d] ? 0 : stride;
    if (!mask[d]) stride *= x->dims[d];
  }
  w->off = 0;
}

static void out_walker_next(out_walker *w) {
  for (int d = w->rank - 1; d >= 0; d--) {
    w->idx[d]++;
    w->off += w->step[d];
    if (w->idx[d] < w->dims[d]) return;
    w->off -= w->step[d] * w->dims[d];
    w->idx[d] = 0;
  }
}

static kiln_status_t reduce_float(const kiln_tensor *x, const bool *mask, reduce_kind kind, int64_t count,
                                  kiln_tensor *y) {
  int64_t nout = y->numel;
  double *acc = malloc((size_t)(nout ? nout : 1) * sizeof *acc);
  double *mx = kind == REDUCE_LOG_SUM_EXP ? malloc((size_t)(nout ? nout : 1) * sizeof *mx) : NULL;
  if (!acc || (kind == REDUCE_LOG_SUM_EXP && !mx)) {
    free(acc);
    free(mx);
    return KILN_OOM();
  }
  double init = 0.0;
  if (kind == REDUCE_PROD) init = 1.0;
  if (kind == REDUCE_MAX) init = -INFINITY;
  if (kind == REDUCE_MIN) init = INFINITY;
  for (int64_t o = 0; o < nout; o++) acc[o] = init;

  out_walker w;
  if (mx) { /* LogSumExp: shift by the max so that exp cannot overflow */
    for (int64_t o = 0; o < nout; o++) mx[o] = -INFINITY;
    out_walker_init(&w, x, mask);
    for (int64_t i = 0; i < x->numel; i++, out_walker_next(&w)) {
      double v = kiln_load_f64(x->data, x->dtype, i);
      if (isnan(v) || v > mx[w.off]) mx[w.off] = isnan(mx[w.off]) ? mx[w.off] : v;
    }
  }
  out_walker_init(&w, x, mask);
  for (int64_t i = 0; i < x->numel; i++, out_walker_next(&w)) {
    double v = kiln_load_f64(x->data, x->dtype, i);
    double *a = &acc[w.off];
    switch (kind) {
      case REDUCE_L1: *a += fabs(v); break;
      case REDUCE_L2:
      case REDUCE_SUM_SQUARE: *a += v * v; break;
      case REDUCE_LOG_SUM:
      case REDUCE_MEAN:
      case REDUCE_SUM: *a += v; break;
      case REDUCE_PROD: *a *= v; break;
      case REDUCE_LOG_SUM_EXP:
        if (isfinite(mx[w.off])) *a += exp(v - mx[w.off]);
        break;
      case REDUCE_MAX: /* NaN wins, as numpy's maximum */
        if (isnan(v) || v > *a) *a = isnan(*a) ? *a : v;
        break;
      case REDUCE_MIN:
        if (isnan(v) || v < *a) *a = isnan(*a) ? *a : v;
        break;
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    double r = acc[o];
    switch (kind) {
      case REDUCE_L2: r = sqrt(r); break;
      case REDUCE_LOG_SUM: r = log(r); break;
      case REDUCE_LOG_SUM_EXP: r = isfinite(mx[o]) ? mx[o] + log(r) : mx[o]; break;
      case REDUCE_MEAN: r = count ? r / (double)count : NAN; break;
      default: break;
    }
    kiln_store_f64(y->data, y->dtype, o, r);
  }
  free(acc);
  free(mx);
  return NULL;
}

/* Integer reductions, exact modulo 2^64 (then truncated to the element
 * width by the store, as numpy's wrap-around arithmetic). */
static kiln_status_t reduce_int(const kiln_tensor *x, const bool *mask, reduce_kind kind, int64_t count,
                                kiln_tensor *y) {
  kiln_dtype dt = x->dtype;
  bool is_signed = kiln_dtype_is_signed(dt);
  int64_t nout = y->numel;
  uint64_t *acc = malloc((size_t)(nout ? nout : 1) * sizeof *acc);
  if (!acc) return KILN_OOM();
  uint64_t init = 0;
  if (kind == REDUCE_PROD) init = 1;
  if (kind == REDUCE_MAX) init = int_lowest(dt);
  if (kind == REDUCE_MIN) init = int_highest(dt);
  for (int64_t o = 0; o < nout; o++) acc[o] = init;
  out_walker w;
  out_walker_init(&w, x, mask);
  for (int64_t i = 0; i < x->numel; i++, out_walker_next(&w)) {
    uint64_t v = kiln_load_u64(x->data, dt, i);
    uint64_t *a = &acc[w.off];
    switch (kind) {
      case REDUCE_L1: *a += (is_signed && (int64_t)v < 0) ? 0 - v : v; break;
      case REDUCE_SUM_SQUARE: *a += v * v; break;
      case REDUCE_MEAN:
      case REDUCE_SUM: *a += v; break;
      case REDUCE_PROD: *a *= v; break;
      case REDUCE_MAX:
        if (int_less(dt, *a, v)) *a = v;
        break;
      case REDUCE_MIN:
        if (int_less(dt, v, *a)) *a = v;
        break;
      default: break; /* not integer-valued: handled by reduce_float */
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    uint64_t r = acc[o];
    if (kind == REDUCE_MEAN) {
      if (count == 0)
        r = 0;
      else if (is_signed)
        r = (uint64_t)((int64_t)r / count);
      else
        r = r / (uint64_t)count;
    }
    kiln_store_i64(y->data, dt, o, (int64_t)r);
  }
  free(acc);
  return NULL;
}

static kiln_status_t reduce_kernel(kiln_kernel_ctx *ctx, reduce_kind kind) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  unsigned allowed = KILN_DT_NUMERIC;
  /* opset 20: ReduceMax / ReduceMin of bool (any / all) */
  if (ctx->opset >= 20 && (kind == REDUCE_MAX || kind == REDUCE_MIN)) allowed |= KILN_DT_BIT(KILN_DTYPE_BOOL);
  KILN_TRY(kiln_reduce_check_dtype(x, allowed, "input 0 (data)"));
  int64_t axes[KILN_MAX_RANK];
  int n_axes;
  KILN_TRY(read_axes(ctx->node, ctx->opset, kiln_kernel_input(ctx, 1), axes, &n_axes));
  bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
  bool noop = kiln_attr_int(ctx->node, "noop_with_empty_axes", 0) != 0;
  bool mask[KILN_MAX_RANK], identity;
  KILN_TRY(axes_mask(x->rank, axes, n_axes, noop, mask, &identity));
  if (identity) { /* noop_with_empty_axes: the input, unreduced */
    kiln_tensor *y;
    KILN_TRY(kiln_tensor_clone(x, &y));
    return kiln_kernel_set_output(ctx, 0, y);
  }
  int64_t od[KILN_MAX_RANK];
  int orank = reduced_dims(x->rank, x->dims, mask, keepdims, od);
  int64_t count = 1;
  for (int d = 0; d < x->rank; d++)
    if (mask[d]) count *= x->dims[d];
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, orank, od, &y));
  bool via_float = kiln_dtype_is_float(x->dtype) || kind == REDUCE_L2 || kind == REDUCE_LOG_SUM ||
                   kind == REDUCE_LOG_SUM_EXP;
  return via_float ? reduce_float(x, mask, kind, count, y) : reduce_int(x, mask, kind, count, y);
}

#define REDUCE_KERNEL(fn, kind) \
  static kiln_status_t fn(kiln_kernel_ctx *ctx) { return reduce_kernel(ctx, kind); }
REDUCE_KERNEL(reduce_l1_kernel, REDUCE_L1)
REDUCE_KERNEL(reduce_l2_kernel, REDUCE_L2)
REDUCE_KERNEL(reduce_log_sum_kernel, REDUCE_LOG_SUM)
REDUCE_KERNEL(reduce_log_sum_exp_kernel, REDUCE_LOG_SUM_EXP)
REDUCE_KERNEL(reduce_max_kernel, REDUCE_MAX)
REDUCE_KERNEL(reduce_min_kernel, REDUCE_MIN)
REDUCE_KERNEL(reduce_mean_kernel, REDUCE_MEAN)
REDUCE_KERNEL(reduce_prod_kernel, REDUCE_PROD)
REDUCE_KERNEL(reduce_sum_kernel, REDUCE_SUM)
REDUCE_KERNEL(reduce_sum_square_kernel, REDUCE_SUM_SQUARE)
#undef REDUCE_KERNEL

/* ---- ArgMax / ArgMin ----------------------------------------------------- */

static kiln_status_t arg_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = ctx->inputs[0];
  bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
  if (!in || in->rank < 0) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_I64, -1, NULL);
    return NULL;
  }
  int axis = 0;
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", 0), in->rank, "attribute axis", &axis));
  bool mask[KILN_MAX_RANK] = {false};
  mask[axis] = true;
  int64_t od[KILN_MAX_RANK];
  int orank = reduced_dims(in->rank, in->dims, mask, keepdims, od);
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, orank, od);
  return NULL;
}

/* Compares element a with the current best b for ArgMax (sign 1) or ArgMin
 * (sign -1): >0 if a is strictly better, 0 if tied. NaN beats every number
 * (numpy returns the first NaN for both). */
static int arg_compare(const kiln_tensor *x, int64_t a, int64_t b, int sign) {
  kiln_dtype dt = x->dtype;
  if (kiln_dtype_is_float(dt)) {
    double va = kiln_load_f64(x->data, dt, a), vb = kiln_load_f64(x->data, dt, b);
    if (isnan(va) || isnan(vb)) return isnan(va) && isnan(vb) ? 0 : isnan(va) ? 1 : -1;
    return va == vb ? 0 : ((va > vb) == (sign > 0) ? 1 : -1);
  }
  uint64_t va = kiln_load_u64(x->data, dt, a), vb = kiln_load_u64(x->data, dt, b);
  if (va == vb) return 0;
  return int_less(dt, vb, va) == (sign > 0) ? 1 : -1;
}

static kiln_status_t arg_kernel(kiln_kernel_ctx *ctx, int sign) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_reduce_check_dtype(x, KILN_DT_NUMERIC, "input 0 (data)"));
  bool keepdims = kiln_attr_int(ctx->node, "keepdims", 1) != 0;
  bool last = kiln_attr_int(ctx->node, "select_last_index", 0) != 0;
  int axis = 0;
  if (x->rank == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data) must have rank >= 1, got a scalar");
  KILN_TRY(kiln_reduce_norm_axis(kiln_attr_int(ctx->node, "axis", 0), x->rank, "attribute axis", &axis));
  int64_t outer, n, inner;
  kiln_reduce_split_dims(x, axis, &outer, &n, &inner);
  bool mask[KILN_MAX_RANK] = {false};
  mask[axis] = true;
  int64_t od[KILN_MAX_RANK];
  int orank = reduced_dims(x->rank, x->dims, mask, keepdims, od);
  if (n == 0 && outer * inner > 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (data): cannot take %s over axis %d of size 0",
                      sign > 0 ? "ArgMax" : "ArgMin", axis);
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, orank, od, &y));
  int64_t *yd = y->data;
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * n * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < n; k++) {
        int c = arg_compare(x, base + k * inner, base + best * inner, sign);
        if (c > 0 || (c == 0 && last)) best = k;
      }
      yd[o * inner + i] = best;
    }
  }
  return NULL;
}

static kiln_status_t argmax_kernel(kiln_kernel_ctx *ctx) { return arg_kernel(ctx, 1); }
static kiln_status_t argmin_kernel(kiln_kernel_ctx *ctx) { return arg_kernel(ctx, -1); }

/* ---- inference shared with the other files of the family ---------------- */

static kiln_status_t same_as_input0(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

/* ---- table --------------------------------------------------------------- */

#define RD_OP_F(name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, cls, fl) \
  {"", #name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, fl, .id = KILN_OP_##name, .op_class = cls}
#define RD_OP(name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, cls) \
  RD_OP_F(name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, cls, 0)
/* with a gradient rule (ops/gradient.h) */
#define RD_OP_G(name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, cls, fl, grad)             \
  {"", #name, min_in, max_in, min_out, max_out, infer_fn, kernel_fn, fl, .id = KILN_OP_##name, .op_class = cls, \
   .gradient = grad}

static const kiln_op_def reduce_ops[] = {
    RD_OP(ArgMax, 1, 1, 1, 1, arg_infer, argmax_kernel, KILN_OPCLASS_REDUCTION),
    RD_OP(ArgMin, 1, 1, 1, 1, arg_infer, argmin_kernel, KILN_OPCLASS_REDUCTION),
    RD_OP_G(ReduceL1, 1, 2, 1, 1, reduce_infer, reduce_l1_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceL2, 1, 2, 1, 1, reduce_infer, reduce_l2_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceLogSum, 1, 2, 1, 1, reduce_infer, reduce_log_sum_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceLogSumExp, 1, 2, 1, 1, reduce_infer, reduce_log_sum_exp_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceMax, 1, 2, 1, 1, reduce_infer, reduce_max_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceMin, 1, 2, 1, 1, reduce_infer, reduce_min_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceMean, 1, 2, 1, 1, reduce_infer, reduce_mean_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceProd, 1, 2, 1, 1, reduce_infer, reduce_prod_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceSum, 1, 2, 1, 1, reduce_infer, reduce_sum_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(ReduceSumSquare, 1, 2, 1, 1, reduce_infer, reduce_sum_square_kernel, KILN_OPCLASS_REDUCTION, 0, kiln_grad_reduce),
    RD_OP_G(Softmax, 1, 1, 1, 1, same_as_input0, kiln_reduce_softmax_kernel, KILN_OPCLASS_REDUCTION,
            KILN_OP_REREADS_INPUT, kiln_grad_softmax),
    RD_OP_G(LogSoftmax, 1, 1, 1, 1, same_as_input0, kiln_reduce_logsoftmax_kernel, KILN_OPCLASS_REDUCTION,
            KILN_OP_REREADS_INPUT, kiln_grad_softmax),
    RD_OP(Hardmax, 1, 1, 1, 1, same_as_input0, kiln_reduce_hardmax_kernel, KILN_OPCLASS_REDUCTION),
    RD_OP(LpNormalization, 1, 1, 1, 1, same_as_input0, kiln_reduce_lpnorm_kernel, KILN_OPCLASS_NONE),
    /* reductions: each element combines its axis under a mask (codegen/lower.c's compute_scan) */
    RD_OP(CumSum, 2, 2, 1, 1, same_as_input0, kiln_reduce_cumsum_kernel, KILN_OPCLASS_REDUCTION),
    RD_OP(CumProd, 2, 2, 1, 1, same_as_input0, kiln_reduce_cumprod_kernel, KILN_OPCLASS_REDUCTION),
    RD_OP(TopK, 1, 2, 2, 2, kiln_reduce_topk_infer, kiln_reduce_topk_kernel, KILN_OPCLASS_NONE),
};

const kiln_op_def *kiln_ops_reduce(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(reduce_ops);
  return reduce_ops;
}
