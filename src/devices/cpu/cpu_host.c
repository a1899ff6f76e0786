/* cpu_host.c — host steps the cpu runs with its own routines.
 *
 * A node whose shapes are only known when it runs (downstream of NonZero,
 * TopK, a RoiAlign over the proposals a detector kept) is a host step of
 * the plan, which ref's kernel runs: an oracle written for clarity, not
 * speed (a detector's box head, a [rois, 12544] x [12544, 1024] Gemm, took
 * two seconds there). The cpu runs the heavy ones on its own routines
 * instead, with the shapes of the run: Gemm and MatMul on the SGEMM,
 * Conv and ConvTranspose through the routine compiled kernels call
 * (kiln_rt.conv, planned for the shapes at hand),
 * RoiAlign with its bilinear taps computed once per roi for every channel,
 * Resize and Upsample by the op's tables and the separable resample routine,
 * ScatterElements (no reduction), Expand and Concat as copies, TopK over
 * f32 by a bounded heap (ref sorts every row whole), NonMaxSuppression
 * with its IoU tests over blocks of the kept boxes (the same greedy
 * selection, bit for bit). Each writes every element of its outputs,
 * which are allocated uninitialized. Anything else, or a case these do
 * not cover (other dtypes, strings, broadcasts, malformed inputs: ref's
 * kernel words the error), is left to ref.
 */
#include "devices/cpu/cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/gemm/gemm.h"
#include "ops/op.h"
#include "ops/roi_align.h"
#include "ops/window.h"

/* B packed once for the plan when it is a constant of the plan's graph
 * (a detector's box head: fc6's 12544 x 1024 weights were packed on every
 * run), shared through the table the compiled launches use (cpu_rt.c);
 * `sub` (ldb apart rows) may be a block inside the constant (one
 * direction of a recurrent weight). *slot holds this call's reference
 * (release it after the GEMM). NULL: pack per call (not a constant, or no
 * memory). */
const void *kiln_cpu_host_packed_b(cpu_exec *x, const kiln_node *n, int input, const kiln_tensor *b, const float *sub,
                                   bool trans_b, int64_t k, int64_t nn, int64_t ldb, kiln_rt_state **slot) {
  *slot = NULL;
  const kiln_graph *g = x->g;
  if (!g || n < g->nodes || n >= g->nodes + g->n_nodes || input >= n->n_inputs || n->inputs[input] < 0) return NULL;
  const kiln_tensor *cst = g->values[n->inputs[input]].constant;
  if (!cst || cst->data != b->data || sub < (const float *)b->data || sub >= (const float *)b->data + b->numel)
    return NULL;
  kiln_rt_sgemm_args a = {.trans_b = trans_b, .k = k, .n = nn, .b = sub, .ldb = ldb};
  const void *pb = x->rt.sgemm_packed_b(&x->rt, &a, slot);
  if (!pb) { /* out of memory: the unpacked path needs none of it */
    kiln_status_free(x->rt_error);
    x->rt_error = NULL;
  }
  return pb;
}

static const void *host_packed_b(cpu_exec *x, const kiln_node *n, int input, const kiln_tensor *b, bool trans_b,
                                 int64_t k, int64_t nn, kiln_rt_state **slot) {
  return kiln_cpu_host_packed_b(x, n, input, b, b->data, trans_b, k, nn, b->dims[1], slot);
}

/* Gemm: Y = alpha * op(A) op(B) + beta * C, A and B f32 matrices, C absent
 * or of shape [N], [1, N], [M, 1], [M, N] or one element. */
static kiln_status_t host_gemm(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *a = kiln_kernel_input(ctx, 0), *b = kiln_kernel_input(ctx, 1), *c = kiln_kernel_input(ctx, 2);
  if (!a || !b || a->dtype != KILN_DTYPE_F32 || b->dtype != KILN_DTYPE_F32 || a->rank != 2 || b->rank != 2) return NULL;
  if (c && c->dtype != KILN_DTYPE_F32) return NULL;
  bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
  float alpha = kiln_attr_float(n, "alpha", 1.0f), beta = kiln_attr_float(n, "beta", 1.0f);
  int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  int64_t kb = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
  if (k != kb) return NULL;
  /* C's broadcast: a bias per column, per row, one value, or a whole matrix. */
  int bias_axis = KILN_GEMM_BIAS_NONE;
  bool full_c = false;
  if (c && beta != 0.0f) {
    int64_t cr = c->rank >= 2 ? c->dims[c->rank - 2] : 1, cc = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    if (c->rank > 2 || (cr != 1 && cr != m) || (cc != 1 && cc != nn)) return NULL;
    if (cr == m && cc == nn && m * nn > 1) full_c = true;
    else if (cc == nn && nn > 1) bias_axis = KILN_GEMM_BIAS_COL;
    else if (cr == m && m > 1) bias_axis = KILN_GEMM_BIAS_ROW;
    else if (c->numel != 1) return NULL;
  }
  kiln_tensor *y;
  int64_t dims[2] = {m, nn};
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, 2, dims, &y));
  *handled = true;
  float *yd = y->data;
  float *bias = NULL;
  if (c && beta != 0.0f && !full_c) {
    /* beta * C as the bias the micro-kernel adds when it stores (one value: a column bias of it). */
    int64_t len = bias_axis == KILN_GEMM_BIAS_ROW ? m : nn;
    bias = malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
    if (!bias) return KILN_OOM();
    const float *cd = c->data;
    for (int64_t i = 0; i < len; i++) bias[i] = beta * (c->numel == 1 ? cd[0] : cd[i]);
    if (bias_axis == KILN_GEMM_BIAS_NONE) bias_axis = KILN_GEMM_BIAS_COL;
  }
  if (full_c) memcpy(yd, c->data, (size_t)(m * nn) * sizeof(float));
  if (m > 0 && nn > 0) {
    kiln_rt_state *slot;
    const void *pb = host_packed_b(x, n, 1, b, tb, k, nn, &slot);
    kiln_sgemm_args args = {ta, tb, m, nn, k, alpha, a->data, a->dims[1], pb ? NULL : b->data, b->dims[1], pb,
                            full_c ? beta : 0.0f, yd, nn, bias, bias_axis, NULL, NULL};
    kiln_sgemm(x->pool, &args);
    if (slot) slot->destroy(slot);
  }
  free(bias);
  return NULL;
}

/* MatMul of f32 A [..., M, K] and B [K, N] (A's batch folded into M), or of
 * A and B with the same batch dims. */
static kiln_status_t host_matmul(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled) {
  kiln_tensor *a = kiln_kernel_input(ctx, 0), *b = kiln_kernel_input(ctx, 1);
  if (!a || !b || a->dtype != KILN_DTYPE_F32 || b->dtype != KILN_DTYPE_F32 || a->rank < 2 || b->rank < 2) return NULL;
  int64_t k = a->dims[a->rank - 1], nn = b->dims[b->rank - 1];
  if (b->dims[b->rank - 2] != k) return NULL;
  bool same_batch = b->rank == a->rank;
  for (int i = 0; same_batch && i < a->rank - 2; i++) same_batch = a->dims[i] == b->dims[i];
  if (b->rank != 2 && !same_batch) return NULL;
  int64_t dims[KILN_MAX_RANK], rows = 1;
  for (int i = 0; i < a->rank - 1; i++) {
    dims[i] = a->dims[i];
    rows *= a->dims[i];
  }
  dims[a->rank - 1] = nn;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, a->rank, dims, &y));
  *handled = true;
  int64_t m = a->dims[a->rank - 2], batches = b->rank == 2 ? 1 : rows / (m > 0 ? m : 1);
  if (b->rank == 2) m = rows;
  kiln_rt_state *slot = NULL;
  const void *pb = b->rank == 2 && m > 0 && nn > 0 ? host_packed_b(x, ctx->node, 1, b, false, k, nn, &slot) : NULL;
  for (int64_t i = 0; i < batches && m > 0 && nn > 0; i++) {
    kiln_sgemm_args args = {false, false, m, nn, k, 1.0f, (const float *)a->data + i * m * k, k,
                            pb ? NULL : (const float *)b->data + i * k * nn, nn, pb, 0.0f, (float *)y->data + i * m * nn,
                            nn, NULL, KILN_GEMM_BIAS_NONE, NULL, NULL};
    kiln_sgemm(x->pool, &args);
  }
  if (slot) slot->destroy(slot);
  return NULL;
}

/* ---- RoiAlign (f32) ------------------------------------------------------------------ */

/* One sample's taps (ops/roi_align.h, ref's rule), narrowed for the
 * channel loop: int32 positions, f32 weights. */
typedef struct roi_tap {
  int32_t pos[4];
  float w[4];
} roi_tap;

static void roi_tap_at(double y, double x, int64_t h, int64_t w, roi_tap *t) {
  kiln_roi_tap r;
  kiln_roi_bilinear(y, x, h, w, &r);
  for (int k = 0; k < 4; k++) {
    t->pos[k] = (int32_t)r.pos[k];
    t->w[k] = (float)r.w[k];
  }
}

typedef struct roi_job {
  const float *x, *rois;
  const int64_t *batch;
  float *y;
  int64_t c, h, w, oh, ow, sampling;
  double scale, offset;
  bool half_pixel, is_max;
  roi_tap **taps; /* per thread: a grown table */
  int64_t *cap;
  atomic_bool oom;
} roi_job;

/* The grid of samples per bin of roi r: gh x gw. */
static void roi_grid(const roi_job *j, const float *box, double *sh, double *sw, double *bin_h, double *bin_w,
                     int64_t *gh, int64_t *gw) {
  *sw = box[0] * j->scale - j->offset;
  *sh = box[1] * j->scale - j->offset;
  double rw = box[2] * j->scale - j->offset - *sw, rh = box[3] * j->scale - j->offset - *sh;
  if (!j->half_pixel) { /* legacy: malformed rois forced to 1x1 */
    if (rw < 1) rw = 1;
    if (rh < 1) rh = 1;
  }
  *bin_h = rh / (double)j->oh;
  *bin_w = rw / (double)j->ow;
  double gh_d = j->sampling > 0 ? (double)j->sampling : ceil(rh / (double)j->oh);
  double gw_d = j->sampling > 0 ? (double)j->sampling : ceil(rw / (double)j->ow);
  *gh = gh_d > 0 ? (int64_t)gh_d : 0;
  *gw = gw_d > 0 ? (int64_t)gw_d : 0;
}

static void roi_rows(void *vctx, int64_t begin, int64_t end, int thread) {
  roi_job *j = vctx;
  int64_t plane = j->h * j->w, bins = j->oh * j->ow;
  for (int64_t r = begin; r < end; r++) {
    double sh, sw, bin_h, bin_w;
    int64_t gh, gw;
    roi_grid(j, j->rois + r * 4, &sh, &sw, &bin_h, &bin_w, &gh, &gw);
    int64_t per_bin = gh * gw, need = bins * per_bin;
    if (need > j->cap[thread]) {
      roi_tap *t = realloc(j->taps[thread], (size_t)need * sizeof *t);
      if (!t) {
        atomic_store(&j->oom, true);
        return;
      }
      j->taps[thread] = t;
      j->cap[thread] = need;
    }
    roi_tap *taps = j->taps[thread];
    for (int64_t ph = 0; ph < j->oh; ph++)
      for (int64_t pw = 0; pw < j->ow; pw++)
        for (int64_t iy = 0; iy < gh; iy++) {
          double yy = sh + (double)ph * bin_h + ((double)iy + 0.5) * bin_h / (double)gh;
          for (int64_t ix = 0; ix < gw; ix++) {
            double xx = sw + (double)pw * bin_w + ((double)ix + 0.5) * bin_w / (double)gw;
            roi_tap_at(yy, xx, j->h, j->w, &taps[(ph * j->ow + pw) * per_bin + iy * gw + ix]);
          }
        }
    float inv = per_bin > 0 ? 1.0f / (float)per_bin : 1.0f;
    for (int64_t ch = 0; ch < j->c; ch++) {
      const float *xp = j->x + (j->batch[r] * j->c + ch) * plane;
      float *yp = j->y + (r * j->c + ch) * bins;
      for (int64_t b = 0; b < bins; b++) {
        const roi_tap *t = taps + b * per_bin;
        float acc = 0;
        for (int64_t s = 0; s < per_bin; s++) {
          float v0 = t[s].w[0] * xp[t[s].pos[0]], v1 = t[s].w[1] * xp[t[s].pos[1]];
          float v2 = t[s].w[2] * xp[t[s].pos[2]], v3 = t[s].w[3] * xp[t[s].pos[3]];
          if (j->is_max) {
            float m = fmaxf(fmaxf(fmaxf(v0, v1), v2), v3);
            acc = s == 0 ? m : fmaxf(acc, m);
          } else {
            acc += (v0 + v1) + (v2 + v3);
          }
        }
        yp[b] = j->is_max ? acc : acc * inv;
      }
    }
  }
}

static kiln_status_t host_roi_align(cpu_exec *x, kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *xt = kiln_kernel_input(ctx, 0), *rt = kiln_kernel_input(ctx, 1), *bt = kiln_kernel_input(ctx, 2);
  if (!xt || !rt || !bt || xt->dtype != KILN_DTYPE_F32 || rt->dtype != KILN_DTYPE_F32 || bt->dtype != KILN_DTYPE_I64 ||
      xt->rank != 4 || rt->rank != 2 || rt->dims[1] != 4 || bt->rank != 1 || bt->dims[0] != rt->dims[0])
    return NULL;
  const char *mode = kiln_attr_string(n, "mode", "avg");
  bool half_pixel = false;
  if (ctx->opset >= 16) {
    const char *ctm = kiln_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    if (!strcmp(ctm, "half_pixel")) half_pixel = true;
    else if (strcmp(ctm, "output_half_pixel")) return NULL;
  }
  if (strcmp(mode, "avg") && strcmp(mode, "max")) return NULL;
  roi_job j = {xt->data, rt->data, bt->data, NULL, xt->dims[1], xt->dims[2], xt->dims[3],
               kiln_attr_int(n, "output_height", 1), kiln_attr_int(n, "output_width", 1),
               kiln_attr_int(n, "sampling_ratio", 0), kiln_attr_float(n, "spatial_scale", 1.0f), half_pixel ? 0.5 : 0.0,
               half_pixel, !strcmp(mode, "max"), NULL, NULL, false};
  int64_t nr = rt->dims[0];
  if (j.oh <= 0 || j.ow <= 0 || j.sampling < 0 || j.sampling > 1 << 16 || j.h * j.w > INT32_MAX) return NULL;
  /* What ref rejects (its message names the input), and what it does with no pixels. */
  for (int64_t r = 0; r < nr; r++) {
    if (j.batch[r] < 0 || j.batch[r] >= xt->dims[0]) return NULL;
    for (int k = 0; k < 4; k++)
      if (!isfinite(j.rois[r * 4 + k])) return NULL;
    double sh, sw, bh, bw;
    int64_t gh, gw;
    roi_grid(&j, j.rois + r * 4, &sh, &sw, &bh, &bw, &gh, &gw);
    if (gh > 1 << 16 || gw > 1 << 16 || (double)gh * (double)gw > (double)(1 << 26)) return NULL;
  }
  if (j.h == 0 || j.w == 0) return NULL;
  int64_t dims[4] = {nr, j.c, j.oh, j.ow};
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, 4, dims, &y));
  *handled = true;
  if (y->numel == 0) return NULL;
  j.y = y->data;
  int threads = kiln_threadpool_size(x->pool);
  j.taps = calloc((size_t)threads, sizeof *j.taps);
  j.cap = calloc((size_t)threads, sizeof *j.cap);
  if (!j.taps || !j.cap) {
    free(j.taps);
    free(j.cap);
    return KILN_OOM();
  }
  kiln_parallel_for(x->pool, nr, 1, roi_rows, &j);
  for (int t = 0; t < threads; t++) free(j.taps[t]);
  free(j.taps);
  free(j.cap);
  return atomic_load(&j.oom) ? kiln_error(KILN_OUT_OF_MEMORY, "RoiAlign: out of memory for a roi's sampling taps")
                             : NULL;
}

/* ---- ScatterElements (no reduction) and Expand: copies ------------------------------- */

static kiln_status_t host_scatter_elements(kiln_kernel_ctx *ctx, bool *handled) {
  kiln_tensor *xt = kiln_kernel_input(ctx, 0), *it = kiln_kernel_input(ctx, 1), *ut = kiln_kernel_input(ctx, 2);
  /* Strings own their bytes: copying the pointers would share them (ref deep-copies). */
  if (!xt || !it || !ut || xt->dtype == KILN_DTYPE_STRING || ut->dtype != xt->dtype || it->dtype != KILN_DTYPE_I64 ||
      xt->rank < 1 ||
      it->rank != xt->rank || !kiln_shape_equal(ut->rank, ut->dims, it->rank, it->dims))
    return NULL;
  const char *red = kiln_attr_string(ctx->node, "reduction", "none");
  if (strcmp(red, "none")) return NULL;
  int rank = xt->rank;
  int64_t axis = kiln_attr_int(ctx->node, "axis", 0);
  if (axis < -rank || axis >= rank) return NULL;
  if (axis < 0) axis += rank;
  for (int d = 0; d < rank; d++)
    if (d != axis && it->dims[d] > xt->dims[d]) return NULL;
  /* Every index in range first: ref words the error for one that is not. */
  const int64_t *idx = it->data;
  int64_t ext = xt->dims[axis];
  for (int64_t i = 0; i < it->numel; i++)
    if (idx[i] < -ext || idx[i] >= ext) return NULL;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, xt->dtype, rank, xt->dims, &y));
  *handled = true;
  size_t es = kiln_dtype_size(xt->dtype);
  memcpy(y->data, xt->data, (size_t)xt->numel * es);
  int64_t stride[KILN_MAX_RANK], coord[KILN_MAX_RANK] = {0}, st = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = st;
    st *= xt->dims[d];
  }
  /* Row by row along the last dim, in order (a later duplicate index wins,
   * as in ref). A row whose indices are all equal lands on a contiguous
   * run of y, so it is one copy: a detector's multi-scale RoiAlign scatters
   * whole [256, 7, 7] blocks per box with an index expanded over them
   * (element by element: 20 ms for 12 MB). base: the offset of the row's
   * coordinate in y, carried from row to row. */
  int64_t base = 0, row = rank > 0 ? it->dims[rank - 1] : 1, rows = row ? it->numel / row : 0;
  const char *u = ut->data;
  char *yd = y->data;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t *ir = idx + r * row;
    const char *ur = u + (size_t)(r * row) * es;
    bool whole = axis != rank - 1;
    for (int64_t j = 1; j < row && whole; j++) whole = ir[j] == ir[0];
    if (whole) {
      int64_t v = ir[0] < 0 ? ir[0] + ext : ir[0];
      memcpy(yd + (size_t)(base + (v - coord[axis]) * stride[axis]) * es, ur, (size_t)row * es);
    } else {
      for (int64_t j = 0; j < row; j++) {
        int64_t v = ir[j] < 0 ? ir[j] + ext : ir[j];
        int64_t at = base + j + (axis == rank - 1 ? v - j : (v - coord[axis]) * stride[axis]);
        memcpy(yd + (size_t)at * es, ur + (size_t)j * es, es);
      }
    }
    for (int d = rank - 2; d >= 0; d--) { /* the next row's coordinate */
      if (++coord[d] < it->dims[d]) {
        base += stride[d];
        break;
      }
      base -= (coord[d] - 1) * stride[d];
      coord[d] = 0;
    }
  }
  return NULL;
}

static kiln_status_t host_expand(kiln_kernel_ctx *ctx, bool *handled) {
  kiln_tensor *xt = kiln_kernel_input(ctx, 0), *st = kiln_kernel_input(ctx, 1);
  if (!xt || !st || xt->dtype == KILN_DTYPE_STRING || st->dtype != KILN_DTYPE_I64 || st->rank != 1 ||
      st->numel > KILN_MAX_RANK || (xt->rank == 0 && st->numel == 0))
    return NULL;
  /* numpy broadcasting of x's shape with the requested one. */
  int rank = xt->rank > (int)st->numel ? xt->rank : (int)st->numel;
  int64_t dims[KILN_MAX_RANK], xd[KILN_MAX_RANK];
  const int64_t *want = st->data;
  for (int d = 0; d < rank; d++) {
    int xi = d - (rank - xt->rank), si = d - (rank - (int)st->numel);
    int64_t a = xi >= 0 ? xt->dims[xi] : 1, b = si >= 0 ? want[si] : 1;
    if (b < 0 || (a != b && a != 1 && b != 1)) return NULL;
    xd[d] = a;
    dims[d] = a == 1 ? b : a;
  }
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, xt->dtype, rank, dims, &y));
  *handled = true;
  if (y->numel == 0) return NULL;
  size_t es = kiln_dtype_size(xt->dtype);
  int64_t xs[KILN_MAX_RANK], s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    xs[d] = xd[d] == 1 ? 0 : s;
    s *= xd[d];
  }
  /* Rows of the innermost dim: a copy, or one element repeated; the row's
   * source carried by an odometer over the outer dims. */
  int64_t inner = dims[rank - 1], rows = y->numel / inner, coord[KILN_MAX_RANK] = {0}, src = 0;
  const char *x = xt->data;
  char *out = y->data;
  for (int64_t r = 0; r < rows; r++, out += (size_t)inner * es) {
    if (xs[rank - 1]) {
      memcpy(out, x + (size_t)src * es, (size_t)inner * es);
    } else {
      for (int64_t k = 0; k < inner; k++) memcpy(out + (size_t)k * es, x + (size_t)src * es, es);
    }
    for (int d = rank - 2; d >= 0; d--) {
      if (++coord[d] < dims[d]) {
        src += xs[d];
        break;
      }
      src -= (coord[d] - 1) * xs[d];
      coord[d] = 0;
    }
  }
  return NULL;
}

