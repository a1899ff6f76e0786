/* Movement ops that only change or report shapes, or create constants:
 * Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Constant,
 * ConstantOfShape, EyeLike, Range. */
#include "ops/movement_internal.h"

#include <math.h>

/* ---- Reshape ------------------------------------------------------------ */

/* Output dims of Reshape. in_rank -1 = unknown; unknown in_dims are -1 and
 * make the affected output dims -1 (inference). */
static kiln_status_t reshape_dims(int in_rank, const int64_t *in_dims, const int64_t *shape, int n, bool allowzero,
                                  int64_t *out) {
  if (n > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "input 1 (shape): %d dims exceed the maximum rank %d", n, KILN_MAX_RANK);
  int infer_at = -1;
  bool has_zero = false;
  for (int i = 0; i < n; i++) {
    int64_t s = shape[i];
    if (s == 0 && !allowzero) {
      if (in_rank >= 0 && i >= in_rank)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): 0 at index %d copies a dim the rank-%d input lacks",
                          i, in_rank);
      out[i] = in_rank >= 0 ? in_dims[i] : -1;
    } else if (s == -1) {
      if (infer_at >= 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): more than one -1 (at %d and %d)", infer_at, i);
      infer_at = i;
      out[i] = -1;
    } else if (s < -1) {
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): invalid dim %lld at index %d", (long long)s, i);
    } else {
      if (s == 0) has_zero = true;
      out[i] = s;
    }
  }
  if (allowzero && has_zero && infer_at >= 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): -1 together with 0 is invalid when allowzero=1");
  int64_t in_numel = in_rank >= 0 ? kiln_mv_prod(in_dims, 0, in_rank) : -1;
  int64_t known = 1;
  bool all_known = true;
  for (int i = 0; i < n; i++) {
    if (i == infer_at) continue;
    if (out[i] < 0) {
      all_known = false;
      continue;
    }
    if (!kiln_mul_i64(known, out[i], &known))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape): element count overflows");
  }
  char s1[256], s2[256];
  if (infer_at >= 0) {
    if (all_known && in_numel >= 0) {
      if (known == 0 || in_numel % known != 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "cannot reshape input %s to %s",
                          kiln_shape_str(in_rank, in_dims, s1, sizeof s1), kiln_shape_str(n, shape, s2, sizeof s2));
      out[infer_at] = in_numel / known;
    }
  } else if (all_known && in_numel >= 0 && known != in_numel) {
    return kiln_error(KILN_INVALID_ARGUMENT, "cannot reshape input %s (%lld elements) to %s",
                      kiln_shape_str(in_rank, in_dims, s1, sizeof s1), (long long)in_numel,
                      kiln_shape_str(n, out, s2, sizeof s2));
  }
  return NULL;
}

kiln_status_t kiln_mv_infer_Reshape(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int in_rank = in ? in->rank : -1;
  int64_t shape[KILN_MAX_RANK], out[KILN_MAX_RANK];
  int n;
  bool allowzero = ctx->opset >= 14 && kiln_attr_int(ctx->node, "allowzero", 0) != 0;
  if (ctx->opset < 5) {
    int cnt;
    const int64_t *a = kiln_attr_ints(ctx->node, "shape", &cnt);
    if (cnt > KILN_MAX_RANK)
      return kiln_error(KILN_UNSUPPORTED, "attribute shape: %d dims exceed the maximum rank", cnt);
    for (int i = 0; i < cnt; i++) shape[i] = a[i];
    n = cnt;
  } else if (ctx->n_inputs < 2 || !ctx->inputs[1]) {
    /* The kernel would refuse it at run time; a compiler must not trust a
     * declared output shape for it meanwhile. */
    return kiln_error(KILN_INVALID_MODEL, "input 1 (shape) is required from opset 5 (this node has opset %d)", ctx->opset);
  } else if (!kiln_mv_const_ints(kiln_mv_const(ctx, 1), shape, KILN_MAX_RANK, &n)) {
    const kiln_type *st = kiln_mv_in_type(ctx, 1);
    if (st && st->rank == 1 && st->dims[0] >= 0 && st->dims[0] <= KILN_MAX_RANK) {
      int64_t dims[KILN_MAX_RANK];
      for (int i = 0; i < KILN_MAX_RANK; i++) dims[i] = -1;
      kiln_infer_set(ctx, 0, dt, (int)st->dims[0], dims);
    } else {
      kiln_mv_infer_unknown_rank(ctx, 0, dt);
    }
    return NULL;
  }
  KILN_TRY(reshape_dims(in_rank, in ? in->dims : NULL, shape, n, allowzero, out));
  kiln_infer_set(ctx, 0, dt, n, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Reshape(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int64_t out[KILN_MAX_RANK];
  bool allowzero = ctx->opset >= 14 && kiln_attr_int(ctx->node, "allowzero", 0) != 0;
  if (ctx->opset < 5) {
    int cnt;
    const int64_t *a = kiln_attr_ints(ctx->node, "shape", &cnt);
    KILN_TRY(reshape_dims(x->rank, x->dims, a, cnt, allowzero, out));
    KILN_TRY(kiln_tensor_reshaped(x, cnt, out, &y));
    return kiln_kernel_set_output(ctx, 0, y);
  }
  kiln_tensor *st;
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &st));
  int64_t *shape, n;
  KILN_TRY(kiln_mv_read_ints(st, "input 1 (shape)", &shape, &n));
  kiln_status_t s = n > KILN_MAX_RANK ? kiln_error(KILN_UNSUPPORTED, "input 1 (shape): %lld dims exceed the maximum rank %d",
                                                   (long long)n, KILN_MAX_RANK)
                                      : reshape_dims(x->rank, x->dims, shape, (int)n, allowzero, out);
  free(shape);
  KILN_TRY(s);
  KILN_TRY(kiln_tensor_reshaped(x, (int)n, out, &y));
  return kiln_kernel_set_output(ctx, 0, y);
}

/* ---- Flatten ------------------------------------------------------------ */

static kiln_status_t flatten_axis(const kiln_node *node, int rank, int *out) {
  int64_t axis = kiln_attr_int(node, "axis", 1);
  if (axis < -(int64_t)rank || axis > rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis %lld out of range [%d, %d] for rank %d", (long long)axis,
                      -rank, rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NULL;
}

kiln_status_t kiln_mv_infer_Flatten(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int64_t dims[2] = {-1, -1};
  if (in && in->rank >= 0) {
    int axis;
    KILN_TRY(flatten_axis(ctx->node, in->rank, &axis));
    dims[0] = kiln_mv_prod(in->dims, 0, axis);
    dims[1] = kiln_mv_prod(in->dims, axis, in->rank);
  }
  kiln_infer_set(ctx, 0, dt, 2, dims);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Flatten(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int axis;
  KILN_TRY(flatten_axis(ctx->node, x->rank, &axis));
  int64_t dims[2] = {kiln_mv_prod(x->dims, 0, axis), kiln_mv_prod(x->dims, axis, x->rank)};
  KILN_TRY(kiln_tensor_reshaped(x, 2, dims, &y));
  return kiln_kernel_set_output(ctx, 0, y);
}

/* ---- Squeeze / Unsqueeze ------------------------------------------------ */

/* Axes of (Un)Squeeze: attribute before opset 13, optional input 1 after.
 * *known false when the input exists but is not constant (inference). */
static kiln_status_t squeeze_axes_infer(kiln_infer_ctx *ctx, int64_t *axes, int *n, bool *present, bool *known) {
  *n = 0;
  *present = false;
  *known = true;
  if (ctx->opset < 13) {
    const kiln_attr *a = kiln_node_attr(ctx->node, "axes");
    if (a && a->type == KILN_ATTR_INTS) {
      if (a->n > KILN_MAX_RANK) return kiln_error(KILN_INVALID_ARGUMENT, "attribute axes: too many axes (%d)", a->n);
      for (int i = 0; i < a->n; i++) axes[i] = a->ints[i];
      *n = a->n;
      *present = true;
    }
    return NULL;
  }
  if (!kiln_mv_in_present(ctx, 1)) return NULL;
  *present = true;
  if (!kiln_mv_const_ints(kiln_mv_const(ctx, 1), axes, KILN_MAX_RANK, n)) *known = false;
  return NULL;
}

static kiln_status_t squeeze_axes_kernel(kiln_kernel_ctx *ctx, int64_t **axes, int64_t *n, bool *present) {
  *axes = NULL;
  *n = 0;
  *present = false;
  if (ctx->opset < 13) {
    const kiln_attr *a = kiln_node_attr(ctx->node, "axes");
    if (a && a->type == KILN_ATTR_INTS) {
      *present = true;
      if (a->n == 0) return NULL;
      *axes = malloc((size_t)a->n * sizeof **axes);
      if (!*axes) return KILN_OOM();
      memcpy(*axes, a->ints, (size_t)a->n * sizeof **axes);
      *n = a->n;
    }
    return NULL;
  }
  kiln_tensor *t = kiln_kernel_input(ctx, 1);
  if (!t) return NULL;
  *present = true;
  return kiln_mv_read_ints(t, "input 1 (axes)", axes, n);
}

/* Marks squeezed axes in drop[]; checks they are 1 (unknown dims pass). */
static kiln_status_t squeeze_mark(int rank, const int64_t *dims, const int64_t *axes, int64_t n, bool *drop) {
  for (int d = 0; d < rank; d++) drop[d] = false;
  for (int64_t i = 0; i < n; i++) {
    int a;
    KILN_TRY(kiln_mv_norm_axis(axes[i], rank, "axes", &a));
    if (drop[a]) return kiln_error(KILN_INVALID_ARGUMENT, "axes: axis %lld repeated", (long long)axes[i]);
    if (dims[a] >= 0 && dims[a] != 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "axes: cannot squeeze axis %d of size %lld", a, (long long)dims[a]);
    drop[a] = true;
  }
  return NULL;
}

kiln_status_t kiln_mv_infer_Squeeze(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int64_t axes[KILN_MAX_RANK];
  int n;
  bool present, known;
  KILN_TRY(squeeze_axes_infer(ctx, axes, &n, &present, &known));
  if (!in || in->rank < 0 || !known) {
    const kiln_type *at = kiln_mv_in_type(ctx, 1);
    if (!known && in && in->rank >= 0 && at && at->rank == 1 && at->dims[0] >= 0 && at->dims[0] <= in->rank)
      kiln_infer_set(ctx, 0, dt, (int)(in->rank - at->dims[0]), NULL);
    else
      kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  bool drop[KILN_MAX_RANK];
  if (present && n > 0) {
    KILN_TRY(squeeze_mark(in->rank, in->dims, axes, n, drop));
  } else {
    for (int d = 0; d < in->rank; d++) {
      if (in->dims[d] < 0) { /* cannot tell whether it is 1 */
        kiln_mv_infer_unknown_rank(ctx, 0, dt);
        return NULL;
      }
      drop[d] = in->dims[d] == 1;
    }
  }
  int64_t out[KILN_MAX_RANK];
  int r = 0;
  for (int d = 0; d < in->rank; d++)
    if (!drop[d]) out[r++] = in->dims[d];
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Squeeze(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int64_t *axes, n;
  bool present, drop[KILN_MAX_RANK];
  KILN_TRY(squeeze_axes_kernel(ctx, &axes, &n, &present));
  kiln_status_t s = NULL;
  if (present && n > 0) {
    s = squeeze_mark(x->rank, x->dims, axes, n, drop);
  } else {
    for (int d = 0; d < x->rank; d++) drop[d] = x->dims[d] == 1;
  }
  free(axes);
  KILN_TRY(s);
  int64_t out[KILN_MAX_RANK];
  int r = 0;
  for (int d = 0; d < x->rank; d++)
    if (!drop[d]) out[r++] = x->dims[d];
  KILN_TRY(kiln_tensor_reshaped(x, r, out, &y));
  return kiln_kernel_set_output(ctx, 0, y);
}

/* Output dims of Unsqueeze; unknown input dims stay -1. */
static kiln_status_t unsqueeze_dims(int rank, const int64_t *dims, const int64_t *axes, int64_t n, int64_t *out,
                                    int *out_rank) {
  if (rank + n > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "output rank %lld exceeds the maximum rank %d", (long long)(rank + n),
                      KILN_MAX_RANK);
  int r = (int)(rank + n);
  bool ins[KILN_MAX_RANK] = {false};
  for (int64_t i = 0; i < n; i++) {
    int a;
    KILN_TRY(kiln_mv_norm_axis(axes[i], r, "axes", &a));
    if (ins[a]) return kiln_error(KILN_INVALID_ARGUMENT, "axes: axis %lld repeated", (long long)axes[i]);
    ins[a] = true;
  }
  int k = 0;
  for (int d = 0; d < r; d++) out[d] = ins[d] ? 1 : dims[k++];
  *out_rank = r;
  return NULL;
}

kiln_status_t kiln_mv_infer_Unsqueeze(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  int64_t axes[KILN_MAX_RANK];
  int n;
  bool present, known;
  KILN_TRY(squeeze_axes_infer(ctx, axes, &n, &present, &known));
  if (!in || in->rank < 0 || !known) {
    const kiln_type *at = kiln_mv_in_type(ctx, 1);
    if (in && in->rank >= 0 && at && at->rank == 1 && at->dims[0] >= 0 && in->rank + at->dims[0] <= KILN_MAX_RANK)
      kiln_infer_set(ctx, 0, dt, (int)(in->rank + at->dims[0]), NULL);
    else
      kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int64_t out[KILN_MAX_RANK];
  int r;
  KILN_TRY(unsqueeze_dims(in->rank, in->dims, axes, n, out, &r));
  kiln_infer_set(ctx, 0, dt, r, out);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Unsqueeze(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int64_t *axes, n;
  bool present;
  KILN_TRY(squeeze_axes_kernel(ctx, &axes, &n, &present));
  if (!present) return kiln_error(KILN_INVALID_ARGUMENT, "axes are required");
  int64_t out[KILN_MAX_RANK];
  int r;
  kiln_status_t s = unsqueeze_dims(x->rank, x->dims, axes, n, out, &r);
  free(axes);
  KILN_TRY(s);
  KILN_TRY(kiln_tensor_reshaped(x, r, out, &y));
  return kiln_kernel_set_output(ctx, 0, y);
}

/* ---- Shape / Size ------------------------------------------------------- */

static void shape_range(const kiln_node *node, int opset, int rank, int *start, int *end) {
  int64_t s = opset >= 15 ? kiln_attr_int(node, "start", 0) : 0;
  int64_t e = opset >= 15 ? kiln_attr_int(node, "end", rank) : rank;
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  s = s < 0 ? 0 : s > rank ? rank : s;
  e = e < 0 ? 0 : e > rank ? rank : e;
  *start = (int)s;
  *end = (int)(e < s ? s : e);
}

kiln_status_t kiln_mv_infer_Shape(kiln_infer_ctx *ctx) {
  int rank = kiln_mv_in_rank(ctx, 0);
  int64_t n = -1;
  if (rank >= 0) {
    int s, e;
    shape_range(ctx->node, ctx->opset, rank, &s, &e);
    n = e - s;
  }
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 1, &n);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Shape(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  int s, e;
  shape_range(ctx->node, ctx->opset, x->rank, &s, &e);
  int64_t n = e - s;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, 1, &n, &y));
  for (int i = s; i < e; i++) ((int64_t *)y->data)[i - s] = x->dims[i];
  return NULL;
}

kiln_status_t kiln_mv_infer_Size(kiln_infer_ctx *ctx) {
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 0, NULL);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Size(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, 0, NULL, &y));
  *(int64_t *)y->data = x->numel;
  return NULL;
}

/* ---- Constant ----------------------------------------------------------- */

/* Builds Constant's value from whichever value* attribute is set. */
static kiln_status_t constant_value(const kiln_node *node, kiln_tensor **out) {
  *out = NULL;
  const kiln_attr *a;
  if ((a = kiln_node_attr(node, "sparse_value")))
    return kiln_error(KILN_UNSUPPORTED, "attribute sparse_value: sparse constants are not supported");
  if ((a = kiln_node_attr(node, "value"))) {
    if (a->type != KILN_ATTR_TENSOR || !a->t)
      return kiln_error(KILN_INVALID_MODEL, "attribute value must be a tensor");
    return kiln_tensor_clone(a->t, out);
  }
  kiln_tensor *t;
  if ((a = kiln_node_attr(node, "value_float"))) {
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_F32, 0, NULL, &t));
    *(float *)t->data = a->type == KILN_ATTR_INT ? (float)a->i : a->f;
  } else if ((a = kiln_node_attr(node, "value_floats"))) {
    int64_t n = a->n;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_F32, 1, &n, &t));
    if (n) memcpy(t->data, a->floats, (size_t)n * sizeof(float));
  } else if ((a = kiln_node_attr(node, "value_int"))) {
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 0, NULL, &t));
    *(int64_t *)t->data = a->i;
  } else if ((a = kiln_node_attr(node, "value_ints"))) {
    int64_t n = a->n;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &n, &t));
    if (n) memcpy(t->data, a->ints, (size_t)n * sizeof(int64_t));
  } else if ((a = kiln_node_attr(node, "value_string"))) {
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_STRING, 0, NULL, &t));
    kiln_status_t s = kiln_tensor_set_string(t, 0, a->s ? a->s : "", a->s ? a->s_len : 0);
    if (s) {
      kiln_tensor_release(t);
      return s;
    }
  } else if ((a = kiln_node_attr(node, "value_strings"))) {
    int64_t n = a->n;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_STRING, 1, &n, &t));
    for (int64_t i = 0; i < n; i++) {
      const char *s = a->strings && a->strings[i] ? a->strings[i] : "";
      kiln_status_t st = kiln_tensor_set_string(t, i, s, strlen(s));
      if (st) {
        kiln_tensor_release(t);
        return st;
      }
    }
  } else {
    return kiln_error(KILN_INVALID_MODEL, "Constant needs one of the value attributes");
  }
  *out = t;
  return NULL;
}

