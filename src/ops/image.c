/* Ops of the "image" family, the spatial ops of opsets 18-22:
 * CenterCropPad (18), Col2Im (18), AffineGrid (20) and DeformConv (19/22).
 *
 * CenterCropPad moves whole elements (every dtype, strings too). Col2Im
 * sums overlapping blocks: floats and complex in double, integers exactly
 * (wrapping like numpy), bool as a logical or. AffineGrid and DeformConv
 * compute in double and round once into the output dtype. */
#include "ops/movement_internal.h"

#include <math.h>

/* The int64 list attribute `name` into out[0..n) when present with exactly
 * n values, else every entry dflt. */
static kiln_status_t spatial_attr(const kiln_node *node, const char *name, int n, int64_t dflt, int64_t *out) {
  int count = 0;
  const int64_t *v = kiln_attr_ints(node, name, &count);
  if (!v) {
    for (int i = 0; i < n; i++) out[i] = dflt;
    return NULL;
  }
  if (count != n) return kiln_error(KILN_INVALID_ARGUMENT, "attribute %s has %d values; expected %d", name, count, n);
  for (int i = 0; i < n; i++) out[i] = v[i];
  return NULL;
}

/* The first element past a sliding window's input: dilation * (kernel - 1)
 * + 1, and the room left for its other positions: size + pads - span.
 * Sizes and pads above 2^40 (no tensor has such an axis) are refused, so
 * the sums cannot overflow; false when the span overflows or the window
 * does not fit. */
#define SPATIAL_LIMIT ((int64_t)1 << 40)
static bool window_room(int64_t size, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t dilation,
                        int64_t *room) {
  int64_t span;
  if (!kiln_mul_i64(dilation, kernel - 1, &span) || span >= SPATIAL_LIMIT * 3) return false;
  *room = size + pad_begin + pad_end - (span + 1);
  return *room >= 0;
}

/* The product of d[0..n) into *out; false on overflow. */
static bool checked_prod(const int64_t *d, int n, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    if (!kiln_mul_i64(p, d[i], &p)) return false;
  *out = p;
  return true;
}

/* ---- CenterCropPad --------------------------------------------------------- */

/* The axes `shape` refers to (attribute axes, else all of them), each in [0, rank). */
static kiln_status_t center_crop_axes(const kiln_node *node, int rank, int *axes, int *n_axes) {
  int count = 0;
  const int64_t *v = kiln_attr_ints(node, "axes", &count);
  if (!v) {
    for (int d = 0; d < rank; d++) axes[d] = d;
    *n_axes = rank;
    return NULL;
  }
  if (count > rank) return kiln_error(KILN_INVALID_ARGUMENT, "attribute axes has %d values for rank %d", count, rank);
  for (int i = 0; i < count; i++) {
    KILN_TRY(kiln_mv_norm_axis(v[i], rank, "attribute axes", &axes[i]));
    for (int j = 0; j < i; j++)
      if (axes[j] == axes[i]) return kiln_error(KILN_INVALID_ARGUMENT, "attribute axes repeats axis %d", axes[i]);
  }
  *n_axes = count;
  return NULL;
}

static kiln_status_t center_crop_pad_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  if (!in || in->rank < 0) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int axes[KILN_MAX_RANK], n_axes;
  KILN_TRY(center_crop_axes(ctx->node, in->rank, axes, &n_axes));
  int64_t dims[KILN_MAX_RANK], shape[KILN_MAX_RANK];
  memcpy(dims, in->dims, sizeof dims);
  int n_shape = 0;
  bool known = kiln_mv_const_ints(kiln_mv_const(ctx, 1), shape, KILN_MAX_RANK, &n_shape);
  if (known && n_shape != n_axes)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape) has %d values for %d axes", n_shape, n_axes);
  for (int i = 0; i < n_axes; i++) {
    if (known && shape[i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape) value %lld is negative", (long long)shape[i]);
    dims[axes[i]] = known ? shape[i] : -1;
  }
  kiln_infer_set(ctx, 0, dt, in->rank, dims);
  return NULL;
}

