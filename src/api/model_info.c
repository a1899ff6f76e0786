/* What `kiln info MODEL` prints, for the CLI and as data (include/kiln.h:
 * kiln_model_info_json, kiln_model_dot): one summary of the loaded model,
 * which the CLI prints as text and this file writes as JSON, so the two
 * cannot tell different stories. */
#include <stdio.h>

#include "api/api.h"
#include "ir/print.h"
#include "passes/passes.h"

/* Counts the nodes of g and of every graph its attributes hold (If, Loop,
 * Scan bodies), adding to the histogram and the FLOPs. */
static kiln_status_t count_ops(const kiln_graph *g, kiln_model_summary *s, int *cap) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    s->n_nodes++;
    s->flops += kiln_node_flops(g, n);
    int k = 0;
    while (k < s->n_hist && strcmp(s->hist[k].op, n->op_type)) k++;
    if (k == s->n_hist) {
      if (s->n_hist == *cap) {
        int grown = *cap ? *cap * 2 : 32;
        kiln_op_count *h = realloc(s->hist, (size_t)grown * sizeof *h);
        if (!h) return KILN_OOM();
        s->hist = h;
        *cap = grown;
      }
      s->hist[s->n_hist++] = (kiln_op_count){n->op_type, 0};
    }
    s->hist[k].count++;
    for (int a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) KILN_TRY(count_ops(at->g, s, cap));
      for (int j = 0; at->graphs && j < at->n; j++) KILN_TRY(count_ops(at->graphs[j], s, cap));
    }
  }
  return NULL;
}

static int cmp_count(const void *a, const void *b) {
  const kiln_op_count *x = a, *y = b;
  return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

kiln_status_t kiln_model_summarize(const kiln_model *model, kiln_model_summary *out) {
  memset(out, 0, sizeof *out);
  const kiln_graph *g = model->ir->graph;
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].constant) {
      out->n_initializers++;
      out->params += g->values[i].constant->numel;
      out->param_bytes += (int64_t)kiln_tensor_nbytes(g->values[i].constant);
    }
  out->n_main_nodes = g->n_nodes;
  int cap = 0;
  kiln_status_t st = count_ops(g, out, &cap);
  if (!st) qsort(out->hist, (size_t)out->n_hist, sizeof *out->hist, cmp_count);
  kiln_ptr_vec unsup = {0};
  if (!st) st = kiln_graph_unsupported_ops(g, &unsup);
  /* The vector's strings become the summary's (freed with it). */
  out->unsupported = (char **)unsup.items;
  out->n_unsupported = unsup.count;
  if (st) kiln_model_summary_free(out);
  return st;
}

void kiln_model_summary_free(kiln_model_summary *s) {
  for (int i = 0; i < s->n_unsupported; i++) free(s->unsupported[i]);
  free(s->unsupported);
  free(s->hist);
  memset(s, 0, sizeof *s);
}

/* ---- kiln_model_info_json ---- */

static void io_json(kiln_json *j, const kiln_value_def *v) {
  char t[256];
  const kiln_type *ty = &v->type;
  kiln_json_object_begin(j, NULL);
  kiln_json_string(j, "name", v->name);
  kiln_json_string(j, "type", kiln_type_str(ty, t, sizeof t));
  kiln_json_string(j, "dtype", ty->dtype ? kiln_dtype_name(ty->dtype) : "?");
  if (ty->rank < 0) {
    kiln_json_null(j, "shape");
  } else {
    kiln_json_array_begin(j, "shape");
    for (int d = 0; d < ty->rank && d < KILN_MAX_RANK; d++) {
      if (ty->dim_params[d]) kiln_json_string(j, NULL, ty->dim_params[d]);
      else if (ty->dims[d] >= 0) kiln_json_int(j, NULL, ty->dims[d]);
      else kiln_json_null(j, NULL);
    }
    kiln_json_array_end(j);
  }
  kiln_json_object_end(j);
}

kiln_status_t kiln_model_info_json(const kiln_model *model, char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_info_json: out_json is NULL");
  *out_json = NULL;
  if (!model) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_info_json: model is NULL");
  kiln_model_metadata md;
  KILN_TRY(kiln_model_metadata_get(model, &md));
  kiln_model_summary s;
  KILN_RETURN_IF_ERROR(kiln_model_summarize(model, &s), "kiln_model_info_json");
  const kiln_model_ir *m = model->ir;
  const kiln_graph *g = m->graph;
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_int(&j, "ir_version", md.ir_version);
  kiln_json_string(&j, "producer_name", md.producer_name);
  kiln_json_string(&j, "producer_version", md.producer_version);
  kiln_json_string(&j, "domain", md.domain);
  kiln_json_int(&j, "model_version", md.model_version);
  kiln_json_array_begin(&j, "metadata_props");
  for (int i = 0; i < m->n_props; i++) {
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "key", m->props[i].key);
    kiln_json_string(&j, "value", m->props[i].value);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_array_begin(&j, "opsets");
  for (int i = 0; i < m->n_opsets; i++) {
    const char *d = m->opsets[i].domain;
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "domain", d && d[0] ? d : "ai.onnx");
    kiln_json_int(&j, "version", m->opsets[i].version);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_array_begin(&j, "inputs");
  for (int i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].constant) io_json(&j, &g->values[g->inputs[i]]);
  kiln_json_array_end(&j);
  kiln_json_array_begin(&j, "outputs");
  for (int i = 0; i < g->n_outputs; i++) io_json(&j, &g->values[g->outputs[i]]);
  kiln_json_array_end(&j);
  kiln_json_int(&j, "nodes", s.n_nodes);
  kiln_json_int(&j, "main_graph_nodes", s.n_main_nodes);
  kiln_json_int(&j, "parameters", s.params);
  kiln_json_int(&j, "initializers", s.n_initializers);
  kiln_json_int(&j, "parameter_bytes", s.param_bytes);
  kiln_json_int(&j, "flops", s.flops);
  kiln_json_array_begin(&j, "op_histogram");
  for (int i = 0; i < s.n_hist; i++) {
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "op", s.hist[i].op);
    kiln_json_int(&j, "count", s.hist[i].count);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_array_begin(&j, "unsupported_ops");
  for (int i = 0; i < s.n_unsupported; i++) kiln_json_string(&j, NULL, s.unsupported[i]);
  kiln_json_array_end(&j);
  kiln_json_object_end(&j);
  kiln_model_summary_free(&s);
  return kiln_json_finish(&j, out_json);
}

/* ---- kiln_model_dot ---- */

kiln_status_t kiln_model_dot(const kiln_model *model, char **out_text) {
  if (!out_text) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_dot: out_text is NULL");
  *out_text = NULL;
  if (!model) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_dot: model is NULL");
  char *text = NULL;
  size_t len = 0;
  /* The printer writes to a stream; a memory stream gives its text whole. */
  FILE *f = open_memstream(&text, &len);
  if (!f) return KILN_OOM();
  kiln_graph_print_dot(model->ir->graph, f);
  return kiln_api_memstream_close(f, &text, out_text);
}
