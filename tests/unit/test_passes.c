/* Graph optimization passes (src/passes/passes_opt.h): each pass's effect
 * on small graphs built here (node counts, op types, names kept) and, for
 * every rewrite, that the graph's outputs are unchanged: the graph runs on
 * the executor with random inputs before and after, outputs compared
 * within 1e-5. Then PyTorch-exported models (a 2-layer transformer encoder
 * with GELU and LayerNorm at opset 14, a conv + BatchNorm net) through
 * kiln_optimize_graph on the session's specialized graph: the decomposed
 * patterns are found and the outputs stay the same. Without python3 +
 * torch those print SKIP (and fail when KILN_REQUIRE_PYTHON=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/fusion.h"
#include "ops/op.h"
#include "passes/fold_cache.h"
#include "passes/passes_opt.h"
#include "runtime/executor.h"
#include "runtime/session.h"

static int failures;

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      failures++;                                      \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                    \
      fprintf(stderr, "\n");                           \
    }                                                  \
  } while (0)

#define MUST(expr)                                                               \
  do {                                                                           \
    kiln_status_t st_ = (expr);                                                  \
    if (st_) {                                                                   \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, kiln_status_message(st_)); \
      kiln_status_free(st_);                                                     \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* ---- building graphs ------------------------------------------------------- */

static int val(kiln_graph *g, const char *name) {
  int id;
  MUST(kiln_graph_intern_value(g, name, &id));
  return id;
}

static int input(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
  int id = val(g, name);
  kiln_type_init_tensor(&g->values[id].type, dt, rank, dims);
  MUST(kiln_graph_add_input(g, id));
  return id;
}

static void output(kiln_graph *g, const char *name) { MUST(kiln_graph_add_output(g, val(g, name))); }

static int constant(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims, const double *v) {
  kiln_tensor *t;
  MUST(kiln_tensor_new(dt, rank, dims, &t));
  for (int64_t i = 0; v && i < t->numel; i++) kiln_store_f64(t->data, dt, i, v[i]);
  int id = val(g, name);
  g->values[id].constant = t;
  kiln_type_init_tensor(&g->values[id].type, dt, rank, dims);
  return id;
}

static int scalar(kiln_graph *g, const char *name, double v) { return constant(g, name, KILN_DTYPE_F32, 0, NULL, &v); }

static int ints(kiln_graph *g, const char *name, int n, const int64_t *v) {
  int64_t d = n;
  double tmp[KILN_MAX_RANK * 2];
  for (int i = 0; i < n; i++) tmp[i] = (double)v[i];
  return constant(g, name, KILN_DTYPE_I64, 1, &d, tmp);
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double uniform(double lo, double hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static int random_const(kiln_graph *g, const char *name, int rank, const int64_t *dims, double lo, double hi) {
  int id = constant(g, name, KILN_DTYPE_F32, rank, dims, NULL);
  kiln_tensor *t = g->values[id].constant;
  for (int64_t i = 0; i < t->numel; i++) kiln_store_f64(t->data, t->dtype, i, uniform(lo, hi));
  return id;
}

/* Adds a node; "a,b" / "y" are comma-separated value names ("" = absent). Returns its index. */
static int node(kiln_graph *g, const char *op, int opset, const char *ins, const char *outs) {
  int in[16], out[16], ni = 0, no = 0;
  const char *lists[2] = {ins, outs};
  for (int l = 0; l < 2; l++) {
    const char *s = lists[l];
    while (s && *s) {
      const char *e = strchr(s, ',');
      size_t len = e ? (size_t)(e - s) : strlen(s);
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)len, s);
      int id = len ? val(g, name) : -1;
      if (l == 0) in[ni++] = id;
      else out[no++] = id;
      s = e ? e + 1 : NULL;
    }
  }
  char nm[64];
  snprintf(nm, sizeof nm, "%s_%d", op, g->n_nodes);
  int idx;
  MUST(kiln_graph_add_node(g, nm, op, "", ni, in, no, out, &idx));
  g->nodes[idx].opset = opset;
  return idx;
}

static void attr_i(kiln_graph *g, int n, const char *name, int64_t v) { MUST(kiln_opt_set_attr_int(&g->nodes[n], name, v)); }
static void attr_f(kiln_graph *g, int n, const char *name, float v) { MUST(kiln_opt_set_attr_float(&g->nodes[n], name, v)); }
static void attr_ints(kiln_graph *g, int n, const char *name, int count, const int64_t *v) {
  MUST(kiln_opt_set_attr_ints(&g->nodes[n], name, count, v));
}

static kiln_graph *new_graph(const char *name) {
  kiln_graph *g;
  MUST(kiln_graph_new(name, NULL, &g));
  return g;
}

/* Resolves ops, sorts and infers types (as a session's specialized graph has them). */
static void prepare(kiln_graph *g) {
  MUST(kiln_pass_resolve_ops(g));
  MUST(kiln_graph_toposort(g));
  MUST(kiln_pass_infer_types(g));
  MUST(kiln_graph_verify(g));
}

static int count_op(const kiln_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op_type, op)) n++;
  return n;
}

static const kiln_node *find_op(const kiln_graph *g, const char *op) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op_type, op)) return &g->nodes[i];
  return NULL;
}

static int n_constants(const kiln_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_values; i++) n += g->values[i].constant && !g->values[i].is_graph_input;
  return n;
}

/* ---- running and comparing ---------------------------------------------------- */

#define MAX_IO 16

typedef struct run_io {
  int n_in, n_out;
  kiln_value *in[MAX_IO];
  kiln_value *out[MAX_IO];
} run_io;

/* Random inputs for every graph input of g (types must be fully known). */
static void random_inputs(const kiln_graph *g, run_io *io) {
  io->n_in = g->n_inputs;
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_type *t = &g->values[g->inputs[i]].type;
    kiln_tensor *x;
    MUST(kiln_tensor_new(t->dtype, t->rank, t->dims, &x));
    for (int64_t k = 0; k < x->numel; k++) {
      double v = kiln_dtype_is_float(t->dtype) ? uniform(-2, 2) : t->dtype == KILN_DTYPE_BOOL ? uniform(0, 1) < 0.5
                                                                                               : floor(uniform(0, 3));
      kiln_store_f64(x->data, t->dtype, k, v);
    }
    MUST(kiln_value_from_tensor(x, &io->in[i]));
  }
}

static kiln_status_t run_graph(const kiln_graph *g, run_io *io) {
  io->n_out = g->n_outputs;
  return kiln_execute_graph(g, NULL, io->n_in, io->in, g->n_outputs, io->out, NULL);
}

static void free_io(run_io *io, bool inputs) {
  for (int i = 0; i < MAX_IO; i++) {
    if (inputs) {
      kiln_value_free(io->in[i]);
      io->in[i] = NULL;
    }
    kiln_value_free(io->out[i]);
    io->out[i] = NULL;
  }
}

/* Outputs equal within 1e-5 (absolute and relative). */
static bool same_outputs(const char *what, const run_io *a, const run_io *b) {
  bool ok = a->n_out == b->n_out;
  CHECK(ok, "%s: %d outputs, then %d", what, a->n_out, b->n_out);
  for (int i = 0; ok && i < a->n_out; i++) {
    const kiln_tensor *x = a->out[i]->tensor, *y = b->out[i]->tensor;
    ok = a->out[i]->kind == KILN_VALUE_TENSOR && b->out[i]->kind == KILN_VALUE_TENSOR && x->dtype == y->dtype &&
         kiln_shape_equal(x->rank, x->dims, y->rank, y->dims);
    CHECK(ok, "%s: output %d changed type or shape", what, i);
    for (int64_t k = 0; ok && k < x->numel; k++) {
      double u = kiln_load_f64(x->data, x->dtype, k), v = kiln_load_f64(y->data, y->dtype, k);
      if (isnan(u) && isnan(v)) continue;
      if (isinf(u) || isinf(v)) {
        ok = u == v;
      } else {
        ok = fabs(u - v) <= 1e-5 + 1e-5 * fabs(u);
      }
      CHECK(ok, "%s: output %d [%lld]: %.9g before, %.9g after", what, i, (long long)k, u, v);
    }
  }
  return ok;
}

typedef struct pass_ref {
  const char *name;
  kiln_pass_fn fn;
} pass_ref;

/* Runs g, applies the passes (NULL name: the whole pipeline), runs again, compares. */
static void check_passes(const char *what, kiln_graph *g, const pass_ref *passes, int n_passes) {
  run_io before = {0}, after = {0};
  random_inputs(g, &before);
  MUST(run_graph(g, &before));
  for (int p = 0; p < n_passes; p++) {
    kiln_status_t st = passes[p].fn ? kiln_run_pass(g, passes[p].name, passes[p].fn) : kiln_optimize_graph(g, 1);
    CHECK(!st, "%s: pass %s: %s", what, passes[p].name ? passes[p].name : "(all)", kiln_status_message(st));
    kiln_status_free(st);
  }
  after.n_in = before.n_in;
  for (int i = 0; i < before.n_in; i++) MUST(kiln_value_share(before.in[i], &after.in[i]));
  kiln_status_t st = run_graph(g, &after);
  CHECK(!st, "%s: running the optimized graph: %s", what, kiln_status_message(st));
  if (!st) same_outputs(what, &before, &after);
  kiln_status_free(st);
  free_io(&before, true);
  free_io(&after, true);
}

