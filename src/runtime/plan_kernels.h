/* plan_kernels.h — what a device that renders its kernels in a GPU
 * dialect of the C emitter (codegen/loopnest.h) needs from a plan, written
 * once: its claims (the compute definitions, limited to the dtypes the
 * dialect stores) and every launched kernel of the plan rendered into one
 * source, kernel "k<i>" for step i, scheduled one thread per element of the
 * loops outside the first a reduction depends on. */
#ifndef KILN_RUNTIME_PLAN_KERNELS_H
#define KILN_RUNTIME_PLAN_KERNELS_H

#include "codegen/loopnest.h"
#include "runtime/plan.h"

/* kiln_lower_class of the node when `stores` accepts the dtype of every
 * value it reads and writes; else KILN_OPCLASS_NONE, with *why (may be
 * NULL) from `stores`. */
typedef bool (*kiln_dtype_filter)(const void *user, kiln_dtype dt, const char **why);
kiln_op_class kiln_plan_claim_stored(const kiln_graph *g, const kiln_node *node, kiln_dtype_filter stores,
                                     const void *user, const char **why);

/* One GPU dialect's kernel renderer (a kiln_render_* of codegen/loopnest.h). */
typedef kiln_status_t (*kiln_kernel_renderer)(const te_builder *b, const kiln_loop_nest *nest, const char *name,
                                              kiln_strbuf *src);

/* A GPU dialect as the plan's devices name it. */
typedef struct kiln_plan_dialect {
  const char *name;        /* the device's name: prefixes errors; the dump kind (KILN_DUMP=<name>) */
  const char *dump_ext;    /* file extension of the dumped source */
  const char *preamble;    /* what the source starts with (the dialect's kiln_*_preamble()) */
  const char *half_helpers; /* follows the preamble when a kernel stores f16/bf16; NULL: none needed */
  kiln_kernel_renderer render;
} kiln_plan_dialect;

typedef struct kiln_plan_kernels {
  char *source;     /* owned: the preamble, then every kernel */
  size_t source_bytes;
  int64_t *threads; /* per plan step: the threads its launch covers (0: none or no launch); owned */
  int *group_size;  /* per plan step: the threads per group its launch must use (0: any); owned */
  int n_kernels;
  char what[160];   /* "the N kernels of graph 'G'": for build errors */
} kiln_plan_kernels;

/* Renders every KERNEL step of the plan with the device's GPU schedule
 * (its thread_tile and group_threads; NULL: the defaults; parallel_dims is
 * always KILN_PARALLEL_UNTIL_REDUCTION), and dumps the source when dumps
 * of dialect->name are on. Errors name the node. */
kiln_status_t kiln_plan_render_kernels(const kiln_plan *plan, const kiln_plan_dialect *dialect,
                                       const kiln_loop_schedule *gpu, kiln_plan_kernels *out);
void kiln_plan_kernels_free(kiln_plan_kernels *k);

/* Whether step i is a kernel the plan launches (what was rendered). */
bool kiln_plan_step_launches(const kiln_plan *plan, int i);
/* The rendered name of step i's kernel: "k<i>". */
void kiln_plan_kernel_name(int step, char name[32]);

#endif
