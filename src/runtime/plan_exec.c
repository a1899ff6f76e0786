/* The plan executor: one prepare / execute for every compiling device (see
 * plan.h). The device supplies its plan hooks (plan_begin, plan_compile,
 * launch_step, plan_end) and the runtime slots (buffers, submit, events);
 * everything else (steps in order, reference steps on host values,
 * observers, outputs) happens here. */
#include <stdatomic.h>

#include "base/limits.h"
#include "tensor/dtype.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "runtime/plan_bodies.h"
#include "passes/passes_opt.h"

struct kiln_executable {
  kiln_device *dev;          /* borrowed (process-wide) */
  kiln_plan *plan;           /* owned */
  void *state;               /* the device's state for this plan; released by plan_end */
  kiln_device_buffer *arena; /* owned; NULL when nothing lives in it */
  kiln_plan_bindings bind;   /* per value id: the bindings fixed at prepare (arena, constants); owned */
  kiln_device_buffer **own;  /* per value id (devices without host memory): the buffer of a constant or
                                input device steps read; owned */
  int64_t weight_bytes;      /* constants uploaded at prepare */
  kiln_body_plans *bodies;   /* the control-flow bodies' plans; owned */
  /* A run's per-value arrays, kept for the next run (a Loop's body runs
   * once per iteration: allocating and freeing five of them each time was
   * a large share of a small body's time). Runs of one executable do not
   * overlap (they share its arena); the flag only makes a second one
   * allocate its own rather than share. Owned. */
  kiln_value **spare_host;
  char *spare_uploaded;
  kiln_plan_bindings spare_b;
  atomic_flag spare_busy;
  /* State kept on the device (kiln_plan_keep_state; devices without host
   * memory): per value id, the output whose value input v takes after each
   * run (-1: none), whether v's buffer holds that value now (no upload),
   * and for such an output the input taking its value (-1: none; no
   * readback). Owned; NULL: none. */
  int *state_next, *state_from;
  char *state_on_device;
  bool state_lost;                     /* a run failed after the state's copies may have started */
  int64_t run_uploaded, run_read_back; /* bytes the last run moved (kiln_plan_transfer_bytes) */
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

/* Values device steps read (their bindings other than the output). */
static bool *device_reads(const kiln_plan *p) {
  bool *r = calloc((size_t)p->g->n_values + 1, sizeof *r);
  if (!r) return NULL;
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (s->kind == KILN_STEP_HOST) continue;
    for (int a = 0; a < s->n_args; a++)
      if (s->args[a] >= 0 && s->args[a] != s->out_value) r[s->args[a]] = true;
  }
  return r;
}

/* The bytes of an f32 value as the device holds it: half when the target
 * keeps f32 as half (a converted copy in *tmp, freed by the caller). */
static kiln_status_t device_image(const kiln_plan *p, int v, const void *src, const void **out, void **tmp) {
  *tmp = NULL;
  *out = src;
  const kiln_type *t = &p->g->values[v].type;
  if (!p->target.f32_as_half || t->dtype != KILN_DTYPE_F32) return NULL;
  int64_t n = kiln_type_numel(t);
  uint16_t *h = calloc(1, (size_t)kiln_plan_value_bytes(p, v) + 1);
  if (!h) return KILN_OOM();
  for (int64_t i = 0; i < n; i++) h[i] = kiln_f32_to_f16(((const float *)src)[i]);
  *out = h;
  *tmp = h;
  return NULL;
}

static kiln_status_t upload_value(struct kiln_executable *x, int v, const void *src) {
  const kiln_plan *p = x->plan;
  int64_t bytes = kiln_plan_value_bytes(p, v);
  if (bytes <= 0 || !x->bind.buffer[v]) return NULL;
  if (!src) return kiln_error(KILN_INTERNAL, "no host data to upload for value '%s'", p->g->values[v].name);
  const void *img;
  void *tmp;
  KILN_TRY(device_image(p, v, src, &img, &tmp));
  kiln_status_t st = kiln_device_upload(x->dev, x->bind.buffer[v], x->bind.offset[v], img, (size_t)bytes);
  free(tmp);
  return st;
}

/* Arena values, constants and aliases. On a host-memory device values are
 * addressed directly; otherwise every constant a device step reads gets a
 * buffer, uploaded here once, and every such input a buffer uploaded per
 * run. */
