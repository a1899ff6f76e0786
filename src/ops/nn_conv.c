/* Conv and ConvTranspose over any number of spatial axes, with groups,
 * dilations, strides, explicit or automatic padding. Reference kernels
 * accumulate in double. */
#include "ops/nn_internal.h"

/* Checks the shapes shared by both ops and returns the spatial rank.
 * For Conv, W is (M, C/group, k...); for ConvTranspose (C, M/group, k...). */
static kiln_status_t check_conv_shapes(int x_rank, const int64_t *x, int w_rank, const int64_t *w, int64_t group,
                                       bool transpose, int *out_n) {
  char a[256], b[256];
  if (group < 1) return kiln_error(KILN_INVALID_MODEL, "attribute group: %lld must be >= 1", (long long)group);
  if (x_rank >= 0 && x_rank < 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank >= 3 (N, C, spatial...), got shape %s",
                      kiln_shape_str(x_rank, x, a, sizeof a));
  if (w_rank >= 0 && w_rank < 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): expected rank >= 3 (%s, kernel...), got shape %s",
                      transpose ? "C, M/group" : "M, C/group", kiln_shape_str(w_rank, w, a, sizeof a));
  if (x_rank >= 0 && w_rank >= 0 && x_rank != w_rank)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (W): shape %s must have the same rank as input 0 (X) %s (one kernel dim per spatial axis)",
                      kiln_shape_str(w_rank, w, a, sizeof a), kiln_shape_str(x_rank, x, b, sizeof b));
  *out_n = x_rank >= 0 ? x_rank - 2 : (w_rank >= 0 ? w_rank - 2 : -1);
  if (x_rank < 0 || w_rank < 0 || x[1] < 0) return NULL;
  int64_t c = x[1];
  if (c % group != 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): %lld channels are not divisible by group %lld",
                      (long long)c, (long long)group);
  if (!transpose && w[1] >= 0 && w[1] != c / group)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (W): shape %s, expected dim 1 = C/group = %lld/%lld = %lld (X is %s)",
                      kiln_shape_str(w_rank, w, a, sizeof a), (long long)c, (long long)group, (long long)(c / group),
                      kiln_shape_str(x_rank, x, b, sizeof b));
  if (!transpose && w[0] >= 0 && w[0] % group != 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): %lld output channels (dim 0) are not divisible by group %lld",
                      (long long)w[0], (long long)group);
  if (transpose && w[0] >= 0 && w[0] != c)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): shape %s, expected dim 0 = C = %lld (X is %s)",
                      kiln_shape_str(w_rank, w, a, sizeof a), (long long)c, kiln_shape_str(x_rank, x, b, sizeof b));
  return NULL;
}

static kiln_status_t check_bias(const kiln_tensor *bias, int64_t m) {
  if (!bias) return NULL;
  char a[256];
  if (bias->rank != 1 || bias->dims[0] != m)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (B): shape %s, expected [%lld] (one bias per output channel)",
                      kiln_shape_str(bias->rank, bias->dims, a, sizeof a), (long long)m);
  if (bias->dtype != KILN_DTYPE_UNDEFINED && !kiln_dtype_is_float(bias->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (B): dtype %s, expected a float type", kiln_dtype_name(bias->dtype));
  return NULL;
}

static kiln_status_t check_same_dtype(const kiln_tensor *x, const kiln_tensor *t, int index, const char *name) {
  if (t && t->dtype != x->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input 0 (X)", index, name,
                      kiln_dtype_name(t->dtype), kiln_dtype_name(x->dtype));
  return NULL;
}

/* ---- Conv --------------------------------------------------------------- */

kiln_status_t nn_conv_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0], *w = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!x) return NULL;
  int xr = x->rank, wr = w ? w->rank : -1;
  int n = -1;
  int64_t group = kiln_attr_int(ctx->node, "group", 1);
  KILN_TRY(check_conv_shapes(xr, x->dims, wr, w ? w->dims : NULL, group, false, &n));
  if (n < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  int64_t in_sp[KILN_MAX_RANK], kernel[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  for (int i = 0; i < n; i++) {
    in_sp[i] = xr >= 0 ? x->dims[2 + i] : -1;
    kernel[i] = wr >= 0 ? w->dims[2 + i] : -1;
  }
  kiln_window win;
  KILN_TRY(kiln_window_init(ctx->node, n, in_sp, kernel, true, false, &win));
  dims[0] = xr >= 0 ? x->dims[0] : -1;
  dims[1] = wr >= 0 ? w->dims[0] : -1;
  for (int i = 0; i < n; i++) dims[2 + i] = win.out[i];
  kiln_infer_set(ctx, 0, x->dtype, n + 2, dims);
  return NULL;
}

kiln_status_t nn_conv_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *w, *bias = kiln_kernel_input(ctx, 2), *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &w));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(check_same_dtype(x, w, 1, "W"));
  KILN_TRY(check_same_dtype(x, bias, 2, "B"));
  int64_t group = kiln_attr_int(ctx->node, "group", 1);
  int n = -1;
  KILN_TRY(check_conv_shapes(x->rank, x->dims, w->rank, w->dims, group, false, &n));
  int64_t batch = x->dims[0], c_in = x->dims[1], m = w->dims[0];
  int64_t cg = c_in / group, mg = m / group;
  KILN_TRY(check_bias(bias, m));
  kiln_window win;
  KILN_TRY(kiln_window_init(ctx->node, n, x->dims + 2, w->dims + 2, true, false, &win));

  int64_t ydims[KILN_MAX_RANK] = {batch, m};
  for (int i = 0; i < n; i++) ydims[2 + i] = win.out[i];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, n + 2, ydims, &y));
  if (y->numel == 0) return NULL;

  double *xv = NULL, *wv = NULL, *bv = NULL, *yv = NULL;
  kiln_status_t st = nn_load_all_f64(x, &xv);
  if (!st) st = nn_load_all_f64(w, &wv);
  if (!st && bias) st = nn_load_all_f64(bias, &bv);
  if (!st && !(yv = malloc((size_t)y->numel * sizeof *yv))) st = KILN_OOM();
  if (st) goto done;

  int64_t xs[KILN_MAX_RANK], ws[KILN_MAX_RANK], ys[KILN_MAX_RANK];
  nn_row_major_strides(x->rank, x->dims, xs);
  nn_row_major_strides(w->rank, w->dims, ws);
  nn_row_major_strides(y->rank, y->dims, ys);
  if (cg == 0) {
    /* No input channels: every output is its channel's bias. Walking the
     * kernel taps of each output would cost out x taps for nothing (a
     * fuzzed model with a 3M-element output took a minute under ASan). */
    int64_t plane = y->numel / (batch * m > 0 ? batch * m : 1);
    for (int64_t i = 0; i < y->numel; i++) yv[i] = bv ? bv[(i / plane) % m] : 0.0;
    goto store;
  }
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t oc = 0; oc < m; oc++) {
      int64_t g = oc / mg;
      int64_t o[KILN_MAX_RANK] = {0};
      const double *xg = xv + b * xs[0] + g * cg * xs[1]; /* first input channel of the group */
      const double *wo = wv + oc * ws[0];
      do {
        double sum = bv ? bv[oc] : 0.0;
        int64_t k[KILN_MAX_RANK] = {0};
        do { /* each kernel tap that falls inside the input, over the group's channels */
          int64_t xoff = 0, woff = 0;
          bool inside = true;
          for (int i = 0; i < n && inside; i++) {
            int64_t p = o[i] * win.stride[i] + k[i] * win.dilation[i] - win.pad_begin[i];
            inside = p >= 0 && p < win.in[i];
            xoff += p * xs[2 + i];
            woff += k[i] * ws[2 + i];
          }
          if (inside)
            for (int64_t ic = 0; ic < cg; ic++) sum += xg[ic * xs[1] + xoff] * wo[ic * ws[1] + woff];
        } while (nn_next_index(n, win.kernel, k));
        int64_t yoff = b * ys[0] + oc * ys[1];
        for (int i = 0; i < n; i++) yoff += o[i] * ys[2 + i];
        yv[yoff] = sum;
      } while (nn_next_index(n, win.out, o));
    }
  }
store:
  nn_store_all_f64(y, yv);
done:
  free(xv);
  free(wv);
  free(bv);
  free(yv);
  return st;
}

/* ---- ConvTranspose ------------------------------------------------------ */

/* Output sizes and pads of ConvTranspose (ONNX opset 1-17 rules):
 * explicit output_shape or auto_pad SAME_* fix the output size and derive
 * the pads; otherwise out = s*(in-1) + output_padding + (k-1)*d + 1 - pads. */
kiln_status_t kiln_conv_transpose_window(const kiln_node *node, int n, const int64_t *in_sp, const int64_t *kernel,
                                         kiln_window *w) {
  memset(w, 0, sizeof *w);
  if (n < 1 || n > KILN_MAX_RANK - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): needs rank >= 3 (N, C, spatial...), got rank %d", n + 2);
  w->n = n;
  int cnt = 0;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &cnt);
  if (ks && cnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: has %d values, expected %d", cnt, n);
  for (int i = 0; i < n; i++) {
    if (ks && kernel[i] >= 0 && ks[i] != kernel[i])
      return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld at position %d does not match W's dim %lld",
                        (long long)ks[i], i, (long long)kernel[i]);
    w->kernel[i] = kernel[i] >= 0 ? kernel[i] : (ks ? ks[i] : -1);
    if (kernel[i] < 0 && ks && (ks[i] < 1 || ks[i] > KILN_MAX_WINDOW_ATTR))
      return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld out of range", (long long)ks[i]);
    if (w->kernel[i] == 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): kernel size 0 on spatial axis %d, expected >= 1", i);
  }
  const char *names[2] = {"strides", "dilations"};
  int64_t *dst[2] = {w->stride, w->dilation};
  for (int a = 0; a < 2; a++) {
    const int64_t *v = kiln_attr_ints(node, names[a], &cnt);
    if (v && cnt && cnt != n)
      return kiln_error(KILN_INVALID_MODEL, "attribute %s: has %d values, expected %d", names[a], cnt, n);
    for (int i = 0; i < n; i++) {
      dst[a][i] = v && cnt ? v[i] : 1;
      if (dst[a][i] < 1 || dst[a][i] > KILN_MAX_WINDOW_ATTR)
        return kiln_error(KILN_INVALID_MODEL, "attribute %s: value %lld must be in [1, %lld]", names[a],
                          (long long)dst[a][i], (long long)KILN_MAX_WINDOW_ATTR);
    }
  }
  int64_t out_pad[KILN_MAX_RANK] = {0};
  const int64_t *op = kiln_attr_ints(node, "output_padding", &cnt);
  if (op && cnt && cnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute output_padding: has %d values, expected %d", cnt, n);
  for (int i = 0; i < n; i++) {
    out_pad[i] = op && cnt ? op[i] : 0;
    if (out_pad[i] < 0 || out_pad[i] > KILN_MAX_WINDOW_ATTR)
      return kiln_error(KILN_INVALID_MODEL, "attribute output_padding: value %lld outside [0, %lld]",
                        (long long)out_pad[i], (long long)KILN_MAX_WINDOW_ATTR);
  }
  int os_cnt;
  const int64_t *os = kiln_attr_ints(node, "output_shape", &os_cnt);
  if (os && os_cnt && os_cnt != n && os_cnt != n + 2)
    return kiln_error(KILN_INVALID_MODEL, "attribute output_shape: has %d values, expected %d (spatial sizes)", os_cnt, n);
  if (os && os_cnt == n + 2) os += 2;
  kiln_auto_pad ap = KILN_AUTO_PAD_NOTSET;
  KILN_TRY(kiln_auto_pad_parse(node, &ap));
  const int64_t *pads = kiln_attr_ints(node, "pads", &cnt);
  if (pads && cnt && cnt != 2 * n)
    return kiln_error(KILN_INVALID_MODEL, "attribute pads: has %d values, expected %d", cnt, 2 * n);
  for (int i = 0; i < n; i++) {
    w->in[i] = in_sp[i];
    w->out[i] = -1;
    if (in_sp[i] < 0 || w->kernel[i] < 0) continue;
    int64_t full = w->stride[i] * (in_sp[i] - 1) + out_pad[i] + (w->kernel[i] - 1) * w->dilation[i] + 1;
    if (os && os_cnt) {
      if (os[i] < 1 || os[i] > ((int64_t)1 << 40))
        return kiln_error(KILN_INVALID_MODEL, "attribute output_shape: value %lld out of range", (long long)os[i]);
      w->out[i] = os[i];
    } else if (ap == KILN_AUTO_PAD_SAME_UPPER || ap == KILN_AUTO_PAD_SAME_LOWER) {
      w->out[i] = in_sp[i] * w->stride[i];
    } else {
      if (ap == KILN_AUTO_PAD_NOTSET && pads && cnt) {
        w->pad_begin[i] = pads[i];
        w->pad_end[i] = pads[n + i];
        if (pads[i] < 0 || pads[n + i] < 0 || pads[i] > KILN_MAX_WINDOW_ATTR || pads[n + i] > KILN_MAX_WINDOW_ATTR)
          return kiln_error(KILN_INVALID_MODEL, "attribute pads: pad on spatial axis %d outside [0, %lld]", i,
                            (long long)KILN_MAX_WINDOW_ATTR);
      }
      w->out[i] = full - w->pad_begin[i] - w->pad_end[i];
    }
    if ((os && os_cnt) || ap == KILN_AUTO_PAD_SAME_UPPER || ap == KILN_AUTO_PAD_SAME_LOWER) {
      /* total < 0 (output_shape beyond the full output) extends the end
       * with zeros: halves round toward -inf. */
      int64_t total = full - w->out[i];
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      if (ap == KILN_AUTO_PAD_SAME_UPPER) {
        w->pad_begin[i] = half;
        w->pad_end[i] = total - half;
      } else {
        w->pad_begin[i] = total - half;
        w->pad_end[i] = half;
      }
    }
    if (w->out[i] < 1)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 0 (X): axis %d of size %lld gives output size %lld (pads %lld+%lld too large)", i + 2,
                        (long long)in_sp[i], (long long)w->out[i], (long long)w->pad_begin[i],
                        (long long)w->pad_end[i]);
  }
  return NULL;
}

