/* kiln_diff — differential test: runs each model on a device (cpu) and on
 * the reference device with the same random inputs and compares every graph
 * output.
 *
 *   kiln_diff [--devices cpu,ref] [--seed S] [--threads N] [--rtol R] [--atol A]
 *             [--report-fallbacks] [--fail-on-fallback] [--allow-interpreted]
 *             [--timeout SECONDS] [--no-fork] [-v] MODEL.onnx...
 *
 * Inputs: f32/f64/f16/bf16 normal(0, 1); bool 0/1 at random; integers small
 * and non-negative (0..2). Dims the model leaves symbolic become 3. Each
 * model's inputs come from a generator seeded by (seed, model file name), so
 * a model's inputs do not depend on which other models run with it.
 *
 * Comparison: shapes and dtypes exact; floats |got - want| <= atol + rtol *
 * |want| with NaN == NaN and infinities equal when their signs are (f16
 * and bf16 outputs at least rtol 1e-2 / atol 1e-3 and 4e-2 / 1e-2: a few of
 * their ulps, as a device computes them in f32 between the casts and ref
 * rounds after every node, like ONNX Runtime's fp16 tests); integers
 * and bools exact. One line per model: PASS, or FAIL with the worst element
 * (output, flat and multi-dimensional index, both values, error, allowed).
 *
 * A compiling device whose session fell back to interpreting the whole graph
 * (cpu prepare said UNSUPPORTED) is a FAIL unless --allow-interpreted: it
 * would compare ref with ref. --report-fallbacks prints every node of the
 * graph the device compiled (after its optimization passes) that it does not
 * claim, with its `supports` reason; --fail-on-fallback also makes each
 * such node a failure (for models that should be covered entirely).
 * Control flow (If, Loop, Scan) runs on the host by design: not it but the
 * ref steps of its bodies' plans count (a body left to the interpreter
 * counts as one), and so do the nodes around it except scalar control
 * values (one bool or integer element: conditions, iteration arithmetic),
 * which the PASS line counts apart with the body plans.
 *
 * Each model runs in a forked child process, so a crash in generated code
 * (or a hang past --timeout) is reported as that model's FAIL and the
 * others still run; --no-fork keeps everything in one process (debuggers).
 *
 * Exit status: 0 when every model passed, 1 when any failed, 2 on usage
 * errors.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/lower.h"
#include "runtime/plan.h"
#include "runtime/plan_bodies.h"
#include "onnx/onnx.h"
#include "runtime/session.h"

#define MAX_IO 64

typedef struct options {
  const char *dev_a, *dev_b;
  uint64_t seed;
  int threads;
  double rtol, atol;
  bool verbose, report_fallbacks, fail_on_fallback, allow_interpreted;
  bool no_fork;
  int timeout; /* seconds per model (forked mode) */
} options;

/* ---- random numbers (splitmix64) -------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

static double rng_normal(rng *r) {
  double u1 = rng_uniform(r), u2 = rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* ---- inputs ------------------------------------------------------------------- */

static kiln_status_t random_input(const kiln_value_def *def, rng *r, kiln_value **out) {
  const kiln_type *t = &def->type;
  if (t->kind != KILN_TYPE_TENSOR)
    return kiln_error(KILN_UNSUPPORTED, "input '%s': only tensor inputs are supported", def->name);
  int rank = t->rank < 0 ? 1 : t->rank;
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = t->rank < 0 || t->dims[i] < 0 ? 3 : t->dims[i];
  kiln_dtype dt = t->dtype ? t->dtype : KILN_DTYPE_F32;
  kiln_tensor *x;
  KILN_TRY(kiln_tensor_new(dt, rank, dims, &x));
  for (int64_t i = 0; i < x->numel; i++) {
    if (dt == KILN_DTYPE_BOOL) ((uint8_t *)x->data)[i] = (uint8_t)(rng_next(r) & 1);
    else if (kiln_dtype_is_float(dt)) kiln_store_f64(x->data, dt, i, rng_normal(r));
    else if (kiln_dtype_is_int(dt)) kiln_store_i64(x->data, dt, i, (int64_t)(rng_next(r) % 3));
    else {
      kiln_tensor_release(x);
      return kiln_error(KILN_UNSUPPORTED, "input '%s': dtype %s", def->name, kiln_dtype_name(dt));
    }
  }
  return kiln_value_from_tensor(x, out);
}

/* ---- comparison ------------------------------------------------------------------ */

/* The allowed error at `want` for an output of dtype dt (see the header;
 * the half floors are tensor/dtype.h's, which kiln verify applies too). */
static double allowed_error(const options *o, kiln_dtype dt, double want) {
  double rtol = o->rtol, atol = o->atol;
  kiln_dtype_tolerance_floor(dt, &rtol, &atol);
  return atol + rtol * fabs(want);
}

typedef struct worst {
  bool found;
  double ratio; /* error / allowed error (inf for a NaN mismatch) */
  int output;
  int64_t flat;
  double got, want;
} worst;

static void index_str(const kiln_tensor *t, int64_t flat, char *buf, size_t n) {
  int64_t idx[KILN_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = t->dims[d] ? flat % t->dims[d] : 0;
    flat = t->dims[d] ? flat / t->dims[d] : 0;
  }
  size_t p = 0;
  p += (size_t)snprintf(buf + p, n - p, "[");
  for (int d = 0; d < t->rank && p < n; d++) p += (size_t)snprintf(buf + p, n - p, "%s%lld", d ? "," : "", (long long)idx[d]);
  if (p < n) snprintf(buf + p, n - p, "]");
}

/* Compares one output; a structural mismatch is returned as a message in
 * *msg (owned), element errors update *w. Returns true if all matched. */
static bool compare_output(const options *o, int k, const kiln_value *got, const kiln_value *want, worst *w,
                           char *msg, size_t msg_size) {
  if (got->kind != want->kind) {
    snprintf(msg, msg_size, "output %d: value kind %d, ref %d", k, (int)got->kind, (int)want->kind);
    return false;
  }
  if (got->kind != KILN_VALUE_TENSOR) {
    snprintf(msg, msg_size, "output %d: non-tensor outputs are not compared", k);
    return false;
  }
  const kiln_tensor *a = got->tensor, *b = want->tensor;
  char sa[128], sb[128];
  if (a->dtype != b->dtype || !kiln_shape_equal(a->rank, a->dims, b->rank, b->dims)) {
    snprintf(msg, msg_size, "output %d: got %s%s, ref %s%s", k, kiln_dtype_name(a->dtype),
             kiln_shape_str(a->rank, a->dims, sa, sizeof sa), kiln_dtype_name(b->dtype),
             kiln_shape_str(b->rank, b->dims, sb, sizeof sb));
    return false;
  }
  bool ok = true;
  bool is_float = kiln_dtype_is_float(a->dtype);
  if (a->dtype == KILN_DTYPE_STRING) { /* exactly, element by element */
    const char *const *sa_ = a->data, *const *sb_ = b->data;
    for (int64_t i = 0; i < a->numel; i++)
      if (strcmp(sa_[i] ? sa_[i] : "", sb_[i] ? sb_[i] : "")) {
        snprintf(msg, msg_size, "output %d at %lld: \"%s\" vs \"%s\"", k, (long long)i, sa_[i] ? sa_[i] : "",
                 sb_[i] ? sb_[i] : "");
        return false;
      }
    return true;
  }
  if (!is_float && !kiln_dtype_is_int(a->dtype) && a->dtype != KILN_DTYPE_BOOL) {
    snprintf(msg, msg_size, "output %d: dtype %s is not compared", k, kiln_dtype_name(a->dtype));
    return false;
  }
  for (int64_t i = 0; i < a->numel; i++) {
    double x, y, ratio;
    if (is_float) {
      x = kiln_load_f64(a->data, a->dtype, i);
      y = kiln_load_f64(b->data, b->dtype, i);
      if (isnan(x) || isnan(y)) ratio = isnan(x) && isnan(y) ? 0 : INFINITY;
      else if (isinf(x) || isinf(y)) ratio = x == y ? 0 : INFINITY;
      else ratio = fabs(x - y) / allowed_error(o, a->dtype, y);
    } else {
      int64_t xi = a->dtype == KILN_DTYPE_BOOL ? ((const uint8_t *)a->data)[i] : kiln_load_i64(a->data, a->dtype, i);
      int64_t yi = b->dtype == KILN_DTYPE_BOOL ? ((const uint8_t *)b->data)[i] : kiln_load_i64(b->data, b->dtype, i);
      x = (double)xi;
      y = (double)yi;
      ratio = xi == yi ? 0 : INFINITY;
    }
    if (ratio > 1.0) ok = false;
    if (!w->found || ratio > w->ratio) {
      *w = (worst){true, ratio, k, i, x, y};
    }
  }
  return ok;
}

