/* The cpu device's compiler driver and executor (see cpu_internal.h). */
#include <stdio.h>

#include "base/cpu_features.h"
#include "codegen/fusion.h"
#include "codegen/jit.h"
#include "codegen/loopnest.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"
#include "runtime/executor.h"

/* ---- the runtime table generated code calls -------------------------------- */

static void rt_parallel_for(void *pool, int64_t n, int64_t grain, kiln_rt_parallel_fn fn, void *ctx) {
  kiln_parallel_for((kiln_threadpool *)pool, n, grain, (kiln_parallel_fn)fn, ctx);
}

static void rt_sgemm(void *pool, const kiln_rt_sgemm_args *a) {
  kiln_sgemm_args g = {a->trans_a, a->trans_b, a->m, a->n, a->k, a->alpha, a->a, a->lda, a->b, a->ldb,
                       a->packed_b, a->beta, a->c, a->ldc, a->bias, a->bias_axis,
                       (kiln_gemm_epilogue_fn)a->epilogue, a->epilogue_ctx};
  kiln_sgemm((kiln_threadpool *)pool, &g);
}

/* ---- kernel generation ------------------------------------------------------- */

/* Lowers group `root` (codegen/fusion.c), schedules it and renders it as C:
 * `kiln_kernel`, plus `kiln_epilogue` when the kernel is flat and could run
 * on a contraction's tiles. */
static kiln_status_t build_kernel(const kiln_graph *g, const kiln_fusion *f, int root, cpu_step *step,
                                  char **out_src) {
  kiln_fused_kernel k;
  KILN_TRY(kiln_fusion_build(g, f, root, true, &k));
  kiln_strbuf src = {0};
  kiln_loop_nest nest = {0};
  kiln_loop_schedule sched = kiln_loop_schedule_default();
  kiln_status_t st = kiln_schedule_kernel(k.b, k.root, 0, &sched, &nest);
  if (!st) {
    kiln_strbuf_puts(&src, kiln_c_preamble());
    st = kiln_render_c(k.b, &nest, "kiln_kernel", &src);
    /* A flat elementwise kernel can also run as a GEMM epilogue. */
    if (!st && k.flat && nest.n_sites == 0) st = kiln_render_c_epilogue(k.b, &nest, "kiln_epilogue", &src);
  }
  if (!st) st = kiln_strbuf_status(&src);
  if (!st) {
    step->flat = k.flat;
    step->elementwise_only = k.elementwise_only;
    step->n_args = k.n_args;
    step->args = k.args;
    k.args = NULL;
    *out_src = kiln_strbuf_take(&src);
  }
  kiln_loop_nest_free(&nest);
  kiln_strbuf_free(&src);
  kiln_fused_kernel_free(&k);
  return st;
}

/* ---- epilogues ---------------------------------------------------------------- */

/* A flat elementwise kernel whose operand is a contraction's result read by
 * nobody else runs inside the contraction, on each finished tile: the
 * contraction writes straight into the kernel's output buffer and the raw
 * result never exists as a separate tensor. The kernel's other operands
 * must be ready when the contraction runs. */
/* A broadcast bias Add in group `root` over a contraction's result: an f32
 * Add(raw, b) (either order) of the group where raw, read only there, is
 * the output of a MatMul whose right-hand side has rank >= 2 or of a Gemm
 * without C, and b is an f32 constant of N elements with every dim 1 but
 * the last (N = raw's last dim); the Add's output has raw's shape. Returns
 * b's value id (*add_node: the Add, *raw: the result), or -1. */
