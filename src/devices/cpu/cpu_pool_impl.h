/* cpu_pool_impl.h — the loops of kiln_rt.pooling (cpu_pool.c), included once
 * per instruction set with POOL_FN naming its copy (a target pragma
 * around the AVX2 one). Each pass reduces one axis of a [outer, len,
 * inner] block over the window; max keeps NaN as TE_RMAX does
 * ((v != v || v > acc) ? v : acc), sums add in window order from 0. */

/* Along the innermost axis (inner = 1): dst[r][o] over src[r][...], for
 * rows r < outer. The taps of one k are a strided run over the outputs
 * whose position is inside the input, [lo[k], hi[k]). */
static void POOL_FN(pass_last)(const float *src, float *dst, int64_t outer, int64_t len_in, int64_t len_out,
                               const pool_axis *ax, bool max) {
  const int64_t s = ax->stride;
  for (int64_t r = 0; r < outer; r++) {
    const float *in = src + r * len_in;
    float *out = dst + r * len_out;
    const float init = max ? -INFINITY : 0.0f;
    for (int64_t o = 0; o < len_out; o++) out[o] = init;
    for (int64_t k = 0; k < ax->kernel; k++) {
      const float *at = in + k * ax->dilation - ax->pad_begin;
      const int64_t lo = ax->lo[k], hi = ax->hi[k];
      if (max) {
        if (s == 1) {
          for (int64_t o = lo; o < hi; o++) {
            float v = at[o];
            out[o] = (v != v || v > out[o]) ? v : out[o];
          }
        } else {
          for (int64_t o = lo; o < hi; o++) {
            float v = at[o * s];
            out[o] = (v != v || v > out[o]) ? v : out[o];
          }
        }
      } else {
        if (s == 1) {
          for (int64_t o = lo; o < hi; o++) out[o] += at[o];
        } else {
          for (int64_t o = lo; o < hi; o++) out[o] += at[o * s];
        }
      }
    }
  }
}

/* Along a middle axis: dst[r][o][j] over src[r][pos][j], j < inner (one
 * contiguous row of the axes after it per tap). */
static void POOL_FN(pass_mid)(const float *src, float *dst, int64_t outer, int64_t len_in, int64_t len_out,
                              int64_t inner, const pool_axis *ax, bool max) {
  for (int64_t r = 0; r < outer; r++) {
    for (int64_t o = 0; o < len_out; o++) {
      float *out = dst + (r * len_out + o) * inner;
      const float init = max ? -INFINITY : 0.0f;
      for (int64_t j = 0; j < inner; j++) out[j] = init;
      for (int64_t k = 0; k < ax->kernel; k++) {
        int64_t pos = o * ax->stride - ax->pad_begin + k * ax->dilation;
        if (pos < 0 || pos >= len_in) continue; /* padding: never read */
        const float *in = src + (r * len_in + pos) * inner;
        if (max) {
          for (int64_t j = 0; j < inner; j++) {
            float v = in[j];
            out[j] = (v != v || v > out[j]) ? v : out[j];
          }
        } else {
          for (int64_t j = 0; j < inner; j++) out[j] += in[j];
        }
      }
    }
  }
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
