/* Ops of the "bitwise" family: BitwiseAnd/Or/Xor/Not (opset 18) on the
 * integer dtypes, with numpy broadcasting, and BitCast (opset 26), which
 * reinterprets each element's bytes as another dtype of the same width.
 *
 * The bitwise ops work on the raw element bits (loaded zero-extended into
 * a uint64, stored back truncated), so signed and unsigned integers share
 * one path. BitShift stays with the arithmetic ops (elementwise_binary.c). */
#include "ops/elementwise.h"

/* ---- BitwiseAnd / BitwiseOr / BitwiseXor / BitwiseNot ---------------------- */

typedef enum bitwise_kind { BW_AND, BW_OR, BW_XOR } bitwise_kind;

static kiln_status_t bitwise_binary(kiln_kernel_ctx *ctx, bitwise_kind kind) {
  kiln_tensor *a, *b, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &a));
  KILN_TRY(kiln_kernel_require_input(ctx, 1, &b));
  KILN_TRY(ew_check_dtype(a, 0, EW_INTS));
  if (b->dtype != a->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (B) has dtype %s; expected %s like input 0 (A)",
                      kiln_dtype_name(b->dtype), kiln_dtype_name(a->dtype));
  ew_bcast it;
  KILN_TRY(ew_bcast_init_tensors(&it, 2, (kiln_tensor *[]){a, b}));
  kiln_dtype dt = a->dtype;
  kiln_status_t st = kiln_kernel_output_uninit(ctx, 0, dt, it.rank, it.dims, &y);
  for (int64_t k = 0; !st && k < it.numel; k++, ew_bcast_next(&it)) {
    uint64_t va = kiln_load_u64(a->data, dt, it.offsets[0]), vb = kiln_load_u64(b->data, dt, it.offsets[1]);
    uint64_t r = kind == BW_AND ? va & vb : kind == BW_OR ? va | vb : va ^ vb;
    kiln_store_i64(y->data, dt, k, (int64_t)r);
  }
  ew_bcast_free(&it);
  return st;
}

static kiln_status_t bitwise_and_kernel(kiln_kernel_ctx *ctx) { return bitwise_binary(ctx, BW_AND); }
static kiln_status_t bitwise_or_kernel(kiln_kernel_ctx *ctx) { return bitwise_binary(ctx, BW_OR); }
static kiln_status_t bitwise_xor_kernel(kiln_kernel_ctx *ctx) { return bitwise_binary(ctx, BW_XOR); }

static kiln_status_t bitwise_binary_infer(kiln_infer_ctx *ctx) {
  kiln_dtype dt = ctx->inputs[0] ? ctx->inputs[0]->dtype : KILN_DTYPE_UNDEFINED;
  return kiln_infer_broadcast(ctx, dt);
}

static kiln_status_t bitwise_not_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(ew_check_dtype(x, 0, EW_INTS));
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, x->dtype, x->rank, x->dims, &y));
  for (int64_t k = 0; k < x->numel; k++)
    kiln_store_i64(y->data, x->dtype, k, (int64_t)~kiln_load_u64(x->data, x->dtype, k));
  return NULL;
}

static kiln_status_t same_as_input0(kiln_infer_ctx *ctx) { return kiln_infer_same_as_input(ctx, 0, 0); }

/* ---- BitCast ---------------------------------------------------------------- */

/* The dtype of attribute `to` (ONNX's TensorProto numbering, which kiln's
 * dtypes follow). Strings have no fixed bytes to reinterpret. */
