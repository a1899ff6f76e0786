#include <stdio.h>

#include "api/api.h"
#include "cli/cli.h"

static void print_io(const char *what, const kiln_graph *g, int id) {
  char t[256];
  const kiln_value_def *v = &g->values[id];
  kiln_type_str(&v->type, t, sizeof t);
  printf("  %-7s %-24s %s", what, v->name, t);
  bool sym = false;
  for (int i = 0; i < v->type.rank && i < KILN_MAX_RANK; i++) sym |= v->type.dim_params[i] != NULL;
  if (sym) {
    printf("  (");
    for (int i = 0; i < v->type.rank; i++) printf("%s%s", i ? "," : "", v->type.dim_params[i] ? v->type.dim_params[i] : "_");
    printf(")");
  }
  printf("\n");
}

/* --device D --json: kiln_session_report_json's object for the declared input shapes. */
static kiln_status_t report_json(const kiln_model *model, const char *device) {
  kiln_session_options so = kiln_session_options_default();
  so.device = device;
  kiln_session *s;
  KILN_TRY(kiln_session_create(model, &so, &s));
  char *text = NULL;
  kiln_status_t st = kiln_session_report_json(s, &text);
  if (!st) puts(text);
  kiln_string_free(text);
  kiln_session_destroy(s);
  return st;
}

/* Compiles the model for `device` with its declared input shapes (symbolic
 * dims taken as 1) and prints what the device made of it (kiln_session_describe). */
static kiln_status_t describe_on_device(const kiln_model *model, const char *device) {
  kiln_session_options so = kiln_session_options_default();
  so.device = device;
  kiln_session *s;
  KILN_TRY(kiln_session_create(model, &so, &s));
  char *text = NULL;
  kiln_status_t st = kiln_session_describe(s, &text);
  if (!st) fputs(text, stdout);
  kiln_string_free(text);
  kiln_session_destroy(s);
  return st;
}

int kiln_cmd_info(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    puts("usage: kiln info MODEL.onnx [--dot] [--device D] [--json]\n\n"
         "Prints the model's opsets, inputs and outputs, node and parameter counts, op\n"
         "histogram, estimated FLOPs and the ops no device supports. --dot prints the\n"
         "graph in Graphviz DOT instead (kiln info m.onnx --dot | dot -Tsvg > m.svg).\n"
         "--json prints the same as the JSON object kiln_model_info_json returns.\n"
         "--device D also compiles the model for D and shows the fused kernels,\n"
         "the nodes that fell back to ref and why, and the planned memory; with\n"
         "--json, only that, as the JSON object kiln_session_report_json returns\n"
         "(the schemas are in include/kiln.h).");
    return 0;
  }
  const char *path = NULL, *device = NULL;
  bool dot = false, json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dot")) dot = true;
    else if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (argv[i][0] == '-') return kiln_cli_failf("unknown option '%s' (see `kiln info --help`)", argv[i]);
    else if (!path) path = argv[i];
    else return kiln_cli_failf("unexpected argument '%s'", argv[i]);
  }
  if (!path) return kiln_cli_failf("info needs a model file (see `kiln info --help`)");
  if (json && dot) return kiln_cli_failf("--json and --dot: one at a time");
  kiln_model *model;
  kiln_status_t st = kiln_model_load_file(path, &model);
  if (st) return kiln_cli_fail(st);
  if (json || dot) {
    char *text = NULL;
    if (json && device) st = report_json(model, device);
    else if (json) st = kiln_model_info_json(model, &text);
    else st = kiln_model_dot(model, &text);
    if (!st && text) printf("%s%s", text, json ? "\n" : "");
    kiln_string_free(text);
    kiln_model_destroy(model);
    return st ? kiln_cli_fail(st) : 0;
  }
  const kiln_graph *g = model->ir->graph;
  /* The header from what kiln_model_metadata_get gives a binding. */
  kiln_model_metadata md;
  st = kiln_model_metadata_get(model, &md);
  if (st) {
    kiln_model_destroy(model);
    return kiln_cli_fail(st);
  }
  printf("model: %s\n", path);
  printf("  ir_version %lld, producer %s %s", (long long)md.ir_version, md.producer_name[0] ? md.producer_name : "?",
         md.producer_version);
  if (md.domain[0] || md.model_version) printf(", domain '%s' version %lld", md.domain, (long long)md.model_version);
  printf("\n");
  for (int i = 0; i < md.n_props; i++) {
    const char *key, *value;
    if (!kiln_model_metadata_prop(model, i, &key, &value)) printf("  %s: %s\n", key, value);
  }
  printf("opsets:");
  for (int i = 0; i < md.n_opsets; i++) {
    const char *domain;
    int64_t version;
    if (!kiln_model_opset(model, i, &domain, &version))
      printf(" %s=%lld", domain[0] ? domain : "ai.onnx", (long long)version);
  }
  printf("\ninputs:\n");
  for (int i = 0; i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].constant) print_io("input", g, g->inputs[i]);
  printf("outputs:\n");
  for (int i = 0; i < g->n_outputs; i++) print_io("output", g, g->outputs[i]);
  /* The counts, histogram, FLOPs and unsupported ops are kiln_model_info_json's (api/model_info.c). */
  kiln_model_summary sum;
  st = kiln_model_summarize(model, &sum);
  if (st) {
    kiln_model_destroy(model);
    return kiln_cli_fail(st);
  }
  printf("nodes: %d (%d in the main graph)\n", sum.n_nodes, sum.n_main_nodes);
  printf("parameters: %lld in %d initializers (%.2f MB)\n", (long long)sum.params, sum.n_initializers,
         (double)sum.param_bytes / 1e6);
  printf("estimated FLOPs: %.4g (%s)\n", (double)sum.flops,
         sum.flops ? "for the declared input shapes" : "unknown shapes");
  printf("op histogram:\n");
  for (int i = 0; i < sum.n_hist; i++) printf("  %-28s %d\n", sum.hist[i].op, sum.hist[i].count);
  printf("unsupported ops: ");
  if (!sum.n_unsupported) printf("none\n");
  for (int i = 0; i < sum.n_unsupported; i++) printf("%s%s", sum.unsupported[i], i + 1 < sum.n_unsupported ? ", " : "\n");
  kiln_model_summary_free(&sum);
  if (device) {
    st = describe_on_device(model, device);
    if (st) {
      kiln_model_destroy(model);
      return kiln_cli_fail(st);
    }
  }
  kiln_model_destroy(model);
  return 0;
}
