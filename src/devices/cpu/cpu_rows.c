/* cpu_rows.c — which kernels the precompiled tier runs on a row routine
 * (interp.h's row kernels) instead of interpreting their expression.
 *
 * A kernel qualifies when its group is one node of an op class with such
 * a routine, over contiguous f32 rows: Softmax and LogSoftmax along the
 * last axis (or, before opset 13, everything from `axis` on: rows all
 * the same), LayerNormalization with a scale (and bias) of the
 * normalized shape and only its Y output used, ArgMax and ArgMin of f32
 * along an axis with nothing but 1s after it (a classifier's or a
 * decoder's pick: three reductions as an expression). Anything else (a fused
 * epilogue, other dtypes, a broadcast scale) stays on the interpreter,
 * which runs every expression. The JIT compiles every kernel as before.
 */
#include "devices/cpu/cpu_internal.h"

#include "ops/op.h"

/* The kernel buffer (index into the step's args) bound to value v, -1. */
static int buf_of(const kiln_plan_step *step, int v) {
  for (int i = 0; i < step->n_args; i++)
    if (step->args[i] == v) return i;
  return -1;
}

static bool f32_tensor(const kiln_graph *g, int v) {
  const kiln_type *t = &g->values[v].type;
  return t->kind == KILN_TYPE_TENSOR && t->dtype == KILN_DTYPE_F32 && t->rank >= 1;
}

/* Scale or bias value v fits rows normalized over x's dims [axis, rank):
 * its dims, right-aligned to x's, are 1 before axis and x's from it on,
 * every one of those present. */
static bool row_shaped(const kiln_graph *g, int v, const kiln_type *xt, int axis) {
  if (v < 0 || !f32_tensor(g, v)) return false;
  const kiln_type *t = &g->values[v].type;
  if (t->rank > xt->rank || t->rank < xt->rank - axis) return false; /* (fewer dims broadcast within a row) */
  for (int d = 0; d < t->rank; d++) {
    int xd = xt->rank - t->rank + d;
    if (t->dims[d] != (xd < axis ? 1 : xt->dims[xd])) return false;
  }
  return true;
}

static bool arg_rows_of(const kiln_graph *g, const kiln_plan_step *step, kiln_op_id op, kiln_interp_rows *out) {
  const kiln_node *n = step->node;
  int x = n->inputs[0];
  const kiln_type *yt = &g->values[step->out_value].type;
  if (!f32_tensor(g, x) || yt->kind != KILN_TYPE_TENSOR || yt->dtype != KILN_DTYPE_I64) return false;
  const kiln_type *xt = &g->values[x].type;
  int rank = xt->rank, axis = (int)kiln_attr_int(n, "axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  for (int d = 0; d < rank; d++)
    if (xt->dims[d] < 0 || (d > axis && xt->dims[d] != 1)) return false;
  kiln_interp_rows r = {.kind = op == KILN_OP_ArgMax ? KILN_INTERP_ROWS_ARGMAX : KILN_INTERP_ROWS_ARGMIN,
                        .rows = kiln_shape_numel(axis, xt->dims), .n = xt->dims[axis],
                        .out_buf = buf_of(step, step->out_value), .x_buf = buf_of(step, x), .scale_buf = -1,
                        .bias_buf = -1, .last = kiln_attr_int(n, "select_last_index", 0) != 0};
  if (r.rows < 1 || r.n < 1 || r.out_buf < 0 || r.x_buf < 0) return false;
  *out = r;
  return true;
}

bool kiln_cpu_rows_of(const kiln_graph *g, const kiln_plan_step *step, kiln_interp_rows *out) {
  const kiln_node *n = step->node;
  if (step->kind != KILN_STEP_KERNEL || step->n_fused != 1 || !n || n->n_inputs < 1 || n->inputs[0] < 0 ||
      n->n_outputs < 1 || n->outputs[0] != step->out_value)
    return false;
  kiln_op_id op = kiln_node_op_id(n);
  if (op == KILN_OP_ArgMax || op == KILN_OP_ArgMin) return arg_rows_of(g, step, op, out);
  if (op != KILN_OP_Softmax && op != KILN_OP_LogSoftmax && op != KILN_OP_LayerNormalization) return false;
  int x = n->inputs[0];
  if (!f32_tensor(g, x) || !f32_tensor(g, step->out_value)) return false;
  const kiln_type *xt = &g->values[x].type;
  int rank = xt->rank, axis;
  if (op == KILN_OP_LayerNormalization) {
    axis = (int)kiln_attr_int(n, "axis", -1);
    for (int i = 1; i < n->n_outputs; i++)
      if (n->outputs[i] >= 0) return false; /* Mean and InvStdDev: the interpreter's */
  } else if (n->opset < 13) {
    axis = (int)kiln_attr_int(n, "axis", 1);
  } else {
    axis = (int)kiln_attr_int(n, "axis", -1);
    if (axis != -1 && axis != rank - 1) return false;
  }
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  for (int d = 0; d < rank; d++)
    if (xt->dims[d] < 0) return false;
  kiln_interp_rows r = {.rows = kiln_shape_numel(axis, xt->dims), .n = kiln_shape_numel(rank - axis, xt->dims + axis),
                        .out_buf = buf_of(step, step->out_value), .x_buf = buf_of(step, x), .scale_buf = -1,
                        .bias_buf = -1};
  if (r.rows < 1 || r.n < 1 || r.out_buf < 0 || r.x_buf < 0) return false;
  if (op == KILN_OP_LayerNormalization) {
    int scale = n->n_inputs > 1 ? n->inputs[1] : -1, bias = n->n_inputs > 2 ? n->inputs[2] : -1;
    if (!row_shaped(g, scale, xt, axis) || (bias >= 0 && !row_shaped(g, bias, xt, axis))) return false;
    r.kind = KILN_INTERP_ROWS_LAYERNORM;
    r.scale_buf = buf_of(step, scale);
    r.bias_buf = bias >= 0 ? buf_of(step, bias) : -1;
    if (r.scale_buf < 0 || (bias >= 0 && r.bias_buf < 0)) return false;
    r.eps = kiln_attr_float(n, "epsilon", 1e-5f);
  } else {
    r.kind = op == KILN_OP_Softmax ? KILN_INTERP_ROWS_SOFTMAX : KILN_INTERP_ROWS_LOG_SOFTMAX;
  }
  *out = r;
  return true;
}
