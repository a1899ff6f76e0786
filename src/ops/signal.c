/* Ops of the "signal" family (opset 17; DFT 20): DFT, STFT, the Blackman / Hamming /
 * Hann windows and MelWeightMatrix.
 *
 * Everything is computed in double and rounded to the output dtype once.
 * The DFT is the naive O(n^2) sum: this is the reference, not the fast path.
 * Twiddle angles are reduced modulo the transform length first
 * ((j*k) mod n), so long transforms lose no accuracy to large angles. */
#include "ops/op.h"

#include <math.h>

#define SIGNAL_PI 3.14159265358979323846

/* A scalar (one-element) int32/int64 input as int64. */
static kiln_status_t scalar_int_input(const kiln_tensor *t, int idx, const char *name, int64_t *out) {
  if (t->dtype != KILN_DTYPE_I32 && t->dtype != KILN_DTYPE_I64)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected int32 or int64, got %s", idx, name,
                      kiln_dtype_name(t->dtype));
  if (t->numel != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a scalar, got %lld elements", idx, name,
                      (long long)t->numel);
  *out = kiln_load_i64(t->data, t->dtype, 0);
  return NULL;
}

/* A scalar float input as double. */
static kiln_status_t scalar_float_input(const kiln_tensor *t, int idx, const char *name, double *out) {
  if (!kiln_dtype_is_float(t->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a float type, got %s", idx, name,
                      kiln_dtype_name(t->dtype));
  if (t->numel != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input %d (%s): expected a scalar, got %lld elements", idx, name,
                      (long long)t->numel);
  *out = kiln_load_f64(t->data, t->dtype, 0);
  return NULL;
}

/* Constant scalar int of input i at inference time, if known. */
static bool infer_const_int(const kiln_infer_ctx *ctx, int i, int64_t *out) {
  if (i >= ctx->n_inputs || !ctx->consts[i]) return false;
  const kiln_tensor *t = ctx->consts[i];
  if ((t->dtype != KILN_DTYPE_I32 && t->dtype != KILN_DTYPE_I64) || t->numel != 1) return false;
  *out = kiln_load_i64(t->data, t->dtype, 0);
  return true;
}

static bool is_signal_float(kiln_dtype dt) { return kiln_dtype_is_float(dt); }

/* output_datatype of the window ops and MelWeightMatrix: any int or float. */
static kiln_status_t output_datatype_attr(const kiln_node *node, kiln_dtype *out) {
  int64_t v = kiln_attr_int(node, "output_datatype", KILN_DTYPE_F32);
  if (!kiln_dtype_is_valid((int)v) || v != (int)v ||
      !(kiln_dtype_is_float((kiln_dtype)v) || kiln_dtype_is_int((kiln_dtype)v)))
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute output_datatype: %lld is not an integer or float dtype",
                      (long long)v);
  *out = (kiln_dtype)v;
  return NULL;
}

/* ---- DFT ------------------------------------------------------------------ */

/* One 1-D DFT of length n_fft over the first n_in complex samples (zero
 * padded or truncated to n_fft), writing the first n_out bins. The inverse
 * is scaled by 1/n_fft, as numpy's ifft. */
static void dft_1d(const double *in_re, const double *in_im, int64_t n_in, int64_t n_fft, bool inverse, int64_t n_out,
                   double *out_re, double *out_im) {
  double sign = inverse ? 1.0 : -1.0;
  int64_t n_used = KILN_MIN(n_in, n_fft);
  for (int64_t k = 0; k < n_out; k++) {
    double sr = 0, si = 0;
    int64_t m = 0; /* (j*k) mod n_fft, kept reduced as j advances */
    for (int64_t j = 0; j < n_used; j++, m = (m + k) % n_fft) {
      double ang = sign * 2.0 * SIGNAL_PI * (double)m / (double)n_fft;
      double c = cos(ang), s = sin(ang);
      double xr = in_re[j], xi = in_im[j];
      sr += xr * c - xi * s;
      si += xr * s + xi * c;
    }
    if (inverse) {
      sr /= (double)n_fft;
      si /= (double)n_fft;
    }
    out_re[k] = sr;
    out_im[k] = si;
  }
}

