/* qdq-integer: a QDQ convolution as an integer one, before folding turns
 * its weights into floats.
 *
 *   Conv(DequantizeLinear(xq, sx, zx), DequantizeLinear(wq, sw, zw), bias?)
 *   -> Cast<f32>(ConvInteger(xq, wq, zx, zw)) * (sx * sw)[co, 1...] (+ bias[co, 1...])
 *
 * Exact in the integer sum; the float result differs from the float
 * convolution of the dequantized values by that sum's rounding only. x's
 * scale and zero point must be constant scalars, w's constant (scalar or
 * per output channel, axis 0) and wq a constant 8-bit tensor. The devices
 * then run ConvInteger on integer micro-kernels (the cpu: kiln_igemm) with
 * the scale, bias and what follows (Relu, the next QuantizeLinear) as its
 * epilogue.
 *
 * For a device that asks for it (KILN_DEVICE_FEATURE_QDQ_INTEGER: the cpu
 * where it has VNNI, whose vpdpbusd quads beat its f32 convolutions; on
 * CPUs without, kiln_igemm's int16 pair products run no faster than them)
 * or with KILN_QDQ_INTEGER=1; =0 turns it off (kiln_plan_optimize_for). */
#include "passes/passes_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

static bool is_8bit(kiln_dtype d) { return d == KILN_DTYPE_U8 || d == KILN_DTYPE_I8; }

/* The DequantizeLinear node producing v, or -1. */
static int dq_producer(const kiln_graph *g, int v) {
  int p = v >= 0 ? g->values[v].producer : -1;
  return p >= 0 && kiln_node_is(&g->nodes[p], KILN_OP_DequantizeLinear) ? p : -1;
}

/* Per-channel constants of length 1 or co: element c. */
static bool per_channel(const kiln_tensor *t, int64_t co) { return t->numel == 1 || (t->rank == 1 && t->numel == co); }
static double channel(const kiln_tensor *t, int64_t c) { return kiln_load_f64(t->data, t->dtype, t->numel == 1 ? 0 : c); }

static kiln_status_t rewrite_conv(kiln_graph *g, int ni, bool *changed) {
  const kiln_node *n = &g->nodes[ni];
  if (n->n_inputs < 2 || n->n_outputs != 1) return NULL;
  int dx = dq_producer(g, n->inputs[0]), dw = dq_producer(g, n->inputs[1]);
  if (dx < 0 || dw < 0) return NULL;
  const kiln_node *nx = &g->nodes[dx], *nw = &g->nodes[dw];
  if (nx->n_inputs < 3 || nw->n_inputs < 2) return NULL;
  int xq = nx->inputs[0], wq = nw->inputs[0], zx = nx->inputs[2], zw = nw->n_inputs > 2 ? nw->inputs[2] : -1;
  const kiln_tensor *sx = kiln_opt_const(g, nx->inputs[1]), *tzx = kiln_opt_const(g, zx);
  const kiln_tensor *sw = kiln_opt_const(g, nw->inputs[1]), *tw = kiln_opt_const(g, wq);
  const kiln_tensor *tzw = zw >= 0 ? kiln_opt_const(g, zw) : NULL;
  const kiln_type *xt = &g->values[xq].type, *yt = &g->values[n->outputs[0]].type;
  if (!sx || !tzx || !sw || !tw || (zw >= 0 && !tzw) || sx->numel != 1 || tzx->numel != 1) return NULL;
  if (xt->kind != KILN_TYPE_TENSOR || !is_8bit(xt->dtype) || !is_8bit(tw->dtype) || tzx->dtype != xt->dtype) return NULL;
  if (tzw && tzw->dtype != tw->dtype) return NULL;
  if (sx->dtype != KILN_DTYPE_F32 || sw->dtype != KILN_DTYPE_F32 || tw->rank < 3) return NULL;
  if (yt->kind != KILN_TYPE_TENSOR || yt->dtype != KILN_DTYPE_F32 || yt->rank != tw->rank) return NULL;
  int64_t co = tw->dims[0];
  if (!per_channel(sw, co) || (tzw && !per_channel(tzw, co))) return NULL;
  if ((sw->numel > 1 || (tzw && tzw->numel > 1)) && kiln_attr_int(nw, "axis", 1) != 0) return NULL;
  /* g->values may move from here on: keep y's shape. */
  int rank = tw->rank;
  int64_t ydims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) ydims[d] = yt->dims[d];
  /* The scale product per output channel, shaped [co, 1...] to broadcast over NC... */
  int64_t sdims[KILN_MAX_RANK];
  sdims[0] = co;
  for (int d = 1; d < rank - 1; d++) sdims[d] = 1;
  kiln_tensor *scale;
  KILN_TRY(kiln_tensor_new(KILN_DTYPE_F32, rank - 1, sdims, &scale));
  double xs = kiln_load_f64(sx->data, sx->dtype, 0);
  for (int64_t c = 0; c < co; c++) ((float *)scale->data)[c] = (float)(xs * channel(sw, c));
  char base[200];
  snprintf(base, sizeof base, "%s", n->name);
  int y = n->outputs[0], bias = n->n_inputs > 2 ? n->inputs[2] : -1, scale_id, acc, f, prod;
  KILN_TRY(kiln_opt_new_const(g, base, scale, &scale_id));
  kiln_type it = {0}, ft = {0};
  kiln_type_init_tensor(&it, KILN_DTYPE_I32, rank, ydims);
  kiln_type_init_tensor(&ft, KILN_DTYPE_F32, rank, ydims);
  kiln_status_t st = kiln_opt_new_value(g, base, &it, &acc);
  if (!st) st = kiln_opt_new_value(g, base, &ft, &f);
  if (!st) st = kiln_opt_new_value(g, base, &ft, &prod);
  kiln_type_clear(&it);
  kiln_type_clear(&ft);
  if (st) return st;
  n = &g->nodes[ni];
  /* Keep the Conv's attributes before the node array moves. */
  int nk = 0, ns = 0, np = 0, nd = 0;
  const int64_t *k = kiln_attr_ints(n, "kernel_shape", &nk), *s = kiln_attr_ints(n, "strides", &ns);
  const int64_t *p = kiln_attr_ints(n, "pads", &np), *dl = kiln_attr_ints(n, "dilations", &nd);
  int64_t attrs[4][2 * KILN_MAX_RANK];
  if (nk > 2 * KILN_MAX_RANK || ns > 2 * KILN_MAX_RANK || np > 2 * KILN_MAX_RANK || nd > 2 * KILN_MAX_RANK) return NULL;
  if (k) memcpy(attrs[0], k, (size_t)nk * sizeof *k);
  if (s) memcpy(attrs[1], s, (size_t)ns * sizeof *s);
  if (p) memcpy(attrs[2], p, (size_t)np * sizeof *p);
  if (dl) memcpy(attrs[3], dl, (size_t)nd * sizeof *dl);
  int64_t group = kiln_attr_int(n, "group", 1);
  char auto_pad[32];
  snprintf(auto_pad, sizeof auto_pad, "%s", kiln_attr_string(n, "auto_pad", "NOTSET"));
  char name[256];
  int at;
  /* The Conv node becomes the last step (it writes y); the others go before it. */
  snprintf(name, sizeof name, "%s_integer", base);
  int ins[4] = {xq, wq, zx, zw};
  KILN_TRY(kiln_opt_insert_node(g, ni, name, "ConvInteger", "", 10, zw >= 0 ? 4 : 3, ins, 1, &acc, &at));
  kiln_node *ci = &g->nodes[at];
  if (k) KILN_TRY(kiln_opt_set_attr_ints(ci, "kernel_shape", nk, attrs[0]));
  if (s) KILN_TRY(kiln_opt_set_attr_ints(ci, "strides", ns, attrs[1]));
  if (p) KILN_TRY(kiln_opt_set_attr_ints(ci, "pads", np, attrs[2]));
  if (dl) KILN_TRY(kiln_opt_set_attr_ints(ci, "dilations", nd, attrs[3]));
  KILN_TRY(kiln_opt_set_attr_int(ci, "group", group));
  KILN_TRY(kiln_opt_set_attr_string(ci, "auto_pad", auto_pad));
  snprintf(name, sizeof name, "%s_float", base);
  KILN_TRY(kiln_opt_insert_node(g, at + 1, name, "Cast", "", 13, 1, &acc, 1, &f, &at));
  KILN_TRY(kiln_opt_set_attr_int(&g->nodes[at], "to", KILN_DTYPE_F32));
  int conv = at + 1; /* the Conv moved past the two new nodes */
  if (bias < 0) {
    KILN_TRY(kiln_opt_rewrite_node(g, conv, "Mul", "", 14, 2, (int[]){f, scale_id}, 1, &y));
  } else {
    /* bias [co] as [co, 1...]: a Reshape by a constant shape (folded when bias is constant). */
    kiln_tensor *shape;
    int64_t r = rank - 1;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &r, &shape));
    for (int d = 0; d < rank - 1; d++) ((int64_t *)shape->data)[d] = sdims[d];
    int sid, b2;
    KILN_TRY(kiln_opt_new_const(g, base, shape, &sid));
    kiln_type bt = {0};
    kiln_type_init_tensor(&bt, KILN_DTYPE_F32, rank - 1, sdims);
    st = kiln_opt_new_value(g, base, &bt, &b2);
    kiln_type_clear(&bt);
    if (st) return st;
    snprintf(name, sizeof name, "%s_scale", base);
    KILN_TRY(kiln_opt_insert_node(g, conv, name, "Mul", "", 14, 2, (int[]){f, scale_id}, 1, &prod, &at));
    snprintf(name, sizeof name, "%s_bias_shape", base);
    KILN_TRY(kiln_opt_insert_node(g, at + 1, name, "Reshape", "", 14, 2, (int[]){bias, sid}, 1, &b2, &at));
    KILN_TRY(kiln_opt_rewrite_node(g, at + 1, "Add", "", 14, 2, (int[]){prod, b2}, 1, &y));
  }
  *changed = true;
  return NULL;
}

static kiln_status_t qdq_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, qdq_graph));
  if (!kiln_opt_shapes_trusted(g)) return NULL;
  bool changed = false;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) /* from the end: insertions move no node still to visit */
    if (kiln_node_is(&g->nodes[ni], KILN_OP_Conv)) KILN_TRY(rewrite_conv(g, ni, &changed));
  (void)changed;
  return NULL;
}

kiln_status_t kiln_pass_qdq_integer(kiln_graph *g) { return qdq_graph(g); }
