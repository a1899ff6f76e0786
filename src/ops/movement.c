/* Ops of the "movement" family: ops that move, select or create elements
 * without arithmetic (Reshape, Transpose, Gather, Slice, Pad, ...).
 *
 * The ops live in movement_shape.c (shape-only and constant-producing ops),
 * movement_layout.c (copies along axes) and movement_index.c (ops driven by
 * index data). This file holds their shared helpers and the op table.
 */
#include "ops/movement_internal.h"
#include "ops/gradient.h"

#include <math.h>

kiln_status_t kiln_mv_copy(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t n) {
  if (n <= 0) return NULL;
  if (dst->dtype == KILN_DTYPE_STRING) {
    for (int64_t k = 0; k < n; k++) {
      const char *s = kiln_mv_str(src, si + k);
      KILN_TRY(kiln_tensor_set_string(dst, di + k, s, strlen(s)));
    }
    return NULL;
  }
  size_t es = kiln_dtype_size(dst->dtype);
  memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, (size_t)n * es);
  return NULL;
}

kiln_status_t kiln_mv_norm_axis(int64_t axis, int rank, const char *what, int *out) {
  if (axis < -(int64_t)rank || axis >= rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: axis %lld out of range [%d, %d) for rank %d", what,
                      (long long)axis, -rank, rank, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NULL;
}

kiln_status_t kiln_mv_wrap_index(int64_t v, int64_t dim, const char *what, int64_t *out) {
  if (v < -dim || v >= dim)
    return kiln_error(KILN_OUT_OF_RANGE, "%s: value %lld out of range [%lld, %lld)", what, (long long)v,
                      (long long)-dim, (long long)dim);
  *out = v < 0 ? v + dim : v;
  return NULL;
}

kiln_status_t kiln_mv_read_ints(const kiln_tensor *t, const char *what, int64_t **out, int64_t *n) {
  *out = NULL;
  *n = 0;
  if (!kiln_dtype_is_int(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: expected an integer tensor, got %s", what,
                      kiln_dtype_name(t->dtype));
  if (t->rank > 1) {
    char s[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: expected a 1-D tensor, got shape %s", what,
                      kiln_shape_str(t->rank, t->dims, s, sizeof s));
  }
  if (t->numel == 0) return NULL;
  int64_t *v = malloc((size_t)t->numel * sizeof *v);
  if (!v) return KILN_OOM();
  for (int64_t i = 0; i < t->numel; i++) v[i] = kiln_load_i64(t->data, t->dtype, i);
  *out = v;
  *n = t->numel;
  return NULL;
}

void kiln_mv_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    strides[d] = s;
    s *= dims[d];
  }
}

bool kiln_mv_is_nonzero(const kiln_tensor *t, int64_t i) {
  switch (t->dtype) {
    case KILN_DTYPE_STRING: return kiln_mv_str(t, i)[0] != 0;
    case KILN_DTYPE_F16: case KILN_DTYPE_BF16: case KILN_DTYPE_F32: case KILN_DTYPE_F64:
      return kiln_load_f64(t->data, t->dtype, i) != 0.0; /* NaN counts as nonzero */
    case KILN_DTYPE_C64: {
      const float *c = (const float *)t->data + 2 * i;
      return c[0] != 0.0f || c[1] != 0.0f;
    }
    case KILN_DTYPE_C128: {
      const double *c = (const double *)t->data + 2 * i;
      return c[0] != 0.0 || c[1] != 0.0;
    }
    default: return kiln_load_u64(t->data, t->dtype, i) != 0;
  }
}

int64_t kiln_mv_prod(const int64_t *dims, int lo, int hi) {
  int64_t p = 1;
  for (int d = lo; d < hi; d++) {
    if (dims[d] < 0) return -1;
    if (!kiln_mul_i64(p, dims[d], &p)) return -1;
  }
  return p;
}

const kiln_type *kiln_mv_in_type(const kiln_infer_ctx *ctx, int i) {
  if (i < 0 || i >= ctx->n_inputs || !ctx->inputs[i]) return NULL;
  const kiln_type *t = ctx->inputs[i];
  return t->kind == KILN_TYPE_TENSOR ? t : NULL;
}

bool kiln_mv_in_present(const kiln_infer_ctx *ctx, int i) {
  if (i < 0 || i >= ctx->n_inputs) return false;
  if (ctx->node && i < ctx->node->n_inputs && ctx->node->inputs[i] < 0) return false;
  return ctx->inputs[i] || (ctx->consts && ctx->consts[i]);
}

