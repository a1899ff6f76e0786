/* Contraction steps of the cpu device: MatMul, Gemm and attention mapped
 * onto the packed SGEMM micro-kernels (devices/cpu/gemm), 2-D MaxPool, and
 * Conv (planned and run by cpu_conv.c). Constant right-hand matrices are
 * packed once at prepare time. */
#include <math.h>
#include <stdio.h>

#include "codegen/fusion.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "ops/window.h"

static const kiln_type *type_of(const kiln_graph *g, const kiln_node *n, int i) {
  return i < n->n_inputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]].type : NULL;
}

static const kiln_tensor *const_of(const kiln_graph *g, const kiln_node *n, int i) {
  return i < n->n_inputs && n->inputs[i] >= 0 ? g->values[n->inputs[i]].constant : NULL;
}

/* ---- MatMul: numpy semantics (1-D operands promoted, batch broadcasting) ---- */

typedef struct matmul_geom {
  int64_t m, n, k, batch;
  int out_rank;
  int64_t out_batch_dims[KILN_MAX_RANK];
  int a_rank, b_rank; /* batch ranks */
  int64_t a_batch[KILN_MAX_RANK], b_batch[KILN_MAX_RANK];
} matmul_geom;

static void matmul_geometry(const kiln_type *ta, const kiln_type *tb, matmul_geom *gm) {
  memset(gm, 0, sizeof *gm);
  gm->m = ta->rank >= 2 ? ta->dims[ta->rank - 2] : 1;
  gm->k = ta->dims[ta->rank - 1];
  gm->n = tb->rank >= 2 ? tb->dims[tb->rank - 1] : 1;
  gm->a_rank = ta->rank > 2 ? ta->rank - 2 : 0;
  gm->b_rank = tb->rank > 2 ? tb->rank - 2 : 0;
  for (int i = 0; i < gm->a_rank; i++) gm->a_batch[i] = ta->dims[i];
  for (int i = 0; i < gm->b_rank; i++) gm->b_batch[i] = tb->dims[i];
  gm->out_rank = gm->a_rank > gm->b_rank ? gm->a_rank : gm->b_rank;
  gm->batch = 1;
  for (int i = 0; i < gm->out_rank; i++) {
    int ia = i - (gm->out_rank - gm->a_rank), ib = i - (gm->out_rank - gm->b_rank);
    int64_t da = ia >= 0 ? gm->a_batch[ia] : 1, db = ib >= 0 ? gm->b_batch[ib] : 1;
    gm->out_batch_dims[i] = da > db ? da : db;
    gm->batch *= gm->out_batch_dims[i];
  }
}

/* Offset (in matrices) of batch index `bi` of the output in an operand with
 * its own (broadcast) batch dims. */
static int64_t batch_offset(const matmul_geom *gm, int64_t bi, const int64_t *dims, int rank) {
  int64_t off = 0, stride = 1;
  for (int i = gm->out_rank - 1; i >= 0; i--) {
    int64_t idx = bi % gm->out_batch_dims[i];
    bi /= gm->out_batch_dims[i];
    int j = i - (gm->out_rank - rank);
    if (j < 0) continue;
    if (dims[j] != 1) off += idx * stride;
    stride *= dims[j];
  }
  return off;
}

/* ---- 2-D max pooling --------------------------------------------------------------- */

typedef struct pool_geom {
  int64_t planes, H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw; /* ph/pw: padding at the start */
  int64_t PH, PW;                                              /* padded plane read by the windows */
} pool_geom;