/* Each axis keeps min(in, target) elements: a crop starts floor((in -
 * target) / 2) into the input, a pad puts the input floor((target - in) /
 * 2) into the output (an odd extra element goes to the end). */
static kiln_status_t center_crop_pad_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *shape_t, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &shape_t));
  if (shape_t->dtype != KILN_DTYPE_I32 && shape_t->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape) must be int32 or int64, got %s",
                      kiln_dtype_name(shape_t->dtype));
  int axes[KILN_MAX_RANK], n_axes;
  KILN_TRY(center_crop_axes(ctx->node, x->rank, axes, &n_axes));
  if (shape_t->rank > 1 || shape_t->numel != n_axes)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape) has %lld values; expected one per axis (%d)",
                      (long long)shape_t->numel, n_axes);
  int rank = x->rank;
  int64_t dims[KILN_MAX_RANK], src0[KILN_MAX_RANK] = {0}, dst0[KILN_MAX_RANK] = {0}, len[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  for (int i = 0; i < n_axes; i++) {
    int a = axes[i];
    int64_t target = kiln_load_i64(shape_t->data, shape_t->dtype, i);
    if (target < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (shape) value %lld for axis %d is negative", (long long)target,
                        a);
    if (target < x->dims[a]) src0[a] = (x->dims[a] - target) / 2;
    if (target > x->dims[a]) dst0[a] = (target - x->dims[a]) / 2;
    dims[a] = target;
  }
  for (int d = 0; d < rank; d++) len[d] = KILN_MIN(x->dims[d], dims[d]);
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, rank, dims, &y));
  if (rank == 0) return kiln_mv_copy(y, 0, x, 0, 1);
  if (kiln_mv_prod(len, 0, rank) == 0) return NULL;
  int64_t xs[KILN_MAX_RANK], ys[KILN_MAX_RANK], coord[KILN_MAX_RANK] = {0};
  kiln_mv_strides(rank, x->dims, xs);
  kiln_mv_strides(rank, dims, ys);
  /* One run of the last axis per coordinate of the others. */
  int64_t rows = kiln_mv_prod(len, 0, rank - 1);
  for (int64_t r = 0; r < rows; r++) {
    int64_t si = src0[rank - 1], di = dst0[rank - 1];
    for (int d = 0; d < rank - 1; d++) {
      si += (src0[d] + coord[d]) * xs[d];
      di += (dst0[d] + coord[d]) * ys[d];
    }
    KILN_TRY(kiln_mv_copy(y, di, x, si, len[rank - 1]));
    kiln_mv_next_coord(rank - 1, len, coord);
  }
  return NULL;
}

/* ---- Col2Im ---------------------------------------------------------------- */

typedef struct col2im_geom {
  int nd;
  int64_t image[KILN_MAX_RANK], block[KILN_MAX_RANK], blocks[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK], dilations[KILN_MAX_RANK], pads[2 * KILN_MAX_RANK];
} col2im_geom;

/* Reads image_shape/block_shape values and the attributes; blocks[i]: how
 * many block positions fit along spatial axis i. */
static kiln_status_t col2im_geometry(const kiln_node *node, const int64_t *image, const int64_t *block, int nd,
                                     col2im_geom *g) {
  if (nd < 1 || nd > KILN_MAX_RANK - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (image_shape) has %d values; expected 1 to %d", nd,
                      KILN_MAX_RANK - 2);
  g->nd = nd;
  KILN_TRY(spatial_attr(node, "strides", nd, 1, g->strides));
  KILN_TRY(spatial_attr(node, "dilations", nd, 1, g->dilations));
  KILN_TRY(spatial_attr(node, "pads", 2 * nd, 0, g->pads));
  for (int i = 0; i < nd; i++) {
    g->image[i] = image[i];
    g->block[i] = block[i];
    if (image[i] < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (image_shape) value %lld is negative", (long long)image[i]);
    if (block[i] < 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (block_shape) value %lld is not positive", (long long)block[i]);
    if (g->strides[i] < 1 || g->dilations[i] < 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "attributes strides and dilations must be positive (axis %d)", i);
    if (g->pads[i] < 0 || g->pads[i + nd] < 0 || g->pads[i] > SPATIAL_LIMIT || g->pads[i + nd] > SPATIAL_LIMIT ||
        image[i] > SPATIAL_LIMIT)
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute pads must be in [0, 2^40] and image_shape at most 2^40 (axis %d)",
                        i);
    int64_t room;
    if (!window_room(image[i], g->pads[i], g->pads[i + nd], block[i], g->dilations[i], &room))
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "block of %lld (dilation %lld) does not fit image axis %d of %lld (pads %lld+%lld)",
                        (long long)block[i], (long long)g->dilations[i], i, (long long)image[i], (long long)g->pads[i],
                        (long long)g->pads[i + nd]);
    g->blocks[i] = room / g->strides[i] + 1;
  }
  return NULL;
}

static kiln_status_t col2im_infer(kiln_infer_ctx *ctx) {
  const kiln_type *in = kiln_mv_in_type(ctx, 0);
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  int64_t image[KILN_MAX_RANK], block[KILN_MAX_RANK];
  int n_image = 0, n_block = 0;
  bool image_known = kiln_mv_const_ints(kiln_mv_const(ctx, 1), image, KILN_MAX_RANK, &n_image);
  bool block_known = kiln_mv_const_ints(kiln_mv_const(ctx, 2), block, KILN_MAX_RANK, &n_block);
  const kiln_type *it = kiln_mv_in_type(ctx, 1);
  int nd = image_known ? n_image : (it && it->rank == 1 && it->dims[0] >= 0) ? (int)it->dims[0] : -1;
  if (nd < 0 || nd > KILN_MAX_RANK - 2) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < nd + 2; d++) dims[d] = -1;
  if (in && in->rank >= 0 && in->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) must have rank 3, got %d", in->rank);
  if (in && in->rank == 3) dims[0] = in->dims[0];
  if (image_known)
    for (int i = 0; i < nd; i++) dims[2 + i] = image[i];
  if (block_known && in && in->rank == 3 && in->dims[1] >= 0) {
    int64_t k;
    if (checked_prod(block, n_block, &k) && k > 0 && in->dims[1] % k == 0) dims[1] = in->dims[1] / k;
  }
  kiln_infer_set(ctx, 0, dt, nd + 2, dims);
  return NULL;
}

static kiln_status_t col2im_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *image_t, *block_t, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &image_t));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &block_t));
  kiln_dtype dt = x->dtype;
  if (dt == KILN_DTYPE_STRING)
    return kiln_error(KILN_UNSUPPORTED, "input 0 (input) is a string tensor: Col2Im sums overlapping blocks");
  if (x->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) must have rank 3 [N, C*prod(block_shape), L], got %d",
                      x->rank);
  if (image_t->rank != 1 || block_t->rank != 1 || image_t->numel != block_t->numel)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "inputs 1 (image_shape) and 2 (block_shape) must be 1-D of one length, got %lld and %lld values",
                      (long long)image_t->numel, (long long)block_t->numel);
  int nd = (int)image_t->numel;
  if (nd > KILN_MAX_RANK - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (image_shape) has %d values; at most %d", nd, KILN_MAX_RANK - 2);
  int64_t image[KILN_MAX_RANK], block[KILN_MAX_RANK];
  for (int i = 0; i < nd; i++) {
    image[i] = kiln_load_i64(image_t->data, image_t->dtype, i);
    block[i] = kiln_load_i64(block_t->data, block_t->dtype, i);
  }
  col2im_geom g;
  KILN_TRY(col2im_geometry(ctx->node, image, block, nd, &g));
  int64_t k, l, pixels;
  if (!checked_prod(g.block, nd, &k) || !checked_prod(g.blocks, nd, &l) || !checked_prod(g.image, nd, &pixels))
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs 1 (image_shape) and 2 (block_shape) give more elements than int64");
  if (x->dims[1] % k)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 0 (input) dim 1 = %lld is not a multiple of prod(block_shape) = %lld",
                      (long long)x->dims[1], (long long)k);
  if (x->dims[2] != l)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) dim 2 = %lld; the blocks fit %lld times",
                      (long long)x->dims[2], (long long)l);
  int64_t n = x->dims[0], c = x->dims[1] / k;
  int64_t dims[KILN_MAX_RANK] = {n, c};
  for (int i = 0; i < nd; i++) dims[2 + i] = g.image[i];
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, nd + 2, dims, &y));
  if (y->numel == 0) return NULL;
  /* Sums go to a scratch of double (floats; complex as pairs) or uint64
   * (integers, bool), rounded into y once. */
  bool is_complex = dt == KILN_DTYPE_C64 || dt == KILN_DTYPE_C128, is_float = kiln_dtype_is_float(dt) || is_complex;
  int lanes = is_complex ? 2 : 1;
  double *fsum = is_float ? calloc((size_t)y->numel * lanes, sizeof *fsum) : NULL;
  uint64_t *isum = is_float ? NULL : calloc((size_t)y->numel, sizeof *isum);
  if (!fsum && !isum) return KILN_OOM();
  int64_t img_stride[KILN_MAX_RANK];
  kiln_mv_strides(nd, g.image, img_stride);
  int64_t tap[KILN_MAX_RANK] = {0};
  for (int64_t t = 0; t < k; t++, kiln_mv_next_coord(nd, g.block, tap)) {
    int64_t pos[KILN_MAX_RANK] = {0};
    for (int64_t b = 0; b < l; b++, kiln_mv_next_coord(nd, g.blocks, pos)) {
      int64_t at = 0;
      bool inside = true;
      for (int i = 0; i < nd && inside; i++) {
        int64_t p = pos[i] * g.strides[i] - g.pads[i] + tap[i] * g.dilations[i];
        inside = p >= 0 && p < g.image[i];
        at += p * img_stride[i];
      }
      if (!inside) continue;
      for (int64_t bc = 0; bc < n * c; bc++) {
        int64_t src = (bc * k + t) * l + b, dst = bc * pixels + at;
        if (is_complex) {
          bool wide = dt == KILN_DTYPE_C128;
          for (int q = 0; q < 2; q++)
            fsum[dst * 2 + q] += wide ? ((const double *)x->data)[src * 2 + q] : ((const float *)x->data)[src * 2 + q];
        } else if (is_float) {
          fsum[dst] += kiln_load_f64(x->data, dt, src);
        } else if (dt == KILN_DTYPE_BOOL) {
          isum[dst] |= kiln_load_u64(x->data, dt, src) != 0;
        } else {
          isum[dst] += kiln_load_u64(x->data, dt, src);
        }
      }
    }
  }
  for (int64_t e = 0; e < y->numel; e++) {
    if (dt == KILN_DTYPE_C64) {
      ((float *)y->data)[e * 2] = (float)fsum[e * 2];
      ((float *)y->data)[e * 2 + 1] = (float)fsum[e * 2 + 1];
    } else if (dt == KILN_DTYPE_C128) {
      ((double *)y->data)[e * 2] = fsum[e * 2];
      ((double *)y->data)[e * 2 + 1] = fsum[e * 2 + 1];
    } else if (is_float) {
      kiln_store_f64(y->data, dt, e, fsum[e]);
    } else {
      kiln_store_i64(y->data, dt, e, (int64_t)isum[e]);
    }
  }
  free(fsum);
  free(isum);
  return NULL;
}

/* ---- AffineGrid -------------------------------------------------------------- */

static bool is_float_dtype(kiln_dtype dt) { return kiln_dtype_is_float(dt); }

