/* The cpu kernel interpreter (interp.h): a tensor expression flattened
 * into instructions, evaluated block by block with the lane loops of
 * lanes.h. */
#include "devices/cpu/interp/interp.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/interp/lanes.h"

#define L KILN_LANES
#define SLOT_BYTES ((size_t)L * 8) /* one value: up to L lanes of up to 8 bytes */
/* What evaluating one instruction costs beyond its lane loop, in lanes
 * of work (for choosing between evaluation orders). */
#define IK_OVERHEAD 32
#define IK_GATHER_COST 4 /* a gathered load, in plain instructions */
#define IK_MEMO_KEY 64 /* int64s of a reduction's rows key (ik_memo) */
enum { MOVE_UNTRIED, MOVE_READY, MOVE_NONE };
#define MOVE_TAG_SHIFT 48 /* a probe's tagged index: leaf + 1 above it, the element's index below */

/* ---- the program ----------------------------------------------------------------- */

/* One node of the expression, operands already of the types it computes
 * in (conversions made explicit, as GLSL's renderer does). */
typedef struct ik_ins {
  te_op op;
  kiln_dtype dt;    /* result */
  kiln_dtype odt;   /* what the operands are: compare type, CAST's source */
  int a, b, c;      /* operand instructions, -1 */
  int var;          /* TE_VAR; TE_REDUCE: its variable */
  int buf;          /* TE_LOAD */
  int fn;           /* TE_CALL1/2: kiln_lanes_fn */
  int aff;          /* TE_LOAD: its index as aff_c0 + sum of terms coef * (a variable, or an instruction's value:
                       k->aff_var[t] = var, or -1 - instruction; a variable divided by aff_div[t] > 0, or its
                       remainder by -aff_div[t] where negative); -1: operand a is the index */
  int n_aff;
  int64_t aff_c0;
  int64_t extent;   /* TE_REDUCE */
  te_reduce_op rop;
  int list, n_list; /* TE_REDUCE: its body's evaluation list (k->lists) */
  unsigned char bytes[8]; /* TE_CONST's value; TE_REDUCE's initial value (dt's bytes) */
  int vars, n_vars; /* free index variables (k->var_list) */
  int memo;         /* TE_REDUCE: its slot for the last rows' sums (ik_memo), -1 */
} ik_ins;

struct kiln_interp_kernel {
  ik_ins *ins;
  int n_ins;
  int *lists; /* evaluation lists: instruction indices, each operand before its user */
  int n_lists_total;
  int *var_list;
  int *aff_var;
  int64_t *aff_coef, *aff_div;
  int n_vars;       /* te variables, then the merged reductions' (lower_reduce) */
  int n_bufs;       /* te buffers (the state slot follows them) */
  kiln_dtype *buf_dtype;
  int64_t *buf_numel; /* elements of each buffer (a movement's probe checks its indices against them) */
  int value, value_list, n_value_list; /* the element (of the output's dtype) and its list */
  int sum;          /* tensorized: the instruction of the call's sum (the epilogue reads it from the tile) */
  /* the nest */
  int rank;
  int64_t extents[KILN_MAX_RANK];
  int loop_var[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK]; /* row-major element stride of each output loop */
  int out_buf;
  int64_t parallel_total, grain, inner; /* parallel iterations, chunk, elements per iteration */
  int vary_level;   /* loops at and below it vary within a block; above it, one value per block */
  int64_t row_len;  /* elements of one value of the loops above vary_level */
  int64_t row_run;  /* a block ends where one of these runs of elements does (the rows of a hoisted reduction) */
  kiln_gemm_call gemm;  /* the nest's tensorized call, if any (gemm.sum not used: it points into the builder) */
  kiln_conv_call conv;  /* conv.tag points at conv_tag */
  te_conv_tag conv_tag;
  kiln_pool_call pool;  /* pool.tag points at pool_tag */
  te_pool_tag pool_tag;
  kiln_resample_call resample; /* resample.tag points at resample_tag */
  te_resample_tag resample_tag;
  bool has_epilogue;
  bool is_rows;         /* a row routine's kernel: nothing above is set */
  kiln_interp_rows rows;
  bool pack_b;      /* GEMM: B is a constant every batch index shares (packed once) */
  int bias_buf;     /* GEMM: the epilogue is the sum + this f32 buffer at the column (Gemm's C, a Linear's
                       bias), given to the routine as its column bias; -1: none */
  const kiln_lanes_ops *ops;
  int n_memo;
  /* A movement kernel (every output element one input element or a
   * constant, chosen by index arithmetic alone: a transpose, a concat, a
   * channel shuffle): its copies as runs, worked out at the first launch
   * by a probe of the same program (interp_move below). */
  bool move_eligible;
  bool probe;       /* this is such a probe: loads give their element's tagged index, not its value */
  pthread_mutex_t move_lock;
  _Atomic int move_state; /* MOVE_* */
  struct ik_move *move;
  size_t *slot_off; /* per instruction: its slot in the state's values, L lanes of its dtype (at least 4
                       bytes each: slots of 4-byte lanes packed tight keep a kernel's values in L1) */
  size_t slot_bytes;
};

const char *kiln_interp_isa(void) { return kiln_lanes()->name; }

static bool move_check(const kiln_interp_kernel *k);
static void move_free(struct ik_move *m);

typedef struct builder {
  kiln_interp_kernel *k;
  const te_builder *b;
  int *of_expr;      /* te expr id -> instruction, -1 */
  int cap_ins, cap_vset;
  int *lists;
  int n_lists, cap_lists;
  int *var_list;
  int n_var_list, cap_var_list;
  int *aff_var;
  int64_t *aff_coef, *aff_div;
  int n_aff, cap_aff_var, cap_aff_coef, cap_aff_div;
  char *mark;        /* per instruction: in the list being built */
  signed char *holds; /* per instruction: 1 it is or reads a reduction, -1 not, 0 not known yet (holds_reduce) */
  int cap_holds;
  uint64_t *vset;    /* per instruction: free variables, words per instruction */
  int words;
  /* Two nested reductions of one kind merged into one over a new
   * variable t (lower_reduce): the outer's variable is t / the inner's
   * extent, the inner's t % it (subst_div > 0: quotient, < 0: remainder;
   * 0: not merged). Indexed by te variable. */
  int *subst_var;
  int64_t *subst_div;
  int n_extra;       /* variables made for merged reductions */
  bool no_merge;     /* a tensorized nest: its sum must stay the expression the tag names */
  const te_expr *tensorized; /* that sum (borrowed from the nest), which must lower to an instruction of its own */
  kiln_status_t st;
} builder;

static bool grow(void **p, int *cap, int need, size_t size) {
  if (need <= *cap) return true;
  int c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *n = realloc(*p, (size_t)c * size);
  if (!n) return false;
  *p = n;
  *cap = c;
  return true;
}

static int new_ins(builder *bd, const ik_ins *x) {
  kiln_interp_kernel *k = bd->k;
  if (!grow((void **)&k->ins, &bd->cap_ins, k->n_ins + 1, sizeof *k->ins) ||
      !grow((void **)&bd->vset, &bd->cap_vset, k->n_ins + 1, (size_t)bd->words * sizeof(uint64_t))) {
    bd->st = KILN_OOM();
    return -1;
  }
  int i = k->n_ins++;
  k->ins[i] = *x;
  uint64_t *s = bd->vset + (size_t)i * (size_t)bd->words;
  memset(s, 0, (size_t)bd->words * sizeof *s);
  const int ops[3] = {x->a, x->b, x->c};
  for (int j = 0; j < 3; j++)
    if (ops[j] >= 0)
      for (int w = 0; w < bd->words; w++) s[w] |= bd->vset[(size_t)ops[j] * (size_t)bd->words + (size_t)w];
  return i;
}

static uint64_t *vset_of(builder *bd, int i) { return bd->vset + (size_t)i * (size_t)bd->words; }

static void put_bytes(unsigned char *out, kiln_dtype dt, int64_t i, double f) {
  memset(out, 0, 8);
  switch (dt) {
    case KILN_DTYPE_F32: { float v = (float)f; memcpy(out, &v, 4); break; }
    case KILN_DTYPE_F64: memcpy(out, &f, 8); break;
    case KILN_DTYPE_I64: case KILN_DTYPE_U64: memcpy(out, &i, 8); break;
    case KILN_DTYPE_I32: case KILN_DTYPE_U32: { int32_t v = (int32_t)i; memcpy(out, &v, 4); break; }
    case KILN_DTYPE_I16: case KILN_DTYPE_U16: { int16_t v = (int16_t)i; memcpy(out, &v, 2); break; }
    case KILN_DTYPE_F16: { uint16_t v = kiln_f64_to_f16(f); memcpy(out, &v, 2); break; }
    case KILN_DTYPE_BF16: { uint16_t v = kiln_f64_to_bf16(f); memcpy(out, &v, 2); break; }
    case KILN_DTYPE_I8: case KILN_DTYPE_U8: case KILN_DTYPE_BOOL: { int8_t v = (int8_t)i; memcpy(out, &v, 1); break; }
    default: break;
  }
}

/* Bytes of one lane of dt (kiln_dtype_size, inlined: it is asked per block). */
static inline size_t lane_size(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F64: case KILN_DTYPE_I64: case KILN_DTYPE_U64: return 8;
    case KILN_DTYPE_F32: case KILN_DTYPE_I32: case KILN_DTYPE_U32: return 4;
    case KILN_DTYPE_I16: case KILN_DTYPE_U16: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: return 2;
    default: return 1;
  }
}

static bool has_lanes(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F32: case KILN_DTYPE_F64: case KILN_DTYPE_I64: case KILN_DTYPE_I32: case KILN_DTYPE_I16:
    case KILN_DTYPE_I8: case KILN_DTYPE_U8: case KILN_DTYPE_U16: case KILN_DTYPE_U32: case KILN_DTYPE_U64:
    case KILN_DTYPE_BOOL: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: return true; /* halves: storage only */
    default: return false;
  }
}

/* Instruction i as a value of dtype `to` (a conversion when it differs). */
static int convert(builder *bd, int i, kiln_dtype to) {
  if (i < 0 || bd->k->ins[i].dt == to) return i;
  ik_ins x = {.op = TE_CAST, .dt = to, .odt = bd->k->ins[i].dt, .a = i, .b = -1, .c = -1, .aff = -1};
  return new_ins(bd, &x);
}


static int lower_expr(builder *bd, const te_expr *e);

static kiln_status_t build_list(builder *bd, int root, int *out_start, int *out_n);

/* Whether reduction e and the one it directly holds are merged into one
 * reduction over the product of their extents (a mean over H and W, an
 * instance norm's): one reduction is evaluated in blocks along one
 * variable, two nested ones block by block of the inner for every value
 * of the outer. Only a pair whose inner holds no further reduction of
 * the kind (a chain of three merges its inner two). */
static bool merges(const builder *bd, const te_expr *e) {
  const te_expr *in = e->a;
  int64_t n;
  return in->op == TE_REDUCE && in->rop == e->rop && in->dtype == e->dtype &&
         !(in->a->op == TE_REDUCE && in->a->rop == in->rop && in->a->dtype == in->dtype) && bd->n_extra < 63 &&
         !bd->no_merge &&
         !bd->subst_div[e->var] && !bd->subst_div[in->var] && !__builtin_mul_overflow(e->extent, in->extent, &n);
}

static int lower_reduce(builder *bd, const te_expr *e) {
  int var = e->var;
  int64_t extent = e->extent;
  const te_expr *body_expr = e->a;
  if (merges(bd, e)) {
    const te_expr *in = e->a;
    var = te_var_count(bd->b) + bd->n_extra++;
    extent = e->extent * in->extent;
    bd->subst_var[e->var] = bd->subst_var[in->var] = var;
    bd->subst_div[e->var] = in->extent;
    bd->subst_div[in->var] = -in->extent;
    body_expr = in->a;
  }
  int body = convert(bd, lower_expr(bd, body_expr), e->dtype);
  if (body < 0) return -1;
  ik_ins x = {.op = TE_REDUCE, .dt = e->dtype, .odt = e->dtype, .a = body, .b = -1, .c = -1, .aff = -1,
              .var = var, .extent = extent, .rop = e->rop};
  /* The accumulator's start: the C renderer's (integer max/min from the
   * type's bounds). */
  int64_t lo = 0, hi = 0;
  bool flt = kiln_dtype_is_float(e->dtype);
  switch (e->dtype) {
    case KILN_DTYPE_I64: lo = INT64_MIN; hi = INT64_MAX; break;
    case KILN_DTYPE_I32: lo = INT32_MIN; hi = INT32_MAX; break;
    case KILN_DTYPE_I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case KILN_DTYPE_I8: lo = INT8_MIN; hi = INT8_MAX; break;
    case KILN_DTYPE_U32: hi = UINT32_MAX; break;
    case KILN_DTYPE_U16: hi = UINT16_MAX; break;
    case KILN_DTYPE_U8: hi = UINT8_MAX; break;
    case KILN_DTYPE_BOOL: hi = 1; break;
    case KILN_DTYPE_U64: hi = -1; break; /* all ones */
    default: break;
  }
  switch (e->rop) {
    case TE_RSUM: put_bytes(x.bytes, e->dtype, 0, 0.0); break;
    case TE_RPROD: put_bytes(x.bytes, e->dtype, 1, 1.0); break;
    case TE_RMAX: put_bytes(x.bytes, e->dtype, lo, flt ? -INFINITY : 0.0); break;
    case TE_RMIN: put_bytes(x.bytes, e->dtype, hi, flt ? INFINITY : 0.0); break;
  }
  int i = new_ins(bd, &x);
  if (i < 0) return -1;
  uint64_t *s = vset_of(bd, i);
  s[var / 64] &= ~(1ull << (var % 64)); /* bound here */
  int start = 0, n = 0;
  kiln_status_t st = build_list(bd, body, &start, &n);
  if (st) {
    bd->st = st;
    return -1;
  }
  bd->k->ins[i].list = start;
  bd->k->ins[i].n_list = n;
  return i;
}

/* A load's index as c0 + sum coef[t] * term t (id[t]: a variable, or
 * -1 - an instruction), gathered before it joins the kernel's tables
 * (lowering a term may lower other loads). */
typedef struct index_sum {
  int n, cap;
  int *id;
  int64_t *coef, *div;
  int64_t c0;
} index_sum;

/* e * k added to the sum: sums, differences and products with constants
 * expanded down to variables (affine terms) and other values (lowered: a
 * clamp, a division), each of those a term of its own. */
static void index_terms(builder *bd, const te_expr *e, int64_t k, index_sum *x, int depth) {
  if (bd->st) return;
  int64_t p;
  switch (e->op) {
    case TE_CONST:
      if (!__builtin_mul_overflow(k, e->i, &p) && !__builtin_add_overflow(x->c0, p, &x->c0)) return;
      break; /* overflow: the value as a term */
    case TE_ADD:
      if (depth < 32) {
        index_terms(bd, e->a, k, x, depth + 1);
        index_terms(bd, e->b, k, x, depth + 1);
        return;
      }
      break;
    case TE_SUB:
      if (depth < 32 && k != INT64_MIN) {
        index_terms(bd, e->a, k, x, depth + 1);
        index_terms(bd, e->b, -k, x, depth + 1);
        return;
      }
      break;
    case TE_MUL:
      if (depth < 32 && (e->a->op == TE_CONST || e->b->op == TE_CONST)) {
        const te_expr *c = e->b->op == TE_CONST ? e->b : e->a, *t = e->b->op == TE_CONST ? e->a : e->b;
        if (!__builtin_mul_overflow(k, c->i, &p)) {
          index_terms(bd, t, p, x, depth + 1);
          return;
        }
      }
      break;
    default: break;
  }
  int id;
  int64_t div = 0;
  if (e->op == TE_VAR) {
    id = e->var;
    if (bd->subst_div[id]) { /* a merged reduction's: the new variable's quotient or remainder */
      div = bd->subst_div[id];
      id = bd->subst_var[id];
    }
  } else if ((e->op == TE_DIV || e->op == TE_MOD) && e->dtype == KILN_DTYPE_I64 && e->a->op == TE_VAR &&
             !bd->subst_div[e->a->var] && e->b->op == TE_CONST && e->b->i > 0) {
    /* a loop variable's quotient or remainder (a reshape's unflattened
     * index): split into digits of the lanes' order where it can be */
    id = e->a->var;
    div = e->op == TE_DIV ? e->b->i : -e->b->i;
  } else {
    int i = convert(bd, lower_expr(bd, e), KILN_DTYPE_I64);
    if (i < 0) return;
    id = -1 - i;
  }
  for (int t = 0; t < x->n; t++)
    if (x->id[t] == id && x->div[t] == div) {
      x->coef[t] = (int64_t)((uint64_t)x->coef[t] + (uint64_t)k); /* wraps as the index arithmetic would */
      return;
    }
  int cap = x->cap, cap2 = x->cap;
  if (!grow((void **)&x->id, &x->cap, x->n + 1, sizeof(int)) || !grow((void **)&x->coef, &cap, x->n + 1, sizeof(int64_t)) ||
      !grow((void **)&x->div, &cap2, x->n + 1, sizeof(int64_t))) {
    bd->st = KILN_OOM();
    return;
  }
  x->id[x->n] = id;
  x->div[x->n] = div;
  x->coef[x->n++] = k;
}

