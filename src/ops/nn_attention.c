/* Attention ops of ONNX: Attention (opsets 23-25) and ai.onnx.preview
 * FlexAttention (with its score_mod / prob_mod subgraphs).
 *
 *   Attention(Q, K, V, [attn_mask], [past_key], [past_value], [nonpad_kv_seqlen])
 *       -> Y, [present_key], [present_value], [qk_matmul_output]
 *     4-D: Q [B, Hq, Sq, D], K [B, Hkv, Skv, D], V [B, Hkv, Skv, Dv]
 *     3-D: Q [B, Sq, Hq*D], K [B, Skv, Hkv*D], V [B, Skv, Hkv*Dv] with the
 *          attributes q_num_heads and kv_num_heads; Y is then [B, Sq, Hq*Dv]
 *     past_key [B, Hkv, P, D] and past_value [B, Hkv, P, Dv] are prepended
 *     to K and V (present_* = the concatenation, T = P + Skv keys in all).
 *     Query head h reads key/value head h / (Hq / Hkv) (GQA, MQA).
 *     scores = (Q*sqrt(scale)) (K*sqrt(scale))^T, softcap c: c*tanh(s/c),
 *     plus the bias: attn_mask (bool: false = -inf; else added; a last axis
 *     shorter than T masks the keys past it), is_causal (key j allowed iff
 *     j <= i + offset; offset = P, or nonpad_kv_seqlen[b] - Sq, or 0), the
 *     padding of nonpad_kv_seqlen (keys j >= nonpad[b] masked) and from
 *     opset 25 the window (offset+i - left <= j <= offset+i + right).
 *     A row whose bias is -inf everywhere gives zero probabilities.
 *     qk_matmul_output (mode 0..3): scores, after softcap, with the bias,
 *     after softmax.
 *
 *   FlexAttention(Q, K, V) -> Y, all rank 4 (as Attention's 4-D form):
 *     scores = (Q*sqrt(scale)) (K*sqrt(scale))^T, then score_mod(scores),
 *     softmax, prob_mod(probs), probs V. The subgraphs take and return one
 *     [B, Hq, Sq, T] tensor of the softmax precision.
 *
 * The kernels round to the element types at the same steps as ONNX's
 * reference implementation (the scaled Q and K, each product's result, the
 * softmax's steps in its precision), products accumulated in f32 (f64 for
 * double), so bf16 and f16 results agree with it to the last bit in most
 * elements rather than drifting by an ulp.
 */
#include "ops/op.h"

#include <math.h>
#include <stdio.h>


/* numpy's result type of two float dtypes (f16 with bf16: f32). */
static kiln_dtype promote_float(kiln_dtype a, kiln_dtype b) {
  if (a == b) return a;
  if (a == KILN_DTYPE_F64 || b == KILN_DTYPE_F64) return KILN_DTYPE_F64;
  return KILN_DTYPE_F32;
}

/* A dot product of n terms a[i*sa] * b[i*sb] accumulated as numpy's matmul
 * does for dtype t: in f64 for double, in f32 otherwise, rounded to t. */
static double dot_as(kiln_dtype t, const double *a, int64_t sa, const double *b, int64_t sb, int64_t n) {
  if (t == KILN_DTYPE_F64) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i * sa] * b[i * sb];
    return s;
  }
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += (float)a[i * sa] * (float)b[i * sb];
  return kiln_round_to_dtype(t, s);
}

/* Softmax of x[0..n) in dtype t, in place, as the reference computes it:
 * a max of -inf (a fully masked row) subtracts 0, a zero sum divides by 1.
 * bf16 sums round after every addition (ml_dtypes' reduction), other
 * types accumulate wider and round once. */
static void softmax_as(kiln_dtype t, double *x, int64_t n) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    if (isnan(x[j])) {
      m = NAN;
      break;
    }
    if (x[j] > m) m = x[j];
  }
  double safe = m == -INFINITY ? 0.0 : m;
  double s = 0;
  for (int64_t j = 0; j < n; j++) {
    x[j] = kiln_round_to_dtype(t, exp(kiln_round_to_dtype(t, x[j] - safe)));
    s = t == KILN_DTYPE_BF16 ? kiln_round_to_dtype(t, s + x[j]) : s + x[j];
  }
  s = kiln_round_to_dtype(t, s);
  if (s == 0) s = 1;
  for (int64_t j = 0; j < n; j++) x[j] = kiln_round_to_dtype(t, x[j] / s);
}

static kiln_status_t require_float_input(const kiln_tensor *t, int i, const char *name) {
  if (!kiln_dtype_is_float(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected float16, bfloat16, float or double", i,
                      name, kiln_dtype_name(t->dtype));
  return NULL;
}

static kiln_status_t float_dtype_attr(const kiln_node *node, const char *name, kiln_dtype dflt, kiln_dtype *out) {
  const kiln_attr *a = kiln_node_attr(node, name);
  if (!a) {
    *out = dflt;
    return NULL;
  }
  if (a->type != KILN_ATTR_INT || !kiln_dtype_is_valid((int)a->i) || !kiln_dtype_is_float((kiln_dtype)a->i))
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: %lld is not a float dtype (float16, bfloat16, float, double)",
                      name, a->type == KILN_ATTR_INT ? (long long)a->i : -1LL);
  *out = (kiln_dtype)a->i;
  return NULL;
}

/* Loads every element of t as double (a 1-element array for an empty t). */
static kiln_status_t load_all(const kiln_tensor *t, double **out) {
  double *v = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof *v);
  if (!v) return KILN_OOM();
  for (int64_t i = 0; i < t->numel; i++) v[i] = kiln_load_f64(t->data, t->dtype, i);
  *out = v;
  return NULL;
}

/* ---- Attention: geometry ---------------------------------------------------- */

/* The sizes of one Attention node; -1 where unknown (inference only). */
typedef struct attn_geom {
  int rank; /* of Q, K and V: 3 or 4 */
  int64_t batch, hq, hkv, sq, skv, past, d, dv, total;
} attn_geom;

static bool differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }
static int64_t known_sum(int64_t a, int64_t b) { return a >= 0 && b >= 0 ? a + b : -1; }
static int64_t known_mul(int64_t a, int64_t b) { return a >= 0 && b >= 0 ? a * b : -1; }

static const char *const attn_input_names[7] = {"Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"};

/* hidden / heads for a 3-D input; an error when heads do not divide it. */
static kiln_status_t split_heads(int64_t hidden, int64_t heads, int input, const char *attr, int64_t *out) {
  if (hidden < 0) {
    *out = -1;
    return NULL;
  }
  if (hidden % heads)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): last dim %lld is not a multiple of %s = %lld", input,
                      attn_input_names[input], (long long)hidden, attr, (long long)heads);
  *out = hidden / heads;
  return NULL;
}

/* The sizes from the types (rank -1: unknown) of Q, K, V and, when present,
 * past_key and past_value; errors name the input that disagrees. */
static kiln_status_t attn_geometry(const kiln_node *node, int opset, const kiln_type *const *in, int n_in,
                                   attn_geom *g) {
  const kiln_type *q = in[0], *k = in[1], *v = in[2];
  const kiln_type *pk = n_in > 4 ? in[4] : NULL, *pv = n_in > 5 ? in[5] : NULL;
  const kiln_type *nonpad = n_in > 6 ? in[6] : NULL;
  char s[256];
  memset(g, 0, sizeof *g);
  g->rank = -1;
  if ((pk == NULL) != (pv == NULL))
    return kiln_error(KILN_INVALID_MODEL, "past_key and past_value must be given together (only %s is)",
                      pk ? "input 4 (past_key)" : "input 5 (past_value)");
  if (pk && nonpad)
    return kiln_error(KILN_INVALID_MODEL,
                      "input 6 (nonpad_kv_seqlen) cannot be combined with a past key/value cache (inputs 4, 5)");
  for (int i = 0; i < 3; i++)
    if (in[i]->rank >= 0) {
      if (in[i]->rank != 3 && in[i]->rank != 4)
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected rank 3 or 4", i,
                          attn_input_names[i], kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s));
      if (g->rank >= 0 && in[i]->rank != g->rank)
        return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): rank %d, expected %d like the other inputs", i,
                          attn_input_names[i], in[i]->rank, g->rank);
      g->rank = in[i]->rank;
    }
  const kiln_attr *qh_a = kiln_node_attr(node, "q_num_heads"), *kvh_a = kiln_node_attr(node, "kv_num_heads");
  int64_t qh = qh_a && qh_a->type == KILN_ATTR_INT ? qh_a->i : -1;
  int64_t kvh = kvh_a && kvh_a->type == KILN_ATTR_INT ? kvh_a->i : -1;
  if (g->rank < 0) { /* unknown rank: nothing more to learn */
    g->batch = g->hq = g->hkv = g->sq = g->skv = g->past = g->d = g->dv = g->total = -1;
    return NULL;
  }
  if (g->rank == 3) {
    if (qh < 1 || kvh < 1)
      return kiln_error(KILN_INVALID_MODEL,
                        "3-D inputs need the attributes q_num_heads and kv_num_heads (positive), have %lld and %lld",
                        (long long)qh, (long long)kvh);
    g->batch = q->dims[0];
    g->sq = q->dims[1];
    g->skv = k->dims[1];
    g->hq = qh;
    g->hkv = kvh;
    int64_t dk;
    KILN_TRY(split_heads(q->dims[2], qh, 0, "q_num_heads", &g->d));
    KILN_TRY(split_heads(k->dims[2], kvh, 1, "kv_num_heads", &dk));
    KILN_TRY(split_heads(v->dims[2], kvh, 2, "kv_num_heads", &g->dv));
    if (differ(g->d, dk))
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 1 (K): head size %lld (last dim %lld / kv_num_heads %lld), Q's is %lld", (long long)dk,
                        (long long)k->dims[2], (long long)kvh, (long long)g->d);
    if (g->d < 0) g->d = dk;
  } else {
    if (opset >= 25 && (qh_a || kvh_a))
      return kiln_error(KILN_INVALID_MODEL, "q_num_heads and kv_num_heads must not be given for 4-D inputs");
    g->batch = q->dims[0];
    g->hq = q->dims[1];
    g->sq = q->dims[2];
    g->d = q->dims[3];
    g->hkv = k->dims[1];
    g->skv = k->dims[2];
    g->dv = v->dims[3];
    if (differ(g->hq, qh) || differ(g->hkv, kvh))
      return kiln_error(KILN_INVALID_MODEL,
                        "attributes q_num_heads %lld / kv_num_heads %lld disagree with the 4-D inputs' heads %lld / %lld",
                        (long long)qh, (long long)kvh, (long long)g->hq, (long long)g->hkv);
    if (differ(k->dims[3], g->d))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K): shape %s, head size %lld expected like Q's",
                        kiln_shape_str(k->rank, k->dims, s, sizeof s), (long long)g->d);
    if (g->d < 0) g->d = k->dims[3];
    if (differ(v->dims[1], g->hkv))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (V): shape %s, %lld heads expected like K's",
                        kiln_shape_str(v->rank, v->dims, s, sizeof s), (long long)g->hkv);
    if (g->hkv < 0) g->hkv = v->dims[1];
  }
  int seq_axis = g->rank == 3 ? 1 : 2;
  for (int i = 1; i < 3; i++)
    if (differ(in[i]->dims[0], g->batch))
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, batch %lld expected like Q's", i,
                        attn_input_names[i], kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s),
                        (long long)g->batch);
  if (g->batch < 0) g->batch = k->dims[0] >= 0 ? k->dims[0] : v->dims[0];
  if (differ(v->dims[seq_axis], g->skv))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (V): shape %s, sequence length %lld expected like K's",
                      kiln_shape_str(v->rank, v->dims, s, sizeof s), (long long)g->skv);
  if (g->skv < 0) g->skv = v->dims[seq_axis];
  if (g->hq > 0 && g->hkv > 0 && g->hq % g->hkv)
    return kiln_error(KILN_INVALID_ARGUMENT, "%lld query heads are not a multiple of %lld key/value heads",
                      (long long)g->hq, (long long)g->hkv);
  if (g->hkv == 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K): 0 key/value heads");
  g->past = 0;
  if (pk) {
    const kiln_type *p[2] = {pk, pv};
    int64_t last[2] = {g->d, g->dv};
    g->past = -1;
    for (int i = 0; i < 2; i++) {
      const kiln_type *t = p[i];
      if (t->rank < 0) continue;
      const char *what = i ? "[batch, kv_num_heads, past_length, v_head_size]"
                           : "[batch, kv_num_heads, past_length, head_size]";
      if (t->rank != 4 || differ(t->dims[0], g->batch) || differ(t->dims[1], g->hkv) || differ(t->dims[3], last[i]) ||
          differ(t->dims[2], g->past))
        return kiln_error(KILN_INVALID_ARGUMENT,
                          "input %d (%s): shape %s, expected %s = [%lld, %lld, %s, %lld]", 4 + i,
                          attn_input_names[4 + i], kiln_shape_str(t->rank, t->dims, s, sizeof s), what,
                          (long long)g->batch, (long long)g->hkv, i ? "past_key's length" : "P", (long long)last[i]);
      if (g->past < 0) g->past = t->dims[2];
    }
  }
  g->total = known_sum(g->past, g->skv);
  return NULL;
}

