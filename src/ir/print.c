#include "ir/print.h"

static void print_value(const kiln_graph *g, int id, FILE *out) {
  if (id < 0) {
    fputs("<absent>", out);
    return;
  }
  char t[256];
  fprintf(out, "%%%s:%s", g->values[id].name, kiln_type_str(&g->values[id].type, t, sizeof t));
}

static void print_graph(const kiln_graph *g, FILE *out, int indent) {
  fprintf(out, "%*sgraph %s(", indent, "", g->name);
  for (int i = 0; i < g->n_inputs; i++) {
    if (i) fputs(", ", out);
    print_value(g, g->inputs[i], out);
  }
  fputs(") {\n", out);
  for (int i = 0; i < g->n_values; i++) {
    const kiln_value_def *v = &g->values[i];
    if (v->constant && !v->is_graph_input) {
      fprintf(out, "%*s  const ", indent, "");
      print_value(g, i, out);
      fputc('\n', out);
    }
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const kiln_node *n = &g->nodes[ni];
    fprintf(out, "%*s  ", indent, "");
    for (int i = 0; i < n->n_outputs; i++) {
      if (i) fputs(", ", out);
      print_value(g, n->outputs[i], out);
    }
    fprintf(out, " = %s%s%s(", n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type);
    for (int i = 0; i < n->n_inputs; i++) {
      if (i) fputs(", ", out);
      fprintf(out, "%%%s", n->inputs[i] >= 0 ? g->values[n->inputs[i]].name : "<absent>");
    }
    fprintf(out, ")  # %s\n", n->name);
    for (int a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->g) print_graph(at->g, out, indent + 4);
      for (int k = 0; at->graphs && k < at->n; k++) print_graph(at->graphs[k], out, indent + 4);
    }
  }
  fprintf(out, "%*s  return ", indent, "");
  for (int i = 0; i < g->n_outputs; i++) {
    if (i) fputs(", ", out);
    print_value(g, g->outputs[i], out);
  }
  fprintf(out, "\n%*s}\n", indent, "");
}

void kiln_graph_print(const kiln_graph *g, FILE *out) { print_graph(g, out, 0); }

/* DOT labels must not contain unescaped quotes or backslashes. */
static void dot_escape(const char *s, FILE *out) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    fputc(*s, out);
  }
}

void kiln_graph_print_dot(const kiln_graph *g, FILE *out) {
  fputs("digraph kiln {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n", out);
  for (int i = 0; i < g->n_inputs; i++) {
    int id = g->inputs[i];
    if (g->values[id].constant) continue;
    fprintf(out, "  v%d [shape=oval, style=filled, fillcolor=\"#d0e8ff\", label=\"", id);
    char t[256];
    dot_escape(g->values[id].name, out);
    fputs("\\n", out);
    dot_escape(kiln_type_str(&g->values[id].type, t, sizeof t), out);
    fputs("\"];\n", out);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int id = g->outputs[i];
    fprintf(out, "  o%d [shape=oval, style=filled, fillcolor=\"#d8f5d0\", label=\"", id);
    dot_escape(g->values[id].name, out);
    fputs("\"];\n", out);
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const kiln_node *n = &g->nodes[ni];
    fprintf(out, "  n%d [shape=box, style=rounded, label=\"", ni);
    dot_escape(n->op_type, out);
    fputs("\\n", out);
    dot_escape(n->name, out);
    fputs("\"];\n", out);
    for (int i = 0; i < n->n_inputs; i++) {
      int id = n->inputs[i];
      if (id < 0 || g->values[id].constant) continue;
      char t[256];
      int p = g->values[id].producer;
      if (p >= 0)
        fprintf(out, "  n%d -> n%d [label=\"", p, ni);
      else if (g->values[id].is_graph_input)
        fprintf(out, "  v%d -> n%d [label=\"", id, ni);
      else
        continue;
      dot_escape(kiln_type_str(&g->values[id].type, t, sizeof t), out);
      fputs("\"];\n", out);
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int id = g->outputs[i];
    int p = g->values[id].producer;
    if (p >= 0) fprintf(out, "  n%d -> o%d;\n", p, id);
    else if (g->values[id].is_graph_input) fprintf(out, "  v%d -> o%d;\n", id, id);
  }
  fputs("}\n", out);
}