static int lower_load(builder *bd, const te_expr *e) {
  ik_ins x = {.op = TE_LOAD, .dt = e->dtype, .odt = e->dtype, .a = -1, .b = -1, .c = -1, .aff = -1, .buf = e->buf};
  index_sum sum = {0};
  index_terms(bd, e->a, 1, &sum, 0);
  if (!bd->st && (!grow((void **)&bd->aff_var, &bd->cap_aff_var, bd->n_aff + sum.n + 1, sizeof(int)) ||
                  !grow((void **)&bd->aff_coef, &bd->cap_aff_coef, bd->n_aff + sum.n + 1, sizeof(int64_t)) ||
                  !grow((void **)&bd->aff_div, &bd->cap_aff_div, bd->n_aff + sum.n + 1, sizeof(int64_t))))
    bd->st = KILN_OOM();
  /* v / d * (c * d) + v % d * c is v * c (a merged reduction's variable,
   * a reshape that splits an axis and one that joins it back). */
  for (int t = 0; t < sum.n; t++) {
    if (sum.div[t] <= 0 || !sum.coef[t]) continue;
    for (int r = 0; r < sum.n; r++) {
      int64_t whole;
      if (r == t || sum.id[r] != sum.id[t] || sum.div[r] != -sum.div[t] || !sum.coef[r] ||
          __builtin_mul_overflow(sum.coef[r], sum.div[t], &whole) || whole != sum.coef[t])
        continue;
      int p = -1;
      for (int q = 0; q < sum.n; q++)
        if (sum.id[q] == sum.id[t] && !sum.div[q]) p = q;
      if (p >= 0) {
        sum.coef[p] = (int64_t)((uint64_t)sum.coef[p] + (uint64_t)sum.coef[r]);
        sum.coef[r] = 0;
      } else {
        sum.div[r] = 0;
      }
      sum.coef[t] = 0;
      break;
    }
  }
  int i = -1;
  if (!bd->st) {
    x.aff = bd->n_aff;
    x.aff_c0 = sum.c0;
    for (int t = 0; t < sum.n; t++) {
      if (!sum.coef[t]) continue;
      bd->aff_var[bd->n_aff] = sum.id[t];
      bd->aff_div[bd->n_aff] = sum.div[t];
      bd->aff_coef[bd->n_aff++] = sum.coef[t];
    }
    x.n_aff = bd->n_aff - x.aff;
    i = new_ins(bd, &x);
  }
  free(sum.id);
  free(sum.coef);
  free(sum.div);
  if (i < 0) return -1;
  uint64_t *s = vset_of(bd, i);
  for (int t = 0; t < x.n_aff; t++) {
    int id = bd->aff_var[x.aff + t];
    if (id >= 0) {
      s[id / 64] |= 1ull << (id % 64);
    } else {
      const uint64_t *o = vset_of(bd, -1 - id);
      for (int w = 0; w < bd->words; w++) s[w] |= o[w];
    }
  }
  return i;
}

/* QuantizeLinear as codegen/lower.c's compute_quant writes it: a cast to
 * I8 or U8 of select(r != r, z, min(max(r + z, lo), hi)), r =
 * nearbyintf(v / s), with the type's range for lo and hi. One
 * instruction (IK_QUANT: a = v, b = s, c = z) instead of eight passes. */
#define IK_QUANT ((te_op)(TE_REDUCE + 1))
/* Two f32 operations as one pass: a * b + c (IK_MULADD: a, b, c) and
 * min(max(a, lo), hi) with constant bounds (IK_CLAMP: a; bytes: lo, hi). */
#define IK_MULADD ((te_op)(TE_REDUCE + 2))
#define IK_CLAMP ((te_op)(TE_REDUCE + 3))

static bool is_f32_const(const te_expr *e, double v) {
  return e->op == TE_CONST && e->dtype == KILN_DTYPE_F32 && e->f == v;
}

static bool match_quant(const te_expr *e, const te_expr **v, const te_expr **s, const te_expr **z) {
  if (e->op != TE_CAST || (e->dtype != KILN_DTYPE_I8 && e->dtype != KILN_DTYPE_U8)) return false;
  double lo = e->dtype == KILN_DTYPE_I8 ? -128 : 0, hi = e->dtype == KILN_DTYPE_I8 ? 127 : 255;
  const te_expr *sel = e->a;
  if (sel->op != TE_SELECT || sel->dtype != KILN_DTYPE_F32) return false;
  const te_expr *nan = sel->a, *zz = sel->b, *mn = sel->c;
  if (nan->op != TE_NE || nan->a != nan->b) return false;
  const te_expr *r = nan->a;
  if (r->op != TE_CALL1 || r->dtype != KILN_DTYPE_F32 || !r->fn || strcmp(r->fn, "nearbyintf") ||
      r->a->op != TE_DIV || r->a->dtype != KILN_DTYPE_F32)
    return false;
  if (mn->op != TE_MIN || !is_f32_const(mn->b, hi) || mn->a->op != TE_MAX || !is_f32_const(mn->a->b, lo))
    return false;
  const te_expr *add = mn->a->a;
  if (add->op != TE_ADD || add->a != r || add->b != zz || zz->dtype != KILN_DTYPE_F32) return false;
  *v = r->a->a;
  *s = r->a->b;
  *z = zz;
  return (*v)->dtype == KILN_DTYPE_F32 && (*s)->dtype == KILN_DTYPE_F32;
}

/* An f32 min and max with constant bounds lo <= hi, in either nesting and
 * either operand order: a clamp of *x (the NaN rule is the same: a NaN x
 * comes through both). */
static bool clamp_of(const te_expr *e, const te_expr **x, float *lo, float *hi) {
  if (e->dtype != KILN_DTYPE_F32 || (e->op != TE_MIN && e->op != TE_MAX)) return false;
  const te_expr *c1 = e->a->op == TE_CONST ? e->a : e->b, *in = e->a->op == TE_CONST ? e->b : e->a;
  te_op inner = e->op == TE_MIN ? TE_MAX : TE_MIN;
  if (c1->op != TE_CONST || c1->dtype != KILN_DTYPE_F32 || in->op != inner || in->dtype != KILN_DTYPE_F32) return false;
  const te_expr *c2 = in->a->op == TE_CONST ? in->a : in->b, *v = in->a->op == TE_CONST ? in->b : in->a;
  if (c2->op != TE_CONST || c2->dtype != KILN_DTYPE_F32 || v->dtype != KILN_DTYPE_F32) return false;
  *lo = (float)(e->op == TE_MIN ? c2->f : c1->f);
  *hi = (float)(e->op == TE_MIN ? c1->f : c2->f);
  *x = v;
  return *lo <= *hi;
}

static int lower_expr(builder *bd, const te_expr *e) {
  if (bd->st) return -1;
  if (bd->of_expr[e->id] >= 0) return bd->of_expr[e->id];
  if (!has_lanes(e->dtype)) {
    bd->st = kiln_error(KILN_UNSUPPORTED, "interp: a value of dtype %s", kiln_dtype_name(e->dtype));
    return -1;
  }
  ik_ins x = {.op = e->op, .dt = e->dtype, .odt = e->dtype, .a = -1, .b = -1, .c = -1, .aff = -1};
  int i = -1;
  switch (e->op) {
    case TE_CONST:
      put_bytes(x.bytes, e->dtype, e->i, e->f);
      i = new_ins(bd, &x);
      break;
    case TE_VAR: {
      int v = bd->subst_div[e->var] ? bd->subst_var[e->var] : e->var;
      x.var = v;
      x.dt = x.odt = KILN_DTYPE_I64;
      i = new_ins(bd, &x);
      if (i >= 0) vset_of(bd, i)[v / 64] |= 1ull << (v % 64);
      if (i >= 0 && bd->subst_div[e->var]) { /* a merged reduction's: t / extent or t % extent */
        int64_t d = bd->subst_div[e->var];
        ik_ins c = {.op = TE_CONST, .dt = KILN_DTYPE_I64, .odt = KILN_DTYPE_I64, .a = -1, .b = -1, .c = -1, .aff = -1};
        put_bytes(c.bytes, KILN_DTYPE_I64, d > 0 ? d : -d, 0.0);
        int ci = new_ins(bd, &c);
        ik_ins q = {.op = d > 0 ? TE_DIV : TE_MOD, .dt = KILN_DTYPE_I64, .odt = KILN_DTYPE_I64, .a = i, .b = ci,
                    .c = -1, .aff = -1};
        i = ci < 0 ? -1 : new_ins(bd, &q);
      }
      i = convert(bd, i, e->dtype);
      break;
    }
    case TE_LOAD: i = lower_load(bd, e); break;
    case TE_REDUCE: i = lower_reduce(bd, e); break;
    case TE_NEG: case TE_ABS:
      x.a = convert(bd, lower_expr(bd, e->a), e->dtype);
      i = x.a < 0 ? -1 : new_ins(bd, &x);
      break;
    case TE_NOT:
      x.dt = x.odt = KILN_DTYPE_BOOL;
      x.a = convert(bd, lower_expr(bd, e->a), KILN_DTYPE_BOOL);
      i = x.a < 0 ? -1 : convert(bd, new_ins(bd, &x), e->dtype);
      break;
    case TE_CAST: {
      const te_expr *qv, *qs, *qz;
      if (match_quant(e, &qv, &qs, &qz)) {
        x.op = IK_QUANT;
        x.a = lower_expr(bd, qv);
        x.b = lower_expr(bd, qs);
        x.c = lower_expr(bd, qz);
        if (x.a >= 0 && x.b >= 0 && x.c >= 0) i = new_ins(bd, &x);
        break;
      }
      x.a = lower_expr(bd, e->a);
      if (x.a < 0) break;
      x.odt = bd->k->ins[x.a].dt;
      i = x.odt == e->dtype ? x.a : new_ins(bd, &x);
      break;
    }
    case TE_CALL1: case TE_CALL2:
      x.fn = kiln_lanes_fn_of(e->fn);
      if (x.fn < 0 || e->dtype != KILN_DTYPE_F32) {
        bd->st = kiln_error(KILN_UNSUPPORTED, "interp: math function %s on %s", e->fn ? e->fn : "?",
                            kiln_dtype_name(e->dtype));
        break;
      }
      x.a = convert(bd, lower_expr(bd, e->a), KILN_DTYPE_F32);
      x.b = e->op == TE_CALL2 ? convert(bd, lower_expr(bd, e->b), KILN_DTYPE_F32) : -1;
      if (x.a >= 0 && (e->op == TE_CALL1 || x.b >= 0)) i = new_ins(bd, &x);
      break;
    case TE_ADD: case TE_SUB: case TE_MUL: case TE_DIV: case TE_MOD: case TE_MIN: case TE_MAX:
      if (e->dtype == KILN_DTYPE_F32 && e->op == TE_ADD && (e->a->op == TE_MUL || e->b->op == TE_MUL)) {
        const te_expr *mul = e->a->op == TE_MUL ? e->a : e->b, *add = e->a->op == TE_MUL ? e->b : e->a;
        /* not when the product is the tensorized sum (a global pool's mean
         * is sum * 1/n): the routine writes it, the epilogue reads it */
        if (mul != bd->tensorized && mul->dtype == KILN_DTYPE_F32 && mul->a->dtype == KILN_DTYPE_F32 &&
            mul->b->dtype == KILN_DTYPE_F32 && add->dtype == KILN_DTYPE_F32) {
          x.op = IK_MULADD;
          x.a = lower_expr(bd, mul->a);
          x.b = lower_expr(bd, mul->b);
          x.c = lower_expr(bd, add);
          if (x.a >= 0 && x.b >= 0 && x.c >= 0) i = new_ins(bd, &x);
          break;
        }
      }
      const te_expr *clamped;
      float lo, hi;
      if (clamp_of(e, &clamped, &lo, &hi)) {
        x.op = IK_CLAMP;
        x.a = lower_expr(bd, clamped);
        memcpy(x.bytes, &lo, 4);
        memcpy(x.bytes + 4, &hi, 4);
        if (x.a >= 0) i = new_ins(bd, &x);
        break;
      }
      x.a = convert(bd, lower_expr(bd, e->a), e->dtype);
      x.b = convert(bd, lower_expr(bd, e->b), e->dtype);
      if (x.a >= 0 && x.b >= 0) i = new_ins(bd, &x);
      break;
    case TE_LT: case TE_LE: case TE_EQ: case TE_NE: {
      int a = lower_expr(bd, e->a), b = lower_expr(bd, e->b);
      if (a < 0 || b < 0) break;
      x.odt = te_compare_dtype(bd->k->ins[a].dt, bd->k->ins[b].dt);
      x.a = convert(bd, a, x.odt);
      x.b = convert(bd, b, x.odt);
      x.dt = KILN_DTYPE_BOOL;
      if (x.a >= 0 && x.b >= 0) i = convert(bd, new_ins(bd, &x), e->dtype);
      break;
    }
    case TE_AND: case TE_OR: case TE_XOR:
      x.dt = x.odt = KILN_DTYPE_BOOL;
      x.a = convert(bd, lower_expr(bd, e->a), KILN_DTYPE_BOOL);
      x.b = convert(bd, lower_expr(bd, e->b), KILN_DTYPE_BOOL);
      if (x.a >= 0 && x.b >= 0) i = convert(bd, new_ins(bd, &x), e->dtype);
      break;
    case TE_SELECT:
      x.a = convert(bd, lower_expr(bd, e->a), KILN_DTYPE_BOOL);
      x.b = convert(bd, lower_expr(bd, e->b), e->dtype);
      x.c = convert(bd, lower_expr(bd, e->c), e->dtype);
      if (x.a >= 0 && x.b >= 0 && x.c >= 0) i = new_ins(bd, &x);
      break;
  }
  if (i < 0 && !bd->st) bd->st = kiln_error(KILN_UNSUPPORTED, "interp: expression operation %d", (int)e->op);
  if (i >= 0) bd->of_expr[e->id] = i;
  return i;
}

/* Whether instruction i is or reads (outside reductions' bodies, through
 * operands and load index terms) a reduction; memoized per instruction. */
static bool holds_reduce(builder *bd, int i) {
  if (i < 0 || bd->st) return false;
  int have = bd->cap_holds;
  if (!grow((void **)&bd->holds, &bd->cap_holds, bd->k->n_ins, 1)) {
    bd->st = KILN_OOM();
    return false;
  }
  if (bd->cap_holds > have) memset(bd->holds + have, 0, (size_t)(bd->cap_holds - have));
  if (bd->holds[i]) return bd->holds[i] > 0;
  const ik_ins *x = &bd->k->ins[i];
  bool r = x->op == TE_REDUCE || holds_reduce(bd, x->a) || holds_reduce(bd, x->b) || holds_reduce(bd, x->c);
  if (x->op == TE_LOAD)
    for (int t = 0; t < x->n_aff && !r; t++)
      if (bd->aff_var[x->aff + t] < 0) r = holds_reduce(bd, -1 - bd->aff_var[x->aff + t]);
  bd->holds[i] = r ? 1 : -1;
  return r;
}

