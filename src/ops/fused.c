/* Fused ops (domain "kiln") that the pattern pass creates from their
 * decomposed forms, so a device may claim each as one kernel. The
 * reference kernels compute in double and round once to the output dtype.
 *
 *   kiln.Gelu(X) -> Y                       attribute approximate: "none" (default) or "tanh"
 *     none: Y = 0.5 * X * (1 + erf(X / sqrt(2)))
 *     tanh: Y = 0.5 * X * (1 + tanh(sqrt(2 / pi) * (X + 0.044715 * X^3)))
 *     (the same contract as ONNX Gelu-20)
 *
 *   kiln.FusedAttention(Q, K, V, [mask]) -> Y
 *     attributes scale (float, default 1), transpose_k (int, default 1)
 *     Q [..., M, D]; K [..., N, D] (transpose_k = 1) or [..., D, N] (0);
 *     V [..., N, Dv]; mask broadcastable to [..., M, N].
 *     Y = softmax(scale * Q·Kᵀ + mask, last axis) · V   : [..., M, Dv]
 *     Leading (batch) axes broadcast like MatMul's; float dtypes, all alike.
 *
 *   kiln.Resample(X, I_0, [W_0], I_1, [W_1], ...) -> Y
 *     attributes axes (ints: the resampled axes, increasing), nearest (int,
 *     default 0: then no W inputs), extrapolation_value (float, default 0)
 *     I_k: int32 [out_k, taps_k], the input indices along axes[k] that
 *     output coordinate o reads; W_k: float [out_k, taps_k], their weights
 *     (nearest: one tap of weight 1). An index of -1 (tap 0) marks a
 *     coordinate outside the input: the output element is then
 *     extrapolation_value. Y is X with axis axes[k] of length out_k;
 *     Y[o] = sum over the taps' tensor product of prod_k W_k[o_k, t_k] *
 *     X[..., I_k[o_k, t_k], ...]. What Resize and Upsample become once
 *     their scales or sizes are constants (passes/resample_tables.c).
 */
#include "ops/op.h"
#include "ops/gradient.h"

#include <math.h>
#include <stdio.h>

#define FUSED_DOMAIN "kiln"

static kiln_status_t require_float(const kiln_tensor *t, int i, const char *name) {
  if (!kiln_dtype_is_float(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected a float type", i, name,
                      kiln_dtype_name(t->dtype));
  return NULL;
}

static kiln_status_t load_f64(const kiln_tensor *t, double **out) {
  double *v = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(double));
  if (!v) return KILN_OOM();
  for (int64_t i = 0; i < t->numel; i++) v[i] = kiln_load_f64(t->data, t->dtype, i);
  *out = v;
  return NULL;
}

/* ---- Gelu -------------------------------------------------------------------- */

static kiln_status_t gelu_mode(const kiln_node *node, bool *tanh_mode) {
  const char *a = kiln_attr_string(node, "approximate", "none");
  if (!strcmp(a, "none")) *tanh_mode = false;
  else if (!strcmp(a, "tanh")) *tanh_mode = true;
  else return kiln_error(KILN_INVALID_MODEL, "attribute approximate: \"%s\", expected \"none\" or \"tanh\"", a);
  return NULL;
}

static kiln_status_t gelu_infer(kiln_infer_ctx *ctx) {
  bool t;
  KILN_TRY(gelu_mode(ctx->node, &t));
  return kiln_infer_same_as_input(ctx, 0, 0);
}

static kiln_status_t gelu_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  bool tanh_mode;
  KILN_TRY(gelu_mode(ctx->node, &tanh_mode));
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(require_float(x, 0, "X"));
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, x->dims, &y));
  const double k = sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < x->numel; i++) {
    double v = kiln_load_f64(x->data, x->dtype, i);
    double r = tanh_mode ? 0.5 * v * (1.0 + tanh(k * (v + 0.044715 * v * v * v))) : 0.5 * v * (1.0 + erf(v / M_SQRT2));
    kiln_store_f64(y->data, y->dtype, i, r);
  }
  return NULL;
}

