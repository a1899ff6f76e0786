/* Ops of the "misc" family: resampling (Resize, Upsample, GridSample,
 * RoiAlign), detection (NonMaxSuppression), text (StringNormalizer,
 * TfIdfVectorizer) and random generators. The kernels live in misc_*.c. */
#include "ops/misc_internal.h"
#include "ops/gradient.h"

#include <math.h>

void kiln_misc_store_rounded(void *data, kiln_dtype dt, int64_t i, double v) {
  if (kiln_dtype_is_float(dt) || dt == KILN_DTYPE_BOOL) {
    kiln_store_f64(data, dt, i, v);
    return;
  }
  double lo, hi;
  switch (dt) {
    case KILN_DTYPE_U8: lo = 0; hi = 255; break;
    case KILN_DTYPE_I8: lo = -128; hi = 127; break;
    case KILN_DTYPE_U16: lo = 0; hi = 65535; break;
    case KILN_DTYPE_I16: lo = -32768; hi = 32767; break;
    case KILN_DTYPE_U32: lo = 0; hi = 4294967295.0; break;
    case KILN_DTYPE_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case KILN_DTYPE_U64: lo = 0; hi = 18446744073709551615.0; break;
    default: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
  }
  if (isnan(v)) v = 0;
  v = nearbyint(v);
  if (v < lo) v = lo;
  if (v > hi) v = hi;
  kiln_store_f64(data, dt, i, v); /* in range now: the store's saturation never wraps */
}

#define MISC_OP(type, name, min_in, max_in, flags) \
  {"", #type, min_in, max_in, 1, 1, kiln_misc_##name##_infer, kiln_misc_##name##_kernel, flags, .id = KILN_OP_##type}

static const kiln_op_def misc_ops[] = {
    /* with misc_grad.c's rule */
    {"", "Resize", 1, 4, 1, 1, kiln_misc_resize_infer, kiln_misc_resize_kernel, 0, .id = KILN_OP_Resize,
     .gradient = kiln_grad_resize},
    {"", "Upsample", 1, 2, 1, 1, kiln_misc_upsample_infer, kiln_misc_upsample_kernel, 0, .id = KILN_OP_Upsample,
     .gradient = kiln_grad_resize},
    /* A reduction over its taps, like kiln.Resample (codegen/lower.c). */
    {"", "GridSample", 2, 2, 1, 1, kiln_misc_grid_sample_infer, kiln_misc_grid_sample_kernel, 0,
     .id = KILN_OP_GridSample, .op_class = KILN_OPCLASS_REDUCTION},
    MISC_OP(RoiAlign, roi_align, 3, 3, 0),
    MISC_OP(NonMaxSuppression, nms, 2, 5, 0),
    MISC_OP(StringNormalizer, string_normalizer, 1, 1, 0),
    MISC_OP(TfIdfVectorizer, tfidf, 1, 1, 0),
    MISC_OP(Bernoulli, bernoulli, 1, 1, KILN_OP_NONDETERMINISTIC),
    MISC_OP(RandomUniformLike, random_uniform_like, 1, 1, KILN_OP_NONDETERMINISTIC),
    MISC_OP(RandomNormalLike, random_normal_like, 1, 1, KILN_OP_NONDETERMINISTIC),
    MISC_OP(RandomUniform, random_uniform, 0, 0, KILN_OP_NONDETERMINISTIC),
    MISC_OP(RandomNormal, random_normal, 0, 0, KILN_OP_NONDETERMINISTIC),
    MISC_OP(Multinomial, multinomial, 1, 1, KILN_OP_NONDETERMINISTIC),
};

const kiln_op_def *kiln_ops_misc(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(misc_ops);
  return misc_ops;
}
