/* Public session API (include/kiln.h) over the executor. */
#include "runtime/session.h"
#include "passes/autodiff.h"

#include "runtime/plan.h"
#include "runtime/profile.h"

#include "base/limits.h"
#include "passes/passes.h"
#include "passes/passes_opt.h"

#include <stdio.h>

kiln_session_options kiln_session_options_default(void) {
  kiln_session_options o = {NULL, 0, KILN_PRECISION_FP32}; /* NULL: the default device (the registry's first) */
  return o;
}

static kiln_status_t collect_unsupported(const kiln_graph *g, kiln_ptr_vec *out) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!n->op) {
      char *name = n->domain[0] ? kiln_strfmt("%s.%s (node '%s')", n->domain, n->op_type, n->name)
                                : kiln_strfmt("%s (node '%s')", n->op_type, n->name);
      if (!name) return KILN_OOM();
      /* One entry per op type: the first node that uses it. */
      bool dup = false;
      size_t oplen = strcspn(name, " ");
      for (int k = 0; k < out->count && !dup; k++)
        dup = !strncmp(out->items[k], name, oplen) && ((char *)out->items[k])[oplen] == ' ';
      if (dup) free(name);
      else KILN_TRY(kiln_ptr_vec_push(out, name));
    }
    for (int a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) KILN_TRY(collect_unsupported(at->g, out));
      for (int k = 0; at->graphs && k < at->n; k++) KILN_TRY(collect_unsupported(at->graphs[k], out));
    }
  }
  return NULL;
}

kiln_status_t kiln_graph_unsupported_ops(const kiln_graph *g, kiln_ptr_vec *out) { return collect_unsupported(g, out); }

kiln_status_t kiln_session_create(const kiln_model *model, const kiln_session_options *options,
                                  kiln_session **out_session) {
  if (!model || !out_session) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  *out_session = NULL;
  kiln_session_options opts = options ? *options : kiln_session_options_default();
  const char *dev_name = opts.device ? opts.device : kiln_device_name(0);
  kiln_device *dev = kiln_device_get(dev_name);
  if (!dev) {
    char avail[512] = "";
    for (int i = 0; i < kiln_device_count(); i++) {
      strncat(avail, i ? ", " : "", sizeof avail - strlen(avail) - 1);
      strncat(avail, kiln_device_name(i), sizeof avail - strlen(avail) - 1);
    }
    const char *why = kiln_device_absent_reason(dev_name);
    int kind = (int)strcspn(dev_name, ":"); /* the provider's name */
    if (why)
      return kiln_error(KILN_NOT_FOUND, "the %.*s device '%s' is not available (%s); available: %s", kind, dev_name,
                        dev_name, why, avail);
    return kiln_error(KILN_NOT_FOUND, "no device named '%s' (available: %s)", dev_name, avail);
  }
  kiln_ptr_vec unsupported = {0};
  KILN_TRY(collect_unsupported(model->ir->graph, &unsupported));
  if (unsupported.count) {
    char list[1024] = "";
    for (int i = 0; i < unsupported.count; i++) {
      strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, unsupported.items[i], sizeof list - strlen(list) - 1);
      free(unsupported.items[i]);
    }
    kiln_ptr_vec_free(&unsupported);
    return kiln_error(KILN_UNSUPPORTED, "the model uses ops no device supports: %s", list);
  }
  kiln_ptr_vec_free(&unsupported);
  kiln_session *s = calloc(1, sizeof *s);
  if (!s) return KILN_OOM();
  s->model = model;
  s->devices[s->n_devices++] = dev;
  s->threads = opts.threads;
  s->precision = opts.precision;
  s->created_s = kiln_profile_now();
  *out_session = s;
  return NULL;
}

static void drop_exec(kiln_session *s) {
  if (s->exec) kiln_plan_executable_free(s->devices[0], s->exec);
  s->exec = NULL;
  free(s->prof_step_of);
  s->prof_step_of = NULL;
  s->prof_plan = NULL;
}

