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
};

bool kiln_dtype_is_valid(int dt) { return dt > 0 && dt <= KILN_DTYPE_BF16; }

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
  };
  for (int i = 1; i <= KILN_DTYPE_BF16; i++)
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
    default: kiln_store_f64(d, dt, i, (double)v); break;
  }
}
