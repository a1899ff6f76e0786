/* cpu_pool_impl.h — the loops of kiln_rt.pooling (cpu_pool.c), included
 * once per instruction set with POOL_FN naming its copy (a target pragma
 * around the AVX2 one). Each pass reduces one axis of a [outer, len,
 * inner] block over the window; max keeps NaN as TE_RMAX does
 * ((v != v || v > acc) ? v : acc), sums add in window order from 0. Where
 * every tap of an output is inside the input, an output's taps are
 * combined in registers and stored once (3 taps unrolled: the common
 * window), so short rows (13 pixels) are not K read-modify-write passes. */

#ifndef POOL_OP
#define POOL_OP(max, acc, v) ((max) ? (((v) != (v) || (v) > (acc)) ? (v) : (acc)) : (acc) + (v))
#endif

/* Eight floats as a GCC/clang vector (AVX2's ymm in that copy, two SSE
 * registers in the portable one). */
#ifndef POOL_VEC_TYPES
#define POOL_VEC_TYPES
typedef float pool_v8 __attribute__((vector_size(32)));
typedef int32_t pool_i8 __attribute__((vector_size(32)));
/* The even and the odd lanes of the 16 floats u, w. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define POOL_EVEN(u, w) __builtin_shufflevector((u), (w), 0, 2, 4, 6, 8, 10, 12, 14)
#define POOL_ODD(u, w) __builtin_shufflevector((u), (w), 1, 3, 5, 7, 9, 11, 13, 15)
#else
#define POOL_EVEN(u, w) __builtin_shuffle((u), (w), (pool_i8){0, 2, 4, 6, 8, 10, 12, 14})
#define POOL_ODD(u, w) __builtin_shuffle((u), (w), (pool_i8){1, 3, 5, 7, 9, 11, 13, 15})
#endif
/* POOL_OP on eight lanes: max keeps a NaN v, as TE_RMAX does. Macros,
 * not functions: a vector passed by value is an ABI question (clang
 * refuses it in the portable copy), and acc and v here are variables. */
#define POOL_V8_OP(max, acc, v)                                                                                  \
  ((max) ? (pool_v8)((((pool_i8)(v)) & (((v) != (v)) | ((v) > (acc)))) |                                        \
                     (((pool_i8)(acc)) & ~(((v) != (v)) | ((v) > (acc)))))                                       \
         : (acc) + (v))
#endif

/* The interior of a stride-2 row of 2 or 3 taps (dilation 1), eight
 * outputs at a time: the taps are the even and odd lanes of contiguous
 * loads, so no strided gather (the plain loop was 70% of a 2x2 MaxPool's
 * time). Tap order and NaN rule as POOL_OP's; returns the first output
 * left to the scalar loop. Reads in[2o .. 2o + K - 1] only. */
static inline __attribute__((always_inline)) int64_t POOL_FN(stride2_vec)(const float *in, float *out, int64_t lo,
                                                                         int64_t hi, int64_t K, const bool max) {
  const float init = max ? -INFINITY : 0.0f;
  const pool_v8 vinit = {init, init, init, init, init, init, init, init};
  int64_t o = lo;
  for (; o + 8 <= hi; o += 8) {
    const float *p = in + 2 * o;
    pool_v8 u, w, t, acc;
    __builtin_memcpy(&u, p, sizeof u);
    __builtin_memcpy(&w, p + 8, sizeof w);
    t = POOL_EVEN(u, w);
    acc = POOL_V8_OP(max, vinit, t);
    if (K == 2) {
      t = POOL_ODD(u, w);
      acc = POOL_V8_OP(max, acc, t);
    } else { /* taps 1 and 2: the even and odd lanes of in[2o + 1 ...], read up to 2o + 16 */
      __builtin_memcpy(&u, p + 1, sizeof u);
      __builtin_memcpy(&w, p + 9, sizeof w);
      t = POOL_EVEN(u, w);
      acc = POOL_V8_OP(max, acc, t);
      t = POOL_ODD(u, w);
      acc = POOL_V8_OP(max, acc, t);
    }
    __builtin_memcpy(out + o, &acc, sizeof acc);
  }
  return o;
}

