/* test_vulkan_kernels.c — every GLSL generator of devices/vulkan/vk_kernels.h
 * run on a Vulkan device (lavapipe in CI) against float64 host references
 * written here: MatMul/Gemm (tiled and GEMV paths, transposes, broadcast
 * batches, every bias form, odd sizes, M = 1 / N = 1), Conv (groups,
 * strides, pads, dilations, 1-D/2-D/3-D, depthwise, pointwise), Max/Average
 * pooling (pads, ceil_mode, count_include_pad, dilations) and
 * kiln.FusedAttention (masks, broadcast batches, -inf blocks, many key
 * blocks), each with and without a hand-written epilogue
 * relu(raw + e[idx % C]) (C a specialization constant of the epilogue,
 * id VK_EPILOGUE_SPEC_BASE). Every kernel is created with its generator's
 * specialization constants (src.spec) and the epilogue's. Pairs of kernels
 * of one structure but different sizes must have byte-identical sources
 * (and both pass); vec4 global loads in the tiled contraction are checked
 * to be taken exactly when the shapes allow them.
 *
 * Then every case again in fp16 storage (desc.fp16: every tensor binding
 * float16_t, converted on the host here with kiln_f32_to_f16 /
 * kiln_f16_to_f32) on standard-normal inputs, checked twice:
 *  - exactly what the kernel owes: against the float64 reference on the
 *    half-rounded inputs the device sees, within the f32 tolerance plus
 *    2^-11 |ref| (the one rounding of the result to half when stored); for
 *    the tiled contraction (gemm*, conv* kernels: MatMul/Gemm, implicit-GEMM
 *    Conv), which computes each run of 4 consecutive k's in half and adds
 *    the run's sum to an f32 accumulator, plus the runs' error:
 *      4 * 2^-11 * sum|terms|  (a run's 4 products and 3 partial sums are
 *        each rounded to half once, by at most 2^-11 of a value bounded by
 *        the run's sum of |a||b|, with round to nearest as on lavapipe,
 *        NVIDIA, AMD and Intel; summed over the runs that is sum|terms|)
 *      + K * 2^-24  (those at most 7 roundings per run are each also off
 *        by up to 2^-25 absolute where the value is subnormal in half;
 *        K/4 runs).
 *    Nothing in the bound grows with K relative to sum|terms|: a kernel
 *    that accumulated all of K in half, or staged in a narrower type,
 *    would fail (fp16_long_k_case: K = 4096 of positive terms, where a half
 *    accumulator loses far more than the 5 * 2^-11 relative allowed);
 *  - end to end: against the float64 reference on the original f32 inputs,
 *    within 1e-2 |ref| + max(1e-2, B) with B = 2^-10 sum|terms| (the inputs'
 *    rounding bounds the error by that, which is at most sqrt(K) 2^-11
 *    sum|terms| for K >= 4), plus the runs' 4 * 2^-11 sum|terms| in the
 *    tiled contraction.
 * and a GEMV whose products are exact in f32 but not in half (half of
 * them ties) checks that stores round to nearest even, bit for bit.
 *
 * Exit 77 (skipped) only when kiln was built without Vulkan or no Vulkan
 * device exists. `--bench` also times the GEMM at 512^3 and 1024^3 (f32 and fp16).
 * Set KILN_VULKAN_VALIDATION=1 to run under the validation layer; any
 * validation error fails the test. */
#if !KILN_HAVE_VULKAN
#include <stdio.h>
int main(void) {
  printf("SKIP: kiln built without Vulkan (KILN_HAVE_VULKAN)\n");
  return 77;
}
#else

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/vulkan/vk_kernels.h"
#include "devices/vulkan/vk_runtime.h"
#include "tensor/dtype.h"

static vk_context *g_ctx;
static vk_device_props g_dev;   /* the device's real properties */
static vk_device_props g_props; /* what the generators are told (a profile within g_dev's limits) */
static int g_cases, g_failures;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static bool g_fp16; /* this pass runs the generators with desc.fp16 */
static bool g_positive; /* fp16 pass: rnd_array draws uniform [0.25, 1) instead (sums that grow with K) */
static double g_worst_abs, g_worst_rel; /* fp16 pass: largest end-to-end errors (absolute; relative to max|ref|) */

static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static float rnd_float(void) { return (float)((double)(rnd() >> 11) / (double)(1ull << 53) * 2.0 - 1.0); }

/* Standard normal (Box-Muller), for the fp16 pass. */
static float rnd_normal(void) {
  double u1 = ((double)(rnd() >> 11) + 1.0) / (double)(1ull << 53), u2 = (double)(rnd() >> 11) / (double)(1ull << 53);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static float *rnd_array(size_t n) {
  float *a = malloc((n ? n : 1) * sizeof(float));
  if (!a) abort();
  for (size_t i = 0; i < n; i++)
    a[i] = !g_fp16 ? rnd_float() : g_positive ? (float)(0.625 + 0.375 * rnd_float()) : rnd_normal();
  return a;
}

/* A copy of a rounded to half and back: what an fp16 kernel reads (NULL stays NULL). */
static float *round16(const float *a, size_t n) {
  if (!a) return NULL;
  float *r = malloc((n ? n : 1) * sizeof(float));
  if (!r) abort();
  for (size_t i = 0; i < n; i++) r[i] = kiln_f16_to_f32(kiln_f32_to_f16(a[i]));
  return r;
}

static double *zeros(size_t n) {
  double *a = calloc(n ? n : 1, sizeof(double));
  if (!a) abort();
  return a;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- running a kernel --------------------------------------------------------------- */

/* One binding: host data uploaded before, read back after when `out`. */
typedef struct tbuf {
  float *host;
  size_t n;
  bool out;
} tbuf;

static bool check_status(kiln_status_t st, const char *what) {
  if (!st) return true;
  printf("FAIL %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  g_failures++;
  return false;
}

/* The specialization constants of a kernel: the generator's (src->spec)
 * then the epilogue's (epi_spec[0..n_epi), ids from VK_EPILOGUE_SPEC_BASE).
 * Returns a malloc'd array (the caller frees it) of *n entries. */
static vk_spec_const *kernel_spec(const vk_kernel_src *src, const vk_spec_const *epi_spec, int n_epi, int *n) {
  *n = src->spec.n + n_epi;
  vk_spec_const *sc = malloc((size_t)(*n ? *n : 1) * sizeof *sc);
  if (!sc) abort();
  for (int i = 0; i < src->spec.n; i++)
    sc[i] = (vk_spec_const){(uint32_t)(src->spec.first_id + i), (uint32_t)src->spec.values[i]};
  for (int i = 0; i < n_epi; i++) sc[src->spec.n + i] = epi_spec[i];
  return sc;
}

/* Compiles src with its specialization constants and the epilogue's
 * (epi_spec, n_epi), binds bufs[0..n) to bindings 0..n-1, dispatches once
 * and reads the outputs back. */
static bool launch_spec(const char *what, const vk_kernel_src *src, const vk_spec_const *epi_spec, int n_epi, tbuf *bufs,
                        int n) {
  if (src->n_buffers != n) {
    printf("FAIL %s: kernel wants %d buffers, test binds %d\n", what, src->n_buffers, n);
    g_failures++;
    return false;
  }
  int n_spec;
  vk_spec_const *spec = kernel_spec(src, epi_spec, n_epi, &n_spec);
  vk_kernel_desc kd = {src->name, src->glsl, src->n_buffers, src->push_bytes, spec, n_spec};
  vk_kernel *k = NULL;
  bool created = check_status(vk_kernel_create(g_ctx, &kd, &k), what);
  free(spec);
  if (!created) {
    fprintf(stderr, "%s\n", src->glsl);
    return false;
  }
  vk_buffer *vb[16] = {0};
  uint16_t *half[16] = {0}; /* fp16: the bindings' contents as half, 4-byte padded */
  vk_stream *s = NULL;
  bool ok = true;
  /* f32: 4 bytes an element; fp16: 2, the binding rounded up to 4 bytes
   * (as the plan allocates them) */
  size_t bytes[16];
  for (int i = 0; i < n; i++) bytes[i] = g_fp16 ? (bufs[i].n * 2 + 3) / 4 * 4 : bufs[i].n * 4;
  for (int i = 0; i < n && ok; i++) {
    ok = check_status(vk_buffer_alloc(g_ctx, VK_MEM_DEVICE, bytes[i] ? bytes[i] : 4, &vb[i]), what);
    if (ok && g_fp16) {
      half[i] = calloc(bytes[i] / 2 + 2, 2);
      if (!half[i]) abort();
      for (size_t e = 0; e < bufs[i].n; e++) half[i][e] = kiln_f32_to_f16(bufs[i].host[e]);
    }
  }
  ok = ok && check_status(vk_stream_create(g_ctx, &s), what);
  ok = ok && check_status(vk_stream_begin(s), what);
  for (int i = 0; i < n && ok; i++)
    if (bufs[i].n)
      ok = check_status(vk_stream_upload(s, vb[i], 0, g_fp16 ? (const void *)half[i] : (const void *)bufs[i].host, bytes[i]),
                        what);
  if (ok && src->groups[0] && src->groups[1] && src->groups[2])
    ok = check_status(vk_stream_dispatch(s, k, vb, NULL, src->groups[0], src->groups[1], src->groups[2]), what);
  for (int i = 0; i < n && ok; i++)
    if (bufs[i].out && bufs[i].n)
      ok = check_status(vk_stream_readback(s, g_fp16 ? (void *)half[i] : (void *)bufs[i].host, vb[i], 0, bytes[i]), what);
  ok = ok && check_status(vk_stream_end(s), what);
  uint64_t v = 0;
  ok = ok && check_status(vk_submit(g_ctx, &s, 1, &v), what);
  ok = ok && check_status(vk_wait(g_ctx, v), what);
  for (int i = 0; i < n && ok && g_fp16; i++)
    if (bufs[i].out)
      for (size_t e = 0; e < bufs[i].n; e++) bufs[i].host[e] = kiln_f16_to_f32(half[i][e]);
  if (s) vk_stream_destroy(g_ctx, s);
  for (int i = 0; i < n; i++) {
    vk_buffer_free(g_ctx, vb[i]);
    free(half[i]);
  }
  vk_kernel_destroy(g_ctx, k);
  return ok;
}

static bool launch(const char *what, const vk_kernel_src *src, tbuf *bufs, int n) {
  return launch_spec(what, src, NULL, 0, bufs, n);
}

/* got vs ref, with mag[i] the sum of |terms| of element i (rounding scale). */
static void compare(const char *what, const char *kname, const float *got, const double *ref, const double *mag,
                    size_t n) {
  double worst = 0;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-4 * fabs(ref[i]) + 2e-6 * (mag ? mag[i] : 0) + 1e-5;
    double err = fabs((double)got[i] - ref[i]);
    bool same_special = (isnan(ref[i]) && isnan(got[i])) || (isinf(ref[i]) && got[i] == ref[i]);
    if (!same_special && !(err <= tol)) {
      if (!bad) first = i;
      bad++;
    }
    if (!same_special && err / (tol / 1e-4) > worst) worst = err / (tol / 1e-4);
  }
  g_cases++;
  if (bad) {
    g_failures++;
    printf("FAIL %-44s %-34s %zu/%zu wrong, first [%zu] got %.7g want %.7g\n", what, kname, bad, n, first,
           (double)got[first], ref[first]);
  } else {
    printf("ok   %-44s %-34s max err/tol-scale %.2e\n", what, kname, worst);
  }
}

/* The fp16 pass (see the top): ref16/mag16 from the half-rounded inputs,
 * ref/mag from the f32 inputs (mag NULL: not a contraction); half_k: the
 * contraction length K when the kernel computes runs of 4 products in half
 * (the tiled contraction), else 0. */
static void compare16(const char *what, const char *kname, const float *got, const double *ref16, const double *mag16,
                      const double *ref, const double *mag, int64_t half_k, size_t n) {
  double worst = 0, worst_abs = 0, worst_rel = 0, scale = 0;
  size_t bad = 0, first = 0, bad2 = 0, first2 = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > scale) scale = fabs(ref[i]);
  for (size_t i = 0; i < n; i++) {
    bool special16 = (isnan(ref16[i]) && isnan(got[i])) || (isinf(ref16[i]) && got[i] == ref16[i]);
    bool special = (isnan(ref[i]) && isnan(got[i])) || (isinf(ref[i]) && got[i] == ref[i]);
    double f32tol = 1e-4 * fabs(ref16[i]) + 2e-6 * (mag16 ? mag16[i] : 0) + 1e-5;
    double runs = half_k ? ldexp(4.0 * mag16[i], -11) + ldexp((double)half_k, -24) : 0;
    double tol = 1.001 * (f32tol + ldexp(fabs(ref16[i]), -11) + runs) + ldexp(1.0, -25);
    double err = fabs((double)got[i] - ref16[i]);
    if (!special16 && !(err <= tol)) {
      if (!bad) first = i;
      bad++;
    }
    if (!special16 && err / (tol / 1e-4) > worst) worst = err / (tol / 1e-4);
    double bound = mag ? ldexp(mag[i], -10) + (half_k ? ldexp(4.0 * mag[i], -11) : 0) : 0;
    double tol2 = 1e-2 * fabs(ref[i]) + (bound > 1e-2 ? bound : 1e-2);
    double err2 = fabs((double)got[i] - ref[i]);
    if (!special && !(err2 <= tol2)) {
      if (!bad2) first2 = i;
      bad2++;
    }
    if (!special && isfinite(err2)) {
      if (err2 > worst_abs) worst_abs = err2;
      if (scale > 0 && err2 / scale > worst_rel) worst_rel = err2 / scale;
    }
  }
  if (worst_abs > g_worst_abs) g_worst_abs = worst_abs;
  if (worst_rel > g_worst_rel) g_worst_rel = worst_rel;
  g_cases++;
  if (bad || bad2) {
    g_failures++;
    if (bad)
      printf("FAIL %-44s %-34s %zu/%zu off the half-input reference, first [%zu] got %.7g want %.7g\n", what, kname, bad,
             n, first, (double)got[first], ref16[first]);
    if (bad2)
      printf("FAIL %-44s %-34s %zu/%zu off the f32-input reference, first [%zu] got %.7g want %.7g\n", what, kname, bad2,
             n, first2, (double)got[first2], ref[first2]);
  } else {
    printf("ok   %-44s %-34s max err/tol-scale %.2e; vs f32 inputs: abs %.1e, /max|ref| %.1e\n", what, kname, worst,
           worst_abs, worst_rel);
  }
}

/* ---- the test epilogue: relu(raw + e[idx % C]) -------------------------------------- */

typedef struct test_epi {
  vk_epilogue epi;
  char decls[384], func[256];
  vk_spec_const spec[1]; /* C, as the renderer's epilogues pass their sizes */
  float *e;
  int c;
} test_epi;

/* C is a specialization constant (id VK_EPILOGUE_SPEC_BASE, default 1):
 * a kernel created without the epilogue's constants computes idx % 1 and fails. */
static void epi_make(test_epi *t, int binding, int c) {
  t->c = c;
  /* fp16: the epilogue's own buffers are half too (as the renderer declares them) */
  snprintf(t->decls, sizeof t->decls,
           "layout(std430, set = 0, binding = %d) readonly buffer ep_buf { %s ep_e[]; };\n"
           "layout(constant_id = %d) const int ep_c = 1;",
           binding, g_fp16 ? "float16_t" : "float", VK_EPILOGUE_SPEC_BASE);
  snprintf(t->func, sizeof t->func, "float ep_fn(int idx, float raw) { return max(raw + %sep_e[idx %% ep_c]%s, 0.0); }",
           g_fp16 ? "float(" : "", g_fp16 ? ")" : "");
  t->epi = (vk_epilogue){t->decls, t->func, "ep_fn", binding, 1};
  t->spec[0] = (vk_spec_const){VK_EPILOGUE_SPEC_BASE, (uint32_t)c};
  t->e = rnd_array((size_t)c);
}

/* e: the epilogue's operand as the reference sees it (t->e, or its half rounding). */
static void epi_apply(const test_epi *t, const float *e, double *ref, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double v = ref[i] + e[i % (size_t)t->c];
    ref[i] = v > 0 ? v : 0;
  }
}

