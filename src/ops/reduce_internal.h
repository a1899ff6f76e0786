/* reduce_internal.h — private to the reduce family (reduce.c,
 * reduce_softmax.c, reduce_scan.c): shared helpers and the kernels and
 * inference rules the family table in reduce.c lists. */
#ifndef KILN_OPS_REDUCE_INTERNAL_H
#define KILN_OPS_REDUCE_INTERNAL_H

#include "ops/op.h"

/* Bit (1u << dtype) sets of accepted element types. */
#define KILN_DT_BIT(dt) (1u << (unsigned)(dt))
#define KILN_DT_FLOATS                                                                       \
  (KILN_DT_BIT(KILN_DTYPE_F16) | KILN_DT_BIT(KILN_DTYPE_BF16) | KILN_DT_BIT(KILN_DTYPE_F32) | \
   KILN_DT_BIT(KILN_DTYPE_F64))
#define KILN_DT_INTS                                                                        \
  (KILN_DT_BIT(KILN_DTYPE_U8) | KILN_DT_BIT(KILN_DTYPE_I8) | KILN_DT_BIT(KILN_DTYPE_U16) |  \
   KILN_DT_BIT(KILN_DTYPE_I16) | KILN_DT_BIT(KILN_DTYPE_U32) | KILN_DT_BIT(KILN_DTYPE_I32) | \
   KILN_DT_BIT(KILN_DTYPE_U64) | KILN_DT_BIT(KILN_DTYPE_I64))
#define KILN_DT_NUMERIC (KILN_DT_FLOATS | KILN_DT_INTS)

/* Error unless t's dtype is in `allowed`; `what` names the input ("input 0 (data)"). */
kiln_status_t kiln_reduce_check_dtype(const kiln_tensor *t, unsigned allowed, const char *what);
/* axis in [-rank, rank) into [0, rank); error names `what` otherwise. */
kiln_status_t kiln_reduce_norm_axis(int64_t axis, int rank, const char *what, int *out);
/* Reads a scalar (0-D or one-element) int32/int64 tensor. */
kiln_status_t kiln_reduce_read_scalar_int(const kiln_tensor *t, const char *what, int64_t *out);
/* Splits dims at axis: outer = prod(dims[0:axis]), n = dims[axis], inner = prod(dims[axis+1:]). */
void kiln_reduce_split_dims(const kiln_tensor *t, int axis, int64_t *outer, int64_t *n, int64_t *inner);

/* reduce_softmax.c */
kiln_status_t kiln_reduce_softmax_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_logsoftmax_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_hardmax_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_lpnorm_kernel(kiln_kernel_ctx *ctx);

/* reduce_scan.c */
kiln_status_t kiln_reduce_cumsum_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_cumprod_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_topk_kernel(kiln_kernel_ctx *ctx);
kiln_status_t kiln_reduce_topk_infer(kiln_infer_ctx *ctx);

#endif
