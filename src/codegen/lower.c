/* Compute definitions: how each op's output element is built from its
 * inputs' elements. See lower.h for the op classes. */
#include "codegen/lower.h"

#include <math.h>
#include <stdio.h>

#include "ops/window.h"
#include "passes/passes.h"

/* ---- helpers --------------------------------------------------------------- */

static const kiln_value_def *input_def(const kiln_graph *g, const kiln_node *n, int i) {
  return i < n->n_inputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
}

static const kiln_tensor *const_input(const kiln_graph *g, const kiln_node *n, int i) {
  const kiln_value_def *v = input_def(g, n, i);
  return v ? (v->constant ? v->constant : v->known_value) : NULL;
}

static bool fully_known(const kiln_type *t) {
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

static bool has_zero_dim(const kiln_type *t) {
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] == 0) return true;
  return false;
}

/* Every present input broadcasts to the output (numpy rules, right
 * aligned): what te_at_broadcast assumes. A model whose declared output
 * says otherwise (PRelu with X and slope swapped) stays on ref, which
 * reports it. */
static bool inputs_broadcast_to_output(const kiln_graph *g, const kiln_node *n) {
  if (n->n_outputs < 1 || n->outputs[0] < 0) return false;
  const kiln_type *out = &g->values[n->outputs[0]].type;
  if (!fully_known(out)) return false;
  for (int i = 0; i < n->n_inputs; i++) {
    if (n->inputs[i] < 0) continue;
    const kiln_type *t = &g->values[n->inputs[i]].type;
    if (t->rank > out->rank) return false;
    for (int d = 0; d < t->rank; d++) {
      int64_t od = out->dims[out->rank - t->rank + d];
      if (t->dims[d] != 1 && t->dims[d] != od) return false;
    }
  }
  return true;
}

static bool is_f32(const kiln_value_def *v) { return v && v->type.kind == KILN_TYPE_TENSOR && v->type.dtype == KILN_DTYPE_F32; }

/* Dtypes the compute definitions compute in beyond f32: integers and
 * bool (what the C dialect stores; each device's claim narrows it to what
 * its dialect stores). f16 and bf16 are storage: the ops that move
 * elements (views, gathers, Where, Pad...) and Cast take them; arithmetic
 * on them runs in f32 between Casts (passes/widen_half.c). f64 stays on
 * ref. */
static bool plain_dtype(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F32: case KILN_DTYPE_I64: case KILN_DTYPE_I32: case KILN_DTYPE_I16: case KILN_DTYPE_I8:
    case KILN_DTYPE_U64: case KILN_DTYPE_U32: case KILN_DTYPE_U16: case KILN_DTYPE_U8: case KILN_DTYPE_BOOL:
    case KILN_DTYPE_F16: case KILN_DTYPE_BF16:
      return true;
    default: return false;
  }
}
static bool is_plain(const kiln_value_def *v) { return v && v->type.kind == KILN_TYPE_TENSOR && plain_dtype(v->type.dtype); }
static bool is_signed_int(kiln_dtype dt) {
  return dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_I32 || dt == KILN_DTYPE_I16 || dt == KILN_DTYPE_I8;
}
static bool is_integer(kiln_dtype dt) {
  return is_signed_int(dt) || dt == KILN_DTYPE_U64 || dt == KILN_DTYPE_U32 || dt == KILN_DTYPE_U16 ||
         dt == KILN_DTYPE_U8;
}
static kiln_dtype dtype_of(const kiln_value_def *v) { return v ? v->type.dtype : KILN_DTYPE_UNDEFINED; }

/* Reads a constant integer tensor (axes, shapes, starts...) into out. */
static bool const_ints(const kiln_tensor *t, int64_t *out, int max, int *n) {
  if (!t || !kiln_dtype_is_int(t->dtype) || t->numel > max) return false;
  for (int64_t i = 0; i < t->numel; i++) out[i] = kiln_load_i64(t->data, t->dtype, i);
  *n = (int)t->numel;
  return true;
}

static float const_scalar_f(const kiln_tensor *t, bool *ok) {
  *ok = t && t->numel == 1 && (kiln_dtype_is_float(t->dtype) || kiln_dtype_is_int(t->dtype));
  return *ok ? (float)kiln_load_f64(t->data, t->dtype, 0) : 0.0f;
}

/* ---- op tables ------------------------------------------------------------------ */

typedef enum unary_kind {
  U_RELU, U_SIGMOID, U_TANH, U_EXP, U_LOG, U_SQRT, U_NEG, U_ABS, U_ERF, U_RECIPROCAL, U_FLOOR, U_CEIL,
  U_LEAKY_RELU, U_ELU, U_HARD_SIGMOID, U_HARD_SWISH, U_CLIP, U_SOFTPLUS, U_SOFTSIGN, U_SIN, U_COS,
  U_IDENTITY, U_SELU, U_GELU, U_ROUND, U_NOT, U_ISNAN, U_ISINF, U_CAST,
  U_SIGN, U_SINH, U_COSH, U_TAN, U_CELU, U_THRESHOLDED_RELU, U_SHRINK,
} unary_kind;

typedef enum reduce_kind { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_SUMSQ, R_L1, R_L2, R_LOGSUMEXP, R_LOGSUM } reduce_kind;

/* The compute definition's kind of each op it covers; -1: not that kind. */
static int unary_kind_of(kiln_op_id id) {
  switch (id) {
    case KILN_OP_Relu: return U_RELU;
    case KILN_OP_Sigmoid: return U_SIGMOID;
    case KILN_OP_Tanh: return U_TANH;
    case KILN_OP_Exp: return U_EXP;
    case KILN_OP_Log: return U_LOG;
    case KILN_OP_Sqrt: return U_SQRT;
    case KILN_OP_Neg: return U_NEG;
    case KILN_OP_Abs: return U_ABS;
    case KILN_OP_Erf: return U_ERF;
    case KILN_OP_Reciprocal: return U_RECIPROCAL;
    case KILN_OP_Floor: return U_FLOOR;
    case KILN_OP_Ceil: return U_CEIL;
    case KILN_OP_LeakyRelu: return U_LEAKY_RELU;
    case KILN_OP_Elu: return U_ELU;
    case KILN_OP_HardSigmoid: return U_HARD_SIGMOID;
    case KILN_OP_HardSwish: return U_HARD_SWISH;
    case KILN_OP_Clip: return U_CLIP;
    case KILN_OP_Softplus: return U_SOFTPLUS;
    case KILN_OP_Softsign: return U_SOFTSIGN;
    case KILN_OP_Sin: return U_SIN;
    case KILN_OP_Cos: return U_COS;
    case KILN_OP_Identity: return U_IDENTITY;
    case KILN_OP_Selu: return U_SELU;
    case KILN_OP_kiln_Gelu: case KILN_OP_Gelu: return U_GELU; /* one formula (ONNX Gelu-20 runs kiln.Gelu's kernel) */
    case KILN_OP_Round: return U_ROUND;
    case KILN_OP_Dropout: return U_IDENTITY; /* inference mode (checked in kiln_lower_class) */
    case KILN_OP_Not: return U_NOT;
    case KILN_OP_IsNaN: return U_ISNAN;
    case KILN_OP_IsInf: return U_ISINF;
    case KILN_OP_Cast: return U_CAST;
    case KILN_OP_Sign: return U_SIGN;
    case KILN_OP_Sinh: return U_SINH;
    case KILN_OP_Cosh: return U_COSH;
    case KILN_OP_Tan: return U_TAN;
    case KILN_OP_Celu: return U_CELU;
    case KILN_OP_ThresholdedRelu: return U_THRESHOLDED_RELU;
    case KILN_OP_Shrink: return U_SHRINK;
    default: return -1;
  }
}

/* Binary ops and the variadic Max/Min/Sum/Mean (folded pairwise). */
static int binary_te_of(kiln_op_id id) {
  switch (id) {
    case KILN_OP_Add: case KILN_OP_Sum: case KILN_OP_Mean: return TE_ADD;
    case KILN_OP_Sub: return TE_SUB;
    case KILN_OP_Mul: return TE_MUL;
    case KILN_OP_Div: return TE_DIV;
    case KILN_OP_Mod: return TE_MOD; /* integers (the claim's rule) */
    case KILN_OP_Max: return TE_MAX;
    case KILN_OP_Min: return TE_MIN;
    case KILN_OP_Pow: return TE_CALL2;
    case KILN_OP_PRelu: return TE_SELECT;
    case KILN_OP_Equal: return TE_EQ;
    case KILN_OP_Less: case KILN_OP_Greater: return TE_LT; /* Greater: operands swapped */
    case KILN_OP_LessOrEqual: case KILN_OP_GreaterOrEqual: return TE_LE;
    case KILN_OP_And: return TE_AND;
    case KILN_OP_Or: return TE_OR;
    case KILN_OP_Xor: return TE_XOR;
    default: return -1;
  }
}

static int reduce_kind_of(kiln_op_id id) {
  switch (id) {
    case KILN_OP_ReduceSum: return R_SUM;
    case KILN_OP_ReduceMean: return R_MEAN;
    case KILN_OP_ReduceMax: return R_MAX;
    case KILN_OP_ReduceMin: return R_MIN;
    case KILN_OP_ReduceProd: return R_PROD;
    case KILN_OP_ReduceSumSquare: return R_SUMSQ;
    case KILN_OP_ReduceL1: return R_L1;
    case KILN_OP_ReduceL2: return R_L2;
    case KILN_OP_ReduceLogSumExp: return R_LOGSUMEXP;
    case KILN_OP_ReduceLogSum: return R_LOGSUM;
    default: return -1;
  }
}

static bool is_softmax(kiln_op_id id) { return id == KILN_OP_Softmax || id == KILN_OP_LogSoftmax; }

/* Views that read the input at the output's flat index. */
static bool is_reshaping_view(kiln_op_id id) {
  return id == KILN_OP_Reshape || id == KILN_OP_Flatten || id == KILN_OP_Squeeze || id == KILN_OP_Unsqueeze;
}

static bool is_injective_view(kiln_op_id id) {
  return is_reshaping_view(id) || id == KILN_OP_Transpose || id == KILN_OP_Expand || id == KILN_OP_Slice ||
         id == KILN_OP_Concat;
}

/* Reduced axes of a Reduce* node (attribute before opset 13/18, input after);
 * mask[i] set for reduced axes of an input of rank r. */
static bool reduce_axes(const kiln_graph *g, const kiln_node *n, int r, bool *mask) {
  int64_t axes[KILN_MAX_RANK];
  int na = 0;
  /* As the reference kernel reads them: ReduceSum takes axes as an input
   * from opset 13, the others from 18; before, the attribute (an extra
   * input is ignored), and noop_with_empty_axes does not exist. */
  bool from_input = kiln_node_is(n, KILN_OP_ReduceSum) ? n->opset >= 13 : n->opset >= 18;
  const kiln_attr *a = kiln_node_attr(n, "axes");
  if (!from_input && a && a->type == KILN_ATTR_INTS) {
    if (a->n > KILN_MAX_RANK) return false;
    for (int i = 0; i < a->n; i++) axes[i] = a->ints[i];
    na = a->n;
  } else if (from_input && n->n_inputs > 1 && n->inputs[1] >= 0) {
    if (!const_ints(const_input(g, n, 1), axes, KILN_MAX_RANK, &na)) return false;
  }
  bool noop = from_input && kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
  for (int i = 0; i < r; i++) mask[i] = na == 0 && !noop;
  for (int i = 0; i < na; i++) {
    int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
    if (ax < 0 || ax >= r) return false;
    mask[ax] = true;
  }
  return true;
}

