#include "base/common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#ifdef __linux__
#include <sys/mman.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#endif

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void *kiln_alloc_aligned(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
  return p;
}

void *kiln_alloc_aligned_huge(size_t bytes) {
  size_t align = bytes >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 64;
  void *p = NULL;
  if (posix_memalign(&p, align, bytes ? bytes : 64)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* Only the whole huge pages inside the block get one: no memory is added. */
  if (align == HUGE_PAGE_BYTES) (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice: failing is harmless */
#endif
  return p;
}

static struct {
  pthread_mutex_t lock;
  void *p[KILN_BIG_CACHE_BLOCKS];
  size_t size[KILN_BIG_CACHE_BLOCKS];
  int n;        /* kept blocks, oldest first */
  size_t bytes; /* their total */
} big_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

void *kiln_big_alloc(size_t bytes) {
  pthread_mutex_lock(&big_cache.lock);
  int best = -1;
  for (int i = 0; i < big_cache.n; i++)
    if (big_cache.size[i] >= bytes && big_cache.size[i] / 2 <= bytes &&
        (best < 0 || big_cache.size[i] < big_cache.size[best]))
      best = i;
  void *p = NULL;
  if (best >= 0) {
    p = big_cache.p[best];
    big_cache.bytes -= big_cache.size[best];
    for (int i = best; i + 1 < big_cache.n; i++) {
      big_cache.p[i] = big_cache.p[i + 1];
      big_cache.size[i] = big_cache.size[i + 1];
    }
    big_cache.n--;
  }
  pthread_mutex_unlock(&big_cache.lock);
  return p ? p : kiln_alloc_aligned(bytes);
}

void kiln_big_free(void *p, size_t bytes) {
  if (!p) return;
  if (bytes < KILN_BIG_BLOCK || bytes > KILN_BIG_CACHE_BYTES) {
    free(p);
    return;
  }
  void *drop[KILN_BIG_CACHE_BLOCKS + 1];
  int n_drop = 0;
  pthread_mutex_lock(&big_cache.lock);
  while (big_cache.n > 0 && (big_cache.n == KILN_BIG_CACHE_BLOCKS || big_cache.bytes + bytes > KILN_BIG_CACHE_BYTES)) {
    drop[n_drop++] = big_cache.p[0];
    big_cache.bytes -= big_cache.size[0];
    for (int i = 0; i + 1 < big_cache.n; i++) {
      big_cache.p[i] = big_cache.p[i + 1];
      big_cache.size[i] = big_cache.size[i + 1];
    }
    big_cache.n--;
  }
  big_cache.p[big_cache.n] = p;
  big_cache.size[big_cache.n++] = bytes;
  big_cache.bytes += bytes;
  pthread_mutex_unlock(&big_cache.lock);
  for (int i = 0; i < n_drop; i++) free(drop[i]); /* outside the lock */
}

void kiln_big_cache_drain(void) {
  pthread_mutex_lock(&big_cache.lock);
  int n = big_cache.n;
  void *drop[KILN_BIG_CACHE_BLOCKS];
  memcpy(drop, big_cache.p, sizeof(void *) * (size_t)n);
  big_cache.n = 0;
  big_cache.bytes = 0;
  pthread_mutex_unlock(&big_cache.lock);
  for (int i = 0; i < n; i++) free(drop[i]);
}

char *kiln_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *r = malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

char *kiln_strfmt(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *r = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (r) vsnprintf(r, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return r;
}

kiln_status_t kiln_ptr_vec_push(kiln_ptr_vec *v, void *item) {
  if (v->count == v->capacity) {
    int cap = v->capacity ? v->capacity * 2 : 8;
    void **n = realloc(v->items, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    v->items = n;
    v->capacity = cap;
  }
  v->items[v->count++] = item;
  return NULL;
}

void kiln_ptr_vec_free(kiln_ptr_vec *v) {
  free(v->items);
  v->items = NULL;
  v->count = v->capacity = 0;
}

kiln_status_t kiln_int_vec_push(kiln_int_vec *v, int item) {
  if (v->count == v->capacity) {
    int cap = v->capacity ? v->capacity * 2 : 8;
    int *n = realloc(v->items, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    v->items = n;
    v->capacity = cap;
  }
  v->items[v->count++] = item;
  return NULL;
}

void kiln_int_vec_free(kiln_int_vec *v) {
  free(v->items);
  v->items = NULL;
  v->count = v->capacity = 0;
}

void kiln_memcpy_stream(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  char *d = dst;
  const char *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 15); /* to the first 16-byte aligned destination byte */
  if (bytes < 256 || head > bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t n = bytes / 64; /* a cache line's four stores at a time: the write-combining buffer fills whole */
  for (size_t i = 0; i < n; i++, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, bytes - n * 64);
  _mm_sfence();
#else
  memcpy(dst, src, bytes);
#endif
}
