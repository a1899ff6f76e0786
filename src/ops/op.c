/* Shared helpers for kernels and inference rules. */
#include "ops/op.h"

#include <stdio.h>

kiln_tensor *kiln_kernel_input(const kiln_kernel_ctx *ctx, int i) {
  if (i < 0 || i >= ctx->n_inputs || !ctx->inputs[i] || ctx->inputs[i]->kind != KILN_VALUE_TENSOR) return NULL;
  return ctx->inputs[i]->tensor;
}

kiln_status_t kiln_kernel_require_input(const kiln_kernel_ctx *ctx, int i, kiln_tensor **out) {
  *out = kiln_kernel_input(ctx, i);
  if (!*out) {
    if (i < ctx->n_inputs && ctx->inputs[i])
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d must be a tensor", i);
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d is required but absent", i);
  }
  return NULL;
}

kiln_status_t kiln_kernel_set_output(kiln_kernel_ctx *ctx, int i, kiln_tensor *t) {
  if (i < 0 || i >= ctx->n_outputs) {
    kiln_tensor_release(t);
    return kiln_error(KILN_INTERNAL, "output index %d out of range (node has %d)", i, ctx->n_outputs);
  }
  kiln_value *v;
  KILN_TRY(kiln_value_from_tensor(t, &v));
  kiln_value_free(ctx->outputs[i]);
  ctx->outputs[i] = v;
  return NULL;
}

static kiln_status_t output_tensor(kiln_kernel_ctx *ctx, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                                   bool zeroed, kiln_tensor **out) {
  kiln_tensor *t;
  char s[256];
  kiln_status_t st = zeroed ? kiln_tensor_new(dtype, rank, dims, &t) : kiln_tensor_new_uninit(dtype, rank, dims, &t);
  if (st) return kiln_status_annotate(st, "output %d %s", i, kiln_shape_str(rank, dims, s, sizeof s));
  KILN_TRY(kiln_kernel_set_output(ctx, i, t));
  *out = t;
  return NULL;
}

kiln_status_t kiln_kernel_output_tensor(kiln_kernel_ctx *ctx, int i, kiln_dtype dtype, int rank,
                                        const int64_t *dims, kiln_tensor **out) {
  return output_tensor(ctx, i, dtype, rank, dims, true, out);
}

kiln_status_t kiln_kernel_output_uninit(kiln_kernel_ctx *ctx, int i, kiln_dtype dtype, int rank,
                                        const int64_t *dims, kiln_tensor **out) {
  return output_tensor(ctx, i, dtype, rank, dims, false, out);
}

void kiln_infer_set(kiln_infer_ctx *ctx, int i, kiln_dtype dtype, int rank, const int64_t *dims) {
  if (i < 0 || i >= ctx->n_outputs) return;
  kiln_type_init_tensor(&ctx->outputs[i], dtype, rank, dims);
}

kiln_status_t kiln_infer_same_as_input(kiln_infer_ctx *ctx, int input, int output) {
  if (input >= ctx->n_inputs || !ctx->inputs[input] || output >= ctx->n_outputs) return NULL;
  kiln_type_copy(&ctx->outputs[output], ctx->inputs[input]);
  return NULL;
}

kiln_status_t kiln_broadcast_shapes(int ra, const int64_t *a, int rb, const int64_t *b, int *out_rank,
                                    int64_t *out_dims) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
    int64_t d;
    if (da == db)
      d = da;
    else if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da < 0 || db < 0)
      d = da < 0 ? db : da; /* unknown vs known: the known one, if compatible it must be */
    else {
      char sa[256], sb[256];
      return kiln_error(KILN_INVALID_ARGUMENT, "shapes %s and %s cannot be broadcast",
                        kiln_shape_str(ra, a, sa, sizeof sa), kiln_shape_str(rb, b, sb, sizeof sb));
    }
    out_dims[i] = d;
  }
  *out_rank = r;
  return NULL;
}

kiln_status_t kiln_infer_broadcast(kiln_infer_ctx *ctx, kiln_dtype dtype) {
  int rank = 0;
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < ctx->n_inputs; i++) {
    const kiln_type *t = ctx->inputs[i];
    if (!t) continue;
    if (t->rank < 0) {
      kiln_infer_set(ctx, 0, dtype, -1, NULL);
      return NULL;
    }
    int64_t tmp[KILN_MAX_RANK];
    int r;
    KILN_RETURN_IF_ERROR(kiln_broadcast_shapes(rank, dims, t->rank, t->dims, &r, tmp), "input %d", i);
    rank = r;
    memcpy(dims, tmp, sizeof tmp);
  }
  kiln_infer_set(ctx, 0, dtype, rank, dims);
  return NULL;
}

bool kiln_op_takes_narrow(const kiln_op_def *op) {
  if (!op) return true;
  if (op->domain && !strcmp(op->domain, "kiln")) return true; /* kiln's own ops: the passes that make them decide */
  switch (op->id) {
    case KILN_OP_Cast: case KILN_OP_CastLike: case KILN_OP_Constant: case KILN_OP_ConstantOfShape:
    case KILN_OP_QuantizeLinear: case KILN_OP_DequantizeLinear: case KILN_OP_QLinearMatMul: case KILN_OP_Dropout:
    case KILN_OP_Flatten: case KILN_OP_Identity: case KILN_OP_If: case KILN_OP_Loop: case KILN_OP_Scan:
    case KILN_OP_Optional: case KILN_OP_OptionalGetElement: case KILN_OP_OptionalHasElement: case KILN_OP_Pad:
    case KILN_OP_Reshape: case KILN_OP_Shape: case KILN_OP_Size: case KILN_OP_Squeeze: case KILN_OP_Unsqueeze:
    case KILN_OP_Transpose: case KILN_OP_IsInf: case KILN_OP_IsNaN: case KILN_OP_BitCast: case KILN_OP_TensorScatter:
      return true;
    default:
      return false;
  }
}

kiln_status_t kiln_kernel_check_narrow_inputs(const kiln_kernel_ctx *ctx) {
  if (kiln_op_takes_narrow(ctx->node->op)) return NULL;
  for (int i = 0; i < ctx->n_inputs; i++) {
    const kiln_tensor *t = kiln_kernel_input(ctx, i);
    if (t && kiln_dtype_is_narrow(t->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d has dtype %s; %s does not take float8, float4, int4 or int2",
                        i, kiln_dtype_name(t->dtype), ctx->node->op_type);
  }
  return NULL;
}
