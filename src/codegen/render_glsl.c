/* The GLSL renderer: loop nest -> Vulkan compute shader (#version 450).
 *
 * The GLSL dialect of the shared emitter (render.c). Each invocation runs
 * one iteration of the nest's flattened parallel loop (bounds-checked; the
 * dispatch is split over x and y when it needs more than 65535 groups) and
 * the remaining loops serially, with reductions hoisted exactly as in C.
 * Row reductions can instead run cooperatively: one workgroup per row, the
 * reduction loop split over its invocations and combined in shared memory
 * (or with subgroup arithmetic), then the row's elements stored in
 * parallel.
 *
 * Index arithmetic is 32-bit whenever every extent, buffer and index
 * constant fits (GPUs are much faster at it), else int64 through
 * GL_EXT_shader_explicit_arithmetic_types_int64 when the device has it.
 * Buffers are std430 arrays: f32 as float, i32/u32 as int/uint, i64 as
 * int64_t (or, in 32-bit mode, pairs of ints read by their low word: i64
 * data in a 32-bit kernel are indices, which then fit), and 8/16-bit
 * inputs packed in uints (their Vulkan buffers must be padded to 4 bytes).
 * With fp16 the f32 buffers are float16_t arrays (16-bit storage): each
 * load converts to float, every computation stays f32 and each store
 * rounds to half, so fp16 changes only what crosses device memory.
 *
 * With kiln_glsl_options.spec the index integers (sizes, strides, bounds,
 * offsets) are specialization constants `KS<id>` instead of literals, so
 * one source (and one SPIR-V module) serves every shape of a kernel's
 * structure: index_text is the one place that decides, main is rendered
 * into a side buffer first so that the declarations can precede it.
 *
 * Math: GLSL builtins where the Vulkan precision rules make them accurate
 * enough (exp, floor, ceil, roundEven, pow on positive bases); GLSL ports
 * of the C preamble's helpers (kiln_erff, kiln_tanhf, ...); guarded
 * versions where the builtin is undefined on part of the domain (log and
 * sqrt of negatives give NaN as in C, pow of negative bases); and sin/cos
 * with their own range reduction (the builtins only promise 2^-11 absolute
 * error). */
#include <math.h>
#include <stdio.h>

#include "codegen/render_internal.h"

/* The GLSL renderer's context: the shared emitter's state plus the
 * storage mode. Every render_ctx the GLSL dialect sees is the first member
 * of one of these, so the hooks recover it with a cast. */
/* Specialization constants of one render: the caller's list (values, ids)
 * and the ids this shader refers to, which it must declare. */
typedef struct glsl_spec_use {
  kiln_glsl_spec *spec; /* borrowed */
  int *ids;             /* distinct, in order of first use; owned */
  int n, cap;
  bool oom;             /* ids could not grow */
} glsl_spec_use;

typedef struct glsl_ctx {
  render_ctx r;
  bool fp16;          /* f32 buffers are float16_t[] */
  bool fp16_arith;    /* and the contraction template computes in half (kiln_glsl_options.fp16_arith) */
  glsl_spec_use *sp;  /* NULL: sizes are literals; borrowed (the entry point's) */
} glsl_ctx;

static const glsl_ctx *glsl_of(const render_ctx *r) { return (const glsl_ctx *)(const void *)r; }
static bool is_fp16(const render_ctx *r) { return glsl_of(r)->fp16; }

