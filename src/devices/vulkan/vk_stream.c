/* vk_stream.c — command recording (streams), submission on the context's
 * one queue, and the timeline semaphore that tells the host what finished.
 *
 * Barriers: every recorded command is preceded by one global memory barrier
 * (shader/transfer writes -> shader/transfer reads and writes). Because a
 * pipeline barrier orders against everything earlier in submission order on
 * the queue, the barrier before a stream's first command also orders it after
 * previously submitted streams. The stream ends with a barrier to the host
 * so that mapped memory read after vk_wait sees the device's writes. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <stdio.h>

/* A readback recorded in a stream, handed to the context at submit. */
typedef struct stream_readback {
  void *dst;          /* borrowed from the caller */
  const uint8_t *src; /* mapped staging memory */
  size_t bytes;
} stream_readback;

struct vk_stream {
  vk_context *ctx;               /* borrowed */
  VkCommandPool pool;
  VkCommandBuffer cb;
  VkDescriptorPool *dpools;      /* owned array; reset at begin, grown on demand */
  uint32_t *dpool_sets;          /* capacity (sets) of each pool */
  int n_dpools, cur_dpool;
  bool recording, ended, failed;
  int n_commands, n_dispatches;
  uint64_t last_value;           /* value of the latest submission, 0 if none */
  bool has_staging, staging_submitted;
  stream_readback *readbacks;    /* owned array */
  int n_readbacks, cap_readbacks;
  vk_buffer **temps;             /* owned temporary staging buffers (unsubmitted) */
  int n_temps, cap_temps;
};

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

/* ---- timeline ------------------------------------------------------------------- */

uint64_t vk_timeline_completed(vk_context *ctx) {
  uint64_t v = 0;
  VkResult r = ctx->fn.vkGetSemaphoreCounterValue(ctx->device, ctx->timeline, &v);
  if (r != VK_SUCCESS) {
    if (r == VK_ERROR_DEVICE_LOST) atomic_store(&ctx->lost, true); /* later submits and waits fail fast */
    return atomic_load(&ctx->completed_cache);
  }
  atomic_store(&ctx->completed_cache, v);
  return v;
}

static uint64_t last_submitted(vk_context *ctx) {
  pthread_mutex_lock(&ctx->queue_lock);
  uint64_t v = ctx->last_submitted;
  pthread_mutex_unlock(&ctx->queue_lock);
  return v;
}

kiln_status_t vk_timeline_wait(vk_context *ctx, uint64_t value) {
  if (atomic_load(&ctx->lost)) return kiln_error(KILN_DEVICE_ERROR, "vulkan: device lost (earlier)");
  if (value == 0 || vk_timeline_completed(ctx) >= value) return NULL;
  uint64_t last = last_submitted(ctx);
  if (value > last)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: waiting for value %llu, but only %llu submissions were made",
                      (unsigned long long)value, (unsigned long long)last);
  VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                            .semaphoreCount = 1,
                            .pSemaphores = &ctx->timeline,
                            .pValues = &value};
  uint64_t timeout_ns = (uint64_t)(ctx->timeout_s * 1e9);
  VkResult r = ctx->fn.vkWaitSemaphores(ctx->device, &wi, timeout_ns);
  if (r == VK_SUCCESS) {
    vk_timeline_completed(ctx);
    return NULL;
  }
  if (r == VK_TIMEOUT)
    return kiln_error(KILN_DEVICE_ERROR,
                      "vulkan: timed out after %g s waiting for submission %llu (completed: %llu); "
                      "set KILN_VULKAN_TIMEOUT_S to wait longer",
                      ctx->timeout_s, (unsigned long long)value, (unsigned long long)vk_timeline_completed(ctx));
  if (r == VK_ERROR_DEVICE_LOST) {
    atomic_store(&ctx->lost, true);
    return kiln_error(KILN_DEVICE_ERROR, "vulkan: device lost while waiting for submission %llu",
                      (unsigned long long)value);
  }
  return vk_check(r, "vkWaitSemaphores");
}

kiln_status_t vk_wait(vk_context *ctx, uint64_t value) {
  KILN_TRY(vk_timeline_wait(ctx, value));
  vk_staging_retire(ctx, vk_timeline_completed(ctx));
  return NULL;
}

