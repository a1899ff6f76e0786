/* onnx_writer.c — kiln_model_ir back to an ONNX ModelProto.
 *
 * Written: ir_version, producer, domain, model_version, doc_string, opset
 * imports, metadata_props, and the graph (with the main graph's doc_string): nodes (inputs, outputs, name, op_type, domain,
 * every attribute kind, subgraphs recursively), initializers as raw_data
 * (string tensors as string_data), graph inputs and outputs with their
 * types, and value_info for the other typed values. Values a subgraph
 * captures from an enclosing graph are written under their outer name, as
 * ONNX scoping expects. Repeated scalars are written unpacked, as proto2
 * declares them.
 */
#include "onnx/onnx_internal.h"

#include <errno.h>
#include <stdio.h>

/* The name a value is referred to by in the file. */
static const char *wname(const kiln_graph *g, int id) {
  const kiln_value_def *v = &g->values[id];
  return v->outer_name ? v->outer_name : v->name;
}

static void write_tensor_type(pw_writer *w, uint32_t field, const kiln_type *t) {
  size_t m = pw_begin(w, field);
  if (t->dtype != KILN_DTYPE_UNDEFINED) pw_put_varint_field(w, 1, (uint64_t)t->dtype);
  if (t->rank >= 0) {
    size_t s = pw_begin(w, 2);
    for (int i = 0; i < t->rank && i < KILN_MAX_RANK; i++) {
      size_t d = pw_begin(w, 1);
      if (t->dims[i] >= 0) pw_put_i64_field(w, 1, t->dims[i]);
      else if (t->dim_params[i]) pw_put_string_field(w, 2, t->dim_params[i]);
      pw_end(w, d);
    }
    pw_end(w, s);
  }
  pw_end(w, m);
}

/* TypeProto body for a tensor or sequence (kind TENSOR or SEQUENCE). */
static void write_type_body(pw_writer *w, const kiln_type *t, bool sequence) {
  if (!sequence) {
    write_tensor_type(w, 1, t);
    return;
  }
  size_t s = pw_begin(w, 4);    /* sequence_type */
  size_t e = pw_begin(w, 1);    /* elem_type: TypeProto */
  write_tensor_type(w, 1, t);
  pw_end(w, e);
  pw_end(w, s);
}

static void write_type(pw_writer *w, uint32_t field, const kiln_type *t) {
  if (t->kind == KILN_TYPE_UNKNOWN) return;
  size_t m = pw_begin(w, field);
  switch (t->kind) {
    case KILN_TYPE_TENSOR: write_type_body(w, t, false); break;
    case KILN_TYPE_SEQUENCE: write_type_body(w, t, true); break;
    case KILN_TYPE_OPTIONAL_TENSOR:
    case KILN_TYPE_OPTIONAL_SEQUENCE: {
      size_t o = pw_begin(w, 9); /* optional_type */
      size_t e = pw_begin(w, 1); /* elem_type */
      write_type_body(w, t, t->kind == KILN_TYPE_OPTIONAL_SEQUENCE);
      pw_end(w, e);
      pw_end(w, o);
      break;
    }
    default: break;
  }
  pw_end(w, m);
}

/* A TypeProto from the ONNX_TYPE_INTS form of a TYPE_PROTO(S) attribute. */
static void write_type_ints(pw_writer *w, uint32_t field, const int64_t *v) {
  kiln_type t;
  memset(&t, 0, sizeof t);
  t.kind = (kiln_type_kind)v[0];
  t.dtype = (kiln_dtype)v[1];
  t.rank = (int)KILN_MIN(v[2], KILN_MAX_RANK);
  for (int i = 0; i < KILN_MAX_RANK; i++) t.dims[i] = v[3 + i];
  if (t.kind == KILN_TYPE_UNKNOWN) { /* still emit the (empty) TypeProto */
    size_t m = pw_begin(w, field);
    pw_end(w, m);
    return;
  }
  write_type(w, field, &t);
}

static void write_value_info(pw_writer *w, uint32_t field, const kiln_graph *g, int id, bool with_type) {
  size_t m = pw_begin(w, field);
  pw_put_string_field(w, 1, wname(g, id));
  if (with_type) write_type(w, 2, &g->values[id].type);
  pw_end(w, m);
}

/* raw_data of n elements of a sub-byte dtype (kiln keeps one per byte):
 * packed as ONNX wants, low bits first, the last byte's spare bits zero. */
static void put_packed_raw(pw_writer *w, uint32_t field, const uint8_t *elems, int64_t n, kiln_dtype dt) {
  int bits = kiln_dtype_bits(dt), per = 8 / bits;
  unsigned mask = (1u << bits) - 1;
  pw_put_tag(w, field, PW_LEN);
  pw_put_varint(w, (uint64_t)(n / per + (n % per != 0)));
  for (int64_t i = 0; i < n; i += per) {
    uint8_t b = 0;
    for (int k = 0; k < per && i + k < n; k++) b |= (uint8_t)((elems[i + k] & mask) << (k * bits));
    pw_put_raw(w, &b, 1);
  }
}

static void write_tensor_fields(pw_writer *w, const kiln_tensor *t, const char *name) {
  for (int i = 0; i < t->rank; i++) pw_put_i64_field(w, 1, t->dims[i]);
  pw_put_varint_field(w, 2, (uint64_t)t->dtype);
  if (name) pw_put_string_field(w, 8, name);
  if (t->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < t->numel; i++) {
      const char *s = ((char *const *)t->data)[i];
      pw_put_bytes_field(w, 6, s ? s : "", s ? strlen(s) : 0);
    }
  } else if (kiln_dtype_bits(t->dtype) < 8) {
    put_packed_raw(w, 9, t->data, t->numel, t->dtype);
  } else {
    pw_put_bytes_field(w, 9, t->data, kiln_tensor_nbytes(t));
  }
}

static void write_tensor(pw_writer *w, uint32_t field, const kiln_tensor *t, const char *name) {
  size_t m = pw_begin(w, field);
  write_tensor_fields(w, t, name);
  pw_end(w, m);
}

/* A dense tensor as SparseTensorProto: its non-zero elements, linear
 * int64 indices. */
static kiln_status_t write_sparse(pw_writer *w, uint32_t field, const kiln_tensor *t) {
  if (t->dtype == KILN_DTYPE_STRING) return kiln_error(KILN_UNSUPPORTED, "sparse string tensors cannot be written");
  if (kiln_dtype_bits(t->dtype) < 8)
    return kiln_error(KILN_UNSUPPORTED, "sparse %s tensors cannot be written", kiln_dtype_name(t->dtype));
  size_t es = kiln_dtype_size(t->dtype);
  static const uint8_t zero[16];
  int64_t nnz = 0;
  for (int64_t i = 0; i < t->numel; i++) nnz += memcmp((const uint8_t *)t->data + i * (int64_t)es, zero, es) != 0;
  size_t m = pw_begin(w, field);
  size_t v = pw_begin(w, 1); /* values */
  pw_put_i64_field(w, 1, nnz);
  pw_put_varint_field(w, 2, (uint64_t)t->dtype);
  pw_put_tag(w, 9, PW_LEN);
  pw_put_varint(w, (uint64_t)nnz * es);
  for (int64_t i = 0; i < t->numel; i++) {
    const uint8_t *e = (const uint8_t *)t->data + i * (int64_t)es;
    if (memcmp(e, zero, es)) pw_put_raw(w, e, es);
  }
  pw_end(w, v);
  size_t x = pw_begin(w, 2); /* indices */
  pw_put_i64_field(w, 1, nnz);
  pw_put_varint_field(w, 2, KILN_DTYPE_I64);
  pw_put_tag(w, 9, PW_LEN);
  pw_put_varint(w, (uint64_t)nnz * 8);
  for (int64_t i = 0; i < t->numel; i++)
    if (memcmp((const uint8_t *)t->data + i * (int64_t)es, zero, es)) pw_put_raw(w, &i, 8);
  pw_end(w, x);
  for (int i = 0; i < t->rank; i++) pw_put_i64_field(w, 3, t->dims[i]);
  pw_end(w, m);
  return NULL;
}

static kiln_status_t write_graph(pw_writer *w, uint32_t field, const kiln_graph *g, int depth, const char *doc);

