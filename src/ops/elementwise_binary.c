/* Binary and n-ary elementwise ops with numpy broadcasting: arithmetic,
 * comparisons, logic, Pow, Mod, BitShift (signed from opset 28), PRelu,
 * Max/Min/Sum/Mean, Where.
 *
 * Floats compute in double and round once into the output dtype. Integers
 * compute exactly in int64 (signed) or uint64 (unsigned, bool) and wrap
 * modulo 2^bits like numpy: + - * go through uint64 so overflow is never
 * C undefined behaviour. Integer division truncates toward zero (C, ONNX
 * Runtime); division by zero is an error rather than a crash. */
#include "ops/elementwise.h"

#include <math.h>

typedef struct binary_def {
  unsigned allowed;     /* dtype mask of both inputs (they must match) */
  bool bool_out;        /* comparisons */
  bool legacy;          /* had the opset<7 broadcast/axis attributes */
  bool int_div;         /* integer division: a zero divisor is an error */
  double (*f)(double a, double b, const ew_params *p);
  int64_t (*i)(int64_t a, int64_t b, const ew_params *p);
  uint64_t (*u)(uint64_t a, uint64_t b, const ew_params *p);
} binary_def;

static kiln_status_t check_same_dtype(const kiln_tensor *t, int input, const kiln_tensor *first) {
  if (t->dtype == first->dtype) return NULL;
  return kiln_error(KILN_INVALID_ARGUMENT, "input %d has dtype %s; expected %s like input 0", input,
                    kiln_dtype_name(t->dtype), kiln_dtype_name(first->dtype));
}

/* Shapes of A and B as the broadcast sees them (opset<7 rules when they apply). */
static kiln_status_t binary_shapes(const kiln_kernel_ctx *ctx, bool legacy, const kiln_tensor *a,
                                   const kiln_tensor *b, ew_shape shapes[2]) {
  shapes[0] = ew_shape_of(a);
  shapes[1] = ew_shape_of(b);
  if (legacy && ew_is_legacy_broadcast(ctx->opset, ctx->node))
    return ew_legacy_broadcast_shape(ctx->node, a, b, &shapes[1]);
  return NULL;
}

static kiln_status_t run_binary(kiln_kernel_ctx *ctx, const binary_def *d, const ew_params *p) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(ew_check_dtype(a, 0, d->allowed));
  KILN_TRY(check_same_dtype(b, 1, a));
  ew_shape shapes[2];
  KILN_TRY(binary_shapes(ctx, d->legacy, a, b, shapes));
  ew_bcast it;
  KILN_TRY(ew_bcast_init(&it, 2, shapes));
  kiln_dtype dt = a->dtype, odt = d->bool_out ? KILN_DTYPE_BOOL : dt;
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, odt, it.rank, it.dims, &y);
  bool is_float = kiln_dtype_is_float(dt), is_unsigned = ew_is_unsigned(dt);
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    int64_t ia = it.offsets[0], ib = it.offsets[1];
    if (is_float) {
      ew_store_f64(y->data, odt, k, d->f(kiln_load_f64(a->data, dt, ia), kiln_load_f64(b->data, dt, ib), p));
    } else if (is_unsigned) {
      uint64_t vb = kiln_load_u64(b->data, dt, ib);
      if (d->int_div && vb == 0)
        st = kiln_error(KILN_INVALID_ARGUMENT, "input 1: integer division by zero (element %lld)", (long long)ib);
      else
        kiln_store_i64(y->data, odt, k, (int64_t)d->u(kiln_load_u64(a->data, dt, ia), vb, p));
    } else {
      int64_t vb = kiln_load_i64(b->data, dt, ib);
      if (d->int_div && vb == 0)
        st = kiln_error(KILN_INVALID_ARGUMENT, "input 1: integer division by zero (element %lld)", (long long)ib);
      else
        kiln_store_i64(y->data, odt, k, d->i(kiln_load_i64(a->data, dt, ia), vb, p));
    }
  }
  ew_bcast_free(&it);
  return st;
}

static kiln_dtype input_dtype(const kiln_infer_ctx *ctx, int i) {
  return (i < ctx->n_inputs && ctx->inputs[i]) ? ctx->inputs[i]->dtype : KILN_DTYPE_UNDEFINED;
}

