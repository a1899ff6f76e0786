/* cpu_conv_dwk.c — depthwise convolution of any kernel size, stride,
 * dilation and padding (1-D or 2-D), AVX2 + FMA.
 *
 * MobileNetV3's and EfficientNet's 5x5 windows, strided or dilated ones and
 * 1-D (audio) depthwise layers otherwise fall to the scalar loops. Each
 * plane's input rows are copied once into a per-thread buffer where the
 * horizontal padding is zeros and, for a column stride s, each row is split
 * into its s column phases (column j of the padded row at phase j % s,
 * index j / s), so every kernel tap (kh, kw) of an output row reads one
 * contiguous run: phase (kw * dil) % s from index ow + (kw * dil) / s.
 * Vertical padding is no copy: rows outside the image point at one zero
 * row. Output blocks of R rows x V vectors of 8 columns (about 8
 * accumulators, so the FMA latency is hidden: 8x1, 4x2, 2x4 and their row
 * remainders) share each tap's broadcast weight; the bias and a native
 * epilogue (added tensor, clip) are applied before the store, a generated
 * epilogue per finished plane.
 */
#include <string.h>

#include "devices/cpu/cpu_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define DWK_X86 1
#define DWK_AVX2 __attribute__((target("avx2,fma")))
#else
#define DWK_X86 0
#endif

typedef struct dwk_dims {
  int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw;
  int64_t ow8;  /* OW rounded up to 8 */
  int64_t half; /* width of one column phase of a padded row */
} dwk_dims;

static void dwk_dims_of(const kiln_conv_geom *c, dwk_dims *d) {
  bool one = c->nsp == 1;
  d->H = one ? 1 : c->in_sp[0];
  d->OH = one ? 1 : c->out_sp[0];
  d->KH = one ? 1 : c->k[0];
  d->sh = one ? 1 : c->stride[0];
  d->dh = one ? 1 : c->dil[0];
  d->ph = one ? 0 : c->pad_begin[0];
  int a = one ? 0 : 1;
  d->W = c->in_sp[a];
  d->OW = c->out_sp[a];
  d->KW = c->k[a];
  d->sw = c->stride[a];
  d->dw = c->dil[a];
  d->pw = c->pad_begin[a];
  d->ow8 = (d->OW + 7) / 8 * 8;
  d->half = (d->ow8 + (d->KW - 1) * d->dw / d->sw + 7) / 8 * 8; /* whole vectors: no masked stores */
}

bool kiln_conv_dwk_applies(const kiln_conv_geom *c) {
  if (!DWK_X86 || (c->nsp != 1 && c->nsp != 2) || c->group != c->ci || c->co != c->ci || c->group < 2) return false;
  for (int i = 0; i < c->nsp; i++)
    if (c->k[i] < 1 || c->stride[i] < 1 || c->dil[i] < 1 || c->out_sp[i] < 1 || c->pad_begin[i] < 0) return false;
  dwk_dims d;
  dwk_dims_of(c, &d);
  /* the padded rows stay a per-thread scratch of modest size */
  return d.KH * d.KW <= 256 && d.H * d.sw * d.half <= ((int64_t)1 << 22);
}

size_t kiln_conv_dwk_thread_floats(const kiln_conv_geom *c) {
  dwk_dims d;
  dwk_dims_of(c, &d);
  int64_t nrows = (d.OH - 1) * d.sh + (d.KH - 1) * d.dh + 1;
  /* the padded rows, a zero row, the pointers to nrows rows */
  size_t f = (size_t)((d.H + 1) * d.sw * d.half) + (size_t)nrows * sizeof(float *) / sizeof(float) + 16;
  return (f + 15) & ~(size_t)15;
}

typedef struct dwk_ctx {
  const kiln_conv_geom *c;
  dwk_dims d;
  const float *x, *w, *bias;
  float *y, *scratch;
  size_t thread_floats;
  const kiln_conv_epilogue *epi;
} dwk_ctx;

#if DWK_X86
/* Lanes [0, n) of a vector, n in [0, 8]. */
static DWK_AVX2 __m256i dwk_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first n (< 8) lanes of x to dst. No masked store: Zen 1 runs those
 * as microcode. */
static DWK_AVX2 void dwk_store_part(float *dst, __m256 x, int64_t n) {
  __m128 h = _mm256_castps256_ps128(x);
  if (n >= 4) {
    _mm_storeu_ps(dst, h);
    h = _mm256_extractf128_ps(x, 1);
    dst += 4;
    n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi((__m64 *)dst, h);
    h = _mm_movehl_ps(h, h);
    dst += 2;
    n -= 2;
  }
  if (n) _mm_store_ss(dst, h);
}

/* Columns c0 + l (l < 8) of row xr, W wide: zeros outside it (masked-off
 * lanes, which are not read). */
static DWK_AVX2 __m256 dwk_load_cols(const float *xr, int64_t c0, int64_t W) {
  if (c0 >= 0 && c0 + 8 <= W) return _mm256_loadu_ps(xr + c0);
  __m256i i = _mm256_add_epi32(_mm256_set1_epi32((int)c0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i m = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), i), _mm256_cmpgt_epi32(_mm256_set1_epi32((int)W), i));
  return _mm256_maskload_ps(xr + c0, m);
}

/* Input row xr (W wide) as the s column phases of its padded form (phase
 * r, index t: input column t * s + r - pw), whole vectors (half is). */
static DWK_AVX2 void dwk_pad_row(const dwk_dims *d, const float *xr, float *dst) {
  int64_t s = d->sw, half = d->half, W = d->W, pw = d->pw;
  if (s == 1) {
    for (int64_t t = 0; t < half; t += 8) _mm256_storeu_ps(dst + t, dwk_load_cols(xr, t - pw, W));
    return;
  }
  if (s == 2) { /* 16 columns, split into the even and odd ones */
    for (int64_t t = 0; t < half; t += 8) {
      __m256 a = dwk_load_cols(xr, 2 * t - pw, W), b = dwk_load_cols(xr, 2 * t - pw + 8, W);
      __m256 ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
      __m256 od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
      _mm256_storeu_ps(dst + t, ev);
      _mm256_storeu_ps(dst + half + t, od);
    }
    return;
  }
  for (int64_t r = 0; r < s; r++) {
    float *ph = dst + r * half;
    /* phase index t holds input column t * s + r - pw */
    int64_t lo = pw - r > 0 ? (pw - r + s - 1) / s : 0, hi = (W - 1 + pw - r) / s + 1, t = 0;
    if (W - 1 + pw - r < 0) hi = 0;
    if (lo > half) lo = half;
    if (hi > half) hi = half;
    if (hi < lo) hi = lo;
    for (; t < lo; t++) ph[t] = 0.0f;
    for (; t < hi; t++) ph[t] = xr[t * s + r - pw];
    for (; t < half; t++) ph[t] = 0.0f;
  }
}

/* What one plane's blocks share. */
typedef struct dwk_plane {
  const dwk_dims *d;
  const float *const *rows; /* padded row of input row ih - ph (a zero row outside the image), ih in [0, PHr) */
  const int64_t *koff;      /* offset of tap kw inside a padded row */
  const float *w;           /* the plane's KH x KW taps */
  float *y;
  const float *add; /* native epilogue's added plane, or NULL */
  bool clip;
  __m256 bias, lo, hi, tail; /* tail: lanes of the last vector inside the row (all when OW % 8 == 0) */
} dwk_plane;

/* Output rows oh..oh+R-1, columns ow0..ow0+8V-1: R x V accumulators, each
 * tap's weight broadcast once for all of them. */
static inline DWK_AVX2 __attribute__((always_inline)) void dwk_block(const dwk_plane *pl, int64_t oh, int64_t ow0, int R, int V) {
  const dwk_dims *d = pl->d;
  __m256 acc[8][4];
  #pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 8
    for (int v = 0; v < V; v++) acc[r][v] = pl->bias;
  for (int64_t kh = 0; kh < d->KH; kh++) {
    const float *src[8];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) src[r] = pl->rows[(oh + r) * d->sh + kh * d->dh] + ow0;
    const float *wr = pl->w + kh * d->KW;
    for (int64_t kw = 0; kw < d->KW; kw++) {
      __m256 wv = _mm256_broadcast_ss(wr + kw);
      int64_t o = pl->koff[kw];
      #pragma GCC unroll 8
      for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < V; v++) acc[r][v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src[r] + o + 8 * v), acc[r][v]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    float *yr = pl->y + (oh + r) * d->OW + ow0;
    const float *ar = pl->add ? pl->add + (oh + r) * d->OW + ow0 : NULL;
    #pragma GCC unroll 8
    for (int v = 0; v < V; v++) {
      __m256 x = acc[r][v];
      bool part = ow0 + 8 * v + 8 > d->OW;
      __m256i m = _mm256_castps_si256(pl->tail);
      if (ar) x = _mm256_add_ps(x, part ? _mm256_maskload_ps(ar + 8 * v, m) : _mm256_loadu_ps(ar + 8 * v));
      if (pl->clip) x = _mm256_min_ps(pl->hi, _mm256_max_ps(pl->lo, x));
      if (part)
        dwk_store_part(yr + 8 * v, x, d->OW - ow0 - 8 * v);
      else
        _mm256_storeu_ps(yr + 8 * v, x);
    }
  }
}

#define DWK_BLOCK(R, V) \
  static DWK_AVX2 void dwk_block_##R##x##V(const dwk_plane *pl, int64_t oh, int64_t ow0) { dwk_block(pl, oh, ow0, R, V); }
DWK_BLOCK(1, 1)
DWK_BLOCK(2, 1)
DWK_BLOCK(3, 1)
DWK_BLOCK(4, 1)
DWK_BLOCK(5, 1)
DWK_BLOCK(6, 1)
DWK_BLOCK(7, 1)
DWK_BLOCK(8, 1)
DWK_BLOCK(1, 2)
DWK_BLOCK(2, 2)
DWK_BLOCK(3, 2)
DWK_BLOCK(4, 2)
DWK_BLOCK(1, 4)
DWK_BLOCK(2, 4)
#undef DWK_BLOCK

typedef void (*dwk_block_fn)(const dwk_plane *, int64_t, int64_t);
/* [V = 1, 2, 4][R - 1]: about 8 accumulators, so that the FMAs' latency is hidden */
static const dwk_block_fn dwk_blocks[3][8] = {
    {dwk_block_1x1, dwk_block_2x1, dwk_block_3x1, dwk_block_4x1, dwk_block_5x1, dwk_block_6x1, dwk_block_7x1,
     dwk_block_8x1},
    {dwk_block_1x2, dwk_block_2x2, dwk_block_3x2, dwk_block_4x2},
    {dwk_block_1x4, dwk_block_2x4},
};
static const int dwk_max_rows[3] = {8, 4, 2};

static DWK_AVX2 void dwk_planes_avx2(void *vctx, int64_t begin, int64_t end, int thread) {
  const dwk_ctx *k = vctx;
  const dwk_dims *d = &k->d;
  int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW, co = k->c->co;
  int64_t rowf = d->sw * d->half; /* floats per padded row */
  int64_t nrows = (OH - 1) * d->sh + (d->KH - 1) * d->dh + 1;
  float *pad = k->scratch + (size_t)thread * k->thread_floats;
  float *zero = pad + H * rowf;
  const float **rows = (const float **)(pad + (((H + 1) * rowf + 1) & ~(int64_t)1)); /* 8-byte aligned */
  memset(zero, 0, (size_t)rowf * sizeof(float));
  for (int64_t i = 0; i < nrows; i++) {
    int64_t ih = i - d->ph;
    rows[i] = ih >= 0 && ih < H ? pad + ih * rowf : zero;
  }
  int64_t koff[256];
  for (int64_t kw = 0; kw < d->KW; kw++) koff[kw] = (kw * d->dw) % d->sw * d->half + kw * d->dw / d->sw;
  const kiln_conv_epilogue *e = k->epi;
  bool native = e && e->native;
  int tl = OW % 8 ? (int)(OW % 8) : 8;
  dwk_plane pl = {.d = d, .rows = rows, .koff = koff, .clip = native && e->clip};
  pl.lo = _mm256_set1_ps(native ? e->lo : 0.0f);
  pl.hi = _mm256_set1_ps(native ? e->hi : 0.0f);
  pl.tail = _mm256_castsi256_ps(dwk_lanes(tl));
  int64_t nv = d->ow8 / 8;
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % co;
    const float *xp = k->x + p * H * W;
    for (int64_t ih = 0; ih < H; ih++) dwk_pad_row(d, xp + ih * W, pad + ih * rowf);
    pl.w = k->w + ch * d->KH * d->KW;
    pl.y = k->y + p * OH * OW;
    pl.add = native && e->add ? e->add + p * OH * OW : NULL;
    pl.bias = _mm256_set1_ps(k->bias ? k->bias[ch] : 0.0f);
    for (int64_t v0 = 0; v0 < nv;) {
      int64_t left = nv - v0;
      int vi = left >= 4 ? 2 : left >= 2 ? 1 : 0;
      for (int64_t oh = 0; oh < OH;) {
        int64_t r = OH - oh < dwk_max_rows[vi] ? OH - oh : dwk_max_rows[vi];
        dwk_blocks[vi][r - 1](&pl, oh, 8 * v0);
        oh += r;
      }
      v0 += (int64_t)1 << vi;
    }
    if (e && !native) {
      kiln_rt_epilogue_ctx ctx = {e->buffers, p * OH * OW, 0};
      e->fn(&ctx, pl.y, 0, 0, 0, 1, OH * OW);
    }
  }
}
#endif

void kiln_conv_dwk_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *x, const float *w,
                       const float *bias, float *y, float *scratch, size_t thread_floats,
                       const kiln_conv_epilogue *epi) {
#if DWK_X86
  if (epi && !epi->fn) epi = NULL;
  dwk_ctx k = {c, {0}, x, w, bias, y, scratch, thread_floats, epi};
  dwk_dims_of(c, &k.d);
  kiln_parallel_for(pool, c->n * c->co, 1, dwk_planes_avx2, &k);
#else
  (void)c, (void)pool, (void)x, (void)w, (void)bias, (void)y, (void)scratch, (void)thread_floats, (void)epi;
#endif
}
