/* nn_internal.h — private to the "nn" op family (ops/nn*.c).
 *
 * The family is split by job: nn_conv.c (Conv, ConvTranspose), nn_pool.c
 * (pooling), nn_norm.c (normalizations), nn_matmul.c (Gemm, MatMul,
 * Einsum, Det), nn_loss.c (Dropout, NLL and softmax cross-entropy losses).
 * Each file exports its kernels and inference rules; ops/nn.c lists them
 * all in the one table kiln_ops_nn() returns.
 *
 * The helpers below keep the reference kernels plain: float tensors are
 * read into double arrays, computed in double, and rounded once on store.
 */
#ifndef KILN_OPS_NN_INTERNAL_H
#define KILN_OPS_NN_INTERNAL_H

#include "ops/op.h"
#include "ops/window.h" /* sliding windows (Conv, pools) */

/* ---- dtype checks and bulk element access ------------------------------ */

/* f16, bf16, f32 or f64; otherwise an error naming the input. */
kiln_status_t nn_require_float(const kiln_tensor *t, int index, const char *name);
/* Reads every element of t as double into a new array (*out malloc'd, freed
 * by the caller; a 1-element array when t is empty so *out is never NULL). */
kiln_status_t nn_load_all_f64(const kiln_tensor *t, double **out);
/* Writes v[0..t->numel) into t, rounding to t's dtype. */
void nn_store_all_f64(kiln_tensor *t, const double *v);

/* Strides (in elements) with which a tensor of shape (rank, dims) is read
 * when broadcast unidirectionally to shape (out_rank, out_dims): 0 on
 * broadcast axes. Error (naming `what`) when it does not broadcast. */
kiln_status_t nn_broadcast_strides(int rank, const int64_t *dims, int out_rank, const int64_t *out_dims,
                                   const char *what, int64_t *strides);
/* Row-major strides of a shape. */
void nn_row_major_strides(int rank, const int64_t *dims, int64_t *strides);
/* Advances a multi-index over dims (last axis fastest); false after the last. */
bool nn_next_index(int rank, const int64_t *dims, int64_t *idx);

/* ---- kernels and inference rules, by file -------------------------------- */

#define NN_OP(name)                                     \
  kiln_status_t nn_##name##_kernel(kiln_kernel_ctx *ctx); \
  kiln_status_t nn_##name##_infer(kiln_infer_ctx *ctx);

/* nn_conv.c */
NN_OP(conv)
NN_OP(conv_transpose)
/* nn_pool.c */
NN_OP(average_pool)
NN_OP(max_pool)
NN_OP(max_unpool)
NN_OP(max_pool_argmax)
NN_OP(max_pool_grad)
NN_OP(lp_pool)
NN_OP(global_average_pool)
NN_OP(global_max_pool)
NN_OP(global_lp_pool)
/* nn_norm.c */
NN_OP(batch_norm)
NN_OP(instance_norm)
NN_OP(layer_norm)
NN_OP(lrn)
NN_OP(mvn)
/* nn_matmul.c */
NN_OP(gemm)
NN_OP(matmul)
NN_OP(einsum)
NN_OP(det)
/* nn_loss.c */
NN_OP(dropout)
NN_OP(nll_loss)
NN_OP(sce_loss)

#undef NN_OP

#endif