static kiln_status_t bind_static(struct kiln_executable *x) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  bool host_memory = p->target.host_memory;
  KILN_TRY(bindings_alloc(nv, &x->bind));
  if (p->arena_bytes) KILN_TRY(kiln_device_buffer_alloc(x->dev, (size_t)p->arena_bytes, &x->arena));
  char *base = x->arena && host_memory ? kiln_device_buffer_host_address(x->dev, x->arena) : NULL;
  for (int v = 0; v < nv; v++) {
    if (p->offset[v] >= 0) {
      x->bind.buffer[v] = x->arena;
      x->bind.offset[v] = (size_t)p->offset[v];
      x->bind.host[v] = base ? base + p->offset[v] : NULL;
    } else if (p->kinds[v] == KILN_VALUE_CONSTANT) {
      x->bind.host[v] = g->values[v].constant->data;
    }
  }
  if (!host_memory) {
    bool *reads = device_reads(p);
    x->own = calloc((size_t)nv + 1, sizeof *x->own);
    kiln_status_t st = reads && x->own ? NULL : KILN_OOM();
    bool uploads = false;
    for (int v = 0; v < nv && !st; v++) {
      kiln_plan_value_kind k = p->kinds[v];
      int64_t bytes = kiln_plan_value_bytes(p, v);
      if (!reads[v] || (k != KILN_VALUE_CONSTANT && k != KILN_VALUE_INPUT) || bytes <= 0) continue;
      st = kiln_device_buffer_alloc(x->dev, (size_t)bytes, &x->own[v]);
      if (st) break;
      x->bind.buffer[v] = x->own[v];
      x->bind.offset[v] = 0;
      if (k == KILN_VALUE_CONSTANT) {
        x->weight_bytes += bytes;
        st = upload_value(x, v, g->values[v].constant->data);
        uploads = true;
      }
    }
    free(reads);
    kiln_device_event done;
    if (!st && uploads) st = kiln_device_submit(x->dev);
    if (!st && uploads) st = kiln_device_event_record(x->dev, &done);
    if (!st && uploads) st = kiln_device_event_wait(x->dev, done);
    KILN_TRY(st);
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
  if (!st) st = kiln_plan_build(g, &target, &x->plan);
  if (!st) st = bind_static(x);
  if (!st && dev->vt->plan_compile) st = dev->vt->plan_compile(dev, x->state, x->plan, &x->bind);
  for (int f = 0; !st && dev->vt->record && f < x->plan->n_flushes; f++)
    st = dev->vt->record(dev, x->state, x->plan, f, &x->bind);
  kiln_prepare_options body_opts = {0};
  if (opts) body_opts = *opts;
  body_opts.parent_state = x->state; /* bodies and run-time specializations share what the device may */
  if (!st) st = kiln_body_plans_create(dev, g, &body_opts, &x->bodies);
  if (!st) st = kiln_body_plans_prepare_known(x->bodies, x->plan);
  if (st) {
    kiln_plan_executable_free(dev, x);
    return st;
  }
  *out = x;
  return NULL;
}

void kiln_plan_executable_free(kiln_device *dev, struct kiln_executable *x) {
  if (!x) return;
  kiln_body_plans_free(x->bodies);
  if (dev->vt->plan_end) dev->vt->plan_end(dev, x->state, x->plan);
  if (x->arena) kiln_device_buffer_free(dev, x->arena);
  for (int v = 0; x->own && v < x->plan->g->n_values; v++)
    if (x->own[v]) kiln_device_buffer_free(dev, x->own[v]);
  free(x->own);
  bindings_free(&x->bind);
  free(x->spare_host);
  free(x->spare_uploaded);
  bindings_free(&x->spare_b);
  free(x->state_next);
  free(x->state_from);
  free(x->state_on_device);
  kiln_plan_free(x->plan);
  free(x);
}

void kiln_plan_describe_executable(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  kiln_plan_describe(x->plan, out);
  if (!x->plan->target.host_memory) fprintf(out, "weights on the device: %.2f MiB\n", (double)x->weight_bytes / (1 << 20));
  if (dev->vt->plan_describe) dev->vt->plan_describe(dev, x->state, x->plan, out);
  kiln_body_plans_describe(x->bodies, out, 0);
}

void kiln_plan_run_stats(kiln_device *dev, const struct kiln_executable *x, FILE *out) {
  if (dev->vt->plan_run_stats) dev->vt->plan_run_stats(dev, x->state, x->plan, out);
  kiln_body_plans_node_summary(x->bodies, out);
}

const kiln_plan *kiln_plan_of(const struct kiln_executable *x) { return x->plan; }

int64_t kiln_plan_weight_bytes(const struct kiln_executable *x) { return (int64_t)x->weight_bytes; }

const kiln_body_plans *kiln_plan_bodies_of(const struct kiln_executable *x) { return x->bodies; }