/* ---- NonMaxSuppression (f32, finite boxes and scores) ---------------------------------- */

typedef struct nms_cand {
  float score;
  int64_t index;
} nms_cand;

static int nms_cand_cmp(const void *pa, const void *pb) {
  const nms_cand *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1; /* higher score first, then lower index */
  return a->index < b->index ? -1 : a->index > b->index;
}

static float min_f(float a, float b) { return a < b ? a : b; }
static float max_f(float a, float b) { return a > b ? a : b; }

/* Kept boxes, a column per coordinate, and their areas. */
typedef struct nms_kept {
  float *x0, *y0, *x1, *y1, *area;
  int64_t n;
} nms_kept;

/* Whether a kept box overlaps (x0, y0, x1, y1) by more than thr: ref's
 * nms_suppresses (misc_vision.c) with the same operations in the same
 * order, over blocks of 16 kept boxes with no branch inside a block, so
 * it vectorizes. The inputs are finite, so the comparisons are fmaxf's
 * and fminf's results. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static bool nms_overlaps(const nms_kept *k, float x0, float y0, float x1, float y1, float thr) {
  float area = (x1 - x0) * (y1 - y0);
  if (area <= 0.0f) return false; /* ref: nothing suppresses an empty box */
  for (int64_t j0 = 0; j0 < k->n; j0 += 16) {
    int64_t n = k->n - j0 < 16 ? k->n - j0 : 16;
    int hit = 0;
    for (int64_t j = j0; j < j0 + n; j++) {
      float ix0 = max_f(k->x0[j], x0), iy0 = max_f(k->y0[j], y0);
      float ix1 = min_f(k->x1[j], x1), iy1 = min_f(k->y1[j], y1);
      float inter = max_f(ix1 - ix0, 0.0f) * max_f(iy1 - iy0, 0.0f);
      float uni = k->area[j] + area - inter;
      hit |= inter > 0.0f && k->area[j] > 0.0f && uni > 0.0f && inter / uni > thr;
    }
    if (hit) return true;
  }
  return false;
}

static kiln_status_t host_nms(kiln_kernel_ctx *ctx, bool *handled) {
  kiln_tensor *bt = kiln_kernel_input(ctx, 0), *st = kiln_kernel_input(ctx, 1);
  if (!bt || !st || bt->dtype != KILN_DTYPE_F32 || st->dtype != KILN_DTYPE_F32 || bt->rank != 3 || bt->dims[2] != 4 ||
      st->rank != 3 || st->dims[0] != bt->dims[0] || st->dims[2] != bt->dims[1])
    return NULL;
  /* The optional scalars: one number each (ref words anything else). */
  double v[3] = {0, 0, -INFINITY};
  bool have_score = false;
  for (int i = 2; i < 5; i++) {
    const kiln_tensor *t = kiln_kernel_input(ctx, i);
    if (!t || t->numel == 0) continue;
    if (t->numel != 1 || !(kiln_dtype_is_float(t->dtype) || kiln_dtype_is_int(t->dtype))) return NULL;
    v[i - 2] = kiln_load_f64(t->data, t->dtype, 0);
    have_score |= i == 4;
  }
  const kiln_tensor *mt = kiln_kernel_input(ctx, 2);
  int64_t nb = bt->dims[0], ns = bt->dims[1], nc = st->dims[1];
  int64_t max_out = mt && mt->numel == 1 ? kiln_load_i64(mt->data, mt->dtype, 0) : 0;
  if (max_out < 0) max_out = 0;
  if (max_out > ns) max_out = ns;
  if (!(v[1] >= 0 && v[1] <= 1)) return NULL;
  float thr = (float)v[1], score_thr = (float)v[2];
  bool center = kiln_attr_int(ctx->node, "center_point_box", 0) != 0;
  const float *bd = bt->data, *sd = st->data;
  for (int64_t i = 0; i < bt->numel; i++)
    if (!isfinite(bd[i])) return NULL;
  for (int64_t i = 0; i < st->numel; i++)
    if (isnan(sd[i])) return NULL;
  /* Every box's corners once (ref's nms_load_box), and room for the kept ones. */
  size_t n1 = (size_t)(ns > 0 ? ns : 1);
  float *corners = malloc(n1 * 4 * sizeof(float)), *cols = malloc(n1 * 5 * sizeof(float));
  nms_cand *cand = malloc(n1 * sizeof *cand);
  int64_t *rows = NULL, cap = 0, count = 0;
  kiln_status_t err = NULL;
  if (!corners || !cols || !cand) err = KILN_OOM();
  nms_kept kept = {cols, cols + n1, cols + 2 * n1, cols + 3 * n1, cols + 4 * n1, 0};
  for (int64_t b = 0; b < nb && max_out > 0 && !err; b++) {
    for (int64_t i = 0; i < ns; i++) {
      const float *q = bd + (b * ns + i) * 4;
      float *c = corners + i * 4; /* x0, y0, x1, y1 */
      if (center) {
        c[0] = q[0] - q[2] / 2.0f, c[2] = q[0] + q[2] / 2.0f;
        c[1] = q[1] - q[3] / 2.0f, c[3] = q[1] + q[3] / 2.0f;
      } else {
        c[1] = min_f(q[0], q[2]), c[3] = max_f(q[0], q[2]);
        c[0] = min_f(q[1], q[3]), c[2] = max_f(q[1], q[3]);
      }
    }
    for (int64_t cl = 0; cl < nc && !err; cl++) {
      int64_t nk = 0;
      for (int64_t i = 0; i < ns; i++) {
        float sc = sd[(b * nc + cl) * ns + i];
        if (have_score && !(sc > score_thr)) continue;
        cand[nk].score = sc;
        cand[nk++].index = i;
      }
      qsort(cand, (size_t)nk, sizeof *cand, nms_cand_cmp);
      kept.n = 0;
      for (int64_t k = 0; k < nk && kept.n < max_out; k++) {
        const float *c = corners + cand[k].index * 4;
        if (nms_overlaps(&kept, c[0], c[1], c[2], c[3], thr)) continue;
        kept.x0[kept.n] = c[0], kept.y0[kept.n] = c[1], kept.x1[kept.n] = c[2], kept.y1[kept.n] = c[3];
        kept.area[kept.n++] = (c[2] - c[0]) * (c[3] - c[1]);
        if (count == cap) {
          int64_t ncap = cap ? cap * 2 : 64;
          int64_t *nr = realloc(rows, (size_t)ncap * 3 * sizeof *nr);
          if (!nr) {
            err = KILN_OOM();
            break;
          }
          rows = nr;
          cap = ncap;
        }
        rows[count * 3] = b, rows[count * 3 + 1] = cl, rows[count * 3 + 2] = cand[k].index;
        count++;
      }
    }
  }
  if (!err) {
    int64_t dims[2] = {count, 3};
    kiln_tensor *y;
    err = kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_I64, 2, dims, &y);
    if (!err) {
      *handled = true;
      if (count) memcpy(y->data, rows, (size_t)count * 3 * sizeof *rows);
    }
  }
  free(rows);
  free(cand);
  free(cols);
  free(corners);
  return err;
}

/* ---- Conv and ConvTranspose (f32) --------------------------------------------------- */

static kiln_status_t host_conv(cpu_exec *x, kiln_kernel_ctx *ctx, bool transposed, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *xt = kiln_kernel_input(ctx, 0), *wt = kiln_kernel_input(ctx, 1), *bt = kiln_kernel_input(ctx, 2);
  if (!xt || !wt || xt->dtype != KILN_DTYPE_F32 || wt->dtype != KILN_DTYPE_F32 || xt->rank < 3 || xt->rank > 5 ||
      wt->rank != xt->rank || (bt && (bt->dtype != KILN_DTYPE_F32 || bt->rank != 1)))
    return NULL;
  /* ConvTranspose's output_shape asks for sizes; ref's rules, in one place (ops/window.h). */
  int nsp = xt->rank - 2;
  int64_t group = kiln_attr_int(n, "group", 1), ci = xt->dims[1];
  if (group < 1 || ci % group) return NULL;
  int64_t co = transposed ? wt->dims[1] * group : wt->dims[0];
  if ((transposed ? wt->dims[0] != ci : wt->dims[1] * group != ci) || co < 1 || (!transposed && co % group))
    return NULL;
  if (bt && bt->dims[0] != co) return NULL;
  kiln_window win;
  kiln_status_t st = transposed ? kiln_conv_transpose_window(n, nsp, xt->dims + 2, wt->dims + 2, &win)
                                : kiln_window_init(n, nsp, xt->dims + 2, wt->dims + 2, true, false, &win);
  if (st) { /* ref words the attribute's error */
    kiln_status_free(st);
    return NULL;
  }
  kiln_rt_conv_args a = {0};
  a.nsp = nsp;
  a.transposed = transposed;
  a.n = xt->dims[0], a.ci = ci, a.co = co, a.group = group;
  int64_t dims[5] = {xt->dims[0], co, 1, 1, 1};
  for (int i = 0; i < nsp; i++) {
    if (win.out[i] < 1 || win.kernel[i] < 1 || win.stride[i] < 1 || win.dilation[i] < 1) return NULL;
    a.in[i] = xt->dims[2 + i], a.out[i] = win.out[i], a.kernel[i] = win.kernel[i];
    a.stride[i] = win.stride[i], a.dilation[i] = win.dilation[i], a.pad_begin[i] = win.pad_begin[i];
    dims[2 + i] = win.out[i];
  }
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, xt->rank, dims, &y));
  *handled = true;
  if (y->numel == 0 || xt->numel == 0) return NULL;
  a.x = xt->data, a.w = wt->data, a.y = y->data, a.bias = bt ? bt->data : NULL;
  kiln_rt_state *slot = NULL;
  x->rt.conv(&x->rt, &a, &slot);
  if (slot) slot->destroy(slot);
  st = x->rt_error;
  x->rt_error = NULL;
  return st;
}

/* ---- Concat of run-time shapes: a copy per input and outer row --------------------------- */

