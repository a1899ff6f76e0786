/* misc_internal.h — private to the "misc" op family (ops/misc*.c).
 *
 * The family is split by theme: misc_resize.c (Resize, Upsample),
 * misc_vision.c (GridSample, RoiAlign, NonMaxSuppression), misc_text.c
 * (StringNormalizer, TfIdfVectorizer), misc_random.c (Bernoulli, Random*,
 * Multinomial). ops/misc.c holds the one kiln_ops_misc table. */
#ifndef KILN_OPS_MISC_INTERNAL_H
#define KILN_OPS_MISC_INTERNAL_H

#include "ops/op.h"

#define KILN_MISC_OP(name)                                   \
  kiln_status_t kiln_misc_##name##_infer(kiln_infer_ctx *ctx); \
  kiln_status_t kiln_misc_##name##_kernel(kiln_kernel_ctx *ctx);

KILN_MISC_OP(resize)
KILN_MISC_OP(upsample)
KILN_MISC_OP(grid_sample)
KILN_MISC_OP(roi_align)
KILN_MISC_OP(nms)
KILN_MISC_OP(string_normalizer)
KILN_MISC_OP(tfidf)
KILN_MISC_OP(bernoulli)
KILN_MISC_OP(random_uniform_like)
KILN_MISC_OP(random_normal_like)
KILN_MISC_OP(random_uniform)
KILN_MISC_OP(random_normal)
KILN_MISC_OP(multinomial)

#undef KILN_MISC_OP

/* Stores v into element i of an integer or float buffer: floats as is,
 * integers rounded to nearest (ties to even) and saturated to the type's
 * range (interpolating integer images must not wrap 255.6 to 0). */
void kiln_misc_store_rounded(void *data, kiln_dtype dt, int64_t i, double v);

#endif