/* Helpers every shader may call. */
static const char glsl_helpers[] =
    "float kiln_logf(float x) { return x < 0.0 ? uintBitsToFloat(0x7fc00000u) : x == 0.0 ? uintBitsToFloat(0xff800000u) : log(x); }\n"
    "float kiln_sqrtf(float x) { return x < 0.0 ? uintBitsToFloat(0x7fc00000u) : sqrt(x); }\n"
    "float kiln_sigmoidf(float x) { return 1.0 / (1.0 + exp(-x)); }\n"
    "/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); small |x| uses the series\n"
    " * (some drivers' tanh builtin gives NaN for large |x|). */\n"
    "float kiln_tanhf(float x) {\n"
    "  float a = abs(x);\n"
    "  float big = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);\n"
    "  float x2 = a * a;\n"
    "  float small = a * (1.0 + x2 * (-0.333333333 + x2 * (0.133333333 + x2 * -0.0539682540)));\n"
    "  float t = a < 0.125 ? small : big;\n"
    "  return x < 0.0 ? -t : (x > 0.0 ? t : x);\n"
    "}\n"
    "/* erf: Abramowitz & Stegun 7.1.26 refined, the series near zero (as in C). */\n"
    "float kiln_erff(float x) {\n"
    "  float a = abs(x);\n"
    "  float t = 1.0 / (1.0 + 0.3275911 * a);\n"
    "  float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);\n"
    "  float x2 = a * a;\n"
    "  float small = a * (1.1283791671 + x2 * (-0.3761263890 + x2 * (0.1128379167 + x2 * -0.0268661706)));\n"
    "  float r = a < 0.25 ? small : y;\n"
    "  return x < 0.0 ? -r : r;\n"
    "}\n"
    "/* log(1 + t) for t in [0, 1]: the series where log(1 + t) would lose t's digits. */\n"
    "float kiln_log1p01(float t) {\n"
    "  return t < 0.0625 ? t * (1.0 - t * (0.5 - t * (0.333333333 - t * (0.25 - t * (0.2 - t * 0.166666667))))) : log(1.0 + t);\n"
    "}\n"
    "float kiln_softplusf(float x) { return isnan(x) ? x : max(x, 0.0) + kiln_log1p01(exp(-abs(x))); }\n"
    "float kiln_geluf(float x) { return 0.5 * x * (1.0 + kiln_erff(x * 0.70710678118654752)); }\n"
    "float kiln_gelu_tanhf(float x) { return 0.5 * x * (1.0 + kiln_tanhf(0.79788456080286536 * (x + 0.044715 * x * x * x))); }\n"
    "/* sin/cos: x - q pi/2 in three parts (exact products for |x| < 8192),\n"
    " * minimax polynomials on [-pi/4, pi/4] (Cephes' coefficients). */\n"
    "float kiln_sin_poly(float r, float z) { return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r; }\n"
    "float kiln_cos_poly(float z) { return ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0; }\n"
    "float kiln_sincos(float x, int shift) {\n"
    "  float q = floor(x * 0.636619772367581343 + 0.5);\n"
    "  float r = ((x - q * 1.5703125) - q * 4.837512969970703125e-4) - q * 7.54978995489188216e-8;\n"
    "  float z = r * r;\n"
    "  int k = (int(q) + shift) & 3;\n"
    "  float v = (k & 1) != 0 ? kiln_cos_poly(z) : kiln_sin_poly(r, z);\n"
    "  return k >= 2 ? -v : v;\n"
    "}\n"
    "float kiln_sinf(float x) { return kiln_sincos(x, 0); }\n"
    "float kiln_cosf(float x) { return kiln_sincos(x, 1); }\n"
    "/* C's powf: negative bases with integral exponents, zeros, infinities. */\n"
    "float kiln_powf(float x, float y) {\n"
    "  if (y == 0.0 || x == 1.0) return 1.0;\n"
    "  if (isnan(x) || isnan(y)) return x + y;\n"
    "  float ax = abs(x);\n"
    "  bool odd = false;\n"
    "  if (x < 0.0) {\n"
    "    if (isinf(y)) return ax == 1.0 ? 1.0 : ((ax > 1.0) == (y > 0.0) ? uintBitsToFloat(0x7f800000u) : 0.0);\n"
    "    if (floor(y) != y) return uintBitsToFloat(0x7fc00000u);\n"
    "    odd = abs(y) < 16777216.0 && fract(y * 0.5) != 0.0;\n"
    "  }\n"
    "  float r;\n"
    "  if (ax == 0.0) r = y < 0.0 ? uintBitsToFloat(0x7f800000u) : 0.0;\n"
    "  else if (isinf(ax)) r = y < 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);\n"
    "  else if (isinf(y)) r = (ax > 1.0) == (y > 0.0) ? uintBitsToFloat(0x7f800000u) : 0.0;\n"
    "  else r = pow(ax, y);\n"
    "  return odd ? -r : r;\n"
    "}\n";

/* ---- the GLSL dialect ------------------------------------------------------------ */

static const char *glsl_value_type(const render_ctx *r, kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F32: return "float";
    case KILN_DTYPE_I64: return r->idx64 ? "int64_t" : "int";
    case KILN_DTYPE_U64: return r->idx64 ? "uint64_t" : NULL;
    case KILN_DTYPE_I32:
    case KILN_DTYPE_I16:
    case KILN_DTYPE_I8:
    case KILN_DTYPE_U16:
    case KILN_DTYPE_U8: return "int";
    case KILN_DTYPE_U32: return "uint";
    case KILN_DTYPE_BOOL: return "bool";
    default: return NULL;
  }
}

/* Element type of a buffer's array, NULL if the renderer cannot read it. */
static const char *glsl_array_type(const render_ctx *r, kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F32: return is_fp16(r) ? "float16_t" : "float";
    case KILN_DTYPE_I32: return "int";
    case KILN_DTYPE_U32: return "uint";
    case KILN_DTYPE_I64: return r->idx64 ? "int64_t" : "int";
    case KILN_DTYPE_U64: return r->idx64 ? "uint64_t" : NULL;
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_U8:
    case KILN_DTYPE_I8:
    case KILN_DTYPE_U16:
    case KILN_DTYPE_I16: return "uint";
    default: return NULL;
  }
}

static void glsl_int_literal(const render_ctx *r, kiln_dtype dt, int64_t v, char *buf, size_t n) {
  bool wide = r->idx64 && (dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_U64);
  if (dt == KILN_DTYPE_BOOL) snprintf(buf, n, "%s", v ? "true" : "false");
  else if (dt == KILN_DTYPE_U32) snprintf(buf, n, "%lluu", (unsigned long long)(uint32_t)v);
  else if (dt == KILN_DTYPE_U64 && wide) snprintf(buf, n, "%lluul", (unsigned long long)v);
  else if (wide && v == INT64_MIN) snprintf(buf, n, "(-9223372036854775807l - 1l)");
  else if (!wide && v == INT32_MIN) snprintf(buf, n, "(-2147483647 - 1)");
  else if (v < 0) snprintf(buf, n, "(%lld%s)", (long long)v, wide ? "l" : "");
  else snprintf(buf, n, "%lld%s", (long long)v, wide ? "l" : "");
}

