#include "runtime/executor.h"

#include "base/limits.h"

#include <stdio.h>

struct kiln_exec_frame {
  const kiln_graph *graph;
  kiln_value **values; /* owned values by id */
  const kiln_exec_frame *parent;
  const kiln_exec_options *opts;
};

static kiln_status_t collect_outer(const kiln_graph *g, kiln_ptr_vec *names) {
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].outer_name) KILN_TRY(kiln_ptr_vec_push(names, g->values[i].outer_name));
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int a = 0; a < node->n_attrs; a++) {
      const kiln_attr *at = &node->attrs[a];
      if (at->g) KILN_TRY(collect_outer(at->g, names));
      for (int k = 0; at->graphs && k < at->n; k++) KILN_TRY(collect_outer(at->graphs[k], names));
    }
  }
  return NULL;
}

kiln_status_t kiln_graph_outer_names(const kiln_graph *g, kiln_ptr_vec *out) { return collect_outer(g, out); }

/* Value ids of `g` that node's subgraphs read from the enclosing scope.
 * They count as uses of the node so they stay alive until it has run. */
static kiln_status_t implicit_inputs(const kiln_graph *g, const kiln_node *node, kiln_int_vec *out) {
  kiln_ptr_vec names = {0};
  kiln_status_t st = NULL;
  for (int a = 0; a < node->n_attrs && !st; a++) {
    const kiln_attr *at = &node->attrs[a];
    if (at->g) st = collect_outer(at->g, &names);
    for (int k = 0; at->graphs && k < at->n && !st; k++) st = collect_outer(at->graphs[k], &names);
  }
  for (int i = 0; i < names.count && !st; i++) {
    int id = kiln_graph_find_value(g, names.items[i]);
    if (id >= 0) st = kiln_int_vec_push(out, id);
  }
  kiln_ptr_vec_free(&names);
  return st;
}

static const kiln_value *lookup_outer(const kiln_exec_frame *f, const char *name) {
  for (; f; f = f->parent) {
    int id = kiln_graph_find_value(f->graph, name);
    if (id >= 0 && f->values[id]) return f->values[id];
  }
  return NULL;
}

static kiln_device *pick_device(const kiln_exec_options *opts, const kiln_graph *g, const kiln_node *node) {
  for (int i = 0; opts && i < opts->n_devices; i++) {
    kiln_device *d = opts->devices[i];
    if (d->vt->run_node && d->vt->supports(d, g, node, NULL)) return d;
  }
  return kiln_device_get("ref");
}

typedef struct subgraph_runner_data {
  const kiln_exec_frame *frame;
} subgraph_runner_data;

static kiln_status_t run_subgraph(void *data, const kiln_graph *g, int n_inputs, kiln_value *const *inputs,
                                  int n_outputs, kiln_value **outs) {
  const kiln_exec_frame *frame = ((subgraph_runner_data *)data)->frame;
  /* Observers see top-level nodes only: subgraph values are not graph values. */
  kiln_exec_options sub = *frame->opts;
  sub.observer = NULL;
  sub.before_node = NULL;
  if (n_inputs != g->n_inputs)
    return kiln_error(KILN_INVALID_MODEL, "subgraph '%s' takes %d inputs, given %d", g->name, g->n_inputs, n_inputs);
  /* A Loop body with no nodes still costs an iteration: check here too. */
  KILN_TRY(kiln_run_deadline_check());
  return kiln_execute_graph(g, frame, n_inputs, inputs, n_outputs, outs, &sub);
}