/* One inverse real DFT (IRFFT) of length n_fft from the one-sided spectrum
 * of n_in bins (bins past n_fft/2 ignored, missing ones zero): the full
 * spectrum is Hermitian, X[n-k] = conj(X[k]), and the imaginary parts of
 * the DC and (even n_fft) Nyquist bins do not contribute, as numpy's irfft.
 * Writes n_fft real samples, scaled by 1/n_fft. */
static void irfft_1d(const double *in_re, const double *in_im, int64_t n_in, int64_t n_fft, double *out) {
  int64_t half = n_fft / 2;
  for (int64_t t = 0; t < n_fft; t++) {
    double acc = n_in > 0 ? in_re[0] : 0.0;
    int64_t m = t % n_fft; /* (k*t) mod n_fft, kept reduced as k advances */
    for (int64_t k = 1; k <= half && k < n_in; k++, m = (m + t) % n_fft) {
      double ang = 2.0 * SIGNAL_PI * (double)m / (double)n_fft;
      double term = in_re[k] * cos(ang) - in_im[k] * sin(ang);
      acc += (n_fft % 2 == 0 && k == half) ? term : 2 * term;
    }
    out[t] = acc / (double)n_fft;
  }
}

/* Axis of DFT: opset 17 allows [0, r-2]; later opsets also count from the
 * back ([-r, -2]), which we accept too. */
static kiln_status_t dft_axis(int64_t axis, int rank, int *out) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute axis: %lld out of range for input rank %d (last dim is re/im)",
                      (long long)axis, rank);
  *out = (int)a;
  return NULL;
}

/* The axis: opset 17's attribute (default 1), opset 20's optional scalar
 * input 2 (default -2). */
static kiln_status_t dft_axis_of(const kiln_kernel_ctx *ctx, int rank, int *out) {
  if (ctx->opset < 20) {
    if (ctx->n_inputs > 2)
      return kiln_error(KILN_INVALID_MODEL, "has %d inputs; input 2 (axis) exists from opset 20 (node opset %d)",
                        ctx->n_inputs, ctx->opset);
    return dft_axis(kiln_attr_int(ctx->node, "axis", 1), rank, out);
  }
  int64_t axis = -2;
  kiln_tensor *axis_t = ctx->n_inputs > 2 ? kiln_kernel_input(ctx, 2) : NULL;
  if (axis_t) {
    if (axis_t->dtype != KILN_DTYPE_I64 || axis_t->numel != 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (axis): expected one int64, got %s with %lld elements",
                        kiln_dtype_name(axis_t->dtype), (long long)axis_t->numel);
    axis = ((const int64_t *)axis_t->data)[0];
  }
  return dft_axis(axis, rank, out);
}

