/* graph.h — kiln's graph IR: values, nodes, attributes, subgraphs.
 *
 * A kiln_graph owns its nodes, values and attributes. Values are referred
 * to by index (int id) into graph->values; -1 means "absent" (an optional
 * input left empty). Every node input names a value in the same graph; a
 * subgraph (If/Loop/Scan body) that reads a value of an enclosing graph
 * holds a local value with `outer_name` set, bound at run time from the
 * enclosing scope.
 *
 * Strings are owned by the graph. Constant values (initializers, folded
 * constants) hold one tensor reference each.
 *
 * Lifetime: created by the ONNX importer (or tests), destroyed with
 * kiln_graph_free. Not thread-safe to mutate; read-only sharing is fine.
 */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H

#include "base/common.h"
#include "tensor/tensor.h"

/* Static type of a value. For sequences, dtype/rank/dims describe the items. */
typedef enum kiln_type_kind {
  KILN_TYPE_UNKNOWN = 0,
  KILN_TYPE_TENSOR,
  KILN_TYPE_SEQUENCE,
  KILN_TYPE_OPTIONAL_TENSOR,
  KILN_TYPE_OPTIONAL_SEQUENCE,
} kiln_type_kind;

typedef struct kiln_type {
  kiln_type_kind kind;
  kiln_dtype dtype;                     /* UNDEFINED when unknown */
  int rank;                             /* -1 when unknown */
  int64_t dims[KILN_MAX_RANK];          /* -1 when unknown */
  char *dim_params[KILN_MAX_RANK];      /* symbolic names (owned) or NULL */
} kiln_type;

typedef struct kiln_value_def {
  char *name;                 /* owned; unique within its graph ("" never) */
  kiln_type type;
  kiln_tensor *constant;      /* initializer / folded constant, one ref owned, or NULL */
  kiln_tensor *known_value;   /* value inference found (small shape computations), one ref owned, or
                                 NULL; unlike `constant` the node that produces it still runs */
  int producer;               /* node index, or -1 */
  bool is_graph_input;
  bool is_graph_output;
  char *outer_name;           /* captured from an enclosing graph (owned), or NULL */
} kiln_value_def;

typedef enum kiln_attr_type {
  KILN_ATTR_UNDEFINED = 0,
  KILN_ATTR_FLOAT = 1,
  KILN_ATTR_INT = 2,
  KILN_ATTR_STRING = 3,
  KILN_ATTR_TENSOR = 4,
  KILN_ATTR_GRAPH = 5,
  KILN_ATTR_FLOATS = 6,
  KILN_ATTR_INTS = 7,
  KILN_ATTR_STRINGS = 8,
  KILN_ATTR_TENSORS = 9,
  KILN_ATTR_GRAPHS = 10,
  KILN_ATTR_SPARSE_TENSOR = 11,
  KILN_ATTR_SPARSE_TENSORS = 12,
  KILN_ATTR_TYPE_PROTO = 13,
  KILN_ATTR_TYPE_PROTOS = 14,
} kiln_attr_type; /* values match ONNX AttributeProto.AttributeType */

struct kiln_graph;

typedef struct kiln_attr {
  char *name;              /* owned */
  kiln_attr_type type;
  float f;
  int64_t i;
  char *s;                 /* owned, NUL-terminated (may contain NULs: see s_len) */
  size_t s_len;
  kiln_tensor *t;          /* one ref owned */
  struct kiln_graph *g;    /* owned */
  int n;                   /* count for the list kinds */
  float *floats;           /* owned arrays */
  int64_t *ints;
  char **strings;
  kiln_tensor **tensors;
  struct kiln_graph **graphs;
} kiln_attr;

struct kiln_op_def;

typedef struct kiln_node {
  char *name;              /* owned; never NULL (importer names unnamed nodes) */
  char *op_type;           /* owned */
  char *domain;            /* owned; "" for ai.onnx */
  int opset;               /* opset version of the node's domain in this model */
  int n_inputs, n_outputs;
  int *inputs;             /* value ids, -1 = absent optional input */
  int *outputs;            /* value ids, -1 = absent optional output */
  int n_attrs;
  kiln_attr *attrs;
  const struct kiln_op_def *op; /* resolved by kiln_pass_resolve_ops; NULL if unknown */
} kiln_node;

typedef struct kiln_graph {
  char *name;
  struct kiln_graph *parent; /* enclosing graph for subgraphs, borrowed */
  int n_values, cap_values;
  int next_unique; /* where the passes' fresh value names continue counting (pipeline.c) */
  kiln_value_def *values;
  int n_nodes, cap_nodes;
  kiln_node *nodes;          /* in topological order after kiln_graph_toposort */
  int n_inputs, n_outputs;
  int *inputs;               /* value ids of graph inputs (in declared order) */
  int *outputs;              /* value ids of graph outputs */
  /* Borrowed: the model's cache of folded constants (passes/fold_cache.h)
   * on a session's specialized graph; NULL elsewhere (clones too). */
  struct kiln_fold_cache *fold_cache;
  /* Owned: value names -> ids (graph.c), built by kiln_graph_index_names
   * and kept up by kiln_graph_add_value; kiln_graph_find_value uses it
   * while it covers every value, else scans. NULL until built; not cloned. */
  struct kiln_name_index *name_index;
} kiln_graph;

kiln_status_t kiln_graph_new(const char *name, kiln_graph *parent, kiln_graph **out);
void kiln_graph_free(kiln_graph *g);

/* Deep copy (subgraphs too; constant tensors shared by reference). The
 * copy's parent is `parent`. node->op pointers are kept. */
kiln_status_t kiln_graph_clone(const kiln_graph *src, kiln_graph *parent, kiln_graph **out);

/* A graph of node node_index of src alone: the values it reads and writes
 * (names and types copied, constants shared by reference), every distinct
 * non-constant input a graph input in the node's input order, its outputs
 * the graph's outputs. A node with subgraphs keeps them (cloned); names
 * they read from src's scope stay unbound. */
kiln_status_t kiln_graph_of_node(const kiln_graph *src, int node_index, kiln_graph **out);

/* Finds the value id of `name` in this graph, or -1. */
int kiln_graph_find_value(const kiln_graph *g, const char *name);
/* Returns the id of `name`, creating an untyped value if needed. */
kiln_status_t kiln_graph_intern_value(kiln_graph *g, const char *name, int *out_id);
/* Appends an untyped value named `name`, which the caller knows is not in
 * the graph yet (no search). */
kiln_status_t kiln_graph_add_value(kiln_graph *g, const char *name, int *out_id);
/* Builds (or brings up to date) the name index kiln_graph_find_value uses,
 * for a graph about to gain many values (the passes' fresh names: a scan
 * per new value is quadratic). Without memory it leaves none: lookups scan. */
void kiln_graph_index_names(kiln_graph *g);
/* Drops the name index; code that removes, reorders or renames values
 * (not appends) must call it. */
void kiln_graph_names_changed(kiln_graph *g);
/* Appends a node; takes ownership of nothing (copies strings, arrays).
 * Returns the new node index. Attributes are added with the kiln_node_add_*
 * functions afterwards. */
kiln_status_t kiln_graph_add_node(kiln_graph *g, const char *name, const char *op_type, const char *domain,
                                  int n_inputs, const int *inputs, int n_outputs, const int *outputs,
                                  int *out_index);
kiln_status_t kiln_graph_add_input(kiln_graph *g, int value_id);
kiln_status_t kiln_graph_add_output(kiln_graph *g, int value_id);
/* Frees everything an attribute / a node owns and zeroes it (the struct
 * itself is the caller's). */
void kiln_attr_clear(kiln_attr *a);
void kiln_node_clear(kiln_node *n);
/* Appends an attribute slot to node and returns it zeroed (name copied). */
/* Appends deep copies of src's attributes to dst's (subgraphs cloned with
 * owner as their parent). */
kiln_status_t kiln_node_copy_attrs(kiln_node *dst, const kiln_node *src, kiln_graph *owner);
kiln_status_t kiln_node_add_attr(kiln_node *node, const char *name, kiln_attr_type type, kiln_attr **out);

/* Sorts nodes topologically (stable: keeps file order where possible) and
 * sets producers. Errors on cycles and values produced twice; names the node. */
kiln_status_t kiln_graph_toposort(kiln_graph *g);

/* Free-function form of type copies (dim_params are deep-copied). */
void kiln_type_copy(kiln_type *dst, const kiln_type *src);
void kiln_type_clear(kiln_type *t);
void kiln_type_init_tensor(kiln_type *t, kiln_dtype dtype, int rank, const int64_t *dims);
/* "f32[1,3,224,224]", "seq(f32[?])", ... into buf */
char *kiln_type_str(const kiln_type *t, char *buf, size_t size);

/* ---- attribute access (the op's defaults are the caller's) ------------ */
const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name);
int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt);
float kiln_attr_float(const kiln_node *n, const char *name, float dflt);
/* Borrowed; dflt if absent. */
const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt);
/* Borrowed array and its length; NULL/0 if absent. */
const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *out_count);
const float *kiln_attr_floats(const kiln_node *n, const char *name, int *out_count);

#endif