static kiln_status_t run_node(kiln_exec_frame *f, const kiln_node *node) {
  const kiln_graph *g = f->graph;
  if (!node->op)
    return kiln_error(KILN_UNSUPPORTED, "unknown op %s%s%s", node->domain[0] ? node->domain : "",
                      node->domain[0] ? "." : "", node->op_type);
  kiln_value *inputs_stack[16], *outputs_stack[16];
  bool wanted_stack[16];
  kiln_value **inputs = node->n_inputs <= 16 ? inputs_stack : calloc((size_t)node->n_inputs, sizeof *inputs);
  kiln_value **outputs = node->n_outputs <= 16 ? outputs_stack : calloc((size_t)node->n_outputs, sizeof *outputs);
  bool *wanted = node->n_outputs <= 16 ? wanted_stack : calloc((size_t)node->n_outputs, sizeof *wanted);
  kiln_status_t st = NULL;
  if (!inputs || !outputs || !wanted) {
    st = KILN_OOM();
    goto done;
  }
  for (int i = 0; i < node->n_inputs; i++) {
    int id = node->inputs[i];
    inputs[i] = id >= 0 ? f->values[id] : NULL;
    if (id >= 0 && !inputs[i]) {
      st = kiln_error(KILN_INVALID_MODEL, "input %d ('%s') has no value (not produced before use)", i,
                      g->values[id].name);
      goto done;
    }
  }
  for (int i = 0; i < node->n_outputs; i++) {
    outputs[i] = NULL;
    wanted[i] = node->outputs[i] >= 0;
  }
  kiln_device *dev = pick_device(f->opts, g, node);
  subgraph_runner_data rd = {f};
  kiln_kernel_ctx ctx = {
      .node = node,
      .opset = node->opset,
      .n_inputs = node->n_inputs,
      .inputs = inputs,
      .n_outputs = node->n_outputs,
      .outputs = outputs,
      .output_wanted = wanted,
      .run_subgraph = run_subgraph,
      .runner_data = &rd,
  };
  st = dev->vt->run_node(dev, &ctx);
  if (st) goto free_outputs;
  for (int i = 0; i < node->n_outputs; i++) {
    int id = node->outputs[i];
    if (id < 0) {
      kiln_value_free(outputs[i]);
      outputs[i] = NULL;
      continue;
    }
    if (!outputs[i]) {
      st = kiln_error(KILN_INTERNAL, "kernel produced no value for output %d ('%s')", i, g->values[id].name);
      goto free_outputs;
    }
    const kiln_type *ty = &g->values[id].type;
    const kiln_value *v = outputs[i];
    /* A kernel whose dtype disagrees with inference is a bug worth catching early. */
    if (v->kind == KILN_VALUE_TENSOR && ty->kind == KILN_TYPE_TENSOR && ty->dtype && ty->dtype != v->tensor->dtype) {
      st = kiln_error(KILN_INTERNAL, "output %d ('%s') is %s but its type says %s", i, g->values[id].name,
                      kiln_dtype_name(v->tensor->dtype), kiln_dtype_name(ty->dtype));
      goto free_outputs;
    }
  }
  if (f->opts && f->opts->observer) {
    st = f->opts->observer(f->opts->observer_user, g, node, outputs);
    if (st) goto free_outputs;
  }
  for (int i = 0; i < node->n_outputs; i++) {
    int id = node->outputs[i];
    if (id < 0) continue;
    kiln_value_free(f->values[id]);
    f->values[id] = outputs[i];
    outputs[i] = NULL;
  }
  goto done;
free_outputs:
  for (int i = 0; i < node->n_outputs; i++) kiln_value_free(outputs[i]);
done:
  if (inputs != inputs_stack) free(inputs);
  if (outputs != outputs_stack) free(outputs);
  if (wanted != wanted_stack) free(wanted);
  return st;
}