/* Checks attn_mask's shape (rank <= 4, broadcastable to [B, Hq, Sq, T],
 * its last axis at most T: shorter masks the keys past it). */
static kiln_status_t attn_check_mask(const attn_geom *g, const kiln_type *m) {
  if (!m || m->rank < 0) return NULL;
  char s[256];
  const int64_t full[4] = {g->batch, g->hq, g->sq, g->total};
  if (m->rank < 1 || m->rank > 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (attn_mask): shape %s, expected rank 1 to 4",
                      kiln_shape_str(m->rank, m->dims, s, sizeof s));
  for (int i = 0; i < m->rank; i++) {
    int64_t want = full[4 - m->rank + i], have = m->dims[i];
    bool last = i == m->rank - 1;
    if (have < 0 || want < 0) continue;
    if (last ? have > want : (have != 1 && have != want))
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 3 (attn_mask): shape %s does not broadcast to [batch %lld, q_heads %lld, q_length %lld, "
                        "total_length %lld] (its last dim may be shorter, not longer)",
                        kiln_shape_str(m->rank, m->dims, s, sizeof s), (long long)g->batch, (long long)g->hq,
                        (long long)g->sq, (long long)g->total);
  }
  return NULL;
}

static kiln_status_t attention_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in[7] = {0};
  for (int i = 0; i < 7 && i < ctx->n_inputs; i++) in[i] = ctx->inputs[i];
  if (ctx->opset < 24) in[6] = NULL;
  if (!in[0] || !in[1] || !in[2]) return NULL;
  attn_geom g;
  KILN_TRY(attn_geometry(ctx->node, ctx->opset, in, 7, &g));
  KILN_TRY(attn_check_mask(&g, in[3]));
  kiln_dtype t1 = in[0]->dtype, t2 = in[2]->dtype;
  if (g.rank < 0) {
    kiln_infer_set(ctx, 0, t1, -1, NULL);
  } else if (g.rank == 3) {
    int64_t y[3] = {g.batch, g.sq, known_mul(g.hq, g.dv)};
    kiln_infer_set(ctx, 0, t1, 3, y);
  } else {
    int64_t y[4] = {g.batch, g.hq, g.sq, g.dv};
    kiln_infer_set(ctx, 0, t1, 4, y);
  }
  int64_t pk[4] = {g.batch, g.hkv, g.total, g.d}, pv[4] = {g.batch, g.hkv, g.total, g.dv};
  int64_t qk[4] = {g.batch, g.hq, g.sq, g.total};
  if (ctx->n_outputs > 1) kiln_infer_set(ctx, 1, in[1]->dtype, g.rank < 0 ? -1 : 4, pk);
  if (ctx->n_outputs > 2) kiln_infer_set(ctx, 2, t2, g.rank < 0 ? -1 : 4, pv);
  if (ctx->n_outputs > 3) kiln_infer_set(ctx, 3, t1, g.rank < 0 ? -1 : 4, qk);
  return NULL;
}

/* ---- Attention: kernel ------------------------------------------------------ */

/* Offset of element [b, h, s, e] of an input in Attention's 3-D or 4-D
 * layout (heads h of size hd interleaved in the last axis in 3-D). */
static int64_t attn_offset(int rank, int64_t heads, int64_t seq, int64_t hd, int64_t b, int64_t h, int64_t s,
                           int64_t e) {
  if (rank == 3) return (b * seq + s) * heads * hd + h * hd + e;
  return ((b * heads + h) * seq + s) * hd + e;
}

/* The keys (or values) with the past prepended: [B, Hkv, T, hd] in double. */
static kiln_status_t attn_concat_cache(const attn_geom *g, const kiln_tensor *past, const kiln_tensor *cur, int64_t hd,
                                       double **out) {
  int64_t n = g->batch * g->hkv * g->total * hd;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return KILN_OOM();
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t h = 0; h < g->hkv; h++)
      for (int64_t t = 0; t < g->total; t++)
        for (int64_t e = 0; e < hd; e++) {
          double x = t < g->past ? kiln_load_f64(past->data, past->dtype, ((b * g->hkv + h) * g->past + t) * hd + e)
                                 : kiln_load_f64(cur->data, cur->dtype,
                                                 attn_offset(g->rank, g->hkv, g->skv, hd, b, h, t - g->past, e));
          v[((b * g->hkv + h) * g->total + t) * hd + e] = x;
        }
  *out = v;
  return NULL;
}

static kiln_status_t attn_store_present(kiln_kernel_ctx *ctx, int i, kiln_dtype dt, const attn_geom *g, int64_t hd,
                                        const double *v) {
  if (ctx->n_outputs <= i || !ctx->output_wanted[i]) return NULL;
  int64_t dims[4] = {g->batch, g->hkv, g->total, hd};
  kiln_tensor *o;
  KILN_TRY(kiln_kernel_output_uninit(ctx, i, dt, 4, dims, &o));
  for (int64_t e = 0; e < o->numel; e++) kiln_store_f64(o->data, dt, e, v[e]);
  return NULL;
}

typedef struct attn_params {
  bool causal;
  int mode;                 /* qk_matmul_output_mode */
  double scale_sqrt;        /* sqrt(scale) rounded to T1 */
  double softcap;           /* 0: none */
  int64_t left, right;      /* window sizes, -1 unbounded */
  kiln_dtype t1, t2, bias_t, softmax_t;
} attn_params;

static kiln_status_t attn_params_of(const kiln_kernel_ctx *ctx, const attn_geom *g, const kiln_tensor *q,
                                    const kiln_tensor *v, const kiln_tensor *mask, attn_params *p) {
  const kiln_node *node = ctx->node;
  p->causal = kiln_attr_int(node, "is_causal", 0) != 0;
  int64_t mode = kiln_attr_int(node, "qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return kiln_error(KILN_INVALID_MODEL, "attribute qk_matmul_output_mode: %lld, expected 0, 1, 2 or 3",
                      (long long)mode);
  p->mode = (int)mode;
  p->t1 = q->dtype;
  p->t2 = v->dtype;
  const kiln_attr *sa = kiln_node_attr(node, "scale");
  double scale = sa && sa->type == KILN_ATTR_FLOAT ? (double)sa->f : 1.0 / sqrt((double)g->d);
  p->scale_sqrt = kiln_round_to_dtype(p->t1, sqrt(scale));
  p->softcap = kiln_attr_float(node, "softcap", 0.0f);
  p->left = ctx->opset >= 25 ? kiln_attr_int(node, "left_window_size", -1) : -1;
  p->right = ctx->opset >= 25 ? kiln_attr_int(node, "right_window_size", -1) : -1;
  if (p->left < -1 || p->right < -1)
    return kiln_error(KILN_INVALID_MODEL, "attributes left_window_size %lld, right_window_size %lld: expected >= -1",
                      (long long)p->left, (long long)p->right);
  /* A float mask wider than T1 widens the biased scores, as numpy adds them. */
  p->bias_t = p->t1;
  if (mask && kiln_dtype_is_float(mask->dtype)) p->bias_t = promote_float(p->t1, mask->dtype);
  KILN_TRY(float_dtype_attr(node, "softmax_precision", p->bias_t, &p->softmax_t));
  return NULL;
}

/* The additive bias of row (b, h, i) over the T keys, and whether every
 * key is masked (-inf). mask_strides: attn_mask's strides broadcast to
 * [B, Hq, Sq, *]; mask_len its last dim. */
static bool attn_bias_row(const attn_geom *g, const attn_params *p, const kiln_tensor *mask,
                          const int64_t *mask_strides, int64_t mask_len, const int64_t *nonpad, int64_t b, int64_t h,
                          int64_t i, double *bias) {
  int64_t offset = g->past;
  if (nonpad) offset = nonpad[b] - g->sq;
  bool all_masked = true;
  for (int64_t j = 0; j < g->total; j++) {
    double x = 0;
    if (mask) {
      if (j >= mask_len) {
        x = -INFINITY;
      } else {
        int64_t at = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2] + j * mask_strides[3];
        double m = kiln_load_f64(mask->data, mask->dtype, at);
        x = mask->dtype == KILN_DTYPE_BOOL ? (m != 0 ? 0.0 : -INFINITY) : m;
      }
    }
    if (p->causal && j > i + offset) x = -INFINITY;
    if (nonpad && j >= nonpad[b]) x = -INFINITY;
    int64_t pos = offset + i;
    if (p->left >= 0 && j < pos - p->left) x = -INFINITY;
    if (p->right >= 0 && j > pos + p->right) x = -INFINITY;
    bias[j] = x;
    if (!(x == -INFINITY)) all_masked = false;
  }
  return all_masked;
}

/* The run-time tensors' types (tp[i] NULL for an absent input), so the
 * kernels check shapes with the inference's own geometry rules. */
static void types_of(kiln_tensor *const *in, int n, kiln_type *ty, const kiln_type **tp) {
  for (int i = 0; i < n; i++) {
    if (!in[i]) continue;
    memset(&ty[i], 0, sizeof ty[i]);
    ty[i].kind = KILN_TYPE_TENSOR;
    ty[i].dtype = in[i]->dtype;
    ty[i].rank = in[i]->rank;
    memcpy(ty[i].dims, in[i]->dims, sizeof(int64_t) * (size_t)in[i]->rank);
    tp[i] = &ty[i];
  }
}

static kiln_status_t attention_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *in[7] = {0};
  for (int i = 0; i < 3; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(require_float_input(in[i], i, attn_input_names[i]));
  }
  for (int i = 3; i < 7 && i < ctx->n_inputs; i++) in[i] = kiln_kernel_input(ctx, i);
  if (in[6] && ctx->opset < 24) in[6] = NULL;
  kiln_tensor *q = in[0], *k = in[1], *v = in[2], *mask = in[3], *pk = in[4], *pv = in[5], *np_t = in[6];
  if (k->dtype != q->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K): dtype %s, expected %s like input 0 (Q)",
                      kiln_dtype_name(k->dtype), kiln_dtype_name(q->dtype));
  if (pk && pk->dtype != k->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 4 (past_key): dtype %s, expected %s like input 1 (K)",
                      kiln_dtype_name(pk->dtype), kiln_dtype_name(k->dtype));
  if (pv && pv->dtype != v->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 5 (past_value): dtype %s, expected %s like input 2 (V)",
                      kiln_dtype_name(pv->dtype), kiln_dtype_name(v->dtype));
  if (mask && (mask->dtype == KILN_DTYPE_STRING || kiln_dtype_size(mask->dtype) == 0 || mask->dtype == KILN_DTYPE_C64 ||
               mask->dtype == KILN_DTYPE_C128))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (attn_mask): dtype %s, expected bool or a number type",
                      kiln_dtype_name(mask->dtype));
  if (np_t && np_t->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 6 (nonpad_kv_seqlen): dtype %s, expected int64",
                      kiln_dtype_name(np_t->dtype));

  kiln_type ty[7];
  const kiln_type *tp[7] = {0};
  types_of(in, 7, ty, tp);
  attn_geom g;
  KILN_TRY(attn_geometry(ctx->node, ctx->opset, tp, 7, &g));
  KILN_TRY(attn_check_mask(&g, tp[3]));
  char s[256];
  const int64_t *nonpad = NULL;
  if (np_t) {
    if (np_t->rank != 1 || np_t->dims[0] != g.batch)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 6 (nonpad_kv_seqlen): shape %s, expected [%lld] (the batch)",
                        kiln_shape_str(np_t->rank, np_t->dims, s, sizeof s), (long long)g.batch);
    nonpad = np_t->data;
    for (int64_t b = 0; b < g.batch; b++)
      if (nonpad[b] < 0 || nonpad[b] > g.total)
        return kiln_error(KILN_OUT_OF_RANGE, "input 6 (nonpad_kv_seqlen): [%lld] = %lld, expected 0..%lld (K's length)",
                          (long long)b, (long long)nonpad[b], (long long)g.total);
  }
  attn_params p;
  KILN_TRY(attn_params_of(ctx, &g, q, v, mask, &p));

  int64_t mstr[4] = {0, 0, 0, 0}, mask_len = 0;
  if (mask) {
    int64_t stride = 1;
    for (int i = mask->rank - 1; i >= 0; i--) {
      int ax = 4 - mask->rank + i;
      mstr[ax] = (mask->dims[i] == 1 && ax != 3) ? 0 : stride;
      stride *= mask->dims[i];
    }
    mask_len = mask->dims[mask->rank - 1];
  }

  /* Outputs first: present_* are the caches as they are. */
  kiln_tensor *y, *qk_out = NULL;
  int64_t ydims[4] = {g.batch, g.hq, g.sq, g.dv}, y3[3] = {g.batch, g.sq, g.hq * g.dv};
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, p.t1, g.rank, g.rank == 3 ? y3 : ydims, &y));
  if (ctx->n_outputs > 3 && ctx->output_wanted[3]) {
    int64_t qd[4] = {g.batch, g.hq, g.sq, g.total};
    KILN_TRY(kiln_kernel_output_uninit(ctx, 3, p.t1, 4, qd, &qk_out));
  }
  double *kall = NULL, *vall = NULL, *qs = NULL, *row = NULL, *bias = NULL, *vcol = NULL;
  kiln_status_t st = attn_concat_cache(&g, pk, k, g.d, &kall);
  if (!st) st = attn_concat_cache(&g, pv, v, g.dv, &vall);
  if (!st) st = attn_store_present(ctx, 1, k->dtype, &g, g.d, kall);
  if (!st) st = attn_store_present(ctx, 2, v->dtype, &g, g.dv, vall);
  int64_t nt = g.total > 0 ? g.total : 1, nd = g.d > 0 ? g.d : 1;
  if (!st) {
    qs = malloc((size_t)nd * sizeof *qs);
    row = malloc((size_t)nt * sizeof *row);
    bias = malloc((size_t)nt * sizeof *bias);
    vcol = malloc((size_t)nt * sizeof *vcol);
    if (!qs || !row || !bias || !vcol) st = KILN_OOM();
  }
  if (st) goto done;
  /* K scaled by sqrt(scale), rounded to T1, in place. */
  for (int64_t e = 0; e < g.batch * g.hkv * g.total * g.d; e++) kall[e] = kiln_round_to_dtype(p.t1, kall[e] * p.scale_sqrt);
  kiln_dtype pv_t = promote_float(p.t1, p.t2);
  int64_t group = g.hq / g.hkv;
  for (int64_t b = 0; b < g.batch; b++)
    for (int64_t h = 0; h < g.hq; h++) {
      int64_t kh = h / group;
      const double *kb = kall + (b * g.hkv + kh) * g.total * g.d, *vb = vall + (b * g.hkv + kh) * g.total * g.dv;
      for (int64_t i = 0; i < g.sq; i++) {
        for (int64_t e = 0; e < g.d; e++)
          qs[e] = kiln_round_to_dtype(p.t1, kiln_load_f64(q->data, q->dtype, attn_offset(g.rank, g.hq, g.sq, g.d, b, h, i, e)) *
                                     p.scale_sqrt);
        bool all_masked = attn_bias_row(&g, &p, mask, mstr, mask_len, nonpad, b, h, i, bias);
        int64_t qk_base = ((b * g.hq + h) * g.sq + i) * g.total;
        for (int64_t j = 0; j < g.total; j++) {
          double x = dot_as(p.t1, qs, 1, kb + j * g.d, 1, g.d);
          if (qk_out && p.mode == 0) kiln_store_f64(qk_out->data, p.t1, qk_base + j, x);
          if (p.softcap > 0) {
            x = kiln_round_to_dtype(p.t1, x / p.softcap);
            x = kiln_round_to_dtype(p.t1, tanh(x));
            x = kiln_round_to_dtype(p.t1, x * p.softcap);
          }
          if (qk_out && p.mode == 1) kiln_store_f64(qk_out->data, p.t1, qk_base + j, x);
          x = kiln_round_to_dtype(p.bias_t, x + bias[j]);
          if (qk_out && p.mode == 2) kiln_store_f64(qk_out->data, p.t1, qk_base + j, x);
          row[j] = kiln_round_to_dtype(p.softmax_t, x);
        }
        softmax_as(p.softmax_t, row, g.total);
        for (int64_t j = 0; j < g.total; j++) {
          row[j] = all_masked ? 0.0 : kiln_round_to_dtype(p.t1, row[j]);
          if (qk_out && p.mode == 3) kiln_store_f64(qk_out->data, p.t1, qk_base + j, row[j]);
        }
        for (int64_t e = 0; e < g.dv; e++) {
          for (int64_t j = 0; j < g.total; j++) vcol[j] = vb[j * g.dv + e];
          double out = kiln_round_to_dtype(p.t1, dot_as(pv_t, row, 1, vcol, 1, g.total));
          kiln_store_f64(y->data, p.t1, attn_offset(g.rank, g.hq, g.sq, g.dv, b, h, i, e), out);
        }
      }
    }
