/* GridSample (opsets 16, 20: any number of spatial axes), RoiAlign (opsets 10, 16), NonMaxSuppression
 * (opsets 10, 11).
 *
 * GridSample follows torch.nn.functional.grid_sample (the source of the
 * ONNX test data): unnormalize, then padding applied to the sampling
 * coordinate (bilinear, nearest) or to every tap (bicubic, A = -0.75);
 * nearest rounds half to even. RoiAlign and NonMaxSuppression follow ONNX
 * Runtime's algorithms, which the ONNX reference ports: RoiAlign's "max"
 * takes the max of the weighted corner values, NMS keeps boxes with score
 * strictly above score_threshold and suppresses IoU strictly above
 * iou_threshold, computed in float like ONNX Runtime. */
#include "ops/misc_internal.h"
#include "ops/roi_align.h"

#include <math.h>

/* ---- GridSample ---------------------------------------------------------- */

typedef kiln_grid_sample_params gs_params;

kiln_status_t kiln_grid_sample_params_of(const kiln_node *node, kiln_grid_sample_params *p) {
  const char *mode = kiln_attr_string(node, "mode", "bilinear");
  /* opset 20 renamed bilinear/bicubic to linear/cubic; accept both. */
  if (!strcmp(mode, "bilinear") || !strcmp(mode, "linear"))
    p->mode = KILN_GS_BILINEAR;
  else if (!strcmp(mode, "nearest"))
    p->mode = KILN_GS_NEAREST;
  else if (!strcmp(mode, "bicubic") || !strcmp(mode, "cubic"))
    p->mode = KILN_GS_BICUBIC;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute mode: unknown value '%s' (expected bilinear, nearest or bicubic)",
                      mode);
  const char *pad = kiln_attr_string(node, "padding_mode", "zeros");
  if (!strcmp(pad, "zeros"))
    p->padding = KILN_GS_ZEROS;
  else if (!strcmp(pad, "border"))
    p->padding = KILN_GS_BORDER;
  else if (!strcmp(pad, "reflection"))
    p->padding = KILN_GS_REFLECTION;
  else
    return kiln_error(KILN_INVALID_MODEL,
                      "attribute padding_mode: unknown value '%s' (expected zeros, border or reflection)", pad);
  p->align_corners = kiln_attr_int(node, "align_corners", 0) != 0;
  return NULL;
}

/* Grid value in [-1, 1] to a pixel coordinate. */
static double gs_unnormalize(double v, int64_t size, bool align_corners) {
  if (align_corners) return (v + 1) / 2 * (double)(size - 1);
  return ((v + 1) * (double)size - 1) / 2;
}

/* Reflects v into [twice_low/2, twice_high/2] (bounds given doubled). */
static double gs_reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = fabs(v - lo);
  double extra = fmod(v, span);
  double flips = floor(v / span);
  return fmod(flips, 2) == 0 ? extra + lo : span - extra + lo;
}

static double gs_clip(double v, int64_t size) {
  double hi = (double)(size - 1);
  return v < 0 ? 0 : v > hi ? hi : v;
}

/* Applies the padding mode to a pixel coordinate. */
static double gs_pad(double v, int64_t size, const gs_params *p) {
  if (p->padding == KILN_GS_BORDER) return gs_clip(v, size);
  if (p->padding == KILN_GS_REFLECTION) {
    v = p->align_corners ? gs_reflect(v, 0, 2.0 * (double)(size - 1)) : gs_reflect(v, -1, 2.0 * (double)size - 1);
    return gs_clip(v, size);
  }
  return v;
}

/* Pixel at integral coordinates u (spatial axes in order) of one plane, 0 outside. */
static double gs_pixel(const double *plane, int r, const int64_t *dims, const double *u) {
  int64_t off = 0;
  for (int d = 0; d < r; d++) {
    /* Far-away coordinates are outside anyway; compare before converting. */
    if (!(u[d] >= 0 && u[d] < (double)dims[d])) return 0;
    off = off * dims[d] + (int64_t)u[d];
  }
  return plane[off];
}

