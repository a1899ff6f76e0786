/* dce: removes nodes whose outputs nobody reads (not a graph output, not a
 * live node's input, not read by name from a live node's subgraph), then
 * drops the values nothing refers to any more (unused constants too) and
 * renumbers the rest. No op has side effects, so a node is live only
 * through its outputs; random ops whose outputs are unused go too. */
#include "passes/passes_opt.h"

/* Marks the values of g that node's subgraphs read by name. */
static kiln_status_t mark_subgraph_reads(const kiln_graph *g, const kiln_node *node, bool *used) {
  kiln_ptr_vec names = {0};
  kiln_status_t st = kiln_opt_subgraph_reads(node, &names);
  for (int k = 0; k < names.count && !st; k++) {
    int v = kiln_graph_find_value(g, names.items[k]);
    if (v >= 0) used[v] = true;
  }
  kiln_ptr_vec_free(&names);
  return st;
}

static void value_clear(kiln_value_def *v) {
  free(v->name);
  free(v->outer_name);
  kiln_type_clear(&v->type);
  kiln_tensor_release(v->constant);
  kiln_tensor_release(v->known_value);
  memset(v, 0, sizeof *v);
}

/* Drops values that no node, graph input/output or subgraph refers to. */
static kiln_status_t compact_values(kiln_graph *g) {
  int nv = g->n_values;
  size_t nalloc = (size_t)(nv > 0 ? nv : 1);
  bool *keep = calloc(nalloc, sizeof(bool));
  int *remap = malloc(nalloc * sizeof(int));
  if (!keep || !remap) {
    free(keep);
    free(remap);
    return KILN_OOM();
  }
  kiln_status_t st = NULL;
  for (int v = 0; v < nv; v++) keep[v] = g->values[v].is_graph_input || g->values[v].is_graph_output;
  for (int i = 0; i < g->n_inputs; i++) keep[g->inputs[i]] = true;
  for (int i = 0; i < g->n_outputs; i++) keep[g->outputs[i]] = true;
  for (int n = 0; n < g->n_nodes && !st; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0) keep[node->inputs[i]] = true;
    for (int i = 0; i < node->n_outputs; i++)
      if (node->outputs[i] >= 0) keep[node->outputs[i]] = true;
    st = mark_subgraph_reads(g, node, keep);
  }
  if (st) {
    free(keep);
    free(remap);
    return st;
  }
  int w = 0;
  for (int v = 0; v < nv; v++) {
    if (!keep[v]) {
      value_clear(&g->values[v]);
      remap[v] = -1;
      continue;
    }
    remap[v] = w;
    if (w != v) g->values[w] = g->values[v];
    w++;
  }
  g->n_values = w;
  kiln_graph_names_changed(g); /* ids moved */
  for (int n = 0; n < g->n_nodes; n++) {
    kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0) node->inputs[i] = remap[node->inputs[i]];
    for (int i = 0; i < node->n_outputs; i++)
      if (node->outputs[i] >= 0) node->outputs[i] = remap[node->outputs[i]];
  }
  for (int i = 0; i < g->n_inputs; i++) g->inputs[i] = remap[g->inputs[i]];
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = remap[g->outputs[i]];
  for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  for (int n = 0; n < g->n_nodes; n++)
    for (int i = 0; i < g->nodes[n].n_outputs; i++)
      if (g->nodes[n].outputs[i] >= 0) g->values[g->nodes[n].outputs[i]].producer = n;
  free(keep);
  free(remap);
  return NULL;
}

static kiln_status_t dce_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, dce_graph));
  size_t nv = (size_t)(g->n_values > 0 ? g->n_values : 1), nn = (size_t)(g->n_nodes > 0 ? g->n_nodes : 1);
  bool *used = calloc(nv, sizeof(bool)), *dead = calloc(nn, sizeof(bool));
  if (!used || !dead) {
    free(used);
    free(dead);
    return KILN_OOM();
  }
  kiln_status_t st = NULL;
  for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = true;
  bool any_dead = false;
  for (int n = g->n_nodes - 1; n >= 0 && !st; n--) {
    const kiln_node *node = &g->nodes[n];
    bool live = false;
    for (int i = 0; i < node->n_outputs && !live; i++) live = node->outputs[i] >= 0 && used[node->outputs[i]];
    if (!live) {
      dead[n] = any_dead = true;
      continue;
    }
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0) used[node->inputs[i]] = true;
    st = mark_subgraph_reads(g, node, used);
  }
  if (!st && any_dead) st = kiln_opt_remove_nodes(g, dead);
  if (!st) st = compact_values(g);
  free(used);
  free(dead);
  return st;
}

kiln_status_t kiln_pass_dce(kiln_graph *g) { return dce_graph(g); }