static int find_col_bias(const struct kiln_executable *x, const kiln_fusion *f, const int *step_of_value, int root,
                         int *add_node, int *raw) {
  const kiln_graph *g = x->g;
  for (int n = 0; n <= root; n++) {
    if (f->group_of[n] != root) continue;
    const kiln_node *an = &g->nodes[n];
    if (!kiln_node_is(an, KILN_OP_Add) || an->n_inputs != 2 || an->n_outputs != 1) continue;
    if (an->opset < 7) continue; /* legacy broadcast (axis attribute): not numpy's */
    for (int i = 0; i < 2; i++) {
      int v = an->inputs[i], b = an->inputs[1 - i];
      if (v < 0 || b < 0 || v == b || step_of_value[v] < 0) continue;
      const cpu_step *c = &x->steps[step_of_value[v]];
      const kiln_node *cn = c->node;
      if (cn->outputs[0] != v) continue;
      if (c->kind == CPU_STEP_MATMUL) {
        if (cn->n_inputs < 2 || cn->inputs[1] < 0 || g->values[cn->inputs[1]].type.rank < 2) continue;
      } else if (c->kind == CPU_STEP_GEMM) {
        if (cn->n_inputs > 2 && cn->inputs[2] >= 0) continue;
      } else {
        continue;
      }
      if (f->uses[v] != 1 || g->values[v].is_graph_output) continue;
      const kiln_type *tv = &g->values[v].type, *tb = &g->values[b].type, *ty = &g->values[an->outputs[0]].type;
      const kiln_tensor *bc = g->values[b].constant;
      if (tv->dtype != KILN_DTYPE_F32 || ty->dtype != KILN_DTYPE_F32 || tv->rank < 1 || tb->rank < 1) continue;
      if (!bc || bc->dtype != KILN_DTYPE_F32 || !kiln_type_same_shape(tv, ty)) continue;
      int64_t nn = tv->dims[tv->rank - 1];
      if (tb->dims[tb->rank - 1] != nn || kiln_type_numel(tb) != nn || bc->numel != nn) continue;
      *add_node = n;
      *raw = v;
      return b;
    }
  }
  return -1;
}

/* A non-flat elementwise kernel that adds a constant per-column bias to a
 * MatMul/Gemm result: the kernel is rebuilt with that Add read as the
 * identity (what remains is flat) and runs as the contraction's epilogue,
 * the contraction adding the bias itself (kiln_sgemm's bias_axis 2). Only
 * committed when the rebuilt kernel fuses; otherwise the step is left as it
 * was. */
static void fuse_col_bias(struct kiln_executable *x, const kiln_fusion *f, const int *step_of_value, int ki,
                          char **sources, const int *source_step, int n_sources) {
  const kiln_graph *g = x->g;
  cpu_step *k = &x->steps[ki];
  int root = (int)(k->node - g->nodes), an = -1, raw = -1;
  int bias = find_col_bias(x, f, step_of_value, root, &an, &raw);
  if (bias < 0) return;
  int ci = step_of_value[raw];
  cpu_step *c = &x->steps[ci];
  if (c->epilogue_step >= 0 || ci >= ki) return;
  int src = -1;
  for (int i = 0; i < n_sources; i++)
    if (source_step[i] == ki) src = i;
  if (src < 0) return;
  kiln_node *nodes = malloc(((size_t)g->n_nodes + 1) * sizeof *nodes);
  if (!nodes) return; /* an optimization: skip it */
  memcpy(nodes, g->nodes, (size_t)g->n_nodes * sizeof *nodes);
  static char identity[] = "Identity";
  int in[1] = {raw};
  nodes[an].op_type = identity;
  nodes[an].op = kiln_op_by_id(KILN_OP_Identity); /* lowering reads the op id */
  nodes[an].inputs = in;
  nodes[an].n_inputs = 1;
  nodes[an].n_attrs = 0;
  nodes[an].attrs = NULL;
  kiln_graph gc = *g;
  gc.nodes = nodes;
  cpu_step t;
  memset(&t, 0, sizeof t);
  char *source = NULL;
  kiln_status_t st = build_kernel(&gc, f, root, &t, &source);
  free(nodes);
  if (st) {
    kiln_status_free(st);
    return;
  }
  bool ok = t.flat && t.elementwise_only && source && strstr(source, "kiln_epilogue(") && t.args[0] == k->args[0];
  bool reads_raw = false;
  for (int b = 1; b < t.n_args && ok; b++) {
    if (t.args[b] == raw) reads_raw = true;
    else ok = step_of_value[t.args[b]] < ci;
  }
  if (!ok || !reads_raw) {
    free(t.args);
    free(source);
    return;
  }
  free(sources[src]);
  sources[src] = source;
  free(k->args);
  k->args = t.args;
  k->n_args = t.n_args;
  k->flat = true;
  c->epilogue_step = ki;
  c->out_value = k->args[0];
  c->has_col_bias = true;
  c->col_bias_value = bias;
  c->epi_identity = k->n_fused == 1 && k->n_args == 2;
  k->fused_into = ci;
  x->kinds[raw] = CPU_VALUE_ALIAS;
  x->alias_of[raw] = k->args[0];
}