/* A 2x2 window of stride 2 over a plane whose every window is inside it
 * (no padding), both axes in one pass: each output row reads its two input
 * rows once, eight outputs at a time from their even and odd lanes (the
 * two separable passes wrote and reread a half-size plane, and their row
 * loops cost more than the work on small planes: small_cnn's 2x2 pools of
 * [16, 32, 32]). The same taps and order as the passes: each row's pair
 * (tap 0 then 1), then row 0's result and row 1's. */
static inline __attribute__((always_inline)) void POOL_FN(body_2x2s2)(const float *x, float *y, int64_t W,
                                                                     int64_t OH, int64_t OW, const bool max) {
  const float init = max ? -INFINITY : 0.0f;
  const pool_v8 vinit = {init, init, init, init, init, init, init, init};
  for (int64_t oh = 0; oh < OH; oh++) {
    const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
    float *out = y + oh * OW;
    int64_t o = 0;
    for (; o + 8 <= OW; o += 8) {
      pool_v8 u, w, t, a0, a1, acc;
      /* One input row's pairs: the even tap, then the odd one. */
#define POOL_ROW_PAIRS(row, dst)                     \
  do {                                               \
    __builtin_memcpy(&u, (row) + 2 * o, sizeof u);   \
    __builtin_memcpy(&w, (row) + 2 * o + 8, sizeof w); \
    t = POOL_EVEN(u, w);                             \
    dst = POOL_V8_OP(max, vinit, t);                 \
    t = POOL_ODD(u, w);                              \
    dst = POOL_V8_OP(max, dst, t);                   \
  } while (0)
      POOL_ROW_PAIRS(r0, a0);
      POOL_ROW_PAIRS(r1, a1);
#undef POOL_ROW_PAIRS
      acc = POOL_V8_OP(max, vinit, a0);
      acc = POOL_V8_OP(max, acc, a1);
      __builtin_memcpy(out + o, &acc, sizeof acc);
    }
    for (; o < OW; o++) {
      float a0 = init, a1 = init, acc = init;
      a0 = POOL_OP(max, a0, r0[2 * o]);
      a0 = POOL_OP(max, a0, r0[2 * o + 1]);
      a1 = POOL_OP(max, a1, r1[2 * o]);
      a1 = POOL_OP(max, a1, r1[2 * o + 1]);
      acc = POOL_OP(max, acc, a0);
      out[o] = POOL_OP(max, acc, a1);
    }
  }
}

static void POOL_FN(plane_2x2s2)(const float *x, float *y, int64_t W, int64_t OH, int64_t OW, bool max) {
  if (max) POOL_FN(body_2x2s2)(x, y, W, OH, OW, true);
  else POOL_FN(body_2x2s2)(x, y, W, OH, OW, false);
}

/* Along the innermost axis (inner = 1): dst[r][o] over src[r][...], for
 * rows r < outer. Tap k reads inside the input for outputs [lo[k], hi[k]). */
