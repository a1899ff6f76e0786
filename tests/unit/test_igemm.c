/* test_igemm.c — kiln_igemm against a naive int64 loop (reduced modulo
 * 2^32): random shapes with edges (m, n, k off the 6 x 16 tile, odd k,
 * k past one K block, k = 0), both transposes, u8/s8 operands with zero
 * points 0, 128, -3 and extremes, per-row A zero points, packed B, the epilogue's tiles, 1 and 2
 * threads, every micro-kernel this CPU can run; and B within +-64 of its
 * zero point (the quads layout: vpmaddubsw), at its bounds and just past
 * them (one value of 65: the pairs layout again, or on VNNI the full-range
 * quads layout, as every random B whose values minus its zero point fit
 * int8 is there); the AMX kernel's tile, block and K-step edges with K up
 * to a few thousand. */
#include "devices/cpu/gemm/igemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "test_random.h"

static int g_failures, g_cases;
/* Counts each element's visit and flips its bits, which the check undoes. */
static void epilogue(void *vctx, int32_t *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  if (!epi_visit(vctx, m0, n0, mb, nb)) return;
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) c[i * ldc + j] = ~c[i * ldc + j];
}

typedef struct igemm_case {
  int64_t m, n, k;
  bool trans_a, trans_b, a_signed, b_signed, packed, epi;
  int32_t za, zb;
  bool row_zeros; /* a zero point per row of A (ConvInteger's per-channel w zero points) */
  int narrow_b;   /* 1: B - zb within +-64 (the quads layout), often at +-64; 2: the same with one value at 65 */
} igemm_case;

static int32_t val(const void *x, bool s, int64_t o) { return s ? ((const int8_t *)x)[o] : ((const uint8_t *)x)[o]; }