kiln_status_t kiln_gelu_ref_kernel(kiln_kernel_ctx *ctx) { return gelu_kernel(ctx); }

/* ---- FusedAttention -------------------------------------------------------------- */

typedef struct attn_shape {
  int nb;                          /* batch rank of the output */
  int64_t batch[KILN_MAX_RANK];
  int64_t m, n, d, dv;
} attn_shape;

static const char *attn_names[4] = {"Q", "K", "V", "mask"};

/* Batch dims: everything before the last two axes (a mask of rank < 2 has none). */
static int batch_rank(int rank) { return rank > 2 ? rank - 2 : 0; }

/* Shapes of the four inputs (mask may have rank -1 = absent). dims may hold -1 (unknown) in inference. */
static kiln_status_t attn_shapes(int rank[4], const int64_t *dims[4], bool transpose_k, attn_shape *s) {
  char a[256], b[256];
  for (int i = 0; i < 3; i++)
    if (rank[i] < 2)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): rank %d, expected at least 2", i, attn_names[i], rank[i]);
  const int64_t *q = dims[0], *k = dims[1], *v = dims[2];
  int rq = rank[0], rk = rank[1], rv = rank[2];
  s->m = q[rq - 2];
  s->d = q[rq - 1];
  int64_t kd = transpose_k ? k[rk - 1] : k[rk - 2], kn = transpose_k ? k[rk - 2] : k[rk - 1];
  s->n = kn;
  s->dv = v[rv - 1];
  if (s->d >= 0 && kd >= 0 && s->d != kd)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K): shape %s does not match input 0 (Q) %s (head size %lld vs %lld)",
                      kiln_shape_str(rk, k, a, sizeof a), kiln_shape_str(rq, q, b, sizeof b), (long long)kd,
                      (long long)s->d);
  if (kn >= 0 && v[rv - 2] >= 0 && kn != v[rv - 2])
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (V): shape %s, expected %lld rows like input 1 (K) %s",
                      kiln_shape_str(rv, v, a, sizeof a), (long long)kn, kiln_shape_str(rk, k, b, sizeof b));
  if (s->n < 0) s->n = v[rv - 2];
  s->nb = 0;
  for (int i = 0; i < 4; i++) {
    if (rank[i] < 0) continue;
    int br = batch_rank(rank[i]);
    int64_t tmp[KILN_MAX_RANK];
    int r;
    KILN_RETURN_IF_ERROR(kiln_broadcast_shapes(s->nb, s->batch, br, dims[i], &r, tmp), "input %d (%s) batch dims", i,
                         attn_names[i]);
    s->nb = r;
    memcpy(s->batch, tmp, sizeof tmp);
  }
  if (rank[3] >= 0) {
    /* The mask's last two axes (or fewer) broadcast to [M, N] without growing it. */
    int rm = rank[3];
    int64_t mm = rm >= 2 ? dims[3][rm - 2] : 1, mn = rm >= 1 ? dims[3][rm - 1] : 1;
    if ((mm != 1 && mm >= 0 && s->m >= 0 && mm != s->m) || (mn != 1 && mn >= 0 && s->n >= 0 && mn != s->n))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (mask): shape %s does not broadcast to [..., %lld, %lld]",
                        kiln_shape_str(rm, dims[3], a, sizeof a), (long long)s->m, (long long)s->n);
  }
  return NULL;
}

