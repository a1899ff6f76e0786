/* cpu_conv_dw.c — direct 3x3 depthwise convolution, stride 1 or 2, AVX-512.
 *
 * Reads the input plane where it lies: no padded copy. Each output row is
 * computed 16 columns at a time from (up to) three input rows; the columns
 * the window takes from the padding are masked-off lanes of the loads
 * (zeros), so every load is a plain or masked unaligned vector load:
 *
 * - stride 1: output columns ow..ow+15 read input columns ow - pw + kw + l,
 *   one (masked) load per kernel column;
 * - stride 2: they read columns 2 (ow + l) - pw + kw: two loads cover the 32
 *   columns from 2 ow - pw, their even lanes (kw 0) and odd lanes (kw 1)
 *   are picked with one two-source permute each, and kw 2 is the kw 0 vector
 *   moved down one lane with column 2 ow - pw + 32 entering at the top.
 *
 * The bias and a native epilogue (clip, added tensor) are applied to the
 * registers before the store; a generated epilogue runs per finished plane.
 * Masks depend only on the column block, so they are computed once per run.
 */
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define DW_X86 1
#define DW_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#else
#define DW_X86 0
#endif

enum { DW_MAX_VEC = KILN_DW_MAX_OW / 16, DW_FLAT_MAX = 256 };

typedef struct dw_masks {
  /* flat: stride 1, output plane = input plane, rows narrower than a vector:
   * the plane as one flat row of nflat vectors; tap t = (kh, kw) reads the
   * input at the output's flat index + fd[t], lanes fm[v][t] */
  bool flat;
  int nflat;
  int64_t fd[9];
  uint16_t fm[DW_FLAT_MAX / 16][9], fout[DW_FLAT_MAX / 16];
  int nvec;
  uint16_t out[DW_MAX_VEC];    /* valid output lanes */
  uint16_t in[DW_MAX_VEC][3];  /* stride 1: lanes of the load for kernel column kw inside the row;
                                  stride 2: [0] low load, [1] high load, [2] the extra column (bit 0) */
} dw_masks;

bool kiln_conv_dw_direct_applies(const kiln_conv_geom *c) {
  return DW_X86 && c->nsp == 2 && c->group == c->ci && c->co == c->ci && c->group > 1 && c->k[0] == 3 &&
         c->k[1] == 3 && c->dil[0] == 1 && c->dil[1] == 1 && c->stride[0] == c->stride[1] &&
         (c->stride[0] == 1 || c->stride[0] == 2) && c->pad_begin[0] >= 0 && c->pad_begin[1] >= 0 &&
         c->pad_begin[0] <= 2 && c->pad_begin[1] <= 2 && c->out_sp[1] >= 1 && c->out_sp[1] <= KILN_DW_MAX_OW;
}

#if DW_X86
/* Bits [lo, hi) of a 16-bit mask, clamped. */
static uint16_t bits(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  uint32_t m = ((1u << hi) - 1u) & ~((1u << lo) - 1u);
  return (uint16_t)m;
}

