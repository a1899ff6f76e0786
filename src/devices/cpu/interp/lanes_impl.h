/* lanes_impl.h — the loops behind kiln_lanes_ops, included once per
 * target by lanes_generic.c and lanes_avx2.c with LANES_TABLE (the table's
 * name) and LANES_NAME defined; the including file sets the target. Every
 * loop is a plain counted loop over restrict-free arrays that GCC
 * vectorizes at -O3 (the files are built with it). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codegen/kiln_math.h"
#include "codegen/kiln_half.h"
#include "devices/cpu/interp/lanes.h"

/* One loop body serves every type: tests like `x < 0` are always false for
 * the unsigned ones, and a loop need not read both operands. */
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wunused-variable"

/* dtype, C type of its lanes, unsigned type of the same width (wrapping
 * arithmetic), whether it is a float. */
#define LANES_FLOATS(X) X(KILN_DTYPE_F32, float, float, 1) X(KILN_DTYPE_F64, double, double, 1)
#define LANES_WORDS(X)                     \
  X(KILN_DTYPE_I64, int64_t, uint64_t, 0)  \
  X(KILN_DTYPE_I32, int32_t, uint32_t, 0)  \
  X(KILN_DTYPE_I16, int16_t, uint16_t, 0)  \
  X(KILN_DTYPE_I8, int8_t, uint8_t, 0)     \
  X(KILN_DTYPE_U8, uint8_t, uint8_t, 0)    \
  X(KILN_DTYPE_U16, uint16_t, uint16_t, 0) \
  X(KILN_DTYPE_U32, uint32_t, uint32_t, 0) \
  X(KILN_DTYPE_U64, uint64_t, uint64_t, 0)
#define LANES_BOOL(X) X(KILN_DTYPE_BOOL, uint8_t, uint8_t, 0)
#define LANES_NUMERIC(X) LANES_FLOATS(X) LANES_WORDS(X)
#define LANES_INTS(X) LANES_WORDS(X) LANES_BOOL(X)
#define LANES_ALL(X) LANES_NUMERIC(X) LANES_BOOL(X)
/* Every type again, for a loop nested in one over the first list (a macro
 * does not expand inside its own expansion). */
#define LANES_ALL_INNER(X)                  \
  X(KILN_DTYPE_F32, float, float, 1)        \
  X(KILN_DTYPE_F64, double, double, 1)      \
  X(KILN_DTYPE_I64, int64_t, uint64_t, 0)   \
  X(KILN_DTYPE_I32, int32_t, uint32_t, 0)   \
  X(KILN_DTYPE_I16, int16_t, uint16_t, 0)   \
  X(KILN_DTYPE_I8, int8_t, uint8_t, 0)      \
  X(KILN_DTYPE_U8, uint8_t, uint8_t, 0)     \
  X(KILN_DTYPE_U16, uint16_t, uint16_t, 0)  \
  X(KILN_DTYPE_U32, uint32_t, uint32_t, 0)  \
  X(KILN_DTYPE_U64, uint64_t, uint64_t, 0)  \
  X(KILN_DTYPE_BOOL, uint8_t, uint8_t, 0)

static inline size_t lanes_size(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F64: case KILN_DTYPE_I64: case KILN_DTYPE_U64: return 8;
    case KILN_DTYPE_F32: case KILN_DTYPE_I32: case KILN_DTYPE_U32: return 4;
    case KILN_DTYPE_I16: case KILN_DTYPE_U16: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: return 2;
    default: return 1;
  }
}

/* One loop over n lanes, each operand a lane array or a scalar: four
 * copies so that each is a simple vectorizable loop. */
#define LANES_LOOP2(T, TA, TB, o, a, as, b, bs, EXPR)                      \
  do {                                                                     \
    T *o_ = (T *)(o);                                                      \
    const TA *a_ = (const TA *)(a);                                        \
    const TB *b_ = (const TB *)(b);                                        \
    if (!(as) && !(bs)) {                                                  \
      for (int l = 0; l < n; l++) {                                        \
        TA x = a_[l];                                                      \
        TB y = b_[l];                                                      \
        o_[l] = (T)(EXPR);                                                 \
      }                                                                    \
    } else if (as && !(bs)) {                                              \
      const TA x = a_[0];                                                  \
      for (int l = 0; l < n; l++) {                                        \
        TB y = b_[l];                                                      \
        o_[l] = (T)(EXPR);                                                 \
      }                                                                    \
    } else if (!(as)) {                                                    \
      const TB y = b_[0];                                                  \
      for (int l = 0; l < n; l++) {                                        \
        TA x = a_[l];                                                      \
        o_[l] = (T)(EXPR);                                                 \
      }                                                                    \
    } else {                                                               \
      TA x = a_[0];                                                        \
      TB y = b_[0];                                                        \
      for (int l = 0; l < n; l++) o_[l] = (T)(EXPR);                       \
    }                                                                      \
  } while (0)

/* Integer division and remainder as C computes them, except that a zero
 * divisor gives 0 and INT_MIN / -1 wraps instead of trapping. */
#define LANES_IDIV(T, U, x, y) ((y) == 0 ? (T)0 : ((y) == (T)-1 ? (T)(0 - (U)(x)) : (T)((x) / (y))))
#define LANES_IMOD(T, x, y) ((y) == 0 || (y) == (T)-1 ? (T)0 : (T)((x) % (y)))

/* int64 index arithmetic divides by constants (unflattening a reshaped
 * view): a hardware divide per element is 40-90 cycles. Indices below
 * 2^53 in magnitude divide in double, exact to one either way, then
 * corrected without a branch: a loop the compiler vectorizes (AVX-512DQ
 * converts int64 lanes). A block with a larger index takes the exact
 * path: the high half of x * m (m = floor((2^64 - 1) / y), at most two
 * short of the quotient) corrected with the remainder, C's division for
 * negative lanes. (The exact path's data-dependent correction loop was
 * most of RetinaNet's first run, 11M head indices.) */
static void lanes_idiv64_exact(te_op op, int n, int64_t *o, const int64_t *x, int64_t y) {
  uint64_t m = UINT64_MAX / (uint64_t)y;
  for (int l = 0; l < n; l++) {
    int64_t v = x[l];
    if (v < 0) {
      o[l] = op == TE_DIV ? v / y : v % y;
      continue;
    }
    uint64_t q = (uint64_t)(((unsigned __int128)(uint64_t)v * m) >> 64);
    uint64_t r = (uint64_t)v - q * (uint64_t)y;
    while (r >= (uint64_t)y) {
      q++;
      r -= (uint64_t)y;
    }
    o[l] = op == TE_DIV ? (int64_t)q : (int64_t)r;
  }
}

static void lanes_idiv64_scalar(te_op op, int n, int64_t *o, const int64_t *x, int64_t y) {
  const int64_t big = INT64_C(1) << 53;
  int64_t out_of_range = 0;
  for (int l = 0; l < n; l++) out_of_range |= (x[l] >= big) | (x[l] <= -big);
  if (out_of_range || y >= big) {
    lanes_idiv64_exact(op, n, o, x, y);
    return;
  }
  const double dy = (double)y;
  for (int l = 0; l < n; l++) {
    int64_t v = x[l];
    int64_t q = (int64_t)((double)v / dy);
    int64_t r = v - q * y;
    /* C truncates: the remainder has v's sign and is smaller than y */
    int64_t down = v >= 0 ? r < 0 : r <= -y;
    int64_t up = v >= 0 ? r >= y : r > 0;
    q += up - down;
    r += (down - up) * y;
    o[l] = op == TE_DIV ? q : r;
  }
}

static void lanes_binary(te_op op, kiln_dtype dt, int n, void *o, const void *a, int as, const void *b, int bs) {
  if (dt == KILN_DTYPE_I64 && (op == TE_DIV || op == TE_MOD) && !as && bs && *(const int64_t *)b > 0) {
    lanes_idiv64_scalar(op, n, o, a, *(const int64_t *)b);
    return;
  }
  switch (dt) {
#define X(DT, T, U, FLOAT)                                                                          \
  case DT:                                                                                          \
    switch (op) {                                                                                   \
      case TE_ADD: LANES_LOOP2(T, T, T, o, a, as, b, bs, x + y); return;                            \
      case TE_SUB: LANES_LOOP2(T, T, T, o, a, as, b, bs, x - y); return;                            \
      case TE_MUL: LANES_LOOP2(T, T, T, o, a, as, b, bs, x * y); return;                            \
      case TE_DIV: LANES_LOOP2(T, T, T, o, a, as, b, bs, x / y); return;                            \
      case TE_MOD: LANES_LOOP2(T, T, T, o, a, as, b, bs, fmod((double)x, (double)y)); return;       \
      case TE_MIN: LANES_LOOP2(T, T, T, o, a, as, b, bs, (x != x || x < y) ? x : y); return;        \
      case TE_MAX: LANES_LOOP2(T, T, T, o, a, as, b, bs, (x != x || x > y) ? x : y); return;        \
      default: return;                                                                              \
    }
    LANES_FLOATS(X)
#undef X
    /* Integers wrap: the arithmetic is done in the unsigned type (64-bit
     * for the product, so narrow types do not overflow int). */
#define X(DT, T, U, FLOAT)                                                                          \
  case DT:                                                                                          \
    switch (op) {                                                                                   \
      case TE_ADD: LANES_LOOP2(T, T, T, o, a, as, b, bs, (U)((U)x + (U)y)); return;                 \
      case TE_SUB: LANES_LOOP2(T, T, T, o, a, as, b, bs, (U)((U)x - (U)y)); return;                 \
      case TE_MUL: LANES_LOOP2(T, T, T, o, a, as, b, bs, (uint64_t)(U)x * (uint64_t)(U)y); return;  \
      case TE_DIV: LANES_LOOP2(T, T, T, o, a, as, b, bs, LANES_IDIV(T, U, x, y)); return;           \
      case TE_MOD: LANES_LOOP2(T, T, T, o, a, as, b, bs, LANES_IMOD(T, x, y)); return;              \
      case TE_MIN: LANES_LOOP2(T, T, T, o, a, as, b, bs, x < y ? x : y); return;                    \
      case TE_MAX: LANES_LOOP2(T, T, T, o, a, as, b, bs, x > y ? x : y); return;                    \
      default: return;                                                                              \
    }
    LANES_INTS(X)
#undef X
    default: return;
  }
}