/* Appends the instructions `root` needs, each after its operands, stopping
 * at reductions (their bodies have lists of their own). */
static void list_visit(builder *bd, int i) {
  if (i < 0 || bd->st || bd->mark[i]) return;
  bd->mark[i] = 1;
  const ik_ins *x = &bd->k->ins[i];
  if (x->op != TE_REDUCE) {
    /* Operands that hold a reduction first: a reduction evaluates its body
     * in its own lanes (by rows, row by row), into the slots of whatever
     * instructions the body shares with this list. Listed after it, a
     * shared value that does not read the reduction's variable (a
     * scatter's old element, read inside its search and again outside) is
     * computed again in this list's lanes before it is read here. */
    int ops[3] = {x->a, x->b, x->c};
    for (int pass = 0; pass < 2; pass++)
      for (int k = 0; k < 3; k++)
        if (ops[k] >= 0 && holds_reduce(bd, ops[k]) == (pass == 0)) list_visit(bd, ops[k]);
  }
  if (x->op == TE_LOAD)
    for (int t = 0; t < x->n_aff; t++)
      if (bd->aff_var[x->aff + t] < 0) list_visit(bd, -1 - bd->aff_var[x->aff + t]);
  if (!grow((void **)&bd->lists, &bd->cap_lists, bd->n_lists + 1, sizeof(int))) {
    bd->st = KILN_OOM();
    return;
  }
  bd->lists[bd->n_lists++] = i;
}

static kiln_status_t build_list(builder *bd, int root, int *out_start, int *out_n) {
  /* The mark table covers every instruction made so far (a list is built
   * when its root is complete, so nothing it reaches is newer). */
  char *mark = calloc((size_t)bd->k->n_ins + 1, 1);
  if (!mark) return KILN_OOM();
  char *saved = bd->mark;
  bd->mark = mark;
  *out_start = bd->n_lists;
  list_visit(bd, root);
  *out_n = bd->n_lists - *out_start;
  bd->mark = saved;
  free(mark);
  return bd->st;
}

/* Free variables of every instruction as lists. */
static kiln_status_t finish_vars(builder *bd) {
  kiln_interp_kernel *k = bd->k;
  for (int i = 0; i < k->n_ins; i++) {
    const uint64_t *s = vset_of(bd, i);
    k->ins[i].vars = bd->n_var_list;
    for (int v = 0; v < bd->words * 64; v++) {
      if (!((s[v / 64] >> (v % 64)) & 1)) continue;
      if (!grow((void **)&bd->var_list, &bd->cap_var_list, bd->n_var_list + 1, sizeof(int))) return KILN_OOM();
      bd->var_list[bd->n_var_list++] = v;
    }
    k->ins[i].n_vars = bd->n_var_list - k->ins[i].vars;
    /* (not a tensorized call's sum: the tile stands for it) */
    k->ins[i].memo = k->ins[i].op == TE_REDUCE && i != k->sum && 4 * k->ins[i].n_vars + 2 <= IK_MEMO_KEY ? k->n_memo++ : -1;
  }
  return NULL;
}

void kiln_interp_kernel_destroy(kiln_interp_kernel *k) {
  if (!k) return;
  free(k->ins);
  free(k->lists);
  free(k->var_list);
  free(k->aff_var);
  free(k->aff_coef);
  free(k->aff_div);
  free(k->buf_dtype);
  free(k->buf_numel);
  free(k->slot_off);
  if (k->move_eligible) pthread_mutex_destroy(&k->move_lock);
  move_free(k->move);
  free(k);
}

kiln_status_t kiln_interp_rows_create(const kiln_interp_rows *rows, kiln_interp_kernel **out) {
  *out = NULL;
  if (rows->rows < 1 || rows->n < 1) return kiln_error(KILN_INTERNAL, "interp: an empty row kernel");
  kiln_interp_kernel *k = calloc(1, sizeof *k);
  if (!k) return KILN_OOM();
  k->ops = kiln_lanes();
  k->is_rows = true;
  k->rows = *rows;
  *out = k;
  return NULL;
}

/* The f32 buffer b where a float GEMM's element is sum + b[column] (the
 * column loop's variable the whole index): the routine adds it as it
 * stores, in the same order, so no epilogue runs. -1 otherwise. */
static int column_bias(const te_builder *b, const kiln_loop_nest *nest) {
  const kiln_gemm_call *g = &nest->gemm;
  const te_expr *v = nest->value;
  if (g->integer || g->n_n != 1 || v->op != TE_ADD || v->dtype != KILN_DTYPE_F32) return -1;
  const te_expr *load = v->a == g->sum ? v->b : v->b == g->sum ? v->a : NULL;
  if (!load || load->op != TE_LOAD || load->dtype != KILN_DTYPE_F32 || !load->a || load->a->op != TE_VAR ||
      load->a->var != nest->vars[g->n_loops[0]])
    return -1;
  return te_get_buffer(b, load->buf)->dtype == KILN_DTYPE_F32 ? load->buf : -1;
}

kiln_status_t kiln_interp_kernel_create(const te_builder *b, const kiln_loop_nest *nest, kiln_interp_kernel **out) {
  *out = NULL;
  if (nest->tiles.n_red || nest->rows.threads || nest->thread_tile > 1 || nest->jam_inner > 1)
    return kiln_error(KILN_UNSUPPORTED, "interp: a nest scheduled for a GPU");
  kiln_interp_kernel *k = calloc(1, sizeof *k);
  if (!k) return KILN_OOM();
  builder bd = {.k = k, .b = b};
  k->ops = kiln_lanes();
  k->n_vars = te_var_count(b);
  k->n_bufs = te_buffer_count(b);
  bd.words = (k->n_vars + 63) / 64 + 1;
  int n_exprs = te_expr_count(b);
  bd.of_expr = malloc(((size_t)n_exprs + 1) * sizeof(int));
  bd.subst_var = calloc((size_t)bd.words * 64, sizeof *bd.subst_var);
  bd.subst_div = calloc((size_t)bd.words * 64, sizeof *bd.subst_div);
  k->buf_dtype = calloc((size_t)k->n_bufs + 1, sizeof *k->buf_dtype);
  kiln_status_t st = (!bd.of_expr || !k->buf_dtype || !bd.subst_var || !bd.subst_div) ? KILN_OOM() : NULL;
  for (int i = 0; !st && i < n_exprs; i++) bd.of_expr[i] = -1;
  k->buf_numel = calloc((size_t)k->n_bufs + 1, sizeof *k->buf_numel);
  if (!st && !k->buf_numel) st = KILN_OOM();
  for (int i = 0; !st && i < k->n_bufs; i++) {
    const te_buffer *tb = te_get_buffer(b, i);
    k->buf_numel[i] = 1;
    for (int d = 0; d < tb->rank; d++) k->buf_numel[i] *= tb->dims[d];
    k->buf_dtype[i] = tb->dtype;
    if (!has_lanes(k->buf_dtype[i]))
      st = kiln_error(KILN_UNSUPPORTED, "interp: buffer %d of dtype %s", i, kiln_dtype_name(k->buf_dtype[i]));
  }
  k->out_buf = nest->out_buf;
  k->rank = nest->rank;
  k->sum = -1;
  bd.no_merge = nest->gemm.ok || nest->conv.ok || nest->pool.ok || nest->resample.ok;
  const te_expr *sum = nest->gemm.ok       ? nest->gemm.sum
                       : nest->conv.ok     ? nest->conv.tag->reduce
                       : nest->pool.ok     ? nest->pool.tag->value
                       : nest->resample.ok ? nest->resample.tag->value
                                           : NULL;
  bd.tensorized = sum;
  if (!st) {
    kiln_dtype out_dt = k->buf_dtype[nest->out_buf];
    k->value = convert(&bd, lower_expr(&bd, nest->value), out_dt);
    st = bd.st;
    if (!st && k->value < 0) st = kiln_error(KILN_INTERNAL, "interp: the element did not lower");
  }
  k->n_vars += bd.n_extra;
  if (!st) st = build_list(&bd, k->value, &k->value_list, &k->n_value_list);
  if (!st && sum) k->sum = bd.of_expr[sum->id];
  if (!st) st = finish_vars(&bd);
  if (!st) {
    int64_t s = 1;
    for (int l = nest->rank - 1; l >= 0; l--) {
      k->extents[l] = nest->extents[l];
      k->loop_var[l] = nest->vars[l];
      k->stride[l] = s;
      s *= nest->extents[l];
    }
    k->parallel_total = kiln_loop_nest_threads(nest);
    k->grain = nest->grain > 0 ? nest->grain : 1;
    k->inner = 1;
    for (int l = nest->parallel_dims; l < nest->rank; l++) k->inner *= nest->extents[l];
    /* A block covers consecutive elements over the innermost loops whose
     * product reaches half a block: short rows would make short blocks,
     * each paying the per-block work (a small transformer's rows of 64 as
     * blocks of their own: 7% slower on the precompiled tier). Rows of a
     * reduction hoisted out of an inner loop are then evaluated several
     * at a time (eval_reduce_rows). */
    int64_t reach = L / 2;
    int vl = nest->rank > 0 ? nest->rank - 1 : 0;
    while (vl > 0 && k->stride[vl - 1] < reach) vl--;
    /* ...but a loop whose variable picks a select's side by index
     * arithmetic alone (a concat's input by channel, DenseNet's 24) stays
     * out of the block where its rows are long enough: one side per
     * block, taken in place, not every side's lanes and a pass to pick. */
    uint64_t *picks = calloc((size_t)bd.words, sizeof(uint64_t));
    char *index_only = calloc((size_t)k->n_ins + 1, 1);
    if (picks && index_only) {
      for (int i = 0; i < k->n_ins; i++) {
        const ik_ins *x = &k->ins[i];
        index_only[i] = x->op != TE_LOAD && x->op != TE_REDUCE && (x->a < 0 || index_only[x->a]) &&
                        (x->b < 0 || index_only[x->b]) && (x->c < 0 || index_only[x->c]);
        if (x->op == TE_SELECT && index_only[x->a])
          for (int w = 0; w < bd.words; w++) picks[w] |= vset_of(&bd, x->a)[w];
      }
      for (int l = vl; l + 1 < nest->rank; l++) {
        int v = nest->vars[l];
        if (v >= 0 && v < bd.words * 64 && (picks[v / 64] >> (v % 64) & 1) && k->stride[l] >= 64) vl = l + 1;
      }
    }
    free(picks);
    free(index_only);
    /* ...but a block never covers a loop a reduction is hoisted out of
     * whose rows are too long for two in a block: a row is then one
     * block, the reduction one scalar. Blocks of shorter rows hold whole
     * rows (row_run: the longest). */
    for (int i = 0; i < nest->n_sites; i++) {
      const kiln_reduce_site *site = &nest->sites[i];
      if (!site->owner && site->level + 1 < nest->rank && site->level + 1 > vl && 2 * k->stride[site->level] > L)
        vl = site->level + 1;
    }
    k->row_run = 1;
    for (int i = 0; i < nest->n_sites; i++) {
      const kiln_reduce_site *site = &nest->sites[i];
      if (!site->owner && site->level + 1 < nest->rank && site->level + 1 > vl && k->stride[site->level] > k->row_run)
        k->row_run = k->stride[site->level];
    }
    k->vary_level = vl;
    k->row_len = nest->rank > 0 ? k->stride[vl] * nest->extents[vl] : 1;
    k->gemm = nest->gemm;
    k->conv = nest->conv;
    if (nest->conv.ok) {
      k->conv_tag = *nest->conv.tag;
      k->conv.tag = &k->conv_tag;
      k->has_epilogue = nest->value != nest->conv.tag->reduce;
    }
    k->resample = nest->resample;
    if (nest->resample.ok) {
      k->resample_tag = *nest->resample.tag;
      k->resample.tag = &k->resample_tag;
      k->has_epilogue = nest->value != nest->resample.tag->value;
    }
    k->pool = nest->pool;
    if (nest->pool.ok) {
      k->pool_tag = *nest->pool.tag;
      k->pool.tag = &k->pool_tag;
      k->has_epilogue = nest->value != nest->pool.tag->value;
    }
    if (nest->gemm.ok) {
      const kiln_gemm_call *g = &nest->gemm;
      k->has_epilogue = nest->value != g->sum;
      k->bias_buf = column_bias(b, nest);
      if (k->bias_buf >= 0) k->has_epilogue = false;
      k->pack_b = te_get_buffer(b, g->b_buf)->constant && (g->b_zp_buf < 0 || te_get_buffer(b, g->b_zp_buf)->constant);
      for (int i = 0; i < g->n_batch; i++) k->pack_b &= g->b_stride[i] == 0 || nest->extents[g->batch_loops[i]] == 1;
    }
    if ((nest->gemm.ok || nest->conv.ok || nest->pool.ok || nest->resample.ok) && k->has_epilogue && k->sum < 0)
      st = kiln_error(KILN_INTERNAL, "interp: the tensorized sum is not in the element");
  }
  if (!st) {
    k->slot_off = malloc(((size_t)k->n_ins + 1) * sizeof *k->slot_off);
    if (!k->slot_off) st = KILN_OOM();
    for (int i = 0; !st && i < k->n_ins; i++) {
      size_t lane = k->ins[i].op == TE_VAR ? 8 : lane_size(k->ins[i].dt);
      k->slot_off[i] = k->slot_bytes;
      k->slot_bytes += (size_t)L * (lane < 4 ? 4 : lane);
    }
  }
  k->lists = bd.lists;
  k->n_lists_total = bd.n_lists;
  k->var_list = bd.var_list;
  k->aff_var = bd.aff_var;
  k->aff_coef = bd.aff_coef;
  k->aff_div = bd.aff_div;
  if (!st && move_check(k)) {
    if (pthread_mutex_init(&k->move_lock, NULL)) st = kiln_error(KILN_INTERNAL, "interp: pthread_mutex_init failed");
    else k->move_eligible = true;
  }
  free(bd.of_expr);
  free(bd.vset);
  free(bd.holds);
  free(bd.subst_var);
  free(bd.subst_div);
  if (st) {
    kiln_interp_kernel_destroy(k);
    return st;
  }
  *out = k;
  return NULL;
}

/* ---- evaluation state (per thread) ------------------------------------------------ */

/* A reduction's last sums by rows: its value is a function of its free
 * variables' values alone (within a launch), so rows whose variables
 * hold the same values again (LayerNorm's mean, needed again inside the
 * variance's rows) have the same sums. */
typedef struct ik_memo {
  int n_key; /* 0: none */
  int64_t key[IK_MEMO_KEY];
  unsigned char sums[SLOT_BYTES];
} ik_memo;

/* Where a value of rows sits in the block's lanes: row 0 covers lanes
 * [0, first), row r > 0 lanes first + (r - 1) * m on, m each; n rows of
 * nl lanes (the spread of lanes.h). */
typedef struct ik_rows {
  int first, m, n, nl;
} ik_rows;

/* What one thread needs to evaluate one kernel; thread-local, reused by
 * every kernel the thread runs, reset when the kernel or launch changes
 * (cached values are only good within one launch: the buffers change). */