static kiln_status_t infer_binary(kiln_infer_ctx *ctx, bool bool_out, bool legacy) {
  kiln_dtype odt = bool_out ? KILN_DTYPE_BOOL : input_dtype(ctx, 0);
  if (legacy && ew_is_legacy_broadcast(ctx->opset, ctx->node)) {
    /* B broadcasts to A: the output is A's shape. */
    KILN_TRY(kiln_infer_same_as_input(ctx, 0, 0));
    if (ctx->n_outputs > 0) ctx->outputs[0].dtype = odt;
    return NULL;
  }
  return kiln_infer_broadcast(ctx, odt);
}

/* ---- scalar functions ---------------------------------------------------- */

static int64_t neg_wrap(int64_t x) { return (int64_t)(0u - (uint64_t)x); }

static double f_add(double a, double b, const ew_params *p) { return a + b; }
static int64_t i_add(int64_t a, int64_t b, const ew_params *p) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static uint64_t u_add(uint64_t a, uint64_t b, const ew_params *p) { return a + b; }
static double f_sub(double a, double b, const ew_params *p) { return a - b; }
static int64_t i_sub(int64_t a, int64_t b, const ew_params *p) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static uint64_t u_sub(uint64_t a, uint64_t b, const ew_params *p) { return a - b; }
static double f_mul(double a, double b, const ew_params *p) { return a * b; }
static int64_t i_mul(int64_t a, int64_t b, const ew_params *p) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static uint64_t u_mul(uint64_t a, uint64_t b, const ew_params *p) { return a * b; }
static double f_div(double a, double b, const ew_params *p) { return a / b; }
/* b != 0 (checked by the caller); INT64_MIN / -1 wraps instead of trapping. */
static int64_t i_div(int64_t a, int64_t b, const ew_params *p) { return b == -1 ? neg_wrap(a) : a / b; }
static uint64_t u_div(uint64_t a, uint64_t b, const ew_params *p) { return a / b; }

