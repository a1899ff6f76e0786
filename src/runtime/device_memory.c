/* device_memory.c — see device_memory.h. */
#include "runtime/device_memory.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

const char *kiln_format_bytes(uint64_t bytes, char buf[32]) {
  static const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(buf, 32, "%" PRIu64 " bytes", bytes);
    return buf;
  }
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
  snprintf(buf, 32, "%.1f %s", v, units[u]);
  return buf;
}

bool kiln_parse_bytes(const char *s, uint64_t *out) {
  errno = 0;
  char *end = NULL;
  while (isspace((unsigned char)*s)) s++;
  if (!isdigit((unsigned char)*s)) return false;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return false;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0, end++; break;
    case 'M': mult = 1024.0 * 1024, end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024, end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: break;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
  if (mult > 1 && (*end == 'b' || *end == 'B')) end++;
  while (isspace((unsigned char)*end)) end++;
  if (*end || v * mult >= 18446744073709551615.0) return false;
  *out = (uint64_t)(v * mult);
  return true;
}

/* ---- free ranges ------------------------------------------------------------------ */

bool kiln_free_ranges_init(kiln_free_ranges *f, uint64_t size) {
  f->r = malloc(sizeof *f->r);
  if (!f->r) return false;
  f->r[0] = (kiln_free_range){0, size};
  f->n = 1;
  f->cap = 1;
  return true;
}

void kiln_free_ranges_free(kiln_free_ranges *f) {
  free(f->r);
  memset(f, 0, sizeof *f);
}

int kiln_free_ranges_best_fit(const kiln_free_ranges *f, uint64_t size) {
  int best = -1;
  for (int i = 0; i < f->n; i++)
    if (f->r[i].size >= size && (best < 0 || f->r[i].size < f->r[best].size)) best = i;
  return best;
}

uint64_t kiln_free_ranges_take(kiln_free_ranges *f, int i, uint64_t size) {
  uint64_t offset = f->r[i].offset;
  f->r[i].offset += size;
  f->r[i].size -= size;
  if (f->r[i].size == 0) {
    memmove(&f->r[i], &f->r[i + 1], (size_t)(f->n - i - 1) * sizeof *f->r);
    f->n--;
  }
  return offset;
}

bool kiln_free_ranges_give(kiln_free_ranges *f, uint64_t offset, uint64_t size) {
  int i = 0;
  while (i < f->n && f->r[i].offset < offset) i++;
  bool merge_prev = i > 0 && f->r[i - 1].offset + f->r[i - 1].size == offset;
  bool merge_next = i < f->n && offset + size == f->r[i].offset;
  if (merge_prev && merge_next) {
    f->r[i - 1].size += size + f->r[i].size;
    memmove(&f->r[i], &f->r[i + 1], (size_t)(f->n - i - 1) * sizeof *f->r);
    f->n--;
  } else if (merge_prev) {
    f->r[i - 1].size += size;
  } else if (merge_next) {
    f->r[i].offset = offset;
    f->r[i].size += size;
  } else {
    if (f->n == f->cap) {
      int cap = f->cap ? f->cap * 2 : 4;
      kiln_free_range *nr = realloc(f->r, (size_t)cap * sizeof *nr);
      if (!nr) return false;
      f->r = nr;
      f->cap = cap;
    }
    memmove(&f->r[i + 1], &f->r[i], (size_t)(f->n - i) * sizeof *f->r);
    f->r[i] = (kiln_free_range){offset, size};
    f->n++;
  }
  return true;
}

bool kiln_free_ranges_empty(const kiln_free_ranges *f, uint64_t block_size) {
  return f->n == 1 && f->r[0].offset == 0 && f->r[0].size == block_size;
}

/* ---- the cap ------------------------------------------------------------------------ */

kiln_status_t kiln_memory_cap_init(kiln_memory_cap *cap) {
  const char *lim = getenv(cap->env);
  uint64_t limit = 0;
  if (lim && *lim && !kiln_parse_bytes(lim, &limit))
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: %s=%.100s is not a byte count (N, or N with a K, M, G or T suffix)",
                      cap->device, cap->env, lim);
  pthread_mutex_lock(&cap->lock);
  cap->limit = limit;
  pthread_mutex_unlock(&cap->lock);
  return NULL;
}

