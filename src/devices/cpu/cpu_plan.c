/* The cpu device's plan hooks (see cpu_internal.h): kernels rendered as C
 * (contractions tensorized onto the runtime's SGEMM and conv routines),
 * each also in the interpreter's precompiled form (interp/interp.h), and
 * made ready in tiers: what the JIT cache holds is loaded at once, the
 * rest runs on the interpreter while one background thread compiles it
 * and swaps each kernel in when its batch is done (KILN_JIT picks
 * another mode: sync, off). Launches run a step at once on the thread
 * pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "base/cpu_features.h"
#include "codegen/fusion.h"
#include "codegen/jit.h"
#include "codegen/loopnest.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/interp/interp.h"
#include "passes/memory_plan.h"
#include "passes/passes.h"

/* ---- kernel generation ------------------------------------------------------- */

/* KILN_JIT: tiered (default), sync or off; no usable C compiler means off. */
static cpu_jit_mode jit_mode(void) {
  const char *env = getenv("KILN_JIT");
  cpu_jit_mode m = CPU_JIT_TIERED;
  if (env && !strcmp(env, "sync")) m = CPU_JIT_SYNC;
  if (env && !strcmp(env, "off")) m = CPU_JIT_OFF;
  if (m != CPU_JIT_OFF) {
    kiln_status_t st = kiln_jit_available();
    if (st) m = CPU_JIT_OFF;
    kiln_status_free(st);
  }
  return m;
}

/* One nest, two forms: the C source for the JIT (not without one) and the
 * interpreter's program (not when every kernel is compiled first). */
static kiln_status_t cpu_schedule(void *user, kiln_plan *p, int i) {
  cpu_exec *x = user;
  kiln_loop_nest nest = {0}, inest = {0};
  kiln_status_t st = kiln_fused_kernel_schedule_c(&p->steps[i].fk, false, &nest);
  if (!st && x->mode != CPU_JIT_OFF) st = kiln_fused_kernel_render_c(&p->steps[i].fk, &nest, &x->steps[i].source);
  if (!st && x->mode != CPU_JIT_SYNC) {
    /* The interpreter's nest makes GEMM calls of any size (a small
     * attention product interpreted is 10x its compiled loops): scheduled
     * again only for a nest that is a contraction at all. */
    const kiln_loop_nest *use = &nest;
    kiln_contraction_tiles t;
    if (!nest.gemm.ok && !nest.conv.ok && !p->steps[i].fk.flat &&
        (kiln_contraction_match(&nest, &t) || kiln_contraction_match_i32(&nest, &t))) {
      st = kiln_fused_kernel_schedule_c(&p->steps[i].fk, true, &inest);
      if (!st && inest.gemm.ok) use = &inest;
    }
    kiln_interp_rows rows;
    if (!st && kiln_cpu_rows_of(x->g, &p->steps[i], &rows))
      st = kiln_interp_rows_create(&rows, &x->steps[i].interp);
    else if (!st)
      st = kiln_interp_kernel_create(p->steps[i].fk.b, use, &x->steps[i].interp);
    if (!st && x->steps[i].interp && kiln_interp_kernel_is_movement(x->steps[i].interp))
      x->steps[i].moves = x->steps[i].interp;
    /* A kernel the interpreter cannot run waits for the compiler. */
    if (st && x->mode == CPU_JIT_TIERED && kiln_status_code_of(st) == KILN_UNSUPPORTED) {
      kiln_status_free(st);
      st = NULL;
    }
  }
  if (!st && x->mode == CPU_JIT_SYNC && !p->steps[i].fk.flat) {
    /* Compiled only, but a movement kernel may run as copies: its
     * interpreter form is made to find out (and dropped where not). */
    kiln_interp_kernel *k = NULL;
    kiln_status_t mst = kiln_interp_kernel_create(p->steps[i].fk.b, &nest, &k);
    if (!mst && kiln_interp_kernel_is_movement(k)) x->steps[i].moves = k;
    else kiln_interp_kernel_destroy(k);
    kiln_status_free(mst);
  }
  kiln_loop_nest_free(&nest);
  kiln_loop_nest_free(&inest);
  return st;
}

static kiln_op_class cpu_claim(void *user, const kiln_graph *g, const kiln_node *node, const char **why) {
  return kiln_lower_class(g, node, why);
}

static bool cpu_host_routine(void *user, const kiln_graph *g, const kiln_node *node) {
  (void)user;
  return kiln_cpu_host_routine_of(g, node);
}

/* ---- the plan hooks ----------------------------------------------------------- */

kiln_status_t kiln_cpu_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                  kiln_plan_target *out_target, void **out_state) {
  *out_state = NULL;
  cpu_exec *x = calloc(1, sizeof *x);
  if (!x) return KILN_OOM();
  x->g = g;
  x->mode = opts && opts->precompiled_only ? CPU_JIT_OFF : jit_mode();
  x->steps = calloc((size_t)g->n_nodes + 1, sizeof *x->steps);
  int threads = opts && opts->threads > 0 ? opts->threads : kiln_physical_cores();
  /* A body or run-time specialization runs on its parent's pool: it runs
   * inside the parent's run, on the same thread, never at the same time. */
  const cpu_exec *parent = opts ? opts->parent_state : NULL;
  kiln_status_t st = NULL;
  if (!x->steps) {
    st = KILN_OOM();
  } else if (parent && parent->pool) {
    x->pool = parent->pool;
    x->pool_borrowed = true;
    threads = kiln_threadpool_size(x->pool);
  } else {
    st = kiln_threadpool_create(threads, &x->pool);
  }
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
      .host_routine = cpu_host_routine,
      .specialize_at_run_time = true, /* its interpreter runs a specialization at once */
      .conv_transposed_output = true, /* kiln_rt_conv_args.y_cn */
      .schedule = cpu_schedule,
      .user = x,
  };
  *out_state = x;
  return NULL;
}

/* Sources and names of a batch of kernels to compile, and their steps. */
typedef struct cpu_batch {
  cpu_exec *x;
  int n;
  const char **sources; /* borrowed from the steps */
  char **names;         /* owned */
  int *step_of;
} cpu_batch;

static void batch_free(cpu_batch *b) {
  for (int j = 0; b->names && j < b->n; j++) free(b->names[j]);
  free(b->sources);
  free(b->names);
  free(b->step_of);
  free(b);
}

/* Sets each step's fn from its module. */
static kiln_status_t install(cpu_batch *b, kiln_jit_module **mods) {
  kiln_status_t st = NULL;
  for (int j = 0; j < b->n; j++) {
    cpu_step *s = &b->x->steps[b->step_of[j]];
    if (!mods[j]) continue;
    cpu_kernel_fn fn = (cpu_kernel_fn)kiln_jit_symbol(mods[j], "kiln_kernel");
    if (!fn) {
      if (!st) st = kiln_error(KILN_INTERNAL, "compiled kernel for node '%s' has no entry point", s->node->name);
      kiln_jit_module_release(mods[j]);
      continue;
    }
    s->module = mods[j];
    atomic_store_explicit(&s->fn, fn, memory_order_release);
    atomic_fetch_add(&b->x->kernels_jit, 1);
    if (s->interp) atomic_fetch_sub(&b->x->kernels_interp, 1);
  }
  return st;
}

static void *compile_in_background(void *arg) {
  cpu_batch *b = arg;
  /* The session's own threads come first: this thread and the compilers it
   * starts (they inherit it) run at a lower priority, and no more
   * compilers at once than the cores the session leaves idle (one at least). */
#ifdef __linux__
  (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
#endif
  int jobs = kiln_physical_cores() - b->x->rt.n_threads;
  kiln_jit_module **mods = calloc((size_t)b->n, sizeof *mods);
  kiln_status_t st = mods ? kiln_jit_compile_many(b->n, b->sources, (const char *const *)b->names, jobs < 1 ? 1 : jobs,
                                                  NULL, mods)
                          : KILN_OOM();
  if (!st) st = install(b, mods);
  /* The session keeps running on the interpreter; say why it does. */
  if (st) fprintf(stderr, "kiln: warning: cpu: background compile failed, kernels stay interpreted: %s\n",
                  kiln_status_message(st));
  kiln_status_free(st);
  free(mods);
  atomic_store(&b->x->compiled, true);
  batch_free(b);
  return NULL;
}

/* Starts the background compile of batch b (owned by the thread after). */
static kiln_status_t start_background(cpu_exec *x, cpu_batch *b) {
  if (pthread_create(&x->compiler, NULL, compile_in_background, b)) {
    batch_free(b);
    return kiln_error(KILN_INTERNAL, "cpu: cannot start the background compile thread");
  }
  x->compiling = true;
  return NULL;
}

/* Mirrors the plan's steps and makes every kernel ready: compiled now
 * (sync, or tiered where the cache has it), or interpreted now and
 * compiled in the background (tiered), or interpreted (off). */
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
    if (s->kind != CPU_STEP_KERNEL) continue;
    if (!s->source && !s->interp) return kiln_error(KILN_INTERNAL, "kernel for node '%s' was not rendered", ps->node->name);
    if (s->interp) atomic_fetch_add(&x->kernels_interp, 1);
    n_sources += s->source != NULL;
  }
  if (!n_sources) return NULL;
  cpu_batch *b = calloc(1, sizeof *b);
  kiln_jit_module **mods = calloc((size_t)n_sources, sizeof *mods);
  kiln_status_t st = b && mods ? NULL : KILN_OOM();
  if (!st) {
    b->x = x;
    b->sources = calloc((size_t)n_sources, sizeof *b->sources);
    b->names = calloc((size_t)n_sources, sizeof *b->names);
    b->step_of = calloc((size_t)n_sources, sizeof *b->step_of);
    if (!b->sources || !b->names || !b->step_of) st = KILN_OOM();
  }
  for (int i = 0; i < p->n_steps && !st; i++) {
    if (x->steps[i].kind != CPU_STEP_KERNEL || !x->steps[i].source) continue;
    b->sources[b->n] = x->steps[i].source;
    b->names[b->n] = kiln_strdup(p->steps[i].name);
    b->step_of[b->n] = i;
    if (!b->names[b->n++]) st = KILN_OOM();
  }
  /* Sync: compile everything now. Tiered: load what the cache has; the
   * rest compiles in the background unless some kernel has no
   * interpreter form (then now, as sync). */
  bool all_interp = true;
  for (int j = 0; b && j < b->n; j++) all_interp &= x->steps[b->step_of[j]].interp != NULL;
  if (!st && x->mode == CPU_JIT_TIERED && all_interp) {
    st = kiln_jit_lookup_many(b->n, b->sources, (const char *const *)b->names, NULL, mods);
    if (!st) st = install(b, mods);
    /* What is left: the misses, compiled by the background thread. */
    int left = 0;
    for (int j = 0; j < b->n && !st; j++) {
      if (mods[j]) {
        free(b->names[j]);
        continue;
      }
      b->sources[left] = b->sources[j];
      b->names[left] = b->names[j];
      b->step_of[left++] = b->step_of[j];
    }
    if (!st) b->n = left;
    if (!st && left && x->rt.n_threads >= kiln_physical_cores()) {
      x->pending = b; /* started by the first run's last kernel (launch_step) */
      b = NULL;
      for (int i = 0; i < p->n_steps; i++)
        if (x->steps[i].kind == CPU_STEP_KERNEL) x->after_step = i;
    } else if (!st && left) {
      st = start_background(x, b);
      b = NULL;
    }
  } else if (!st) {
    st = kiln_jit_compile_many(b->n, b->sources, (const char *const *)b->names, 0, NULL, mods);
    if (!st) st = install(b, mods);
  }
  free(mods);
  if (b) batch_free(b);
  return st;
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
  cpu_kernel_fn fn = atomic_load_explicit(&x->steps[i].fn, memory_order_acquire);
  if (s->moves && kiln_interp_kernel_run_moves(s->moves, &x->rt, args)) {
    /* ran as its copies */
  } else if (fn) {
    fn(&x->rt, args);
  } else if (s->interp) {
    kiln_interp_kernel_run(s->interp, &x->rt, args);
  } else {
    return kiln_error(KILN_INTERNAL, "cpu: kernel for node '%s' is neither compiled nor interpretable", s->node->name);
  }
  kiln_status_t st = x->rt_error;
  x->rt_error = NULL;
  if (x->pending && i == x->after_step) {
    cpu_batch *b = x->pending;
    x->pending = NULL;
    kiln_status_t bst = start_background(x, b);
    if (bst && !st) st = bst;
    else kiln_status_free(bst);
  }
  return st ? kiln_status_annotate(st, "kernel for node '%s'", s->node->name) : NULL;
}

void kiln_cpu_plan_end(kiln_device *dev, void *state, kiln_plan *p) {
  cpu_exec *x = state;
  if (!x) return;
  /* The background compile finishes first: it fills the cache for the
   * next session, and it writes into the steps (one never started, the
   * session having ended before a first run finished, runs now). */
  if (x->pending) {
    cpu_batch *b = x->pending;
    x->pending = NULL;
    kiln_status_free(start_background(x, b));
  }
  if (x->compiling) pthread_join(x->compiler, NULL);
  for (int i = 0; x->steps && i <= x->g->n_nodes; i++) {
    free(x->steps[i].source);
    if (x->steps[i].rt_state) x->steps[i].rt_state->destroy(x->steps[i].rt_state);
    kiln_jit_module_release(x->steps[i].module);
    if (x->steps[i].moves != x->steps[i].interp) kiln_interp_kernel_destroy(x->steps[i].moves);
    kiln_interp_kernel_destroy(x->steps[i].interp);
  }
  free(x->steps);
  kiln_cpu_release_packed(x);
  free(x->scratch);
  if (!x->pool_borrowed) kiln_threadpool_destroy(x->pool);
  kiln_status_free(x->rt_error);
  free(x);
}
