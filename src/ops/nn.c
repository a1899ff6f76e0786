/* Ops of the "nn" family: the table, and helpers shared by ops/nn_*.c
 * (see ops/nn_internal.h for who implements what). */
#include "ops/nn_internal.h"


/* ---- dtype checks and bulk element access ------------------------------ */

kiln_status_t nn_require_float(const kiln_tensor *t, int index, const char *name) {
  if (!kiln_dtype_is_float(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s not supported, expected a float type", index,
                      name, kiln_dtype_name(t->dtype));
  return NULL;
}

kiln_status_t nn_load_all_f64(const kiln_tensor *t, double **out) {
  size_t n = t->numel > 0 ? (size_t)t->numel : 1;
  double *v = malloc(n * sizeof *v);
  if (!v) return KILN_OOM();
  v[0] = 0;
  for (int64_t i = 0; i < t->numel; i++) v[i] = kiln_load_f64(t->data, t->dtype, i);
  *out = v;
  return NULL;
}

void nn_store_all_f64(kiln_tensor *t, const double *v) {
  for (int64_t i = 0; i < t->numel; i++) kiln_store_f64(t->data, t->dtype, i, v[i]);
}

void nn_row_major_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

kiln_status_t nn_broadcast_strides(int rank, const int64_t *dims, int out_rank, const int64_t *out_dims,
                                   const char *what, int64_t *strides) {
  char a[256], b[256];
  if (rank > out_rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: shape %s has more axes than the target shape %s", what,
                      kiln_shape_str(rank, dims, a, sizeof a), kiln_shape_str(out_rank, out_dims, b, sizeof b));
  int64_t own[KILN_MAX_RANK];
  nn_row_major_strides(rank, dims, own);
  for (int i = 0; i < out_rank; i++) {
    int j = i - (out_rank - rank);
    if (j < 0) {
      strides[i] = 0;
    } else if (dims[j] == out_dims[i]) {
      strides[i] = dims[j] == 1 ? 0 : own[j];
    } else if (dims[j] == 1) {
      strides[i] = 0;
    } else {
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: shape %s does not broadcast to %s", what,
                        kiln_shape_str(rank, dims, a, sizeof a), kiln_shape_str(out_rank, out_dims, b, sizeof b));
    }
  }
  return NULL;
}

bool nn_next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

/* ---- sliding windows --------------------------------------------------- */

kiln_status_t nn_auto_pad(const kiln_node *node, enum nn_auto_pad *out) {
  const char *s = kiln_attr_string(node, "auto_pad", "NOTSET");
  if (!strcmp(s, "NOTSET") || !*s)
    *out = NN_PAD_NOTSET;
  else if (!strcmp(s, "SAME_UPPER"))
    *out = NN_PAD_SAME_UPPER;
  else if (!strcmp(s, "SAME_LOWER"))
    *out = NN_PAD_SAME_LOWER;
  else if (!strcmp(s, "VALID"))
    *out = NN_PAD_VALID;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute auto_pad: '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
                      s);
  return NULL;
}

/* Reads an ints attribute of exactly n positive values (or fills dflt). */
static kiln_status_t window_ints(const kiln_node *node, const char *name, int n, int64_t dflt, int64_t *out) {
  int cnt = 0;
  const int64_t *v = kiln_attr_ints(node, name, &cnt);
  if (!v || cnt == 0) {
    for (int i = 0; i < n; i++) out[i] = dflt;
    return NULL;
  }
  if (cnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: has %d values, expected %d (one per spatial axis)", name, cnt,
                      n);
  for (int i = 0; i < n; i++) {
    if (v[i] < 1 || v[i] > NN_MAX_WINDOW_ATTR)
      return kiln_error(KILN_INVALID_MODEL, "attribute %s: value %lld at position %d must be in [1, %lld]", name,
                        (long long)v[i], i, (long long)NN_MAX_WINDOW_ATTR);
    out[i] = v[i];
  }
  return NULL;
}

