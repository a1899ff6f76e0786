/* The cpu device's plan hooks (see cpu_internal.h): kernels rendered as C
 * and JIT-compiled, SGEMM/conv epilogues, contractions, launch. */
#include <stdio.h>

#include "base/cpu_features.h"
#include "codegen/fusion.h"
#include "codegen/jit.h"
#include "codegen/loopnest.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"

/* ---- kernel generation ------------------------------------------------------- */

static kiln_status_t cpu_schedule(void *user, kiln_plan *p, int i) {
  cpu_exec *x = user;
  return kiln_fused_kernel_c_source(&p->steps[i].fk, &x->steps[i].source);
}

static kiln_op_class cpu_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  return kiln_lower_class(g, node, why);
}

static cpu_step_kind contraction_kind(const kiln_node *node) {
  switch (kiln_node_op_id(node)) {
    case KILN_OP_MatMul: return CPU_STEP_MATMUL;
    case KILN_OP_Gemm: return CPU_STEP_GEMM;
    case KILN_OP_kiln_FusedAttention: return CPU_STEP_ATTENTION;
    case KILN_OP_MaxPool: return CPU_STEP_MAXPOOL;
    default: return CPU_STEP_CONV;
  }
}

/* ---- epilogues ---------------------------------------------------------------- */

/* A flat elementwise kernel whose operand is a contraction's result read by
 * nobody else runs inside the contraction, on each finished tile: the
 * contraction writes straight into the kernel's output buffer and the raw
 * result never exists as a separate tensor (kiln_plan_fuse_epilogue). */

/* A broadcast bias Add in KERNEL step ki over a contraction's result: an
 * f32 Add(raw, b) (either order) of the group where raw, read only there,
 * is the output of a MatMul whose right-hand side has rank >= 2 or of a
 * Gemm without C, and b is an f32 constant of N elements with every dim 1
 * but the last (N = raw's last dim); the Add's output has raw's shape.
 * Returns b's value id (*add_node: the Add, *raw: the result), or -1. */
