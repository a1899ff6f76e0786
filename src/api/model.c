/* Public model API (include/kiln.h) over the ONNX importer and passes. */
#include "passes/fold_cache.h"
#include "passes/passes.h"
#include "runtime/session.h"

kiln_status_t kiln_model_from_ir(kiln_model_ir *ir, kiln_model **out) {
  *out = NULL;
  /* The declared output types, before infer-types refines them. */
  kiln_type *declared = calloc((size_t)ir->graph->n_outputs + 1, sizeof *declared);
  if (!declared) {
    kiln_model_ir_free(ir);
    return KILN_OOM();
  }
  for (int i = 0; i < ir->graph->n_outputs; i++) kiln_type_copy(&declared[i], &ir->graph->values[ir->graph->outputs[i]].type);
  kiln_status_t st = kiln_run_pass(ir->graph, "resolve-ops", kiln_pass_resolve_ops);
  if (!st) st = kiln_run_pass(ir->graph, "infer-types", kiln_pass_infer_types);
  kiln_model *m = st ? NULL : calloc(1, sizeof *m);
  if (!st && !m) st = KILN_OOM();
  if (m) {
    m->declared_outputs = declared;
    declared = NULL;
  }
  if (!st) st = kiln_fold_cache_create(&m->fold_cache);
  if (st) {
    if (m) {
      declared = m->declared_outputs;
      free(m);
    }
    for (int i = 0; declared && i < ir->graph->n_outputs; i++) kiln_type_clear(&declared[i]);
    free(declared);
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
  for (int i = 0; m->declared_outputs && i < m->ir->graph->n_outputs; i++) kiln_type_clear(&m->declared_outputs[i]);
  free(m->declared_outputs);
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

static void fill_info(const kiln_value_def *v, const kiln_type *declared, kiln_io_info *out) {
  memset(out, 0, sizeof *out);
  out->name = v->name;
  out->dtype = v->type.dtype;
  /* A shape the file declares is reported as declared (an unknown dim
   * stays unknown where inference found it), else inference's. */
  const kiln_type *shape = declared && declared->kind == v->type.kind && declared->rank >= 0 ? declared : &v->type;
  out->rank = v->type.kind == KILN_TYPE_UNKNOWN ? -1 : shape->rank;
  for (int i = 0; i < KILN_MAX_RANK; i++) {
    out->dims[i] = shape->dims[i];
    out->dim_names[i] = shape->dim_params[i];
  }
  out->is_sequence = v->type.kind == KILN_TYPE_SEQUENCE || v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
  out->is_optional = v->type.kind == KILN_TYPE_OPTIONAL_TENSOR || v->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
}

kiln_status_t kiln_model_input_info(const kiln_model *m, int index, kiln_io_info *out) {
  int id = real_input(m, index);
  if (id < 0) return kiln_error(KILN_OUT_OF_RANGE, "input index %d out of range", index);
  fill_info(&m->ir->graph->values[id], NULL, out);
  return NULL;
}

kiln_status_t kiln_model_output_info(const kiln_model *m, int index, kiln_io_info *out) {
  const kiln_graph *g = m->ir->graph;
  if (index < 0 || index >= g->n_outputs) return kiln_error(KILN_OUT_OF_RANGE, "output index %d out of range", index);
  fill_info(&g->values[g->outputs[index]], m->declared_outputs ? &m->declared_outputs[index] : NULL, out);
  return NULL;
}
