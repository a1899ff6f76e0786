/* onnx_internal.h — shared state of the ONNX reader (not a public API).
 *
 * Loading runs in three steps over the mapped bytes:
 *   1. the ModelProto's fields are located (opsets, functions, graph);
 *   2. each graph is built by an onnx_builder: its NodeProtos become
 *      onnx_node_desc (names copied, attributes kept as byte slices), calls
 *      to model-local functions are replaced by the function body with
 *      fresh value names (onnx_functions.c), then every desc becomes a
 *      kiln_node and its attributes are decoded (subgraphs recursively);
 *   3. tensors are decoded by onnx_tensor.c, wrapping the map when they can.
 *
 * All byte slices point into the loader's source buffer, which outlives the
 * load. Every message is re-parsed with bounds checks wherever it is read.
 */
#ifndef KILN_ONNX_ONNX_INTERNAL_H
#define KILN_ONNX_ONNX_INTERNAL_H

#include "onnx/onnx.h"
#include "onnx/protowire.h"

/* How deep subgraphs (and nested function calls, and nested TypeProtos)
 * may go before the file is rejected. */
#define ONNX_MAX_DEPTH 64
/* Inlining re-reads function bodies once per call: the bytes so re-read are
 * capped at this multiple of the file size (plus 1 MiB), which stops
 * exponential expansion from nested calls. */
#define ONNX_INLINE_BUDGET_FACTOR 16

/* TYPE_PROTO attributes: kiln_attr has no type slot, so the decoded type is
 * stored in `ints` as ONNX_TYPE_INTS numbers per type:
 *   {kind (kiln_type_kind), dtype, rank, dims[KILN_MAX_RANK]}
 * (n = number of types). For TYPE_PROTO (one type) `s`/`s_len` also hold
 * the serialized TypeProto, which the writer emits verbatim. */
#define ONNX_TYPE_INTS (3 + KILN_MAX_RANK)

typedef struct onnx_slice {
  const uint8_t *p;
  size_t len;
} onnx_slice;

/* String -> int map (open addressing; keys borrowed, must outlive the map). */
typedef struct onnx_name_map {
  const char **keys; /* borrowed */
  int *vals;
  int cap, count;    /* cap is 0 or a power of two */
} onnx_name_map;

/* ---- buffers the model's tensors may borrow ---------------------------- */

typedef struct onnx_mapping {
  kiln_keepalive ka; /* first: tensors hold &ka */
  void *addr;
  size_t size;
  bool is_mmap; /* munmap (file) or free (copy) */
} onnx_mapping;

/* Maps a whole file read-only (private). refcount 1. Empty files give a
 * mapping of size 0 with addr NULL. */
kiln_status_t onnx_map_file(const char *path, onnx_mapping **out);
/* Copies a buffer into a new 64-byte-aligned allocation. refcount 1. */
kiln_status_t onnx_copy_buffer(const void *data, size_t size, onnx_mapping **out);

/* Where a message's bytes live. */
typedef struct onnx_source {
  const uint8_t *base; /* start of the buffer (offsets in errors count from here) */
  size_t size;
  kiln_keepalive *keep; /* non-NULL: tensors may borrow aligned bytes (retaining it) */
  bool releasable;      /* file-backed private map: pages may be dropped once copied */
} onnx_source;

typedef struct onnx_ext_file {
  char *path;
  onnx_mapping *map;
  struct onnx_ext_file *next;
} onnx_ext_file;

/* ---- model-local functions --------------------------------------------- */

typedef struct onnx_function {
  char *name, *domain; /* owned; domain "" for ai.onnx */
  int n_inputs, n_outputs, n_attr_names, n_defaults, n_nodes, n_opsets;
  char **inputs, **outputs, **attr_names;
  onnx_slice *defaults; /* AttributeProto (attribute_proto, field 11) */
  char **default_names;
  onnx_slice *nodes;    /* NodeProto */
  size_t *node_offsets;
  kiln_opset_import *opsets;
} onnx_function;

/* ---- the loader ------------------------------------------------------------ */

typedef struct onnx_loader {
  onnx_source src;
  const char *base_dir; /* for external data; NULL: external data is an error */
  onnx_ext_file *ext;   /* external files mapped so far (each holds one ref) */
  int n_opsets;
  const kiln_opset_import *opsets; /* the model's (borrowed) */
  int n_functions;
  onnx_function *functions;
  onnx_name_map function_index; /* name -> first function of that name */
  int *next_same_name;          /* per function: next with the same name, or -1 */
  int64_t fresh_counter; /* for unique names of inlined values */
  int64_t inlined_bytes;  /* attribute bytes decoded again by inlining (bounded) */
} onnx_loader;

void onnx_loader_release(onnx_loader *L); /* frees ext files and functions */

/* ---- node descriptors and function scopes -------------------------------- */

typedef struct onnx_attr_ref {
  char *name;       /* owned: the attribute's name at this node */
  onnx_slice proto; /* AttributeProto holding its value (ref_attr_name resolved) */
} onnx_attr_ref;

