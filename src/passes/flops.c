/* Estimated floating-point operations per node, from inferred shapes: the
 * op's own rule (kiln_op_def.flops: contractions count 2 per multiply-add)
 * or one per output element (a rough but conventional figure, as `kiln
 * info` and profilers report it). Unknown shapes count 0. */
#include "passes/passes.h"

int64_t kiln_node_flops(const kiln_graph *g, const kiln_node *n) {
  if (n->n_outputs < 1 || n->outputs[0] < 0) return 0;
  const kiln_type *out = &g->values[n->outputs[0]].type;
  if (out->kind != KILN_TYPE_TENSOR || out->rank < 0) return 0;
  int64_t out_n = 1;
  for (int i = 0; i < out->rank; i++) {
    if (out->dims[i] < 0) return 0;
    if (!kiln_mul_i64(out_n, out->dims[i], &out_n)) return 0; /* more elements than int64: no tensor has it */
  }
  return n->op && n->op->flops ? n->op->flops(g, n) : out_n;
}