static const pass_ref P_FOLD = {"fold-constants", kiln_pass_fold_constants};
static const pass_ref P_DCE = {"dce", kiln_pass_dce};
static const pass_ref P_CSE = {"cse", kiln_pass_cse};
static const pass_ref P_SIMPLIFY = {"simplify", kiln_pass_simplify};
static const pass_ref P_BN = {"fold-batchnorm", kiln_pass_fold_batchnorm};
static const pass_ref P_PATTERNS = {"patterns", kiln_pass_patterns};
static const pass_ref P_ALL = {NULL, NULL};

#define PASSES(...) ((const pass_ref[]){__VA_ARGS__}), (int)(sizeof((const pass_ref[]){__VA_ARGS__}) / sizeof(pass_ref))

/* ---- fold-constants ------------------------------------------------------------ */

static void test_fold_shape_chain(void) {
  kiln_graph *g = new_graph("shape_chain");
  int64_t xd[3] = {2, 3, 4}, zero = 0, minus1 = -1, axes0 = 0;
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  ints(g, "idx0", 1, &zero);
  ints(g, "m1", 1, &minus1);
  ints(g, "ax0", 1, &axes0);
  node(g, "Shape", 13, "x", "s");
  int ga = node(g, "Gather", 13, "s,idx0", "b");
  attr_i(g, ga, "axis", 0);
  node(g, "Concat", 13, "b,m1", "shape");
  attr_i(g, g->n_nodes - 1, "axis", 0);
  node(g, "Reshape", 14, "x,shape", "r");
  /* A constant subexpression: (c1 + c2) folds, the Mul does not. */
  int64_t cd[1] = {4};
  random_const(g, "c1", 1, cd, -1, 1);
  random_const(g, "c2", 1, cd, -1, 1);
  node(g, "Add", 14, "c1,c2", "c12");
  node(g, "Mul", 14, "x,c12", "y");
  node(g, "Relu", 14, "r", "z");
  output(g, "y");
  output(g, "z");
  prepare(g);
  check_passes("fold shape chain", g, PASSES(P_FOLD, P_DCE));
  CHECK(g->n_nodes == 3, "shape chain: %d nodes left, want Reshape, Mul, Relu", g->n_nodes);
  CHECK(!count_op(g, "Shape") && !count_op(g, "Gather") && !count_op(g, "Concat") && !count_op(g, "Add"),
        "shape chain: shape computation and constant Add should be folded");
  const kiln_node *r = find_op(g, "Reshape");
  CHECK(r && kiln_opt_const(g, r->inputs[1]), "shape chain: Reshape's shape should be a constant");
  /* Folded to [2, 12]. */
  if (r && kiln_opt_const(g, r->inputs[1])) {
    const kiln_tensor *s = kiln_opt_const(g, r->inputs[1]);
    CHECK(s->numel == 2 && ((int64_t *)s->data)[0] == 2 && ((int64_t *)s->data)[1] == -1, "shape chain: shape %lld",
          (long long)((int64_t *)s->data)[0]);
  }
  kiln_graph_free(g);
}

static void test_fold_limits(void) {
  kiln_graph *g = new_graph("fold_limits");
  int64_t xd[2] = {2, 3};
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  random_const(g, "c", 2, xd, -1, 1);
  /* Random ops with constant inputs stay random; Shape of their output is known. */
  node(g, "RandomUniformLike", 1, "c", "rnd");
  node(g, "Shape", 13, "rnd", "rs");
  node(g, "Cast", 13, "rs", "rsf");
  attr_i(g, g->n_nodes - 1, "to", KILN_DTYPE_F32);
  /* A huge constant from a tiny input would grow the model: not folded. */
  int64_t big[2] = {1000, 1000};
  ints(g, "bigshape", 2, big);
  node(g, "ConstantOfShape", 9, "bigshape", "huge");
  node(g, "ReduceSum", 13, "huge", "hs");
  attr_i(g, g->n_nodes - 1, "keepdims", 0);
  node(g, "Add", 14, "hs,x", "y2");
  /* A big Constant node folds: its value was in the model already. */
  int cn = node(g, "Constant", 13, "", "cbig");
  kiln_attr *at;
  MUST(kiln_node_add_attr(&g->nodes[cn], "value", KILN_ATTR_TENSOR, &at));
  int64_t cbd[2] = {256, 256};
  MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, cbd, &at->t));
  for (int64_t i = 0; i < at->t->numel; i++) ((float *)at->t->data)[i] = (float)uniform(-1, 1);
  node(g, "ReduceSum", 13, "cbig", "cs");
  attr_i(g, g->n_nodes - 1, "keepdims", 0);
  node(g, "Mul", 14, "cs,x", "y3");
  /* An int8 weight's DequantizeLinear (64 KB -> 256 KB) folds: same element
   * count, and it would otherwise run at every inference. Expanding a
   * 1 KB row to 256 KB does not. */
  int64_t wd[2] = {256, 256}, rowd[2] = {1, 256};
  double *w8v = malloc(sizeof(double) * 256 * 256);
  for (int i = 0; i < 256 * 256; i++) w8v[i] = (double)((int)uniform(-128, 128));
  constant(g, "w8", KILN_DTYPE_I8, 2, wd, w8v);
  free(w8v);
  scalar(g, "wscale", 0.02);
  node(g, "DequantizeLinear", 13, "w8,wscale", "wf");
  int64_t x2d[2] = {2, 256};
  input(g, "x2", KILN_DTYPE_F32, 2, x2d);
  node(g, "MatMul", 13, "x2,wf", "y4");
  random_const(g, "row", 2, rowd, -1, 1);
  ints(g, "rowshape", 2, wd);
  node(g, "Expand", 13, "row,rowshape", "rows");
  node(g, "MatMul", 13, "rows,wf", "y5");
  /* ... unless it is read as weights (MatMul's B): then it folds. */
  random_const(g, "row2", 2, rowd, -1, 1);
  node(g, "Expand", 13, "row2,rowshape", "rows2");
  node(g, "MatMul", 13, "x2,rows2", "y6");
  output(g, "y2");
  output(g, "rsf");
  output(g, "y3");
  output(g, "y4");
  output(g, "y5");
  output(g, "y6");
  prepare(g);
  check_passes("fold limits", g, PASSES(P_FOLD, P_DCE));
  CHECK(!count_op(g, "Constant") && count_op(g, "Mul") == 1, "fold limits: a 256 KB Constant node should fold");
  CHECK(!count_op(g, "DequantizeLinear"), "fold limits: the int8 weight's DequantizeLinear should fold");
  CHECK(count_op(g, "Expand") == 1, "fold limits: a 256 KB Expand of a 1 KB row must not be folded, one read as weights must (%d left)",
        count_op(g, "Expand"));
  CHECK(count_op(g, "RandomUniformLike") == 0 && count_op(g, "Shape") == 0,
        "fold limits: Shape of a random op's output is known, the op then unused");
  CHECK(count_op(g, "ConstantOfShape") == 1, "fold limits: a 4 MB constant from a 16-byte input must not be folded");
  kiln_graph_free(g);

  /* An input with an initializer default may be overridden: not a constant,
   * and shapes inferred from its default are not trusted either. */
  g = new_graph("fold_override");
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  int w = input(g, "w", KILN_DTYPE_F32, 2, xd);
  kiln_tensor *wt;
  MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, xd, &wt));
  g->values[w].constant = wt;
  random_const(g, "c", 2, xd, -1, 1);
  node(g, "Add", 14, "w,c", "wc");
  node(g, "Add", 14, "x,wc", "y");
  node(g, "Shape", 13, "x", "xs");
  node(g, "Reshape", 14, "x,xs", "y2");
  output(g, "y");
  output(g, "y2");
  prepare(g);
  check_passes("fold override", g, PASSES(P_FOLD, P_SIMPLIFY, P_DCE));
  CHECK(count_op(g, "Add") == 2, "fold override: Add of an overridable input must stay (%d Adds)", count_op(g, "Add"));
  CHECK(count_op(g, "Shape") == 1 && count_op(g, "Reshape") == 1, "fold override: shapes are not trusted here");
  /* Overriding the initializer default still reaches the output. */
  run_io io = {0};
  random_inputs(g, &io);
  MUST(run_graph(g, &io));
  const kiln_tensor *x = io.in[0]->tensor, *wv = io.in[1]->tensor, *y = io.out[0]->tensor;
  const kiln_tensor *c = NULL;
  for (int i = 0; i < g->n_values; i++)
    if (!strcmp(g->values[i].name, "c")) c = g->values[i].constant;
  bool ok = c != NULL;
  for (int64_t i = 0; ok && i < y->numel; i++)
    ok = fabs(kiln_load_f64(y->data, y->dtype, i) - (kiln_load_f64(x->data, x->dtype, i) + kiln_load_f64(wv->data, wv->dtype, i) +
                                                      kiln_load_f64(c->data, c->dtype, i))) < 1e-5;
  CHECK(ok, "fold override: the overridden input's value must be used");
  free_io(&io, true);
  kiln_graph_free(g);
}