static kiln_status_t dft_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *len_t = kiln_kernel_input(ctx, 1);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (!is_signal_float(x->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): expected a float type, got %s",
                      kiln_dtype_name(x->dtype));
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): expected rank >= 2 ([..., 1|2]), got %d", x->rank);
  int64_t comp = x->dims[x->rank - 1];
  if (comp != 1 && comp != 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): last dim must be 1 (real) or 2 (complex), got %lld",
                      (long long)comp);
  int axis = 0;
  KILN_TRY(dft_axis_of(ctx, x->rank, &axis));
  bool inverse = kiln_attr_int(ctx->node, "inverse", 0) != 0;
  bool onesided = kiln_attr_int(ctx->node, "onesided", 0) != 0;
  bool irfft = inverse && onesided; /* one-sided spectrum in, real signal out */
  int64_t n_in = x->dims[axis];
  int64_t n_fft = irfft ? 2 * (n_in - 1) : n_in;
  if (len_t) {
    KILN_TRY(scalar_int_input(len_t, 1, "dft_length", &n_fft));
    if (n_fft <= 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (dft_length): must be positive, got %lld", (long long)n_fft);
  }
  if (n_fft == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): signal axis %d is empty", axis);
  if (n_fft <= 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): %lld one-sided bins on axis %d give no inverse length",
                      (long long)n_in, axis);
  int64_t n_out = irfft ? n_fft : onesided ? n_fft / 2 + 1 : n_fft;

  int64_t odims[KILN_MAX_RANK];
  memcpy(odims, x->dims, sizeof odims);
  odims[axis] = n_out;
  odims[x->rank - 1] = irfft ? 1 : 2;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, x->dtype, x->rank, odims, &y));

  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->dims[d];
  for (int d = axis + 1; d < x->rank - 1; d++) inner *= x->dims[d];
  if (outer == 0 || inner == 0) return NULL;

  /* Gather one line into double buffers, transform, scatter. */
  double *buf = malloc(sizeof(double) * (size_t)(2 * n_in + 2 * n_out));
  if (!buf) return KILN_OOM();
  double *in_re = buf, *in_im = buf + n_in, *out_re = buf + 2 * n_in, *out_im = out_re + n_out;
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t j = 0; j < n_in; j++) {
        int64_t base = ((o * n_in + j) * inner + i) * comp;
        in_re[j] = kiln_load_f64(x->data, x->dtype, base);
        in_im[j] = comp == 2 ? kiln_load_f64(x->data, x->dtype, base + 1) : 0.0;
      }
      if (irfft) {
        irfft_1d(in_re, in_im, n_in, n_fft, out_re);
        for (int64_t k = 0; k < n_out; k++) kiln_store_f64(y->data, y->dtype, (o * n_out + k) * inner + i, out_re[k]);
        continue;
      }
      dft_1d(in_re, in_im, n_in, n_fft, inverse, n_out, out_re, out_im);
      for (int64_t k = 0; k < n_out; k++) {
        int64_t base = ((o * n_out + k) * inner + i) * 2;
        kiln_store_f64(y->data, y->dtype, base, out_re[k]);
        kiln_store_f64(y->data, y->dtype, base + 1, out_im[k]);
      }
    }
  }
  free(buf);
  return NULL;
}

static kiln_status_t dft_infer(kiln_infer_ctx *ctx) {
  const kiln_type *x = ctx->inputs[0];
  if (!x) return NULL;
  if (x->rank < 0) {
    kiln_infer_set(ctx, 0, x->dtype, -1, NULL);
    return NULL;
  }
  if (x->rank < 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input): expected rank >= 2 ([..., 1|2]), got %d", x->rank);
  int64_t axis_v = ctx->opset < 20 ? kiln_attr_int(ctx->node, "axis", 1) : -2;
  bool inverse = kiln_attr_int(ctx->node, "inverse", 0) != 0;
  bool onesided = kiln_attr_int(ctx->node, "onesided", 0) != 0;
  bool irfft = inverse && onesided;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[x->rank - 1] = irfft ? 1 : 2;
  if (ctx->opset >= 20 && ctx->n_inputs > 2 && ctx->inputs[2] && !infer_const_int(ctx, 2, &axis_v)) {
    for (int d = 0; d < x->rank - 1; d++) dims[d] = -1; /* the axis is known at run time only */
    kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
    return NULL;
  }
  int axis = 0;
  KILN_TRY(dft_axis(axis_v, x->rank, &axis));
  int64_t n = x->dims[axis];
  if (irfft && n >= 0) n = 2 * (n - 1);
  bool has_len = ctx->n_inputs > 1 && ctx->inputs[1];
  if (has_len && !infer_const_int(ctx, 1, &n)) n = -1;
  dims[axis] = n < 0 ? -1 : irfft ? n : onesided ? n / 2 + 1 : n;
  kiln_infer_set(ctx, 0, x->dtype, x->rank, dims);
  return NULL;
}

/* ---- STFT ----------------------------------------------------------------- */

