/* passes_opt.h — graph-level optimizations.
 *
 * Each optimization is a named pass (run through kiln_run_pass, so it is
 * verified afterwards and dumped when KILN_DUMP names it). They rewrite
 * the session's specialized graph (every input shape concrete) and must
 * leave the graph's outputs unchanged:
 *
 *   fold-constants  evaluates deterministic nodes whose inputs are all
 *                   constant with their reference kernels; promotes value
 *                   inference's known values (Shape -> Gather -> Concat ...)
 *   dce             removes nodes nobody reads and unused constants
 *   cse             merges identical nodes (same op, inputs, attributes)
 *   simplify        removes Identity, inference Dropout, no-op Reshape /
 *                   Transpose / Cast / Squeeze-Unsqueeze; merges
 *                   Reshape chains and Transpose pairs
 *   fold-batchnorm  folds inference BatchNormalization (and per-channel
 *                   Mul/Add by constants) into Conv / Gemm / MatMul weights
 *   widen-half      computes f16/bf16 nodes as f32 nodes between Casts
 *                   (compiling devices: the halves are storage)
 *   patterns        replaces decomposed GELU, LayerNormalization, Softmax
 *                   and scaled-dot-product attention by one node each
 *                   (kiln.Gelu, LayerNormalization-17, Softmax-13,
 *                   kiln.FusedAttention; kernels in ops/fused.c)
 *
 * kiln_optimize_graph runs them in order until nothing changes.
 *
 * Value ids: dce renumbers values (unused ones are dropped); other passes
 * only append values. Constants are never modified in place (the model's
 * graph shares them): rewrites make new tensors.
 * Subgraphs (If/Loop/Scan bodies) get the shape-independent rewrites;
 * rewrites that rely on inferred shapes run where kiln_opt_shapes_trusted.
 */
#ifndef KILN_PASSES_PASSES_OPT_H
#define KILN_PASSES_PASSES_OPT_H

#include "passes/passes.h"

/* Domain of the fused ops the pattern pass creates. */
#define KILN_FUSED_DOMAIN "kiln"

kiln_status_t kiln_pass_fold_constants(kiln_graph *g);
kiln_status_t kiln_pass_dce(kiln_graph *g);
kiln_status_t kiln_pass_cse(kiln_graph *g);
kiln_status_t kiln_pass_simplify(kiln_graph *g);
kiln_status_t kiln_pass_fold_batchnorm(kiln_graph *g);
kiln_status_t kiln_pass_patterns(kiln_graph *g);
kiln_status_t kiln_pass_resample_tables(kiln_graph *g);
kiln_status_t kiln_pass_decompose(kiln_graph *g);
/* f16/bf16 nodes that compute as f32 nodes between Casts (widen_half.c). */
kiln_status_t kiln_pass_widen_half(kiln_graph *g);
/* The same, RNN, GRU and LSTM left whole. */
kiln_status_t kiln_pass_decompose_keep_recurrent(kiln_graph *g);
/* The same keeping Attention's decoder steps whole, and both. */
kiln_status_t kiln_pass_decompose_keep_attention(kiln_graph *g);
kiln_status_t kiln_pass_decompose_keep_routines(kiln_graph *g);
/* An ONNX Attention node that is a decoder step a device routine may take
 * whole (cpu_attention.c): f32, 4-D Q/K/V with known shapes, past_key and
 * past_value given, no attn_mask, nonpad_kv_seqlen, window or
 * qk_matmul_output, at most 4 query rows. */
bool kiln_attention_decode_step(const kiln_graph *g, const kiln_node *n);
/* Its rules on the node alone (no mask, nonpad_kv_seqlen, window or
 * qk_matmul_output; the past cache given), for a routine that sees the
 * node and the run's tensors but not the graph. */
bool kiln_attention_decode_node(const kiln_node *n);
/* An If with a constant condition as its taken branch's nodes, a Loop with
 * a constant trip count that always runs to it as its body's nodes once
 * per iteration (inline_control.c). */
kiln_status_t kiln_pass_inline_control(kiln_graph *g);
/* Sequences whose items the graph states, read as those tensors (fold_sequences.c). */
kiln_status_t kiln_pass_fold_sequences(kiln_graph *g);
/* A QDQ Conv (DequantizeLinear x and w) as ConvInteger, Cast, scale (qdq_integer.c). */
kiln_status_t kiln_pass_qdq_integer(kiln_graph *g);

/* Runs `fn` on every subgraph of g's nodes (If/Loop/Scan bodies), not on g
 * itself; errors name the node and attribute. */
kiln_status_t kiln_opt_run_on_subgraphs(kiln_graph *g, kiln_status_t (*fn)(kiln_graph *));

/* Runs the passes above to a fixed point. level 0: nothing; >= 1: all. */
kiln_status_t kiln_optimize_graph(kiln_graph *g, int level);
/* What a device wants of the optimizer (kiln_plan_optimize_for derives it
 * from the device's features). */
typedef struct kiln_optimize_options {
  bool fuse_attention; /* false: the patterns pass leaves attention as MatMul, Softmax, MatMul (no fused kernel) */
  bool keep_recurrent; /* RNN, GRU and LSTM stay whole (a device that runs them on a routine of its own) */
  bool qdq_integer;    /* QDQ convolutions become ConvInteger (a device whose integer kernels beat its float ones) */
  bool keep_decode_attention; /* Attention's decoder steps stay whole (a device with a routine of its own) */
  bool widen_half;     /* f16/bf16 arithmetic as f32 between Casts (widen_half.c: a device computing in f32) */
} kiln_optimize_options;
/* The same, for a device. */
kiln_status_t kiln_optimize_graph_for(kiln_graph *g, int level, const kiln_optimize_options *opts);
/* The patterns pass without the attention rewrite. */
kiln_status_t kiln_pass_patterns_unfused_attention(kiln_graph *g);

/* ---- helpers shared by the passes (pipeline.c) ----------------------------- */

/* Who reads each value of one graph. Built from the graph; stale after a
 * rewrite (rebuild it). */
typedef struct kiln_opt_uses {
  int n_values;
  int *count;      /* node input slots reading the value + graph-output entries + subgraph reads */
  int *start;      /* consumers of v: node indices cons[start[v] .. start[v+1]) (one per input slot) */
  int *cons;
  bool *pinned;    /* graph input/output, read by name from a subgraph, or outer-scope: keep its id and name */
} kiln_opt_uses;

kiln_status_t kiln_opt_uses_build(const kiln_graph *g, kiln_opt_uses *out);
void kiln_opt_uses_free(kiln_opt_uses *u);
/* The one node reading v (through exactly one input slot) when v is not
 * pinned; else -1. */
int kiln_opt_sole_consumer(const kiln_opt_uses *u, int v);
/* True when every read of v is by node `node` and v is not pinned. */
bool kiln_opt_only_read_by(const kiln_opt_uses *u, int v, int node);

/* The constant tensor of value id (initializer or folded), or NULL. Graph
 * inputs are never constant (a caller may override an initializer default). */
const kiln_tensor *kiln_opt_const(const kiln_graph *g, int id);
/* Scalar (one element) float constant: true and *out when id is one. */
bool kiln_opt_const_scalar(const kiln_graph *g, int id, double *out);
/* Whether inferred shapes may be relied on for rewrites: the top-level
 * graph (a loop body's carried values may change shape between
 * iterations) with no graph input carrying an initializer default (value
 * inference computes known values and shapes from the default even when a
 * caller overrides it). */
bool kiln_opt_shapes_trusted(const kiln_graph *g);
/* Whether the value's type has a known rank and all dims. */
bool kiln_opt_shape_known(const kiln_type *t);
/* The names outer scopes must keep: every outer_name read by node's subgraphs (recursively). */
kiln_status_t kiln_opt_subgraph_reads(const kiln_node *node, kiln_ptr_vec *names);

/* New value with a unique name derived from `base`; type copied when given. */
kiln_status_t kiln_opt_new_value(kiln_graph *g, const char *base, const kiln_type *type, int *out_id);
/* New constant value (takes the reference to t); its type is t's. */
kiln_status_t kiln_opt_new_const(kiln_graph *g, const char *base, kiln_tensor *t, int *out_id);
/* Inserts a node at index pos (later nodes shift); producers updated.
 * Pointers into g->nodes are invalid afterwards. */
kiln_status_t kiln_opt_insert_node(kiln_graph *g, int pos, const char *name, const char *op_type, const char *domain,
                                   int opset, int n_inputs, const int *inputs, int n_outputs, const int *outputs,
                                   int *out_index);
/* Many insertions at one place in O(nodes + new nodes): append each new
 * node at the end (kiln_opt_append_node: opset and op resolved, its
 * outputs' producers set), then kiln_opt_move_tail(g, first, pos) moves the
 * nodes appended since n_nodes was `first` to index pos, in their order,
 * and updates every producer once. Inserting one by one costs a shift of
 * every later node and a producer rebuild per node: quadratic in an
 * unrolled recurrence's thousands of step nodes. */
kiln_status_t kiln_opt_append_node(kiln_graph *g, const char *name, const char *op_type, const char *domain, int opset,
                                   int n_inputs, const int *inputs, int n_outputs, const int *outputs);
kiln_status_t kiln_opt_move_tail(kiln_graph *g, int first, int pos);
/* Turns node idx into another op in place (attributes dropped, op resolved). */
kiln_status_t kiln_opt_rewrite_node(kiln_graph *g, int idx, const char *op_type, const char *domain, int opset,
                                    int n_inputs, const int *inputs, int n_outputs, const int *outputs);
kiln_status_t kiln_opt_set_attr_int(kiln_node *n, const char *name, int64_t v);
kiln_status_t kiln_opt_set_attr_float(kiln_node *n, const char *name, float v);
kiln_status_t kiln_opt_set_attr_string(kiln_node *n, const char *name, const char *s);
kiln_status_t kiln_opt_set_attr_ints(kiln_node *n, const char *name, int count, const int64_t *v);
/* Removes the nodes with dead[i] (freeing them); producers updated. */
kiln_status_t kiln_opt_remove_nodes(kiln_graph *g, const bool *dead);
/* Every node input reading `from` reads `to` instead. */
/* Appends Unsqueeze(ids[k], axis) for each of the n values and a Concat of
 * them along axis writing out (an existing value): the values stacked on
 * a new axis. opset: of the ai.onnx domain (the axes are an input from 13). */
kiln_status_t kiln_opt_append_stack(kiln_graph *g, const char *name, int opset, int n, const int *ids, int64_t axis,
                                    int out);
void kiln_opt_replace_uses(kiln_graph *g, int from, int to);
/* Makes node `idx` (whose output out_id equals its input in_id) removable:
 * rewires readers of out_id to in_id, or, when out_id must keep its name
 * (a graph output), makes in_id's producer write out_id. Returns true and
 * sets dead[idx] when done; false (graph unchanged) when the node must stay.
 * `u` must be current; the caller rebuilds it after a true return. */
bool kiln_opt_bypass(kiln_graph *g, const kiln_opt_uses *u, int idx, int in_id, int out_id, bool *dead);

#endif