kiln_status_t kiln_plan_optimize_for(kiln_device *dev, kiln_graph *g) {
  const char *lvl = getenv("KILN_OPT_LEVEL"), *fa = getenv("KILN_FUSED_ATTENTION");
  const char *rr = getenv("KILN_RECURRENT_ROUTINE"), *qi = getenv("KILN_QDQ_INTEGER");
  const char *ar = getenv("KILN_ATTENTION_ROUTINE"), *wh = getenv("KILN_WIDEN_HALF");
  int level = lvl ? atoi(lvl) : 1;
  kiln_device_info dinfo;
  dev->vt->query(dev, &dinfo);
  bool fuse_attention = fa && *fa ? atoi(fa) != 0 : (dinfo.features & KILN_DEVICE_FEATURE_FUSED_ATTENTION) != 0;
  /* Only a device with the routine may keep them (=1 elsewhere: ignored). */
  bool keep_recurrent = (dinfo.features & KILN_DEVICE_FEATURE_RECURRENT_ROUTINE) && !(rr && *rr && !atoi(rr));
  bool qdq_integer = qi && *qi ? atoi(qi) != 0 : (dinfo.features & KILN_DEVICE_FEATURE_QDQ_INTEGER) != 0;
  bool keep_attention = (dinfo.features & KILN_DEVICE_FEATURE_ATTENTION_ROUTINE) && !(ar && *ar && !atoi(ar));
  /* Every compiling device computes halves in f32 (lower.c stores them);
   * KILN_WIDEN_HALF=0 leaves their nodes to ref, for comparisons. */
  bool widen_half = !(wh && *wh && !atoi(wh));
  kiln_optimize_options o = {fuse_attention, keep_recurrent, qdq_integer, keep_attention, widen_half};
  return kiln_optimize_graph_for(g, level, &o);
}

/* ---- execute ------------------------------------------------------------------- */

/* Whether value id is a tensor of no elements (its planned buffer may be
 * no buffer at all: bound to NULL). */
static bool empty_value(const kiln_graph *g, int id) {
  const kiln_type *t = &g->values[id].type;
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0) return false;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] == 0) return true;
  return false;
}

/* A tensor view of a value's bytes (no copy) for reference kernels and observers. */
static kiln_status_t wrap_value(const kiln_graph *g, int id, void *ptr, kiln_value **out) {
  const kiln_type *t = &g->values[id].type;
  kiln_tensor *tt;
  KILN_TRY(kiln_tensor_wrap_borrowed(t->dtype, t->rank, t->dims, ptr, NULL, &tt));
  return kiln_value_from_tensor(tt, out);
}

/* What a control-flow step's bodies need: the executable (its body plans)
 * and where the run's values are. */
typedef struct body_runner {
  struct kiln_executable *x;
  const kiln_node *node;
  const kiln_plan_bindings *b;
  kiln_value **host;
} body_runner;

/* An outer-scope read: the run's value of id, shared or viewed, never copied. */
static kiln_status_t outer_value(void *user, int id, kiln_value **out) {
  const body_runner *r = user;
  const kiln_graph *g = r->x->plan->g;
  if (r->host[id]) return kiln_value_share(r->host[id], out);
  if (g->values[id].constant) return kiln_value_from_tensor(kiln_tensor_retain(g->values[id].constant), out);
  if (!r->b->host[id] && !empty_value(g, id))
    return kiln_error(KILN_INTERNAL, "value '%s' is not on the host", g->values[id].name);
  return wrap_value(g, id, r->b->host[id], out);
}

static kiln_status_t run_body(void *data, const kiln_graph *body, int n_inputs, kiln_value *const *inputs,
                              int n_outputs, kiln_value **outs) {
  body_runner *r = data;
  return kiln_body_plans_run(r->x->bodies, r->node, body, n_inputs, inputs, n_outputs, outs, outer_value, r);
}

/* A host step: the reference kernel on host values (views of device values
 * where the step reads them); its results become host values. Control flow
 * runs its bodies as plans of their own (plan_bodies.h). */
static kiln_status_t run_host_step(struct kiln_executable *x, const kiln_plan_step *s, kiln_plan_bindings *b,
                                   kiln_value **host) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  const kiln_node *node = s->node;
  /* On the stack up to 64 inputs/outputs, on the heap past that; only the
   * node's own slots are cleared and freed (a Loop body's steps run this
   * per iteration: clearing and freeing all 3 x 64 was a tenth of
   * greedy_loop's time). */
  int cap = node->n_inputs > node->n_outputs ? node->n_inputs : node->n_outputs;
  kiln_value *ins_s[64], *outs_s[64], *owned_s[64];
  kiln_value **ins = ins_s, **outs = outs_s, **owned = owned_s, **heap = NULL;
  if (cap > 64) {
    heap = calloc(3 * (size_t)cap, sizeof *heap);
    if (!heap) return KILN_OOM();
    ins = heap;
    outs = heap + cap;
    owned = heap + 2 * (size_t)cap;
  } else {
    memset(ins_s, 0, (size_t)cap * sizeof *ins_s);
    memset(outs_s, 0, (size_t)cap * sizeof *outs_s);
    memset(owned_s, 0, (size_t)cap * sizeof *owned_s);
  }
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_inputs && !st; i++) {
    int v = node->inputs[i];
    if (v < 0) continue;
    if (host[v]) ins[i] = host[v];
    else if (!b->host[v] && !empty_value(g, v))
      st = kiln_error(KILN_INTERNAL, "value '%s' is not on the host", g->values[v].name);
    else if ((st = wrap_value(g, v, b->host[v], &owned[i])) == NULL) ins[i] = owned[i];
  }
  body_runner runner = {x, node, b, host};
  bool handled = false;
  if (!st && s->dynamic) st = kiln_body_plans_run_node(x->bodies, node, ins, 1, outs, &handled); /* one output */
  if (!st && !handled)
    st = kiln_run_host_node(g, node, ins, outs, run_body, &runner, x->dev->vt->host_kernel, x->state);
  for (int i = 0; i < node->n_outputs && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    kiln_value_free(host[v]);
    host[v] = outs[i];
    outs[i] = NULL;
    b->host[v] = host[v]->kind == KILN_VALUE_TENSOR ? host[v]->tensor->data : NULL;
  }
  for (int i = 0; i < cap; i++) {
    kiln_value_free(outs[i]);
    kiln_value_free(owned[i]);
  }
  free(heap);
  return st;
}

