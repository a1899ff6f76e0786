/* op_ids.h — the id of every op kiln defines, one line per op.
 *
 * Code past the op layer (passes, codegen, devices) switches on these ids,
 * never on op-name strings: an id is checked by the compiler, a string is
 * not, and a switch is one jump where a strcmp chain is many compares. Each
 * kiln_op_def carries its id; test_registry checks that every id here has
 * exactly one definition with this domain and name, and that every
 * definition has an id (the count check).
 *
 * X(id suffix, domain, op_type): ai.onnx ops are named as in ONNX; ops of
 * other domains carry a prefix (kiln_, training_). Order: the registry's
 * (family by family), which only matters for listings.
 */
#ifndef KILN_OPS_OP_IDS_H
#define KILN_OPS_OP_IDS_H

#define KILN_OP_IDS(X) \
  X(Abs, "", "Abs") \
  X(Acos, "", "Acos") \
  X(Acosh, "", "Acosh") \
  X(Asin, "", "Asin") \
  X(Asinh, "", "Asinh") \
  X(Atan, "", "Atan") \
  X(Atanh, "", "Atanh") \
  X(Ceil, "", "Ceil") \
  X(Celu, "", "Celu") \
  X(Cos, "", "Cos") \
  X(Cosh, "", "Cosh") \
  X(Elu, "", "Elu") \
  X(Erf, "", "Erf") \
  X(Exp, "", "Exp") \
  X(Floor, "", "Floor") \
  X(HardSigmoid, "", "HardSigmoid") \
  X(HardSwish, "", "HardSwish") \
  X(IsInf, "", "IsInf") \
  X(IsNaN, "", "IsNaN") \
  X(LeakyRelu, "", "LeakyRelu") \
  X(Log, "", "Log") \
  X(Neg, "", "Neg") \
  X(Not, "", "Not") \
  X(Reciprocal, "", "Reciprocal") \
  X(Relu, "", "Relu") \
  X(Round, "", "Round") \
  X(Selu, "", "Selu") \
  X(Shrink, "", "Shrink") \
  X(Sigmoid, "", "Sigmoid") \
  X(Sign, "", "Sign") \
  X(Sin, "", "Sin") \
  X(Sinh, "", "Sinh") \
  X(Softplus, "", "Softplus") \
  X(Softsign, "", "Softsign") \
  X(Sqrt, "", "Sqrt") \
  X(Tan, "", "Tan") \
  X(Tanh, "", "Tanh") \
  X(ThresholdedRelu, "", "ThresholdedRelu") \
  X(Add, "", "Add") \
  X(Sub, "", "Sub") \
  X(Mul, "", "Mul") \
  X(Div, "", "Div") \
  X(Mod, "", "Mod") \
  X(Pow, "", "Pow") \
  X(BitShift, "", "BitShift") \
  X(And, "", "And") \
  X(Or, "", "Or") \
  X(Xor, "", "Xor") \
  X(Equal, "", "Equal") \
  X(Greater, "", "Greater") \
  X(GreaterOrEqual, "", "GreaterOrEqual") \
  X(Less, "", "Less") \
  X(LessOrEqual, "", "LessOrEqual") \
  X(PRelu, "", "PRelu") \
  X(Max, "", "Max") \
  X(Min, "", "Min") \
  X(Sum, "", "Sum") \
  X(Mean, "", "Mean") \
  X(Where, "", "Where") \
  X(Cast, "", "Cast") \
  X(CastLike, "", "CastLike") \
  X(Identity, "", "Identity") \
  X(Clip, "", "Clip") \
  X(ArgMax, "", "ArgMax") \
  X(ArgMin, "", "ArgMin") \
  X(ReduceL1, "", "ReduceL1") \
  X(ReduceL2, "", "ReduceL2") \
  X(ReduceLogSum, "", "ReduceLogSum") \
  X(ReduceLogSumExp, "", "ReduceLogSumExp") \
  X(ReduceMax, "", "ReduceMax") \
  X(ReduceMin, "", "ReduceMin") \
  X(ReduceMean, "", "ReduceMean") \
  X(ReduceProd, "", "ReduceProd") \
  X(ReduceSum, "", "ReduceSum") \
  X(ReduceSumSquare, "", "ReduceSumSquare") \
  X(Softmax, "", "Softmax") \
  X(LogSoftmax, "", "LogSoftmax") \
  X(Hardmax, "", "Hardmax") \
  X(LpNormalization, "", "LpNormalization") \
  X(CumSum, "", "CumSum") \
  X(CumProd, "", "CumProd") \
  X(TopK, "", "TopK") \
  X(Concat, "", "Concat") \
  X(Compress, "", "Compress") \
  X(DepthToSpace, "", "DepthToSpace") \
  X(SpaceToDepth, "", "SpaceToDepth") \
  X(Expand, "", "Expand") \
  X(EyeLike, "", "EyeLike") \
  X(Flatten, "", "Flatten") \
  X(Gather, "", "Gather") \
  X(GatherElements, "", "GatherElements") \
  X(GatherND, "", "GatherND") \
  X(Pad, "", "Pad") \
  X(Range, "", "Range") \
  X(Reshape, "", "Reshape") \
  X(ReverseSequence, "", "ReverseSequence") \
  X(Scatter, "", "Scatter") \
  X(ScatterElements, "", "ScatterElements") \
  X(ScatterND, "", "ScatterND") \
  X(Shape, "", "Shape") \
  X(Size, "", "Size") \
  X(Slice, "", "Slice") \
  X(Split, "", "Split") \
  X(Squeeze, "", "Squeeze") \
  X(Unsqueeze, "", "Unsqueeze") \
  X(Tile, "", "Tile") \
  X(Transpose, "", "Transpose") \
  X(Trilu, "", "Trilu") \
  X(OneHot, "", "OneHot") \
  X(ConstantOfShape, "", "ConstantOfShape") \
  X(Constant, "", "Constant") \
  X(NonZero, "", "NonZero") \
  X(Unique, "", "Unique") \
  X(Conv, "", "Conv") \
  X(ConvTranspose, "", "ConvTranspose") \
  X(AveragePool, "", "AveragePool") \
  X(MaxPool, "", "MaxPool") \
  X(MaxUnpool, "", "MaxUnpool") \
  X(kiln_MaxPoolArgmax, "kiln", "MaxPoolArgmax") \
  X(kiln_MaxPoolGrad, "kiln", "MaxPoolGrad") \
  X(LpPool, "", "LpPool") \
  X(GlobalAveragePool, "", "GlobalAveragePool") \
  X(GlobalMaxPool, "", "GlobalMaxPool") \
  X(GlobalLpPool, "", "GlobalLpPool") \
  X(BatchNormalization, "", "BatchNormalization") \
  X(InstanceNormalization, "", "InstanceNormalization") \
  X(LayerNormalization, "", "LayerNormalization") \
  X(LRN, "", "LRN") \
  X(MeanVarianceNormalization, "", "MeanVarianceNormalization") \
  X(Gemm, "", "Gemm") \
  X(MatMul, "", "MatMul") \
  X(Einsum, "", "Einsum") \
  X(Det, "", "Det") \
  X(Dropout, "", "Dropout") \
  X(NegativeLogLikelihoodLoss, "", "NegativeLogLikelihoodLoss") \
  X(SoftmaxCrossEntropyLoss, "", "SoftmaxCrossEntropyLoss") \
  X(RNN, "", "RNN") \
  X(GRU, "", "GRU") \
  X(LSTM, "", "LSTM") \
  X(QuantizeLinear, "", "QuantizeLinear") \
  X(DequantizeLinear, "", "DequantizeLinear") \
  X(DynamicQuantizeLinear, "", "DynamicQuantizeLinear") \
  X(ConvInteger, "", "ConvInteger") \
  X(QLinearConv, "", "QLinearConv") \
  X(MatMulInteger, "", "MatMulInteger") \
  X(QLinearMatMul, "", "QLinearMatMul") \
  X(DFT, "", "DFT") \
  X(STFT, "", "STFT") \
  X(HannWindow, "", "HannWindow") \
  X(HammingWindow, "", "HammingWindow") \
  X(BlackmanWindow, "", "BlackmanWindow") \
  X(MelWeightMatrix, "", "MelWeightMatrix") \
  X(SequenceEmpty, "", "SequenceEmpty") \
  X(SequenceConstruct, "", "SequenceConstruct") \
  X(SequenceInsert, "", "SequenceInsert") \
  X(SequenceAt, "", "SequenceAt") \
  X(SequenceErase, "", "SequenceErase") \
  X(SequenceLength, "", "SequenceLength") \
  X(SplitToSequence, "", "SplitToSequence") \
  X(ConcatFromSequence, "", "ConcatFromSequence") \
  X(Optional, "", "Optional") \
  X(OptionalHasElement, "", "OptionalHasElement") \
  X(OptionalGetElement, "", "OptionalGetElement") \
  X(If, "", "If") \
  X(Loop, "", "Loop") \
  X(Scan, "", "Scan") \
  X(SequenceMap, "", "SequenceMap") \
  X(Resize, "", "Resize") \
  X(Upsample, "", "Upsample") \
  X(GridSample, "", "GridSample") \
  X(RoiAlign, "", "RoiAlign") \
  X(NonMaxSuppression, "", "NonMaxSuppression") \
  X(StringNormalizer, "", "StringNormalizer") \
  X(TfIdfVectorizer, "", "TfIdfVectorizer") \
  X(Bernoulli, "", "Bernoulli") \
  X(RandomUniformLike, "", "RandomUniformLike") \
  X(RandomNormalLike, "", "RandomNormalLike") \
  X(RandomUniform, "", "RandomUniform") \
  X(RandomNormal, "", "RandomNormal") \
  X(Multinomial, "", "Multinomial") \
  X(BitwiseAnd, "", "BitwiseAnd") \
  X(BitwiseOr, "", "BitwiseOr") \
  X(BitwiseXor, "", "BitwiseXor") \
  X(BitwiseNot, "", "BitwiseNot") \
  X(BitCast, "", "BitCast") \
  X(CenterCropPad, "", "CenterCropPad") \
  X(Col2Im, "", "Col2Im") \
  X(AffineGrid, "", "AffineGrid") \
  X(DeformConv, "", "DeformConv") \
  X(TensorScatter, "", "TensorScatter") \
  X(training_Adagrad, "ai.onnx.preview.training", "Adagrad") \
  X(training_Momentum, "ai.onnx.preview.training", "Momentum") \
  X(training_Adam, "ai.onnx.preview.training", "Adam") \
  X(training_Gradient, "ai.onnx.preview.training", "Gradient") \
  X(kiln_Gelu, "kiln", "Gelu") \
  X(kiln_FusedAttention, "kiln", "FusedAttention") \
  X(kiln_Resample, "kiln", "Resample") \
  X(Attention, "", "Attention") \
  X(preview_FlexAttention, "ai.onnx.preview", "FlexAttention") \
  X(Gelu, "", "Gelu") \
  X(Swish, "", "Swish") \
  X(SwiGLU, "", "SwiGLU") \
  X(Mish, "", "Mish") \
  X(RMSNormalization, "", "RMSNormalization") \
  X(GroupNormalization, "", "GroupNormalization") \
  X(RotaryEmbedding, "", "RotaryEmbedding") \
  X(LinearAttention, "", "LinearAttention") \
  X(CausalConvWithState, "", "CausalConvWithState") \
  X(StringConcat, "", "StringConcat") \
  X(StringSplit, "", "StringSplit") \
  X(RegexFullMatch, "", "RegexFullMatch") \
  X(ImageDecoder, "", "ImageDecoder") \
  X(ml_LabelEncoder, "ai.onnx.ml", "LabelEncoder") \
  X(ml_TreeEnsemble, "ai.onnx.ml", "TreeEnsemble") \
  X(ml_ArrayFeatureExtractor, "ai.onnx.ml", "ArrayFeatureExtractor") \
  X(ml_Binarizer, "ai.onnx.ml", "Binarizer")

typedef enum kiln_op_id {
  KILN_OP_UNKNOWN = 0, /* a node whose op is not registered (or not resolved yet) */
#define KILN_OP_ID_ENUM(id, domain, name) KILN_OP_##id,
  KILN_OP_IDS(KILN_OP_ID_ENUM)
#undef KILN_OP_ID_ENUM
  KILN_OP_COUNT
} kiln_op_id;

#endif
