/* test_narrow_dtypes.c — float8 / float4 / int4 / int2: conversions and
 * ONNX packing.
 *
 * The truth is external or brute force, never the code under test:
 *  - every code's value, and the encodings of special and out-of-range
 *    values (saturate on and off), are ml_dtypes' / onnx.numpy_helper's,
 *    written into narrow_tables.h by gen_narrow_tables.py;
 *  - every other encoding is checked against a brute-force search for the
 *    nearest representable value (ties to the even code) over the decoded
 *    table, on each code, each midpoint between neighbours, their float32
 *    neighbours and random values;
 *  - packed protobuf bytes are written out by hand here. */
#include "check.h"
#include "narrow_tables.h"

#include "onnx/onnx.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float f32_of(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

typedef struct {
  kiln_dtype dt;
  const uint32_t *decode;
  int n;
  const uint8_t *sat, *nosat;
} narrow_case;

static const narrow_case cases[] = {
    {KILN_DTYPE_F8E4M3FN, decode_F8E4M3FN, 256, special_F8E4M3FN_sat, special_F8E4M3FN_nosat},
    {KILN_DTYPE_F8E4M3FNUZ, decode_F8E4M3FNUZ, 256, special_F8E4M3FNUZ_sat, special_F8E4M3FNUZ_nosat},
    {KILN_DTYPE_F8E5M2, decode_F8E5M2, 256, special_F8E5M2_sat, special_F8E5M2_nosat},
    {KILN_DTYPE_F8E5M2FNUZ, decode_F8E5M2FNUZ, 256, special_F8E5M2FNUZ_sat, special_F8E5M2FNUZ_nosat},
    {KILN_DTYPE_F4E2M1, decode_F4E2M1, 16, special_F4E2M1_sat, special_F4E2M1_nosat},
};

/* ---- decoding: every code -------------------------------------------------- */

static void test_decode(void) {
  for (size_t k = 0; k < KILN_ARRAY_SIZE(cases); k++) {
    const narrow_case *c = &cases[k];
    for (int code = 0; code < c->n; code++) {
      float want = f32_of(c->decode[code]), got = kiln_narrow_to_f32((uint8_t)code, c->dt);
      if (isnan(want))
        CHECK(isnan(got) && kiln_narrow_is_nan((uint8_t)code, c->dt), "%s code 0x%02x: want NaN, got %g",
              kiln_dtype_name(c->dt), code, (double)got);
      else
        CHECK(bits_of(got) == c->decode[code] && !kiln_narrow_is_nan((uint8_t)code, c->dt),
              "%s code 0x%02x: want %a, got %a", kiln_dtype_name(c->dt), code, (double)want, (double)got);
    }
  }
  for (int code = 0; code < 256; code++) {
    float want = f32_of(decode_F8E8M0[code]), got = kiln_narrow_to_f32((uint8_t)code, KILN_DTYPE_F8E8M0);
    CHECK(isnan(want) ? isnan(got) : bits_of(got) == decode_F8E8M0[code], "e8m0 code %d: want %a, got %a", code,
          (double)want, (double)got);
  }
}

/* ---- encoding: brute force ---------------------------------------------------- */

/* The nearest finite code to v (ties: the even code), from the table alone;
 * NaN/Inf codes excluded. Returns -1 when v lies beyond the largest finite
 * value by more than half a step (or exactly half with an odd largest code). */
static int nearest_code(const narrow_case *c, double v) {
  int best = -1, max_code = -1;
  double best_err = INFINITY, maxv = 0;
  for (int code = 0; code < c->n; code++) {
    float f = f32_of(c->decode[code]);
    if (!isfinite(f)) continue;
    if (f > maxv) maxv = f, max_code = code;
    if (!signbit(f) != !signbit(v) && f != 0) continue;
    double err = fabs((double)f - v);
    if (err < best_err || (err == best_err && (code & 1) == 0 && (best & 1))) best = code, best_err = err;
  }
  /* the step above the largest value: the same as the step below it */
  double below = 0;
  for (int code = 0; code < c->n; code++) {
    float f = f32_of(c->decode[code]);
    if (isfinite(f) && f < maxv && f > below) below = f;
  }
  double limit = maxv + (maxv - below) / 2;
  if (fabs(v) > limit || (fabs(v) == limit && (max_code & 1))) return -1;
  return best;
}

