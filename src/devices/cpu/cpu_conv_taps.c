/* cpu_conv_taps.c — a 2-D convolution as one GEMM per kernel tap, each over
 * only the outputs whose input for that tap lies inside the image
 * (KILN_CONV_TAPS; see cpu_internal.h).
 *
 * Why: a dilated convolution over a small map reads padding for most of
 * its taps (DeepLabV3's ASPP: 3x3 taps 12 and 24 apart over a 33x33 map,
 * 43% and 73% of the im2col matrix zeros). im2col + SGEMM multiplies all
 * those zeros; here tap t = (kh, kw) contributes W[:, :, kh, kw] x X
 * shifted, a [Co, Ci] x [Ci, pixels] GEMM over the rectangle of outputs
 * where the shifted input exists, so only real products are computed.
 *
 * Per image: y starts as the bias (or 0); each tap's rectangle is either
 * read in place (its input rows are whole rows at column offset 0: B is
 * the input plane with ldb = H*W and C the output rows with ldc = OH*OW)
 * or gathered into scratch, multiplied into a scratch tile and added into
 * y. The caller applies the epilogue to the finished output.
 */
#include <string.h>

#include "base/threadpool.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Outputs [lo, hi] along axis a whose input for kernel offset k exists (stride 1). */
static void tap_range(const kiln_conv_geom *c, int a, int64_t k, int64_t *lo, int64_t *hi) {
  int64_t off = k * c->dil[a] - c->pad_begin[a]; /* input index = output index + off */
  *lo = max64(0, -off);
  *hi = min64(c->out_sp[a] - 1, c->in_sp[a] - 1 - off);
}

bool kiln_conv_taps_applies(const kiln_conv_geom *c) {
  return c->nsp == 2 && c->group == 1 && c->stride[0] == 1 && c->stride[1] == 1 && c->osize > 0;
}

double kiln_conv_taps_valid_fraction(const kiln_conv_geom *c) {
  double valid = 0;
  for (int64_t kh = 0; kh < c->k[0]; kh++)
    for (int64_t kw = 0; kw < c->k[1]; kw++) {
      int64_t h0, h1, w0, w1;
      tap_range(c, 0, kh, &h0, &h1);
      tap_range(c, 1, kw, &w0, &w1);
      if (h1 >= h0 && w1 >= w0) valid += (double)(h1 - h0 + 1) * (double)(w1 - w0 + 1);
    }
  return valid / ((double)c->k[0] * (double)c->k[1] * (double)c->osize);
}

size_t kiln_conv_taps_weight_floats(const kiln_conv_geom *c) { return (size_t)(c->k[0] * c->k[1] * c->co * c->ci); }

void kiln_conv_taps_pack(const kiln_conv_geom *c, const float *w, float *dst) {
  int64_t taps = c->k[0] * c->k[1];
  for (int64_t t = 0; t < taps; t++)
    for (int64_t o = 0; o < c->co; o++)
      for (int64_t i = 0; i < c->ci; i++) dst[(t * c->co + o) * c->ci + i] = w[(o * c->ci + i) * taps + t];
}

size_t kiln_conv_taps_scratch_floats(const kiln_conv_geom *c) {
  return (size_t)((c->ci + c->co) * c->osize) + 64; /* the gathered input, then the product tile */
}

typedef struct taps_job {
  const kiln_conv_geom *c;
  const float *x; /* one image */
  const float *bias;
  float *y; /* one image */
  float *gather, *tile;
  int64_t h0, nh, w0, nw, offh, offw; /* the tap's output rectangle and input offset */
} taps_job;

static void init_planes(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const taps_job *j = ctx;
  for (int64_t o = begin; o < end; o++) {
    float *p = j->y + o * j->c->osize, v = j->bias ? j->bias[o] : 0.0f;
    for (int64_t i = 0; i < j->c->osize; i++) p[i] = v;
  }
}

static void gather_planes(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const taps_job *j = ctx;
  int64_t H = j->c->in_sp[0], W = j->c->in_sp[1];
  for (int64_t i = begin; i < end; i++)
    for (int64_t r = 0; r < j->nh; r++)
      memcpy(j->gather + (i * j->nh + r) * j->nw, j->x + (i * H + j->h0 + r + j->offh) * W + j->w0 + j->offw,
             (size_t)j->nw * sizeof(float));
}

static void add_planes(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const taps_job *j = ctx;
  int64_t OW = j->c->out_sp[1];
  for (int64_t o = begin; o < end; o++)
    for (int64_t r = 0; r < j->nh; r++) {
      float *d = j->y + o * j->c->osize + (j->h0 + r) * OW + j->w0;
      const float *s = j->tile + (o * j->nh + r) * j->nw;
      for (int64_t q = 0; q < j->nw; q++) d[q] += s[q];
    }
}

void kiln_conv_taps_run(const kiln_conv_geom *c, kiln_threadpool *pool, const float *wt, const float *x,
                        const float *bias, float *y, float *scratch) {
  int64_t H = c->in_sp[0], W = c->in_sp[1], OW = c->out_sp[1];
  for (int64_t img = 0; img < c->n; img++) {
    taps_job j = {.c = c, .x = x + img * c->ci * H * W, .bias = bias, .y = y + img * c->co * c->osize,
                  .gather = scratch, .tile = scratch + c->ci * c->osize};
    kiln_parallel_for(pool, c->co, 8, init_planes, &j);
    for (int64_t kh = 0; kh < c->k[0]; kh++)
      for (int64_t kw = 0; kw < c->k[1]; kw++) {
        int64_t h1, w1;
        tap_range(c, 0, kh, &j.h0, &h1);
        tap_range(c, 1, kw, &j.w0, &w1);
        j.nh = h1 - j.h0 + 1, j.nw = w1 - j.w0 + 1;
        if (j.nh <= 0 || j.nw <= 0) continue;
        j.offh = kh * c->dil[0] - c->pad_begin[0];
        j.offw = kw * c->dil[1] - c->pad_begin[1];
        kiln_sgemm_args g = {.m = c->co, .n = j.nh * j.nw, .k = c->ci, .alpha = 1.0f,
                             .a = wt + (kh * c->k[1] + kw) * c->co * c->ci, .lda = c->ci};
        if (j.nw == OW && j.offw == 0 && W == OW) { /* whole rows: read and write in place */
          g.b = j.x + (j.h0 + j.offh) * W, g.ldb = H * W;
          g.c = j.y + j.h0 * OW, g.ldc = c->osize, g.beta = 1.0f;
          kiln_sgemm(pool, &g);
          continue;
        }
        kiln_parallel_for(pool, c->ci, 16, gather_planes, &j);
        g.b = j.gather, g.ldb = g.n;
        g.c = j.tile, g.ldc = g.n, g.beta = 0.0f;
        kiln_sgemm(pool, &g);
        kiln_parallel_for(pool, c->co, 8, add_planes, &j);
      }
  }
}