kiln_status_t kiln_execute_graph(const kiln_graph *g, const kiln_exec_frame *parent, int n_inputs,
                                 kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs,
                                 const kiln_exec_options *opts) {
  static const kiln_exec_options no_opts = {0};
  if (!opts) opts = &no_opts;
  if (n_outputs > g->n_outputs)
    return kiln_error(KILN_INVALID_ARGUMENT, "graph '%s' has %d outputs, %d requested", g->name, g->n_outputs,
                      n_outputs);
  if (n_inputs > g->n_inputs)
    return kiln_error(KILN_INVALID_ARGUMENT, "graph '%s' has %d inputs, %d given", g->name, g->n_inputs, n_inputs);
  kiln_exec_frame f = {g, calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(kiln_value *)), parent, opts};
  int *uses = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(int));
  kiln_int_vec *implicit = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(kiln_int_vec));
  kiln_status_t st = NULL;
  if (!f.values || !uses || !implicit) {
    st = KILN_OOM();
    goto cleanup;
  }
  /* Bind constants, outer-scope values and inputs. */
  for (int i = 0; i < g->n_values; i++) {
    const kiln_value_def *v = &g->values[i];
    if (v->constant) {
      kiln_tensor_retain(v->constant);
      if ((st = kiln_value_from_tensor(v->constant, &f.values[i]))) goto cleanup;
    } else if (v->outer_name) {
      const kiln_value *ov = lookup_outer(parent, v->outer_name);
      if (!ov) {
        st = kiln_error(KILN_INVALID_MODEL, "graph '%s' reads '%s' from an enclosing scope, where it has no value",
                        g->name, v->outer_name);
        goto cleanup;
      }
      if ((st = kiln_value_share(ov, &f.values[i]))) goto cleanup;
    }
  }
  for (int i = 0; i < g->n_inputs; i++) {
    int id = g->inputs[i];
    kiln_value *in = i < n_inputs ? inputs[i] : NULL;
    if (in) {
      kiln_value_free(f.values[id]);
      f.values[id] = NULL;
      if ((st = kiln_value_share(in, &f.values[id]))) goto cleanup;
    } else if (!f.values[id]) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "graph input '%s' was not given", g->values[id].name);
      goto cleanup;
    }
  }
  /* Count remaining uses so intermediates die right after their last reader. */
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0) uses[node->inputs[i]]++;
    if ((st = implicit_inputs(g, node, &implicit[n]))) goto cleanup;
    for (int i = 0; i < implicit[n].count; i++) uses[implicit[n].items[i]]++;
  }
  for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]]++;
  for (int n = 0; n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    if (opts->before_node) opts->before_node(opts->observer_user, g, node);
    st = kiln_run_deadline_check();
    if (!st) st = run_node(&f, node);
    if (st) {
      st = kiln_status_annotate(st, "node '%s' (%s)", node->name, node->op_type);
      goto cleanup;
    }
    for (int i = 0; i < node->n_inputs; i++) {
      int id = node->inputs[i];
      if (id >= 0 && --uses[id] == 0) {
        kiln_value_free(f.values[id]);
        f.values[id] = NULL;
      }
    }
    for (int i = 0; i < implicit[n].count; i++) {
      int id = implicit[n].items[i];
      if (--uses[id] == 0) {
        kiln_value_free(f.values[id]);
        f.values[id] = NULL;
      }
    }
    /* Outputs nobody reads are dropped at once. */
    for (int i = 0; i < node->n_outputs; i++) {
      int id = node->outputs[i];
      if (id >= 0 && uses[id] == 0) {
        kiln_value_free(f.values[id]);
        f.values[id] = NULL;
      }
    }
  }
  for (int i = 0; i < n_outputs; i++) {
    int id = g->outputs[i];
    if (!f.values[id]) {
      st = kiln_error(KILN_INVALID_MODEL, "graph output '%s' is never produced", g->values[id].name);
      for (int k = 0; k < i; k++) {
        kiln_value_free(out_outputs[k]);
        out_outputs[k] = NULL;
      }
      goto cleanup;
    }
    /* The same value may be listed as two outputs: share, don't move. */
    if ((st = kiln_value_share(f.values[id], &out_outputs[i]))) {
      for (int k = 0; k < i; k++) {
        kiln_value_free(out_outputs[k]);
        out_outputs[k] = NULL;
      }
      goto cleanup;
    }
  }
