/* patterns: recognizes composite computations exporters write out op by
 * op and replaces each by one node a device may claim as one kernel:
 *
 *   GELU      x * 0.5 * (1 + erf(x / sqrt(2)))                         -> kiln.Gelu
 *             0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  -> kiln.Gelu(approximate="tanh")
 *   LayerNorm d = x - ReduceMean(x); d / sqrt(ReduceMean(d^2) + eps) [* g] [+ b]
 *             over trailing axes                                         -> LayerNormalization (opset 17)
 *   Softmax   e = exp(x - ReduceMax(x)); e / ReduceSum(e), one axis       -> Softmax (opset 13)
 *   Attention MatMul(Q, Kᵀ) [/ or * scale] [+ mask] -> Softmax(last axis)
 *             -> MatMul(·, V)  (a scale on Q or Kᵀ too)                   -> kiln.FusedAttention
 *
 * Every intermediate value must be read only inside the pattern (and not
 * be a graph output); constants are scalars that do not broadcast the
 * result to a bigger shape. The fused node takes the place (and output)
 * of the pattern's last node. Only where kiln_opt_shapes_trusted: the
 * checks rely on inferred shapes. Softmax runs before attention so a decomposed softmax
 * inside attention is found too. */
#include "passes/passes_opt.h"

#include <math.h>
#include <stdio.h>

typedef struct matcher {
  kiln_graph *g;
  kiln_opt_uses u;
  bool *dead;
} matcher;

static kiln_node *producer(const matcher *m, int v) {
  if (v < 0) return NULL;
  int p = m->g->values[v].producer;
  return p >= 0 ? &m->g->nodes[p] : NULL;
}

static int node_index(const matcher *m, const kiln_node *n) { return (int)(n - m->g->nodes); }

/* The single node reading v (once), or NULL; v must not be pinned. */
static kiln_node *sole(const matcher *m, int v) {
  int c = kiln_opt_sole_consumer(&m->u, v);
  return c >= 0 ? &m->g->nodes[c] : NULL;
}

static int out0(const kiln_node *n) { return n->n_outputs >= 1 ? n->outputs[0] : -1; }

static bool binary(const kiln_node *n) {
  if (n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || out0(n) < 0) return false;
  for (int i = 1; i < n->n_outputs; i++)
    if (n->outputs[i] >= 0) return false;
  return true;
}

/* For a binary node reading v: the other input, or -1. */
static int other_input(const kiln_node *n, int v) {
  if (!binary(n)) return -1;
  if (n->inputs[0] == v) return n->inputs[1];
  if (n->inputs[1] == v) return n->inputs[0];
  return -1;
}

static bool is_float_type(const kiln_type *t) { return t->kind == KILN_TYPE_TENSOR && kiln_dtype_is_float(t->dtype); }

/* A one-element float constant that does not broadcast `like` to a higher rank; its value in *out. */
static bool neutral_scalar(const matcher *m, int c, int like, double *out) {
  const kiln_tensor *t = kiln_opt_const(m->g, c);
  if (!t || t->numel != 1 || !kiln_dtype_is_float(t->dtype)) return false;
  const kiln_type *lt = &m->g->values[like].type;
  if (lt->dtype && lt->dtype != t->dtype) return false;
  if (t->rank > 0 && (lt->rank < 0 || t->rank > lt->rank)) return false;
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return true;
}

static bool near(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want); }

static bool scalar_near(const matcher *m, int c, int like, double want) {
  double v;
  return neutral_scalar(m, c, like, &v) && near(v, want, 1e-6);
}

static void kill(matcher *m, const kiln_node *n) { m->dead[node_index(m, n)] = true; }

/* Replaces node `last` by a fused node (in place). */
static kiln_status_t replace_last(matcher *m, kiln_node *last, const char *op_type, const char *domain, int opset,
                                  int n_in, const int *ins) {
  int idx = node_index(m, last);
  int out[1] = {out0(last)};
  return kiln_opt_rewrite_node(m->g, idx, op_type, domain, opset, n_in, ins, 1, out);
}

/* ---- GELU ---------------------------------------------------------------------- */

