/* Ops of the "rnn" family: RNN, GRU and LSTM (opsets 1-14 semantics).
 *
 * One driver runs all three cells. Inputs are widened to double once;
 * each direction and each batch row runs its own recurrence over its
 * sequence length (sequence_lens, default the full length), forward or
 * reversed; steps past a row's length leave Y at zero, and Y_h / Y_c hold
 * the state after the row's last processed step.
 *
 * Gate order in W / R / B follows ONNX: RNN [i], GRU [z r h], LSTM
 * [i o f c]; B is [Wb..., Rb...]; LSTM peepholes P are [i o f].
 * `clip` bounds every gate pre-activation; activation lists name one
 * function per gate role (RNN f; GRU f g; LSTM f g h) per direction, and
 * activation_alpha/beta are consumed in list order by the functions that
 * take them (onnxruntime's reading of the spec), defaults otherwise.
 * layout = 1 (opset 14) puts batch first in X, Y, initial/final states. */
#include "ops/rnn.h"

#include <math.h>
#include <strings.h>

typedef struct act_info {
  const char *name;
  act_kind kind;
  bool uses_alpha, uses_beta;
  double alpha, beta; /* defaults */
} act_info;

static const act_info act_table[] = {
    {"Relu", ACT_RELU, false, false, 0, 0},
    {"Tanh", ACT_TANH, false, false, 0, 0},
    {"Sigmoid", ACT_SIGMOID, false, false, 0, 0},
    {"Affine", ACT_AFFINE, true, true, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, true, false, 0.01, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, true, false, 1.0, 0},
    {"ScaledTanh", ACT_SCALED_TANH, true, true, 1.0, 1.0},
    {"HardSigmoid", ACT_HARD_SIGMOID, true, true, 0.2, 0.5},
    {"Elu", ACT_ELU, true, false, 1.0, 0},
    {"Softsign", ACT_SOFTSIGN, false, false, 0, 0},
    {"Softplus", ACT_SOFTPLUS, false, false, 0, 0},
};

double kiln_rnn_act_apply(const rnn_act *a, double x) {
  switch (a->kind) {
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_TANH: return tanh(x);
    case ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case ACT_AFFINE: return a->alpha * x + a->beta;
    case ACT_LEAKY_RELU: return x >= 0 ? x : a->alpha * x;
    case ACT_THRESHOLDED_RELU: return x >= a->alpha ? x : 0;
    case ACT_SCALED_TANH: return a->alpha * tanh(a->beta * x);
    case ACT_HARD_SIGMOID: return fmin(fmax(a->alpha * x + a->beta, 0.0), 1.0);
    case ACT_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1.0);
    case ACT_SOFTSIGN: return x / (1.0 + fabs(x));
    case ACT_SOFTPLUS: return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x));
  }
  return x;
}

static kiln_status_t parse_direction(const kiln_node *node, rnn_cfg *c) {
  const char *dir = kiln_attr_string(node, "direction", "forward");
  if (!strcmp(dir, "forward") || !strcmp(dir, "foward") /* opset-1 schema default's typo */) {
    c->num_dir = 1;
    c->reverse[0] = false;
  } else if (!strcmp(dir, "reverse")) {
    c->num_dir = 1;
    c->reverse[0] = true;
  } else if (!strcmp(dir, "bidirectional")) {
    c->num_dir = 2;
    c->reverse[0] = false;
    c->reverse[1] = true;
  } else {
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute direction: '%s' is not forward, reverse or bidirectional", dir);
  }
  return NULL;
}