/* Softmax family: the reduced axes (opset < 13 coerces to 2-D at `axis`). */
static bool softmax_axes(const kiln_node *n, int r, bool *mask) {
  int64_t axis = kiln_attr_int(n, "axis", n->opset < 13 ? 1 : -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return false;
  for (int i = 0; i < r; i++) mask[i] = n->opset < 13 ? i >= axis : i == axis;
  return true;
}

/* Reductions may be inlined into consumers only over trailing axes: then the
 * reduction depends on outer loop indices alone and is computed once per
 * row. */
static bool trailing(const bool *mask, int r) {
  bool seen = false;
  for (int i = 0; i < r; i++) {
    if (mask[i]) seen = true;
    else if (seen) return false;
  }
  return true;
}

/* The op's own inference over the node's current input types agrees with
 * its output type. A declared output that says otherwise (a model error
 * that optimization can expose after inference ran: a folded shape, a
 * dropped node) would make a compute definition index its operands with
 * the wrong shape; ref runs such a node and reports it. */
static bool inference_agrees(const kiln_graph *g, const kiln_node *n) {
  if (!n->op->infer || n->n_inputs > 64 || n->n_outputs > 64) return false;
  kiln_type outs[64];
  kiln_status_t st = kiln_infer_node_outputs(g, n, outs);
  bool ok = st == NULL;
  kiln_status_free(st);
  const kiln_type *inf = &outs[0], *decl = &g->values[n->outputs[0]].type;
  if (ok && inf->kind == KILN_TYPE_TENSOR) {
    if (inf->dtype && inf->dtype != decl->dtype) ok = false;
    if (inf->rank >= 0 && inf->rank != decl->rank) ok = false;
    for (int d = 0; ok && d < inf->rank; d++) ok = inf->dims[d] < 0 || inf->dims[d] == decl->dims[d];
  }
  for (int i = 0; i < n->n_outputs; i++) kiln_type_clear(&outs[i]);
  return ok;
}

/* The scatter kernels below search, for each output element, the updates
 * that land on it: this many index reads per element at most, or that
 * many in all, before the search costs more than ref's one pass. */
#define SCATTER_MAX_SEARCH 16
#define SCATTER_MAX_PROBES ((int64_t)1 << 22)
/* ReverseSequence's lengths ride in its view's parameters (te_tensor.p, after two axes) */
#define REVSEQ_MAX_BATCH (4 * KILN_MAX_RANK - 2)
/* CumSum and CumProd: each element sums its axis under a mask, the same bound's way */
#define SCAN_MAX_SEARCH 64

/* GatherElements, ScatterElements and ScatterND: ref's shape rules
 * (ops/movement_index.c) hold, the indices are int32/int64 of a known
 * shape, constant ones in range (run-time ones: the plan checks them,
 * kiln_lower_runtime_indices), and a scatter's search is short. */
static const char *scatter_gather_problem(const kiln_graph *g, const kiln_node *n, kiln_op_id id) {
  const kiln_value_def *x = input_def(g, n, 0), *iv = input_def(g, n, 1);
  const kiln_value_def *u = id == KILN_OP_GatherElements ? NULL : input_def(g, n, 2);
  if (!is_plain(x) || (id != KILN_OP_GatherElements && (!u || dtype_of(u) != dtype_of(x))))
    return "dtype not computed by compiled kernels";
  if (!iv || (dtype_of(iv) != KILN_DTYPE_I64 && dtype_of(iv) != KILN_DTYPE_I32))
    return "indices of dtype other than int64 or int32";
  if (!fully_known(&iv->type) || (u && !fully_known(&u->type))) return "indices of a shape not known before running";
  int r = x->type.rank, q = iv->type.rank;
  const int64_t *xd = x->type.dims, *id_ = iv->type.dims;
  if (r < 1 || q < 1 || has_zero_dim(&x->type) || has_zero_dim(&iv->type)) return "a scalar or empty operand (ref reports it)";
  int64_t axis = 0, m = 0, search;
  int64_t bounds[KILN_MAX_RANK];
  int nb;
  if (id == KILN_OP_ScatterND) {
    m = id_[q - 1];
    if (m < 1 || m > r || q - 1 + r - m > KILN_MAX_RANK) return "an index depth out of range (ref reports it)";
    int64_t want[KILN_MAX_RANK];
    int wr = 0;
    for (int d = 0; d < q - 1; d++) want[wr++] = id_[d];
    for (int64_t d = m; d < r; d++) want[wr++] = xd[d];
    if (!kiln_shape_equal(u->type.rank, u->type.dims, wr, want)) return "updates of another shape (ref reports it)";
    search = kiln_shape_numel(q - 1, id_);
    nb = (int)m;
    for (int64_t k = 0; k < m; k++) bounds[k] = xd[k];
  } else {
    axis = kiln_attr_int(n, "axis", 0);
    if (axis < -r || axis >= r) return "an axis out of range (ref reports it)";
    if (axis < 0) axis += r;
    bool ok = q == r;
    for (int d = 0; ok && d < r; d++) ok = d == axis || id_[d] <= xd[d];
    if (!ok) return "indices that do not fit the data (ref reports it)";
    if (u && !kiln_shape_equal(u->type.rank, u->type.dims, q, id_)) return "updates of another shape (ref reports it)";
    search = id_[axis];
    nb = 1;
    bounds[0] = xd[axis];
  }
  if (id != KILN_OP_GatherElements) {
    const char *red = n->opset >= 16 ? kiln_attr_string(n, "reduction", "none") : "none";
    bool ints = is_integer(dtype_of(x));
    bool ok = !strcmp(red, "none") ||
              ((!strcmp(red, "add") || !strcmp(red, "mul")) && (ints || is_f32(x))) ||
              ((!strcmp(red, "min") || !strcmp(red, "max")) && ints);
    if (!ok) return "a reduction compiled kernels do not compute for this dtype (ref computes it)";
    if (search > SCATTER_MAX_SEARCH && kiln_shape_numel(r, xd) * search > SCATTER_MAX_PROBES)
      return "a scatter whose per-element search is long (ref applies it in one pass)";
  }
  const kiln_tensor *ind = const_input(g, n, 1);
  for (int64_t i = 0; ind && i < ind->numel; i++) {
    int64_t v = kiln_load_i64(ind->data, ind->dtype, i), dim = bounds[i % nb];
    if (v < -dim || v >= dim) return "an index out of range (ref reports it)";
  }
  return NULL;
}

/* Checks the dtypes and constant parameters a compute definition of this
 * op needs; NULL if they hold, else why not. */
static const char *claim_problem(const kiln_graph *g, const kiln_node *n, kiln_op_id id) {
  const kiln_value_def *in0 = input_def(g, n, 0);
  int uk = unary_kind_of(id);
  if (uk >= 0) {
    kiln_dtype dt = dtype_of(in0);
    switch ((unary_kind)uk) {
      case U_IDENTITY: if (!is_plain(in0)) return "dtype not computed by compiled kernels"; break;
      case U_NEG: case U_ABS: case U_RELU:
        if (!is_f32(in0) && !is_signed_int(dt)) return "dtype other than f32 or a signed integer";
        break;
      case U_NOT: if (dt != KILN_DTYPE_BOOL) return "dtype other than bool"; break;
      case U_CLIP: /* integers from opset 12 (their bounds: constants of x's dtype, read below) */
        if (!is_f32(in0) && !(is_integer(dt) && n->opset >= 12)) return "dtype other than f32 or an integer";
        break;
      case U_CAST: {
        kiln_dtype to = dtype_of(&g->values[n->outputs[0]]);
        /* u64 saturates differently from the other integers (ops/ref's rule): ref */
        if (!is_plain(in0) || !plain_dtype(to) || to == KILN_DTYPE_U64) return "a cast between dtypes compiled kernels do not compute";
        /* Halves convert through f32, which holds every integer of 16 bits
         * or fewer exactly; a wider one would round twice into bf16 (f16
         * overflows first). */
        bool wide = dt == KILN_DTYPE_I64 || dt == KILN_DTYPE_I32 || dt == KILN_DTYPE_U32 || dt == KILN_DTYPE_U64;
        if (to == KILN_DTYPE_BF16 && wide) return "a cast of a wide integer to bf16 (rounded once by ref)";
        break;
      }
      default: if (!is_f32(in0)) return "dtype other than f32"; break;
    }
    if (id == KILN_OP_Clip && n->opset >= 11)
      for (int i = 1; i < 3; i++)
        if (i < n->n_inputs && n->inputs[i] >= 0 && (!const_input(g, n, i) || const_input(g, n, i)->numel != 1))
          return "Clip bounds that are not constants";
    if (id == KILN_OP_Dropout && n->n_inputs > 2 && n->inputs[2] >= 0) {
      const kiln_tensor *tm = const_input(g, n, 2);
      if (!tm || kiln_load_i64(tm->data, tm->dtype, 0)) return "training-mode Dropout";
    }
    return NULL;
  }
  int bk = binary_te_of(id);
  if (bk >= 0) {
    if (n->opset < 7) return "legacy broadcast attributes";
    kiln_dtype dt = dtype_of(in0);
    for (int i = 0; i < n->n_inputs; i++) {
      const kiln_value_def *v = input_def(g, n, i);
      /* Pow of an f32 base takes an exponent of any integer dtype (opset 12+), converted to f32 */
      bool exponent = id == KILN_OP_Pow && i == 1 && dt == KILN_DTYPE_F32 && v && is_integer(dtype_of(v));
      if (!v || (dtype_of(v) != dt && !exponent) || !fully_known(&v->type)) return "inputs of different dtypes";
    }
    bool logic = bk == TE_AND || bk == TE_OR || bk == TE_XOR;
    bool compare = bk == TE_EQ || bk == TE_LT || bk == TE_LE;
    /* Integer Div and Mod by a constant with no 0 (ref's error to report)
     * and, signed, no -1 (INT_MIN / -1 traps in C; ref wraps); run-time
     * divisors stay on ref. Mod on floats (fmod=1) stays there too. */
    bool int_ok = id == KILN_OP_Add || id == KILN_OP_Sub || id == KILN_OP_Mul || id == KILN_OP_Max || id == KILN_OP_Min;
    if ((id == KILN_OP_Div || id == KILN_OP_Mod) && is_integer(dt)) {
      const kiln_tensor *d = const_input(g, n, 1);
      int_ok = d != NULL && n->n_inputs == 2;
      for (int64_t i = 0; int_ok && i < d->numel; i++) {
        int64_t v = kiln_load_i64(d->data, d->dtype, i);
        int_ok = v != 0 && (v != -1 || !is_signed_int(dt));
      }
      if (!int_ok) return "an integer division by a run-time divisor, or by 0 or -1 (ref computes or reports it)";
    }
    if (id == KILN_OP_Mod && !is_integer(dt)) return "Mod on a dtype other than an integer (ref computes it)";
    if (id == KILN_OP_Mod && kiln_attr_int(n, "fmod", 0) != 0 && kiln_attr_int(n, "fmod", 0) != 1)
      return "an fmod other than 0 or 1 (ref reports it)";
    if (logic ? dt != KILN_DTYPE_BOOL
              : compare ? !(dt == KILN_DTYPE_F32 || is_integer(dt) || (bk == TE_EQ && dt == KILN_DTYPE_BOOL))
                        : !(dt == KILN_DTYPE_F32 || (int_ok && is_integer(dt))))
      return "dtype not computed by compiled kernels for this op";
    return inputs_broadcast_to_output(g, n) ? NULL : "inputs that do not broadcast to the output";
  }
  if (reduce_kind_of(id) >= 0 || is_softmax(id)) {
    /* Integer min and max are exact in any order (a detector's per-class
     * ReduceMin over int64 candidate counts), and so are sums and products
     * modulo 2^width, which is what ref computes (a detector's ReduceProd
     * of a shape); the others stay f32. */
    bool int_ok = (id == KILN_OP_ReduceMin || id == KILN_OP_ReduceMax || id == KILN_OP_ReduceSum ||
                   id == KILN_OP_ReduceProd) &&
                  is_integer(dtype_of(in0)) && dtype_of(in0) != KILN_DTYPE_BOOL;
    if (!is_f32(in0) && !int_ok) return "dtype other than f32";
    bool mask[KILN_MAX_RANK];
    bool ok = is_softmax(id) ? softmax_axes(n, in0->type.rank, mask) : reduce_axes(g, n, in0->type.rank, mask);
    if (!ok) return "axes that are not constants";
    if (is_softmax(id) && !trailing(mask, in0->type.rank)) return "softmax over a non-trailing axis";
    /* The output's shape must be the one these axes give (the compute
     * definition indexes the input from it). */
    const kiln_type *to = &g->values[n->outputs[0]].type;
    bool keep = is_softmax(id) || kiln_attr_int(n, "keepdims", 1) != 0;
    int64_t want[KILN_MAX_RANK];
    int wr = 0;
    for (int d = 0; d < in0->type.rank; d++)
      if (!mask[d] || keep) want[wr++] = mask[d] && !is_softmax(id) ? 1 : in0->type.dims[d];
    if (!kiln_shape_equal(wr, want, to->rank, to->dims)) return "an output shape its axes do not give";
    return NULL;
  }
  if (is_injective_view(id)) {
    for (int k = 0; k < n->n_inputs; k++) {
      const kiln_value_def *v = input_def(g, n, k);
      if (!v) continue;
      bool data_input = k == 0 || id == KILN_OP_Concat;
      if (data_input && (!is_plain(v) || dtype_of(v) != dtype_of(in0) || !fully_known(&v->type)))
        return "dtype not computed by compiled kernels";
      if (!data_input && !const_input(g, n, k)) return "shape/axes inputs that are not constants";
    }
    if (id == KILN_OP_Slice && n->opset < 10 && !kiln_node_attr(n, "starts")) return "Slice without starts";
    /* A reshaping view reads the input at the output's flat indices: the
     * sizes must agree (a declared output type inference could not check
     * must not make the kernel read past its input). */
    if (is_reshaping_view(id)) {
      const kiln_type *to = &g->values[n->outputs[0]].type;
      if (kiln_shape_numel(to->rank, to->dims) != kiln_shape_numel(in0->type.rank, in0->type.dims))
        return "output size unknown or different from the input's";
    }
    return NULL;
  }
  switch (id) {
    case KILN_OP_ConvInteger: {
      const kiln_value_def *w = input_def(g, n, 1);
      kiln_dtype xd = dtype_of(in0), wd = dtype_of(w);
      if (!(xd == KILN_DTYPE_I8 || xd == KILN_DTYPE_U8) || !(wd == KILN_DTYPE_I8 || wd == KILN_DTYPE_U8) ||
          !fully_known(&w->type))
        return "operands other than int8/uint8";
      if (in0->type.rank < 3 || in0->type.rank > 5 || has_zero_dim(&in0->type) || has_zero_dim(&w->type))
        return "a rank or an empty operand the kernel does not take (ref reports it)";
      const kiln_value_def *xz = n->n_inputs > 2 ? input_def(g, n, 2) : NULL, *wz = n->n_inputs > 3 ? input_def(g, n, 3) : NULL;
      if (xz && (dtype_of(xz) != xd || !fully_known(&xz->type) || kiln_shape_numel(xz->type.rank, xz->type.dims) != 1))
        return "an x zero point other than one scalar";
      if (wz && (dtype_of(wz) != wd || !fully_known(&wz->type) || wz->type.rank > 1 ||
                 (kiln_shape_numel(wz->type.rank, wz->type.dims) != 1 &&
                  kiln_shape_numel(wz->type.rank, wz->type.dims) != w->type.dims[0])))
        return "a w zero point other than a scalar or one per output channel";
      kiln_window win;
      kiln_status_t st = kiln_conv_integer_window(n, in0->type.rank, in0->type.dims, w->type.rank, w->type.dims, &win);
      bool ok = st == NULL;
      kiln_status_free(st);
      return ok ? NULL : "a geometry the kernel rejects (ref reports it)";
    }
    case KILN_OP_Einsum: {
      const char *eq = kiln_attr_string(n, "equation", NULL);
      if (!eq || n->n_inputs < 1) return "no equation (ref reports it)";
      int ranks[8];
      const int64_t *dims[8];
      for (int i = 0; i < n->n_inputs; i++) {
        const kiln_value_def *v = input_def(g, n, i);
        if (!is_f32(v) || !fully_known(&v->type)) return "dtype other than f32";
        if (has_zero_dim(&v->type)) return "a zero-sized input (ref computes it)";
        ranks[i] = v->type.rank;
        dims[i] = v->type.dims;
      }
      kiln_einsum_plan *plan = malloc(sizeof *plan);
      if (!plan) return "out of memory checking the equation";
      kiln_status_t st = kiln_einsum_parse(eq, n->n_inputs, ranks, dims, plan);
      free(plan);
      bool ok = st == NULL;
      kiln_status_free(st);
      return ok ? NULL : "an equation that does not fit the inputs (ref reports it)";
    }
    case KILN_OP_MatMulInteger: {
      kiln_dtype a = dtype_of(in0), bt = dtype_of(input_def(g, n, 1));
      bool q8a = a == KILN_DTYPE_I8 || a == KILN_DTYPE_U8, q8b = bt == KILN_DTYPE_I8 || bt == KILN_DTYPE_U8;
      if (!q8a || !q8b || !fully_known(&input_def(g, n, 1)->type)) return "operands other than int8/uint8";
      for (int i = 2; i < n->n_inputs && i < 4; i++) {
        const kiln_value_def *z = input_def(g, n, i);
        if (z && (dtype_of(z) != (i == 2 ? a : bt) || !fully_known(&z->type) ||
                  kiln_shape_numel(z->type.rank, z->type.dims) != 1))
          return "zero points other than one scalar of the operand's dtype";
      }
      if (in0->type.rank < 1 || input_def(g, n, 1)->type.rank < 1 || has_zero_dim(&in0->type) ||
          has_zero_dim(&input_def(g, n, 1)->type))
        return "a scalar or empty operand (ref reports it)";
      return NULL;
    }
    case KILN_OP_InstanceNormalization: {
      const kiln_value_def *sc = input_def(g, n, 1), *bi = input_def(g, n, 2);
      if (!is_f32(in0) || in0->type.rank < 3 || !is_f32(sc) || !is_f32(bi)) return "dtype other than f32";
      if (sc->type.rank != 1 || bi->type.rank != 1 || sc->type.dims[0] != in0->type.dims[1] ||
          bi->type.dims[0] != in0->type.dims[1])
        return "scale or bias not one per channel (ref reports it)";
      return NULL;
    }
    case KILN_OP_QuantizeLinear:
    case KILN_OP_DequantizeLinear: {
      /* ref's rules (ops/quant.c): a scalar scale, or from opset 13 one per
       * index of `axis`; the zero point has the scale's size. */
      bool q = id == KILN_OP_QuantizeLinear;
      kiln_dtype xdt = dtype_of(in0);
      const kiln_value_def *sc = input_def(g, n, 1), *zp = n->n_inputs > 2 ? input_def(g, n, 2) : NULL;
      if (q ? xdt != KILN_DTYPE_F32 : !(xdt == KILN_DTYPE_I8 || xdt == KILN_DTYPE_U8 || xdt == KILN_DTYPE_I32))
        return "dtype not computed by compiled kernels";
      if (!sc || dtype_of(sc) != KILN_DTYPE_F32 || !fully_known(&sc->type)) return "a scale that is not f32";
      /* Opset 21+ attributes the compiled kernels do not implement: blocks,
       * another output dtype, another division precision. */
      if (kiln_attr_int(n, "block_size", 0) || kiln_attr_int(n, "precision", 0) ||
          (kiln_attr_int(n, "output_dtype", 0) &&
           kiln_attr_int(n, "output_dtype", 0) != (q ? (zp ? dtype_of(zp) : KILN_DTYPE_U8) : KILN_DTYPE_F32)))
        return "block_size, precision or output_dtype (ref runs them)";
      if (zp && (!fully_known(&zp->type) || (q ? !(dtype_of(zp) == KILN_DTYPE_I8 || dtype_of(zp) == KILN_DTYPE_U8)
                                                : dtype_of(zp) != xdt)))
        return "a zero point of another dtype (ref reports it)";
      int64_t count = kiln_shape_numel(sc->type.rank, sc->type.dims);
      if (zp && kiln_shape_numel(zp->type.rank, zp->type.dims) != count) return "a zero point of another size (ref reports it)";
      if (count == 1 && sc->type.rank <= 1) return NULL;
      int64_t axis = kiln_attr_int(n, "axis", 1), r = in0->type.rank;
      if (n->opset < 13 || sc->type.rank != 1 || axis < -r || axis >= r || in0->type.dims[axis < 0 ? axis + r : axis] != count)
        return "a scale that does not match the axis (ref reports it)";
      return NULL;
    }
    case KILN_OP_ConstantOfShape: {
      const kiln_attr *v = kiln_node_attr(n, "value");
      if (v && (!v->t || v->t->numel != 1 || !plain_dtype(v->t->dtype))) return "a value compiled kernels do not store";
      return const_input(g, n, 0) ? NULL : "a shape that is not a constant";
    }
    case KILN_OP_LRN: {
      const kiln_attr *sa = kiln_node_attr(n, "size");
      if (!is_f32(in0) || in0->type.rank < 2) return "dtype other than f32";
      return sa && sa->type == KILN_ATTR_INT && sa->i >= 1 ? NULL : "no valid size (ref reports it)";
    }
    case KILN_OP_Tile:
      if (!is_plain(in0)) return "dtype not computed by compiled kernels";
      if (n->opset < 6 || n->n_inputs < 2 || !const_input(g, n, 1)) return "repeats that are not constants";
      return NULL;
    case KILN_OP_ArgMax:
    case KILN_OP_ArgMin:
      if (!is_f32(in0) && !is_integer(dtype_of(in0))) return "dtype not computed by compiled kernels";
      if (in0->type.rank < 1 || has_zero_dim(&in0->type)) return "a scalar or empty input (ref reports it)";
      return NULL;
    case KILN_OP_Gather: {
      const kiln_tensor *ind = const_input(g, n, 1);
      const kiln_value_def *iv = input_def(g, n, 1);
      if (!is_plain(in0)) return "dtype not computed by compiled kernels";
      kiln_dtype idt = ind ? ind->dtype : iv ? dtype_of(iv) : KILN_DTYPE_UNDEFINED;
      if (idt != KILN_DTYPE_I64 && idt != KILN_DTYPE_I32) return "indices of dtype other than int64 or int32";
      if (!ind && (!iv || !fully_known(&iv->type))) return "indices of a shape not known before running";
      int64_t axis = kiln_attr_int(n, "axis", 0), r = in0->type.rank;
      if (axis < -r || axis >= r) return "an axis out of range (ref reports it)";
      if (!ind) return NULL; /* run-time indices: the plan checks their range before the kernel */
      int64_t dim = in0->type.dims[axis < 0 ? axis + r : axis];
      for (int64_t i = 0; i < ind->numel; i++) {
        int64_t v = kiln_load_i64(ind->data, ind->dtype, i);
        if (v < -dim || v >= dim) return "an index out of range (ref reports it)";
      }
      return NULL;
    }
    case KILN_OP_GatherND: {
      const kiln_value_def *iv = input_def(g, n, 1);
      const kiln_tensor *ind = const_input(g, n, 1);
      if (!is_plain(in0)) return "dtype not computed by compiled kernels";
      if (!iv || (dtype_of(iv) != KILN_DTYPE_I64 && dtype_of(iv) != KILN_DTYPE_I32))
        return "indices of dtype other than int64 or int32";
      if (!fully_known(&iv->type)) return "indices of a shape not known before running";
      int64_t bd = n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0, r = in0->type.rank, q = iv->type.rank;
      int64_t m = q > 0 ? iv->type.dims[q - 1] : 0;
      if (q < 1 || r < 1 || bd < 0 || bd >= (r < q ? r : q) || m < 1 || m > r - bd)
        return "batch_dims or index depth out of range (ref reports it)";
      for (int d = 0; d < bd; d++)
        if (iv->type.dims[d] != in0->type.dims[d]) return "batch dims that differ (ref reports it)";
      for (int64_t i = 0; ind && i < ind->numel; i++) {
        int64_t v = kiln_load_i64(ind->data, ind->dtype, i), dim = in0->type.dims[bd + i % m];
        if (v < -dim || v >= dim) return "an index out of range (ref reports it)";
      }
      return NULL; /* run-time indices: the plan checks their range before the kernel */
    }
    case KILN_OP_GatherElements:
    case KILN_OP_ScatterElements:
    case KILN_OP_ScatterND: return scatter_gather_problem(g, n, id);
    case KILN_OP_CumSum:
    case KILN_OP_CumProd: {
      kiln_dtype dt = dtype_of(in0);
      if (!(dt == KILN_DTYPE_F32 || is_integer(dt)) || in0->type.rank < 1) return "dtype not computed by compiled kernels";
      const kiln_tensor *ax = const_input(g, n, 1);
      int64_t r = in0->type.rank, a = ax && ax->numel == 1 && kiln_dtype_is_int(ax->dtype) ? kiln_load_i64(ax->data, ax->dtype, 0) : r;
      if (a < -r || a >= r) return "an axis that is not a constant in range (ref reports it)";
      int64_t len = in0->type.dims[a < 0 ? a + r : a];
      if (len > SCAN_MAX_SEARCH && kiln_shape_numel(in0->type.rank, in0->type.dims) * len > SCATTER_MAX_PROBES * 16)
        return "a scan over a long axis (ref runs it in one pass)";
      return NULL;
    }
    case KILN_OP_OneHot: {
      const kiln_value_def *vals = input_def(g, n, 2);
      kiln_dtype idt = dtype_of(in0);
      if (!(idt == KILN_DTYPE_F32 || is_integer(idt)) || !is_plain(vals) || !fully_known(&vals->type) ||
          kiln_shape_numel(vals->type.rank, vals->type.dims) != 2)
        return "dtype not computed by compiled kernels";
      const kiln_tensor *depth = const_input(g, n, 1);
      if (!depth || depth->numel != 1 || !(kiln_dtype_is_int(depth->dtype) || kiln_dtype_is_float(depth->dtype)))
        return "a depth that is not a constant scalar";
      return NULL;
    }
    case KILN_OP_EyeLike: return is_plain(&g->values[n->outputs[0]]) && in0->type.rank == 2 ? NULL : "dtype not computed by compiled kernels";
    case KILN_OP_Hardmax: {
      if (!is_f32(in0) || in0->type.rank < 1 || has_zero_dim(&in0->type)) return "dtype other than f32";
      int64_t r = in0->type.rank, axis = kiln_attr_int(n, "axis", n->opset < 13 ? 1 : -1);
      if (axis < -r || axis >= r) return "an axis out of range (ref reports it)";
      /* before opset 13 a row is every axis from `axis` on: one axis only when it is the last */
      if (n->opset < 13 && (axis < 0 ? axis + r : axis) != r - 1) return "a row of several axes (opset < 13)";
      return NULL;
    }
    case KILN_OP_ReverseSequence: {
      if (!is_plain(in0) || in0->type.rank < 2) return "dtype not computed by compiled kernels";
      int64_t ta = kiln_attr_int(n, "time_axis", 0), ba = kiln_attr_int(n, "batch_axis", 1);
      const kiln_tensor *lens = const_input(g, n, 1);
      if ((ta != 0 && ta != 1) || (ba != 0 && ba != 1) || ta == ba) return "axes ref rejects (it reports them)";
      if (!lens || !kiln_dtype_is_int(lens->dtype) || lens->numel != in0->type.dims[ba])
        return "sequence_lens that are not constants of the batch's size";
      if (lens->numel > REVSEQ_MAX_BATCH) return "more sequence lengths than a kernel holds (ref runs it)";
      for (int64_t i = 0; i < lens->numel; i++) {
        int64_t v = kiln_load_i64(lens->data, lens->dtype, i);
        if (v < 0 || v > in0->type.dims[ta]) return "a sequence length out of range (ref reports it)";
      }
      return NULL;
    }
    case KILN_OP_DepthToSpace:
    case KILN_OP_SpaceToDepth: {
      if (!is_plain(in0) || in0->type.rank != 4) return "dtype not computed by compiled kernels";
      int64_t bs = kiln_attr_int(n, "blocksize", 0);
      const char *mode = n->opset >= (id == KILN_OP_DepthToSpace ? 11 : 28) ? kiln_attr_string(n, "mode", "DCR") : "DCR";
      if (bs < 1 || bs > ((int64_t)1 << 31) || (strcmp(mode, "DCR") && strcmp(mode, "CRD")))
        return "a blocksize or mode ref rejects (it reports them)";
      return NULL;
    }
    case KILN_OP_Trilu: {
      if (!is_plain(in0) || in0->type.rank < 2) return "dtype not computed by compiled kernels";
      if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const kiln_tensor *k = const_input(g, n, 1);
        if (!k || k->numel != 1 || !kiln_dtype_is_int(k->dtype)) return "a k that is not a constant integer scalar";
      }
      return NULL;
    }
    case KILN_OP_kiln_Resample: {
      if (!is_f32(in0)) return "dtype other than f32";
      bool nearest = kiln_attr_int(n, "nearest", 0) != 0;
      for (int i = 1; i < n->n_inputs; i++) {
        const kiln_tensor *tab = const_input(g, n, i);
        bool index = nearest || i % 2 == 1;
        if (!tab || tab->rank != 2 || tab->dtype != (index ? KILN_DTYPE_I32 : KILN_DTYPE_F32))
          return "index or weight tables that are not constants";
      }
      return NULL;
    }
    case KILN_OP_GridSample: {
      /* ref's rules (ops/misc_vision.c): 4-D X, grid (N, H_out, W_out, 2),
       * a mode and padding it knows; anything else is its error to report. */
      const kiln_value_def *grid = input_def(g, n, 1);
      if (!is_f32(in0) || !is_f32(grid) || !fully_known(&grid->type)) return "dtype other than f32";
      if (in0->type.rank != 4 || grid->type.rank != 4 || grid->type.dims[3] != 2 || grid->type.dims[0] != in0->type.dims[0])
        return "shapes ref rejects (it reports them)";
      if (has_zero_dim(&in0->type)) return "an empty image (ref computes it)";
      kiln_grid_sample_params gp;
      kiln_status_t st = kiln_grid_sample_params_of(n, &gp);
      bool ok = st == NULL;
      kiln_status_free(st);
      return ok ? NULL : "an unknown mode or padding_mode (ref reports it)";
    }
    case KILN_OP_Pad: {
      if (!is_f32(in0) && !kiln_dtype_is_half(dtype_of(in0))) return "dtype other than f32, f16 or bf16";
      if (n->opset >= 11) {
        for (int i = 1; i < n->n_inputs && i < 4; i++)
          if (n->inputs[i] >= 0 && !const_input(g, n, i)) return "pads, value or axes that are not constants";
        const kiln_tensor *cv = n->n_inputs > 2 && n->inputs[2] >= 0 ? const_input(g, n, 2) : NULL;
        if (cv && (cv->dtype != dtype_of(in0) || cv->numel != 1)) return "a constant_value that is not one element";
      }
      int mode;
      int64_t before[KILN_MAX_RANK], crop[KILN_MAX_RANK], len[KILN_MAX_RANK];
      kiln_status_t st = kiln_pad_geometry(n, n->opset, in0->type.rank, in0->type.dims, const_input(g, n, 1),
                                           const_input(g, n, 3), &mode, before, crop, len);
      bool ok = st == NULL;
      kiln_status_free(st);
      return ok ? NULL : "pads that are not valid for the input (ref reports them)";
    }
    case KILN_OP_Where: {
      const kiln_value_def *c = input_def(g, n, 0);
      if (!c || c->type.dtype != KILN_DTYPE_BOOL || !is_plain(input_def(g, n, 1)) ||
          dtype_of(input_def(g, n, 1)) != dtype_of(input_def(g, n, 2)))
        return "dtype not computed by compiled kernels";
      return inputs_broadcast_to_output(g, n) ? NULL : "inputs that do not broadcast to the output";
    }
    case KILN_OP_GlobalAveragePool:
    case KILN_OP_GlobalMaxPool: return is_f32(in0) && in0->type.rank >= 3 ? NULL : "dtype other than f32";
    case KILN_OP_kiln_MaxPoolArgmax:
      return is_f32(in0) && in0->type.rank >= 3 && in0->type.rank <= 5 ? NULL : "dtype other than f32";
    case KILN_OP_kiln_MaxPoolGrad:
      if (!is_f32(in0) || in0->type.rank < 3 || in0->type.rank > 5 || dtype_of(input_def(g, n, 1)) != KILN_DTYPE_I32)
        return "dtype other than f32 with int32 indices";
      return const_input(g, n, 2) ? NULL : "a shape that is not a constant";
    case KILN_OP_MaxPool:
    case KILN_OP_AveragePool:
      if (!is_f32(in0) || in0->type.rank < 3 || in0->type.rank > 5) return "dtype other than f32";
      return kiln_attr_int(n, "storage_order", 0) ? "storage_order" : NULL;
    case KILN_OP_LayerNormalization:
      if (!is_f32(in0) || !is_f32(input_def(g, n, 1))) return "dtype other than f32";
      if (n->n_inputs > 2 && n->inputs[2] >= 0 && !is_f32(input_def(g, n, 2))) return "dtype other than f32";
      /* Scale and bias are read broadcast over X's shape, which the output
       * has (a declared output or scale that says otherwise stays on ref,
       * which reports it). */
      const kiln_type *to = &g->values[n->outputs[0]].type;
      if (!kiln_shape_equal(in0->type.rank, in0->type.dims, to->rank, to->dims) || !inputs_broadcast_to_output(g, n))
        return "scale or bias that does not broadcast to the input";
      return NULL;
    case KILN_OP_MatMul:
    case KILN_OP_Gemm:
    case KILN_OP_Conv:
    case KILN_OP_ConvTranspose:
    case KILN_OP_kiln_FusedAttention: {
      for (int k = 0; k < n->n_inputs; k++)
        if (input_def(g, n, k) && (!is_f32(input_def(g, n, k)) || !fully_known(&input_def(g, n, k)->type)))
          return "dtype other than f32";
      /* A contraction over an empty axis (Conv with 0 input channels, a
       * zero-sized kernel or batch) has no work for a tiled kernel, whose
       * blocking divides by those sizes: the reference kernel computes it. */
      bool empty = has_zero_dim(&g->values[n->outputs[0]].type);
      for (int k = 0; k < n->n_inputs && !empty; k++) empty = input_def(g, n, k) && has_zero_dim(&input_def(g, n, k)->type);
      return empty ? "a zero-sized input or output" : NULL;
    }
    default: return "no compute definition for this op yet";
  }
}

