/* The public C API that language bindings use (include/kiln.h), through
 * libkiln.so and nothing else: kiln_version, kiln_tensor_wrap (release
 * callbacks, refused arguments, a misaligned buffer through a cpu session
 * against ref and PyTorch's output), model metadata against onnx's Python,
 * and the JSON reports parsed and checked by tests/api/check_json.py.
 *
 * usage: test_public_api MODELS_DIR TESTS_API_DIR PYTHON WORK_DIR
 *   MODELS_DIR: tests/models/export_models.py's output (mlp, small_cnn)
 *   WORK_DIR: where the metadata model is written */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#define CHECK_RNG_SEED 0x2545f4914f6cdd1dull
#include "../unit/check.h"

static const char *g_models, *g_api_dir, *g_python, *g_work;

/* The status must be a failure with `code` whose message contains `needle`. */
static void expect_error(kiln_status_t st, kiln_status_code code, const char *needle, const char *what) {
  g_checks++;
  if (!st) {
    g_failures++;
    printf("FAIL: %s: succeeded, expected an error\n", what);
    return;
  }
  const char *msg = kiln_status_message(st);
  if (kiln_status_code_of(st) != code || !strstr(msg, needle)) {
    g_failures++;
    printf("FAIL: %s: code %d message '%s' (expected code %d, containing '%s')\n", what,
           (int)kiln_status_code_of(st), msg, (int)code, needle);
  } else {
    printf("ok: %s: %s\n", what, msg);
  }
  kiln_status_free(st);
}

/* Pipes text into check_json.py MODE [ARG]; a failure fails the test. */
static void check_json(const char *mode, const char *arg, const char *text) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' '%s/check_json.py' %s %s%s%s", g_python, g_api_dir, mode, arg ? "'" : "",
           arg ? arg : "", arg ? "'" : "");
  FILE *p = popen(cmd, "w");
  g_checks++;
  if (!p) {
    g_failures++;
    printf("FAIL: cannot run %s\n", cmd);
    return;
  }
  fputs(text ? text : "", p);
  int rc = pclose(p);
  if (rc != 0) {
    g_failures++;
    printf("FAIL: check_json.py %s (status %d) on: %.2000s\n", mode, rc, text ? text : "(null)");
  } else {
    printf("ok: %s JSON (%zu bytes)\n", mode, text ? strlen(text) : 0);
  }
}

static float rnd_normalish(void) {
  double u = (double)(rnd() >> 11) / (double)(1ull << 53);
  return (float)((u - 0.5) * 4.0); /* uniform in [-2, 2) */
}

static kiln_model *load(const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", g_models, name);
  kiln_model *m = NULL;
  if (!ok(kiln_model_load_file(path, &m), path)) return NULL;
  return m;
}

/* ---- kiln_version, kiln_string_free ---- */

static void test_version(void) {
  const char *v = kiln_version();
  CHECK(v && !strcmp(v, KILN_VERSION_STRING), "kiln_version() = '%s', header says '%s'", v ? v : "(null)",
        KILN_VERSION_STRING);
  kiln_string_free(NULL);
}

/* ---- kiln_tensor_wrap ---- */

static int g_released;
static void count_release(void *user) {
  g_released++;
  *(int *)user += 1;
}

