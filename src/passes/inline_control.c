/* inline_control: control flow whose path is known before running becomes
 * plain nodes of the enclosing graph. An If whose condition is a constant
 * is its taken branch; a Loop whose trip count is a constant and whose
 * condition can never turn false is its body's nodes, once per iteration.
 *
 * Why: exporters write a Python loop over a fixed range as an ONNX Loop
 * (torch.tensor_split in torchvision's MViT: a Loop of Slices into a
 * sequence, then SequenceAt), and a test of a shape as an If. Control flow
 * runs on the host, its outputs' shapes are known only when it has run,
 * and everything downstream is then specialized at run time and split
 * into device segments (MViT: 38 Loops and 3 Ifs; 153 nodes on ref, 478
 * with run-time shapes). Inlined, the iteration number and the branch are
 * constants, shapes follow, and the sequence ops fold away
 * (fold_sequences.c).
 *
 * Which Loops: the trip count M a constant in [1, UNROLL_MAX_TRIPS]; the
 * loop's condition absent or a constant true; the body's condition output
 * the condition input, a constant true or an Identity chain to one (so
 * every iteration runs); M x body nodes <= UNROLL_MAX_NODES. Any other
 * Loop (a data-dependent trip count: greedy decoding) stays whole. For
 * both ops: no node of the inlined graph has a subgraph, and every value
 * it reads by name is found in this graph.
 *
 * How: subgraph values map to graph values (per iteration for a Loop): the
 * iteration number to a constant i, the condition to a constant true, the
 * carried values to the loop's initial values and then the previous
 * iteration's outputs, constants to copies, captures to the captured
 * value. The op's outputs keep their ids: an Identity from the branch's
 * output or the last carried value, a Concat of the iterations' scan
 * values (each unsqueezed on axis 0). Types are inferred again after. */
#include "passes/passes_opt.h"

#include <stdio.h>

#define UNROLL_MAX_TRIPS 64
#define UNROLL_MAX_NODES 2048
#define EMIT_MAX_IO 64 /* inputs or outputs of an inlined node */

static bool const_true(const kiln_graph *g, int id) {
  const kiln_tensor *t = kiln_opt_const(g, id);
  return t && t->numel == 1 && t->dtype == KILN_DTYPE_BOOL && ((const uint8_t *)t->data)[0] != 0;
}

/* No node of sub has a subgraph or more than EMIT_MAX_IO inputs or
 * outputs, and what sub reads by name is in g. */
static bool inlinable(const kiln_graph *g, const kiln_graph *sub) {
  for (int n = 0; n < sub->n_nodes; n++) {
    const kiln_node *bn = &sub->nodes[n];
    if (bn->n_inputs > EMIT_MAX_IO || bn->n_outputs > EMIT_MAX_IO) return false;
    for (int a = 0; a < bn->n_attrs; a++)
      if (bn->attrs[a].g || bn->attrs[a].graphs) return false;
  }
  for (int v = 0; v < sub->n_values; v++)
    if (sub->values[v].outer_name && kiln_graph_find_value(g, sub->values[v].outer_name) < 0) return false;
  /* every output defined (else the op reports the malformed model when it runs) */
  for (int k = 0; k < sub->n_outputs; k++) {
    int v = sub->outputs[k];
    if (v < 0 || v >= sub->n_values) return false;
    const kiln_value_def *d = &sub->values[v];
    if (d->producer < 0 && !d->constant && !d->outer_name && !d->is_graph_input) return false;
  }
  return true;
}

/* The body's condition output is true at every iteration (given a true
 * initial condition). */
static bool body_cond_always_true(const kiln_graph *g, const kiln_graph *body) {
  int v = body->outputs[0];
  for (int hops = 0; hops < 16 && v >= 0; hops++) {
    const kiln_value_def *d = &body->values[v];
    if (v == body->inputs[1]) return true;
    if (d->constant) return const_true(body, v);
    if (d->outer_name) {
      int o = kiln_graph_find_value(g, d->outer_name);
      return o >= 0 && const_true(g, o);
    }
    if (d->producer < 0) return false;
    const kiln_node *p = &body->nodes[d->producer];
    if (strcmp(p->op_type, "Identity") || p->domain[0] || p->n_inputs != 1) return false;
    v = p->inputs[0];
  }
  return false;
}

/* M when the loop can be unrolled, else 0. */
static int64_t unrollable_trips(const kiln_graph *g, const kiln_node *loop, const kiln_graph *body) {
  if (loop->n_inputs < 2 || !body) return 0;
  const kiln_tensor *m = kiln_opt_const(g, loop->inputs[0]);
  if (!m || m->numel != 1 || (m->dtype != KILN_DTYPE_I64 && m->dtype != KILN_DTYPE_I32)) return 0;
  int64_t trips = kiln_load_i64(m->data, m->dtype, 0);
  if (trips < 1 || trips > UNROLL_MAX_TRIPS || trips * body->n_nodes > UNROLL_MAX_NODES) return 0;
  if (loop->inputs[1] >= 0 && !const_true(g, loop->inputs[1])) return 0;
  int carried = loop->n_inputs - 2;
  if (body->n_inputs != carried + 2 || body->n_outputs < carried + 1 || loop->n_outputs != body->n_outputs - 1) return 0;
  if (!body_cond_always_true(g, body) || !inlinable(g, body)) return 0;
  return trips;
}