static void lanes_compare(te_op op, kiln_dtype dt, int n, uint8_t *o, const void *a, int as, const void *b, int bs) {
  switch (dt) {
#define X(DT, T, U, FLOAT)                                                         \
  case DT:                                                                         \
    switch (op) {                                                                  \
      case TE_LT: LANES_LOOP2(uint8_t, T, T, o, a, as, b, bs, x < y); return;      \
      case TE_LE: LANES_LOOP2(uint8_t, T, T, o, a, as, b, bs, x <= y); return;     \
      case TE_EQ: LANES_LOOP2(uint8_t, T, T, o, a, as, b, bs, x == y); return;     \
      case TE_NE: LANES_LOOP2(uint8_t, T, T, o, a, as, b, bs, x != y); return;     \
      default: return;                                                             \
    }
    LANES_ALL(X)
#undef X
    default: return;
  }
}

static void lanes_logic(te_op op, int n, uint8_t *o, const uint8_t *a, int as, const uint8_t *b, int bs) {
  switch (op) {
    case TE_AND: LANES_LOOP2(uint8_t, uint8_t, uint8_t, o, a, as, b, bs, (x != 0) & (y != 0)); return;
    case TE_OR: LANES_LOOP2(uint8_t, uint8_t, uint8_t, o, a, as, b, bs, (x != 0) | (y != 0)); return;
    case TE_XOR: LANES_LOOP2(uint8_t, uint8_t, uint8_t, o, a, as, b, bs, (x != 0) != (y != 0)); return;
    default: return;
  }
}

static void lanes_unary(te_op op, kiln_dtype dt, int n, void *o, const void *a) {
  if (op == TE_NOT) {
    uint8_t *o_ = o;
    const uint8_t *a_ = a;
    for (int l = 0; l < n; l++) o_[l] = a_[l] == 0;
    return;
  }
  switch (dt) {
#define X(DT, T, U, FLOAT)                                                              \
  case DT: {                                                                            \
    T *o_ = o;                                                                          \
    const T *a_ = a;                                                                    \
    if (op == TE_NEG)                                                                   \
      for (int l = 0; l < n; l++) o_[l] = FLOAT ? (T)-a_[l] : (T)(0 - (U)a_[l]);        \
    else if (FLOAT)                                                                     \
      for (int l = 0; l < n; l++) o_[l] = (T)fabs((double)a_[l]);                       \
    else                                                                                \
      for (int l = 0; l < n; l++) o_[l] = a_[l] < (T)0 ? (T)(0 - (U)a_[l]) : a_[l];     \
    return;                                                                             \
  }
    LANES_NUMERIC(X)
#undef X
    default: return;
  }
}

static void lanes_cast(kiln_dtype to, kiln_dtype from, int n, void *o, const void *a);

/* f16 / bf16 lanes are storage: to or from f32 by kiln_half.h's helpers
 * (what the generated C calls), any other pair through f32 in chunks. */
static void lanes_cast_half(kiln_dtype to, kiln_dtype from, int n, void *o, const void *a) {
  if (from == KILN_DTYPE_F32 && kiln_dtype_is_half(to)) {
    const float *a_ = a;
    uint16_t *o_ = o;
    if (to == KILN_DTYPE_F16)
      for (int l = 0; l < n; l++) o_[l] = (uint16_t)kiln_f2h(a_[l]);
    else
      for (int l = 0; l < n; l++) o_[l] = (uint16_t)kiln_f2bf(a_[l]);
    return;
  }
  if (kiln_dtype_is_half(from) && to == KILN_DTYPE_F32) {
    const uint16_t *a_ = a;
    float *o_ = o;
    if (from == KILN_DTYPE_F16)
      for (int l = 0; l < n; l++) o_[l] = kiln_h2f(a_[l]);
    else
      for (int l = 0; l < n; l++) o_[l] = kiln_bf2f(a_[l]);
    return;
  }
  float tmp[64];
  size_t to_size = lanes_size(to), from_size = lanes_size(from);
  for (int l = 0; l < n; l += 64) {
    int m = n - l < 64 ? n - l : 64;
    lanes_cast(KILN_DTYPE_F32, from, m, tmp, (const char *)a + (size_t)l * from_size);
    lanes_cast(to, KILN_DTYPE_F32, m, (char *)o + (size_t)l * to_size, tmp);
  }
}

static void lanes_cast(kiln_dtype to, kiln_dtype from, int n, void *o, const void *a) {
  if (kiln_dtype_is_half(to) || kiln_dtype_is_half(from)) {
    lanes_cast_half(to, from, n, o, a);
    return;
  }
  if (to == KILN_DTYPE_BOOL) {
    uint8_t *o_ = o;
    switch (from) {
#define X(DT, T, U, FLOAT)                                  \
  case DT: {                                                \
    const T *a_ = a;                                        \
    for (int l = 0; l < n; l++) o_[l] = a_[l] != (T)0;      \
    return;                                                 \
  }
      LANES_ALL(X)
#undef X
      default: return;
    }
  }
  switch (to) {
#define TO(DT, T, U, FLOAT)                                 \
  case DT: {                                                \
    T *o_ = o;                                              \
    switch (from) {                                         \
      FROM_ALL(T)                                           \
      default: return;                                      \
    }                                                       \
  }
#define FROM(DT2, T2, U2, FLOAT2)                           \
  case DT2: {                                               \
    const T2 *a_ = a;                                       \
    for (int l = 0; l < n; l++) o_[l] = (TO_T)a_[l];        \
    return;                                                 \
  }
#define FROM_ALL(T) LANES_ALL_INNER(FROM)
#define TO_T __typeof__(*o_)
    LANES_NUMERIC(TO)
#undef TO_T
#undef FROM_ALL
#undef FROM
#undef TO
    default: return;
  }
}

static void lanes_select(kiln_dtype dt, int n, void *o, const uint8_t *c, int cs, const void *a, int as, const void *b,
                         int bs) {
  if (cs) { /* one branch for every lane */
    const void *src = c[0] ? a : b;
    int ss = c[0] ? as : bs;
    size_t size = lanes_size(dt);
    if (ss)
      for (int l = 0; l < n; l++) memcpy((char *)o + (size_t)l * size, src, size);
    else
      memmove(o, src, (size_t)n * size);
    return;
  }
  if (kiln_dtype_is_half(dt)) dt = KILN_DTYPE_U16; /* selects move the 16-bit words */
  switch (dt) {
#define X(DT, T, U, FLOAT)                                                              \
  case DT: {                                                                            \
    T *o_ = o;                                                                          \
    const T *a_ = a, *b_ = b;                                                           \
    const T x0 = a_[0], y0 = b_[0];                                                     \
    if (!as && !bs)                                                                     \
      for (int l = 0; l < n; l++) o_[l] = c[l] ? a_[l] : b_[l];                         \
    else if (as && !bs)                                                                 \
      for (int l = 0; l < n; l++) o_[l] = c[l] ? x0 : b_[l];                            \
    else if (!as)                                                                       \
      for (int l = 0; l < n; l++) o_[l] = c[l] ? a_[l] : y0;                            \
    else                                                                                \
      for (int l = 0; l < n; l++) o_[l] = c[l] ? x0 : y0;                               \
    return;                                                                             \
  }
    LANES_ALL(X)
#undef X
    default: return;
  }
}

static void lanes_call(kiln_lanes_fn fn, int n, float *o, const float *a, int as, const float *b, int bs) {
  switch (fn) {
#define F1(ID, EXPR)                                                     \
  case ID:                                                               \
    LANES_LOOP2(float, float, float, o, a, as, a, as, EXPR);             \
    return;
    F1(KILN_FN_EXP, kiln_expf(x))
    F1(KILN_FN_SIGMOID, kiln_sigmoidf(x))
    F1(KILN_FN_TANH, kiln_tanhf(x))
    F1(KILN_FN_ERF, kiln_erff(x))
    F1(KILN_FN_SOFTPLUS, kiln_softplusf(x))
    F1(KILN_FN_GELU, kiln_geluf(x))
    F1(KILN_FN_GELU_TANH, kiln_gelu_tanhf(x))
    F1(KILN_FN_SQRT, sqrtf(x))
    F1(KILN_FN_LOG, logf(x))
    F1(KILN_FN_FLOOR, floorf(x))
    F1(KILN_FN_CEIL, ceilf(x))
    F1(KILN_FN_ROUND, nearbyintf(x))
    F1(KILN_FN_SIN, sinf(x))
    F1(KILN_FN_COS, cosf(x))
    F1(KILN_FN_BF16_TRUNC, kiln_bf16_truncf(x))
#undef F1
    case KILN_FN_POW: LANES_LOOP2(float, float, float, o, a, as, b, bs, powf(x, y)); return;
    case KILN_FN_POW_POS: LANES_LOOP2(float, float, float, o, a, as, b, bs, kiln_powf_pos(x, y)); return;
    default: return;
  }
}

/* Loads and stores go through memcpy: a model's initializers and a
 * caller's tensors need not be aligned to their element size (the
 * compiler turns each copy into one move). */
static void lanes_gather(kiln_dtype dt, int n, void *o, const void *base, const int64_t *idx) {
  switch (lanes_size(dt)) {
#define G(SIZE, T)                                                                \
  case SIZE: {                                                                    \
    T *o_ = o;                                                                    \
    const char *b_ = base;                                                        \
    for (int l = 0; l < n; l++) memcpy(&o_[l], b_ + idx[l] * SIZE, SIZE);         \
    return;                                                                       \
  }
    G(1, uint8_t)
    G(2, uint16_t)
    G(4, uint32_t)
    G(8, uint64_t)
#undef G
    default: return;
  }
}

static void lanes_strided(kiln_dtype dt, int n, void *o, const void *base, int64_t stride) {
  size_t size = lanes_size(dt);
  if (stride == 1) {
    memcpy(o, base, (size_t)n * size);
    return;
  }
  switch (size) {
#define S(SIZE, T)                                                                          \
  case SIZE: {                                                                              \
    T *o_ = o;                                                                              \
    const char *b_ = base;                                                                  \
    for (int l = 0; l < n; l++) memcpy(&o_[l], b_ + (int64_t)l * stride * SIZE, SIZE);      \
    return;                                                                                 \
  }
    S(1, uint8_t)
    S(2, uint16_t)
    S(4, uint32_t)
    S(8, uint64_t)
#undef S
    default: return;
  }
}

static void lanes_store(kiln_dtype dt, int n, void *base, int64_t stride, const void *x, int xs) {
  size_t size = lanes_size(dt);
  if (stride == 1 && !xs) {
    memmove(base, x, (size_t)n * size);
    return;
  }
  switch (size) {
#define S(SIZE, T)                                                                              \
  case SIZE: {                                                                                  \
    char *b_ = base;                                                                            \
    T v;                                                                                        \
    memcpy(&v, x, SIZE);                                                                        \
    if (xs && stride == 1)                                                                      \
      for (int l = 0; l < n; l++) memcpy(b_ + (int64_t)l * SIZE, &v, SIZE);                     \
    else if (xs)                                                                                \
      for (int l = 0; l < n; l++) memcpy(b_ + (int64_t)l * stride * SIZE, &v, SIZE);            \
    else                                                                                        \
      for (int l = 0; l < n; l++) memcpy(b_ + (int64_t)l * stride * SIZE, (const char *)x + (size_t)l * SIZE, SIZE); \
    return;                                                                                     \
  }
    S(1, uint8_t)
    S(2, uint16_t)
    S(4, uint32_t)
    S(8, uint64_t)
#undef S
    default: return;
  }
}

static void lanes_combine(te_reduce_op rop, kiln_dtype dt, int n, void *acc, const void *x, int xs) {
  switch (rop) {
    case TE_RSUM: lanes_binary(TE_ADD, dt, n, acc, acc, 0, x, xs); return;
    case TE_RPROD: lanes_binary(TE_MUL, dt, n, acc, acc, 0, x, xs); return;
    /* max/min as the C renderer combines: the new element wins when it
     * is NaN or beyond the accumulator (so NaN propagates). */
    case TE_RMAX: lanes_binary(TE_MAX, dt, n, acc, x, xs, acc, 0); return;
    case TE_RMIN: lanes_binary(TE_MIN, dt, n, acc, x, xs, acc, 0); return;
  }
}

/* Sixteen partial results over lanes l mod 16 (a 512-bit register's
 * worth of floats), then halved in a tree: every step an elementwise
 * loop the compiler keeps in vector registers. Sums in a different order
 * than the C renderer's (8 partials) round differently, within the
 * tolerance the differential test allows; max and min give the same
 * result in any order. */
#define LANES_FOLD_HALVE(T, OP, P, W)     \
  for (int u = 0; u < (W); u++) {         \
    T acc_ = (P)[u], y_ = (P)[u + (W)];   \
    (P)[u] = (OP);                        \
  }
#define LANES_FOLD(T, OP)                                          \
  for (int row_ = 0; row_ < rows; row_++) {                        \
    const T *x_ = (const T *)x + (size_t)row_ * (size_t)n;         \
    T r;                                                           \
    memcpy(&r, (char *)out + (size_t)row_ * sizeof r, sizeof r);   \
    int l = 0;                                                     \
    if (n >= 16) {                                                 \
      T p[16];                                                     \
      for (int u = 0; u < 16; u++) p[u] = x_[u];                   \
      for (l = 16; l + 16 <= n; l += 16)                           \
        for (int u = 0; u < 16; u++) {                             \
          T acc_ = p[u], y_ = x_[l + u];                           \
          p[u] = (OP);                                             \
        }                                                          \
      LANES_FOLD_HALVE(T, OP, p, 8)                                \
      LANES_FOLD_HALVE(T, OP, p, 4)                                \
      LANES_FOLD_HALVE(T, OP, p, 2)                                \
      LANES_FOLD_HALVE(T, OP, p, 1)                                \
      T acc_ = r, y_ = p[0];                                       \
      r = (OP);                                                    \
    }                                                              \
    for (; l < n; l++) {                                           \
      T acc_ = r, y_ = x_[l];                                      \
      r = (OP);                                                    \
    }                                                              \
    memcpy((char *)out + (size_t)row_ * sizeof r, &r, sizeof r);   \
  }

