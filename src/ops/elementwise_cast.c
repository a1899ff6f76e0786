/* Cast, CastLike, Identity and Clip.
 *
 * Cast follows numpy's astype, which produced the ONNX test data:
 * float -> int truncates toward zero, int -> int wraps, anything -> bool
 * is "!= 0". Two choices are forced by the ONNX test data:
 *  - to bfloat16 the float32 value is truncated before opset 19 (ONNX 1.12's
 *    data was made by dropping the low 16 bits) and rounded to nearest even
 *    from opset 19 on (the reference since then; ONNX 1.23's data);
 *  - float -> string gives the shortest digits that read back to the same
 *    value, laid out like numpy's str() ("0.039187793", "1e-05",
 *    "123456790.0"), with ONNX's literals "NaN", "INF", "-INF".
 * String -> number accepts anything strtod/strtoll read completely,
 * including "NaN", "INF", "+INF", "-INF" in any case.
 * Narrow types (opset 19+: float8, 21+: int4/uint4, 23+: float4, 24+:
 * float8e8m0, 25+: int2/uint2): float8 follows the 'saturate' attribute
 * (default 1) with ONNX's tables, float8e8m0 also 'round_mode' (default
 * "up"); float -> int4/int2 truncates and gives 0 out of range (as
 * ml_dtypes, which made the test data; ONNX leaves it undefined). */
#include "ops/elementwise.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <strings.h>

/* ---- float <-> string -------------------------------------------------------- */

/* Does the decimal reading r denote the same src-typed value as v? */
static bool reads_back(double r, double v, kiln_dtype src) {
  switch (src) {
    case KILN_DTYPE_F32: return (float)r == (float)v;
    case KILN_DTYPE_F16: return ew_f64_to_f16(r) == ew_f64_to_f16(v);
    case KILN_DTYPE_BF16: return ew_f64_to_bf16(r) == ew_f64_to_bf16(v);
    default: return r == v;
  }
}

