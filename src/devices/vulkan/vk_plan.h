/* vk_plan.h — the Vulkan device's side of a plan (runtime/plan.h).
 *
 * The shared plan claims, fuses, plans the arena and the flushes, uploads
 * the weights once and runs the steps; the Vulkan device supplies the hooks
 * (vk_plan.c): claims narrowed by what its shaders take, each fused group
 * scheduled for the GPU and rendered as GLSL (codegen/render_glsl.c), the
 * contractions (MatMul, Gemm, Conv with their elementwise consumers) as the
 * shared contraction template, row reductions as cooperative rows; all
 * shaders compiled in one batch (SPIR-V and pipelines cached on disk);
 * the device steps between two host (ref) steps recorded once into a
 * command buffer (a vk_stream) with its descriptor sets.
 *
 * Each run: per flush, one queue submission of [uploads of host values the
 * segment reads, the recorded segment, readbacks of values the next host
 * steps or the caller read], through the device's open batch
 * (vk_device.c); the host waits only before a host step and at the end.
 */
#ifndef KILN_DEVICES_VULKAN_VK_PLAN_H
#define KILN_DEVICES_VULKAN_VK_PLAN_H

#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_runtime.h"
#include "runtime/device.h"

#define VK_MAX_BATCH 16

/* The device's state (kiln_device.impl). */
typedef struct vk_device_state {
  int index;               /* in vk_enumerate's order */
  char name[32];           /* "vulkan:N" */
  char description[768];
  vk_device_props props;
  vk_device_props tune;    /* what kernels are generated for: props, except that KILN_VULKAN_SCHEDULE=gpu on a
                              CPU implementation (lavapipe) makes its type a discrete GPU's, so the tests run
                              the GPU tiles and fp16 arithmetic there */
  vk_context *ctx;         /* created on first use; owned, lives until exit */
  pthread_mutex_t lock;    /* guards ctx creation */
  kiln_status_t ctx_error; /* why ctx could not be created (owned), or NULL */
  /* The open batch of the runtime slots' commands (device.h): the stream
   * being recorded, then the closed streams the next submit hands to the
   * queue in order (adhoc ones owned, recorded plan segments borrowed). */
  vk_stream *adhoc;        /* owned */
  vk_stream *batch[VK_MAX_BATCH];
  bool batch_owned[VK_MAX_BATCH];
  int n_batch;
  vk_stream *done[VK_MAX_BATCH]; /* owned streams of the last submission, destroyed at the next */
  int n_done;
  uint64_t last_value;     /* timeline value of the last submitted batch */
  uint64_t stat_submits, stat_command_buffers, stat_dispatches; /* for `kiln bench --profile` */
  pthread_mutex_t adhoc_lock;
} vk_device_state;

/* Records a dispatch into the device's open batch. */
kiln_status_t vk_adhoc_dispatch(vk_device_state *d, const vk_kernel *k, vk_buffer *const *buffers, const uint32_t groups[3]);
/* Appends a recorded stream (borrowed: it must live until its submission
 * completes) to the open batch, after what was recorded so far. */
kiln_status_t vk_adhoc_enqueue(vk_device_state *d, vk_stream *recorded);

/* A view of bytes [offset, offset + bytes) of `parent` (no allocation; the
 * parent must outlive it): how arena-planned values are bound whole.
 * Free with vk_buffer_view_free, never vk_buffer_free. */
kiln_status_t vk_buffer_view_create(vk_buffer *parent, size_t offset, size_t bytes, vk_buffer **out);
void vk_buffer_view_free(vk_buffer *view);

/* The context of a device state, created on first use. */
kiln_status_t vk_device_context(vk_device_state *d, vk_context **out);

/* Iterations per loop per invocation past which the driver stops a loop
 * (kiln_glsl_options.max_loop_trips), or 0 when it does not. */
int64_t vk_max_loop_trips(const vk_device_props *p);
/* Groups the contraction template asks for at least (the device reports
 * no compute-unit count: enough for lavapipe's threads and a small GPU). */
#define VK_TILE_MIN_GROUPS 32

/* Why this node is not claimed (static string), or NULL if it is. */
const char *vk_plan_unsupported(const kiln_graph *g, const kiln_node *node);

/* The plan hooks (runtime/plan.h; device.h's plan slots). */
struct kiln_plan;
struct kiln_plan_target;
struct kiln_plan_bindings;
kiln_status_t vk_plan_begin(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                            struct kiln_plan_target *out_target, void **out_state);
kiln_status_t vk_plan_compile(kiln_device *dev, void *state, struct kiln_plan *p, const struct kiln_plan_bindings *bind);
kiln_status_t vk_launch_step(kiln_device *dev, void *state, const struct kiln_plan *p, int step,
                             const struct kiln_plan_bindings *bind);
kiln_status_t vk_record(kiln_device *dev, void *state, struct kiln_plan *p, int flush,
                        const struct kiln_plan_bindings *bind);
kiln_status_t vk_enqueue_recorded(kiln_device *dev, void *state, const struct kiln_plan *p, int flush);
void vk_plan_run_begin(kiln_device *dev, void *state);
void vk_plan_end(kiln_device *dev, void *state, struct kiln_plan *p);
void vk_plan_describe(kiln_device *dev, void *state, const struct kiln_plan *p, FILE *out);
void vk_plan_run_stats(kiln_device *dev, void *state, const struct kiln_plan *p, FILE *out);

#endif
#endif
