/* Gradient rules (ops/gradient.h) of the nn family: Conv, the pools,
 * BatchNormalization, LayerNormalization, Dropout and the two ONNX losses,
 * each written with ordinary graph ops:
 *
 *   Conv          dX: ConvTranspose of the gradient with the same weights,
 *                 strides, dilations, pads and groups (output_padding makes
 *                 it the input's size); dW: a Conv whose batch is the input's
 *                 channels and whose weights are the gradient (strides and
 *                 dilations swapped), grouped so each group pairs only its
 *                 own channels, its end pads (or the input's unread tail)
 *                 cut so it gives exactly the kernel, then transposed to
 *                 [M, C/group, k]; dB: the gradient summed over all but axis 1.
 *   ConvTranspose its adjoint, a Conv, for dX; dW as Conv's with the roles of
 *                 input and gradient exchanged.
 *   pools         GlobalAveragePool spreads, GlobalMaxPool routes to the
 *                 maxima; AveragePool is ConvTranspose with a ones kernel
 *                 per channel over the gradient divided by each window's
 *                 count; MaxPool finds each window's maximum
 *                 (kiln.MaxPoolArgmax) and gathers the gradient there
 *                 (kiln.MaxPoolGrad).
 *   norms         the textbook formulas over the normalized axes, training
 *                 BatchNormalization with its batch statistics.
 *   Dropout       the identity outside training; in training, the mask
 *                 output (which the node must have) scaled by 1 / (1 - ratio).
 *   losses        SoftmaxCrossEntropyLoss: (softmax - one-hot) times each
 *                 sample's class weight, zero at ignore_index, the mean's
 *                 division by the total weight; NegativeLogLikelihoodLoss:
 *                 minus the weighted one-hot.
 */
#include "ops/gradient.h"
#include "ops/window.h"
#include "passes/passes_opt.h"

static int ints(kiln_gradient_ctx *c, int n, const int64_t *v) { return kiln_grad_ints(c, n, v); }

static int transpose(kiln_gradient_ctx *c, int v, int r, const int64_t *perm) {
  kiln_grad_attr at = KILN_GRAD_INTS("perm", r, perm);
  return kiln_grad_op(c, "Transpose", 1, &v, 1, &at);
}

static int reshape(kiln_gradient_ctx *c, int v, int r, const int64_t *dims) {
  return kiln_grad_op2(c, "Reshape", v, ints(c, r, dims));
}

