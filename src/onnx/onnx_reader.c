/* onnx_reader.c — ModelProto / GraphProto / NodeProto / AttributeProto /
 * ValueInfoProto into kiln's graph IR. See onnx_internal.h for the flow. */
#include "onnx/onnx_internal.h"

#include <limits.h>
#include <stdio.h>

static const uint8_t empty_buffer[1];

/* ---- name maps ------------------------------------------------------------ */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

int onnx_map_get(const onnx_name_map *m, const char *key) {
  if (!m->cap) return -1;
  size_t mask = (size_t)m->cap - 1;
  for (size_t i = hash_str(key) & mask;; i = (i + 1) & mask) {
    if (!m->keys[i]) return -1;
    if (!strcmp(m->keys[i], key)) return m->vals[i];
  }
}

static void map_insert(onnx_name_map *m, const char *key, int val) {
  size_t mask = (size_t)m->cap - 1;
  size_t i = hash_str(key) & mask;
  while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & mask;
  if (!m->keys[i]) m->count++;
  m->keys[i] = key;
  m->vals[i] = val;
}

kiln_status_t onnx_map_put(onnx_name_map *m, const char *key, int val) {
  if ((m->count + 1) * 2 > m->cap) {
    if (m->cap > INT_MAX / 4) return KILN_OOM();
    int cap = m->cap ? m->cap * 2 : 16;
    onnx_name_map n = {calloc((size_t)cap, sizeof(char *)), malloc((size_t)cap * sizeof(int)), cap, 0};
    if (!n.keys || !n.vals) {
      free(n.keys);
      free(n.vals);
      return KILN_OOM();
    }
    for (int i = 0; i < m->cap; i++)
      if (m->keys[i]) map_insert(&n, m->keys[i], m->vals[i]);
    onnx_map_free(m);
    *m = n;
  }
  map_insert(m, key, val);
  return NULL;
}

void onnx_map_free(onnx_name_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---- small helpers ---------------------------------------------------------- */

bool onnx_domain_eq(const char *a, const char *b) {
  if (!strcmp(a, "ai.onnx")) a = "";
  if (!strcmp(b, "ai.onnx")) b = "";
  return !strcmp(a, b);
}

int onnx_opset_for(const onnx_loader *L, const onnx_function *fn, const char *domain) {
  if (fn)
    for (int i = 0; i < fn->n_opsets; i++)
      if (onnx_domain_eq(fn->opsets[i].domain, domain)) return (int)KILN_MIN(fn->opsets[i].version, INT_MAX);
  for (int i = 0; i < L->n_opsets; i++)
    if (onnx_domain_eq(L->opsets[i].domain, domain)) return (int)KILN_MIN(L->opsets[i].version, INT_MAX);
  /* IR version 1/2 models predate opset_import: they are ai.onnx opset 1. */
  if (L->n_opsets == 0 && onnx_domain_eq(domain, "")) return 1;
  return 0;
}

void onnx_desc_clear(onnx_node_desc *d) {
  free(d->name);
  free(d->op_type);
  free(d->domain);
  for (int i = 0; i < d->n_inputs; i++) free(d->inputs[i]);
  for (int i = 0; i < d->n_outputs; i++) free(d->outputs[i]);
  free(d->inputs);
  free(d->outputs);
  for (int i = 0; i < d->n_attrs; i++) free(d->attrs[i].name);
  free(d->attrs);
  memset(d, 0, sizeof *d);
}

kiln_status_t onnx_desc_push(onnx_desc_list *l, onnx_node_desc *d) {
  if (l->count == l->cap) {
    if (l->cap > INT_MAX / 2) return KILN_OOM();
    int cap = l->cap ? l->cap * 2 : 16;
    onnx_node_desc *n = realloc(l->items, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    l->items = n;
    l->cap = cap;
  }
  l->items[l->count++] = *d;
  memset(d, 0, sizeof *d);
  return NULL;
}

void onnx_desc_list_free(onnx_desc_list *l) {
  for (int i = 0; i < l->count; i++) onnx_desc_clear(&l->items[i]);
  free(l->items);
  memset(l, 0, sizeof *l);
}

static onnx_slice slice_of(const pw_field *f) {
  onnx_slice s = {f->data, f->len};
  return s;
}

/* The name (field 1) and ref_attr_name (field 21) of an AttributeProto. */
kiln_status_t onnx_attr_names(onnx_loader *L, onnx_slice a, char **name, char **ref) {
  pw_reader r = pw_reader_make(L->src.base, a.p, a.len);
  pw_field f;
  bool more;
  *name = *ref = NULL;
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if (f.number == 1 || f.number == 21) {
      char **dst = f.number == 1 ? name : ref;
      st = pw_expect(&f, PW_LEN, f.number == 1 ? "name" : "ref_attr_name");
      if (!st) {
        free(*dst);
        *dst = NULL;
        st = pw_dup_string(&f, dst);
      }
    }
  }
  if (st) {
    free(*name);
    free(*ref);
    *name = *ref = NULL;
  }
  return st;
}

kiln_status_t onnx_scope_lookup_attr(const onnx_scope *s, const char *ref, onnx_slice *out, bool *found) {
  /* The function's defaults were merged into attrs when the scope was made. */
  int i = onnx_map_get(&s->attr_index, ref);
  *found = i >= 0;
  if (i >= 0) *out = s->attrs[i].proto;
  return NULL;
}

/* ---- NodeProto -> desc ------------------------------------------------------ */

static kiln_status_t node_desc_fill(onnx_loader *L, onnx_slice node, onnx_scope *scope, onnx_node_desc *d) {
  pw_reader r = pw_reader_make(L->src.base, node.p, node.len);
  pw_field f;
  bool more;
  int64_t n_in = 0, n_out = 0, n_attr = 0;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    switch (f.number) {
      case 1: KILN_TRY(pw_expect(&f, PW_LEN, "input")); n_in++; break;
      case 2: KILN_TRY(pw_expect(&f, PW_LEN, "output")); n_out++; break;
      case 3:
        KILN_TRY(pw_expect(&f, PW_LEN, "name"));
        free(d->name);
        d->name = NULL;
        KILN_TRY(pw_dup_string(&f, &d->name));
        break;
      case 4:
        KILN_TRY(pw_expect(&f, PW_LEN, "op_type"));
        free(d->op_type);
        d->op_type = NULL;
        KILN_TRY(pw_dup_string(&f, &d->op_type));
        break;
      case 5: KILN_TRY(pw_expect(&f, PW_LEN, "attribute")); n_attr++; break;
      case 7:
        KILN_TRY(pw_expect(&f, PW_LEN, "domain"));
        free(d->domain);
        d->domain = NULL;
        KILN_TRY(pw_dup_string(&f, &d->domain));
        break;
      default: break;
    }
  }
  if (!d->op_type || !d->op_type[0]) return kiln_error(KILN_INVALID_MODEL, "node has no op_type");
  if (!d->name && !(d->name = kiln_strdup(""))) return KILN_OOM();
  if (!d->domain && !(d->domain = kiln_strdup(""))) return KILN_OOM();
  if (!strcmp(d->domain, "ai.onnx")) d->domain[0] = 0;
  if (n_in > INT_MAX || n_out > INT_MAX || n_attr > INT_MAX)
    return kiln_error(KILN_INVALID_MODEL, "node has too many inputs, outputs or attributes");
  d->inputs = calloc((size_t)(n_in ? n_in : 1), sizeof(char *));
  d->outputs = calloc((size_t)(n_out ? n_out : 1), sizeof(char *));
  d->attrs = calloc((size_t)(n_attr ? n_attr : 1), sizeof *d->attrs);
  if (!d->inputs || !d->outputs || !d->attrs) return KILN_OOM();
  r = pw_reader_make(L->src.base, node.p, node.len);
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 1 && d->n_inputs < n_in) {
      KILN_TRY(pw_dup_string(&f, &d->inputs[d->n_inputs]));
      d->n_inputs++;
    } else if (f.number == 2 && d->n_outputs < n_out) {
      KILN_TRY(pw_dup_string(&f, &d->outputs[d->n_outputs]));
      d->n_outputs++;
    } else if (f.number == 5 && d->n_attrs < n_attr) {
      onnx_slice a = slice_of(&f);
      char *name, *ref;
      KILN_RETURN_IF_ERROR(onnx_attr_names(L, a, &name, &ref), "attribute #%d", d->n_attrs);
      if (!name || !name[0]) {
        free(name);
        free(ref);
        return kiln_error(KILN_INVALID_MODEL, "attribute at byte %zu has no name", f.offset);
      }
      if (ref && ref[0]) {
        bool found = false;
        kiln_status_t st = scope ? onnx_scope_lookup_attr(scope, ref, &a, &found)
                                 : kiln_error(KILN_INVALID_MODEL,
                                              "attribute '%s' refers to '%s' outside of a function body", name, ref);
        free(ref);
        if (st || !found) { /* an unset reference simply leaves the attribute out */
          free(name);
          if (st) return st;
          continue;
        }
      } else {
        free(ref);
      }
      d->attrs[d->n_attrs].name = name;
      d->attrs[d->n_attrs].proto = a;
      d->n_attrs++;
    }
  }
  return NULL;
}

