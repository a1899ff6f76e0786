/* Gradient rules (ops/gradient.h) of the contractions (MatMul, Gemm), the
 * sum-like reductions (ReduceSum, ReduceMean, Softmax, LogSoftmax) and the
 * shape and movement ops (Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
 * Concat, Expand, Gather, Slice, Split, Pad): what each op did to the
 * shape, undone on the gradient. */
#include "ops/gradient.h"
#include "passes/passes_opt.h"


/* v reshaped to dims (rank r). */
static int reshape_to(kiln_gradient_ctx *c, int v, int r, const int64_t *dims) {
  return kiln_grad_op2(c, "Reshape", v, kiln_grad_ints(c, r, dims));
}

/* MatMul (numpy matmul): a 1-D operand is a matrix of one row (A) or one
 * column (B) whose axis the result drops; batch axes broadcast. With A2, B2
 * the 2-D-or-more forms and D2 the gradient with the dropped axes back:
 * dA2 = D2 B2^T, dB2 = A2^T D2, each summed over the batch axes its operand
 * was broadcast along, then reshaped to the operand. A 2-D B (a linear
 * layer's weights, A maybe [batch, sequence, features]) takes Gemms over A
 * and D with their batch axes folded into the rows: dA' = D' B^T and
 * dB = A'^T D' (the sum over the batch is the contraction itself, where
 * the batched form makes a [batch, K, N] product and then sums it), the
 * transposes as Gemm's transA/transB, which the GEMM reads in place
 * (a MatMul's Transpose operand is a copy of its own). */
kiln_status_t kiln_grad_matmul(kiln_gradient_ctx *c) {
  int d = c->dy[0], a = c->x[0], b = c->x[1];
  if (d < 0) return NULL;
  const kiln_type *ta = kiln_grad_type(c, a), *tb = kiln_grad_type(c, b), *ty = kiln_grad_type(c, c->y[0]);
  if (!kiln_opt_shape_known(ta) || !kiln_opt_shape_known(tb) || !kiln_opt_shape_known(ty))
    return kiln_error(KILN_UNSUPPORTED, "MatMul's gradient needs static shapes");
  int ra = ta->rank, rb = tb->rank;
  int64_t a2[KILN_MAX_RANK], b2[KILN_MAX_RANK], d2[KILN_MAX_RANK + 2];
  int64_t da[KILN_MAX_RANK], db[KILN_MAX_RANK];
  int ra2 = ra, rb2 = rb;
  memcpy(a2, ta->dims, sizeof(int64_t) * (size_t)ra);
  memcpy(b2, tb->dims, sizeof(int64_t) * (size_t)rb);
  memcpy(da, ta->dims, sizeof(int64_t) * (size_t)ra);
  memcpy(db, tb->dims, sizeof(int64_t) * (size_t)rb);
  if (ra == 1) a2[0] = 1, a2[1] = ta->dims[0], ra2 = 2;
  if (rb == 1) b2[0] = tb->dims[0], b2[1] = 1, rb2 = 2;
  int rd = ty->rank + (ra == 1) + (rb == 1);
  memcpy(d2, ty->dims, sizeof(int64_t) * (size_t)ty->rank);
  if (ra == 1 && rb == 1) d2[0] = 1, d2[1] = 1;
  else if (ra == 1) d2[rd - 1] = d2[rd - 2], d2[rd - 2] = 1;
  else if (rb == 1) d2[rd - 1] = 1;
  int dd = rd == ty->rank ? d : reshape_to(c, d, rd, d2);
  int av = ra2 == ra ? a : reshape_to(c, a, ra2, a2);
  int bv = rb2 == rb ? b : reshape_to(c, b, rb2, b2);
  bool flat = rb2 == 2 && ra2 >= 2; /* the Gemm forms */
  int64_t af[2] = {-1, a2[ra2 - 1]}, df[2] = {-1, b2[1]};
  int a_flat = flat ? (ra2 > 2 ? reshape_to(c, av, 2, af) : av) : -1;
  int d_flat = flat ? (ra2 > 2 ? reshape_to(c, dd, 2, df) : dd) : -1;
  if (c->want[0] && flat) {
    kiln_grad_attr tr = KILN_GRAD_INT("transB", 1);
    int g = kiln_grad_op(c, "Gemm", 2, (int[]){d_flat, bv}, 1, &tr);
    c->dx[0] = reshape_to(c, g, ra, da);
  } else if (c->want[0]) {
    int g = kiln_grad_op2(c, "MatMul", dd, kiln_grad_swap_last2(c, bv));
    g = kiln_grad_unbroadcast(c, g, av);
    c->dx[0] = ra2 == ra ? g : reshape_to(c, g, ra, da);
  }
  if (c->want[1]) {
    int g;
    if (flat) {
      kiln_grad_attr tr = KILN_GRAD_INT("transA", 1);
      g = kiln_grad_op(c, "Gemm", 2, (int[]){a_flat, d_flat}, 1, &tr);
    } else {
      g = kiln_grad_unbroadcast(c, kiln_grad_op2(c, "MatMul", kiln_grad_swap_last2(c, av), dd), bv);
    }
    c->dx[1] = rb2 == rb ? g : reshape_to(c, g, rb, db);
  }
  return NULL;
}

/* Y = alpha A' B' + beta C, A' = transA ? A^T : A, B' likewise:
 *   dA = alpha D B'^T   (transA: alpha B' D^T)
 *   dB = alpha A'^T D   (transB: alpha D^T A')
 *   dC = beta D summed back to C's shape. Each as one Gemm. */
kiln_status_t kiln_grad_gemm(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  float alpha = kiln_attr_float(n, "alpha", 1.0f), beta = kiln_attr_float(n, "beta", 1.0f);
  int64_t ta = kiln_attr_int(n, "transA", 0), tb = kiln_attr_int(n, "transB", 0);
  int a = c->x[0], b = c->x[1];
  if (c->want[0]) {
    kiln_grad_attr at[3] = {KILN_GRAD_FLOAT("alpha", alpha), KILN_GRAD_INT("transA", ta ? tb : 0),
                            KILN_GRAD_INT("transB", ta ? 1 : !tb)};
    int ins[2] = {ta ? b : d, ta ? d : b};
    c->dx[0] = kiln_grad_op(c, "Gemm", 2, ins, 3, at);
  }
  if (c->want[1]) {
    kiln_grad_attr at[3] = {KILN_GRAD_FLOAT("alpha", alpha), KILN_GRAD_INT("transA", tb ? 1 : !ta),
                            KILN_GRAD_INT("transB", tb ? ta : 0)};
    int ins[2] = {tb ? d : a, tb ? a : d};
    c->dx[1] = kiln_grad_op(c, "Gemm", 2, ins, 3, at);
  }
  if (c->n_inputs > 2 && c->x[2] >= 0 && c->want[2]) {
    int s = beta == 1.0f ? d : kiln_grad_op2(c, "Mul", d, kiln_grad_scalar(c, kiln_grad_type(c, d)->dtype, beta));
    c->dx[2] = kiln_grad_unbroadcast(c, s, c->x[2]);
  }
  return NULL;
}

/* A Reduce node's axes (normalized, as a mask over x's rank); false when
 * they are a run-time input. */
