/* Ops of the "quant" family: linear (de)quantization and the integer
 * convolution / matrix products.
 *
 *   QuantizeLinear        y = saturate(round_half_even(x / scale) + zero_point)
 *   DequantizeLinear      y = (x - zero_point) * scale
 *   DynamicQuantizeLinear scale and zero point from min(0, x) .. max(0, x), uint8
 *   ConvInteger, MatMulInteger   int32 sums of (a - a_zp) * (b - b_zp)
 *   QLinearConv, QLinearMatMul   the same sums requantized with
 *                                a_scale * b_scale / y_scale
 *
 * Scales/zero points are per tensor (one element) or per axis / per row /
 * per column as each op allows. Division by the scale happens in float32
 * for float32 input, as numpy does with float32 operands.
 *
 * Requantizing (QLinearConv, QLinearMatMul) is float32 throughout, as ONNX
 * Runtime's CPU kernels do it (MlasRequantizeOutput; ORT forms the output
 * scale as a float): m = (a_scale * b_scale) / y_scale, two float ops left
 * to right (each scale converted to float first: float16 ones from opset
 * 21), then y = saturate(round_half_even((float)(sum + bias) * m) + y_zp),
 * kiln_qlinear_requant below. The spec leaves the precision open (ONNX's
 * own Python reference multiplies the int32 sums by the f32 multiplier in
 * float64); float32 is what the models' producer, ORT, computes, and what
 * a compiled f32 kernel can reproduce bit for bit: passes/decompose.c
 * rewrites both ops into ConvInteger / MatMulInteger, Cast, Mul by the
 * constant m and QuantizeLinear(scale 1), exact against this code.
 *
 * Convolution and matrix products are written here (direct loops),
 * independent of the float ops. */
#include "ops/op.h"
#include "ops/quant.h"
#include "ops/window.h"

#include <math.h>

/* ---- small helpers -------------------------------------------------------- */

static bool is_q8(kiln_dtype dt) { return dt == KILN_DTYPE_U8 || dt == KILN_DTYPE_I8; }

static int64_t q_min(kiln_dtype dt) { return dt == KILN_DTYPE_I8 ? -128 : dt == KILN_DTYPE_U8 ? 0 : INT32_MIN; }
static int64_t q_max(kiln_dtype dt) { return dt == KILN_DTYPE_I8 ? 127 : dt == KILN_DTYPE_U8 ? 255 : INT32_MAX; }

/* Already-rounded value plus zero point, clamped to dt's range (NaN -> zp). */
static int64_t q_saturate(double rounded, int64_t zp, kiln_dtype dt) {
  if (isnan(rounded)) return zp;
  double v = rounded + (double)zp;
  if (v < (double)q_min(dt)) return q_min(dt);
  if (v > (double)q_max(dt)) return q_max(dt);
  return (int64_t)v;
}

/* The requantized value of an integer sum (bias included) with multiplier m:
 * float32 product, rounded half to even, plus the zero point, saturated. */
static int64_t requant(int64_t acc, float m, int64_t zp, kiln_dtype dt) {
  float v = (float)acc * m;
  return q_saturate(nearbyintf(v), zp, dt);
}

static kiln_status_t expect_dtype(const kiln_tensor *t, int idx, const char *name, kiln_dtype want) {
  if (t->dtype != want)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected %s, got %s", idx, name, kiln_dtype_name(want),
                      kiln_dtype_name(t->dtype));
  return NULL;
}

static kiln_status_t expect_q8(const kiln_tensor *t, int idx, const char *name) {
  if (!is_q8(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected uint8 or int8, got %s", idx, name,
                      kiln_dtype_name(t->dtype));
  return NULL;
}

static kiln_status_t expect_scalar(const kiln_tensor *t, int idx, const char *name) {
  if (t->numel != 1 || t->rank > 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a scalar (one element), got %lld elements", idx,
                      name, (long long)t->numel);
  return NULL;
}

/* ---- QuantizeLinear / DequantizeLinear -------------------------------------- */

/* How a scale (and its zero point) maps onto x: per tensor, along `axis`,
 * or in blocks of `block` along axis (opset 21+: the scale has x's shape
 * with ceil(dim / block) at axis). x element i = (outer, a, in) with a the
 * coordinate along axis and `inner` the product of the dims after it. */
typedef struct qaxis {
  int64_t count; /* 1 for per-tensor; else x's dim along axis */
  int64_t inner; /* product of x dims after axis */
  int64_t block; /* 0 unless blocked */
  int64_t nblocks; /* scale dim along axis when blocked */
} qaxis;

static kiln_status_t qaxis_make(const kiln_kernel_ctx *ctx, const kiln_tensor *x, const kiln_tensor *scale,
                                const kiln_tensor *zp, qaxis *out) {
  memset(out, 0, sizeof *out);
  out->count = 1;
  out->inner = 1;
  int64_t block = ctx->opset >= 21 ? kiln_attr_int(ctx->node, "block_size", 0) : 0;
  if (block < 0) return kiln_error(KILN_INVALID_ARGUMENT, "attribute block_size: %lld is negative", (long long)block);
  char s1[256], s2[256];
  if (scale->numel == 1 && scale->rank <= 1 && !block) {
    /* per tensor */
  } else {
    if (ctx->opset < 13)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (scale): must be a scalar before opset 13, got %lld elements",
                        (long long)scale->numel);
    int64_t axis = kiln_attr_int(ctx->node, "axis", 1);
    if (axis < -x->rank || axis >= x->rank)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis: %lld out of range for input rank %d", (long long)axis,
                        x->rank);
    if (axis < 0) axis += x->rank;
    if (block) {
      bool ok = scale->rank == x->rank;
      for (int d = 0; ok && d < x->rank; d++)
        ok = d == axis ? scale->dims[d] == x->dims[d] / block + (x->dims[d] % block != 0)
                     : scale->dims[d] == x->dims[d];
      if (!ok)
        return kiln_error(KILN_INVALID_ARGUMENT,
                          "input 1 (scale): shape %s does not block input 0's %s by %lld along axis %lld",
                          kiln_shape_str(scale->rank, scale->dims, s1, sizeof s1),
                          kiln_shape_str(x->rank, x->dims, s2, sizeof s2), (long long)block, (long long)axis);
      out->block = block;
      out->nblocks = scale->dims[axis];
    } else {
      if (scale->rank != 1)
        return kiln_error(KILN_INVALID_ARGUMENT,
                          "input 1 (scale): expected a scalar or 1-D tensor (or block_size for blocks), got rank %d",
                          scale->rank);
      if (scale->dims[0] != x->dims[axis])
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (scale): %lld elements, but input 0 has %lld along axis %lld",
                          (long long)scale->dims[0], (long long)x->dims[axis], (long long)axis);
    }
    out->count = x->dims[axis];
    for (int d = (int)axis + 1; d < x->rank; d++) out->inner *= x->dims[d];
  }
  if (zp && (zp->numel != scale->numel || (block && zp->rank != scale->rank)))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (zero_point): shape %s, but the scale has %s",
                      kiln_shape_str(zp->rank, zp->dims, s1, sizeof s1),
                      kiln_shape_str(scale->rank, scale->dims, s2, sizeof s2));
  return NULL;
}

