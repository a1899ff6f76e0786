/* vk_plan.h — the Vulkan device's compiled graph (executable).
 *
 * prepare (vk_plan.c): the device claims what codegen/lower.c lowers and its
 * shaders support; claimed nodes are fused into groups exactly as on the
 * cpu device (codegen/fusion.c); each group is scheduled for the GPU and
 * rendered as GLSL (codegen/render_glsl.c); MatMul, Gemm, Conv, MaxPool and
 * FusedAttention get hand-scheduled shaders (vk_kernels.c) with an
 * elementwise consumer fused in as their epilogue. All shaders are compiled
 * in one batch (SPIR-V and pipelines cached on disk). Intermediates live in
 * one device arena planned by liveness (passes/memory_plan.c); weights are
 * uploaded once. The device steps between two host (ref) steps form a
 * segment, recorded once into a command buffer (a vk_stream) with its
 * descriptor sets.
 *
 * execute: per segment, one queue submission of [uploads of host values the
 * segment reads, the recorded segment, readbacks of values the next host
 * steps or the caller read]; the host waits only before a host step and at
 * the end. A graph with no host step runs as one submission.
 *
 * An executable is used by one thread at a time (its arena is reused).
 */
#ifndef KILN_DEVICES_VULKAN_VK_PLAN_H
#define KILN_DEVICES_VULKAN_VK_PLAN_H

#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_runtime.h"
#include "runtime/device.h"

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
  vk_stream *adhoc;        /* the open batch of the generic interface's commands (device.h slots); owned */
  vk_stream *done_stream;  /* the last submitted batch, destroyed at the next submit; owned */
  uint64_t last_value;     /* timeline value of the last submitted batch */
  pthread_mutex_t adhoc_lock;
} vk_device_state;

/* A view of bytes [offset, offset + bytes) of `parent` (no allocation; the
 * parent must outlive it): how arena-planned values are bound whole.
 * Free with vk_buffer_view_free, never vk_buffer_free. */
kiln_status_t vk_buffer_view_create(vk_buffer *parent, size_t offset, size_t bytes, vk_buffer **out);
void vk_buffer_view_free(vk_buffer *view);

/* The context of a device state, created on first use. */
kiln_status_t vk_device_context(vk_device_state *d, vk_context **out);

/* Why this node is not claimed (static string), or NULL if it is. */
const char *vk_plan_unsupported(const vk_device_state *d, const kiln_graph *g, const kiln_node *node);

kiln_status_t vk_plan_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                              struct kiln_executable **out);
kiln_status_t vk_plan_execute(kiln_device *dev, struct kiln_executable *x, kiln_value *const *inputs, int n_outputs,
                              kiln_value **outs, const kiln_step_observer *observe);
void vk_plan_free(kiln_device *dev, struct kiln_executable *x);
void vk_plan_describe(kiln_device *dev, const struct kiln_executable *x, FILE *out);
void vk_plan_run_stats(kiln_device *dev, const struct kiln_executable *x, FILE *out);

#endif
#endif
