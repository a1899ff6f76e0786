/* Ops of the "elementwise" family: the table. The kernels live in
 * elementwise_unary.c, elementwise_binary.c and elementwise_cast.c; the
 * broadcast iterator and shared helpers in elementwise_common.c. */
#include "ops/elementwise.h"
#include "ops/gradient.h"

#define VARIADIC -1

/* min_in, max_in, min_out, max_out */
#define EW_OP(name, min_in, max_in, cls) \
  {"", #name, min_in, max_in, 1, 1, ew_infer_##name, ew_kernel_##name, 0, .id = KILN_OP_##name, .op_class = cls}
/* the same with elementwise_grad.c's rule */
#define EW_OP_G(name, min_in, max_in, cls)                                                                      \
  {"", #name, min_in, max_in, 1, 1, ew_infer_##name, ew_kernel_##name, 0, .id = KILN_OP_##name, .op_class = cls, \
   .gradient = kiln_grad_elementwise}
#define EW_UNARY_ENTRY(name) EW_OP(name, 1, 1, KILN_OPCLASS_ELEMENTWISE),
#define EW_UNARY_ENTRY_G(name) EW_OP_G(name, 1, 1, KILN_OPCLASS_ELEMENTWISE),

static const kiln_op_def elementwise_ops[] = {
    EW_UNARY_DIFF_OPS(EW_UNARY_ENTRY_G)
    EW_UNARY_OTHER_OPS(EW_UNARY_ENTRY)
    EW_OP_G(Add, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Sub, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Mul, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Div, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Mod, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Pow, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(BitShift, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(And, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Or, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Xor, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Equal, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Greater, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(GreaterOrEqual, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(Less, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP(LessOrEqual, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(PRelu, 2, 2, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Max, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Min, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Sum, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Mean, 1, VARIADIC, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Where, 3, 3, KILN_OPCLASS_BROADCAST),
    EW_OP_G(Cast, 1, 1, KILN_OPCLASS_ELEMENTWISE),
    EW_OP_G(CastLike, 2, 2, KILN_OPCLASS_ELEMENTWISE),
    EW_OP_G(Identity, 1, 1, KILN_OPCLASS_ELEMENTWISE),
    EW_OP_G(Clip, 1, 3, KILN_OPCLASS_ELEMENTWISE),
};

const kiln_op_def *kiln_ops_elementwise(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(elementwise_ops);
  return elementwise_ops;
}
