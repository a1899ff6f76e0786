/* cpu_rnn.c — RNN, GRU and LSTM whole, as one host routine of the cpu.
 *
 * The other compiling devices get the recurrence unrolled into step
 * kernels (passes/decompose.c). On the cpu that graph costs more than it
 * gives: a 32-step bidirectional two-layer LSTM becomes ~2,400 nodes and
 * ~400 kernels to optimize, lower, schedule, render and compile, so its
 * first run took 3-6x ONNX Runtime's (and the kernels differ only in a
 * slice offset). Here the node stays whole (the cpu reports
 * KILN_DEVICE_FEATURE_RECURRENT_ROUTINE, so the optimizer keeps it) and
 * runs as ONNX Runtime's does:
 *   per direction: XW = X W^T + Wb + Rb for every step in one SGEMM
 *     (GRU with linear_before_reset keeps Rb_h for the step);
 *   per step: G = H R^T on the SGEMM (M = batch), R packed once per plan
 *     when it is a constant (kiln_cpu_host_packed_b), else once per run;
 *     GRU without linear_before_reset multiplies (r . H) by R_h in a
 *     second GEMM; then the gates over rows of `hidden` floats with
 *     kiln_math.h's sigmoid and tanh (the functions the compiled kernels
 *     use; other activations through ref's kiln_rnn_act_apply).
 * Same rules as ref (ops/rnn.c, read through kiln_rnn_config_of): gate
 * orders, activation lists, clip on every pre-activation, directions,
 * layout 0/1, peepholes, input_forget, sequence_lens (a row past its
 * length keeps its state and writes zeros to Y). Inputs ref rejects
 * (shapes, dtypes, lengths out of range) are left to ref, which words the
 * error. f32 only; other dtypes run on ref.
 */
#include "devices/cpu/cpu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "codegen/kiln_math.h"
#include "devices/cpu/gemm/gemm.h"
#include "ops/rnn.h"

static rnn_kind kind_of(const kiln_node *node) {
  switch (kiln_node_op_id(node)) {
    case KILN_OP_GRU: return RNN_GRU;
    case KILN_OP_LSTM: return RNN_LSTM;
    default: return RNN_SIMPLE;
  }
}

bool kiln_cpu_recurrent_routine(const kiln_graph *g, const kiln_node *node) {
  int op = kiln_node_op_id(node);
  if (op != KILN_OP_RNN && op != KILN_OP_GRU && op != KILN_OP_LSTM) return false;
  if (node->n_inputs < 3 || node->inputs[0] < 0) return false;
  const kiln_type *xt = &g->values[node->inputs[0]].type;
  return xt->kind == KILN_TYPE_TENSOR && xt->dtype == KILN_DTYPE_F32;
}

/* ---- rows ------------------------------------------------------------------------ */

#define ROWS_FN(name) name##_generic
#include "devices/cpu/cpu_rnn_rows_impl.h"
#undef ROWS_FN

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RNN_HAVE_AVX2 1
#include "devices/cpu/target_avx2_begin.h"
#define ROWS_FN(name) name##_avx2
#include "devices/cpu/cpu_rnn_rows_impl.h"
#undef ROWS_FN
#include "devices/cpu/target_avx2_end.h"
#endif

/* The rows of the build the CPU runs. */
typedef struct rnn_rows {
  void (*clip_act)(const rnn_cfg *c, const rnn_act *a, float *v, int64_t n);
  void (*act)(const rnn_act *a, float *v, int64_t n);
} rnn_rows;

static rnn_rows rows_for_cpu(void) {
#ifdef RNN_HAVE_AVX2
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  if (cpu->avx2 && cpu->fma) return (rnn_rows){clip_act_row_avx2, act_row_avx2};
#endif
  return (rnn_rows){clip_act_row_generic, act_row_generic};
}

/* dst = act(clip(x + y)) */
static void gate_row(const rnn_rows *rows, const rnn_cfg *c, const rnn_act *a, float *dst, const float *x,
                     const float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = x[i] + y[i];
  rows->clip_act(c, a, dst, n);
}

/* ---- the routine ------------------------------------------------------------------ */

typedef struct rnn_inputs {
  const float *x, *w, *r, *b, *h0, *c0, *p;
  const int32_t *lens;
} rnn_inputs;

/* Shapes, dtypes and lengths as ref requires them; false: leave it to ref. */
static bool shaped(const kiln_tensor *t, int rank, const int64_t *dims) {
  return !t || (t->dtype == KILN_DTYPE_F32 && kiln_shape_equal(t->rank, t->dims, rank, dims));
}

/* R_d rows [r0, r0 + rows) as the SGEMM's op(B) (k = hidden, n = rows):
 * the plan's packed copy, else packed here into *own. */
static const void *packed_r(cpu_exec *x, const kiln_node *node, const kiln_tensor *R, const float *sub, int64_t hidden,
                            int64_t rows, kiln_rt_state **slot, void **own) {
  const void *pb = kiln_cpu_host_packed_b(x, node, 2, R, sub, true, hidden, rows, hidden, slot);
  if (pb) return pb;
  size_t bytes = (kiln_sgemm_packed_b_size(hidden, rows) + 63) / 64 * 64; /* the packer wants 64-byte alignment */
  *own = bytes ? aligned_alloc(64, bytes) : NULL;
  if (*own) kiln_sgemm_pack_b(true, hidden, rows, sub, hidden, *own);
  return *own;
}

/* C[m, n] = A[m, k] op(B) (+ bias per column), B packed or [n, k] rows. */
static void gemm_bt(cpu_exec *x, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, const void *packed, float *c, int64_t ldc, const float *bias) {
  kiln_sgemm_args g = {.trans_b = true, .m = m, .n = n, .k = k, .alpha = 1.0f, .a = a, .lda = lda,
                       .b = packed ? NULL : b, .ldb = ldb, .packed_b = packed, .c = c, .ldc = ldc,
                       .bias = bias, .bias_axis = bias ? KILN_GEMM_BIAS_COL : KILN_GEMM_BIAS_NONE};
  kiln_sgemm(x->pool, &g);
}

