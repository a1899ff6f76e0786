/* Random generators: Bernoulli (15), RandomUniform(Like), RandomNormal(Like)
 * (1), Multinomial (7). All flagged KILN_OP_NONDETERMINISTIC.
 *
 * One splitmix64 stream per node execution. With a `seed` attribute the
 * stream starts from the seed's bits, so a seeded node repeats its output;
 * without one each execution takes the next seed of a process-wide atomic
 * counter (distinct streams, reproducible from process start). Values are
 * not meant to match any other implementation: the spec allows that. */
#include "ops/misc_internal.h"

#include <math.h>
#include <stdatomic.h>

typedef struct misc_rng {
  uint64_t state;
} misc_rng;

static uint64_t rng_next(misc_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rng_uniform(misc_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Standard normal (Box-Muller). */
static double rng_normal(misc_rng *r) {
  double u1 = 1.0 - rng_uniform(r); /* (0, 1]: log is finite */
  double u2 = rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void rng_init(misc_rng *r, const kiln_node *node) {
  static _Atomic uint64_t auto_seed = 0x5EEDull;
  const kiln_attr *a = kiln_node_attr(node, "seed");
  if (a && (a->type == KILN_ATTR_FLOAT || a->type == KILN_ATTR_INT)) {
    float f = a->type == KILN_ATTR_FLOAT ? a->f : (float)a->i;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    r->state = 0xC0FFEE0000000000ull ^ bits;
  } else {
    r->state = atomic_fetch_add(&auto_seed, 0x632BE59BD9B4E019ull);
  }
  rng_next(r); /* decorrelate nearby seeds */
}

/* The output dtype: attribute `dtype` if set, else dflt. */
static kiln_status_t random_dtype(const kiln_node *node, kiln_dtype dflt, kiln_dtype *out) {
  const kiln_attr *a = kiln_node_attr(node, "dtype");
  if (!a) {
    *out = dflt;
    return NULL;
  }
  if (a->type != KILN_ATTR_INT || !kiln_dtype_is_valid((int)a->i) || a->i == KILN_DTYPE_UNDEFINED ||
      kiln_dtype_is_narrow((kiln_dtype)a->i))
    return kiln_error(KILN_INVALID_MODEL, "attribute dtype: %lld is not a valid data type", (long long)a->i);
  *out = (kiln_dtype)a->i;
  return NULL;
}

static kiln_status_t require_float_out(kiln_dtype dt) {
  if (!kiln_dtype_is_float(dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "output dtype %s: expected a float type (set attribute dtype)",
                      kiln_dtype_name(dt));
  return NULL;
}

/* ---- RandomUniform / RandomNormal and their *Like forms ---------------------- */

typedef enum { DIST_UNIFORM, DIST_NORMAL } dist_kind;

static void fill_dist(const kiln_node *node, dist_kind kind, kiln_tensor *y) {
  misc_rng r;
  rng_init(&r, node);
  double a, b;
  if (kind == DIST_UNIFORM) {
    a = kiln_attr_float(node, "low", 0.0f);
    b = kiln_attr_float(node, "high", 1.0f);
  } else {
    a = kiln_attr_float(node, "mean", 0.0f);
    b = kiln_attr_float(node, "scale", 1.0f);
  }
  for (int64_t i = 0; i < y->numel; i++) {
    double v = kind == DIST_UNIFORM ? a + (b - a) * rng_uniform(&r) : a + b * rng_normal(&r);
    kiln_store_f64(y->data, y->dtype, i, v);
  }
}

static kiln_status_t random_shape_attr(const kiln_node *node, int *rank, int64_t *dims) {
  int n;
  const int64_t *shape = kiln_attr_ints(node, "shape", &n);
  if (!kiln_node_attr(node, "shape")) return kiln_error(KILN_INVALID_MODEL, "attribute shape is required");
  if (n > KILN_MAX_RANK)
    return kiln_error(KILN_UNSUPPORTED, "attribute shape: rank %d exceeds the maximum %d", n, KILN_MAX_RANK);
  for (int i = 0; i < n; i++) {
    if (shape[i] < 0)
      return kiln_error(KILN_INVALID_MODEL, "attribute shape: dim %d is %lld, expected >= 0", i, (long long)shape[i]);
    dims[i] = shape[i];
  }
  *rank = n;
  return NULL;
}

static kiln_status_t random_gen_kernel(kiln_kernel_ctx *ctx, dist_kind kind) {
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, KILN_DTYPE_F32, &dt));
  KILN_RETURN_IF_ERROR(require_float_out(dt), "attribute dtype");
  int rank;
  int64_t dims[KILN_MAX_RANK];
  KILN_TRY(random_shape_attr(ctx->node, &rank, dims));
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, rank, dims, &y));
  fill_dist(ctx->node, kind, y);
  return NULL;
}

static kiln_status_t random_gen_infer(kiln_infer_ctx *ctx) {
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, KILN_DTYPE_F32, &dt));
  KILN_RETURN_IF_ERROR(require_float_out(dt), "attribute dtype");
  int rank;
  int64_t dims[KILN_MAX_RANK];
  KILN_TRY(random_shape_attr(ctx->node, &rank, dims));
  kiln_infer_set(ctx, 0, dt, rank, dims);
  return NULL;
}

static kiln_status_t random_like_kernel(kiln_kernel_ctx *ctx, dist_kind kind) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, x->dtype, &dt));
  KILN_TRY(require_float_out(dt));
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, x->rank, x->dims, &y));
  fill_dist(ctx->node, kind, y);
  return NULL;
}