static void run_case(kiln_threadpool *pool, const char *kname, const igemm_case *t) {
  g_cases++;
  int64_t m = t->m, n = t->n, k = t->k;
  int64_t lda = (t->trans_a ? m : k) + rnd_int(0, 3), ldb = (t->trans_b ? k : n) + rnd_int(0, 3), ldc = n + rnd_int(0, 2);
  size_t asz = (size_t)((t->trans_a ? k : m) * lda + 1), bsz = (size_t)((t->trans_b ? n : k) * ldb + 1);
  uint8_t *a = malloc(asz), *b = malloc(bsz);
  int32_t *c = malloc((size_t)(m * ldc + 1) * sizeof *c);
  int *hits = calloc((size_t)(m * n + 1), sizeof *hits);
  int32_t *zrows = malloc((size_t)m * sizeof *zrows);
  for (int64_t i = 0; i < m; i++) zrows[i] = t->a_signed ? (int32_t)rnd_int(-128, 127) : (int32_t)rnd_int(0, 255);
  for (size_t i = 0; i < asz; i++) a[i] = (uint8_t)rnd();
  for (size_t i = 0; i < bsz; i++) b[i] = (uint8_t)rnd();
  /* Extreme values often: 0, 255 / -128, 127. */
  for (size_t i = 0; i < asz; i += 3) a[i] = rnd() & 1 ? 0x80 : 0x7f;
  for (size_t i = 1; i < bsz; i += 4) b[i] = rnd() & 1 ? 0xff : 0x00;
  if (t->narrow_b) { /* B - zb in [-64, 64], clamped to B's type */
    int32_t lo = t->b_signed ? -128 : 0, hi = t->b_signed ? 127 : 255;
    for (size_t i = 0; i < bsz; i++) {
      int32_t v = t->zb + (i % 5 == 0 ? (rnd() & 1 ? 64 : -64) : (int32_t)rnd_int(-64, 64));
      v = v < lo ? lo : v > hi ? hi : v;
      b[i] = (uint8_t)v;
    }
    if (t->narrow_b == 2 && t->k > 0 && t->zb + 65 <= hi) { /* one element of op(B) past the bound */
      int64_t p = rnd_int(0, t->k - 1), j = rnd_int(0, n - 1);
      b[t->trans_b ? j * ldb + p : p * ldb + j] = (uint8_t)(t->zb + 65);
    }
  }
  for (int64_t i = 0; i < m * ldc; i++) c[i] = (int32_t)rnd();
  kiln_igemm_args g = {.trans_a = t->trans_a, .trans_b = t->trans_b, .a_signed = t->a_signed, .b_signed = t->b_signed,
                       .m = m, .n = n, .k = k, .a = a, .lda = lda, .b = b, .ldb = ldb, .a_zero = t->za,
                       .b_zero = t->zb, .c = c, .ldc = ldc};
  epi_ctx e = {m, n, hits, false};
  if (t->epi) {
    g.epilogue = epilogue;
    g.epilogue_ctx = &e;
  }
  void *pb = NULL;
  if (t->packed) {
    pb = aligned_alloc(64, (kiln_igemm_packed_b_size(k, n) + 64) / 64 * 64);
    kiln_igemm_pack_b(&g, pb);
    g.packed_b = pb;
    g.b = NULL;
  }
  kiln_igemm_rows(pool, &g, t->row_zeros ? zrows : NULL);
  int bad = 0;
  for (int64_t i = 0; i < m && bad < 3; i++)
    for (int64_t j = 0; j < n && bad < 3; j++) {
      int64_t s = 0;
      for (int64_t p = 0; p < k; p++) {
        int32_t av = val(a, t->a_signed, t->trans_a ? p * lda + i : i * lda + p) - (t->row_zeros ? zrows[i] : t->za);
        int32_t bv = val(b, t->b_signed, t->trans_b ? j * ldb + p : p * ldb + j) - t->zb;
        s += (int64_t)av * bv;
      }
      int32_t want = (int32_t)(uint32_t)(uint64_t)s, got = c[i * ldc + j];
      if (t->epi) got = ~got;
      if (got != want || (t->epi && hits[i * n + j] != 1)) {
        printf("FAIL %s m=%lld n=%lld k=%lld ta=%d tb=%d as=%d bs=%d za=%d zb=%d packed=%d: c[%lld,%lld] = %d, want %d "
               "(hits %d)\n",
               kname, (long long)m, (long long)n, (long long)k, t->trans_a, t->trans_b, t->a_signed, t->b_signed,
               t->za, t->zb, t->packed, (long long)i, (long long)j, got, want, hits[i * n + j]);
        bad++;
      }
    }
  if (e.bad_tile) {
    printf("FAIL %s: epilogue tile out of range\n", kname);
    bad++;
  }
  g_failures += bad != 0;
  free(a);
  free(b);
  free(c);
  free(hits);
  free(zrows);
  free(pb);
}

static int32_t zero_point(bool is_signed) {
  static const int32_t s[] = {0, -3, 5, -128, 127}, u[] = {0, 128, 3, 255, 17};
  return is_signed ? s[rnd() % 5] : u[rnd() % 5];
}

static igemm_case random_case(int64_t max_m, int64_t max_n, int64_t max_k) {
  igemm_case t = {rnd_int(1, max_m), rnd_int(1, max_n), rnd_int(0, max_k), rnd() & 1, rnd() & 1, rnd() & 1, rnd() & 1,
                  rnd() & 1, rnd() & 1, 0, 0, rnd() % 4 == 0};
  t.za = zero_point(t.a_signed);
  t.zb = zero_point(t.b_signed);
  return t;
}

