/* vk_memory.c — device memory: a few large blocks per memory kind, each one
 * VkDeviceMemory bound to one VkBuffer, suballocated best-fit with
 * coalescing. A vk_buffer is (block, offset, size), so binding it is a
 * descriptor range, not a new Vulkan object.
 *
 * Why blocks: drivers cap the number of allocations (maxMemoryAllocationCount,
 * often 4096) and vkAllocateMemory is slow; a model has thousands of
 * tensors. One spare empty block per kind is kept so that a session that
 * frees and reallocates does not bounce memory through the driver.
 *
 * Environment:
 *   KILN_VULKAN_MEMORY_LIMIT=N[K|M|G|T]  a cap, in bytes (KiB/MiB/GiB/TiB;
 *       "20M", "1.5G", "512MiB"),
 *       on the device memory (VK_MEM_DEVICE blocks: weights, activations,
 *       workspaces; not the host-visible staging rings) that kiln allocates
 *       from Vulkan in this process, over all vulkan devices, like ONNX
 *       Runtime's gpu_mem_limit. A block that would pass it is not allocated:
 *       the allocation fails with KILN_OUT_OF_MEMORY as a real out-of-memory
 *       would. Under a cap smaller than the usual 64 MiB block, blocks shrink
 *       to what is left. Read when a Vulkan context is created; unset, empty
 *       or 0: no cap. A malformed value fails context creation. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <errno.h>
#include <stdio.h>

#define VK_BLOCK_BYTES ((VkDeviceSize)64 << 20)

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

/* KILN_VULKAN_MEMORY_LIMIT: process-wide, because the cap is on what this
 * process takes from the device(s): VK_MEM_DEVICE block bytes of all
 * contexts. */
static kiln_memory_cap g_cap = KILN_MEMORY_CAP("vulkan", "KILN_VULKAN_MEMORY_LIMIT");

kiln_status_t vk_mem_init(vk_context *ctx) {
  KILN_TRY(kiln_memory_cap_init(&g_cap));
  const VkPhysicalDeviceLimits *l = &ctx->info.limits;
  /* Offsets must suit storage-buffer binding; 16 bytes keeps vec4 loads and
   * vkCmdFillBuffer's 4-byte rule happy; nonCoherentAtomSize covers any
   * flush/invalidate of host-visible ranges. */
  VkDeviceSize a = 16;
  if (l->minStorageBufferOffsetAlignment > a) a = l->minStorageBufferOffsetAlignment;
  if (l->nonCoherentAtomSize > a) a = l->nonCoherentAtomSize;
  /* All of these are powers of two per the spec, so the max is a multiple of each. */
  ctx->mem.align = a;
  return NULL;
}

static void destroy_block(vk_context *ctx, vk_block *b) {
  if (b->mapped) ctx->fn.vkUnmapMemory(ctx->device, b->memory);
  if (b->buffer) ctx->fn.vkDestroyBuffer(ctx->device, b->buffer, NULL);
  if (b->memory) ctx->fn.vkFreeMemory(ctx->device, b->memory, NULL);
  if (b->memory && ctx->mem.heap_used[b->heap_index] >= b->size) ctx->mem.heap_used[b->heap_index] -= b->size;
  if (b->kind == VK_MEM_DEVICE) kiln_memory_cap_release(&g_cap, b->size); /* b->size: what limit_reserve took */
  kiln_free_ranges_free(&b->free);
  free(b);
}

void vk_mem_destroy(vk_context *ctx) {
  for (int k = 0; k < 3; k++) {
    vk_block *b = ctx->mem.blocks[k];
    while (b) {
      vk_block *next = b->next;
      destroy_block(ctx, b);
      b = next;
    }
    ctx->mem.blocks[k] = NULL;
  }
}

