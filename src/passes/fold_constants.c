/* fold-constants: a node whose inputs are all constant, that is
 * deterministic and runs no subgraph, is evaluated now with its reference
 * kernel; its outputs become constants and the node goes. Value
 * inference's known values (shape computations: Shape -> Gather -> Concat
 * -> Reshape) are promoted to constants the same way; in the specialized
 * graph every input shape is concrete, so Shape and Size of a fully
 * known type are constants too (where kiln_opt_shapes_trusted: not in a
 * loop body, whose carried values may change shape between iterations).
 *
 * Size rules: the outputs of one node take at most 64 MB (2 GB for
 * weights, see below), and more than
 * 64 KB only when they are no larger than the constant inputs (and tensor
 * attributes) that die with the node, or when they have no more elements
 * than those inputs: a conversion of weights (Cast or DequantizeLinear of
 * int8/f16 weights, their Transpose/Reshape) is folded even though f32
 * takes more bytes than int8, because otherwise it runs at every
 * inference; a broadcast (Expand, Tile, ConstantOfShape) of more than 64 KB
 * stays in the graph unless every reader takes it as weights (a Conv's or
 * MatMul's W, a normalization's parameters: read_as_weights). */
#include "passes/fold_cache.h"
#include "passes/passes_opt.h"

#include <stdio.h>

#define FOLD_MAX_BYTES ((int64_t)64 << 20)
#define FOLD_MAX_WEIGHT_BYTES ((int64_t)2 << 30) /* a weight read whole by its kernel: VGG's 400 MB FC layer */
#define FOLD_FREE_BYTES ((int64_t)64 << 10)
#define FOLD_MAX_IO 64

static bool has_subgraph(const kiln_node *n) {
  for (int a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs) return true;
  return false;
}

static bool output_type_ok(const kiln_value_def *v, const kiln_tensor *t) {
  const kiln_type *ty = &v->type;
  if (ty->kind != KILN_TYPE_TENSOR && ty->kind != KILN_TYPE_UNKNOWN) return false;
  if (ty->dtype && ty->dtype != t->dtype) return false;
  if (ty->rank >= 0) {
    if (ty->rank != t->rank) return false;
    for (int d = 0; d < t->rank; d++)
      if (ty->dims[d] >= 0 && ty->dims[d] != t->dims[d]) return false;
  }
  return true;
}

/* Evaluates node n (all inputs constant) into outs[] (owned tensors, NULL
 * for absent outputs). False when it cannot or should not be folded. */
static bool evaluate_now(const kiln_graph *g, const kiln_node *n, kiln_tensor **outs);

/* evaluate_now through the model's cache (passes/fold_cache.h): another
 * session of the model may have folded this node over the same tensors. */
static bool evaluate(const kiln_graph *g, const kiln_node *n, kiln_tensor **outs) {
  kiln_tensor *in[FOLD_MAX_IO] = {0};
  for (int i = 0; i < n->n_inputs; i++)
    if (n->inputs[i] >= 0) in[i] = (kiln_tensor *)kiln_opt_const(g, n->inputs[i]);
  if (kiln_fold_cache_get(g->fold_cache, n, in, n->n_inputs, outs, n->n_outputs)) {
    bool ok = true;
    for (int i = 0; i < n->n_outputs && ok; i++)
      ok = n->outputs[i] < 0 || (outs[i] && output_type_ok(&g->values[n->outputs[i]], outs[i]));
    if (ok) return true;
    for (int i = 0; i < n->n_outputs; i++) {
      kiln_tensor_release(outs[i]);
      outs[i] = NULL;
    }
  }
  if (!evaluate_now(g, n, outs)) return false;
  kiln_fold_cache_put(g->fold_cache, n, in, n->n_inputs, outs, n->n_outputs);
  return true;
}