static int64_t qaxis_index(const qaxis *q, int64_t i) {
  if (q->count == 1 && !q->block) return 0;
  int64_t a = (i / q->inner) % q->count;
  if (!q->block) return a;
  int64_t outer = i / (q->inner * q->count);
  return (outer * q->nblocks + a / q->block) * q->inner + i % q->inner;
}

/* Quantized output types (int ones clamp to their range; float8/float4 convert). */
static bool is_quant_type(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_U8: case KILN_DTYPE_I8: case KILN_DTYPE_U16: case KILN_DTYPE_I16: case KILN_DTYPE_U4:
    case KILN_DTYPE_I4: case KILN_DTYPE_U2: case KILN_DTYPE_I2: case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ:
    case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ: case KILN_DTYPE_F4E2M1:
      return true;
    default:
      return false;
  }
}

/* x_scale / y_scale: float, float16, bfloat16 (and float8e8m0 from opset 25). */
static kiln_status_t expect_scale(const kiln_tensor *t, int idx, const char *name, int opset) {
  kiln_dtype dt = t->dtype;
  if (dt == KILN_DTYPE_F32 || (opset >= 19 && (dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16)) ||
      (opset >= 25 && dt == KILN_DTYPE_F8E8M0))
    return NULL;
  return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected float%s, got %s", idx, name,
                    opset >= 25 ? ", float16, bfloat16 or float8e8m0" : opset >= 19 ? ", float16 or bfloat16" : "",
                    kiln_dtype_name(dt));
}

/* A float8 zero point must be 0 (ONNX: float8 quantization has none). */
static kiln_status_t check_float8_zero_point(const kiln_tensor *zp, int idx, const char *name) {
  if (!zp || !kiln_dtype_is_narrow_float(zp->dtype) || zp->dtype == KILN_DTYPE_F4E2M1) return NULL;
  for (int64_t i = 0; i < zp->numel; i++) {
    uint8_t c = ((const uint8_t *)zp->data)[i];
    if (kiln_narrow_is_nan(c, zp->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): element %lld is a %s NaN (code 0x%02x); a float8 zero "
                        "point must be 0", idx, name, (long long)i, kiln_dtype_name(zp->dtype), c);
    if (kiln_narrow_to_f32(c, zp->dtype) != 0.0f)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): element %lld is %g; a float8 zero point must be 0", idx,
                        name, (long long)i, (double)kiln_narrow_to_f32(c, zp->dtype));
  }
  return NULL;
}

/* The output dtype: the zero point's, else output_dtype (opset 21+), else uint8. */
static kiln_status_t quantize_out_dtype(const kiln_node *node, int opset, kiln_dtype zp_dt, kiln_dtype *out) {
  int64_t od = opset >= 21 ? kiln_attr_int(node, "output_dtype", 0) : 0;
  if (od && !kiln_dtype_is_valid((int)od))
    return kiln_error(KILN_INVALID_MODEL, "attribute output_dtype=%lld is not a data type", (long long)od);
  if (od && zp_dt && od != zp_dt)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute output_dtype=%s differs from input 2 (y_zero_point)'s %s",
                      kiln_dtype_name((kiln_dtype)od), kiln_dtype_name(zp_dt));
  *out = zp_dt ? zp_dt : od ? (kiln_dtype)od : KILN_DTYPE_U8;
  return NULL;
}

/* The dtype x / scale is computed in: 'precision' (opset 23+) if set, else
 * numpy's promotion of the two (int32 x: double). */
static kiln_dtype quantize_division_dtype(const kiln_node *node, int opset, kiln_dtype x, kiln_dtype s) {
  int64_t p = opset >= 23 ? kiln_attr_int(node, "precision", 0) : 0;
  if (p == KILN_DTYPE_F16 || p == KILN_DTYPE_BF16 || p == KILN_DTYPE_F32 || p == KILN_DTYPE_F64) return (kiln_dtype)p;
  if (x == KILN_DTYPE_F64 || x == KILN_DTYPE_I32 || s == KILN_DTYPE_F64) return KILN_DTYPE_F64;
  if (x == s && (x == KILN_DTYPE_F16 || x == KILN_DTYPE_BF16)) return x;
  return KILN_DTYPE_F32;
}

static kiln_status_t quantize_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *scale, *zp = kiln_kernel_input(ctx, 2);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &scale));
  if (!kiln_dtype_is_float(x->dtype) && x->dtype != KILN_DTYPE_I32)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (x): expected float or int32, got %s", kiln_dtype_name(x->dtype));
  KILN_TRY(expect_scale(scale, 1, "y_scale", ctx->opset));
  kiln_dtype odt;
  KILN_TRY(quantize_out_dtype(ctx->node, ctx->opset, zp ? zp->dtype : KILN_DTYPE_UNDEFINED, &odt));
  if (!is_quant_type(odt) || (ctx->opset < 19 && !is_q8(odt)))
    return kiln_error(KILN_INVALID_ARGUMENT, "%s %s is not a quantized type of QuantizeLinear-%d",
                      zp ? "input 2 (y_zero_point):" : "output dtype", kiln_dtype_name(odt), ctx->opset);
  KILN_TRY(check_float8_zero_point(zp, 2, "y_zero_point"));
  qaxis q;
  KILN_TRY(qaxis_make(ctx, x, scale, zp, &q));
  kiln_dtype div = quantize_division_dtype(ctx->node, ctx->opset, x->dtype, scale->dtype);
  bool saturate = kiln_attr_int(ctx->node, "saturate", 1) != 0;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, odt, x->rank, x->dims, &y));
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t p = qaxis_index(&q, i);
    double xv = kiln_load_f64(x->data, x->dtype, i), sv = kiln_load_f64(scale->data, scale->dtype, p), v;
    switch (div) {
      case KILN_DTYPE_F64: v = xv / sv; break;
      case KILN_DTYPE_F16: v = kiln_f16_to_f32(kiln_f32_to_f16(kiln_f16_to_f32(kiln_f64_to_f16(xv)) /
                                                               kiln_f16_to_f32(kiln_f64_to_f16(sv))));
        break;
      case KILN_DTYPE_BF16: v = kiln_bf16_to_f32(kiln_f32_to_bf16(kiln_bf16_to_f32(kiln_f64_to_bf16(xv)) /
                                                                  kiln_bf16_to_f32(kiln_f64_to_bf16(sv))));
        break;
      default: v = (float)xv / (float)sv; break;
    }
    if (kiln_dtype_is_narrow_float(odt)) {
      if (zp && odt == KILN_DTYPE_F4E2M1) v += kiln_load_f64(zp->data, odt, p);
      ((uint8_t *)y->data)[i] = kiln_f64_to_narrow_float(v, odt, odt == KILN_DTYPE_F4E2M1 || saturate);
    } else {
      int64_t z = zp ? kiln_load_i64(zp->data, zp->dtype, p) : 0, lo, hi;
      kiln_dtype_int_range(odt, &lo, &hi);
      double r = nearbyint(v);
      int64_t qv = isnan(r) ? z : r + (double)z < (double)lo ? lo : r + (double)z > (double)hi ? hi : (int64_t)(r + z);
      kiln_store_i64(y->data, odt, i, qv);
    }
  }
  return NULL;
}

