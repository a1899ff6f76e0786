/* The cpu device's plan hooks (see cpu_internal.h): kernels rendered as C
 * (contractions tensorized onto the runtime's SGEMM and conv routines) and
 * JIT-compiled in one batch, launch. */
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
  *out_target = (kiln_plan_target){
      .dev = dev,
      .host_memory = true,
      .alignment = 64,
      .size_rounding = 1,
      .claim = cpu_claim,
      .schedule = cpu_schedule,
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
    s->kind = ps->kind == KILN_STEP_KERNEL ? CPU_STEP_KERNEL : CPU_STEP_REF;
    s->node = ps->node;
    s->n_args = ps->n_args;
    s->args = ps->args;
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
      free(s->source);
      s->source = NULL;
    }
    free(sources);
    free(names);
    free(step_of);
    KILN_TRY(st);
  }
  return NULL;
}

kiln_status_t kiln_cpu_launch_step(kiln_device *dev, void *state, const kiln_plan *p, int i,
                                   const kiln_plan_bindings *bind) {
  cpu_exec *x = state;
  const cpu_step *s = &x->steps[i];
  if (s->kind != CPU_STEP_KERNEL) return kiln_error(KILN_INTERNAL, "cpu: step %d is not a kernel", i);
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