/* fmod=1: C fmod (sign of the dividend); fmod=0: Python/numpy mod (sign of the divisor). */
static double f_mod(double a, double b, const ew_params *p) {
  double r = fmod(a, b);
  if (p->flag_a || b == 0 || isnan(r)) return r;
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
  } else {
    r = copysign(0.0, b);
  }
  return r;
}
static int64_t i_mod(int64_t a, int64_t b, const ew_params *p) {
  int64_t r = b == -1 ? 0 : a % b;
  if (!p->flag_a && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
static uint64_t u_mod(uint64_t a, uint64_t b, const ew_params *p) { return a % b; }

/* BitShift: flag_a 1 = right, flag_b the element's bit width. A shift by
 * the width or more (or, signed, by a negative amount) leaves only what the
 * fill gives: 0, or -1 for a negative value shifted right (opset 28's rule).
 * A left shift wraps past the top bit; the store narrows to the width. */
static uint64_t u_bitshift(uint64_t a, uint64_t b, const ew_params *p) {
  if (b >= (uint64_t)p->flag_b) return 0;
  return p->flag_a ? a >> b : a << b;
}
static int64_t i_bitshift(int64_t a, int64_t b, const ew_params *p) {
  if (b < 0 || b >= p->flag_b) return p->flag_a && a < 0 ? -1 : 0;
  if (!p->flag_a) return (int64_t)((uint64_t)a << b);
  return a < 0 ? ~(~a >> b) : a >> b; /* arithmetic, without C's implementation-defined >> of a negative */
}

static uint64_t u_and(uint64_t a, uint64_t b, const ew_params *p) { return a && b; }
static uint64_t u_or(uint64_t a, uint64_t b, const ew_params *p) { return a || b; }
static uint64_t u_xor(uint64_t a, uint64_t b, const ew_params *p) { return (a != 0) != (b != 0); }

static double f_eq(double a, double b, const ew_params *p) { return a == b; }
static int64_t i_eq(int64_t a, int64_t b, const ew_params *p) { return a == b; }
static uint64_t u_eq(uint64_t a, uint64_t b, const ew_params *p) { return a == b; }
static double f_gt(double a, double b, const ew_params *p) { return a > b; }
static int64_t i_gt(int64_t a, int64_t b, const ew_params *p) { return a > b; }
static uint64_t u_gt(uint64_t a, uint64_t b, const ew_params *p) { return a > b; }
static double f_ge(double a, double b, const ew_params *p) { return a >= b; }
static int64_t i_ge(int64_t a, int64_t b, const ew_params *p) { return a >= b; }
static uint64_t u_ge(uint64_t a, uint64_t b, const ew_params *p) { return a >= b; }
static double f_lt(double a, double b, const ew_params *p) { return a < b; }
static int64_t i_lt(int64_t a, int64_t b, const ew_params *p) { return a < b; }
static uint64_t u_lt(uint64_t a, uint64_t b, const ew_params *p) { return a < b; }
static double f_le(double a, double b, const ew_params *p) { return a <= b; }
static int64_t i_le(int64_t a, int64_t b, const ew_params *p) { return a <= b; }
static uint64_t u_le(uint64_t a, uint64_t b, const ew_params *p) { return a <= b; }

/* numpy maximum/minimum: a NaN in either operand gives NaN. */
static double f_max(double a, double b, const ew_params *p) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static int64_t i_max(int64_t a, int64_t b, const ew_params *p) { return a > b ? a : b; }
static uint64_t u_max(uint64_t a, uint64_t b, const ew_params *p) { return a > b ? a : b; }
static double f_min(double a, double b, const ew_params *p) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static int64_t i_min(int64_t a, int64_t b, const ew_params *p) { return a < b ? a : b; }
static uint64_t u_min(uint64_t a, uint64_t b, const ew_params *p) { return a < b ? a : b; }

static double f_prelu(double x, double s, const ew_params *p) { return x < 0 ? s * x : x; }
static int64_t i_prelu(int64_t x, int64_t s, const ew_params *p) { return x < 0 ? i_mul(s, x, p) : x; }
static uint64_t u_prelu(uint64_t x, uint64_t s, const ew_params *p) { return x; }

/* ---- two-input ops -------------------------------------------------------- */

#define BINARY_OP(name, ...)                                                \
  static const binary_def def_##name = {__VA_ARGS__};                       \
  kiln_status_t ew_kernel_##name(kiln_kernel_ctx *ctx) {                   \
    ew_params p = {0};                                                      \
    return run_binary(ctx, &def_##name, &p);                                \
  }                                                                         \
  kiln_status_t ew_infer_##name(kiln_infer_ctx *ctx) {                     \
    return infer_binary(ctx, def_##name.bool_out, def_##name.legacy);       \
  }

BINARY_OP(Add, .allowed = EW_NUMERIC, .legacy = true, .f = f_add, .i = i_add, .u = u_add)
BINARY_OP(Sub, .allowed = EW_NUMERIC, .legacy = true, .f = f_sub, .i = i_sub, .u = u_sub)
BINARY_OP(Mul, .allowed = EW_NUMERIC, .legacy = true, .f = f_mul, .i = i_mul, .u = u_mul)
BINARY_OP(Div, .allowed = EW_NUMERIC, .legacy = true, .int_div = true, .f = f_div, .i = i_div, .u = u_div)
BINARY_OP(And, .allowed = EW_BOOL, .bool_out = true, .legacy = true, .u = u_and)
BINARY_OP(Or, .allowed = EW_BOOL, .bool_out = true, .legacy = true, .u = u_or)
BINARY_OP(Xor, .allowed = EW_BOOL, .bool_out = true, .legacy = true, .u = u_xor)
/* Equal: opset 19 adds strings (byte-wise equality; an unset string is ""). */
static const binary_def def_Equal = {
    .allowed = EW_NUMERIC | EW_BOOL, .bool_out = true, .legacy = true, .f = f_eq, .i = i_eq, .u = u_eq};

static kiln_status_t run_string_equal(kiln_kernel_ctx *ctx, const kiln_tensor *a, const kiln_tensor *b) {
  KILN_TRY(check_same_dtype(b, 1, a));
  ew_shape shapes[2] = {ew_shape_of(a), ew_shape_of(b)};
  ew_bcast it;
  KILN_TRY(ew_bcast_init(&it, 2, shapes));
  kiln_tensor *y;
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_BOOL, it.rank, it.dims, &y);
  const char *const *sa = a->data, *const *sb = b->data;
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    const char *x = sa[it.offsets[0]], *z = sb[it.offsets[1]];
    ((bool *)y->data)[k] = !strcmp(x ? x : "", z ? z : "");
  }
  ew_bcast_free(&it);
  return st;
}