const char *kiln_session_device_name(const kiln_session *s) {
  kiln_device_info info = {0};
  if (s->n_devices > 0 && s->devices[0]->vt->query) s->devices[0]->vt->query(s->devices[0], &info);
  return info.name ? info.name : "default";
}

/* ---- profiling: the profiler's hooks, chained before the tools' own ---- */

/* The op types of the step a compiled plan starts at node ("Conv+Relu" for
 * a fused group), or NULL when node is not a step's (the interpreter). */
static const char *step_ops(kiln_session *s, const kiln_graph *g, const kiln_node *node, char *buf, size_t size) {
  const kiln_plan *p = s->exec ? kiln_plan_of(s->exec) : NULL;
  if (!p || p->g != g) return NULL;
  if (s->prof_plan != p) {
    free(s->prof_step_of);
    s->prof_plan = NULL;
    s->prof_step_of = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *s->prof_step_of);
    if (!s->prof_step_of) return NULL;
    for (int i = 0; i < g->n_nodes; i++) s->prof_step_of[i] = -1;
    for (int i = 0; i < p->n_steps; i++) s->prof_step_of[p->steps[i].node - g->nodes] = i;
    s->prof_plan = p;
  }
  ptrdiff_t idx = node - g->nodes;
  if (idx < 0 || idx >= g->n_nodes || s->prof_step_of[idx] < 0) return NULL;
  kiln_plan_step_ops(p, &p->steps[s->prof_step_of[idx]], buf, size);
  return buf;
}

static void profiled_before(void *user, const kiln_graph *g, const kiln_node *node) {
  kiln_session *s = user;
  kiln_profiler_before(s->profiler, node);
  if (s->before_node) s->before_node(s->observer_user, g, node);
}

static kiln_status_t profiled_after(void *user, const kiln_graph *g, const kiln_node *node,
                                    kiln_value *const *outputs) {
  kiln_session *s = user;
  char ops[256];
  const kiln_node *start = s->profiler->start ? s->profiler->start : node;
  KILN_TRY(kiln_profiler_after(s->profiler, g, node, step_ops(s, g, start, ops, sizeof ops)));
  return s->observer ? s->observer(s->observer_user, g, node, outputs) : NULL;
}

void kiln_session_destroy(kiln_session *s) {
  if (!s) return;
  drop_exec(s);
  kiln_graph_free(s->specialized);
  free(s->spec_signature);
  kiln_profiler_free(s->profiler);
  free(s->prof_step_of);
  free(s);
}

#define SIG_STRIDE (3 + KILN_MAX_RANK)

static void drop_specialization(kiln_session *s) {
  drop_exec(s);
  kiln_graph_free(s->specialized);
  free(s->spec_signature);
  s->specialized = NULL;
  s->spec_signature = NULL;
}