static kiln_status_t write_attr(pw_writer *w, const kiln_attr *a, int depth) {
  size_t m = pw_begin(w, 5);
  pw_put_string_field(w, 1, a->name);
  pw_put_varint_field(w, 20, (uint64_t)a->type);
  switch (a->type) {
    case KILN_ATTR_FLOAT: pw_put_float_field(w, 2, a->f); break;
    case KILN_ATTR_INT: pw_put_i64_field(w, 3, a->i); break;
    case KILN_ATTR_STRING: pw_put_bytes_field(w, 4, a->s ? a->s : "", a->s ? a->s_len : 0); break;
    case KILN_ATTR_TENSOR:
      if (!a->t) return kiln_error(KILN_INVALID_ARGUMENT, "attribute '%s' has no tensor", a->name);
      write_tensor(w, 5, a->t, NULL);
      break;
    case KILN_ATTR_GRAPH:
      if (!a->g) return kiln_error(KILN_INVALID_ARGUMENT, "attribute '%s' has no graph", a->name);
      KILN_TRY(write_graph(w, 6, a->g, depth + 1, NULL));
      break;
    case KILN_ATTR_SPARSE_TENSOR:
      if (!a->t) return kiln_error(KILN_INVALID_ARGUMENT, "attribute '%s' has no tensor", a->name);
      KILN_TRY(write_sparse(w, 22, a->t));
      break;
    case KILN_ATTR_TYPE_PROTO:
      if (a->s && a->s_len) pw_put_bytes_field(w, 14, a->s, a->s_len);
      else if (a->ints && a->n >= 1) write_type_ints(w, 14, a->ints);
      else return kiln_error(KILN_INVALID_ARGUMENT, "attribute '%s' has no type", a->name);
      break;
    case KILN_ATTR_FLOATS:
      for (int i = 0; i < a->n; i++) pw_put_float_field(w, 7, a->floats[i]);
      break;
    case KILN_ATTR_INTS:
      for (int i = 0; i < a->n; i++) pw_put_i64_field(w, 8, a->ints[i]);
      break;
    case KILN_ATTR_STRINGS:
      for (int i = 0; i < a->n; i++) pw_put_string_field(w, 9, a->strings[i] ? a->strings[i] : "");
      break;
    case KILN_ATTR_TENSORS:
      for (int i = 0; i < a->n; i++) write_tensor(w, 10, a->tensors[i], NULL);
      break;
    case KILN_ATTR_GRAPHS:
      for (int i = 0; i < a->n; i++) KILN_TRY(write_graph(w, 11, a->graphs[i], depth + 1, NULL));
      break;
    case KILN_ATTR_SPARSE_TENSORS:
      for (int i = 0; i < a->n; i++) KILN_TRY(write_sparse(w, 23, a->tensors[i]));
      break;
    case KILN_ATTR_TYPE_PROTOS:
      for (int i = 0; i < a->n; i++) write_type_ints(w, 15, a->ints + (size_t)i * ONNX_TYPE_INTS);
      break;
    default: return kiln_error(KILN_INVALID_ARGUMENT, "attribute '%s' has unknown type %d", a->name, (int)a->type);
  }
  pw_end(w, m);
  return NULL;
}

static kiln_status_t write_node(pw_writer *w, const kiln_graph *g, const kiln_node *n, int depth) {
  size_t m = pw_begin(w, 1);
  for (int i = 0; i < n->n_inputs; i++) pw_put_string_field(w, 1, n->inputs[i] >= 0 ? wname(g, n->inputs[i]) : "");
  for (int i = 0; i < n->n_outputs; i++)
    pw_put_string_field(w, 2, n->outputs[i] >= 0 ? wname(g, n->outputs[i]) : "");
  if (n->name && n->name[0]) pw_put_string_field(w, 3, n->name);
  pw_put_string_field(w, 4, n->op_type);
  if (n->domain && n->domain[0]) pw_put_string_field(w, 7, n->domain);
  for (int i = 0; i < n->n_attrs; i++)
    KILN_RETURN_IF_ERROR(write_attr(w, &n->attrs[i], depth), "node '%s' (%s)", n->name, n->op_type);
  pw_end(w, m);
  return NULL;
}