static kiln_status_t affine_grid_infer(kiln_infer_ctx *ctx) {
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  const kiln_type *theta = kiln_mv_in_type(ctx, 0);
  int64_t size[8];
  int n_size = 0;
  bool known = kiln_mv_const_ints(kiln_mv_const(ctx, 1), size, 8, &n_size);
  int nd = known ? n_size - 2 : (theta && theta->rank == 3 && theta->dims[1] >= 2) ? (int)theta->dims[1] : -1;
  if (nd != 2 && nd != 3) {
    if (known) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (size) has %d values; expected 4 or 5", n_size);
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  int64_t dims[5];
  dims[0] = known ? size[0] : (theta && theta->rank == 3) ? theta->dims[0] : -1;
  for (int i = 0; i < nd; i++) dims[1 + i] = known ? size[2 + i] : -1;
  dims[nd + 1] = nd;
  kiln_infer_set(ctx, 0, dt, nd + 2, dims);
  return NULL;
}

/* Coordinate i of n evenly spaced positions in [-1, 1]: the pixel centers
 * at both ends (align_corners) or inside the edges; 0 for a single pixel
 * (as torch.nn.functional.affine_grid, which the spec follows). */
static double affine_base(int64_t i, int64_t n, bool align_corners) {
  if (n <= 1) return 0.0;
  if (align_corners) return -1.0 + 2.0 * (double)i / (double)(n - 1);
  return -1.0 + (2.0 * (double)i + 1.0) / (double)n;
}

static kiln_status_t affine_grid_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *theta, *size_t_, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &theta));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &size_t_));
  if (!is_float_dtype(theta->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (theta) must be a float tensor, got %s",
                      kiln_dtype_name(theta->dtype));
  if (size_t_->dtype != KILN_DTYPE_I64 || size_t_->rank != 1 || (size_t_->numel != 4 && size_t_->numel != 5))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (size) must be int64 [N, C, H, W] or [N, C, D, H, W]");
  int nd = (int)size_t_->numel - 2;
  const int64_t *size = size_t_->data;
  for (int i = 0; i < nd + 2; i++)
    if (size[i] < 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (size) value %lld is negative", (long long)size[i]);
  if (theta->rank != 3 || theta->dims[1] != nd || theta->dims[2] != nd + 1 || theta->dims[0] != size[0]) {
    char s[128];
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 0 (theta) has shape %s; expected [%lld, %d, %d] for size's N and %dD",
                      kiln_shape_str(theta->rank, theta->dims, s, sizeof s), (long long)size[0], nd, nd + 1, nd);
  }
  bool align = kiln_attr_int(ctx->node, "align_corners", 0) != 0;
  int64_t dims[5] = {size[0]}, spatial[3];
  for (int i = 0; i < nd; i++) {
    spatial[i] = dims[1 + i] = size[2 + i];
  }
  dims[nd + 1] = nd;
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, theta->dtype, nd + 2, dims, &y));
  int64_t points = kiln_mv_prod(spatial, 0, nd), coord[3] = {0};
  for (int64_t b = 0; b < size[0]; b++) {
    double th[12];
    for (int q = 0; q < nd * (nd + 1); q++) th[q] = kiln_load_f64(theta->data, theta->dtype, b * nd * (nd + 1) + q);
    memset(coord, 0, sizeof coord);
    for (int64_t p = 0; p < points; p++, kiln_mv_next_coord(nd, spatial, coord)) {
      /* Homogeneous position (x, y[, z], 1): x runs along the last axis (W). */
      double h[4];
      for (int j = 0; j < nd; j++) h[j] = affine_base(coord[nd - 1 - j], spatial[nd - 1 - j], align);
      h[nd] = 1.0;
      for (int r = 0; r < nd; r++) {
        double v = 0;
        for (int j = 0; j <= nd; j++) v += th[r * (nd + 1) + j] * h[j];
        kiln_store_f64(y->data, y->dtype, (b * points + p) * nd + r, v);
      }
    }
  }
  return NULL;
}

