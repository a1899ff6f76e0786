/* decompose: ops with more than one output rewritten as the graph of
 * single-output ops they compute, so compiling devices fuse and compile
 * them (a kernel has one output); ops without a compute definition of
 * their own (normalizations, losses) as the ops that have one; a Concat of
 * more than 8 inputs as a tree of Concats of at most 8 (a compiled view's
 * operands); a Softmax over an axis that is not the last between two
 * Transposes. ref runs the graph as written: its kernels are the truth
 * each rewrite follows.
 *
 *   DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point   (ops/quant.c's rules):
 *     xc    = Where(IsNaN(x), 0, x)           NaN does not count (ref skips it)
 *     lo    = Min(ReduceMin(xc), 0), hi = Max(ReduceMax(xc), 0)   the range always holds 0
 *     scale = (hi - lo) / 255                                  -> y_scale
 *     zp    = Cast<u8>(Clip(Round(-lo / scale), 0, 255))       -> y_zero_point (0/0 is NaN: Cast gives 0)
 *     y     = Where(scale > 0, QuantizeLinear(x, scale, zp), zp)
 *
 * Only for an f32 x of known rank; anything else stays for ref.
 *
 *   QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B?), QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
 *   (ops/quant.c's float32 requantization, ORT's):
 *     acc = ConvInteger(x, w, xz, wz) [+ B as int32 [C, 1...]]  /  MatMulInteger(a, b, az, bz)
 *     y   = QuantizeLinear(Cast<f32>(acc) * M, 1, yz)
 *   M the constant multiplier kiln_qlinear_multiplier(xs, ws[c], ys) (per
 *   output channel, row or column, else a scalar), so the compiled integer
 *   sums and the f32 tail are bit-equal to ref. Only with constant scales and
 *   zero points of the forms ref and the compiled pieces take
 *   (decompose_qlinear_conv / _matmul say which).
 *
 *   BatchNormalization in training mode -> Y, running mean and variance:
 *     the batch statistics as two ReduceMeans, the normalization as
 *     elementwise ops, the running statistics' update (decompose_batchnorm).
 *
 *   RNN / GRU / LSTM(X, W, R, B, sequence_lens, initial_h, initial_c, P) -> Y, Y_h, Y_c
 *   (ops/rnn.c's cells, attributes read by the same kiln_rnn_config_of):
 *     per direction d: XW = MatMul(X, W_d^T) + Wb_d + Rb_d   all time steps in one GEMM
 *     (GRU with linear_before_reset keeps Rb_h for the step), then the time
 *     loop unrolled, t ascending (reverse: descending), each step
 *       pre = XW[t] + MatMul(H, R_d^T)    the recurrent GEMM, the add as its epilogue
 *       the gates' slices, peepholes, clip, activations, the state update
 *       with sequence_lens: H = Where(t < len, H_new, H), Y[t] = Where(t < len, H_new, 0)
 *     Y = Concat of the steps (trees of at most 8 inputs), Y_h / Y_c the last states.
 *   A device that runs the recurrent ops whole on a routine of its own
 *   (KILN_DEVICE_FEATURE_RECURRENT_ROUTINE: the cpu, devices/cpu/cpu_rnn.c)
 *   gets kiln_pass_decompose_keep_recurrent, which leaves them.
 *   Why unrolled rather than a Loop over a compiled body (runtime/plan_bodies):
 *   the specialized graph knows the sequence length, a Loop iteration is a
 *   host step (a body-plan call per time step, the state passed through the
 *   host), while unrolled steps are plain kernels in one device segment and
 *   each step's gate arithmetic fuses into its recurrent GEMM's consumer.
 *   The price is graph size: at most KILN_RNN_MAX_STEPS steps (sequence
 *   length x directions); longer sequences stay on ref. sequence_lens that
 *   is a constant is checked against ref's range here (out of range: ref
 *   reports it); a run-time one becomes masks, and a length outside
 *   [0, seq] acts as its nearest bound instead of ref's error. Only f32,
 *   shapes known, every input of ref's shape.
 *
 * The normalizations and losses below, as their ref kernels compute them
 * (statistics in two passes: the mean, then the mean of the squared
 * deviations), only for f32 with shapes known and an input ref accepts
 * (anything else, empty tensors too, stays on ref, which words the error):
 *
 *   GroupNormalization(X [N, C, ...], scale, bias, num_groups G, epsilon)   (ops/nn_transformer.c):
 *     Xg   = Reshape(X, [N, G, C/G * prod(spatial)])   a group's elements are contiguous
 *     mean = ReduceMean(Xg, 2), D = Xg - mean, var = ReduceMean(D * D, 2)
 *     Yg   = D * (1 / Sqrt(var + epsilon))
 *     opset 18 (scale, bias [G]):  Reshape(Yg * scale[G, 1] + bias[G, 1], X's shape)
 *     opset 21 (scale, bias [C]):  Reshape(Yg, X's shape) * scale[C, 1...] + bias[C, 1...]
 *     (stash_type other than f32 stays on ref)
 *
 *   MeanVarianceNormalization(X, axes = [0, 2, 3])   (ops/nn_norm.c: the ONNX function body):
 *     D = X - ReduceMean(X, axes), Y = D / (Sqrt(ReduceMean(D * D, axes)) + 1e-9)
 *
 *   LpNormalization(X, axis = -1, p in {1, 2})   (ops/reduce_softmax.c):
 *     norm = ReduceL1 / ReduceL2(X, axis), Y = X / Where(norm == 0, 1, norm)
 *     (an all-zero row gives 0 as ref; a row whose squares all underflow f32,
 *     |x| < 1e-19, gives itself where ref, in double, normalizes it)
 *
 *   LayerNormalization(X, Scale, B, axis, epsilon) -> Y, Mean, InvStdDev   (ops/nn_norm.c)
 *   when Mean or InvStdDev is read (one that nobody reads is dropped first; a
 *   LayerNormalization left with Y alone compiles whole):
 *     Mean = ReduceMean(X, axis..), D = X - Mean, InvStdDev = 1 / Sqrt(ReduceMean(D * D, axis..) + epsilon)
 *     Y    = D * InvStdDev * Scale + B   (Scale, B broadcast into X; stash_type f32 only)
 *
 *   NegativeLogLikelihoodLoss(lp [N, C, d...], target [N, d...], weight [C]) and
 *   SoftmaxCrossEntropyLoss(scores, labels, weights) -> loss, log_prob   (ops/nn_loss.c):
 *     SCE: lp = LogSoftmax(scores, axis 1) (-> log_prob; Transposes around it next round)
 *     ign  = target == ignore_index    (when the attribute is given)
 *     t    = Where(ign, 0, Where(target < 0, C, target))
 *     l    = -GatherElements(lp, Reshape(t, [N, 1, d...]), axis 1) * Gather(weight, t)
 *     l    = Where(ign, 0, l)                                     -> loss (reduction none)
 *     sum: ReduceSum(l); mean: ReduceSum(l) / ReduceSum(Where(ign, 0, weight[t] or 1))
 *     (every target ignored: 0 / 0, NaN as ref; no weight nor ignore_index: ReduceMean(l))
 *   Range: a constant target out of [0, C) that is not ignored leaves the
 *   node to ref, which reports it. A run-time one is mapped out of range
 *   when negative (a gather would wrap it) and left to the gathers' checks:
 *   ref's GatherElements and Gather report it, and a compiled Gather's
 *   run-time indices are checked by the plan before the kernel (runtime/plan.c,
 *   kiln_lower_runtime_indices): an error naming the gather, not the loss. */
#include "passes/passes_opt.h"
#include "ops/quant.h"
#include "ops/rnn.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

typedef struct builder {
  kiln_graph *g;
  int pos;         /* where the new nodes go (kiln_opt_move_tail when done) */
  int first;       /* n_nodes before the first new node: they are appended at the end */
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
  b->st = kiln_opt_append_node(b->g, name, op, "", opset, n_in, ins, 1, &out);
  return out;
}

/* The node node() appended last. */
static kiln_node *last(builder *b) { return &b->g->nodes[b->g->n_nodes - 1]; }

/* Moves the appended nodes into place. */
static kiln_status_t finish(builder *b) {
  if (!b->st) b->st = kiln_opt_move_tail(b->g, b->first, b->pos);
  return b->st;
}

/* Removes node ni, whose outputs the new nodes will write, and starts the
 * builder there: b's nodes are appended, then moved to ni by finish(). */
static kiln_status_t replace_node(builder *b, kiln_graph *g, int ni) {
  bool *dead = calloc((size_t)g->n_nodes, sizeof *dead);
  if (!dead) return KILN_OOM();
  dead[ni] = true;
  kiln_status_t st = kiln_opt_remove_nodes(g, dead);
  free(dead);
  b->g = g;
  b->pos = ni;
  b->first = g->n_nodes;
  return st;
}

static kiln_status_t decompose_dql(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->n_inputs != 1 || n->inputs[0] < 0 || n->n_outputs != 3) return NULL;
  int x = n->inputs[0];
  const kiln_type *xt = &g->values[x].type;
  if (xt->kind != KILN_TYPE_TENSOR || xt->dtype != KILN_DTYPE_F32 || xt->rank < 0) return NULL;
  int outs[3] = {n->outputs[0], n->outputs[1], n->outputs[2]};
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  int rank = xt->rank;
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = xt->dims[d];
  /* The range is over every element, in any order: read through the
   * transposes and reshapes in front (attention's heads are quantized as
   * they are permuted), so the reductions read their source in place. */
  int src = x;
  for (int hops = 0; hops < 8; hops++) {
    int p = g->values[src].producer;
    if (p < 0 || g->nodes[p].n_inputs < 1 || g->nodes[p].inputs[0] < 0) break;
    int op = kiln_node_op_id(&g->nodes[p]);
    if (op != KILN_OP_Transpose && op != KILN_OP_Reshape && op != KILN_OP_Flatten && op != KILN_OP_Squeeze &&
        op != KILN_OP_Unsqueeze && op != KILN_OP_Identity)
      break;
    const kiln_type *st = &g->values[g->nodes[p].inputs[0]].type;
    if (st->kind != KILN_TYPE_TENSOR || st->dtype != KILN_DTYPE_F32 || st->rank < 0 ||
        kiln_shape_numel(st->rank, st->dims) != kiln_shape_numel(rank, dims))
      break;
    src = g->nodes[p].inputs[0];
  }
  const kiln_type *srct = &g->values[src].type;
  int src_rank = srct->rank;
  int64_t src_dims[KILN_MAX_RANK];
  for (int d = 0; d < src_rank; d++) src_dims[d] = srct->dims[d];
  KILN_TRY(replace_node(&b, g, ni));
  int zero = scalar_const(&b, KILN_DTYPE_F32, 0.0);
  int isnan_ = node(&b, "IsNaN", 13, 1, &src, -1, KILN_DTYPE_BOOL, src_rank, src_dims);
  int xc = node(&b, "Where", 16, 3, (int[]){isnan_, zero, src}, -1, KILN_DTYPE_F32, src_rank, src_dims);
  int mn = node(&b, "ReduceMin", 13, 1, &xc, -1, KILN_DTYPE_F32, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 0);
  int mx = node(&b, "ReduceMax", 13, 1, &xc, -1, KILN_DTYPE_F32, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 0);
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
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "to", KILN_DTYPE_U8);
  int q = node(&b, "QuantizeLinear", 13, 3, (int[]){x, scale, zp}, -1, KILN_DTYPE_U8, rank, dims);
  int pos = node(&b, "Greater", 13, 2, (int[]){scale, zero}, -1, KILN_DTYPE_BOOL, 0, NULL);
  if (outs[0] >= 0) node(&b, "Where", 16, 3, (int[]){pos, q, zp}, outs[0], KILN_DTYPE_U8, rank, dims);
  return finish(&b);
}

#define KILN_RNN_MAX_STEPS 512

static int const_of(builder *b, kiln_tensor *t) {
  if (b->st || !t) return -1;
  int id = -1;
  b->st = kiln_opt_new_const(b->g, b->base, t, &id);
  return id;
}

static int ints_const(builder *b, int n, const int64_t *v) {
  if (b->st) return -1;
  kiln_tensor *t;
  int64_t d = n;
  if ((b->st = kiln_tensor_new(KILN_DTYPE_I64, 1, &d, &t))) return -1;
  memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
  return const_of(b, t);
}

static int last_set_float(builder *b, const char *name, double v) {
  if (!b->st) b->st = kiln_opt_set_attr_float(last(b), name, (float)v);
  return 0;
}

static kiln_dtype g_dtype(const builder *b, int v) { return v >= 0 ? b->g->values[v].type.dtype : KILN_DTYPE_F32; }

typedef struct rnn_shape {
  int64_t T, B, I, H, G, nd;
} rnn_shape;

static int f2(builder *b, const char *op, int x, int y, int rank, const int64_t *dims) {
  return node(b, op, 14, 2, (int[]){x, y}, -1, KILN_DTYPE_F32, rank, dims);
}