static kiln_status_t stft_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *sig, *step_t, *win = kiln_kernel_input(ctx, 2), *flen_t = kiln_kernel_input(ctx, 3);
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &sig));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &step_t));
  if (!is_signal_float(sig->dtype))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (signal): expected a float type, got %s",
                      kiln_dtype_name(sig->dtype));
  if (sig->rank != 3 || (sig->dims[2] != 1 && sig->dims[2] != 2))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (signal): expected shape [batch, length, 1|2], got rank %d",
                      sig->rank);
  int64_t step = 0;
  KILN_TRY(scalar_int_input(step_t, 1, "frame_step", &step));
  if (step <= 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (frame_step): must be positive, got %lld", (long long)step);
  int64_t flen = -1;
  if (win) {
    if (win->dtype != sig->dtype)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (window): dtype %s differs from signal's %s",
                        kiln_dtype_name(win->dtype), kiln_dtype_name(sig->dtype));
    if (win->rank != 1)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (window): expected rank 1, got %d", win->rank);
    flen = win->dims[0];
  }
  if (flen_t) {
    int64_t v = 0;
    KILN_TRY(scalar_int_input(flen_t, 3, "frame_length", &v));
    if (win && v != flen)
      return kiln_error(KILN_INVALID_ARGUMENT, "input 3 (frame_length): %lld differs from the window length %lld",
                        (long long)v, (long long)flen);
    flen = v;
  }
  if (flen < 0) return kiln_error(KILN_INVALID_ARGUMENT, "STFT needs input 2 (window) or input 3 (frame_length)");
  int64_t batch = sig->dims[0], len = sig->dims[1], comp = sig->dims[2];
  if (flen <= 0 || flen > len)
    return kiln_error(KILN_INVALID_ARGUMENT, "frame length %lld must be in [1, signal length %lld]", (long long)flen,
                      (long long)len);
  bool onesided = kiln_attr_int(ctx->node, "onesided", 1) != 0;
  int64_t frames = (len - flen) / step + 1;
  int64_t bins = onesided ? flen / 2 + 1 : flen;
  int64_t odims[4] = {batch, frames, bins, 2};
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, sig->dtype, 4, odims, &y));
  if (batch == 0) return NULL;

  double *buf = malloc(sizeof(double) * (size_t)(2 * flen + 2 * bins));
  if (!buf) return KILN_OOM();
  double *in_re = buf, *in_im = buf + flen, *out_re = buf + 2 * flen, *out_im = out_re + bins;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t f = 0; f < frames; f++) {
      for (int64_t j = 0; j < flen; j++) {
        int64_t base = (b * len + f * step + j) * comp;
        double w = win ? kiln_load_f64(win->data, win->dtype, j) : 1.0;
        in_re[j] = w * kiln_load_f64(sig->data, sig->dtype, base);
        in_im[j] = comp == 2 ? w * kiln_load_f64(sig->data, sig->dtype, base + 1) : 0.0;
      }
      dft_1d(in_re, in_im, flen, flen, false, bins, out_re, out_im);
      for (int64_t k = 0; k < bins; k++) {
        int64_t base = ((b * frames + f) * bins + k) * 2;
        kiln_store_f64(y->data, y->dtype, base, out_re[k]);
        kiln_store_f64(y->data, y->dtype, base + 1, out_im[k]);
      }
    }
  }
  free(buf);
  return NULL;
}

static kiln_status_t stft_infer(kiln_infer_ctx *ctx) {
  const kiln_type *sig = ctx->inputs[0];
  if (!sig) return NULL;
  int64_t dims[4] = {-1, -1, -1, 2};
  if (sig->rank >= 0 && sig->rank != 3)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (signal): expected rank 3, got %d", sig->rank);
  if (sig->rank == 3) dims[0] = sig->dims[0];
  int64_t flen = -1, step = -1;
  const kiln_type *win = ctx->n_inputs > 2 ? ctx->inputs[2] : NULL;
  if (win && win->rank == 1) flen = win->dims[0];
  if (flen < 0) infer_const_int(ctx, 3, &flen);
  infer_const_int(ctx, 1, &step);
  bool onesided = kiln_attr_int(ctx->node, "onesided", 1) != 0;
  if (flen > 0) dims[2] = onesided ? flen / 2 + 1 : flen;
  if (flen > 0 && step > 0 && sig->rank == 3 && sig->dims[1] >= flen) dims[1] = (sig->dims[1] - flen) / step + 1;
  kiln_infer_set(ctx, 0, sig->dtype, 4, dims);
  return NULL;
}