static void test_wrap_arguments(void) {
  float buf[15];
  for (int i = 0; i < 15; i++) buf[i] = rnd_normalish();
  int64_t dims[2] = {3, 5};
  int mine = 0;
  kiln_tensor *t = NULL;
  g_released = 0;
  if (ok(kiln_tensor_wrap(KILN_DTYPE_F32, 2, dims, buf, sizeof buf, count_release, &mine, &t), "wrap f32[3,5]")) {
    CHECK(kiln_tensor_data(t) == buf, "wrap copied the data");
    CHECK(kiln_tensor_numel(t) == 15 && kiln_tensor_rank(t) == 2 && kiln_tensor_dtype(t) == KILN_DTYPE_F32,
          "wrapped tensor's shape");
    kiln_tensor_retain(t);
    kiln_tensor_release(t);
    CHECK(mine == 0, "released while a reference remains");
    kiln_tensor_release(t);
    CHECK(mine == 1 && g_released == 1, "release called %d times, expected once", mine);
  }
  /* Refused: nbytes, NULL data, strings, no out pointer; release never called on failure. */
  mine = 0;
  t = NULL;
  expect_error(kiln_tensor_wrap(KILN_DTYPE_F32, 2, dims, buf, sizeof buf - 4, count_release, &mine, &t),
               KILN_INVALID_ARGUMENT, "expected 60", "wrap with nbytes 56");
  expect_error(kiln_tensor_wrap(KILN_DTYPE_I64, 2, dims, buf, sizeof buf, count_release, &mine, &t),
               KILN_INVALID_ARGUMENT, "expected 120", "wrap i64 with f32's nbytes");
  expect_error(kiln_tensor_wrap(KILN_DTYPE_F32, 2, dims, NULL, sizeof buf, count_release, &mine, &t),
               KILN_INVALID_ARGUMENT, "data is NULL", "wrap NULL data");
  char *strs[15] = {0};
  expect_error(kiln_tensor_wrap(KILN_DTYPE_STRING, 2, dims, strs, sizeof strs, count_release, &mine, &t),
               KILN_INVALID_ARGUMENT, "string", "wrap a string tensor");
  expect_error(kiln_tensor_wrap(KILN_DTYPE_F32, 2, dims, buf, sizeof buf, count_release, &mine, NULL),
               KILN_INVALID_ARGUMENT, "out_tensor", "wrap without out_tensor");
  int64_t neg[2] = {3, -5};
  expect_error(kiln_tensor_wrap(KILN_DTYPE_F32, 2, neg, buf, sizeof buf, count_release, &mine, &t),
               KILN_INVALID_ARGUMENT, "dimension 1 is negative", "wrap a negative dim");
  CHECK(mine == 0 && t == NULL, "a refused wrap called release (%d) or set the tensor", mine);
  /* Empty: NULL data is fine, release still called. */
  int64_t empty[2] = {0, 5};
  if (ok(kiln_tensor_wrap(KILN_DTYPE_F32, 2, empty, NULL, 0, count_release, &mine, &t), "wrap an empty tensor")) {
    kiln_tensor_release(t);
    CHECK(mine == 1, "release of the empty tensor called %d times", mine);
  }
  /* A scalar, without a release callback. */
  double scalar = 2.5;
  if (ok(kiln_tensor_wrap(KILN_DTYPE_F64, 0, NULL, &scalar, sizeof scalar, NULL, NULL, &t), "wrap a scalar"))
    kiln_tensor_release(t);
}

static double max_abs_diff(kiln_tensor *a, kiln_tensor *b) {
  if (kiln_tensor_numel(a) != kiln_tensor_numel(b) || kiln_tensor_dtype(a) != KILN_DTYPE_F32 ||
      kiln_tensor_dtype(b) != KILN_DTYPE_F32)
    return INFINITY;
  const float *x = kiln_tensor_data(a), *y = kiln_tensor_data(b);
  double m = 0;
  for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
    double d = fabs((double)x[i] - (double)y[i]);
    if (!(d <= m)) m = d; /* NaN counts as a mismatch */
  }
  return m;
}

/* A model's PyTorch input copied into a buffer 4 bytes past a 64-byte
 * boundary, wrapped, run on cpu; against ref on a created tensor and
 * against PyTorch's output. */
