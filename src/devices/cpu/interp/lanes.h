/* lanes.h — the precompiled vector operations the cpu's kernel interpreter
 * (interp.h) is made of: each applies one tensor-expression operation to
 * a block of up to KILN_LANES elements ("lanes") of one dtype.
 *
 * An operand is an array of n lanes, or a scalar (its `*s` flag set: lane
 * 0 stands for every lane), so `x * 0.5f` reads the constant once. The
 * loops are written once (lanes_impl.h) and compiled three times, portable,
 * for AVX2 + FMA and for AVX-512; kiln_lanes() picks the table for this CPU
 * at run time.
 * Semantics are those of the C the JIT generates for the same expression
 * (codegen/render_c.c): C's conversions, NaN-propagating min/max, the
 * math helpers of codegen/kiln_math.h; integer arithmetic wraps, integer
 * division by 0 gives 0 instead of trapping.
 */
#ifndef KILN_DEVICES_CPU_INTERP_LANES_H
#define KILN_DEVICES_CPU_INTERP_LANES_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/te.h"

#define KILN_LANES 512

/* The math functions lower.c calls (TE_CALL1/TE_CALL2 by name). */
typedef enum kiln_lanes_fn {
  KILN_FN_EXP, KILN_FN_SIGMOID, KILN_FN_TANH, KILN_FN_ERF, KILN_FN_SOFTPLUS, KILN_FN_GELU, KILN_FN_GELU_TANH,
  KILN_FN_SQRT, KILN_FN_LOG, KILN_FN_FLOOR, KILN_FN_CEIL, KILN_FN_ROUND, KILN_FN_SIN, KILN_FN_COS, KILN_FN_BF16_TRUNC,
  KILN_FN_POW, KILN_FN_POW_POS, /* binary */
  KILN_FN_COUNT
} kiln_lanes_fn;
/* The function a TE_CALL names, or -1. */
int kiln_lanes_fn_of(const char *name);

typedef struct kiln_lanes_ops {
  const char *name; /* "avx2", "generic" */
  /* ADD SUB MUL DIV MOD MIN MAX over dt (both operands of dt). */
  void (*binary)(te_op op, kiln_dtype dt, int n, void *o, const void *a, int as, const void *b, int bs);
  /* LT LE EQ NE over dt, results 0/1 bytes. */
  void (*compare)(te_op op, kiln_dtype dt, int n, uint8_t *o, const void *a, int as, const void *b, int bs);
  /* AND OR XOR of 0/1 bytes. */
  void (*logic)(te_op op, int n, uint8_t *o, const uint8_t *a, int as, const uint8_t *b, int bs);
  /* NEG ABS over dt; NOT over bytes. a is n lanes. */
  void (*unary)(te_op op, kiln_dtype dt, int n, void *o, const void *a);
  /* o = (to)a for n lanes (to BOOL: a != 0). */
  void (*cast)(kiln_dtype to, kiln_dtype from, int n, void *o, const void *a);
  /* o = c ? a : b. */
  void (*select)(kiln_dtype dt, int n, void *o, const uint8_t *c, int cs, const void *a, int as, const void *b, int bs);
  /* o = fn(a) or fn(a, b), f32. */
  void (*call)(kiln_lanes_fn fn, int n, float *o, const float *a, int as, const float *b, int bs);
  /* o[l] = base[idx[l]]. */
  void (*gather)(kiln_dtype dt, int n, void *o, const void *base, const int64_t *idx);
  /* o[l] = base[l * stride]. */
  void (*strided)(kiln_dtype dt, int n, void *o, const void *base, int64_t stride);
  /* base[l * stride] = x[l] (x scalar: every lane). */
  void (*store)(kiln_dtype dt, int n, void *base, int64_t stride, const void *x, int xs);
  /* acc[l] = combine(acc[l], x[l]) for n lanes. */
  void (*combine)(te_reduce_op rop, kiln_dtype dt, int n, void *acc, const void *x, int xs);
  /* out[r] = combine(out[r], x[r * n], ..., x[r * n + n - 1]) for each of rows rows. */
  void (*fold)(te_reduce_op rop, kiln_dtype dt, int rows, int n, const void *x, void *out);
  /* o[l] = v[r] for the lanes of row r: row 0 is lanes [0, first), row r
   * lanes [first + (r - 1) * m, first + r * m), up to n lanes. */
  void (*spread)(kiln_dtype dt, int n, void *o, int first, int m, const void *v);
  /* o[l] = v[0] for n lanes. */
  void (*fill)(kiln_dtype dt, int n, void *o, const void *v);
  /* o[l] = min(max(a[l], lo), hi) as a Relu or Clip epilogue computes it
   * (NaN kept, a zero's sign too). */
  void (*clip)(int n, float *o, const float *a, float lo, float hi);
  /* o[l] = start + l. */
  void (*ramp)(int n, int64_t *o, int64_t start);
  /* idx[l] += c * (x[l] - x0): a gather's index, one term at a time. */
  void (*index_add)(int n, int64_t *idx, int64_t c, const int64_t *x, int64_t x0);
  /* o = a * b + c over f32, each operand lanes or a scalar (a BatchNorm,
   * HardSigmoid's x / 6 + 0.5). */
  void (*muladd)(int n, float *o, const float *a, int as, const float *b, int bs, const float *c, int cs);
  /* o = min(max(a, lo), hi) over f32 with the binary ops' NaN rule (a NaN
   * operand wins) and their zero: a -0 at lo = 0 gives +0, where clip
   * (the conv epilogues' rule) keeps -0. Relu6, HardSigmoid's clamp, Clip. */
  void (*clamp)(int n, float *o, const float *a, float lo, float hi);
  /* QuantizeLinear's rounding (codegen/lower.c's compute_quant) in one
   * pass: o = (to)clamp(nearbyint(v / s) + z) to I8's or U8's range, z
   * where the rounded value is NaN; v, s, z each lanes or a scalar. */
  void (*quantize)(kiln_dtype to, int n, void *o, const float *v, int vs, const float *s, int ss, const float *z,
                   int zs);
  /* Whole rows of an op class (interp.h's row kernels), rows [r0, r1) of
   * n contiguous f32 elements each: y = softmax(x) (log: log-softmax)
   * over each row, as the lowered expression computes it (exp(x - max)
   * over its sum); y = (x - mean) / sqrt(var + eps) * scale + bias
   * (bias NULL: none), scale and bias n long. */
  void (*softmax_rows)(int64_t r0, int64_t r1, int64_t n, float *y, const float *x, bool log);
  void (*layernorm_rows)(int64_t r0, int64_t r1, int64_t n, float *y, const float *x, const float *scale,
                         const float *bias, float eps);
  /* y[r] = ArgMax (max) or ArgMin of row r of n f32: the first (last)
   * position of the best value, NaN beating every number (ref's rule). */
  void (*arg_rows)(int64_t r0, int64_t r1, int64_t n, int64_t *y, const float *x, bool max, bool last);
} kiln_lanes_ops;

extern const kiln_lanes_ops kiln_lanes_generic;
extern const kiln_lanes_ops kiln_lanes_avx2;   /* .name NULL where not built (not x86-64 GCC/clang) */
extern const kiln_lanes_ops kiln_lanes_avx512; /* the same */
/* The table for this CPU (after KILN_CPU_DISABLE). */
const kiln_lanes_ops *kiln_lanes(void);

#endif
