/* Gradient rule (ops/gradient.h) of Resize and Upsample: the resampling is
 * separable, each resized axis a weighted gather of input coordinates (the
 * op's own tables, kiln_resample_tables_build, which the compiled
 * kiln.Resample uses too), so its transpose is a matrix per axis:
 * M[o][index] += weight, and the input's gradient is the output's gradient
 * times M along each resized axis (a MatMul over the axis moved last). An
 * output that samples outside the input (tf_crop_and_resize's
 * extrapolation) is a constant: nothing flows back from it. Only constant
 * scales or sizes: the tables are built once, at the pass. */
#include "ops/gradient.h"
#include "passes/passes_opt.h"

kiln_status_t kiln_grad_resize(kiln_gradient_ctx *c) {
  int d = c->dy[0], x = c->x[0];
  if (d < 0 || !c->want[0]) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank;
  kiln_dtype dt = tx->dtype;
  int64_t xdims[KILN_MAX_RANK];
  memcpy(xdims, tx->dims, sizeof(int64_t) * (size_t)r);
  const kiln_tensor *consts[4] = {0};
  for (int i = 1; i < c->n_inputs && i < 4; i++) consts[i] = c->x[i] >= 0 ? kiln_grad_known(c, c->x[i]) : NULL;
  kiln_resample_tables tab;
  kiln_status_t st = kiln_resample_tables_build(n, n->opset, kiln_node_is(n, KILN_OP_Upsample), r, xdims,
                                                c->n_inputs < 4 ? c->n_inputs : 4, consts, &tab);
  if (st)
    return kiln_status_annotate(st, "%s's gradient needs constant scales or sizes", n->op_type);
  int g = d;
  for (int k = 0; k < tab.n_axes && !c->status && !st; k++) {
    const kiln_resample_axis *ax = &tab.axes[k];
    int64_t in = xdims[ax->axis], out = ax->out, mdims[2] = {out, in};
    kiln_tensor *m;
    st = kiln_tensor_new(dt, 2, mdims, &m);
    if (st) break;
    memset(m->data, 0, (size_t)m->numel * kiln_dtype_size(dt));
    for (int64_t o = 0; o < out; o++)
      for (int t = 0; t < ax->taps; t++) {
        int32_t i = ax->index[o * ax->taps + t];
        if (i < 0) continue; /* extrapolated: a constant */
        int64_t at = o * in + i;
        kiln_store_f64(m->data, dt, at, kiln_load_f64(m->data, dt, at) + ax->weight[o * ax->taps + t]);
      }
    int mid = -1;
    st = kiln_opt_new_const(c->g, "grad/resample", m, &mid);
    if (st) break;
    /* the axis last, times M ([out, in]), back in place */
    int64_t perm[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[ax->axis] = r - 1;
    perm[r - 1] = ax->axis;
    kiln_grad_attr at = KILN_GRAD_INTS("perm", r, perm);
    bool last = ax->axis == r - 1;
    int moved = last ? g : kiln_grad_op(c, "Transpose", 1, &g, 1, &at);
    int prod = kiln_grad_op2(c, "MatMul", moved, mid);
    g = last ? prod : kiln_grad_op(c, "Transpose", 1, &prod, 1, &at);
  }
  kiln_resample_tables_free(&tab);
  if (st) return st;
  c->dx[0] = g;
  return c->status;
}