kiln_status_t kiln_session_specialize(kiln_session *s, kiln_value *const *bound, const kiln_graph **out) {
  const kiln_graph *g = s->model->ir->graph;
  size_t n = (size_t)(g->n_inputs > 0 ? g->n_inputs : 1) * SIG_STRIDE;
  int64_t *sig = calloc(n, sizeof *sig);
  if (!sig) return KILN_OOM();
  for (int k = 0; k < g->n_inputs; k++) {
    const kiln_value *v = bound[k];
    int64_t *e = sig + (size_t)k * SIG_STRIDE;
    e[0] = v ? (int64_t)v->kind + 1 : 0;
    if (v && v->kind == KILN_VALUE_TENSOR) {
      e[1] = v->tensor->dtype;
      e[2] = v->tensor->rank;
      for (int d = 0; d < v->tensor->rank; d++) e[3 + d] = v->tensor->dims[d];
    }
  }
  if (s->specialized && !memcmp(sig, s->spec_signature, n * sizeof *sig)) {
    free(sig);
    *out = s->specialized;
    return NULL;
  }
  if (s->keeps_state) {
    free(sig);
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "inputs of other shapes than the plan that keeps state on the device was built for");
  }
  kiln_graph *spec;
  kiln_status_t st = kiln_graph_clone(g, NULL, &spec);
  if (st) {
    free(sig);
    return st;
  }
  spec->fold_cache = s->model->fold_cache;
  for (int k = 0; k < g->n_inputs; k++) {
    const kiln_value *v = bound[k];
    kiln_value_def *def = &spec->values[spec->inputs[k]];
    /* A given input overrides its initializer default: inference and the
     * optimizer must not see the default as a constant. */
    if (v && def->constant) {
      kiln_tensor_release(def->constant);
      def->constant = NULL;
      kiln_tensor_release(def->known_value);
      def->known_value = NULL;
    }
    if (!v || v->kind != KILN_VALUE_TENSOR) continue;
    if (def->type.kind != KILN_TYPE_TENSOR && def->type.kind != KILN_TYPE_UNKNOWN &&
        def->type.kind != KILN_TYPE_OPTIONAL_TENSOR)
      continue;
    kiln_type_init_tensor(&def->type, v->tensor->dtype, v->tensor->rank, v->tensor->dims);
  }
  /* An input left at its initializer default is, for this specialization
   * (whose signature says it was not given), a constant: the nodes read a
   * constant copy, which the optimizer may fold (models of IR version < 4
   * list every initializer as an input: ONNX Runtime folds those too). The
   * input keeps its default for whatever reads it by name. */
  for (int k = 0; k < spec->n_inputs && !st; k++) {
    int in_id = spec->inputs[k];
    kiln_tensor *dflt = spec->values[in_id].constant;
    if (bound[k] || !dflt || spec->values[in_id].is_graph_output) continue;
    int cid;
    st = kiln_opt_new_const(spec, spec->values[in_id].name, kiln_tensor_retain(dflt), &cid);
    if (!st) kiln_opt_replace_uses(spec, in_id, cid);
  }
  if (!st) st = kiln_run_pass(spec, "infer-types", kiln_pass_infer_types);
  if (!st) st = kiln_run_pass(spec, "expand-gradient", kiln_pass_expand_gradient);
  if (st) {
    kiln_graph_free(spec);
    free(sig);
    return kiln_status_annotate(st, "with the given input shapes");
  }
  drop_exec(s);
  kiln_graph_free(s->specialized);
  free(s->spec_signature);
  s->specialized = spec;
  s->spec_signature = sig;
  s->fallback_reason[0] = 0;
  *out = spec;
  /* Compiling devices optimize and compile the specialized graph once per
   * input shapes. The reference device runs the graph as written: it is the
   * oracle the others are checked against. */
  kiln_device *dev = s->devices[0];
  if (dev->vt->plan_begin) {
    st = kiln_plan_optimize_for(dev, spec);
    if (st) {
      drop_specialization(s);
      return kiln_status_annotate(st, "optimizing the graph");
    }
    kiln_prepare_options po = {s->threads, s->precision == KILN_PRECISION_FP16};
    st = kiln_plan_prepare(dev, spec, &po, &s->exec);
    if (st && kiln_status_code_of(st) == KILN_UNSUPPORTED) {
      /* The whole graph runs on the interpreter (ref kernels) instead. */
      snprintf(s->fallback_reason, sizeof s->fallback_reason, "%s", kiln_status_message(st));
      kiln_status_free(st);
      st = NULL;
    }
    if (st) {
      drop_specialization(s); /* the next run retries */
      kiln_device_info info;
      dev->vt->query(dev, &info);
      return kiln_status_annotate(st, "compiling for device %s", info.name);
    }
  }
  return NULL;
}

/* The strings of an error are only formatted when there is one: this runs
 * on every call, and tiny models run in tens of microseconds. */
static kiln_status_t check_input(const kiln_value_def *def, const kiln_value *v) {
  const kiln_type *t = &def->type;
  char want[256];
  if (v->kind == KILN_VALUE_TENSOR) {
    const kiln_tensor *x = v->tensor;
    if (t->kind == KILN_TYPE_SEQUENCE)
      return kiln_error(KILN_INVALID_ARGUMENT, "input '%s': expected %s, got a tensor", def->name,
                        kiln_type_str(t, want, sizeof want));
    bool ok = !t->dtype || t->dtype == x->dtype;
    if (ok && t->rank >= 0) {
      ok = t->rank == x->rank;
      for (int i = 0; ok && i < t->rank; i++) ok = t->dims[i] < 0 || t->dims[i] == x->dims[i];
    }
    if (!ok) {
      char shape[256];
      kiln_shape_str(x->rank, x->dims, shape, sizeof shape);
      return kiln_error(KILN_INVALID_ARGUMENT, "input '%s': expected %s, got %s%s", def->name,
                        kiln_type_str(t, want, sizeof want), kiln_dtype_name(x->dtype), shape);
    }
  } else if (v->kind == KILN_VALUE_SEQUENCE) {
    if (t->kind == KILN_TYPE_TENSOR)
      return kiln_error(KILN_INVALID_ARGUMENT, "input '%s': expected %s, got a sequence", def->name,
                        kiln_type_str(t, want, sizeof want));
  } else if (t->kind == KILN_TYPE_TENSOR || t->kind == KILN_TYPE_SEQUENCE) {
    return kiln_error(KILN_INVALID_ARGUMENT, "input '%s': expected %s, got an empty optional", def->name,
                      kiln_type_str(t, want, sizeof want));
  }
  return NULL;
}

kiln_status_t kiln_session_run_values(kiln_session *s, int n_inputs, const char *const *names,
                                      kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs) {
  return kiln_session_run_values_into(s, n_inputs, names, inputs, n_outputs, NULL, out_outputs);
}

