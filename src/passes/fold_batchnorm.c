/* fold-batchnorm: inference BatchNormalization after a linear op with
 * constant weights becomes part of the weights.
 *
 *   BN(Conv(x, W, B))   -> Conv(x, W * s[m], B * s + t)       s = scale / sqrt(var + eps)
 *   BN(Gemm(a, B, C))   -> Gemm(a, B * s[n], s * beta * C + t, beta = 1)     t = bias - mean * s
 *   BN(MatMul(a, W))    -> Add(MatMul(a, W * s[n]), t)   when the output is 2-D (channel = column)
 *
 * and per-channel constants after Conv ("scale folding"):
 *
 *   Conv(x, W, B) * c   -> Conv(x, W * c, B * c)
 *   Conv(x, W, B) + c   -> Conv(x, W, B + c)      (- c likewise)
 *
 * where c broadcasts over the output as one value per output channel (or
 * one value). Any other inference BN (after a ConvTranspose, a Relu, on a
 * graph input) becomes Mul(x, s) + t with s and t of shape [C, 1, ...]. Only when the linear op's output has no other reader, the
 * weights and parameters are constants, and BN is in inference mode with
 * no statistics outputs. New weights are new constants: the old ones may
 * be shared with other nodes or with the model. */
#include "passes/passes_opt.h"

#include <math.h>
#include <stdio.h>

static bool float_const_vector(const kiln_graph *g, int id, int64_t c) {
  const kiln_tensor *t = kiln_opt_const(g, id);
  return t && kiln_dtype_is_float(t->dtype) && t->rank == 1 && t->dims[0] == c;
}

/* s and t (c values each, malloc'd) of an inference BN, or false. */
static bool bn_affine(const kiln_graph *g, const kiln_node *bn, int64_t c, double **out_s, double **out_t) {
  if (bn->n_inputs < 5) return false;
  for (int i = 1; i < bn->n_outputs; i++)
    if (bn->outputs[i] >= 0) return false; /* statistics outputs mean training (before opset 14) */
  if (bn->opset >= 14 && kiln_attr_int(bn, "training_mode", 0)) return false;
  if (bn->opset < 9 && kiln_attr_int(bn, "spatial", 1) == 0) return false;
  for (int i = 1; i < 5; i++)
    if (!float_const_vector(g, bn->inputs[i], c)) return false;
  const kiln_tensor *scale = kiln_opt_const(g, bn->inputs[1]), *bias = kiln_opt_const(g, bn->inputs[2]);
  const kiln_tensor *mean = kiln_opt_const(g, bn->inputs[3]), *var = kiln_opt_const(g, bn->inputs[4]);
  double eps = kiln_attr_float(bn, "epsilon", 1e-5f);
  double *s = malloc((size_t)(c > 0 ? c : 1) * sizeof(double)), *t = malloc((size_t)(c > 0 ? c : 1) * sizeof(double));
  if (!s || !t) {
    free(s);
    free(t);
    return false;
  }
  for (int64_t k = 0; k < c; k++) {
    s[k] = kiln_load_f64(scale->data, scale->dtype, k) / sqrt(kiln_load_f64(var->data, var->dtype, k) + eps);
    t[k] = kiln_load_f64(bias->data, bias->dtype, k) - kiln_load_f64(mean->data, mean->dtype, k) * s[k];
  }
  *out_s = s;
  *out_t = t;
  return true;
}

/* A copy of w with element i multiplied by s[(i / div) % mod]. */
static kiln_status_t scaled_copy(const kiln_tensor *w, const double *s, int64_t div, int64_t mod, kiln_tensor **out) {
  KILN_TRY(kiln_tensor_new(w->dtype, w->rank, w->dims, out));
  for (int64_t i = 0; i < w->numel; i++)
    kiln_store_f64((*out)->data, w->dtype, i, kiln_load_f64(w->data, w->dtype, i) * s[(i / div) % mod]);
  return NULL;
}

/* Conv(x, W, B) -> Conv(x, W * s, B * s + t) writing `out_id`. s or t may be NULL (1 or 0). */
static kiln_status_t rewrite_conv(kiln_graph *g, int conv, const double *s, const double *t, int out_id) {
  kiln_node *n = &g->nodes[conv];
  const kiln_tensor *w = kiln_opt_const(g, n->inputs[1]);
  int64_t m = w->dims[0];
  int bid = n->n_inputs > 2 ? n->inputs[2] : -1;
  const kiln_tensor *b = bid >= 0 ? kiln_opt_const(g, bid) : NULL;
  int new_w = n->inputs[1], new_b = bid;
  if (s) {
    kiln_tensor *nw;
    KILN_TRY(scaled_copy(w, s, w->numel / (m > 0 ? m : 1), m > 0 ? m : 1, &nw));
    KILN_TRY(kiln_opt_new_const(g, g->values[n->inputs[1]].name, nw, &new_w));
  }
  if (t || (s && b)) {
    kiln_tensor *nb;
    KILN_TRY(kiln_tensor_new(w->dtype, 1, &m, &nb));
    for (int64_t k = 0; k < m; k++) {
      double v = b ? kiln_load_f64(b->data, b->dtype, k) : 0.0;
      if (s) v *= s[k];
      if (t) v += t[k];
      kiln_store_f64(nb->data, nb->dtype, k, v);
    }
    KILN_TRY(kiln_opt_new_const(g, bid >= 0 ? g->values[bid].name : g->nodes[conv].name, nb, &new_b));
  }
  n = &g->nodes[conv];
  if (new_b >= 0 && n->n_inputs < 3) {
    int *in = realloc(n->inputs, 3 * sizeof(int));
    if (!in) return KILN_OOM();
    n->inputs = in;
    n->n_inputs = 3;
  }
  n->inputs[1] = new_w;
  if (new_b >= 0) n->inputs[2] = new_b;
  n->outputs[0] = out_id;
  return NULL;
}

/* Conv with constant float weights (and constant or absent bias) whose output has M channels. */
static bool conv_foldable(const kiln_graph *g, const kiln_node *n, int64_t m) {
  if (!kiln_node_is(n, KILN_OP_Conv) || n->n_inputs < 2 || n->n_outputs != 1) return false;
  const kiln_tensor *w = kiln_opt_const(g, n->inputs[1]);
  if (!w || !kiln_dtype_is_float(w->dtype) || w->rank < 3 || (m >= 0 && w->dims[0] != m)) return false;
  int bid = n->n_inputs > 2 ? n->inputs[2] : -1;
  if (bid >= 0) {
    const kiln_tensor *b = kiln_opt_const(g, bid);
    if (!b || b->dtype != w->dtype || b->rank != 1 || b->dims[0] != w->dims[0]) return false;
  }
  return true;
}

static kiln_status_t fold_bn(kiln_graph *g, const kiln_opt_uses *u, int bi, bool *dead, bool *changed) {
  kiln_node *bn = &g->nodes[bi];
  if (bn->n_inputs < 5 || bn->inputs[0] < 0 || bn->outputs[0] < 0) return NULL;
  int x = bn->inputs[0], y = bn->outputs[0];
  int p = g->values[x].producer;
  if (p < 0 || kiln_opt_sole_consumer(u, x) != bi) return NULL;
  const kiln_tensor *mean = kiln_opt_const(g, bn->inputs[3]);
  if (!mean || mean->rank != 1) return NULL;
  int64_t c = mean->dims[0];
  kiln_node *pn = &g->nodes[p];
  double *s = NULL, *t = NULL;
  if (conv_foldable(g, pn, c)) {
    if (!bn_affine(g, bn, c, &s, &t)) return NULL;
    kiln_status_t st = rewrite_conv(g, p, s, t, y);
    free(s);
    free(t);
    KILN_TRY(st);
    dead[bi] = *changed = true;
    return NULL;
  }
  if (kiln_node_is(pn, KILN_OP_Gemm) && pn->opset >= 7 && pn->n_inputs >= 2 && pn->n_outputs == 1) {
    const kiln_tensor *b = kiln_opt_const(g, pn->inputs[1]);
    if (!b || !kiln_dtype_is_float(b->dtype) || b->rank != 2) return NULL;
    bool trans_b = kiln_attr_int(pn, "transB", 0) != 0;
    int64_t k = trans_b ? b->dims[1] : b->dims[0], nc = trans_b ? b->dims[0] : b->dims[1];
    if (nc != c) return NULL;
    int cid = pn->n_inputs > 2 ? pn->inputs[2] : -1;
    const kiln_tensor *cc = cid >= 0 ? kiln_opt_const(g, cid) : NULL;
    if (cid >= 0 && (!cc || cc->dtype != b->dtype || cc->rank > 2)) return NULL;
    int64_t rows = cc && cc->rank == 2 ? cc->dims[0] : 1, ccols = cc && cc->rank >= 1 ? cc->dims[cc->rank - 1] : 1;
    if (cc && ccols != 1 && ccols != nc) return NULL;
    if (!bn_affine(g, bn, c, &s, &t)) return NULL;
    double beta = kiln_attr_float(pn, "beta", 1.0f);
    kiln_tensor *nb = NULL, *ncst = NULL;
    int64_t cdims[2] = {rows, nc};
    kiln_status_t st = scaled_copy(b, s, trans_b ? k : 1, nc, &nb);
    if (!st) st = kiln_tensor_new(b->dtype, cc && cc->rank == 2 ? 2 : 1, cc && cc->rank == 2 ? cdims : &nc, &ncst);
    for (int64_t r = 0; !st && r < rows; r++)
      for (int64_t j = 0; j < nc; j++) {
        double v = 0;
        if (cc) {
          int64_t ci = (cc->rank == 2 && cc->dims[0] != 1 ? r * ccols : 0) + (ccols != 1 ? j : 0);
          v = beta * kiln_load_f64(cc->data, cc->dtype, ci);
        }
        kiln_store_f64(ncst->data, ncst->dtype, r * nc + j, v * s[j] + t[j]);
      }
    free(s);
    free(t);
    int new_b = -1, new_c = -1;
    if (!st) {
      st = kiln_opt_new_const(g, g->values[pn->inputs[1]].name, nb, &new_b);
      nb = NULL;
    }
    if (!st) {
      st = kiln_opt_new_const(g, cid >= 0 ? g->values[cid].name : g->nodes[p].name, ncst, &new_c);
      ncst = NULL;
    }
    kiln_tensor_release(nb);
    kiln_tensor_release(ncst);
    KILN_TRY(st);
    pn = &g->nodes[p];
    if (pn->n_inputs < 3) {
      int *in = realloc(pn->inputs, 3 * sizeof(int));
      if (!in) return KILN_OOM();
      pn->inputs = in;
      pn->n_inputs = 3;
    }
    pn->inputs[1] = new_b;
    pn->inputs[2] = new_c;
    KILN_TRY(kiln_opt_set_attr_float(pn, "beta", 1.0f));
    pn->outputs[0] = y;
    dead[bi] = *changed = true;
    return NULL;
  }
  /* The channel is the column only for 2-D outputs; trust inferred ranks only where shapes are exact. */
  if (kiln_opt_shapes_trusted(g) && kiln_node_is(pn, KILN_OP_MatMul) && pn->n_inputs == 2 && pn->n_outputs == 1 &&
      g->values[x].type.rank == 2) {
    const kiln_tensor *w = kiln_opt_const(g, pn->inputs[1]);
    if (!w || !kiln_dtype_is_float(w->dtype) || w->rank != 2 || w->dims[1] != c) return NULL;
    if (!bn_affine(g, bn, c, &s, &t)) return NULL;
    kiln_tensor *nw = NULL, *bias = NULL;
    kiln_status_t st = scaled_copy(w, s, 1, c, &nw);
    if (!st) st = kiln_tensor_new(w->dtype, 1, &c, &bias);
    for (int64_t j = 0; !st && j < c; j++) kiln_store_f64(bias->data, bias->dtype, j, t[j]);
    free(s);
    free(t);
    int new_w = -1, bias_id = -1;
    if (!st) {
      st = kiln_opt_new_const(g, g->values[pn->inputs[1]].name, nw, &new_w);
      nw = NULL;
    }
    if (!st) {
      st = kiln_opt_new_const(g, g->nodes[bi].name, bias, &bias_id);
      bias = NULL;
    }
    kiln_tensor_release(nw);
    kiln_tensor_release(bias);
    KILN_TRY(st);
    g->nodes[p].inputs[1] = new_w;
    int ins[2] = {x, bias_id}, outs[1] = {y};
    KILN_TRY(kiln_opt_rewrite_node(g, bi, "Add", "", 14, 2, ins, 1, outs));
    *changed = true;
    return NULL;
  }
  return NULL;
}

