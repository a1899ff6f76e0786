/* Tensorization onto the runtime's contraction routines: a contraction
 * nest whose operands are strided matrices becomes one GEMM call per batch
 * index (loopnest.h, kiln_gemm_call), a tagged convolution one conv call
 * (kiln_conv_call). */
#include <math.h>

#include "codegen/loopnest.h"

/* The one stride of a run of loops (vars, extents; row-major, outermost
 * first) in `a` when their flattened index i addresses `stride * i`; -1
 * when the coefficients are not of that form. Extent-1 loops do not count. */
static int64_t run_stride(const te_affine *a, const int *vars, const int64_t *extents, int n) {
  int64_t stride = -1, inner = 1;
  for (int i = n - 1; i >= 0; i--) {
    if (extents[i] != 1) {
      int64_t c = te_affine_coef(a, vars[i]), want;
      if (stride < 0) {
        if (c < 0 || c % inner) return -1;
        stride = c / inner;
      } else if (__builtin_mul_overflow(stride, inner, &want) || c != want) {
        return -1;
      }
    }
    if (__builtin_mul_overflow(inner, extents[i], &inner)) return -1;
  }
  return stride < 0 ? 0 : stride;
}

/* Every variable of a is one of `vars`. */
static bool only_vars(const te_affine *a, const int *vars, int n) {
  for (int i = 0; i < a->n; i++) {
    bool found = false;
    for (int j = 0; j < n && !found; j++) found = vars[j] == a->var[i];
    if (!found && a->coef[i]) return false;
  }
  return true;
}

/* A factor as a matrix: a direct f32 load at an affine index whose rows
 * (the M or N run) and columns (the K run) each have one stride, one of
 * them 1. *k_contiguous: the K run is the one of stride 1 (the matrix is
 * stored rows x K; A untransposed, B transposed); *ld: the other stride. */
static bool is_8bit(kiln_dtype d) { return d == KILN_DTYPE_U8 || d == KILN_DTYPE_I8; }

static bool as_matrix(const te_builder *b, const kiln_loop_nest *nest, const te_expr *f, const int *loops, int n_loops,
                      const kiln_contraction_tiles *t, te_affine *a, bool *k_contiguous, int64_t *ld, int64_t rows) {
  if (f->op != TE_LOAD || f->buf == nest->out_buf) return false;
  kiln_dtype stored = te_get_buffer(b, f->buf)->dtype;
  if (f->dtype != stored || (stored != KILN_DTYPE_F32 && !is_8bit(stored))) return false;
  if (!te_affine_of(f->a, a) || a->c0 < 0) return false;
  int vars[3 * KILN_MAX_RANK], rv[KILN_MAX_RANK], kv[KILN_MAX_RANK], n = 0;
  int64_t re[KILN_MAX_RANK], ke[KILN_MAX_RANK];
  for (int i = 0; i < n_loops; i++) {
    vars[n++] = rv[i] = nest->vars[loops[i]];
    re[i] = nest->extents[loops[i]];
  }
  for (int i = 0; i < t->n_red; i++) {
    vars[n++] = kv[i] = t->red[i]->var;
    ke[i] = t->red[i]->extent;
  }
  for (int i = 0; i < t->n_batch; i++) vars[n++] = nest->vars[t->batch_loops[i]];
  if (!only_vars(a, vars, n)) return false;
  int64_t sr = run_stride(a, rv, re, n_loops), sk = run_stride(a, kv, ke, t->n_red);
  if (sr < 0 || sk < 0) return false;
  /* A run of one element has any stride: take the one the layout needs. */
  if (rows == 1) sr = t->k;
  if (t->k == 1) sk = rows;
  if (sk == 1 && sr >= t->k) {
    *k_contiguous = true;
    *ld = sr;
  } else if (sr == 1 && sk >= rows) {
    *k_contiguous = false;
    *ld = sk;
  } else {
    return false;
  }
  return true;
}

/* An integer factor int32(x) - zero point (MatMulInteger's): x's 8-bit
 * load, and the zero point, a constant or an 8-bit load at a fixed
 * element (*zp_buf; -1 for a constant, in *zp). */
static bool int_factor(const te_builder *b, const kiln_loop_nest *nest, const te_expr *f, const te_expr **load,
                       int *zp_buf, bool *zp_signed, int64_t *zp) {
  *zp_buf = -1;
  *zp = 0;
  *zp_signed = false;
  if (f->op == TE_SUB && f->dtype == KILN_DTYPE_I32) {
    const te_expr *z = f->b;
    te_affine za;
    if (z->op == TE_CONST) {
      *zp = z->i;
    } else if (z->op == TE_CAST && z->a->op == TE_LOAD && is_8bit(z->a->dtype) && z->a->buf != nest->out_buf &&
               te_get_buffer(b, z->a->buf)->dtype == z->a->dtype && te_affine_of(z->a->a, &za) &&
               only_vars(&za, NULL, 0) && za.c0 >= 0) {
      *zp_buf = z->a->buf;
      *zp_signed = z->a->dtype == KILN_DTYPE_I8;
      *zp = za.c0;
    } else {
      return false;
    }
    f = f->a;
  } else if (f->op == TE_ADD && f->dtype == KILN_DTYPE_I32 && f->b->op == TE_CONST) {
    *zp = -f->b->i;
    f = f->a;
  }
  if (*zp_buf < 0 && (*zp < -255 || *zp > 255)) return false; /* the packed int16 pairs' range */
  if (f->op != TE_CAST || f->dtype != KILN_DTYPE_I32 || f->a->op != TE_LOAD || !is_8bit(f->a->dtype)) return false;
  *load = f->a;
  return true;
}

static void reverse(int *v, int n) {
  for (int i = 0; i < n / 2; i++) {
    int x = v[i];
    v[i] = v[n - 1 - i];
    v[n - 1 - i] = x;
  }
}