static kiln_status_t attention_infer(kiln_infer_ctx *ctx) {
  const kiln_type *t[4] = {0};
  for (int i = 0; i < 4 && i < ctx->n_inputs; i++) t[i] = ctx->inputs[i];
  if (!t[0]) return NULL;
  kiln_dtype dt = t[0]->dtype;
  int rank[4] = {-1, -1, -1, -1};
  const int64_t *dims[4] = {0};
  for (int i = 0; i < 4; i++) {
    if (!t[i]) continue;
    if (t[i]->rank < 0 && i < 3) {
      kiln_infer_set(ctx, 0, dt, -1, NULL);
      return NULL;
    }
    rank[i] = t[i]->rank;
    dims[i] = t[i]->dims;
  }
  if (t[3] && t[3]->rank < 0) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  attn_shape s;
  KILN_TRY(attn_shapes(rank, dims, kiln_attr_int(ctx->node, "transpose_k", 1) != 0, &s));
  int64_t out[KILN_MAX_RANK];
  if (s.nb + 2 > KILN_MAX_RANK) return kiln_error(KILN_INVALID_ARGUMENT, "output rank %d is too large", s.nb + 2);
  memcpy(out, s.batch, (size_t)s.nb * sizeof(int64_t));
  out[s.nb] = s.m;
  out[s.nb + 1] = s.dv;
  kiln_infer_set(ctx, 0, dt, s.nb + 2, out);
  return NULL;
}

/* Element strides of t's batch axes against the output's nb batch axes (0 where broadcast). */
static void batch_strides(const kiln_tensor *t, int nb, int64_t *str) {
  int br = batch_rank(t->rank);
  int64_t inner = 1;
  for (int i = br; i < t->rank; i++) inner *= t->dims[i];
  int64_t acc = inner;
  for (int i = nb - 1; i >= 0; i--) {
    int j = i - (nb - br);
    if (j < 0) {
      str[i] = 0;
      continue;
    }
    str[i] = t->dims[j] == 1 ? 0 : acc;
    acc *= t->dims[j];
  }
}

static kiln_status_t attention_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *in[4] = {0}, *y;
  for (int i = 0; i < 3; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(require_float(in[i], i, attn_names[i]));
  }
  in[3] = ctx->n_inputs > 3 ? kiln_kernel_input(ctx, 3) : NULL;
  for (int i = 1; i < 4; i++)
    if (in[i] && in[i]->dtype != in[0]->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input 0 (Q)", i,
                        attn_names[i], kiln_dtype_name(in[i]->dtype), kiln_dtype_name(in[0]->dtype));
  bool tk = kiln_attr_int(ctx->node, "transpose_k", 1) != 0;
  double scale = kiln_attr_float(ctx->node, "scale", 1.0f);
  int rank[4];
  const int64_t *dims[4];
  for (int i = 0; i < 4; i++) {
    rank[i] = in[i] ? in[i]->rank : -1;
    dims[i] = in[i] ? in[i]->dims : NULL;
  }
  attn_shape s;
  KILN_TRY(attn_shapes(rank, dims, tk, &s));
  int nb = s.nb;
  if (nb + 2 > KILN_MAX_RANK) return kiln_error(KILN_INVALID_ARGUMENT, "output rank %d is too large", nb + 2);
  int64_t ydims[KILN_MAX_RANK];
  memcpy(ydims, s.batch, (size_t)nb * sizeof(int64_t));
  ydims[nb] = s.m;
  ydims[nb + 1] = s.dv;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, in[0]->dtype, nb + 2, ydims, &y));
  if (y->numel == 0) return NULL;
  int64_t str[4][KILN_MAX_RANK] = {{0}};
  for (int i = 0; i < 4; i++)
    if (in[i]) batch_strides(in[i], nb, str[i]);
  /* Mask strides inside one [M, N] block (0 where it broadcasts). */
  int64_t mask_sm = 0, mask_sn = 0;
  if (in[3]) {
    int rm = in[3]->rank;
    int64_t mn = rm >= 1 ? in[3]->dims[rm - 1] : 1, mm = rm >= 2 ? in[3]->dims[rm - 2] : 1;
    mask_sn = mn == 1 ? 0 : 1;
    mask_sm = mm == 1 ? 0 : mn;
  }
  double *v[4] = {0}, *row = malloc((size_t)(s.n > 0 ? s.n : 1) * sizeof(double));
  kiln_status_t st = row ? NULL : KILN_OOM();
  for (int i = 0; i < 4 && !st; i++)
    if (in[i]) st = load_f64(in[i], &v[i]);
  int64_t nbatch = kiln_shape_numel(nb, s.batch), idx[KILN_MAX_RANK] = {0};
  for (int64_t b = 0; b < nbatch && !st; b++) {
    int64_t off[4] = {0};
    for (int i = 0; i < 4; i++)
      for (int a = 0; a < nb; a++) off[i] += idx[a] * str[i][a];
    const double *q = v[0] + off[0], *k = v[1] + off[1], *vv = v[2] + off[2], *mask = in[3] ? v[3] + off[3] : NULL;
    for (int64_t i = 0; i < s.m; i++) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < s.n; j++) {
        double acc = 0;
        for (int64_t e = 0; e < s.d; e++) acc += q[i * s.d + e] * (tk ? k[j * s.d + e] : k[e * s.n + j]);
        acc *= scale;
        if (mask) acc += mask[i * mask_sm + j * mask_sn];
        row[j] = acc;
        if (acc > mx || j == 0) mx = acc;
      }
      double sum = 0;
      for (int64_t j = 0; j < s.n; j++) {
        row[j] = exp(row[j] - mx);
        sum += row[j];
      }
      for (int64_t e = 0; e < s.dv; e++) {
        double acc = 0;
        for (int64_t j = 0; j < s.n; j++) acc += row[j] / sum * vv[j * s.dv + e];
        kiln_store_f64(y->data, y->dtype, (b * s.m + i) * s.dv + e, acc);
      }
    }
    for (int a = nb - 1; a >= 0; a--) {
      if (++idx[a] < s.batch[a]) break;
      idx[a] = 0;
    }
  }
  for (int i = 0; i < 4; i++) free(v[i]);
  free(row);
  return st;
}

