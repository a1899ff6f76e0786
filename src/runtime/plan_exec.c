/* The plan executor: one prepare / execute for every compiling device (see
 * plan.h). The device supplies its plan hooks (plan_begin, plan_compile,
 * launch_step, plan_end) and the runtime slots (buffers, submit, events);
 * everything else (steps in order, reference steps on host values,
 * observers, outputs) happens here. */
#include "base/limits.h"
#include "runtime/executor.h"
#include "runtime/plan.h"

struct kiln_executable {
  kiln_device *dev;          /* borrowed (process-wide) */
  kiln_plan *plan;           /* owned */
  void *state;               /* the device's state for this plan; released by plan_end */
  kiln_device_buffer *arena; /* owned; NULL when nothing lives in it */
  kiln_plan_bindings bind;   /* per value id: the bindings fixed at prepare (arena, constants); owned */
};

static void bindings_free(kiln_plan_bindings *b) {
  free(b->buffer);
  free(b->offset);
  free(b->host);
  memset(b, 0, sizeof *b);
}

static kiln_status_t bindings_alloc(int nv, kiln_plan_bindings *b) {
  b->buffer = calloc((size_t)nv + 1, sizeof *b->buffer);
  b->offset = calloc((size_t)nv + 1, sizeof *b->offset);
  b->host = calloc((size_t)nv + 1, sizeof *b->host);
  if (b->buffer && b->offset && b->host) return NULL;
  bindings_free(b);
  return KILN_OOM();
}

static kiln_status_t bindings_copy(int nv, const kiln_plan_bindings *from, kiln_plan_bindings *to) {
  KILN_TRY(bindings_alloc(nv, to));
  memcpy(to->buffer, from->buffer, (size_t)nv * sizeof *to->buffer);
  memcpy(to->offset, from->offset, (size_t)nv * sizeof *to->offset);
  memcpy(to->host, from->host, (size_t)nv * sizeof *to->host);
  return NULL;
}

/* ---- prepare ------------------------------------------------------------------- */

/* Arena values, constants and aliases. Only host-memory devices run plans
 * so far: their values are addressed directly. */
static kiln_status_t bind_static(struct kiln_executable *x) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  KILN_TRY(bindings_alloc(nv, &x->bind));
  if (p->arena_bytes) KILN_TRY(kiln_device_buffer_alloc(x->dev, (size_t)p->arena_bytes, &x->arena));
  char *base = x->arena ? kiln_device_buffer_host_address(x->dev, x->arena) : NULL;
  for (int v = 0; v < nv; v++) {
    if (p->offset[v] >= 0) {
      x->bind.buffer[v] = x->arena;
      x->bind.offset[v] = (size_t)p->offset[v];
      x->bind.host[v] = base + p->offset[v];
    } else if (p->kinds[v] == KILN_VALUE_CONSTANT) {
      x->bind.host[v] = g->values[v].constant->data;
    }
  }
  for (int v = 0; v < nv; v++)
    if (p->kinds[v] == KILN_VALUE_ALIAS) {
      int home = p->alias_of[v];
      x->bind.buffer[v] = x->bind.buffer[home];
      x->bind.offset[v] = x->bind.offset[home];
      x->bind.host[v] = x->bind.host[home];
    }
  return NULL;
}

kiln_status_t kiln_plan_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                struct kiln_executable **out) {
  *out = NULL;
  if (!dev->vt->plan_begin || !dev->vt->launch_step)
    return kiln_error(KILN_INTERNAL, "the device has no plan hooks");
  struct kiln_executable *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->dev = dev;
  kiln_plan_target target;
  kiln_status_t st = dev->vt->plan_begin(dev, g, opts, &target, &x->state);
  if (!st && !target.host_memory)
    st = kiln_error(KILN_INTERNAL, "the shared plan runs host-memory devices only so far");
  if (!st) st = kiln_plan_build(g, &target, &x->plan);
  if (!st) st = bind_static(x);
  if (!st && dev->vt->plan_compile) st = dev->vt->plan_compile(dev, x->state, x->plan, &x->bind);
  if (st) {
    kiln_plan_executable_free(dev, x);
    return st;
  }
  *out = x;
  return NULL;
}

void kiln_plan_executable_free(kiln_device *dev, struct kiln_executable *x) {
  if (!x) return;
  if (dev->vt->plan_end) dev->vt->plan_end(dev, x->state, x->plan);
  if (x->arena) kiln_device_buffer_free(dev, x->arena);
  bindings_free(&x->bind);
  kiln_plan_free(x->plan);
  free(x);
}

void kiln_plan_describe_executable(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  kiln_plan_describe(x->plan, out);
  if (dev->vt->plan_describe) dev->vt->plan_describe(dev, x->state, x->plan, out);
}

const kiln_plan *kiln_plan_of(const struct kiln_executable *x) { return x->plan; }

/* ---- execute ------------------------------------------------------------------- */