static kiln_status_t quantize_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  const kiln_type *zp = ctx->n_inputs > 2 ? ctx->inputs[2] : NULL;
  kiln_dtype odt;
  KILN_TRY(quantize_out_dtype(ctx->node, ctx->opset, zp ? zp->dtype : KILN_DTYPE_UNDEFINED, &odt));
  if (x) kiln_infer_set(ctx, 0, odt, x->rank, x->dims);
  return NULL;
}

/* yr[j] = (x[base + j] - z) * sp for j < run, 16 at a time where it can
 * (a loop the compiler vectorizes at -O2), then the rest. */
#define DEQUANTIZE_RUN(T)                                                                                  \
  do {                                                                                                     \
    const T *xr = (const T *)x->data + base;                                                               \
    int64_t j = 0;                                                                                         \
    for (; j + 16 <= run; j += 16) {                                                                       \
      int32_t t[16];                                                                                       \
      for (int l = 0; l < 16; l++) t[l] = xr[j + l];                                                       \
      for (int l = 0; l < 16; l++) yr[j + l] = ((float)t[l] - z) * sp;                                     \
    }                                                                                                      \
    for (; j < run; j++) yr[j] = ((float)xr[j] - z) * sp;                                                  \
  } while (0)

static bool is_dequant_input(kiln_dtype dt, int opset) {
  if (is_q8(dt) || dt == KILN_DTYPE_I32) return true;
  if (opset >= 19 && kiln_dtype_is_narrow_float(dt) && dt != KILN_DTYPE_F4E2M1 && dt != KILN_DTYPE_F8E8M0) return true;
  if (opset >= 21 && (dt == KILN_DTYPE_U16 || dt == KILN_DTYPE_I16 || dt == KILN_DTYPE_U4 || dt == KILN_DTYPE_I4))
    return true;
  if (opset >= 23 && dt == KILN_DTYPE_F4E2M1) return true;
  return opset >= 25 && (dt == KILN_DTYPE_U2 || dt == KILN_DTYPE_I2);
}

/* Output dtype: output_dtype (opset 23+), else the scale's. */
static kiln_status_t dequantize_out_dtype(const kiln_node *node, int opset, kiln_dtype scale_dt, kiln_dtype *out) {
  int64_t od = opset >= 23 ? kiln_attr_int(node, "output_dtype", 0) : 0;
  kiln_dtype dt = od ? (kiln_dtype)od : scale_dt;
  if (od || scale_dt) {
    if (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_F16 && dt != KILN_DTYPE_BF16)
      return kiln_error(KILN_INVALID_ARGUMENT, "output dtype %s (%s) is not float, float16 or bfloat16",
                        od ? kiln_dtype_name(dt) : kiln_dtype_name(scale_dt), od ? "output_dtype" : "the scale's");
  }
  *out = dt;
  return NULL;
}

static kiln_status_t dequantize_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *scale, *zp = kiln_kernel_input(ctx, 2);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &scale));
  if (!is_dequant_input(x->dtype, ctx->opset))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (x): %s is not a quantized type of DequantizeLinear-%d",
                      kiln_dtype_name(x->dtype), ctx->opset);
  KILN_TRY(expect_scale(scale, 1, "x_scale", ctx->opset));
  if (zp) KILN_TRY(expect_dtype(zp, 2, "x_zero_point", x->dtype));
  KILN_TRY(check_float8_zero_point(zp, 2, "x_zero_point"));
  /* float8 and float4 have no zero point (a float8 one was checked to be 0). */
  if (zp && kiln_dtype_is_narrow_float(x->dtype)) zp = NULL;
  qaxis q;
  KILN_TRY(qaxis_make(ctx, x, scale, zp, &q));
  kiln_dtype odt;
  KILN_TRY(dequantize_out_dtype(ctx->node, ctx->opset, scale->dtype, &odt));
  kiln_tensor *y;
  KILN_TRY(kiln_tensor_new_uninit(odt, x->rank, x->dims, &y));
  KILN_TRY(kiln_kernel_set_output(ctx, 0, y));
  /* Other than int8/uint8/int32 -> float with a float scale: element by
   * element, in float32 as the reference computes, rounded to the output. */
  if (odt != KILN_DTYPE_F32 || scale->dtype != KILN_DTYPE_F32 ||
      !(is_q8(x->dtype) || x->dtype == KILN_DTYPE_I32)) {
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t p = qaxis_index(&q, i);
      float z = zp ? (float)kiln_load_f64(zp->data, zp->dtype, p) : 0.0f;
      float v = ((float)kiln_load_f64(x->data, x->dtype, i) - z) * (float)kiln_load_f64(scale->data, scale->dtype, p);
      kiln_store_f64(y->data, odt, i, v);
    }
    return NULL;
  }
  const float *s = scale->data;
  float *yd = y->data;
  if (q.block) {
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t p = qaxis_index(&q, i);
      float z = zp ? (float)kiln_load_i64(zp->data, zp->dtype, p) : 0.0f;
      yd[i] = ((float)kiln_load_i64(x->data, x->dtype, i) - z) * s[p];
    }
    return NULL;
  }
  /* Parameters per the last axis (a MatMul weight [K, N] per output
   * column): rows of `count`, each element its own parameter, the zero
   * points read once (one element per run was a call per weight). */
  if (q.count > 1 && q.inner == 1 && (x->dtype == KILN_DTYPE_I8 || x->dtype == KILN_DTYPE_U8)) {
    float *zf = malloc((size_t)q.count * sizeof *zf);
    if (!zf) return KILN_OOM();
    for (int64_t p = 0; p < q.count; p++) zf[p] = zp ? (float)kiln_load_i64(zp->data, zp->dtype, p) : 0.0f;
    for (int64_t base = 0; base < x->numel; base += q.count) {
      float *yr = yd + base;
      if (x->dtype == KILN_DTYPE_I8) {
        const int8_t *xr = (const int8_t *)x->data + base;
        for (int64_t p = 0; p < q.count; p++) yr[p] = ((float)xr[p] - zf[p]) * s[p];
      } else {
        const uint8_t *xr = (const uint8_t *)x->data + base;
        for (int64_t p = 0; p < q.count; p++) yr[p] = ((float)xr[p] - zf[p]) * s[p];
      }
    }
    free(zf);
    return NULL;
  }
  /* Runs of `inner` elements share a parameter: the weights of a whole
   * quantized model are dequantized here when it is folded. */
  int64_t run = q.count == 1 ? x->numel : q.inner;
  for (int64_t base = 0, r = 0; run > 0 && base < x->numel; base += run, r++) {
    int64_t p = q.count == 1 ? 0 : r % q.count;
    float z = zp ? (float)kiln_load_i64(zp->data, zp->dtype, p) : 0.0f, sp = s[p];
    float *yr = yd + base;
    switch (x->dtype) {
      case KILN_DTYPE_I8: DEQUANTIZE_RUN(int8_t); break;
      case KILN_DTYPE_U8: DEQUANTIZE_RUN(uint8_t); break;
      default: DEQUANTIZE_RUN(int32_t); break;
    }
  }
  return NULL;
}

static kiln_status_t dequantize_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0], *scale = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  kiln_dtype odt;
  KILN_TRY(dequantize_out_dtype(ctx->node, ctx->opset, scale ? scale->dtype : KILN_DTYPE_UNDEFINED, &odt));
  if (x) kiln_infer_set(ctx, 0, odt ? odt : KILN_DTYPE_F32, x->rank, x->dims);
  return NULL;
}

/* ---- DynamicQuantizeLinear ------------------------------------------------ */

static kiln_status_t dynamic_quantize_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(expect_dtype(x, 0, "x", KILN_DTYPE_F32));
  const float *xd = x->data;
  float lo = 0.0f, hi = 0.0f; /* the range always includes 0 */
  for (int64_t i = 0; i < x->numel; i++) {
    if (isnan(xd[i])) continue;
    if (xd[i] < lo) lo = xd[i];
    if (xd[i] > hi) hi = xd[i];
  }
  float scale = (hi - lo) / 255.0f;
  int64_t zp = 0;
  if (scale > 0 && isfinite(scale)) {
    double izp = nearbyintf((0.0f - lo) / scale);
    zp = izp < 0 ? 0 : izp > 255 ? 255 : (int64_t)izp;
  }
  kiln_tensor *y, *ys, *yz;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_U8, x->rank, x->dims, &y));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 1, KILN_DTYPE_F32, 0, NULL, &ys));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 2, KILN_DTYPE_U8, 0, NULL, &yz));
  *(float *)ys->data = scale;
  *(uint8_t *)yz->data = (uint8_t)zp;
  uint8_t *yd = y->data;
  for (int64_t i = 0; i < x->numel; i++)
    yd[i] = scale > 0 ? (uint8_t)q_saturate(nearbyintf(xd[i] / scale), zp, KILN_DTYPE_U8) : (uint8_t)zp;
  return NULL;
}

static kiln_status_t dynamic_quantize_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (x) kiln_infer_set(ctx, 0, KILN_DTYPE_U8, x->rank, x->dims);
  kiln_infer_set(ctx, 1, KILN_DTYPE_F32, 0, NULL);
  kiln_infer_set(ctx, 2, KILN_DTYPE_U8, 0, NULL);
  return NULL;
}

/* ---- direct integer convolution ------------------------------------------ */

typedef struct conv_geom {
  int nsp;                /* spatial dims */
  int64_t n, c, m, group; /* batch, in channels, out channels, groups */
  int64_t in[KILN_MAX_RANK], k[KILN_MAX_RANK], out[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK], dil[KILN_MAX_RANK], pad_begin[KILN_MAX_RANK];
} conv_geom;

/* Fills g from x/w shapes (x [N,C,D1..], w [M,C/group,K1..]) and the Conv
 * attributes. Unknown dims (-1, at inference) give unknown output dims. */
