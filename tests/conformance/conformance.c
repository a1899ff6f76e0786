/* kiln_conformance — runs the official ONNX backend test data through the
 * library and compares with the expected outputs.
 *
 *   kiln_conformance --data DIR --suite node [--expect FILE] [--filter SUBSTR]
 *                    [--device ref] [-v] [--write-expect FILE] [--no-fork]
 *                    [--via-cli PATH/TO/kiln]
 *
 * Each case (DIR/SUITE/CASE/model.onnx + test_data_set_N/{input,output}_K.pb)
 * runs in a forked child with a time limit, so a crash or a hang is reported
 * as that case's failure, not the runner's. Inputs and expected outputs are
 * read with kiln's own protobuf reader. Floats compare with
 * |got - want| <= atol + rtol * |want| (rtol 1e-3, bf16 2^-6; atol 1e-4; NaN == NaN),
 * integers, bools and strings exactly, shapes exactly.
 *
 * Cases whose outputs are random (listed in random_cases below) run and have
 * their output dtypes and shapes checked, but not their values.
 *
 * With --expect, the run fails if any case listed there fails; the summary
 * also lists cases that pass but are not listed (to be added).
 * With --via-cli, each case runs through the `kiln run` command instead
 * (inputs written as .npy, outputs read back from --output-dir): the CLI
 * must agree with the library on every case. Sequence inputs go in as .npz,
 * empty optionals are omitted. A case whose inputs the CLI could not
 * express would be reported as not applicable, never as passed.
 * Every node output is also checked against its statically inferred type;
 * disagreements are reported as inference mismatches.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onnx/onnx.h"
#include "runtime/session.h"
#include "tensor/npy.h"

#define MAX_IO 64

static const char *random_cases[] = {
    "test_bernoulli",        /* Bernoulli: random draws */
    "test_training_dropout", /* Dropout with training_mode=1: random mask (ratio 0 variants are exact, see below) */
};
static const char *exact_despite_prefix[] = {
    "test_training_dropout_zero_ratio", /* ratio 0: output == input */
    "test_training_dropout_zero_ratio_mask",
};

static bool is_random_case(const char *name) {
  for (size_t i = 0; i < KILN_ARRAY_SIZE(exact_despite_prefix); i++)
    if (!strcmp(name, exact_despite_prefix[i])) return false;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(random_cases); i++)
    if (!strncmp(name, random_cases[i], strlen(random_cases[i]))) return true;
  return false;
}

typedef struct options {
  const char *data, *suite, *expect, *write_expect, *device, *via_cli;
  const char *filters[32];
  int n_filters;
  bool verbose, no_fork;
  bool compile_only; /* prepare the session on data set 0's inputs; run nothing (the null device) */
  int timeout_s;
} options;

static kiln_status_t read_file(const char *path, uint8_t **out, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return kiln_error(KILN_IO_ERROR, "cannot open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf) {
    fclose(f);
    return KILN_OOM();
  }
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  if ((long)got != n) {
    free(buf);
    return kiln_error(KILN_IO_ERROR, "short read of %s", path);
  }
  *out = buf;
  *size = (size_t)n;
  return NULL;
}

static kiln_status_t load_value(const char *path, const char *dir, const kiln_type *type, kiln_value **out) {
  uint8_t *buf = NULL;
  size_t n = 0;
  KILN_TRY(read_file(path, &buf, &n));
  kiln_status_t st;
  if (type->kind == KILN_TYPE_SEQUENCE) {
    st = kiln_onnx_parse_sequence(buf, n, dir, out);
  } else if (type->kind == KILN_TYPE_OPTIONAL_TENSOR || type->kind == KILN_TYPE_OPTIONAL_SEQUENCE) {
    st = kiln_onnx_parse_optional(buf, n, dir, out);
  } else {
    kiln_tensor *t;
    st = kiln_onnx_parse_tensor(buf, n, dir, &t);
    /* ONNX 1.12's test data stores bfloat16 tensors as uint16 (numpy has no
     * bfloat16): the bits are bf16, so read them as the model declares. */
    if (!st && t->dtype == KILN_DTYPE_U16 && type->dtype == KILN_DTYPE_BF16) t->dtype = KILN_DTYPE_BF16;
    if (!st) st = kiln_value_from_tensor(t, out);
  }
  free(buf);
  return st ? kiln_status_annotate(st, "%s", path) : NULL;
}

