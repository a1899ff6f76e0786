/* kiln_half.h — f16 and bf16 storage conversions for every kernel kiln
 * runs on a CPU or GPU (the halves are stored as 16-bit words and computed
 * in f32: passes/widen_half.c).
 *
 * Like kiln_math.h (which must come first: KILN_HELPER, KILN_AS_FLOAT,
 * KILN_AS_UINT, nearbyintf), one text with two uses: embedded by CMake as
 * kiln_half_text, it follows the C and CUDA preambles, and OpenCL programs
 * get it only when one of their kernels stores a half (kiln_plan_dialect:
 * the f32 programs' sources, and so the drivers' binary caches, stay as
 * they were); the cpu's precompiled kernels include it.
 */
#ifndef KILN_HALF_H
#define KILN_HALF_H
/* f16 and bf16 storage: kernels load and store them as 16-bit words and
 * compute in f32 (the same results as tensor/dtype.h's conversions:
 * round to nearest even, NaN payloads kept quiet, overflow to infinity).
 * Branch-free, so the loops over them vectorize, and no f32 subnormal is
 * ever formed (GPUs may flush them): a half subnormal is its integer
 * mantissa times 2^-24, computed exactly. */
KILN_HELPER float kiln_h2f(uint32_t h) {
  /* masks, not selects: GCC does not if-convert the nested choice, and the
   * loop would not vectorize */
  uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t inf = 0u - (uint32_t)(e == 31u), zero = 0u - (uint32_t)(e == 0u);
  uint32_t normal = (((e + 112u) << 23) & ~inf) | (0x7f800000u & inf) | (m << 13);
  uint32_t sub = KILN_AS_UINT((float)(int32_t)m * 5.9604644775390625e-8f);
  return KILN_AS_FLOAT(sign | (sub & zero) | (normal & ~zero));
}
KILN_HELPER uint32_t kiln_f2h(float f) {
  uint32_t x = KILN_AS_UINT(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
  /* below 2^-14 the half is |f| * 2^24 rounded to an integer (exact product) */
  uint32_t sub = (uint32_t)nearbyintf(KILN_AS_FLOAT(a) * 16777216.0f);
  uint32_t r = a > 0x7f800000u ? nan : a >= 0x477ff000u ? 0x7c00u : a >= 0x38800000u ? normal : sub;
  return sign | r;
}
/* bf16 by truncation (ONNX's Cast before opset 19), as the f32 whose low 16
 * bits are cleared (kiln_f2bf then rounds nothing); a NaN stays quiet. */
KILN_HELPER float kiln_bf16_truncf(float f) {
  uint32_t x = KILN_AS_UINT(f);
  x = (x & 0x7fffffffu) > 0x7f800000u ? (x | 0x00400000u) : x;
  return KILN_AS_FLOAT(x & 0xffff0000u);
}
KILN_HELPER float kiln_bf2f(uint32_t h) { return KILN_AS_FLOAT((h & 0xffffu) << 16); }
KILN_HELPER uint32_t kiln_f2bf(float f) {
  uint32_t x = KILN_AS_UINT(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : r;
}
#endif
