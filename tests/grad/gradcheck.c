/* gradcheck — autodiff's gradients against central finite differences.
 *
 *   gradcheck [--device D] [--eps E] [--atol A] [--rtol R] [-v] CASE.onnx...
 *   gradcheck --emit DIR CASE.onnx...
 *
 * Each CASE.onnx comes with CASE.npz (its graph inputs by name: made by
 * tests/grad/gen_grad_cases.py, float64). The check, per case:
 *   1. loss = sum over the float outputs y_i of ReduceSum(y_i * r_i), r_i a
 *      constant of uniform(-1, 1) values (seeded by the case's name), so
 *      every output element weighs in with its own factor;
 *   2. kiln_pass_autodiff gives d loss / d x for every float graph input x;
 *      the model with outputs [loss, gradients...] is written out as ONNX
 *      and run on the device (default ref) like any model;
 *   3. for every element of every x: (loss(x + eps) - loss(x - eps)) / 2 eps
 *      on the same session, and |gradient - difference| <= atol + rtol *
 *      |difference| (PyTorch's gradcheck: eps 1e-6, atol 1e-5, rtol 1e-3).
 * Cases named norule_* must instead fail autodiff with an UNSUPPORTED error
 * that names their node. --emit writes each case's model with its
 * gradients as outputs to DIR/CASE.onnx and checks nothing else: float32
 * cases for kiln_diff to run on a compiling device against ref
 * (run_gradcheck.sh). One line per case (PASS / FAIL with the worst
 * element) and a summary; exit status 1 on any failure, 2 on usage errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.h"
#include "passes/autodiff.h"
#include "passes/passes_opt.h"
#include "tensor/npy.h"

typedef struct options {
  const char *device;
  const char *emit; /* --emit DIR, or NULL */
  double eps, atol, rtol;
  bool verbose;
} options;

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static uint64_t seed_of(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h ? h : 1;
}