/* Hands the step's materialized outputs to the observer as values (views,
 * valid during the call). */
static kiln_status_t observe_step(const kiln_plan *p, const kiln_plan_step *s, const kiln_plan_bindings *b,
                                  kiln_value **host, const kiln_step_observer *observe) {
  const kiln_node *node = s->node;
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

kiln_status_t kiln_output_into(const kiln_value_def *v, kiln_tensor *dst, const void *src, kiln_value **out) {
  const kiln_type *t = &v->type;
  char a[256], b[256];
  if (dst->dtype != t->dtype || !kiln_shape_equal(dst->rank, dst->dims, t->rank, t->dims))
    return kiln_error(KILN_INVALID_ARGUMENT, "output '%s' is %s %s, the tensor given for it %s %s", v->name,
                      kiln_dtype_name(t->dtype), kiln_shape_str(t->rank, t->dims, a, sizeof a),
                      kiln_dtype_name(dst->dtype), kiln_shape_str(dst->rank, dst->dims, b, sizeof b));
  if (dst->numel && src != dst->data) memmove(dst->data, src, kiln_tensor_nbytes(dst));
  return kiln_value_from_tensor(kiln_tensor_retain(dst), out);
}

static kiln_status_t copy_outputs(const struct kiln_executable *x, const kiln_plan_bindings *b, kiln_value **host,
                                  int n_outputs, kiln_value **outs, kiln_tensor *const *into) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  kiln_status_t st = NULL;
  for (int i = 0; i < n_outputs && !st; i++) {
    int id = g->outputs[i];
    kiln_tensor *dst = into ? into[i] : NULL;
    int kept = x->state_from ? x->state_from[id] : -1; /* a kept state's output: its input's value handed back */
    if (kept >= 0) {
      st = host[kept] ? kiln_value_share(host[kept], &outs[i])
                      : kiln_error(KILN_INVALID_ARGUMENT, "state input '%s' was given no value", g->values[kept].name);
    } else if (dst) {
      const kiln_tensor *src = host[id] ? (host[id]->kind == KILN_VALUE_TENSOR ? host[id]->tensor : NULL)
                                        : g->values[id].constant;
      if (host[id] && !src) st = kiln_error(KILN_INVALID_ARGUMENT, "output '%s' is not a tensor", g->values[id].name);
      else st = kiln_output_into(&g->values[id], dst, src ? src->data : b->host[id], &outs[i]);
    } else if (host[id]) {
      st = kiln_value_share(host[id], &outs[i]);
    } else if (g->values[id].constant) { /* a copy of its own (strings deep: the graph owns theirs) */
      kiln_tensor *ot;
      st = kiln_tensor_clone(g->values[id].constant, &ot);
      if (!st) st = kiln_value_from_tensor(ot, &outs[i]);
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

/* ---- devices without host memory -------------------------------------------------- */

/* A readback into a half buffer, converted into dst after the wait. */
typedef struct pending_half {
  uint16_t *half; /* owned */
  float *dst;
  int64_t n;
} pending_half;

typedef struct run_state {
  kiln_plan_bindings b;
  kiln_value **host;  /* per value id: host values (inputs, host-step results, readbacks); owned */
  char *uploaded;     /* per value id: uploaded this run */
  pending_half *pending;
  int n_pending, cap_pending;
  bool queued;        /* device work recorded since the last wait */
} run_state;

/* Reads value v back into a fresh host tensor (host[v]). */
static kiln_status_t readback_value(struct kiln_executable *x, run_state *r, int v) {
  const kiln_plan *p = x->plan;
  const kiln_type *t = &p->g->values[v].type;
  kiln_tensor *tt;
  KILN_TRY(kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, &tt));
  kiln_value_free(r->host[v]);
  r->host[v] = NULL;
  KILN_TRY(kiln_value_from_tensor(tt, &r->host[v]));
  size_t bytes = kiln_tensor_nbytes(tt);
  if (!bytes || !r->b.buffer[v]) return NULL;
  r->queued = true;
  x->run_read_back += (int64_t)bytes;
  if (!p->target.f32_as_half || t->dtype != KILN_DTYPE_F32)
    return kiln_device_readback(x->dev, tt->data, r->b.buffer[v], r->b.offset[v], bytes);
  if (r->n_pending == r->cap_pending) {
    int cap = r->cap_pending ? 2 * r->cap_pending : 16;
    pending_half *np = realloc(r->pending, (size_t)cap * sizeof *np);
    if (!np) return KILN_OOM();
    r->pending = np;
    r->cap_pending = cap;
  }
  size_t hb = (size_t)kiln_plan_value_bytes(p, v);
  uint16_t *half = malloc(hb);
  if (!half) return KILN_OOM();
  r->pending[r->n_pending++] = (pending_half){half, tt->data, tt->numel};
  return kiln_device_readback(x->dev, half, r->b.buffer[v], r->b.offset[v], hb);
}

/* Submits what was recorded and waits for it; then the half readbacks are
 * converted. */
static kiln_status_t wait_device(struct kiln_executable *x, run_state *r) {
  kiln_status_t st = NULL;
  if (r->queued) {
    kiln_device_event done;
    st = kiln_device_submit(x->dev);
    if (!st) st = kiln_device_event_record(x->dev, &done);
    if (!st) st = kiln_device_event_wait(x->dev, done);
    r->queued = false;
  }
  for (int i = 0; i < r->n_pending; i++) {
    pending_half *ph = &r->pending[i];
    if (!st)
      for (int64_t k = 0; k < ph->n; k++) ph->dst[k] = kiln_f16_to_f32(ph->half[k]);
    free(ph->half);
  }
  r->n_pending = 0;
  return st;
}

static kiln_status_t upload_once(struct kiln_executable *x, run_state *r, int v) {
  if (r->uploaded[v]) return NULL;
  r->uploaded[v] = 1;
  if (x->state_on_device && x->state_on_device[v]) return NULL; /* its buffer holds the state already */
  const kiln_value *hv = r->host[v];
  r->queued = true;
  x->run_uploaded += kiln_plan_value_bytes(x->plan, v);
  return upload_value(x, v, hv && hv->kind == KILN_VALUE_TENSOR ? hv->tensor->data : NULL);
}

/* The kept states' new values, from their outputs' arena bytes into the
 * inputs' own buffers, queued after every step of the run (nothing reads
 * the inputs after that); they count as on the device once the run's
 * work has finished (state_settle). */
static kiln_status_t state_copies(struct kiln_executable *x, run_state *r) {
  if (!x->state_next) return NULL;
  const kiln_plan *p = x->plan;
  kiln_status_t st = NULL;
  for (int v = 0; v < p->g->n_values && !st; v++) {
    int o = x->state_next[v];
    if (o < 0 || !x->own[v] || !r->b.buffer[o]) continue;
    r->queued = true;
    st = kiln_device_copy(x->dev, x->own[v], 0, r->b.buffer[o], r->b.offset[o], (size_t)kiln_plan_value_bytes(p, v));
  }
  return st;
}

static void state_settle(struct kiln_executable *x, bool ok) {
  for (int v = 0; x->state_next && v < x->plan->g->n_values; v++)
    if (x->state_next[v] >= 0) x->state_on_device[v] = ok;
}

static kiln_status_t launch(struct kiln_executable *x, run_state *r, int i) {
  r->queued = true;
  return x->dev->vt->launch_step(x->dev, x->state, x->plan, i, &r->b);
}

/* Flush by flush: uploads, the segment (recorded once, or launched step by
 * step), readbacks, one submission and wait, then the host steps. */
static kiln_status_t execute_flushes(struct kiln_executable *x, run_state *r) {
  const kiln_plan *p = x->plan;
  kiln_status_t st = NULL;
  for (int f = 0; f < p->n_flushes && !st; f++) {
    const kiln_plan_flush *fl = &p->flushes[f];
    for (int k = 0; k < fl->n_up && !st; k++) st = upload_once(x, r, fl->up[k]);
    if (!st && fl->recorded && x->dev->vt->enqueue_recorded) {
      r->queued = true;
      st = x->dev->vt->enqueue_recorded(x->dev, x->state, p, f);
    } else {
      for (int i = fl->device_begin; i < fl->device_end && !st; i++) {
        const kiln_plan_step *s = &p->steps[i];
        st = launch(x, r, i);
        if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
      }
    }
    if (!st && f == p->n_flushes - 1) st = state_copies(x, r); /* in the run's one submission */
    for (int k = 0; k < fl->n_down && !st; k++)
      if (!x->state_from || x->state_from[fl->down[k]] < 0) st = readback_value(x, r, fl->down[k]);
    kiln_status_t ws = wait_device(x, r);
    if (!st) st = ws;
    else kiln_status_free(ws);
    for (int i = fl->host_begin; i < fl->host_end && !st; i++) {
      const kiln_plan_step *s = &p->steps[i];
      st = kiln_run_deadline_check();
      if (!st) st = run_host_step(x, s, &r->b, r->host);
      if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
    }
  }
  return st;
}

/* One submission per device step, its output read back and observed: what
 * `kiln verify` and profilers need (values are read before the arena
 * reuses their bytes). */
static kiln_status_t execute_stepwise(struct kiln_executable *x, run_state *r, const kiln_step_observer *observe) {
  const kiln_plan *p = x->plan;
  kiln_status_t st = NULL;
  for (int i = 0; i < p->n_steps && !st; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (observe->before) observe->before(observe->user, p->g, s->node);
    st = kiln_run_deadline_check();
    if (!st && s->kind == KILN_STEP_HOST) {
      st = run_host_step(x, s, &r->b, r->host);
    } else if (!st) {
      for (int a = 0; a < s->n_args && !st; a++) {
        int v = s->args[a];
        if (v >= 0 && v != s->out_value && (p->kinds[v] == KILN_VALUE_INPUT || p->kinds[v] == KILN_VALUE_HOST_ARENA))
          st = upload_once(x, r, v);
      }
      if (!st) st = launch(x, r, i);
      if (!st) st = readback_value(x, r, s->out_value);
      kiln_status_t ws = wait_device(x, r);
      if (!st) st = ws;
      else kiln_status_free(ws);
    }
    if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
    if (!st && observe->after) st = observe_step(p, s, &r->b, r->host, observe);
  }
  if (!st && x->state_next) {
    st = state_copies(x, r);
    kiln_status_t ws = wait_device(x, r);
    if (!st) st = ws;
    else kiln_status_free(ws);
  }
  return st;
}

/* ---- execute --------------------------------------------------------------------- */

/* A value's host bytes during a host-memory run (kiln_plan_check_indices). */
static const void *host_bytes(void *user, int v) {
  const kiln_plan_bindings *b = user;
  return b->host[v];
}

static kiln_status_t execute_host_memory(struct kiln_executable *x, kiln_plan_bindings *b, kiln_value **host,
                                         const kiln_step_observer *observe) {
  const kiln_plan *p = x->plan;
  kiln_status_t st = NULL;
  for (int i = 0; i < p->n_steps && !st; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (observe && observe->before) observe->before(observe->user, p->g, s->node);
    st = kiln_run_deadline_check();
    if (!st && s->n_checks) st = kiln_plan_check_indices(p, i, host_bytes, b);
    if (!st) st = s->kind == KILN_STEP_HOST ? run_host_step(x, s, b, host) : x->dev->vt->launch_step(x->dev, x->state, p, i, b);
    if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
    if (!st && observe && observe->after) st = observe_step(p, s, b, host, observe);
  }
  if (!st) st = kiln_device_synchronize(x->dev);
  return st;
}

static bool bytes_overlap(const void *a, size_t na, const void *b, size_t nb) {
  const char *x = a, *y = b;
  return na && nb && x < y + nb && y < x + na;
}

/* Outputs computed straight into the caller's tensors (host memory): the
 * kernel that writes an output writes it there instead of into the arena,
 * and copy_outputs finds nothing to copy (ResNet-18's training step, whose
 * outputs are the new weights and momenta: 90 MB copied a step, 5 ms of
 * 77). For arena values only (a kernel step writes them), into a tensor of
 * the output's type that overlaps no input of the run and no other
 * output's tensor (a step after the output's may still read those). */
static void bind_outputs_into(const kiln_plan *p, kiln_plan_bindings *b, kiln_value *const *inputs, int n_outputs,
                              kiln_tensor *const *into) {
  const kiln_graph *g = p->g;
  for (int i = 0; i < n_outputs; i++) {
    int id = g->outputs[i];
    kiln_tensor *dst = into[i];
    const kiln_type *t = &g->values[id].type;
    if (!dst || !dst->numel || p->kinds[id] != KILN_VALUE_ARENA || dst->dtype != t->dtype ||
        !kiln_shape_equal(dst->rank, dst->dims, t->rank, t->dims))
      continue;
    size_t n = kiln_tensor_nbytes(dst);
    bool clash = false;
    for (int k = 0; k < g->n_inputs && !clash; k++) {
      const kiln_value *in = inputs[k];
      clash = in && in->kind == KILN_VALUE_TENSOR && bytes_overlap(dst->data, n, in->tensor->data, kiln_tensor_nbytes(in->tensor));
    }
    for (int k = 0; k < n_outputs && !clash; k++)
      clash = k != i && into[k] && bytes_overlap(dst->data, n, into[k]->data, kiln_tensor_nbytes(into[k]));
    if (!clash) b->host[id] = dst->data;
  }
}

kiln_status_t kiln_plan_execute(kiln_device *dev, struct kiln_executable *x, kiln_value *const *inputs, int n_outputs,
                                kiln_value **outs, kiln_tensor *const *into, const kiln_step_observer *observe) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  run_state r = {0};
  kiln_status_t st = NULL;
  bool spare = !atomic_flag_test_and_set_explicit(&x->spare_busy, memory_order_acquire);
  if (spare && !x->spare_host) { /* the first run: made here, kept */
    x->spare_host = calloc((size_t)nv + 1, sizeof *x->spare_host);
    x->spare_uploaded = calloc((size_t)nv + 1, 1);
    if (!x->spare_host || !x->spare_uploaded || bindings_alloc(nv, &x->spare_b)) {
      free(x->spare_host);
      free(x->spare_uploaded);
      x->spare_host = NULL;
      x->spare_uploaded = NULL;
      atomic_flag_clear_explicit(&x->spare_busy, memory_order_release);
      spare = false;
    }
  }
  if (spare) {
    r.host = x->spare_host;
    r.uploaded = x->spare_uploaded;
    r.b = x->spare_b;
    memset(r.host, 0, ((size_t)nv + 1) * sizeof *r.host);
    memset(r.uploaded, 0, (size_t)nv + 1);
    memcpy(r.b.buffer, x->bind.buffer, (size_t)nv * sizeof *r.b.buffer);
    memcpy(r.b.offset, x->bind.offset, (size_t)nv * sizeof *r.b.offset);
    memcpy(r.b.host, x->bind.host, (size_t)nv * sizeof *r.b.host);
  } else {
    r.host = calloc((size_t)nv + 1, sizeof *r.host);
    r.uploaded = calloc((size_t)nv + 1, 1);
    st = r.host && r.uploaded ? bindings_copy(nv, &x->bind, &r.b) : KILN_OOM();
  }
  for (int k = 0; k < g->n_inputs && !st; k++) {
    int id = g->inputs[k];
    if (!inputs[k]) continue; /* initializer default */
    st = kiln_value_share(inputs[k], &r.host[id]);
    if (!st && r.host[id]->kind == KILN_VALUE_TENSOR && p->target.host_memory) r.b.host[id] = r.host[id]->tensor->data;
  }
  if (!st && x->state_lost)
    st = kiln_error(KILN_DEVICE_ERROR, "the state this plan kept on the device was lost by a failed run");
  x->run_uploaded = x->run_read_back = 0;
  /* On a host-memory device each arena output the caller gave no tensor
   * for is computed straight into a fresh tensor that is handed back,
   * instead of into the arena and then copied out (a decoder step's KV
   * cache: 64 MB copied a step, a third of its time). */
  kiln_tensor *targets_stack[16] = {0}, **targets = NULL, **fresh = NULL;
  if (!st && p->target.host_memory && n_outputs > 0) {
    targets = n_outputs <= 8 ? targets_stack : calloc(2 * (size_t)n_outputs, sizeof *targets);
    if (!targets) st = KILN_OOM();
    fresh = targets ? targets + n_outputs : NULL;
    for (int i = 0; i < n_outputs && !st; i++) {
      int id = g->outputs[i];
      const kiln_type *t = &g->values[id].type;
      targets[i] = into ? into[i] : NULL;
      if (targets[i] || p->kinds[id] != KILN_VALUE_ARENA || (x->state_from && x->state_from[id] >= 0)) continue;
      st = kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, &fresh[i]);
      targets[i] = fresh[i];
    }
    if (!st) bind_outputs_into(p, &r.b, inputs, n_outputs, targets);
  }
  if (!st && dev->vt->plan_run_begin) dev->vt->plan_run_begin(dev, x->state);
  if (!st) {
    if (p->target.host_memory) st = execute_host_memory(x, &r.b, r.host, observe);
    else if (observe) st = execute_stepwise(x, &r, observe);
    else st = execute_flushes(x, &r);
  }
  if (r.n_pending) kiln_status_free(wait_device(x, &r)); /* an error left readbacks in flight */
  if (x->state_next) state_settle(x, !st); /* a failed run leaves them unknown: lost (state_lost) */
  if (st && x->state_next) x->state_lost = true;
  if (!st) st = copy_outputs(x, &r.b, r.host, n_outputs, outs, targets ? targets : into);
  for (int i = 0; fresh && i < n_outputs; i++) kiln_tensor_release(fresh[i]); /* outs hold theirs */
  if (targets != targets_stack) free(targets);
  for (int i = 0; r.host && i < nv; i++) kiln_value_free(r.host[i]);
  free(r.pending);
  if (spare) {
    atomic_flag_clear_explicit(&x->spare_busy, memory_order_release);
  } else {
    free(r.host);
    free(r.uploaded);
    bindings_free(&r.b);
  }
  return st;
}

