/* gradient.h — what an op's gradient rule (kiln_op_def.gradient) sees and
 * the builder it emits the backward graph with.
 *
 * Autodiff (passes/autodiff.c) walks the forward graph from the loss back
 * to the trainable values and calls each node's rule once, in reverse
 * topological order, with the gradients of the node's outputs. The rule
 * appends ordinary graph nodes (Mul, MatMul, Transpose, ReduceSum, Where,
 * ...) that compute the gradients of the inputs autodiff asks for, so
 * every device that runs the forward ops runs the backward graph, fused
 * and memory-planned like any other graph.
 *
 * A rule reads the forward node through kiln_grad_node (the graph's node
 * array moves as nodes are appended: never keep the pointer across a
 * builder call), its values' ids through ctx->x / ctx->y, and the output
 * gradients through ctx->dy (-1: no gradient reaches that output, a zero).
 * It sets ctx->dx[i] for every input with ctx->want[i] (-1 leaves that
 * gradient zero: an input the output does not depend on differentiably).
 * The builder functions return a value id, or -1 after an error, which
 * they keep in ctx->status (the first one) and which autodiff returns
 * with the node's name: a rule may chain builder calls and check once.
 * Shapes: every value the rules touch has a static shape (autodiff runs on
 * a graph whose types are inferred); a rule that needs one and finds it
 * unknown fails through kiln_grad_fail.
 */
#ifndef KILN_OPS_GRADIENT_H
#define KILN_OPS_GRADIENT_H

#include "ops/op.h"

typedef struct kiln_gradient_ctx {
  kiln_graph *g;        /* the graph the backward nodes are appended to */
  int node;             /* the forward node's index in g; -1: the builder used outside a rule (the trainer) */
  int opset;            /* the ai.onnx opset the emitted nodes follow (the forward node's semantics: its own opset) */
  int n_inputs, n_outputs;
  const int *x;         /* the forward node's input value ids (-1: absent) */
  const int *y;         /* its output value ids */
  const int *dy;        /* per output: the loss's gradient with respect to it, or -1 (zero) */
  const bool *want;     /* per input: autodiff needs its gradient */
  int *dx;              /* per input: set by the rule (starts -1) */
  kiln_status_t status; /* the builder's first error (owned by autodiff) */
  int count;            /* emitted nodes, for their names */
} kiln_gradient_ctx;

/* The forward node (valid until the next builder call). */
const kiln_node *kiln_grad_node(const kiln_gradient_ctx *c);
/* The static type of value v (valid until the next builder call: the value array moves). */
const kiln_type *kiln_grad_type(const kiln_gradient_ctx *c, int v);
/* The value of v when the graph knows it before running: a constant, or
 * what value inference found (a shape computation's result); else NULL. */
const kiln_tensor *kiln_grad_known(const kiln_gradient_ctx *c, int v);
/* Records an error (printf-style why) and returns -1. */
int kiln_grad_fail(kiln_gradient_ctx *c, const char *fmt, ...) KILN_PRINTF(2, 3);

/* One attribute of an emitted node. */
typedef struct kiln_grad_attr {
  const char *name;
  kiln_attr_type type; /* KILN_ATTR_INT, _FLOAT, _INTS or _STRING */
  int64_t i;
  float f;
  int n;
  const int64_t *ints;
  const char *s;
} kiln_grad_attr;
#define KILN_GRAD_INT(nm, v) ((kiln_grad_attr){.name = (nm), .type = KILN_ATTR_INT, .i = (v)})
#define KILN_GRAD_FLOAT(nm, v) ((kiln_grad_attr){.name = (nm), .type = KILN_ATTR_FLOAT, .f = (v)})
#define KILN_GRAD_INTS(nm, cnt, v) ((kiln_grad_attr){.name = (nm), .type = KILN_ATTR_INTS, .n = (cnt), .ints = (v)})
#define KILN_GRAD_STRING(nm, v) ((kiln_grad_attr){.name = (nm), .type = KILN_ATTR_STRING, .s = (v)})

/* Appends op_type(ins) (ai.onnx at ctx->opset) with the attributes, infers
 * its one output's type and returns that value. */
int kiln_grad_op(kiln_gradient_ctx *c, const char *op_type, int n_in, const int *ins, int n_attrs,
                 const kiln_grad_attr *attrs);
/* The same with n_out outputs (outs[k] on entry: -1 leaves output k absent,
 * any other value asks for it; on return the new values' ids), at an explicit ai.onnx opset (0: ctx->opset), for an
 * op whose needed form is newer than the model (ScatterElements' reduction
 * from 16). Returns outs[0]. */
int kiln_grad_op_ex(kiln_gradient_ctx *c, const char *op_type, int opset, int n_in, const int *ins, int n_out, int *outs,
                    int n_attrs, const kiln_grad_attr *attrs);
/* Appends the kiln-domain op op_type(ins) (ops that exist for the backward
 * graph: kiln.MaxPoolArgmax, kiln.MaxPoolGrad) with the attributes; returns
 * its one output. */
int kiln_grad_kiln_op(kiln_gradient_ctx *c, const char *op_type, int n_in, const int *ins, int n_attrs,
                      const kiln_grad_attr *attrs);
/* The forward node once more (same op, inputs and attributes) with n_out
 * outputs, as kiln_grad_op_ex's outs: for an output the forward node left
 * absent (MaxPool's Indices). Returns outs[0]. */
int kiln_grad_recompute(kiln_gradient_ctx *c, int n_out, int *outs);
/* Shorthands for kiln_grad_op without attributes. */
int kiln_grad_op1(kiln_gradient_ctx *c, const char *op_type, int a);
int kiln_grad_op2(kiln_gradient_ctx *c, const char *op_type, int a, int b);
/* A scalar constant of dtype dt. */
int kiln_grad_scalar(kiln_gradient_ctx *c, kiln_dtype dt, double v);
/* A 1-D int64 constant. */
int kiln_grad_ints(kiln_gradient_ctx *c, int n, const int64_t *v);
/* v reshaped to `like`'s static shape. */
int kiln_grad_reshape_like(kiln_gradient_ctx *c, int v, int like);
/* v with its last two axes swapped (a Transpose). */
int kiln_grad_swap_last2(kiln_gradient_ctx *c, int v);
/* ReduceSum of v over the given axes (version-correct for ctx->opset). */
int kiln_grad_reduce_sum(kiln_gradient_ctx *c, int v, int n_axes, const int64_t *axes, bool keepdims);
/* The gradient d of a broadcast result, summed back to the shape of the
 * operand `like` it was broadcast from (numpy rules: leading axes and
 * axes where like has 1). d itself when the shapes match. */
int kiln_grad_unbroadcast(kiln_gradient_ctx *c, int d, int like);

/* Rules, each next to its op's table entry's family. */
kiln_status_t kiln_grad_elementwise(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_matmul(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_gemm(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_reduce(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_softmax(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_movement(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_conv(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_pool(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_norm(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_dropout(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_loss(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_resize(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_conv_transpose(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_gelu(kiln_gradient_ctx *c);
kiln_status_t kiln_grad_attention(kiln_gradient_ctx *c);
/* ReduceMean of v over the given axes (version-correct for ctx->opset). */
int kiln_grad_reduce_mean(kiln_gradient_ctx *c, int v, int n_axes, const int64_t *axes, bool keepdims);

#endif
