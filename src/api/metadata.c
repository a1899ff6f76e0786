/* The model's own description (include/kiln.h: kiln_model_metadata_get,
 * kiln_model_opset, kiln_model_metadata_prop): borrowed from the imported
 * model, "" where the file has nothing. */
#include "runtime/session.h"

static const char *or_empty(const char *s) { return s ? s : ""; }

kiln_status_t kiln_model_metadata_get(const kiln_model *model, kiln_model_metadata *out_meta) {
  if (!model || !out_meta)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_metadata_get: %s is NULL", model ? "out_meta" : "model");
  const kiln_model_ir *m = model->ir;
  *out_meta = (kiln_model_metadata){
      .producer_name = or_empty(m->producer_name),
      .producer_version = or_empty(m->producer_version),
      .domain = or_empty(m->domain),
      .doc_string = or_empty(m->doc_string),
      .graph_name = or_empty(m->graph ? m->graph->name : NULL),
      .graph_doc_string = or_empty(m->graph_doc_string),
      .model_version = m->model_version,
      .ir_version = m->ir_version,
      .n_opsets = m->n_opsets,
      .n_props = m->n_props,
  };
  return NULL;
}

kiln_status_t kiln_model_opset(const kiln_model *model, int index, const char **out_domain, int64_t *out_version) {
  if (!model || !out_domain || !out_version)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_opset: NULL argument");
  const kiln_model_ir *m = model->ir;
  if (index < 0 || index >= m->n_opsets)
    return kiln_error(KILN_OUT_OF_RANGE, "opset index %d out of range (the model imports %d opsets)", index,
                      m->n_opsets);
  *out_domain = or_empty(m->opsets[index].domain);
  *out_version = m->opsets[index].version;
  return NULL;
}

kiln_status_t kiln_model_metadata_prop(const kiln_model *model, int index, const char **out_key,
                                       const char **out_value) {
  if (!model || !out_key || !out_value)
    return kiln_error(KILN_INVALID_ARGUMENT, "kiln_model_metadata_prop: NULL argument");
  const kiln_model_ir *m = model->ir;
  if (index < 0 || index >= m->n_props)
    return kiln_error(KILN_OUT_OF_RANGE, "metadata_props index %d out of range (the model has %d)", index,
                      m->n_props);
  *out_key = m->props[index].key;
  *out_value = m->props[index].value;
  return NULL;
}
