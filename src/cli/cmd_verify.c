/* `kiln verify`: runs a model on a device and on ref with the same inputs,
 * compares every value both produce (matched by name) and reports the first
 * node, in graph order, whose output diverges beyond tolerance. The runs
 * and comparisons are kiln_verify_run's (api/verify.c, which
 * kiln_verify_json reports from too); this file parses and prints. */
#include "cli/cmd_bench.h"

#include "api/api.h"

#include <math.h>
#include <stdio.h>

static const char *verify_help =
    "usage: kiln verify MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--dim NAME=VALUE]...\n"
    "                   [--seed S] [--rtol R] [--atol A] [--max-report N] [--json]\n"
    "\n"
    "Runs the model on device D (default: the default device) and on the reference\n"
    "device with the same inputs (random ones where not given: floats normal(0,1),\n"
    "ints in [0,3], symbolic dims from --dim or 1, seed S), captures every node\n"
    "output on both sides and compares the values both produced (matched by name;\n"
    "a device that fuses nodes produces fewer). An element matches when\n"
    "|device - ref| <= atol + rtol * |ref| (defaults rtol 1e-3, atol 1e-4; f16 values\n"
    "at least 1e-2 / 1e-3 and bf16 4e-2 / 1e-2: a few of their ulps); integer,\n"
    "bool and string values must be equal, NaN matches NaN. The max rel error is\n"
    "taken over the elements whose ref value is not 0.\n"
    "\n"
    "Reports the first node in graph order whose output diverges: its op, name,\n"
    "input and output shapes, max abs/rel error and the worst element, then up to\n"
    "N (--max-report, default 5) further diverging values and a summary line.\n"
    "Exit status 0 if every compared value matches, 1 otherwise.\n"
    "\n"
    "--json  prints the JSON object kiln_verify_json returns instead (the schema is\n"
    "        in include/kiln.h), with these inputs, tolerances and --max-report.\n";

static void print_index(const kiln_verify_cmp *r) {
  int64_t idx[KILN_MAX_RANK];
  kiln_verify_worst_index(r, idx);
  if (r->worst_item >= 0) printf("item %d ", r->worst_item);
  printf("[");
  for (int d = 0; d < r->worst_rank; d++) printf("%s%lld", d ? "," : "", (long long)idx[d]);
  printf("]");
}

static void print_error_figures(const kiln_verify_cmp *r, const char *indent) {
  if (r->why[0]) {
    printf("%s%s\n", indent, r->why);
    return;
  }
  printf("%s%lld of %lld elements beyond tolerance; max abs err %.6g, max rel err %.6g\n", indent,
         (long long)r->n_bad, (long long)r->n_elems, r->max_abs, r->max_rel);
  if (r->worst >= 0) {
    printf("%sworst element ", indent);
    print_index(r);
    if (r->worst_is_string) printf(": device \"%s\", ref \"%s\"\n", r->worst_dev_str, r->worst_ref_str);
    else if (r->worst_is_float) printf(": device %.9g, ref %.9g\n", r->worst_dev, r->worst_ref);
    else printf(": device %.17g, ref %.17g\n", r->worst_dev, r->worst_ref);
  }
}

typedef struct verify_opts {
  const char *model_path, *device, *inject;
  double rtol, atol;
  int max_report;
  bool json;
} verify_opts;

static bool parse_double(const char *name, const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= 0) || !isfinite(x)) {
    kiln_cli_failf("%s takes a non-negative number, got '%s'", name, v);
    return false;
  }
  *out = x;
  return true;
}

int kiln_cmd_verify(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    fputs(verify_help, stdout);
    return 0;
  }
  kiln_verify_options dflt = kiln_verify_options_default();
  verify_opts o = {NULL, NULL, NULL, dflt.rtol, dflt.atol, dflt.max_report, false};
  kiln_cli_inputs in = {0};
  int rc = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = kiln_cli_inputs_parse(&in, argc, argv, &i);
    if (r < 0) goto out;
    if (r > 0) continue;
    if (!strcmp(a, "--json")) {
      o.json = true;
    } else if (!strcmp(a, "--device") || !strcmp(a, "--rtol") || !strcmp(a, "--atol") || !strcmp(a, "--inject-error") ||
        !strcmp(a, "--max-report")) {
      if (i + 1 >= argc) {
        kiln_cli_failf("%s needs a value", a);
        goto out;
      }
      const char *v = argv[++i];
      bool ok = true;
      double x = 0;
      if (!strcmp(a, "--device")) o.device = v;
      else if (!strcmp(a, "--inject-error")) o.inject = v; /* hidden: for tests of the tool itself */
      else if (!strcmp(a, "--rtol")) ok = parse_double(a, v, &o.rtol);
      else if (!strcmp(a, "--atol")) ok = parse_double(a, v, &o.atol);
      else if ((ok = parse_double(a, v, &x))) o.max_report = x > 1e6 ? 1000000 : (int)x;
      if (!ok) goto out;
    } else if (a[0] == '-' && a[1]) {
      kiln_cli_failf("unknown option '%s' (see `kiln verify --help`)", a);
      goto out;
    } else if (!o.model_path) {
      o.model_path = a;
    } else {
      kiln_cli_failf("unexpected argument '%s'", a);
      goto out;
    }
  }
  if (!o.model_path) {
    kiln_cli_failf("verify needs a model file (see `kiln verify --help`)");
    goto out;
  }

  kiln_model *model = NULL;
  kiln_verify_result vr = {0};
  kiln_verify_options vo = {.device = o.device, .rtol = o.rtol, .atol = o.atol, .max_report = o.max_report};
  kiln_status_t st = kiln_model_load_file(o.model_path, &model);
  if (!st) st = kiln_cli_inputs_build(&in, model);
  if (!st && o.json) {
    char *text = NULL;
    bool all_ok = false;
    st = kiln_verify_report_json(model, &vo, o.inject, in.n, in.names, in.values, in.desc, &text, &all_ok);
    if (!st) puts(text);
    kiln_string_free(text);
    rc = st ? kiln_cli_fail(st) : all_ok ? 0 : 1;
    goto cleanup;
  }
  if (!st) st = kiln_verify_run(model, &vo, o.inject, in.n, in.names, in.values, &vr);
  const char *device = vr.device;
  if (st) {
    rc = kiln_cli_fail(st);
    goto cleanup;
  }

  printf("verify %s: %s vs ref, rtol %g, atol %g\n", o.model_path, device, o.rtol, o.atol);
  for (int i = 0; i < in.n; i++) printf("%s %s\n", i ? "       " : "inputs", in.desc[i]);
  if (o.inject) printf("injected an error into the output of node '%s' on the %s side\n", o.inject, device);

  /* Walk the ref graph in node order: the first diverging output is the one to report. */
  const kiln_graph *g = vr.ref_g;
  int n_compared = 0, n_diverge = 0, n_ref_only = 0, reported = 0;
  double max_abs = 0, max_rel = 0;
  const char *first_node = NULL, *first_op = NULL;
  for (int n = 0; g && n < g->n_nodes; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_outputs; i++) {
      int id = node->outputs[i];
      if (id < 0) continue;
      const kiln_verify_cmp *r = &vr.results[id];
      if (!r->compared) {
        n_ref_only += vr.ref_only[id] != NULL;
        continue;
      }
      n_compared++;
      if (r->max_abs > max_abs) max_abs = r->max_abs;
      if (r->max_rel > max_rel) max_rel = r->max_rel;
      if (!r->diverges) continue;
      n_diverge++;
      if (!first_node) {
        first_node = node->name;
        first_op = node->op_type;
        printf("\nFIRST DIVERGENCE at node #%d '%s' (%s), output %d '%s'\n", n, node->name, node->op_type, i,
               g->values[id].name);
        printf("  output: device %s, ref %s\n", r->dev_type, r->ref_type);
        for (int k = 0; k < node->n_inputs; k++) {
          char tb[256];
          int in_id = node->inputs[k];
          if (in_id < 0) continue;
          const kiln_value_def *def = &g->values[in_id];
          printf("  input %d: '%s' %s%s\n", k, def->name, kiln_type_str(&def->type, tb, sizeof tb),
                 def->constant ? " (constant)" : def->is_graph_input ? " (graph input)" : "");
        }
        print_error_figures(r, "  ");
      } else if (reported < o.max_report) {
        if (!reported) printf("\nlater diverging values (graph order):\n");
        reported++;
        printf("  node #%d '%s' (%s), output '%s' %s\n", n, node->name, node->op_type, g->values[id].name,
               r->ref_type);
        print_error_figures(r, "    ");
      }
    }
  }
  if (n_diverge > 1 + reported) printf("  ... and %d more\n", n_diverge - 1 - reported);
  printf("\ncompared %d values; %s: %d steps observed in %.1f ms, ref: %d nodes in %.1f ms;\n"
         "not compared: %d values only on the device, %d only on the reference\n",
         n_compared, device, vr.dev_nodes, vr.dev_seconds * 1e3, g ? g->n_nodes : 0, vr.ref_seconds * 1e3, vr.dev_only,
         n_ref_only);
  if (n_diverge) {
    printf("verify: FAIL: %d of %d values diverge beyond rtol %g, atol %g; first at node '%s' (%s)\n", n_diverge,
           n_compared, o.rtol, o.atol, first_node, first_op);
    rc = 1;
  } else if (!n_compared) {
    printf("verify: FAIL: no value was produced by both sides, nothing compared\n");
    rc = 1;
  } else {
    printf("verify: OK: all %d values match (max abs err %.3g, max rel err %.3g)\n", n_compared, max_abs, max_rel);
    rc = 0;
  }
cleanup:
  kiln_verify_result_free(&vr);
  kiln_model_destroy(model);
out:
  kiln_cli_inputs_free(&in);
  return rc;
}
