/* op.h — how an op is defined: schema facts, shape/type inference, and
 * its reference kernel. One kiln_op_def per (domain, op_type); each op
 * family's file (ops/elementwise.c, ops/conv.c, ...) registers its ops in
 * a table returned by kiln_ops_<family>(). ops/registry.c collects them.
 *
 * A reference kernel is plain, obviously-correct C. It receives its inputs
 * as kiln_value (NULL for an absent optional input), reads attributes from
 * ctx->node, allocates its outputs with kiln_kernel_output_tensor (or sets
 * ctx->outputs[i] directly for sequences/optionals) and returns NULL, or an
 * error that says what was wrong with which input (the executor adds the
 * node's name and op). Kernels never abort on bad data: an out-of-range
 * index is a KILN_OUT_OF_RANGE error.
 *
 * Inference receives input types (and constant inputs when known) and
 * fills output types. Unknown dims are -1; an op that cannot know its
 * output shape statically (NonZero, Unique...) leaves them unknown.
 */
#ifndef KILN_OPS_OP_H
#define KILN_OPS_OP_H

#include "ir/graph.h"
#include "ops/op_ids.h"

struct kiln_kernel_ctx;
struct kiln_infer_ctx;
struct kiln_gradient_ctx;

typedef kiln_status_t (*kiln_kernel_fn)(struct kiln_kernel_ctx *ctx);
typedef kiln_status_t (*kiln_infer_fn)(struct kiln_infer_ctx *ctx);
/* Estimated floating-point operations of one node from the types inferred
 * in g (contractions: 2 per multiply-add); 0 when shapes are unknown. */
typedef int64_t (*kiln_flops_fn)(const kiln_graph *g, const kiln_node *node);
/* Builds the gradient subgraph of one node (filled by autodiff). */
typedef kiln_status_t (*kiln_gradient_fn)(struct kiln_gradient_ctx *ctx);

/* How an op fuses, after TVM's op-pattern lattice. The class is a fact of
 * the op; whether a device compiles a given node of it (dtypes, constant
 * parameters) is codegen's claim (kiln_lower_class).
 *   elementwise  out[i] = f(in[i]): unary math, activations, Cast, Clip
 *   broadcast    elementwise over numpy-broadcast inputs: arithmetic,
 *                comparison, Where, PRelu
 *   injective    every output element is one input element (element order
 *                changes, no arithmetic): Transpose, Reshape, Slice, Concat
 *   reduction    each output element combines many input elements along
 *                axes or windows: Reduce*, Softmax, pools, LayerNorm
 *   contraction  multiply-accumulate over a shared axis, with fusable
 *                elementwise epilogues: MatMul, Gemm, Conv, attention */
typedef enum kiln_op_class {
  KILN_OPCLASS_NONE = 0, /* opaque: never fused, never lowered */
  KILN_OPCLASS_ELEMENTWISE,
  KILN_OPCLASS_BROADCAST,
  KILN_OPCLASS_INJECTIVE,
  KILN_OPCLASS_REDUCTION,
  KILN_OPCLASS_CONTRACTION,
} kiln_op_class;

enum {
  KILN_OP_NONDETERMINISTIC = 1 << 0, /* random outputs (Bernoulli, RandomUniformLike, training Dropout) */
  KILN_OP_CONTROL_FLOW = 1 << 1,     /* runs subgraphs (If, Loop, Scan, SequenceMap) */
  /* Reads each input element several times (a normalization's passes,
   * overlapping windows, interpolation taps): fusion materializes an
   * injective producer (a concat of transposed heads, a pad) rather than
   * redo its index arithmetic on every read. */
  KILN_OP_REREADS_INPUT = 1 << 2,
};

typedef struct kiln_op_def {
  const char *domain;   /* "" for ai.onnx, "ai.onnx.preview.training", ... */
  const char *op_type;
  int min_inputs, max_inputs;   /* max -1 = variadic */
  int min_outputs, max_outputs; /* max -1 = variadic */
  kiln_infer_fn infer;          /* may be NULL: outputs stay unknown */
  kiln_kernel_fn ref_kernel;    /* required */
  unsigned flags;
  kiln_op_id id;                /* required: test_registry checks every id has one definition */
  kiln_op_class op_class;       /* NONE: opaque */
  kiln_flops_fn flops;          /* NULL: one per output element */
  kiln_gradient_fn gradient;    /* NULL: not differentiable (yet) */
} kiln_op_def;

/* The id of node's op (KILN_OP_UNKNOWN before kiln_pass_resolve_ops or
 * for an unregistered op). */
static inline kiln_op_id kiln_node_op_id(const kiln_node *node) { return node->op ? node->op->id : KILN_OP_UNKNOWN; }
static inline bool kiln_node_is(const kiln_node *node, kiln_op_id id) { return kiln_node_op_id(node) == id; }

/* Runs a subgraph with the given inputs; the executor provides it. On
 * success out_outputs[0..n_outputs) receive owned values. Outer-scope
 * values are resolved from the calling frame. */
typedef kiln_status_t (*kiln_subgraph_runner)(void *runner_data, const kiln_graph *g, int n_inputs,
                                              kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs);