kiln_status_t onnx_parse_node_desc(onnx_loader *L, onnx_slice node, size_t offset, onnx_scope *scope,
                                   onnx_node_desc *d) {
  memset(d, 0, sizeof *d);
  d->offset = offset;
  d->scope = scope;
  kiln_status_t st = node_desc_fill(L, node, scope, d);
  if (st) {
    if (d->name && d->name[0])
      st = kiln_status_annotate(st, "node '%s' (%s)", d->name, d->op_type ? d->op_type : "?");
    else
      st = kiln_status_annotate(st, "node at byte %zu (%s)", offset, d->op_type ? d->op_type : "?");
    onnx_desc_clear(d);
  }
  return st;
}

/* ---- builders ------------------------------------------------------------------- */

/* Appends a value to b->g (kiln_graph_intern_value would scan all names). */
kiln_status_t onnx_builder_new_value(onnx_builder *b, const char *name, int *out_id) {
  kiln_graph *g = b->g;
  if (g->n_values == g->cap_values) {
    if (g->cap_values > INT_MAX / 2) return KILN_OOM();
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
  kiln_status_t st = onnx_map_put(&b->names, v->name, g->n_values);
  if (st) {
    free(v->name);
    return st;
  }
  *out_id = g->n_values++;
  return NULL;
}

static kiln_status_t intern(onnx_builder *b, const char *name, int *out_id) {
  int id = onnx_map_get(&b->names, name);
  if (id >= 0) {
    *out_id = id;
    return NULL;
  }
  return onnx_builder_new_value(b, name, out_id);
}

static bool name_in_chain(const onnx_builder *b, const char *name) {
  for (; b; b = b->parent)
    if (onnx_map_get(&b->names, name) >= 0) return true;
  return false;
}

kiln_status_t onnx_builder_fresh_name(onnx_builder *b, const char *fn, const char *base, char **out) {
  for (;;) {
    char *s = kiln_strfmt("%s__%lld__%s", fn, (long long)++b->L->fresh_counter, base);
    if (!s) return KILN_OOM();
    if (!name_in_chain(b, s)) {
      *out = s;
      return NULL;
    }
    free(s);
  }
}

static kiln_status_t add_alias(onnx_builder *b, const char *name, int id) {
  if (b->n_aliases == b->cap_aliases) {
    int cap = b->cap_aliases ? b->cap_aliases * 2 : 8;
    char **n = realloc(b->aliases, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    b->aliases = n;
    b->cap_aliases = cap;
  }
  char *a = kiln_strdup(name);
  if (!a) return KILN_OOM();
  b->aliases[b->n_aliases++] = a;
  return onnx_map_put(&b->names, a, id);
}

enum { RESOLVE_ABSENT = -1, RESOLVE_UNDEFINED = -2 };

/* A name read in b: its value id, RESOLVE_ABSENT ("" or an omitted
 * optional function input) or RESOLVE_UNDEFINED. Names of enclosing graphs
 * become local values with outer_name set (captured in every graph between). */
static kiln_status_t resolve_name(onnx_builder *b, const char *name, int *out) {
  if (!name[0]) {
    *out = RESOLVE_ABSENT;
    return NULL;
  }
  int id = onnx_map_get(&b->names, name);
  if (id >= 0) {
    *out = id;
    return NULL;
  }
  *out = RESOLVE_UNDEFINED;
  if (!b->parent) return NULL;
  const char *tname = name;
  if (b->owner_scope) { /* crossing out of an inlined function body */
    int k = onnx_map_get(&b->owner_scope->rename, name);
    if (k < 0) return NULL;
    tname = b->owner_scope->targets[k];
    if (!tname[0]) {
      *out = RESOLVE_ABSENT;
      return NULL;
    }
  }
  int pid;
  KILN_TRY(resolve_name(b->parent, tname, &pid));
  if (pid < 0) {
    *out = pid;
    return NULL;
  }
  const kiln_value_def *pv = &b->parent->g->values[pid];
  char *fresh = NULL;
  const char *lname = pv->name;
  if (onnx_map_get(&b->names, lname) >= 0) {
    KILN_TRY(onnx_builder_fresh_name(b, "outer", pv->name, &fresh));
    lname = fresh;
  }
  kiln_status_t st = onnx_builder_new_value(b, lname, &id);
  free(fresh);
  KILN_TRY(st);
  kiln_value_def *v = &b->g->values[id];
  kiln_type_copy(&v->type, &b->parent->g->values[pid].type);
  v->outer_name = kiln_strdup(b->parent->g->values[pid].name);
  if (!v->outer_name) return KILN_OOM();
  if (strcmp(name, v->name)) KILN_TRY(add_alias(b, name, id));
  *out = id;
  return NULL;
}

static void builder_free(onnx_builder *b) {
  onnx_map_free(&b->names);
  for (int i = 0; i < b->n_aliases; i++) free(b->aliases[i]);
  free(b->aliases);
  for (int i = 0; i < b->n_scopes; i++) {
    onnx_scope *s = b->scopes[i];
    for (int k = 0; k < s->n_attrs; k++) free(s->attrs[k].name);
    free(s->attrs);
    onnx_map_free(&s->attr_index);
    onnx_map_free(&s->rename);
    for (int k = 0; k < s->n_targets; k++) free(s->targets[k]);
    free(s->targets);
    free(s);
  }
  free(b->scopes);
}

/* ---- ValueInfoProto ------------------------------------------------------------ */

typedef struct value_info {
  char *name;
  kiln_type type;
  const char *unsupported;
  bool has_type;
} value_info;

static void value_info_clear(value_info *vi) {
  free(vi->name);
  kiln_type_clear(&vi->type);
}

static kiln_status_t read_value_info(onnx_loader *L, onnx_slice msg, int depth, value_info *vi) {
  memset(vi, 0, sizeof *vi);
  vi->type.rank = -1;
  for (int i = 0; i < KILN_MAX_RANK; i++) vi->type.dims[i] = -1;
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if (f.number == 1) {
      st = pw_expect(&f, PW_LEN, "name");
      if (!st) {
        free(vi->name);
        vi->name = NULL;
        st = pw_dup_string(&f, &vi->name);
      }
    } else if (f.number == 2) {
      st = pw_expect(&f, PW_LEN, "type");
      if (!st) st = onnx_read_type(L, slice_of(&f), &vi->type, &vi->unsupported, 0);
      vi->has_type = true;
    }
  }
  if (!st && (!vi->name || !vi->name[0])) st = kiln_error(KILN_INVALID_MODEL, "value info has no name");
  if (st) {
    if (vi->name && vi->name[0]) st = kiln_status_annotate(st, "'%s'", vi->name);
    value_info_clear(vi);
  }
  return st;
}

/* ---- attributes ------------------------------------------------------------------ */

static kiln_status_t build_graph(onnx_loader *L, onnx_builder *parent, onnx_scope *owner_scope,
                                 onnx_scope *attr_scope, onnx_slice msg, int depth, kiln_graph **out);

static void type_to_ints(const kiln_type *t, int64_t *dst) {
  dst[0] = t->kind;
  dst[1] = t->dtype;
  dst[2] = t->rank;
  for (int i = 0; i < KILN_MAX_RANK; i++) dst[3 + i] = t->dims[i];
}

typedef struct attr_scan {
  int64_t type;
  bool has_type, has_f, has_i, has_s, has_t, has_g, has_sparse, has_tp;
  float f;
  int64_t i;
  onnx_slice s, t, g, sparse, tp;
  int64_t n_floats, n_ints, n_strings, n_tensors, n_graphs, n_sparses, n_tps;
} attr_scan;

static kiln_status_t scan_attr(onnx_loader *L, onnx_slice msg, attr_scan *a) {
  memset(a, 0, sizeof *a);
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    switch (f.number) {
      case 2: KILN_TRY(pw_expect(&f, PW_I32, "f")); a->f = pw_as_float(&f), a->has_f = true; break;
      case 3: KILN_TRY(pw_expect(&f, PW_VARINT, "i")); a->i = pw_as_i64(&f), a->has_i = true; break;
      case 4: KILN_TRY(pw_expect(&f, PW_LEN, "s")); a->s = slice_of(&f), a->has_s = true; break;
      case 5: KILN_TRY(pw_expect(&f, PW_LEN, "t")); a->t = slice_of(&f), a->has_t = true; break;
      case 6: KILN_TRY(pw_expect(&f, PW_LEN, "g")); a->g = slice_of(&f), a->has_g = true; break;
      case 7: KILN_TRY(pw_count_elems(&r, &f, PW_I32, &a->n_floats)); break;
      case 8: KILN_TRY(pw_count_elems(&r, &f, PW_VARINT, &a->n_ints)); break;
      case 9: KILN_TRY(pw_expect(&f, PW_LEN, "strings")); a->n_strings++; break;
      case 10: KILN_TRY(pw_expect(&f, PW_LEN, "tensors")); a->n_tensors++; break;
      case 11: KILN_TRY(pw_expect(&f, PW_LEN, "graphs")); a->n_graphs++; break;
      case 14: KILN_TRY(pw_expect(&f, PW_LEN, "tp")); a->tp = slice_of(&f), a->has_tp = true; break;
      case 15: KILN_TRY(pw_expect(&f, PW_LEN, "type_protos")); a->n_tps++; break;
      case 20: KILN_TRY(pw_expect(&f, PW_VARINT, "type")); a->type = pw_as_i32(&f), a->has_type = true; break;
      case 22: KILN_TRY(pw_expect(&f, PW_LEN, "sparse_tensor")); a->sparse = slice_of(&f), a->has_sparse = true; break;
      case 23: KILN_TRY(pw_expect(&f, PW_LEN, "sparse_tensors")); a->n_sparses++; break;
      default: break;
    }
  }
  return NULL;
}

