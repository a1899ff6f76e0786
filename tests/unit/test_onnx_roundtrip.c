/* test_onnx_roundtrip.c — the ONNX reader and writer.
 *
 * - node-test models load, serialize, reload and compare equal (structure,
 *   attributes, initializer bytes); onnx.checker accepts what we write
 *   (SKIP printed when python3 + onnx are missing);
 * - a hand-built model with every attribute kind round-trips;
 * - model-local functions are inlined (renaming, attribute references,
 *   defaults, nested calls, subgraphs reading the body's names);
 * - external data loads (zero copy when aligned) and escaping paths fail;
 * - hostile inputs (truncations, byte flips, huge/negative dims, deep
 *   nesting) fail cleanly with messages that say where;
 * - a 100 MB model loads with peak RSS < 1.3x its size (in a fresh process).
 *
 * Exit status 0 on success; every failure prints a line starting "FAIL".
 */
#include "onnx/onnx.h"
#include "onnx/protowire.h"

#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA "/usr/share/libonnx-testdata/data/node"

static int failures;
/* Inlined function bodies may use their own opset imports, which a written
 * model cannot express per node: their round trip skips the opset check. */
static bool compare_opsets = true;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      failures++;                                          \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);          \
      printf(__VA_ARGS__);                                 \
      printf("\n");                                        \
    }                                                      \
  } while (0)

/* Consumes st; true if OK. */
static bool ok(kiln_status_t st, const char *what) {
  if (!st) return true;
  failures++;
  printf("FAIL %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  return false;
}

static bool file_exists(const char *p) {
  struct stat s;
  return stat(p, &s) == 0;
}

static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long s = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *d = malloc((size_t)s + 1);
  *n = d ? fread(d, 1, (size_t)s, f) : 0;
  fclose(f);
  return d;
}

/* ---- structural comparison ------------------------------------------------ */

static const char *vname(const kiln_graph *g, int id) {
  if (id < 0) return "";
  return g->values[id].outer_name ? g->values[id].outer_name : g->values[id].name;
}

static bool tensor_eq(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b) return a == b;
  if (a->dtype != b->dtype || !kiln_shape_equal(a->rank, a->dims, b->rank, b->dims)) return false;
  if (a->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < a->numel; i++) {
      const char *x = ((char **)a->data)[i], *y = ((char **)b->data)[i];
      if (strcmp(x ? x : "", y ? y : "")) return false;
    }
    return true;
  }
  return !a->numel || !memcmp(a->data, b->data, kiln_tensor_nbytes(a));
}

static bool type_eq(const kiln_type *a, const kiln_type *b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++) {
    if (a->dims[i] != b->dims[i]) return false;
    if (strcmp(a->dim_params[i] ? a->dim_params[i] : "", b->dim_params[i] ? b->dim_params[i] : "")) return false;
  }
  return true;
}

static bool graph_eq(const kiln_graph *a, const kiln_graph *b, const char *ctx);

static bool attr_eq(const kiln_attr *a, const kiln_attr *b, const char *ctx) {
  if (strcmp(a->name, b->name) || a->type != b->type) {
    printf("  %s: attribute %s/%d vs %s/%d\n", ctx, a->name, a->type, b->name, b->type);
    return false;
  }
  bool same = true;
  switch (a->type) {
    case KILN_ATTR_FLOAT: same = !memcmp(&a->f, &b->f, sizeof a->f); break;
    case KILN_ATTR_INT: same = a->i == b->i; break;
    case KILN_ATTR_STRING: same = a->s_len == b->s_len && !memcmp(a->s, b->s, a->s_len); break;
    case KILN_ATTR_TENSOR: case KILN_ATTR_SPARSE_TENSOR: same = tensor_eq(a->t, b->t); break;
    case KILN_ATTR_GRAPH: same = graph_eq(a->g, b->g, a->name); break;
    case KILN_ATTR_FLOATS: same = a->n == b->n && !memcmp(a->floats, b->floats, (size_t)a->n * sizeof(float)); break;
    case KILN_ATTR_INTS: same = a->n == b->n && !memcmp(a->ints, b->ints, (size_t)a->n * sizeof(int64_t)); break;
    case KILN_ATTR_STRINGS:
      same = a->n == b->n;
      for (int i = 0; same && i < a->n; i++) same = !strcmp(a->strings[i], b->strings[i]);
      break;
    case KILN_ATTR_TENSORS: case KILN_ATTR_SPARSE_TENSORS:
      same = a->n == b->n;
      for (int i = 0; same && i < a->n; i++) same = tensor_eq(a->tensors[i], b->tensors[i]);
      break;
    case KILN_ATTR_GRAPHS:
      same = a->n == b->n;
      for (int i = 0; same && i < a->n; i++) same = graph_eq(a->graphs[i], b->graphs[i], a->name);
      break;
    case KILN_ATTR_TYPE_PROTO: case KILN_ATTR_TYPE_PROTOS:
      /* ONNX_TYPE_INTS (3 + KILN_MAX_RANK) numbers per type */
      same = a->n == b->n && !memcmp(a->ints, b->ints, (size_t)a->n * (3 + KILN_MAX_RANK) * sizeof(int64_t));
      break;
    default: same = false;
  }
  if (!same) printf("  %s: attribute '%s' differs\n", ctx, a->name);
  return same;
}

static bool graph_eq(const kiln_graph *a, const kiln_graph *b, const char *ctx) {
  if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_nodes != b->n_nodes) {
    printf("  %s: graph '%s' has %d/%d/%d inputs/outputs/nodes, reloaded %d/%d/%d\n", ctx, a->name, a->n_inputs,
           a->n_outputs, a->n_nodes, b->n_inputs, b->n_outputs, b->n_nodes);
    return false;
  }
  for (int i = 0; i < a->n_inputs; i++)
    if (strcmp(vname(a, a->inputs[i]), vname(b, b->inputs[i])) ||
        !type_eq(&a->values[a->inputs[i]].type, &b->values[b->inputs[i]].type)) {
      printf("  %s: input %d differs\n", ctx, i);
      return false;
    }
  for (int i = 0; i < a->n_outputs; i++)
    if (strcmp(vname(a, a->outputs[i]), vname(b, b->outputs[i])) ||
        !type_eq(&a->values[a->outputs[i]].type, &b->values[b->outputs[i]].type)) {
      printf("  %s: output %d (%s) differs\n", ctx, i, vname(a, a->outputs[i]));
      return false;
    }
  int na = 0, nb = 0;
  for (int i = 0; i < a->n_values; i++) {
    if (!a->values[i].constant) continue;
    na++;
    int j = kiln_graph_find_value(b, a->values[i].name);
    if (j < 0 || !tensor_eq(a->values[i].constant, b->values[j].constant)) {
      printf("  %s: initializer '%s' differs\n", ctx, a->values[i].name);
      return false;
    }
  }
  for (int i = 0; i < b->n_values; i++) nb += b->values[i].constant != NULL;
  if (na != nb) {
    printf("  %s: %d initializers, reloaded %d\n", ctx, na, nb);
    return false;
  }
  for (int i = 0; i < a->n_nodes; i++) {
    const kiln_node *x = &a->nodes[i], *y = &b->nodes[i];
    if (strcmp(x->name, y->name) || strcmp(x->op_type, y->op_type) || strcmp(x->domain, y->domain) ||
        (compare_opsets && x->opset != y->opset) || x->n_inputs != y->n_inputs || x->n_outputs != y->n_outputs ||
        x->n_attrs != y->n_attrs) {
      printf("  %s: node %d ('%s' %s) differs from '%s' %s\n", ctx, i, x->name, x->op_type, y->name, y->op_type);
      return false;
    }
    for (int k = 0; k < x->n_inputs; k++)
      if (strcmp(vname(a, x->inputs[k]), vname(b, y->inputs[k]))) {
        printf("  %s: node '%s' input %d differs\n", ctx, x->name, k);
        return false;
      }
    for (int k = 0; k < x->n_outputs; k++)
      if (strcmp(vname(a, x->outputs[k]), vname(b, y->outputs[k]))) {
        printf("  %s: node '%s' output %d differs\n", ctx, x->name, k);
        return false;
      }
    for (int k = 0; k < x->n_attrs; k++)
      if (!attr_eq(&x->attrs[k], &y->attrs[k], x->name)) return false;
  }
  return true;
}