kiln_status_t kiln_mv_infer_Constant(kiln_infer_ctx *ctx) {
  const kiln_node *node = ctx->node;
  const kiln_attr *a;
  if (kiln_node_attr(node, "sparse_value") && !kiln_node_attr(node, "value")) return NULL;
  if ((a = kiln_node_attr(node, "value")) && a->type == KILN_ATTR_TENSOR && a->t) {
    kiln_infer_set(ctx, 0, a->t->dtype, a->t->rank, a->t->dims);
  } else if (kiln_node_attr(node, "value_float")) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_F32, 0, NULL);
  } else if ((a = kiln_node_attr(node, "value_floats"))) {
    int64_t n = a->n;
    kiln_infer_set(ctx, 0, KILN_DTYPE_F32, 1, &n);
  } else if (kiln_node_attr(node, "value_int")) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 0, NULL);
  } else if ((a = kiln_node_attr(node, "value_ints"))) {
    int64_t n = a->n;
    kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 1, &n);
  } else if (kiln_node_attr(node, "value_string")) {
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, 0, NULL);
  } else if ((a = kiln_node_attr(node, "value_strings"))) {
    int64_t n = a->n;
    kiln_infer_set(ctx, 0, KILN_DTYPE_STRING, 1, &n);
  }
  return NULL;
}

