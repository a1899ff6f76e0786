/* The optimization driver and the graph-editing helpers the passes share. */
#include "passes/passes_opt.h"

#include <math.h>
#include <stdio.h>

/* ---- uses ------------------------------------------------------------------- */

static kiln_status_t collect_outer_names(const kiln_graph *g, kiln_ptr_vec *names) {
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].outer_name) KILN_TRY(kiln_ptr_vec_push(names, g->values[i].outer_name));
  for (int n = 0; n < g->n_nodes; n++) KILN_TRY(kiln_opt_subgraph_reads(&g->nodes[n], names));
  return NULL;
}

kiln_status_t kiln_opt_subgraph_reads(const kiln_node *node, kiln_ptr_vec *names) {
  for (int a = 0; a < node->n_attrs; a++) {
    const kiln_attr *at = &node->attrs[a];
    if (at->g) KILN_TRY(collect_outer_names(at->g, names));
    for (int k = 0; at->graphs && k < at->n; k++)
      if (at->graphs[k]) KILN_TRY(collect_outer_names(at->graphs[k], names));
  }
  return NULL;
}

void kiln_opt_uses_free(kiln_opt_uses *u) {
  free(u->count);
  free(u->start);
  free(u->cons);
  free(u->pinned);
  memset(u, 0, sizeof *u);
}

kiln_status_t kiln_opt_uses_build(const kiln_graph *g, kiln_opt_uses *u) {
  memset(u, 0, sizeof *u);
  int nv = g->n_values;
  size_t nalloc = (size_t)(nv > 0 ? nv : 1);
  u->n_values = nv;
  u->count = calloc(nalloc, sizeof(int));
  u->start = calloc(nalloc + 1, sizeof(int));
  u->pinned = calloc(nalloc, sizeof(bool));
  int slots = 0;
  for (int n = 0; n < g->n_nodes; n++) slots += g->nodes[n].n_inputs;
  u->cons = malloc((size_t)(slots > 0 ? slots : 1) * sizeof(int));
  int *fill = calloc(nalloc, sizeof(int));
  kiln_ptr_vec names = {0};
  kiln_status_t st = (!u->count || !u->start || !u->pinned || !u->cons || !fill) ? KILN_OOM() : NULL;
  for (int n = 0; n < g->n_nodes && !st; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0 && node->inputs[i] < nv) u->start[node->inputs[i] + 1]++;
  }
  for (int v = 0; v < nv && !st; v++) u->start[v + 1] += u->start[v];
  for (int n = 0; n < g->n_nodes && !st; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++) {
      int v = node->inputs[i];
      if (v < 0 || v >= nv) continue;
      u->cons[u->start[v] + fill[v]++] = n;
      u->count[v]++;
    }
    names.count = 0;
    st = kiln_opt_subgraph_reads(node, &names);
    for (int k = 0; k < names.count && !st; k++) {
      int v = kiln_graph_find_value(g, names.items[k]);
      if (v >= 0) {
        u->count[v]++;
        u->pinned[v] = true;
      }
    }
  }
  for (int i = 0; i < g->n_outputs && !st; i++) {
    u->count[g->outputs[i]]++;
    u->pinned[g->outputs[i]] = true;
  }
  for (int v = 0; v < nv && !st; v++) {
    const kiln_value_def *d = &g->values[v];
    if (d->is_graph_input || d->is_graph_output || d->outer_name) u->pinned[v] = true;
  }
  kiln_ptr_vec_free(&names);
  free(fill);
  if (st) kiln_opt_uses_free(u);
  return st;
}

int kiln_opt_sole_consumer(const kiln_opt_uses *u, int v) {
  if (v < 0 || v >= u->n_values || u->pinned[v] || u->count[v] != 1 || u->start[v + 1] - u->start[v] != 1) return -1;
  return u->cons[u->start[v]];
}

bool kiln_opt_only_read_by(const kiln_opt_uses *u, int v, int node) {
  if (v < 0 || v >= u->n_values || u->pinned[v]) return false;
  int n = u->start[v + 1] - u->start[v];
  if (n == 0 || n != u->count[v]) return false;
  for (int k = u->start[v]; k < u->start[v + 1]; k++)
    if (u->cons[k] != node) return false;
  return true;
}

/* ---- values ------------------------------------------------------------------ */