kiln_status_t kiln_cpu_host_recurrent(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *node = ctx->node;
  rnn_kind kind = kind_of(node);
  rnn_cfg c;
  kiln_status_t st = kiln_rnn_config_of(node, kind, &c);
  if (st) { /* ref words it */
    kiln_status_free(st);
    return NULL;
  }
  kiln_tensor *X = kiln_kernel_input(ctx, 0), *W = kiln_kernel_input(ctx, 1), *R = kiln_kernel_input(ctx, 2);
  kiln_tensor *Bt = kiln_kernel_input(ctx, 3), *L = kiln_kernel_input(ctx, 4), *H0 = kiln_kernel_input(ctx, 5);
  kiln_tensor *C0 = kind == RNN_LSTM ? kiln_kernel_input(ctx, 6) : NULL;
  kiln_tensor *P = kind == RNN_LSTM ? kiln_kernel_input(ctx, 7) : NULL;
  if (!X || !W || !R || X->dtype != KILN_DTYPE_F32 || X->rank != 3 || R->rank != 3) return NULL;
  const int64_t T = c.layout == 0 ? X->dims[0] : X->dims[1], B = c.layout == 0 ? X->dims[1] : X->dims[0];
  const int64_t I = X->dims[2], H = R->dims[2], G = c.gates, nd = c.num_dir, GH = G * H;
  if (kiln_attr_int(node, "hidden_size", H) != H) return NULL;
  int64_t wd[3] = {nd, GH, I}, rd[3] = {nd, GH, H}, bd[2] = {nd, 2 * GH}, pd[2] = {nd, 3 * H};
  int64_t sd[3] = {nd, B, H}, sd1[3] = {B, nd, H};
  const int64_t *sdims = c.layout == 0 ? sd : sd1;
  if (!shaped(W, 3, wd) || !shaped(R, 3, rd) || !shaped(Bt, 2, bd) || !shaped(H0, 3, sdims) || !shaped(C0, 3, sdims) ||
      !shaped(P, 2, pd))
    return NULL;
  if (L) {
    if (L->dtype != KILN_DTYPE_I32 || !kiln_shape_equal(L->rank, L->dims, 1, &B)) return NULL;
    for (int64_t b = 0; b < B; b++)
      if (((const int32_t *)L->data)[b] < 0 || ((const int32_t *)L->data)[b] > T) return NULL;
  }
  int64_t ydims[4] = {T, nd, B, H}, ydims1[4] = {B, T, nd, H};
  kiln_tensor *Y = NULL, *YH = NULL, *YC = NULL;
  if (ctx->n_outputs > 0 && ctx->output_wanted[0])
    KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, 4, c.layout == 0 ? ydims : ydims1, &Y));
  if (ctx->n_outputs > 1 && ctx->output_wanted[1])
    KILN_TRY(kiln_kernel_output_uninit(ctx, 1, KILN_DTYPE_F32, 3, sdims, &YH));
  if (kind == RNN_LSTM && ctx->n_outputs > 2 && ctx->output_wanted[2])
    KILN_TRY(kiln_kernel_output_uninit(ctx, 2, KILN_DTYPE_F32, 3, sdims, &YC));
  *handled = true;
  if (T == 0 || B == 0 || H == 0) { /* empty: states are the initial ones */
    kiln_tensor *outs[3] = {Y, YH, YC}, *init[3] = {NULL, H0, C0};
    for (int k = 0; k < 3; k++) {
      if (!outs[k]) continue;
      size_t bytes = (size_t)outs[k]->numel * sizeof(float);
      if (init[k]) memcpy(outs[k]->data, init[k]->data, bytes);
      else memset(outs[k]->data, 0, bytes);
    }
    return NULL;
  }
  rnn_inputs in = {X->data, W->data, R->data, Bt ? Bt->data : NULL, H0 ? H0->data : NULL, C0 ? C0->data : NULL,
                   P ? P->data : NULL, L ? L->data : NULL};
  bool lbr = kind == RNN_GRU && c.linear_before_reset;
  rnn_rows rows = rows_for_cpu();

  /* Scratch: XW [T*B, GH], the recurrent product [B, GH], the states and
   * the new states [B, H] each, a bias [GH], r . H [B, H] (GRU). */
  size_t floats = (size_t)(T * B * GH + B * GH + 5 * B * H + GH + 3 * H);
  float *xw = malloc(floats * sizeof(float));
  if (!xw) return KILN_OOM();
  float *rec = xw + T * B * GH, *h = rec + B * GH, *cs = h + B * H, *hn = cs + B * H, *cn = hn + B * H;
  float *rh = cn + B * H, *bias = rh + B * H, *tmp = bias + GH, *tmp2 = tmp + H, *tmp3 = tmp2 + H;
  for (int64_t d = 0; d < nd && !st; d++) {
    const float *Wd = in.w + d * GH * I, *Rd = in.r + d * GH * H;
    const float *Wb = in.b ? in.b + d * 2 * GH : NULL, *Rb = Wb ? Wb + GH : NULL;
    const float *Pd = in.p ? in.p + d * 3 * H : NULL;
    const rnn_act *act = c.acts[d];
    /* XW for every step: rows in X's order (layout 0: t*B + b, 1: b*T + t). */
    for (int64_t g = 0; g < GH; g++)
      bias[g] = Wb ? Wb[g] + (lbr && g >= 2 * H ? 0.0f : Rb[g]) : 0.0f;
    kiln_rt_state *slot_w = NULL; /* W packed once per plan when it is a constant */
    const void *pw = kiln_cpu_host_packed_b(x, node, 1, W, Wd, true, I, GH, I, &slot_w);
    gemm_bt(x, T * B, GH, I, in.x, I, Wd, I, pw, xw, GH, bias);
    if (slot_w) slot_w->destroy(slot_w);
    /* R packed: whole, or for GRU without linear_before_reset as z r and h. */
    kiln_rt_state *slot_a = NULL, *slot_b = NULL;
    void *own_a = NULL, *own_b = NULL;
    int64_t rows_a = kind == RNN_GRU && !lbr ? 2 * H : GH;
    const void *ra = packed_r(x, node, R, Rd, H, rows_a, &slot_a, &own_a);
    const void *rb = kind == RNN_GRU && !lbr ? packed_r(x, node, R, Rd + 2 * H * H, H, H, &slot_b, &own_b) : NULL;
    if (!ra || (kind == RNN_GRU && !lbr && !rb)) st = KILN_OOM();
    for (int64_t b = 0; b < B && !st; b++)
      for (int64_t j = 0; j < H; j++) {
        int64_t so = (c.layout == 0 ? d * B + b : b * nd + d) * H + j;
        h[b * H + j] = in.h0 ? in.h0[so] : 0.0f;
        cs[b * H + j] = in.c0 ? in.c0[so] : 0.0f;
      }
    for (int64_t step = 0; step < T && !st; step++) {
      int64_t t = c.reverse[d] ? T - 1 - step : step;
      bool any = false;
      for (int64_t b = 0; b < B && !any; b++) any = !in.lens || t < in.lens[b];
      if (any) gemm_bt(x, B, rows_a, H, h, H, NULL, 0, ra, rec, GH, NULL);
      if (any && kind == RNN_GRU && !lbr) { /* r . H, then its product with R_h */
        for (int64_t b = 0; b < B; b++) {
          const float *xr = xw + (c.layout == 0 ? t * B + b : b * T + t) * GH;
          gate_row(&rows, &c, &act[0], rh + b * H, xr + H, rec + b * GH + H, H);
          for (int64_t j = 0; j < H; j++) rh[b * H + j] *= h[b * H + j];
        }
        gemm_bt(x, B, H, H, rh, H, NULL, 0, rb, rec + 2 * H, GH, NULL);
      }
      for (int64_t b = 0; b < B; b++) {
        bool on = !in.lens || t < in.lens[b];
        float *yrow = Y ? (float *)Y->data + (c.layout == 0 ? (t * nd + d) * B + b : (b * T + t) * nd + d) * H : NULL;
        if (!on) { /* past the row's length: Y is 0, the state stays */
          if (yrow) memset(yrow, 0, (size_t)H * sizeof(float));
          continue;
        }
        const float *xr = xw + (c.layout == 0 ? t * B + b : b * T + t) * GH;
        const float *gr = rec + b * GH;
        float *hb = h + b * H, *cb = cs + b * H, *hnb = hn + b * H, *cnb = cn + b * H;
        if (kind == RNN_SIMPLE) {
          gate_row(&rows, &c, &act[0], hnb, xr, gr, H);
        } else if (kind == RNN_GRU) { /* gates z r h */
          float *z = tmp, *cand = tmp2;
          gate_row(&rows, &c, &act[0], z, xr, gr, H);
          if (lbr) { /* cand = g(xh + r . (H R_h^T + Rb_h)) */
            float *r = tmp3;
            gate_row(&rows, &c, &act[0], r, xr + H, gr + H, H);
            for (int64_t j = 0; j < H; j++) cand[j] = xr[2 * H + j] + r[j] * (gr[2 * H + j] + (Rb ? Rb[2 * H + j] : 0.0f));
            rows.clip_act(&c, &act[1], cand, H);
          } else { /* cand = g(xh + (r . H) R_h^T), Rb_h in xh */
            gate_row(&rows, &c, &act[1], cand, xr + 2 * H, gr + 2 * H, H);
          }
          for (int64_t j = 0; j < H; j++) hnb[j] = (1.0f - z[j]) * cand[j] + z[j] * hb[j];
        } else { /* LSTM: gates i o f c, peepholes i o f */
          float *ig = tmp, *fg = tmp2, *og = tmp3;
          for (int64_t j = 0; j < H; j++) ig[j] = xr[j] + gr[j] + (Pd ? Pd[j] * cb[j] : 0.0f);
          rows.clip_act(&c, &act[0], ig, H);
          if (c.input_forget) {
            for (int64_t j = 0; j < H; j++) fg[j] = 1.0f - ig[j];
          } else {
            for (int64_t j = 0; j < H; j++) fg[j] = xr[2 * H + j] + gr[2 * H + j] + (Pd ? Pd[2 * H + j] * cb[j] : 0.0f);
            rows.clip_act(&c, &act[0], fg, H);
          }
          gate_row(&rows, &c, &act[1], cnb, xr + 3 * H, gr + 3 * H, H); /* the cell candidate, then the new cell */
          for (int64_t j = 0; j < H; j++) cnb[j] = fg[j] * cb[j] + ig[j] * cnb[j];
          for (int64_t j = 0; j < H; j++) og[j] = xr[H + j] + gr[H + j] + (Pd ? Pd[H + j] * cnb[j] : 0.0f);
          rows.clip_act(&c, &act[0], og, H);
          memcpy(hnb, cnb, (size_t)H * sizeof(float));
          rows.act(&act[2], hnb, H);
          for (int64_t j = 0; j < H; j++) hnb[j] *= og[j];
        }
        if (yrow) memcpy(yrow, hnb, (size_t)H * sizeof(float));
      }
      /* The new states replace the old ones of the rows that stepped
       * (after every row: the GEMM above read all of h). */
      for (int64_t b = 0; b < B; b++) {
        if (in.lens && t >= in.lens[b]) continue;
        memcpy(h + b * H, hn + b * H, (size_t)H * sizeof(float));
        if (kind == RNN_LSTM) memcpy(cs + b * H, cn + b * H, (size_t)H * sizeof(float));
      }
    }
    if (slot_a) slot_a->destroy(slot_a);
    if (slot_b) slot_b->destroy(slot_b);
    free(own_a);
    free(own_b);
    for (int64_t b = 0; b < B && !st; b++) {
      int64_t so = (c.layout == 0 ? d * B + b : b * nd + d) * H;
      if (YH) memcpy((float *)YH->data + so, h + b * H, (size_t)H * sizeof(float));
      if (YC) memcpy((float *)YC->data + so, cs + b * H, (size_t)H * sizeof(float));
    }
  }
  free(xw);
  return st;
}