static kiln_status_t conv_geom_make(const kiln_node *node, int xrank, const int64_t *xd, int wrank, const int64_t *wd,
                                    conv_geom *g) {
  memset(g, 0, sizeof *g);
  if (xrank < 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (x): expected rank >= 3 [N, C, D1, ...], got %d", xrank);
  if (wrank != xrank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input w: rank %d differs from x's rank %d", wrank, xrank);
  g->nsp = xrank - 2;
  g->n = xd[0];
  g->c = xd[1];
  g->m = wd[0];
  g->group = kiln_attr_int(node, "group", 1);
  if (g->group <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "attribute group: must be positive");
  if (g->c >= 0 && wd[1] >= 0 && g->c != wd[1] * g->group)
    return kiln_error(KILN_INVALID_ARGUMENT, "x has %lld channels but w expects %lld x group %lld", (long long)g->c,
                      (long long)wd[1], (long long)g->group);
  if (g->m >= 0 && g->m % g->group != 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "w has %lld output channels, not divisible by group %lld", (long long)g->m,
                      (long long)g->group);
  int n_ks, n_st, n_dl, n_pd;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &n_ks);
  const int64_t *st = kiln_attr_ints(node, "strides", &n_st);
  const int64_t *dl = kiln_attr_ints(node, "dilations", &n_dl);
  const int64_t *pd = kiln_attr_ints(node, "pads", &n_pd);
  if (ks && n_ks != g->nsp) return kiln_error(KILN_INVALID_ARGUMENT, "attribute kernel_shape: needs %d values", g->nsp);
  if (st && n_st != g->nsp) return kiln_error(KILN_INVALID_ARGUMENT, "attribute strides: needs %d values", g->nsp);
  if (dl && n_dl != g->nsp) return kiln_error(KILN_INVALID_ARGUMENT, "attribute dilations: needs %d values", g->nsp);
  if (pd && n_pd != 2 * g->nsp) return kiln_error(KILN_INVALID_ARGUMENT, "attribute pads: needs %d values", 2 * g->nsp);
  const char *auto_pad = kiln_attr_string(node, "auto_pad", "NOTSET");
  bool same_upper = !strcmp(auto_pad, "SAME_UPPER"), same_lower = !strcmp(auto_pad, "SAME_LOWER");
  bool valid = !strcmp(auto_pad, "VALID");
  if (!same_upper && !same_lower && !valid && strcmp(auto_pad, "NOTSET") && auto_pad[0])
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute auto_pad: unknown value '%s'", auto_pad);
  for (int i = 0; i < g->nsp; i++) {
    g->in[i] = xd[2 + i];
    g->k[i] = wd[2 + i];
    if (ks && g->k[i] >= 0 && ks[i] != g->k[i])
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute kernel_shape[%d] = %lld but w has %lld", i, (long long)ks[i],
                        (long long)g->k[i]);
    if (ks && g->k[i] < 0) g->k[i] = ks[i];
    g->stride[i] = st ? st[i] : 1;
    g->dil[i] = dl ? dl[i] : 1;
    if (g->stride[i] <= 0 || g->dil[i] <= 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "strides and dilations must be positive (dim %d)", i);
    if (g->in[i] < 0 || g->k[i] < 0) {
      g->out[i] = -1;
      continue;
    }
    int64_t ext; /* dilated kernel extent */
    if (g->k[i] < 1 || !kiln_mul_i64(g->k[i] - 1, g->dil[i], &ext) || ext > INT32_MAX || g->stride[i] > INT32_MAX)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "kernel dim %d: size %lld with dilation %lld (stride %lld) is out of range", i,
                        (long long)g->k[i], (long long)g->dil[i], (long long)g->stride[i]);
    ext += 1;
    int64_t pb = 0, pe = 0;
    if (same_upper || same_lower) {
      int64_t o = (g->in[i] + g->stride[i] - 1) / g->stride[i];
      int64_t total = KILN_MAX(0, (o - 1) * g->stride[i] + ext - g->in[i]);
      pb = same_upper ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (!valid && pd) {
      pb = pd[i];
      pe = pd[i + g->nsp];
      if (pb < 0 || pe < 0 || pb > INT32_MAX || pe > INT32_MAX)
        return kiln_error(KILN_INVALID_ARGUMENT, "attribute pads: value out of range in spatial dim %d", i);
    }
    g->pad_begin[i] = pb;
    int64_t span = g->in[i] + pb + pe - ext;
    if (span < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "kernel extent %lld exceeds padded input %lld in spatial dim %d",
                        (long long)ext, (long long)(g->in[i] + pb + pe), i);
    g->out[i] = span / g->stride[i] + 1;
  }
  return NULL;
}

kiln_status_t kiln_conv_integer_window(const kiln_node *node, int xrank, const int64_t *xd, int wrank,
                                       const int64_t *wd, kiln_window *w) {
  conv_geom g;
  KILN_TRY(conv_geom_make(node, xrank, xd, wrank, wd, &g));
  memset(w, 0, sizeof *w);
  w->n = g.nsp;
  for (int i = 0; i < g.nsp; i++) {
    w->kernel[i] = g.k[i];
    w->stride[i] = g.stride[i];
    w->dilation[i] = g.dil[i];
    w->pad_begin[i] = g.pad_begin[i];
    w->in[i] = g.in[i];
    w->out[i] = g.out[i];
  }
  return NULL;
}

static void conv_out_dims(const conv_geom *g, int64_t *dims) {
  dims[0] = g->n;
  dims[1] = g->m;
  for (int i = 0; i < g->nsp; i++) dims[2 + i] = g->out[i];
}

/* acc[n, m, out...] = sum over c in m's group and kernel taps of
 * (x - x_zp) * (w - w_zp[m]); taps in the padding contribute nothing (they
 * hold the zero point). acc is int64, numel of the output. */
static void conv_integer(const conv_geom *g, const kiln_tensor *x, int64_t x_zp, const kiln_tensor *w,
                         const kiln_tensor *w_zp, int64_t *acc) {
  int64_t in_sp = 1, out_sp = 1, k_sp = 1;
  for (int i = 0; i < g->nsp; i++) {
    in_sp *= g->in[i];
    out_sp *= g->out[i];
    k_sp *= g->k[i];
  }
  int64_t cg = g->c / g->group, mg = g->m / g->group;
  int64_t oc[KILN_MAX_RANK], kc[KILN_MAX_RANK];
  for (int64_t n = 0; n < g->n; n++) {
    for (int64_t m = 0; m < g->m; m++) {
      int64_t grp = m / mg;
      int64_t wz = !w_zp ? 0 : kiln_load_i64(w_zp->data, w_zp->dtype, w_zp->numel == 1 ? 0 : m);
      for (int64_t op = 0; op < out_sp; op++) {
        int64_t rem = op;
        for (int i = g->nsp - 1; i >= 0; i--) {
          oc[i] = rem % g->out[i];
          rem /= g->out[i];
        }
        int64_t sum = 0;
        for (int64_t kp = 0; kp < k_sp; kp++) {
          rem = kp;
          for (int i = g->nsp - 1; i >= 0; i--) {
            kc[i] = rem % g->k[i];
            rem /= g->k[i];
          }
          int64_t ioff = 0;
          bool inside = true;
          for (int i = 0; i < g->nsp; i++) {
            int64_t pos = oc[i] * g->stride[i] - g->pad_begin[i] + kc[i] * g->dil[i];
            if (pos < 0 || pos >= g->in[i]) {
              inside = false;
              break;
            }
            ioff = ioff * g->in[i] + pos;
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cg; c++) {
            int64_t xi = (n * g->c + grp * cg + c) * in_sp + ioff;
            int64_t wi = (m * cg + c) * k_sp + kp;
            sum += (kiln_load_i64(x->data, x->dtype, xi) - x_zp) * (kiln_load_i64(w->data, w->dtype, wi) - wz);
          }
        }
        acc[(n * g->m + m) * out_sp + op] = sum;
      }
    }
  }
}

/* w zero point (or scale): one element, or one per output channel. */
static kiln_status_t check_per_channel(const kiln_tensor *t, int idx, const char *name, int64_t m) {
  if (t->numel == 1 && t->rank <= 1) return NULL;
  if (t->rank != 1 || t->dims[0] != m)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a scalar or %lld values (one per output channel)",
                      idx, name, (long long)m);
  return NULL;
}