kiln_status_t nn_window_init(const kiln_node *node, int n, const int64_t *in_sp, const int64_t *kernel,
                             bool has_dilations, bool ceil_mode, nn_window *w) {
  memset(w, 0, sizeof *w);
  if (n < 1 || n > KILN_MAX_RANK - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): needs rank >= 3 (N, C, spatial...), got rank %d", n + 2);
  w->n = n;
  int cnt = 0;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &cnt);
  if (kernel) {
    if (ks && cnt != n)
      return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: has %d values, expected %d", cnt, n);
    for (int i = 0; i < n; i++) {
      if (ks && kernel[i] >= 0 && ks[i] != kernel[i])
        return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld at position %d does not match W's dim %lld",
                          (long long)ks[i], i, (long long)kernel[i]);
      w->kernel[i] = kernel[i] >= 0 ? kernel[i] : (ks ? ks[i] : -1);
      if (kernel[i] < 0 && ks && (ks[i] < 1 || ks[i] > NN_MAX_WINDOW_ATTR))
        return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld out of range", (long long)ks[i]);
      if (w->kernel[i] == 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): kernel size 0 on spatial axis %d, expected >= 1", i);
    }
  } else {
    if (!ks) return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape is required");
    KILN_TRY(window_ints(node, "kernel_shape", n, 1, w->kernel));
  }
  KILN_TRY(window_ints(node, "strides", n, 1, w->stride));
  if (has_dilations)
    KILN_TRY(window_ints(node, "dilations", n, 1, w->dilation));
  else
    for (int i = 0; i < n; i++) w->dilation[i] = 1;

  enum nn_auto_pad ap = NN_PAD_NOTSET;
  KILN_TRY(nn_auto_pad(node, &ap));
  if (ap == NN_PAD_NOTSET) {
    const int64_t *pads = kiln_attr_ints(node, "pads", &cnt);
    if (pads && cnt != 0 && cnt != 2 * n)
      return kiln_error(KILN_INVALID_MODEL, "attribute pads: has %d values, expected %d (begin and end per spatial axis)",
                        cnt, 2 * n);
    for (int i = 0; i < n; i++) {
      w->pad_begin[i] = pads && cnt ? pads[i] : 0;
      w->pad_end[i] = pads && cnt ? pads[n + i] : 0;
      if (w->pad_begin[i] < 0 || w->pad_end[i] < 0 || w->pad_begin[i] > NN_MAX_WINDOW_ATTR ||
          w->pad_end[i] > NN_MAX_WINDOW_ATTR)
        return kiln_error(KILN_INVALID_MODEL, "attribute pads: pad on spatial axis %d outside [0, %lld]", i,
                          (long long)NN_MAX_WINDOW_ATTR);
    }
  }

  for (int i = 0; i < n; i++) {
    w->in[i] = in_sp[i];
    w->out[i] = -1;
    if (in_sp[i] < 0 || w->kernel[i] < 0) continue;
    int64_t effk = (w->kernel[i] - 1) * w->dilation[i] + 1, s = w->stride[i];
    if (ap == NN_PAD_SAME_UPPER || ap == NN_PAD_SAME_LOWER) {
      int64_t out = (in_sp[i] + s - 1) / s;
      int64_t total = (out - 1) * s + effk - in_sp[i];
      if (total < 0) total = 0;
      w->pad_begin[i] = ap == NN_PAD_SAME_UPPER ? total / 2 : total - total / 2;
      w->pad_end[i] = total - w->pad_begin[i];
      w->out[i] = out;
      continue;
    }
    int64_t num = in_sp[i] + w->pad_begin[i] + w->pad_end[i] - effk;
    if (num < 0)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 0 (X): axis %d has size %lld, smaller than the window (kernel %lld, dilation "
                        "%lld) with pads %lld+%lld",
                        i + 2, (long long)in_sp[i], (long long)w->kernel[i], (long long)w->dilation[i],
                        (long long)w->pad_begin[i], (long long)w->pad_end[i]);
    int64_t out = (ceil_mode && ap == NN_PAD_NOTSET ? (num + s - 1) / s : num / s) + 1;
    /* The last window must start inside the input or its leading pad. */
    if (ceil_mode && out > 1 && (out - 1) * s >= in_sp[i] + w->pad_begin[i]) out--;
    w->out[i] = out;
  }
  return NULL;
}

/* ---- the table ----------------------------------------------------------- */

#define NN_DEF(type, name, min_in, max_in, min_out, max_out, flags) \
  {"", type, min_in, max_in, min_out, max_out, nn_##name##_infer, nn_##name##_kernel, flags}

static const kiln_op_def nn_ops[] = {
    NN_DEF("Conv", conv, 2, 3, 1, 1, 0),
    NN_DEF("ConvTranspose", conv_transpose, 2, 3, 1, 1, 0),
    NN_DEF("AveragePool", average_pool, 1, 1, 1, 1, 0),
    NN_DEF("MaxPool", max_pool, 1, 1, 1, 2, 0),
    NN_DEF("MaxUnpool", max_unpool, 2, 3, 1, 1, 0),
    NN_DEF("LpPool", lp_pool, 1, 1, 1, 1, 0),
    NN_DEF("GlobalAveragePool", global_average_pool, 1, 1, 1, 1, 0),
    NN_DEF("GlobalMaxPool", global_max_pool, 1, 1, 1, 1, 0),
    NN_DEF("GlobalLpPool", global_lp_pool, 1, 1, 1, 1, 0),
    NN_DEF("BatchNormalization", batch_norm, 5, 5, 1, 5, 0),
    NN_DEF("InstanceNormalization", instance_norm, 3, 3, 1, 1, 0),
    NN_DEF("LayerNormalization", layer_norm, 2, 3, 1, 3, 0),
    NN_DEF("LRN", lrn, 1, 1, 1, 1, 0),
    NN_DEF("MeanVarianceNormalization", mvn, 1, 1, 1, 1, 0),
    NN_DEF("Gemm", gemm, 2, 3, 1, 1, 0),
    NN_DEF("MatMul", matmul, 2, 2, 1, 1, 0),
    NN_DEF("Einsum", einsum, 1, -1, 1, 1, 0),
    NN_DEF("Det", det, 1, 1, 1, 1, 0),
    /* Random only in training mode; inference Dropout is the identity. */
    NN_DEF("Dropout", dropout, 1, 3, 1, 2, KILN_OP_NONDETERMINISTIC),
    NN_DEF("NegativeLogLikelihoodLoss", nll_loss, 2, 3, 1, 1, 0),
    NN_DEF("SoftmaxCrossEntropyLoss", sce_loss, 2, 3, 1, 2, 0),
};

const kiln_op_def *kiln_ops_nn(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(nn_ops);
  return nn_ops;
}