/* ---- python checker ---------------------------------------------------------- */

static int python_state = -1; /* -1 unknown, 0 unavailable, 1 available */

static void python_check(const char *path, const char *what) {
  if (python_state < 0) {
    python_state = access("/usr/bin/python3", X_OK) == 0 &&
                   system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0;
    if (!python_state) printf("SKIP onnx.checker: /usr/bin/python3 with the onnx package is not available\n");
  }
  if (!python_state) return;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c 'import onnx,sys; onnx.checker.check_model(onnx.load(sys.argv[1]))' '%s'", path);
  int rc = system(cmd);
  CHECK(rc == 0, "onnx.checker rejects the written %s (%s)", what, path);
}

/* ---- round trips ------------------------------------------------------------- */

static char tmpdir[256];

/* Serializes, reloads and compares; optionally runs the checker. */
static void roundtrip(const kiln_model_ir *m, const char *what, bool checker) {
  uint8_t *buf = NULL;
  size_t n = 0;
  if (!ok(kiln_onnx_serialize(m, &buf, &n), what)) return;
  kiln_model_ir *r = NULL;
  if (ok(kiln_onnx_load_buffer(buf, n, &r), what)) {
    CHECK(graph_eq(m->graph, r->graph, what), "%s: reloaded graph differs", what);
    CHECK(r->n_opsets == m->n_opsets, "%s: opset count", what);
    CHECK(!strcmp(r->doc_string ? r->doc_string : "", m->doc_string ? m->doc_string : "") &&
              !strcmp(r->graph_doc_string ? r->graph_doc_string : "", m->graph_doc_string ? m->graph_doc_string : ""),
          "%s: doc strings", what);
    CHECK(r->n_props == m->n_props, "%s: %d metadata_props, %d written", what, r->n_props, m->n_props);
    for (int i = 0; i < m->n_props && i < r->n_props; i++)
      CHECK(!strcmp(r->props[i].key, m->props[i].key) && !strcmp(r->props[i].value, m->props[i].value),
            "%s: metadata_props %d", what, i);
    for (int i = 0; i < m->n_opsets && i < r->n_opsets; i++)
      CHECK(!strcmp(r->opsets[i].domain, m->opsets[i].domain) && r->opsets[i].version == m->opsets[i].version,
            "%s: opset %d", what, i);
    /* Serializing the reloaded model gives the same bytes. */
    uint8_t *buf2 = NULL;
    size_t n2 = 0;
    if (ok(kiln_onnx_serialize(r, &buf2, &n2), what))
      CHECK(n2 == n && !memcmp(buf, buf2, n), "%s: second serialization differs", what);
    free(buf2);
    kiln_model_ir_free(r);
  }
  if (checker) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.onnx", tmpdir, what);
    FILE *f = fopen(path, "wb");
    if (f) {
      fwrite(buf, 1, n, f);
      fclose(f);
      python_check(path, what);
    }
  }
  free(buf);
}

static void test_node_models(void) {
  static const char *names[] = {
      "test_conv_with_strides_padding", "test_if", "test_loop11", "test_scan9_sum", "test_cast_FLOAT_to_STRING",
      "test_if_seq", "test_if_opt", "test_loop16_seq_none", "test_optional_has_element", "test_sequence_map_add_2_sequences",
      "test_constant", "test_lstm_defaults", "test_sequence_map_add_2_sequences_expanded", "test_resize_downsample_scales_linear", "test_range_float_type_positive_delta_expanded",
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(names); i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.onnx", DATA, names[i]);
    if (!file_exists(path)) {
      printf("SKIP %s: not installed\n", path);
      continue;
    }
    kiln_model_ir *m = NULL;
    if (!ok(kiln_onnx_load_file(path, &m), names[i])) continue;
    roundtrip(m, names[i], true);
    kiln_model_ir_free(m);
  }
}

/* If's branches read an outer value; Loop/Scan bodies become subgraphs. */
static void test_subgraph_scoping(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/test_range_float_type_positive_delta_expanded/model.onnx", DATA);
  if (!file_exists(path)) return;
  kiln_model_ir *m = NULL;
  if (!ok(kiln_onnx_load_file(path, &m), "range_expanded")) return;
  const kiln_graph *body = NULL;
  for (int i = 0; i < m->graph->n_nodes; i++)
    if (!strcmp(m->graph->nodes[i].op_type, "Loop")) body = kiln_node_attr(&m->graph->nodes[i], "body")->g;
  CHECK(body && body->parent == m->graph, "Loop body exists and its parent is the main graph");
  int captured = 0;
  for (int i = 0; body && i < body->n_values; i++)
    if (body->values[i].outer_name) {
      captured++;
      CHECK(kiln_graph_find_value(m->graph, body->values[i].outer_name) >= 0, "captured '%s' exists outside",
            body->values[i].outer_name);
    }
  CHECK(captured == 1, "Loop body captures the delta (got %d)", captured);
  for (int i = 0; body && i < body->n_nodes; i++) CHECK(body->nodes[i].opset == 11, "subgraph nodes get the opset");
  kiln_model_ir_free(m);
}

/* ---- a model with every attribute kind --------------------------------------- */

static kiln_tensor *make_tensor(kiln_dtype dt, int rank, const int64_t *dims, unsigned seed) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_new(dt, rank, dims, &t)) return NULL;
  if (dt == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < t->numel; i++) {
      char s[32];
      int n = snprintf(s, sizeof s, "s%u_%lld", seed, (long long)i);
      if (kiln_tensor_set_string(t, i, s, (size_t)n)) return t;
    }
    return t;
  }
  uint8_t *d = t->data;
  for (size_t i = 0; i < kiln_tensor_nbytes(t); i++) d[i] = (uint8_t)(seed * 31 + i * 7);
  if (dt == KILN_DTYPE_BOOL)
    for (size_t i = 0; i < kiln_tensor_nbytes(t); i++) d[i] &= 1;
  return t;
}

