/* Contraction steps of the cpu device: MatMul, Gemm and Conv mapped onto the
 * packed SGEMM micro-kernels (devices/cpu/gemm). Constant right-hand
 * matrices are packed once at prepare time. */
#include <math.h>
#include <stdio.h>

#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"

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

/* ---- Conv geometry (NCHW, N-D spatial) ------------------------------------------ */

typedef struct conv_geom {
  int nsp;
  int64_t n, ci, co, group;
  int64_t in_sp[3], out_sp[3], k[3], stride[3], dil[3], pad_begin[3];
  int64_t kdim, osize; /* Ci*prod(k), prod(out spatial) */
} conv_geom;

static kiln_status_t conv_geometry(const kiln_graph *g, const kiln_node *n, conv_geom *c) {
  memset(c, 0, sizeof *c);
  const kiln_type *tx = type_of(g, n, 0), *tw = type_of(g, n, 1);
  const kiln_type *ty = &g->values[n->outputs[0]].type;
  c->nsp = tx->rank - 2;
  if (c->nsp < 1 || c->nsp > 3) return kiln_error(KILN_UNSUPPORTED, "Conv with %d spatial dims", c->nsp);
  c->n = tx->dims[0];
  c->ci = tx->dims[1];
  c->co = tw->dims[0];
  c->group = kiln_attr_int(n, "group", 1);
  int cnt;
  const int64_t *strides = kiln_attr_ints(n, "strides", &cnt);
  const int64_t *dil = kiln_attr_ints(n, "dilations", &cnt);
  const int64_t *pads = kiln_attr_ints(n, "pads", &cnt);
  const char *auto_pad = kiln_attr_string(n, "auto_pad", "NOTSET");
  c->kdim = c->ci / c->group;
  c->osize = 1;
  for (int i = 0; i < c->nsp; i++) {
    c->in_sp[i] = tx->dims[2 + i];
    c->out_sp[i] = ty->dims[2 + i];
    c->k[i] = tw->dims[2 + i];
    c->stride[i] = strides ? strides[i] : 1;
    c->dil[i] = dil ? dil[i] : 1;
    if (!strcmp(auto_pad, "SAME_UPPER") || !strcmp(auto_pad, "SAME_LOWER")) {
      int64_t total = (c->out_sp[i] - 1) * c->stride[i] + (c->k[i] - 1) * c->dil[i] + 1 - c->in_sp[i];
      if (total < 0) total = 0;
      c->pad_begin[i] = !strcmp(auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
    } else {
      c->pad_begin[i] = pads ? pads[i] : 0;
    }
    c->kdim *= c->k[i];
    c->osize *= c->out_sp[i];
  }
  return NULL;
}

/* The input is already the im2col matrix: 1x1, stride 1, and no padding at
 * either end (the output covers exactly the input). */
static bool conv_is_pointwise(const conv_geom *c) {
  for (int i = 0; i < c->nsp; i++)
    if (c->k[i] != 1 || c->stride[i] != 1 || c->pad_begin[i] != 0 || c->out_sp[i] != c->in_sp[i]) return false;
  return true;
}

typedef struct im2col_ctx {
  const conv_geom *c;
  const float *x; /* one image, channels of one group */
  float *col;     /* [kdim, osize] */
} im2col_ctx;

/* Rows of the im2col matrix: one per (channel, kernel offset). */
static void im2col_rows(void *vctx, int64_t begin, int64_t end, int thread) {
  const im2col_ctx *ic = vctx;
  const conv_geom *c = ic->c;
  int64_t kprod = 1;
  for (int i = 0; i < c->nsp; i++) kprod *= c->k[i];
  int64_t in_plane = 1;
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  for (int64_t row = begin; row < end; row++) {
    int64_t ch = row / kprod, kk = row % kprod;
    int64_t koff[3] = {0, 0, 0};
    for (int i = c->nsp - 1; i >= 0; i--) {
      koff[i] = kk % c->k[i];
      kk /= c->k[i];
    }
    const float *xp = ic->x + ch * in_plane;
    float *dst = ic->col + row * c->osize;
    int64_t o = 0;
    if (c->nsp == 2) {
      for (int64_t oh = 0; oh < c->out_sp[0]; oh++) {
        int64_t ih = oh * c->stride[0] - c->pad_begin[0] + koff[0] * c->dil[0];
        bool hin = ih >= 0 && ih < c->in_sp[0];
        for (int64_t ow = 0; ow < c->out_sp[1]; ow++, o++) {
          int64_t iw = ow * c->stride[1] - c->pad_begin[1] + koff[1] * c->dil[1];
          dst[o] = (hin && iw >= 0 && iw < c->in_sp[1]) ? xp[ih * c->in_sp[1] + iw] : 0.0f;
        }
      }
      continue;
    }
    for (o = 0; o < c->osize; o++) {
      int64_t rem = o, idx = 0;
      bool in = true;
      int64_t pos[3];
      for (int i = c->nsp - 1; i >= 0; i--) {
        pos[i] = rem % c->out_sp[i];
        rem /= c->out_sp[i];
      }
      for (int i = 0; i < c->nsp; i++) {
        int64_t p = pos[i] * c->stride[i] - c->pad_begin[i] + koff[i] * c->dil[i];
        in = in && p >= 0 && p < c->in_sp[i];
        idx = idx * c->in_sp[i] + p;
      }
      dst[o] = in ? xp[idx] : 0.0f;
    }
  }
}

/* ---- depthwise: one filter per channel, direct loops ------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

struct epilogue_binding;
static void apply_plane_epilogue(const struct epilogue_binding *e, float *plane, int64_t base, int64_t rows, int64_t cols);

typedef struct dw_ctx {
  const conv_geom *c;
  const float *x, *w, *bias;
  float *out;
  const struct epilogue_binding *epi; /* applied to each finished plane, or NULL */
  float *pad;                         /* 3x3 path: one zero-padded input plane per thread */
} dw_ctx;

/* Rows and columns of the zero-padded plane the 3x3 path reads. */
static void dw_padded_dims(const conv_geom *c, int64_t *ph, int64_t *pw) {
  *ph = (c->out_sp[0] - 1) * c->stride[0] + 3;
  *pw = (c->out_sp[1] - 1) * c->stride[1] + 3;
}

static bool dw_is_3x3(const conv_geom *c) {
  return c->k[0] == 3 && c->k[1] == 3 && c->dil[0] == 1 && c->dil[1] == 1 && c->stride[0] == c->stride[1] &&
         c->stride[0] <= 2;
}

/* 3x3 depthwise (MobileNet's): pad the plane once, then every output is 9
 * multiply-adds with no bounds test, vectorized across the row. */
static void dw3x3_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const dw_ctx *d = vctx;
  const conv_geom *c = d->c;
  int64_t H = c->in_sp[0], W = c->in_sp[1], OH = c->out_sp[0], OW = c->out_sp[1], st = c->stride[0];
  int64_t PH, PW;
  dw_padded_dims(c, &PH, &PW);
  float *pad = d->pad + (int64_t)thread * PH * PW;
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % c->co;
    const float *xp = d->x + p * H * W, *wp = d->w + ch * 9;
    float *op = d->out + p * OH * OW;
    for (int64_t i = 0; i < PH; i++) {
      int64_t ih = i - c->pad_begin[0];
      float *row = pad + i * PW;
      if (ih < 0 || ih >= H) {
        memset(row, 0, (size_t)PW * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < PW; j++) {
        int64_t iw = j - c->pad_begin[1];
        row[j] = iw >= 0 && iw < W ? xp[ih * W + iw] : 0.0f;
      }
    }
    const float w0 = wp[0], w1 = wp[1], w2 = wp[2], w3 = wp[3], w4 = wp[4], w5 = wp[5], w6 = wp[6], w7 = wp[7], w8 = wp[8];
    const float b = d->bias ? d->bias[ch] : 0.0f;
    for (int64_t oh = 0; oh < OH; oh++) {
      const float *r0 = pad + oh * st * PW, *r1 = r0 + PW, *r2 = r1 + PW;
      float *o = op + oh * OW;
      if (st == 1) {
        for (int64_t ow = 0; ow < OW; ow++)
          o[ow] = b + w0 * r0[ow] + w1 * r0[ow + 1] + w2 * r0[ow + 2] + w3 * r1[ow] + w4 * r1[ow + 1] + w5 * r1[ow + 2] +
                  w6 * r2[ow] + w7 * r2[ow + 1] + w8 * r2[ow + 2];
      } else {
        for (int64_t ow = 0; ow < OW; ow++) {
          int64_t j = 2 * ow;
          o[ow] = b + w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2] + w3 * r1[j] + w4 * r1[j + 1] + w5 * r1[j + 2] +
                  w6 * r2[j] + w7 * r2[j + 1] + w8 * r2[j + 2];
        }
      }
    }
    if (d->epi) apply_plane_epilogue(d->epi, op, p * OH * OW, OH, OW);
  }
}

/* Planes (image, channel) [begin, end): each output row accumulates
 * w[kh][kw] * input row over the output columns whose input column is
 * inside the image, so the innermost loop has no bounds test and
 * vectorizes. */
static void dw_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const dw_ctx *d = vctx;
  const conv_geom *c = d->c;
  int64_t H = c->in_sp[0], W = c->in_sp[1], OH = c->out_sp[0], OW = c->out_sp[1];
  int64_t KH = c->k[0], KW = c->k[1], sh = c->stride[0], sw = c->stride[1];
  int64_t dh = c->dil[0], dwl = c->dil[1], ph = c->pad_begin[0], pw = c->pad_begin[1];
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % c->co;
    const float *xp = d->x + p * H * W, *wp = d->w + ch * KH * KW;
    float *op = d->out + p * OH * OW;
    float b = d->bias ? d->bias[ch] : 0.0f;
    for (int64_t oh = 0; oh < OH; oh++) {
      float *o = op + oh * OW;
      for (int64_t ow = 0; ow < OW; ow++) o[ow] = b;
      for (int64_t kh = 0; kh < KH; kh++) {
        int64_t ih = oh * sh - ph + kh * dh;
        if (ih < 0 || ih >= H) continue;
        const float *xr = xp + ih * W;
        for (int64_t kw = 0; kw < KW; kw++) {
          float wv = wp[kh * KW + kw];
          int64_t off = kw * dwl - pw;
          int64_t lo = ceil_div(-off, sw), hi = floor_div(W - 1 - off, sw);
          if (lo < 0) lo = 0;
          if (hi > OW - 1) hi = OW - 1;
          if (sw == 1) {
            const float *xs = xr + off;
            for (int64_t ow = lo; ow <= hi; ow++) o[ow] += wv * xs[ow];
          } else {
            for (int64_t ow = lo; ow <= hi; ow++) o[ow] += wv * xr[ow * sw + off];
          }
        }
      }
    }
    if (d->epi) apply_plane_epilogue(d->epi, op, p * OH * OW, OH, OW);
  }
}

static bool conv_is_depthwise(const conv_geom *c) { return c->nsp == 2 && c->group == c->ci && c->co == c->ci && c->group > 1; }

/* ---- 2-D max pooling --------------------------------------------------------------- */

typedef struct pool_geom {
  int64_t planes, H, W, OH, OW, KH, KW, sh, sw, dh, dw, ph, pw; /* ph/pw: padding at the start */
  int64_t PH, PW;                                              /* padded plane read by the windows */
} pool_geom;