/* ---- Resample ----------------------------------------------------------------- */

typedef struct resample_shape {
  int n_axes;
  int axis[KILN_MAX_RANK];
  int input[KILN_MAX_RANK]; /* I_k's input index (W_k follows unless nearest) */
  bool nearest;
} resample_shape;

static kiln_status_t resample_shape_of(const kiln_node *node, int n_inputs, int rank, resample_shape *s) {
  int n;
  const int64_t *axes = kiln_attr_ints(node, "axes", &n);
  s->nearest = kiln_attr_int(node, "nearest", 0) != 0;
  int per = s->nearest ? 1 : 2;
  if (n < 0 || n > KILN_MAX_RANK || 1 + per * n != n_inputs)
    return kiln_error(KILN_INVALID_MODEL, "%d inputs for %d resampled axes (expected %d)", n_inputs, n, 1 + per * n);
  s->n_axes = n;
  for (int k = 0; k < n; k++) {
    if (axes[k] < 0 || (rank >= 0 && axes[k] >= rank) || (k && axes[k] <= axes[k - 1]))
      return kiln_error(KILN_INVALID_MODEL, "attribute axes: value %lld out of range or not increasing",
                        (long long)axes[k]);
    s->axis[k] = (int)axes[k];
    s->input[k] = 1 + per * k;
  }
  return NULL;
}

static kiln_status_t resample_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  resample_shape s;
  KILN_TRY(resample_shape_of(ctx->node, ctx->n_inputs, x->rank, &s));
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d];
  for (int k = 0; k < s.n_axes; k++) {
    const kiln_type *t = ctx->inputs[s.input[k]];
    dims[s.axis[k]] = t && t->rank == 2 ? t->dims[0] : -1;
  }
  kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
  return NULL;
}

