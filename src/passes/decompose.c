/* decompose: ops with more than one output rewritten as the graph of
 * single-output ops they compute, so compiling devices fuse and compile
 * them (a kernel has one output).
 *
 *   DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point   (ops/quant.c's rules):
 *     xc    = Where(IsNaN(x), 0, x)           NaN does not count (ref skips it)
 *     lo    = Min(ReduceMin(xc), 0), hi = Max(ReduceMax(xc), 0)   the range always holds 0
 *     scale = (hi - lo) / 255                                  -> y_scale
 *     zp    = Cast<u8>(Clip(Round(-lo / scale), 0, 255))       -> y_zero_point (0/0 is NaN: Cast gives 0)
 *     y     = Where(scale > 0, QuantizeLinear(x, scale, zp), zp)
 *
 * Only for an f32 x of known rank; anything else stays for ref. */
#include "passes/passes_opt.h"

#include <stdio.h>

typedef struct builder {
  kiln_graph *g;
  int pos;         /* where the next node goes */
  char base[200];  /* the decomposed node's name */
  int count;
  kiln_status_t st;
} builder;

static int value(builder *b, kiln_dtype dt, int rank, const int64_t *dims) {
  if (b->st) return -1;
  kiln_type t = {0};
  kiln_type_init_tensor(&t, dt, rank, dims);
  int id = -1;
  b->st = kiln_opt_new_value(b->g, b->base, &t, &id);
  kiln_type_clear(&t);
  return id;
}

static int scalar_const(builder *b, kiln_dtype dt, double v) {
  if (b->st) return -1;
  kiln_tensor *t;
  if ((b->st = kiln_tensor_new(dt, 0, NULL, &t))) return -1;
  kiln_store_f64(t->data, dt, 0, v);
  int id = -1;
  b->st = kiln_opt_new_const(b->g, b->base, t, &id);
  return id;
}

/* Appends op(ins) -> out (out: an existing value id, or -1 for a new one of
 * dtype dt and the given shape); returns the output id. */
static int node(builder *b, const char *op, int opset, int n_in, const int *ins, int out, kiln_dtype dt, int rank,
                const int64_t *dims) {
  if (b->st) return -1;
  if (out < 0) out = value(b, dt, rank, dims);
  if (b->st) return -1;
  char name[256];
  snprintf(name, sizeof name, "%s_%d_%s", b->base, b->count++, op);
  int idx;
  b->st = kiln_opt_insert_node(b->g, b->pos, name, op, "", opset, n_in, ins, 1, &out, &idx);
  if (!b->st) b->pos = idx + 1;
  return out;
}

static kiln_status_t decompose_dql(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->n_inputs != 1 || n->inputs[0] < 0 || n->n_outputs != 3) return NULL;
  int x = n->inputs[0];
  const kiln_type *xt = &g->values[x].type;
  if (xt->kind != KILN_TYPE_TENSOR || xt->dtype != KILN_DTYPE_F32 || xt->rank < 0) return NULL;
  int outs[3] = {n->outputs[0], n->outputs[1], n->outputs[2]};
  builder b = {g, ni + 1, "", 0, NULL};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  int rank = xt->rank;
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = xt->dims[d];
  /* The decomposed node goes first (its outputs are written by the new nodes). */
  bool *dead = calloc((size_t)g->n_nodes, sizeof *dead);
  if (!dead) return KILN_OOM();
  dead[ni] = true;
  kiln_status_t st = kiln_opt_remove_nodes(g, dead);
  free(dead);
  if (st) return st;
  b.pos = ni;
  int zero = scalar_const(&b, KILN_DTYPE_F32, 0.0);
  int isnan_ = node(&b, "IsNaN", 13, 1, &x, -1, KILN_DTYPE_BOOL, rank, dims);
  int xc = node(&b, "Where", 16, 3, (int[]){isnan_, zero, x}, -1, KILN_DTYPE_F32, rank, dims);
  int mn = node(&b, "ReduceMin", 13, 1, &xc, -1, KILN_DTYPE_F32, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(&g->nodes[b.pos - 1], "keepdims", 0);
  int mx = node(&b, "ReduceMax", 13, 1, &xc, -1, KILN_DTYPE_F32, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(&g->nodes[b.pos - 1], "keepdims", 0);
  int lo = node(&b, "Min", 13, 2, (int[]){mn, zero}, -1, KILN_DTYPE_F32, 0, NULL); /* the range holds 0 */
  int hi = node(&b, "Max", 13, 2, (int[]){mx, zero}, -1, KILN_DTYPE_F32, 0, NULL);
  int range = node(&b, "Sub", 14, 2, (int[]){hi, lo}, -1, KILN_DTYPE_F32, 0, NULL);
  int k255 = scalar_const(&b, KILN_DTYPE_F32, 255.0);
  int scale = node(&b, "Div", 14, 2, (int[]){range, k255}, outs[1] >= 0 ? outs[1] : -1, KILN_DTYPE_F32, 0, NULL);
  int nlo = node(&b, "Neg", 13, 1, &lo, -1, KILN_DTYPE_F32, 0, NULL);
  int r = node(&b, "Div", 14, 2, (int[]){nlo, scale}, -1, KILN_DTYPE_F32, 0, NULL);
  int rr = node(&b, "Round", 11, 1, &r, -1, KILN_DTYPE_F32, 0, NULL);
  int clipped = node(&b, "Clip", 13, 3, (int[]){rr, zero, k255}, -1, KILN_DTYPE_F32, 0, NULL);
  int zp = node(&b, "Cast", 13, 1, &clipped, outs[2] >= 0 ? outs[2] : -1, KILN_DTYPE_U8, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(&g->nodes[b.pos - 1], "to", KILN_DTYPE_U8);
  int q = node(&b, "QuantizeLinear", 13, 3, (int[]){x, scale, zp}, -1, KILN_DTYPE_U8, rank, dims);
  int pos = node(&b, "Greater", 13, 2, (int[]){scale, zero}, -1, KILN_DTYPE_BOOL, 0, NULL);
  if (outs[0] >= 0) node(&b, "Where", 16, 3, (int[]){pos, q, zp}, outs[0], KILN_DTYPE_U8, rank, dims);
  return b.st;
}

static kiln_status_t decompose_graph(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, decompose_graph));
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) /* from the end: insertions move no node still to visit */
    if (kiln_node_is(&g->nodes[ni], KILN_OP_DynamicQuantizeLinear)) KILN_TRY(decompose_dql(g, ni));
  return NULL;
}

kiln_status_t kiln_pass_decompose(kiln_graph *g) { return decompose_graph(g); }
