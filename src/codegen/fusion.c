/* Fusion grouping and group lowering (see fusion.h). */
#include "codegen/fusion.h"

#include "codegen/lower.h"
#include "ops/op.h"
#include "passes/passes_opt.h"

static bool fusable_class(kiln_op_class c) {
  return c == KILN_OPCLASS_ELEMENTWISE || c == KILN_OPCLASS_BROADCAST || c == KILN_OPCLASS_INJECTIVE ||
         c == KILN_OPCLASS_REDUCTION;
}

/* Decides, in node order, which producers are inlined into their consumer
 * (TVM's lattice): elementwise, broadcast and injective producers inline
 * into a consumer that reads each of their elements at most once; a
 * reduction over trailing axes inlines into an elementwise/broadcast
 * consumer over its input's shape (the reduction is then computed once per
 * row by the scheduler). With contraction_epilogues, a contraction (TVM's
 * out-elementwise-fusable class) inlines into an elementwise/broadcast
 * consumer of its output's shape whose group has no reduction yet, so that
 * the kernel's element is f(sum) (the contraction template's epilogue);
 * such a group then takes no other reduction. A value read by several
 * nodes, or that is a graph output, is materialized, and so is a producer
 * whose group would give the kernel more than KILN_FUSION_MAX_OPERANDS
 * operands (counted with repeats: an upper bound; the cpu launches at most
 * 64 arguments, Vulkan binds 96 buffers): a Concat tree over the unrolled
 * steps of an RNN (passes/decompose.c) otherwise becomes one kernel
 * reading every step. */
#define KILN_FUSION_MAX_OPERANDS 48
#define KILN_FUSION_CONCAT_INPUTS 2

/* A Transpose swapping the first two axes of a lone Conv's output that the
 * runtime's convolution can write in that order (kiln_rt_conv_args.y_cn). */
static bool transposed_conv(const kiln_graph *g, const kiln_node *t, const kiln_node *conv) {
  if (!kiln_node_is(t, KILN_OP_Transpose) || !kiln_node_is(conv, KILN_OP_Conv) || conv->n_inputs != 2 ||
      kiln_attr_int(conv, "group", 1) != 1)
    return false;
  const kiln_type *ty = &g->values[conv->outputs[0]].type;
  if (ty->dtype != KILN_DTYPE_F32 || ty->rank < 3) return false;
  const kiln_attr *perm = kiln_node_attr(t, "perm");
  if (!perm || perm->type != KILN_ATTR_INTS || perm->n != ty->rank) return false;
  for (int i = 0; i < ty->rank; i++)
    if (perm->ints[i] != (i < 2 ? 1 - i : i)) return false;
  return true;
}