done:
  free(kall);
  free(vall);
  free(qs);
  free(row);
  free(bias);
  free(vcol);
  return st;
}

/* ---- FlexAttention ------------------------------------------------------------ */

static kiln_status_t flex_geometry(const kiln_type *const *in, attn_geom *g) {
  char s[256];
  static const char *names[3] = {"Q", "K", "V"};
  for (int i = 0; i < 3; i++)
    if (in[i]->rank >= 0 && in[i]->rank != 4)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): shape %s, expected rank 4", i, names[i],
                        kiln_shape_str(in[i]->rank, in[i]->dims, s, sizeof s));
  memset(g, 0, sizeof *g);
  g->rank = 4;
  int64_t u[4] = {-1, -1, -1, -1};
  const int64_t *q = in[0]->rank == 4 ? in[0]->dims : u, *k = in[1]->rank == 4 ? in[1]->dims : u,
                *v = in[2]->rank == 4 ? in[2]->dims : u;
  g->batch = q[0] >= 0 ? q[0] : k[0] >= 0 ? k[0] : v[0];
  g->hq = q[1];
  g->sq = q[2];
  g->d = q[3] >= 0 ? q[3] : k[3];
  g->hkv = k[1] >= 0 ? k[1] : v[1];
  g->skv = k[2] >= 0 ? k[2] : v[2];
  g->dv = v[3];
  g->total = g->skv;
  if (differ(k[0], g->batch) || differ(v[0], g->batch))
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (K) and 2 (V): batch %lld / %lld, expected %lld like Q's",
                      (long long)k[0], (long long)v[0], (long long)g->batch);
  if (differ(k[3], g->d))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (K): head size %lld, expected %lld like Q's", (long long)k[3],
                      (long long)g->d);
  if (differ(v[1], g->hkv) || differ(v[2], g->skv))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (V): shape %s, expected %lld heads and length %lld like K's",
                      kiln_shape_str(4, v, s, sizeof s), (long long)g->hkv, (long long)g->skv);
  if (g->hkv == 0 || (g->hq > 0 && g->hkv > 0 && g->hq % g->hkv))
    return kiln_error(KILN_INVALID_ARGUMENT, "%lld query heads are not a multiple of %lld key/value heads",
                      (long long)g->hq, (long long)g->hkv);
  return NULL;
}