kiln_status_t ew_kernel_Equal(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  if (a->dtype == KILN_DTYPE_STRING && ctx->opset >= 19) return run_string_equal(ctx, a, b);
  ew_params p = {0};
  return run_binary(ctx, &def_Equal, &p);
}
kiln_status_t ew_infer_Equal(kiln_infer_ctx *ctx) { return infer_binary(ctx, true, true); }
BINARY_OP(Greater, .allowed = EW_NUMERIC, .bool_out = true, .legacy = true, .f = f_gt, .i = i_gt, .u = u_gt)
BINARY_OP(Less, .allowed = EW_NUMERIC, .bool_out = true, .legacy = true, .f = f_lt, .i = i_lt, .u = u_lt)
BINARY_OP(GreaterOrEqual, .allowed = EW_NUMERIC, .bool_out = true, .f = f_ge, .i = i_ge, .u = u_ge)
BINARY_OP(LessOrEqual, .allowed = EW_NUMERIC, .bool_out = true, .f = f_le, .i = i_le, .u = u_le)

static const binary_def def_Mod = {.allowed = EW_NUMERIC, .int_div = true, .f = f_mod, .i = i_mod, .u = u_mod};
kiln_status_t ew_kernel_Mod(kiln_kernel_ctx *ctx) {
  ew_params p = {.flag_a = kiln_attr_int(ctx->node, "fmod", 0)};
  if (p.flag_a != 0 && p.flag_a != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute fmod=%lld; expected 0 or 1", (long long)p.flag_a);
  return run_binary(ctx, &def_Mod, &p);
}
kiln_status_t ew_infer_Mod(kiln_infer_ctx *ctx) { return infer_binary(ctx, false, false); }

static const binary_def def_BitShift = {.allowed = EW_INTS, .i = i_bitshift, .u = u_bitshift};
kiln_status_t ew_kernel_BitShift(kiln_kernel_ctx *ctx) {
  const char *dir = kiln_attr_string(ctx->node, "direction", NULL);
  ew_params p = {0};
  if (dir && !strcmp(dir, "RIGHT"))
    p.flag_a = 1;
  else if (!dir || strcmp(dir, "LEFT"))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute direction must be \"LEFT\" or \"RIGHT\", got %s%s%s",
                      dir ? "\"" : "", dir ? dir : "nothing", dir ? "\"" : "");
  kiln_tensor *x = kiln_kernel_input(ctx, 0);
  if (x) {
    /* Signed integers joined the schema in opset 28. */
    if (ctx->opset < 28 && (EW_BIT(x->dtype) & EW_SINTS))
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 0 (X) has dtype %s; BitShift takes signed integers from opset 28 (node opset %d)",
                        kiln_dtype_name(x->dtype), ctx->opset);
    p.flag_b = (int64_t)kiln_dtype_size(x->dtype) * 8;
  }
  return run_binary(ctx, &def_BitShift, &p);
}
kiln_status_t ew_infer_BitShift(kiln_infer_ctx *ctx) { return infer_binary(ctx, false, false); }

/* ---- Pow: base and exponent may have different dtypes ---------------------- */

/* base^e exactly, wrapping modulo 2^64 (square and multiply). */
static uint64_t ipow_wrap(uint64_t base, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}

/* Integer power with a signed exponent. A negative exponent gives the
 * truncated 1/base^-e: 1 for base 1, +-1 for base -1, else 0 (numpy
 * refuses these; 0 also stands for 0^-e, which has no integer value). */
static int64_t ipow_signed(int64_t base, int64_t e) {
  if (e >= 0) return (int64_t)ipow_wrap((uint64_t)base, (uint64_t)e);
  if (base == 1) return 1;
  if (base == -1) return (e & 1) ? -1 : 1;
  return 0;
}

kiln_status_t ew_kernel_Pow(kiln_kernel_ctx *ctx) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(ew_check_dtype(a, 0, EW_NUMERIC));
  KILN_TRY(ew_check_dtype(b, 1, EW_NUMERIC));
  ew_shape shapes[2];
  KILN_TRY(binary_shapes(ctx, true, a, b, shapes));
  ew_bcast it;
  KILN_TRY(ew_bcast_init(&it, 2, shapes));
  kiln_dtype da = a->dtype, db = b->dtype;
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, da, it.rank, it.dims, &y);
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    int64_t ia = it.offsets[0], ib = it.offsets[1];
    if (kiln_dtype_is_float(da) || kiln_dtype_is_float(db)) {
      /* A float on either side: pow in double, then into A's dtype
       * (integer bases truncate, like numpy's astype). */
      ew_store_f64(y->data, da, k, pow(kiln_load_f64(a->data, da, ia), kiln_load_f64(b->data, db, ib)));
    } else {
      bool neg_exp = !ew_is_unsigned(db) && kiln_load_i64(b->data, db, ib) < 0;
      uint64_t e = kiln_load_u64(b->data, db, ib);
      uint64_t r;
      if (ew_is_unsigned(da)) {
        uint64_t base = kiln_load_u64(a->data, da, ia);
        r = neg_exp ? (base == 1) : ipow_wrap(base, e);
      } else {
        int64_t base = kiln_load_i64(a->data, da, ia);
        r = (uint64_t)(neg_exp ? ipow_signed(base, (int64_t)e) : (int64_t)ipow_wrap((uint64_t)base, e));
      }
      kiln_store_i64(y->data, da, k, (int64_t)r);
    }
  }
  ew_bcast_free(&it);
  return st;
}
kiln_status_t ew_infer_Pow(kiln_infer_ctx *ctx) { return infer_binary(ctx, false, true); }