static int64_t infer_attr_type(const attr_scan *a) {
  if (a->has_f) return KILN_ATTR_FLOAT;
  if (a->has_i) return KILN_ATTR_INT;
  if (a->has_s) return KILN_ATTR_STRING;
  if (a->has_t) return KILN_ATTR_TENSOR;
  if (a->has_g) return KILN_ATTR_GRAPH;
  if (a->has_sparse) return KILN_ATTR_SPARSE_TENSOR;
  if (a->has_tp) return KILN_ATTR_TYPE_PROTO;
  if (a->n_floats) return KILN_ATTR_FLOATS;
  if (a->n_ints) return KILN_ATTR_INTS;
  if (a->n_strings) return KILN_ATTR_STRINGS;
  if (a->n_tensors) return KILN_ATTR_TENSORS;
  if (a->n_graphs) return KILN_ATTR_GRAPHS;
  if (a->n_sparses) return KILN_ATTR_SPARSE_TENSORS;
  if (a->n_tps) return KILN_ATTR_TYPE_PROTOS;
  return KILN_ATTR_UNDEFINED;
}

typedef struct list_ctx {
  kiln_attr *a;
  int64_t i;
} list_ctx;

static kiln_status_t float_cb(void *c, int64_t unused, uint64_t raw) {
  list_ctx *l = c;
  if (l->i >= l->a->n) return kiln_error(KILN_INTERNAL, "float count changed");
  uint32_t b = (uint32_t)raw;
  memcpy(&l->a->floats[l->i++], &b, 4);
  return NULL;
}

static kiln_status_t int_cb(void *c, int64_t unused, uint64_t raw) {
  list_ctx *l = c;
  if (l->i >= l->a->n) return kiln_error(KILN_INTERNAL, "int count changed");
  l->a->ints[l->i++] = (int64_t)raw;
  return NULL;
}

static kiln_status_t require(bool has, const char *what) {
  return has ? NULL : kiln_error(KILN_INVALID_MODEL, "has type %s but no value", what);
}

/* Decodes the value of an attribute (its name is set by the caller). */
static kiln_status_t decode_attr(onnx_builder *b, const onnx_node_desc *d, onnx_slice msg, kiln_attr *a) {
  onnx_loader *L = b->L;
  attr_scan s;
  KILN_TRY(scan_attr(L, msg, &s));
  int64_t type = s.has_type && s.type != KILN_ATTR_UNDEFINED ? s.type : infer_attr_type(&s);
  if (type <= KILN_ATTR_UNDEFINED || type > KILN_ATTR_TYPE_PROTOS)
    return type == KILN_ATTR_UNDEFINED ? kiln_error(KILN_INVALID_MODEL, "has no value")
                                       : kiln_error(KILN_INVALID_MODEL, "unknown attribute type %lld", (long long)type);
  a->type = (kiln_attr_type)type;
  int64_t count = 0;
  switch (type) {
    case KILN_ATTR_FLOATS: count = s.n_floats; break;
    case KILN_ATTR_INTS: count = s.n_ints; break;
    case KILN_ATTR_STRINGS: count = s.n_strings; break;
    case KILN_ATTR_TENSORS: count = s.n_tensors; break;
    case KILN_ATTR_GRAPHS: count = s.n_graphs; break;
    case KILN_ATTR_SPARSE_TENSORS: count = s.n_sparses; break;
    case KILN_ATTR_TYPE_PROTOS: count = s.n_tps; break;
    default: break;
  }
  if (count > INT_MAX / ONNX_TYPE_INTS) return kiln_error(KILN_INVALID_MODEL, "has too many values");
  size_t cnt = (size_t)(count ? count : 1);
  switch (type) {
    case KILN_ATTR_FLOAT: a->f = s.f; return NULL;
    case KILN_ATTR_INT: a->i = s.i; return NULL;
    case KILN_ATTR_STRING: {
      pw_field f = {.data = s.s.p, .len = s.has_s ? s.s.len : 0};
      KILN_TRY(pw_dup_string(&f, &a->s));
      a->s_len = f.len;
      return NULL;
    }
    case KILN_ATTR_TENSOR:
      KILN_TRY(require(s.has_t, "TENSOR"));
      return onnx_read_tensor(L, s.t, &a->t, NULL);
    case KILN_ATTR_SPARSE_TENSOR:
      KILN_TRY(require(s.has_sparse, "SPARSE_TENSOR"));
      return onnx_read_sparse_tensor(L, s.sparse, &a->t, NULL);
    case KILN_ATTR_GRAPH:
      KILN_TRY(require(s.has_g, "GRAPH"));
      return build_graph(L, b, d->scope, d->scope ? d->scope : b->attr_scope, s.g, b->depth + 1, &a->g);
    case KILN_ATTR_TYPE_PROTO: {
      KILN_TRY(require(s.has_tp, "TYPE_PROTO"));
      kiln_type t;
      const char *unsupported = NULL;
      memset(&t, 0, sizeof t);
      kiln_status_t st = onnx_read_type(L, s.tp, &t, &unsupported, 0);
      if (!st) {
        a->ints = malloc(ONNX_TYPE_INTS * sizeof(int64_t));
        a->s = malloc(s.tp.len + 1);
        if (!a->ints || !a->s) {
          st = KILN_OOM();
        } else {
          type_to_ints(&t, a->ints);
          memcpy(a->s, s.tp.p, s.tp.len);
          a->s[s.tp.len] = 0;
          a->s_len = s.tp.len;
          a->n = 1;
        }
      }
      kiln_type_clear(&t);
      return st;
    }
    case KILN_ATTR_FLOATS: a->floats = malloc(cnt * sizeof(float)); break;
    case KILN_ATTR_INTS: a->ints = malloc(cnt * sizeof(int64_t)); break;
    case KILN_ATTR_STRINGS: a->strings = calloc(cnt, sizeof(char *)); break;
    case KILN_ATTR_TENSORS: case KILN_ATTR_SPARSE_TENSORS: a->tensors = calloc(cnt, sizeof(kiln_tensor *)); break;
    case KILN_ATTR_GRAPHS: a->graphs = calloc(cnt, sizeof(kiln_graph *)); break;
    case KILN_ATTR_TYPE_PROTOS: a->ints = malloc(cnt * ONNX_TYPE_INTS * sizeof(int64_t)); break;
    default: break;
  }
  if (!a->floats && !a->ints && !a->strings && !a->tensors && !a->graphs) return KILN_OOM();
  a->n = (int)count;
  /* Second pass: the list elements. `filled` counts objects made so far so
   * kiln_attr_clear frees exactly those on error. */
  int filled = 0;
  list_ctx lc = {a, 0};
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if (type == KILN_ATTR_FLOATS && f.number == 7) {
      st = pw_for_each_elem(&r, &f, PW_I32, float_cb, &lc);
    } else if (type == KILN_ATTR_INTS && f.number == 8) {
      st = pw_for_each_elem(&r, &f, PW_VARINT, int_cb, &lc);
    } else if (type == KILN_ATTR_STRINGS && f.number == 9 && filled < count) {
      st = pw_dup_string(&f, &a->strings[filled]);
      if (!st) filled++;
    } else if (type == KILN_ATTR_TENSORS && f.number == 10 && filled < count) {
      st = onnx_read_tensor(L, slice_of(&f), &a->tensors[filled], NULL);
      if (!st) filled++;
      else st = kiln_status_annotate(st, "tensor %d", filled);
    } else if (type == KILN_ATTR_SPARSE_TENSORS && f.number == 23 && filled < count) {
      st = onnx_read_sparse_tensor(L, slice_of(&f), &a->tensors[filled], NULL);
      if (!st) filled++;
      else st = kiln_status_annotate(st, "sparse tensor %d", filled);
    } else if (type == KILN_ATTR_GRAPHS && f.number == 11 && filled < count) {
      st = build_graph(L, b, d->scope, d->scope ? d->scope : b->attr_scope, slice_of(&f), b->depth + 1,
                       &a->graphs[filled]);
      if (!st) filled++;
      else st = kiln_status_annotate(st, "graph %d", filled);
    } else if (type == KILN_ATTR_TYPE_PROTOS && f.number == 15 && filled < count) {
      kiln_type t;
      const char *unsupported = NULL;
      memset(&t, 0, sizeof t);
      st = onnx_read_type(L, slice_of(&f), &t, &unsupported, 0);
      if (!st) type_to_ints(&t, a->ints + (size_t)filled++ * ONNX_TYPE_INTS);
      kiln_type_clear(&t);
    }
  }
  return st;
}

/* ---- GraphProto ------------------------------------------------------------------- */

typedef struct slice_vec {
  onnx_slice *items;
  size_t *offsets;
  int count, cap;
} slice_vec;

static kiln_status_t slice_push(slice_vec *v, const pw_field *f) {
  if (v->count == v->cap) {
    if (v->cap > INT_MAX / 2) return KILN_OOM();
    int cap = v->cap ? v->cap * 2 : 8;
    onnx_slice *n = realloc(v->items, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    v->items = n;
    size_t *o = realloc(v->offsets, (size_t)cap * sizeof *o);
    if (!o) return KILN_OOM();
    v->offsets = o;
    v->cap = cap;
  }
  v->items[v->count] = slice_of(f);
  v->offsets[v->count] = f->offset;
  v->count++;
  return NULL;
}

static void slice_vec_free(slice_vec *v) {
  free(v->items);
  free(v->offsets);
  memset(v, 0, sizeof *v);
}

typedef struct graph_parts {
  char *name;
  slice_vec nodes, inits, sparse_inits, inputs, outputs, infos;
} graph_parts;

static void graph_parts_free(graph_parts *p) {
  free(p->name);
  slice_vec_free(&p->nodes);
  slice_vec_free(&p->inits);
  slice_vec_free(&p->sparse_inits);
  slice_vec_free(&p->inputs);
  slice_vec_free(&p->outputs);
  slice_vec_free(&p->infos);
}

static kiln_status_t scan_graph(onnx_loader *L, onnx_slice msg, graph_parts *p) {
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    slice_vec *v = NULL;
    const char *what = NULL;
    switch (f.number) {
      case 1: v = &p->nodes, what = "node"; break;
      case 2:
        KILN_TRY(pw_expect(&f, PW_LEN, "name"));
        free(p->name);
        p->name = NULL;
        KILN_TRY(pw_dup_string(&f, &p->name));
        break;
      case 5: v = &p->inits, what = "initializer"; break;
      case 11: v = &p->inputs, what = "input"; break;
      case 12: v = &p->outputs, what = "output"; break;
      case 13: v = &p->infos, what = "value_info"; break;
      case 15: v = &p->sparse_inits, what = "sparse_initializer"; break;
      default: break;
    }
    if (v) {
      KILN_TRY(pw_expect(&f, PW_LEN, what));
      KILN_TRY(slice_push(v, &f));
    }
  }
  return NULL;
}

static kiln_status_t add_inputs(onnx_builder *b, const graph_parts *p, int depth) {
  for (int i = 0; i < p->inputs.count; i++) {
    value_info vi;
    KILN_RETURN_IF_ERROR(read_value_info(b->L, p->inputs.items[i], depth, &vi), "input %d", i);
    kiln_status_t st = NULL;
    if (vi.unsupported) {
      st = kiln_error(KILN_UNSUPPORTED, "input '%s': %s are not supported", vi.name, vi.unsupported);
    } else if (onnx_map_get(&b->names, vi.name) >= 0) {
      st = kiln_error(KILN_INVALID_MODEL, "input '%s' is declared twice", vi.name);
    } else {
      int id;
      st = onnx_builder_new_value(b, vi.name, &id);
      if (!st) {
        kiln_type_copy(&b->g->values[id].type, &vi.type);
        st = kiln_graph_add_input(b->g, id);
      }
    }
    value_info_clear(&vi);
    KILN_TRY(st);
  }
  return NULL;
}

static kiln_status_t add_initializer(onnx_builder *b, kiln_tensor *t, const char *name) {
  if (!name || !name[0]) return kiln_error(KILN_INVALID_MODEL, "initializer has no name");
  int id = onnx_map_get(&b->names, name);
  if (id >= 0 && (!b->g->values[id].is_graph_input || b->g->values[id].constant))
    return kiln_error(KILN_INVALID_MODEL, "initializer '%s' is declared twice", name);
  if (id < 0) KILN_TRY(onnx_builder_new_value(b, name, &id));
  kiln_value_def *v = &b->g->values[id];
  v->constant = kiln_tensor_retain(t);
  if (v->type.kind == KILN_TYPE_UNKNOWN) kiln_type_init_tensor(&v->type, t->dtype, t->rank, t->dims);
  return NULL;
}

static kiln_status_t add_initializers(onnx_builder *b, const graph_parts *p) {
  for (int k = 0; k < 2; k++) {
    const slice_vec *v = k ? &p->sparse_inits : &p->inits;
    for (int i = 0; i < v->count; i++) {
      kiln_tensor *t;
      char *name;
      kiln_status_t st = k ? onnx_read_sparse_tensor(b->L, v->items[i], &t, &name)
                           : onnx_read_tensor(b->L, v->items[i], &t, &name);
      if (st) return kiln_status_annotate(st, "%s %d", k ? "sparse initializer" : "initializer", i);
      st = add_initializer(b, t, name);
      kiln_tensor_release(t);
      free(name);
      KILN_TRY(st);
    }
  }
  return NULL;
}

static kiln_status_t collect_nodes(onnx_builder *b, const graph_parts *p, onnx_desc_list *out) {
  onnx_desc_list file = {0};
  kiln_status_t st = NULL;
  for (int i = 0; i < p->nodes.count && !st; i++) {
    onnx_node_desc d;
    st = onnx_parse_node_desc(b->L, p->nodes.items[i], p->nodes.offsets[i], b->attr_scope, &d);
    if (!st) st = onnx_desc_push(&file, &d);
  }
  /* Every name the file's nodes produce exists before any function body
   * is given fresh names, so those cannot collide with later nodes. */
  for (int i = 0; i < file.count && !st; i++)
    for (int k = 0; k < file.items[i].n_outputs && !st; k++) {
      int id;
      if (file.items[i].outputs[k][0]) st = intern(b, file.items[i].outputs[k], &id);
    }
  for (int i = 0; i < file.count && !st; i++) {
    onnx_node_desc *d = &file.items[i];
    const onnx_function *fn = onnx_find_function(b->L, d->domain, d->op_type);
    if (fn) {
      st = onnx_inline_call(b, d, fn, out, 0);
      if (st)
        st = kiln_status_annotate(st, "node '%s' (%s)", d->name[0] ? d->name : "(unnamed)", d->op_type);
    } else {
      d->opset = onnx_opset_for(b->L, NULL, d->domain);
      st = onnx_desc_push(out, d);
    }
  }
  onnx_desc_list_free(&file);
  return st;
}

static kiln_status_t add_outputs(onnx_builder *b, const graph_parts *p, int depth) {
  for (int i = 0; i < p->outputs.count; i++) {
    value_info vi;
    KILN_RETURN_IF_ERROR(read_value_info(b->L, p->outputs.items[i], depth, &vi), "output %d", i);
    int id = -1;
    kiln_status_t st = NULL;
    if (vi.unsupported) st = kiln_error(KILN_UNSUPPORTED, "%s are not supported", vi.unsupported);
    if (!st) st = resolve_name(b, vi.name, &id);
    if (!st && id < 0) st = kiln_error(KILN_INVALID_MODEL, "is not computed by any node, input or initializer");
    if (!st) {
      kiln_value_def *v = &b->g->values[id];
      if (vi.has_type && vi.type.kind != KILN_TYPE_UNKNOWN &&
          (v->type.kind == KILN_TYPE_UNKNOWN || (!v->is_graph_input && !v->constant)))
        kiln_type_copy(&v->type, &vi.type);
      st = kiln_graph_add_output(b->g, id);
    }
    if (st) st = kiln_status_annotate(st, "output '%s'", vi.name);
    value_info_clear(&vi);
    KILN_TRY(st);
  }
  return NULL;
}

static kiln_status_t apply_value_infos(onnx_builder *b, const graph_parts *p, int depth) {
  for (int i = 0; i < p->infos.count; i++) {
    value_info vi;
    KILN_RETURN_IF_ERROR(read_value_info(b->L, p->infos.items[i], depth, &vi), "value_info %d", i);
    int id = onnx_map_get(&b->names, vi.name);
    if (id >= 0 && !vi.unsupported && vi.type.kind != KILN_TYPE_UNKNOWN &&
        b->g->values[id].type.kind == KILN_TYPE_UNKNOWN)
      kiln_type_copy(&b->g->values[id].type, &vi.type);
    value_info_clear(&vi);
  }
  return NULL;
}

static kiln_status_t add_node(onnx_builder *b, const onnx_node_desc *d, int index) {
  kiln_graph *g = b->g;
  int n_in = d->n_inputs, n_out = d->n_outputs;
  int *ids = malloc((size_t)(n_in + n_out + 1) * sizeof(int));
  kiln_attr *attrs = calloc((size_t)(d->n_attrs ? d->n_attrs : 1), sizeof *attrs);
  char *auto_name = d->name[0] ? NULL : kiln_strfmt("%s_%d", d->op_type, index);
  kiln_status_t st = (!ids || !attrs || (!d->name[0] && !auto_name)) ? KILN_OOM() : NULL;
  const char *name = d->name[0] ? d->name : auto_name;
  for (int i = 0; i < n_in && !st; i++) {
    st = resolve_name(b, d->inputs[i], &ids[i]);
    if (!st && ids[i] == RESOLVE_UNDEFINED)
      st = kiln_error(KILN_INVALID_MODEL, "input %d '%s' is not defined in this graph or an enclosing one", i,
                      d->inputs[i]);
  }
  for (int i = 0; i < n_out && !st; i++) {
    ids[n_in + i] = -1;
    if (d->outputs[i][0]) {
      ids[n_in + i] = onnx_map_get(&b->names, d->outputs[i]);
      if (ids[n_in + i] < 0) st = kiln_error(KILN_INTERNAL, "output '%s' was not interned", d->outputs[i]);
    }
  }
  for (int i = 0; i < d->n_attrs && !st; i++) {
    st = decode_attr(b, d, d->attrs[i].proto, &attrs[i]);
    if (st) st = kiln_status_annotate(st, "attribute '%s'", d->attrs[i].name);
  }
  for (int i = 0; i < d->n_attrs && !st; i++)
    if (!(attrs[i].name = kiln_strdup(d->attrs[i].name))) st = KILN_OOM();
  int idx = -1;
  if (!st) st = kiln_graph_add_node(g, name, d->op_type, d->domain, n_in, ids, n_out, ids + n_in, &idx);
  if (!st) {
    /* The node owns its attribute array (kiln_node_add_attr would realloc
     * once per attribute: quadratic for hostile nodes with very many). */
    g->nodes[idx].opset = d->opset;
    g->nodes[idx].attrs = attrs;
    g->nodes[idx].n_attrs = d->n_attrs;
    attrs = NULL;
  }
  if (attrs)
    for (int i = 0; i < d->n_attrs; i++) {
      kiln_attr_clear(&attrs[i]);
    }
  if (st) st = kiln_status_annotate(st, "node '%s' (%s)", name ? name : "?", d->op_type);
  free(attrs);
  free(ids);
  free(auto_name);
  return st;
}