static int value(kiln_graph *g, const char *name) {
  int id = -1;
  if (kiln_graph_intern_value(g, name, &id)) return -1;
  return id;
}

static kiln_graph *small_graph(kiln_graph *parent, const char *name, const char *outer, const char *out) {
  kiln_graph *g = NULL;
  if (kiln_graph_new(name, parent, &g)) return NULL;
  int x = value(g, outer), y = value(g, out);
  g->values[x].outer_name = kiln_strdup(outer);
  kiln_graph_add_node(g, out, "Identity", "", 1, &x, 1, &y, NULL);
  g->nodes[0].opset = 17;
  kiln_type_init_tensor(&g->values[y].type, KILN_DTYPE_F32, -1, NULL);
  kiln_graph_add_output(g, y);
  return g;
}

static kiln_model_ir *all_attrs_model(void) {
  kiln_model_ir *m = calloc(1, sizeof *m);
  m->ir_version = 8;
  m->producer_name = kiln_strdup("kiln-test");
  m->n_opsets = 2;
  m->opsets = calloc(2, sizeof *m->opsets);
  m->opsets[0].domain = kiln_strdup("");
  m->opsets[0].version = 17;
  m->opsets[1].domain = kiln_strdup("test.kiln");
  m->opsets[1].version = 1;
  /* What kiln_model_metadata_get reports survives a round trip. */
  m->doc_string = kiln_strdup("a \"model\"\nwith a doc");
  m->graph_doc_string = kiln_strdup("the main graph's doc");
  m->n_props = 2;
  m->props = calloc(2, sizeof *m->props);
  m->props[0] = (kiln_metadata_prop){kiln_strdup("author"), kiln_strdup("kiln \xe2\x9c\x93")};
  m->props[1] = (kiln_metadata_prop){kiln_strdup("empty"), kiln_strdup("")};
  kiln_graph *g = NULL;
  kiln_graph_new("main", NULL, &g);
  m->graph = g;
  int X = value(g, "X"), W = value(g, "W"), B = value(g, "B"), S = value(g, "S"), Y = value(g, "Y"),
      O = value(g, "O");
  int64_t xd[2] = {-1, 3};
  kiln_type_init_tensor(&g->values[X].type, KILN_DTYPE_F32, 2, xd);
  g->values[X].type.dim_params[0] = kiln_strdup("N");
  kiln_graph_add_input(g, X);
  int64_t d3 = 3, d2 = 2;
  g->values[W].constant = make_tensor(KILN_DTYPE_F32, 1, &d3, 1);
  kiln_type_init_tensor(&g->values[W].type, KILN_DTYPE_F32, 1, &d3);
  g->values[B].constant = make_tensor(KILN_DTYPE_I64, 1, &d2, 2); /* an input with a default */
  kiln_type_init_tensor(&g->values[B].type, KILN_DTYPE_I64, 1, &d2);
  kiln_graph_add_input(g, B);
  g->values[S].constant = make_tensor(KILN_DTYPE_STRING, 1, &d2, 3);
  kiln_type_init_tensor(&g->values[S].type, KILN_DTYPE_STRING, 1, &d2);
  int ins[5] = {X, W, -1, B, S}, outs[2] = {Y, -1};
  kiln_graph_add_node(g, "custom", "AllAttrs", "test.kiln", 5, ins, 2, outs, NULL);
  kiln_node *n = &g->nodes[0];
  n->opset = 1;
  kiln_attr *a;
  kiln_node_add_attr(n, "f", KILN_ATTR_FLOAT, &a), a->f = -1.5f;
  kiln_node_add_attr(n, "i", KILN_ATTR_INT, &a), a->i = -1234567890123ll;
  kiln_node_add_attr(n, "s", KILN_ATTR_STRING, &a);
  a->s = malloc(5), memcpy(a->s, "a\0bc", 5), a->s_len = 4; /* inner NUL survives */
  int64_t td[2] = {2, 2};
  kiln_node_add_attr(n, "t", KILN_ATTR_TENSOR, &a), a->t = make_tensor(KILN_DTYPE_F16, 2, td, 4);
  kiln_node_add_attr(n, "g", KILN_ATTR_GRAPH, &a), a->g = small_graph(g, "g_body", "X", "gz");
  kiln_node_add_attr(n, "floats", KILN_ATTR_FLOATS, &a);
  a->n = 3, a->floats = malloc(3 * sizeof(float)), a->floats[0] = 1, a->floats[1] = -0.0f, a->floats[2] = 3e30f;
  kiln_node_add_attr(n, "ints", KILN_ATTR_INTS, &a);
  a->n = 3, a->ints = malloc(3 * sizeof(int64_t)), a->ints[0] = -1, a->ints[1] = 0, a->ints[2] = INT64_MAX;
  kiln_node_add_attr(n, "strings", KILN_ATTR_STRINGS, &a);
  a->n = 2, a->strings = calloc(2, sizeof(char *)), a->strings[0] = kiln_strdup("x"), a->strings[1] = kiln_strdup("");
  kiln_node_add_attr(n, "tensors", KILN_ATTR_TENSORS, &a);
  a->n = 3, a->tensors = calloc(3, sizeof(kiln_tensor *));
  a->tensors[0] = make_tensor(KILN_DTYPE_BOOL, 1, &d3, 5);
  a->tensors[1] = make_tensor(KILN_DTYPE_F64, 0, NULL, 6);
  a->tensors[2] = make_tensor(KILN_DTYPE_BF16, 2, td, 7);
  kiln_node_add_attr(n, "graphs", KILN_ATTR_GRAPHS, &a);
  a->n = 2, a->graphs = calloc(2, sizeof(kiln_graph *));
  a->graphs[0] = small_graph(g, "gs0", "X", "g0");
  a->graphs[1] = small_graph(g, "gs1", "W", "g1");
  int64_t sd[2] = {3, 4};
  kiln_node_add_attr(n, "sparse", KILN_ATTR_SPARSE_TENSOR, &a);
  kiln_tensor_new(KILN_DTYPE_F32, 2, sd, &a->t);
  ((float *)a->t->data)[1] = 2.5f, ((float *)a->t->data)[10] = -1.0f;
  kiln_node_add_attr(n, "sparses", KILN_ATTR_SPARSE_TENSORS, &a);
  a->n = 1, a->tensors = calloc(1, sizeof(kiln_tensor *));
  kiln_tensor_new(KILN_DTYPE_I32, 1, &d3, &a->tensors[0]);
  ((int32_t *)a->tensors[0]->data)[2] = 9;
  kiln_node_add_attr(n, "tp", KILN_ATTR_TYPE_PROTO, &a);
  a->n = 1, a->ints = calloc(3 + KILN_MAX_RANK, sizeof(int64_t));
  a->ints[0] = KILN_TYPE_SEQUENCE, a->ints[1] = KILN_DTYPE_F32, a->ints[2] = 1, a->ints[3] = 5;
  for (int i = 1; i < KILN_MAX_RANK; i++) a->ints[3 + i] = -1;
  kiln_node_add_attr(n, "tps", KILN_ATTR_TYPE_PROTOS, &a);
  a->n = 2, a->ints = calloc(2 * (3 + KILN_MAX_RANK), sizeof(int64_t));
  for (int k = 0; k < 2; k++) {
    int64_t *v = a->ints + k * (3 + KILN_MAX_RANK);
    v[0] = k ? KILN_TYPE_OPTIONAL_TENSOR : KILN_TYPE_TENSOR, v[1] = k ? KILN_DTYPE_I64 : KILN_DTYPE_U8, v[2] = k;
    for (int i = 0; i < KILN_MAX_RANK; i++) v[3 + i] = i < k ? 7 : -1;
  }
  kiln_graph_add_node(g, "Identity_1", "Identity", "", 1, &Y, 1, &O, NULL);
  g->nodes[1].opset = 17;
  kiln_type_init_tensor(&g->values[O].type, KILN_DTYPE_F32, 2, xd);
  g->values[O].type.dim_params[0] = kiln_strdup("N");
  kiln_graph_add_output(g, O);
  kiln_type_init_tensor(&g->values[Y].type, KILN_DTYPE_F32, -1, NULL); /* written as value_info */
  return m;
}