/* ---- dce (with a subgraph reading an outer value) --------------------------------- */

static void test_dce(void) {
  kiln_graph *g = new_graph("dce");
  int64_t xd[1] = {5};
  input(g, "x", KILN_DTYPE_F32, 1, xd);
  input(g, "cond", KILN_DTYPE_BOOL, 0, NULL);
  random_const(g, "unused_c", 1, xd, 0, 1);
  random_const(g, "k", 1, xd, 0, 1);
  node(g, "Relu", 14, "x", "a");      /* read only by the If's branches */
  node(g, "Neg", 13, "x", "dead1");   /* nobody reads it */
  node(g, "Exp", 13, "dead1", "dead2");
  node(g, "Mul", 14, "x,k", "b");
  int ifn = node(g, "If", 13, "cond", "y");
  for (int br = 0; br < 2; br++) {
    kiln_graph *sub;
    MUST(kiln_graph_new(br ? "else" : "then", g, &sub));
    int a = val(sub, "a");
    sub->values[a].outer_name = kiln_strdup("a");
    int two = scalar(sub, "two", br ? 3.0 : 2.0), three = scalar(sub, "three", 1.5);
    (void)two;
    (void)three;
    node(sub, "Add", 14, "two,three", "five"); /* folds inside the subgraph */
    node(sub, br ? "Mul" : "Add", 14, "a,five", "out");
    node(sub, "Sin", 7, "a", "unused_in_branch");
    MUST(kiln_graph_add_output(sub, val(sub, "out")));
    kiln_attr *at;
    MUST(kiln_node_add_attr(&g->nodes[ifn], br ? "else_branch" : "then_branch", KILN_ATTR_GRAPH, &at));
    at->g = sub;
  }
  node(g, "Add", 14, "y,b", "z");
  output(g, "z");
  prepare(g);
  int values_before = g->n_values;
  check_passes("dce", g, PASSES(P_FOLD, P_DCE));
  CHECK(count_op(g, "Relu") == 1, "dce: Relu read only by a subgraph must stay");
  CHECK(!count_op(g, "Neg") && !count_op(g, "Exp"), "dce: the unread chain must go");
  CHECK(g->n_values < values_before, "dce: unused values should be dropped (%d -> %d)", values_before, g->n_values);
  bool unused_gone = true;
  for (int i = 0; i < g->n_values; i++) unused_gone &= strcmp(g->values[i].name, "unused_c") != 0;
  CHECK(unused_gone, "dce: the unused constant should be removed");
  const kiln_node *ifnode = find_op(g, "If");
  CHECK(ifnode && kiln_node_attr(ifnode, "then_branch")->g->n_nodes == 1,
        "dce/fold in subgraphs: the branch should be just its Add (constant Add folded, Sin removed)");
  /* Both branches. */
  for (int c = 0; c < 2; c++) {
    run_io io = {0};
    random_inputs(g, &io);
    ((uint8_t *)io.in[1]->tensor->data)[0] = (uint8_t)c;
    kiln_status_t st = run_graph(g, &io);
    CHECK(!st, "dce: branch %d: %s", c, kiln_status_message(st));
    kiln_status_free(st);
    free_io(&io, true);
  }
  kiln_graph_free(g);
}

/* ---- cse ------------------------------------------------------------------------------ */

static void test_cse(void) {
  kiln_graph *g = new_graph("cse");
  int64_t xd[2] = {4, 6}, s1[2] = {6, 4};
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  ints(g, "shape_a", 2, s1);
  ints(g, "shape_b", 2, s1); /* same contents, another constant */
  node(g, "Relu", 14, "x", "r1");
  node(g, "Relu", 14, "x", "r2");
  node(g, "Add", 14, "r1,r2", "s");
  node(g, "Reshape", 14, "s,shape_a", "ra");
  node(g, "Reshape", 14, "s,shape_b", "rb");
  node(g, "Sub", 14, "ra,rb", "d");
  int t1 = node(g, "Transpose", 13, "x", "t1");
  attr_ints(g, t1, "perm", 2, (int64_t[]){1, 0});
  int t2 = node(g, "Transpose", 13, "x", "t2");
  attr_ints(g, t2, "perm", 2, (int64_t[]){1, 0});
  int t3 = node(g, "Transpose", 13, "x", "t3"); /* same op, other attribute */
  attr_ints(g, t3, "perm", 2, (int64_t[]){0, 1});
  node(g, "Add", 14, "t1,t2", "tt");
  node(g, "RandomUniformLike", 1, "x", "u1");
  node(g, "RandomUniformLike", 1, "x", "u2");
  node(g, "Sub", 14, "u1,u2", "ud");
  node(g, "Sigmoid", 13, "x", "o1"); /* both are graph outputs: both stay */
  node(g, "Sigmoid", 13, "x", "o2");
  output(g, "d");
  output(g, "tt");
  output(g, "t3");
  output(g, "o1");
  output(g, "o2");
  prepare(g);
  check_passes("cse", g, PASSES(P_CSE, P_DCE));
  CHECK(count_op(g, "Relu") == 1, "cse: two Relu(x) should merge (%d)", count_op(g, "Relu"));
  CHECK(count_op(g, "Reshape") == 1, "cse: Reshapes with equal constant shapes should merge (%d)", count_op(g, "Reshape"));
  CHECK(count_op(g, "Transpose") == 2, "cse: equal Transposes merge, other perms stay (%d)", count_op(g, "Transpose"));
  CHECK(count_op(g, "Sigmoid") == 2, "cse: graph outputs keep their producers");
  kiln_graph_free(g);
  /* Random ops never merge (checked without running: outputs are random). */
  g = new_graph("cse_random");
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  node(g, "RandomUniformLike", 1, "x", "u1");
  node(g, "RandomUniformLike", 1, "x", "u2");
  node(g, "Sub", 14, "u1,u2", "ud");
  output(g, "ud");
  prepare(g);
  MUST(kiln_run_pass(g, "cse", kiln_pass_cse));
  CHECK(count_op(g, "RandomUniformLike") == 2, "cse: random ops must not merge");
  kiln_graph_free(g);
}

/* ---- simplify ------------------------------------------------------------------------- */

static void test_simplify(void) {
  kiln_graph *g = new_graph("simplify");
  int64_t xd[3] = {2, 3, 4}, qd[3] = {2, 1, 4};
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  input(g, "q", KILN_DTYPE_F32, 3, qd);
  node(g, "Identity", 14, "x", "i1");
  node(g, "Identity", 14, "i1", "i2");
  node(g, "Dropout", 13, "i2", "dr");
  node(g, "Cast", 13, "dr", "c1");
  attr_i(g, g->n_nodes - 1, "to", KILN_DTYPE_F32);
  int ta = node(g, "Transpose", 13, "c1", "ta");
  attr_ints(g, ta, "perm", 3, (int64_t[]){1, 0, 2});
  int tb = node(g, "Transpose", 13, "ta", "tb");
  attr_ints(g, tb, "perm", 3, (int64_t[]){1, 0, 2});
  int tc = node(g, "Transpose", 13, "tb", "tc");
  attr_ints(g, tc, "perm", 3, (int64_t[]){1, 2, 0});
  int td = node(g, "Transpose", 13, "tc", "td");
  attr_ints(g, td, "perm", 3, (int64_t[]){0, 2, 1});
  int64_t s1[2] = {6, 4}, s2[2] = {4, 6};
  ints(g, "s1", 2, s1);
  ints(g, "s2", 2, s2);
  node(g, "Reshape", 14, "td,s1", "ra");
  node(g, "Reshape", 14, "ra,s2", "rb");
  node(g, "Relu", 14, "rb", "y1");
  /* Squeeze -> Unsqueeze back to the same shape. */
  int64_t ax1 = 1;
  ints(g, "ax1", 1, &ax1);
  node(g, "Squeeze", 13, "q,ax1", "sq");
  node(g, "Unsqueeze", 13, "sq,ax1", "us");
  node(g, "Neg", 13, "us", "y2");
  /* Dropout with training_mode = true: with ratio 0 it drops nothing and
   * goes; with ratio 0.5 it stays (its seed keeps the check deterministic). */
  scalar(g, "ratio0", 0.0);
  scalar(g, "ratio5", 0.5);
  uint8_t on = 1;
  int tm = constant(g, "train", KILN_DTYPE_BOOL, 0, NULL, NULL);
  *(uint8_t *)g->values[tm].constant->data = on;
  node(g, "Dropout", 13, "x,ratio0,train", "dz");
  node(g, "Dropout", 13, "dz,ratio5,train", "dk");
  attr_i(g, g->n_nodes - 1, "seed", 7);
  node(g, "Cast", 13, "dk", "y3");
  attr_i(g, g->n_nodes - 1, "to", KILN_DTYPE_F64);
  output(g, "y1");
  output(g, "y2");
  output(g, "y3");
  prepare(g);
  check_passes("simplify", g, PASSES(P_SIMPLIFY, P_DCE));
  CHECK(!count_op(g, "Identity"), "simplify: Identity should go");
  CHECK(count_op(g, "Dropout") == 1, "simplify: only the training-mode Dropout stays (%d)", count_op(g, "Dropout"));
  CHECK(count_op(g, "Cast") == 1, "simplify: Cast to the same type goes, to f64 stays (%d)", count_op(g, "Cast"));
  CHECK(count_op(g, "Transpose") == 1, "simplify: the Transpose chain should become one (%d)", count_op(g, "Transpose"));
  const kiln_node *t = find_op(g, "Transpose");
  if (t) {
    int n;
    const int64_t *p = kiln_attr_ints(t, "perm", &n);
    /* tc∘td: perm1 = [1,2,0], perm2 = [0,2,1] -> [1,0,2] */
    CHECK(n == 3 && p[0] == 1 && p[1] == 0 && p[2] == 2, "simplify: merged perm should be [1,0,2]");
    CHECK(!strcmp(g->values[t->inputs[0]].name, "x"), "simplify: the merged Transpose should read x");
  }
  CHECK(count_op(g, "Reshape") == 1, "simplify: Reshape chain should collapse (%d)", count_op(g, "Reshape"));
  CHECK(!count_op(g, "Squeeze") && !count_op(g, "Unsqueeze"), "simplify: Squeeze/Unsqueeze pair should go");
  kiln_graph_free(g);
}

