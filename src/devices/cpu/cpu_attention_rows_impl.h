/* cpu_attention_rows_impl.h — the vector loops of the cpu's decoder-step
 * Attention routine (cpu_attention.c), included once per target build with
 * ROWS_FN(name) naming that build's functions (the portable one and, on
 * x86-64, AVX2 + FMA). Sixteen partial sums per dot product, so the loops
 * vectorize without reassociating float additions the compiler may not. */
#include <stdint.h>

/* s[r * ts] = scale * dot(q + r * e, k) for the nq rows of q. */
static void ROWS_FN(dots)(const float *q, int nq, const float *k, int64_t e, float scale, float *s, int64_t ts) {
  for (int r = 0; r < nq; r++) {
    const float *a = q + (int64_t)r * e;
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= e; i += 16)
      for (int l = 0; l < 16; l++) acc[l] += a[i + l] * k[i + l];
    float sum = 0;
    for (; i < e; i++) sum += a[i] * k[i];
    for (int l = 0; l < 16; l++) sum += acc[l];
    s[(int64_t)r * ts] = scale * sum;
  }
}

/* y + r * ev += p[r * ps] * v for the nq rows of y. */
static void ROWS_FN(axpys)(float *y, int nq, const float *v, int64_t ev, const float *p, int64_t ps) {
  for (int r = 0; r < nq; r++) {
    float w = p[(int64_t)r * ps], *o = y + (int64_t)r * ev;
    for (int64_t i = 0; i < ev; i++) o[i] += w * v[i];
  }
}
