/* common.h — small helpers every layer uses: checked allocation, min/max,
 * overflow-checked size arithmetic, a growable pointer/int vector. */
#ifndef KILN_BASE_COMMON_H
#define KILN_BASE_COMMON_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KILN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KILN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define KILN_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The most bytes one tensor may occupy. Guards against hostile models that
 * declare huge dims: allocation beyond this is an error, not an attempt. */
#define KILN_MAX_TENSOR_BYTES ((int64_t)1 << 36) /* 64 GiB */

/* a*b into *out; false on overflow or negative operands. */
static inline bool kiln_mul_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

/* A 64-byte aligned block of at least `bytes` (freed with free(); NULL when
 * out of memory). */
void *kiln_alloc_aligned(size_t bytes);
/* The same, but blocks of 2 MiB and more are 2 MiB aligned and advised onto
 * transparent huge pages where the OS has them: for the activation arena
 * and scratch, rewritten at every run (ResNet-50 about 2% faster). Not for
 * weights: a huge page's first touch zeroes 2 MiB, and on a virtual
 * machine whose host has reclaimed the guest's free 2 MiB blocks each
 * costs a host fault; BERT-base's cold start (load + first run, weights
 * copied and packed) took 0.42 s or 1-4 s by luck with them, 0.59 s
 * steadily without. */
void *kiln_alloc_aligned_huge(size_t bytes);

/* Large blocks (KILN_BIG_BLOCK bytes and more) for tensor data, from a
 * small cache of freed ones: glibc serves such sizes with mmap and unmaps
 * them at free, so every run of a model with large outputs faulted its
 * pages in again (a decoder's KV cache, 2 x 33 MB a step: 16k page faults,
 * two thirds of the step). kiln_big_free keeps at most KILN_BIG_CACHE_BLOCKS
 * blocks, KILN_BIG_CACHE_BYTES in all (the oldest goes first);
 * kiln_big_alloc takes the smallest kept block of `bytes` to 2 x `bytes`.
 * bytes: the size asked for (kiln_big_free's must be at most the block's);
 * blocks are 64-byte aligned, uninitialized, and plain free() may free
 * them too. Thread-safe. */
#define KILN_BIG_BLOCK ((size_t)4 << 20)
#define KILN_BIG_CACHE_BLOCKS 8
#define KILN_BIG_CACHE_BYTES ((size_t)256 << 20)
void *kiln_big_alloc(size_t bytes);
void kiln_big_free(void *p, size_t bytes);
/* Frees every kept block (tests; the process's exit frees them anyway). */
void kiln_big_cache_drain(void);

/* memcpy for copies into a destination far larger than the caches (a
 * KV cache's 33 MB concatenation): on x86-64 with non-temporal stores,
 * which skip reading each destination line before it is written (a
 * 2 x 33 MB copy over a 131 MB working set: 11 ms with memcpy, 7.5 with
 * these; reading the copy back right after was no slower). Fenced before
 * it returns, so the data is visible to other threads as memcpy's is.
 * Elsewhere, memcpy. Callers pick it by size: for a destination that fits
 * in cache, memcpy's stores leave it there for the next reader. */
#define KILN_STREAM_COPY_MIN_DEST ((size_t)16 << 20) /* destinations of at least this use it */
void kiln_memcpy_stream(void *dst, const void *src, size_t bytes);

/* strdup that returns NULL on NULL. */
char *kiln_strdup(const char *s);
/* printf into a new heap string (NULL on OOM). */
char *kiln_strfmt(const char *fmt, ...) KILN_PRINTF(1, 2);

/* Growable vector of void* (owned array; elements owned by whoever says so). */
typedef struct kiln_ptr_vec {
  void **items;
  int count, capacity;
} kiln_ptr_vec;
kiln_status_t kiln_ptr_vec_push(kiln_ptr_vec *v, void *item);
void kiln_ptr_vec_free(kiln_ptr_vec *v); /* frees the array only */

typedef struct kiln_int_vec {
  int *items;
  int count, capacity;
} kiln_int_vec;
kiln_status_t kiln_int_vec_push(kiln_int_vec *v, int item);
void kiln_int_vec_free(kiln_int_vec *v);

#endif