/* Graph outputs keep their names when the node producing them goes. */
static void test_simplify_outputs(void) {
  kiln_graph *g = new_graph("outputs");
  int64_t xd[2] = {3, 4};
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  random_const(g, "w", 2, xd, -1, 1);
  node(g, "Identity", 14, "x", "passthrough"); /* input -> output: must stay */
  node(g, "Relu", 14, "x", "r");
  node(g, "Identity", 14, "r", "named");        /* Relu should write "named" */
  node(g, "Identity", 14, "w", "weights");      /* becomes a constant output */
  node(g, "Sigmoid", 13, "x", "s");
  node(g, "Identity", 14, "s", "o1");           /* s is an output itself: stays */
  output(g, "passthrough");
  output(g, "named");
  output(g, "weights");
  output(g, "s");
  output(g, "o1");
  prepare(g);
  check_passes("simplify outputs", g, PASSES(P_SIMPLIFY, P_DCE));
  const char *want[5] = {"passthrough", "named", "weights", "s", "o1"};
  for (int i = 0; i < 5 && i < g->n_outputs; i++)
    CHECK(!strcmp(g->values[g->outputs[i]].name, want[i]), "simplify outputs: output %d is '%s', want '%s'", i,
          g->values[g->outputs[i]].name, want[i]);
  CHECK(count_op(g, "Identity") == 2, "simplify outputs: 2 Identities must stay (%d)", count_op(g, "Identity"));
  int named = g->outputs[1];
  CHECK(g->values[named].producer >= 0 && !strcmp(g->nodes[g->values[named].producer].op_type, "Relu"),
        "simplify outputs: Relu should produce 'named'");
  CHECK(g->values[g->outputs[2]].constant != NULL, "simplify outputs: 'weights' should be a constant output");
  kiln_graph_free(g);
}

/* ---- fold-batchnorm ------------------------------------------------------------------------------ */

static void bn_params(kiln_graph *g, const char *prefix, int64_t c) {
  char n[64];
  const char *parts[4] = {"scale", "bias", "mean", "var"};
  const double lo[4] = {0.5, -1, -1, 0.5}, hi[4] = {1.5, 1, 1, 2};
  for (int i = 0; i < 4; i++) {
    snprintf(n, sizeof n, "%s_%s", prefix, parts[i]);
    random_const(g, n, 1, &c, lo[i], hi[i]);
  }
}

/* Two sessions of one model share the folded int8 weight (passes/fold_cache.h):
 * the second finds it in the model's cache, and both compute the same. */
static void test_fold_shared_across_sessions(void) {
  kiln_model_ir *ir = calloc(1, sizeof *ir);
  MUST(ir ? NULL : KILN_OOM());
  kiln_graph *g = new_graph("fold_shared");
  int64_t xd[2] = {3, 256}, wd[2] = {256, 128};
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  double *wv = malloc(sizeof(double) * 256 * 128);
  for (int i = 0; i < 256 * 128; i++) wv[i] = (double)((int)uniform(-128, 128));
  constant(g, "w8", KILN_DTYPE_I8, 2, wd, wv);
  free(wv);
  scalar(g, "wscale", 0.01);
  node(g, "DequantizeLinear", 13, "w8,wscale", "wf");
  node(g, "MatMul", 13, "x,wf", "y");
  output(g, "y");
  ir->graph = g;
  kiln_model *model;
  MUST(kiln_model_from_ir(ir, &model));
  kiln_tensor *x, *y[2] = {0};
  MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, xd, &x));
  for (int64_t i = 0; i < x->numel; i++) ((float *)x->data)[i] = (float)uniform(-1, 1);
  const char *names[1] = {"x"};
  kiln_session_options so = kiln_session_options_default();
  so.device = "cpu";
  for (int k = 0; k < 2; k++) {
    kiln_session *sess;
    MUST(kiln_session_create(model, &so, &sess));
    MUST(kiln_session_run(sess, 1, names, (const kiln_tensor *const *)&x, 1, &y[k]));
    kiln_session_destroy(sess);
  }
  CHECK(kiln_fold_cache_hits(model->fold_cache) == 1 && kiln_fold_cache_bytes(model->fold_cache) == 256 * 128 * 4,
        "fold shared: %lld hits, %lld bytes held (want 1 and the f32 weight's 131072)",
        (long long)kiln_fold_cache_hits(model->fold_cache), (long long)kiln_fold_cache_bytes(model->fold_cache));
  bool same = y[0] && y[1] && y[0]->numel == y[1]->numel && !memcmp(y[0]->data, y[1]->data, kiln_tensor_nbytes(y[0]));
  CHECK(same, "fold shared: the two sessions' outputs differ");
  kiln_tensor_release(x);
  kiln_tensor_release(y[0]);
  kiln_tensor_release(y[1]);
  kiln_model_destroy(model);
}

/* kiln_session_run_into: outputs written into the caller's tensors, on a
 * compiling device and on ref (the interpreter's path); the same values as
 * kiln_session_run; a tensor of the wrong shape or dtype is an error
 * naming the output. */
static void test_run_into(void) {
  static const char *const devices[2] = {"cpu", "ref"};
  for (int dv = 0; dv < 2; dv++) {
    kiln_model_ir *ir = calloc(1, sizeof *ir);
    MUST(ir ? NULL : KILN_OOM());
    kiln_graph *g = new_graph("run_into");
    int64_t xd[2] = {4, 33};
    input(g, "x", KILN_DTYPE_F32, 2, xd);
    node(g, "Relu", 13, "x", "r");
    node(g, "Add", 14, "r,x", "y");
    output(g, "y");
    output(g, "r");
    ir->graph = g;
    kiln_model *model;
    MUST(kiln_model_from_ir(ir, &model));
    kiln_tensor *x, *want[2] = {0}, *into[2] = {0}, *got[2] = {0}, *bad;
    MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, xd, &x));
    for (int64_t i = 0; i < x->numel; i++) ((float *)x->data)[i] = (float)uniform(-1, 1);
    MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, xd, &into[0]));
    int64_t bd[2] = {4, 32};
    MUST(kiln_tensor_new(KILN_DTYPE_F32, 2, bd, &bad));
    const char *names[1] = {"x"};
    kiln_session_options so = kiln_session_options_default();
    so.device = devices[dv];
    kiln_session *sess;
    MUST(kiln_session_create(model, &so, &sess));
    MUST(kiln_session_run(sess, 1, names, (const kiln_tensor *const *)&x, 2, want));
    for (int run = 0; run < 2; run++) { /* the second run writes over the first's values */
      MUST(kiln_session_run_into(sess, 1, names, (const kiln_tensor *const *)&x, 2, into, got));
      CHECK(got[0] == into[0] && into[0]->refcount == 2, "run_into on %s: output 0 is not the given tensor",
            devices[dv]);
      CHECK(got[1] && got[1] != into[0], "run_into on %s: output 1 (none given) missing", devices[dv]);
      for (int k = 0; k < 2; k++) {
        bool same = got[k] && !memcmp(got[k]->data, want[k]->data, kiln_tensor_nbytes(want[k]));
        CHECK(same, "run_into on %s, run %d: output %d differs from kiln_session_run's", devices[dv], run + 1, k);
        kiln_tensor_release(got[k]);
        got[k] = NULL;
      }
      memset(into[0]->data, 0xff, kiln_tensor_nbytes(into[0])); /* NaNs: the next run must overwrite them */
    }
    kiln_tensor *wrong[2] = {bad, NULL};
    kiln_status_t st = kiln_session_run_into(sess, 1, names, (const kiln_tensor *const *)&x, 2, wrong, got);
    CHECK(st && kiln_status_code_of(st) == KILN_INVALID_ARGUMENT && strstr(kiln_status_message(st), "'y'"),
          "run_into on %s with a [4, 32] tensor for a [4, 33] output: %s", devices[dv],
          st ? kiln_status_message(st) : "no error");
    kiln_status_free(st);
    CHECK(!got[0] && !got[1], "run_into on %s: outputs left after an error", devices[dv]);
    kiln_session_destroy(sess);
    kiln_tensor_release(x);
    kiln_tensor_release(bad);
    kiln_tensor_release(into[0]);
    for (int k = 0; k < 2; k++) kiln_tensor_release(want[k]);
    kiln_model_destroy(model);
  }
}

