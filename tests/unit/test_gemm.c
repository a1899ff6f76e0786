/* test_gemm.c — kiln_sgemm against a float64 reference: odd shapes, both
 * transposes, alpha/beta, bias modes, epilogue coverage, packed B, small-M
 * (GEMV-like) shapes, tiny problems, forced tiny blocking, 1 and 2 threads, and every
 * micro-kernel this CPU can run. */
#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/gemm/gemm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "test_random.h"

static int g_failures, g_cases;
/* c = 2c + 1 on the tile, and count the visit. */
static void epilogue(void *vctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  if (!epi_visit(vctx, m0, n0, mb, nb)) return;
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) c[i * ldc + j] = 2.0f * c[i * ldc + j] + 1.0f;
}

typedef struct gemm_case {
  int64_t m, n, k;
  bool ta, tb, packed, use_epilogue;
  float alpha, beta;
  int bias_axis;
  int pad; /* extra leading-dimension padding */
} gemm_case;

static void run_case(kiln_threadpool *pool, const char *kname, const gemm_case *t) {
  g_cases++;
  int64_t m = t->m, n = t->n, k = t->k;
  int64_t lda = (t->ta ? m : k) + t->pad, ldb = (t->tb ? k : n) + t->pad, ldc = n + t->pad;
  int64_t a_rows = t->ta ? k : m, b_rows = t->tb ? n : k;
  float *a = malloc((size_t)(a_rows * lda + 1) * sizeof(float));
  float *b = malloc((size_t)(b_rows * ldb + 1) * sizeof(float));
  float *c = malloc((size_t)(m * ldc + 1) * sizeof(float));
  float *c0 = malloc((size_t)(m * ldc + 1) * sizeof(float));
  float *bias = malloc((size_t)(m > n ? m : n) * sizeof(float));
  int *hits = calloc((size_t)(m * n), sizeof(int));
  for (int64_t i = 0; i < a_rows * lda; i++) a[i] = rnd_float();
  for (int64_t i = 0; i < b_rows * ldb; i++) b[i] = rnd_float();
  for (int64_t i = 0; i < (m > n ? m : n); i++) bias[i] = rnd_float();
  for (int64_t i = 0; i < m * ldc; i++) c0[i] = t->beta == 0.0f ? NAN : rnd_float();
  /* Padding must survive: fill it with a sentinel. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = n; j < ldc; j++) c0[i * ldc + j] = 12345.0f;
  memcpy(c, c0, (size_t)(m * ldc) * sizeof(float));

  void *pb = NULL;
  if (t->packed) {
    size_t bytes = kiln_sgemm_packed_b_size(k, n);
    pb = aligned_alloc(64, (bytes + 63) / 64 * 64);
    kiln_sgemm_pack_b(t->tb, k, n, b, ldb, pb);
  }
  epi_ctx ec = {.m = m, .n = n, .hits = hits};
  kiln_sgemm_args g = {.trans_a = t->ta, .trans_b = t->tb, .m = m, .n = n, .k = k, .alpha = t->alpha,
                       .a = a, .lda = lda, .b = t->packed ? NULL : b, .ldb = ldb, .packed_b = pb,
                       .beta = t->beta, .c = c, .ldc = ldc, .bias = t->bias_axis ? bias : NULL,
                       .bias_axis = t->bias_axis, .epilogue = t->use_epilogue ? epilogue : NULL,
                       .epilogue_ctx = &ec};
  kiln_sgemm(pool, &g);

  double worst = 0;
  int64_t wi = -1, wj = -1;
  bool ok = !ec.bad_tile;
  for (int64_t i = 0; i < m && ok; i++) {
    for (int64_t j = 0; j < ldc; j++) {
      if (j >= n) {
        if (c[i * ldc + j] != 12345.0f) ok = false, wi = i, wj = j;
        continue;
      }
      double acc = 0, mag = 0;
      for (int64_t p = 0; p < k; p++) {
        double av = t->ta ? a[p * lda + i] : a[i * lda + p];
        double bv = t->tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
        mag += fabs(av * bv);
      }
      double ref = t->alpha * acc, refmag = fabs(t->alpha) * mag;
      if (t->beta != 0.0f) ref += (double)t->beta * c0[i * ldc + j], refmag += fabs(t->beta * c0[i * ldc + j]);
      if (t->bias_axis == 1) ref += bias[i], refmag += fabs(bias[i]);
      if (t->bias_axis == 2) ref += bias[j], refmag += fabs(bias[j]);
      if (t->use_epilogue) {
        ref = 2 * ref + 1, refmag = 2 * refmag + 1;
        if (hits[i * n + j] != 1) ok = false, wi = i, wj = j;
      }
      double tol = 1e-4 * (k > 100 ? k / 100.0 : 1.0) * (refmag + 1e-3);
      double err = fabs((double)c[i * ldc + j] - ref);
      if (!(err <= tol)) ok = false, wi = i, wj = j;
      if (err / (refmag + 1e-3) > worst) worst = err / (refmag + 1e-3);
    }
  }
  if (!ok) {
    g_failures++;
    fprintf(stderr,
            "FAIL kernel=%s m=%lld n=%lld k=%lld ta=%d tb=%d packed=%d alpha=%g beta=%g bias=%d epi=%d pad=%d "
            "threads=%d at (%lld,%lld) worst_rel=%.3g bad_tile=%d\n",
            kname, (long long)m, (long long)n, (long long)k, t->ta, t->tb, t->packed, t->alpha, t->beta,
            t->bias_axis, t->use_epilogue, t->pad, pool ? 2 : 1, (long long)wi, (long long)wj, worst, ec.bad_tile);
  }
  free(a);
  free(b);
  free(c);
  free(c0);
  free(bias);
  free(hits);
  free(pb);
}

static gemm_case random_case(int64_t max_m, int64_t max_n, int64_t max_k) {
  static const float alphas[] = {1.0f, -0.5f, 2.0f, 1.0f};
  static const float betas[] = {0.0f, 1.0f, 0.7f, 0.0f};
  gemm_case t = {.m = rnd_int(1, max_m), .n = rnd_int(1, max_n), .k = rnd_int(1, max_k)};
  t.ta = rnd() & 1;
  t.tb = rnd() & 1;
  t.packed = (rnd() % 3) == 0;
  t.use_epilogue = (rnd() % 3) == 0;
  t.alpha = alphas[rnd() % 4];
  t.beta = betas[rnd() % 4];
  t.bias_axis = (int)(rnd() % 3);
  t.pad = (rnd() & 1) ? (int)rnd_int(1, 5) : 0;
  return t;
}

static void run_kernel_suite(kiln_threadpool *pool, const char *kname) {
  /* Odd shapes around the register tile sizes, with A packed, read in
   * place, and as the blocked path decides. */
  for (int mode = 0; mode < 12; mode++) {
    kiln_gemm_test_direct_a(mode % 3);
    kiln_gemm_test_direct_b(mode / 3);
    for (int r = 0; r < 9; r++) {
      gemm_case t = random_case(67, 67, 67);
      run_case(pool, kname, &t);
    }
  }
  kiln_gemm_test_direct_a(0);
  kiln_gemm_test_direct_b(0);
  /* Small M: GEMV-like, streaming B. */
  kiln_gemm_set_small_m(8); /* also the groups of 4 rows, and packed B */
  for (int r = 0; r < 16; r++) {
    gemm_case t = random_case(9, 300, 300);
    run_case(pool, kname, &t);
  }
  kiln_gemm_set_small_m(-1);
  /* Tiny: B copied into whole vectors, rows four at a time (any m, n up to
   * four vectors, k up to 128), every transpose, blend and bias; then the
   * same shapes on the other paths. */
  for (int pass = 0; pass < 2; pass++) {
    kiln_gemm_set_tiny_max(pass ? 0 : INT64_MAX);
    for (int r = 0; r < 24; r++) {
      gemm_case t = random_case(37, 4 * kiln_gemm_active_kernel()->tiny_w + 1, 129);
      if (r % 6 == 0) t.n = 4 * kiln_gemm_active_kernel()->tiny_w; /* whole vectors: stored as they are */
      run_case(pool, kname, &t);
    }
  }
  kiln_gemm_set_tiny_max(-1);
  gemm_case gemv = {.m = 1, .n = 4096, .k = 300, .alpha = 1.0f, .beta = 0.0f};
  run_case(pool, kname, &gemv);
  gemv.packed = true;
  gemv.bias_axis = 2;
  run_case(pool, kname, &gemv);
  gemv.packed = false;
  gemv.tb = true;
  gemv.use_epilogue = true;
  run_case(pool, kname, &gemv);
  gemv.ta = true;
  gemv.m = 3;
  run_case(pool, kname, &gemv);
  /* Degenerate: K = 0 and alpha = 0 give beta*C + bias. */
  gemm_case k0 = {.m = 5, .n = 7, .k = 0, .alpha = 1.0f, .beta = 0.5f, .bias_axis = 2, .use_epilogue = true};
  run_case(pool, kname, &k0);
  k0.k = 9;
  k0.alpha = 0.0f;
  k0.bias_axis = 1;
  run_case(pool, kname, &k0);
  /* Tiny forced blocking: many k-slices, row blocks and column panels. */
  kiln_gemm_set_blocking(2 * kiln_gemm_active_kernel()->mr, 12, 2 * kiln_gemm_active_kernel()->nr);
  kiln_gemm_set_small_m(0); /* the blocked path even for tiny M */
  kiln_gemm_set_tiny_max(0); /* and tiny problems */
  for (int r = 0; r < 20; r++) {
    kiln_gemm_test_direct_a(r % 3);
    kiln_gemm_test_direct_b(r % 4);
    kiln_gemm_test_no_full_k(r / 10); /* B packed for all of K, then per k-slice */
    gemm_case t = random_case(r < 6 ? 5 : 90, 150, 70);
    run_case(pool, kname, &t);
  }
  kiln_gemm_test_no_full_k(0);
  kiln_gemm_set_small_m(-1);
  kiln_gemm_set_tiny_max(-1);
  kiln_gemm_test_direct_a(0);
  kiln_gemm_test_direct_b(0);
  kiln_gemm_set_blocking(0, 0, 0);
  /* Many rows, few columns: rows are split into several parts per thread. */
  gemm_case tall = {.m = 1100, .n = 70, .k = 50, .alpha = 1.0f, .beta = 0.5f, .bias_axis = 1, .use_epilogue = true};
  run_case(pool, kname, &tall);
  tall.tb = tall.packed = true;
  run_case(pool, kname, &tall);
  /* One bigger multiply through the default blocking. */
  gemm_case big = {.m = 100, .n = 160, .k = 400, .alpha = 1.0f, .beta = 1.0f, .bias_axis = 2, .use_epilogue = true};
  run_case(pool, kname, &big);
  big.ta = big.tb = big.packed = true;
  run_case(pool, kname, &big);
}