/* ---- one model ------------------------------------------------------------------ */

typedef struct counts {
  int pass, fail, fallbacks;
} counts;

static kiln_status_t make_session(const kiln_model *m, const char *dev, int threads, kiln_session **out) {
  kiln_session_options so = kiln_session_options_default();
  so.device = dev;
  so.threads = threads;
  return kiln_session_create(m, &so, out);
}

static kiln_status_t run(kiln_session *s, const kiln_graph *g, int n_in, const char **names, kiln_value **ins,
                         kiln_value **outs) {
  return kiln_session_run_values(s, n_in, names, ins, g->n_outputs, outs);
}

static bool is_control_flow(const kiln_node *node) { return node->op && (node->op->flags & KILN_OP_CONTROL_FLOW); }

/* A node around control flow that maps single elements to single elements,
 * one of them bool or integer (a branch condition, a loop's iteration
 * arithmetic): the host computes it by design, next to the branch choice
 * and loop state. */
static bool scalar_control(const kiln_graph *g, const kiln_node *node) {
  bool integral = false;
  for (int i = 0; i < node->n_inputs + node->n_outputs; i++) {
    int v = i < node->n_inputs ? node->inputs[i] : node->outputs[i - node->n_inputs];
    if (v < 0) continue;
    const kiln_type *t = &g->values[v].type;
    if (t->kind != KILN_TYPE_TENSOR || kiln_type_numel(t) != 1) return false;
    integral |= t->dtype != KILN_DTYPE_F32;
  }
  return integral;
}

typedef struct fallback_count {
  const options *o;
  const char *name;
  int fallbacks, scalars, bodies;
} fallback_count;

static void count_node(fallback_count *fc, const kiln_graph *g, const kiln_node *node, bool around_control,
                       const char *reason, const char *where) {
  if (is_control_flow(node)) return; /* on the host by design; its bodies are counted */
  if (around_control && scalar_control(g, node)) {
    fc->scalars++;
    return;
  }
  fc->fallbacks++;
  if (fc->o->report_fallbacks || fc->o->fail_on_fallback)
    printf("FALLBACK %s: node '%s' (%s%s%s)%s: %s\n", fc->name, node->name, node->domain, node->domain[0] ? "." : "",
           node->op_type, where, reason ? reason : "(no reason given)");
}

/* Body plans: their ref steps, or the whole body when it is interpreted. */
static void count_body(void *user, int depth, const kiln_node *owner, const char *attr, const kiln_plan *plan,
                       const char *why) {
  fallback_count *fc = user;
  char where[200];
  snprintf(where, sizeof where, " in the %s of %s '%s' (depth %d)", attr, owner->op_type, owner->name, depth);
  fc->bodies++;
  if (!plan) {
    fc->fallbacks++;
    printf("FALLBACK %s: %s runs on the interpreter: %s\n", fc->name, where + 1, why ? why : "?");
    return;
  }
  for (int i = 0; i < plan->n_steps; i++) {
    const kiln_plan_step *s = &plan->steps[i];
    if (s->kind != KILN_STEP_HOST || s->routine || s->dynamic) continue; /* dynamic: visited as its own plans */
    const char *reason = NULL;
    plan->target.claim(plan->target.user, plan->g, s->node, &reason);
    count_node(fc, plan->g, s->node, true, reason, where);
  }
}

/* Nodes of the graph the device compiled that it does not claim, and those
 * of its control-flow bodies' plans. */
static int report_fallbacks(const options *o, const char *name, const kiln_session *s, int *scalars, int *bodies) {
  const kiln_graph *g = s->specialized;
  fallback_count fc = {o, name, 0, 0, 0};
  if (!g) return 0;
  bool has_control = false;
  for (int i = 0; i < g->n_nodes; i++) has_control |= is_control_flow(&g->nodes[i]);
  /* On a device with a plan, the plan says: its host steps on ref are the
   * fallbacks (not those on the device's routines, nor those specialized
   * to their shapes when they run, whose plans are visited below). */
  const kiln_plan *plan = s->exec ? kiln_plan_of(s->exec) : NULL;
  for (int i = 0; plan && i < plan->n_steps; i++) {
    const kiln_plan_step *st = &plan->steps[i];
    if (!kiln_plan_step_on_ref(plan, st)) continue;
    const char *reason = NULL;
    plan->target.claim(plan->target.user, plan->g, st->node, &reason);
    count_node(&fc, g, st->node, has_control, reason ? reason : "the plan keeps it on the host", "");
  }
  for (int i = 0; !plan && i < g->n_nodes; i++) {
    const kiln_node *node = &g->nodes[i];
    const char *reason = NULL;
    kiln_device *d = s->devices[0];
    if (d->vt->supports(d, g, node, &reason)) continue;
    count_node(&fc, g, node, has_control, reason, "");
  }
  if (s->exec) kiln_body_plans_visit(kiln_plan_bodies_of(s->exec), 0, count_body, &fc);
  *scalars = fc.scalars;
  *bodies = fc.bodies;
  return fc.fallbacks;
}

/* -v: the plan's steps (kernels, ref nodes), on devices
 * compiled through the shared plan. */
static void print_steps(const kiln_session *s) {
  if (!s->exec || !s->devices[0]->vt->plan_begin) return;
  const kiln_plan *p = kiln_plan_of(s->exec);
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *st = &p->steps[i];
    const char *kind = st->kind == KILN_STEP_KERNEL ? "kernel" : "ref";
    printf("  step %d: %s %s (node '%s', %d fused)", i, kind, st->name, st->node ? st->node->name : "?", st->n_fused);
    printf("\n");
  }
}

static void test_model(const options *o, const char *path, counts *c) {
  const char *name = base_name(path);
  kiln_model *m = NULL;
  kiln_session *sa = NULL, *sb = NULL;
  kiln_value *ins[MAX_IO] = {0}, *outa[MAX_IO] = {0}, *outb[MAX_IO] = {0}, *saved[MAX_IO] = {0};
  const char *names[MAX_IO];
  int n_in = 0;
  char msg[1024] = "";
  bool failed = false;
  kiln_status_t st = kiln_model_load_file(path, &m);
  if (!st && (m->ir->graph->n_inputs > MAX_IO || m->ir->graph->n_outputs > MAX_IO))
    st = kiln_error(KILN_UNSUPPORTED, "more than %d graph inputs or outputs", MAX_IO);
  if (st) {
    printf("FAIL %s: load: %s\n", name, kiln_status_message(st));
    goto done;
  }
  const kiln_graph *g = m->ir->graph;
  rng r = {o->seed ^ hash_str(name)};
  for (int k = 0; k < g->n_inputs && !st; k++) {
    const kiln_value_def *v = &g->values[g->inputs[k]];
    if (v->constant) continue;
    st = random_input(v, &r, &ins[n_in]);
    names[n_in++] = v->name;
  }
  /* Copies of the inputs: no device may write into the caller's tensors. */
  for (int k = 0; k < n_in && !st; k++) {
    kiln_tensor *copy;
    st = kiln_tensor_clone(ins[k]->tensor, &copy);
    if (!st) st = kiln_value_from_tensor(copy, &saved[k]);
  }
  if (st) {
    printf("FAIL %s: inputs: %s\n", name, kiln_status_message(st));
    goto done;
  }
  if ((st = make_session(m, o->dev_b, o->threads, &sb)) || (st = run(sb, g, n_in, names, ins, outb))) {
    printf("FAIL %s: %s: %s\n", name, o->dev_b, kiln_status_message(st));
    goto done;
  }
  if ((st = make_session(m, o->dev_a, o->threads, &sa)) || (st = run(sa, g, n_in, names, ins, outa))) {
    printf("FAIL %s: %s: %s\n", name, o->dev_a, kiln_status_message(st));
    goto done;
  }
  /* Run the compiled plan a second time: buffers are reused between runs. */
  kiln_value *again[MAX_IO] = {0};
  if ((st = run(sa, g, n_in, names, ins, again))) {
    printf("FAIL %s: %s (second run): %s\n", name, o->dev_a, kiln_status_message(st));
    for (int k = 0; k < MAX_IO; k++) kiln_value_free(again[k]);
    goto done;
  }
  worst w = {0};
  bool ok = true;
  for (int k = 0; k < g->n_outputs; k++) {
    worst w2 = {0};
    char m2[256] = "";
    if (ok && !compare_output(o, k, again[k], outa[k], &w2, m2, sizeof m2)) {
      snprintf(msg, sizeof msg, "second run differs from the first: output %d at %lld: %.9g vs %.9g %s", k,
               (long long)w2.flat, w2.got, w2.want, m2);
      ok = false;
    }
  }
  for (int k = 0; k < MAX_IO; k++) kiln_value_free(again[k]);
  for (int k = 0; k < n_in && ok; k++) {
    const kiln_tensor *a = ins[k]->tensor, *b = saved[k]->tensor;
    if (memcmp(a->data, b->data, kiln_tensor_nbytes(a))) {
      snprintf(msg, sizeof msg, "input '%s' was modified by a run", names[k]);
      ok = false;
    }
  }
  for (int k = 0; k < g->n_outputs && ok; k++) {
    if (!compare_output(o, k, outa[k], outb[k], &w, msg, sizeof msg)) ok = false;
    if (msg[0]) break;
  }
  kiln_device *dev = sa->devices[0];
  bool interpreted = dev->vt->plan_begin && !sa->exec;
  int n_scalars = 0, n_bodies = 0;
  int nfb = dev->vt->plan_begin ? report_fallbacks(o, name, sa, &n_scalars, &n_bodies) : 0;
  c->fallbacks += nfb;
  if (o->verbose) print_steps(sa);
  if (!ok) {
    failed = true;
    if (msg[0]) {
      printf("FAIL %s: %s\n", name, msg);
    } else {
      const kiln_tensor *t = outb[w.output]->tensor;
      char idx[256], shape[128];
      index_str(t, w.flat, idx, sizeof idx);
      printf("FAIL %s: output %d '%s' %s%s: worst at %lld %s: %s %.9g, %s %.9g (abs err %.3g, allowed %.3g)\n", name,
             w.output, g->values[g->outputs[w.output]].name, kiln_dtype_name(t->dtype),
             kiln_shape_str(t->rank, t->dims, shape, sizeof shape), (long long)w.flat, idx, o->dev_a, w.got, o->dev_b,
             w.want, fabs(w.got - w.want), allowed_error(o, t->dtype, w.want));
    }
  } else if (interpreted && !o->allow_interpreted) {
    failed = true;
    printf("FAIL %s: %s did not compile the graph (interpreted instead): %s\n", name, o->dev_a, sa->fallback_reason);
  } else if (nfb && o->fail_on_fallback) {
    failed = true;
    printf("FAIL %s: %d node(s) not claimed by %s\n", name, nfb, o->dev_a);
  } else {
    char extra[320] = "";
    if (interpreted) snprintf(extra, sizeof extra, ", interpreted: %s", sa->fallback_reason);
    else if (nfb) snprintf(extra, sizeof extra, ", %d node(s) on ref", nfb);
    if (n_bodies)
      snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
               ", %d body plan(s), %d scalar control node(s) on the host", n_bodies, n_scalars);
    printf("PASS %s (%d output(s), worst err/allowed %.3g%s)\n", name, g->n_outputs, w.found ? w.ratio : 0.0, extra);
  }
done:
  if (st) {
    failed = true;
    kiln_status_free(st);
  }
  if (failed) c->fail++;
  else c->pass++;
  fflush(stdout);
  for (int k = 0; k < MAX_IO; k++) {
    kiln_value_free(ins[k]);
    kiln_value_free(saved[k]);
    kiln_value_free(outa[k]);
    kiln_value_free(outb[k]);
  }
  kiln_session_destroy(sa);
  kiln_session_destroy(sb);
  kiln_model_destroy(m);
}

/* Runs test_model in a child process, so a crash or a hang in generated
 * code is one FAIL line and the other models still run. The child reports
 * its verdict and fallback count in its exit status. */
static void test_model_isolated(const options *o, const char *path, counts *c) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    test_model(o, path, c);
    return;
  }
  if (pid == 0) {
    counts cc = {0, 0, 0};
    if (o->timeout > 0) alarm((unsigned)o->timeout);
    test_model(o, path, &cc);
    fflush(stdout);
    _exit((cc.fail ? 1 : 0) | ((cc.fallbacks > 63 ? 63 : cc.fallbacks) << 1));
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
  }
  if (WIFEXITED(ws)) {
    int code = WEXITSTATUS(ws);
    if (code & 1) c->fail++;
    else c->pass++;
    c->fallbacks += code >> 1;
  } else {
    int sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
    printf("FAIL %s: %s (signal %d)\n", base_name(path),
           sig == SIGALRM ? "timed out" : "crashed", sig);
    if (sig == SIGALRM) printf("  (no result within %d s; --timeout changes the limit)\n", o->timeout);
    fflush(stdout);
    c->fail++;
  }
}

/* ---- main ---------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: kiln_diff [--devices A,B] [--seed S] [--threads N] [--rtol R] [--atol A]\n"
          "                 [--report-fallbacks] [--fail-on-fallback] [--allow-interpreted]\n"
          "                 [--timeout SECONDS] [--no-fork] [-v] MODEL.onnx...\n"
          "Runs each model on device A (default cpu) and device B (default ref) with the same\n"
          "random inputs and compares every graph output (rtol 1e-3, atol 1e-4 by default).\n"
          "Each model runs in a child process (a crash or a hang past --timeout, default 300 s,\n"
          "is a FAIL); --no-fork runs them in this process (for a debugger).\n");
}

/* Whether both devices exist. With forking, asked in a child: a driver
 * initialized before fork() is unusable in the children (PoCL's worker
 * threads do not survive it, and a child using it hangs). */
static bool devices_available(const options *o) {
  if (o->no_fork) return kiln_device_get(o->dev_a) && kiln_device_get(o->dev_b);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(kiln_device_get(o->dev_a) && kiln_device_get(o->dev_b) ? 0 : 1);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
  options o = {"cpu", "ref", 1, 0, 1e-3, 1e-4, false, false, false, false, false, 300};
  static char devs[256];
  const char **models = calloc((size_t)argc + 1, sizeof *models);
  int n_models = 0;
  bool only_files = false;
  if (!models) return 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_files || a[0] != '-') {
      models[n_models++] = a;
      continue;
    }
    bool has_val = i + 1 < argc;
    if (!strcmp(a, "--devices") && has_val) {
      snprintf(devs, sizeof devs, "%s", argv[++i]);
      char *comma = strchr(devs, ',');
      if (!comma || !comma[1] || comma == devs) {
        fprintf(stderr, "kiln_diff: --devices wants A,B (e.g. cpu,ref)\n");
        return 2;
      }
      *comma = 0;
      o.dev_a = devs;
      o.dev_b = comma + 1;
    } else if (!strcmp(a, "--seed") && has_val) {
      o.seed = strtoull(argv[++i], NULL, 0);
    } else if (!strcmp(a, "--threads") && has_val) {
      o.threads = atoi(argv[++i]);
    } else if (!strcmp(a, "--rtol") && has_val) {
      o.rtol = atof(argv[++i]);
    } else if (!strcmp(a, "--atol") && has_val) {
      o.atol = atof(argv[++i]);
    } else if (!strcmp(a, "--timeout") && has_val) {
      o.timeout = atoi(argv[++i]);
    } else if (!strcmp(a, "--no-fork")) {
      o.no_fork = true;
    } else if (!strcmp(a, "--report-fallbacks")) {
      o.report_fallbacks = true;
    } else if (!strcmp(a, "--fail-on-fallback")) {
      o.fail_on_fallback = true;
    } else if (!strcmp(a, "--allow-interpreted")) {
      o.allow_interpreted = true;
    } else if (!strcmp(a, "-v")) {
      o.verbose = true;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--")) {
      only_files = true;
    } else {
      fprintf(stderr, "kiln_diff: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (n_models == 0) {
    usage(stderr);
    return 2;
  }
  if (!devices_available(&o)) {
    fprintf(stderr, "kiln_diff: device '%s' or '%s' is not available\n", o.dev_a, o.dev_b);
    return 2;
  }
  counts c = {0, 0, 0};
  for (int i = 0; i < n_models; i++) {
    if (o.no_fork) test_model(&o, models[i], &c);
    else test_model_isolated(&o, models[i], &c);
  }
  free(models);
  printf("kiln_diff: %d model(s): %d passed, %d failed; %d node(s) not claimed by %s (seed %llu)\n", c.pass + c.fail,
         c.pass, c.fail, c.fallbacks, o.dev_a, (unsigned long long)o.seed);
  return c.fail ? 1 : 0;
}