typedef struct kiln_kernel_ctx {
  const kiln_node *node;
  int opset;                 /* node->opset, for version-dependent semantics */
  int n_inputs;
  kiln_value *const *inputs; /* borrowed; entries NULL for absent inputs */
  int n_outputs;
  kiln_value **outputs;      /* kernel stores owned values; NULL entries for absent outputs stay NULL */
  bool *output_wanted;       /* output_wanted[i]: the node has output i (value id != -1) */
  kiln_subgraph_runner run_subgraph;
  void *runner_data;
} kiln_kernel_ctx;

/* Input i as a tensor, or NULL if absent (or not a tensor). */
kiln_tensor *kiln_kernel_input(const kiln_kernel_ctx *ctx, int i);
/* Input i as a tensor; an error naming the input if absent or not a tensor. */
/* Narrow dtypes (float8, float4, int4, int2) reach only the ONNX ops whose
 * schemas name them (Cast, QuantizeLinear, Reshape, ...: kiln_op_takes_narrow).
 * Run before a kernel: an error naming the input for any other ONNX op, so no
 * generic element path computes on them by accident. */
bool kiln_op_takes_narrow(const kiln_op_def *op);
kiln_status_t kiln_kernel_check_narrow_inputs(const kiln_kernel_ctx *ctx);
kiln_status_t kiln_kernel_require_input(const kiln_kernel_ctx *ctx, int i, kiln_tensor **out);
/* Allocates output i (zero-filled) and stores it in ctx->outputs[i]. *out is borrowed. */
kiln_status_t kiln_kernel_output_tensor(kiln_kernel_ctx *ctx, int i, kiln_dtype dtype, int rank,
                                        const int64_t *dims, kiln_tensor **out);
/* The same with the data uninitialized, for a kernel that writes every element. */
kiln_status_t kiln_kernel_output_uninit(kiln_kernel_ctx *ctx, int i, kiln_dtype dtype, int rank,
                                        const int64_t *dims, kiln_tensor **out);
/* Stores an owned tensor as output i (takes the reference). */
kiln_status_t kiln_kernel_set_output(kiln_kernel_ctx *ctx, int i, kiln_tensor *t);

typedef struct kiln_infer_ctx {
  const kiln_node *node;
  int opset;
  int n_inputs;
  const kiln_type *const *inputs;     /* borrowed; NULL for absent */
  const kiln_tensor *const *consts;   /* constant value of input i, or NULL */
  int n_outputs;
  kiln_type *outputs;                 /* to fill; start as KILN_TYPE_UNKNOWN */
} kiln_infer_ctx;

/* Helpers for common inference rules. */
kiln_status_t kiln_infer_same_as_input(kiln_infer_ctx *ctx, int input, int output);
/* Multidirectional (numpy) broadcast of all present inputs' shapes into output 0 with dtype. */
kiln_status_t kiln_infer_broadcast(kiln_infer_ctx *ctx, kiln_dtype dtype);
/* Sets output i to tensor(dtype, rank, dims); dims may contain -1. */
void kiln_infer_set(kiln_infer_ctx *ctx, int i, kiln_dtype dtype, int rank, const int64_t *dims);

/* Numpy-style broadcast of two shapes; error names both if incompatible. */
kiln_status_t kiln_broadcast_shapes(int ra, const int64_t *a, int rb, const int64_t *b, int *out_rank,
                                    int64_t *out_dims);

/* FLOP rules for the op tables (ops/op_flops.c). */
int64_t kiln_flops_conv(const kiln_graph *g, const kiln_node *node);
int64_t kiln_flops_qlinear_conv(const kiln_graph *g, const kiln_node *node);
int64_t kiln_flops_conv_transpose(const kiln_graph *g, const kiln_node *node);
int64_t kiln_flops_matmul(const kiln_graph *g, const kiln_node *node);
int64_t kiln_flops_attention(const kiln_graph *g, const kiln_node *node);

/* Pad's geometry (ops/movement_layout.c), shared by its reference kernel
 * and its compute definition: the mode (0 constant, 1 reflect, 2 edge, 3 wrap)
 * and, per axis of an input of rank `rank` and sizes dims, the positive
 * padding at the start (before), the elements removed at the start by a
 * negative pad (crop) and the input's length after cropping (len). pads_t
 * and axes_t: inputs 1 and 3 (NULL when absent; attributes before opset
 * 11). Errors name the input or attribute. */
kiln_status_t kiln_pad_geometry(const kiln_node *node, int opset, int rank, const int64_t *dims,
                                const kiln_tensor *pads_t, const kiln_tensor *axes_t, int *mode, int64_t *before,
                                int64_t *crop, int64_t *len);

/* GridSample's attributes (ops/misc_vision.c), shared by its reference
 * kernel and its compute definition: mode (bilinear/linear, nearest,
 * bicubic/cubic), padding_mode, align_corners. Errors name the attribute. */