static void check_encoding(const narrow_case *c, float v) {
  int want = nearest_code(c, v);
  bool fnuz = c->dt == KILN_DTYPE_F8E4M3FNUZ || c->dt == KILN_DTYPE_F8E5M2FNUZ;
  uint8_t sign = c->dt == KILN_DTYPE_F4E2M1 ? 0x8 : 0x80;
  for (int sat = 0; sat < 2; sat++) {
    uint8_t got = kiln_f64_to_narrow_float(v, c->dt, sat);
    if (want >= 0) {
      uint8_t w = (uint8_t)want;
      /* zero keeps the sign where a negative zero exists */
      if (f32_of(c->decode[w]) == 0) w = (signbit(v) && !fnuz) ? sign : 0;
      CHECK(got == w, "%s(%a, saturate=%d): want 0x%02x, got 0x%02x", kiln_dtype_name(c->dt), (double)v, sat, w, got);
    } else {
      /* overflow: saturate -> +-max; else Inf (E5M2) or NaN; float4 always saturates */
      float back = kiln_narrow_to_f32(got, c->dt), maxv = 0;
      for (int code = 0; code < c->n; code++)
        if (isfinite(f32_of(c->decode[code])) && f32_of(c->decode[code]) > maxv) maxv = f32_of(c->decode[code]);
      if (sat || c->dt == KILN_DTYPE_F4E2M1)
        CHECK(back == (signbit(v) ? -maxv : maxv), "%s(%a, saturate=%d): want +-max, got 0x%02x",
              kiln_dtype_name(c->dt), (double)v, sat, got);
      else if (c->dt == KILN_DTYPE_F8E5M2)
        CHECK(isinf(back) && !signbit(back) == !signbit(v), "e5m2(%a): want Inf, got 0x%02x", (double)v, got);
      else
        CHECK(isnan(back), "%s(%a): want NaN, got 0x%02x", kiln_dtype_name(c->dt), (double)v, got);
    }
  }
}

static void test_encode(void) {
  for (size_t k = 0; k < KILN_ARRAY_SIZE(cases); k++) {
    const narrow_case *c = &cases[k];
    /* sorted distinct finite non-negative values */
    double vals[256];
    int nv = 0;
    for (int code = 0; code < c->n; code++) {
      float f = f32_of(c->decode[code]);
      if (!isfinite(f) || f < 0 || signbit(f)) continue;
      vals[nv++] = f;
    }
    for (int i = 1; i < nv; i++)
      for (int j = i; j > 0 && vals[j] < vals[j - 1]; j--) {
        double t = vals[j];
        vals[j] = vals[j - 1], vals[j - 1] = t;
      }
    for (int i = 0; i < nv; i++) {
      double step = i + 1 < nv ? vals[i + 1] - vals[i] : vals[i] - vals[i - 1];
      double probes[3] = {vals[i], vals[i] + step / 2, vals[i] + step * 0.9};
      for (int p = 0; p < 3; p++) {
        float f = (float)probes[p];
        float around[3] = {f, nextafterf(f, INFINITY), nextafterf(f, -INFINITY)};
        for (int a = 0; a < 3; a++) {
          check_encoding(c, around[a]);
          check_encoding(c, -around[a]);
        }
      }
    }
    for (int r = 0; r < 20000; r++) {
      double maxv = vals[nv - 1] * 1.3;
      float f = (float)(((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1) * maxv);
      if (r % 4 == 0) f = ldexpf(f, -(int)(rnd() % 20)); /* subnormals and small normals */
      check_encoding(c, f);
    }
    /* every finite code round-trips */
    for (int code = 0; code < c->n; code++) {
      float f = f32_of(c->decode[code]);
      if (!isfinite(f)) continue;
      CHECK(kiln_f64_to_narrow_float(f, c->dt, true) == code, "%s: code 0x%02x does not round-trip",
            kiln_dtype_name(c->dt), code);
    }
  }
}

/* ---- specials against ml_dtypes / onnx ---------------------------------------- */

static void test_specials(void) {
  for (size_t k = 0; k < KILN_ARRAY_SIZE(cases); k++) {
    const narrow_case *c = &cases[k];
    for (size_t i = 0; i < KILN_ARRAY_SIZE(special_inputs); i++) {
      float v = f32_of(special_inputs[i]);
      uint8_t s = kiln_f64_to_narrow_float(v, c->dt, true), n = kiln_f64_to_narrow_float(v, c->dt, false);
      CHECK(s == c->sat[i], "%s(%a, saturate): want 0x%02x, got 0x%02x", kiln_dtype_name(c->dt), (double)v, c->sat[i],
            s);
      CHECK(n == c->nosat[i], "%s(%a, no saturate): want 0x%02x, got 0x%02x", kiln_dtype_name(c->dt), (double)v,
            c->nosat[i], n);
    }
  }
  static const struct {
    int mode;
    const uint8_t *sat, *nosat;
  } e8[] = {{KILN_E8M0_UP, e8m0_up_sat, e8m0_up_nosat},
            {KILN_E8M0_DOWN, e8m0_down_sat, e8m0_down_nosat},
            {KILN_E8M0_NEAREST, e8m0_nearest_sat, e8m0_nearest_nosat}};
  for (size_t m = 0; m < KILN_ARRAY_SIZE(e8); m++)
    for (size_t i = 0; i < KILN_ARRAY_SIZE(e8m0_inputs); i++) {
      float v = f32_of(e8m0_inputs[i]);
      uint8_t s = kiln_f32_to_e8m0(v, true, e8[m].mode), n = kiln_f32_to_e8m0(v, false, e8[m].mode);
      CHECK(s == e8[m].sat[i] && n == e8[m].nosat[i], "e8m0(%a, mode %d): want %d/%d, got %d/%d", (double)v,
            e8[m].mode, e8[m].sat[i], e8[m].nosat[i], s, n);
    }
}

/* ---- narrow ints: element access ---------------------------------------------- */

static void test_int_access(void) {
  uint8_t b[4];
  kiln_store_i64(b, KILN_DTYPE_I4, 0, 9);  /* wraps: 9 - 16 */
  kiln_store_i64(b, KILN_DTYPE_U4, 1, -1); /* 15 */
  kiln_store_i64(b, KILN_DTYPE_I2, 2, 2);  /* -2 */
  kiln_store_i64(b, KILN_DTYPE_U2, 3, 5);  /* 1 */
  CHECK(kiln_load_i64(b, KILN_DTYPE_I4, 0) == -7 && kiln_load_i64(b, KILN_DTYPE_U4, 1) == 15 &&
            kiln_load_i64(b, KILN_DTYPE_I2, 2) == -2 && kiln_load_i64(b, KILN_DTYPE_U2, 3) == 1,
        "narrow int wrap: %lld %lld %lld %lld", (long long)kiln_load_i64(b, KILN_DTYPE_I4, 0),
        (long long)kiln_load_i64(b, KILN_DTYPE_U4, 1), (long long)kiln_load_i64(b, KILN_DTYPE_I2, 2),
        (long long)kiln_load_i64(b, KILN_DTYPE_U2, 3));
  /* float -> int4: truncation, 0 out of range (ml_dtypes) */
  static const double in[] = {7.9, -8.5, 8.0, -9.0, -0.5, NAN};
  static const int64_t want[] = {7, -8, 0, 0, 0, 0};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(in); i++) {
    kiln_store_f64(b, KILN_DTYPE_I4, 0, in[i]);
    CHECK(kiln_load_i64(b, KILN_DTYPE_I4, 0) == want[i], "int4(%g): want %lld, got %lld", in[i], (long long)want[i],
          (long long)kiln_load_i64(b, KILN_DTYPE_I4, 0));
  }
  /* a byte holding garbage (from a .npy file) still loads in range */
  b[0] = 0x7f;
  CHECK(kiln_load_i64(b, KILN_DTYPE_I4, 0) == -1 && kiln_load_i64(b, KILN_DTYPE_U2, 0) == 3, "garbage byte");
}

/* ---- ONNX packing ---------------------------------------------------------------- */

/* Does buf contain the bytes of want? */
static bool contains(const uint8_t *buf, size_t n, const uint8_t *want, size_t wn) {
  for (size_t i = 0; i + wn <= n; i++)
    if (!memcmp(buf + i, want, wn)) return true;
  return false;
}

static void check_packing(kiln_dtype dt, const int8_t *vals, int64_t n, const uint8_t *packed, size_t np) {
  kiln_tensor *t = NULL;
  if (!ok(kiln_tensor_new(dt, 1, &n, &t), "new")) return;
  for (int64_t i = 0; i < n; i++) ((int8_t *)t->data)[i] = vals[i];
  uint8_t *buf = NULL;
  size_t size = 0;
  if (ok(kiln_onnx_serialize_tensor(t, "w", &buf, &size), "serialize")) {
    uint8_t raw[16] = {0x4a, (uint8_t)np}; /* raw_data (field 9, LEN) */
    memcpy(raw + 2, packed, np);
    CHECK(contains(buf, size, raw, np + 2), "%s [%lld]: packed raw_data not as expected", kiln_dtype_name(dt),
          (long long)n);
    kiln_tensor *back = NULL;
    if (ok(kiln_onnx_parse_tensor(buf, size, NULL, &back), "parse")) {
      CHECK(back->dtype == dt && back->numel == n && !memcmp(back->data, t->data, (size_t)n),
            "%s [%lld]: does not read back", kiln_dtype_name(dt), (long long)n);
      kiln_tensor_release(back);
    }
    free(buf);
  }
  kiln_tensor_release(t);
}