/* Output: input's shape, dtype from the attribute or the input. */
static kiln_status_t random_like_infer(kiln_infer_ctx *ctx, bool float_only) {
  const kiln_type *xt = ctx->inputs[0];
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, xt ? xt->dtype : KILN_DTYPE_UNDEFINED, &dt));
  if (float_only && dt != KILN_DTYPE_UNDEFINED) KILN_TRY(require_float_out(dt));
  kiln_infer_set(ctx, 0, dt, xt ? xt->rank : -1, xt ? xt->dims : NULL);
  return NULL;
}

kiln_status_t kiln_misc_random_uniform_kernel(kiln_kernel_ctx *ctx) { return random_gen_kernel(ctx, DIST_UNIFORM); }
kiln_status_t kiln_misc_random_uniform_infer(kiln_infer_ctx *ctx) { return random_gen_infer(ctx); }
kiln_status_t kiln_misc_random_normal_kernel(kiln_kernel_ctx *ctx) { return random_gen_kernel(ctx, DIST_NORMAL); }
kiln_status_t kiln_misc_random_normal_infer(kiln_infer_ctx *ctx) { return random_gen_infer(ctx); }
kiln_status_t kiln_misc_random_uniform_like_kernel(kiln_kernel_ctx *ctx) {
  return random_like_kernel(ctx, DIST_UNIFORM);
}
kiln_status_t kiln_misc_random_uniform_like_infer(kiln_infer_ctx *ctx) { return random_like_infer(ctx, true); }
kiln_status_t kiln_misc_random_normal_like_kernel(kiln_kernel_ctx *ctx) { return random_like_kernel(ctx, DIST_NORMAL); }
kiln_status_t kiln_misc_random_normal_like_infer(kiln_infer_ctx *ctx) { return random_like_infer(ctx, true); }

/* ---- Bernoulli ---------------------------------------------------------------- */

kiln_status_t kiln_misc_bernoulli_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (!kiln_dtype_is_float(x->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): dtype %s, expected a float type",
                      kiln_dtype_name(x->dtype));
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, x->dtype, &dt));
  if (dt == KILN_DTYPE_STRING || dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128)
    return kiln_error(KILN_INVALID_MODEL, "attribute dtype: %s is not a valid output type", kiln_dtype_name(dt));
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, x->rank, x->dims, &y));
  misc_rng r;
  rng_init(&r, ctx->node);
  for (int64_t i = 0; i < x->numel; i++) {
    double p = kiln_load_f64(x->data, x->dtype, i);
    if (!(p >= 0 && p <= 1))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): probability %g at %lld is not in [0, 1]", p,
                        (long long)i);
    kiln_store_f64(y->data, dt, i, rng_uniform(&r) < p ? 1.0 : 0.0);
  }
  return NULL;
}

kiln_status_t kiln_misc_bernoulli_infer(kiln_infer_ctx *ctx) { return random_like_infer(ctx, false); }

/* ---- Multinomial ----------------------------------------------------------------- */

kiln_status_t kiln_misc_multinomial_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (!kiln_dtype_is_float(x->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): dtype %s, expected a float type",
                      kiln_dtype_name(x->dtype));
  if (x->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): rank %d, expected 2 (batch_size, class_size)", x->rank);
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, KILN_DTYPE_I32, &dt));
  if (dt != KILN_DTYPE_I32 && dt != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_MODEL, "attribute dtype: %s, expected i32 or i64", kiln_dtype_name(dt));
  int64_t samples = kiln_attr_int(ctx->node, "sample_size", 1);
  if (samples < 0)
    return kiln_error(KILN_INVALID_MODEL, "attribute sample_size: %lld, expected >= 0", (long long)samples);
  int64_t batch = x->dims[0], classes = x->dims[1];
  int64_t odims[2] = {batch, samples};
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 2, odims, &y));
  if (y->numel == 0) return NULL;
  if (classes == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): class_size is 0, nothing to sample");
  double *cdf = malloc(sizeof(double) * (size_t)classes);
  if (!cdf) return KILN_OOM();
  misc_rng r;
  rng_init(&r, ctx->node);
  for (int64_t b = 0; b < batch; b++) {
    /* Input rows are unnormalized log-probabilities. */
    double mx = -INFINITY;
    for (int64_t c = 0; c < classes; c++) mx = fmax(mx, kiln_load_f64(x->data, x->dtype, b * classes + c));
    double total = 0;
    for (int64_t c = 0; c < classes; c++) {
      double l = kiln_load_f64(x->data, x->dtype, b * classes + c);
      total += isfinite(mx) ? exp(l - mx) : (l == mx ? 1.0 : 0.0);
      cdf[c] = total;
    }
    for (int64_t s = 0; s < samples; s++) {
      double u = rng_uniform(&r) * total;
      int64_t k = 0;
      while (k < classes - 1 && !(u < cdf[k])) k++;
      kiln_store_i64(y->data, dt, b * samples + s, k);
    }
  }
  free(cdf);
  return NULL;
}

kiln_status_t kiln_misc_multinomial_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0];
  kiln_dtype dt;
  KILN_TRY(random_dtype(ctx->node, KILN_DTYPE_I32, &dt));
  int64_t samples = kiln_attr_int(ctx->node, "sample_size", 1);
  int64_t dims[2] = {xt && xt->rank == 2 ? xt->dims[0] : -1, samples >= 0 ? samples : -1};
  kiln_infer_set(ctx, 0, dt, 2, dims);
  return NULL;
}