/* A shape-dependent index integer (an extent, stride, offset, bound) as
 * text: `KS<id>`, a specialization constant of the caller's list, when the
 * render has one and the value is a 32-bit int other than -1, 0 and 1
 * (those mostly decide structure: an absent stride, a first element);
 * else the literal. 64-bit index arithmetic keeps literals: its constants
 * need not fit an int. */
static void index_text(const render_ctx *r, int64_t v, char *buf, size_t n) {
  glsl_spec_use *sp = glsl_of(r)->sp;
  if (!sp || r->idx64 || v < INT32_MIN || v > INT32_MAX || (v >= -1 && v <= 1)) {
    glsl_int_literal(r, KILN_DTYPE_I64, v, buf, n);
    return;
  }
  int id = kiln_glsl_spec_intern(sp->spec, (int32_t)v);
  if (id < 0) { /* out of memory: spec->oom fails the render; keep the text valid meanwhile */
    glsl_int_literal(r, KILN_DTYPE_I64, v, buf, n);
    return;
  }
  bool seen = false;
  for (int i = 0; i < sp->n && !seen; i++) seen = sp->ids[i] == id;
  if (!seen) {
    if (sp->n == sp->cap) {
      int cap = sp->cap ? 2 * sp->cap : 16;
      int *grown = realloc(sp->ids, (size_t)cap * sizeof *grown);
      if (!grown) sp->oom = true;
      else {
        sp->ids = grown;
        sp->cap = cap;
      }
    }
    if (sp->n < sp->cap) sp->ids[sp->n++] = id;
  }
  snprintf(buf, n, "KS%d", id);
}

/* The same as a uint operand (the dispatch arithmetic on gl_*ID is unsigned). */
static void index_text_u(const render_ctx *r, int64_t v, char *buf, size_t n) {
  char t[32]; /* "KS<id>" or a literal: short */
  index_text(r, v, t, sizeof t);
  if (t[0] == 'K') snprintf(buf, n, "uint(%s)", t);
  else snprintf(buf, n, "%lluu", (unsigned long long)v);
}

/* The dialect's hook: index constants (I64) of the expressions may become
 * specialization constants; values of other types (data, masks, bools)
 * stay literals. */
static void glsl_int_hook(const render_ctx *r, kiln_dtype dt, int64_t v, char *buf, size_t n) {
  if (dt == KILN_DTYPE_I64) index_text(r, v, buf, n);
  else glsl_int_literal(r, dt, v, buf, n);
}

/* Appends `layout(constant_id = N) const int KSN = 1;` for every constant
 * the render used, in id order (the default 1 never divides by zero; the
 * real value comes with the pipeline). */
static void declare_spec(const glsl_spec_use *sp, kiln_strbuf *s) {
  int last = INT32_MIN;
  for (int k = 0; k < sp->n; k++) { /* selection by id: a handful of constants */
    int next = INT32_MAX;
    for (int i = 0; i < sp->n; i++)
      if (sp->ids[i] > last && sp->ids[i] < next) next = sp->ids[i];
    kiln_strbuf_printf(s, "layout(constant_id = %d) const int KS%d = 1;\n", next, next);
    last = next;
  }
}

/* The status of the render's constant list: out of memory if anything failed to grow. */
static kiln_status_t spec_status(const glsl_spec_use *sp) {
  return sp && (sp->oom || sp->spec->oom) ? KILN_OOM() : NULL;
}

static void glsl_float_literal(const render_ctx *r, kiln_dtype dt, double v, char *buf, size_t n) {
  (void)r;
  (void)dt;
  float fv = (float)v; /* f32 is all the dialect computes in; 9 digits round-trip it */
  if (isnan(fv)) snprintf(buf, n, "uintBitsToFloat(0x7fc00000u)");
  else if (isinf(fv)) snprintf(buf, n, "uintBitsToFloat(%s)", fv < 0 ? "0xff800000u" : "0x7f800000u");
  else if (fv < 0) snprintf(buf, n, "(%.9e)", (double)fv);
  else snprintf(buf, n, "%.9e", (double)fv);
}

/* lower.c's C names -> GLSL builtins or the helpers above. */
static const char *glsl_call_name(const char *fn) {
  static const char *const map[][2] = {
      {"kiln_expf", "exp"},           {"expf", "exp"},
      {"logf", "kiln_logf"},          {"sqrtf", "kiln_sqrtf"},
      {"kiln_sigmoidf", "kiln_sigmoidf"}, {"kiln_tanhf", "kiln_tanhf"},
      {"tanhf", "kiln_tanhf"},        {"kiln_erff", "kiln_erff"},
      {"erff", "kiln_erff"},          {"kiln_softplusf", "kiln_softplusf"},
      {"kiln_geluf", "kiln_geluf"},   {"kiln_gelu_tanhf", "kiln_gelu_tanhf"},
      {"floorf", "floor"},            {"ceilf", "ceil"},
      {"truncf", "trunc"},            {"nearbyintf", "roundEven"},
      {"rintf", "roundEven"},         {"sinf", "kiln_sinf"},
      {"cosf", "kiln_cosf"},          {"powf", "kiln_powf"},
      {"kiln_logf", "kiln_logf"},     {"kiln_powf_pos", "kiln_powf"},
      {"fabsf", "abs"},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(map); i++)
    if (!strcmp(map[i][0], fn)) return map[i][1];
  return NULL;
}