/* Scores memory type i for `kind`; -1 if unusable. Higher is better. */
static int score_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t i, vk_mem_kind kind) {
  VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
  if (f & (VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT)) return -1;
  /* AMD's device-coherent memory is uncached and slow; only as a last resort. */
  int penalty = (f & VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD) ? 8 : 0;
  switch (kind) {
    case VK_MEM_DEVICE:
      if (!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) return -1;
      /* On discrete GPUs the host-visible device-local type is the small BAR
       * window; keep it for uploads. */
      return 16 - ((f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? 2 : 0) - penalty;
    case VK_MEM_UPLOAD:
      if ((f & (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) !=
          (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
        return -1;
      return 16 - ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? 2 : 0) - ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0) -
             penalty;
    case VK_MEM_READBACK:
      if ((f & (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) !=
          (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT))
        return -1;
      /* Reading uncached (write-combined) memory from the CPU is very slow. */
      return 16 + ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 4 : 0) -
             ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? 2 : 0) - penalty;
  }
  return -1;
}

static const char *kind_name(vk_mem_kind kind) {
  return kind == VK_MEM_DEVICE ? "device" : kind == VK_MEM_UPLOAD ? "upload" : "readback";
}

/* Creates a block of at least `size` bytes; caller holds mem.lock. */
static kiln_status_t create_block(vk_context *ctx, vk_mem_kind kind, VkDeviceSize size, bool dedicated,
                                  VkDeviceSize requested, vk_block **out) {
  vk_fns *fn = &ctx->fn;
  vk_block *b = calloc(1, sizeof *b);
  if (!b) return KILN_OOM();
  b->kind = kind;
  b->dedicated = dedicated;
  if (kind == VK_MEM_DEVICE) {
    kiln_status_t st = kiln_memory_cap_reserve(&g_cap, &size, requested, dedicated, ctx->mem.align);
    if (st) {
      free(b);
      return st;
    }
  }
  /* From here b->size is the reservation destroy_block gives back. */
  b->size = size;
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = size,
                            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = fn->vkCreateBuffer(ctx->device, &bci, NULL, &b->buffer);
  if (r != VK_SUCCESS) {
    if (kind == VK_MEM_DEVICE) kiln_memory_cap_release(&g_cap, size);
    free(b);
    char req[32];
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      return kiln_error(KILN_OUT_OF_MEMORY, "vulkan: out of memory creating a %s buffer of %s", kind_name(kind),
                        kiln_format_bytes(requested, req));
    return vk_check(r, "vkCreateBuffer");
  }
  VkMemoryRequirements req;
  fn->vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
  const VkPhysicalDeviceMemoryProperties *mp = &ctx->mem_props;

  /* Try memory types best first; an out-of-memory heap falls back to the next. */
  uint32_t tried = 0;
  int first_heap = -1;
  for (;;) {
    int best = -1, best_score = -1;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
      if (!(req.memoryTypeBits & (1u << i)) || (tried & (1u << i))) continue;
      int s = score_type(mp, i, kind);
      if (s < 0) continue;
      /* Tie: the bigger heap. */
      if (s > best_score || (s == best_score && mp->memoryHeaps[mp->memoryTypes[i].heapIndex].size >
                                                     mp->memoryHeaps[mp->memoryTypes[best].heapIndex].size)) {
        best = (int)i;
        best_score = s;
      }
    }
    if (best < 0) break;
    tried |= 1u << best;
    uint32_t heap = mp->memoryTypes[best].heapIndex;
    if (first_heap < 0) first_heap = (int)heap;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = (uint32_t)best};
    if (ctx->info.max_alloc_bytes && req.size > ctx->info.max_alloc_bytes) continue;
    r = fn->vkAllocateMemory(ctx->device, &ai, NULL, &b->memory);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) continue;
    if (r != VK_SUCCESS) {
      fn->vkDestroyBuffer(ctx->device, b->buffer, NULL);
      if (kind == VK_MEM_DEVICE) kiln_memory_cap_release(&g_cap, size);
      free(b);
      return vk_check(r, "vkAllocateMemory");
    }
    b->type_index = (uint32_t)best;
    b->heap_index = heap;
    break;
  }
  if (!b->memory) {
    fn->vkDestroyBuffer(ctx->device, b->buffer, NULL);
    if (kind == VK_MEM_DEVICE) kiln_memory_cap_release(&g_cap, size);
    free(b);
    char want[32], hs[32], used[32], lim[32];
    if (first_heap < 0)
      return kiln_error(KILN_UNSUPPORTED, "vulkan: no memory type suits %s buffers", kind_name(kind));
    if (ctx->info.max_alloc_bytes && req.size > ctx->info.max_alloc_bytes)
      return kiln_error(KILN_OUT_OF_MEMORY, "vulkan: out of %s memory allocating %s (the device's largest allocation is %s)",
                        kind == VK_MEM_DEVICE ? "device" : "host-visible", kiln_format_bytes(requested, want),
                        kiln_format_bytes(ctx->info.max_alloc_bytes, lim));
    return kiln_error(KILN_OUT_OF_MEMORY, "vulkan: out of %s memory allocating %s (heap %d: %s, %s in use)",
                      kind == VK_MEM_DEVICE ? "device" : "host-visible", kiln_format_bytes(requested, want), first_heap,
                      kiln_format_bytes(mp->memoryHeaps[first_heap].size, hs),
                      kiln_format_bytes(ctx->mem.heap_used[first_heap], used));
  }
  r = fn->vkBindBufferMemory(ctx->device, b->buffer, b->memory, 0);
  if (r == VK_SUCCESS && (mp->memoryTypes[b->type_index].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
    void *p = NULL;
    r = fn->vkMapMemory(ctx->device, b->memory, 0, VK_WHOLE_SIZE, 0, &p);
    b->mapped = p;
  }
  ctx->mem.heap_used[b->heap_index] += size;
  if (r != VK_SUCCESS) {
    destroy_block(ctx, b);
    return vk_check(r, "binding/mapping device memory");
  }
  if (!kiln_free_ranges_init(&b->free, size)) {
    destroy_block(ctx, b);
    return KILN_OOM();
  }
  *out = b;
  return NULL;
}