typedef struct ik_state {
  const kiln_interp_kernel *k;
  uint64_t launch;
  size_t cap;
  unsigned char *vals;  /* the instructions' slots (k->slot_off), then the rest */
  const void **val;     /* per instruction: where its lanes are, its slot or, for a load of one
                           contiguous run, the buffer itself (no copy) */
  uint8_t *scalar;      /* per instruction: its value is lane 0 for every lane */
  /* A reduction over the block's rows, and arithmetic on such values
   * alone (LayerNorm's variance + eps, its square root, the reciprocal):
   * one value per row, not yet spread over the lanes (spread_rows does
   * when a lanes' operand needs them). */
  uint8_t *rowk;        /* per instruction: its value is rows */
  struct ik_rows *rows; /* per instruction: their layout */
  uint64_t *at;         /* per instruction: the tick it was computed at (0: never) */
  uint64_t *changed;    /* per variable: the tick its value last changed */
  int64_t *var_value;   /* per variable: its value, when not varying; when varying, its lane 0's */
  /* A varying variable's lane l holds var_off + ((flat0 + l) / var_ostride) % var_ext: its lanes are
   * written out (var_lanes) only when read as lanes (var_lanes_of). */
  int64_t *var_ostride; /* per variable, when varying: its step in the lanes' order */
  int64_t *var_ext, *var_off;
  int64_t *var_nl, *var_phase; /* per variable, when varying: the block's lanes and flat0 % (ostride * ext)
                                  it was set for (the same again leaves its lanes and its users' values) */
  int64_t *var_lanes;   /* per variable: L lanes, when varying, as of lanes_at */
  uint64_t *lanes_at;   /* per variable: the tick var_lanes were written at (its changed) */
  struct ik_memo *memo; /* per reduction (ins.memo) */
  uint8_t *varying;     /* per variable: in vary[] */
  int vary[2 * KILN_MAX_RANK + 2]; /* the variables that vary across the block's lanes */
  int n_vary;
  uint64_t tick;
  int nl;               /* lanes of the current block */
  int64_t flat0;        /* where lane 0 is in the lanes' order (var_ostride's): rows start at its multiples */
  bool whole;           /* the varying variables are every digit of the lanes' order (an index stepping
                           by step * var_ostride in each steps evenly across the lanes) */
  void *const *buffers;
  int64_t idx[L];
  int64_t split[L];     /* a variable's quotients or remainders, for a gather's index */
} ik_state;

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static void state_free(void *p) {
  ik_state *s = p;
  if (s) free(s->vals);
  free(s);
}
static void state_key_init(void) { (void)pthread_key_create(&state_key, state_free); }

static ik_state *state_for(const kiln_interp_kernel *k, uint64_t launch, void *const *buffers) {
  pthread_once(&state_once, state_key_init);
  ik_state *s = pthread_getspecific(state_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(state_key, s)) {
      free(s);
      return NULL;
    }
  }
  if (s->k == k && s->launch == launch) return s;
  size_t n = (size_t)k->n_ins, v = (size_t)k->n_vars + 1;
  size_t need = k->slot_bytes + (size_t)k->n_memo * sizeof(ik_memo) + n * (2 + 8 + sizeof(void *) + sizeof(ik_rows)) +
                v * (8 * 8 + 1 + (size_t)L * 8) + 64;
  if (need > s->cap) {
    free(s->vals);
    s->vals = aligned_alloc(64, (need + 63) / 64 * 64);
    s->cap = s->vals ? (need + 63) / 64 * 64 : 0;
    if (!s->vals) {
      s->k = NULL;
      return NULL;
    }
  }
  unsigned char *p = s->vals + k->slot_bytes;
  s->memo = (ik_memo *)p, p += (size_t)k->n_memo * sizeof(ik_memo);
  for (int i = 0; i < k->n_memo; i++) s->memo[i].n_key = 0;
  s->var_lanes = (int64_t *)p, p += v * (size_t)L * 8;
  s->val = (const void **)p, p += n * sizeof(void *);
  s->rows = (ik_rows *)p, p += n * sizeof(ik_rows);
  s->var_value = (int64_t *)p, p += v * 8;
  s->var_ostride = (int64_t *)p, p += v * 8;
  s->var_ext = (int64_t *)p, p += v * 8;
  s->var_off = (int64_t *)p, p += v * 8;
  s->var_nl = (int64_t *)p, p += v * 8;
  s->var_phase = (int64_t *)p, p += v * 8;
  /* What a launch starts from zero, together: one memset (a decoder's
   * step runs a dozen kernels of a few elements each). */
  unsigned char *zero = p;
  s->at = (uint64_t *)p, p += n * 8;
  s->changed = (uint64_t *)p, p += v * 8;
  s->lanes_at = (uint64_t *)p, p += v * 8;
  s->rowk = p, p += n;
  s->varying = p, p += v;
  memset(zero, 0, (size_t)(p - zero));
  s->scalar = p;
  s->n_vary = 0;
  s->tick = 1;
  s->k = k;
  s->launch = launch;
  s->buffers = buffers;
  return s;
}

static void *slot(const ik_state *s, int i) { return s->vals + s->k->slot_off[i]; }
/* Instruction i's value as an operand (valid once it was evaluated). */
static const void *in(const ik_state *s, int i) { return s->val[i]; }

/* Instruction i's value of rows spread over its lanes, in its slot. */
static void spread_rows(ik_state *s, int i) {
  const ik_rows *r = &s->rows[i];
  kiln_dtype dt = s->k->ins[i].dt;
  unsigned char tmp[SLOT_BYTES];
  memcpy(tmp, s->val[i], (size_t)r->n * lane_size(dt));
  s->k->ops->spread(dt, r->nl, slot(s, i), r->first, r->m, tmp);
  s->val[i] = slot(s, i);
  s->rowk[i] = 0;
}

/* Instruction i's value as lanes (or a scalar): what every reader but
 * the arithmetic of eval_ins takes. */
static const void *lanes_in(ik_state *s, int i) {
  if (s->rowk[i]) spread_rows(s, i);
  return s->val[i];
}

/* Reduction i's value: v, one per row of the block's rows (first, m),
 * kept as rows (one row: a scalar). */
static void set_rows(ik_state *s, int i, const void *v, int n, int first, int m) {
  kiln_dtype dt = s->k->ins[i].dt;
  void *o = slot(s, i);
  memmove(o, v, (size_t)n * lane_size(dt));
  s->val[i] = o;
  s->scalar[i] = n == 1;
  s->rowk[i] = n > 1;
  s->rows[i] = (ik_rows){.first = first, .m = m, .n = n, .nl = s->nl};
}

static bool valid(const ik_state *s, const kiln_interp_kernel *k, int i) {
  uint64_t at = s->at[i];
  if (!at) return false;
  const ik_ins *x = &k->ins[i];
  for (int j = 0; j < x->n_vars; j++)
    if (s->changed[k->var_list[x->vars + j]] >= at) return false;
  return true;
}

static void set_scalar_var(ik_state *s, int var, int64_t value) {
  if (!s->varying[var] && s->var_value[var] == value && s->changed[var]) return;
  s->varying[var] = 0;
  s->var_nl[var] = -1; /* varying again later is a change (a caller may restore its varying flag by hand) */
  s->var_value[var] = value;
  s->changed[var] = ++s->tick;
}

static void eval_list(ik_state *s, const kiln_interp_kernel *k, int start, int n);

/* Varying variable v from lane 0 on: off + ((flat0 + l) / ostride) % ext. */
static void set_varying_var(ik_state *s, int v, int64_t off, int64_t ostride, int64_t ext) {
  /* The same lanes as last time (the next row of a row-by-row nest: a
   * bias or LayerNorm's gamma read along it stays loaded): not a change. */
  int64_t phase = s->flat0 % (ostride * ext);
  if (s->varying[v] && s->changed[v] && s->var_off[v] == off && s->var_ostride[v] == ostride && s->var_ext[v] == ext &&
      s->var_nl[v] == s->nl && s->var_phase[v] == phase)
    return;
  s->var_nl[v] = s->nl;
  s->var_phase[v] = phase;
  s->varying[v] = 1;
  s->var_off[v] = off;
  s->var_ostride[v] = ostride;
  s->var_ext[v] = ext;
  s->var_value[v] = off + (s->flat0 / ostride) % ext;
  s->changed[v] = ++s->tick;
}

/* A varying variable's lanes, written out on first use: runs of equal
 * values (ostride long, the first cut short by where flat0 starts),
 * stepping by one and wrapping at the extent; ostride 1 makes ramps. */
static const int64_t *var_lanes_of(ik_state *s, const kiln_interp_kernel *k, int v) {
  int64_t *lanes = s->var_lanes + (size_t)v * L;
  if (s->lanes_at[v] == s->changed[v]) return lanes;
  s->lanes_at[v] = s->changed[v];
  int64_t ext = s->var_ext[v], st = s->var_ostride[v], off = s->var_off[v], val = (s->flat0 / st) % ext;
  int n = s->nl, l = 0;
  if (st == 1) {
    while (l < n) {
      int run = (int)(ext - val < n - l ? ext - val : n - l);
      k->ops->ramp(run, lanes + l, off + val);
      l += run;
      val = 0;
    }
    return lanes;
  }
  int64_t pos = s->flat0 % st;
  while (l < n) {
    int run = (int)(st - pos < n - l ? st - pos : n - l);
    int64_t x = off + val;
    k->ops->fill(KILN_DTYPE_I64, run, lanes + l, &x);
    l += run;
    pos = 0;
    val = val + 1 == ext ? 0 : val + 1;
  }
  return lanes;
}

/* An affine term's value at a variable's value v (a quotient or remainder when split). */
static inline int64_t term_value(int64_t v, int64_t div) { return div > 0 ? v / div : div < 0 ? v % -div : v; }

/* A digit of the lanes' order an affine load reads: lane l has it at
 * ((flat0 + l) / os) % ext, val at lane 0; the index steps by coef per unit. */
typedef struct ik_digit {
  int64_t os, ext, val, coef;
} ik_digit;

/* Digit (os, ext, val, coef) into dg[0, n) ordered by os; returns the new count (a digit of one value
 * is left out). */
static inline int insert_digit(ik_digit *dg, int n, int64_t os, int64_t ext, int64_t val, int64_t coef) {
  if (ext == 1) return n;
  int at = n;
  while (at > 0 && dg[at - 1].os > os) {
    dg[at] = dg[at - 1];
    at--;
  }
  dg[at].os = os;
  dg[at].ext = ext;
  dg[at].val = val;
  dg[at].coef = coef;
  return n + 1;
}

/* The varying variables an affine load reads as digits, innermost first
 * (ones of one value left out: they are in the index at lane 0 already).
 * A variable read as a quotient and a remainder by d where d divides its
 * extent and offset is two digits. False where a variable is read as a
 * quotient or remainder otherwise. */
static bool load_digits(const ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, ik_digit *dg, int *out_n) {
  int n = 0;
  for (int j = 0; j < s->n_vary; j++) {
    int v = s->vary[j];
    int64_t coef = 0, c_div = 0, c_mod = 0, d = 0;
    for (int t = 0; t < x->n_aff; t++) {
      if (k->aff_var[x->aff + t] != v) continue;
      int64_t c = k->aff_coef[x->aff + t], div = k->aff_div[x->aff + t];
      if (!div) {
        coef += c;
        continue;
      }
      int64_t dd = div > 0 ? div : -div;
      if (d && dd != d) return false;
      d = dd;
      if (div > 0) c_div += c;
      else c_mod += c;
    }
    int64_t os = s->var_ostride[v], ext = s->var_ext[v], w = s->var_value[v] - s->var_off[v];
    if (!d) {
      n = insert_digit(dg, n, os, ext, w, coef);
      continue;
    }
    if (ext % d || s->var_off[v] % d) return false;
    n = insert_digit(dg, n, os, d, w % d, coef + c_mod);
    n = insert_digit(dg, n, os * d, ext / d, w / d, d * coef + c_div);
  }
  *out_n = n;
  return true;
}

/* A load at affine index u (at lane 0) over lanes whose digits are all
 * varying (s->whole), innermost first, each stepping when the one inside
 * it wraps: a strided copy per run of the innermost, the index carried
 * from run to run. False where the runs would be short, having done
 * nothing. */
static bool eval_load_by_runs(ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, void *o, int64_t u,
                              ik_digit *dg, int n) {
  for (int j = 1; j < n; j++)
    if (dg[j].os != dg[j - 1].os * dg[j - 1].ext) return false;
  /* Digits the index steps through as one (rows of a plane copied
   * whole) are one digit: longer runs. */
  int m = 0;
  for (int j = 1; j < n; j++) {
    if (dg[j].coef == dg[m].coef * dg[m].ext) {
      dg[m].val += dg[m].ext * dg[j].val;
      dg[m].ext *= dg[j].ext;
    } else {
      dg[++m] = dg[j];
    }
  }
  if (n) n = m + 1;
  if (!n || dg[0].os != 1 || dg[0].ext < 8) return false;
  const char *base = s->buffers[x->buf];
  size_t size = lane_size(x->dt);
  int64_t at = u;
  for (int l = 0; l < s->nl;) {
    int run = (int)(dg[0].ext - dg[0].val < s->nl - l ? dg[0].ext - dg[0].val : s->nl - l);
    k->ops->strided(x->dt, run, (char *)o + (size_t)l * size, base + (size_t)at * size, dg[0].coef);
    l += run;
    at += dg[0].coef * run;
    dg[0].val += run;
    for (int j = 0; j < n && dg[j].val == dg[j].ext; j++) {
      at -= dg[j].coef * dg[j].val;
      dg[j].val = 0;
      if (j + 1 < n) {
        dg[j + 1].val++;
        at += dg[j + 1].coef;
      }
    }
  }
  return true;
}

/* A load's affine index at lane 0, but for the terms of varying values
 * (added per lane later); *varies: some term varies across the block,
 * *ins_varies: a value's term does. */
static inline int64_t affine_lane0(const ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, bool *varies,
                                   bool *ins_varies) {
  int64_t u = x->aff_c0;
  *varies = *ins_varies = false;
  for (int t = 0; t < x->n_aff; t++) {
    int id = k->aff_var[x->aff + t];
    int64_t c = k->aff_coef[x->aff + t], v;
    if (id < 0) { /* a value's term */
      int j = -1 - id;
      if (!s->scalar[j]) {
        *varies = *ins_varies = true;
        continue;
      }
      memcpy(&v, in(s, j), 8);
      u += c * v;
      continue;
    }
    *varies |= s->varying[id];
    u += c * term_value(s->var_value[id], k->aff_div[x->aff + t]);
  }
  return u;
}

static void affine_index_lanes(ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, int64_t u);

/* A load at an affine index: a strided copy when the block's lanes step
 * through the index evenly, copies by runs of its digits, else a gather. */
static void eval_affine_load(ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, void *o, int i) {
  bool varies, ins_varies;
  int64_t u = affine_lane0(s, k, x, &varies, &ins_varies);
  const char *base = s->buffers[x->buf];
  size_t size = lane_size(x->dt);
  if (!varies) {
    memcpy(o, base + (size_t)u * size, size);
    s->scalar[i] = 1;
    return;
  }
  s->scalar[i] = 0;
  int nl = s->nl, n = 0;
  ik_digit dg[2 * (2 * KILN_MAX_RANK + 2)];
  if (!ins_varies && load_digits(s, k, x, dg, &n)) {
    /* Even: every digit's coefficient is step times its stride in the
     * lanes' order, and the digits are the whole order, so lane l reads
     * u + l * step. */
    bool even = s->whole && n > 0 && dg[0].os == 1;
    for (int j = 0; j < n && even; j++) even = dg[j].coef == dg[0].coef * dg[j].os;
    if (even) {
      /* One contiguous run is read where it is, but from the output
       * buffer (a later block's stores would change it under a value
       * still valid). */
      if (dg[0].coef == 1 && s->buffers[x->buf] != s->buffers[k->out_buf]) {
        s->val[i] = base + (size_t)u * size;
        return;
      }
      k->ops->strided(x->dt, nl, o, base + (size_t)u * size, dg[0].coef);
      return;
    }
    /* One digit read (a LayerNorm's scale, a channel's bias under a
     * block of several rows or channels): its runs of values are strided
     * copies, or its runs of one value fills. */
    int w = -1;
    for (int j = 0; j < n; j++)
      if (dg[j].coef) {
        if (w >= 0) {
          w = -1;
          break;
        }
        w = j;
      }
    if (w >= 0) {
      /* u0: the index where the digit is 0 (lane 0 is at val). */
      int64_t c = dg[w].coef, ext = dg[w].ext, st = dg[w].os, val = dg[w].val, u0 = u - c * val;
      if (st == 1) {
        for (int l = 0; l < nl;) {
          int run = (int)(ext - val < nl - l ? ext - val : nl - l);
          k->ops->strided(x->dt, run, (char *)o + (size_t)l * size, base + (size_t)(u0 + c * val) * size, c);
          l += run;
          val = 0;
        }
        return;
      }
      int64_t pos = s->flat0 % st;
      for (int l = 0; l < nl;) {
        int run = (int)(st - pos < nl - l ? st - pos : nl - l);
        k->ops->fill(x->dt, run, (char *)o + (size_t)l * size, base + (size_t)(u0 + c * val) * size);
        l += run;
        pos = 0;
        val = val + 1 == ext ? 0 : val + 1;
      }
      return;
    }
    /* Every digit of the lanes' order varying (a transpose's rows, a
     * reshape's): by runs of the innermost. */
    if (s->whole && eval_load_by_runs(s, k, x, o, u, dg, n)) return;
  }
  affine_index_lanes(s, k, x, u);
  k->ops->gather(x->dt, nl, o, base, s->idx);
}