/* ---- state kept on the device ------------------------------------------------------ */

kiln_status_t kiln_plan_keep_state(struct kiln_executable *x, int n, const int *inputs, const int *outputs) {
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  int nv = g->n_values;
  if (p->target.host_memory)
    return kiln_error(KILN_UNSUPPORTED, "state kept on the device: this device computes in host memory already");
  if (p->target.f32_as_half) return kiln_error(KILN_UNSUPPORTED, "state kept on the device: not with fp16 storage");
  if (p->n_host)
    return kiln_error(KILN_UNSUPPORTED, "state kept on the device: the plan has %d node(s) on the host", p->n_host);
  int *next = malloc(((size_t)nv + 1) * sizeof *next), *from = malloc(((size_t)nv + 1) * sizeof *from);
  char *on = calloc((size_t)nv + 1, 1);
  kiln_status_t st = next && from && on ? NULL : KILN_OOM();
  for (int v = 0; next && from && v < nv; v++) next[v] = from[v] = -1;
  for (int i = 0; i < n && !st; i++) {
    int a = inputs[i], b = outputs[i];
    if (a < 0 || a >= nv || b < 0 || b >= nv) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "state %d: no such value", i);
    } else if (p->kinds[a] != KILN_VALUE_INPUT || !x->own || !x->own[a]) {
      st = kiln_error(KILN_UNSUPPORTED, "state input '%s': not a graph input that a device step reads", g->values[a].name);
    } else if (p->kinds[b] != KILN_VALUE_ARENA || !g->values[b].is_graph_output) {
      st = kiln_error(KILN_UNSUPPORTED, "state output '%s': not a graph output a device step writes", g->values[b].name);
    } else if (g->values[a].type.dtype != g->values[b].type.dtype ||
               !kiln_shape_equal(g->values[a].type.rank, g->values[a].type.dims, g->values[b].type.rank,
                                 g->values[b].type.dims)) {
      char ta[256], tb[256];
      st = kiln_error(KILN_INVALID_ARGUMENT, "state input '%s' is %s, its output '%s' %s", g->values[a].name,
                      kiln_type_str(&g->values[a].type, ta, sizeof ta), g->values[b].name,
                      kiln_type_str(&g->values[b].type, tb, sizeof tb));
    } else if (next[a] >= 0 || from[b] >= 0) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "state '%s' -> '%s' given twice", g->values[a].name, g->values[b].name);
    } else {
      next[a] = b;
      from[b] = a;
    }
  }
  if (st) {
    free(next);
    free(from);
    free(on);
    return st;
  }
  free(x->state_next);
  free(x->state_from);
  free(x->state_on_device);
  x->state_next = next;
  x->state_from = from;
  x->state_on_device = on;
  x->state_lost = false;
  return NULL;
}

