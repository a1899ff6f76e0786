/* Elementwise family: reference kernels against double-precision formulas
 * written out here, broadcasting against explicit index arithmetic, and
 * the integer / cast corner cases the ONNX data barely covers. */
#include "ops/op.h"

#include <math.h>
#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      failures++;                                          \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

/* ---- running one node ------------------------------------------------------- */

typedef struct attr_spec {
  const char *name;
  kiln_attr_type type;
  double f;
  int64_t i;
  const char *s;
} attr_spec;

/* Runs op_type (opset) on inputs (NULL = absent); outputs[0..n_out) receive owned values.
 * Returns the kernel's status. */
static kiln_status_t run_node(const char *op_type, int opset, int n_attrs, const attr_spec *attrs, int n_in,
                              kiln_tensor **inputs, int n_out, kiln_value **outputs) {
  const kiln_op_def *def = kiln_op_find("", op_type);
  if (!def) return kiln_error(KILN_NOT_FOUND, "no op %s", op_type);
  kiln_graph *g;
  KILN_TRY(kiln_graph_new("t", NULL, &g));
  int in_ids[8], out_ids[8];
  char name[32];
  for (int i = 0; i < n_in; i++) {
    snprintf(name, sizeof name, "in%d", i);
    kiln_graph_intern_value(g, name, &in_ids[i]);
    if (!inputs[i]) in_ids[i] = -1;
  }
  for (int i = 0; i < n_out; i++) {
    snprintf(name, sizeof name, "out%d", i);
    kiln_graph_intern_value(g, name, &out_ids[i]);
  }
  int idx;
  kiln_status_t st = kiln_graph_add_node(g, "n", op_type, "", n_in, in_ids, n_out, out_ids, &idx);
  kiln_node *node = &g->nodes[idx];
  node->opset = opset;
  for (int a = 0; !st && a < n_attrs; a++) {
    kiln_attr *at;
    st = kiln_node_add_attr(node, attrs[a].name, attrs[a].type, &at);
    if (st) break;
    at->f = (float)attrs[a].f;
    at->i = attrs[a].i;
    if (attrs[a].s) {
      at->s = kiln_strdup(attrs[a].s);
      at->s_len = strlen(attrs[a].s);
    }
  }
  kiln_value *in_vals[8] = {0};
  bool wanted[8];
  for (int i = 0; !st && i < n_in; i++)
    if (inputs[i]) st = kiln_value_from_tensor(kiln_tensor_retain(inputs[i]), &in_vals[i]);
  for (int i = 0; i < n_out; i++) {
    outputs[i] = NULL;
    wanted[i] = true;
  }
  if (!st) {
    kiln_kernel_ctx ctx = {.node = node, .opset = opset, .n_inputs = n_in, .inputs = in_vals,
                           .n_outputs = n_out, .outputs = outputs, .output_wanted = wanted};
    st = def->ref_kernel(&ctx);
  }
  for (int i = 0; i < n_in; i++) kiln_value_free(in_vals[i]);
  kiln_graph_free(g);
  return st;
}

/* One input, one output tensor; NULL on error (message printed). */
static kiln_tensor *run1(const char *op, int opset, int n_attrs, const attr_spec *attrs, int n_in,
                         kiln_tensor **in) {
  kiln_value *out = NULL;
  kiln_status_t st = run_node(op, opset, n_attrs, attrs, n_in, in, 1, &out);
  if (st) {
    fprintf(stderr, "%s: %s\n", op, kiln_status_message(st));
    kiln_status_free(st);
    kiln_value_free(out);
    return NULL;
  }
  kiln_tensor *t = kiln_tensor_retain(out->tensor);
  kiln_value_free(out);
  return t;
}