/* x * A * 0.5 from A (= 1 + erf/tanh(...)) onwards: the last node, and the Muls it took in *tail. */
static kiln_node *gelu_tail(const matcher *m, int x, int a, kiln_node **tail, int *n_tail) {
  *n_tail = 0;
  kiln_node *m1 = sole(m, a);
  if (!m1 || !kiln_node_is(m1, KILN_OP_Mul)) return NULL;
  int o = other_input(m1, a);
  if (o < 0) return NULL;
  tail[(*n_tail)++] = m1;
  if (o == x || scalar_near(m, o, x, 0.5)) {
    /* (x * A) * 0.5  or  (A * 0.5) * x */
    kiln_node *m2 = sole(m, out0(m1));
    if (!m2 || !kiln_node_is(m2, KILN_OP_Mul)) return NULL;
    int o2 = other_input(m2, out0(m1));
    bool ok = o == x ? scalar_near(m, o2, x, 0.5) : o2 == x;
    if (!ok) return NULL;
    tail[(*n_tail)++] = m2;
    return m2;
  }
  /* (x * 0.5) * A */
  kiln_node *h = producer(m, o);
  if (!h || !kiln_node_is(h, KILN_OP_Mul)) return NULL;
  int hx = other_input(h, x);
  if (hx < 0 || !scalar_near(m, hx, x, 0.5)) return NULL;
  if (kiln_opt_sole_consumer(&m->u, o) == node_index(m, m1)) tail[(*n_tail)++] = h;
  return m1;
}

static kiln_status_t make_gelu(matcher *m, int x, kiln_node *last, const char *approx) {
  int ins[1] = {x};
  int idx = node_index(m, last);
  KILN_TRY(replace_last(m, last, "Gelu", KILN_FUSED_DOMAIN, 1, 1, ins));
  if (approx) KILN_TRY(kiln_opt_set_attr_string(&m->g->nodes[idx], "approximate", approx));
  return NULL;
}

/* 1 + t, with t = out of the erf/tanh node: returns the Add or NULL. */
static kiln_node *plus_one(const matcher *m, int t, int x) {
  kiln_node *a = sole(m, t);
  if (!a || !kiln_node_is(a, KILN_OP_Add)) return NULL;
  int o = other_input(a, t);
  return o >= 0 && scalar_near(m, o, x, 1.0) ? a : NULL;
}

static kiln_status_t match_gelu_erf(matcher *m, kiln_node *e, bool *found) {
  if (!kiln_node_is(e, KILN_OP_Erf) || e->n_inputs != 1 || out0(e) < 0) return NULL;
  int t = e->inputs[0];
  kiln_node *sc = producer(m, t);
  if (!sc || sole(m, t) != e) return NULL;
  int x = -1;
  if (kiln_node_is(sc, KILN_OP_Div) && binary(sc) && scalar_near(m, sc->inputs[1], sc->inputs[0], M_SQRT2)) x = sc->inputs[0];
  else if (kiln_node_is(sc, KILN_OP_Mul) && binary(sc)) {
    for (int s = 0; s < 2 && x < 0; s++)
      if (scalar_near(m, sc->inputs[1 - s], sc->inputs[s], M_SQRT1_2)) x = sc->inputs[s];
  }
  if (x < 0 || !is_float_type(&m->g->values[x].type)) return NULL;
  kiln_node *a = plus_one(m, out0(e), x);
  if (!a) return NULL;
  kiln_node *tail[3];
  int nt;
  kiln_node *last = gelu_tail(m, x, out0(a), tail, &nt);
  if (!last) return NULL;
  kill(m, sc);
  kill(m, e);
  kill(m, a);
  for (int i = 0; i < nt; i++)
    if (tail[i] != last) kill(m, tail[i]);
  *found = true;
  return make_gelu(m, x, last, NULL);
}

