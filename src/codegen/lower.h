/* lower.h — one compute definition per op: graph node -> tensor view.
 *
 * kiln_lower_class says whether an op (with its inferred types and
 * constant inputs) has a compute definition; kiln_lower_node builds the
 * node's output view from its input views. Views compose, so lowering a
 * chain of nodes and asking the last view for an element inlines the whole
 * chain (fusion). The op classes (ops/op.h, each op's definition) say
 * how a claimed node fuses; MatMul, Gemm, Conv, 2-D MaxPool and
 * FusedAttention (contractions) have no view here: devices run them as
 * direct kernels with these views as their epilogues.
 *
 * Only f32 data is claimed for now (indices and shapes may be other types
 * when they are constants): every other dtype runs on the reference device.
 */
#ifndef KILN_CODEGEN_LOWER_H
#define KILN_CODEGEN_LOWER_H

#include "codegen/te.h"
#include "ops/op.h" /* kiln_op_class */

/* Class of `node` if the compiler can lower it (types from g), else NONE
 * with *reason (static) saying why. */
kiln_op_class kiln_lower_class(const kiln_graph *g, const kiln_node *node, const char **reason);

/* For a REDUCTION-class node: true if it reduces trailing axes only (its
 * result then depends on leading indices only, so a consumer that inlines
 * it computes it once per row). */
bool kiln_lower_reduces_trailing(const kiln_graph *g, const kiln_node *node);

/* True if input i of node is a parameter the compute definition reads from
 * the graph at compile time (shapes, axes, Clip bounds...), not data: the
 * kernel needs no buffer for it. */
bool kiln_lower_is_param_input(const kiln_node *node, int i);

/* True when node reads indices known only at run time whose range its
 * compute definition does not check (a Gather's, GatherElements', GatherND's,
 * ScatterElements' or ScatterND's, clamped to stay inside the data): the
 * plan checks them before the kernel runs, so an index out of range is the
 * same error ref reports. *input: which input holds them; element i of it
 * must lie in [-bounds[i % n_bounds], bounds[i % n_bounds]) (GatherND and
 * ScatterND: one bound per component of the index tuple, its last axis);
 * bounds holds KILN_MAX_RANK. */
bool kiln_lower_runtime_indices(const kiln_graph *g, const kiln_node *node, int *input, int *n_bounds,
                                int64_t *bounds);

/* Builds node's output 0 view from its input views (inputs[i] NULL for
 * absent or constant-parameter inputs the op reads from g instead). */
kiln_status_t kiln_lower_node(te_builder *b, const kiln_graph *g, const kiln_node *node,
                              const te_tensor *const *inputs, te_tensor **out);

#endif