static bool reduce_axes(kiln_gradient_ctx *c, bool *mask, int rank) {
  const kiln_node *n = kiln_grad_node(c);
  bool input = !strcmp(n->op_type, "ReduceSum") ? n->opset >= 13 : n->opset >= 18;
  int64_t axes[KILN_MAX_RANK];
  int na = 0;
  if (input && c->n_inputs > 1 && c->x[1] >= 0) {
    const kiln_tensor *t = kiln_grad_known(c, c->x[1]);
    if (!t || t->numel > rank) return false;
    for (int64_t i = 0; i < t->numel; i++) axes[na++] = kiln_load_i64(t->data, t->dtype, i);
  } else if (!input) {
    int cnt = 0;
    const int64_t *at = kiln_attr_ints(n, "axes", &cnt);
    for (int i = 0; at && i < cnt && i < rank; i++) axes[na++] = at[i];
  }
  bool noop = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
  for (int i = 0; i < rank; i++) mask[i] = na == 0 && !noop;
  for (int i = 0; i < na; i++) mask[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
  return true;
}

/* Reduce*: the gradient spread back over the reduced axes (Reshape to the
 * kept-dims shape, then broadcast): as is for the sum, over the count for
 * the mean, times each element's derivative for the others (2x, sign x,
 * x / L2, prod / x, 1 / sum, exp(x - LogSumExp), the max's or min's
 * elements). */
kiln_status_t kiln_grad_reduce(kiln_gradient_ctx *c) {
  int d = c->dy[0], x = c->x[0];
  if (d < 0 || !c->want[0]) return NULL;
  const kiln_type *tx = kiln_grad_type(c, x);
  int rank = tx->rank;
  kiln_dtype dt = tx->dtype;
  int64_t xdims[KILN_MAX_RANK], kept[KILN_MAX_RANK];
  memcpy(xdims, tx->dims, sizeof(int64_t) * (size_t)rank);
  bool mask[KILN_MAX_RANK];
  if (!reduce_axes(c, mask, rank)) return kiln_error(KILN_UNSUPPORTED, "the reduced axes are not a constant");
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    kept[i] = mask[i] ? 1 : xdims[i];
    if (mask[i]) count *= xdims[i];
  }
  kiln_op_id id = kiln_node_op_id(kiln_grad_node(c));
  int g = reshape_to(c, d, rank, kept);
  int yk = id == KILN_OP_ReduceSum || id == KILN_OP_ReduceMean ? -1 : reshape_to(c, c->y[0], rank, kept);
  switch (id) {
    case KILN_OP_ReduceSum: c->dx[0] = kiln_grad_op2(c, "Expand", g, kiln_grad_ints(c, rank, xdims)); break;
    case KILN_OP_ReduceMean:
      g = kiln_grad_op2(c, "Div", g, kiln_grad_scalar(c, dt, (double)count));
      c->dx[0] = kiln_grad_op2(c, "Expand", g, kiln_grad_ints(c, rank, xdims));
      break;
    case KILN_OP_ReduceSumSquare:
      c->dx[0] = kiln_grad_op2(c, "Mul", kiln_grad_op2(c, "Mul", x, kiln_grad_scalar(c, dt, 2.0)), g);
      break;
    case KILN_OP_ReduceL1: c->dx[0] = kiln_grad_op2(c, "Mul", kiln_grad_op1(c, "Sign", x), g); break;
    case KILN_OP_ReduceL2: c->dx[0] = kiln_grad_op2(c, "Mul", kiln_grad_op2(c, "Div", x, yk), g); break;
    case KILN_OP_ReduceProd: c->dx[0] = kiln_grad_op2(c, "Mul", kiln_grad_op2(c, "Div", yk, x), g); break;
    case KILN_OP_ReduceLogSum: c->dx[0] = kiln_grad_op2(c, "Expand", kiln_grad_op2(c, "Div", g, kiln_grad_op1(c, "Exp", yk)),
                                                        kiln_grad_ints(c, rank, xdims)); break;
    case KILN_OP_ReduceLogSumExp:
      c->dx[0] = kiln_grad_op2(c, "Mul", kiln_grad_op1(c, "Exp", kiln_grad_op2(c, "Sub", x, yk)), g);
      break;
    case KILN_OP_ReduceMax:
    case KILN_OP_ReduceMin: { /* to the elements equal to the result (each of a tie: random inputs have none) */
      int w3[3] = {kiln_grad_op2(c, "Equal", x, yk), g, kiln_grad_scalar(c, dt, 0.0)};
      c->dx[0] = kiln_grad_op(c, "Where", 3, w3, 0, NULL);
      break;
    }
    default: return kiln_error(KILN_UNSUPPORTED, "no gradient rule for %s", kiln_grad_node(c)->op_type);
  }
  return NULL;
}

/* Softmax: dx = y (d - sum(d y)); LogSoftmax: dx = d - exp(y) sum(d); the
 * sums over the op's axis (opset 13+), or over every axis from it (before
 * 13 the input was coerced to 2-D there). */
kiln_status_t kiln_grad_softmax(kiln_gradient_ctx *c) {
  int d = c->dy[0], y = c->y[0];
  if (d < 0 || !c->want[0]) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  int rank = kiln_grad_type(c, y)->rank;
  int64_t axis = kiln_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
  bool coerced = n->opset < 13; /* before 13 the input was coerced to 2-D at the axis */
  if (axis < 0) axis += rank;
  bool log = kiln_node_is(n, KILN_OP_LogSoftmax);
  int64_t axes[KILN_MAX_RANK];
  int na = 0;
  for (int64_t i = axis; i < (coerced ? rank : axis + 1); i++) axes[na++] = i;
  if (log) {
    int s = kiln_grad_reduce_sum(c, d, na, axes, true);
    c->dx[0] = kiln_grad_op2(c, "Sub", d, kiln_grad_op2(c, "Mul", kiln_grad_op1(c, "Exp", y), s));
  } else {
    int s = kiln_grad_reduce_sum(c, kiln_grad_op2(c, "Mul", d, y), na, axes, true);
    c->dx[0] = kiln_grad_op2(c, "Mul", y, kiln_grad_op2(c, "Sub", d, s));
  }
  return NULL;
}

