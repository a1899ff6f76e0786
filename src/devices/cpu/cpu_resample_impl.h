/* cpu_resample_impl.h — the pass of kiln_rt.resample (cpu_resample.c),
 * included once per instruction set with RESAMPLE_FN naming its copy.
 * dst[a][o][b] = sum over t of w[o][t] * src[a][clamp(index[o][t])][b]
 * for a < outer, o < len_out, b < inner, in tap order from 0. */
static void RESAMPLE_FN(pass)(const float *src, float *dst, int64_t outer, int64_t len_in, int64_t len_out,
                              int64_t inner, int64_t taps, const int32_t *index, const float *weight) {
  for (int64_t a = 0; a < outer; a++) {
    const float *in = src + a * len_in * inner;
    float *out = dst + a * len_out * inner;
    if (inner == 1) {
      for (int64_t o = 0; o < len_out; o++) {
        float acc = 0.0f;
        for (int64_t t = 0; t < taps; t++) {
          int64_t i = index[o * taps + t];
          i = i < 0 ? 0 : i >= len_in ? len_in - 1 : i;
          acc += (weight ? weight[o * taps + t] : 1.0f) * in[i];
        }
        out[o] = acc;
      }
      continue;
    }
    for (int64_t o = 0; o < len_out; o++) {
      float *row = out + o * inner;
      for (int64_t b = 0; b < inner; b++) row[b] = 0.0f;
      for (int64_t t = 0; t < taps; t++) {
        int64_t i = index[o * taps + t];
        i = i < 0 ? 0 : i >= len_in ? len_in - 1 : i;
        const float w = weight ? weight[o * taps + t] : 1.0f;
        const float *src_row = in + i * inner;
        for (int64_t b = 0; b < inner; b++) row[b] += w * src_row[b];
      }
    }
  }
}
