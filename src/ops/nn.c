/* Ops of the "nn" family: the table, and helpers shared by ops/nn_*.c
 * (see ops/nn_internal.h for who implements what). */
#include "ops/nn_internal.h"
#include "ops/gradient.h"


/* ---- dtype checks and bulk element access ------------------------------ */

kiln_status_t nn_require_float(const kiln_tensor *t, int index, const char *name) {
  if (!kiln_dtype_is_float(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s not supported, expected a float type", index,
                      name, kiln_dtype_name(t->dtype));
  return NULL;
}

kiln_status_t nn_load_all_f64(const kiln_tensor *t, double **out) {
  size_t n = t->numel > 0 ? (size_t)t->numel : 1;
  double *v = malloc(n * sizeof *v);
  if (!v) return KILN_OOM();
  v[0] = 0;
  for (int64_t i = 0; i < t->numel; i++) v[i] = kiln_load_f64(t->data, t->dtype, i);
  *out = v;
  return NULL;
}

void nn_store_all_f64(kiln_tensor *t, const double *v) {
  for (int64_t i = 0; i < t->numel; i++) kiln_store_f64(t->data, t->dtype, i, v[i]);
}

void nn_row_major_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

kiln_status_t nn_broadcast_strides(int rank, const int64_t *dims, int out_rank, const int64_t *out_dims,
                                   const char *what, int64_t *strides) {
  char a[256], b[256];
  if (rank > out_rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: shape %s has more axes than the target shape %s", what,
                      kiln_shape_str(rank, dims, a, sizeof a), kiln_shape_str(out_rank, out_dims, b, sizeof b));
  int64_t own[KILN_MAX_RANK];
  nn_row_major_strides(rank, dims, own);
  for (int i = 0; i < out_rank; i++) {
    int j = i - (out_rank - rank);
    if (j < 0) {
      strides[i] = 0;
    } else if (dims[j] == out_dims[i]) {
      strides[i] = dims[j] == 1 ? 0 : own[j];
    } else if (dims[j] == 1) {
      strides[i] = 0;
    } else {
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: shape %s does not broadcast to %s", what,
                        kiln_shape_str(rank, dims, a, sizeof a), kiln_shape_str(out_rank, out_dims, b, sizeof b));
    }
  }
  return NULL;
}

bool nn_next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

/* ---- the table ----------------------------------------------------------- */

#define NN_DEF(type, name, min_in, max_in, min_out, max_out, flags, cls, flops_fn)                              \
  {"", #type, min_in, max_in, min_out, max_out, nn_##name##_infer, nn_##name##_kernel, flags, .id = KILN_OP_##type, \
   .op_class = cls, .flops = flops_fn}
/* the same with a gradient rule (ops/gradient.h) */
#define NN_DEF_G(type, name, min_in, max_in, min_out, max_out, flags, cls, flops_fn, grad)                      \
  {"", #type, min_in, max_in, min_out, max_out, nn_##name##_infer, nn_##name##_kernel, flags, .id = KILN_OP_##type, \
   .op_class = cls, .flops = flops_fn, .gradient = grad}

static const kiln_op_def nn_ops[] = {
    NN_DEF_G(Conv, conv, 2, 3, 1, 1, 0, KILN_OPCLASS_CONTRACTION, kiln_flops_conv, kiln_grad_conv),
    NN_DEF_G(ConvTranspose, conv_transpose, 2, 3, 1, 1, 0, KILN_OPCLASS_CONTRACTION, kiln_flops_conv_transpose, kiln_grad_conv_transpose),
    NN_DEF_G(AveragePool, average_pool, 1, 1, 1, 1, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL, kiln_grad_pool),
    NN_DEF_G(MaxPool, max_pool, 1, 1, 1, 2, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL, kiln_grad_pool),
    NN_DEF(MaxUnpool, max_unpool, 2, 3, 1, 1, 0, KILN_OPCLASS_NONE, NULL),
    /* MaxPool's gradient (nn_pool.c) */
    {"kiln", "MaxPoolArgmax", 1, 1, 1, 1, nn_max_pool_argmax_infer, nn_max_pool_argmax_kernel, KILN_OP_REREADS_INPUT,
     .id = KILN_OP_kiln_MaxPoolArgmax, .op_class = KILN_OPCLASS_REDUCTION},
    {"kiln", "MaxPoolGrad", 3, 3, 1, 1, nn_max_pool_grad_infer, nn_max_pool_grad_kernel, 0, .id = KILN_OP_kiln_MaxPoolGrad,
     .op_class = KILN_OPCLASS_REDUCTION},
    NN_DEF(LpPool, lp_pool, 1, 1, 1, 1, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL),
    NN_DEF_G(GlobalAveragePool, global_average_pool, 1, 1, 1, 1, 0, KILN_OPCLASS_REDUCTION, NULL, kiln_grad_pool),
    NN_DEF_G(GlobalMaxPool, global_max_pool, 1, 1, 1, 1, 0, KILN_OPCLASS_REDUCTION, NULL, kiln_grad_pool),
    NN_DEF(GlobalLpPool, global_lp_pool, 1, 1, 1, 1, 0, KILN_OPCLASS_REDUCTION, NULL),
    NN_DEF_G(BatchNormalization, batch_norm, 5, 5, 1, 5, 0, KILN_OPCLASS_NONE, NULL, kiln_grad_norm),
    NN_DEF(InstanceNormalization, instance_norm, 3, 3, 1, 1, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL),
    NN_DEF_G(LayerNormalization, layer_norm, 2, 3, 1, 3, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL, kiln_grad_norm),
    NN_DEF(LRN, lrn, 1, 1, 1, 1, KILN_OP_REREADS_INPUT, KILN_OPCLASS_REDUCTION, NULL),
    NN_DEF(MeanVarianceNormalization, mvn, 1, 1, 1, 1, 0, KILN_OPCLASS_NONE, NULL),
    NN_DEF_G(Gemm, gemm, 2, 3, 1, 1, 0, KILN_OPCLASS_CONTRACTION, kiln_flops_matmul, kiln_grad_gemm),
    NN_DEF_G(MatMul, matmul, 2, 2, 1, 1, 0, KILN_OPCLASS_CONTRACTION, kiln_flops_matmul, kiln_grad_matmul),
    NN_DEF(Einsum, einsum, 1, -1, 1, 1, 0, KILN_OPCLASS_CONTRACTION, NULL),
    NN_DEF(Det, det, 1, 1, 1, 1, 0, KILN_OPCLASS_NONE, NULL),
    /* Random only in training mode; inference Dropout is the identity. */
    NN_DEF_G(Dropout, dropout, 1, 3, 1, 2, KILN_OP_NONDETERMINISTIC, KILN_OPCLASS_ELEMENTWISE, NULL, kiln_grad_dropout),
    NN_DEF_G(NegativeLogLikelihoodLoss, nll_loss, 2, 3, 1, 1, 0, KILN_OPCLASS_NONE, NULL, kiln_grad_loss),
    NN_DEF_G(SoftmaxCrossEntropyLoss, sce_loss, 2, 3, 1, 2, 0, KILN_OPCLASS_NONE, NULL, kiln_grad_loss),
};

const kiln_op_def *kiln_ops_nn(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(nn_ops);
  return nn_ops;
}
