/* Ops of the "elementwise" family: the table. The kernels live in
 * elementwise_unary.c, elementwise_binary.c and elementwise_cast.c; the
 * broadcast iterator and shared helpers in elementwise_common.c. */
#include "ops/elementwise.h"

#define VARIADIC -1

/* min_in, max_in, min_out, max_out */
#define EW_OP(name, min_in, max_in, cls) \
  {"", #name, min_in, max_in, 1, 1, ew_infer_##name, ew_kernel_##name, 0, .id = KILN_OP_##name, .op_class = cls}
#define EW_UNARY_ENTRY(name) EW_OP(name, 1, 1, KILN_OPCLASS_ELEMENTWISE),

static const kiln_op_def elementwise_ops[] = {
    EW_UNARY_OPS(EW_UNARY_ENTRY)
    EW_OP(Add, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Sub, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Mul, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Div, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Mod, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Pow, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(BitShift, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(And, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Or, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Xor, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Equal, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Greater, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(GreaterOrEqual, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Less, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(LessOrEqual, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(PRelu, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Max, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP(Min, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP(Sum, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP(Mean, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP(Where, 3, 3, KILN_OPCLASS_BROADCAST),
    EW_OP(Cast, 1, 1, KILN_OPCLASS_ELEMENTWISE),
    EW_OP(CastLike, 2, 2, KILN_OPCLASS_ELEMENTWISE),
    EW_OP(Identity, 1, 1, KILN_OPCLASS_ELEMENTWISE),
    EW_OP(Clip, 1, 3, KILN_OPCLASS_ELEMENTWISE),
};

const kiln_op_def *kiln_ops_elementwise(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(elementwise_ops);
  return elementwise_ops;
}