static kiln_status_t parse_activations(const kiln_node *node, rnn_cfg *c) {
  static const char *defaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  const kiln_attr *a = kiln_node_attr(node, "activations");
  int n_names = a && a->type == KILN_ATTR_STRINGS ? a->n : 0;
  int want = c->n_roles * c->num_dir;
  if (n_names && n_names != want && n_names != c->n_roles)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute activations: %d names, expected %d (%d per direction)", n_names,
                      want, c->n_roles);
  int n_alpha = 0, n_beta = 0, ia = 0, ib = 0;
  const float *alphas = kiln_attr_floats(node, "activation_alpha", &n_alpha);
  const float *betas = kiln_attr_floats(node, "activation_beta", &n_beta);
  for (int k = 0; k < want; k++) {
    const char *name = n_names ? a->strings[k % n_names] : defaults[c->kind][k % c->n_roles];
    if (!name) name = "";
    const act_info *info = NULL;
    for (size_t t = 0; t < KILN_ARRAY_SIZE(act_table); t++)
      if (!strcasecmp(name, act_table[t].name)) info = &act_table[t];
    if (!info) return kiln_error(KILN_UNSUPPORTED, "attribute activations: unknown activation '%s'", name);
    rnn_act *r = &c->acts[k / c->n_roles][k % c->n_roles];
    r->kind = info->kind;
    r->alpha = info->alpha;
    r->beta = info->beta;
    if (info->uses_alpha && ia < n_alpha) r->alpha = alphas[ia++];
    if (info->uses_beta && ib < n_beta) r->beta = betas[ib++];
  }
  return NULL;
}

kiln_status_t kiln_rnn_config_of(const kiln_node *node, rnn_kind kind, rnn_cfg *c) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->gates = kind == RNN_SIMPLE ? 1 : kind == RNN_GRU ? 3 : 4;
  c->n_roles = kind == RNN_SIMPLE ? 1 : kind == RNN_GRU ? 2 : 3;
  KILN_TRY(parse_direction(node, c));
  KILN_TRY(parse_activations(node, c));
  c->layout = (int)kiln_attr_int(node, "layout", 0);
  if (c->layout != 0 && c->layout != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute layout: must be 0 or 1, got %d", c->layout);
  const kiln_attr *clip = kiln_node_attr(node, "clip");
  if (clip) {
    c->has_clip = true;
    c->clip = clip->f;
    if (!(c->clip >= 0)) return kiln_error(KILN_INVALID_ARGUMENT, "attribute clip: must be >= 0, got %g", c->clip);
  }
  c->linear_before_reset = kiln_attr_int(node, "linear_before_reset", 0) != 0;
  c->input_forget = kiln_attr_int(node, "input_forget", 0) != 0;
  return NULL;
}

static kiln_status_t check_shape(const kiln_tensor *t, int idx, const char *name, int rank, const int64_t *want) {
  char got[128], exp[128];
  if (!kiln_shape_equal(t->rank, t->dims, rank, want))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected shape %s, got %s", idx, name,
                      kiln_shape_str(rank, want, exp, sizeof exp), kiln_shape_str(t->rank, t->dims, got, sizeof got));
  return NULL;
}

/* The tensor as a new double array (caller frees). */
static double *to_f64(const kiln_tensor *t) {
  double *d = malloc(sizeof(double) * (size_t)KILN_MAX(t->numel, 1));
  if (!d) return NULL;
  for (int64_t i = 0; i < t->numel; i++) d[i] = kiln_load_f64(t->data, t->dtype, i);
  return d;
}

/* Element offsets under the two layouts. */
static int64_t x_off(const rnn_cfg *c, int64_t t, int64_t b) {
  return (c->layout == 0 ? t * c->batch + b : b * c->seq + t) * c->input;
}
static int64_t state_off(const rnn_cfg *c, int64_t d, int64_t b) {
  return (c->layout == 0 ? d * c->batch + b : b * c->num_dir + d) * c->hidden;
}
static int64_t y_off(const rnn_cfg *c, int64_t t, int64_t d, int64_t b) {
  return (c->layout == 0 ? (t * c->num_dir + d) * c->batch + b : (b * c->seq + t) * c->num_dir + d) * c->hidden;
}

static double clip_pre(const rnn_cfg *c, double v) {
  if (!c->has_clip) return v;
  return v < -c->clip ? -c->clip : v > c->clip ? c->clip : v;
}

/* Inputs as doubles (NULL for absent optional ones). */
typedef struct rnn_data {
  double *x, *w, *r, *b, *h0, *c0, *p;
  int32_t *lens; /* borrowed */
} rnn_data;

static void rnn_data_free(rnn_data *d) {
  free(d->x);
  free(d->w);
  free(d->r);
  free(d->b);
  free(d->h0);
  free(d->c0);
  free(d->p);
}

/* Row `row` of R times h, plus the recurrence bias Rb[row]. */
static double rec_dot(const double *R, const double *Rb, int64_t H, int64_t row, const double *h) {
  double acc = Rb ? Rb[row] : 0.0;
  for (int64_t k = 0; k < H; k++) acc += R[row * H + k] * h[k];
  return acc;
}

/* One direction d, one batch row b: runs the recurrence, writing Y rows
 * (if y) and the final state into hT / cT (length hidden). `scratch` holds
 * gates*hidden + 2*hidden doubles. */
static void run_row(const rnn_cfg *c, const rnn_data *in, int64_t d, int64_t b, int64_t len, double *y, double *hT,
                    double *cT, double *scratch) {
  int64_t H = c->hidden, I = c->input, G = c->gates;
  const double *W = in->w + d * G * H * I, *R = in->r + d * G * H * H;
  const double *Wb = in->b ? in->b + d * 2 * G * H : NULL, *Rb = Wb ? Wb + G * H : NULL;
  const double *P = in->p ? in->p + d * 3 * H : NULL;
  const rnn_act *act = c->acts[d];
  double *xw = scratch;     /* [G*H]: X W^T + Wb */
  double *tmp = xw + G * H; /* [H] */
  double *tmp2 = tmp + H;   /* [H] */
  for (int64_t j = 0; j < H; j++) {
    hT[j] = in->h0 ? in->h0[state_off(c, d, b) + j] : 0.0;
    if (cT) cT[j] = in->c0 ? in->c0[state_off(c, d, b) + j] : 0.0;
  }
  for (int64_t s = 0; s < len; s++) {
    int64_t t = c->reverse[d] ? len - 1 - s : s;
    const double *xt = in->x + x_off(c, t, b);
    for (int64_t g = 0; g < G * H; g++) {
      double v = Wb ? Wb[g] : 0.0;
      for (int64_t i = 0; i < I; i++) v += W[g * I + i] * xt[i];
      xw[g] = v;
    }
    if (c->kind == RNN_SIMPLE) {
      for (int64_t j = 0; j < H; j++) tmp[j] = kiln_rnn_act_apply(&act[0], clip_pre(c, xw[j] + rec_dot(R, Rb, H, j, hT)));
      memcpy(hT, tmp, sizeof(double) * (size_t)H);
    } else if (c->kind == RNN_GRU) { /* gates z r h */
      double *z = tmp, *rh = tmp2;   /* rh: r (.) H_{t-1}, or r itself with linear_before_reset */
      for (int64_t j = 0; j < H; j++) {
        z[j] = kiln_rnn_act_apply(&act[0], clip_pre(c, xw[j] + rec_dot(R, Rb, H, j, hT)));
        double r = kiln_rnn_act_apply(&act[0], clip_pre(c, xw[H + j] + rec_dot(R, Rb, H, H + j, hT)));
        rh[j] = c->linear_before_reset ? r : r * hT[j];
      }
      /* the candidate overwrites xw's h slice (each j reads only its own) */
      double *cand = xw + 2 * H;
      for (int64_t j = 0; j < H; j++) {
        double pre = c->linear_before_reset ? cand[j] + rh[j] * rec_dot(R, Rb, H, 2 * H + j, hT)
                                            : cand[j] + rec_dot(R, Rb, H, 2 * H + j, rh);
        cand[j] = kiln_rnn_act_apply(&act[1], clip_pre(c, pre));
      }
      for (int64_t j = 0; j < H; j++) hT[j] = (1.0 - z[j]) * cand[j] + z[j] * hT[j];
    } else { /* LSTM: gates i o f c, peepholes i o f */
      double *hnew = tmp, *cnew = tmp2;
      for (int64_t j = 0; j < H; j++) {
        double cprev = cT[j];
        double pi = P ? P[j] * cprev : 0.0, pf = P ? P[2 * H + j] * cprev : 0.0;
        double ig = kiln_rnn_act_apply(&act[0], clip_pre(c, xw[j] + rec_dot(R, Rb, H, j, hT) + pi));
        double fg = c->input_forget
                        ? 1.0 - ig
                        : kiln_rnn_act_apply(&act[0], clip_pre(c, xw[2 * H + j] + rec_dot(R, Rb, H, 2 * H + j, hT) + pf));
        double cg = kiln_rnn_act_apply(&act[1], clip_pre(c, xw[3 * H + j] + rec_dot(R, Rb, H, 3 * H + j, hT)));
        cnew[j] = fg * cprev + ig * cg;
        double po = P ? P[H + j] * cnew[j] : 0.0;
        double og = kiln_rnn_act_apply(&act[0], clip_pre(c, xw[H + j] + rec_dot(R, Rb, H, H + j, hT) + po));
        hnew[j] = og * kiln_rnn_act_apply(&act[2], cnew[j]);
      }
      memcpy(hT, hnew, sizeof(double) * (size_t)H);
      memcpy(cT, cnew, sizeof(double) * (size_t)H);
    }
    if (y) memcpy(y + y_off(c, t, d, b), hT, sizeof(double) * (size_t)H);
  }
}

