/* ConvInteger on the integer GEMM (cpu_internal.h, kiln_conv_integer_run):
 * y[n, g] = W_g (co/group x K) * columns (K x pixels), K = ci/group x the
 * kernel's taps; the zero points are the GEMM's (x's for B, w's per row). */
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/igemm.h"

/* One image and group's columns: row (c, taps) of K, column the output
 * pixel; a tap outside the input reads x_zero. */
static void im2col(const kiln_rt_conv_args *a, const uint8_t *x, int64_t cig, uint8_t pad, uint8_t *cols) {
  int64_t osize = 1, taps = 1, isize = 1;
  for (int d = 0; d < a->nsp; d++) {
    osize *= a->out[d];
    taps *= a->kernel[d];
    isize *= a->in[d];
  }
  for (int64_t c = 0; c < cig; c++)
    for (int64_t t = 0; t < taps; t++) {
      int64_t tap[3] = {0}, rest = t;
      for (int d = a->nsp - 1; d >= 0; d--) {
        tap[d] = rest % a->kernel[d];
        rest /= a->kernel[d];
      }
      uint8_t *row = cols + (c * taps + t) * osize;
      for (int64_t o = 0; o < osize; o++) {
        int64_t pos[3] = {0}, r = o, flat = 0;
        bool inside = true;
        for (int d = a->nsp - 1; d >= 0; d--) {
          pos[d] = (r % a->out[d]) * a->stride[d] - a->pad_begin[d] + tap[d] * a->dilation[d];
          r /= a->out[d];
          inside &= pos[d] >= 0 && pos[d] < a->in[d];
        }
        for (int d = 0; d < a->nsp; d++) flat = flat * a->in[d] + pos[d];
        row[o] = inside ? x[c * isize + flat] : pad;
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

kiln_status_t kiln_conv_integer_run(kiln_threadpool *pool, const kiln_rt_conv_args *a) {
  int64_t cig = a->ci / a->group, cog = a->co / a->group, osize = 1, taps = 1, isize = 1;
  for (int d = 0; d < a->nsp; d++) {
    osize *= a->out[d];
    taps *= a->kernel[d];
    isize *= a->in[d];
  }
  int64_t k = cig * taps;
  bool direct = pointwise(a);
  uint8_t *cols = direct ? NULL : malloc((size_t)(k * osize) + 1);
  int32_t *wz = malloc((size_t)a->co * sizeof *wz);
  if ((!direct && !cols) || !wz) {
    free(cols);
    free(wz);
    return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for a ConvInteger's columns (%lld bytes)",
                      (long long)(k * osize));
  }
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
                            .b_zero = a->x_zero, .a_zero_rows = wz + g * cog, .c = a->yq + first, .ldc = osize,
                            .epilogue = a->iepilogue ? tile_done : NULL, .epilogue_ctx = &e};
      kiln_igemm(pool, &gm);
    }
  free(cols);
  free(wz);
  return NULL;
}