kiln_op_class kiln_lower_class(const kiln_graph *g, const kiln_node *n, const char **reason) {
  const char *why = NULL;
  kiln_op_class cls = KILN_OPCLASS_NONE;
  kiln_op_id id = kiln_node_op_id(n);
  if (!n->op) {
    why = "op not registered";
    goto out;
  }
  if (n->n_outputs < 1 || n->outputs[0] < 0) {
    why = "no output";
    goto out;
  }
  for (int i = 1; i < n->n_outputs; i++)
    if (n->outputs[i] >= 0) {
      why = "more than one output";
      goto out;
    }
  const kiln_value_def *out = &g->values[n->outputs[0]];
  if (!fully_known(&out->type)) {
    why = "output shape not known before running";
    goto out;
  }
  if (!is_plain(out)) {
    why = "dtype not computed by compiled kernels";
    goto out;
  }
  const kiln_value_def *in0 = input_def(g, n, 0);
  if (!in0 || !fully_known(&in0->type)) {
    why = "input shape not known";
    goto out;
  }
  if (n->n_inputs > 8) { /* views hold at most 8 operands */
    why = "more than 8 inputs";
    goto out;
  }
  if ((why = claim_problem(g, n, id))) goto out;
  if (!inference_agrees(g, n)) {
    why = "an output type its inference does not give";
    goto out;
  }
  /* The op's own class (its definition), except 2-D max pooling, which
   * devices run as a direct kernel (devices/cpu) rather than a
   * tensor-expression reduction. */
  cls = id == KILN_OP_MaxPool && in0->type.rank == 4 ? KILN_OPCLASS_CONTRACTION : n->op->op_class;
  if (cls == KILN_OPCLASS_NONE) why = "no compute definition for this op yet";
out:
  if (reason) *reason = why;
  return cls;
}

bool kiln_lower_is_param_input(const kiln_node *n, int i) {
  if (kiln_node_is(n, KILN_OP_ConstantOfShape)) return true; /* the shape: read when lowering */
  if (kiln_node_is(n, KILN_OP_EyeLike)) return true;          /* only its shape counts: the output's */
  if (kiln_node_is(n, KILN_OP_kiln_MaxPoolGrad)) return i == 2; /* the shape: the output's */
  if (i == 0) return false;
  switch (kiln_node_op_id(n)) {
    case KILN_OP_Clip:
    case KILN_OP_Reshape:
    case KILN_OP_Slice:
    case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze:
    case KILN_OP_Expand:
    case KILN_OP_Tile:
    case KILN_OP_Pad:
    case KILN_OP_Trilu:
    case KILN_OP_CumSum:
    case KILN_OP_CumProd:
    case KILN_OP_ReverseSequence:
    case KILN_OP_Dropout: return true;
    case KILN_OP_OneHot: return i == 1; /* its depth (values, input 2, are data) */
    default: return reduce_kind_of(kiln_node_op_id(n)) >= 0;
  }
}

bool kiln_lower_runtime_indices(const kiln_graph *g, const kiln_node *n, int *input, int *n_bounds, int64_t *bounds) {
  kiln_op_id id = kiln_node_op_id(n);
  bool gather = id == KILN_OP_Gather || id == KILN_OP_GatherElements || id == KILN_OP_ScatterElements;
  bool nd = id == KILN_OP_GatherND || id == KILN_OP_ScatterND;
  if ((!gather && !nd) || n->n_inputs < 2 || n->inputs[1] < 0 || const_input(g, n, 1)) return false;
  const kiln_value_def *in0 = input_def(g, n, 0), *iv = input_def(g, n, 1);
  if (!in0 || in0->type.rank < 1 || !iv) return false;
  int64_t r = in0->type.rank;
  *input = 1;
  if (gather) { /* one bound, the axis's length */
    int64_t axis = kiln_attr_int(n, "axis", 0);
    if (axis < -r || axis >= r) return false;
    *n_bounds = 1;
    bounds[0] = in0->type.dims[axis < 0 ? axis + r : axis];
    return true;
  }
  int64_t bd = id == KILN_OP_GatherND && n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0, q = iv->type.rank;
  int64_t m = q > 0 ? iv->type.dims[q - 1] : -1;
  if (m < 1 || bd < 0 || m > r - bd) return false;
  *n_bounds = (int)m;
  for (int64_t k = 0; k < m; k++) bounds[k] = in0->type.dims[bd + k];
  return true;
}

bool kiln_lower_reduces_trailing(const kiln_graph *g, const kiln_node *n) {
  const kiln_value_def *in0 = input_def(g, n, 0);
  if (!in0 || in0->type.rank < 0) return false;
  kiln_op_id id = kiln_node_op_id(n);
  if (id == KILN_OP_LayerNormalization || id == KILN_OP_InstanceNormalization) return true;
  if (!is_softmax(id) && reduce_kind_of(id) < 0) return false; /* pools (windows): materialize */
  bool mask[KILN_MAX_RANK];
  int r = in0->type.rank;
  bool ok = is_softmax(id) ? softmax_axes(n, r, mask) : reduce_axes(g, n, r, mask);
  return ok && trailing(mask, r);
}

/* ---- compute functions -------------------------------------------------------- */

static te_expr *f32c(te_builder *b, double v) { return te_const_f(b, KILN_DTYPE_F32, v); }

/* Cast to t->dtype with ref's rules (ops/elementwise_cast.c): anything to
 * bool is != 0; float to an integer truncates toward zero after
 * saturating to int64 (NaN gives 0), then wraps like any integer
 * narrowing. */
static te_expr *cast_to(te_builder *b, te_expr *x, kiln_dtype to) {
  kiln_dtype from = x->dtype;
  if (from == to) return x;
  /* Halves are storage: every cast goes through f32 (exact from a half;
   * into one the only rounding, claim_problem keeping out what would round
   * twice), the dialects converting only between f32 and the halves. */
  if (kiln_dtype_is_half(from)) return cast_to(b, te_cast(b, KILN_DTYPE_F32, x), to);
  if (kiln_dtype_is_half(to)) return te_cast(b, to, cast_to(b, x, KILN_DTYPE_F32));
  if (to == KILN_DTYPE_BOOL) {
    te_expr *zero = from == KILN_DTYPE_F32 ? f32c(b, 0) : te_const_i(b, from, 0);
    return te_binary(b, TE_NE, x, zero);
  }
  if (from == KILN_DTYPE_F32 && to != KILN_DTYPE_F32) {
    te_expr *i = te_cast(b, KILN_DTYPE_I64, x);
    i = te_select(b, te_binary(b, TE_LE, f32c(b, 9.2233720368547758e18), x), te_const_i(b, KILN_DTYPE_I64, INT64_MAX), i);
    i = te_select(b, te_binary(b, TE_LE, x, f32c(b, -9.2233720368547758e18)), te_const_i(b, KILN_DTYPE_I64, INT64_MIN), i);
    i = te_select(b, te_binary(b, TE_NE, x, x), te_const_i(b, KILN_DTYPE_I64, 0), i);
    return te_cast(b, to, i);
  }
  return te_cast(b, to, x);
}

/* A Cast node's conversion: p[0] set for one into bf16 that truncates
 * (before opset 19), the value first cut to bf16's bits in f32. */
static te_expr *cast_node(te_builder *b, te_expr *x, const te_tensor *t) {
  if (t->dtype == KILN_DTYPE_BF16 && t->p[0])
    return te_cast(b, KILN_DTYPE_BF16, te_call1(b, "kiln_bf16_truncf", cast_to(b, x, KILN_DTYPE_F32)));
  return cast_to(b, x, t->dtype);
}

static te_expr *compute_unary(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *x = te_at_broadcast(b, t->in[0], t->rank, idx);
  double alpha = t->fp[0], beta = t->fp[1];
  te_expr *zero = f32c(b, 0), *one = f32c(b, 1);
  if (x && x->dtype != KILN_DTYPE_F32) {
    te_expr *izero = te_const_i(b, x->dtype, 0);
    switch ((unary_kind)t->ip) {
      case U_IDENTITY: return x;
      case U_NOT: return te_unary(b, TE_NOT, x);
      case U_CAST: return cast_node(b, x, t);
      case U_NEG: return te_unary(b, TE_NEG, x);
      case U_ABS: return te_select(b, te_binary(b, TE_LT, x, izero), te_unary(b, TE_NEG, x), x);
      case U_RELU: return te_binary(b, TE_MAX, x, izero);
      case U_CLIP: { /* p[0], p[2]: whether each bound is given; p[1], p[3]: the bounds (min first: numpy's clip) */
        te_expr *r = x;
        if (t->p[0]) r = te_binary(b, TE_MAX, r, te_const_i(b, x->dtype, t->p[1]));
        if (t->p[2]) r = te_binary(b, TE_MIN, r, te_const_i(b, x->dtype, t->p[3]));
        return r;
      }
      default: return NULL;
    }
  }
  switch ((unary_kind)t->ip) {
    case U_NOT: return NULL;
    case U_CAST: return cast_node(b, x, t);
    case U_ISNAN: return te_binary(b, TE_NE, x, x);
    case U_ISINF: {
      te_expr *pos = te_binary(b, TE_EQ, x, f32c(b, INFINITY)), *neg = te_binary(b, TE_EQ, x, f32c(b, -INFINITY));
      bool want_pos = alpha != 0, want_neg = beta != 0;
      if (want_pos && want_neg) return te_binary(b, TE_OR, pos, neg);
      return want_pos ? pos : want_neg ? neg : te_const_i(b, KILN_DTYPE_BOOL, 0);
    }
    case U_RELU: return te_binary(b, TE_MAX, x, zero);
    case U_SIGMOID: return te_call1(b, "kiln_sigmoidf", x);
    case U_TANH: return te_call1(b, "kiln_tanhf", x);
    case U_EXP: return te_call1(b, "kiln_expf", x);
    case U_LOG: return te_call1(b, "logf", x);
    case U_SQRT: return te_call1(b, "sqrtf", x);
    case U_NEG: return te_unary(b, TE_NEG, x);
    case U_ABS: return te_unary(b, TE_ABS, x);
    case U_ERF: return te_call1(b, "kiln_erff", x);
    case U_RECIPROCAL: return te_binary(b, TE_DIV, one, x);
    case U_FLOOR: return te_call1(b, "floorf", x);
    case U_CEIL: return te_call1(b, "ceilf", x);
    case U_ROUND: return te_call1(b, "nearbyintf", x);
    case U_SIN: return te_call1(b, "sinf", x);
    case U_COS: return te_call1(b, "cosf", x);
    /* ops/elementwise_unary.c's rules, with the math helpers every dialect has */
    case U_SIGN: /* 0, -0 and NaN themselves */
      return te_select(b, te_binary(b, TE_LT, zero, x), one,
                       te_select(b, te_binary(b, TE_LT, x, zero), f32c(b, -1.0), x));
    case U_SINH: case U_COSH: {
      te_expr *ep = te_call1(b, "kiln_expf", x), *en = te_call1(b, "kiln_expf", te_unary(b, TE_NEG, x));
      te_expr *half = f32c(b, 0.5);
      if (t->ip == U_COSH) return te_binary(b, TE_MUL, half, te_binary(b, TE_ADD, ep, en));
      /* near 0 the difference cancels: x (1 + x^2 / 6) there */
      te_expr *small = te_binary(b, TE_LT, te_unary(b, TE_ABS, x), f32c(b, 1e-2));
      te_expr *taylor = te_binary(b, TE_MUL, x, te_binary(b, TE_ADD, one, te_binary(b, TE_MUL, te_binary(b, TE_MUL, x, x),
                                                                                       f32c(b, 1.0 / 6.0))));
      return te_select(b, small, taylor, te_binary(b, TE_MUL, half, te_binary(b, TE_SUB, ep, en)));
    }
    case U_TAN: return te_binary(b, TE_DIV, te_call1(b, "sinf", x), te_call1(b, "cosf", x));
    case U_CELU: /* max(0, x) + min(0, alpha (exp(x / alpha) - 1)) */
      return te_binary(b, TE_ADD, te_binary(b, TE_MAX, x, zero),
                       te_binary(b, TE_MIN, zero,
                                 te_binary(b, TE_MUL, f32c(b, alpha),
                                           te_binary(b, TE_SUB, te_call1(b, "kiln_expf", te_binary(b, TE_DIV, x, f32c(b, alpha))),
                                                     one))));
    case U_THRESHOLDED_RELU: return te_select(b, te_binary(b, TE_LT, f32c(b, alpha), x), x, zero);
    case U_SHRINK: /* x + bias below -lambd, x - bias above lambd, 0 between */
      return te_select(b, te_binary(b, TE_LT, x, f32c(b, -alpha)), te_binary(b, TE_ADD, x, f32c(b, beta)),
                       te_select(b, te_binary(b, TE_LT, f32c(b, alpha), x), te_binary(b, TE_SUB, x, f32c(b, beta)), zero));
    case U_IDENTITY: return x;
    case U_LEAKY_RELU:
      return te_select(b, te_binary(b, TE_LT, x, zero), te_binary(b, TE_MUL, f32c(b, alpha), x), x);
    case U_ELU:
      return te_select(b, te_binary(b, TE_LT, x, zero),
                       te_binary(b, TE_MUL, f32c(b, alpha), te_binary(b, TE_SUB, te_call1(b, "kiln_expf", x), one)), x);
    case U_SELU:
      return te_binary(b, TE_MUL, f32c(b, beta),
                       te_select(b, te_binary(b, TE_LE, x, zero),
                                 te_binary(b, TE_SUB, te_binary(b, TE_MUL, f32c(b, alpha), te_call1(b, "kiln_expf", x)),
                                           f32c(b, alpha)),
                                 x));
    case U_HARD_SIGMOID:
      return te_binary(b, TE_MAX, zero,
                       te_binary(b, TE_MIN, one, te_binary(b, TE_ADD, te_binary(b, TE_MUL, f32c(b, alpha), x), f32c(b, beta))));
    case U_HARD_SWISH:
      return te_binary(b, TE_MUL, x,
                       te_binary(b, TE_MAX, zero,
                                 te_binary(b, TE_MIN, one,
                                           te_binary(b, TE_ADD, te_binary(b, TE_MUL, f32c(b, 1.0 / 6.0), x), f32c(b, 0.5)))));
    case U_CLIP: return te_binary(b, TE_MIN, te_binary(b, TE_MAX, x, f32c(b, alpha)), f32c(b, beta));
    case U_SOFTPLUS: return te_call1(b, "kiln_softplusf", x);
    case U_SOFTSIGN: return te_binary(b, TE_DIV, x, te_binary(b, TE_ADD, one, te_unary(b, TE_ABS, x)));
    case U_GELU: return te_call1(b, alpha != 0 ? "kiln_gelu_tanhf" : "kiln_geluf", x);
  }
  return NULL;
}

static te_expr *compute_binary(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *acc = te_at_broadcast(b, t->in[0], t->rank, idx);
  for (int k = 1; k < t->n_in; k++) {
    te_expr *y = te_at_broadcast(b, t->in[k], t->rank, idx);
    te_op op = (te_op)t->ip;
    if (op == TE_CALL2) { /* Pow: exponents 2 and 0.5 are common and cheap */
      if (t->fp[0] == 2.0 && t->fp[1] == 1.0) acc = te_binary(b, TE_MUL, acc, acc);
      else if (t->fp[0] == 0.5 && t->fp[1] == 1.0) acc = te_call1(b, "sqrtf", acc);
      else acc = te_call2(b, "powf", acc, y->dtype == KILN_DTYPE_F32 ? y : te_cast(b, KILN_DTYPE_F32, y));
    } else if (op == TE_SELECT) { /* PRelu */
      acc = te_select(b, te_binary(b, TE_LT, acc, f32c(b, 0)), te_binary(b, TE_MUL, y, acc), acc);
    } else if (t->fp[3] != 0) {
      acc = te_binary(b, op, y, acc);
    } else if (op == TE_MOD && t->fp[0] == 0) {
      /* fmod=0: the sign of the divisor (Python's %), from C's truncated remainder */
      te_expr *r = te_binary(b, TE_MOD, acc, y), *zero = te_const_i(b, acc->dtype, 0);
      te_expr *fix = te_binary(b, TE_AND, te_binary(b, TE_NE, r, zero),
                               te_binary(b, TE_NE, te_binary(b, TE_LT, r, zero), te_binary(b, TE_LT, y, zero)));
      acc = te_select(b, fix, te_binary(b, TE_ADD, r, y), r);
    } else {
      acc = te_binary(b, op, acc, y);
    }
  }
  if (t->fp[2] != 0) acc = te_binary(b, TE_MUL, acc, f32c(b, 1.0 / t->n_in)); /* Mean */
  return acc;
}

static te_expr *compute_where(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  return te_select(b, te_at_broadcast(b, t->in[0], t->rank, idx), te_at_broadcast(b, t->in[1], t->rank, idx),
                   te_at_broadcast(b, t->in[2], t->rank, idx));
}

static te_expr *compute_transpose(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *sub[KILN_MAX_RANK];
  for (int i = 0; i < t->rank; i++) sub[t->p[i]] = idx[i];
  return te_at(b, t->in[0], sub);
}

/* Same elements, other dims: drop/insert unit dims directly when that is all
 * that changed, otherwise go through the linear index. */
static te_expr *compute_reshape(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  te_expr *sub[KILN_MAX_RANK];
  int i = 0, k = 0;
  bool direct = true;
  while (direct && (i < t->rank || k < in->rank)) {
    if (i < t->rank && t->dims[i] == 1) { i++; continue; }
    if (k < in->rank && in->dims[k] == 1) { sub[k++] = te_idx(b, 0); continue; }
    if (i < t->rank && k < in->rank && t->dims[i] == in->dims[k]) sub[k++] = idx[i++];
    else direct = false;
  }
  if (direct) return te_at(b, in, sub);
  te_expr *lin = te_linearize(b, t->rank, t->dims, idx);
  for (int d = in->rank - 1; d >= 0; d--) {
    sub[d] = d == 0 ? lin : te_imod(b, lin, in->dims[d]);
    lin = te_idiv(b, lin, in->dims[d]);
  }
  return te_at(b, in, sub);
}

static te_expr *compute_expand(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  return te_at_broadcast(b, t->in[0], t->rank, idx);
}

/* p[0..r): starts, p[KILN_MAX_RANK..): steps */
static te_expr *compute_slice(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *sub[KILN_MAX_RANK];
  for (int i = 0; i < t->rank; i++)
    sub[i] = te_iadd(b, te_imul(b, idx[i], t->p[KILN_MAX_RANK + i]), te_idx(b, t->p[i]));
  return te_at(b, t->in[0], sub);
}

/* Pad: p[0..r) padding at the start, p[R..) elements cropped at the start,
 * p[2R..) the cropped input's length per axis (R = KILN_MAX_RANK); ip: 0 constant (fp[0] the
 * value), 1 reflect (numpy's: the edge is not repeated), 2 edge, 3 wrap. Every
 * index is clamped into the input (every load is computed). */
static te_expr *compute_pad(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  te_expr *sub[KILN_MAX_RANK] = {0}, *valid = NULL;
  for (int d = 0; d < t->rank; d++) {
    int64_t before = t->p[d], crop = t->p[KILN_MAX_RANK + d], len = t->p[2 * KILN_MAX_RANK + d];
    if (before == 0 && len == t->dims[d]) { /* no padding on this axis */
      sub[d] = te_iadd(b, idx[d], te_idx(b, crop));
      continue;
    }
    te_expr *c = te_binary(b, TE_SUB, idx[d], te_idx(b, before));
    if (t->ip == 1 && len > 1) { /* reflect */
      int64_t period = 2 * (len - 1);
      te_expr *m = te_imod(b, te_iadd(b, te_imod(b, c, period), te_idx(b, period)), period);
      c = te_select(b, te_binary(b, TE_LT, m, te_idx(b, len)), m, te_binary(b, TE_SUB, te_idx(b, period), m));
    } else if (t->ip == 3 && len > 0) { /* wrap */
      c = te_imod(b, te_iadd(b, te_imod(b, c, len), te_idx(b, len)), len);
    } else if (t->ip == 0) {
      te_expr *ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), c), te_binary(b, TE_LT, c, te_idx(b, len)));
      valid = valid ? te_binary(b, TE_AND, valid, ok) : ok;
    }
    te_expr *cl = te_binary(b, TE_MIN, te_binary(b, TE_MAX, c, te_idx(b, 0)), te_idx(b, len > 0 ? len - 1 : 0));
    sub[d] = te_iadd(b, cl, te_idx(b, crop));
  }
  te_expr *x = te_at(b, in, sub);
  /* a half's fill is its own bits (the dialects store halves as words) */
  te_expr *fill = kiln_dtype_is_half(x->dtype) ? te_const_f(b, x->dtype, t->fp[0]) : f32c(b, t->fp[0]);
  return valid ? te_select(b, valid, x, fill) : x;
}

