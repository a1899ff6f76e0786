/* cpu_conv_rows.c — 2-D convolution as the direct pointwise kernel over
 * im2col columns built in L1, 48 output pixels at a time (AVX-512).
 *
 * For one output row and 48 of its columns, the 48 values each (channel,
 * kh, kw) of the window contributes are gathered with vector loads into a
 * small buffer xs[kdim][48] (stride 1: one masked load per 16 columns;
 * stride 2: two masked loads and a permute that keeps the even lanes; the
 * padding is masked-off lanes, i.e. zeros). The pointwise kernel
 * (cpu_conv_pw.c) then multiplies the prepacked weights [co][kdim] by it,
 * adds the bias, applies the epilogue in registers and stores the 48
 * pixels of every output channel. Unlike a whole im2col matrix, the buffer
 * is written and read while it is in L1 (kdim * 192 bytes).
 *
 * Meant for convolutions with few input channels per window (network
 * stems: 3 channels, 3x3 or 7x7, stride 2) and 1x1 stride-2 ones.
 */
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define ROWS_X86 1
#define ROWS_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#else
#define ROWS_X86 0
#endif

enum { NC = 48 };

bool kiln_conv_rows_applies(const kiln_conv_geom *c) {
  if (!ROWS_X86 || c->nsp != 2 || c->group != 1 || c->kdim > KILN_ROWS_MAX_KDIM) return false;
  for (int i = 0; i < 2; i++)
    if (c->dil[i] != 1 || c->pad_begin[i] < 0 || c->pad_begin[i] >= c->k[i] || c->out_sp[i] < 1) return false;
  return c->stride[1] == 1 || c->stride[1] == 2;
}

size_t kiln_conv_rows_thread_floats(const kiln_conv_geom *c) { return (size_t)c->kdim * NC; }

typedef struct rows_ctx {
  const kiln_conv_geom *c;
  int isa;
  const float *packed, *x, *bias;
  float *y;
  float *scratch;
  size_t thread_floats;
  const kiln_conv_epilogue *epi;
  int64_t groups; /* column groups of NC per output row */
} rows_ctx;

#if ROWS_X86
static uint16_t lanes(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > 16) hi = 16;
  if (hi <= lo) return 0;
  return (uint16_t)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* xs[k][0..48) for output row oh, columns ow0..ow0+47 of image x. */
static ROWS_AVX512 void rows_gather(const kiln_conv_geom *c, const float *x, int64_t oh, int64_t ow0, float *xs) {
  int64_t H = c->in_sp[0], W = c->in_sp[1], KH = c->k[0], KW = c->k[1];
  int64_t ph = c->pad_begin[0], pw = c->pad_begin[1], sh = c->stride[0], sw = c->stride[1];
  int64_t cig = c->ci;
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t ci = 0; ci < cig; ci++)
    for (int64_t kh = 0; kh < KH; kh++) {
      int64_t ih = oh * sh - ph + kh;
      float *dst = xs + (ci * KH + kh) * KW * NC;
      if (ih < 0 || ih >= H) {
        memset(dst, 0, (size_t)(KW * NC) * sizeof(float));
        continue;
      }
      const float *row = x + (ci * H + ih) * W;
      for (int64_t kw = 0; kw < KW; kw++, dst += NC) {
        for (int v = 0; v < NC / 16; v++) {
          int64_t ow = ow0 + 16 * v;
          __m512 r;
          if (sw == 1) {
            int64_t st = ow - pw + kw;
            r = _mm512_maskz_loadu_ps(lanes(-st, W - st), row + st);
          } else {
            int64_t st = 2 * ow - pw + kw;
            __m512 a = _mm512_maskz_loadu_ps(lanes(-st, W - st), row + st);
            __m512 b = _mm512_maskz_loadu_ps(lanes(-(st + 16), W - (st + 16)), row + st + 16);
            r = _mm512_permutex2var_ps(a, ev, b);
          }
          _mm512_storeu_ps(dst + 16 * v, r);
        }
      }
    }
}

static void rows_items(void *vctx, int64_t begin, int64_t end, int thread) {
  const rows_ctx *r = vctx;
  const kiln_conv_geom *c = r->c;
  int64_t OH = c->out_sp[0], OW = c->out_sp[1], osize = c->osize;
  int64_t in_img = c->ci * c->in_sp[0] * c->in_sp[1], out_img = c->co * osize;
  float *xs = r->scratch + (size_t)thread * r->thread_floats;
  for (int64_t it = begin; it < end; it++) {
    int64_t img = it / (OH * r->groups), rem = it % (OH * r->groups);
    int64_t oh = rem / r->groups, ow0 = (rem % r->groups) * NC;
    rows_gather(c, r->x + img * in_img, oh, ow0, xs);
    int64_t off = img * out_img + oh * OW + ow0;
    kiln_conv_pw_job j = {.co = c->co,
                          .k = c->kdim,
                          .hw = OW - ow0 < NC ? OW - ow0 : NC,
                          .ldx = NC,
                          .ldy = osize,
                          .packed = r->packed,
                          .x = xs,
                          .bias = r->bias,
                          .y = r->y + off,
                          .y_base = off,
                          .epi = r->epi};
    kiln_conv_pw_run(NULL, r->isa, &j);
  }
}
#endif

void kiln_conv_rows_run(const kiln_conv_geom *c, kiln_threadpool *pool, int isa, const float *packed, const float *x,
                        const float *bias, float *y, float *scratch, size_t thread_floats,
                        const kiln_conv_epilogue *epi) {
#if ROWS_X86
  rows_ctx r = {c, isa, packed, x, bias, y, scratch, thread_floats, epi, (c->out_sp[1] + NC - 1) / NC};
  kiln_parallel_for(pool, c->n * c->out_sp[0] * r.groups, 1, rows_items, &r);
#else
  (void)c, (void)pool, (void)isa, (void)packed, (void)x, (void)bias, (void)y, (void)scratch, (void)thread_floats,
      (void)epi;
#endif
}
