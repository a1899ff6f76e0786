/* executor.h — runs a graph node by node on host values.
 *
 * This is the interpreter the reference path uses: values live in a frame
 * (one kiln_value* per value id), nodes run in topological order on the
 * first device in the list that supports them (ref takes the rest), and a
 * value is released as soon as its last consumer has run. Subgraphs
 * (If/Loop/Scan bodies) run in child frames that resolve outer-scope
 * names through their parents.
 *
 * Not thread-safe per call, but calls share no state: two threads may run
 * the same graph at once with different inputs.
 */
#ifndef KILN_RUNTIME_EXECUTOR_H
#define KILN_RUNTIME_EXECUTOR_H

#include "runtime/device.h"

/* Called after each node ran (for verification tools); `outputs` borrowed.
 * Returning an error stops the run. */
typedef kiln_status_t (*kiln_node_observer)(void *user, const kiln_graph *g, const kiln_node *node,
                                           kiln_value *const *outputs);

/* Called before each top-level node runs (profilers start a clock here). */
typedef void (*kiln_node_starter)(void *user, const kiln_graph *g, const kiln_node *node);

typedef struct kiln_exec_options {
  kiln_device *const *devices; /* priority order; ref is always the fallback */
  int n_devices;
  kiln_node_observer observer; /* may be NULL; sees top-level nodes only */
  void *observer_user;
  kiln_node_starter before_node; /* may be NULL; top-level nodes only; gets observer_user */
} kiln_exec_options;

typedef struct kiln_exec_frame kiln_exec_frame;

/* Runs `g`. inputs[i] binds g->inputs[i] (borrowed; NULL = use the input's
 * initializer default, or an error if it has none). On success each
 * out_outputs[i] (i < n_outputs <= g->n_outputs) is an owned value. */
kiln_status_t kiln_execute_graph(const kiln_graph *g, const kiln_exec_frame *parent, int n_inputs,
                                 kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs,
                                 const kiln_exec_options *opts);

/* Runs one node's reference kernel on host values, for compiling devices
 * that leave a node to ref. ins[i] binds node input i (borrowed; NULL for an
 * absent input); outs[i] receives an owned value for every output the node
 * has (node->outputs[i] >= 0). Each tensor result is checked against the
 * type inferred in g, because compiled consumers were generated for it. At
 * most 64 inputs and outputs. */
kiln_status_t kiln_run_ref_node(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                kiln_value **outs);
/* The same for control flow (If, Loop, Scan, SequenceMap): the kernel runs
 * its bodies through run_subgraph(runner_data, ...). */
kiln_status_t kiln_run_ref_node_with(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                     kiln_value **outs, kiln_subgraph_runner run_subgraph, void *runner_data);
/* A device's own kernel for a host step (a node whose shapes are only
 * known when it runs): it fills ctx's outputs and sets *handled, or leaves
 * both alone and ref's kernel runs the node. */
typedef kiln_status_t (*kiln_host_kernel_fn)(void *user, kiln_kernel_ctx *ctx, bool *handled);
/* kiln_run_ref_node_with, trying native(native_user, ...) first (native may be NULL). */
kiln_status_t kiln_run_host_node(const kiln_graph *g, const kiln_node *node, kiln_value *const *ins,
                                 kiln_value **outs, kiln_subgraph_runner run_subgraph, void *runner_data,
                                 kiln_host_kernel_fn native, void *native_user);

/* Names of outer-scope values that `g` (and its nested subgraphs) read. */
kiln_status_t kiln_graph_outer_names(const kiln_graph *g, kiln_ptr_vec *out_names);

#endif