/* Formats v (a value of dtype src) into buf like numpy's str(). */
static void format_float(double v, kiln_dtype src, char *buf, size_t size) {
  if (isnan(v)) {
    snprintf(buf, size, "NaN");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, size, v > 0 ? "INF" : "-INF");
    return;
  }
  if (v == 0) {
    snprintf(buf, size, signbit(v) ? "-0.0" : "0.0");
    return;
  }
  /* Shortest "%.*e" that reads back: d.ddd...e[+-]XX */
  char sci[64];
  for (int prec = 0; prec < 17; prec++) {
    snprintf(sci, sizeof sci, "%.*e", prec, v);
    if (reads_back(strtod(sci, NULL), v, src)) break;
  }
  const char *s = sci;
  bool neg = *s == '-';
  if (neg) s++;
  char digits[32];
  int nd = 0;
  for (; *s && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *s;
  int exp10 = *s == 'e' ? atoi(s + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;

  char out[96];
  size_t len = 0;
  if (neg) out[len++] = '-';
  double av = fabs(v);
  if (av >= 1e-4 && av < 1e16) { /* positional, as numpy's str() */
    if (exp10 >= 0) {
      for (int i = 0; i <= exp10; i++) out[len++] = i < nd ? digits[i] : '0';
      out[len++] = '.';
      if (nd > exp10 + 1)
        for (int i = exp10 + 1; i < nd; i++) out[len++] = digits[i];
      else
        out[len++] = '0';
    } else {
      out[len++] = '0';
      out[len++] = '.';
      for (int i = 0; i < -exp10 - 1; i++) out[len++] = '0';
      for (int i = 0; i < nd; i++) out[len++] = digits[i];
    }
    out[len] = 0;
  } else { /* scientific: 1e-05, 1.5e+20 */
    out[len++] = digits[0];
    if (nd > 1) {
      out[len++] = '.';
      for (int i = 1; i < nd; i++) out[len++] = digits[i];
    }
    snprintf(out + len, sizeof out - len, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
  snprintf(buf, size, "%s", out);
}

/* The rest of s is only whitespace. */
static bool only_space(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  return *s == 0;
}

static kiln_status_t not_a_number(int64_t i, const char *s, kiln_dtype to) {
  return kiln_error(KILN_INVALID_ARGUMENT, "input 0: element %lld \"%.64s\" is not a %s number", (long long)i, s,
                    kiln_dtype_name(to));
}

/* float32 -> bfloat16 by truncation (see the header comment); NaN stays NaN. */
static uint16_t f32_to_bf16_trunc(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)(x >> 16);
}

/* How a Cast node converts (its attributes and opset). */
typedef struct cast_mode {
  bool saturate;  /* float8: clamp out-of-range values */
  int e8m0_round; /* KILN_E8M0_* */
  bool bf16_rne;  /* to bfloat16: round to nearest even, else truncate */
} cast_mode;

/* Stores v (a double) as element i of y in a float dtype (narrow ones included). */
static void store_float(kiln_tensor *y, int64_t i, double v, const cast_mode *mode) {
  kiln_dtype to = y->dtype;
  if (to == KILN_DTYPE_BF16 && !mode->bf16_rne)
    ((uint16_t *)y->data)[i] = f32_to_bf16_trunc((float)v);
  else if (to == KILN_DTYPE_F8E8M0)
    ((uint8_t *)y->data)[i] = kiln_f32_to_e8m0((float)v, mode->saturate, mode->e8m0_round);
  else if (kiln_dtype_is_narrow_float(to))
    ((uint8_t *)y->data)[i] = kiln_f64_to_narrow_float(v, to, mode->saturate);
  else
    ew_store_f64(y->data, to, i, v);
}

/* Parses string element i of the input into element i of y (dtype to). */
static kiln_status_t parse_string(const char *s, int64_t i, kiln_tensor *y, const cast_mode *mode) {
  kiln_dtype to = y->dtype;
  if (!s) s = "";
  char *end;
  if (to == KILN_DTYPE_BOOL) {
    const char *t = s;
    while (*t == ' ' || *t == '\t') t++;
    if (!strncasecmp(t, "true", 4) && only_space(t + 4)) {
      ((uint8_t *)y->data)[i] = 1;
      return NULL;
    }
    if (!strncasecmp(t, "false", 5) && only_space(t + 5)) {
      ((uint8_t *)y->data)[i] = 0;
      return NULL;
    }
  }
  if (kiln_dtype_is_int(to) || kiln_dtype_is_narrow_int(to) || to == KILN_DTYPE_BOOL) {
    /* Exact integer text first (int64 values beyond 2^53 survive). */
    errno = 0;
    if (to == KILN_DTYPE_U64) {
      unsigned long long u = strtoull(s, &end, 10);
      if (end != s && !errno && only_space(end) && !strchr(s, '-')) {
        ((uint64_t *)y->data)[i] = u;
        return NULL;
      }
    } else {
      long long v = strtoll(s, &end, 10);
      if (end != s && !errno && only_space(end)) {
        kiln_store_i64(y->data, to, i, v);
        return NULL;
      }
    }
  }
  if (to == KILN_DTYPE_F32) {
    float f = strtof(s, &end);
    if (end == s || !only_space(end)) return not_a_number(i, s, to);
    ((float *)y->data)[i] = f;
    return NULL;
  }
  double v = strtod(s, &end);
  if (end == s || !only_space(end)) return not_a_number(i, s, to);
  if (kiln_dtype_is_float(to) || kiln_dtype_is_narrow_float(to))
    store_float(y, i, v, mode);
  else
    ew_store_f64(y->data, to, i, v);
  return NULL;
}

/* Formats element i of x as text into element i of y. */
static kiln_status_t format_element(const kiln_tensor *x, int64_t i, kiln_tensor *y) {
  char buf[96];
  kiln_dtype dt = x->dtype;
  if (kiln_dtype_is_float(dt))
    format_float(kiln_load_f64(x->data, dt, i), dt, buf, sizeof buf);
  else if (kiln_dtype_is_narrow_float(dt)) /* exact in float32 */
    format_float(kiln_load_f64(x->data, dt, i), KILN_DTYPE_F32, buf, sizeof buf);
  else if (dt == KILN_DTYPE_BOOL)
    snprintf(buf, sizeof buf, "%s", ((const uint8_t *)x->data)[i] ? "True" : "False");
  else if (dt == KILN_DTYPE_U64)
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)kiln_load_u64(x->data, dt, i));
  else
    snprintf(buf, sizeof buf, "%lld", (long long)kiln_load_i64(x->data, dt, i));
  return kiln_tensor_set_string(y, i, buf, strlen(buf));
}

/* ---- numeric conversion ---------------------------------------------------- */

static void convert_number(const kiln_tensor *x, int64_t i, kiln_tensor *y, const cast_mode *mode) {
  kiln_dtype from = x->dtype, to = y->dtype;
  if (kiln_dtype_is_float(to) || kiln_dtype_is_narrow_float(to)) {
    /* The value in double; 64-bit ints convert straight to float32 so
     * they round once. */
    double v;
    float f32 = 0;
    bool have_f32 = false;
    if (from == KILN_DTYPE_U64) {
      uint64_t u = kiln_load_u64(x->data, from, i);
      v = (double)u;
      f32 = (float)u;
      have_f32 = true;
    } else if (from == KILN_DTYPE_I64) {
      int64_t s = kiln_load_i64(x->data, from, i);
      v = (double)s;
      f32 = (float)s;
      have_f32 = true;
    } else {
      v = kiln_load_f64(x->data, from, i);
    }
    if (to == KILN_DTYPE_F32)
      ((float *)y->data)[i] = have_f32 ? f32 : (float)v;
    else
      store_float(y, i, have_f32 ? (double)f32 : v, mode);
  } else if (kiln_dtype_is_float(from) || kiln_dtype_is_narrow_float(from)) {
    kiln_store_f64(y->data, to, i, kiln_load_f64(x->data, from, i)); /* truncates toward zero */
  } else if (from == KILN_DTYPE_U64) {
    kiln_store_i64(y->data, to, i, (int64_t)kiln_load_u64(x->data, from, i)); /* wraps */
  } else {
    kiln_store_i64(y->data, to, i, kiln_load_i64(x->data, from, i));
  }
}

static kiln_status_t cast_into(const kiln_tensor *x, kiln_tensor *y, const cast_mode *mode) {
  kiln_dtype from = x->dtype, to = y->dtype;
  const unsigned castable = EW_NUMERIC | EW_BOOL | EW_STRING | EW_NARROW;
  KILN_TRY(ew_check_dtype(x, 0, castable));
  if (!(castable & EW_BIT(to)))
    return kiln_error(KILN_UNSUPPORTED, "cannot cast to %s", kiln_dtype_name(to));
  for (int64_t i = 0; i < x->numel; i++) {
    if (from == KILN_DTYPE_STRING) {
      const char *s = ((char *const *)x->data)[i];
      if (to == KILN_DTYPE_STRING)
        KILN_TRY(kiln_tensor_set_string(y, i, s ? s : "", s ? strlen(s) : 0));
      else
        KILN_TRY(parse_string(s, i, y, mode));
    } else if (to == KILN_DTYPE_STRING) {
      KILN_TRY(format_element(x, i, y));
    } else if (from == to) {
      size_t es = kiln_dtype_size(to);
      memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)i * es, es);
    } else {
      convert_number(x, i, y, mode);
    }
  }
  return NULL;
}