uint64_t vk_completed_value(vk_context *ctx) {
  uint64_t v = vk_timeline_completed(ctx);
  vk_staging_retire(ctx, v);
  return v;
}

void vk_queue_stats_get(vk_context *ctx, vk_queue_stats *out) {
  pthread_mutex_lock(&ctx->queue_lock);
  *out = ctx->qstats;
  pthread_mutex_unlock(&ctx->queue_lock);
}

/* ---- streams ------------------------------------------------------------------------ */

kiln_status_t vk_stream_create(vk_context *ctx, vk_stream **out) {
  *out = NULL;
  vk_stream *s = calloc(1, sizeof *s);
  if (!s) return KILN_OOM();
  s->ctx = ctx;
  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .queueFamilyIndex = ctx->queue_family};
  kiln_status_t st = vk_check(ctx->fn.vkCreateCommandPool(ctx->device, &pci, NULL, &s->pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = s->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  if (!st) st = vk_check(ctx->fn.vkAllocateCommandBuffers(ctx->device, &ai, &s->cb), "vkAllocateCommandBuffers");
  if (st) {
    vk_stream_destroy(ctx, s);
    return st;
  }
  *out = s;
  return NULL;
}

/* Gives back what an unsubmitted recording reserved in the staging rings. */
static void abandon_staging(vk_stream *s) {
  vk_context *ctx = s->ctx;
  pthread_mutex_lock(&ctx->staging_lock);
  vk_staging_tag_locked(ctx, s, 0);
  pthread_mutex_unlock(&ctx->staging_lock);
  for (int i = 0; i < s->n_temps; i++) vk_buffer_free(ctx, s->temps[i]);
  s->n_temps = 0;
  s->n_readbacks = 0;
}

void vk_stream_destroy(vk_context *ctx, vk_stream *s) {
  if (!s) return;
  if (s->last_value) {
    kiln_status_t st = vk_wait(ctx, s->last_value);
    if (st) { /* device lost or hung: nothing left to protect, just free */
      fprintf(stderr, "kiln: warning: %s (destroying a stream)\n", kiln_status_message(st));
      kiln_status_free(st);
      ctx->fn.vkDeviceWaitIdle(ctx->device);
    }
  }
  abandon_staging(s);
  for (int i = 0; i < s->n_dpools; i++) ctx->fn.vkDestroyDescriptorPool(ctx->device, s->dpools[i], NULL);
  if (s->pool) ctx->fn.vkDestroyCommandPool(ctx->device, s->pool, NULL);
  free(s->dpools);
  free(s->dpool_sets);
  free(s->readbacks);
  free(s->temps);
  free(s);
}

kiln_status_t vk_stream_begin(vk_stream *s) {
  vk_context *ctx = s->ctx;
  if (s->recording && !s->ended) ctx->fn.vkEndCommandBuffer(s->cb); /* abandon the unfinished recording */
  s->recording = s->ended = false;
  /* The command buffer and its descriptor sets may still be in use. */
  if (s->last_value) KILN_RETURN_IF_ERROR(vk_wait(ctx, s->last_value), "vulkan: before re-recording a stream");
  abandon_staging(s);
  KILN_TRY(vk_check(ctx->fn.vkResetCommandPool(ctx->device, s->pool, 0), "vkResetCommandPool"));
  for (int i = 0; i < s->n_dpools; i++)
    KILN_TRY(vk_check(ctx->fn.vkResetDescriptorPool(ctx->device, s->dpools[i], 0), "vkResetDescriptorPool"));
  s->cur_dpool = 0;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  KILN_TRY(vk_check(ctx->fn.vkBeginCommandBuffer(s->cb, &bi), "vkBeginCommandBuffer"));
  s->recording = true;
  s->failed = false;
  s->n_commands = s->n_dispatches = 0;
  s->has_staging = s->staging_submitted = false;
  return NULL;
}

static kiln_status_t check_recording(vk_stream *s, const char *what) {
  if (!s->recording || s->ended)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: %s on a stream that is not recording (call vk_stream_begin)",
                      what);
  return NULL;
}

/* Marks the recording broken: vk_stream_end then refuses it. */
static kiln_status_t fail(vk_stream *s, kiln_status_t st) {
  if (st) s->failed = true;
  return st;
}

static void barrier(vk_stream *s) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
  VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  s->ctx->fn.vkCmdPipelineBarrier(s->cb, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
  s->n_commands++;
}

