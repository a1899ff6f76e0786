/* The Vulkan device's plan hooks (see vk_plan.h): claims, GLSL kernels
 * (contractions as the shared template), pipelines, bindings, recorded
 * segments. */
#if KILN_HAVE_VULKAN

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "codegen/loopnest.h"
#include "devices/vulkan/vk_plan.h"
#include "runtime/plan.h"
#include "tensor/dtype.h"

/* The device's compiled form of plan step i (vk_plan_state.steps[i]). */
typedef struct vs_step {
  kiln_loop_nest nest;     /* its GPU schedule (until compiled) */
  char name[64];           /* the shader's name: k<step>_<op> */
  char *glsl;              /* the rendered shader (until compiled); owned */
  kiln_glsl_spec spec;     /* its specialization constants; owned */
  uint32_t groups[3];      /* dispatch size (all 0: nothing to do) */
  int n_buffers;
  vk_kernel *kernel;       /* owned */
} vs_step;

/* One plan's device state. */
typedef struct vk_plan_state {
  vk_device_state *dev;   /* borrowed */
  vk_context *ctx;        /* borrowed from dev */
  const kiln_graph *g;    /* borrowed */
  bool fp16;              /* f32 values live on the device as IEEE half (KILN_PRECISION_FP16) */
  vs_step *steps;         /* one per plan step (allocated for every node); owned */
  int n_steps;
  bool *denied;           /* per node: its group did not render; the plan is rebuilt without it */
  bool retry;             /* a node was denied since the last build */
  vk_buffer **view;       /* per value id: the view bound for it; owned */
  vk_buffer *dummy;       /* bound where a tensor is empty; owned */
  vk_stream **recorded;   /* per flush: its recorded segment, or NULL; owned */
  int n_recorded;
  /* Shaders of this plan (`kiln info`): kernels, distinct sources, and what
   * the context's compiler did during prepare (other sessions preparing at
   * the same time count too). */
  int n_shader_kernels, n_shader_sources;
  uint64_t spirv_compiled, spirv_cached;
  double shader_s;
  uint64_t run0_submits, run0_command_buffers, run0_dispatches; /* the device's counters when the last run began */
} vk_plan_state;

/* ---- claims ------------------------------------------------------------------ */

#define VS_MAX_ELEMS ((int64_t)1 << 31)

static bool input_too_big(const kiln_graph *g, const kiln_node *node) {
  for (int i = 0; i < node->n_inputs; i++)
    if (node->inputs[i] >= 0 && kiln_type_numel(&g->values[node->inputs[i]].type) >= VS_MAX_ELEMS) return true;
  for (int i = 0; i < node->n_outputs; i++)
    if (node->outputs[i] >= 0 && kiln_type_numel(&g->values[node->outputs[i]].type) >= VS_MAX_ELEMS) return true;
  return false;
}

/* Half arithmetic in the contraction template (fp16 precision): on GPUs,
 * whose half FMA runs two lanes per instruction and whose shared memory
 * the half tiles halve. A CPU implementation (lavapipe) measured 1.4x
 * slower with it (fp16 1024^3 GEMM), so it keeps f32 arithmetic there. */
static bool half_arith_pays(const vk_device_props *props) {
  return props->type != 4 /* VK_PHYSICAL_DEVICE_TYPE_CPU */;
}

int64_t vk_max_loop_trips(const vk_device_props *p) {
  /* llvmpipe (lavapipe) ends every loop of a shader invocation once the
   * passes through all its loops together reach 65535, with no error
   * (gallivm's loop limiter, one counter per invocation): a reduction of
   * 100000 elements by one thread came back short, and so did a Conv whose
   * 1152 k-steps spent 60 passes each in four loops. */
  /* KILN_VULKAN_LOOP_LIMIT=N plays a driver with a limit of N passes (a
   * test reaches the refusals and the plan's rebuilds with it). */
  const char *env = getenv("KILN_VULKAN_LOOP_LIMIT");
  if (env && *env) {
    char *end;
    long long n = strtoll(env, &end, 10);
    if (*end == '\0' && n > 0) return n;
  }
  return strstr(p->name, "llvmpipe") ? 65535 : 0;
}