static int find_col_bias(const kiln_plan *p, int ki, int *add_node, int *raw) {
  const kiln_graph *g = p->g;
  int root = (int)(p->steps[ki].node - g->nodes);
  for (int n = 0; n <= root; n++) {
    if (p->fusion.group_of[n] != root) continue;
    const kiln_node *an = &g->nodes[n];
    if (!kiln_node_is(an, KILN_OP_Add) || an->n_inputs != 2 || an->n_outputs != 1) continue;
    if (an->opset < 7) continue; /* legacy broadcast (axis attribute): not numpy's */
    for (int i = 0; i < 2; i++) {
      int v = an->inputs[i], b = an->inputs[1 - i];
      if (v < 0 || b < 0 || v == b) continue;
      int ci = kiln_plan_producer(p, v);
      if (ci < 0 || p->steps[ci].kind != KILN_STEP_CONTRACTION) continue;
      const kiln_node *cn = p->steps[ci].node;
      if (cn->outputs[0] != v) continue;
      cpu_step_kind kind = contraction_kind(cn);
      if (kind == CPU_STEP_MATMUL) {
        if (cn->n_inputs < 2 || cn->inputs[1] < 0 || g->values[cn->inputs[1]].type.rank < 2) continue;
      } else if (kind == CPU_STEP_GEMM) {
        if (cn->n_inputs > 2 && cn->inputs[2] >= 0) continue;
      } else {
        continue;
      }
      if (p->fusion.uses[v] != 1 || g->values[v].is_graph_output) continue;
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
static kiln_status_t fuse_col_bias(cpu_exec *x, kiln_plan *p, int ki) {
  const kiln_graph *g = p->g;
  kiln_plan_step *k = &p->steps[ki];
  int an = -1, raw = -1;
  int bias = find_col_bias(p, ki, &an, &raw);
  if (bias < 0) return NULL;
  int ci = kiln_plan_producer(p, raw);
  kiln_plan_step *c = &p->steps[ci];
  if (c->epilogue_step >= 0 || ci >= ki) return NULL;
  kiln_node *nodes = malloc(((size_t)g->n_nodes + 1) * sizeof *nodes);
  if (!nodes) return NULL; /* an optimization: skip it */
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
  kiln_fused_kernel t = {0};
  char *source = NULL;
  kiln_status_t st = kiln_fusion_build(&gc, &p->fusion, (int)(k->node - g->nodes), true, &t);
  if (!st) st = kiln_fused_kernel_c_source(&t, &source);
  free(nodes);
  if (st) {
    kiln_status_free(st);
    kiln_fused_kernel_free(&t);
    return NULL;
  }
  bool ok = t.flat && t.elementwise_only && source && strstr(source, "kiln_epilogue(") && t.args[0] == k->args[0];
  int a_raw = -1;
  for (int b = 1; b < t.n_args && ok; b++) {
    if (t.args[b] == raw) a_raw = b;
    else ok = kiln_plan_producer(p, t.args[b]) < ci;
  }
  if (!ok || a_raw < 0) {
    kiln_fused_kernel_free(&t);
    free(source);
    return NULL;
  }
  /* Commit: the step's kernel becomes the rebuilt one. */
  free(x->steps[ki].source);
  x->steps[ki].source = source;
  free(k->args);
  k->args = t.args;
  k->n_args = t.n_args;
  t.args = NULL;
  kiln_fused_kernel_free(&t);
  k->flat = true;
  KILN_TRY(kiln_plan_fuse_epilogue(p, ci, ki, a_raw));
  cpu_step *cs = &x->steps[ci];
  cs->has_col_bias = true;
  cs->col_bias_value = bias;
  cs->epi_identity = k->n_fused == 1 && k->n_args == 2;
  return NULL;
}

static kiln_status_t cpu_fuse_epilogues(void *user, kiln_plan *p) {
  cpu_exec *x = user;
  for (int ki = 0; ki < p->n_steps; ki++) {
    const kiln_plan_step *k = &p->steps[ki];
    if (k->kind != KILN_STEP_KERNEL || !k->elementwise_only) continue;
    if (!k->flat) {
      KILN_TRY(fuse_col_bias(x, p, ki));
      continue;
    }
    if (!x->steps[ki].source || !strstr(x->steps[ki].source, "kiln_epilogue(")) continue;
    int cs[8], as[8];
    int n = kiln_plan_epilogue_candidates(p, ki, cs, as, 8);
    for (int j = 0; j < n; j++) {
      cpu_step_kind kind = contraction_kind(p->steps[cs[j]].node);
      if (kind != CPU_STEP_MATMUL && kind != CPU_STEP_GEMM && kind != CPU_STEP_CONV) continue;
      KILN_TRY(kiln_plan_fuse_epilogue(p, cs[j], ki, as[j]));
      break;
    }
  }
  return NULL;
}

/* ---- the plan hooks ----------------------------------------------------------- */

kiln_status_t kiln_cpu_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                  kiln_plan_target *out_target, void **out_state) {
  *out_state = NULL;
  cpu_exec *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->g = g;
  x->steps = calloc((size_t)g->n_nodes + 1, sizeof *x->steps);
  int threads = opts && opts->threads > 0 ? opts->threads : kiln_physical_cores();
  kiln_status_t st = x->steps ? kiln_threadpool_create(threads, &x->pool) : KILN_OOM();
  if (st) {
    kiln_cpu_plan_end(dev, x, NULL);
    return st;
  }
  x->rt = kiln_cpu_rt(x->pool, threads);
  /* KILN_CPU_CONTRACTIONS=te: contractions as generated kernels of their
   * compute definitions instead of SGEMM/conv (slow; checks those
   * definitions against ref). */
  const char *cc = getenv("KILN_CPU_CONTRACTIONS");
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = true,
      .alignment = 64,
      .size_rounding = 1,
      .contractions_as_kernels = cc && !strcmp(cc, "te"),
      .claim = cpu_claim,
      .schedule = cpu_schedule,
      .fuse_epilogues = cpu_fuse_epilogues,
      .user = x,
  };
  *out_state = x;
  return NULL;
}

/* Mirrors the plan's steps, compiles every kernel in one batch (parallel,
 * cached) and prepares the contractions. */
kiln_status_t kiln_cpu_plan_compile(kiln_device *dev, void *state, kiln_plan *p, const kiln_plan_bindings *bind) {
  cpu_exec *x = state;
  x->n_steps = p->n_steps;
  int n_sources = 0;
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *ps = &p->steps[i];
    cpu_step *s = &x->steps[i];
    s->kind = ps->kind == KILN_STEP_KERNEL ? CPU_STEP_KERNEL
              : ps->kind == KILN_STEP_HOST ? CPU_STEP_REF
                                           : contraction_kind(ps->node);
    s->node = ps->node;
    s->n_fused = ps->n_fused;
    s->n_args = ps->n_args;
    s->args = ps->args;
    s->out_value = ps->out_value;
    s->epilogue_step = ps->epilogue_step;
    s->fused_into = ps->fused_into;
    s->flat = ps->flat;
    s->elementwise_only = ps->elementwise_only;
    n_sources += s->kind == CPU_STEP_KERNEL;
  }
  if (n_sources) {
    const char **sources = calloc((size_t)n_sources, sizeof *sources), **names = calloc((size_t)n_sources, sizeof *names);
    int *step_of = calloc((size_t)n_sources, sizeof *step_of);
    x->modules = calloc((size_t)n_sources, sizeof *x->modules);
    kiln_status_t st = (!sources || !names || !step_of || !x->modules) ? KILN_OOM() : NULL;
    int n = 0;
    for (int i = 0; i < p->n_steps && !st; i++) {
      if (x->steps[i].kind != CPU_STEP_KERNEL) continue;
      if (!x->steps[i].source) st = kiln_error(KILN_INTERNAL, "kernel for node '%s' was not rendered", p->steps[i].node->name);
      sources[n] = x->steps[i].source;
      names[n] = p->steps[i].name;
      step_of[n++] = i;
    }
    if (!st) st = kiln_jit_compile_many(n, sources, names, 0, NULL, (kiln_jit_module **)x->modules);
    if (!st) x->n_modules = n;
    for (int j = 0; j < n && !st; j++) {
      cpu_step *s = &x->steps[step_of[j]];
      kiln_jit_module *m = (kiln_jit_module *)x->modules[j];
      s->fn = (cpu_kernel_fn)kiln_jit_symbol(m, "kiln_kernel");
      if (!s->fn) st = kiln_error(KILN_INTERNAL, "compiled kernel for node '%s' has no entry point", s->node->name);
      if (!st && s->fused_into >= 0) {
        s->epilogue = (kiln_rt_epilogue_fn)kiln_jit_symbol(m, "kiln_epilogue");
        if (!s->epilogue) st = kiln_error(KILN_INTERNAL, "kernel for node '%s' has no epilogue entry point", s->node->name);
      }
      free(s->source);
      s->source = NULL;
    }
    free(sources);
    free(names);
    free(step_of);
    KILN_TRY(st);
  }
  for (int i = 0; i < x->n_steps; i++)
    if (x->steps[i].kind != CPU_STEP_KERNEL && x->steps[i].kind != CPU_STEP_REF)
      KILN_TRY(kiln_cpu_contract_prepare(x, &x->steps[i]));
  if (x->scratch_bytes) {
    x->scratch = aligned_alloc(64, (x->scratch_bytes + 63) & ~(size_t)63);
    if (!x->scratch)
      return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for the im2col buffer (%zu bytes)", x->scratch_bytes);
  }
  return NULL;
}