/* A load's index at every lane into s->idx (u: at lane 0, but for the
 * varying terms). */
static void affine_index_lanes(ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, int64_t u) {
  int nl = s->nl;
  k->ops->fill(KILN_DTYPE_I64, nl, s->idx, &u);
  for (int t = 0; t < x->n_aff; t++) {
    int id = k->aff_var[x->aff + t];
    int64_t c = k->aff_coef[x->aff + t], div = k->aff_div[x->aff + t];
    if (id < 0) {
      int j = -1 - id;
      if (!s->scalar[j]) k->ops->index_add(nl, s->idx, c, lanes_in(s, j), 0);
    } else if (s->varying[id] && !div) {
      k->ops->index_add(nl, s->idx, c, var_lanes_of(s, k, id), s->var_value[id]);
    } else if (s->varying[id]) {
      int64_t d = div > 0 ? div : -div;
      k->ops->binary(div > 0 ? TE_DIV : TE_MOD, KILN_DTYPE_I64, nl, s->split, var_lanes_of(s, k, id), 0, &d, 1);
      k->ops->index_add(nl, s->idx, c, s->split, s->split[0]);
    }
  }
}

/* Whether instruction x reads variable v. */
static bool reads_var(const kiln_interp_kernel *k, const ik_ins *x, int v) {
  for (int j = 0; j < x->n_vars; j++)
    if (k->var_list[x->vars + j] == v) return true;
  return false;
}

/* A reduction that reads some of the block's varying variables, by rows:
 * the lanes where the variables it reads hold one value (a row of
 * Softmax or LayerNorm: runs of consecutive lanes) share one sum, so the
 * body is evaluated over lanes (row, k) for every row of the block at
 * once, each row folded, and its sum spread over the row's lanes. With
 * rows of one lane this is a lane-by-lane evaluation batched (a full
 * reduction nested in another). Returns false, having done nothing, where
 * one pass along the variable over the block's lanes is cheaper. */
static void reduce_one(ik_state *s, const kiln_interp_kernel *k, int i, unsigned char *out);

static bool eval_reduce_rows(ik_state *s, const kiln_interp_kernel *k, int i) {
  const ik_ins *x = &k->ins[i];
  const kiln_lanes_ops *ops = k->ops;
  int nl = s->nl, n_vary = s->n_vary, n_read = 0, read[2 * KILN_MAX_RANK + 2];
  int64_t m = INT64_MAX;
  for (int j = 0; j < n_vary; j++)
    if (reads_var(k, x, s->vary[j])) {
      read[n_read++] = s->vary[j];
      if (s->var_ostride[s->vary[j]] < m) m = s->var_ostride[s->vary[j]];
    }
  /* Each variable read is constant over aligned runs of m in the lanes'
   * order when m divides its step; a variable stepping otherwise (none of
   * the nests' loops do) leaves rows of one lane. */
  for (int j = 0; j < n_read; j++)
    if (m < 1 || s->var_ostride[read[j]] % m) m = 1;
  int64_t first = m - s->flat0 % m; /* lanes of the first row */
  int rows = nl <= first ? 1 : 1 + (int)((nl - first + m - 1) / m);
  int64_t ext = x->extent, ek = ext < L / rows ? ext : L / rows, chunks = (ext + ek - 1) / ek;
  /* Three orders, costed per instruction (IK_OVERHEAD) and per lane of
   * its work: by rows (lanes (row, k)), by lanes (k one value at a time,
   * the block's lanes), or each row alone (reduce_one per row: lanes along
   * k). A load's lanes cost by how they step through its index: in place
   * (one contiguous run) nothing, a strided copy 1, a gather
   * IK_GATHER_COST, where NHWC's mean over H and W by rows gathers (rows
   * are channels, a channel's elements C apart) and NCHW's by lanes copies
   * with stride H * W. */
  int64_t inner = -1; /* the read variable innermost in the block */
  for (int j = 0; j < n_read; j++)
    if (inner < 0 || s->var_ostride[read[j]] < s->var_ostride[inner]) inner = read[j];
  double w_rows = 0, w_lanes = 0, w_each = 0;
  for (int j = 0; j < x->n_list; j++) {
    const ik_ins *y = &k->ins[k->lists[x->list + j]];
    if (y->op != TE_LOAD) {
      w_rows += 1, w_lanes += 1, w_each += 1;
      continue;
    }
    if (y->aff < 0) {
      w_rows += IK_GATHER_COST, w_lanes += IK_GATHER_COST, w_each += IK_GATHER_COST;
      continue;
    }
    int64_t ck = 0, c_in = 0;
    bool k_div = false, in_div = false, uneven = false;
    for (int t = 0; t < y->n_aff; t++) {
      int v = k->aff_var[y->aff + t];
      if (v == x->var) {
        k_div |= k->aff_div[y->aff + t] != 0;
        ck += k->aff_coef[y->aff + t];
      } else if (v == inner) {
        in_div |= k->aff_div[y->aff + t] != 0;
        c_in += k->aff_coef[y->aff + t];
      }
    }
    for (int r = 0; r < n_read && !uneven; r++) {
      int64_t cw = 0;
      for (int t = 0; t < y->n_aff; t++)
        if (k->aff_var[y->aff + t] == read[r]) {
          if (k->aff_div[y->aff + t]) uneven = true;
          cw += k->aff_coef[y->aff + t];
        }
      if (cw && ck && cw != ck * (s->var_ostride[read[r]] / m) * ek) uneven = true;
    }
    w_rows += k_div || (uneven && rows > 1) ? IK_GATHER_COST : ck == 1 ? 0 : 1;
    w_lanes += in_div ? IK_GATHER_COST : c_in == 1 ? 0 : 1;
    w_each += k_div ? IK_GATHER_COST : ck == 1 ? 0 : 1;
  }
  int64_t e_lanes = ext < L ? ext : L, e_chunks = (ext + L - 1) / L;
  double by_rows = (double)chunks * ((double)x->n_list * IK_OVERHEAD + w_rows * (double)(rows * ek)) +
                   (double)rows * (double)(IK_OVERHEAD + ek) + nl;
  double by_lanes = (double)ext * ((double)x->n_list * IK_OVERHEAD + w_lanes * nl);
  /* (a row alone also sets its variables, sets the block aside and back,
   * and folds its partial sums) */
  double by_each = (double)rows * ((double)e_chunks * ((double)x->n_list * IK_OVERHEAD + w_each * (double)e_lanes) +
                                   4 * IK_OVERHEAD + (double)e_lanes);
  if (by_lanes <= by_rows && by_lanes <= by_each) return false;
  bool each = by_each < by_rows;
  /* The key of these rows: each free variable's value, or its place in
   * the rows' order; the first row; how many. */
  int64_t key[IK_MEMO_KEY];
  int n_key = 0;
  ik_memo *memo = x->memo >= 0 ? &s->memo[x->memo] : NULL;
  if (memo) {
    for (int j = 0; j < x->n_vars; j++) {
      int w = k->var_list[x->vars + j];
      if (!s->varying[w]) {
        key[n_key++] = 0;
        key[n_key++] = s->var_value[w];
        continue;
      }
      key[n_key++] = s->var_off[w] + 1; /* may be 0: kept apart from the scalar case's tag by the next */
      key[n_key++] = s->var_ext[w];
      key[n_key++] = s->var_ostride[w] / m;
      key[n_key++] = w;
    }
    key[n_key++] = s->flat0 / m;
    key[n_key++] = rows;
    if (memo->n_key == n_key && !memcmp(memo->key, key, (size_t)n_key * sizeof key[0])) {
      set_rows(s, i, memo->sums, rows, (int)(first < nl ? first : nl), (int)(m < nl ? m : nl));
      return true;
    }
  }
  if (each) {
    /* Each row alone: its variables one value, the reduction one value. */
    unsigned char sums[SLOT_BYTES];
    size_t size = lane_size(x->dt);
    int64_t r_off[2 * KILN_MAX_RANK + 2], r_os[2 * KILN_MAX_RANK + 2], r_ext[2 * KILN_MAX_RANK + 2], flat0 = s->flat0;
    for (int j = 0; j < n_read; j++) {
      r_off[j] = s->var_off[read[j]];
      r_os[j] = s->var_ostride[read[j]];
      r_ext[j] = s->var_ext[read[j]];
    }
    for (int r = 0; r < rows; r++) {
      int64_t l0 = r == 0 ? 0 : first + (int64_t)(r - 1) * m;
      for (int j = 0; j < n_read; j++) set_scalar_var(s, read[j], r_off[j] + ((flat0 + l0) / r_os[j]) % r_ext[j]);
      reduce_one(s, k, i, sums + (size_t)r * size);
    }
    for (int j = 0; j < n_read; j++) set_varying_var(s, read[j], r_off[j], r_os[j], r_ext[j]);
    if (memo) {
      memo->n_key = n_key;
      memcpy(memo->key, key, (size_t)n_key * sizeof key[0]);
      memcpy(memo->sums, sums, (size_t)rows * size);
    }
    set_rows(s, i, sums, rows, (int)(first < nl ? first : nl), (int)(m < nl ? m : nl));
    return true;
  }
  int64_t saved_ostride[2 * KILN_MAX_RANK + 2], saved_flat0 = s->flat0, g0 = s->flat0 / m;
  /* The rows' order is whole where no variable set aside is a digit of it. */
  bool saved_whole = s->whole;
  for (int j = 0; j < n_vary; j++)
    if (s->var_ostride[s->vary[j]] >= m && !reads_var(k, x, s->vary[j])) s->whole = false;
  int saved_vary[2 * KILN_MAX_RANK + 2];
  memcpy(saved_vary, s->vary, sizeof saved_vary);
  for (int j = 0; j < n_read; j++) saved_ostride[j] = s->var_ostride[read[j]];
  /* The varying variables the body does not read are set aside, their lanes kept. */
  for (int j = 0; j < n_vary; j++) s->varying[saved_vary[j]] = 0;
  int v = x->var;
  memcpy(s->vary, read, (size_t)n_read * sizeof(int));
  s->vary[n_read] = v;
  s->n_vary = n_read + 1;
  for (int j = 0; j < n_read; j++) s->varying[read[j]] = 1;
  size_t size = lane_size(x->dt);
  unsigned char *acc = slot(s, i);
  ops->fill(x->dt, (int)(rows * ek), acc, x->bytes);
  int64_t laid = 0; /* lanes per row the variables read are laid out for */
  for (int64_t k0 = 0; k0 < ext; k0 += ek) {
    int64_t n = ext - k0 < ek ? ext - k0 : ek;
    /* Lane r * n + j is row r's element k0 + j: the lanes' order is a
     * flat index of rows n long, row g0 the first. */
    s->nl = (int)(rows * n);
    s->flat0 = g0 * n;
    if (n != laid) {
      for (int j = 0; j < n_read; j++) {
        int w = read[j];
        set_varying_var(s, w, s->var_off[w], saved_ostride[j] / m * n, s->var_ext[w]);
      }
      laid = n;
    }
    set_varying_var(s, v, k0, 1, n);
    eval_list(s, k, x->list, x->n_list);
    const unsigned char *body = lanes_in(s, x->a);
    int bs = s->scalar[x->a];
    if (n == ek) {
      ops->combine(x->rop, x->dt, (int)(rows * ek), acc, body, bs);
    } else {
      for (int r = 0; r < rows; r++)
        ops->combine(x->rop, x->dt, (int)n, acc + (size_t)(r * ek) * size, bs ? body : body + (size_t)(r * n) * size,
                     bs);
    }
  }
  unsigned char sums[SLOT_BYTES];
  ops->fill(x->dt, rows, sums, x->bytes);
  ops->fold(x->rop, x->dt, rows, (int)ek, acc, sums);
  if (memo) {
    memo->n_key = n_key;
    memcpy(memo->key, key, (size_t)n_key * sizeof key[0]);
    memcpy(memo->sums, sums, (size_t)rows * size);
  }
  /* Back to the block's lanes: each row's sum over its lanes, the
   * variables as they were. */
  s->nl = nl;
  s->flat0 = saved_flat0;
  s->whole = saved_whole;
  for (int j = 0; j < n_read; j++) {
    int w = read[j];
    set_varying_var(s, w, s->var_off[w], saved_ostride[j], s->var_ext[w]);
  }
  s->varying[v] = 0;
  s->var_nl[v] = -1;
  s->changed[v] = ++s->tick;
  memcpy(s->vary, saved_vary, sizeof saved_vary);
  s->n_vary = n_vary;
  for (int j = 0; j < n_vary; j++) s->varying[saved_vary[j]] = 1;
  set_rows(s, i, sums, rows, (int)(first < nl ? first : nl), (int)(m < nl ? m : nl));
  return true;
}

/* Reduction i's one value (its body reads no varying variable) into
 * out: the body evaluated in blocks along the reduction's own variable,
 * into per-lane partial results (its slot), folded. */
static void reduce_one(ik_state *s, const kiln_interp_kernel *k, int i, unsigned char *out) {
  const ik_ins *x = &k->ins[i];
  const kiln_lanes_ops *ops = k->ops;
  void *acc = slot(s, i);
  int saved_nl = s->nl, v = x->var, saved_n = s->n_vary;
  int64_t saved_flat0 = s->flat0;
  bool saved_whole = s->whole;
  int saved[2 * KILN_MAX_RANK + 2];
  /* The block's own varying variables are set aside (the body reads none
   * of them: they are not free in it), their lanes kept. */
  memcpy(saved, s->vary, sizeof saved);
  for (int j = 0; j < saved_n; j++) s->varying[saved[j]] = 0;
  s->vary[0] = v;
  s->n_vary = 1;
  int64_t used = x->extent < L ? x->extent : L;
  ops->fill(x->dt, (int)used, acc, x->bytes);
  for (int64_t k0 = 0; k0 < x->extent; k0 += L) {
    int n = (int)(x->extent - k0 < L ? x->extent - k0 : L);
    s->nl = n;
    s->flat0 = 0;
    s->whole = true;
    set_varying_var(s, v, k0, 1, n);
    eval_list(s, k, x->list, x->n_list);
    ops->combine(x->rop, x->dt, n, acc, lanes_in(s, x->a), s->scalar[x->a]);
  }
  unsigned char result[8];
  memcpy(result, x->bytes, sizeof result);
  ops->fold(x->rop, x->dt, 1, (int)used, acc, result);
  memcpy(out, result, sizeof result);
  s->varying[v] = 0;
  s->var_nl[v] = -1;
  s->changed[v] = ++s->tick;
  memcpy(s->vary, saved, sizeof saved);
  s->n_vary = saved_n;
  for (int j = 0; j < saved_n; j++) s->varying[saved[j]] = 1;
  s->nl = saved_nl;
  s->flat0 = saved_flat0;
  s->whole = saved_whole;
}

