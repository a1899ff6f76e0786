/* `kiln bench`: latency statistics of a model on a device, and with
 * --profile a per-node time table. Also the input binding that `kiln
 * verify` shares (cmd_bench.h). */
#include "cli/cmd_bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <time.h>

#include "api/api.h"
#include "base/cpu_features.h"
#include "runtime/plan.h"
#include "runtime/profile.h"
#include "passes/passes.h"
#include "tensor/npy.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BENCH_X86 1
#endif

static const char *bench_help =
    "usage: kiln bench MODEL.onnx [--device D] [--threads N] [--warmup W] [--iterations K]\n"
    "                  [--input NAME=FILE.npy]... [--dim NAME=VALUE]... [--seed S]\n"
    "                  [--profile] [--top T] [--json] [--fp16]\n"
    "\n"
    "Times the model: W warm-up runs (default 3), then K timed runs (default 20),\n"
    "and prints the median, p10, p90, min, max and mean latency, the throughput\n"
    "(inferences/s over the timed runs) and the process's peak resident memory.\n"
    "Inputs not given with --input are random: the declared dtype and shape,\n"
    "symbolic dims from --dim NAME=VALUE (default 1), floats normal(0,1), ints in\n"
    "[0,3], from seed S (default 0).\n"
    "\n"
    "--profile  after the timed runs, K more runs with a clock around each node:\n"
    "           a table sorted by time (op, node, ms per run, share, GFLOP/s from\n"
    "           the node's estimated FLOPs, % of peak) and a per-op summary. The\n"
    "           T slowest nodes are listed (--top, default 40; 0 = all).\n"
    "--json     one JSON object on stdout instead of the text report (raw per-run\n"
    "           latencies included, and the profile when asked for).\n"
    "--threads  threads for the device (0 = the device's default).\n"
    "--fp16     fp16 precision (GPUs with fp16 support keep float tensors in fp16).\n"
    "\n"
    "The cpu device's kernels are all compiled before the first run (KILN_JIT=sync)\n"
    "unless KILN_JIT is set: the timed runs then measure the compiled kernels, not\n"
    "the interpreter tier that serves a session while its JIT works (set\n"
    "KILN_JIT=tiered to time a cold start as a session sees it).\n";

/* ---- shared input binding --------------------------------------------- */

double kiln_cli_now(void) { return kiln_now_seconds(); }

static bool parse_i64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

int kiln_cli_inputs_parse(kiln_cli_inputs *in, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (strcmp(a, "--input") && strcmp(a, "--dim") && strcmp(a, "--seed")) return 0;
  if (*i + 1 >= argc) {
    kiln_cli_failf("%s needs a value", a);
    return -1;
  }
  const char *v = argv[++*i];
  if (!strcmp(a, "--seed")) {
    int64_t s;
    if (!parse_i64(v, &s) || s < 0) {
      kiln_cli_failf("--seed takes a non-negative integer, got '%s'", v);
      return -1;
    }
    in->seed = (uint64_t)s;
    return 1;
  }
  const char *eq = strchr(v, '=');
  if (!strcmp(a, "--input")) {
    if (!eq || eq == v || !eq[1]) {
      kiln_cli_failf("--input takes NAME=FILE.npy, got '%s'", v);
      return -1;
    }
    if (in->n_files == KILN_CLI_MAX_INPUTS) {
      kiln_cli_failf("too many --input options");
      return -1;
    }
    char *name = strndup(v, (size_t)(eq - v));
    if (!name) {
      kiln_cli_failf("out of memory");
      return -1;
    }
    in->file_names[in->n_files] = name;
    in->file_paths[in->n_files++] = eq + 1;
    return 1;
  }
  int64_t d;
  if (!eq || eq == v || !parse_i64(eq + 1, &d) || d < 0) {
    kiln_cli_failf("--dim takes NAME=VALUE with VALUE >= 0, got '%s'", v);
    return -1;
  }
  if (in->n_dims == KILN_CLI_MAX_DIMS) {
    kiln_cli_failf("too many --dim options");
    return -1;
  }
  in->dim_names[in->n_dims] = v;
  in->dim_name_len[in->n_dims] = (size_t)(eq - v);
  in->dim_values[in->n_dims++] = d;
  return 1;
}

static int find_dim(const kiln_cli_inputs *in, const char *name) {
  for (int k = 0; name && k < in->n_dims; k++)
    if (strlen(name) == in->dim_name_len[k] && !strncmp(name, in->dim_names[k], in->dim_name_len[k])) return k;
  return -1;
}

/* --dim values for kiln_random_input, noting which were used. */
typedef struct dim_lookup {
  const kiln_cli_inputs *in;
  bool *used;
} dim_lookup;

static int64_t cli_dim_value(void *user, const char *name) {
  dim_lookup *d = user;
  int k = find_dim(d->in, name);
  if (k < 0) return -1;
  d->used[k] = true;
  return d->in->dim_values[k];
}

