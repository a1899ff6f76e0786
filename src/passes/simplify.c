/* simplify: local rewrites that remove data movement that does nothing.
 *
 *   Identity(x)                          -> x
 *   Dropout(x) in inference mode          -> x   (mask output absent or unused)
 *   Cast(x, to=dtype of x), CastLike same -> x
 *   CastLike(x, like)                     -> Cast(x, to=dtype of like), same opset (bf16's
 *                                            rounding follows it), saturate and round_mode
 *                                            kept: compiled kernels have Cast only
 *   Transpose(x, identity perm)           -> x
 *   Transpose(Transpose(x, p1), p2)       -> Transpose(x, p1∘p2)  (or x)
 *   Transpose(x, p) moving only dims of 1  -> Reshape(x)  (a view)
 *   U(Transpose(x, p)) -> Transpose(U(x), p)  U a unary elementwise op, the
 *                                            Transpose's only reader: the
 *                                            Transposes an NHWC export puts
 *                                            around each Conv meet and cancel
 *   Transpose(x, p) read by several nodes, each a kept-dims Reduce* or a pointwise op (unary, or
 *   Add/Sub/Mul/Div with a small or constant other operand) whose result a Transpose undoes next
 *                                         -> each reads x, a Transpose by p after it (the other
 *                                            operand permuted back): the undoing pairs cancel
 *                                            (squeeze-excite blocks of NHWC exports)
 *   Reshape(R(x), s)                      -> Reshape(x, s)  R in Reshape/Flatten/Squeeze/Unsqueeze,
 *                                            when s copies no dim (no 0, or allowzero)
 * and, where inferred shapes are exact (kiln_opt_shapes_trusted):
 *   Reshape/Flatten/Squeeze/Unsqueeze/Expand whose output shape is its input's -> x
 *   R2(R1(x)) (Squeeze-Unsqueeze pairs, ...) whose output shape is x's         -> x
 *   Reshape(x, computed shape) with a fully known output -> Reshape(x, constant)
 *
 *   Conv whose kernel has taps that read only padding at every output
 *   position (large dilations over small maps) -> the weights sliced to the
 *                                            taps that read the input, pads shrunk
 *
 *   Split(x) with known part sizes        -> a Slice per part
 *
 * Removing a node whose output is a graph output keeps that output's
 * name: the producer of the input writes the output instead, or the node
 * stays (input is a graph input or another output). */
#include "passes/passes_opt.h"
#include "ops/window.h"

#include <stdio.h>
#include <string.h>

static bool is_reshape_like(const kiln_node *n) {
  kiln_op_id id = kiln_node_op_id(n);
  return id == KILN_OP_Reshape || id == KILN_OP_Flatten || id == KILN_OP_Squeeze || id == KILN_OP_Unsqueeze;
}

static int in0(const kiln_node *n) { return n->n_inputs > 0 ? n->inputs[0] : -1; }
static int out0(const kiln_node *n) { return n->n_outputs > 0 ? n->outputs[0] : -1; }

/* Outputs other than the first are absent, or present but read by nobody. */
static bool only_first_output(const kiln_opt_uses *u, const kiln_node *n) {
  for (int i = 1; i < n->n_outputs; i++) {
    int id = n->outputs[i];
    if (id >= 0 && (u->count[id] || u->pinned[id])) return false;
  }
  return true;
}

static bool same_full_shape(const kiln_type *a, const kiln_type *b) {
  return kiln_opt_shape_known(a) && kiln_opt_shape_known(b) && a->dtype == b->dtype &&
         kiln_shape_equal(a->rank, a->dims, b->rank, b->dims);
}

/* The permutation of a Transpose node (explicit, or reversed axes when the
 * input rank is known). False when unknown or malformed. */
static bool transpose_perm(const kiln_graph *g, const kiln_node *n, int *rank, int64_t *perm) {
  int np = 0;
  const int64_t *p = kiln_attr_ints(n, "perm", &np);
  if (p) {
    if (np > KILN_MAX_RANK) return false;
    bool seen[KILN_MAX_RANK] = {0};
    for (int i = 0; i < np; i++) {
      if (p[i] < 0 || p[i] >= np || seen[p[i]]) return false;
      seen[p[i]] = true;
      perm[i] = p[i];
    }
    *rank = np;
    return true;
  }
  int x = in0(n);
  if (x < 0 || g->values[x].type.rank < 0) return false;
  int r = g->values[x].type.rank;
  for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  *rank = r;
  return true;
}

/* Inference mode, or training mode with ratio 0 (PyTorch exports a model's
 * attention dropout with p=0 that way: nothing is dropped, the kernel's
 * rule too). */
static bool dropout_is_identity(const kiln_graph *g, const kiln_node *n) {
  if (n->opset < 12) return true; /* no training mode before opset 12 (the kernel's rule too) */
  int ratio = n->n_inputs > 1 ? n->inputs[1] : -1;
  const kiln_tensor *r = ratio >= 0 ? kiln_opt_const(g, ratio) : NULL;
  /* the kernel checks the ratio even in inference mode: keep its error */
  if (ratio >= 0 && (!r || r->numel != 1 || !kiln_dtype_is_float(r->dtype))) return false;
  int tm = n->n_inputs > 2 ? n->inputs[2] : -1;
  if (tm >= 0) {
    const kiln_tensor *t = kiln_opt_const(g, tm);
    if (!t || t->dtype != KILN_DTYPE_BOOL || t->numel != 1) return false;
    if (((const uint8_t *)t->data)[0] && !(r && kiln_load_f64(r->data, r->dtype, 0) == 0.0)) return false;
  }
  return true;
}

/* Reshape's shape input copies dims of its data input when it holds a 0 (and allowzero is off). */
static bool reshape_shape_is_literal(const kiln_graph *g, const kiln_node *n) {
  if (n->opset < 5 || n->n_inputs < 2) return false;
  const kiln_tensor *s = kiln_opt_const(g, n->inputs[1]);
  if (!s || s->dtype != KILN_DTYPE_I64 || s->rank != 1) return false;
  if (kiln_attr_int(n, "allowzero", 0)) return true;
  for (int64_t i = 0; i < s->numel; i++)
    if (((const int64_t *)s->data)[i] == 0) return false;
  return true;
}

/* Ops whose element is a function of the same element of their one input
 * (no axis, no randomness): a Transpose before them can go after them. */
static bool is_unary_pointwise(const kiln_node *n) {
  switch (kiln_node_op_id(n)) {
    case KILN_OP_Abs: case KILN_OP_Ceil: case KILN_OP_Celu: case KILN_OP_Cos: case KILN_OP_Elu: case KILN_OP_Erf:
    case KILN_OP_Exp: case KILN_OP_Floor: case KILN_OP_HardSigmoid: case KILN_OP_HardSwish: case KILN_OP_LeakyRelu:
    case KILN_OP_Log: case KILN_OP_Neg: case KILN_OP_Reciprocal: case KILN_OP_Relu: case KILN_OP_Round:
    case KILN_OP_Selu: case KILN_OP_Sigmoid: case KILN_OP_Sign: case KILN_OP_Sin: case KILN_OP_Softplus:
    case KILN_OP_Softsign: case KILN_OP_Sqrt: case KILN_OP_Tanh: case KILN_OP_ThresholdedRelu: case KILN_OP_Not:
    case KILN_OP_Cast: case KILN_OP_IsNaN: case KILN_OP_kiln_Gelu: case KILN_OP_Gelu:
      return n->n_inputs == 1 && n->n_outputs == 1;
    default: return false;
  }
}

/* U at idx reading x = Transpose(src) that nobody else reads: U reads src
 * and the Transpose reads U's result (the two nodes swap places, so the
 * order stays topological). U's result, of src's shape, is a new value
 * named after y: x's name keeps its meaning (kiln verify matches values by
 * name), x is left unused. */
static bool sink_transpose(kiln_graph *g, const kiln_opt_uses *u, int idx) {
  kiln_node *n = &g->nodes[idx];
  int x = in0(n), y = out0(n);
  if (x < 0 || y < 0 || !is_unary_pointwise(n)) return false;
  int p = g->values[x].producer;
  if (p < 0 || p >= idx || !g->nodes[p].op || !kiln_node_is(&g->nodes[p], KILN_OP_Transpose)) return false;
  if (u->count[x] != 1 || u->pinned[x] || g->nodes[p].n_outputs != 1) return false;
  int src = in0(&g->nodes[p]);
  if (src < 0 || g->values[src].type.kind != KILN_TYPE_TENSOR || g->values[y].type.kind != KILN_TYPE_TENSOR) return false;
  kiln_type xt = g->values[src].type;
  xt.dtype = g->values[y].type.dtype;
  int old_x = x;
  char *base = kiln_strdup(g->values[y].name);
  kiln_status_t st = base ? kiln_opt_new_value(g, base, NULL, &x) : KILN_OOM();
  free(base);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  n = &g->nodes[idx];
  g->values[old_x].producer = -1;
  kiln_node t = g->nodes[p];
  g->nodes[p] = *n;
  g->nodes[idx] = t;
  g->nodes[p].inputs[0] = src;
  g->nodes[p].outputs[0] = x;
  g->nodes[idx].inputs[0] = x;
  g->nodes[idx].outputs[0] = y;
  g->values[x].type = xt;
  g->values[x].producer = p;
  g->values[y].producer = idx;
  return true;
}

/* Tries one rewrite at node idx. *changed when the graph changed (the
 * caller then removes dead nodes and rebuilds uses). */
static kiln_status_t simplify_node(kiln_graph *g, const kiln_opt_uses *u, int idx, bool *dead, bool *changed) {
  kiln_node *n = &g->nodes[idx];
  if (!n->op || n->n_outputs < 1) return NULL;
  int x = in0(n), y = out0(n);
  if (x < 0 || y < 0) return NULL;
  bool top = kiln_opt_shapes_trusted(g);
  const kiln_type *tx = &g->values[x].type, *ty = &g->values[y].type;

  if (sink_transpose(g, u, idx)) {
    *changed = true;
    return NULL;
  }
  if (kiln_node_is(n, KILN_OP_Identity)) {
    *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
    return NULL;
  }
  if (kiln_node_is(n, KILN_OP_Dropout)) {
    if (dropout_is_identity(g, n) && only_first_output(u, n)) *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
    return NULL;
  }
  if (kiln_node_is(n, KILN_OP_Cast)) {
    int64_t to = kiln_attr_int(n, "to", 0);
    if (tx->kind == KILN_TYPE_TENSOR && tx->dtype && (int64_t)tx->dtype == to)
      *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
    return NULL;
  }
  if (kiln_node_is(n, KILN_OP_CastLike)) {
    int like = n->n_inputs > 1 ? n->inputs[1] : -1;
    if (like < 0 || tx->kind != KILN_TYPE_TENSOR || !tx->dtype) return NULL;
    const kiln_type *tl = &g->values[like].type;
    if (tl->kind != KILN_TYPE_TENSOR || !tl->dtype) return NULL;
    if (tx->dtype == tl->dtype) {
      *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
      return NULL;
    }
    /* Cast of the same opset converts as CastLike does (ref's cast_mode_of
     * reads the opset and these attributes); the attributes go with the
     * rewrite, which drops them. */
    kiln_dtype to = tl->dtype;
    int opset = n->opset;
    const kiln_attr *sa = kiln_node_attr(n, "saturate");
    bool has_sat = sa && sa->type == KILN_ATTR_INT;
    int64_t sat = has_sat ? sa->i : 1;
    const char *rm = kiln_node_attr(n, "round_mode") ? kiln_attr_string(n, "round_mode", NULL) : NULL;
    char round_mode[64] = "";
    if (rm && strlen(rm) >= sizeof round_mode) return NULL; /* ref words it */
    if (rm) snprintf(round_mode, sizeof round_mode, "%s", rm);
    KILN_TRY(kiln_opt_rewrite_node(g, idx, "Cast", "", opset, 1, &x, 1, &y));
    n = &g->nodes[idx];
    KILN_TRY(kiln_opt_set_attr_int(n, "to", to));
    if (has_sat) KILN_TRY(kiln_opt_set_attr_int(n, "saturate", sat));
    if (rm) KILN_TRY(kiln_opt_set_attr_string(n, "round_mode", round_mode));
    *changed = true;
    return NULL;
  }
  if (kiln_node_is(n, KILN_OP_Transpose)) {
    int r2;
    int64_t p2[KILN_MAX_RANK];
    if (!transpose_perm(g, n, &r2, p2)) return NULL;
    bool ident = true;
    for (int i = 0; i < r2; i++) ident &= p2[i] == i;
    if (ident) {
      *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
      return NULL;
    }
    int p = g->values[x].producer;
    if (p < 0 || !kiln_node_is(&g->nodes[p], KILN_OP_Transpose) || !g->nodes[p].op) {
      /* Moving only dims of 1 (a pooled [N,C,1,1] to [N,1,1,C]) moves no
       * element: a Reshape, which is a view. */
      if (!top || !kiln_opt_shape_known(tx) || tx->rank != r2 || !kiln_opt_shape_known(ty)) return NULL;
      int last = -1;
      for (int i = 0; i < r2; i++) {
        if (tx->dims[p2[i]] == 0) return NULL;
        if (tx->dims[p2[i]] == 1) continue;
        if (p2[i] < last) return NULL;
        last = (int)p2[i];
      }
      kiln_tensor *s;
      int64_t r = ty->rank;
      KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &r, &s));
      memcpy(s->data, ty->dims, (size_t)r * sizeof(int64_t));
      int ins[2] = {x, -1};
      KILN_TRY(kiln_opt_new_const(g, g->values[y].name, s, &ins[1]));
      KILN_TRY(kiln_opt_rewrite_node(g, idx, "Reshape", "", 13, 2, ins, 1, &y));
      *changed = true;
      return NULL;
    }
    int r1;
    int64_t p1[KILN_MAX_RANK], pc[KILN_MAX_RANK];
    if (!transpose_perm(g, &g->nodes[p], &r1, p1) || r1 != r2) return NULL;
    int src = in0(&g->nodes[p]);
    if (src < 0) return NULL;
    /* y[i...] = t[perm2]; t = x[perm1]  =>  y = x[perm1[perm2[i]]] */
    ident = true;
    for (int i = 0; i < r2; i++) {
      pc[i] = p1[p2[i]];
      ident &= pc[i] == i;
    }
    if (ident) {
      *changed = kiln_opt_bypass(g, u, idx, src, y, dead);
      return NULL;
    }
    KILN_TRY(kiln_opt_set_attr_ints(n, "perm", r2, pc));
    n->inputs[0] = src;
    *changed = true;
    return NULL;
  }
  bool shape_op = is_reshape_like(n) || kiln_node_is(n, KILN_OP_Expand);
  if (!shape_op) return NULL;
  /* Top level: a shape op that changes nothing, or a chain of reshapes back
   * to the original shape, is the identity. */
  if (top && same_full_shape(tx, ty)) {
    *changed = kiln_opt_bypass(g, u, idx, x, y, dead);
    return NULL;
  }
  int p = g->values[x].producer;
  if (top && is_reshape_like(n) && p >= 0 && is_reshape_like(&g->nodes[p]) && in0(&g->nodes[p]) >= 0) {
    int src = in0(&g->nodes[p]);
    if (same_full_shape(&g->values[src].type, ty)) {
      *changed = kiln_opt_bypass(g, u, idx, src, y, dead);
      return NULL;
    }
  }
  if (!kiln_node_is(n, KILN_OP_Reshape) || n->opset < 5 || n->n_inputs < 2) return NULL;
  if (top && !kiln_opt_const(g, n->inputs[1]) && kiln_opt_shape_known(ty)) {
    /* Inference knows the result: the shape computation is not needed. */
    bool zero = false;
    for (int d = 0; d < ty->rank; d++) zero |= ty->dims[d] == 0;
    if (!zero) {
      kiln_tensor *s;
      int64_t r = ty->rank;
      KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &r, &s));
      for (int d = 0; d < ty->rank; d++) ((int64_t *)s->data)[d] = ty->dims[d];
      int sid;
      KILN_TRY(kiln_opt_new_const(g, g->values[y].name, s, &sid));
      n = &g->nodes[idx];
      n->inputs[1] = sid;
      *changed = true;
      return NULL;
    }
  }
  if (p >= 0 && is_reshape_like(&g->nodes[p]) && g->nodes[p].op && in0(&g->nodes[p]) >= 0 &&
      reshape_shape_is_literal(g, n)) {
    /* Reshape looks only at its data's element count, which R keeps. */
    n->inputs[0] = in0(&g->nodes[p]);
    *changed = true;
  }
  return NULL;
}