/* Appends loss = sum_i ReduceSum(y_i * r_i) over g's float outputs; returns its value id. */
static kiln_status_t add_loss(kiln_graph *g, int opset, const char *name, int *out_loss) {
  uint64_t s = seed_of(name);
  int loss = -1;
  for (int i = 0; i < g->n_outputs; i++) {
    int y = g->outputs[i];
    const kiln_type *t = &g->values[y].type;
    if (t->kind != KILN_TYPE_TENSOR || !kiln_dtype_is_float(t->dtype) || !kiln_opt_shape_known(t))
      return kiln_error(KILN_INVALID_ARGUMENT, "output '%s' is not a float tensor of known shape", g->values[y].name);
    kiln_tensor *r;
    KILN_TRY(kiln_tensor_new(t->dtype, t->rank, t->dims, &r));
    for (int64_t k = 0; k < r->numel; k++)
      kiln_store_f64(r->data, r->dtype, k, (double)(rng_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    int rid, prod, sum;
    KILN_TRY(kiln_opt_new_const(g, "gradcheck/r", r, &rid));
    KILN_TRY(kiln_opt_new_value(g, "gradcheck/prod", t, &prod));
    int mul_in[2] = {y, rid};
    KILN_TRY(kiln_opt_append_node(g, "gradcheck/mul", "Mul", "", opset, 2, mul_in, 1, &prod));
    kiln_type scalar = {0};
    kiln_type_init_tensor(&scalar, t->dtype, 0, NULL);
    KILN_TRY(kiln_opt_new_value(g, "gradcheck/sum", &scalar, &sum));
    KILN_TRY(kiln_opt_append_node(g, "gradcheck/sum", "ReduceSum", "", opset, 1, &prod, 1, &sum));
    KILN_TRY(kiln_opt_set_attr_int(&g->nodes[g->n_nodes - 1], "keepdims", 0));
    if (loss < 0) {
      loss = sum;
      continue;
    }
    int acc, add_in[2] = {loss, sum};
    KILN_TRY(kiln_opt_new_value(g, "gradcheck/loss", &scalar, &acc));
    KILN_TRY(kiln_opt_append_node(g, "gradcheck/add", "Add", "", opset, 2, add_in, 1, &acc));
    loss = acc;
  }
  if (loss < 0) return kiln_error(KILN_INVALID_ARGUMENT, "the model has no outputs");
  *out_loss = loss;
  return NULL;
}

static int64_t opset_of(const kiln_model_ir *m) {
  for (int i = 0; i < m->n_opsets; i++)
    if (!m->opsets[i].domain[0] || !strcmp(m->opsets[i].domain, "ai.onnx")) return m->opsets[i].version;
  return 0;
}

/* The model with outputs [loss, d loss / d x for each float input], serialized. */
static kiln_status_t build(const char *path, const char *name, int *out_n_wrt, char ***out_wrt_names, uint8_t **out_data,
                           size_t *out_size) {
  kiln_model_ir *m = NULL;
  KILN_TRY(kiln_onnx_load_file(path, &m));
  kiln_graph *g = m->graph;
  int opset = (int)opset_of(m);
  int loss = -1, n_wrt = 0;
  int *wrt = calloc((size_t)g->n_inputs + 1, sizeof *wrt), *grads = calloc((size_t)g->n_inputs + 1, sizeof *grads);
  char **names = calloc((size_t)g->n_inputs + 1, sizeof *names);
  kiln_status_t st = wrt && grads && names ? NULL : KILN_OOM();
  if (!st) st = kiln_run_pass(g, "resolve-ops", kiln_pass_resolve_ops);
  if (!st) st = kiln_graph_toposort(g);
  if (!st) st = kiln_run_pass(g, "infer-types", kiln_pass_infer_types);
  if (!st) st = add_loss(g, opset, name, &loss);
  for (int i = 0; !st && i < g->n_inputs; i++) {
    const kiln_type *t = &g->values[g->inputs[i]].type;
    if (t->kind == KILN_TYPE_TENSOR && kiln_dtype_is_float(t->dtype)) {
      names[n_wrt] = kiln_strdup(g->values[g->inputs[i]].name);
      wrt[n_wrt++] = g->inputs[i];
    }
  }
  if (!st) st = kiln_pass_autodiff(g, opset, loss, n_wrt, wrt, grads);
  for (int k = 0; !st && k < n_wrt; k++)
    if (grads[k] < 0) st = kiln_error(KILN_INTERNAL, "no gradient for input '%s'", names[k]);
  if (!st) {
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].is_graph_output = false;
    g->n_outputs = 0;
    st = kiln_graph_add_output(g, loss);
    for (int k = 0; !st && k < n_wrt; k++) st = kiln_graph_add_output(g, grads[k]);
  }
  if (!st) st = kiln_onnx_serialize(m, out_data, out_size);
  kiln_model_ir_free(m);
  free(wrt);
  free(grads);
  *out_n_wrt = n_wrt;
  *out_wrt_names = names;
  return st;
}

typedef struct result {
  bool ok;
  char why[512];
  double worst; /* the largest |gradient - difference| / allowed */
  int64_t checked;
} result;

static double at(const kiln_tensor *t, int64_t i) { return kiln_load_f64(t->data, t->dtype, i); }

static kiln_status_t loss_at(kiln_session *s, int n, const char *const *names, const kiln_tensor *const *ins,
                             double *out) {
  kiln_tensor *o = NULL;
  KILN_TRY(kiln_session_run(s, n, names, ins, 1, &o));
  *out = at(o, 0);
  kiln_tensor_release(o);
  return NULL;
}

static kiln_status_t check(const options *opt, const char *path, result *res) {
  char name[512], npz[1100];
  const char *base = strrchr(path, '/');
  snprintf(name, sizeof name, "%s", base ? base + 1 : path);
  char *dot = strrchr(name, '.');
  if (dot) *dot = '\0';
  snprintf(npz, sizeof npz, "%.*s.npz", (int)(strlen(path) - (dot ? strlen(".onnx") : 0)), path);
  bool norule = !strncmp(name, "norule_", 7);
  int n_wrt = 0;
  char **wrt_names = NULL;
  uint8_t *data = NULL;
  size_t size = 0;
  kiln_status_t st = build(path, name, &n_wrt, &wrt_names, &data, &size);
  if (norule) {
    res->ok = st && kiln_status_code_of(st) == KILN_UNSUPPORTED;
    /* the message must name the node (gen_grad_cases names nodes Op_N) */
    const char *op = name + 7;
    res->ok = res->ok && strstr(kiln_status_message(st), op) && strstr(kiln_status_message(st), "node '");
    snprintf(res->why, sizeof res->why, "%s", st ? kiln_status_message(st) : "autodiff accepted an op with no rule");
    kiln_status_free(st);
    for (int k = 0; k < n_wrt; k++) free(wrt_names[k]);
    free(wrt_names);
    free(data);
    return NULL;
  }
  if (!st && opt->emit) {
    char out[1400];
    snprintf(out, sizeof out, "%s/%s.onnx", opt->emit, name);
    FILE *f = fopen(out, "wb");
    bool ok = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f)) ok = false;
    if (!ok) st = kiln_error(KILN_IO_ERROR, "cannot write %s", out);
    res->ok = !st;
    if (st) snprintf(res->why, sizeof res->why, "%s", kiln_status_message(st));
    kiln_status_free(st);
    for (int k = 0; k < n_wrt; k++) free(wrt_names[k]);
    free(wrt_names);
    free(data);
    return NULL;
  }
  int n_in = 0;
  char **in_names = NULL;
  kiln_tensor **ins = NULL, **outs = NULL;
  kiln_model *model = NULL;
  kiln_session *sess = NULL;
  if (!st) st = kiln_npz_read_file(npz, &n_in, &in_names, &ins);
  if (!st) st = kiln_model_load_memory(data, size, &model);
  kiln_session_options so = kiln_session_options_default();
  so.device = opt->device;
  so.threads = 1;
  if (!st) st = kiln_session_create(model, &so, &sess);
  outs = calloc((size_t)n_wrt + 1, sizeof *outs);
  if (!st && !outs) st = KILN_OOM();
  if (!st) st = kiln_session_run(sess, n_in, (const char *const *)in_names, (const kiln_tensor *const *)ins, n_wrt + 1, outs);
  res->ok = !st;
  res->worst = 0;
  for (int k = 0; !st && k < n_wrt; k++) {
    int idx = -1;
    for (int i = 0; i < n_in; i++)
      if (!strcmp(in_names[i], wrt_names[k])) idx = i;
    if (idx < 0) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "%s has no array '%s'", npz, wrt_names[k]);
      break;
    }
    kiln_tensor *x = ins[idx], *g = outs[k + 1];
    if (g->numel != x->numel) {
      st = kiln_error(KILN_INTERNAL, "gradient of '%s' has %lld elements, the input %lld", wrt_names[k],
                      (long long)g->numel, (long long)x->numel);
      break;
    }
    for (int64_t j = 0; !st && j < x->numel; j++) {
      double v = at(x, j), lp = 0, lm = 0;
      kiln_store_f64(x->data, x->dtype, j, v + opt->eps);
      st = loss_at(sess, n_in, (const char *const *)in_names, (const kiln_tensor *const *)ins, &lp);
      kiln_store_f64(x->data, x->dtype, j, v - opt->eps);
      if (!st) st = loss_at(sess, n_in, (const char *const *)in_names, (const kiln_tensor *const *)ins, &lm);
      kiln_store_f64(x->data, x->dtype, j, v);
      if (st) break;
      double fd = (lp - lm) / (2 * opt->eps), got = at(g, j);
      double allowed = opt->atol + opt->rtol * fabs(fd), err = fabs(got - fd);
      res->checked++;
      if (!(err <= allowed) && res->ok) {
        res->ok = false;
        snprintf(res->why, sizeof res->why, "d loss / d %s[%lld]: autodiff %.9g, finite difference %.9g (|d| %.3g > %.3g)",
                 wrt_names[k], (long long)j, got, fd, err, allowed);
      }
      if (err / allowed > res->worst || isnan(err)) res->worst = isnan(err) ? INFINITY : err / allowed;
    }
  }
  if (st) {
    res->ok = false;
    snprintf(res->why, sizeof res->why, "%s", kiln_status_message(st));
    kiln_status_free(st);
  }
  for (int k = 0; outs && k <= n_wrt; k++)
    if (outs[k]) kiln_tensor_release(outs[k]);
  free(outs);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  if (in_names) kiln_npz_free(n_in, in_names, ins);
  for (int k = 0; k < n_wrt; k++) free(wrt_names[k]);
  free(wrt_names);
  free(data);
  return NULL;
}

