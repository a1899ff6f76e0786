/* Public model API (include/kiln.h) over the ONNX importer and passes. */
#include "passes/fold_cache.h"
#include "passes/passes.h"
#include "runtime/session.h"

kiln_status_t kiln_model_from_ir(kiln_model_ir *ir, kiln_model **out) {
  *out = NULL;
  kiln_status_t st = kiln_run_pass(ir->graph, "resolve-ops", kiln_pass_resolve_ops);
  if (!st) st = kiln_run_pass(ir->graph, "infer-types", kiln_pass_infer_types);
  kiln_model *m = st ? NULL : calloc(1, sizeof *m);
  if (!st && !m) st = KILN_OOM();
  if (!st) st = kiln_fold_cache_create(&m->fold_cache);
  if (st) {
    free(m);
    kiln_model_ir_free(ir);
    return st;
  }
  m->ir = ir;
  *out = m;
  return NULL;
}

kiln_status_t kiln_model_load_file(const char *path, kiln_model **out_model) {
  if (!path || !out_model) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  kiln_model_ir *ir;
  KILN_TRY(kiln_onnx_load_file(path, &ir)); /* its errors name the file */
  KILN_RETURN_IF_ERROR(kiln_model_from_ir(ir, out_model), "%s", path);
  return NULL;
}

kiln_status_t kiln_model_load_memory(const void *data, size_t size, kiln_model **out_model) {
  if (!data || !out_model) return kiln_error(KILN_INVALID_ARGUMENT, "NULL argument");
  kiln_model_ir *ir;
  KILN_TRY(kiln_onnx_load_buffer(data, size, &ir));
  return kiln_model_from_ir(ir, out_model);
}

void kiln_model_destroy(kiln_model *m) {
  if (!m) return;
  kiln_model_ir_free(m->ir);
  kiln_fold_cache_free(m->fold_cache);
  free(m);
}

/* Graph inputs that carry an initializer are optional overrides, not
 * required inputs: the public listing skips them. */
static int real_input(const kiln_model *m, int index) {
  const kiln_graph *g = m->ir->graph;
  for (int i = 0, k = 0; i < g->n_inputs; i++) {
    if (g->values[g->inputs[i]].constant) continue;
    if (k++ == index) return g->inputs[i];
  }
  return -1;
}

int kiln_model_input_count(const kiln_model *m) {
  int n = 0;
  while (real_input(m, n) >= 0) n++;
  return n;
}

int kiln_model_output_count(const kiln_model *m) { return m->ir->graph->n_outputs; }

static void fill_info(const kiln_value_def *v, kiln_io_info *out) {
  memset(out, 0, sizeof *out);
  out->name = v->name;
  out->dtype = v->type.dtype;
  out->rank = v->type.kind == KILN_TYPE_UNKNOWN ? -1 : v->type.rank;
  for (int i = 0; i < KILN_MAX_RANK; i++) {
    out->dims[i] = v->type.dims[i];
    out->dim_names[i] = v->type.dim_params[i];
  }
  out->is_sequence = v->type.kind == KILN_TYPE_SEQUENCE || v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
  out->is_optional = v->type.kind == KILN_TYPE_OPTIONAL_TENSOR || v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
}

kiln_status_t kiln_model_input_info(const kiln_model *m, int index, kiln_io_info *out) {
  int id = real_input(m, index);
  if (id < 0) return kiln_error(KILN_OUT_OF_RANGE, "input index %d out of range", index);
  fill_info(&m->ir->graph->values[id], out);
  return NULL;
}

kiln_status_t kiln_model_output_info(const kiln_model *m, int index, kiln_io_info *out) {
  const kiln_graph *g = m->ir->graph;
  if (index < 0 || index >= g->n_outputs) return kiln_error(KILN_OUT_OF_RANGE, "output index %d out of range", index);
  fill_info(&g->values[g->outputs[index]], out);
  return NULL;
}