kiln_status_t kiln_fusion_plan(const kiln_graph *g, const kiln_op_class *cls, bool contraction_epilogues,
                               bool conv_transposed_output, kiln_fusion *f) {
  memset(f, 0, sizeof *f);
  int nn = g->n_nodes;
  f->n_nodes = nn;
  f->cls = malloc(((size_t)nn + 1) * sizeof *f->cls);
  f->uses = calloc((size_t)g->n_values + 1, sizeof *f->uses);
  f->group_of = malloc(((size_t)nn + 1) * sizeof *f->group_of);
  f->n_members = malloc(((size_t)nn + 1) * sizeof *f->n_members);
  bool *has_reduce = malloc(((size_t)nn + 1) * sizeof *has_reduce);
  bool *has_contraction = malloc(((size_t)nn + 1) * sizeof *has_contraction);
  bool *has_injective = malloc(((size_t)nn + 1) * sizeof *has_injective);
  bool *sealed = calloc((size_t)nn + 1, sizeof *sealed); /* per group root: takes no consumer */
  int *operands = malloc(((size_t)nn + 1) * sizeof *operands); /* per group root: inputs, repeats counted */
  /* Each group as a list (head at the root, next per node) while merging:
   * a merge relabels only the merged group's members. */
  int *next = malloc(((size_t)nn + 1) * sizeof *next), *tail = malloc(((size_t)nn + 1) * sizeof *tail);
  f->members = malloc(((size_t)nn + 1) * sizeof *f->members);
  f->member_start = malloc(((size_t)nn + 1) * sizeof *f->member_start);
  if (!f->cls || !f->uses || !f->group_of || !f->n_members || !has_reduce || !has_contraction || !has_injective ||
      !sealed || !operands || !next || !tail || !f->members || !f->member_start) {
    free(sealed);
    free(has_injective);
    free(next);
    free(tail);
    free(operands);
    free(has_reduce);
    free(has_contraction);
    kiln_fusion_free(f);
    return KILN_OOM();
  }
  kiln_ptr_vec names = {0};
  for (int n = 0; n < nn; n++) {
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++)
      if (node->inputs[i] >= 0) f->uses[node->inputs[i]]++;
    /* A value a subgraph reads by name is materialized (the body's plan reads it). */
    names.count = 0;
    kiln_status_t st = kiln_opt_subgraph_reads(node, &names);
    for (int k = 0; k < names.count && !st; k++) {
      int v = kiln_graph_find_value(g, names.items[k]);
      if (v >= 0) f->uses[v] += 2;
    }
    if (st) {
      kiln_ptr_vec_free(&names);
      free(sealed);
      free(has_injective);
      free(next);
      free(tail);
      free(operands);
      free(has_reduce);
      free(has_contraction);
      kiln_fusion_free(f);
      return st;
    }
    f->cls[n] = cls[n];
    f->group_of[n] = n;
    f->n_members[n] = 1;
    next[n] = -1;
    tail[n] = n;
    operands[n] = node->n_inputs;
    has_contraction[n] = contraction_epilogues && cls[n] == KILN_OPCLASS_CONTRACTION;
    has_reduce[n] = cls[n] == KILN_OPCLASS_REDUCTION || has_contraction[n];
    has_injective[n] = cls[n] == KILN_OPCLASS_INJECTIVE;
  }
  for (int n = 0; n < nn; n++) {
    const kiln_node *node = &g->nodes[n];
    if (!fusable_class(cls[n])) continue;
    const kiln_type *out = &g->values[node->outputs[0]].type;
    bool consumer_elementwise = cls[n] == KILN_OPCLASS_ELEMENTWISE || cls[n] == KILN_OPCLASS_BROADCAST;
    for (int i = 0; i < node->n_inputs; i++) {
      int v = node->inputs[i];
      if (v < 0) continue;
      int p = g->values[v].producer;
      if (p < 0 || !(fusable_class(cls[p]) || has_contraction[p]) || f->group_of[p] != p) continue;
      if (f->uses[v] != 1 || g->values[v].is_graph_output || sealed[p]) continue;
      /* Run-time indices stay a buffer: the plan checks their range before the kernel. */
      int idx_in, idx_nb;
      int64_t idx_bounds[KILN_MAX_RANK];
      if (kiln_lower_runtime_indices(g, node, &idx_in, &idx_nb, idx_bounds) && idx_in == i) continue;
      /* A contraction's group computes one sum per element and nothing else. */
      if ((has_contraction[p] || has_contraction[n]) && has_reduce[p] && has_reduce[n]) continue;
      const kiln_type *vt = &g->values[v].type;
      bool ok, seal = false;
      if (has_contraction[p]) {
        /* A half result is not a contraction's element: the tensorized
         * GEMM and convolution store f32 (or their integer sums); rounding
         * to the half goes with what follows it (widen_half.c's Casts),
         * else the contraction would run as a plain loop nest. */
        bool half_out = kiln_dtype_is_half(out->dtype);
        ok = consumer_elementwise && kiln_type_same_shape(out, vt) && !half_out;
        if (!ok && conv_transposed_output && f->n_members[p] == 1 && f->n_members[n] == 1 &&
            transposed_conv(g, node, &g->nodes[p]))
          ok = seal = true;
      } else if (has_reduce[p]) {
        /* The reduction's loops must line up with the consumer's: only
         * elementwise consumers over the reduction input's shape. */
        const kiln_node *pn = &g->nodes[p];
        const kiln_type *rin = &g->values[pn->inputs[0]].type;
        ok = consumer_elementwise &&
             (kiln_type_same_shape(out, vt) ||
              (cls[p] == KILN_OPCLASS_REDUCTION && kiln_type_same_shape(out, rin) && vt->rank == out->rank &&
               kiln_lower_reduces_trailing(g, pn)));
        bool softmax = kiln_node_is(pn, KILN_OP_Softmax) || kiln_node_is(pn, KILN_OP_LogSoftmax);
        if (ok && cls[p] == KILN_OPCLASS_REDUCTION && !softmax && !kiln_type_same_shape(out, vt) &&
            !kiln_attr_int(pn, "keepdims", 1))
          ok = false;
      } else if (consumer_elementwise) {
        ok = kiln_type_numel(vt) == kiln_type_numel(out) && kiln_type_same_shape(vt, out);
      } else {
        /* Injective and reduction consumers read each element at most once,
         * except Expand, which repeats them. */
        ok = !kiln_node_is(node, KILN_OP_Expand);
        /* ...once: a consumer that reads its input several times would
         * redo an injective producer's index arithmetic on each read
         * (SSD's Softmax over a concat of six transposed heads: 6x the
         * time of the two kernels apart). */
        if (node->op && (node->op->flags & KILN_OP_REREADS_INPUT) && has_injective[p]) ok = false;
      }
      /* A Concat group of many inputs (passes/decompose.c makes a big one a
       * tree of Concats, fused back into one group) stays a buffer under an
       * elementwise consumer: fused, each of the consumer's elements picks
       * its input through the tree's selects (DenseNet's BN + ReLU over the
       * concatenation of every earlier layer: a third of densenet201's time,
       * at 1-2 GFLOP/s); apart, the concat is runs of copies and the
       * consumer reads one buffer. */
      if (consumer_elementwise && kiln_node_is(&g->nodes[p], KILN_OP_Concat) && operands[p] > KILN_FUSION_CONCAT_INPUTS)
        continue;
      if (!ok || operands[n] - 1 + operands[p] > KILN_FUSION_MAX_OPERANDS) continue;
      /* Merge p's group into n's. */
      for (int k = p; k >= 0; k = next[k]) f->group_of[k] = n;
      next[tail[p]] = next[n];
      next[n] = p;
      if (tail[n] == n) tail[n] = tail[p];
      has_reduce[n] |= has_reduce[p];
      has_contraction[n] |= has_contraction[p];
      has_injective[n] |= has_injective[p];
      f->n_members[n] += f->n_members[p];
      f->n_members[p] = 0;
      sealed[n] |= seal;
      operands[n] += operands[p] - 1;
    }
  }
  /* Members in node order per group (lowering goes producers first). */
  int at = 0;
  for (int n = 0; n < nn; n++) {
    f->member_start[n] = at;
    at += f->n_members[n];
  }
  for (int n = 0; n < nn; n++) tail[n] = f->member_start[n]; /* reused: each group's fill cursor */
  for (int n = 0; n < nn; n++) f->members[tail[f->group_of[n]]++] = n;
  kiln_ptr_vec_free(&names);
  free(next);
  free(tail);
  free(operands);
  free(has_reduce);
  free(has_contraction);
  free(has_injective);
  free(sealed);
  return NULL;
}