/* ---- comparison ---------------------------------------------------------- */

typedef struct compare_result {
  double max_abs, max_rel;
} compare_result;

static kiln_status_t compare_tensor(const kiln_tensor *got, const kiln_tensor *want, bool values, const char *what,
                                    compare_result *cr) {
  char a[256], b[256];
  if (got->dtype != want->dtype)
    return kiln_error(KILN_INTERNAL, "%s: dtype %s, expected %s", what, kiln_dtype_name(got->dtype),
                      kiln_dtype_name(want->dtype));
  if (!kiln_shape_equal(got->rank, got->dims, want->rank, want->dims))
    return kiln_error(KILN_INTERNAL, "%s: shape %s, expected %s", what, kiln_shape_str(got->rank, got->dims, a, sizeof a),
                      kiln_shape_str(want->rank, want->dims, b, sizeof b));
  if (!values) return NULL;
  kiln_dtype dt = got->dtype;
  for (int64_t i = 0; i < got->numel; i++) {
    if (dt == KILN_DTYPE_STRING) {
      const char *x = ((char **)got->data)[i], *y = ((char **)want->data)[i];
      if (strcmp(x ? x : "", y ? y : ""))
        return kiln_error(KILN_INTERNAL, "%s[%lld]: \"%s\", expected \"%s\"", what, (long long)i, x ? x : "", y ? y : "");
    } else if (kiln_dtype_is_float(dt)) {
      double x = kiln_load_f64(got->data, dt, i), y = kiln_load_f64(want->data, dt, i);
      if (isnan(x) && isnan(y)) continue;
      if (isinf(y) || isinf(x)) {
        if (x != y)
          return kiln_error(KILN_INTERNAL, "%s[%lld]: %g, expected %g", what, (long long)i, x, y);
        continue;
      }
      double d = fabs(x - y);
      if (d > cr->max_abs) cr->max_abs = d;
      if (y != 0 && d / fabs(y) > cr->max_rel) cr->max_rel = d / fabs(y);
      /* bf16 keeps 8 significant bits: 1e-3 would ask for the reference's
       * own rounding steps bit for bit (its sums round after every addition,
       * as ml_dtypes' do); a device summing in f32 lands within 2 of its
       * ulps (2^-6 relative) */
      double rtol = dt == KILN_DTYPE_BF16 ? 0.015625 : 1e-3;
      if (!(d <= 1e-4 + rtol * fabs(y)))
        return kiln_error(KILN_INTERNAL, "%s[%lld]: %.9g, expected %.9g (abs err %.3g)", what, (long long)i, x, y, d);
    } else if (dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128) {
      return kiln_error(KILN_UNSUPPORTED, "%s: complex outputs are not compared", what);
    } else {
      uint64_t x = kiln_load_u64(got->data, dt, i), y = kiln_load_u64(want->data, dt, i);
      if (x != y)
        return kiln_error(KILN_INTERNAL, "%s[%lld]: %lld, expected %lld", what, (long long)i, (long long)x, (long long)y);
    }
  }
  return NULL;
}

static kiln_status_t compare_value(const kiln_value *got, const kiln_value *want, bool values, const char *what,
                                   compare_result *cr) {
  if (want->kind == KILN_VALUE_NONE) {
    if (got->kind != KILN_VALUE_NONE) return kiln_error(KILN_INTERNAL, "%s: expected an empty optional", what);
    return NULL;
  }
  if (got->kind != want->kind)
    return kiln_error(KILN_INTERNAL, "%s: got a %s, expected a %s", what,
                      got->kind == KILN_VALUE_TENSOR ? "tensor" : got->kind == KILN_VALUE_SEQUENCE ? "sequence" : "none",
                      want->kind == KILN_VALUE_TENSOR ? "tensor" : "sequence");
  if (want->kind == KILN_VALUE_TENSOR) return compare_tensor(got->tensor, want->tensor, values, what, cr);
  if (got->n_items != want->n_items)
    return kiln_error(KILN_INTERNAL, "%s: sequence of %d, expected %d", what, got->n_items, want->n_items);
  for (int i = 0; i < want->n_items; i++) {
    char w[400];
    snprintf(w, sizeof w, "%s item %d", what, i);
    KILN_TRY(compare_tensor(got->items[i], want->items[i], values, w, cr));
  }
  return NULL;
}