static kiln_status_t read_input_file(const char *path, const kiln_value_def *def, kiln_value **out) {
  size_t len = strlen(path);
  if (len > 4 && !strcmp(path + len - 4, ".npz")) {
    /* A sequence input: the archive's arrays in order. */
    int n = 0;
    char **nm = NULL;
    kiln_tensor **ts = NULL;
    KILN_TRY(kiln_npz_read_file(path, &n, &nm, &ts));
    kiln_dtype dt = n ? ts[0]->dtype : def->type.dtype ? def->type.dtype : KILN_DTYPE_F32;
    kiln_status_t st = kiln_value_new_sequence(dt, out);
    for (int k = 0; k < n && !st; k++) st = kiln_value_seq_insert(*out, -1, kiln_tensor_retain(ts[k]));
    kiln_npz_free(n, nm, ts);
    return st;
  }
  kiln_tensor *t;
  /* An untyped '<V1'/'<V2' array (ml_dtypes' float8, int4, bfloat16...) is the input's dtype. */
  KILN_TRY(kiln_npy_read_file_as(path, def->type.dtype, &t));
  kiln_status_t st = kiln_value_from_tensor(t, out);
  if (st) kiln_tensor_release(t);
  return st;
}

kiln_status_t kiln_cli_inputs_build(kiln_cli_inputs *in, const kiln_model *model) {
  const kiln_graph *g = model->ir->graph;
  bool dim_used[KILN_CLI_MAX_DIMS] = {0};
  bool file_used[KILN_CLI_MAX_INPUTS] = {0};
  uint64_t rng = kiln_random_inputs_rng(in->seed);
  dim_lookup dims = {in, dim_used};
  for (int k = 0; k < g->n_inputs; k++) {
    const kiln_value_def *def = &g->values[g->inputs[k]];
    int f = -1;
    for (int j = 0; j < in->n_files; j++)
      if (!strcmp(in->file_names[j], def->name)) {
        if (f >= 0) return kiln_error(KILN_INVALID_ARGUMENT, "input '%s' given twice", def->name);
        f = j;
      }
    bool optional = def->type.kind == KILN_TYPE_OPTIONAL_TENSOR || def->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
    if (f < 0 && (def->constant || optional)) continue; /* the initializer default / an empty optional */
    if (in->n == KILN_CLI_MAX_INPUTS) return kiln_error(KILN_UNSUPPORTED, "more than %d inputs", KILN_CLI_MAX_INPUTS);
    int slot = in->n;
    in->names[slot] = def->name;
    if (f >= 0) {
      file_used[f] = true;
      KILN_RETURN_IF_ERROR(read_input_file(in->file_paths[f], def, &in->values[slot]), "input '%s'", def->name);
      in->n++;
      const kiln_value *v = in->values[slot];
      char sb[256] = "";
      if (v->kind == KILN_VALUE_TENSOR) kiln_shape_str(v->tensor->rank, v->tensor->dims, sb, sizeof sb);
      in->desc[slot] = kiln_strfmt("%s %s%s from %s", def->name,
                                   v->kind == KILN_VALUE_TENSOR ? kiln_dtype_name(v->tensor->dtype) : "sequence", sb,
                                   in->file_paths[f]);
    } else {
      KILN_TRY(kiln_random_input(def, cli_dim_value, &dims, in->seed, &rng, &in->values[slot], &in->desc[slot]));
      in->n++;
    }
    if (!in->desc[slot]) return KILN_OOM();
  }
  for (int j = 0; j < in->n_files; j++)
    if (!file_used[j]) {
      char list[1024] = "";
      for (int k = 0; k < g->n_inputs; k++) {
        if (g->values[g->inputs[k]].constant) continue;
        strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, g->values[g->inputs[k]].name, sizeof list - strlen(list) - 1);
      }
      return kiln_error(KILN_INVALID_ARGUMENT, "the model has no input named '%s' (inputs: %s)", in->file_names[j],
                        list);
    }
  for (int k = 0; k < in->n_dims; k++)
    if (!dim_used[k]) {
      bool exists = false;
      for (int i = 0; i < g->n_inputs && !exists; i++) {
        const kiln_type *t = &g->values[g->inputs[i]].type;
        for (int d = 0; d < t->rank && d < KILN_MAX_RANK && !exists; d++)
          exists = t->dim_params[d] && strlen(t->dim_params[d]) == in->dim_name_len[k] &&
                   !strncmp(t->dim_params[d], in->dim_names[k], in->dim_name_len[k]);
      }
      if (!exists)
        return kiln_error(KILN_INVALID_ARGUMENT, "--dim %.*s: no model input has a dimension named '%.*s'",
                          (int)in->dim_name_len[k], in->dim_names[k], (int)in->dim_name_len[k], in->dim_names[k]);
    }
  return NULL;
}

void kiln_cli_inputs_free(kiln_cli_inputs *in) {
  for (int i = 0; i < in->n_files; i++) free(in->file_names[i]);
  for (int i = 0; i < in->n; i++) {
    kiln_value_free(in->values[i]);
    free(in->desc[i]);
  }
  in->n_files = in->n = 0;
}

const char *kiln_cli_session_device(const kiln_session *sess, const char *requested) {
  return sess && sess->n_devices > 0 ? kiln_session_device_name(sess) : requested ? requested : "default";
}

/* ---- statistics ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int64_t peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (int64_t)ru.ru_maxrss * 1024; /* Linux reports kilobytes */
}

/* ---- peak FLOP rate ---------------------------------------------------------
 * peak = threads x per-core FLOP rate. The vector ISA comes from
 * src/base/cpu_features.h; the per-core rate is measured once with a loop of
 * independent FMA chains at that width (best of a few ~10 ms trials), since
 * the clock the cores actually run at (turbo) is not known: /proc/cpuinfo's
 * "cpu MHz" is often the base clock. The nominal MHz x FLOPs/cycle figure
 * (two FMA units assumed) is printed next to it for comparison. */

#define FMA_CHAINS 12
static volatile float fma_seed = 1.0f; /* keeps the loop from being folded */

#ifdef BENCH_X86
__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters) {
  __m512 b = _mm512_set1_ps(0.999999f * fma_seed), c = _mm512_set1_ps(1e-7f * fma_seed);
  /* Distinct starts: chains that all start at c compute the same values,
   * and GCC merged the twelve into one (a latency-bound loop counted as
   * twelve: the peak came out 3x the core's on a Zen 4). */
#define FMA_START512(k) _mm512_set1_ps(1e-7f * fma_seed * (float)(k + 1))
  __m512 a0 = FMA_START512(0), a1 = FMA_START512(1), a2 = FMA_START512(2), a3 = FMA_START512(3),
         a4 = FMA_START512(4), a5 = FMA_START512(5), a6 = FMA_START512(6), a7 = FMA_START512(7),
         a8 = FMA_START512(8), a9 = FMA_START512(9), a10 = FMA_START512(10), a11 = FMA_START512(11);
#undef FMA_START512
  for (int64_t i = 0; i < iters; i++) {
    a0 = _mm512_fmadd_ps(a0, b, c), a1 = _mm512_fmadd_ps(a1, b, c), a2 = _mm512_fmadd_ps(a2, b, c);
    a3 = _mm512_fmadd_ps(a3, b, c), a4 = _mm512_fmadd_ps(a4, b, c), a5 = _mm512_fmadd_ps(a5, b, c);
    a6 = _mm512_fmadd_ps(a6, b, c), a7 = _mm512_fmadd_ps(a7, b, c), a8 = _mm512_fmadd_ps(a8, b, c);
    a9 = _mm512_fmadd_ps(a9, b, c), a10 = _mm512_fmadd_ps(a10, b, c), a11 = _mm512_fmadd_ps(a11, b, c);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(int64_t iters) {
  __m256 b = _mm256_set1_ps(0.999999f * fma_seed), c = _mm256_set1_ps(1e-7f * fma_seed);
#define FMA_START256(k) _mm256_set1_ps(1e-7f * fma_seed * (float)(k + 1)) /* distinct: see the AVX-512 loop */
  __m256 a0 = FMA_START256(0), a1 = FMA_START256(1), a2 = FMA_START256(2), a3 = FMA_START256(3),
         a4 = FMA_START256(4), a5 = FMA_START256(5), a6 = FMA_START256(6), a7 = FMA_START256(7),
         a8 = FMA_START256(8), a9 = FMA_START256(9), a10 = FMA_START256(10), a11 = FMA_START256(11);
#undef FMA_START256
  for (int64_t i = 0; i < iters; i++) {
    a0 = _mm256_fmadd_ps(a0, b, c), a1 = _mm256_fmadd_ps(a1, b, c), a2 = _mm256_fmadd_ps(a2, b, c);
    a3 = _mm256_fmadd_ps(a3, b, c), a4 = _mm256_fmadd_ps(a4, b, c), a5 = _mm256_fmadd_ps(a5, b, c);
    a6 = _mm256_fmadd_ps(a6, b, c), a7 = _mm256_fmadd_ps(a7, b, c), a8 = _mm256_fmadd_ps(a8, b, c);
    a9 = _mm256_fmadd_ps(a9, b, c), a10 = _mm256_fmadd_ps(a10, b, c), a11 = _mm256_fmadd_ps(a11, b, c);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
#endif

/* Portable: scalar multiply-adds (two FLOPs each). */
static float fma_loop_scalar(int64_t iters) {
  float b = 0.999999f * fma_seed, c = 1e-7f * fma_seed, a[FMA_CHAINS];
  for (int k = 0; k < FMA_CHAINS; k++) a[k] = c * (float)(k + 1); /* distinct: see the AVX-512 loop */
  for (int64_t i = 0; i < iters; i++)
    for (int k = 0; k < FMA_CHAINS; k++) a[k] = a[k] * b + c;
  float s = 0;
  for (int k = 0; k < FMA_CHAINS; k++) s += a[k];
  return s;
}

typedef struct peak_info {
  double per_core_gflops; /* measured, one thread */
  const char *isa;
  int lanes;
  double nominal_mhz;     /* 0 if unknown */
  int threads;            /* threads the device runs this model on */
} peak_info;

static double cpuinfo_mhz(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return 0;
  char line[512];
  double mhz = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "cpu MHz", 7)) {
      const char *colon = strchr(line, ':');
      if (colon) mhz = KILN_MAX(mhz, atof(colon + 1));
    }
  fclose(f);
  return mhz;
}

static void measure_peak(peak_info *p) {
  float (*loop)(int64_t) = fma_loop_scalar;
  p->isa = "scalar C";
  p->lanes = 1;
#ifdef BENCH_X86
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  if (cpu->avx512f) {
    loop = fma_loop_avx512;
    p->isa = "AVX-512";
    p->lanes = 16;
  } else if (cpu->avx2 && cpu->fma) {
    loop = fma_loop_avx2;
    p->isa = "AVX2+FMA";
    p->lanes = 8;
  }
#endif
  volatile float sink = 0;
  int64_t iters = 1 << 16;
  double best = 0;
  int kept = 0;
  /* Grow the trial until it takes ~10 ms, then keep the best of 10 (the machine may be shared). */
  for (int trial = 0; trial < 40; trial++) {
    double t0 = kiln_cli_now();
    sink += loop(iters);
    double dt = kiln_cli_now() - t0;
    double gflops = (double)iters * FMA_CHAINS * p->lanes * 2 / dt * 1e-9;
    if (dt < 0.01 && iters < ((int64_t)1 << 34)) {
      iters *= 2;
      continue;
    }
    if (gflops > best) best = gflops;
    if (++kept >= 10) break;
  }
  (void)sink;
  p->per_core_gflops = best;
  p->nominal_mhz = cpuinfo_mhz();
}

/* ---- per-node profile ------------------------------------------------------ */

typedef struct node_prof {
  const kiln_graph *g; /* the graph the session ran (the specialized or compiled one) */
  int n_nodes;
  double *seconds; /* per kernel, indexed by the node that started it; summed over runs */
  int *count;
  int *last;  /* per kernel: the node whose outputs ended it when that is another node (a fused
                 epilogue), else -1 */
} node_prof;

static bool prof_graph(node_prof *p, const kiln_graph *g) {
  if (p->g == g) return true;
  /* First run, or the session re-specialized the graph: start over. */
  free(p->seconds);
  free(p->count);
  free(p->last);
  size_t n = (size_t)(g->n_nodes ? g->n_nodes : 1);
  p->g = g;
  p->n_nodes = g->n_nodes;
  p->seconds = calloc(n, sizeof *p->seconds);
  p->count = calloc(n, sizeof *p->count);
  p->last = malloc(n * sizeof *p->last);
  if (!p->seconds || !p->count || !p->last) {
    p->g = NULL;
    p->n_nodes = 0;
    return false;
  }
  for (int i = 0; i < g->n_nodes; i++) p->last[i] = -1;
  return true;
}

/* The session profiler's events (runtime/profile.h: what
 * kiln_session_profile_json reports) summed per kernel: the time of a step
 * is charged to the node that started it, noting the node that ended it
 * when that is another one (a contraction's fused epilogue). */
static kiln_status_t prof_from_events(node_prof *p, const kiln_profiler *profiler) {
  if (profiler->oom) return KILN_OOM();
  /* Only the graph of the last run is alive (a session that re-specialized freed the earlier ones). */
  const kiln_graph *g = profiler->n_events ? profiler->events[profiler->n_events - 1].g : NULL;
  for (int i = 0; i < profiler->n_events; i++) {
    const kiln_profile_event *e = &profiler->events[i];
    if (e->g != g || e->node < 0) continue;
    if (!prof_graph(p, g)) return KILN_OOM();
    p->seconds[e->node] += e->dur_us * 1e-6;
    p->count[e->node]++;
    if (e->end_node >= 0 && e->end_node != e->node) p->last[e->node] = e->end_node;
  }
  return NULL;
}

/* For each node that ran inside another node's kernel (no clock of its
 * own, not a contraction's fused epilogue): the timed node whose kernel
 * computed it, found down the chain of single consumers a fused group is
 * made of; -1 elsewhere. NULL when out of memory (the FLOPs then count the
 * timed nodes only). Quadratic in the nodes: profiling only. */
static int *fused_members(const node_prof *p, const kiln_graph *g) {
  int n = p->n_nodes;
  int *top = malloc(((size_t)n + 1) * sizeof *top);
  bool *is_last = calloc((size_t)n + 1, sizeof *is_last);
  if (!top || !is_last) {
    free(top);
    free(is_last);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (p->count[i] && p->last[i] >= 0) is_last[p->last[i]] = true;
  for (int i = 0; i < n; i++) {
    top[i] = -1;
    if (p->count[i] || is_last[i] || g->nodes[i].n_outputs < 1) continue;
    int at = i;
    for (int hops = 0; hops < n && top[i] < 0; hops++) {
      int v = g->nodes[at].outputs[0], next = -1, uses = 0;
      for (int c = 0; c < n; c++)
        for (int k = 0; k < g->nodes[c].n_inputs; k++)
          if (g->nodes[c].inputs[k] == v && v >= 0) {
            next = c;
            uses++;
          }
      if (uses != 1 || next <= at) break;
      if (p->count[next]) top[i] = next;
      at = next;
    }
  }
  free(is_last);
  return top;
}

typedef struct prof_row {
  int node, last; /* last: see node_prof, -1 if none */
  char op[64];    /* "Conv", or "Gemm+Relu" for a fused kernel */
  double ms;      /* per run */
  double gflops;
  int64_t flops;
} prof_row;

static int cmp_row(const void *a, const void *b) {
  const prof_row *x = a, *y = b;
  return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : x->node - y->node;
}

typedef struct op_row {
  const char *op;
  int count;
  double ms;
  int64_t flops;
} op_row;

static int cmp_op_row(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : strcmp(x->op, y->op);
}

/* ---- JSON ---------------------------------------------------------------- */

/* The escaping of the API's JSON writer (base/json.h). */
static void json_str(FILE *f, const char *s) {
  kiln_strbuf sb = {0};
  kiln_json_escape(&sb, s);
  fputs(sb.data && !sb.oom ? sb.data : "\"\"", f);
  kiln_strbuf_free(&sb);
}

/* JSON has no NaN/Inf: print null for them. */
static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

/* ---- the command ------------------------------------------------------------ */

typedef struct bench_opts {
  const char *model_path, *device;
  int threads, warmup, iterations, top;
  bool profile, json, fp16;
} bench_opts;

static bool parse_int_opt(const char *name, const char *v, int lo, int *out) {
  int64_t x;
  if (!parse_i64(v, &x) || x < lo || x > 1000000000) {
    kiln_cli_failf("%s takes an integer >= %d, got '%s'", name, lo, v);
    return false;
  }
  *out = (int)x;
  return true;
}

static kiln_status_t run_once(kiln_session *sess, const kiln_cli_inputs *in, int n_out, kiln_value **outs) {
  kiln_status_t st = kiln_session_run_values(sess, in->n, in->names, in->values, n_out, outs);
  for (int i = 0; i < n_out; i++) {
    kiln_value_free(outs[i]);
    outs[i] = NULL;
  }
  return st;
}

int kiln_cmd_bench(int argc, char **argv) {
  setenv("KILN_JIT", "sync", 0); /* steady state unless asked otherwise (see the help) */
  if (kiln_cli_wants_help(argc, argv)) {
    fputs(bench_help, stdout);
    return 0;
  }
  bench_opts o = {NULL, NULL, 0, 3, 20, 40, false, false};
  kiln_cli_inputs in = {0};
  int rc = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = kiln_cli_inputs_parse(&in, argc, argv, &i);
    if (r < 0) goto out;
    if (r > 0) continue;
    if (!strcmp(a, "--profile")) {
      o.profile = true;
    } else if (!strcmp(a, "--fp16")) {
      o.fp16 = true;
    } else if (!strcmp(a, "--json")) {
      o.json = true;
    } else if (!strcmp(a, "--device") || !strcmp(a, "--threads") || !strcmp(a, "--warmup") ||
               !strcmp(a, "--iterations") || !strcmp(a, "--top")) {
      if (i + 1 >= argc) {
        kiln_cli_failf("%s needs a value", a);
        goto out;
      }
      const char *v = argv[++i];
      bool ok = true;
      if (!strcmp(a, "--device")) o.device = v;
      else if (!strcmp(a, "--threads")) ok = parse_int_opt(a, v, 0, &o.threads);
      else if (!strcmp(a, "--warmup")) ok = parse_int_opt(a, v, 0, &o.warmup);
      else if (!strcmp(a, "--iterations")) ok = parse_int_opt(a, v, 1, &o.iterations);
      else ok = parse_int_opt(a, v, 0, &o.top);
      if (!ok) goto out;
    } else if (a[0] == '-' && a[1]) {
      kiln_cli_failf("unknown option '%s' (see `kiln bench --help`)", a);
      goto out;
    } else if (!o.model_path) {
      o.model_path = a;
    } else {
      kiln_cli_failf("unexpected argument '%s'", a);
      goto out;
    }
  }
  if (!o.model_path) {
    kiln_cli_failf("bench needs a model file (see `kiln bench --help`)");
    goto out;
  }

  kiln_model *model = NULL;
  kiln_session *sess = NULL;
  kiln_value **outs = NULL;
  double *lat = NULL, *sorted = NULL;
  node_prof prof = {0};
  prof_row *rows = NULL;
  op_row *ops = NULL;
  int n_ops = 0;
  peak_info peak = {0};
  char *run_stats = NULL; /* the device's run_stats text; owned */
  size_t run_stats_len = 0;
  kiln_session_options so = kiln_session_options_default();
  if (o.device) so.device = o.device;
  so.threads = o.threads;
  if (o.fp16) so.precision = KILN_PRECISION_FP16;
  const char *device = so.device ? so.device : "default";

  double t0 = kiln_cli_now();
  kiln_status_t st = kiln_model_load_file(o.model_path, &model);
  double t_load = kiln_cli_now() - t0;
  double t_sess = 0, t_first = 0, t_total = 0;
  if (!st) {
    t0 = kiln_cli_now();
    st = kiln_session_create(model, &so, &sess);
    t_sess = kiln_cli_now() - t0;
    device = kiln_cli_session_device(sess, so.device);
  }
  if (!st) st = kiln_cli_inputs_build(&in, model);
  int n_out = model ? kiln_model_output_count(model) : 0;
  if (!st) {
    outs = calloc((size_t)(n_out ? n_out : 1), sizeof *outs);
    lat = calloc((size_t)o.iterations, sizeof *lat);
    sorted = calloc((size_t)o.iterations, sizeof *sorted);
    if (!outs || !lat || !sorted) st = KILN_OOM();
  }
  /* Warm-up; the very first run (specialization, compilation) is reported. */
  for (int i = 0; i < o.warmup && !st; i++) {
    t0 = kiln_cli_now();
    st = run_once(sess, &in, n_out, outs);
    if (i == 0) t_first = kiln_cli_now() - t0;
  }
  double t_timed = kiln_cli_now();
  for (int i = 0; i < o.iterations && !st; i++) {
    t0 = kiln_cli_now();
    st = run_once(sess, &in, n_out, outs);
    lat[i] = kiln_cli_now() - t0;
    if (i == 0 && o.warmup == 0) t_first = lat[i];
  }
  t_total = kiln_cli_now() - t_timed;
  /* What the device did in the last timed run (queue submissions and
   * command buffers on GPUs): asynchronous devices batch the whole plan. */
  if (!st && o.profile && sess->exec) {
    FILE *mf = open_memstream(&run_stats, &run_stats_len);
    if (mf) {
      kiln_plan_run_stats(sess->devices[0], sess->exec, mf);
      fclose(mf);
    }
  }
  /* Profiled runs, separate so the hooks cannot disturb the statistics. */
  if (!st && o.profile) {
    st = kiln_session_set_profiling(sess, 1);
    for (int i = 0; i < o.iterations && !st; i++) st = run_once(sess, &in, n_out, outs);
    if (!st) st = prof_from_events(&prof, sess->profiler);
    if (!st && !prof.g) st = kiln_error(KILN_INTERNAL, "the profiled runs reported no nodes");
    if (!st) {
      rows = calloc((size_t)(prof.n_nodes ? prof.n_nodes : 1), sizeof *rows);
      ops = calloc((size_t)(prof.n_nodes ? prof.n_nodes : 1), sizeof *ops);
      if (!rows || !ops) st = KILN_OOM();
    }
    if (!st) {
      measure_peak(&peak);
      /* ref and the interpreter run one node at a time on one thread. */
      peak.threads = !strcmp(device, "ref") ? 1 : o.threads > 0 ? o.threads : kiln_physical_cores();
    }
  }
  if (st) {
    rc = kiln_cli_fail(st);
    goto cleanup;
  }

  int K = o.iterations;
  memcpy(sorted, lat, (size_t)K * sizeof *sorted);
  qsort(sorted, (size_t)K, sizeof *sorted, cmp_double);
  double sum = 0;
  for (int i = 0; i < K; i++) sum += lat[i];
  double med = kiln_percentile(sorted, K, 50), p10 = kiln_percentile(sorted, K, 10),
         p90 = kiln_percentile(sorted, K, 90);
  double mn = sorted[0], mx = sorted[K - 1], mean = sum / K;
  double thr = t_total > 0 ? K / t_total : 0;
  int64_t rss = peak_rss_bytes();

  double prof_total = 0, peak_gflops = peak.per_core_gflops * peak.threads;
  int64_t total_flops = 0;
  int n_rows = 0;
  if (o.profile) {
    const kiln_graph *g = prof.g;
    int *inner_top = fused_members(&prof, g);
    for (int i = 0; i < prof.n_nodes; i++) {
      if (!prof.count[i]) continue; /* ran inside another node's kernel (or did not run) */
      prof_row *r = &rows[n_rows++];
      r->node = i;
      r->last = prof.last[i];
      r->ms = prof.seconds[i] / K * 1e3;
      r->flops = kiln_node_flops(g, &g->nodes[i]) + (r->last >= 0 ? kiln_node_flops(g, &g->nodes[r->last]) : 0);
      /* A fused kernel's members (a contraction compiled with its
       * elementwise consumers: the kernel is the last consumer's): their
       * FLOPs, and the costliest one's op first in the name. */
      int top = -1;
      for (int j = 0; inner_top && j < prof.n_nodes; j++) {
        if (inner_top[j] != i) continue;
        int64_t fj = kiln_node_flops(g, &g->nodes[j]);
        r->flops += fj;
        if (top < 0 || fj > kiln_node_flops(g, &g->nodes[top])) top = j;
      }
      if (top >= 0 && kiln_node_flops(g, &g->nodes[top]) <= kiln_node_flops(g, &g->nodes[i])) top = -1;
      r->gflops = r->ms > 0 ? (double)r->flops / (r->ms * 1e-3) * 1e-9 : 0;
      if (r->last >= 0) snprintf(r->op, sizeof r->op, "%s+%s", g->nodes[i].op_type, g->nodes[r->last].op_type);
      else if (top >= 0) snprintf(r->op, sizeof r->op, "%s+%s", g->nodes[top].op_type, g->nodes[i].op_type);
      else snprintf(r->op, sizeof r->op, "%s", g->nodes[i].op_type);
      prof_total += r->ms;
      total_flops += r->flops;
    }
    free(inner_top);
    qsort(rows, (size_t)n_rows, sizeof *rows, cmp_row);
    for (int i = 0; i < n_rows; i++) { /* after the sort: ops point into rows */
      int k = 0;
      while (k < n_ops && strcmp(ops[k].op, rows[i].op)) k++;
      if (k == n_ops) ops[n_ops++] = (op_row){rows[i].op, 0, 0, 0};
      ops[k].count++;
      ops[k].ms += rows[i].ms;
      ops[k].flops += rows[i].flops;
    }
    qsort(ops, (size_t)n_ops, sizeof *ops, cmp_op_row);
  }
  char peak_src[256];
  snprintf(peak_src, sizeof peak_src, "%d thread%s x %.1f GFLOP/s per core (measured: %s FMA loop)", peak.threads,
           peak.threads == 1 ? "" : "s", peak.per_core_gflops, peak.isa);

  if (o.json) {
    FILE *f = stdout;
    fprintf(f, "{\"model\": ");
    json_str(f, o.model_path);
    fprintf(f, ", \"device\": ");
    json_str(f, device);
    fprintf(f, ", \"threads\": %d, \"warmup\": %d, \"iterations\": %d, \"inputs\": [", o.threads, o.warmup, K);
    for (int i = 0; i < in.n; i++) {
      if (i) fputs(", ", f);
      json_str(f, in.desc[i]);
    }
    fprintf(f, "],\n \"load_ms\": ");
    json_num(f, t_load * 1e3);
    fprintf(f, ", \"session_ms\": ");
    json_num(f, t_sess * 1e3);
    fprintf(f, ", \"first_run_ms\": ");
    json_num(f, t_first * 1e3);
    fprintf(f, ",\n \"latency_ms\": {\"median\": ");
    json_num(f, med * 1e3);
    fprintf(f, ", \"p10\": ");
    json_num(f, p10 * 1e3);
    fprintf(f, ", \"p90\": ");
    json_num(f, p90 * 1e3);
    fprintf(f, ", \"min\": ");
    json_num(f, mn * 1e3);
    fprintf(f, ", \"max\": ");
    json_num(f, mx * 1e3);
    fprintf(f, ", \"mean\": ");
    json_num(f, mean * 1e3);
    fprintf(f, "},\n \"throughput_per_s\": ");
    json_num(f, thr);
    fprintf(f, ", \"peak_rss_bytes\": %lld,\n \"samples_ms\": [", (long long)rss);
    for (int i = 0; i < K; i++) {
      if (i) fputs(", ", f);
      json_num(f, lat[i] * 1e3);
    }
    fputc(']', f);
    if (o.profile) {
      const kiln_graph *g = prof.g;
      fprintf(f, ",\n \"profile\": {\"runs\": %d, \"total_ms\": ", K);
      json_num(f, prof_total);
      fprintf(f, ", \"flops\": %lld, \"graph_nodes\": %d, \"peak_gflops\": ", (long long)total_flops,
              prof.n_nodes);
      json_num(f, peak_gflops);
      fprintf(f, ", \"peak_source\": ");
      json_str(f, peak_src);
      fprintf(f, ",\n  \"nodes\": [");
      for (int i = 0; i < n_rows; i++) {
        const prof_row *r = &rows[i];
        fprintf(f, "%s\n   {\"op\": ", i ? "," : "");
        json_str(f, r->op);
        fprintf(f, ", \"name\": ");
        json_str(f, g->nodes[r->node].name);
        if (r->last >= 0) {
          fprintf(f, ", \"ends_at\": ");
          json_str(f, g->nodes[r->last].name);
        }
        fprintf(f, ", \"index\": %d, \"ms\": ", r->node);
        json_num(f, r->ms);
        fprintf(f, ", \"share\": ");
        json_num(f, prof_total > 0 ? r->ms / prof_total : 0);
        fprintf(f, ", \"flops\": %lld, \"gflops\": ", (long long)r->flops);
        json_num(f, r->gflops);
        fprintf(f, ", \"pct_peak\": ");
        json_num(f, peak_gflops > 0 ? 100 * r->gflops / peak_gflops : 0);
        fputc('}', f);
      }
      fprintf(f, "],\n  \"ops\": [");
      for (int i = 0; i < n_ops; i++) {
        fprintf(f, "%s\n   {\"op\": ", i ? "," : "");
        json_str(f, ops[i].op);
        fprintf(f, ", \"kernels\": %d, \"ms\": ", ops[i].count);
        json_num(f, ops[i].ms);
        fprintf(f, ", \"share\": ");
        json_num(f, prof_total > 0 ? ops[i].ms / prof_total : 0);
        fprintf(f, ", \"flops\": %lld}", (long long)ops[i].flops);
      }
      fprintf(f, "]}");
    }
    fprintf(f, "}\n");
    rc = 0;
    goto cleanup;
  }

  printf("model       %s\n", o.model_path);
  if (o.threads) printf("device      %s, %d thread%s\n", device, o.threads, o.threads == 1 ? "" : "s");
  else printf("device      %s, default threads\n", device);
  for (int i = 0; i < in.n; i++) printf("%s %s\n", i ? "           " : "inputs     ", in.desc[i]);
  printf("start-up    load %.1f ms, session %.1f ms, first run %.2f ms\n", t_load * 1e3, t_sess * 1e3, t_first * 1e3);
  printf("runs        %d warm-up, %d timed\n", o.warmup, K);
  printf("latency     median %.3f ms  p10 %.3f ms  p90 %.3f ms  min %.3f ms  max %.3f ms  mean %.3f ms\n", med * 1e3,
         p10 * 1e3, p90 * 1e3, mn * 1e3, mx * 1e3, mean * 1e3);
  printf("throughput  %.3f inferences/s\n", thr);
  printf("peak RSS    %.1f MB\n", (double)rss / 1e6);
  if (o.profile) {
    const kiln_graph *g = prof.g;
    if (run_stats && run_stats[0]) printf("\ndevice work per timed run: %s", run_stats);
    printf("\nprofile: %d more runs with a clock around each kernel (the session profiler: kiln_session_set_profiling);\n", K);
    printf("  %d timed kernels (%d graph nodes%s), %.3f ms per run in them, %.4g FLOPs per run (%.2f GFLOP/s "
           "overall)\n",
           n_rows, prof.n_nodes, n_rows < prof.n_nodes ? "; the others ran inside another node's kernel" : "",
           prof_total, (double)total_flops, prof_total > 0 ? (double)total_flops / (prof_total * 1e-3) * 1e-9 : 0);
    printf("  peak %.1f GFLOP/s = %s\n", peak_gflops, peak_src);
    if (peak.nominal_mhz > 0)
      printf("  (nominal: %.0f MHz from /proc/cpuinfo x %d FLOPs/cycle = %.1f GFLOP/s per core)\n", peak.nominal_mhz,
             peak.lanes * 4, peak.nominal_mhz * 1e-3 * peak.lanes * 4);
    int show = o.top > 0 && o.top < n_rows ? o.top : n_rows;
    printf("\n  %4s  %-22s %-40s %10s %7s %9s %7s\n", "#", "op", "node", "ms/run", "share", "GFLOP/s", "%peak");
    for (int i = 0; i < show; i++) {
      const prof_row *r = &rows[i];
      const kiln_node *n = &g->nodes[r->node];
      char name[41];
      size_t len = strlen(n->name);
      if (len > 40) snprintf(name, sizeof name, "...%s", n->name + len - 37);
      else snprintf(name, sizeof name, "%s", n->name);
      printf("  %4d  %-22.22s %-40s %10.4f %6.2f%% %9.3f %6.2f%%\n", r->node, r->op, name, r->ms,
             prof_total > 0 ? 100 * r->ms / prof_total : 0, r->gflops,
             peak_gflops > 0 ? 100 * r->gflops / peak_gflops : 0);
    }
    if (show < n_rows) {
      double rest = 0;
      for (int i = show; i < n_rows; i++) rest += rows[i].ms;
      printf("  ... %d more, %.4f ms (%.2f%%); --top 0 lists all\n", n_rows - show, rest,
             prof_total > 0 ? 100 * rest / prof_total : 0);
    }
    printf("\n  by op type:\n  %-22s %7s %10s %7s %9s\n", "op", "kernels", "ms/run", "share", "GFLOP/s");
    for (int i = 0; i < n_ops; i++)
      printf("  %-22.22s %7d %10.4f %6.2f%% %9.3f\n", ops[i].op, ops[i].count, ops[i].ms,
             prof_total > 0 ? 100 * ops[i].ms / prof_total : 0,
             ops[i].ms > 0 ? (double)ops[i].flops / (ops[i].ms * 1e-3) * 1e-9 : 0);
  }
  rc = 0;
cleanup:
  free(prof.seconds);
  free(prof.count);
  free(prof.last);
  free(rows);
  free(ops);
  free(lat);
  free(sorted);
  free(run_stats);
  free(outs);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
out:
  kiln_cli_inputs_free(&in);
  return rc;
}
