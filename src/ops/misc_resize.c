/* Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 1, 7, 9).
 *
 * Every output coordinate is mapped back to the input, one axis at a time,
 * exactly as ONNX's reference (onnx/backend/test/case/node/resize.py) does:
 *
 *   1. x_original from the coordinate_transformation_mode. "length_resized"
 *      is the exact output length when `sizes` is given and in*scale (may be
 *      fractional) when `scales` is given, as in the reference.
 *   2. base = floor(x_original) and ratio = x_original - base, except that an
 *      integral x_original takes base = x_original - 1 and ratio = 1 (the
 *      reference prefers the pixel on the left).
 *   3. n taps (2 for nearest/linear, 4 for cubic) at base-n/2+1 .. base+n/2,
 *      on the input padded by n/2 edge values (the window slides to stay in
 *      the padded range); each tap reads the clamped index.
 *   4. Weights from the mode; exclude_outside zeroes taps outside the input
 *      and renormalizes.
 *
 * Opset 18 adds the `axes` attribute (scales, sizes and roi then name only
 * those axes; the others keep their size), keep_aspect_ratio_policy
 * (not_larger / not_smaller: one scale for every listed axis, sizes rounded
 * half up) and antialias: linear and cubic filters stretched by 1/scale when
 * downsampling, so an axis takes 2-2*(floor(-support/scale)+1) taps whose
 * weights are normalized to sum 1. Opset 19 adds half_pixel_symmetric.
 *
 * N-D interpolation is the tensor product of the per-axis taps. Opset < 11
 * (Resize-10, Upsample) uses "asymmetric" coordinates and the legacy nearest
 * rule of ONNX Runtime: ceil when downsampling, floor otherwise.
 *
 * Nearest copies elements (any dtype, strings included); linear and cubic
 * compute in double and round back (integers to nearest, saturated). */
#include "ops/misc_internal.h"

#include <math.h>
#include <stdio.h>

typedef enum { INTERP_NEAREST, INTERP_LINEAR, INTERP_CUBIC } interp_mode;

typedef enum {
  CTM_HALF_PIXEL,
  CTM_HALF_PIXEL_SYMMETRIC,
  CTM_PYTORCH_HALF_PIXEL,
  CTM_ALIGN_CORNERS,
  CTM_ASYMMETRIC,
  CTM_TF_HALF_PIXEL_FOR_NN,
  CTM_TF_CROP_AND_RESIZE,
} coord_mode;

typedef enum {
  NEAREST_ROUND_PREFER_FLOOR,
  NEAREST_ROUND_PREFER_CEIL,
  NEAREST_FLOOR,
  NEAREST_CEIL,
  NEAREST_LEGACY, /* opset < 11: ceil when downsampling, floor otherwise */
} nearest_mode;

typedef struct resize_params {
  interp_mode mode;
  coord_mode ctm;
  nearest_mode nearest;
  double cubic_a;
  bool exclude_outside;
  double extrapolation_value;
  bool antialias;              /* opset 18+: linear/cubic filters stretched when downsampling */
  int keep_aspect;             /* opset 18+: 0 stretch, 1 not_larger, 2 not_smaller */
  int n_axes_attr;             /* opset 18+: entries of the axes attribute (0: every axis) */
  const int64_t *axes_attr;
  int rank;
  int64_t in[KILN_MAX_RANK];
  int64_t out[KILN_MAX_RANK];
  double scale[KILN_MAX_RANK];          /* out/in, as the formulas use it */
  double length_resized[KILN_MAX_RANK]; /* "output_width" of the formulas */
  double roi_start[KILN_MAX_RANK], roi_end[KILN_MAX_RANK];
  bool roi_f32;
} resize_params;

/* ---- attributes ---------------------------------------------------------- */

static kiln_status_t parse_mode(const char *s, bool legacy, interp_mode *out) {
  if (!strcmp(s, "nearest"))
    *out = INTERP_NEAREST;
  else if (!strcmp(s, "linear") || (legacy && (!strcmp(s, "bilinear") || !strcmp(s, "trilinear"))))
    *out = INTERP_LINEAR;
  else if (!legacy && !strcmp(s, "cubic"))
    *out = INTERP_CUBIC;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute mode: unknown value '%s' (expected %s)", s,
                      legacy ? "nearest or linear" : "nearest, linear or cubic");
  return NULL;
}

