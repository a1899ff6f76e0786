/* elementwise.h — private to the elementwise op family (ops/elementwise*.c).
 *
 * The family's reference kernels are written once for every dtype: each
 * element is loaded as double (floats), int64 (signed ints) or uint64
 * (unsigned ints, bool), transformed by a small scalar function, and
 * stored back rounding once into the output dtype.
 *
 * Broadcasting goes through ew_bcast, an iterator over the output's
 * elements that keeps the element offset of every input:
 *
 *   ew_bcast it;
 *   KILN_TRY(ew_bcast_init_tensors(&it, 2, (kiln_tensor *[]){a, b}));
 *   ... allocate the output with it.rank / it.dims ...
 *   for (int64_t i = 0; i < it.numel; i++, ew_bcast_next(&it))
 *     out[i] = f(a[it.offsets[0]], b[it.offsets[1]]);
 *   ew_bcast_free(&it);
 */
#ifndef KILN_OPS_ELEMENTWISE_H
#define KILN_OPS_ELEMENTWISE_H

#include "ops/op.h"

/* ---- broadcasting ------------------------------------------------------ */

typedef struct ew_shape {
  int rank;
  int64_t dims[KILN_MAX_RANK];
} ew_shape;

/* Numpy (multidirectional) broadcast of n input shapes to one output. */
typedef struct ew_bcast {
  int n_inputs;
  int rank;                    /* output rank */
  int64_t dims[KILN_MAX_RANK]; /* output dims */
  int64_t numel;               /* output element count */
  int64_t index[KILN_MAX_RANK];
  int64_t *strides; /* [n_inputs * KILN_MAX_RANK]: element stride of input k along output axis d, 0 if broadcast */
  int64_t *offsets; /* [n_inputs]: element offset of the current output element in each input */
} ew_bcast;

/* Errors name the input whose shape does not broadcast. */
kiln_status_t ew_bcast_init(ew_bcast *it, int n, const ew_shape *shapes);
/* Same with the shapes of tensors (all non-NULL). */
kiln_status_t ew_bcast_init_tensors(ew_bcast *it, int n, kiln_tensor *const *ts);
/* Advances to the next output element (row-major). */
void ew_bcast_next(ew_bcast *it);
void ew_bcast_free(ew_bcast *it);

ew_shape ew_shape_of(const kiln_tensor *t);

/* The opset<7 "broadcast"/"axis" attributes of Add, Sub, Mul, Div, Pow,
 * And, Or, Xor, Equal, Greater, Less: B is broadcast to A's shape (suffix
 * matching, or aligned at `axis`); without broadcast=1 the shapes must be
 * equal. On success *b_view is B's shape padded to A's rank. */
kiln_status_t ew_legacy_broadcast_shape(const kiln_node *node, const kiln_tensor *a, const kiln_tensor *b,
                                        ew_shape *b_view);
/* True when the node uses the opset<7 broadcast rules. */
bool ew_is_legacy_broadcast(int opset, const kiln_node *node);

/* ---- element access ------------------------------------------------------ */

/* Stores v rounding once (f16/bf16 round-to-nearest-even straight from double). */
void ew_store_f64(void *data, kiln_dtype dt, int64_t i, double v);
/* Float -> f16 / bf16 with a single rounding (round-to-nearest-even). */
uint16_t ew_f64_to_f16(double v);
uint16_t ew_f64_to_bf16(double v);
bool ew_is_unsigned(kiln_dtype dt); /* unsigned ints and bool */

