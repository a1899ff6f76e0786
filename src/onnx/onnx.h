/* onnx.h — reading and writing the ONNX protobuf format.
 *
 * The reader decodes the protobuf wire format directly over a read-only
 * memory map of the file (no protobuf library, no copy of the file):
 * every length, tag and index is bounds-checked against the buffer, and a
 * malformed file is a KILN_INVALID_MODEL error that says where (message
 * path and byte offset), never a crash. Tensor bytes (raw_data) stay in
 * the map when they are suitably aligned for their dtype; otherwise they
 * are copied once and the map's pages behind them are released
 * (madvise DONTNEED), so resident memory stays close to one copy of the
 * weights.
 *
 * Model-local functions are inlined at import. Subgraph attributes (If,
 * Loop, Scan bodies) become kiln_graphs whose `parent` is the enclosing
 * graph; names they read from enclosing scopes become values with
 * outer_name set.
 */
#ifndef KILN_ONNX_ONNX_H
#define KILN_ONNX_ONNX_H

#include "ir/graph.h"

typedef struct kiln_opset_import {
  char *domain;     /* owned; "" for ai.onnx */
  int64_t version;
} kiln_opset_import;

typedef struct kiln_metadata_prop {
  char *key, *value; /* owned; never NULL */
} kiln_metadata_prop;

/* The in-memory model: the internal form of the public kiln_model. */
typedef struct kiln_model_ir {
  int64_t ir_version;
  char *producer_name, *producer_version, *domain, *doc_string; /* owned, may be NULL */
  int64_t model_version;
  int n_opsets;
  kiln_opset_import *opsets;
  int n_props;
  kiln_metadata_prop *props;  /* metadata_props in file order; owned */
  char *graph_doc_string;     /* the main graph's doc_string; owned, may be NULL */
  kiln_graph *graph;          /* owned */
  kiln_keepalive *file;       /* the mapping behind borrowed tensors (one ref), or NULL */
  char *path;                 /* owned; file the model came from, or NULL */
} kiln_model_ir;

/* Loads a model file. External data is read relative to the file's folder
 * (paths that escape that folder are rejected). */
kiln_status_t kiln_onnx_load_file(const char *path, kiln_model_ir **out);
/* Loads from a buffer (copied internally). */
kiln_status_t kiln_onnx_load_buffer(const void *data, size_t size, kiln_model_ir **out);
void kiln_model_ir_free(kiln_model_ir *m);
/* Opset version the model imports for `domain` ("" = ai.onnx), or -1. */
int64_t kiln_model_ir_opset(const kiln_model_ir *m, const char *domain);

/* Standalone messages, as the ONNX test data stores them (input_0.pb ...):
 * TensorProto, SequenceProto, OptionalProto. Each decodes into an owned
 * kiln_value. base_dir resolves external data (may be NULL). */
kiln_status_t kiln_onnx_parse_tensor(const void *data, size_t size, const char *base_dir, kiln_tensor **out);
kiln_status_t kiln_onnx_parse_sequence(const void *data, size_t size, const char *base_dir, kiln_value **out);
kiln_status_t kiln_onnx_parse_optional(const void *data, size_t size, const char *base_dir, kiln_value **out);

/* Writes a model (graph, initializers inline as raw_data, subgraphs,
 * opsets) to a protobuf buffer (malloc'd, caller frees) or a file. */
kiln_status_t kiln_onnx_serialize(const kiln_model_ir *m, uint8_t **out_data, size_t *out_size);
kiln_status_t kiln_onnx_save_file(const kiln_model_ir *m, const char *path);
/* Serializes one tensor as a TensorProto (for tests and tools). */
kiln_status_t kiln_onnx_serialize_tensor(const kiln_tensor *t, const char *name, uint8_t **out_data,
                                         size_t *out_size);

#endif