static inline __attribute__((always_inline)) void POOL_FN(last_body)(const float *src, float *dst, int64_t outer,
                                                                    int64_t len_in, int64_t len_out,
                                                                    const pool_axis *ax, const bool max) {
  const int64_t s = ax->stride, d = ax->dilation, K = ax->kernel;
  const float init = max ? -INFINITY : 0.0f;
  int64_t lo_all = 0, hi_all = len_out;
  for (int64_t k = 0; k < K; k++) {
    lo_all = ax->lo[k] > lo_all ? ax->lo[k] : lo_all;
    hi_all = ax->hi[k] < hi_all ? ax->hi[k] : hi_all;
  }
  if (hi_all < lo_all) hi_all = lo_all;
  for (int64_t r = 0; r < outer; r++) {
    const float *in = src + r * len_in - ax->pad_begin;
    float *out = dst + r * len_out;
    /* the borders: taps checked one by one */
    for (int64_t o = 0; o < len_out; o++) {
      if (o == lo_all) o = hi_all;
      if (o >= len_out) break;
      float acc = init;
      for (int64_t k = 0; k < K; k++)
        if (o >= ax->lo[k] && o < ax->hi[k]) {
          float v = in[o * s + k * d];
          acc = POOL_OP(max, acc, v);
        }
      out[o] = acc;
    }
    /* the interior */
    if (K == 3 && s == 1) {
      for (int64_t o = lo_all; o < hi_all; o++) {
        float a0 = in[o], a1 = in[o + d], a2 = in[o + 2 * d], acc = init;
        acc = POOL_OP(max, acc, a0);
        acc = POOL_OP(max, acc, a1);
        out[o] = POOL_OP(max, acc, a2);
      }
    } else if (K == 3 && s == 2) {
      int64_t o0 = d == 1 ? POOL_FN(stride2_vec)(in, out, lo_all, hi_all, 3, max) : lo_all;
      for (int64_t o = o0; o < hi_all; o++) {
        float a0 = in[2 * o], a1 = in[2 * o + d], a2 = in[2 * o + 2 * d], acc = init;
        acc = POOL_OP(max, acc, a0);
        acc = POOL_OP(max, acc, a1);
        out[o] = POOL_OP(max, acc, a2);
      }
    } else if (K == 2 && s == 2) {
      int64_t o0 = d == 1 ? POOL_FN(stride2_vec)(in, out, lo_all, hi_all, 2, max) : lo_all;
      for (int64_t o = o0; o < hi_all; o++) {
        float a0 = in[2 * o], a1 = in[2 * o + d], acc = init;
        acc = POOL_OP(max, acc, a0);
        out[o] = POOL_OP(max, acc, a1);
      }
    } else {
      for (int64_t o = lo_all; o < hi_all; o++) out[o] = init;
      for (int64_t k = 0; k < K; k++) {
        const float *at = in + k * d;
        if (s == 1) {
          for (int64_t o = lo_all; o < hi_all; o++) {
            float v = at[o];
            out[o] = POOL_OP(max, out[o], v);
          }
        } else {
          for (int64_t o = lo_all; o < hi_all; o++) {
            float v = at[o * s];
            out[o] = POOL_OP(max, out[o], v);
          }
        }
      }
    }
  }
}

/* Along a middle axis: dst[r][o][j] over src[r][pos][j], j < inner (one
 * contiguous row of the axes after it per tap). */
static inline __attribute__((always_inline)) void POOL_FN(mid_body)(const float *src, float *dst, int64_t outer,
                                                                   int64_t len_in, int64_t len_out, int64_t inner,
                                                                   const pool_axis *ax, const bool max) {
  const float init = max ? -INFINITY : 0.0f;
  for (int64_t r = 0; r < outer; r++) {
    for (int64_t o = 0; o < len_out; o++) {
      float *out = dst + (r * len_out + o) * inner;
      const float *rows[64];
      int n = 0;
      for (int64_t k = 0; k < ax->kernel; k++) {
        int64_t pos = o * ax->stride - ax->pad_begin + k * ax->dilation;
        if (pos < 0 || pos >= len_in) continue; /* padding: never read */
        if (n == 64) break; /* (more taps go through the loop below) */
        rows[n++] = src + (r * len_in + pos) * inner;
      }
      if (n == 3 && ax->kernel <= 64) {
        const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2];
        for (int64_t j = 0; j < inner; j++) {
          float a0 = r0[j], a1 = r1[j], a2 = r2[j], acc = init;
          acc = POOL_OP(max, acc, a0);
          acc = POOL_OP(max, acc, a1);
          out[j] = POOL_OP(max, acc, a2);
        }
        continue;
      }
      if (n == 2 && ax->kernel <= 64) {
        const float *r0 = rows[0], *r1 = rows[1];
        for (int64_t j = 0; j < inner; j++) {
          float a0 = r0[j], a1 = r1[j], acc = init;
          acc = POOL_OP(max, acc, a0);
          out[j] = POOL_OP(max, acc, a1);
        }
        continue;
      }
      for (int64_t j = 0; j < inner; j++) out[j] = init;
      for (int64_t k = 0; k < ax->kernel; k++) {
        int64_t pos = o * ax->stride - ax->pad_begin + k * ax->dilation;
        if (pos < 0 || pos >= len_in) continue;
        const float *in = src + (r * len_in + pos) * inner;
        for (int64_t j = 0; j < inner; j++) {
          float v = in[j];
          out[j] = POOL_OP(max, out[j], v);
        }
      }
    }
  }
}