static void fuse_epilogues(struct kiln_executable *x, const kiln_fusion *f, char **sources, const int *source_step,
                           int n_sources) {
  const int *uses = f->uses;
  const kiln_graph *g = x->g;
  int *step_of_value = malloc(((size_t)g->n_values + 1) * sizeof(int));
  if (!step_of_value) return; /* an optimization: skip it */
  for (int v = 0; v < g->n_values; v++) step_of_value[v] = -1;
  for (int i = 0; i < x->n_steps; i++)
    for (int k = 0; k < x->steps[i].node->n_outputs; k++)
      if (x->steps[i].node->outputs[k] >= 0) step_of_value[x->steps[i].node->outputs[k]] = i;
  for (int ki = 0; ki < x->n_steps; ki++) {
    cpu_step *k = &x->steps[ki];
    if (k->kind != CPU_STEP_KERNEL || !k->elementwise_only) continue;
    if (!k->flat) {
      fuse_col_bias(x, f, step_of_value, ki, sources, source_step, n_sources);
      continue;
    }
    for (int a = 1; a < k->n_args; a++) {
      int v = k->args[a];
      int ci = step_of_value[v];
      if (ci < 0) continue;
      cpu_step *c = &x->steps[ci];
      if (c->kind != CPU_STEP_MATMUL && c->kind != CPU_STEP_GEMM && c->kind != CPU_STEP_CONV) continue;
      if (c->epilogue_step >= 0 || uses[v] != 1 || g->values[v].is_graph_output) continue;
      if (kiln_type_numel(&g->values[v].type) != kiln_type_numel(&g->values[k->args[0]].type)) continue;
      bool ready = true;
      for (int b = 1; b < k->n_args && ready; b++)
        if (b != a) ready = step_of_value[k->args[b]] < ci;
      if (!ready) continue;
      c->epilogue_step = ki;
      c->out_value = k->args[0];
      k->fused_into = ci;
      x->kinds[v] = CPU_VALUE_ALIAS;
      x->alias_of[v] = k->args[0];
      break;
    }
  }
  free(step_of_value);
}

/* ---- memory ------------------------------------------------------------------ */

static size_t value_bytes(const kiln_graph *g, int v) {
  return (size_t)kiln_type_numel(&g->values[v].type) * kiln_dtype_size(g->values[v].type.dtype);
}

/* Every buffer compiled steps write lives in one arena; buffers whose
 * lifetimes do not overlap share bytes, and an elementwise kernel may write
 * over an input that dies with it (memory_plan.c). Graph outputs live to the
 * end. */