/* Fills the attribute part of p. legacy: Upsample or Resize-10. */
static kiln_status_t parse_resize_attrs(const kiln_node *node, int opset, bool legacy, resize_params *p) {
  memset(p, 0, sizeof *p);
  KILN_TRY(parse_mode(kiln_attr_string(node, "mode", "nearest"), legacy, &p->mode));
  if (legacy) {
    p->ctm = CTM_ASYMMETRIC;
    p->nearest = NEAREST_LEGACY;
    p->cubic_a = -0.75;
    return NULL;
  }
  const char *ctm = kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel");
  if (!strcmp(ctm, "half_pixel"))
    p->ctm = CTM_HALF_PIXEL;
  else if (opset >= 19 && !strcmp(ctm, "half_pixel_symmetric"))
    p->ctm = CTM_HALF_PIXEL_SYMMETRIC;
  else if (!strcmp(ctm, "pytorch_half_pixel"))
    p->ctm = CTM_PYTORCH_HALF_PIXEL;
  else if (!strcmp(ctm, "align_corners"))
    p->ctm = CTM_ALIGN_CORNERS;
  else if (!strcmp(ctm, "asymmetric"))
    p->ctm = CTM_ASYMMETRIC;
  else if (!strcmp(ctm, "tf_half_pixel_for_nn"))
    p->ctm = CTM_TF_HALF_PIXEL_FOR_NN;
  else if (!strcmp(ctm, "tf_crop_and_resize"))
    p->ctm = CTM_TF_CROP_AND_RESIZE;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute coordinate_transformation_mode: unknown value '%s'", ctm);
  const char *nm = kiln_attr_string(node, "nearest_mode", "round_prefer_floor");
  if (!strcmp(nm, "round_prefer_floor"))
    p->nearest = NEAREST_ROUND_PREFER_FLOOR;
  else if (!strcmp(nm, "round_prefer_ceil"))
    p->nearest = NEAREST_ROUND_PREFER_CEIL;
  else if (!strcmp(nm, "floor"))
    p->nearest = NEAREST_FLOOR;
  else if (!strcmp(nm, "ceil"))
    p->nearest = NEAREST_CEIL;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute nearest_mode: unknown value '%s'", nm);
  p->cubic_a = kiln_attr_float(node, "cubic_coeff_a", -0.75f);
  p->exclude_outside = kiln_attr_int(node, "exclude_outside", 0) != 0;
  p->extrapolation_value = kiln_attr_float(node, "extrapolation_value", 0.0f);
  if (opset >= 18) {
    p->antialias = kiln_attr_int(node, "antialias", 0) != 0;
    const char *kp = kiln_attr_string(node, "keep_aspect_ratio_policy", "stretch");
    if (!strcmp(kp, "stretch"))
      p->keep_aspect = 0;
    else if (!strcmp(kp, "not_larger"))
      p->keep_aspect = 1;
    else if (!strcmp(kp, "not_smaller"))
      p->keep_aspect = 2;
    else
      return kiln_error(KILN_INVALID_MODEL,
                        "attribute keep_aspect_ratio_policy: unknown value '%s' (expected stretch, not_larger "
                        "or not_smaller)",
                        kp);
    p->axes_attr = kiln_attr_ints(node, "axes", &p->n_axes_attr);
    if (!p->axes_attr) p->n_axes_attr = 0;
  }
  return NULL;
}

/* ---- where scales / sizes / roi come from -------------------------------- */

/* The inputs that decide the output shape, as tensors (kernel) or constants
 * (inference); any may be NULL. */
typedef struct resize_inputs {
  const kiln_tensor *roi, *scales, *sizes;
  const float *scales_attr; /* Upsample-7 / Upsample-1 */
  int n_scales_attr;
  float upsample1_scales[4];
} resize_inputs;

static void gather_inputs(const kiln_node *node, int opset, bool upsample, int n_inputs,
                          const kiln_tensor *(*get)(const void *, int), const void *src, resize_inputs *ri) {
  memset(ri, 0, sizeof *ri);
  if (upsample) {
    if (opset >= 9) {
      ri->scales = n_inputs > 1 ? get(src, 1) : NULL;
    } else if (opset >= 7) {
      ri->scales_attr = kiln_attr_floats(node, "scales", &ri->n_scales_attr);
    } else {
      ri->upsample1_scales[0] = 1.0f;
      ri->upsample1_scales[1] = 1.0f;
      ri->upsample1_scales[2] = kiln_attr_float(node, "height_scale", 1.0f);
      ri->upsample1_scales[3] = kiln_attr_float(node, "width_scale", 1.0f);
      ri->scales_attr = ri->upsample1_scales;
      ri->n_scales_attr = 4;
    }
  } else if (opset < 11) {
    ri->scales = n_inputs > 1 ? get(src, 1) : NULL;
  } else {
    ri->roi = n_inputs > 1 ? get(src, 1) : NULL;
    ri->scales = n_inputs > 2 ? get(src, 2) : NULL;
    ri->sizes = n_inputs > 3 ? get(src, 3) : NULL;
  }
  /* An empty tensor stands for an absent input (opset 11 requires the slot). */
  if (ri->scales && ri->scales->numel == 0) ri->scales = NULL;
  if (ri->sizes && ri->sizes->numel == 0) ri->sizes = NULL;
  if (ri->roi && ri->roi->numel == 0) ri->roi = NULL;
}

