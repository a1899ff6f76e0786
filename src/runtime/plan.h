/* plan.h — the compiled form of a graph every compiling device shares.
 *
 * kiln_plan_build turns a specialized graph into a flat list of steps over
 * values, the same way for every device:
 *
 *   1. claims: each node's op class on this device (the device's `claim`
 *      hook; NONE leaves the node to the reference kernel);
 *   2. fusion (codegen/fusion.h): claimed elementwise / broadcast /
 *      injective / reduction nodes grouped, each group lowered to one
 *      tensor expression (a KERNEL step); contractions (MatMul, Gemm, Conv,
 *      2-D MaxPool, FusedAttention) are CONTRACTION steps; the rest HOST
 *      steps;
 *   3. epilogues: the device's `fuse_epilogues` hook may run a flat
 *      elementwise kernel inside the contraction that produces its operand
 *      (kiln_plan_epilogue_candidate finds the candidates,
 *      kiln_plan_fuse_epilogue records the choice); the raw result becomes
 *      an ALIAS value that is never stored;
 *   4. memory: every value a device step writes (and, on devices without
 *      host memory, every host-step result a device step reads) gets bytes
 *      in one arena, placed by liveness (passes/memory_plan.h), aligned as
 *      the device asks; an elementwise kernel may write over an input that
 *      dies with it;
 *   5. flushes: the steps split into runs of device steps (a segment)
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
  KILN_STEP_KERNEL,      /* a fused group: the device renders its tensor expression */
  KILN_STEP_CONTRACTION, /* MatMul, Gemm, Conv, 2-D MaxPool, kiln.FusedAttention: the device's own kernel */
  KILN_STEP_HOST,        /* a node the device does not claim: its reference kernel on host values */
} kiln_plan_step_kind;

typedef enum kiln_plan_value_kind {
  KILN_VALUE_UNUSED = 0,
  KILN_VALUE_CONSTANT,   /* an initializer or folded constant */
  KILN_VALUE_INPUT,      /* a graph input bound per run */
  KILN_VALUE_ARENA,      /* written by a device step, in the arena */
  KILN_VALUE_HOST,       /* written by a host step; host memory only */
  KILN_VALUE_HOST_ARENA, /* written by a host step, read by device steps of a device without host
                            memory: uploaded into the arena after it */
  KILN_VALUE_ALIAS,      /* a contraction's raw result consumed by its epilogue: never stored;
                            alias_of names the epilogue's output */
} kiln_plan_value_kind;

typedef struct kiln_plan_step {
  kiln_plan_step_kind kind;
  const kiln_node *node; /* the node, or the group's root (KERNEL) */
  char name[64];         /* "Conv", "Add+fused", "ref:NonZero" */
  int n_fused;           /* KERNEL: nodes in the group */
  int n_args;
  int *args;             /* value id per binding; KERNEL: the kernel's buffers (output first);
                            CONTRACTION: its present inputs, then its output, then (with an
                            epilogue) the epilogue kernel's args; owned */
  kiln_fused_kernel fk;  /* KERNEL: the group's lowering; owned */
  bool flat;             /* KERNEL: every operand viewed as rank 1 */
  bool elementwise_only; /* KERNEL: every member elementwise or broadcast */
  int epilogue_step;     /* CONTRACTION: the KERNEL step it runs as epilogue, or -1 */
  int fused_into;        /* KERNEL: the CONTRACTION running it as epilogue, or -1 */
  int out_value;         /* the value the step materializes */
  int64_t flops;
  void *compiled;        /* the device's compiled form of the step; freed by its `release_step` */
} kiln_plan_step;

/* A run of device steps, then host steps. */
typedef struct kiln_plan_flush {
  int device_begin, device_end; /* device steps [begin, end) (epilogue kernels inside are skipped) */
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
  bool contractions_as_kernels; /* contractions become KERNEL steps of their compute definitions
                                   (codegen/lower.c) instead of CONTRACTION steps: a device with
                                   no kernel templates of its own */
  /* The class of node on this device (NONE: ref runs it), *why (static) saying why not. */
  kiln_op_class (*claim)(void *user, const kiln_graph *g, const kiln_node *node, const char **why);
  /* Schedules a KERNEL step right after it is lowered (may be NULL). */
  kiln_status_t (*schedule)(void *user, kiln_plan *plan, int step);
  /* Chooses epilogues (may be NULL): calls kiln_plan_fuse_epilogue for each it takes. */
  kiln_status_t (*fuse_epilogues)(void *user, kiln_plan *plan);
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
  int *alias_of;                /* per value id: ALIAS values' home value, else -1 */
  int64_t *offset;              /* per value id: arena offset (ARENA, HOST_ARENA), else -1 */
  int64_t arena_bytes, intermediate_bytes;
  kiln_plan_flush *flushes;
  int n_flushes;
  int n_kernels, n_contractions, n_host, n_fused_nodes;
};

/* Builds the plan of g for target (steps, epilogues, memory, flushes);
 * the device compiles its steps afterwards. *out owned: kiln_plan_free. */
kiln_status_t kiln_plan_build(const kiln_graph *g, const kiln_plan_target *target, kiln_plan **out);
/* Frees the plan (the device must have released its compiled steps). */
void kiln_plan_free(kiln_plan *plan);

/* Bytes value v occupies on the device (half for f32 when f32_as_half, rounded). */
int64_t kiln_plan_value_bytes(const kiln_plan *plan, int v);
/* The step that writes value v, or -1 (v is a constant or an input). */
int kiln_plan_producer(const kiln_plan *plan, int v);

/* Epilogue candidates of KERNEL step k (flat or not; the device decides):
 * operands a (k's args index >= 1) that a CONTRACTION step c produces,
 * read only by k, not a graph output, with k's output element count, and
 * whose other operands are ready before c runs. Writes up to max (c, a)
 * pairs; returns how many. */
int kiln_plan_epilogue_candidates(const kiln_plan *plan, int k, int *out_c, int *out_a, int max);
/* Records that contraction c runs kernel k (whose operand a is c's raw
 * result) as its epilogue: c writes k's output, the raw result becomes an
 * ALIAS, c's args gain k's args. Call from the fuse_epilogues hook. */
kiln_status_t kiln_plan_fuse_epilogue(kiln_plan *plan, int c, int k, int a);

/* `kiln info --device`: steps, fused groups, what ref runs and why, memory. */
void kiln_plan_describe(const kiln_plan *plan, FILE *out);

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
kiln_status_t kiln_plan_execute(kiln_device *dev, struct kiln_executable *exec, kiln_value *const *inputs,
                                int n_outputs, kiln_value **outs, const kiln_step_observer *observe);
void kiln_plan_executable_free(kiln_device *dev, struct kiln_executable *exec);
void kiln_plan_describe_executable(kiln_device *dev, const struct kiln_executable *exec, FILE *out);
/* What the last run did on the device (its plan_run_stats), for `kiln bench --profile`. */
void kiln_plan_run_stats(kiln_device *dev, const struct kiln_executable *exec, FILE *out);
/* The plan inside an executable that kiln_plan_prepare made (borrowed). */
const kiln_plan *kiln_plan_of(const struct kiln_executable *exec);

#endif
