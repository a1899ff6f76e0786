/* `kiln verify`: runs a model on a device and on ref with the same inputs,
 * compares every value both produce (matched by name) and reports the first
 * node, in graph order, whose output diverges beyond tolerance. */
#include "cli/cmd_bench.h"

#include <math.h>
#include <stdio.h>

static const char *verify_help =
    "usage: kiln verify MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--dim NAME=VALUE]...\n"
    "                   [--seed S] [--rtol R] [--atol A] [--max-report N]\n"
    "\n"
    "Runs the model on device D (default: the default device) and on the reference\n"
    "device with the same inputs (random ones where not given: floats normal(0,1),\n"
    "ints in [0,3], symbolic dims from --dim or 1, seed S), captures every node\n"
    "output on both sides and compares the values both produced (matched by name;\n"
    "a device that fuses nodes produces fewer). An element matches when\n"
    "|device - ref| <= atol + rtol * |ref| (defaults rtol 1e-3, atol 1e-4); integer,\n"
    "bool and string values must be equal, NaN matches NaN. The max rel error is\n"
    "taken over the elements whose ref value is not 0.\n"
    "\n"
    "Reports the first node in graph order whose output diverges: its op, name,\n"
    "input and output shapes, max abs/rel error and the worst element, then up to\n"
    "N (--max-report, default 5) further diverging values and a summary line.\n"
    "Exit status 0 if every compared value matches, 1 otherwise.\n";

/* What comparing one value found. */
typedef struct cmp_result {
  bool compared, diverges;
  char why[512];        /* set for structural differences (dtype, shape, kind) */
  char dev_type[96], ref_type[96];
  int64_t n_elems, n_bad;
  double max_abs, max_rel; /* max_rel over elements whose ref value is not 0 */
  double worst_ratio;      /* |d - r| / (atol + rtol |r|) of the worst element */
  int64_t worst;           /* its flat index (-1: none) */
  int worst_item;          /* sequence item of the worst element, -1 for tensors */
  double worst_dev, worst_ref;
  int worst_rank;
  int64_t worst_dims[KILN_MAX_RANK];
  bool worst_is_float;
  bool worst_is_string;
  char worst_dev_str[64], worst_ref_str[64]; /* string tensors: the worst element (truncated) */
} cmp_result;

typedef struct verify_state {
  double rtol, atol;
  /* ref side: the ref session's graph and the value captured per value id */
  const kiln_graph *ref_g;
  kiln_value **ref_vals;
  cmp_result *results; /* per ref value id */
  int n_ref_values;
  /* device side */
  const char *inject; /* node name whose output the device side perturbs */
  bool injected, inject_started;
  int dev_nodes, dev_values, dev_only;
} verify_state;

static void type_of_value(const kiln_value *v, char *buf, size_t size) {
  char sb[160];
  if (v->kind == KILN_VALUE_TENSOR)
    snprintf(buf, size, "%s%s", kiln_dtype_name(v->tensor->dtype),
             kiln_shape_str(v->tensor->rank, v->tensor->dims, sb, sizeof sb));
  else if (v->kind == KILN_VALUE_SEQUENCE)
    snprintf(buf, size, "seq(%d x %s)", v->n_items, kiln_dtype_name(v->elem_dtype));
  else
    snprintf(buf, size, "empty optional");
}