/* Input indices: X W R B sequence_lens initial_h [initial_c P]. */
static kiln_status_t rnn_kernel(kiln_kernel_ctx *ctx, rnn_kind kind) {
  rnn_cfg c;
  KILN_TRY(kiln_rnn_config_of(ctx->node, kind, &c));
  kiln_tensor *X, *W, *R;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &X));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &W));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &R));
  kiln_tensor *B = kiln_kernel_input(ctx, 3), *L = kiln_kernel_input(ctx, 4), *H0 = kiln_kernel_input(ctx, 5);
  kiln_tensor *C0 = kind == RNN_LSTM ? kiln_kernel_input(ctx, 6) : NULL;
  kiln_tensor *P = kind == RNN_LSTM ? kiln_kernel_input(ctx, 7) : NULL;
  kiln_dtype dt = X->dtype;
  if (!kiln_dtype_is_float(dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected a float type, got %s", kiln_dtype_name(dt));
  const kiln_tensor *same[] = {W, R, B, H0, C0, P};
  static const int same_idx[] = {1, 2, 3, 5, 6, 7};
  static const char *same_name[] = {"W", "R", "B", "initial_h", "initial_c", "P"};
  for (int i = 0; i < 6; i++)
    if (same[i] && same[i]->dtype != dt)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s differs from X's %s", same_idx[i], same_name[i],
                        kiln_dtype_name(same[i]->dtype), kiln_dtype_name(dt));
  if (X->rank != 3) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank 3, got %d", X->rank);
  if (W->rank != 3 || R->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (W) and 2 (R): expected rank 3, got %d and %d", W->rank,
                      R->rank);
  c.seq = c.layout == 0 ? X->dims[0] : X->dims[1];
  c.batch = c.layout == 0 ? X->dims[1] : X->dims[0];
  c.input = X->dims[2];
  c.hidden = R->dims[2];
  int64_t hs = kiln_attr_int(ctx->node, "hidden_size", c.hidden);
  if (hs != c.hidden)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute hidden_size %lld differs from R's last dim %lld", (long long)hs,
                      (long long)c.hidden);
  int64_t G = c.gates, Hd = c.hidden, nd = c.num_dir;
  int64_t wd[3] = {nd, G * Hd, c.input}, rd[3] = {nd, G * Hd, Hd}, bd[2] = {nd, 2 * G * Hd};
  int64_t sd[3] = {nd, c.batch, Hd}, sd1[3] = {c.batch, nd, Hd}, pd[2] = {nd, 3 * Hd};
  KILN_TRY(check_shape(W, 1, "W", 3, wd));
  KILN_TRY(check_shape(R, 2, "R", 3, rd));
  if (B) KILN_TRY(check_shape(B, 3, "B", 2, bd));
  if (H0) KILN_TRY(check_shape(H0, 5, "initial_h", 3, c.layout == 0 ? sd : sd1));
  if (C0) KILN_TRY(check_shape(C0, 6, "initial_c", 3, c.layout == 0 ? sd : sd1));
  if (P) KILN_TRY(check_shape(P, 7, "P", 2, pd));
  if (L) {
    if (L->dtype != KILN_DTYPE_I32)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 4 (sequence_lens): expected int32, got %s",
                        kiln_dtype_name(L->dtype));
    KILN_TRY(check_shape(L, 4, "sequence_lens", 1, &c.batch));
    for (int64_t b = 0; b < c.batch; b++) {
      int32_t v = ((const int32_t *)L->data)[b];
      if (v < 0 || v > c.seq)
        return kiln_error(KILN_OUT_OF_RANGE, "input 4 (sequence_lens): value %d at batch %lld out of range [0, %lld]",
                          v, (long long)b, (long long)c.seq);
    }
  }

  /* outputs */
  int64_t ydims[4], hdims[3];
  if (c.layout == 0) {
    int64_t y0[4] = {c.seq, nd, c.batch, Hd};
    memcpy(ydims, y0, sizeof y0);
    memcpy(hdims, sd, sizeof sd);
  } else {
    int64_t y1[4] = {c.batch, c.seq, nd, Hd};
    memcpy(ydims, y1, sizeof y1);
    memcpy(hdims, sd1, sizeof sd1);
  }
  bool want_y = ctx->n_outputs > 0 && ctx->output_wanted[0];
  bool want_h = ctx->n_outputs > 1 && ctx->output_wanted[1];
  bool want_c = kind == RNN_LSTM && ctx->n_outputs > 2 && ctx->output_wanted[2];
  kiln_tensor *Y = NULL, *YH = NULL, *YC = NULL;
  if (want_y) KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 4, ydims, &Y));
  if (want_h) KILN_TRY(kiln_kernel_output_tensor(ctx, 1, dt, 3, hdims, &YH));
  if (want_c) KILN_TRY(kiln_kernel_output_tensor(ctx, 2, dt, 3, hdims, &YC));

  rnn_data in = {0};
  in.lens = L ? L->data : NULL;
  in.x = to_f64(X);
  in.w = to_f64(W);
  in.r = to_f64(R);
  bool oom = !in.x || !in.w || !in.r;
  if (B && !(in.b = to_f64(B))) oom = true;
  if (H0 && !(in.h0 = to_f64(H0))) oom = true;
  if (C0 && !(in.c0 = to_f64(C0))) oom = true;
  if (P && !(in.p = to_f64(P))) oom = true;
  int64_t nstate = nd * c.batch * Hd;
  double *y = Y ? calloc((size_t)KILN_MAX(Y->numel, 1), sizeof(double)) : NULL;
  double *hT = malloc(sizeof(double) * (size_t)KILN_MAX(nstate, 1));
  double *cT = malloc(sizeof(double) * (size_t)KILN_MAX(nstate, 1));
  double *scratch = malloc(sizeof(double) * (size_t)((G + 2) * KILN_MAX(Hd, 1)));
  if (oom || (Y && !y) || !hT || !cT || !scratch) {
    rnn_data_free(&in);
    free(y);
    free(hT);
    free(cT);
    free(scratch);
    return KILN_OOM();
  }
  for (int64_t d = 0; d < nd; d++)
    for (int64_t b = 0; b < c.batch; b++) {
      int64_t len = in.lens ? in.lens[b] : c.seq;
      int64_t so = state_off(&c, d, b);
      run_row(&c, &in, d, b, len, y, hT + so, kind == RNN_LSTM ? cT + so : NULL, scratch);
    }
  if (Y)
    for (int64_t i = 0; i < Y->numel; i++) kiln_store_f64(Y->data, dt, i, y[i]);
  if (YH)
    for (int64_t i = 0; i < YH->numel; i++) kiln_store_f64(YH->data, dt, i, hT[i]);
  if (YC)
    for (int64_t i = 0; i < YC->numel; i++) kiln_store_f64(YC->data, dt, i, cT[i]);
  rnn_data_free(&in);
  free(y);
  free(hT);
  free(cT);
  free(scratch);
  return NULL;
}

static kiln_status_t rnn_infer(kiln_infer_ctx *ctx, rnn_kind kind) {
  rnn_cfg c;
  KILN_TRY(kiln_rnn_config_of(ctx->node, kind, &c));
  const kiln_type *X = ctx->inputs[0];
  const kiln_type *W = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  const kiln_type *R = ctx->n_inputs > 2 ? ctx->inputs[2] : NULL;
  if (!X) return NULL;
  if (X->rank >= 0 && X->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): expected rank 3, got %d", X->rank);
  int64_t seq = -1, batch = -1, hidden = kiln_attr_int(ctx->node, "hidden_size", -1);
  if (X->rank == 3) {
    seq = c.layout == 0 ? X->dims[0] : X->dims[1];
    batch = c.layout == 0 ? X->dims[1] : X->dims[0];
  }
  if (hidden < 0 && R && R->rank == 3) hidden = R->dims[2];
  if (hidden < 0 && W && W->rank == 3 && W->dims[1] >= 0) hidden = W->dims[1] / c.gates;
  int64_t nd = c.num_dir;
  int64_t y0[4] = {seq, nd, batch, hidden}, y1[4] = {batch, seq, nd, hidden};
  int64_t h0[3] = {nd, batch, hidden}, h1[3] = {batch, nd, hidden};
  kiln_infer_set(ctx, 0, X->dtype, 4, c.layout == 0 ? y0 : y1);
  kiln_infer_set(ctx, 1, X->dtype, 3, c.layout == 0 ? h0 : h1);
  if (kind == RNN_LSTM) kiln_infer_set(ctx, 2, X->dtype, 3, c.layout == 0 ? h0 : h1);
  return NULL;
}