static kiln_status_t plan_memory(struct kiln_executable *x) {
  const kiln_graph *g = x->g;
  int nv = g->n_values;
  int *buf_of = malloc(((size_t)nv + 1) * sizeof(int));
  int *value_of = malloc(((size_t)nv + 1) * sizeof(int));
  kiln_mem_buffer *bufs = calloc((size_t)nv + 1, sizeof *bufs);
  kiln_memory_plan plan = {0};
  kiln_status_t st = NULL;
  if (!buf_of || !value_of || !bufs) {
    st = KILN_OOM();
    goto out;
  }
  int nb = 0;
  for (int v = 0; v < nv; v++) {
    buf_of[v] = -1;
    if (x->kinds[v] != CPU_VALUE_BUFFER) continue;
    value_of[nb] = v;
    bufs[nb] = (kiln_mem_buffer){(int64_t)value_bytes(g, v), 64, -1, -1, -1};
    buf_of[v] = nb++;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const cpu_step *s = &x->steps[i];
    int out = s->out_value;
    if (out >= 0 && buf_of[out] >= 0 && bufs[buf_of[out]].first_use < 0) bufs[buf_of[out]].first_use = i;
    int n_in = s->kind == CPU_STEP_KERNEL ? s->n_args : s->node->n_inputs;
    for (int k = s->kind == CPU_STEP_KERNEL ? 1 : 0; k < n_in; k++) {
      int v = s->kind == CPU_STEP_KERNEL ? s->args[k] : s->node->inputs[k];
      if (v >= 0 && buf_of[v] >= 0) bufs[buf_of[v]].last_use = i;
    }
  }
  for (int i = 0; i < x->n_steps; i++) {
    const cpu_step *s = &x->steps[i];
    if (s->epilogue_step < 0) continue;
    const cpu_step *k = &x->steps[s->epilogue_step];
    for (int a = 1; a < k->n_args; a++) {
      int v = k->args[a];
      if (v >= 0 && buf_of[v] >= 0 && bufs[buf_of[v]].last_use < i) bufs[buf_of[v]].last_use = i;
    }
  }
  /* In place: an elementwise kernel over an input of its own shape that dies there. */
  kiln_plan_step_io *io = calloc((size_t)x->n_steps + 1, sizeof *io);
  if (!io) {
    st = KILN_OOM();
    goto out;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const cpu_step *s = &x->steps[i];
    io[i] = (kiln_plan_step_io){s->args, s->n_args,
                                s->kind == CPU_STEP_KERNEL && s->elementwise_only && s->fused_into < 0};
  }
  kiln_memory_plan_finish_steps(g, buf_of, bufs, nb, io, x->n_steps);
  free(io);
  if ((st = kiln_memory_plan_compute(bufs, nb, &plan))) goto out;
  x->intermediate_bytes = (size_t)plan.total_size;
  x->arena_bytes = (size_t)plan.arena_size;
  x->arena = aligned_alloc(64, ((size_t)plan.arena_size + 63) / 64 * 64 + 64);
  if (!x->arena) {
    st = kiln_error(KILN_OUT_OF_MEMORY, "out of memory allocating the %lld-byte arena", (long long)plan.arena_size);
    goto out;
  }
  for (int b = 0; b < nb; b++) x->buffer[value_of[b]] = (char *)x->arena + plan.offsets[b];
out:
  kiln_memory_plan_free(&plan);
  free(buf_of);
  free(value_of);
  free(bufs);
  return st;
}

/* ---- prepare ----------------------------------------------------------------- */