static void dw_make_masks(const kiln_conv_geom *c, dw_masks *m) {
  int64_t W = c->in_sp[1], OW = c->out_sp[1], pw = c->pad_begin[1], s = c->stride[1];
  int64_t H = c->in_sp[0], OH = c->out_sp[0], ph = c->pad_begin[0];
  m->flat = s == 1 && OH == H && OW == W && W < 16 && H * W <= DW_FLAT_MAX;
  if (m->flat) {
    m->nflat = (int)((H * W + 15) / 16);
    for (int t = 0; t < 9; t++) m->fd[t] = (t / 3 - ph) * W + (t % 3 - pw);
    for (int v = 0; v < m->nflat; v++) {
      m->fout[v] = 0;
      for (int t = 0; t < 9; t++) m->fm[v][t] = 0;
      for (int l = 0; l < 16; l++) {
        int64_t i = 16 * (int64_t)v + l, oh = i / W, ow = i % W;
        if (i >= H * W) break;
        m->fout[v] |= (uint16_t)(1u << l);
        for (int t = 0; t < 9; t++) {
          int64_t ih = oh + t / 3 - ph, iw = ow + t % 3 - pw;
          if (ih >= 0 && ih < H && iw >= 0 && iw < W) m->fm[v][t] |= (uint16_t)(1u << l);
        }
      }
    }
  }
  m->nvec = (int)((OW + 15) / 16);
  for (int v = 0; v < m->nvec; v++) {
    int64_t ow0 = 16 * (int64_t)v;
    m->out[v] = bits(0, OW - ow0);
    if (s == 1) {
      for (int kw = 0; kw < 3; kw++) {
        int64_t start = ow0 - pw + kw; /* input column of lane 0 */
        m->in[v][kw] = bits(-start, W - start) & m->out[v];
      }
    } else {
      int64_t base = 2 * ow0 - pw;
      m->in[v][0] = bits(-base, W - base);
      m->in[v][1] = bits(-(base + 16), W - (base + 16));
      m->in[v][2] = bits(-(base + 32), W - (base + 32)) & 1u;
    }
  }
}

#endif

typedef struct dw_run_ctx {
  const kiln_conv_geom *c;
  const dw_masks *m;
  const float *x, *w, *bias;
  float *y;
  const kiln_conv_epilogue *epi;
} dw_run_ctx;

