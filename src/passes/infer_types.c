#include "passes/passes.h"

#include <stdio.h>

/* The outer value a subgraph reads, found by name up the parent chain. */
static const kiln_value_def *find_outer(const kiln_graph *g, const char *name) {
  for (const kiln_graph *p = g->parent; p; p = p->parent) {
    int id = kiln_graph_find_value(p, name);
    if (id >= 0) return &p->values[id];
  }
  return NULL;
}

/* Merges inferred type `inf` into `decl`: keeps whatever either knows.
 * Returns an error when both know and disagree. */
static kiln_status_t merge_type(kiln_type *decl, const kiln_type *inf) {
  if (inf->kind == KILN_TYPE_UNKNOWN) return NULL;
  if (decl->kind == KILN_TYPE_UNKNOWN) {
    kiln_type_copy(decl, inf);
    return NULL;
  }
  char a[256], b[256];
  if (decl->dtype && inf->dtype && decl->dtype != inf->dtype)
    return kiln_error(KILN_INVALID_MODEL, "declared type %s, inferred %s", kiln_type_str(decl, a, sizeof a),
                      kiln_type_str(inf, b, sizeof b));
  if (!decl->dtype) decl->dtype = inf->dtype;
  if (inf->rank < 0) return NULL;
  if (decl->rank < 0) {
    decl->rank = inf->rank;
    for (int i = 0; i < inf->rank; i++) decl->dims[i] = inf->dims[i];
    return NULL;
  }
  if (decl->rank != inf->rank)
    return kiln_error(KILN_INVALID_MODEL, "declared type %s, inferred %s", kiln_type_str(decl, a, sizeof a),
                      kiln_type_str(inf, b, sizeof b));
  for (int i = 0; i < inf->rank; i++) {
    if (inf->dims[i] < 0) continue;
    if (decl->dims[i] >= 0 && decl->dims[i] != inf->dims[i])
      return kiln_error(KILN_INVALID_MODEL, "declared type %s, inferred %s", kiln_type_str(decl, a, sizeof a),
                        kiln_type_str(inf, b, sizeof b));
    decl->dims[i] = inf->dims[i];
  }
  return NULL;
}

kiln_status_t kiln_pass_infer_types(kiln_graph *g) {
  for (int i = 0; i < g->n_values; i++) {
    kiln_value_def *v = &g->values[i];
    if (v->constant && v->type.kind == KILN_TYPE_UNKNOWN)
      kiln_type_init_tensor(&v->type, v->constant->dtype, v->constant->rank, v->constant->dims);
    if (v->outer_name && v->type.kind == KILN_TYPE_UNKNOWN) {
      const kiln_value_def *o = find_outer(g, v->outer_name);
      if (o) kiln_type_copy(&v->type, &o->type);
    }
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    kiln_node *n = &g->nodes[ni];
    /* Subgraphs first: If's output types come from its branches. */
    for (int a = 0; a < n->n_attrs; a++) {
      kiln_attr *at = &n->attrs[a];
      if (at->g)
        KILN_RETURN_IF_ERROR(kiln_pass_infer_types(at->g), "node '%s' (%s) attribute '%s'", n->name, n->op_type,
                             at->name);
      for (int k = 0; at->graphs && k < at->n; k++)
        KILN_RETURN_IF_ERROR(kiln_pass_infer_types(at->graphs[k]), "node '%s' (%s) attribute '%s'", n->name,
                             n->op_type, at->name);
    }
    if (!n->op || !n->op->infer) continue;
    const kiln_type *in_types[64];
    const kiln_tensor *consts[64];
    kiln_type out_types[64];
    if (n->n_inputs > 64 || n->n_outputs > 64) continue;
    for (int i = 0; i < n->n_inputs; i++) {
      int id = n->inputs[i];
      in_types[i] = id >= 0 ? &g->values[id].type : NULL;
      consts[i] = id >= 0 ? g->values[id].constant : NULL;
    }
    memset(out_types, 0, sizeof out_types);
    for (int i = 0; i < n->n_outputs; i++) {
      out_types[i].rank = -1;
      for (int d = 0; d < KILN_MAX_RANK; d++) out_types[i].dims[d] = -1;
    }
    kiln_infer_ctx ctx = {n, n->opset, n->n_inputs, in_types, consts, n->n_outputs, out_types};
    kiln_status_t st = n->op->infer(&ctx);
    for (int i = 0; i < n->n_outputs && !st; i++) {
      int id = n->outputs[i];
      if (id < 0) continue;
      st = merge_type(&g->values[id].type, &out_types[i]);
      if (st) st = kiln_status_annotate(st, "output %d ('%s')", i, g->values[id].name);
    }
    for (int i = 0; i < n->n_outputs; i++) kiln_type_clear(&out_types[i]);
    if (st) return kiln_status_annotate(st, "node '%s' (%s)", n->name, n->op_type);
  }
  return NULL;
}
