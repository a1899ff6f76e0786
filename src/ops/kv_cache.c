/* Ops of the "kv_cache" family: TensorScatter (opset 24), the functional
 * form of an attention KV-cache update. present = past with, for every
 * batch entry b, update's sequence written along `axis` from
 * write_indices[b] (0 when absent); mode "circular" wraps the positions
 * modulo the cache length, "linear" requires them to fit. Every dtype
 * (strings are duplicated, like every movement op). */
#include "ops/movement_internal.h"

static kiln_status_t tensor_scatter_attrs(const kiln_node *node, int rank, int *axis, bool *circular) {
  const char *mode = kiln_attr_string(node, "mode", "linear");
  if (!strcmp(mode, "circular"))
    *circular = true;
  else if (!strcmp(mode, "linear"))
    *circular = false;
  else
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute mode must be \"linear\" or \"circular\", got \"%s\"", mode);
  KILN_TRY(kiln_mv_norm_axis(kiln_attr_int(node, "axis", -2), rank, "attribute axis", axis));
  if (*axis == 0) return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis must not be 0 (the batch axis)");
  return NULL;
}

static kiln_status_t tensor_scatter_infer(kiln_infer_ctx *ctx) {
  const kiln_type *past = kiln_mv_in_type(ctx, 0);
  if (past && past->rank >= 0) {
    int axis;
    bool circular;
    if (past->rank < 2)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (past_cache) must have rank >= 2, got %d", past->rank);
    KILN_TRY(tensor_scatter_attrs(ctx->node, past->rank, &axis, &circular));
  }
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t tensor_scatter_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *past, *upd, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &past));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &upd));
  kiln_tensor *wi = kiln_kernel_input(ctx, 2);
  if (past->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (past_cache) must have rank >= 2, got %d", past->rank);
  int axis;
  bool circular;
  KILN_TRY(tensor_scatter_attrs(ctx->node, past->rank, &axis, &circular));
  if (upd->dtype != past->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (update) has dtype %s; expected %s like input 0 (past_cache)",
                      kiln_dtype_name(upd->dtype), kiln_dtype_name(past->dtype));
  bool fits = upd->rank == past->rank;
  for (int d = 0; fits && d < past->rank; d++)
    fits = d == axis ? upd->dims[d] <= past->dims[d] : upd->dims[d] == past->dims[d];
  if (!fits) {
    char a[256], b[256];
    return kiln_error(
        KILN_INVALID_ARGUMENT, "input 1 (update) has shape %s; expected input 0's %s but at most as long on axis %d",
        kiln_shape_str(upd->rank, upd->dims, a, sizeof a), kiln_shape_str(past->rank, past->dims, b, sizeof b), axis);
  }
  int64_t batch = past->dims[0];
  if (wi && (wi->dtype != KILN_DTYPE_I64 || wi->rank != 1 || wi->numel != batch))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (write_indices) must be int64 [%lld]", (long long)batch);
  int64_t max_len = past->dims[axis], seq = upd->dims[axis];
  int64_t inner = kiln_mv_prod(past->dims, axis + 1, past->rank);
  int64_t rows_per_batch = kiln_mv_prod(past->dims, 1, axis); /* the axes between batch and sequence */
  for (int64_t b = 0; wi && b < batch; b++) {
    int64_t start = ((const int64_t *)wi->data)[b];
    if (!circular && (start < 0 || start > max_len - seq))
      return kiln_error(KILN_OUT_OF_RANGE,
                        "input 2 (write_indices)[%lld] = %lld: %lld positions from it do not fit %lld (mode linear)",
                        (long long)b, (long long)start, (long long)seq, (long long)max_len);
  }
  if (past->dtype == KILN_DTYPE_STRING) /* zeroed: setting a string frees the old one */
    KILN_TRY(kiln_kernel_output_tensor(ctx, 0, past->dtype, past->rank, past->dims, &y));
  else
    KILN_TRY(kiln_kernel_output_uninit(ctx, 0, past->dtype, past->rank, past->dims, &y));
  KILN_TRY(kiln_mv_copy(y, 0, past, 0, past->numel));
  if (max_len == 0) return NULL;
  for (int64_t b = 0; b < batch; b++) {
    /* Circular positions wrap (a negative start too, as a modulo does). */
    int64_t start = wi ? ((const int64_t *)wi->data)[b] % max_len : 0;
    if (start < 0) start += max_len;
    for (int64_t r = 0; r < rows_per_batch; r++) {
      int64_t row = b * rows_per_batch + r;
      for (int64_t s = 0; s < seq; s++) {
        int64_t at = (start + s) % max_len; /* start + s < 2 * max_len */
        KILN_TRY(kiln_mv_copy(y, (row * max_len + at) * inner, upd, (row * seq + s) * inner, inner));
      }
    }
  }
  return NULL;
}

static const kiln_op_def kv_cache_ops[] = {
    {"", "TensorScatter", 2, 3, 1, 1, tensor_scatter_infer, tensor_scatter_kernel, 0, .id = KILN_OP_TensorScatter},
};

const kiln_op_def *kiln_ops_kv_cache(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(kv_cache_ops);
  return kv_cache_ops;
}
