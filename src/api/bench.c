/* kiln_bench_json (include/kiln.h): `kiln bench`'s measurements as data,
 * the per-kernel times from the session's profiler (runtime/profile.h). */
#include <time.h>

#include "api/api.h"
#include "runtime/profile.h"

double kiln_now_seconds(void) { return kiln_profile_now(); }

double kiln_percentile(const double *sorted, int n, double p) {
  if (n <= 0) return 0;
  double pos = p / 100.0 * (n - 1);
  int lo = (int)pos;
  if (lo >= n - 1) return sorted[n - 1];
  return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * (pos - lo);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static kiln_status_t run_once(kiln_session *s, const kiln_bound_inputs *in, int n_out, kiln_value **outs) {
  kiln_status_t st = kiln_session_run_values(s, in->n, in->names, in->values, n_out, outs);
  for (int i = 0; i < n_out; i++) {
    kiln_value_free(outs[i]);
    outs[i] = NULL;
  }
  return st;
}

typedef struct kernel_total {
  const char *name, *op; /* borrowed from the profiler's events */
  int calls;
  double us;
} kernel_total;

static int cmp_total(const void *a, const void *b) {
  const kernel_total *x = a, *y = b;
  return x->us < y->us ? 1 : x->us > y->us ? -1 : strcmp(x->name, y->name);
}

/* The profiler's events summed per kernel (by name), slowest first, as "kernels". */
static kiln_status_t kernels_json(kiln_json *j, const kiln_profiler *p, int runs) {
  kernel_total *t = calloc((size_t)(p->n_events ? p->n_events : 1), sizeof *t);
  if (!t) return KILN_OOM();
  int n = 0;
  double total = 0;
  for (int i = 0; i < p->n_events; i++) {
    const kiln_profile_event *e = &p->events[i];
    int k = 0;
    while (k < n && strcmp(t[k].name, e->name)) k++;
    if (k == n) t[n++] = (kernel_total){e->name, e->op, 0, 0};
    t[k].calls++;
    t[k].us += e->dur_us;
    total += e->dur_us;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_total);
  kiln_json_double(j, "profiled_ms", runs ? total / runs * 1e-3 : 0);
  kiln_json_array_begin(j, "kernels");
  for (int k = 0; k < n; k++) {
    kiln_json_object_begin(j, NULL);
    kiln_json_string(j, "name", t[k].name);
    kiln_json_string(j, "op", t[k].op);
    kiln_json_int(j, "calls", t[k].calls);
    kiln_json_double(j, "total_ms", t[k].us * 1e-3);
    kiln_json_double(j, "ms_per_run", runs ? t[k].us * 1e-3 / runs : 0);
    kiln_json_double(j, "percent", total > 0 ? 100 * t[k].us / total : 0);
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  free(t);
  return NULL;
}

kiln_status_t kiln_bench_json(const kiln_model *model, const kiln_session_options *options, int n_inputs,
                              const char *const *input_names, const kiln_tensor *const *inputs, int warmup,
                              int iterations, int profile, char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_bench_json: out_json is NULL");
  *out_json = NULL;
  if (!model) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_bench_json: model is NULL");
  if (warmup < 0 || iterations < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_bench_json: warmup must be >= 0 and iterations >= 1 (got %d, %d)",
                      warmup, iterations);
  kiln_session_options so = options ? *options : kiln_session_options_default();
  kiln_bound_inputs in;
  kiln_session *s = NULL;
  kiln_json j = {0};
  int n_out = kiln_model_output_count(model);
  kiln_value **outs = calloc((size_t)(n_out ? n_out : 1), sizeof *outs);
  double *lat = calloc((size_t)iterations, sizeof *lat);
  kiln_status_t st = kiln_bind_inputs(model, n_inputs, input_names, inputs, &in);
  if (!st && (!outs || !lat)) st = KILN_OOM();
  double t0 = kiln_now_seconds(), t_create = 0, t_first = 0, t_total = 0;
  if (!st) st = kiln_session_create(model, &so, &s);
  t_create = kiln_now_seconds() - t0;
  for (int i = 0; i < warmup && !st; i++) {
    t0 = kiln_now_seconds();
    st = run_once(s, &in, n_out, outs);
    if (i == 0) t_first = kiln_now_seconds() - t0;
  }
  double t_timed = kiln_now_seconds();
  for (int i = 0; i < iterations && !st; i++) {
    t0 = kiln_now_seconds();
    st = run_once(s, &in, n_out, outs);
    lat[i] = kiln_now_seconds() - t0;
    if (i == 0 && warmup == 0) t_first = lat[i];
  }
  t_total = kiln_now_seconds() - t_timed;
  /* Profiled runs apart, so the clocks around each step do not disturb the statistics. */
  if (!st && profile) st = kiln_session_set_profiling(s, 1);
  for (int i = 0; profile && i < iterations && !st; i++) st = run_once(s, &in, n_out, outs);
  if (!st && profile && s->profiler->oom) st = KILN_OOM();
  if (!st) {
    double sum = 0;
    for (int i = 0; i < iterations; i++) sum += lat[i];
    qsort(lat, (size_t)iterations, sizeof *lat, cmp_double);
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "device", kiln_session_device_name(s));
    kiln_json_int(&j, "threads", so.threads);
    kiln_json_string(&j, "precision", so.precision == KILN_PRECISION_FP16 ? "fp16" : "fp32");
    kiln_json_int(&j, "warmup", warmup);
    kiln_json_int(&j, "iterations", iterations);
    kiln_json_array_begin(&j, "inputs");
    for (int i = 0; i < in.n; i++) kiln_json_string(&j, NULL, in.desc[i]);
    kiln_json_array_end(&j);
    kiln_json_double(&j, "create_ms", t_create * 1e3);
    kiln_json_double(&j, "first_run_ms", t_first * 1e3);
    kiln_json_double(&j, "median_ms", kiln_percentile(lat, iterations, 50) * 1e3);
    kiln_json_double(&j, "mean_ms", sum / iterations * 1e3);
    kiln_json_double(&j, "min_ms", lat[0] * 1e3);
    kiln_json_double(&j, "max_ms", lat[iterations - 1] * 1e3);
    kiln_json_double(&j, "p10_ms", kiln_percentile(lat, iterations, 10) * 1e3);
    kiln_json_double(&j, "p90_ms", kiln_percentile(lat, iterations, 90) * 1e3);
    kiln_json_double(&j, "throughput_per_s", t_total > 0 ? iterations / t_total : 0);
    if (profile) st = kernels_json(&j, s->profiler, iterations);
    kiln_json_object_end(&j);
  }
  free(outs);
  free(lat);
  kiln_session_destroy(s);
  kiln_bound_inputs_free(&in);
  if (st) {
    kiln_json_free(&j);
    return kiln_status_annotate(st, "kiln_bench_json");
  }
  return kiln_json_finish(&j, out_json);
}