static const kiln_tensor *kernel_get(const void *src, int i) {
  return kiln_kernel_input((const kiln_kernel_ctx *)src, i);
}

static const kiln_tensor *infer_get(const void *src, int i) {
  const kiln_infer_ctx *ctx = src;
  return ctx->consts && i < ctx->n_inputs ? ctx->consts[i] : NULL;
}

/* Computes out dims, scales and roi of p from the inputs. in dims may be -1
 * (inference): the matching out dims become -1. for_kernel: roi must be
 * there for tf_crop_and_resize (inference may compute shapes from sizes
 * without it). scales, sizes and roi hold one entry (roi: a start and an
 * end) per listed axis: the axes attribute, or every axis. */
static kiln_status_t resize_shape(resize_params *p, int rank, const int64_t *in, const resize_inputs *ri,
                                  bool legacy, bool for_kernel) {
  p->rank = rank;
  memcpy(p->in, in, sizeof(int64_t) * (size_t)rank);
  bool have_scales = ri->scales || ri->scales_attr;
  if (have_scales && ri->sizes)
    return kiln_error(KILN_INVALID_ARGUMENT, "inputs scales and sizes: only one of them may be given");
  if (!have_scales && !ri->sizes)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s",
                      legacy ? "scales are required" : "one of inputs scales (2) and sizes (3) is required");
  /* The listed axes, each at most once. */
  int axes[KILN_MAX_RANK], n_axes = rank;
  for (int d = 0; d < rank; d++) axes[d] = d;
  if (p->n_axes_attr > 0) {
    if (p->n_axes_attr > rank)
      return kiln_error(KILN_INVALID_MODEL, "attribute axes: %d entries for an input of rank %d", p->n_axes_attr,
                        rank);
    bool seen[KILN_MAX_RANK] = {0};
    n_axes = p->n_axes_attr;
    for (int i = 0; i < n_axes; i++) {
      int64_t a = p->axes_attr[i];
      if (a < -rank || a >= rank)
        return kiln_error(KILN_INVALID_MODEL, "attribute axes: value %lld is out of range for rank %d", (long long)a,
                          rank);
      if (a < 0) a += rank;
      if (seen[a]) return kiln_error(KILN_INVALID_MODEL, "attribute axes: axis %lld is repeated", (long long)a);
      seen[a] = true;
      axes[i] = (int)a;
    }
  }
  /* Unlisted axes keep their size: scale 1 and the whole roi. */
  for (int d = 0; d < rank; d++) {
    p->roi_start[d] = 0.0;
    p->roi_end[d] = 1.0;
    p->scale[d] = 1.0;
    p->out[d] = in[d];
    p->length_resized[d] = (double)in[d];
  }
  /* roi: [start_1..start_N, end_1..end_N] over the listed axes, only read for tf_crop_and_resize */
  if (p->ctm == CTM_TF_CROP_AND_RESIZE && (ri->roi || for_kernel)) {
    if (!ri->roi)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 1 (roi) is required by coordinate_transformation_mode tf_crop_and_resize");
    if (!kiln_dtype_is_float(ri->roi->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (roi): dtype %s, expected a float type",
                        kiln_dtype_name(ri->roi->dtype));
    if (ri->roi->numel != 2 * (int64_t)n_axes)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (roi): %lld values, expected 2 per resized axis = %d",
                        (long long)ri->roi->numel, 2 * n_axes);
    p->roi_f32 = ri->roi->dtype == KILN_DTYPE_F32;
    for (int i = 0; i < n_axes; i++) {
      int d = axes[i];
      p->roi_start[d] = kiln_load_f64(ri->roi->data, ri->roi->dtype, i);
      p->roi_end[d] = kiln_load_f64(ri->roi->data, ri->roi->dtype, n_axes + i);
      if (!isfinite(p->roi_start[d]) || !isfinite(p->roi_end[d]))
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (roi): value for axis %d is not finite", d);
    }
  }
  if (have_scales) {
    int64_t n = ri->scales ? ri->scales->numel : ri->n_scales_attr;
    const char *what = ri->scales ? "input scales" : "attribute scales";
    if (ri->scales && !kiln_dtype_is_float(ri->scales->dtype))
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: dtype %s, expected float", what,
                        kiln_dtype_name(ri->scales->dtype));
    if (n != n_axes)
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: %lld values, expected one per %s (%d)", what, (long long)n,
                        p->n_axes_attr ? "entry of attribute axes" : "axis of X", n_axes);
    for (int i = 0; i < n_axes; i++) {
      int d = axes[i];
      double s = ri->scales ? kiln_load_f64(ri->scales->data, ri->scales->dtype, i) : ri->scales_attr[i];
      if (!(s > 0) || !isfinite(s))
        return kiln_error(KILN_INVALID_ARGUMENT, "%s: value %g for axis %d, expected a positive finite number",
                          what, s, d);
      p->scale[d] = s;
      if (in[d] < 0) {
        p->out[d] = -1;
        p->length_resized[d] = -1;
        continue;
      }
      double len = (double)in[d] * s;
      if (p->ctm == CTM_TF_CROP_AND_RESIZE) len *= p->roi_end[d] - p->roi_start[d];
      double o = floor(len);
      if (!(o >= 0)) o = 0; /* a reversed roi gives an empty axis */
      if (o > 9.0e15)
        return kiln_error(KILN_INVALID_ARGUMENT, "%s: value %g for axis %d gives an output dim too large", what,
                          s, d);
      p->out[d] = (int64_t)o;
      p->length_resized[d] = (double)in[d] * s; /* as the reference: in*scale, not the rounded length */
      if (p->ctm == CTM_TF_CROP_AND_RESIZE) p->length_resized[d] = len;
    }
  } else {
    if (ri->sizes->dtype != KILN_DTYPE_I64)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (sizes): dtype %s, expected i64",
                        kiln_dtype_name(ri->sizes->dtype));
    if (ri->sizes->numel != n_axes)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (sizes): %lld values, expected one per %s (%d)",
                        (long long)ri->sizes->numel, p->n_axes_attr ? "entry of attribute axes" : "axis of X",
                        n_axes);
    const int64_t *sz = ri->sizes->data;
    for (int i = 0; i < n_axes; i++)
      if (sz[i] < 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (sizes): value %lld for axis %d is negative",
                          (long long)sz[i], axes[i]);
    if (p->keep_aspect) {
      /* One scale for every listed axis: the smallest (not_larger) or the
       * largest (not_smaller) of sizes/in; each size then rounded half up. */
      double scale = 0;
      bool known = true;
      for (int i = 0; i < n_axes; i++) {
        int d = axes[i];
        if (in[d] < 0) known = false;
        if (in[d] <= 0) continue;
        double s = (double)sz[i] / (double)in[d];
        if (scale == 0 || (p->keep_aspect == 1 ? s < scale : s > scale)) scale = s;
      }
      for (int i = 0; i < n_axes; i++) {
        int d = axes[i];
        if (!known || in[d] < 0) {
          p->out[d] = -1;
          p->length_resized[d] = -1;
          continue;
        }
        p->scale[d] = scale > 0 ? scale : 1.0;
        p->length_resized[d] = p->scale[d] * (double)in[d];
        double o = floor(p->length_resized[d] + 0.5);
        if (o > 9.0e15)
          return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (sizes): axis %d gives an output dim too large", d);
        p->out[d] = (int64_t)o;
      }
    } else {
      for (int i = 0; i < n_axes; i++) {
        int d = axes[i];
        p->out[d] = sz[i];
        p->length_resized[d] = (double)sz[i];
        p->scale[d] = in[d] > 0 ? (double)sz[i] / (double)in[d] : 1.0;
      }
    }
  }
  return NULL;
}

/* ---- per-axis taps -------------------------------------------------------- */

/* Taps of one output coordinate: n of them with nonzero weight, in idx/w
 * (views into the axis's arrays, room for axis_tap_count). */
typedef struct resize_taps {
  int n;            /* taps with nonzero weight */
  bool extrapolate; /* tf_crop_and_resize sample outside the input */
  int64_t *idx;     /* clamped input indices */
  double *w;
} resize_taps;

/* The taps of every output coordinate of one axis; arrays owned. */
typedef struct resize_axis_taps {
  int64_t n_max;
  resize_taps *t;
  int64_t *idx;
  double *w;
} resize_axis_taps;

#define RESIZE_MAX_TAPS 65536

static void cubic_coeffs(double r, double a, double c[4]) {
  double r1 = r + 1, r2 = 1 - r, r3 = 2 - r;
  c[0] = ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a;
  c[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
  c[2] = ((a + 2) * r2 - (a + 3)) * r2 * r2 + 1;
  c[3] = ((a * r3 - 5 * a) * r3 + 8 * a) * r3 - 4 * a;
}

/* The cubic kernel at distance x (Keys, parameter a). */
static double cubic_kernel(double x, double a) {
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

/* Taps per output coordinate of axis d (before zero weights are dropped):
 * 2 (nearest, linear), 4 (cubic); an antialiased filter of support r (1
 * linear, 2 cubic) stretched by 1/scale when downsampling covers offsets
 * floor(-r/scale)+1 .. -(floor(-r/scale)+1)+1 around the base pixel. */
static kiln_status_t axis_tap_count(const resize_params *p, int d, int64_t *out_n) {
  if (p->mode == INTERP_NEAREST || !p->antialias) {
    *out_n = p->mode == INTERP_CUBIC ? 4 : 2;
    return NULL;
  }
  double s = p->scale[d] < 1.0 ? p->scale[d] : 1.0;
  double support = p->mode == INTERP_CUBIC ? 2.0 : 1.0;
  double start = floor(-support / s) + 1;
  double n = 2 - 2 * start;
  if (!(n <= RESIZE_MAX_TAPS))
    return kiln_error(KILN_UNSUPPORTED, "antialias: scale %g on axis %d needs %.0f taps per output, at most %d",
                      p->scale[d], d, n, RESIZE_MAX_TAPS);
  *out_n = (int64_t)n;
  return NULL;
}

/* Fills t (n_taps slots in t->idx / t->w) for output coordinate x of axis d. */
static void compute_taps(const resize_params *p, int d, int64_t x, int64_t n_taps, resize_taps *t) {
  int64_t in = p->in[d];
  double scale = p->scale[d], lr = p->length_resized[d];
  double xo;
  t->n = 0;
  t->extrapolate = false;
  switch (p->ctm) {
    case CTM_HALF_PIXEL: xo = ((double)x + 0.5) / scale - 0.5; break;
    case CTM_HALF_PIXEL_SYMMETRIC: {
      /* Centers the sampled span when the output length was rounded. */
      double adjustment = lr > 0 ? (double)p->out[d] / lr : 1.0;
      double offset = (double)in / 2 * (1 - adjustment);
      xo = offset + ((double)x + 0.5) / scale - 0.5;
      break;
    }
    case CTM_PYTORCH_HALF_PIXEL: xo = lr > 1 ? ((double)x + 0.5) / scale - 0.5 : 0.0; break;
    case CTM_ALIGN_CORNERS: xo = lr == 1 ? 0.0 : (double)x * (double)(in - 1) / (lr - 1); break;
    case CTM_ASYMMETRIC: xo = (double)x / scale; break;
    case CTM_TF_HALF_PIXEL_FOR_NN: xo = ((double)x + 0.5) / scale; break;
    case CTM_TF_CROP_AND_RESIZE: {
      /* A float32 roi takes the reference's float32 step (end - start):
       * samples that land exactly on a pixel must round the same way. */
      double s = p->roi_start[d], e = p->roi_end[d];
      double span = p->roi_f32 ? (double)((float)e - (float)s) : e - s;
      double offset = s * (double)(in - 1);
      if (lr == 1)
        xo = span * (double)(in - 1) / 2;
      else
        xo = (double)x * span * (double)(in - 1) / (lr - 1);
      xo += offset;
      if (!(xo >= 0 && xo <= (double)(in - 1))) {
        t->extrapolate = true;
        return;
      }
      break;
    }
    default: xo = 0; break;
  }
  if (isnan(xo)) xo = 0; /* only from degenerate 0/0 (align_corners with in = 1 and lr = 1 handled above) */

  double fl = floor(xo);
  bool integral = xo == fl;
  double ratio = integral ? 1.0 : xo - fl;
  double base = integral ? fl - 1 : fl;
  /* Far outside, the window is pinned to the padded edge anyway: clamp so
   * the conversion to int64 is defined. */
  if (base < -(double)in - n_taps) base = -(double)in - (double)n_taps;
  if (base > 2.0 * (double)in + (double)n_taps) base = 2.0 * (double)in + (double)n_taps;

  double c4[4], *c = t->w; /* weights computed in place, then compacted */
  int64_t n = n_taps;
  if (p->mode == INTERP_NEAREST) {
    bool take_high;
    if (integral) {
      take_high = true;
    } else {
      switch (p->nearest) {
        case NEAREST_ROUND_PREFER_FLOOR: take_high = ratio > 0.5; break;
        case NEAREST_ROUND_PREFER_CEIL: take_high = ratio >= 0.5; break;
        case NEAREST_FLOOR: take_high = false; break;
        case NEAREST_CEIL: take_high = true; break;
        default: take_high = scale < 1.0; break; /* legacy: ceil when downsampling */
      }
    }
    c[0] = take_high ? 0.0 : 1.0;
    c[1] = take_high ? 1.0 : 0.0;
  } else if (p->antialias) {
    /* Tap k sits at offset 1 - n/2 + k from the base pixel. */
    double s = scale < 1.0 ? scale : 1.0, sum = 0;
    for (int64_t k = 0; k < n; k++) {
      double arg = s * ((double)(1 - n / 2 + k) - ratio);
      double v = p->mode == INTERP_LINEAR ? 1 - fabs(arg) : cubic_kernel(arg, p->cubic_a);
      c[k] = p->mode == INTERP_LINEAR && v < 0 ? 0.0 : v;
      sum += c[k];
    }
    if (sum != 0)
      for (int64_t k = 0; k < n; k++) c[k] /= sum;
  } else if (p->mode == INTERP_LINEAR) {
    c[0] = 1 - ratio;
    c[1] = ratio;
  } else {
    cubic_coeffs(ratio, p->cubic_a, c4);
    for (int k = 0; k < 4; k++) c[k] = c4[k];
  }
  int64_t pad = n / 2;
  int64_t start = (int64_t)base - n / 2 + 1;
  if (start < -pad) start = -pad;
  if (start > in + pad - n) start = in + pad - n;

  if (p->exclude_outside && p->mode != INTERP_NEAREST) {
    double sum = 0;
    for (int64_t k = 0; k < n; k++) {
      int64_t i = start + k;
      if (i < 0 || i >= in) c[k] = 0;
      sum += c[k];
    }
    if (sum != 0)
      for (int64_t k = 0; k < n; k++) c[k] /= sum;
  }
  for (int64_t k = 0; k < n; k++) {
    if (c[k] == 0) continue;
    int64_t i = start + k;
    t->idx[t->n] = i < 0 ? 0 : i >= in ? in - 1 : i;
    t->w[t->n] = c[k]; /* t->n <= k: compaction never overwrites a weight not yet read */
    t->n++;
  }
  if (t->n == 0) { /* every weight excluded: one tap of weight 0 keeps the tensor product defined */
    t->idx[0] = 0;
    t->w[0] = 0.0;
    t->n = 1;
  }
}

static void axis_taps_free(resize_axis_taps *a) {
  free(a->t);
  free(a->idx);
  free(a->w);
  memset(a, 0, sizeof *a);
}

/* The taps of every output coordinate of axis d. */
static kiln_status_t axis_taps_build(const resize_params *p, int d, resize_axis_taps *a) {
  memset(a, 0, sizeof *a);
  KILN_TRY(axis_tap_count(p, d, &a->n_max));
  size_t n_out = (size_t)(p->out[d] > 0 ? p->out[d] : 1);
  if (n_out > SIZE_MAX / sizeof(double) / (size_t)a->n_max) return KILN_OOM();
  a->t = malloc(n_out * sizeof *a->t);
  a->idx = malloc(n_out * (size_t)a->n_max * sizeof *a->idx);
  a->w = malloc(n_out * (size_t)a->n_max * sizeof *a->w);
  if (!a->t || !a->idx || !a->w) {
    axis_taps_free(a);
    return KILN_OOM();
  }
  for (int64_t o = 0; o < p->out[d]; o++) {
    a->t[o].idx = a->idx + o * a->n_max;
    a->t[o].w = a->w + o * a->n_max;
    compute_taps(p, d, o, a->n_max, &a->t[o]);
  }
  return NULL;
}

/* ---- gather tables (kiln.Resample) ---------------------------------------- */

static const kiln_tensor *array_get(const void *src, int i) { return ((const kiln_tensor *const *)src)[i]; }

void kiln_resample_tables_free(kiln_resample_tables *t) {
  for (int k = 0; k < t->n_axes; k++) {
    free(t->axes[k].index);
    free(t->axes[k].weight);
  }
  memset(t, 0, sizeof *t);
}

kiln_status_t kiln_resample_tables_build(const kiln_node *node, int opset, bool upsample, int rank, const int64_t *in,
                                         int n_inputs, const kiln_tensor *const *consts, kiln_resample_tables *out) {
  memset(out, 0, sizeof *out);
  bool legacy = upsample || opset < 11;
  resize_params p;
  KILN_TRY(parse_resize_attrs(node, opset, legacy, &p));
  resize_inputs ri;
  gather_inputs(node, opset, upsample, n_inputs, array_get, consts, &ri);
  KILN_TRY(resize_shape(&p, rank, in, &ri, legacy, true));
  out->nearest = p.mode == INTERP_NEAREST;
  out->extrapolation_value = p.extrapolation_value;
  for (int d = 0; d < rank; d++) {
    if (p.in[d] == 0 && p.out[d] > 0) { /* the tables of the axes before it are freed (the fuzz pipeline's leak) */
      kiln_resample_tables_free(out);
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): axis %d is empty but the output has %lld", d,
                        (long long)p.out[d]);
    }
    resize_axis_taps at;
    kiln_status_t st = axis_taps_build(&p, d, &at);
    if (st) {
      kiln_resample_tables_free(out);
      return st;
    }
    const resize_taps *t = at.t;
    int taps = 1;
    bool identity = p.out[d] == p.in[d];
    for (int64_t o = 0; o < p.out[d]; o++) {
      if (t[o].n > taps) taps = t[o].n;
      identity = identity && !t[o].extrapolate && t[o].n == 1 && t[o].idx[0] == o && t[o].w[0] == 1.0;
    }
    if (identity) {
      axis_taps_free(&at);
      continue;
    }
    kiln_resample_axis *a = &out->axes[out->n_axes++];
    a->axis = d;
    a->out = p.out[d];
    a->taps = taps;
    size_t n = (size_t)(p.out[d] > 0 ? p.out[d] : 1) * (size_t)taps;
    a->index = malloc(n * sizeof *a->index);
    a->weight = malloc(n * sizeof *a->weight);
    if (!a->index || !a->weight) {
      axis_taps_free(&at);
      kiln_resample_tables_free(out);
      return KILN_OOM();
    }
    for (int64_t o = 0; o < p.out[d]; o++)
      for (int k = 0; k < taps; k++) {
        size_t i = (size_t)o * (size_t)taps + (size_t)k;
        /* A missing tap (a zero weight skipped) repeats the first index with weight 0. */
        a->index[i] = t[o].extrapolate ? -1 : (int32_t)t[o].idx[k < t[o].n ? k : 0];
        a->weight[i] = t[o].extrapolate || k >= t[o].n ? 0.0f : (float)t[o].w[k];
      }
    for (int64_t o = 0; o < p.out[d]; o++) out->extrapolate |= t[o].extrapolate;
    axis_taps_free(&at);
  }
  return NULL;
}