void kiln_schedule_gemm(const te_builder *b, kiln_loop_nest *nest, bool any_size) {
  kiln_contraction_tiles t;
  if (nest->tiles.n_red || nest->rows.threads || nest->conv.ok) return;
  bool integer = false;
  if (!kiln_contraction_match(nest, &t)) {
    if (!kiln_contraction_match_i32(nest, &t)) return;
    integer = true;
  }
  kiln_dtype out = te_get_buffer(b, nest->out_buf)->dtype;
  if (nest->value->dtype != out || !(out == KILN_DTYPE_F32 || (integer && out == KILN_DTYPE_I32))) return;
  /* The output is batch x M x N, row-major: N loops innermost, M loops
   * before them, and every loop outside those (whichever operands read
   * it: a loop only A reads is a batch loop whose B stride is 0) a GEMM
   * of its own. Extent-1 loops go anywhere (as batch loops). */
  kiln_contraction_tiles runs = t;
  runs.n_m = runs.n_n = runs.n_batch = 0;
  runs.m = runs.n = runs.batch = 1;
  int phase = 2;
  for (int l = nest->rank - 1; l >= 0; l--) {
    int kind = 0;
    for (int i = 0; i < t.n_m; i++) kind = t.m_loops[i] == l ? 1 : kind;
    for (int i = 0; i < t.n_n; i++) kind = t.n_loops[i] == l ? 2 : kind;
    if (nest->extents[l] == 1) kind = -1;
    else if (kind != phase) phase = phase == 2 && kind == 1 ? 1 : 0;
    if (kind == phase && phase == 2) {
      runs.n_loops[runs.n_n++] = l;
      runs.n *= nest->extents[l];
    } else if (kind == phase && phase == 1) {
      runs.m_loops[runs.n_m++] = l;
      runs.m *= nest->extents[l];
    } else {
      runs.batch_loops[runs.n_batch++] = l;
      runs.batch *= nest->extents[l];
    }
  }
  /* Collected innermost first: put each list in nest order. */
  reverse(runs.m_loops, runs.n_m);
  reverse(runs.n_loops, runs.n_n);
  reverse(runs.batch_loops, runs.n_batch);
  t = runs;
  /* Worth a call: below this the generated loops run as fast as packing;
   * a product by a constant B (packed once) is worth it from one row on
   * (a classifier's GEMV: MobileNetV2's 1280 x 1000 ran 1.17 ms as loops,
   * 0.16 through the packed SGEMM). */
  kiln_gemm_call g = {.a_zp_buf = -1, .b_zp_buf = -1};
  const te_expr *la = t.a, *lb = t.b;
  if (integer) {
    if (!int_factor(b, nest, t.a, &la, &g.a_zp_buf, &g.a_zp_signed, &g.a_zp) ||
        !int_factor(b, nest, t.b, &lb, &g.b_zp_buf, &g.b_zp_signed, &g.b_zp))
      return;
    g.integer = true;
    g.a_signed = la->dtype == KILN_DTYPE_I8;
    g.b_signed = lb->dtype == KILN_DTYPE_I8;
  } else if (la->dtype != KILN_DTYPE_F32 || lb->dtype != KILN_DTYPE_F32) {
    return;
  }
  bool b_packed_once = lb->op == TE_LOAD && te_get_buffer(b, lb->buf)->constant;
  /* A few rows against a large run-time B (attention's P x V in a decoder
   * step: 1 x 2049 against 2049 x 128) go to the routine too: its small-M
   * path streams B's rows unpacked, where the loops read B down its columns. */
  bool few_rows_big_b = t.m < 4 && (double)t.n * (double)t.k >= 65536.0;
  /* Its mirror, one column against a large run-time A (attention's scores
   * in a decoder step, K x q^T: 2049 x 128 against 128 x 1), is the same
   * call transposed: C^T = q K^T, one row of dot products over A's rows
   * where they lie (an output of one column is laid out as its transpose);
   * the loops had read A at 10 GB/s, the routine's dot rows at 13. */
  bool a_runtime = la->op == TE_LOAD && !te_get_buffer(b, la->buf)->constant;
  bool one_col_big_a = !integer && t.n == 1 && t.m >= 4 && a_runtime && (double)t.m * (double)t.k >= 65536.0;
  bool small = (t.m < 4 && !b_packed_once && !few_rows_big_b) || (t.n < 4 && !one_col_big_a) || t.k < 4 ||
               (double)t.m * (double)t.n * (double)t.k < 8192.0;
  if (small && !any_size) return;
  te_affine fa, fb;
  bool a_k_contiguous, b_k_contiguous;
  if (!as_matrix(b, nest, la, t.m_loops, t.n_m, &t, &fa, &a_k_contiguous, &g.lda, t.m) ||
      !as_matrix(b, nest, lb, t.n_loops, t.n_n, &t, &fb, &b_k_contiguous, &g.ldb, t.n))
    return;
  g.trans_a = !a_k_contiguous; /* A is M x K */
  g.trans_b = b_k_contiguous;  /* B is K x N */
  g.sum = t.red[0];
  g.a_buf = la->buf;
  g.b_buf = lb->buf;
  g.m = t.m;
  g.n = t.n;
  g.k = t.k;
  g.batch = t.batch;
  g.a_off = fa.c0;
  g.b_off = fb.c0;
  g.n_m = t.n_m;
  g.n_n = t.n_n;
  g.n_batch = t.n_batch;
  memcpy(g.m_loops, t.m_loops, sizeof g.m_loops);
  memcpy(g.n_loops, t.n_loops, sizeof g.n_loops);
  memcpy(g.batch_loops, t.batch_loops, sizeof g.batch_loops);
  for (int i = 0; i < t.n_batch; i++) {
    int v = nest->vars[t.batch_loops[i]];
    g.a_stride[i] = te_affine_coef(&fa, v);
    g.b_stride[i] = te_affine_coef(&fb, v);
    if (g.a_stride[i] < 0 || g.b_stride[i] < 0) return;
  }
  if (one_col_big_a) { /* C^T (1 x M) = B^T (1 x K) A^T (K x M): the operands, their runs and layouts swap */
    kiln_gemm_call w = g;
    w.a_buf = g.b_buf, w.b_buf = g.a_buf;
    w.a_off = g.b_off, w.b_off = g.a_off;
    w.lda = g.ldb, w.ldb = g.lda;
    w.trans_a = !g.trans_b; /* B^T stored K-contiguous when B was not */
    w.trans_b = !g.trans_a; /* A^T as K x M: K-contiguous rows of A */
    w.m = g.n, w.n = g.m;
    w.n_m = g.n_n, w.n_n = g.n_m;
    memcpy(w.m_loops, g.n_loops, sizeof w.m_loops);
    memcpy(w.n_loops, g.m_loops, sizeof w.n_loops);
    memcpy(w.a_stride, g.b_stride, sizeof w.a_stride);
    memcpy(w.b_stride, g.a_stride, sizeof w.b_stride);
    g = w;
  }
  g.ok = true;
  nest->gemm = g;
}

