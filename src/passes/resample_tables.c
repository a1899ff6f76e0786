/* resample-tables: Resize and Upsample whose scales or sizes (and roi) are
 * constants become kiln.Resample (ops/fused.c) over per-axis gather tables
 * (input indices and weights per output coordinate, computed once by the
 * op's own rules: ops/misc_resize.c), so a compiling device runs them as a
 * kernel of loads and multiply-adds. Only f32 inputs with known shapes, at
 * most 3 resampled axes (a kernel reads at most 8 operands); an axis that
 * the resize leaves as it is gets no table, and a Resize that changes no
 * axis becomes Identity. What does not qualify stays for ref, which also
 * reports what is wrong with it. */
#include "passes/passes_opt.h"

#include <stdio.h>

#define RESAMPLE_MAX_AXES 3

static kiln_status_t table_const(kiln_graph *g, const char *base, kiln_dtype dt, int64_t out, int taps,
                                 const void *data, int *id) {
  int64_t dims[2] = {out, taps};
  kiln_tensor *t;
  KILN_TRY(kiln_tensor_new(dt, 2, dims, &t));
  if (t->numel) memcpy(t->data, data, (size_t)t->numel * kiln_dtype_size(dt));
  return kiln_opt_new_const(g, base, t, id);
}

static kiln_status_t rewrite(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  bool upsample = kiln_node_is(n, KILN_OP_Upsample);
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs != 1 || n->outputs[0] < 0 || n->n_inputs > 4) return NULL;
  const kiln_type *xt = &g->values[n->inputs[0]].type, *yt = &g->values[n->outputs[0]].type;
  if (xt->kind != KILN_TYPE_TENSOR || xt->dtype != KILN_DTYPE_F32 || !kiln_opt_shape_known(xt)) return NULL;
  const kiln_tensor *consts[4] = {0};
  for (int i = 1; i < n->n_inputs; i++) consts[i] = n->inputs[i] >= 0 ? kiln_opt_const(g, n->inputs[i]) : NULL;
  kiln_resample_tables tab;
  kiln_status_t st = kiln_resample_tables_build(n, n->opset, upsample, xt->rank, xt->dims, n->n_inputs, consts, &tab);
  if (st) { /* not constant, or wrong: ref runs it and reports */
    kiln_status_free(st);
    return NULL;
  }
  /* The output the tables give must be the declared one. */
  bool ok = tab.n_axes <= RESAMPLE_MAX_AXES && yt->rank == xt->rank && (!yt->dtype || yt->dtype == xt->dtype);
  for (int d = 0; ok && d < xt->rank; d++) {
    int64_t want = xt->dims[d];
    for (int k = 0; k < tab.n_axes; k++)
      if (tab.axes[k].axis == d) want = tab.axes[k].out;
    ok = yt->dims[d] < 0 || yt->dims[d] == want;
  }
  int ins[1 + 2 * RESAMPLE_MAX_AXES], n_in = 1;
  int64_t axes[RESAMPLE_MAX_AXES];
  ins[0] = n->inputs[0];
  char base[256];
  snprintf(base, sizeof base, "%s_table", n->name);
  for (int k = 0; ok && !st && k < tab.n_axes; k++) {
    const kiln_resample_axis *a = &tab.axes[k];
    axes[k] = a->axis;
    st = table_const(g, base, KILN_DTYPE_I32, a->out, a->taps, a->index, &ins[n_in++]);
    if (!st && !tab.nearest) st = table_const(g, base, KILN_DTYPE_F32, a->out, a->taps, a->weight, &ins[n_in++]);
  }
  int y = g->nodes[ni].outputs[0];
  if (ok && !st && tab.n_axes == 0) {
    st = kiln_opt_rewrite_node(g, ni, "Identity", "", 16, 1, ins, 1, &y);
  } else if (ok && !st) {
    st = kiln_opt_rewrite_node(g, ni, "Resample", KILN_FUSED_DOMAIN, 1, n_in, ins, 1, &y);
    kiln_node *r = &g->nodes[ni];
    if (!st) st = kiln_opt_set_attr_ints(r, "axes", tab.n_axes, axes);
    if (!st && tab.nearest) st = kiln_opt_set_attr_int(r, "nearest", 1);
    if (!st && tab.extrapolate) st = kiln_opt_set_attr_float(r, "extrapolation_value", (float)tab.extrapolation_value);
  }
  kiln_resample_tables_free(&tab);
  return st;
}

static kiln_status_t resample_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, resample_graph));
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const kiln_node *n = &g->nodes[ni];
    if (kiln_node_is(n, KILN_OP_Resize) || kiln_node_is(n, KILN_OP_Upsample)) KILN_TRY(rewrite(g, ni));
  }
  return NULL;
}

kiln_status_t kiln_pass_resample_tables(kiln_graph *g) { return resample_graph(g); }
