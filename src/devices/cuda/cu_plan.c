/* cu_plan.c — the CUDA device's plan hooks.
 *
 * Like OpenCL, the device has no kernel templates of its own: it claims
 * what the compute definitions lower, contractions included, and every
 * kernel of the plan is rendered in the CUDA C dialect into one module
 * (runtime/plan_kernels.h), compiled by NVRTC for the device's exact
 * compute capability at prepare. Each segment of device steps is then
 * captured once as a CUDA graph (the bindings of a plan do not change
 * between runs), so a run costs one cuGraphLaunch per segment instead of a
 * launch per kernel; where the driver has no graphs, or KILN_CUDA_GRAPHS=0,
 * the steps launch one by one.
 *
 * Environment:
 *   KILN_CUDA_GRAPHS=0   launch step by step (no graph capture). */
#include "devices/cuda/cu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/plan_kernels.h"

#define CU_STEP_THREADS 256

typedef struct cu_step {
  CUfunction fn;   /* from the plan's module; NULL: not launched */
  int64_t threads; /* one per element of the kernel's parallel loops */
  unsigned block;  /* threads per block: the contraction template's, else CU_STEP_THREADS */
} cu_step;

typedef struct cu_plan_state {
  cu_dev *d;
  CUmodule module;     /* owned */
  cu_step *steps;      /* per plan step; owned */
  int n_steps, n_kernels;
  size_t source_bytes;
  bool from_cache;
  double build_ms;
  CUgraphExec *graphs; /* per flush (NULL: launched step by step); owned */
  int n_flushes, n_graphs;
  const char *no_graphs; /* why segments are not graphs, or NULL */
  kiln_device_buffer *dummy; /* bound for operands of no bytes; owned */
} cu_plan_state;

/* Dtypes the CUDA C dialect stores. */
static bool dtype_ok(const void *user, kiln_dtype dt, const char **why) {
  (void)user;
  switch (dt) {
    case KILN_DTYPE_F32: case KILN_DTYPE_F64: case KILN_DTYPE_I64: case KILN_DTYPE_I32: case KILN_DTYPE_I16:
    case KILN_DTYPE_I8: case KILN_DTYPE_U8: case KILN_DTYPE_U16: case KILN_DTYPE_U32: case KILN_DTYPE_U64:
    case KILN_DTYPE_BOOL:
      case KILN_DTYPE_F16: case KILN_DTYPE_BF16: /* 16-bit words, converted through f32 */
      return true;
    default:
      if (why) *why = "a dtype the CUDA C dialect does not store";
      return false;
  }
}

bool cu_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return kiln_plan_claim_stored(g, node, dtype_ok, dev->impl, reason) != KILN_OPCLASS_NONE;
}

static kiln_op_class plan_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  return kiln_plan_claim_stored(g, node, dtype_ok, user, why);
}

kiln_status_t cu_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                            kiln_plan_target *out_target, void **out_state) {
  (void)g;
  (void)opts;
  cu_plan_state *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->d = dev->impl;
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = false,
      .alignment = 256,
      .size_rounding = 4,
      .claim = plan_claim,
      .user = x->d,
  };
  *out_state = x;
  return NULL;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int env_int(const char *name, int fallback) {
  const char *e = getenv(name);
  return e && *e ? atoi(e) : fallback;
}

kiln_loop_schedule cu_gpu_schedule(int multiprocessors) {
  kiln_loop_schedule s = kiln_loop_schedule_default();
  s.thread_tile = env_int("KILN_CUDA_THREAD_TILE", CU_THREAD_TILE);
  s.narrow_indices = !env_int("KILN_CUDA_INDEX64", 0);
  int group = env_int("KILN_CUDA_TILES", CU_TILE_THREADS);
  s.group_threads = group == 64 || group == 256 ? group : 0;
  s.min_groups = 2 * multiprocessors;
  int rows = env_int("KILN_CUDA_ROWS", CU_ROW_THREADS);
  s.row_threads = rows > 0 && rows <= 1024 && !(rows & (rows - 1)) ? rows : 0;
  s.jam_inner = KILN_MAX_JAM; /* attention's head dim: the scores once per row */
  return s;
}

kiln_status_t cu_plan_compile(kiln_device *dev, void *state, kiln_plan *p, const kiln_plan_bindings *bind) {
  (void)bind;
  cu_plan_state *x = state;
  x->steps = calloc((size_t)p->n_steps + 1, sizeof *x->steps);
  x->graphs = calloc((size_t)p->n_flushes + 1, sizeof *x->graphs);
  if (!x->steps || !x->graphs) return KILN_OOM();
  x->n_steps = p->n_steps;
  x->n_flushes = p->n_flushes;
  kiln_plan_kernels ks;
  kiln_loop_schedule sched = cu_gpu_schedule(x->d->props.multiprocessors);
  kiln_plan_dialect dialect = {"cuda", "cu", kiln_cuda_preamble(), NULL, kiln_render_cuda};
  KILN_TRY(kiln_plan_render_kernels(p, &dialect, &sched, &ks));
  kiln_status_t st = NULL;
  x->n_kernels = ks.n_kernels;
  x->source_bytes = ks.source_bytes;
  if (x->n_kernels) {
    double t0 = now_ms();
    st = cu_build_module(x->d, ks.source, ks.what, &x->module, &x->from_cache);
    x->build_ms = now_ms() - t0;
  }
  for (int i = 0; i < p->n_steps && !st; i++) {
    if (!kiln_plan_step_launches(p, i)) continue;
    char name[32];
    kiln_plan_kernel_name(i, name);
    x->steps[i].threads = ks.threads[i];
    x->steps[i].block = ks.group_size[i] ? (unsigned)ks.group_size[i] : CU_STEP_THREADS;
    st = cu_check(cu_api()->ModuleGetFunction(&x->steps[i].fn, x->module, name), "cuModuleGetFunction");
    if (st) st = kiln_status_annotate(st, "kernel %s of node '%s'", name, p->steps[i].node->name);
  }
  kiln_plan_kernels_free(&ks);
  if (!st) st = kiln_device_buffer_alloc(dev, 4, &x->dummy);
  return st;
}

/* Launches step i; caller holds the device's lock (and so owns the stream). */
static kiln_status_t launch_locked(cu_plan_state *x, const kiln_plan *p, int i, const kiln_plan_bindings *bind) {
  const kiln_plan_step *s = &p->steps[i];
  const cu_step *cs = i < x->n_steps ? &x->steps[i] : NULL;
  if (!cs || !cs->fn) return kiln_error(KILN_INTERNAL, "cuda: step %d of the plan was not compiled", i);
  if (!cs->threads) return NULL;
  CUdeviceptr addr[64];
  void *params[64];
  if (s->n_args > 64) return kiln_error(KILN_UNSUPPORTED, "cuda: a kernel of %d buffers (at most 64)", s->n_args);
  for (int a = 0; a < s->n_args; a++) {
    int v = s->args[a];
    kiln_device_buffer *buf = v >= 0 ? bind->buffer[v] : NULL;
    addr[a] = buf ? cu_address(buf, bind->offset[v]) : cu_address(x->dummy, 0); /* no bytes: never read */
    params[a] = &addr[a];
  }
  return cu_launch_threads(x->d, cs->fn, cs->threads, cs->block, params);
}

kiln_status_t cu_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i, const kiln_plan_bindings *bind) {
  (void)dev;
  cu_plan_state *x = state;
  pthread_mutex_lock(&x->d->lock);
  kiln_status_t st = cu_enter(x->d);
  if (!st) st = launch_locked(x, p, i, bind);
  pthread_mutex_unlock(&x->d->lock);
  return st;
}

static bool graphs_wanted(cu_plan_state *x) {
  const char *env = getenv("KILN_CUDA_GRAPHS");
  if (env && !strcmp(env, "0")) x->no_graphs = "KILN_CUDA_GRAPHS=0";
  else if (!cu_api()->GraphLaunch) x->no_graphs = "the driver has no CUDA graphs";
  return !x->no_graphs;
}

