/* cu_internal.h — the CUDA device's own types, shared by its files.
 *
 *   cu_loader.c   the driver (libcuda.so.1) opened at run time: its entry
 *                 points, error names, the devices it finds, described.
 *   cu_device.c   the provider and the vtable's runtime half: one stream
 *                 per device, events, a pooled allocator, pinned staging
 *                 for uploads and readbacks, modules from NVRTC cubins
 *                 cached by hash.
 *   cu_plan.c     the plan hooks: claims, the CUDA C dialect for every
 *                 kernel (contractions as their compute definitions), one
 *                 module per plan, launches, each segment captured once as
 *                 a CUDA graph.
 *   cuda_nvrtc.c  NVRTC, loaded at run time (also used by the suite).
 *
 * The driver API is declared here by its documented C ABI (the _v2 entry
 * points where the driver has them), so kiln builds without CUDA headers
 * and links against nothing of CUDA. */
#ifndef KILN_DEVICES_CUDA_CU_INTERNAL_H
#define KILN_DEVICES_CUDA_CU_INTERNAL_H

#include <pthread.h>

#include "runtime/device.h"
#include "codegen/loopnest.h"
#include "runtime/device_memory.h"

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
  CU_ERROR_OUT_OF_MEMORY = 2,
  CU_ERROR_NO_DEVICE = 100,
  CU_ERROR_NOT_READY = 600,
  CU_ATTR_MAX_THREADS_PER_BLOCK = 1,
  CU_ATTR_MAX_SHARED_PER_BLOCK = 8,
  CU_ATTR_WARP_SIZE = 10,
  CU_ATTR_MULTIPROCESSORS = 16,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_FUNC_MAX_THREADS_PER_BLOCK = 0,
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_MEMHOSTALLOC_PORTABLE = 1,
};

/* The entry points kiln uses; the graph ones may be NULL (an old driver). */
typedef struct cu_fns {
  void *lib; /* dlopen handle; owned, never closed (the driver keeps threads) */
  CUresult (*Init)(unsigned flags);
  CUresult (*DriverGetVersion)(int *version);
  CUresult (*GetErrorName)(CUresult r, const char **name);
  CUresult (*GetErrorString)(CUresult r, const char **text);
  CUresult (*DeviceGetCount)(int *count);
  CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
  CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
  CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
  CUresult (*DeviceGetAttribute)(int *value, int attribute, CUdevice dev);
  CUresult (*PrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*CtxSetCurrent)(CUcontext ctx);
  CUresult (*MemAlloc)(CUdeviceptr *ptr, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr ptr);
  CUresult (*MemHostAlloc)(void **ptr, size_t bytes, unsigned flags);
  CUresult (*MemFreeHost)(void *ptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
  CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*StreamCreate)(CUstream *s, unsigned flags);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*EventCreate)(CUevent *e, unsigned flags);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventQuery)(CUevent e);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*ModuleLoadData)(CUmodule *m, const void *image);
  CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*FuncGetAttribute)(int *value, int attribute, CUfunction f);
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shared_bytes, CUstream s, void **params, void **extra);
  CUresult (*StreamBeginCapture)(CUstream s, int mode);
  CUresult (*StreamEndCapture)(CUstream s, CUgraph *g);
  CUresult (*GraphInstantiate)(CUgraphExec *exec, CUgraph g, unsigned long long flags);
  CUresult (*GraphLaunch)(CUgraphExec exec, CUstream s);
  CUresult (*GraphExecDestroy)(CUgraphExec exec);
  CUresult (*GraphDestroy)(CUgraph g);
} cu_fns;

/* What `kiln devices` shows and the plan needs of one device. */
typedef struct cu_props {
  CUdevice id;
  int ordinal;
  char name[128];
  uint64_t memory_bytes;
  int cc_major, cc_minor; /* the compute capability: kernels compile for sm_<major><minor> */
  int multiprocessors, warp_size, max_threads_per_block, shared_per_block;
} cu_props;

/* A buffer: a range of a pooled cuMemAlloc block. */
struct kiln_device_buffer {
  kiln_pool_block *block; /* borrowed from the device's pool; its handle is the CUdeviceptr */
  uint64_t offset, alloc;
  uint64_t bytes;         /* what was asked for: the range transfers may touch */
};

static inline CUdeviceptr cu_address(const kiln_device_buffer *b, uint64_t offset) {
  return (CUdeviceptr)(uintptr_t)b->block->handle + b->offset + offset;
}

/* A pinned host buffer (cuMemHostAlloc), reused for staging. */
typedef struct cu_pinned {
  void *host;
  size_t size;
  uint64_t after;      /* busy until the timeline passes this value */
  void *copy_to;       /* a readback: where its bytes go once done (NULL: an upload) */
  size_t copy_bytes;
  struct cu_pinned *next;
} cu_pinned;

#define CU_EVENT_RING 64

/* One CUDA device (process-wide), in its primary context. The stream, the
 * pool and the staging buffers are shared by every session on it, under
 * lock. */
typedef struct cu_dev {
  cu_props props;
  char name[32];          /* "cuda:N" */
  char description[512];
  char driver[48];        /* "CUDA driver 13.0" */
  CUcontext context;
  CUstream stream;
  pthread_mutex_t lock;   /* stream order, pool, staging, timeline */
  kiln_block_pool pool;   /* cuMemAlloc blocks */
  cu_pinned *busy, *idle; /* staging buffers in flight / free (owned) */
  size_t idle_bytes;
  CUevent ring[CU_EVENT_RING]; /* the event recorded for timeline value v is ring[v % CU_EVENT_RING] */
  uint64_t recorded;      /* timeline values handed out */
  uint64_t completed;     /* the timeline value the host has seen finished */
} cu_dev;

const cu_fns *cu_api(void); /* the loaded entry points (cu_find_devices first) */
/* Loads the driver (KILN_CUDA_LIBRARY overrides the name), cuInit, and
 * describes every device. 0 and a reason (static) when none. */
int cu_find_devices(cu_props *out, int max, char *driver, size_t driver_size, const char **why);
/* NULL on success; else an error naming the call and the driver's name for
 * the code (out-of-memory codes become KILN_OUT_OF_MEMORY). */
kiln_status_t cu_check(CUresult r, const char *what);
/* Makes the device's context current on the calling thread. */
kiln_status_t cu_enter(cu_dev *d);

/* A module from CUDA C: NVRTC to a cubin for the device's exact compute
 * capability, cached under <cache>/cuda by the SHA-256 of the source, the
 * architecture and NVRTC's version; an NVRTC failure carries its log. */
kiln_status_t cu_build_module(cu_dev *d, const char *source, const char *what, CUmodule *out, bool *from_cache);
/* Launches f over `threads` threads in blocks of `block` on the stream;
 * params as cuLaunchKernel takes them. Caller holds the lock or is the
 * only user (capture). */
kiln_status_t cu_launch_threads(cu_dev *d, CUfunction f, int64_t threads, unsigned block, void **params);

/* The GPU schedule (codegen/loopnest.h) for a device of `multiprocessors`
 * SMs: CU_THREAD_TILE elements per thread along the innermost parallel
 * loop of a kernel with reductions (KILN_CUDA_THREAD_TILE overrides it),
 * and contractions in the template's blocks of CU_TILE_THREADS threads
 * (KILN_CUDA_TILES=64 or 256; 0: none), at least two blocks per SM;
 * 32-bit indices where they fit (KILN_CUDA_INDEX64=1: always 64-bit);
 * row reductions (Softmax, LayerNorm) in cooperative rows of
 * CU_ROW_THREADS threads per block (KILN_CUDA_ROWS, a power of two; 0:
 * one thread per row). */
#define CU_THREAD_TILE 4
#define CU_TILE_THREADS 256
#define CU_ROW_THREADS 256
kiln_loop_schedule cu_gpu_schedule(int multiprocessors);

extern const kiln_device_vtable cu_vtable;
kiln_status_t cu_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                            struct kiln_plan_target *out_target, void **out_state);
kiln_status_t cu_plan_compile(kiln_device *dev, void *state, struct kiln_plan *plan,
                              const struct kiln_plan_bindings *bind);
kiln_status_t cu_launch_step(kiln_device *dev, void *state, const struct kiln_plan *plan, int step,
                             const struct kiln_plan_bindings *bind);
kiln_status_t cu_record(kiln_device *dev, void *state, struct kiln_plan *plan, int flush,
                        const struct kiln_plan_bindings *bind);
kiln_status_t cu_enqueue_recorded(kiln_device *dev, void *state, const struct kiln_plan *plan, int flush);
void cu_plan_end(kiln_device *dev, void *state, struct kiln_plan *plan);
void cu_plan_describe(kiln_device *dev, void *state, const struct kiln_plan *plan, FILE *out);
bool cu_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason);

#endif