/* A subscript: SPIR-V arrays take 32-bit indices (a bindable range is
 * below 4 GiB anyway), so 64-bit index arithmetic ends in uint(). */
static void subscript(const render_ctx *r, const char *fmt, const char *i, char *buf, size_t n) {
  char inner[128];
  snprintf(inner, sizeof inner, fmt, i);
  if (r->idx64) snprintf(buf, n, "uint(%s)", inner);
  else snprintf(buf, n, "%s", inner);
}

/* An 8- or 16-bit element: four or two to a uint word (the buffer is
 * declared uint[]); the word, then the element's lane within it. */
static void packed_load(render_ctx *r, kiln_dtype dt, int k, const char *i) {
  bool wide = dt == KILN_DTYPE_U16 || dt == KILN_DTYPE_I16;
  int bits = wide ? 16 : 8, lane = wide ? 1 : 3;
  char w[160];
  subscript(r, wide ? "%s >> 1" : "%s >> 2", i, w, sizeof w);
  const char *p = r->buf_prefix;
  if (dt == KILN_DTYPE_I8 || dt == KILN_DTYPE_I16) {
    kiln_strbuf_printf(r->s, "bitfieldExtract(int(%s%d[%s]), int(%s & %d) * %d, %d)", p, k, w, i, lane, bits, bits);
    return;
  }
  bool is_bool = dt == KILN_DTYPE_BOOL;
  kiln_strbuf_printf(r->s, "%s(%s%d[%s] >> (int(%s & %d) * %d)) & %s%s", is_bool ? "(" : "int(", p, k, w, i, lane, bits,
                     wide ? "0xffffu" : "0xffu", is_bool ? ") != 0u" : ")");
}

static void glsl_load(render_ctx *r, const te_expr *e, const char *i) {
  kiln_strbuf *s = r->s;
  const char *p = r->buf_prefix;
  int k = e->buf;
  char w[160];
  switch (te_get_buffer(r->b, k)->dtype) {
    case KILN_DTYPE_F32:
      if (is_fp16(r)) { /* half in memory, float in registers (exact) */
        subscript(r, "%s", i, w, sizeof w);
        kiln_strbuf_printf(s, "float(%s%d[%s])", p, k, w);
        break;
      }
      /* fall through */
    case KILN_DTYPE_I32:
    case KILN_DTYPE_U32:
    case KILN_DTYPE_U64:
      subscript(r, "%s", i, w, sizeof w);
      kiln_strbuf_printf(s, "%s%d[%s]", p, k, w);
      break;
    case KILN_DTYPE_I64:
      subscript(r, r->idx64 ? "%s" : "2 * %s", i, w, sizeof w); /* 32-bit: the low word */
      kiln_strbuf_printf(s, "%s%d[%s]", p, k, w);
      break;
    case KILN_DTYPE_BOOL:
    case KILN_DTYPE_U8:
    case KILN_DTYPE_I8:
    case KILN_DTYPE_U16:
    case KILN_DTYPE_I16: packed_load(r, te_get_buffer(r->b, k)->dtype, k, i); break;
    default: render_fail(r, "buffer of dtype %s", kiln_dtype_name(te_get_buffer(r->b, k)->dtype));
  }
}

static void glsl_minmax(render_ctx *r, const te_expr *e, const char *acc, const char *x, const char *cmp) {
  /* NaN propagates, as numpy's maximum does (GLSL's max may drop it). */
  if (kiln_dtype_is_float(e->dtype))
    kiln_strbuf_printf(r->s, "(isnan(%s) || %s %s %s) ? %s : %s", x, x, cmp, acc, x, acc);
  else kiln_strbuf_printf(r->s, "(%s %s %s) ? %s : %s", x, cmp, acc, x, acc);
}

static bool glsl_special(render_ctx *r, const te_expr *e, const char *a, const char *b) {
  kiln_strbuf *s = r->s;
  switch (e->op) {
    case TE_LOAD: glsl_load(r, e, a); return true;
    case TE_ABS: kiln_strbuf_printf(s, "abs(%s)", a); return true;
    case TE_CAST: kiln_strbuf_printf(s, "%s(%s)", glsl_value_type(r, e->dtype), a); return true;
    case TE_MAX: glsl_minmax(r, e, b, a, ">"); return true;
    case TE_MIN: glsl_minmax(r, e, b, a, "<"); return true;
    case TE_MOD:
      /* C's truncating remainder (GLSL's % on negatives is undefined). */
      if (kiln_dtype_is_float(e->dtype)) render_fail(r, "float remainder");
      else kiln_strbuf_printf(s, "%s - (%s / %s) * %s", a, a, b, b);
      return true;
    default: return false;
  }
}

