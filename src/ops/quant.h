/* quant.h — the requantizing multiplier of QLinearConv / QLinearMatMul,
 * shared by their reference kernels (ops/quant.c) and the rewrite that
 * compiles them (passes/decompose.c), so both form it with the same float
 * operations and the compiled result is bit-equal to ref's. */
#ifndef KILN_OPS_QUANT_H
#define KILN_OPS_QUANT_H

/* (a_scale * b_scale) / y_scale in float32, left to right, as ONNX
 * Runtime forms its output scale (ops/quant.c's header says why float32).
 * Two rounded float ops: no contraction can apply (no add). */
static inline float kiln_qlinear_multiplier(float a_scale, float b_scale, float y_scale) {
  float p = a_scale * b_scale;
  return p / y_scale;
}

#endif