const char *vk_plan_unsupported(const kiln_graph *g, const kiln_node *node) {
  const char *why = NULL;
  kiln_op_class c = kiln_lower_class(g, node, &why);
  if (c == KILN_OPCLASS_NONE) return why ? why : "no compute definition";
  if (input_too_big(g, node)) return "a tensor of 2^31 elements or more";
  /* The GLSL dialect stores f32 and int32 (and reads int32 tables and bool
   * masks); other integer results stay on ref here. A bool result is
   * claimed for the kernel its consumer inlines it into (ReLU's gradient
   * mask into its Where); a kernel that would store it does not render
   * and is denied (vk_schedule), so the plan is rebuilt with it on ref. */
  kiln_dtype odt = g->values[node->outputs[0]].type.dtype;
  if (odt != KILN_DTYPE_F32 && odt != KILN_DTYPE_I32 && odt != KILN_DTYPE_BOOL)
    return "a result of dtype other than f32, int32 or bool";
  /* GLSL leaves integer / and % undefined for negative operands (C truncates: ref's rule) */
  if ((kiln_node_is(node, KILN_OP_Div) || kiln_node_is(node, KILN_OP_Mod)) && odt != KILN_DTYPE_F32)
    return "an integer division (GLSL leaves negative operands undefined)";
  for (int i = 0; i < node->n_inputs; i++) {
    if (node->inputs[i] < 0 || kiln_lower_is_param_input(node, i)) continue;
    kiln_dtype dt = g->values[node->inputs[i]].type.dtype;
    /* the gathers' and scatters' constant indices (range-checked by the claim) read by their low word */
    kiln_op_id id = kiln_node_op_id(node);
    bool index = dt == KILN_DTYPE_I64 && i == 1 &&
                 (id == KILN_OP_Gather || id == KILN_OP_GatherND || id == KILN_OP_GatherElements ||
                  id == KILN_OP_ScatterElements || id == KILN_OP_ScatterND);
    if (dt != KILN_DTYPE_F32 && dt != KILN_DTYPE_I32 && dt != KILN_DTYPE_BOOL && !index)
      return "an input of dtype other than f32";
  }
  for (int i = 1; i < node->n_outputs; i++)
    if (node->outputs[i] >= 0) return "a second output is used";
  return NULL;
}

/* ---- plan hooks ----------------------------------------------------------------- */

static void step_reset(vk_plan_state *x, vs_step *s) {
  if (s->kernel) vk_kernel_destroy(x->ctx, s->kernel);
  kiln_loop_nest_free(&s->nest);
  free(s->glsl);
  kiln_glsl_spec_free(&s->spec);
  memset(s, 0, sizeof *s);
}

static kiln_op_class vk_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  vk_plan_state *x = user;
  if (x->denied[node - g->nodes]) {
    if (why) *why = "its fused group did not render";
    return KILN_OPCLASS_NONE;
  }
  const char *no = vk_plan_unsupported(g, node);
  if (no) {
    if (why) *why = no;
    return KILN_OPCLASS_NONE;
  }
  return kiln_lower_class(g, node, why);
}

/* Schedules a KERNEL step for the GPU and renders it as a standalone shader.
 * A group the GLSL dialect cannot express (a dtype it lacks) is denied: the
 * plan is rebuilt with its nodes on ref. */