static kiln_tensor *tensor(kiln_dtype dt, int rank, const int64_t *dims, const double *vals) {
  kiln_tensor *t;
  kiln_status_t st = kiln_tensor_new(dt, rank, dims, &t);
  if (st) {
    kiln_status_free(st);
    return NULL;
  }
  for (int64_t i = 0; vals && i < t->numel; i++) kiln_store_f64(t->data, dt, i, vals[i]);
  return t;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static bool close_to(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- unary ops against formulas -------------------------------------------------- */

typedef struct unary_case {
  const char *op;
  double lo, hi;
  double (*ref)(double);
} unary_case;

static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_softplus(double x) { return log1p(exp(x)); } /* log(1 + e^x), accurate for x << 0 */
static double r_softsign(double x) { return x / (1 + fabs(x)); }
static double r_neg(double x) { return -x; }
static double r_recip(double x) { return 1 / x; }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_hardswish(double x) { return x * fmax(0, fmin(1, x / 6 + 0.5)); }
static double r_round(double x) { return x - floor(x) == 0.5 ? 2 * round(x / 2) : round(x); }

static void test_unary_float(void) {
  static const unary_case cases[] = {
      {"Abs", -5, 5, fabs},          {"Acos", -1, 1, acos},          {"Acosh", 1, 5, acosh},
      {"Asin", -1, 1, asin},         {"Asinh", -5, 5, asinh},        {"Atan", -5, 5, atan},
      {"Atanh", -0.99, 0.99, atanh}, {"Ceil", -5, 5, ceil},          {"Cos", -5, 5, cos},
      {"Cosh", -5, 5, cosh},         {"Erf", -3, 3, erf},            {"Exp", -5, 5, exp},
      {"Floor", -5, 5, floor},       {"HardSwish", -5, 5, r_hardswish}, {"Log", 0.01, 5, log},
      {"Neg", -5, 5, r_neg},         {"Reciprocal", 0.1, 5, r_recip}, {"Relu", -5, 5, r_relu},
      {"Round", -5, 5, r_round},     {"Sigmoid", -10, 10, r_sigmoid}, {"Sign", -5, 5, r_sign},
      {"Sin", -5, 5, sin},           {"Sinh", -5, 5, sinh},          {"Softplus", -10, 10, r_softplus},
      {"Softsign", -5, 5, r_softsign}, {"Sqrt", 0, 5, sqrt},         {"Tan", -1.5, 1.5, tan},
      {"Tanh", -5, 5, tanh},
  };
  const kiln_dtype dts[] = {KILN_DTYPE_F32, KILN_DTYPE_F64, KILN_DTYPE_F16};
  for (size_t c = 0; c < KILN_ARRAY_SIZE(cases); c++) {
    for (size_t d = 0; d < KILN_ARRAY_SIZE(dts); d++) {
      int64_t dims[2] = {7, 9};
      double vals[63];
      for (int i = 0; i < 63; i++) vals[i] = uniform(cases[c].lo, cases[c].hi);
      vals[0] = 2.5; /* rounding ties */
      vals[1] = -0.5;
      if (cases[c].lo > -0.5) vals[0] = vals[1] = cases[c].hi; /* keep in the domain */
      kiln_tensor *x = tensor(dts[d], 2, dims, vals), *y = run1(cases[c].op, 13, 0, NULL, 1, &x);
      CHECK(y && y->dtype == dts[d] && y->numel == 63, "%s %s: bad output", cases[c].op, kiln_dtype_name(dts[d]));
      double rtol = dts[d] == KILN_DTYPE_F64 ? 1e-14 : dts[d] == KILN_DTYPE_F32 ? 1e-6 : 1e-3;
      for (int i = 0; y && i < 63; i++) {
        double xi = kiln_load_f64(x->data, dts[d], i); /* the rounded input */
        double want = cases[c].ref(xi), got = kiln_load_f64(y->data, dts[d], i);
        CHECK(close_to(got, want, rtol, rtol * 1e-3), "%s %s x=%.17g: got %.17g want %.17g", cases[c].op,
              kiln_dtype_name(dts[d]), xi, got, want);
      }
      kiln_tensor_release(x);
      kiln_tensor_release(y);
    }
  }
}

static void test_activations_with_attrs(void) {
  int64_t dims[1] = {41};
  double vals[41];
  for (int i = 0; i < 41; i++) vals[i] = -4 + 0.2 * i;
  kiln_tensor *x = tensor(KILN_DTYPE_F64, 1, dims, vals);
  struct {
    const char *op;
    attr_spec a[2];
    int n;
  } cases[] = {
      {"Elu", {{"alpha", KILN_ATTR_FLOAT, 0.5}}, 1},
      {"Celu", {{"alpha", KILN_ATTR_FLOAT, 2.0}}, 1},
      {"LeakyRelu", {{"alpha", KILN_ATTR_FLOAT, 0.25}}, 1},
      {"HardSigmoid", {{"alpha", KILN_ATTR_FLOAT, 0.5}, {"beta", KILN_ATTR_FLOAT, 0.25}}, 2},
      {"Selu", {{"alpha", KILN_ATTR_FLOAT, 2.0}, {"gamma", KILN_ATTR_FLOAT, 3.0}}, 2},
      {"Shrink", {{"lambd", KILN_ATTR_FLOAT, 1.5}, {"bias", KILN_ATTR_FLOAT, 0.5}}, 2},
      {"ThresholdedRelu", {{"alpha", KILN_ATTR_FLOAT, 1.0}}, 1},
  };
  for (size_t c = 0; c < KILN_ARRAY_SIZE(cases); c++) {
    kiln_tensor *y = run1(cases[c].op, 13, cases[c].n, cases[c].a, 1, &x);
    CHECK(y != NULL, "%s failed", cases[c].op);
    for (int i = 0; y && i < 41; i++) {
      double v = vals[i], a = cases[c].a[0].f, b = cases[c].a[1].f, want = 0;
      switch (c) {
        case 0: want = v < 0 ? a * (exp(v) - 1) : v; break;
        case 1: want = fmax(0, v) + fmin(0, a * (exp(v / a) - 1)); break;
        case 2: want = v < 0 ? a * v : v; break;
        case 3: want = fmax(0, fmin(1, a * v + b)); break;
        case 4: want = v > 0 ? b * v : b * (a * exp(v) - a); break;
        case 5: want = v < -a ? v + b : v > a ? v - b : 0; break;
        case 6: want = v > a ? v : 0; break;
      }
      double got = ((double *)y->data)[i];
      CHECK(close_to(got, want, 1e-12, 1e-12), "%s x=%g: got %.17g want %.17g", cases[c].op, v, got, want);
    }
    kiln_tensor_release(y);
  }
  kiln_tensor_release(x);
}

/* ---- broadcasting ---------------------------------------------------------------- */

static void test_broadcast_add(void) {
  int64_t da[3] = {2, 1, 4}, db[2] = {3, 1};
  double va[8], vb[3];
  for (int i = 0; i < 8; i++) va[i] = i;
  for (int i = 0; i < 3; i++) vb[i] = 100 * (i + 1);
  kiln_tensor *in[2] = {tensor(KILN_DTYPE_F32, 3, da, va), tensor(KILN_DTYPE_F32, 2, db, vb)};
  kiln_tensor *y = run1("Add", 14, 0, NULL, 2, in);
  CHECK(y && y->rank == 3 && y->dims[0] == 2 && y->dims[1] == 3 && y->dims[2] == 4, "Add broadcast shape");
  for (int i = 0; y && i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) {
        float got = ((float *)y->data)[(i * 3 + j) * 4 + k];
        float want = (float)(va[i * 4 + k] + vb[j]);
        CHECK(got == want, "Add[%d,%d,%d] = %g, want %g", i, j, k, got, want);
      }
  kiln_tensor_release(y);

  /* incompatible shapes are an error */
  int64_t dc[1] = {5};
  kiln_tensor *bad[2] = {in[0], tensor(KILN_DTYPE_F32, 1, dc, NULL)};
  kiln_value *out = NULL;
  kiln_status_t st = run_node("Add", 14, 0, NULL, 2, bad, 1, &out);
  CHECK(st != NULL, "Add [2,1,4]+[5] should fail");
  kiln_status_free(st);
  kiln_value_free(out);
  kiln_tensor_release(bad[1]);

  /* opset 6: B (3) aligned at axis 1 of A (2,3,4) */
  int64_t dl[3] = {2, 3, 4}, dm[1] = {3};
  double vl[24];
  for (int i = 0; i < 24; i++) vl[i] = i;
  kiln_tensor *leg[2] = {tensor(KILN_DTYPE_F32, 3, dl, vl), tensor(KILN_DTYPE_F32, 1, dm, vb)};
  attr_spec at[2] = {{"broadcast", KILN_ATTR_INT, 0, 1}, {"axis", KILN_ATTR_INT, 0, 1}};
  y = run1("Mul", 6, 2, at, 2, leg);
  CHECK(y && y->rank == 3, "legacy Mul");
  for (int i = 0; y && i < 24; i++)
    CHECK(((float *)y->data)[i] == (float)(vl[i] * vb[(i / 4) % 3]), "legacy Mul element %d", i);
  kiln_tensor_release(y);
  kiln_tensor_release(leg[0]);
  kiln_tensor_release(leg[1]);
  kiln_tensor_release(in[0]);
  kiln_tensor_release(in[1]);
}

static void test_variadic_and_where(void) {
  int64_t d0[2] = {2, 3}, d1[1] = {3}, d2[2] = {2, 1};
  double v0[6] = {1, 5, 3, -2, 8, 0}, v1[3] = {4, 4, 4}, v2[2] = {2, 9};
  kiln_tensor *in[3] = {tensor(KILN_DTYPE_F32, 2, d0, v0), tensor(KILN_DTYPE_F32, 1, d1, v1),
                        tensor(KILN_DTYPE_F32, 2, d2, v2)};
  kiln_tensor *mx = run1("Max", 13, 0, NULL, 3, in), *mean = run1("Mean", 13, 0, NULL, 3, in);
  for (int i = 0; mx && mean && i < 6; i++) {
    double a = v0[i], b = v1[i % 3], c = v2[i / 3];
    CHECK(((float *)mx->data)[i] == (float)fmax(a, fmax(b, c)), "Max element %d", i);
    CHECK(((float *)mean->data)[i] == (float)((a + b + c) / 3), "Mean element %d", i);
  }
  kiln_tensor_release(mx);
  kiln_tensor_release(mean);

  double vc[3] = {1, 0, 1};
  kiln_tensor *w[3] = {tensor(KILN_DTYPE_BOOL, 1, d1, vc), in[0], in[2]};
  kiln_tensor *y = run1("Where", 16, 0, NULL, 3, w);
  for (int i = 0; y && i < 6; i++)
    CHECK(((float *)y->data)[i] == (float)(vc[i % 3] ? v0[i] : v2[i / 3]), "Where element %d", i);
  kiln_tensor_release(y);
  kiln_tensor_release(w[0]);
  for (int k = 0; k < 3; k++) kiln_tensor_release(in[k]);
}

/* ---- integers ---------------------------------------------------------------------- */

static void test_integers(void) {
  int64_t d[1] = {6};
  double a[6] = {-4, 7, 5, 4, -7, 8}, b[6] = {2, -3, 8, -2, 3, 5};
  kiln_tensor *in[2] = {tensor(KILN_DTYPE_I32, 1, d, a), tensor(KILN_DTYPE_I32, 1, d, b)};
  attr_spec fm = {"fmod", KILN_ATTR_INT, 0, 1};
  kiln_tensor *div = run1("Div", 14, 0, NULL, 2, in), *mod = run1("Mod", 13, 0, NULL, 2, in),
              *fmod_ = run1("Mod", 13, 1, &fm, 2, in);
  for (int i = 0; div && mod && fmod_ && i < 6; i++) {
    int32_t x = (int32_t)a[i], y = (int32_t)b[i];
    int32_t pymod = ((x % y) + y) % y;
    CHECK(((int32_t *)div->data)[i] == x / y, "Div %d/%d", x, y);
    CHECK(((int32_t *)mod->data)[i] == pymod, "Mod %d %% %d = %d", x, y, ((int32_t *)mod->data)[i]);
    CHECK(((int32_t *)fmod_->data)[i] == x % y, "fmod %d %% %d", x, y);
  }
  kiln_tensor_release(div);
  kiln_tensor_release(mod);
  kiln_tensor_release(fmod_);
  kiln_tensor_release(in[0]);
  kiln_tensor_release(in[1]);

  /* INT64_MIN / -1 wraps; division by zero is an error, not a trap */
  int64_t d1[1] = {1};
  kiln_tensor *m[2] = {tensor(KILN_DTYPE_I64, 1, d1, NULL), tensor(KILN_DTYPE_I64, 1, d1, NULL)};
  ((int64_t *)m[0]->data)[0] = INT64_MIN;
  ((int64_t *)m[1]->data)[0] = -1;
  kiln_tensor *q = run1("Div", 14, 0, NULL, 2, m);
  CHECK(q && ((int64_t *)q->data)[0] == INT64_MIN, "INT64_MIN / -1");
  kiln_tensor_release(q);
  ((int64_t *)m[1]->data)[0] = 0;
  kiln_value *out = NULL;
  kiln_status_t st = run_node("Div", 14, 0, NULL, 2, m, 1, &out);
  CHECK(st != NULL, "integer division by zero should fail");
  kiln_status_free(st);
  kiln_value_free(out);

  /* uint8 wraps; Pow of ints is exact */
  double ua[3] = {200, 3, 7}, ub[3] = {100, 5, 2};
  int64_t d3[1] = {3};
  kiln_tensor *u[2] = {tensor(KILN_DTYPE_U8, 1, d3, ua), tensor(KILN_DTYPE_U8, 1, d3, ub)};
  kiln_tensor *s = run1("Add", 14, 0, NULL, 2, u);
  CHECK(s && ((uint8_t *)s->data)[0] == 44 && ((uint8_t *)s->data)[1] == 8, "uint8 Add wraps");
  kiln_tensor_release(s);
  ((int64_t *)m[0]->data)[0] = 3;
  ((int64_t *)m[1]->data)[0] = 39;
  kiln_tensor *p = run1("Pow", 15, 0, NULL, 2, m);
  CHECK(p && ((int64_t *)p->data)[0] == 4052555153018976267LL, "3^39 exact");
  kiln_tensor_release(p);
  attr_spec dir = {"direction", KILN_ATTR_STRING, 0, 0, "LEFT"};
  kiln_tensor *sh = run1("BitShift", 11, 1, &dir, 2, u);
  CHECK(sh && ((uint8_t *)sh->data)[1] == (uint8_t)(3 << 5) && ((uint8_t *)sh->data)[2] == 28, "BitShift LEFT");
  kiln_tensor_release(sh);
  for (int k = 0; k < 2; k++) {
    kiln_tensor_release(m[k]);
    kiln_tensor_release(u[k]);
  }
}

/* ---- Cast ---------------------------------------------------------------------------- */

static void test_cast(void) {
  int64_t d[1] = {8};
  float fv[8] = {0.039187793f, 1e-5f, 123456789.0f, -2.5f, 1e20f, 0.0f, 100.0f, 0.1f};
  const char *want[8] = {"0.039187793", "1e-05", "123456790.0", "-2.5", "1e+20", "0.0", "100.0", "0.1"};
  kiln_tensor *x = tensor(KILN_DTYPE_F32, 1, d, NULL);
  memcpy(x->data, fv, sizeof fv);
  attr_spec to_str = {"to", KILN_ATTR_INT, 0, KILN_DTYPE_STRING};
  kiln_tensor *s = run1("Cast", 13, 1, &to_str, 1, &x);
  for (int i = 0; s && i < 8; i++) {
    const char *got = ((char **)s->data)[i];
    CHECK(got && !strcmp(got, want[i]), "float %g -> \"%s\", want \"%s\"", fv[i], got ? got : "(null)", want[i]);
  }
  /* and back */
  attr_spec to_f = {"to", KILN_ATTR_INT, 0, KILN_DTYPE_F32};
  kiln_tensor *back = s ? run1("Cast", 13, 1, &to_f, 1, &s) : NULL;
  for (int i = 0; back && i < 8; i++) CHECK(((float *)back->data)[i] == fv[i], "string -> float element %d", i);
  kiln_tensor_release(back);
  kiln_tensor_release(s);

  /* float -> int truncates, -> bool is != 0; Cast-1 names the type */
  attr_spec to_i8 = {"to", KILN_ATTR_STRING, 0, 0, "INT8"};
  kiln_tensor *i8 = run1("Cast", 1, 1, &to_i8, 1, &x);
  CHECK(i8 && i8->dtype == KILN_DTYPE_I8 && ((int8_t *)i8->data)[3] == -2 && ((int8_t *)i8->data)[6] == 100,
        "float -> int8");
  kiln_tensor_release(i8);

  /* f64 -> f16 rounds once, to nearest even */
  double hv[3] = {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65520.0};
  int64_t d3[1] = {3};
  kiln_tensor *h = tensor(KILN_DTYPE_F64, 1, d3, hv);
  attr_spec to_h = {"to", KILN_ATTR_INT, 0, KILN_DTYPE_F16};
  kiln_tensor *hh = run1("Cast", 13, 1, &to_h, 1, &h);
  CHECK(hh && ((uint16_t *)hh->data)[0] == 0x3c00 && ((uint16_t *)hh->data)[1] == 0x3c02 &&
            ((uint16_t *)hh->data)[2] == 0x7c00,
        "f64 -> f16 rounding");
  kiln_tensor_release(hh);
  kiln_tensor_release(h);
  kiln_tensor_release(x);
}

static void test_clip_int(void) {
  int64_t d[1] = {5}, d0[1] = {1};
  double v[5] = {-100, -3, 0, 7, 120}, lo[1] = {-5}, hi[1] = {100};
  kiln_tensor *in[3] = {tensor(KILN_DTYPE_I8, 1, d, v), NULL, tensor(KILN_DTYPE_I8, 1, d0, hi)};
  kiln_tensor *y = run1("Clip", 13, 0, NULL, 3, in);
  double want1[5] = {-100, -3, 0, 7, 100};
  for (int i = 0; y && i < 5; i++) CHECK(((int8_t *)y->data)[i] == want1[i], "Clip max-only element %d", i);
  kiln_tensor_release(y);
  in[1] = tensor(KILN_DTYPE_I8, 1, d0, lo);
  y = run1("Clip", 13, 0, NULL, 3, in);
  double want2[5] = {-5, -3, 0, 7, 100};
  for (int i = 0; y && i < 5; i++) CHECK(((int8_t *)y->data)[i] == want2[i], "Clip element %d", i);
  kiln_tensor_release(y);
  for (int k = 0; k < 3; k++) kiln_tensor_release(in[k]);
}

/* Bad inputs are errors with a message, never crashes. */
static void expect_error(const char *op, int opset, int n_attrs, const attr_spec *attrs, int n_in, kiln_tensor **in,
                         const char *what) {
  kiln_value *out = NULL;
  kiln_status_t st = run_node(op, opset, n_attrs, attrs, n_in, in, 1, &out);
  CHECK(st != NULL, "%s: %s should fail", op, what);
  kiln_status_free(st);
  kiln_value_free(out);
}

static void test_errors(void) {
  int64_t d2[1] = {2}, d3[1] = {3};
  kiln_tensor *f = tensor(KILN_DTYPE_F32, 1, d2, NULL), *i = tensor(KILN_DTYPE_I32, 1, d2, NULL),
              *f3 = tensor(KILN_DTYPE_F32, 1, d3, NULL), *s = tensor(KILN_DTYPE_STRING, 1, d2, NULL);
  expect_error("Add", 14, 0, NULL, 2, (kiln_tensor *[]){f, i}, "f32 + i32");
  expect_error("Add", 6, 0, NULL, 2, (kiln_tensor *[]){f, f3}, "opset 6 without broadcast=1, shapes differ");
  expect_error("Sqrt", 13, 0, NULL, 1, (kiln_tensor *[]){i}, "Sqrt of i32");
  expect_error("Where", 16, 0, NULL, 3, (kiln_tensor *[]){f, f, f}, "float condition");
  expect_error("Clip", 13, 0, NULL, 2, (kiln_tensor *[]){f, f3}, "non-scalar min");
  expect_error("PRelu", 16, 0, NULL, 2, (kiln_tensor *[]){f, f3}, "slope [3] for X [2]");
  attr_spec bad_dir = {"direction", KILN_ATTR_STRING, 0, 0, "UP"};
  expect_error("BitShift", 11, 1, &bad_dir, 2, (kiln_tensor *[]){i, i}, "direction UP");
  kiln_tensor_set_string(s, 0, "1.5", 3);
  kiln_tensor_set_string(s, 1, "Hello", 5);
  attr_spec to_f = {"to", KILN_ATTR_INT, 0, KILN_DTYPE_F32};
  expect_error("Cast", 13, 1, &to_f, 1, &s, "\"Hello\" to float");
  attr_spec to_bad = {"to", KILN_ATTR_INT, 0, 99};
  expect_error("Cast", 13, 1, &to_bad, 1, &f, "to=99");
  expect_error("Abs", 13, 0, NULL, 1, (kiln_tensor *[]){NULL}, "absent input");
  kiln_tensor_release(f);
  kiln_tensor_release(i);
  kiln_tensor_release(f3);
  kiln_tensor_release(s);
}

/* Identity passes sequences through, sharing the tensors. */
static void test_identity_sequence(void) {
  const kiln_op_def *def = kiln_op_find("", "Identity");
  kiln_value *seq = NULL, *out = NULL;
  int64_t d[1] = {2};
  kiln_status_t st = kiln_value_new_sequence(KILN_DTYPE_F32, &seq);
  kiln_tensor *t = tensor(KILN_DTYPE_F32, 1, d, NULL);
  if (!st) st = kiln_value_seq_insert(seq, -1, t);
  bool wanted = true;
  kiln_value *ins[1] = {seq};
  kiln_kernel_ctx ctx = {.node = NULL, .opset = 16, .n_inputs = 1, .inputs = ins, .n_outputs = 1,
                         .outputs = &out, .output_wanted = &wanted};
  if (!st) st = def->ref_kernel(&ctx);
  CHECK(!st && out && out->kind == KILN_VALUE_SEQUENCE && out->n_items == 1 && out->items[0] == t,
        "Identity of a sequence");
  kiln_status_free(st);
  kiln_value_free(out);
  kiln_value_free(seq);
}

static void test_infer(void) {
  const kiln_op_def *def = kiln_op_find("", "Add");
  kiln_type a, b, out;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&out, 0, sizeof out);
  kiln_type_init_tensor(&a, KILN_DTYPE_F32, 3, (int64_t[]){2, 1, -1});
  kiln_type_init_tensor(&b, KILN_DTYPE_F32, 2, (int64_t[]){3, 4});
  const kiln_type *ins[2] = {&a, &b};
  const kiln_tensor *consts[2] = {NULL, NULL};
  kiln_infer_ctx ctx = {.node = NULL, .opset = 14, .n_inputs = 2, .inputs = ins, .consts = consts,
                        .n_outputs = 1, .outputs = &out};
  kiln_status_t st = def->infer(&ctx);
  CHECK(!st && out.dtype == KILN_DTYPE_F32 && out.rank == 3 && out.dims[0] == 2 && out.dims[1] == 3 &&
            out.dims[2] == 4,
        "infer Add [2,1,?]+[3,4]");
  kiln_status_free(st);
  kiln_type_clear(&out);
}

int main(void) {
  test_unary_float();
  test_activations_with_attrs();
  test_broadcast_add();
  test_variadic_and_where();
  test_integers();
  test_cast();
  test_clip_int();
  test_errors();
  test_identity_sequence();
  test_infer();
  if (failures) {
    fprintf(stderr, "test_elementwise: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_elementwise: ok\n");
  return 0;
}