/* dst[i] = the taps src[i + k*step] (k < K) combined, i < n: one long
 * loop over a padded plane (stride 1), however short its rows. */
static inline __attribute__((always_inline)) void POOL_FN(flat_body)(const float *src, float *dst, int64_t n,
                                                                    int64_t K, int64_t step, const bool max) {
  const float init = max ? -INFINITY : 0.0f;
  if (K == 3) {
    for (int64_t i = 0; i < n; i++) {
      float a0 = src[i], a1 = src[i + step], a2 = src[i + 2 * step], acc = init;
      acc = POOL_OP(max, acc, a0);
      acc = POOL_OP(max, acc, a1);
      dst[i] = POOL_OP(max, acc, a2);
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = init;
  for (int64_t k = 0; k < K; k++) {
    const float *at = src + k * step;
    for (int64_t i = 0; i < n; i++) {
      float v = at[i];
      dst[i] = POOL_OP(max, dst[i], v);
    }
  }
}

static void POOL_FN(flat_taps)(const float *src, float *dst, int64_t n, int64_t K, int64_t step, bool max) {
  if (max) POOL_FN(flat_body)(src, dst, n, K, step, true);
  else POOL_FN(flat_body)(src, dst, n, K, step, false);
}

/* The passes with max a constant in each copy (the compiler does not
 * unswitch the loops on it by itself). */
static void POOL_FN(pass_last)(const float *src, float *dst, int64_t outer, int64_t len_in, int64_t len_out,
                               const pool_axis *ax, bool max) {
  if (max) POOL_FN(last_body)(src, dst, outer, len_in, len_out, ax, true);
  else POOL_FN(last_body)(src, dst, outer, len_in, len_out, ax, false);
}

static void POOL_FN(pass_mid)(const float *src, float *dst, int64_t outer, int64_t len_in, int64_t len_out,
                              int64_t inner, const pool_axis *ax, bool max) {
  if (max) POOL_FN(mid_body)(src, dst, outer, len_in, len_out, inner, ax, true);
  else POOL_FN(mid_body)(src, dst, outer, len_in, len_out, inner, ax, false);
}

/* y /= the window's count, the product over axes in axis order. */
static void POOL_FN(divide)(float *y, int nsp, const int64_t *out, float *const *count) {
  int64_t n1 = nsp > 1 ? out[nsp - 2] : 1, n0 = nsp > 2 ? out[0] : 1, last = out[nsp - 1];
  for (int64_t a = 0; a < n0; a++)
    for (int64_t b = 0; b < n1; b++) {
      float c = nsp > 2 ? count[0][a] * count[1][b] : nsp > 1 ? count[0][b] : 1.0f;
      float *row = y + (a * n1 + b) * last;
      const float *cl = count[nsp - 1];
      if (nsp > 1) {
        for (int64_t j = 0; j < last; j++) row[j] = row[j] / (c * cl[j]);
      } else {
        for (int64_t j = 0; j < last; j++) row[j] = row[j] / cl[j];
      }
    }
}

/* A whole plane to one value (global pools): two 8-float vector
 * accumulators (GCC/clang vector types; the loop vectorizer leaves a
 * float reduction alone without reassociation), the sum reassociated
 * (both tiers call this routine, so they agree with each other); max keeps
 * NaN as POOL_OP does, lane by lane. */
static float POOL_FN(plane_reduce)(const float *x, int64_t n, bool max) {
  const float init = max ? -INFINITY : 0.0f;
  pool_v8 a0 = {init, init, init, init, init, init, init, init}, a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    pool_v8 u, w;
    memcpy(&u, x + i, sizeof u);
    memcpy(&w, x + i + 8, sizeof w);
    a0 = POOL_V8_OP(max, a0, u);
    a1 = POOL_V8_OP(max, a1, w);
  }
  float r = init;
  for (int l = 0; l < 8; l++) r = POOL_OP(max, r, a0[l]);
  for (int l = 0; l < 8; l++) r = POOL_OP(max, r, a1[l]);
  for (; i < n; i++) r = POOL_OP(max, r, x[i]);
  return r;
}