/* The "to" attribute: an int (TensorProto.DataType) or, in Cast-1, its name. */
static kiln_status_t cast_target(const kiln_node *node, kiln_dtype *out) {
  static const char *const names[] = {NULL,    "FLOAT",   "UINT8",  "INT8",      "UINT16",     "INT16",
                                      "INT32", "INT64",   "STRING", "BOOL",      "FLOAT16",    "DOUBLE",
                                      "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
                                      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
                                      "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"};
  const kiln_attr *a = kiln_node_attr(node, "to");
  if (!a) return kiln_error(KILN_INVALID_MODEL, "attribute 'to' is required");
  if (a->type == KILN_ATTR_STRING) {
    for (int d = 1; d < (int)KILN_ARRAY_SIZE(names); d++)
      if (a->s && !strcasecmp(a->s, names[d])) {
        *out = (kiln_dtype)d;
        return NULL;
      }
    kiln_dtype d = a->s ? kiln_dtype_from_name(a->s) : KILN_DTYPE_UNDEFINED;
    if (d == KILN_DTYPE_UNDEFINED)
      return kiln_error(KILN_INVALID_MODEL, "attribute to=\"%.64s\" is not a data type", a->s ? a->s : "");
    *out = d;
    return NULL;
  }
  if (!kiln_dtype_is_valid((int)a->i))
    return kiln_error(KILN_INVALID_MODEL, "attribute to=%lld is not a data type", (long long)a->i);
  *out = (kiln_dtype)a->i;
  return NULL;
}

static kiln_status_t cast_mode_of(const kiln_node *node, int opset, cast_mode *out) {
  out->saturate = kiln_attr_int(node, "saturate", 1) != 0;
  out->bf16_rne = opset <= 0 || opset >= 19;
  const char *rm = kiln_attr_string(node, "round_mode", "up");
  if (!strcmp(rm, "up"))
    out->e8m0_round = KILN_E8M0_UP;
  else if (!strcmp(rm, "down"))
    out->e8m0_round = KILN_E8M0_DOWN;
  else if (!strcmp(rm, "nearest"))
    out->e8m0_round = KILN_E8M0_NEAREST;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute round_mode=\"%.32s\" is not up, down or nearest", rm);
  return NULL;
}

static kiln_status_t cast_to_output(kiln_kernel_ctx *ctx, const kiln_tensor *x, kiln_dtype to) {
  kiln_tensor *y;
  cast_mode mode;
  KILN_TRY(cast_mode_of(ctx->node, ctx->opset, &mode));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, to, x->rank, x->dims, &y));
  return cast_into(x, y, &mode);
}

kiln_status_t ew_kernel_Cast(kiln_kernel_ctx *ctx) {
  kiln_tensor *x;
  kiln_dtype to;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(cast_target(ctx->node, &to));
  return cast_to_output(ctx, x, to);
}

kiln_status_t ew_infer_Cast(kiln_infer_ctx *ctx) {
  kiln_dtype to;
  KILN_TRY(cast_target(ctx->node, &to));
  KILN_TRY(kiln_infer_same_as_input(ctx, 0, 0));
  if (ctx->n_outputs > 0) {
    if (ctx->outputs[0].kind == KILN_TYPE_TENSOR)
      ctx->outputs[0].dtype = to;
    else
      kiln_infer_set(ctx, 0, to, -1, NULL);
  }
  return NULL;
}

kiln_status_t ew_kernel_CastLike(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *like;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &like));
  return cast_to_output(ctx, x, like->dtype);
}

kiln_status_t ew_infer_CastLike(kiln_infer_ctx *ctx) {
  kiln_dtype to = (ctx->n_inputs > 1 && ctx->inputs[1]) ? ctx->inputs[1]->dtype : KILN_DTYPE_UNDEFINED;
  KILN_TRY(kiln_infer_same_as_input(ctx, 0, 0));
  if (ctx->n_outputs > 0) {
    if (ctx->outputs[0].kind == KILN_TYPE_TENSOR)
      ctx->outputs[0].dtype = to;
    else
      kiln_infer_set(ctx, 0, to, -1, NULL);
  }
  return NULL;
}

/* ---- Identity: tensors, sequences and optionals pass through shared ------ */