cleanup:
  if (f.values)
    for (int i = 0; i < g->n_values; i++) kiln_value_free(f.values[i]);
  free(f.values);
  free(uses);
  if (implicit)
    for (int n = 0; n < g->n_nodes; n++) kiln_int_vec_free(&implicit[n]);
  free(implicit);
  return st;
}

kiln_status_t kiln_run_ref_node(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                kiln_value **outs) {
  return kiln_run_ref_node_with(g, node, ins, outs, NULL, NULL);
}

kiln_status_t kiln_run_ref_node_with(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                     kiln_value **outs, kiln_subgraph_runner run_subgraph, void *runner_data) {
  return kiln_run_host_node(g, node, ins, outs, run_subgraph, runner_data, NULL, NULL);
}

kiln_status_t kiln_run_host_node(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                 kiln_value **outs, kiln_subgraph_runner run_subgraph, void *runner_data,
                                 kiln_host_kernel_fn native, void *native_user) {
  if ((node->op->flags & KILN_OP_CONTROL_FLOW) && !run_subgraph)
    return kiln_error(KILN_INTERNAL, "control flow run without a subgraph runner");
  KILN_TRY(kiln_run_deadline_check());
  /* On the stack up to 64 inputs/outputs; on the heap past that (a Concat
   * of a detector's 90 score maps). */
  kiln_value *in_s[64] = {0}, *res_s[64] = {0}, **in = in_s, **res = res_s;
  bool wanted_s[64], *wanted = wanted_s, *heap_wanted = NULL;
  kiln_value **heap = NULL;
  if (node->n_inputs > 64 || node->n_outputs > 64) {
    heap = calloc((size_t)node->n_inputs + (size_t)node->n_outputs, sizeof *heap);
    heap_wanted = calloc((size_t)node->n_outputs + 1, sizeof *heap_wanted);
    if (!heap || !heap_wanted) {
      free(heap);
      free(heap_wanted);
      return KILN_OOM();
    }
    in = heap;
    res = heap + node->n_inputs;
    wanted = heap_wanted;
  }
  for (int i = 0; i < node->n_inputs; i++) in[i] = ins[i];
  for (int i = 0; i < node->n_outputs; i++) wanted[i] = node->outputs[i] >= 0;
  kiln_kernel_ctx ctx = {node, node->opset, node->n_inputs, in, node->n_outputs, res, wanted, run_subgraph, runner_data};
  bool handled = false;
  kiln_status_t st = kiln_kernel_check_narrow_inputs(&ctx);
  if (!st && native) st = native(native_user, &ctx, &handled);
  if (!st && !handled) st = node->op->ref_kernel(&ctx);
  for (int i = 0; i < node->n_outputs && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    if (!res[i]) {
      st = kiln_error(KILN_INTERNAL, "kernel produced no value for output %d", i);
      break;
    }
    const kiln_type *t = &g->values[v].type;
    if (res[i]->kind == KILN_VALUE_TENSOR && t->kind == KILN_TYPE_TENSOR && t->rank >= 0) {
      const kiln_tensor *ot = res[i]->tensor;
      bool ok = ot->rank == t->rank && (t->dtype == KILN_DTYPE_UNDEFINED || ot->dtype == t->dtype);
      for (int d = 0; ok && d < t->rank; d++) ok = t->dims[d] < 0 || t->dims[d] == ot->dims[d];
      if (!ok) {
        char a[128], b[128];
        st = kiln_error(KILN_INTERNAL, "output %d is %s%s but was inferred as %s", i, kiln_dtype_name(ot->dtype),
                        kiln_shape_str(ot->rank, ot->dims, a, sizeof a), kiln_type_str(t, b, sizeof b));
      }
    }
  }
  for (int i = 0; i < node->n_outputs; i++) {
    if (st || node->outputs[i] < 0) {
      kiln_value_free(res[i]);
      res[i] = NULL;
    }
    outs[i] = res[i];
  }
  free(heap);
  free(heap_wanted);
  return st;
}