kiln_status_t kiln_cpu_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                               struct kiln_executable **out) {
  *out = NULL;
  const char *why = NULL;
  if (kiln_fusion_needs_interpreter(g, &why))
    return kiln_error(KILN_UNSUPPORTED, "the cpu compiler does not handle graphs with %s yet", why);
  struct kiln_executable *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->g = g;
  kiln_status_t st = NULL;
  int nn = g->n_nodes, nv = g->n_values;
  kiln_op_class *cls = calloc((size_t)nn + 1, sizeof *cls);
  kiln_fusion fu = {0};
  char **sources = calloc((size_t)nn + 1, sizeof *sources);
  int *source_step = calloc((size_t)nn + 1, sizeof *source_step);
  int n_sources = 0;
  x->kinds = calloc((size_t)nv + 1, sizeof *x->kinds);
  x->buffer = calloc((size_t)nv + 1, sizeof *x->buffer);
  x->steps = calloc((size_t)nn + 1, sizeof *x->steps);
  if (!cls || !sources || !source_step || !x->kinds || !x->buffer || !x->steps) {
    st = KILN_OOM();
    goto done;
  }
  int threads = opts && opts->threads > 0 ? opts->threads : kiln_physical_cores();
  if ((st = kiln_threadpool_create(threads, &x->pool))) goto done;
  x->rt = (kiln_rt){KILN_RT_ABI_VERSION, x->pool, threads, rt_parallel_for, rt_sgemm};

  for (int n = 0; n < nn; n++) cls[n] = kiln_lower_class(g, &g->nodes[n], NULL);
  if ((st = kiln_fusion_plan(g, cls, &fu))) goto done;

  for (int i = 0; i < nv; i++) {
    const kiln_value_def *v = &g->values[i];
    if (v->constant) x->kinds[i] = CPU_VALUE_CONSTANT;
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].constant) x->kinds[g->inputs[i]] = CPU_VALUE_INPUT;

  /* Steps, in node order: one per group root, contraction, or ref node. */
  for (int n = 0; n < nn && !st; n++) {
    const kiln_node *node = &g->nodes[n];
    cpu_step *s = &x->steps[x->n_steps];
    s->node = node;
    s->flops = kiln_node_flops(g, node);
    s->out_value = node->outputs[0];
    s->epilogue_step = -1;
    s->fused_into = -1;
    if (cls[n] == KILN_OPCLASS_NONE) {
      s->kind = CPU_STEP_REF;
      snprintf(s->name, sizeof s->name, "ref:%s", node->op_type);
      for (int k = 0; k < node->n_outputs; k++)
        if (node->outputs[k] >= 0) x->kinds[node->outputs[k]] = CPU_VALUE_HOST;
      x->n_ref++;
      x->n_steps++;
      continue;
    }
    if (cls[n] == KILN_OPCLASS_CONTRACTION) {
      switch (kiln_node_op_id(node)) {
        case KILN_OP_MatMul: s->kind = CPU_STEP_MATMUL; break;
        case KILN_OP_Gemm: s->kind = CPU_STEP_GEMM; break;
        case KILN_OP_kiln_FusedAttention: s->kind = CPU_STEP_ATTENTION; break;
        case KILN_OP_MaxPool: s->kind = CPU_STEP_MAXPOOL; break;
        default: s->kind = CPU_STEP_CONV; break;
      }
      snprintf(s->name, sizeof s->name, "%s", node->op_type);
      x->kinds[node->outputs[0]] = CPU_VALUE_BUFFER;
      x->n_steps++;
      continue;
    }
    if (fu.group_of[n] != n) continue; /* inlined into a later kernel */
    s->kind = CPU_STEP_KERNEL;
    s->n_fused = fu.n_members[n];
    x->n_fused_nodes += s->n_fused;
    snprintf(s->name, sizeof s->name, "%s%s", node->op_type, s->n_fused > 1 ? "+fused" : "");
    for (int k = 0; k < n; k++)
      if (fu.group_of[k] == n) s->flops += kiln_node_flops(g, &g->nodes[k]);
    x->kinds[node->outputs[0]] = CPU_VALUE_BUFFER;
    st = build_kernel(g, &fu, n, s, &sources[n_sources]);
    if (st) break;
    source_step[n_sources++] = x->n_steps;
    x->n_kernels++;
    x->n_steps++;
  }
  if (st) goto done;
  x->alias_of = calloc((size_t)nv + 1, sizeof *x->alias_of);
  if (!x->alias_of) {
    st = KILN_OOM();
    goto done;
  }
  fuse_epilogues(x, &fu, sources, source_step, n_sources);

  /* Compile every kernel in one batch (parallel, cached). */
  if (n_sources) {
    const char **names = calloc((size_t)n_sources, sizeof *names);
    x->modules = calloc((size_t)n_sources, sizeof *x->modules);
    if (!names || !x->modules) {
      free(names);
      st = KILN_OOM();
      goto done;
    }
    for (int i = 0; i < n_sources; i++) names[i] = x->steps[source_step[i]].name;
    st = kiln_jit_compile_many(n_sources, (const char *const *)sources, names, 0, NULL, (kiln_jit_module **)x->modules);
    free(names);
    if (st) goto done;
    x->n_modules = n_sources;
    for (int i = 0; i < n_sources; i++) {
      cpu_step *s = &x->steps[source_step[i]];
      s->module = i;
      s->fn = (cpu_kernel_fn)kiln_jit_symbol((kiln_jit_module *)x->modules[i], "kiln_kernel");
      if (s->fused_into >= 0) {
        s->epilogue = (kiln_rt_epilogue_fn)kiln_jit_symbol((kiln_jit_module *)x->modules[i], "kiln_epilogue");
        if (!s->epilogue) {
          st = kiln_error(KILN_INTERNAL, "kernel for node '%s' has no epilogue entry point", s->node->name);
          goto done;
        }
      }
      if (!s->fn) {
        st = kiln_error(KILN_INTERNAL, "compiled kernel for node '%s' has no entry point", s->node->name);
        goto done;
      }
    }
  }

  if ((st = plan_memory(x))) goto done;
  for (int i = 0; i < x->n_steps && !st; i++)
    if (x->steps[i].kind != CPU_STEP_KERNEL && x->steps[i].kind != CPU_STEP_REF) st = kiln_cpu_contract_prepare(x, &x->steps[i]);
  if (!st && x->scratch_bytes) {
    x->scratch = aligned_alloc(64, (x->scratch_bytes + 63) & ~(size_t)63);
    if (!x->scratch) st = kiln_error(KILN_OUT_OF_MEMORY, "out of memory for the im2col buffer (%zu bytes)", x->scratch_bytes);
  }