void kiln_fusion_free(kiln_fusion *f) {
  free(f->cls);
  free(f->uses);
  free(f->group_of);
  free(f->n_members);
  free(f->members);
  free(f->member_start);
  memset(f, 0, sizeof *f);
}

/* An elementwise group whose every operand has the output's shape is one
 * flat loop: index arithmetic vanishes and the loop vectorizes whatever the
 * tensors' rank. */
static bool flattenable(const kiln_graph *g, const kiln_fusion *f, int root) {
  const kiln_type *out = &g->values[g->nodes[root].outputs[0]].type;
  for (int n = 0; n <= root; n++) {
    if (f->group_of[n] != root) continue;
    if (f->cls[n] != KILN_OPCLASS_ELEMENTWISE && f->cls[n] != KILN_OPCLASS_BROADCAST) return false;
    const kiln_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_inputs; i++) {
      int v = node->inputs[i];
      if (v < 0 || kiln_lower_is_param_input(node, i)) continue;
      if (!kiln_type_same_shape(&g->values[v].type, out) && kiln_type_numel(&g->values[v].type) != 1) return false;
    }
  }
  return true;
}

typedef struct view_map {
  int *value;
  te_tensor **view;
  int n;
} view_map;

static te_tensor *view_of(const view_map *m, int v) {
  for (int i = m->n - 1; i >= 0; i--) /* the latest first: a member mostly reads the one before */
    if (m->value[i] == v) return m->view[i];
  return NULL;
}

