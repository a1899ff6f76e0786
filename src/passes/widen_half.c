/* widen-half: f16 and bf16 arithmetic in f32, the halves kept as storage.
 *
 * No compiling device computes in f16 or bf16; their kernels load and store
 * the halves and compute in f32 (codegen/lower.c). So every node that
 * computes on a half input or output becomes the same node on f32 values
 * between Casts, which the devices then compile (and fuse: a Cast's
 * conversion lands in the load or store of the kernel next to it):
 *
 *   y:f16 = Op(x:f16, w:f16)  ->  x' = Cast<f32>(x), w' = Cast<f32>(w),
 *                                 y':f32 = Op(x', w'), y = Cast<f16>(y')
 *
 * A value gets one f32 twin: a widened node reads the twin of what a widened
 * node wrote, so a chain of widened nodes stays in f32 between them (as
 * ONNX Runtime's cast insertion for its CPU's fp16 models does), and only
 * values that a kept node or the graph's outputs read are rounded to the
 * half. Rounding after every node instead (ONNX's letter, ref's way) was
 * measured: a fused chain then converts at each node, 2.5x the time of the
 * f32 chain (BERT's GELU), and lands no closer to the f32 model (ORT's
 * way is closer: transformer_encoder's max error 0.003 against 0.005).
 * Results differ from ref's by a few of the half's ulps, which the
 * differential test and kiln verify allow (kiln_dtype_tolerance_floor).
 * Constant halves (weights) become f32 constants when fold-constants
 * folds their Casts.
 *
 * Kept as they are: nodes that only move elements (views, gathers, Where,
 * Pad; the devices store halves), nodes whose output dtype is an attribute
 * (Cast, the random ops), BitCast (the bits are its meaning), nodes with
 * subgraphs or values other than tensors, and domains other than ONNX's and
 * kiln's. For the compiling devices only (kiln_plan_optimize_for): ref runs
 * the graph as written. */
#include "passes/passes_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

static bool is_half(const kiln_graph *g, int v) {
  const kiln_type *t = v >= 0 ? &g->values[v].type : NULL;
  return t && t->kind == KILN_TYPE_TENSOR && kiln_dtype_is_half(t->dtype);
}

/* Ops whose results are elements of their inputs (or their shape) moved, or
 * whose output dtype an attribute or the bits decide: not widened. */
static bool kept_op(kiln_op_id id) {
  switch (id) {
    case KILN_OP_Identity: case KILN_OP_Reshape: case KILN_OP_Flatten: case KILN_OP_Squeeze:
    case KILN_OP_Unsqueeze: case KILN_OP_Transpose: case KILN_OP_Concat: case KILN_OP_Slice: case KILN_OP_Split:
    case KILN_OP_Gather: case KILN_OP_GatherElements: case KILN_OP_GatherND: case KILN_OP_Expand: case KILN_OP_Tile:
    case KILN_OP_Pad: case KILN_OP_Where: case KILN_OP_Shape: case KILN_OP_Size: case KILN_OP_DepthToSpace:
    case KILN_OP_SpaceToDepth: case KILN_OP_Compress: case KILN_OP_ReverseSequence: case KILN_OP_Trilu:
    case KILN_OP_CenterCropPad: case KILN_OP_TensorScatter: case KILN_OP_ConstantOfShape: case KILN_OP_Constant:
    case KILN_OP_Cast: case KILN_OP_CastLike: case KILN_OP_BitCast: case KILN_OP_EyeLike: case KILN_OP_Bernoulli:
    case KILN_OP_RandomUniformLike: case KILN_OP_RandomNormalLike: case KILN_OP_RandomUniform:
    case KILN_OP_RandomNormal: case KILN_OP_Multinomial: case KILN_OP_UNKNOWN:
      return true;
    default: return false;
  }
}