int main(void) {
  g_rng = 0x9e3779b97f4a7c15ull;
  clock_t start = clock();
  const char *kernels[] = {"generic", "avx2", "avx512"};
  kiln_threadpool *pools[2] = {NULL, NULL};
  if (kiln_threadpool_create(2, &pools[1])) {
    fprintf(stderr, "cannot create a thread pool\n");
    return 1;
  }
  int kernels_run = 0;
  for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
    if (!kiln_gemm_force_kernel(kernels[ki])) {
      printf("skip kernel %s (not available on this CPU or not built)\n", kernels[ki]);
      continue;
    }
    kernels_run++;
    for (int pi = 0; pi < 2; pi++) {
      if (pi == 1 && !pools[1]) continue;
      int before = g_failures;
      run_kernel_suite(pools[pi], kernels[ki]);
      printf("kernel %-7s threads %d: %s\n", kernels[ki], pi + 1, g_failures == before ? "ok" : "FAILED");
    }
  }
  /* Out of memory: the unblocked fallbacks give the same results. */
  for (int mode = 1; mode <= 2; mode++) {
    kiln_gemm_test_alloc_failure(mode);
    for (int pi = 0; pi < 2; pi++)
      for (int r = 0; r < 20; r++) {
        kiln_gemm_test_direct_b(r % 4);
        gemm_case t = random_case(40, 70, 60);
        if (r < 3) t.m = 1 + r;
        run_case(pools[pi], "alloc-failure", &t);
      }
    kiln_gemm_test_direct_b(0);
    kiln_gemm_test_alloc_failure(0);
  }
  kiln_gemm_force_kernel(NULL);
  /* A packed B of another shape is refused visibly: C becomes NaN. */
  {
    float b[6] = {1, 2, 3, 4, 5, 6}, a[3] = {1, 1, 1}, c[2] = {7, 7};
    void *pb = aligned_alloc(64, (kiln_sgemm_packed_b_size(3, 2) + 63) / 64 * 64);
    kiln_sgemm_pack_b(false, 3, 2, b, 2, pb);
    kiln_sgemm_args g = {.m = 1, .n = 2, .k = 2, .alpha = 1.0f, .a = a, .lda = 2, .packed_b = pb, .c = c, .ldc = 2};
    kiln_sgemm(NULL, &g);
    g_cases++;
    if (!isnan(c[0]) || !isnan(c[1])) {
      g_failures++;
      fprintf(stderr, "FAIL packed B with another K was used: c = %g %g\n", c[0], c[1]);
    }
    g.k = 3;
    g.lda = 3;
    kiln_sgemm(NULL, &g);
    g_cases++;
    if (c[0] != 9.0f || c[1] != 12.0f) {
      g_failures++;
      fprintf(stderr, "FAIL packed 1x3x2: c = %g %g, want 9 12\n", c[0], c[1]);
    }
    free(pb);
  }
  /* A buffer packed under one kernel stays usable after the choice changes. */
  if (kiln_gemm_force_kernel("generic")) {
    gemm_case t = {.m = 33, .n = 45, .k = 21, .alpha = 1.0f, .packed = true};
    int64_t ldb = t.n;
    float *b = malloc((size_t)(t.k * ldb) * sizeof(float));
    for (int64_t i = 0; i < t.k * ldb; i++) b[i] = rnd_float();
    void *pb = aligned_alloc(64, (kiln_sgemm_packed_b_size(t.k, t.n) + 63) / 64 * 64);
    kiln_sgemm_pack_b(false, t.k, t.n, b, ldb, pb);
    kiln_gemm_force_kernel(NULL);
    float *a = malloc((size_t)(t.m * t.k) * sizeof(float)), *c = malloc((size_t)(t.m * t.n) * sizeof(float));
    for (int64_t i = 0; i < t.m * t.k; i++) a[i] = rnd_float();
    kiln_sgemm_args g = {.m = t.m, .n = t.n, .k = t.k, .alpha = 1.0f, .a = a, .lda = t.k, .packed_b = pb,
                         .c = c, .ldc = t.n};
    kiln_sgemm(NULL, &g);
    double worst = 0;
    for (int64_t i = 0; i < t.m; i++)
      for (int64_t j = 0; j < t.n; j++) {
        double ref = 0;
        for (int64_t p = 0; p < t.k; p++) ref += (double)a[i * t.k + p] * b[p * ldb + j];
        worst = fmax(worst, fabs(ref - c[i * t.n + j]));
      }
    g_cases++;
    if (!(worst < 1e-4)) {
      g_failures++;
      fprintf(stderr, "FAIL packed under generic, run under %s: max err %g\n", kiln_sgemm_kernel_name(), worst);
    }
    free(a);
    free(b);
    free(c);
    free(pb);
  }
  kiln_threadpool_destroy(pools[1]);
  printf("test_gemm: %d kernels, %d cases, %d failures, %.2f s cpu\n", kernels_run, g_cases, g_failures,
         (double)(clock() - start) / CLOCKS_PER_SEC);
  return g_failures ? 1 : 0;
}