static bool evaluate_now(const kiln_graph *g, const kiln_node *n, kiln_tensor **outs) {
  kiln_value *in[FOLD_MAX_IO] = {0}, *out[FOLD_MAX_IO] = {0};
  bool wanted[FOLD_MAX_IO];
  bool ok = true;
  for (int i = 0; i < n->n_inputs && ok; i++) {
    if (n->inputs[i] < 0) continue;
    kiln_tensor *t = (kiln_tensor *)kiln_opt_const(g, n->inputs[i]);
    kiln_status_t st = kiln_value_from_tensor(kiln_tensor_retain(t), &in[i]);
    ok = !st;
    kiln_status_free(st);
  }
  for (int i = 0; i < n->n_outputs; i++) wanted[i] = n->outputs[i] >= 0;
  if (ok) {
    kiln_kernel_ctx ctx = {n, n->opset, n->n_inputs, in, n->n_outputs, out, wanted, NULL, NULL};
    kiln_status_t st = kiln_kernel_check_narrow_inputs(&ctx);
    if (!st) st = n->op->ref_kernel(&ctx);
    /* An error is the run's to report, with the node's real context. */
    ok = !st;
    kiln_status_free(st);
  }
  for (int i = 0; i < n->n_outputs && ok; i++) {
    if (n->outputs[i] < 0) continue;
    ok = out[i] && out[i]->kind == KILN_VALUE_TENSOR && output_type_ok(&g->values[n->outputs[i]], out[i]->tensor);
    if (ok) outs[i] = kiln_tensor_retain(out[i]->tensor);
  }
  for (int i = 0; i < FOLD_MAX_IO; i++) {
    kiln_value_free(in[i]);
    kiln_value_free(out[i]);
  }
  if (!ok)
    for (int i = 0; i < n->n_outputs; i++) {
      kiln_tensor_release(outs[i]);
      outs[i] = NULL;
    }
  return ok;
}

/* Whether node n's outputs are all known values that may become constants. */
static bool known_outputs(const kiln_graph *g, const kiln_node *n, bool inputs_const) {
  bool shape_op = kiln_node_is(n, KILN_OP_Shape) || kiln_node_is(n, KILN_OP_Size);
  /* Shape/Size depend only on the input's (specialized) type; anything else
   * only on its inputs, which must be constants themselves. */
  if (!inputs_const && !(shape_op && kiln_opt_shapes_trusted(g))) return false;
  if (shape_op && !inputs_const) {
    int x = n->n_inputs > 0 ? n->inputs[0] : -1;
    if (x < 0 || !kiln_opt_shape_known(&g->values[x].type)) return false;
  }
  bool any = false;
  for (int i = 0; i < n->n_outputs; i++) {
    int id = n->outputs[i];
    if (id < 0) continue;
    const kiln_tensor *kv = g->values[id].known_value;
    if (!kv || !output_type_ok(&g->values[id], kv)) return false;
    any = true;
  }
  return any;
}

/* Whether every read of value v is as a weight or normalization parameter
 * (Conv/ConvTranspose/Gemm/MatMul input 1 or 2, a normalization's scale,
 * bias and statistics, PRelu's slope): such a value is read whole by a
 * kernel that prepares it once, so a constant there is worth its bytes
 * (the "light" ONNX models make every weight with ConstantOfShape). */
static bool read_as_weights(const kiln_graph *g, const kiln_opt_uses *u, int v) {
  if (v < 0 || u->pinned[v] || u->count[v] == 0) return false;
  for (int k = u->start[v]; k < u->start[v + 1]; k++) {
    const kiln_node *c = &g->nodes[u->cons[k]];
    bool ok = false;
    for (int i = 1; i < c->n_inputs && !ok; i++) {
      if (c->inputs[i] != v) continue;
      switch (kiln_node_op_id(c)) {
        case KILN_OP_Conv: case KILN_OP_ConvTranspose: case KILN_OP_Gemm: case KILN_OP_MatMul:
          ok = i <= 2;
          break;
        case KILN_OP_BatchNormalization: case KILN_OP_InstanceNormalization: case KILN_OP_LayerNormalization:
        case KILN_OP_PRelu:
          ok = true;
          break;
        default: break;
      }
    }
    if (!ok || c->inputs[0] == v) return false;
  }
  return true;
}

