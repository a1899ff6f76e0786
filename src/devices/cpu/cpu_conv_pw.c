/* cpu_conv_pw.c — direct pointwise (1x1) convolution for the cpu device.
 *
 * Y[co, n] = sum_k W[co, k] X[k, n] (+ bias[co], then the epilogue), with X
 * the activations of one image as they are ([K, HW], pixels contiguous):
 * nothing is packed per run. The weights are packed once (at prepare) into
 * blocks of KILN_PW_MR output channels, [k][KILN_PW_MR] each, so a register
 * tile of KILN_PW_MR channels x NR pixels broadcasts W[co, k] from one
 * contiguous run and loads X[k, n..n+NR) straight from the activation row.
 * K runs in one pass (the accumulators never leave the registers), then the
 * bias and the epilogue (clip, residual add, or the generated one) are
 * applied to the tile before it is stored.
 *
 * Blocking: the pixels are split into chunks whose X block [K, chunk] stays
 * in L2; within a chunk the channel blocks are the outer loop (their packed
 * weights, K x 8 floats, stay in L1) and the pixel tiles the inner one.
 * Threads take (chunk, channel group) items.
 *
 * Tiles: AVX-512 8 x 48 (24 accumulators), AVX2 8 x 8, portable C 8 x 16.
 * Columns left over after the full tiles go to a masked tile, or, when
 * fewer than 8 remain (7x7 planes: 49 = 48 + 1), to a column kernel that
 * costs one multiply-add per k and column.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define PW_X86 1
#define PW_INLINE static inline __attribute__((always_inline))
#define PW_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define PW_AVX2 __attribute__((target("avx2,fma")))
#else
#define PW_X86 0
#define PW_INLINE static inline
#endif

enum { MR = KILN_PW_MR };

size_t kiln_conv_pw_packed_floats(int64_t co, int64_t k) {
  return (size_t)((co + MR - 1) / MR) * (size_t)k * MR;
}

void kiln_conv_pw_pack(int64_t co, int64_t k, const float *w, float *packed) {
  int64_t blocks = (co + MR - 1) / MR;
  for (int64_t b = 0; b < blocks; b++) {
    float *dst = packed + b * k * MR;
    for (int64_t kk = 0; kk < k; kk++)
      for (int m = 0; m < MR; m++) {
        int64_t o = b * MR + m;
        dst[kk * MR + m] = o < co ? w[o * k + kk] : 0.0f;
      }
  }
}

/* What a tile needs besides its operands. */
typedef struct pw_epi {
  bool native, clip;
  float lo, hi;
  const float *add;               /* native: flat-index base already applied (add[0] pairs with y[0]) */
  const kiln_conv_epilogue *gen;  /* the generated epilogue, when not native */
  int64_t y_base;
} pw_epi;

typedef struct pw_tile {
  const float *w;    /* packed block [K][MR] */
  const float *x;    /* X[0, n0] */
  int64_t ldx, k;    /* row stride of X (= hw), K */
  int64_t ncols;     /* columns of this tile */
  int mr;            /* valid channels of the block */
  const float *bias; /* MR values (zero-padded) */
  float *y;          /* Y[co0, n0] */
  int64_t ldy;       /* = hw */
  int64_t off;       /* flat index of y[0] relative to the image's y (for add) */
  bool prefetch;     /* prefetch the next tile's X (first channel block of a chunk) */
} pw_tile;

/* Applies the generated epilogue to a stored tile. */
static void pw_gen_epi(const pw_epi *e, const pw_tile *t) {
  if (!e->gen || e->native) return;
  kiln_rt_epilogue_ctx ctx = {e->gen->buffers, e->y_base + t->off, t->ldy};
  e->gen->fn(&ctx, t->y, t->ldy, 0, 0, t->mr, t->ncols);
}

static inline float pw_finish(float v, const pw_epi *e, int64_t idx) {
  if (e->native) {
    if (e->add) v += e->add[idx];
    if (e->clip) {
      v = (v != v || v > e->lo) ? v : e->lo;
      v = (v != v || v < e->hi) ? v : e->hi;
    }
  }
  return v;
}

/* Columns [n0, n0 + nc) one at a time: acc[m] = sum_k W[k][m] X[k][n]. */
static void pw_columns_generic(const pw_tile *t, const pw_epi *e) {
  for (int64_t j = 0; j < t->ncols; j++) {
    float acc[MR] = {0};
    for (int64_t k = 0; k < t->k; k++) {
      float xv = t->x[k * t->ldx + j];
      for (int m = 0; m < MR; m++) acc[m] += t->w[k * MR + m] * xv;
    }
    for (int m = 0; m < t->mr; m++) {
      int64_t o = m * t->ldy + j;
      t->y[o] = pw_finish(acc[m] + t->bias[m], e, t->off + o);
    }
  }
}

/* ---- portable C: 8 x 16 tiles ----------------------------------------------------- */

enum { NR_GENERIC = 16 };

static void pw_tile_generic(const pw_tile *t, const pw_epi *e) {
  if (t->ncols < 4) {
    pw_columns_generic(t, e);
    pw_gen_epi(e, t);
    return;
  }
  float acc[MR][NR_GENERIC];
  memset(acc, 0, sizeof acc);
  int64_t nc = t->ncols;
  if (nc == NR_GENERIC) {
    for (int64_t k = 0; k < t->k; k++) {
      const float *xk = t->x + k * t->ldx, *wk = t->w + k * MR;
      for (int m = 0; m < MR; m++)
        for (int j = 0; j < NR_GENERIC; j++) acc[m][j] += wk[m] * xk[j];
    }
  } else {
    for (int64_t k = 0; k < t->k; k++) {
      const float *xk = t->x + k * t->ldx, *wk = t->w + k * MR;
      for (int m = 0; m < MR; m++)
        for (int64_t j = 0; j < nc; j++) acc[m][j] += wk[m] * xk[j];
    }
  }
  for (int m = 0; m < t->mr; m++)
    for (int64_t j = 0; j < nc; j++) {
      int64_t o = m * t->ldy + j;
      t->y[o] = pw_finish(acc[m][j] + t->bias[m], e, t->off + o);
    }
  pw_gen_epi(e, t);
}

#if PW_X86
/* ---- AVX-512: 8 x 48 ---------------------------------------------------------------- */

enum { NR_AVX512 = 48 };

PW_INLINE PW_AVX512 void pw512_body(const int nv, const bool pf, const pw_tile *t, const pw_epi *e) {
  __m512 acc[MR][3];
  int64_t rem = t->ncols - 16 * (nv - 1);
  __mmask16 ml = (__mmask16)(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
  const int mr = t->mr;
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 3
    for (int v = 0; v < 3; v++) acc[m][v] = _mm512_setzero_ps();
  const float *restrict x = t->x;
  const float *restrict w = t->w;
  int64_t ldx = t->ldx;
  for (int64_t k = 0; k < t->k; k++) {
    const float *xk = x + k * ldx;
    if (pf) { /* the next tile's columns of this row (the first pass over a chunk reads X from L3) */
      _mm_prefetch((const char *)(xk + 48), _MM_HINT_T0);
      _mm_prefetch((const char *)(xk + 64), _MM_HINT_T0);
      _mm_prefetch((const char *)(xk + 80), _MM_HINT_T0);
    }
    __m512 x0, x1 = _mm512_setzero_ps(), x2 = _mm512_setzero_ps();
    if (nv == 1) {
      x0 = _mm512_maskz_loadu_ps(ml, xk);
    } else if (nv == 2) {
      x0 = _mm512_loadu_ps(xk);
      x1 = _mm512_maskz_loadu_ps(ml, xk + 16);
    } else {
      x0 = _mm512_loadu_ps(xk);
      x1 = _mm512_loadu_ps(xk + 16);
      x2 = _mm512_maskz_loadu_ps(ml, xk + 32);
    }
    const float *wk = w + k * MR;
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      __m512 b = _mm512_set1_ps(wk[m]);
      acc[m][0] = _mm512_fmadd_ps(b, x0, acc[m][0]);
      if (nv >= 2) acc[m][1] = _mm512_fmadd_ps(b, x1, acc[m][1]);
      if (nv >= 3) acc[m][2] = _mm512_fmadd_ps(b, x2, acc[m][2]);
    }
  }
  const bool native = e->native, clip = native && e->clip;
  const float *add = native && e->add ? e->add + t->off : NULL;
  __m512 lo = _mm512_set1_ps(e->lo), hi = _mm512_set1_ps(e->hi);
  if (add)
    for (int m = 0; m < mr; m++) {
      _mm_prefetch((const char *)(add + m * t->ldy + 48), _MM_HINT_T0);
      _mm_prefetch((const char *)(add + m * t->ldy + 64), _MM_HINT_T0);
      _mm_prefetch((const char *)(add + m * t->ldy + 80), _MM_HINT_T0);
    }
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++) {
    __m512 bm = _mm512_set1_ps(t->bias[m]);
#pragma GCC unroll 3
    for (int v = 0; v < 3; v++) {
      if (v < nv && m < mr) {
        __mmask16 mk = v == nv - 1 ? ml : (__mmask16)0xFFFF;
        __m512 r = _mm512_add_ps(acc[m][v], bm);
        if (add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mk, add + m * t->ldy + 16 * v));
        if (clip) r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
        _mm512_mask_storeu_ps(t->y + m * t->ldy + 16 * v, mk, r);
      }
    }
  }
  pw_gen_epi(e, t);
}

/* Fewer than 8 columns: one column at a time, 8 channels in a ymm, K split
 * over 4 accumulators. */
static PW_AVX512 void pw_columns_avx512(const pw_tile *t, const pw_epi *e) {
  for (int64_t j = 0; j < t->ncols; j++) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *xj = t->x + j;
    int64_t k = 0, ldx = t->ldx;
    for (; k + 4 <= t->k; k += 4) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(t->w + (k + 0) * MR), _mm256_set1_ps(xj[(k + 0) * ldx]), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(t->w + (k + 1) * MR), _mm256_set1_ps(xj[(k + 1) * ldx]), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(t->w + (k + 2) * MR), _mm256_set1_ps(xj[(k + 2) * ldx]), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(t->w + (k + 3) * MR), _mm256_set1_ps(xj[(k + 3) * ldx]), a3);
    }
    for (; k < t->k; k++) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(t->w + k * MR), _mm256_set1_ps(xj[k * ldx]), a0);
    float acc[MR];
    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (int m = 0; m < t->mr; m++) {
      int64_t o = m * t->ldy + j;
      t->y[o] = pw_finish(acc[m] + t->bias[m], e, t->off + o);
    }
  }
  pw_gen_epi(e, t);
}

static PW_AVX512 void pw_tile_avx512(const pw_tile *t, const pw_epi *e) {
  if (t->ncols > 32) {
    if (t->prefetch) pw512_body(3, true, t, e);
    else pw512_body(3, false, t, e);
  } else if (t->ncols > 16) {
    pw512_body(2, false, t, e);
  } else if (t->ncols >= 8) {
    pw512_body(1, false, t, e);
  } else {
    pw_columns_avx512(t, e);
  }
}

/* ---- AVX2: 8 x 8 ------------------------------------------------------------------- */

enum { NR_AVX2 = 8 };

static PW_AVX2 void pw_tile_avx2(const pw_tile *t, const pw_epi *e) {
  __m256 acc[MR];
  for (int m = 0; m < MR; m++) acc[m] = _mm256_setzero_ps();
  int64_t nc = t->ncols;
  __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const float *restrict x = t->x;
  const float *restrict w = t->w;
  for (int64_t k = 0; k < t->k; k++) {
    __m256 xv = nc == NR_AVX2 ? _mm256_loadu_ps(x + k * t->ldx) : _mm256_maskload_ps(x + k * t->ldx, mask);
    const float *wk = w + k * MR;
    for (int m = 0; m < MR; m++) acc[m] = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + m), xv, acc[m]);
  }
  const bool native = e->native, clip = native && e->clip;
  const float *add = native && e->add ? e->add + t->off : NULL;
  __m256 lo = _mm256_set1_ps(e->lo), hi = _mm256_set1_ps(e->hi);
  for (int m = 0; m < MR; m++) {
    if (m >= t->mr) break;
    __m256 r = _mm256_add_ps(acc[m], _mm256_set1_ps(t->bias[m]));
    float *yr = t->y + m * t->ldy;
    if (nc == NR_AVX2) {
      if (add) r = _mm256_add_ps(r, _mm256_loadu_ps(add + m * t->ldy));
      if (clip) r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
      _mm256_storeu_ps(yr, r);
    } else {
      if (add) r = _mm256_add_ps(r, _mm256_maskload_ps(add + m * t->ldy, mask));
      if (clip) r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
      _mm256_maskstore_ps(yr, mask, r);
    }
  }
  pw_gen_epi(e, t);
}
#endif

/* ---- driver ---------------------------------------------------------------------------- */

typedef struct pw_ctx {
  const kiln_conv_pw_job *j;
  pw_epi e;
  int isa;
  int64_t nr;        /* columns per full tile */
  int64_t chunk;     /* columns per chunk (multiple of nr) */
  int64_t n_chunks, groups, blocks;
  int64_t ldx, ldy;
  void (*tile)(const pw_tile *, const pw_epi *);
} pw_ctx;

static void pw_items(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const pw_ctx *c = vctx;
  const kiln_conv_pw_job *j = c->j;
  for (int64_t it = begin; it < end; it++) {
    int64_t ci = it / c->groups, gi = it % c->groups;
    int64_t n0 = ci * c->chunk, n1 = n0 + c->chunk < j->hw ? n0 + c->chunk : j->hw;
    int64_t b0 = gi * c->blocks / c->groups, b1 = (gi + 1) * c->blocks / c->groups;
    for (int64_t b = b0; b < b1; b++) {
      float bias[MR];
      int mr = (int)(j->co - b * MR < MR ? j->co - b * MR : MR);
      for (int m = 0; m < MR; m++) bias[m] = j->bias && m < mr ? j->bias[b * MR + m] : 0.0f;
      pw_tile t = {j->packed + b * j->k * MR, NULL, c->ldx, j->k, 0, mr, bias, NULL, c->ldy, 0, b == b0};
      for (int64_t n = n0; n < n1; n += c->nr) {
        t.ncols = n1 - n < c->nr ? n1 - n : c->nr;
        t.x = j->x + n;
        t.off = b * MR * c->ldy + n;
        t.y = j->y + t.off;
        c->tile(&t, &c->e);
      }
    }
  }
}

/* Blocking (measured on MobileNetV2's and ResNet-50's 1x1 layers): X of
 * the whole image when it is at most PW_WHOLE_BYTES (L2 holds it while
 * every channel block reads it; the weights are then read once), else
 * chunks of about PW_CHUNK_BYTES of X. */
enum { PW_WHOLE_BYTES = 1024 * 1024, PW_CHUNK_BYTES = 96 * 1024 };

void kiln_conv_pw_run(kiln_threadpool *pool, int isa, const kiln_conv_pw_job *j) {
  pw_ctx c;
  memset(&c, 0, sizeof c);
  c.j = j;
  c.isa = isa;
  c.ldx = j->ldx > 0 ? j->ldx : j->hw;
  c.ldy = j->ldy > 0 ? j->ldy : j->hw;
  c.tile = pw_tile_generic;
  c.nr = NR_GENERIC;
#if PW_X86
  if (isa == 2) {
    c.tile = pw_tile_avx512;
    c.nr = NR_AVX512;
  } else if (isa == 1) {
    c.tile = pw_tile_avx2;
    c.nr = NR_AVX2;
  }
#endif
  const kiln_conv_epilogue *epi = j->epi && j->epi->fn ? j->epi : NULL;
  c.e.native = epi && epi->native;
  c.e.clip = c.e.native && epi->clip;
  c.e.lo = epi ? epi->lo : 0.0f;
  c.e.hi = epi ? epi->hi : 0.0f;
  c.e.add = c.e.native && epi->add ? epi->add + j->y_base : NULL;
  c.e.gen = epi;
  c.e.y_base = j->y_base;
  if (j->hw <= 0 || j->co <= 0) return;
  int64_t kk = j->k > 0 ? j->k : 1;
  int64_t hw_tiles = (j->hw + c.nr - 1) / c.nr * c.nr;
  int64_t cols = 4 * kk * hw_tiles <= PW_WHOLE_BYTES ? hw_tiles : PW_CHUNK_BYTES / (4 * kk);
  cols = cols / c.nr * c.nr;
  if (cols < c.nr) cols = c.nr;
  c.chunk = cols < hw_tiles ? cols : hw_tiles;
  c.n_chunks = (j->hw + c.chunk - 1) / c.chunk;
  c.blocks = (j->co + MR - 1) / MR;
  int threads = pool ? kiln_threadpool_size(pool) : 1;
  c.groups = 1;
  if (threads > 1 && c.n_chunks < 4 * threads) {
    int64_t want = (4 * threads + c.n_chunks - 1) / c.n_chunks;
    c.groups = want < c.blocks ? want : c.blocks;
  }
  kiln_parallel_for(pool, c.n_chunks * c.groups, 1, pw_items, &c);
}