static void gs_cubic_coeffs(double t, double c[4]) {
  const double a = -0.75;
  double x;
  x = t + 1;
  c[0] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  x = t;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  x = 1 - t;
  c[2] = ((a + 2) * x - (a + 3)) * x * x + 1;
  x = 2 - t;
  c[3] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

/* One sample of a plane of r spatial axes; g[d]: the grid value for
 * spatial axis d (the grid's last dim lists them innermost first). The
 * taps are the tensor product of per-axis taps: 4 per axis (cubic, each
 * padded), 2 (linear) or 1 (nearest, rounded half to even). */
static double gs_sample(const double *plane, int r, const int64_t *dims, const double *g, const gs_params *p) {
  double u[KILN_MAX_RANK], base[KILN_MAX_RANK], w[KILN_MAX_RANK][4], tap[KILN_MAX_RANK];
  int n_taps = p->mode == KILN_GS_BICUBIC ? 4 : p->mode == KILN_GS_BILINEAR ? 2 : 1;
  for (int d = 0; d < r; d++) {
    u[d] = gs_unnormalize(g[d], dims[d], p->align_corners);
    if (isnan(u[d])) return NAN;
    if (p->mode == KILN_GS_BICUBIC) {
      base[d] = floor(u[d]) - 1;
      gs_cubic_coeffs(u[d] - floor(u[d]), w[d]);
    } else if (p->mode == KILN_GS_NEAREST) {
      base[d] = nearbyint(gs_pad(u[d], dims[d], p));
      w[d][0] = 1;
    } else {
      double v = gs_pad(u[d], dims[d], p);
      base[d] = floor(v);
      w[d][0] = base[d] + 1 - v;
      w[d][1] = v - base[d];
    }
  }
  int k[KILN_MAX_RANK] = {0};
  double acc = 0;
  for (;;) {
    double wt = 1;
    for (int d = 0; d < r; d++) {
      wt *= w[d][k[d]];
      tap[d] = base[d] + k[d];
      if (p->mode == KILN_GS_BICUBIC) tap[d] = gs_pad(tap[d], dims[d], p);
    }
    acc += wt * gs_pixel(plane, r, dims, tap);
    int d = r - 1;
    while (d >= 0 && ++k[d] == n_taps) k[d--] = 0;
    if (d < 0) break;
  }
  return acc;
}

/* Opset 16: 4-D X only; opset 20: X (N, C, D1..Dr), grid (N, D1_out..Dr_out, r). */
static kiln_status_t gs_check_rank(int opset, int x_rank) {
  if (opset < 20 && x_rank != 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected 4 (N, C, H, W) before opset 20", x_rank);
  if (x_rank < 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected N, C and at least one spatial axis",
                      x_rank);
  return NULL;
}

kiln_status_t kiln_misc_grid_sample_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *grid;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &grid));
  gs_params p;
  KILN_TRY(kiln_grid_sample_params_of(ctx->node, &p));
  if (!kiln_dtype_is_float(x->dtype) && !kiln_dtype_is_int(x->dtype) && x->dtype != KILN_DTYPE_BOOL)
    return kiln_error(KILN_UNSUPPORTED, "input 0 (X): dtype %s is not supported (numeric types only)",
                      kiln_dtype_name(x->dtype));
  if (!kiln_dtype_is_float(grid->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (grid): dtype %s, expected a float type",
                      kiln_dtype_name(grid->dtype));
  KILN_TRY(gs_check_rank(ctx->opset, x->rank));
  int r = x->rank - 2;
  if (grid->rank != x->rank || grid->dims[r + 1] != r)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (grid): expected shape (N, %d output dims, %d)", r, r);
  if (p.mode == KILN_GS_BICUBIC && r != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute mode: cubic needs a 4-D input, X has rank %d", x->rank);
  if (grid->dims[0] != x->dims[0])
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (grid): batch %lld differs from X's batch %lld",
                      (long long)grid->dims[0], (long long)x->dims[0]);
  int64_t n = x->dims[0], c = x->dims[1], plane_size = 1, out_size = 1;
  int64_t odims[KILN_MAX_RANK];
  const int64_t *sdims = x->dims + 2;
  odims[0] = n;
  odims[1] = c;
  for (int d = 0; d < r; d++) {
    plane_size *= sdims[d];
    odims[2 + d] = grid->dims[1 + d];
    out_size *= odims[2 + d];
  }
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, odims, &y));
  if (y->numel == 0) return NULL;
  if (plane_size == 0) {
    /* Every tap is outside an empty image. */
    for (int64_t i = 0; i < y->numel; i++) kiln_misc_store_rounded(y->data, y->dtype, i, 0);
    return NULL;
  }
  double *plane = malloc(sizeof(double) * (size_t)plane_size);
  if (!plane) return KILN_OOM();
  int64_t e = 0;
  for (int64_t b = 0; b < n; b++) {
    for (int64_t ch = 0; ch < c; ch++) {
      int64_t base = (b * c + ch) * plane_size;
      for (int64_t i = 0; i < plane_size; i++) plane[i] = kiln_load_f64(x->data, x->dtype, base + i);
      for (int64_t o = 0; o < out_size; o++, e++) {
        int64_t gi = (b * out_size + o) * r;
        double g[KILN_MAX_RANK];
        for (int d = 0; d < r; d++) g[r - 1 - d] = kiln_load_f64(grid->data, grid->dtype, gi + d);
        kiln_misc_store_rounded(y->data, y->dtype, e, gs_sample(plane, r, sdims, g, &p));
      }
    }
  }
  free(plane);
  return NULL;
}

