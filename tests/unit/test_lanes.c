/* The precompiled tier's lane loops (devices/cpu/interp/lanes.h) against
 * plain scalar C, in every build this CPU can run (portable, AVX2,
 * AVX-512): int64 division and remainder by a constant (negative
 * lanes, past 2^53, divisors 1 and large), the fused multiply-add and
 * clamp (NaN, signed zeros, operands as scalars), QuantizeLinear's
 * rounding (ties, saturation, NaN, per-lane scales), f32 folds of every
 * kind (NaN anywhere), and the Softmax / LayerNorm row routines against
 * float64, and the f16 / bf16 storage conversions bit for bit against
 * tensor/dtype.h's. Random inputs from a fixed seed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "devices/cpu/interp/lanes.h"
#include "tensor/dtype.h"

static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      if (failures < 40) {                        \
        printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__);                      \
        printf("\n");                             \
      }                                           \
      failures++;                                 \
    }                                             \
  } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static float next_f(float scale) { return ((float)(next_u64() >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale; }

#define N 300 /* not a multiple of any vector width */

static bool same_f(float a, float b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

static void check_idiv(const kiln_lanes_ops *ops) {
  const int64_t divisors[] = {1, 3, 7, 91, 576, 40000, INT64_C(1) << 40, INT64_C(9007199254740993)};
  int64_t x[N], o[N];
  for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++) {
    int64_t y = divisors[d];
    for (int round = 0; round < 3; round++) {
      for (int l = 0; l < N; l++) {
        uint64_t r = next_u64();
        /* round 0: small indices, 1: up to 2^53 either sign, 2: anything */
        x[l] = round == 0 ? (int64_t)(r % 1000000) - 1000 : round == 1 ? (int64_t)(r >> 10) - (INT64_C(1) << 53)
                                                                        : (int64_t)r;
        if (l % 17 == 0) x[l] = (l / 17) * y - (l % 2); /* exact multiples and one below */
        if (x[l] == INT64_MIN) x[l]++;
      }
      for (int op = 0; op < 2; op++) {
        te_op top = op ? TE_MOD : TE_DIV;
        ops->binary(top, KILN_DTYPE_I64, N, o, x, 0, &y, 1);
        for (int l = 0; l < N; l++) {
          int64_t want = op ? x[l] % y : x[l] / y;
          CHECK(o[l] == want, "%s: %lld %s %lld = %lld, want %lld", ops->name, (long long)x[l], op ? "%" : "/",
                (long long)y, (long long)o[l], (long long)want);
        }
      }
    }
  }
}

static void check_muladd_clamp(const kiln_lanes_ops *ops) {
  float a[N], b[N], c[N], o[N];
  for (int l = 0; l < N; l++) {
    a[l] = next_f(4.0f);
    b[l] = next_f(2.0f);
    c[l] = next_f(1.0f);
  }
  a[5] = NAN, a[6] = -0.0f, a[7] = 0.0f, a[8] = 6.0f, a[9] = -INFINITY, a[10] = INFINITY;
  for (int shape = 0; shape < 8; shape++) {
    int as = shape & 1, bs = shape >> 1 & 1, cs = shape >> 2 & 1;
    ops->muladd(N, o, a, as, b, bs, c, cs);
    for (int l = 0; l < N; l++) {
      float want = (float)((double)a[as ? 0 : l] * b[bs ? 0 : l] + c[cs ? 0 : l]);
      float got = o[l];
      bool ok = (isnan(want) && isnan(got)) || got == want || fabsf(got - want) <= 1e-6f * (1.0f + fabsf(want));
      CHECK(ok, "%s: muladd shape %d lane %d: %g, want %g", ops->name, shape, l, got, want);
    }
  }
  const float bounds[][2] = {{0.0f, 6.0f}, {-1.0f, 1.0f}, {0.0f, 0.0f}, {-INFINITY, 0.5f}};
  for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
    float lo = bounds[k][0], hi = bounds[k][1];
    ops->clamp(N, o, a, lo, hi);
    for (int l = 0; l < N; l++) {
      /* the expression it stands for: min(max(a, lo), hi), a NaN operand winning */
      float x = a[l];
      x = (x != x || x > lo) ? x : lo;
      float want = (x != x || x < hi) ? x : hi;
      CHECK(same_f(o[l], want), "%s: clamp(%g, %g, %g) = %g, want %g", ops->name, a[l], lo, hi, o[l], want);
    }
  }
}