static void glsl_reduce_init(const render_ctx *r, const te_expr *red, char *buf, size_t n) {
  if (kiln_dtype_is_float(red->dtype)) {
    double v = red->rop == TE_RSUM ? 0.0 : red->rop == TE_RPROD ? 1.0 : red->rop == TE_RMAX ? -INFINITY : INFINITY;
    glsl_float_literal(r, red->dtype, v, buf, n);
    return;
  }
  bool wide = r->idx64 && (red->dtype == KILN_DTYPE_I64 || red->dtype == KILN_DTYPE_U64);
  int64_t lo = wide ? INT64_MIN : INT32_MIN, hi = wide ? INT64_MAX : INT32_MAX;
  int64_t v = red->rop == TE_RSUM ? 0 : red->rop == TE_RPROD ? 1 : red->rop == TE_RMAX ? lo : hi;
  glsl_int_literal(r, red->dtype, v, buf, n);
}

static void glsl_reduce_combine(render_ctx *r, const te_expr *red, const char *acc, const char *x) {
  switch (red->rop) {
    case TE_RSUM: kiln_strbuf_printf(r->s, "%s += %s;\n", acc, x); return;
    case TE_RPROD: kiln_strbuf_printf(r->s, "%s *= %s;\n", acc, x); return;
    case TE_RMAX:
    case TE_RMIN:
      kiln_strbuf_printf(r->s, "%s = ", acc);
      glsl_minmax(r, red, acc, x, red->rop == TE_RMAX ? ">" : "<");
      kiln_strbuf_puts(r->s, ";\n");
      return;
  }
}

static void glsl_store(render_ctx *r, const kiln_loop_nest *nest, const char *lin, const te_expr *value);

static const render_dialect glsl_dialect = {
    .what = "GLSL renderer",
    .value_type = glsl_value_type,
    .int_literal = glsl_int_hook,
    .float_literal = glsl_float_literal,
    .call_name = glsl_call_name,
    .special = glsl_special,
    .reduce_init = glsl_reduce_init,
    .reduce_combine = glsl_reduce_combine,
    .store = glsl_store,
    .convert_operands = true,
};

/* ---- analysis ---------------------------------------------------------------------- */

int kiln_glsl_spec_add(kiln_glsl_spec *s, int32_t v) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    int32_t *grown = realloc(s->values, (size_t)cap * sizeof *grown);
    if (!grown) {
      s->oom = true;
      return -1;
    }
    s->values = grown;
    s->cap = cap;
  }
  s->values[s->n] = v;
  return s->first_id + s->n++;
}

int kiln_glsl_spec_intern(kiln_glsl_spec *s, int32_t v) {
  for (int i = 0; i < s->n; i++)
    if (s->values[i] == v) return s->first_id + i;
  return kiln_glsl_spec_add(s, v);
}

void kiln_glsl_spec_free(kiln_glsl_spec *s) {
  if (!s) return;
  free(s->values);
  s->values = NULL;
  s->n = s->cap = 0;
  s->oom = false;
}

kiln_glsl_options kiln_glsl_options_default(void) {
  kiln_glsl_options o = {64, false, 65535, false, NULL, 0};
  return o;
}

int kiln_glsl_parallel_dims(const kiln_loop_nest *nest) {
  int pd = nest->rank;
  for (int i = 0; i < nest->n_sites; i++)
    if (!nest->sites[i].owner && nest->sites[i].level + 1 < pd) pd = nest->sites[i].level + 1;
  return pd < 0 ? 0 : pd;
}

kiln_status_t kiln_schedule_glsl(te_builder *b, const te_tensor *root, int out_buf, kiln_loop_nest *out) {
  kiln_loop_schedule s = kiln_loop_schedule_default();
  s.parallel_dims = 0; /* keeps every reduction at its natural level */
  KILN_TRY(kiln_schedule_kernel(b, root, out_buf, &s, out));
  out->parallel_dims = kiln_glsl_parallel_dims(out);
  out->grain = 1;
  return NULL;
}

static kiln_status_t choose_index_width(const te_builder *b, const kiln_loop_nest *nest, bool allow64, bool *out64) {
  bool oom = false;
  bool ok = kiln_loop_nest_fits_int32(b, nest, true, &oom);
  if (oom) return KILN_OOM();
  *out64 = !ok;
  if (!ok && !allow64)
    return kiln_error(KILN_UNSUPPORTED, "GLSL renderer: indices beyond 2^31-1 need 64-bit integers (shaderInt64)");
  return NULL;
}

/* ---- declarations and stores --------------------------------------------------------- */

/* Buffer i at binding i; a templated nest whose copies load vec4s gets a
 * vec4 view of those buffers on the same binding. */