kiln_status_t kiln_plan_state_read(struct kiln_executable *x, int n, const int *inputs, kiln_tensor *const *into,
                                   bool *out_read) {
  *out_read = false;
  if (!x->state_next) return NULL;
  const kiln_plan *p = x->plan;
  const kiln_graph *g = p->g;
  if (x->state_lost) return kiln_error(KILN_DEVICE_ERROR, "the state this plan kept on the device was lost by a failed run");
  bool any = false;
  kiln_status_t st = NULL;
  for (int i = 0; i < n && !st; i++) {
    int v = inputs[i];
    if (v < 0 || v >= g->n_values || x->state_next[v] < 0) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "value %d is not a kept state", v);
      break;
    }
    if (!x->state_on_device[v]) continue;
    const kiln_type *t = &g->values[v].type;
    if (!into[i] || into[i]->dtype != t->dtype || !kiln_shape_equal(into[i]->rank, into[i]->dims, t->rank, t->dims)) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "state '%s': the tensor to read it into is not of its type",
                      g->values[v].name);
      break;
    }
    any = true;
    st = kiln_device_readback(x->dev, into[i]->data, x->own[v], 0, kiln_tensor_nbytes(into[i]));
  }
  if (any) {
    kiln_device_event done;
    kiln_status_t ws = kiln_device_submit(x->dev);
    if (!ws) ws = kiln_device_event_record(x->dev, &done);
    if (!ws) ws = kiln_device_event_wait(x->dev, done);
    if (!st) st = ws;
    else kiln_status_free(ws);
  }
  *out_read = !st && any;
  return st;
}

void kiln_plan_state_forget(struct kiln_executable *x) {
  if (x->state_on_device) memset(x->state_on_device, 0, (size_t)x->plan->g->n_values + 1);
  x->state_lost = false;
}

void kiln_plan_transfer_bytes(const struct kiln_executable *x, int64_t *out_uploaded, int64_t *out_read_back) {
  *out_uploaded = x->run_uploaded;
  *out_read_back = x->run_read_back;
}
