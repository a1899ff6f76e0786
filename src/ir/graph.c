#include "ir/graph.h"

#include <stdio.h>

kiln_status_t kiln_graph_new(const char *name, kiln_graph *parent, kiln_graph **out) {
  kiln_graph *g = calloc(1, sizeof *g);
  if (!g) return KILN_OOM();
  g->name = kiln_strdup(name ? name : "");
  if (!g->name) {
    free(g);
    return KILN_OOM();
  }
  g->parent = parent;
  *out = g;
  return NULL;
}

void kiln_type_clear(kiln_type *t) {
  for (int i = 0; i < KILN_MAX_RANK; i++) {
    free(t->dim_params[i]);
    t->dim_params[i] = NULL;
  }
}

void kiln_type_copy(kiln_type *dst, const kiln_type *src) {
  if (dst == src) return;
  kiln_type_clear(dst);
  *dst = *src;
  for (int i = 0; i < KILN_MAX_RANK; i++) dst->dim_params[i] = kiln_strdup(src->dim_params[i]);
}

void kiln_type_init_tensor(kiln_type *t, kiln_dtype dtype, int rank, const int64_t *dims) {
  kiln_type_clear(t);
  t->kind = KILN_TYPE_TENSOR;
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < KILN_MAX_RANK; i++) t->dims[i] = (rank > 0 && i < rank && dims) ? dims[i] : -1;
}

char *kiln_type_str(const kiln_type *t, char *buf, size_t size) {
  char shape[256];
  if (t->rank < 0)
    snprintf(shape, sizeof shape, "[?]");
  else
    kiln_shape_str(t->rank, t->dims, shape, sizeof shape);
  const char *dt = t->dtype ? kiln_dtype_name(t->dtype) : "?";
  switch (t->kind) {
    case KILN_TYPE_TENSOR: snprintf(buf, size, "%s%s", dt, shape); break;
    case KILN_TYPE_SEQUENCE: snprintf(buf, size, "seq(%s%s)", dt, shape); break;
    case KILN_TYPE_OPTIONAL_TENSOR: snprintf(buf, size, "optional(%s%s)", dt, shape); break;
    case KILN_TYPE_OPTIONAL_SEQUENCE: snprintf(buf, size, "optional(seq(%s%s))", dt, shape); break;
    default: snprintf(buf, size, "?"); break;
  }
  return buf;
}

void kiln_attr_clear(kiln_attr *a) {
  free(a->name);
  free(a->s);
  kiln_tensor_release(a->t);
  kiln_graph_free(a->g);
  free(a->floats);
  free(a->ints);
  if (a->strings)
    for (int i = 0; i < a->n; i++) free(a->strings[i]);
  free(a->strings);
  if (a->tensors)
    for (int i = 0; i < a->n; i++) kiln_tensor_release(a->tensors[i]);
  free(a->tensors);
  if (a->graphs)
    for (int i = 0; i < a->n; i++) kiln_graph_free(a->graphs[i]);
  free(a->graphs);
  memset(a, 0, sizeof *a);
}

void kiln_node_clear(kiln_node *n) {
  free(n->name);
  free(n->op_type);
  free(n->domain);
  free(n->inputs);
  free(n->outputs);
  for (int k = 0; k < n->n_attrs; k++) kiln_attr_clear(&n->attrs[k]);
  free(n->attrs);
  memset(n, 0, sizeof *n);
}

void kiln_graph_free(kiln_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) kiln_node_clear(&g->nodes[i]);
  free(g->nodes);
  for (int i = 0; i < g->n_values; i++) {
    kiln_value_def *v = &g->values[i];
    free(v->name);
    free(v->outer_name);
    kiln_type_clear(&v->type);
    kiln_tensor_release(v->constant);
    kiln_tensor_release(v->known_value);
  }
  free(g->values);
  free(g->inputs);
  free(g->outputs);
  free(g->name);
  kiln_graph_names_changed(g);
  free(g);
}

/* ---- the name index ---------------------------------------------------------------
 * Open addressing over value ids keyed by name; a name seen twice maps to
 * its latest id, as the scan from the end finds it. It covers ids
 * [0, covered) and is used only while covered == n_values: anything that
 * appends values around kiln_graph_add_value leaves it behind (lookups scan
 * until the next kiln_graph_index_names), and whatever removes or renames
 * values drops it (kiln_graph_names_changed). */