static void test_wrap_misaligned(const char *model_name) {
  char path[2048];
  snprintf(path, sizeof path, "%s.onnx", model_name);
  kiln_model *m = load(path);
  if (!m) return;
  kiln_tensor *x = NULL, *expected = NULL;
  snprintf(path, sizeof path, "%s/%s.input.npy", g_models, model_name);
  ok(kiln_tensor_load_npy(path, &x), path);
  snprintf(path, sizeof path, "%s/%s.expected.npy", g_models, model_name);
  ok(kiln_tensor_load_npy(path, &expected), path);
  kiln_io_info info;
  ok(kiln_model_input_info(m, 0, &info), "input 0");
  if (!x || !expected || kiln_tensor_dtype(x) != KILN_DTYPE_F32) {
    CHECK(0, "%s: no f32 input/expected", model_name);
    goto done;
  }
  size_t nbytes = (size_t)kiln_tensor_numel(x) * sizeof(float);
  char *block = aligned_alloc(64, nbytes + 128);
  float *misaligned = (float *)(block + 4);
  memcpy(misaligned, kiln_tensor_data(x), nbytes);
  int released = 0;
  kiln_tensor *wrapped = NULL;
  kiln_session_options o = kiln_session_options_default();
  kiln_session *cpu = NULL, *ref = NULL;
  kiln_tensor *out_cpu = NULL, *out_ref = NULL;
  o.device = "cpu";
  const char *names[1] = {info.name};
  if (ok(kiln_tensor_wrap(KILN_DTYPE_F32, kiln_tensor_rank(x), kiln_tensor_dims(x), misaligned, nbytes,
                          count_release, &released, &wrapped),
         "wrap the misaligned input") &&
      ok(kiln_session_create(m, &o, &cpu), "cpu session") &&
      ok(kiln_session_run(cpu, 1, names, (const kiln_tensor *const *)&wrapped, 1, &out_cpu), "cpu run (misaligned)")) {
    o.device = "ref";
    if (ok(kiln_session_create(m, &o, &ref), "ref session") &&
        ok(kiln_session_run(ref, 1, names, (const kiln_tensor *const *)&x, 1, &out_ref), "ref run")) {
      double d_ref = max_abs_diff(out_cpu, out_ref), d_torch = max_abs_diff(out_cpu, expected);
      CHECK(d_ref <= 1e-3, "%s: misaligned cpu vs ref: max abs diff %g", model_name, d_ref);
      CHECK(d_torch <= 1e-3, "%s: misaligned cpu vs PyTorch: max abs diff %g", model_name, d_torch);
      printf("ok: %s misaligned (+4 bytes) input on cpu: max abs diff %.3g vs ref, %.3g vs PyTorch\n", model_name,
             d_ref, d_torch);
    }
    /* Run again: a session may keep state between runs, never the caller's buffer. */
    kiln_tensor_release(out_cpu);
    out_cpu = NULL;
    ok(kiln_session_run(cpu, 1, names, (const kiln_tensor *const *)&wrapped, 1, &out_cpu), "second cpu run");
    CHECK(out_cpu && max_abs_diff(out_cpu, expected) <= 1e-3, "%s: second run differs", model_name);
  }
  CHECK(released == 0, "released while the caller still holds the tensor");
  kiln_tensor_release(wrapped);
  CHECK(released == 1, "%s: release called %d times after the last reference", model_name, released);
  kiln_tensor_release(out_cpu);
  kiln_tensor_release(out_ref);
  kiln_session_destroy(cpu);
  kiln_session_destroy(ref);
  free(block);
done:
  kiln_tensor_release(x);
  kiln_tensor_release(expected);
  kiln_model_destroy(m);
}

/* A graph output that is the wrapped input passed through: on ref the
 * output is the input tensor itself, and the release waits for it. */
static void test_wrap_passed_through(const char *path) {
  kiln_model *m = NULL;
  if (!ok(kiln_model_load_file(path, &m), path)) return;
  const char *devices[2] = {"ref", "cpu"};
  for (int d = 0; d < 2; d++) {
    float buf[15];
    for (int i = 0; i < 15; i++) buf[i] = rnd_normalish();
    int64_t dims[2] = {3, 5};
    int released = 0;
    kiln_tensor *x = NULL, *y = NULL;
    kiln_session *s = NULL;
    kiln_session_options o = kiln_session_options_default();
    o.device = devices[d];
    const char *names[1] = {"x"};
    if (ok(kiln_tensor_wrap(KILN_DTYPE_F32, 2, dims, buf, sizeof buf, count_release, &released, &x), "wrap") &&
        ok(kiln_session_create(m, &o, &s), devices[d]) &&
        ok(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&x, 1, &y), "identity run")) {
      CHECK(!memcmp(kiln_tensor_data(y), buf, sizeof buf), "%s: identity output differs", devices[d]);
      bool aliased = kiln_tensor_data(y) == (void *)buf;
      kiln_tensor_release(x);
      x = NULL;
      CHECK(released == (aliased ? 0 : 1), "%s: released %d times with the output %s", devices[d], released,
            aliased ? "aliasing the buffer alive" : "a copy");
      kiln_tensor_release(y);
      y = NULL;
      CHECK(released == 1, "%s: released %d times after both", devices[d], released);
      printf("ok: %s: an output passed through %s\n", devices[d], aliased ? "is the wrapped tensor" : "is a copy");
    }
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_session_destroy(s);
  }
  kiln_model_destroy(m);
}