/* Integer constants of input i (or attribute `attr` when the op's opset
 * takes it so); *n = -1 when absent, false when not a constant. */
static bool const_ints(kiln_gradient_ctx *c, int i, const char *attr, bool from_attr, int64_t *out, int *n) {
  *n = -1;
  if (from_attr) {
    int cnt = 0;
    const int64_t *a = kiln_attr_ints(kiln_grad_node(c), attr, &cnt);
    if (a) {
      if (cnt > KILN_MAX_RANK) return false;
      memcpy(out, a, sizeof(int64_t) * (size_t)cnt);
      *n = cnt;
    }
    return true;
  }
  if (i >= c->n_inputs || c->x[i] < 0) return true;
  const kiln_tensor *t = kiln_grad_known(c, c->x[i]);
  if (!t || t->numel > 2 * KILN_MAX_RANK) return false;
  for (int64_t k = 0; k < t->numel; k++) out[k] = kiln_load_i64(t->data, t->dtype, k);
  *n = (int)t->numel;
  return true;
}

/* Gather(data, indices, axis): the gradient scatter-added at the indices
 * (ScatterND with reduction "add", opset 16's), the gathered axis moved to
 * the front and back; negative indices counted from the end first. */
static kiln_status_t grad_gather(kiln_gradient_ctx *c) {
  if (!c->want[0]) return NULL;
  int d = c->dy[0], data = c->x[0], idx = c->x[1];
  const kiln_type *td = kiln_grad_type(c, data), *ti = kiln_grad_type(c, idx);
  int r = td->rank, q = ti->rank;
  kiln_dtype ddt = td->dtype; /* td and ti die at the first emit (the value array moves) */
  int64_t axis = kiln_attr_int(kiln_grad_node(c), "axis", 0);
  if (axis < 0) axis += r;
  int64_t dd[KILN_MAX_RANK], id[KILN_MAX_RANK];
  memcpy(dd, td->dims, sizeof(int64_t) * (size_t)r);
  memcpy(id, ti->dims, sizeof(int64_t) * (size_t)q);
  kiln_dtype it = ti->dtype;
  int w3[3] = {kiln_grad_op2(c, "Less", idx, kiln_grad_scalar(c, it, 0.0)),
               kiln_grad_op2(c, "Add", idx, kiln_grad_scalar(c, it, (double)dd[axis])), idx};
  int pos = kiln_grad_op(c, "Where", 3, w3, 0, NULL);
  int64_t idims[KILN_MAX_RANK + 1];
  memcpy(idims, id, sizeof(int64_t) * (size_t)q);
  idims[q] = 1;
  int ind = kiln_grad_op2(c, "Reshape", pos, kiln_grad_ints(c, q + 1, idims));
  if (it != KILN_DTYPE_I64) {
    kiln_grad_attr to = KILN_GRAD_INT("to", KILN_DTYPE_I64);
    ind = kiln_grad_op(c, "Cast", 1, &ind, 1, &to);
  }
  /* the gradient with the indices' axes first: [I..., D[:axis], D[axis+1:]] */
  int rd = r - 1 + q;
  int64_t perm[2 * KILN_MAX_RANK];
  int k = 0;
  for (int i = 0; i < q; i++) perm[k++] = axis + i;
  for (int i = 0; i < axis; i++) perm[k++] = i;
  for (int i = (int)axis + q; i < rd; i++) perm[k++] = i;
  int upd = d;
  if (axis > 0) {
    kiln_grad_attr at = KILN_GRAD_INTS("perm", rd, perm);
    upd = kiln_grad_op(c, "Transpose", 1, &d, 1, &at);
  }
  int64_t front[KILN_MAX_RANK];
  k = 0;
  front[k++] = dd[axis];
  for (int i = 0; i < r; i++)
    if (i != axis) front[k++] = dd[i];
  int zeros = kiln_grad_op2(c, "Expand", kiln_grad_scalar(c, ddt, 0.0), kiln_grad_ints(c, r, front));
  int ins[3] = {zeros, ind, upd};
  kiln_grad_attr red = KILN_GRAD_STRING("reduction", "add");
  int out = -1;
  int g = kiln_grad_op_ex(c, "ScatterND", c->opset > 16 ? c->opset : 16, 3, ins, 1, &out, 1, &red);
  if (axis > 0) { /* [D[axis], D[:axis], D[axis+1:]] back to D */
    int64_t back[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) back[i] = i < axis ? i + 1 : i == axis ? 0 : i;
    kiln_grad_attr at = KILN_GRAD_INTS("perm", r, back);
    g = kiln_grad_op(c, "Transpose", 1, &g, 1, &at);
  }
  c->dx[0] = g;
  return c->status;
}