static kiln_status_t pool_geometry(const kiln_graph *g, const kiln_node *n, pool_geom *p) {
  const kiln_type *tx = type_of(g, n, 0), *ty = &g->values[n->outputs[0]].type;
  /* Kernel, strides, dilations and pads from the shared window rule
   * (ops/window.h); the output sizes are the graph's, which shape
   * inference derived with the same rule. */
  kiln_window win;
  KILN_TRY(kiln_window_init(n, 2, tx->dims + 2, NULL, true, kiln_attr_int(n, "ceil_mode", 0) != 0, &win));
  p->planes = tx->dims[0] * tx->dims[1];
  p->H = tx->dims[2];
  p->W = tx->dims[3];
  p->OH = ty->dims[2];
  p->OW = ty->dims[3];
  p->KH = win.kernel[0];
  p->KW = win.kernel[1];
  p->sh = win.stride[0];
  p->sw = win.stride[1];
  p->dh = win.dilation[0];
  p->dw = win.dilation[1];
  p->ph = win.pad_begin[0];
  p->pw = win.pad_begin[1];
  p->PH = (p->OH - 1) * p->sh + (p->KH - 1) * p->dh + 1;
  p->PW = (p->OW - 1) * p->sw + (p->KW - 1) * p->dw + 1;
  return NULL;
}

typedef struct pool_ctx {
  const pool_geom *p;
  const float *x;
  float *out, *pad;
} pool_ctx;

/* Row i of the plane padded with -inf (the columns the windows read):
 * dst[j] = x[ih][j - pw]. */
static void pool_pad_row(float *dst, int64_t PW, const float *xr, int64_t W, int64_t pw) {
  int64_t j0 = pw > 0 ? pw : 0, j1 = pw + W < PW ? pw + W : PW;
  if (!xr || j1 <= j0) j0 = j1 = PW;
  for (int64_t j = 0; j < j0; j++) dst[j] = -INFINITY;
  if (j1 > j0) memcpy(dst + j0, xr + (j0 - pw), (size_t)(j1 - j0) * sizeof(float));
  for (int64_t j = j1; j < PW; j++) dst[j] = -INFINITY;
}

/* o = max(o, r) elementwise, NaN propagating as in the reference. */
static void pool_max_row(float *restrict o, const float *restrict r, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = r[i];
    o[i] = (v > o[i] || v != v) ? v : o[i];
  }
}

/* Copies the plane into a -inf padded one, then takes each window's max
 * with no bounds test (NaN propagates, as in the reference). With stride
 * 2 (and no dilation) each padded row is stored as its even columns then
 * its odd ones, so every window column is a contiguous row segment. */
static void maxpool_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const pool_ctx *c = vctx;
  const pool_geom *p = c->p;
  bool split = p->sw == 2 && p->dw == 1;
  int64_t rw = p->PW + 2, half = (p->PW + 1) / 2;
  float *pad = c->pad + (int64_t)thread * (p->PH + 1) * rw, *stage = pad + p->PH * rw;
  for (int64_t pl = begin; pl < end; pl++) {
    const float *xp = c->x + pl * p->H * p->W;
    float *op = c->out + pl * p->OH * p->OW;
    for (int64_t i = 0; i < p->PH; i++) {
      int64_t ih = i - p->ph;
      const float *xr = ih >= 0 && ih < p->H ? xp + ih * p->W : NULL;
      float *row = pad + i * rw;
      if (!split) {
        pool_pad_row(row, p->PW, xr, p->W, p->pw);
        continue;
      }
      pool_pad_row(stage, 2 * half, xr, p->W, p->pw);
      for (int64_t t = 0; t < half; t++) {
        row[t] = stage[2 * t];
        row[half + t] = stage[2 * t + 1];
      }
    }
    for (int64_t oh = 0; oh < p->OH; oh++) {
      float *o = op + oh * p->OW;
      for (int64_t ow = 0; ow < p->OW; ow++) o[ow] = -INFINITY;
      for (int64_t kh = 0; kh < p->KH; kh++) {
        const float *row = pad + (oh * p->sh + kh * p->dh) * rw;
        for (int64_t kw = 0; kw < p->KW; kw++) {
          if (split) {
            pool_max_row(o, row + (kw & 1) * half + kw / 2, p->OW);
          } else if (p->sw == 1) {
            pool_max_row(o, row + kw * p->dw, p->OW);
          } else {
            const float *r = row + kw * p->dw;
            for (int64_t ow = 0; ow < p->OW; ow++) {
              float v = r[ow * p->sw];
              o[ow] = (v > o[ow] || v != v) ? v : o[ow];
            }
          }
        }
      }
    }
  }
}

/* ---- attention: softmax(scale Q K^T + mask) V ----------------------------------- */

typedef struct attn_geom {
  int64_t m, n, d, dv, batch;
  bool transpose_k;
  float scale;
  int out_rank; /* batch rank */
  int64_t out_batch[KILN_MAX_RANK];
  int rank[4];
  int64_t bdims[4][KILN_MAX_RANK]; /* each operand's batch dims */
  int64_t mask_m, mask_n;          /* mask extent along M and N (1 = broadcast) */
} attn_geom;

static void attn_geometry(const kiln_graph *g, const kiln_node *n, attn_geom *a) {
  memset(a, 0, sizeof *a);
  a->transpose_k = kiln_attr_int(n, "transpose_k", 1) != 0;
  a->scale = kiln_attr_float(n, "scale", 1.0f);
  for (int i = 0; i < 4; i++) {
    const kiln_type *t = type_of(g, n, i);
    a->rank[i] = t ? (t->rank > 2 ? t->rank - 2 : 0) : -1;
    for (int k = 0; t && k < a->rank[i]; k++) a->bdims[i][k] = t->dims[k];
  }
  const kiln_type *q = type_of(g, n, 0), *k = type_of(g, n, 1), *v = type_of(g, n, 2), *mk = type_of(g, n, 3);
  a->m = q->dims[q->rank - 2];
  a->d = q->dims[q->rank - 1];
  a->n = a->transpose_k ? k->dims[k->rank - 2] : k->dims[k->rank - 1];
  a->dv = v->dims[v->rank - 1];
  a->mask_m = mk && mk->rank >= 2 ? mk->dims[mk->rank - 2] : 1;
  a->mask_n = mk && mk->rank >= 1 ? mk->dims[mk->rank - 1] : 1;
  const kiln_type *y = &g->values[n->outputs[0]].type;
  a->out_rank = y->rank - 2;
  a->batch = 1;
  for (int i = 0; i < a->out_rank; i++) {
    a->out_batch[i] = y->dims[i];
    a->batch *= y->dims[i];
  }
}

static int64_t attn_offset(const attn_geom *a, int64_t bi, int op) {
  matmul_geom gm;
  memset(&gm, 0, sizeof gm);
  gm.out_rank = a->out_rank;
  for (int i = 0; i < a->out_rank; i++) gm.out_batch_dims[i] = a->out_batch[i];
  return batch_offset(&gm, bi, a->bdims[op], a->rank[op]);
}

typedef struct attn_ctx {
  const attn_geom *a;
  const float *q, *k, *v, *mask;
  float *y, *work;
  kiln_threadpool *inner_pool; /* for the GEMMs when batches alone cannot fill the threads */
} attn_ctx;

static void attn_batches(void *vctx, int64_t begin, int64_t end, int thread) {
  const attn_ctx *c = vctx;
  const attn_geom *a = c->a;
  float *s = c->work + (int64_t)thread * a->m * a->n;
  for (int64_t bi = begin; bi < end; bi++) {
    const float *q = c->q + attn_offset(a, bi, 0) * a->m * a->d;
    const float *k = c->k + attn_offset(a, bi, 1) * a->n * a->d;
    const float *v = c->v + attn_offset(a, bi, 2) * a->n * a->dv;
    kiln_sgemm_args s1 = {false, a->transpose_k, a->m, a->n, a->d, a->scale, q, a->d, k, a->transpose_k ? a->d : a->n,
                          NULL, 0.0f, s, a->n, NULL, 0, NULL, NULL};
    kiln_sgemm(c->inner_pool, &s1);
    const float *mask = c->mask ? c->mask + attn_offset(a, bi, 3) * a->mask_m * a->mask_n : NULL;
    for (int64_t i = 0; i < a->m; i++) {
      float *row = s + i * a->n;
      if (mask) {
        const float *mr = mask + (a->mask_m == 1 ? 0 : i) * a->mask_n;
        if (a->mask_n == 1)
          for (int64_t j = 0; j < a->n; j++) row[j] += mr[0];
        else
          for (int64_t j = 0; j < a->n; j++) row[j] += mr[j];
      }
      float mx = -INFINITY;
      for (int64_t j = 0; j < a->n; j++) mx = row[j] > mx ? row[j] : mx;
      double sum = 0;
      for (int64_t j = 0; j < a->n; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
      }
      float inv = (float)(1.0 / sum);
      for (int64_t j = 0; j < a->n; j++) row[j] *= inv;
    }
    kiln_sgemm_args s2 = {false, false, a->m, a->dv, a->n, 1.0f, s, a->n, v, a->dv, NULL, 0.0f,
                          c->y + bi * a->m * a->dv, a->dv, NULL, 0, NULL, NULL};
    kiln_sgemm(c->inner_pool, &s2);
  }
}

/* ---- epilogues ------------------------------------------------------------------ */

struct epilogue_binding {
  kiln_rt_epilogue_fn fn;
  void *args[64];
  kiln_rt_epilogue_ctx ctx;
};
typedef struct epilogue_binding epilogue_binding;

/* Binds the fused kernel's buffers; false when the step has no epilogue. */
static bool bind_epilogue(cpu_exec *x, const cpu_step *s, void *const *ptr, epilogue_binding *e) {
  if (s->epilogue_step < 0) return false;
  const cpu_step *k = &x->steps[s->epilogue_step];
  for (int a = 0; a < k->n_args && a < 64; a++) e->args[a] = ptr[k->args[a]];
  e->fn = k->epilogue;
  e->ctx.buffers = e->args;
  e->ctx.base = 0;
  e->ctx.row = 0;
  return true;
}

/* The scalar value of constant input i of n (f32, one element), or dflt when absent. */
static bool const_scalar(const kiln_graph *g, const kiln_node *n, int i, float dflt, float *out) {
  *out = dflt;
  if (i >= n->n_inputs || n->inputs[i] < 0) return true;
  const kiln_tensor *t = g->values[n->inputs[i]].constant;
  if (!t || t->dtype != KILN_DTYPE_F32 || t->numel != 1) return false;
  *out = ((const float *)t->data)[0];
  return true;
}

/* Relu or Clip with constant bounds: lo/hi. */
static bool as_clip(const kiln_graph *g, const kiln_node *n, float *lo, float *hi) {
  if (kiln_node_is(n, KILN_OP_Relu)) {
    *lo = 0.0f;
    *hi = INFINITY;
    return true;
  }
  if (!kiln_node_is(n, KILN_OP_Clip)) return false;
  if (n->opset < 11) {
    *lo = kiln_attr_float(n, "min", -INFINITY);
    *hi = kiln_attr_float(n, "max", INFINITY);
    return true;
  }
  return const_scalar(g, n, 1, -INFINITY, lo) && const_scalar(g, n, 2, INFINITY, hi);
}

/* An f32 Add of two same-shape operands, one of them `raw`: the other one. */
static int as_residual_add(const kiln_graph *g, const kiln_node *n, int raw) {
  if (!kiln_node_is(n, KILN_OP_Add) || n->n_inputs != 2 || n->n_outputs != 1) return -1;
  int a = n->inputs[0], b = n->inputs[1];
  if (a < 0 || b < 0 || (a != raw && b != raw) || a == b) return -1;
  int other = a == raw ? b : a;
  const kiln_type *to = &g->values[other].type, *tr = &g->values[raw].type, *ty = &g->values[n->outputs[0]].type;
  if (to->dtype != KILN_DTYPE_F32 || ty->dtype != KILN_DTYPE_F32 || !kiln_type_same_shape(to, tr) ||
      !kiln_type_same_shape(ty, tr))
    return -1;
  return other;
}

/* Recognizes the step's fused epilogue (a generated kernel of 1 or 2 nodes)
 * as y = clip(y + add, lo, hi): Relu/Clip, Add of a same-shape tensor, or
 * Add then Relu/Clip. The kernel's buffers must be exactly its output, the
 * contraction's raw result and the added tensor, so nothing else is lost. */
static void recognize_epilogue(cpu_exec *x, cpu_step *s) {
  s->epi_native = false;
  if (s->epilogue_step < 0) return;
  const kiln_graph *g = x->g;
  const cpu_step *k = &x->steps[s->epilogue_step];
  const kiln_node *root = k->node;
  int raw = s->node->outputs[0];
  if (g->values[raw].type.dtype != KILN_DTYPE_F32 || root->n_outputs != 1 || root->outputs[0] != k->args[0]) return;
  float lo = -INFINITY, hi = INFINITY;
  int add = -1;
  bool clip = false;
  if (k->n_fused == 1) {
    if (as_clip(g, root, &lo, &hi)) {
      if (root->inputs[0] != raw) return;
      clip = true;
    } else if ((add = as_residual_add(g, root, raw)) < 0) {
      return;
    }
  } else if (k->n_fused == 2) {
    if (!as_clip(g, root, &lo, &hi)) return;
    clip = true;
    int mid = root->inputs[0];
    if (mid < 0 || g->values[mid].producer < 0) return;
    const kiln_node *an = &g->nodes[g->values[mid].producer];
    if ((add = as_residual_add(g, an, raw)) < 0) return;
  } else {
    return;
  }
  /* The generated kernel's buffers: output, raw result, added operand. */
  int want = 2 + (add >= 0);
  if (k->n_args != want) return;
  for (int a = 1; a < k->n_args; a++)
    if (k->args[a] != raw && k->args[a] != add) return;
  s->epi_native = true;
  s->epi_clip = clip;
  s->epi_lo = lo;
  s->epi_hi = hi;
  s->epi_has_add = add >= 0;
  s->epi_add_value = add;
}

/* ---- prepare / run ---------------------------------------------------------------- */

kiln_status_t kiln_cpu_contract_prepare(cpu_exec *x, cpu_step *s) {
  const kiln_graph *g = x->g;
  const kiln_node *n = s->node;
  if (s->kind == CPU_STEP_MATMUL) {
    const kiln_type *ta = type_of(g, n, 0), *tb = type_of(g, n, 1);
    const kiln_tensor *b = const_of(g, n, 1);
    if (b && tb->rank == 2 && ta->rank >= 1) {
      matmul_geom gm;
      matmul_geometry(ta, tb, &gm);
      size_t bytes = kiln_sgemm_packed_b_size(gm.k, gm.n);
      s->packed_b = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
      if (!s->packed_b) return KILN_OOM();
      kiln_sgemm_pack_b(false, gm.k, gm.n, b->data, gm.n, s->packed_b);
    }
  } else if (s->kind == CPU_STEP_GEMM) {
    const kiln_tensor *b = const_of(g, n, 1);
    const kiln_type *tb = type_of(g, n, 1);
    if (b) {
      bool tr = kiln_attr_int(n, "transB", 0) != 0;
      int64_t k = tr ? tb->dims[1] : tb->dims[0], nn = tr ? tb->dims[0] : tb->dims[1];
      size_t bytes = kiln_sgemm_packed_b_size(k, nn);
      s->packed_b = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
      if (!s->packed_b) return KILN_OOM();
      kiln_sgemm_pack_b(tr, k, nn, b->data, tb->dims[1], s->packed_b);
    }
  } else if (s->kind == CPU_STEP_MAXPOOL) {
    pool_geom p;
    KILN_TRY(pool_geometry(g, n, &p));
    size_t bytes = (size_t)kiln_threadpool_size(x->pool) * (size_t)((p.PH + 1) * (p.PW + 2)) * sizeof(float);
    s->work = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!s->work) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for pooling (%zu bytes)", bytes);
  } else if (s->kind == CPU_STEP_ATTENTION) {
    attn_geom a;
    attn_geometry(g, n, &a);
    size_t bytes = (size_t)kiln_threadpool_size(x->pool) * (size_t)a.m * (size_t)a.n * sizeof(float);
    s->work = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!s->work) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for attention scores (%zu bytes)", bytes);
  } else if (s->kind == CPU_STEP_CONV) {
    recognize_epilogue(x, s);
    kiln_conv_geom c;
    KILN_TRY(kiln_conv_geometry(g, n, &c));
    const kiln_tensor *w = const_of(g, n, 1);
    kiln_conv_plan *plan;
    KILN_TRY(kiln_conv_plan_create(&c, KILN_CONV_AUTO, w ? w->data : NULL, kiln_threadpool_size(x->pool), &plan));
    s->packed_b = plan;
    s->scratch_bytes = kiln_conv_plan_scratch_bytes(plan);
    if (s->scratch_bytes > x->scratch_bytes) x->scratch_bytes = s->scratch_bytes;
  }
  return NULL;
}

