/* dtype.h — element types: sizes, names, half/bfloat16 conversion and
 * generic element access (load/store through double or int64) for kernels
 * that are written once for every dtype.
 *
 * Narrow types (ONNX 17..26: float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ/E8M0,
 * float4 E2M1, int4/uint4, int2/uint2) take ONE BYTE PER ELEMENT in memory,
 * as ml_dtypes' numpy arrays do: a float8/float4 element is its bit code
 * (float4 in the low nibble), an int4/int2 element is its value in an
 * int8/uint8 slot. ONNX packs 4-bit types two per byte and 2-bit types four
 * per byte (low bits first); that packing is applied only where tensors
 * cross protobuf (src/onnx/onnx_tensor.c reads, onnx_writer.c writes), so
 * every kernel indexes them like any 1-byte type. These types are not
 * "float" or "int" for kiln_dtype_is_float/_int: ops take them only where
 * they name them (Cast, QuantizeLinear, ...). */
#ifndef KILN_TENSOR_DTYPE_H
#define KILN_TENSOR_DTYPE_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define KILN_DTYPE_LAST KILN_DTYPE_I2

bool kiln_dtype_is_valid(int dtype);
/* float8 / float4 / int4 / int2 (one byte per element in memory). */
bool kiln_dtype_is_narrow(kiln_dtype dt);
bool kiln_dtype_is_narrow_float(kiln_dtype dt); /* float8 (incl. E8M0) and float4 */
bool kiln_dtype_is_narrow_int(kiln_dtype dt);   /* int4 uint4 int2 uint2 */
/* Bits per element in ONNX's packed form: 4 or 2 for the sub-byte types, else 8 * size. */
int kiln_dtype_bits(kiln_dtype dt);
/* Value range of an integer dtype, narrow ones included (u64's hi is INT64_MAX). */
void kiln_dtype_int_range(kiln_dtype dt, int64_t *lo, int64_t *hi);

/* Narrow float codes <-> values. Decoding is exact (NaN for NaN codes, the
 * sign kept). Encoding rounds to nearest even; with saturate, values beyond
 * the largest finite (and +-Inf) become +-max, without it they become Inf
 * (E5M2) or NaN (the FN/FNUZ types), as ONNX's Cast tables say. float4 has
 * neither Inf nor NaN: it always saturates and NaN gives code 0x8 (as ml_dtypes). */
float kiln_narrow_to_f32(uint8_t code, kiln_dtype dt);
uint8_t kiln_f64_to_narrow_float(double v, kiln_dtype dt, bool saturate);
/* float -> E8M0 as ONNX's Cast: round_mode 0 "up", 1 "down", 2 "nearest". */
enum { KILN_E8M0_UP = 0, KILN_E8M0_DOWN = 1, KILN_E8M0_NEAREST = 2 };
uint8_t kiln_f32_to_e8m0(float v, bool saturate, int round_mode);
/* Is this code a NaN of the narrow float type dt? */
bool kiln_narrow_is_nan(uint8_t code, kiln_dtype dt);
bool kiln_dtype_is_float(kiln_dtype dt);   /* f16 bf16 f32 f64 */
/* f16 or bf16: the halves compiled kernels store and compute in f32 (passes/widen_half.c) */
static inline bool kiln_dtype_is_half(kiln_dtype dt) { return dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16; }
bool kiln_dtype_is_int(kiln_dtype dt);     /* signed or unsigned integers, not bool */
bool kiln_dtype_is_signed(kiln_dtype dt);  /* signed ints and floats */
/* Parses "f32", "float32", "float", "int64", ... ; UNDEFINED if unknown. */
kiln_dtype kiln_dtype_from_name(const char *name);

/* The least tolerances a comparison of dt values against ref grants (kiln
 * verify, the differential test): f16 and bf16 results computed in f32
 * between casts differ from ref's (which rounds inside some ops, e.g. its
 * bf16 sums after every addition) by a few of their ulps, so f16 gets at
 * least rtol 1e-2 / atol 1e-3 and bf16 4e-2 / 1e-2; other dtypes keep
 * what is asked. */
static inline void kiln_dtype_tolerance_floor(kiln_dtype dt, double *rtol, double *atol) {
  double r = dt == KILN_DTYPE_F16 ? 1e-2 : dt == KILN_DTYPE_BF16 ? 4e-2 : 0;
  double a = dt == KILN_DTYPE_F16 ? 1e-3 : dt == KILN_DTYPE_BF16 ? 1e-2 : 0;
  if (*rtol < r) *rtol = r;
  if (*atol < a) *atol = a;
}

static inline float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Round-to-nearest-even, as numpy does. */
static inline uint16_t kiln_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
  if (absx < 0x38800000u) { /* subnormal or zero in half */
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14 + (112 - e) */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1); /* RNE on bit 13 */
  r -= 0x38000000u;
  return (uint16_t)(sign | (r >> 13));
}

static inline float kiln_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Round-to-nearest-even (as ONNX's reference and PyTorch do). */
static inline uint16_t kiln_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* Correctly rounded double -> half / bfloat16 (one rounding, not two:
 * the double is first rounded to float with round-to-odd). */
uint16_t kiln_f64_to_f16(double v);
uint16_t kiln_f64_to_bf16(double v);

/* v rounded to float dtype dt as storing and reloading it would (f32, f16,
 * bf16; v itself for f64): the rounding ONNX's reference implementation
 * does between the steps of a function in a narrow float type. */
static inline double kiln_round_to_dtype(kiln_dtype dt, double v) {
  switch (dt) {
    case KILN_DTYPE_F32: return (double)(float)v;
    case KILN_DTYPE_F16: return (double)kiln_f16_to_f32(kiln_f64_to_f16(v));
    case KILN_DTYPE_BF16: return (double)kiln_bf16_to_f32(kiln_f64_to_bf16(v));
    default: return v;
  }
}

/* Generic element access: element i of a buffer of dtype dt.
 * Not for STRING / complex. Bool loads as 0/1. */
double kiln_load_f64(const void *data, kiln_dtype dt, int64_t i);
void kiln_store_f64(void *data, kiln_dtype dt, int64_t i, double v);
int64_t kiln_load_i64(const void *data, kiln_dtype dt, int64_t i);
void kiln_store_i64(void *data, kiln_dtype dt, int64_t i, int64_t v);
/* u64 needs its own path: values above INT64_MAX. */
uint64_t kiln_load_u64(const void *data, kiln_dtype dt, int64_t i);

#endif