/* Pad(d, begin, end) with zeros, at the opset's form (pads an input from 11). */
static int zero_pad(kiln_gradient_ctx *c, int d, int r, const int64_t *pads) {
  if (c->opset < 11) {
    kiln_grad_attr at = KILN_GRAD_INTS("pads", 2 * r, pads);
    return kiln_grad_op(c, "Pad", 1, &d, 1, &at);
  }
  return kiln_grad_op2(c, "Pad", d, kiln_grad_ints(c, 2 * r, pads));
}

/* Slice with unit steps: the gradient padded back with zeros where the slice cut. */
static kiln_status_t grad_slice(kiln_gradient_ctx *c) {
  if (!c->want[0]) return NULL;
  int d = c->dy[0], x = c->x[0];
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank;
  bool attrs = kiln_grad_node(c)->opset < 10;
  int64_t st[2 * KILN_MAX_RANK], en[2 * KILN_MAX_RANK], ax[2 * KILN_MAX_RANK], sp[2 * KILN_MAX_RANK];
  int ns, ne, na, nsp;
  if (!const_ints(c, 1, "starts", attrs, st, &ns) || !const_ints(c, 2, "ends", attrs, en, &ne) ||
      !const_ints(c, 3, "axes", attrs, ax, &na) || !const_ints(c, 4, "steps", false, sp, &nsp) || ns < 0 || ne != ns ||
      (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns))
    return kiln_error(KILN_UNSUPPORTED, "Slice whose starts, ends, axes or steps are not constants has no gradient rule");
  int64_t pads[2 * KILN_MAX_RANK] = {0};
  for (int k = 0; k < ns; k++) {
    int64_t a = na >= 0 ? ax[k] : k, dim;
    if (a < 0) a += r;
    if (nsp >= 0 && sp[k] != 1) return kiln_error(KILN_UNSUPPORTED, "Slice with steps other than 1 has no gradient rule yet");
    dim = tx->dims[a];
    int64_t s0 = st[k] < 0 ? st[k] + dim : st[k], e0 = en[k] < 0 ? en[k] + dim : en[k];
    s0 = s0 < 0 ? 0 : s0 > dim ? dim : s0;
    e0 = e0 < s0 ? s0 : e0 > dim ? dim : e0;
    pads[a] = s0;
    pads[r + a] = dim - e0;
  }
  c->dx[0] = zero_pad(c, d, r, pads);
  return c->status;
}

/* Split: the outputs' gradients concatenated back (zeros for an output the loss does not read). */
static kiln_status_t grad_split(kiln_gradient_ctx *c) {
  if (!c->want[0]) return NULL;
  int r = kiln_grad_type(c, c->x[0])->rank;
  int64_t axis = kiln_attr_int(kiln_grad_node(c), "axis", 0);
  if (axis < 0) axis += r;
  int parts[64];
  if (c->n_outputs > 64) return kiln_error(KILN_UNSUPPORTED, "Split into more than 64 parts");
  for (int o = 0; o < c->n_outputs; o++) {
    parts[o] = c->dy[o];
    if (parts[o] < 0) {
      const kiln_type *t = kiln_grad_type(c, c->y[o]);
      int64_t dims[KILN_MAX_RANK];
      int rank = t->rank;
      kiln_dtype dt = t->dtype;
      memcpy(dims, t->dims, sizeof(int64_t) * (size_t)rank);
      int zero = kiln_grad_scalar(c, dt, 0.0);
      parts[o] = kiln_grad_op2(c, "Expand", zero, kiln_grad_ints(c, rank, dims));
    }
  }
  kiln_grad_attr at = KILN_GRAD_INT("axis", axis);
  c->dx[0] = kiln_grad_op(c, "Concat", c->n_outputs, parts, 1, &at);
  return c->status;
}