static kiln_status_t flex_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in[3] = {ctx->inputs[0], ctx->inputs[1], ctx->inputs[2]};
  if (!in[0] || !in[1] || !in[2]) return NULL;
  attn_geom g;
  KILN_TRY(flex_geometry(in, &g));
  int64_t y[4] = {g.batch, g.hq, g.sq, g.dv};
  kiln_infer_set(ctx, 0, in[0]->dtype, 4, y);
  return NULL;
}

/* Runs the modifier subgraph `name` (when the node has it) on x, a
 * [B, Hq, Sq, T] tensor of dtype t, and reads its result back into x,
 * rounded to t. */
static kiln_status_t flex_modify(kiln_kernel_ctx *ctx, const char *name, kiln_dtype t, const int64_t *dims,
                                 double *x) {
  const kiln_attr *a = kiln_node_attr(ctx->node, name);
  if (!a) return NULL;
  if (a->type != KILN_ATTR_GRAPH || !a->g) return kiln_error(KILN_INVALID_MODEL, "attribute %s: expected a graph", name);
  const kiln_graph *body = a->g;
  if (body->n_inputs != 1 || body->n_outputs != 1)
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: the graph has %d inputs and %d outputs, expected 1 and 1", name,
                      body->n_inputs, body->n_outputs);
  if (!ctx->run_subgraph) return kiln_error(KILN_INTERNAL, "%s run without a subgraph runner", name);
  kiln_tensor *arg;
  KILN_TRY(kiln_tensor_new(t, 4, dims, &arg));
  for (int64_t e = 0; e < arg->numel; e++) kiln_store_f64(arg->data, t, e, x[e]);
  kiln_value *vin = NULL, *vout = NULL;
  kiln_status_t st = kiln_value_from_tensor(arg, &vin);
  if (st) return st;
  st = ctx->run_subgraph(ctx->runner_data, body, 1, &vin, 1, &vout);
  kiln_value_free(vin);
  if (st) return kiln_status_annotate(st, "in attribute %s", name);
  char s[256], e[256];
  if (!vout || vout->kind != KILN_VALUE_TENSOR || !kiln_dtype_is_float(vout->tensor->dtype) ||
      !kiln_shape_equal(vout->tensor->rank, vout->tensor->dims, 4, dims)) {
    st = vout && vout->kind == KILN_VALUE_TENSOR
             ? kiln_error(KILN_INVALID_ARGUMENT, "attribute %s: the graph returned %s %s, expected %s %s", name,
                          kiln_dtype_name(vout->tensor->dtype),
                          kiln_shape_str(vout->tensor->rank, vout->tensor->dims, s, sizeof s), kiln_dtype_name(t),
                          kiln_shape_str(4, dims, e, sizeof e))
             : kiln_error(KILN_INVALID_ARGUMENT, "attribute %s: the graph returned no tensor", name);
    kiln_value_free(vout);
    return st;
  }
  const kiln_tensor *r = vout->tensor;
  for (int64_t i = 0; i < r->numel; i++) x[i] = kiln_round_to_dtype(t, kiln_load_f64(r->data, r->dtype, i));
  kiln_value_free(vout);
  return NULL;
}