/* Conv output times / plus a per-channel constant. */
static kiln_status_t fold_channel_const(kiln_graph *g, const kiln_opt_uses *u, int ni, bool *dead, bool *changed) {
  kiln_node *n = &g->nodes[ni];
  bool mul = kiln_node_is(n, KILN_OP_Mul), add = kiln_node_is(n, KILN_OP_Add), sub = kiln_node_is(n, KILN_OP_Sub);
  if ((!mul && !add && !sub) || n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int side = 0; side < 2; side++) {
    if (sub && side == 1) break; /* c - conv would negate the weights too; not worth it */
    int x = n->inputs[side], cid = n->inputs[1 - side];
    if (x < 0 || cid < 0 || x == cid) continue;
    int p = g->values[x].producer;
    if (p < 0 || kiln_opt_sole_consumer(u, x) != ni || !conv_foldable(g, &g->nodes[p], -1)) continue;
    const kiln_tensor *w = kiln_opt_const(g, g->nodes[p].inputs[1]);
    const kiln_tensor *c = kiln_opt_const(g, cid);
    if (!c || c->dtype != w->dtype || c->rank > w->rank) continue;
    int64_t m = w->dims[0];
    int r = w->rank;
    bool per_channel = false, ok = true;
    for (int j = 0; j < c->rank && ok; j++) {
      int axis = r - c->rank + j;
      if (c->dims[j] == 1) continue;
      if (axis == 1 && c->dims[j] == m) per_channel = true;
      else ok = false;
    }
    if (!ok) continue;
    double *v = malloc((size_t)(m > 0 ? m : 1) * sizeof(double));
    if (!v) return KILN_OOM();
    for (int64_t k = 0; k < m; k++) {
      v[k] = kiln_load_f64(c->data, c->dtype, per_channel ? k : 0);
      if (sub) v[k] = -v[k];
    }
    kiln_status_t st = rewrite_conv(g, p, mul ? v : NULL, mul ? NULL : v, n->outputs[0]);
    free(v);
    KILN_TRY(st);
    dead[ni] = *changed = true;
    return NULL;
  }
  return NULL;
}

/* An inference BN that did not fold into its producer becomes
 * Mul(x, s) then Add(., t) with s and t constants of shape [C, 1, ...]:
 * elementwise ops every compiling device fuses with their neighbours. */