kiln_status_t kiln_misc_grid_sample_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0], *gt = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!xt) return NULL;
  int rank = xt->rank >= 0 ? xt->rank : gt ? gt->rank : -1;
  if (rank < 0) {
    kiln_infer_set(ctx, 0, xt->dtype, -1, NULL);
    return NULL;
  }
  KILN_TRY(gs_check_rank(ctx->opset, rank));
  if (gt && gt->rank >= 0 && gt->rank != rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (grid): rank %d, expected %d (N, %d output dims, %d)", gt->rank,
                      rank, rank - 2, rank - 2);
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = -1;
  if (xt->rank == rank) {
    dims[0] = xt->dims[0];
    dims[1] = xt->dims[1];
  }
  if (gt && gt->rank == rank) {
    if (dims[0] < 0) dims[0] = gt->dims[0];
    for (int d = 0; d < rank - 2; d++) dims[2 + d] = gt->dims[1 + d];
  }
  kiln_infer_set(ctx, 0, xt->dtype, rank, dims);
  return NULL;
}

/* ---- RoiAlign -------------------------------------------------------------- */

void kiln_roi_bilinear(double y, double x, int64_t h, int64_t w, kiln_roi_tap *t) {
  memset(t, 0, sizeof *t);
  if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w) return; /* outside: contributes 0 */
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  int64_t y_lo = (int64_t)y, x_lo = (int64_t)x, y_hi, x_hi;
  if (y_lo >= h - 1) {
    y_hi = y_lo = h - 1;
    y = (double)y_lo;
  } else {
    y_hi = y_lo + 1;
  }
  if (x_lo >= w - 1) {
    x_hi = x_lo = w - 1;
    x = (double)x_lo;
  } else {
    x_hi = x_lo + 1;
  }
  double ly = y - (double)y_lo, lx = x - (double)x_lo, hy = 1 - ly, hx = 1 - lx;
  t->pos[0] = y_lo * w + x_lo;
  t->pos[1] = y_lo * w + x_hi;
  t->pos[2] = y_hi * w + x_lo;
  t->pos[3] = y_hi * w + x_hi;
  t->w[0] = hy * hx;
  t->w[1] = hy * lx;
  t->w[2] = ly * hx;
  t->w[3] = ly * lx;
}