/* ---- PRelu: slope broadcasts to X (one direction) ------------------------- */

static const binary_def def_PRelu = {.allowed = EW_NUMERIC, .f = f_prelu, .i = i_prelu, .u = u_prelu};

kiln_status_t ew_kernel_PRelu(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *slope, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &slope));
  KILN_TRY(ew_check_dtype(x, 0, def_PRelu.allowed));
  KILN_TRY(check_same_dtype(slope, 1, x));
  ew_shape shapes[2] = {ew_shape_of(x), ew_shape_of(slope)};
  /* Before opset 7 a 1-D slope of C values was per channel (axis 1). */
  if (ctx->opset > 0 && ctx->opset < 7 && slope->rank == 1 && slope->numel != 1 && x->rank >= 2 &&
      slope->dims[0] == x->dims[1]) {
    shapes[1].rank = x->rank - 1;
    for (int d = 0; d < shapes[1].rank; d++) shapes[1].dims[d] = d == 0 ? slope->dims[0] : 1;
  }
  ew_bcast it;
  KILN_TRY(ew_bcast_init(&it, 2, shapes));
  kiln_status_t st = NULL;
  if (!kiln_shape_equal(it.rank, it.dims, x->rank, x->dims)) {
    char sx[256], ss[256];
    st = kiln_error(KILN_INVALID_ARGUMENT, "input 1 (slope) %s does not broadcast to input 0 (X) %s",
                    kiln_shape_str(slope->rank, slope->dims, ss, sizeof ss),
                    kiln_shape_str(x->rank, x->dims, sx, sizeof sx));
  }
  if (!st) st = kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y);
  kiln_dtype dt = x->dtype;
  ew_params p = {0};
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    int64_t ia = it.offsets[0], ib = it.offsets[1];
    if (kiln_dtype_is_float(dt))
      ew_store_f64(y->data, dt, k, f_prelu(kiln_load_f64(x->data, dt, ia), kiln_load_f64(slope->data, dt, ib), &p));
    else if (ew_is_unsigned(dt))
      kiln_store_i64(y->data, dt, k, (int64_t)kiln_load_u64(x->data, dt, ia));
    else
      kiln_store_i64(y->data, dt, k, i_prelu(kiln_load_i64(x->data, dt, ia), kiln_load_i64(slope->data, dt, ib), &p));
  }
  ew_bcast_free(&it);
  return st;
}
kiln_status_t ew_infer_PRelu(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

/* ---- Max, Min, Sum, Mean: any number of inputs ------------------------------ */

typedef struct variadic_def {
  unsigned allowed;
  bool mean; /* divide the folded sum by the input count */
  double (*f)(double a, double b, const ew_params *p);
  int64_t (*i)(int64_t a, int64_t b, const ew_params *p);
  uint64_t (*u)(uint64_t a, uint64_t b, const ew_params *p);
} variadic_def;

static kiln_status_t run_variadic(kiln_kernel_ctx *ctx, const variadic_def *d) {
  int n = ctx->n_inputs;
  if (n < 1) return kiln_error(KILN_INVALID_ARGUMENT, "needs at least one input");
  kiln_tensor **ts = calloc((size_t)n, sizeof *ts);
  if (!ts) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int k = 0; !st && k < n; k++) {
    st = kiln_kernel_require_input(ctx, k, &ts[k]);
    if (!st) st = k == 0 ? ew_check_dtype(ts[0], 0, d->allowed) : check_same_dtype(ts[k], k, ts[0]);
  }
  ew_bcast it = {0};
  if (!st) st = ew_bcast_init_tensors(&it, n, ts);
  kiln_tensor *y = NULL;
  if (!st) st = kiln_kernel_output_tensor(ctx, 0, ts[0]->dtype, it.rank, it.dims, &y);
  kiln_dtype dt = st ? KILN_DTYPE_UNDEFINED : ts[0]->dtype;
  ew_params p = {0};
  for (int64_t e = 0; !st && e < it.numel; e++, ew_bcast_next(&it)) {
    if (kiln_dtype_is_float(dt)) {
      double acc = kiln_load_f64(ts[0]->data, dt, it.offsets[0]);
      for (int k = 1; k < n; k++) acc = d->f(acc, kiln_load_f64(ts[k]->data, dt, it.offsets[k]), &p);
      if (d->mean) acc /= n;
      ew_store_f64(y->data, dt, e, acc);
    } else if (ew_is_unsigned(dt)) {
      uint64_t acc = kiln_load_u64(ts[0]->data, dt, it.offsets[0]);
      for (int k = 1; k < n; k++) acc = d->u(acc, kiln_load_u64(ts[k]->data, dt, it.offsets[k]), &p);
      kiln_store_i64(y->data, dt, e, (int64_t)acc);
    } else {
      int64_t acc = kiln_load_i64(ts[0]->data, dt, it.offsets[0]);
      for (int k = 1; k < n; k++) acc = d->i(acc, kiln_load_i64(ts[k]->data, dt, it.offsets[k]), &p);
      kiln_store_i64(y->data, dt, e, acc);
    }
  }
  ew_bcast_free(&it);
  free(ts);
  return st;
}

