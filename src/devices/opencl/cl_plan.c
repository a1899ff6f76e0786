/* cl_plan.c — the OpenCL device's plan hooks.
 *
 * The device has no kernel templates of its own: it claims what the
 * compute definitions lower (codegen/lower.c), contractions included, and
 * the shared plan fuses them. Every kernel is scheduled with the GPU
 * mapping (one work item per element of the outer loops up to the first a
 * reduction depends on) and rendered in the OpenCL C dialect; the kernels
 * of a plan form one program, built once (its binary cached by
 * cl_build_program) at prepare. A launch binds each value as (block,
 * byte offset) and enqueues the kernel; the executor flushes once per
 * segment. */
#if KILN_HAVE_OPENCL

#include "devices/opencl/cl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CL_THREAD_TILE 4 /* PoCL, AMD EPYC: transformer 2.3x, MobileNetV2 1.26x, ResNet-50 1.16x over 1 */
#define CL_ROW_THREADS_CPU 0

#include "runtime/plan_kernels.h"

typedef struct cl_step {
  cl_kernel kernel; /* owned */
  size_t items;     /* work items: the elements of the kernel's parallel dims */
  size_t local;     /* work-group size */
} cl_step;

typedef struct cl_plan_state {
  cl_dev *d;
  cl_program program; /* owned */
  cl_step *steps;     /* per plan step (KERNEL steps that launch); owned */
  int n_steps;
  int n_kernels;
  size_t source_bytes;
  bool from_cache;
  double build_ms;
  kiln_device_buffer *dummy; /* bound for operands of no bytes; owned */
} cl_plan_state;

/* Dtypes the OpenCL C dialect stores. */
static bool dtype_ok(const void *user, kiln_dtype dt, const char **why) {
  const cl_dev *d = user;
  switch (dt) {
    case KILN_DTYPE_F32: case KILN_DTYPE_I64: case KILN_DTYPE_I32: case KILN_DTYPE_I16: case KILN_DTYPE_I8:
    case KILN_DTYPE_U8: case KILN_DTYPE_U16: case KILN_DTYPE_U32: case KILN_DTYPE_U64: case KILN_DTYPE_BOOL:
      case KILN_DTYPE_F16: case KILN_DTYPE_BF16: /* 16-bit words, converted through f32 */
      return true;
    case KILN_DTYPE_F64:
      if (!d->props.fp64 && why) *why = "the OpenCL device has no fp64";
      return d->props.fp64;
    default:
      if (why) *why = "a dtype the OpenCL C dialect does not store";
      return false;
  }
}

static kiln_op_class claim(const cl_dev *d, const kiln_graph *g, const kiln_node *node, const char **why) {
  return kiln_plan_claim_stored(g, node, dtype_ok, d, why);
}

bool cl_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  return claim(dev->impl, g, node, reason) != KILN_OPCLASS_NONE;
}

static kiln_op_class plan_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  const cl_plan_state *x = user;
  return claim(x->d, g, node, why);
}