kiln_status_t kiln_misc_roi_align_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *rois, *bidx;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &rois));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &bidx));
  const kiln_node *node = ctx->node;
  const char *mode = kiln_attr_string(node, "mode", "avg");
  bool is_max;
  if (!strcmp(mode, "avg"))
    is_max = false;
  else if (!strcmp(mode, "max"))
    is_max = true;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute mode: unknown value '%s' (expected avg or max)", mode);
  bool half_pixel = false; /* opset 10 behaves as output_half_pixel */
  if (ctx->opset >= 16) {
    const char *ctm = kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel");
    if (!strcmp(ctm, "half_pixel"))
      half_pixel = true;
    else if (strcmp(ctm, "output_half_pixel"))
      return kiln_error(KILN_INVALID_MODEL,
                        "attribute coordinate_transformation_mode: unknown value '%s' (expected half_pixel or "
                        "output_half_pixel)",
                        ctm);
  }
  int64_t oh = kiln_attr_int(node, "output_height", 1), ow = kiln_attr_int(node, "output_width", 1);
  int64_t sampling_ratio = kiln_attr_int(node, "sampling_ratio", 0);
  double spatial_scale = kiln_attr_float(node, "spatial_scale", 1.0f);
  if (oh <= 0 || ow <= 0)
    return kiln_error(KILN_INVALID_MODEL, "attributes output_height/output_width: %lld x %lld, expected positive",
                      (long long)oh, (long long)ow);
  if (sampling_ratio < 0 || sampling_ratio > 1 << 16)
    return kiln_error(KILN_INVALID_MODEL, "attribute sampling_ratio: %lld, expected 0..65536", (long long)sampling_ratio);

  if (!kiln_dtype_is_float(x->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): dtype %s, expected a float type", kiln_dtype_name(x->dtype));
  if (rois->dtype != x->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (rois): dtype %s, expected X's dtype %s",
                      kiln_dtype_name(rois->dtype), kiln_dtype_name(x->dtype));
  if (bidx->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (batch_indices): dtype %s, expected i64",
                      kiln_dtype_name(bidx->dtype));
  if (x->rank != 4) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected 4 (N, C, H, W)", x->rank);
  if (rois->rank != 2 || rois->dims[1] != 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (rois): expected shape (num_rois, 4)");
  int64_t nr = rois->dims[0];
  if (bidx->rank != 1 || bidx->dims[0] != nr)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (batch_indices): expected shape (%lld) to match rois",
                      (long long)nr);
  int64_t n = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3];
  const int64_t *bi = bidx->data;
  for (int64_t r = 0; r < nr; r++)
    if (bi[r] < 0 || bi[r] >= n)
      return kiln_error(KILN_OUT_OF_RANGE, "input 2 (batch_indices): value %lld at %lld out of range [0, %lld)",
                        (long long)bi[r], (long long)r, (long long)n);

  int64_t odims[4] = {nr, c, oh, ow};
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, 4, odims, &y));
  if (y->numel == 0) return NULL;
  if (h == 0 || w == 0) return NULL; /* no pixels: every bin is 0 */

  double offset = half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < nr; r++) {
    double box[4];
    for (int k = 0; k < 4; k++) {
      box[k] = kiln_load_f64(rois->data, rois->dtype, r * 4 + k);
      if (!isfinite(box[k]))
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (rois): roi %lld has a non-finite coordinate", (long long)r);
    }
    double sw = box[0] * spatial_scale - offset, sh = box[1] * spatial_scale - offset;
    double rw = box[2] * spatial_scale - offset - sw, rh = box[3] * spatial_scale - offset - sh;
    if (!half_pixel) { /* legacy: force malformed rois to 1x1 */
      if (rw < 1) rw = 1;
      if (rh < 1) rh = 1;
    }
    double bin_h = rh / (double)oh, bin_w = rw / (double)ow;
    double gh_d = sampling_ratio > 0 ? (double)sampling_ratio : ceil(rh / (double)oh);
    double gw_d = sampling_ratio > 0 ? (double)sampling_ratio : ceil(rw / (double)ow);
    if (gh_d > 1 << 16 || gw_d > 1 << 16 || gh_d * gw_d > (double)(1 << 26))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (rois): roi %lld needs a %g x %g sampling grid (too large)",
                        (long long)r, gh_d, gw_d);
    int64_t gh = gh_d > 0 ? (int64_t)gh_d : 0, gw = gw_d > 0 ? (int64_t)gw_d : 0;
    double count = gh * gw > 0 ? (double)(gh * gw) : 1.0;
    const int64_t plane = h * w;
    for (int64_t ch = 0; ch < c; ch++) {
      int64_t xbase = (bi[r] * c + ch) * plane;
      for (int64_t ph = 0; ph < oh; ph++) {
        for (int64_t pw = 0; pw < ow; pw++) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; iy++) {
            double yy = sh + (double)ph * bin_h + ((double)iy + 0.5) * bin_h / (double)gh;
            for (int64_t ix = 0; ix < gw; ix++) {
              double xx = sw + (double)pw * bin_w + ((double)ix + 0.5) * bin_w / (double)gw;
              kiln_roi_tap t;
              kiln_roi_bilinear(yy, xx, h, w, &t);
              double v[4];
              for (int k = 0; k < 4; k++) v[k] = t.w[k] * kiln_load_f64(x->data, x->dtype, xbase + t.pos[k]);
              if (is_max) {
                double m = fmax(fmax(fmax(v[0], v[1]), v[2]), v[3]);
                acc = first ? m : fmax(acc, m);
                first = false;
              } else {
                acc += v[0] + v[1] + v[2] + v[3];
              }
            }
          }
          int64_t oi = ((r * c + ch) * oh + ph) * ow + pw;
          kiln_store_f64(y->data, y->dtype, oi, is_max ? acc : acc / count);
        }
      }
    }
  }
  return NULL;
}

kiln_status_t kiln_misc_roi_align_infer(kiln_infer_ctx *ctx) {
  const kiln_type *xt = ctx->inputs[0];
  const kiln_type *rt = ctx->n_inputs > 1 ? ctx->inputs[1] : NULL;
  if (!xt) return NULL;
  if (xt->rank >= 0 && xt->rank != 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): rank %d, expected 4 (N, C, H, W)", xt->rank);
  if (rt && rt->rank >= 0 && rt->rank != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (rois): rank %d, expected 2 (num_rois, 4)", rt->rank);
  int64_t dims[4] = {-1, -1, kiln_attr_int(ctx->node, "output_height", 1), kiln_attr_int(ctx->node, "output_width", 1)};
  if (rt && rt->rank == 2) dims[0] = rt->dims[0];
  if (xt->rank == 4) dims[1] = xt->dims[1];
  kiln_infer_set(ctx, 0, xt->dtype, 4, dims);
  return NULL;
}

/* ---- NonMaxSuppression ------------------------------------------------------ */

typedef struct nms_box {
  float ymin, xmin, ymax, xmax;
} nms_box;

typedef struct nms_candidate {
  float score;
  int64_t index;
} nms_candidate;

static int nms_candidate_cmp(const void *pa, const void *pb) {
  const nms_candidate *a = pa, *b = pb;
  bool na = isnan(a->score), nb = isnan(b->score);
  if (na != nb) return na ? 1 : -1; /* NaN scores last, so the order stays total */
  if (!na && a->score != b->score) return a->score > b->score ? -1 : 1; /* higher score first */
  return a->index < b->index ? -1 : a->index > b->index;       /* then lower index */
}

static nms_box nms_load_box(const kiln_tensor *boxes, int64_t i, bool center) {
  float v[4];
  for (int k = 0; k < 4; k++) v[k] = (float)kiln_load_f64(boxes->data, boxes->dtype, i * 4 + k);
  nms_box b;
  if (center) { /* [x_center, y_center, width, height] */
    b.xmin = v[0] - v[2] / 2.0f;
    b.xmax = v[0] + v[2] / 2.0f;
    b.ymin = v[1] - v[3] / 2.0f;
    b.ymax = v[1] + v[3] / 2.0f;
  } else { /* [y1, x1, y2, x2], either diagonal */
    b.ymin = fminf(v[0], v[2]);
    b.ymax = fmaxf(v[0], v[2]);
    b.xmin = fminf(v[1], v[3]);
    b.xmax = fmaxf(v[1], v[3]);
  }
  return b;
}

static bool nms_suppresses(const nms_box *a, const nms_box *b, float iou_threshold) {
  float ix0 = fmaxf(a->xmin, b->xmin), iy0 = fmaxf(a->ymin, b->ymin);
  float ix1 = fminf(a->xmax, b->xmax), iy1 = fminf(a->ymax, b->ymax);
  float inter = fmaxf(ix1 - ix0, 0.0f) * fmaxf(iy1 - iy0, 0.0f);
  if (inter <= 0.0f) return false;
  float area_a = (a->xmax - a->xmin) * (a->ymax - a->ymin);
  float area_b = (b->xmax - b->xmin) * (b->ymax - b->ymin);
  float uni = area_a + area_b - inter;
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return inter / uni > iou_threshold;
}

/* Reads a one-element optional input as double; dflt if absent or empty. */
static kiln_status_t nms_scalar(const kiln_kernel_ctx *ctx, int i, const char *name, double dflt, double *out) {
  const kiln_tensor *t = kiln_kernel_input(ctx, i);
  *out = dflt;
  if (!t || t->numel == 0) return NULL;
  if (t->numel != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): %lld values, expected one", i, name, (long long)t->numel);
  if (t->dtype == KILN_DTYPE_STRING || t->dtype == KILN_DTYPE_C64 || t->dtype == KILN_DTYPE_C128)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): dtype %s, expected a number", i, name,
                      kiln_dtype_name(t->dtype));
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return NULL;
}

kiln_status_t kiln_misc_nms_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *boxes, *scores;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &boxes));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &scores));
  bool center = kiln_attr_int(ctx->node, "center_point_box", 0) != 0;
  if (!kiln_dtype_is_float(boxes->dtype) || !kiln_dtype_is_float(scores->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 0 (boxes) and 1 (scores): dtypes %s and %s, expected float",
                      kiln_dtype_name(boxes->dtype), kiln_dtype_name(scores->dtype));
  if (boxes->rank != 3 || boxes->dims[2] != 4)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (boxes): expected shape (num_batches, spatial_dimension, 4)");
  if (scores->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (scores): rank %d, expected 3 (num_batches, num_classes, spatial_dimension)",
                      scores->rank);
  int64_t nb = boxes->dims[0], ns = boxes->dims[1], nc = scores->dims[1];
  if (scores->dims[0] != nb || scores->dims[2] != ns)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (scores): shape must be (%lld, num_classes, %lld) to match boxes", (long long)nb,
                      (long long)ns);
  double max_out_d, iou_d, score_d;
  KILN_TRY(nms_scalar(ctx, 2, "max_output_boxes_per_class", 0, &max_out_d));
  KILN_TRY(nms_scalar(ctx, 3, "iou_threshold", 0, &iou_d));
  KILN_TRY(nms_scalar(ctx, 4, "score_threshold", -INFINITY, &score_d));
  const kiln_tensor *mt = kiln_kernel_input(ctx, 2);
  int64_t max_out = mt && mt->numel == 1 ? kiln_load_i64(mt->data, mt->dtype, 0) : 0;
  if (max_out < 0) max_out = 0;
  if (max_out > ns) max_out = ns;
  if (!(iou_d >= 0 && iou_d <= 1))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (iou_threshold): %g, expected a value in [0, 1]", iou_d);
  float iou_threshold = (float)iou_d;
  bool have_score_threshold = kiln_kernel_input(ctx, 4) && kiln_kernel_input(ctx, 4)->numel > 0;
  float score_threshold = (float)score_d;

  /* At most nb*nc*max_out rows; collect them in a growable buffer. */
  int64_t cap = 0, count = 0;
  int64_t *rows = NULL;
  nms_candidate *cand = malloc(sizeof(nms_candidate) * (size_t)(ns > 0 ? ns : 1));
  nms_box *sel = malloc(sizeof(nms_box) * (size_t)(ns > 0 ? ns : 1));
  kiln_status_t st = NULL;
  if (!cand || !sel) {
    st = KILN_OOM();
    goto done;
  }
  for (int64_t b = 0; b < nb && max_out > 0; b++) {
    for (int64_t c = 0; c < nc; c++) {
      int64_t nk = 0;
      for (int64_t i = 0; i < ns; i++) {
        float s = (float)kiln_load_f64(scores->data, scores->dtype, (b * nc + c) * ns + i);
        if (have_score_threshold && !(s > score_threshold)) continue;
        cand[nk].score = s;
        cand[nk].index = i;
        nk++;
      }
      qsort(cand, (size_t)nk, sizeof *cand, nms_candidate_cmp);
      int64_t nsel = 0;
      for (int64_t k = 0; k < nk && nsel < max_out; k++) {
        nms_box bx = nms_load_box(boxes, b * ns + cand[k].index, center);
        bool keep = true;
        for (int64_t j = 0; j < nsel && keep; j++)
          if (nms_suppresses(&sel[j], &bx, iou_threshold)) keep = false;
        if (!keep) continue;
        sel[nsel++] = bx;
        if (count == cap) {
          int64_t ncap = cap ? cap * 2 : 64;
          int64_t *nr = realloc(rows, sizeof(int64_t) * 3 * (size_t)ncap);
          if (!nr) {
            st = KILN_OOM();
            goto done;
          }
          rows = nr;
          cap = ncap;
        }
        rows[count * 3] = b;
        rows[count * 3 + 1] = c;
        rows[count * 3 + 2] = cand[k].index;
        count++;
      }
    }
  }
  {
    int64_t odims[2] = {count, 3};
    kiln_tensor *y;
    st = kiln_kernel_output_tensor(ctx, 0, KILN_DTYPE_I64, 2, odims, &y);
    if (!st && count) memcpy(y->data, rows, sizeof(int64_t) * 3 * (size_t)count);
  }
done:
  free(rows);
  free(cand);
  free(sel);
  return st;
}

kiln_status_t kiln_misc_nms_infer(kiln_infer_ctx *ctx) {
  int64_t dims[2] = {-1, 3};
  kiln_infer_set(ctx, 0, KILN_DTYPE_I64, 2, dims);
  return NULL;
}
