/* vk_runtime.h — a thin Vulkan compute runtime: context, memory, kernels,
 * streams and a timeline-semaphore queue.
 *
 * Usage, start to finish:
 *
 *   vk_device_props props[8];
 *   kiln_status_t why = NULL;
 *   int n = vk_enumerate(props, 8, &why);         // 0: no Vulkan; `why` says why
 *   vk_context *ctx = NULL;
 *   KILN_TRY(vk_context_create(0, &ctx));
 *   vk_buffer *x = NULL;
 *   KILN_TRY(vk_buffer_alloc(ctx, VK_MEM_DEVICE, bytes, &x));
 *   vk_kernel *k = NULL;
 *   vk_kernel_desc d = {"saxpy", glsl_source, 2, 8};
 *   KILN_TRY(vk_kernel_create(ctx, &d, &k));
 *   vk_stream *s = NULL;
 *   KILN_TRY(vk_stream_create(ctx, &s));
 *   vk_stream_begin(s);
 *   vk_stream_upload(s, x, 0, host_x, bytes);
 *   vk_stream_dispatch(s, k, (vk_buffer *[]){x, y}, &push, groups, 1, 1);
 *   vk_stream_readback(s, host_y, y, 0, bytes);
 *   vk_stream_end(s);
 *   uint64_t v;
 *   KILN_TRY(vk_submit(ctx, &s, 1, &v));
 *   KILN_TRY(vk_wait(ctx, v));                       // host_y is now filled
 *   vk_stream_destroy(ctx, s); vk_kernel_destroy(ctx, k);
 *   vk_buffer_free(ctx, x); vk_context_destroy(ctx);
 *
 * Vulkan and shaderc are dlopen'd (libvulkan.so.1, libshaderc_shared.so.1);
 * kiln never links them. Compiled only with KILN_HAVE_VULKAN.
 *
 * Thread safety: a vk_context and everything that takes one (allocation,
 * kernel creation, submit, wait) is thread-safe. A vk_stream is recorded by
 * one thread at a time; distinct streams may be recorded and submitted from
 * different threads concurrently.
 *
 * Ownership: objects returned through out parameters belong to the caller and
 * are freed with the matching _destroy/_free, all before vk_context_destroy.
 * Pointers passed in are borrowed for the call, except that vk_stream_readback's
 * `dst` must stay valid until the submission is waited for.
 */
#ifndef KILN_DEVICES_VULKAN_VK_RUNTIME_H
#define KILN_DEVICES_VULKAN_VK_RUNTIME_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vk_context vk_context; /* one VkDevice + one compute queue; shared by sessions; thread-safe */
typedef struct vk_buffer vk_buffer;   /* a suballocated range of device memory */
typedef struct vk_kernel vk_kernel;   /* compute pipeline + its layouts */
typedef struct vk_stream vk_stream;   /* a command buffer: recorded once, submitted many times */

typedef struct vk_device_props {
  char name[256], vendor[64], driver[256];
  uint32_t vendor_id, device_id, api_version;
  int type;                       /* VkPhysicalDeviceType */
  uint64_t device_local_bytes;    /* largest device-local heap */
  uint32_t subgroup_size;         /* 0 if unknown */
  bool subgroup_arithmetic;       /* subgroupAdd/Max in compute shaders */
  bool fp16;                      /* shaderFloat16 + storageBuffer16BitAccess */
  bool int8_dot;                  /* shaderIntegerDotProduct */
  bool coop_matrix;               /* VK_KHR_cooperative_matrix or _NV */
  bool int64;                     /* shaderInt64 */
  uint32_t max_workgroup_invocations, max_workgroup_size[3], max_workgroup_count[3];
  uint32_t max_shared_bytes, max_push_bytes;
  uint64_t max_storage_range, min_storage_offset_align;
} vk_device_props;

/* Loads the loader once per process and lists usable physical devices
 * (compute queue, Vulkan >= 1.2 or timeline semaphores), discrete GPUs first,
 * then integrated, virtual, cpu. Returns the count; 0 with *why (owned by the
 * caller, may be NULL) when there is no loader, no ICD or no usable device. */
int vk_enumerate(vk_device_props *out, int max, kiln_status_t *why);
/* Creates the context for enumerated device `index`. Honors
 * KILN_VULKAN_VALIDATION=1: enables VK_LAYER_KHRONOS_validation with a debug
 * messenger that prints each error/warning to stderr and counts errors. */
kiln_status_t vk_context_create(int index, vk_context **out);
void vk_context_destroy(vk_context *ctx); /* waits idle, frees everything */
const vk_device_props *vk_context_props(const vk_context *ctx);
uint64_t vk_validation_error_count(void); /* process-wide, 0 when validation is off */
/* Addition: which shader compiler kernels go through, for `kiln devices`:
 * "libshaderc" (dlopen'd) or "glslc <path> (<version>)" — the fallback when
 * libshaderc cannot be loaded (Debian 12's libshaderc.so.1 is underlinked).
 * NULL when there is none. Static string. KILN_VULKAN_SHADER_COMPILER=glslc
 * forces glslc; KILN_GLSLC names the program. */
const char *vk_shader_compiler(void);

/* Memory. DEVICE: device-local (storage + transfer src/dst). UPLOAD / READBACK:
 * host-visible coherent (+cached for READBACK), used by the staging ring and
 * available to callers. Suballocated from large blocks (e.g. 64 MiB, bigger
 * requests get their own block), offsets aligned to min_storage_offset_align;
 * freed ranges are reused (best fit, coalescing). Thread-safe. */
typedef enum vk_mem_kind { VK_MEM_DEVICE, VK_MEM_UPLOAD, VK_MEM_READBACK } vk_mem_kind;
kiln_status_t vk_buffer_alloc(vk_context *ctx, vk_mem_kind kind, size_t bytes, vk_buffer **out);
void vk_buffer_free(vk_context *ctx, vk_buffer *buf); /* NULL ok */
void *vk_buffer_host_ptr(vk_buffer *buf);            /* mapped pointer (UPLOAD/READBACK, or DEVICE memory that is host-visible), else NULL */
size_t vk_buffer_size(const vk_buffer *buf);
/* *_block_bytes and n_blocks count all memory the context holds (staging
 * rings included); *_used_bytes and n_live_buffers count only the caller's
 * vk_buffer_alloc buffers (aligned sizes), so they return to 0 when all are freed. */
typedef struct vk_memory_stats { uint64_t device_block_bytes, device_used_bytes, host_block_bytes, host_used_bytes; int n_blocks, n_live_buffers; } vk_memory_stats;
void vk_memory_stats_get(vk_context *ctx, vk_memory_stats *out);

/* Kernels: `glsl` is a whole compute shader (#version 450, its own
 * local_size, std430 storage buffers at set 0 binding 0..n_buffers-1, an
 * optional push-constant block of push_bytes). Shapes (sizes, strides,
 * offsets, bounds) come as specialization constants (`spec`, below), not as
 * literals in the source, so kernels that differ only in shapes have the
 * same source. Compiled to SPIR-V with shaderc (dlopen'd) or glslc, cached by
 * SHA-256 of (source, compiler and its options, kiln version) in
 * $KILN_CACHE_DIR/vulkan/ (default ~/.cache/kiln; atomic write-then-rename,
 * a corrupt entry is recompiled). The spec values are NOT part of that key:
 * they are applied when the pipeline is created (VkSpecializationInfo), and
 * a batch compiles each distinct source once however many kernels use it.
 * Pipelines are created through one VkPipelineCache per context, persisted
 * in the same folder (keyed by the device's pipelineCacheUUID) at context
 * destroy.
 * KILN_DUMP=glsl (or all; a comma/space separated list, as for the C JIT)
 * writes each kernel's source to kiln_dump/<name>.comp, or to
 * $KILN_DUMP_DIR/<name>.comp when that is set, once per name and source,
 * headed by comments `// spec ID = VALUE` giving the first such kernel's
 * constants. A failed dump warns once on stderr and never fails a kernel. */
/* One specialization constant: `layout(constant_id = id) const int X = ..;`
 * in the source gets `value` (32-bit: int, uint or float bits) when the
 * pipeline is created. Shapes travel this way, so kernels that differ only
 * in sizes share one source and one cached SPIR-V module. */
typedef struct vk_spec_const {
  uint32_t id;
  uint32_t value;
} vk_spec_const;

typedef struct vk_kernel_desc {
  const char *name;        /* for errors and profiles */
  const char *glsl;
  int n_buffers;
  uint32_t push_bytes;     /* 0: no push constants */
  const vk_spec_const *spec; /* n_spec entries, distinct ids; borrowed (copied at create); NULL when n_spec 0 */
  int n_spec;
} vk_kernel_desc;
kiln_status_t vk_kernel_create(vk_context *ctx, const vk_kernel_desc *desc, vk_kernel **out);
/* Compiles many at once (the JIT compiles in parallel; use up to
 * kiln_physical_cores() threads). out[i] NULL on failure; returns the first error. */
kiln_status_t vk_kernel_create_batch(vk_context *ctx, const vk_kernel_desc *descs, int n, vk_kernel **out);
void vk_kernel_destroy(vk_context *ctx, vk_kernel *k);
/* Addition: kernel-creation counters since the context was created.
 * spirv_compiled + spirv_cached is the number of distinct SPIR-V modules the
 * batches needed; spirv_shared counts kernels that used a module another
 * kernel of the same batch brought (same source, other spec values);
 * pipelines counts compute pipelines created. spirv_s / pipeline_s: wall time
 * of the batches' SPIR-V phase (compile or cache read) and pipeline phase. */
typedef struct vk_pipeline_stats {
  uint64_t spirv_compiled, spirv_cached, spirv_shared, pipelines;
  double spirv_s, pipeline_s;
} vk_pipeline_stats;
void vk_pipeline_stats_get(vk_context *ctx, vk_pipeline_stats *out);

/* Streams. A stream is recorded once (begin ... end) and may be submitted any
 * number of times; recording again (begin) resets it. Descriptor sets are
 * allocated from the stream's own pool when a dispatch is recorded, never per
 * submission. Between commands the stream inserts the pipeline barriers that
 * make each command see the previous ones' writes (compute->compute,
 * transfer<->compute); one global memory barrier per dependent command is fine. */
kiln_status_t vk_stream_create(vk_context *ctx, vk_stream **out);
void vk_stream_destroy(vk_context *ctx, vk_stream *s); /* waits for its pending submissions */
kiln_status_t vk_stream_begin(vk_stream *s);
/* buffers[i] binds binding i (whole buffer range). push: push_bytes bytes (copied). */
kiln_status_t vk_stream_dispatch(vk_stream *s, const vk_kernel *k, vk_buffer *const *buffers, const void *push,
                                 uint32_t groups_x, uint32_t groups_y, uint32_t groups_z);
kiln_status_t vk_stream_copy(vk_stream *s, vk_buffer *dst, size_t dst_offset, vk_buffer *src, size_t src_offset,
                             size_t bytes);
kiln_status_t vk_stream_fill_zero(vk_stream *s, vk_buffer *dst, size_t offset, size_t bytes);
/* Staging-ring transfers for one-shot streams (recorded per submission): the
 * bytes are copied into the context's upload ring now; readback data is
 * copied to `dst` on the host when the submission is known complete (in
 * vk_wait). Ring space is reclaimed when the queue's timeline passes the
 * submission that used it; a full ring waits for older work, a request larger
 * than the ring gets a temporary staging buffer. */
kiln_status_t vk_stream_upload(vk_stream *s, vk_buffer *dst, size_t dst_offset, const void *src, size_t bytes);
kiln_status_t vk_stream_readback(vk_stream *s, void *dst, vk_buffer *src, size_t src_offset, size_t bytes);
kiln_status_t vk_stream_end(vk_stream *s);
int vk_stream_dispatch_count(const vk_stream *s);

/* One vkQueueSubmit of n recorded streams, in order, signalling the queue's
 * timeline semaphore with a new value (returned). A stream whose previous
 * submission has not finished is waited for first. Thread-safe (queue mutex). */
kiln_status_t vk_submit(vk_context *ctx, vk_stream *const *streams, int n, uint64_t *out_value);
/* Host wait until the timeline reaches value (then completes readbacks of
 * finished submissions). Device lost or timeout -> clear error. */
kiln_status_t vk_wait(vk_context *ctx, uint64_t value);
uint64_t vk_completed_value(vk_context *ctx);
/* Drops the pending readbacks of submissions up to `value` without copying
 * them: after a failed wait (timeout, device lost) the caller frees their
 * host destinations, which a later completion must not write into. */
void vk_cancel_readbacks(vk_context *ctx, uint64_t value);
/* Counters since the context was made: queue submissions, command buffers,
 * dispatches, and bytes staged for upload and for readback. */
typedef struct vk_queue_stats {
  uint64_t submissions, command_buffers, dispatches, uploaded_bytes, read_back_bytes;
} vk_queue_stats;
void vk_queue_stats_get(vk_context *ctx, vk_queue_stats *out);

#endif