static kiln_status_t build_graph(onnx_loader *L, onnx_builder *parent, onnx_scope *owner_scope,
                                 onnx_scope *attr_scope, onnx_slice msg, int depth, kiln_graph **out) {
  *out = NULL;
  if (depth > ONNX_MAX_DEPTH)
    return kiln_error(KILN_INVALID_MODEL, "subgraphs nested deeper than %d", ONNX_MAX_DEPTH);
  graph_parts p;
  memset(&p, 0, sizeof p);
  onnx_builder b;
  memset(&b, 0, sizeof b);
  b.L = L;
  b.parent = parent;
  b.owner_scope = owner_scope;
  b.attr_scope = attr_scope;
  b.depth = depth;
  onnx_desc_list nodes = {0};
  kiln_status_t st = scan_graph(L, msg, &p);
  if (!st) st = kiln_graph_new(p.name ? p.name : "", parent ? parent->g : NULL, &b.g);
  if (!st) st = add_inputs(&b, &p, depth);
  if (!st) st = add_initializers(&b, &p);
  if (!st) st = collect_nodes(&b, &p, &nodes);
  if (!st) st = add_outputs(&b, &p, depth);
  if (!st) st = apply_value_infos(&b, &p, depth);
  for (int i = 0; i < nodes.count && !st; i++) st = add_node(&b, &nodes.items[i], i);
  /* (An empty graph needs no sort; graph.c would memcpy from NULL.) */
  if (!st && b.g->n_nodes) st = kiln_graph_toposort(b.g);
  if (st) {
    st = kiln_status_annotate(st, "graph '%s'", p.name && p.name[0] ? p.name : parent ? "(subgraph)" : "(main)");
    kiln_graph_free(b.g);
    b.g = NULL;
  }
  *out = b.g;
  onnx_desc_list_free(&nodes);
  builder_free(&b);
  graph_parts_free(&p);
  return st;
}

/* ---- ModelProto ------------------------------------------------------------------- */

static kiln_status_t read_opset(onnx_loader *L, onnx_slice msg, kiln_opset_import *o) {
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 1) {
      KILN_TRY(pw_expect(&f, PW_LEN, "domain"));
      free(o->domain);
      o->domain = NULL;
      KILN_TRY(pw_dup_string(&f, &o->domain));
    } else if (f.number == 2) {
      KILN_TRY(pw_expect(&f, PW_VARINT, "version"));
      o->version = pw_as_i64(&f);
    }
  }
  if (!o->domain && !(o->domain = kiln_strdup(""))) return KILN_OOM();
  if (!strcmp(o->domain, "ai.onnx")) o->domain[0] = 0;
  return NULL;
}

/* Parses an OperatorSetIdProto list (used by models and functions). */
static kiln_status_t read_opsets(onnx_loader *L, const slice_vec *v, kiln_opset_import **out, int *n_out) {
  *out = calloc((size_t)(v->count ? v->count : 1), sizeof **out);
  if (!*out) return KILN_OOM();
  *n_out = 0;
  for (int i = 0; i < v->count; i++) {
    kiln_status_t st = read_opset(L, v->items[i], &(*out)[i]);
    (*n_out)++;
    if (st) return kiln_status_annotate(st, "opset_import %d", i);
  }
  return NULL;
}

kiln_status_t onnx_read_opset_list(onnx_loader *L, const onnx_slice *items, int n, kiln_opset_import **out,
                                   int *n_out) {
  slice_vec v = {(onnx_slice *)items, NULL, n, n};
  return read_opsets(L, &v, out, n_out);
}

/* A StringStringEntryProto (metadata_props) appended to m->props. */
static kiln_status_t read_metadata_prop(onnx_loader *L, onnx_slice msg, kiln_model_ir *m) {
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  char *key = NULL, *value = NULL;
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if (f.number != 1 && f.number != 2) continue;
    char **str = f.number == 1 ? &key : &value;
    if (!(st = pw_expect(&f, PW_LEN, f.number == 1 ? "key" : "value"))) {
      free(*str);
      *str = NULL;
      st = pw_dup_string(&f, str);
    }
  }
  if (!st && !key) key = kiln_strdup("");
  if (!st && !value) value = kiln_strdup("");
  kiln_metadata_prop *grown = st ? NULL : realloc(m->props, ((size_t)m->n_props + 1) * sizeof *grown);
  if (!st && (!key || !value || !grown)) st = KILN_OOM();
  if (st) {
    free(key);
    free(value);
    return st;
  }
  m->props = grown;
  m->props[m->n_props++] = (kiln_metadata_prop){key, value};
  return NULL;
}

/* The GraphProto's doc_string (field 10), which build_graph does not keep. */
static kiln_status_t read_graph_doc_string(onnx_loader *L, onnx_slice graph, char **out) {
  pw_reader r = pw_reader_make(L->src.base, graph.p, graph.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) return NULL;
    if (f.number != 10) continue;
    KILN_TRY(pw_expect(&f, PW_LEN, "doc_string"));
    free(*out);
    *out = NULL;
    KILN_TRY(pw_dup_string(&f, out));
  }
}

