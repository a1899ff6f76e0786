/* Estimated floating-point operations per node, from inferred shapes.
 * Contractions count 2 per multiply-add; everything else one per output
 * element (a rough but conventional figure, as `kiln info` and profilers
 * report it). Unknown shapes count 0. */
#include "passes/passes.h"

static int64_t type_numel(const kiln_type *t) {
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    n *= t->dims[i];
  }
  return n;
}

int64_t kiln_node_flops(const kiln_graph *g, const kiln_node *n) {
  if (n->n_outputs < 1 || n->outputs[0] < 0) return 0;
  const kiln_type *out = &g->values[n->outputs[0]].type;
  int64_t out_n = type_numel(out);
  if (out_n < 0) return 0;
  const kiln_type *in0 = n->n_inputs > 0 && n->inputs[0] >= 0 ? &g->values[n->inputs[0]].type : NULL;
  const kiln_type *in1 = n->n_inputs > 1 && n->inputs[1] >= 0 ? &g->values[n->inputs[1]].type : NULL;
  const char *op = n->op_type;
  if ((!strcmp(op, "Conv") || !strcmp(op, "ConvInteger") || !strcmp(op, "QLinearConv")) && in1 && in1->rank >= 2) {
    const kiln_type *w = !strcmp(op, "QLinearConv") && n->n_inputs > 3 && n->inputs[3] >= 0 ? &g->values[n->inputs[3]].type : in1;
    int64_t k = type_numel(w);
    if (k < 0 || w->dims[0] <= 0) return 0;
    return 2 * out_n * (k / w->dims[0]);
  }
  if (!strcmp(op, "ConvTranspose") && in0 && in1 && type_numel(in0) > 0 && type_numel(in1) > 0 && in1->dims[0] > 0)
    return 2 * type_numel(in0) * (type_numel(in1) / in1->dims[0]);
  if ((!strcmp(op, "MatMul") || !strcmp(op, "Gemm") || !strcmp(op, "MatMulInteger")) && in0 && in0->rank >= 1 &&
      in0->dims[in0->rank - 1] > 0) {
    int64_t k = in0->dims[in0->rank - 1];
    if (!strcmp(op, "Gemm") && kiln_attr_int(n, "transA", 0) && in0->rank == 2) k = in0->dims[0];
    return 2 * out_n * (k > 0 ? k : 0);
  }
  if (!strcmp(op, "FusedAttention") && in0 && in1 && in0->rank >= 2 && in1->rank >= 2 && out->rank >= 1 &&
      out->dims[out->rank - 1] > 0) {
    /* Per query row: scores q.k over n keys (2d each), softmax (~5 per
     * score: scale, max, exp, sum, divide), then the weighted sum of V (2dv each). */
    int64_t d = in0->dims[in0->rank - 1], dv = out->dims[out->rank - 1];
    int64_t keys = kiln_attr_int(n, "transpose_k", 1) ? in1->dims[in1->rank - 2] : in1->dims[in1->rank - 1];
    if (d >= 0 && keys >= 0) return out_n / dv * keys * (2 * d + 2 * dv + 5);
  }
  return out_n;
}