kiln_status_t nn_conv_transpose_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0], *w = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!x) return NULL;
  int xr = x->rank, wr = w ? w->rank : -1;
  int n = -1;
  int64_t group = kiln_attr_int(ctx->node, "group", 1);
  KILN_TRY(check_conv_shapes(xr, x->dims, wr, w ? w->dims : NULL, group, true, &n));
  if (n < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  int64_t in_sp[KILN_MAX_RANK], kernel[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  for (int i = 0; i < n; i++) {
    in_sp[i] = xr >= 0 ? x->dims[2 + i] : -1;
    kernel[i] = wr >= 0 ? w->dims[2 + i] : -1;
  }
  kiln_window win;
  KILN_TRY(kiln_conv_transpose_window(ctx->node, n, in_sp, kernel, &win));
  dims[0] = xr >= 0 ? x->dims[0] : -1;
  dims[1] = wr >= 0 && w->dims[1] >= 0 ? w->dims[1] * group : -1;
  for (int i = 0; i < n; i++) dims[2 + i] = win.out[i];
  kiln_infer_set(ctx, 0, x->dtype, n + 2, dims);
  return NULL;
}

kiln_status_t nn_conv_transpose_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *w, *bias = kiln_kernel_input(ctx, 2), *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &w));
  KILN_TRY(nn_require_float(x, 0, "X"));
  KILN_TRY(check_same_dtype(x, w, 1, "W"));
  KILN_TRY(check_same_dtype(x, bias, 2, "B"));
  int64_t group = kiln_attr_int(ctx->node, "group", 1);
  int n = -1;
  KILN_TRY(check_conv_shapes(x->rank, x->dims, w->rank, w->dims, group, true, &n));
  int64_t batch = x->dims[0], c_in = x->dims[1], mg = w->dims[1];
  int64_t m, cg = c_in / group;
  if (!kiln_mul_i64(mg, group, &m)) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): dim 1 times group overflows");
  KILN_TRY(check_bias(bias, m));
  kiln_window win;
  KILN_TRY(kiln_conv_transpose_window(ctx->node, n, x->dims + 2, w->dims + 2, &win));

  int64_t ydims[KILN_MAX_RANK] = {batch, m};
  for (int i = 0; i < n; i++) ydims[2 + i] = win.out[i];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, n + 2, ydims, &y));
  if (y->numel == 0) return NULL;

  double *xv = NULL, *wv = NULL, *yv = NULL;
  kiln_status_t st = nn_load_all_f64(x, &xv);
  if (!st) st = nn_load_all_f64(w, &wv);
  if (!st && !(yv = calloc((size_t)y->numel, sizeof *yv))) st = KILN_OOM();
  if (st) goto done;

  int64_t xs[KILN_MAX_RANK], ws[KILN_MAX_RANK], ys[KILN_MAX_RANK];
  nn_row_major_strides(x->rank, x->dims, xs);
  nn_row_major_strides(w->rank, w->dims, ws);
  nn_row_major_strides(y->rank, y->dims, ys);
  /* Scatter: every input element times every kernel tap lands on one output. */
  for (int64_t b = 0; b < batch && x->numel > 0; b++) {
    for (int64_t ic = 0; ic < c_in; ic++) {
      int64_t g = ic / cg;
      int64_t i[KILN_MAX_RANK] = {0};
      do {
        int64_t xoff = b * xs[0] + ic * xs[1];
        for (int d = 0; d < n; d++) xoff += i[d] * xs[2 + d];
        double xval = xv[xoff];
        double *yg = yv + b * ys[0] + g * mg * ys[1]; /* first output channel of the group */
        const double *wi = wv + ic * ws[0];
        int64_t k[KILN_MAX_RANK] = {0};
        do { /* each kernel tap that lands inside the output, over the group's channels */
          int64_t yoff = 0, woff = 0;
          bool inside = true;
          for (int d = 0; d < n && inside; d++) {
            int64_t p = i[d] * win.stride[d] + k[d] * win.dilation[d] - win.pad_begin[d];
            inside = p >= 0 && p < win.out[d];
            yoff += p * ys[2 + d];
            woff += k[d] * ws[2 + d];
          }
          if (inside)
            for (int64_t om = 0; om < mg; om++) yg[om * ys[1] + yoff] += xval * wi[om * ws[1] + woff];
        } while (nn_next_index(n, win.kernel, k));
      } while (nn_next_index(n, win.in, i));
    }
  }
  if (bias) {
    for (int64_t b = 0; b < batch; b++)
      for (int64_t oc = 0; oc < m; oc++) {
        double bval = kiln_load_f64(bias->data, bias->dtype, oc);
        for (int64_t j = 0; j < ys[1]; j++) yv[b * ys[0] + oc * ys[1] + j] += bval;
      }
  }
  nn_store_all_f64(y, yv);
done:
  free(xv);
  free(wv);
  free(yv);
  return st;
}