kiln_status_t kiln_cpu_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i,
                                   const kiln_plan_bindings *bind) {
  cpu_exec *x = state;
  const cpu_step *s = &x->steps[i];
  if (s->kind != CPU_STEP_KERNEL) return kiln_cpu_contract_run(x, s, bind->host);
  void *args[65];
  if (s->n_args > 64) return kiln_error(KILN_UNSUPPORTED, "kernel with over 64 arguments");
  for (int a = 0; a < s->n_args; a++) args[a] = bind->host[s->args[a]];
  args[s->n_args] = &x->steps[i].rt_state; /* the launch's state slot (codegen/kiln_rt.h) */
  s->fn(&x->rt, args);
  kiln_status_t st = x->rt_error;
  x->rt_error = NULL;
  return st ? kiln_status_annotate(st, "kernel for node '%s'", s->node->name) : NULL;
}

void kiln_cpu_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  cpu_exec *x = state;
  if (!x) return;
  for (int i = 0; x->steps && i <= x->g->n_nodes; i++) {
    free(x->steps[i].source);
    free(x->steps[i].packed_b);
    free(x->steps[i].work);
    if (x->steps[i].rt_state) x->steps[i].rt_state->destroy(x->steps[i].rt_state);
  }
  free(x->steps);
  for (int i = 0; i < x->n_modules; i++) kiln_jit_module_release((kiln_jit_module *)x->modules[i]);
  free(x->modules);
  free(x->scratch);
  kiln_threadpool_destroy(x->pool);
  kiln_status_free(x->rt_error);
  free(x);
}
