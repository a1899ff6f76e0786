/* test_random.h — what the contraction unit tests share: a seeded
 * xorshift generator (each test sets g_rng's seed) and the check of the
 * tiles a GEMM hands its epilogue (in range, every element exactly once). */
#ifndef KILN_TESTS_UNIT_TEST_RANDOM_H
#define KILN_TESTS_UNIT_TEST_RANDOM_H

#include <stdbool.h>
#include <stdint.h>

static uint64_t g_rng;

static inline uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static inline int64_t rnd_int(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }
static inline float rnd_float(void) { return (float)((double)(rnd() >> 11) / (double)(1ull << 53) * 2.0 - 1.0); }

typedef struct epi_ctx {
  int64_t m, n;
  int *hits; /* how often each element was handed to the epilogue */
  bool bad_tile;
} epi_ctx;

/* Counts the visit of every element of the tile; false (and bad_tile)
 * when the tile is out of range. */
static inline bool epi_visit(epi_ctx *e, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  if (m0 < 0 || n0 < 0 || mb <= 0 || nb <= 0 || m0 + mb > e->m || n0 + nb > e->n) {
    e->bad_tile = true;
    return false;
  }
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) __atomic_fetch_add(&e->hits[(m0 + i) * e->n + n0 + j], 1, __ATOMIC_RELAXED);
  return true;
}

#endif
