/* ConvInteger on the integer GEMM (cpu_internal.h, kiln_conv_integer_run):
 * y[n, g] = W_g (co/group x K) * columns (K x pixels), K = ci/group x the
 * kernel's taps; the zero points are the GEMM's (x's for B, w's per row). */
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/igemm.h"

/* dst[0..n) = v and dst[0..n) = src[0..n): inline loops for the short
 * runs im2col writes (a row of a small map is 8-64 bytes, where a libc
 * call per run cost more than the bytes: small_cnn_qdq), libc past 64. */
static inline void fill_run(uint8_t *dst, uint8_t v, int64_t n) {
  if (n > 64) {
    memset(dst, v, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = v;
}

static inline void copy_run(uint8_t *restrict dst, const uint8_t *restrict src, int64_t n) {
  if (n > 64) {
    memcpy(dst, src, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

/* One image and group's columns: row (c, taps) of K, column the output
 * pixel; a tap outside the input reads x_zero. Axes are padded to three
 * (extent 1) so one loop nest serves 1-D to 3-D. */
static void im2col(const kiln_rt_conv_args *a, const uint8_t *x, int64_t cig, uint8_t pad, uint8_t *cols) {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, ker[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pb[3] = {0};
  int off = 3 - a->nsp;
  for (int d = 0; d < a->nsp; d++) {
    in[off + d] = a->in[d];
    out[off + d] = a->out[d];
    ker[off + d] = a->kernel[d];
    st[off + d] = a->stride[d];
    dil[off + d] = a->dilation[d];
    pb[off + d] = a->pad_begin[d];
  }
  int64_t isize = in[0] * in[1] * in[2];
  uint8_t *row = cols;
  for (int64_t c = 0; c < cig; c++)
    for (int64_t k0 = 0; k0 < ker[0]; k0++)
      for (int64_t k1 = 0; k1 < ker[1]; k1++)
        for (int64_t k2 = 0; k2 < ker[2]; k2++) {
          for (int64_t o0 = 0; o0 < out[0]; o0++) {
            int64_t i0 = o0 * st[0] - pb[0] + k0 * dil[0];
            for (int64_t o1 = 0; o1 < out[1]; o1++) {
              int64_t i1 = o1 * st[1] - pb[1] + k1 * dil[1];
              if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1]) {
                fill_run(row, pad, out[2]);
                row += out[2];
                continue;
              }
              const uint8_t *src = x + c * isize + (i0 * in[1] + i1) * in[2];
              /* Outputs [lo, hi) read inside the row: padding around them,
               * a copy (stride 1) or a strided gather between. */
              int64_t first = k2 * dil[2] - pb[2]; /* i2 of o2 = 0 */
              int64_t lo = first >= 0 ? 0 : (-first + st[2] - 1) / st[2];
              int64_t hi = in[2] - first <= 0 ? 0 : (in[2] - first + st[2] - 1) / st[2];
              if (hi > out[2]) hi = out[2];
              if (lo > hi) lo = hi;
              fill_run(row, pad, lo);
              if (st[2] == 1) {
                copy_run(row + lo, src + first + lo, hi - lo);
              } else {
                for (int64_t o2 = lo; o2 < hi; o2++) row[o2] = src[first + o2 * st[2]];
              }
              fill_run(row + hi, pad, out[2] - hi);
              row += out[2];
            }
          }
        }
}

static bool pointwise(const kiln_rt_conv_args *a) {
  for (int d = 0; d < a->nsp; d++)
    if (a->kernel[d] != 1 || a->stride[d] != 1 || a->pad_begin[d] != 0 || a->in[d] != a->out[d]) return false;
  return true;
}

typedef struct iconv_epilogue {
  const kiln_rt_conv_args *a;
  kiln_rt_epilogue_ctx ctx;
} iconv_epilogue;

static void tile_done(void *vctx, int32_t *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  iconv_epilogue *e = vctx;
  e->a->iepilogue(&e->ctx, c, ldc, m0, n0, mb, nb);
}

/* The sums' scratch (one image and group's, when yq is NULL), then the columns. */
static void scratch_layout(const kiln_rt_conv_args *a, size_t *sums, size_t *cols) {
  int64_t osize = 1, taps = 1;
  for (int d = 0; d < a->nsp; d++) {
    osize *= a->out[d];
    taps *= a->kernel[d];
  }
  *sums = a->yq ? 0 : ((size_t)(a->co / a->group * osize) * sizeof(int32_t) + 63) & ~(size_t)63;
  *cols = pointwise(a) ? 0 : (size_t)(a->ci / a->group * taps * osize);
}

size_t kiln_conv_integer_scratch_bytes(const kiln_rt_conv_args *a) {
  size_t sums, cols;
  scratch_layout(a, &sums, &cols);
  return sums + cols + 64;
}

kiln_status_t kiln_conv_integer_run(kiln_threadpool *pool, const kiln_rt_conv_args *a, void *scratch) {
  int64_t cig = a->ci / a->group, cog = a->co / a->group, osize = 1, taps = 1, isize = 1;
  for (int d = 0; d < a->nsp; d++) {
    osize *= a->out[d];
    taps *= a->kernel[d];
    isize *= a->in[d];
  }
  int64_t k = cig * taps;
  bool direct = pointwise(a);
  size_t sums_bytes, cols_bytes;
  scratch_layout(a, &sums_bytes, &cols_bytes);
  int32_t *sums = a->yq ? NULL : scratch;
  uint8_t *cols = direct ? NULL : (uint8_t *)scratch + sums_bytes;
  int32_t *wz = malloc((size_t)a->co * sizeof *wz);
  if (!wz) return KILN_OOM();
  (void)cols_bytes;
  for (int64_t c = 0; c < a->co; c++) {
    int64_t i = a->w_zero_count == a->co ? c : 0;
    wz[c] = !a->w_zero ? 0 : a->w_zero_signed ? ((const int8_t *)a->w_zero)[i] : ((const uint8_t *)a->w_zero)[i];
  }
  const uint8_t *x = a->xq, *w = a->wq;
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      const uint8_t *xg = x + (n * a->ci + g * cig) * isize;
      if (!direct) im2col(a, xg, cig, (uint8_t)a->x_zero, cols);
      int64_t first = (n * a->co + g * cog) * osize;
      iconv_epilogue e = {a, {a->epilogue_buffers, first, osize}};
      kiln_igemm_args gm = {.a_signed = a->w_signed, .b_signed = a->x_signed, .m = cog, .n = osize, .k = k,
                            .a = w + g * cog * k, .lda = k, .b = direct ? xg : cols, .ldb = osize,
                            .b_zero = a->x_zero, .c = sums ? sums : a->yq + first,
                            .ldc = osize,
                            .epilogue = a->iepilogue ? tile_done : NULL, .epilogue_ctx = &e};
      kiln_igemm_rows(pool, &gm, wz + g * cog);
    }
  free(wz);
  return NULL;
}