struct kiln_name_index {
  int *slots; /* value ids, -1 empty */
  size_t cap; /* a power of two, at least twice the ids */
  int covered;
};

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void index_put(const kiln_graph *g, struct kiln_name_index *ix, int id) {
  size_t slot = (size_t)name_hash(g->values[id].name) & (ix->cap - 1);
  for (; ix->slots[slot] >= 0; slot = (slot + 1) & (ix->cap - 1))
    if (!strcmp(g->values[ix->slots[slot]].name, g->values[id].name)) break;
  ix->slots[slot] = id;
}

void kiln_graph_names_changed(kiln_graph *g) {
  if (!g->name_index) return;
  free(g->name_index->slots);
  free(g->name_index);
  g->name_index = NULL;
}

void kiln_graph_index_names(kiln_graph *g) {
  struct kiln_name_index *ix = g->name_index;
  if (ix && ix->covered > g->n_values) kiln_graph_names_changed(g), ix = NULL; /* values removed */
  size_t need = 16;
  while (need < 2 * (size_t)g->n_values + 2) need *= 2;
  if (!ix || ix->cap < need) { /* (re)build at a size with room to grow */
    kiln_graph_names_changed(g);
    if (!(ix = calloc(1, sizeof *ix)) || !(ix->slots = malloc(2 * need * sizeof(int)))) {
      free(ix);
      return;
    }
    ix->cap = 2 * need;
    for (size_t i = 0; i < ix->cap; i++) ix->slots[i] = -1;
    g->name_index = ix;
  }
  for (; ix->covered < g->n_values; ix->covered++) index_put(g, ix, ix->covered);
}

int kiln_graph_find_value(const kiln_graph *g, const char *name) {
  const struct kiln_name_index *ix = g->name_index;
  if (ix && ix->covered == g->n_values) {
    for (size_t slot = (size_t)name_hash(name) & (ix->cap - 1); ix->slots[slot] >= 0; slot = (slot + 1) & (ix->cap - 1))
      if (!strcmp(g->values[ix->slots[slot]].name, name)) return ix->slots[slot];
    return -1;
  }
  for (int i = g->n_values - 1; i >= 0; i--)
    if (!strcmp(g->values[i].name, name)) return i;
  return -1;
}

kiln_status_t kiln_graph_intern_value(kiln_graph *g, const char *name, int *out_id) {
  int id = kiln_graph_find_value(g, name);
  if (id >= 0) {
    *out_id = id;
    return NULL;
  }
  return kiln_graph_add_value(g, name, out_id);
}

kiln_status_t kiln_graph_add_value(kiln_graph *g, const char *name, int *out_id) {
  if (g->n_values == g->cap_values) {
    int cap = g->cap_values ? g->cap_values * 2 : 16;
    kiln_value_def *n = realloc(g->values, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    g->values = n;
    g->cap_values = cap;
  }
  kiln_value_def *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = kiln_strdup(name);
  if (!v->name) return KILN_OOM();
  v->producer = -1;
  v->type.rank = -1;
  for (int i = 0; i < KILN_MAX_RANK; i++) v->type.dims[i] = -1;
  *out_id = g->n_values++;
  struct kiln_name_index *ix = g->name_index;
  if (ix && ix->covered == g->n_values - 1) { /* keep an up-to-date index so */
    if (2 * (size_t)g->n_values + 2 > ix->cap) kiln_graph_index_names(g); /* grows it (or drops it) */
    else index_put(g, ix, ix->covered++);
  }
  return NULL;
}

kiln_status_t kiln_graph_add_node(kiln_graph *g, const char *name, const char *op_type, const char *domain,
                                  int n_inputs, const int *inputs, int n_outputs, const int *outputs,
                                  int *out_index) {
  if (g->n_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 16;
    kiln_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    g->nodes = n;
    g->cap_nodes = cap;
  }
  if (n_inputs < 0 || n_outputs < 0) return kiln_error(KILN_INTERNAL, "negative input/output count");
  kiln_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->name = kiln_strdup(name ? name : "");
  n->op_type = kiln_strdup(op_type ? op_type : "");
  n->domain = kiln_strdup(domain ? domain : "");
  n->inputs = malloc((size_t)(n_inputs > 0 ? n_inputs : 1) * sizeof(int));
  n->outputs = malloc((size_t)(n_outputs > 0 ? n_outputs : 1) * sizeof(int));
  if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs) {
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->inputs);
    free(n->outputs);
    return KILN_OOM();
  }
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  if (n_inputs) memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof(int));
  if (n_outputs) memcpy(n->outputs, outputs, (size_t)n_outputs * sizeof(int));
  if (out_index) *out_index = g->n_nodes;
  g->n_nodes++;
  return NULL;
}