kiln_status_t kiln_mv_kernel_Constant(kiln_kernel_ctx *ctx) {
  kiln_tensor *t;
  KILN_TRY(constant_value(ctx->node, &t));
  return kiln_kernel_set_output(ctx, 0, t);
}

/* ---- ConstantOfShape ---------------------------------------------------- */

static kiln_status_t cos_value(const kiln_node *node, const kiln_tensor **out) {
  *out = NULL;
  const kiln_attr *a = kiln_node_attr(node, "value");
  if (!a) return NULL;
  if (a->type != KILN_ATTR_TENSOR || !a->t) return kiln_error(KILN_INVALID_MODEL, "attribute value must be a tensor");
  if (a->t->numel != 1)
    return kiln_error(KILN_INVALID_MODEL, "attribute value must hold one element, has %lld", (long long)a->t->numel);
  *out = a->t;
  return NULL;
}

kiln_status_t kiln_mv_infer_ConstantOfShape(kiln_infer_ctx *ctx) {
  const kiln_tensor *v;
  KILN_TRY(cos_value(ctx->node, &v));
  kiln_dtype dt = v ? v->dtype : KILN_DTYPE_F32;
  int64_t shape[KILN_MAX_RANK];
  int n;
  if (kiln_mv_const_ints(kiln_mv_const(ctx, 0), shape, KILN_MAX_RANK, &n)) {
    for (int i = 0; i < n; i++)
      if (shape[i] < 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (shape): negative dim %lld", (long long)shape[i]);
    kiln_infer_set(ctx, 0, dt, n, shape);
    return NULL;
  }
  const kiln_type *st = kiln_mv_in_type(ctx, 0);
  if (st && st->rank == 1 && st->dims[0] >= 0 && st->dims[0] <= KILN_MAX_RANK)
    kiln_infer_set(ctx, 0, dt, (int)st->dims[0], NULL);
  else
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
  return NULL;
}

kiln_status_t kiln_mv_kernel_ConstantOfShape(kiln_kernel_ctx *ctx) {
  kiln_tensor *st, *y;
  const kiln_tensor *v;
  KILN_TRY(cos_value(ctx->node, &v));
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &st));
  int64_t *shape, n;
  KILN_TRY(kiln_mv_read_ints(st, "input 0 (shape)", &shape, &n));
  kiln_status_t s = NULL;
  if (n > KILN_MAX_RANK)
    s = kiln_error(KILN_UNSUPPORTED, "input 0 (shape): %lld dims exceed the maximum rank %d", (long long)n,
                   KILN_MAX_RANK);
  for (int64_t i = 0; !s && i < n; i++)
    if (shape[i] < 0) s = kiln_error(KILN_INVALID_ARGUMENT, "input 0 (shape): negative dim %lld", (long long)shape[i]);
  /* Zeros without a value; a number fills every element below, so its
   * output is not zeroed first (folding makes whole weights this way). */
  bool fills = v && v->dtype != KILN_DTYPE_STRING;
  if (!s && !fills) s = kiln_kernel_output_tensor(ctx, 0, v ? v->dtype : KILN_DTYPE_F32, (int)n, shape, &y);
  if (!s && fills && !(s = kiln_tensor_new_uninit(v->dtype, (int)n, shape, &y))) s = kiln_kernel_set_output(ctx, 0, y);
  free(shape);
  KILN_TRY(s);
  if (!v) return NULL; /* zeros */
  if (y->numel == 0) return NULL;
  if (y->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < y->numel; i++) KILN_TRY(kiln_mv_copy(y, i, v, 0, 1));
    return NULL;
  }
  /* One element, then the filled prefix copied onto the rest, doubling
   * (constant folding fills whole weights this way). */
  size_t es = kiln_dtype_size(y->dtype), total = (size_t)y->numel * es, done = es;
  memcpy(y->data, v->data, es);
  while (done < total) {
    size_t n = done < total - done ? done : total - done;
    memcpy((char *)y->data + done, y->data, n);
    done += n;
  }
  return NULL;
}