static void test_all_attrs(void) {
  kiln_model_ir *m = all_attrs_model();
  if (!ok(kiln_graph_toposort(m->graph), "all_attrs toposort")) {
    kiln_model_ir_free(m);
    return;
  }
  /* The reader stores TYPE_PROTO's bytes too: compare after one reload. */
  uint8_t *buf = NULL;
  size_t n = 0;
  kiln_model_ir *r = NULL;
  if (ok(kiln_onnx_serialize(m, &buf, &n), "all_attrs serialize") && ok(kiln_onnx_load_buffer(buf, n, &r), "all_attrs load")) {
    CHECK(graph_eq(m->graph, r->graph, "all_attrs"), "all_attrs: reloaded graph differs");
    const kiln_attr *tp = kiln_node_attr(&r->graph->nodes[0], "tp");
    CHECK(tp && tp->s && tp->s_len > 0, "TYPE_PROTO keeps its serialized bytes");
    const kiln_value_def *gx = NULL;
    const kiln_graph *body = kiln_node_attr(&r->graph->nodes[0], "g")->g;
    for (int i = 0; i < body->n_values; i++)
      if (body->values[i].outer_name) gx = &body->values[i];
    CHECK(gx && !strcmp(gx->outer_name, "X") && body->parent == r->graph, "subgraph reads X from outside");
    CHECK(r->graph->values[kiln_graph_find_value(r->graph, "B")].is_graph_input &&
              r->graph->values[kiln_graph_find_value(r->graph, "B")].constant,
          "initializer listed as input stays an input with a default");
    CHECK(!r->graph->values[kiln_graph_find_value(r->graph, "W")].is_graph_input, "W is only a constant");
    CHECK(r->graph->nodes[0].inputs[2] == -1 && r->graph->nodes[0].outputs[1] == -1, "empty names are absent");
    roundtrip(r, "all_attrs", true);
    kiln_model_ir_free(r);
  }
  free(buf);
  kiln_model_ir_free(m);
}

/* ---- model-local functions ------------------------------------------------------ */

static void put_strs(pw_writer *w, uint32_t field, const char *const *s, int n) {
  for (int i = 0; i < n; i++) pw_put_string_field(w, field, s[i]);
}

static size_t node_begin(pw_writer *w, uint32_t field, const char *name, const char *op, const char *domain,
                         const char *const *in, int nin, const char *const *out, int nout) {
  size_t m = pw_begin(w, field);
  put_strs(w, 1, in, nin);
  put_strs(w, 2, out, nout);
  if (name) pw_put_string_field(w, 3, name);
  pw_put_string_field(w, 4, op);
  if (domain) pw_put_string_field(w, 7, domain);
  return m;
}

static void attr_float(pw_writer *w, uint32_t field, const char *name, float v) {
  size_t a = pw_begin(w, field);
  pw_put_string_field(w, 1, name);
  pw_put_varint_field(w, 20, KILN_ATTR_FLOAT);
  pw_put_float_field(w, 2, v);
  pw_end(w, a);
}

static void attr_int(pw_writer *w, uint32_t field, const char *name, int64_t v) {
  size_t a = pw_begin(w, field);
  pw_put_string_field(w, 1, name);
  pw_put_varint_field(w, 20, KILN_ATTR_INT);
  pw_put_i64_field(w, 3, v);
  pw_end(w, a);
}

static void attr_ref(pw_writer *w, const char *name, const char *ref, int type) {
  size_t a = pw_begin(w, 5);
  pw_put_string_field(w, 1, name);
  pw_put_string_field(w, 21, ref);
  pw_put_varint_field(w, 20, (uint64_t)type);
  pw_end(w, a);
}

/* A tensor of dtype and shape [N]. */
static void value_info(pw_writer *w, uint32_t field, const char *name, int dtype) {
  size_t v = pw_begin(w, field);
  pw_put_string_field(w, 1, name);
  size_t t = pw_begin(w, 2);
  size_t tt = pw_begin(w, 1);
  pw_put_varint_field(w, 1, (uint64_t)dtype);
  size_t sh = pw_begin(w, 2);
  size_t d = pw_begin(w, 1);
  pw_put_string_field(w, 2, "N");
  pw_end(w, d);
  pw_end(w, sh);
  pw_end(w, tt);
  pw_end(w, t);
  pw_end(w, v);
}

static void opset(pw_writer *w, uint32_t field, const char *domain, int64_t v) {
  size_t o = pw_begin(w, field);
  pw_put_string_field(w, 1, domain);
  pw_put_i64_field(w, 2, v);
  pw_end(w, o);
}

#define L1(a) ((const char *const[]){a})
#define L2(a, b) ((const char *const[]){a, b})

static void build_function_model(pw_writer *w) {
  pw_put_i64_field(w, 1, 8);
  opset(w, 8, "", 17);
  opset(w, 8, "custom", 1);
  /* AddScaled(a, b) = Inner(a + b * alpha); Inner(x) = Neg(x), with a
   * Constant of its attribute k (default 5). */
  size_t f = pw_begin(w, 25);
  pw_put_string_field(w, 1, "AddScaled");
  pw_put_string_field(w, 10, "custom");
  put_strs(w, 4, L2("a", "b"), 2);
  put_strs(w, 5, L1("y"), 1);
  pw_put_string_field(w, 6, "alpha");
  size_t n = node_begin(w, 7, "c", "Constant", NULL, NULL, 0, L1("s"), 1);
  attr_ref(w, "value_float", "alpha", KILN_ATTR_FLOAT);
  pw_end(w, n);
  n = node_begin(w, 7, NULL, "Mul", NULL, L2("b", "s"), 2, L1("t"), 1);
  pw_end(w, n);
  n = node_begin(w, 7, NULL, "Add", NULL, L2("a", "t"), 2, L1("u"), 1);
  pw_end(w, n);
  n = node_begin(w, 7, "inner", "Inner", "custom", L1("u"), 1, L1("y"), 1);
  pw_end(w, n);
  opset(w, 9, "", 13);
  pw_end(w, f);

  f = pw_begin(w, 25);
  pw_put_string_field(w, 1, "Inner");
  pw_put_string_field(w, 10, "custom");
  put_strs(w, 4, L1("x"), 1);
  put_strs(w, 5, L1("z"), 1);
  attr_int(w, 11, "k", 5);
  n = node_begin(w, 7, "kc", "Constant", NULL, NULL, 0, L1("c"), 1);
  attr_ref(w, "value_int", "k", KILN_ATTR_INT);
  pw_end(w, n);
  n = node_begin(w, 7, "neg", "Neg", NULL, L1("x"), 1, L1("z"), 1);
  pw_end(w, n);
  pw_end(w, f);

  /* Gate(c, v) = If(c, then: Neg(v) computed in the body, else: v). */
  f = pw_begin(w, 25);
  pw_put_string_field(w, 1, "Gate");
  pw_put_string_field(w, 10, "custom");
  put_strs(w, 4, L2("c", "v"), 2);
  put_strs(w, 5, L1("o"), 1);
  n = node_begin(w, 7, NULL, "Neg", NULL, L1("v"), 1, L1("nv"), 1);
  pw_end(w, n);
  n = node_begin(w, 7, "if", "If", NULL, L1("c"), 1, L1("o"), 1);
  for (int br = 0; br < 2; br++) {
    size_t a = pw_begin(w, 5);
    pw_put_string_field(w, 1, br ? "else_branch" : "then_branch");
    pw_put_varint_field(w, 20, KILN_ATTR_GRAPH);
    size_t g = pw_begin(w, 6);
    pw_put_string_field(w, 2, br ? "else" : "then");
    size_t bn = node_begin(w, 1, NULL, "Identity", NULL, L1(br ? "v" : "nv"), 1, L1("r"), 1);
    pw_end(w, bn);
    value_info(w, 12, "r", 1);
    pw_end(w, g);
    pw_end(w, a);
  }
  pw_end(w, n);
  pw_end(w, f);

  size_t g = pw_begin(w, 7);
  pw_put_string_field(w, 2, "main");
  n = node_begin(w, 1, "call1", "AddScaled", "custom", L2("X", "Y"), 2, L1("R1"), 1);
  attr_float(w, 5, "alpha", 0.5f);
  pw_end(w, n);
  n = node_begin(w, 1, "call2", "AddScaled", "custom", L2("R1", "Y"), 2, L1("R2"), 1);
  attr_float(w, 5, "alpha", 3.0f);
  pw_end(w, n);
  n = node_begin(w, 1, NULL, "Identity", NULL, L1("X"), 1, L1("t"), 1); /* "t" is also a body name */
  pw_end(w, n);
  n = node_begin(w, 1, "gate", "Gate", "custom", L2("C", "X"), 2, L1("G"), 1);
  pw_end(w, n);
  value_info(w, 11, "X", 1);
  value_info(w, 11, "Y", 1);
  value_info(w, 11, "C", 9);
  value_info(w, 12, "R2", 1);
  value_info(w, 12, "t", 1);
  value_info(w, 12, "G", 1);
  pw_end(w, g);
}

static const kiln_node *find_node(const kiln_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
  return NULL;
}

static void test_functions(void) {
  pw_writer w = {0};
  build_function_model(&w);
  kiln_model_ir *m = NULL;
  if (!ok(kiln_onnx_load_buffer(w.data, w.len, &m), "function model")) {
    pw_writer_free(&w);
    return;
  }
  const kiln_graph *g = m->graph;
  CHECK(g->n_nodes == 2 * 5 + 1 + 2, "inlined node count %d, expected 13", g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) {
    CHECK(strcmp(g->nodes[i].op_type, "AddScaled") && strcmp(g->nodes[i].op_type, "Inner") &&
              strcmp(g->nodes[i].op_type, "Gate"),
          "call %s left in the graph", g->nodes[i].op_type);
  }
  const kiln_node *c1 = find_node(g, "call1/c"), *c2 = find_node(g, "call2/c");
  CHECK(c1 && kiln_attr_float(c1, "value_float", 0) == 0.5f, "call1 alpha substituted");
  CHECK(c2 && kiln_attr_float(c2, "value_float", 0) == 3.0f, "call2 alpha substituted");
  CHECK(c1 && c1->opset == 13, "body nodes use the function's opset import (got %d)", c1 ? c1->opset : -1);
  const kiln_node *k1 = find_node(g, "call1/inner/kc");
  CHECK(k1 && kiln_attr_int(k1, "value_int", 0) == 5, "nested call gets the default attribute");
  const kiln_node *neg2 = find_node(g, "call2/inner/neg");
  CHECK(neg2 && !strcmp(g->values[neg2->outputs[0]].name, "R2"), "nested call writes the caller's output");
  const kiln_node *mul1 = find_node(g, "call1/Mul_1");
  CHECK(mul1 && strcmp(g->values[mul1->outputs[0]].name, "t") != 0, "internal names are fresh");
  CHECK(mul1 && !strcmp(g->values[mul1->inputs[0]].name, "Y"), "formal input renamed to the actual");
  /* The If inside Gate reads the body's "nv" through the call's scope. */
  const kiln_node *iff = find_node(g, "gate/if");
  const kiln_node *negv = find_node(g, "gate/Neg_0");
  if (iff && negv) {
    const kiln_graph *then = kiln_node_attr(iff, "then_branch")->g, *els = kiln_node_attr(iff, "else_branch")->g;
    int cap_then = -1, cap_else = -1;
    for (int i = 0; i < then->n_values; i++)
      if (then->values[i].outer_name) cap_then = i;
    for (int i = 0; i < els->n_values; i++)
      if (els->values[i].outer_name) cap_else = i;
    CHECK(cap_then >= 0 && !strcmp(then->values[cap_then].outer_name, g->values[negv->outputs[0]].name),
          "then-branch captures the renamed nv");
    CHECK(cap_else >= 0 && !strcmp(els->values[cap_else].outer_name, "X"), "else-branch captures X");
  } else {
    CHECK(0, "Gate's If and Neg were inlined");
  }
  compare_opsets = false;
  roundtrip(m, "functions", true);
  compare_opsets = true;
  kiln_model_ir_free(m);

  /* A function calling itself hits the depth limit, not the stack. */
  pw_writer r = {0};
  pw_put_i64_field(&r, 1, 8);
  opset(&r, 8, "", 17);
  size_t f = pw_begin(&r, 25);
  pw_put_string_field(&r, 1, "Rec");
  pw_put_string_field(&r, 10, "c");
  put_strs(&r, 4, L1("a"), 1);
  put_strs(&r, 5, L1("b"), 1);
  size_t n = node_begin(&r, 7, NULL, "Rec", "c", L1("a"), 1, L1("b"), 1);
  pw_end(&r, n);
  pw_end(&r, f);
  size_t g2 = pw_begin(&r, 7);
  n = node_begin(&r, 1, NULL, "Rec", "c", L1("X"), 1, L1("Y"), 1);
  pw_end(&r, n);
  value_info(&r, 11, "X", 1);
  value_info(&r, 12, "Y", 1);
  pw_end(&r, g2);
  kiln_model_ir *rm = NULL;
  kiln_status_t st = kiln_onnx_load_buffer(r.data, r.len, &rm);
  CHECK(st && strstr(kiln_status_message(st), "nested deeper"), "recursive function rejected: %s",
        kiln_status_message(st));
  kiln_status_free(st);
  kiln_model_ir_free(rm);
  pw_writer_free(&r);
  pw_writer_free(&w);
}

/* ---- external data -------------------------------------------------------------- */

static void write_bytes(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(d, 1, n, f);
  fclose(f);
}

static void external_model(pw_writer *w, const char *location, int64_t offset) {
  pw_put_i64_field(w, 1, 8);
  opset(w, 8, "", 17);
  size_t g = pw_begin(w, 7);
  size_t n = node_begin(w, 1, NULL, "Identity", NULL, L1("W"), 1, L1("O"), 1);
  pw_end(w, n);
  size_t t = pw_begin(w, 5);
  pw_put_i64_field(w, 1, 4);
  pw_put_i64_field(w, 1, 4);
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
  pw_put_string_field(w, 8, "W");
  pw_put_varint_field(w, 14, 1);
  char num[32];
  const char *kv[3][2] = {{"location", location}, {"offset", num}, {"length", "64"}};
  snprintf(num, sizeof num, "%lld", (long long)offset);
  for (int i = 0; i < 3; i++) {
    size_t e = pw_begin(w, 13);
    pw_put_string_field(w, 1, kv[i][0]);
    pw_put_string_field(w, 2, kv[i][1]);
    pw_end(w, e);
  }
  pw_end(w, t);
  value_info(w, 12, "O", 1);
  pw_end(w, g);
}

static void test_external_data(void) {
  float wts[18];
  for (int i = 0; i < 18; i++) wts[i] = (float)i * 0.25f;
  char bin[512], model[512];
  snprintf(bin, sizeof bin, "%s/weights.bin", tmpdir);
  write_bytes(bin, wts, sizeof wts);
  static const struct {
    const char *loc;
    int64_t offset;
    bool good, aligned;
  } cases[] = {
      {"weights.bin", 8, true, true},  {"./weights.bin", 6, true, false}, {"../weights.bin", 0, false, false},
      {"/etc/passwd", 0, false, false}, {"sub/../../x", 0, false, false},  {"weights.bin", 16, false, false},
      {"missing.bin", 0, false, false},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cases); i++) {
    pw_writer w = {0};
    external_model(&w, cases[i].loc, cases[i].offset);
    snprintf(model, sizeof model, "%s/ext.onnx", tmpdir);
    write_bytes(model, w.data, w.len);
    pw_writer_free(&w);
    kiln_model_ir *m = NULL;
    kiln_status_t st = kiln_onnx_load_file(model, &m);
    if (!cases[i].good) {
      CHECK(st != NULL, "external location '%s' offset %lld must fail", cases[i].loc, (long long)cases[i].offset);
      kiln_status_free(st);
      kiln_model_ir_free(m);
      continue;
    }
    if (!ok(st, cases[i].loc)) continue;
    const kiln_tensor *t = m->graph->values[kiln_graph_find_value(m->graph, "W")].constant;
    float expect[16];
    memcpy(expect, (const uint8_t *)wts + cases[i].offset, sizeof expect);
    CHECK(t && t->numel == 16 && !memcmp(t->data, expect, sizeof expect), "external data '%s' contents",
          cases[i].loc);
    /* Borrowed: a view of the mapped file, kept alive by it; copied: data
     * of its own (owned, or in the header's block when small). */
    CHECK(t && ((t->keepalive != NULL) == cases[i].aligned), "external data '%s' %s", cases[i].loc,
          cases[i].aligned ? "is borrowed (zero copy)" : "is copied");
    kiln_model_ir_free(m);
  }
  unlink(bin);
  unlink(model);
}

/* ---- standalone tensors ------------------------------------------------------------- */

static void test_tensor_messages(void) {
  static const kiln_dtype dts[] = {KILN_DTYPE_F32, KILN_DTYPE_U8,  KILN_DTYPE_I8,  KILN_DTYPE_U16, KILN_DTYPE_I16,
                                   KILN_DTYPE_I32, KILN_DTYPE_I64, KILN_DTYPE_STRING, KILN_DTYPE_BOOL, KILN_DTYPE_F16,
                                   KILN_DTYPE_F64, KILN_DTYPE_U32, KILN_DTYPE_U64, KILN_DTYPE_C64, KILN_DTYPE_C128,
                                   KILN_DTYPE_BF16};
  int64_t dims[3] = {2, 0, 3};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(dts); i++)
    for (int shape = 0; shape < 3; shape++) {
      int rank = shape == 0 ? 0 : shape == 1 ? 3 : 1;
      int64_t d[3] = {dims[0], shape == 1 ? 0 : 3, 3};
      if (shape == 2) d[0] = 5;
      kiln_tensor *t = make_tensor(dts[i], rank, d, (unsigned)i), *r = NULL;
      uint8_t *buf = NULL;
      size_t n = 0;
      if (t && ok(kiln_onnx_serialize_tensor(t, "x", &buf, &n), "serialize tensor") &&
          ok(kiln_onnx_parse_tensor(buf, n, NULL, &r), "parse tensor"))
        CHECK(tensor_eq(t, r), "tensor %s rank %d round trip", kiln_dtype_name(dts[i]), rank);
      kiln_tensor_release(t);
      kiln_tensor_release(r);
      free(buf);
    }
  /* Typed fields (int32_data packing for f16/bool/int8) as the test data uses. */
  pw_writer w = {0};
  pw_put_i64_field(&w, 1, 3);
  pw_put_varint_field(&w, 2, KILN_DTYPE_I8);
  pw_put_tag(&w, 5, PW_LEN);
  pw_writer p = {0};
  pw_put_varint(&p, (uint64_t)(int64_t)-5), pw_put_varint(&p, 127), pw_put_varint(&p, (uint64_t)(int64_t)-128);
  pw_put_varint(&w, p.len);
  pw_put_raw(&w, p.data, p.len);
  kiln_tensor *t = NULL;
  if (ok(kiln_onnx_parse_tensor(w.data, w.len, NULL, &t), "int8 via int32_data")) {
    const int8_t *v = t->data;
    CHECK(t->numel == 3 && v[0] == -5 && v[1] == 127 && v[2] == -128, "int8 values from int32_data");
  }
  kiln_tensor_release(t);
  pw_writer_free(&w);
  pw_writer_free(&p);
}

/* ---- hostile inputs ------------------------------------------------------------------- */

static void expect_error(const void *data, size_t n, const char *what, const char *needle) {
  kiln_model_ir *m = NULL;
  kiln_status_t st = kiln_onnx_load_buffer(data, n, &m);
  CHECK(st != NULL, "%s: loads but should fail", what);
  if (st) {
    CHECK(kiln_status_code_of(st) == KILN_INVALID_MODEL || kiln_status_code_of(st) == KILN_UNSUPPORTED,
          "%s: code %d (%s)", what, kiln_status_code_of(st), kiln_status_message(st));
    if (needle)
      CHECK(strstr(kiln_status_message(st), needle) != NULL, "%s: message '%s' lacks '%s'", what,
            kiln_status_message(st), needle);
  }
  kiln_status_free(st);
  kiln_model_ir_free(m);
}

/* A model whose only initializer is the TensorProto `fill` writes. */
static void tensor_model(pw_writer *w, void (*fill)(pw_writer *)) {
  pw_put_i64_field(w, 1, 8);
  opset(w, 8, "", 17);
  size_t g = pw_begin(w, 7);
  pw_put_string_field(w, 2, "main");
  size_t t = pw_begin(w, 5);
  pw_put_string_field(w, 8, "W");
  fill(w);
  pw_end(w, t);
  pw_end(w, g);
}

static void fill_huge(pw_writer *w) {
  pw_put_i64_field(w, 1, (int64_t)1 << 40);
  pw_put_i64_field(w, 1, (int64_t)1 << 40);
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
  pw_put_bytes_field(w, 9, "abcd", 4);
}
static void fill_big_not_backed(pw_writer *w) {
  pw_put_i64_field(w, 1, (int64_t)1 << 30);
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
  pw_put_bytes_field(w, 9, "abcd", 4);
}
static void fill_negative(pw_writer *w) {
  pw_put_i64_field(w, 1, -2);
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
}
static void fill_rank13(pw_writer *w) {
  for (int i = 0; i < 13; i++) pw_put_i64_field(w, 1, 1);
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
  pw_put_bytes_field(w, 9, "abcd", 4);
}
static void fill_dtype(pw_writer *w) {
  pw_put_i64_field(w, 1, 1);
  pw_put_varint_field(w, 2, 99);
  pw_put_bytes_field(w, 9, "abcd", 4);
}
static void fill_typed_short(pw_writer *w) {
  pw_put_i64_field(w, 1, 1000000);
  pw_put_varint_field(w, 2, KILN_DTYPE_I64);
  pw_put_i64_field(w, 7, 1);
}
static void fill_segment(pw_writer *w) {
  pw_put_varint_field(w, 2, KILN_DTYPE_F32);
  size_t s = pw_begin(w, 3);
  pw_end(w, s);
}

static void test_hostile(const char *model_path) {
  pw_writer w = {0};
  static const struct {
    void (*fill)(pw_writer *);
    const char *what, *needle;
  } tensors[] = {
      {fill_huge, "huge dims", "tensor 'W'"},           {fill_big_not_backed, "dims beyond data", "raw_data holds 4 bytes"},
      {fill_negative, "negative dim", "negative"},     {fill_rank13, "rank 13", "rank"},
      {fill_dtype, "unknown dtype", "dtype 99"},       {fill_typed_short, "typed data short", "int64_data holds 1"},
      {fill_segment, "segment", "segment"},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(tensors); i++) {
    tensor_model(&w, tensors[i].fill);
    expect_error(w.data, w.len, tensors[i].what, tensors[i].needle);
    pw_writer_free(&w);
  }

  /* The message says where: graph, node, attribute, byte. */
  pw_put_i64_field(&w, 1, 8);
  size_t g = pw_begin(&w, 7);
  pw_put_string_field(&w, 2, "main");
  size_t n = node_begin(&w, 1, "conv1", "Conv", NULL, L1("X"), 1, L1("Y"), 1);
  size_t a = pw_begin(&w, 5);
  pw_put_string_field(&w, 1, "kernel_shape");
  pw_put_varint_field(&w, 20, KILN_ATTR_INTS);
  pw_put_tag(&w, 8, PW_LEN);
  pw_put_varint(&w, 2);
  pw_put_raw(&w, "\x03\xff", 2); /* the second varint never ends */
  pw_end(&w, a);
  pw_end(&w, n);
  value_info(&w, 11, "X", 1);
  pw_end(&w, g);
  expect_error(w.data, w.len, "truncated attribute",
               "graph 'main': node 'conv1' (Conv): attribute 'kernel_shape': truncated");
  pw_writer_free(&w);

  /* Subgraphs nested 100 deep. */
  pw_writer inner = {0};
  for (int d = 0; d < 100; d++) {
    pw_writer outer = {0};
    size_t nn = node_begin(&outer, 1, NULL, "If", NULL, L1("c"), 1, L1("o"), 1);
    size_t aa = pw_begin(&outer, 5);
    pw_put_string_field(&outer, 1, "then_branch");
    pw_put_varint_field(&outer, 20, KILN_ATTR_GRAPH);
    pw_put_bytes_field(&outer, 6, inner.data ? inner.data : (const uint8_t *)"", inner.len);
    pw_end(&outer, aa);
    pw_end(&outer, nn);
    pw_writer_free(&inner);
    inner = outer;
  }
  pw_put_i64_field(&w, 1, 8);
  g = pw_begin(&w, 7);
  pw_put_raw(&w, inner.data, inner.len);
  value_info(&w, 11, "c", KILN_DTYPE_BOOL);
  pw_end(&w, g);
  expect_error(w.data, w.len, "deep nesting", "nested deeper");
  pw_writer_free(&w);
  pw_writer_free(&inner);

  /* Groups nested deeper than the limit, an invalid wire type, an empty file. */
  uint8_t groups[200];
  for (int i = 0; i < 100; i++) groups[i] = (9 << 3) | PW_SGROUP;
  for (int i = 0; i < 100; i++) groups[100 + i] = (9 << 3) | PW_EGROUP;
  expect_error(groups, sizeof groups, "deep groups", "groups nested");
  expect_error("\x0f", 1, "wire type 7", "wire type");
  expect_error("", 0, "empty model", "no graph");
  expect_error("\x3a\xff\xff\xff\xff\x0f", 6, "graph length past the end", "past the end");

  /* Truncations of a real model: every 97th byte. Cutting inside a
   * length-delimited top-level field must fail; cutting exactly between
   * top-level fields leaves a shorter valid message. */
  size_t size = 0;
  uint8_t *data = read_file(model_path, &size);
  if (!data) {
    printf("SKIP truncation tests: %s not found\n", model_path);
    return;
  }
  bool *boundary = calloc(size + 1, 1);
  pw_reader r = pw_reader_make(data, data, size);
  pw_field f;
  bool more;
  boundary[0] = true;
  while (!pw_next(&r, &f, &more) && more) boundary[r.p - data] = true;
  int cut = 0, loaded = 0;
  for (size_t off = 97; off < size; off += 97) {
    kiln_model_ir *m = NULL;
    kiln_status_t st = kiln_onnx_load_buffer(data, off, &m);
    if (!boundary[off]) CHECK(st != NULL, "truncation at byte %zu loads", off);
    cut++;
    loaded += st == NULL;
    kiln_status_free(st);
    kiln_model_ir_free(m);
  }
  /* Random byte flips: anything may happen except a crash or a leak. */
  uint8_t *copy = malloc(size);
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int rejected = 0, flips = 3000;
  for (int it = 0; it < flips; it++) {
    memcpy(copy, data, size);
    int k = 1 + (int)(rng % 3);
    for (int j = 0; j < k; j++) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      copy[rng % size] ^= (uint8_t)(1u << (rng >> 32) % 8);
      if ((rng >> 40) % 4 == 0) copy[rng % size] = (uint8_t)(rng >> 48);
    }
    kiln_model_ir *m = NULL;
    kiln_status_t st = kiln_onnx_load_buffer(copy, size, &m);
    rejected += st != NULL;
    kiln_status_free(st);
    kiln_model_ir_free(m);
  }
  printf("hostile: %d truncations (%d at field boundaries loaded), %d/%d flipped copies rejected\n", cut, loaded,
         rejected, flips);
  free(copy);
  free(boundary);
  free(data);
}