/* ---- inference check ----------------------------------------------------- */

typedef struct infer_check {
  char first_mismatch[512];
  int mismatches;
  int outputs, unknown; /* node outputs seen; those whose inferred shape was not fully known */
  char first_unknown[160];
} infer_check;

static kiln_status_t observe_node(void *user, const kiln_graph *g, const kiln_node *node, kiln_value *const *outputs) {
  infer_check *ic = user;
  for (int i = 0; i < node->n_outputs; i++) {
    int id = node->outputs[i];
    if (id < 0 || !outputs[i] || outputs[i]->kind != KILN_VALUE_TENSOR) continue;
    const kiln_type *t = &g->values[id].type;
    const kiln_tensor *x = outputs[i]->tensor;
    ic->outputs++;
    bool known = t->kind == KILN_TYPE_TENSOR && t->rank >= 0 && t->dtype;
    for (int d = 0; known && d < t->rank; d++) known = t->dims[d] >= 0;
    if (!known && !ic->unknown++) snprintf(ic->first_unknown, sizeof ic->first_unknown, "%s", node->op_type);
    bool ok = t->kind == KILN_TYPE_UNKNOWN || t->kind != KILN_TYPE_TENSOR || !t->dtype || t->dtype == x->dtype;
    if (ok && t->kind == KILN_TYPE_TENSOR && t->rank >= 0) {
      ok = t->rank == x->rank;
      for (int d = 0; ok && d < t->rank; d++) ok = t->dims[d] < 0 || t->dims[d] == x->dims[d];
    }
    if (!ok) {
      if (!ic->mismatches++) {
        char a[256], b[256];
        snprintf(ic->first_mismatch, sizeof ic->first_mismatch, "node '%s' (%s) output %d: inferred %s, ran %s%s",
                 node->name, node->op_type, i, kiln_type_str(t, a, sizeof a), kiln_dtype_name(x->dtype),
                 kiln_shape_str(x->rank, x->dims, b, sizeof b));
      }
    }
  }
  return NULL;
}

/* ---- through the command line ---------------------------------------------- */

#define NOT_APPLICABLE "not applicable via the CLI"

