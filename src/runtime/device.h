/* device.h — the one interface every device implements.
 *
 * A device is a vtable plus its own state. The session partitions the
 * graph: each node goes to the first device in the session's list whose
 * `supports` accepts it; the reference device takes the rest.
 *
 * Two levels, most slots optional:
 *
 * 1. Whole graphs: a compiling device (one with plan hooks) has the
 *    shared plan (runtime/plan.h) turn a graph into an executable: its
 *    claimed nodes fused and compiled, the rest run on ref inside it, with
 *    the copies between device and host memory it needs. Without plan
 *    hooks the session interprets node by node with run_node.
 *
 * 2. The asynchronous device runtime (DESIGN.md "The device interface"),
 *    reached through the kiln_device_* functions below, which supply the
 *    documented default when a slot is NULL:
 *      buffer_alloc/free    pooled, suballocated device memory.
 *                           Default: host memory (malloc).
 *      upload, readback     through staging rings; ordered on the device's
 *                           queue, complete when an event recorded after
 *                           them is done. Default: memcpy, complete at once.
 *      copy                 device to device, ordered. Default: memmove.
 *      compile, launch      a kernel source (the device's language) into a
 *                           program; record a launch of it over buffers.
 *                           Default: KILN_UNSUPPORTED (host devices run
 *                           compiled code through prepare instead).
 *      submit               closes the current batch of recorded commands
 *                           and hands it to the queue. Default: no-op.
 *      event_record         the (queue, timeline value) the queue reaches
 *                           when everything submitted so far is done.
 *      event_wait/done      host wait / poll. Defaults: events are
 *                           complete on creation.
 *      synchronize          waits for all submitted work. Default: no-op.
 *    The host waits only where it reads a result (readback + event_wait).
 *
 * Devices are created once per process (kiln_device_get) and shared by
 * sessions; a device's slots must be thread-safe unless it says otherwise.
 * The ref device is stateless and thread-safe.
 */
#ifndef KILN_RUNTIME_DEVICE_H
#define KILN_RUNTIME_DEVICE_H

#include <stdio.h>

#include "ops/op.h"

typedef struct kiln_device_info {
  const char *name;        /* "ref", or its provider's name, ":N" for one of several */
  const char *vendor;
  const char *description; /* one line for `kiln devices` */
  const char *driver;      /* driver name and version, or NULL */
  uint64_t memory_bytes;   /* 0 = host memory */
  int compute_units;       /* SMs, CUs, cores the driver reports; 0 when unknown */
  int subgroup_size;       /* subgroup / warp / wavefront width; 0 when not applicable or unknown */
  bool host_memory;        /* buffers are plain host memory */
  unsigned features;       /* KILN_DEVICE_FEATURE_* */
} kiln_device_info;

enum {
  KILN_DEVICE_FEATURE_FP16 = 1 << 0,
  KILN_DEVICE_FEATURE_INT8_DOT = 1 << 1,
  KILN_DEVICE_FEATURE_COOPERATIVE_MATRIX = 1 << 2,
  KILN_DEVICE_FEATURE_ALL_DTYPES = 1 << 3, /* every dtype of every op it supports */
  /* It runs kiln.FusedAttention as one fast kernel (a flash-style one), so
   * the optimizer fuses attention for it; devices without it get attention
   * as MatMul, Softmax, MatMul, which their contraction templates run
   * (KILN_FUSED_ATTENTION=0/1 overrides, for tests and comparisons). */
  KILN_DEVICE_FEATURE_FUSED_ATTENTION = 1 << 4,
  /* It runs RNN, GRU and LSTM whole, as a host routine of its own (the
   * plan's host_routine says which nodes), so the optimizer keeps them
   * whole instead of unrolling the recurrence into step kernels
   * (KILN_RECURRENT_ROUTINE=0 unrolls them anyway, for tests and
   * comparisons). */
  KILN_DEVICE_FEATURE_RECURRENT_ROUTINE = 1 << 5,
  /* Its integer convolutions beat its float ones, so the optimizer turns a
   * QDQ Conv (DequantizeLinear'd 8-bit input and weights) into ConvInteger
   * for it (passes/qdq_integer.c; a host device whose processor has 8-bit
   * dot-product instructions; KILN_QDQ_INTEGER=0/1 overrides). */
  KILN_DEVICE_FEATURE_QDQ_INTEGER = 1 << 6,
  /* It runs ONNX Attention's decoder step (a few query rows against a
   * key/value cache: kiln_attention_decode_step) as a host routine of its
   * own that reads the cache once, so the optimizer keeps such a node
   * whole for it (KILN_ATTENTION_ROUTINE=0 decomposes it anyway, for tests
   * and comparisons). */
  KILN_DEVICE_FEATURE_ATTENTION_ROUTINE = 1 << 7,
};

