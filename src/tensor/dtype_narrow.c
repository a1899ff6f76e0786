/* dtype_narrow.c — float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0) and
 * float4 (E2M1) codes <-> values.
 *
 * One table row per format says where its exponent and mantissa are and
 * which special values it has; decoding and round-to-nearest-even encoding
 * are written once over that row. Elements are one byte each in memory (see
 * dtype.h); ONNX's packing of float4 is the protobuf code's business. */
#include "tensor/dtype.h"

#include <math.h>

typedef enum {
  SPECIAL_IEEE,    /* E5M2: Inf at exponent all-ones and mantissa 0, NaN otherwise */
  SPECIAL_FN,      /* E4M3FN: no Inf; NaN only at S.1111.111 */
  SPECIAL_FNUZ,    /* no Inf, no -0: the code 0x80 is the only NaN */
  SPECIAL_NONE,    /* E2M1: every code is a finite number */
} special_kind;

typedef struct {
  int mbits, bias;
  special_kind special;
  uint8_t max_code; /* largest finite positive code */
  uint8_t sign_bit;
} narrow_format;

static const narrow_format *format_of(kiln_dtype dt) {
  static const narrow_format e4m3fn = {3, 7, SPECIAL_FN, 0x7e, 0x80};
  static const narrow_format e4m3fnuz = {3, 8, SPECIAL_FNUZ, 0x7f, 0x80};
  static const narrow_format e5m2 = {2, 15, SPECIAL_IEEE, 0x7b, 0x80};
  static const narrow_format e5m2fnuz = {2, 16, SPECIAL_FNUZ, 0x7f, 0x80};
  static const narrow_format e2m1 = {1, 1, SPECIAL_NONE, 0x7, 0x8};
  switch (dt) {
    case KILN_DTYPE_F8E4M3FN: return &e4m3fn;
    case KILN_DTYPE_F8E4M3FNUZ: return &e4m3fnuz;
    case KILN_DTYPE_F8E5M2: return &e5m2;
    case KILN_DTYPE_F8E5M2FNUZ: return &e5m2fnuz;
    case KILN_DTYPE_F4E2M1: return &e2m1;
    default: return NULL;
  }
}

bool kiln_narrow_is_nan(uint8_t code, kiln_dtype dt) {
  if (dt == KILN_DTYPE_F8E8M0) return code == 0xff;
  const narrow_format *f = format_of(dt);
  if (!f) return false;
  uint8_t mag = code & (uint8_t)(f->sign_bit - 1);
  switch (f->special) {
    case SPECIAL_IEEE: return (mag >> f->mbits) == (f->sign_bit - 1) >> f->mbits && (mag & ((1 << f->mbits) - 1));
    case SPECIAL_FN: return mag == f->sign_bit - 1;
    case SPECIAL_FNUZ: return code == 0x80;
    default: return false;
  }
}

/* The value of a finite positive magnitude code (exponent and mantissa bits). */
static double magnitude(const narrow_format *f, unsigned mag) {
  unsigned e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
  if (e == 0) return ldexp((double)m, 1 - f->bias - f->mbits);
  return ldexp((double)((1u << f->mbits) | m), (int)e - f->bias - f->mbits);
}

float kiln_narrow_to_f32(uint8_t code, kiln_dtype dt) {
  if (dt == KILN_DTYPE_F8E8M0) return code == 0xff ? NAN : (float)ldexp(1.0, (int)code - 127);
  const narrow_format *f = format_of(dt);
  if (!f) return 0.0f;
  if (kiln_narrow_is_nan(code, dt)) return (code & f->sign_bit) && f->special != SPECIAL_FNUZ ? -NAN : NAN;
  unsigned mag = code & (f->sign_bit - 1u);
  bool neg = (code & f->sign_bit) != 0;
  if (f->special == SPECIAL_IEEE && (mag >> f->mbits) == ((f->sign_bit - 1u) >> f->mbits))
    return neg ? -INFINITY : INFINITY;
  double v = magnitude(f, mag);
  return (float)(neg ? -v : v);
}

uint8_t kiln_f64_to_narrow_float(double v, kiln_dtype dt, bool saturate) {
  const narrow_format *f = format_of(dt);
  if (!f) return dt == KILN_DTYPE_F8E8M0 ? kiln_f32_to_e8m0((float)v, saturate, KILN_E8M0_UP) : 0;
  uint8_t sign = signbit(v) ? f->sign_bit : 0;
  uint8_t nan_code = f->special == SPECIAL_FNUZ ? 0x80 : f->special == SPECIAL_FN ? (uint8_t)(0x7f | sign)
                                                                                   : (uint8_t)(0x7e | sign);
  if (isnan(v)) return f->special == SPECIAL_NONE ? (uint8_t)(sign ^ f->sign_bit) : nan_code;
  double a = fabs(v), max = magnitude(f, f->max_code);
  /* Beyond the range: saturate, or Inf (E5M2) / NaN. float4 always saturates. */
  uint8_t overflow = saturate || f->special == SPECIAL_NONE ? (uint8_t)(f->max_code | sign)
                     : f->special == SPECIAL_IEEE           ? (uint8_t)(0x7c | sign)
                                                            : nan_code;
  if (isinf(a)) return overflow;
  /* Round to the grid: the quantum is 2^(e - mbits) for a normal of exponent
   * e, fixed at the smallest normal's below it (subnormals). */
  int emin = 1 - f->bias, e;
  frexp(a, &e);
  e -= 1; /* a = 1.xxx * 2^e */
  if (e < emin) e = emin;
  double r = ldexp(nearbyint(ldexp(a, f->mbits - e)), e - f->mbits);
  if (r > max) return overflow;
  if (r == 0) return f->special == SPECIAL_FNUZ ? 0 : sign;
  frexp(r, &e);
  e -= 1;
  unsigned code;
  if (e < emin) {
    code = (unsigned)ldexp(r, f->bias - 1 + f->mbits); /* subnormal: exponent field 0 */
  } else {
    unsigned m = (unsigned)ldexp(r, f->mbits - e) - (1u << f->mbits);
    code = ((unsigned)(e + f->bias) << f->mbits) | m;
  }
  return (uint8_t)(code | sign);
}

/* E8M0 is a bare biased exponent 2^(code-127); 0xff is NaN. Negative inputs
 * are unspecified in ONNX: their magnitude is used. */
uint8_t kiln_f32_to_e8m0(float v, bool saturate, int round_mode) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  unsigned exp = (bits >> 23) & 0xff;
  uint32_t frac = bits & 0x7fffff;
  if (exp == 0xff) return 0xff;
  bool up = false;
  if (round_mode == KILN_E8M0_UP) {
    up = frac != 0;
  } else if (round_mode == KILN_E8M0_NEAREST) {
    /* Halfway or more rounds up; exactly half rounds up unless the result
     * would stay at exponent 0 (ties to the "even" neighbour). */
    bool g = (frac & 0x400000) != 0, r = (frac & 0x200000) != 0, s = (frac & 0x1fffff) != 0;
    up = g && (r || s || exp > 0);
  }
  if (up) {
    if (exp == 0xfe) return saturate ? 0xfe : 0xff;
    exp++;
  }
  return (uint8_t)exp;
}