/* x^3 as Pow(x, 3), x * (x * x) or (x * x) * x; the nodes in *nodes. */
static bool cube_of(const matcher *m, int c, int x, kiln_node **nodes, int *n) {
  kiln_node *p = producer(m, c);
  if (!p || !binary(p)) return false;
  if (kiln_node_is(p, KILN_OP_Pow)) {
    double e;
    if (p->inputs[0] != x || !neutral_scalar(m, p->inputs[1], x, &e) || e != 3.0) return false;
    nodes[(*n)++] = p;
    return true;
  }
  if (!kiln_node_is(p, KILN_OP_Mul)) return false;
  int o = other_input(p, x);
  if (o < 0) return false;
  kiln_node *q = producer(m, o);
  if (!q || !kiln_node_is(q, KILN_OP_Mul) || !binary(q) || q->inputs[0] != x || q->inputs[1] != x || sole(m, o) != p) return false;
  nodes[(*n)++] = p;
  nodes[(*n)++] = q;
  return true;
}

static kiln_status_t match_gelu_tanh(matcher *m, kiln_node *th, bool *found) {
  if (!kiln_node_is(th, KILN_OP_Tanh) || th->n_inputs != 1 || out0(th) < 0) return NULL;
  int t1 = th->inputs[0];
  kiln_node *k1 = producer(m, t1);
  if (!k1 || sole(m, t1) != th || !kiln_node_is(k1, KILN_OP_Mul) || !binary(k1)) return NULL;
  kiln_node *nodes[8];
  int nn = 0;
  for (int s = 0; s < 2; s++) {
    int inner = k1->inputs[s], c = k1->inputs[1 - s];
    kiln_node *ad = producer(m, inner);
    if (!ad || !kiln_node_is(ad, KILN_OP_Add) || !binary(ad) || sole(m, inner) != k1) continue;
    if (!scalar_near(m, c, inner, 0.7978845608028654)) continue;
    for (int s2 = 0; s2 < 2; s2++) {
      int x = ad->inputs[s2], w = ad->inputs[1 - s2];
      kiln_node *wm = producer(m, w);
      if (!wm || !kiln_node_is(wm, KILN_OP_Mul) || !binary(wm) || sole(m, w) != ad || !is_float_type(&m->g->values[x].type))
        continue;
      for (int s3 = 0; s3 < 2; s3++) {
        int cube = wm->inputs[s3];
        nn = 0;
        if (!scalar_near(m, wm->inputs[1 - s3], x, 0.044715) || sole(m, cube) != wm || !cube_of(m, cube, x, nodes, &nn))
          continue;
        kiln_node *a = plus_one(m, out0(th), x);
        if (!a) return NULL;
        kiln_node *tail[3];
        int nt;
        kiln_node *last = gelu_tail(m, x, out0(a), tail, &nt);
        if (!last) return NULL;
        for (int i = 0; i < nn; i++) kill(m, nodes[i]);
        kill(m, wm);
        kill(m, ad);
        kill(m, k1);
        kill(m, th);
        kill(m, a);
        for (int i = 0; i < nt; i++)
          if (tail[i] != last) kill(m, tail[i]);
        *found = true;
        return make_gelu(m, x, last, "tanh");
      }
    }
  }
  return NULL;
}

/* ---- reduction axes ------------------------------------------------------------------ */

/* The axes a Reduce* node reduces (attribute, or constant input 1 from
 * opset 13 for ReduceSum), with keepdims=1 required. False when unknown. */
static bool reduce_axes(const matcher *m, const kiln_node *n, int64_t *axes, int *count) {
  if (kiln_attr_int(n, "keepdims", 1) != 1 || out0(n) < 0) return false;
  int na = 0;
  const int64_t *a = kiln_attr_ints(n, "axes", &na);
  if (n->n_inputs > 1 && n->inputs[1] >= 0) {
    if (a) return false;
    const kiln_tensor *t = kiln_opt_const(m->g, n->inputs[1]);
    if (!t || t->dtype != KILN_DTYPE_I64 || t->rank != 1 || t->numel > KILN_MAX_RANK) return false;
    na = (int)t->numel;
    a = t->data;
  }
  if (!a || na < 1 || na > KILN_MAX_RANK) return false;
  memcpy(axes, a, (size_t)na * sizeof(int64_t));
  *count = na;
  return true;
}

/* Normalizes axes to negative form (-rank..-1) given the input rank (or -1
 * when unknown: then they must already be negative). Sorted ascending;
 * false on duplicates or out of range. */
static bool negative_axes(int64_t *axes, int n, int rank) {
  for (int i = 0; i < n; i++) {
    if (axes[i] >= 0) {
      if (rank < 0 || axes[i] >= rank) return false;
      axes[i] -= rank;
    } else if (rank >= 0 && axes[i] < -rank) {
      return false;
    }
  }
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && axes[j - 1] > axes[j]; j--) {
      int64_t t = axes[j];
      axes[j] = axes[j - 1];
      axes[j - 1] = t;
    }
  for (int i = 1; i < n; i++)
    if (axes[i] == axes[i - 1]) return false;
  return true;
}

/* ---- LayerNormalization ------------------------------------------------------------------ */

/* Whether c (any value) broadcasts against x's shape without changing it. */
static bool fits_shape(const matcher *m, int c, int x) {
  const kiln_type *tc = &m->g->values[c].type, *tx = &m->g->values[x].type;
  if (!kiln_opt_shape_known(tc) || !kiln_opt_shape_known(tx) || tc->dtype != tx->dtype || tc->rank > tx->rank)
    return false;
  for (int i = 0; i < tc->rank; i++) {
    int64_t d = tc->dims[i], e = tx->dims[tx->rank - tc->rank + i];
    if (d != 1 && d != e) return false;
  }
  return true;
}

static kiln_status_t match_layer_norm(matcher *m, kiln_node *r1, bool *found) {
  if (!kiln_node_is(r1, KILN_OP_ReduceMean) || r1->n_inputs != 1) return NULL;
  int x = r1->inputs[0];
  const kiln_type *tx = &m->g->values[x].type;
  if (x < 0 || !is_float_type(tx)) return NULL;
  int64_t ax1[KILN_MAX_RANK], ax2[KILN_MAX_RANK];
  int n1, n2;
  if (!reduce_axes(m, r1, ax1, &n1) || !negative_axes(ax1, n1, tx->rank)) return NULL;
  for (int i = 0; i < n1; i++) /* a contiguous run of trailing axes */
    if (ax1[i] != -n1 + i) return NULL;
  kiln_node *sub = sole(m, out0(r1));
  if (!sub || !kiln_node_is(sub, KILN_OP_Sub) || !binary(sub) || sub->inputs[0] != x || sub->inputs[1] != out0(r1)) return NULL;
  int d = out0(sub);
  /* d feeds the square and the division, nothing else. */
  if (m->u.pinned[d]) return NULL;
  kiln_node *sq = NULL, *div = NULL;
  for (int k = m->u.start[d]; k < m->u.start[d + 1]; k++) {
    kiln_node *c = &m->g->nodes[m->u.cons[k]];
    if (kiln_node_is(c, KILN_OP_Div) && binary(c) && c->inputs[0] == d && c->inputs[1] != d && (!div || div == c)) div = c;
    else if ((kiln_node_is(c, KILN_OP_Pow) || kiln_node_is(c, KILN_OP_Mul)) && (!sq || sq == c)) sq = c;
    else return NULL;
  }
  if (!sq || !div || m->u.count[d] != m->u.start[d + 1] - m->u.start[d]) return NULL;
  double e;
  if (kiln_node_is(sq, KILN_OP_Pow)) {
    if (!binary(sq) || sq->inputs[0] != d || !neutral_scalar(m, sq->inputs[1], d, &e) || e != 2.0) return NULL;
  } else if (!binary(sq) || sq->inputs[0] != d || sq->inputs[1] != d) {
    return NULL;
  }
  kiln_node *r2 = sole(m, out0(sq));
  if (!r2 || !kiln_node_is(r2, KILN_OP_ReduceMean) || r2->n_inputs != 1 || !reduce_axes(m, r2, ax2, &n2) ||
      !negative_axes(ax2, n2, tx->rank) || n2 != n1 || memcmp(ax1, ax2, (size_t)n1 * sizeof(int64_t)))
    return NULL;
  kiln_node *add = sole(m, out0(r2));
  if (!add || !kiln_node_is(add, KILN_OP_Add)) return NULL;
  int epsv = other_input(add, out0(r2));
  double eps;
  if (epsv < 0 || !neutral_scalar(m, epsv, x, &eps)) return NULL;
  kiln_node *sqrt_n = sole(m, out0(add));
  if (!sqrt_n || !kiln_node_is(sqrt_n, KILN_OP_Sqrt) || sqrt_n->n_inputs != 1 || out0(sqrt_n) < 0) return NULL;
  if (sole(m, out0(sqrt_n)) != div || div->inputs[1] != out0(sqrt_n)) return NULL;
  /* Optional scale and bias: constants or values shaped to broadcast into x. */
  kiln_node *last = div, *mul = NULL;
  int gamma = -1, beta = -1;
  kiln_node *c = sole(m, out0(div));
  if (c && kiln_node_is(c, KILN_OP_Mul)) {
    int o = other_input(c, out0(div));
    if (o >= 0 && o != out0(div) && fits_shape(m, o, x)) {
      mul = c;
      gamma = o;
      last = c;
      c = sole(m, out0(c));
    }
  }
  if (c && kiln_node_is(c, KILN_OP_Add)) {
    int o = other_input(c, out0(last));
    if (o >= 0 && o != out0(last) && fits_shape(m, o, x)) {
      beta = o;
      last = c;
    }
  }
  if (gamma < 0) {
    /* LayerNormalization needs a scale: ones over the normalized axes. */
    kiln_tensor *ones;
    int64_t dims[KILN_MAX_RANK], one = 1;
    bool known = tx->rank >= n1;
    for (int i = 0; known && i < n1; i++) known = (dims[i] = tx->dims[tx->rank - n1 + i]) >= 0;
    KILN_TRY(kiln_tensor_new(tx->dtype, known ? n1 : 1, known ? dims : &one, &ones));
    for (int64_t i = 0; i < ones->numel; i++) kiln_store_f64(ones->data, ones->dtype, i, 1.0);
    KILN_TRY(kiln_opt_new_const(m->g, m->g->values[out0(last)].name, ones, &gamma));
  }
  kill(m, r1);
  kill(m, sub);
  kill(m, sq);
  kill(m, r2);
  kill(m, add);
  kill(m, sqrt_n);
  if (last != div) kill(m, div);
  if (mul && last != mul) kill(m, mul);
  int idx = node_index(m, last);
  int ins[3] = {x, gamma, beta};
  KILN_TRY(replace_last(m, last, "LayerNormalization", "", 17, beta >= 0 ? 3 : 2, ins));
  kiln_node *ln = &m->g->nodes[idx];
  KILN_TRY(kiln_opt_set_attr_int(ln, "axis", -n1));
  KILN_TRY(kiln_opt_set_attr_float(ln, "epsilon", (float)eps));
  *found = true;
  return NULL;
}

/* ---- Softmax ---------------------------------------------------------------------------- */

static kiln_status_t match_softmax(matcher *m, kiln_node *rmax, bool *found) {
  if (!kiln_node_is(rmax, KILN_OP_ReduceMax) || rmax->n_inputs != 1) return NULL;
  int x = rmax->inputs[0];
  const kiln_type *tx = &m->g->values[x].type;
  if (x < 0 || !is_float_type(tx)) return NULL;
  int64_t a1[KILN_MAX_RANK], a2[KILN_MAX_RANK];
  int n1, n2;
  if (!reduce_axes(m, rmax, a1, &n1) || n1 != 1 || !negative_axes(a1, 1, tx->rank)) return NULL;
  kiln_node *sub = sole(m, out0(rmax));
  if (!sub || !kiln_node_is(sub, KILN_OP_Sub) || !binary(sub) || sub->inputs[0] != x || sub->inputs[1] != out0(rmax)) return NULL;
  kiln_node *ex = sole(m, out0(sub));
  if (!ex || !kiln_node_is(ex, KILN_OP_Exp) || ex->n_inputs != 1 || out0(ex) < 0) return NULL;
  int e = out0(ex);
  if (m->u.pinned[e] || m->u.count[e] != 2 || m->u.start[e + 1] - m->u.start[e] != 2) return NULL;
  kiln_node *rsum = NULL, *div = NULL;
  for (int k = m->u.start[e]; k < m->u.start[e + 1]; k++) {
    kiln_node *c = &m->g->nodes[m->u.cons[k]];
    if (kiln_node_is(c, KILN_OP_ReduceSum) && c->inputs[0] == e) rsum = c;
    else if (kiln_node_is(c, KILN_OP_Div) && binary(c) && c->inputs[0] == e) div = c;
  }
  if (!rsum || !div || !reduce_axes(m, rsum, a2, &n2) || n2 != 1 || !negative_axes(a2, 1, tx->rank) || a2[0] != a1[0])
    return NULL;
  if (sole(m, out0(rsum)) != div || div->inputs[1] != out0(rsum)) return NULL;
  kill(m, rmax);
  kill(m, sub);
  kill(m, ex);
  kill(m, rsum);
  int idx = node_index(m, div);
  int ins[1] = {x};
  KILN_TRY(replace_last(m, div, "Softmax", "", 13, 1, ins));
  KILN_TRY(kiln_opt_set_attr_int(&m->g->nodes[idx], "axis", a1[0]));
  *found = true;
  return NULL;
}

/* ---- scaled-dot-product attention ----------------------------------------------------------- */

/* v = x * c, c * x or x / c with a scalar constant c: the node, x and the factor. */
static kiln_node *scaled_by_const(const matcher *m, int v, int *x, double *factor) {
  kiln_node *p = producer(m, v);
  if (!p || !binary(p)) return NULL;
  double c;
  if (kiln_node_is(p, KILN_OP_Div) && neutral_scalar(m, p->inputs[1], p->inputs[0], &c) && c != 0) {
    *x = p->inputs[0];
    *factor = 1.0 / c;
    return p;
  }
  if (kiln_node_is(p, KILN_OP_Mul))
    for (int s = 0; s < 2; s++)
      if (neutral_scalar(m, p->inputs[1 - s], p->inputs[s], &c)) {
        *x = p->inputs[s];
        *factor = c;
        return p;
      }
  return NULL;
}

static bool rank_at_least_2(const matcher *m, int v) {
  const kiln_type *t = &m->g->values[v].type;
  return t->kind == KILN_TYPE_TENSOR && t->rank >= 2 && kiln_dtype_is_float(t->dtype);
}

typedef struct attn_match {
  kiln_node *nodes[8];
  int n_nodes;
  int q, kt, v, mask;
  double scale;
  kiln_node *k_transpose; /* Transpose producing Kᵀ, or NULL */
} attn_match;

/* scores = [scale *] MatMul([scale *] Q, [scale *] Kᵀ) ending in value s. */
static bool attention_scores(const matcher *m, int s, attn_match *a) {
  a->scale = 1.0;
  int mmv = s;
  double f;
  int x;
  kiln_node *sc = scaled_by_const(m, s, &x, &f);
  if (sc) {
    a->nodes[a->n_nodes++] = sc;
    a->scale *= f;
    mmv = x;
  }
  kiln_node *mm = producer(m, mmv);
  if (!mm || !kiln_node_is(mm, KILN_OP_MatMul) || !binary(mm)) return false;
  if (sc && sole(m, mmv) != sc) return false;
  a->nodes[a->n_nodes++] = mm;
  int q = mm->inputs[0], kt = mm->inputs[1];
  kiln_node *qs = scaled_by_const(m, q, &x, &f);
  if (qs && sole(m, q) == mm && rank_at_least_2(m, x)) {
    a->nodes[a->n_nodes++] = qs;
    a->scale *= f;
    q = x;
  }
  kiln_node *ks = scaled_by_const(m, kt, &x, &f);
  if (ks && sole(m, kt) == mm && rank_at_least_2(m, x)) {
    a->nodes[a->n_nodes++] = ks;
    a->scale *= f;
    kt = x;
  }
  if (!rank_at_least_2(m, q) || !rank_at_least_2(m, kt)) return false;
  a->q = q;
  a->kt = kt;
  kiln_node *tr = producer(m, kt);
  a->k_transpose = tr && kiln_node_is(tr, KILN_OP_Transpose) && tr->n_inputs == 1 && tr->inputs[0] >= 0 ? tr : NULL;
  return true;
}

static kiln_status_t match_attention(matcher *m, kiln_node *sm, bool *found) {
  if (!kiln_node_is(sm, KILN_OP_Softmax) || sm->n_inputs != 1 || sm->n_outputs != 1 || out0(sm) < 0) return NULL;
  int si = sm->inputs[0];
  const kiln_type *ts = &m->g->values[si].type;
  if (!kiln_opt_shape_known(ts) || ts->rank < 2 || !kiln_dtype_is_float(ts->dtype)) return NULL;
  int64_t axis = kiln_attr_int(sm, "axis", sm->opset < 13 ? 1 : -1);
  if (axis != -1 && axis != ts->rank - 1) return NULL;
  kiln_node *fin = sole(m, out0(sm));
  if (!fin || !kiln_node_is(fin, KILN_OP_MatMul) || !binary(fin) || fin->inputs[0] != out0(sm) || fin->inputs[1] == out0(sm))
    return NULL;
  int v = fin->inputs[1];
  if (!rank_at_least_2(m, v)) return NULL;
  attn_match a = {.mask = -1};
  a.v = v;
  a.nodes[a.n_nodes++] = sm;
  kiln_node *add = producer(m, si);
  bool ok = false;
  if (add && kiln_node_is(add, KILN_OP_Add) && binary(add) && sole(m, si) == sm) {
    for (int s = 0; s < 2 && !ok; s++) {
      int chain = add->inputs[s], mask = add->inputs[1 - s];
      if (chain == mask || sole(m, chain) != add) continue;
      attn_match t = a;
      t.nodes[t.n_nodes++] = add;
      /* The mask must not broadcast the scores to a bigger shape. */
      if (!kiln_opt_shape_known(&m->g->values[chain].type) ||
          !kiln_shape_equal(m->g->values[chain].type.rank, m->g->values[chain].type.dims, ts->rank, ts->dims))
        continue;
      if (m->g->values[mask].type.dtype != ts->dtype) continue;
      if (attention_scores(m, chain, &t)) {
        t.mask = mask;
        a = t;
        ok = true;
      }
    }
  }
  if (!ok) {
    if (sole(m, si) != sm || !attention_scores(m, si, &a)) return NULL;
  }
  /* The kernel's batch broadcasting and the MatMul chain's agree only for ranks >= 2 (checked) and matching dtypes. */
  kiln_dtype dt = m->g->values[a.q].type.dtype;
  if (m->g->values[a.kt].type.dtype != dt || m->g->values[a.v].type.dtype != dt) return NULL;
  /* Kᵀ = Transpose(K, p)  =>  Kᵀ = swap-last-two(Transpose(K, p')), p' = p with its last two swapped. */
  int k_in = a.kt, transpose_k = 0;
  int64_t pp[KILN_MAX_RANK];
  int np = 0;
  if (a.k_transpose) {
    const kiln_node *tr = a.k_transpose;
    const int64_t *p = kiln_attr_ints(tr, "perm", &np);
    int r = m->g->values[tr->inputs[0]].type.rank;
    if (p && np == r && np >= 2) {
      memcpy(pp, p, (size_t)np * sizeof(int64_t));
    } else if (!p && r >= 2) {
      np = r;
      for (int i = 0; i < r; i++) pp[i] = r - 1 - i;
    } else {
      np = 0;
    }
    if (np >= 2) {
      int64_t t = pp[np - 1];
      pp[np - 1] = pp[np - 2];
      pp[np - 2] = t;
      transpose_k = 1;
      k_in = tr->inputs[0];
      bool ident = true;
      for (int i = 0; i < np; i++) ident &= pp[i] == i;
      if (ident) np = 0; /* K itself */
      if (sole(m, a.kt) != NULL) a.nodes[a.n_nodes++] = a.k_transpose;
    }
  }
  int fin_idx = node_index(m, fin);
  for (int i = 0; i < a.n_nodes; i++) kill(m, a.nodes[i]);
  if (transpose_k && np) {
    /* A new Transpose(K, p') just before the fused node. */
    int kid, tr_idx = node_index(m, a.k_transpose);
    kiln_type kt_type = {0};
    kiln_type_copy(&kt_type, &m->g->values[a.kt].type);
    if (kt_type.rank >= 2) {
      int64_t t = kt_type.dims[kt_type.rank - 1];
      kt_type.dims[kt_type.rank - 1] = kt_type.dims[kt_type.rank - 2];
      kt_type.dims[kt_type.rank - 2] = t;
    }
    kiln_status_t st = kiln_opt_new_value(m->g, m->g->values[k_in].name, &kt_type, &kid);
    kiln_type_clear(&kt_type);
    KILN_TRY(st);
    char *name = kiln_strfmt("%s/k_transpose", fin->name);
    if (!name) return KILN_OOM();
    int tr_opset = m->g->nodes[tr_idx].opset, ins[1] = {k_in}, outs[1] = {kid}, new_idx;
    st = kiln_opt_insert_node(m->g, fin_idx, name, "Transpose", "", tr_opset, 1, ins, 1, outs, &new_idx);
    free(name);
    KILN_TRY(st);
    KILN_TRY(kiln_opt_set_attr_ints(&m->g->nodes[new_idx], "perm", np, pp));
    /* dead[] follows the node order: shift it past the inserted node. */
    memmove(&m->dead[fin_idx + 1], &m->dead[fin_idx], (size_t)(m->g->n_nodes - 1 - fin_idx) * sizeof(bool));
    m->dead[fin_idx] = false;
    fin_idx++;
    k_in = kid;
  }
  int ins[4] = {a.q, k_in, a.v, a.mask};
  KILN_TRY(replace_last(m, &m->g->nodes[fin_idx], "FusedAttention", KILN_FUSED_DOMAIN, 1, a.mask >= 0 ? 4 : 3, ins));
  kiln_node *fa = &m->g->nodes[fin_idx];
  KILN_TRY(kiln_opt_set_attr_float(fa, "scale", (float)a.scale));
  KILN_TRY(kiln_opt_set_attr_int(fa, "transpose_k", transpose_k));
  *found = true;
  return NULL;
}