/* Arrays grow to the next power of two so appends stay amortized O(1)
 * without a separate capacity field. */
static kiln_status_t push_id(int **arr, int *n, int id) {
  int cur = *n;
  if (cur == 0 || (cur & (cur - 1)) == 0) {
    int *a = realloc(*arr, (size_t)(cur ? cur * 2 : 1) * sizeof(int));
    if (!a) return KILN_OOM();
    *arr = a;
  }
  (*arr)[(*n)++] = id;
  return NULL;
}

kiln_status_t kiln_graph_add_input(kiln_graph *g, int id) {
  g->values[id].is_graph_input = true;
  return push_id(&g->inputs, &g->n_inputs, id);
}

kiln_status_t kiln_graph_add_output(kiln_graph *g, int id) {
  g->values[id].is_graph_output = true;
  return push_id(&g->outputs, &g->n_outputs, id);
}

kiln_status_t kiln_node_add_attr(kiln_node *node, const char *name, kiln_attr_type type, kiln_attr **out) {
  kiln_attr *a = realloc(node->attrs, (size_t)(node->n_attrs + 1) * sizeof *a);
  if (!a) return KILN_OOM();
  node->attrs = a;
  kiln_attr *at = &a[node->n_attrs];
  memset(at, 0, sizeof *at);
  at->name = kiln_strdup(name);
  if (!at->name) return KILN_OOM();
  at->type = type;
  node->n_attrs++;
  *out = at;
  return NULL;
}

kiln_status_t kiln_graph_toposort(kiln_graph *g) {
  int nv = g->n_values, nn = g->n_nodes;
  for (int i = 0; i < nv; i++) g->values[i].producer = -1;
  for (int i = 0; i < nn; i++) {
    kiln_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_outputs; k++) {
      int v = n->outputs[k];
      if (v < 0) continue;
      if (g->values[v].producer >= 0)
        return kiln_error(KILN_INVALID_MODEL, "value '%s' is produced by both node '%s' and node '%s'",
                          g->values[v].name, g->nodes[g->values[v].producer].name, n->name);
      if (g->values[v].constant || g->values[v].is_graph_input)
        return kiln_error(KILN_INVALID_MODEL, "node '%s' (%s) writes '%s', which is a graph input or initializer",
                          n->name, n->op_type, g->values[v].name);
      g->values[v].producer = i;
    }
  }
  if (nn <= 0) return NULL;
  /* Kahn's algorithm with a min-heap of ready nodes, so the file's order is
   * kept when it is already valid; consumers come from a CSR list built
   * once (O((nodes + edges) log nodes)). */
  size_t nalloc = (size_t)nn;
  int *pending = calloc(nalloc, sizeof(int));
  int *order = malloc(nalloc * sizeof(int));
  int *heap = malloc(nalloc * sizeof(int));
  int *cons_start = calloc((size_t)g->n_values + 1, sizeof(int));
  int n_edges = 0;
  for (int i = 0; i < nn; i++) n_edges += g->nodes[i].n_inputs;
  int *cons = malloc(((size_t)n_edges + 1) * sizeof(int));
  int *fill = calloc((size_t)g->n_values + 1, sizeof(int));
  kiln_status_t st = NULL;
  if (!pending || !order || !heap || !cons_start || !cons || !fill) {
    st = KILN_OOM();
    goto out;
  }
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++) {
      int v = g->nodes[i].inputs[k];
      if (v < 0) continue;
      if (g->values[v].producer >= 0) pending[i]++;
      cons_start[v + 1]++;
    }
  for (int v = 0; v < g->n_values; v++) cons_start[v + 1] += cons_start[v];
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++) {
      int v = g->nodes[i].inputs[k];
      if (v >= 0) cons[cons_start[v] + fill[v]++] = i;
    }
  int hn = 0;