static void pool_geometry(const kiln_graph *g, const kiln_node *n, pool_geom *p) {
  const kiln_type *tx = type_of(g, n, 0), *ty = &g->values[n->outputs[0]].type;
  int cnt;
  const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &cnt);
  const int64_t *st = kiln_attr_ints(n, "strides", &cnt);
  const int64_t *dl = kiln_attr_ints(n, "dilations", &cnt);
  const int64_t *pads = kiln_attr_ints(n, "pads", &cnt);
  const char *auto_pad = kiln_attr_string(n, "auto_pad", "NOTSET");
  p->planes = tx->dims[0] * tx->dims[1];
  p->H = tx->dims[2];
  p->W = tx->dims[3];
  p->OH = ty->dims[2];
  p->OW = ty->dims[3];
  p->KH = ks ? ks[0] : 1;
  p->KW = ks ? ks[1] : 1;
  p->sh = st ? st[0] : 1;
  p->sw = st ? st[1] : 1;
  p->dh = dl ? dl[0] : 1;
  p->dw = dl ? dl[1] : 1;
  int64_t begin[2] = {pads ? pads[0] : 0, pads ? pads[1] : 0};
  if (!strcmp(auto_pad, "SAME_UPPER") || !strcmp(auto_pad, "SAME_LOWER")) {
    int64_t in[2] = {p->H, p->W}, out[2] = {p->OH, p->OW}, k[2] = {p->KH, p->KW}, s[2] = {p->sh, p->sw},
            d[2] = {p->dh, p->dw};
    for (int i = 0; i < 2; i++) {
      int64_t total = (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i];
      if (total < 0) total = 0;
      begin[i] = !strcmp(auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
    }
  }
  p->ph = begin[0];
  p->pw = begin[1];
  p->PH = (p->OH - 1) * p->sh + (p->KH - 1) * p->dh + 1;
  p->PW = (p->OW - 1) * p->sw + (p->KW - 1) * p->dw + 1;
}

typedef struct pool_ctx {
  const pool_geom *p;
  const float *x;
  float *out, *pad;
} pool_ctx;

/* Copies the plane into a -inf padded one, then takes each window's max
 * with no bounds test (NaN propagates, as in the reference). */