static void eval_reduce(ik_state *s, const kiln_interp_kernel *k, int i) {
  const ik_ins *x = &k->ins[i];
  const kiln_lanes_ops *ops = k->ops;
  void *acc = slot(s, i);
  if (x->extent < 1) {
    /* Over an empty axis: the initial value, one scalar; the body (its
     * loads) is never evaluated. */
    memcpy(acc, x->bytes, 8);
    s->scalar[i] = 1;
    return;
  }
  bool lanewise = false;
  for (int j = 0; j < x->n_vars && !lanewise; j++) lanewise = s->varying[k->var_list[x->vars + j]];
  if (lanewise) {
    if (eval_reduce_rows(s, k, i)) return;
    /* Each lane its own sum: the variable one value at a time, the body
     * over the block. */
    ops->fill(x->dt, s->nl, acc, x->bytes);
    /* A body that is one load read where it is (a mean over H and W of an
     * NHWC tensor: each value of the variable a run of channels): the
     * runs combined straight from the buffer, one step apart. */
    const ik_ins *y = &k->ins[x->a];
    int64_t step = 0;
    bool by_step = x->n_list == 1 && y->op == TE_LOAD && y->dt == x->dt && y->aff >= 0;
    for (int t = 0; by_step && t < y->n_aff; t++)
      if (k->aff_var[y->aff + t] == x->var) {
        by_step = !k->aff_div[y->aff + t];
        step += k->aff_coef[y->aff + t];
      }
    if (by_step) {
      set_scalar_var(s, x->var, 0);
      eval_list(s, k, x->list, x->n_list);
      const char *p0 = lanes_in(s, x->a);
      if (!s->scalar[x->a] && p0 != (const char *)slot(s, x->a)) {
        size_t size = lane_size(x->dt);
        for (int64_t kk = 0; kk < x->extent; kk++)
          ops->combine(x->rop, x->dt, s->nl, acc, p0 + (ptrdiff_t)(kk * step) * (ptrdiff_t)size, 0);
        s->at[x->a] = 0; /* its lanes were k = 0's */
        s->scalar[i] = 0;
        return;
      }
    }
    for (int64_t kk = 0; kk < x->extent; kk++) {
      set_scalar_var(s, x->var, kk);
      eval_list(s, k, x->list, x->n_list);
      ops->combine(x->rop, x->dt, s->nl, acc, lanes_in(s, x->a), s->scalar[x->a]);
    }
    s->scalar[i] = 0;
    return;
  }
  /* One value for the block. */
  reduce_one(s, k, i, acc);
  s->scalar[i] = 1;
}

/* A probe's load (interp_move): each lane's element index, tagged with
 * its buffer (buf + 1 above MOVE_TAG_SHIFT), in place of its value. */
static void eval_probe_load(ik_state *s, const kiln_interp_kernel *k, const ik_ins *x, int64_t *o, int i) {
  int64_t tag = (int64_t)(x->buf + 1) << MOVE_TAG_SHIFT;
  int nl = s->nl;
  if (x->aff < 0) {
    const int64_t *a = lanes_in(s, x->a);
    s->scalar[i] = s->scalar[x->a];
    for (int l = 0; l < (s->scalar[i] ? 1 : nl); l++) o[l] = tag + a[l];
    return;
  }
  bool varies, ins_varies;
  int64_t u = affine_lane0(s, k, x, &varies, &ins_varies);
  s->scalar[i] = !varies;
  if (!varies) {
    o[0] = tag + u;
    return;
  }
  affine_index_lanes(s, k, x, u);
  for (int l = 0; l < nl; l++) o[l] = tag + s->idx[l];
}

static void eval_ins(ik_state *s, const kiln_interp_kernel *k, int i) {
  const ik_ins *x = &k->ins[i];
  const kiln_lanes_ops *ops = k->ops;
  void *o = slot(s, i);
  s->val[i] = o;
  s->rowk[i] = 0;
  const int opnd[3] = {x->a, x->b, x->c};
  /* Operands of rows: the result is rows too when every other operand is
   * a scalar or rows of the same layout and the op is arithmetic; else
   * they are spread over the lanes first. */
  int rows_of = -1;
  for (int j = 0; j < 3; j++) {
    int y = opnd[j];
    if (y < 0 || !s->rowk[y]) continue;
    bool native = x->op != TE_LOAD && x->op != TE_REDUCE;
    for (int q = 0; q < 3 && native; q++) {
      int z = opnd[q];
      if (z < 0 || s->scalar[z]) continue;
      native = s->rowk[z] && s->rows[z].first == s->rows[y].first && s->rows[z].m == s->rows[y].m &&
               s->rows[z].n == s->rows[y].n && s->rows[z].nl == s->rows[y].nl;
    }
    if (native) {
      rows_of = y;
      break;
    }
    for (int q = 0; q < 3; q++)
      if (opnd[q] >= 0 && s->rowk[opnd[q]]) spread_rows(s, opnd[q]);
    break;
  }
  int as = x->a >= 0 ? s->scalar[x->a] : 1, bs = x->b >= 0 ? s->scalar[x->b] : 1,
      cs = x->c >= 0 ? s->scalar[x->c] : 1;
  const void *a = x->a >= 0 ? in(s, x->a) : NULL, *b = x->b >= 0 ? in(s, x->b) : NULL,
             *c = x->c >= 0 ? in(s, x->c) : NULL;
  int all_scalar = as && bs && cs;
  int n = all_scalar ? 1 : rows_of >= 0 ? s->rows[rows_of].n : s->nl;
  if (x->op == TE_SELECT && as && !all_scalar) {
    /* One side for the whole block (a concat's input, chosen by the
     * channel): its value, not a copy of it. The chosen value's
     * variables are this one's, so it stays valid as long as this does. */
    int y = *(const uint8_t *)a ? x->b : x->c;
    if (s->rowk[y]) spread_rows(s, y);
    s->val[i] = s->val[y];
    s->scalar[i] = s->scalar[y];
    return;
  }
  switch ((int)x->op) { /* (te_op and the IK_ ops made when lowering) */
    case TE_CONST:
      memcpy(o, x->bytes, 8);
      s->scalar[i] = 1;
      return;
    case TE_VAR:
      if (s->varying[x->var]) {
        memcpy(o, var_lanes_of(s, k, x->var), (size_t)s->nl * 8);
        s->scalar[i] = 0;
      } else {
        memcpy(o, &s->var_value[x->var], 8);
        s->scalar[i] = 1;
      }
      return;
    case TE_LOAD:
      if (k->probe) {
        eval_probe_load(s, k, x, o, i);
        return;
      }
      if (x->aff >= 0) {
        eval_affine_load(s, k, x, o, i);
        return;
      } else if (as) {
        int64_t at;
        memcpy(&at, a, 8);
        memcpy(o, (const char *)s->buffers[x->buf] + (size_t)at * lane_size(x->dt), lane_size(x->dt));
        s->scalar[i] = 1;
      } else {
        ops->gather(x->dt, s->nl, o, s->buffers[x->buf], a);
        s->scalar[i] = 0;
      }
      return;
    case TE_REDUCE: eval_reduce(s, k, i); return;
    case TE_NEG: case TE_ABS: case TE_NOT: ops->unary(x->op, x->dt, n, o, a); break;
    case TE_CAST: ops->cast(x->dt, x->odt, n, o, a); break;
    case TE_CALL1: case TE_CALL2: ops->call((kiln_lanes_fn)x->fn, n, o, a, as, b, bs); break;
    case TE_ADD: case TE_SUB: case TE_MUL: case TE_DIV: case TE_MOD: case TE_MIN: case TE_MAX:
      ops->binary(x->op, x->dt, n, o, a, as, b, bs);
      break;
    case TE_LT: case TE_LE: case TE_EQ: case TE_NE: ops->compare(x->op, x->odt, n, o, a, as, b, bs); break;
    case TE_AND: case TE_OR: case TE_XOR: ops->logic(x->op, n, o, a, as, b, bs); break;
    case TE_SELECT: ops->select(x->dt, n, o, a, as, b, bs, c, cs); break;
    case IK_QUANT: ops->quantize(x->dt, n, o, a, as, b, bs, c, cs); break;
    case IK_MULADD: ops->muladd(n, o, a, as, b, bs, c, cs); break;
    case IK_CLAMP: {
      float lo, hi;
      memcpy(&lo, x->bytes, 4);
      memcpy(&hi, x->bytes + 4, 4);
      ops->clamp(n, o, a, lo, hi);
      break;
    }
  }
  s->scalar[i] = (uint8_t)all_scalar;
  if (rows_of >= 0) {
    s->rowk[i] = 1;
    s->rows[i] = s->rows[rows_of];
  }
}

static void eval_list(ik_state *s, const kiln_interp_kernel *k, int start, int n) {
  for (int j = 0; j < n; j++) {
    int i = k->lists[start + j];
    if (valid(s, k, i)) continue;
    eval_ins(s, k, i);
    s->at[i] = ++s->tick;
  }
}

/* The output loops' variables for the block of n elements from flat
 * index e (within one row of the loops above vary_level). */
static void set_block_vars(ik_state *s, const kiln_interp_kernel *k, int64_t e, int n) {
  int vl = k->vary_level;
  s->n_vary = 0;
  s->nl = n;
  s->flat0 = e;
  s->whole = true; /* the loops from vary_level in, the outermost not wrapping within a block */
  for (int l = 0; l < k->rank; l++) {
    int v = k->loop_var[l];
    /* (a loop of one iteration is one value: a reduction under it is then
     * one value too, not rows of one lane: ArgMax of a [1, 16] row) */
    if (l < vl || k->extents[l] == 1) {
      set_scalar_var(s, v, (e / k->stride[l]) % k->extents[l]);
      continue;
    }
    s->vary[s->n_vary++] = v;
    set_varying_var(s, v, 0, k->stride[l], k->extents[l]);
  }
}

/* Evaluates output elements [e0, e1) into out (elements of the output's
 * dtype, out[0] being element e0). sum, when not NULL: the tensorized
 * call's result for the same elements (f32, or int32 for an integer
 * call), standing for its sum. */
static void eval_range(ik_state *s, const kiln_interp_kernel *k, int64_t e0, int64_t e1, void *out, const void *sum) {
  size_t size = lane_size(k->buf_dtype[k->out_buf]);
  for (int64_t e = e0; e < e1;) {
    int64_t n = e1 - e;
    if (n > L) n = L;
    int64_t to_row_end = k->row_len - e % k->row_len;
    if (n > to_row_end) n = to_row_end;
    int64_t whole_rows = L / k->row_run * k->row_run - e % k->row_run;
    if (n > whole_rows) n = whole_rows;
    set_block_vars(s, k, e, (int)n);
    if (sum) {
      s->val[k->sum] = (const char *)sum + (size_t)(e - e0) * 4; /* f32 or int32 sums, read in place */
      s->scalar[k->sum] = 0;
      s->rowk[k->sum] = 0;
      s->at[k->sum] = ++s->tick;
    }
    eval_list(s, k, k->value_list, k->n_value_list);
    k->ops->store(k->buf_dtype[k->out_buf], (int)n, (char *)out + (size_t)(e - e0) * size, 1, lanes_in(s, k->value),
                  s->scalar[k->value]);
    e += n;
  }
}

/* ---- launches --------------------------------------------------------------------- */

/* Launch ids: unique across threads (a thread's cached state is matched by
 * kernel and id). Each thread takes a block of 2^40 ids from the shared
 * counter once and counts on locally: a locked add per launch cost a
 * decoder step's dozen tiny kernels more than their arithmetic. */
static atomic_uint_fast64_t launch_blocks;
static _Thread_local uint64_t launch_last;

static uint64_t next_launch_id(void) {
  uint64_t id = launch_last + 1;
  if (!launch_last || !(id & ((UINT64_C(1) << 40) - 1))) id = ((uint64_t)atomic_fetch_add(&launch_blocks, 1) + 1) << 40 | 1;
  launch_last = id;
  return id;
}

typedef struct ik_launch {
  const kiln_interp_kernel *k;
  const kiln_rt *rt;
  void *const *buffers;
  uint64_t id;
  int64_t batch;        /* GEMM: the batch index of a call */
  const void *packed_b; /* GEMM: B packed once */
  int64_t batch_elems;  /* GEMM: output elements per batch index */
  bool deferred;        /* GEMM: the epilogue runs after every batch, over the whole output */
} ik_launch;

static ik_state *launch_state(const ik_launch *x) {
  ik_state *s = state_for(x->k, x->id, x->buffers);
  if (!s) x->rt->fail(x->rt, "cpu interpreter: out of memory for a thread's values");
  return s;
}

static void plain_body(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ik_launch *x = ctx;
  const kiln_interp_kernel *k = x->k;
  ik_state *s = launch_state(x);
  if (!s) return;
  int64_t e0 = begin * k->inner, e1 = end * k->inner;
  eval_range(s, k, e0, e1, (char *)x->buffers[k->out_buf] + (size_t)e0 * lane_size(k->buf_dtype[k->out_buf]),
             NULL);
}

/* A tile of a tensorized call's output, in place: element (i, j) is output
 * element base + (m0 + i) * row + n0 + j. to_output: the tile is the
 * runtime's scratch (an integer convolution whose output elements are not
 * 4 bytes), the elements go to the output buffer. */
static void tile_epilogue(const ik_launch *x, int64_t base, int64_t row, void *c, int64_t ldc, int64_t m0, int64_t n0,
                          int64_t mb, int64_t nb, bool to_output) {
  ik_state *s = launch_state(x);
  if (!s) return;
  size_t out_size = lane_size(x->k->buf_dtype[x->k->out_buf]);
  /* Rows that follow each other in both the output and the tile (a
   * convolution over 1x1 planes calls with rows of one element) are one
   * range: eval_range blocks it by the nest's rows itself. */
  if (mb > 1 && row == nb && ldc == nb) {
    nb *= mb;
    mb = 1;
  }
  for (int64_t i = 0; i < mb; i++) {
    int64_t e = base + (m0 + i) * row + n0;
    char *tile_row = (char *)c + (size_t)(i * ldc) * 4;
    eval_range(s, x->k, e, e + nb, to_output ? (char *)x->buffers[x->k->out_buf] + (size_t)e * out_size : tile_row,
               tile_row);
  }
}

static void gemm_epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const ik_launch *x = vctx;
  tile_epilogue(x, x->batch * x->batch_elems, x->k->gemm.n, c, ldc, m0, n0, mb, nb, false);
}

static void gemm_iepilogue(void *vctx, int32_t *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const ik_launch *x = vctx;
  tile_epilogue(x, x->batch * x->batch_elems, x->k->gemm.n, c, ldc, m0, n0, mb, nb, false);
}

static void conv_epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  tile_epilogue((const ik_launch *)e->buffers, e->base, e->row, c, ldc, m0, n0, mb, nb, false);
}

static void conv_iepilogue(void *vctx, int32_t *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  const ik_launch *x = (const ik_launch *)e->buffers;
  tile_epilogue(x, e->base, e->row, c, ldc, m0, n0, mb, nb, lane_size(x->k->buf_dtype[x->k->out_buf]) != 4);
}

/* A native convolution epilogue a routine could not apply in registers:
 * y += add, then the clip (render_conv.c's native_epilogue). */
static void conv_native_epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  const ik_launch *x = (const ik_launch *)e->buffers;
  const kiln_conv_call *cc = &x->k->conv;
  const kiln_lanes_ops *ops = x->k->ops;
  for (int64_t i = 0; i < mb; i++) {
    float *row = c + i * ldc;
    for (int64_t j0 = 0; j0 < nb; j0 += INT32_MAX) {
      int n = (int)(nb - j0 < INT32_MAX ? nb - j0 : INT32_MAX);
      if (cc->add_buf >= 0) {
        const float *add = (const float *)x->buffers[cc->add_buf] + e->base + (m0 + i) * e->row + n0 + j0;
        ops->binary(TE_ADD, KILN_DTYPE_F32, n, row + j0, row + j0, 0, add, 0);
      }
      if (cc->clip) ops->clip(n, row + j0, row + j0, cc->lo, cc->hi);
    }
  }
}