kiln_status_t kiln_memory_cap_reserve(kiln_memory_cap *cap, uint64_t *size, uint64_t requested, bool dedicated,
                                      uint64_t align) {
  pthread_mutex_lock(&cap->lock);
  uint64_t limit = cap->limit, in_use = cap->used;
  if (limit) {
    uint64_t left = limit > in_use ? limit - in_use : 0;
    if (*size > left && !dedicated && requested <= left) *size = left / align * align; /* >= requested: both aligned */
    if (*size > left) {
      pthread_mutex_unlock(&cap->lock);
      char want[32], lim[32], used[32];
      return kiln_error(KILN_OUT_OF_MEMORY, "%s: out of device memory allocating %s (limit %s set by %s, %s in use)",
                        cap->device, kiln_format_bytes(requested, want), kiln_format_bytes(limit, lim), cap->env,
                        kiln_format_bytes(in_use, used));
    }
  }
  cap->used += *size;
  pthread_mutex_unlock(&cap->lock);
  return NULL;
}

void kiln_memory_cap_release(kiln_memory_cap *cap, uint64_t size) {
  pthread_mutex_lock(&cap->lock);
  cap->used -= KILN_MIN(cap->used, size);
  pthread_mutex_unlock(&cap->lock);
}

/* ---- the block pool ------------------------------------------------------------------ */

static void pool_block_destroy(kiln_block_pool *pool, kiln_pool_block *b) {
  if (b->handle) pool->destroy(pool->user, b->handle);
  kiln_memory_cap_release(pool->cap, b->size);
  kiln_free_ranges_free(&b->free);
  free(b);
}

static kiln_status_t pool_block_create(kiln_block_pool *pool, uint64_t size, uint64_t requested, bool dedicated,
                                       kiln_pool_block **out) {
  char want[32], most[32];
  if (pool->max_alloc && requested > pool->max_alloc)
    return kiln_error(KILN_OUT_OF_MEMORY, "%s: out of device memory allocating %s (the device's largest allocation is %s)",
                      pool->cap->device, kiln_format_bytes(requested, want), kiln_format_bytes(pool->max_alloc, most));
  if (pool->max_alloc && size > pool->max_alloc) size = pool->max_alloc / pool->align * pool->align;
  KILN_TRY(kiln_memory_cap_reserve(pool->cap, &size, requested, dedicated, pool->align));
  kiln_pool_block *b = calloc(1, sizeof *b);
  if (!b || !kiln_free_ranges_init(&b->free, size)) {
    kiln_memory_cap_release(pool->cap, size);
    free(b);
    return KILN_OOM();
  }
  b->size = size;
  b->dedicated = dedicated;
  kiln_status_t st = pool->create(pool->user, size, requested, &b->handle);
  if (st) {
    b->handle = NULL;
    pool_block_destroy(pool, b);
    return st;
  }
  *out = b;
  return NULL;
}

kiln_status_t kiln_block_pool_take(kiln_block_pool *pool, uint64_t bytes, kiln_pool_block **out_block,
                                   uint64_t *out_offset, uint64_t *out_size) {
  uint64_t a = pool->align;
  uint64_t size = ((bytes ? bytes : 1) + a - 1) / a * a;
  bool dedicated = size > pool->block_bytes / 2;
  kiln_pool_block *best = NULL;
  int best_i = -1;
  for (kiln_pool_block *b = pool->blocks; b && !dedicated; b = b->next) {
    if (b->dedicated) continue;
    int i = kiln_free_ranges_best_fit(&b->free, size);
    if (i >= 0 && (!best || b->free.r[i].size < best->free.r[best_i].size)) best = b, best_i = i;
  }
  if (!best) {
    KILN_TRY(pool_block_create(pool, dedicated ? size : pool->block_bytes, size, dedicated, &best));
    best->next = pool->blocks;
    pool->blocks = best;
    best_i = 0;
  }
  *out_block = best;
  *out_offset = kiln_free_ranges_take(&best->free, best_i, size);
  *out_size = size;
  return NULL;
}

void kiln_block_pool_give(kiln_block_pool *pool, kiln_pool_block *b, uint64_t offset, uint64_t size) {
  kiln_free_ranges_give(&b->free, offset, size);
  if (!kiln_free_ranges_empty(&b->free, b->size)) return;
  bool release = b->dedicated;
  for (kiln_pool_block *o = pool->blocks; o && !release; o = o->next) /* keep one empty shared block as a spare */
    if (o != b && !o->dedicated && kiln_free_ranges_empty(&o->free, o->size)) release = true;
  if (!release) return;
  kiln_pool_block **pp = &pool->blocks;
  while (*pp != b) pp = &(*pp)->next;
  *pp = b->next;
  pool_block_destroy(pool, b);
}

void kiln_block_pool_release_all(kiln_block_pool *pool) {
  while (pool->blocks) {
    kiln_pool_block *b = pool->blocks;
    pool->blocks = b->next;
    pool_block_destroy(pool, b);
  }
}
