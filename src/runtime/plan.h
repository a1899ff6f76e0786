/* plan.h — the compiled form of a graph every compiling device shares.
 *
 * kiln_plan_build turns a specialized graph into a flat list of steps over
 * values, the same way for every device:
 *
 *   1. claims: each node's op class on this device (the device's `claim`
 *      hook; NONE leaves the node to the reference kernel); control flow
 *      (If, Loop, Scan) is a HOST step whose bodies run as plans of their
 *      own (runtime/plan_bodies.h);
 *   2. fusion (codegen/fusion.h): claimed nodes grouped, a contraction
 *      (MatMul, Gemm, Conv, FusedAttention) with its elementwise consumers,
 *      each group lowered to one tensor expression (a KERNEL step, which
 *      the device's `schedule` hook schedules and renders); unclaimed nodes
 *      are HOST steps;
 *   3. memory: every value a device step writes (and, on devices without
 *      host memory, every host-step result a device step reads) gets bytes
 *      in one arena, placed by liveness (passes/memory_plan.h), aligned as
 *      the device asks; an elementwise kernel may write over an input that
 *      dies with it;
 *   4. flushes: the steps split into runs of device steps (a segment)
 *      followed by host steps, each with the uploads its device steps need
 *      first and the readbacks its host steps (or the caller) need after.
 *
 * The session prepares and runs compiling devices only through the plan
 * executor (kiln_plan_prepare / kiln_plan_execute), which drives the
 * device through its plan hooks and the vtable's runtime slots: buffers,
 * upload / readback, launch_step, submit, events. A device with a
 * `record` slot records each segment once and the executor enqueues the
 * recording once per run.
 *
 * A plan borrows its graph, which must outlive it unchanged. It is used by
 * one thread at a time (its arena is reused by every run).
 */
#ifndef KILN_RUNTIME_PLAN_H
#define KILN_RUNTIME_PLAN_H

#include <stdio.h>

#include "codegen/fusion.h"
#include "runtime/device.h"

typedef enum kiln_plan_step_kind {
  KILN_STEP_KERNEL, /* a fused group: the device renders its tensor expression */
  KILN_STEP_HOST,   /* a node the device does not claim: its reference kernel on host values, or a
                       routine of the device's own (host_routine) */
} kiln_plan_step_kind;

typedef enum kiln_plan_value_kind {
  KILN_VALUE_UNUSED = 0,
  KILN_VALUE_CONSTANT,   /* an initializer or folded constant */
  KILN_VALUE_INPUT,      /* a graph input bound per run */
  KILN_VALUE_ARENA,      /* written by a device step, in the arena */
  KILN_VALUE_HOST,       /* written by a host step; host memory only */
  KILN_VALUE_HOST_ARENA, /* written by a host step, read by device steps of a device without host
                            memory: uploaded into the arena after it */
} kiln_plan_value_kind;

/* Indices a KERNEL step reads that only the run knows and its kernel does
 * not check (kiln_lower_runtime_indices): the executor checks them
 * against their bounds before launching the step. */
typedef struct kiln_index_check {
  const kiln_node *node; /* the node reading them (for the error) */
  int input;             /* which input of node */
  int value;             /* the indices' value id (materialized: fusion does not inline it) */
  int n_bounds;
  int64_t bounds[KILN_MAX_RANK]; /* element i in [-bounds[i % n_bounds], bounds[i % n_bounds]) */
} kiln_index_check;

typedef struct kiln_plan_step {
  kiln_plan_step_kind kind;
  const kiln_node *node; /* the node, or the group's root (KERNEL) */
  char name[64];         /* "Conv", "Add+fused", "ref:NonZero", "host:LSTM" (a routine) */
  bool routine;          /* HOST: the device runs it on a routine of its own (not ref) */
  bool dynamic;          /* HOST: an op the device compiles, whose shapes are known only when it runs:
                            specialized to each run's shapes then (plan_bodies.h), ref past the bound */
  int n_fused;           /* KERNEL: nodes in the group */
  int n_args;
  int *args;             /* KERNEL: value id per binding, the kernel's buffers (output first); owned */
  kiln_fused_kernel fk;  /* KERNEL: the group's lowering; owned */
  bool flat;             /* KERNEL: every operand viewed as rank 1 */
  bool elementwise_only; /* KERNEL: every member elementwise or broadcast */
  int out_value;         /* the value the step materializes */
  int n_outer;
  int *outer;            /* HOST with subgraphs (If, Loop, Scan): values of the graph its bodies read by
                            name; they live (and are on the host) until the step has run; owned */
  int64_t flops;
  int n_checks;
  kiln_index_check *checks; /* KERNEL: run-time indices to range-check first; owned */
  void *compiled;        /* the device's compiled form of the step; freed by its `release_step` */
} kiln_plan_step;

/* A run of device steps, then host steps. */
typedef struct kiln_plan_flush {
  int device_begin, device_end; /* device steps [begin, end) */
  int host_begin, host_end;     /* host steps [begin, end), run after the device work is read back */
  int n_up, n_down;
  int *up, *down;               /* value ids uploaded before the segment / read back after it; owned */
  void *recorded;               /* the device's recording of the segment (record slot); device-owned */
} kiln_plan_flush;

typedef struct kiln_plan kiln_plan;

/* What a device tells the plan builder. */
typedef struct kiln_plan_target {
  kiln_device *dev;
  bool host_memory;       /* device buffers are host memory: host values are read in place, nothing is
                             uploaded or read back */
  int64_t alignment;      /* arena offsets (>= 1) */
  bool f32_as_half;       /* f32 values live on the device as IEEE half */
  int64_t size_rounding;  /* value sizes round up to this (>= 1) */
  /* The class of node on this device (NONE: ref runs it), *why (static) saying why not. */
  kiln_op_class (*claim)(void *user, const kiln_graph *g, const kiln_node *node, const char **why);
  /* True for a node it does not claim yet runs on a routine of its own
   * (the host_kernel hook) rather than ref: the plan counts it apart from
   * the nodes on ref. May be NULL. */
  bool (*host_routine)(void *user, const kiln_graph *g, const kiln_node *node);
  /* True when a node whose shapes are only known at run time should be
   * specialized to them then (a plan of one node, cached per signature),
   * rather than run on ref: a device whose specialization is cheap (one
   * with precompiled kernels: no compiler call). */
  bool specialize_at_run_time;
  /* Its kernels compute a Conv (f32, group 1, no bias) straight into the
   * layout of a Transpose after it that swaps the first two axes: the plan
   * fuses that Transpose into the Conv's kernel (a weight gradient, which
   * the Conv gives as [Ci, Co, k], read as [Co, Ci, k]). */
  bool conv_transposed_output;
  /* Schedules a KERNEL step right after it is lowered (may be NULL). */
  kiln_status_t (*schedule)(void *user, kiln_plan *plan, int step);
  /* After a failed build: true to build again (the device has narrowed its
   * claims, e.g. denied a group its dialect could not render). May be NULL. */
  bool (*retry)(void *user);
  void *user;
} kiln_plan_target;

struct kiln_plan {
  const kiln_graph *g;          /* borrowed */
  kiln_plan_target target;
  kiln_fusion fusion;           /* the grouping the KERNEL steps came from; owned */
  kiln_plan_step *steps;
  int n_steps;
  kiln_plan_value_kind *kinds;  /* per value id */
  int64_t *offset;              /* per value id: arena offset (ARENA, HOST_ARENA), else -1 */
  int64_t arena_bytes, intermediate_bytes;
  kiln_plan_flush *flushes;
  int n_flushes;
  int n_kernels, n_host, n_fused_nodes;
  int n_routine; /* of n_host: on the device's own routines */
  int n_dynamic; /* of n_host: specialized when they run (kiln_plan_step.dynamic) */
};

/* Builds the plan of g for target (steps, memory, flushes);
 * the device compiles its steps afterwards. *out owned: kiln_plan_free. */
kiln_status_t kiln_plan_build(const kiln_graph *g, const kiln_plan_target *target, kiln_plan **out);
/* Frees the plan (the device must have released its compiled steps). */
void kiln_plan_free(kiln_plan *plan);

/* Bytes value v occupies on the device (half for f32 when f32_as_half, rounded). */
int64_t kiln_plan_value_bytes(const kiln_plan *plan, int v);
/* Why a step that runs on ref is not claimed by the device (static text; "?" when the claim gave none). */
const char *kiln_plan_step_reason(const kiln_plan *plan, const kiln_plan_step *s);
/* The op types of a step's nodes joined by '+', in graph order ("Conv+Relu"); one op type for a HOST step. */
void kiln_plan_step_ops(const kiln_plan *plan, const kiln_plan_step *s, char *buf, size_t size);
/* `kiln info --device`: steps, fused groups, what ref runs and why, memory. */
void kiln_plan_describe(const kiln_plan *plan, FILE *out);
/* The index checks of step i (kiln_index_check) over the run's host
 * values: the error a reference kernel gives for the first index out of
 * range, NULL when all are in range. value_data(user, v) is value v's host
 * bytes (NULL: not on the host, unchecked). */
kiln_status_t kiln_plan_check_indices(const kiln_plan *plan, int step, const void *(*value_data)(void *user, int v),
                                      void *user);

/* Host steps whose work is the host's by nature: Shape and Size
 * (metadata), NonZero (its output size is the data's), and with shapes
 * known only when they run, the relabels and block copies Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Split, and Range (its size the
 * values'). `kiln info` lists them apart from the nodes on ref. */
bool kiln_plan_step_host_only(const kiln_plan *plan, const kiln_plan_step *s);
/* Host steps that run on ref: neither control flow (its bodies have plans)
 * nor the device's own routines nor specialized when they run nor
 * host-only. */
bool kiln_plan_step_on_ref(const kiln_plan *plan, const kiln_plan_step *s);
int kiln_plan_nodes_on_ref(const kiln_plan *plan);

/* Where each value lives during a run, per value id: its device buffer and
 * offset, and (host-memory devices) its host address. Steps read them in
 * launch_step. */
typedef struct kiln_plan_bindings {
  kiln_device_buffer **buffer;
  size_t *offset;
  void **host;
} kiln_plan_bindings;

/* A graph on a device with plan hooks (plan_begin, launch_step, ...): what
 * the session calls. */
kiln_status_t kiln_plan_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                struct kiln_executable **out);
/* into (may be NULL; entries may be NULL): tensors the outputs are copied
 * into instead of new ones (dtype and shape checked); outs[i] then holds a
 * new reference to into[i]. */
kiln_status_t kiln_plan_execute(kiln_device *dev, struct kiln_executable *exec, kiln_value *const *inputs,
                                int n_outputs, kiln_value **outs, kiln_tensor *const *into,
                                const kiln_step_observer *observe);
/* Output v's data (src: the output's elements, of v's type) copied into the
 * caller's tensor dst, checked against v's type; *out: a new reference to dst. */
kiln_status_t kiln_output_into(const kiln_value_def *v, kiln_tensor *dst, const void *src, kiln_value **out);
void kiln_plan_executable_free(kiln_device *dev, struct kiln_executable *exec);
void kiln_plan_describe_executable(kiln_device *dev, const struct kiln_executable *exec, FILE *out);
/* Bytes of weights the executable uploaded to the device (0 on host-memory devices). */
int64_t kiln_plan_weight_bytes(const struct kiln_executable *exec);
/* What the last run did on the device (its plan_run_stats), for `kiln bench --profile`. */
void kiln_plan_run_stats(kiln_device *dev, const struct kiln_executable *exec, FILE *out);
/* State kept on the device (devices without host memory, plans without
 * host steps): after each run graph input inputs[i] takes the value graph
 * output outputs[i] (of its type) has, copied on the device in the run's
 * own submission; the input is uploaded only at the first run after this
 * call or after kiln_plan_state_forget, the output never read back. A run
 * still needs a value for each such input (its type checked), and hands
 * that same value back for the output: the current one is on the device,
 * kiln_plan_state_read copies it out. KILN_UNSUPPORTED where the device
 * computes in host memory, stores f32 as half, or the plan has host steps
 * (the caller then feeds the outputs back itself). */
kiln_status_t kiln_plan_keep_state(struct kiln_executable *exec, int n, const int *inputs, const int *outputs);
/* Copies the kept states inputs[0..n) that are on the device into into[i]
 * (their type); *out_read false when none was (the host values are
 * current: no run since keep or forget). One submission. */
kiln_status_t kiln_plan_state_read(struct kiln_executable *exec, int n, const int *inputs, kiln_tensor *const *into,
                                   bool *out_read);
/* The callers' values are current again (after it read them or set new
 * ones): the next run uploads them. */
void kiln_plan_state_forget(struct kiln_executable *exec);
/* Bytes the last run uploaded and read back. */
void kiln_plan_transfer_bytes(const struct kiln_executable *exec, int64_t *out_uploaded, int64_t *out_read_back);
/* The plan inside an executable that kiln_plan_prepare made (borrowed). */
const kiln_plan *kiln_plan_of(const struct kiln_executable *exec);
/* The compiled control-flow bodies of an executable (runtime/plan_bodies.h; borrowed). */
const struct kiln_body_plans *kiln_plan_bodies_of(const struct kiln_executable *exec);

/* Optimizes g as a graph for dev compiles: kiln_optimize_graph_for with
 * KILN_OPT_LEVEL (default 1) and attention fused where the device has a
 * kernel for it (KILN_FUSED_ATTENTION overrides). Sessions and body plans. */
kiln_status_t kiln_plan_optimize_for(kiln_device *dev, kiln_graph *g);

#endif