kiln_dtype kiln_mv_in_dtype(const kiln_infer_ctx *ctx, int i) {
  if (i < 0 || i >= ctx->n_inputs || !ctx->inputs[i]) return KILN_DTYPE_UNDEFINED;
  return ctx->inputs[i]->dtype;
}

int kiln_mv_in_rank(const kiln_infer_ctx *ctx, int i) {
  const kiln_type *t = kiln_mv_in_type(ctx, i);
  return t ? t->rank : -1;
}

const kiln_tensor *kiln_mv_const(const kiln_infer_ctx *ctx, int i) {
  if (i < 0 || i >= ctx->n_inputs || !ctx->consts) return NULL;
  return ctx->consts[i];
}

bool kiln_mv_const_ints(const kiln_tensor *t, int64_t *buf, int cap, int *n) {
  if (!t || !kiln_dtype_is_int(t->dtype) || t->rank > 1 || t->numel > cap) return false;
  for (int64_t i = 0; i < t->numel; i++) buf[i] = kiln_load_i64(t->data, t->dtype, i);
  *n = (int)t->numel;
  return true;
}

void kiln_mv_infer_unknown_rank(kiln_infer_ctx *ctx, int i, kiln_dtype dtype) {
  kiln_infer_set(ctx, i, dtype, -1, NULL);
}

/* ---- the table --------------------------------------------------------- */

#define MV_OP(name, min_in, max_in, min_out, max_out, cls)                                                  \
  {"", #name, min_in, max_in, min_out, max_out, kiln_mv_infer_##name, kiln_mv_kernel_##name, 0, .id = KILN_OP_##name, \
   .op_class = cls}
/* the same with shape_grad.c's rule */
#define MV_OP_G(name, min_in, max_in, min_out, max_out, cls)                                                \
  {"", #name, min_in, max_in, min_out, max_out, kiln_mv_infer_##name, kiln_mv_kernel_##name, 0, .id = KILN_OP_##name, \
   .op_class = cls, .gradient = kiln_grad_movement}

static const kiln_op_def movement_ops[] = {
    MV_OP_G(Concat, 1, -1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Compress, 2, 2, 1, 1, KILN_OPCLASS_NONE),
    MV_OP(DepthToSpace, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(SpaceToDepth, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Expand, 2, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(EyeLike, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE), /* a function of the index, like ConstantOfShape */
    MV_OP_G(Flatten, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Gather, 2, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(GatherElements, 2, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(GatherND, 2, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Pad, 1, 4, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Range, 3, 3, 1, 1, KILN_OPCLASS_NONE),
    MV_OP_G(Reshape, 1, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(ReverseSequence, 2, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Scatter, 3, 3, 1, 1, KILN_OPCLASS_NONE),
    /* reductions: each output element searches the updates (codegen/lower.c's compute_scatter) */
    MV_OP(ScatterElements, 3, 3, 1, 1, KILN_OPCLASS_REDUCTION),
    MV_OP(ScatterND, 3, 3, 1, 1, KILN_OPCLASS_REDUCTION),
    MV_OP(Shape, 1, 1, 1, 1, KILN_OPCLASS_NONE),
    MV_OP(Size, 1, 1, 1, 1, KILN_OPCLASS_NONE),
    MV_OP_G(Slice, 1, 5, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Split, 1, 2, 1, -1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Squeeze, 1, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Unsqueeze, 1, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Tile, 2, 3, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP_G(Transpose, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Trilu, 1, 2, 1, 1, KILN_OPCLASS_INJECTIVE),
    /* a compare of the indices broadcast against the depth's positions */
    MV_OP(OneHot, 3, 3, 1, 1, KILN_OPCLASS_BROADCAST),
    MV_OP(ConstantOfShape, 1, 1, 1, 1, KILN_OPCLASS_INJECTIVE),
    MV_OP(Constant, 0, 0, 1, 1, KILN_OPCLASS_NONE),
    MV_OP(NonZero, 1, 1, 1, 1, KILN_OPCLASS_NONE),
    MV_OP(Unique, 1, 1, 1, 4, KILN_OPCLASS_NONE),
};

const kiln_op_def *kiln_ops_movement(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(movement_ops);
  return movement_ops;
}
