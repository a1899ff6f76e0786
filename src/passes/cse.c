/* cse: merges identical nodes. Two nodes are identical when they have the
 * same op, domain, opset, attributes (compared by value; nodes with
 * subgraph attributes are skipped) and inputs, and the same outputs
 * present; two small constant inputs with equal contents count as the
 * same input. Random ops never merge. The later node's readers move to
 * the earlier node's outputs; a later node whose outputs must keep their
 * names (graph outputs, read by name from a subgraph) stays. */
#include "passes/passes_opt.h"

#define CSE_CONTENT_BYTES ((size_t)64 << 10) /* constants compared by content up to this size */

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* Eight bytes a step: a weight of 64 KB is hashed in 8k mixes, not 64k. */
static uint64_t bytes_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = mix(h, w);
  }
  for (; i < n; i++) h = mix(h, b[i]);
  return h;
}

static uint64_t str_hash(uint64_t h, const char *s) { return bytes_hash(h, s ? s : "", s ? strlen(s) + 1 : 1); }

static bool content_comparable(const kiln_tensor *t) {
  return t->dtype != KILN_DTYPE_STRING && kiln_tensor_nbytes(t) <= CSE_CONTENT_BYTES;
}

static uint64_t tensor_hash(uint64_t h, const kiln_tensor *t) {
  h = mix(h, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->rank);
  for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->dims[d]);
  if (t->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < t->numel; i++) h = str_hash(h, ((char **)t->data)[i]);
    return h;
  }
  return bytes_hash(h, t->data, kiln_tensor_nbytes(t));
}

static bool tensor_equal(const kiln_tensor *a, const kiln_tensor *b) {
  if (a == b) return true;
  if (!a || !b || a->dtype != b->dtype || !kiln_shape_equal(a->rank, a->dims, b->rank, b->dims)) return false;
  if (a->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < a->numel; i++) {
      const char *x = ((char **)a->data)[i], *y = ((char **)b->data)[i];
      if (strcmp(x ? x : "", y ? y : "")) return false;
    }
    return true;
  }
  size_t n = kiln_tensor_nbytes(a);
  return !n || !memcmp(a->data, b->data, n);
}

/* A constant's content hash, once per value per pass: an unrolled
 * recurrence reads the same weights from hundreds of nodes. */
typedef struct const_hashes {
  uint64_t *hash; /* per value id, valid where `have` */
  bool *have;
} const_hashes;

static uint64_t input_hash(const kiln_graph *g, const_hashes *ch, uint64_t h, int id) {
  const kiln_tensor *c = id >= 0 ? kiln_opt_const(g, id) : NULL;
  if (c && content_comparable(c)) {
    if (!ch->have[id]) ch->hash[id] = tensor_hash(0, c), ch->have[id] = true;
    return mix(mix(h, 1), ch->hash[id]);
  }
  return mix(mix(h, 2), (uint64_t)(int64_t)id);
}

static bool input_equal(const kiln_graph *g, int a, int b) {
  if (a == b) return true;
  if (a < 0 || b < 0) return false;
  const kiln_tensor *x = kiln_opt_const(g, a), *y = kiln_opt_const(g, b);
  return x && y && content_comparable(x) && content_comparable(y) && tensor_equal(x, y);
}

static uint64_t attr_hash(uint64_t h, const kiln_attr *a) {
  h = str_hash(h, a->name);
  h = mix(h, (uint64_t)a->type);
  switch (a->type) {
    case KILN_ATTR_INT: return mix(h, (uint64_t)a->i);
    case KILN_ATTR_FLOAT: return bytes_hash(h, &a->f, sizeof a->f);
    case KILN_ATTR_STRING: return bytes_hash(h, a->s ? a->s : "", a->s ? a->s_len : 0);
    case KILN_ATTR_INTS: return bytes_hash(mix(h, (uint64_t)a->n), a->ints, a->ints ? (size_t)a->n * sizeof(int64_t) : 0);
    case KILN_ATTR_FLOATS: return bytes_hash(mix(h, (uint64_t)a->n), a->floats, a->floats ? (size_t)a->n * sizeof(float) : 0);
    case KILN_ATTR_TENSOR: return a->t ? tensor_hash(h, a->t) : h;
    default: return mix(h, (uint64_t)a->n);
  }
}

static bool attr_equal(const kiln_attr *a, const kiln_attr *b) {
  if (a->type != b->type || strcmp(a->name, b->name)) return false;
  switch (a->type) {
    case KILN_ATTR_INT: return a->i == b->i;
    case KILN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case KILN_ATTR_STRING:
      return a->s_len == b->s_len && (!a->s_len || (a->s && b->s && !memcmp(a->s, b->s, a->s_len)));
    case KILN_ATTR_INTS:
      return a->n == b->n && (!a->n || (a->ints && b->ints && !memcmp(a->ints, b->ints, (size_t)a->n * sizeof(int64_t))));
    case KILN_ATTR_FLOATS:
      return a->n == b->n && (!a->n || (a->floats && b->floats && !memcmp(a->floats, b->floats, (size_t)a->n * sizeof(float))));
    case KILN_ATTR_STRINGS:
      if (a->n != b->n) return false;
      for (int i = 0; i < a->n; i++) {
        const char *x = a->strings ? a->strings[i] : NULL, *y = b->strings ? b->strings[i] : NULL;
        if (strcmp(x ? x : "", y ? y : "")) return false;
      }
      return true;
    case KILN_ATTR_TENSOR: return tensor_equal(a->t, b->t);
    case KILN_ATTR_TENSORS:
      if (a->n != b->n) return false;
      for (int i = 0; i < a->n; i++)
        if (!tensor_equal(a->tensors[i], b->tensors[i])) return false;
      return true;
    default: return false; /* graphs, sparse tensors, type protos: not compared */
  }
}