static int mul(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Mul", a, b); }
static int sub(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Sub", a, b); }
static int add(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Add", a, b); }
static int div_(kiln_gradient_ctx *c, int a, int b) { return kiln_grad_op2(c, "Div", a, b); }

/* The axes of x other than the channel axis (0, 2, 3, ...). */
static int non_channel_axes(int rank, int64_t *axes) {
  int n = 0;
  for (int i = 0; i < rank; i++)
    if (i != 1) axes[n++] = i;
  return n;
}

/* A [C] vector as [1, C, 1, ...] of rank r. */
static int per_channel(kiln_gradient_ctx *c, int v, int r) {
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) dims[i] = 1;
  dims[1] = kiln_grad_type(c, v)->dims[0];
  return reshape(c, v, r, dims);
}

/* output_padding that makes a ConvTranspose over the window's output give back its input size. */
static void output_padding(const kiln_window *w, int64_t *op) {
  for (int i = 0; i < w->n; i++)
    op[i] = w->in[i] + w->pad_begin[i] + w->pad_end[i] - ((w->out[i] - 1) * w->stride[i] + w->dilation[i] * (w->kernel[i] - 1) + 1);
}

/* ConvTranspose(d, w) giving back the window's input: dX of a Conv, or of a pool with a ones kernel. */
static int conv_back(kiln_gradient_ctx *c, int d, int w, const kiln_window *win, int64_t group) {
  int64_t pads[2 * KILN_MAX_RANK], op[KILN_MAX_RANK];
  for (int i = 0; i < win->n; i++) pads[i] = win->pad_begin[i], pads[win->n + i] = win->pad_end[i];
  output_padding(win, op);
  kiln_grad_attr at[5] = {KILN_GRAD_INTS("strides", win->n, win->stride), KILN_GRAD_INTS("dilations", win->n, win->dilation),
                          KILN_GRAD_INTS("pads", 2 * win->n, pads), KILN_GRAD_INTS("output_padding", win->n, op),
                          KILN_GRAD_INT("group", group)};
  int ins[2] = {d, w};
  return kiln_grad_op(c, "ConvTranspose", 2, ins, 5, at);
}

/* dX of an ungrouped Conv of stride 1 as a Conv of the gradient with the
 * weights' channels swapped and their taps reversed: dX[i] = sum over k of
 * d[i + pad_begin - k * dilation] W[k] is that Conv with pads (k - 1) *
 * dilation - pad (ConvTranspose's adjoint form, and the forward
 * convolution's fast algorithms; a ConvTranspose runs GEMM + col2im).
 * The reversed weights are a copy per step, so only where each weight
 * meets at least 64 output pixels (the batch times the forward output
 * plane): ResNet-18's layer3 on 2x2 planes (batch 32) ran 2.4 -> 1.0 ms a
 * data gradient, its layer4 on 1x1 planes lost more to copying 2.4M
 * weights than it gained. -1 when the rule does not apply or a pad would
 * be negative (a window past (k - 1) * dilation). */
static int conv_back_as_conv(kiln_gradient_ctx *c, int d, int w, const kiln_window *win, int r) {
  int nsp = win->n;
  const kiln_type *td = kiln_grad_type(c, d);
  if (td->dims[0] * kiln_shape_numel(td->rank - 2, td->dims + 2) < 64) return -1; /* pixels per weight */
  int64_t pads[2 * KILN_MAX_RANK], perm[KILN_MAX_RANK], starts[KILN_MAX_RANK], ends[KILN_MAX_RANK], axes[KILN_MAX_RANK],
      steps[KILN_MAX_RANK];
  for (int i = 0; i < nsp; i++) {
    if (win->stride[i] != 1) return -1;
    int64_t reach = (win->kernel[i] - 1) * win->dilation[i];
    pads[i] = reach - win->pad_begin[i];
    pads[nsp + i] = reach - win->pad_end[i];
    if (pads[i] < 0 || pads[nsp + i] < 0) return -1;
    starts[i] = -1, ends[i] = INT64_MIN, axes[i] = 2 + i, steps[i] = -1;
  }
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[0] = 1, perm[1] = 0;
  int wt = transpose(c, w, r, perm);
  int flip = kiln_grad_op(c, "Slice", 5,
                          (int[]){wt, ints(c, nsp, starts), ints(c, nsp, ends), ints(c, nsp, axes), ints(c, nsp, steps)}, 0,
                          NULL);
  kiln_grad_attr at[2] = {KILN_GRAD_INTS("dilations", nsp, win->dilation), KILN_GRAD_INTS("pads", 2 * nsp, pads)};
  return kiln_grad_op(c, "Conv", 2, (int[]){d, flip}, 2, at);
}

/* v [N, group * cg, spatial] as [cg, group * N, spatial]: a Conv over it with
 * group `group` pairs group g's channels with group g's images. */
static int batch_as_channels(kiln_gradient_ctx *c, int v, int r, const int64_t *dims, int64_t group) {
  int nsp = r - 2;
  int64_t n = dims[0], cg = dims[1] / group, d5[KILN_MAX_RANK + 1], perm[KILN_MAX_RANK + 1], d4[KILN_MAX_RANK];
  d5[0] = n, d5[1] = group, d5[2] = cg;
  perm[0] = 2, perm[1] = 1, perm[2] = 0;
  d4[0] = cg, d4[1] = group * n;
  for (int i = 0; i < nsp; i++) d5[3 + i] = dims[2 + i], perm[3 + i] = 3 + i, d4[2 + i] = dims[2 + i];
  return reshape(c, transpose(c, reshape(c, v, r + 1, d5), r + 1, perm), r, d4);
}

/* The weight gradient's Conv (input a [N, C, in...], weights the other
 * operand with `span` taps, strides = the forward dilations, dilations =
 * the forward strides, pads = the forward pads) cut to exactly `kernel`
 * outputs: where the forward window leaves a tail of the input that no
 * output reads (a stride over an even size), the end pads shrink, or a's
 * tail is cut off when they are too small, so the Conv needs no Slice
 * after it (the cpu then writes it straight in the layout of the
 * Transpose that follows, runtime/plan.h conv_transposed_output). Returns
 * a, or the Slice of it; pads adjusted in place. */
static int exact_kernel_input(kiln_gradient_ctx *c, int a, int nsp, const int64_t *in, const int64_t *span,
                              const kiln_window *win, int64_t *pads) {
  int64_t ends[KILN_MAX_RANK], starts[KILN_MAX_RANK], axes[KILN_MAX_RANK];
  bool cut = false;
  for (int i = 0; i < nsp; i++) {
    int64_t d = win->dilation[i], s = win->stride[i];
    int64_t excess = in[i] + pads[i] + pads[nsp + i] - s * (span[i] - 1) - 1 - d * (win->kernel[i] - 1);
    starts[i] = 0, axes[i] = 2 + i, ends[i] = in[i];
    if (excess <= 0) continue;
    int64_t from_pad = excess < pads[nsp + i] ? excess : pads[nsp + i];
    pads[nsp + i] -= from_pad;
    if (excess > from_pad) {
      ends[i] = in[i] - (excess - from_pad);
      cut = true;
    }
  }
  if (!cut) return a;
  return kiln_grad_op(c, "Slice", 4, (int[]){a, ints(c, nsp, starts), ints(c, nsp, ends), ints(c, nsp, axes)}, 0, NULL);
}

kiln_status_t kiln_grad_conv(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0) return NULL;
  int x = c->x[0], w = c->x[1];
  const kiln_type *tx = kiln_grad_type(c, x), *tw = kiln_grad_type(c, w);
  int r = tx->rank, nsp = r - 2;
  kiln_window win;
  KILN_TRY(kiln_window_init(kiln_grad_node(c), nsp, tx->dims + 2, tw->dims + 2, true, false, &win));
  int64_t group = kiln_attr_int(kiln_grad_node(c), "group", 1);
  int64_t xdims[KILN_MAX_RANK]; /* tx and tw die at the first emit (the value array moves) */
  memcpy(xdims, tx->dims, sizeof(int64_t) * (size_t)r);
  if (c->want[0]) {
    int as_conv = group == 1 && c->opset >= 10 ? conv_back_as_conv(c, d, w, &win, r) : -1; /* Slice's steps: opset 10 */
    c->dx[0] = as_conv >= 0 ? as_conv : conv_back(c, d, w, &win, group);
  }
  if (c->want[1]) {
    int64_t pads[2 * KILN_MAX_RANK];
    for (int i = 0; i < nsp; i++) pads[i] = win.pad_begin[i], pads[nsp + i] = win.pad_end[i];
    int xs = exact_kernel_input(c, x, nsp, xdims + 2, win.out, &win, pads);
    if (xs != x) /* cut: its new spatial sizes */
      for (int i = 0; i < nsp; i++) xdims[2 + i] = kiln_grad_type(c, xs)->dims[2 + i];
    /* X as [Cg, group * N, spatial]: batch = the channels within a group, channels = (group, image) */
    int xg = batch_as_channels(c, xs, r, xdims, group);
    int64_t swap[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) swap[i] = i;
    swap[0] = 1, swap[1] = 0;
    int dg = transpose(c, d, r, swap); /* [M, N, out spatial]: group g's weights read its N channels */
    kiln_grad_attr at[4] = {KILN_GRAD_INTS("strides", nsp, win.dilation), KILN_GRAD_INTS("dilations", nsp, win.stride),
                            KILN_GRAD_INTS("pads", 2 * nsp, pads), KILN_GRAD_INT("group", group)};
    int ins[2] = {xg, dg};
    int dw = kiln_grad_op(c, "Conv", 2, ins, 4, at); /* [Cg, M, kernel] */
    c->dx[1] = transpose(c, dw, r, swap);
  }
  if (c->n_inputs > 2 && c->x[2] >= 0 && c->want[2]) {
    int64_t axes[KILN_MAX_RANK];
    c->dx[2] = kiln_grad_reduce_sum(c, d, non_channel_axes(r, axes), axes, false);
  }
  return c->status;
}

/* ConvTranspose(X, W [Cin, Cout / group, k], B): its adjoint is a Conv.
 *   dX = Conv(d, W) with the same strides, dilations, pads and groups;
 *   dW = a Conv of the gradient (batch as channels within a group) with X
 *        as weights, strides and dilations swapped, cut to the kernel;
 *   dB = d summed over all but axis 1. */
kiln_status_t kiln_grad_conv_transpose(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0) return NULL;
  int x = c->x[0], w = c->x[1];
  const kiln_type *tx = kiln_grad_type(c, x), *tw = kiln_grad_type(c, w), *ty = kiln_grad_type(c, c->y[0]);
  int r = tx->rank, nsp = r - 2;
  int64_t xdims[KILN_MAX_RANK], ydims[KILN_MAX_RANK];
  memcpy(xdims, tx->dims, sizeof(int64_t) * (size_t)r);
  memcpy(ydims, ty->dims, sizeof(int64_t) * (size_t)r);
  kiln_window win;
  KILN_TRY(kiln_conv_transpose_window(kiln_grad_node(c), nsp, xdims + 2, tw->dims + 2, &win));
  int64_t group = kiln_attr_int(kiln_grad_node(c), "group", 1);
  int64_t pads[2 * KILN_MAX_RANK];
  for (int i = 0; i < nsp; i++) {
    if (win.pad_begin[i] < 0 || win.pad_end[i] < 0)
      return kiln_error(KILN_UNSUPPORTED, "ConvTranspose whose output_shape implies negative pads has no gradient rule yet");
    pads[i] = win.pad_begin[i], pads[nsp + i] = win.pad_end[i];
  }
  if (c->want[0]) {
    kiln_grad_attr at[4] = {KILN_GRAD_INTS("strides", nsp, win.stride), KILN_GRAD_INTS("dilations", nsp, win.dilation),
                            KILN_GRAD_INTS("pads", 2 * nsp, pads), KILN_GRAD_INT("group", group)};
    int ins[2] = {d, w};
    c->dx[0] = kiln_grad_op(c, "Conv", 2, ins, 4, at);
  }
  if (c->want[1]) {
    int ds = exact_kernel_input(c, d, nsp, ydims + 2, xdims + 2, &win, pads);
    if (ds != d)
      for (int i = 0; i < nsp; i++) ydims[2 + i] = kiln_grad_type(c, ds)->dims[2 + i];
    int dg = batch_as_channels(c, ds, r, ydims, group); /* [Cout / group, group * N, out] */
    int64_t swap[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) swap[i] = i;
    swap[0] = 1, swap[1] = 0;
    int xw = transpose(c, x, r, swap); /* [Cin, N, in]: group g's weights read its N channels */
    kiln_grad_attr at[4] = {KILN_GRAD_INTS("strides", nsp, win.dilation), KILN_GRAD_INTS("dilations", nsp, win.stride),
                            KILN_GRAD_INTS("pads", 2 * nsp, pads), KILN_GRAD_INT("group", group)};
    int ins[2] = {dg, xw};
    int dw = kiln_grad_op(c, "Conv", 2, ins, 4, at); /* [Cout / group, Cin, kernel] */
    c->dx[1] = transpose(c, dw, r, swap);
  }
  if (c->n_inputs > 2 && c->x[2] >= 0 && c->want[2]) {
    int64_t axes[KILN_MAX_RANK];
    c->dx[2] = kiln_grad_reduce_sum(c, d, non_channel_axes(r, axes), axes, false);
  }
  return c->status;
}

kiln_status_t kiln_grad_pool(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0 || !c->want[0]) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  kiln_op_id id = kiln_node_op_id(n);
  int x = c->x[0], y = c->y[0];
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank, nsp = r - 2;
  kiln_dtype dt = tx->dtype;
  int64_t xdims[KILN_MAX_RANK];
  memcpy(xdims, tx->dims, sizeof(int64_t) * (size_t)r);
  if (id == KILN_OP_GlobalAveragePool) {
    int64_t count = 1;
    for (int i = 2; i < r; i++) count *= xdims[i];
    c->dx[0] = kiln_grad_op2(c, "Expand", div_(c, d, kiln_grad_scalar(c, dt, (double)count)), ints(c, r, xdims));
    return c->status;
  }
  if (id == KILN_OP_GlobalMaxPool) { /* to every element equal to its plane's maximum */
    int ins[3] = {kiln_grad_op2(c, "Equal", x, y), kiln_grad_op2(c, "Expand", d, ints(c, r, xdims)),
                  kiln_grad_scalar(c, dt, 0.0)};
    c->dx[0] = kiln_grad_op(c, "Where", 3, ins, 0, NULL);
    return c->status;
  }
  bool ceil_mode = n->opset >= 10 && kiln_attr_int(n, "ceil_mode", 0) != 0;
  if (ceil_mode) return kiln_error(KILN_UNSUPPORTED, "%s with ceil_mode has no gradient rule yet", n->op_type);
  kiln_window win;
  KILN_TRY(kiln_window_init(n, nsp, xdims + 2, NULL, true, false, &win));
  if (id == KILN_OP_MaxPool) {
    if (kiln_attr_int(n, "storage_order", 0) != 0)
      return kiln_error(KILN_UNSUPPORTED, "MaxPool with storage_order 1 has no gradient rule yet");
    /* the window's maxima, then the gradient gathered at them (ops/nn_pool.c) */
    int64_t pads[2 * KILN_MAX_RANK];
    for (int i = 0; i < nsp; i++) pads[i] = win.pad_begin[i], pads[nsp + i] = win.pad_end[i];
    kiln_grad_attr at[4] = {KILN_GRAD_INTS("kernel_shape", nsp, win.kernel), KILN_GRAD_INTS("strides", nsp, win.stride),
                            KILN_GRAD_INTS("dilations", nsp, win.dilation), KILN_GRAD_INTS("pads", 2 * nsp, pads)};
    int arg = kiln_grad_kiln_op(c, "MaxPoolArgmax", 1, &x, 4, at);
    int ins[3] = {d, arg, ints(c, r, xdims)};
    c->dx[0] = kiln_grad_kiln_op(c, "MaxPoolGrad", 3, ins, 4, at);
    return c->status;
  }
  if (id == KILN_OP_AveragePool) {
    bool count_pad = kiln_attr_int(n, "count_include_pad", 0) != 0;
    /* each output's divisor: the window's taps inside the input (all of them with count_include_pad) */
    int64_t cdims[KILN_MAX_RANK], cnt_n = 1;
    for (int i = 0; i < r; i++) cdims[i] = i < 2 ? 1 : win.out[i - 2], cnt_n *= cdims[i];
    kiln_tensor *cnt;
    KILN_TRY(kiln_tensor_new(dt, r, cdims, &cnt));
    for (int64_t e = 0; e < cnt_n; e++) {
      double k = 1;
      int64_t rest = e;
      for (int i = nsp - 1; i >= 0; i--) {
        int64_t o = rest % win.out[i], in_w = 0;
        rest /= win.out[i];
        for (int64_t t = 0; t < win.kernel[i]; t++) {
          int64_t p = o * win.stride[i] - win.pad_begin[i] + t * win.dilation[i];
          in_w += count_pad ? (p < win.in[i] + win.pad_end[i]) : (p >= 0 && p < win.in[i]);
        }
        k *= (double)in_w;
      }
      kiln_store_f64(cnt->data, dt, e, k);
    }
    int cnt_id = -1;
    kiln_status_t st = kiln_opt_new_const(c->g, "grad/pool_count", cnt, &cnt_id);
    if (st) return st;
    int64_t wd[KILN_MAX_RANK];
    wd[0] = xdims[1], wd[1] = 1;
    for (int i = 0; i < nsp; i++) wd[2 + i] = win.kernel[i];
    int ones = kiln_grad_op2(c, "Expand", kiln_grad_scalar(c, dt, 1.0), ints(c, r, wd));
    c->dx[0] = conv_back(c, div_(c, d, cnt_id), ones, &win, xdims[1]);
    return c->status;
  }
  return kiln_error(KILN_UNSUPPORTED, "no gradient rule for %s", n->op_type);
}

/* BatchNormalization and LayerNormalization. */
kiln_status_t kiln_grad_norm(kiln_gradient_ctx *c) {
  const kiln_node *n = kiln_grad_node(c);
  int d = c->dy[0];
  for (int o = 1; o < c->n_outputs; o++)
    if (c->dy[o] >= 0)
      return kiln_error(KILN_UNSUPPORTED, "%s: the loss depends on output %d (its statistics): no gradient rule for that",
                        n->op_type, o);
  if (d < 0) return NULL;
  int x = c->x[0], scale = c->x[1], bias = c->n_inputs > 2 ? c->x[2] : -1;
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank;
  kiln_dtype dt = tx->dtype;
  float eps = kiln_attr_float(n, "epsilon", 1e-5f);
  if (kiln_node_is(n, KILN_OP_LayerNormalization)) {
    int64_t axis = kiln_attr_int(n, "axis", -1);
    if (axis < 0) axis += r;
    int64_t axes[KILN_MAX_RANK];
    int na = 0;
    for (int64_t i = axis; i < r; i++) axes[na++] = i;
    int xc = sub(c, x, kiln_grad_reduce_mean(c, x, na, axes, true));
    int var = kiln_grad_reduce_mean(c, mul(c, xc, xc), na, axes, true);
    int inv = kiln_grad_op1(c, "Reciprocal", kiln_grad_op1(c, "Sqrt", add(c, var, kiln_grad_scalar(c, dt, eps))));
    int xhat = mul(c, xc, inv);
    if (c->want[0]) {
      int g = mul(c, d, scale);
      int t = sub(c, sub(c, g, kiln_grad_reduce_mean(c, g, na, axes, true)),
                  mul(c, xhat, kiln_grad_reduce_mean(c, mul(c, g, xhat), na, axes, true)));
      c->dx[0] = mul(c, inv, t);
    }
    if (c->want[1]) c->dx[1] = kiln_grad_unbroadcast(c, mul(c, d, xhat), scale);
    if (bias >= 0 && c->want[2]) c->dx[2] = kiln_grad_unbroadcast(c, d, bias);
    return c->status;
  }
  /* BatchNormalization(X, scale, B, mean, var) */
  int mean = c->x[3], var = c->x[4];
  bool training = n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0;
  int64_t axes[KILN_MAX_RANK], m = 1;
  int na = non_channel_axes(r, axes);
  for (int i = 0; i < na; i++) m *= tx->dims[axes[i]]; /* before the first emit moves tx */
  int sc = per_channel(c, scale, r);
  if (training) { /* batch statistics: y = (x - mu_b) / sqrt(var_b + eps) * scale + B */
    int xc = sub(c, x, kiln_grad_reduce_mean(c, x, na, axes, true));
    int vb = kiln_grad_reduce_mean(c, mul(c, xc, xc), na, axes, true);
    int inv = kiln_grad_op1(c, "Reciprocal", kiln_grad_op1(c, "Sqrt", add(c, vb, kiln_grad_scalar(c, dt, eps))));
    int xhat = mul(c, xc, inv);
    if (c->want[0]) {
      int sd = kiln_grad_reduce_sum(c, d, na, axes, true), sdx = kiln_grad_reduce_sum(c, mul(c, d, xhat), na, axes, true);
      int t = sub(c, sub(c, mul(c, d, kiln_grad_scalar(c, dt, (double)m)), sd), mul(c, xhat, sdx));
      c->dx[0] = mul(c, mul(c, sc, div_(c, inv, kiln_grad_scalar(c, dt, (double)m))), t);
    }
    if (c->want[1]) c->dx[1] = kiln_grad_reduce_sum(c, mul(c, d, xhat), na, axes, false);
    if (c->want[2]) c->dx[2] = kiln_grad_reduce_sum(c, d, na, axes, false);
    return c->status; /* the running statistics (inputs 3, 4) are state: no gradient */
  }
  /* inference: mean and var are inputs */
  int mu = per_channel(c, mean, r), vv = per_channel(c, var, r);
  int ve = add(c, vv, kiln_grad_scalar(c, dt, eps));
  int inv = kiln_grad_op1(c, "Reciprocal", kiln_grad_op1(c, "Sqrt", ve));
  int xc = sub(c, x, mu);
  if (c->want[0]) c->dx[0] = mul(c, d, mul(c, sc, inv));
  if (c->want[1]) c->dx[1] = kiln_grad_reduce_sum(c, mul(c, d, mul(c, xc, inv)), na, axes, false);
  if (c->want[2]) c->dx[2] = kiln_grad_reduce_sum(c, d, na, axes, false);
  if (c->want[3]) c->dx[3] = kiln_grad_op1(c, "Neg", kiln_grad_reduce_sum(c, mul(c, d, mul(c, sc, inv)), na, axes, false));
  if (c->want[4]) { /* d/dvar of (x - mu) (var + eps)^-1/2 scale = -1/2 (x - mu) scale (var + eps)^-3/2 */
    int t = mul(c, mul(c, d, mul(c, xc, sc)), div_(c, inv, ve));
    c->dx[4] = mul(c, kiln_grad_reduce_sum(c, t, na, axes, false), kiln_grad_scalar(c, dt, -0.5));
  }
  return c->status;
}

