/* ConvTranspose on the cpu (kiln_rt.conv with args.transposed): for each
 * image and group, one SGEMM computes every input pixel times every tap,
 * cols[(om, k), i] = sum over the group's input channels c of
 * w[c, om, k] * x[c, i] (W's rows are the input channels, so A = W_g
 * transposed), then col2im adds each (tap, pixel) product to the output
 * position i*stride - pad + k*dilation it lands on. This is the scatter
 * the reference kernel does, with the multiply-adds on the packed SGEMM
 * micro-kernels. The columns of a big input are made in chunks of input
 * rows (at most CT_CHUNK_BYTES). Every pass runs one output channel per
 * task, so no two threads write the same plane: the bias first, each
 * chunk's columns, then the residual and clip or the kernel's epilogue.
 * Small input planes over a batch (group 1) take one SGEMM over the
 * pixels of many images instead (batch_images below).
 *
 * Taps that land outside the output for every input pixel (3x3 pad 1 over
 * 1x1 planes: all but the centre) add nothing: the GEMM's rows are only
 * the live taps' (W's columns of them gathered per run, its values not
 * being constant in training), so M shrinks with them (ResNet-18's layer4
 * data gradients, M / 9). */
#include <string.h>

#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"

/* The most live taps pruned (more: every tap kept). */
#define CT_MAX_LIVE 1024

/* Spatial geometry widened to 3 axes (leading unit axes). */
typedef struct ct_geom {
  int64_t in[3], out[3], k[3], s[3], d[3], p[3];
  int64_t in_size, out_size, taps;
  /* The live taps: along axis i, kernel positions kf[i] + j * ks[i], j < kn[i]
   * (all of them where the live ones are no progression); live of them in all. */
  int64_t kf[3], ks[3], kn[3], live;
} ct_geom;

typedef struct ct_task {
  const kiln_rt_conv_args *a;
  const ct_geom *g;
  const float *cols; /* [mg * live, ld]: the chunk's input rows of this image and group */
  int64_t ld;        /* cols' row stride: rows * in[2], or images * in_size over a batch */
  int64_t image, group, mg;
  int64_t row0, rows; /* the chunk: input rows (i0 * in[1] + i1) [row0, row0 + rows) */
} ct_task;

/* First i in [0, n) with i*s + off >= 0, and one past the last with
 * i*s + off < out. */
static void valid_range(int64_t n, int64_t s, int64_t off, int64_t out, int64_t *lo, int64_t *hi) {
  int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t b = out - off <= 0 ? 0 : (out - off + s - 1) / s;
  *lo = a < n ? a : n;
  *hi = b < n ? b : n;
  if (*hi < *lo) *hi = *lo;
}

static float *plane_of(const ct_task *t, int64_t om) {
  return t->a->y + (t->image * t->a->co + t->group * t->mg + om) * t->g->out_size;
}

/* Output channel om's plane starts as its bias. */
static void init_plane(const ct_task *t, int64_t om) {
  float *y = plane_of(t, om), b0 = t->a->bias ? t->a->bias[t->group * t->mg + om] : 0.0f;
  for (int64_t i = 0; i < t->g->out_size; i++) y[i] = b0;
}

static void init_channels(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  for (int64_t om = begin; om < end; om++) init_plane(vctx, om);
}

/* Adds the chunk's columns into output channel om's plane. */
static void col2im_plane(const ct_task *t, int64_t om) {
  const ct_geom *g = t->g;
  float *y = plane_of(t, om);
  int64_t tap = 0;
  for (int64_t j0 = 0; j0 < g->kn[0]; j0++)
    for (int64_t j1 = 0; j1 < g->kn[1]; j1++)
      for (int64_t j2 = 0; j2 < g->kn[2]; j2++, tap++) {
        int64_t k0 = g->kf[0] + j0 * g->ks[0], k1 = g->kf[1] + j1 * g->ks[1], k2 = g->kf[2] + j2 * g->ks[2];
        const float *col = t->cols + (om * g->live + tap) * t->ld;
        int64_t off0 = k0 * g->d[0] - g->p[0], off1 = k1 * g->d[1] - g->p[1], off2 = k2 * g->d[2] - g->p[2];
        int64_t lo0, hi0, lo1, hi1, lo2, hi2;
        valid_range(g->in[0], g->s[0], off0, g->out[0], &lo0, &hi0);
        valid_range(g->in[1], g->s[1], off1, g->out[1], &lo1, &hi1);
        valid_range(g->in[2], g->s[2], off2, g->out[2], &lo2, &hi2);
        for (int64_t r = t->row0; r < t->row0 + t->rows; r++) {
          int64_t i0 = r / g->in[1], i1 = r % g->in[1];
          if (i0 < lo0 || i0 >= hi0 || i1 < lo1 || i1 >= hi1) continue;
          const float *src = col + (r - t->row0) * g->in[2];
          float *dst = y + ((i0 * g->s[0] + off0) * g->out[1] + i1 * g->s[1] + off1) * g->out[2] + off2;
          int64_t s2 = g->s[2];
          if (s2 == 1)
            for (int64_t i2 = lo2; i2 < hi2; i2++) dst[i2] += src[i2];
          else
            for (int64_t i2 = lo2; i2 < hi2; i2++) dst[i2 * s2] += src[i2];
        }
      }
}

static void col2im_channels(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  for (int64_t om = begin; om < end; om++) col2im_plane(vctx, om);
}

/* The residual and clip, or the kernel's epilogue, on output channel om's finished plane. */
static void finish_plane(const ct_task *t, int64_t om) {
  const kiln_rt_conv_args *a = t->a;
  const ct_geom *g = t->g;
  int64_t row = t->image * a->co + t->group * t->mg + om;
  float *y = plane_of(t, om);
  if (a->add || a->clip) {
    const float *add = a->add ? a->add + row * g->out_size : NULL;
    for (int64_t i = 0; i < g->out_size; i++) {
      float v = add ? y[i] + add[i] : y[i];
      if (a->clip) {
        v = v < a->lo ? a->lo : v; /* NaN compares false: kept */
        v = v > a->hi ? a->hi : v;
      }
      y[i] = v;
    }
  } else if (a->epilogue) {
    kiln_rt_epilogue_ctx ectx = {a->epilogue_buffers, 0, g->out_size};
    a->epilogue(&ectx, y, g->out_size, row, 0, 1, g->out_size);
  }
}

static void finish_channels(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  for (int64_t om = begin; om < end; om++) finish_plane(vctx, om);
}

/* The columns of one chunk take at most this much (a long 1-D signal or a
 * big image is done in chunks of input rows). */
#define CT_CHUNK_BYTES ((size_t)16 << 20)

static int64_t rows_per_chunk(const kiln_rt_conv_args *a, int64_t taps, int64_t row_len, int64_t rows) {
  size_t per_row = (size_t)(a->co / a->group) * (size_t)taps * (size_t)row_len * sizeof(float);
  int64_t r = per_row ? (int64_t)(CT_CHUNK_BYTES / per_row) : rows;
  return r < 1 ? 1 : r > rows ? rows : r;
}

static void geometry(const kiln_rt_conv_args *a, ct_geom *g) {
  int lead = 3 - a->nsp;
  for (int i = 0; i < 3; i++) {
    bool unit = i < lead;
    g->in[i] = unit ? 1 : a->in[i - lead];
    g->out[i] = unit ? 1 : a->out[i - lead];
    g->k[i] = unit ? 1 : a->kernel[i - lead];
    g->s[i] = unit ? 1 : a->stride[i - lead];
    g->d[i] = unit ? 1 : a->dilation[i - lead];
    g->p[i] = unit ? 0 : a->pad_begin[i - lead];
  }
  g->in_size = g->in[0] * g->in[1] * g->in[2];
  g->out_size = g->out[0] * g->out[1] * g->out[2];
  g->taps = g->k[0] * g->k[1] * g->k[2];
  g->live = 1;
  for (int i = 0; i < 3; i++) {
    int64_t first = 0, step = 1, count = 0;
    bool prog = true;
    for (int64_t k = 0; k < g->k[i]; k++) {
      int64_t lo, hi;
      valid_range(g->in[i], g->s[i], k * g->d[i] - g->p[i], g->out[i], &lo, &hi);
      if (lo >= hi) continue;
      if (count == 0) first = k;
      else if (count == 1) step = k - first;
      else if (k != first + count * step) prog = false;
      count++;
    }
    if (!prog || count == 0 || g->k[i] > CT_MAX_LIVE) { /* keep every tap (none live: the columns are not read) */
      first = 0;
      step = 1;
      count = g->k[i];
    }
    g->kf[i] = first;
    g->ks[i] = step;
    g->kn[i] = count;
    g->live *= count;
  }
  if (g->live > CT_MAX_LIVE) { /* gather_live's offsets: too many to prune */
    for (int i = 0; i < 3; i++) {
      g->kf[i] = 0;
      g->ks[i] = 1;
      g->kn[i] = g->k[i];
    }
    g->live = g->taps;
  }
}

/* W's columns of the live taps, [ci rows, mg * live] for input channels
 * [c0, c0 + rows) of group grp (W's rows: input channels, each [mg, taps]). */
static void gather_live(const kiln_rt_conv_args *a, const ct_geom *g, int64_t c0, int64_t rows, float *dst) {
  int64_t mg = a->co / a->group, live = g->live, off[CT_MAX_LIVE], j = 0;
  for (int64_t j0 = 0; j0 < g->kn[0]; j0++)
    for (int64_t j1 = 0; j1 < g->kn[1]; j1++)
      for (int64_t j2 = 0; j2 < g->kn[2]; j2++)
        off[j++] = ((g->kf[0] + j0 * g->ks[0]) * g->k[1] + g->kf[1] + j1 * g->ks[1]) * g->k[2] + g->kf[2] +
                   j2 * g->ks[2];
  const float *src = a->w + c0 * mg * g->taps;
  for (int64_t r = 0; r < rows * mg; r++, src += g->taps, dst += live)
    for (int64_t t = 0; t < live; t++) dst[t] = src[off[t]];
}

typedef struct ct_gather {
  const kiln_rt_conv_args *a;
  const ct_geom *g;
  int64_t c0;
  float *dst;
} ct_gather;

/* Items: input channels c0 + item. */
static void gather_channels(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ct_gather *q = vctx;
  int64_t per = (q->a->co / q->a->group) * q->g->live;
  gather_live(q->a, q->g, q->c0 + begin, end - begin, q->dst + begin * per);
}

/* A's (W's) live taps for input channels [c0, c0 + rows): W itself when every tap is live, else gathered into dst. */
static const float *live_weights(kiln_threadpool *pool, const kiln_rt_conv_args *a, const ct_geom *g, int64_t c0,
                                 int64_t rows, float *dst) {
  if (g->live == g->taps) return a->w + c0 * (a->co / a->group) * g->taps;
  ct_gather q = {a, g, c0, dst};
  kiln_parallel_for(pool, rows, 1, gather_channels, &q);
  return dst;
}

/* Small input planes over a batch: one SGEMM over the pixels of every
 * image of a chunk (cols[(om, k), image * in_size + i], the inputs
 * gathered into [ci, images * in_size] first), then each (image, output
 * channel) plane made whole at once: bias, col2im, epilogue. A GEMM per
 * image has N = in_size there (a GEMV over 1x1 planes). Measured on
 * ResNet-18's data gradients (ConvTranspose + the ReLU mask) at 32x32,
 * batch 32, 2 threads: 1x1 planes, 512 channels, 37 -> 4 ms; 2x2, 256,
 * 6.6 -> 2.0; 4x4, 128, 2.1 -> 1.5; 8x8, 64, loses (1.4 -> 1.6-2.5 ms).
 * 5x5 to 7x7 planes are not measured yet. Returns the images per chunk,
 * 0: a GEMM per image. */
#define CT_BATCH_MAX_IN 16

static int64_t batch_images(const kiln_rt_conv_args *a, const ct_geom *g) {
  if (a->group != 1 || a->n < 2 || g->in_size > CT_BATCH_MAX_IN) return 0;
  size_t per_image = ((size_t)a->co * (size_t)g->live + (size_t)a->ci) * (size_t)g->in_size * sizeof(float);
  int64_t images = (int64_t)(CT_CHUNK_BYTES / per_image);
  if (images < 2) return 0;
  return images < a->n ? images : a->n;
}

size_t kiln_conv_transpose_scratch_bytes(const kiln_rt_conv_args *a) {
  ct_geom g;
  geometry(a, &g);
  int64_t images = batch_images(a, &g);
  /* W's live taps after the columns when some are not */
  size_t wl = g.live < g.taps ? (size_t)(a->ci / a->group) * (size_t)(a->co / a->group) * (size_t)g.live : 0;
  if (images)
    return (((size_t)a->co * (size_t)g.live + (size_t)a->ci) * (size_t)(images * g.in_size) + wl) * sizeof(float);
  int64_t rows = g.in[0] * g.in[1];
  return ((size_t)(a->co / a->group) * (size_t)g.live * (size_t)rows_per_chunk(a, g.live, g.in[2], rows) *
              (size_t)g.in[2] +
          wl) *
         sizeof(float);
}

typedef struct ct_batch {
  const kiln_rt_conv_args *a;
  const ct_geom *g;
  float *xb;         /* [ci, images * in_size] */
  const float *cols; /* [co * live, images * in_size] */
  int64_t img0, images;
} ct_batch;

/* Items: (channel, image) of the chunk. */
static void batch_gather(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ct_batch *b = vctx;
  int64_t in_size = b->g->in_size;
  for (int64_t it = begin; it < end; it++) {
    int64_t ch = it / b->images, i = it % b->images;
    memcpy(b->xb + (ch * b->images + i) * in_size, b->a->x + ((b->img0 + i) * b->a->ci + ch) * in_size,
           (size_t)in_size * sizeof(float));
  }
}

/* Items: (image, output channel) planes of the chunk. */
static void batch_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ct_batch *b = vctx;
  const kiln_rt_conv_args *a = b->a;
  for (int64_t it = begin; it < end; it++) {
    int64_t i = it / a->co, om = it % a->co;
    ct_task t = {a, b->g, b->cols + i * b->g->in_size, b->images * b->g->in_size, b->img0 + i, 0, a->co,
                 0, b->g->in[0] * b->g->in[1]};
    init_plane(&t, om);
    col2im_plane(&t, om);
    finish_plane(&t, om);
  }
}

static void run_batched(kiln_threadpool *pool, const kiln_rt_conv_args *a, const ct_geom *g, int64_t chunk,
                        float *scratch) {
  int64_t live = g->live, max_pixels = chunk * g->in_size;
  const float *w = live_weights(pool, a, g, 0, a->ci, scratch + (a->co * live + a->ci) * max_pixels);
  for (int64_t img0 = 0; img0 < a->n; img0 += chunk) {
    int64_t images = a->n - img0 < chunk ? a->n - img0 : chunk, pixels = images * g->in_size;
    float *cols = scratch, *xb = scratch + a->co * live * pixels;
    ct_batch b = {a, g, xb, cols, img0, images};
    kiln_parallel_for(pool, a->ci * images, 1, batch_gather, &b);
    kiln_sgemm_args s = {.trans_a = true, .trans_b = false, .m = a->co * live, .n = pixels, .k = a->ci,
                         .alpha = 1.0f, .a = w, .lda = a->co * live, .b = xb, .ldb = pixels,
                         .beta = 0.0f, .c = cols, .ldc = pixels};
    kiln_sgemm(pool, &s);
    kiln_parallel_for(pool, images * a->co, 1, batch_planes, &b);
  }
}

void kiln_conv_transpose_run(kiln_threadpool *pool, const kiln_rt_conv_args *a, float *cols) {
  ct_geom g;
  geometry(a, &g);
  int64_t cg = a->ci / a->group, mg = a->co / a->group;
  int64_t images = batch_images(a, &g);
  if (images) {
    run_batched(pool, a, &g, images, cols);
    return;
  }
  int64_t rows = g.in[0] * g.in[1], chunk_rows = rows_per_chunk(a, g.live, g.in[2], rows);
  float *wl = cols + mg * g.live * chunk_rows * g.in[2];
  for (int64_t grp = 0; grp < a->group; grp++) {
    const float *wg = live_weights(pool, a, &g, grp * cg, cg, wl);
    for (int64_t n = 0; n < a->n; n++) {
      ct_task t = {a, &g, cols, 0, n, grp, mg, 0, 0};
      kiln_parallel_for(pool, mg, 1, init_channels, &t);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        int64_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
        /* W_g: rows are the group's input channels, each [mg, live] long. */
        kiln_sgemm_args s = {.trans_a = true, .trans_b = false, .m = mg * g.live, .n = nr * g.in[2], .k = cg,
                             .alpha = 1.0f, .a = wg, .lda = mg * g.live,
                             .b = a->x + (n * a->ci + grp * cg) * g.in_size + r0 * g.in[2], .ldb = g.in_size,
                             .beta = 0.0f, .c = cols, .ldc = nr * g.in[2]};
        kiln_sgemm(pool, &s);
        t.ld = nr * g.in[2];
        t.row0 = r0;
        t.rows = nr;
        kiln_parallel_for(pool, mg, 1, col2im_channels, &t);
      }
      kiln_parallel_for(pool, mg, 1, finish_channels, &t);
    }
  }
}