/* ---- metadata ---- */

static void test_metadata(const char *path) {
  kiln_model *m = NULL;
  if (!ok(kiln_model_load_file(path, &m), path)) return;
  kiln_model_metadata md;
  char text[8192] = "";
  size_t len = 0;
#define ADD(...) len += (size_t)snprintf(text + len, sizeof text - len, __VA_ARGS__)
  if (ok(kiln_model_metadata_get(m, &md), "kiln_model_metadata_get")) {
    /* Fields separated by ASCII RS: the strings hold newlines. */
    ADD("producer_name=%s\x1eproducer_version=%s\x1e" "domain=%s\x1e" "doc_string=%s\x1egraph_name=%s\x1e"
        "graph_doc_string=%s\x1emodel_version=%lld\x1eir_version=%lld\x1en_opsets=%d\x1en_props=%d\x1e",
        md.producer_name, md.producer_version, md.domain, md.doc_string, md.graph_name, md.graph_doc_string,
        (long long)md.model_version, (long long)md.ir_version, md.n_opsets, md.n_props);
    for (int i = 0; i < md.n_opsets; i++) {
      const char *domain = NULL;
      int64_t version = 0;
      if (ok(kiln_model_opset(m, i, &domain, &version), "kiln_model_opset"))
        ADD("opset%d=%s:%lld\x1e", i, domain, (long long)version);
    }
    for (int i = 0; i < md.n_props; i++) {
      const char *key = NULL, *value = NULL;
      if (ok(kiln_model_metadata_prop(m, i, &key, &value), "kiln_model_metadata_prop"))
        ADD("prop%d=%s:%s\x1e", i, key, value);
    }
    CHECK(md.n_props == 3 && md.n_opsets == 2, "n_props %d n_opsets %d", md.n_props, md.n_opsets);
    check_json("metadata", path, text);
  }
#undef ADD
  const char *s = NULL, *v = NULL;
  int64_t ver = 0;
  expect_error(kiln_model_opset(m, md.n_opsets, &s, &ver), KILN_OUT_OF_RANGE, "out of range", "opset past the end");
  expect_error(kiln_model_metadata_prop(m, -1, &s, &v), KILN_OUT_OF_RANGE, "out of range", "prop -1");
  expect_error(kiln_model_metadata_get(NULL, &md), KILN_INVALID_ARGUMENT, "model", "metadata of NULL");
  expect_error(kiln_model_metadata_prop(m, 0, NULL, &v), KILN_INVALID_ARGUMENT, "NULL", "prop without out_key");

  /* The report of this model on cpu: its escaped node names, fused into one kernel. */
  kiln_session_options o = kiln_session_options_default();
  o.device = "cpu";
  kiln_session *sess = NULL;
  char *json = NULL;
  if (ok(kiln_session_create(m, &o, &sess), "cpu session (metadata model)") &&
      ok(kiln_session_report_json(sess, &json), "report (metadata model)"))
    check_json("report", "names", json);
  kiln_string_free(json);
  kiln_session_destroy(sess);

  /* A model without any of it: "" and 0, never NULL. */
  kiln_model_destroy(m);
  m = load("mlp.onnx");
  if (m && ok(kiln_model_metadata_get(m, &md), "metadata of mlp")) {
    CHECK(md.graph_doc_string && md.domain && md.doc_string && md.producer_name, "NULL string in the metadata");
    CHECK(md.n_props == 0 && md.n_opsets >= 1 && !strcmp(md.producer_name, "pytorch"),
          "mlp: %d props, %d opsets, producer '%s'", md.n_props, md.n_opsets, md.producer_name);
  }
  kiln_model_destroy(m);
}

/* ---- the JSON reports ---- */

static void test_devices_json(void) {
  char *json = NULL;
  if (ok(kiln_devices_json(&json), "kiln_devices_json")) check_json("devices", NULL, json);
  kiln_string_free(json);
  expect_error(kiln_devices_json(NULL), KILN_INVALID_ARGUMENT, "out_json", "devices_json(NULL)");
}

static void test_report_and_profile(void) {
  kiln_model *m = load("small_cnn.onnx");
  if (!m) return;
  char *json = NULL;
  expect_error(kiln_session_report_json(NULL, &json), KILN_INVALID_ARGUMENT, "session", "report of NULL");
  expect_error(kiln_session_describe(NULL, &json), KILN_INVALID_ARGUMENT, "session", "describe of NULL");
  expect_error(kiln_session_set_profiling(NULL, 1), KILN_INVALID_ARGUMENT, "session", "profiling NULL");
  expect_error(kiln_session_profile_json(NULL, &json), KILN_INVALID_ARGUMENT, "session", "profile of NULL");
  /* cpu, ref, and the GPU devices found (lavapipe, PoCL, CUDA): their profiled runs go step by step. */
  const char *devices[5] = {"cpu", "ref"}, *checks[5] = {"report", "report_ref"};
  int n_devices = 2;
  for (int i = 0; i < kiln_device_count() && n_devices < 5; i++)
    if (!strncmp(kiln_device_name(i), "vulkan", 6) || !strncmp(kiln_device_name(i), "opencl", 6) ||
        !strncmp(kiln_device_name(i), "cuda", 4)) {
      devices[n_devices] = kiln_device_name(i);
      checks[n_devices++] = "report_gpu";
    }
  for (int d = 0; d < n_devices; d++) {
    kiln_session_options o = kiln_session_options_default();
    o.device = devices[d];
    kiln_session *s = NULL;
    if (!ok(kiln_session_create(m, &o, &s), devices[d])) continue;
    /* Before any run: compiled for the declared shapes. */
    if (ok(kiln_session_report_json(s, &json), "report before a run")) check_json(checks[d], NULL, json);
    kiln_string_free(json);
    json = NULL;
    /* The text `kiln info --device` prints: it starts by naming the device. */
    char *text = NULL, head[64];
    snprintf(head, sizeof head, "device %s:\n", devices[d]);
    if (ok(kiln_session_describe(s, &text), "kiln_session_describe"))
      CHECK(!strncmp(text, head, strlen(head)) && strlen(text) > strlen(head), "describe: %.300s", text);
    kiln_string_free(text);
    expect_error(kiln_session_describe(s, NULL), KILN_INVALID_ARGUMENT, "out_text", "describe without out_text");
    expect_error(kiln_session_profile_json(s, &json), KILN_INVALID_ARGUMENT, "profiling is off", "profile while off");
    ok(kiln_session_set_profiling(s, 1), "enable profiling");
    kiln_io_info info;
    ok(kiln_model_input_info(m, 0, &info), "input info");
    int64_t dims[KILN_MAX_RANK];
    for (int i = 0; i < info.rank; i++) dims[i] = info.dims[i] > 0 ? info.dims[i] : 2;
    kiln_tensor *x = NULL;
    if (ok(kiln_tensor_create(KILN_DTYPE_F32, info.rank, dims, &x), "input")) {
      float *xd = kiln_tensor_data(x);
      for (int64_t i = 0; i < kiln_tensor_numel(x); i++) xd[i] = rnd_normalish();
      const char *names[1] = {info.name};
      for (int r = 0; r < 3; r++) {
        kiln_tensor *y = NULL;
        ok(kiln_session_run(s, 1, names, (const kiln_tensor *const *)&x, 1, &y), "profiled run");
        kiln_tensor_release(y);
      }
    }
    kiln_tensor_release(x);
    if (ok(kiln_session_profile_json(s, &json), "profile_json")) check_json("profile", NULL, json);
    kiln_string_free(json);
    json = NULL;
    if (ok(kiln_session_profile_json(s, &json), "profile_json again")) check_json("profile_empty", NULL, json);
    kiln_string_free(json);
    json = NULL;
    /* After a run: the report of the run's shapes. */
    if (ok(kiln_session_report_json(s, &json), "report after runs")) check_json(checks[d], NULL, json);
    kiln_string_free(json);
    json = NULL;
    ok(kiln_session_set_profiling(s, 0), "disable profiling");
    expect_error(kiln_session_profile_json(s, &json), KILN_INVALID_ARGUMENT, "profiling is off", "profile after off");
    kiln_session_destroy(s);
  }
  kiln_model_destroy(m);
}