/* The scalar constant of value v, or dflt when v is absent; false when v is not a constant. */
static bool const_scalar(kiln_gradient_ctx *c, int v, double dflt, double *out) {
  *out = dflt;
  if (v < 0) return true;
  const kiln_tensor *t = kiln_grad_known(c, v);
  if (!t || t->numel != 1) return false;
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return true;
}

kiln_status_t kiln_grad_dropout(kiln_gradient_ctx *c) {
  int d = c->dy[0];
  if (d < 0 || !c->want[0]) return NULL;
  const kiln_node *n = kiln_grad_node(c);
  double ratio = kiln_attr_float(n, "ratio", 0.5f), training = 0;
  if (n->opset >= 12) {
    if (!const_scalar(c, c->n_inputs > 1 ? c->x[1] : -1, ratio, &ratio) ||
        !const_scalar(c, c->n_inputs > 2 ? c->x[2] : -1, 0.0, &training))
      return kiln_error(KILN_UNSUPPORTED, "Dropout whose ratio or training_mode is not a constant has no gradient rule");
  }
  if (!training || ratio == 0) {
    c->dx[0] = d; /* the identity */
    return NULL;
  }
  int mask = c->n_outputs > 1 ? c->y[1] : -1;
  if (mask < 0)
    return kiln_error(KILN_UNSUPPORTED, "training Dropout without its mask output: its gradient needs the mask");
  kiln_grad_attr to = KILN_GRAD_INT("to", kiln_grad_type(c, d)->dtype);
  int m = kiln_grad_op(c, "Cast", 1, &mask, 1, &to);
  c->dx[0] = mul(c, mul(c, d, m), kiln_grad_scalar(c, kiln_grad_type(c, d)->dtype, 1.0 / (1.0 - ratio)));
  return c->status;
}

/* SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss(scores [N, C, d...], labels [N, d...], weights [C]). */
kiln_status_t kiln_grad_loss(kiln_gradient_ctx *c) {
  const kiln_node *n = kiln_grad_node(c);
  bool sce = kiln_node_is(n, KILN_OP_SoftmaxCrossEntropyLoss);
  int d = c->dy[0], dlp = sce && c->n_outputs > 1 ? c->dy[1] : -1;
  if ((d < 0 && dlp < 0) || !c->want[0]) return NULL;
  /* The class weights get no gradient (as in PyTorch): a trainer leaves them out of the trainable values. */
  const char *red = kiln_attr_string(n, "reduction", "mean");
  const kiln_attr *ii = kiln_node_attr(n, "ignore_index");
  bool has_ignore = ii && ii->type == KILN_ATTR_INT;
  int64_t ignore = has_ignore ? ii->i : 0;
  int x = c->x[0], labels = c->x[1], weights = c->n_inputs > 2 ? c->x[2] : -1;
  const kiln_type *tx = kiln_grad_type(c, x);
  int r = tx->rank;
  kiln_dtype dt = tx->dtype;
  int64_t ch = tx->dims[1], ldims[KILN_MAX_RANK], cdims[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) ldims[i] = i == 1 ? 1 : tx->dims[i], cdims[i] = i == 1 ? ch : 1;
  int p = -1;
  if (sce) {
    kiln_grad_attr ax = KILN_GRAD_INT("axis", 1);
    int out = -1;
    p = kiln_grad_op_ex(c, "Softmax", c->opset > 13 ? c->opset : 13, 1, &x, 1, &out, 1, &ax); /* over axis 1 alone: 13's */
  }
  int g = -1;
  if (d >= 0) {
    int lab = reshape(c, labels, r, ldims); /* [N, 1, d...] */
    kiln_dtype ldt = kiln_grad_type(c, labels)->dtype;
    kiln_tensor *classes; /* 0 .. C-1 along axis 1, in the labels' dtype */
    KILN_TRY(kiln_tensor_new(ldt, r, cdims, &classes));
    for (int64_t k = 0; k < ch; k++) kiln_store_f64(classes->data, ldt, k, (double)k);
    int cls = -1;
    KILN_TRY(kiln_opt_new_const(c->g, "grad/classes", classes, &cls));
    kiln_grad_attr to = KILN_GRAD_INT("to", dt);
    int eq = kiln_grad_op2(c, "Equal", lab, cls);
    int onehot = kiln_grad_op(c, "Cast", 1, &eq, 1, &to);
    int valid = -1, safe = lab;
    if (has_ignore) {
      valid = kiln_grad_op1(c, "Not", kiln_grad_op2(c, "Equal", lab, kiln_grad_scalar(c, ldt, (double)ignore)));
      int z = kiln_grad_scalar(c, ldt, 0.0);
      int w3[3] = {valid, lab, z};
      safe = kiln_grad_op(c, "Where", 3, w3, 0, NULL); /* an ignored label may be out of range: read class 0 */
    }
    int w = weights >= 0 ? kiln_grad_op2(c, "Gather", weights, safe) : -1; /* [N, 1, d...] */
    if (valid >= 0) {
      int one = w >= 0 ? w : kiln_grad_op2(c, "Expand", kiln_grad_scalar(c, dt, 1.0), ints(c, r, ldims));
      int w3[3] = {valid, one, kiln_grad_scalar(c, dt, 0.0)};
      w = kiln_grad_op(c, "Where", 3, w3, 0, NULL);
    }
    int scale = d; /* the loss's gradient per sample, [N, 1, d...] or a scalar */
    if (!strcmp(red, "none")) scale = reshape(c, d, r, ldims);
    if (!strcmp(red, "mean")) {
      int64_t all[KILN_MAX_RANK];
      for (int i = 0; i < r; i++) all[i] = i;
      int total = w >= 0 ? kiln_grad_reduce_sum(c, w, r, all, false)
                         : kiln_grad_scalar(c, dt, (double)(kiln_shape_numel(r, ldims)));
      scale = div_(c, d, total);
    }
    int per = w >= 0 ? mul(c, w, scale) : scale;
    g = mul(c, sce ? sub(c, p, onehot) : kiln_grad_op1(c, "Neg", onehot), per);
  }
  if (dlp >= 0) { /* log_prob = LogSoftmax(x): dlp - softmax * sum(dlp) over the classes */
    int64_t one = 1;
    int t = sub(c, dlp, mul(c, p, kiln_grad_reduce_sum(c, dlp, 1, &one, true)));
    g = g < 0 ? t : add(c, g, t);
  }
  c->dx[0] = g;
  return c->status;
}