static void test_packing(void) {
  static const int8_t i4[] = {-8, -1, 0, 7, 3};
  check_packing(KILN_DTYPE_I4, i4, 5, (const uint8_t[]){0xf8, 0x70, 0x03}, 3);
  static const int8_t u4[] = {15, 1, 9};
  check_packing(KILN_DTYPE_U4, u4, 3, (const uint8_t[]){0x1f, 0x09}, 2);
  static const int8_t f4[] = {0x7, 0xf, 0x8};
  check_packing(KILN_DTYPE_F4E2M1, f4, 3, (const uint8_t[]){0xf7, 0x08}, 2);
  static const int8_t u2[] = {0, 1, 2, 3, 3, 2, 1};
  check_packing(KILN_DTYPE_U2, u2, 7, (const uint8_t[]){0xe4, 0x1b}, 2);
  static const int8_t i2[] = {-2, 1, -1};
  check_packing(KILN_DTYPE_I2, i2, 3, (const uint8_t[]){0x36}, 1);
  static const int8_t f8[] = {0x7e, (int8_t)0x80, 0x01};
  check_packing(KILN_DTYPE_F8E4M3FN, f8, 3, (const uint8_t[]){0x7e, 0x80, 0x01}, 3);

  /* int32_data: one packed byte per entry */
  static const uint8_t typed[] = {0x08, 0x03, 0x10, 22, 0x2a, 0x02, 0x21, 0x0d}; /* int4 [3], {0x21, 0x0d} */
  kiln_tensor *t = NULL;
  if (ok(kiln_onnx_parse_tensor(typed, sizeof typed, NULL, &t), "int4 int32_data")) {
    const int8_t *d = t->data;
    CHECK(t->numel == 3 && d[0] == 1 && d[1] == 2 && d[2] == -3, "int4 int32_data: got %d %d %d", d[0], d[1], d[2]);
    kiln_tensor_release(t);
  }
}

/* ---- bad input ----------------------------------------------------------------- */

static void expect_error(const uint8_t *p, size_t n, const char *needle, const char *what) {
  kiln_tensor *t = NULL;
  kiln_status_t st = kiln_onnx_parse_tensor(p, n, NULL, &t);
  CHECK(st && strstr(kiln_status_message(st), needle), "%s: want an error with \"%s\", got \"%s\"", what, needle,
        st ? kiln_status_message(st) : "success");
  kiln_status_free(st);
  kiln_tensor_release(t);
}

static void test_bad_input(void) {
  /* int4 [3] named "w" whose raw_data has 1 byte: the padding nibble's byte is missing */
  static const uint8_t odd[] = {0x08, 0x03, 0x10, 22, 0x42, 0x01, 'w', 0x4a, 0x01, 0x21};
  expect_error(odd, sizeof odd, "raw_data holds 1 bytes but i4 [3] needs 2", "odd int4 raw_data");
  expect_error(odd, sizeof odd, "'w'", "odd int4 raw_data names the tensor");
  /* uint2 [5]: needs 2 bytes */
  static const uint8_t u2[] = {0x08, 0x05, 0x10, 25, 0x4a, 0x01, 0xff};
  expect_error(u2, sizeof u2, "needs 2", "short uint2 raw_data");
  /* int4 [3] with one int32_data entry (needs 2) and one above a byte */
  static const uint8_t few[] = {0x08, 0x03, 0x10, 22, 0x28, 0x21};
  expect_error(few, sizeof few, "int32_data holds 1 values", "short int4 int32_data");
  static const uint8_t big[] = {0x08, 0x02, 0x10, 22, 0x28, 0x80, 0x02};
  expect_error(big, sizeof big, "does not fit a byte", "int4 int32_data entry above 255");
  /* float8 [2] with 3 raw bytes */
  static const uint8_t f8[] = {0x08, 0x02, 0x10, 17, 0x4a, 0x03, 0, 0, 0};
  expect_error(f8, sizeof f8, "needs 2", "float8 raw_data size");
  /* a dtype past the known ones */
  static const uint8_t unk[] = {0x08, 0x01, 0x10, 40, 0x4a, 0x01, 0};
  expect_error(unk, sizeof unk, "unknown dtype 40", "unknown dtype");
}

int main(void) {
  test_decode();
  test_encode();
  test_specials();
  test_int_access();
  test_packing();
  test_bad_input();
  printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