kiln_status_t vk_mem_alloc(vk_context *ctx, vk_mem_kind kind, size_t bytes, unsigned flags, vk_buffer **out) {
  *out = NULL;
  if ((int)kind < 0 || kind > VK_MEM_READBACK) return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: bad memory kind %d", kind);
  if (bytes > ((size_t)1 << 46)) {
    char b[32];
    return kiln_error(KILN_OUT_OF_MEMORY, "vulkan: out of device memory: refusing to allocate %s (more than any device has)",
                      kiln_format_bytes(bytes, b));
  }
  vk_allocator *m = &ctx->mem;
  VkDeviceSize size = align_up(bytes ? bytes : 1, m->align);
  vk_buffer *buf = calloc(1, sizeof *buf);
  if (!buf) return KILN_OOM();
  kiln_status_t st = NULL;
  pthread_mutex_lock(&m->lock);
  vk_block *block = NULL;
  VkDeviceSize offset = 0;
  bool dedicated = (flags & VK_ALLOC_DEDICATED) || size > VK_BLOCK_BYTES;
  bool internal = flags & VK_ALLOC_INTERNAL;
  if (!dedicated) {
    /* Best fit across all blocks of this kind. */
    vk_block *best_b = NULL;
    int best_i = -1;
    for (vk_block *b = m->blocks[kind]; b; b = b->next) {
      if (b->dedicated) continue;
      int i = kiln_free_ranges_best_fit(&b->free, size);
      if (i >= 0 && (!best_b || b->free.r[i].size < best_b->free.r[best_i].size)) best_b = b, best_i = i;
    }
    if (best_b) {
      block = best_b;
      offset = kiln_free_ranges_take(&block->free, best_i, size);
      block->used += size;
    }
  }
  if (!block) {
    st = create_block(ctx, kind, dedicated ? size : VK_BLOCK_BYTES, dedicated, size, &block);
    if (!st) {
      block->next = m->blocks[kind];
      m->blocks[kind] = block;
      offset = kiln_free_ranges_take(&block->free, 0, size);
      block->used += size;
    }
  }
  if (!st && internal) m->internal_used[kind] += size;
  else if (!st) m->n_live_buffers++;
  pthread_mutex_unlock(&m->lock);
  if (st) {
    free(buf);
    return st;
  }
  buf->block = block;
  buf->offset = offset;
  buf->alloc = size;
  buf->size = bytes;
  buf->internal = internal;
  *out = buf;
  return NULL;
}

kiln_status_t vk_buffer_alloc(vk_context *ctx, vk_mem_kind kind, size_t bytes, vk_buffer **out) {
  return vk_mem_alloc(ctx, kind, bytes, 0, out);
}

void vk_buffer_free(vk_context *ctx, vk_buffer *buf) {
  if (!buf) return;
  vk_allocator *m = &ctx->mem;
  pthread_mutex_lock(&m->lock);
  vk_block *b = buf->block;
  kiln_free_ranges_give(&b->free, buf->offset, buf->alloc);
  b->used -= buf->alloc;
  if (buf->internal) m->internal_used[b->kind] -= buf->alloc;
  else m->n_live_buffers--;
  if (b->used == 0) {
    bool release = b->dedicated;
    if (!release) /* keep one empty block per kind as a spare */
      for (vk_block *o = m->blocks[b->kind]; o; o = o->next)
        if (o != b && !o->dedicated && o->used == 0) release = true;
    if (release) {
      vk_block **pp = &m->blocks[b->kind];
      while (*pp != b) pp = &(*pp)->next;
      *pp = b->next;
      destroy_block(ctx, b);
    }
  }
  pthread_mutex_unlock(&m->lock);
  free(buf);
}

void *vk_buffer_host_ptr(vk_buffer *buf) {
  return buf && buf->block->mapped ? buf->block->mapped + buf->offset : NULL;
}

size_t vk_buffer_size(const vk_buffer *buf) { return buf ? buf->size : 0; }

void vk_memory_stats_get(vk_context *ctx, vk_memory_stats *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&ctx->mem.lock);
  for (int k = 0; k < 3; k++)
    for (vk_block *b = ctx->mem.blocks[k]; b; b = b->next) {
      out->n_blocks++;
      if (k == VK_MEM_DEVICE) {
        out->device_block_bytes += b->size;
        out->device_used_bytes += b->used;
      } else {
        out->host_block_bytes += b->size;
        out->host_used_bytes += b->used;
      }
    }
  /* Staging space is the runtime's, not the caller's: blocks yes, used no. */
  out->device_used_bytes -= ctx->mem.internal_used[VK_MEM_DEVICE];
  out->host_used_bytes -= ctx->mem.internal_used[VK_MEM_UPLOAD] + ctx->mem.internal_used[VK_MEM_READBACK];
  out->n_live_buffers = ctx->mem.n_live_buffers;
  pthread_mutex_unlock(&ctx->mem.lock);
}

#else
typedef int kiln_vk_memory_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */
