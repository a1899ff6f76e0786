/* autodiff: reverse-mode differentiation as a graph pass.
 *
 *   kiln_pass_autodiff(g, opset, loss, wrt[]) appends to g the nodes that
 *   compute d(sum of loss's elements) / d(wrt[k]) for each k.
 *
 * 1. Which nodes matter: values that depend on a wrt value through float
 *    values (forward, in node order) and values the loss depends on
 *    (backward). A node between the two is on the path; its gradient rule
 *    (ops/gradient.h, kiln_op_def.gradient) runs once, in reverse
 *    topological order, after every consumer of its outputs has added its
 *    share to their gradients. A value read by a node's subgraph (an If or
 *    Loop body reading a weight from the outer scope) counts as that
 *    node's input, so a weight used only inside a body is an error (no
 *    rule for If), never a silent zero.
 * 2. The seed: a constant of ones shaped like the loss.
 * 3. A value read by several nodes gets their contributions added (Add
 *    nodes, which fusion folds into whatever reads the sum).
 * 4. Each rule's result is checked against its input's type (dtype and
 *    shape): a wrong rule is an internal error naming the node, not a
 *    wrong gradient downstream.
 *
 * The graph must be toposorted with its types inferred (static shapes:
 * the rules reshape and reduce by them). Emitted nodes follow the ai.onnx
 * opset `opset` and are appended after the forward nodes.
 *
 * kiln_pass_expand_gradient turns each ONNX Gradient node (domain
 * ai.onnx.preview.training: "the gradient of y with respect to xs", by
 * value names) into the same backward graph, its outputs written by
 * Identity nodes; it runs on a session's specialized graph, where shapes
 * are static.
 */
#include "passes/autodiff.h"

#include "ops/gradient.h"
#include "passes/passes_opt.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- the builder rules use ------------------------------------------------------ */

const kiln_node *kiln_grad_node(const kiln_gradient_ctx *c) { return &c->g->nodes[c->node]; }

const kiln_type *kiln_grad_type(const kiln_gradient_ctx *c, int v) { return &c->g->values[v].type; }

const kiln_tensor *kiln_grad_known(const kiln_gradient_ctx *c, int v) {
  if (v < 0) return NULL;
  const kiln_tensor *t = kiln_opt_const(c->g, v);
  return t ? t : c->g->values[v].known_value;
}

int kiln_grad_fail(kiln_gradient_ctx *c, const char *fmt, ...) {
  if (c->status) return -1;
  va_list ap;
  va_start(ap, fmt);
  c->status = kiln_error_v(KILN_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return -1;
}

/* Base name for the values and nodes this rule emits. */
static void emit_name(kiln_gradient_ctx *c, const char *op_type, char *buf, size_t size) {
  if (c->node < 0) snprintf(buf, size, "train/%d_%s", c->count++, op_type); /* the builder outside a rule */
  else snprintf(buf, size, "grad/%s/%d_%s", kiln_grad_node(c)->name, c->count++, op_type);
}

static int emit_op(kiln_gradient_ctx *c, const char *domain, const char *op_type, int opset, int n_in, const int *ins,
                   int n_out, int *outs, int n_attrs, const kiln_grad_attr *attrs);

int kiln_grad_op_ex(kiln_gradient_ctx *c, const char *op_type, int opset, int n_in, const int *ins, int n_out, int *outs,
                    int n_attrs, const kiln_grad_attr *attrs) {
  return emit_op(c, "", op_type, opset ? opset : c->opset, n_in, ins, n_out, outs, n_attrs, attrs);
}

int kiln_grad_kiln_op(kiln_gradient_ctx *c, const char *op_type, int n_in, const int *ins, int n_attrs,
                      const kiln_grad_attr *attrs) {
  int out = -1;
  return emit_op(c, "kiln", op_type, 1, n_in, ins, 1, &out, n_attrs, attrs);
}

static int emit_op(kiln_gradient_ctx *c, const char *domain, const char *op_type, int opset, int n_in, const int *ins,
                   int n_out, int *outs, int n_attrs, const kiln_grad_attr *attrs) {
  if (c->status) return -1;
  for (int i = 0; i < n_in; i++)
    if (ins[i] < 0 && !(i > 0 && !strcmp(op_type, "Clip"))) return kiln_grad_fail(c, "%s: input %d missing", op_type, i);
  if (n_out < 1 || n_out > 8) return kiln_grad_fail(c, "%s: %d outputs", op_type, n_out);
  char name[400];
  emit_name(c, op_type, name, sizeof name);
  kiln_graph *g = c->g;
  kiln_status_t st = NULL;
  for (int k = 0; k < n_out && !st; k++)
    if (k == 0 || outs[k] >= 0) st = kiln_opt_new_value(g, name, NULL, &outs[k]);
  if (!st) st = kiln_opt_append_node(g, name, op_type, domain, opset, n_in, ins, n_out, outs);
  kiln_node *n = st ? NULL : &g->nodes[g->n_nodes - 1];
  if (n && !n->op) st = kiln_error(KILN_INTERNAL, "no op %s%s%s for the backward graph", domain, *domain ? "." : "", op_type);
  for (int a = 0; a < n_attrs && !st; a++) {
    const kiln_grad_attr *at = &attrs[a];
    if (at->type == KILN_ATTR_INT) st = kiln_opt_set_attr_int(n, at->name, at->i);
    else if (at->type == KILN_ATTR_FLOAT) st = kiln_opt_set_attr_float(n, at->name, at->f);
    else if (at->type == KILN_ATTR_STRING) st = kiln_opt_set_attr_string(n, at->name, at->s);
    else st = kiln_opt_set_attr_ints(n, at->name, at->n, at->ints);
  }
  kiln_type t[8] = {{0}};
  if (!st) st = kiln_infer_node_outputs(g, n, t);
  for (int k = 0; k < n_out && !st; k++) {
    if (outs[k] < 0) continue;
    if (!kiln_opt_shape_known(&t[k])) {
      char tb[160];
      st = kiln_error(KILN_INTERNAL, "backward %s: output %d's type %s not static", op_type, k,
                      kiln_type_str(&t[k], tb, sizeof tb));
    } else {
      kiln_type_copy(&g->values[outs[k]].type, &t[k]);
    }
  }
  for (int k = 0; k < n_out; k++) kiln_type_clear(&t[k]);
  if (st) {
    c->status = st;
    return -1;
  }
  return outs[0];
}

int kiln_grad_recompute(kiln_gradient_ctx *c, int n_out, int *outs) {
  if (c->status) return -1;
  kiln_graph *g = c->g;
  const kiln_node *f = kiln_grad_node(c);
  char name[400], op_type[128], domain[128];
  snprintf(op_type, sizeof op_type, "%s", f->op_type);
  snprintf(domain, sizeof domain, "%s", f->domain);
  int opset = f->opset;
  emit_name(c, op_type, name, sizeof name);
  kiln_status_t st = NULL;
  for (int k = 0; k < n_out && !st; k++)
    if (k == 0 || outs[k] >= 0) st = kiln_opt_new_value(g, name, NULL, &outs[k]);
  if (!st) st = kiln_opt_append_node(g, name, op_type, domain, opset, c->n_inputs, c->x, n_out, outs);
  kiln_node *n = st ? NULL : &g->nodes[g->n_nodes - 1];
  if (!st) st = kiln_node_copy_attrs(n, &g->nodes[c->node], g);
  kiln_type t[8] = {{0}};
  if (!st && n_out > 8) st = kiln_error(KILN_INTERNAL, "recomputing %s with %d outputs", op_type, n_out);
  if (!st) st = kiln_infer_node_outputs(g, n, t);
  for (int k = 0; k < n_out && k < 8; k++) {
    if (!st && outs[k] >= 0) kiln_type_copy(&g->values[outs[k]].type, &t[k]);
    kiln_type_clear(&t[k]);
  }
  if (st) {
    c->status = st;
    return -1;
  }
  return outs[0];
}

int kiln_grad_op(kiln_gradient_ctx *c, const char *op_type, int n_in, const int *ins, int n_attrs,
                 const kiln_grad_attr *attrs) {
  int out = -1;
  return kiln_grad_op_ex(c, op_type, 0, n_in, ins, 1, &out, n_attrs, attrs);
}

int kiln_grad_op1(kiln_gradient_ctx *c, const char *op_type, int a) { return kiln_grad_op(c, op_type, 1, &a, 0, NULL); }

int kiln_grad_op2(kiln_gradient_ctx *c, const char *op_type, int a, int b) {
  int ins[2] = {a, b};
  return kiln_grad_op(c, op_type, 2, ins, 0, NULL);
}

static int new_const(kiln_gradient_ctx *c, kiln_tensor *t) {
  char name[400];
  emit_name(c, "const", name, sizeof name);
  int id = -1;
  kiln_status_t st = kiln_opt_new_const(c->g, name, t, &id); /* takes t */
  if (st) {
    c->status = st;
    return -1;
  }
  return id;
}

int kiln_grad_scalar(kiln_gradient_ctx *c, kiln_dtype dt, double v) {
  if (c->status) return -1;
  kiln_tensor *t;
  kiln_status_t st = kiln_tensor_new(dt, 0, NULL, &t);
  if (st) {
    c->status = st;
    return -1;
  }
  kiln_store_f64(t->data, dt, 0, v);
  return new_const(c, t);
}

int kiln_grad_ints(kiln_gradient_ctx *c, int n, const int64_t *v) {
  if (c->status) return -1;
  kiln_tensor *t;
  int64_t dims[1] = {n};
  kiln_status_t st = kiln_tensor_new(KILN_DTYPE_I64, 1, dims, &t);
  if (st) {
    c->status = st;
    return -1;
  }
  if (n) memcpy(t->data, v, (size_t)n * sizeof *v);
  return new_const(c, t);
}

int kiln_grad_reshape_like(kiln_gradient_ctx *c, int v, int like) {
  if (c->status) return -1;
  const kiln_type *tl = kiln_grad_type(c, like), *tv = kiln_grad_type(c, v);
  if (!kiln_opt_shape_known(tl)) return kiln_grad_fail(c, "the shape of '%s' is not known", c->g->values[like].name);
  if (tv->rank == tl->rank && !memcmp(tv->dims, tl->dims, (size_t)tl->rank * sizeof tl->dims[0])) return v;
  int shape = kiln_grad_ints(c, tl->rank, tl->dims);
  return kiln_grad_op2(c, "Reshape", v, shape);
}

int kiln_grad_swap_last2(kiln_gradient_ctx *c, int v) {
  if (c->status) return -1;
  int r = kiln_grad_type(c, v)->rank;
  if (r < 2) return kiln_grad_fail(c, "swapping the last two axes of a value of rank %d", r);
  int64_t perm[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  kiln_grad_attr at = KILN_GRAD_INTS("perm", r, perm);
  return kiln_grad_op(c, "Transpose", 1, &v, 1, &at);
}

int kiln_grad_reduce_sum(kiln_gradient_ctx *c, int v, int n_axes, const int64_t *axes, bool keepdims) {
  if (c->status) return -1;
  if (n_axes == 0) return v;
  kiln_grad_attr keep = KILN_GRAD_INT("keepdims", keepdims);
  if (c->opset < 13) {
    kiln_grad_attr at[2] = {KILN_GRAD_INTS("axes", n_axes, axes), keep};
    return kiln_grad_op(c, "ReduceSum", 1, &v, 2, at);
  }
  int ins[2] = {v, kiln_grad_ints(c, n_axes, axes)};
  return kiln_grad_op(c, "ReduceSum", 2, ins, 1, &keep);
}

int kiln_grad_reduce_mean(kiln_gradient_ctx *c, int v, int n_axes, const int64_t *axes, bool keepdims) {
  if (c->status) return -1;
  if (n_axes == 0) return v;
  kiln_grad_attr keep = KILN_GRAD_INT("keepdims", keepdims);
  if (c->opset < 18) {
    kiln_grad_attr at[2] = {KILN_GRAD_INTS("axes", n_axes, axes), keep};
    return kiln_grad_op(c, "ReduceMean", 1, &v, 2, at);
  }
  int ins[2] = {v, kiln_grad_ints(c, n_axes, axes)};
  return kiln_grad_op(c, "ReduceMean", 2, ins, 1, &keep);
}

int kiln_grad_unbroadcast(kiln_gradient_ctx *c, int d, int like) {
  if (c->status) return -1;
  const kiln_type *td = kiln_grad_type(c, d), *tl = kiln_grad_type(c, like);
  if (!kiln_opt_shape_known(td) || !kiln_opt_shape_known(tl))
    return kiln_grad_fail(c, "broadcast gradient: the shapes of '%s' and '%s' must be known", c->g->values[d].name,
                          c->g->values[like].name);
  int lead = td->rank - tl->rank;
  if (lead < 0) return kiln_grad_fail(c, "broadcast gradient: '%s' has a higher rank than its result", c->g->values[like].name);
  int64_t axes[KILN_MAX_RANK];
  int n = 0;
  for (int i = 0; i < td->rank; i++)
    if (i < lead || (tl->dims[i - lead] == 1 && td->dims[i] != 1)) axes[n++] = i;
  int s = kiln_grad_reduce_sum(c, d, n, axes, true);
  return kiln_grad_reshape_like(c, s, like);
}

/* ---- the pass ------------------------------------------------------------------- */

static bool is_float(const kiln_type *t) { return t->kind == KILN_TYPE_TENSOR && kiln_dtype_is_float(t->dtype); }

/* The values node n reads: its inputs, then what its subgraphs read from outer scopes. */
static kiln_status_t reads_of(const kiln_graph *g, const kiln_node *n, kiln_ptr_vec *names, int **out, int *out_n) {
  names->count = 0;
  KILN_TRY(kiln_opt_subgraph_reads(n, names));
  int *r = malloc((size_t)(n->n_inputs + names->count + 1) * sizeof *r);
  if (!r) return KILN_OOM();
  int k = 0;
  for (int i = 0; i < n->n_inputs; i++) r[k++] = n->inputs[i];
  for (int i = 0; i < names->count; i++) r[k++] = kiln_graph_find_value(g, names->items[i]);
  *out = r;
  *out_n = k;
  return NULL;
}

/* grad[v] += d (an Add node when v already has a share). */
static int accumulate(kiln_gradient_ctx *c, int cur, int d) {
  if (cur < 0) return d;
  return kiln_grad_op2(c, "Add", cur, d);
}

kiln_status_t kiln_pass_autodiff(kiln_graph *g, int opset, int loss, int n_wrt, const int *wrt, int *out_grads) {
  for (int k = 0; k < n_wrt; k++) out_grads[k] = -1;
  if (loss < 0 || loss >= g->n_values) return kiln_error(KILN_INVALID_ARGUMENT, "autodiff: no loss value");
  const kiln_type *lt = &g->values[loss].type;
  if (!is_float(lt) || !kiln_opt_shape_known(lt))
    return kiln_error(KILN_INVALID_ARGUMENT, "autodiff: the loss '%s' must be a float tensor of known shape",
                      g->values[loss].name);
  int nv0 = g->n_values, nn0 = g->n_nodes;
  bool *fwd = calloc((size_t)nv0 + 1, 1), *bwd = calloc((size_t)nv0 + 1, 1);
  int *grad = malloc(((size_t)nv0 + 1) * sizeof *grad);
  kiln_ptr_vec names = {0};
  kiln_status_t st = fwd && bwd && grad ? NULL : KILN_OOM();
  for (int v = 0; !st && v < nv0; v++) grad[v] = -1;
  for (int k = 0; !st && k < n_wrt; k++) {
    if (wrt[k] < 0 || wrt[k] >= nv0 || !is_float(&g->values[wrt[k]].type))
      st = kiln_error(KILN_INVALID_ARGUMENT, "autodiff: trainable value %d is not a float tensor", k);
    else fwd[wrt[k]] = true;
  }
  /* 1. forward reach (float values only: an index or a shape carries no gradient) */
  for (int n = 0; !st && n < nn0; n++) {
    const kiln_node *node = &g->nodes[n];
    int *r = NULL, nr = 0;
    if ((st = reads_of(g, node, &names, &r, &nr))) break;
    bool any = false;
    for (int i = 0; i < nr; i++) any |= r[i] >= 0 && fwd[r[i]];
    free(r);
    for (int o = 0; any && o < node->n_outputs; o++)
      if (node->outputs[o] >= 0 && is_float(&g->values[node->outputs[o]].type)) fwd[node->outputs[o]] = true;
  }
  /* ... and backward from the loss */
  if (!st) bwd[loss] = true;
  for (int n = nn0 - 1; !st && n >= 0; n--) {
    const kiln_node *node = &g->nodes[n];
    bool any = false;
    for (int o = 0; o < node->n_outputs; o++) any |= node->outputs[o] >= 0 && bwd[node->outputs[o]];
    if (!any) continue;
    int *r = NULL, nr = 0;
    if ((st = reads_of(g, node, &names, &r, &nr))) break;
    for (int i = 0; i < nr; i++)
      if (r[i] >= 0) bwd[r[i]] = true;
    free(r);
  }
  kiln_gradient_ctx c = {.g = g, .opset = opset};
  /* 2. the seed */
  if (!st) {
    kiln_tensor *ones;
    st = kiln_tensor_new(lt->dtype, lt->rank, lt->dims, &ones);
    for (int64_t i = 0; !st && i < ones->numel; i++) kiln_store_f64(ones->data, ones->dtype, i, 1.0);
    if (!st) st = kiln_opt_new_const(g, "grad/seed", ones, &grad[loss]);
  }
  /* 3. the rules, last node first */
  for (int n = nn0 - 1; !st && n >= 0; n--) {
    const kiln_node *node = &g->nodes[n];
    bool on_path = false;
    for (int o = 0; o < node->n_outputs; o++) {
      int v = node->outputs[o];
      on_path |= v >= 0 && fwd[v] && bwd[v] && grad[v] >= 0;
    }
    if (!on_path) continue;
    int ni = node->n_inputs, no = node->n_outputs;
    int *x = malloc((size_t)(ni + 1) * sizeof *x), *y = malloc((size_t)no * sizeof *y);
    int *dy = malloc((size_t)no * sizeof *dy), *dx = malloc((size_t)(ni + 1) * sizeof *dx);
    bool *want = calloc((size_t)ni + 1, 1);
    int *r = NULL, nr = 0;
    if (!x || !y || !dy || !dx || !want) st = KILN_OOM();
    if (!st) st = reads_of(g, node, &names, &r, &nr);
    bool outer = false;
    for (int i = ni; !st && i < nr; i++) outer |= r[i] >= 0 && fwd[r[i]];
    if (!st && (!node->op || !node->op->gradient || outer))
      st = kiln_error(KILN_UNSUPPORTED,
                      "node '%s' (%s%s%s) lies between a trainable value and the loss, and kiln has no gradient "
                      "rule for it%s",
                      node->name, node->domain[0] ? node->domain : "", node->domain[0] ? "." : "", node->op_type,
                      outer ? " (its subgraph reads a trainable value)" : "");
    for (int i = 0; !st && i < ni; i++) {
      x[i] = node->inputs[i];
      dx[i] = -1;
      want[i] = x[i] >= 0 && fwd[x[i]];
    }
    for (int o = 0; !st && o < no; o++) {
      y[o] = node->outputs[o];
      dy[o] = y[o] >= 0 ? grad[y[o]] : -1;
    }
    if (!st) {
      c.node = n;
      c.n_inputs = ni;
      c.n_outputs = no;
      c.x = x;
      c.y = y;
      c.dy = dy;
      c.want = want;
      c.dx = dx;
      c.count = 0;
      st = node->op->gradient(&c);
      if (!st) st = c.status;
      c.status = NULL;
      node = &g->nodes[n];
      if (st) st = kiln_status_annotate(st, "gradient of node '%s' (%s)", node->name, node->op_type);
    }
    for (int i = 0; !st && i < ni; i++) {
      if (!want[i] || dx[i] < 0) continue;
      const kiln_type *want_t = &g->values[x[i]].type, *got = &g->values[dx[i]].type;
      if (got->dtype != want_t->dtype || got->rank != want_t->rank ||
          memcmp(got->dims, want_t->dims, (size_t)(got->rank > 0 ? got->rank : 0) * sizeof got->dims[0])) {
        char a[160], b[160];
        st = kiln_error(KILN_INTERNAL, "gradient rule of node '%s' (%s) gave %s for input %d, which is %s",
                        node->name, node->op_type, kiln_type_str(got, a, sizeof a), i, kiln_type_str(want_t, b, sizeof b));
        break;
      }
      c.node = n;
      grad[x[i]] = accumulate(&c, grad[x[i]], dx[i]);
      st = c.status;
      c.status = NULL;
    }
    free(r);
    free(x);
    free(y);
    free(dy);
    free(dx);
    free(want);
  }
  for (int k = 0; !st && k < n_wrt; k++) out_grads[k] = grad[wrt[k]];
  kiln_status_free(c.status);
  kiln_ptr_vec_free(&names);
  free(fwd);
  free(bwd);
  free(grad);
  return st;
}

/* ---- ONNX's Gradient op ------------------------------------------------------- */

/* The ai.onnx opset the graph's nodes follow (13 when no node says). */
static int graph_opset(const kiln_graph *g) {
  int v = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].domain[0] && g->nodes[i].opset > v) v = g->nodes[i].opset;
  return v ? v : 13;
}

