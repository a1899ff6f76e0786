#include "tensor/dtype.h"

#include <math.h>
#include <strings.h>

static const struct {
  const char *name;
  size_t size;
} dtype_table[] = {
    [KILN_DTYPE_UNDEFINED] = {"undefined", 0}, [KILN_DTYPE_F32] = {"f32", 4},
    [KILN_DTYPE_U8] = {"u8", 1},               [KILN_DTYPE_I8] = {"i8", 1},
    [KILN_DTYPE_U16] = {"u16", 2},             [KILN_DTYPE_I16] = {"i16", 2},
    [KILN_DTYPE_I32] = {"i32", 4},             [KILN_DTYPE_I64] = {"i64", 8},
    [KILN_DTYPE_STRING] = {"string", sizeof(char *)}, [KILN_DTYPE_BOOL] = {"bool", 1},
    [KILN_DTYPE_F16] = {"f16", 2},             [KILN_DTYPE_F64] = {"f64", 8},
    [KILN_DTYPE_U32] = {"u32", 4},             [KILN_DTYPE_U64] = {"u64", 8},
    [KILN_DTYPE_C64] = {"c64", 8},             [KILN_DTYPE_C128] = {"c128", 16},
    [KILN_DTYPE_BF16] = {"bf16", 2},
    [KILN_DTYPE_F8E4M3FN] = {"f8e4m3fn", 1},   [KILN_DTYPE_F8E4M3FNUZ] = {"f8e4m3fnuz", 1},
    [KILN_DTYPE_F8E5M2] = {"f8e5m2", 1},       [KILN_DTYPE_F8E5M2FNUZ] = {"f8e5m2fnuz", 1},
    [KILN_DTYPE_U4] = {"u4", 1},               [KILN_DTYPE_I4] = {"i4", 1},
    [KILN_DTYPE_F4E2M1] = {"f4e2m1", 1},       [KILN_DTYPE_F8E8M0] = {"f8e8m0", 1},
    [KILN_DTYPE_U2] = {"u2", 1},               [KILN_DTYPE_I2] = {"i2", 1},
};

bool kiln_dtype_is_valid(int dt) { return dt > 0 && dt <= KILN_DTYPE_LAST; }

bool kiln_dtype_is_narrow(kiln_dtype dt) { return dt >= KILN_DTYPE_F8E4M3FN && dt <= KILN_DTYPE_I2; }

bool kiln_dtype_is_narrow_int(kiln_dtype dt) {
  return dt == KILN_DTYPE_U4 || dt == KILN_DTYPE_I4 || dt == KILN_DTYPE_U2 || dt == KILN_DTYPE_I2;
}

bool kiln_dtype_is_narrow_float(kiln_dtype dt) { return kiln_dtype_is_narrow(dt) && !kiln_dtype_is_narrow_int(dt); }

int kiln_dtype_bits(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_F4E2M1: return 4;
    case KILN_DTYPE_U2: case KILN_DTYPE_I2: return 2;
    default: return (int)kiln_dtype_size(dt) * 8;
  }
}

void kiln_dtype_int_range(kiln_dtype dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case KILN_DTYPE_U8: *lo = 0, *hi = UINT8_MAX; break;
    case KILN_DTYPE_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case KILN_DTYPE_U16: *lo = 0, *hi = UINT16_MAX; break;
    case KILN_DTYPE_I16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case KILN_DTYPE_U32: *lo = 0, *hi = UINT32_MAX; break;
    case KILN_DTYPE_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case KILN_DTYPE_U4: *lo = 0, *hi = 15; break;
    case KILN_DTYPE_I4: *lo = -8, *hi = 7; break;
    case KILN_DTYPE_U2: *lo = 0, *hi = 3; break;
    case KILN_DTYPE_I2: *lo = -2, *hi = 1; break;
    case KILN_DTYPE_BOOL: *lo = 0, *hi = 1; break;
    case KILN_DTYPE_U64: *lo = 0, *hi = INT64_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

/* A narrow int's value from its byte, whatever the byte holds (bytes from
 * .npy files are not checked): the low bits, sign-extended for signed types. */
static int64_t narrow_int_value(uint8_t b, kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_U4: return b & 0xf;
    case KILN_DTYPE_I4: return (int64_t)((b & 0xf) ^ 0x8) - 8;
    case KILN_DTYPE_U2: return b & 0x3;
    default: return (int64_t)((b & 0x3) ^ 0x2) - 2;
  }
}