static void maxpool_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const pool_ctx *c = vctx;
  const pool_geom *p = c->p;
  float *pad = c->pad + (int64_t)thread * p->PH * p->PW;
  for (int64_t pl = begin; pl < end; pl++) {
    const float *xp = c->x + pl * p->H * p->W;
    float *op = c->out + pl * p->OH * p->OW;
    for (int64_t i = 0; i < p->PH; i++) {
      int64_t ih = i - p->ph;
      float *row = pad + i * p->PW;
      for (int64_t j = 0; j < p->PW; j++) {
        int64_t iw = j - p->pw;
        row[j] = ih >= 0 && ih < p->H && iw >= 0 && iw < p->W ? xp[ih * p->W + iw] : -INFINITY;
      }
    }
    for (int64_t oh = 0; oh < p->OH; oh++) {
      float *o = op + oh * p->OW;
      for (int64_t ow = 0; ow < p->OW; ow++) o[ow] = -INFINITY;
      for (int64_t kh = 0; kh < p->KH; kh++) {
        const float *row = pad + (oh * p->sh + kh * p->dh) * p->PW;
        for (int64_t kw = 0; kw < p->KW; kw++) {
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

/* Each thread needs its own ctx (base differs per plane). */
static void apply_plane_epilogue(const epilogue_binding *e, float *plane, int64_t base, int64_t rows, int64_t cols) {
  kiln_rt_epilogue_ctx ctx = {e->ctx.buffers, base, cols};
  e->fn(&ctx, plane, cols, 0, 0, rows, cols);
}

/* Binds the fused kernel's buffers; false when the step has no epilogue. */
static bool bind_epilogue(struct kiln_executable *x, const cpu_step *s, void *const *ptr, epilogue_binding *e) {
  if (s->epilogue_step < 0) return false;
  const cpu_step *k = &x->steps[s->epilogue_step];
  for (int a = 0; a < k->n_args && a < 64; a++) e->args[a] = ptr[k->args[a]];
  e->fn = k->epilogue;
  e->ctx.buffers = e->args;
  e->ctx.base = 0;
  e->ctx.row = 0;
  return true;
}

/* ---- prepare / run ---------------------------------------------------------------- */

kiln_status_t kiln_cpu_contract_prepare(struct kiln_executable *x, cpu_step *s) {
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
    pool_geometry(g, n, &p);
    size_t bytes = (size_t)kiln_threadpool_size(x->pool) * (size_t)(p.PH * p.PW) * sizeof(float);
    s->work = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!s->work) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for pooling (%zu bytes)", bytes);
  } else if (s->kind == CPU_STEP_ATTENTION) {
    attn_geom a;
    attn_geometry(g, n, &a);
    size_t bytes = (size_t)kiln_threadpool_size(x->pool) * (size_t)a.m * (size_t)a.n * sizeof(float);
    s->work = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!s->work) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for attention scores (%zu bytes)", bytes);
  } else if (s->kind == CPU_STEP_CONV) {
    conv_geom c;
    KILN_TRY(conv_geometry(g, n, &c));
    if (conv_is_depthwise(&c) && dw_is_3x3(&c)) {
      int64_t ph, pw;
      dw_padded_dims(&c, &ph, &pw);
      size_t bytes = (size_t)kiln_threadpool_size(x->pool) * (size_t)(ph * pw) * sizeof(float);
      s->work = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
      if (!s->work) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for depthwise padding (%zu bytes)", bytes);
    }
    if (!conv_is_pointwise(&c) && !conv_is_depthwise(&c)) {
      s->scratch_bytes = (size_t)c.kdim * (size_t)c.osize * sizeof(float);
      if (s->scratch_bytes > x->scratch_bytes) x->scratch_bytes = s->scratch_bytes;
    }
  }
  return NULL;
}

kiln_status_t kiln_cpu_contract_run(struct kiln_executable *x, const cpu_step *s, void *const *ptr) {
  const kiln_graph *g = x->g;
  const kiln_node *n = s->node;
  float *out = ptr[s->out_value];
  epilogue_binding epi;
  bool has_epi = bind_epilogue(x, s, ptr, &epi);
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
                              NULL, 0, has_epi ? epi.fn : NULL, &epi.ctx};
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
    int bias_axis = 0;
    float gemm_beta = 0.0f;
    const float *bias = NULL;
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
                            s->packed_b, gemm_beta, out, nn, bias, bias_axis, has_epi ? epi.fn : NULL, &epi.ctx};
    kiln_sgemm(x->pool, &args);
    return NULL;
  }
  if (s->kind == CPU_STEP_MAXPOOL) {
    pool_geom p;
    pool_geometry(g, n, &p);
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
  /* Conv, group 1 or grouped: per image and group, W_g[Co/g, K] x col[K, HW]. */
  conv_geom c;
  KILN_TRY(conv_geometry(g, n, &c));
  const float *xin = ptr[n->inputs[0]], *w = ptr[n->inputs[1]];
  const float *bias = n->n_inputs > 2 && n->inputs[2] >= 0 ? ptr[n->inputs[2]] : NULL;
  if (conv_is_depthwise(&c)) {
    dw_ctx d = {&c, xin, w, bias, out, has_epi ? &epi : NULL, s->work};
    kiln_parallel_for(x->pool, c.n * c.co, 1, s->work ? dw3x3_planes : dw_planes, &d);
    return NULL;
  }
  int64_t in_plane = 1;
  for (int i = 0; i < c.nsp; i++) in_plane *= c.in_sp[i];
  int64_t cig = c.ci / c.group, cog = c.co / c.group;
  for (int64_t img = 0; img < c.n; img++)
    for (int64_t gi = 0; gi < c.group; gi++) {
      const float *xg = xin + (img * c.ci + gi * cig) * in_plane;
      const float *col = xg;
      if (s->scratch_bytes) {
        im2col_ctx ic = {&c, xg, x->scratch};
        kiln_parallel_for(x->pool, c.kdim, 1, im2col_rows, &ic);
        col = x->scratch;
      }
      epi.ctx.base = (img * c.co + gi * cog) * c.osize;
      epi.ctx.row = c.osize;
      kiln_sgemm_args args = {false, false, cog, c.osize, c.kdim, 1.0f, w + gi * cog * c.kdim, c.kdim, col, c.osize,
                              NULL, 0.0f, out + (img * c.co + gi * cog) * c.osize, c.osize,
                              bias ? bias + gi * cog : NULL, bias ? 1 : 0, has_epi ? epi.fn : NULL, &epi.ctx};
      kiln_sgemm(x->pool, &args);
    }
  return NULL;
}
