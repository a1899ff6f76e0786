/* check.h — the counters, CHECK macro, status check and xorshift generator
 * the unit tests and tests/api's public-API program share (one test
 * program per file, so the statics are per program; only kiln.h's API, so
 * a program linked to libkiln.so alone may include it). Define
 * CHECK_RNG_SEED before including to pick a seed. */
#ifndef KILN_TESTS_UNIT_CHECK_H
#define KILN_TESTS_UNIT_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln.h"

#ifndef CHECK_RNG_SEED
#define CHECK_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static int g_failures, g_checks;
static uint64_t g_rng = CHECK_RNG_SEED;

static inline uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

#define CHECK(cond, ...)                          \
  do {                                            \
    g_checks++;                                   \
    if (!(cond)) {                                \
      g_failures++;                               \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

/* Fails the test on a non-NULL status (and frees it); true when OK. */
static inline bool ok(kiln_status_t st, const char *what) {
  g_checks++;
  if (!st) return true;
  g_failures++;
  printf("FAIL: %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  return false;
}

#endif