static kiln_status_t bn_to_affine(kiln_graph *g, int bi) {
  kiln_node *bn = &g->nodes[bi];
  if (bn->n_inputs < 5 || bn->inputs[0] < 0 || bn->n_outputs < 1 || bn->outputs[0] < 0) return NULL;
  int x = bn->inputs[0], y = bn->outputs[0];
  const kiln_type *xt = &g->values[x].type;
  const kiln_tensor *mean = kiln_opt_const(g, bn->inputs[3]);
  if (!mean || mean->rank != 1 || xt->kind != KILN_TYPE_TENSOR || xt->rank < 2 || !kiln_dtype_is_float(xt->dtype))
    return NULL;
  int64_t c = mean->dims[0];
  if (xt->dims[1] >= 0 && xt->dims[1] != c) return NULL; /* ref reports the mismatch */
  double *s = NULL, *t = NULL;
  if (!bn_affine(g, bn, c, &s, &t)) return NULL;
  int64_t dims[KILN_MAX_RANK];
  dims[0] = c;
  for (int d = 1; d < xt->rank - 1; d++) dims[d] = 1;
  kiln_tensor *ts = NULL, *tt = NULL;
  kiln_status_t st = kiln_tensor_new(xt->dtype, xt->rank - 1, dims, &ts);
  if (!st) st = kiln_tensor_new(xt->dtype, xt->rank - 1, dims, &tt);
  for (int64_t k = 0; !st && k < c; k++) {
    kiln_store_f64(ts->data, ts->dtype, k, s[k]);
    kiln_store_f64(tt->data, tt->dtype, k, t[k]);
  }
  free(s);
  free(t);
  int sid = -1, tid = -1, mid = -1;
  char name[256];
  snprintf(name, sizeof name, "%s", bn->name);
  if (!st) {
    st = kiln_opt_new_const(g, name, ts, &sid);
    ts = NULL;
  }
  if (!st) {
    st = kiln_opt_new_const(g, name, tt, &tid);
    tt = NULL;
  }
  kiln_tensor_release(ts);
  kiln_tensor_release(tt);
  KILN_TRY(st);
  kiln_type yt = {0}; /* a copy: interning a value may move g->values */
  kiln_type_copy(&yt, &g->values[y].type);
  st = kiln_opt_new_value(g, name, &yt, &mid);
  kiln_type_clear(&yt);
  KILN_TRY(st);
  int mul_in[2] = {x, sid}, add_in[2] = {mid, tid};
  KILN_TRY(kiln_opt_rewrite_node(g, bi, "Mul", "", 14, 2, mul_in, 1, &mid));
  char add_name[300];
  snprintf(add_name, sizeof add_name, "%s_shift", name);
  return kiln_opt_insert_node(g, bi + 1, add_name, "Add", "", 14, 2, add_in, 1, &y, NULL);
}

static kiln_status_t fold_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, fold_graph));
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  bool *dead = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof(bool));
  kiln_status_t st = dead ? NULL : KILN_OOM();
  for (int ni = 0; ni < g->n_nodes && !st;) {
    bool changed = false;
    if (kiln_node_is(&g->nodes[ni], KILN_OP_BatchNormalization)) st = fold_bn(g, &u, ni, dead, &changed);
    else st = fold_channel_const(g, &u, ni, dead, &changed);
    if (!st && changed) {
      /* Uses changed: drop what died, rebuild, and look at this slot again. */
      int before = 0;
      for (int k = 0; k < ni; k++) before += dead[k];
      st = kiln_opt_remove_nodes(g, dead);
      kiln_opt_uses_free(&u);
      if (!st) st = kiln_opt_uses_build(g, &u);
      memset(dead, 0, (size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof(bool));
      ni -= before;
      continue;
    }
    ni++;
  }
  free(dead);
  kiln_opt_uses_free(&u);
  /* What is left of BN (after a non-foldable producer, on a graph input):
   * from the end, so an insertion does not move the nodes still to visit. */
  for (int ni = g->n_nodes - 1; ni >= 0 && !st; ni--)
    if (kiln_node_is(&g->nodes[ni], KILN_OP_BatchNormalization)) st = bn_to_affine(g, ni);
  return st;
}

kiln_status_t kiln_pass_fold_batchnorm(kiln_graph *g) { return fold_graph(g); }