static kiln_status_t flex_kernel(kiln_kernel_ctx *ctx) {
  static const char *names[3] = {"Q", "K", "V"};
  kiln_tensor *in[3];
  for (int i = 0; i < 3; i++) {
    KILN_TRY(kiln_kernel_require_input(ctx, i, &in[i]));
    KILN_TRY(require_float_input(in[i], i, names[i]));
    if (in[i]->dtype != in[0]->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected %s like input 0 (Q)", i, names[i],
                        kiln_dtype_name(in[i]->dtype), kiln_dtype_name(in[0]->dtype));
  }
  kiln_type ty[3];
  const kiln_type *tp[3] = {0};
  types_of(in, 3, ty, tp);
  attn_geom g;
  KILN_TRY(flex_geometry(tp, &g));
  kiln_dtype t1 = in[0]->dtype, ct;
  KILN_TRY(float_dtype_attr(ctx->node, "softmax_precision", t1 == KILN_DTYPE_F64 ? KILN_DTYPE_F64 : KILN_DTYPE_F32, &ct));
  const kiln_attr *sa = kiln_node_attr(ctx->node, "scale");
  /* The reference takes the square root in f32, then rounds to T1. */
  float scale = sa && sa->type == KILN_ATTR_FLOAT ? sa->f : (float)(1.0 / sqrt((double)g.d));
  double sq = kiln_round_to_dtype(t1, (double)sqrtf(scale));
  int64_t sdims[4] = {g.batch, g.hq, g.sq, g.total}, ydims[4] = {g.batch, g.hq, g.sq, g.dv};
  int64_t n = g.batch * g.hq * g.sq * g.total;
  double *scores = NULL, *qs = NULL, *ks = NULL, *vv = NULL;
  kiln_status_t st = load_all(in[0], &qs);
  if (!st) st = load_all(in[1], &ks);
  if (!st) st = load_all(in[2], &vv);
  if (!st && !(scores = malloc((size_t)(n > 0 ? n : 1) * sizeof *scores))) st = KILN_OOM();
  if (st) goto done;
  for (int64_t e = 0; e < in[0]->numel; e++) qs[e] = kiln_round_to_dtype(t1, qs[e] * sq);
  for (int64_t e = 0; e < in[1]->numel; e++) ks[e] = kiln_round_to_dtype(t1, ks[e] * sq);
  for (int64_t e = 0; e < in[2]->numel; e++) vv[e] = kiln_round_to_dtype(ct, vv[e]);
  int64_t group = g.hq / g.hkv;
  for (int64_t b = 0; b < g.batch; b++)
    for (int64_t h = 0; h < g.hq; h++) {
      const double *kb = ks + (b * g.hkv + h / group) * g.skv * g.d;
      for (int64_t i = 0; i < g.sq; i++) {
        const double *qr = qs + ((b * g.hq + h) * g.sq + i) * g.d;
        double *sr = scores + ((b * g.hq + h) * g.sq + i) * g.total;
        for (int64_t j = 0; j < g.total; j++) sr[j] = kiln_round_to_dtype(ct, dot_as(t1, qr, 1, kb + j * g.d, 1, g.d));
      }
    }
  if ((st = flex_modify(ctx, "score_mod", ct, sdims, scores))) goto done;
  for (int64_t r = 0; r < g.batch * g.hq * g.sq; r++) {
    double *x = scores + r * g.total, m = -INFINITY;
    for (int64_t j = 0; j < g.total; j++) m = isnan(x[j]) || isnan(m) ? NAN : (x[j] > m ? x[j] : m);
    double s = 0;
    for (int64_t j = 0; j < g.total; j++) {
      x[j] = kiln_round_to_dtype(ct, exp(kiln_round_to_dtype(ct, x[j] - m)));
      s = ct == KILN_DTYPE_BF16 ? kiln_round_to_dtype(ct, s + x[j]) : s + x[j];
    }
    s = kiln_round_to_dtype(ct, s);
    for (int64_t j = 0; j < g.total; j++) x[j] = kiln_round_to_dtype(ct, x[j] / s);
  }
  if ((st = flex_modify(ctx, "prob_mod", ct, sdims, scores))) goto done;
  kiln_tensor *y;
  if ((st = kiln_kernel_output_uninit(ctx, 0, t1, 4, ydims, &y))) goto done;
  for (int64_t b = 0; b < g.batch; b++)
    for (int64_t h = 0; h < g.hq; h++) {
      const double *vb = vv + (b * g.hkv + h / group) * g.skv * g.dv;
      for (int64_t i = 0; i < g.sq; i++) {
        const double *pr = scores + ((b * g.hq + h) * g.sq + i) * g.total;
        for (int64_t e = 0; e < g.dv; e++)
          kiln_store_f64(y->data, t1, ((b * g.hq + h) * g.sq + i) * g.dv + e, dot_as(ct, pr, 1, vb + e, g.dv, g.total));
      }
    }
done:
  free(scores);
  free(qs);
  free(ks);
  free(vv);
  return st;
}

/* Two contractions (2 per multiply-add) and ~5 per score for the softmax;
 * 0 while a size is unknown. */
static int64_t attn_flops_of(const attn_geom *a) {
  if (a->batch < 0 || a->hq < 0 || a->sq < 0 || a->total < 0 || a->d < 0 || a->dv < 0) return 0;
  return a->batch * a->hq * a->sq * a->total * (2 * a->d + 2 * a->dv + 5);
}

static void node_input_types(const kiln_graph *g, const kiln_node *n, int count, const kiln_type **out) {
  for (int i = 0; i < count; i++) out[i] = i < n->n_inputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]].type : NULL;
}

static int64_t attention_flops(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *in[7];
  node_input_types(g, n, 7, in);
  if (n->opset < 24) in[6] = NULL;
  attn_geom a;
  if (!in[0] || !in[1] || !in[2]) return 0;
  kiln_status_t st = attn_geometry(n, n->opset, in, 7, &a);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  return attn_flops_of(&a);
}

static int64_t flex_flops(const kiln_graph *g, const kiln_node *n) {
  const kiln_type *in[3];
  node_input_types(g, n, 3, in);
  attn_geom a;
  if (!in[0] || !in[1] || !in[2]) return 0;
  kiln_status_t st = flex_geometry(in, &a);
  if (st) {
    kiln_status_free(st);
    return 0;
  }
  return attn_flops_of(&a);
}

static const kiln_op_def attention_ops[] = {
    {"", "Attention", 3, 7, 1, 4, attention_infer, attention_kernel, KILN_OP_REREADS_INPUT, .id = KILN_OP_Attention,
     .flops = attention_flops},
    {"ai.onnx.preview", "FlexAttention", 3, 3, 1, 1, flex_infer, flex_kernel, KILN_OP_CONTROL_FLOW,
     .id = KILN_OP_preview_FlexAttention, .flops = flex_flops},
};

const kiln_op_def *kiln_ops_attention(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(attention_ops);
  return attention_ops;
}