/* ---- the kernel ----------------------------------------------------------- */

static kiln_status_t resize_run(kiln_kernel_ctx *ctx, resize_params *p, const kiln_tensor *x) {
  kiln_dtype dt = x->dtype;
  int rank = x->rank;
  bool numeric = kiln_dtype_is_float(dt) || kiln_dtype_is_int(dt);
  if (p->mode != INTERP_NEAREST && !numeric)
    return kiln_error(KILN_UNSUPPORTED, "input 0 (X): %s interpolation of dtype %s is not supported",
                      p->mode == INTERP_LINEAR ? "linear" : "cubic", kiln_dtype_name(dt));
  for (int d = 0; d < rank; d++)
    if (p->in[d] == 0 && p->out[d] > 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): axis %d is empty but the output has %lld", d,
                        (long long)p->out[d]);

  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, rank, p->out, &y));
  if (y->numel == 0) return NULL;

  /* Per-axis taps for every output coordinate. */
  resize_axis_taps taps[KILN_MAX_RANK] = {0};
  kiln_status_t st = NULL;
  double *xd = NULL;
  for (int d = 0; d < rank; d++) {
    st = axis_taps_build(p, d, &taps[d]);
    if (st) goto done;
  }
  int64_t in_stride[KILN_MAX_RANK];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    in_stride[d] = s;
    s *= p->in[d];
  }
  size_t esize = kiln_dtype_size(dt);
  if (p->mode != INTERP_NEAREST) {
    xd = malloc(sizeof(double) * (size_t)(x->numel > 0 ? x->numel : 1));
    if (!xd) {
      st = KILN_OOM();
      goto done;
    }
    for (int64_t i = 0; i < x->numel; i++) xd[i] = kiln_load_f64(x->data, dt, i);
  }

  int64_t oi[KILN_MAX_RANK] = {0};
  for (int64_t e = 0; e < y->numel; e++) {
    const resize_taps *t[KILN_MAX_RANK];
    bool extrapolate = false;
    for (int d = 0; d < rank; d++) {
      t[d] = &taps[d].t[oi[d]];
      if (t[d]->extrapolate) extrapolate = true;
    }
    if (extrapolate) {
      if (dt == KILN_DTYPE_STRING) {
        /* leave "" */
      } else if (kiln_dtype_is_float(dt) || kiln_dtype_is_int(dt) || dt == KILN_DTYPE_BOOL) {
        kiln_misc_store_rounded(y->data, dt, e, p->extrapolation_value);
      } else if (dt == KILN_DTYPE_C64) {
        ((float *)y->data)[2 * e] = (float)p->extrapolation_value;
      } else if (dt == KILN_DTYPE_C128) {
        ((double *)y->data)[2 * e] = p->extrapolation_value;
      }
    } else if (p->mode == INTERP_NEAREST) {
      int64_t src = 0;
      for (int d = 0; d < rank; d++) src += t[d]->idx[0] * in_stride[d];
      if (dt == KILN_DTYPE_STRING) {
        const char *str = ((char *const *)x->data)[src];
        if (str) {
          st = kiln_tensor_set_string(y, e, str, strlen(str));
          if (st) goto done;
        }
      } else {
        memcpy((char *)y->data + (size_t)e * esize, (const char *)x->data + (size_t)src * esize, esize);
      }
    } else {
      /* Tensor product of the per-axis taps. */
      int k[KILN_MAX_RANK] = {0};
      double acc = 0;
      for (;;) {
        double w = 1;
        int64_t src = 0;
        for (int d = 0; d < rank; d++) {
          w *= t[d]->w[k[d]];
          src += t[d]->idx[k[d]] * in_stride[d];
        }
        acc += w * xd[src];
        int d = rank - 1;
        while (d >= 0 && ++k[d] == t[d]->n) k[d--] = 0;
        if (d < 0) break;
      }
      kiln_misc_store_rounded(y->data, dt, e, acc);
    }
    for (int d = rank - 1; d >= 0 && ++oi[d] == p->out[d]; d--) oi[d] = 0;
  }