const kiln_tensor *kiln_opt_const(const kiln_graph *g, int id) {
  if (id < 0 || id >= g->n_values) return NULL;
  const kiln_value_def *v = &g->values[id];
  if (v->is_graph_input || v->outer_name) return NULL;
  return v->constant;
}

bool kiln_opt_const_scalar(const kiln_graph *g, int id, double *out) {
  const kiln_tensor *t = kiln_opt_const(g, id);
  if (!t || t->numel != 1 || !kiln_dtype_is_float(t->dtype)) return false;
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return true;
}

bool kiln_opt_shapes_trusted(const kiln_graph *g) {
  if (g->parent) return false;
  for (int i = 0; i < g->n_inputs; i++)
    if (g->values[g->inputs[i]].constant) return false;
  return true;
}

bool kiln_opt_shape_known(const kiln_type *t) {
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0 || !t->dtype) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return false;
  return true;
}

/* base/kiln_<k> for the graph's next k: counting on from the last fresh
 * name (a rewrite making thousands of values from one base, an unrolled
 * LSTM, would otherwise test k = 0, 1, ... each time: cubic). */
static kiln_status_t unique_name(kiln_graph *g, const char *base, char **out) {
  kiln_graph_index_names(g); /* a scan per fresh name is quadratic (an unrolled GRU: 35% of its first run) */
  for (int k = g->next_unique;; k++) {
    char *name = kiln_strfmt("%s/kiln_%d", base && base[0] ? base : "v", k);
    if (!name) return KILN_OOM();
    bool taken = false;
    /* Unique in this graph and every enclosing one, so no capture by name changes meaning. */
    for (const kiln_graph *p = g; p && !taken; p = p->parent) taken = kiln_graph_find_value(p, name) >= 0;
    if (!taken) {
      g->next_unique = k + 1;
      *out = name;
      return NULL;
    }
    free(name);
  }
}

kiln_status_t kiln_opt_new_value(kiln_graph *g, const char *base, const kiln_type *type, int *out_id) {
  char *name;
  KILN_TRY(unique_name(g, base, &name));
  kiln_status_t st = kiln_graph_add_value(g, name, out_id); /* unique_name searched already */
  free(name);
  if (st) return st;
  if (type) kiln_type_copy(&g->values[*out_id].type, type);
  return NULL;
}

kiln_status_t kiln_opt_new_const(kiln_graph *g, const char *base, kiln_tensor *t, int *out_id) {
  kiln_status_t st = kiln_opt_new_value(g, base, NULL, out_id);
  if (st) {
    kiln_tensor_release(t);
    return st;
  }
  kiln_value_def *v = &g->values[*out_id];
  v->constant = t;
  kiln_type_init_tensor(&v->type, t->dtype, t->rank, t->dims);
  return NULL;
}

kiln_status_t kiln_opt_run_on_subgraphs(kiln_graph *g, kiln_status_t (*fn)(kiln_graph *)) {
  for (int n = 0; n < g->n_nodes; n++) {
    kiln_node *node = &g->nodes[n];
    for (int a = 0; a < node->n_attrs; a++) {
      kiln_attr *at = &node->attrs[a];
      if (at->g) KILN_RETURN_IF_ERROR(fn(at->g), "node '%s' attribute '%s'", node->name, at->name);
      for (int k = 0; at->graphs && k < at->n; k++)
        if (at->graphs[k]) KILN_RETURN_IF_ERROR(fn(at->graphs[k]), "node '%s' attribute '%s'", node->name, at->name);
    }
  }
  return NULL;
}

/* ---- nodes -------------------------------------------------------------------- */

static void fix_producers(kiln_graph *g) {
  for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_outputs; k++)
      if (g->nodes[i].outputs[k] >= 0) g->values[g->nodes[i].outputs[k]].producer = i;
}

kiln_status_t kiln_opt_remove_nodes(kiln_graph *g, const bool *dead) {
  int w = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (dead[i]) {
      kiln_node_clear(&g->nodes[i]);
      continue;
    }
    if (w != i) g->nodes[w] = g->nodes[i];
    w++;
  }
  g->n_nodes = w;
  fix_producers(g);
  return NULL;
}

kiln_status_t kiln_opt_insert_node(kiln_graph *g, int pos, const char *name, const char *op_type, const char *domain,
                                   int opset, int n_inputs, const int *inputs, int n_outputs, const int *outputs,
                                   int *out_index) {
  if (pos < 0 || pos > g->n_nodes) return kiln_error(KILN_INTERNAL, "insert position %d of %d", pos, g->n_nodes);
  int first = g->n_nodes;
  KILN_TRY(kiln_opt_append_node(g, name, op_type, domain, opset, n_inputs, inputs, n_outputs, outputs));
  KILN_TRY(kiln_opt_move_tail(g, first, pos));
  if (out_index) *out_index = pos;
  return NULL;
}

kiln_status_t kiln_opt_append_node(kiln_graph *g, const char *name, const char *op_type, const char *domain, int opset,
                                   int n_inputs, const int *inputs, int n_outputs, const int *outputs) {
  int idx;
  KILN_TRY(kiln_graph_add_node(g, name, op_type, domain, n_inputs, inputs, n_outputs, outputs, &idx));
  g->nodes[idx].opset = opset;
  g->nodes[idx].op = kiln_op_find(domain, op_type);
  for (int k = 0; k < n_outputs; k++)
    if (outputs[k] >= 0) g->values[outputs[k]].producer = idx;
  return NULL;
}

kiln_status_t kiln_opt_move_tail(kiln_graph *g, int first, int pos) {
  if (first < 0 || first > g->n_nodes || pos < 0 || pos > first)
    return kiln_error(KILN_INTERNAL, "moving nodes %d.. of %d to %d", first, g->n_nodes, pos);
  size_t n_tail = (size_t)(g->n_nodes - first);
  if (n_tail && pos < first) {
    kiln_node *tail = malloc(n_tail * sizeof *tail);
    if (!tail) return KILN_OOM();
    memcpy(tail, &g->nodes[first], n_tail * sizeof *tail);
    memmove(&g->nodes[pos + n_tail], &g->nodes[pos], (size_t)(first - pos) * sizeof *tail);
    memcpy(&g->nodes[pos], tail, n_tail * sizeof *tail);
    free(tail);
  }
  fix_producers(g);
  return NULL;
}

kiln_status_t kiln_opt_rewrite_node(kiln_graph *g, int idx, const char *op_type, const char *domain, int opset,
                                    int n_inputs, const int *inputs, int n_outputs, const int *outputs) {
  kiln_node *n = &g->nodes[idx];
  char *ot = kiln_strdup(op_type), *dm = kiln_strdup(domain ? domain : "");
  int *in = malloc((size_t)(n_inputs > 0 ? n_inputs : 1) * sizeof(int));
  int *out = malloc((size_t)(n_outputs > 0 ? n_outputs : 1) * sizeof(int));
  if (!ot || !dm || !in || !out) {
    free(ot);
    free(dm);
    free(in);
    free(out);
    return KILN_OOM();
  }
  if (n_inputs) memcpy(in, inputs, (size_t)n_inputs * sizeof(int));
  if (n_outputs) memcpy(out, outputs, (size_t)n_outputs * sizeof(int));
  for (int k = 0; k < n->n_attrs; k++) kiln_attr_clear(&n->attrs[k]);
  free(n->attrs);
  n->attrs = NULL;
  n->n_attrs = 0;
  free(n->op_type);
  free(n->domain);
  free(n->inputs);
  free(n->outputs);
  n->op_type = ot;
  n->domain = dm;
  n->inputs = in;
  n->outputs = out;
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  n->opset = opset;
  n->op = kiln_op_find(dm, ot);
  fix_producers(g);
  return NULL;
}

/* Replaces an existing attribute of that name, or adds one. */
static kiln_status_t fresh_attr(kiln_node *n, const char *name, kiln_attr_type type, kiln_attr **out) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) {
      kiln_attr *a = &n->attrs[i];
      char *nm = a->name;
      a->name = NULL;
      kiln_attr_clear(a);
      a->name = nm;
      a->type = type;
      *out = a;
      return NULL;
    }
  return kiln_node_add_attr(n, name, type, out);
}

kiln_status_t kiln_opt_set_attr_int(kiln_node *n, const char *name, int64_t v) {
  kiln_attr *a;
  KILN_TRY(fresh_attr(n, name, KILN_ATTR_INT, &a));
  a->i = v;
  return NULL;
}

kiln_status_t kiln_opt_set_attr_float(kiln_node *n, const char *name, float v) {
  kiln_attr *a;
  KILN_TRY(fresh_attr(n, name, KILN_ATTR_FLOAT, &a));
  a->f = v;
  return NULL;
}

kiln_status_t kiln_opt_set_attr_string(kiln_node *n, const char *name, const char *s) {
  kiln_attr *a;
  KILN_TRY(fresh_attr(n, name, KILN_ATTR_STRING, &a));
  if (!(a->s = kiln_strdup(s))) return KILN_OOM();
  a->s_len = strlen(s);
  return NULL;
}

kiln_status_t kiln_opt_set_attr_ints(kiln_node *n, const char *name, int count, const int64_t *v) {
  kiln_attr *a;
  KILN_TRY(fresh_attr(n, name, KILN_ATTR_INTS, &a));
  if (!(a->ints = malloc((size_t)(count > 0 ? count : 1) * sizeof(int64_t)))) return KILN_OOM();
  if (count) memcpy(a->ints, v, (size_t)count * sizeof(int64_t));
  a->n = count;
  return NULL;
}

kiln_status_t kiln_opt_append_stack(kiln_graph *g, const char *name, int opset, int n, const int *ids, int64_t axis,
                                    int out) {
  int *parts = malloc((size_t)(n > 0 ? n : 1) * sizeof(int)), axes_id = -1;
  if (!parts) return KILN_OOM();
  kiln_status_t st = NULL;
  if (opset >= 13) { /* the axes are an input from opset 13 on, an attribute before */
    int64_t one = 1;
    kiln_tensor *t;
    st = kiln_tensor_new(KILN_DTYPE_I64, 1, &one, &t);
    if (!st) {
      kiln_store_i64(t->data, KILN_DTYPE_I64, 0, axis);
      st = kiln_opt_new_const(g, name, t, &axes_id);
    }
  }
  for (int k = 0; k < n && !st; k++) {
    int ins[2] = {ids[k], axes_id};
    st = kiln_opt_new_value(g, name, NULL, &parts[k]);
    if (!st) st = kiln_opt_append_node(g, name, "Unsqueeze", "", opset, opset >= 13 ? 2 : 1, ins, 1, &parts[k]);
    if (!st && opset < 13) st = kiln_opt_set_attr_ints(&g->nodes[g->n_nodes - 1], "axes", 1, &axis);
  }
  if (!st) st = kiln_opt_append_node(g, name, "Concat", "", opset, n, parts, 1, &out);
  if (!st) st = kiln_opt_set_attr_int(&g->nodes[g->n_nodes - 1], "axis", axis);
  free(parts);
  return st;
}

void kiln_opt_replace_uses(kiln_graph *g, int from, int to) {
  for (int n = 0; n < g->n_nodes; n++)
    for (int i = 0; i < g->nodes[n].n_inputs; i++)
      if (g->nodes[n].inputs[i] == from) g->nodes[n].inputs[i] = to;
}

bool kiln_opt_bypass(kiln_graph *g, const kiln_opt_uses *u, int idx, int in_id, int out_id, bool *dead) {
  if (in_id < 0 || out_id < 0 || in_id == out_id) return false;
  kiln_value_def *in = &g->values[in_id], *out = &g->values[out_id];
  if (!u->pinned[out_id]) {
    /* Readers of the output read the input instead. */
    kiln_opt_replace_uses(g, out_id, in_id);
    dead[idx] = true;
    return true;
  }
  /* The output keeps its name (graph output, or read by name from a
   * subgraph); only a graph output with no other role can take over. */
  if (out->is_graph_input || out->outer_name || !out->is_graph_output) return false;
  /* Any capture of out_id by name must still see the same value: it will. */
  if (in->producer >= 0 && !u->pinned[in_id] && in->producer != idx) {
    kiln_node *p = &g->nodes[in->producer];
    for (int k = 0; k < p->n_outputs; k++)
      if (p->outputs[k] == in_id) p->outputs[k] = out_id;
    kiln_opt_replace_uses(g, in_id, out_id);
    out->producer = in->producer;
    in->producer = -1;
    dead[idx] = true;
    return true;
  }
  const kiln_tensor *c = kiln_opt_const(g, in_id);
  if (c && !out->constant) {
    /* An initializer passed through: the output becomes that constant. */
    out->constant = kiln_tensor_retain((kiln_tensor *)c);
    out->producer = -1;
    dead[idx] = true;
    return true;
  }
  return false;
}

/* ---- the driver ------------------------------------------------------------------ */

