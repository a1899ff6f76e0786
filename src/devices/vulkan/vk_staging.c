/* vk_staging.c — the context's two staging rings (host -> device uploads,
 * device -> host readbacks), pending readback copies and deferred frees.
 *
 * A ring is a FIFO of regions inside one host-visible buffer. A region is
 * owned by the stream that recorded it until that stream is submitted; the
 * submission tags it with its timeline value, and it is reclaimed (after its
 * readback, if any, has been copied to the caller's memory) once the
 * timeline passes that value. A stream re-recorded without being submitted
 * gives its regions back at once (tag 0).
 *
 * When the ring is full the oldest region decides: if it is submitted we
 * wait for it; if it still belongs to an unsubmitted stream (maybe the one
 * recording now) waiting could deadlock, so the request gets a temporary
 * buffer instead, as does any request bigger than the ring. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#define VK_RING_BYTES ((VkDeviceSize)32 << 20)
#define VK_UNSUBMITTED UINT64_MAX

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

static vk_ring_region *region_at(vk_ring *r, int i) {
  return &r->regions[(r->first_region + i) % r->cap_regions];
}

/* Copies finished readbacks to their destinations, frees finished temporary
 * buffers and pops finished ring regions. Caller holds staging_lock. */
static void retire_locked(vk_context *ctx, uint64_t completed) {
  int w = 0;
  for (int i = 0; i < ctx->n_readbacks; i++) {
    vk_pending_readback *p = &ctx->readbacks[i];
    if (p->value <= completed) memcpy(p->dst, p->src, p->bytes);
    else ctx->readbacks[w++] = *p;
  }
  ctx->n_readbacks = w;
  w = 0;
  for (int i = 0; i < ctx->n_deferred; i++) {
    vk_deferred_free *d = &ctx->deferred[i];
    if (d->value <= completed) vk_buffer_free(ctx, d->buf);
    else ctx->deferred[w++] = *d;
  }
  ctx->n_deferred = w;
  vk_ring *rings[2] = {&ctx->upload, &ctx->readback};
  for (int k = 0; k < 2; k++) {
    vk_ring *r = rings[k];
    while (r->n_regions > 0) {
      vk_ring_region *front = region_at(r, 0);
      if (front->value == VK_UNSUBMITTED || front->value > completed) break;
      r->tail = front->end;
      r->first_region = (r->first_region + 1) % r->cap_regions;
      r->n_regions--;
    }
    if (r->n_regions == 0) r->head = r->tail = 0; /* empty: restart at 0 for the longest free run */
  }
}

void vk_cancel_readbacks(vk_context *ctx, uint64_t value) {
  pthread_mutex_lock(&ctx->staging_lock);
  int w = 0;
  for (int i = 0; i < ctx->n_readbacks; i++)
    if (ctx->readbacks[i].value > value) ctx->readbacks[w++] = ctx->readbacks[i];
  ctx->n_readbacks = w;
  pthread_mutex_unlock(&ctx->staging_lock);
}

void vk_staging_retire(vk_context *ctx, uint64_t completed) {
  pthread_mutex_lock(&ctx->staging_lock);
  retire_locked(ctx, completed);
  pthread_mutex_unlock(&ctx->staging_lock);
}

/* Finds `size` bytes in r; false if there is no room now. */
static bool ring_alloc(vk_ring *r, VkDeviceSize size, VkDeviceSize *out_offset) {
  if (r->n_regions == 0) r->head = r->tail = 0;
  bool empty = r->n_regions == 0;
  if (r->head > r->tail || empty) {
    if (r->cap - r->head >= size) {
      *out_offset = r->head;
    } else if (r->tail >= size && !empty) {
      *out_offset = 0; /* wrap; [head, cap) stays unused until the tail passes it */
    } else {
      return false;
    }
  } else if (r->head < r->tail) {
    if (r->tail - r->head < size) return false;
    *out_offset = r->head;
  } else {
    return false; /* head == tail with regions live: full */
  }
  return true;
}

static kiln_status_t push_region(vk_ring *r, VkDeviceSize offset, VkDeviceSize size, const vk_stream *owner) {
  if (r->n_regions == r->cap_regions) {
    int cap = r->cap_regions ? r->cap_regions * 2 : 64;
    vk_ring_region *nr = malloc((size_t)cap * sizeof *nr);
    if (!nr) return KILN_OOM();
    for (int i = 0; i < r->n_regions; i++) nr[i] = *region_at(r, i);
    free(r->regions);
    r->regions = nr;
    r->cap_regions = cap;
    r->first_region = 0;
  }
  r->regions[(r->first_region + r->n_regions) % r->cap_regions] =
      (vk_ring_region){.begin = offset, .end = offset + size, .owner = owner, .value = VK_UNSUBMITTED};
  r->n_regions++;
  r->head = offset + size;
  return NULL;
}