static void test_fold_batchnorm(void) {
  kiln_graph *g = new_graph("bn");
  int64_t xd[4] = {2, 3, 5, 5}, wd[4] = {4, 3, 3, 3}, w2d[4] = {4, 2, 1, 1}, c4 = 4, bd[1] = {4};
  input(g, "x", KILN_DTYPE_F32, 4, xd);
  random_const(g, "W", 4, wd, -0.5, 0.5);
  random_const(g, "B", 1, bd, -0.5, 0.5);
  bn_params(g, "bn1", c4);
  int cv = node(g, "Conv", 11, "x,W,B", "c1");
  attr_ints(g, cv, "pads", 4, (int64_t[]){1, 1, 1, 1});
  node(g, "BatchNormalization", 15, "c1,bn1_scale,bn1_bias,bn1_mean,bn1_var", "b1");
  attr_f(g, g->n_nodes - 1, "epsilon", 1e-3f);
  /* Grouped conv without bias, then per-channel Mul and Add. */
  random_const(g, "W2", 4, w2d, -0.5, 0.5);
  int g2 = node(g, "Conv", 11, "b1,W2", "c2");
  attr_i(g, g2, "group", 2);
  int64_t md[4] = {1, 4, 1, 1}, ad[3] = {4, 1, 1};
  random_const(g, "mulc", 4, md, 0.5, 2);
  random_const(g, "addc", 3, ad, -1, 1);
  node(g, "Mul", 14, "c2,mulc", "m2");
  node(g, "Add", 14, "addc,m2", "a2");
  /* Conv + BN in training mode: batch statistics, stays. */
  bn_params(g, "bn2", c4);
  random_const(g, "W3", 4, w2d, -0.5, 0.5);
  int g3 = node(g, "Conv", 11, "a2,W3", "c3");
  attr_i(g, g3, "group", 2);
  node(g, "BatchNormalization", 15, "c3,bn2_scale,bn2_bias,bn2_mean,bn2_var", "b3,rm,rv");
  attr_i(g, g->n_nodes - 1, "training_mode", 1);
  /* Conv read twice: its BN does not fold into it; it becomes Mul + Add. */
  bn_params(g, "bn3", c4);
  random_const(g, "W4", 4, w2d, -0.5, 0.5);
  int g4 = node(g, "Conv", 11, "b3,W4", "c4");
  attr_i(g, g4, "group", 2);
  node(g, "BatchNormalization", 15, "c4,bn3_scale,bn3_bias,bn3_mean,bn3_var", "b4");
  node(g, "Add", 14, "b4,c4", "y");
  output(g, "y");
  prepare(g);
  check_passes("fold-batchnorm conv", g, PASSES(P_BN, P_DCE));
  CHECK(count_op(g, "BatchNormalization") == 1, "fold-batchnorm: only the training-mode BN stays (%d left)",
        count_op(g, "BatchNormalization"));
  CHECK(count_op(g, "Mul") == 1 && count_op(g, "Add") == 2,
        "fold-batchnorm: per-channel Mul/Add fold into the conv; the last BN becomes Mul + Add (%d Mul, %d Add)",
        count_op(g, "Mul"), count_op(g, "Add"));
  kiln_graph_free(g);

  /* Gemm (transB, 1-D C) + BN and MatMul + BN on 2-D outputs. */
  g = new_graph("bn_gemm");
  int64_t ad2[2] = {3, 6}, bt[2] = {5, 6}, wm[2] = {5, 7}, c5 = 5, c7 = 7;
  input(g, "a", KILN_DTYPE_F32, 2, ad2);
  random_const(g, "Bt", 2, bt, -1, 1);
  random_const(g, "C", 1, &c5, -1, 1);
  int gm = node(g, "Gemm", 13, "a,Bt,C", "gm");
  attr_i(g, gm, "transB", 1);
  attr_f(g, gm, "alpha", 0.5f);
  attr_f(g, gm, "beta", 2.0f);
  bn_params(g, "bg", c5);
  node(g, "BatchNormalization", 15, "gm,bg_scale,bg_bias,bg_mean,bg_var", "gb");
  random_const(g, "Wm", 2, wm, -1, 1);
  node(g, "MatMul", 13, "gb,Wm", "mm");
  bn_params(g, "bm", c7);
  node(g, "BatchNormalization", 9, "mm,bm_scale,bm_bias,bm_mean,bm_var", "y");
  output(g, "y");
  prepare(g);
  check_passes("fold-batchnorm gemm/matmul", g, PASSES(P_BN, P_DCE));
  CHECK(!count_op(g, "BatchNormalization"), "fold-batchnorm: Gemm and MatMul BNs should fold (%d left)",
        count_op(g, "BatchNormalization"));
  CHECK(count_op(g, "Add") == 1, "fold-batchnorm: MatMul + BN becomes MatMul + Add");
  kiln_graph_free(g);

  /* Two Convs share one weight: each gets its own folded copy, the shared one is not changed. */
  g = new_graph("bn_shared");
  input(g, "x", KILN_DTYPE_F32, 4, xd);
  int wid = random_const(g, "W", 4, wd, -0.5, 0.5);
  kiln_tensor *w_before;
  MUST(kiln_tensor_clone(g->values[wid].constant, &w_before));
  kiln_tensor *w_shared = kiln_tensor_retain(g->values[wid].constant);
  bn_params(g, "p", c4);
  bn_params(g, "q", c4);
  node(g, "Conv", 11, "x,W", "ca");
  node(g, "Conv", 11, "x,W", "cb");
  node(g, "BatchNormalization", 15, "ca,p_scale,p_bias,p_mean,p_var", "ba");
  node(g, "BatchNormalization", 15, "cb,q_scale,q_bias,q_mean,q_var", "bb");
  node(g, "Sub", 14, "ba,bb", "y");
  output(g, "y");
  prepare(g);
  check_passes("fold-batchnorm shared weights", g, PASSES(P_BN, P_CSE, P_DCE));
  CHECK(!count_op(g, "BatchNormalization") && count_op(g, "Conv") == 2, "fold-batchnorm shared: both fold, no merge");
  CHECK(!memcmp(w_shared->data, w_before->data, kiln_tensor_nbytes(w_before)),
        "fold-batchnorm: a shared weight tensor must not be modified in place");
  kiln_tensor_release(w_shared);
  kiln_tensor_release(w_before);
  kiln_graph_free(g);
}

/* ---- patterns --------------------------------------------------------------------------------------- */

static void test_gelu(void) {
  for (int variant = 0; variant < 3; variant++) {
    kiln_graph *g = new_graph("gelu");
    int64_t xd[2] = {4, 8};
    input(g, "x", KILN_DTYPE_F32, 2, xd);
    scalar(g, "one", 1.0);
    scalar(g, "half", 0.5);
    if (variant < 2) {
      scalar(g, "sqrt2", 1.4142135381698608);
      scalar(g, "isqrt2", 0.7071067690849304);
      node(g, variant ? "Mul" : "Div", 14, variant ? "isqrt2,x" : "x,sqrt2", "t");
      node(g, "Erf", 13, "t", "e");
      node(g, "Add", 14, "e,one", "a");
      if (variant == 0) { /* PyTorch: (x * a) * 0.5 */
        node(g, "Mul", 14, "x,a", "p");
        node(g, "Mul", 14, "p,half", "y");
      } else { /* (x * 0.5) * a */
        node(g, "Mul", 14, "half,x", "h");
        node(g, "Mul", 14, "h,a", "y");
      }
    } else { /* tanh approximation as PyTorch writes it */
      scalar(g, "k", 0.7978845834732056);
      scalar(g, "c", 0.044714998453855515);
      node(g, "Mul", 14, "x,x", "x2");
      node(g, "Mul", 14, "x,x2", "x3");
      node(g, "Mul", 14, "c,x3", "cx3");
      node(g, "Add", 14, "x,cx3", "in");
      node(g, "Mul", 14, "k,in", "kin");
      node(g, "Tanh", 13, "kin", "th");
      node(g, "Add", 14, "one,th", "a");
      node(g, "Mul", 14, "x,a", "p");
      node(g, "Mul", 14, "half,p", "y");
    }
    node(g, "Relu", 14, "y", "z");
    output(g, "z");
    prepare(g);
    check_passes("gelu", g, PASSES(P_PATTERNS));
    CHECK(g->n_nodes == 2 && count_op(g, "Gelu") == 1, "gelu variant %d: %d nodes, want Gelu + Relu", variant, g->n_nodes);
    const kiln_node *n = find_op(g, "Gelu");
    CHECK(n && !strcmp(n->domain, KILN_FUSED_DOMAIN), "gelu: domain should be '%s'", KILN_FUSED_DOMAIN);
    CHECK(n && !strcmp(kiln_attr_string(n, "approximate", "none"), variant == 2 ? "tanh" : "none"),
          "gelu variant %d: wrong approximation", variant);
    kiln_graph_free(g);
  }
}