const char *kiln_dtype_name(kiln_dtype dt) {
  return kiln_dtype_is_valid((int)dt) ? dtype_table[dt].name : "undefined";
}

size_t kiln_dtype_size(kiln_dtype dt) { return kiln_dtype_is_valid((int)dt) ? dtype_table[dt].size : 0; }

bool kiln_dtype_is_float(kiln_dtype dt) {
  return dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16 || dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64;
}

bool kiln_dtype_is_int(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_U8: case KILN_DTYPE_I8: case KILN_DTYPE_U16: case KILN_DTYPE_I16:
    case KILN_DTYPE_I32: case KILN_DTYPE_I64: case KILN_DTYPE_U32: case KILN_DTYPE_U64:
      return true;
    default:
      return false;
  }
}

bool kiln_dtype_is_signed(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_I8: case KILN_DTYPE_I16: case KILN_DTYPE_I32: case KILN_DTYPE_I64:
      return true;
    default:
      return kiln_dtype_is_float(dt);
  }
}

kiln_dtype kiln_dtype_from_name(const char *name) {
  static const struct {
    const char *name;
    kiln_dtype dt;
  } aliases[] = {
      {"float", KILN_DTYPE_F32}, {"float32", KILN_DTYPE_F32}, {"double", KILN_DTYPE_F64},
      {"float64", KILN_DTYPE_F64}, {"float16", KILN_DTYPE_F16}, {"bfloat16", KILN_DTYPE_BF16},
      {"int8", KILN_DTYPE_I8}, {"uint8", KILN_DTYPE_U8}, {"int16", KILN_DTYPE_I16},
      {"uint16", KILN_DTYPE_U16}, {"int32", KILN_DTYPE_I32}, {"uint32", KILN_DTYPE_U32},
      {"int64", KILN_DTYPE_I64}, {"uint64", KILN_DTYPE_U64},
      {"float8_e4m3fn", KILN_DTYPE_F8E4M3FN}, {"float8_e4m3fnuz", KILN_DTYPE_F8E4M3FNUZ},
      {"float8_e5m2", KILN_DTYPE_F8E5M2}, {"float8_e5m2fnuz", KILN_DTYPE_F8E5M2FNUZ},
      {"float8_e8m0fnu", KILN_DTYPE_F8E8M0}, {"float4_e2m1fn", KILN_DTYPE_F4E2M1},
      {"int4", KILN_DTYPE_I4}, {"uint4", KILN_DTYPE_U4}, {"int2", KILN_DTYPE_I2}, {"uint2", KILN_DTYPE_U2},
  };
  for (int i = 1; i <= KILN_DTYPE_LAST; i++)
    if (!strcasecmp(name, dtype_table[i].name)) return (kiln_dtype)i;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (!strcasecmp(name, aliases[i].name)) return aliases[i].dt;
  return KILN_DTYPE_UNDEFINED;
}

/* Rounds v to float with round-to-odd, so that a second rounding to a
 * narrower format (f16, bf16) equals rounding v directly. */
static float round_to_odd_f32(double v) {
  float f = (float)v;
  if (isfinite(v) && (double)f != v) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (!(bits & 1)) f = nextafterf(f, v > (double)f ? INFINITY : -INFINITY);
  }
  return f;
}

uint16_t kiln_f64_to_f16(double v) { return kiln_f32_to_f16(round_to_odd_f32(v)); }
uint16_t kiln_f64_to_bf16(double v) { return kiln_f32_to_bf16(round_to_odd_f32(v)); }

double kiln_load_f64(const void *d, kiln_dtype dt, int64_t i) {
  switch (dt) {
    case KILN_DTYPE_F32: return ((const float *)d)[i];
    case KILN_DTYPE_F64: return ((const double *)d)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t *)d)[i]);
    case KILN_DTYPE_BF16: return kiln_bf16_to_f32(((const uint16_t *)d)[i]);
    case KILN_DTYPE_U8: return ((const uint8_t *)d)[i];
    case KILN_DTYPE_I8: return ((const int8_t *)d)[i];
    case KILN_DTYPE_U16: return ((const uint16_t *)d)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)d)[i];
    case KILN_DTYPE_I32: return ((const int32_t *)d)[i];
    case KILN_DTYPE_I64: return (double)((const int64_t *)d)[i];
    case KILN_DTYPE_U32: return ((const uint32_t *)d)[i];
    case KILN_DTYPE_U64: return (double)((const uint64_t *)d)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)d)[i] ? 1.0 : 0.0;
    case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_U2: case KILN_DTYPE_I2:
      return (double)narrow_int_value(((const uint8_t *)d)[i], dt);
    case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ: case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ:
    case KILN_DTYPE_F4E2M1: case KILN_DTYPE_F8E8M0:
      return kiln_narrow_to_f32(((const uint8_t *)d)[i], dt);
    default: return 0.0;
  }
}

/* Float -> int conversion saturates instead of invoking UB on NaN/overflow. */
static int64_t f64_to_i64_sat(double v) {
  if (isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

void kiln_store_f64(void *d, kiln_dtype dt, int64_t i, double v) {
  switch (dt) {
    case KILN_DTYPE_F32: ((float *)d)[i] = (float)v; break;
    case KILN_DTYPE_F64: ((double *)d)[i] = v; break;
    case KILN_DTYPE_F16: ((uint16_t *)d)[i] = kiln_f64_to_f16(v); break;
    case KILN_DTYPE_BF16: ((uint16_t *)d)[i] = kiln_f64_to_bf16(v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)d)[i] = v != 0.0; break;
    case KILN_DTYPE_U64:
      ((uint64_t *)d)[i] = (isnan(v) || v <= 0) ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
      break;
    case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ: case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ:
    case KILN_DTYPE_F4E2M1:
      ((uint8_t *)d)[i] = kiln_f64_to_narrow_float(v, dt, true);
      break;
    case KILN_DTYPE_F8E8M0: ((uint8_t *)d)[i] = kiln_f32_to_e8m0((float)v, true, KILN_E8M0_UP); break;
    case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_U2: case KILN_DTYPE_I2: {
      /* Truncate toward zero; out of range gives 0 (what ml_dtypes' astype,
       * which made ONNX's test data, does; ONNX leaves it undefined). */
      int64_t lo, hi;
      kiln_dtype_int_range(dt, &lo, &hi);
      double t = trunc(v);
      ((uint8_t *)d)[i] = (uint8_t)(isnan(t) || t < (double)lo || t > (double)hi ? 0 : (int64_t)t);
      break;
    }
    default: kiln_store_i64(d, dt, i, f64_to_i64_sat(v)); break;
  }
}

int64_t kiln_load_i64(const void *d, kiln_dtype dt, int64_t i) {
  switch (dt) {
    case KILN_DTYPE_U8: return ((const uint8_t *)d)[i];
    case KILN_DTYPE_I8: return ((const int8_t *)d)[i];
    case KILN_DTYPE_U16: return ((const uint16_t *)d)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)d)[i];
    case KILN_DTYPE_I32: return ((const int32_t *)d)[i];
    case KILN_DTYPE_I64: return ((const int64_t *)d)[i];
    case KILN_DTYPE_U32: return ((const uint32_t *)d)[i];
    case KILN_DTYPE_U64: return (int64_t)((const uint64_t *)d)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)d)[i] != 0;
    case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_U2: case KILN_DTYPE_I2:
      return narrow_int_value(((const uint8_t *)d)[i], dt);
    default: return f64_to_i64_sat(kiln_load_f64(d, dt, i));
  }
}

uint64_t kiln_load_u64(const void *d, kiln_dtype dt, int64_t i) {
  if (dt == KILN_DTYPE_U64) return ((const uint64_t *)d)[i];
  return (uint64_t)kiln_load_i64(d, dt, i);
}

/* Integer stores wrap modulo 2^bits, as C casts of in-range values and
 * numpy's astype do. */
void kiln_store_i64(void *d, kiln_dtype dt, int64_t i, int64_t v) {
  switch (dt) {
    case KILN_DTYPE_U8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KILN_DTYPE_I8: ((int8_t *)d)[i] = (int8_t)(uint8_t)v; break;
    case KILN_DTYPE_U16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KILN_DTYPE_I16: ((int16_t *)d)[i] = (int16_t)(uint16_t)v; break;
    case KILN_DTYPE_I32: ((int32_t *)d)[i] = (int32_t)(uint32_t)v; break;
    case KILN_DTYPE_I64: ((int64_t *)d)[i] = v; break;
    case KILN_DTYPE_U32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KILN_DTYPE_U64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_U2: case KILN_DTYPE_I2: /* wrap, sign-extended */
      ((uint8_t *)d)[i] = (uint8_t)narrow_int_value((uint8_t)v, dt);
      break;
    default: kiln_store_f64(d, dt, i, (double)v); break;
  }
}