static void run_suite(kiln_threadpool *pool, const char *kname) {
  /* Edges of the 6 x 16 tile, odd k, k = 0 and 1. */
  static const int64_t ms[] = {1, 5, 6, 7, 13, 48, 49}, ns[] = {1, 15, 16, 17, 33, 256, 257}, ks[] = {0, 1, 2, 3, 7, 64, 513};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j += 2)
      for (size_t p = 0; p < sizeof ks / sizeof ks[0]; p++) {
        igemm_case t = random_case(1, 1, 1);
        t.m = ms[i];
        t.n = ns[(j + i) % (sizeof ns / sizeof ns[0])];
        t.k = ks[p];
        run_case(pool, kname, &t);
      }
  for (int r = 0; r < 60; r++) {
    igemm_case t = random_case(70, 300, 600);
    run_case(pool, kname, &t);
  }
  /* Every signedness and the named zero points. */
  for (int s = 0; s < 4; s++) {
    static const int32_t zs[] = {0, 128, -3};
    for (int z = 0; z < 3; z++) {
      igemm_case t = random_case(30, 40, 80);
      t.a_signed = s & 1;
      t.b_signed = s >> 1;
      t.za = zs[z];
      t.zb = zs[(z + 1) % 3];
      run_case(pool, kname, &t);
    }
  }
  /* B within +-64 of its zero point: the quads layout, every signedness, edges and random shapes. */
  for (int r = 0; r < 40; r++) {
    igemm_case t = random_case(r < 20 ? 20 : 70, r < 20 ? 40 : 300, r < 20 ? 20 : 600);
    t.narrow_b = r % 8 == 7 ? 2 : 1;
    if (r % 4 == 0) t.zb = 0, t.b_signed = true; /* reduce_range weights */
    run_case(pool, kname, &t);
  }
  igemm_case narrow_big = {.m = 7, .n = 17, .k = 40001, .a_signed = false, .b_signed = true, .za = -255, .zb = 0,
                           .narrow_b = 1};
  run_case(pool, kname, &narrow_big);
  /* Sums past int32 wrap as an int32 loop's would (k large, A - za in [255, 510]). */
  igemm_case big = {.m = 7, .n = 17, .k = 40001, .a_signed = false, .b_signed = true, .za = -255, .zb = 127};
  run_case(pool, kname, &big);
}

/* The AMX path's edges: M and N around its 16 x 16 tiles, 32 x 32 kernel
 * blocks and 64-row tasks, K around its 64-byte steps and 16-quad B tiles
 * (a partial last B tile is copied, the rest read in place), K up to a few
 * thousand; every layout it serves (narrow, full and unsigned-B quads) by
 * the operands' signedness and zero points. */
static void run_tile_edges(kiln_threadpool *pool, const char *kname) {
  static const int64_t ms[] = {1, 15, 16, 17, 32, 33, 64, 65, 130}, ns[] = {1, 16, 17, 31, 32, 33, 47, 300},
                       ks[] = {1, 4, 63, 64, 65, 127, 129, 1000, 2049};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    for (size_t p = 0; p < sizeof ks / sizeof ks[0]; p++) {
      igemm_case t = random_case(1, 1, 1);
      t.m = ms[i];
      t.n = ns[(i + p) % (sizeof ns / sizeof ns[0])];
      t.k = ks[p];
      run_case(pool, kname, &t);
    }
  for (int r = 0; r < 24; r++) {
    igemm_case t = random_case(150, 200, 3500);
    if (r % 3 == 0) t.a_signed = false, t.b_signed = true; /* QDQ's u8 activations x s8 weights */
    if (r % 3 == 1) t.a_signed = true, t.b_signed = false, t.row_zeros = true; /* ConvInteger's */
    run_case(pool, kname, &t);
  }
}

int main(void) {
  g_rng = 0x2545f4914f6cdd1dull;
  kiln_threadpool *pools[2] = {NULL, NULL};
  if (kiln_threadpool_create(2, &pools[1])) {
    fprintf(stderr, "cannot create a thread pool\n");
    return 1;
  }
  /* "amx": AMX-INT8 tiles for the quads layouts (AVX-512 VNNI for the rest). */
  const char *kernels[] = {"generic", "avx2", "avxvnni", "avx512vnni", "amx"};
  for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
    if (!kiln_igemm_force_kernel(kernels[ki])) {
      printf("skip kernel %s (not available on this CPU or not built)\n", kernels[ki]);
      continue;
    }
    for (int pi = 0; pi < 2; pi++) {
      int before = g_failures;
      run_suite(pools[pi], kernels[ki]);
      if (!strcmp(kernels[ki], "amx")) run_tile_edges(pools[pi], kernels[ki]);
      printf("kernel %-10s threads %d: %s\n", kernels[ki], pi + 1, g_failures == before ? "ok" : "FAILED");
    }
  }
  kiln_igemm_force_kernel(NULL);
  printf("automatic choice: %s\n", kiln_igemm_kernel_name());
  kiln_threadpool_destroy(pools[1]);
  printf("%d cases, %d failed\n", g_cases, g_failures);
  return g_failures ? 1 : 0;
}