static kiln_status_t write_graph(pw_writer *w, uint32_t field, const kiln_graph *g, int depth, const char *doc) {
  if (depth > ONNX_MAX_DEPTH) return kiln_error(KILN_INVALID_ARGUMENT, "subgraphs nested deeper than %d", ONNX_MAX_DEPTH);
  size_t m = pw_begin(w, field);
  for (int i = 0; i < g->n_nodes; i++) KILN_TRY(write_node(w, g, &g->nodes[i], depth));
  pw_put_string_field(w, 2, g->name && g->name[0] ? g->name : "graph");
  pw_put_string_field(w, 10, doc);
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].constant && !g->values[i].outer_name) write_tensor(w, 5, g->values[i].constant, g->values[i].name);
  for (int i = 0; i < g->n_inputs; i++) write_value_info(w, 11, g, g->inputs[i], true);
  for (int i = 0; i < g->n_outputs; i++) write_value_info(w, 12, g, g->outputs[i], true);
  for (int i = 0; i < g->n_values; i++) {
    const kiln_value_def *v = &g->values[i];
    if (v->is_graph_input || v->is_graph_output || v->constant || v->outer_name) continue;
    if (v->type.kind == KILN_TYPE_UNKNOWN) continue;
    write_value_info(w, 13, g, i, true);
  }
  pw_end(w, m);
  return NULL;
}

/* ONNX before IR 4 requires every initializer to be a graph input. */
static bool has_non_input_constant(const kiln_graph *g) {
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].constant && !g->values[i].is_graph_input && !g->values[i].outer_name) return true;
  return false;
}

kiln_status_t kiln_onnx_serialize(const kiln_model_ir *m, uint8_t **out_data, size_t *out_size) {
  if (!m || !m->graph || !out_data || !out_size) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  *out_data = NULL;
  *out_size = 0;
  pw_writer w = {0};
  int64_t ir = m->ir_version > 0 ? m->ir_version : 8;
  if (ir < 4 && has_non_input_constant(m->graph)) ir = 4;
  pw_put_i64_field(&w, 1, ir);
  pw_put_string_field(&w, 2, m->producer_name ? m->producer_name : "kiln");
  pw_put_string_field(&w, 3, m->producer_version ? m->producer_version : (m->producer_name ? NULL : KILN_VERSION_STRING));
  pw_put_string_field(&w, 4, m->domain);
  if (m->model_version) pw_put_i64_field(&w, 5, m->model_version);
  pw_put_string_field(&w, 6, m->doc_string);
  kiln_status_t st = write_graph(&w, 7, m->graph, 0, m->graph_doc_string);
  for (int i = 0; i < m->n_opsets && !st; i++) {
    size_t o = pw_begin(&w, 8);
    pw_put_string_field(&w, 1, m->opsets[i].domain ? m->opsets[i].domain : "");
    pw_put_i64_field(&w, 2, m->opsets[i].version);
    pw_end(&w, o);
  }
  for (int i = 0; i < m->n_props && !st; i++) {
    size_t o = pw_begin(&w, 14);
    pw_put_string_field(&w, 1, m->props[i].key);
    pw_put_string_field(&w, 2, m->props[i].value);
    pw_end(&w, o);
  }
  if (!st && w.oom) st = kiln_error(KILN_OUT_OF_MEMORY, "out of memory serializing the model");
  if (st) {
    pw_writer_free(&w);
    return st;
  }
  *out_data = w.data;
  *out_size = w.len;
  return NULL;
}

kiln_status_t kiln_onnx_save_file(const kiln_model_ir *m, const char *path) {
  if (!path) return kiln_error(KILN_INVALID_ARGUMENT, "NULL path");
  uint8_t *data;
  size_t size;
  KILN_TRY(kiln_onnx_serialize(m, &data, &size));
  FILE *f = fopen(path, "wb");
  if (!f) {
    int e = errno;
    free(data);
    return kiln_error(KILN_IO_ERROR, "cannot create '%s': %s", path, strerror(e));
  }
  size_t n = fwrite(data, 1, size, f);
  int e = errno;
  free(data);
  if (fclose(f) != 0 || n != size) return kiln_error(KILN_IO_ERROR, "cannot write '%s': %s", path, strerror(e));
  return NULL;
}

kiln_status_t kiln_onnx_serialize_tensor(const kiln_tensor *t, const char *name, uint8_t **out_data,
                                         size_t *out_size) {
  if (!t || !out_data || !out_size) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  pw_writer w = {0};
  write_tensor_fields(&w, t, name);
  if (w.oom) {
    pw_writer_free(&w);
    return kiln_error(KILN_OUT_OF_MEMORY, "out of memory serializing a tensor");
  }
  *out_data = w.data;
  *out_size = w.len;
  if (!w.data) { /* an empty message: return a valid 1-byte allocation */
    *out_data = malloc(1);
    if (!*out_data) return KILN_OOM();
  }
  return NULL;
}