static bool is_gradient_node(const kiln_node *n) {
  return !strcmp(n->op_type, "Gradient") && !strcmp(n->domain, "ai.onnx.preview.training");
}

static kiln_status_t expand_one(kiln_graph *g, int ni) {
  kiln_node *n = &g->nodes[ni];
  const kiln_attr *xs = kiln_node_attr(n, "xs");
  const char *yname = kiln_attr_string(n, "y", NULL);
  if (!xs || xs->type != KILN_ATTR_STRINGS || !yname)
    return kiln_error(KILN_INVALID_MODEL, "Gradient needs attributes xs (strings) and y (a string)");
  if (xs->n != n->n_outputs)
    return kiln_error(KILN_INVALID_MODEL, "Gradient has %d outputs for %d values in xs", n->n_outputs, xs->n);
  int y = kiln_graph_find_value(g, yname);
  if (y < 0) return kiln_error(KILN_INVALID_MODEL, "Gradient's y '%s' is no value of the graph", yname);
  int nx = xs->n;
  int *x = malloc((size_t)(nx + 1) * sizeof *x), *grads = malloc((size_t)(nx + 1) * sizeof *grads);
  int *outs = malloc((size_t)(nx + 1) * sizeof *outs);
  kiln_status_t st = x && grads && outs ? NULL : KILN_OOM();
  for (int k = 0; !st && k < nx; k++) {
    x[k] = kiln_graph_find_value(g, xs->strings[k]);
    outs[k] = n->outputs[k];
    if (x[k] < 0) st = kiln_error(KILN_INVALID_MODEL, "Gradient's xs[%d] '%s' is no value of the graph", k, xs->strings[k]);
  }
  char base[300];
  snprintf(base, sizeof base, "%s", n->name);
  /* The Gradient node goes first, so its outputs are free for the Identity nodes below. */
  if (!st) {
    bool *dead = calloc((size_t)g->n_nodes, sizeof *dead);
    if (!dead) st = KILN_OOM();
    if (!st) dead[ni] = true;
    if (!st) st = kiln_opt_remove_nodes(g, dead);
    free(dead);
  }
  if (!st) st = kiln_pass_autodiff(g, graph_opset(g), y, nx, x, grads);
  for (int k = 0; !st && k < nx; k++) {
    if (outs[k] < 0) continue;
    int src = grads[k];
    if (src < 0) { /* y does not depend on x: a zero */
      const kiln_type *t = &g->values[x[k]].type;
      kiln_tensor *z;
      st = kiln_tensor_new(t->dtype, t->rank, t->dims, &z);
      if (!st) memset(z->data, 0, (size_t)z->numel * kiln_dtype_size(z->dtype));
      if (!st) st = kiln_opt_new_const(g, base, z, &src);
    }
    char name[400];
    snprintf(name, sizeof name, "%s/%d", base, k);
    if (!st) st = kiln_opt_append_node(g, name, "Identity", "", graph_opset(g), 1, &src, 1, &outs[k]);
    if (!st) kiln_type_copy(&g->values[outs[k]].type, &g->values[src].type);
  }
  free(x);
  free(grads);
  free(outs);
  return st;
}

kiln_status_t kiln_pass_expand_gradient(kiln_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    if (!is_gradient_node(&g->nodes[i])) continue;
    char name[300];
    snprintf(name, sizeof name, "%s", g->nodes[i].name);
    KILN_RETURN_IF_ERROR(expand_one(g, i), "node '%s' (Gradient)", name);
    KILN_TRY(kiln_graph_toposort(g));
    i = -1; /* the nodes moved: look again from the start */
  }
  return NULL;
}
