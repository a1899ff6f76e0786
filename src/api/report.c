/* kiln_session_report_json and kiln_session_describe (include/kiln.h):
 * what `kiln info --device D` prints, as data and as the text itself, from
 * the session's plan (runtime/plan.h). */
#include <stdio.h>

#include "api/api.h"
#include "passes/passes.h"
#include "runtime/plan.h"

static const char *step_kind(const kiln_plan *p, const kiln_plan_step *s) {
  if (s->kind == KILN_STEP_KERNEL) return "kernel";
  if (s->routine) return "routine";
  if (s->dynamic) return "dynamic";
  if (kiln_plan_step_host_only(p, s)) return "host_only";
  if (!kiln_plan_step_on_ref(p, s)) return "control_flow";
  return "ref";
}

static void plan_json(kiln_json *j, const kiln_plan *p, const struct kiln_executable *x) {
  int n_segments = 0;
  for (int f = 0; f < p->n_flushes; f++) n_segments += p->flushes[f].device_end > p->flushes[f].device_begin;
  kiln_json_int(j, "nodes", p->g->n_nodes);
  kiln_json_int(j, "n_kernels", p->n_kernels);
  kiln_json_int(j, "fused_nodes", p->n_fused_nodes);
  kiln_json_int(j, "nodes_on_ref", kiln_plan_nodes_on_ref(p));
  kiln_json_int(j, "device_segments", n_segments);
  kiln_json_array_begin(j, "kernels");
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (kiln_plan_step_on_ref(p, s)) continue;
    char ops[512];
    kiln_plan_step_ops(p, s, ops, sizeof ops);
    kiln_json_object_begin(j, NULL);
    kiln_json_string(j, "name", s->name);
    kiln_json_string(j, "node", s->node->name);
    kiln_json_string(j, "kind", step_kind(p, s));
    kiln_json_string(j, "op", ops);
    kiln_json_array_begin(j, "ops");
    int root = (int)(s->node - p->g->nodes);
    const kiln_fusion *f = &p->fusion;
    if (s->kind == KILN_STEP_KERNEL && f->n_members && root < f->n_nodes && f->n_members[root] > 0)
      for (int k = 0; k < f->n_members[root]; k++)
        kiln_json_string(j, NULL, p->g->nodes[f->members[f->member_start[root] + k]].name);
    else kiln_json_string(j, NULL, s->node->name);
    kiln_json_array_end(j);
    kiln_json_int(j, "flops", s->flops);
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  kiln_json_array_begin(j, "fallbacks");
  for (int i = 0; i < p->n_steps; i++) {
    const kiln_plan_step *s = &p->steps[i];
    if (!kiln_plan_step_on_ref(p, s)) continue;
    kiln_json_object_begin(j, NULL);
    kiln_json_string(j, "node", s->node->name);
    kiln_json_string(j, "op", s->node->op_type);
    kiln_json_string(j, "reason", kiln_plan_step_reason(p, s));
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  kiln_json_object_begin(j, "memory");
  kiln_json_bool(j, "host_memory", p->target.host_memory);
  kiln_json_int(j, "intermediate_bytes", p->intermediate_bytes);
  kiln_json_int(j, "arena_bytes", p->arena_bytes);
  kiln_json_int(j, "weight_bytes_on_device", kiln_plan_weight_bytes(x));
  kiln_json_object_end(j);
}

/* The interpreter: every node on its reference kernel (device ref, or a
 * compiling device that fell back for the whole graph). */
static void interpreted_json(kiln_json *j, const kiln_graph *g, const char *fallback_reason) {
  kiln_json_int(j, "nodes", g->n_nodes);
  kiln_json_int(j, "n_kernels", 0);
  kiln_json_int(j, "fused_nodes", 0);
  kiln_json_int(j, "nodes_on_ref", fallback_reason ? g->n_nodes : 0);
  kiln_json_int(j, "device_segments", 0);
  kiln_json_array_begin(j, "kernels");
  for (int i = 0; !fallback_reason && i < g->n_nodes; i++) {
    kiln_json_object_begin(j, NULL);
    kiln_json_string(j, "name", g->nodes[i].name);
    kiln_json_string(j, "node", g->nodes[i].name);
    kiln_json_string(j, "kind", "interpreted");
    kiln_json_string(j, "op", g->nodes[i].op_type);
    kiln_json_array_begin(j, "ops");
    kiln_json_string(j, NULL, g->nodes[i].name);
    kiln_json_array_end(j);
    kiln_json_int(j, "flops", kiln_node_flops(g, &g->nodes[i]));
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  kiln_json_array_begin(j, "fallbacks");
  for (int i = 0; fallback_reason && i < g->n_nodes; i++) {
    kiln_json_object_begin(j, NULL);
    kiln_json_string(j, "node", g->nodes[i].name);
    kiln_json_string(j, "op", g->nodes[i].op_type);
    kiln_json_string(j, "reason", fallback_reason);
    kiln_json_object_end(j);
  }
  kiln_json_array_end(j);
  kiln_json_object_begin(j, "memory");
  kiln_json_bool(j, "host_memory", true);
  kiln_json_int(j, "intermediate_bytes", 0);
  kiln_json_int(j, "arena_bytes", 0);
  kiln_json_int(j, "weight_bytes_on_device", 0);
  kiln_json_object_end(j);
}

kiln_status_t kiln_session_report_json(const kiln_session *session, char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_report_json: out_json is NULL");
  *out_json = NULL;
  if (!session) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_report_json: session is NULL");
  /* Before the first run: compile for the declared shapes, as `kiln info --device` does. The session
   * changes only as a run would change it (its specialization), hence the cast. */
  kiln_session *s = (kiln_session *)session;
  const kiln_graph *spec = s->specialized;
  if (!spec) KILN_RETURN_IF_ERROR(kiln_session_specialize_declared(s, &spec), "kiln_session_report_json");
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_string(&j, "device", kiln_session_device_name(s));
  kiln_json_string(&j, "mode", s->exec ? "compiled" : s->fallback_reason[0] ? "fallback" : "interpreted");
  kiln_json_string(&j, "fallback_reason", s->fallback_reason[0] ? s->fallback_reason : NULL);
  kiln_json_int(&j, "threads", s->threads);
  kiln_json_string(&j, "precision", s->precision == KILN_PRECISION_FP16 ? "fp16" : "fp32");
  if (s->exec) plan_json(&j, kiln_plan_of(s->exec), s->exec);
  else interpreted_json(&j, spec, s->fallback_reason[0] ? s->fallback_reason : NULL);
  kiln_json_object_end(&j);
  return kiln_json_finish(&j, out_json);
}

kiln_status_t kiln_session_describe(const kiln_session *session, char **out_text) {
  if (!out_text) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_describe: out_text is NULL");
  *out_text = NULL;
  if (!session) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_describe: session is NULL");
  /* As kiln_session_report_json: before the first run, the declared shapes. */
  kiln_session *s = (kiln_session *)session;
  const kiln_graph *spec = s->specialized;
  if (!spec) KILN_RETURN_IF_ERROR(kiln_session_specialize_declared(s, &spec), "kiln_session_describe");
  char *text = NULL;
  size_t len = 0;
  /* The plan's describers (each device adds its own lines) write to a stream. */
  FILE *f = open_memstream(&text, &len);
  if (!f) return KILN_OOM();
  fprintf(f, "device %s:\n", kiln_session_device_name(s));
  if (s->exec) kiln_plan_describe_executable(s->devices[0], s->exec, f);
  else if (s->fallback_reason[0]) fprintf(f, "  every node runs on ref: %s\n", s->fallback_reason);
  else fprintf(f, "  interpreted node by node\n");
  return kiln_api_memstream_close(f, &text, out_text);
}

kiln_status_t kiln_api_memstream_close(FILE *f, char **text, char **out_text) {
  bool failed = ferror(f) != 0;
  if (fclose(f) != 0) failed = true;
  if (failed || !*text) {
    free(*text);
    *text = NULL;
    return KILN_OOM();
  }
  *out_text = *text;
  return NULL;
}
