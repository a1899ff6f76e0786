/* kiln_math.h — the float math helpers of every kernel kiln runs on a CPU
 * or GPU: branch-free exp, tanh, erf, sigmoid, softplus, gelu.
 *
 * One text, two uses: generated C, CUDA and OpenCL sources start with it
 * (CMake embeds it as kiln_math_text, like kiln_rt.h), and libkiln includes
 * it for the cpu's precompiled kernels (devices/cpu/interp), so a kernel
 * computes the same function whichever tier runs it. It must stay
 * self-contained C that NVRTC and OpenCL C also accept: under KILN_NO_LIBC
 * the includer's prelude provides what the system headers would, and
 * KILN_HELPER / KILN_AS_FLOAT may be predefined (device functions, a
 * builtin bit cast). Needs uint32_t (stdint.h or the prelude) first.
 */
#ifndef KILN_MATH_H
#define KILN_MATH_H
#ifndef KILN_NO_LIBC
#include <math.h>
#include <string.h>
#endif
#ifndef KILN_HELPER
#define KILN_HELPER static inline
#endif
#ifndef KILN_AS_FLOAT
KILN_HELPER float kiln_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#define KILN_AS_FLOAT kiln_as_float
#endif
/* exp with Cody-Waite range reduction and a degree-6 polynomial (Cephes):
 * about 1 ulp, branch-free so loops over it vectorize (the clamps are
 * selects: GCC does not vectorize fminf/fmaxf; NaN passes through them
 * and comes out NaN, its exponent taken as 0). */
KILN_HELPER float kiln_expf(float x) {
  x = x < -87.3365f ? -87.3365f : x;
  x = x > 88.7228f ? 88.7228f : x;
  float fi = floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - fi * 0.693359375f;
  r = r - fi * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (int32_t)(fi == fi ? fi : 0.0f) + 127;
  return p * KILN_AS_FLOAT((uint32_t)e << 23);
}
#ifndef KILN_AS_UINT
KILN_HELPER uint32_t kiln_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
#define KILN_AS_UINT kiln_as_uint
#endif
/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9
 * polynomial in m - 1 (Cephes logf), about 1 ulp; branch-free (selects) so
 * loops over it vectorize, where libm's logf is a call per element.
 * Subnormals are scaled up first; NaN and x < 0 give NaN, 0 gives -inf,
 * inf gives inf. */
KILN_HELPER float kiln_logf(float x) {
  int sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x; /* 2^23 */
  uint32_t u = KILN_AS_UINT(xs);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 126 - (sub ? 23 : 0);
  float m = KILN_AS_FLOAT((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
  int small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = (small ? m + m : m) - 1.0f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  float fe = (float)e;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y + fe * 0.693359375f;
  r = x == 0.0f ? -INFINITY : r;
  r = x > 3.40282347e+38f ? x : r; /* inf */
  return (x < 0.0f || x != x) ? NAN : r;
}
/* pow for a base >= 0 (LRN's denominator): exp(y log x); 0^y exact. */
KILN_HELPER float kiln_powf_pos(float x, float y) {
  float r = kiln_expf(y * kiln_logf(x));
  return x == 0.0f ? (y > 0.0f ? 0.0f : y < 0.0f ? INFINITY : 1.0f) : r;
}
KILN_HELPER float kiln_sigmoidf(float x) { return 1.0f / (1.0f + kiln_expf(-x)); }
KILN_HELPER float kiln_tanhf(float x) {
  /* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); small |x| uses x - x^3/3 + 2x^5/15. */
  float a = fabsf(x);
  float big = 1.0f - 2.0f / (kiln_expf(2.0f * a) + 1.0f);
  float x2 = a * a;
  float small = a * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  return copysignf(a < 0.125f ? small : big, x);
}
/* erf: Abramowitz & Stegun 7.1.26 refined (max abs error ~1.2e-7). */
KILN_HELPER float kiln_erff(float x) {
  float a = fabsf(x);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t * kiln_expf(-a * a);
  /* near zero the polynomial loses relative accuracy: use the series */
  float x2 = a * a;
  float small = a * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * -0.0268661706f)));
  return copysignf(a < 0.25f ? small : y, x);
}
KILN_HELPER float kiln_softplusf(float x) { return fmaxf(x, 0.0f) + log1pf(kiln_expf(-fabsf(x))); }
KILN_HELPER float kiln_geluf(float x) { return 0.5f * x * (1.0f + kiln_erff(x * 0.70710678118654752f)); }
KILN_HELPER float kiln_gelu_tanhf(float x) {
  return 0.5f * x * (1.0f + kiln_tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
#endif