static kiln_status_t fold_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, fold_graph));
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  bool *dead = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof(bool));
  if (!dead) {
    kiln_opt_uses_free(&u);
    return KILN_OOM();
  }
  bool any = false;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    kiln_node *n = &g->nodes[ni];
    const kiln_op_def *op = n->op;
    if (!op || !op->ref_kernel || (op->flags & (KILN_OP_NONDETERMINISTIC | KILN_OP_CONTROL_FLOW)) || has_subgraph(n))
      continue;
    if (n->n_inputs > FOLD_MAX_IO || n->n_outputs > FOLD_MAX_IO) continue;
    bool inputs_const = true;
    for (int i = 0; i < n->n_inputs && inputs_const; i++)
      inputs_const = n->inputs[i] < 0 || kiln_opt_const(g, n->inputs[i]);
    kiln_tensor *outs[FOLD_MAX_IO] = {0};
    bool have = false;
    if (known_outputs(g, n, inputs_const)) {
      for (int i = 0; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0) outs[i] = kiln_tensor_retain(g->values[n->outputs[i]].known_value);
      have = true;
    } else if (inputs_const) {
      have = evaluate(g, n, outs);
    }
    if (!have) continue;
    int64_t out_bytes = 0, freed = 0, out_elems = 0, freed_elems = 0;
    bool any_out = false;
    for (int i = 0; i < n->n_outputs; i++)
      if (outs[i]) {
        out_bytes += (int64_t)kiln_tensor_nbytes(outs[i]);
        out_elems += outs[i]->numel;
        any_out = true;
      }
    for (int i = 0; i < n->n_inputs; i++) {
      int id = n->inputs[i];
      bool repeat = false;
      for (int k = 0; k < i; k++) repeat |= n->inputs[k] == id;
      if (id >= 0 && !repeat && kiln_opt_const(g, id) && kiln_opt_only_read_by(&u, id, ni)) {
        freed += (int64_t)kiln_tensor_nbytes(g->values[id].constant);
        freed_elems += g->values[id].constant->numel;
      }
    }
    /* A Constant node's value lives in its attribute, which goes with the node. */
    for (int a = 0; a < n->n_attrs; a++) {
      const kiln_attr *at = &n->attrs[a];
      if (at->t) {
        freed += (int64_t)kiln_tensor_nbytes(at->t);
        freed_elems += at->t->numel;
      }
      for (int k = 0; at->tensors && k < at->n; k++)
        if (at->tensors[k]) {
          freed += (int64_t)kiln_tensor_nbytes(at->tensors[k]);
          freed_elems += at->tensors[k]->numel;
        }
    }
    bool weights = true;
    for (int i = 0; i < n->n_outputs && weights; i++)
      weights = n->outputs[i] < 0 || read_as_weights(g, &u, n->outputs[i]);
    bool fold = any_out && (out_bytes <= FOLD_MAX_BYTES || (weights && out_bytes <= FOLD_MAX_WEIGHT_BYTES)) &&
                (out_bytes <= FOLD_FREE_BYTES || out_bytes <= freed || out_elems <= freed_elems || weights);
    for (int i = 0; i < n->n_outputs; i++) {
      if (!outs[i]) continue;
      if (fold) {
        kiln_value_def *v = &g->values[n->outputs[i]];
        kiln_tensor_release(v->constant);
        v->constant = outs[i];
        v->producer = -1;
        if (!kiln_opt_shape_known(&v->type)) kiln_type_init_tensor(&v->type, outs[i]->dtype, outs[i]->rank, outs[i]->dims);
      } else {
        kiln_tensor_release(outs[i]);
      }
    }
    if (fold) dead[ni] = any = true;
  }
  kiln_status_t st = any ? kiln_opt_remove_nodes(g, dead) : NULL;
  free(dead);
  kiln_opt_uses_free(&u);
  return st;
}

kiln_status_t kiln_pass_fold_constants(kiln_graph *g) { return fold_graph(g); }