static kiln_status_t declare_buffers(render_ctx *r, const kiln_loop_nest *nest, int out_buf) {
  const te_builder *b = r->b;
  int vec4_bufs[2] = {-1, -1};
  for (int w = 0; w < 2 && nest->tiles.n_red && !is_fp16(r); w++) vec4_bufs[w] = render_tiles_vec4_buffer(nest, w);
  for (int i = 0; i < te_buffer_count(b); i++) {
    const te_buffer *buf = te_get_buffer(b, i);
    const char *ty = glsl_array_type(r, buf->dtype);
    if (!ty) return kiln_error(KILN_UNSUPPORTED, "GLSL renderer: buffer of dtype %s", kiln_dtype_name(buf->dtype));
    /* No `restrict`: an elementwise kernel may write over an input that dies with it. */
    kiln_strbuf_printf(r->s, "layout(std430, set = 0, binding = %d) %sbuffer B%d { %s %s%d[]; };\n", i,
                       i == out_buf ? "" : "readonly ", i, ty, r->buf_prefix, i);
    if (i != out_buf && (vec4_bufs[0] == i || vec4_bufs[1] == i))
      kiln_strbuf_printf(r->s, "layout(std430, set = 0, binding = %d) readonly buffer B%dv { vec4 %s%dv[]; };\n", i, i,
                         r->buf_prefix, i);
  }
  return NULL;
}

/* The dialect's store: `value` at linear index text `lin` of the output. */
static void glsl_store(render_ctx *r, const kiln_loop_nest *nest, const char *lin, const te_expr *value) {
  char idx[1100];
  snprintf(idx, sizeof idx, r->idx64 ? "uint(%s)" : "%s", lin); /* as subscript() does: the index may be long */
  kiln_dtype odt = te_get_buffer(r->b, nest->out_buf)->dtype;
  char val[64];
  render_name_of(r, value, val, sizeof val);
  const char *ty = glsl_value_type(r, odt);
  const char *vty = glsl_value_type(r, value->dtype);
  bool conv = ty && vty && strcmp(ty, vty);
  render_indent(r);
  switch (odt) {
    case KILN_DTYPE_F32:
      if (is_fp16(r)) { /* round to half (float16_t of a float: one conversion) */
        kiln_strbuf_printf(r->s, "%s%d[%s] = float16_t(%s%s%s%s);\n", r->buf_prefix, nest->out_buf, idx,
                           conv ? ty : "", conv ? "(" : "", val, conv ? ")" : "");
        break;
      }
      /* fall through */
    case KILN_DTYPE_I32:
    case KILN_DTYPE_U32:
    case KILN_DTYPE_U64:
      kiln_strbuf_printf(r->s, "%s%d[%s] = %s%s%s%s;\n", r->buf_prefix, nest->out_buf, idx, conv ? ty : "",
                         conv ? "(" : "", val, conv ? ")" : "");
      break;
    case KILN_DTYPE_I64:
      if (r->idx64) {
        kiln_strbuf_printf(r->s, "%s%d[%s] = %s%s%s%s;\n", r->buf_prefix, nest->out_buf, idx, conv ? ty : "",
                           conv ? "(" : "", val, conv ? ")" : "");
      } else { /* low word, then the sign */
        kiln_strbuf_printf(r->s, "{ const int o = %s, w = %s%s%s%s; %s%d[2 * o] = w; %s%d[2 * o + 1] = w >> 31; }\n", idx,
                           conv ? ty : "", conv ? "(" : "", val, conv ? ")" : "", r->buf_prefix, nest->out_buf,
                           r->buf_prefix, nest->out_buf);
      }
      break;
    default: render_fail(r, "output of dtype %s", kiln_dtype_name(odt)); break;
  }
}

/* Row-major linear index of the output from the loop variables. */
static void output_index(render_ctx *r, const kiln_loop_nest *nest, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  if (nest->rank == 0) {
    snprintf(buf, n, "0");
    return;
  }
  for (int l = 0; l < nest->rank && len < n; l++) {
    if (l == 0) len += (size_t)snprintf(buf + len, n - len, "v%d", nest->vars[l]);
    else {
      char ext[48], prev[1024];
      index_text(r, nest->extents[l], ext, sizeof ext);
      snprintf(prev, sizeof prev, "%s", buf);
      len = (size_t)snprintf(buf, n, "(%s) * %s + v%d", prev, ext, nest->vars[l]);
    }
  }
}

/* `const T vN = (f / inner) % extent;` for loops [from, to) of the flattened index `f`. */
static void unflatten(render_ctx *r, const kiln_loop_nest *nest, int from, int to, const char *f) {
  const char *ty = glsl_value_type(r, KILN_DTYPE_I64);
  for (int i = to - 1; i >= from; i--) {
    int64_t inner = 1;
    for (int k = i + 1; k < to; k++) inner *= nest->extents[k];
    char in[48], ext[48] = "";
    index_text(r, inner, in, sizeof in);
    if (i != from) index_text(r, nest->extents[i], ext, sizeof ext); /* only what the source uses becomes a constant */
    render_indent(r);
    if (i == from) kiln_strbuf_printf(r->s, "const %s v%d = %s / %s;\n", ty, nest->vars[i], f, in);
    else kiln_strbuf_printf(r->s, "const %s v%d = (%s / %s) %% %s;\n", ty, nest->vars[i], f, in, ext);
  }
}

/* The extensions a float16_t buffer needs (only StorageBuffer16BitAccess
 * ends up in the SPIR-V while nothing computes in half). */