static void check_quantize(const kiln_lanes_ops *ops) {
  float v[N], s[N], z[N];
  uint8_t o[N];
  for (int l = 0; l < N; l++) {
    v[l] = next_f(60.0f);
    s[l] = 0.05f + (float)(l % 7) * 0.1f;
    z[l] = (float)(l % 5) - 2.0f;
  }
  v[3] = NAN, v[4] = 2.5f * 0.05f, v[5] = -1e30f, v[6] = 1e30f, v[7] = INFINITY;
  for (int to = 0; to < 2; to++) {
    kiln_dtype dt = to ? KILN_DTYPE_U8 : KILN_DTYPE_I8;
    float lo = to ? 0.0f : -128.0f, hi = to ? 255.0f : 127.0f;
    for (int shape = 0; shape < 4; shape++) { /* scale and zero point scalars or lanes */
      int ss = shape & 1, zs = shape >> 1;
      float zz[N];
      for (int l = 0; l < N; l++) zz[l] = to ? z[l] + 3.0f : z[l];
      ops->quantize(dt, N, o, v, 0, s, ss, zz, zs);
      for (int l = 0; l < N; l++) {
        float zp = zz[zs ? 0 : l], r = nearbyintf(v[l] / s[ss ? 0 : l]), q = r + zp;
        q = q < lo ? lo : q > hi ? hi : q;
        float want = isnan(r) ? zp : q;
        float got = to ? (float)o[l] : (float)(int8_t)o[l];
        CHECK(got == want, "%s: quantize %s shape %d lane %d (%g): %g, want %g", ops->name, to ? "u8" : "i8", shape,
              l, v[l], got, want);
      }
    }
  }
}

static void check_fold(const kiln_lanes_ops *ops) {
  const int lens[] = {16, 17, 31, 64, 77, 512};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    int n = lens[li], rows = 3;
    float x[3 * 512];
    for (int i = 0; i < rows * n; i++) x[i] = next_f(3.0f);
    x[1 * n + n / 2] = NAN; /* row 1 has a NaN in the middle */
    for (int rop = TE_RSUM; rop <= TE_RMIN; rop++) {
      float out[3];
      for (int r = 0; r < rows; r++) out[r] = rop == TE_RPROD ? 1.0f : rop == TE_RSUM ? 0.0f : x[r * n];
      float init[3];
      memcpy(init, out, sizeof init);
      ops->fold((te_reduce_op)rop, KILN_DTYPE_F32, rows, n, x, out);
      for (int r = 0; r < rows; r++) {
        double want = init[r];
        bool nan = false;
        for (int j = 0; j < n; j++) {
          float y = x[r * n + j];
          nan |= isnan(y);
          if (rop == TE_RSUM) want += y;
          else if (rop == TE_RPROD) want *= y;
          else if (rop == TE_RMAX) want = y > want ? y : want;
          else want = y < want ? y : want;
        }
        if (nan) {
          CHECK(isnan(out[r]), "%s: fold %d of %d with a NaN: %g", ops->name, rop, n, out[r]);
        } else {
          double tol = rop == TE_RPROD ? 1e-4 * fabs(want) + 1e-30 : 1e-5 * (1.0 + fabs(want)) * (rop == TE_RSUM ? n : 1);
          CHECK(fabs(out[r] - want) <= tol, "%s: fold %d over %d row %d: %g, want %g", ops->name, rop, n, r, out[r],
                want);
        }
      }
    }
  }
}

