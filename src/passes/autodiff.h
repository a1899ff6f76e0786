/* autodiff.h — reverse-mode differentiation as a graph pass (autodiff.c;
 * the per-op rules: ops/gradient.h). */
#ifndef KILN_PASSES_AUTODIFF_H
#define KILN_PASSES_AUTODIFF_H

#include "passes/passes.h"

/* Appends to g (toposorted, types inferred, static shapes) the nodes that
 * compute the gradient of the sum of `loss`'s elements with respect to each
 * wrt[k] (float values of g), following the ai.onnx opset `opset`.
 * out_grads[k]: the value holding it (wrt[k]'s dtype and shape), or -1 when
 * the loss does not depend on wrt[k]. A node on the way without a gradient
 * rule is a KILN_UNSUPPORTED error naming it. */
kiln_status_t kiln_pass_autodiff(kiln_graph *g, int opset, int loss, int n_wrt, const int *wrt, int *out_grads);

/* Rewrites every ONNX Gradient node (ai.onnx.preview.training) of g
 * (toposorted, static shapes) as autodiff's backward graph of its y with
 * respect to its xs. */
kiln_status_t kiln_pass_expand_gradient(kiln_graph *g);

#endif
