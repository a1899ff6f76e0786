/* Control-flow bodies as compiled plans (see plan_bodies.h). */
#include "runtime/plan_bodies.h"

#include "base/limits.h"
#include "codegen/lower.h"
#include "passes/passes.h"
#include "passes/passes_opt.h"
#include "runtime/executor.h"

/* Per closed input: value kind + 1 (0: absent), dtype, rank, dims. */
#define SIG_STRIDE (3 + KILN_MAX_RANK)

typedef struct body_spec {
  int64_t *sig;                 /* owned */
  kiln_graph *graph;            /* the closed body with the signature's types, optimized; owned */
  struct kiln_executable *exec; /* owned; NULL: runs on the interpreter, see why */
  char why[200];
  int64_t runs;
  bool general; /* some dims of sig are -1: runs of any size there fit it (sig_fits) */
} body_spec;

/* A node entry's parameter inputs (kiln_lower_is_param_input: a Reshape's
 * shape, a Slice's starts) are read when lowering, so their values are part
 * of its signature and constants of each specialization; at most this many
 * bytes each. */
#define PARAM_MAX_BYTES 256
#define PARAM_WORDS (3 + KILN_MAX_RANK + PARAM_MAX_BYTES / 8) /* dtype, numel, rank, dims, the bytes */

typedef struct body_entry {
  const kiln_node *node;  /* borrowed from the enclosing graph */
  const kiln_graph *body; /* borrowed: one of node's subgraphs; NULL for a node entry */
  const char *attr;       /* borrowed: the attribute holding it */
  /* A node entry (kiln_body_plans_run_node): `closed` is the node alone. */
  bool for_node;
  int *graph_input_of;    /* per node input: its index among closed's inputs, or -1; owned */
  int n_params;
  int *param_input;       /* per parameter: the node input it is; owned */
  int *param_value;       /* per parameter: its value in closed; owned */
  kiln_graph *closed;     /* owned: body with its outer-scope names as inputs after its own */
  int n_outer;
  int *outer_ids;         /* per outer input: the enclosing graph's value (-1: it has none); owned */
  char **outer_names;     /* borrowed from `closed`'s value names */
  body_spec specs[KILN_BODY_MAX_SIGNATURES];
  int n_specs;
  int64_t over_bound_runs; /* runs interpreted because every signature slot was taken (a node entry: or
                              a parameter did not fit one) */
} body_entry;

struct kiln_body_plans {
  kiln_device *dev;
  const kiln_graph *g;
  kiln_prepare_options opts;
  body_entry **entries;
  int n_entries;
};

kiln_status_t kiln_body_plans_create(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                     kiln_body_plans **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return KILN_OOM();
  (*out)->dev = dev;
  (*out)->g = g;
  if (opts) (*out)->opts = *opts;
  return NULL;
}

static void entry_free(kiln_device *dev, body_entry *e) {
  if (!e) return;
  for (int i = 0; i < e->n_specs; i++) {
    kiln_plan_executable_free(dev, e->specs[i].exec);
    kiln_graph_free(e->specs[i].graph);
    free(e->specs[i].sig);
  }
  kiln_graph_free(e->closed);
  free(e->graph_input_of);
  free(e->param_input);
  free(e->param_value);
  free(e->outer_ids);
  free(e->outer_names);
  free(e);
}

void kiln_body_plans_free(kiln_body_plans *bp) {
  if (!bp) return;
  for (int i = 0; i < bp->n_entries; i++) entry_free(bp->dev, bp->entries[i]);
  free(bp->entries);
  free(bp);
}

/* ---- closing a body -------------------------------------------------------------- */

static const char *attr_holding(const kiln_node *node, const kiln_graph *body) {
  for (int a = 0; a < node->n_attrs; a++) {
    const kiln_attr *at = &node->attrs[a];
    if (at->g == body) return at->name;
    for (int k = 0; at->graphs && k < at->n; k++)
      if (at->graphs[k] == body) return at->name;
  }
  return "?";
}

/* Clones body with every name read from an enclosing scope (by it or by a
 * body nested in it) made an input after its own, bound per call, or a
 * constant where the enclosing graph's value is one. */