kiln_status_t kiln_cpu_contract_run(cpu_exec *x, const cpu_step *s, void *const *ptr) {
  const kiln_graph *g = x->g;
  const kiln_node *n = s->node;
  float *out = ptr[s->out_value];
  epilogue_binding epi;
  bool has_epi = bind_epilogue(x, s, ptr, &epi);
  /* A fused per-column bias (cpu_plan.c) is added by the SGEMM; an epilogue
   * left as the identity is not called. */
  const float *col_bias = s->has_col_bias ? ptr[s->col_bias_value] : NULL;
  kiln_gemm_epilogue_fn epi_fn = has_epi && !s->epi_identity ? epi.fn : NULL;
  if (s->kind == CPU_STEP_MATMUL) {
    const kiln_type *ta = type_of(g, n, 0), *tb = type_of(g, n, 1);
    matmul_geom gm;
    matmul_geometry(ta, tb, &gm);
    const float *a = ptr[n->inputs[0]], *b = ptr[n->inputs[1]];
    if (gm.b_rank == 0 && gm.batch > 1) {
      /* A 2-D right-hand side shared by every batch: one GEMM with the
       * batches stacked as rows (A and the output are contiguous). */
      gm.m *= gm.batch;
      gm.batch = 1;
      gm.a_rank = 0;
      gm.out_rank = 0;
    }
    for (int64_t bi = 0; bi < gm.batch; bi++) {
      int64_t oa = batch_offset(&gm, bi, gm.a_batch, gm.a_rank), ob = batch_offset(&gm, bi, gm.b_batch, gm.b_rank);
      epi.ctx.base = bi * gm.m * gm.n;
      epi.ctx.row = gm.n;
      kiln_sgemm_args args = {false, false, gm.m, gm.n, gm.k, 1.0f, a + oa * gm.m * gm.k, gm.k,
                              b + ob * gm.k * gm.n, gm.n, s->packed_b, 0.0f, out + bi * gm.m * gm.n, gm.n,
                              col_bias, col_bias ? KILN_GEMM_BIAS_COL : 0, epi_fn, &epi.ctx};
      kiln_sgemm(x->pool, &args);
    }
    return NULL;
  }
  if (s->kind == CPU_STEP_GEMM) {
    const kiln_type *ta = type_of(g, n, 0), *tb = type_of(g, n, 1), *tc = type_of(g, n, 2);
    bool tra = kiln_attr_int(n, "transA", 0) != 0, trb = kiln_attr_int(n, "transB", 0) != 0;
    float alpha = kiln_attr_float(n, "alpha", 1.0f), beta = kiln_attr_float(n, "beta", 1.0f);
    int64_t m = tra ? ta->dims[1] : ta->dims[0], k = tra ? ta->dims[0] : ta->dims[1];
    int64_t nn = trb ? tb->dims[0] : tb->dims[1];
    const float *cptr = tc ? ptr[n->inputs[2]] : NULL;
    int bias_axis = col_bias ? KILN_GEMM_BIAS_COL : 0; /* col_bias: only when there is no C */
    float gemm_beta = 0.0f;
    const float *bias = col_bias;
    if (cptr && beta != 0.0f) {
      int64_t cn = kiln_shape_numel(tc->rank, tc->dims);
      bool per_col = cn == nn && (tc->rank == 1 || (tc->rank == 2 && tc->dims[0] == 1));
      if (per_col && beta == 1.0f) {
        bias = cptr;
        bias_axis = 2;
      } else {
        /* General C: broadcast it into the output, then accumulate. */
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < nn; j++) {
            int64_t ci;
            if (tc->rank == 0 || cn == 1) ci = 0;
            else if (tc->rank == 1) ci = j;
            else ci = (tc->dims[0] == 1 ? 0 : i) * tc->dims[1] + (tc->dims[1] == 1 ? 0 : j);
            out[i * nn + j] = beta * cptr[ci];
          }
        gemm_beta = 1.0f;
      }
    }
    epi.ctx.row = nn;
    kiln_sgemm_args args = {tra, trb, m, nn, k, alpha, ptr[n->inputs[0]], ta->dims[1], ptr[n->inputs[1]], tb->dims[1],
                            s->packed_b, gemm_beta, out, nn, bias, bias_axis, epi_fn, &epi.ctx};
    kiln_sgemm(x->pool, &args);
    return NULL;
  }
  if (s->kind == CPU_STEP_MAXPOOL) {
    pool_geom p;
    KILN_TRY(pool_geometry(g, n, &p));
    pool_ctx c = {&p, ptr[n->inputs[0]], out, s->work};
    kiln_parallel_for(x->pool, p.planes, 1, maxpool_planes, &c);
    return NULL;
  }
  if (s->kind == CPU_STEP_ATTENTION) {
    attn_geom a;
    attn_geometry(g, n, &a);
    const float *mask = n->n_inputs > 3 && n->inputs[3] >= 0 ? ptr[n->inputs[3]] : NULL;
    int threads = kiln_threadpool_size(x->pool);
    attn_ctx c = {&a, ptr[n->inputs[0]], ptr[n->inputs[1]], ptr[n->inputs[2]], mask, out, s->work, NULL};
    if (a.batch >= threads) {
      kiln_parallel_for(x->pool, a.batch, 1, attn_batches, &c);
    } else { /* few batches: let each GEMM use the threads */
      c.inner_pool = x->pool;
      attn_batches(&c, 0, a.batch, 0);
    }
    return NULL;
  }
  /* Conv (cpu_conv.c). */
  const float *bias = n->n_inputs > 2 && n->inputs[2] >= 0 ? ptr[n->inputs[2]] : NULL;
  kiln_conv_epilogue ce = {has_epi ? epi.fn : NULL, epi.args, false, false, 0.0f, 0.0f, NULL};
  if (has_epi && s->epi_native) {
    ce.native = true;
    ce.clip = s->epi_clip;
    ce.lo = s->epi_lo;
    ce.hi = s->epi_hi;
    ce.add = s->epi_has_add ? ptr[s->epi_add_value] : NULL;
  }
  kiln_conv_run(s->packed_b, x->pool, ptr[n->inputs[0]], ptr[n->inputs[1]], bias, out, x->scratch, has_epi ? &ce : NULL);
  return NULL;
}