/* ---- windows -------------------------------------------------------------- */

typedef enum { WINDOW_HANN, WINDOW_HAMMING, WINDOW_BLACKMAN } window_kind;

static double window_value(window_kind kind, int64_t n, int64_t denom) {
  if (denom == 0) return 1.0; /* a one-point symmetric window */
  double a = 2.0 * SIGNAL_PI * (double)n / (double)denom;
  switch (kind) {
    case WINDOW_HANN: return 0.5 - 0.5 * cos(a);
    case WINDOW_HAMMING: return 25.0 / 46.0 - (21.0 / 46.0) * cos(a);
    case WINDOW_BLACKMAN: return 0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a);
  }
  return 0.0;
}

static kiln_status_t window_kernel(kiln_kernel_ctx *ctx, window_kind kind) {
  kiln_tensor *size_t_;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &size_t_));
  int64_t size = 0;
  KILN_TRY(scalar_int_input(size_t_, 0, "size", &size));
  if (size < 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (size): must be >= 0, got %lld", (long long)size);
  kiln_dtype dt = KILN_DTYPE_F32;
  KILN_TRY(output_datatype_attr(ctx->node, &dt));
  bool periodic = kiln_attr_int(ctx->node, "periodic", 1) != 0;
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 1, &size, &y));
  int64_t denom = periodic ? size : size - 1;
  for (int64_t n = 0; n < size; n++) kiln_store_f64(y->data, dt, n, window_value(kind, n, denom));
  return NULL;
}

static kiln_status_t hann_kernel(kiln_kernel_ctx *ctx) { return window_kernel(ctx, WINDOW_HANN); }
static kiln_status_t hamming_kernel(kiln_kernel_ctx *ctx) { return window_kernel(ctx, WINDOW_HAMMING); }
static kiln_status_t blackman_kernel(kiln_kernel_ctx *ctx) { return window_kernel(ctx, WINDOW_BLACKMAN); }

static kiln_status_t window_infer(kiln_infer_ctx *ctx) {
  kiln_dtype dt = KILN_DTYPE_F32;
  KILN_TRY(output_datatype_attr(ctx->node, &dt));
  int64_t size = -1;
  if (!infer_const_int(ctx, 0, &size) || size < 0) size = -1;
  kiln_infer_set(ctx, 0, dt, 1, &size);
  return NULL;
}

/* ---- MelWeightMatrix ------------------------------------------------------ */

/* Triangular filters between num_mel_bins + 2 points equally spaced on the
 * mel scale (mel = 2595 log10(1 + hz/700)), each mapped to the spectrogram
 * bin floor((dft_length + 1) * hz / sample_rate). Output is
 * [dft_length/2 + 1, num_mel_bins]. */