static kiln_status_t close_body(const kiln_graph *g, body_entry *e) {
  KILN_TRY(kiln_graph_clone(e->body, NULL, &e->closed));
  kiln_graph *c = e->closed;
  kiln_ptr_vec names = {0};
  kiln_status_t st = kiln_graph_outer_names(c, &names);
  if (!st && names.count) {
    e->outer_ids = malloc((size_t)names.count * sizeof *e->outer_ids);
    e->outer_names = malloc((size_t)names.count * sizeof *e->outer_names);
    if (!e->outer_ids || !e->outer_names) st = KILN_OOM();
  }
  for (int i = 0; i < names.count && !st; i++) {
    int id = kiln_graph_find_value(c, names.items[i]);
    if (id >= 0 && !c->values[id].outer_name) continue; /* the body's own value (or already an input) */
    if (id < 0) {
      st = kiln_graph_intern_value(c, names.items[i], &id);
    } else {
      free(c->values[id].outer_name);
      c->values[id].outer_name = NULL;
    }
    int outer_id = st ? -1 : kiln_graph_find_value(g, c->values[id].name);
    const kiln_value_def *od = outer_id >= 0 ? &g->values[outer_id] : NULL;
    if (od && od->constant && !od->is_graph_input) {
      /* A weight of the enclosing plan stays a constant (folded, packed, uploaded once). */
      kiln_value_def *v = &c->values[id];
      kiln_tensor_release(v->constant);
      v->constant = kiln_tensor_retain(od->constant);
      kiln_type_init_tensor(&v->type, od->constant->dtype, od->constant->rank, od->constant->dims);
      continue;
    }
    if (!st) st = kiln_graph_add_input(c, id);
    if (st) break;
    e->outer_names[e->n_outer] = c->values[id].name;
    e->outer_ids[e->n_outer++] = outer_id;
  }
  kiln_ptr_vec_free(&names);
  return st;
}

/* A zeroed entry, with room for it in bp->entries (entry_commit adds it). */
static kiln_status_t entry_alloc(kiln_body_plans *bp, body_entry **out) {
  *out = NULL;
  body_entry **l = realloc(bp->entries, ((size_t)bp->n_entries + 1) * sizeof *l);
  if (!l) return KILN_OOM();
  bp->entries = l;
  *out = calloc(1, sizeof **out);
  return *out ? NULL : KILN_OOM();
}

/* Adds e to bp when its set-up status st is NULL, else frees it and returns st. */
static kiln_status_t entry_commit(kiln_body_plans *bp, body_entry *e, kiln_status_t st, body_entry **out) {
  if (st) {
    entry_free(bp->dev, e);
    return st;
  }
  bp->entries[bp->n_entries++] = e;
  *out = e;
  return NULL;
}

static kiln_status_t entry_for(kiln_body_plans *bp, const kiln_node *node, const kiln_graph *body,
                               body_entry **out) {
  for (int i = 0; i < bp->n_entries; i++)
    if (!bp->entries[i]->for_node && bp->entries[i]->body == body) {
      *out = bp->entries[i];
      return NULL;
    }
  body_entry *e;
  KILN_TRY(entry_alloc(bp, &e));
  e->node = node;
  e->body = body;
  e->attr = attr_holding(node, body);
  return entry_commit(bp, e, close_body(bp->g, e), out);
}

/* ---- signatures ------------------------------------------------------------------ */

static void sig_of_value(const kiln_value *v, int64_t *e) {
  memset(e, 0, SIG_STRIDE * sizeof *e);
  if (!v) return;
  e[0] = (int64_t)v->kind + 1;
  const kiln_tensor *t = v->kind == KILN_VALUE_TENSOR ? v->tensor : NULL;
  if (!t) return;
  e[1] = t->dtype;
  e[2] = t->rank;
  for (int d = 0; d < t->rank; d++) e[3 + d] = t->dims[d];
}

/* False when t is not a tensor of known dtype and shape. */
static bool sig_of_type(const kiln_type *t, int64_t *e) {
  memset(e, 0, SIG_STRIDE * sizeof *e);
  if (!kiln_opt_shape_known(t)) return false;
  e[0] = (int64_t)KILN_VALUE_TENSOR + 1;
  e[1] = t->dtype;
  e[2] = t->rank;
  for (int d = 0; d < t->rank; d++) e[3 + d] = t->dims[d];
  return true;
}

static void sig_str(const int64_t *sig, int n, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && len + 2 < size; i++) {
    const int64_t *e = sig + (size_t)i * SIG_STRIDE;
    char one[160] = "?";
    if (e[0] == (int64_t)KILN_VALUE_TENSOR + 1) {
      char shape[128];
      snprintf(one, sizeof one, "%s%s", kiln_dtype_name((kiln_dtype)e[1]),
               kiln_shape_str((int)e[2], e + 3, shape, sizeof shape));
    } else if (e[0]) {
      snprintf(one, sizeof one, "%s", e[0] == (int64_t)KILN_VALUE_SEQUENCE + 1 ? "sequence" : "optional");
    }
    len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", one);
  }
}

/* int64 words of an entry's signatures: per closed input, then per parameter. */
static size_t sig_words(const body_entry *e) {
  return (size_t)e->closed->n_inputs * SIG_STRIDE + (size_t)e->n_params * PARAM_WORDS;
}

/* ---- specializing ------------------------------------------------------------------ */

/* The closed body with the signature's tensor types, re-inferred,
 * optimized and prepared on the device; spec->exec stays NULL (with why)
 * when it cannot be compiled. Errors only for out of memory. */
static kiln_status_t specialize(kiln_body_plans *bp, body_entry *e, int64_t *sig, body_spec *spec) {
  memset(spec, 0, sizeof *spec);
  spec->sig = sig;
  kiln_graph *c = NULL;
  kiln_status_t st = kiln_graph_clone(e->closed, NULL, &c);
  for (int i = 0; c && !st && i < c->n_inputs; i++) {
    const int64_t *s = sig + (size_t)i * SIG_STRIDE;
    kiln_value_def *def = &c->values[c->inputs[i]];
    if (s[0] != (int64_t)KILN_VALUE_TENSOR + 1) continue; /* sequences, optionals: as declared */
    kiln_tensor_release(def->constant);
    kiln_tensor_release(def->known_value);
    def->constant = def->known_value = NULL;
    kiln_type_init_tensor(&def->type, (kiln_dtype)s[1], (int)s[2], s + 3);
  }
  /* A node entry's parameters: this signature's values, as constants. */
  for (int k = 0; c && !st && k < e->n_params; k++) {
    const int64_t *w = sig + (size_t)c->n_inputs * SIG_STRIDE + (size_t)k * PARAM_WORDS;
    kiln_tensor *t = NULL;
    st = kiln_tensor_new((kiln_dtype)w[0], (int)w[2], w + 3, &t);
    if (st) break;
    memcpy(t->data, w + 3 + KILN_MAX_RANK, (size_t)w[1] * kiln_dtype_size(t->dtype));
    kiln_value_def *def = &c->values[e->param_value[k]];
    kiln_tensor_release(def->constant);
    def->constant = t;
    kiln_type_init_tensor(&def->type, t->dtype, t->rank, t->dims);
  }
  /* The body's other values keep the types the enclosing graph's
   * inference gave them for its first inputs (a Loop's carried tokens of
   * length 1: the Concat after them i64[2]); inference merges into those,
   * so their dims are forgotten first and inferred for this signature. */
  for (int ni = 0; c && !st && ni < c->n_nodes; ni++)
    for (int o = 0; o < c->nodes[ni].n_outputs; o++) {
      int id = c->nodes[ni].outputs[o];
      kiln_value_def *def = id >= 0 ? &c->values[id] : NULL;
      if (!def || def->constant || def->type.kind != KILN_TYPE_TENSOR) continue;
      for (int d = 0; d < def->type.rank; d++) def->type.dims[d] = -1;
    }
  if (!st) st = kiln_run_pass(c, "infer-types", kiln_pass_infer_types);
  if (!st) st = kiln_plan_optimize_for(bp->dev, c);
  kiln_prepare_options opts = bp->opts;
  opts.precompiled_only = opts.precompiled_only || e->for_node;
  if (!st) st = kiln_plan_prepare(bp->dev, c, &opts, &spec->exec);
  spec->graph = c;
  /* A node the specialization still leaves to ref gains nothing from it,
   * and one whose shapes it still does not know would be specialized
   * again inside its own plan, without end (fuzz_pipeline: an output size
   * that the inputs' values decide). */
  if (!st && e->for_node &&
      (kiln_plan_nodes_on_ref(kiln_plan_of(spec->exec)) > 0 || kiln_plan_of(spec->exec)->n_dynamic > 0)) {
    bool unknown = kiln_plan_of(spec->exec)->n_dynamic > 0;
    kiln_plan_executable_free(bp->dev, spec->exec);
    spec->exec = NULL;
    snprintf(spec->why, sizeof spec->why, "%s",
             unknown ? "shapes not known with the run's inputs either" : "on ref with the shapes of the run too");
  }
  if (st && kiln_status_code_of(st) == KILN_OUT_OF_MEMORY) return st;
  if (st) {
    snprintf(spec->why, sizeof spec->why, "%s", kiln_status_message(st));
    kiln_status_free(st);
  }
  return NULL;
}

/* Whether a signature of one run (every dim known) fits spec signature
 * `general`: the same kinds, dtypes and ranks, and the same dims wherever
 * general's is known (a -1 there takes any). */
static bool sig_fits(const int64_t *general, const int64_t *sig, int n_inputs) {
  for (int i = 0; i < n_inputs; i++) {
    const int64_t *g = general + (size_t)i * SIG_STRIDE, *s = sig + (size_t)i * SIG_STRIDE;
    if (g[0] != s[0] || g[1] != s[1] || g[2] != s[2]) return false;
    for (int d = 0; d < KILN_MAX_RANK; d++)
      if (g[3 + d] >= 0 && g[3 + d] != s[3 + d]) return false;
  }
  return true;
}

/* The spec for a run's signature: its own, else a general one it fits,
 * else a new one. A signature that differs from an earlier spec's only in
 * some dims (a loop-carried value that grows each iteration: a greedy
 * decoder's tokens) gets a general spec with those dims unknown, so the
 * body is prepared once for all of them, not per iteration (each of those
 * a new compile, the ninth on the interpreter): the nodes whose shapes
 * then stay unknown run as host steps with the shapes of the run. */
static kiln_status_t add_spec(kiln_body_plans *bp, body_entry *e, const int64_t *sig, body_spec **out) {
  *out = NULL;
  int ni = e->closed->n_inputs;
  size_t n = sig_words(e);
  for (int i = 0; i < e->n_specs; i++)
    if (!memcmp(e->specs[i].sig, sig, n * sizeof *sig)) {
      *out = &e->specs[i];
      return NULL;
    }
  for (int i = 0; i < e->n_specs && !e->for_node; i++)
    if (e->specs[i].general && sig_fits(e->specs[i].sig, sig, ni)) {
      *out = &e->specs[i];
      return NULL;
    }
  if (e->n_specs == KILN_BODY_MAX_SIGNATURES) return NULL;
  int64_t *copy = malloc(n * sizeof *copy + 1);
  if (!copy) return KILN_OOM();
  memcpy(copy, sig, n * sizeof *copy);
  bool general = false;
  /* (a node entry's point is the shapes: it never generalizes) */
  for (int i = 0; i < e->n_specs && !general && !e->for_node; i++) {
    const int64_t *other = e->specs[i].sig;
    bool same_structure = true;
    for (int k = 0; k < ni && same_structure; k++) {
      const int64_t *a = other + (size_t)k * SIG_STRIDE, *b = sig + (size_t)k * SIG_STRIDE;
      same_structure = a[0] == b[0] && a[1] == b[1] && a[2] == b[2]; /* kind, dtype, rank */
    }
    if (!same_structure) continue;
    for (int k = 0; k < ni; k++)
      for (int d = 0; d < KILN_MAX_RANK; d++) {
        int64_t *c = copy + (size_t)k * SIG_STRIDE + 3 + d;
        if (*c != other[(size_t)k * SIG_STRIDE + 3 + d]) *c = -1, general = true;
      }
  }
  body_spec *s = &e->specs[e->n_specs];
  kiln_status_t st = specialize(bp, e, copy, s);
  s->general = general;
  e->n_specs++; /* failed or not: the signature's verdict is kept */
  *out = s;
  return st;
}

/* The body inputs' types when node runs it; false when one is unknown. */
static bool body_input_sig(const kiln_graph *g, const kiln_node *node, const kiln_graph *body, int64_t *sig) {
  int n = body->n_inputs;
  if (kiln_node_is(node, KILN_OP_If)) return n == 0;
  if (kiln_node_is(node, KILN_OP_Loop)) {
    if (n != node->n_inputs || n < 2) return false;
    kiln_type it, cond;
    memset(&it, 0, sizeof it);
    memset(&cond, 0, sizeof cond);
    kiln_type_init_tensor(&it, KILN_DTYPE_I64, 0, NULL);
    kiln_type_init_tensor(&cond, KILN_DTYPE_BOOL, 0, NULL);
    sig_of_type(&it, sig);
    sig_of_type(&cond, sig + SIG_STRIDE);
    for (int i = 2; i < n; i++)
      if (node->inputs[i] < 0 || !sig_of_type(&g->values[node->inputs[i]].type, sig + (size_t)i * SIG_STRIDE))
        return false;
    return true;
  }
  if (kiln_node_is(node, KILN_OP_Scan) && node->opset >= 9) {
    int n_scan = (int)kiln_attr_int(node, "num_scan_inputs", 0), n_state = node->n_inputs - n_scan;
    int n_axes = 0;
    const int64_t *axes = kiln_attr_ints(node, "scan_input_axes", &n_axes);
    if (n != node->n_inputs || n_scan <= 0 || n_state < 0 || (axes && n_axes != n_scan)) return false;
    for (int i = 0; i < n; i++) {
      if (node->inputs[i] < 0) return false;
      kiln_type t;
      memset(&t, 0, sizeof t);
      kiln_type_copy(&t, &g->values[node->inputs[i]].type);
      bool ok = true;
      if (i >= n_state) { /* one slice: the scan axis removed */
        int64_t ax = axes ? axes[i - n_state] : 0;
        if (ax < 0) ax += t.rank;
        ok = t.rank > 0 && ax >= 0 && ax < t.rank;
        for (int d = (int)ax; ok && d + 1 < t.rank; d++) t.dims[d] = t.dims[d + 1];
        if (ok) t.rank--;
      }
      ok = ok && sig_of_type(&t, sig + (size_t)i * SIG_STRIDE);
      kiln_type_clear(&t);
      if (!ok) return false;
    }
    return true;
  }
  return false;
}

kiln_status_t kiln_body_plans_prepare_known(kiln_body_plans *bp, const kiln_plan *plan) {
  const kiln_graph *g = bp->g;
  for (int i = 0; i < plan->n_steps; i++) {
    const kiln_node *node = plan->steps[i].node;
    if (plan->steps[i].kind != KILN_STEP_HOST || !node->op || !(node->op->flags & KILN_OP_CONTROL_FLOW)) continue;
    for (int a = 0; a < node->n_attrs; a++) {
      const kiln_graph *body = node->attrs[a].g;
      if (!body) continue;
      body_entry *e;
      KILN_TRY(entry_for(bp, node, body, &e));
      int nc = e->closed->n_inputs;
      int64_t *sig = calloc((size_t)nc * SIG_STRIDE + 1, sizeof *sig);
      if (!sig) return KILN_OOM();
      bool known = body_input_sig(g, node, body, sig);
      for (int k = 0; known && k < e->n_outer; k++)
        known = e->outer_ids[k] >= 0 &&
                sig_of_type(&g->values[e->outer_ids[k]].type, sig + (size_t)(body->n_inputs + k) * SIG_STRIDE);
      body_spec *s;
      kiln_status_t st = known ? add_spec(bp, e, sig, &s) : NULL;
      free(sig);
      KILN_TRY(st);
    }
  }
  return NULL;
}

/* ---- running ------------------------------------------------------------------------ */

kiln_status_t kiln_body_plans_run(kiln_body_plans *bp, const kiln_node *node, const kiln_graph *body, int n_inputs,
                                  kiln_value *const *inputs, int n_outputs, kiln_value **outs,
                                  kiln_outer_value_fn outer, void *user) {
  if (n_inputs != body->n_inputs)
    return kiln_error(KILN_INVALID_MODEL, "subgraph '%s' takes %d inputs, given %d", body->name, body->n_inputs,
                      n_inputs);
  if (n_outputs > body->n_outputs)
    return kiln_error(KILN_INVALID_MODEL, "subgraph '%s' has %d outputs, %d wanted", body->name, body->n_outputs,
                      n_outputs);
  /* A Loop body with no nodes still costs an iteration: check here too. */
  KILN_TRY(kiln_run_deadline_check());
  body_entry *e;
  KILN_TRY(entry_for(bp, node, body, &e));
  int nc = e->closed->n_inputs;
  kiln_value **vals = calloc((size_t)nc + 1, sizeof *vals), **owned = calloc((size_t)nc + 1, sizeof *owned);
  int64_t *sig = calloc((size_t)nc * SIG_STRIDE + 1, sizeof *sig);
  kiln_status_t st = vals && owned && sig ? NULL : KILN_OOM();
  for (int i = 0; i < n_inputs && !st; i++) vals[i] = inputs[i];
  for (int k = 0; k < e->n_outer && !st; k++) {
    if (e->outer_ids[k] < 0)
      st = kiln_error(KILN_INVALID_MODEL, "subgraph '%s' reads '%s' from an enclosing scope, where it has no value",
                      body->name, e->outer_names[k]);
    else if (!(st = outer(user, e->outer_ids[k], &owned[n_inputs + k])))
      vals[n_inputs + k] = owned[n_inputs + k];
  }
  for (int i = 0; i < nc && !st; i++) sig_of_value(vals[i], sig + (size_t)i * SIG_STRIDE);
  body_spec *s = NULL;
  if (!st) st = add_spec(bp, e, sig, &s);
  if (!st && s && s->exec) {
    s->runs++;
    st = kiln_plan_execute(bp->dev, s->exec, vals, n_outputs, outs, NULL, NULL);
  } else if (!st) {
    if (s) s->runs++;
    else e->over_bound_runs++;
    st = kiln_execute_graph(e->closed, NULL, nc, vals, n_outputs, outs, NULL);
  }
  for (int i = 0; owned && i < nc; i++) kiln_value_free(owned[i]);
  free(owned);
  free(vals);
  free(sig);
  return st;
}

/* The entry of a node specialized at run time: the node alone as a
 * graph, its parameter inputs apart. */
static kiln_status_t node_entry_for(kiln_body_plans *bp, const kiln_node *node, body_entry **out) {
  for (int i = 0; i < bp->n_entries; i++)
    if (bp->entries[i]->for_node && bp->entries[i]->node == node) {
      *out = bp->entries[i];
      return NULL;
    }
  body_entry *e;
  KILN_TRY(entry_alloc(bp, &e));
  e->node = node;
  e->for_node = true;
  e->attr = "node";
  int n_in = node->n_inputs;
  kiln_status_t st = kiln_graph_of_node(bp->g, (int)(node - bp->g->nodes), &e->closed);
  if (!st) {
    e->graph_input_of = malloc(((size_t)n_in + 1) * sizeof(int));
    e->param_input = malloc(((size_t)n_in + 1) * sizeof(int));
    e->param_value = malloc(((size_t)n_in + 1) * sizeof(int));
    if (!e->graph_input_of || !e->param_input || !e->param_value) st = KILN_OOM();
  }
  kiln_graph *c = e->closed;
  /* Parameters: plain values of the graph, their constants set per
   * signature; they leave the graph's inputs. */
  for (int i = 0; !st && i < n_in; i++) {
    int id = node->inputs[i] >= 0 ? c->nodes[0].inputs[i] : -1;
    if (id < 0 || c->values[id].constant || !kiln_lower_is_param_input(node, i)) continue;
    e->param_input[e->n_params] = i;
    e->param_value[e->n_params++] = id;
    c->values[id].is_graph_input = false;
  }
  int n = 0;
  for (int k = 0; !st && k < c->n_inputs; k++)
    if (c->values[c->inputs[k]].is_graph_input) c->inputs[n++] = c->inputs[k];
  if (!st) c->n_inputs = n;
  for (int i = 0; !st && i < n_in; i++) {
    e->graph_input_of[i] = -1;
    int id = node->inputs[i] >= 0 ? c->nodes[0].inputs[i] : -1;
    for (int k = 0; id >= 0 && k < n; k++)
      if (c->inputs[k] == id) e->graph_input_of[i] = k;
  }
  return entry_commit(bp, e, st, out);
}

/* A parameter's words of the signature; false when it cannot be one. */
static bool param_sig(const kiln_value *v, int64_t *w) {
  memset(w, 0, PARAM_WORDS * sizeof *w);
  if (!v || v->kind != KILN_VALUE_TENSOR || !v->tensor) return false;
  const kiln_tensor *t = v->tensor;
  size_t bytes = (size_t)t->numel * kiln_dtype_size(t->dtype);
  if (t->dtype == KILN_DTYPE_STRING || bytes > PARAM_MAX_BYTES) return false;
  w[0] = t->dtype;
  w[1] = t->numel;
  w[2] = t->rank;
  for (int d = 0; d < t->rank; d++) w[3 + d] = t->dims[d];
  memcpy(w + 3 + KILN_MAX_RANK, t->data, bytes);
  return true;
}

kiln_status_t kiln_body_plans_run_node(kiln_body_plans *bp, const kiln_node *node, kiln_value *const *inputs,
                                       int n_outputs, kiln_value **outs, bool *handled) {
  *handled = false;
  body_entry *e;
  KILN_TRY(node_entry_for(bp, node, &e));
  int nc = e->closed->n_inputs;
  kiln_value *vals_s[16] = {0}, **vals = nc <= 16 ? vals_s : calloc((size_t)nc, sizeof *vals);
  int64_t sig_s[16 * SIG_STRIDE + 4 * PARAM_WORDS];
  size_t words = sig_words(e);
  int64_t *sig = words <= sizeof sig_s / sizeof sig_s[0] ? sig_s : malloc(words * sizeof *sig);
  kiln_status_t st = vals && sig ? NULL : KILN_OOM();
  bool ok = !st;
  for (int i = 0; ok && i < node->n_inputs; i++)
    if (e->graph_input_of[i] >= 0) vals[e->graph_input_of[i]] = inputs[i];
  for (int i = 0; ok && i < nc; i++) {
    ok = vals[i] && vals[i]->kind == KILN_VALUE_TENSOR && vals[i]->tensor &&
         vals[i]->tensor->dtype != KILN_DTYPE_STRING; /* strings: the host step's path, as planned ones */
    if (ok) sig_of_value(vals[i], sig + (size_t)i * SIG_STRIDE);
  }
  for (int q = 0; ok && q < e->n_params; q++)
    ok = param_sig(inputs[e->param_input[q]], sig + (size_t)nc * SIG_STRIDE + (size_t)q * PARAM_WORDS);
  body_spec *s = NULL;
  if (ok) st = add_spec(bp, e, sig, &s);
  if (!st && s && s->exec) {
    s->runs++;
    *handled = true;
    st = kiln_plan_execute(bp->dev, s->exec, vals, n_outputs, outs, NULL, NULL);
  } else if (!st && s) {
    s->runs++; /* a signature the specialization leaves to ref: the host step's path */
  } else if (!st) {
    e->over_bound_runs++; /* past the bound, or a parameter too big for a signature: the host step's path */
  }
  if (vals != vals_s) free(vals);
  if (sig != sig_s) free(sig);
  return st;
}

/* ---- describing ------------------------------------------------------------------- */

void kiln_body_plans_describe(const kiln_body_plans *bp, FILE *out, int indent) {
  for (int i = 0; bp && i < bp->n_entries; i++) {
    const body_entry *e = bp->entries[i];
    for (int k = 0; k < e->n_specs; k++) {
      const body_spec *s = &e->specs[k];
      char sig[512];
      sig_str(s->sig, e->closed->n_inputs, sig, sizeof sig);
      if (e->for_node)
        fprintf(out, "%*snode '%s' (%s) specialized for [%s]: ", indent, "", e->node->name, e->node->op_type, sig);
      else
        fprintf(out, "%*sbody of %s '%s' (%s) for [%s]: ", indent, "", e->node->op_type, e->node->name, e->attr, sig);
      if (!s->exec) {
        fprintf(out, "%d nodes on ref (the interpreter): %s\n", e->closed->n_nodes, s->why);
        continue;
      }
      const kiln_plan *p = kiln_plan_of(s->exec);
      int n_ref = kiln_plan_nodes_on_ref(p), n_control = 0;
      for (int j = 0; j < p->n_steps; j++)
        n_control += p->steps[j].kind == KILN_STEP_HOST && (p->steps[j].node->op->flags & KILN_OP_CONTROL_FLOW);
      fprintf(out, "%d kernels (fusing %d nodes), %d nodes on ref", p->n_kernels, p->n_fused_nodes, n_ref);
      for (int j = 0, first = 1; j < p->n_steps; j++)
        if (kiln_plan_step_on_ref(p, &p->steps[j])) {
          fprintf(out, "%s%s", first ? " (" : ", ", p->steps[j].node->op_type);
          first = 0;
        }
      fprintf(out, "%s", n_ref ? ")" : "");
      if (p->n_routine) fprintf(out, ", %d on the device's own routines", p->n_routine);
      if (n_control) fprintf(out, ", %d control-flow nodes", n_control);
      fprintf(out, "; arena %.2f MiB\n", (double)p->arena_bytes / (1 << 20));
      kiln_body_plans_describe(kiln_plan_bodies_of(s->exec), out, indent + 2);
    }
    if (e->over_bound_runs && e->for_node)
      fprintf(out, "%*snode '%s' (%s): %lld runs on ref: more than %d signatures, or a parameter past %d bytes\n",
              indent, "", e->node->name, e->node->op_type, (long long)e->over_bound_runs, KILN_BODY_MAX_SIGNATURES,
              PARAM_MAX_BYTES);
    else if (e->over_bound_runs)
      fprintf(out, "%*sbody of %s '%s' (%s): %lld runs on ref (the interpreter): more than %d input signatures\n",
              indent, "", e->node->op_type, e->node->name, e->attr, (long long)e->over_bound_runs,
              KILN_BODY_MAX_SIGNATURES);
  }
}

void kiln_body_plans_node_summary(const kiln_body_plans *bp, FILE *out) {
  int nodes = 0, compiled = 0, specs = 0, left = 0;
  for (int i = 0; bp && i < bp->n_entries; i++) {
    const body_entry *e = bp->entries[i];
    if (!e->for_node) continue;
    bool on_ref = e->over_bound_runs > 0, ran = on_ref, ok = false;
    for (int k = 0; k < e->n_specs; k++) {
      specs += e->specs[k].exec != NULL;
      on_ref = on_ref || (!e->specs[k].exec && e->specs[k].runs);
      ok = ok || (e->specs[k].exec && e->specs[k].runs);
      ran = ran || e->specs[k].runs;
    }
    nodes += ran;
    compiled += ok;
    left += on_ref;
  }
  if (!nodes) return;
  fprintf(out, "run-time shapes: %d of %d nodes ran specialized to them (%d plans)", compiled, nodes, specs);
  if (!left) {
    fprintf(out, ", none left to ref\n");
    return;
  }
  fprintf(out, "; left to ref in some runs:\n");
  for (int i = 0; bp && i < bp->n_entries; i++) {
    const body_entry *e = bp->entries[i];
    if (!e->for_node) continue;
    const char *why = e->over_bound_runs ? "more signatures than the bound, or a parameter too big for one" : NULL;
    for (int k = 0; k < e->n_specs && !why; k++)
      if (!e->specs[k].exec && e->specs[k].runs) why = e->specs[k].why;
    if (why) fprintf(out, "  %-24s %-28s %s\n", e->node->op_type, e->node->name, why);
  }
}

void kiln_body_plans_visit(const kiln_body_plans *bp, int depth, kiln_body_visitor fn, void *user) {
  for (int i = 0; bp && i < bp->n_entries; i++) {
    const body_entry *e = bp->entries[i];
    for (int k = 0; k < e->n_specs; k++) {
      const body_spec *s = &e->specs[k];
      fn(user, depth, e->node, e->attr, s->exec ? kiln_plan_of(s->exec) : NULL, s->exec ? NULL : s->why);
      if (s->exec) kiln_body_plans_visit(kiln_plan_bodies_of(s->exec), depth + 1, fn, user);
    }
    if (e->over_bound_runs) fn(user, depth, e->node, e->attr, NULL, "more input signatures than the bound");
  }
}