static const char glsl_fp16_extensions[] = "#extension GL_EXT_shader_16bit_storage : require\n"
                                           "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n";

static void header(render_ctx *r, const char *name, uint32_t wg, bool subgroups, bool unroll) {
  /* With specialization constants the name stays out: it would make the
   * sources of same-structure kernels differ. */
  if (glsl_of(r)->sp) kiln_strbuf_puts(r->s, "#version 450\n");
  else kiln_strbuf_printf(r->s, "#version 450\n/* kiln kernel %s */\n", name);
  if (is_fp16(r)) kiln_strbuf_puts(r->s, glsl_fp16_extensions);
  if (r->idx64) kiln_strbuf_puts(r->s, "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n");
  if (subgroups)
    kiln_strbuf_puts(r->s, "#extension GL_KHR_shader_subgroup_arithmetic : require\n"
                           "#extension GL_KHR_shader_subgroup_vote : require\n");
  if (unroll) kiln_strbuf_puts(r->s, "#extension GL_EXT_control_flow_attributes : require\n");
  kiln_strbuf_printf(r->s, "layout(local_size_x = %u) in;\n", wg);
}

/* ---- the group templates' GLSL ------------------------------------------------------ */

/* Four f32s through the buffer's vec4 view (declared beside it by
 * declare_buffers for the template's copies); not with half storage. */
static bool glsl_vec4_load(render_ctx *r, int buf, const char *index, char *out, size_t n) {
  if (is_fp16(r)) return false;
  snprintf(out, n, "%s%dv[(%s) >> 2]", r->buf_prefix, buf, index);
  return true;
}

/* Cooperative rows with GL_KHR_shader_subgroup_arithmetic: each
 * subgroup's combination, then the subgroups' through kiln_red. */
static void glsl_subgroup_combine(render_ctx *r, const te_expr *red, const char *acc, int threads) {
  static const char *const op[] = {"subgroupAdd", "subgroupMul", "subgroupMax", "subgroupMin"};
  render_line(r, "float s%d = %s(%s);", red->id, op[red->rop], acc);
  if (red->rop == TE_RMAX || red->rop == TE_RMIN) /* subgroupMax/Min leave NaN undefined; numpy propagates it */
    render_line(r, "if (subgroupAny(isnan(%s))) s%d = uintBitsToFloat(0x7fc00000u);", acc, red->id);
  render_line(r, "if (gl_SubgroupInvocationID == 0u) kiln_red[gl_SubgroupID] = s%d;", red->id);
  render_line(r, "barrier();");
  render_line(r, "float q%d = kiln_red[0];", red->id);
  render_indent(r);
  kiln_strbuf_puts(r->s, "for (uint k = 1u; k < gl_NumSubgroups; k++) ");
  render_trips_enter(r, threads); /* the subgroups: at most one per thread */
  char q[32];
  snprintf(q, sizeof q, "q%d", red->id);
  glsl_reduce_combine(r, red, q, "kiln_red[k]");
  render_trips_leave(r);
  render_line(r, "const float r%d = q%d;", red->id, red->id);
}

/* main() of a nest with tiles or cooperative rows: the group's index is
 * flattened from the x and y of the dispatch (gx groups wide). */
static void template_main(render_ctx *r, const kiln_loop_nest *nest, uint32_t gx) {
  char group_id[160], span[48];
  if (r->idx64) {
    snprintf(group_id, sizeof group_id, "int64_t(uint64_t(gl_WorkGroupID.y) * %uul + uint64_t(gl_WorkGroupID.x))", gx);
  } else {
    index_text_u(r, gx, span, sizeof span);
    snprintf(group_id, sizeof group_id, "int(gl_WorkGroupID.y * %s + gl_WorkGroupID.x)", span);
  }
  /* The dispatch may be split over x and y with a few groups to spare. */
  render_gpu_dialect g = {group_id, "int(gl_LocalInvocationID.x)", "shared", "barrier();", false, "vec4", "%s[%s][%s]",
                          NULL, NULL, glsl_vec4_load, glsl_subgroup_combine, "[[unroll]] "};
  if (is_fp16(r) && glsl_of(r)->fp16_arith) {
    g.half_type = "float16_t";
    g.half4_type = "f16vec4";
  }
  r->indent = 0;
  render_gpu_locals(r, nest, &g);
  kiln_strbuf_puts(r->s, "void main() {\n");
  r->indent = 1;
  if (nest->tiles.n_red) render_contraction_tiles(r, nest, &g);
  else render_cooperative_rows(r, nest, &g);
  kiln_strbuf_puts(r->s, "}\n");
}

/* ---- entry points ---------------------------------------------------------------------- */

