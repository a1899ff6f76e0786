#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>

kiln_status_t kiln_graph_verify(const kiln_graph *g) {
  char *defined = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
  if (!defined) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int i = 0; i < g->n_values; i++) {
    const kiln_value_def *v = &g->values[i];
    if (v->constant || v->is_graph_input || v->outer_name) defined[i] = 1;
  }
  for (int i = 0; i < g->n_inputs && !st; i++)
    if (g->inputs[i] < 0 || g->inputs[i] >= g->n_values)
      st = kiln_error(KILN_INTERNAL, "graph '%s': input %d has bad id", g->name, i);
  for (int ni = 0; ni < g->n_nodes && !st; ni++) {
    const kiln_node *n = &g->nodes[ni];
    for (int i = 0; i < n->n_inputs && !st; i++) {
      int id = n->inputs[i];
      if (id < -1 || id >= g->n_values)
        st = kiln_error(KILN_INTERNAL, "node '%s': input %d has bad id %d", n->name, i, id);
      else if (id >= 0 && !defined[id])
        st = kiln_error(KILN_INVALID_MODEL,
                        "node '%s' (%s): input %d '%s' is not a graph input, initializer or earlier node's output",
                        n->name, n->op_type, i, g->values[id].name);
    }
    for (int i = 0; i < n->n_outputs && !st; i++) {
      int id = n->outputs[i];
      if (id < -1 || id >= g->n_values)
        st = kiln_error(KILN_INTERNAL, "node '%s': output %d has bad id %d", n->name, i, id);
      else if (id >= 0)
        defined[id] = 1;
    }
    for (int a = 0; a < n->n_attrs && !st; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) st = kiln_graph_verify(at->g);
      for (int k = 0; at->graphs && k < at->n && !st; k++) st = kiln_graph_verify(at->graphs[k]);
      if (st) st = kiln_status_annotate(st, "node '%s' attribute '%s'", n->name, at->name);
    }
  }
  for (int i = 0; i < g->n_outputs && !st; i++) {
    int id = g->outputs[i];
    if (id < 0 || id >= g->n_values)
      st = kiln_error(KILN_INTERNAL, "graph '%s': output %d has bad id", g->name, i);
    else if (!defined[id])
      st = kiln_error(KILN_INVALID_MODEL, "graph '%s': output '%s' is never produced", g->name, g->values[id].name);
  }
  free(defined);
  return st;
}

#include "ir/print.h"

kiln_status_t kiln_run_pass(kiln_graph *g, const char *name, kiln_pass_fn fn) {
  KILN_RETURN_IF_ERROR(fn(g), "pass %s", name);
  KILN_RETURN_IF_ERROR(kiln_graph_verify(g), "after pass %s", name);
  const char *dump = getenv("KILN_DUMP");
  if (dump && (!strcmp(dump, "all") || strstr(dump, name))) {
    fprintf(stderr, "=== after pass %s ===\n", name);
    kiln_graph_print(g, stderr);
  }
  return NULL;
}
