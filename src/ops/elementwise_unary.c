/* Unary elementwise ops: math functions and activations.
 *
 * Each op is a scalar function on double (floats; integer inputs of ops
 * that have no integer function, e.g. Erf, go through double and are
 * truncated back like numpy's astype) and optionally on int64 / uint64
 * for integer inputs (Abs, Neg, Sign, Relu, Not). */
#include "ops/elementwise.h"

#include <math.h>

typedef struct unary_def {
  unsigned allowed; /* dtype mask */
  bool bool_out;    /* output is bool (IsNaN, IsInf) */
  double (*f)(double x, const ew_params *p);
  int64_t (*i)(int64_t x, const ew_params *p);
  uint64_t (*u)(uint64_t x, const ew_params *p);
} unary_def;

static kiln_status_t run_unary(kiln_kernel_ctx *ctx, const unary_def *d, const ew_params *p) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(ew_check_dtype(x, 0, d->allowed));
  kiln_dtype odt = d->bool_out ? KILN_DTYPE_BOOL : x->dtype;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, odt, x->rank, x->dims, &y));
  kiln_dtype dt = x->dtype;
  bool via_double = kiln_dtype_is_float(dt) || (!d->i && !d->u);
  for (int64_t k = 0; k < x->numel; k++) {
    if (via_double) {
      ew_store_f64(y->data, odt, k, d->f(kiln_load_f64(x->data, dt, k), p));
    } else if (ew_is_unsigned(dt)) {
      uint64_t v = kiln_load_u64(x->data, dt, k);
      uint64_t r = d->u ? d->u(v, p) : (uint64_t)d->i((int64_t)v, p);
      kiln_store_i64(y->data, odt, k, (int64_t)r);
    } else {
      int64_t v = kiln_load_i64(x->data, dt, k);
      int64_t r = d->i ? d->i(v, p) : (int64_t)d->u((uint64_t)v, p);
      kiln_store_i64(y->data, odt, k, r);
    }
  }
  return NULL;
}

static kiln_status_t infer_unary(kiln_infer_ctx *ctx, bool bool_out) {
  KILN_TRY(kiln_infer_same_as_input(ctx, 0, 0));
  if (bool_out && ctx->n_outputs > 0 && ctx->outputs[0].kind == KILN_TYPE_TENSOR)
    ctx->outputs[0].dtype = KILN_DTYPE_BOOL;
  return NULL;
}

/* ---- scalar functions ------------------------------------------------------ */

/* Two's-complement negation without signed-overflow UB (INT64_MIN stays). */
static int64_t neg_wrap(int64_t x) { return (int64_t)(0u - (uint64_t)x); }

static double f_abs(double x, const ew_params *p) { return fabs(x); }
static int64_t i_abs(int64_t x, const ew_params *p) { return x < 0 ? neg_wrap(x) : x; }
static uint64_t u_identity(uint64_t x, const ew_params *p) { return x; }
static double f_acos(double x, const ew_params *p) { return acos(x); }
static double f_acosh(double x, const ew_params *p) { return acosh(x); }
static double f_asin(double x, const ew_params *p) { return asin(x); }
static double f_asinh(double x, const ew_params *p) { return asinh(x); }
static double f_atan(double x, const ew_params *p) { return atan(x); }
static double f_atanh(double x, const ew_params *p) { return atanh(x); }
static double f_ceil(double x, const ew_params *p) { return ceil(x); }
static double f_celu(double x, const ew_params *p) {
  return fmax(0.0, x) + fmin(0.0, p->alpha * expm1(x / p->alpha));
}
static double f_cos(double x, const ew_params *p) { return cos(x); }
static double f_cosh(double x, const ew_params *p) { return cosh(x); }
static double f_elu(double x, const ew_params *p) { return x < 0 ? p->alpha * expm1(x) : x; }
static double f_erf(double x, const ew_params *p) { return erf(x); }
static double f_exp(double x, const ew_params *p) { return exp(x); }
static double f_floor(double x, const ew_params *p) { return floor(x); }
static double f_hardsigmoid(double x, const ew_params *p) { return fmax(0.0, fmin(1.0, p->alpha * x + p->beta)); }
static double f_hardswish(double x, const ew_params *p) { return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5)); }
static double f_isinf(double x, const ew_params *p) {
  return (isinf(x) && ((x > 0 && p->flag_b) || (x < 0 && p->flag_a))) ? 1.0 : 0.0;
}
static double f_isnan(double x, const ew_params *p) { return isnan(x) ? 1.0 : 0.0; }
static double f_leakyrelu(double x, const ew_params *p) { return x < 0 ? p->alpha * x : x; }
static double f_log(double x, const ew_params *p) { return log(x); }
static double f_neg(double x, const ew_params *p) { return -x; }
static int64_t i_neg(int64_t x, const ew_params *p) { return neg_wrap(x); }
static uint64_t u_neg(uint64_t x, const ew_params *p) { return 0u - x; }
static double f_not(double x, const ew_params *p) { return x == 0.0 ? 1.0 : 0.0; }
static uint64_t u_not(uint64_t x, const ew_params *p) { return x == 0; }
static double f_reciprocal(double x, const ew_params *p) { return 1.0 / x; }
static double f_relu(double x, const ew_params *p) { return x < 0 ? 0.0 : x; }
static int64_t i_relu(int64_t x, const ew_params *p) { return x < 0 ? 0 : x; }
static double f_round(double x, const ew_params *p) { return nearbyint(x); } /* half to even */
static double f_selu(double x, const ew_params *p) {
  return x <= 0 ? p->gamma * (p->alpha * exp(x) - p->alpha) : p->gamma * x;
}
static double f_shrink(double x, const ew_params *p) {
  return x < -p->lambd ? x + p->bias : x > p->lambd ? x - p->bias : 0.0;
}
static double f_sigmoid(double x, const ew_params *p) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}
static double f_sign(double x, const ew_params *p) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* 0, -0, nan */ }
static int64_t i_sign(int64_t x, const ew_params *p) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
static uint64_t u_sign(uint64_t x, const ew_params *p) { return x > 0; }
static double f_sin(double x, const ew_params *p) { return sin(x); }
static double f_sinh(double x, const ew_params *p) { return sinh(x); }
static double f_softplus(double x, const ew_params *p) {
  return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); /* log(1 + e^x) without overflow */
}
static double f_softsign(double x, const ew_params *p) { return x / (1.0 + fabs(x)); }
static double f_sqrt(double x, const ew_params *p) { return sqrt(x); }
static double f_tan(double x, const ew_params *p) { return tan(x); }
static double f_tanh(double x, const ew_params *p) { return tanh(x); }
static double f_thresholdedrelu(double x, const ew_params *p) { return x > p->alpha ? x : 0.0; }

/* ---- the ops ------------------------------------------------------------------ */

/* An op without attributes: kernel and infer from its def. */
#define PLAIN_UNARY(name, allowed_, f_, i_, u_)                                        \
  static const unary_def def_##name = {.allowed = (allowed_), .f = f_, .i = i_, .u = u_}; \
  kiln_status_t ew_kernel_##name(kiln_kernel_ctx *ctx) {                               \
    ew_params p = {0};                                                                  \
    return run_unary(ctx, &def_##name, &p);                                             \
  }                                                                                     \
  kiln_status_t ew_infer_##name(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

PLAIN_UNARY(Abs, EW_NUMERIC, f_abs, i_abs, u_identity)
PLAIN_UNARY(Acos, EW_FLOATS, f_acos, NULL, NULL)
PLAIN_UNARY(Acosh, EW_FLOATS, f_acosh, NULL, NULL)
PLAIN_UNARY(Asin, EW_FLOATS, f_asin, NULL, NULL)
PLAIN_UNARY(Asinh, EW_FLOATS, f_asinh, NULL, NULL)
PLAIN_UNARY(Atan, EW_FLOATS, f_atan, NULL, NULL)
PLAIN_UNARY(Atanh, EW_FLOATS, f_atanh, NULL, NULL)
PLAIN_UNARY(Ceil, EW_FLOATS, f_ceil, NULL, NULL)
PLAIN_UNARY(Cos, EW_FLOATS, f_cos, NULL, NULL)
PLAIN_UNARY(Cosh, EW_FLOATS, f_cosh, NULL, NULL)
PLAIN_UNARY(Erf, EW_NUMERIC, f_erf, NULL, NULL)
PLAIN_UNARY(Exp, EW_FLOATS, f_exp, NULL, NULL)
PLAIN_UNARY(Floor, EW_FLOATS, f_floor, NULL, NULL)
PLAIN_UNARY(HardSwish, EW_FLOATS, f_hardswish, NULL, NULL)
PLAIN_UNARY(Log, EW_FLOATS, f_log, NULL, NULL)
PLAIN_UNARY(Neg, EW_FLOATS | EW_SINTS, f_neg, i_neg, u_neg)
PLAIN_UNARY(Not, EW_BOOL, f_not, NULL, u_not)
PLAIN_UNARY(Reciprocal, EW_FLOATS, f_reciprocal, NULL, NULL)
PLAIN_UNARY(Relu, EW_FLOATS | EW_SINTS, f_relu, i_relu, NULL)
PLAIN_UNARY(Round, EW_FLOATS, f_round, NULL, NULL)
PLAIN_UNARY(Sigmoid, EW_FLOATS, f_sigmoid, NULL, NULL)
PLAIN_UNARY(Sign, EW_NUMERIC, f_sign, i_sign, u_sign)
PLAIN_UNARY(Sin, EW_FLOATS, f_sin, NULL, NULL)
PLAIN_UNARY(Sinh, EW_FLOATS, f_sinh, NULL, NULL)
PLAIN_UNARY(Softplus, EW_FLOATS, f_softplus, NULL, NULL)
PLAIN_UNARY(Softsign, EW_FLOATS, f_softsign, NULL, NULL)
PLAIN_UNARY(Sqrt, EW_FLOATS, f_sqrt, NULL, NULL)
PLAIN_UNARY(Tan, EW_FLOATS, f_tan, NULL, NULL)
PLAIN_UNARY(Tanh, EW_FLOATS, f_tanh, NULL, NULL)

static const unary_def def_Celu = {.allowed = EW_FLOATS, .f = f_celu};
kiln_status_t ew_kernel_Celu(kiln_kernel_ctx *ctx) {
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", 1.0f)};
  if (p.alpha == 0) return kiln_error(KILN_INVALID_ARGUMENT, "attribute alpha must not be 0");
  return run_unary(ctx, &def_Celu, &p);
}
kiln_status_t ew_infer_Celu(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_Elu = {.allowed = EW_FLOATS, .f = f_elu};
kiln_status_t ew_kernel_Elu(kiln_kernel_ctx *ctx) {
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", 1.0f)};
  return run_unary(ctx, &def_Elu, &p);
}
kiln_status_t ew_infer_Elu(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_HardSigmoid = {.allowed = EW_FLOATS, .f = f_hardsigmoid};
kiln_status_t ew_kernel_HardSigmoid(kiln_kernel_ctx *ctx) {
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", 0.2f), .beta = kiln_attr_float(ctx->node, "beta", 0.5f)};
  return run_unary(ctx, &def_HardSigmoid, &p);
}
kiln_status_t ew_infer_HardSigmoid(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_IsInf = {.allowed = EW_FLOATS | EW_FLOAT8, /* float8: opset 20 */ .bool_out = true, .f = f_isinf};
kiln_status_t ew_kernel_IsInf(kiln_kernel_ctx *ctx) {
  ew_params p = {.flag_a = kiln_attr_int(ctx->node, "detect_negative", 1),
                 .flag_b = kiln_attr_int(ctx->node, "detect_positive", 1)};
  return run_unary(ctx, &def_IsInf, &p);
}
kiln_status_t ew_infer_IsInf(kiln_infer_ctx *ctx) { return infer_unary(ctx, true); }

static const unary_def def_IsNaN = {.allowed = EW_FLOATS | EW_FLOAT8, .bool_out = true, .f = f_isnan};
kiln_status_t ew_kernel_IsNaN(kiln_kernel_ctx *ctx) {
  ew_params p = {0};
  return run_unary(ctx, &def_IsNaN, &p);
}
kiln_status_t ew_infer_IsNaN(kiln_infer_ctx *ctx) { return infer_unary(ctx, true); }

static const unary_def def_LeakyRelu = {.allowed = EW_FLOATS, .f = f_leakyrelu};
kiln_status_t ew_kernel_LeakyRelu(kiln_kernel_ctx *ctx) {
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", 0.01f)};
  return run_unary(ctx, &def_LeakyRelu, &p);
}
kiln_status_t ew_infer_LeakyRelu(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_Selu = {.allowed = EW_FLOATS, .f = f_selu};
kiln_status_t ew_kernel_Selu(kiln_kernel_ctx *ctx) {
  /* Selu-1 had rounded defaults; Selu-6 the float nearest the exact constants. */
  bool v1 = ctx->opset > 0 && ctx->opset < 6;
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", v1 ? 1.6732f : 1.67326319217681884765625f),
                 .gamma = kiln_attr_float(ctx->node, "gamma", v1 ? 1.0507f : 1.05070102214813232421875f)};
  return run_unary(ctx, &def_Selu, &p);
}
kiln_status_t ew_infer_Selu(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_Shrink = {.allowed = EW_NUMERIC, .f = f_shrink};
kiln_status_t ew_kernel_Shrink(kiln_kernel_ctx *ctx) {
  ew_params p = {.lambd = kiln_attr_float(ctx->node, "lambd", 0.5f), .bias = kiln_attr_float(ctx->node, "bias", 0.0f)};
  return run_unary(ctx, &def_Shrink, &p);
}
kiln_status_t ew_infer_Shrink(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }

static const unary_def def_ThresholdedRelu = {.allowed = EW_FLOATS, .f = f_thresholdedrelu};
kiln_status_t ew_kernel_ThresholdedRelu(kiln_kernel_ctx *ctx) {
  ew_params p = {.alpha = kiln_attr_float(ctx->node, "alpha", 1.0f)};
  return run_unary(ctx, &def_ThresholdedRelu, &p);
}
kiln_status_t ew_infer_ThresholdedRelu(kiln_infer_ctx *ctx) { return infer_unary(ctx, false); }