/* x[..., lo:hi, ...] along axis, shape dims with that axis hi - lo. */
static int slice(builder *b, int x, int axis, int64_t lo, int64_t hi, int rank, const int64_t *in_dims) {
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, in_dims, sizeof(int64_t) * (size_t)rank);
  dims[axis] = hi - lo;
  int ins[4] = {x, ints_const(b, 1, &lo), ints_const(b, 1, &hi), ints_const(b, 1, (int64_t[]){axis})};
  return node(b, "Slice", 13, 4, ins, -1, g_dtype(b, x), rank, dims);
}

static int reshape(builder *b, int x, int rank, const int64_t *dims, int out) {
  return node(b, "Reshape", 14, 2, (int[]){x, ints_const(b, rank, dims)}, out, g_dtype(b, x), rank, dims);
}

static int transpose(builder *b, int x, int rank, const int64_t *perm, const int64_t *in_dims, int out) {
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = in_dims[perm[i]];
  int y = node(b, "Transpose", 13, 1, &x, out, g_dtype(b, x), rank, dims);
  if (!b->st) b->st = kiln_opt_set_attr_ints(last(b), "perm", rank, perm);
  return y;
}

/* Concat of ids along `axis` (shapes known, equal but along axis), at
 * most 8 inputs a node (a compiled view holds 8 operands): a tree whose
 * inner Concats fuse into the last one's kernel. out: an existing value,
 * or -1. */
static int concat_tree(builder *b, const int *ids, int n, int64_t axis, int opset, int out) {
  if (b->st) return -1;
  const kiln_type *t0 = &b->g->values[ids[0]].type;
  int rank = t0->rank;
  kiln_dtype dt = t0->dtype;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, t0->dims, sizeof(int64_t) * (size_t)rank);
  int parts[8];
  if (n > 8) {
    int np = 0, per = (n + 7) / 8;
    for (int i = 0; i < n; i += per) {
      int k = n - i < per ? n - i : per;
      parts[np++] = k == 1 ? ids[i] : concat_tree(b, ids + i, k, axis, opset, -1);
    }
    ids = parts;
    n = np;
  }
  dims[axis] = 0;
  for (int i = 0; i < n && !b->st; i++) dims[axis] += b->g->values[ids[i]].type.dims[axis];
  int y = node(b, "Concat", opset, n, ids, out, dt, rank, dims);
  if (!b->st) b->st = kiln_opt_set_attr_int(last(b), "axis", axis);
  return y;
}


/* Rows [r0, r1) of direction d of a [nd, rows, cols] weight, transposed to
 * [cols, r1 - r0] (the MatMul's B). A constant weight gives a constant
 * here: fold-constants would not fold the Slice of a weight that both
 * directions read (it keeps a constant's bytes from being copied). */
static int weight_t(builder *b, int w, int64_t d, int64_t r0, int64_t r1, const int64_t *wdims) {
  int64_t rows = wdims[1], cols = wdims[2], n = r1 - r0;
  const kiln_tensor *c = kiln_opt_const(b->g, w);
  if (c && c->dtype == KILN_DTYPE_F32) {
    kiln_tensor *t;
    if (b->st || (b->st = kiln_tensor_new(KILN_DTYPE_F32, 2, (int64_t[]){cols, n}, &t))) return -1;
    const float *src = (const float *)c->data + (d * rows + r0) * cols;
    float *dst = t->data;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < cols; j++) dst[j * n + i] = src[i * cols + j];
    return const_of(b, t);
  }
  int64_t rc[2] = {rows, cols}, nc[2] = {n, cols}, p10[2] = {1, 0};
  int m = reshape(b, slice(b, w, 0, d, d + 1, 3, wdims), 2, rc, -1);
  if (n != rows) m = slice(b, m, 0, r0, r1, 2, rc);
  return transpose(b, m, 2, p10, nc, -1);
}

/* One activation of ops/rnn.c's table as compiled ops. */
static int activation(builder *b, const rnn_act *a, int x, int rank, const int64_t *dims) {
  int y;
  switch (a->kind) {
    case ACT_RELU: return node(b, "Relu", 14, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
    case ACT_TANH: return node(b, "Tanh", 13, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
    case ACT_SIGMOID: return node(b, "Sigmoid", 13, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
    case ACT_AFFINE:
      y = f2(b, "Mul", x, scalar_const(b, KILN_DTYPE_F32, a->alpha), rank, dims);
      return f2(b, "Add", y, scalar_const(b, KILN_DTYPE_F32, a->beta), rank, dims);
    case ACT_LEAKY_RELU:
      y = node(b, "LeakyRelu", 16, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
      last_set_float(b, "alpha", a->alpha);
      return y;
    case ACT_THRESHOLDED_RELU: {
      int ge = node(b, "GreaterOrEqual", 16, 2, (int[]){x, scalar_const(b, KILN_DTYPE_F32, a->alpha)}, -1,
                    KILN_DTYPE_BOOL, rank, dims);
      return node(b, "Where", 16, 3, (int[]){ge, x, scalar_const(b, KILN_DTYPE_F32, 0)}, -1, KILN_DTYPE_F32, rank, dims);
    }
    case ACT_SCALED_TANH:
      y = f2(b, "Mul", x, scalar_const(b, KILN_DTYPE_F32, a->beta), rank, dims);
      y = node(b, "Tanh", 13, 1, &y, -1, KILN_DTYPE_F32, rank, dims);
      return f2(b, "Mul", y, scalar_const(b, KILN_DTYPE_F32, a->alpha), rank, dims);
    case ACT_HARD_SIGMOID:
      y = node(b, "HardSigmoid", 6, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
      last_set_float(b, "alpha", a->alpha);
      last_set_float(b, "beta", a->beta);
      return y;
    case ACT_ELU:
      y = node(b, "Elu", 6, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
      last_set_float(b, "alpha", a->alpha);
      return y;
    case ACT_SOFTSIGN: return node(b, "Softsign", 1, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
    case ACT_SOFTPLUS: return node(b, "Softplus", 1, 1, &x, -1, KILN_DTYPE_F32, rank, dims);
  }
  return -1;
}

static int clipped_act(builder *b, const rnn_cfg *c, const rnn_act *a, int x, const int64_t *bh) {
  if (c->has_clip)
    x = node(b, "Clip", 13, 3,
             (int[]){x, scalar_const(b, KILN_DTYPE_F32, -c->clip), scalar_const(b, KILN_DTYPE_F32, c->clip)}, -1,
             KILN_DTYPE_F32, 2, bh);
  return activation(b, a, x, 2, bh);
}

static bool f32_known(const kiln_graph *g, int v, int rank, const int64_t *dims) {
  if (v < 0) return true;
  const kiln_type *t = &g->values[v].type;
  return t->kind == KILN_TYPE_TENSOR && t->dtype == KILN_DTYPE_F32 && kiln_opt_shape_known(t) &&
         kiln_shape_equal(t->rank, t->dims, rank, dims);
}

static kiln_status_t decompose_rnn(kiln_graph *g, int ni, rnn_kind kind) {
  const kiln_node *n = &g->nodes[ni];
  rnn_cfg c;
  kiln_status_t st = kiln_rnn_config_of(n, kind, &c);
  if (st) { /* ref reports it */
    kiln_status_free(st);
    return NULL;
  }
  int in[8];
  for (int i = 0; i < 8; i++) in[i] = i < n->n_inputs ? n->inputs[i] : -1;
  if (kind != RNN_LSTM) in[6] = in[7] = -1;
  if (in[0] < 0 || in[1] < 0 || in[2] < 0) return NULL;
  const kiln_type *xt = &g->values[in[0]].type, *rt = &g->values[in[2]].type;
  if (xt->kind != KILN_TYPE_TENSOR || xt->dtype != KILN_DTYPE_F32 || !kiln_opt_shape_known(xt) || xt->rank != 3 ||
      rt->kind != KILN_TYPE_TENSOR || !kiln_opt_shape_known(rt) || rt->rank != 3)
    return NULL;
  rnn_shape s = {c.layout ? xt->dims[1] : xt->dims[0], c.layout ? xt->dims[0] : xt->dims[1], xt->dims[2],
                 rt->dims[2], c.gates, c.num_dir};
  if (s.T < 1 || s.B < 1 || s.I < 1 || s.H < 1 || s.T * s.nd > KILN_RNN_MAX_STEPS) return NULL;
  if (kiln_attr_int(n, "hidden_size", s.H) != s.H) return NULL;
  int64_t GH = s.G * s.H;
  int64_t wd[3] = {s.nd, GH, s.I}, rd[3] = {s.nd, GH, s.H}, bd[2] = {s.nd, 2 * GH}, pd[2] = {s.nd, 3 * s.H};
  int64_t sd[3] = {c.layout ? s.B : s.nd, c.layout ? s.nd : s.B, s.H};
  if (!f32_known(g, in[1], 3, wd) || !f32_known(g, in[2], 3, rd) || !f32_known(g, in[3], 2, bd) ||
      !f32_known(g, in[5], 3, sd) || !f32_known(g, in[6], 3, sd) || !f32_known(g, in[7], 2, pd))
    return NULL;
  const kiln_tensor *lens_c = NULL;
  if (in[4] >= 0) {
    const kiln_type *lt = &g->values[in[4]].type;
    if (lt->kind != KILN_TYPE_TENSOR || lt->dtype != KILN_DTYPE_I32 || !kiln_opt_shape_known(lt) ||
        !kiln_shape_equal(lt->rank, lt->dims, 1, &s.B))
      return NULL;
    if ((lens_c = kiln_opt_const(g, in[4])))
      for (int64_t i = 0; i < s.B; i++) {
        int32_t v = ((const int32_t *)lens_c->data)[i];
        if (v < 0 || v > s.T) return NULL;
      }
  }
  int outs[3] = {-1, -1, -1};
  for (int i = 0; i < 3 && i < n->n_outputs; i++) outs[i] = n->outputs[i];
  builder b = {.g = g, .pos = ni};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));

  int64_t bh[2] = {s.B, s.H}, st3[3] = {s.nd, s.B, s.H};
  int64_t p102[3] = {1, 0, 2};
  int x = c.layout ? transpose(&b, in[0], 3, p102, xt->dims, -1) : in[0];
  int h0 = in[5] >= 0 && c.layout ? transpose(&b, in[5], 3, p102, sd, -1) : in[5];
  int c0 = in[6] >= 0 && c.layout ? transpose(&b, in[6], 3, p102, sd, -1) : in[6];
  kiln_tensor *zt = NULL;
  if (!b.st) b.st = kiln_tensor_new(KILN_DTYPE_F32, 2, bh, &zt);
  int zero_bh = const_of(&b, zt), zero = scalar_const(&b, KILN_DTYPE_F32, 0), one = scalar_const(&b, KILN_DTYPE_F32, 1);
  int y_dirs[2] = {-1, -1}, h_dirs[2], c_dirs[2];
  int *ys = calloc((size_t)s.T, sizeof *ys);
  if (!ys) return KILN_OOM();
  for (int64_t d = 0; d < s.nd && !b.st; d++) {
    const rnn_act *act = c.acts[d];
    int64_t tbg[3] = {s.T, s.B, GH}, bg[2] = {s.B, GH};
    int xw = node(&b, "MatMul", 13, 2, (int[]){x, weight_t(&b, in[1], d, 0, GH, wd)}, -1, KILN_DTYPE_F32, 3, tbg);
    int rb_h = -1;
    bool lbr = kind == RNN_GRU && c.linear_before_reset;
    if (in[3] >= 0) {
      int64_t b2 = 2 * GH;
      int bias = reshape(&b, slice(&b, in[3], 0, d, d + 1, 2, bd), 1, &b2, -1);
      int wb = slice(&b, bias, 0, 0, GH, 1, &b2), rb = slice(&b, bias, 0, GH, 2 * GH, 1, &b2);
      int rbx = rb;
      if (lbr) { /* Rb_h is added to H R_h^T inside the reset gate's product */
        kiln_tensor *zh = NULL;
        if (!b.st) b.st = kiln_tensor_new(KILN_DTYPE_F32, 1, &s.H, &zh);
        rbx = node(&b, "Concat", 13, 2, (int[]){slice(&b, rb, 0, 0, 2 * s.H, 1, &GH), const_of(&b, zh)}, -1,
                   KILN_DTYPE_F32, 1, &GH);
        if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", 0);
        rb_h = slice(&b, rb, 0, 2 * s.H, GH, 1, &GH);
      }
      xw = f2(&b, "Add", xw, f2(&b, "Add", wb, rbx, 1, &GH), 3, tbg);
    }
    int rt_all = -1, rt_zr = -1, rt_h = -1;
    if (kind == RNN_GRU) {
      rt_zr = weight_t(&b, in[2], d, 0, 2 * s.H, rd);
      rt_h = weight_t(&b, in[2], d, 2 * s.H, GH, rd);
    } else {
      rt_all = weight_t(&b, in[2], d, 0, GH, rd);
    }
    int pi = -1, po = -1, pf = -1;
    if (in[7] >= 0) {
      int64_t h3 = 3 * s.H;
      int pdv = reshape(&b, slice(&b, in[7], 0, d, d + 1, 2, pd), 1, &h3, -1);
      pi = slice(&b, pdv, 0, 0, s.H, 1, &h3);
      po = slice(&b, pdv, 0, s.H, 2 * s.H, 1, &h3);
      pf = slice(&b, pdv, 0, 2 * s.H, h3, 1, &h3);
    }
    int h = h0 >= 0 ? reshape(&b, slice(&b, h0, 0, d, d + 1, 3, st3), 2, bh, -1) : zero_bh;
    int cs = kind != RNN_LSTM ? -1 : c0 >= 0 ? reshape(&b, slice(&b, c0, 0, d, d + 1, 3, st3), 2, bh, -1) : zero_bh;
    for (int64_t step = 0; step < s.T && !b.st; step++) {
      int64_t t = c.reverse[d] ? s.T - 1 - step : step;
      int xw_t = reshape(&b, slice(&b, xw, 0, t, t + 1, 3, tbg), 2, bg, -1);
      int h_new = -1, c_new = -1;
      if (kind == RNN_SIMPLE) {
        int pre = f2(&b, "Add", node(&b, "MatMul", 13, 2, (int[]){h, rt_all}, -1, KILN_DTYPE_F32, 2, bh), xw_t, 2, bh);
        h_new = clipped_act(&b, &c, &act[0], pre, bh);
      } else if (kind == RNN_LSTM) { /* gates i o f c, peepholes i o f */
        int pre = f2(&b, "Add", node(&b, "MatMul", 13, 2, (int[]){h, rt_all}, -1, KILN_DTYPE_F32, 2, bg), xw_t, 2, bg);
        int gi_ = slice(&b, pre, 1, 0, s.H, 2, bg), go = slice(&b, pre, 1, s.H, 2 * s.H, 2, bg);
        int gf = slice(&b, pre, 1, 2 * s.H, 3 * s.H, 2, bg), gc = slice(&b, pre, 1, 3 * s.H, GH, 2, bg);
        if (pi >= 0) {
          gi_ = f2(&b, "Add", gi_, f2(&b, "Mul", cs, pi, 2, bh), 2, bh);
          gf = f2(&b, "Add", gf, f2(&b, "Mul", cs, pf, 2, bh), 2, bh);
        }
        int ig = clipped_act(&b, &c, &act[0], gi_, bh);
        int fg = c.input_forget ? f2(&b, "Sub", one, ig, 2, bh) : clipped_act(&b, &c, &act[0], gf, bh);
        int cg = clipped_act(&b, &c, &act[1], gc, bh);
        c_new = f2(&b, "Add", f2(&b, "Mul", fg, cs, 2, bh), f2(&b, "Mul", ig, cg, 2, bh), 2, bh);
        if (po >= 0) go = f2(&b, "Add", go, f2(&b, "Mul", c_new, po, 2, bh), 2, bh);
        int og = clipped_act(&b, &c, &act[0], go, bh);
        h_new = f2(&b, "Mul", og, activation(&b, &act[2], c_new, 2, bh), 2, bh);
      } else { /* GRU: gates z r h */
        int64_t b2h[2] = {s.B, 2 * s.H};
        int zr = f2(&b, "Add", node(&b, "MatMul", 13, 2, (int[]){h, rt_zr}, -1, KILN_DTYPE_F32, 2, b2h),
                    slice(&b, xw_t, 1, 0, 2 * s.H, 2, bg), 2, b2h);
        int z = clipped_act(&b, &c, &act[0], slice(&b, zr, 1, 0, s.H, 2, b2h), bh);
        int rg = clipped_act(&b, &c, &act[0], slice(&b, zr, 1, s.H, 2 * s.H, 2, b2h), bh);
        int xh = slice(&b, xw_t, 1, 2 * s.H, GH, 2, bg), pre;
        if (lbr) {
          int hr = node(&b, "MatMul", 13, 2, (int[]){h, rt_h}, -1, KILN_DTYPE_F32, 2, bh);
          if (rb_h >= 0) hr = f2(&b, "Add", hr, rb_h, 2, bh);
          pre = f2(&b, "Add", xh, f2(&b, "Mul", rg, hr, 2, bh), 2, bh);
        } else {
          int rh = f2(&b, "Mul", rg, h, 2, bh);
          pre = f2(&b, "Add", xh, node(&b, "MatMul", 13, 2, (int[]){rh, rt_h}, -1, KILN_DTYPE_F32, 2, bh), 2, bh);
        }
        int cand = clipped_act(&b, &c, &act[1], pre, bh);
        h_new = f2(&b, "Add", f2(&b, "Mul", f2(&b, "Sub", one, z, 2, bh), cand, 2, bh), f2(&b, "Mul", z, h, 2, bh), 2, bh);
      }
      /* Steps past a row's length: Y is 0 there, the state stays. */
      int mask = -1;
      if (in[4] >= 0) {
        int64_t b1[2] = {s.B, 1};
        if (lens_c) {
          bool all = true;
          kiln_tensor *m = NULL;
          if (!b.st) b.st = kiln_tensor_new(KILN_DTYPE_BOOL, 2, b1, &m);
          for (int64_t i = 0; m && i < s.B; i++) {
            bool on = t < ((const int32_t *)lens_c->data)[i];
            ((uint8_t *)m->data)[i] = on;
            all = all && on;
          }
          if (all) kiln_tensor_release(m);
          else mask = const_of(&b, m);
        } else {
          int tc = scalar_const(&b, KILN_DTYPE_I32, (double)t);
          int lt = node(&b, "Less", 13, 2, (int[]){tc, in[4]}, -1, KILN_DTYPE_BOOL, 1, &s.B);
          mask = reshape(&b, lt, 2, b1, -1);
        }
      }
      int y_t = h_new;
      if (mask >= 0) {
        y_t = node(&b, "Where", 16, 3, (int[]){mask, h_new, zero}, -1, KILN_DTYPE_F32, 2, bh);
        h_new = node(&b, "Where", 16, 3, (int[]){mask, h_new, h}, -1, KILN_DTYPE_F32, 2, bh);
        if (c_new >= 0) c_new = node(&b, "Where", 16, 3, (int[]){mask, c_new, cs}, -1, KILN_DTYPE_F32, 2, bh);
      }
      h = h_new;
      cs = c_new;
      int64_t piece[4] = {1, 1, s.B, s.H};
      if (outs[0] >= 0) ys[t] = reshape(&b, y_t, 4, piece, -1);
    }
    int64_t one_bh[3] = {1, s.B, s.H};
    if (outs[0] >= 0) y_dirs[d] = concat_tree(&b, ys, (int)s.T, 0, 13, -1);
    h_dirs[d] = reshape(&b, h, 3, one_bh, -1);
    if (kind == RNN_LSTM) c_dirs[d] = reshape(&b, cs, 3, one_bh, -1);
  }
  free(ys);
  int64_t ydims[4] = {s.T, s.nd, s.B, s.H}, p2013[4] = {2, 0, 1, 3};
  if (outs[0] >= 0) {
    int y = concat_tree(&b, y_dirs, (int)s.nd, 1, 13, c.layout ? -1 : outs[0]);
    if (c.layout) transpose(&b, y, 4, p2013, ydims, outs[0]);
  }
  for (int k = 1; k <= (kind == RNN_LSTM ? 2 : 1); k++) {
    if (outs[k] < 0) continue;
    int y = concat_tree(&b, k == 1 ? h_dirs : c_dirs, (int)s.nd, 0, 13, c.layout ? -1 : outs[k]);
    if (c.layout) transpose(&b, y, 3, p102, st3, outs[k]);
  }
  return finish(&b);
}

/* A Concat of more than 8 inputs (DenseNet's blocks: up to 33) as a tree of
 * Concats of at most 8; shapes must be known (else ref runs it). */
static kiln_status_t decompose_concat(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  int nin = n->n_inputs, rank = -1;
  for (int i = 0; i < nin; i++) {
    const kiln_type *t = n->inputs[i] >= 0 ? &g->values[n->inputs[i]].type : NULL;
    if (!t || t->kind != KILN_TYPE_TENSOR || !kiln_opt_shape_known(t) || (rank >= 0 && t->rank != rank)) return NULL;
    rank = t->rank;
  }
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (rank < 1 || axis < -rank || axis >= rank) return NULL; /* ref words it */
  if (axis < 0) axis += rank;
  int *ins = malloc((size_t)nin * sizeof *ins);
  if (!ins) return KILN_OOM();
  memcpy(ins, n->inputs, (size_t)nin * sizeof *ins);
  int out = n->outputs[0], opset = n->opset;
  builder b = {0};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  kiln_status_t st = replace_node(&b, g, ni);
  if (!st) {
    concat_tree(&b, ins, nin, axis, opset, out);
    st = finish(&b);
  }
  free(ins);
  return st;
}

/* Softmax / LogSoftmax (opset 13+) over an axis that is not the last, as
 * Transpose (the axis moved last), the op over the last axis, Transpose
 * back: compiled kernels normalize trailing axes only, where the two row
 * statistics are computed once per row (RAFT's upsampling mask: a softmax
 * over the 9 neighbours on axis 2 of [1, 1, 9, 8, 8, H, W] ran on ref). */
static kiln_status_t decompose_softmax(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->opset < 13 || n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 || n->outputs[0] < 0) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  if (t->kind != KILN_TYPE_TENSOR || !kiln_opt_shape_known(t) || t->dtype != KILN_DTYPE_F32 || t->rank < 2) return NULL;
  int r = t->rank;
  int64_t axis = kiln_attr_int(n, "axis", -1);
  if (axis < -r || axis >= r) return NULL; /* ref words it */
  if (axis < 0) axis += r;
  if (axis == r - 1) return NULL;
  int64_t perm[KILN_MAX_RANK], inv[KILN_MAX_RANK], dims[KILN_MAX_RANK], in_dims[KILN_MAX_RANK], k = 0;
  memcpy(in_dims, t->dims, (size_t)r * sizeof(int64_t)); /* values may move as new ones are made */
  for (int i = 0; i < r; i++)
    if (i != axis) perm[k++] = i;
  perm[r - 1] = axis;
  for (int i = 0; i < r; i++) inv[perm[i]] = i;
  for (int i = 0; i < r; i++) dims[i] = t->dims[perm[i]];
  int x = n->inputs[0], out = n->outputs[0], opset = n->opset;
  const char *op = n->op_type;
  bool log_softmax = !strcmp(op, "LogSoftmax");
  builder b = {.g = g, .pos = ni};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int xt = transpose(&b, x, r, perm, in_dims, -1);
  int yt = node(&b, log_softmax ? "LogSoftmax" : "Softmax", opset, 1, &xt, -1, KILN_DTYPE_F32, r, dims);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", -1);
  transpose(&b, yt, r, inv, dims, out);
  return finish(&b);
}

/* BatchNormalization in training mode (outputs: Y, the running mean and
 * variance, before opset 14 also the batch's mean and variance), as
 * ops/nn_norm.c computes it:
 *   mean = ReduceMean(X) over every axis but 1, var = ReduceMean((X - mean)^2)
 *   Y    = (X - mean) * (1 / sqrt(var + eps)) * scale + B
 *   running_mean' = running_mean * momentum + mean * (1 - momentum), the same for var
 * The statistics are formed as autodiff's BatchNormalization rule forms
 * them (ops/nn_grad.c), so cse merges a training graph's recomputation in
 * the backward pass with these. Only f32 with [C] parameters and known
 * shapes; spatial=0 (before opset 9) stays on ref. */
static kiln_status_t decompose_batchnorm(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 5 || n->outputs[0] < 0) return NULL;
  bool training = false;
  if (n->opset >= 14) {
    training = kiln_attr_int(n, "training_mode", 0) != 0;
  } else {
    for (int i = 1; i < n->n_outputs; i++) training |= n->outputs[i] >= 0;
    if (n->opset < 7 && kiln_attr_int(n, "is_test", 0) != 0) training = false;
    if (n->opset < 9 && kiln_attr_int(n, "spatial", 1) == 0) return NULL;
  }
  if (!training) return NULL;
  for (int i = 0; i < 5; i++)
    if (n->inputs[i] < 0) return NULL;
  const kiln_type *xt = &g->values[n->inputs[0]].type;
  if (xt->kind != KILN_TYPE_TENSOR || xt->dtype != KILN_DTYPE_F32 || !kiln_opt_shape_known(xt) || xt->rank < 2)
    return NULL;
  int r = xt->rank;
  int64_t dims[KILN_MAX_RANK], ch = xt->dims[1], pdims[KILN_MAX_RANK], axes[KILN_MAX_RANK];
  memcpy(dims, xt->dims, (size_t)r * sizeof(int64_t));
  int na = 0;
  for (int i = 0; i < r; i++) {
    pdims[i] = i == 1 ? ch : 1;
    if (i != 1) axes[na++] = i;
  }
  for (int i = 1; i < 5; i++) { /* a parameter of another shape: ref reports it */
    const kiln_type *t = &g->values[n->inputs[i]].type;
    if (t->kind != KILN_TYPE_TENSOR || t->dtype != KILN_DTYPE_F32 || t->rank != 1 || t->dims[0] != ch) return NULL;
  }
  int ins[5], outs[5] = {-1, -1, -1, -1, -1};
  for (int i = 0; i < 5; i++) ins[i] = n->inputs[i];
  for (int i = 0; i < n->n_outputs && i < 5; i++) outs[i] = n->outputs[i];
  if (n->opset >= 14) outs[3] = outs[4] = -1;
  double eps = kiln_attr_float(n, "epsilon", 1e-5f), momentum = kiln_attr_float(n, "momentum", 0.9f);
  int opset = n->opset;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  const kiln_dtype F = KILN_DTYPE_F32;
  int axes_c = opset >= 18 ? ints_const(&b, na, axes) : -1;
  int stat[2] = {-1, -1}; /* the batch's mean and variance, [1, C, 1...] */
  int xc = -1;
  for (int s = 0; s < 2; s++) {
    int src = s == 0 ? ins[0] : node(&b, "Mul", opset, 2, (int[]){xc, xc}, -1, F, r, dims);
    stat[s] = node(&b, "ReduceMean", opset, opset >= 18 ? 2 : 1, (int[]){src, axes_c}, -1, F, r, pdims);
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 1);
    if (!b.st && opset < 18) b.st = kiln_opt_set_attr_ints(last(&b), "axes", na, axes);
    if (s == 0) xc = node(&b, "Sub", opset, 2, (int[]){ins[0], stat[0]}, -1, F, r, dims);
  }
  int ve = node(&b, "Add", opset, 2, (int[]){stat[1], scalar_const(&b, F, eps)}, -1, F, r, pdims);
  int inv = node(&b, "Reciprocal", opset, 1, (int[]){node(&b, "Sqrt", opset, 1, &ve, -1, F, r, pdims)}, -1, F, r, pdims);
  int xhat = node(&b, "Mul", opset, 2, (int[]){xc, inv}, -1, F, r, dims);
  int pshape = ints_const(&b, r, pdims);
  int sc = node(&b, "Reshape", opset, 2, (int[]){ins[1], pshape}, -1, F, r, pdims);
  int bias = node(&b, "Reshape", opset, 2, (int[]){ins[2], pshape}, -1, F, r, pdims);
  node(&b, "Add", opset, 2, (int[]){node(&b, "Mul", opset, 2, (int[]){xhat, sc}, -1, F, r, dims), bias}, outs[0], F, r,
       dims);
  int cshape = ints_const(&b, 1, &ch);
  for (int s = 0; s < 2; s++) {
    if (outs[1 + s] < 0 && outs[3 + s] < 0) continue;
    int v = node(&b, "Reshape", opset, 2, (int[]){stat[s], cshape}, outs[3 + s], F, 1, &ch);
    if (outs[1 + s] < 0) continue;
    int old = node(&b, "Mul", opset, 2, (int[]){ins[3 + s], scalar_const(&b, F, momentum)}, -1, F, 1, &ch);
    int cur = node(&b, "Mul", opset, 2, (int[]){v, scalar_const(&b, F, 1.0 - momentum)}, -1, F, 1, &ch);
    node(&b, "Add", opset, 2, (int[]){old, cur}, outs[1 + s], F, 1, &ch);
  }
  return finish(&b);
}

/* ONNX Attention (opsets 23-25, ops/nn_attention.c's contract) as the ops
 * every compiling device compiles, so it no longer runs on ref:
 *   Q, K, V in 4-D [B, H, S, D] (3-D [B, S, H*D]: Reshape + Transpose in,
 *   the reverse out); K_all = Concat(past_key, K) on the sequence axis (the
 *   present_key output), V_all likewise;
 *   scores = MatMul(Q * scale, Transpose(K_all))
 *   (grouped-query heads: Q as [B, Hkv, G, S, D] against K as
 *   [B, Hkv, 1, D, T], MatMul broadcasting the group axis, no K copy);
 *   softcap c: c * Tanh(scores / c); plus the bias: the mask (bool: Where
 *   0 / -inf) and is_causal's constant [S, T] (key j masked past i + P);
 *   P = Softmax(scores, -1), zero where a row's bias is -inf throughout (ref's
 *   rule; only a mask can do that: a causal row always keeps key 0; see
 *   below how);
 *   Y = MatMul(P, V_all).
 * Without a fused kernel on the device the pattern pass still sees the
 * MatMul-Softmax-MatMul chain and may fuse it (kiln.FusedAttention).
 * Only f32 (mask bool or f32) with shapes known and a mask whose last axis
 * is T; nonpad_kv_seqlen, the opset-25 window and a wanted
 * qk_matmul_output stay on ref. */
/* Value v is an f32 tensor (or, with bool_ok, a bool one) of known shape:
 * what the transformer ops' rewrites take. */
static bool f32_shaped(const kiln_graph *g, int v, bool bool_ok) {
  if (v < 0) return false;
  const kiln_type *t = &g->values[v].type;
  return t->kind == KILN_TYPE_TENSOR && kiln_opt_shape_known(t) &&
         (t->dtype == KILN_DTYPE_F32 || (bool_ok && t->dtype == KILN_DTYPE_BOOL));
}

bool kiln_attention_decode_node(const kiln_node *n) {
  if (n->domain[0] || n->n_inputs < 6 || n->n_outputs < 1 || n->outputs[0] < 0) return false;
  if ((n->n_outputs > 3 && n->outputs[3] >= 0) || (n->n_inputs > 6 && n->inputs[6] >= 0) || n->inputs[3] >= 0 ||
      n->inputs[4] < 0 || n->inputs[5] < 0)
    return false;
  return n->opset < 25 ||
         (kiln_attr_int(n, "left_window_size", -1) == -1 && kiln_attr_int(n, "right_window_size", -1) == -1);
}

bool kiln_attention_decode_step(const kiln_graph *g, const kiln_node *n) {
  if (!kiln_attention_decode_node(n)) return false;
  const int which[5] = {0, 1, 2, 4, 5};
  for (int i = 0; i < 5; i++) {
    int v = n->inputs[which[i]];
    if (!f32_shaped(g, v, false) || g->values[v].type.rank != 4) return false;
  }
  return g->values[n->inputs[0]].type.dims[2] <= 4;
}

static kiln_status_t decompose_attention(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs < 3 || n->n_outputs < 1 || n->outputs[0] < 0) return NULL;
  if ((n->n_outputs > 3 && n->outputs[3] >= 0) || (n->n_inputs > 6 && n->inputs[6] >= 0)) return NULL;
  if (n->opset >= 25 && (kiln_attr_int(n, "left_window_size", -1) != -1 || kiln_attr_int(n, "right_window_size", -1) != -1))
    return NULL;
  int in[6];
  for (int i = 0; i < 6; i++) in[i] = i < n->n_inputs ? n->inputs[i] : -1;
  if (in[0] < 0 || in[1] < 0 || in[2] < 0 || (in[4] < 0) != (in[5] < 0)) return NULL;
  for (int i = 0; i < 6; i++)
    if (in[i] >= 0 && !f32_shaped(g, in[i], i == 3)) return NULL;
  int64_t qd[4], kd[4], vd[4], md[4] = {1, 1, 1, 1}, pd[2][4];
  int rank = g->values[in[0]].type.rank, mr = in[3] >= 0 ? g->values[in[3]].type.rank : 0;
  if ((rank != 3 && rank != 4) || g->values[in[1]].type.rank != rank || g->values[in[2]].type.rank != rank || mr > 4)
    return NULL;
  memcpy(qd, g->values[in[0]].type.dims, sizeof(int64_t) * (size_t)rank);
  memcpy(kd, g->values[in[1]].type.dims, sizeof(int64_t) * (size_t)rank);
  memcpy(vd, g->values[in[2]].type.dims, sizeof(int64_t) * (size_t)rank);
  for (int i = 0; i < mr; i++) md[4 - mr + i] = g->values[in[3]].type.dims[i];
  int64_t B = qd[0], Hq, Hkv, S, E, L, Ev, P = 0;
  if (rank == 4) {
    Hq = qd[1], S = qd[2], E = qd[3], Hkv = kd[1], L = kd[2], Ev = vd[3];
    if (kd[0] != B || kd[3] != E || vd[0] != B || vd[1] != Hkv || vd[2] != L) return NULL;
  } else {
    Hq = kiln_attr_int(n, "q_num_heads", 0), Hkv = kiln_attr_int(n, "kv_num_heads", 0);
    if (Hq < 1 || Hkv < 1 || qd[2] % Hq || vd[2] % Hkv) return NULL;
    S = qd[1], E = qd[2] / Hq, L = kd[1], Ev = vd[2] / Hkv;
    if (kd[0] != B || kd[2] != Hkv * E || vd[0] != B || vd[1] != L) return NULL;
  }
  if (Hkv < 1 || Hq % Hkv || E < 1 || S < 1) return NULL;
  if (in[4] >= 0) {
    for (int j = 0; j < 2; j++) {
      const kiln_type *t = &g->values[in[4 + j]].type;
      if (t->rank != 4) return NULL;
      memcpy(pd[j], t->dims, sizeof pd[j]);
    }
    P = pd[0][2];
    if (pd[0][0] != B || pd[0][1] != Hkv || pd[0][3] != E || pd[1][0] != B || pd[1][1] != Hkv || pd[1][2] != P ||
        pd[1][3] != Ev)
      return NULL;
  }
  int64_t T = P + L, G = Hq / Hkv;
  const int64_t mwant[4] = {B, Hq, S, T};
  for (int i = 0; i < 4 && in[3] >= 0; i++)
    if (md[i] != mwant[i] && !(md[i] == 1 && i < 3)) return NULL;
  if (in[3] >= 0 && md[1] != 1 && md[1] != Hq) return NULL;
  bool causal = kiln_attr_int(n, "is_causal", 0) != 0, bool_mask = in[3] >= 0 && g->values[in[3]].type.dtype == KILN_DTYPE_BOOL;
  double softcap = kiln_attr_float(n, "softcap", 0.0f);
  const kiln_attr *sa = kiln_node_attr(n, "scale");
  double scale = sa && sa->type == KILN_ATTR_FLOAT ? (double)sa->f : 1.0 / sqrt((double)E);
  int out[3] = {n->outputs[0], n->n_outputs > 1 ? n->outputs[1] : -1, n->n_outputs > 2 ? n->outputs[2] : -1};
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  /* Q, K, V as [B, heads, seq, head size]. */
  int64_t q4[4] = {B, Hq, S, E}, k4[4] = {B, Hkv, L, E}, v4[4] = {B, Hkv, L, Ev};
  const int64_t swap12[4] = {0, 2, 1, 3};
  int q = in[0], k = in[1], v = in[2];
  if (rank == 3) {
    int64_t qs[4] = {B, S, Hq, E}, ks[4] = {B, L, Hkv, E}, vs[4] = {B, L, Hkv, Ev};
    q = transpose(&b, reshape(&b, q, 4, qs, -1), 4, swap12, qs, -1);
    k = transpose(&b, reshape(&b, k, 4, ks, -1), 4, swap12, ks, -1);
    v = transpose(&b, reshape(&b, v, 4, vs, -1), 4, swap12, vs, -1);
  }
  /* The cache: the past prepended (the present outputs). */
  int kv[2] = {k, v};
  for (int j = 0; j < 2; j++) {
    if (in[4] >= 0) {
      kv[j] = concat_tree(&b, (int[]){in[4 + j], kv[j]}, 2, 2, 13, out[1 + j]);
    } else if (out[1 + j] >= 0) {
      kv[j] = node(&b, "Identity", 16, 1, &kv[j], out[1 + j], F, 4, j ? v4 : k4);
    }
  }
  int64_t kall[4] = {B, Hkv, T, E};
  /* The whole scale on Q (ref scales both by its root: the same up to
   * rounding), so K's Transpose stays a view the contraction reads. */
  int qsc = node(&b, "Mul", 14, 2, (int[]){q, scalar_const(&b, F, scale)}, -1, F, 4, q4);
  /* The scores: [B, Hq, S, T], or [B, Hkv, G, S, T] for grouped heads.
   * Few query rows (a decoder's step): K x Q^T, then the [T, S] result
   * transposed (for S = 1 a view), so the product reads K's rows where they
   * lie; Q x K^T would read a transposed copy of the whole cache. */
  int r = G > 1 ? 5 : 4;
  int64_t sd[5] = {B, Hq, S, T}, q5[5] = {B, Hkv, G, S, E}, k5[5] = {B, Hkv, 1, E, T}, v5[5] = {B, Hkv, 1, T, Ev};
  int64_t kr5[5] = {B, Hkv, 1, T, E};
  int vv = G > 1 ? reshape(&b, kv[1], 5, v5, -1) : kv[1];
  if (G > 1) memcpy(sd, (int64_t[]){B, Hkv, G, S, T}, sizeof sd);
  int sc;
  if (S < 4) {
    int64_t qd[5], ts[5], perm[5];
    for (int i = 0; i < r; i++) {
      qd[i] = G > 1 ? q5[i] : q4[i];
      perm[i] = i;
    }
    perm[r - 2] = r - 1, perm[r - 1] = r - 2;
    int qv = G > 1 ? reshape(&b, qsc, 5, q5, -1) : qsc;
    int qt = transpose(&b, qv, r, perm, qd, -1);
    int kk = G > 1 ? reshape(&b, kv[0], 5, kr5, -1) : kv[0];
    memcpy(ts, sd, sizeof ts);
    ts[r - 2] = T, ts[r - 1] = S;
    int st = node(&b, "MatMul", 13, 2, (int[]){kk, qt}, -1, F, r, ts);
    sc = transpose(&b, st, r, perm, ts, -1);
  } else {
    int ktr = transpose(&b, kv[0], 4, (const int64_t[]){0, 1, 3, 2}, kall, -1);
    int lhs = G > 1 ? reshape(&b, qsc, 5, q5, -1) : qsc, rhs = G > 1 ? reshape(&b, ktr, 5, k5, -1) : ktr;
    sc = node(&b, "MatMul", 13, 2, (int[]){lhs, rhs}, -1, F, r, sd);
  }
  if (softcap > 0) {
    int c = scalar_const(&b, F, softcap);
    int th = node(&b, "Tanh", 13, 1, (int[]){node(&b, "Div", 14, 2, (int[]){sc, c}, -1, F, r, sd)}, -1, F, r, sd);
    sc = node(&b, "Mul", 14, 2, (int[]){th, c}, -1, F, r, sd);
  }
  /* The bias, shaped to broadcast against the scores. */
  int bias = -1, brank = r;
  int64_t bd[5] = {1, 1, 1, 1, 1};
  if (in[3] >= 0) {
    int m = mr < 4 ? reshape(&b, in[3], 4, md, -1) : in[3];
    if (bool_mask)
      m = node(&b, "Where", 16, 3, (int[]){m, scalar_const(&b, F, 0.0), scalar_const(&b, F, -INFINITY)}, -1, F, 4, md);
    if (G > 1) {
      int64_t m5[5] = {md[0], md[1] == 1 ? 1 : Hkv, md[1] == 1 ? 1 : G, md[2], md[3]};
      m = reshape(&b, m, 5, m5, -1);
      memcpy(bd, m5, sizeof m5);
    } else {
      memcpy(bd, md, sizeof md);
    }
    bias = m;
  }
  if (causal) {
    int64_t cd[2] = {S, T};
    kiln_tensor *ct = NULL;
    if (!b.st) b.st = kiln_tensor_new(F, 2, cd, &ct);
    if (!b.st) {
      float *c = ct->data;
      for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < T; j++) c[i * T + j] = j > i + P ? -INFINITY : 0.0f;
    }
    int cid = const_of(&b, ct);
    if (bias < 0) {
      bias = cid;
      for (int i = 0; i < r; i++) bd[i] = i == r - 2 ? S : i == r - 1 ? T : 1;
    } else {
      bd[r - 2] = S;
      bias = node(&b, "Add", 14, 2, (int[]){bias, cid}, -1, F, brank, bd);
    }
  }
  /* A mask can mask a whole row, where ref gives zeros: the bias clamped
   * to -FLT_MAX (such a row's softmax is finite, an -inf key's weight
   * still underflows to 0), the probabilities times keep = (the row's
   * bias reaches above -inf), a float every dialect stores. */
  int keep = -1;
  if (in[3] >= 0) {
    int64_t rd[5];
    memcpy(rd, bd, sizeof rd);
    rd[r - 1] = 1;
    int mx = node(&b, "ReduceMax", 13, 1, &bias, -1, F, r, rd);
    if (!b.st) b.st = kiln_opt_set_attr_ints(last(&b), "axes", 1, (const int64_t[]){-1});
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 1);
    int lo = scalar_const(&b, F, -FLT_MAX);
    int any = node(&b, "GreaterOrEqual", 16, 2, (int[]){mx, lo}, -1, KILN_DTYPE_BOOL, r, rd);
    keep = node(&b, "Cast", 13, 1, &any, -1, F, r, rd);
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "to", KILN_DTYPE_F32);
    bias = node(&b, "Max", 13, 2, (int[]){bias, lo}, -1, F, r, bd);
  }
  if (bias >= 0) sc = node(&b, "Add", 14, 2, (int[]){sc, bias}, -1, F, r, sd);
  int pr = node(&b, "Softmax", 13, 1, &sc, -1, F, r, sd);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", -1);
  if (keep >= 0) pr = node(&b, "Mul", 14, 2, (int[]){pr, keep}, -1, F, r, sd);
  int64_t y4[4] = {B, Hq, S, Ev}, y5[5] = {B, Hkv, G, S, Ev};
  int y = node(&b, "MatMul", 13, 2, (int[]){pr, vv}, G == 1 && rank == 4 ? out[0] : -1, F, r, G > 1 ? y5 : y4);
  if (G > 1) y = reshape(&b, y, 4, y4, rank == 4 ? out[0] : -1);
  if (rank == 3) {
    int yt = transpose(&b, y, 4, swap12, y4, -1);
    reshape(&b, yt, 3, (const int64_t[]){B, S, Hq * Ev}, out[0]);
  }
  return finish(&b);
}

/* The activations of opsets 18-28 (ops/nn_transformer.c) as the elementwise
 * ops every compiling device fuses, f32 with shapes known:
 *   Swish(X, alpha)     X * Sigmoid(alpha * X)
 *   SwiGLU(A, B, alpha) A * Sigmoid(alpha * A) * B
 *   Mish(X)             X * Tanh(Softplus(X))
 * and RMSNormalization(X, scale, axis, epsilon) over the axes from axis on:
 *   X / Sqrt(ReduceMean(X * X) + epsilon) * scale   (scale f32, broadcast)
 * the reduction a row statistic the compilers hoist as LayerNorm's. */
static kiln_status_t decompose_activation(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  kiln_op_id id = kiln_node_op_id(n);
  int n_in = id == KILN_OP_SwiGLU ? 2 : 1;
  if (n->domain[0] || n->n_inputs != n_in || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int i = 0; i < n_in; i++)
    if (!f32_shaped(g, n->inputs[i], false)) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  if (id == KILN_OP_SwiGLU) { /* A and B of one shape (else ref words it) */
    const kiln_type *u = &g->values[n->inputs[1]].type;
    if (u->rank != t->rank || memcmp(u->dims, t->dims, sizeof(int64_t) * (size_t)t->rank)) return NULL;
  }
  int r = t->rank, x = n->inputs[0], other = n_in > 1 ? n->inputs[1] : -1, out = n->outputs[0];
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)r);
  double alpha = kiln_attr_float(n, "alpha", 1.0f);
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  if (id == KILN_OP_Mish) {
    int sp = node(&b, "Softplus", 1, 1, &x, -1, F, r, dims);
    int th = node(&b, "Tanh", 13, 1, &sp, -1, F, r, dims);
    node(&b, "Mul", 14, 2, (int[]){x, th}, out, F, r, dims);
    return finish(&b);
  }
  int ax = alpha == 1.0 ? x : node(&b, "Mul", 14, 2, (int[]){x, scalar_const(&b, F, alpha)}, -1, F, r, dims);
  int sg = node(&b, "Sigmoid", 13, 1, &ax, -1, F, r, dims);
  int sw = node(&b, "Mul", 14, 2, (int[]){x, sg}, other >= 0 ? -1 : out, F, r, dims);
  if (other >= 0) node(&b, "Mul", 14, 2, (int[]){sw, other}, out, F, r, dims);
  return finish(&b);
}

static kiln_status_t decompose_rms_norm(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  if (!f32_shaped(g, n->inputs[0], false) || !f32_shaped(g, n->inputs[1], false)) return NULL;
  if (kiln_attr_int(n, "stash_type", 1) != 1) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type, *st = &g->values[n->inputs[1]].type;
  int r = t->rank;
  int64_t axis = kiln_attr_int(n, "axis", -1);
  if (r < 1 || axis < -r || axis >= r || st->rank > r) return NULL; /* ref words it */
  if (axis < 0) axis += r;
  for (int d = 0; d < st->rank; d++) { /* the scale broadcasts to X without growing it */
    int64_t sd = st->dims[d], xd = t->dims[r - st->rank + d];
    if (sd != 1 && sd != xd) return NULL;
  }
  int64_t dims[KILN_MAX_RANK], rdims[KILN_MAX_RANK], axes[KILN_MAX_RANK];
  int na = 0;
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)r);
  for (int d = 0; d < r; d++) {
    rdims[d] = d >= axis ? 1 : dims[d];
    if (d >= axis) axes[na++] = d;
  }
  int x = n->inputs[0], scale = n->inputs[1], out = n->outputs[0];
  double eps = kiln_attr_float(n, "epsilon", 1e-5f);
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int sq = node(&b, "Mul", 14, 2, (int[]){x, x}, -1, F, r, dims);
  int ms = node(&b, "ReduceMean", 13, 1, &sq, -1, F, r, rdims);
  if (!b.st) b.st = kiln_opt_set_attr_ints(last(&b), "axes", na, axes);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 1);
  int ve = node(&b, "Add", 14, 2, (int[]){ms, scalar_const(&b, F, eps)}, -1, F, r, rdims);
  int rt = node(&b, "Sqrt", 13, 1, &ve, -1, F, r, rdims);
  int nx = node(&b, "Div", 14, 2, (int[]){x, rt}, -1, F, r, dims);
  node(&b, "Mul", 14, 2, (int[]){nx, scale}, out, F, r, dims);
  return finish(&b);
}

/* ---- normalizations and losses (ops/nn_norm.c, ops/nn_transformer.c,
 * ops/reduce_softmax.c, ops/nn_loss.c) ------------------------------------ */

/* ReduceMean-13 of x over axes, dims kept (rdims: the result's shape);
 * out: an existing value, or -1. */
static int mean_over(builder *b, int x, int na, const int64_t *axes, int rank, const int64_t *rdims, int out) {
  int y = node(b, "ReduceMean", 13, 1, &x, out, KILN_DTYPE_F32, rank, rdims);
  if (!b->st) b->st = kiln_opt_set_attr_ints(last(b), "axes", na, axes);
  if (!b->st) b->st = kiln_opt_set_attr_int(last(b), "keepdims", 1);
  return y;
}

/* x - mean and the population variance over axes, as ref's kernels form
 * them in two passes (the mean, then the mean of the squared deviations,
 * never E[x^2] - E[x]^2). mean_out: an existing value for the mean, or -1. */
static int centred(builder *b, int x, int na, const int64_t *axes, int rank, const int64_t *dims,
                   const int64_t *rdims, int mean_out, int *out_var) {
  int mean = mean_over(b, x, na, axes, rank, rdims, mean_out);
  int dev = node(b, "Sub", 14, 2, (int[]){x, mean}, -1, KILN_DTYPE_F32, rank, dims);
  int sq = node(b, "Mul", 14, 2, (int[]){dev, dev}, -1, KILN_DTYPE_F32, rank, dims);
  *out_var = mean_over(b, sq, na, axes, rank, rdims, -1);
  return dev;
}

/* 1 / Sqrt(var + eps). */
static int inv_std(builder *b, int var, double eps, int rank, const int64_t *rdims, int out) {
  const kiln_dtype F = KILN_DTYPE_F32;
  int ve = node(b, "Add", 14, 2, (int[]){var, scalar_const(b, F, eps)}, -1, F, rank, rdims);
  int sd = node(b, "Sqrt", 13, 1, &ve, -1, F, rank, rdims);
  return node(b, "Reciprocal", 13, 1, &sd, out, F, rank, rdims);
}

/* Value v (f32, shape known) broadcasts to a tensor of rank r and dims
 * without growing it. */
static bool broadcasts_into(const kiln_graph *g, int v, int r, const int64_t *dims) {
  const kiln_type *t = &g->values[v].type;
  if (t->rank > r) return false;
  for (int d = 0; d < t->rank; d++) {
    int64_t sd = t->dims[d], xd = dims[r - t->rank + d];
    if (sd != 1 && sd != xd) return false;
  }
  return true;
}

static kiln_status_t decompose_group_norm(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 3 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int i = 0; i < 3; i++)
    if (!f32_shaped(g, n->inputs[i], false)) return NULL;
  const kiln_attr *ga = kiln_node_attr(n, "num_groups");
  if (!ga || ga->type != KILN_ATTR_INT || ga->i < 1) return NULL; /* ref words it */
  if (n->opset >= 21 && kiln_attr_int(n, "stash_type", 1) != KILN_DTYPE_F32) return NULL;
  const kiln_type *xt = &g->values[n->inputs[0]].type;
  int r = xt->rank;
  if (r < 2 || kiln_shape_numel(r, xt->dims) == 0) return NULL;
  int64_t G = ga->i, N = xt->dims[0], C = xt->dims[1], inner = kiln_shape_numel(r - 2, xt->dims + 2);
  if (C % G) return NULL;
  bool per_channel = n->opset >= 21;
  for (int i = 1; i < 3; i++) {
    const kiln_type *t = &g->values[n->inputs[i]].type;
    if (t->rank != 1 || t->dims[0] != (per_channel ? C : G)) return NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, xt->dims, sizeof(int64_t) * (size_t)r);
  int x = n->inputs[0], scale = n->inputs[1], bias = n->inputs[2], out = n->outputs[0];
  double eps = kiln_attr_float(n, "epsilon", 1e-5f);
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int64_t d3[3] = {N, G, C / G * inner}, r3[3] = {N, G, 1}, ax = 2;
  int var, dev = centred(&b, reshape(&b, x, 3, d3, -1), 1, &ax, 3, d3, r3, -1, &var);
  int nrm = node(&b, "Mul", 14, 2, (int[]){dev, inv_std(&b, var, eps, 3, r3, -1)}, -1, F, 3, d3);
  if (!per_channel) { /* a group's elements are contiguous: [G, 1] broadcasts over them */
    int64_t p2[2] = {G, 1};
    int y = node(&b, "Mul", 14, 2, (int[]){nrm, reshape(&b, scale, 2, p2, -1)}, -1, F, 3, d3);
    y = node(&b, "Add", 14, 2, (int[]){y, reshape(&b, bias, 2, p2, -1)}, -1, F, 3, d3);
    reshape(&b, y, r, dims, out);
  } else {
    int64_t pd[KILN_MAX_RANK] = {C};
    for (int d = 1; d < r - 1; d++) pd[d] = 1;
    int y = node(&b, "Mul", 14, 2, (int[]){reshape(&b, nrm, r, dims, -1), reshape(&b, scale, r - 1, pd, -1)}, -1, F,
                 r, dims);
    node(&b, "Add", 14, 2, (int[]){y, reshape(&b, bias, r - 1, pd, -1)}, out, F, r, dims);
  }
  return finish(&b);
}

static kiln_status_t decompose_mvn(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  if (!f32_shaped(g, n->inputs[0], false)) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  int r = t->rank, n_axes = 3;
  if (kiln_shape_numel(r, t->dims) == 0) return NULL; /* nothing to compile: ref */
  static const int64_t default_axes[3] = {0, 2, 3};
  const int64_t *axes_attr = default_axes;
  if (kiln_node_attr(n, "axes")) axes_attr = kiln_attr_ints(n, "axes", &n_axes);
  if (!axes_attr || n_axes < 1) return NULL; /* no axis: every element its own group, ref computes it */
  bool reduce[KILN_MAX_RANK] = {0};
  for (int i = 0; i < n_axes; i++) {
    int64_t a = axes_attr[i];
    if (a < -r || a >= r) return NULL; /* ref words it */
    reduce[a < 0 ? a + r : a] = true;
  }
  int64_t dims[KILN_MAX_RANK], rdims[KILN_MAX_RANK], axes[KILN_MAX_RANK];
  int na = 0;
  for (int d = 0; d < r; d++) {
    dims[d] = t->dims[d];
    rdims[d] = reduce[d] ? 1 : dims[d];
    if (reduce[d]) axes[na++] = d;
  }
  int x = n->inputs[0], out = n->outputs[0];
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int var, dev = centred(&b, x, na, axes, r, dims, rdims, -1, &var);
  int sd = node(&b, "Sqrt", 13, 1, &var, -1, F, r, rdims);
  int den = node(&b, "Add", 14, 2, (int[]){sd, scalar_const(&b, F, 1e-9)}, -1, F, r, rdims);
  node(&b, "Div", 14, 2, (int[]){dev, den}, out, F, r, dims);
  return finish(&b);
}

static kiln_status_t decompose_lp_norm(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  if (!f32_shaped(g, n->inputs[0], false)) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  int r = t->rank;
  int64_t p = kiln_attr_int(n, "p", 2), axis = kiln_attr_int(n, "axis", -1);
  if ((p != 1 && p != 2) || r < 1 || axis < -r || axis >= r) return NULL; /* ref words it */
  if (kiln_shape_numel(r, t->dims) == 0) return NULL;
  if (axis < 0) axis += r;
  int64_t dims[KILN_MAX_RANK], rdims[KILN_MAX_RANK];
  for (int d = 0; d < r; d++) {
    dims[d] = t->dims[d];
    rdims[d] = d == axis ? 1 : dims[d];
  }
  int x = n->inputs[0], out = n->outputs[0];
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int nm = node(&b, p == 1 ? "ReduceL1" : "ReduceL2", 13, 1, &x, -1, F, r, rdims);
  if (!b.st) b.st = kiln_opt_set_attr_ints(last(&b), "axes", 1, &axis);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 1);
  int zero = node(&b, "Equal", 13, 2, (int[]){nm, scalar_const(&b, F, 0.0)}, -1, KILN_DTYPE_BOOL, r, rdims);
  int safe = node(&b, "Where", 16, 3, (int[]){zero, scalar_const(&b, F, 1.0), nm}, -1, F, r, rdims);
  node(&b, "Div", 14, 2, (int[]){x, safe}, out, F, r, dims);
  return finish(&b);
}

/* Drops the optional outputs of node ni nobody reads (not a node's input,
 * a graph output or a subgraph's read); true when one that is read is left. */
static kiln_status_t drop_unread_outputs(kiln_graph *g, int ni, bool *out_extra) {
  kiln_opt_uses u;
  KILN_TRY(kiln_opt_uses_build(g, &u));
  kiln_node *n = &g->nodes[ni];
  *out_extra = false;
  for (int i = 1; i < n->n_outputs; i++) {
    int v = n->outputs[i];
    if (v < 0) continue;
    if (u.count[v] == 0 && !u.pinned[v]) {
      n->outputs[i] = -1;
      g->values[v].producer = -1;
    } else {
      *out_extra = true;
    }
  }
  kiln_opt_uses_free(&u);
  return NULL;
}

static kiln_status_t decompose_layer_norm(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_outputs < 2 || n->n_inputs < 2 || n->n_inputs > 3) return NULL;
  bool extra;
  KILN_TRY(drop_unread_outputs(g, ni, &extra));
  if (!extra) return NULL; /* one output: compiled whole */
  n = &g->nodes[ni];
  int bias = n->n_inputs > 2 ? n->inputs[2] : -1;
  if (!f32_shaped(g, n->inputs[0], false) || !f32_shaped(g, n->inputs[1], false) ||
      (bias >= 0 && !f32_shaped(g, bias, false)))
    return NULL;
  if (kiln_attr_int(n, "stash_type", 1) != KILN_DTYPE_F32) return NULL;
  const kiln_type *t = &g->values[n->inputs[0]].type;
  int r = t->rank;
  int64_t axis = kiln_attr_int(n, "axis", -1);
  if (r < 1 || axis < -r || axis >= r || kiln_shape_numel(r, t->dims) == 0) return NULL; /* ref words it */
  if (axis < 0) axis += r;
  if (!broadcasts_into(g, n->inputs[1], r, t->dims) || (bias >= 0 && !broadcasts_into(g, bias, r, t->dims)))
    return NULL;
  int64_t dims[KILN_MAX_RANK], rdims[KILN_MAX_RANK], axes[KILN_MAX_RANK];
  int na = 0;
  for (int d = 0; d < r; d++) {
    dims[d] = t->dims[d];
    rdims[d] = d >= axis ? 1 : dims[d];
    if (d >= axis) axes[na++] = d;
  }
  int outs[3] = {-1, -1, -1};
  for (int i = 0; i < 3 && i < n->n_outputs; i++) outs[i] = n->outputs[i];
  for (int i = 1; i < 3; i++) { /* ref's statistics: stash_type's f32 with the reduced axes kept */
    const kiln_type *ot = outs[i] >= 0 ? &g->values[outs[i]].type : NULL;
    if (ot && (ot->kind != KILN_TYPE_TENSOR || ot->dtype != KILN_DTYPE_F32 || !kiln_shape_equal(ot->rank, ot->dims, r, rdims)))
      return NULL;
  }
  int x = n->inputs[0], scale = n->inputs[1];
  double eps = kiln_attr_float(n, "epsilon", 1e-5f);
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int var, dev = centred(&b, x, na, axes, r, dims, rdims, outs[1], &var);
  int inv = inv_std(&b, var, eps, r, rdims, outs[2]);
  if (outs[0] >= 0) {
    int y = node(&b, "Mul", 14, 2, (int[]){dev, inv}, -1, F, r, dims);
    y = node(&b, "Mul", 14, 2, (int[]){y, scale}, bias >= 0 ? -1 : outs[0], F, r, dims);
    if (bias >= 0) node(&b, "Add", 14, 2, (int[]){y, bias}, outs[0], F, r, dims);
  }
  return finish(&b);
}

static kiln_status_t decompose_loss(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  bool sce = kiln_node_is(n, KILN_OP_SoftmaxCrossEntropyLoss);
  if (n->domain[0] || n->n_inputs < 2 || n->n_inputs > 3 || n->n_outputs < 1 || n->n_outputs > (sce ? 2 : 1) ||
      n->outputs[0] < 0)
    return NULL;
  const char *rs = kiln_attr_string(n, "reduction", "mean");
  int red = !strcmp(rs, "none") ? 0 : !strcmp(rs, "sum") ? 1 : !strcmp(rs, "mean") ? 2 : -1;
  if (red < 0 || !f32_shaped(g, n->inputs[0], false)) return NULL; /* ref words it */
  int tgt = n->inputs[1], weight = n->n_inputs > 2 ? n->inputs[2] : -1;
  const kiln_type *xt = &g->values[n->inputs[0]].type, *tt = tgt >= 0 ? &g->values[tgt].type : NULL;
  int r = xt->rank, tr = r - 1;
  if (r < 2 || !tt || tt->kind != KILN_TYPE_TENSOR || !kiln_opt_shape_known(tt) ||
      (tt->dtype != KILN_DTYPE_I32 && tt->dtype != KILN_DTYPE_I64))
    return NULL;
  int64_t N = xt->dims[0], C = xt->dims[1], xdims[KILN_MAX_RANK], td[KILN_MAX_RANK], id[KILN_MAX_RANK];
  memcpy(xdims, xt->dims, sizeof(int64_t) * (size_t)r);
  if (kiln_shape_numel(r, xdims) == 0) return NULL;
  td[0] = id[0] = N;
  id[1] = 1;
  for (int d = 2; d < r; d++) td[d - 1] = id[d] = xdims[d];
  if (!kiln_shape_equal(tt->rank, tt->dims, tr, td)) return NULL;
  if (weight >= 0) {
    const kiln_type *wt = &g->values[weight].type;
    if (!f32_shaped(g, weight, false) || wt->rank != 1 || wt->dims[0] != C) return NULL;
  }
  kiln_dtype tdt = tt->dtype;
  const kiln_attr *ia = kiln_node_attr(n, "ignore_index");
  bool has_ignore = ia && ia->type == KILN_ATTR_INT;
  int64_t ignore = has_ignore ? ia->i : 0;
  /* ref compares the loaded int64 target: an int32 target never equals an
   * ignore_index int32 cannot hold */
  if (has_ignore && tdt == KILN_DTYPE_I32 && (ignore < INT32_MIN || ignore > INT32_MAX)) has_ignore = false;
  /* Constant targets out of range: ref's error to report. */
  const kiln_tensor *tc = kiln_opt_const(g, tgt);
  for (int64_t i = 0; tc && i < tc->numel; i++) {
    int64_t v = kiln_load_i64(tc->data, tc->dtype, i);
    if (!(has_ignore && v == ignore) && (v < 0 || v >= C)) return NULL;
  }
  int x = n->inputs[0], out = n->outputs[0], log_prob = sce && n->n_outputs > 1 ? n->outputs[1] : -1;
  const kiln_dtype F = KILN_DTYPE_F32, BOOL = KILN_DTYPE_BOOL;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  int lp = x;
  if (sce) { /* over axis 1: decompose_softmax moves it last in the next round */
    lp = node(&b, "LogSoftmax", 13, 1, &x, log_prob, F, r, xdims);
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", 1);
  }
  /* The target to gather: ignored ones 0 (any class), negative ones C, out
   * of range, which GatherElements refuses (ref's and the plan's index
   * checks) as ref's loss refuses them, where a gather would wrap them. */
  int ign = -1, ts = tgt;
  if (has_ignore)
    ign = node(&b, "Equal", 13, 2, (int[]){tgt, scalar_const(&b, tdt, (double)ignore)}, -1, BOOL, tr, td);
  if (!tc) {
    int neg = node(&b, "Less", 13, 2, (int[]){tgt, scalar_const(&b, tdt, 0)}, -1, BOOL, tr, td);
    ts = node(&b, "Where", 16, 3, (int[]){neg, scalar_const(&b, tdt, (double)C), tgt}, -1, tdt, tr, td);
  }
  if (has_ignore) ts = node(&b, "Where", 16, 3, (int[]){ign, scalar_const(&b, tdt, 0), ts}, -1, tdt, tr, td);
  int picked = node(&b, "GatherElements", 13, 2, (int[]){lp, reshape(&b, ts, r, id, -1)}, -1, F, r, id);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", 1);
  picked = reshape(&b, picked, tr, td, -1);
  /* loss = -lp[target] * weight[target], 0 where ignored; written to out
   * by its last node when the reduction is none */
  int loss_out = red == 0 ? out : -1, w = -1;
  int loss = node(&b, "Neg", 13, 1, &picked, weight < 0 && !has_ignore ? loss_out : -1, F, tr, td);
  if (weight >= 0) {
    w = node(&b, "Gather", 13, 2, (int[]){weight, ts}, -1, F, tr, td);
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", 0);
    loss = node(&b, "Mul", 14, 2, (int[]){loss, w}, has_ignore ? -1 : loss_out, F, tr, td);
  }
  int zero = scalar_const(&b, F, 0.0);
  if (has_ignore) loss = node(&b, "Where", 16, 3, (int[]){ign, zero, loss}, loss_out, F, tr, td);
  if (red == 0) return finish(&b);
  if (red == 2 && weight < 0 && !has_ignore) {
    node(&b, "ReduceMean", 13, 1, &loss, out, F, 0, NULL);
    if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 0);
    return finish(&b);
  }
  int sum = node(&b, "ReduceSum", 13, 1, &loss, red == 1 ? out : -1, F, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 0);
  if (red == 1) return finish(&b);
  /* mean: over the weights of the positions not ignored (all ignored: 0/0, NaN as ref) */
  if (has_ignore) w = node(&b, "Where", 16, 3, (int[]){ign, zero, w >= 0 ? w : scalar_const(&b, F, 1.0)}, -1, F, tr, td);
  int wsum = node(&b, "ReduceSum", 13, 1, &w, -1, F, 0, NULL);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "keepdims", 0);
  node(&b, "Div", 14, 2, (int[]){sum, wsum}, out, F, 0, NULL);
  return finish(&b);
}

/* RotaryEmbedding (opset 23, ops/nn_transformer.c's rule) as slices,
 * elementwise products and a Concat (f32, shapes known):
 *   cos, sin = the caches' rows (Gather by position_ids), shaped to
 *   broadcast over the heads. ref's kernel refuses a position outside
 *   [0, max_position): a constant one is checked here (the node stays on
 *   ref, which words the error), a run-time one goes through
 *   Where(p < 0, max_position, p) first, so that the compiled Gather's
 *   range check (runtime/plan.c) refuses the negatives a Gather would
 *   wrap;
 *   x1, x2 = the rotated prefix's halves (interleaved: its even and odd
 *   elements, as [.., rot/2, 2] sliced on the last axis);
 *   y1 = x1 cos - x2 sin, y2 = x1 sin + x2 cos, joined back, then the
 *   unrotated rest of each head. 3-D X [B, S, H*D] is viewed as [B, S, H, D]. */
static kiln_status_t decompose_rope(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs < 3 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int i = 0; i < 3; i++)
    if (!f32_shaped(g, n->inputs[i], false)) return NULL;
  int pos = n->n_inputs > 3 ? n->inputs[3] : -1;
  const kiln_tensor *pt = pos >= 0 ? kiln_opt_const(g, pos) : NULL;
  const kiln_type *pty = pos >= 0 ? &g->values[pos].type : NULL;
  if (pos >= 0 && (pty->kind != KILN_TYPE_TENSOR || pty->dtype != KILN_DTYPE_I64 || pty->rank != 2 ||
                   !kiln_opt_shape_known(pty)))
    return NULL;
  const kiln_type *xt = &g->values[n->inputs[0]].type, *ct = &g->values[n->inputs[1]].type,
                  *st = &g->values[n->inputs[2]].type;
  int r = xt->rank;
  if (r != 3 && r != 4) return NULL;
  int64_t B = xt->dims[0], S = r == 4 ? xt->dims[2] : xt->dims[1], H, D;
  if (r == 4) {
    H = xt->dims[1], D = xt->dims[3];
  } else {
    H = kiln_attr_int(n, "num_heads", 0);
    if (H < 1 || xt->dims[2] % H) return NULL;
    D = xt->dims[2] / H;
  }
  int64_t rot = kiln_attr_int(n, "rotary_embedding_dim", 0);
  if (!rot) rot = D;
  if (rot < 2 || rot % 2 || rot > D) return NULL;
  int64_t half = rot / 2;
  bool interleaved = kiln_attr_int(n, "interleaved", 0) != 0;
  /* The caches as ref checks them; positions within range (else ref words it). */
  if (ct->rank != st->rank || memcmp(ct->dims, st->dims, sizeof(int64_t) * (size_t)ct->rank)) return NULL;
  if (pos >= 0) {
    if (pty->dims[0] != B || pty->dims[1] != S || ct->rank != 2 || ct->dims[1] != half) return NULL;
    for (int64_t i = 0; pt && i < pt->numel; i++)
      if (((const int64_t *)pt->data)[i] < 0 || ((const int64_t *)pt->data)[i] >= ct->dims[0]) return NULL;
  } else if (ct->rank != 3 || ct->dims[0] != B || ct->dims[1] != S || ct->dims[2] != half) {
    return NULL;
  }
  int x = n->inputs[0], cc = n->inputs[1], sc = n->inputs[2], out = n->outputs[0];
  int64_t max_pos = ct->dims[0]; /* (ct points into g's values, which the new nodes' values move) */
  const kiln_dtype F = KILN_DTYPE_F32;
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  KILN_TRY(replace_node(&b, g, ni));
  /* X as 4-D: [B, H, S, D], or [B, S, H, D] for the packed form. */
  int64_t xd[4] = {B, H, S, D}, cd[4] = {B, 1, S, half};
  if (r == 3) {
    memcpy(xd, (int64_t[]){B, S, H, D}, sizeof xd);
    memcpy(cd, (int64_t[]){B, S, 1, half}, sizeof cd);
    x = reshape(&b, x, 4, xd, -1);
  }
  int cs[2] = {cc, sc};
  if (pos >= 0 && !pt) {
    const kiln_dtype I = KILN_DTYPE_I64;
    int64_t pd[2] = {B, S};
    int neg = node(&b, "Less", 13, 2, (int[]){pos, scalar_const(&b, I, 0)}, -1, KILN_DTYPE_BOOL, 2, pd);
    pos = node(&b, "Where", 16, 3, (int[]){neg, scalar_const(&b, I, (double)max_pos), pos}, -1, I, 2, pd);
  }
  for (int j = 0; j < 2; j++) {
    if (pos >= 0) {
      int64_t gd[3] = {B, S, half};
      cs[j] = node(&b, "Gather", 13, 2, (int[]){cs[j], pos}, -1, F, 3, gd);
      if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "axis", 0);
    }
    int64_t c5[5] = {cd[0], cd[1], cd[2], half, 1};
    cs[j] = interleaved ? reshape(&b, cs[j], 5, c5, -1) : reshape(&b, cs[j], 4, cd, -1);
  }
  int rk = interleaved ? 5 : 4;
  int64_t hd[5] = {xd[0], xd[1], xd[2], half, 1};
  int x1, x2, xr = rot < D ? slice(&b, x, 3, 0, rot, 4, xd) : x;
  if (interleaved) {
    int64_t pd[5] = {xd[0], xd[1], xd[2], half, 2};
    int xp = reshape(&b, xr, 5, pd, -1);
    x1 = slice(&b, xp, 4, 0, 1, 5, pd);
    x2 = slice(&b, xp, 4, 1, 2, 5, pd);
  } else {
    int64_t rd[4] = {xd[0], xd[1], xd[2], rot};
    x1 = slice(&b, xr, 3, 0, half, 4, rd);
    x2 = slice(&b, xr, 3, half, rot, 4, rd);
    hd[3] = half;
  }
  int y1 = node(&b, "Sub", 14, 2,
                (int[]){node(&b, "Mul", 14, 2, (int[]){x1, cs[0]}, -1, F, rk, hd),
                        node(&b, "Mul", 14, 2, (int[]){x2, cs[1]}, -1, F, rk, hd)},
                -1, F, rk, hd);
  int y2 = node(&b, "Add", 14, 2,
                (int[]){node(&b, "Mul", 14, 2, (int[]){x1, cs[1]}, -1, F, rk, hd),
                        node(&b, "Mul", 14, 2, (int[]){x2, cs[0]}, -1, F, rk, hd)},
                -1, F, rk, hd);
  bool whole = rot == D;
  int last_out = whole && r == 4 ? out : -1;
  int yr = concat_tree(&b, (int[]){y1, y2}, 2, rk - 1, 13, interleaved ? -1 : last_out);
  int64_t rd4[4] = {xd[0], xd[1], xd[2], rot};
  if (interleaved) yr = reshape(&b, yr, 4, rd4, last_out);
  int y = yr;
  if (!whole) y = concat_tree(&b, (int[]){yr, slice(&b, x, 3, rot, D, 4, xd)}, 2, 3, 13, r == 4 ? out : -1);
  if (r == 3) reshape(&b, y, 3, (const int64_t[]){B, S, H * D}, out);
  return finish(&b);
}

/* ---- QLinearConv / QLinearMatMul (ops/quant.c) ----------------------------- */

static bool q8(kiln_dtype d) { return d == KILN_DTYPE_U8 || d == KILN_DTYPE_I8; }

/* A constant of one element (rank 0 or 1), the form ref requires of the
 * per-tensor parameters. */
static const kiln_tensor *const_one(const kiln_graph *g, int v) {
  const kiln_tensor *t = kiln_opt_const(g, v);
  return t && t->numel == 1 && t->rank <= 1 ? t : NULL;
}

/* A constant of one element or `count` along one axis (rank 1): per tensor
 * or per output channel / row / column. */
static const kiln_tensor *const_per(const kiln_graph *g, int v, int64_t count) {
  const kiln_tensor *t = kiln_opt_const(g, v);
  return t && ((t->numel == 1 && t->rank <= 1) || (t->rank == 1 && t->dims[0] == count)) ? t : NULL;
}

/* A zero point given per row or column whose values are all the same (ORT's
 * per-channel quantizer writes a vector of zeros for symmetric weights): its
 * one element as a scalar constant (new, owned by the caller), else NULL. */
static kiln_tensor *uniform_zero_point(const kiln_graph *g, int v, int64_t count) {
  const kiln_tensor *t = const_per(g, v, count);
  if (!t || t->numel < 2) return NULL;
  size_t es = kiln_dtype_size(t->dtype);
  for (int64_t i = 1; i < t->numel; i++)
    if (memcmp((const char *)t->data + (size_t)i * es, t->data, es)) return NULL;
  kiln_tensor *s;
  if (kiln_tensor_new(t->dtype, 0, NULL, &s)) return NULL;
  memcpy(s->data, t->data, es);
  return s;
}

static float scale_at(const kiln_tensor *t, int64_t i) {
  return (float)kiln_load_f64(t->data, t->dtype, t->numel == 1 ? 0 : i);
}

/* The requantizing tail both rewrites end in: y = QuantizeLinear(Cast<f32>(acc) * m, 1, y_zp),
 * which is ref's saturate(round_half_even((float)acc * m) + y_zp): the
 * Cast rounds the int32 as ref's (float) does, Mul is ref's one float
 * product with the same constant m (kiln_qlinear_multiplier), and the
 * division by a scale of 1 is exact (as is x * 1, should a compiler use the
 * reciprocal), so nothing can contract or reorder: every device that
 * compiles the pieces computes ref's bits. */
static void requant_tail(builder *b, int acc, kiln_tensor *m, int yz, int y, int rank, const int64_t *dims) {
  const kiln_dtype F = KILN_DTYPE_F32;
  int f = node(b, "Cast", 13, 1, &acc, -1, F, rank, dims);
  if (!b->st) b->st = kiln_opt_set_attr_int(last(b), "to", F);
  int mid = const_of(b, m);
  int v = node(b, "Mul", 14, 2, (int[]){f, mid}, -1, F, rank, dims);
  node(b, "QuantizeLinear", 13, 3, (int[]){v, scalar_const(b, F, 1.0), yz}, y, g_dtype(b, yz), rank, dims);
}

/* QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B?) ->
 *   QuantizeLinear(Cast<f32>(ConvInteger(x, w, xz, wz) [+ B as int32 [C, 1...]]) * M, 1, yz)
 * M[c] = kiln_qlinear_multiplier(xs, ws[c], ys), [C, 1...] or a scalar.
 * Only with the scales, zero points and B constants of the shapes and
 * dtypes ref accepts (anything else stays on ref, which words the error);
 * w may be a run-time value. The bias is added in int32 where ref sums in
 * int64: they differ only past int32's range, where ConvInteger itself
 * wraps. */
static kiln_status_t decompose_qlinear_conv(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs < 8 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int i = 0; i < 8; i++)
    if (n->inputs[i] < 0) return NULL;
  int x = n->inputs[0], w = n->inputs[3], bias = n->n_inputs > 8 ? n->inputs[8] : -1, y = n->outputs[0];
  const kiln_type *xt = &g->values[x].type, *wt = &g->values[w].type, *yt = &g->values[y].type;
  if (!kiln_opt_shape_known(xt) || !kiln_opt_shape_known(wt) || !kiln_opt_shape_known(yt)) return NULL;
  if (!q8(xt->dtype) || !q8(wt->dtype) || xt->rank < 3 || wt->rank != xt->rank || yt->rank != xt->rank) return NULL;
  int64_t co = wt->dims[0];
  const kiln_tensor *xs = const_one(g, n->inputs[1]), *xz = const_one(g, n->inputs[2]);
  const kiln_tensor *ws = const_per(g, n->inputs[4], co), *wz = const_per(g, n->inputs[5], co);
  const kiln_tensor *ys = const_one(g, n->inputs[6]), *yz = const_one(g, n->inputs[7]);
  const kiln_tensor *bt = bias >= 0 ? kiln_opt_const(g, bias) : NULL;
  if (!xs || !xz || !ws || !wz || !ys || !yz || (bias >= 0 && !bt)) return NULL;
  if (xs->dtype != KILN_DTYPE_F32 || ws->dtype != KILN_DTYPE_F32 || ys->dtype != KILN_DTYPE_F32) return NULL;
  if (xz->dtype != xt->dtype || wz->dtype != wt->dtype || !q8(yz->dtype) || yt->dtype != yz->dtype) return NULL;
  if (bt && (bt->dtype != KILN_DTYPE_I32 || bt->rank != 1 || bt->dims[0] != co)) return NULL;
  if (yt->dims[1] != co) return NULL;
  /* Everything read from g->values and the node before it moves. */
  int rank = yt->rank, xz_id = n->inputs[2], wz_id = n->inputs[5], yz_id = n->inputs[7];
  int64_t ydims[KILN_MAX_RANK], cdims[KILN_MAX_RANK];
  memcpy(ydims, yt->dims, sizeof(int64_t) * (size_t)rank);
  cdims[0] = co;
  for (int d = 1; d < rank - 1; d++) cdims[d] = 1;
  kiln_tensor *m, *bc = NULL;
  bool per_channel = ws->numel > 1;
  KILN_TRY(kiln_tensor_new(KILN_DTYPE_F32, per_channel ? rank - 1 : 0, cdims, &m));
  float xsv = scale_at(xs, 0), ysv = scale_at(ys, 0);
  for (int64_t c = 0; c < m->numel; c++) ((float *)m->data)[c] = kiln_qlinear_multiplier(xsv, scale_at(ws, c), ysv);
  kiln_status_t st = bt ? kiln_tensor_new(KILN_DTYPE_I32, rank - 1, cdims, &bc) : NULL;
  if (st) {
    kiln_tensor_release(m);
    return st;
  }
  if (bc) memcpy(bc->data, bt->data, sizeof(int32_t) * (size_t)co);
  /* The Conv attributes ConvInteger shares. */
  static const char *list_attrs[4] = {"kernel_shape", "strides", "pads", "dilations"};
  int64_t lists[4][2 * KILN_MAX_RANK];
  int counts[4];
  for (int a = 0; a < 4; a++) {
    const int64_t *v = kiln_attr_ints(n, list_attrs[a], &counts[a]);
    if (!v) counts[a] = -1;
    else if (counts[a] > 2 * KILN_MAX_RANK) counts[a] = -2; /* ref words it */
    else memcpy(lists[a], v, sizeof(int64_t) * (size_t)counts[a]);
  }
  int64_t group = kiln_attr_int(n, "group", 1);
  char auto_pad[32];
  snprintf(auto_pad, sizeof auto_pad, "%s", kiln_attr_string(n, "auto_pad", "NOTSET"));
  for (int a = 0; a < 4; a++)
    if (counts[a] == -2) {
      kiln_tensor_release(m);
      kiln_tensor_release(bc);
      return NULL;
    }
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  st = replace_node(&b, g, ni);
  if (st) {
    kiln_tensor_release(m);
    kiln_tensor_release(bc);
    return st;
  }
  const kiln_dtype I = KILN_DTYPE_I32;
  int acc = node(&b, "ConvInteger", 10, 4, (int[]){x, w, xz_id, wz_id}, -1, I, rank, ydims);
  for (int a = 0; a < 4; a++)
    if (!b.st && counts[a] >= 0) b.st = kiln_opt_set_attr_ints(last(&b), list_attrs[a], counts[a], lists[a]);
  if (!b.st) b.st = kiln_opt_set_attr_int(last(&b), "group", group);
  if (!b.st) b.st = kiln_opt_set_attr_string(last(&b), "auto_pad", auto_pad);
  if (bc) acc = node(&b, "Add", 14, 2, (int[]){acc, const_of(&b, bc)}, -1, I, rank, ydims);
  requant_tail(&b, acc, m, yz_id, y, rank, ydims);
  return finish(&b);
}

/* QLinearMatMul(a, as, az, b, bs, bz, ys, yz) ->
 *   QuantizeLinear(Cast<f32>(MatMulInteger(a, b, az, bz)) * M, 1, yz)
 * M[i, j] = kiln_qlinear_multiplier(as[i], bs[j], ys[i]): a scalar, [M, 1],
 * [1, N] or [M, N] as the scales are per tensor, per row (as, ys) or per
 * column (bs). Only with constant parameters; the zero points one element
 * each (the compiled MatMulInteger's and QuantizeLinear's form), per-row or
 * per-column scales only for operands of rank 2 or more (batched layouts
 * stay on ref); scales f32, or f16 / bf16 from opset 21, converted to f32
 * first as ref does. */
static kiln_status_t decompose_qlinear_matmul(kiln_graph *g, int ni) {
  const kiln_node *n = &g->nodes[ni];
  if (n->domain[0] || n->n_inputs != 8 || n->n_outputs != 1 || n->outputs[0] < 0) return NULL;
  for (int i = 0; i < 8; i++)
    if (n->inputs[i] < 0) return NULL;
  int a = n->inputs[0], bm = n->inputs[3], y = n->outputs[0];
  const kiln_type *at = &g->values[a].type, *bt = &g->values[bm].type, *yt = &g->values[y].type;
  if (!kiln_opt_shape_known(at) || !kiln_opt_shape_known(bt) || !kiln_opt_shape_known(yt)) return NULL;
  if (!q8(at->dtype) || !q8(bt->dtype) || at->rank < 1 || bt->rank < 1 || yt->rank < 0) return NULL;
  bool mats = at->rank >= 2 && bt->rank >= 2;
  int64_t rows = mats ? at->dims[at->rank - 2] : 1, cols = mats ? bt->dims[bt->rank - 1] : 1;
  const kiln_tensor *as = const_per(g, n->inputs[1], rows), *bs = const_per(g, n->inputs[4], cols);
  const kiln_tensor *ys = const_per(g, n->inputs[6], rows);
  const kiln_tensor *az = const_one(g, n->inputs[2]), *bz = const_one(g, n->inputs[5]), *yz = const_one(g, n->inputs[7]);
  /* MatMulInteger's compiled kernel takes scalar zero points: a per-row or
   * per-column one whose values agree becomes that scalar */
  kiln_tensor *az_u = az ? NULL : uniform_zero_point(g, n->inputs[2], rows);
  kiln_tensor *bz_u = bz ? NULL : uniform_zero_point(g, n->inputs[5], cols);
  if (az_u) az = az_u;
  if (bz_u) bz = bz_u;
  if (!as || !bs || !ys || !az || !bz || !yz || az->dtype != at->dtype || bz->dtype != bt->dtype) {
    kiln_tensor_release(az_u);
    kiln_tensor_release(bz_u);
    return NULL;
  }
  const kiln_tensor *scales[3] = {as, bs, ys};
  for (int i = 0; i < 3; i++) {
    kiln_dtype d = scales[i]->dtype;
    if (d != KILN_DTYPE_F32 && !(n->opset >= 21 && (d == KILN_DTYPE_F16 || d == KILN_DTYPE_BF16))) yz = NULL;
  }
  if (!yz || !q8(yz->dtype) || yt->dtype != yz->dtype) {
    kiln_tensor_release(az_u);
    kiln_tensor_release(bz_u);
    return NULL;
  }
  bool per_row = as->numel > 1 || ys->numel > 1, per_col = bs->numel > 1;
  int rank = yt->rank, az_id = n->inputs[2], bz_id = n->inputs[5], yz_id = n->inputs[7];
  int64_t ydims[KILN_MAX_RANK];
  memcpy(ydims, yt->dims, sizeof(int64_t) * (size_t)rank);
  int64_t mdims[2] = {per_row ? rows : 1, per_col ? cols : 1};
  kiln_tensor *m = NULL;
  kiln_status_t st = kiln_tensor_new(KILN_DTYPE_F32, per_row || per_col ? 2 : 0, mdims, &m);
  for (int64_t i = 0; !st && i < mdims[0]; i++)
    for (int64_t j = 0; j < mdims[1]; j++)
      ((float *)m->data)[i * mdims[1] + j] = kiln_qlinear_multiplier(scale_at(as, i), scale_at(bs, j), scale_at(ys, i));
  builder b = {.g = g};
  snprintf(b.base, sizeof b.base, "%s", n->name);
  if (!st) st = replace_node(&b, g, ni);
  if (st) {
    kiln_tensor_release(m);
    kiln_tensor_release(az_u);
    kiln_tensor_release(bz_u);
    return st;
  }
  if (az_u) az_id = const_of(&b, az_u); /* takes the tensor */
  if (bz_u) bz_id = const_of(&b, bz_u);
  int acc = node(&b, "MatMulInteger", 10, 4, (int[]){a, bm, az_id, bz_id}, -1, KILN_DTYPE_I32, rank, ydims);
  requant_tail(&b, acc, m, yz_id, y, rank, ydims);
  return finish(&b);
}

/* What decompose_graph leaves whole for a device routine. */
enum { KEEP_RECURRENT = 1, KEEP_DECODE_ATTENTION = 2 };

static kiln_status_t decompose_graph(kiln_graph *g, unsigned keep) {
  bool keep_recurrent = keep & KEEP_RECURRENT;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) /* from the end: insertions move no node still to visit */
    switch (kiln_node_op_id(&g->nodes[ni])) {
      case KILN_OP_DynamicQuantizeLinear: KILN_TRY(decompose_dql(g, ni)); break;
      case KILN_OP_QLinearConv: KILN_TRY(decompose_qlinear_conv(g, ni)); break;
      case KILN_OP_QLinearMatMul: KILN_TRY(decompose_qlinear_matmul(g, ni)); break;
      case KILN_OP_BatchNormalization: KILN_TRY(decompose_batchnorm(g, ni)); break;
      case KILN_OP_Attention:
        if (!(keep & KEEP_DECODE_ATTENTION) || !kiln_attention_decode_step(g, &g->nodes[ni]))
          KILN_TRY(decompose_attention(g, ni));
        break;
      case KILN_OP_Swish:
      case KILN_OP_SwiGLU:
      case KILN_OP_Mish: KILN_TRY(decompose_activation(g, ni)); break;
      case KILN_OP_RMSNormalization: KILN_TRY(decompose_rms_norm(g, ni)); break;
      case KILN_OP_RotaryEmbedding: KILN_TRY(decompose_rope(g, ni)); break;
      case KILN_OP_GroupNormalization: KILN_TRY(decompose_group_norm(g, ni)); break;
      case KILN_OP_MeanVarianceNormalization: KILN_TRY(decompose_mvn(g, ni)); break;
      case KILN_OP_LpNormalization: KILN_TRY(decompose_lp_norm(g, ni)); break;
      case KILN_OP_LayerNormalization:
        if (g->nodes[ni].n_outputs > 1) KILN_TRY(decompose_layer_norm(g, ni));
        break;
      case KILN_OP_NegativeLogLikelihoodLoss:
      case KILN_OP_SoftmaxCrossEntropyLoss: KILN_TRY(decompose_loss(g, ni)); break;
      case KILN_OP_Concat:
        if (g->nodes[ni].n_inputs > 8) KILN_TRY(decompose_concat(g, ni));
        break;
      case KILN_OP_Softmax:
      case KILN_OP_LogSoftmax: KILN_TRY(decompose_softmax(g, ni)); break;
      case KILN_OP_RNN: KILN_TRY(keep_recurrent ? NULL : decompose_rnn(g, ni, RNN_SIMPLE)); break;
      case KILN_OP_GRU: KILN_TRY(keep_recurrent ? NULL : decompose_rnn(g, ni, RNN_GRU)); break;
      case KILN_OP_LSTM: KILN_TRY(keep_recurrent ? NULL : decompose_rnn(g, ni, RNN_LSTM)); break;
      default: break;
    }
  return NULL;
}

kiln_status_t kiln_pass_decompose(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_decompose));
  return decompose_graph(g, 0);
}

kiln_status_t kiln_pass_decompose_keep_recurrent(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_decompose_keep_recurrent));
  return decompose_graph(g, KEEP_RECURRENT);
}

kiln_status_t kiln_pass_decompose_keep_attention(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_decompose_keep_attention));
  return decompose_graph(g, KEEP_DECODE_ATTENTION);
}

kiln_status_t kiln_pass_decompose_keep_routines(kiln_graph *g) {
  KILN_TRY(kiln_opt_run_on_subgraphs(g, kiln_pass_decompose_keep_routines));
  return decompose_graph(g, KEEP_RECURRENT | KEEP_DECODE_ATTENTION);
}
