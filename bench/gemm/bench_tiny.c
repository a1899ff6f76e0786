/* bench_tiny.c — kiln_sgemm's tiny path against the path the same call
 * takes without it (blocked or small-M), one thread, in one process:
 * rounds alternate the two, each the best of 1000-call batches, and the
 * line gives both and their ratio. Needs only kiln's gemm and base
 * sources (no BLAS):
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=fast -Isrc -Iinclude bench/gemm/bench_tiny.c \
 *      src/devices/cpu/gemm/*.c src/base/*.c -o /tmp/bench_tiny -lpthread -lm -ldl
 *   /tmp/bench_tiny M N K [trans_b]
 *
 * (the gemm kernel files are built with -ffp-contract=fast in the library:
 * CMakeLists.txt). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "devices/cpu/gemm/gemm.h"
#include "devices/cpu/gemm/gemm_internal.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s M N K [trans_b]\n", argv[0]);
    return 2;
  }
  long m = atol(argv[1]), n = atol(argv[2]), k = atol(argv[3]);
  int tb = argc > 4 ? atoi(argv[4]) : 0;
  if (m < 1 || n < 1 || k < 1) return 2;
  float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4), *c = malloc((size_t)(m * n) * 4);
  if (!a || !b || !c) return 1;
  srand(1);
  for (long i = 0; i < m * k; i++) a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (long i = 0; i < k * n; i++) b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  kiln_sgemm_args g = {0};
  g.trans_b = tb;
  g.m = m, g.n = n, g.k = k;
  g.alpha = 1.0f;
  g.a = a, g.lda = k;
  g.b = b, g.ldb = tb ? k : n;
  g.c = c, g.ldc = n;
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 30; round++)
    for (int mode = 0; mode < 2; mode++) {
      kiln_gemm_set_tiny_max(mode ? -1 : 0); /* 0: off; -1: the default */
      double t0 = now_s();
      for (int i = 0; i < 1000; i++) kiln_sgemm(NULL, &g);
      double t = (now_s() - t0) / 1000;
      if (t < best[mode]) best[mode] = t;
    }
  printf("%ldx%ldx%ld%s: without the tiny path %.3f us, with it %.3f us, ratio %.2f\n", m, n, k,
         tb ? " (B transposed)" : "", best[0] * 1e6, best[1] * 1e6, best[1] / best[0]);
  free(a);
  free(b);
  free(c);
  return 0;
}