static kiln_status_t read_model(onnx_loader *L, kiln_model_ir *m) {
  pw_reader r = pw_reader_make(L->src.base, L->src.base, L->src.size);
  pw_field f;
  bool more, has_graph = false;
  onnx_slice graph = {0};
  slice_vec opsets = {0}, functions = {0};
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    char **str = NULL;
    switch (f.number) {
      case 1:
        if (!(st = pw_expect(&f, PW_VARINT, "ir_version"))) m->ir_version = pw_as_i64(&f);
        break;
      case 2: str = &m->producer_name; break;
      case 3: str = &m->producer_version; break;
      case 4: str = &m->domain; break;
      case 5:
        if (!(st = pw_expect(&f, PW_VARINT, "model_version"))) m->model_version = pw_as_i64(&f);
        break;
      case 6: str = &m->doc_string; break;
      case 7:
        if (!(st = pw_expect(&f, PW_LEN, "graph"))) graph = slice_of(&f), has_graph = true;
        break;
      case 8:
        if (!(st = pw_expect(&f, PW_LEN, "opset_import"))) st = slice_push(&opsets, &f);
        break;
      case 14:
        if (!(st = pw_expect(&f, PW_LEN, "metadata_props")))
          st = read_metadata_prop(L, slice_of(&f), m);
        if (st) st = kiln_status_annotate(st, "metadata_props");
        break;
      case 25:
        if (!(st = pw_expect(&f, PW_LEN, "functions"))) st = slice_push(&functions, &f);
        break;
      default: break; /* training_info and unknown fields */
    }
    if (str && !(st = pw_expect(&f, PW_LEN, "string"))) {
      free(*str);
      *str = NULL;
      st = pw_dup_string(&f, str);
    }
  }
  if (!st) st = read_opsets(L, &opsets, &m->opsets, &m->n_opsets);
  if (!st) {
    L->opsets = m->opsets;
    L->n_opsets = m->n_opsets;
    L->functions = calloc((size_t)(functions.count ? functions.count : 1), sizeof *L->functions);
    if (!L->functions) st = KILN_OOM();
  }
  for (int i = 0; i < functions.count && !st; i++) {
    st = onnx_parse_function(L, functions.items[i], &L->functions[i]);
    if (!st) L->n_functions++;
    else st = kiln_status_annotate(st, "function %d", i);
  }
  if (!st) st = onnx_index_functions(L);
  if (!st && !has_graph) st = kiln_error(KILN_INVALID_MODEL, "the model has no graph");
  if (!st && (st = read_graph_doc_string(L, graph, &m->graph_doc_string))) st = kiln_status_annotate(st, "graph");
  if (!st) st = build_graph(L, NULL, NULL, NULL, graph, 0, &m->graph);
  slice_vec_free(&opsets);
  slice_vec_free(&functions);
  return st;
}

/* ---- public API ------------------------------------------------------------------- */

void kiln_model_ir_free(kiln_model_ir *m) {
  if (!m) return;
  kiln_graph_free(m->graph);
  free(m->producer_name);
  free(m->producer_version);
  free(m->domain);
  free(m->doc_string);
  free(m->graph_doc_string);
  for (int i = 0; i < m->n_props; i++) {
    free(m->props[i].key);
    free(m->props[i].value);
  }
  free(m->props);
  if (m->opsets)
    for (int i = 0; i < m->n_opsets; i++) free(m->opsets[i].domain);
  free(m->opsets);
  kiln_keepalive_release(m->file);
  free(m->path);
  free(m);
}

int64_t kiln_model_ir_opset(const kiln_model_ir *m, const char *domain) {
  if (!m) return -1;
  for (int i = 0; i < m->n_opsets; i++)
    if (onnx_domain_eq(m->opsets[i].domain, domain ? domain : "")) return m->opsets[i].version;
  return -1;
}

static kiln_status_t load_mapping(onnx_mapping *map, bool releasable, const char *base_dir, const char *path,
                                  kiln_model_ir **out) {
  *out = NULL;
  kiln_model_ir *m = calloc(1, sizeof *m);
  if (!m) {
    kiln_keepalive_release(&map->ka);
    return KILN_OOM();
  }
  m->file = &map->ka; /* takes the caller's reference */
  onnx_loader L;
  memset(&L, 0, sizeof L);
  L.src.base = map->size ? map->addr : empty_buffer;
  L.src.size = map->size;
  L.src.keep = &map->ka;
  L.src.releasable = releasable;
  L.base_dir = base_dir;
  kiln_status_t st = NULL;
  if (path && !(m->path = kiln_strdup(path))) st = KILN_OOM();
  if (!st) st = read_model(&L, m);
  onnx_loader_release(&L);
  if (st) {
    kiln_model_ir_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return kiln_strdup(".");
  if (slash == path) return kiln_strdup("/");
  size_t n = (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, path, n);
    d[n] = 0;
  }
  return d;
}

kiln_status_t kiln_onnx_load_file(const char *path, kiln_model_ir **out) {
  if (!path || !out) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  onnx_mapping *map;
  KILN_TRY(onnx_map_file(path, &map));
  char *dir = dir_of(path);
  if (!dir) {
    kiln_keepalive_release(&map->ka);
    return KILN_OOM();
  }
  kiln_status_t st = load_mapping(map, true, dir, path, out);
  free(dir);
  if (st) return kiln_status_annotate(st, "%s", path);
  return NULL;
}

kiln_status_t kiln_onnx_load_buffer(const void *data, size_t size, kiln_model_ir **out) {
  if (!out || (!data && size)) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  onnx_mapping *map;
  KILN_TRY(onnx_copy_buffer(data, size, &map));
  return load_mapping(map, false, NULL, NULL, out);
}

static void standalone_loader(onnx_loader *L, const void *data, size_t size, const char *base_dir) {
  memset(L, 0, sizeof *L);
  L->src.base = size ? data : empty_buffer;
  L->src.size = size;
  L->base_dir = base_dir;
}

kiln_status_t kiln_onnx_parse_tensor(const void *data, size_t size, const char *base_dir, kiln_tensor **out) {
  if (!out || (!data && size)) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  onnx_loader L;
  standalone_loader(&L, data, size, base_dir);
  onnx_slice s = {L.src.base, size};
  kiln_status_t st = onnx_read_tensor(&L, s, out, NULL);
  onnx_loader_release(&L);
  return st;
}

kiln_status_t kiln_onnx_parse_sequence(const void *data, size_t size, const char *base_dir, kiln_value **out) {
  if (!out || (!data && size)) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  onnx_loader L;
  standalone_loader(&L, data, size, base_dir);
  onnx_slice s = {L.src.base, size};
  kiln_status_t st = onnx_read_sequence(&L, s, out);
  onnx_loader_release(&L);
  return st;
}

kiln_status_t kiln_onnx_parse_optional(const void *data, size_t size, const char *base_dir, kiln_value **out) {
  if (!out || (!data && size)) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  onnx_loader L;
  standalone_loader(&L, data, size, base_dir);
  onnx_slice s = {L.src.base, size};
  kiln_status_t st = onnx_read_optional(&L, s, out);
  onnx_loader_release(&L);
  return st;
}