/* The comparison of the current pass. r16 NULL in the f32 pass. */
typedef struct refs {
  double *ref, *mag, *ref16, *mag16;
  int64_t k; /* contractions: the length of each sum (K) */
} refs;

/* Kernels of the tiled contraction, which do half arithmetic in fp16 (by
 * their documented names: gemmTMxTN_..., conv<N>d_g...; not gemv_, dwconv). */
static bool half_runs(const char *kname) { return !strncmp(kname, "gemm", 4) || !strncmp(kname, "conv", 4); }

static void check(const char *what, const char *kname, const float *got, const refs *r, bool contraction, size_t n) {
  if (g_fp16)
    compare16(what, kname, got, r->ref16, contraction ? r->mag16 : NULL, r->ref, contraction ? r->mag : NULL,
              contraction && half_runs(kname) ? (r->k > 0 ? r->k : 1) : 0, n);
  else
    compare(what, kname, got, r->ref, contraction ? r->mag : NULL, n);
}

static refs refs_new(size_t n) {
  refs r = {zeros(n), zeros(n), NULL, NULL, 0};
  if (g_fp16) r.ref16 = zeros(n), r.mag16 = zeros(n);
  return r;
}

static void refs_free(refs *r) { free(r->ref), free(r->mag), free(r->ref16), free(r->mag16); }

static void refs_epilogue(const test_epi *t, refs *r, size_t n) {
  epi_apply(t, t->e, r->ref, n);
  if (g_fp16) {
    float *e16 = round16(t->e, (size_t)t->c);
    epi_apply(t, e16, r->ref16, n);
    free(e16);
  }
}

/* Appends the test epilogue's table to the kernel's own buffers bufs[0..n)
 * (bufs has room for one more) when with_epi, runs src and checks the n_out
 * outputs at y against r, with the epilogue applied to the reference. */
static void run_and_check(const char *name, const vk_kernel_src *src, test_epi *te, bool with_epi, tbuf *bufs, int n,
                          const float *y, size_t n_out, refs *r, bool contraction) {
  if (with_epi) bufs[n++] = (tbuf){te->e, (size_t)te->c, false};
  if (launch_spec(name, src, te->spec, with_epi ? 1 : 0, bufs, n)) {
    if (with_epi) refs_epilogue(te, r, n_out);
    check(name, src->name, y, r, contraction, n_out);
  }
}

static float *sentinel(size_t n) {
  float *a = malloc((n ? n : 1) * sizeof(float));
  if (!a) abort();
  for (size_t i = 0; i < n; i++) a[i] = 12345.0f;
  return a;
}

/* ---- MatMul / Gemm -------------------------------------------------------------------- */

static void ref_matmul(const vk_matmul_desc *d, const float *a, const float *b, const float *c, double *y, double *mag) {
  int64_t batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= d->batch[i];
  for (int64_t z = 0; z < batch; z++) {
    int64_t oa = d->a_offset, ob = d->b_offset, oc = d->bias_offset, t = z;
    for (int ax = d->n_batch - 1; ax >= 0; ax--) {
      int64_t i = t % d->batch[ax];
      t /= d->batch[ax];
      oa += i * d->a_batch_stride[ax];
      ob += i * d->b_batch_stride[ax];
      oc += i * d->bias_batch_stride[ax];
    }
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t j = 0; j < d->n; j++) {
        double acc = 0, mg = 0;
        for (int64_t k = 0; k < d->k; k++) {
          double av = a[oa + (d->trans_a ? k * d->m + i : i * d->k + k)];
          double bv = b[ob + (d->trans_b ? j * d->k + k : k * d->n + j)];
          acc += av * bv;
          mg += fabs(av * bv);
        }
        double v = d->alpha * acc;
        mg *= fabs(d->alpha);
        if (d->has_bias) {
          double cv = (double)d->beta * c[oc + i * d->bias_stride_m + j * d->bias_stride_n];
          v += cv;
          mg += fabs(cv);
        }
        y[z * d->m * d->n + i * d->n + j] = v;
        mag[z * d->m * d->n + i * d->n + j] = mg;
      }
  }
}

/* Operand sizes from the desc (extent of the furthest element). */
static size_t extent(int64_t off, int nb, const int64_t *batch, const int64_t *str, int64_t inner) {
  int64_t e = off + inner;
  for (int i = 0; i < nb; i++) e += (batch[i] - 1) * str[i];
  return (size_t)(e > 0 ? e : 0);
}

static void test_matmul(const char *what, const vk_matmul_desc *d, bool with_epi) {
  int64_t batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= d->batch[i];
  size_t na = extent(d->a_offset, d->n_batch, d->batch, d->a_batch_stride, d->m * d->k);
  size_t nbb = extent(d->b_offset, d->n_batch, d->batch, d->b_batch_stride, d->k * d->n);
  size_t nc = d->has_bias ? extent(d->bias_offset, d->n_batch, d->batch, d->bias_batch_stride,
                                   (d->m - 1) * d->bias_stride_m + (d->n - 1) * d->bias_stride_n + 1)
                          : 0;
  size_t ny = (size_t)(batch * d->m * d->n);
  float *a = rnd_array(na), *b = rnd_array(nbb), *c = rnd_array(nc), *y = sentinel(ny + (size_t)d->y_offset);
  refs r = refs_new(ny);
  r.k = d->k;
  ref_matmul(d, a, b, c, r.ref, r.mag);
  if (g_fp16) {
    float *a16 = round16(a, na), *b16 = round16(b, nbb), *c16 = round16(c, nc);
    ref_matmul(d, a16, b16, c16, r.ref16, r.mag16);
    free(a16), free(b16), free(c16);
  }
  test_epi te = {0};
  int own = d->has_bias ? 4 : 3;
  if (with_epi) epi_make(&te, own, (int)(d->n > 1 ? d->n : 7));
  vk_matmul_desc dd = *d;
  dd.fp16 = dd.fp16_arith = g_fp16;
  vk_kernel_src src;
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", what, with_epi ? " +epi" : "", g_fp16 ? " fp16" : "");
  if (check_status(vk_gen_matmul(&dd, &g_props, with_epi ? &te.epi : NULL, &src), name)) {
    tbuf bufs[5];
    int n = 0;
    bufs[n++] = (tbuf){a, na, false};
    bufs[n++] = (tbuf){b, nbb, false};
    if (d->has_bias) bufs[n++] = (tbuf){c, nc, false};
    bufs[n++] = (tbuf){y, ny + (size_t)d->y_offset, true};
    run_and_check(name, &src, &te, with_epi, bufs, n, y + d->y_offset, ny, &r, true);
    vk_kernel_src_free(&src);
  }
  free(a), free(b), free(c), free(y), free(te.e);
  refs_free(&r);
}

static void matmul_cases(void) {
  vk_matmul_desc d;
  for (int e = 0; e < 2; e++) {
    vk_matmul_desc_init(&d, 100, 70, 33);
    test_matmul("matmul 100x70x33", &d, e);
    vk_matmul_desc_init(&d, 64, 128, 64);
    test_matmul("matmul 64x128x64 (whole tiles)", &d, e);
    vk_matmul_desc_init(&d, 17, 5, 3);
    d.trans_b = true;
    d.has_bias = true;
    d.bias_stride_n = 1;
    d.alpha = 0.5f;
    d.beta = 2.0f;
    test_matmul("gemm 17x5x3 transB bias[n] a.5 b2", &d, e);
    vk_matmul_desc_init(&d, 130, 129, 65);
    d.trans_a = d.trans_b = true;
    d.has_bias = true;
    d.bias_stride_m = 129;
    d.bias_stride_n = 1;
    d.beta = -1.5f;
    test_matmul("gemm 130x129x65 transA/B bias[m,n]", &d, e);
    vk_matmul_desc_init(&d, 40, 50, 60);
    d.trans_a = true;
    d.has_bias = true;
    d.bias_stride_m = 1; /* C [m, 1] */
    d.alpha = 1.25f;
    test_matmul("gemm 40x50x60 transA bias[m,1]", &d, e);
    vk_matmul_desc_init(&d, 9, 31, 2);
    d.has_bias = true; /* scalar C */
    d.beta = 0.25f;
    test_matmul("gemm 9x31x2 scalar bias", &d, e);
    vk_matmul_desc_init(&d, 33, 47, 20);
    d.n_batch = 1;
    d.batch[0] = 3;
    d.a_batch_stride[0] = 33 * 20;
    d.b_batch_stride[0] = 0; /* B broadcast */
    test_matmul("matmul [3]x33x47x20, B broadcast", &d, e);
    vk_matmul_desc_init(&d, 19, 23, 29);
    d.n_batch = 2;
    d.batch[0] = 2;
    d.batch[1] = 3;
    d.a_batch_stride[0] = 19 * 29; /* A [2, 1, 19, 29] */
    d.a_batch_stride[1] = 0;
    d.b_batch_stride[0] = 0; /* B [3, 29, 23] */
    d.b_batch_stride[1] = 29 * 23;
    d.has_bias = true;
    d.bias_batch_stride[1] = 23; /* bias [3, 1, 23] */
    d.bias_stride_n = 1;
    d.a_offset = 5;
    d.b_offset = 3;
    d.bias_offset = 1;
    d.y_offset = 2;
    test_matmul("matmul [2,3] cross-broadcast + offsets", &d, e);
    vk_matmul_desc_init(&d, 1, 300, 77);
    d.n_batch = 2;
    d.batch[0] = 2;
    d.batch[1] = 3;
    d.a_batch_stride[0] = 3 * 77;
    d.a_batch_stride[1] = 77;
    d.b_batch_stride[1] = 77 * 300;
    test_matmul("gemv M=1 [2,3]x300x77 B bcast axis0", &d, e);
    vk_matmul_desc_init(&d, 1, 65, 1000);
    d.trans_b = true;
    d.has_bias = true;
    d.bias_stride_n = 1;
    test_matmul("gemv M=1 65x1000 transB bias", &d, e);
    vk_matmul_desc_init(&d, 300, 1, 77);
    d.trans_a = true;
    test_matmul("gemv N=1 300x77 transA", &d, e);
    vk_matmul_desc_init(&d, 70, 1, 513);
    d.has_bias = true;
    d.bias_stride_m = 1;
    test_matmul("gemv N=1 70x513 bias[m]", &d, e);
    vk_matmul_desc_init(&d, 1, 1, 1000);
    test_matmul("dot 1x1x1000", &d, e);
    vk_matmul_desc_init(&d, 1, 1, 1);
    test_matmul("1x1x1", &d, e);
    vk_matmul_desc_init(&d, 5, 6, 0);
    d.has_bias = true;
    d.bias_stride_n = 1;
    test_matmul("gemm K=0 (bias only)", &d, e);
    vk_matmul_desc_init(&d, 2, 3, 4);
    test_matmul("matmul 2x3x4", &d, e);
  }
  /* empty outputs: nothing to dispatch */
  vk_kernel_src src;
  vk_matmul_desc_init(&d, 0, 5, 3);
  g_cases++;
  if (check_status(vk_gen_matmul(&d, &g_props, NULL, &src), "matmul m=0")) {
    if (src.groups[0] || src.groups[1] || src.groups[2]) {
      printf("FAIL matmul m=0: %u x %u x %u workgroups, expected none\n", src.groups[0], src.groups[1], src.groups[2]);
      g_failures++;
    } else {
      printf("ok   matmul m=0 -> no workgroups\n");
    }
    vk_kernel_src_free(&src);
  }
  /* bad arguments are errors, not crashes */
  vk_matmul_desc_init(&d, 4, 4, 4);
  d.n_batch = 9;
  g_cases++;
  kiln_status_t st = vk_gen_matmul(&d, &g_props, NULL, &src);
  if (!st) {
    printf("FAIL matmul with 9 batch axes accepted\n");
    g_failures++;
    vk_kernel_src_free(&src);
  } else {
    printf("ok   matmul with 9 batch axes: %s\n", kiln_status_message(st));
    kiln_status_free(st);
  }
  vk_matmul_desc_init(&d, 4, 4, 4);
  test_epi te;
  epi_make(&te, 2, 4); /* wrong binding_base: the kernel has 3 own buffers */
  g_cases++;
  st = vk_gen_matmul(&d, &g_props, &te.epi, &src);
  if (!st) {
    printf("FAIL epilogue at the wrong binding accepted\n");
    g_failures++;
    vk_kernel_src_free(&src);
  } else {
    printf("ok   epilogue at the wrong binding: %s\n", kiln_status_message(st));
    kiln_status_free(st);
  }
  free(te.e);
}

/* ---- Conv ----------------------------------------------------------------------------- */

static void ref_conv(const vk_conv_desc *d, const float *x, const float *w, const float *bias, double *y,
                     double *mag) {
  int nsp = d->n_spatial;
  int64_t cig = d->in_channels / d->group, cog = d->out_channels / d->group;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
          pb[3] = {0, 0, 0};
  for (int i = 0; i < nsp; i++) { /* right-align into 3-D */
    int j = 3 - nsp + i;
    in[j] = d->in[i], out[j] = d->out[i], k[j] = d->kernel[i], st[j] = d->stride[i], dl[j] = d->dilation[i],
    pb[j] = d->pad_begin[i];
  }
  int64_t isp = in[0] * in[1] * in[2], osp = out[0] * out[1] * out[2], ksp = k[0] * k[1] * k[2];
  for (int64_t n = 0; n < d->batch; n++)
    for (int64_t co = 0; co < d->out_channels; co++) {
      int64_t g = co / cog;
      for (int64_t o0 = 0; o0 < out[0]; o0++)
        for (int64_t o1 = 0; o1 < out[1]; o1++)
          for (int64_t o2 = 0; o2 < out[2]; o2++) {
            double acc = bias ? bias[d->bias_offset + co] : 0, mg = fabs(acc);
            for (int64_t ci = 0; ci < cig; ci++)
              for (int64_t t0 = 0; t0 < k[0]; t0++)
                for (int64_t t1 = 0; t1 < k[1]; t1++)
                  for (int64_t t2 = 0; t2 < k[2]; t2++) {
                    int64_t i0 = o0 * st[0] + t0 * dl[0] - pb[0], i1 = o1 * st[1] + t1 * dl[1] - pb[1],
                            i2 = o2 * st[2] + t2 * dl[2] - pb[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    double xv = x[d->x_offset + (n * d->in_channels + g * cig + ci) * isp + (i0 * in[1] + i1) * in[2] + i2];
                    double wv = w[d->w_offset + (co * cig + ci) * ksp + (t0 * k[1] + t1) * k[2] + t2];
                    acc += xv * wv;
                    mg += fabs(xv * wv);
                  }
            int64_t yi = (n * d->out_channels + co) * osp + (o0 * out[1] + o1) * out[2] + o2;
            y[yi] = acc;
            mag[yi] = mg;
          }
    }
}

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t dl, int64_t pb, int64_t pe) {
  return (in + pb + pe - ((k - 1) * dl + 1)) / s + 1;
}

/* Fills a conv desc; pads given as begin/end per axis. */
static vk_conv_desc conv_desc(int nsp, int64_t n, int64_t ci, int64_t co, int64_t group, const int64_t *in,
                              const int64_t *k, const int64_t *s, const int64_t *dl, const int64_t *pb,
                              const int64_t *pe, bool bias) {
  vk_conv_desc d;
  memset(&d, 0, sizeof d);
  d.n_spatial = nsp;
  d.batch = n;
  d.in_channels = ci;
  d.out_channels = co;
  d.group = group;
  d.has_bias = bias;
  for (int i = 0; i < nsp; i++) {
    d.in[i] = in[i];
    d.kernel[i] = k[i];
    d.stride[i] = s[i];
    d.dilation[i] = dl[i];
    d.pad_begin[i] = pb[i];
    d.out[i] = conv_out(in[i], k[i], s[i], dl[i], pb[i], pe[i]);
  }
  return d;
}

static void test_conv(const char *what, const vk_conv_desc *d, bool with_epi) {
  size_t isp = 1, osp = 1, ksp = 1;
  for (int i = 0; i < d->n_spatial; i++) isp *= (size_t)d->in[i], osp *= (size_t)d->out[i], ksp *= (size_t)d->kernel[i];
  size_t nx = (size_t)d->x_offset + (size_t)(d->batch * d->in_channels) * isp;
  size_t nw = (size_t)d->w_offset + (size_t)(d->out_channels * (d->in_channels / d->group)) * ksp;
  size_t nb = d->has_bias ? (size_t)(d->bias_offset + d->out_channels) : 0;
  size_t ny = (size_t)(d->batch * d->out_channels) * osp;
  float *x = rnd_array(nx), *w = rnd_array(nw), *b = rnd_array(nb), *y = sentinel(ny + (size_t)d->y_offset);
  refs r = refs_new(ny);
  r.k = d->in_channels / d->group * (int64_t)ksp;
  ref_conv(d, x, w, d->has_bias ? b : NULL, r.ref, r.mag);
  if (g_fp16) {
    float *x16 = round16(x, nx), *w16 = round16(w, nw), *b16 = round16(b, nb);
    ref_conv(d, x16, w16, d->has_bias ? b16 : NULL, r.ref16, r.mag16);
    free(x16), free(w16), free(b16);
  }
  test_epi te = {0};
  int own = d->has_bias ? 4 : 3;
  if (with_epi) epi_make(&te, own, (int)d->out_channels);
  char why[256];
  if (!vk_conv_supported(d, &g_props, why, sizeof why)) {
    printf("FAIL %s: not supported: %s\n", what, why);
    g_failures++;
  }
  vk_conv_desc dd = *d;
  dd.fp16 = dd.fp16_arith = g_fp16;
  vk_kernel_src src;
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", what, with_epi ? " +epi" : "", g_fp16 ? " fp16" : "");
  if (check_status(vk_gen_conv(&dd, &g_props, with_epi ? &te.epi : NULL, &src), name)) {
    tbuf bufs[5];
    int n = 0;
    bufs[n++] = (tbuf){x, nx, false};
    bufs[n++] = (tbuf){w, nw, false};
    if (d->has_bias) bufs[n++] = (tbuf){b, nb, false};
    bufs[n++] = (tbuf){y, ny + (size_t)d->y_offset, true};
    run_and_check(name, &src, &te, with_epi, bufs, n, y + d->y_offset, ny, &r, true);
    vk_kernel_src_free(&src);
  }
  free(x), free(w), free(b), free(y), free(te.e);
  refs_free(&r);
}

#define A(...) ((const int64_t[]){__VA_ARGS__})

static void conv_cases(void) {
  for (int e = 0; e < 2; e++) {
    vk_conv_desc d;
    d = conv_desc(2, 1, 3, 4, 1, A(9, 9), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("conv2d 1x3x9x9->4 k3 p1 bias", &d, e);
    d = conv_desc(2, 2, 4, 6, 2, A(10, 11), A(3, 2), A(2, 1), A(1, 2), A(1, 0), A(2, 1), false);
    test_conv("conv2d g2 k3x2 s2x1 d1x2 p(1,0|2,1)", &d, e);
    d = conv_desc(2, 1, 3, 8, 1, A(32, 32), A(7, 7), A(2, 2), A(1, 1), A(3, 3), A(3, 3), true);
    test_conv("conv2d stem 3->8 k7 s2 p3", &d, e);
    d = conv_desc(2, 2, 24, 40, 1, A(7, 7), A(1, 1), A(1, 1), A(1, 1), A(0, 0), A(0, 0), true);
    test_conv("conv2d pointwise 2x24x7x7->40", &d, e);
    d = conv_desc(2, 1, 16, 16, 1, A(28, 28), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("conv2d 16->16 28x28 k3 p1", &d, e);
    d = conv_desc(2, 1, 12, 18, 3, A(8, 9), A(3, 3), A(2, 2), A(1, 1), A(0, 1), A(1, 0), true);
    test_conv("conv2d g3 s2 asym pads", &d, e);
    d = conv_desc(2, 1, 256, 64, 1, A(14, 14), A(1, 1), A(1, 1), A(1, 1), A(0, 0), A(0, 0), true);
    test_conv("conv2d ResNet 1x1 256->64 14x14", &d, e);
    d = conv_desc(2, 1, 64, 64, 1, A(28, 28), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("conv2d ResNet 3x3 s2 64->64 28x28", &d, e);
    d = conv_desc(2, 1, 8, 16, 8, A(10, 10), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), false);
    test_conv("conv2d depth-multiplier 2 (g8, 8->16)", &d, e);
    /* depthwise */
    d = conv_desc(2, 1, 32, 32, 32, A(14, 14), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("dwconv 32x14x14 k3 s1 p1", &d, e);
    d = conv_desc(2, 2, 16, 16, 16, A(15, 15), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("dwconv 2x16x15x15 k3 s2 p1", &d, e);
    d = conv_desc(2, 1, 96, 96, 96, A(56, 56), A(3, 3), A(2, 2), A(1, 1), A(0, 0), A(1, 1), true);
    test_conv("dwconv 96x56x56 k3 s2 p(0|1) (MobileNet)", &d, e);
    d = conv_desc(2, 1, 8, 8, 8, A(12, 13), A(5, 5), A(1, 1), A(2, 2), A(2, 4), A(2, 4), false);
    test_conv("dwconv k5 d2 p(2,4)", &d, e);
    d = conv_desc(2, 1, 4, 4, 4, A(7, 7), A(7, 7), A(1, 1), A(1, 1), A(3, 3), A(3, 3), true);
    test_conv("dwconv k7 7x7 p3", &d, e);
    d = conv_desc(2, 1, 960, 960, 960, A(7, 7), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
    test_conv("dwconv 960x7x7 k3 p1", &d, e);
    /* 1-D and 3-D */
    d = conv_desc(1, 2, 3, 5, 1, A(20), A(4), A(2), A(2), A(1), A(1), true);
    test_conv("conv1d k4 s2 d2 p1", &d, e);
    d = conv_desc(1, 1, 6, 6, 6, A(33), A(3), A(1), A(1), A(1), A(1), true);
    test_conv("dwconv1d 6x33 k3 p1", &d, e);
    d = conv_desc(3, 1, 2, 3, 1, A(5, 6, 7), A(3, 2, 3), A(1, 2, 1), A(1, 1, 2), A(1, 0, 1), A(1, 1, 1), true);
    test_conv("conv3d k3x2x3 s1x2x1 d1x1x2", &d, e);
    d = conv_desc(2, 1, 5, 7, 1, A(6, 6), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
    d.x_offset = 3;
    d.w_offset = 5;
    d.bias_offset = 2;
    d.y_offset = 7;
    test_conv("conv2d with buffer offsets", &d, e);
  }
  vk_conv_desc bad;
  memset(&bad, 0, sizeof bad);
  bad.n_spatial = 4;
  char why[256] = "";
  g_cases++;
  if (vk_conv_supported(&bad, &g_props, why, sizeof why) || !why[0]) {
    printf("FAIL conv with 4 spatial axes reported supported\n");
    g_failures++;
  } else {
    printf("ok   vk_conv_supported(4-D) = false: %s\n", why);
  }
}

/* ---- pooling ------------------------------------------------------------------------- */

static void ref_pool(const vk_pool_desc *d, const float *x, double *y) {
  int nsp = d->n_spatial;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
          pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  for (int i = 0; i < nsp; i++) {
    int j = 3 - nsp + i;
    in[j] = d->in[i], out[j] = d->out[i], k[j] = d->kernel[i], st[j] = d->stride[i], dl[j] = d->dilation[i],
    pb[j] = d->pad_begin[i], pe[j] = d->pad_end[i];
  }
  int64_t isp = in[0] * in[1] * in[2], yi = 0;
  for (int64_t pl = 0; pl < d->batch * d->channels; pl++)
    for (int64_t o0 = 0; o0 < out[0]; o0++)
      for (int64_t o1 = 0; o1 < out[1]; o1++)
        for (int64_t o2 = 0; o2 < out[2]; o2++, yi++) {
          double acc = d->kind == VK_POOL_MAX ? -INFINITY : 0;
          int64_t cnt = 0;
          for (int64_t t0 = 0; t0 < k[0]; t0++)
            for (int64_t t1 = 0; t1 < k[1]; t1++)
              for (int64_t t2 = 0; t2 < k[2]; t2++) {
                int64_t p[3] = {o0 * st[0] + t0 * dl[0] - pb[0], o1 * st[1] + t1 * dl[1] - pb[1],
                                o2 * st[2] + t2 * dl[2] - pb[2]};
                bool inside = true, padded = true;
                for (int i = 0; i < 3; i++) {
                  if (p[i] < 0 || p[i] >= in[i]) inside = false;
                  if (p[i] < -pb[i] || p[i] >= in[i] + pe[i]) padded = false;
                }
                if (d->count_include_pad && padded) cnt++;
                if (!inside) continue;
                double v = x[d->x_offset + pl * isp + (p[0] * in[1] + p[1]) * in[2] + p[2]];
                if (d->kind == VK_POOL_MAX) {
                  if (v > acc) acc = v;
                } else {
                  acc += v;
                  if (!d->count_include_pad) cnt++;
                }
              }
          y[yi] = d->kind == VK_POOL_MAX ? acc : (cnt ? acc / (double)cnt : NAN);
        }
}

/* ONNX output size (ceil_mode like kiln_window_init in ops/window.c). */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t dl, int64_t pb, int64_t pe, bool ceil_mode) {
  int64_t num = in + pb + pe - ((k - 1) * dl + 1);
  int64_t out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && out > 1 && (out - 1) * s >= in + pb) out--;
  return out;
}

static vk_pool_desc pool_desc(vk_pool_kind kind, int nsp, int64_t n, int64_t c, const int64_t *in, const int64_t *k,
                              const int64_t *s, const int64_t *dl, const int64_t *pb, const int64_t *pe, bool ceil_mode,
                              bool count_pad) {
  vk_pool_desc d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  d.n_spatial = nsp;
  d.batch = n;
  d.channels = c;
  d.count_include_pad = count_pad;
  for (int i = 0; i < nsp; i++) {
    d.in[i] = in[i], d.kernel[i] = k[i], d.stride[i] = s[i], d.dilation[i] = dl[i], d.pad_begin[i] = pb[i],
    d.pad_end[i] = pe[i];
    d.out[i] = pool_out(in[i], k[i], s[i], dl[i], pb[i], pe[i], ceil_mode);
  }
  return d;
}

static void test_pool_desc(const char *what, const vk_pool_desc *pd, bool with_epi) {
  vk_pool_desc d = *pd;
  int64_t c = d.channels;
  size_t isp = 1, osp = 1;
  for (int i = 0; i < d.n_spatial; i++) isp *= (size_t)d.in[i], osp *= (size_t)d.out[i];
  size_t nx = (size_t)d.x_offset + (size_t)(d.batch * c) * isp, ny = (size_t)(d.batch * c) * osp;
  size_t yo = (size_t)d.y_offset;
  float *x = rnd_array(nx), *y = sentinel(ny + yo);
  refs r = refs_new(ny);
  ref_pool(&d, x, r.ref);
  if (g_fp16) {
    float *x16 = round16(x, nx);
    ref_pool(&d, x16, r.ref16);
    free(x16);
  }
  test_epi te = {0};
  if (with_epi) epi_make(&te, 2, (int)c);
  d.fp16 = g_fp16;
  vk_kernel_src src;
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", what, with_epi ? " +epi" : "", g_fp16 ? " fp16" : "");
  if (check_status(vk_gen_pool(&d, &g_props, with_epi ? &te.epi : NULL, &src), name)) {
    tbuf bufs[3] = {{x, nx, false}, {y, ny + yo, true}};
    run_and_check(name, &src, &te, with_epi, bufs, 2, y + yo, ny, &r, false);
    vk_kernel_src_free(&src);
  }
  free(x), free(y), free(te.e);
  refs_free(&r);
}

static void test_pool(const char *what, vk_pool_kind kind, int nsp, int64_t n, int64_t c, const int64_t *in,
                      const int64_t *k, const int64_t *s, const int64_t *dl, const int64_t *pb, const int64_t *pe,
                      bool ceil_mode, bool count_pad, bool with_epi) {
  vk_pool_desc d = pool_desc(kind, nsp, n, c, in, k, s, dl, pb, pe, ceil_mode, count_pad);
  test_pool_desc(what, &d, with_epi);
}

static void pool_cases(void) {
  for (int e = 0; e < 2; e++) {
    test_pool("maxpool2d k3 s2 p1 (ResNet)", VK_POOL_MAX, 2, 1, 8, A(56, 56), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), false, false, e);
    test_pool("maxpool2d k2 s2 ceil 7x9", VK_POOL_MAX, 2, 2, 3, A(7, 9), A(2, 2), A(2, 2), A(1, 1), A(0, 0), A(0, 0), true, false, e);
    test_pool("maxpool2d k3 d2 p(2,1|0,2)", VK_POOL_MAX, 2, 1, 2, A(11, 10), A(3, 3), A(1, 2), A(2, 2), A(2, 1), A(0, 2), false, false, e);
    test_pool("avgpool2d k3 s2 p1 exclude-pad", VK_POOL_AVG, 2, 1, 4, A(9, 9), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), false, false, e);
    test_pool("avgpool2d k3 s2 p1 include-pad ceil", VK_POOL_AVG, 2, 1, 4, A(10, 8), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 0), true, true, e);
    test_pool("avgpool2d k2 s2 ceil exclude-pad", VK_POOL_AVG, 2, 2, 3, A(5, 7), A(2, 2), A(2, 2), A(1, 1), A(0, 0), A(0, 0), true, false, e);
    test_pool("maxpool1d k3 s1 d2 p2", VK_POOL_MAX, 1, 2, 3, A(17), A(3), A(1), A(2), A(2), A(2), false, false, e);
    test_pool("avgpool1d k4 s3 include-pad", VK_POOL_AVG, 1, 1, 5, A(20), A(4), A(3), A(1), A(2), A(1), false, true, e);
    test_pool("avgpool3d k2 s2 p(1,0,0)", VK_POOL_AVG, 3, 1, 2, A(5, 6, 4), A(2, 2, 2), A(2, 2, 2), A(1, 1, 1), A(1, 0, 0), A(0, 0, 1), false, false, e);
    test_pool("global avg 7x7 (as a pool)", VK_POOL_AVG, 2, 2, 16, A(7, 7), A(7, 7), A(1, 1), A(1, 1), A(0, 0), A(0, 0), false, false, e);
    test_pool("global max 5x3 (as a pool)", VK_POOL_MAX, 2, 1, 3, A(5, 3), A(5, 3), A(1, 1), A(1, 1), A(0, 0), A(0, 0), false, false, e);
  }
}

/* ---- attention ------------------------------------------------------------------------ */

static void ref_attention(const vk_attention_desc *d, const float *q, const float *k, const float *v,
                          const float *mask, double *y) {
  int64_t batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= d->batch[i];
  double *row = zeros((size_t)d->n);
  for (int64_t z = 0; z < batch; z++) {
    int64_t oq = d->q_offset, ok = d->k_offset, ov = d->v_offset, om = d->mask_offset, t = z;
    for (int ax = d->n_batch - 1; ax >= 0; ax--) {
      int64_t i = t % d->batch[ax];
      t /= d->batch[ax];
      oq += i * d->q_batch_stride[ax];
      ok += i * d->k_batch_stride[ax];
      ov += i * d->v_batch_stride[ax];
      om += i * d->mask_batch_stride[ax];
    }
    for (int64_t i = 0; i < d->m; i++) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < d->n; j++) {
        double acc = 0;
        for (int64_t e = 0; e < d->d; e++)
          acc += (double)q[oq + i * d->d + e] * k[ok + (d->transpose_k ? j * d->d + e : e * d->n + j)];
        acc *= d->scale;
        if (d->has_mask) acc += mask[om + i * d->mask_stride_m + j * d->mask_stride_n];
        row[j] = acc;
        if (acc > mx || j == 0) mx = acc;
      }
      double sum = 0;
      for (int64_t j = 0; j < d->n; j++) sum += (row[j] = exp(row[j] - mx));
      for (int64_t e = 0; e < d->dv; e++) {
        double acc = 0;
        for (int64_t j = 0; j < d->n; j++) acc += row[j] / sum * v[ov + j * d->dv + e];
        y[(z * d->m + i) * d->dv + e] = acc;
      }
    }
  }
  free(row);
}

/* mask_fill: 0 random, 1 also -inf for keys < 40 in every row, 2 -inf for a whole row. */
static void test_attention(const char *what, const vk_attention_desc *d, int mask_fill, bool with_epi) {
  int64_t batch = 1;
  for (int i = 0; i < d->n_batch; i++) batch *= d->batch[i];
  size_t nq = extent(d->q_offset, d->n_batch, d->batch, d->q_batch_stride, d->m * d->d);
  size_t nk = extent(d->k_offset, d->n_batch, d->batch, d->k_batch_stride, d->n * d->d);
  size_t nv = extent(d->v_offset, d->n_batch, d->batch, d->v_batch_stride, d->n * d->dv);
  size_t nm = d->has_mask ? extent(d->mask_offset, d->n_batch, d->batch, d->mask_batch_stride,
                                   (d->m - 1) * d->mask_stride_m + (d->n - 1) * d->mask_stride_n + 1)
                          : 0;
  size_t ny = (size_t)(batch * d->m * d->dv);
  float *q = rnd_array(nq), *k = rnd_array(nk), *v = rnd_array(nv), *mask = rnd_array(nm), *y = sentinel(ny);
  for (size_t i = 0; i < nq; i++) q[i] *= 3; /* peaky softmax */
  if (mask_fill == 1 && d->has_mask)
    for (int64_t i = 0; i < d->m; i++)
      for (int64_t j = 0; j < d->n && j < 40; j++) mask[d->mask_offset + i * d->mask_stride_m + j * d->mask_stride_n] = -INFINITY;
  if (mask_fill == 2 && d->has_mask)
    for (int64_t j = 0; j < d->n; j++) mask[d->mask_offset + j * d->mask_stride_n] = -INFINITY; /* row 0 */
  refs r = refs_new(ny);
  ref_attention(d, q, k, v, mask, r.ref);
  if (g_fp16) {
    float *q16 = round16(q, nq), *k16 = round16(k, nk), *v16 = round16(v, nv), *m16 = round16(mask, nm);
    ref_attention(d, q16, k16, v16, m16, r.ref16);
    free(q16), free(k16), free(v16), free(m16);
  }
  test_epi te = {0};
  int own = d->has_mask ? 5 : 4;
  if (with_epi) epi_make(&te, own, (int)d->dv);
  vk_attention_desc dd = *d;
  dd.fp16 = g_fp16;
  vk_kernel_src src;
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", what, with_epi ? " +epi" : "", g_fp16 ? " fp16" : "");
  if (check_status(vk_gen_attention(&dd, &g_props, with_epi ? &te.epi : NULL, &src), name)) {
    tbuf bufs[6];
    int n = 0;
    bufs[n++] = (tbuf){q, nq, false};
    bufs[n++] = (tbuf){k, nk, false};
    bufs[n++] = (tbuf){v, nv, false};
    if (d->has_mask) bufs[n++] = (tbuf){mask, nm, false};
    bufs[n++] = (tbuf){y, ny, true};
    run_and_check(name, &src, &te, with_epi, bufs, n, y, ny, &r, false);
    vk_kernel_src_free(&src);
  }
  free(q), free(k), free(v), free(mask), free(y), free(te.e);
  refs_free(&r);
}

static vk_attention_desc attn_desc(int64_t m, int64_t n, int64_t dd, int64_t dv, bool tk, float scale) {
  vk_attention_desc d;
  memset(&d, 0, sizeof d);
  d.m = m, d.n = n, d.d = dd, d.dv = dv, d.transpose_k = tk, d.scale = scale;
  return d;
}

static void attention_cases(void) {
  for (int e = 0; e < 2; e++) {
    /* BERT-base: [1, 12, 128, 64], mask [1, 1, 1, 128] */
    vk_attention_desc d = attn_desc(128, 128, 64, 64, true, 0.125f);
    d.n_batch = 2;
    d.batch[0] = 1, d.batch[1] = 12;
    d.q_batch_stride[1] = d.k_batch_stride[1] = d.v_batch_stride[1] = 128 * 64;
    d.has_mask = true;
    d.mask_stride_n = 1;
    test_attention("attn BERT 12x128x128x64 mask[1,1,1,128]", &d, 0, e);
    /* odd sizes, K [d, n], K broadcast over heads, full mask broadcast over heads */
    d = attn_desc(37, 70, 20, 13, false, 0.3f);
    d.n_batch = 2;
    d.batch[0] = 2, d.batch[1] = 3;
    d.q_batch_stride[0] = 3 * 37 * 20, d.q_batch_stride[1] = 37 * 20;
    d.k_batch_stride[0] = 20 * 70;
    d.v_batch_stride[0] = 3 * 70 * 13, d.v_batch_stride[1] = 70 * 13;
    d.has_mask = true;
    d.mask_batch_stride[0] = 37 * 70;
    d.mask_stride_m = 70, d.mask_stride_n = 1;
    test_attention("attn [2,3] 37x70 d20 dv13 K[d,n] bcast", &d, 0, e);
    d = attn_desc(1, 1, 8, 5, true, 1.0f);
    test_attention("attn 1x1", &d, 0, e);
    d = attn_desc(50, 200, 32, 16, true, 0.2f);
    d.n_batch = 1;
    d.batch[0] = 2;
    d.q_batch_stride[0] = 50 * 32, d.k_batch_stride[0] = 200 * 32, d.v_batch_stride[0] = 200 * 16;
    d.has_mask = true;
    d.mask_stride_m = 200, d.mask_stride_n = 1; /* [50, 200] shared by both batches */
    test_attention("attn 50x200 keys<40 masked -inf", &d, 1, e);
    d = attn_desc(5, 3, 4, 4, true, 1.0f);
    d.has_mask = true;
    d.mask_stride_n = 1;
    d.mask_stride_m = 3;
    test_attention("attn row of all -inf -> NaN", &d, 2, e);
    d = attn_desc(20, 300, 128, 128, true, 0.08f);
    test_attention("attn d=dv=128 n=300 no mask", &d, 0, e);
    d = attn_desc(9, 17, 3, 2, true, 0.5f);
    d.has_mask = true; /* scalar mask */
    d.q_offset = 4, d.k_offset = 1, d.v_offset = 2, d.mask_offset = 3, d.y_offset = 0;
    test_attention("attn scalar mask + offsets", &d, 0, e);
  }
  vk_attention_desc d = attn_desc(6, 0, 4, 3, true, 1.0f);
  test_attention("attn n=0 (no keys -> 0)", &d, 0, false);
  d = attn_desc(6, 5, 0, 3, true, 1.0f);
  test_attention("attn d=0 (uniform weights)", &d, 0, false);
}