kiln_status_t cl_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                            kiln_plan_target *out_target, void **out_state) {
  cl_plan_state *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->d = dev->impl;
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = false,
      .alignment = x->d->props.mem_align,
      .size_rounding = 4,
      .claim = plan_claim,
      .user = x,
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

/* The GPU schedule (codegen/loopnest.h): KILN_OPENCL_THREAD_TILE=N
 * elements per work item along the innermost parallel loop of kernels with
 * reductions; contractions in the template's groups of
 * KILN_OPENCL_TILES=256 work items on GPUs, 64 on other devices (PoCL on 2
 * EPYC cores: ResNet-50 1.13x, MobileNetV2 1.27x faster than 256), 0 for
 * no template; at least two groups per compute unit; on GPUs 32-bit indices
 * where they fit (GPUs emulate 64-bit integer multiplies and divides; on
 * PoCL they measured 3% slower: KILN_OPENCL_INDEX64=0/1 chooses). */
static kiln_loop_schedule cl_gpu_schedule(const cl_dev *d) {
  kiln_loop_schedule s = kiln_loop_schedule_default();
  s.thread_tile = env_int("KILN_OPENCL_THREAD_TILE", CL_THREAD_TILE);
  s.narrow_indices = !env_int("KILN_OPENCL_INDEX64", (d->props.type & CL_DEVICE_TYPE_GPU) ? 0 : 1);
  int group = env_int("KILN_OPENCL_TILES", (d->props.type & CL_DEVICE_TYPE_GPU) ? 256 : 64);
  if (group > 64 && d->props.max_work_group < 256) group = 64;
  s.group_threads = (group == 64 || group == 256) && d->props.max_work_group >= (size_t)group ? group : 0;
  s.min_groups = 2 * (int)d->props.compute_units;
  int rows = env_int("KILN_OPENCL_ROWS", (d->props.type & CL_DEVICE_TYPE_GPU) ? 256 : CL_ROW_THREADS_CPU);
  s.row_threads = rows > 0 && !(rows & (rows - 1)) && d->props.max_work_group >= (size_t)rows ? rows : 0;
  s.jam_inner = KILN_MAX_JAM; /* attention's head dim: the scores once per row */
  return s;
}

kiln_status_t cl_plan_compile(kiln_device *dev, void *state, kiln_plan *p, const kiln_plan_bindings *bind) {
  cl_plan_state *x = state;
  const cl_fns *fn = cl_api();
  x->steps = calloc((size_t)p->n_steps + 1, sizeof *x->steps);
  if (!x->steps) return KILN_OOM();
  x->n_steps = p->n_steps;
  kiln_plan_kernels ks;
  kiln_loop_schedule sched = cl_gpu_schedule(x->d);
  kiln_plan_dialect dialect = {"opencl", "cl", kiln_opencl_preamble(), kiln_opencl_half_helpers(), kiln_render_opencl};
  KILN_TRY(kiln_plan_render_kernels(p, &dialect, &sched, &ks));
  kiln_status_t st = NULL;
  x->n_kernels = ks.n_kernels;
  x->source_bytes = ks.source_bytes;
  if (x->n_kernels) {
    double t0 = now_ms();
    st = cl_build_program(x->d, ks.source, ks.what, &x->program, &x->from_cache);
    x->build_ms = now_ms() - t0;
  }
  for (int i = 0; i < p->n_steps && !st; i++) {
    if (!kiln_plan_step_launches(p, i)) continue;
    char name[32];
    kiln_plan_kernel_name(i, name);
    cl_int err = CL_SUCCESS;
    cl_step *cs = &x->steps[i];
    cs->items = (size_t)ks.threads[i];
    cs->kernel = fn->CreateKernel(x->program, name, &err);
    if (!cs->kernel || err) {
      cs->kernel = NULL;
      st = cl_check(err ? err : CL_INVALID_KERNEL, "clCreateKernel");
      break;
    }
    size_t wg = 0;
    fn->GetKernelWorkGroupInfo(cs->kernel, x->d->props.id, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    cs->local = KILN_MIN((size_t)64, KILN_MIN(wg ? wg : 1, x->d->props.max_work_group));
    if (ks.group_size[i]) { /* the contraction template: its group size or nothing */
      cs->local = (size_t)ks.group_size[i];
      if (wg && wg < cs->local)
        st = kiln_error(KILN_UNSUPPORTED, "opencl: kernel %s of node '%s' needs work groups of %zu, the device allows %zu",
                        name, p->steps[i].node->name, cs->local, wg);
    }
  }
  kiln_plan_kernels_free(&ks);
  if (!st) st = kiln_device_buffer_alloc(dev, 4, &x->dummy);
  return st;
}

kiln_status_t cl_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i, const kiln_plan_bindings *bind) {
  cl_plan_state *x = state;
  const kiln_plan_step *s = &p->steps[i];
  const cl_step *cs = i < x->n_steps ? &x->steps[i] : NULL;
  if (!cs || !cs->kernel) return kiln_error(KILN_INTERNAL, "opencl: step %d of the plan was not compiled", i);
  if (!cs->items) return NULL;
  for (int a = 0; a < s->n_args; a++) {
    int v = s->args[a];
    kiln_device_buffer *buf = v >= 0 ? bind->buffer[v] : NULL;
    cl_ulong off = buf ? buf->offset + bind->offset[v] : 0;
    if (!buf) buf = x->dummy; /* a value of no bytes: never read */
    KILN_TRY(cl_set_buffer_arg(cs->kernel, a, buf, off));
  }
  return cl_enqueue_kernel(x->d, cs->kernel, cs->items, cs->local);
}

void cl_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  cl_plan_state *x = state;
  if (!x) return;
  const cl_fns *fn = cl_api();
  for (int i = 0; x->steps && i < x->n_steps; i++)
    if (x->steps[i].kernel) fn->ReleaseKernel(x->steps[i].kernel);
  if (x->program) fn->ReleaseProgram(x->program);
  if (x->dummy) kiln_device_buffer_free(dev, x->dummy);
  free(x->steps);
  free(x);
}

void cl_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const cl_plan_state *x = state;
  fprintf(out, "opencl: %d kernels in one program (%zu bytes of OpenCL C), %s in %.0f ms, on %s\n", x->n_kernels,
          x->source_bytes, x->from_cache ? "loaded from the binary cache" : "built", x->build_ms, x->d->props.name);
}

#else
typedef int kiln_cl_plan_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_OPENCL */