/* Split whose parts' sizes inference knows -> one Slice per output (views
 * that fuse into their readers; a compiled kernel has one output). The
 * sizes are the outputs' inferred lengths along the axis, which must add
 * up to the input's. */
static kiln_status_t split_to_slices(kiln_graph *g, int idx) {
  const kiln_node *n = &g->nodes[idx];
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->n_outputs > 64) return NULL; /* one output too: the whole, a view */
  const kiln_type *xt = &g->values[n->inputs[0]].type;
  if (!kiln_opt_shape_known(xt) || xt->rank < 1) return NULL;
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (axis < -xt->rank || axis >= xt->rank) return NULL;
  if (axis < 0) axis += xt->rank;
  int64_t starts[65], sum = 0;
  int outs[64];
  for (int i = 0; i < n->n_outputs; i++) {
    outs[i] = n->outputs[i];
    if (outs[i] < 0) return NULL;
    const kiln_type *ot = &g->values[outs[i]].type;
    if (!kiln_opt_shape_known(ot) || ot->rank != xt->rank) return NULL;
    starts[i] = sum;
    sum += ot->dims[axis];
  }
  starts[n->n_outputs] = sum;
  if (sum != xt->dims[axis]) return NULL;
  int x = n->inputs[0], n_out = n->n_outputs;
  char name[256];
  snprintf(name, sizeof name, "%s", n->name);
  for (int i = n_out - 1; i >= 0; i--) {
    int64_t b = starts[i], e = starts[i + 1];
    kiln_tensor *tb, *te, *ta;
    int64_t one = 1;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &one, &tb));
    ((int64_t *)tb->data)[0] = b;
    kiln_status_t st = kiln_tensor_new(KILN_DTYPE_I64, 1, &one, &te);
    if (st) {
      kiln_tensor_release(tb);
      return st;
    }
    ((int64_t *)te->data)[0] = e;
    st = kiln_tensor_new(KILN_DTYPE_I64, 1, &one, &ta);
    if (st) {
      kiln_tensor_release(tb);
      kiln_tensor_release(te);
      return st;
    }
    ((int64_t *)ta->data)[0] = axis;
    int ins[4] = {x, -1, -1, -1};
    KILN_TRY(kiln_opt_new_const(g, name, tb, &ins[1]));
    KILN_TRY(kiln_opt_new_const(g, name, te, &ins[2]));
    KILN_TRY(kiln_opt_new_const(g, name, ta, &ins[3]));
    if (i == 0) {
      KILN_TRY(kiln_opt_rewrite_node(g, idx, "Slice", "", 13, 4, ins, 1, &outs[0]));
    } else {
      char part[300];
      snprintf(part, sizeof part, "%s_part%d", name, i);
      KILN_TRY(kiln_opt_insert_node(g, idx + 1, part, "Slice", "", 13, 4, ins, 1, &outs[i], NULL));
    }
  }
  return NULL;
}

/* ---- a Transpose with several readers, sunk past all of them ---------------------- */

static bool is_binary_pointwise(const kiln_node *n) {
  switch (kiln_node_op_id(n)) {
    case KILN_OP_Add: case KILN_OP_Sub: case KILN_OP_Mul: case KILN_OP_Div:
      return n->n_inputs == 2 && n->n_outputs == 1;
    default: return false;
  }
}

static bool is_reduce(const kiln_node *n) {
  switch (kiln_node_op_id(n)) {
    case KILN_OP_ReduceMean: case KILN_OP_ReduceSum: case KILN_OP_ReduceMax: case KILN_OP_ReduceMin:
    case KILN_OP_ReduceProd: case KILN_OP_ReduceL1: case KILN_OP_ReduceL2: case KILN_OP_ReduceSumSquare:
    case KILN_OP_ReduceLogSum: case KILN_OP_ReduceLogSumExp:
      return n->n_outputs == 1;
    default: return false;
  }
}

/* A Reduce*'s axes (the attribute, or a constant input 1); false when
 * unknown or empty. *from_input: they came from input 1. */
static bool reduce_axes_of(const kiln_graph *g, const kiln_node *n, int64_t *axes, int *count, bool *from_input) {
  int na = 0;
  const int64_t *a = kiln_attr_ints(n, "axes", &na);
  *from_input = false;
  if (n->n_inputs > 1 && n->inputs[1] >= 0) {
    const kiln_tensor *t = kiln_opt_const(g, n->inputs[1]);
    if (a || !t || t->dtype != KILN_DTYPE_I64 || t->rank != 1 || t->numel > KILN_MAX_RANK) return false;
    na = (int)t->numel;
    a = t->data;
    *from_input = true;
  }
  if (!a || na < 1 || na > KILN_MAX_RANK) return false;
  memcpy(axes, a, (size_t)na * sizeof(int64_t));
  *count = na;
  return true;
}

static int64_t numel_of(const kiln_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

/* Whether value v's one reader is a Transpose that undoes perm p. */
static bool undone_next(const kiln_graph *g, const kiln_opt_uses *u, int v, int rank, const int64_t *p) {
  int c = kiln_opt_sole_consumer(u, v);
  if (c < 0 || !kiln_node_is(&g->nodes[c], KILN_OP_Transpose)) return false;
  int r2;
  int64_t p2[KILN_MAX_RANK];
  if (!transpose_perm(g, &g->nodes[c], &r2, p2) || r2 != rank) return false;
  for (int i = 0; i < rank; i++)
    if (p[p2[i]] != i) return false;
  return true;
}

/* What a reader of x = Transpose(src, p) must be for the Transpose to go
 * after it (x's type: rank r, numel nx): 0 when it cannot. A reader whose
 * output is as big as x pays only where a Transpose after it undoes p (the
 * two then cancel); a reduction's kept-dims result is small. */
enum { SINK_NO, SINK_UNARY, SINK_BINARY, SINK_REDUCE };
static int sink_kind(const kiln_graph *g, const kiln_opt_uses *u, int r, int x, int rank, const int64_t *p,
                     int64_t nx) {
  const kiln_node *n = &g->nodes[r];
  int y = out0(n);
  if (!n->op || y < 0 || !kiln_opt_shape_known(&g->values[y].type)) return SINK_NO; /* y keeps its id: a pinned one too */
  if (is_unary_pointwise(n)) return undone_next(g, u, y, rank, p) ? SINK_UNARY : SINK_NO;
  if (is_binary_pointwise(n)) {
    int c = n->inputs[0] == x ? n->inputs[1] : n->inputs[0];
    if (c < 0 || c == x || !kiln_opt_shape_known(&g->values[c].type)) return SINK_NO;
    const kiln_type *ct = &g->values[c].type;
    /* The other operand, permuted the other way: the same rank (a numel-1
     * one needs nothing), and small or constant. */
    bool fits = numel_of(ct) == 1 || (ct->rank == rank && (kiln_opt_const(g, c) || numel_of(ct) * 8 <= nx));
    return fits && undone_next(g, u, y, rank, p) ? SINK_BINARY : SINK_NO;
  }
  if (is_reduce(n) && n->inputs[0] == x) {
    int64_t axes[KILN_MAX_RANK];
    int na;
    bool from_input;
    if (!reduce_axes_of(g, n, axes, &na, &from_input)) return SINK_NO;
    for (int i = 0; i < na; i++)
      if (axes[i] < -rank || axes[i] >= rank) return SINK_NO;
    return numel_of(&g->values[y].type) * 8 <= nx ? SINK_REDUCE : SINK_NO;
  }
  return SINK_NO;
}

/* dims permuted: out[k] = in[perm[k]]. */
static kiln_type permuted_type(const kiln_type *t, const int64_t *perm) {
  kiln_type r = *t;
  memset(r.dim_params, 0, sizeof r.dim_params); /* the shape is known: no symbolic names to carry */
  for (int k = 0; k < t->rank; k++) r.dims[k] = t->dims[perm[k]];
  return r;
}

/* Inserts y = Transpose(x, perm) at pos. */
static kiln_status_t insert_transpose(kiln_graph *g, int pos, const char *name, int x, int y, int rank,
                                      const int64_t *perm) {
  int at;
  KILN_TRY(kiln_opt_insert_node(g, pos, name, "Transpose", "", 13, 1, &x, 1, &y, &at));
  return kiln_opt_set_attr_ints(&g->nodes[at], "perm", rank, perm);
}

/* x = Transpose(src, p) read by several nodes, each a pointwise op whose
 * result a Transpose undoes next, or a kept-dims reduction: every reader
 * reads src, a Transpose by p after each restores its result, and a
 * binary op's other operand is permuted the other way. The Transposes
 * after the pointwise readers then cancel with the ones that undo them
 * (an NHWC export's squeeze-excite block: its ReduceMean and gating Mul
 * read the Transposed activation). *changed when rewritten. */
static kiln_status_t sink_transpose_readers(kiln_graph *g, const kiln_opt_uses *u, int idx, bool *changed) {
  *changed = false;
  const kiln_node *t = &g->nodes[idx];
  int x = out0(t), src = in0(t), rank;
  int64_t p[KILN_MAX_RANK], pinv[KILN_MAX_RANK];
  if (!t->op || x < 0 || src < 0 || u->pinned[x] || t->n_outputs != 1 || !transpose_perm(g, t, &rank, p)) return NULL;
  const kiln_type *xt = &g->values[x].type;
  if (!kiln_opt_shape_known(xt) || xt->rank != rank || u->count[x] < 1) return NULL;
  int64_t nx = numel_of(xt);
  for (int k = 0; k < rank; k++) pinv[p[k]] = k;
  int n_readers = u->start[x + 1] - u->start[x];
  if (n_readers != u->count[x] || n_readers > 64) return NULL;
  int readers[64], kinds[64];
  for (int i = 0; i < n_readers; i++) {
    readers[i] = u->cons[u->start[x] + i];
    for (int j = 0; j < i; j++)
      if (readers[j] == readers[i]) return NULL; /* read twice by one node */
    if (readers[i] <= idx) return NULL;
    kinds[i] = sink_kind(g, u, readers[i], x, rank, p, nx);
    if (kinds[i] == SINK_NO) return NULL;
  }
  /* Latest reader first: insertions then never move a reader still to do. */
  for (int i = 1; i < n_readers; i++)
    for (int j = i; j > 0 && readers[j - 1] < readers[j]; j--) {
      int tr = readers[j], tk = kinds[j];
      readers[j] = readers[j - 1], kinds[j] = kinds[j - 1];
      readers[j - 1] = tr, kinds[j - 1] = tk;
    }
  for (int i = 0; i < n_readers; i++) {
    int r = readers[i];
    char name[300];
    if (kinds[i] == SINK_BINARY) {
      kiln_node *n = &g->nodes[r];
      int slot = n->inputs[0] == x ? 1 : 0, c = n->inputs[slot];
      if (numel_of(&g->values[c].type) != 1) {
        kiln_type ct = permuted_type(&g->values[c].type, pinv);
        int c2;
        KILN_TRY(kiln_opt_new_value(g, g->values[c].name, &ct, &c2));
        snprintf(name, sizeof name, "%s_unpermuted", g->values[c].name);
        KILN_TRY(insert_transpose(g, r, name, c, c2, rank, pinv));
        r++;
        g->nodes[r].inputs[slot] = c2;
      }
    }
    kiln_node *n = &g->nodes[r];
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] == x) n->inputs[k] = src;
    if (kinds[i] == SINK_REDUCE) {
      int64_t axes[KILN_MAX_RANK];
      int na;
      bool from_input;
      reduce_axes_of(g, n, axes, &na, &from_input);
      for (int k = 0; k < na; k++) axes[k] = p[axes[k] < 0 ? axes[k] + rank : axes[k]];
      if (from_input) {
        kiln_tensor *at;
        int64_t len = na;
        KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &len, &at));
        memcpy(at->data, axes, (size_t)na * sizeof(int64_t));
        int aid;
        KILN_TRY(kiln_opt_new_const(g, g->values[g->nodes[r].inputs[1]].name, at, &aid));
        g->nodes[r].inputs[1] = aid;
      } else {
        KILN_TRY(kiln_opt_set_attr_ints(&g->nodes[r], "axes", na, axes));
      }
    }
    /* The result is permuted by p, or, when a reduction drops its axes,
     * by q: the order its kept axes had in x among their order in src. */
    int out_rank = rank;
    int64_t q[KILN_MAX_RANK], qinv[KILN_MAX_RANK];
    memcpy(q, p, sizeof q);
    if (kinds[i] == SINK_REDUCE && kiln_attr_int(&g->nodes[r], "keepdims", 1) == 0) {
      int64_t axes[KILN_MAX_RANK], kept_src[KILN_MAX_RANK];
      int na;
      bool from_input, dropped[KILN_MAX_RANK] = {0};
      reduce_axes_of(g, &g->nodes[r], axes, &na, &from_input); /* already in src's axes */
      for (int k = 0; k < na; k++) dropped[axes[k]] = true;
      int nk = 0;
      for (int m = 0; m < rank; m++)
        if (!dropped[m]) kept_src[nk++] = m;
      out_rank = 0;
      bool ident = true;
      for (int k = 0; k < rank; k++) {
        if (dropped[p[k]]) continue;
        int at = 0;
        while (kept_src[at] != p[k]) at++;
        q[out_rank] = at;
        ident &= at == out_rank++;
      }
      if (ident) continue; /* the kept axes keep their order: src's result is x's */
    }
    for (int k = 0; k < out_rank; k++) qinv[q[k]] = k;
    int y = out0(&g->nodes[r]), y2;
    kiln_type yt = permuted_type(&g->values[y].type, qinv);
    KILN_TRY(kiln_opt_new_value(g, g->values[y].name, &yt, &y2));
    g->nodes[r].outputs[0] = y2;
    g->values[y2].producer = r;
    snprintf(name, sizeof name, "%s_permuted", g->values[y].name);
    KILN_TRY(insert_transpose(g, r + 1, name, y2, y, out_rank, q));
  }
  *changed = true;
  return NULL;
}

static kiln_status_t sink_transposes(kiln_graph *g) {
  if (!kiln_opt_shapes_trusted(g)) return NULL;
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  kiln_status_t st = NULL;
  for (int idx = 0; idx < g->n_nodes && !st; idx++) {
    if (!kiln_node_is(&g->nodes[idx], KILN_OP_Transpose)) continue;
    bool changed = false;
    st = sink_transpose_readers(g, &u, idx, &changed);
    if (!st && changed) {
      kiln_opt_uses_free(&u);
      st = kiln_opt_uses_build(g, &u);
    }
  }
  kiln_opt_uses_free(&u);
  return st;
}

/* ---- a convolution's taps that never meet the input ------------------------------- */

/* Whether tap k of an axis (in, out, stride s, dilation d, pad_begin p)
 * reads the input at some output position. */
static bool tap_reads_input(int64_t k, int64_t in, int64_t out, int64_t s, int64_t d, int64_t p) {
  int64_t first = p - k * d; /* position o reads o * s - first */
  int64_t o0 = first <= 0 ? 0 : (first + s - 1) / s;
  return o0 < out && o0 * s - first < in;
}

/* Conv with constant weights whose kernel has taps that read only padding
 * at every output position (DeepLab's ASPP: 3x3 at dilation 36 over a
 * 28x28 map is its center tap): the weights sliced to the taps that read
 * the input, the pads shrunk by what was cut, the output unchanged. */
static kiln_status_t trim_conv_taps(kiln_graph *g, int idx, bool *changed) {
  kiln_node *n = &g->nodes[idx];
  if (!kiln_node_is(n, KILN_OP_Conv) || n->n_inputs < 2 || n->n_outputs != 1) return NULL;
  int x = n->inputs[0], wid = n->inputs[1], y = n->outputs[0];
  const kiln_tensor *w = x >= 0 && wid >= 0 ? kiln_opt_const(g, wid) : NULL;
  if (!w || y < 0 || !kiln_opt_shape_known(&g->values[x].type) || !kiln_opt_shape_known(&g->values[y].type)) return NULL;
  const kiln_type *xt = &g->values[x].type, *yt = &g->values[y].type;
  int nsp = xt->rank - 2;
  if (nsp < 1 || nsp > 3 || w->rank != xt->rank || yt->rank != xt->rank) return NULL;
  kiln_window win;
  kiln_status_t st = kiln_window_init(n, nsp, xt->dims + 2, w->dims + 2, true, false, &win);
  if (st) { /* the kernel reports it */
    kiln_status_free(st);
    return NULL;
  }
  int64_t lo[3], hi[3], pb[3], pe[3];
  bool trims = false;
  for (int i = 0; i < nsp; i++) {
    int64_t K = w->dims[2 + i], in = xt->dims[2 + i], out = yt->dims[2 + i];
    lo[i] = 0, hi[i] = K - 1;
    while (lo[i] < K && !tap_reads_input(lo[i], in, out, win.stride[i], win.dilation[i], win.pad_begin[i])) lo[i]++;
    while (hi[i] > lo[i] && !tap_reads_input(hi[i], in, out, win.stride[i], win.dilation[i], win.pad_begin[i])) hi[i]--;
    if (lo[i] == K || out < 1) return NULL; /* nothing read: left as is */
    pb[i] = win.pad_begin[i] - lo[i] * win.dilation[i];
    pe[i] = win.pad_end[i] - (K - 1 - hi[i]) * win.dilation[i];
    if (pb[i] < 0 || pe[i] < 0) return NULL;
    trims |= lo[i] > 0 || hi[i] < K - 1;
  }
  if (!trims) return NULL;
  int64_t dims[5];
  for (int i = 0; i < 2; i++) dims[i] = w->dims[i];
  for (int i = 0; i < nsp; i++) dims[2 + i] = hi[i] - lo[i] + 1;
  kiln_tensor *t;
  KILN_TRY(kiln_tensor_new(w->dtype, w->rank, dims, &t));
  size_t es = kiln_dtype_size(w->dtype);
  int64_t kin[3] = {1, 1, 1}, kout[3] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) kin[i] = w->dims[2 + i], kout[i] = dims[2 + i];
  const char *src = w->data;
  char *dst = t->data;
  for (int64_t f = 0; f < dims[0] * dims[1]; f++)
    for (int64_t a = 0; a < kout[0]; a++)
      for (int64_t b = 0; b < kout[1]; b++)
        for (int64_t c = 0; c < kout[2]; c++) {
          int64_t ia = a + lo[0], ib = nsp > 1 ? b + lo[1] : b, ic = nsp > 2 ? c + lo[2] : c;
          int64_t from = ((f * kin[0] + ia) * kin[1] + ib) * kin[2] + ic, to = ((f * kout[0] + a) * kout[1] + b) * kout[2] + c;
          memcpy(dst + (size_t)to * es, src + (size_t)from * es, es);
        }
  int nw;
  KILN_TRY(kiln_opt_new_const(g, g->values[wid].name, t, &nw));
  n = &g->nodes[idx];
  n->inputs[1] = nw;
  int64_t pads[6];
  for (int i = 0; i < nsp; i++) pads[i] = pb[i], pads[nsp + i] = pe[i];
  KILN_TRY(kiln_opt_set_attr_ints(n, "pads", 2 * nsp, pads));
  KILN_TRY(kiln_opt_set_attr_string(n, "auto_pad", "NOTSET"));
  if (kiln_node_attr(n, "kernel_shape")) KILN_TRY(kiln_opt_set_attr_ints(n, "kernel_shape", nsp, dims + 2));
  *changed = true;
  return NULL;
}

static kiln_status_t trim_conv_taps_all(kiln_graph *g) {
  if (!kiln_opt_shapes_trusted(g)) return NULL;
  for (int idx = 0; idx < g->n_nodes; idx++) {
    bool changed = false;
    KILN_TRY(trim_conv_taps(g, idx, &changed));
  }
  return NULL;
}

static kiln_status_t simplify_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, simplify_graph));
  /* Splits first, from the end, so an insertion moves no node still to visit. */
  for (int ni = g->n_nodes - 1; ni >= 0; ni--)
    if (kiln_node_is(&g->nodes[ni], KILN_OP_Split)) KILN_TRY(split_to_slices(g, ni));
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  bool *dead = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof(bool));
  if (!dead) {
    kiln_opt_uses_free(&u);
    return KILN_OOM();
  }
  kiln_status_t st = NULL;
  /* Each rewrite changes who reads what: apply it, rebuild, go on from the same node. */
  for (int idx = 0; idx < g->n_nodes && !st;) {
    bool changed = false;
    st = simplify_node(g, &u, idx, dead, &changed);
    if (st || !changed) {
      idx++;
      continue;
    }
    int removed_before = 0;
    for (int k = 0; k < idx; k++) removed_before += dead[k];
    st = kiln_opt_remove_nodes(g, dead);
    kiln_opt_uses_free(&u);
    if (!st) st = kiln_opt_uses_build(g, &u);
    free(dead);
    dead = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof(bool));
    if (!dead && !st) st = KILN_OOM();
    /* A node rewritten in place may simplify further; a removed one's successor moved into its slot. */
    idx -= removed_before;
  }
  free(dead);
  kiln_opt_uses_free(&u);
  /* The pairs this makes cancel in the next round of the pipeline. */
  if (!st) st = sink_transposes(g);
  if (!st) st = trim_conv_taps_all(g);
  return st;
}

kiln_status_t kiln_pass_simplify(kiln_graph *g) { return simplify_graph(g); }