kiln_status_t kiln_session_run_values_into(kiln_session *s, int n_inputs, const char *const *names,
                                           kiln_value *const *inputs, int n_outputs, kiln_tensor *const *into,
                                           kiln_value **out_outputs) {
  if (!s || (n_outputs > 0 && !out_outputs) || (n_inputs > 0 && (!names || !inputs)))
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_run_values: NULL %s",
                      !s ? "session" : n_outputs > 0 && !out_outputs ? "out_outputs" : "inputs or names");
  const kiln_graph *g = s->model->ir->graph;
  if (n_outputs < 0 || n_outputs > g->n_outputs)
    return kiln_error(KILN_INVALID_ARGUMENT, "the model has %d outputs, %d requested", g->n_outputs, n_outputs);
  kiln_value **bound = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *bound);
  if (!bound) return KILN_OOM();
  kiln_status_t st = NULL;
  for (int i = 0; i < n_inputs && !st; i++) {
    int slot = -1;
    for (int k = 0; k < g->n_inputs; k++)
      if (!strcmp(g->values[g->inputs[k]].name, names[i])) slot = k;
    if (slot < 0) {
      char list[1024] = "";
      for (int k = 0; k < g->n_inputs; k++) {
        if (g->values[g->inputs[k]].constant) continue;
        strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, g->values[g->inputs[k]].name, sizeof list - strlen(list) - 1);
      }
      st = kiln_error(KILN_INVALID_ARGUMENT, "the model has no input named '%s' (inputs: %s)", names[i], list);
    } else if (bound[slot]) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "input '%s' given twice", names[i]);
    } else if (!inputs[i]) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "input '%s' is NULL", names[i]);
    } else {
      st = check_input(&g->values[g->inputs[slot]], inputs[i]);
      bound[slot] = inputs[i];
    }
  }
  kiln_value *nones[64] = {0}; /* omitted optional inputs are empty optionals */
  int n_nones = 0;
  for (int k = 0; k < g->n_inputs && !st; k++) {
    const kiln_value_def *v = &g->values[g->inputs[k]];
    bool optional = v->type.kind == KILN_TYPE_OPTIONAL_TENSOR || v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
    if (!bound[k] && !v->constant && optional && n_nones < 64) {
      st = kiln_value_new_none(v->type.dtype, v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE, &nones[n_nones]);
      if (!st) bound[k] = nones[n_nones++];
    } else if (!bound[k] && !v->constant) {
      char want[256];
      st = kiln_error(KILN_INVALID_ARGUMENT, "input '%s' (%s) is missing", v->name,
                      kiln_type_str(&v->type, want, sizeof want));
    }
  }
  const kiln_graph *run_graph = NULL;
  bool armed = kiln_run_deadline_begin(); /* KILN_RUN_TIMEOUT: the interpreter checks it between nodes */
  if (!st) st = kiln_session_specialize(s, bound, &run_graph);
  kiln_node_starter before = s->before_node;
  kiln_node_observer after = s->observer;
  void *hooks_user = s->observer_user;
  if (!st && s->profiler) {
    kiln_profiler_run_begin(s->profiler);
    before = profiled_before;
    after = profiled_after;
    hooks_user = s;
  }
  if (!st && s->exec) {
    kiln_step_observer obs = {before, after, hooks_user};
    st = kiln_plan_execute(s->devices[0], s->exec, bound, n_outputs, out_outputs, into,
                           after || before ? &obs : NULL);
  } else if (!st) {
    /* Interpreting: nodes run on the first device with run_node (ref). */
    kiln_exec_options opts = {s->devices, s->n_devices, after, hooks_user, before};
    st = kiln_execute_graph(run_graph, NULL, g->n_inputs, bound, n_outputs, out_outputs, &opts);
    for (int i = 0; !st && into && i < n_outputs; i++) { /* the results copied into the caller's tensors */
      if (!into[i]) continue;
      kiln_value *v = out_outputs[i];
      if (v->kind != KILN_VALUE_TENSOR)
        st = kiln_error(KILN_INVALID_ARGUMENT, "output '%s' is not a tensor", g->values[g->outputs[i]].name);
      else st = kiln_output_into(&g->values[g->outputs[i]], into[i], v->tensor->data, &out_outputs[i]);
      kiln_value_free(v);
      if (st) out_outputs[i] = NULL;
    }
    for (int i = 0; st && into && i < n_outputs; i++) {
      kiln_value_free(out_outputs[i]);
      out_outputs[i] = NULL;
    }
  }
  kiln_run_deadline_end(armed);
  for (int i = 0; i < n_nones; i++) kiln_value_free(nones[i]);
  free(bound);
  return st;
}

kiln_status_t kiln_session_run(kiln_session *s, int n_inputs, const char *const *input_names,
                               const kiln_tensor *const *inputs, int n_outputs, kiln_tensor **out_outputs) {
  return kiln_session_run_into(s, n_inputs, input_names, inputs, n_outputs, NULL, out_outputs);
}

kiln_status_t kiln_session_run_into(kiln_session *s, int n_inputs, const char *const *input_names,
                                    const kiln_tensor *const *inputs, int n_outputs, kiln_tensor *const *into,
                                    kiln_tensor **out_outputs) {
  if (!s || (n_inputs && (!input_names || !inputs)) || (n_outputs && !out_outputs))
    return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  kiln_value **vals = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *vals);
  kiln_value **outs = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *outs);
  kiln_status_t st = (!vals || !outs) ? KILN_OOM() : NULL;
  for (int i = 0; i < n_inputs && !st; i++) {
    if (!inputs[i]) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "input '%s' is NULL", input_names[i]);
      break;
    }
    st = kiln_value_from_tensor(kiln_tensor_retain((kiln_tensor *)inputs[i]), &vals[i]);
  }
  if (!st) st = kiln_session_run_values_into(s, n_inputs, input_names, vals, n_outputs, into, outs);
  for (int i = 0; i < n_outputs && !st; i++) {
    if (outs[i]->kind != KILN_VALUE_TENSOR)
      st = kiln_error(KILN_UNSUPPORTED, "output %d is a sequence or optional; use the CLI or the internal API", i);
  }
  for (int i = 0; i < n_outputs; i++) {
    if (!st) {
      out_outputs[i] = outs[i]->tensor;
      outs[i]->tensor = NULL;
    }
    kiln_value_free(outs ? outs[i] : NULL);
  }
  for (int i = 0; vals && i < n_inputs; i++) kiln_value_free(vals[i]);
  free(vals);
  free(outs);
  return st;
}