/* A fingerprint of the graph's structure: when it stops changing, the
 * passes have reached their fixed point. */
static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t str_hash(uint64_t h, const char *s) {
  for (; s && *s; s++) h = mix(h, (unsigned char)*s);
  return mix(h, 0);
}

static uint64_t graph_fingerprint(const kiln_graph *g) {
  uint64_t h = mix(0, (uint64_t)g->n_nodes);
  h = mix(h, (uint64_t)g->n_values);
  for (int v = 0; v < g->n_values; v++) h = mix(h, (uint64_t)(uintptr_t)g->values[v].constant);
  for (int i = 0; i < g->n_outputs; i++) h = mix(h, (uint64_t)g->outputs[i]);
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    h = str_hash(h, node->op_type);
    h = str_hash(h, node->domain);
    for (int i = 0; i < node->n_inputs; i++) h = mix(h, (uint64_t)(int64_t)node->inputs[i]);
    for (int i = 0; i < node->n_outputs; i++) h = mix(h, (uint64_t)(int64_t)node->outputs[i]);
    for (int a = 0; a < node->n_attrs; a++) {
      const kiln_attr *at = &node->attrs[a];
      h = str_hash(h, at->name);
      h = mix(h, (uint64_t)at->i);
      for (int k = 0; at->ints && k < at->n; k++) h = mix(h, (uint64_t)at->ints[k]);
      if (at->g) h = mix(h, graph_fingerprint(at->g));
      for (int k = 0; at->graphs && k < at->n; k++)
        if (at->graphs[k]) h = mix(h, graph_fingerprint(at->graphs[k]));
    }
  }
  return h;
}

typedef struct named_pass {
  const char *name;
  kiln_pass_fn fn;
} named_pass;

/* Folding first (it makes shapes and weights constant), then the cleanups
 * that expose patterns, then the rewrites that need clean chains. */
static const named_pass pipeline[] = {
    {"qdq-integer", kiln_pass_qdq_integer},
    {"inline-control", kiln_pass_inline_control},
    {"widen-half", kiln_pass_widen_half}, /* before folding: the weights' Casts fold */
    {"fold-sequences", kiln_pass_fold_sequences},
    {"fold-constants", kiln_pass_fold_constants},
    {"dce", kiln_pass_dce},
    {"simplify", kiln_pass_simplify},
    {"cse", kiln_pass_cse},
    {"fold-batchnorm", kiln_pass_fold_batchnorm},
    {"resample-tables", kiln_pass_resample_tables},
    {"decompose", kiln_pass_decompose},
    {"patterns", kiln_pass_patterns},
    {"dce", kiln_pass_dce},
};

#define MAX_ROUNDS 8

kiln_status_t kiln_optimize_graph_for(kiln_graph *g, int level, const kiln_optimize_options *opts) {
  if (!g) return kiln_error(KILN_INVALID_ARGUMENT, "NULL graph");
  if (level <= 0) return NULL;
  for (int round = 0; round < MAX_ROUNDS; round++) {
    uint64_t before = graph_fingerprint(g);
    for (size_t p = 0; p < KILN_ARRAY_SIZE(pipeline); p++) {
      kiln_pass_fn fn = pipeline[p].fn;
      if (fn == kiln_pass_qdq_integer && !opts->qdq_integer) continue;
      if (fn == kiln_pass_widen_half && !opts->widen_half) continue;
      if (fn == kiln_pass_patterns && !opts->fuse_attention) fn = kiln_pass_patterns_unfused_attention;
      if (fn == kiln_pass_decompose && (opts->keep_recurrent || opts->keep_decode_attention))
        fn = !opts->keep_decode_attention ? kiln_pass_decompose_keep_recurrent
             : opts->keep_recurrent       ? kiln_pass_decompose_keep_routines
                                          : kiln_pass_decompose_keep_attention;
      KILN_RETURN_IF_ERROR(kiln_run_pass(g, pipeline[p].name, fn), "optimize round %d", round + 1);
    }
    if (graph_fingerprint(g) == before) break;
  }
  return NULL;
}

kiln_status_t kiln_optimize_graph(kiln_graph *g, int level) {
  const char *q = getenv("KILN_QDQ_INTEGER");
  kiln_optimize_options o = {.fuse_attention = true, .qdq_integer = q && !strcmp(q, "1")};
  return kiln_optimize_graph_for(g, level, &o);
}
