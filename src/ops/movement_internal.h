/* movement_internal.h — shared helpers of the movement op family
 * (movement.c, movement_shape.c, movement_layout.c, movement_index.c).
 *
 * Movement kernels are dtype-agnostic: they move whole elements with
 * kiln_mv_copy, which memcpy's fixed-size elements and duplicates STRING
 * elements (a string tensor owns each char*, so they are never shared).
 * Private to the family; not part of any other layer's interface.
 */
#ifndef KILN_OPS_MOVEMENT_INTERNAL_H
#define KILN_OPS_MOVEMENT_INTERNAL_H

#include "ops/op.h"

/* Copies n consecutive elements src[si..si+n) to dst[di..di+n) (same dtype). */
kiln_status_t kiln_mv_copy(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t n);

/* Normalizes axis into [0, rank) (negative counts from the back); `what`
 * names the attribute or input in the error. */
kiln_status_t kiln_mv_norm_axis(int64_t axis, int rank, const char *what, int *out);

/* Checks index value v against a dimension of size dim: accepts [-dim, dim)
 * and returns the wrapped, non-negative index. The error (KILN_OUT_OF_RANGE)
 * reads "<what>: value v out of range [-dim, dim)". */
kiln_status_t kiln_mv_wrap_index(int64_t v, int64_t dim, const char *what, int64_t *out);

/* Reads a 1-D (or scalar) integer tensor (any integer dtype) into a
 * malloc'd int64 array the caller frees (*out may be NULL when *n == 0). */
kiln_status_t kiln_mv_read_ints(const kiln_tensor *t, const char *what, int64_t **out, int64_t *n);

/* Row-major strides (in elements). */
void kiln_mv_strides(int rank, const int64_t *dims, int64_t *strides);

/* Advances coord to the next row-major position inside dims. */
static inline void kiln_mv_next_coord(int rank, const int64_t *dims, int64_t *coord) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++coord[d] < dims[d]) return;
    coord[d] = 0;
  }
}

/* Element i of a STRING tensor ("" for NULL). */
static inline const char *kiln_mv_str(const kiln_tensor *t, int64_t i) {
  const char *s = ((char *const *)t->data)[i];
  return s ? s : "";
}

/* Is element i nonzero / true (strings: non-empty)? */
bool kiln_mv_is_nonzero(const kiln_tensor *t, int64_t i);

/* Product of dims[lo..hi); -1 if any is unknown (negative). */
int64_t kiln_mv_prod(const int64_t *dims, int lo, int hi);

/* ---- inference helpers ---------------------------------------------- */

/* Input i's type if it is a tensor type, else NULL. */
const kiln_type *kiln_mv_in_type(const kiln_infer_ctx *ctx, int i);
/* Does the node have input i (not an absent optional)? */
bool kiln_mv_in_present(const kiln_infer_ctx *ctx, int i);
/* Input i's dtype, UNDEFINED if unknown. */
kiln_dtype kiln_mv_in_dtype(const kiln_infer_ctx *ctx, int i);
/* Input i's rank, -1 if unknown. */
int kiln_mv_in_rank(const kiln_infer_ctx *ctx, int i);
/* Constant value of input i, or NULL. */
const kiln_tensor *kiln_mv_const(const kiln_infer_ctx *ctx, int i);
/* Reads a constant integer tensor of at most `cap` elements into buf;
 * false if t is NULL, not an integer tensor, or too long. */
bool kiln_mv_const_ints(const kiln_tensor *t, int64_t *buf, int cap, int *n);
/* Sets output i to a tensor of dtype with unknown rank. */
void kiln_mv_infer_unknown_rank(kiln_infer_ctx *ctx, int i, kiln_dtype dtype);

/* ---- the ops (infer + reference kernel) ------------------------------ */

#define KILN_MV_OPS(X)                                                                    \
  X(Concat) X(Compress) X(DepthToSpace) X(SpaceToDepth) X(Expand) X(EyeLike) X(Flatten)   \
  X(Gather) X(GatherElements) X(GatherND) X(Pad) X(Range) X(Reshape) X(ReverseSequence)   \
  X(Scatter) X(ScatterElements) X(ScatterND) X(Shape) X(Size) X(Slice) X(Split)           \
  X(Squeeze) X(Unsqueeze) X(Tile) X(Transpose) X(Trilu) X(OneHot) X(ConstantOfShape)      \
  X(Constant) X(NonZero) X(Unique)

#define KILN_MV_DECLARE(name)                                   \
  kiln_status_t kiln_mv_infer_##name(kiln_infer_ctx *ctx);      \
  kiln_status_t kiln_mv_kernel_##name(kiln_kernel_ctx *ctx);
KILN_MV_OPS(KILN_MV_DECLARE)
#undef KILN_MV_DECLARE

#endif
