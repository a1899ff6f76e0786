#include <stdio.h>

#include "cli/cli.h"
#include "ir/print.h"
#include "passes/passes.h"
#include "runtime/plan.h"

typedef struct op_count {
  const char *op;
  int count;
} op_count;

static void count_ops(const kiln_graph *g, op_count *hist, int *n_hist, int *n_nodes, int64_t *flops) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    (*n_nodes)++;
    *flops += kiln_node_flops(g, n);
    int k = 0;
    while (k < *n_hist && strcmp(hist[k].op, n->op_type)) k++;
    if (k == *n_hist && *n_hist < 512) hist[(*n_hist)++] = (op_count){n->op_type, 0};
    if (k < 512) hist[k].count++;
    for (int a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) count_ops(at->g, hist, n_hist, n_nodes, flops);
      for (int j = 0; at->graphs && j < at->n; j++) count_ops(at->graphs[j], hist, n_hist, n_nodes, flops);
    }
  }
}

static int cmp_count(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

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
 * dims taken as 1) and prints what the device made of it. */
static kiln_status_t describe_on_device(const kiln_model *model, const char *device) {
  kiln_session_options so = kiln_session_options_default();
  so.device = device;
  kiln_session *s;
  KILN_TRY(kiln_session_create(model, &so, &s));
  const kiln_graph *spec = NULL;
  kiln_status_t st = kiln_session_specialize_declared(s, &spec);
  if (!st) {
    printf("device %s:\n", device);
    if (s->exec) kiln_plan_describe_executable(s->devices[0], s->exec, stdout);
    else if (s->fallback_reason[0]) printf("  every node runs on ref: %s\n", s->fallback_reason);
    else printf("  interpreted node by node\n");
  }
  kiln_session_destroy(s);
  return st;
}

int kiln_cmd_info(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    puts("usage: kiln info MODEL.onnx [--dot] [--device D [--json]]\n\n"
         "Prints the model's opsets, inputs and outputs, node and parameter counts, op\n"
         "histogram, estimated FLOPs and the ops no device supports. --dot prints the\n"
         "graph in Graphviz DOT instead (kiln info m.onnx --dot | dot -Tsvg > m.svg).\n"
         "--device D also compiles the model for D and shows the fused kernels,\n"
         "the nodes that fell back to ref and why, and the planned memory; with\n"
         "--json, only that, as the JSON object kiln_session_report_json returns\n"
         "(the schema is in include/kiln.h).");
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
  if (json && (!device || dot)) return kiln_cli_failf("--json goes with --device D (and not with --dot)");
  kiln_model *model;
  kiln_status_t st = kiln_model_load_file(path, &model);
  if (st) return kiln_cli_fail(st);
  if (json) {
    st = report_json(model, device);
    kiln_model_destroy(model);
    return st ? kiln_cli_fail(st) : 0;
  }
  const kiln_model_ir *m = model->ir;
  const kiln_graph *g = m->graph;
  if (dot) {
    kiln_graph_print_dot(g, stdout);
    kiln_model_destroy(model);
    return 0;
  }
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
  int64_t params = 0, param_bytes = 0;
  int n_init = 0;
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].constant) {
      n_init++;
      params += g->values[i].constant->numel;
      param_bytes += (int64_t)kiln_tensor_nbytes(g->values[i].constant);
    }
  op_count hist[512];
  int n_hist = 0, n_nodes = 0;
  int64_t flops = 0;
  count_ops(g, hist, &n_hist, &n_nodes, &flops);
  qsort(hist, (size_t)n_hist, sizeof *hist, cmp_count);
  printf("nodes: %d (%d in the main graph)\n", n_nodes, g->n_nodes);
  printf("parameters: %lld in %d initializers (%.2f MB)\n", (long long)params, n_init, (double)param_bytes / 1e6);
  printf("estimated FLOPs: %.4g (%s)\n", (double)flops, flops ? "for the declared input shapes" : "unknown shapes");
  printf("op histogram:\n");
  for (int i = 0; i < n_hist; i++) printf("  %-28s %d\n", hist[i].op, hist[i].count);
  kiln_ptr_vec unsup = {0};
  st = kiln_graph_unsupported_ops(g, &unsup);
  if (st) {
    kiln_model_destroy(model);
    return kiln_cli_fail(st);
  }
  printf("unsupported ops: ");
  if (!unsup.count) printf("none\n");
  for (int i = 0; i < unsup.count; i++) {
    printf("%s%s", (char *)unsup.items[i], i + 1 < unsup.count ? ", " : "\n");
    free(unsup.items[i]);
  }
  kiln_ptr_vec_free(&unsup);
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