static void check_rows(const kiln_lanes_ops *ops) {
  const int64_t lens[] = {1, 5, 16, 64, 129, 768};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    int64_t n = lens[li], rows = 4;
    float *x = malloc((size_t)(rows * n) * sizeof *x), *y = malloc((size_t)(rows * n) * sizeof *y);
    float *g = malloc((size_t)n * sizeof *g), *b = malloc((size_t)n * sizeof *b);
    for (int64_t i = 0; i < rows * n; i++) x[i] = next_f(8.0f) + (i / n == 2 ? 100.0f : 0.0f); /* a row offset */
    for (int64_t j = 0; j < n; j++) g[j] = next_f(2.0f), b[j] = next_f(1.0f);
    for (int log = 0; log < 2; log++) {
      ops->softmax_rows(0, rows, n, y, x, log);
      for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) mx = fmax(mx, x[r * n + j]);
        for (int64_t j = 0; j < n; j++) sum += exp((double)x[r * n + j] - mx);
        for (int64_t j = 0; j < n; j++) {
          double want = log ? x[r * n + j] - mx - log1p(sum - 1) : exp(x[r * n + j] - mx) / sum;
          /* x - max rounds in f32 at x's magnitude (row 2 is offset by 100) */
          double tol = 2e-6 * (1 + fabs(want)) + (log ? 4e-7 * fabs(x[r * n + j]) : 0);
          CHECK(fabs(y[r * n + j] - want) <= tol, "%s: %ssoftmax of %lld, row %lld: %g, want %g",
                ops->name, log ? "log" : "", (long long)n, (long long)r, y[r * n + j], want);
        }
      }
    }
    for (int bias = 0; bias < 2; bias++) {
      ops->layernorm_rows(0, rows, n, y, x, g, bias ? b : NULL, 1e-5f);
      for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++) mean += x[r * n + j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
        double inv = 1.0 / sqrt(var / (double)n + 1e-5);
        for (int64_t j = 0; j < n; j++) {
          double want = (x[r * n + j] - mean) * inv * g[j] + (bias ? b[j] : 0);
          CHECK(fabs(y[r * n + j] - want) <= 2e-4 * (1 + fabs(want)), "%s: layernorm of %lld, row %lld: %g, want %g",
                ops->name, (long long)n, (long long)r, y[r * n + j], want);
        }
      }
    }
    free(x), free(y), free(g), free(b);
  }
}

/* ArgMax/ArgMin rows against ref's rule (ops/reduce.c's arg_compare):
 * NaN beats every number, ties go to the first (last) position. Rows
 * with ties (values from a small set), NaNs, infinities, every length
 * around the 16-lane block. */
static void check_arg_rows(const kiln_lanes_ops *ops) {
  const float pool[] = {-2.0f, -1.0f, 0.0f, 1.0f, 2.0f, INFINITY, -INFINITY};
  for (int64_t n = 1; n <= 70; n += (n < 34 ? 1 : 9)) {
    int64_t rows = 6;
    float *x = malloc((size_t)(rows * n) * sizeof *x);
    int64_t y[6];
    for (int trial = 0; trial < 4; trial++) {
      for (int64_t i = 0; i < rows * n; i++) {
        float v = trial == 0 ? next_f(8.0f) : pool[(int)((next_f(1.0f) + 1.0f) * 3.4f) % 7];
        if (trial >= 2 && next_f(1.0f) > 0.8f) v = NAN;
        x[i] = v;
      }
      for (int mode = 0; mode < 4; mode++) {
        bool max = mode & 1, last = mode & 2;
        ops->arg_rows(0, rows, n, y, x, max, last);
        for (int64_t r = 0; r < rows; r++) {
          const float *p = x + r * n;
          int64_t best = 0;
          for (int64_t k = 1; k < n; k++) {
            float a = p[k], b = p[best];
            int c = isnan(a) || isnan(b) ? (isnan(a) && isnan(b) ? 0 : isnan(a) ? 1 : -1)
                                         : a == b ? 0 : ((a > b) == max ? 1 : -1);
            if (c > 0 || (c == 0 && last)) best = k;
          }
          CHECK(y[r] == best, "%s: arg%s%s over %lld, trial %d row %lld: %lld, want %lld", ops->name,
                max ? "max" : "min", last ? " (last)" : "", (long long)n, trial, (long long)r, (long long)y[r],
                (long long)best);
        }
      }
    }
    free(x);
  }
}

/* f16 / bf16 storage conversions (kiln_math.h's helpers, which generated C
 * calls too) against tensor/dtype.h's: every half to f32 and back, and f32s
 * around every rounding case (ties, subnormals, overflow, NaN payloads),
 * bit for bit. */
static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static void check_halves(const kiln_lanes_ops *ops) {
  static uint16_t h[65536], back[65536];
  static float f[65536];
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (int k = 0; k < 2; k++) {
    kiln_dtype dt = k ? KILN_DTYPE_BF16 : KILN_DTYPE_F16;
    ops->cast(KILN_DTYPE_F32, dt, 65536, f, h);
    ops->cast(dt, KILN_DTYPE_F32, 65536, back, f);
    for (int i = 0; i < 65536; i++) {
      float want = k ? kiln_bf16_to_f32(h[i]) : kiln_f16_to_f32(h[i]);
      CHECK(f32_bits(f[i]) == f32_bits(want), "%s %s -> f32 of 0x%04x: 0x%08x, want 0x%08x", ops->name,
            kiln_dtype_name(dt), i, f32_bits(f[i]), f32_bits(want));
      uint16_t rt = k ? kiln_f32_to_bf16(want) : kiln_f32_to_f16(want);
      CHECK(back[i] == rt, "%s f32 -> %s of 0x%08x: 0x%04x, want 0x%04x", ops->name, kiln_dtype_name(dt),
            f32_bits(want), back[i], rt);
    }
    /* f32s between the halves: every low-bit pattern near a rounding boundary, and random bits */
    for (int i = 0; i < 65536; i++) {
      uint32_t u = ((uint32_t)i << 16) | (uint32_t)(i & 7 ? next_u64() & 0xffff : (i & 8 ? 0x8000 : 0x1000));
      if (!k) u = ((uint32_t)i << 16) ^ (uint32_t)(next_u64() & 0x1fff) ^ (i & 1 ? 0x1000u : 0u);
      memcpy(&f[i], &u, 4);
    }
    ops->cast(dt, KILN_DTYPE_F32, 65536, back, f);
    for (int i = 0; i < 65536; i++) {
      uint16_t want = k ? kiln_f32_to_bf16(f[i]) : kiln_f32_to_f16(f[i]);
      CHECK(back[i] == want, "%s f32 -> %s of 0x%08x: 0x%04x, want 0x%04x", ops->name, kiln_dtype_name(dt),
            f32_bits(f[i]), back[i], want);
    }
  }
}

int main(void) {
  const kiln_lanes_ops *tables[] = {&kiln_lanes_generic, &kiln_lanes_avx2, &kiln_lanes_avx512};
  const kiln_cpu_features *f = kiln_cpu_features_get();
  int ran = 0;
  for (int t = 0; t < 3; t++) {
    const kiln_lanes_ops *ops = tables[t];
    if (!ops->name) continue;
    if (t == 1 && !(f->avx2 && f->fma)) continue;
    if (t == 2 && !(f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl)) continue;
    check_idiv(ops);
    check_muladd_clamp(ops);
    check_quantize(ops);
    check_fold(ops);
    check_rows(ops);
    check_arg_rows(ops);
    check_halves(ops);
    printf("lanes %s: checked\n", ops->name);
    ran++;
  }
  CHECK(ran >= 1, "no lane table ran");
  if (failures) {
    printf("test_lanes: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_lanes: all passed (%d builds)\n", ran);
  return 0;
}
