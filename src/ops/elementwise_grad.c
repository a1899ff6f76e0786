/* Gradient rules of the elementwise family (ops/gradient.h): arithmetic,
 * activations, Where, Cast, Identity, Clip. A broadcast operand's gradient
 * is summed back to its shape (kiln_grad_unbroadcast). Each rule is the
 * textbook derivative written with graph ops; where the derivative has a
 * kink (Relu, Abs, Clip at its bounds) the value at the kink is PyTorch's:
 * Relu'(0) = 0, Abs'(0) = 0, Clip passes the gradient at its bounds. */
#include "ops/elementwise.h"
#include "ops/gradient.h"

#include <math.h>

/* dx[i] = d summed to input i's shape, when input i wants it. */
static void give(kiln_gradient_ctx *c, int i, int d) {
  if (i < c->n_inputs && c->want[i]) c->dx[i] = kiln_grad_unbroadcast(c, d, c->x[i]);
}

/* Where(cond, d, 0) */
static int mask(kiln_gradient_ctx *c, int cond, int d, kiln_dtype dt) {
  int ins[3] = {cond, d, kiln_grad_scalar(c, dt, 0.0)};
  return kiln_grad_op(c, "Where", 3, ins, 0, NULL);
}

static int mul(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Mul", a, b); }
static int sub(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Sub", a, b); }
static int div_(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Div", a, b); }
static int scal(kiln_gradient_ctx *c, kiln_dtype dt, double v) { return kiln_grad_scalar(c, dt, v); }

kiln_status_t kiln_grad_elementwise(kiln_gradient_ctx *c) {
  const kiln_node *n = kiln_grad_node(c);
  kiln_op_id id = kiln_node_op_id(n);
  int d = c->dy[0];
  if (d < 0) return NULL;
  int x = c->x[0], y = c->y[0];
  int b = c->n_inputs > 1 ? c->x[1] : -1;
  kiln_dtype dt = kiln_grad_type(c, y)->dtype;
  /* attributes, read before any emit moves the node array */
  double alpha = kiln_attr_float(n, "alpha", id == KILN_OP_LeakyRelu ? 0.01f : id == KILN_OP_HardSigmoid ? 0.2f
                                             : id == KILN_OP_Selu ? 1.67326319217681884765625f : 1.0f);
  double beta = kiln_attr_float(n, "beta", 0.5f);
  double gamma = kiln_attr_float(n, "gamma", 1.05070102214813232421875f);
  switch (id) {
    case KILN_OP_Identity: give(c, 0, d); break;
    case KILN_OP_Add:
      give(c, 0, d);
      give(c, 1, d);
      break;
    case KILN_OP_Sub:
      give(c, 0, d);
      if (c->want[1]) give(c, 1, kiln_grad_op1(c, "Neg", d));
      break;
    case KILN_OP_Mul:
      if (c->want[0]) give(c, 0, mul(c, d, b));
      if (c->want[1]) give(c, 1, mul(c, d, x));
      break;
    case KILN_OP_Div: /* y = a / b: da = d / b, db = -d * y / b */
      if (c->want[0]) give(c, 0, div_(c, d, b));
      if (c->want[1]) give(c, 1, kiln_grad_op1(c, "Neg", mul(c, d, div_(c, y, b))));
      break;
    case KILN_OP_Pow: /* y = a^b: da = d * b * a^(b-1), db = d * y * ln a */
      if (c->want[0]) give(c, 0, mul(c, d, mul(c, b, kiln_grad_op2(c, "Pow", x, sub(c, b, scal(c, kiln_grad_type(c, b)->dtype, 1.0))))));
      if (c->want[1]) give(c, 1, mul(c, d, mul(c, y, kiln_grad_op1(c, "Log", x))));
      break;
    case KILN_OP_Sum:
      for (int i = 0; i < c->n_inputs; i++) give(c, i, d);
      break;
    case KILN_OP_Mean: {
      int s = div_(c, d, scal(c, dt, c->n_inputs));
      for (int i = 0; i < c->n_inputs; i++) give(c, i, s);
      break;
    }
    case KILN_OP_Max:
    case KILN_OP_Min:
      /* Each input gets the gradient where it is the result (ties: every tied input, as numpy's
       * maximum has no winner; PyTorch splits a tie evenly, which the random inputs avoid). */
      for (int i = 0; i < c->n_inputs; i++)
        if (c->want[i]) give(c, i, mask(c, kiln_grad_op2(c, "Equal", c->x[i], y), d, dt));
      break;
    case KILN_OP_Where: /* Where(cond, a, b) */
      if (c->want[1]) give(c, 1, mask(c, c->x[0], d, dt));
      if (c->want[2]) give(c, 2, mask(c, kiln_grad_op1(c, "Not", c->x[0]), d, dt));
      break;
    case KILN_OP_Cast:
    case KILN_OP_CastLike:
      if (kiln_dtype_is_float(kiln_grad_type(c, x)->dtype)) {
        kiln_grad_attr to = KILN_GRAD_INT("to", kiln_grad_type(c, x)->dtype);
        give(c, 0, kiln_grad_op(c, "Cast", 1, &d, 1, &to));
      }
      break;
    case KILN_OP_Clip: { /* the gradient passes where min <= x <= max (inputs 1, 2: optional bounds) */
      int keep = -1;
      if (c->n_inputs > 1 && c->x[1] >= 0) keep = kiln_grad_op2(c, "GreaterOrEqual", x, c->x[1]);
      if (c->n_inputs > 2 && c->x[2] >= 0) {
        int le = kiln_grad_op2(c, "LessOrEqual", x, c->x[2]);
        keep = keep < 0 ? le : kiln_grad_op2(c, "And", keep, le);
      }
      if (c->n_inputs <= 1 && kiln_grad_node(c)->opset < 11)
        return kiln_error(KILN_UNSUPPORTED, "Clip before opset 11 (min and max as attributes) has no gradient rule");
      give(c, 0, keep < 0 ? d : mask(c, keep, d, dt));
      break;
    }
    case KILN_OP_Neg: give(c, 0, kiln_grad_op1(c, "Neg", d)); break;
    case KILN_OP_Exp: give(c, 0, mul(c, d, y)); break;
    case KILN_OP_Log: give(c, 0, div_(c, d, x)); break;
    case KILN_OP_Sqrt: give(c, 0, div_(c, d, mul(c, y, scal(c, dt, 2.0)))); break;
    case KILN_OP_Reciprocal: give(c, 0, kiln_grad_op1(c, "Neg", mul(c, d, mul(c, y, y)))); break;
    case KILN_OP_Relu: give(c, 0, mask(c, kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0)), d, dt)); break;
    case KILN_OP_LeakyRelu: {
      int pos = kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0));
      int ins[3] = {pos, d, mul(c, d, scal(c, dt, alpha))};
      give(c, 0, kiln_grad_op(c, "Where", 3, ins, 0, NULL));
      break;
    }
    case KILN_OP_Elu: { /* x > 0: d; else d * (y + alpha) */
      int pos = kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0));
      int ins[3] = {pos, d, mul(c, d, kiln_grad_op2(c, "Add", y, scal(c, dt, alpha)))};
      give(c, 0, kiln_grad_op(c, "Where", 3, ins, 0, NULL));
      break;
    }
    case KILN_OP_Sigmoid: give(c, 0, mul(c, d, mul(c, y, sub(c, scal(c, dt, 1.0), y)))); break;
    case KILN_OP_Tanh: give(c, 0, mul(c, d, sub(c, scal(c, dt, 1.0), mul(c, y, y)))); break;
    case KILN_OP_Softplus: give(c, 0, mul(c, d, kiln_grad_op1(c, "Sigmoid", x))); break;
    case KILN_OP_Abs: give(c, 0, mul(c, d, kiln_grad_op1(c, "Sign", x))); break;
    case KILN_OP_Sin: give(c, 0, mul(c, d, kiln_grad_op1(c, "Cos", x))); break;
    case KILN_OP_Cos: give(c, 0, kiln_grad_op1(c, "Neg", mul(c, d, kiln_grad_op1(c, "Sin", x)))); break;
    case KILN_OP_Erf: /* 2 / sqrt(pi) * exp(-x^2) */
      give(c, 0, mul(c, d, mul(c, scal(c, dt, 2.0 / sqrt(M_PI)), kiln_grad_op1(c, "Exp", kiln_grad_op1(c, "Neg", mul(c, x, x))))));
      break;
    case KILN_OP_HardSigmoid: { /* alpha where 0 < alpha x + beta < 1 */
      int t = kiln_grad_op2(c, "Add", mul(c, x, scal(c, dt, alpha)), scal(c, dt, beta));
      int inside = kiln_grad_op2(c, "And", kiln_grad_op2(c, "Greater", t, scal(c, dt, 0.0)),
                                 kiln_grad_op2(c, "Less", t, scal(c, dt, 1.0)));
      give(c, 0, mask(c, inside, mul(c, d, scal(c, dt, alpha)), dt));
      break;
    }
    case KILN_OP_Sinh: give(c, 0, mul(c, d, kiln_grad_op1(c, "Cosh", x))); break;
    case KILN_OP_Cosh: give(c, 0, mul(c, d, kiln_grad_op1(c, "Sinh", x))); break;
    case KILN_OP_Tan: give(c, 0, mul(c, d, kiln_grad_op2(c, "Add", scal(c, dt, 1.0), mul(c, y, y)))); break;
    case KILN_OP_Atan: give(c, 0, div_(c, d, kiln_grad_op2(c, "Add", scal(c, dt, 1.0), mul(c, x, x)))); break;
    case KILN_OP_Softsign: { /* 1 / (1 + |x|)^2 */
      int t = kiln_grad_op2(c, "Add", scal(c, dt, 1.0), kiln_grad_op1(c, "Abs", x));
      give(c, 0, div_(c, d, mul(c, t, t)));
      break;
    }
    case KILN_OP_HardSwish: { /* x (x + 3) / 6 on (-3, 3): (2x + 3) / 6; 1 above; 0 below */
      int mid = div_(c, kiln_grad_op2(c, "Add", mul(c, x, scal(c, dt, 2.0)), scal(c, dt, 3.0)), scal(c, dt, 6.0));
      int hi[3] = {kiln_grad_op2(c, "GreaterOrEqual", x, scal(c, dt, 3.0)), scal(c, dt, 1.0), mid};
      int lo[3] = {kiln_grad_op2(c, "LessOrEqual", x, scal(c, dt, -3.0)), scal(c, dt, 0.0),
                   kiln_grad_op(c, "Where", 3, hi, 0, NULL)};
      give(c, 0, mul(c, d, kiln_grad_op(c, "Where", 3, lo, 0, NULL)));
      break;
    }
    case KILN_OP_Selu: { /* gamma above 0; y + gamma alpha below */
      int pos = kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0));
      int w3[3] = {pos, scal(c, dt, gamma), kiln_grad_op2(c, "Add", y, scal(c, dt, gamma * alpha))};
      give(c, 0, mul(c, d, kiln_grad_op(c, "Where", 3, w3, 0, NULL)));
      break;
    }
    case KILN_OP_Celu: { /* 1 above 0; exp(x / alpha) below */
      int pos = kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0));
      int w3[3] = {pos, scal(c, dt, 1.0), kiln_grad_op1(c, "Exp", div_(c, x, scal(c, dt, alpha)))};
      give(c, 0, mul(c, d, kiln_grad_op(c, "Where", 3, w3, 0, NULL)));
      break;
    }
    case KILN_OP_ThresholdedRelu: give(c, 0, mask(c, kiln_grad_op2(c, "Greater", x, scal(c, dt, alpha)), d, dt)); break;
    case KILN_OP_PRelu: { /* x > 0: d; else d * slope; the slope: d * x where x <= 0 */
      int pos = kiln_grad_op2(c, "Greater", x, scal(c, dt, 0.0));
      if (c->want[0]) {
        int w3[3] = {pos, d, mul(c, d, b)};
        give(c, 0, kiln_grad_op(c, "Where", 3, w3, 0, NULL));
      }
      if (c->want[1]) {
        int w3[3] = {pos, scal(c, dt, 0.0), mul(c, d, x)};
        give(c, 1, kiln_grad_op(c, "Where", 3, w3, 0, NULL));
      }
      break;
    }
    default:
      return kiln_error(KILN_UNSUPPORTED, "no gradient rule for %s", n->op_type);
  }
  return NULL;
}