static kiln_status_t vk_schedule(void *user, kiln_plan *p, int i) {
  vk_plan_state *x = user;
  kiln_plan_step *ps = &p->steps[i];
  vs_step *s = &x->steps[i];
  const vk_device_props *tune = &x->dev->tune;
  kiln_status_t st = kiln_schedule_glsl(ps->fk.b, ps->fk.root, 0, &s->nest);
  kiln_glsl_options o = kiln_glsl_options_default();
  /* Contractions: the shared contraction template in groups of 64, enough
   * of them for a few per compute unit; on a CPU implementation (lavapipe)
   * groups of 32 with big register blocks, two per core (MobileNetV2 on
   * lavapipe: 2518 ms in groups of 64, 32 groups at least; 1087 ms in
   * groups of 32, 4 at least, 2 cores). Row reductions: one workgroup of
   * the default size per row. */
  if (!st) {
    bool cpu = tune->type == 4; /* VK_PHYSICAL_DEVICE_TYPE_CPU */
    long cores = cpu ? sysconf(_SC_NPROCESSORS_ONLN) : 0;
    kiln_schedule_contraction_tiles(&s->nest, cpu ? 32 : 64, cpu ? (int)KILN_MAX(2 * cores, 2) : VK_TILE_MIN_GROUPS);
  }
  o.max_loop_trips = vk_max_loop_trips(&x->dev->props);
  /* A row's reductions by one thread spend the limit together (softmax:
   * three over the row), so rows longer than a quarter of it go to a group. */
  if (!st)
    st = kiln_schedule_cooperative_rows(ps->fk.b, &s->nest, (int)o.workgroup_size, (int)o.workgroup_size,
                                        x->dev->props.subgroup_arithmetic, o.max_loop_trips / 4);
  /* One thread per row with a short innermost loop (attention's head dim):
   * that loop jammed, so the row's scores are computed once. */
  if (!st) st = kiln_schedule_jam_inner(ps->fk.b, &s->nest, KILN_MAX_JAM);
  o.fp16 = x->fp16;
  o.fp16_arith = x->fp16 && half_arith_pays(tune);
  o.int64 = x->dev->props.int64;
  o.spec = &s->spec; /* sizes as specialization constants: one SPIR-V per kernel structure */
  kiln_strbuf src = {0};
  snprintf(s->name, sizeof s->name, "k%d_%s", i, ps->node->op_type);
  if (!st) st = kiln_render_glsl(ps->fk.b, &s->nest, s->name, &o, &src, s->groups);
  if (!st) st = kiln_strbuf_status(&src);
  if (!st && s->spec.oom) st = KILN_OOM();
  if (st) {
    kiln_strbuf_free(&src);
    if (kiln_status_code_of(st) == KILN_UNSUPPORTED) {
      int root = (int)(ps->node - p->g->nodes);
      /* A bool result the dialect cannot store: that node alone goes to ref,
       * its producers stay (an If's condition, Greater(ReduceMean(x), 0):
       * the reduction compiled, the comparison on the host). */
      if (p->g->values[ps->node->outputs[0]].type.dtype == KILN_DTYPE_BOOL) {
        x->denied[root] = true;
      } else {
        const int *members = &p->fusion.members[p->fusion.member_start[root]];
        for (int m = 0; m < p->fusion.n_members[root]; m++) x->denied[members[m]] = true;
      }
      x->retry = true;
    }
    return st;
  }
  s->glsl = kiln_strbuf_take(&src);
  s->n_buffers = ps->n_args;
  return NULL;
}

static bool vk_retry(void *user) {
  vk_plan_state *x = user;
  bool r = x->retry;
  x->retry = false;
  for (int i = 0; r && i <= x->g->n_nodes; i++) step_reset(x, &x->steps[i]);
  return r;
}

void vk_plan_end(kiln_device *dev, void *state, kiln_plan *p);

kiln_status_t vk_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                   kiln_plan_target *out_target, void **out_state) {
  *out_state = NULL;
  vk_device_state *d = dev->impl;
  vk_context *ctx;
  KILN_TRY(vk_device_context(d, &ctx));
  vk_plan_state *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->dev = d;
  x->ctx = ctx;
  x->g = g;
  x->fp16 = opts && opts->fp16 && d->props.fp16;
  x->steps = calloc((size_t)g->n_nodes + 1, sizeof *x->steps);
  x->denied = calloc((size_t)g->n_nodes + 1, sizeof *x->denied);
  x->view = calloc((size_t)g->n_values + 1, sizeof *x->view);
  if (!x->steps || !x->denied || !x->view) {
    vk_plan_end(dev, x, NULL);
    return KILN_OOM();
  }
  int64_t align = (int64_t)d->props.min_storage_offset_align;
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = false,
      .alignment = align > 64 ? align : 64,
      .f32_as_half = x->fp16,
      .size_rounding = 4, /* shaders address 16-bit data through 32-bit words */
      .claim = vk_claim,
      .schedule = vk_schedule,
      .retry = vk_retry,
      .user = x,
  };
  *out_state = x;
  return NULL;
}

/* A kernel's specialization constants as the pipeline takes them. *out
 * owned by the caller (NULL when none). */
static kiln_status_t spec_entries(const kiln_glsl_spec *spec, vk_spec_const **out, int *n) {
  *out = NULL;
  *n = spec->n;
  if (!*n) return NULL;
  vk_spec_const *e = malloc((size_t)*n * sizeof *e);
  if (!e) return KILN_OOM();
  for (int i = 0; i < spec->n; i++) e[i] = (vk_spec_const){(uint32_t)(spec->first_id + i), (uint32_t)spec->values[i]};
  *out = e;
  return NULL;
}