#define VARIADIC_OP(name, ...)                                                                    \
  static const variadic_def def_##name = {__VA_ARGS__};                                          \
  kiln_status_t ew_kernel_##name(kiln_kernel_ctx *ctx) { return run_variadic(ctx, &def_##name); } \
  kiln_status_t ew_infer_##name(kiln_infer_ctx *ctx) { return kiln_infer_broadcast(ctx, input_dtype(ctx, 0)); }

VARIADIC_OP(Max, .allowed = EW_NUMERIC, .f = f_max, .i = i_max, .u = u_max)
VARIADIC_OP(Min, .allowed = EW_NUMERIC, .f = f_min, .i = i_min, .u = u_min)
VARIADIC_OP(Sum, .allowed = EW_FLOATS, .f = f_add, .i = i_add, .u = u_add)
VARIADIC_OP(Mean, .allowed = EW_FLOATS, .mean = true, .f = f_add, .i = i_add, .u = u_add)

/* ---- Where ------------------------------------------------------------------ */

kiln_status_t ew_kernel_Where(kiln_kernel_ctx *ctx) {
  kiln_tensor *t[3], *y;
  for (int k = 0; k < 3; k++) KILN_TRY(kiln_kernel_require_input(ctx, k, &t[k]));
  KILN_TRY(ew_check_dtype(t[0], 0, EW_BOOL));
  KILN_TRY(ew_check_dtype(t[1], 1, EW_ALL));
  if (t[2]->dtype != t[1]->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 has dtype %s; expected %s like input 1",
                      kiln_dtype_name(t[2]->dtype), kiln_dtype_name(t[1]->dtype));
  ew_bcast it;
  KILN_TRY(ew_bcast_init_tensors(&it, 3, t));
  kiln_dtype dt = t[1]->dtype;
  size_t es = kiln_dtype_size(dt);
  kiln_status_t st = kiln_kernel_output_tensor(ctx, 0, dt, it.rank, it.dims, &y);
  for (int64_t e = 0; !st && e < it.numel; e++, ew_bcast_next(&it)) {
    int src = ((const uint8_t *)t[0]->data)[it.offsets[0]] ? 1 : 2;
    int64_t off = it.offsets[src];
    if (dt == KILN_DTYPE_STRING) {
      const char *s = ((char *const *)t[src]->data)[off];
      st = kiln_tensor_set_string(y, e, s ? s : "", s ? strlen(s) : 0);
    } else {
      memcpy((char *)y->data + (size_t)e * es, (const char *)t[src]->data + (size_t)off * es, es);
    }
  }
  ew_bcast_free(&it);
  return st;
}
kiln_status_t ew_infer_Where(kiln_infer_ctx *ctx) { return kiln_infer_broadcast(ctx, input_dtype(ctx, 1)); }