done:
  for (int d = 0; d < rank; d++) axis_taps_free(&taps[d]);
  free(xd);
  return st;
}

static kiln_status_t resize_common_kernel(kiln_kernel_ctx *ctx, bool upsample) {
  bool legacy = upsample || ctx->opset < 11;
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  resize_params p;
  KILN_TRY(parse_resize_attrs(ctx->node, ctx->opset, legacy, &p));
  resize_inputs ri;
  gather_inputs(ctx->node, ctx->opset, upsample, ctx->n_inputs, kernel_get, ctx, &ri);
  KILN_TRY(resize_shape(&p, x->rank, x->dims, &ri, legacy, true));
  return resize_run(ctx, &p, x);
}

static kiln_status_t resize_common_infer(kiln_infer_ctx *ctx, bool upsample) {
  const kiln_type *xt = ctx->n_inputs > 0 ? ctx->inputs[0] : NULL;
  if (!xt) return NULL;
  kiln_dtype dt = xt->dtype;
  bool legacy = upsample || ctx->opset < 11;
  resize_params p;
  KILN_TRY(parse_resize_attrs(ctx->node, ctx->opset, legacy, &p));
  resize_inputs ri;
  gather_inputs(ctx->node, ctx->opset, upsample, ctx->n_inputs, infer_get, ctx, &ri);
  int rank = xt->rank;
  if (rank < 0 && ri.sizes && !p.n_axes_attr) rank = (int)ri.sizes->numel;
  if (rank < 0 || rank > KILN_MAX_RANK) {
    kiln_infer_set(ctx, 0, dt, -1, NULL);
    return NULL;
  }
  int64_t in[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) in[d] = xt->rank == rank ? xt->dims[d] : -1;
  /* Constant sizes decide; else constant scales (and roi for
   * tf_crop_and_resize); else only the rank is known. */
  bool roi_needed = p.ctm == CTM_TF_CROP_AND_RESIZE && !ri.sizes;
  if (ri.sizes || ((ri.scales || ri.scales_attr) && (!roi_needed || ri.roi))) {
    KILN_TRY(resize_shape(&p, rank, in, &ri, legacy, false));
    kiln_infer_set(ctx, 0, dt, rank, p.out);
    return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = -1;
  kiln_infer_set(ctx, 0, dt, rank, dims);
  return NULL;
}

kiln_status_t kiln_misc_resize_kernel(kiln_kernel_ctx *ctx) { return resize_common_kernel(ctx, false); }
kiln_status_t kiln_misc_resize_infer(kiln_infer_ctx *ctx) { return resize_common_infer(ctx, false); }
kiln_status_t kiln_misc_upsample_kernel(kiln_kernel_ctx *ctx) { return resize_common_kernel(ctx, true); }
kiln_status_t kiln_misc_upsample_infer(kiln_infer_ctx *ctx) { return resize_common_infer(ctx, true); }
