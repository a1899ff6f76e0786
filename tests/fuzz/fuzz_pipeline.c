/* fuzz_pipeline.c — libFuzzer target for the whole pipeline, not only the
 * reader.
 *
 * The bytes are an ONNX model: a mutation of a seed from the official node
 * suite, made either by libFuzzer's byte mutators (steered by
 * tests/fuzz/pipeline.dict: op, attribute and field names) or, half the
 * time, by this file's model mutator, which decodes the model with kiln's
 * reader, changes one thing a model author could (an attribute's value, a
 * graph input's dim or dtype, an initializer's values, a node's op type or
 * an input edge) and writes it back with kiln's writer, so that mutants stay
 * models and reach inference, the passes and the compilers. A model that parses is resolved and type-inferred
 * (kiln_model_from_ir), specialized to small concrete input shapes, then run
 * on `ref` (the interpreter) and on `cpu` (optimized, fused, planned,
 * compiled to C and run). Whatever the model is, every stage must succeed or
 * return a status: no crash, sanitizer report, leak, hang or unbounded
 * allocation.
 *
 * Bounds that keep one input cheap, so that the fuzzer explores instead of
 * waiting (all chosen here, not by the model):
 *   - inputs up to 64 KiB, graphs up to 48 top-level nodes and 8 inputs;
 *   - symbolic input dims become 1..3; an input holds at most 4096 elements;
 *   - one tensor may hold at most 16 MiB (kiln_limits, KILN_MAX_TENSOR_BYTES)
 *     and a run may take 5 s (KILN_RUN_TIMEOUT): kiln must turn a bigger
 *     request into an error itself;
 *   - a specialized graph whose inferred FLOPs exceed 5e7 is not run (a valid
 *     but slow model is not a finding).
 * Input values come from a generator seeded by the input bytes, so every
 * finding reproduces: floats in [-3, 3], integers in [-2, 4] (indices that
 * are sometimes negative or out of range), bools 0/1, short strings.
 *
 * The cpu device compiles generated C with the system compiler into
 * $KILN_CACHE_DIR (a private temporary folder unless set).
 *
 *   build-fuzz/tests/fuzz_pipeline -dict=tests/fuzz/pipeline.dict -timeout=60 \
 *       -rss_limit_mb=4096 CORPUS tests/fuzz/corpus_pipeline
 */
#include "base/limits.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

#define MAX_MODEL_BYTES (64 * 1024)
#define MAX_NODES 48
#define MAX_INPUTS 8
#define MAX_INPUT_ELEMENTS 4096
#define MAX_FLOPS 50000000LL

static char g_cache_dir[] = "/tmp/kiln_fuzz_pipeline_XXXXXX";

/* How far inputs get (KILN_FUZZ_STATS=1 prints it at exit): the funnel
 * docs/TESTING.md reports, since libFuzzer's edge count alone does not say
 * whether mutants reach the compiler. */
enum { PARSED, TYPED, FED, RAN_REF, CPU_PREPARED, RAN_CPU, N_STAGES };
static const char *const stage_names[N_STAGES] = {"parsed", "resolved+typed", "fed", "ran on ref",
                                                  "compiled on cpu", "ran on cpu"};
static uint64_t g_inputs, g_stages[N_STAGES], g_model_mutations, g_byte_mutations;

static void print_stats(void) {
  fprintf(stderr, "fuzz_pipeline: %llu inputs", (unsigned long long)g_inputs);
  for (int i = 0; i < N_STAGES; i++) fprintf(stderr, ", %s %llu", stage_names[i], (unsigned long long)g_stages[i]);
  fprintf(stderr, "; mutations: %llu of the model, %llu of the bytes\n", (unsigned long long)g_model_mutations,
          (unsigned long long)g_byte_mutations);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!getenv("KILN_CACHE_DIR") && mkdtemp(g_cache_dir)) setenv("KILN_CACHE_DIR", g_cache_dir, 1);
  kiln_limits limits = {16 << 20, 5.0};
  kiln_limits_set(&limits);
  const char *stats = getenv("KILN_FUZZ_STATS");
  if (stats && *stats && strcmp(stats, "0")) atexit(print_stats);
  return 0;
}

/* splitmix64: a small deterministic generator. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t hash_bytes(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ULL;
  return h;
}

/* A random tensor for a graph input's declared type, or NULL when the type
 * is not one this target feeds (sequences, unknown dtype or rank, too big). */