static kiln_status_t scalar_const(kiln_graph *g, const char *base, kiln_dtype dt, int rank, int64_t v, int *out) {
  int64_t one = 1;
  kiln_tensor *t;
  KILN_TRY(kiln_tensor_new(dt, rank, &one, &t));
  kiln_store_i64(t->data, dt, 0, v);
  return kiln_opt_new_const(g, base, t, out);
}

/* map[v] for sub's constants (copied into g) and captures; -1 elsewhere. */
static kiln_status_t map_fixed_values(kiln_graph *g, const kiln_graph *sub, int *map) {
  for (int v = 0; v < sub->n_values; v++) {
    const kiln_value_def *d = &sub->values[v];
    map[v] = -1;
    if (d->outer_name) map[v] = kiln_graph_find_value(g, d->outer_name);
    else if (d->constant) KILN_TRY(kiln_opt_new_const(g, d->name, kiln_tensor_retain(d->constant), &map[v]));
  }
  return NULL;
}

/* Appends sub's nodes to g with their inputs mapped and fresh outputs
 * (typed by inference afterwards, not by sub's declarations: inference
 * may find more than what holds for every iteration or branch). */
static kiln_status_t emit_nodes(kiln_graph *g, const kiln_graph *sub, int *map, const char *base) {
  int ins[EMIT_MAX_IO], outs[EMIT_MAX_IO]; /* inlinable() checked the counts */
  for (int n = 0; n < sub->n_nodes; n++) {
    const kiln_node *bn = &sub->nodes[n];
    for (int i = 0; i < bn->n_inputs; i++) ins[i] = bn->inputs[i] >= 0 ? map[bn->inputs[i]] : -1;
    for (int o = 0; o < bn->n_outputs; o++) {
      outs[o] = -1;
      if (bn->outputs[o] < 0) continue;
      char *vb = kiln_strfmt("%s/%s", base, sub->values[bn->outputs[o]].name);
      kiln_status_t st = vb ? kiln_opt_new_value(g, vb, NULL, &outs[o]) : KILN_OOM();
      free(vb);
      if (st) return st;
      map[bn->outputs[o]] = outs[o];
    }
    char *nm = kiln_strfmt("%s/%s", base, bn->name);
    if (!nm) return KILN_OOM();
    kiln_status_t st = kiln_opt_append_node(g, nm, bn->op_type, bn->domain, bn->opset, bn->n_inputs, ins, bn->n_outputs, outs);
    free(nm);
    if (!st) st = kiln_node_copy_attrs(&g->nodes[g->n_nodes - 1], bn, g);
    if (st) return st;
  }
  return NULL;
}

static kiln_status_t identity(kiln_graph *g, const char *base, int k, int opset, int in, int out) {
  char *nm = kiln_strfmt("%s/out%d", base, k);
  if (!nm) return KILN_OOM();
  kiln_status_t st = kiln_opt_append_node(g, nm, "Identity", "", opset, 1, &in, 1, &out);
  free(nm);
  return st;
}

/* The taken branch of If node idx (its condition constant). */
static kiln_status_t inline_if(kiln_graph *g, int idx, const kiln_graph *branch, const char *name) {
  const kiln_node *node = &g->nodes[idx];
  int opset = node->opset, n_out = node->n_outputs;
  int *outs = malloc((size_t)(n_out + 1) * sizeof(int)), *map = malloc((size_t)(branch->n_values + 1) * sizeof(int));
  kiln_status_t st = outs && map ? NULL : KILN_OOM();
  if (!st) memcpy(outs, node->outputs, (size_t)n_out * sizeof(int)); /* node moves as nodes are appended */
  if (!st) st = map_fixed_values(g, branch, map);
  if (!st) st = emit_nodes(g, branch, map, name);
  for (int k = 0; k < n_out && !st; k++)
    if (outs[k] >= 0) st = identity(g, name, k, opset, map[branch->outputs[k]], outs[k]);
  free(outs);
  free(map);
  return st;
}

/* Loop node idx unrolled `trips` times. */
static kiln_status_t unroll_loop(kiln_graph *g, int idx, const kiln_graph *body, int64_t trips, const char *name) {
  const kiln_node *loop = &g->nodes[idx];
  int opset = loop->opset, carried = loop->n_inputs - 2, scans = body->n_outputs - 1 - carried, n_out = loop->n_outputs;
  /* the loop node moves as nodes are appended: its ids are copied */
  int *louts = malloc((size_t)(n_out + 1) * sizeof(int)), *carry = malloc((size_t)(carried + 1) * sizeof(int));
  int *map = malloc((size_t)(body->n_values + 1) * sizeof(int));
  int *scan_vals = malloc((size_t)(scans * trips + 1) * sizeof(int));
  kiln_status_t st = louts && carry && map && scan_vals ? NULL : KILN_OOM();
  if (!st) {
    memcpy(louts, loop->outputs, (size_t)n_out * sizeof(int));
    memcpy(carry, loop->inputs + 2, (size_t)carried * sizeof(int));
  }
  int true_id = -1;
  const kiln_value_def *iv = &body->values[body->inputs[0]], *cv = &body->values[body->inputs[1]];
  kiln_dtype it_dt = iv->type.dtype == KILN_DTYPE_I32 ? KILN_DTYPE_I32 : KILN_DTYPE_I64;
  if (!st) st = scalar_const(g, name, KILN_DTYPE_BOOL, cv->type.rank == 1 ? 1 : 0, 1, &true_id);
  if (!st) st = map_fixed_values(g, body, map);
  for (int64_t it = 0; it < trips && !st; it++) {
    char *base = kiln_strfmt("%s/unroll%lld", name, (long long)it);
    if (!base) st = KILN_OOM();
    if (!st) st = scalar_const(g, base, it_dt, iv->type.rank == 1 ? 1 : 0, it, &map[body->inputs[0]]);
    map[body->inputs[1]] = true_id;
    for (int c = 0; c < carried; c++) map[body->inputs[2 + c]] = carry[c];
    if (!st) st = emit_nodes(g, body, map, base);
    free(base);
    /* read all before the next iteration rebinds any: an output may be
     * another carried input passed through */
    for (int c = 0; c < carried && !st; c++) carry[c] = map[body->outputs[1 + c]];
    for (int s = 0; s < scans && !st; s++) scan_vals[s * trips + it] = map[body->outputs[1 + carried + s]];
  }
  for (int c = 0; c < carried && !st; c++)
    if (louts[c] >= 0) st = identity(g, name, c, opset, carry[c], louts[c]);
  for (int s = 0; s < scans && !st; s++) {
    if (louts[carried + s] < 0) continue;
    char *nm = kiln_strfmt("%s/scan%d", name, s);
    st = nm ? kiln_opt_append_stack(g, nm, opset, (int)trips, scan_vals + s * trips, 0, louts[carried + s]) : KILN_OOM();
    free(nm);
  }
  free(louts);
  free(carry);
  free(map);
  free(scan_vals);
  return st;
}

kiln_status_t kiln_pass_inline_control(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_inline_control));
  bool changed = false;
  for (int n = 0; n < g->n_nodes; n++) {
    kiln_node *node = &g->nodes[n];
    if (node->domain[0]) continue;
    const kiln_graph *sub = NULL;
    int64_t trips = 0;
    if (!strcmp(node->op_type, "If") && node->n_inputs == 1) {
      const kiln_tensor *c = kiln_opt_const(g, node->inputs[0]);
      if (!c || c->numel != 1 || c->dtype != KILN_DTYPE_BOOL) continue;
      const kiln_attr *ba = kiln_node_attr(node, ((const uint8_t *)c->data)[0] ? "then_branch" : "else_branch");
      sub = ba ? ba->g : NULL;
      if (!sub || sub->n_inputs || sub->n_outputs != node->n_outputs || !inlinable(g, sub)) continue;
    } else if (!strcmp(node->op_type, "Loop")) {
      const kiln_attr *ba = kiln_node_attr(node, "body");
      sub = ba ? ba->g : NULL;
      if (!(trips = unrollable_trips(g, node, sub))) continue;
    } else {
      continue;
    }
    /* The subgraph stays owned by the node until the node is removed. */
    int first = g->n_nodes;
    char *name = kiln_strdup(node->name);
    if (!name) return KILN_OOM();
    kiln_status_t st = trips ? unroll_loop(g, n, sub, trips, name) : inline_if(g, n, sub, name);
    /* The new nodes take the op's place; the op (now after them) goes. */
    int added = g->n_nodes - first;
    if (!st) st = kiln_opt_move_tail(g, first, n);
    bool *dead = st ? NULL : calloc((size_t)g->n_nodes, sizeof(bool));
    if (!st && !dead) st = KILN_OOM();
    if (!st) {
      dead[n + added] = true;
      st = kiln_opt_remove_nodes(g, dead);
    }
    free(dead);
    if (st) {
      st = kiln_status_annotate(st, "inlining node '%s'", name);
      free(name);
      return st;
    }
    free(name);
    n += added - 1; /* past the new nodes */
    changed = true;
  }
  if (changed) KILN_TRY(kiln_pass_infer_types(g));
  return NULL;
}
