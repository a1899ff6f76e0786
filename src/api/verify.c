/* The comparison behind `kiln verify` and kiln_verify_json (include/kiln.h):
 * a model run on a device and on ref with the same inputs, every value both
 * produce (matched by name) compared element by element; the first node in
 * ref's graph order whose output diverges is the one to look at. */
#include <math.h>

#include "api/api.h"

/* What one verification collects while the two sessions run (their observer hooks). */
typedef struct verify_state {
  double rtol, atol;
  /* ref side: the ref session's graph and the value captured per value id */
  const kiln_graph *ref_g;
  kiln_value **ref_vals;
  kiln_verify_cmp *results; /* per ref value id */
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
                            kiln_verify_cmp *res) {
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
        double rtol = vs->rtol, atol = vs->atol;
        kiln_dtype_tolerance_floor(dt, &rtol, &atol);
        double diff = fabs(a - b), tol = atol + rtol * fabs(b);
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

static void compare_values(const kiln_value *d, const kiln_value *r, const verify_state *vs, kiln_verify_cmp *res) {
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


kiln_verify_options kiln_verify_options_default(void) {
  return (kiln_verify_options){.device = NULL, .rtol = 1e-3, .atol = 1e-4, .max_report = 5};
}

kiln_status_t kiln_verify_options_check(const kiln_verify_options *opts) {
  if (!(opts->rtol >= 0) || !isfinite(opts->rtol))
    return kiln_error(KILN_INVALID_ARGUMENT, "rtol must be a non-negative finite number, got %g", opts->rtol);
  if (!(opts->atol >= 0) || !isfinite(opts->atol))
    return kiln_error(KILN_INVALID_ARGUMENT, "atol must be a non-negative finite number, got %g", opts->atol);
  if (opts->max_report < 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "max_report must be >= 0, got %d", opts->max_report);
  return NULL;
}

kiln_status_t kiln_verify_run(const kiln_model *model, const kiln_verify_options *opts, const char *inject,
                              int n_inputs, const char *const *names, kiln_value *const *inputs,
                              kiln_verify_result *out) {
  memset(out, 0, sizeof *out);
  verify_state vs = {.rtol = opts->rtol, .atol = opts->atol, .inject = inject};
  kiln_session_options so = kiln_session_options_default(), ro = kiln_session_options_default();
  if (opts->device) so.device = opts->device;
  ro.device = "ref";
  out->device = so.device ? so.device : "default";
  int n_out = kiln_model_output_count(model);
  kiln_value **outs = calloc((size_t)(n_out ? n_out : 1), sizeof *outs);
  if (!outs) return KILN_OOM();
  kiln_status_t st = kiln_session_create(model, &so, &out->dev_sess);
  if (!st) out->device = kiln_session_device_name(out->dev_sess);
  if (!st) st = kiln_session_create(model, &ro, &out->ref_sess);
  if (!st) {
    out->ref_sess->observer = capture_ref;
    out->ref_sess->observer_user = &vs;
    double t0 = kiln_now_seconds();
    st = kiln_session_run_values(out->ref_sess, n_inputs, names, inputs, n_out, outs);
    out->ref_seconds = kiln_now_seconds() - t0;
    if (st) st = kiln_status_annotate(st, "on ref");
    for (int i = 0; i < n_out; i++) kiln_value_free(outs[i]), outs[i] = NULL;
  }
  if (!st) {
    out->dev_sess->observer = compare_device;
    out->dev_sess->before_node = device_step;
    out->dev_sess->observer_user = &vs;
    double t0 = kiln_now_seconds();
    st = kiln_session_run_values(out->dev_sess, n_inputs, names, inputs, n_out, outs);
    out->dev_seconds = kiln_now_seconds() - t0;
    if (st) st = kiln_status_annotate(st, "on %s", out->device);
    for (int i = 0; i < n_out; i++) kiln_value_free(outs[i]), outs[i] = NULL;
    out->dev_sess->observer = NULL;
    out->dev_sess->before_node = NULL;
    out->dev_sess->observer_user = NULL;
  }
  if (out->ref_sess) out->ref_sess->observer = NULL, out->ref_sess->observer_user = NULL;
  free(outs);
  if (!st && inject && !vs.injected && vs.inject_started)
    st = kiln_error(KILN_INVALID_ARGUMENT,
                    "--inject-error: on %s, node '%s' is fused with other nodes into one kernel that never "
                    "materializes its output; pick the last node of the fused group",
                    out->device, inject);
  else if (!st && inject && !vs.injected)
    st = kiln_error(KILN_NOT_FOUND,
                    "--inject-error: the %s side ran no node named '%s' (a device's passes may merge nodes; "
                    "`kiln bench --profile --top 0` lists what it runs)",
                    out->device, inject);
  out->ref_g = vs.ref_g;
  out->results = vs.results;
  out->ref_only = vs.ref_vals;
  out->n_values = vs.n_ref_values;
  out->dev_nodes = vs.dev_nodes;
  out->dev_values = vs.dev_values;
  out->dev_only = vs.dev_only;
  out->injected = vs.injected;
  return st;
}

void kiln_verify_result_free(kiln_verify_result *r) {
  for (int i = 0; r->ref_only && i < r->n_values; i++) kiln_value_free(r->ref_only[i]);
  free(r->ref_only);
  free(r->results);
  kiln_session_destroy(r->dev_sess);
  kiln_session_destroy(r->ref_sess);
  memset(r, 0, sizeof *r);
}

/* ---- kiln_verify_json ---- */

void kiln_verify_worst_index(const kiln_verify_cmp *r, int64_t idx[KILN_MAX_RANK]) {
  int64_t e = r->worst;
  for (int d = r->worst_rank - 1; d >= 0; d--) {
    int64_t n = r->worst_dims[d] > 0 ? r->worst_dims[d] : 1;
    idx[d] = e % n;
    e /= n;
  }
}

static void worst_index_json(kiln_json *j, const kiln_verify_cmp *r) {
  int64_t idx[KILN_MAX_RANK];
  kiln_verify_worst_index(r, idx);
  kiln_json_array_begin(j, "index");
  for (int d = 0; d < r->worst_rank; d++) kiln_json_int(j, NULL, idx[d]);
  kiln_json_array_end(j);
}

/* One diverging value: everything `kiln verify` prints about it, so a binding can print the same. */
static void divergence_json(kiln_json *j, const char *key, const kiln_graph *g, int node_index, int output_index,
                            const kiln_verify_cmp *r, double rtol, double atol) {
  const kiln_node *node = &g->nodes[node_index];
  int id = node->outputs[output_index];
  kiln_json_object_begin(j, key);
  kiln_json_string(j, "node", node->name);
  kiln_json_string(j, "op", node->op_type);
  kiln_json_int(j, "node_index", node_index);
  kiln_json_string(j, "output", g->values[id].name);
  kiln_json_int(j, "output_index", output_index);
  kiln_json_string(j, "device_type", r->dev_type);
  kiln_json_string(j, "ref_type", r->ref_type);
  kiln_json_array_begin(j, "node_inputs");
  for (int k = 0; k < node->n_inputs; k++) {
    char tb[256];
    int in_id = node->inputs[k];
    if (in_id < 0) continue;
    const kiln_value_def *def = &g->values[in_id];
    kiln_json_object_begin(j, NULL);
    kiln_json_int(j, "index", k);
    kiln_json_string(j, "name", def->name);
    kiln_json_string(j, "type", kiln_type_str(&def->type, tb, sizeof tb));
    kiln_json_string(j, "source", def->constant ? "constant" : def->is_graph_input ? "graph input" : NULL);
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  kiln_json_double(j, "max_abs_err", r->max_abs);
  kiln_json_double(j, "max_rel_err", r->max_rel);
  kiln_json_int(j, "n_bad", r->n_bad);
  kiln_json_int(j, "n_elements", r->n_elems);
  kiln_json_string(j, "why", r->why[0] ? r->why : NULL);
  if (r->why[0] || r->worst < 0) {
    kiln_json_null(j, "worst");
  } else {
    kiln_json_object_begin(j, "worst");
    worst_index_json(j, r);
    if (r->worst_item >= 0) kiln_json_int(j, "item", r->worst_item);
    else kiln_json_null(j, "item");
    if (r->worst_is_string) {
      kiln_json_string(j, "device", r->worst_dev_str);
      kiln_json_string(j, "ref", r->worst_ref_str);
    } else {
      kiln_json_double(j, "device", r->worst_dev);
      kiln_json_double(j, "ref", r->worst_ref);
    }
    kiln_json_bool(j, "is_float", r->worst_is_float);
    kiln_json_object_end(j);
  }
  kiln_json_object_begin(j, "tolerance");
  kiln_json_double(j, "rtol", rtol);
  kiln_json_double(j, "atol", atol);
  kiln_json_object_end(j);
  kiln_json_object_end(j);
}

kiln_status_t kiln_verify_report_json(const kiln_model *model, const kiln_verify_options *opts, const char *inject,
                                      int n_inputs, const char *const *names, kiln_value *const *inputs,
                                      char *const *desc, char **out_json, bool *out_ok) {
  *out_json = NULL;
  if (out_ok) *out_ok = false;
  KILN_TRY(kiln_verify_options_check(opts));
  kiln_verify_result r;
  kiln_status_t run_st = kiln_verify_run(model, opts, inject, n_inputs, names, inputs, &r);
  /* An unknown device or a model that cannot be loaded on it is the caller's error; a run that fails on
   * one side is a finding, reported in "errors". */
  if (run_st && (!r.dev_sess || !r.ref_sess)) {
    kiln_verify_result_free(&r);
    return run_st;
  }
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_string(&j, "device", r.device);
  kiln_json_double(&j, "rtol", opts->rtol);
  kiln_json_double(&j, "atol", opts->atol);
  kiln_json_array_begin(&j, "inputs");
  for (int i = 0; i < n_inputs; i++) kiln_json_string(&j, NULL, desc[i]);
  kiln_json_array_end(&j);
  const kiln_graph *g = r.ref_g;
  int n_compared = 0, n_diverge = 0, n_ref_only = 0;
  double max_abs = 0, max_rel = 0;
  /* Two walks over ref's graph in node order: the first diverging value, then the next max_report. */
  int n_listed = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) kiln_json_array_begin(&j, "later_divergences");
    int seen = 0;
    for (int n = 0; g && n < g->n_nodes; n++) {
      const kiln_node *node = &g->nodes[n];
      for (int i = 0; i < node->n_outputs; i++) {
        int id = node->outputs[i];
        if (id < 0) continue;
        const kiln_verify_cmp *c = &r.results[id];
        if (pass == 0) {
          if (!c->compared) {
            n_ref_only += r.ref_only[id] != NULL;
            continue;
          }
          n_compared++;
          max_abs = KILN_MAX(max_abs, c->max_abs);
          max_rel = KILN_MAX(max_rel, c->max_rel);
          if (!c->diverges) continue;
          if (!n_diverge) divergence_json(&j, "first_divergence", g, n, i, c, opts->rtol, opts->atol);
          n_diverge++;
        } else if (c->compared && c->diverges && seen++ > 0 && n_listed < opts->max_report) {
          divergence_json(&j, NULL, g, n, i, c, opts->rtol, opts->atol);
          n_listed++;
        }
      }
    }
    if (pass == 0 && !n_diverge) kiln_json_null(&j, "first_divergence");
  }
  kiln_json_array_end(&j);
  /* The graph outputs: the values both produced, matched by name. */
  kiln_json_array_begin(&j, "outputs");
  const kiln_graph *mg = model->ir->graph;
  for (int k = 0; g && k < mg->n_outputs; k++) {
    const char *name = mg->values[mg->outputs[k]].name;
    int id = kiln_graph_find_value(g, name);
    const kiln_verify_cmp *c = id >= 0 && id < r.n_values ? &r.results[id] : NULL;
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "name", name);
    kiln_json_bool(&j, "compared", c && c->compared);
    if (c && c->compared) kiln_json_double(&j, "max_abs_err", c->max_abs);
    else kiln_json_null(&j, "max_abs_err");
    kiln_json_bool(&j, "ok", c && c->compared && !c->diverges);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_int(&j, "compared", n_compared);
  kiln_json_int(&j, "diverging", n_diverge);
  kiln_json_int(&j, "device_only", r.dev_only);
  kiln_json_int(&j, "ref_only", n_ref_only);
  kiln_json_double(&j, "max_abs_err", max_abs);
  kiln_json_double(&j, "max_rel_err", max_rel);
  kiln_json_double(&j, "device_ms", r.dev_seconds * 1e3);
  kiln_json_double(&j, "ref_ms", r.ref_seconds * 1e3);
  kiln_json_int(&j, "device_steps", r.dev_nodes);
  kiln_json_int(&j, "ref_nodes", g ? g->n_nodes : 0);
  kiln_json_array_begin(&j, "errors");
  if (run_st) kiln_json_string(&j, NULL, kiln_status_message(run_st));
  else if (!n_compared) kiln_json_string(&j, NULL, "no value was produced by both sides, nothing compared");
  kiln_json_array_end(&j);
  bool all_ok = !run_st && n_compared > 0 && n_diverge == 0;
  kiln_json_bool(&j, "ok", all_ok);
  if (out_ok) *out_ok = all_ok;
  kiln_json_object_end(&j);
  kiln_status_free(run_st);
  kiln_verify_result_free(&r);
  return kiln_json_finish(&j, out_json);
}

kiln_status_t kiln_verify_json(const kiln_model *model, const kiln_verify_options *options, int n_inputs,
                               const char *const *input_names, const kiln_tensor *const *inputs, char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_verify_json: out_json is NULL");
  *out_json = NULL;
  if (!model) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_verify_json: model is NULL");
  kiln_verify_options o = options ? *options : kiln_verify_options_default();
  KILN_RETURN_IF_ERROR(kiln_verify_options_check(&o), "kiln_verify_json");
  kiln_bound_inputs in;
  kiln_status_t st = kiln_bind_inputs(model, n_inputs, input_names, inputs, &in);
  if (st) st = kiln_status_annotate(st, "kiln_verify_json");
  if (!st) st = kiln_verify_report_json(model, &o, NULL, in.n, in.names, in.values, in.desc, out_json, NULL);
  kiln_bound_inputs_free(&in);
  return st;
}