/* kiln_model_info_json against what onnx's Python reads from the file, and kiln_model_dot's text. */
static void test_model_info(const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", g_models, name);
  kiln_model *m = load(name);
  if (!m) return;
  char *json = NULL, *dot = NULL;
  if (ok(kiln_model_info_json(m, &json), "kiln_model_info_json")) check_json("model_info", path, json);
  if (ok(kiln_model_dot(m, &dot), "kiln_model_dot")) {
    CHECK(!strncmp(dot, "digraph kiln {\n", 15) && strlen(dot) > 2 && !strcmp(dot + strlen(dot) - 2, "}\n"),
          "dot text: %.200s", dot);
  }
  kiln_string_free(json);
  kiln_string_free(dot);
  json = dot = NULL;
  expect_error(kiln_model_info_json(NULL, &json), KILN_INVALID_ARGUMENT, "model", "model_info of NULL");
  expect_error(kiln_model_info_json(m, NULL), KILN_INVALID_ARGUMENT, "out_json", "model_info without out_json");
  expect_error(kiln_model_dot(NULL, &dot), KILN_INVALID_ARGUMENT, "model", "dot of NULL");
  expect_error(kiln_model_dot(m, NULL), KILN_INVALID_ARGUMENT, "out_text", "dot without out_text");
  CHECK(json == NULL && dot == NULL, "a failed call left its out parameter set");
  kiln_model_destroy(m);
}

static void test_verify_json(void) {
  kiln_model *m = load("mlp.onnx");
  if (!m) return;
  char *json = NULL;
  kiln_verify_options vo = kiln_verify_options_default();
  CHECK(vo.device == NULL && vo.rtol == 1e-3 && vo.atol == 1e-4 && vo.max_report == 5, "verify defaults");
  vo.device = "cpu";
  if (ok(kiln_verify_json(m, &vo, 0, NULL, NULL, &json), "verify_json cpu, random inputs"))
    check_json("verify", NULL, json);
  kiln_string_free(json);
  json = NULL;
  /* NULL options: the defaults, on the default device. */
  if (ok(kiln_verify_json(m, NULL, 0, NULL, NULL, &json), "verify_json default options"))
    check_json("verify", NULL, json);
  kiln_string_free(json);
  json = NULL;
  /* ref against ref is exact: tolerances of 0 pass, and the report says which it used. */
  kiln_verify_options exact = kiln_verify_options_default();
  exact.device = "ref";
  exact.rtol = 0;
  exact.atol = 0;
  if (ok(kiln_verify_json(m, &exact, 0, NULL, NULL, &json), "verify_json ref, tolerance 0"))
    check_json("verify_exact", NULL, json);
  kiln_string_free(json);
  json = NULL;
  exact.rtol = -1;
  expect_error(kiln_verify_json(m, &exact, 0, NULL, NULL, &json), KILN_INVALID_ARGUMENT, "rtol", "verify rtol < 0");
  exact.rtol = 0;
  exact.atol = NAN;
  expect_error(kiln_verify_json(m, &exact, 0, NULL, NULL, &json), KILN_INVALID_ARGUMENT, "atol", "verify atol NaN");
  exact.atol = 0;
  exact.max_report = -1;
  expect_error(kiln_verify_json(m, &exact, 0, NULL, NULL, &json), KILN_INVALID_ARGUMENT, "max_report",
               "verify max_report < 0");
  CHECK(json == NULL, "a refused verify left out_json set");
  kiln_string_free(json);
  json = NULL;
  /* Given inputs: PyTorch's, wrapped. */
  char path[2048];
  snprintf(path, sizeof path, "%s/mlp.input.npy", g_models);
  kiln_tensor *x = NULL;
  kiln_io_info info;
  if (ok(kiln_tensor_load_npy(path, &x), path) && ok(kiln_model_input_info(m, 0, &info), "mlp input")) {
    const char *names[1] = {info.name};
    if (ok(kiln_verify_json(m, &vo, 1, names, (const kiln_tensor *const *)&x, &json), "verify_json given"))
      check_json("verify_given", NULL, json);
    kiln_string_free(json);
    json = NULL;
    const char *wrong[1] = {"no_such_input"};
    expect_error(kiln_verify_json(m, &vo, 1, wrong, (const kiln_tensor *const *)&x, &json), KILN_INVALID_ARGUMENT,
                 "no_such_input", "verify with an unknown input name");
  }
  kiln_tensor_release(x);
  vo.device = "no-such-device";
  expect_error(kiln_verify_json(m, &vo, 0, NULL, NULL, &json), KILN_NOT_FOUND, "no-such-device",
               "verify on an unknown device");
  vo.device = "cpu";
  expect_error(kiln_verify_json(NULL, &vo, 0, NULL, NULL, &json), KILN_INVALID_ARGUMENT, "model",
               "verify NULL model");
  expect_error(kiln_verify_json(m, &vo, 0, NULL, NULL, NULL), KILN_INVALID_ARGUMENT, "out_json", "verify NULL out");
  CHECK(json == NULL, "a failed call left out_json set");
  kiln_model_destroy(m);
}

static void test_bench_json(void) {
  kiln_model *m = load("small_cnn.onnx");
  if (!m) return;
  kiln_session_options o = kiln_session_options_default();
  o.device = "cpu";
  o.threads = 1;
  char *json = NULL;
  if (ok(kiln_bench_json(m, &o, 0, NULL, NULL, 2, 5, 1, &json), "bench_json profiled")) check_json("bench", NULL, json);
  kiln_string_free(json);
  json = NULL;
  o.device = "ref";
  if (ok(kiln_bench_json(m, &o, 0, NULL, NULL, 2, 5, 0, &json), "bench_json ref"))
    check_json("bench_noprof", NULL, json);
  kiln_string_free(json);
  json = NULL;
  expect_error(kiln_bench_json(m, &o, 0, NULL, NULL, 0, 0, 0, &json), KILN_INVALID_ARGUMENT, "iterations",
               "bench with 0 iterations");
  o.device = "no-such-device";
  expect_error(kiln_bench_json(m, &o, 0, NULL, NULL, 1, 1, 0, &json), KILN_NOT_FOUND, "no-such-device",
               "bench on an unknown device");
  expect_error(kiln_bench_json(NULL, NULL, 0, NULL, NULL, 1, 1, 0, &json), KILN_INVALID_ARGUMENT, "model",
               "bench NULL model");
  kiln_model_destroy(m);
}

/* Values: a tensor wrapped and read back, a sequence built item by item
 * (references counted through wrap's release), an empty optional, and the
 * refused calls (a NULL or non-sequence target, an item of another dtype,
 * a NULL session), each a status with a message. */
static int released;
static void count_value_release(void *user) { (void)user; released++; }