static kiln_status_t simple_rnn_kernel(kiln_kernel_ctx *ctx) { return rnn_kernel(ctx, RNN_SIMPLE); }
static kiln_status_t gru_kernel(kiln_kernel_ctx *ctx) { return rnn_kernel(ctx, RNN_GRU); }
static kiln_status_t lstm_kernel(kiln_kernel_ctx *ctx) { return rnn_kernel(ctx, RNN_LSTM); }
static kiln_status_t simple_rnn_infer(kiln_infer_ctx *ctx) { return rnn_infer(ctx, RNN_SIMPLE); }
static kiln_status_t gru_infer(kiln_infer_ctx *ctx) { return rnn_infer(ctx, RNN_GRU); }
static kiln_status_t lstm_infer(kiln_infer_ctx *ctx) { return rnn_infer(ctx, RNN_LSTM); }

static const kiln_op_def rnn_ops[] = {
    {"", "RNN", 3, 6, 0, 2, simple_rnn_infer, simple_rnn_kernel, 0, .id = KILN_OP_RNN},
    {"", "GRU", 3, 6, 0, 2, gru_infer, gru_kernel, 0, .id = KILN_OP_GRU},
    {"", "LSTM", 3, 8, 0, 3, lstm_infer, lstm_kernel, 0, .id = KILN_OP_LSTM},
};

const kiln_op_def *kiln_ops_rnn(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(rnn_ops);
  return rnn_ops;
}