/* ---- DeformConv ------------------------------------------------------------- */

typedef struct deform_geom {
  int nd;
  int64_t n, c, oc, group, offset_group, taps, out_points, in_points;
  int64_t in[KILN_MAX_RANK], kernel[KILN_MAX_RANK], out[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK], dilations[KILN_MAX_RANK], pads[2 * KILN_MAX_RANK];
} deform_geom;

/* Output spatial sizes from X's and the kernel's with the attributes; the
 * shapes' dims may be -1 (inference), which leaves those outputs -1. */
static kiln_status_t deform_geometry(const kiln_node *node, int rank, const int64_t *xd, const int64_t *wd,
                                     deform_geom *g) {
  if (rank < 3) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X) must have rank >= 3, got %d", rank);
  int nd = g->nd = rank - 2;
  KILN_TRY(spatial_attr(node, "strides", nd, 1, g->strides));
  KILN_TRY(spatial_attr(node, "dilations", nd, 1, g->dilations));
  KILN_TRY(spatial_attr(node, "pads", 2 * nd, 0, g->pads));
  g->group = kiln_attr_int(node, "group", 1);
  g->offset_group = kiln_attr_int(node, "offset_group", 1);
  if (g->group < 1 || g->offset_group < 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "attributes group and offset_group must be positive");
  int count = 0;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &count);
  if (ks && count != nd)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute kernel_shape has %d values; expected %d", count, nd);
  for (int i = 0; i < nd; i++) {
    g->in[i] = xd[2 + i];
    g->kernel[i] = ks ? ks[i] : wd[2 + i];
    if (ks && wd[2 + i] >= 0 && wd[2 + i] != ks[i])
      return kiln_error(KILN_INVALID_ARGUMENT, "attribute kernel_shape[%d] = %lld but input 1 (W) has %lld", i,
                        (long long)ks[i], (long long)wd[2 + i]);
    if (g->strides[i] < 1 || g->dilations[i] < 1 || g->pads[i] < 0 || g->pads[nd + i] < 0 ||
        g->pads[i] > SPATIAL_LIMIT || g->pads[nd + i] > SPATIAL_LIMIT)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "strides and dilations must be positive and pads in [0, 2^40] (axis %d)", i);
    if (g->in[i] < 0 || g->kernel[i] < 0) {
      g->out[i] = -1;
      continue;
    }
    int64_t room;
    if (g->kernel[i] < 1 || !window_room(g->in[i], g->pads[i], g->pads[nd + i], g->kernel[i], g->dilations[i], &room))
      return kiln_error(KILN_INVALID_ARGUMENT, "kernel of %lld (dilation %lld) does not fit input axis %d of %lld",
                        (long long)g->kernel[i], (long long)g->dilations[i], 2 + i, (long long)g->in[i]);
    g->out[i] = room / g->strides[i] + 1;
  }
  g->n = xd[0];
  g->c = xd[1];
  g->oc = wd[0];
  return NULL;
}

static kiln_status_t deform_conv_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = kiln_mv_in_type(ctx, 0), *w = kiln_mv_in_type(ctx, 1);
  kiln_dtype dt = kiln_mv_in_dtype(ctx, 0);
  if (!x || x->rank < 0 || !w || w->rank != x->rank) {
    kiln_mv_infer_unknown_rank(ctx, 0, dt);
    return NULL;
  }
  deform_geom g;
  KILN_TRY(deform_geometry(ctx->node, x->rank, x->dims, w->dims, &g));
  int64_t dims[KILN_MAX_RANK] = {g.n, g.oc};
  for (int i = 0; i < g.nd; i++) dims[2 + i] = g.out[i];
  kiln_infer_set(ctx, 0, dt, x->rank, dims);
  return NULL;
}

/* Input plane `plane` (in_points values) sampled at pos by multilinear
 * interpolation between the 2^nd neighbouring pixels; pixels outside the
 * input count as 0 (GridSample's zeros padding, align_corners=1). */
static double deform_sample(const kiln_tensor *x, int64_t plane, const deform_geom *g, const double *pos,
                            const int64_t *in_stride) {
  int64_t lo[KILN_MAX_RANK];
  double frac[KILN_MAX_RANK];
  for (int i = 0; i < g->nd; i++) {
    if (!(pos[i] > -1.0 && pos[i] < (double)g->in[i])) return 0.0; /* every neighbour outside (or NaN) */
    double f = floor(pos[i]);
    lo[i] = (int64_t)f;
    frac[i] = pos[i] - f;
  }
  double v = 0.0;
  for (unsigned corner = 0; corner < (1u << g->nd); corner++) {
    double wgt = 1.0;
    int64_t at = 0;
    for (int i = 0; i < g->nd && wgt != 0.0; i++) {
      bool up = (corner >> i) & 1;
      int64_t p = lo[i] + up;
      if (p < 0 || p >= g->in[i]) wgt = 0.0;
      wgt *= up ? frac[i] : 1.0 - frac[i];
      at += p * in_stride[i];
    }
    if (wgt != 0.0) v += wgt * kiln_load_f64(x->data, x->dtype, plane * g->in_points + at);
  }
  return v;
}

static kiln_status_t deform_check_shape(const kiln_tensor *t, const char *what, int rank, const int64_t *dims) {
  if (kiln_shape_equal(t->rank, t->dims, rank, dims)) return NULL;
  char got[256], want[256];
  return kiln_error(KILN_INVALID_ARGUMENT, "%s has shape %s; expected %s", what,
                    kiln_shape_str(t->rank, t->dims, got, sizeof got), kiln_shape_str(rank, dims, want, sizeof want));
}

/* Y[n, o, p] = B[o] + sum over the taps t and the input channels c of o's
 * group of W[o, c, t] * mask[n, t, p] * X[n, c] sampled at p * stride -
 * pad + t * dilation + offset[n, t, :, p] (offset and mask of c's offset
 * group). */
