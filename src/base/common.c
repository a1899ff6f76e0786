#include "base/common.h"

#include <stdarg.h>
#include <stdio.h>
#ifdef __linux__
#include <sys/mman.h>
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