/* x: [2, 5, 16]; PyTorch's LayerNorm decomposition, with or without affine. */
static void test_layer_norm(void) {
  for (int affine = 0; affine < 2; affine++) {
    kiln_graph *g = new_graph("ln");
    int64_t xd[3] = {2, 5, 16}, cd = 16, m1 = -1;
    input(g, "x", KILN_DTYPE_F32, 3, xd);
    scalar(g, "two", 2.0);
    scalar(g, "eps", 1e-5);
    random_const(g, "gamma", 1, &cd, 0.5, 1.5);
    random_const(g, "beta", 1, &cd, -1, 1);
    int r = node(g, "ReduceMean", 13, "x", "m");
    attr_ints(g, r, "axes", 1, &m1);
    node(g, "Sub", 14, "x,m", "d");
    node(g, "Pow", 15, "d,two", "d2");
    r = node(g, "ReduceMean", 13, "d2", "v");
    attr_ints(g, r, "axes", 1, &m1);
    node(g, "Add", 14, "v,eps", "ve");
    node(g, "Sqrt", 13, "ve", "sd");
    node(g, "Div", 14, "d,sd", affine ? "n" : "y");
    if (affine) {
      node(g, "Mul", 14, "n,gamma", "sc");
      node(g, "Add", 14, "sc,beta", "y");
    }
    output(g, "y");
    prepare(g);
    check_passes("layer norm", g, PASSES(P_PATTERNS));
    CHECK(g->n_nodes == 1 && count_op(g, "LayerNormalization") == 1, "layer norm (affine %d): %d nodes", affine,
          g->n_nodes);
    const kiln_node *n = find_op(g, "LayerNormalization");
    CHECK(n && n->opset == 17 && kiln_attr_int(n, "axis", 0) == -1, "layer norm: opset 17, axis -1");
    CHECK(n && !strcmp(g->values[g->outputs[0]].name, "y"), "layer norm: output name kept");
    kiln_graph_free(g);
  }
  /* The mean is also a graph output: no fusion, same outputs. */
  kiln_graph *g = new_graph("ln_blocked");
  int64_t xd[2] = {3, 8}, m1 = -1;
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  scalar(g, "two", 2.0);
  scalar(g, "eps", 1e-5);
  int r = node(g, "ReduceMean", 13, "x", "m");
  attr_ints(g, r, "axes", 1, &m1);
  node(g, "Sub", 14, "x,m", "d");
  node(g, "Pow", 15, "d,two", "d2");
  r = node(g, "ReduceMean", 13, "d2", "v");
  attr_ints(g, r, "axes", 1, &m1);
  node(g, "Add", 14, "v,eps", "ve");
  node(g, "Sqrt", 13, "ve", "sd");
  node(g, "Div", 14, "d,sd", "y");
  output(g, "y");
  output(g, "m");
  prepare(g);
  check_passes("layer norm blocked", g, PASSES(P_PATTERNS));
  CHECK(!count_op(g, "LayerNormalization") && g->n_nodes == 7, "layer norm blocked: must not fuse");
  kiln_graph_free(g);
}

static void test_softmax(void) {
  kiln_graph *g = new_graph("softmax");
  int64_t xd[3] = {2, 6, 3}, ax = 1;
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  ints(g, "axes", 1, &ax);
  int r = node(g, "ReduceMax", 13, "x", "mx");
  attr_ints(g, r, "axes", 1, &ax);
  node(g, "Sub", 14, "x,mx", "z");
  node(g, "Exp", 13, "z", "e");
  node(g, "ReduceSum", 13, "e,axes", "s");
  node(g, "Div", 14, "e,s", "y");
  output(g, "y");
  prepare(g);
  check_passes("softmax", g, PASSES(P_PATTERNS));
  const kiln_node *n = find_op(g, "Softmax");
  CHECK(g->n_nodes == 1 && n && n->opset == 13 && kiln_attr_int(n, "axis", 0) == -2,
        "softmax: want one Softmax-13 over axis 1 (-2)");
  kiln_graph_free(g);
}

/* Attention as exporters write it: Q [B, H, T, D] / sqrt(D) · Transpose(K) + mask -> Softmax -> · V. */
/* Fusion grouping with contractions compiled as kernels: a Conv takes the
 * elementwise chain after it (Relu, then the residual Add) into one group;
 * of an Add of two Convs only one is inlined (a group holds one sum); a
 * Conv read by a Reshape stays its own kernel. Without
 * contraction_epilogues every Conv is its own root. */
static void test_fusion_contractions(void) {
  kiln_graph *g = new_graph("fusion_contractions");
  int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {4, 4, 1, 1}, shape[2] = {1, 144};
  input(g, "x", KILN_DTYPE_F32, 4, xd);
  random_const(g, "w1", 4, wd, -1, 1);
  random_const(g, "w2", 4, wd, -1, 1);
  random_const(g, "w3", 4, wd, -1, 1);
  random_const(g, "w4", 4, wd, -1, 1);
  random_const(g, "w5", 4, wd, -1, 1);
  ints(g, "shape", 2, shape);
  int c1 = node(g, "Conv", 13, "x,w1", "c1");
  int r1 = node(g, "Relu", 13, "c1", "r1");
  int a1 = node(g, "Add", 13, "r1,x", "y1");
  int c2 = node(g, "Conv", 13, "x,w2", "c2");
  int c3 = node(g, "Conv", 13, "x,w3", "c3");
  int a2 = node(g, "Add", 13, "c2,c3", "y2");
  int c4 = node(g, "Conv", 13, "x,w4", "c4");
  int rs = node(g, "Reshape", 13, "c4,shape", "y3");
  int c5 = node(g, "Conv", 13, "x,w5", "c5");
  int t5 = node(g, "Transpose", 13, "c5", "t5");
  attr_ints(g, t5, "perm", 4, (int64_t[]){1, 0, 2, 3});
  int r5 = node(g, "Relu", 13, "t5", "y4");
  int c6 = node(g, "Conv", 13, "x,w5", "c6");
  int t6 = node(g, "Transpose", 13, "c6", "y5");
  attr_ints(g, t6, "perm", 4, (int64_t[]){0, 1, 3, 2});
  output(g, "y1");
  output(g, "y2");
  output(g, "y3");
  output(g, "y4");
  output(g, "y5");
  prepare(g);
  kiln_op_class *cls = calloc((size_t)g->n_nodes, sizeof *cls);
  for (int n = 0; n < g->n_nodes; n++) cls[n] = g->nodes[n].op->op_class;
  /* prepare() may reorder: find the nodes by their outputs. */
  int at[13] = {c1, r1, a1, c2, c3, a2, c4, rs, c5, t5, r5, c6, t6};
  const char *outs[13] = {"c1", "r1", "y1", "c2", "c3", "y2", "c4", "y3", "c5", "t5", "y4", "c6", "y5"};
  for (int k = 0; k < 13; k++) {
    int v = val(g, outs[k]);
    at[k] = g->values[v].producer;
  }
  c1 = at[0], r1 = at[1], a1 = at[2], c2 = at[3], c3 = at[4], a2 = at[5], c4 = at[6], rs = at[7];
  c5 = at[8], t5 = at[9], r5 = at[10], c6 = at[11], t6 = at[12];
  kiln_fusion f;
  /* A device whose Conv writes the swapped layout: the Transpose of axes
   * 0 and 1 takes its Conv and nothing after it; other perms stay apart. */
  MUST(kiln_fusion_plan(g, cls, true, true, &f));
  CHECK(f.group_of[c5] == t5 && f.group_of[t5] == t5 && f.group_of[r5] == r5,
        "Conv + Transpose(1, 0, 2, 3): groups %d %d %d, want %d %d %d", f.group_of[c5], f.group_of[t5], f.group_of[r5],
        t5, t5, r5);
  CHECK(f.group_of[c6] == c6, "Conv + Transpose(0, 1, 3, 2): Conv in group %d, want its own", f.group_of[c6]);
  kiln_fusion_free(&f);
  MUST(kiln_fusion_plan(g, cls, true, false, &f));
  CHECK(f.group_of[c5] == c5, "without conv_transposed_output: the Conv before a Transpose in group %d", f.group_of[c5]);
  CHECK(f.group_of[c1] == a1 && f.group_of[r1] == a1 && f.group_of[a1] == a1, "Conv+Relu+Add: groups %d %d %d, want %d",
        f.group_of[c1], f.group_of[r1], f.group_of[a1], a1);
  CHECK((f.group_of[c2] == a2) != (f.group_of[c3] == a2), "Add of two Convs: %d and %d in the Add's group %d",
        f.group_of[c2], f.group_of[c3], a2);
  CHECK(f.group_of[c4] == c4 && f.group_of[rs] == rs, "Conv before Reshape: groups %d %d", f.group_of[c4], f.group_of[rs]);
  kiln_fusion_free(&f);
  MUST(kiln_fusion_plan(g, cls, false, false, &f));
  CHECK(f.group_of[c1] == c1 && f.group_of[c2] == c2 && f.group_of[c3] == c3 && f.group_of[r1] == a1,
        "without contraction epilogues: groups %d %d %d %d", f.group_of[c1], f.group_of[c2], f.group_of[c3], f.group_of[r1]);
  kiln_fusion_free(&f);
  free(cls);
  kiln_graph_free(g);
}

static void test_attention(void) {
  for (int variant = 0; variant < 3; variant++) {
    kiln_graph *g = new_graph("attention");
    int64_t qd[4] = {2, 3, 5, 4}, md[2] = {5, 5}, q3[3] = {6, 5, 4}, k3[3] = {5, 6, 4};
    if (variant < 2) {
      input(g, "q", KILN_DTYPE_F32, 4, qd);
      input(g, "k", KILN_DTYPE_F32, 4, qd);
      input(g, "v", KILN_DTYPE_F32, 4, qd);
    } else { /* 3-D with K as [T, BH, D] transposed by [1, 2, 0] (PyTorch 1.13's MultiheadAttention) */
      input(g, "q", KILN_DTYPE_F32, 3, q3);
      input(g, "k", KILN_DTYPE_F32, 3, k3);
      input(g, "v", KILN_DTYPE_F32, 3, q3);
    }
    random_const(g, "mask", 2, md, -3, 0);
    scalar(g, "sc", 2.0);
    int t = node(g, "Transpose", 13, "k", "kt");
    if (variant < 2) attr_ints(g, t, "perm", 4, (int64_t[]){0, 1, 3, 2});
    else attr_ints(g, t, "perm", 3, (int64_t[]){1, 2, 0});
    if (variant == 0) {
      node(g, "MatMul", 13, "q,kt", "s");
      node(g, "Div", 14, "s,sc", "ss");
      node(g, "Add", 14, "ss,mask", "sm_in");
    } else if (variant == 1) { /* scale on Q, mask first, no Add of scale */
      node(g, "Mul", 14, "q,sc", "qs");
      node(g, "MatMul", 13, "qs,kt", "s");
      node(g, "Add", 14, "mask,s", "sm_in");
    } else {
      node(g, "Div", 14, "q,sc", "qs");
      node(g, "MatMul", 13, "qs,kt", "sm_in");
    }
    int sm = node(g, "Softmax", 13, "sm_in", "p");
    attr_i(g, sm, "axis", -1);
    node(g, "MatMul", 13, "p,v", "y");
    output(g, "y");
    prepare(g);
    /* For a device without a fused attention kernel the softmax is fused
     * and the MatMuls stay. */
    kiln_graph *unfused;
    MUST(kiln_graph_clone(g, NULL, &unfused));
    MUST(kiln_optimize_graph_for(unfused, 1, &(kiln_optimize_options){.fuse_attention = false}));
    CHECK(!find_op(unfused, "FusedAttention") && count_op(unfused, "Softmax") == 1 && count_op(unfused, "MatMul") == 2,
          "attention variant %d unfused: %d FusedAttention, %d Softmax, %d MatMul", variant,
          count_op(unfused, "FusedAttention"), count_op(unfused, "Softmax"), count_op(unfused, "MatMul"));
    kiln_graph_free(unfused);
    MUST(kiln_graph_clone(g, NULL, &unfused));
    MUST(kiln_optimize_graph_for(unfused, 1, &(kiln_optimize_options){.fuse_attention = true}));
    CHECK(find_op(unfused, "FusedAttention"), "attention variant %d: the clone fused with fuse_attention", variant);
    kiln_graph_free(unfused);
    check_passes("attention", g, PASSES(P_PATTERNS, P_SIMPLIFY, P_DCE));
    const kiln_node *n = find_op(g, "FusedAttention");
    CHECK(n && !count_op(g, "Softmax") && !count_op(g, "MatMul"), "attention variant %d: not fused (%d nodes)", variant,
          g->n_nodes);
    if (n) {
      double want = variant == 1 ? 2.0 : 0.5;
      CHECK(fabs(kiln_attr_float(n, "scale", 0) - want) < 1e-6, "attention variant %d: scale %g, want %g", variant,
            kiln_attr_float(n, "scale", 0), want);
      CHECK(kiln_attr_int(n, "transpose_k", 0) == 1, "attention: K should be taken untransposed");
      CHECK((n->n_inputs == 4) == (variant < 2), "attention variant %d: mask input", variant);
      CHECK(count_op(g, "Transpose") == (variant == 2), "attention variant %d: %d Transposes", variant,
            count_op(g, "Transpose"));
    }
    kiln_graph_free(g);
  }
}

/* Near misses: each must stay as it is (and compute the same). */
static void test_pattern_misses(void) {
  int64_t xd[3] = {2, 4, 6}, ax1 = 1;
  /* GELU with the wrong constant. */
  kiln_graph *g = new_graph("gelu_miss");
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  scalar(g, "one", 1.0);
  scalar(g, "half", 0.5);
  scalar(g, "c", 1.5);
  node(g, "Div", 14, "x,c", "t");
  node(g, "Erf", 13, "t", "e");
  node(g, "Add", 14, "e,one", "a");
  node(g, "Mul", 14, "x,a", "p");
  node(g, "Mul", 14, "p,half", "y");
  output(g, "y");
  prepare(g);
  check_passes("gelu miss", g, PASSES(P_PATTERNS));
  CHECK(!count_op(g, "Gelu") && g->n_nodes == 5, "gelu miss: 1.5 is not sqrt(2)");
  kiln_graph_free(g);
  /* LayerNorm over a middle axis. */
  g = new_graph("ln_miss");
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  scalar(g, "two", 2.0);
  scalar(g, "eps", 1e-5);
  int r = node(g, "ReduceMean", 13, "x", "m");
  attr_ints(g, r, "axes", 1, &ax1);
  node(g, "Sub", 14, "x,m", "d");
  node(g, "Pow", 15, "d,two", "d2");
  r = node(g, "ReduceMean", 13, "d2", "v");
  attr_ints(g, r, "axes", 1, &ax1);
  node(g, "Add", 14, "v,eps", "ve");
  node(g, "Sqrt", 13, "ve", "sd");
  node(g, "Div", 14, "d,sd", "y");
  output(g, "y");
  prepare(g);
  check_passes("layer norm miss", g, PASSES(P_PATTERNS));
  CHECK(!count_op(g, "LayerNormalization"), "layer norm miss: axis 1 of 3 is not a trailing run");
  kiln_graph_free(g);
  /* Softmax whose max and sum reduce different axes. */
  g = new_graph("softmax_miss");
  int64_t ax2 = 2;
  input(g, "x", KILN_DTYPE_F32, 3, xd);
  ints(g, "axes", 1, &ax2);
  r = node(g, "ReduceMax", 13, "x", "mx");
  attr_ints(g, r, "axes", 1, &ax1);
  node(g, "Sub", 14, "x,mx", "z");
  node(g, "Exp", 13, "z", "e");
  node(g, "ReduceSum", 13, "e,axes", "s");
  node(g, "Div", 14, "e,s", "y");
  output(g, "y");
  prepare(g);
  check_passes("softmax miss", g, PASSES(P_PATTERNS));
  CHECK(!count_op(g, "Softmax"), "softmax miss: different axes");
  kiln_graph_free(g);
  /* Attention whose mask broadcasts the scores to a bigger shape, and one over the wrong axis. */
  for (int variant = 0; variant < 2; variant++) {
    g = new_graph("attention_miss");
    int64_t qd[4] = {1, 3, 5, 4}, md[4] = {2, 1, 5, 5};
    input(g, "q", KILN_DTYPE_F32, 4, qd);
    input(g, "k", KILN_DTYPE_F32, 4, qd);
    input(g, "v", KILN_DTYPE_F32, 4, qd);
    random_const(g, "mask", 4, md, -3, 0);
    int t = node(g, "Transpose", 13, "k", "kt");
    attr_ints(g, t, "perm", 4, (int64_t[]){0, 1, 3, 2});
    node(g, "MatMul", 13, "q,kt", "s");
    node(g, "Add", 14, variant ? "s,s" : "s,mask", "sm_in");
    int sm = node(g, "Softmax", 13, "sm_in", "p");
    attr_i(g, sm, "axis", variant ? 2 : -1);
    node(g, "MatMul", 13, "p,v", "y");
    output(g, "y");
    prepare(g);
    check_passes("attention miss", g, PASSES(P_PATTERNS));
    CHECK(!count_op(g, "FusedAttention"), "attention miss variant %d: must not fuse", variant);
    kiln_graph_free(g);
  }
}

/* The whole pipeline twice: the second run changes nothing; level 0 does nothing. */
static void test_pipeline(void) {
  kiln_graph *g = new_graph("pipeline");
  int64_t xd[2] = {3, 4};
  input(g, "x", KILN_DTYPE_F32, 2, xd);
  node(g, "Identity", 14, "x", "a");
  node(g, "Relu", 14, "a", "b");
  node(g, "Relu", 14, "a", "c");
  node(g, "Add", 14, "b,c", "y");
  output(g, "y");
  prepare(g);
  MUST(kiln_optimize_graph(g, 0));
  CHECK(g->n_nodes == 4, "level 0 should change nothing");
  check_passes("pipeline", g, PASSES(P_ALL));
  int n = g->n_nodes, v = g->n_values, c = n_constants(g);
  MUST(kiln_optimize_graph(g, 1));
  CHECK(n == 2 && g->n_nodes == n && g->n_values == v && n_constants(g) == c,
        "pipeline: want Relu + Add and a fixed point (%d nodes)", g->n_nodes);
  kiln_graph_free(g);
}

/* ---- PyTorch-exported models ---------------------------------------------------------------------- */

static const char *export_script =
    "import sys, torch\n"
    "out = sys.argv[1]\n"
    "torch.manual_seed(0)\n"
    "class Enc(torch.nn.Module):\n"
    "    def __init__(s):\n"
    "        super().__init__()\n"
    "        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1,\n"
    "                                                 activation='gelu', batch_first=True)\n"
    "        s.enc = torch.nn.TransformerEncoder(layer, num_layers=2)\n"
    "    def forward(s, x):\n"
    "        t = x.shape[1]\n"
    "        mask = torch.triu(torch.full((t, t), float('-inf')), diagonal=1)\n"
    "        return s.enc(x, mask=mask)\n"
    "m = Enc().eval()\n"
    "torch.onnx.export(m, torch.randn(2, 5, 32), out + '/encoder.onnx', opset_version=14, input_names=['x'],\n"
    "                  output_names=['y'], dynamic_axes={'x': {0: 'b', 1: 't'}})\n"
    "class Net(torch.nn.Module):\n"
    "    def __init__(s):\n"
    "        super().__init__()\n"
    "        s.c1 = torch.nn.Conv2d(3, 8, 3, padding=1); s.b1 = torch.nn.BatchNorm2d(8)\n"
    "        s.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False); s.b2 = torch.nn.BatchNorm2d(8)\n"
    "        s.fc = torch.nn.Linear(8, 5); s.b3 = torch.nn.BatchNorm1d(5)\n"
    "    def forward(s, x):\n"
    "        x = torch.relu(s.b1(s.c1(x)))\n"
    "        x = s.b2(s.c2(x))\n"
    "        return s.b3(s.fc(x.mean(dim=(2, 3))))\n"
    "n = Net()\n"
    "for b in (n.b1, n.b2, n.b3):\n"
    "    b.running_mean.uniform_(-1, 1); b.running_var.uniform_(0.5, 2)\n"
    "    b.weight.data.uniform_(0.5, 1.5); b.bias.data.uniform_(-1, 1)\n"
    "n.eval()\n"
    "torch.onnx.export(n, torch.randn(2, 3, 6, 6), out + '/convbn.onnx', opset_version=14, input_names=['x'],\n"
    "                  output_names=['y'], dynamic_axes={'x': {0: 'b'}},\n"
    "                  training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)\n";

/* Specializes the model for one random input of `dims`, runs the specialized
 * graph, optimizes a copy of it, runs that, compares. *out_opt: the optimized graph (owned). */
static void check_model(const char *path, int rank, const int64_t *dims, kiln_graph **out_opt, int *nodes_before) {
  *out_opt = NULL;
  kiln_model *model;
  kiln_status_t st = kiln_model_load_file(path, &model);
  CHECK(!st, "%s: %s", path, kiln_status_message(st));
  if (st) {
    kiln_status_free(st);
    return;
  }
  /* The reference device runs the specialized graph as written (compiling devices optimize it themselves). */
  kiln_session_options so = kiln_session_options_default();
  so.device = "ref";
  kiln_session *sess;
  MUST(kiln_session_create(model, &so, &sess));
  kiln_tensor *x;
  MUST(kiln_tensor_new(KILN_DTYPE_F32, rank, dims, &x));
  for (int64_t i = 0; i < x->numel; i++) ((float *)x->data)[i] = (float)uniform(-2, 2);
  run_io before = {0}, after = {0};
  MUST(kiln_value_from_tensor(x, &before.in[0]));
  before.n_in = 1;
  const kiln_graph *spec;
  MUST(kiln_session_specialize(sess, before.in, &spec));
  kiln_graph *opt;
  MUST(kiln_graph_clone(spec, NULL, &opt));
  *nodes_before = spec->n_nodes;
  MUST(run_graph(spec, &before));
  st = kiln_optimize_graph(opt, 1);
  CHECK(!st, "%s: optimize: %s", path, kiln_status_message(st));
  kiln_status_free(st);
  /* Inference agrees with what the passes left (fused ops' rules included). */
  st = kiln_run_pass(opt, "infer-types", kiln_pass_infer_types);
  CHECK(!st, "%s: infer-types after optimizing: %s", path, kiln_status_message(st));
  kiln_status_free(st);
  /* The model's own graph (whose constants the copy shares) is untouched. */
  run_io again = {0};
  again.n_in = 1;
  MUST(kiln_value_share(before.in[0], &again.in[0]));
  MUST(run_graph(spec, &again));
  same_outputs("the unoptimized graph after optimizing a copy", &before, &again);
  free_io(&again, true);
  after.n_in = 1;
  MUST(kiln_value_share(before.in[0], &after.in[0]));
  st = run_graph(opt, &after);
  CHECK(!st, "%s: running the optimized graph: %s", path, kiln_status_message(st));
  if (!st) same_outputs(path, &before, &after);
  kiln_status_free(st);
  free_io(&before, true);
  free_io(&after, true);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  *out_opt = opt;
}

static void test_torch_models(void) {
  bool require = getenv("KILN_REQUIRE_PYTHON") && !strcmp(getenv("KILN_REQUIRE_PYTHON"), "1");
  char dir[] = "/tmp/kiln_test_passes_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  char script[512], cmd[1200];
  snprintf(script, sizeof script, "%s/export.py", dir);
  FILE *f = fopen(script, "w");
  if (!f) {
    CHECK(0, "cannot write %s", script);
    return;
  }
  fputs(export_script, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s/export.log 2>&1", script, dir, dir);
  int rc = system("/usr/bin/python3 -c 'import torch, onnx' > /dev/null 2>&1");
  if (rc != 0) {
    printf("SKIP torch models: /usr/bin/python3 with torch and onnx not available\n");
    CHECK(!require, "KILN_REQUIRE_PYTHON=1 but python3 + torch are missing");
  } else if ((rc = system(cmd)) != 0) {
    CHECK(0, "exporting the torch models failed (see %s/export.log)", dir);
  } else {
    char path[600];
    kiln_graph *g;
    int before = 0;
    /* Another sequence length than the export's: the shape computations must follow. */
    int64_t ed[3] = {3, 7, 32};
    snprintf(path, sizeof path, "%s/encoder.onnx", dir);
    check_model(path, 3, ed, &g, &before);
    if (g) {
      CHECK(count_op(g, "Gelu") == 2 && !count_op(g, "Erf"), "encoder: want 2 Gelu (%d), no Erf", count_op(g, "Gelu"));
      CHECK(count_op(g, "LayerNormalization") == 4 && !count_op(g, "ReduceMean"), "encoder: want 4 LayerNormalization (%d)",
            count_op(g, "LayerNormalization"));
      CHECK(count_op(g, "FusedAttention") == 2 && !count_op(g, "Softmax"), "encoder: want 2 FusedAttention (%d)",
            count_op(g, "FusedAttention"));
      CHECK(!count_op(g, "Shape") && !count_op(g, "Identity"), "encoder: shape computations and Identity should be gone");
      printf("encoder: %d nodes -> %d\n", before, g->n_nodes);
      kiln_graph_free(g);
    }
    int64_t cd[4] = {3, 3, 6, 6};
    snprintf(path, sizeof path, "%s/convbn.onnx", dir);
    check_model(path, 4, cd, &g, &before);
    if (g) {
      CHECK(!count_op(g, "BatchNormalization"), "convbn: all 3 BatchNormalization should fold (%d left)",
            count_op(g, "BatchNormalization"));
      printf("convbn: %d nodes -> %d\n", before, g->n_nodes);
      kiln_graph_free(g);
    }
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) { /* best effort */
  }
}

int main(void) {
  test_fold_shape_chain();
  test_fold_limits();
  test_fold_shared_across_sessions();
  test_run_into();
  test_dce();
  test_cse();
  test_simplify();
  test_simplify_outputs();
  test_fold_batchnorm();
  test_gelu();
  test_layer_norm();
  test_softmax();
  test_attention();
  test_fusion_contractions();
  test_pattern_misses();
  test_pipeline();
  test_torch_models();
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures != 0;
}