/* Whether e reads a reduction other than `allowed` (whose inside is not
 * looked at) or loads from buffer `buf`. */
static bool reads_other(const te_expr *e, const te_expr *allowed, int buf) {
  if (!e || e == allowed) return false;
  if (e->op == TE_REDUCE || (e->op == TE_LOAD && e->buf == buf)) return true;
  return reads_other(e->a, allowed, buf) || reads_other(e->b, allowed, buf) || reads_other(e->c, allowed, buf);
}

/* The tagged convolution the element is f of, or NULL. */
static const te_conv_tag *find_conv(const te_builder *b, const te_expr *e) {
  if (!e) return NULL;
  if (e->op == TE_REDUCE) return te_conv_tag_of(b, e);
  const te_conv_tag *t = find_conv(b, e->a);
  if (!t) t = find_conv(b, e->b);
  if (!t) t = find_conv(b, e->c);
  return t;
}

/* Whether `index` is the row-major flat index of the nest's output
 * (extent-1 loops read as 0). */
static bool is_output_index(const kiln_loop_nest *nest, const te_expr *index) {
  te_affine a;
  return te_affine_of(index, &a) && !a.c0 && only_vars(&a, nest->vars, nest->rank) &&
         run_stride(&a, nest->vars, nest->extents, nest->rank) == 1;
}

/* The terms of a sum of f32 adds into terms[] (at most 3); false past that. */
static bool add_terms(const te_expr *e, const te_expr **terms, int *n) {
  if (e->op == TE_ADD && e->dtype == KILN_DTYPE_F32) return add_terms(e->a, terms, n) && add_terms(e->b, terms, n);
  if (*n == 3) return false;
  terms[(*n)++] = e;
  return true;
}

/* Fills c's native epilogue when the element is clip?(sum + bias? + add?). */
static void native_epilogue(const te_builder *b, const kiln_loop_nest *nest, kiln_conv_call *c) {
  const te_conv_tag *t = c->tag;
  const te_expr *e = nest->value;
  float lo = -INFINITY, hi = INFINITY;
  bool clip = false;
  if (e->op == TE_MIN && e->b->op == TE_CONST && e->b->dtype == KILN_DTYPE_F32) {
    hi = (float)e->b->f;
    e = e->a;
    clip = true;
  }
  if (e->op == TE_MAX && e->b->op == TE_CONST && e->b->dtype == KILN_DTYPE_F32) {
    lo = (float)e->b->f;
    e = e->a;
    clip = true;
  }
  const te_expr *terms[3];
  int n = 0;
  if (!add_terms(e, terms, &n)) return;
  int bias = -1, add = -1;
  bool sum = false;
  for (int i = 0; i < n; i++) {
    const te_expr *x = terms[i];
    if (x == t->reduce && !sum) {
      sum = true;
    } else if (x->op == TE_LOAD && x->dtype == KILN_DTYPE_F32 && x->buf != nest->out_buf && bias < 0 &&
               x->a == t->idx[1] && te_get_buffer(b, x->buf)->dtype == KILN_DTYPE_F32) {
      bias = x->buf; /* read at the output channel */
    } else if (x->op == TE_LOAD && x->dtype == KILN_DTYPE_F32 && x->buf != nest->out_buf && add < 0 &&
               te_get_buffer(b, x->buf)->dtype == KILN_DTYPE_F32 && is_output_index(nest, x->a)) {
      add = x->buf;
    } else {
      return;
    }
  }
  if (!sum) return;
  c->native = true;
  c->bias_buf = bias;
  c->add_buf = add;
  c->clip = clip;
  c->lo = lo;
  c->hi = hi;
}