static kiln_status_t deform_conv_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *w, *off, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &w));
  KILN_TRY(kiln_kernel_require_input(ctx, 2, &off));
  kiln_tensor *bias = kiln_kernel_input(ctx, 3), *mask = kiln_kernel_input(ctx, 4);
  kiln_dtype dt = x->dtype;
  if (!is_float_dtype(dt))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X) must be a float tensor, got %s", kiln_dtype_name(dt));
  kiln_tensor *others[] = {w, off, bias, mask};
  for (int i = 0; i < 4; i++)
    if (others[i] && others[i]->dtype != dt)
      return kiln_error(KILN_INVALID_ARGUMENT, "input %d has dtype %s; expected %s like input 0 (X)", i + 1,
                        kiln_dtype_name(others[i]->dtype), kiln_dtype_name(dt));
  if (w->rank != x->rank)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W) has rank %d; expected %d like input 0 (X)", w->rank, x->rank);
  deform_geom g;
  KILN_TRY(deform_geometry(ctx->node, x->rank, x->dims, w->dims, &g));
  int nd = g.nd;
  if (!checked_prod(g.kernel, nd, &g.taps) || !checked_prod(g.out, nd, &g.out_points) ||
      !checked_prod(g.in, nd, &g.in_points))
    return kiln_error(KILN_INVALID_ARGUMENT, "the output of %d spatial axes has more elements than int64", nd);
  if (g.c % g.group || g.oc % g.group || w->dims[1] * g.group != g.c)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input 1 (W) has %lld output and %lld input channels; X has %lld channels in %lld groups",
                      (long long)g.oc, (long long)w->dims[1], (long long)g.c, (long long)g.group);
  if (g.c % g.offset_group)
    return kiln_error(KILN_INVALID_ARGUMENT, "X's %lld channels do not divide into offset_group = %lld", (long long)g.c,
                      (long long)g.offset_group);
  int64_t want[KILN_MAX_RANK] = {g.n, g.offset_group * g.taps * nd};
  for (int i = 0; i < nd; i++) want[2 + i] = g.out[i];
  KILN_TRY(deform_check_shape(off, "input 2 (offset)", x->rank, want));
  if (bias) KILN_TRY(deform_check_shape(bias, "input 3 (B)", 1, &g.oc));
  want[1] = g.offset_group * g.taps;
  if (mask) KILN_TRY(deform_check_shape(mask, "input 4 (mask)", x->rank, want));
  int64_t dims[KILN_MAX_RANK] = {g.n, g.oc};
  for (int i = 0; i < nd; i++) dims[2 + i] = g.out[i];
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, dt, x->rank, dims, &y));
  if (y->numel == 0) return NULL;
  double *acc = malloc((size_t)y->numel * sizeof *acc);
  if (!acc) return KILN_OOM();
  for (int64_t e = 0; e < y->numel; e++) acc[e] = bias ? kiln_load_f64(bias->data, dt, (e / g.out_points) % g.oc) : 0.0;
  int64_t in_stride[KILN_MAX_RANK], cg = g.c / g.group, ocg = g.oc / g.group, cpo = g.c / g.offset_group;
  kiln_mv_strides(nd, g.in, in_stride);
  for (int64_t b = 0; b < g.n; b++) {
    int64_t o[KILN_MAX_RANK] = {0};
    for (int64_t p = 0; p < g.out_points; p++, kiln_mv_next_coord(nd, g.out, o)) {
      int64_t t_at[KILN_MAX_RANK] = {0};
      for (int64_t t = 0; t < g.taps; t++, kiln_mv_next_coord(nd, g.kernel, t_at)) {
        for (int64_t og = 0; og < g.offset_group; og++) {
          double pos[KILN_MAX_RANK];
          for (int i = 0; i < nd; i++) {
            int64_t ch = ((og * g.taps + t) * nd + i);
            pos[i] = (double)(o[i] * g.strides[i] - g.pads[i] + t_at[i] * g.dilations[i]) +
                     kiln_load_f64(off->data, dt, (b * g.offset_group * g.taps * nd + ch) * g.out_points + p);
          }
          double m =
              mask ? kiln_load_f64(mask->data, dt, (b * g.offset_group * g.taps + og * g.taps + t) * g.out_points + p)
                   : 1.0;
          for (int64_t c = og * cpo; c < (og + 1) * cpo; c++) {
            double v = m * deform_sample(x, b * g.c + c, &g, pos, in_stride);
            if (v == 0.0) continue;
            int64_t grp = c / cg;
            for (int64_t oc = grp * ocg; oc < (grp + 1) * ocg; oc++)
              acc[(b * g.oc + oc) * g.out_points + p] +=
                  v * kiln_load_f64(w->data, dt, (oc * cg + c % cg) * g.taps + t);
          }
        }
      }
    }
  }
  for (int64_t e = 0; e < y->numel; e++) kiln_store_f64(y->data, dt, e, acc[e]);
  free(acc);
  return NULL;
}

static const kiln_op_def image_ops[] = {
    {"", "CenterCropPad", 2, 2, 1, 1, center_crop_pad_infer, center_crop_pad_kernel, 0, .id = KILN_OP_CenterCropPad},
    {"", "Col2Im", 3, 3, 1, 1, col2im_infer, col2im_kernel, 0, .id = KILN_OP_Col2Im},
    {"", "AffineGrid", 2, 2, 1, 1, affine_grid_infer, affine_grid_kernel, 0, .id = KILN_OP_AffineGrid},
    {"", "DeformConv", 3, 5, 1, 1, deform_conv_infer, deform_conv_kernel, 0, .id = KILN_OP_DeformConv},
};

const kiln_op_def *kiln_ops_image(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(image_ops);
  return image_ops;
}