kiln_status_t ew_kernel_Identity(kiln_kernel_ctx *ctx) {
  if (ctx->n_inputs < 1 || !ctx->inputs[0])
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 is required but absent");
  if (ctx->n_outputs < 1) return NULL;
  kiln_value *v;
  KILN_TRY(kiln_value_share(ctx->inputs[0], &v));
  kiln_value_free(ctx->outputs[0]);
  ctx->outputs[0] = v;
  return NULL;
}

kiln_status_t ew_infer_Identity(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

/* ---- Clip ------------------------------------------------------------------ */

/* Optional bound input i of Clip (opset >= 11): a one-element tensor of x's dtype. */
static kiln_status_t clip_bound(kiln_kernel_ctx *ctx, int i, const kiln_tensor *x, const kiln_tensor **out) {
  kiln_tensor *b = kiln_kernel_input(ctx, i);
  *out = b;
  if (!b) return NULL;
  const char *what = i == 1 ? "min" : "max";
  if (b->dtype != x->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s) has dtype %s; expected %s like input 0", i, what,
                      kiln_dtype_name(b->dtype), kiln_dtype_name(x->dtype));
  if (b->numel != 1) {
    char s[256];
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s) must be a scalar, got shape %s", i, what,
                      kiln_shape_str(b->rank, b->dims, s, sizeof s));
  }
  return NULL;
}

kiln_status_t ew_kernel_Clip(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(ew_check_dtype(x, 0, EW_NUMERIC));
  kiln_dtype dt = x->dtype;
  const kiln_tensor *lo_t = NULL, *hi_t = NULL;
  double lo_f = -INFINITY, hi_f = INFINITY;
  if (ctx->opset > 0 && ctx->opset < 11) {
    /* min/max were attributes: Clip-6 defaults to the float range, Clip-1 to none. */
    if (!kiln_dtype_is_float(dt))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 has dtype %s; Clip before opset 12 takes floats only",
                        kiln_dtype_name(dt));
    bool v6 = ctx->opset >= 6;
    lo_f = kiln_attr_float(ctx->node, "min", v6 ? -FLT_MAX : -INFINITY);
    hi_f = kiln_attr_float(ctx->node, "max", v6 ? FLT_MAX : INFINITY);
  } else {
    KILN_TRY(clip_bound(ctx, 1, x, &lo_t));
    KILN_TRY(clip_bound(ctx, 2, x, &hi_t));
    if (kiln_dtype_is_float(dt)) {
      if (lo_t) lo_f = kiln_load_f64(lo_t->data, dt, 0);
      if (hi_t) hi_f = kiln_load_f64(hi_t->data, dt, 0);
    }
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, x->rank, x->dims, &y));
  /* min first, then max: with min > max every element becomes max (numpy.clip). */
  for (int64_t i = 0; i < x->numel; i++) {
    if (kiln_dtype_is_float(dt)) {
      double v = kiln_load_f64(x->data, dt, i);
      if (v < lo_f) v = lo_f;
      if (v > hi_f) v = hi_f;
      ew_store_f64(y->data, dt, i, v);
    } else if (ew_is_unsigned(dt)) {
      uint64_t v = kiln_load_u64(x->data, dt, i);
      if (lo_t && v < kiln_load_u64(lo_t->data, dt, 0)) v = kiln_load_u64(lo_t->data, dt, 0);
      if (hi_t && v > kiln_load_u64(hi_t->data, dt, 0)) v = kiln_load_u64(hi_t->data, dt, 0);
      kiln_store_i64(y->data, dt, i, (int64_t)v);
    } else {
      int64_t v = kiln_load_i64(x->data, dt, i);
      if (lo_t && v < kiln_load_i64(lo_t->data, dt, 0)) v = kiln_load_i64(lo_t->data, dt, 0);
      if (hi_t && v > kiln_load_i64(hi_t->data, dt, 0)) v = kiln_load_i64(hi_t->data, dt, 0);
      kiln_store_i64(y->data, dt, i, v);
    }
  }
  return NULL;
}

kiln_status_t ew_infer_Clip(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }
