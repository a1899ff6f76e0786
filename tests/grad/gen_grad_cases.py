#!/usr/bin/python3
"""Writes the gradient-check cases: small float64 ONNX models, one op (or a
short chain) each, with their inputs.

    /usr/bin/python3 tests/grad/gen_grad_cases.py OUT_DIR [--dtype float32]

(Debian's /usr/bin/python3: onnx and numpy.) For each case OUT_DIR/NAME.onnx
and OUT_DIR/NAME.npz (one array per graph input, by name). Every float
graph input is differentiated; constants (Clip's bounds, Where's condition,
shapes, axes) are initializers. Inputs are random, kept away from each
op's kinks and poles (Relu and Abs at 0, Clip at its bounds, Log and Sqrt
near 0, ties of Max) by more than the check's step, so central differences
are accurate there. Cases named norule_* use an op with no gradient rule:
autodiff must refuse them with an error naming the node. --dtype float32
writes the same cases in float32 (float inputs, outputs and float
initializers), for running their backward graphs on the compiling devices
against ref (run_gradcheck.sh).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(20261205)
FLOAT = {"float64": (TensorProto.DOUBLE, np.float64), "float32": (TensorProto.FLOAT, np.float32)}
DTYPE = "float64"


def rand(shape, kind="any"):
    """Random float64 values of a kind: any (-2..2), pos (0.5..2), away (|x| in 0.2..2, random sign),
    distinct (a permutation of spread values: no ties)."""
    shape = tuple(shape)
    n = int(np.prod(shape)) if shape else 1
    if kind == "pos":
        v = RNG.uniform(0.5, 2.0, n)
    elif kind == "away":
        v = RNG.uniform(0.2, 2.0, n) * RNG.choice([-1.0, 1.0], n)
    elif kind == "distinct":
        v = RNG.permutation(np.linspace(-2.0, 2.0, n)) + RNG.uniform(-0.01, 0.01, n)
    else:
        v = RNG.uniform(-2.0, 2.0, n)
    return v.reshape(shape).astype(np.float64)


class Case:
    def __init__(self, name, opset=17):
        self.name, self.opset = name, opset
        self.kiln_domain = False  # uses kiln's fused ops (domain "kiln")
        self.nodes, self.inputs, self.inits, self.feeds = [], [], [], {}
        self.n = 0

    def x(self, shape, kind="any"):
        """A differentiated graph input."""
        name = f"x{len(self.inputs)}"
        self.inputs.append(helper.make_tensor_value_info(name, FLOAT[DTYPE][0], list(shape)))
        self.feeds[name] = rand(shape, kind).astype(FLOAT[DTYPE][1])
        return name

    def const(self, arr):
        name = f"c{len(self.inits)}"
        arr = np.asarray(arr)
        if arr.dtype == np.float64:
            arr = arr.astype(FLOAT[DTYPE][1])
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type, ins, domain="", **attrs):
        out = f"t{self.n}"
        self.n += 1
        self.nodes.append(helper.make_node(op_type, ins, [out], name=f"{op_type}_{self.n}", domain=domain, **attrs))
        self.kiln_domain |= domain == "kiln"
        return out

    def write(self, out_dir, outputs):
        """outputs: names, or (name, shape) where ONNX's inference gives no shape."""
        shapes = {o[0]: o[1] for o in outputs if isinstance(o, tuple)}
        outputs = [o[0] if isinstance(o, tuple) else o for o in outputs]
        outs = [helper.make_tensor_value_info(o, FLOAT[DTYPE][0], shapes.get(o)) for o in outputs]
        g = helper.make_graph(self.nodes, self.name, self.inputs, outs, initializer=self.inits)
        opsets = [helper.make_opsetid("", self.opset)] + ([helper.make_opsetid("kiln", 1)] if self.kiln_domain else [])
        m = helper.make_model(g, opset_imports=opsets, producer_name="gen_grad_cases")
        m.ir_version = 8
        # the outputs' shapes from ONNX's own inference (the checker wants them stated)
        im = onnx.shape_inference.infer_shapes(m)
        inferred = {v.name: v.type for v in list(im.graph.value_info) + list(im.graph.output)}
        for o in m.graph.output:
            if o.name not in shapes:
                o.type.CopyFrom(inferred[o.name])
        if self.kiln_domain or self.opset > 17:  # the checker (onnx 1.12) knows no kiln ops, no opset past 17
            onnx.save(m, os.path.join(out_dir, self.name + ".onnx"))
            np.savez(os.path.join(out_dir, self.name + ".npz"),
                     **{k: v.astype(FLOAT[DTYPE][1]) for k, v in self.feeds.items()})
            return
        try:
            onnx.checker.check_model(m)
        except onnx.checker.ValidationError as e:
            sys.exit(f"gen_grad_cases: {self.name}: {e}")
        onnx.save(m, os.path.join(out_dir, self.name + ".onnx"))
        np.savez(os.path.join(out_dir, self.name + ".npz"),
                 **{k: v.astype(FLOAT[DTYPE][1]) for k, v in self.feeds.items()})


def cases():
    """(name, builder) pairs; each builder returns (Case, outputs)."""
    out = []

    def add(name, fn, opset=17):
        out.append((name, fn, opset))

    # binary arithmetic, with broadcasting
    for op in ("Add", "Sub", "Mul", "Div"):
        kind_b = "away" if op == "Div" else "any"
        for tag, sa, sb in (("same", [3, 4], [3, 4]), ("bcast_row", [2, 3, 4], [4]), ("bcast_both", [2, 1, 4], [3, 1]),
                            ("scalar", [], [3])):
            add(f"{op}_{tag}", lambda c, op=op, sa=sa, sb=sb, kb=kind_b: [c.op(op, [c.x(sa), c.x(sb, kb)])])
    add("Pow_same", lambda c: [c.op("Pow", [c.x([3, 4], "pos"), c.x([3, 4])])])
    add("Pow_scalar_exp", lambda c: [c.op("Pow", [c.x([5], "pos"), c.x([], "pos")])])
    add("Sum_3", lambda c: [c.op("Sum", [c.x([2, 3]), c.x([3]), c.x([2, 1])])])
    add("Mean_2", lambda c: [c.op("Mean", [c.x([2, 3]), c.x([2, 3])])])
    add("Max_bcast", lambda c: [c.op("Max", [c.x([3, 4], "distinct"), c.x([4], "distinct")])])
    add("Min_3", lambda c: [c.op("Min", [c.x([6], "distinct"), c.x([6], "distinct"), c.x([6], "distinct")])])
    add("Where_bcast", lambda c: [c.op("Where", [c.const(RNG.random((3, 4)) > 0.5), c.x([3, 4]), c.x([4])])])
    add("Identity", lambda c: [c.op("Identity", [c.x([2, 3])])])
    add("Cast_same", lambda c: [c.op("Cast", [c.x([2, 3])], to=FLOAT[DTYPE][0])])
    # Clip: inputs away from the bounds (+-0.5) by >= 0.05
    def clip_input(c, shape, lo_only=False):
        v = RNG.uniform(-2, 2, shape)
        v = np.where(np.abs(np.abs(v) - 0.5) < 0.05, v + 0.1 * np.sign(v), v)
        name = f"x{len(c.inputs)}"
        c.inputs.append(helper.make_tensor_value_info(name, FLOAT[DTYPE][0], list(shape)))
        c.feeds[name] = v
        return name
    add("Clip_both", lambda c: [c.op("Clip", [clip_input(c, [3, 5]), c.const(np.float64(-0.5)), c.const(np.float64(0.5))])])
    add("Clip_min", lambda c: [c.op("Clip", [clip_input(c, [3, 5]), c.const(np.float64(-0.5))])])

    # unary
    unary = {"Neg": "any", "Exp": "any", "Log": "pos", "Sqrt": "pos", "Reciprocal": "away", "Relu": "away",
             "Sigmoid": "any", "Tanh": "any", "Softplus": "any", "Abs": "away", "Sin": "any", "Cos": "any",
             "Erf": "any"}
    for op, kind in unary.items():
        add(f"{op}", lambda c, op=op, kind=kind: [c.op(op, [c.x([2, 5], kind)])])
    add("LeakyRelu", lambda c: [c.op("LeakyRelu", [c.x([2, 5], "away")], alpha=0.1)])
    add("Elu", lambda c: [c.op("Elu", [c.x([2, 5], "away")], alpha=0.7)])
    # HardSigmoid(0.3 x + 0.4) saturates at x = -4/3 and 2: inputs on both sides, away from them
    def hard_sigmoid(c):
        x = c.x([2, 5])
        c.feeds[x] = np.array([[-2.5, -1.5, -1.1, -0.3, 0.4], [1.0, 1.7, 1.9, 2.2, 3.0]])
        return [c.op("HardSigmoid", [x], alpha=0.3, beta=0.4)]
    add("HardSigmoid", hard_sigmoid)

    # contractions
    for tag, sa, sb in (("2d", [3, 4], [4, 5]), ("batch", [2, 3, 4], [4, 5]), ("batch2", [2, 3, 2, 4], [4, 5]), ("bcast", [2, 1, 3, 4], [3, 4, 2]),
                        ("vec_a", [4], [4, 5]), ("vec_b", [2, 3, 4], [4]), ("dot", [4], [4])):
        add(f"MatMul_{tag}", lambda c, sa=sa, sb=sb: [c.op("MatMul", [c.x(sa), c.x(sb)])])
    for ta in (0, 1):
        for tb in (0, 1):
            a = [4, 3] if ta else [3, 4]
            b = [5, 4] if tb else [4, 5]
            add(f"Gemm_t{ta}{tb}", lambda c, a=a, b=b, ta=ta, tb=tb: [
                c.op("Gemm", [c.x(a), c.x(b), c.x([5])], transA=ta, transB=tb, alpha=0.7, beta=1.3)])
    add("Gemm_fullC", lambda c: [c.op("Gemm", [c.x([3, 4]), c.x([4, 5]), c.x([3, 5])])])
    add("Gemm_noC", lambda c: [c.op("Gemm", [c.x([3, 4]), c.x([5, 4])], transB=1)])

    # reductions and normalizations
    add("ReduceSum_axis1", lambda c: [c.op("ReduceSum", [c.x([2, 3, 4]), c.const(np.array([1], np.int64))], keepdims=0)])
    add("ReduceSum_all", lambda c: [c.op("ReduceSum", [c.x([2, 3, 4])])])
    add("ReduceSum_neg_keep", lambda c: [c.op("ReduceSum", [c.x([2, 3, 4]), c.const(np.array([-1, 0], np.int64))], keepdims=1)])
    add("ReduceSum_attr", lambda c: [c.op("ReduceSum", [c.x([2, 3, 4])], axes=[2], keepdims=0)], opset=12)
    add("ReduceMean_axes", lambda c: [c.op("ReduceMean", [c.x([2, 3, 4])], axes=[0, 2], keepdims=0)])
    add("ReduceMean_all", lambda c: [c.op("ReduceMean", [c.x([3, 4])])])
    for op in ("Softmax", "LogSoftmax"):
        add(f"{op}_last", lambda c, op=op: [c.op(op, [c.x([2, 5])])])
        add(f"{op}_axis1", lambda c, op=op: [c.op(op, [c.x([2, 3, 4])], axis=1)])
        add(f"{op}_opset12", lambda c, op=op: [c.op(op, [c.x([2, 3, 4])], axis=1)], opset=12)

    # shape and movement
    add("Reshape", lambda c: [c.op("Reshape", [c.x([2, 3, 4]), c.const(np.array([4, -1], np.int64))])])
    add("Flatten", lambda c: [c.op("Flatten", [c.x([2, 3, 4])], axis=2)])
    add("Squeeze", lambda c: [c.op("Squeeze", [c.x([2, 1, 4]), c.const(np.array([1], np.int64))])])
    add("Unsqueeze", lambda c: [c.op("Unsqueeze", [c.x([2, 4]), c.const(np.array([0, 3], np.int64))])])
    add("Transpose_perm", lambda c: [c.op("Transpose", [c.x([2, 3, 4])], perm=[1, 2, 0])])
    add("Transpose_default", lambda c: [c.op("Transpose", [c.x([2, 3, 4])])])
    add("Concat_3", lambda c: [c.op("Concat", [c.x([2, 1, 3]), c.x([2, 4, 3]), c.x([2, 2, 3])], axis=1)])
    add("Expand", lambda c: [c.op("Expand", [c.x([3, 1]), c.const(np.array([2, 3, 4], np.int64))])])

    # chains: a value read twice, an MLP with softmax, two outputs sharing a node
    add("chain_reuse", lambda c: (lambda x: [c.op("Add", [c.op("Mul", [x, x]), c.op("Sin", [x])])])(c.x([3, 3])))

    def mlp(c):
        x, w1, b1, w2 = c.x([4, 6]), c.x([6, 5]), c.x([5]), c.x([5, 3])
        h = c.op("Relu", [c.op("Add", [c.op("MatMul", [x, w1]), b1])])
        return [c.op("Softmax", [c.op("MatMul", [h, w2])])]
    add("chain_mlp", mlp)

    def two_out(c):
        x = c.x([2, 4])
        t = c.op("Tanh", [x])
        return [c.op("Exp", [t]), c.op("ReduceSum", [c.op("Mul", [t, t])], keepdims=0)]
    add("chain_two_outputs", two_out)

    # convolutions: strides, pads, dilations, groups, 1-D and 3-D, auto_pad
    add("Conv_plain", lambda c: [c.op("Conv", [c.x([2, 3, 5, 5]), c.x([4, 3, 3, 3]), c.x([4])])])
    # stride 1 and at least 64 output pixels (batch x plane): dX as a Conv with reversed taps (pads (k - 1) *
    # dilation - pad), asymmetric and dilated; a pad past the kernel's reach keeps the ConvTranspose form
    add("Conv_s1_dil_asym", lambda c: [c.op("Conv", [c.x([2, 3, 7, 6]), c.x([4, 3, 3, 2])], dilations=[2, 1],
                                            pads=[2, 0, 1, 1])])
    add("Conv_1d_s1", lambda c: [c.op("Conv", [c.x([4, 3, 20]), c.x([2, 3, 5])], pads=[2, 1])])
    add("Conv_1x1_pad", lambda c: [c.op("Conv", [c.x([1, 2, 3, 3]), c.x([3, 2, 1, 1])], pads=[1, 1, 1, 1])])
    add("Conv_stride_pad_dil", lambda c: [c.op("Conv", [c.x([1, 2, 7, 6]), c.x([3, 2, 2, 3])], strides=[2, 1],
                                               pads=[1, 0, 0, 2], dilations=[2, 1])])
    # stride 2 over even sizes (ResNet's downsampling): the weight gradient's Conv gives exactly the kernel by a
    # smaller end pad, or by cutting the input's unread tail (no pad to take)
    add("Conv_s2_pad1_even", lambda c: [c.op("Conv", [c.x([2, 3, 6, 6]), c.x([4, 3, 3, 3])], strides=[2, 2],
                                             pads=[1, 1, 1, 1])])
    add("Conv_1x1_s2_even", lambda c: [c.op("Conv", [c.x([3, 4, 6, 6]), c.x([5, 4, 1, 1])], strides=[2, 2])])
    add("Conv_group2", lambda c: [c.op("Conv", [c.x([2, 4, 5, 5]), c.x([6, 2, 3, 3]), c.x([6])], group=2, pads=[1, 1, 1, 1])])
    add("Conv_depthwise", lambda c: [c.op("Conv", [c.x([1, 3, 6, 6]), c.x([3, 1, 3, 3])], group=3, strides=[2, 2],
                                          pads=[1, 1, 1, 1])])
    add("Conv_1d", lambda c: [c.op("Conv", [c.x([2, 2, 9]), c.x([3, 2, 3]), c.x([3])], strides=[2])])
    add("Conv_3d", lambda c: [c.op("Conv", [c.x([1, 2, 4, 4, 3]), c.x([2, 2, 2, 3, 2])], pads=[0, 1, 0, 1, 0, 1])])
    add("Conv_same_upper", lambda c: [c.op("Conv", [c.x([1, 2, 5, 6]), c.x([2, 2, 3, 3])], auto_pad="SAME_UPPER",
                                           strides=[2, 2])])

    # pools (MaxPool's inputs distinct: no ties inside a window)
    add("MaxPool_overlap", lambda c: [c.op("MaxPool", [c.x([1, 2, 5, 5], "distinct")], kernel_shape=[3, 3], strides=[1, 1])])
    add("MaxPool_s2_pad", lambda c: [c.op("MaxPool", [c.x([2, 2, 6, 5], "distinct")], kernel_shape=[2, 2], strides=[2, 2],
                                          pads=[1, 0, 1, 1])])
    add("MaxPool_dilated", lambda c: [c.op("MaxPool", [c.x([1, 2, 7, 6], "distinct")], kernel_shape=[3, 3], strides=[1, 2],
                                           dilations=[2, 1], pads=[2, 1, 2, 1])])
    # more than 16 taps: the argmax's reductions (the compute definition unrolls smaller windows)
    add("MaxPool_5x5", lambda c: [c.op("MaxPool", [c.x([1, 2, 9, 9], "distinct")], kernel_shape=[5, 5], strides=[2, 2],
                                       pads=[2, 2, 2, 2])])
    # more than 16 windows hold each input element: MaxPoolGrad's reduction form (fewer are unrolled)
    add("MaxPool_5x5_s1", lambda c: [c.op("MaxPool", [c.x([1, 2, 6, 7], "distinct")], kernel_shape=[5, 5],
                                          pads=[2, 2, 2, 2])])
    add("MaxPool_1d", lambda c: [c.op("MaxPool", [c.x([2, 3, 9], "distinct")], kernel_shape=[3], strides=[2], pads=[1, 1])])
    add("MaxPool_3d", lambda c: [c.op("MaxPool", [c.x([1, 2, 4, 4, 5], "distinct")], kernel_shape=[2, 2, 2],
                                      strides=[2, 2, 2])])
    # ResNet's stem pool after a ReLU: windows of zeros tie (the first one takes the gradient, which the ReLU stops)
    add("Relu_MaxPool_ties", lambda c: [c.op("MaxPool", [c.op("Relu", [c.x([2, 3, 6, 6])])], kernel_shape=[3, 3],
                                             strides=[2, 2], pads=[1, 1, 1, 1])])
    add("AveragePool_pad", lambda c: [c.op("AveragePool", [c.x([1, 2, 5, 5])], kernel_shape=[3, 3], strides=[2, 2],
                                           pads=[1, 1, 1, 1])])
    add("AveragePool_count_pad", lambda c: [c.op("AveragePool", [c.x([1, 2, 5, 5])], kernel_shape=[3, 2], strides=[1, 2],
                                                 pads=[1, 1, 1, 0], count_include_pad=1)])
    add("GlobalAveragePool", lambda c: [c.op("GlobalAveragePool", [c.x([2, 3, 4, 5])])])
    add("GlobalMaxPool", lambda c: [c.op("GlobalMaxPool", [c.x([2, 3, 4, 5], "distinct")])])

    # normalizations
    add("BatchNorm_inference", lambda c: [c.op("BatchNormalization", [c.x([2, 3, 4, 4]), c.x([3]), c.x([3]), c.x([3]),
                                                                      c.x([3], "pos")], epsilon=1e-3)])
    add("BatchNorm_training", lambda c: [(c.op("BatchNormalization", [c.x([4, 3, 2, 3]), c.x([3]), c.x([3]),
                                                                     c.const(np.zeros(3)), c.const(np.ones(3))],
                                              training_mode=1, epsilon=1e-3), [4, 3, 2, 3])], opset=15)
    def bn_chain(c):  # training BatchNormalization between a ReLU and a pool, as a CNN has it
        x = c.x([4, 3, 4, 4])
        h = c.op("Relu", [c.op("Conv", [x, c.x([3, 3, 3, 3])], pads=[1, 1, 1, 1])])
        b = c.op("BatchNormalization", [h, c.x([3]), c.x([3]), c.const(np.zeros(3)), c.const(np.ones(3))],
                 training_mode=1)
        return [(c.op("GlobalAveragePool", [c.op("MaxPool", [b], kernel_shape=[2, 2], strides=[2, 2])]), [4, 3, 1, 1])]
    add("chain_conv_relu_bn_pool", bn_chain, opset=15)
    add("LayerNorm_last", lambda c: [c.op("LayerNormalization", [c.x([3, 5]), c.x([5]), c.x([5])])])
    add("LayerNorm_axis1", lambda c: [c.op("LayerNormalization", [c.x([2, 3, 4]), c.x([3, 4])], axis=1, epsilon=1e-3)])
    add("Dropout_inference", lambda c: [c.op("Dropout", [c.x([3, 4])])])

    def dropout_training(c):
        x = c.x([4, 5])
        out = "t_drop"
        c.nodes.append(helper.make_node("Dropout", [x, c.const(np.float64(0.3)), c.const(np.array(True))],
                                        [out, "t_mask"], name="Dropout_1", seed=7))
        return [out]
    add("Dropout_training", dropout_training)

    # losses: class weights, ignore_index, every reduction, a spatial axis, SCE's log_prob output
    labels = np.array([[1, 0, 3], [2, 3, 1]], np.int64)
    add("SCE_mean_weights_ignore", lambda c: [c.op("SoftmaxCrossEntropyLoss", [
        c.x([2, 4, 3]), c.const(np.where(labels == 0, -1, labels)), c.const(np.array([0.5, 1.0, 2.0, 1.5]))],
        ignore_index=-1)])
    add("SCE_sum", lambda c: [c.op("SoftmaxCrossEntropyLoss", [c.x([3, 4]), c.const(np.array([3, 0, 1], np.int64))],
                                   reduction="sum")])

    def sce_none_logprob(c):
        x = c.x([2, 4, 3])
        c.nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [x, c.const(labels)], ["t_loss", "t_logp"],
                                        name="SCE_1", reduction="none"))
        return ["t_loss", "t_logp"]
    add("SCE_none_logprob", sce_none_logprob)
    add("NLL_mean_weights", lambda c: [c.op("NegativeLogLikelihoodLoss", [
        c.x([2, 4, 3]), c.const(labels), c.const(np.array([0.5, 1.0, 2.0, 1.5]))])])
    add("NLL_sum_ignore", lambda c: [c.op("NegativeLogLikelihoodLoss", [c.x([3, 4]), c.const(np.array([3, 2, 1], np.int64))],
                                          reduction="sum", ignore_index=2)])

    # indexing and padding
    add("Gather_axis0_repeat_neg", lambda c: [c.op("Gather", [c.x([5, 3]), c.const(np.array([[0, 4], [-1, 2], [0, 0]],
                                                                                                np.int64))])])
    add("Gather_axis1", lambda c: [c.op("Gather", [c.x([2, 4, 3]), c.const(np.array([3, 1, 3], np.int64))], axis=1)])
    add("Slice_neg_axes", lambda c: [c.op("Slice", [c.x([4, 5, 3]), c.const(np.array([1, -4], np.int64)),
                                                    c.const(np.array([-1, 100], np.int64)),
                                                    c.const(np.array([0, 1], np.int64))])])

    def split_unused(c):
        x = c.x([2, 7])
        c.nodes.append(helper.make_node("Split", [x, c.const(np.array([2, 4, 1], np.int64))], ["s0", "s1", "s2"],
                                        name="Split_1", axis=1))
        return ["s0", "s2"]  # s1 not an output: its gradient is zero
    add("Split_unused_part", split_unused)
    add("Pad_constant", lambda c: [c.op("Pad", [c.x([2, 3]), c.const(np.array([1, 0, 2, 3], np.int64)),
                                                c.const(np.float64(0.7))])])

    # transposed convolutions, resampling, the other reductions, more activations
    add("ConvTranspose_plain", lambda c: [c.op("ConvTranspose", [c.x([2, 3, 4, 4]), c.x([3, 2, 3, 3]), c.x([2])])])
    add("ConvTranspose_stride_pad_outpad", lambda c: [c.op("ConvTranspose", [c.x([1, 2, 3, 4]), c.x([2, 3, 3, 2])],
                                                           strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2],
                                                           dilations=[1, 1])])
    add("ConvTranspose_group", lambda c: [c.op("ConvTranspose", [c.x([1, 4, 3, 3]), c.x([4, 3, 2, 2])], group=2,
                                               strides=[2, 2])])
    add("ConvTranspose_1d_dil", lambda c: [c.op("ConvTranspose", [c.x([2, 2, 5]), c.x([2, 2, 3])], dilations=[2])])
    empty = lambda c: c.const(np.array([], np.float64))
    add("Resize_linear_2x", lambda c: [(c.op("Resize", [c.x([1, 2, 3, 4]), empty(c),
                                                       c.const(np.array([1, 1, 2, 2], np.float64))], mode="linear"), [1, 2, 6, 8])])
    add("Resize_linear_align_sizes", lambda c: [(c.op("Resize", [c.x([1, 1, 4, 5]), empty(c), empty(c),
                                                                c.const(np.array([1, 1, 7, 3], np.int64))],
                                                     mode="linear", coordinate_transformation_mode="align_corners"),
                                               [1, 1, 7, 3])])
    add("Resize_nearest", lambda c: [(c.op("Resize", [c.x([1, 2, 3, 3]), empty(c),
                                                     c.const(np.array([1, 1, 2, 1.5], np.float64))], mode="nearest"), [1, 2, 6, 4])])
    add("Resize_cubic", lambda c: [(c.op("Resize", [c.x([1, 1, 4, 4]), empty(c),
                                                   c.const(np.array([1, 1, 1.5, 2], np.float64))], mode="cubic"), [1, 1, 6, 8])])
    for op in ("ReduceMax", "ReduceMin"):
        add(f"{op}_axis", lambda c, op=op: [c.op(op, [c.x([2, 3, 4], "distinct")], axes=[1], keepdims=0)])
    add("ReduceProd", lambda c: [c.op("ReduceProd", [c.x([2, 3], "away")], axes=[1])])
    add("ReduceL1", lambda c: [c.op("ReduceL1", [c.x([2, 4], "away")], axes=[0], keepdims=0)])
    add("ReduceL2", lambda c: [c.op("ReduceL2", [c.x([3, 4])], axes=[1])])
    add("ReduceLogSum", lambda c: [c.op("ReduceLogSum", [c.x([2, 5], "pos")], axes=[1])])
    add("ReduceLogSumExp", lambda c: [c.op("ReduceLogSumExp", [c.x([2, 3, 4])], axes=[0, 2], keepdims=0)])
    add("ReduceSumSquare", lambda c: [c.op("ReduceSumSquare", [c.x([3, 4])])])
    for op, kind in (("Atan", "any"), ("Cosh", "any"), ("Sinh", "any"), ("Softsign", "away"), ("Selu", "away"),
                     ("Tan", "any")):
        add(op, lambda c, op=op, kind=kind: [c.op(op, [c.x([2, 5], kind)])] if op != "Tan" else
            [c.op("Tan", [c.x([2, 5])])])
    add("Celu", lambda c: [c.op("Celu", [c.x([2, 5], "away")], alpha=0.8)])
    add("ThresholdedRelu", lambda c: [c.op("ThresholdedRelu", [c.x([2, 5], "away")], alpha=0.1)])

    def hard_swish(c):
        x = c.x([2, 5])
        c.feeds[x] = np.array([[-4.0, -2.9, -1.0, -0.2, 0.3], [1.1, 2.5, 2.9, 3.2, 5.0]])
        return [c.op("HardSwish", [x])]
    add("HardSwish", hard_swish)
    add("PRelu_channel", lambda c: [c.op("PRelu", [c.x([2, 3, 4], "away"), c.x([3, 1])])])

    def attention(c):  # softmax(q k^T / sqrt(d)) v, the pattern the optimizer fuses
        q, k, v = c.x([2, 4, 8]), c.x([2, 4, 8]), c.x([2, 4, 8])
        s_ = c.op("Div", [c.op("MatMul", [q, c.op("Transpose", [k], perm=[0, 2, 1])]), c.const(np.float64(np.sqrt(8)))])
        return [c.op("MatMul", [c.op("Softmax", [s_], axis=-1), v])]
    add("chain_attention", attention)

    # kiln's fused ops (what the pattern pass makes of Gelu and attention)
    add("kiln_Gelu", lambda c: [(c.op("Gelu", [c.x([3, 5])], domain="kiln"), [3, 5])])
    add("kiln_Gelu_tanh", lambda c: [(c.op("Gelu", [c.x([3, 5])], domain="kiln", approximate="tanh"), [3, 5])])
    # ONNX Gelu-20 (kiln.Gelu's rule); a model of opset 20, saved without the checker
    add("Gelu20", lambda c: [(c.op("Gelu", [c.x([3, 5])]), [3, 5])], opset=20)
    add("Gelu20_tanh", lambda c: [(c.op("Gelu", [c.x([3, 5])], approximate="tanh"), [3, 5])], opset=20)
    add("kiln_FusedAttention", lambda c: [(c.op("FusedAttention", [c.x([2, 3, 4, 8]), c.x([2, 3, 5, 8]), c.x([2, 3, 5, 6])],
                                                domain="kiln", scale=0.35), [2, 3, 4, 6])])
    add("kiln_FusedAttention_mask_bcast_kT", lambda c: [(c.op("FusedAttention", [
        c.x([2, 3, 4, 8]), c.x([3, 8, 5]), c.x([3, 5, 6]), c.x([4, 5])], domain="kiln", scale=0.5, transpose_k=0),
        [2, 3, 4, 6])])

    # no rule: a clear error naming the node
    add("norule_LpNormalization", lambda c: [c.op("LpNormalization", [c.x([3, 4])])])
    return out


def main():
    global DTYPE
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == "--dtype" and args[2] in FLOAT:
        DTYPE = args[2]
        args = args[:1]
    if len(args) != 1:
        sys.exit(__doc__)
    out_dir = args[0]
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    for name, fn, opset in cases():
        c = Case(name, opset)
        outputs = fn(c)
        c.write(out_dir, outputs)
        n += 1
    print(f"gen_grad_cases: {n} cases in {out_dir}")


if __name__ == "__main__":
    main()
