/* print.h — human-readable graph dumps: text (one line per node with
 * input/output types) and Graphviz DOT (`kiln info --dot`). */
#ifndef KILN_IR_PRINT_H
#define KILN_IR_PRINT_H

#include <stdio.h>

#include "ir/graph.h"

void kiln_graph_print(const kiln_graph *g, FILE *out);
void kiln_graph_print_dot(const kiln_graph *g, FILE *out);

#endif