/* Whether the nest's loops walk the index tag t was built for, in order
 * (an axis of one element reads index 0), or with its first two axes
 * swapped. */
static bool walks_conv_output(const kiln_loop_nest *nest, const te_conv_tag *t, bool swapped) {
  int64_t want[2 + 3] = {t->n, t->co};
  for (int i = 0; i < t->nsp; i++) want[2 + i] = t->out[i];
  for (int l = 0; l < nest->rank; l++) {
    int tl = swapped && l < 2 ? 1 - l : l; /* the tag's axis this loop walks */
    const te_expr *i = t->idx[tl];
    bool own = i->op == TE_VAR ? i->var == nest->vars[l] : want[tl] == 1 && i->op == TE_CONST && i->i == 0;
    if (nest->extents[l] != want[tl] || !own) return false;
  }
  return true;
}

void kiln_schedule_conv(const te_builder *b, kiln_loop_nest *nest) {
  if (nest->tiles.n_red || nest->rows.threads || nest->gemm.ok) return;
  kiln_dtype out = te_get_buffer(b, nest->out_buf)->dtype;
  const te_conv_tag *t = find_conv(b, nest->value);
  if (!t || nest->value->dtype != out || !(out == KILN_DTYPE_F32 || t->integer)) return;
  if (nest->rank != 2 + t->nsp || reads_other(nest->value, t->reduce, nest->out_buf)) return;
  if (t->x_buf == nest->out_buf || t->w_buf == nest->out_buf || t->x_zp_buf == nest->out_buf ||
      t->w_zp_buf == nest->out_buf)
    return;
  /* ConvInteger: 8-bit operands and zero points (kiln_rt.conv's integer form). */
  if (t->integer) {
    int bufs[4] = {t->x_buf, t->w_buf, t->x_zp_buf, t->w_zp_buf};
    for (int i = 0; i < 4; i++)
      if (bufs[i] >= 0 && !is_8bit(te_get_buffer(b, bufs[i])->dtype)) return;
    if (t->transposed || (t->w_zp_count != 1 && t->w_zp_count != t->co)) return;
    /* Not 4 bytes an element (a QuantizeLinear after the sum): the sums go to scratch, f stores the output. */
    if (kiln_dtype_size(out) != 4 && nest->value == t->reduce) return;
  }
  /* Built for this nest's output index, in order: then the nest's
   * row-major output is the convolution's NCHW output. Or, for the plain
   * sum of an f32 Conv of group 1, in the order [co, n, spatial...] (a
   * Transpose swapping its first two axes fused after it: the runtime
   * writes that layout, y_cn). */
  bool y_cn = !walks_conv_output(nest, t, false);
  if (y_cn && (nest->value != t->reduce || t->integer || t->transposed || t->group != 1 ||
               !walks_conv_output(nest, t, true)))
    return;
  kiln_conv_call c = {.ok = true, .tag = t, .w_constant = te_get_buffer(b, t->w_buf)->constant, .bias_buf = -1,
                      .add_buf = -1, .y_cn = y_cn};
  if (!t->integer && !y_cn) native_epilogue(b, nest, &c);
  nest->conv = c;
}

/* The tagged pool the element is f of, or NULL. */
static const te_pool_tag *find_pool(const te_builder *b, const te_expr *e) {
  if (!e) return NULL;
  const te_pool_tag *t = te_pool_tag_of(b, e);
  if (t) return t;
  if (e->op == TE_REDUCE) return NULL; /* a reduction's body is per window element, not per output */
  t = find_pool(b, e->a);
  if (!t) t = find_pool(b, e->b);
  if (!t) t = find_pool(b, e->c);
  return t;
}