static kiln_tensor *make_input(const kiln_type *t, uint64_t *rng) {
  if (t->kind != KILN_TYPE_TENSOR && t->kind != KILN_TYPE_OPTIONAL_TENSOR) return NULL;
  if (t->dtype == KILN_DTYPE_UNDEFINED || t->rank < 0 || t->rank > 6) return NULL;
  if (t->dtype == KILN_DTYPE_C64 || t->dtype == KILN_DTYPE_C128) return NULL;
  int64_t dims[KILN_MAX_RANK], numel = 1;
  for (int i = 0; i < t->rank; i++) {
    dims[i] = t->dims[i] >= 0 ? t->dims[i] : 1 + (int64_t)(next_random(rng) % 3);
    if (dims[i] > MAX_INPUT_ELEMENTS) return NULL;
    numel *= dims[i];
    if (numel > MAX_INPUT_ELEMENTS) return NULL;
  }
  kiln_tensor *x = NULL;
  kiln_status_t st = kiln_tensor_new(t->dtype, t->rank, dims, &x);
  if (st) {
    kiln_status_free(st);
    return NULL;
  }
  for (int64_t i = 0; i < x->numel; i++) {
    uint64_t r = next_random(rng);
    if (x->dtype == KILN_DTYPE_STRING) {
      static const char *const words[] = {"", "a", "kiln", "Hello", "ONNX"};
      kiln_status_free(kiln_tensor_set_string(x, i, words[r % 5], strlen(words[r % 5])));
    } else if (x->dtype == KILN_DTYPE_BOOL) {
      ((uint8_t *)x->data)[i] = (uint8_t)(r & 1);
    } else if (kiln_dtype_is_float(x->dtype)) {
      kiln_store_f64(x->data, x->dtype, i, ((double)(r >> 11) / (double)(1ULL << 53)) * 6.0 - 3.0);
    } else {
      int64_t v = (int64_t)(r % 7) - 2;
      if (!kiln_dtype_is_signed(x->dtype) && v < 0) v = -v;
      kiln_store_i64(x->data, x->dtype, i, v);
    }
  }
  return x;
}

/* ---- the model mutator ------------------------------------------------- */

static int64_t pick_int(uint64_t *rng, int64_t old) {
  static const int64_t special[] = {0, 1, 2, 3, -1, -2, 4, 7, 16, 1 << 20, INT32_MAX, INT64_MIN};
  uint64_t r = next_random(rng) % 16;
  if (r < KILN_ARRAY_SIZE(special)) return special[r];
  uint64_t u = (uint64_t)old; /* wrapping, so the mutator itself has no overflow */
  return (int64_t)(r == 12 ? u + 1 : r == 13 ? u - 1 : r == 14 ? 0 - u : u * 2);
}

static float pick_float(uint64_t *rng, float old) {
  static const float special[] = {0.0f, 1.0f, -1.0f, 0.5f, 1e-7f, 1e30f, -1e30f};
  uint64_t r = next_random(rng) % 10;
  if (r < KILN_ARRAY_SIZE(special)) return special[r];
  return r == 7 ? old * 2 : r == 8 ? -old : (float)(0.0 / 0.0); /* NaN */
}

/* Every graph in the model (the main one and subgraphs), for picking one. */
static void collect_graphs(kiln_graph *g, kiln_graph **out, int *n, int max) {
  if (*n < max) out[(*n)++] = g;
  for (int i = 0; i < g->n_nodes; i++)
    for (int a = 0; a < g->nodes[i].n_attrs; a++) {
      kiln_attr *at = &g->nodes[i].attrs[a];
      if (at->g) collect_graphs(at->g, out, n, max);
      for (int k = 0; at->graphs && k < at->n; k++) collect_graphs(at->graphs[k], out, n, max);
    }
}

/* One change to the decoded model; false when the chosen kind of change
 * had nothing to act on. */
static bool mutate_model(kiln_model_ir *m, uint64_t *rng) {
  kiln_graph *graphs[16];
  int n_graphs = 0;
  collect_graphs(m->graph, graphs, &n_graphs, 16);
  kiln_graph *g = graphs[next_random(rng) % (uint64_t)n_graphs];
  kiln_node *node = g->n_nodes ? &g->nodes[next_random(rng) % (uint64_t)g->n_nodes] : NULL;
  switch (next_random(rng) % 7) {
  case 0: { /* an attribute's value */
    if (!node || !node->n_attrs) return false;
    kiln_attr *at = &node->attrs[next_random(rng) % (uint64_t)node->n_attrs];
    if (at->type == KILN_ATTR_INT) at->i = pick_int(rng, at->i);
    else if (at->type == KILN_ATTR_FLOAT) at->f = pick_float(rng, at->f);
    else if (at->type == KILN_ATTR_INTS && at->n) {
      int k = (int)(next_random(rng) % (uint64_t)at->n);
      at->ints[k] = pick_int(rng, at->ints[k]);
    } else if (at->type == KILN_ATTR_FLOATS && at->n) {
      int k = (int)(next_random(rng) % (uint64_t)at->n);
      at->floats[k] = pick_float(rng, at->floats[k]);
    } else {
      return false;
    }
    return true;
  }
  case 1: { /* a graph input's dim */
    if (!g->n_inputs) return false;
    kiln_type *t = &g->values[g->inputs[next_random(rng) % (uint64_t)g->n_inputs]].type;
    if (t->rank <= 0) return false;
    int d = (int)(next_random(rng) % (uint64_t)t->rank);
    static const int64_t dims[] = {0, 1, 2, 3, 5, 8, -1};
    t->dims[d] = dims[next_random(rng) % KILN_ARRAY_SIZE(dims)];
    return true;
  }
  case 2: { /* a graph input's dtype */
    if (!g->n_inputs) return false;
    kiln_type *t = &g->values[g->inputs[next_random(rng) % (uint64_t)g->n_inputs]].type;
    if (t->kind != KILN_TYPE_TENSOR) return false;
    t->dtype = (kiln_dtype)(1 + next_random(rng) % KILN_DTYPE_LAST);
    return true;
  }
  case 3: { /* an initializer's (or Constant's tensor's) values */
    kiln_tensor **slot = NULL;
    for (int tries = 0; tries < 8 && !slot; tries++) {
      kiln_value_def *v = g->n_values ? &g->values[next_random(rng) % (uint64_t)g->n_values] : NULL;
      if (v && v->constant && v->constant->numel > 0 && v->constant->dtype != KILN_DTYPE_STRING) slot = &v->constant;
    }
    if (!slot && node)
      for (int a = 0; a < node->n_attrs && !slot; a++)
        if (node->attrs[a].type == KILN_ATTR_TENSOR && node->attrs[a].t && node->attrs[a].t->numel > 0 &&
            node->attrs[a].t->dtype != KILN_DTYPE_STRING)
          slot = &node->attrs[a].t;
    kiln_tensor *copy = NULL;
    if (!slot || kiln_tensor_clone(*slot, &copy)) return false; /* the original may be borrowed: change a copy */
    int64_t k = (int64_t)(next_random(rng) % (uint64_t)copy->numel);
    if (kiln_dtype_is_float(copy->dtype))
      kiln_store_f64(copy->data, copy->dtype, k, pick_float(rng, (float)kiln_load_f64(copy->data, copy->dtype, k)));
    else if (copy->dtype == KILN_DTYPE_BOOL)
      ((uint8_t *)copy->data)[k] ^= 1;
    else if (copy->dtype != KILN_DTYPE_C64 && copy->dtype != KILN_DTYPE_C128)
      kiln_store_i64(copy->data, copy->dtype, k, pick_int(rng, kiln_load_i64(copy->data, copy->dtype, k)));
    kiln_tensor_release(*slot);
    *slot = copy;
    return true;
  }
  case 4: { /* a node's op type, from kiln's registry */
    if (!node) return false;
    int n_ops = 0;
    const kiln_op_def *const *ops = kiln_op_all(&n_ops);
    if (!n_ops) return false;
    const kiln_op_def *op = ops[next_random(rng) % (uint64_t)n_ops];
    char *type = kiln_strdup(op->op_type), *domain = kiln_strdup(op->domain);
    if (!type || !domain) {
      free(type);
      free(domain);
      return false;
    }
    free(node->op_type);
    free(node->domain);
    node->op_type = type;
    node->domain = domain;
    return true;
  }
  case 5: { /* an input edge: another value (maybe a later one: a cycle) or absent */
    if (!node || !node->n_inputs || !g->n_values) return false;
    int k = (int)(next_random(rng) % (uint64_t)node->n_inputs);
    node->inputs[k] = next_random(rng) % 4 == 0 ? -1 : (int)(next_random(rng) % (uint64_t)g->n_values);
    return true;
  }
  default: { /* the opset the model imports */
    if (!m->n_opsets) return false;
    static const int64_t versions[] = {1, 6, 7, 9, 11, 12, 13, 14, 16, 17, 18, 21};
    m->opsets[next_random(rng) % (uint64_t)m->n_opsets].version =
        versions[next_random(rng) % KILN_ARRAY_SIZE(versions)];
    return true;
  }
  }
}