static kiln_status_t bitcast_target(const kiln_node *node, kiln_dtype *out) {
  const kiln_attr *a = kiln_node_attr(node, "to");
  if (!a) return kiln_error(KILN_INVALID_ARGUMENT, "attribute to is required");
  if (!kiln_dtype_is_valid((int)a->i) || a->i == KILN_DTYPE_UNDEFINED)
    return kiln_error(KILN_UNSUPPORTED, "attribute to = %lld: a dtype kiln does not support", (long long)a->i);
  if (a->i == KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute to = string: BitCast needs fixed-size elements");
  *out = (kiln_dtype)a->i;
  return NULL;
}

static kiln_status_t bitcast_infer(kiln_infer_ctx *ctx) {
  kiln_dtype to;
  KILN_TRY(bitcast_target(ctx->node, &to));
  const kiln_type *in = ctx->inputs[0];
  if (in && in->dtype != KILN_DTYPE_UNDEFINED && in->dtype != KILN_DTYPE_STRING &&
      kiln_dtype_bits(in->dtype) != kiln_dtype_bits(to))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) has dtype %s (%d bits) but attribute to is %s (%d bits)",
                      kiln_dtype_name(in->dtype), kiln_dtype_bits(in->dtype), kiln_dtype_name(to),
                      kiln_dtype_bits(to));
  if (!in) {
    kiln_infer_set(ctx, 0, to, -1, NULL);
    return NULL;
  }
  KILN_TRY(kiln_infer_same_as_input(ctx, 0, 0));
  if (ctx->n_outputs > 0) ctx->outputs[0].dtype = to;
  return NULL;
}

/* Copies the bytes (kiln runs on little-endian hosts, the byte order the
 * spec fixes). A byte read as bool becomes 0 or 1, kiln's bool invariant. */
static kiln_status_t bitcast_kernel(kiln_kernel_ctx *ctx) {
  kiln_tensor *x, *y;
  kiln_dtype to;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  KILN_TRY(bitcast_target(ctx->node, &to));
  if (x->dtype == KILN_DTYPE_STRING)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) is a string tensor: BitCast needs fixed-size elements");
  int bits = kiln_dtype_bits(x->dtype);
  if (bits != kiln_dtype_bits(to))
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (input) has dtype %s (%d bits) but attribute to is %s (%d bits)",
                      kiln_dtype_name(x->dtype), bits, kiln_dtype_name(to), kiln_dtype_bits(to));
  KILN_TRY(kiln_kernel_output_uninit(ctx, 0, to, x->rank, x->dims, &y));
  if (bits < 8) {
    /* Sub-byte types hold one element per byte (a signed one sign-extended,
     * float4 its code): the element's low bits are its ONNX bits. */
    const uint8_t *a = x->data;
    uint8_t *b = y->data, mask = (uint8_t)((1u << bits) - 1), sign = (uint8_t)(1u << (bits - 1));
    bool sext = to == KILN_DTYPE_I4 || to == KILN_DTYPE_I2;
    for (int64_t k = 0; k < x->numel; k++) {
      uint8_t c = a[k] & mask;
      b[k] = sext && (c & sign) ? (uint8_t)(c | (uint8_t)~mask) : c;
    }
    return NULL;
  }
  if (x->numel) memcpy(y->data, x->data, kiln_tensor_nbytes(x));
  if (to == KILN_DTYPE_BOOL && x->dtype != KILN_DTYPE_BOOL) {
    uint8_t *b = y->data;
    for (int64_t k = 0; k < y->numel; k++) b[k] = b[k] != 0;
  }
  return NULL;
}

static const kiln_op_def bitwise_ops[] = {
    {"", "BitwiseAnd", 2, 2, 1, 1, bitwise_binary_infer, bitwise_and_kernel, 0, .id = KILN_OP_BitwiseAnd},
    {"", "BitwiseOr", 2, 2, 1, 1, bitwise_binary_infer, bitwise_or_kernel, 0, .id = KILN_OP_BitwiseOr},
    {"", "BitwiseXor", 2, 2, 1, 1, bitwise_binary_infer, bitwise_xor_kernel, 0, .id = KILN_OP_BitwiseXor},
    {"", "BitwiseNot", 1, 1, 1, 1, same_as_input0, bitwise_not_kernel, 0, .id = KILN_OP_BitwiseNot},
    {"", "BitCast", 1, 1, 1, 1, bitcast_infer, bitcast_kernel, 0, .id = KILN_OP_BitCast},
};

const kiln_op_def *kiln_ops_bitwise(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(bitwise_ops);
  return bitwise_ops;
}