/* kiln.Resample: p[0..r): for each axis of the output, the operand index of
 * its index table (0: not resampled); the weight table follows it unless
 * ip (nearest); fp[0]: the extrapolation value, fp[1] nonzero when a table
 * marks coordinates outside the input (-1). Loads clamp the index (every
 * load is computed); the taps' tensor product is a sum over one reduction
 * variable per axis with more than one tap. */
static te_expr *compute_resample(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *X = t->in[0];
  te_expr *sub[KILN_MAX_RANK] = {0}, *weight = NULL, *outside = NULL;
  int vars[KILN_MAX_RANK], nv = 0;
  int64_t extents[KILN_MAX_RANK];
  for (int d = 0; d < t->rank; d++) {
    int k = (int)t->p[d];
    if (!k) {
      sub[d] = idx[d];
      continue;
    }
    const te_tensor *I = t->in[k];
    int64_t taps = I->dims[1];
    te_expr *tap = te_idx(b, 0);
    if (taps > 1) {
      vars[nv] = te_new_var(b);
      extents[nv] = taps;
      tap = te_var(b, vars[nv++]);
    }
    te_expr *i = te_cast(b, KILN_DTYPE_I64, te_at(b, I, (te_expr *[]){idx[d], tap}));
    sub[d] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, i, te_idx(b, 0)), te_idx(b, X->dims[d] - 1));
    if (!t->ip) {
      te_expr *w = te_at(b, t->in[k + 1], (te_expr *[]){idx[d], tap});
      weight = weight ? te_binary(b, TE_MUL, weight, w) : w;
    }
    if (t->fp[1] != 0) {
      te_expr *i0 = te_at(b, I, (te_expr *[]){idx[d], te_idx(b, 0)});
      te_expr *o = te_binary(b, TE_LT, i0, te_const_i(b, KILN_DTYPE_I32, 0));
      outside = outside ? te_binary(b, TE_OR, outside, o) : o;
    }
  }
  te_expr *acc = te_at(b, X, sub);
  if (weight) acc = te_binary(b, TE_MUL, weight, acc);
  for (int v = nv - 1; v >= 0; v--) acc = te_reduce(b, TE_RSUM, vars[v], extents[v], acc);
  /* Tables and input read straight from buffers, no extrapolation: a
   * runtime routine may compute it (te_resample_tag). */
  bool bufs = X->kind == TE_VIEW_BUFFER && !outside && acc;
  te_resample_tag tag = {.value = acc, .x_buf = bufs ? X->buf : -1, .rank = t->rank};
  for (int d = 0; bufs && d < t->rank; d++) {
    tag.idx[d] = idx[d];
    tag.in[d] = X->dims[d];
    tag.out[d] = t->dims[d];
    int k = (int)t->p[d];
    if (!k) continue;
    const te_tensor *I = t->in[k], *W = t->ip ? NULL : t->in[k + 1];
    if (tag.n_axes == 3 || I->kind != TE_VIEW_BUFFER || (W && W->kind != TE_VIEW_BUFFER)) {
      bufs = false;
      break;
    }
    tag.axis[tag.n_axes] = d;
    tag.index_buf[tag.n_axes] = I->buf;
    tag.weight_buf[tag.n_axes] = W ? W->buf : -1;
    tag.taps[tag.n_axes++] = I->dims[1];
  }
  if (bufs && tag.n_axes > 0) te_tag_resample(b, &tag);
  return outside ? te_select(b, outside, f32c(b, t->fp[0]), acc) : acc;
}

/* GridSample as ref computes it (ops/misc_vision.c), in f32: the grid's
 * (x, y) at (n, h, w) unnormalized to pixel coordinates, the padding mode
 * applied to the coordinate (bilinear, nearest) or to every tap (bicubic),
 * then a sum over the taps (2x2 or 4x4: one reduction variable per axis)
 * of weight * X at the tap, 0 for a tap outside the image. Tap indices
 * come from the data, so every load clamps its index and a select drops
 * the value of a tap outside. ip: the mode; p[0]: the padding; p[1]:
 * align_corners. A NaN coordinate gives NaN, as in ref. */
static te_expr *gs_unnormalize(te_builder *b, te_expr *v, int64_t size, bool align) {
  te_expr *v1 = te_binary(b, TE_ADD, v, f32c(b, 1));
  if (align) return te_binary(b, TE_MUL, te_binary(b, TE_DIV, v1, f32c(b, 2)), f32c(b, (double)(size - 1)));
  return te_binary(b, TE_DIV, te_binary(b, TE_SUB, te_binary(b, TE_MUL, v1, f32c(b, (double)size)), f32c(b, 1)), f32c(b, 2));
}

static te_expr *gs_clip(te_builder *b, te_expr *v, int64_t size) {
  return te_binary(b, TE_MIN, te_binary(b, TE_MAX, v, f32c(b, 0)), f32c(b, (double)(size - 1)));
}

/* ref's gs_pad: border clips; reflection folds v into [lo, lo + span]
 * (lo, span from align_corners) with fmod written as floor, then clips. */
static te_expr *gs_pad(te_builder *b, te_expr *v, int64_t size, int padding, bool align) {
  if (padding == KILN_GS_BORDER) return gs_clip(b, v, size);
  if (padding != KILN_GS_REFLECTION) return v;
  double twice_lo = align ? 0 : -1, twice_hi = align ? 2.0 * (double)(size - 1) : 2.0 * (double)size - 1;
  if (twice_lo == twice_hi) return f32c(b, 0);
  double lo = twice_lo / 2, span = (twice_hi - twice_lo) / 2;
  te_expr *u = te_unary(b, TE_ABS, te_binary(b, TE_SUB, v, f32c(b, lo)));
  te_expr *flips = te_call1(b, "floorf", te_binary(b, TE_DIV, u, f32c(b, span)));
  te_expr *extra = te_binary(b, TE_SUB, u, te_binary(b, TE_MUL, flips, f32c(b, span)));
  te_expr *half = te_call1(b, "floorf", te_binary(b, TE_MUL, flips, f32c(b, 0.5)));
  te_expr *even = te_binary(b, TE_EQ, te_binary(b, TE_MUL, half, f32c(b, 2)), flips);
  te_expr *r = te_select(b, even, te_binary(b, TE_ADD, extra, f32c(b, lo)),
                         te_binary(b, TE_ADD, te_binary(b, TE_SUB, f32c(b, span), extra), f32c(b, lo)));
  return gs_clip(b, r, size);
}

/* An integral pixel coordinate as an index in [0, size): bounded in f32
 * first, so the conversion never sees a value out of int range. */
static te_expr *gs_index(te_builder *b, te_expr *v, int64_t size) {
  te_expr *f = te_binary(b, TE_MIN, te_binary(b, TE_MAX, v, f32c(b, 0)), f32c(b, (double)(size - 1)));
  return te_cast(b, KILN_DTYPE_I64, te_call1(b, "floorf", f));
}

/* X at tap (ty, tx) of plane (n, c), 0 outside the image. */
static te_expr *gs_tap(te_builder *b, const te_tensor *X, te_expr *const *idx, te_expr *ty, te_expr *tx) {
  int64_t h = X->dims[2], w = X->dims[3];
  te_expr *inside = te_binary(b, TE_AND, te_binary(b, TE_LE, f32c(b, 0), ty), te_binary(b, TE_LT, ty, f32c(b, (double)h)));
  inside = te_binary(b, TE_AND, inside, te_binary(b, TE_LE, f32c(b, 0), tx));
  inside = te_binary(b, TE_AND, inside, te_binary(b, TE_LT, tx, f32c(b, (double)w)));
  te_expr *v = te_at(b, X, (te_expr *[]){idx[0], idx[1], gs_index(b, ty, h), gs_index(b, tx, w)});
  return te_select(b, inside, v, f32c(b, 0));
}

/* The cubic convolution weight (A = -0.75) of a tap at distance d in [0, 2]. */
static te_expr *gs_cubic(te_builder *b, te_expr *d) {
  const double a = -0.75;
  te_expr *near = te_binary(b, TE_ADD, te_binary(b, TE_MUL, te_binary(b, TE_MUL,
      te_binary(b, TE_SUB, te_binary(b, TE_MUL, f32c(b, a + 2), d), f32c(b, a + 3)), d), d), f32c(b, 1));
  te_expr *far = te_binary(b, TE_ADD, te_binary(b, TE_MUL, f32c(b, a), d), f32c(b, -5 * a));
  far = te_binary(b, TE_ADD, te_binary(b, TE_MUL, far, d), f32c(b, 8 * a));
  far = te_binary(b, TE_SUB, te_binary(b, TE_MUL, far, d), f32c(b, 4 * a));
  return te_select(b, te_binary(b, TE_LE, d, f32c(b, 1)), near, far);
}

static te_expr *compute_grid_sample(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *X = t->in[0], *grid = t->in[1];
  int64_t h = X->dims[2], w = X->dims[3];
  int padding = (int)t->p[0];
  bool align = t->p[1] != 0;
  te_expr *gx = te_at(b, grid, (te_expr *[]){idx[0], idx[2], idx[3], te_idx(b, 0)});
  te_expr *gy = te_at(b, grid, (te_expr *[]){idx[0], idx[2], idx[3], te_idx(b, 1)});
  te_expr *x = gs_unnormalize(b, gx, w, align), *y = gs_unnormalize(b, gy, h, align);
  te_expr *acc;
  if (t->ip == KILN_GS_NEAREST) {
    acc = gs_tap(b, X, idx, te_call1(b, "nearbyintf", gs_pad(b, y, h, padding, align)),
                 te_call1(b, "nearbyintf", gs_pad(b, x, w, padding, align)));
  } else {
    bool cubic = t->ip == KILN_GS_BICUBIC;
    if (!cubic) {
      x = gs_pad(b, x, w, padding, align);
      y = gs_pad(b, y, h, padding, align);
    }
    te_expr *x0 = te_call1(b, "floorf", x), *y0 = te_call1(b, "floorf", y);
    int vi = te_new_var(b), vj = te_new_var(b);
    /* Tap i (j) sits at y0 + i (x0 + j), shifted back by one for cubic. */
    te_expr *di = te_cast(b, KILN_DTYPE_F32, te_var(b, vi)), *dj = te_cast(b, KILN_DTYPE_F32, te_var(b, vj));
    if (cubic) {
      di = te_binary(b, TE_SUB, di, f32c(b, 1));
      dj = te_binary(b, TE_SUB, dj, f32c(b, 1));
    }
    te_expr *ty = te_binary(b, TE_ADD, y0, di), *tx = te_binary(b, TE_ADD, x0, dj);
    te_expr *wy, *wx;
    if (cubic) {
      wy = gs_cubic(b, te_unary(b, TE_ABS, te_binary(b, TE_SUB, te_binary(b, TE_SUB, y, y0), di)));
      wx = gs_cubic(b, te_unary(b, TE_ABS, te_binary(b, TE_SUB, te_binary(b, TE_SUB, x, x0), dj)));
      ty = gs_pad(b, ty, h, padding, align);
      tx = gs_pad(b, tx, w, padding, align);
    } else { /* 1 - |distance|: x0 + 1 - x for the first tap, x - x0 for the second */
      wy = te_binary(b, TE_SUB, f32c(b, 1), te_unary(b, TE_ABS, te_binary(b, TE_SUB, y, ty)));
      wx = te_binary(b, TE_SUB, f32c(b, 1), te_unary(b, TE_ABS, te_binary(b, TE_SUB, x, tx)));
    }
    int64_t taps = cubic ? 4 : 2;
    te_expr *term = te_binary(b, TE_MUL, te_binary(b, TE_MUL, wy, wx), gs_tap(b, X, idx, ty, tx));
    acc = te_reduce(b, TE_RSUM, vi, taps, te_reduce(b, TE_RSUM, vj, taps, term));
  }
  te_expr *nan = te_binary(b, TE_OR, te_binary(b, TE_NE, gx, gx), te_binary(b, TE_NE, gy, gy));
  return te_select(b, nan, te_binary(b, TE_ADD, gx, gy), acc);
}

/* QuantizeLinear / DequantizeLinear with ref's arithmetic (ops/quant.c):
 * y = saturate(nearbyint(x / scale) + zp) (NaN gives zp), and
 * y = (x - zp) * scale, both in f32. p[0]: the axis the scale runs along,
 * -1 for one scale; ip: 1 quantize. */
static te_expr *compute_quant(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *x = t->in[0], *sc = t->in[1], *zp = t->n_in > 2 ? t->in[2] : NULL;
  te_expr *p[1] = {t->p[0] < 0 ? te_idx(b, 0) : idx[t->p[0]]};
  te_expr *zero[KILN_MAX_RANK] = {0};
  for (int d = 0; d < KILN_MAX_RANK; d++) zero[d] = te_idx(b, 0);
  te_expr *scale = te_at(b, sc, sc->rank ? p : zero);
  te_expr *z = zp ? te_cast(b, KILN_DTYPE_F32, te_at(b, zp, zp->rank ? p : zero)) : f32c(b, 0);
  te_expr *v = te_at(b, x, idx);
  if (!t->ip) return te_binary(b, TE_MUL, te_binary(b, TE_SUB, te_cast(b, KILN_DTYPE_F32, v), z), scale);
  te_expr *r = te_call1(b, "nearbyintf", te_binary(b, TE_DIV, v, scale));
  double lo = t->dtype == KILN_DTYPE_I8 ? -128 : 0, hi = t->dtype == KILN_DTYPE_I8 ? 127 : 255;
  te_expr *q = te_binary(b, TE_ADD, r, z);
  q = te_binary(b, TE_MIN, te_binary(b, TE_MAX, q, f32c(b, lo)), f32c(b, hi));
  q = te_select(b, te_binary(b, TE_NE, r, r), z, q);
  return te_cast(b, t->dtype, q);
}

/* ConstantOfShape: fp[0] the value (ints exactly in p[0]). */
static te_expr *compute_fill(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  (void)idx;
  if (t->dtype == KILN_DTYPE_F32 || kiln_dtype_is_half(t->dtype)) return te_const_f(b, t->dtype, t->fp[0]);
  return te_const_i(b, t->dtype, t->p[0]);
}

/* LRN: x / (bias + alpha / size * sum of x^2 over the channel window)^beta,
 * the window [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to the
 * channels. p[0]: size; fp: alpha, beta, bias. */
static te_expr *compute_lrn(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int64_t size = t->p[0], lo = (size - 1) / 2;
  int v = te_new_var(b);
  te_expr *sub[KILN_MAX_RANK] = {0};
  for (int d = 0; d < t->rank; d++) sub[d] = idx[d];
  te_expr *c = te_iadd(b, idx[1], te_iadd(b, te_var(b, v), te_idx(b, -lo)));
  te_expr *ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), c), te_binary(b, TE_LT, c, te_idx(b, in->dims[1])));
  sub[1] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, c, te_idx(b, 0)), te_idx(b, in->dims[1] - 1));
  te_expr *xc = te_at(b, in, sub);
  te_expr *sq = te_reduce(b, TE_RSUM, v, size, te_select(b, ok, te_binary(b, TE_MUL, xc, xc), f32c(b, 0)));
  te_expr *den = te_binary(b, TE_ADD, f32c(b, t->fp[2]), te_binary(b, TE_MUL, f32c(b, t->fp[0] / (double)size), sq));
  /* bias > 0 and alpha >= 0: the base is positive (or NaN), where
   * kiln_powf_pos (vectorized exp and log) is pow; powf (a libm call per
   * element) otherwise. */
  const char *pow_fn = t->fp[2] > 0 && t->fp[0] >= 0 ? "kiln_powf_pos" : "powf";
  return te_binary(b, TE_DIV, te_at(b, in, idx), te_call2(b, pow_fn, den, f32c(b, t->fp[1])));
}

/* Tile: the input element at each index modulo the input's size (the
 * output's shape says the repeats). */
static te_expr *compute_tile(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  te_expr *sub[KILN_MAX_RANK] = {0};
  for (int d = 0; d < t->rank; d++) sub[d] = in->dims[d] == t->dims[d] ? idx[d] : te_imod(b, idx[d], in->dims[d]);
  return te_at(b, in, sub);
}

/* Gather: constant indices (in range: checked by the claim) or run-time
 * ones (checked by the plan before the kernel runs: kiln_plan_step.checks);
 * negative ones wrap, and the clamp keeps every load inside the data
 * whatever an index holds. p[0]: axis; in[1]: the indices. */
static te_expr *compute_gather(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *data = t->in[0], *ind = t->in[1];
  int axis = (int)t->p[0], ri = ind->rank;
  te_expr *j[KILN_MAX_RANK] = {0}, *sub[KILN_MAX_RANK] = {0};
  for (int d = 0; d < ri; d++) j[d] = idx[axis + d];
  te_expr *k = te_cast(b, KILN_DTYPE_I64, te_at(b, ind, j));
  int64_t dim = data->dims[axis];
  k = te_select(b, te_binary(b, TE_LT, k, te_idx(b, 0)), te_iadd(b, k, te_idx(b, dim)), k);
  k = te_binary(b, TE_MIN, te_binary(b, TE_MAX, k, te_idx(b, 0)), te_idx(b, dim - 1));
  for (int d = 0; d < data->rank; d++) sub[d] = d < axis ? idx[d] : d == axis ? k : idx[d - 1 + ri];
  return te_at(b, data, sub);
}

/* GatherND: data[batch..., idx[..., 0], ..., idx[..., m-1], rest...],
 * each index component wrapped when negative and clamped inside its dim
 * (constants range-checked by the claim, run-time ones by the plan before
 * the kernel). p[0]: batch_dims, p[1]: m (the index depth); in[1]: the
 * indices [..., m]. */
static te_expr *compute_gathernd(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *data = t->in[0], *ind = t->in[1];
  int bd = (int)t->p[0], m = (int)t->p[1], q = ind->rank;
  te_expr *j[KILN_MAX_RANK] = {0}, *sub[KILN_MAX_RANK] = {0};
  for (int d = 0; d < q - 1; d++) j[d] = idx[d];
  for (int d = 0; d < bd; d++) sub[d] = idx[d];
  for (int k = 0; k < m; k++) {
    j[q - 1] = te_idx(b, k);
    te_expr *v = te_cast(b, KILN_DTYPE_I64, te_at(b, ind, j));
    int64_t dim = data->dims[bd + k];
    v = te_select(b, te_binary(b, TE_LT, v, te_idx(b, 0)), te_iadd(b, v, te_idx(b, dim)), v);
    sub[bd + k] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, v, te_idx(b, 0)), te_idx(b, dim - 1));
  }
  for (int d = bd + m; d < data->rank; d++) sub[d] = idx[q - 1 + (d - bd - m)];
  return te_at(b, data, sub);
}

/* An index read from an indices view, wrapped when negative (in range:
 * the claim checks constants, the plan run-time ones). */
static te_expr *wrapped_index(te_builder *b, const te_tensor *ind, te_expr *const *at, int64_t dim) {
  te_expr *v = te_cast(b, KILN_DTYPE_I64, te_at(b, ind, at));
  return te_select(b, te_binary(b, TE_LT, v, te_idx(b, 0)), te_iadd(b, v, te_idx(b, dim)), v);
}

/* GatherElements: data at the output's index with its axis coordinate
 * taken from indices at the same index (indices has data's rank and fits
 * it off the axis), clamped so that every load stays inside the data.
 * p[0]: axis; in[1]: the indices. */
static te_expr *compute_gather_elements(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *data = t->in[0];
  int axis = (int)t->p[0];
  int64_t dim = data->dims[axis];
  te_expr *k = wrapped_index(b, t->in[1], idx, dim), *sub[KILN_MAX_RANK];
  for (int d = 0; d < data->rank; d++) sub[d] = idx[d];
  sub[axis] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, k, te_idx(b, 0)), te_idx(b, dim - 1));
  return te_at(b, data, sub);
}

/* ScatterElements (ip 0) and ScatterND (ip 1) as a search per output
 * element, which keeps the kernel one output element per iteration like
 * every other (a device's loops, no atomics, no order between threads):
 * the element gathers the updates whose index lands on it, over the
 * indices' axis (ScatterElements, the same coordinates elsewhere) or over
 * all index tuples (ScatterND, whose first m components must all match).
 * reduction none: the last update that lands wins, as ref applies them in
 * order; add and mul: data combined with every update that lands (the
 * order of a float sum differs from ref's by rounding); min and max
 * (integers): the extreme of data and those updates. The claim bounds the
 * search (SCATTER_MAX_SEARCH, SCATTER_MAX_PROBES). p[0]: axis (elements)
 * or m (ND); p[1]: 0 none, 1 add, 2 mul, 3 min, 4 max; in: data, indices,
 * updates. */
static te_expr *compute_scatter(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *data = t->in[0], *ind = t->in[1], *upd = t->in[2];
  bool nd = t->ip == 1;
  int red = (int)t->p[1], q = ind->rank;
  int64_t extent = nd ? kiln_shape_numel(q - 1, ind->dims) : ind->dims[t->p[0]];
  int v = te_new_var(b);
  te_set_var_extent(b, v, extent);
  te_expr *j = te_var(b, v), *hit = NULL, *usub[KILN_MAX_RANK];
  if (nd) {
    int m = (int)t->p[0];
    te_expr *isub[KILN_MAX_RANK];
    /* j unravelled over the indices' leading dims, which updates leads with too */
    te_expr *rest = j;
    for (int d = q - 2; d >= 0; d--) {
      isub[d] = usub[d] = d ? te_imod(b, rest, ind->dims[d]) : rest;
      if (d) rest = te_idiv(b, rest, ind->dims[d]);
    }
    for (int c = 0; c < m; c++) {
      isub[q - 1] = te_idx(b, c);
      te_expr *eq = te_binary(b, TE_EQ, wrapped_index(b, ind, isub, data->dims[c]), idx[c]);
      hit = hit ? te_binary(b, TE_AND, hit, eq) : eq;
    }
    for (int d = m; d < data->rank; d++) usub[q - 1 + d - m] = idx[d];
  } else {
    int axis = (int)t->p[0];
    for (int d = 0; d < data->rank; d++) {
      if (d == axis) {
        usub[d] = j;
      } else if (ind->dims[d] < data->dims[d]) { /* past the indices' extent no update lands */
        usub[d] = te_binary(b, TE_MIN, idx[d], te_idx(b, ind->dims[d] - 1));
        te_expr *in = te_binary(b, TE_LT, idx[d], te_idx(b, ind->dims[d]));
        hit = hit ? te_binary(b, TE_AND, hit, in) : in;
      } else {
        usub[d] = idx[d];
      }
    }
    te_expr *eq = te_binary(b, TE_EQ, wrapped_index(b, ind, usub, data->dims[axis]), idx[axis]);
    hit = hit ? te_binary(b, TE_AND, hit, eq) : eq;
  }
  te_expr *old = te_at(b, data, idx);
  if (red == 0) {
    te_expr *last = te_reduce(b, TE_RMAX, v, extent, te_select(b, hit, j, te_idx(b, -1)));
    te_expr *found = te_binary(b, TE_LE, te_idx(b, 0), last);
    /* the updates' element at the last hit (index 0 when none: not used) */
    te_expr *at = te_binary(b, TE_MAX, last, te_idx(b, 0)), *lsub[KILN_MAX_RANK];
    int ur = upd->rank;
    for (int d = 0; d < ur; d++) lsub[d] = te_substitute(b, usub[d], v, at);
    return te_select(b, found, te_at(b, upd, lsub), old);
  }
  te_expr *u = te_at(b, upd, usub);
  kiln_dtype dt = t->dtype;
  bool f = dt == KILN_DTYPE_F32;
  if (red == 1) {
    te_expr *zero = f ? f32c(b, 0) : te_const_i(b, dt, 0);
    return te_binary(b, TE_ADD, old, te_reduce(b, TE_RSUM, v, extent, te_select(b, hit, u, zero)));
  }
  if (red == 2) {
    te_expr *one = f ? f32c(b, 1) : te_const_i(b, dt, 1);
    return te_binary(b, TE_MUL, old, te_reduce(b, TE_RPROD, v, extent, te_select(b, hit, u, one)));
  }
  /* integers (the claim's rule): old stands in for the updates that miss,
   * and joins once more for when all of them hit */
  bool is_min = red == 3;
  te_expr *ext = te_reduce(b, is_min ? TE_RMIN : TE_RMAX, v, extent, te_select(b, hit, u, old));
  return te_binary(b, is_min ? TE_MIN : TE_MAX, old, ext);
}

/* DepthToSpace (ip 1) and SpaceToDepth (ip 0), NCHW, as ops/movement_layout.c
 * maps them: block (i, j) of a pixel is channel group i*b + j of the depth
 * side (DCR: the group outermost, (i*b + j)*C + c; CRD: innermost,
 * c*b*b + i*b + j). p[0]: blocksize, p[1]: CRD. */
static te_expr *compute_depth_space(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int64_t bs = t->p[0], bb = bs * bs;
  bool crd = t->p[1] != 0;
  te_expr *sub[4] = {idx[0]};
  if (t->ip) { /* to space: out [N, C/bb, H*b, W*b] */
    int64_t cout = t->dims[1];
    te_expr *i = te_imod(b, idx[2], bs), *j = te_imod(b, idx[3], bs);
    te_expr *blk = te_iadd(b, te_imul(b, i, bs), j);
    sub[1] = crd ? te_iadd(b, te_imul(b, idx[1], bb), blk) : te_iadd(b, te_imul(b, blk, cout), idx[1]);
    sub[2] = te_idiv(b, idx[2], bs);
    sub[3] = te_idiv(b, idx[3], bs);
  } else { /* to depth: out [N, C*bb, H/b, W/b] */
    int64_t c = in->dims[1];
    te_expr *k = crd ? te_imod(b, idx[1], bb) : te_idiv(b, idx[1], c);
    sub[1] = crd ? te_idiv(b, idx[1], bb) : te_imod(b, idx[1], c);
    sub[2] = te_iadd(b, te_imul(b, idx[2], bs), te_idiv(b, k, bs));
    sub[3] = te_iadd(b, te_imul(b, idx[3], bs), te_imod(b, k, bs));
  }
  return te_at(b, in, sub);
}

/* CumSum (ip 0) and CumProd (ip 1): element i of the axis combines the
 * axis's elements k with k <= i (exclusive: k < i; reverse: k >= i, k > i)
 * and the identity elsewhere, in k's order (ref's order; it accumulates
 * floats in double). The claim bounds the axis (SCAN_MAX_SEARCH). p[0]:
 * axis, p[1]: exclusive, p[2]: reverse. */
static te_expr *compute_scan(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int axis = (int)t->p[0];
  int64_t n = in->dims[axis];
  int v = te_new_var(b);
  te_set_var_extent(b, v, n);
  te_expr *k = te_var(b, v), *i = idx[axis], *sub[KILN_MAX_RANK];
  for (int d = 0; d < in->rank; d++) sub[d] = d == axis ? k : idx[d];
  bool excl = t->p[1] != 0, rev = t->p[2] != 0;
  te_expr *take = rev ? te_binary(b, excl ? TE_LT : TE_LE, i, k) : te_binary(b, excl ? TE_LT : TE_LE, k, i);
  kiln_dtype dt = t->dtype;
  double id = t->ip ? 1.0 : 0.0;
  te_expr *ident = dt == KILN_DTYPE_F32 ? f32c(b, id) : te_const_i(b, dt, (int64_t)id);
  return te_reduce(b, t->ip ? TE_RPROD : TE_RSUM, v, n, te_select(b, take, te_at(b, in, sub), ident));
}

/* OneHot: on where the index at the output's other coordinates equals the
 * output's coordinate d on the axis (negative indices counted from the
 * end; float ones truncated), off elsewhere, and everywhere on a row
 * whose index is outside [-depth, depth) (the spec's rule, no error).
 * p[0]: axis, p[1]: depth; in: indices, values [off, on]. */
static te_expr *compute_onehot(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *ind = t->in[0], *vals = t->in[1];
  int axis = (int)t->p[0];
  int64_t depth = t->p[1];
  te_expr *sub[KILN_MAX_RANK], *d = idx[axis];
  for (int a = 0, o = 0; a < t->rank; a++)
    if (a != axis) sub[o++] = idx[a];
  te_expr *x = te_at(b, ind, sub), *hit;
  if (x->dtype == KILN_DTYPE_F32) {
    /* truncated toward zero, compared as floats (exact below 2^24; NaN is never in range) */
    te_expr *tr = te_select(b, te_binary(b, TE_LT, x, f32c(b, 0)), te_call1(b, "ceilf", x), te_call1(b, "floorf", x));
    te_expr *in = te_binary(b, TE_AND, te_binary(b, TE_LE, f32c(b, (double)-depth), tr), te_binary(b, TE_LT, tr, f32c(b, (double)depth)));
    te_expr *w = te_select(b, te_binary(b, TE_LT, tr, f32c(b, 0)), te_binary(b, TE_ADD, tr, f32c(b, (double)depth)), tr);
    hit = te_binary(b, TE_AND, in, te_binary(b, TE_EQ, w, te_cast(b, KILN_DTYPE_F32, d)));
  } else {
    te_expr *v = te_cast(b, KILN_DTYPE_I64, x);
    te_expr *in = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, -depth), v), te_binary(b, TE_LT, v, te_idx(b, depth)));
    te_expr *w = te_select(b, te_binary(b, TE_LT, v, te_idx(b, 0)), te_iadd(b, v, te_idx(b, depth)), v);
    hit = te_binary(b, TE_AND, in, te_binary(b, TE_EQ, w, d));
  }
  te_expr *at[KILN_MAX_RANK] = {0};
  int vr = vals->rank;
  for (int a = 0; a < vr; a++) at[a] = te_idx(b, 0);
  te_expr *off = te_at(b, vals, at);
  if (vr) at[vr - 1] = te_idx(b, 1);
  return te_select(b, hit, vr ? te_at(b, vals, at) : off, off);
}

/* EyeLike: 1 on the diagonal k (j - i == k), 0 elsewhere. p[0]: k (clamped). */
static te_expr *compute_eyelike(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  kiln_dtype dt = t->dtype;
  bool flt = dt == KILN_DTYPE_F32 || kiln_dtype_is_half(dt);
  te_expr *one = flt ? te_const_f(b, dt, 1) : te_const_i(b, dt, 1), *zero = flt ? te_const_f(b, dt, 0) : te_const_i(b, dt, 0);
  te_expr *on = te_binary(b, TE_EQ, te_binary(b, TE_SUB, idx[1], idx[0]), te_idx(b, t->p[0]));
  return te_select(b, on, one, zero);
}

static te_expr *compute_arg(te_builder *b, const te_tensor *t, te_expr *const *idx);

/* Hardmax: 1 at the row's first maximum (a NaN counts as the maximum),
 * 0 elsewhere: ArgMax's definition (keepdims) against the axis's index.
 * p[0]: axis (p[1], ip, fp[0]: ArgMax's keepdims, kind, first index). */
static te_expr *compute_hardmax(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *at = compute_arg(b, t, idx);
  return te_select(b, te_binary(b, TE_EQ, at, idx[t->p[0]]), f32c(b, 1), f32c(b, 0));
}

/* ReverseSequence: along the time axis, the first len[b] elements of batch
 * b reversed, the rest as they are. p[0]: time axis, p[1]: batch axis,
 * p[2 + b]: the constant lengths (at most REVSEQ_MAX_BATCH: the claim's). */
static te_expr *compute_revseq(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  int ta = (int)t->p[0], ba = (int)t->p[1];
  int64_t nb = t->dims[ba];
  /* len of this batch row: a select chain over the constants */
  te_expr *len = te_idx(b, t->p[2 + nb - 1]);
  for (int64_t i = nb - 2; i >= 0; i--)
    len = te_select(b, te_binary(b, TE_EQ, idx[ba], te_idx(b, i)), te_idx(b, t->p[2 + i]), len);
  te_expr *sub[KILN_MAX_RANK];
  for (int d = 0; d < t->rank; d++) sub[d] = idx[d];
  te_expr *tt = idx[ta];
  te_expr *rev = te_binary(b, TE_SUB, te_binary(b, TE_SUB, len, te_idx(b, 1)), tt);
  sub[ta] = te_select(b, te_binary(b, TE_LT, tt, len), rev, tt);
  return te_at(b, t->in[0], sub);
}

/* Trilu: element (i, j) of each matrix where j - i >= k (upper) or
 * j - i <= k (lower), else 0. p[0]: k (clamped: past the matrix's size it
 * changes nothing), p[1]: upper. */
static te_expr *compute_trilu(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  int r = t->rank;
  te_expr *diff = te_binary(b, TE_SUB, idx[r - 1], idx[r - 2]), *k = te_idx(b, t->p[0]);
  te_expr *keep = t->p[1] ? te_binary(b, TE_LE, k, diff) : te_binary(b, TE_LE, diff, k);
  kiln_dtype dt = t->dtype;
  te_expr *zero = dt == KILN_DTYPE_F32 || kiln_dtype_is_half(dt) ? te_const_f(b, dt, 0) : te_const_i(b, dt, 0);
  return te_select(b, keep, te_at(b, t->in[0], idx), zero);
}

/* ArgMax/ArgMin as ref computes them: the first (select_last_index: the
 * last) position of the best value, where NaN beats every number. p[0]:
 * axis, p[1]: keepdims; ip: 1 ArgMax, 0 ArgMin; fp[0]: select_last_index.
 * Three reductions over the axis: the best value, the first/last position
 * holding it, the first/last NaN. */
static te_expr *arg_reduce(te_builder *b, const te_tensor *t, te_expr *const *idx, int kind) {
  const te_tensor *in = t->in[0];
  int axis = (int)t->p[0];
  bool keep = t->p[1] != 0, last = t->fp[0] != 0;
  int64_t n = in->dims[axis];
  int v = te_new_var(b);
  te_set_var_extent(b, v, n);
  te_expr *sub[KILN_MAX_RANK] = {0};
  for (int d = 0, o = 0; d < in->rank; d++) {
    if (d == axis) {
      sub[d] = te_var(b, v);
      if (keep) o++;
    } else {
      sub[d] = idx[o++];
    }
  }
  te_expr *x = te_at(b, in, sub);
  if (kind == 0) return te_reduce(b, t->ip ? TE_RMAX : TE_RMIN, v, n, x);
  te_expr *hit = kind == 1 ? te_binary(b, TE_EQ, x, arg_reduce(b, t, idx, 0)) : te_binary(b, TE_NE, x, x);
  te_expr *none = te_idx(b, last ? -1 : n);
  return te_reduce(b, last ? TE_RMAX : TE_RMIN, v, n, te_select(b, hit, te_var(b, v), none));
}

static te_expr *compute_arg(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  te_expr *at = arg_reduce(b, t, idx, 1);
  if (t->in[0]->dtype != KILN_DTYPE_F32) return at;
  te_expr *nan = arg_reduce(b, t, idx, 2);
  bool last = t->fp[0] != 0;
  te_expr *found = last ? te_binary(b, TE_LE, te_idx(b, 0), nan) : te_binary(b, TE_LT, nan, te_idx(b, t->in[0]->dims[t->p[0]]));
  return te_select(b, found, nan, at);
}

/* p[0]: axis */
static te_expr *compute_concat(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  int axis = (int)t->p[0];
  int64_t offs[8];
  int64_t off = 0;
  for (int k = 0; k < t->n_in; k++) {
    offs[k] = off;
    off += t->in[k]->dims[axis];
  }
  te_expr *sub[KILN_MAX_RANK];
  for (int i = 0; i < t->rank; i++) sub[i] = idx[i];
  /* Every operand's load is computed (the C renderer evaluates both sides of
   * a select), so each index is clamped into its own operand. */
  te_expr *r = NULL;
  for (int k = t->n_in - 1; k >= 0; k--) {
    if (t->in[k]->dims[axis] == 0) continue; /* contributes nothing; has no element to load */
    te_expr *local = te_binary(b, TE_SUB, idx[axis], te_idx(b, offs[k]));
    sub[axis] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, local, te_idx(b, 0)), te_idx(b, t->in[k]->dims[axis] - 1));
    te_expr *v = te_at(b, t->in[k], sub);
    r = r ? te_select(b, te_binary(b, TE_LT, idx[axis], te_idx(b, offs[k + 1])), v, r) : v;
  }
  return r;
}

/* Builds a reduction of f(x[...]) over the axes in mask (p[0..r) is the mask,
 * p[KILN_MAX_RANK] keepdims) for output index idx. `value` maps the loaded
 * element (sq, abs, exp(x - m)...). */
typedef te_expr *(*map_fn)(te_builder *b, te_expr *x, te_expr *aux);

/* Over a buffer, adjacent reduced axes are one reduction over their
 * elements, which lie side by side: the loop runs over a contiguous run
 * (vectorized, with several accumulators) where nested loops ran a short
 * innermost one of dependent adds (BatchNormalization's statistics of a
 * [64, 32, 28, 28] activation: 28 at a time). */
static te_expr *reduce_over_buffer(te_builder *b, const te_tensor *in, const int64_t *mask, bool keepdims,
                                   te_expr *const *idx, te_reduce_op rop, map_fn map, te_expr *aux) {
  te_expr *sub[KILN_MAX_RANK] = {0};
  int64_t dims[KILN_MAX_RANK], ext[KILN_MAX_RANK];
  int vars[KILN_MAX_RANK], nv = 0, r = 0;
  for (int i = 0, o = 0; i < in->rank; r++) {
    if (!mask[i]) {
      dims[r] = in->dims[i];
      sub[r] = idx[o++];
      i++;
      continue;
    }
    int64_t n = 1;
    for (; i < in->rank && mask[i]; i++) {
      n *= in->dims[i];
      if (keepdims) o++;
    }
    dims[r] = ext[nv] = n;
    vars[nv] = te_new_var(b);
    te_set_var_extent(b, vars[nv], n);
    sub[r] = te_var(b, vars[nv++]);
  }
  te_expr *body = te_load(b, in->buf, te_linearize(b, r, dims, sub));
  if (map) body = map(b, body, aux);
  for (int k = nv - 1; k >= 0; k--) body = te_reduce(b, rop, vars[k], ext[k], body);
  return body;
}

static te_expr *reduce_over(te_builder *b, const te_tensor *in, const int64_t *mask, bool keepdims,
                            te_expr *const *idx, te_reduce_op rop, map_fn map, te_expr *aux) {
  bool adjacent = false;
  for (int i = 1; i < in->rank; i++) adjacent |= mask[i] && mask[i - 1];
  if (adjacent && in->kind == TE_VIEW_BUFFER) return reduce_over_buffer(b, in, mask, keepdims, idx, rop, map, aux);
  te_expr *sub[KILN_MAX_RANK] = {0};
  int vars[KILN_MAX_RANK], nv = 0;
  for (int i = 0, o = 0; i < in->rank; i++) {
    if (mask[i]) {
      vars[nv] = te_new_var(b);
      te_set_var_extent(b, vars[nv], in->dims[i]);
      sub[i] = te_var(b, vars[nv++]);
      if (keepdims) o++;
    } else {
      sub[i] = idx[o++];
    }
  }
  te_expr *body = te_at(b, in, sub);
  if (map) body = map(b, body, aux);
  for (int k = nv - 1; k >= 0; k--) {
    int64_t extent = 0;
    for (int i = 0, seen = 0; i < in->rank; i++)
      if (mask[i] && seen++ == k) extent = in->dims[i];
    body = te_reduce(b, rop, vars[k], extent, body);
  }
  return body;
}

static te_expr *map_sq(te_builder *b, te_expr *x, te_expr *aux) { return te_binary(b, TE_MUL, x, x); }
static te_expr *map_abs(te_builder *b, te_expr *x, te_expr *aux) { return te_unary(b, TE_ABS, x); }
static te_expr *map_exp_sub(te_builder *b, te_expr *x, te_expr *m) {
  return te_call1(b, "kiln_expf", te_binary(b, TE_SUB, x, m));
}

static void tag_global_pool(te_builder *b, const te_tensor *in, te_expr *const *idx, const te_expr *value, bool max);

static te_expr *compute_reduce(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  const int64_t *mask = t->p;
  bool keep = t->p[KILN_MAX_RANK] != 0;
  int64_t count = 1;
  for (int i = 0; i < in->rank; i++)
    if (mask[i]) count *= in->dims[i];
  /* ReduceMean / ReduceMax over every axis after the second, keepdims:
   * a global pool (squeeze-excite blocks), tagged as GlobalAveragePool is. */
  bool global = keep && in->rank >= 3;
  for (int i = 0; i < in->rank && global; i++) global = (mask[i] != 0) == (i >= 2);
  switch ((reduce_kind)t->ip) {
    case R_SUM: return reduce_over(b, in, mask, keep, idx, TE_RSUM, NULL, NULL);
    case R_MEAN: {
      te_expr *v =
          te_binary(b, TE_MUL, reduce_over(b, in, mask, keep, idx, TE_RSUM, NULL, NULL), f32c(b, 1.0 / (double)count));
      if (global && in->dtype == KILN_DTYPE_F32) tag_global_pool(b, in, idx, v, false);
      return v;
    }
    case R_MAX: {
      te_expr *v = reduce_over(b, in, mask, keep, idx, TE_RMAX, NULL, NULL);
      if (global && in->dtype == KILN_DTYPE_F32) tag_global_pool(b, in, idx, v, true);
      return v;
    }
    case R_MIN: return reduce_over(b, in, mask, keep, idx, TE_RMIN, NULL, NULL);
    case R_PROD: return reduce_over(b, in, mask, keep, idx, TE_RPROD, NULL, NULL);
    case R_SUMSQ: return reduce_over(b, in, mask, keep, idx, TE_RSUM, map_sq, NULL);
    case R_L1: return reduce_over(b, in, mask, keep, idx, TE_RSUM, map_abs, NULL);
    case R_L2: return te_call1(b, "sqrtf", reduce_over(b, in, mask, keep, idx, TE_RSUM, map_sq, NULL));
    case R_LOGSUM: return te_call1(b, "logf", reduce_over(b, in, mask, keep, idx, TE_RSUM, NULL, NULL));
    case R_LOGSUMEXP: {
      te_expr *m = reduce_over(b, in, mask, keep, idx, TE_RMAX, NULL, NULL);
      te_expr *s = reduce_over(b, in, mask, keep, idx, TE_RSUM, map_exp_sub, m);
      return te_binary(b, TE_ADD, te_call1(b, "logf", s), m);
    }
  }
  return NULL;
}

/* Softmax / LogSoftmax: p[0..r) mask of the normalized axes; ip 1 = log. The
 * two reductions depend only on the row, so the scheduler computes them once
 * per row (hoisting) and the element loop is cheap. */
static te_expr *compute_softmax(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  te_expr *x = te_at(b, in, idx);
  /* keepdims view: reduce_over with keepdims=1 reads idx at the kept axes */
  te_expr *m = reduce_over(b, in, t->p, true, idx, TE_RMAX, NULL, NULL);
  te_expr *s = reduce_over(b, in, t->p, true, idx, TE_RSUM, map_exp_sub, m);
  te_expr *shifted = te_binary(b, TE_SUB, x, m);
  if (t->ip) return te_binary(b, TE_SUB, shifted, te_call1(b, "logf", s));
  return te_binary(b, TE_DIV, te_call1(b, "kiln_expf", shifted), s);
}

/* value (the max, or the mean, over every axis of `in` after the channel,
 * keepdims) tagged as a pool whose window is the whole plane, where `in`
 * is a buffer with 1-3 spatial axes. */
static void tag_global_pool(te_builder *b, const te_tensor *in, te_expr *const *idx, const te_expr *value, bool max) {
  int ns = in->rank - 2;
  if (!value || in->kind != TE_VIEW_BUFFER || ns < 1 || ns > 3 || kiln_shape_numel(in->rank, in->dims) <= 0) return;
  te_pool_tag tag = {.value = value, .x_buf = in->buf, .nsp = ns, .max = max, .n = in->dims[0], .c = in->dims[1]};
  for (int i = 0; i < 2 + ns; i++) tag.idx[i] = idx[i];
  for (int i = 0; i < ns; i++) {
    tag.in[i] = tag.kernel[i] = in->dims[2 + i];
    tag.out[i] = tag.stride[i] = tag.dilation[i] = 1;
  }
  te_tag_pool(b, &tag);
}

/* Global pools: reduce every axis after the channel. Read straight from a
 * buffer with 1-3 spatial axes, the element is tagged as the pool whose
 * window is the whole plane (te_pool_tag), so a runtime routine may
 * compute it (the cpu: one vectorized reduction per plane, in both tiers;
 * its interpreter evaluated the nested reductions 45x slower than the
 * compiled loop on a 32x32 plane). */
static te_expr *compute_global_pool(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int64_t mask[KILN_MAX_RANK] = {0}, count = 1;
  for (int i = 2; i < in->rank; i++) {
    mask[i] = 1;
    count *= in->dims[i];
  }
  te_expr *value = t->ip ? reduce_over(b, in, mask, true, idx, TE_RMAX, NULL, NULL)
                         : te_binary(b, TE_MUL, reduce_over(b, in, mask, true, idx, TE_RSUM, NULL, NULL),
                                     f32c(b, 1.0 / (double)count));
  tag_global_pool(b, in, idx, value, t->ip != 0);
  return value;
}

/* Windowed pools. p: [0..s) kernel, [4..) strides, [8..) dilations, [12..)
 * pad begin (s = spatial dims); ip: 1 max, 0 average; fp[0]: count_include_pad.
 * Padding is never read: the index is clamped and the element masked. */
/* Input position of window element k (a variable) along spatial axis i for
 * output position idx[2 + i]: o * stride - pad_begin + k * dilation, with
 * t->p[4..) strides, p[8..) dilations, p[12..) pad begin (pools and Conv). */
static te_expr *window_pos(te_builder *b, const te_tensor *t, te_expr *const *idx, int i, int k) {
  return te_iadd(b, te_imul(b, idx[2 + i], t->p[4 + i]),
                 te_iadd(b, te_imul(b, te_var(b, k), t->p[8 + i]), te_idx(b, -t->p[12 + i])));
}

/* The window of output position idx over input `in` (spatial axes 2..):
 * fresh variables vars[i] for the window elements, sub[2 + i] their input
 * positions clamped into the input (every load is computed), and the
 * condition that all of them are inside it (else: padding). An axis whose
 * windows never leave the input (no padding reached: 1x1 and unpadded
 * convolutions) keeps its plain position and adds no condition, so the
 * index stays affine (what tensorization and the GPU templates read);
 * NULL when no axis needs one. */
static te_expr *window_sub(te_builder *b, const te_tensor *t, const te_tensor *in, te_expr *const *idx, int *vars,
                           te_expr **sub) {
  te_expr *valid = NULL;
  for (int i = 0; i < in->rank - 2; i++) {
    vars[i] = te_new_var(b);
    te_expr *pos = window_pos(b, t, idx, i, vars[i]);
    int64_t last = (t->dims[2 + i] - 1) * t->p[4 + i] - t->p[12 + i] + (t->p[i] - 1) * t->p[8 + i];
    if (t->p[12 + i] <= 0 && t->dims[2 + i] >= 1 && last <= in->dims[2 + i] - 1) {
      sub[2 + i] = pos;
      continue;
    }
    te_expr *ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), pos), te_binary(b, TE_LT, pos, te_idx(b, in->dims[2 + i])));
    valid = valid ? te_binary(b, TE_AND, valid, ok) : ok;
    sub[2 + i] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, pos, te_idx(b, 0)), te_idx(b, in->dims[2 + i] - 1));
  }
  return valid;
}

static te_expr *compute_pool_element(te_builder *b, const te_tensor *t, te_expr *const *idx);

/* The element of in[0] at window position vars (fresh) of output idx:
 * sub its index (clamped into the input), *valid window_sub's condition. */
static te_expr *window_load(te_builder *b, const te_tensor *t, te_expr *const *idx, int *vars, te_expr **sub,
                            te_expr **valid) {
  sub[0] = idx[0];
  sub[1] = idx[1];
  *valid = window_sub(b, t, t->in[0], idx, vars, sub);
  return te_at(b, t->in[0], sub);
}

/* The pool's element, tagged (te_pool_tag) when it reads its input
 * straight from a buffer: a runtime routine may compute it. */
static te_expr *compute_pool(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  te_expr *value = compute_pool_element(b, t, idx);
  int ns = in->rank - 2;
  if (value && in->kind == TE_VIEW_BUFFER && ns >= 1 && ns <= 3) {
    te_pool_tag tag = {.value = value, .x_buf = in->buf, .nsp = ns, .max = t->ip != 0,
                       .count_include_pad = t->fp[0] != 0, .n = in->dims[0], .c = in->dims[1]};
    for (int i = 0; i < 2 + ns; i++) tag.idx[i] = idx[i];
    for (int i = 0; i < ns; i++) {
      tag.in[i] = in->dims[2 + i];
      tag.out[i] = t->dims[2 + i];
      tag.kernel[i] = t->p[i];
      tag.stride[i] = t->p[4 + i];
      tag.dilation[i] = t->p[8 + i];
      tag.pad_begin[i] = t->p[12 + i];
      tag.pad_end[i] = t->p[16 + i];
    }
    te_tag_pool(b, &tag);
  }
  return value;
}

static te_expr *compute_pool_element(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int ns = in->rank - 2;
  te_expr *sub[KILN_MAX_RANK], *valid;
  int vars[3];
  te_expr *x = window_load(b, t, idx, vars, sub, &valid);
  te_expr *val = valid ? te_select(b, valid, x, t->ip ? f32c(b, -INFINITY) : f32c(b, 0)) : x;
  te_expr *acc = val;
  for (int i = ns - 1; i >= 0; i--) acc = te_reduce(b, t->ip ? TE_RMAX : TE_RSUM, vars[i], t->p[i], acc);
  if (t->ip) return acc;
  te_expr *count;
  if (t->fp[0] != 0) {
    /* count_include_pad: the window clipped to the padded input */
    int64_t c = 1;
    for (int i = 0; i < ns; i++) c *= t->p[i];
    count = f32c(b, (double)c);
    /* windows hanging past the end padding (ceil_mode) count only to the pad */
    te_expr *cnt = NULL;
    for (int i = 0; i < ns; i++) {
      int v = te_new_var(b);
      te_expr *pos = window_pos(b, t, idx, i, v);
      te_expr *ok = te_binary(b, TE_LT, pos, te_idx(b, in->dims[2 + i] + t->p[16 + i]));
      te_expr *r = te_reduce(b, TE_RSUM, v, t->p[i], te_select(b, ok, f32c(b, 1), f32c(b, 0)));
      cnt = cnt ? te_binary(b, TE_MUL, cnt, r) : r;
    }
    count = cnt ? cnt : count;
  } else {
    /* Count the window's elements inside the input: a reduction of its own
     * (every reduction binds fresh variables). */
    te_expr *cvalid = NULL;
    int cvars[3];
    for (int i = 0; i < ns; i++) {
      cvars[i] = te_new_var(b);
      te_expr *pos = window_pos(b, t, idx, i, cvars[i]);
      te_expr *ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), pos),
                              te_binary(b, TE_LT, pos, te_idx(b, in->dims[2 + i])));
      cvalid = cvalid ? te_binary(b, TE_AND, cvalid, ok) : ok;
    }
    te_expr *ones = te_select(b, cvalid, f32c(b, 1), f32c(b, 0));
    for (int i = ns - 1; i >= 0; i--) ones = te_reduce(b, TE_RSUM, cvars[i], t->p[i], ones);
    count = ones;
  }
  return te_binary(b, TE_DIV, acc, count);
}

/* kiln.MaxPoolArgmax (ops/nn_pool.c): the flat in-plane position of the
 * element MaxPool's output takes: the first NaN of the window if any, else
 * its first maximum; -1 when no window element is inside the input. Two
 * window reductions, each over fresh variables: the maximum (NaN when the
 * window holds one: the combine keeps NaN), then the first position whose
 * element equals it or is NaN (with a NaN in the window only NaNs match:
 * the first NaN; else the first maximum). p as compute_pool's. */
static te_expr *argmax_pass(te_builder *b, const te_tensor *t, te_expr *const *idx, int kind, te_expr *m) {
  const te_tensor *in = t->in[0];
  int ns = in->rank - 2;
  te_expr *sub[KILN_MAX_RANK], *valid, *body;
  int vars[3];
  te_expr *x = window_load(b, t, idx, vars, sub, &valid);
  if (kind == 0) {
    body = valid ? te_select(b, valid, x, f32c(b, -INFINITY)) : x;
  } else {
    te_expr *hit = te_binary(b, TE_OR, te_binary(b, TE_EQ, x, m), te_binary(b, TE_NE, x, x));
    if (valid) hit = te_binary(b, TE_AND, valid, hit);
    int64_t plane = kiln_shape_numel(ns, in->dims + 2);
    body = te_select(b, hit, te_linearize(b, ns, in->dims + 2, sub + 2), te_idx(b, plane));
  }
  for (int i = ns - 1; i >= 0; i--) body = te_reduce(b, kind == 0 ? TE_RMAX : TE_RMIN, vars[i], t->p[i], body);
  return body;
}

/* The same for a window of at most 16 taps, unrolled: each tap's
 * element and position built with constant offsets, the maximum a chain
 * of combines, the first match a chain of selects from the last tap back.
 * Straight-line code, so the loop over the output's last axis vectorizes
 * (the reductions' short loops kept it scalar: 4.1 ms for the FMNIST CNN's
 * first pool gradient, 401k outputs). */
static te_expr *argmax_unrolled(te_builder *b, const te_tensor *t, te_expr *const *idx, int64_t taps) {
  const te_tensor *in = t->in[0];
  int ns = in->rank - 2;
  te_expr *x[16], *pos[16], *ok[16], *m = NULL;
  for (int64_t k = 0; k < taps; k++) {
    te_expr *sub[KILN_MAX_RANK], *valid = NULL;
    sub[0] = idx[0];
    sub[1] = idx[1];
    int64_t rest = k;
    for (int i = ns - 1; i >= 0; i--) {
      int64_t tap = rest % t->p[i];
      rest /= t->p[i];
      te_expr *p = te_iadd(b, te_imul(b, idx[2 + i], t->p[4 + i]), te_idx(b, tap * t->p[8 + i] - t->p[12 + i]));
      te_expr *in_range = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), p),
                                    te_binary(b, TE_LT, p, te_idx(b, in->dims[2 + i])));
      valid = valid ? te_binary(b, TE_AND, valid, in_range) : in_range;
      sub[2 + i] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, p, te_idx(b, 0)), te_idx(b, in->dims[2 + i] - 1));
    }
    x[k] = te_at(b, in, sub);
    ok[k] = valid;
    pos[k] = te_linearize(b, ns, in->dims + 2, sub + 2);
    te_expr *v = te_select(b, valid, x[k], f32c(b, -INFINITY));
    /* the combine TE_RMAX renders: NaN kept */
    m = m ? te_select(b, te_binary(b, TE_OR, te_binary(b, TE_NE, v, v), te_binary(b, TE_LT, m, v)), v, m) : v;
  }
  te_expr *r = te_idx(b, -1);
  for (int64_t k = taps - 1; k >= 0; k--) {
    te_expr *hit = te_binary(b, TE_AND, ok[k], te_binary(b, TE_OR, te_binary(b, TE_EQ, x[k], m), te_binary(b, TE_NE, x[k], x[k])));
    r = te_select(b, hit, pos[k], r);
  }
  return te_cast(b, KILN_DTYPE_I32, r);
}

static te_expr *compute_max_pool_argmax(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int64_t taps = 1;
  for (int i = 0; i < in->rank - 2; i++) taps *= t->p[i];
  if (taps <= 16) return argmax_unrolled(b, t, idx, taps);
  te_expr *plane = te_idx(b, kiln_shape_numel(in->rank - 2, in->dims + 2));
  te_expr *first = argmax_pass(b, t, idx, 1, argmax_pass(b, t, idx, 0, NULL));
  return te_cast(b, KILN_DTYPE_I32, te_select(b, te_binary(b, TE_LT, first, plane), first, te_idx(b, -1)));
}

/* kiln.MaxPoolGrad(dY, I, shape): dX[n, c, q] = the sum of dY[n, c, o] over
 * the outputs o whose window holds q and whose I is q's flat position. Per
 * spatial axis, the outputs whose window holds q: one, o = (q + pad) /
 * stride at tap (q + pad) % stride when windows do not overlap (stride >=
 * kernel, no dilation); else one candidate per tap k, o = (q + pad - k *
 * dilation) / stride where that divides (offset by a multiple of the stride
 * so the division's operand is never negative), the taps of those axes a
 * reduction. p as compute_pool's, dims dX's; in[0] dY, in[1] I. */
/* Output j of the candidates along axis i that may hold input position q
 * (idx[2 + i]) in their window, and whether it does (*ok). Windows without
 * dilation: (q + pad) / stride - j, j < ceil(kernel / stride) (ResNet's
 * 3x3/2 stem pool: 2 a side, not 3 taps with a divisibility test each);
 * dilated ones: by tap j, where it divides. */
static te_expr *pool_grad_candidate(te_builder *b, const te_tensor *t, te_expr *const *idx, int i, int64_t j,
                                    te_expr **ok) {
  int64_t k = t->p[i], s = t->p[4 + i], d = t->p[8 + i], pb = t->p[12 + i], out = t->in[0]->dims[2 + i];
  te_expr *o;
  if (d == 1) {
    te_expr *sh = te_iadd(b, idx[2 + i], te_idx(b, pb));
    o = te_iadd(b, te_idiv(b, sh, s), te_idx(b, -j));
    te_expr *tap = te_iadd(b, sh, te_imul(b, o, -s));
    *ok = te_binary(b, TE_AND, te_binary(b, TE_LT, tap, te_idx(b, k)),
                    te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), o), te_binary(b, TE_LT, o, te_idx(b, out))));
  } else {
    int64_t lift = ((k - 1) * d + s - 1) / s; /* sh >= 0 */
    te_expr *sh = te_iadd(b, idx[2 + i], te_idx(b, pb - j * d + lift * s));
    o = te_iadd(b, te_idiv(b, sh, s), te_idx(b, -lift));
    *ok = te_binary(b, TE_AND, te_binary(b, TE_EQ, te_imod(b, sh, s), te_idx(b, 0)),
                    te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), o), te_binary(b, TE_LT, o, te_idx(b, out))));
  }
  return te_binary(b, TE_MIN, te_binary(b, TE_MAX, o, te_idx(b, 0)), te_idx(b, out - 1));
}

static te_expr *compute_max_pool_grad(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *dy = t->in[0], *ind = t->in[1];
  int ns = t->rank - 2;
  /* Up to 16 candidate windows: their sum unrolled (straight-line code the
   * loop over the last axis vectorizes); more: a reduction over taps. */
  int64_t cands[3], combos = 1;
  for (int i = 0; i < ns; i++) {
    int64_t k = t->p[i], s = t->p[4 + i];
    cands[i] = t->p[8 + i] == 1 ? (k + s - 1) / s : k;
    combos *= cands[i];
  }
  if (combos <= 16) {
    te_expr *q = te_linearize(b, ns, t->dims + 2, idx + 2), *sum = NULL;
    for (int64_t cmb = 0; cmb < combos; cmb++) {
      te_expr *osub[KILN_MAX_RANK], *ok = NULL;
      osub[0] = idx[0];
      osub[1] = idx[1];
      int64_t rest = cmb;
      for (int i = ns - 1; i >= 0; i--) {
        te_expr *c;
        osub[2 + i] = pool_grad_candidate(b, t, idx, i, rest % cands[i], &c);
        rest /= cands[i];
        ok = ok ? te_binary(b, TE_AND, ok, c) : c;
      }
      te_expr *hit = te_binary(b, TE_AND, ok, te_binary(b, TE_EQ, te_cast(b, KILN_DTYPE_I64, te_at(b, ind, osub)), q));
      te_expr *v = te_select(b, hit, te_at(b, dy, osub), f32c(b, 0));
      sum = sum ? te_binary(b, TE_ADD, sum, v) : v;
    }
    return sum;
  }
  bool single[3];
  int64_t taps = 1, tap_stride[3] = {1, 1, 1};
  for (int i = ns - 1; i >= 0; i--) {
    single[i] = t->p[8 + i] == 1 && t->p[4 + i] >= t->p[i];
    if (single[i]) continue;
    tap_stride[i] = taps;
    taps *= t->p[i];
  }
  int rv = -1;
  if (taps > 1) {
    rv = te_new_var(b);
    te_set_var_extent(b, rv, taps);
  }
  te_expr *ok = NULL, *osub[KILN_MAX_RANK];
  osub[0] = idx[0];
  osub[1] = idx[1];
  for (int i = 0; i < ns; i++) {
    int64_t k = t->p[i], s = t->p[4 + i], d = t->p[8 + i], pb = t->p[12 + i], out = dy->dims[2 + i];
    te_expr *o, *c;
    if (single[i]) {
      te_expr *sh = te_iadd(b, idx[2 + i], te_idx(b, pb));
      o = te_idiv(b, sh, s);
      c = te_binary(b, TE_LT, o, te_idx(b, out));
      if (k < s) c = te_binary(b, TE_AND, te_binary(b, TE_LT, te_imod(b, sh, s), te_idx(b, k)), c); /* not a gap */
    } else {
      te_expr *tap = te_imod(b, te_idiv(b, te_var(b, rv), tap_stride[i]), k);
      int64_t lift = ((k - 1) * d + s - 1) / s; /* sh >= 0 */
      te_expr *sh = te_iadd(b, te_iadd(b, idx[2 + i], te_imul(b, tap, -d)), te_idx(b, pb + lift * s));
      o = te_iadd(b, te_idiv(b, sh, s), te_idx(b, -lift));
      c = te_binary(b, TE_AND, te_binary(b, TE_EQ, te_imod(b, sh, s), te_idx(b, 0)),
                    te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), o), te_binary(b, TE_LT, o, te_idx(b, out))));
    }
    ok = ok ? te_binary(b, TE_AND, ok, c) : c;
    osub[2 + i] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, o, te_idx(b, 0)), te_idx(b, out - 1));
  }
  te_expr *q = te_linearize(b, ns, t->dims + 2, idx + 2);
  te_expr *hit = te_binary(b, TE_AND, ok, te_binary(b, TE_EQ, te_cast(b, KILN_DTYPE_I64, te_at(b, ind, osub)), q));
  te_expr *v = te_select(b, hit, te_at(b, dy, osub), f32c(b, 0));
  return rv >= 0 ? te_reduce(b, TE_RSUM, rv, taps, v) : v;
}

/* ---- contractions ---------------------------------------------------------------
 *
 * MatMul, Gemm, Conv and FusedAttention as reductions: what a device that
 * has no kernel template for them renders (the null device; a new dialect's
 * first version), and what KILN_CPU_CONTRACTIONS=te checks against ref on
 * the cpu device. The cpu and vulkan devices run their own tiled kernels. */

/* Batch indices of operand t (its last mat_rank axes are the matrix), read
 * from the output's nb batch indices with numpy broadcasting. */
static void batch_sub(te_builder *b, const te_tensor *t, int mat_rank, te_expr *const *batch, int nb, te_expr **sub) {
  int tb = t->rank - mat_rank;
  for (int d = 0; d < tb; d++) sub[d] = t->dims[d] == 1 ? te_idx(b, 0) : batch[nb - tb + d];
}

/* p[0]: rank of A's matrix part (1 or 2), p[1]: of B's. */
static te_expr *compute_matmul(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *A = t->in[0], *B = t->in[1];
  int ma = (int)t->p[0], mb = (int)t->p[1];
  int nb = t->rank - (ma == 2) - (mb == 2); /* output batch axes */
  te_expr *i = ma == 2 ? idx[nb] : NULL, *j = mb == 2 ? idx[t->rank - 1] : NULL;
  int64_t kdim = A->dims[A->rank - 1];
  int k = te_new_var(b);
  te_set_var_extent(b, k, kdim);
  te_expr *sa[KILN_MAX_RANK], *sb[KILN_MAX_RANK];
  batch_sub(b, A, ma, idx, nb, sa);
  batch_sub(b, B, mb, idx, nb, sb);
  int ra = A->rank, rb = B->rank;
  if (ma == 2) sa[ra - 2] = i;
  sa[ra - 1] = te_var(b, k);
  if (mb == 2) {
    sb[rb - 2] = te_var(b, k);
    sb[rb - 1] = j;
  } else {
    sb[rb - 1] = te_var(b, k);
  }
  te_expr *x = te_at(b, A, sa), *y = te_at(b, B, sb);
  if (t->ip) { /* MatMulInteger: int32 products of (a - a_zp) and (b - b_zp), scalar zero points */
    te_expr *zero[KILN_MAX_RANK] = {0};
    for (int d = 0; d < KILN_MAX_RANK; d++) zero[d] = te_idx(b, 0);
    x = te_cast(b, KILN_DTYPE_I32, x);
    y = te_cast(b, KILN_DTYPE_I32, y);
    if (t->p[2] >= 0) x = te_binary(b, TE_SUB, x, te_cast(b, KILN_DTYPE_I32, te_at(b, t->in[t->p[2]], zero)));
    if (t->p[3] >= 0) y = te_binary(b, TE_SUB, y, te_cast(b, KILN_DTYPE_I32, te_at(b, t->in[t->p[3]], zero)));
  }
  return te_reduce(b, TE_RSUM, k, kdim, te_binary(b, TE_MUL, x, y));
}

/* Einsum (sp: the equation, checked by the claim): the product of the
 * inputs at the labels' indices (an axis of size 1 reads 0: it
 * broadcasts), summed over the labels the output does not have. */
static te_expr *compute_einsum(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  int ranks[8];
  const int64_t *dims[8];
  for (int k = 0; k < t->n_in; k++) {
    ranks[k] = t->in[k]->rank;
    dims[k] = t->in[k]->dims;
  }
  kiln_einsum_plan *p = malloc(sizeof *p);
  if (!p) return NULL;
  kiln_status_t st = kiln_einsum_parse(t->sp, t->n_in, ranks, dims, p);
  if (st) {
    kiln_status_free(st);
    free(p);
    return NULL;
  }
  te_expr *lab[KILN_EINSUM_MAX_LABELS] = {0};
  int vars[KILN_EINSUM_MAX_LABELS];
  for (int i = 0; i < p->out_rank; i++) lab[p->out_label[i]] = idx[i];
  for (int s = 0; s < p->n_sum; s++) {
    vars[s] = te_new_var(b);
    lab[p->sum_label[s]] = te_var(b, vars[s]);
  }
  te_expr *prod = NULL;
  for (int k = 0; k < t->n_in; k++) {
    te_expr *sub[KILN_MAX_RANK] = {0};
    for (int ax = 0; ax < ranks[k]; ax++) sub[ax] = dims[k][ax] == 1 ? te_idx(b, 0) : lab[p->label[k][ax]];
    te_expr *x = te_at(b, t->in[k], sub);
    prod = prod ? te_binary(b, TE_MUL, prod, x) : x;
  }
  for (int s = p->n_sum - 1; s >= 0; s--) prod = te_reduce(b, TE_RSUM, vars[s], p->size[p->sum_label[s]], prod);
  free(p);
  return prod;
}

/* alpha * op(A) op(B) + beta * C; p[0]: transA, p[1]: transB; fp[0]: alpha, fp[1]: beta. */
static te_expr *compute_gemm(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *A = t->in[0], *B = t->in[1];
  bool ta = t->p[0] != 0, tb = t->p[1] != 0;
  int64_t kdim = ta ? A->dims[0] : A->dims[1];
  int k = te_new_var(b);
  te_set_var_extent(b, k, kdim);
  te_expr *kv = te_var(b, k);
  te_expr *sa[2] = {ta ? kv : idx[0], ta ? idx[0] : kv}, *sb[2] = {tb ? idx[1] : kv, tb ? kv : idx[1]};
  te_expr *acc = te_reduce(b, TE_RSUM, k, kdim, te_binary(b, TE_MUL, te_at(b, A, sa), te_at(b, B, sb)));
  if (t->fp[0] != 1.0) acc = te_binary(b, TE_MUL, acc, f32c(b, t->fp[0]));
  if (t->n_in > 2 && t->fp[1] != 0.0) {
    te_expr *c = te_at_broadcast(b, t->in[2], 2, idx);
    if (t->fp[1] != 1.0) c = te_binary(b, TE_MUL, c, f32c(b, t->fp[1]));
    acc = te_binary(b, TE_ADD, acc, c);
  }
  return acc;
}

/* A convolution's sum acc for output idx, read straight from buffers: its
 * op tag (a library convolution can compute it; te_conv_tag), then the
 * bias per output channel. p as compute_conv's. */
static te_expr *conv_tag_and_bias(te_builder *b, const te_tensor *t, te_expr *const *idx, te_expr *acc,
                                  bool transposed) {
  const te_tensor *X = t->in[0], *W = t->in[1];
  int ns = X->rank - 2;
  /* ConvInteger's zero points: buffers too, or no tag. */
  const te_tensor *xz = t->ip && t->p[18] >= 0 ? t->in[t->p[18]] : NULL, *wz = t->ip && t->p[19] >= 0 ? t->in[t->p[19]] : NULL;
  bool zps = (!xz || xz->kind == TE_VIEW_BUFFER) && (!wz || wz->kind == TE_VIEW_BUFFER);
  if (X->kind == TE_VIEW_BUFFER && W->kind == TE_VIEW_BUFFER && acc && zps) {
    te_conv_tag tag = {.reduce = acc, .x_buf = X->buf, .w_buf = W->buf, .nsp = ns, .transposed = transposed,
                       .n = X->dims[0], .ci = X->dims[1], .co = t->dims[1], .group = t->p[16],
                       .integer = t->ip != 0, .x_zp_buf = xz ? xz->buf : -1, .w_zp_buf = wz ? wz->buf : -1,
                       .w_zp_count = wz && wz->rank == 1 ? wz->dims[0] : 1};
    for (int i = 0; i < 2 + ns; i++) tag.idx[i] = idx[i];
    for (int i = 0; i < ns; i++) {
      tag.in[i] = X->dims[2 + i];
      tag.out[i] = t->dims[2 + i];
      tag.kernel[i] = t->p[i];
      tag.stride[i] = t->p[4 + i];
      tag.dilation[i] = t->p[8 + i];
      tag.pad_begin[i] = t->p[12 + i];
    }
    te_tag_conv(b, &tag);
  }
  if (t->n_in > 2 && !t->ip) acc = te_binary(b, TE_ADD, acc, te_at(b, t->in[2], (te_expr *[]){idx[1]}));
  return acc;
}

/* X [N, C, spatial...], W [Co, C/group, k...], bias [Co]; p[0..3): kernel,
 * p[4..): strides, p[8..): dilations, p[12..): pad begin, p[16]: group. */
static te_expr *compute_conv(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *X = t->in[0], *W = t->in[1];
  int ns = X->rank - 2;
  int64_t cig = W->dims[1], co_per_group = t->dims[1] / t->p[16];
  int vc = te_new_var(b), vk[3];
  /* With one group the input channel is the reduction's alone: x then does
   * not read the output channel, which the contraction template needs to
   * see (loopnest.h) and index arithmetic does not fold (co / Co). */
  te_expr *ci = t->p[16] == 1 ? te_var(b, vc)
                              : te_iadd(b, te_imul(b, te_idiv(b, idx[1], co_per_group), cig), te_var(b, vc));
  te_expr *sx[KILN_MAX_RANK] = {idx[0], ci}, *sw[KILN_MAX_RANK] = {idx[1], te_var(b, vc)};
  te_expr *valid = window_sub(b, t, X, idx, vk, sx); /* the select below keeps the padding's zero */
  for (int i = 0; i < ns; i++) sw[2 + i] = te_var(b, vk[i]);
  te_expr *xv = te_at(b, X, sx), *wv = te_at(b, W, sw), *zero = f32c(b, 0);
  if (t->ip) { /* ConvInteger: int32 sums of (x - x_zp) * (w - w_zp[co]); the padding holds x_zp */
    te_expr *z0[KILN_MAX_RANK] = {0};
    for (int d = 0; d < KILN_MAX_RANK; d++) z0[d] = te_idx(b, 0);
    xv = te_cast(b, KILN_DTYPE_I32, xv);
    wv = te_cast(b, KILN_DTYPE_I32, wv);
    if (t->p[18] >= 0) xv = te_binary(b, TE_SUB, xv, te_cast(b, KILN_DTYPE_I32, te_at(b, t->in[t->p[18]], z0)));
    if (t->p[19] >= 0) {
      const te_tensor *wz = t->in[t->p[19]];
      te_expr *zi[KILN_MAX_RANK] = {0};
      for (int d = 0; d < KILN_MAX_RANK; d++) zi[d] = wz->rank == 1 && wz->dims[0] > 1 ? idx[1] : te_idx(b, 0);
      wv = te_binary(b, TE_SUB, wv, te_cast(b, KILN_DTYPE_I32, te_at(b, wz, zi)));
    }
    zero = te_const_i(b, KILN_DTYPE_I32, 0);
  }
  te_expr *x = valid ? te_select(b, valid, xv, zero) : xv;
  te_expr *acc = te_binary(b, TE_MUL, x, wv);
  for (int i = ns - 1; i >= 0; i--) acc = te_reduce(b, TE_RSUM, vk[i], t->p[i], acc);
  acc = te_reduce(b, TE_RSUM, vc, cig, acc);
  return conv_tag_and_bias(b, t, idx, acc, false);
}

/* ConvTranspose: X [N, C, in...], W [C, M/group, k...], bias [M]; p as for
 * Conv. Output position o along an axis gathers input i through tap k
 * where o = i*s - pad + k*d. With dilation 1 and no negative pad only the
 * taps of o's phase are visited: k = (o + pad) % s + s*j and
 * i = (o + pad) / s - j for j < ceil(K / s), so the reduction does the
 * scatter's work and no more; otherwise every tap is visited and the ones
 * that do not divide are masked. Indices are clamped into their operands
 * (every load is computed) and out-of-range taps contribute zero. */
static te_expr *compute_conv_transpose(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *X = t->in[0], *W = t->in[1];
  int ns = X->rank - 2;
  int64_t group = t->p[16], cg = X->dims[1] / group, mg = W->dims[1];
  int vc = te_new_var(b), vk[3];
  int64_t extent[3];
  te_expr *ch = group == 1 ? te_var(b, vc) : te_iadd(b, te_imul(b, te_idiv(b, idx[1], mg), cg), te_var(b, vc));
  te_expr *om = group == 1 ? idx[1] : te_imod(b, idx[1], mg);
  te_expr *sx[KILN_MAX_RANK] = {idx[0], ch}, *sw[KILN_MAX_RANK] = {ch, om};
  te_expr *valid = NULL;
  for (int i = 0; i < ns; i++) {
    int64_t K = t->p[i], s = t->p[4 + i], d = t->p[8 + i], pad = t->p[12 + i], in = X->dims[2 + i];
    vk[i] = te_new_var(b);
    te_expr *e = te_iadd(b, idx[2 + i], te_idx(b, pad)), *xi, *k, *ok;
    if (d == 1 && pad >= 0) {
      extent[i] = (K + s - 1) / s;
      k = te_iadd(b, te_imod(b, e, s), te_imul(b, te_var(b, vk[i]), s));
      xi = te_binary(b, TE_SUB, te_idiv(b, e, s), te_var(b, vk[i]));
      ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), xi), te_binary(b, TE_LT, xi, te_idx(b, in)));
      if (K % s) ok = te_binary(b, TE_AND, ok, te_binary(b, TE_LT, k, te_idx(b, K)));
      k = te_binary(b, TE_MIN, k, te_idx(b, K - 1));
    } else {
      extent[i] = K;
      k = te_var(b, vk[i]);
      te_expr *num = te_binary(b, TE_SUB, e, te_imul(b, k, d));
      te_expr *numc = te_binary(b, TE_MAX, num, te_idx(b, 0));
      xi = te_idiv(b, numc, s);
      ok = te_binary(b, TE_AND, te_binary(b, TE_LE, te_idx(b, 0), num), te_binary(b, TE_LT, xi, te_idx(b, in)));
      if (s > 1) ok = te_binary(b, TE_AND, ok, te_binary(b, TE_EQ, te_imod(b, numc, s), te_idx(b, 0)));
    }
    valid = valid ? te_binary(b, TE_AND, valid, ok) : ok;
    sx[2 + i] = te_binary(b, TE_MIN, te_binary(b, TE_MAX, xi, te_idx(b, 0)), te_idx(b, in - 1));
    sw[2 + i] = k;
  }
  te_expr *x = te_select(b, valid, te_at(b, X, sx), f32c(b, 0));
  te_expr *acc = te_binary(b, TE_MUL, x, te_at(b, W, sw));
  for (int i = ns - 1; i >= 0; i--) acc = te_reduce(b, TE_RSUM, vk[i], extent[i], acc);
  acc = te_reduce(b, TE_RSUM, vc, cg, acc);
  return conv_tag_and_bias(b, t, idx, acc, true);
}

/* One attention score s[i, j] for the output's batch and row: scale * q.k
 * (+ mask), with a fresh reduction variable for the dot product. p[0]:
 * transpose_k; fp[0]: scale. */
static te_expr *attn_score(te_builder *b, const te_tensor *t, te_expr *const *idx, int nb, te_expr *j) {
  const te_tensor *Q = t->in[0], *K = t->in[1];
  int64_t d = Q->dims[Q->rank - 1];
  int k = te_new_var(b);
  te_set_var_extent(b, k, d);
  te_expr *sq[KILN_MAX_RANK], *sk[KILN_MAX_RANK];
  batch_sub(b, Q, 2, idx, nb, sq);
  batch_sub(b, K, 2, idx, nb, sk);
  sq[Q->rank - 2] = idx[nb];
  sq[Q->rank - 1] = te_var(b, k);
  sk[K->rank - 2] = t->p[0] ? j : te_var(b, k);
  sk[K->rank - 1] = t->p[0] ? te_var(b, k) : j;
  te_expr *sc = te_binary(b, TE_MUL, te_reduce(b, TE_RSUM, k, d, te_binary(b, TE_MUL, te_at(b, Q, sq), te_at(b, K, sk))),
                          f32c(b, t->fp[0]));
  if (t->n_in > 3) {
    const te_tensor *M = t->in[3];
    te_expr *full[KILN_MAX_RANK];
    for (int a = 0; a < nb; a++) full[a] = idx[a];
    full[nb] = idx[nb];
    full[nb + 1] = j;
    sc = te_binary(b, TE_ADD, sc, te_at_broadcast(b, M, nb + 2, full));
  }
  return sc;
}

/* kiln.FusedAttention: softmax over the keys of the scores, times V. */
static te_expr *compute_attention(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *V = t->in[2];
  int nb = t->rank - 2;
  int64_t n = V->dims[V->rank - 2];
  int jm = te_new_var(b), js = te_new_var(b), jv = te_new_var(b);
  te_expr *mx = te_reduce(b, TE_RMAX, jm, n, attn_score(b, t, idx, nb, te_var(b, jm)));
  te_expr *den = te_reduce(b, TE_RSUM, js, n,
                           te_call1(b, "kiln_expf", te_binary(b, TE_SUB, attn_score(b, t, idx, nb, te_var(b, js)), mx)));
  te_expr *sv[KILN_MAX_RANK];
  batch_sub(b, V, 2, idx, nb, sv);
  sv[V->rank - 2] = te_var(b, jv);
  sv[V->rank - 1] = idx[nb + 1];
  te_expr *w = te_call1(b, "kiln_expf", te_binary(b, TE_SUB, attn_score(b, t, idx, nb, te_var(b, jv)), mx));
  te_expr *num = te_reduce(b, TE_RSUM, jv, n, te_binary(b, TE_MUL, w, te_at(b, V, sv)));
  return te_binary(b, TE_DIV, num, den);
}

/* LayerNormalization over axes >= p[0]: (x - mean) / sqrt(var + eps) * scale + bias. */
static te_expr *map_sq_diff(te_builder *b, te_expr *x, te_expr *m) {
  te_expr *d = te_binary(b, TE_SUB, x, m);
  return te_binary(b, TE_MUL, d, d);
}

static te_expr *compute_layernorm(te_builder *b, const te_tensor *t, te_expr *const *idx) {
  const te_tensor *in = t->in[0];
  int64_t mask[KILN_MAX_RANK] = {0}, count = 1;
  for (int i = (int)t->p[0]; i < in->rank; i++) {
    mask[i] = 1;
    count *= in->dims[i];
  }
  te_expr *inv = f32c(b, 1.0 / (double)count);
  te_expr *mean = te_binary(b, TE_MUL, reduce_over(b, in, mask, true, idx, TE_RSUM, NULL, NULL), inv);
  te_expr *var = te_binary(b, TE_MUL, reduce_over(b, in, mask, true, idx, TE_RSUM, map_sq_diff, mean), inv);
  te_expr *rstd = te_binary(b, TE_DIV, f32c(b, 1), te_call1(b, "sqrtf", te_binary(b, TE_ADD, var, f32c(b, t->fp[0]))));
  te_expr *y = te_binary(b, TE_MUL, te_binary(b, TE_SUB, te_at(b, in, idx), mean), rstd);
  if (t->ip) { /* InstanceNormalization: scale and bias per channel */
    y = te_binary(b, TE_MUL, y, te_at(b, t->in[1], (te_expr *[]){idx[1]}));
    return te_binary(b, TE_ADD, y, te_at(b, t->in[2], (te_expr *[]){idx[1]}));
  }
  y = te_binary(b, TE_MUL, y, te_at_broadcast(b, t->in[1], t->rank, idx));
  if (t->n_in > 2) y = te_binary(b, TE_ADD, y, te_at_broadcast(b, t->in[2], t->rank, idx));
  return y;
}

/* ---- node -> view ---------------------------------------------------------------- */

/* A convolution's window in its view's parameters (compute_conv's layout:
 * p[0..3) kernel, p[4..) strides, p[8..) dilations, p[12..) pad begin,
 * p[16] group). */
static void window_params(te_tensor *t, const kiln_window *win, int ns, int64_t group) {
  for (int i = 0; i < ns; i++) {
    t->p[i] = win->kernel[i];
    t->p[4 + i] = win->stride[i];
    t->p[8 + i] = win->dilation[i];
    t->p[12 + i] = win->pad_begin[i];
  }
  t->p[16] = group;
}

static void out_dims(const kiln_graph *g, const kiln_node *n, int *rank, int64_t *dims) {
  const kiln_type *t = &g->values[n->outputs[0]].type;
  *rank = t->rank;
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i];
}

kiln_status_t kiln_lower_node(te_builder *b, const kiln_graph *g, const kiln_node *n,
                              const te_tensor *const *inputs, te_tensor **out) {
  const char *op = n->op_type;
  kiln_op_id id = kiln_node_op_id(n);
  int rank;
  int64_t dims[KILN_MAX_RANK];
  out_dims(g, n, &rank, dims);
  kiln_dtype odt = g->values[n->outputs[0]].type.dtype;
  te_tensor *t = NULL;
  int k;
  if ((k = unary_kind_of(id)) >= 0) {
    t = te_view_compute(b, odt, rank, dims, compute_unary);
    if (!t) return te_builder_status(b);
    t->ip = k;
    t->in[0] = inputs[0];
    t->n_in = 1;
    switch ((unary_kind)k) {
      case U_LEAKY_RELU: t->fp[0] = kiln_attr_float(n, "alpha", 0.01f); break;
      case U_ELU: t->fp[0] = kiln_attr_float(n, "alpha", 1.0f); break;
      case U_CELU: t->fp[0] = kiln_attr_float(n, "alpha", 1.0f); break;
      case U_THRESHOLDED_RELU: t->fp[0] = kiln_attr_float(n, "alpha", 1.0f); break;
      case U_SHRINK:
        t->fp[0] = kiln_attr_float(n, "lambd", 0.5f);
        t->fp[1] = kiln_attr_float(n, "bias", 0.0f);
        break;
      case U_HARD_SIGMOID:
        t->fp[0] = kiln_attr_float(n, "alpha", 0.2f);
        t->fp[1] = kiln_attr_float(n, "beta", 0.5f);
        break;
      case U_SELU:
        t->fp[0] = kiln_attr_float(n, "alpha", 1.67326319217681884765625f);
        t->fp[1] = kiln_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
      case U_GELU: t->fp[0] = !strcmp(kiln_attr_string(n, "approximate", "none"), "tanh"); break;
      case U_CAST: t->p[0] = n->opset < 19; break;
      case U_ISINF:
        t->fp[0] = kiln_attr_int(n, "detect_positive", 1) != 0;
        t->fp[1] = kiln_attr_int(n, "detect_negative", 1) != 0;
        break;
      case U_CLIP: {
        double lo = -INFINITY, hi = INFINITY;
        if (n->opset < 11) {
          lo = kiln_attr_float(n, "min", -INFINITY);
          hi = kiln_attr_float(n, "max", INFINITY);
        } else {
          bool ok;
          if (n->n_inputs > 1 && n->inputs[1] >= 0) lo = const_scalar_f(const_input(g, n, 1), &ok);
          if (n->n_inputs > 2 && n->inputs[2] >= 0) hi = const_scalar_f(const_input(g, n, 2), &ok);
          for (int i = 1; i < 3; i++) { /* integer bounds exactly (an int64 past 2^24 is no float) */
            const kiln_tensor *c = n->n_inputs > i && n->inputs[i] >= 0 ? const_input(g, n, i) : NULL;
            t->p[2 * (i - 1)] = c != NULL;
            t->p[2 * (i - 1) + 1] = c ? kiln_load_i64(c->data, c->dtype, 0) : 0;
          }
        }
        t->fp[0] = lo;
        t->fp[1] = hi;
        break;
      }
      default: break;
    }
  } else if ((k = binary_te_of(id)) >= 0) {
    t = te_view_compute(b, odt, rank, dims, compute_binary);
    if (!t) return te_builder_status(b);
    t->ip = k;
    t->n_in = n->n_inputs < 8 ? n->n_inputs : 8;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
    if (id == KILN_OP_Pow) {
      bool ok;
      float e = const_scalar_f(const_input(g, n, 1), &ok);
      t->fp[0] = e;
      t->fp[1] = ok ? 1.0 : 0.0;
    }
    if (id == KILN_OP_Mean) t->fp[2] = 1;
    if (id == KILN_OP_Mod) t->fp[0] = kiln_attr_int(n, "fmod", 0) != 0;
    if (id == KILN_OP_Greater || id == KILN_OP_GreaterOrEqual) t->fp[3] = 1; /* a > b is b < a */
  } else if (id == KILN_OP_Where) {
    t = te_view_compute(b, odt, rank, dims, compute_where);
    if (!t) return te_builder_status(b);
    for (int i = 0; i < 3; i++) t->in[i] = inputs[i];
    t->n_in = 3;
  } else if ((k = reduce_kind_of(id)) >= 0 || is_softmax(id)) {
    bool softmax = k < 0;
    t = te_view_compute(b, odt, rank, dims, softmax ? compute_softmax : compute_reduce);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
    bool mask[KILN_MAX_RANK];
    int r = inputs[0]->rank;
    if (softmax) softmax_axes(n, r, mask);
    else reduce_axes(g, n, r, mask);
    for (int i = 0; i < r; i++) t->p[i] = mask[i];
    t->p[KILN_MAX_RANK] = softmax ? 1 : kiln_attr_int(n, "keepdims", 1);
    t->ip = softmax ? id == KILN_OP_LogSoftmax : k;
  } else if (id == KILN_OP_GlobalAveragePool || id == KILN_OP_GlobalMaxPool) {
    t = te_view_compute(b, odt, rank, dims, compute_global_pool);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
    t->ip = id == KILN_OP_GlobalMaxPool;
  } else if (id == KILN_OP_MaxPool || id == KILN_OP_AveragePool) {
    const te_tensor *in = inputs[0];
    int ns = in->rank - 2;
    t = te_view_compute(b, odt, rank, dims, compute_pool);
    if (!t) return te_builder_status(b);
    t->in[0] = in;
    t->n_in = 1;
    t->ip = id == KILN_OP_MaxPool;
    t->fp[0] = kiln_attr_int(n, "count_include_pad", 0);
    /* Kernel, strides, dilations and pads from the shared window rule
     * (ops/window.h); the output sizes (dims) are the graph's, which shape
     * inference derived with the same rule. */
    kiln_window win;
    KILN_TRY(kiln_window_init(n, ns, in->dims + 2, NULL, true, kiln_attr_int(n, "ceil_mode", 0) != 0, &win));
    for (int i = 0; i < ns; i++) {
      t->p[i] = win.kernel[i];
      t->p[4 + i] = win.stride[i];
      t->p[8 + i] = win.dilation[i];
      t->p[12 + i] = win.pad_begin[i];
      t->p[16 + i] = win.pad_end[i];
    }
  } else if (id == KILN_OP_kiln_MaxPoolArgmax || id == KILN_OP_kiln_MaxPoolGrad) {
    bool grad = id == KILN_OP_kiln_MaxPoolGrad;
    int ns = rank - 2;
    kiln_window win; /* over the pooled input: the argmax's input, the gradient's output */
    KILN_TRY(kiln_window_init(n, ns, grad ? dims + 2 : inputs[0]->dims + 2, NULL, true,
                              kiln_attr_int(n, "ceil_mode", 0) != 0, &win));
    t = te_view_compute(b, odt, rank, dims, grad ? compute_max_pool_grad : compute_max_pool_argmax);
    if (!t) return te_builder_status(b);
    window_params(t, &win, ns, 1);
    t->in[0] = inputs[0];
    t->n_in = 1;
    if (grad) t->in[t->n_in++] = inputs[1];
  } else if (id == KILN_OP_InstanceNormalization) {
    t = te_view_compute(b, odt, rank, dims, compute_layernorm);
    if (!t) return te_builder_status(b);
    t->p[0] = 2;
    t->ip = 1;
    t->fp[0] = kiln_attr_float(n, "epsilon", 1e-5f);
    t->n_in = 3;
    for (int i = 0; i < 3; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_LayerNormalization) {
    t = te_view_compute(b, odt, rank, dims, compute_layernorm);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", -1);
    t->p[0] = axis < 0 ? axis + rank : axis;
    t->fp[0] = kiln_attr_float(n, "epsilon", 1e-5f);
    t->n_in = n->n_inputs > 2 && n->inputs[2] >= 0 ? 3 : 2;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_Transpose) {
    t = te_view_compute(b, odt, rank, dims, compute_transpose);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
    int np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    for (int i = 0; i < rank; i++) t->p[i] = perm && np == rank ? (perm[i] < 0 ? perm[i] + rank : perm[i]) : rank - 1 - i;
  } else if (is_reshaping_view(id)) {
    t = te_view_compute(b, odt, rank, dims, compute_reshape);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_Expand) {
    t = te_view_compute(b, odt, rank, dims, compute_expand);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_Slice) {
    /* starts/ends/axes/steps from attributes (< 10) or constant inputs. */
    int64_t starts[KILN_MAX_RANK], ends[KILN_MAX_RANK], axes[KILN_MAX_RANK], steps[KILN_MAX_RANK];
    int ns = 0, ne = 0, na = 0, nst = 0;
    const te_tensor *in = inputs[0];
    if (n->opset < 10) {
      const int64_t *a;
      if ((a = kiln_attr_ints(n, "starts", &ns))) memcpy(starts, a, (size_t)ns * 8);
      if ((a = kiln_attr_ints(n, "ends", &ne))) memcpy(ends, a, (size_t)ne * 8);
      if ((a = kiln_attr_ints(n, "axes", &na))) memcpy(axes, a, (size_t)na * 8);
    } else {
      const_ints(const_input(g, n, 1), starts, KILN_MAX_RANK, &ns);
      const_ints(const_input(g, n, 2), ends, KILN_MAX_RANK, &ne);
      if (n->n_inputs > 3 && n->inputs[3] >= 0) const_ints(const_input(g, n, 3), axes, KILN_MAX_RANK, &na);
      if (n->n_inputs > 4 && n->inputs[4] >= 0) const_ints(const_input(g, n, 4), steps, KILN_MAX_RANK, &nst);
    }
    if (na == 0) {
      na = ns;
      for (int i = 0; i < na; i++) axes[i] = i;
    }
    if (nst == 0)
      for (int i = 0; i < ns; i++) steps[i] = 1;
    t = te_view_compute(b, odt, rank, dims, compute_slice);
    if (!t) return te_builder_status(b);
    t->in[0] = in;
    t->n_in = 1;
    for (int i = 0; i < rank; i++) {
      t->p[i] = 0;
      t->p[KILN_MAX_RANK + i] = 1;
    }
    for (int j = 0; j < ns && j < na; j++) {
      int64_t ax = axes[j] < 0 ? axes[j] + in->rank : axes[j];
      if (ax < 0 || ax >= in->rank) return kiln_error(KILN_INVALID_ARGUMENT, "Slice axis %lld out of range", (long long)axes[j]);
      int64_t d = in->dims[ax], st = steps[j], s = starts[j];
      if (st == 0) return kiln_error(KILN_INVALID_ARGUMENT, "Slice step 0");
      if (s < 0) s += d;
      s = st > 0 ? KILN_MAX(0, KILN_MIN(s, d)) : KILN_MAX(0, KILN_MIN(s, d - 1));
      t->p[ax] = s;
      t->p[KILN_MAX_RANK + ax] = st;
    }
  } else if (id == KILN_OP_QuantizeLinear || id == KILN_OP_DequantizeLinear) {
    t = te_view_compute(b, odt, rank, dims, compute_quant);
    if (!t) return te_builder_status(b);
    const te_tensor *sc = inputs[1];
    int64_t axis = kiln_attr_int(n, "axis", 1);
    t->p[0] = sc->rank == 0 || (sc->rank == 1 && sc->dims[0] == 1) ? -1 : axis < 0 ? axis + rank : axis;
    t->ip = id == KILN_OP_QuantizeLinear;
    t->n_in = n->n_inputs > 2 && n->inputs[2] >= 0 ? 3 : 2;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_ConstantOfShape) {
    t = te_view_compute(b, odt, rank, dims, compute_fill);
    if (!t) return te_builder_status(b);
    const kiln_attr *v = kiln_node_attr(n, "value");
    if (v && v->t) {
      t->fp[0] = kiln_load_f64(v->t->data, v->t->dtype, 0);
      t->p[0] = kiln_load_i64(v->t->data, v->t->dtype, 0);
    }
    t->n_in = 0;
  } else if (id == KILN_OP_LRN) {
    t = te_view_compute(b, odt, rank, dims, compute_lrn);
    if (!t) return te_builder_status(b);
    t->p[0] = kiln_attr_int(n, "size", 1);
    t->fp[0] = kiln_attr_float(n, "alpha", 1e-4f);
    t->fp[1] = kiln_attr_float(n, "beta", 0.75f);
    t->fp[2] = kiln_attr_float(n, "bias", 1.0f);
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_Tile) {
    t = te_view_compute(b, odt, rank, dims, compute_tile);
    if (!t) return te_builder_status(b);
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_GatherND) {
    t = te_view_compute(b, odt, rank, dims, compute_gathernd);
    if (!t) return te_builder_status(b);
    t->p[0] = n->opset >= 12 ? kiln_attr_int(n, "batch_dims", 0) : 0;
    t->p[1] = inputs[1]->dims[inputs[1]->rank - 1];
    t->in[0] = inputs[0];
    t->in[1] = inputs[1];
    t->n_in = 2;
  } else if (id == KILN_OP_ScatterElements || id == KILN_OP_ScatterND) {
    t = te_view_compute(b, odt, rank, dims, compute_scatter);
    if (!t) return te_builder_status(b);
    t->ip = id == KILN_OP_ScatterND;
    if (t->ip) {
      t->p[0] = inputs[1]->dims[inputs[1]->rank - 1];
    } else {
      int64_t axis = kiln_attr_int(n, "axis", 0);
      t->p[0] = axis < 0 ? axis + inputs[0]->rank : axis;
    }
    static const char *const reductions[] = {"none", "add", "mul", "min", "max"};
    const char *red = n->opset >= 16 ? kiln_attr_string(n, "reduction", "none") : "none";
    t->p[1] = -1;
    for (int r = 0; r < 5; r++)
      if (!strcmp(red, reductions[r])) t->p[1] = r;
    if (t->p[1] < 0) return kiln_error(KILN_UNSUPPORTED, "%s: reduction '%s'", op, red);
    for (int i = 0; i < 3; i++) t->in[i] = inputs[i];
    t->n_in = 3;
  } else if (id == KILN_OP_DepthToSpace || id == KILN_OP_SpaceToDepth) {
    t = te_view_compute(b, odt, rank, dims, compute_depth_space);
    if (!t) return te_builder_status(b);
    t->ip = id == KILN_OP_DepthToSpace;
    t->p[0] = kiln_attr_int(n, "blocksize", 1);
    t->p[1] = n->opset >= (t->ip ? 11 : 28) && !strcmp(kiln_attr_string(n, "mode", "DCR"), "CRD");
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_CumSum || id == KILN_OP_CumProd) {
    t = te_view_compute(b, odt, rank, dims, compute_scan);
    if (!t) return te_builder_status(b);
    const kiln_tensor *ax = const_input(g, n, 1);
    int64_t axis = ax ? kiln_load_i64(ax->data, ax->dtype, 0) : 0;
    t->ip = id == KILN_OP_CumProd;
    t->p[0] = axis < 0 ? axis + rank : axis;
    t->p[1] = kiln_attr_int(n, "exclusive", 0) != 0;
    t->p[2] = kiln_attr_int(n, "reverse", 0) != 0;
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_OneHot) {
    t = te_view_compute(b, odt, rank, dims, compute_onehot);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", -1);
    t->p[0] = axis < 0 ? axis + rank : axis;
    t->p[1] = dims[t->p[0]];
    t->in[0] = inputs[0];
    t->in[1] = inputs[2];
    t->n_in = 2;
  } else if (id == KILN_OP_EyeLike) {
    t = te_view_compute(b, odt, rank, dims, compute_eyelike);
    if (!t) return te_builder_status(b);
    int64_t k = kiln_attr_int(n, "k", 0), lim = dims[0] + dims[1] + 1;
    t->p[0] = k > lim ? lim : k < -lim ? -lim : k;
    t->n_in = 0;
  } else if (id == KILN_OP_Hardmax) {
    t = te_view_compute(b, odt, rank, dims, compute_hardmax);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", n->opset < 13 ? 1 : -1);
    t->p[0] = axis < 0 ? axis + rank : axis;
    t->p[1] = 1;
    t->ip = 1;
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_ReverseSequence) {
    const kiln_tensor *lens = const_input(g, n, 1);
    int ba = (int)kiln_attr_int(n, "batch_axis", 1);
    if (!lens || lens->numel != dims[ba] || lens->numel > REVSEQ_MAX_BATCH)
      return kiln_error(KILN_UNSUPPORTED, "ReverseSequence: %lld sequence lengths", lens ? (long long)lens->numel : -1LL);
    t = te_view_compute(b, odt, rank, dims, compute_revseq);
    if (!t) return te_builder_status(b);
    t->p[0] = kiln_attr_int(n, "time_axis", 0);
    t->p[1] = ba;
    for (int64_t i = 0; i < lens->numel; i++) t->p[2 + i] = kiln_load_i64(lens->data, lens->dtype, i);
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_Trilu) {
    t = te_view_compute(b, odt, rank, dims, compute_trilu);
    if (!t) return te_builder_status(b);
    const kiln_tensor *kt = n->n_inputs > 1 && n->inputs[1] >= 0 ? const_input(g, n, 1) : NULL;
    int64_t k = kt ? kiln_load_i64(kt->data, kt->dtype, 0) : 0, lim = dims[rank - 1] + dims[rank - 2] + 1;
    t->p[0] = k > lim ? lim : k < -lim ? -lim : k;
    t->p[1] = kiln_attr_int(n, "upper", 1) != 0;
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_Gather || id == KILN_OP_GatherElements) {
    t = te_view_compute(b, odt, rank, dims, id == KILN_OP_Gather ? compute_gather : compute_gather_elements);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", 0);
    t->p[0] = axis < 0 ? axis + inputs[0]->rank : axis;
    t->in[0] = inputs[0];
    t->in[1] = inputs[1];
    t->n_in = 2;
  } else if (id == KILN_OP_ArgMax || id == KILN_OP_ArgMin) {
    t = te_view_compute(b, odt, rank, dims, compute_arg);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", 0);
    t->p[0] = axis < 0 ? axis + inputs[0]->rank : axis;
    t->p[1] = kiln_attr_int(n, "keepdims", 1) != 0;
    t->ip = id == KILN_OP_ArgMax;
    t->fp[0] = kiln_attr_int(n, "select_last_index", 0) != 0;
    t->in[0] = inputs[0];
    t->n_in = 1;
  } else if (id == KILN_OP_kiln_Resample) {
    t = te_view_compute(b, odt, rank, dims, compute_resample);
    if (!t) return te_builder_status(b);
    int na;
    const int64_t *axes = kiln_attr_ints(n, "axes", &na);
    bool nearest = kiln_attr_int(n, "nearest", 0) != 0;
    if (na < 0 || 1 + (nearest ? 1 : 2) * na != n->n_inputs)
      return kiln_error(KILN_INVALID_MODEL, "Resample: %d inputs for %d axes", n->n_inputs, na);
    for (int d = 0; d < rank; d++) t->p[d] = 0;
    for (int k = 0; k < na; k++) {
      if (axes[k] < 0 || axes[k] >= rank) return kiln_error(KILN_INVALID_MODEL, "Resample: axis %lld", (long long)axes[k]);
      t->p[axes[k]] = 1 + (nearest ? 1 : 2) * k;
    }
    t->ip = nearest;
    t->fp[0] = kiln_attr_float(n, "extrapolation_value", 0.0f);
    t->fp[1] = kiln_node_attr(n, "extrapolation_value") != NULL;
    t->n_in = n->n_inputs;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_GridSample) {
    kiln_grid_sample_params gp;
    KILN_TRY(kiln_grid_sample_params_of(n, &gp));
    t = te_view_compute(b, odt, rank, dims, compute_grid_sample);
    if (!t) return te_builder_status(b);
    t->ip = gp.mode;
    t->p[0] = gp.padding;
    t->p[1] = gp.align_corners;
    t->in[0] = inputs[0];
    t->in[1] = inputs[1];
    t->n_in = 2;
  } else if (id == KILN_OP_Pad) {
    const te_tensor *in = inputs[0];
    int mode;
    int64_t before[KILN_MAX_RANK], crop[KILN_MAX_RANK], len[KILN_MAX_RANK];
    KILN_TRY(kiln_pad_geometry(n, n->opset, in->rank, in->dims, const_input(g, n, 1), const_input(g, n, 3), &mode,
                               before, crop, len));
    t = te_view_compute(b, odt, rank, dims, compute_pad);
    if (!t) return te_builder_status(b);
    t->in[0] = in;
    t->n_in = 1;
    t->ip = mode;
    for (int d = 0; d < rank; d++) {
      t->p[d] = before[d];
      t->p[KILN_MAX_RANK + d] = crop[d];
      t->p[2 * KILN_MAX_RANK + d] = len[d];
    }
    double fill = 0;
    if (n->opset < 11) {
      fill = kiln_attr_float(n, "value", 0.0f);
    } else if (n->n_inputs > 2 && n->inputs[2] >= 0) {
      bool ok;
      fill = const_scalar_f(const_input(g, n, 2), &ok);
    }
    t->fp[0] = fill;
  } else if (id == KILN_OP_Concat) {
    if (n->n_inputs > 8) return kiln_error(KILN_UNSUPPORTED, "Concat of more than 8 inputs");
    t = te_view_compute(b, odt, rank, dims, compute_concat);
    if (!t) return te_builder_status(b);
    int64_t axis = kiln_attr_int(n, "axis", 0);
    t->p[0] = axis < 0 ? axis + rank : axis;
    t->n_in = n->n_inputs;
    for (int i = 0; i < n->n_inputs; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_MatMul || id == KILN_OP_MatMulInteger) {
    t = te_view_compute(b, odt, rank, dims, compute_matmul);
    if (!t) return te_builder_status(b);
    t->p[0] = inputs[0]->rank >= 2 ? 2 : 1;
    t->p[1] = inputs[1]->rank >= 2 ? 2 : 1;
    t->in[0] = inputs[0];
    t->in[1] = inputs[1];
    t->n_in = 2;
    t->ip = id == KILN_OP_MatMulInteger;
    t->p[2] = t->p[3] = -1;
    for (int i = 2; t->ip && i < n->n_inputs && i < 4; i++)
      if (n->inputs[i] >= 0) {
        t->p[i] = t->n_in;
        t->in[t->n_in++] = inputs[i];
      }
  } else if (id == KILN_OP_Einsum) {
    t = te_view_compute(b, odt, rank, dims, compute_einsum);
    if (!t) return te_builder_status(b);
    t->sp = kiln_attr_string(n, "equation", "");
    t->n_in = n->n_inputs;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_Gemm) {
    if (inputs[0]->rank != 2 || inputs[1]->rank != 2 || rank != 2) return kiln_error(KILN_UNSUPPORTED, "Gemm of rank other than 2");
    t = te_view_compute(b, odt, rank, dims, compute_gemm);
    if (!t) return te_builder_status(b);
    t->p[0] = kiln_attr_int(n, "transA", 0) != 0;
    t->p[1] = kiln_attr_int(n, "transB", 0) != 0;
    t->fp[0] = kiln_attr_float(n, "alpha", 1.0f);
    t->fp[1] = kiln_attr_float(n, "beta", 1.0f);
    t->n_in = n->n_inputs > 2 && n->inputs[2] >= 0 ? 3 : 2;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_Conv) {
    const te_tensor *x = inputs[0], *w = inputs[1];
    int ns = x->rank - 2;
    if (ns < 1 || ns > 3) return kiln_error(KILN_UNSUPPORTED, "Conv with %d spatial dims", ns);
    t = te_view_compute(b, odt, rank, dims, compute_conv);
    if (!t) return te_builder_status(b);
    kiln_window win;
    KILN_TRY(kiln_window_init(n, ns, x->dims + 2, w->dims + 2, true, false, &win));
    int64_t group = kiln_attr_int(n, "group", 1);
    if (group < 1 || dims[1] % group || w->dims[1] * group != x->dims[1])
      return kiln_error(KILN_UNSUPPORTED, "Conv group %lld does not divide the channels", (long long)group);
    window_params(t, &win, ns, group);
    t->n_in = n->n_inputs > 2 && n->inputs[2] >= 0 ? 3 : 2;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_ConvInteger) {
    const te_tensor *x = inputs[0], *w = inputs[1];
    int ns = x->rank - 2;
    if (ns < 1 || ns > 3) return kiln_error(KILN_UNSUPPORTED, "ConvInteger with %d spatial dims", ns);
    kiln_window win;
    KILN_TRY(kiln_conv_integer_window(n, x->rank, x->dims, w->rank, w->dims, &win));
    int64_t group = kiln_attr_int(n, "group", 1);
    if (group < 1 || dims[1] % group || w->dims[1] * group != x->dims[1])
      return kiln_error(KILN_UNSUPPORTED, "ConvInteger group %lld does not divide the channels", (long long)group);
    t = te_view_compute(b, odt, rank, dims, compute_conv);
    if (!t) return te_builder_status(b);
    window_params(t, &win, ns, group);
    t->ip = 1;
    t->in[0] = x;
    t->in[1] = w;
    t->n_in = 2;
    t->p[18] = t->p[19] = -1;
    for (int i = 2; i < n->n_inputs && i < 4; i++)
      if (n->inputs[i] >= 0) {
        t->p[16 + i] = t->n_in;
        t->in[t->n_in++] = inputs[i];
      }
  } else if (id == KILN_OP_ConvTranspose) {
    const te_tensor *x = inputs[0], *w = inputs[1];
    int ns = x->rank - 2;
    if (ns < 1 || ns > 3) return kiln_error(KILN_UNSUPPORTED, "ConvTranspose with %d spatial dims", ns);
    int64_t group = kiln_attr_int(n, "group", 1);
    if (group < 1 || x->dims[1] % group || w->dims[0] != x->dims[1] || w->dims[1] * group != dims[1])
      return kiln_error(KILN_UNSUPPORTED, "ConvTranspose group %lld does not divide the channels", (long long)group);
    kiln_window win;
    KILN_TRY(kiln_conv_transpose_window(n, ns, x->dims + 2, w->dims + 2, &win));
    t = te_view_compute(b, odt, rank, dims, compute_conv_transpose);
    if (!t) return te_builder_status(b);
    window_params(t, &win, ns, group);
    t->n_in = n->n_inputs > 2 && n->inputs[2] >= 0 ? 3 : 2;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else if (id == KILN_OP_kiln_FusedAttention) {
    t = te_view_compute(b, odt, rank, dims, compute_attention);
    if (!t) return te_builder_status(b);
    t->p[0] = kiln_attr_int(n, "transpose_k", 1) != 0;
    t->fp[0] = kiln_attr_float(n, "scale", 1.0f);
    t->n_in = n->n_inputs > 3 && n->inputs[3] >= 0 ? 4 : 3;
    for (int i = 0; i < t->n_in; i++) t->in[i] = inputs[i];
  } else {
    return kiln_error(KILN_UNSUPPORTED, "no compute definition for %s", op);
  }
  for (int i = 0; i < t->n_in; i++)
    if (!t->in[i]) return kiln_error(KILN_INTERNAL, "lowering %s: input %d has no view", op, i);
  *out = t;
  return te_builder_status(b);
}
