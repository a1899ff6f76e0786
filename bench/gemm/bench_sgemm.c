/* bench_sgemm.c — kiln_sgemm against OpenBLAS (cblas_sgemm) and oneDNN
 * (dnnl_sgemm) in one process, interleaved: every round times each library
 * once per shape, in a random order, so machine noise hits all of them
 * alike. Prints the median GFLOP/s per library and kiln/oneDNN.
 *
 *   bench_sgemm --threads 2 [--runs 25] [--shapes 1024x1024x1024,1x4096x4096]
 *
 * Shapes are MxNxK (C[M,N] = A[M,K] * B[K,N], row-major, no transposes).
 * Thread counts: kiln uses a pool of --threads; OpenBLAS and oneDNN are set
 * with openblas_set_num_threads / omp_set_num_threads (run.sh also sets
 * OPENBLAS_NUM_THREADS and OMP_NUM_THREADS). KILN_GEMM_BLOCKING=mc,kc,nc,
 * KILN_GEMM_SMALL_M=n, KILN_GEMM_DIRECT_B=1|2|3 and KILN_GEMM_NO_FULL_K=1 override kiln's choices
 * (tuning aids). --avx2 compares kiln's AVX2 kernel with oneDNN limited to
 * AVX2. "kiln-pk" is kiln with B packed
 * beforehand (weights packed at session creation), not counted in timing.
 * Build and run with bench/gemm/run.sh. */
#include "base/threadpool.h"
#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/gemm/gemm_internal.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


enum { LIB_KILN, LIB_KILN_PACKED, LIB_OPENBLAS, LIB_ONEDNN, N_LIBS };
static const char *lib_names[N_LIBS] = {"kiln", "kiln-pk", "openblas", "onednn"};

typedef struct shape {
  long m, n, k;
} shape;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct bench_ctx {
  shape s;
  float *a, *b, *c;
  void *packed_b;
  kiln_threadpool *pool;
} bench_ctx;

static void run_lib(bench_ctx *x, int lib) {
  long m = x->s.m, n = x->s.n, k = x->s.k;
  switch (lib) {
  case LIB_KILN:
  case LIB_KILN_PACKED: {
    kiln_sgemm_args g = {.m = m, .n = n, .k = k, .alpha = 1.0f, .a = x->a, .lda = k, .ldb = n, .beta = 0.0f,
                         .c = x->c, .ldc = n};
    if (lib == LIB_KILN) g.b = x->b;
    else g.packed_b = x->packed_b;
    kiln_sgemm(x->pool, &g);
    break;
  }
  case LIB_OPENBLAS:
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, x->a, (int)k, x->b,
                (int)n, 0.0f, x->c, (int)n);
    break;
  case LIB_ONEDNN:
    if (dnnl_sgemm('N', 'N', m, n, k, 1.0f, x->a, k, x->b, n, 0.0f, x->c, n) != dnnl_success) {
      fprintf(stderr, "dnnl_sgemm failed\n");
      exit(1);
    }
    break;
  }
}

/* One timed sample: enough back-to-back calls to last >= min_s. */
static double sample_gflops(bench_ctx *x, int lib, int reps) {
  double t0 = now_s();
  for (int r = 0; r < reps; r++) run_lib(x, lib);
  double dt = now_s() - t0;
  return 2.0 * x->s.m * x->s.n * x->s.k * reps / dt * 1e-9;
}

static int parse_shapes(const char *spec, shape *out, int max) {
  int count = 0;
  const char *p = spec;
  while (*p && count < max) {
    shape s;
    int used = 0;
    if (sscanf(p, "%ldx%ldx%ld%n", &s.m, &s.n, &s.k, &used) != 3 || s.m <= 0 || s.n <= 0 || s.k <= 0) {
      fprintf(stderr, "bad shape list '%s' (want MxNxK,MxNxK,...)\n", spec);
      exit(2);
    }
    out[count++] = s;
    p += used;
    if (*p == ',') p++;
  }
  return count;
}

int main(int argc, char **argv) {
  int threads = 1, runs = 25;
  bool use_lib[N_LIBS] = {true, true, true, true};
  bool avx2 = false;
  double pause_ms = 50.0;
  shape shapes[32];
  int n_shapes = parse_shapes("1024x1024x1024,2048x2048x2048,128x768x768,3136x64x576,1x4096x4096", shapes, 32);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--pause-ms") && i + 1 < argc) pause_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) n_shapes = parse_shapes(argv[++i], shapes, 32);
    else if (!strcmp(argv[i], "--avx2")) avx2 = true;
    else if (!strcmp(argv[i], "--libs") && i + 1 < argc) {
      const char *list = argv[++i];
      for (int lib = 0; lib < N_LIBS; lib++) {
        const char *hit = strstr(list, lib_names[lib]);
        size_t len = strlen(lib_names[lib]);
        use_lib[lib] = hit && (hit == list || hit[-1] == ',') && (hit[len] == ',' || hit[len] == 0);
      }
    }
    else {
      fprintf(stderr, "usage: %s [--threads N] [--runs N] [--pause-ms MS] [--shapes MxNxK,...] [--libs kiln,kiln-pk,openblas,onednn] "
              "[--avx2]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || runs < 1) return 2;
  /* --avx2: kiln's AVX2 kernel against oneDNN limited to AVX2 (for OpenBLAS
   * set OPENBLAS_CORETYPE=Haswell). */
  if (avx2 && (!kiln_gemm_force_kernel("avx2") || dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success)) {
    fprintf(stderr, "cannot limit kiln and oneDNN to AVX2 here\n");
    return 1;
  }
  /* Tuning aid: KILN_GEMM_BLOCKING=mc,kc,nc overrides kiln's cache blocking. */
  const char *blk = getenv("KILN_GEMM_BLOCKING");
  if (blk) {
    long mc = 0, kc = 0, nc = 0;
    if (sscanf(blk, "%ld,%ld,%ld", &mc, &kc, &nc) >= 1) kiln_gemm_set_blocking(mc, kc, nc);
  }
  /* KILN_GEMM_SMALL_M=n: the most rows for kiln's streaming small-M path. */
  if (getenv("KILN_GEMM_SMALL_M")) kiln_gemm_set_small_m(atol(getenv("KILN_GEMM_SMALL_M")));
  /* KILN_GEMM_DIRECT_B=1|2: read B in place / always pack it. */
  if (getenv("KILN_GEMM_DIRECT_B")) kiln_gemm_test_direct_b(atoi(getenv("KILN_GEMM_DIRECT_B")));
  /* KILN_GEMM_NO_FULL_K=1: with several threads, pack B per k-slice (a
   * barrier each) instead of for all of K in one phase. */
  if (getenv("KILN_GEMM_NO_FULL_K")) kiln_gemm_test_no_full_k(atoi(getenv("KILN_GEMM_NO_FULL_K")));
  openblas_set_num_threads(threads);
  /* oneDNN's OpenMP runtime (libgomp, loaded with libdnnl), found at run
   * time so the bench does not link an OpenMP runtime of its own. */
  void (*omp_set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  if (omp_set_threads) omp_set_threads(threads);
  else fprintf(stderr, "note: omp_set_num_threads not found; oneDNN uses OMP_NUM_THREADS\n");
  kiln_threadpool *pool = NULL;
  if (kiln_threadpool_create(threads, &pool)) {
    fprintf(stderr, "cannot create the thread pool\n");
    return 1;
  }
  const dnnl_version_t *dv = dnnl_version();
  printf("threads %d, runs %d (median), kiln kernel %s, OpenBLAS %s (%s), oneDNN %d.%d.%d\n", threads, runs,
         kiln_sgemm_kernel_name(), openblas_get_corename(), openblas_get_config(), dv->major, dv->minor,
         dv->patch);
  printf("GFLOP/s (median of the runs); kiln/onednn = median of the per-round ratios\n");
  printf("%-16s %9s %9s %9s %9s %11s %9s\n", "MxNxK", "kiln", "kiln-pk", "openblas", "onednn", "kiln/onednn",
         "max_err");
  for (int si = 0; si < n_shapes; si++) {
    bench_ctx x = {.s = shapes[si], .pool = pool};
    long m = x.s.m, n = x.s.n, k = x.s.k;
    x.a = aligned_alloc(64, (size_t)((m * k + 15) / 16 * 16) * sizeof(float));
    x.b = aligned_alloc(64, (size_t)((k * n + 15) / 16 * 16) * sizeof(float));
    x.c = aligned_alloc(64, (size_t)((m * n + 15) / 16 * 16) * sizeof(float));
    float *ref = malloc((size_t)(m * n) * sizeof(float));
    x.packed_b = aligned_alloc(64, (kiln_sgemm_packed_b_size(k, n) + 63) / 64 * 64);
    if (!x.a || !x.b || !x.c || !ref || !x.packed_b) {
      fprintf(stderr, "out of memory\n");
      return 1;
    }
    srand(1234);
    for (long i = 0; i < m * k; i++) x.a[i] = (float)((double)rand() / RAND_MAX - 0.5);
    for (long i = 0; i < k * n; i++) x.b[i] = (float)((double)rand() / RAND_MAX - 0.5);
    kiln_sgemm_pack_b(false, k, n, x.b, n, x.packed_b);

    /* Check kiln against oneDNN once. */
    run_lib(&x, LIB_ONEDNN);
    memcpy(ref, x.c, (size_t)(m * n) * sizeof(float));
    double max_err = 0;
    for (int lib = LIB_KILN; lib <= LIB_KILN_PACKED; lib++) {
      memset(x.c, 0, (size_t)(m * n) * sizeof(float));
      run_lib(&x, lib);
      for (long i = 0; i < m * n; i++) max_err = fmax(max_err, fabs(x.c[i] - ref[i]) / (1.0 + fabs(ref[i])));
    }

    /* Calls per sample: at least ~10 ms of work at an assumed 100 GFLOP/s. */
    double flops = 2.0 * m * n * k;
    int reps = (int)ceil(0.01 / (flops / 100e9));
    if (reps < 1) reps = 1;
    for (int lib = 0; lib < N_LIBS; lib++) /* warm-up */
      for (int w = 0; w < 2 && use_lib[lib]; w++) sample_gflops(&x, lib, reps);
    double *samples[N_LIBS];
    for (int lib = 0; lib < N_LIBS; lib++) samples[lib] = malloc((size_t)runs * sizeof(double));
    unsigned order_seed = 12345;
    for (int r = 0; r < runs; r++) {
      /* A fresh random order every round, so that no library always runs
       * right after the same other one. */
      int order[N_LIBS];
      for (int o = 0; o < N_LIBS; o++) order[o] = o;
      for (int o = N_LIBS - 1; o > 0; o--) {
        int j = (int)(rand_r(&order_seed) % (unsigned)(o + 1)), t = order[o];
        order[o] = order[j];
        order[j] = t;
      }
      for (int o = 0; o < N_LIBS; o++) {
        int lib = order[o];
        if (!use_lib[lib]) {
          samples[lib][r] = 0;
          continue;
        }
        /* Let the previous library's idle workers stop spinning (libgomp's
         * spin for up to ~20 ms after a parallel region by default). */
        if (pause_ms > 0) usleep((useconds_t)(pause_ms * 1000));
        run_lib(&x, lib); /* re-warm caches and this library's threads */
        samples[lib][r] = sample_gflops(&x, lib, reps);
      }
    }
    /* Same-round ratios: neighbouring samples see similar machine load. */
    double *ratios = malloc((size_t)runs * sizeof(double));
    for (int r = 0; r < runs; r++)
      ratios[r] = samples[LIB_ONEDNN][r] > 0 ? samples[LIB_KILN][r] / samples[LIB_ONEDNN][r] : 0;
    qsort(ratios, (size_t)runs, sizeof(double), cmp_double);
    double ratio = runs % 2 ? ratios[runs / 2] : 0.5 * (ratios[runs / 2 - 1] + ratios[runs / 2]);
    free(ratios);
    double med[N_LIBS];
    for (int lib = 0; lib < N_LIBS; lib++) {
      qsort(samples[lib], (size_t)runs, sizeof(double), cmp_double);
      med[lib] = runs % 2 ? samples[lib][runs / 2] : 0.5 * (samples[lib][runs / 2 - 1] + samples[lib][runs / 2]);
      free(samples[lib]);
    }
    char name[64];
    snprintf(name, sizeof name, "%ldx%ldx%ld", m, n, k);
    printf("%-16s %9.1f %9.1f %9.1f %9.1f %10.1f%% %9.1e\n", name, med[LIB_KILN], med[LIB_KILN_PACKED],
           med[LIB_OPENBLAS], med[LIB_ONEDNN], 100.0 * ratio, max_err);
    fflush(stdout);
    free(x.a);
    free(x.b);
    free(x.c);
    free(ref);
    free(x.packed_b);
  }
  kiln_threadpool_destroy(pool);
  return 0;
}