static void plain_main(render_ctx *r, const kiln_loop_nest *nest, int64_t total, uint32_t wg, uint32_t gx) {
  int pd = nest->parallel_dims;
  uint64_t span = (uint64_t)gx * wg;
  kiln_strbuf_puts(r->s, "void main() {\n");
  if (r->idx64)
    kiln_strbuf_printf(r->s,
                       "  const uint64_t gid = uint64_t(gl_GlobalInvocationID.y) * %lluul + uint64_t(gl_GlobalInvocationID.x);\n"
                       "  if (gid >= %lldul) return;\n  const int64_t f = int64_t(gid);\n",
                       (unsigned long long)span, (long long)total);
  else {
    char sp[48], lim[48];
    index_text_u(r, (int64_t)span, sp, sizeof sp);
    index_text_u(r, total, lim, sizeof lim);
    kiln_strbuf_printf(r->s,
                       "  const uint gid = gl_GlobalInvocationID.y * %s + gl_GlobalInvocationID.x;\n"
                       "  if (gid >= %s) return;\n  const int f = int(gid);\n",
                       sp, lim);
  }
  r->indent = 0;
  render_open_scope(r);
  render_emit_sites(r, nest, -1, NULL);
  unflatten(r, nest, 0, pd, "f");
  for (int l = 0; l < pd; l++) render_emit_sites(r, nest, l, NULL);
  char idx[1024];
  output_index(r, nest, idx, sizeof idx);
  if (nest->jam_inner > 1) { /* the innermost loop's copies, each stored at its index */
    for (int j = 0; j < nest->jam_inner; j++) {
      render_ensure(r, nest->tile_values[j]);
      render_line(r, "{");
      render_open_scope(r);
      render_line(r, "const %s v%d = %d;", glsl_value_type(r, KILN_DTYPE_I64), nest->vars[nest->rank - 1], j);
      glsl_store(r, nest, idx, nest->tile_values[j]);
      render_close_scope(r);
      render_line(r, "}");
    }
  } else {
    for (int l = pd; l < nest->rank; l++) {
      render_loop_open(r, nest->vars[l], nest->extents[l]);
      render_emit_sites(r, nest, l, NULL);
    }
    render_ensure(r, nest->value);
    glsl_store(r, nest, idx, nest->value);
    for (int l = nest->rank - 1; l >= pd; l--) render_loop_close(r);
  }
  render_close_scope(r);
  kiln_strbuf_puts(r->s, "}\n");
}

kiln_status_t kiln_render_glsl(const te_builder *b, const kiln_loop_nest *nest, const char *name,
                               const kiln_glsl_options *opts, kiln_strbuf *src, uint32_t out_groups[3]) {
  kiln_glsl_options o = opts ? *opts : kiln_glsl_options_default();
  if (!o.workgroup_size) o.workgroup_size = 64;
  if (!o.max_groups) o.max_groups = 65535;
  int pd = nest->parallel_dims;
  if (pd < 0 || pd > nest->rank) return kiln_error(KILN_INTERNAL, "GLSL renderer: %d parallel dims of %d", pd, nest->rank);
  if (nest->out_buf < 0 || nest->out_buf >= te_buffer_count(b))
    return kiln_error(KILN_INTERNAL, "GLSL renderer: output buffer %d of %d", nest->out_buf, te_buffer_count(b));
  /* The group size: the template's (tiles, cooperative rows), else the option. */
  bool templated = nest->tiles.n_red || nest->rows.threads;
  uint32_t wg = templated ? (uint32_t)kiln_loop_nest_group_size(nest) : o.workgroup_size;
  bool subgroups = nest->rows.threads && nest->rows.subgroups;
  glsl_ctx g;
  KILN_TRY(render_init(&g.r, &glsl_dialect, b, src));
  g.fp16 = o.fp16;
  g.fp16_arith = o.fp16 && o.fp16_arith;
  glsl_spec_use sp = {o.spec, NULL, 0, 0, false};
  g.sp = o.spec ? &sp : NULL;
  render_ctx *r = &g.r;
  r->max_trips = o.max_loop_trips;
  kiln_status_t st = choose_index_width(b, nest, o.int64, &r->idx64);
  if (!st && nest->tiles.n_red && r->idx64)
    st = kiln_error(KILN_UNSUPPORTED, "GLSL renderer: the contraction template with 64-bit indices");
  if (!st) st = kiln_status_annotate(kiln_loop_nest_dispatch(nest, (int)wg, o.max_groups, out_groups), "GLSL renderer");
  if (!st) {
    header(r, name, wg, subgroups, nest->tiles.n_red > 0); /* the contraction template's [[unroll]] */
    st = declare_buffers(r, nest, nest->out_buf);
  }
  if (!st) {
    kiln_strbuf_puts(src, glsl_helpers);
    /* With constants, main goes to `body` first: the declarations before
     * it name what it used. */
    kiln_strbuf body = {0};
    if (g.sp) r->s = &body;
    if (templated) template_main(r, nest, out_groups[0]);
    else plain_main(r, nest, kiln_loop_nest_threads(nest), wg, out_groups[0]);
    r->s = src;
    if (r->bad) st = kiln_error(KILN_UNSUPPORTED, "GLSL renderer: cannot express %s in kernel %s", r->why, name);
    if (!st) st = spec_status(g.sp);
    if (!st && g.sp) {
      st = kiln_strbuf_status(&body);
      declare_spec(g.sp, src);
      if (body.data) kiln_strbuf_puts(src, body.data);
    }
    kiln_strbuf_free(&body);
  }
  free(sp.ids);
  render_free(r);
  return st ? st : kiln_strbuf_status(src);
}