int main(int argc, char **argv) {
  options opt = {.device = "ref", .eps = 1e-6, .atol = 1e-5, .rtol = 1e-3};
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    const char *a = argv[first];
    if (!strcmp(a, "-v")) opt.verbose = true;
    else if (first + 1 < argc && !strcmp(a, "--device")) opt.device = argv[++first];
    else if (first + 1 < argc && !strcmp(a, "--emit")) opt.emit = argv[++first];
    else if (first + 1 < argc && !strcmp(a, "--eps")) opt.eps = atof(argv[++first]);
    else if (first + 1 < argc && !strcmp(a, "--atol")) opt.atol = atof(argv[++first]);
    else if (first + 1 < argc && !strcmp(a, "--rtol")) opt.rtol = atof(argv[++first]);
    else {
      fprintf(stderr, "usage: gradcheck [--device D] [--eps E] [--atol A] [--rtol R] [-v] CASE.onnx...\n"
                      "       gradcheck --emit DIR CASE.onnx...\n");
      return 2;
    }
  }
  if (first >= argc) {
    fprintf(stderr, "gradcheck: no cases\n");
    return 2;
  }
  int pass = 0, fail = 0;
  for (int i = first; i < argc; i++) {
    result r = {0};
    check(&opt, argv[i], &r);
    const char *base = strrchr(argv[i], '/');
    base = base ? base + 1 : argv[i];
    if (r.ok) {
      pass++;
      if (!strncmp(base, "norule_", 7)) printf("PASS %s (refused: %s)\n", base, r.why);
      else if (opt.emit) printf("EMIT %s\n", base);
      else printf("PASS %s (%lld elements, worst error %.2g of allowed)\n", base, (long long)r.checked, r.worst);
    } else {
      fail++;
      printf("FAIL %s: %s\n", base, r.why);
    }
  }
  if (opt.emit) printf("gradcheck: %d cases written to %s, %d failed\n", pass, opt.emit, fail);
  else printf("gradcheck: %d cases on %s: %d passed, %d failed\n", pass + fail, opt.device, pass, fail);
  return fail ? 1 : 0;
}