/* ---- other device profiles ------------------------------------------------------------ */

static void profile_cases(void) {
  vk_matmul_desc d;
  vk_matmul_desc_init(&d, 100, 70, 33);
  test_matmul("matmul 100x70x33", &d, true);
  vk_matmul_desc_init(&d, 130, 129, 65);
  d.trans_a = d.trans_b = true;
  d.has_bias = true;
  d.bias_stride_m = 129;
  d.bias_stride_n = 1;
  test_matmul("gemm 130x129x65 transA/B bias[m,n]", &d, false);
  vk_matmul_desc_init(&d, 256, 264, 40); /* big enough for 128x128 tiles */
  d.n_batch = 1;
  d.batch[0] = 16;
  d.a_batch_stride[0] = 256 * 40;
  d.b_batch_stride[0] = 40 * 264;
  test_matmul("matmul [16]x256x264x40", &d, true);
  vk_matmul_desc_init(&d, 20, 40, 50);
  test_matmul("matmul 20x40x50", &d, false);
  vk_matmul_desc_init(&d, 1, 300, 77);
  d.trans_b = true;
  test_matmul("gemv M=1 300x77 transB", &d, true);
  vk_conv_desc c = conv_desc(2, 1, 12, 18, 3, A(8, 9), A(3, 3), A(2, 2), A(1, 1), A(0, 1), A(1, 0), true);
  test_conv("conv2d g3 s2 asym pads", &c, true);
  c = conv_desc(2, 1, 32, 32, 32, A(14, 14), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  test_conv("dwconv 32x14x14 k3 s1 p1", &c, true);
  test_pool("maxpool2d k3 s2 p1", VK_POOL_MAX, 2, 1, 8, A(20, 20), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), false, false, false);
  vk_attention_desc a = attn_desc(37, 70, 64, 64, true, 0.125f);
  test_attention("attn 37x70 d64", &a, 0, true);
}

/* ---- shapes as specialization constants ------------------------------------------------ */

/* Two kernels of the same structure but different sizes: the sources must
 * be byte-identical (one SPIR-V module), the constants' count equal and
 * their values different; then both run against the reference (the tests
 * above do that with the generator's constants passed at pipeline creation). */
static void same_source(const char *what, kiln_status_t st1, vk_kernel_src *s1, kiln_status_t st2, vk_kernel_src *s2) {
  bool ok1 = check_status(st1, what), ok2 = check_status(st2, what);
  if (ok1 && ok2) {
    g_cases++;
    bool same = !strcmp(s1->glsl, s2->glsl);
    bool values_differ = s1->spec.n == s2->spec.n &&
                         memcmp(s1->spec.values, s2->spec.values, (size_t)s1->spec.n * sizeof *s1->spec.values) != 0;
    if (!same || !values_differ || s1->spec.n == 0 || !strstr(s1->glsl, "layout(constant_id = 0) const int ")) {
      g_failures++;
      printf("FAIL %s: sources %s, %d vs %d constants%s\n", what, same ? "identical" : "differ", s1->spec.n, s2->spec.n,
             values_differ ? "" : " with the same values");
      if (!same) fprintf(stderr, "---- first\n%s---- second\n%s", s1->glsl, s2->glsl);
    } else {
      printf("ok   %-44s %-34s one source (%zu bytes), %d constants\n", what, s1->name, strlen(s1->glsl), s1->spec.n);
    }
  }
  if (ok1) vk_kernel_src_free(s1);
  if (ok2) vk_kernel_src_free(s2);
}