static kiln_status_t mel_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *t[5];
  static const char *names[5] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
  for (int i = 0; i < 5; i++) KILN_TRY(kiln_kernel_require_input(ctx, i, &t[i]));
  int64_t n_mel = 0, dft_len = 0, rate = 0;
  double lo_hz = 0, hi_hz = 0;
  KILN_TRY(scalar_int_input(t[0], 0, names[0], &n_mel));
  KILN_TRY(scalar_int_input(t[1], 1, names[1], &dft_len));
  KILN_TRY(scalar_int_input(t[2], 2, names[2], &rate));
  KILN_TRY(scalar_float_input(t[3], 3, names[3], &lo_hz));
  KILN_TRY(scalar_float_input(t[4], 4, names[4], &hi_hz));
  if (n_mel <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (num_mel_bins): must be positive");
  if (dft_len <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (dft_length): must be positive");
  if (rate <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 2 (sample_rate): must be positive");
  if (!(lo_hz >= 0) || !(hi_hz >= lo_hz))
    return kiln_error(KILN_INVALID_ARGUMENT, "lower_edge_hertz %g and upper_edge_hertz %g: need 0 <= lower <= upper",
                      lo_hz, hi_hz);
  kiln_dtype dt = KILN_DTYPE_F32;
  KILN_TRY(output_datatype_attr(ctx->node, &dt));
  int64_t n_spec = dft_len / 2 + 1;
  int64_t odims[2] = {n_spec, n_mel};
  kiln_tensor *y;
  KILN_TRY(kiln_kernel_output_tensor(ctx, 0, dt, 2, odims, &y));
  int64_t *bins = malloc(sizeof(int64_t) * (size_t)(n_mel + 2));
  if (!bins) return KILN_OOM();
  double lo_mel = 2595.0 * log10(1.0 + lo_hz / 700.0);
  double hi_mel = 2595.0 * log10(1.0 + hi_hz / 700.0);
  double mel_step = (hi_mel - lo_mel) / (double)(n_mel + 2);
  for (int64_t i = 0; i < n_mel + 2; i++) {
    double hz = 700.0 * (pow(10.0, ((double)i * mel_step + lo_mel) / 2595.0) - 1.0);
    double bin = floor((double)(dft_len + 1) * hz / (double)rate);
    if (!(bin >= 0 && bin < (double)n_spec)) {
      free(bins);
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "upper_edge_hertz %g maps to spectrogram bin %g, beyond the %lld bins of dft_length %lld "
                        "at sample_rate %lld",
                        hi_hz, bin, (long long)n_spec, (long long)dft_len, (long long)rate);
    }
    bins[i] = (int64_t)bin;
  }
  /* Rising then falling edge; the falling edge overwrites the shared
   * center cell, as the ONNX definition does. */
  for (int64_t m = 0; m < n_mel; m++) {
    int64_t left = bins[m], center = bins[m + 1], right = bins[m + 2];
    if (center == left)
      kiln_store_f64(y->data, dt, center * n_mel + m, 1.0);
    else
      for (int64_t j = left; j <= center; j++)
        kiln_store_f64(y->data, dt, j * n_mel + m, (double)(j - left) / (double)(center - left));
    for (int64_t j = center; j < right; j++)
      kiln_store_f64(y->data, dt, j * n_mel + m, (double)(right - j) / (double)(right - center));
  }
  free(bins);
  return NULL;
}

static kiln_status_t mel_infer(kiln_infer_ctx *ctx) {
  kiln_dtype dt = KILN_DTYPE_F32;
  KILN_TRY(output_datatype_attr(ctx->node, &dt));
  int64_t dims[2] = {-1, -1}, v;
  if (infer_const_int(ctx, 1, &v) && v > 0) dims[0] = v / 2 + 1;
  if (infer_const_int(ctx, 0, &v) && v > 0) dims[1] = v;
  kiln_infer_set(ctx, 0, dt, 2, dims);
  return NULL;
}

static const kiln_op_def signal_ops[] = {
    {"", "DFT", 1, 3, 1, 1, dft_infer, dft_kernel, 0, .id = KILN_OP_DFT},
    {"", "STFT", 2, 4, 1, 1, stft_infer, stft_kernel, 0, .id = KILN_OP_STFT},
    {"", "HannWindow", 1, 1, 1, 1, window_infer, hann_kernel, 0, .id = KILN_OP_HannWindow},
    {"", "HammingWindow", 1, 1, 1, 1, window_infer, hamming_kernel, 0, .id = KILN_OP_HammingWindow},
    {"", "BlackmanWindow", 1, 1, 1, 1, window_infer, blackman_kernel, 0, .id = KILN_OP_BlackmanWindow},
    {"", "MelWeightMatrix", 5, 5, 1, 1, mel_infer, mel_kernel, 0, .id = KILN_OP_MelWeightMatrix},
};

const kiln_op_def *kiln_ops_signal(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(signal_ops);
  return signal_ops;
}