#if DW_X86
static DW_AVX512 void dw_planes_avx512(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const dw_run_ctx *d = vctx;
  const kiln_conv_geom *c = d->c;
  const dw_masks *mk = d->m;
  int64_t H = c->in_sp[0], W = c->in_sp[1], OH = c->out_sp[0], OW = c->out_sp[1];
  int64_t ph = c->pad_begin[0], pw = c->pad_begin[1], s = c->stride[0];
  const kiln_conv_epilogue *e = d->epi;
  bool native = e && e->native, clip = native && e->clip;
  __m512 lo = _mm512_set1_ps(native ? e->lo : 0.0f), hi = _mm512_set1_ps(native ? e->hi : 0.0f);
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % c->co;
    const float *xp = d->x + p * H * W;
    float *yp = d->y + p * OH * OW;
    const float *add = native && e->add ? e->add + p * OH * OW : NULL;
    const float *wp = d->w + ch * 9;
    __m512 wv[9];
#pragma GCC unroll 9
    for (int i = 0; i < 9; i++) wv[i] = _mm512_set1_ps(wp[i]);
    __m512 bv = _mm512_set1_ps(d->bias ? d->bias[ch] : 0.0f);
    if (mk->flat) {
      for (int v = 0; v < mk->nflat; v++) {
        const float *src = xp + 16 * (int64_t)v;
        __m512 acc0 = bv, acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
#pragma GCC unroll 3
        for (int kh = 0; kh < 3; kh++) {
          acc0 = _mm512_fmadd_ps(wv[3 * kh], _mm512_maskz_loadu_ps(mk->fm[v][3 * kh], src + mk->fd[3 * kh]), acc0);
          acc1 = _mm512_fmadd_ps(wv[3 * kh + 1], _mm512_maskz_loadu_ps(mk->fm[v][3 * kh + 1], src + mk->fd[3 * kh + 1]),
                                 acc1);
          acc2 = _mm512_fmadd_ps(wv[3 * kh + 2], _mm512_maskz_loadu_ps(mk->fm[v][3 * kh + 2], src + mk->fd[3 * kh + 2]),
                                 acc2);
        }
        __m512 r = _mm512_add_ps(acc0, _mm512_add_ps(acc1, acc2));
        __mmask16 om = mk->fout[v];
        if (add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(om, add + 16 * (int64_t)v));
        if (clip) r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
        _mm512_mask_storeu_ps(yp + 16 * (int64_t)v, om, r);
      }
    } else {
      for (int64_t oh = 0; oh < OH; oh++) {
        const float *rows[3];
        for (int kh = 0; kh < 3; kh++) {
          int64_t ih = oh * s - ph + kh;
          rows[kh] = ih >= 0 && ih < H ? xp + ih * W : NULL;
        }
        float *yr = yp + oh * OW;
        const float *ar = add ? add + oh * OW : NULL;
        for (int v = 0; v < mk->nvec; v++) {
          int64_t ow0 = 16 * (int64_t)v;
          __m512 acc0 = bv, acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
          if (s == 1) {
            __mmask16 m0 = mk->in[v][0], m1 = mk->in[v][1], m2 = mk->in[v][2];
  #define DW_S1_ROW(KH)                                                                  \
    if (rows[KH]) {                                                                      \
      const float *src = rows[KH] + ow0 - pw;                                            \
      acc0 = _mm512_fmadd_ps(wv[3 * KH + 0], _mm512_maskz_loadu_ps(m0, src), acc0);      \
      acc1 = _mm512_fmadd_ps(wv[3 * KH + 1], _mm512_maskz_loadu_ps(m1, src + 1), acc1);  \
      acc2 = _mm512_fmadd_ps(wv[3 * KH + 2], _mm512_maskz_loadu_ps(m2, src + 2), acc2);  \
    }
            DW_S1_ROW(0)
            DW_S1_ROW(1)
            DW_S1_ROW(2)
  #undef DW_S1_ROW
          } else {
            __mmask16 ma = mk->in[v][0], mb = mk->in[v][1], mc = mk->in[v][2];
  #define DW_S2_ROW(KH)                                                                                     \
    if (rows[KH]) {                                                                                         \
      const float *src = rows[KH] + 2 * ow0 - pw;                                                           \
      __m512 a = _mm512_maskz_loadu_ps(ma, src), b = _mm512_maskz_loadu_ps(mb, src + 16);                   \
      __m512 x0 = _mm512_permutex2var_ps(a, ev, b), x1 = _mm512_permutex2var_ps(a, od, b);                  \
      __m512 top = _mm512_maskz_loadu_ps(mc, src + 32);                                                     \
      __m512 x2 =                                                                                           \
          _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(top), _mm512_castps_si512(x0), 1));  \
      acc0 = _mm512_fmadd_ps(wv[3 * KH + 0], x0, acc0);                                                     \
      acc1 = _mm512_fmadd_ps(wv[3 * KH + 1], x1, acc1);                                                     \
      acc2 = _mm512_fmadd_ps(wv[3 * KH + 2], x2, acc2);                                                     \
    }
            DW_S2_ROW(0)
            DW_S2_ROW(1)
            DW_S2_ROW(2)
  #undef DW_S2_ROW
          }
          __m512 r = _mm512_add_ps(acc0, _mm512_add_ps(acc1, acc2));
          __mmask16 om = mk->out[v];
          if (ar) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(om, ar + ow0));
          if (clip) r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
          _mm512_mask_storeu_ps(yr + ow0, om, r);
        }
      }
    }
    if (e && !native) {
      kiln_rt_epilogue_ctx ctx = {e->buffers, p * OH * OW, 0};
      e->fn(&ctx, d->y + p * OH * OW, 0, 0, 0, 1, OH * OW);
    }
  }
}
#endif

void kiln_conv_dw_direct_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *x, const float *w,
                             const float *bias, float *y, const kiln_conv_epilogue *epi) {
#if DW_X86
  dw_masks m;
  dw_make_masks(c, &m);
  if (epi && !epi->fn) epi = NULL;
  dw_run_ctx d = {c, &m, x, w, bias, y, epi};
  kiln_parallel_for(pool, c->n * c->co, 1, dw_planes_avx512, &d);
#else
  (void)c, (void)pool, (void)x, (void)w, (void)bias, (void)y, (void)epi;
#endif
}