static kiln_status_t run_via_cli(const options *o, const char *model_path, int n_in, const char *const *names,
                                 kiln_value *const *ins, int n_out, kiln_value **outs) {
  char tmpl[] = "/tmp/kiln_conf_XXXXXX";
  if (!mkdtemp(tmpl)) return kiln_error(KILN_IO_ERROR, "mkdtemp: %s", strerror(errno));
  kiln_status_t st = NULL;
  char *argv[2 * MAX_IO + 8];
  int argc = 0;
  argv[argc++] = (char *)o->via_cli;
  argv[argc++] = "run";
  argv[argc++] = (char *)model_path;
  argv[argc++] = "--device";
  argv[argc++] = (char *)o->device;
  char *owned[MAX_IO + 1] = {0};
  for (int i = 0; i < n_in && !st; i++) {
    char path[512];
    if (ins[i]->kind == KILN_VALUE_NONE) continue; /* omitted optional input */
    if (ins[i]->kind == KILN_VALUE_SEQUENCE) {
      snprintf(path, sizeof path, "%s/input_%d.npz", tmpl, i);
      char *item_names[MAX_IO];
      int n = ins[i]->n_items < MAX_IO ? ins[i]->n_items : MAX_IO;
      for (int k = 0; k < n; k++) item_names[k] = kiln_strfmt("item_%d", k);
      st = kiln_npz_write_file(path, n, (const char *const *)item_names, (const kiln_tensor *const *)ins[i]->items);
      for (int k = 0; k < n; k++) free(item_names[k]);
    } else {
      snprintf(path, sizeof path, "%s/input_%d.npy", tmpl, i);
      st = kiln_npy_write_file(path, ins[i]->tensor);
    }
    owned[i] = kiln_strfmt("%s=%s", names[i], path);
    argv[argc++] = "--input";
    argv[argc++] = owned[i];
  }
  char outdir[512], errpath[512];
  snprintf(outdir, sizeof outdir, "%s/out", tmpl);
  snprintf(errpath, sizeof errpath, "%s/stderr", tmpl);
  argv[argc++] = "--output-dir";
  argv[argc++] = outdir;
  argv[argc] = NULL;
  if (!st) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      FILE *e = freopen(errpath, "w", stderr);
      (void)e;
      execv(o->via_cli, argv);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char msg[600] = "";
      FILE *e = fopen(errpath, "r");
      if (e) {
        if (!fgets(msg, sizeof msg, e)) msg[0] = 0;
        fclose(e);
      }
      msg[strcspn(msg, "\n")] = 0;
      st = kiln_error(KILN_INTERNAL, "kiln run exited with status %d: %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                      msg);
    }
  }
  for (int k = 0; k < n_out && !st; k++) {
    char path[600];
    struct stat sb;
    snprintf(path, sizeof path, "%s/output_%d.npy", outdir, k);
    if (stat(path, &sb) == 0) {
      kiln_tensor *t;
      st = kiln_npy_read_file(path, &t);
      if (!st) st = kiln_value_from_tensor(t, &outs[k]);
      continue;
    }
    snprintf(path, sizeof path, "%s/output_%d.npz", outdir, k);
    if (stat(path, &sb) != 0) { /* neither file: the CLI's empty optional */
      st = kiln_value_new_none(KILN_DTYPE_UNDEFINED, false, &outs[k]);
      continue;
    }
    int n = 0;
    char **nm = NULL;
    kiln_tensor **ts = NULL;
    st = kiln_npz_read_file(path, &n, &nm, &ts);
    if (!st) st = kiln_value_new_sequence(n ? ts[0]->dtype : KILN_DTYPE_F32, &outs[k]);
    for (int i = 0; i < n && !st; i++) st = kiln_value_seq_insert(outs[k], -1, kiln_tensor_retain(ts[i]));
    if (nm) kiln_npz_free(n, nm, ts);
  }
  for (int i = 0; i <= MAX_IO; i++) free(owned[i]);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
  if (system(cmd) != 0) { /* best effort */
  }
  return st;
}

/* ---- one case ------------------------------------------------------------ */

static kiln_status_t run_case(const options *o, const char *dir, const char *name, compare_result *cr,
                              infer_check *ic) {
  char path[8192];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  kiln_model *model;
  KILN_RETURN_IF_ERROR(kiln_model_load_file(path, &model), "load");
  kiln_session_options so = kiln_session_options_default();
  so.device = o->device;
  kiln_session *sess;
  kiln_status_t st = kiln_session_create(model, &so, &sess);
  if (st) {
    kiln_model_destroy(model);
    return st;
  }
  sess->observer = observe_node;
  sess->observer_user = ic;
  const kiln_graph *g = model->ir->graph;
  bool random = is_random_case(name);
  int n_sets = 0;
  for (int set = 0; !st; set++) {
    char setdir[4096];
    snprintf(setdir, sizeof setdir, "%s/test_data_set_%d", dir, set);
    struct stat sb;
    if (stat(setdir, &sb) != 0) break;
    n_sets++;
    kiln_value *ins[MAX_IO] = {0}, *wants[MAX_IO] = {0}, *outs[MAX_IO] = {0};
    const char *names[MAX_IO];
    int n_in = 0, n_out = 0;
    /* input_K binds the K-th graph input without an initializer. */
    for (int k = 0; k < g->n_inputs && n_in < MAX_IO && !st; k++) {
      const kiln_value_def *v = &g->values[g->inputs[k]];
      snprintf(path, sizeof path, "%s/input_%d.pb", setdir, n_in);
      if (stat(path, &sb) != 0) {
        if (v->constant) continue;
        break;
      }
      st = load_value(path, setdir, &v->type, &ins[n_in]);
      names[n_in++] = v->name;
    }
    for (int k = 0; k < g->n_outputs && k < MAX_IO && !st; k++) {
      snprintf(path, sizeof path, "%s/output_%d.pb", setdir, k);
      if (stat(path, &sb) != 0) break;
      st = load_value(path, setdir, &g->values[g->outputs[k]].type, &wants[n_out++]);
    }
    if (!st && n_out == 0) st = kiln_error(KILN_INVALID_MODEL, "%s has no expected outputs", setdir);
    if (!st && o->compile_only) {
      /* Specialize (and so optimize and compile) for these inputs: a
       * compiler error fails the case; a graph left to the interpreter is
       * not one. */
      kiln_value **bound = calloc((size_t)g->n_inputs + 1, sizeof *bound);
      if (!bound) st = KILN_OOM();
      for (int i = 0; i < n_in && !st; i++)
        for (int k = 0; k < g->n_inputs; k++)
          if (!strcmp(g->values[g->inputs[k]].name, names[i])) bound[k] = ins[i];
      const kiln_graph *spec = NULL;
      if (!st) st = kiln_session_specialize(sess, bound, &spec);
      free(bound);
      for (int k = 0; k < MAX_IO; k++) {
        kiln_value_free(ins[k]);
        kiln_value_free(wants[k]);
      }
      break;
    }
    if (!st && o->via_cli) {
      snprintf(path, sizeof path, "%s/model.onnx", dir);
      st = run_via_cli(o, path, n_in, names, ins, n_out, outs);
    } else if (!st) {
      st = kiln_session_run_values(sess, n_in, names, ins, n_out, outs);
    }
    for (int k = 0; k < n_out && !st; k++) {
      char what[320];
      snprintf(what, sizeof what, "output %d ('%s')", k, g->values[g->outputs[k]].name);
      st = compare_value(outs[k], wants[k], !random, what, cr);
    }
    if (st && n_sets > 1) st = kiln_status_annotate(st, "data set %d", set);
    for (int k = 0; k < MAX_IO; k++) {
      kiln_value_free(ins[k]);
      kiln_value_free(wants[k]);
      kiln_value_free(outs[k]);
    }
  }
  if (!st && n_sets == 0) st = kiln_error(KILN_INVALID_MODEL, "no test_data_set_* in %s", dir);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  return st;
}

/* ---- driver ---------------------------------------------------------------- */

typedef struct case_result {
  char name[256];
  bool pass;
  bool not_applicable; /* --via-cli: inputs the CLI cannot express */
  int outputs, unknown;  /* node outputs, and those with a not fully inferred shape */
  char unknown_op[160];
  char reason[1200];
} case_result;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool matches(const options *o, const char *name) {
  if (!o->n_filters) return true;
  for (int i = 0; i < o->n_filters; i++)
    if (strstr(name, o->filters[i])) return true;
  return false;
}

