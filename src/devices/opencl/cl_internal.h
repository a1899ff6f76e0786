/* cl_internal.h — the OpenCL device's own types, shared by its files.
 *
 *   cl_loader.c   the ICD loader (libOpenCL.so.1) opened at run time, its
 *                 entry points, error names; platforms and devices found
 *                 and described.
 *   cl_device.c   the provider and the vtable's runtime half: pooled
 *                 buffers, uploads / readbacks / copies on one in-order
 *                 queue, events, program builds with a binary cache.
 *   cl_plan.c     the plan hooks: claims, the OpenCL C dialect for every
 *                 kernel (contractions as their compute definitions), one
 *                 program per plan, launches.
 *
 * Built only when CL/cl.h is found (KILN_HAVE_OPENCL); nothing links
 * against libOpenCL. */
#ifndef KILN_DEVICES_OPENCL_CL_INTERNAL_H
#define KILN_DEVICES_OPENCL_CL_INTERNAL_H

#if KILN_HAVE_OPENCL

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <pthread.h>

#include "runtime/device.h"
#include "runtime/device_memory.h"

/* The entry points kiln uses (OpenCL 1.2), resolved from the ICD loader. */
typedef struct cl_fns {
  void *lib; /* dlopen handle; owned, never closed (drivers keep threads) */
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void *, size_t *);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void *, size_t *);
  cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                              void (*)(const char *, const void *, size_t, void *), void *, cl_int *);
  cl_int (*ReleaseContext)(cl_context);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties, cl_int *);
  cl_int (*ReleaseCommandQueue)(cl_command_queue);
  cl_mem (*CreateBuffer)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,
                               const cl_event *, cl_event *);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,
                              cl_event *);
  cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,
                              cl_event *);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char **, const size_t *, cl_int *);
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id *, const size_t *,
                                        const unsigned char **, cl_int *, cl_int *);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id *, const char *,
                         void (*)(cl_program, void *), void *);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *);
  cl_int (*GetProgramInfo)(cl_program, cl_program_info, size_t, void *, size_t *);
  cl_int (*ReleaseProgram)(cl_program);
  cl_kernel (*CreateKernel)(cl_program, const char *, cl_int *);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void *);
  cl_int (*GetKernelWorkGroupInfo)(cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                                 const size_t *, cl_uint, const cl_event *, cl_event *);
  cl_int (*EnqueueMarkerWithWaitList)(cl_command_queue, cl_uint, const cl_event *, cl_event *);
  cl_int (*WaitForEvents)(cl_uint, const cl_event *);
  cl_int (*GetEventInfo)(cl_event, cl_event_info, size_t, void *, size_t *);
  cl_int (*ReleaseEvent)(cl_event);
  cl_int (*Flush)(cl_command_queue);
  cl_int (*Finish)(cl_command_queue);
} cl_fns;

/* What `kiln devices` shows and the plan needs of one device. */
typedef struct cl_props {
  cl_platform_id platform;
  cl_device_id id;
  char name[128], vendor[128], driver[128], platform_name[128], version[128];
  cl_device_type type;
  uint64_t global_bytes, max_alloc_bytes;
  unsigned compute_units;
  size_t max_work_group;
  unsigned mem_align;      /* CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes */
  int subgroup_size;       /* from cl_khr_subgroups / cl_intel_required_subgroup_size, else 0 */
  bool fp64, fp16;
} cl_props;

/* A buffer: a range of a pooled cl_mem block. */
struct kiln_device_buffer {
  kiln_pool_block *block; /* borrowed from the device's pool; its handle is the cl_mem */
  uint64_t offset, alloc;
};

static inline cl_mem cl_mem_of(const kiln_device_buffer *b) { return (cl_mem)b->block->handle; }

/* A staging copy an asynchronous upload reads, freed once the queue has
 * passed it. */
typedef struct cl_staging {
  void *data; /* owned */
  uint64_t after; /* the timeline value after which it is free */
  struct cl_staging *next;
} cl_staging;

/* One OpenCL device (process-wide). The queue and the pool are shared by
 * every session on it, under lock. */
typedef struct cl_dev {
  cl_props props;
  char name[32];          /* "opencl:N" */
  char description[768];
  cl_context context;
  cl_command_queue queue;
  pthread_mutex_t lock;   /* queue, pool, staging, timeline */
  kiln_block_pool pool;   /* cl_mem blocks */
  uint64_t enqueued;      /* commands enqueued so far: the timeline */
  uint64_t completed;     /* the timeline value the host has seen finished */
  cl_staging *staging;
} cl_dev;

const cl_fns *cl_api(void); /* the loaded entry points (cl_load first) */
/* Loads the ICD loader (KILN_OPENCL_LIBRARY overrides the name) and
 * enumerates devices, GPUs first. 0 and a reason (static) when none. */
int cl_find_devices(cl_props *out, int max, const char **why);
const char *cl_error_name(cl_int err);
/* NULL on CL_SUCCESS; else an error naming the call and the code. */
kiln_status_t cl_check(cl_int err, const char *what);

/* Program builds (cl_device.c): a whole source for the device, its binary
 * cached by the SHA-256 of the source, the device and the driver; a build
 * failure's message carries the build log. *from_cache says which. */
kiln_status_t cl_build_program(cl_dev *d, const char *source, const char *what, cl_program *out, bool *from_cache);

extern const kiln_device_vtable cl_vtable;
/* The plan hooks (cl_plan.c), set into cl_vtable. */
kiln_status_t cl_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                            struct kiln_plan_target *out_target, void **out_state);
kiln_status_t cl_plan_compile(kiln_device *dev, void *state, struct kiln_plan *plan,
                              const struct kiln_plan_bindings *bind);
kiln_status_t cl_launch_step(kiln_device *dev, void *state, const struct kiln_plan *plan, int step,
                             const struct kiln_plan_bindings *bind);
void cl_plan_end(kiln_device *dev, void *state, struct kiln_plan *plan);
void cl_plan_describe(kiln_device *dev, void *state, const struct kiln_plan *plan, FILE *out);
bool cl_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason);
/* Binds buffer argument i of a kernel in the OpenCL C dialect's ABI: its
 * block as argument 2i, byte_offset (in the block) as 2i + 1. */
kiln_status_t cl_set_buffer_arg(cl_kernel k, int i, const kiln_device_buffer *buf, uint64_t byte_offset);
/* Enqueues a kernel over n_items work items (cl_device.c). */
kiln_status_t cl_enqueue_kernel(cl_dev *d, cl_kernel k, size_t n_items, size_t local);

#endif /* KILN_HAVE_OPENCL */
#endif
