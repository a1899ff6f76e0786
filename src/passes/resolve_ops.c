#include "passes/passes.h"

kiln_status_t kiln_pass_resolve_ops(kiln_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    n->op = kiln_op_find(n->domain, n->op_type);
    if (n->op) {
      const kiln_op_def *op = n->op;
      /* Trailing absent inputs/outputs don't count against the schema. */
      int ni = n->n_inputs, no = n->n_outputs;
      while (ni > 0 && n->inputs[ni - 1] < 0) ni--;
      while (no > 0 && n->outputs[no - 1] < 0) no--;
      if (ni < op->min_inputs || (op->max_inputs >= 0 && ni > op->max_inputs))
        return kiln_error(KILN_INVALID_MODEL, "node '%s' (%s): has %d inputs, the op takes %d to %d", n->name,
                          n->op_type, ni, op->min_inputs, op->max_inputs);
      if (no < op->min_outputs || (op->max_outputs >= 0 && no > op->max_outputs))
        return kiln_error(KILN_INVALID_MODEL, "node '%s' (%s): has %d outputs, the op gives %d to %d", n->name,
                          n->op_type, no, op->min_outputs, op->max_outputs);
    }
    for (int a = 0; a < n->n_attrs; a++) {
      kiln_attr *at = &n->attrs[a];
      if (at->g)
        KILN_RETURN_IF_ERROR(kiln_pass_resolve_ops(at->g), "node '%s' (%s) attribute '%s'", n->name, n->op_type,
                             at->name);
      for (int k = 0; at->graphs && k < at->n; k++)
        KILN_RETURN_IF_ERROR(kiln_pass_resolve_ops(at->graphs[k]), "node '%s' (%s) attribute '%s'", n->name,
                             n->op_type, at->name);
    }
  }
  return NULL;
}
