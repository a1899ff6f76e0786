/* dtype.h — element types: sizes, names, half/bfloat16 conversion and
 * generic element access (load/store through double or int64) for kernels
 * that are written once for every dtype. */
#ifndef KILN_TENSOR_DTYPE_H
#define KILN_TENSOR_DTYPE_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

bool kiln_dtype_is_valid(int dtype);
bool kiln_dtype_is_float(kiln_dtype dt);   /* f16 bf16 f32 f64 */
bool kiln_dtype_is_int(kiln_dtype dt);     /* signed or unsigned integers, not bool */
bool kiln_dtype_is_signed(kiln_dtype dt);  /* signed ints and floats */
/* Parses "f32", "float32", "float", "int64", ... ; UNDEFINED if unknown. */
kiln_dtype kiln_dtype_from_name(const char *name);

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

/* Generic element access: element i of a buffer of dtype dt.
 * Not for STRING / complex. Bool loads as 0/1. */
double kiln_load_f64(const void *data, kiln_dtype dt, int64_t i);
void kiln_store_f64(void *data, kiln_dtype dt, int64_t i, double v);
int64_t kiln_load_i64(const void *data, kiln_dtype dt, int64_t i);
void kiln_store_i64(void *data, kiln_dtype dt, int64_t i, int64_t v);
/* u64 needs its own path: values above INT64_MAX. */
uint64_t kiln_load_u64(const void *data, kiln_dtype dt, int64_t i);

#endif