static kiln_status_t host_concat(kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *first = n->n_inputs > 0 ? kiln_kernel_input(ctx, 0) : NULL;
  if (!first || first->dtype == KILN_DTYPE_STRING || first->rank < 1) return NULL;
  int rank = first->rank;
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (axis < -rank || axis >= rank) return NULL; /* ref words the error */
  if (axis < 0) axis += rank;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, first->dims, sizeof(int64_t) * (size_t)rank);
  dims[axis] = 0;
  for (int i = 0; i < n->n_inputs; i++) {
    kiln_tensor *t = kiln_kernel_input(ctx, i);
    if (!t || t->dtype != first->dtype || t->rank != rank) return NULL;
    for (int d = 0; d < rank; d++)
      if (d != axis && t->dims[d] != first->dims[d]) return NULL;
    dims[axis] += t->dims[axis];
  }
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, first->dtype, rank, dims, &y));
  *handled = true;
  size_t es = kiln_dtype_size(first->dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int d = (int)axis + 1; d < rank; d++) inner *= dims[d];
  size_t row = (size_t)(dims[axis] * inner) * es;
  char *out = y->data;
  for (int i = 0, at = 0; i < n->n_inputs; i++) {
    kiln_tensor *t = kiln_kernel_input(ctx, i);
    size_t block = (size_t)(t->dims[axis] * inner) * es;
    for (int64_t o = 0; o < outer && block; o++) memcpy(out + (size_t)o * row + at, (const char *)t->data + (size_t)o * block, block);
    at += (int)block;
  }
  return NULL;
}

/* ---- TopK over f32: the k best of each row by a bounded heap ------------------------------ */

/* One candidate: its value and its index along the axis. */
typedef struct topk_item {
  float v;
  int64_t i;
} topk_item;

/* Whether a goes before b in ref's stable sort (ops/reduce_scan.c): NaN
 * counts as the largest value, ties keep index order. With the index as
 * the last key this is a total order, so the k first under it are exactly
 * ref's k first, however they are found. */
static inline bool topk_first(const topk_item *a, const topk_item *b, bool largest) {
  bool an = a->v != a->v, bn = b->v != b->v;
  if (an != bn) return largest ? an : bn;
  if (!an && a->v != b->v) return largest ? a->v > b->v : a->v < b->v;
  return a->i < b->i;
}

/* A heap whose root is the item that goes last among those kept. */
static void topk_sift(topk_item *h, int64_t n, int64_t at, bool largest) {
  for (;;) {
    int64_t l = 2 * at + 1, r = l + 1, worst = at;
    if (l < n && topk_first(&h[worst], &h[l], largest)) worst = l;
    if (r < n && topk_first(&h[worst], &h[r], largest)) worst = r;
    if (worst == at) return;
    topk_item t = h[at];
    h[at] = h[worst];
    h[worst] = t;
    at = worst;
  }
}

static kiln_status_t host_topk(kiln_kernel_ctx *ctx, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *xt = kiln_kernel_input(ctx, 0), *kt = n->n_inputs > 1 ? kiln_kernel_input(ctx, 1) : NULL;
  if (ctx->opset < 10 || !xt || !kt || xt->dtype != KILN_DTYPE_F32 || xt->rank < 1 || kt->dtype != KILN_DTYPE_I64 ||
      kt->numel != 1)
    return NULL; /* ref: the attribute form, other dtypes, and every error */
  int rank = xt->rank;
  int64_t axis = kiln_attr_int(n, "axis", -1), k = *(const int64_t *)kt->data;
  if (axis < -rank || axis >= rank) return NULL;
  if (axis < 0) axis += rank;
  int64_t len = xt->dims[axis];
  if (k < 0 || k > len) return NULL;
  bool largest = kiln_attr_int(n, "largest", 1) != 0;
  int64_t dims[KILN_MAX_RANK], outer = 1, inner = 1;
  memcpy(dims, xt->dims, sizeof(int64_t) * (size_t)rank);
  dims[axis] = k;
  for (int d = 0; d < axis; d++) outer *= dims[d];
  for (int d = (int)axis + 1; d < rank; d++) inner *= dims[d];
  topk_item *heap = malloc(((size_t)k + 1) * sizeof *heap);
  if (!heap) return KILN_OOM();
  kiln_tensor *vt, *it;
  kiln_status_t st = kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, rank, dims, &vt);
  if (!st) st = kiln_kernel_output_uninit(ctx, 1, KILN_DTYPE_I64, rank, dims, &it);
  if (st) {
    free(heap);
    return st;
  }
  *handled = true;
  const float *x = xt->data;
  float *vals = vt->data;
  int64_t *idx = it->data;
  for (int64_t o = 0; o < outer && k > 0; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *row = x + o * len * inner + i;
      int64_t m = 0;
      for (int64_t j = 0; j < len; j++) {
        topk_item c = {row[j * inner], j};
        if (m < k) { /* fill, then heapify once */
          heap[m++] = c;
          if (m == k)
            for (int64_t a = k / 2 - 1; a >= 0; a--) topk_sift(heap, k, a, largest);
        } else if (topk_first(&c, &heap[0], largest)) {
          heap[0] = c;
          topk_sift(heap, k, 0, largest);
        }
      }
      /* The kept ones in order: pop the last-going root to the back. */
      for (int64_t e = k - 1; e > 0; e--) {
        topk_item t = heap[0];
        heap[0] = heap[e];
        heap[e] = t;
        topk_sift(heap, e, 0, largest);
      }
      for (int64_t j = 0; j < k; j++) {
        int64_t at = o * k * inner + j * inner + i;
        vals[at] = heap[j].v;
        idx[at] = heap[j].i;
      }
    }
  free(heap);
  return NULL;
}

/* ---- Resize / Upsample of run-time shapes: the op's tables, then the separable routine ------- */

/* The tables of the run's sizes (ops/misc_resize.c's rules, as the
 * resample-tables pass builds them for constant ones) through the routine
 * compiled kernels call (kiln_rt.resample): a detector's keypoint heatmaps
 * upsampled for as many rois as it kept. N and C stay as they are; a
 * crop that extrapolates is left to ref. */
static kiln_status_t host_resize(cpu_exec *x, kiln_kernel_ctx *ctx, bool upsample, bool *handled) {
  const kiln_node *n = ctx->node;
  kiln_tensor *xt = kiln_kernel_input(ctx, 0);
  if (!xt || xt->dtype != KILN_DTYPE_F32 || xt->rank < 3 || xt->rank > 8 || n->n_inputs > 4) return NULL;
  const kiln_tensor *consts[4] = {0};
  for (int i = 1; i < n->n_inputs; i++) consts[i] = kiln_kernel_input(ctx, i);
  kiln_resample_tables tab;
  kiln_status_t st = kiln_resample_tables_build(n, n->opset, upsample, xt->rank, xt->dims, n->n_inputs, consts, &tab);
  if (st) { /* ref's kernel words what is wrong */
    kiln_status_free(st);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, xt->dims, sizeof(int64_t) * (size_t)xt->rank);
  bool ok = !tab.extrapolate && tab.n_axes <= 3;
  for (int k = 0; ok && k < tab.n_axes; k++) {
    ok = tab.axes[k].axis >= 2;
    dims[tab.axes[k].axis] = tab.axes[k].out;
  }
  kiln_tensor *y = NULL;
  if (ok) st = kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_F32, xt->rank, dims, &y);
  if (!ok || st) {
    kiln_resample_tables_free(&tab);
    return st;
  }
  *handled = true;
  kiln_rt_resample_args a = {.nsp = xt->rank - 2, .planes = dims[0] * dims[1], .n_axes = tab.n_axes, .x = xt->data, .y = y->data};
  for (int i = 0; i < a.nsp; i++) {
    a.in[i] = xt->dims[2 + i];
    a.out[i] = dims[2 + i];
  }
  for (int k = 0; k < tab.n_axes; k++) {
    a.axis[k] = tab.axes[k].axis - 2;
    a.taps[k] = tab.axes[k].taps;
    a.index[k] = tab.axes[k].index;
    a.weight[k] = tab.nearest ? NULL : tab.axes[k].weight;
  }
  if (y->numel > 0) x->rt.resample(&x->rt, &a);
  kiln_resample_tables_free(&tab);
  st = x->rt_error;
  x->rt_error = NULL;
  return st;
}

bool kiln_cpu_host_routine_of(const kiln_graph *g, const kiln_node *node) {
  if (kiln_cpu_recurrent_routine(g, node) || kiln_cpu_attention_routine(g, node)) return true;
  int out = node->n_outputs > 0 ? node->outputs[0] : -1;
  kiln_dtype dt = out >= 0 ? g->values[out].type.dtype : KILN_DTYPE_UNDEFINED;
  switch (kiln_node_op_id(node)) {
    case KILN_OP_Gemm:
    case KILN_OP_MatMul:
    case KILN_OP_Conv:
    case KILN_OP_ConvTranspose:
    case KILN_OP_RoiAlign:
    case KILN_OP_Resize:
    case KILN_OP_Upsample: return dt == KILN_DTYPE_F32;
    case KILN_OP_ScatterElements:
    case KILN_OP_Expand:
    case KILN_OP_Concat: return dt != KILN_DTYPE_STRING; /* any other (the copy checks at run time) */
    case KILN_OP_NonMaxSuppression: return true;
    case KILN_OP_TopK:
      return node->opset >= 10 && node->n_inputs > 0 && node->inputs[0] >= 0 &&
             g->values[node->inputs[0]].type.dtype == KILN_DTYPE_F32;
    default: return false;
  }
}

kiln_status_t kiln_cpu_host_kernel(void *state, kiln_kernel_ctx *ctx, bool *handled) {
  cpu_exec *x = state;
  switch (kiln_node_op_id(ctx->node)) {
    case KILN_OP_Gemm: return host_gemm(x, ctx, handled);
    case KILN_OP_MatMul: return host_matmul(x, ctx, handled);
    case KILN_OP_Conv: return host_conv(x, ctx, false, handled);
    case KILN_OP_ConvTranspose: return host_conv(x, ctx, true, handled);
    case KILN_OP_RoiAlign: return host_roi_align(x, ctx, handled);
    case KILN_OP_Resize: return host_resize(x, ctx, false, handled);
    case KILN_OP_Upsample: return host_resize(x, ctx, true, handled);
    case KILN_OP_ScatterElements: return host_scatter_elements(ctx, handled);
    case KILN_OP_Expand: return host_expand(ctx, handled);
    case KILN_OP_Concat: return host_concat(ctx, handled);
    case KILN_OP_TopK: return host_topk(ctx, handled);
    case KILN_OP_NonMaxSuppression: return host_nms(ctx, handled);
    case KILN_OP_RNN:
    case KILN_OP_GRU:
    case KILN_OP_LSTM: return kiln_cpu_host_recurrent(x, ctx, handled);
    case KILN_OP_Attention: return kiln_cpu_host_attention(x, ctx, handled);
    default: return NULL;
  }
}