static void test_values(void) {
  float a[3] = {1.5f, -2, 3}, b[2] = {4, 5};
  int64_t da[1] = {3}, db[1] = {2};
  kiln_tensor *ta = NULL, *tb = NULL, *ti = NULL;
  released = 0;
  if (!ok(kiln_tensor_wrap(KILN_DTYPE_F32, 1, da, a, sizeof a, count_value_release, NULL, &ta), "wrap a") ||
      !ok(kiln_tensor_wrap(KILN_DTYPE_F32, 1, db, b, sizeof b, count_value_release, NULL, &tb), "wrap b") ||
      !ok(kiln_tensor_create(KILN_DTYPE_I64, 1, db, &ti), "create i64"))
    return;
  kiln_value *tv = NULL, *seq = NULL, *none = NULL;
  if (ok(kiln_value_from_tensor(kiln_tensor_retain(ta), &tv), "value of a tensor")) {
    CHECK(kiln_value_kind_of(tv) == KILN_VALUE_TENSOR && kiln_value_count(tv) == 1, "tensor value kind/count");
    CHECK(kiln_value_item(tv, 0) == ta && kiln_value_item(tv, 1) == NULL, "tensor value item");
    CHECK(kiln_value_elem_dtype(tv) == KILN_DTYPE_F32, "tensor value dtype");
  }
  if (ok(kiln_value_new_sequence(KILN_DTYPE_F32, &seq), "new sequence")) {
    ok(kiln_value_seq_insert(seq, -1, kiln_tensor_retain(tb)), "insert b");
    ok(kiln_value_seq_insert(seq, 0, kiln_tensor_retain(ta)), "insert a at 0");
    CHECK(kiln_value_kind_of(seq) == KILN_VALUE_SEQUENCE && kiln_value_count(seq) == 2, "sequence count");
    CHECK(kiln_value_item(seq, 0) == ta && kiln_value_item(seq, 1) == tb && !kiln_value_item(seq, 2), "sequence order");
    expect_error(kiln_value_seq_insert(seq, -1, kiln_tensor_retain(ti)), KILN_INVALID_ARGUMENT, "i64",
                 "an i64 item into an f32 sequence");
    expect_error(kiln_value_seq_insert(seq, 7, kiln_tensor_retain(ta)), KILN_OUT_OF_RANGE, "position 7",
                 "an item past the end");
    CHECK(kiln_value_count(seq) == 2, "refused items not added");
  }
  expect_error(kiln_value_seq_insert(tv, -1, kiln_tensor_retain(ta)), KILN_INVALID_ARGUMENT, "not a sequence",
               "insert into a tensor value");
  expect_error(kiln_value_seq_insert(NULL, -1, kiln_tensor_retain(ta)), KILN_INVALID_ARGUMENT, "not a sequence",
               "insert into NULL");
  expect_error(kiln_value_from_tensor(NULL, &none), KILN_INVALID_ARGUMENT, "NULL", "value of NULL");
  if (ok(kiln_value_new_none(KILN_DTYPE_F32, false, &none), "new none")) {
    CHECK(kiln_value_kind_of(none) == KILN_VALUE_NONE && kiln_value_count(none) == 0 && !kiln_value_item(none, 0),
          "none value");
    CHECK(kiln_value_elem_dtype(none) == KILN_DTYPE_F32, "none's declared dtype");
  }
  kiln_value *outs[1] = {NULL};
  const char *names[1] = {"x"};
  expect_error(kiln_session_run_values(NULL, 1, names, &tv, 1, outs), KILN_INVALID_ARGUMENT, "session",
               "run_values on NULL");
  kiln_value_free(tv);
  kiln_value_free(seq);
  kiln_value_free(none);
  kiln_value_free(NULL);
  kiln_tensor_release(ta);
  kiln_tensor_release(tb);
  kiln_tensor_release(ti);
  CHECK(released == 2, "every reference dropped: %d of 2 wrapped buffers released", released);
  printf("ok: values (tensor, sequence, none; refused calls)\n");
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODELS_DIR TESTS_API_DIR PYTHON WORK_DIR\n", argv[0]);
    return 2;
  }
  g_models = argv[1];
  g_api_dir = argv[2];
  g_python = argv[3];
  g_work = argv[4];
  char meta[2048], identity[2048], cmd[8192];
  snprintf(meta, sizeof meta, "%s/api_metadata.onnx", g_work);
  snprintf(identity, sizeof identity, "%s/api_identity.onnx", g_work);
  snprintf(cmd, sizeof cmd, "'%s' '%s/make_metadata_model.py' '%s' '%s'", g_python, g_api_dir, meta, identity);
  if (system(cmd) != 0) {
    printf("FAIL: %s\n", cmd);
    return 1;
  }
  test_version();
  test_wrap_arguments();
  test_wrap_misaligned("mlp");
  test_wrap_misaligned("small_cnn");
  test_wrap_misaligned("transformer_encoder");
  test_wrap_passed_through(identity);
  test_metadata(meta);
  test_devices_json();
  test_report_and_profile();
  test_model_info("mlp.onnx");
  test_model_info("small_cnn.onnx");
  test_verify_json();
  test_bench_json();
  test_values();
  printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
