/* memory_plan.h — liveness-based placement of intermediate buffers in one arena.
 *
 * A device that runs a plan of steps (nodes, or fused kernels) describes each
 * intermediate buffer by its size, alignment and lifetime [first_use, last_use]
 * in step indices (inclusive at both ends: the producer's step and the last
 * consumer's step). The planner gives every buffer an offset in one arena so
 * that two buffers whose lifetimes intersect never share a byte, except where
 * an in-place reuse was taken:
 *
 *   kiln_mem_buffer bufs[3] = {
 *     {.size = 4096, .first_use = 0, .last_use = 1, .inplace_source = -1},
 *     {.size = 4096, .first_use = 1, .last_use = 2, .inplace_source = 0},  // Relu of buffer 0, which dies at 1
 *     {.size = 1024, .first_use = 2, .last_use = 3, .inplace_source = -1},
 *   };
 *   kiln_memory_plan plan;
 *   KILN_TRY(kiln_memory_plan_compute(bufs, 3, &plan));
 *   ... plan.offsets[i], plan.arena_size, plan.inplace_of[i] ...
 *   kiln_memory_plan_free(&plan);
 *
 * In-place: buffer i may name one buffer j (`inplace_source`) whose storage it
 * would like to take: an elementwise step that reads j for the last time and
 * writes i. The planner takes it (i gets j's offset) only when j's last_use is
 * exactly i's first_use, i.size <= j.size, no other buffer already took j, and
 * the chain stays sound (see memory_plan.c); otherwise the candidate is
 * ignored. A step writing in place must read element k before writing element
 * k (forward order), which every elementwise kernel does.
 *
 * Placement is "greedy by size" with best fit: buffers (in-place chains merged
 * into one block) are placed largest first, each into the smallest gap left
 * by already placed blocks whose lifetimes intersect it, or above them all.
 * Two more orders (size x lifetime, first use) are tried and the smallest
 * arena kept (on random interval sets they win about a third of the time).
 * Cost is O(n^2) in the number of blocks.
 *
 * The planner works on plain data (no graph, no device); the graph-level
 * helpers at the bottom build its input from a kiln_graph. All functions are
 * thread-safe (no shared state).
 */
#ifndef KILN_PASSES_MEMORY_PLAN_H
#define KILN_PASSES_MEMORY_PLAN_H

#include "ir/graph.h"

#define KILN_MEMORY_PLAN_DEFAULT_ALIGNMENT 64

/* One buffer to place. A passive descriptor owned by the caller. */
typedef struct kiln_mem_buffer {
  int64_t size;       /* bytes, >= 0; a zero-size buffer gets offset 0 and conflicts with nothing */
  int64_t alignment;  /* a power of two, or 0 for KILN_MEMORY_PLAN_DEFAULT_ALIGNMENT */
  int first_use;      /* step of the producer, >= 0 */
  int last_use;       /* step of the last consumer, >= first_use (== first_use if nothing reads it) */
  int inplace_source; /* index of a buffer whose storage this one may take, or -1 */
} kiln_mem_buffer;

/* The planner's answer. Arrays are owned by the plan (kiln_memory_plan_free). */
typedef struct kiln_memory_plan {
  int n_buffers;
  int64_t *offsets;    /* per buffer: byte offset in the arena, a multiple of its alignment */
  int *inplace_of;     /* per buffer: the buffer whose storage it took, or -1 */
  int n_inplace;       /* number of in-place reuses taken */
  int64_t arena_size;  /* bytes; every offset + size fits below it */
  int64_t total_size;  /* sum of all buffer sizes (what allocating each separately would cost) */
  int64_t peak_live;   /* max over steps of the sum of sizes of buffers live at that step: a lower
                          bound for any plan without in-place reuse */
} kiln_memory_plan;

/* Plans n buffers (n may be 0). Errors (KILN_INVALID_ARGUMENT) name the first
 * malformed buffer: negative size, bad alignment, last_use < first_use,
 * inplace_source out of range or itself. On error *out is left empty. */
kiln_status_t kiln_memory_plan_compute(const kiln_mem_buffer *buffers, int n, kiln_memory_plan *out);
void kiln_memory_plan_free(kiln_memory_plan *plan);

/* Checks a plan against its buffers: offsets aligned and inside the arena;
 * each in-place reuse legal (source dies where the user is produced, same
 * offset, size fits, each source taken once); and no two buffers with
 * intersecting lifetimes share a byte unless one took the other in place.
 * Returns NULL or a KILN_INTERNAL error naming the buffers at fault. */
kiln_status_t kiln_memory_plan_verify(const kiln_mem_buffer *buffers, int n, const kiln_memory_plan *plan);

/* ---- graph level ------------------------------------------------------------ */

/* True for nodes whose output element k depends only on input elements k
 * (op class elementwise or broadcast, and inference BatchNormalization).
 * With equal input and output types they can write over a dying input. */
bool kiln_op_is_inplace_elementwise(const kiln_node *node);

/* The intermediate buffers of a graph whose types are inferred: every node
 * output that is neither a graph output nor a constant, sized from its type,
 * living from its producer's node index to its last consumer's (uses by a
 * node's subgraphs of outer values count as uses by the node; an output
 * nothing reads lives one step). The output of a single-output
 * kiln_op_is_inplace_elementwise node names as in-place source its first
 * input that is another such buffer of the same dtype and shape and whose
 * last use is this node (earlier consumers have run: steps are sequential).
 * Values whose size is unknown (unknown shape, sequences, strings) are left
 * out and counted in *out_n_unsized. Outputs of nodes that compute from
 * constants alone (Constant, Identity of a weight, ...: what constant folding
 * turns into weights) are left out and counted in *out_n_folded.
 * *out_buffers and *out_value_ids (the value id of each buffer) are malloc'd
 * arrays the caller frees; both are NULL when *out_n is 0. */
kiln_status_t kiln_graph_memory_buffers(const kiln_graph *g, kiln_mem_buffer **out_buffers, int **out_value_ids,
                                        int *out_n, int *out_n_unsized, int *out_n_folded);

/* For device planners whose steps are compiled kernels. A step writes
 * args[0] and reads args[1..n_args); may_write_in_place: it is elementwise
 * (reads element k of each input before writing element k of its output), so
 * its output may take the storage of a same-shape input that dies there. */
typedef struct kiln_plan_step_io {
  const int *args; /* value ids; borrowed */
  int n_args;
  bool may_write_in_place;
} kiln_plan_step_io;

/* Finishes the lifetimes of buffers whose first/last uses the planner has
 * filled from its steps (buf_of: the buffer of each value id, or -1): graph
 * outputs live past the last step, an unset first use becomes 0, a last use
 * is at least the first; then offers each in-place candidate of steps[]. */
void kiln_memory_plan_finish_steps(const kiln_graph *g, const int *buf_of, kiln_mem_buffer *bufs, int nb,
                                   const kiln_plan_step_io *steps, int n_steps);

/* What planning a graph's intermediates would give (for `kiln info`). */
typedef struct kiln_memory_plan_report {
  int n_buffers;          /* intermediates planned */
  int n_unsized;          /* intermediates left out: size unknown */
  int n_folded;           /* node outputs left out: computed from constants alone */
  int n_inplace;          /* in-place reuses taken */
  int64_t total_bytes;    /* sum of the planned intermediates' sizes */
  int64_t arena_bytes;    /* the planned arena */
  int64_t peak_live_bytes; /* lower bound without in-place: the most bytes live at one node */
} kiln_memory_plan_report;

/* Builds the buffers (kiln_graph_memory_buffers), plans and verifies them. */
kiln_status_t kiln_plan_graph_memory(const kiln_graph *g, kiln_memory_plan_report *out);

#endif
