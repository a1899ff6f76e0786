/* fold_sequences: a sequence whose items the graph states (SequenceEmpty,
 * SequenceConstruct, then SequenceInsert and SequenceErase at constant
 * positions) is resolved to those items' values, and what reads it becomes
 * tensor ops: SequenceAt at a constant position an Identity of the item,
 * SequenceLength a constant, ConcatFromSequence a Concat (of Unsqueezes
 * with new_axis). The sequence ops then have no readers and dce drops them.
 *
 * Why: sequences run on the host with their items' shapes unknown until
 * then; an unrolled tensor_split (unroll_loops.c) or a list built in
 * Python and exported as SequenceInsert calls is, item for item, plain
 * tensors, which every device compiles. A position out of range is left
 * alone, so the op reports it when it runs. */
#include "passes/passes_opt.h"

#include <stdio.h>

typedef struct seq_items {
  bool known;
  int n;
  int *ids; /* owned */
} seq_items;

static bool is_op(const kiln_node *n, const char *op) { return !n->domain[0] && !strcmp(n->op_type, op); }

/* A constant integer scalar position. */
static bool const_pos(const kiln_graph *g, int id, int64_t *out) {
  const kiln_tensor *t = kiln_opt_const(g, id);
  if (!t || t->numel != 1 || t->rank > 1 || (t->dtype != KILN_DTYPE_I64 && t->dtype != KILN_DTYPE_I32)) return false;
  *out = kiln_load_i64(t->data, t->dtype, 0);
  return true;
}

static kiln_status_t set_items(seq_items *s, const int *ids, int n) {
  s->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  if (!s->ids) return KILN_OOM();
  if (n) memcpy(s->ids, ids, (size_t)n * sizeof(int));
  s->n = n;
  s->known = true;
  return NULL;
}

/* The items of node's sequence output, when its inputs' are known. */
static kiln_status_t track(const kiln_graph *g, const kiln_node *n, seq_items *items, int nv) {
  if (n->n_outputs < 1 || n->outputs[0] < 0 || n->outputs[0] >= nv) return NULL;
  seq_items *out = &items[n->outputs[0]];
  /* values made while rewriting (ids >= nv) are tensors */
  const seq_items *in = n->n_inputs > 0 && n->inputs[0] >= 0 && n->inputs[0] < nv ? &items[n->inputs[0]] : NULL;
  if (is_op(n, "SequenceEmpty")) return set_items(out, NULL, 0);
  if (is_op(n, "SequenceConstruct")) {
    for (int i = 0; i < n->n_inputs; i++)
      if (n->inputs[i] < 0) return NULL;
    return set_items(out, n->inputs, n->n_inputs);
  }
  if (is_op(n, "Identity") && in && in->known) return set_items(out, in->ids, in->n);
  if ((is_op(n, "SequenceInsert") || is_op(n, "SequenceErase")) && in && in->known) {
    bool insert = is_op(n, "SequenceInsert");
    int pos_in = insert ? 2 : 1;
    int64_t pos = insert ? in->n : in->n - 1;
    if (n->n_inputs > pos_in && n->inputs[pos_in] >= 0) {
      if (!const_pos(g, n->inputs[pos_in], &pos)) return NULL;
      if (pos < 0) pos += in->n;
    }
    if (insert && (n->n_inputs < 2 || n->inputs[1] < 0 || pos < 0 || pos > in->n)) return NULL;
    if (!insert && (pos < 0 || pos >= in->n)) return NULL;
    int *ids = malloc((size_t)(in->n + 1) * sizeof(int));
    if (!ids) return KILN_OOM();
    int m = 0;
    for (int k = 0; k <= in->n; k++) {
      if (insert && k == pos) ids[m++] = n->inputs[1];
      if (k < in->n && (insert || k != pos)) ids[m++] = in->ids[k];
    }
    kiln_status_t st = set_items(out, ids, m);
    free(ids);
    return st;
  }
  return NULL;
}

/* Rewrites node idx, a reader of a known sequence, into tensor ops. Returns
 * whether it did. Nodes inserted before it shift it: *idx follows. */
static kiln_status_t rewrite_reader(kiln_graph *g, int *idx, const seq_items *items, bool *changed) {
  kiln_node *n = &g->nodes[*idx];
  if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return NULL;
  const seq_items *s = &items[n->inputs[0]];
  if (!s->known) return NULL;
  int out = n->outputs[0], opset = n->opset;
  if (is_op(n, "SequenceAt")) {
    int64_t pos;
    if (n->n_inputs < 2 || !const_pos(g, n->inputs[1], &pos)) return NULL;
    if (pos < 0) pos += s->n;
    if (pos < 0 || pos >= s->n) return NULL; /* the op reports it when it runs */
    int item = s->ids[pos];
    KILN_TRY(kiln_opt_rewrite_node(g, *idx, "Identity", "", opset, 1, &item, 1, &out));
    *changed = true;
    return NULL;
  }
  if (is_op(n, "SequenceLength")) {
    kiln_tensor *t;
    KILN_TRY(kiln_tensor_new(KILN_DTYPE_I64, 0, NULL, &t));
    kiln_store_i64(t->data, KILN_DTYPE_I64, 0, s->n);
    int c;
    KILN_TRY(kiln_opt_new_const(g, g->values[out].name, t, &c));
    KILN_TRY(kiln_opt_rewrite_node(g, *idx, "Identity", "", opset, 1, &c, 1, &out));
    *changed = true;
    return NULL;
  }
  if (is_op(n, "ConcatFromSequence") && s->n > 0 && s->n <= 4096 && opset >= 11) {
    int64_t axis = kiln_attr_int(n, "axis", 0), new_axis = kiln_attr_int(n, "new_axis", 0);
    if (!new_axis) {
      KILN_TRY(kiln_opt_rewrite_node(g, *idx, "Concat", "", opset, s->n, s->ids, 1, &out));
      KILN_TRY(kiln_opt_set_attr_int(&g->nodes[*idx], "axis", axis));
    } else {
      /* each item gains the axis, then they concatenate along it; the
       * node goes (the new ones write its output) */
      char *base = kiln_strdup(n->name);
      if (!base) return KILN_OOM();
      bool *dead = calloc((size_t)g->n_nodes, sizeof *dead);
      kiln_status_t st = dead ? NULL : KILN_OOM();
      if (!st) {
        dead[*idx] = true;
        st = kiln_opt_remove_nodes(g, dead);
      }
      free(dead);
      int first = g->n_nodes;
      if (!st) st = kiln_opt_append_stack(g, base, opset, s->n, s->ids, axis, out);
      free(base);
      if (!st) st = kiln_opt_move_tail(g, first, *idx);
      if (st) return st;
      *idx += g->n_nodes - first - 1; /* the last new node */
    }
    *changed = true;
    return NULL;
  }
  return NULL;
}

kiln_status_t kiln_pass_fold_sequences(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_fold_sequences));
  bool any = false;
  for (int n = 0; n < g->n_nodes && !any; n++) any = is_op(&g->nodes[n], "SequenceEmpty") || is_op(&g->nodes[n], "SequenceConstruct");
  if (!any) return NULL;
  int nv = g->n_values;
  seq_items *items = calloc((size_t)(nv > 0 ? nv : 1), sizeof *items);
  if (!items) return KILN_OOM();
  kiln_status_t st = NULL;
  bool changed = false;
  /* Values made while rewriting are tensors: items[] covers the ones before. */
  for (int n = 0; n < g->n_nodes && !st; n++) {
    const kiln_node *node = &g->nodes[n];
    bool reads_seq = node->n_inputs > 0 && node->inputs[0] >= 0 && node->inputs[0] < nv && items[node->inputs[0]].known;
    st = track(g, node, items, nv);
    if (!st && reads_seq) st = rewrite_reader(g, &n, items, &changed);
  }
  for (int v = 0; v < nv; v++) free(items[v].ids);
  free(items);
  if (st) return st;
  if (changed) KILN_TRY(kiln_pass_infer_types(g));
  return NULL;
}