static kiln_status_t conv_integer_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *w, *xz = kiln_kernel_input(ctx, 2), *wz = kiln_kernel_input(ctx, 3);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &w));
  KILN_TRY(expect_q8(x, 0, "x"));
  KILN_TRY(expect_q8(w, 1, "w"));
  conv_geom g;
  KILN_TRY(conv_geom_make(ctx->node, x->rank, x->dims, w->rank, w->dims, &g));
  int64_t x_zp = 0;
  if (xz) {
    KILN_TRY(expect_dtype(xz, 2, "x_zero_point", x->dtype));
    KILN_TRY(expect_scalar(xz, 2, "x_zero_point"));
    x_zp = kiln_load_i64(xz->data, xz->dtype, 0);
  }
  if (wz) {
    KILN_TRY(expect_dtype(wz, 3, "w_zero_point", w->dtype));
    KILN_TRY(check_per_channel(wz, 3, "w_zero_point", g.m));
  }
  int64_t od[KILN_MAX_RANK];
  conv_out_dims(&g, od);
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I32, x->rank, od, &y));
  int64_t *acc = malloc(sizeof(int64_t) * (size_t)KILN_MAX(y->numel, 1));
  if (!acc) return KILN_OOM();
  conv_integer(&g, x, x_zp, w, wz, acc);
  int32_t *yd = y->data;
  for (int64_t i = 0; i < y->numel; i++) yd[i] = (int32_t)acc[i];
  free(acc);
  return NULL;
}

static kiln_status_t conv_infer_common(kiln_infer_ctx *ctx, int x_in, int w_in, kiln_dtype dt) {
  const kiln_type *x = ctx->inputs[x_in], *w = ctx->n_inputs > w_in ? ctx->inputs[w_in] : NULL;
  if (!x || !w || x->rank < 0 || w->rank < 0) {
    kiln_infer_set(ctx, 0, dt, x && x->rank >= 0 ? x->rank : -1, NULL); /* dims unknown */
    return NULL;
  }
  conv_geom g;
  KILN_TRY(conv_geom_make(ctx->node, x->rank, x->dims, w->rank, w->dims, &g));
  int64_t od[KILN_MAX_RANK];
  conv_out_dims(&g, od);
  kiln_infer_set(ctx, 0, dt, x->rank, od);
  return NULL;
}

static kiln_status_t conv_integer_infer(kiln_infer_ctx *ctx) { return conv_infer_common(ctx, 0, 1, KILN_DTYPE_I32); }

static kiln_status_t qlinear_conv_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *in[9];
  static const char *names[9] = {
      "x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"};
  for (int i = 0; i < 8; i++) KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
  in[8] = kiln_kernel_input(ctx, 8);
  kiln_tensor *x = in[0], *w = in[3], *b = in[8];
  KILN_TRY(expect_q8(x, 0, names[0]));
  KILN_TRY(expect_q8(w, 3, names[3]));
  KILN_TRY(expect_q8(in[7], 7, names[7]));
  KILN_TRY(expect_dtype(in[2], 2, names[2], x->dtype));
  KILN_TRY(expect_dtype(in[5], 5, names[5], w->dtype));
  static const int scale_inputs[3] = {1, 4, 6};
  for (int j = 0; j < 3; j++)
    KILN_TRY(expect_dtype(in[scale_inputs[j]], scale_inputs[j], names[scale_inputs[j]], KILN_DTYPE_F32));
  KILN_TRY(expect_scalar(in[1], 1, names[1]));
  KILN_TRY(expect_scalar(in[2], 2, names[2]));
  KILN_TRY(expect_scalar(in[6], 6, names[6]));
  KILN_TRY(expect_scalar(in[7], 7, names[7]));
  conv_geom g;
  KILN_TRY(conv_geom_make(ctx->node, x->rank, x->dims, w->rank, w->dims, &g));
  KILN_TRY(check_per_channel(in[4], 4, names[4], g.m));
  KILN_TRY(check_per_channel(in[5], 5, names[5], g.m));
  if (b) {
    KILN_TRY(expect_dtype(b, 8, names[8], KILN_DTYPE_I32));
    if (b->rank != 1 || b->dims[0] != g.m)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 8 (B): expected shape [%lld]", (long long)g.m);
  }
  kiln_dtype odt = in[7]->dtype;
  int64_t od[KILN_MAX_RANK];
  conv_out_dims(&g, od);
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, odt, x->rank, od, &y));
  int64_t *acc = malloc(sizeof(int64_t) * (size_t)KILN_MAX(y->numel, 1));
  if (!acc) return KILN_OOM();
  conv_integer(&g, x, kiln_load_i64(in[2]->data, x->dtype, 0), w, in[5], acc);
  float xs = *(const float *)in[1]->data, ys = *(const float *)in[6]->data;
  int64_t yz = kiln_load_i64(in[7]->data, odt, 0);
  const float *ws = in[4]->data;
  int64_t out_sp = 1;
  for (int i = 0; i < g.nsp; i++) out_sp *= g.out[i];
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t m = (i / out_sp) % g.m;
    int64_t a = acc[i] + (b ? ((const int32_t *)b->data)[m] : 0);
    float mult = kiln_qlinear_multiplier(xs, ws[in[4]->numel == 1 ? 0 : m], ys);
    kiln_store_i64(y->data, odt, i, requant(a, mult, yz, odt));
  }
  free(acc);
  return NULL;
}

static kiln_status_t qlinear_conv_infer(kiln_infer_ctx *ctx) {
  const kiln_type *yz = ctx->n_inputs > 7 ? ctx->inputs[7] : NULL;
  return conv_infer_common(ctx, 0, 3, yz ? yz->dtype : KILN_DTYPE_U8);
}

/* ---- integer matrix products ------------------------------------------------ */

/* numpy matmul shapes: 1-D operands are promoted ([K] -> [1,K] for a,
 * [K] -> [K,1] for b) and the promoted dim dropped from the output; the
 * batch dims broadcast. */
typedef struct mm_geom {
  int64_t m, k, n;
  int brank;                      /* broadcast batch rank */
  int64_t batch[KILN_MAX_RANK];   /* broadcast batch dims */
  int64_t a_bdims[KILN_MAX_RANK]; /* a's batch dims right-aligned to brank (1 where absent) */
  int64_t b_bdims[KILN_MAX_RANK];
  int a_brank, b_brank; /* a's / b's own batch rank */
  int out_rank;
  int64_t out[KILN_MAX_RANK];
} mm_geom;

static kiln_status_t mm_geom_make(int ar, const int64_t *ad, int br, const int64_t *bd, mm_geom *g) {
  memset(g, 0, sizeof *g);
  if (ar < 1 || br < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "matmul operands must have rank >= 1 (got %d and %d)", ar, br);
  g->m = ar == 1 ? 1 : ad[ar - 2];
  g->k = ad[ar - 1];
  int64_t bk = br == 1 ? bd[0] : bd[br - 2];
  g->n = br == 1 ? 1 : bd[br - 1];
  if (g->k >= 0 && bk >= 0 && g->k != bk)
    return kiln_error(KILN_INVALID_ARGUMENT, "inner dims differ: a has %lld columns, b has %lld rows", (long long)g->k,
                      (long long)bk);
  if (g->k < 0) g->k = bk;
  g->a_brank = ar > 2 ? ar - 2 : 0;
  g->b_brank = br > 2 ? br - 2 : 0;
  KILN_TRY(kiln_broadcast_shapes(g->a_brank, ad, g->b_brank, bd, &g->brank, g->batch));
  for (int i = 0; i < g->brank; i++) {
    int ai = i - (g->brank - g->a_brank), bi = i - (g->brank - g->b_brank);
    g->a_bdims[i] = ai >= 0 ? ad[ai] : 1;
    g->b_bdims[i] = bi >= 0 ? bd[bi] : 1;
  }
  g->out_rank = 0;
  for (int i = 0; i < g->brank; i++) g->out[g->out_rank++] = g->batch[i];
  if (ar > 1) g->out[g->out_rank++] = g->m;
  if (br > 1) g->out[g->out_rank++] = g->n;
  return NULL;
}

/* A quantization parameter of one operand side: a-side params are per row
 * (scalar, [M], or broadcastable to [a_batch..., M, 1]); b-side per column
 * (scalar, [N], or broadcastable to [b_batch..., 1, N]). */
typedef struct mm_param {
  const kiln_tensor *t; /* NULL: absent (0) */
  bool row_side;
  int64_t conc[KILN_MAX_RANK]; /* the conceptual shape t broadcasts to */
  int crank;
} mm_param;

static kiln_status_t mm_param_make(const kiln_tensor *t, int idx, const char *name, bool row_side, const mm_geom *g,
                                   mm_param *p) {
  memset(p, 0, sizeof *p);
  p->t = t;
  p->row_side = row_side;
  if (!t || t->numel == 1) return NULL;
  int own_brank = row_side ? g->a_brank : g->b_brank;
  const int64_t *own = row_side ? g->a_bdims + (g->brank - g->a_brank) : g->b_bdims + (g->brank - g->b_brank);
  p->crank = own_brank + 2;
  for (int i = 0; i < own_brank; i++) p->conc[i] = own[i];
  p->conc[own_brank] = row_side ? g->m : 1;
  p->conc[own_brank + 1] = row_side ? 1 : g->n;
  if (t->rank == 1 && t->dims[0] == (row_side ? g->m : g->n)) return NULL; /* per row / per column */
  bool ok = t->rank <= p->crank;
  for (int i = 0; ok && i < t->rank; i++) {
    int64_t d = t->dims[t->rank - 1 - i], c = p->conc[p->crank - 1 - i];
    ok = d == 1 || d == c;
  }
  if (!ok)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): %lld values fit neither a scalar nor per-%s layout", idx,
                      name, (long long)t->numel, row_side ? "row" : "column");
  return NULL;
}

/* Index into p->t for output (batch coords, row m, column n). */
static int64_t mm_param_index(const mm_param *p, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n) {
  const kiln_tensor *t = p->t;
  if (t->numel == 1) return 0;
  if (t->rank == 1 && t->dims[0] == (p->row_side ? g->m : g->n)) return p->row_side ? m : n;
  int own_brank = p->crank - 2;
  int64_t coord[KILN_MAX_RANK];
  for (int i = 0; i < own_brank; i++) {
    int64_t d = p->conc[i];
    coord[i] = d == 1 ? 0 : bc[g->brank - own_brank + i];
  }
  coord[own_brank] = p->row_side ? m : 0;
  coord[own_brank + 1] = p->row_side ? 0 : n;
  int64_t off = 0;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->dims[i];
    int64_t c = coord[p->crank - t->rank + i];
    off = off * d + (d == 1 ? 0 : c);
  }
  return off;
}

static int64_t mm_param_i64(const mm_param *p, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n) {
  return p->t ? kiln_load_i64(p->t->data, p->t->dtype, mm_param_index(p, g, bc, m, n)) : 0;
}

static double mm_param_f64(const mm_param *p, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n) {
  return kiln_load_f64(p->t->data, p->t->dtype, mm_param_index(p, g, bc, m, n));
}

/* Calls visit(out index, acc) for every output element with the integer
 * sum over k of (a - a_zp) * (b - b_zp). */
typedef void (*mm_visit_fn)(void *user, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n, int64_t out_i,
                            int64_t acc);

static void mm_integer(const mm_geom *g, const kiln_tensor *a, const mm_param *az, const kiln_tensor *b,
                       const mm_param *bz, mm_visit_fn visit, void *user) {
  int64_t nbatch = 1;
  for (int i = 0; i < g->brank; i++) nbatch *= g->batch[i];
  int64_t bc[KILN_MAX_RANK];
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t rem = bi, aoff = 0, boff = 0, astride = 1, bstride = 1;
    for (int i = g->brank - 1; i >= 0; i--) {
      bc[i] = rem % g->batch[i];
      rem /= g->batch[i];
      if (g->a_bdims[i] != 1) aoff += bc[i] * astride;
      if (g->b_bdims[i] != 1) boff += bc[i] * bstride;
      astride *= g->a_bdims[i];
      bstride *= g->b_bdims[i];
    }
    aoff *= g->m * g->k;
    boff *= g->k * g->n;
    for (int64_t m = 0; m < g->m; m++) {
      int64_t za = mm_param_i64(az, g, bc, m, 0);
      for (int64_t n = 0; n < g->n; n++) {
        int64_t zb = mm_param_i64(bz, g, bc, 0, n);
        int64_t sum = 0;
        for (int64_t k = 0; k < g->k; k++)
          sum += (kiln_load_i64(a->data, a->dtype, aoff + m * g->k + k) - za) *
                 (kiln_load_i64(b->data, b->dtype, boff + k * g->n + n) - zb);
        visit(user, g, bc, m, n, (bi * g->m + m) * g->n + n, sum);
      }
    }
  }
}

static void store_i32_visit(void *user, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n, int64_t out_i,
                            int64_t acc) {
  ((int32_t *)user)[out_i] = (int32_t)acc;
}