/* Runs one case in a child process; fills r. */
static void run_isolated(const options *o, const char *dir, case_result *r) {
  if (o->no_fork) {
    compare_result cr = {0};
    infer_check ic = {0};
    kiln_status_t st = run_case(o, dir, r->name, &cr, &ic);
    r->pass = !st;
    snprintf(r->reason, sizeof r->reason, "%s", st ? kiln_status_message(st) : ic.mismatches ? ic.first_mismatch : "");
    kiln_status_free(st);
    return;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    r->pass = false;
    snprintf(r->reason, sizeof r->reason, "pipe: %s", strerror(errno));
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm((unsigned)o->timeout_s);
    compare_result cr = {0};
    infer_check ic = {0};
    kiln_status_t st = run_case(o, dir, r->name, &cr, &ic);
    /* Under KILN_VULKAN_VALIDATION=1 a validation error (or an object the
     * session left alive, reported when the context goes) fails the case. */
    kiln_device_shutdown_all();
    uint64_t verrs = kiln_device_debug_errors();
    if (!st && verrs)
      st = kiln_error(KILN_DEVICE_ERROR, "%llu Vulkan validation error(s) (printed on stderr)", (unsigned long long)verrs);
    char msg[1100];
    /* First byte: P/F; then the reason (failure) or the inference note. */
    snprintf(msg, sizeof msg, "%c%d %d %s |%s", st ? 'F' : 'P', ic.outputs, ic.unknown, ic.first_unknown[0] ? ic.first_unknown : "-",
             st ? kiln_status_message(st) : ic.mismatches ? ic.first_mismatch : "");
    kiln_status_free(st);
    ssize_t w = write(fds[1], msg, strlen(msg));
    (void)w;
    close(fds[1]);
    exit(0); /* exit (not _exit) so LeakSanitizer checks the child */
  }
  close(fds[1]);
  char buf[1100] = {0};
  size_t got = 0;
  ssize_t n;
  while (got < sizeof buf - 1 && (n = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    r->pass = false;
    snprintf(r->reason, sizeof r->reason, "%s (signal %d)",
             WTERMSIG(status) == SIGALRM ? "timed out" : "crashed", WTERMSIG(status));
  } else if (WEXITSTATUS(status) != 0) {
    r->pass = false;
    snprintf(r->reason, sizeof r->reason, "child exited with %d (sanitizer report above) %s", WEXITSTATUS(status),
             buf[0] == 'F' ? buf + 1 : "");
  } else if (!got) {
    r->pass = false;
    snprintf(r->reason, sizeof r->reason, "no result");
  } else {
    r->pass = buf[0] == 'P';
    char op[160] = "";
    sscanf(buf + 1, "%d %d %159s", &r->outputs, &r->unknown, op);
    if (r->unknown) snprintf(r->unknown_op, sizeof r->unknown_op, "%s", op);
    const char *bar = strchr(buf, '|');
    snprintf(r->reason, sizeof r->reason, "%s", bar ? bar + 1 : "");
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: kiln_conformance --data DIR --suite NAME [--expect FILE] [--write-expect FILE]\n"
          "                        [--filter SUBSTR]... [--device NAME] [--timeout S] [-v] [--no-fork]\n"
          "                        [--compile-only]   (prepare every case, run none: the null device)\n");
}

int main(int argc, char **argv) {
  options o = {.data = "/usr/share/libonnx-testdata/data", .suite = "node", .device = "ref", .timeout_s = 120};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--data") && next) o.data = argv[++i];
    else if (!strcmp(a, "--suite") && next) o.suite = argv[++i];
    else if (!strcmp(a, "--expect") && next) o.expect = argv[++i];
    else if (!strcmp(a, "--write-expect") && next) o.write_expect = argv[++i];
    else if (!strcmp(a, "--device") && next) o.device = argv[++i];
    else if (!strcmp(a, "--timeout") && next) o.timeout_s = atoi(argv[++i]);
    else if (!strcmp(a, "--filter") && next && o.n_filters < 32) o.filters[o.n_filters++] = argv[++i];
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o.verbose = true;
    else if (!strcmp(a, "--no-fork")) o.no_fork = true;
    else if (!strcmp(a, "--compile-only")) o.compile_only = true;
    else if (!strcmp(a, "--via-cli") && next) o.via_cli = argv[++i];
    else {
      usage();
      return 2;
    }
  }
  char suite_dir[4096];
  snprintf(suite_dir, sizeof suite_dir, "%s/%s", o.data, o.suite);
  DIR *d = opendir(suite_dir);
  if (!d) {
    fprintf(stderr, "kiln_conformance: cannot open %s: %s (install libonnx-testdata)\n", suite_dir, strerror(errno));
    return 2;
  }
  kiln_ptr_vec names = {0};
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (!matches(&o, e->d_name)) continue;
    kiln_status_t st = kiln_ptr_vec_push(&names, kiln_strdup(e->d_name));
    if (st) return 2;
  }
  closedir(d);
  qsort(names.items, (size_t)names.count, sizeof(char *), cmp_str);

  /* Expected-pass list: lines "suite/case"; '#' comments. */
  kiln_ptr_vec expected = {0};
  if (o.expect) {
    FILE *f = fopen(o.expect, "r");
    if (!f) {
      fprintf(stderr, "kiln_conformance: cannot open %s\n", o.expect);
      return 2;
    }
    char line[512];
    size_t plen = strlen(o.suite);
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\r\n #")] = 0;
      if (!strncmp(line, o.suite, plen) && line[plen] == '/') kiln_ptr_vec_push(&expected, kiln_strdup(line + plen + 1));
    }
    fclose(f);
  }

  case_result *results = calloc((size_t)names.count + 1, sizeof *results);
  int passed = 0, failed_expected = 0, infer_notes = 0, n_na = 0;
  time_t t0 = time(NULL);
  for (int i = 0; i < names.count; i++) {
    case_result *r = &results[i];
    snprintf(r->name, sizeof r->name, "%s", (char *)names.items[i]);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s", suite_dir, r->name);
    run_isolated(&o, dir, r);
    r->not_applicable = !r->pass && strstr(r->reason, NOT_APPLICABLE) != NULL;
    if (r->not_applicable) n_na++;
    if (r->pass) passed++;
    if (r->pass && r->reason[0]) infer_notes++;
    if (o.verbose || (!r->pass && o.n_filters))
      printf("%s %s%s%s\n", r->pass ? "PASS" : "FAIL", r->name, r->reason[0] ? ": " : "", r->reason);
  }
  int n_expected_found = 0;
  for (int k = 0; k < expected.count; k++) {
    bool found = false;
    for (int i = 0; i < names.count; i++)
      if (!strcmp(results[i].name, expected.items[k])) {
        found = true;
        if (!results[i].pass && !results[i].not_applicable) {
          failed_expected++;
          printf("REGRESSION %s/%s: %s\n", o.suite, results[i].name, results[i].reason);
        }
      }
    if (found) n_expected_found++;
    else if (!o.n_filters) {
      failed_expected++;
      printf("MISSING %s/%s: listed as expected to pass, but not in the data\n", o.suite, (char *)expected.items[k]);
    }
  }
  printf("\nFailing cases in %s (%d):\n", o.suite, names.count - passed - n_na);
  for (int i = 0; i < names.count; i++)
    if (!results[i].pass && !results[i].not_applicable) printf("  %s: %s\n", results[i].name, results[i].reason);
  if (n_na) {
    printf("\nNot run (%s, %d):", NOT_APPLICABLE, n_na);
    for (int i = 0; i < names.count; i++)
      if (results[i].not_applicable) printf(" %s", results[i].name);
    printf("\n");
  }
  if (infer_notes) {
    printf("\nPassing cases whose inferred types disagree with what ran (%d):\n", infer_notes);
    for (int i = 0; i < names.count; i++)
      if (results[i].pass && results[i].reason[0]) printf("  %s: %s\n", results[i].name, results[i].reason);
  }
  {
    /* How much of the graph inference pinned down before running
     * (data-dependent ops such as NonZero legitimately stay unknown). */
    long outs = 0, unknown = 0;
    for (int i = 0; i < names.count; i++) {
      outs += results[i].outputs;
      unknown += results[i].unknown;
    }
    printf("\nInferred shapes: %ld of %ld node outputs fully known before running", outs - unknown, outs);
    if (o.verbose && unknown) {
      printf("; unknown in:");
      for (int i = 0; i < names.count; i++)
        if (results[i].unknown) printf(" %s(%s)", results[i].name, results[i].unknown_op);
    }
    printf("\n");
  }
  if (o.expect) {
    int unlisted = 0;
    for (int i = 0; i < names.count; i++) {
      if (!results[i].pass) continue;
      bool listed = false;
      for (int k = 0; k < expected.count && !listed; k++) listed = !strcmp(results[i].name, expected.items[k]);
      if (!listed) {
        if (!unlisted++) printf("\nPassing but not in %s (add them):\n", o.expect);
        printf("  %s/%s\n", o.suite, results[i].name);
      }
    }
  }
  if (o.write_expect) {
    FILE *f = fopen(o.write_expect, "a");
    if (f) {
      for (int i = 0; i < names.count; i++)
        if (results[i].pass) fprintf(f, "%s/%s\n", o.suite, results[i].name);
      fclose(f);
    }
  }
  printf("\nsuite %s on %s%s: %d/%d passed", o.suite, o.device, o.via_cli ? " via kiln run" : "", passed, names.count);
  if (n_na) printf(" (%d not applicable)", n_na);
  printf(" in %lds", (long)(time(NULL) - t0));
  if (o.expect) printf("; %d of %d expected-pass cases failed", failed_expected, n_expected_found);
  printf("\n");
  for (int i = 0; i < names.count; i++) free(names.items[i]);
  kiln_ptr_vec_free(&names);
  for (int i = 0; i < expected.count; i++) free(expected.items[i]);
  kiln_ptr_vec_free(&expected);
  free(results);
  return failed_expected ? 1 : 0;
}
