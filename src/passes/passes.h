/* passes.h — graph-level passes. Each is a named rewrite over kiln_graph;
 * kiln_run_pass runs one by name, verifies the graph after it and dumps it
 * when KILN_DUMP names the pass (or is "all"). */
#ifndef KILN_PASSES_PASSES_H
#define KILN_PASSES_PASSES_H

#include "ops/op.h"

/* Sets node->op for every node (recursively into subgraphs) and checks
 * input/output counts against the op's schema. Unknown ops are left with
 * op == NULL (a session reports them); counts that do not fit are errors. */
kiln_status_t kiln_pass_resolve_ops(kiln_graph *g);

/* Shape and type inference, in node order, into subgraphs. Declared types
 * (value_info) are kept where inference knows less; a definite conflict
 * between declared and inferred types is an error naming the node. */
kiln_status_t kiln_pass_infer_types(kiln_graph *g);
/* Runs node n's inference over the types (and constant or known values) of
 * its inputs in g into out[0..n->n_outputs) (at most 64; each starts
 * unknown; the caller kiln_type_clear()s them). Nothing in g changes. */
kiln_status_t kiln_infer_node_outputs(const kiln_graph *g, const kiln_node *n, kiln_type *out);

/* Structural checks: ids in range, every consumed value produced before its
 * use or an input/initializer/outer value, node names present. */
kiln_status_t kiln_graph_verify(const kiln_graph *g);

/* Runs a named pass, then verifies, then dumps if KILN_DUMP asks for it. */
typedef kiln_status_t (*kiln_pass_fn)(kiln_graph *g);
kiln_status_t kiln_run_pass(kiln_graph *g, const char *name, kiln_pass_fn fn);



/* Estimated FLOPs of one node from its inferred shapes (0 if unknown). */
int64_t kiln_node_flops(const kiln_graph *g, const kiln_node *n);
#endif
