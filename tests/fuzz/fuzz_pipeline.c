/* fuzz_pipeline.c — libFuzzer target for the whole pipeline, not only the
 * reader.
 *
 * The bytes are an ONNX model (in practice a mutation of a seed from the
 * official node suite, steered by tests/fuzz/pipeline.dict: op, attribute
 * and field names). A model that parses is resolved and type-inferred
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
#include "passes/passes.h"
#include "runtime/session.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
static uint64_t g_inputs, g_stages[N_STAGES];

static void print_stats(void) {
  fprintf(stderr, "fuzz_pipeline: %llu inputs", (unsigned long long)g_inputs);
  for (int i = 0; i < N_STAGES; i++) fprintf(stderr, ", %s %llu", stage_names[i], (unsigned long long)g_stages[i]);
  fprintf(stderr, "\n");
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