/* ---- memory: a 100 MB model ------------------------------------------------------------ */

static long peak_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* Child mode: load, report peak RSS, verify the bytes. */
static int rss_child(const char *path) {
  long before = peak_rss_kb();
  kiln_model_ir *m = NULL;
  kiln_status_t st = kiln_onnx_load_file(path, &m);
  if (st) {
    printf("FAIL big model: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  long after = peak_rss_kb();
  int copied = 0, borrowed = 0, bad = 0;
  for (int i = 0; i < m->graph->n_values; i++) {
    const kiln_tensor *t = m->graph->values[i].constant;
    if (!t) continue;
    if (t->owns_data) copied++;
    else borrowed++;
    const uint8_t *d = t->data;
    size_t seed = strlen(m->graph->values[i].name);
    for (size_t k = 0; k < kiln_tensor_nbytes(t); k += 4093)
      if (d[k] != (uint8_t)(k * 13 + seed)) bad++;
  }
  printf("%ld %ld %d %d %d\n", before, after, copied, borrowed, bad);
  kiln_model_ir_free(m);
  return 0;
}

static void test_big_model(const char *self) {
  /* Four 25 MB f32 tensors; names of different lengths move raw_data to
   * different alignments, so some are borrowed and some copied. */
  kiln_model_ir *m = calloc(1, sizeof *m);
  m->ir_version = 8;
  m->n_opsets = 1;
  m->opsets = calloc(1, sizeof *m->opsets);
  m->opsets[0].domain = kiln_strdup("");
  m->opsets[0].version = 17;
  kiln_graph_new("big", NULL, &m->graph);
  static const char *names[] = {"w", "wx", "wxy", "wxyz"};
  int64_t numel = (25 << 20) / 4;
  for (int i = 0; i < 4; i++) {
    int id = value(m->graph, names[i]);
    kiln_tensor *t = NULL;
    if (kiln_tensor_new_uninit(KILN_DTYPE_F32, 1, &numel, &t)) return;
    uint8_t *d = t->data;
    for (size_t k = 0; k < kiln_tensor_nbytes(t); k++) d[k] = (uint8_t)(k * 13 + strlen(names[i]));
    m->graph->values[id].constant = t;
    kiln_type_init_tensor(&m->graph->values[id].type, KILN_DTYPE_F32, 1, &numel);
    int out = value(m->graph, "o");
    if (i == 3) {
      kiln_graph_add_node(m->graph, "sum", "Sum", "", 1, &id, 1, &out, NULL);
      kiln_graph_add_output(m->graph, out);
    }
  }
  char path[512];
  snprintf(path, sizeof path, "%s/big.onnx", tmpdir);
  kiln_status_t st = kiln_onnx_save_file(m, path);
  kiln_model_ir_free(m);
  if (!ok(st, "save big model")) return;
  struct stat sb;
  stat(path, &sb);
  char cmd[2200];
  snprintf(cmd, sizeof cmd, "'%s' --rss-child '%s'", self, path);
  FILE *p = popen(cmd, "r");
  long before = 0, after = 0;
  int copied = 0, borrowed = 0, bad = -1;
  char line[256] = "";
  if (p) {
    while (fgets(line, sizeof line, p))
      if (sscanf(line, "%ld %ld %d %d %d", &before, &after, &copied, &borrowed, &bad) == 5) break;
    pclose(p);
  }
  unlink(path);
  CHECK(bad == 0, "big model bytes differ (%d) or the child failed: %s", bad, line);
  double ratio = (double)after * 1024.0 / (double)sb.st_size;
  printf("big model: %.1f MB file, peak RSS %.1f MB (%.2fx; %.1f MB before loading), %d tensors copied, %d borrowed\n",
         sb.st_size / 1048576.0, after / 1024.0, ratio, before / 1024.0, copied, borrowed);
  CHECK(copied > 0 && borrowed > 0, "both the copy and the zero-copy path are exercised");
#if defined(__SANITIZE_ADDRESS__)
  printf("SKIP peak RSS bound: AddressSanitizer build\n");
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  printf("SKIP peak RSS bound: AddressSanitizer build\n");
#else
  CHECK(ratio < 1.3, "peak RSS %.2fx the file size", ratio);
#endif
#else
  CHECK(ratio < 1.3, "peak RSS %.2fx the file size", ratio);
#endif
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--rss-child")) return rss_child(argv[2]);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_onnx_test_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    printf("FAIL cannot create a temporary folder\n");
    return 1;
  }
  test_node_models();
  test_subgraph_scoping();
  test_all_attrs();
  test_functions();
  test_external_data();
  test_tensor_messages();
  test_hostile(DATA "/test_loop11/model.onnx");
  test_hostile(DATA "/test_if_seq/model.onnx");
  test_hostile(DATA "/test_range_float_type_positive_delta_expanded/model.onnx");
  char self[1024];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl > 0) {
    self[sl] = 0;
    test_big_model(self);
  } else {
    printf("SKIP big model: cannot find this executable\n");
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
  if (failures) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("all ONNX reader/writer checks passed\n");
  return 0;
}