/* One inlined call of a function. */
typedef struct onnx_scope {
  const onnx_function *fn;
  int n_attrs;          /* the caller's attributes, then the defaults (owned copies) */
  onnx_attr_ref *attrs;
  onnx_name_map attr_index; /* attribute name -> index in attrs */
  onnx_name_map rename; /* function-body name -> index into `targets` */
  char **targets;       /* owned; "" = absent optional input */
  int n_targets, cap_targets;
} onnx_scope;

typedef struct onnx_node_desc {
  char *name, *op_type, *domain; /* owned; name "" if the file has none */
  int n_inputs, n_outputs;
  char **inputs, **outputs; /* owned; "" = absent */
  int n_attrs;
  onnx_attr_ref *attrs;
  onnx_scope *scope; /* function instance it was inlined from (borrowed), or NULL */
  int opset;
  size_t offset; /* byte offset of its NodeProto */
} onnx_node_desc;

typedef struct onnx_desc_list {
  onnx_node_desc *items;
  int count, cap;
} onnx_desc_list;

typedef struct onnx_builder {
  onnx_loader *L;
  kiln_graph *g;
  struct onnx_builder *parent;
  onnx_scope *owner_scope; /* scope of the node owning this subgraph: renames reads from parent */
  onnx_scope *attr_scope;  /* instance whose attributes ref_attr_name refers to, or NULL */
  onnx_name_map names;     /* name -> value id (keys: value names or `aliases`) */
  char **aliases;
  int n_aliases, cap_aliases;
  onnx_scope **scopes; /* owned */
  int n_scopes, cap_scopes;
  int depth;
} onnx_builder;

/* Name maps. */
int onnx_map_get(const onnx_name_map *m, const char *key); /* -1 if absent */
kiln_status_t onnx_map_put(onnx_name_map *m, const char *key, int val);
void onnx_map_free(onnx_name_map *m);

void onnx_desc_clear(onnx_node_desc *d);
kiln_status_t onnx_desc_push(onnx_desc_list *l, onnx_node_desc *d); /* moves *d in */
void onnx_desc_list_free(onnx_desc_list *l);

/* Parses a NodeProto into a desc; ref_attr_name attributes are resolved
 * against `scope` (an error when scope is NULL). */
kiln_status_t onnx_parse_node_desc(onnx_loader *L, onnx_slice node, size_t offset, onnx_scope *scope,
                                   onnx_node_desc *out);
/* name (field 1) and ref_attr_name (field 21) of an AttributeProto; owned, NULL if absent. */
kiln_status_t onnx_attr_names(onnx_loader *L, onnx_slice attr, char **name, char **ref);
/* OperatorSetIdProto list (domain "ai.onnx" becomes ""). *out owned, *n_out set even on error. */
kiln_status_t onnx_read_opset_list(onnx_loader *L, const onnx_slice *items, int n, kiln_opset_import **out,
                                   int *n_out);
/* Opset the model (or function `fn`, first) imports for domain; 0 if none. */
int onnx_opset_for(const onnx_loader *L, const onnx_function *fn, const char *domain);
/* "" and "ai.onnx" are the same domain. */
bool onnx_domain_eq(const char *a, const char *b);
/* Value names: a new local value / a name unused in b and its ancestors. */
kiln_status_t onnx_builder_new_value(onnx_builder *b, const char *name, int *out_id);
kiln_status_t onnx_builder_fresh_name(onnx_builder *b, const char *fn, const char *base, char **out);
/* Resolves an attribute reference within a scope: writes the caller's (or
 * the function's default) AttributeProto to *out; *found=false if neither. */
kiln_status_t onnx_scope_lookup_attr(const onnx_scope *s, const char *ref, onnx_slice *out, bool *found);

/* ---- functions (onnx_functions.c) --------------------------------------- */

kiln_status_t onnx_parse_function(onnx_loader *L, onnx_slice fn, onnx_function *out);
void onnx_function_clear(onnx_function *f);
/* Builds L->function_index once L->functions is filled. */
kiln_status_t onnx_index_functions(onnx_loader *L);
const onnx_function *onnx_find_function(const onnx_loader *L, const char *domain, const char *op_type);
/* Appends the nodes of `call` (a call of fn) with the body inlined to out.
 * Names in `call` are of b's namespace; new internal values are interned. */
kiln_status_t onnx_inline_call(onnx_builder *b, const onnx_node_desc *call, const onnx_function *fn,
                               onnx_desc_list *out, int depth);

/* ---- tensors and types (onnx_tensor.c) ------------------------------------ */

/* TensorProto -> new tensor (*out_name: owned name or NULL; may be NULL). */
kiln_status_t onnx_read_tensor(onnx_loader *L, onnx_slice msg, kiln_tensor **out, char **out_name);
/* SparseTensorProto -> dense tensor. */
kiln_status_t onnx_read_sparse_tensor(onnx_loader *L, onnx_slice msg, kiln_tensor **out, char **out_name);
kiln_status_t onnx_read_sequence(onnx_loader *L, onnx_slice msg, kiln_value **out);
kiln_status_t onnx_read_optional(onnx_loader *L, onnx_slice msg, kiln_value **out);

/* TypeProto -> kiln_type. *unsupported is set (and the type left UNKNOWN)
 * for types kiln cannot represent (maps, sparse tensors, nested sequences). */
kiln_status_t onnx_read_type(onnx_loader *L, onnx_slice msg, kiln_type *t, const char **unsupported, int depth);

#endif