static bool mergeable(const kiln_node *n) {
  if (!n->op || (n->op->flags & (KILN_OP_NONDETERMINISTIC | KILN_OP_CONTROL_FLOW))) return false;
  for (int a = 0; a < n->n_attrs; a++) {
    kiln_attr_type t = n->attrs[a].type;
    if (t == KILN_ATTR_GRAPH || t == KILN_ATTR_GRAPHS || t == KILN_ATTR_SPARSE_TENSOR ||
        t == KILN_ATTR_SPARSE_TENSORS || t == KILN_ATTR_TYPE_PROTO || t == KILN_ATTR_TYPE_PROTOS)
      return false;
  }
  return true;
}

static uint64_t node_hash(const kiln_graph *g, const_hashes *ch, const kiln_node *n) {
  uint64_t h = str_hash(str_hash(0, n->op_type), n->domain);
  h = mix(h, (uint64_t)n->opset);
  h = mix(h, (uint64_t)n->n_inputs);
  for (int i = 0; i < n->n_inputs; i++) h = input_hash(g, ch, h, n->inputs[i]);
  h = mix(h, (uint64_t)n->n_outputs);
  for (int i = 0; i < n->n_outputs; i++) h = mix(h, n->outputs[i] >= 0);
  /* Attribute order may differ: combine their hashes commutatively. */
  uint64_t ah = 0;
  for (int a = 0; a < n->n_attrs; a++) ah += attr_hash(0, &n->attrs[a]);
  return mix(mix(h, (uint64_t)n->n_attrs), ah);
}

static bool node_equal(const kiln_graph *g, const kiln_node *a, const kiln_node *b) {
  if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain) || a->opset != b->opset) return false;
  if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_attrs != b->n_attrs) return false;
  for (int i = 0; i < a->n_inputs; i++)
    if (!input_equal(g, a->inputs[i], b->inputs[i])) return false;
  for (int i = 0; i < a->n_outputs; i++)
    if ((a->outputs[i] >= 0) != (b->outputs[i] >= 0)) return false;
  for (int i = 0; i < a->n_attrs; i++) {
    const kiln_attr *other = kiln_node_attr(b, a->attrs[i].name);
    if (!other || !attr_equal(&a->attrs[i], other)) return false;
  }
  return true;
}

static kiln_status_t cse_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, cse_graph));
  if (g->n_nodes < 2) return NULL;
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  /* Open addressing over node indices, keyed by node_hash. */
  size_t cap = 16;
  while (cap < (size_t)g->n_nodes * 2) cap *= 2;
  int *table = malloc(cap * sizeof(int));
  uint64_t *hashes = malloc((size_t)g->n_nodes * sizeof(uint64_t));
  bool *dead = calloc((size_t)g->n_nodes, sizeof(bool));
  const_hashes ch = {malloc((size_t)g->n_values * sizeof(uint64_t) + 1), calloc((size_t)g->n_values + 1, sizeof(bool))};
  if (!table || !hashes || !dead || !ch.hash || !ch.have) {
    free(table);
    free(hashes);
    free(dead);
    free(ch.hash);
    free(ch.have);
    kiln_opt_uses_free(&u);
    return KILN_OOM();
  }
  for (size_t i = 0; i < cap; i++) table[i] = -1;
  bool any = false;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const kiln_node *n = &g->nodes[ni];
    if (!mergeable(n)) continue;
    uint64_t h = node_hash(g, &ch, n);
    hashes[ni] = h;
    size_t slot = (size_t)h & (cap - 1);
    int match = -1;
    for (; table[slot] >= 0; slot = (slot + 1) & (cap - 1)) {
      int j = table[slot];
      if (hashes[j] == h && node_equal(g, &g->nodes[j], n)) {
        match = j;
        break;
      }
    }
    if (match < 0) {
      table[slot] = ni;
      continue;
    }
    bool movable = true;
    for (int k = 0; k < n->n_outputs && movable; k++)
      movable = n->outputs[k] < 0 || !u.pinned[n->outputs[k]];
    if (!movable) continue;
    for (int k = 0; k < n->n_outputs; k++)
      if (n->outputs[k] >= 0) kiln_opt_replace_uses(g, n->outputs[k], g->nodes[match].outputs[k]);
    dead[ni] = any = true;
  }
  kiln_status_t st = any ? kiln_opt_remove_nodes(g, dead) : NULL;
  free(table);
  free(hashes);
  free(dead);
  free(ch.hash);
  free(ch.have);
  kiln_opt_uses_free(&u);
  return st;
}

kiln_status_t kiln_pass_cse(kiln_graph *g) { return cse_graph(g); }