static void view_add(view_map *m, int v, te_tensor *view) {
  m->value[m->n] = v;
  m->view[m->n++] = view;
}

kiln_status_t kiln_fusion_build(const kiln_graph *g, const kiln_fusion *f, int root, bool allow_flat,
                                kiln_fused_kernel *out) {
  memset(out, 0, sizeof *out);
  te_builder *b;
  KILN_TRY(te_builder_create(&b));
  kiln_status_t st = NULL;
  /* The group's values and their views: a small list searched linearly
   * (a group reads at most KILN_FUSION_MAX_OPERANDS values from outside);
   * a table per value of g would cost O(values) per kernel. */
  const int *members = &f->members[f->member_start[root]];
  int n_members = f->n_members[root], cap = 1;
  for (int m = 0; m < n_members; m++) cap += g->nodes[members[m]].n_inputs + 1;
  view_map views = {malloc((size_t)cap * sizeof(int)), malloc((size_t)cap * sizeof(te_tensor *)), 0};
  int *args = malloc((size_t)cap * sizeof(int));
  int n_args = 0;
  if (!views.value || !views.view || !args) {
    st = KILN_OOM();
    goto done;
  }
  /* Output buffer first: argument 0. */
  const kiln_value_def *ov = &g->values[g->nodes[root].outputs[0]];
  bool flat = allow_flat && flattenable(g, f, root);
  int64_t numel = kiln_type_numel(&ov->type);
  te_add_buffer(b, ov->type.dtype, flat ? 1 : ov->type.rank, flat ? &numel : ov->type.dims, g->nodes[root].outputs[0]);
  args[n_args++] = g->nodes[root].outputs[0];
  out->elementwise_only = true;
  for (int m = 0; m < n_members && !st; m++) {
    int n = members[m];
    if (f->cls[n] != KILN_OPCLASS_ELEMENTWISE && f->cls[n] != KILN_OPCLASS_BROADCAST) out->elementwise_only = false;
    const kiln_node *node = &g->nodes[n];
    const te_tensor *ins[16] = {0};
    if (node->n_inputs > 16) {
      st = kiln_error(KILN_UNSUPPORTED, "node '%s' (%s): more than 16 inputs", node->name, node->op_type);
      break;
    }
    for (int i = 0; i < node->n_inputs; i++) {
      int v = node->inputs[i];
      if (v < 0 || kiln_lower_is_param_input(node, i)) continue; /* read at compile time */
      te_tensor *view = view_of(&views, v);
      if (!view) {
        /* Read from outside the group: a kernel argument. */
        const kiln_value_def *vd = &g->values[v];
        bool scalar = kiln_type_numel(&vd->type) == 1;
        int buf = flat ? te_add_buffer(b, vd->type.dtype, scalar ? 0 : 1, &numel, v)
                       : te_add_buffer(b, vd->type.dtype, vd->type.rank, vd->type.dims, v);
        if (vd->constant) te_buffer_set_constant(b, buf);
        args[n_args++] = v;
        view = te_view_buffer(b, buf);
        view_add(&views, v, view);
      }
      ins[i] = view;
    }
    te_tensor *o = NULL;
    st = kiln_lower_node(b, g, node, ins, &o);
    if (st) {
      st = kiln_status_annotate(st, "node '%s' (%s)", node->name, node->op_type);
    } else {
      if (flat) { /* same elements, seen as one dimension */
        o->rank = 1;
        o->dims[0] = numel;
      }
      view_add(&views, node->outputs[0], o);
    }
  }
  if (!st) st = te_builder_status(b);
  if (!st) {
    out->b = b;
    out->root = view_of(&views, g->nodes[root].outputs[0]);
    out->n_args = n_args;
    out->args = args;
    out->flat = flat;
    out->n_members = f->n_members[root];
    b = NULL;
    args = NULL;
  }
done:
  free(views.value);
  free(views.view);
  free(args);
  te_builder_destroy(b);
  return st;
}

void kiln_fused_kernel_free(kiln_fused_kernel *k) {
  te_builder_destroy(k->b);
  free(k->args);
  memset(k, 0, sizeof *k);
}