static void spec_cases(void) {
  vk_kernel_src s1, s2;
  vk_matmul_desc m1, m2;
  /* tiled, guards on every axis, a batch axis with B broadcast, bias[n], offsets */
  vk_matmul_desc_init(&m1, 100, 90, 70);
  m1.n_batch = 1, m1.batch[0] = 2, m1.a_batch_stride[0] = 100 * 70;
  m1.has_bias = true, m1.bias_stride_n = 1;
  m1.a_offset = 3, m1.b_offset = 5, m1.bias_offset = 2, m1.y_offset = 1;
  vk_matmul_desc_init(&m2, 70, 75, 50);
  m2.n_batch = 1, m2.batch[0] = 3, m2.a_batch_stride[0] = 70 * 50;
  m2.has_bias = true, m2.bias_stride_n = 1;
  m2.b_offset = 1, m2.y_offset = 4;
  m1.fp16 = m2.fp16 = m1.fp16_arith = m2.fp16_arith = g_fp16;
  same_source("spec: matmul [2]x100x90x70 / [3]x70x75x50", vk_gen_matmul(&m1, &g_props, NULL, &s1), &s1,
              vk_gen_matmul(&m2, &g_props, NULL, &s2), &s2);
  test_matmul("spec: matmul [2]x100x90x70", &m1, false);
  test_matmul("spec: matmul [3]x70x75x50", &m2, true);
  /* GEMV */
  vk_matmul_desc_init(&m1, 1, 300, 77);
  vk_matmul_desc_init(&m2, 1, 200, 33);
  m1.trans_b = m2.trans_b = true;
  m1.fp16 = m2.fp16 = m1.fp16_arith = m2.fp16_arith = g_fp16;
  same_source("spec: gemv 300x77 / 200x33", vk_gen_matmul(&m1, &g_props, NULL, &s1), &s1,
              vk_gen_matmul(&m2, &g_props, NULL, &s2), &s2);
  test_matmul("spec: gemv 300x77", &m1, false);
  test_matmul("spec: gemv 200x33", &m2, false);
  /* implicit-GEMM conv 3x3 p1 (ResNet-like), different batch, channels, planes, offsets */
  vk_conv_desc c1 = conv_desc(2, 1, 8, 40, 1, A(10, 10), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  vk_conv_desc c2 = conv_desc(2, 2, 4, 56, 1, A(7, 9), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  c2.x_offset = 3, c2.w_offset = 4, c2.bias_offset = 1, c2.y_offset = 5; /* W aligned in both: vec4 loads of W in both */
  c1.fp16 = c2.fp16 = c1.fp16_arith = c2.fp16_arith = g_fp16;
  same_source("spec: conv 3x3 8->40 10x10 / 2x4->56 7x9", vk_gen_conv(&c1, &g_props, NULL, &s1), &s1,
              vk_gen_conv(&c2, &g_props, NULL, &s2), &s2);
  test_conv("spec: conv 3x3 8->40 10x10", &c1, false);
  test_conv("spec: conv 3x3 2x4->56 7x9 offsets", &c2, true);
  /* depthwise 3x3 */
  c1 = conv_desc(2, 1, 8, 8, 8, A(12, 12), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  c2 = conv_desc(2, 2, 5, 5, 5, A(14, 10), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  c2.x_offset = 1, c2.bias_offset = 2, c2.y_offset = 3;
  c1.fp16 = c2.fp16 = c1.fp16_arith = c2.fp16_arith = g_fp16;
  same_source("spec: dwconv 3x3 8x12x12 / 2x5x14x10", vk_gen_conv(&c1, &g_props, NULL, &s1), &s1,
              vk_gen_conv(&c2, &g_props, NULL, &s2), &s2);
  test_conv("spec: dwconv 3x3 8x12x12", &c1, false);
  test_conv("spec: dwconv 3x3 2x5x14x10 offsets", &c2, true);
  /* max pool 3x3 s2 p1 */
  vk_pool_desc p1 = pool_desc(VK_POOL_MAX, 2, 1, 8, A(20, 20), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), false, false);
  vk_pool_desc p2 = pool_desc(VK_POOL_MAX, 2, 2, 3, A(11, 15), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), false, false);
  p2.x_offset = 7, p2.y_offset = 3;
  p1.fp16 = p2.fp16 = g_fp16;
  same_source("spec: maxpool 3x3 s2 8x20x20 / 2x3x11x15", vk_gen_pool(&p1, &g_props, NULL, &s1), &s1,
              vk_gen_pool(&p2, &g_props, NULL, &s2), &s2);
  test_pool_desc("spec: maxpool 3x3 s2 8x20x20", &p1, false);
  test_pool_desc("spec: maxpool 3x3 s2 2x3x11x15 offsets", &p2, true);
  /* attention, d 16, dv 8 (structure), different m, n, batch, mask strides, offsets */
  vk_attention_desc a1 = attn_desc(40, 70, 16, 8, true, 0.25f), a2 = attn_desc(50, 100, 16, 8, true, 0.25f);
  a1.n_batch = a2.n_batch = 1;
  a1.batch[0] = 2, a2.batch[0] = 3;
  a1.q_batch_stride[0] = 40 * 16, a1.k_batch_stride[0] = 70 * 16, a1.v_batch_stride[0] = 70 * 8;
  a2.q_batch_stride[0] = 50 * 16, a2.k_batch_stride[0] = 0, a2.v_batch_stride[0] = 100 * 8;
  a1.has_mask = a2.has_mask = true;
  a1.mask_stride_m = 70, a1.mask_stride_n = 1;
  a2.mask_batch_stride[0] = 100, a2.mask_stride_n = 1; /* [3, 1, 100] */
  /* Q/K/V rows are read as vec4s when offsets and strides allow: aligned offsets in both */
  a2.q_offset = 4, a2.k_offset = 8, a2.v_offset = 12, a2.mask_offset = 3, a2.y_offset = 0;
  a1.fp16 = a2.fp16 = g_fp16;
  {
    /* ... and only then: Q at an odd offset is read element by element, K and V still as vec4s */
    vk_attention_desc a3 = a2;
    a3.q_offset = 1;
    bool ok1 = check_status(vk_gen_attention(&a1, &g_props, NULL, &s1), "attn vec4 loads");
    bool ok3 = check_status(vk_gen_attention(&a3, &g_props, NULL, &s2), "attn vec4 loads");
    if (ok1 && ok3) {
      g_cases++;
      bool all = strstr(s1.glsl, "kk_q4[") && strstr(s1.glsl, "kk_k4[") && strstr(s1.glsl, "kk_v4[");
      bool q_scalar = !strstr(s2.glsl, "kk_q4[") && strstr(s2.glsl, "kk_k4[") && strstr(s2.glsl, "kk_v4[");
      if (all && q_scalar)
        printf("ok   %-44s\n", "attn vec4 loads exactly when aligned");
      else {
        g_failures++;
        printf("FAIL attn vec4 loads: aligned %s, Q at offset 1 %s\n", all ? "ok" : "not all vec4", q_scalar ? "ok" : "wrong");
      }
    }
    if (ok1) vk_kernel_src_free(&s1);
    if (ok3) vk_kernel_src_free(&s2);
    /* vec4 shared rows filled element by element: Q unaligned, then K [d, n] too */
    test_attention("attn [3]x50x100 d16 dv8 Q offset 1", &a3, 0, false);
    a3.transpose_k = false;
    test_attention("attn [3]x50x100 d16 dv8 Q offset 1 K[d,n]", &a3, 0, true);
  }
  same_source("spec: attn [2]x40x70 / [3]x50x100 d16 dv8", vk_gen_attention(&a1, &g_props, NULL, &s1), &s1,
              vk_gen_attention(&a2, &g_props, NULL, &s2), &s2);
  test_attention("spec: attn [2]x40x70 d16 dv8", &a1, 0, false);
  test_attention("spec: attn [3]x50x100 d16 dv8 offsets", &a2, 0, true);
}

/* ---- vec4 global loads in the tiled contraction --------------------------------------- */

/* The generator must (or must not) read A / B through their vec4 views
 * (`kk_a4` / `kk_b4`, conv: `kk_w4` / `kk_x4`). */
static void expect_vec(const char *what, kiln_status_t st, vk_kernel_src *src, const char *a4, bool want_a,
                       const char *b4, bool want_b) {
  if (!check_status(st, what)) return;
  g_cases++;
  bool has_a = strstr(src->glsl, a4) != NULL, has_b = strstr(src->glsl, b4) != NULL;
  if (has_a != want_a || has_b != want_b) {
    g_failures++;
    printf("FAIL %s: vec4 loads A %s B %s, expected A %s B %s\n", what, has_a ? "yes" : "no", has_b ? "yes" : "no",
           want_a ? "yes" : "no", want_b ? "yes" : "no");
  } else {
    printf("ok   %-44s %-34s vec4 loads: A %s, B %s\n", what, src->name, has_a ? "yes" : "no", has_b ? "yes" : "no");
  }
  vk_kernel_src_free(src);
}

static void vec4_matmul(const char *what, const vk_matmul_desc *d, bool want_a, bool want_b) {
  vk_matmul_desc dd = *d;
  dd.fp16 = dd.fp16_arith = g_fp16;
  vk_kernel_src src;
  expect_vec(what, vk_gen_matmul(&dd, &g_props, NULL, &src), &src, "kk_a4", want_a, "kk_b4", want_b);
  test_matmul(what, d, true);
}

static void vec4_conv(const char *what, const vk_conv_desc *d, bool want_a, bool want_b) {
  vk_conv_desc dd = *d;
  dd.fp16 = dd.fp16_arith = g_fp16;
  vk_kernel_src src;
  expect_vec(what, vk_gen_conv(&dd, &g_props, NULL, &src), &src, "kk_w4", want_a, "kk_x4", want_b);
  test_conv(what, d, true);
}

static void vec4_cases(void) {
  vk_matmul_desc d;
  /* guards on every axis (m, n not tile multiples, K % 16 = 4), batch, offsets: all multiples of 4 */
  vk_matmul_desc_init(&d, 36, 44, 20);
  d.n_batch = 1, d.batch[0] = 3;
  d.a_batch_stride[0] = 36 * 20, d.b_batch_stride[0] = 20 * 44;
  d.a_offset = 4, d.b_offset = 8, d.y_offset = 1;
  d.has_bias = true, d.bias_stride_n = 1;
  vec4_matmul("vec4: matmul [3]x36x44x20 offsets 4/8", &d, true, true);
  d.trans_a = true; /* A [k, m]: m contiguous (36) */
  vec4_matmul("vec4: matmul transA [3]x36x44x20", &d, true, true);
  d.trans_a = false, d.trans_b = true; /* B [n, k]: k contiguous (20) */
  vec4_matmul("vec4: matmul transB [3]x36x44x20", &d, true, true);
  d.trans_a = true; /* both: A rows of m, B rows of k */
  vec4_matmul("vec4: matmul transA/B [3]x36x44x20", &d, true, true);
  d.trans_a = d.trans_b = false;
  d.a_offset = 2; /* A misaligned: scalar A, vec4 B */
  vec4_matmul("vec4: matmul A offset 2", &d, false, true);
  d.a_offset = 4, d.b_batch_stride[0] = 20 * 44 + 2; /* B's batch stride misaligned */
  vec4_matmul("vec4: matmul B batch stride %4=2", &d, true, false);
  vk_matmul_desc_init(&d, 36, 45, 22); /* K, N not multiples of 4 */
  vec4_matmul("vec4: matmul 36x45x22 (none)", &d, false, false);
  vk_matmul_desc_init(&d, 64, 128, 64); /* whole tiles, no guards */
  vec4_matmul("vec4: matmul 64x128x64", &d, true, true);
  d.n_batch = 1, d.batch[0] = 2;
  d.a_batch_stride[0] = 6; /* a size-2 axis with stride 6: A scalar */
  d.b_batch_stride[0] = 0;
  vec4_matmul("vec4: matmul [2] A batch stride 6", &d, false, true);
  /* conv: W rows (Cin/g * prod(kernel)) and offset multiples of 4; X for pointwise with planes % 4 == 0 */
  vk_conv_desc c = conv_desc(2, 2, 12, 20, 1, A(6, 6), A(1, 1), A(1, 1), A(1, 1), A(0, 0), A(0, 0), true);
  c.x_offset = 4, c.w_offset = 8, c.bias_offset = 1, c.y_offset = 3;
  vec4_conv("vec4: conv pointwise 2x12x6x6->20", &c, true, true);
  c.x_offset = 5;
  vec4_conv("vec4: conv pointwise x offset 5", &c, true, false);
  c = conv_desc(2, 2, 8, 12, 2, A(5, 5), A(1, 1), A(1, 1), A(1, 1), A(0, 0), A(0, 0), false);
  vec4_conv("vec4: conv pointwise g2 5x5 (plane 25)", &c, true, false);
  c = conv_desc(2, 1, 4, 24, 1, A(9, 9), A(3, 3), A(1, 1), A(1, 1), A(1, 1), A(1, 1), true);
  vec4_conv("vec4: conv 3x3 p1 4->24 (K 36)", &c, true, false);
  c = conv_desc(2, 1, 3, 24, 1, A(9, 9), A(3, 3), A(2, 2), A(1, 1), A(1, 1), A(1, 1), true);
  vec4_conv("vec4: conv 3x3 s2 3->24 (K 27)", &c, false, false);
}

/* ---- fp16 specifics ------------------------------------------------------------------------ */

/* y[j] = 1.5 * b[j], b[j] = +-(1 + j 2^-10): exact in f32, needing rounding
 * in half, every odd j a tie; the stored halves must be the host's round to
 * nearest even bit for bit. */
static void fp16_rounding_case(void) {
  enum { N = 300 };
  vk_matmul_desc d;
  vk_matmul_desc_init(&d, 1, N, 1);
  d.fp16 = true;
  float a[1] = {1.5f}, b[N], y[N];
  for (int j = 0; j < N; j++) b[j] = (j % 3 ? 1.0f : -1.0f) * (1.0f + (float)j / 1024.0f), y[j] = 0;
  vk_kernel_src src;
  if (!check_status(vk_gen_matmul(&d, &g_props, NULL, &src), "fp16 rounding")) return;
  tbuf bufs[3] = {{a, 1, false}, {b, N, false}, {y, N, true}};
  if (launch("fp16 rounding", &src, bufs, 3)) {
    int bad = 0, first = -1;
    for (int j = 0; j < N; j++)
      if (kiln_f32_to_f16(y[j]) != kiln_f32_to_f16(1.5f * b[j]) || y[j] != kiln_f16_to_f32(kiln_f32_to_f16(1.5f * b[j]))) {
        if (!bad++) first = j;
      }
    g_cases++;
    if (bad) {
      g_failures++;
      printf("FAIL fp16 stores round to nearest even: %d/%d differ, first [%d] got %.9g want %.9g\n", bad, N, first,
             (double)y[first], (double)kiln_f16_to_f32(kiln_f32_to_f16(1.5f * b[first])));
    } else {
      printf("ok   fp16 stores round to nearest even (%d products, %d ties)\n", N, N / 2);
    }
  }
  vk_kernel_src_free(&src);
}

/* K = 4096 of positive terms (uniform [0.25, 1) operands, sums near 1600):
 * the runs' bound (see the top) allows about 5 * 2^-11 = 0.25% of the
 * result, where a half accumulator over all of K stalls once the half
 * spacing (1 from 1024 on) exceeds twice a product and is off by tens of
 * per cent. The host simulates such an accumulator on the same kind of data
 * first, so the case shows its own power; then the tiled GEMM and an
 * implicit-GEMM Conv (pointwise, Cin 4096) must pass. */
static void fp16_long_k_case(void) {
  enum { K = 4096 };
  double exact = 0, allowed = 0;
  float acc16 = 0;
  for (int k = 0; k < K; k++) {
    float a = kiln_f16_to_f32(kiln_f32_to_f16((float)(0.625 + 0.375 * rnd_float())));
    float b = kiln_f16_to_f32(kiln_f32_to_f16((float)(0.625 + 0.375 * rnd_float())));
    exact += (double)a * b;
    acc16 = kiln_f16_to_f32(kiln_f32_to_f16(acc16 + kiln_f16_to_f32(kiln_f32_to_f16(a * b))));
  }
  allowed = 1.001 * (1e-4 + 2e-6 + ldexp(5.0, -11)) * exact + ldexp((double)K, -24) + 1e-5;
  g_cases++;
  if (!(fabs(acc16 - exact) > 4 * allowed)) {
    g_failures++;
    printf("FAIL fp16 long K: a half accumulator (off by %.2e) would pass the bound %.2e\n", fabs(acc16 - exact), allowed);
  } else {
    printf("ok   fp16 long K: a half accumulator is off by %.1f%% (host simulation), the bound allows %.2f%%\n",
           100 * fabs(acc16 - exact) / exact, 100 * allowed / exact);
  }
  g_positive = true;
  vk_matmul_desc d;
  vk_matmul_desc_init(&d, 33, 20, K);
  test_matmul("long K 33x20x4096, positive terms", &d, false);
  vk_conv_desc c = conv_desc(2, 1, K, 8, 1, A(4, 4), A(1, 1), A(1, 1), A(1, 1), A(0, 0), A(0, 0), false);
  test_conv("long K conv 1x1 4096->8, positive terms", &c, false);
  g_positive = false;
}

/* fp16 false gives the f32 source exactly; fp16 true declares only half tensors. */
static void fp16_source_case(void) {
  vk_matmul_desc d;
  vk_matmul_desc_init(&d, 40, 50, 60);
  d.has_bias = true;
  d.bias_stride_n = 1;
  vk_kernel_src s32, s16;
  if (!check_status(vk_gen_matmul(&d, &g_props, NULL, &s32), "fp16 source")) return;
  d.fp16 = d.fp16_arith = true;
  if (check_status(vk_gen_matmul(&d, &g_props, NULL, &s16), "fp16 source")) {
    g_cases++;
    bool ok = !strstr(s32.glsl, "float16_t") && !strstr(s32.glsl, "16bit") && strstr(s16.glsl, "GL_EXT_shader_16bit_storage") &&
              !strstr(s16.glsl, "{ float kk_") && strstr(s16.glsl, "{ float16_t kk_y[]; }") && s16.n_buffers == s32.n_buffers &&
              !memcmp(s16.groups, s32.groups, sizeof s16.groups);
    /* the tiled contraction: half tiles, the runs in half, added to float accumulators */
    bool arith = !strstr(s16.glsl, "shared float kk_") && !strstr(s16.glsl, "shared vec4 kk_") &&
                 (strstr(s16.glsl, "shared float16_t kk_as") || strstr(s16.glsl, "shared f16vec4 kk_as")) &&
                 strstr(s16.glsl, "float c0_0 = 0.0;") && strstr(s16.glsl, "c0_0 += float(h0_0");
    /* fp16 storage without half arithmetic (CPU devices): float tiles, no half runs */
    vk_kernel_src s16f;
    d.fp16_arith = false;
    bool storage_only = false;
    if (check_status(vk_gen_matmul(&d, &g_props, NULL, &s16f), "fp16 storage source")) {
      storage_only = strstr(s16f.glsl, "{ float16_t kk_y[]; }") && !strstr(s16f.glsl, "shared float16_t") &&
                     !strstr(s16f.glsl, "shared f16vec4") && !strstr(s16f.glsl, "h0_0");
      vk_kernel_src_free(&s16f);
    }
    if (!ok || !arith || !storage_only) {
      g_failures++;
      printf("FAIL fp16 source: f32 source mentions half, or half source keeps float buffers or float tiles, or "
             "fp16 storage without fp16_arith has half tiles\n");
    } else {
      printf("ok   fp16 source: float16_t bindings and tiles, half runs into float sums, same dispatch; f32 source has no "
             "half; without fp16_arith the tiles stay float\n");
    }
    vk_kernel_src_free(&s16);
  }
  vk_kernel_src_free(&s32);
}

/* ---- GEMM speed ------------------------------------------------------------------------- */

static void bench_gemm(int64_t n, bool fp16) {
  vk_matmul_desc d;
  vk_matmul_desc_init(&d, n, n, n);
  d.fp16 = d.fp16_arith = fp16;
  vk_kernel_src src;
  if (!check_status(vk_gen_matmul(&d, &g_props, NULL, &src), "bench")) return;
  int n_spec;
  vk_spec_const *spec = kernel_spec(&src, NULL, 0, &n_spec);
  vk_kernel_desc kd = {src.name, src.glsl, src.n_buffers, 0, spec, n_spec};
  vk_kernel *k = NULL;
  vk_buffer *b[3] = {0};
  vk_stream *s = NULL;
  size_t bytes = (size_t)(n * n) * (fp16 ? 2 : 4);
  float *a = rnd_array((size_t)(n * n)), *bb = rnd_array((size_t)(n * n)), *y = malloc((size_t)(n * n) * 4);
  uint16_t *ah = NULL, *bh = NULL, *yh = NULL;
  if (fp16) { /* the half data, and a and bb as the kernel sees them */
    ah = malloc(bytes), bh = malloc(bytes), yh = malloc(bytes);
    for (int64_t i = 0; i < n * n; i++) {
      ah[i] = kiln_f32_to_f16(a[i]), bh[i] = kiln_f32_to_f16(bb[i]);
      a[i] = kiln_f16_to_f32(ah[i]), bb[i] = kiln_f16_to_f32(bh[i]);
    }
  }
  bool ok = check_status(vk_kernel_create(g_ctx, &kd, &k), "bench");
  free(spec);
  for (int i = 0; i < 3 && ok; i++) ok = check_status(vk_buffer_alloc(g_ctx, VK_MEM_DEVICE, bytes, &b[i]), "bench");
  ok = ok && check_status(vk_stream_create(g_ctx, &s), "bench");
  /* upload + one run + readback, checked on a few entries */
  ok = ok && check_status(vk_stream_begin(s), "bench") &&
       check_status(vk_stream_upload(s, b[0], 0, fp16 ? (void *)ah : (void *)a, bytes), "bench") &&
       check_status(vk_stream_upload(s, b[1], 0, fp16 ? (void *)bh : (void *)bb, bytes), "bench") &&
       check_status(vk_stream_dispatch(s, k, b, NULL, src.groups[0], src.groups[1], src.groups[2]), "bench") &&
       check_status(vk_stream_readback(s, fp16 ? (void *)yh : (void *)y, b[2], 0, bytes), "bench") &&
       check_status(vk_stream_end(s), "bench");
  uint64_t v;
  ok = ok && check_status(vk_submit(g_ctx, &s, 1, &v), "bench") && check_status(vk_wait(g_ctx, v), "bench");
  if (ok && fp16)
    for (int64_t i = 0; i < n * n; i++) y[i] = kiln_f16_to_f32(yh[i]);
  if (ok) {
    int bad = 0;
    for (int t = 0; t < 16; t++) {
      int64_t i = (int64_t)(rnd() % (uint64_t)n), j = (int64_t)(rnd() % (uint64_t)n);
      double acc = 0, mg = 0;
      for (int64_t kk = 0; kk < n; kk++) acc += (double)a[i * n + kk] * bb[kk * n + j], mg += fabs((double)a[i * n + kk] * bb[kk * n + j]);
      /* fp16: the store's rounding, and the half runs' 4 * 2^-11 sum|terms| + K 2^-24 (see the top) */
      double runs = fp16 ? ldexp(4.0 * mg, -11) + ldexp((double)n, -24) : 0;
      if (fabs(acc - y[i * n + j]) > (1e-4 + (fp16 ? ldexp(1.001, -11) : 0)) * fabs(acc) + 2e-6 * mg + 1e-5 + 1.001 * runs) bad++;
    }
    /* a dispatch-only stream, submitted a few times */
    ok = check_status(vk_stream_begin(s), "bench") &&
         check_status(vk_stream_dispatch(s, k, b, NULL, src.groups[0], src.groups[1], src.groups[2]), "bench") &&
         check_status(vk_stream_end(s), "bench");
    int reps = n >= 1024 ? 2 : 4;
    double t0 = now();
    for (int r = 0; r < reps && ok; r++) ok = check_status(vk_submit(g_ctx, &s, 1, &v), "bench") && check_status(vk_wait(g_ctx, v), "bench");
    double dt = (now() - t0) / reps;
    g_cases++;
    if (bad) g_failures++;
    printf("%s  gemm %lld^3 %s (%s): %.3f s per run, %.2f GFLOP/s\n", bad ? "FAIL" : "ok  ", (long long)n,
           fp16 ? "fp16" : "f32", src.name, dt, src.flops / dt * 1e-9);
  }
  if (s) vk_stream_destroy(g_ctx, s);
  for (int i = 0; i < 3; i++) vk_buffer_free(g_ctx, b[i]);
  if (k) vk_kernel_destroy(g_ctx, k);
  vk_kernel_src_free(&src);
  free(a), free(bb), free(y), free(ah), free(bh), free(yh);
}

int main(int argc, char **argv) {
  bool bench = argc > 1 && !strcmp(argv[1], "--bench");
  kiln_status_t why = NULL;
  int n = vk_enumerate(&g_props, 1, &why);
  if (n <= 0) {
    printf("SKIP: no Vulkan device: %s\n", why ? kiln_status_message(why) : "(no reason given)");
    if (why) kiln_status_free(why);
    return 77;
  }
  if (why) kiln_status_free(why);
  kiln_status_t st = vk_context_create(0, &g_ctx);
  if (st) {
    printf("FAIL: vk_context_create on %s: %s\n", g_props.name, kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  g_dev = g_props = *vk_context_props(g_ctx);
  printf("device: %s (subgroup %u, shared %u bytes, %u invocations)\n", g_props.name, g_props.subgroup_size,
         g_props.max_shared_bytes, g_props.max_workgroup_invocations);
  /* matmul, conv, pool, attention, profiles; f32 / fp16 for one precision only */
  const char *only = getenv("KILN_TEST_ONLY");
  for (int pass = 0; pass < 2; pass++) {
    g_fp16 = pass == 1;
    if (only && (strstr(only, g_fp16 ? "f32" : "fp16"))) continue;
    if (g_fp16) {
      if (!g_dev.fp16) { /* storageBuffer16BitAccess comes with it */
        printf("-- fp16: the device lacks 16-bit storage / shaderFloat16: not run\n");
        continue;
      }
      printf("-- fp16 storage (standard-normal inputs)\n");
      g_rng = 0x2545f4914f6cdd1dull;
      fp16_source_case();
      fp16_rounding_case();
      if (!only || strstr(only, "matmul") || strstr(only, "conv")) fp16_long_k_case();
    }
    if (!only || strstr(only, "matmul")) matmul_cases();
    if (!only || strstr(only, "conv")) conv_cases();
    if (!only || strstr(only, "pool")) pool_cases();
    if (!only || strstr(only, "attention")) attention_cases();
    if (!only || strstr(only, "spec")) spec_cases();
    if (!only || strstr(only, "vec4")) vec4_cases();
    if (!only || strstr(only, "profiles")) {
      /* The generators pick tiles by device: run the GPU choices and the
       * small-device fallbacks here too (both stay within this device's limits). */
      g_props = g_dev;
      g_props.type = 2; /* VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU */
      printf("-- generated as for a discrete GPU%s\n", g_fp16 ? " (fp16)" : "");
      profile_cases();
      g_props = g_dev;
      g_props.type = 2;
      g_props.max_workgroup_invocations = 64;
      g_props.max_workgroup_size[0] = 64;
      g_props.max_shared_bytes = g_dev.max_shared_bytes < 16384 ? g_dev.max_shared_bytes : 16384;
      printf("-- generated as for a small device (64 invocations, %u bytes shared)%s\n", g_props.max_shared_bytes,
             g_fp16 ? " (fp16)" : "");
      profile_cases();
      g_props = g_dev;
    }
    if (g_fp16)
      printf("-- fp16: largest error against the f32-input reference: %.2e absolute, %.2e of the output's max |ref|\n",
             g_worst_abs, g_worst_rel);
  }
  g_fp16 = false;
  if (bench) {
    bench_gemm(512, false);
    bench_gemm(512, true);
    bench_gemm(1024, false);
    bench_gemm(1024, true);
  }
  vk_context_destroy(g_ctx);
  uint64_t verr = vk_validation_error_count();
  if (verr) {
    printf("FAIL: %llu validation errors\n", (unsigned long long)verr);
    g_failures++;
  }
  printf("%d/%d vulkan kernel checks passed\n", g_cases - g_failures, g_cases);
  return g_failures ? 1 : 0;
}

#endif