typedef struct kiln_device kiln_device;
typedef struct kiln_device_buffer kiln_device_buffer;
typedef struct kiln_device_program kiln_device_program;
typedef struct kiln_device_event {
  int queue;
  uint64_t value; /* timeline value; complete when the queue's timeline reaches it */
} kiln_device_event;

/* A kernel to compile: source in the device's language. */
typedef struct kiln_program_desc {
  const char *name;   /* for errors and profiles */
  const char *source;
  int n_buffers;      /* buffers a launch binds, in order */
} kiln_program_desc;

struct kiln_prepare_options;
struct kiln_executable; /* a device's compiled graph */
struct kiln_plan;          /* runtime/plan.h */
struct kiln_plan_target;
struct kiln_plan_bindings;

/* Per-step callbacks for profilers and `kiln verify`. outputs[i] are the
 * node's output values (borrowed; NULL for outputs not materialized). */
typedef struct kiln_step_observer {
  void (*before)(void *user, const kiln_graph *g, const kiln_node *node);
  kiln_status_t (*after)(void *user, const kiln_graph *g, const kiln_node *node, kiln_value *const *outputs);
  void *user;
} kiln_step_observer;

typedef struct kiln_device_vtable {
  void (*query)(const kiln_device *dev, kiln_device_info *out_info);
  /* true if the device runs `node` (with its inferred input/output types in g);
   * otherwise *out_reason (static string) may say why, for `kiln info`. */
  bool (*supports)(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **out_reason);
  kiln_status_t (*run_node)(kiln_device *dev, kiln_kernel_ctx *ctx);

  kiln_status_t (*compile)(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out_program);
  void (*program_free)(kiln_device *dev, kiln_device_program *program);
  kiln_status_t (*buffer_alloc)(kiln_device *dev, size_t bytes, kiln_device_buffer **out_buffer);
  void (*buffer_free)(kiln_device *dev, kiln_device_buffer *buffer);
  kiln_status_t (*upload)(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src, size_t bytes);
  kiln_status_t (*readback)(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset, size_t bytes);
  kiln_status_t (*copy)(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset, kiln_device_buffer *src,
                        size_t src_offset, size_t bytes);
  kiln_status_t (*launch)(kiln_device *dev, kiln_device_program *program, int n_buffers,
                          kiln_device_buffer *const *buffers, const uint32_t grid[3]);
  kiln_status_t (*submit)(kiln_device *dev);
  kiln_status_t (*event_record)(kiln_device *dev, kiln_device_event *out_event);
  kiln_status_t (*event_wait)(kiln_device *dev, kiln_device_event event);
  bool (*event_done)(kiln_device *dev, kiln_device_event event);
  kiln_status_t (*synchronize)(kiln_device *dev);
  void (*destroy)(kiln_device *dev);

  /* Compiling devices: the session prepares and runs a graph on them
   * through the shared plan (runtime/plan.h: kiln_plan_prepare / execute),
   * which drives them through these hooks and the runtime slots above:
   *   plan_begin     the plan target (claims, schedule and epilogue hooks,
   *                  memory rules) and the device's state for one plan;
   *   plan_compile   compiles every device step once the plan is built and
   *                  its values bound (may be NULL);
   *   launch_step    runs (or enqueues) one device step over the bindings;
   *   plan_end       releases the state and what it compiled;
   *   plan_describe  the device's own lines for `kiln info` (may be NULL). */
  kiln_status_t (*plan_begin)(kiln_device *dev, const kiln_graph *g, const struct kiln_prepare_options *opts,
                              struct kiln_plan_target *out_target, void **out_state);
  kiln_status_t (*plan_compile)(kiln_device *dev, void *state, struct kiln_plan *plan,
                                const struct kiln_plan_bindings *bind);
  kiln_status_t (*launch_step)(kiln_device *dev, void *state, const struct kiln_plan *plan, int step,
                               const struct kiln_plan_bindings *bind);
  void (*plan_end)(kiln_device *dev, void *state, struct kiln_plan *plan);
  void (*plan_describe)(kiln_device *dev, void *state, const struct kiln_plan *plan, FILE *out);
  /* What the last run did on the device, for `kiln bench --profile` (may be
   * NULL); plan_run_begin (may be NULL) is called as each run starts. */
  void (*plan_run_stats)(kiln_device *dev, void *state, const struct kiln_plan *plan, FILE *out);
  void (*plan_run_begin)(kiln_device *dev, void *state);
  /* Optional, for devices that record command buffers: records flush f's
   * device steps once at prepare (stores plan->flushes[f].recorded), and
   * enqueues that recording into the open batch, in order with the
   * uploads and readbacks around it, at each run. */
  kiln_status_t (*record)(kiln_device *dev, void *state, struct kiln_plan *plan, int flush,
                          const struct kiln_plan_bindings *bind);
  kiln_status_t (*enqueue_recorded)(kiln_device *dev, void *state, const struct kiln_plan *plan, int flush);
  /* Optional, for host-memory devices: runs a host step of the plan (a node
   * whose shapes are known only when it runs) with the device's own
   * routines where it has one (kiln_host_kernel_fn's contract, user = the
   * plan state); ref's kernel runs the rest. */
  kiln_status_t (*host_kernel)(void *state, kiln_kernel_ctx *ctx, bool *handled);
} kiln_device_vtable;

typedef struct kiln_prepare_options {
  int threads; /* 0 = the number of physical cores */
  bool fp16;   /* keep float tensors in fp16 where the device supports it (KILN_PRECISION_FP16) */
  /* The device state of the executable this one runs inside (a control-flow
   * body, a node specialized when its shapes became known), or NULL: a
   * device may share what that one owns (a thread pool) rather
   * than make its own. It outlives this executable. */
  void *parent_state;
  /* Run-time specializations of single nodes: no kernel compiled by a
   * compiler for this executable (one per shape would cost more than it
   * saves); a device with precompiled kernels uses those. */
  bool precompiled_only;
} kiln_prepare_options;

struct kiln_device {
  const kiln_device_vtable *vt;
  void *impl; /* device-specific state */
};

/* A device provider: what each devices/<name>/ folder registers
 * (devices/providers.c lists them). The registry asks it for its devices
 * the first time something needs them; a lazy provider (one that loads
 * drivers) only when a device of its name is asked for or all are listed. */
typedef struct kiln_device_provider {
  const char *name; /* the devices' name, or their prefix ("gpu" for "gpu:0", "gpu:1", ...) */
  bool lazy;
  /* Creates its devices (at most max; process-wide, never freed before
   * exit); returns how many. 0 with *why_absent (static) when none: no
   * driver, no compiler, built without it. */
  int (*enumerate)(kiln_device **out, int max, const char **why_absent);
  /* Destroys the devices' contexts (all sessions on them must be gone);
   * they are re-created on next use. May be NULL. */
  void (*shutdown)(void);
  /* Errors the driver's debug layers reported in this process. May be NULL. */
  uint64_t (*debug_errors)(void);
} kiln_device_provider;

/* The providers, in priority order: the first device of the first is the
 * default (devices/providers.c). */
const kiln_device_provider *const *kiln_device_providers(int *out_n);

/* Process-wide device list (created on first use; never freed before exit).
 * Returns NULL if no device of that name is available. "ref" always is.
 * A provider's plain name names its first device ("gpu" is "gpu:0"). */
kiln_device *kiln_device_get(const char *name);
int kiln_device_list(kiln_device **out_devices, int max);
/* Why the provider of `name` (a device or provider name) has no device, or
 * NULL when it has one or no provider has that name. */
const char *kiln_device_absent_reason(const char *name);
/* The providers with no device and why, for `kiln devices`: writes up to
 * max (name, reason) pairs, returns how many. */
int kiln_device_absent_list(const char **names, const char **reasons, int max);
/* Every provider's shutdown; the sum of their debug_errors. */
void kiln_device_shutdown_all(void);
uint64_t kiln_device_debug_errors(void);

/* The asynchronous runtime with its defaults (see the top of this file). */
kiln_status_t kiln_device_buffer_alloc(kiln_device *dev, size_t bytes, kiln_device_buffer **out);
void kiln_device_buffer_free(kiln_device *dev, kiln_device_buffer *buf);
/* The first byte of buf on a host-memory device (info.host_memory), else NULL. */
void *kiln_device_buffer_host_address(kiln_device *dev, kiln_device_buffer *buf);
kiln_status_t kiln_device_upload(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src,
                                 size_t bytes);
kiln_status_t kiln_device_readback(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset,
                                   size_t bytes);
kiln_status_t kiln_device_copy(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset,
                               kiln_device_buffer *src, size_t src_offset, size_t bytes);
kiln_status_t kiln_device_compile(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out);
void kiln_device_program_free(kiln_device *dev, kiln_device_program *program);
kiln_status_t kiln_device_launch(kiln_device *dev, kiln_device_program *program, int n_buffers,
                                 kiln_device_buffer *const *buffers, const uint32_t grid[3]);
kiln_status_t kiln_device_submit(kiln_device *dev);
kiln_status_t kiln_device_event_record(kiln_device *dev, kiln_device_event *out);
kiln_status_t kiln_device_event_wait(kiln_device *dev, kiln_device_event event);
bool kiln_device_event_done(kiln_device *dev, kiln_device_event event);
kiln_status_t kiln_device_synchronize(kiln_device *dev);

#endif