#define HEAP_PUSH(x)                                      \
  do {                                                    \
    int c_ = hn++;                                        \
    heap[c_] = (x);                                       \
    while (c_ > 0 && heap[(c_ - 1) / 2] > heap[c_]) {     \
      int p_ = (c_ - 1) / 2, t_ = heap[p_];               \
      heap[p_] = heap[c_];                                \
      heap[c_] = t_;                                      \
      c_ = p_;                                            \
    }                                                     \
  } while (0)
  for (int i = 0; i < nn; i++)
    if (pending[i] == 0) HEAP_PUSH(i);
  int count = 0;
  while (hn > 0) {
    int pick = heap[0];
    heap[0] = heap[--hn];
    for (int c = 0;;) {
      int l = 2 * c + 1, r = l + 1, m = c;
      if (l < hn && heap[l] < heap[m]) m = l;
      if (r < hn && heap[r] < heap[m]) m = r;
      if (m == c) break;
      int t = heap[m];
      heap[m] = heap[c];
      heap[c] = t;
      c = m;
    }
    order[count++] = pick;
    kiln_node *n = &g->nodes[pick];
    for (int k = 0; k < n->n_outputs; k++) {
      int v = n->outputs[k];
      if (v < 0) continue;
      for (int e = cons_start[v]; e < cons_start[v + 1]; e++)
        if (--pending[cons[e]] == 0) HEAP_PUSH(cons[e]);
    }
  }
#undef HEAP_PUSH
  if (count < nn) {
    int culprit = 0;
    for (int i = 0; i < nn; i++)
      if (pending[i] > 0) {
        culprit = i;
        break;
      }
    st = kiln_error(KILN_INVALID_MODEL, "the graph has a cycle through node '%s' (%s)", g->nodes[culprit].name,
                    g->nodes[culprit].op_type);
    goto out;
  }
  kiln_node *sorted = malloc(nalloc * sizeof *sorted);
  if (!sorted) {
    st = KILN_OOM();
    goto out;
  }
  for (int i = 0; i < nn; i++) sorted[i] = g->nodes[order[i]];
  memcpy(g->nodes, sorted, nalloc * sizeof *sorted);
  free(sorted);
out:
  free(pending);
  free(order);
  free(heap);
  free(cons_start);
  free(cons);
  free(fill);
  if (st) return st;
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].n_outputs; k++)
      if (g->nodes[i].outputs[k] >= 0) g->values[g->nodes[i].outputs[k]].producer = i;
  return NULL;
}

const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_INT ? a->i : dflt;
}

float kiln_attr_float(const kiln_node *n, const char *name, float dflt) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_FLOAT) return a->f;
  if (a && a->type == KILN_ATTR_INT) return (float)a->i;
  return dflt;
}

const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_STRING && a->s ? a->s : dflt;
}

const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *out_count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_INTS) {
    *out_count = a->n;
    return a->ints;
  }
  *out_count = 0;
  return NULL;
}

const float *kiln_attr_floats(const kiln_node *n, const char *name, int *out_count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_FLOATS) {
    *out_count = a->n;
    return a->floats;
  }
  *out_count = 0;
  return NULL;
}

/* ---- deep copy --------------------------------------------------------- */

static kiln_status_t clone_attr(const kiln_attr *src, kiln_attr *dst, kiln_graph *owner) {
  memset(dst, 0, sizeof *dst);
  dst->type = src->type;
  dst->f = src->f;
  dst->i = src->i;
  dst->n = src->n;
  dst->s_len = src->s_len;
  if (!(dst->name = kiln_strdup(src->name))) return KILN_OOM();
  if (src->s) {
    if (!(dst->s = malloc(src->s_len + 1))) return KILN_OOM();
    memcpy(dst->s, src->s, src->s_len + 1);
  }
  dst->t = kiln_tensor_retain(src->t);
  if (src->g) KILN_TRY(kiln_graph_clone(src->g, owner, &dst->g));
  size_t n = (size_t)(src->n > 0 ? src->n : 0);
  if (src->floats) {
    if (!(dst->floats = malloc((n ? n : 1) * sizeof(float)))) return KILN_OOM();
    memcpy(dst->floats, src->floats, n * sizeof(float));
  }
  if (src->ints) {
    if (!(dst->ints = malloc((n ? n : 1) * sizeof(int64_t)))) return KILN_OOM();
    memcpy(dst->ints, src->ints, n * sizeof(int64_t));
  }
  if (src->strings) {
    if (!(dst->strings = calloc(n ? n : 1, sizeof(char *)))) return KILN_OOM();
    for (size_t k = 0; k < n; k++)
      if (src->strings[k] && !(dst->strings[k] = kiln_strdup(src->strings[k]))) return KILN_OOM();
  }
  if (src->tensors) {
    if (!(dst->tensors = calloc(n ? n : 1, sizeof(kiln_tensor *)))) return KILN_OOM();
    for (size_t k = 0; k < n; k++) dst->tensors[k] = kiln_tensor_retain(src->tensors[k]);
  }
  if (src->graphs) {
    if (!(dst->graphs = calloc(n ? n : 1, sizeof(kiln_graph *)))) return KILN_OOM();
    for (size_t k = 0; k < n; k++) KILN_TRY(kiln_graph_clone(src->graphs[k], owner, &dst->graphs[k]));
  }
  return NULL;
}