/* Captures flush f's launches as one graph. The lock is held throughout so
 * no other session's work on the shared stream enters the capture. */
kiln_status_t cu_record(kiln_device *dev, void *state, kiln_plan *p, int f, const kiln_plan_bindings *bind) {
  (void)dev;
  cu_plan_state *x = state;
  const cu_fns *fn = cu_api();
  const kiln_plan_flush *fl = &p->flushes[f];
  int launches = 0;
  for (int i = fl->device_begin; i < fl->device_end; i++)
    launches += kiln_plan_step_launches(p, i) && x->steps[i].threads > 0;
  if (!launches || !graphs_wanted(x)) return NULL;
  pthread_mutex_lock(&x->d->lock);
  kiln_status_t st = cu_enter(x->d);
  CUresult r = st ? 0 : fn->StreamBeginCapture(x->d->stream, CU_CAPTURE_MODE_THREAD_LOCAL);
  if (!st && r) {
    /* A driver or a device (MPS, some virtual GPUs) that cannot capture: launch step by step. */
    x->no_graphs = "the driver refused stream capture";
    pthread_mutex_unlock(&x->d->lock);
    return NULL;
  }
  for (int i = fl->device_begin; i < fl->device_end && !st; i++)
    if (kiln_plan_step_launches(p, i)) st = launch_locked(x, p, i, bind);
  CUgraph graph = NULL;
  if (!x->no_graphs) {
    CUresult end = fn->StreamEndCapture(x->d->stream, &graph);
    if (!st) st = cu_check(end, "cuStreamEndCapture");
  }
  if (!st) st = cu_check(fn->GraphInstantiate(&x->graphs[f], graph, 0), "cuGraphInstantiate");
  if (graph) fn->GraphDestroy(graph);
  pthread_mutex_unlock(&x->d->lock);
  if (st) {
    x->graphs[f] = NULL;
    return kiln_status_annotate(st, "cuda: capturing segment %d of the plan as a CUDA graph", f);
  }
  p->flushes[f].recorded = x->graphs[f];
  x->n_graphs++;
  return NULL;
}

kiln_status_t cu_enqueue_recorded(kiln_device *dev, void *state, const kiln_plan *p, int f) {
  (void)dev;
  (void)p;
  cu_plan_state *x = state;
  if (f >= x->n_flushes || !x->graphs[f]) return kiln_error(KILN_INTERNAL, "cuda: segment %d has no graph", f);
  pthread_mutex_lock(&x->d->lock);
  kiln_status_t st = cu_enter(x->d);
  if (!st) st = cu_check(cu_api()->GraphLaunch(x->graphs[f], x->d->stream), "cuGraphLaunch");
  pthread_mutex_unlock(&x->d->lock);
  return st;
}

void cu_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  cu_plan_state *x = state;
  if (!x) return;
  kiln_status_free(cu_enter(x->d));
  for (int f = 0; x->graphs && f < x->n_flushes; f++)
    if (x->graphs[f]) {
      cu_api()->GraphExecDestroy(x->graphs[f]);
      p->flushes[f].recorded = NULL;
    }
  if (x->module) cu_api()->ModuleUnload(x->module);
  if (x->dummy) kiln_device_buffer_free(dev, x->dummy);
  free(x->graphs);
  free(x->steps);
  free(x);
}

void cu_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  (void)dev;
  const cu_plan_state *x = state;
  int segments = 0;
  for (int f = 0; f < p->n_flushes; f++) segments += p->flushes[f].device_end > p->flushes[f].device_begin;
  fprintf(out, "cuda: %d kernels in one module (%zu bytes of CUDA C) for sm_%d%d, %s in %.0f ms, on %s\n",
          x->n_kernels, x->source_bytes, x->d->props.cc_major, x->d->props.cc_minor,
          x->from_cache ? "loaded from the cubin cache" : "compiled by NVRTC", x->build_ms, x->d->props.name);
  fprintf(out, "cuda: %d of %d segments captured as CUDA graphs%s%s\n", x->n_graphs, segments,
          x->no_graphs ? ": " : "", x->no_graphs ? x->no_graphs : "");
}