typedef enum kiln_grid_sample_mode { KILN_GS_BILINEAR, KILN_GS_NEAREST, KILN_GS_BICUBIC } kiln_grid_sample_mode;
typedef enum kiln_grid_sample_padding { KILN_GS_ZEROS, KILN_GS_BORDER, KILN_GS_REFLECTION } kiln_grid_sample_padding;
typedef struct kiln_grid_sample_params {
  kiln_grid_sample_mode mode;
  kiln_grid_sample_padding padding;
  bool align_corners;
} kiln_grid_sample_params;
kiln_status_t kiln_grid_sample_params_of(const kiln_node *node, kiln_grid_sample_params *out);

/* Resize and Upsample as per-axis gather tables (ops/misc_resize.c), for
 * the kiln.Resample op a graph pass rewrites them into: every output
 * coordinate of a resized axis reads `taps` input indices with weights
 * (nearest: one tap, weight 1). Axes whose output coordinate o reads input
 * o alone are left out. An index of -1 marks a coordinate that samples
 * outside the input (tf_crop_and_resize): the output is then
 * extrapolation_value. */
typedef struct kiln_resample_axis {
  int axis;
  int64_t out; /* output length */
  int taps;
  int32_t *index; /* [out * taps]; owned */
  float *weight;  /* [out * taps]; owned */
} kiln_resample_axis;

typedef struct kiln_resample_tables {
  bool nearest; /* one tap of weight 1 on every axis */
  bool extrapolate;
  double extrapolation_value;
  int n_axes;
  kiln_resample_axis axes[KILN_MAX_RANK];
} kiln_resample_tables;

/* Tables of a Resize (upsample false) or Upsample node for an input of the
 * given rank and sizes; consts[i]: input i's constant value (NULL where
 * absent or not constant). Errors as the op's kernel reports them. */
kiln_status_t kiln_resample_tables_build(const kiln_node *node, int opset, bool upsample, int rank, const int64_t *in,
                                         int n_inputs, const kiln_tensor *const *consts, kiln_resample_tables *out);
void kiln_resample_tables_free(kiln_resample_tables *t);

/* Einsum's equation against its inputs (ops/nn_matmul.c), shared by the
 * reference kernel and the compute definition. Labels: 'A'-'Z' are 0-25,
 * 'a'-'z' 26-51, ellipsis axes 52.. (right-aligned across inputs). */
#define KILN_EINSUM_LETTERS 52
#define KILN_EINSUM_MAX_LABELS (KILN_EINSUM_LETTERS + KILN_MAX_RANK)
#define KILN_EINSUM_MAX_INPUTS 64

typedef struct kiln_einsum_plan {
  int n_inputs;
  int rank[KILN_EINSUM_MAX_INPUTS];                 /* input ranks */
  int label[KILN_EINSUM_MAX_INPUTS][KILN_MAX_RANK]; /* label of each input axis */
  int64_t size[KILN_EINSUM_MAX_LABELS];             /* label sizes (-1 unknown), 0 if unused */
  bool used[KILN_EINSUM_MAX_LABELS];
  int out_rank;
  int out_label[KILN_MAX_RANK];
  int n_sum;
  int sum_label[KILN_EINSUM_MAX_LABELS];
} kiln_einsum_plan;

/* Builds the plan from the equation and the input ranks and dims (dims may
 * hold -1; size-1 axes broadcast); errors name the term or input. */
kiln_status_t kiln_einsum_parse(const char *eq, int n_inputs, const int *ranks, const int64_t *const *dims,
                                kiln_einsum_plan *p);

/* kiln.Gelu's reference kernel (ops/fused.c), which ONNX Gelu-20
 * (ops/nn_transformer.c) runs too: one formula for both. */
kiln_status_t kiln_gelu_ref_kernel(struct kiln_kernel_ctx *ctx);

/* ---- registry ----------------------------------------------------------- */

/* The op definition for (domain, op_type), or NULL. domain "" == "ai.onnx". */
const kiln_op_def *kiln_op_find(const char *domain, const char *op_type);
/* All registered ops, for listings (count in *out_n). */
const kiln_op_def *const *kiln_op_all(int *out_n);
/* The definition with this id, or NULL (KILN_OP_UNKNOWN, out of range). */
const kiln_op_def *kiln_op_by_id(kiln_op_id id);
/* The domain and op_type op_ids.h gives an id ("" and "?" out of range). */
const char *kiln_op_id_domain(kiln_op_id id);
const char *kiln_op_id_name(kiln_op_id id);

/* Each family file defines one of these: a static table and its length. */
#define KILN_OP_FAMILIES(X) \
  X(elementwise)            \
  X(reduce)                 \
  X(movement)               \
  X(nn)                     \
  X(rnn)                    \
  X(quant)                  \
  X(signal)                 \
  X(sequence)               \
  X(control)                \
  X(misc)                   \
  X(bitwise)                \
  X(image)                  \
  X(kv_cache)               \
  X(training)               \
  X(fused)                  \
  X(attention)              \
  X(transformer)            \
  X(text)                   \
  X(image_decode)           \
  X(ml)

#define KILN_DECLARE_OP_FAMILY(name) const kiln_op_def *kiln_ops_##name(int *out_n);
KILN_OP_FAMILIES(KILN_DECLARE_OP_FAMILY)
#undef KILN_DECLARE_OP_FAMILY

#endif
