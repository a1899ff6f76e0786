/* onnx_functions.c — model-local functions (ModelProto.functions), inlined
 * at import.
 *
 * Each call (a node whose domain and op_type name a function) is replaced
 * by the function's nodes. The function's formal inputs and outputs are
 * renamed to the caller's actual names, its internal values get fresh
 * names unique in the graph and its enclosing graphs, and attributes that
 * refer to the function's attributes (ref_attr_name) take the caller's
 * value, else the function's default, else are left out. Body nodes that
 * call functions are inlined the same way (bounded depth and total size).
 * Subgraphs inside a body read the body's names through the call's scope
 * (onnx_builder.owner_scope).
 */
#include "onnx/onnx_internal.h"

#include <limits.h>

void onnx_function_clear(onnx_function *f) {
  free(f->name);
  free(f->domain);
  for (int i = 0; i < f->n_inputs; i++) free(f->inputs[i]);
  for (int i = 0; i < f->n_outputs; i++) free(f->outputs[i]);
  for (int i = 0; i < f->n_attr_names; i++) free(f->attr_names[i]);
  for (int i = 0; i < f->n_defaults; i++) free(f->default_names[i]);
  free(f->inputs);
  free(f->outputs);
  free(f->attr_names);
  free(f->default_names);
  free(f->defaults);
  free(f->nodes);
  free(f->node_offsets);
  if (f->opsets)
    for (int i = 0; i < f->n_opsets; i++) free(f->opsets[i].domain);
  free(f->opsets);
  memset(f, 0, sizeof *f);
}

static kiln_status_t fill_function(onnx_loader *L, onnx_slice msg, onnx_function *fn) {
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  int64_t n_in = 0, n_out = 0, n_attr = 0, n_node = 0, n_def = 0, n_opset = 0;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    int64_t *counter = NULL;
    switch (f.number) {
      case 1:
        KILN_TRY(pw_expect(&f, PW_LEN, "name"));
        free(fn->name);
        fn->name = NULL;
        KILN_TRY(pw_dup_string(&f, &fn->name));
        break;
      case 10:
        KILN_TRY(pw_expect(&f, PW_LEN, "domain"));
        free(fn->domain);
        fn->domain = NULL;
        KILN_TRY(pw_dup_string(&f, &fn->domain));
        break;
      case 4: counter = &n_in; break;
      case 5: counter = &n_out; break;
      case 6: counter = &n_attr; break;
      case 7: counter = &n_node; break;
      case 9: counter = &n_opset; break;
      case 11: counter = &n_def; break;
      default: break;
    }
    if (counter) {
      KILN_TRY(pw_expect(&f, PW_LEN, "repeated field"));
      (*counter)++;
    }
  }
  if (!fn->name || !fn->name[0]) return kiln_error(KILN_INVALID_MODEL, "function has no name");
  if (!fn->domain && !(fn->domain = kiln_strdup(""))) return KILN_OOM();
  if (!strcmp(fn->domain, "ai.onnx")) fn->domain[0] = 0;
  if (n_in > INT_MAX || n_out > INT_MAX || n_node > INT_MAX || n_attr > INT_MAX || n_def > INT_MAX)
    return kiln_error(KILN_INVALID_MODEL, "function '%s' is too large", fn->name);
  fn->inputs = calloc((size_t)n_in + 1, sizeof(char *));
  fn->outputs = calloc((size_t)n_out + 1, sizeof(char *));
  fn->attr_names = calloc((size_t)n_attr + 1, sizeof(char *));
  fn->default_names = calloc((size_t)n_def + 1, sizeof(char *));
  fn->defaults = calloc((size_t)n_def + 1, sizeof(onnx_slice));
  fn->nodes = calloc((size_t)n_node + 1, sizeof(onnx_slice));
  fn->node_offsets = calloc((size_t)n_node + 1, sizeof(size_t));
  onnx_slice *opsets = calloc((size_t)n_opset + 1, sizeof(onnx_slice));
  if (!fn->inputs || !fn->outputs || !fn->attr_names || !fn->default_names || !fn->defaults || !fn->nodes ||
      !fn->node_offsets || !opsets) {
    free(opsets);
    return KILN_OOM();
  }
  int n_ops = 0;
  kiln_status_t st = NULL;
  r = pw_reader_make(L->src.base, msg.p, msg.len);
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    onnx_slice s = {f.data, f.len};
    switch (f.number) {
      case 4: st = pw_dup_string(&f, &fn->inputs[fn->n_inputs]), fn->n_inputs += !st; break;
      case 5: st = pw_dup_string(&f, &fn->outputs[fn->n_outputs]), fn->n_outputs += !st; break;
      case 6: st = pw_dup_string(&f, &fn->attr_names[fn->n_attr_names]), fn->n_attr_names += !st; break;
      case 7:
        fn->node_offsets[fn->n_nodes] = f.offset;
        fn->nodes[fn->n_nodes++] = s;
        break;
      case 9: opsets[n_ops++] = s; break;
      case 11: {
        char *name = NULL, *ref = NULL;
        st = onnx_attr_names(L, s, &name, &ref);
        free(ref);
        if (!st && (!name || !name[0])) st = kiln_error(KILN_INVALID_MODEL, "default attribute without a name");
        if (st) {
          free(name);
          break;
        }
        fn->default_names[fn->n_defaults] = name;
        fn->defaults[fn->n_defaults++] = s;
        break;
      }
      default: break;
    }
  }
  if (!st) st = onnx_read_opset_list(L, opsets, n_ops, &fn->opsets, &fn->n_opsets);
  free(opsets);
  return st;
}

kiln_status_t onnx_parse_function(onnx_loader *L, onnx_slice msg, onnx_function *fn) {
  memset(fn, 0, sizeof *fn);
  kiln_status_t st = fill_function(L, msg, fn);
  if (st) {
    if (fn->name) st = kiln_status_annotate(st, "function '%s'", fn->name);
    onnx_function_clear(fn);
  }
  return st;
}

kiln_status_t onnx_index_functions(onnx_loader *L) {
  L->next_same_name = malloc((size_t)(L->n_functions + 1) * sizeof(int));
  if (!L->next_same_name) return KILN_OOM();
  /* Walk backwards so each chain lists functions in file order. */
  for (int i = L->n_functions - 1; i >= 0; i--) {
    L->next_same_name[i] = onnx_map_get(&L->function_index, L->functions[i].name);
    KILN_TRY(onnx_map_put(&L->function_index, L->functions[i].name, i));
  }
  return NULL;
}

const onnx_function *onnx_find_function(const onnx_loader *L, const char *domain, const char *op_type) {
  if (!L->n_functions || !L->next_same_name) return NULL;
  for (int i = onnx_map_get(&L->function_index, op_type); i >= 0; i = L->next_same_name[i])
    if (onnx_domain_eq(L->functions[i].domain, domain)) return &L->functions[i];
  return NULL;
}

/* ---- inlining ---------------------------------------------------------------- */

static kiln_status_t scope_bind(onnx_scope *s, const char *name, const char *target) {
  if (s->n_targets == s->cap_targets) {
    if (s->cap_targets > INT_MAX / 2) return KILN_OOM();
    int cap = s->cap_targets ? s->cap_targets * 2 : 8;
    char **n = realloc(s->targets, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    s->targets = n;
    s->cap_targets = cap;
  }
  /* The key is the body name: store it right after the target so both live
   * in one allocation ("target\0name\0"). */
  size_t a = strlen(target), b = strlen(name);
  char *t = malloc(a + b + 2);
  if (!t) return KILN_OOM();
  memcpy(t, target, a + 1);
  memcpy(t + a + 1, name, b + 1);
  s->targets[s->n_targets] = t;
  kiln_status_t st = onnx_map_put(&s->rename, t + a + 1, s->n_targets);
  if (st) {
    free(t);
    return st;
  }
  s->n_targets++;
  return NULL;
}

/* attrs must have room (allocated for callers' plus defaults). */
static kiln_status_t scope_add_attr(onnx_scope *s, const char *name, onnx_slice proto) {
  if (onnx_map_get(&s->attr_index, name) >= 0) return NULL; /* the caller's value wins over a default */
  onnx_attr_ref *a = &s->attrs[s->n_attrs];
  if (!(a->name = kiln_strdup(name))) return KILN_OOM();
  a->proto = proto;
  s->n_attrs++;
  return onnx_map_put(&s->attr_index, a->name, s->n_attrs - 1);
}

static kiln_status_t new_scope(onnx_builder *b, const onnx_node_desc *call, const onnx_function *fn,
                               onnx_scope **out) {
  if (b->n_scopes == b->cap_scopes) {
    if (b->cap_scopes > INT_MAX / 2) return KILN_OOM();
    int cap = b->cap_scopes ? b->cap_scopes * 2 : 4;
    onnx_scope **n = realloc(b->scopes, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    b->scopes = n;
    b->cap_scopes = cap;
  }
  onnx_scope *s = calloc(1, sizeof *s);
  if (!s) return KILN_OOM();
  b->scopes[b->n_scopes++] = s; /* freed with the builder */
  s->fn = fn;
  s->attrs = calloc((size_t)call->n_attrs + (size_t)fn->n_defaults + 1, sizeof *s->attrs);
  if (!s->attrs) return KILN_OOM();
  for (int i = 0; i < call->n_attrs; i++) KILN_TRY(scope_add_attr(s, call->attrs[i].name, call->attrs[i].proto));
  for (int i = 0; i < fn->n_defaults; i++) KILN_TRY(scope_add_attr(s, fn->default_names[i], fn->defaults[i]));
  *out = s;
  return NULL;
}

/* Counts bytes re-read by inlining against the budget: a body node and
 * the attributes it decodes, or a call's scope (attributes + defaults). */
static kiln_status_t charge(onnx_loader *L, int n_attrs, const onnx_attr_ref *attrs, size_t node_bytes) {
  int64_t cost = (int64_t)node_bytes + 64;
  for (int i = 0; i < n_attrs; i++) cost += (int64_t)attrs[i].proto.len + 16;
  int64_t budget = (int64_t)L->src.size * ONNX_INLINE_BUDGET_FACTOR + ((int64_t)1 << 20);
  L->inlined_bytes += cost;
  if (L->inlined_bytes > budget)
    return kiln_error(KILN_INVALID_MODEL, "inlining functions expands the model past %d times its size",
                      ONNX_INLINE_BUDGET_FACTOR);
  return NULL;
}

static int index_of(char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return i;
  return -1;
}

/* Renames one body node into b's namespace. */
static kiln_status_t translate_body_node(onnx_builder *b, const onnx_node_desc *call, const onnx_function *fn,
                                         onnx_scope *s, onnx_node_desc *d, int k, bool *produced) {
  for (int i = 0; i < d->n_inputs; i++) {
    if (!d->inputs[i][0]) continue;
    int j = onnx_map_get(&s->rename, d->inputs[i]);
    if (j < 0)
      return kiln_error(KILN_INVALID_MODEL, "reads '%s', which is neither a function input nor computed by an earlier node",
                        d->inputs[i]);
    char *t = kiln_strdup(s->targets[j]);
    if (!t) return KILN_OOM();
    free(d->inputs[i]);
    d->inputs[i] = t;
  }
  for (int i = 0; i < d->n_outputs; i++) {
    const char *y = d->outputs[i];
    if (!y[0]) continue;
    if (onnx_map_get(&s->rename, y) >= 0)
      return kiln_error(KILN_INVALID_MODEL, "assigns '%s', which is a function input or assigned before", y);
    int fo = index_of(fn->outputs, fn->n_outputs, y);
    char *target = NULL;
    if (fo >= 0 && fo < call->n_outputs && call->outputs[fo][0]) {
      target = kiln_strdup(call->outputs[fo]);
      if (!target) return KILN_OOM();
    } else {
      KILN_TRY(onnx_builder_fresh_name(b, fn->name, y, &target));
    }
    if (fo >= 0) produced[fo] = true;
    int id = onnx_map_get(&b->names, target);
    kiln_status_t st = id >= 0 ? NULL : onnx_builder_new_value(b, target, &id);
    if (!st) st = scope_bind(s, y, target);
    if (st) {
      free(target);
      return st;
    }
    free(d->outputs[i]);
    d->outputs[i] = target;
  }
  const char *prefix = call->name[0] ? call->name : fn->name;
  char *name = d->name[0] ? kiln_strfmt("%s/%s", prefix, d->name) : kiln_strfmt("%s/%s_%d", prefix, d->op_type, k);
  if (!name) return KILN_OOM();
  free(d->name);
  d->name = name;
  d->opset = onnx_opset_for(b->L, fn, d->domain);
  return NULL;
}

kiln_status_t onnx_inline_call(onnx_builder *b, const onnx_node_desc *call, const onnx_function *fn,
                               onnx_desc_list *out, int depth) {
  if (depth >= ONNX_MAX_DEPTH)
    return kiln_error(KILN_INVALID_MODEL, "function calls nested deeper than %d (recursive function '%s'?)",
                      ONNX_MAX_DEPTH, fn->name);
  if (call->n_inputs > fn->n_inputs || call->n_outputs > fn->n_outputs)
    return kiln_error(KILN_INVALID_MODEL, "calls function '%s' with %d inputs and %d outputs; it takes %d and %d",
                      fn->name, call->n_inputs, call->n_outputs, fn->n_inputs, fn->n_outputs);
  onnx_scope *s;
  KILN_TRY(new_scope(b, call, fn, &s));
  KILN_TRY(charge(b->L, s->n_attrs, s->attrs, (size_t)fn->n_inputs * 8));
  for (int i = 0; i < fn->n_inputs; i++) {
    if (onnx_map_get(&s->rename, fn->inputs[i]) >= 0)
      return kiln_error(KILN_INVALID_MODEL, "function '%s' declares input '%s' twice", fn->name, fn->inputs[i]);
    if (fn->inputs[i][0]) KILN_TRY(scope_bind(s, fn->inputs[i], i < call->n_inputs ? call->inputs[i] : ""));
  }
  bool *produced = calloc((size_t)fn->n_outputs + 1, sizeof(bool));
  if (!produced) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int k = 0; k < fn->n_nodes && !st; k++) {
    onnx_node_desc d;
    st = onnx_parse_node_desc(b->L, fn->nodes[k], fn->node_offsets[k], s, &d);
    if (st) break; /* already names the node */
    st = charge(b->L, d.n_attrs, d.attrs, fn->nodes[k].len);
    if (!st) st = translate_body_node(b, call, fn, s, &d, k, produced);
    if (!st) {
      const onnx_function *g = onnx_find_function(b->L, d.domain, d.op_type);
      if (g) st = onnx_inline_call(b, &d, g, out, depth + 1);
      else st = onnx_desc_push(out, &d);
    }
    if (st) st = kiln_status_annotate(st, "node '%s' (%s)", d.name && d.name[0] ? d.name : "?",
                                         d.op_type ? d.op_type : "?");
    onnx_desc_clear(&d);
  }
  for (int i = 0; i < call->n_outputs && !st; i++)
    if (call->outputs[i][0] && !produced[i])
      st = kiln_error(KILN_INVALID_MODEL, "no node computes output '%s'", fn->outputs[i]);
  free(produced);
  if (st) st = kiln_status_annotate(st, "function '%s'", fn->name);
  return st;
}
