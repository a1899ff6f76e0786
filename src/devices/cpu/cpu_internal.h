/* cpu_internal.h — the cpu device's compiled graph (executable).
 *
 * prepare (cpu_plan.c): assign nodes (the cpu device claims what
 * codegen/lower.c can lower), fuse claimed nodes into groups, lower each
 * group to one tensor expression, schedule and render it as C, compile all
 * kernels in one JIT batch, allocate every intermediate buffer once, and
 * record a flat list of steps. Contractions (MatMul, Gemm, Conv) are steps
 * that call the packed SGEMM micro-kernels; nodes the device does not claim
 * are steps that run the reference kernel on views of the same buffers.
 *
 * execute: bind inputs, run the steps in order, copy out the graph outputs.
 * An executable is used by one thread at a time (its buffers are reused).
 */
#ifndef KILN_DEVICES_CPU_CPU_INTERNAL_H
#define KILN_DEVICES_CPU_CPU_INTERNAL_H

#include "base/threadpool.h"
#include "codegen/kiln_rt.h"
#include "codegen/lower.h"
#include "runtime/device.h"

typedef enum cpu_step_kind {
  CPU_STEP_KERNEL,  /* a generated, fused kernel */
  CPU_STEP_MATMUL,  /* MatMul via SGEMM (batched, broadcasting) */
  CPU_STEP_GEMM,    /* Gemm via SGEMM */
  CPU_STEP_CONV,    /* Conv via im2col + SGEMM, or direct depthwise loops */
  CPU_STEP_ATTENTION, /* kiln.FusedAttention: SGEMM, row softmax, SGEMM per batch */
  CPU_STEP_MAXPOOL, /* 2-D MaxPool: direct loops over a padded plane */
  CPU_STEP_REF,     /* a node the device does not claim: reference kernel */
} cpu_step_kind;

typedef void (*cpu_kernel_fn)(const kiln_rt *rt, void *const *buffers);

typedef struct cpu_step {
  cpu_step_kind kind;
  const kiln_node *node; /* the node (REF, contractions) or the group's root (KERNEL) */
  char name[48];
  int n_fused;           /* nodes in the group (KERNEL) */
  cpu_kernel_fn fn;      /* KERNEL */
  int module;            /* KERNEL: index of its JIT module */
  int n_args;
  int *args;             /* KERNEL: value id per kernel buffer; owned */
  void *packed_b;        /* MATMUL: constant B packed once; owned */
  size_t scratch_bytes;  /* CONV: im2col bytes needed (0: reads its input directly) */
  float *work;           /* ATTENTION: one score matrix per thread; owned */
  int out_value;         /* the value this step writes (contractions with an epilogue: the epilogue's) */
  int epilogue_step;     /* contractions: the KERNEL step fused in as its epilogue, or -1 */
  int fused_into;        /* KERNEL: the contraction step running it as an epilogue, or -1 */
  kiln_rt_epilogue_fn epilogue; /* KERNEL used as an epilogue: its tile entry point */
  bool flat;             /* KERNEL: rendered as one flat loop */
  int64_t flops;
  bool elementwise_only; /* KERNEL: every fused node elementwise/broadcast (in-place safe) */
} cpu_step;

typedef enum cpu_value_kind {
  CPU_VALUE_UNUSED = 0,
  CPU_VALUE_CONSTANT, /* initializer or folded constant: read in place */
  CPU_VALUE_INPUT,    /* bound per run */
  CPU_VALUE_BUFFER,   /* written by a compiled step into its planned buffer */
  CPU_VALUE_HOST,     /* produced by a REF step per run (a kiln_value) */
  CPU_VALUE_ALIAS,    /* a contraction's raw result, living in its epilogue's output buffer */
} cpu_value_kind;

struct kiln_executable {
  const kiln_graph *g; /* borrowed */
  cpu_step *steps;
  int n_steps;
  cpu_value_kind *kinds; /* per value id */
  void **buffer;         /* per value id: planned buffer (BUFFER) */
  void *arena;           /* all planned buffers */
  size_t arena_bytes, intermediate_bytes;
  void **modules;        /* kiln_jit_module* per compiled source */
  int n_modules;
  kiln_threadpool *pool;
  kiln_rt rt;
  int n_kernels, n_ref, n_fused_nodes;
  float *scratch;        /* im2col buffer shared by every Conv step (steps run one at a time) */
  int *alias_of;         /* per value id: for ALIAS values, the value whose buffer it shares */
  size_t scratch_bytes;
};

kiln_status_t kiln_cpu_prepare(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                               struct kiln_executable **out);
kiln_status_t kiln_cpu_execute(kiln_device *dev, struct kiln_executable *exec, kiln_value *const *inputs,
                               int n_outputs, kiln_value **outs, const kiln_step_observer *observe);
void kiln_cpu_executable_free(kiln_device *dev, struct kiln_executable *exec);

/* Contraction steps (cpu_contract.c). */
kiln_status_t kiln_cpu_contract_prepare(struct kiln_executable *x, cpu_step *step);
kiln_status_t kiln_cpu_contract_run(struct kiln_executable *x, const cpu_step *step, void *const *ptr);

#endif