done:
  for (int i = 0; i < n_sources; i++) free(sources[i]);
  free(sources);
  free(source_step);
  free(cls);
  kiln_fusion_free(&fu);
  if (st) {
    kiln_cpu_executable_free(dev, x);
    return st;
  }
  *out = x;
  return NULL;
}

void kiln_cpu_executable_free(kiln_device *dev, struct kiln_executable *x) {
  if (!x) return;
  for (int i = 0; x->steps && i < x->n_steps; i++) {
    free(x->steps[i].args);
    free(x->steps[i].packed_b);
    free(x->steps[i].work);
  }
  free(x->steps);
  for (int i = 0; i < x->n_modules; i++) kiln_jit_module_release((kiln_jit_module *)x->modules[i]);
  free(x->modules);
  free(x->kinds);
  free(x->alias_of);
  free(x->buffer);
  free(x->arena);
  free(x->scratch);
  kiln_threadpool_destroy(x->pool);
  free(x);
}

/* ---- execute ------------------------------------------------------------------ */

/* A tensor view of a value's bytes (no copy) for reference kernels. */
static kiln_status_t wrap_value(const kiln_graph *g, int id, void *ptr, kiln_value **out) {
  const kiln_type *t = &g->values[id].type;
  kiln_tensor *tt;
  KILN_TRY(kiln_tensor_wrap(t->dtype, t->rank, t->dims, ptr, NULL, &tt));
  return kiln_value_from_tensor(tt, out);
}

static kiln_status_t run_ref_step(struct kiln_executable *x, const cpu_step *s, void **ptr, kiln_value **host) {
  const kiln_graph *g = x->g;
  const kiln_node *node = s->node;
  kiln_value *ins[64] = {0}, *outs[64] = {0}, *owned[64] = {0};
  if (node->n_inputs > 64 || node->n_outputs > 64) return kiln_error(KILN_UNSUPPORTED, "node with over 64 inputs/outputs");
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_inputs && !st; i++) {
    int v = node->inputs[i];
    if (v < 0) continue;
    if (host[v]) ins[i] = host[v];
    else if ((st = wrap_value(g, v, ptr[v], &owned[i])) == NULL) ins[i] = owned[i];
  }
  if (!st) st = kiln_run_ref_node(g, node, ins, outs);
  for (int i = 0; i < node->n_outputs && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    kiln_value_free(host[v]);
    host[v] = outs[i];
    outs[i] = NULL;
    ptr[v] = host[v]->kind == KILN_VALUE_TENSOR ? host[v]->tensor->data : NULL;
  }
  for (int i = 0; i < 64; i++) {
    kiln_value_free(outs[i]);
    kiln_value_free(owned[i]);
  }
  return st;
}

/* Hands the step's materialized outputs to the observer as values (views of
 * the buffers, valid during the call). */