/* ---- driver ------------------------------------------------------------------------------- */

typedef kiln_status_t (*match_fn)(matcher *m, kiln_node *anchor, bool *found);

/* Tries `fn` at every node; after each replacement the dead nodes go and uses are rebuilt. */
static kiln_status_t run_matcher(kiln_graph *g, match_fn fn) {
  matcher m = {g, {0}, NULL};
  KILN_TRY(kiln_opt_uses_build(g, &m.u));
  /* One spare slot: attention may insert a node. */
  m.dead = calloc((size_t)g->n_nodes + 2, sizeof(bool));
  kiln_status_t st = m.dead ? NULL : KILN_OOM();
  for (int i = 0; i < g->n_nodes && !st;) {
    bool found = false;
    kiln_node *anchor = &g->nodes[i];
    if (anchor->op) st = fn(&m, anchor, &found);
    if (st || !found) {
      i++;
      continue;
    }
    /* Resume at the first node that moved. */
    int first = g->n_nodes;
    for (int k = 0; k < g->n_nodes; k++)
      if (m.dead[k]) {
        first = k;
        break;
      }
    st = kiln_opt_remove_nodes(g, m.dead);
    kiln_opt_uses_free(&m.u);
    if (!st) st = kiln_opt_uses_build(g, &m.u);
    free(m.dead);
    m.dead = calloc((size_t)g->n_nodes + 2, sizeof(bool));
    if (!m.dead && !st) st = KILN_OOM();
    i = first < i ? first : i;
  }
  free(m.dead);
  kiln_opt_uses_free(&m.u);
  return st;
}

static kiln_status_t run_patterns(kiln_graph *g, bool attention) {
  if (!kiln_opt_shapes_trusted(g)) return NULL;
  /* The fused ops' family may be absent from the registry: then there is nothing to create. */
  if (!kiln_op_find(KILN_FUSED_DOMAIN, "Gelu") || !kiln_op_find(KILN_FUSED_DOMAIN, "FusedAttention")) return NULL;
  static const match_fn matchers[] = {match_gelu_erf, match_gelu_tanh, match_layer_norm, match_softmax,
                                      match_attention};
  size_t n = KILN_ARRAY_SIZE(matchers) - (attention ? 0 : 1); /* match_attention is last */
  for (size_t k = 0; k < n; k++) KILN_TRY(run_matcher(g, matchers[k]));
  return NULL;
}

kiln_status_t kiln_pass_patterns(kiln_graph *g) { return run_patterns(g, true); }
kiln_status_t kiln_pass_patterns_unfused_attention(kiln_graph *g) { return run_patterns(g, false); }