/* A tensor view of a value's bytes (no copy) for reference kernels and observers. */
static kiln_status_t wrap_value(const kiln_graph *g, int id, void *ptr, kiln_value **out) {
  const kiln_type *t = &g->values[id].type;
  kiln_tensor *tt;
  KILN_TRY(kiln_tensor_wrap(t->dtype, t->rank, t->dims, ptr, NULL, &tt));
  return kiln_value_from_tensor(tt, out);
}

/* A host step: the reference kernel on host values (views of device values
 * where the step reads them); its results become host values. */
static kiln_status_t run_host_step(const kiln_plan *p, const kiln_plan_step *s, kiln_plan_bindings *b,
                                   kiln_value **host) {
  const kiln_graph *g = p->g;
  const kiln_node *node = s->node;
  kiln_value *ins[64] = {0}, *outs[64] = {0}, *owned[64] = {0};
  if (node->n_inputs > 64 || node->n_outputs > 64) return kiln_error(KILN_UNSUPPORTED, "node with over 64 inputs/outputs");
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_inputs && !st; i++) {
    int v = node->inputs[i];
    if (v < 0) continue;
    if (host[v]) ins[i] = host[v];
    else if ((st = wrap_value(g, v, b->host[v], &owned[i])) == NULL) ins[i] = owned[i];
  }
  if (!st) st = kiln_run_ref_node(g, node, ins, outs);
  for (int i = 0; i < node->n_outputs && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    kiln_value_free(host[v]);
    host[v] = outs[i];
    outs[i] = NULL;
    b->host[v] = host[v]->kind == KILN_VALUE_TENSOR ? host[v]->tensor->data : NULL;
  }
  for (int i = 0; i < 64; i++) {
    kiln_value_free(outs[i]);
    kiln_value_free(owned[i]);
  }
  return st;
}

/* Hands the step's materialized outputs to the observer as values (views,
 * valid during the call). A contraction with an epilogue materializes the
 * epilogue's node. */
static kiln_status_t observe_step(const kiln_plan *p, const kiln_plan_step *s, const kiln_plan_bindings *b,
                                  kiln_value **host, const kiln_step_observer *observe) {
  const kiln_node *node = s->epilogue_step >= 0 ? p->steps[s->epilogue_step].node : s->node;
  kiln_value *vals[64] = {0}, *owned[64] = {0};
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_outputs && i < 64 && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    if (host[v]) vals[i] = host[v];
    else if (b->host[v] && (st = wrap_value(p->g, v, b->host[v], &owned[i])) == NULL) vals[i] = owned[i];
  }
  if (!st) st = observe->after(observe->user, p->g, node, vals);
  for (int i = 0; i < 64; i++) kiln_value_free(owned[i]);
  return st;
}

static kiln_status_t copy_outputs(const kiln_plan *p, const kiln_plan_bindings *b, kiln_value **host, int n_outputs,
                                  kiln_value **outs) {
  const kiln_graph *g = p->g;
  kiln_status_t st = NULL;
  for (int i = 0; i < n_outputs && !st; i++) {
    int id = g->outputs[i];
    if (host[id]) {
      st = kiln_value_share(host[id], &outs[i]);
    } else {
      const kiln_type *t = &g->values[id].type;
      kiln_tensor *ot;
      st = kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, &ot);
      if (!st) {
        if (ot->numel) memcpy(ot->data, b->host[id], kiln_tensor_nbytes(ot));
        st = kiln_value_from_tensor(ot, &outs[i]);
      }
    }
    if (st)
      for (int k = 0; k < i; k++) {
        kiln_value_free(outs[k]);
        outs[k] = NULL;
      }
  }
  return st;
}

kiln_status_t kiln_plan_execute(kiln_device *dev, struct kiln_executable *x, kiln_value *const *inputs, int n_outputs,
                                kiln_value **outs, const kiln_step_observer *observe) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  kiln_plan_bindings b = {0};
  kiln_value **host = calloc((size_t)nv + 1, sizeof *host);
  kiln_status_t st = host ? bindings_copy(nv, &x->bind, &b) : KILN_OOM();
  for (int k = 0; k < g->n_inputs && !st; k++) {
    int id = g->inputs[k];
    if (!inputs[k]) continue; /* initializer default */
    st = kiln_value_share(inputs[k], &host[id]);
    if (!st && host[id]->kind == KILN_VALUE_TENSOR) b.host[id] = host[id]->tensor->data;
  }
  for (int i = 0; i < p->n_steps && !st; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (s->kind == KILN_STEP_KERNEL && s->fused_into >= 0) continue; /* runs as its contraction's epilogue */
    if (observe && observe->before) observe->before(observe->user, g, s->node);
    st = kiln_run_deadline_check();
    if (!st) st = s->kind == KILN_STEP_HOST ? run_host_step(p, s, &b, host) : dev->vt->launch_step(dev, x->state, p, i, &b);
    if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
    if (!st && observe && observe->after) st = observe_step(p, s, &b, host, observe);
  }
  if (!st) st = kiln_device_synchronize(dev);
  if (!st) st = copy_outputs(p, &b, host, n_outputs, outs);
  for (int i = 0; host && i < nv; i++) kiln_value_free(host[i]);
  free(host);
  bindings_free(&b);
  return st;
}