static size_t mutate_bytes(uint8_t *data, size_t size, size_t max_size) {
  g_byte_mutations++;
  return LLVMFuzzerMutate(data, size, max_size);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  uint64_t rng = seed;
  if (next_random(&rng) & 1) return mutate_bytes(data, size, max_size);
  kiln_model_ir *m = NULL;
  kiln_status_t st = kiln_onnx_load_buffer(data, size, &m);
  if (st) {
    kiln_status_free(st);
    return mutate_bytes(data, size, max_size);
  }
  bool changed = false;
  for (int i = 0, n = 1 + (int)(next_random(&rng) % 3); i < n; i++) changed |= mutate_model(m, &rng);
  uint8_t *out = NULL;
  size_t n_out = 0;
  st = changed ? kiln_onnx_serialize(m, &out, &n_out) : NULL;
  kiln_model_ir_free(m);
  if (!changed || st || n_out > max_size) {
    kiln_status_free(st);
    free(out);
    return mutate_bytes(data, size, max_size);
  }
  g_model_mutations++;
  memcpy(data, out, n_out);
  free(out);
  return n_out;
}

/* ---- running a model ------------------------------------------------------ */

static void free_values(kiln_value **v, int n) {
  for (int i = 0; i < n; i++) kiln_value_free(v[i]);
}

/* Runs the model on one device with the given inputs; every failure is a
 * status, dropped here. Returns false when the run should not be attempted
 * on further devices (the graph is too expensive). */
static bool run_on(const kiln_model *model, const char *device, int threads, int n_inputs, const char **names,
                   kiln_value **inputs) {
  kiln_session_options opts = kiln_session_options_default();
  opts.device = device;
  opts.threads = threads;
  kiln_session *sess = NULL;
  kiln_status_t st = kiln_session_create(model, &opts, &sess);
  if (st) {
    kiln_status_free(st);
    return true;
  }
  const kiln_graph *g = model->ir->graph;
  bool go_on = true;
  if (!strcmp(device, "ref")) {
    /* Specialize first (ref does not compile) to see the concrete cost. */
    kiln_value *bound[MAX_INPUTS] = {0};
    for (int k = 0, i = 0; k < g->n_inputs; k++)
      if (!g->values[g->inputs[k]].constant && i < n_inputs) bound[k] = inputs[i++];
    const kiln_graph *spec = NULL;
    st = kiln_session_specialize(sess, bound, &spec);
    if (!st) {
      int64_t flops = 0;
      for (int n = 0; n < spec->n_nodes && flops <= MAX_FLOPS; n++) {
        int64_t f = kiln_node_flops(spec, &spec->nodes[n]);
        flops = f > MAX_FLOPS ? MAX_FLOPS + 1 : flops + f;
      }
      go_on = flops <= MAX_FLOPS;
    }
    kiln_status_free(st);
    st = NULL;
  }
  if (go_on) {
    kiln_value *outs[64] = {0};
    int n_out = g->n_outputs < 64 ? g->n_outputs : 64;
    st = kiln_session_run_values(sess, n_inputs, names, inputs, n_out, outs);
    bool ref = !strcmp(device, "ref");
    if (!ref && sess->exec) g_stages[CPU_PREPARED]++;
    if (!st) g_stages[ref ? RAN_REF : RAN_CPU]++;
    /* A model that ran out of time on ref would on cpu too: one 5 s wait
     * per input is enough. */
    if (ref && st && kiln_status_code_of(st) == KILN_TIMEOUT) go_on = false;
    if (!st) free_values(outs, n_out);
    kiln_status_free(st);
  }
  kiln_session_destroy(sess);
  return go_on;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > MAX_MODEL_BYTES) return 0;
  g_inputs++;
  kiln_model_ir *ir = NULL;
  kiln_status_t st = kiln_onnx_load_buffer(data, size, &ir);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  g_stages[PARSED]++;
  if (ir->graph->n_nodes > MAX_NODES || ir->graph->n_inputs > 64) {
    kiln_model_ir_free(ir);
    return 0;
  }
  kiln_model *model = NULL;
  st = kiln_model_from_ir(ir, &model); /* takes ir */
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  g_stages[TYPED]++;
  const kiln_graph *g = model->ir->graph;
  uint64_t rng = hash_bytes(data, size);
  const char *names[MAX_INPUTS];
  kiln_value *inputs[MAX_INPUTS] = {0};
  int n_inputs = 0;
  bool feedable = true;
  for (int k = 0; k < g->n_inputs && feedable; k++) {
    const kiln_value_def *def = &g->values[g->inputs[k]];
    if (def->constant) continue; /* the initializer is its default */
    kiln_tensor *x = n_inputs < MAX_INPUTS ? make_input(&def->type, &rng) : NULL;
    if (!x || (st = kiln_value_from_tensor(x, &inputs[n_inputs]))) {
      kiln_status_free(st);
      feedable = false;
      break;
    }
    names[n_inputs++] = def->name;
  }
  if (feedable) g_stages[FED]++;
  if (feedable && run_on(model, "ref", 0, n_inputs, names, inputs))
    run_on(model, "cpu", 1 + (int)(rng & 1), n_inputs, names, inputs);
  free_values(inputs, n_inputs);
  kiln_model_destroy(model);
  return 0;
}