static kiln_status_t resample_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y, *idx[KILN_MAX_RANK] = {0}, *w[KILN_MAX_RANK] = {0};
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(require_float(x, 0, "X"));
  resample_shape s;
  KILN_TRY(resample_shape_of(ctx->node, ctx->n_inputs, x->rank, &s));
  int64_t dims[KILN_MAX_RANK], taps[KILN_MAX_RANK];
  int of_axis[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++) {
    dims[d] = x->dims[d];
    of_axis[d] = -1;
  }
  for (int k = 0; k < s.n_axes; k++) {
    KILN_TRY(kiln_kernel_require_input(ctx, s.input[k], &idx[k]));
    if (idx[k]->dtype != KILN_DTYPE_I32 || idx[k]->rank != 2)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: expected int32 [out, taps]", s.input[k]);
    if (!s.nearest) {
      KILN_TRY(kiln_kernel_require_input(ctx, s.input[k] + 1, &w[k]));
      if (!kiln_dtype_is_float(w[k]->dtype) || !kiln_shape_equal(2, w[k]->dims, 2, idx[k]->dims))
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d: expected float weights shaped like input %d",
                          s.input[k] + 1, s.input[k]);
    }
    dims[s.axis[k]] = idx[k]->dims[0];
    taps[k] = idx[k]->dims[1];
    if (taps[k] < 1 || (s.nearest && taps[k] != 1))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d: %lld taps", s.input[k], (long long)taps[k]);
    of_axis[s.axis[k]] = k;
  }
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, dims, &y));
  double ev = kiln_attr_float(ctx->node, "extrapolation_value", 0.0f);
  int64_t in_stride[KILN_MAX_RANK], st = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    in_stride[d] = st;
    st *= x->dims[d];
  }
  int64_t o[KILN_MAX_RANK] = {0};
  for (int64_t e = 0; e < y->numel; e++) {
    bool outside = false;
    for (int k = 0; k < s.n_axes; k++) {
      int32_t i0 = ((const int32_t *)idx[k]->data)[o[s.axis[k]] * taps[k]];
      outside |= i0 < 0;
    }
    double acc = ev;
    if (!outside) {
      int64_t t[KILN_MAX_RANK] = {0};
      acc = 0;
      for (;;) { /* the tensor product of the axes' taps */
        double wt = 1;
        int64_t src = 0;
        bool ok = true;
        for (int d = 0; d < x->rank; d++) {
          int k = of_axis[d];
          int64_t i = o[d];
          if (k >= 0) {
            int64_t at = o[d] * taps[k] + t[k];
            i = ((const int32_t *)idx[k]->data)[at];
            if (w[k]) wt *= kiln_load_f64(w[k]->data, w[k]->dtype, at);
          }
          ok &= i >= 0 && i < x->dims[d];
          src += i * in_stride[d];
        }
        if (!ok) return kiln_error(KILN_INVALID_ARGUMENT, "an index table reads outside X");
        acc += wt * kiln_load_f64(x->data, x->dtype, src);
        int k = s.n_axes - 1;
        while (k >= 0 && ++t[k] == taps[k]) t[k--] = 0;
        if (k < 0) break;
      }
    }
    kiln_store_f64(y->data, y->dtype, e, acc);
    for (int d = x->rank - 1; d >= 0 && ++o[d] == dims[d]; d--) o[d] = 0;
  }
  return NULL;
}

static const kiln_op_def fused_ops[] = {
    {FUSED_DOMAIN, "Gelu", 1, 1, 1, 1, gelu_infer, gelu_kernel, 0, .id = KILN_OP_kiln_Gelu, .op_class = KILN_OPCLASS_ELEMENTWISE,
     .gradient = kiln_grad_gelu},
    {FUSED_DOMAIN, "FusedAttention", 3, 4, 1, 1, attention_infer, attention_kernel, 0, .id = KILN_OP_kiln_FusedAttention,
     .op_class = KILN_OPCLASS_CONTRACTION, .flops = kiln_flops_attention, .gradient = kiln_grad_attention},
    {FUSED_DOMAIN, "Resample", 1, 1 + 2 * KILN_MAX_RANK, 1, 1, resample_infer, resample_kernel, KILN_OP_REREADS_INPUT,
     .id = KILN_OP_kiln_Resample, .op_class = KILN_OPCLASS_REDUCTION},
};

const kiln_op_def *kiln_ops_fused(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(fused_ops);
  return fused_ops;
}