/* Bit masks of dtypes an op accepts. */
#define EW_BIT(dt) (1u << (dt))
#define EW_FLOATS (EW_BIT(KILN_DTYPE_F16) | EW_BIT(KILN_DTYPE_BF16) | EW_BIT(KILN_DTYPE_F32) | EW_BIT(KILN_DTYPE_F64))
#define EW_SINTS (EW_BIT(KILN_DTYPE_I8) | EW_BIT(KILN_DTYPE_I16) | EW_BIT(KILN_DTYPE_I32) | EW_BIT(KILN_DTYPE_I64))
#define EW_UINTS (EW_BIT(KILN_DTYPE_U8) | EW_BIT(KILN_DTYPE_U16) | EW_BIT(KILN_DTYPE_U32) | EW_BIT(KILN_DTYPE_U64))
#define EW_INTS (EW_SINTS | EW_UINTS)
#define EW_NUMERIC (EW_FLOATS | EW_INTS)
#define EW_BOOL EW_BIT(KILN_DTYPE_BOOL)
#define EW_STRING EW_BIT(KILN_DTYPE_STRING)
#define EW_COMPLEX (EW_BIT(KILN_DTYPE_C64) | EW_BIT(KILN_DTYPE_C128))
#define EW_ALL (EW_NUMERIC | EW_BOOL | EW_STRING | EW_COMPLEX)
/* float8, float4, int4, int2: only ops that name them take them (not in EW_ALL). */
#define EW_FLOAT8 (EW_BIT(KILN_DTYPE_F8E4M3FN) | EW_BIT(KILN_DTYPE_F8E4M3FNUZ) | EW_BIT(KILN_DTYPE_F8E5M2) | \
                   EW_BIT(KILN_DTYPE_F8E5M2FNUZ))
#define EW_NARROW (EW_FLOAT8 | EW_BIT(KILN_DTYPE_F8E8M0) | EW_BIT(KILN_DTYPE_F4E2M1) | EW_BIT(KILN_DTYPE_U4) | \
                   EW_BIT(KILN_DTYPE_I4) | EW_BIT(KILN_DTYPE_U2) | EW_BIT(KILN_DTYPE_I2))

/* Error unless t's dtype is in `allowed`; names the input. */
kiln_status_t ew_check_dtype(const kiln_tensor *t, int input, unsigned allowed);

/* Attribute values a scalar function needs (read once per node). */
typedef struct ew_params {
  double alpha, beta, gamma, lambd, bias;
  int64_t flag_a, flag_b; /* IsInf: detect_negative/positive; Mod: fmod; BitShift: 1 = right */
} ew_params;

/* ---- kernels and inference, by file -------------------------------------- */

/* elementwise_unary.c */
/* The unary ops with a gradient rule (elementwise_grad.c), and the others. */
#define EW_UNARY_DIFF_OPS(X)                                                                              \
  X(Abs) X(Atan) X(Celu) X(Cos) X(Cosh) X(Elu) X(Erf) X(Exp) X(HardSigmoid) X(HardSwish) X(LeakyRelu)   \
  X(Log) X(Neg) X(Reciprocal) X(Relu) X(Selu) X(Sigmoid) X(Sin) X(Sinh) X(Softplus) X(Softsign) X(Sqrt) \
  X(Tan) X(Tanh) X(ThresholdedRelu)
#define EW_UNARY_OTHER_OPS(X)                                                                             \
  X(Acos) X(Acosh) X(Asin) X(Asinh) X(Atanh) X(Ceil) X(Floor) X(IsInf) X(IsNaN) X(Not) X(Round)        \
  X(Shrink) X(Sign)
#define EW_UNARY_OPS(X) EW_UNARY_DIFF_OPS(X) EW_UNARY_OTHER_OPS(X)

/* elementwise_binary.c */
#define EW_BINARY_OPS(X)                                                                                 \
  X(Add) X(Sub) X(Mul) X(Div) X(Mod) X(Pow) X(BitShift) X(And) X(Or) X(Xor) X(Equal) X(Greater)        \
  X(GreaterOrEqual) X(Less) X(LessOrEqual) X(PRelu) X(Max) X(Min) X(Sum) X(Mean) X(Where)

/* elementwise_cast.c */
#define EW_CAST_OPS(X) X(Cast) X(CastLike) X(Identity) X(Clip)

#define EW_DECLARE(name)                                    \
  kiln_status_t ew_kernel_##name(kiln_kernel_ctx *ctx);     \
  kiln_status_t ew_infer_##name(kiln_infer_ctx *ctx);
EW_UNARY_OPS(EW_DECLARE)
EW_BINARY_OPS(EW_DECLARE)
EW_CAST_OPS(EW_DECLARE)
#undef EW_DECLARE

#endif