static bool runs_on_device(const kiln_plan_step *ps, const vs_step *s) {
  return ps->kind == KILN_STEP_KERNEL && s->glsl && s->groups[0] != 0;
}

/* Every shader in one batch; the bound views of every value a device step
 * reads or writes. */
kiln_status_t vk_plan_compile(kiln_device *dev, void *state, kiln_plan *p, const kiln_plan_bindings *bind) {
  vk_plan_state *x = state;
  const kiln_graph *g = p->g;
  x->n_steps = p->n_steps;
  vk_kernel_desc *descs = calloc((size_t)p->n_steps + 1, sizeof *descs);
  vk_kernel **kernels = calloc((size_t)p->n_steps + 1, sizeof *kernels);
  int *step_of = calloc((size_t)p->n_steps + 1, sizeof *step_of);
  vk_spec_const **specs = calloc((size_t)p->n_steps + 1, sizeof *specs);
  kiln_status_t st = (!descs || !kernels || !step_of || !specs) ? KILN_OOM() : NULL;
  int nk = 0;
  for (int i = 0; i < p->n_steps && !st; i++) {
    vs_step *s = &x->steps[i];
    if (!runs_on_device(&p->steps[i], s)) continue;
    descs[nk] = (vk_kernel_desc){s->name, s->glsl, s->n_buffers, 0};
    st = spec_entries(&s->spec, &specs[nk], &descs[nk].n_spec);
    descs[nk].spec = specs[nk];
    step_of[nk++] = i;
  }
  vk_pipeline_stats before, after;
  vk_pipeline_stats_get(x->ctx, &before);
  if (!st && nk) st = vk_kernel_create_batch(x->ctx, descs, nk, kernels);
  vk_pipeline_stats_get(x->ctx, &after);
  x->n_shader_kernels = nk;
  x->spirv_compiled = after.spirv_compiled - before.spirv_compiled;
  x->spirv_cached = after.spirv_cached - before.spirv_cached;
  /* The batch hashed every source once: each distinct one was compiled or read from the cache. */
  x->n_shader_sources = (int)(x->spirv_compiled + x->spirv_cached);
  x->shader_s = (after.spirv_s - before.spirv_s) + (after.pipeline_s - before.pipeline_s);
  for (int k = 0; !st && k < nk; k++) x->steps[step_of[k]].kernel = kernels[k];
  for (int k = 0; specs && k < nk; k++) free(specs[k]);
  free(specs);
  free(descs);
  free(kernels);
  free(step_of);
  KILN_TRY(st);
  /* The sources and schedules are no longer needed. */
  for (int i = 0; i < p->n_steps; i++) {
    kiln_loop_nest_free(&x->steps[i].nest);
    free(x->steps[i].glsl);
    x->steps[i].glsl = NULL;
  }
  KILN_TRY(vk_buffer_alloc(x->ctx, VK_MEM_DEVICE, 256, &x->dummy));
  for (int v = 0; v < g->n_values; v++) {
    int64_t bytes = kiln_plan_value_bytes(p, v);
    if (!bind->buffer[v] || bytes <= 0) continue;
    KILN_TRY(vk_buffer_view_create((vk_buffer *)bind->buffer[v], bind->offset[v], (size_t)bytes, &x->view[v]));
  }
  return NULL;
}

static kiln_status_t bindings_of(vk_plan_state *x, const kiln_plan_step *ps, vk_buffer **bind) {
  if (ps->n_args > 96) return kiln_error(KILN_UNSUPPORTED, "kernel with over 96 buffers");
  for (int a = 0; a < ps->n_args; a++) {
    int v = ps->args[a];
    bind[a] = v >= 0 && x->view[v] ? x->view[v] : x->dummy;
  }
  return NULL;
}

kiln_status_t vk_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i,
                                    const kiln_plan_bindings *b) {
  vk_plan_state *x = state;
  const vs_step *s = &x->steps[i];
  if (!s->kernel) return NULL; /* empty output */
  vk_buffer *bind[96];
  KILN_TRY(bindings_of(x, &p->steps[i], bind));
  return vk_adhoc_dispatch(x->dev, s->kernel, bind, s->groups);
}

/* Records flush f's device steps once into a stream of their own. */
kiln_status_t vk_record(kiln_device *dev, void *state, kiln_plan *p, int f, const kiln_plan_bindings *b) {
  vk_plan_state *x = state;
  kiln_plan_flush *fl = &p->flushes[f];
  if (!x->recorded) {
    x->recorded = calloc((size_t)p->n_flushes + 1, sizeof *x->recorded);
    if (!x->recorded) return KILN_OOM();
    x->n_recorded = p->n_flushes;
  }
  bool any = false;
  for (int i = fl->device_begin; i < fl->device_end; i++) any |= x->steps[i].kernel != NULL;
  if (!any) return NULL;
  vk_stream *s;
  KILN_TRY(vk_stream_create(x->ctx, &s));
  x->recorded[f] = s;
  fl->recorded = s;
  KILN_TRY(vk_stream_begin(s));
  for (int i = fl->device_begin; i < fl->device_end; i++) {
    const vs_step *st = &x->steps[i];
    if (!st->kernel) continue;
    vk_buffer *bind[96];
    KILN_TRY(bindings_of(x, &p->steps[i], bind));
    KILN_TRY(vk_stream_dispatch(s, st->kernel, bind, NULL, st->groups[0], st->groups[1], st->groups[2]));
  }
  return vk_stream_end(s);
}

kiln_status_t vk_enqueue_recorded(kiln_device *dev, void *state, const kiln_plan *p, int f) {
  vk_plan_state *x = state;
  return vk_adhoc_enqueue(x->dev, x->recorded[f]);
}

void vk_plan_run_begin(kiln_device *dev, void *state) {
  vk_plan_state *x = state;
  vk_device_state *d = x->dev;
  pthread_mutex_lock(&d->adhoc_lock);
  x->run0_submits = d->stat_submits;
  x->run0_command_buffers = d->stat_command_buffers;
  x->run0_dispatches = d->stat_dispatches;
  pthread_mutex_unlock(&d->adhoc_lock);
}

void vk_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  vk_plan_state *x = state;
  if (!x) return;
  for (int i = 0; x->steps && i <= x->g->n_nodes; i++) step_reset(x, &x->steps[i]);
  free(x->steps);
  for (int f = 0; x->recorded && f < x->n_recorded; f++)
    if (x->recorded[f]) vk_stream_destroy(x->ctx, x->recorded[f]);
  free(x->recorded);
  for (int v = 0; x->view && v < x->g->n_values; v++)
    if (x->view[v]) vk_buffer_view_free(x->view[v]);
  free(x->view);
  if (x->dummy) vk_buffer_free(x->ctx, x->dummy);
  free(x->denied);
  free(x);
}

void vk_plan_describe(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const vk_plan_state *x = state;
  int n_segments = 0;
  for (int f = 0; x->recorded && f < x->n_recorded; f++) n_segments += x->recorded[f] != NULL;
  fprintf(out, "%s: every kernel from the compute definitions (contractions as the shared template)%s\n", x->dev->name,
          x->fp16 && half_arith_pays(&x->dev->tune) ? ", half arithmetic in its tiles" : "");
  fprintf(out,
          "shaders: %d kernels from %d distinct sources (sizes are specialization constants); at prepare %llu SPIR-V "
          "modules compiled, %llu from the cache, %.2f s compiling and creating pipelines\n",
          x->n_shader_kernels, x->n_shader_sources, (unsigned long long)x->spirv_compiled,
          (unsigned long long)x->spirv_cached, x->shader_s);
  fprintf(out, "recorded: %d command buffer%s, %d submission%s per run\n", n_segments, n_segments == 1 ? "" : "s",
          p->n_flushes, p->n_flushes == 1 ? "" : "s");
}

void vk_plan_run_stats(kiln_device *dev, void *state, const kiln_plan *p, FILE *out) {
  const vk_plan_state *x = state;
  vk_device_state *d = x->dev;
  pthread_mutex_lock(&d->adhoc_lock);
  uint64_t s = d->stat_submits - x->run0_submits, c = d->stat_command_buffers - x->run0_command_buffers,
           k = d->stat_dispatches - x->run0_dispatches;
  pthread_mutex_unlock(&d->adhoc_lock);
  fprintf(out, "%s: last run: %llu queue submission%s, %llu command buffer%s, %llu dispatches\n", d->name,
          (unsigned long long)s, s == 1 ? "" : "s", (unsigned long long)c, c == 1 ? "" : "s", (unsigned long long)k);
}

#endif