kiln_status_t kiln_session_specialize_declared(kiln_session *s, const kiln_graph **out_spec) {
  const kiln_graph *g = s->model->ir->graph;
  kiln_value **bound = calloc((size_t)g->n_inputs + 1, sizeof *bound);
  kiln_status_t st = bound ? NULL : KILN_OOM();
  for (int k = 0; k < g->n_inputs && !st; k++) {
    const kiln_value_def *v = &g->values[g->inputs[k]];
    if (v->constant || v->type.kind != KILN_TYPE_TENSOR || v->type.rank < 0) continue;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < v->type.rank; d++) dims[d] = v->type.dims[d] >= 0 ? v->type.dims[d] : 1;
    kiln_tensor *t;
    st = kiln_tensor_new(v->type.dtype ? v->type.dtype : KILN_DTYPE_F32, v->type.rank, dims, &t);
    if (!st) st = kiln_value_from_tensor(t, &bound[k]);
  }
  if (!st) st = kiln_session_specialize(s, bound, out_spec);
  for (int k = 0; bound && k < g->n_inputs; k++) kiln_value_free(bound[k]);
  free(bound);
  return st;
}

/* ---- state kept on the device ------------------------------------------------------ */

/* Value ids of names in the compiled plan's graph. */
static kiln_status_t plan_ids(const kiln_session *s, int n, const char *const *names, int *ids) {
  const kiln_graph *g = kiln_plan_of(s->exec)->g;
  for (int i = 0; i < n; i++) {
    ids[i] = names[i] ? kiln_graph_find_value(g, names[i]) : -1;
    if (ids[i] < 0) return kiln_error(KILN_INVALID_ARGUMENT, "the plan has no value named '%s'", names[i] ? names[i] : "(NULL)");
  }
  return NULL;
}

kiln_status_t kiln_session_keep_state(kiln_session *s, int n, const char *const *inputs, const char *const *outputs) {
  if (!s || n < 0 || (n && (!inputs || !outputs))) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  if (!s->exec)
    return kiln_error(KILN_UNSUPPORTED, "state kept on the device: the session has no compiled plan (run it first)");
  int *ids = malloc(2 * ((size_t)n + 1) * sizeof *ids);
  if (!ids) return KILN_OOM();
  kiln_status_t st = plan_ids(s, n, inputs, ids);
  if (!st) st = plan_ids(s, n, outputs, ids + n);
  if (!st) st = kiln_plan_keep_state(s->exec, n, ids, ids + n);
  if (!st) s->keeps_state = n > 0;
  free(ids);
  return st;
}

kiln_status_t kiln_session_state_read(kiln_session *s, int n, const char *const *inputs, kiln_tensor *const *into,
                                      bool *out_read) {
  *out_read = false;
  if (!s->keeps_state || !s->exec) return NULL;
  int *ids = malloc(((size_t)n + 1) * sizeof *ids);
  if (!ids) return KILN_OOM();
  kiln_status_t st = plan_ids(s, n, inputs, ids);
  if (!st) st = kiln_plan_state_read(s->exec, n, ids, into, out_read);
  free(ids);
  return st;
}

void kiln_session_state_forget(kiln_session *s) {
  if (s->keeps_state && s->exec) kiln_plan_state_forget(s->exec);
}

void kiln_session_transfer_bytes(const kiln_session *s, int64_t *out_uploaded, int64_t *out_read_back) {
  *out_uploaded = *out_read_back = 0;
  if (s->exec) kiln_plan_transfer_bytes(s->exec, out_uploaded, out_read_back);
}