void kiln_schedule_pool(const te_builder *b, kiln_loop_nest *nest) {
  if (nest->tiles.n_red || nest->rows.threads || nest->gemm.ok || nest->conv.ok) return;
  const te_pool_tag *t = find_pool(b, nest->value);
  /* The routine writes f32 pools into the output and f runs over them in
   * place; an output of another dtype gets them in the routine's scratch
   * (pool.scratch), f storing the output. */
  if (!t) return;
  bool scratch = te_get_buffer(b, nest->out_buf)->dtype != KILN_DTYPE_F32 || nest->value->dtype != KILN_DTYPE_F32;
  if (scratch && nest->value == t->value) return; /* no epilogue to store it */
  if (te_get_buffer(b, t->x_buf)->dtype != KILN_DTYPE_F32 || t->x_buf == nest->out_buf) return;
  if (nest->rank != 2 + t->nsp || reads_other(nest->value, t->value, nest->out_buf)) return;
  int64_t want[2 + 3] = {t->n, t->c};
  for (int i = 0; i < t->nsp; i++) want[2 + i] = t->out[i];
  for (int l = 0; l < nest->rank; l++) {
    const te_expr *i = t->idx[l];
    bool own = i->op == TE_VAR ? i->var == nest->vars[l] : want[l] == 1 && i->op == TE_CONST && i->i == 0;
    if (nest->extents[l] != want[l] || !own) return;
  }
  nest->pool = (kiln_pool_call){.ok = true, .tag = t, .scratch = scratch};
}

/* The tagged resampling the element is f of, or NULL. */
static const te_resample_tag *find_resample(const te_builder *b, const te_expr *e) {
  if (!e) return NULL;
  const te_resample_tag *t = te_resample_tag_of(b, e);
  if (t) return t;
  if (e->op == TE_REDUCE) return NULL;
  t = find_resample(b, e->a);
  if (!t) t = find_resample(b, e->b);
  if (!t) t = find_resample(b, e->c);
  return t;
}

void kiln_schedule_resample(const te_builder *b, kiln_loop_nest *nest) {
  if (nest->tiles.n_red || nest->rows.threads || nest->gemm.ok || nest->conv.ok || nest->pool.ok) return;
  const te_resample_tag *t = find_resample(b, nest->value);
  if (!t || te_get_buffer(b, nest->out_buf)->dtype != KILN_DTYPE_F32 || nest->value->dtype != KILN_DTYPE_F32) return;
  if (te_get_buffer(b, t->x_buf)->dtype != KILN_DTYPE_F32 || t->x_buf == nest->out_buf) return;
  for (int k = 0; k < t->n_axes; k++)
    if (t->index_buf[k] == nest->out_buf || t->weight_buf[k] == nest->out_buf ||
        te_get_buffer(b, t->index_buf[k])->dtype != KILN_DTYPE_I32 ||
        (t->weight_buf[k] >= 0 && te_get_buffer(b, t->weight_buf[k])->dtype != KILN_DTYPE_F32))
      return;
  if (nest->rank != t->rank || reads_other(nest->value, t->value, nest->out_buf)) return;
  /* The routine's planes are the first two dims (N, C: what Resize leaves
   * alone), its tiles one plane each, as the C epilogue expects. */
  if (t->rank < 3 || t->rank > 2 + 6) return;
  for (int k = 0; k < t->n_axes; k++)
    if (t->axis[k] < 2) return;
  for (int l = 0; l < nest->rank; l++) {
    const te_expr *i = t->idx[l];
    bool own = i->op == TE_VAR ? i->var == nest->vars[l] : t->out[l] == 1 && i->op == TE_CONST && i->i == 0;
    if (nest->extents[l] != t->out[l] || !own) return;
  }
  nest->resample = (kiln_resample_call){.ok = true, .tag = t};
}
