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

/* Value inference: shape computations (Shape -> Gather -> Concat -> Reshape
 * ...) are evaluated at inference time with the reference kernels, so the
 * shapes that depend on them become known. Only small tensors, only
 * deterministic ops without subgraphs. */
#define KNOWN_VALUE_MAX_ELEMENTS 4096

static const kiln_tensor *known(const kiln_value_def *v) { return v->constant ? v->constant : v->known_value; }

static bool type_fully_known(const kiln_type *t) {
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0 || !t->dtype) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

/* Shape and Size need only the input's type, not its value. */
static kiln_status_t shape_only_value(kiln_graph *g, const kiln_node *n) {
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  if (!type_fully_known(t)) return NULL;
  kiln_tensor *out;
  if (kiln_node_is(n, KILN_OP_Size)) {
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 0, NULL, &out));
    int64_t numel = kiln_shape_numel(t->rank, t->dims);
    ((int64_t *)out->data)[0] = numel;
  } else {
    int64_t start = kiln_attr_int(n, "start", 0), end = kiln_attr_int(n, "end", t->rank);
    if (start < 0) start += t->rank;
    if (end < 0) end += t->rank;
    start = KILN_MAX(0, KILN_MIN(start, t->rank));
    end = KILN_MAX(start, KILN_MIN(end, t->rank));
    int64_t len = end - start;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 1, &len, &out));
    for (int64_t i = 0; i < len; i++) ((int64_t *)out->data)[i] = t->dims[start + i];
  }
  kiln_value_def *o = &g->values[n->outputs[0]];
  kiln_tensor_release(o->known_value);
  o->known_value = out;
  return NULL;
}

/* Evaluates node n when its inputs are known; `types` are its outputs'
 * inferred types: a node whose every output is known to be too large to
 * keep (weights made by ConstantOfShape or Expand) is not evaluated. */
static void evaluate_known(kiln_graph *g, const kiln_node *n, const kiln_type *types) {
  const kiln_op_def *op = n->op;
  if (!op || !op->ref_kernel || (op->flags & (KILN_OP_NONDETERMINISTIC | KILN_OP_CONTROL_FLOW))) return;
  if (kiln_node_is(n, KILN_OP_Shape) || kiln_node_is(n, KILN_OP_Size)) {
    kiln_status_free(shape_only_value(g, n));
    return;
  }
  if (n->n_inputs > 16 || n->n_outputs > 16) return;
  bool small = false;
  for (int i = 0; i < n->n_outputs && !small; i++)
    small = n->outputs[i] >= 0 && (!type_fully_known(&types[i]) ||
                                   kiln_shape_numel(types[i].rank, types[i].dims) <= KNOWN_VALUE_MAX_ELEMENTS);
  if (!small) return;
  kiln_value *in[16] = {0}, *out[16] = {0};
  bool wanted[16];
  bool ok = true;
  for (int i = 0; i < n->n_inputs && ok; i++) {
    if (n->inputs[i] < 0) continue;
    const kiln_tensor *t = known(&g->values[n->inputs[i]]);
    ok = t && t->numel <= KNOWN_VALUE_MAX_ELEMENTS;
    if (ok) ok = !kiln_value_from_tensor(kiln_tensor_retain((kiln_tensor *)t), &in[i]);
  }
  for (int i = 0; i < n->n_outputs; i++) wanted[i] = n->outputs[i] >= 0;
  if (ok) {
    kiln_kernel_ctx ctx = {n, n->opset, n->n_inputs, in, n->n_outputs, out, wanted, NULL, NULL};
    kiln_status_t st = kiln_kernel_check_narrow_inputs(&ctx);
    if (!st) st = op->ref_kernel(&ctx);
    /* A failure here is the run's to report, with its real inputs. */
    if (!st) {
      for (int i = 0; i < n->n_outputs; i++) {
        int id = n->outputs[i];
        if (id < 0 || !out[i] || out[i]->kind != KILN_VALUE_TENSOR) continue;
        if (out[i]->tensor->numel > KNOWN_VALUE_MAX_ELEMENTS) continue;
        kiln_tensor_release(g->values[id].known_value);
        g->values[id].known_value = kiln_tensor_retain(out[i]->tensor);
      }
    }
    kiln_status_free(st);
  }
  for (int i = 0; i < 16; i++) {
    kiln_value_free(in[i]);
    kiln_value_free(out[i]);
  }
}

kiln_status_t kiln_infer_node_outputs(const kiln_graph *g, const kiln_node *n, kiln_type *out) {
  if (n->n_inputs > 64 || n->n_outputs > 64)
    return kiln_error(KILN_UNSUPPORTED, "node with over 64 inputs or outputs");
  const kiln_type *in_types[64];
  const kiln_tensor *consts[64];
  for (int i = 0; i < n->n_inputs; i++) {
    int id = n->inputs[i];
    in_types[i] = id >= 0 ? &g->values[id].type : NULL;
    consts[i] = id >= 0 ? known(&g->values[id]) : NULL;
  }
  memset(out, 0, (size_t)n->n_outputs * sizeof *out);
  for (int i = 0; i < n->n_outputs; i++) {
    out[i].rank = -1;
    for (int d = 0; d < KILN_MAX_RANK; d++) out[i].dims[d] = -1;
  }
  if (!n->op || !n->op->infer) return NULL;
  kiln_infer_ctx ctx = {n, n->opset, n->n_inputs, in_types, consts, n->n_outputs, out};
  return n->op->infer(&ctx);
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
    kiln_type out_types[64];
    if (n->n_inputs > 64 || n->n_outputs > 64) continue;
    /* The outputs' types depend on the inputs only, not on what
     * evaluate_known finds for the outputs. */
    kiln_status_t st = kiln_infer_node_outputs(g, n, out_types);
    if (!st) evaluate_known(g, n, out_types);
    for (int i = 0; i < n->n_outputs && !st; i++) {
      int id = n->outputs[i];
      if (id < 0) continue;
      st = merge_type(&g->values[id].type, &out_types[i]);
      const kiln_tensor *kv = g->values[id].known_value;
      if (!st && kv) {
        kiln_type vt = {0};
        kiln_type_init_tensor(&vt, kv->dtype, kv->rank, kv->dims);
        st = merge_type(&g->values[id].type, &vt);
        kiln_type_clear(&vt);
      }
      if (st) st = kiln_status_annotate(st, "output %d ('%s')", i, g->values[id].name);
    }
    for (int i = 0; i < n->n_outputs; i++) kiln_type_clear(&out_types[i]);
    if (st) return kiln_status_annotate(st, "node '%s' (%s)", n->name, n->op_type);
  }
  return NULL;
}