static kiln_status_t check_range(const vk_buffer *b, size_t offset, size_t bytes, const char *what) {
  if (!b) return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: %s: NULL buffer", what);
  if (offset > b->size || bytes > b->size - offset)
    return kiln_error(KILN_OUT_OF_RANGE, "vulkan: %s: range [%zu, %zu) exceeds the buffer's %zu bytes", what, offset,
                      offset + bytes, b->size);
  return NULL;
}

static kiln_status_t new_descriptor_pool(vk_stream *s, uint32_t min_descriptors) {
  vk_context *ctx = s->ctx;
  uint32_t sets = s->n_dpools ? s->dpool_sets[s->n_dpools - 1] * 2 : 64;
  if (sets > 4096) sets = 4096;
  uint32_t per_set = KILN_MAX(8u, min_descriptors);
  VkDescriptorPool *np = realloc(s->dpools, (size_t)(s->n_dpools + 1) * sizeof *np);
  if (!np) return KILN_OOM();
  s->dpools = np;
  uint32_t *ns = realloc(s->dpool_sets, (size_t)(s->n_dpools + 1) * sizeof *ns);
  if (!ns) return KILN_OOM();
  s->dpool_sets = ns;
  VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = sets * per_set};
  VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                   .maxSets = sets,
                                   .poolSizeCount = 1,
                                   .pPoolSizes = &size};
  KILN_TRY(vk_check(ctx->fn.vkCreateDescriptorPool(ctx->device, &ci, NULL, &s->dpools[s->n_dpools]),
                    "vkCreateDescriptorPool"));
  s->dpool_sets[s->n_dpools] = sets;
  s->n_dpools++;
  return NULL;
}

static kiln_status_t alloc_set(vk_stream *s, const vk_kernel *k, VkDescriptorSet *out) {
  vk_context *ctx = s->ctx;
  for (;;) {
    if (s->cur_dpool == s->n_dpools) KILN_TRY(new_descriptor_pool(s, (uint32_t)k->n_buffers));
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = s->dpools[s->cur_dpool],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &k->set_layout};
    VkResult r = ctx->fn.vkAllocateDescriptorSets(ctx->device, &ai, out);
    if (r == VK_SUCCESS) return NULL;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
      return vk_check(r, "vkAllocateDescriptorSets");
    bool fresh = s->cur_dpool == s->n_dpools - 1 && s->n_dpools > 0;
    s->cur_dpool++;
    /* A brand-new pool that cannot hold one set never will. */
    if (fresh && s->cur_dpool == s->n_dpools && s->dpool_sets[s->n_dpools - 1] >= 4096)
      return vk_check(r, "vkAllocateDescriptorSets");
  }
}

kiln_status_t vk_stream_dispatch(vk_stream *s, const vk_kernel *k, vk_buffer *const *buffers, const void *push,
                                 uint32_t groups_x, uint32_t groups_y, uint32_t groups_z) {
  KILN_TRY(check_recording(s, "dispatch"));
  vk_context *ctx = s->ctx;
  if (!k) return fail(s, kiln_error(KILN_INVALID_ARGUMENT, "vulkan: dispatch of a NULL kernel"));
  const uint32_t *maxc = ctx->info.props.max_workgroup_count;
  if (groups_x > maxc[0] || groups_y > maxc[1] || groups_z > maxc[2])
    return fail(s, kiln_error(KILN_UNSUPPORTED,
                              "vulkan: kernel '%s': %u x %u x %u workgroups exceed the device's %u x %u x %u", k->name,
                              groups_x, groups_y, groups_z, maxc[0], maxc[1], maxc[2]));
  if (k->push_bytes && !push)
    return fail(s, kiln_error(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s' needs %u bytes of push constants", k->name,
                              k->push_bytes));
  VkDescriptorBufferInfo stack_infos[16];
  VkWriteDescriptorSet stack_writes[16];
  VkDescriptorBufferInfo *infos = stack_infos;
  VkWriteDescriptorSet *writes = stack_writes;
  if (k->n_buffers > 16) {
    infos = calloc((size_t)k->n_buffers, sizeof *infos);
    writes = calloc((size_t)k->n_buffers, sizeof *writes);
    if (!infos || !writes) {
      free(infos);
      free(writes);
      return fail(s, KILN_OOM());
    }
  }
  kiln_status_t st = NULL;
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (k->n_buffers > 0) st = alloc_set(s, k, &set);
  for (int i = 0; !st && i < k->n_buffers; i++) {
    const vk_buffer *b = buffers ? buffers[i] : NULL;
    if (!b) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "vulkan: kernel '%s': buffer %d is NULL", k->name, i);
      break;
    }
    /* Whole buffer; rounding to 4 stays inside the (aligned) reservation. */
    VkDeviceSize range = KILN_MIN(align_up(b->size ? b->size : 4, 4), b->alloc);
    if (range > ctx->info.props.max_storage_range) {
      st = kiln_error(KILN_UNSUPPORTED, "vulkan: kernel '%s': buffer %d has %zu bytes, more than one binding may address (%llu)",
                      k->name, i, b->size, (unsigned long long)ctx->info.props.max_storage_range);
      break;
    }
    infos[i] = (VkDescriptorBufferInfo){.buffer = b->block->buffer, .offset = b->offset, .range = range};
    writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = set,
                                       .dstBinding = (uint32_t)i,
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &infos[i]};
  }
  if (!st) {
    if (k->n_buffers > 0) ctx->fn.vkUpdateDescriptorSets(ctx->device, (uint32_t)k->n_buffers, writes, 0, NULL);
    barrier(s);
    ctx->fn.vkCmdBindPipeline(s->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
    if (k->n_buffers > 0)
      ctx->fn.vkCmdBindDescriptorSets(s->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0, NULL);
    if (k->push_bytes)
      ctx->fn.vkCmdPushConstants(s->cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k->push_bytes, push);
    ctx->fn.vkCmdDispatch(s->cb, groups_x, groups_y, groups_z);
    s->n_dispatches++;
  }
  if (infos != stack_infos) {
    free(infos);
    free(writes);
  }
  return fail(s, st);
}

static void cmd_copy(vk_stream *s, const vk_buffer *dst, VkDeviceSize dst_off, const vk_buffer *src,
                     VkDeviceSize src_off, VkDeviceSize bytes) {
  VkBufferCopy region = {.srcOffset = src->offset + src_off, .dstOffset = dst->offset + dst_off, .size = bytes};
  barrier(s);
  s->ctx->fn.vkCmdCopyBuffer(s->cb, src->block->buffer, dst->block->buffer, 1, &region);
}

kiln_status_t vk_stream_copy(vk_stream *s, vk_buffer *dst, size_t dst_offset, vk_buffer *src, size_t src_offset,
                             size_t bytes) {
  KILN_TRY(check_recording(s, "copy"));
  KILN_TRY(fail(s, check_range(dst, dst_offset, bytes, "copy destination")));
  KILN_TRY(fail(s, check_range(src, src_offset, bytes, "copy source")));
  if (bytes == 0) return NULL;
  if (dst == src && dst_offset < src_offset + bytes && src_offset < dst_offset + bytes)
    return fail(s, kiln_error(KILN_INVALID_ARGUMENT, "vulkan: copy between overlapping ranges of one buffer"));
  cmd_copy(s, dst, dst_offset, src, src_offset, bytes);
  return NULL;
}

kiln_status_t vk_stream_fill_zero(vk_stream *s, vk_buffer *dst, size_t offset, size_t bytes) {
  KILN_TRY(check_recording(s, "fill_zero"));
  KILN_TRY(fail(s, check_range(dst, offset, bytes, "fill_zero")));
  if (bytes == 0) return NULL;
  /* vkCmdFillBuffer writes whole 4-byte words: an unaligned tail may only
   * spill into the buffer's alignment padding. */
  VkDeviceSize size = align_up(bytes, 4);
  if (offset % 4 || offset + size > dst->alloc || (size != bytes && offset + bytes != dst->size))
    return fail(s, kiln_error(KILN_INVALID_ARGUMENT,
                              "vulkan: fill_zero range [%zu, %zu) must start on a multiple of 4 and end on one "
                              "(or at the buffer's end)",
                              offset, offset + bytes));
  barrier(s);
  s->ctx->fn.vkCmdFillBuffer(s->cb, dst->block->buffer, dst->offset + offset, size, 0);
  return NULL;
}