/* ---- EyeLike ------------------------------------------------------------ */

static kiln_status_t eyelike_dtype(const kiln_node *node, kiln_dtype in, kiln_dtype *out) {
  int64_t dt = kiln_attr_int(node, "dtype", 0);
  if (!kiln_node_attr(node, "dtype") || dt == 0) {
    *out = in;
    return NULL;
  }
  if (!kiln_dtype_is_valid((int)dt) || dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128 ||
      kiln_dtype_is_narrow((kiln_dtype)dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute dtype: unsupported dtype %lld", (long long)dt);
  *out = (kiln_dtype)dt;
  return NULL;
}

kiln_status_t kiln_mv_infer_EyeLike(kiln_infer_ctx *ctx) {
  kiln_dtype dt;
  KILN_TRY(eyelike_dtype(ctx->node, kiln_mv_in_dtype(ctx, 0), &dt));
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  if (in && in->rank >= 0 && in->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank 2, got %d", in->rank);
  kiln_infer_set(ctx, 0, dt, 2, in && in->rank == 2 ? in->dims : NULL);
  return NULL;
}

kiln_status_t kiln_mv_kernel_EyeLike(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->rank != 2) return kiln_error(KILN_INVALID_ARGUMENT, "input 0: expected rank 2, got %d", x->rank);
  kiln_dtype dt;
  KILN_TRY(eyelike_dtype(ctx->node, x->dtype, &dt));
  if (dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128)
    return kiln_error(KILN_UNSUPPORTED, "output dtype %s is not supported", kiln_dtype_name(dt));
  int64_t k = kiln_attr_int(ctx->node, "k", 0);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 2, x->dims, &y));
  int64_t rows = x->dims[0], cols = x->dims[1];
  for (int64_t i = 0; i < rows; i++) {
    /* j = i + k, computed without overflow for huge k */
    if ((k >= 0 && k >= cols) || (k < 0 && -(k + 1) >= i)) continue;
    int64_t j = i + k;
    if (j >= 0 && j < cols) kiln_store_f64(y->data, dt, i * cols + j, 1.0);
  }
  return NULL;
}

/* ---- Range -------------------------------------------------------------- */

/* Opset 27 adds f16 and bf16, computed in the stash_type (f32 or f64). */
static bool range_dtype_ok(kiln_dtype dt, int opset) {
  if (opset >= 27 && (dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16)) return true;
  return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_I16 || dt == KILN_DTYPE_I32 ||
         dt == KILN_DTYPE_I64;
}

/* Number of elements for start/limit/delta (all one dtype). */
static kiln_status_t range_count(const kiln_tensor *t[3], int opset, int64_t *out) {
  static const char *names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; i++) {
    if (t[i]->numel != 1 || t[i]->rank > 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a scalar, got %lld elements", i, names[i],
                        (long long)t[i]->numel);
    if (t[i]->dtype != t[0]->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s differs from start's %s", i, names[i],
                        kiln_dtype_name(t[i]->dtype), kiln_dtype_name(t[0]->dtype));
  }
  kiln_dtype dt = t[0]->dtype;
  if (!range_dtype_ok(dt, opset)) return kiln_error(KILN_INVALID_ARGUMENT, "unsupported dtype %s", kiln_dtype_name(dt));
  if (kiln_dtype_is_float(dt)) {
    double s = kiln_load_f64(t[0]->data, dt, 0), l = kiln_load_f64(t[1]->data, dt, 0),
           d = kiln_load_f64(t[2]->data, dt, 0);
    if (d == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (delta): must not be zero");
    double n = ceil((l - s) / d);
    if (isnan(n)) return kiln_error(KILN_INVALID_ARGUMENT, "start/limit/delta are not finite");
    if (n > (double)((int64_t)1 << 40))
      return kiln_error(KILN_INVALID_ARGUMENT, "range of %g elements is too large", n);
    *out = n > 0 ? (int64_t)n : 0;
    return NULL;
  }
  int64_t s = kiln_load_i64(t[0]->data, dt, 0), l = kiln_load_i64(t[1]->data, dt, 0),
          d = kiln_load_i64(t[2]->data, dt, 0);
  if (d == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (delta): must not be zero");
  /* count = ceil((l - s) / d) in unsigned arithmetic: |l - s| < 2^64 */
  if ((d > 0 && l <= s) || (d < 0 && l >= s)) {
    *out = 0;
    return NULL;
  }
  uint64_t dist = d > 0 ? (uint64_t)l - (uint64_t)s : (uint64_t)s - (uint64_t)l;
  uint64_t step = d > 0 ? (uint64_t)d : 0 - (uint64_t)d;
  uint64_t q = dist / step + (dist % step != 0);
  if (q > (uint64_t)INT64_MAX)
    return kiln_error(KILN_INVALID_ARGUMENT, "range of %llu elements is too large", (unsigned long long)q);
  *out = (int64_t)q;
  return NULL;
}

kiln_status_t kiln_mv_infer_Range(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_tensor *t[3] = {kiln_mv_const(ctx, 0), kiln_mv_const(ctx, 1), kiln_mv_const(ctx, 2)};
  int64_t n = -1;
  if (t[0] && t[1] && t[2]) KILN_TRY(range_count(t, ctx->opset, &n));
  kiln_infer_set(ctx, 0, dt, 1, &n);
  return NULL;
}

kiln_status_t kiln_mv_kernel_Range(kiln_kernel_ctx *ctx) {
  kiln_tensor *in[3], *y;
  for (int i = 0; i < 3; i++) KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
  const kiln_tensor *t[3] = {in[0], in[1], in[2]};
  int64_t n;
  KILN_TRY(range_count(t, ctx->opset, &n));
  kiln_dtype dt = in[0]->dtype;
  /* f16/bf16: each value computed in the stash type, then rounded once more */
  bool low = dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16;
  int64_t stash = low ? kiln_attr_int(ctx->node, "stash_type", KILN_DTYPE_F32) : KILN_DTYPE_F64;
  if (stash != KILN_DTYPE_F32 && stash != KILN_DTYPE_F64)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute stash_type: %lld, expected 1 (float) or 11 (double)",
                      (long long)stash);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 1, &n, &y));
  if (kiln_dtype_is_float(dt)) {
    double s = kiln_load_f64(in[0]->data, dt, 0), d = kiln_load_f64(in[2]->data, dt, 0);
    for (int64_t i = 0; i < n; i++) {
      double v = s + (double)i * d;
      kiln_store_f64(y->data, dt, i, stash == KILN_DTYPE_F32 && low ? (double)(float)v : v);
    }
  } else {
    uint64_t s = (uint64_t)kiln_load_i64(in[0]->data, dt, 0), d = (uint64_t)kiln_load_i64(in[2]->data, dt, 0);
    for (int64_t i = 0; i < n; i++) kiln_store_i64(y->data, dt, i, (int64_t)(s + (uint64_t)i * d));
  }
  return NULL;
}