static kiln_status_t observe_step(struct kiln_executable *x, const cpu_step *s, void **ptr, kiln_value **host,
                                  const kiln_step_observer *observe) {
  /* A contraction with an epilogue materializes the epilogue's node. */
  const kiln_node *node = s->epilogue_step >= 0 ? x->steps[s->epilogue_step].node : s->node;
  kiln_value *vals[64] = {0}, *owned[64] = {0};
  kiln_status_t st = NULL;
  for (int i = 0; i < node->n_outputs && i < 64 && !st; i++) {
    int v = node->outputs[i];
    if (v < 0) continue;
    if (host[v]) vals[i] = host[v];
    else if (ptr[v] && (st = wrap_value(x->g, v, ptr[v], &owned[i])) == NULL) vals[i] = owned[i];
  }
  if (!st) st = observe->after(observe->user, x->g, node, vals);
  for (int i = 0; i < 64; i++) kiln_value_free(owned[i]);
  return st;
}

kiln_status_t kiln_cpu_execute(kiln_device *dev, struct kiln_executable *x, kiln_value *const *inputs, int n_outputs,
                               kiln_value **outs, const kiln_step_observer *observe) {
  const kiln_graph *g = x->g;
  int nv = g->n_values;
  void **ptr = calloc((size_t)nv + 1, sizeof *ptr);
  kiln_value **host = calloc((size_t)nv + 1, sizeof *host);
  kiln_status_t st = (!ptr || !host) ? KILN_OOM() : NULL;
  for (int i = 0; i < nv && !st; i++) {
    if (x->kinds[i] == CPU_VALUE_CONSTANT) ptr[i] = g->values[i].constant->data;
    else if (x->kinds[i] == CPU_VALUE_BUFFER) ptr[i] = x->buffer[i];
  }
  for (int i = 0; i < nv && !st; i++)
    if (x->kinds[i] == CPU_VALUE_ALIAS) ptr[i] = x->buffer[x->alias_of[i]];
  for (int k = 0; k < g->n_inputs && !st; k++) {
    int id = g->inputs[k];
    if (!inputs[k]) continue; /* initializer default */
    st = kiln_value_share(inputs[k], &host[id]);
    if (!st && host[id]->kind == KILN_VALUE_TENSOR) ptr[id] = host[id]->tensor->data;
  }
  for (int i = 0; i < x->n_steps && !st; i++) {
    const cpu_step *s = &x->steps[i];
    if (observe && observe->before) observe->before(observe->user, g, s->node);
    switch (s->kind) {
      case CPU_STEP_KERNEL: {
        if (s->fused_into >= 0) break; /* ran as its contraction's epilogue */
        void *args[64];
        if (s->n_args > 64) {
          st = kiln_error(KILN_UNSUPPORTED, "kernel with over 64 arguments");
          break;
        }
        for (int a = 0; a < s->n_args; a++) args[a] = ptr[s->args[a]];
        s->fn(&x->rt, args);
        break;
      }
      case CPU_STEP_REF: st = run_ref_step(x, s, ptr, host); break;
      default: st = kiln_cpu_contract_run(x, s, ptr); break;
    }
    if (st) st = kiln_status_annotate(st, "node '%s' (%s)", s->node->name, s->node->op_type);
    if (!st && observe && observe->after && !(s->kind == CPU_STEP_KERNEL && s->fused_into >= 0))
      st = observe_step(x, s, ptr, host, observe);
  }
  for (int i = 0; i < n_outputs && !st; i++) {
    int id = g->outputs[i];
    if (host[id]) {
      st = kiln_value_share(host[id], &outs[i]);
    } else {
      const kiln_type *t = &g->values[id].type;
      kiln_tensor *ot;
      st = kiln_tensor_new_uninit(t->dtype, t->rank, t->dims, &ot);
      if (!st) {
        if (ot->numel) memcpy(ot->data, ptr[id], kiln_tensor_nbytes(ot));
        st = kiln_value_from_tensor(ot, &outs[i]);
      }
    }
    if (st)
      for (int k = 0; k < i; k++) {
        kiln_value_free(outs[k]);
        outs[k] = NULL;
      }
  }
  for (int i = 0; host && i < nv; i++) kiln_value_free(host[i]);
  free(host);
  free(ptr);
  return st;
}
