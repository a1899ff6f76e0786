/* FLOP rules the op tables name (kiln_op_def.flops): 2 per multiply-add
 * of a contraction, as `kiln info` and profilers report them. An op with
 * no rule counts one per output element (passes/flops.c). Unknown shapes
 * count 0. */
#include "ops/op.h"

static const kiln_type *input_type(const kiln_graph *g, const kiln_node *n, int i) {
  return i < n->n_inputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]].type : NULL;
}

static int64_t known_numel(const kiln_type *t) {
  if (!t || t->kind != KILN_TYPE_TENSOR || t->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    n *= t->dims[i];
  }
  return n;
}

static int64_t output_numel(const kiln_graph *g, const kiln_node *n) {
  return n->n_outputs > 0 && n->outputs[0] >= 0 ? known_numel(&g->values[n->outputs[0]].type) : -1;
}

/* Each output element sums over one output channel's weights (C/group x kernel). */
static int64_t conv_like_flops(const kiln_graph *g, const kiln_node *n, int weight_input) {
  const kiln_type *w = input_type(g, n, weight_input);
  int64_t out_n = output_numel(g, n), k = known_numel(w);
  if (out_n < 0 || k < 0 || w->rank < 2 || w->dims[0] <= 0) return 0;
  return 2 * out_n * (k / w->dims[0]);
}

int64_t kiln_flops_conv(const kiln_graph *g, const kiln_node *n) { return conv_like_flops(g, n, 1); }

/* QLinearConv: x, x_scale, x_zero_point, w, ... */
int64_t kiln_flops_qlinear_conv(const kiln_graph *g, const kiln_node *n) { return conv_like_flops(g, n, 3); }

/* Every input element scatters into one output channel's weights. */
int64_t kiln_flops_conv_transpose(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *w = input_type(g, n, 1);
  int64_t in_n = known_numel(input_type(g, n, 0)), k = known_numel(w);
  if (in_n <= 0 || k <= 0 || w->dims[0] <= 0) return 0;
  return 2 * in_n * (k / w->dims[0]);
}

/* MatMul, Gemm, MatMulInteger, QLinearMatMul: input 0 is A, whose last
 * dim is the reduced one (Gemm with transA: its first). */
int64_t kiln_flops_matmul(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *a = input_type(g, n, 0);
  int64_t out_n = output_numel(g, n);
  if (out_n < 0 || !a || a->rank < 1) return 0;
  int64_t k = a->dims[a->rank - 1];
  if (n->op && n->op->id == KILN_OP_Gemm && kiln_attr_int(n, "transA", 0) && a->rank == 2) k = a->dims[0];
  return k > 0 ? 2 * out_n * k : 0;
}

/* kiln.FusedAttention(Q, K, V[, mask]): per query row, scores q.k over the
 * keys (2d each), softmax (~5 per score: scale, max, exp, sum, divide),
 * then the weighted sum of V (2dv each). */
int64_t kiln_flops_attention(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *q = input_type(g, n, 0), *k = input_type(g, n, 1);
  int64_t out_n = output_numel(g, n);
  if (out_n < 0 || !q || !k || q->rank < 2 || k->rank < 2) return 0;
  const kiln_type *out = &g->values[n->outputs[0]].type;
  if (out->rank < 1 || out->dims[out->rank - 1] <= 0) return 0;
  int64_t d = q->dims[q->rank - 1], dv = out->dims[out->rank - 1];
  int64_t keys = kiln_attr_int(n, "transpose_k", 1) ? k->dims[k->rank - 2] : k->dims[k->rank - 1];
  return d >= 0 && keys >= 0 ? out_n / dv * keys * (2 * d + 2 * dv + 5) : 0;
}