/* Pad in constant mode with pads >= 0: the gradient's middle (a Slice). */
static kiln_status_t grad_pad(kiln_gradient_ctx *c) {
  if (!c->want[0]) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  const char *mode = kiln_attr_string(n, "mode", "constant");
  if (strcmp(mode, "constant")) return kiln_error(KILN_UNSUPPORTED, "Pad in mode '%s' has no gradient rule yet", mode);
  int d = c->dy[0], x = c->x[0];
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank;
  int64_t pads[2 * KILN_MAX_RANK], axes[KILN_MAX_RANK];
  int np, na;
  if (!const_ints(c, 1, "pads", n->opset < 11, pads, &np) || !const_ints(c, 3, "axes", false, axes, &na))
    return kiln_error(KILN_UNSUPPORTED, "Pad whose pads or axes are not constants has no gradient rule");
  int nax = na >= 0 ? na : r;
  if (np != 2 * nax) return kiln_error(KILN_UNSUPPORTED, "Pad: %d pads for %d axes", np, nax);
  int64_t lo[KILN_MAX_RANK], hi[KILN_MAX_RANK], ax[KILN_MAX_RANK];
  for (int k = 0; k < nax; k++) {
    int64_t a = na >= 0 ? axes[k] : k;
    if (a < 0) a += r;
    if (pads[k] < 0 || pads[nax + k] < 0) return kiln_error(KILN_UNSUPPORTED, "Pad with negative pads has no gradient rule yet");
    lo[k] = pads[k];
    hi[k] = pads[k] + tx->dims[a];
    ax[k] = a;
  }
  int ins[4] = {d, kiln_grad_ints(c, nax, lo), kiln_grad_ints(c, nax, hi), kiln_grad_ints(c, nax, ax)};
  c->dx[0] = kiln_grad_op(c, "Slice", 4, ins, 0, NULL);
  return c->status;
}

/* Reshape, Flatten, Squeeze, Unsqueeze: the gradient reshaped back;
 * Transpose: transposed by the inverse permutation; Concat: each input's
 * slice of the gradient; Expand: summed over the broadcast axes. */
kiln_status_t kiln_grad_movement(kiln_gradient_ctx *c) {
  int d = c->dy[0], x = c->x[0];
  const kiln_node *n = kiln_grad_node(c);
  if (kiln_node_is(n, KILN_OP_Split)) return grad_split(c); /* its other outputs may carry the gradient */
  if (d < 0) return NULL;
  switch (kiln_node_op_id(n)) {
    case KILN_OP_Reshape:
    case KILN_OP_Flatten:
    case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze:
      if (c->want[0]) c->dx[0] = kiln_grad_reshape_like(c, d, x);
      return NULL;
    case KILN_OP_Expand:
      if (c->want[0]) c->dx[0] = kiln_grad_unbroadcast(c, d, x);
      return NULL;
    case KILN_OP_Transpose: {
      int r = kiln_grad_type(c, x)->rank, cnt = 0;
      const int64_t *perm = kiln_attr_ints(n, "perm", &cnt);
      int64_t inv[KILN_MAX_RANK];
      for (int i = 0; i < r; i++) inv[perm && cnt == r ? perm[i] : r - 1 - i] = i;
      kiln_grad_attr at = KILN_GRAD_INTS("perm", r, inv);
      if (c->want[0]) c->dx[0] = kiln_grad_op(c, "Transpose", 1, &d, 1, &at);
      return NULL;
    }
    case KILN_OP_Concat: {
      int r = kiln_grad_type(c, d)->rank;
      int64_t axis = kiln_attr_int(n, "axis", 0);
      if (axis < 0) axis += r;
      if (c->opset < 10) return kiln_error(KILN_UNSUPPORTED, "Concat's gradient needs opset 10 or later (Slice's inputs)");
      int64_t at = 0;
      for (int i = 0; i < c->n_inputs; i++) {
        int64_t len = kiln_grad_type(c, c->x[i])->dims[axis];
        if (c->want[i]) {
          int64_t lo = at, hi = at + len;
          int ins[4] = {d, kiln_grad_ints(c, 1, &lo), kiln_grad_ints(c, 1, &hi), kiln_grad_ints(c, 1, &axis)};
          c->dx[i] = kiln_grad_op(c, "Slice", 4, ins, 0, NULL);
        }
        at += len;
      }
      return NULL;
    }
    case KILN_OP_Gather: return grad_gather(c);
    case KILN_OP_Slice: return grad_slice(c);
    case KILN_OP_Split: return grad_split(c);
    case KILN_OP_Pad: return grad_pad(c);
    default: return kiln_error(KILN_UNSUPPORTED, "no gradient rule for %s", n->op_type);
  }
}