static kiln_status_t matmul_integer_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *az_t = kiln_kernel_input(ctx, 2), *bz_t = kiln_kernel_input(ctx, 3);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(expect_q8(a, 0, "A"));
  KILN_TRY(expect_q8(b, 1, "B"));
  if (az_t) KILN_TRY(expect_dtype(az_t, 2, "a_zero_point", a->dtype));
  if (bz_t) KILN_TRY(expect_dtype(bz_t, 3, "b_zero_point", b->dtype));
  mm_geom g;
  KILN_TRY(mm_geom_make(a->rank, a->dims, b->rank, b->dims, &g));
  mm_param az, bz;
  KILN_TRY(mm_param_make(az_t, 2, "a_zero_point", true, &g, &az));
  KILN_TRY(mm_param_make(bz_t, 3, "b_zero_point", false, &g, &bz));
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I32, g.out_rank, g.out, &y));
  mm_integer(&g, a, &az, b, &bz, store_i32_visit, y->data);
  return NULL;
}

static kiln_status_t mm_infer_common(kiln_infer_ctx *ctx, int a_in, int b_in, kiln_dtype dt) {
  const kiln_type *a = ctx->inputs[a_in], *b = ctx->n_inputs > b_in ? ctx->inputs[b_in] : NULL;
  if (!a || !b || a->rank < 0 || b->rank < 0) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  mm_geom g;
  KILN_TRY(mm_geom_make(a->rank, a->dims, b->rank, b->dims, &g));
  kiln_infer_set(ctx, 0, dt, g.out_rank, g.out);
  return NULL;
}

static kiln_status_t matmul_integer_infer(kiln_infer_ctx *ctx) { return mm_infer_common(ctx, 0, 1, KILN_DTYPE_I32); }

typedef struct qmm_state {
  mm_param as, bs, ys, yz;
  kiln_tensor *y;
} qmm_state;

static void qmm_visit(void *user, const mm_geom *g, const int64_t *bc, int64_t m, int64_t n, int64_t out_i,
                      int64_t acc) {
  qmm_state *s = user;
  /* Each scale as float first (f16/bf16 widen exactly), then ref's float rule. */
  float mult = kiln_qlinear_multiplier((float)mm_param_f64(&s->as, g, bc, m, n), (float)mm_param_f64(&s->bs, g, bc, m, n),
                                       (float)mm_param_f64(&s->ys, g, bc, m, n));
  int64_t z = mm_param_i64(&s->yz, g, bc, m, n);
  kiln_store_i64(s->y->data, s->y->dtype, out_i, requant(acc, mult, z, s->y->dtype));
}

static kiln_status_t qlinear_matmul_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *in[8];
  static const char *names[8] = {"a",       "a_scale",      "a_zero_point", "b",
                                 "b_scale", "b_zero_point", "y_scale",      "y_zero_point"};
  for (int i = 0; i < 8; i++) KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
  kiln_tensor *a = in[0], *b = in[3];
  KILN_TRY(expect_q8(a, 0, names[0]));
  KILN_TRY(expect_q8(b, 3, names[3]));
  KILN_TRY(expect_q8(in[7], 7, names[7]));
  KILN_TRY(expect_dtype(in[2], 2, names[2], a->dtype));
  KILN_TRY(expect_dtype(in[5], 5, names[5], b->dtype));
  static const int scale_inputs[3] = {1, 4, 6};
  for (int j = 0; j < 3; j++) /* float16 scales from opset 21 */
    KILN_TRY(expect_scale(in[scale_inputs[j]], scale_inputs[j], names[scale_inputs[j]], ctx->opset >= 21 ? 19 : 0));
  mm_geom g;
  KILN_TRY(mm_geom_make(a->rank, a->dims, b->rank, b->dims, &g));
  mm_param az, bz;
  qmm_state s;
  KILN_TRY(mm_param_make(in[1], 1, names[1], true, &g, &s.as));
  KILN_TRY(mm_param_make(in[2], 2, names[2], true, &g, &az));
  KILN_TRY(mm_param_make(in[4], 4, names[4], false, &g, &s.bs));
  KILN_TRY(mm_param_make(in[5], 5, names[5], false, &g, &bz));
  KILN_TRY(mm_param_make(in[6], 6, names[6], true, &g, &s.ys));
  KILN_TRY(mm_param_make(in[7], 7, names[7], true, &g, &s.yz));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, in[7]->dtype, g.out_rank, g.out, &s.y));
  mm_integer(&g, a, &az, b, &bz, qmm_visit, &s);
  return NULL;
}

static kiln_status_t qlinear_matmul_infer(kiln_infer_ctx *ctx) {
  const kiln_type *yz = ctx->n_inputs > 7 ? ctx->inputs[7] : NULL;
  return mm_infer_common(ctx, 0, 3, yz ? yz->dtype : KILN_DTYPE_U8);
}

static const kiln_op_def quant_ops[] = {
    {"", "QuantizeLinear", 2, 3, 1, 1, quantize_infer, quantize_kernel, 0, .id = KILN_OP_QuantizeLinear,
     .op_class = KILN_OPCLASS_BROADCAST},
    {"", "DequantizeLinear", 2, 3, 1, 1, dequantize_infer, dequantize_kernel, 0, .id = KILN_OP_DequantizeLinear,
     .op_class = KILN_OPCLASS_BROADCAST},
    {"", "DynamicQuantizeLinear", 1, 1, 3, 3, dynamic_quantize_infer, dynamic_quantize_kernel, 0, .id = KILN_OP_DynamicQuantizeLinear},
    {"", "ConvInteger", 2, 4, 1, 1, conv_integer_infer, conv_integer_kernel, 0, .id = KILN_OP_ConvInteger,
     .op_class = KILN_OPCLASS_CONTRACTION, .flops = kiln_flops_conv},
    {"", "QLinearConv", 8, 9, 1, 1, qlinear_conv_infer, qlinear_conv_kernel, 0, .id = KILN_OP_QLinearConv,
     .op_class = KILN_OPCLASS_CONTRACTION, .flops = kiln_flops_qlinear_conv},
    {"", "MatMulInteger", 2, 4, 1, 1, matmul_integer_infer, matmul_integer_kernel, 0, .id = KILN_OP_MatMulInteger,
     .op_class = KILN_OPCLASS_CONTRACTION, .flops = kiln_flops_matmul},
    {"", "QLinearMatMul", 8, 8, 1, 1, qlinear_matmul_infer, qlinear_matmul_kernel, 0, .id = KILN_OP_QLinearMatMul,
     .op_class = KILN_OPCLASS_CONTRACTION, .flops = kiln_flops_matmul},
};

const kiln_op_def *kiln_ops_quant(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(quant_ops);
  return quant_ops;
}