/* GCC/clang vector extensions: 16 f32 lanes are one 512-bit register,
 * two 256-bit or four 128-bit ones, whichever build this is. */
typedef float lanes_v16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t lanes_i16 __attribute__((vector_size(64)));
typedef float lanes_v8 __attribute__((vector_size(32)));
typedef int32_t lanes_i8 __attribute__((vector_size(32)));
typedef float lanes_v4 __attribute__((vector_size(16)));
typedef int32_t lanes_i4 __attribute__((vector_size(16)));

/* f32 rows of at least 16 (GCC does not vectorize LANES_FOLD's NaN test):
 * 16 lanes in a vector, halved to one; max and min keep a NaN from either
 * side at every step. */
/* (by pointer: a 64-byte vector passed by value changes the ABI where
 * AVX-512 is off, and GCC says so) */
static inline void lanes_fold_step(te_reduce_op rop, lanes_v16 *acc, const lanes_v16 *yp) {
  lanes_v16 a = *acc, y = *yp;
  lanes_i16 take;
  switch (rop) {
    case TE_RSUM: *acc = a + y; return;
    case TE_RPROD: *acc = a * y; return;
    case TE_RMAX: take = (y != y) | (y > a); break;
    default: take = (y != y) | (y < a); break;
  }
  *acc = (lanes_v16)((take & (lanes_i16)y) | (~take & (lanes_i16)a));
}

static void lanes_fold_f32(te_reduce_op rop, int rows, int n, const float *x, float *out) {
  for (int row = 0; row < rows; row++) {
    const float *xr = x + (size_t)row * (size_t)n;
    lanes_v16 acc = *(const lanes_v16 *)xr;
    int l = 16;
    for (; l + 16 <= n; l += 16) lanes_fold_step(rop, &acc, (const lanes_v16 *)(xr + l));
    /* Halved in registers (lanes past the live ones hold copies, never
     * read): through memory, each half's load waited on the narrower
     * stores before it, a quarter of a tiny kernel's time. */
    lanes_v16 h = __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    lanes_fold_step(rop, &acc, &h);
    h = __builtin_shufflevector(acc, acc, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    lanes_fold_step(rop, &acc, &h);
    h = __builtin_shufflevector(acc, acc, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    lanes_fold_step(rop, &acc, &h);
    h = __builtin_shufflevector(acc, acc, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    lanes_fold_step(rop, &acc, &h);
    float r = out[row], y = acc[0];
    for (;;) {
      switch (rop) {
        case TE_RSUM: r = r + y; break;
        case TE_RPROD: r = r * y; break;
        case TE_RMAX: r = (y != y || y > r) ? y : r; break;
        default: r = (y != y || y < r) ? y : r; break;
      }
      if (l >= n) break;
      y = xr[l++];
    }
    out[row] = r;
  }
}

static void lanes_fold(te_reduce_op rop, kiln_dtype dt, int rows, int n, const void *x, void *out) {
  if (dt == KILN_DTYPE_F32 && n >= 16 && ((uintptr_t)out & 3) == 0) {
    lanes_fold_f32(rop, rows, n, x, out);
    return;
  }
  switch (dt) {
#define X(DT, T, U, FLOAT)                                                                                      \
  case DT:                                                                                                      \
    switch (rop) {                                                                                              \
      case TE_RSUM: LANES_FOLD(T, FLOAT ? (T)(acc_ + y_) : (T)((U)acc_ + (U)y_)); return;                      \
      case TE_RPROD: LANES_FOLD(T, FLOAT ? (T)(acc_ * y_) : (T)((uint64_t)(U)acc_ * (uint64_t)(U)y_)); return; \
      case TE_RMAX: LANES_FOLD(T, (y_ != y_ || y_ > acc_) ? y_ : acc_); return;                                 \
      case TE_RMIN: LANES_FOLD(T, (y_ != y_ || y_ < acc_) ? y_ : acc_); return;                                 \
    }                                                                                                           \
    return;
    LANES_ALL(X)
#undef X
    default: return;
  }
}

static void lanes_spread(kiln_dtype dt, int n, void *o, int first, int m, const void *v) {
  switch (lanes_size(dt)) {
#define S(SIZE, T)                                                          \
  case SIZE: {                                                              \
    T *o_ = o;                                                              \
    const char *v_ = v;                                                     \
    for (int l = 0, r = 0; l < n; r++) {                                    \
      int end = r ? (first + r * m < n ? first + r * m : n) : (first < n ? first : n); \
      T x_;                                                                 \
      memcpy(&x_, v_ + (size_t)r * SIZE, SIZE);                             \
      for (; l < end; l++) o_[l] = x_;                                      \
    }                                                                       \
    return;                                                                 \
  }
    S(1, uint8_t)
    S(2, uint16_t)
    S(4, uint32_t)
    S(8, uint64_t)
#undef S
    default: return;
  }
}

static void lanes_fill(kiln_dtype dt, int n, void *o, const void *v) { lanes_store(dt, n, o, 1, v, 1); }

static void lanes_clip(int n, float *o, const float *a, float lo, float hi) {
  for (int l = 0; l < n; l++) {
    float v = a[l] < lo ? lo : a[l];
    o[l] = v > hi ? hi : v;
  }
}

static void lanes_ramp(int n, int64_t *o, int64_t start) {
  for (int l = 0; l < n; l++) o[l] = start + l;
}

static void lanes_index_add(int n, int64_t *idx, int64_t c, const int64_t *x, int64_t x0) {
  /* unsigned: the index arithmetic wraps as the generated code's would */
  uint64_t *o = (uint64_t *)idx;
  for (int l = 0; l < n; l++) o[l] += (uint64_t)c * ((uint64_t)x[l] - (uint64_t)x0);
}

/* ---- fused pairs ----------------------------------------------------------- */

#define LANES_MULADD(AI, BI, CI) \
  for (int l = 0; l < n; l++) o[l] = a[AI] * b[BI] + c[CI]

static void lanes_muladd(int n, float *o, const float *a, int as, const float *b, int bs, const float *c, int cs) {
  /* the common shapes as plain loops the compiler vectorizes */
  if (as && !bs) { /* the product commutes: lanes first */
    const float *t = a;
    a = b;
    b = t;
    as = 0;
    bs = 1;
  }
  if (!as && bs && cs) {
    float y = b[0], z = c[0];
    for (int l = 0; l < n; l++) o[l] = a[l] * y + z;
  } else if (!as && !bs && !cs) {
    LANES_MULADD(l, l, l);
  } else if (!as && bs && !cs) {
    float y = b[0];
    for (int l = 0; l < n; l++) o[l] = a[l] * y + c[l];
  } else if (!as && !bs && cs) {
    float z = c[0];
    for (int l = 0; l < n; l++) o[l] = a[l] * b[l] + z;
  } else {
    int am = as ? 0 : 1, bm = bs ? 0 : 1, cm = cs ? 0 : 1;
    LANES_MULADD(l * am, l * bm, l * cm);
  }
}

static void lanes_clamp(int n, float *o, const float *a, float lo, float hi) {
  /* With lo <= hi this is max-then-min under the NaN rule, a zero's sign
   * included (x == lo or hi gives the bound), written without `x != x`:
   * GCC leaves two chained NaN tests scalar and vectorizes this. */
  for (int l = 0; l < n; l++) {
    float x = a[l];
    o[l] = x >= hi ? hi : (x <= lo ? lo : x);
  }
}

/* ---- QuantizeLinear --------------------------------------------------------- */

#define LANES_QUANT(T, LO, HI, VI, SI, ZI)                                \
  do {                                                                    \
    T *o_ = (T *)o;                                                       \
    for (int l = 0; l < n; l++) {                                         \
      float z_ = z[ZI], r_ = nearbyintf(v[VI] / s[SI]), q_ = r_ + z_;     \
      q_ = (q_ != q_ || q_ > (LO)) ? q_ : (LO);                           \
      q_ = (q_ != q_ || q_ < (HI)) ? q_ : (HI);                           \
      o_[l] = (T)(r_ != r_ ? z_ : q_);                                    \
    }                                                                     \
  } while (0)

static void lanes_quantize(kiln_dtype to, int n, void *o, const float *v, int vs, const float *s, int ss,
                           const float *z, int zs) {
  bool i8 = to == KILN_DTYPE_I8;
  if (!vs && ss && zs) { /* per-tensor: the loop the compiler vectorizes */
    if (i8)
      LANES_QUANT(int8_t, -128.0f, 127.0f, l, 0, 0);
    else
      LANES_QUANT(uint8_t, 0.0f, 255.0f, l, 0, 0);
    return;
  }
  int vm = vs ? 0 : 1, sm = ss ? 0 : 1, zm = zs ? 0 : 1;
  if (i8)
    LANES_QUANT(int8_t, -128.0f, 127.0f, l * vm, l * sm, l * zm);
  else
    LANES_QUANT(uint8_t, 0.0f, 255.0f, l * vm, l * sm, l * zm);
}

/* ---- row kernels ---------------------------------------------------------- */

/* Sums and maxima along a row in 16 lanes (lanes_v16), then halved to
 * one: a row of 16 is one load and four steps, not fifteen dependent
 * scalar ones. */

/* max(a, b) where a NaN in the row makes no difference (softmax: exp of
 * a NaN is NaN in the sum and every output). */
#define LANES_VMAX(IV, a, b) ((__typeof__(a))((((IV)((a) > (b))) & (IV)(a)) | (~((IV)((a) > (b))) & (IV)(b))))

static inline float lanes_row_sum(const float *x, int64_t n) {
  int64_t j = 0;
  float r = 0.0f;
  if (n >= 16) {
    lanes_v16 acc = *(const lanes_v16 *)x;
    for (j = 16; j + 16 <= n; j += 16) acc += *(const lanes_v16 *)(x + j);
    lanes_v8 h = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
    lanes_v4 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
    r = (q[0] + q[2]) + (q[1] + q[3]);
  }
  for (; j < n; j++) r += x[j];
  return r;
}

static inline float lanes_row_max(const float *x, int64_t n) {
  int64_t j = 1;
  float r = x[0];
  if (n >= 16) {
    lanes_v16 acc = *(const lanes_v16 *)x;
    for (j = 16; j + 16 <= n; j += 16) {
      lanes_v16 v = *(const lanes_v16 *)(x + j);
      acc = LANES_VMAX(lanes_i16, v, acc);
    }
    lanes_v8 a = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7);
    lanes_v8 b = __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
    lanes_v8 h = LANES_VMAX(lanes_i8, a, b);
    lanes_v4 c = __builtin_shufflevector(h, h, 0, 1, 2, 3), d = __builtin_shufflevector(h, h, 4, 5, 6, 7);
    lanes_v4 q = LANES_VMAX(lanes_i4, c, d);
    r = q[0];
    for (int u = 1; u < 4; u++) r = q[u] > r ? q[u] : r;
  }
  for (; j < n; j++) r = x[j] > r ? x[j] : r;
  return r;
}

static void lanes_softmax_rows(int64_t r0, int64_t r1, int64_t n, float *y, const float *x, bool log) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float mx = lanes_row_max(xr, n);
    for (int64_t j = 0; j < n; j++) yr[j] = kiln_expf(xr[j] - mx);
    float sum = lanes_row_sum(yr, n);
    if (log) {
      float shift = mx + logf(sum);
      for (int64_t j = 0; j < n; j++) yr[j] = xr[j] - shift;
    } else {
      for (int64_t j = 0; j < n; j++) yr[j] = yr[j] / sum;
    }
  }
}

static void lanes_layernorm_rows(int64_t r0, int64_t r1, int64_t n, float *y, const float *x, const float *scale,
                                 const float *bias, float eps) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float mean = lanes_row_sum(xr, n) / (float)n;
    for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - mean) * (xr[j] - mean);
    float inv = 1.0f / sqrtf(lanes_row_sum(yr, n) / (float)n + eps);
    if (bias) {
      for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - mean) * inv * scale[j] + bias[j];
    } else {
      for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - mean) * inv * scale[j];
    }
  }
}

/* ArgMax (max) / ArgMin of each row: the first (last) position of the
 * best value, NaN beating every number as in ref (reduce.c's
 * arg_compare). Pass 1 keeps 16 lanes of best values and NaN flags (a
 * compare-select the vectorizer takes); pass 2 finds the position,
 * stopping at the first hit from the chosen end. */
static void lanes_arg_rows(int64_t r0, int64_t r1, int64_t n, int64_t *y, const float *x, bool max, bool last) {
  enum { W = 16 };
  for (int64_t r = r0; r < r1; r++) {
    const float *p = x + r * n;
    float acc[W];
    int nan[W];
    for (int l = 0; l < W; l++) acc[l] = p[0], nan[l] = 0;
    int64_t j = 0;
    for (; j + W <= n; j += W)
      for (int l = 0; l < W; l++) {
        float v = p[j + l];
        nan[l] |= v != v;
        acc[l] = (max ? v > acc[l] : v < acc[l]) ? v : acc[l];
      }
    float best = acc[0];
    int any_nan = 0;
    for (int l = 0; l < W; l++) {
      any_nan |= nan[l];
      best = (max ? acc[l] > best : acc[l] < best) ? acc[l] : best;
    }
    for (; j < n; j++) {
      float v = p[j];
      any_nan |= v != v;
      best = (max ? v > best : v < best) ? v : best;
    }
    int64_t at = 0;
    if (last) {
      for (at = n - 1; at > 0; at--)
        if (any_nan ? p[at] != p[at] : p[at] == best) break;
    } else {
      for (at = 0; at < n - 1; at++)
        if (any_nan ? p[at] != p[at] : p[at] == best) break;
    }
    y[r] = at;
  }
}

const kiln_lanes_ops LANES_TABLE = {
    .name = LANES_NAME,
    .binary = lanes_binary,
    .compare = lanes_compare,
    .logic = lanes_logic,
    .unary = lanes_unary,
    .cast = lanes_cast,
    .select = lanes_select,
    .call = lanes_call,
    .gather = lanes_gather,
    .strided = lanes_strided,
    .store = lanes_store,
    .combine = lanes_combine,
    .fold = lanes_fold,
    .spread = lanes_spread,
    .fill = lanes_fill,
    .clip = lanes_clip,
    .ramp = lanes_ramp,
    .index_add = lanes_index_add,
    .muladd = lanes_muladd,
    .clamp = lanes_clamp,
    .quantize = lanes_quantize,
    .softmax_rows = lanes_softmax_rows,
    .layernorm_rows = lanes_layernorm_rows,
    .arg_rows = lanes_arg_rows,
};
