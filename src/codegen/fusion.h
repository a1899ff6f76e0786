/* fusion.h — grouping claimed nodes into fused kernels, for every compiling
 * device.
 *
 * The grouping follows TVM's lattice (see kiln_fusion_plan); a group is
 * lowered to one tensor expression whose root view is the group's output.
 * Devices differ only in what they do next: the cpu device schedules and
 * renders it as C, the vulkan device as GLSL. Contractions (MatMul, Gemm,
 * Conv, ...) are inside a group only where the device compiles them as
 * kernels; a device with hand-written contractions may still run a flat
 * elementwise group as a contraction's epilogue.
 */
#ifndef KILN_CODEGEN_FUSION_H
#define KILN_CODEGEN_FUSION_H

#include "codegen/lower.h"

typedef struct kiln_fusion {
  int n_nodes;
  kiln_op_class *cls; /* per node; owned (a copy of the caller's classes) */
  int *uses;          /* per value: how many node inputs read it; owned */
  int *group_of;      /* per node: the root node of its group (itself if it is a root); owned */
  int *n_members;     /* per node: group size if a root, else 0; owned */
  int *members;       /* every node, grouped: root r's members, ascending, are
                         members[member_start[r] .. + n_members[r]); owned */
  int *member_start;  /* per node: where its group starts in members if a root; owned */
} kiln_fusion;

/* Groups the nodes of g whose class (cls[n], from the device) is
 * elementwise, broadcast, injective or reduction; contraction_epilogues
 * (contractions compiled as kernels): contractions too, each with the
 * elementwise consumers that follow it. conv_transposed_output (the
 * device's kernels write a Conv in the layout of a Transpose swapping its
 * first two axes): such a Transpose takes a lone f32 Conv of group 1
 * without bias into its group, which then takes no consumer. */
kiln_status_t kiln_fusion_plan(const kiln_graph *g, const kiln_op_class *cls, bool contraction_epilogues,
                               bool conv_transposed_output, kiln_fusion *out);
void kiln_fusion_free(kiln_fusion *f);

/* A group lowered to one tensor expression. Buffer i of `b` holds graph
 * value args[i]; buffer 0 is the output. */
typedef struct kiln_fused_kernel {
  te_builder *b;            /* owned */
  const te_tensor *root;    /* the group's output view (in b) */
  int n_args;
  int *args;                /* owned */
  bool flat;                /* every operand has the output's shape (or is a scalar): viewed as rank 1 */
  bool elementwise_only;    /* every member elementwise/broadcast: the output may overwrite a dying input */
  int n_members;
} kiln_fused_kernel;

/* Lowers group `root` (a root of f). allow_flat: view a flattenable group
 * as rank 1 (index arithmetic vanishes). */
kiln_status_t kiln_fusion_build(const kiln_graph *g, const kiln_fusion *f, int root, bool allow_flat,
                                kiln_fused_kernel *out);
void kiln_fused_kernel_free(kiln_fused_kernel *k);

/* A lowered group as one C source (codegen/render_c.c): scheduled with the
 * default loop schedule (contractions tensorized onto kiln_rt's GEMM and
 * conv routines), rendered as `kiln_kernel`. *out owned (free). What the
 * cpu device compiles and the null device renders. */
kiln_status_t kiln_fused_kernel_c_source(const kiln_fused_kernel *k, char **out);
/* Its two halves: the nest (the default schedule, GEMM calls of any size
 * with gemm_any_size; kiln_loop_nest_free it), and the source of a nest.
 * The cpu's interpreter runs such nests too. */
struct kiln_loop_nest;
kiln_status_t kiln_fused_kernel_schedule_c(const kiln_fused_kernel *k, bool gemm_any_size, struct kiln_loop_nest *out);
kiln_status_t kiln_fused_kernel_render_c(const kiln_fused_kernel *k, const struct kiln_loop_nest *nest, char **out);


/* Small shape helpers shared by the device planners. */
static inline int64_t kiln_type_numel(const kiln_type *t) { return kiln_shape_numel(t->rank, t->dims); }
static inline bool kiln_type_same_shape(const kiln_type *a, const kiln_type *b) {
  return kiln_shape_equal(a->rank, a->dims, b->rank, b->dims);
}

#endif
