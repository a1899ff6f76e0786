/* Gradient rules (ops/gradient.h) of the fused ops (domain kiln, ops/fused.c):
 *
 *   kiln.Gelu            none: 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi);
 *                        tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 c x^2),
 *                        t = tanh(sqrt(2 / pi) (x + c x^3)), c = 0.044715.
 *   kiln.FusedAttention  the attention pattern's backward with the softmax
 *                        recomputed from Q and K (as flash attention's
 *                        backward does, instead of keeping [M, N] per head):
 *                        P = softmax(scale Q K^T + mask), dV = P^T dY,
 *                        dS = P (dP - rowsum(dP P)), dP = dY V^T,
 *                        dQ = scale dS K, dK = scale dS^T Q, dmask = dS;
 *                        each summed back over the batch axes it was
 *                        broadcast along.
 */
#include "ops/gradient.h"

#include <math.h>

static int mul(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Mul", a, b); }
static int add(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Add", a, b); }
static int sc(kiln_gradient_ctx *c, kiln_dtype dt, double v) { return kiln_grad_scalar(c, dt, v); }

kiln_status_t kiln_grad_gelu(kiln_gradient_ctx *c) {
  int d = c->dy[0], x = c->x[0];
  if (d < 0 || !c->want[0]) return NULL;
  bool tanh_mode = !strcmp(kiln_attr_string(kiln_grad_node(c), "approximate", "none"), "tanh");
  kiln_dtype dt = kiln_grad_type(c, x)->dtype;
  int dgelu;
  if (!tanh_mode) {
    int cdf = mul(c, sc(c, dt, 0.5), add(c, sc(c, dt, 1.0), kiln_grad_op1(c, "Erf", mul(c, x, sc(c, dt, M_SQRT1_2)))));
    int pdf = mul(c, sc(c, dt, 1.0 / sqrt(2.0 * M_PI)), kiln_grad_op1(c, "Exp", mul(c, mul(c, x, x), sc(c, dt, -0.5))));
    dgelu = add(c, cdf, mul(c, x, pdf));
  } else {
    const double k = sqrt(2.0 / M_PI), cc = 0.044715;
    int x2 = mul(c, x, x);
    int t = kiln_grad_op1(c, "Tanh", mul(c, sc(c, dt, k), add(c, x, mul(c, sc(c, dt, cc), mul(c, x2, x)))));
    int left = mul(c, sc(c, dt, 0.5), add(c, sc(c, dt, 1.0), t));
    int sech2 = kiln_grad_op2(c, "Sub", sc(c, dt, 1.0), mul(c, t, t));
    int inner = mul(c, sc(c, dt, k), add(c, sc(c, dt, 1.0), mul(c, sc(c, dt, 3.0 * cc), x2)));
    dgelu = add(c, left, mul(c, mul(c, sc(c, dt, 0.5), x), mul(c, sech2, inner)));
  }
  c->dx[0] = mul(c, d, dgelu);
  return c->status;
}


kiln_status_t kiln_grad_attention(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  float scale = kiln_attr_float(n, "scale", 1.0f);
  bool transpose_k = kiln_attr_int(n, "transpose_k", 1) != 0;
  int q = c->x[0], k = c->x[1], v = c->x[2], mask = c->n_inputs > 3 ? c->x[3] : -1;
  kiln_dtype dt = kiln_grad_type(c, q)->dtype;
  int kt = transpose_k ? kiln_grad_swap_last2(c, k) : k; /* [.., D, N] */
  int s = mul(c, kiln_grad_op2(c, "MatMul", q, kt), sc(c, dt, scale));
  if (mask >= 0) s = add(c, s, mask);
  kiln_grad_attr ax = KILN_GRAD_INT("axis", -1);
  int out = -1;
  int p = kiln_grad_op_ex(c, "Softmax", c->opset > 13 ? c->opset : 13, 1, &s, 1, &out, 1, &ax); /* [.., M, N] */
  if (c->want[2]) c->dx[2] = kiln_grad_unbroadcast(c, kiln_grad_op2(c, "MatMul", kiln_grad_swap_last2(c, p), d), v);
  if (!c->want[0] && !c->want[1] && !(mask >= 0 && c->want[3])) return c->status;
  int dp = kiln_grad_op2(c, "MatMul", d, kiln_grad_swap_last2(c, v));
  int64_t last = -1;
  int ds = mul(c, p, kiln_grad_op2(c, "Sub", dp, kiln_grad_reduce_sum(c, mul(c, dp, p), 1, &last, true)));
  if (mask >= 0 && c->want[3]) c->dx[3] = kiln_grad_unbroadcast(c, ds, mask);
  int dss = mul(c, ds, sc(c, dt, scale));
  if (c->want[0]) c->dx[0] = kiln_grad_unbroadcast(c, kiln_grad_op2(c, "MatMul", dss, kiln_grad_swap_last2(c, kt)), q);
  if (c->want[1]) {
    int g = transpose_k ? kiln_grad_op2(c, "MatMul", kiln_grad_swap_last2(c, dss), q)  /* [.., N, D] */
                        : kiln_grad_op2(c, "MatMul", kiln_grad_swap_last2(c, q), dss); /* [.., D, N] */
    c->dx[1] = kiln_grad_unbroadcast(c, g, k);
  }
  return c->status;
}