kiln_status_t vk_staging_reserve(vk_context *ctx, bool readback, const vk_stream *s, size_t bytes, vk_buffer **out_buf,
                                 VkDeviceSize *out_offset, vk_buffer **out_temp) {
  *out_buf = NULL;
  *out_offset = 0;
  *out_temp = NULL;
  vk_mem_kind kind = readback ? VK_MEM_READBACK : VK_MEM_UPLOAD;
  VkDeviceSize size = align_up(bytes ? bytes : 1, ctx->mem.align);
  vk_ring *r = readback ? &ctx->readback : &ctx->upload;
  if (size <= VK_RING_BYTES) {
    pthread_mutex_lock(&ctx->staging_lock);
    if (!r->buf) {
      kiln_status_t st = vk_mem_alloc(ctx, kind, VK_RING_BYTES, VK_ALLOC_DEDICATED | VK_ALLOC_INTERNAL, &r->buf);
      if (st) {
        pthread_mutex_unlock(&ctx->staging_lock);
        return kiln_status_annotate(st, "while creating the %s staging ring", readback ? "readback" : "upload");
      }
      r->cap = VK_RING_BYTES;
    }
    for (;;) {
      retire_locked(ctx, vk_timeline_completed(ctx));
      VkDeviceSize off;
      if (ring_alloc(r, size, &off)) {
        kiln_status_t st = push_region(r, off, size, s);
        pthread_mutex_unlock(&ctx->staging_lock);
        if (st) return st;
        *out_buf = r->buf;
        *out_offset = off;
        return NULL;
      }
      /* Full: wait for the oldest region if it is submitted, else give up on the ring. */
      uint64_t wait_for = r->n_regions ? region_at(r, 0)->value : VK_UNSUBMITTED;
      if (wait_for == VK_UNSUBMITTED) break;
      pthread_mutex_unlock(&ctx->staging_lock);
      kiln_status_t st = vk_timeline_wait(ctx, wait_for);
      if (st) return kiln_status_annotate(st, "while waiting for staging space");
      pthread_mutex_lock(&ctx->staging_lock);
    }
    pthread_mutex_unlock(&ctx->staging_lock);
  }
  vk_buffer *temp = NULL;
  KILN_RETURN_IF_ERROR(vk_mem_alloc(ctx, kind, bytes, VK_ALLOC_INTERNAL, &temp), "while allocating a temporary %s staging buffer",
                       readback ? "readback" : "upload");
  *out_buf = temp;
  *out_offset = 0;
  *out_temp = temp;
  return NULL;
}

void vk_staging_tag_locked(vk_context *ctx, const vk_stream *s, uint64_t value) {
  vk_ring *rings[2] = {&ctx->upload, &ctx->readback};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < rings[k]->n_regions; i++) {
      vk_ring_region *g = region_at(rings[k], i);
      if (g->owner == s && g->value == VK_UNSUBMITTED) {
        g->value = value;
        g->owner = NULL;
      }
    }
}

kiln_status_t vk_staging_add_readback_locked(vk_context *ctx, const vk_pending_readback *p) {
  if (ctx->n_readbacks == ctx->cap_readbacks) {
    int cap = ctx->cap_readbacks ? ctx->cap_readbacks * 2 : 16;
    vk_pending_readback *n = realloc(ctx->readbacks, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    ctx->readbacks = n;
    ctx->cap_readbacks = cap;
  }
  ctx->readbacks[ctx->n_readbacks++] = *p;
  return NULL;
}

kiln_status_t vk_staging_defer_free_locked(vk_context *ctx, vk_buffer *buf, uint64_t value) {
  if (ctx->n_deferred == ctx->cap_deferred) {
    int cap = ctx->cap_deferred ? ctx->cap_deferred * 2 : 16;
    vk_deferred_free *n = realloc(ctx->deferred, (size_t)cap * sizeof *n);
    if (!n) return KILN_OOM();
    ctx->deferred = n;
    ctx->cap_deferred = cap;
  }
  ctx->deferred[ctx->n_deferred++] = (vk_deferred_free){value, buf};
  return NULL;
}

void vk_staging_destroy(vk_context *ctx) {
  for (int i = 0; i < ctx->n_deferred; i++) vk_buffer_free(ctx, ctx->deferred[i].buf);
  free(ctx->deferred);
  free(ctx->readbacks);
  ctx->deferred = NULL;
  ctx->readbacks = NULL;
  ctx->n_deferred = ctx->n_readbacks = 0;
  vk_ring *rings[2] = {&ctx->upload, &ctx->readback};
  for (int k = 0; k < 2; k++) {
    vk_buffer_free(ctx, rings[k]->buf);
    free(rings[k]->regions);
    memset(rings[k], 0, sizeof *rings[k]);
  }
}

#else
typedef int kiln_vk_staging_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */
