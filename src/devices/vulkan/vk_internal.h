/* vk_internal.h — what the vk_*.c files of the Vulkan runtime share: the
 * dlopen'd function tables, the context, buffer and stream structs, and the
 * helpers that turn a VkResult into a kiln_status_t. Not for use outside
 * src/devices/vulkan/vk_{loader,context,memory,staging,pipeline,stream}.c.
 *
 * Locking order (never take an earlier lock while holding a later one):
 *   stream recording (caller's thread) -> ctx->staging_lock -> ctx->mem.lock
 *   ctx->queue_lock is taken alone (submission), or before staging_lock.
 */
#ifndef KILN_DEVICES_VULKAN_VK_INTERNAL_H
#define KILN_DEVICES_VULKAN_VK_INTERNAL_H

#if KILN_HAVE_VULKAN

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>
#include <shaderc/shaderc.h>

#include <pthread.h>
#include <stdatomic.h>

#include "base/common.h"
#include "devices/vulkan/vk_runtime.h"
#include "runtime/device_memory.h"

/* ---- function tables ------------------------------------------------------ */

/* Entry points fetched with vkGetInstanceProcAddr(NULL, ...). */
#define VK_GLOBAL_FNS(X)                     \
  X(vkCreateInstance)                        \
  X(vkEnumerateInstanceExtensionProperties)  \
  X(vkEnumerateInstanceLayerProperties)

/* Fetched with vkGetInstanceProcAddr(instance, ...); all required. */
#define VK_INSTANCE_FNS(X)                   \
  X(vkDestroyInstance)                       \
  X(vkEnumeratePhysicalDevices)              \
  X(vkGetPhysicalDeviceProperties)           \
  X(vkGetPhysicalDeviceProperties2)          \
  X(vkGetPhysicalDeviceFeatures2)            \
  X(vkGetPhysicalDeviceMemoryProperties)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)    \
  X(vkCreateDevice)                          \
  X(vkGetDeviceProcAddr)

/* Fetched with vkGetDeviceProcAddr(device, ...); all required (Vulkan 1.2). */
#define VK_DEVICE_FNS(X)              \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkDeviceWaitIdle)                 \
  X(vkQueueSubmit)                    \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkMapMemory)                      \
  X(vkUnmapMemory)                    \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkBindBufferMemory)               \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreateDescriptorSetLayout)      \
  X(vkDestroyDescriptorSetLayout)     \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreatePipelineCache)            \
  X(vkDestroyPipelineCache)           \
  X(vkGetPipelineCacheData)           \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreateDescriptorPool)           \
  X(vkDestroyDescriptorPool)          \
  X(vkResetDescriptorPool)            \
  X(vkAllocateDescriptorSets)         \
  X(vkUpdateDescriptorSets)           \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkResetCommandPool)               \
  X(vkAllocateCommandBuffers)         \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkCmdBindPipeline)                \
  X(vkCmdBindDescriptorSets)          \
  X(vkCmdPushConstants)               \
  X(vkCmdDispatch)                    \
  X(vkCmdCopyBuffer)                  \
  X(vkCmdFillBuffer)                  \
  X(vkCmdPipelineBarrier)             \
  X(vkCreateSemaphore)                \
  X(vkDestroySemaphore)               \
  X(vkWaitSemaphores)                 \
  X(vkGetSemaphoreCounterValue)

#define VK_DECLARE_FN(name) PFN_##name name;
typedef struct vk_fns {
  VK_INSTANCE_FNS(VK_DECLARE_FN)
  VK_DEVICE_FNS(VK_DECLARE_FN)
  /* optional (VK_EXT_debug_utils, only with validation) */
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
} vk_fns;

/* The process-wide loader: libvulkan (and libshaderc), loaded once. */
typedef struct vk_loader {
  void *lib;                                   /* dlopen handle, never closed */
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
  VK_GLOBAL_FNS(VK_DECLARE_FN)
  uint32_t instance_version;                   /* loader's VK_API_VERSION */
} vk_loader;

/* The shader compiler: libshaderc when it loads, else the glslc program
 * (Debian 12's libshaderc.so.1 is underlinked and cannot be dlopen'd; glslc
 * from the same package works). Exactly one of lib / glslc[0] is set. */
typedef struct vk_shaderc_fns {
  void *lib; /* dlopen handle, never closed; NULL when using glslc */
  char glslc[1024];          /* path of glslc, "" when using the library */
  char glslc_version[512];   /* first line of `glslc --version`, part of the cache key */
  shaderc_compiler_t (*compiler_initialize)(void);
  void (*compiler_release)(shaderc_compiler_t);
  shaderc_compile_options_t (*compile_options_initialize)(void);
  void (*compile_options_release)(shaderc_compile_options_t);
  void (*compile_options_set_source_language)(shaderc_compile_options_t, shaderc_source_language);
  void (*compile_options_set_optimization_level)(shaderc_compile_options_t, shaderc_optimization_level);
  void (*compile_options_set_target_env)(shaderc_compile_options_t, shaderc_target_env, uint32_t);
  void (*compile_options_set_target_spirv)(shaderc_compile_options_t, shaderc_spirv_version);
  shaderc_compilation_result_t (*compile_into_spv)(const shaderc_compiler_t, const char *, size_t, shaderc_shader_kind,
                                                   const char *, const char *, const shaderc_compile_options_t);
  void (*result_release)(shaderc_compilation_result_t);
  size_t (*result_get_length)(const shaderc_compilation_result_t);
  shaderc_compilation_status (*result_get_compilation_status)(const shaderc_compilation_result_t);
  const char *(*result_get_bytes)(const shaderc_compilation_result_t);
  const char *(*result_get_error_message)(const shaderc_compilation_result_t);
  void (*get_spv_version)(unsigned int *, unsigned int *);
} vk_shaderc_fns;

/* Loads libvulkan + libshaderc once; NULL, or an error saying what is missing
 * (a new status the caller owns). *out pointers are process-lifetime. */
kiln_status_t vk_loader_get(const vk_loader **out_loader, const vk_shaderc_fns **out_shaderc);

/* glslc fallback (vk_glslc.c). find: fills sc->glslc and glslc_version from
 * $KILN_GLSLC or PATH; false with *why when there is none. compile: SPIR-V
 * (malloc'd words) or an error message (malloc'd, "NAME:LINE: error: ...");
 * *out_tool_failed tells a compiler that could not run or died (missing,
 * killed, no temp file) from a shader it rejected. */
bool vk_glslc_find(vk_shaderc_fns *sc, char *why, size_t why_size);
bool vk_glslc_compile(const vk_shaderc_fns *sc, const char *name, const char *glsl, uint32_t **out_words,
                      size_t *out_bytes, char **out_message, bool *out_tool_failed);

/* Why the loader found no driver (vk_loader.c), naming the loader's
 * ICD-selection variables when they are set: a stale VK_ICD_FILENAMES is the
 * usual cause. Returns buf. */
const char *vk_no_driver_reason(VkResult r, char *buf, size_t size);

/* Keeps every library the loader loads between begin and end (the drivers,
 * what they link, layers) loaded until the process exits; put the scope
 * around the first loader call that may load drivers (an instance
 * extension or layer query already does) and vkCreateInstance.
 * Why: vkDestroyInstance unloads them, and LLVM-based drivers (lavapipe,
 * with the libLLVM and libz3 it links) keep heap blocks reachable only from
 * the driver's globals; unloading turns them into leaks under
 * LeakSanitizer, with stacks that name no module, so no suppression can
 * match them. A later instance would also load them all again. A library
 * another thread loads inside the scope stays loaded too (harmless). */
typedef struct vk_pin_scope {
  char **names; /* libraries loaded at begin (owned) */
  int n, cap;
} vk_pin_scope;
void vk_pin_scope_begin(vk_pin_scope *scope);
void vk_pin_scope_end(vk_pin_scope *scope); /* frees the scope */

/* Fills a table's instance-level entries; error names the missing one. */
kiln_status_t vk_load_instance_fns(VkInstance instance, vk_fns *fns);
kiln_status_t vk_load_device_fns(VkDevice device, vk_fns *fns);

/* ---- errors ---------------------------------------------------------------- */

const char *vk_result_name(VkResult r);
/* NULL for VK_SUCCESS (and other non-error codes), else
 * "vulkan: <what> failed: VK_ERROR_... (-N)" with a fitting kiln code. */
kiln_status_t vk_check(VkResult r, const char *what);
/* "1.2 GiB" style sizes for messages, into buf (returns buf). */

/* ---- physical devices -------------------------------------------------------- */

/* What enumeration learns about one physical device: the public props plus
 * what device creation needs. */
typedef struct vk_physical_info {
  VkPhysicalDevice phys;
  vk_device_props props;
  uint32_t queue_family;
  bool has_portability_subset;     /* must be enabled if advertised (MoltenVK) */
  bool has_int_dot_ext;            /* VK_KHR_shader_integer_dot_product on a 1.2 device */
  bool has_coop_matrix_khr, has_coop_matrix_nv;
  bool f16_arith, f16_storage, int8_arith, int8_storage, int16_arith, sub_size_control;
  VkPhysicalDeviceLimits limits;
  uint64_t max_alloc_bytes;        /* maxMemoryAllocationSize */
  uint32_t driver_version;
  uint8_t pipeline_cache_uuid[VK_UUID_SIZE];
} vk_physical_info;

/* Lists usable devices of `instance`, sorted discrete > integrated > virtual
 * > cpu (stable). *out is malloc'd (caller frees). On no usable device returns
 * 0 and a reason in *why. */
int vk_list_physical(const vk_fns *fns, VkInstance instance, vk_physical_info **out, kiln_status_t *why);

/* ---- memory -------------------------------------------------------------------- */

typedef struct vk_block {
  VkDeviceMemory memory;
  VkBuffer buffer;              /* spans the whole block: storage | transfer src/dst */
  VkDeviceSize size, used;
  uint32_t type_index, heap_index;
  uint8_t *mapped;              /* persistent map, NULL if not host-visible */
  bool dedicated;               /* made for one big request; freed with it */
  vk_mem_kind kind;
  kiln_free_ranges free;         /* owned */
  struct vk_block *next;
} vk_block;

struct vk_buffer {
  vk_block *block;       /* borrowed from the context's allocator */
  VkDeviceSize offset;   /* in the block, aligned */
  VkDeviceSize alloc;    /* bytes reserved (aligned up) */
  size_t size;           /* bytes requested */
  bool internal;         /* staging: not in the caller-visible stats */
};

typedef struct vk_allocator {
  pthread_mutex_t lock;
  vk_block *blocks[3];   /* per vk_mem_kind; owned list */
  VkDeviceSize heap_used[VK_MAX_MEMORY_HEAPS]; /* block bytes allocated per heap */
  VkDeviceSize align;    /* suballocation alignment */
  int n_live_buffers;    /* caller buffers (not INTERNAL) */
  VkDeviceSize internal_used[3]; /* bytes of INTERNAL buffers per kind */
} vk_allocator;

/* ---- kernels ------------------------------------------------------------------------ */

struct vk_kernel {
  char *name;                      /* owned */
  VkDescriptorSetLayout set_layout;
  VkPipelineLayout layout;
  VkPipeline pipeline;
  int n_buffers;
  uint32_t push_bytes;
};

/* ---- staging --------------------------------------------------------------------- */

/* One contiguous range of a ring, FIFO. */
typedef struct vk_ring_region {
  VkDeviceSize begin, end;  /* end may be < begin's wrap point; see vk_staging.c */
  const vk_stream *owner;   /* stream that recorded it, until submitted */
  uint64_t value;           /* timeline value that frees it; UINT64_MAX: not yet submitted */
} vk_ring_region;

typedef struct vk_ring {
  vk_buffer *buf;           /* owned; NULL until first used */
  VkDeviceSize cap, head, tail; /* head: next write; tail: oldest live byte */
  bool full;                /* head == tail means full, not empty */
  vk_ring_region *regions;  /* owned circular queue */
  int n_regions, cap_regions, first_region;
} vk_ring;

/* A readback whose data lands in host memory when `value` completes. */
typedef struct vk_pending_readback {
  uint64_t value;
  void *dst;                /* borrowed from the caller of vk_stream_readback */
  const uint8_t *src;       /* in the readback ring or temp buffer (mapped) */
  size_t bytes;
} vk_pending_readback;

/* A temporary staging buffer freed when `value` completes. */
typedef struct vk_deferred_free {
  uint64_t value;
  vk_buffer *buf; /* owned */
} vk_deferred_free;

/* ---- context ------------------------------------------------------------------------ */

struct vk_context {
  vk_fns fn;
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;  /* VK_NULL_HANDLE without validation */
  VkPhysicalDevice phys;
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  vk_physical_info info;
  VkPhysicalDeviceMemoryProperties mem_props;
  const vk_shaderc_fns *sc;            /* process-lifetime */

  vk_allocator mem;

  pthread_mutex_t queue_lock;          /* vkQueueSubmit + the counters below */
  VkSemaphore timeline;
  uint64_t last_submitted;             /* highest value signalled by a submit */
  _Atomic uint64_t completed_cache;    /* last observed completed value */
  atomic_bool lost;                    /* device lost: every call fails */
  vk_queue_stats qstats;
  double timeout_s;

  pthread_mutex_t staging_lock;        /* rings, pending readbacks, deferred frees */
  vk_ring upload, readback;
  vk_pending_readback *readbacks;      /* owned array, ascending value */
  int n_readbacks, cap_readbacks;
  vk_deferred_free *deferred;          /* owned array */
  int n_deferred, cap_deferred;

  VkPipelineCache pipeline_cache;
  char *cache_dir;                     /* owned: <kiln cache>/vulkan, NULL if unusable */

  /* vk_pipeline_stats (vk_pipeline.c). Atomics: batches may run on several
   * threads at once; zero in the calloc'd context. */
  _Atomic uint64_t spirv_compiled, spirv_cached, spirv_shared, pipelines, spirv_ns, pipeline_ns;
};

/* Internal entry points shared between files. */
kiln_status_t vk_mem_init(vk_context *ctx);
void vk_mem_destroy(vk_context *ctx); /* frees every block */
/* vk_buffer_alloc with flags: DEDICATED gives the buffer its own block (the
 * rings); INTERNAL keeps it out of vk_memory_stats' used bytes and live
 * buffers (staging), so callers see only their own allocations there. */
enum { VK_ALLOC_DEDICATED = 1, VK_ALLOC_INTERNAL = 2 };
kiln_status_t vk_mem_alloc(vk_context *ctx, vk_mem_kind kind, size_t bytes, unsigned flags, vk_buffer **out);

void vk_staging_destroy(vk_context *ctx);
/* Upload/readback space for stream s: *out_buf and *out_offset name where the
 * bytes go; *out_temp (owned by the caller) is set when a temporary buffer was
 * needed instead of the ring. */
kiln_status_t vk_staging_reserve(vk_context *ctx, bool readback, const vk_stream *s, size_t bytes, vk_buffer **out_buf,
                                 VkDeviceSize *out_offset, vk_buffer **out_temp);
/* Tags s's unsubmitted ring regions with `value` (submit), or frees them now
 * (value 0: the recording was abandoned). Caller holds staging_lock. */
void vk_staging_tag_locked(vk_context *ctx, const vk_stream *s, uint64_t value);
/* Adds pending readbacks / deferred frees; caller holds staging_lock. */
kiln_status_t vk_staging_add_readback_locked(vk_context *ctx, const vk_pending_readback *r);
kiln_status_t vk_staging_defer_free_locked(vk_context *ctx, vk_buffer *buf, uint64_t value);
/* Completes readbacks and frees staging space up to `completed`. Takes staging_lock. */
void vk_staging_retire(vk_context *ctx, uint64_t completed);

/* Timeline helpers (vk_stream.c). */
kiln_status_t vk_timeline_wait(vk_context *ctx, uint64_t value); /* no readback processing */
uint64_t vk_timeline_completed(vk_context *ctx);

kiln_status_t vk_pipeline_cache_init(vk_context *ctx);
void vk_pipeline_cache_save_destroy(vk_context *ctx);

/* Cache directory helpers (vk_pipeline.c). */
char *vk_cache_dir(void); /* <kiln cache>/vulkan (created) or NULL; new string */

#endif /* KILN_HAVE_VULKAN */
#endif