static bool widens(const kiln_graph *g, const kiln_node *n) {
  if (kept_op(kiln_node_op_id(n))) return false;
  if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") && strcmp(n->domain, KILN_FUSED_DOMAIN)) return false;
  for (int a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs) return false;
  bool any = false;
  for (int side = 0; side < 2; side++) {
    int count = side ? n->n_outputs : n->n_inputs;
    const int *ids = side ? n->outputs : n->inputs;
    for (int i = 0; i < count; i++) {
      if (ids[i] < 0) continue;
      if (g->values[ids[i]].type.kind != KILN_TYPE_TENSOR) return false;
      any |= is_half(g, ids[i]);
    }
  }
  return any;
}

/* A Cast of `from` into `to` (the value ids exist, typed), appended: the
 * toposort at the end puts it in place. */
static kiln_status_t append_cast(kiln_graph *g, const char *base, int from, int to) {
  char name[300]; /* the node's name and the value's: one Cast per value */
  snprintf(name, sizeof name, "%s/widen_half/%s", base, g->values[to].name ? g->values[to].name : "");
  /* opset 19: into bf16 it rounds to nearest even (before, it truncates) */
  KILN_TRY(kiln_opt_append_node(g, name, "Cast", "", 19, 1, &from, 1, &to));
  return kiln_opt_set_attr_int(&g->nodes[g->n_nodes - 1], "to", g->values[to].type.dtype);
}

/* A new f32 value shaped as half value v. */
static kiln_status_t f32_twin(kiln_graph *g, int v, int *out) {
  kiln_type t = {0};
  kiln_type_copy(&t, &g->values[v].type);
  t.dtype = KILN_DTYPE_F32;
  char base[256];
  snprintf(base, sizeof base, "%s", g->values[v].name);
  kiln_status_t st = kiln_opt_new_value(g, base, &t, out);
  kiln_type_clear(&t);
  return st;
}

static kiln_status_t widen_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, widen_graph));
  int n_nodes = g->n_nodes, n_values = g->n_values;
  bool any = false;
  for (int i = 0; i < n_nodes && !any; i++) any = widens(g, &g->nodes[i]);
  if (!any) return NULL;
  /* twin[v]: the f32 value standing for half value v, -1 while none. Only
   * values that exist now have twins (the new ones are f32). */
  int *twin = malloc((size_t)n_values * sizeof *twin);
  if (!twin) return KILN_OOM();
  for (int v = 0; v < n_values; v++) twin[v] = -1;
  kiln_status_t st = NULL;
  /* In node order (topological): a value's producer comes before its readers. */
  for (int i = 0; i < n_nodes && !st; i++) {
    if (!widens(g, &g->nodes[i])) continue;
    char base[256];
    snprintf(base, sizeof base, "%s", g->nodes[i].name ? g->nodes[i].name : "node");
    for (int k = 0; k < g->nodes[i].n_inputs && !st; k++) {
      int v = g->nodes[i].inputs[k];
      if (v < 0 || v >= n_values || !is_half(g, v)) continue;
      if (twin[v] < 0) {
        st = f32_twin(g, v, &twin[v]);
        if (!st) st = append_cast(g, base, v, twin[v]);
      }
      if (!st) g->nodes[i].inputs[k] = twin[v];
    }
    for (int k = 0; k < g->nodes[i].n_outputs && !st; k++) {
      int v = g->nodes[i].outputs[k];
      if (v < 0 || v >= n_values || !is_half(g, v)) continue;
      st = f32_twin(g, v, &twin[v]);
      if (st) break;
      g->nodes[i].outputs[k] = twin[v];
      g->values[twin[v]].producer = i;
      /* v keeps its id and readers that are kept; dce drops the Cast when none is left */
      st = append_cast(g, base, twin[v], v);
    }
  }
  free(twin);
  if (!st) st = kiln_graph_toposort(g);
  return st;
}

kiln_status_t kiln_pass_widen_half(kiln_graph *g) { return widen_graph(g); }