static kiln_status_t keep_temp(vk_stream *s, vk_buffer *temp) {
  if (!temp) return NULL;
  if (s->n_temps == s->cap_temps) {
    int cap = s->cap_temps ? s->cap_temps * 2 : 4;
    vk_buffer **n = realloc(s->temps, (size_t)cap * sizeof *n);
    if (!n) {
      vk_buffer_free(s->ctx, temp);
      return KILN_OOM();
    }
    s->temps = n;
    s->cap_temps = cap;
  }
  s->temps[s->n_temps++] = temp;
  return NULL;
}

kiln_status_t vk_stream_upload(vk_stream *s, vk_buffer *dst, size_t dst_offset, const void *src, size_t bytes) {
  KILN_TRY(check_recording(s, "upload"));
  KILN_TRY(fail(s, check_range(dst, dst_offset, bytes, "upload destination")));
  if (bytes == 0) return NULL;
  if (!src) return fail(s, kiln_error(KILN_INVALID_ARGUMENT, "vulkan: upload from NULL"));
  vk_buffer *stage = NULL, *temp = NULL;
  VkDeviceSize off = 0;
  KILN_TRY(fail(s, vk_staging_reserve(s->ctx, false, s, bytes, &stage, &off, &temp)));
  KILN_TRY(fail(s, keep_temp(s, temp)));
  s->has_staging = true;
  __atomic_fetch_add(&s->ctx->qstats.uploaded_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
  /* Host-coherent memory, and vkQueueSubmit makes host writes visible. */
  memcpy(stage->block->mapped + stage->offset + off, src, bytes);
  VkBufferCopy region = {.srcOffset = stage->offset + off, .dstOffset = dst->offset + dst_offset, .size = bytes};
  barrier(s);
  s->ctx->fn.vkCmdCopyBuffer(s->cb, stage->block->buffer, dst->block->buffer, 1, &region);
  return NULL;
}

kiln_status_t vk_stream_readback(vk_stream *s, void *dst, vk_buffer *src, size_t src_offset, size_t bytes) {
  KILN_TRY(check_recording(s, "readback"));
  KILN_TRY(fail(s, check_range(src, src_offset, bytes, "readback source")));
  if (bytes == 0) return NULL;
  if (!dst) return fail(s, kiln_error(KILN_INVALID_ARGUMENT, "vulkan: readback into NULL"));
  __atomic_fetch_add(&s->ctx->qstats.read_back_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
  if (s->n_readbacks == s->cap_readbacks) {
    int cap = s->cap_readbacks ? s->cap_readbacks * 2 : 8;
    stream_readback *n = realloc(s->readbacks, (size_t)cap * sizeof *n);
    if (!n) return fail(s, KILN_OOM());
    s->readbacks = n;
    s->cap_readbacks = cap;
  }
  vk_buffer *stage = NULL, *temp = NULL;
  VkDeviceSize off = 0;
  KILN_TRY(fail(s, vk_staging_reserve(s->ctx, true, s, bytes, &stage, &off, &temp)));
  KILN_TRY(fail(s, keep_temp(s, temp)));
  s->has_staging = true;
  VkBufferCopy region = {.srcOffset = src->offset + src_offset, .dstOffset = stage->offset + off, .size = bytes};
  barrier(s);
  s->ctx->fn.vkCmdCopyBuffer(s->cb, src->block->buffer, stage->block->buffer, 1, &region);
  s->readbacks[s->n_readbacks++] =
      (stream_readback){.dst = dst, .src = stage->block->mapped + stage->offset + off, .bytes = bytes};
  return NULL;
}

kiln_status_t vk_stream_end(vk_stream *s) {
  KILN_TRY(check_recording(s, "end"));
  if (s->failed)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: a command of this stream failed to record; record it again");
  /* Device writes -> host reads of mapped memory after vk_wait. */
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
  s->ctx->fn.vkCmdPipelineBarrier(s->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                  VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  KILN_TRY(vk_check(s->ctx->fn.vkEndCommandBuffer(s->cb), "vkEndCommandBuffer"));
  s->ended = true;
  return NULL;
}

int vk_stream_dispatch_count(const vk_stream *s) { return s ? s->n_dispatches : 0; }

/* ---- submission --------------------------------------------------------------------- */

kiln_status_t vk_submit(vk_context *ctx, vk_stream *const *streams, int n, uint64_t *out_value) {
  if (out_value) *out_value = 0;
  if (atomic_load(&ctx->lost)) return kiln_error(KILN_DEVICE_ERROR, "vulkan: device lost (earlier)");
  if (n <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: submit of %d streams", n);
  VkCommandBuffer stack_cbs[16];
  VkCommandBuffer *cbs = n <= 16 ? stack_cbs : calloc((size_t)n, sizeof *cbs);
  if (!cbs) return KILN_OOM();
  kiln_status_t st = NULL;
  int total_readbacks = 0, total_temps = 0;
  uint64_t dispatches = 0;
  for (int i = 0; i < n && !st; i++) {
    vk_stream *s = streams[i];
    if (!s || s->ctx != ctx) st = kiln_error(KILN_INVALID_ARGUMENT, "vulkan: submit: stream %d is NULL or foreign", i);
    else if (!s->ended) st = kiln_error(KILN_INVALID_ARGUMENT, "vulkan: submit: stream %d was not ended (vk_stream_end)", i);
    else if (s->has_staging && s->staging_submitted)
      st = kiln_error(KILN_INVALID_ARGUMENT,
                      "vulkan: submit: stream %d has staging uploads/readbacks and was already submitted; such "
                      "streams are one-shot (record them again)",
                      i);
    for (int j = 0; j < i && !st; j++)
      if (streams[j] == s) st = kiln_error(KILN_INVALID_ARGUMENT, "vulkan: submit: stream %d appears twice", i);
    /* A command buffer must not be pending when submitted again. */
    if (!st && s->last_value) st = vk_wait(ctx, s->last_value);
    if (!st) {
      cbs[i] = s->cb;
      total_readbacks += s->n_readbacks;
      total_temps += s->n_temps;
      dispatches += (uint64_t)s->n_dispatches;
    }
  }
  if (st) {
    if (cbs != stack_cbs) free(cbs);
    return st;
  }
  pthread_mutex_lock(&ctx->queue_lock);
  pthread_mutex_lock(&ctx->staging_lock);
  /* Room for the hand-over first, so that nothing can fail after the submit. */
  int n_readbacks0 = ctx->n_readbacks, n_deferred0 = ctx->n_deferred;
  for (int i = 0; i < total_readbacks && !st; i++)
    st = vk_staging_add_readback_locked(ctx, &(vk_pending_readback){0});
  for (int i = 0; i < total_temps && !st; i++) st = vk_staging_defer_free_locked(ctx, NULL, 0);
  ctx->n_readbacks = n_readbacks0;
  ctx->n_deferred = n_deferred0;
  uint64_t value = ctx->last_submitted + 1;
  if (!st) {
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .signalSemaphoreValueCount = 1,
                                        .pSignalSemaphoreValues = &value};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = &ti,
                       .commandBufferCount = (uint32_t)n,
                       .pCommandBuffers = cbs,
                       .signalSemaphoreCount = 1,
                       .pSignalSemaphores = &ctx->timeline};
    VkResult r = ctx->fn.vkQueueSubmit(ctx->queue, 1, &si, VK_NULL_HANDLE);
    if (r == VK_ERROR_DEVICE_LOST) atomic_store(&ctx->lost, true);
    st = vk_check(r, "submit");
  }
  if (!st) {
    ctx->last_submitted = value;
    ctx->qstats.submissions++;
    ctx->qstats.command_buffers += (uint64_t)n;
    ctx->qstats.dispatches += dispatches;
    for (int i = 0; i < n; i++) {
      vk_stream *s = streams[i];
      s->last_value = value;
      if (!s->has_staging) continue;
      s->staging_submitted = true;
      vk_staging_tag_locked(ctx, s, value);
      for (int j = 0; j < s->n_readbacks; j++)
        ctx->readbacks[ctx->n_readbacks++] = (vk_pending_readback){
            .value = value, .dst = s->readbacks[j].dst, .src = s->readbacks[j].src, .bytes = s->readbacks[j].bytes};
      for (int j = 0; j < s->n_temps; j++) ctx->deferred[ctx->n_deferred++] = (vk_deferred_free){value, s->temps[j]};
      s->n_readbacks = s->n_temps = 0;
    }
  }
  pthread_mutex_unlock(&ctx->staging_lock);
  pthread_mutex_unlock(&ctx->queue_lock);
  if (cbs != stack_cbs) free(cbs);
  if (!st && out_value) *out_value = value;
  return st;
}

#else
typedef int kiln_vk_stream_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */
