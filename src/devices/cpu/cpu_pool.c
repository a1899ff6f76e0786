/* kiln_rt.pooling on the cpu: MaxPool and AveragePool of 1-3 spatial dims as
 * separable passes, one axis at a time (innermost first), over each
 * plane.
 *
 * A window over the whole plane (a global pool, or a pool whose kernel is
 * the input) is one vectorized reduction per plane instead.
 *
 * A window is a box, so its max is the max over the last axis' taps, then
 * over the next axis' of those, and so on; its sum likewise, in the order
 * the tensor-expression definition (lower.c's compute_pool) nests them,
 * which makes the result the same as the generated loops'. Each pass
 * computes an output row once per input row instead of once per window
 * (3x fewer loads for a 3x3 window) and runs contiguous or strided loops
 * the compiler vectorizes, where the loop nest evaluated the window with a
 * bounds check per tap. The loops (cpu_pool_impl.h) are built portable and
 * for AVX2, chosen by the CPU's features. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "devices/cpu/cpu_internal.h"

/* One spatial axis of the window, with the range of outputs each tap k
 * reads inside the input ([lo[k], hi[k]); empty when lo >= hi). */
typedef struct pool_axis {
  int64_t kernel, stride, dilation, pad_begin;
  int64_t *lo, *hi;
} pool_axis;

#define POOL_FN(name) name##_generic
#include "devices/cpu/cpu_pool_impl.h"
#undef POOL_FN

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POOL_HAVE_AVX2 1
#include "devices/cpu/target_avx2_begin.h"
#define POOL_FN(name) name##_avx2
#include "devices/cpu/cpu_pool_impl.h"
#undef POOL_FN
#include "devices/cpu/target_avx2_end.h"
#endif

typedef struct pool_job {
  const kiln_rt *rt;
  const kiln_rt_pool_args *a;
  pool_axis axes[3];
  float *count[3];   /* average: each axis' count per output position */
  size_t scratch;    /* floats of scratch per plane */
  bool avx2;
  bool whole;        /* one window covering the whole plane (a global pool): one reduction per plane */
} pool_job;

/* Floor division for a positive divisor. */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Whether an axis is the identity (a 1-tap window at every position). */
static bool identity_axis(const kiln_rt_pool_args *a, int i) {
  return a->kernel[i] == 1 && a->stride[i] == 1 && a->pad_begin[i] == 0 && a->in[i] == a->out[i];
}

/* A 2-D window of stride 1 (3x3/1 in Inception, 5x5/1 in SPP blocks) on
 * a padded copy of the plane: padding holds the reduction's identity (what
 * the definition adds or compares for a padded tap), the rows are Wp =
 * OW + (KW-1)*dw wide, and both passes are single loops over the whole
 * plane; the columns past OW of each row are computed and dropped. */
static bool padded_path(const kiln_rt_pool_args *a) {
  return a->nsp == 2 && a->stride[0] == 1 && a->stride[1] == 1;
}

/* A 2x2 window of stride 2 whose windows are all inside the plane (VGG's,
 * U-Net's and most small CNNs' pools): both axes in one pass
 * (cpu_pool_impl.h body_2x2s2). */
static bool path_2x2s2(const kiln_rt_pool_args *a) {
  if (a->nsp != 2) return false;
  for (int i = 0; i < 2; i++)
    if (a->kernel[i] != 2 || a->stride[i] != 2 || a->dilation[i] != 1 || a->pad_begin[i] != 0 ||
        2 * a->out[i] > a->in[i])
      return false;
  return true;
}

static void padded_dims(const kiln_rt_pool_args *a, int64_t *hp, int64_t *wp) {
  *hp = a->out[0] + (a->kernel[0] - 1) * a->dilation[0];
  *wp = a->out[1] + (a->kernel[1] - 1) * a->dilation[1];
}

static void pool_plane_padded(const pool_job *j, const float *x, float *y, float *scratch) {
  const kiln_rt_pool_args *a = j->a;
  int64_t hp, wp, H = a->in[0], W = a->in[1], OH = a->out[0], OW = a->out[1];
  padded_dims(a, &hp, &wp);
  float *padded = scratch, *rows = scratch + hp * wp, *out = padded; /* the last pass reuses the first buffer */
  const float init = a->max ? -INFINITY : 0.0f;
  int64_t top = a->pad_begin[0], left = a->pad_begin[1];
  for (int64_t r = 0; r < hp; r++) {
    float *dst = padded + r * wp;
    int64_t ih = r - top;
    int64_t c0 = left < wp ? left : wp, n = ih >= 0 && ih < H ? W : 0;
    if (n > wp - c0) n = wp - c0;
    for (int64_t c = 0; c < c0; c++) dst[c] = init;
    for (int64_t c = 0; c < n; c++) dst[c0 + c] = x[ih * W + c];
    for (int64_t c = c0 + n; c < wp; c++) dst[c] = init;
  }
  /* along W: every padded row at once (the last KW-1 columns of the last
   * row have no window and are not computed) */
  int64_t nw = hp * wp - (a->kernel[1] - 1) * a->dilation[1];
#ifdef POOL_HAVE_AVX2
  if (j->avx2) flat_taps_avx2(padded, rows, nw, a->kernel[1], a->dilation[1], a->max);
  else
#endif
    flat_taps_generic(padded, rows, nw, a->kernel[1], a->dilation[1], a->max);
  /* along H: rows oh, oh + dh, ... of the W pass */
  int64_t nh = (OH - 1) * wp + OW;
#ifdef POOL_HAVE_AVX2
  if (j->avx2) flat_taps_avx2(rows, out, nh, a->kernel[0], a->dilation[0] * wp, a->max);
  else
#endif
    flat_taps_generic(rows, out, nh, a->kernel[0], a->dilation[0] * wp, a->max);
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) y[oh * OW + ow] = out[oh * wp + ow];
}

/* One plane: the passes (or the padded path), then the average's division. */
static void pool_plane(const void *job, const float *src, float *y, float *scratch) {
  const pool_job *j = job;
  const kiln_rt_pool_args *a = j->a;
  int nsp = a->nsp;
  if (j->whole) {
    int64_t n = 1;
    for (int i = 0; i < nsp; i++) n *= a->in[i];
#ifdef POOL_HAVE_AVX2
    float v = j->avx2 ? plane_reduce_avx2(src, n, a->max) : plane_reduce_generic(src, n, a->max);
#else
    float v = plane_reduce_generic(src, n, a->max);
#endif
    y[0] = a->max ? v : v / (float)n;
    return;
  }
  if (padded_path(a)) {
    pool_plane_padded(j, src, y, scratch);
  } else if (path_2x2s2(a)) {
#ifdef POOL_HAVE_AVX2
    if (j->avx2) plane_2x2s2_avx2(src, y, a->in[1], a->out[0], a->out[1], a->max);
    else
#endif
      plane_2x2s2_generic(src, y, a->in[1], a->out[0], a->out[1], a->max);
  } else {
    /* dims of the block as the passes go: axes before i at the input's
     * size, axis i and after at the output's. */
    int64_t dims[3], out_size = 1;
    for (int i = 0; i < nsp; i++) {
      dims[i] = a->in[i];
      out_size *= a->out[i];
    }
    float *bufs[2] = {scratch, scratch ? scratch + j->scratch / 2 : NULL};
    int last_pass = -1;
    for (int i = nsp - 1; i >= 0; i--)
      if (!identity_axis(a, i)) last_pass = i; /* the outermost reduced axis: its pass writes y */
    int flip = 0;
    for (int i = nsp - 1; i >= 0; i--) {
      if (identity_axis(a, i)) continue;
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < i; d++) outer *= dims[d];
      for (int d = i + 1; d < nsp; d++) inner *= dims[d];
      float *dst = i == last_pass ? y : bufs[flip];
      bool max = a->max;
      if (inner == 1) {
#ifdef POOL_HAVE_AVX2
        if (j->avx2) pass_last_avx2(src, dst, outer, dims[i], a->out[i], &j->axes[i], max);
        else
#endif
          pass_last_generic(src, dst, outer, dims[i], a->out[i], &j->axes[i], max);
      } else {
#ifdef POOL_HAVE_AVX2
        if (j->avx2) pass_mid_avx2(src, dst, outer, dims[i], a->out[i], inner, &j->axes[i], max);
        else
#endif
          pass_mid_generic(src, dst, outer, dims[i], a->out[i], inner, &j->axes[i], max);
      }
      dims[i] = a->out[i];
      src = dst;
      flip ^= 1;
    }
    if (last_pass < 0) /* every axis the identity: a copy */
      for (int64_t e = 0; e < out_size; e++) y[e] = src[e];
  }
  if (!a->max) {
#ifdef POOL_HAVE_AVX2
    if (j->avx2) divide_avx2(y, nsp, a->out, j->count);
    else
#endif
      divide_generic(y, nsp, a->out, j->count);
  }
}