/* One operand's matrix at a batch index (elements of its buffer's dtype). */
static const void *operand_at(const kiln_interp_kernel *k, const kiln_gemm_call *g, int buf, int64_t off,
                              const int64_t *stride, void *const *buffers, int64_t batch) {
  int64_t at = off;
  for (int i = g->n_batch - 1; i >= 0; i--) {
    int l = g->batch_loops[i];
    at += stride[i] * (batch % k->extents[l]);
    batch /= k->extents[l];
  }
  return (const char *)buffers[buf] + (size_t)at * lane_size(k->buf_dtype[buf]);
}

/* An integer call's zero point: the constant, or the 8-bit element of its buffer. */
static int32_t zero_point(void *const *buffers, int buf, bool is_signed, int64_t zp) {
  if (buf < 0) return (int32_t)zp;
  const void *p = (const char *)buffers[buf] + zp;
  return is_signed ? (int32_t) * (const int8_t *)p : (int32_t) * (const uint8_t *)p;
}

static void gemm_one(const ik_launch *x, void *pool, int64_t batch) {
  const kiln_interp_kernel *k = x->k;
  const kiln_gemm_call *g = &k->gemm;
  ik_launch one = *x;
  one.batch = batch;
  void *c = (char *)x->buffers[k->out_buf] + (size_t)(batch * g->m * g->n) * 4;
  /* The fields sgemm's and igemm's arguments share (render_gemm.c's). */
#define GEMM_ARGS(a, epi)                                                    \
  do {                                                                       \
    (a).trans_a = g->trans_a;                                                \
    (a).trans_b = g->trans_b;                                                \
    (a).m = g->m;                                                            \
    (a).n = g->n;                                                            \
    (a).k = g->k;                                                            \
    (a).a = operand_at(k, g, g->a_buf, g->a_off, g->a_stride, x->buffers, batch); \
    (a).lda = g->lda;                                                        \
    (a).b = operand_at(k, g, g->b_buf, g->b_off, g->b_stride, x->buffers, batch); \
    (a).ldb = g->ldb;                                                        \
    (a).packed_b = x->packed_b;                                              \
    (a).c = c;                                                               \
    (a).ldc = g->n;                                                          \
    if (k->has_epilogue && !x->deferred) {                                   \
      (a).epilogue = (epi);                                                  \
      (a).epilogue_ctx = &one;                                               \
    }                                                                        \
  } while (0)
  if (g->integer) {
    kiln_rt_igemm_args a = {0};
    a.a_signed = g->a_signed;
    a.b_signed = g->b_signed;
    a.a_zero = zero_point(x->buffers, g->a_zp_buf, g->a_zp_signed, g->a_zp);
    a.b_zero = zero_point(x->buffers, g->b_zp_buf, g->b_zp_signed, g->b_zp);
    GEMM_ARGS(a, gemm_iepilogue);
    x->rt->igemm(pool, &a);
    return;
  }
  kiln_rt_sgemm_args a = {0};
  a.alpha = 1.0f;
  GEMM_ARGS(a, gemm_epilogue);
  if (k->bias_buf >= 0) {
    a.bias = x->buffers[k->bias_buf];
    a.bias_axis = 2;
  }
#undef GEMM_ARGS
  x->rt->sgemm(pool, &a);
}

static void run_whole_epilogue(const ik_launch *x, float *y, int64_t numel);

static void gemm_batches(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ik_launch *x = ctx;
  for (int64_t b = begin; b < end; b++) gemm_one(x, NULL, b);
}

static void run_gemm(ik_launch *x) {
  const kiln_interp_kernel *k = x->k;
  const kiln_gemm_call *g = &k->gemm;
  const kiln_rt *rt = x->rt;
  /* A constant B that every batch index shares is packed once per launch
   * slot, as the generated kernel does. */
  x->batch_elems = g->m * g->n;
  if (k->pack_b && g->integer) {
    kiln_rt_igemm_args p = {0};
    p.trans_b = g->trans_b;
    p.k = g->k;
    p.n = g->n;
    p.b = (const char *)x->buffers[g->b_buf] + g->b_off;
    p.ldb = g->ldb;
    p.b_signed = g->b_signed;
    p.b_zero = zero_point(x->buffers, g->b_zp_buf, g->b_zp_signed, g->b_zp);
    x->packed_b = rt->igemm_packed_b(rt, &p, (kiln_rt_state **)x->buffers[k->n_bufs]);
  } else if (k->pack_b) {
    kiln_rt_sgemm_args p = {0};
    p.trans_b = g->trans_b;
    p.m = g->m;
    p.k = g->k;
    p.n = g->n;
    p.b = (const float *)x->buffers[g->b_buf] + g->b_off;
    p.ldb = g->ldb;
    x->packed_b = rt->sgemm_packed_b(rt, &p, (kiln_rt_state **)x->buffers[k->n_bufs]);
  }
  /* The epilogue per tile is one range per tile row: where the rows are
   * short or the whole output stays in cache it runs after the products,
   * over the whole output in long ranges (attention's 16x16 heads: per
   * tile, 3x the compiled kernel). */
  int64_t numel = g->batch * g->m * g->n;
  x->deferred = k->has_epilogue && (numel <= (INT64_C(1) << 18) || g->n < 128);
  if (g->batch > 1 && g->batch >= 2 * (int64_t)rt->n_threads && (double)g->m * (double)g->n * (double)g->k < (double)(1 << 20)) {
    rt->parallel_for(rt->pool, g->batch, 1, gemm_batches, x);
  } else {
    for (int64_t b = 0; b < g->batch; b++) gemm_one(x, rt->pool, b);
  }
  if (x->deferred) run_whole_epilogue(x, x->buffers[k->out_buf], numel);
}

/* A tag's window geometry into a runtime call's args (conv and pool tags
 * and args share the field names). */
#define COPY_WINDOW(a, t)                      \
  do {                                         \
    for (int i_ = 0; i_ < (t)->nsp; i_++) {    \
      (a).in[i_] = (t)->in[i_];                \
      (a).out[i_] = (t)->out[i_];              \
      (a).kernel[i_] = (t)->kernel[i_];        \
      (a).stride[i_] = (t)->stride[i_];        \
      (a).dilation[i_] = (t)->dilation[i_];    \
      (a).pad_begin[i_] = (t)->pad_begin[i_];  \
    }                                          \
  } while (0)

/* The epilogue over a whole f32 output in place, chunks of elements over the pool. */
#define WHOLE_EPILOGUE_CHUNK 8192
typedef struct whole_epilogue {
  const ik_launch *x;
  float *y;
  int64_t numel;
} whole_epilogue;

static void whole_epilogue_chunks(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const whole_epilogue *w = ctx;
  for (int64_t c = begin; c < end; c++) {
    int64_t e0 = c * WHOLE_EPILOGUE_CHUNK, n = w->numel - e0 < WHOLE_EPILOGUE_CHUNK ? w->numel - e0 : WHOLE_EPILOGUE_CHUNK;
    tile_epilogue(w->x, 0, w->numel, w->y + e0, w->numel, 0, e0, 1, n, false);
  }
}

/* The epilogue over the whole output y (numel elements), in place: y
 * holds the routine's sums (f32, or int32). */
static void run_whole_epilogue(const ik_launch *x, float *y, int64_t numel) {
  whole_epilogue w = {x, y, numel};
  x->rt->parallel_for(x->rt->pool, (numel + WHOLE_EPILOGUE_CHUNK - 1) / WHOLE_EPILOGUE_CHUNK, 1, whole_epilogue_chunks,
                      &w);
}

static void run_conv(ik_launch *x) {
  const kiln_interp_kernel *k = x->k;
  const te_conv_tag *t = &k->conv_tag;
  const kiln_conv_call *cc = &k->conv;
  bool native = cc->native && (cc->add_buf >= 0 || cc->clip);
  kiln_rt_conv_args a = {0};
  a.nsp = t->nsp;
  a.transposed = t->transposed;
  a.n = t->n;
  a.ci = t->ci;
  a.co = t->co;
  a.group = t->group;
  COPY_WINDOW(a, t);
  if (t->integer) { /* ConvInteger: render_conv.c's integer form */
    a.integer = true;
    a.xq = x->buffers[t->x_buf];
    a.wq = x->buffers[t->w_buf];
    if (lane_size(k->buf_dtype[k->out_buf]) == 4) a.yq = x->buffers[k->out_buf];
    a.x_signed = k->buf_dtype[t->x_buf] == KILN_DTYPE_I8;
    a.w_signed = k->buf_dtype[t->w_buf] == KILN_DTYPE_I8;
    if (t->x_zp_buf >= 0) a.x_zero = zero_point(x->buffers, t->x_zp_buf, k->buf_dtype[t->x_zp_buf] == KILN_DTYPE_I8, 0);
    if (t->w_zp_buf >= 0) {
      a.w_zero = x->buffers[t->w_zp_buf];
      a.w_zero_signed = k->buf_dtype[t->w_zp_buf] == KILN_DTYPE_I8;
      a.w_zero_count = t->w_zp_count;
    }
  } else {
    a.x = x->buffers[t->x_buf];
    a.w = x->buffers[t->w_buf];
    a.y = x->buffers[k->out_buf];
  }
  a.w_constant = cc->w_constant;
  a.y_cn = cc->y_cn;
  if (cc->native && cc->bias_buf >= 0) a.bias = x->buffers[cc->bias_buf];
  if (cc->native && cc->add_buf >= 0) a.add = x->buffers[cc->add_buf];
  if (cc->native && cc->clip) {
    a.clip = true;
    a.lo = cc->lo;
    a.hi = cc->hi;
  }
  /* An f32 output's epilogue runs after the routine over the whole output
   * in large ranges: per tile (a depthwise routine's tiles are rows of a
   * plane) the interpreter's per-range cost dominated (nhwc_tf's
   * Conv+HardSwish: 8x the compiled kernel's time). */
  /* So is an integer convolution's whose output has 4-byte elements (its
   * int32 sums are written there: ConvInteger + DequantizeLinear). */
  bool deferred = k->has_epilogue && !cc->native && (!t->integer || a.yq);
  if (native) a.epilogue = conv_native_epilogue;
  else if (k->has_epilogue && !cc->native && t->integer && !a.yq) a.iepilogue = conv_iepilogue;
  if (a.epilogue || a.iepilogue) a.epilogue_buffers = (void *const *)x;
  x->rt->conv(x->rt, &a, (kiln_rt_state **)x->buffers[k->n_bufs]);
  if (deferred) {
    int64_t numel = t->n * t->co;
    for (int i = 0; i < t->nsp; i++) numel *= t->out[i];
    run_whole_epilogue(x, t->integer ? (float *)a.yq : a.y, numel);
  }
}

/* A pool of an output that is not f32: the plane in the routine's scratch,
 * the elements stored into the output. */
static void pool_scratch_epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const kiln_rt_epilogue_ctx *e = vctx;
  tile_epilogue((const ik_launch *)e->buffers, e->base, e->row, c, ldc, m0, n0, mb, nb, true);
}

/* A tensorized pool (render_conv.c's render_c_pool): the runtime's
 * routine, the interpreter as its per-plane epilogue. */
static void run_pool(ik_launch *x) {
  const kiln_interp_kernel *k = x->k;
  const te_pool_tag *t = &k->pool_tag;
  kiln_rt_pool_args a = {.nsp = t->nsp, .max = t->max, .count_include_pad = t->count_include_pad, .planes = t->n * t->c};
  COPY_WINDOW(a, t);
  for (int i = 0; i < t->nsp; i++) a.pad_end[i] = t->pad_end[i];
  a.x = x->buffers[t->x_buf];
  a.y = k->pool.scratch ? NULL : x->buffers[k->out_buf];
  /* An f32 output's epilogue after the routine, over the whole output (a
   * global pool's planes are one element each: per plane, the
   * interpreter's per-range cost was 30x the pool's). */
  if (k->has_epilogue && k->pool.scratch) {
    a.epilogue = pool_scratch_epilogue;
    a.epilogue_buffers = (void *const *)x;
  }
  x->rt->pooling(x->rt, &a);
  if (k->has_epilogue && !k->pool.scratch) {
    int64_t numel = a.planes;
    for (int i = 0; i < t->nsp; i++) numel *= a.out[i];
    run_whole_epilogue(x, a.y, numel);
  }
}

/* A tensorized resize (render_conv.c's render_c_resample), as run_pool. */
static void run_resample(ik_launch *x) {
  const kiln_interp_kernel *k = x->k;
  const te_resample_tag *t = &k->resample_tag;
  kiln_rt_resample_args a = {.nsp = t->rank - 2, .planes = t->out[0] * t->out[1], .n_axes = t->n_axes};
  for (int i = 0; i < t->rank - 2; i++) {
    a.in[i] = t->in[2 + i];
    a.out[i] = t->out[2 + i];
  }
  for (int j = 0; j < t->n_axes; j++) {
    a.axis[j] = t->axis[j] - 2;
    a.taps[j] = t->taps[j];
    a.index[j] = x->buffers[t->index_buf[j]];
    a.weight[j] = t->weight_buf[j] >= 0 ? x->buffers[t->weight_buf[j]] : NULL;
  }
  a.x = x->buffers[t->x_buf];
  a.y = x->buffers[k->out_buf];
  if (k->has_epilogue) {
    a.epilogue = conv_epilogue;
    a.epilogue_buffers = (void *const *)x;
  }
  x->rt->resample(x->rt, &a);
}

/* ---- movement kernels ---------------------------------------------------------------- */

/* A kernel whose every output element is one input element or a
 * constant, picked by index arithmetic alone (a transpose, a concat, a
 * slice, a channel shuffle, a pad), computes the same index expressions
 * at every launch: interpreted lane by lane they cost ten times the copy
 * (RAFT's correlation transposes: 34 ns an element). Their result is a
 * fixed map from output to input positions, so the first launch works it
 * out once, by running a probe of the program (the loads give tagged
 * indices in place of values, selections pick among them), and keeps it
 * as runs of strided copies; every launch after is those copies. */
typedef struct ik_run {
  int64_t dst, src, stride; /* output element, the leaf's element, its step per output element */
  int32_t len, leaf;        /* leaf: a buffer, or n_bufs + a constant */
} ik_run;

typedef struct ik_move {
  ik_run *runs;
  int64_t n_runs;
  int64_t *chunk; /* n_chunks + 1 run indices: the parallel split */
  int64_t n_chunks;
  unsigned char (*consts)[8];
  int n_consts;
  int *leaves;    /* the buffers the runs read (an aliased output sends a launch to the program) */
  int n_leaves;
  int64_t contiguous; /* elements in runs of step 1 (copies) or fills */
  bool index_heavy;   /* the program selects among inputs or divides indices (a concat, a reshape's view) */
} ik_move;

#define MOVE_PROBE_ELEMS (INT64_C(1) << 22) /* the probe's tags per chunk: 8 bytes an output element */
#define MOVE_MAX_ELEMS (INT64_C(1) << 30)   /* (the runs' output indices are int64, their lengths int32) */
#define MOVE_RUN_MAX 65536                /* elements of one run (long copies split across threads) */
#define MOVE_CHUNK 16384                  /* elements a thread copies at least */
#define MOVE_PREFERRED_RUN 8              /* elements a run averages where runs beat compiled code */

static void move_free(ik_move *m) {
  if (!m) return;
  free(m->runs);
  free(m->chunk);
  free(m->consts);
  free(m->leaves);
  free(m);
}

enum { ROLE_DATA = 1, ROLE_INDEX = 2 };

/* Whether k is a movement kernel: from the output's value down, only
 * selections, loads and constants of the output's dtype (the data), and
 * under the selections' conditions and the loads' indices no load or
 * reduction (nothing that depends on the data). Instructions come after
 * their operands, so one sweep from the last marks every role. */
static bool move_check(const kiln_interp_kernel *k) {
  if (k->gemm.ok || k->conv.ok || k->pool.ok || k->resample.ok || k->sum >= 0 || k->parallel_total <= 0 ||
      k->value < 0)
    return false;
  int64_t total = k->parallel_total * k->inner;
  if (total < 1 || total > MOVE_MAX_ELEMS) return false;
  kiln_dtype dt = k->buf_dtype[k->out_buf];
  unsigned char *role = calloc((size_t)k->n_ins + 1, 1);
  if (!role) return false;
  role[k->value] = ROLE_DATA;
  bool ok = true, any_load = false;
  for (int i = k->n_ins - 1; i >= 0 && ok; i--) {
    const ik_ins *x = &k->ins[i];
    if (role[i] == (ROLE_DATA | ROLE_INDEX)) ok = false;
    else if (role[i] == ROLE_DATA) {
      if (x->dt != dt || (x->op != TE_LOAD && x->op != TE_CONST && x->op != TE_SELECT)) ok = false;
      else if (x->op == TE_SELECT) {
        role[x->a] |= ROLE_INDEX;
        role[x->b] |= ROLE_DATA;
        role[x->c] |= ROLE_DATA;
      } else if (x->op == TE_LOAD) {
        any_load = true;
        if (x->aff < 0) role[x->a] |= ROLE_INDEX;
        for (int t = 0; t < x->n_aff; t++)
          if (k->aff_var[x->aff + t] < 0) role[-1 - k->aff_var[x->aff + t]] |= ROLE_INDEX;
      }
    } else if (role[i] == ROLE_INDEX) {
      if (x->op == TE_LOAD || x->op == TE_REDUCE) ok = false;
      const int ops[3] = {x->a, x->b, x->c};
      for (int j = 0; j < 3; j++)
        if (ops[j] >= 0) role[ops[j]] |= ROLE_INDEX;
    }
  }
  free(role);
  return ok && any_load;
}

/* The probe of movement kernel k: its program with the data's
 * instructions made int64 tags (interp's eval_probe_load; constants tag
 * n_bufs + their place in m->consts). Shares k's tables but ins,
 * buf_dtype and slot_off. */
static kiln_interp_kernel *move_probe(const kiln_interp_kernel *k, ik_move *m) {
  kiln_interp_kernel *p = malloc(sizeof *p);
  if (!p) return NULL;
  *p = *k;
  p->move_eligible = false;
  p->move = NULL;
  p->probe = true;
  p->n_memo = 0;
  p->ins = malloc((size_t)k->n_ins * sizeof *p->ins);
  p->buf_dtype = malloc((size_t)(k->n_bufs + 1) * sizeof *p->buf_dtype);
  p->slot_off = malloc(((size_t)k->n_ins + 1) * sizeof *p->slot_off);
  m->consts = malloc(((size_t)k->n_ins + 1) * sizeof *m->consts);
  unsigned char *data = calloc((size_t)k->n_ins + 1, 1);
  if (!p->ins || !p->buf_dtype || !p->slot_off || !m->consts || !data) {
    free(p->ins);
    free(p->buf_dtype);
    free(p->slot_off);
    free(data);
    free(p);
    return NULL;
  }
  memcpy(p->ins, k->ins, (size_t)k->n_ins * sizeof *p->ins);
  memcpy(p->buf_dtype, k->buf_dtype, (size_t)(k->n_bufs + 1) * sizeof *p->buf_dtype);
  p->buf_dtype[k->out_buf] = KILN_DTYPE_I64;
  data[k->value] = 1;
  for (int i = k->n_ins - 1; i >= 0; i--) {
    ik_ins *x = &p->ins[i];
    if (!data[i]) continue;
    if (x->op == TE_SELECT) data[x->b] = data[x->c] = 1;
    if (x->op == TE_CONST) {
      memcpy(m->consts[m->n_consts], x->bytes, 8);
      int64_t tag = (int64_t)(k->n_bufs + m->n_consts++ + 1) << MOVE_TAG_SHIFT;
      memcpy(x->bytes, &tag, 8);
    }
    x->dt = KILN_DTYPE_I64;
  }
  free(data);
  p->slot_bytes = 0;
  for (int i = 0; i < k->n_ins; i++) {
    size_t lane = p->ins[i].op == TE_VAR ? 8 : lane_size(p->ins[i].dt);
    p->slot_off[i] = p->slot_bytes;
    p->slot_bytes += (size_t)L * (lane < 4 ? 4 : lane);
  }
  return p;
}

static void move_probe_free(kiln_interp_kernel *p) {
  free(p->ins);
  free(p->buf_dtype);
  free(p->slot_off);
  free(p);
}

/* The runs of tags[0, n) (one per output element, from element e0 on),
 * appended to m's: each as long as the leaf's index keeps one step (a
 * run ends where a probe chunk does). False where an index is outside
 * its buffer (a program the probe cannot vouch for) or the runs get
 * short: more than max_runs in all (a per-element gather: the program is
 * no slower). */
static bool move_runs_add(const kiln_interp_kernel *k, ik_move *m, const int64_t *tags, int64_t e0, int64_t n,
                          int64_t *cap, int64_t max_runs, bool *used) {
  const int64_t mask = (INT64_C(1) << MOVE_TAG_SHIFT) - 1;
  int n_leaf = k->n_bufs + m->n_consts;
  for (int64_t e = 0; e < n;) {
    int64_t t = tags[e], leaf = (t >> MOVE_TAG_SHIFT) - 1, off = t & mask;
    if (t < 0 || leaf < 0 || leaf >= n_leaf || (leaf < k->n_bufs && off >= k->buf_numel[leaf])) return false;
    int64_t stride = 0, len = 1;
    if (leaf < k->n_bufs && e + 1 < n && (tags[e + 1] >> MOVE_TAG_SHIFT) - 1 == leaf)
      stride = (tags[e + 1] & mask) - off;
    while (e + len < n && len < MOVE_RUN_MAX && tags[e + len] == t + len * stride) len++;
    if (leaf < k->n_bufs) {
      int64_t last = off + (len - 1) * stride;
      if (last < 0 || last >= k->buf_numel[leaf]) return false;
      used[leaf] = true;
    }
    if (m->n_runs == max_runs) return false;
    if (m->n_runs == *cap) {
      int64_t c = *cap ? 2 * *cap : 1024;
      if (c > max_runs) c = max_runs;
      ik_run *r = realloc(m->runs, (size_t)c * sizeof *r);
      if (!r) return false;
      m->runs = r;
      *cap = c;
    }
    m->runs[m->n_runs++] = (ik_run){.dst = e0 + e, .src = off, .stride = stride, .len = (int32_t)len,
                                    .leaf = (int32_t)leaf};
    e += len;
  }
  return true;
}

/* The leaves the runs read and the parallel split, once every run is in. */
static bool move_finish(const kiln_interp_kernel *k, ik_move *m, const bool *used) {
  m->leaves = malloc(((size_t)k->n_bufs + 1) * sizeof *m->leaves);
  if (!m->leaves) return false;
  for (int b = 0; b < k->n_bufs; b++)
    if (used[b]) m->leaves[m->n_leaves++] = b;
  /* The parallel split: chunks of at least MOVE_CHUNK elements. */
  int64_t n = m->n_runs;
  m->chunk = malloc((size_t)(n + 1) * sizeof *m->chunk);
  if (!m->chunk) return false;
  for (int i = 0; i < k->n_ins && !m->index_heavy; i++) {
    const ik_ins *x = &k->ins[i];
    m->index_heavy = x->op == TE_SELECT || (x->op == TE_LOAD && x->aff < 0);
    for (int t = 0; x->op == TE_LOAD && t < x->n_aff; t++) m->index_heavy |= k->aff_div[x->aff + t] != 0;
  }
  int64_t acc = 0;
  m->chunk[0] = 0;
  for (int64_t r = 0; r < n; r++) {
    if (m->runs[r].stride == 1 || m->runs[r].leaf >= k->n_bufs) m->contiguous += m->runs[r].len;
    acc += m->runs[r].len;
    if (acc >= MOVE_CHUNK || r == n - 1) {
      m->chunk[++m->n_chunks] = r + 1;
      acc = 0;
    }
  }
  return true;
}

/* Works out movement kernel k's runs (its first launch, under
 * move_lock): MOVE_READY, or MOVE_NONE where it cannot. The probe runs
 * in chunks of MOVE_PROBE_ELEMS output elements (its tags: 8 bytes an
 * element); the runs kept must average 4 elements, 16 past
 * MOVE_PROBE_ELEMS (RetinaNet's head concatenation, 11M elements in runs
 * of 91: 2.1 s interpreted, 316 ms compiled). */
/* One thread's share of a probe chunk: tags of output elements
 * [e0 + begin * MOVE_PROBE_PART, ...) (ctx: move_probe_part). */
typedef struct move_probe_part {
  const kiln_interp_kernel *p;
  uint64_t launch;
  int64_t e0, n;
  int64_t *tags;
  atomic_bool failed;
} move_probe_part;

#define MOVE_PROBE_PART 65536

static void move_probe_body(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  move_probe_part *w = ctx;
  ik_state *s = state_for(w->p, w->launch, NULL);
  if (!s) {
    atomic_store(&w->failed, true);
    return;
  }
  int64_t a = begin * MOVE_PROBE_PART, b = end * MOVE_PROBE_PART < w->n ? end * MOVE_PROBE_PART : w->n;
  eval_range(s, w->p, w->e0 + a, w->e0 + b, w->tags + a, NULL);
  s->k = NULL; /* the probe is freed before this thread's state is used again */
}

static int move_build(kiln_interp_kernel *k, const kiln_rt *rt) {
  ik_move *m = calloc(1, sizeof *m);
  kiln_interp_kernel *p = m ? move_probe(k, m) : NULL;
  int64_t total = k->parallel_total * k->inner;
  int64_t chunk = total < MOVE_PROBE_ELEMS ? total : MOVE_PROBE_ELEMS;
  int64_t *tags = p ? malloc((size_t)chunk * sizeof *tags) : NULL;
  bool *used = calloc((size_t)k->n_bufs + 1, sizeof *used);
  bool ok = false;
  if (tags && used) {
    /* The tags of each chunk over the pool (a big concatenation's probe
     * is a first run's longest step), then its runs in order. */
    move_probe_part w = {.p = p, .launch = next_launch_id(), .tags = tags};
    int64_t cap = 0, max_runs = total / (total > MOVE_PROBE_ELEMS ? 16 : 4) + 1;
    ok = true;
    for (int64_t e0 = 0; e0 < total && ok; e0 += chunk) {
      w.e0 = e0;
      w.n = total - e0 < chunk ? total - e0 : chunk;
      rt->parallel_for(rt->pool, (w.n + MOVE_PROBE_PART - 1) / MOVE_PROBE_PART, 1, move_probe_body, &w);
      ok = !atomic_load(&w.failed) && move_runs_add(k, m, tags, e0, w.n, &cap, max_runs, used);
    }
    ok = ok && move_finish(k, m, used);
  }
  free(used);
  free(tags);
  if (p) move_probe_free(p);
  if (!ok) {
    move_free(m);
    return MOVE_NONE;
  }
  k->move = m;
  return MOVE_READY;
}

/* Whether this launch runs k as its runs (built at the first). */
static bool move_ready(const kiln_interp_kernel *k, const kiln_rt *rt, void *const *buffers) {
  if (!k->move_eligible) return false;
  kiln_interp_kernel *mk = (kiln_interp_kernel *)k; /* the lazily built runs: under the lock, once */
  int st = atomic_load(&mk->move_state);
  if (st == MOVE_UNTRIED) {
    pthread_mutex_lock(&mk->move_lock);
    st = atomic_load(&mk->move_state);
    if (st == MOVE_UNTRIED) {
      st = move_build(mk, rt);
      atomic_store(&mk->move_state, st);
    }
    pthread_mutex_unlock(&mk->move_lock);
  }
  if (st != MOVE_READY) return false;
  for (int j = 0; j < k->move->n_leaves; j++)
    if (buffers[k->move->leaves[j]] == buffers[k->out_buf]) return false; /* in place: the program's order */
  return true;
}

static void move_body(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ik_launch *x = ctx;
  const kiln_interp_kernel *k = x->k;
  const ik_move *m = k->move;
  kiln_dtype dt = k->buf_dtype[k->out_buf];
  size_t size = lane_size(dt);
  char *out = x->buffers[k->out_buf];
  bool stream = (size_t)k->buf_numel[k->out_buf] * size >= KILN_STREAM_COPY_MIN_DEST;
  for (int64_t r = m->chunk[begin]; r < m->chunk[end]; r++) {
    const ik_run *run = &m->runs[r];
    char *d = out + (size_t)run->dst * size;
    if (run->leaf >= k->n_bufs) {
      k->ops->fill(dt, run->len, d, m->consts[run->leaf - k->n_bufs]);
      continue;
    }
    const char *src = (const char *)x->buffers[run->leaf] + (size_t)run->src * size;
    if (run->stride == 1 && stream) kiln_memcpy_stream(d, src, (size_t)run->len * size);
    else if (run->stride == 1) memcpy(d, src, (size_t)run->len * size);
    else k->ops->strided(dt, run->len, d, src, run->stride);
  }
}

static void rows_body(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const ik_launch *x = ctx;
  const kiln_interp_rows *r = &x->k->rows;
  void *y = x->buffers[r->out_buf]; /* f32 rows; ArgMax/ArgMin: one i64 per row */
  const float *in = x->buffers[r->x_buf];
  if (r->kind == KILN_INTERP_ROWS_ARGMAX || r->kind == KILN_INTERP_ROWS_ARGMIN)
    x->k->ops->arg_rows(begin, end, r->n, y, in, r->kind == KILN_INTERP_ROWS_ARGMAX, r->last);
  else if (r->kind == KILN_INTERP_ROWS_LAYERNORM)
    x->k->ops->layernorm_rows(begin, end, r->n, y, in, x->buffers[r->scale_buf],
                              r->bias_buf >= 0 ? x->buffers[r->bias_buf] : NULL, r->eps);
  else
    x->k->ops->softmax_rows(begin, end, r->n, y, in, r->kind == KILN_INTERP_ROWS_LOG_SOFTMAX);
}

bool kiln_interp_kernel_is_movement(const kiln_interp_kernel *k) { return k->move_eligible; }

bool kiln_interp_kernel_run_moves(const kiln_interp_kernel *k, const kiln_rt *rt, void *const *buffers) {
  if (!move_ready(k, rt, buffers)) return false;
  /* Strided runs are no faster than a compiled transpose's loop
   * (nhwc_tf's NHWC-to-NCHW: 8% slower as runs), but are than one that
   * selects among inputs or divides its indices (RetinaNet's head). */
  int64_t total = k->parallel_total * k->inner;
  if (k->move->n_runs * MOVE_PREFERRED_RUN > total ||
      (!k->move->index_heavy && k->move->contiguous * 10 < total * 9))
    return false;
  ik_launch x = {.k = k, .rt = rt, .buffers = buffers, .id = next_launch_id()};
  rt->parallel_for(rt->pool, k->move->n_chunks, 1, move_body, &x);
  return true;
}

void kiln_interp_kernel_run(const kiln_interp_kernel *k, const kiln_rt *rt, void *const *buffers) {
  ik_launch x = {.k = k, .rt = rt, .buffers = buffers, .id = next_launch_id()};
  if (k->is_rows) {
    /* chunks of at least 16 KiB of rows: a thread's share is worth its wake-up */
    int64_t grain = k->rows.n >= 4096 ? 1 : 4096 / k->rows.n;
    rt->parallel_for(rt->pool, k->rows.rows, grain, rows_body, &x);
  } else if (k->gemm.ok) {
    run_gemm(&x);
  } else if (k->conv.ok) {
    run_conv(&x);
  } else if (k->pool.ok) {
    run_pool(&x);
  } else if (k->resample.ok) {
    run_resample(&x);
  } else if (move_ready(k, rt, buffers)) {
    rt->parallel_for(rt->pool, k->move->n_chunks, 1, move_body, &x);
  } else if (k->parallel_total > 0) {
    rt->parallel_for(rt->pool, k->parallel_total, k->grain, plain_body, &x);
  }
}