static void compare_tensors(const kiln_tensor *d, const kiln_tensor *r, int item, const verify_state *vs,
                            cmp_result *res) {
  char sd[128], sr[128];
  if (d->dtype != r->dtype || !kiln_shape_equal(d->rank, d->dims, r->rank, r->dims)) {
    res->diverges = true;
    snprintf(res->why, sizeof res->why, "%s%s differs: device %s%s, ref %s%s", item >= 0 ? "an item's " : "",
             d->dtype != r->dtype ? "dtype" : "shape", kiln_dtype_name(d->dtype),
             kiln_shape_str(d->rank, d->dims, sd, sizeof sd), kiln_dtype_name(r->dtype),
             kiln_shape_str(r->rank, r->dims, sr, sizeof sr));
    return;
  }
  kiln_dtype dt = r->dtype;
  bool is_float = kiln_dtype_is_float(dt) || kiln_dtype_is_narrow_float(dt);
  for (int64_t i = 0; i < r->numel; i++) {
    double a = 0, b = 0, ratio = 0;
    bool bad;
    if (dt == KILN_DTYPE_STRING) {
      const char *x = ((char **)d->data)[i], *y = ((char **)r->data)[i];
      bad = strcmp(x ? x : "", y ? y : "") != 0;
      ratio = bad ? INFINITY : 0;
    } else if (dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128) {
      size_t es = kiln_dtype_size(dt);
      bad = memcmp((const char *)d->data + (size_t)i * es, (const char *)r->data + (size_t)i * es, es) != 0;
      ratio = bad ? INFINITY : 0;
    } else if (is_float) {
      a = kiln_load_f64(d->data, dt, i);
      b = kiln_load_f64(r->data, dt, i);
      if (isnan(a) || isnan(b)) {
        bad = !(isnan(a) && isnan(b));
        ratio = bad ? INFINITY : 0;
      } else if (isinf(a) || isinf(b)) {
        bad = a != b;
        ratio = bad ? INFINITY : 0;
      } else {
        double diff = fabs(a - b), tol = vs->atol + vs->rtol * fabs(b);
        bad = diff > tol;
        ratio = tol > 0 ? diff / tol : diff > 0 ? INFINITY : 0;
        if (diff > res->max_abs) res->max_abs = diff;
        if (b != 0 && diff / fabs(b) > res->max_rel) res->max_rel = diff / fabs(b);
      }
    } else if (dt == KILN_DTYPE_U64) {
      uint64_t x = kiln_load_u64(d->data, dt, i), y = kiln_load_u64(r->data, dt, i);
      a = (double)x;
      b = (double)y;
      bad = x != y;
      ratio = bad ? INFINITY : 0;
      if (bad && fabs(a - b) > res->max_abs) res->max_abs = fabs(a - b);
    } else {
      int64_t x = kiln_load_i64(d->data, dt, i), y = kiln_load_i64(r->data, dt, i);
      a = (double)x;
      b = (double)y;
      bad = x != y;
      ratio = bad ? INFINITY : 0;
      if (bad && fabs(a - b) > res->max_abs) res->max_abs = fabs(a - b);
      if (bad && y != 0 && fabs(a - b) / fabs(b) > res->max_rel) res->max_rel = fabs(a - b) / fabs(b);
    }
    if (bad) res->n_bad++;
    if (res->worst < 0 || ratio > res->worst_ratio) {
      res->worst_ratio = ratio;
      res->worst = i;
      res->worst_item = item;
      res->worst_dev = a;
      res->worst_ref = b;
      res->worst_rank = r->rank;
      memcpy(res->worst_dims, r->dims, sizeof res->worst_dims);
      res->worst_is_float = is_float;
      res->worst_is_string = dt == KILN_DTYPE_STRING;
      if (res->worst_is_string) {
        const char *x = ((char **)d->data)[i], *y = ((char **)r->data)[i];
        snprintf(res->worst_dev_str, sizeof res->worst_dev_str, "%s", x ? x : "");
        snprintf(res->worst_ref_str, sizeof res->worst_ref_str, "%s", y ? y : "");
      }
    }
  }
  res->n_elems += r->numel;
  if (res->n_bad) res->diverges = true;
}

static void compare_values(const kiln_value *d, const kiln_value *r, const verify_state *vs, cmp_result *res) {
  memset(res, 0, sizeof *res);
  res->compared = true;
  res->worst = -1;
  res->worst_item = -1;
  type_of_value(d, res->dev_type, sizeof res->dev_type);
  type_of_value(r, res->ref_type, sizeof res->ref_type);
  if (d->kind != r->kind) {
    res->diverges = true;
    snprintf(res->why, sizeof res->why, "kind differs: device %s, ref %s", res->dev_type, res->ref_type);
  } else if (d->kind == KILN_VALUE_TENSOR) {
    compare_tensors(d->tensor, r->tensor, -1, vs, res);
  } else if (d->kind == KILN_VALUE_SEQUENCE) {
    if (d->n_items != r->n_items) {
      res->diverges = true;
      snprintf(res->why, sizeof res->why, "sequence length differs: device %d, ref %d", d->n_items, r->n_items);
    }
    for (int k = 0; k < d->n_items && k < r->n_items && !res->why[0]; k++)
      compare_tensors(d->items[k], r->items[k], k, vs, res);
  }
}

/* Perturbs one element of the node's first tensor output so that the
 * consumers downstream see it. A tensor only this value holds is changed in
 * place (on a compiling device it is a view of the device's buffer, which is
 * what the next kernels read); a shared one (a model constant, a graph input)
 * is copied first, and the copy replaces it in the value. */
static kiln_status_t inject_error(const kiln_node *node, kiln_value *const *outputs) {
  for (int i = 0; i < node->n_outputs; i++) {
    kiln_value *v = outputs[i];
    if (node->outputs[i] < 0 || !v || v->kind != KILN_VALUE_TENSOR) continue;
    if (v->tensor->numel == 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "--inject-error: output %d of node '%s' is empty", i, node->name);
    kiln_tensor *c = v->tensor;
    if (c->refcount > 1 || c->keepalive) {
      KILN_TRY(kiln_tensor_clone(v->tensor, &c));
      kiln_tensor_release(v->tensor);
      v->tensor = c;
    }
    int64_t e = c->numel / 2;
    kiln_dtype dt = c->dtype;
    if (kiln_dtype_is_float(dt) || kiln_dtype_is_narrow_float(dt)) {
      double x = kiln_load_f64(c->data, dt, e);
      kiln_store_f64(c->data, dt, e, isfinite(x) ? x + 1.0 + fabs(x) : 0.0);
    } else if (dt == KILN_DTYPE_BOOL) {
      ((uint8_t *)c->data)[e] = !((uint8_t *)c->data)[e];
    } else if (dt == KILN_DTYPE_STRING) {
      KILN_TRY(kiln_tensor_set_string(c, e, "<injected>", 10));
    } else if (dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128) {
      ((uint8_t *)c->data)[(size_t)e * kiln_dtype_size(dt) + kiln_dtype_size(dt) / 2 - 1] ^= 0x40;
    } else {
      kiln_store_i64(c->data, dt, e, kiln_load_i64(c->data, dt, e) + 1);
    }
    return NULL;
  }
  return kiln_error(KILN_INVALID_ARGUMENT, "--inject-error: node '%s' has no tensor output to perturb", node->name);
}

static kiln_status_t capture_ref(void *user, const kiln_graph *g, const kiln_node *node, kiln_value *const *outputs) {
  verify_state *vs = user;
  if (vs->ref_g != g) {
    if (vs->ref_g) return kiln_error(KILN_INTERNAL, "the ref session ran two different graphs");
    vs->ref_g = g;
    vs->n_ref_values = g->n_values;
    vs->ref_vals = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *vs->ref_vals);
    vs->results = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *vs->results);
    if (!vs->ref_vals || !vs->results) return KILN_OOM();
  }
  for (int i = 0; i < node->n_outputs; i++) {
    int id = node->outputs[i];
    if (id < 0 || id >= vs->n_ref_values || !outputs[i]) continue;
    kiln_value_free(vs->ref_vals[id]);
    vs->ref_vals[id] = NULL;
    KILN_TRY(kiln_value_share(outputs[i], &vs->ref_vals[id]));
  }
  return NULL;
}

static void device_step(void *user, const kiln_graph *g, const kiln_node *node) {
  verify_state *vs = user;
  if (vs->inject && !strcmp(node->name, vs->inject)) vs->inject_started = true;
}

static kiln_status_t compare_device(void *user, const kiln_graph *g, const kiln_node *node,
                                    kiln_value *const *outputs) {
  verify_state *vs = user;
  vs->dev_nodes++;
  if (vs->inject && !strcmp(node->name, vs->inject)) {
    KILN_TRY(inject_error(node, outputs));
    vs->injected = true;
  }
  for (int i = 0; i < node->n_outputs; i++) {
    int id = node->outputs[i];
    if (id < 0 || !outputs[i]) continue;
    vs->dev_values++;
    int rid = vs->ref_g ? kiln_graph_find_value(vs->ref_g, g->values[id].name) : -1;
    if (rid < 0 || !vs->ref_vals[rid]) {
      vs->dev_only++;
      continue;
    }
    compare_values(outputs[i], vs->ref_vals[rid], vs, &vs->results[rid]);
    kiln_value_free(vs->ref_vals[rid]);
    vs->ref_vals[rid] = NULL;
  }
  return NULL;
}

static void print_index(const cmp_result *r) {
  int64_t idx[KILN_MAX_RANK], e = r->worst;
  for (int d = r->worst_rank - 1; d >= 0; d--) {
    int64_t n = r->worst_dims[d] > 0 ? r->worst_dims[d] : 1;
    idx[d] = e % n;
    e /= n;
  }
  if (r->worst_item >= 0) printf("item %d ", r->worst_item);
  printf("[");
  for (int d = 0; d < r->worst_rank; d++) printf("%s%lld", d ? "," : "", (long long)idx[d]);
  printf("]");
}

static void print_error_figures(const cmp_result *r, const char *indent) {
  if (r->why[0]) {
    printf("%s%s\n", indent, r->why);
    return;
  }
  printf("%s%lld of %lld elements beyond tolerance; max abs err %.6g, max rel err %.6g\n", indent,
         (long long)r->n_bad, (long long)r->n_elems, r->max_abs, r->max_rel);
  if (r->worst >= 0) {
    printf("%sworst element ", indent);
    print_index(r);
    if (r->worst_is_string) printf(": device \"%s\", ref \"%s\"\n", r->worst_dev_str, r->worst_ref_str);
    else if (r->worst_is_float) printf(": device %.9g, ref %.9g\n", r->worst_dev, r->worst_ref);
    else printf(": device %.17g, ref %.17g\n", r->worst_dev, r->worst_ref);
  }
}

typedef struct verify_opts {
  const char *model_path, *device, *inject;
  double rtol, atol;
  int max_report;
} verify_opts;

static bool parse_double(const char *name, const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= 0) || !isfinite(x)) {
    kiln_cli_failf("%s takes a non-negative number, got '%s'", name, v);
    return false;
  }
  *out = x;
  return true;
}

static kiln_status_t run_side(kiln_session *sess, const kiln_cli_inputs *in, int n_out, kiln_value **outs,
                              double *seconds) {
  double t0 = kiln_cli_now();
  kiln_status_t st = kiln_session_run_values(sess, in->n, in->names, in->values, n_out, outs);
  *seconds = kiln_cli_now() - t0;
  for (int i = 0; i < n_out; i++) {
    kiln_value_free(outs[i]);
    outs[i] = NULL;
  }
  return st;
}

int kiln_cmd_verify(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    fputs(verify_help, stdout);
    return 0;
  }
  verify_opts o = {NULL, NULL, NULL, 1e-3, 1e-4, 5};
  kiln_cli_inputs in = {0};
  int rc = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = kiln_cli_inputs_parse(&in, argc, argv, &i);
    if (r < 0) goto out;
    if (r > 0) continue;
    if (!strcmp(a, "--device") || !strcmp(a, "--rtol") || !strcmp(a, "--atol") || !strcmp(a, "--inject-error") ||
        !strcmp(a, "--max-report")) {
      if (i + 1 >= argc) {
        kiln_cli_failf("%s needs a value", a);
        goto out;
      }
      const char *v = argv[++i];
      bool ok = true;
      double x = 0;
      if (!strcmp(a, "--device")) o.device = v;
      else if (!strcmp(a, "--inject-error")) o.inject = v; /* hidden: for tests of the tool itself */
      else if (!strcmp(a, "--rtol")) ok = parse_double(a, v, &o.rtol);
      else if (!strcmp(a, "--atol")) ok = parse_double(a, v, &o.atol);
      else if ((ok = parse_double(a, v, &x))) o.max_report = x > 1e6 ? 1000000 : (int)x;
      if (!ok) goto out;
    } else if (a[0] == '-' && a[1]) {
      kiln_cli_failf("unknown option '%s' (see `kiln verify --help`)", a);
      goto out;
    } else if (!o.model_path) {
      o.model_path = a;
    } else {
      kiln_cli_failf("unexpected argument '%s'", a);
      goto out;
    }
  }
  if (!o.model_path) {
    kiln_cli_failf("verify needs a model file (see `kiln verify --help`)");
    goto out;
  }

  kiln_model *model = NULL;
  kiln_session *dev_sess = NULL, *ref_sess = NULL;
  kiln_value **outs = NULL;
  verify_state vs = {.rtol = o.rtol, .atol = o.atol, .inject = o.inject};
  kiln_session_options so = kiln_session_options_default();
  if (o.device) so.device = o.device;
  const char *device = so.device ? so.device : "default";
  kiln_session_options ro = kiln_session_options_default();
  ro.device = "ref";
  double t_dev = 0, t_ref = 0;

  kiln_status_t st = kiln_model_load_file(o.model_path, &model);
  if (!st) st = kiln_session_create(model, &so, &dev_sess);
  if (!st) device = kiln_cli_session_device(dev_sess, so.device);
  if (!st) st = kiln_session_create(model, &ro, &ref_sess);
  if (!st) st = kiln_cli_inputs_build(&in, model);
  int n_out = model ? kiln_model_output_count(model) : 0;
  if (!st && !(outs = calloc((size_t)(n_out ? n_out : 1), sizeof *outs))) st = KILN_OOM();
  if (!st) {
    ref_sess->observer = capture_ref;
    ref_sess->observer_user = &vs;
    st = run_side(ref_sess, &in, n_out, outs, &t_ref);
    if (st) st = kiln_status_annotate(st, "on ref");
  }
  if (!st) {
    dev_sess->observer = compare_device;
    dev_sess->before_node = device_step;
    dev_sess->observer_user = &vs;
    st = run_side(dev_sess, &in, n_out, outs, &t_dev);
    if (st) st = kiln_status_annotate(st, "on %s", device);
  }
  if (!st && o.inject && !vs.injected && vs.inject_started)
    st = kiln_error(KILN_INVALID_ARGUMENT,
                    "--inject-error: on %s, node '%s' is fused with other nodes into one kernel that never "
                    "materializes its output; pick the last node of the fused group",
                    device, o.inject);
  else if (!st && o.inject && !vs.injected)
    st = kiln_error(KILN_NOT_FOUND,
                    "--inject-error: the %s side ran no node named '%s' (a device's passes may merge nodes; "
                    "`kiln bench --profile --top 0` lists what it runs)",
                    device, o.inject);
  if (st) {
    rc = kiln_cli_fail(st);
    goto cleanup;
  }

  printf("verify %s: %s vs ref, rtol %g, atol %g\n", o.model_path, device, o.rtol, o.atol);
  for (int i = 0; i < in.n; i++) printf("%s %s\n", i ? "       " : "inputs", in.desc[i]);
  if (o.inject) printf("injected an error into the output of node '%s' on the %s side\n", o.inject, device);

  /* Walk the ref graph in node order: the first diverging output is the one to report. */
  const kiln_graph *g = vs.ref_g;
  int n_compared = 0, n_diverge = 0, n_ref_only = 0, reported = 0;
  double max_abs = 0, max_rel = 0;
  const char *first_node = NULL, *first_op = NULL;
  for (int n = 0; g && n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_outputs; i++) {
      int id = node->outputs[i];
      if (id < 0) continue;
      const cmp_result *r = &vs.results[id];
      if (!r->compared) {
        n_ref_only += vs.ref_vals[id] != NULL;
        continue;
      }
      n_compared++;
      if (r->max_abs > max_abs) max_abs = r->max_abs;
      if (r->max_rel > max_rel) max_rel = r->max_rel;
      if (!r->diverges) continue;
      n_diverge++;
      if (!first_node) {
        first_node = node->name;
        first_op = node->op_type;
        printf("\nFIRST DIVERGENCE at node #%d '%s' (%s), output %d '%s'\n", n, node->name, node->op_type, i,
               g->values[id].name);
        printf("  output: device %s, ref %s\n", r->dev_type, r->ref_type);
        for (int k = 0; k < node->n_inputs; k++) {
          char tb[256];
          int in_id = node->inputs[k];
          if (in_id < 0) continue;
          const kiln_value_def *def = &g->values[in_id];
          printf("  input %d: '%s' %s%s\n", k, def->name, kiln_type_str(&def->type, tb, sizeof tb),
                 def->constant ? " (constant)" : def->is_graph_input ? " (graph input)" : "");
        }
        print_error_figures(r, "  ");
      } else if (reported < o.max_report) {
        if (!reported) printf("\nlater diverging values (graph order):\n");
        reported++;
        printf("  node #%d '%s' (%s), output '%s' %s\n", n, node->name, node->op_type, g->values[id].name,
               r->ref_type);
        print_error_figures(r, "    ");
      }
    }
  }
  if (n_diverge > 1 + reported) printf("  ... and %d more\n", n_diverge - 1 - reported);
  printf("\ncompared %d values; %s: %d steps observed in %.1f ms, ref: %d nodes in %.1f ms;\n"
         "not compared: %d values only on the device, %d only on the reference\n",
         n_compared, device, vs.dev_nodes, t_dev * 1e3, g ? g->n_nodes : 0, t_ref * 1e3, vs.dev_only, n_ref_only);
  if (n_diverge) {
    printf("verify: FAIL: %d of %d values diverge beyond rtol %g, atol %g; first at node '%s' (%s)\n", n_diverge,
           n_compared, o.rtol, o.atol, first_node, first_op);
    rc = 1;
  } else if (!n_compared) {
    printf("verify: FAIL: no value was produced by both sides, nothing compared\n");
    rc = 1;
  } else {
    printf("verify: OK: all %d values match (max abs err %.3g, max rel err %.3g)\n", n_compared, max_abs, max_rel);
    rc = 0;
  }
cleanup:
  for (int i = 0; vs.ref_vals && i < vs.n_ref_values; i++) kiln_value_free(vs.ref_vals[i]);
  free(vs.ref_vals);
  free(vs.results);
  free(outs);
  kiln_session_destroy(dev_sess);
  kiln_session_destroy(ref_sess);
  kiln_model_destroy(model);
out:
  kiln_cli_inputs_free(&in);
  return rc;
}