kiln_status_t kiln_node_copy_attrs(kiln_node *dst, const kiln_node *src, kiln_graph *owner) {
  if (src->n_attrs <= 0) return NULL;
  kiln_attr *attrs = calloc((size_t)(dst->n_attrs + src->n_attrs), sizeof *attrs);
  if (!attrs) return KILN_OOM();
  if (dst->n_attrs > 0) memcpy(attrs, dst->attrs, (size_t)dst->n_attrs * sizeof *attrs);
  free(dst->attrs);
  dst->attrs = attrs;
  for (int a = 0; a < src->n_attrs; a++) {
    kiln_status_t st = clone_attr(&src->attrs[a], &dst->attrs[dst->n_attrs], owner);
    dst->n_attrs++; /* counted even on failure: kiln_node_clear frees the partial copy */
    if (st) return st;
  }
  return NULL;
}

static kiln_status_t clone_into(const kiln_graph *src, kiln_graph *g) {
  size_t nv = (size_t)(src->n_values > 0 ? src->n_values : 1);
  if (!(g->values = calloc(nv, sizeof *g->values))) return KILN_OOM();
  g->cap_values = (int)nv;
  for (int i = 0; i < src->n_values; i++) {
    const kiln_value_def *s = &src->values[i];
    kiln_value_def *d = &g->values[i];
    g->n_values = i + 1; /* counted before filling so kiln_graph_free cleans up on failure */
    d->producer = s->producer;
    d->is_graph_input = s->is_graph_input;
    d->is_graph_output = s->is_graph_output;
    d->constant = kiln_tensor_retain(s->constant);
    d->known_value = kiln_tensor_retain(s->known_value);
    kiln_type_copy(&d->type, &s->type);
    if (!(d->name = kiln_strdup(s->name))) return KILN_OOM();
    if (s->outer_name && !(d->outer_name = kiln_strdup(s->outer_name))) return KILN_OOM();
  }
  size_t nn = (size_t)(src->n_nodes > 0 ? src->n_nodes : 1);
  if (!(g->nodes = calloc(nn, sizeof *g->nodes))) return KILN_OOM();
  g->cap_nodes = (int)nn;
  for (int i = 0; i < src->n_nodes; i++) {
    const kiln_node *s = &src->nodes[i];
    kiln_node *d = &g->nodes[i];
    g->n_nodes = i + 1;
    d->opset = s->opset;
    d->op = s->op;
    d->n_inputs = s->n_inputs;
    d->n_outputs = s->n_outputs;
    d->name = kiln_strdup(s->name);
    d->op_type = kiln_strdup(s->op_type);
    d->domain = kiln_strdup(s->domain);
    d->inputs = malloc((size_t)(s->n_inputs > 0 ? s->n_inputs : 1) * sizeof(int));
    d->outputs = malloc((size_t)(s->n_outputs > 0 ? s->n_outputs : 1) * sizeof(int));
    if (!d->name || !d->op_type || !d->domain || !d->inputs || !d->outputs) return KILN_OOM();
    if (s->n_inputs > 0) memcpy(d->inputs, s->inputs, (size_t)s->n_inputs * sizeof(int));
    if (s->n_outputs > 0) memcpy(d->outputs, s->outputs, (size_t)s->n_outputs * sizeof(int));
    if (s->n_attrs > 0) {
      if (!(d->attrs = calloc((size_t)s->n_attrs, sizeof *d->attrs))) return KILN_OOM();
      for (int a = 0; a < s->n_attrs; a++) {
        d->n_attrs = a + 1;
        KILN_TRY(clone_attr(&s->attrs[a], &d->attrs[a], g));
      }
    }
  }
  /* push_id's capacity: the next power of two, so the copy can be appended to. */
  size_t ni = 1, no = 1;
  while (ni < (size_t)src->n_inputs) ni *= 2;
  while (no < (size_t)src->n_outputs) no *= 2;
  if (!(g->inputs = malloc(ni * sizeof(int))) || !(g->outputs = malloc(no * sizeof(int)))) return KILN_OOM();
  if (src->n_inputs > 0) memcpy(g->inputs, src->inputs, (size_t)src->n_inputs * sizeof(int));
  if (src->n_outputs > 0) memcpy(g->outputs, src->outputs, (size_t)src->n_outputs * sizeof(int));
  g->n_inputs = src->n_inputs;
  g->n_outputs = src->n_outputs;
  return NULL;
}

kiln_status_t kiln_graph_of_node(const kiln_graph *src, int node_index, kiln_graph **out) {
  *out = NULL;
  if (node_index < 0 || node_index >= src->n_nodes) return kiln_error(KILN_INTERNAL, "node %d out of range", node_index);
  const kiln_node *sn = &src->nodes[node_index];
  kiln_graph *g = NULL;
  KILN_TRY(kiln_graph_new(sn->name, NULL, &g));
  int *ins = calloc((size_t)sn->n_inputs + 1, sizeof *ins), *outs = calloc((size_t)sn->n_outputs + 1, sizeof *outs);
  kiln_status_t st = ins && outs ? NULL : KILN_OOM();
  for (int k = 0; k < sn->n_inputs + sn->n_outputs && !st; k++) {
    bool is_in = k < sn->n_inputs;
    int v = is_in ? sn->inputs[k] : sn->outputs[k - sn->n_inputs], id = -1;
    if (v >= 0) {
      const kiln_value_def *sv = &src->values[v];
      int before = g->n_values;
      st = kiln_graph_intern_value(g, sv->name, &id);
      if (!st && g->n_values > before) {
        kiln_value_def *d = &g->values[id];
        kiln_type_copy(&d->type, &sv->type);
        d->constant = kiln_tensor_retain(sv->constant);
      }
    }
    if (is_in) ins[k] = id;
    else outs[k - sn->n_inputs] = id;
  }
  int ni = -1;
  if (!st)
    st = kiln_graph_add_node(g, sn->name, sn->op_type, sn->domain, sn->n_inputs, ins, sn->n_outputs, outs, &ni);
  if (!st) {
    kiln_node *d = &g->nodes[ni];
    d->opset = sn->opset;
    d->op = sn->op;
    if (sn->n_attrs > 0 && !(d->attrs = calloc((size_t)sn->n_attrs, sizeof *d->attrs))) st = KILN_OOM();
    for (int a = 0; a < sn->n_attrs && !st; a++) {
      d->n_attrs = a + 1;
      st = clone_attr(&sn->attrs[a], &d->attrs[a], g);
    }
  }
  /* Inputs: each distinct value that is not a constant, in the node's order. */
  for (int k = 0; k < sn->n_inputs && !st; k++) {
    int id = ins[k];
    if (id < 0 || g->values[id].constant || g->values[id].is_graph_input) continue;
    st = kiln_graph_add_input(g, id);
  }
  for (int k = 0; k < sn->n_outputs && !st; k++)
    if (outs[k] >= 0) st = kiln_graph_add_output(g, outs[k]);
  if (!st) st = kiln_graph_toposort(g);
  free(ins);
  free(outs);
  if (st) {
    kiln_graph_free(g);
    return st;
  }
  *out = g;
  return NULL;
}

kiln_status_t kiln_graph_clone(const kiln_graph *src, kiln_graph *parent, kiln_graph **out) {
  *out = NULL;
  kiln_graph *g = NULL;
  KILN_TRY(kiln_graph_new(src->name, parent, &g));
  kiln_status_t st = clone_into(src, g);
  if (st) {
    kiln_graph_free(g);
    return st;
  }
  *out = g;
  return NULL;
}