void kiln_cpu_pool(const kiln_rt *rt, const kiln_rt_pool_args *a) {
  pool_job j = {.rt = rt, .a = a};
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  j.avx2 = cpu->avx2 && cpu->fma;
  int nsp = a->nsp;
  /* The per-axis tap ranges and counts, in one allocation. */
  int64_t taps = 0, outs = 0;
  for (int i = 0; i < nsp; i++) {
    taps += a->kernel[i];
    outs += a->out[i];
  }
  int64_t *ranges = malloc((size_t)(2 * taps) * sizeof *ranges);
  float *counts = a->max ? NULL : malloc((size_t)outs * sizeof *counts);
  if (!ranges || (!a->max && !counts)) {
    free(ranges);
    free(counts);
    rt->fail(rt, "out of memory for a pool's window ranges");
    return;
  }
  int64_t *r = ranges;
  float *c = counts;
  for (int i = 0; i < nsp; i++) {
    pool_axis *ax = &j.axes[i];
    *ax = (pool_axis){a->kernel[i], a->stride[i], a->dilation[i], a->pad_begin[i], r, r + a->kernel[i]};
    r += 2 * a->kernel[i];
    for (int64_t k = 0; k < ax->kernel; k++) {
      /* o*stride - pad + k*dilation in [0, in) */
      int64_t off = k * ax->dilation - ax->pad_begin;
      int64_t lo = floor_div(-off + ax->stride - 1, ax->stride), hi = floor_div(a->in[i] - 1 - off, ax->stride) + 1;
      ax->lo[k] = clamp64(lo, 0, a->out[i]);
      ax->hi[k] = clamp64(hi, ax->lo[k], a->out[i]);
    }
    if (!a->max) {
      j.count[i] = c;
      int64_t limit = a->count_include_pad ? a->in[i] + a->pad_end[i] : a->in[i];
      int64_t first = a->count_include_pad ? -a->pad_begin[i] : 0;
      for (int64_t o = 0; o < a->out[i]; o++) {
        int64_t n = 0;
        for (int64_t k = 0; k < ax->kernel; k++) {
          int64_t pos = o * ax->stride - ax->pad_begin + k * ax->dilation;
          n += pos >= first && pos < limit;
        }
        c[o] = (float)n;
      }
      c += a->out[i];
    }
  }
  /* Scratch per plane: two blocks of the largest intermediate (the
   * passes alternate between them; the last writes y). */
  int64_t dims[3], biggest = 0;
  for (int i = 0; i < nsp; i++) dims[i] = a->in[i];
  for (int i = nsp - 1; i >= 0; i--) {
    dims[i] = a->out[i];
    int64_t e = 1;
    for (int d = 0; d < nsp; d++) e *= dims[d];
    if (i > 0 && e > biggest) biggest = e;
  }
  j.scratch = (size_t)(2 * biggest);
  j.whole = true;
  for (int i = 0; i < nsp; i++)
    j.whole = j.whole && a->kernel[i] == a->in[i] && a->out[i] == 1 && a->pad_begin[i] == 0 && a->dilation[i] == 1;
  if (j.whole) j.scratch = 0;
  else if (padded_path(a)) {
    int64_t hp, wp;
    padded_dims(a, &hp, &wp);
    j.scratch = (size_t)(2 * hp * wp);
  }
  kiln_cpu_planes planes = {.rt = rt, .oom_message = "out of memory for a pool's scratch", .plane = pool_plane,
                            .job = &j, .x = a->x, .y = a->y, .in_size = 1, .out_size = 1, .scratch = j.scratch,
                            .epilogue = a->epilogue, .epilogue_buffers = a->epilogue_buffers};
  for (int i = 0; i < nsp; i++) {
    planes.in_size *= a->in[i];
    planes.out_size *= a->out[i];
  }
  kiln_cpu_run_planes(&planes, a->planes);
  free(ranges);
  free(counts);
}
