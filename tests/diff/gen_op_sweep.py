#!/usr/bin/env python3
"""Writes the op sweep of kiln's differential test: one small model per
(claimed op, shape/attribute variant) into OUTDIR as NAME.onnx, for
kiln_diff to run on the cpu device and on ref. Models whose names start
with `mixed_` contain, on purpose, nodes the cpu device leaves to ref
(comparisons, ops with more than 8 inputs, LayerNormalization); every other
model must compile entirely.

    gen_op_sweep.py OUTDIR [--list]

Every op the cpu device claims (src/codegen/lower.c, kiln_lower_class) is
covered with odd sizes (1, 3, 15, 17, 31, 33, 65), sizes that are not a
multiple of the vector width (16 floats), broadcasting, and non-contiguous
inputs: the op's input produced in the same model by a Transpose or a
Slice (step 2, or a negative step), so the compiled kernel reads strided
data. Data inputs are f32 graph inputs (kiln_diff fills them with normal
random values); parameters (shapes, axes, starts...) are initializers, so
the models use no integer graph inputs. Deterministic: the same files on
every run. Needs onnx (1.12) and numpy."""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
B = TensorProto.BOOL
INT64_MAX = 2**63 - 1
INT64_MIN = -2**63


class Model:
    """A small graph under construction."""

    def __init__(self, name, opset=13):
        self.name = name
        self.opset = opset
        self.nodes, self.inputs, self.inits, self.outputs = [], [], [], []
        self.n = 0
        self.out_shapes = {}
        self.rng = np.random.RandomState(abs(hash_name(name)) % (2**31))

    def fresh(self, base):
        self.n += 1
        return '%s%d' % (base, self.n)

    def inp(self, shape, dtype=F):
        name = self.fresh('x')
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def const(self, value, dtype=None):
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh('c')
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def randc(self, shape):
        """A random f32 constant (weights)."""
        return self.const(self.rng.standard_normal(shape).astype(np.float32))

    def node(self, op, ins, domain='', **attrs):
        out = self.fresh('t')
        self.nodes.append(helper.make_node(op, ins, [out], name=self.fresh('n_' + op + '_'), domain=domain, **attrs))
        return out

    def out(self, name, shape=None, dtype=F):
        """Marks a graph output; `shape` (and `dtype`) where ONNX's shape inference cannot tell."""
        self.outputs.append(name)
        if shape is not None:
            self.out_shapes[name] = shape
        self.out_dtypes = getattr(self, 'out_dtypes', {})
        self.out_dtypes[name] = dtype

    def source(self, shape, how='plain'):
        """An f32 value of `shape` that is a graph input ('plain') or is
        produced from one by a Transpose ('T'), a strided Slice ('S': every
        second element of the last axis) or a reversing Slice ('R': step -1
        on axis 0 with clamped ends)."""
        shape = list(shape)
        r = len(shape)
        if how == 'plain' or r == 0:
            return self.inp(shape)
        if how == 'T' and r >= 2:
            perm = list(range(r))[::-1]
            if r >= 3:
                perm = [1, 2, 0] + list(range(3, r)) if r == 3 else list(range(r))[::-1]
            # out.dims[i] = in.dims[perm[i]]  =>  in.dims[perm[i]] = shape[i]
            ind = [0] * r
            for i, p in enumerate(perm):
                ind[p] = shape[i]
            x = self.inp(ind)
            return self.node('Transpose', [x], perm=perm)
        if how in ('T', 'S'):
            ind = shape[:-1] + [2 * shape[-1] + 1]
            x = self.inp(ind)
            if self.opset < 10:  # attribute form: no steps; take the middle instead
                ind[-1] = shape[-1] + 2
                self.inputs[-1] = helper.make_tensor_value_info(x, F, ind)
                return self.node('Slice', [x], starts=[1], ends=[-1], axes=[-1])
            return self.node('Slice', [x, self.const([1], np.int64), self.const([INT64_MAX], np.int64),
                                       self.const([-1], np.int64), self.const([2], np.int64)])
        if how == 'R':
            ind = [shape[0] + 2] + shape[1:]
            x = self.inp(ind)
            if self.opset < 10:
                return self.node('Slice', [x], starts=[2], ends=[INT64_MAX], axes=[0])
            return self.node('Slice', [x, self.const([-3], np.int64), self.const([INT64_MIN], np.int64),
                                       self.const([0], np.int64), self.const([-1], np.int64)])
        raise ValueError(how)

    def build(self):
        # Outputs of any dtype: declared UNDEFINED, then typed from inference below.
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in self.outputs],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', self.opset)],
                                  producer_name='kiln-diff-sweep')
        model.ir_version = 8
        if self.opset > 17:
            # Newer than Debian's onnx knows: no inference or checker; every output is declared.
            model.ir_version = 10
            for o in model.graph.output:
                o.type.CopyFrom(helper.make_tensor_type_proto(self.out_dtypes[o.name], self.out_shapes[o.name]))
            return model
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        # Declare the outputs with their inferred types.
        vi = {v.name: v for v in model.graph.value_info}
        for o in model.graph.output:
            if o.name in self.out_shapes:
                o.type.CopyFrom(helper.make_tensor_type_proto(F, self.out_shapes[o.name]))
            elif o.name in vi and vi[o.name].type.tensor_type.HasField('shape'):
                o.type.CopyFrom(vi[o.name].type)
            elif not o.type.tensor_type.HasField('shape'):
                raise ValueError('%s: no inferred shape for output %s' % (self.name, o.name))
        onnx.checker.check_model(model, full_check=True)
        return model


def hash_name(s):
    h = 1469598103934665603
    for ch in s.encode():
        h = ((h ^ ch) * 1099511628211) % (2**64)
    return h


CASES = []


def case(name, opset=13):
    m = Model(name, opset)
    CASES.append(m)
    return m


def ints(v):
    return np.array(v, dtype=np.int64)


# ---- unary / activations ----------------------------------------------------------

UNARY_SHAPES = [('s1', [1]), ('s17', [17]), ('s3x17', [3, 17]), ('s2x3x33', [2, 3, 33]), ('s65', [65]),
                ('s4x16', [4, 16]), ('scalar', [])]
NONCONTIG = [('T', 'T', [5, 17]), ('S', 'S', [3, 15]), ('R', 'R', [7, 31])]


def unary_cases():
    plain = ['Relu', 'Sigmoid', 'Tanh', 'Exp', 'Neg', 'Abs', 'Erf', 'Reciprocal', 'Floor', 'Ceil', 'Softplus',
             'Softsign', 'Sin', 'Cos', 'Identity', 'Round', 'Log', 'Sqrt']
    for i, op in enumerate(plain):
        key = op in ('Relu', 'Sigmoid', 'Exp', 'Tanh')
        shapes = UNARY_SHAPES if key else [UNARY_SHAPES[3], UNARY_SHAPES[-1]]
        for tag, shape in shapes:
            m = case('%s_%s' % (op, tag))
            x = m.source(shape)
            if op in ('Log', 'Sqrt'):
                x = m.node('Abs', [x])  # real values; raw NaN inputs are in the _neg case
            m.out(m.node(op, [x]))
        for tag, how, shape in (NONCONTIG if key else [NONCONTIG[i % len(NONCONTIG)]]):
            m = case('%s_nc%s' % (op, tag))
            x = m.source(shape, how)
            if op in ('Log', 'Sqrt'):
                x = m.node('Abs', [x])
            m.out(m.node(op, [x]))
    # attributes
    attr_cases = [
        ('LeakyRelu', {}, 13), ('LeakyRelu', {'alpha': 0.3}, 13),
        ('Elu', {}, 13), ('Elu', {'alpha': 0.5}, 13),
        ('HardSigmoid', {}, 13), ('HardSigmoid', {'alpha': 0.3, 'beta': 0.4}, 13),
        ('Selu', {}, 13), ('Selu', {'alpha': 1.5, 'gamma': 2.5}, 13),
        ('HardSwish', {}, 14),
        ('Clip', {'min': -0.5, 'max': 0.7}, 6), ('Clip', {'min': 0.1}, 6), ('Clip', {}, 6),
        ('Dropout', {}, 13),
    ]
    for i, (op, attrs, opset) in enumerate(attr_cases):
        for tag, how, shape in [('a', 'plain', [3, 17]), ('nc', 'TSR'[i % 3], [5, 17])]:
            m = case('%s_attr%d_%s' % (op, i, tag), opset)
            x = m.source(shape, how)
            m.out(m.node(op, [x], **attrs))
    # Clip with inputs (opset 11, 13): both, min only, max only, none, min > max
    for opset in (11, 13):
        for tag, lo, hi in [('both', -0.5, 0.7), ('min', 0.1, None), ('max', None, -0.2), ('none', None, None),
                            ('inverted', 0.5, -0.5)]:
            for stag, how, shape in [('a', 'plain', [3, 17]), ('nc', 'S', [4, 33])]:
                m = case('Clip%d_%s_%s' % (opset, tag, stag), opset)
                x = m.source(shape, how)
                ins = [x, m.const(np.float32(lo)) if lo is not None else '', m.const(np.float32(hi)) if hi is not None else '']
                while ins[-1] == '':
                    ins.pop()
                m.out(m.node('Clip', ins))
    # Log/Sqrt of raw normal values: NaN for negatives on both devices
    for op in ('Log', 'Sqrt'):
        m = case('%s_neg' % op)
        m.out(m.node(op, [m.source([3, 17])]))
    # large magnitudes for the exp-based kernels
    for op in ('Exp', 'Sigmoid', 'Tanh', 'Softplus', 'Elu', 'Erf'):
        m = case('%s_scaled' % op)
        x = m.node('Mul', [m.source([3, 33]), m.const(np.float32(12.0))])
        m.out(m.node(op, [x]))


# ---- binary / broadcast ------------------------------------------------------------

BCAST = [('same', [3, 17], [3, 17]), ('row', [3, 17], [17]), ('col', [3, 17], [3, 1]),
         ('both', [1, 5, 1], [4, 1, 7]), ('scalarB', [2, 3, 33], []), ('scalarA', [], [65]),
         ('one', [33], [1]), ('rank4', [2, 1, 3, 15], [5, 1, 1]), ('s16', [4, 16], [16])]


def binary_cases():
    for op in ['Add', 'Sub', 'Mul', 'Div', 'Max', 'Min', 'Sum', 'Mean', 'Pow']:
        variants = BCAST if op in ('Add', 'Mul', 'Div', 'Sub') else [BCAST[0], BCAST[1], BCAST[3], BCAST[4]]
        for tag, sa, sb in variants:
            m = case('%s_%s' % (op, tag))
            a, b = m.source(sa), m.source(sb)
            if op == 'Pow':
                a = m.node('Abs', [a])
            m.out(m.node(op, [a, b]))
        # non-contiguous operands
        ncs = [('ncT', 'T', 'plain'), ('ncS', 'plain', 'S'), ('ncTS', 'T', 'R')]
        if op not in ('Add', 'Mul', 'Div', 'Sub'):
            ncs = [ncs[len(op) % 3]]
        for tag, how_a, how_b in ncs:
            m = case('%s_%s' % (op, tag))
            a, b = m.source([5, 17], how_a), m.source([5, 17], how_b)
            if op == 'Pow':
                a = m.node('Abs', [a])
            m.out(m.node(op, [a, b]))
        # constant second operand, broadcast
        m = case('%s_const' % op)
        a = m.source([3, 17])
        if op == 'Pow':
            a = m.node('Abs', [a])
        m.out(m.node(op, [a, m.randc([17])]))
    # variadic Sum/Max/Min/Mean: 1, 3 and 9 inputs with broadcasting
    for op in ['Sum', 'Max', 'Min', 'Mean']:
        for n in (1, 3, 9):
            # more than 8 operands run on ref (views hold at most 8)
            m = case('%s%s_n%d' % ('mixed_' if n > 8 else '', op, n))
            shapes = [[3, 17], [17], [3, 1], [1, 17]]
            ins = [m.source(shapes[i % len(shapes)]) for i in range(n)]
            m.out(m.node(op, ins))
    # Pow with constant exponents (2 and 0.5 have special code), and a
    # broadcasting rank-raising constant exponent
    for tag, e in [('e2', 2.0), ('e05', 0.5), ('e3', 3.0), ('em1', -1.0)]:
        for stag, how in [('a', 'plain'), ('nc', 'T')]:
            m = case('Pow_%s_%s' % (tag, stag))
            x = m.node('Abs', [m.source([5, 17], how)]) if e == 0.5 else m.source([5, 17], how)
            m.out(m.node('Pow', [x, m.const(np.float32(e))]))
    m = case('Pow_e2_rank')
    m.out(m.node('Pow', [m.source([17]), m.const(np.full([1, 1], 2.0, np.float32))]))
    m = case('Pow_e2_graphexp')  # exponent from a Constant node, not an initializer
    e = m.node('Constant', [], value=numpy_helper.from_array(np.array(2.0, np.float32)))
    m.out(m.node('Pow', [m.source([3, 17]), e]))
    # PRelu: slope unidirectionally broadcast to X
    for tag, sx, ss in [('c', [2, 3, 5, 5], [3, 1, 1]), ('last', [3, 17], [17]), ('one', [4, 33], [1]),
                        ('same', [3, 17], [3, 17])]:
        for how in ('plain', 'T'):
            m = case('PRelu_%s_%s' % (tag, how), 9)
            m.out(m.node('PRelu', [m.source(sx, how), m.source(ss)]))
    m = case('PRelu_const', 9)
    m.out(m.node('PRelu', [m.source([2, 3, 7, 7]), m.randc([3, 1, 1])]))


def where_cases():
    for tag, sc, sx, sy in [('same', [3, 17], [3, 17], [3, 17]), ('bc', [3, 17], [17], [3, 1]),
                            ('bc2', [1, 17], [4, 1], []), ('cond_small', [17], [2, 3, 17], [2, 3, 17])]:
        m = case('Where_%s' % tag)
        c = m.inp(sc, B)
        m.out(m.node('Where', [c, m.source(sx), m.source(sy)]))
    for tag, hx, hy in [('ncT', 'T', 'S'), ('ncR', 'R', 'plain')]:
        m = case('Where_%s' % tag)
        c = m.inp([5, 17], B)
        m.out(m.node('Where', [c, m.source([5, 17], hx), m.source([5, 17], hy)]))
    # condition computed in the graph (ref step feeding a compiled kernel)
    m = case('mixed_Where_cmp')  # a bool producer feeding Where (Greater compiles now; kept as a mixed case)
    x = m.source([3, 17])
    c = m.node('Greater', [x, m.const(np.float32(0.0))])
    m.out(m.node('Where', [c, x, m.source([17])]))
    # Concats of more than 8 inputs become trees of at most 8 (passes/decompose.c): 70 one-row slices (more
    # operands than a fused kernel takes: some inner Concats stay kernels of their own), and DenseNet's
    # channel concatenations of feature maps of different widths
    m = case('Concat_n70_tree')
    x = m.source([70, 3])
    parts = [m.node('Slice', [x, m.const(ints([i])), m.const(ints([i + 1])), m.const(ints([0]))]) for i in range(70)]
    m.out(m.node('Relu', [m.node('Concat', parts, axis=0)]))
    m = case('Concat_n20_channels')
    parts = [m.node('Relu', [m.source([1, 2 + i % 5, 5, 6])]) for i in range(20)]
    m.out(m.node('Concat', parts, axis=-3))
    # DenseNet's layer input: a Concat of every earlier feature map (12 here: a tree after decompose.c),
    # then BatchNormalization's scale and shift and a ReLU; the Concat group stays a buffer (fusion.c), the
    # elementwise kernel reads it whole.
    m = case('Concat_dense_bn_relu')
    parts = [m.source([1, 3 + i % 4, 7, 9]) for i in range(12)]
    cat = m.node('Concat', parts, axis=1)
    ch = sum(3 + i % 4 for i in range(12))
    bn = m.node('Add', [m.node('Mul', [cat, m.randc([1, ch, 1, 1])]), m.randc([1, ch, 1, 1])])
    m.out(m.node('Relu', [bn]))


# ---- reductions --------------------------------------------------------------------

REDUCE_OPS = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceSumSquare', 'ReduceL1',
              'ReduceL2', 'ReduceLogSumExp', 'ReduceLogSum']


def reduce_cases():
    axes_variants = [('all', None, 1), ('a0', [0], 1), ('a1', [1], 0), ('a2', [2], 1), ('am1', [-1], 0),
                     ('a02', [0, 2], 1), ('a12', [1, 2], 0), ('a01', [0, 1], 0)]
    for op in REDUCE_OPS:
        shape = [3, 5, 17] if op != 'ReduceProd' else [3, 4, 5]
        key = op in ('ReduceSum', 'ReduceMean', 'ReduceMax')
        for tag, axes, keep in axes_variants if key else [axes_variants[i] for i in (0, 2, 4, 5)]:
            opset = 13 if op == 'ReduceSum' else 11
            m = case('%s_%s_k%d' % (op, tag, keep), opset)
            x = m.source(shape)
            if op == 'ReduceLogSum':
                x = m.node('Abs', [x])
            if op == 'ReduceSum':
                ins = [x] + ([m.const(ints(axes))] if axes is not None else [])
                m.out(m.node(op, ins, keepdims=keep))
            else:
                attrs = {'keepdims': keep}
                if axes is not None:
                    attrs['axes'] = axes
                m.out(m.node(op, [x], **attrs))
        # non-contiguous input, several shapes
        ncs = [('ncT', 'T', [5, 17], [1]), ('ncS', 'S', [3, 33], [1]), ('ncR', 'R', [7, 15], [0]),
               ('nc3', 'T', [2, 3, 33], [-1]), ('s65', 'plain', [65], [0]), ('s1', 'plain', [1, 1], [1])]
        for tag, how, shp, axes in ncs if key else [ncs[0], ncs[4]]:
            opset = 13 if op == 'ReduceSum' else 11
            m = case('%s_%s' % (op, tag), opset)
            x = m.source(shp, how)
            if op == 'ReduceLogSum':
                x = m.node('Abs', [x])
            if op == 'ReduceSum':
                m.out(m.node(op, [x, m.const(ints(axes))], keepdims=1))
            else:
                m.out(m.node(op, [x], axes=axes, keepdims=1))
    # ReduceSum-13 specials: empty axes input, noop_with_empty_axes
    m = case('ReduceSum_emptyaxes', 13)
    m.out(m.node('ReduceSum', [m.source([3, 17]), m.const(np.zeros([0], np.int64))], keepdims=0))
    m = case('ReduceSum_noop', 13)
    m.out(m.node('ReduceSum', [m.source([3, 17]), m.const(np.zeros([0], np.int64))], noop_with_empty_axes=1))
    m = case('ReduceMean_opset1', 1)
    m.out(m.node('ReduceMean', [m.source([3, 17])], axes=[1]))
    # reductions fused with consumers (row-normalisation patterns)
    m = case('ReduceMean_sub_fused', 13)
    x = m.source([4, 33])
    mean = m.node('ReduceMean', [x], axes=[1], keepdims=1)
    m.out(m.node('Sub', [x, mean]))
    m = case('ReduceMax_exp_fused_nc', 13)
    x = m.source([5, 17], 'T')
    mx = m.node('ReduceMax', [x], axes=[-1], keepdims=1)
    m.out(m.node('Exp', [m.node('Sub', [x, mx])]))
    # rows of a reduction that reads some of the loops a block spans: x
    # broadcast along axis 0 (the interpreter evaluates several rows at once)
    for tag, shape, to in [('3d', [1, 3, 17], [2, 3, 17]), ('4d', [1, 3, 5, 1], [2, 3, 5, 7])]:
        m = case('ReduceMean_broadcast_rows_%s' % tag, 13)
        x = m.node('Expand', [m.source(shape), m.const(ints(to))])
        m.out(m.node('ReduceMean', [m.node('Exp', [x])], axes=[-1], keepdims=1))
        m = case('ReduceMean_broadcast_rows_sub_%s' % tag, 13)
        x = m.node('Expand', [m.source(shape), m.const(ints(to))])
        m.out(m.node('Sub', [x, m.node('ReduceMean', [x], axes=[-1], keepdims=1)]))
    m = case('ReduceSum_first_axis_fused', 13)
    x = m.source([6, 17])
    s = m.node('ReduceSum', [x, m.const(ints([0]))], keepdims=1)
    m.out(m.node('Div', [x, s]))
    # means over two axes: NCHW's trailing H and W (the interpreter merges the
    # two reductions), NHWC's middle ones (a channel's elements C apart), as a
    # squeeze-excitation block reads them; an instance norm's
    for tag, shape, axes in [('nchw', [2, 5, 7, 9], [2, 3]), ('nhwc', [2, 7, 9, 5], [1, 2]),
                             ('nhwc_wide', [1, 6, 6, 70], [1, 2])]:
        for keep in (0, 1):
            m = case('ReduceMean_hw_%s_k%d' % (tag, keep), 13)
            m.out(m.node('ReduceMean', [m.node('Exp', [m.source(shape)]) if keep else m.source(shape)], axes=axes,
                         keepdims=keep))
    m = case('ReduceMean_hw_scale', 13)  # SE: x * sigmoid(mean over H, W)
    x = m.source([1, 6, 5, 7])
    m.out(m.node('Mul', [x, m.node('Sigmoid', [m.node('ReduceMean', [x], axes=[2, 3], keepdims=1)])]))
    m = case('ReduceMax_hw3_chain', 13)  # three reduced axes (the inner two merge)
    m.out(m.node('ReduceMax', [m.source([2, 3, 4, 5, 6])], axes=[2, 3, 4], keepdims=0))


def softmax_cases():
    for op in ('Softmax', 'LogSoftmax'):
        for opset, tag, shape, axis in [(11, 'def', [3, 5, 17], None), (11, 'a2', [3, 5, 17], 2),
                                        (11, 'a0', [3, 5, 17], 0), (11, 'am1', [2, 33], -1),
                                        (13, 'def', [3, 5, 17], None), (13, 'r1', [65], -1),
                                        (13, 'r2', [3, 17], 1), (13, 'one', [4, 1], -1), (13, 'r4', [2, 3, 4, 31], 3),
                                        # not the last axis (between two Transposes: passes/decompose.c)
                                        (13, 'mid', [2, 9, 5, 7], 1), (13, 'a0', [5, 3, 4], 0),
                                        (13, 'raft', [1, 1, 9, 4, 4, 6], -4)]:
            for how in ('plain', 'T', 'S') if tag in ('def', 'r2') else ('plain',):
                m = case('%s%d_%s_%s' % (op, opset, tag, how), opset)
                attrs = {} if axis is None else {'axis': axis}
                m.out(m.node(op, [m.source(shape, how)], **attrs))
        m = case('%s_scaled' % op)
        x = m.node('Mul', [m.source([3, 33]), m.const(np.float32(30.0))])
        m.out(m.node(op, [x]))
        m = case('%s_then_mul' % op)  # softmax inlined into a consumer
        x = m.source([4, 17])
        m.out(m.node('Mul', [m.node(op, [x]), m.source([4, 17])]))
        # a concat of transposed heads under it (SSD's class scores): read
        # three times, the concat is materialized, not fused
        m = case('%s_concat_heads' % op)
        heads = [m.node('Reshape', [m.node('Transpose', [m.source([1, 6, 4, 5])], perm=[0, 2, 3, 1]),
                                    m.const(ints([1, -1, 3]))]) for _ in range(3)]
        m.out(m.node(op, [m.node('Concat', heads, axis=1)], axis=-1))
    # the decomposed softmax (recognized by the patterns pass)
    m = case('Softmax_decomposed')
    x = m.source([3, 17])
    mx = m.node('ReduceMax', [x], axes=[-1], keepdims=1)
    e = m.node('Exp', [m.node('Sub', [x, mx])])
    s = m.node('ReduceSum', [e, m.const(ints([-1]))], keepdims=1)
    m.out(m.node('Div', [e, s]))


# ---- movement ------------------------------------------------------------------------

def movement_cases():
    import itertools
    for perm in itertools.permutations(range(3)):
        for how in ('plain', 'S'):
            m = case('Transpose_%s_%s' % (''.join(map(str, perm)), how))
            m.out(m.node('Transpose', [m.source([2, 3, 17], how)], perm=list(perm)))
    for tag, shape, perm in [('def2', [3, 17], None), ('def3', [2, 5, 33], None), ('p0231', [2, 3, 5, 7], [0, 2, 3, 1]),
                             ('p3102', [2, 3, 5, 7], [3, 1, 0, 2]), ('r1', [17], [0]), ('big', [33, 65], [1, 0]),
                             ('unit', [1, 17, 1], [2, 0, 1])]:
        m = case('Transpose_%s' % tag)
        attrs = {} if perm is None else {'perm': perm}
        m.out(m.node('Transpose', [m.source(shape)], **attrs))
    m = case('Transpose_twice')
    m.out(m.node('Transpose', [m.node('Transpose', [m.source([3, 5, 7])], perm=[2, 0, 1])], perm=[0, 2, 1]))
    # Reshape
    for tag, shape, new, opset in [('flat', [3, 17], [51], 13), ('merge', [2, 3, 5], [6, 5], 13),
                                   ('split', [2, 3, 5], [5, 6], 13), ('m1', [2, 3, 5], [-1], 13),
                                   ('zero', [2, 3, 5], [0, -1], 13), ('unit', [1, 15], [15, 1, 1], 13),
                                   ('units2', [3, 1, 5], [1, 3, 5, 1], 13), ('regroup', [4, 6], [3, 8], 13),
                                   ('allowzero', [2, 3, 5], [2, 15], 14)]:
        for how in ('plain', 'T', 'S'):
            m = case('Reshape_%s_%s' % (tag, how), opset)
            m.out(m.node('Reshape', [m.source(shape, how), m.const(ints(new))]))
    # Flatten
    for axis in (0, 1, 2, -1, 3):
        for how in ('plain', 'T'):
            m = case('Flatten_a%d_%s' % (axis, how))
            m.out(m.node('Flatten', [m.source([2, 3, 5], how)], axis=axis))
    # Squeeze / Unsqueeze (opset 11 attributes, opset 13 inputs)
    for how in ('plain', 'T'):
        m = case('Squeeze11_axes_%s' % how, 11)
        m.out(m.node('Squeeze', [m.source([1, 3, 1, 5], how)], axes=[0, 2]))
        m = case('Squeeze11_all_%s' % how, 11)
        m.out(m.node('Squeeze', [m.source([1, 3, 1, 5], how)]), [3, 5])
        m = case('Squeeze13_axes_%s' % how, 13)
        m.out(m.node('Squeeze', [m.source([1, 3, 1, 5], how), m.const(ints([-2]))]))
        m = case('Unsqueeze11_%s' % how, 11)
        m.out(m.node('Unsqueeze', [m.source([3, 5], how)], axes=[0, 3]))
        m = case('Unsqueeze13_%s' % how, 13)
        m.out(m.node('Unsqueeze', [m.source([3, 5], how), m.const(ints([-1, 1]))]))
    # Expand
    for tag, shape, to in [('col', [3, 1], [3, 17]), ('rank', [17], [2, 3, 17]), ('one', [1], [5, 4]),
                           ('both', [3, 1], [2, 1, 6]), ('same', [3, 17], [3, 17]), ('smaller', [2, 3, 17], [3, 1])]:
        for how in ('plain', 'S'):
            m = case('Expand_%s_%s' % (tag, how))
            m.out(m.node('Expand', [m.source(shape, how), m.const(ints(to))]))
    # Slice (opset 10/13 inputs, opset 1 attributes)
    slices = [('basic', [5, 17], [1], [4], [0], None), ('step2', [5, 17], [0], [17], [1], [2]),
              ('neg_step', [5, 17], [-1], [INT64_MIN], [1], [-1]), ('neg_step3', [5, 17], [15], [1], [1], [-3]),
              ('clamp', [5, 17], [-100], [100], [1], None), ('clamp_neg', [5, 17], [100], [-100], [0], [-2]),
              ('two_axes', [3, 4, 33], [1, 30], [3, 2], [0, 2], [1, -4]), ('noaxes', [5, 17], [1, 2], [4, 9], None, None),
              ('negaxis', [3, 4, 33], [-5], [INT64_MAX], [-1], None), ('all3', [3, 4, 33], [2, 3, 32], [0, 0, 0], [0, 1, 2], [-1, -1, -7])]
    for tag, shape, st, en, ax, sp in slices:
        for how in ('plain', 'T'):
            for opset in (10, 13):
                m = case('Slice%d_%s_%s' % (opset, tag, how), opset)
                ins = [m.source(shape, how), m.const(ints(st)), m.const(ints(en))]
                if ax is not None or sp is not None:
                    ins.append(m.const(ints(ax if ax is not None else list(range(len(st))))))
                if sp is not None:
                    ins.append(m.const(ints(sp)))
                m.out(m.node('Slice', ins))
        if sp is None:
            m = case('Slice1_%s' % tag, 1)
            attrs = {'starts': st, 'ends': en}
            if ax is not None:
                attrs['axes'] = ax
            m.out(m.node('Slice', [m.source(shape)], **attrs))
    # Concat
    for tag, shapes, axis in [('a0', [[2, 17], [3, 17]], 0), ('a1', [[3, 5], [3, 17], [3, 1]], 1),
                              ('am1', [[2, 3, 5], [2, 3, 7]], -1), ('a1_3d', [[2, 1, 5], [2, 4, 5], [2, 2, 5]], 1),
                              ('one', [[3, 17]], 0), ('four', [[1, 9]] * 4, 0), ('eight', [[2, 3]] * 8, 1),
                              ('nine', [[2, 3]] * 9, 1)]:
        for how in ('plain', 'T'):
            # more than 8 operands run on ref (views hold at most 8)
            m = case('%sConcat_%s_%s' % ('mixed_' if tag == 'nine' else '', tag, how))
            ins = [m.source(s, how if i % 2 == 0 else 'S') for i, s in enumerate(shapes)]
            m.out(m.node('Concat', ins, axis=axis))
    m = case('Concat_const')
    m.out(m.node('Concat', [m.source([3, 5]), m.randc([3, 4])], axis=1))
    # Concat inlined into a reduction, one operand a constant initializer
    # (lives in the model file's mapping): the other operands' loads for rows
    # that are not theirs must not leave their buffers
    m = case('Concat_const_reduce')
    m.out(m.node('ReduceMin', [m.node('Concat', [m.source([7, 129, 3]), m.randc([64, 129, 3])], axis=0)], keepdims=0))
    m = case('Concat_constfirst_reduce')
    m.out(m.node('ReduceMin', [m.node('Concat', [m.randc([2, 257, 3]), m.source([200, 257, 3])], axis=0)], keepdims=0))
    m = case('Concat_const_flatten')
    x = m.source([17, 257, 2])
    m.out(m.node('Flatten', [m.node('Concat', [x, x, m.randc([2, 257, 2]), x], axis=0)], axis=2))
    m = case('Concat_constfirst_relu')
    m.out(m.node('Relu', [m.node('Concat', [m.randc([2, 257, 3]), m.source([200, 257, 3])], axis=0)]))
    m = case('Concat_reduce_axis1')
    m.out(m.node('ReduceSum', [m.node('Concat', [m.source([3, 5, 17]), m.source([3, 2, 17])], axis=1),
                               m.const(ints([1]))], keepdims=1))
    m = case('Concat_same_twice')
    x = m.node('Exp', [m.source([3, 5])])
    m.out(m.node('Concat', [x, x], axis=0))


# ---- contractions ----------------------------------------------------------------------

def matmul_cases():
    shapes = [('2d', [7, 33], [33, 65]), ('m1', [1, 7], [7, 1]), ('k1', [17, 1], [1, 15]), ('sq65', [65, 65], [65, 65]),
              ('a1d', [17], [17, 5]), ('b1d', [3, 17], [17]), ('both1d', [17], [17]), ('b3', [5, 7, 9], [9, 4]),
              ('batch', [2, 3, 7, 33], [33, 5]), ('bcast', [2, 1, 7, 9], [3, 9, 5]), ('bb', [2, 3, 4, 5], [2, 3, 5, 6]),
              ('a1d_b3', [9], [3, 9, 5]), ('b1d_a3', [3, 5, 9], [9]), ('bcast2', [1, 3, 7], [4, 1, 7, 2]),
              ('big', [31, 64], [64, 33]),
              # one column against a large run-time A (a decoder's K x q^T): the SGEMM's dot rows, A's rows read in place
              ('one_col_big_a', [2, 600, 128], [2, 128, 1]), ('one_col_big_a_bcast', [3, 520, 130], [130, 1])]
    for tag, sa, sb in shapes:
        m = case('MatMul_%s' % tag)
        m.out(m.node('MatMul', [m.source(sa), m.source(sb)]))
        m = case('MatMul_%s_constB' % tag)
        m.out(m.node('MatMul', [m.source(sa), m.randc(sb)]))
    for tag, sa, sb, ha, hb in [('ncT', [7, 33], [33, 15], 'T', 'plain'), ('ncS', [7, 33], [33, 15], 'S', 'T'),
                                ('ncB', [2, 5, 9], [2, 9, 3], 'T', 'R'), ('ncOneColT', [600, 128], [128, 1], 'T', 'plain')]:
        m = case('MatMul_%s' % tag)
        m.out(m.node('MatMul', [m.source(sa, ha), m.source(sb, hb)]))
    # MatMul + epilogue (bias add, activation)
    m = case('MatMul_bias_relu')
    y = m.node('MatMul', [m.source([7, 33]), m.randc([33, 17])])
    m.out(m.node('Relu', [m.node('Add', [y, m.randc([17])])]))
    m = case('MatMul_one_col_big_a_epilogue')
    y = m.node('MatMul', [m.source([2, 700, 96]), m.source([2, 96, 1])])
    m.out(m.node('Relu', [m.node('Add', [y, m.randc([700, 1])])]))


def gemm_cases():
    for ta in (0, 1):
        for tb in (0, 1):
            for tag, M, N, K in [('a', 7, 33, 65), ('b', 1, 17, 15), ('c', 31, 5, 3)]:
                for bconst in (False, True):
                    m = case('Gemm_t%d%d_%s_%s' % (ta, tb, tag, 'constB' if bconst else 'inB'))
                    a = m.source([K, M] if ta else [M, K])
                    bs = [N, K] if tb else [K, N]
                    b = m.randc(bs) if bconst else m.source(bs)
                    m.out(m.node('Gemm', [a, b, m.randc([N])], transA=ta, transB=tb))
    M, N, K = 7, 17, 9
    for tag, cshape, alpha, beta in [('noC', None, 1.0, 1.0), ('cN', [N], 1.0, 1.0), ('c1N', [1, N], 1.0, 1.0),
                                     ('cMN', [M, N], 1.0, 1.0), ('cM1', [M, 1], 1.0, 1.0), ('c1', [1], 1.0, 1.0),
                                     ('cscalar', [], 1.0, 1.0), ('alpha', [N], 0.5, 1.0), ('beta2', [N], 1.0, 2.0),
                                     ('beta0', [M, N], 1.0, 0.0), ('ab', [M, 1], -1.5, 0.25), ('c11', [1, 1], 2.0, 3.0)]:
        for cin in (False, True):
            m = case('Gemm_%s_%s' % (tag, 'Cin' if cin else 'Cconst'))
            ins = [m.source([M, K]), m.randc([K, N])]
            if cshape is not None:
                ins.append(m.source(cshape) if cin else m.randc(cshape))
            m.out(m.node('Gemm', ins, alpha=alpha, beta=beta))
    for tag, ha, hb in [('ncA', 'T', 'plain'), ('ncB', 'plain', 'S'), ('ncAB', 'R', 'T')]:
        m = case('Gemm_%s' % tag)
        m.out(m.node('Gemm', [m.source([7, 9], ha), m.source([9, 17], hb), m.randc([17])]))
    m = case('Gemm_transB_relu')
    y = m.node('Gemm', [m.source([5, 33]), m.randc([17, 33]), m.randc([17])], transB=1)
    m.out(m.node('Relu', [y]))


def conv_cases():
    def conv(tag, xs, ws, bias=True, how='plain', **attrs):
        m = case('Conv_%s' % tag)
        ins = [m.source(xs, how), m.randc(ws)]
        if bias:
            ins.append(m.randc([ws[0]]))
        m.out(m.node('Conv', ins, **attrs))
        return m

    conv('1x1', [1, 8, 5, 5], [4, 8, 1, 1])
    conv('1x1_nobias_b2', [2, 3, 7, 7], [16, 3, 1, 1], bias=False)
    conv('1x1_stride2', [1, 4, 9, 9], [5, 4, 1, 1], strides=[2, 2])
    conv('1x1_pads', [1, 4, 5, 5], [3, 4, 1, 1], pads=[1, 1, 1, 1])
    conv('1x1_pad_end', [1, 4, 5, 5], [3, 4, 1, 1], pads=[0, 0, 1, 1])
    conv('3x3', [1, 3, 17, 17], [8, 3, 3, 3], pads=[1, 1, 1, 1])
    conv('3x3_nopad', [2, 3, 15, 15], [5, 3, 3, 3])
    conv('3x3_s2', [1, 3, 17, 17], [8, 3, 3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    conv('3x3_d2', [1, 2, 15, 15], [4, 2, 3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])
    conv('asym_pads', [1, 3, 9, 11], [4, 3, 3, 2], pads=[0, 1, 2, 1], strides=[2, 1])
    conv('rect', [1, 3, 7, 33], [6, 3, 1, 5], pads=[0, 2, 0, 2])
    conv('k5_s3', [1, 2, 17, 17], [3, 2, 5, 5], strides=[3, 3], pads=[2, 2, 2, 2])
    conv('group2', [1, 4, 9, 9], [6, 2, 3, 3], group=2, pads=[1, 1, 1, 1])
    conv('group3_b2', [2, 6, 7, 7], [9, 2, 3, 3], group=3)
    # grouped with at least 8 output channels per group (the cpu's im2col_pw items of (image, group, band)):
    # RegNet's 16 per group on a 7x7 plane, a batch with stride 2, 9 per group (a partial channel block)
    # with a non-square window, and a grouped 1x1 (read in place)
    conv('grouped_regnet', [1, 64, 7, 7], [64, 16, 3, 3], group=4, pads=[1, 1, 1, 1])
    conv('grouped_s2_b2', [2, 48, 15, 13], [48, 8, 3, 3], group=6, pads=[1, 1, 1, 1], strides=[2, 2])
    conv('grouped_cog9_rect', [1, 36, 10, 12], [27, 12, 3, 5], group=3, pads=[0, 2, 1, 1])
    conv('grouped_1x1_b2', [2, 32, 9, 9], [64, 8, 1, 1], group=4, bias=False)
    # 3-D depthwise (MViT's attention pooling: 3x3x3, strides 1x2x2, heads as the batch)
    conv('dw_3d', [2, 8, 4, 9, 10], [8, 1, 3, 3, 3], group=8, pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 2])
    conv('depthwise', [1, 8, 15, 15], [8, 1, 3, 3], group=8, pads=[1, 1, 1, 1])
    conv('depthwise_s2', [1, 16, 17, 17], [16, 1, 3, 3], group=16, pads=[1, 1, 1, 1], strides=[2, 2])
    conv('depthwise_mult', [1, 4, 9, 9], [8, 1, 3, 3], group=4, pads=[1, 1, 1, 1])
    # depthwise windows the cpu's dwk path takes: 5x5 s2 (MobileNetV3), dilated + strided, non-square with
    # asymmetric pads, 7x7 s3, 1-D (audio), a wide ragged row, a batch of two
    conv('dw_5x5_s2', [1, 12, 29, 27], [12, 1, 5, 5], group=12, pads=[2, 2, 2, 2], strides=[2, 2])
    conv('dw_d2_s2', [1, 6, 19, 35], [6, 1, 3, 3], group=6, pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2])
    conv('dw_rect', [1, 5, 13, 19], [5, 1, 3, 7], group=5, pads=[1, 3, 2, 0], strides=[1, 2])
    conv('dw_7x7_s3', [1, 4, 20, 23], [4, 1, 7, 7], group=4, pads=[3, 3, 0, 1], strides=[3, 3])
    conv('dw_1d', [2, 8, 61], [8, 1, 5], group=8, pads=[2, 2], strides=[2])
    conv('dw_1d_d3', [1, 6, 40], [6, 1, 3], group=6, pads=[3, 3], dilations=[3])
    conv('dw_wide', [2, 3, 5, 77], [3, 1, 3, 3], group=3, pads=[1, 1, 1, 1], bias=False)
    m = case('Conv_dw_hardswish', 14)
    y = m.node('Conv', [m.source([1, 10, 14, 14]), m.randc([10, 1, 5, 5]), m.randc([10])], group=10,
               pads=[2, 2, 2, 2])
    m.out(m.node('HardSwish', [y]))
    m = case('Conv_dw_clip', 11)
    y = m.node('Conv', [m.source([1, 9, 11, 13]), m.randc([9, 1, 3, 3]), m.randc([9])], group=9,
               pads=[1, 1, 1, 1], strides=[2, 2])
    m.out(m.node('Clip', [y, m.const(np.array(0.0, np.float32)), m.const(np.array(6.0, np.float32))]))
    conv('1d', [2, 3, 33], [5, 3, 3], pads=[1, 1])
    conv('1d_s2_d2', [1, 4, 31], [6, 4, 3], strides=[2], dilations=[2])
    conv('3d', [1, 2, 5, 6, 7], [3, 2, 3, 3, 3], pads=[1, 1, 1, 1, 1, 1])
    conv('3d_s2', [1, 2, 7, 7, 7], [4, 2, 3, 3, 3], strides=[2, 2, 2])
    # big enough for the blocked im2col over (od, oh) rows, a block ending mid-plane; depth stride,
    # padding and dilation, two images
    conv('3d_blocked', [1, 4, 5, 12, 14], [6, 4, 3, 3, 3], pads=[1, 1, 1, 1, 1, 1])
    conv('3d_blocked_s2_d2', [2, 3, 9, 11, 16], [5, 3, 3, 3, 2], pads=[2, 1, 0, 2, 1, 1], strides=[2, 1, 1],
         dilations=[2, 1, 2])
    conv('same_upper', [1, 3, 10, 10], [4, 3, 3, 3], auto_pad='SAME_UPPER', strides=[2, 2])
    # taps that read only padding (simplify trims them): DeepLab's ASPP at a dilation past the map, on one
    # axis or both, a stride, SAME padding, 1-D
    conv('dil_trim', [1, 3, 6, 7], [4, 3, 3, 3], pads=[5, 5, 5, 5], dilations=[5, 5])
    conv('dil_trim_h', [1, 2, 5, 9], [3, 2, 3, 3], pads=[6, 1, 6, 1], dilations=[6, 1])
    conv('dil_trim_s2', [1, 2, 8, 8], [3, 2, 5, 3], pads=[8, 1, 8, 1], strides=[2, 1], dilations=[4, 2])
    conv('dil_trim_same', [1, 2, 4, 4], [2, 2, 3, 3], auto_pad='SAME_UPPER', dilations=[7, 7])
    conv('dil_trim_1d', [1, 3, 5], [2, 3, 5], pads=[8, 8], dilations=[4])
    # dilated taps that read padding for about half the outputs, channels enough for the per-tap GEMMs
    # (cpu_conv_taps.c, chosen at most 70% real products): whole-row taps read in place, the others gathered;
    # asymmetric padding
    conv('dil_taps', [1, 64, 13, 13], [32, 64, 3, 3], pads=[6, 6, 6, 6], dilations=[6, 6])
    conv('dil_taps_asym', [1, 64, 11, 12], [40, 64, 3, 3], pads=[4, 5, 3, 2], dilations=[4, 5])
    conv('same_lower', [1, 3, 10, 10], [4, 3, 3, 3], auto_pad='SAME_LOWER', strides=[2, 2])
    conv('same_upper_s1', [1, 3, 9, 9], [4, 3, 4, 4], auto_pad='SAME_UPPER')
    conv('same_lower_s1', [1, 3, 9, 9], [4, 3, 4, 4], auto_pad='SAME_LOWER')
    conv('valid', [1, 3, 9, 9], [4, 3, 3, 3], auto_pad='VALID')
    conv('kernel_shape', [1, 3, 9, 9], [4, 3, 3, 3], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    conv('ncT', [1, 3, 9, 11], [4, 3, 3, 3], how='T', pads=[1, 1, 1, 1])
    conv('ncS', [1, 3, 9, 9], [4, 3, 3, 3], how='S')
    conv('1x1_ncR', [2, 4, 5, 5], [6, 4, 1, 1], how='R')
    # weights as a graph input
    m = case('Conv_w_input')
    m.out(m.node('Conv', [m.source([1, 3, 9, 9]), m.source([4, 3, 3, 3]), m.source([4])], pads=[1, 1, 1, 1]))
    # conv + bias + relu epilogue
    m = case('Conv_relu')
    y = m.node('Conv', [m.source([1, 3, 9, 9]), m.randc([4, 3, 3, 3]), m.randc([4])], pads=[1, 1, 1, 1])
    m.out(m.node('Relu', [y]))
    m = case('Conv_add_residual')
    x = m.source([1, 4, 7, 7])
    y = m.node('Conv', [x, m.randc([4, 4, 3, 3])], pads=[1, 1, 1, 1])
    m.out(m.node('Add', [y, x]))


def conv_transpose_cases():
    # ConvTranspose as a compute definition (lower.c compute_conv_transpose: the phase-decomposed gather
    # with dilation 1, the masked one otherwise) and, on the cpu, as kiln_rt.conv's SGEMM + col2im.
    def convt(tag, xs, ws, bias=True, how='plain', **attrs):
        m = case('ConvTranspose_%s' % tag)
        ins = [m.source(xs, how), m.randc(ws)]
        if bias:
            ins.append(m.randc([ws[1] * attrs.get('group', 1)]))
        m.out(m.node('ConvTranspose', ins, **attrs))
        return m

    convt('2x2_s2', [1, 8, 7, 9], [8, 4, 2, 2], strides=[2, 2])
    convt('3x3', [2, 3, 5, 5], [3, 5, 3, 3], bias=False)
    convt('3x3_s2_pads', [1, 4, 6, 6], [4, 3, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    convt('3x3_s2_outpad', [1, 4, 6, 7], [4, 3, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    convt('4x4_s2_p1', [1, 6, 8, 8], [6, 4, 4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
    convt('k3_s3', [1, 2, 4, 5], [2, 3, 3, 3], strides=[3, 3])
    convt('k2_s3', [1, 2, 4, 5], [2, 3, 2, 2], strides=[3, 3])
    convt('d2', [1, 3, 5, 5], [3, 2, 3, 3], dilations=[2, 2])
    convt('d2_s2_pads', [1, 3, 5, 6], [3, 2, 3, 3], dilations=[2, 2], strides=[2, 2], pads=[1, 2, 0, 1])
    convt('rect', [1, 3, 5, 9], [3, 4, 1, 5], strides=[1, 2], pads=[0, 2, 0, 1])
    convt('group2', [1, 4, 5, 5], [4, 3, 3, 3], group=2, strides=[2, 2])
    convt('depthwise', [1, 6, 7, 7], [6, 1, 4, 4], group=6, strides=[2, 2], pads=[1, 1, 1, 1])
    convt('1d', [2, 4, 17], [4, 3, 5], strides=[2], pads=[2, 2])
    convt('1d_s4', [1, 3, 9], [3, 2, 8], strides=[4], pads=[2, 2])
    convt('3d', [1, 2, 3, 4, 5], [2, 3, 2, 2, 2], strides=[2, 2, 2])
    convt('output_shape', [1, 3, 5, 5], [3, 2, 3, 3], strides=[2, 2], output_shape=[10, 10])
    convt('output_shape_big', [1, 3, 5, 5], [3, 2, 3, 3], strides=[2, 2], output_shape=[13, 12])
    convt('same_upper', [1, 3, 5, 6], [3, 2, 3, 3], strides=[2, 2], auto_pad='SAME_UPPER')
    convt('same_lower', [1, 3, 5, 6], [3, 2, 4, 4], strides=[2, 2], auto_pad='SAME_LOWER')
    convt('ncT', [1, 4, 6, 5], [4, 2, 2, 2], how='T', strides=[2, 2])
    convt('ncS', [1, 3, 6, 6], [3, 2, 3, 3], how='S', strides=[2, 2], pads=[1, 1, 1, 1])
    # columns of 64 MB: col2im in chunks of input rows (cpu_conv_transpose.c, CT_CHUNK_BYTES 16 MB)
    convt('chunked', [1, 16, 128, 128], [16, 64, 4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
    m = case('ConvTranspose_w_input')
    m.out(m.node('ConvTranspose', [m.source([1, 3, 4, 4]), m.source([3, 2, 3, 3]), m.source([2])], strides=[2, 2]))
    # The call's own epilogues: relu (generated), residual + clip (native), sigmoid (generated).
    m = case('ConvTranspose_relu')
    y = m.node('ConvTranspose', [m.source([1, 4, 5, 5]), m.randc([4, 3, 2, 2]), m.randc([3])], strides=[2, 2])
    m.out(m.node('Relu', [y]))
    m = case('ConvTranspose_residual_clip', 11)
    y = m.node('ConvTranspose', [m.source([2, 4, 5, 5]), m.randc([4, 3, 2, 2]), m.randc([3])], strides=[2, 2])
    y = m.node('Add', [y, m.source([2, 3, 10, 10])])
    m.out(m.node('Clip', [y, m.const(np.float32(-0.5)), m.const(np.float32(0.5))]))
    m = case('ConvTranspose_sigmoid_scale')
    y = m.node('ConvTranspose', [m.source([1, 5, 4, 4]), m.randc([5, 2, 3, 3])], strides=[2, 2], pads=[1, 1, 1, 1])
    m.out(m.node('Mul', [m.node('Sigmoid', [y]), m.randc([2, 1, 1])]))
    # Pad (lower.c compute_pad): constant (value, negative pads that crop), reflect, edge, the attribute
    # form (opset 2), non-contiguous input, and a Pad feeding a Conv. (Pad-18's axes: the ONNX node tests;
    # onnx 1.13's shape inference rejects them here.)
    m = case('Pad_constant', 13)
    m.out(m.node('Pad', [m.source([2, 3, 5, 7]), m.const(ints([0, 0, 1, 2, 0, 1, 3, 1])),
                         m.const(np.float32(1.5))]))
    m = case('Pad_constant_crop', 13)
    m.out(m.node('Pad', [m.source([3, 9, 8]), m.const(ints([1, -2, 0, 0, 3, -1]))]))
    m = case('Pad_reflect', 13)
    m.out(m.node('Pad', [m.source([1, 2, 6, 5]), m.const(ints([0, 0, 3, 4, 0, 0, 5, 2]))], mode='reflect'))
    m = case('Pad_edge', 13)
    m.out(m.node('Pad', [m.source([2, 17]), m.const(ints([2, 5, 1, 19]))], mode='edge'))
    m = case('Pad_attr', 2)
    m.out(m.node('Pad', [m.source([3, 4])], pads=[1, 0, 2, 3], value=0.25))
    m = case('Pad_reflect_ncT', 13)
    m.out(m.node('Pad', [m.source([1, 3, 5, 6], 'T'), m.const(ints([0, 0, 2, 2, 0, 0, 2, 2]))], mode='reflect'))
    m = case('Pad_conv', 13)
    y = m.node('Pad', [m.source([1, 3, 8, 8]), m.const(ints([0, 0, 1, 1, 0, 0, 1, 1]))], mode='reflect')
    m.out(m.node('Relu', [m.node('Conv', [y, m.randc([4, 3, 3, 3]), m.randc([4])])]))
    # Resize / Upsample with constant scales or sizes (passes/resample_tables.c -> kiln.Resample, lower.c
    # compute_resample): every mode, the coordinate transformations, sizes, roi with extrapolation, the
    # legacy forms, downsampling, and a resize feeding an Add (fused into its consumer).
    empty = np.zeros([0], np.float32)

    def resize(tag, xs, scales=None, sizes=None, roi=None, opset=13, how='plain', **attrs):
        m = case('Resize_%s' % tag, opset)
        ins = [m.source(xs, how)]
        if opset >= 11:
            ins += [m.const(np.array(roi, np.float32) if roi is not None else empty),
                    m.const(np.array(scales, np.float32) if scales is not None else empty)]
            if sizes is not None:
                ins.append(m.const(ints(sizes)))
        else:
            ins.append(m.const(np.array(scales, np.float32)))
        m.out(m.node('Resize', ins, **attrs))
        return m

    resize('nearest_x2', [1, 3, 5, 7], scales=[1, 1, 2, 2])
    resize('nearest_asym_floor', [1, 2, 6, 5], scales=[1, 1, 2, 3], coordinate_transformation_mode='asymmetric',
           nearest_mode='floor')
    resize('nearest_ceil_down', [2, 3, 9, 8], scales=[1, 1, 0.5, 0.6], nearest_mode='ceil')
    resize('nearest_sizes', [1, 3, 7, 9], sizes=[1, 3, 13, 4], coordinate_transformation_mode='tf_half_pixel_for_nn')
    resize('linear_half_pixel', [1, 3, 6, 7], scales=[1, 1, 2, 2], mode='linear')
    resize('linear_align', [2, 2, 5, 6], sizes=[2, 2, 11, 9], mode='linear', coordinate_transformation_mode='align_corners')
    resize('linear_pytorch', [1, 4, 7, 5], scales=[1, 1, 1.5, 2.5], mode='linear',
           coordinate_transformation_mode='pytorch_half_pixel')
    resize('linear_down', [1, 3, 16, 15], scales=[1, 1, 0.5, 0.4], mode='linear')
    resize('linear_1d', [2, 3, 17], scales=[1, 1, 3], mode='linear', coordinate_transformation_mode='asymmetric')
    resize('linear_3d', [1, 2, 3, 4, 5], scales=[1, 1, 2, 2, 2], mode='linear')
    resize('cubic', [1, 2, 6, 7], scales=[1, 1, 2, 1.5], mode='cubic')
    resize('cubic_exclude', [1, 2, 5, 5], scales=[1, 1, 2.5, 2], mode='cubic', exclude_outside=1, cubic_coeff_a=-0.5)
    resize('crop_extrapolate', [1, 2, 8, 8], sizes=[1, 2, 5, 6], roi=[0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], mode='linear',
           coordinate_transformation_mode='tf_crop_and_resize', extrapolation_value=-3.5)
    resize('nearest_ncT', [1, 3, 5, 4], scales=[1, 1, 2, 2], how='T')
    resize('legacy10', [1, 2, 4, 5], scales=[1, 1, 2, 1.5], opset=10)
    resize('legacy10_linear', [1, 2, 4, 5], scales=[1, 1, 0.5, 2], opset=10, mode='linear')
    m = case('Upsample_9', 9)
    m.out(m.node('Upsample', [m.source([1, 3, 4, 6]), m.const(np.array([1, 1, 2, 2], np.float32))], mode='nearest'))
    m = case('Resize_add', 13)
    y = m.node('Resize', [m.source([1, 4, 5, 6]), m.const(empty), m.const(np.array([1, 1, 2, 2], np.float32))],
               mode='linear')
    m.out(m.node('Relu', [m.node('Add', [y, m.source([1, 4, 10, 12])])]))
    # GridSample (lower.c compute_grid_sample: taps at data-dependent, clamped indices): every mode x padding x
    # align_corners on random shapes; grids scaled so that some samples fall outside [-1, 1] (far outside for
    # reflection's repeated folds), a strided image, a grid computed in the model, images of one row/column.
    for mode in ('bilinear', 'nearest', 'bicubic'):
        for pad in ('zeros', 'border', 'reflection'):
            for align in (0, 1):
                m = case('GridSample_%s_%s_a%d' % (mode, pad, align), 16)
                n, c = m.rng.randint(1, 3), m.rng.randint(1, 5)
                h, w, ho, wo = (int(v) for v in m.rng.randint(2, 12, 4))
                scale = np.float32(3.5 if pad == 'reflection' else 1.3)
                grid = m.node('Mul', [m.source([n, ho, wo, 2]), m.const(scale)])
                m.out(m.node('GridSample', [m.source([n, c, h, w], 'S' if align else 'plain'), grid], mode=mode,
                             padding_mode=pad, align_corners=align))
    for tag, hw in (('row', [1, 9]), ('col', [7, 1]), ('pixel', [1, 1])):
        for mode in ('bilinear', 'bicubic'):
            for align in (0, 1):
                m = case('GridSample_%s_%s_reflection_a%d' % (tag, mode, align), 16)
                m.out(m.node('GridSample', [m.source([1, 2] + hw), m.source([1, 5, 6, 2])], mode=mode,
                             padding_mode='reflection', align_corners=align))
    m = case('GridSample_default_tanh_grid', 16)
    grid = m.node('Tanh', [m.node('Transpose', [m.source([1, 2, 7, 9])], perm=[0, 2, 3, 1])])
    m.out(m.node('Relu', [m.node('GridSample', [m.source([1, 3, 8, 10]), grid])]))
    # BatchNormalization that folds into no producer (passes/fold_batchnorm.c: Mul + Add): after a
    # ConvTranspose, after a Relu, on a graph input of rank 3 (1-D) and rank 2.
    def bn_params(m, c):
        return [m.const((m.rng.standard_normal(c) * 0.5 + 1).astype(np.float32)), m.randc([c]), m.randc([c]),
                m.const((m.rng.random_sample(c) + 0.5).astype(np.float32))]
    m = case('BatchNorm_after_convT')
    y = m.node('ConvTranspose', [m.source([1, 4, 5, 5]), m.randc([4, 3, 2, 2])], strides=[2, 2])
    m.out(m.node('Relu', [m.node('BatchNormalization', [y] + bn_params(m, 3), epsilon=1e-3)]))
    m = case('BatchNorm_after_relu')
    m.out(m.node('BatchNormalization', [m.node('Relu', [m.source([2, 6, 7, 5])])] + bn_params(m, 6)))
    m = case('BatchNorm_input_1d')
    m.out(m.node('BatchNormalization', [m.source([3, 5, 17])] + bn_params(m, 5)))
    m = case('BatchNorm_input_2d')
    m.out(m.node('BatchNormalization', [m.source([4, 33])] + bn_params(m, 33)))


def dtype_cases():
    # Integer and bool graphs compiled (lower.c: Cast with ref's saturate-then-wrap rule, comparisons, bool
    # logic, IsNaN/IsInf, Where, integer arithmetic, movement of any dtype). Data comes from the f32 sources
    # through a Cast, so the casts themselves are tested too.
    # Named dtype_* (run_diff.sh: mixed on vulkan, whose GLSL stores f32 only).
    I64, I32, I8, U8 = TensorProto.INT64, TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8

    def dcase(name, opset=13):
        return case('dtype_' + name, opset)

    def ints_of(m, shape, scale, to=I64, how='plain'):
        return m.node('Cast', [m.node('Mul', [m.source(shape, how), m.const(np.float32(scale))])], to=to)

    for tag, to in (('i64', I64), ('i32', I32), ('i8', I8), ('u8', U8), ('bool', B)):
        m = dcase('Cast_f32_%s' % tag)
        m.out(ints_of(m, [3, 17], 300.0, to))     # beyond int8/uint8: saturate to int64, then wrap
    # Integer ReduceMin/ReduceMax compiled (lower.c: exact in any order): int64 and int32, one axis and all,
    # keepdims both ways, extremes past int32 in the int64 one.
    for tag, to, scale in (('i64', I64, 3e9), ('i32', I32, 1e6), ('u8', U8, 100.0)):
        m = dcase('ReduceMinMax_%s' % tag)
        x = ints_of(m, [3, 5, 37], scale, to)
        m.out(m.node('ReduceMin', [x], axes=[2], keepdims=0))
        m.out(m.node('ReduceMax', [x], axes=[1], keepdims=1))
        m.out(m.node('ReduceMin', [x], keepdims=1))
    # Integer ReduceSum/ReduceProd wrap as ref's do (render_c.c: in the unsigned type): products past 2^63
    # and past 2^31 (int8 is not a type ONNX's ReduceProd takes).
    for tag, to, scale in (('i64', I64, 3e6), ('i32', I32, 5e4)):
        m = dcase('ReduceSumProd_%s' % tag)
        x = ints_of(m, [4, 6, 9], scale, to)
        m.out(m.node('ReduceProd', [x], axes=[2], keepdims=0))
        m.out(m.node('ReduceSum', [x, m.const(ints([1]))], keepdims=1))
        m.out(m.node('ReduceProd', [x], keepdims=0))
    # DequantizeLinear per the last axis (a MatMul weight per output column: ops/quant.c's row path) of
    # int8 and uint8, zero points per column, against the compiled form.
    for tag, to, zdt in (('i8', I8, np.int8), ('u8', U8, np.uint8)):
        m = dcase('DQ_last_axis_%s' % tag)
        x = ints_of(m, [6, 11], 100.0, to)
        zp = m.const(m.rng.randint(0, 20, [11]).astype(zdt))
        m.out(m.node('DequantizeLinear', [x, m.const(m.rng.uniform(0.01, 0.1, [11]).astype(np.float32)), zp], axis=1))
    m = dcase('Cast_nan_inf_i64')                  # NaN -> 0, +-inf saturate
    m.out(m.node('Cast', [m.node('Div', [m.node('Log', [m.source([5, 9])]), m.source([5, 9])])], to=I64))
    m = dcase('Cast_i64_f32_chain')
    m.out(m.node('Cast', [m.node('Add', [ints_of(m, [4, 33], 1e6), ints_of(m, [4, 33], 50.0)])],
                 to=TensorProto.FLOAT))
    m = dcase('Cast_bool_f32_mask')              # the attention-mask pattern: (ids == 0) * -10000
    eq = m.node('Equal', [ints_of(m, [2, 1, 1, 31], 2.0), m.const(np.int64(0))])
    m.out(m.node('Mul', [m.node('Cast', [eq], to=TensorProto.FLOAT), m.const(np.float32(-10000.0))]))
    for op in ('Less', 'Greater', 'LessOrEqual', 'GreaterOrEqual', 'Equal'):
        m = dcase('%s_f32' % op)
        m.out(m.node(op, [m.source([3, 17]), m.source([17])]))
        m = dcase('%s_i32' % op)
        m.out(m.node(op, [ints_of(m, [4, 9], 3.0, I32), ints_of(m, [4, 1], 3.0, I32)]))
    for op in ('And', 'Or', 'Xor'):
        m = dcase('%s_bool' % op)
        m.out(m.node(op, [m.node('Less', [m.source([5, 7]), m.const(np.float32(0.2))]),
                          m.node('Greater', [m.source([7]), m.const(np.float32(-0.3))])]))
    m = dcase('Not_bool')
    m.out(m.node('Not', [m.node('Less', [m.source([2, 3, 17], 'T'), m.const(np.float32(0))])]))
    m = dcase('IsNaN_f32')
    m.out(m.node('IsNaN', [m.node('Sqrt', [m.source([6, 11])])]))
    m = dcase('IsInf_f32', 10)
    inf = m.node('Div', [m.source([6, 11]), m.node('Floor', [m.source([6, 11])])])
    m.out(m.node('IsInf', [inf]))
    m = dcase('IsInf_positive_only', 10)
    inf = m.node('Div', [m.source([6, 11]), m.node('Floor', [m.source([6, 11])])])
    m.out(m.node('IsInf', [inf], detect_negative=0))
    m = dcase('Where_i64')
    m.out(m.node('Where', [m.node('Less', [m.source([3, 17]), m.const(np.float32(0))]), ints_of(m, [3, 17], 7.0),
                           ints_of(m, [17], 100.0)]))
    for op in ('Add', 'Sub', 'Mul', 'Max', 'Min'):
        m = dcase('%s_i64' % op)
        m.out(m.node(op, [ints_of(m, [3, 17], 1000.0), ints_of(m, [1, 17], 1000.0)]))
    for op in ('Neg', 'Abs', 'Relu'):
        m = dcase('%s_i32' % op, 14)
        m.out(m.node(op, [ints_of(m, [3, 33], 50.0, I32)]))
    m = dcase('Transpose_i64')
    m.out(m.node('Transpose', [ints_of(m, [2, 3, 5], 10.0)], perm=[2, 0, 1]))
    m = dcase('Concat_slice_i64')
    c = m.node('Concat', [ints_of(m, [2, 5], 10.0), ints_of(m, [3, 5], 10.0)], axis=0)
    m.out(m.node('Slice', [c, m.const(ints([1, 4])), m.const(ints([5, 0])), m.const(ints([0, 1])),
                           m.const(ints([2, -1]))]))
    m = dcase('Expand_reshape_bool')
    b = m.node('Less', [m.source([3, 1]), m.const(np.float32(0))])
    m.out(m.node('Reshape', [m.node('Expand', [b, m.const(ints([2, 3, 4]))]), m.const(ints([6, 4]))]))
    # LRN (odd and even sizes, 3-D), ConstantOfShape (f32 into an Add; int64 as a mask's source; above the
    # 64 KB that fold-constants folds by itself, so the compute definition runs)
    m = case('LRN_5')
    m.out(m.node('LRN', [m.source([2, 7, 5, 6])], size=5, alpha=0.001, beta=0.75, bias=2.0))
    m = case('LRN_4_3d')
    m.out(m.node('LRN', [m.source([1, 9, 17], 'T')], size=4))
    m = case('ConstantOfShape_add')
    fill = m.node('ConstantOfShape', [m.const(ints([130, 129]))], value=helper.make_tensor('v', F, [1], [0.75]))
    m.out(m.node('Add', [m.source([130, 129]), fill]))
    m = dcase('ConstantOfShape_i64')
    fill = m.node('ConstantOfShape', [m.const(ints([90, 100]))], value=helper.make_tensor('v', I64, [1], [3]))
    m.out(m.node('Mul', [fill, ints_of(m, [90, 100], 10.0)]))
    # QuantizeLinear / DequantizeLinear compiled (ref's rounding, saturation and NaN -> zero point): per
    # tensor u8, per axis i8, no zero point, int32 (a bias), a Q -> DQ pair between two ops as a QDQ graph has.
    m = dcase('QDQ_u8_tensor')
    q = m.node('QuantizeLinear', [m.node('Mul', [m.source([3, 17]), m.const(np.float32(40.0))]),
                                  m.const(np.float32(0.37)), m.const(np.uint8(120))])
    m.out(q)
    m = dcase('QDQ_u8_roundtrip')
    q = m.node('QuantizeLinear', [m.source([3, 17]), m.const(np.float32(0.02)), m.const(np.uint8(128))])
    m.out(m.node('Relu', [m.node('DequantizeLinear', [q, m.const(np.float32(0.02)), m.const(np.uint8(128))])]))
    m = dcase('QDQ_i8_axis1')
    sc = np.array([0.01, 0.02, 0.05, 0.1, 0.004], np.float32)
    zp = np.array([0, -3, 7, 1, -128], np.int8)
    q = m.node('QuantizeLinear', [m.node('Sqrt', [m.source([2, 5, 7])]), m.const(sc), m.const(zp)], axis=1)
    m.out(m.node('DequantizeLinear', [q, m.const(sc), m.const(zp)], axis=1))
    m = dcase('QDQ_i8_axis_last_nozp')
    q = m.node('QuantizeLinear', [m.source([4, 6]), m.const(np.linspace(0.01, 0.05, 6).astype(np.float32)),
                                  m.const(np.zeros(6, np.int8))], axis=-1)
    m.out(m.node('DequantizeLinear', [q, m.const(np.linspace(0.01, 0.05, 6).astype(np.float32))], axis=-1))
    # QDQ convolutions as quantize_static writes them: DequantizeLinear of a quantized input (u8, zero point
    # 0 as after a Relu: B's values beyond int8, the unsigned-B quads; or 128) and of int8 weights (per
    # channel or per tensor) into a Conv with a bias and a Relu; and the input's MaxPool quantized again
    # (a u8 output: the pool routine's scratch plane). passes/qdq_integer.c makes the Conv a ConvInteger where the cpu has VNNI
    # (KILN_QDQ_INTEGER=1 anywhere; run_diff.sh runs these both ways); the outputs are dequantized
    # convolutions, which the integer path computes exactly up to the float scale.
    def qdq_conv(name, xs, ws, x_zp, per_channel, group=1, **attrs):
        m = dcase(name)
        xq = m.node('QuantizeLinear', [m.node('Mul', [m.node('Abs', [m.source(xs)]), m.const(np.float32(30.0))])
                                       if x_zp == 0 else m.source(xs), m.const(np.float32(0.05)), m.const(np.uint8(x_zp))])
        x = m.node('DequantizeLinear', [xq, m.const(np.float32(0.05)), m.const(np.uint8(x_zp))])
        wq = m.rng.randint(-128, 128, ws).astype(np.int8)
        wsc = (np.linspace(0.002, 0.01, ws[0]) if per_channel else np.array(0.004)).astype(np.float32)
        w = m.node('DequantizeLinear', [m.const(wq), m.const(wsc), m.const(np.zeros(wsc.shape, np.int8))],
                   **({'axis': 0} if per_channel else {}))
        m.out(m.node('Relu', [m.node('Conv', [x, w, m.randc([ws[0]])], group=group, **attrs)]))
        # the input's MaxPool, requantized with its own parameters: exact on every path (no sum to round)
        p = m.node('MaxPool', [x], kernel_shape=[2, 2], strides=[2, 2])
        m.out(m.node('QuantizeLinear', [p, m.const(np.float32(0.05)), m.const(np.uint8(x_zp))]))
    qdq_conv('QDQ_conv_relu_zp0', [1, 8, 12, 12], [16, 8, 3, 3], 0, True, pads=[1, 1, 1, 1])
    qdq_conv('QDQ_conv_zp128_tensor', [1, 5, 11, 13], [7, 5, 3, 3], 128, False, strides=[2, 2], pads=[1, 0, 1, 2])
    qdq_conv('QDQ_conv_1x1_zp0', [2, 24, 9, 9], [12, 24, 1, 1], 0, True)
    qdq_conv('QDQ_conv_depthwise', [1, 6, 10, 10], [6, 1, 3, 3], 0, True, group=6, pads=[1, 1, 1, 1])
    # MatMulInteger (int32 sums of zero-point-shifted int8/uint8 products): 2-D, batched with broadcast, no
    # zero points, a dynamic-quantization chain (QuantizeLinear -> MatMulInteger -> Cast -> Mul)
    m = dcase('MatMulInteger_u8_i8')
    a = m.node('QuantizeLinear', [m.source([5, 33]), m.const(np.float32(0.02)), m.const(np.uint8(131))])
    m.out(m.node('MatMulInteger', [a, m.const((m.rng.randint(-128, 128, [33, 7])).astype(np.int8)),
                                   m.const(np.uint8(131)), m.const(np.int8(3))]))
    m = dcase('MatMulInteger_batched_nozp')
    a = m.node('QuantizeLinear', [m.source([2, 3, 4, 17]), m.const(np.float32(0.05)), m.const(np.int8(0))])
    b = m.node('QuantizeLinear', [m.source([3, 17, 5]), m.const(np.float32(0.05)), m.const(np.int8(0))])
    m.out(m.node('MatMulInteger', [a, b]))
    m = dcase('MatMulInteger_dynamic_chain')
    a = m.node('QuantizeLinear', [m.source([4, 64]), m.const(np.float32(0.03)), m.const(np.uint8(128))])
    y = m.node('MatMulInteger', [a, m.const((m.rng.randint(-127, 128, [64, 32])).astype(np.int8)),
                                 m.const(np.uint8(128))])
    m.out(m.node('Mul', [m.node('Cast', [y], to=TensorProto.FLOAT), m.const(np.float32(0.03 * 0.01))]))
    def dql(m, x):
        outs = [m.fresh('t') for _ in range(3)]
        m.nodes.append(helper.make_node('DynamicQuantizeLinear', [x], outs, name=m.fresh('n_DQL_')))
        return outs
    # MatMulInteger on kiln_rt.igemm (at least 8192 multiply-adds, codegen/schedule_gemm.c): u8 x s8 with odd k
    # and zero points read from constants, s8 x u8 batched over a broadcast B, a variable B with its zero
    # point computed at run time, and the dynamic-int8 chain whose float dequantization and bias are the
    # GEMM's epilogue.
    m = dcase('MatMulInteger_igemm_u8_i8')
    a = m.node('QuantizeLinear', [m.source([37, 71]), m.const(np.float32(0.02)), m.const(np.uint8(131))])
    m.out(m.node('MatMulInteger', [a, m.const((m.rng.randint(-128, 128, [71, 45])).astype(np.int8)),
                                   m.const(np.uint8(131)), m.const(np.int8(-3))]))
    m = dcase('MatMulInteger_igemm_i8_u8_batched')
    a = m.node('QuantizeLinear', [m.source([2, 20, 33]), m.const(np.float32(0.01)), m.const(np.int8(-3))])
    m.out(m.node('MatMulInteger', [a, m.const((m.rng.randint(0, 256, [33, 50])).astype(np.uint8)),
                                   m.const(np.int8(-3)), m.const(np.uint8(128))]))
    m = dcase('MatMulInteger_igemm_variable_b')
    a = m.node('QuantizeLinear', [m.source([19, 40]), m.const(np.float32(0.02)), m.const(np.uint8(128))])
    b, bs, bz = dql(m, m.source([40, 33]))
    m.out(m.node('MatMulInteger', [a, b, m.const(np.uint8(128)), bz]))
    m = dcase('MatMulInteger_igemm_dynamic_chain')
    y, ys, yz = dql(m, m.source([24, 96]))
    w = m.const(m.rng.randint(-127, 128, [96, 64]).astype(np.int8))
    acc = m.node('MatMulInteger', [y, w, yz, m.const(np.int8(0))])
    deq = m.node('Mul', [m.node('Cast', [acc], to=TensorProto.FLOAT), m.node('Mul', [ys, m.const(np.float32(0.01))])])
    m.out(m.node('Relu', [m.node('Add', [deq, m.const(np.linspace(-1, 1, 64).astype(np.float32))])]))
    # ConvInteger (int32 sums of zero-point-shifted products; padding holds the x zero point): padded 3x3 with
    # zero points, per-channel w zero points, depthwise strided, no zero points, 1-D
    def qconv(tag, xs, ws, xzp=None, wzp=None, **attrs):
        m = dcase('ConvInteger_%s' % tag)
        xq = m.node('QuantizeLinear', [m.source(xs), m.const(np.float32(0.02)), m.const(np.uint8(xzp or 0))])
        ins = [xq, m.const(m.rng.randint(0, 256, ws).astype(np.uint8))]
        if xzp is not None or wzp is not None:
            ins.append(m.const(np.uint8(xzp or 0)))
        if wzp is not None:
            ins.append(m.const(np.asarray(wzp, np.uint8)))
        m.out(m.node('ConvInteger', ins, **attrs))
    qconv('3x3_pads_zp', [1, 3, 9, 8], [4, 3, 3, 3], xzp=128, wzp=120, pads=[1, 1, 1, 1])
    qconv('per_channel', [2, 4, 7, 7], [5, 4, 3, 3], xzp=100, wzp=[10, 128, 0, 255, 77])
    qconv('depthwise_s2', [1, 6, 9, 9], [6, 1, 3, 3], xzp=128, wzp=128, group=6, strides=[2, 2], pads=[1, 1, 1, 1])
    qconv('nozp_1x1', [1, 8, 5, 5], [3, 8, 1, 1])
    qconv('1d', [1, 3, 17], [4, 3, 5], xzp=7, pads=[2, 2])
    # ConvInteger on kiln_rt.conv's integer form (im2col + kiln_igemm): int8 x and w with negative zero
    # points and padding, grouped and dilated, and the dynamic-int8 chain (Cast, scale, bias, Relu as the
    # GEMM's epilogue)
    m = dcase('ConvInteger_igemm_s8_pads')
    xq = m.node('QuantizeLinear', [m.source([2, 5, 11, 10]), m.const(np.float32(0.02)), m.const(np.int8(-3))])
    m.out(m.node('ConvInteger', [xq, m.const(m.rng.randint(-128, 128, [7, 5, 3, 3]).astype(np.int8)),
                                 m.const(np.int8(-3)), m.const(np.int8(5))], pads=[1, 2, 1, 0], strides=[1, 2]))
    m = dcase('ConvInteger_igemm_grouped_dilated')
    xq = m.node('QuantizeLinear', [m.source([1, 6, 12, 12]), m.const(np.float32(0.02)), m.const(np.uint8(128))])
    m.out(m.node('ConvInteger', [xq, m.const(m.rng.randint(0, 256, [9, 2, 3, 3]).astype(np.uint8)),
                                 m.const(np.uint8(128)), m.const(np.arange(9).astype(np.uint8) * 20)],
                 group=3, dilations=[2, 2], pads=[2, 2, 2, 2]))
    m = dcase('ConvInteger_igemm_requantized')  # a uint8 output: the sums in the runtime's scratch
    xq = m.node('QuantizeLinear', [m.source([1, 8, 10, 10]), m.const(np.float32(0.02)), m.const(np.uint8(128))])
    acc = m.node('ConvInteger', [xq, m.const(m.rng.randint(-128, 128, [12, 8, 3, 3]).astype(np.int8)),
                                 m.const(np.uint8(128)), m.const(np.int8(0))], pads=[1, 1, 1, 1])
    deq = m.node('Mul', [m.node('Cast', [acc], to=TensorProto.FLOAT), m.const(np.float32(0.02 * 0.01))])
    m.out(m.node('QuantizeLinear', [m.node('Relu', [deq]), m.const(np.float32(0.01)), m.const(np.uint8(0))]))
    m = dcase('ConvInteger_igemm_dynamic_chain')
    xq, xs, xz = dql(m, m.source([1, 16, 9, 9]))
    acc = m.node('ConvInteger', [xq, m.const(m.rng.randint(-127, 128, [24, 16, 1, 1]).astype(np.int8)), xz])
    deq = m.node('Mul', [m.node('Cast', [acc], to=TensorProto.FLOAT), m.node('Mul', [xs, m.const(np.float32(0.01))])])
    bias = m.const(np.linspace(-1, 1, 24).astype(np.float32).reshape(24, 1, 1))
    m.out(m.node('Relu', [m.node('Add', [deq, bias])]))
    # DynamicQuantizeLinear (passes/decompose.c: single-output ops): its three outputs, an all-zero input
    # (scale 0: the zero point everywhere), NaN among the values, and the dynamic-int8 MatMul chain.
    m = dcase('DQL_outputs')
    for o in dql(m, m.node('Mul', [m.source([5, 33]), m.const(np.float32(3.0))])):
        m.out(o)
    m = dcase('DQL_positive')  # the range still starts at 0 (ONNX's min_adjusted/max_adjusted)
    for o in dql(m, m.node('Add', [m.node('Abs', [m.source([3, 11])]), m.const(np.float32(0.5))])):
        m.out(o)
    m = dcase('DQL_negative')
    for o in dql(m, m.node('Sub', [m.const(np.float32(-0.25)), m.node('Abs', [m.source([3, 11])])])):
        m.out(o)
    # Its range read through the Transpose and Reshape in front (attention's heads, decompose.c): the
    # reductions read the source in place; the quantized values keep the permuted order.
    m = dcase('DQL_after_transpose')
    t = m.node('Transpose', [m.node('Mul', [m.source([2, 16, 4, 8]), m.const(np.float32(2.0))])], perm=[0, 2, 1, 3])
    for o in dql(m, t):
        m.out(o)
    m = dcase('DQL_after_reshape_transpose')
    r = m.node('Reshape', [m.node('Transpose', [m.source([6, 20])], perm=[1, 0]), m.const(np.array([4, 30], np.int64))])
    for o in dql(m, r):
        m.out(o)
    # Twenty of them side by side over 75000 elements: under a driver's loop limit (lavapipe's, or the
    # smaller one of ctest diff.vulkan_loop_limit) each one's whole-tensor range can be past what a
    # thread may loop, a group the GLSL renderer refuses, and the plan is rebuilt once per refusal: past
    # the 16 rebuilds plan.c allowed, it returned a freed status (a double free).
    m = dcase('DQL_many')
    for i in range(20):
        m.out(dql(m, m.node('Mul', [m.source([300, 250]), m.const(np.float32(1.5 + i))]))[0])
    m = dcase('DQL_zero')
    for o in dql(m, m.node('Mul', [m.source([4, 9]), m.const(np.float32(0.0))])):
        m.out(o)
    m = dcase('DQL_nan')
    for o in dql(m, m.node('Sqrt', [m.source([6, 7])])):
        m.out(o)
    # Float max/min over rows long enough for the C renderer's lanes (render.c emit_reduce_lanes, NaN kept
    # by a select GCC must vectorize unrolled only once): NaN in some rows (sqrt of x + 2.5: about a third
    # of the 70-long rows), at any lane or in the remainder.
    m = dcase('Reduce_nan_lanes')
    r = m.node('Sqrt', [m.node('Add', [m.source([9, 70]), m.const(np.float32(2.5))])])
    m.out(m.node('ReduceMax', [r], axes=[1], keepdims=0))
    m.out(m.node('ReduceMin', [r], axes=[1], keepdims=0))
    # Global pools on the cpu's whole-plane routine (cpu_pool.c plane_reduce: 16 floats a step, NaN kept
    # lane by lane): NaN in some planes, at a vector lane or in the 99-element plane's remainder; ReduceMax
    # and ReduceMean over the spatial axes take the same routine.
    m = dcase('GlobalPool_nan_planes')
    r = m.node('Sqrt', [m.node('Add', [m.source([2, 5, 9, 11]), m.const(np.float32(2.5))])])
    m.out(m.node('GlobalMaxPool', [r]))
    m.out(m.node('GlobalAveragePool', [r]))
    m.out(m.node('ReduceMax', [r], axes=[2, 3], keepdims=1))
    m.out(m.node('ReduceMean', [r], axes=[2, 3], keepdims=1))
    # Stride-2 pools of 2 and 3 taps along rows wide enough for the pool routine's eight-output vector
    # path (cpu_pool_impl.h stride2_vec: taps as the even and odd lanes of contiguous loads), NaN at any
    # lane, a remainder past the last eight, padding at the borders.
    m = dcase('Pool_stride2_nan_rows')
    r = m.node('Sqrt', [m.node('Add', [m.source([2, 3, 9, 45]), m.const(np.float32(2.5))])])
    m.out(m.node('MaxPool', [r], kernel_shape=[2, 2], strides=[2, 2]))
    m.out(m.node('MaxPool', [r], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    m.out(m.node('AveragePool', [r], kernel_shape=[2, 2], strides=[2, 2]))
    m.out(m.node('AveragePool', [r], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 0, 1]))
    m = dcase('DQL_matmul_chain')
    y, ys, yz = dql(m, m.source([4, 48]))
    w = m.const(m.rng.randint(-127, 128, [48, 16]).astype(np.int8))
    acc = m.node('MatMulInteger', [y, w, yz])
    m.out(m.node('Mul', [m.node('Cast', [acc], to=TensorProto.FLOAT), m.node('Mul', [ys, m.const(np.float32(0.01))])]))
    m = dcase('DQ_i32_bias')
    m.out(m.node('DequantizeLinear', [ints_of(m, [33], 1e4, I32), m.const(np.float32(1e-4))]))
    # Split -> a Slice per part (passes/simplify.c): sizes as an input, equal parts from the attribute form,
    # a strided input; each part read by a different op.
    def split(m, x, n_out, **attrs):
        outs = [m.fresh('t') for _ in range(n_out)]
        m.nodes.append(helper.make_node('Split', x, outs, name=m.fresh('n_Split_'), **attrs))
        return outs
    # A Split of one output (an exporter's whole-tensor split): the whole, a view
    m = case('Split_one_output')
    outs = split(m, [m.source([6, 4]), m.const(ints([6]))], 1, axis=0)
    m.out(m.node('Relu', [outs[0]]))
    m = case('Split_sizes')
    a, b, c = split(m, [m.source([4, 10, 3]), m.const(ints([2, 5, 3]))], 3, axis=1)
    m.out(m.node('Relu', [a]))
    m.out(m.node('Sigmoid', [b]))
    m.out(c)
    m = case('Split_equal_attr', 11)
    a, b = split(m, [m.source([6, 5], 'T')], 2, axis=-2)
    m.out(m.node('Add', [a, b]))
    # Einsum (lower.c compute_einsum over ops/nn_matmul.c's parser): a product that tensorizes, attention
    # scores, a transpose, a diagonal, a full sum, three operands, an ellipsis with a broadcast batch, implicit
    # output
    for tag, eq, shapes in [('matmul', 'ij,jk->ik', [[7, 33], [33, 9]]),
                            ('attention', 'bhqd,bhkd->bhqk', [[2, 3, 5, 16], [2, 3, 7, 16]]),
                            ('transpose', 'ij->ji', [[5, 17]]),
                            ('diagonal', 'ii->i', [[9, 9]]),
                            ('sum_all', 'ij->', [[6, 13]]),
                            ('three', 'ij,jk,kl->il', [[3, 5], [5, 7], [7, 4]]),
                            ('ellipsis_bcast', '...ij,...jk->...ik', [[2, 3, 4, 6], [2, 1, 6, 5]]),
                            ('implicit', 'ij,jk', [[4, 6], [6, 3]])]:
        m = case('Einsum_%s' % tag, 12)
        m.out(m.node('Einsum', [m.source(sh) for sh in shapes], equation=eq))
    # InstanceNormalization (2-D and 1-D spatial, a strided input)
    m = case('InstanceNorm_2d')
    m.out(m.node('InstanceNormalization', [m.source([2, 5, 7, 9]), m.randc([5]), m.randc([5])], epsilon=1e-3))
    m = case('InstanceNorm_1d_ncT')
    m.out(m.node('InstanceNormalization', [m.source([3, 4, 33], 'T'), m.randc([4]), m.randc([4])]))
    # Tile, Gather with constant indices (negative ones too), ArgMax/ArgMin (first/last, keepdims, NaN rows).
    m = case('Tile_f32')
    m.out(m.node('Tile', [m.source([2, 3, 5]), m.const(ints([3, 1, 2]))]))
    m = dcase('Tile_i64')
    m.out(m.node('Tile', [ints_of(m, [3, 4], 10.0), m.const(ints([2, 3]))]))
    m = case('Gather_const_axis0')
    m.out(m.node('Gather', [m.source([7, 5]), m.const(ints([[0, 6, -1], [3, -7, 2]]))], axis=0))
    m = case('Gather_const_scalar_axis1')
    m.out(m.node('Gather', [m.source([2, 9, 4], 'T'), m.const(np.int64(-3))], axis=1))
    # Gather with indices computed at run time (an embedding lookup of token ids): compiled, their range
    # checked by the plan before the kernel (kiln_plan_check_indices); negative ones from the data, int64
    # and int32, a scalar index, the indices' producer kept a buffer.
    m = case('Gather_runtime_axis0')
    ids = m.node('Sub', [m.node('Cast', [m.node('Mul', [m.node('Sigmoid', [m.source([3, 4])]), m.const(np.float32(13.99))])],
                                to=TensorProto.INT64), m.const(np.int64(7))])   # in [-7, 6]
    m.out(m.node('Relu', [m.node('Gather', [m.source([7, 5]), ids], axis=0)]))
    m = case('Gather_runtime_i32_axis1')
    ids = m.node('Cast', [m.node('Mul', [m.node('Sigmoid', [m.source([5])]), m.const(np.float32(8.99))])], to=TensorProto.INT32)
    m.out(m.node('Gather', [m.source([2, 9, 4], 'T'), ids], axis=1))
    m = case('Gather_runtime_scalar')
    ids = m.node('Cast', [m.node('ReduceMax', [m.node('Mul', [m.node('Sigmoid', [m.source([6])]), m.const(np.float32(5.99))])],
                                 keepdims=0)], to=TensorProto.INT64)
    m.out(m.node('Gather', [m.source([6, 10]), m.node('Neg', [ids])], axis=0))
    # GatherND: constant tuples (negative ones too), run-time ones from the data (a detector's per-class
    # boxes), batch_dims 1, index depth 1 (rows) and full (elements).
    m = case('GatherND_const_rows')
    m.out(m.node('GatherND', [m.source([6, 4, 3]), m.const(ints([[[0, -1], [5, 2]], [[3, 0], [-6, 3]]]))]))
    m = case('GatherND_runtime_elems')
    tup = m.node('Cast', [m.node('Mul', [m.node('Sigmoid', [m.source([5, 3])]), m.const(np.float32(3.99))])],
                 to=TensorProto.INT64)                                    # [5, 3] tuples in [0, 3]
    m.out(m.node('Tanh', [m.node('GatherND', [m.source([4, 4, 4]), m.node('Neg', [tup])])]))
    m = case('GatherND_runtime_batch1', 13)
    tup = m.node('Cast', [m.node('Mul', [m.node('Sigmoid', [m.source([3, 7, 1])]), m.const(np.float32(4.99))])],
                 to=TensorProto.INT64)                                    # [3, 7, 1] rows in [0, 4]
    m.out(m.node('GatherND', [m.source([3, 5, 6]), tup], batch_dims=1))
    m = case('Gather_const_i32_last')
    m.out(m.node('Gather', [m.source([3, 4, 6]), m.const(np.array([5, 0, 5, 2], np.int32))], axis=-1))
    for op in ('ArgMax', 'ArgMin'):
        m = dcase('%s_axis1' % op)
        m.out(m.node(op, [m.source([3, 17, 5])], axis=1))
        m = dcase('%s_last_nokeep' % op)
        m.out(m.node(op, [m.node('Floor', [m.source([4, 33])])], axis=-1, keepdims=0, select_last_index=1))
        m = dcase('%s_nan' % op)
        m.out(m.node(op, [m.node('Sqrt', [m.source([6, 9])])], axis=1))
        m = dcase('%s_nan_last' % op)
        m.out(m.node(op, [m.node('Sqrt', [m.source([6, 9])])], axis=0, select_last_index=1))
        m = dcase('%s_i32' % op)
        m.out(m.node(op, [ints_of(m, [5, 7], 3.0, I32)], axis=0))
        # Alone on a graph input (nothing to fuse): the precompiled tier's row routine (lanes arg_rows),
        # over the last axis and over an axis followed by 1s.
        m = dcase('%s_rows' % op)
        m.out(m.node(op, [m.source([4, 3, 40])], axis=-1, keepdims=0, select_last_index=1))
        m = dcase('%s_rows_trailing1' % op)
        m.out(m.node(op, [m.source([2, 37, 1])], axis=1))


def rnn_cases():
    """RNN / GRU / LSTM (passes/decompose.c: the input GEMM, the unrolled steps with their recurrent GEMMs):
    every direction, with and without bias, initial states, peepholes and (ragged) sequence_lens, clip,
    layout 1, linear_before_reset, input_forget, non-default activations, any subset of the outputs, and
    sequence_lens computed at run time."""
    gates = {'RNN': 1, 'GRU': 3, 'LSTM': 4}

    def rnn(tag, op, T=5, B=3, I=7, H=6, direction='forward', bias=True, lens=None, init=False, peep=False,
            layout=0, outs=(0, 1, 2), opset=14, runtime_lens=False, **attrs):
        # Masks of run-time lengths and ThresholdedRelu's test are bool values: dtype_ (mixed on vulkan)
        bools = runtime_lens or 'ThresholdedRelu' in attrs.get('activations', [])
        m = case('%s%s_%s' % ('dtype_' if bools else '', op, tag), opset)
        nd = 2 if direction == 'bidirectional' else 1
        G = gates[op]
        x = m.source([B, T, I] if layout else [T, B, I])
        w = m.const((m.rng.standard_normal([nd, G * H, I]) * 0.4).astype(np.float32))
        r = m.const((m.rng.standard_normal([nd, G * H, H]) * 0.4).astype(np.float32))
        ins = [x, w, r, m.randc([nd, 2 * G * H]) if bias else '']
        if runtime_lens:  # lengths from the data: Cast(Clip(|x| * T)) of a graph input
            v = m.node('Mul', [m.node('Abs', [m.inp([B])]), m.const(np.float32(T * 0.7))])
            ins.append(m.node('Cast', [m.node('Clip', [v, m.const(np.float32(0)), m.const(np.float32(T))])],
                              to=TensorProto.INT32))
        else:
            ins.append(m.const(np.array(lens, np.int32)) if lens is not None else '')
        state = [B, nd, H] if layout else [nd, B, H]
        ins.append(m.inp(state) if init else '')
        if op == 'LSTM':
            ins.append(m.inp(state) if init else '')
            ins.append(m.randc([nd, 3 * H]) if peep else '')
        while ins and ins[-1] == '':
            ins.pop()
        n_out = 3 if op == 'LSTM' else 2
        names = [m.fresh('t') if k in outs else '' for k in range(n_out)]
        while names[-1] == '':
            names.pop()
        if layout:
            attrs['layout'] = 1
        m.nodes.append(helper.make_node(op, ins, names, name=m.fresh('n_' + op + '_'), hidden_size=H,
                                        direction=direction, **attrs))
        for o in names:
            if o:
                m.out(o)

    for op in ('RNN', 'GRU', 'LSTM'):
        for direction in ('forward', 'reverse', 'bidirectional'):
            d = direction[:3]
            rnn('%s_plain' % d, op, direction=direction, bias=False)
            rnn('%s_full' % d, op, direction=direction, lens=[5, 2, 0], init=True, peep=True)
            rnn('%s_layout1_clip' % d, op, direction=direction, layout=1, init=True, lens=[3, 5, 1], clip=0.8)
        rnn('runtime_lens', op, direction='bidirectional', B=4, init=True, runtime_lens=True)
        rnn('only_state', op, direction='bidirectional', outs=(1,), T=9, B=2, I=17, H=33)
        # 80 steps for RNN: the steps' Concat exceeds a kernel's operands (fusion.c bounds it); fewer for the
        # gated cells, whose every step is several kernels (PoCL compiles each)
        rnn('long', op, T=40 if op == 'RNN' else 12, B=2, I=5, H=4, direction='bidirectional')
        rnn('batch1_wide', op, T=6, B=1, I=64, H=96)
    rnn('lbr', 'GRU', direction='bidirectional', linear_before_reset=1, lens=[4, 5, 2], init=True)
    rnn('lbr_nobias', 'GRU', linear_before_reset=1)
    rnn('input_forget', 'LSTM', direction='reverse', input_forget=1, init=True, peep=True)
    rnn('acts', 'LSTM', direction='bidirectional',
        activations=['HardSigmoid', 'LeakyRelu', 'Softsign', 'Sigmoid', 'Affine', 'ScaledTanh'],
        activation_alpha=[0.3, 0.05, 0.9, 1.1], activation_beta=[0.4, 0.2, 0.7])
    rnn('acts', 'GRU', activations=['Sigmoid', 'Elu'], activation_alpha=[0.7])
    rnn('acts_relu', 'RNN', direction='bidirectional', activations=['Relu', 'ThresholdedRelu'],
        activation_alpha=[0.1])
    rnn('acts_softplus', 'RNN', activations=['Softplus'])
    rnn('opset7', 'LSTM', opset=7, direction='bidirectional', lens=[2, 5, 5], init=True)


def pool_cases():
    def pool(tag, op, xs, how='plain', opset=12, **attrs):
        m = case('%s_%s' % (op, tag), opset)
        m.out(m.node(op, [m.source(xs, how)], **attrs))

    for op in ('MaxPool', 'AveragePool'):
        opset = 12 if op == 'MaxPool' else 11
        pool('2x2', op, [1, 3, 8, 8], opset=opset, kernel_shape=[2, 2], strides=[2, 2])
        pool('3x3_s1', op, [2, 4, 9, 9], opset=opset, kernel_shape=[3, 3])
        pool('3x3_s2_pad', op, [1, 3, 15, 15], opset=opset, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        pool('asym_pad', op, [1, 2, 9, 11], opset=opset, kernel_shape=[3, 2], pads=[0, 1, 2, 0], strides=[1, 2])
        pool('ceil', op, [1, 3, 10, 10], opset=opset, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
        # (a 9x9 input here would make the last ceil_mode window start in the end
        # padding, where onnx 1.12's shape inference and kiln's disagree)
        pool('ceil_pad', op, [1, 2, 10, 10], opset=opset, kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
             ceil_mode=1)
        pool('same_upper', op, [1, 3, 10, 10], opset=opset, kernel_shape=[3, 3], strides=[2, 2], auto_pad='SAME_UPPER')
        pool('same_lower', op, [1, 3, 10, 10], opset=opset, kernel_shape=[3, 3], strides=[2, 2], auto_pad='SAME_LOWER')
        pool('valid', op, [1, 3, 10, 10], opset=opset, kernel_shape=[3, 3], auto_pad='VALID')
        pool('1d', op, [2, 3, 33], opset=opset, kernel_shape=[3], strides=[2], pads=[1, 1])
        pool('3d', op, [1, 2, 5, 6, 7], opset=opset, kernel_shape=[2, 3, 2], pads=[0, 1, 1, 1, 1, 0])
        pool('ncT', op, [1, 3, 9, 11], 'T', opset=opset, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        pool('ncS', op, [1, 3, 9, 9], 'S', opset=opset, kernel_shape=[2, 2], strides=[2, 2])
        pool('global_like', op, [1, 4, 7, 7], opset=opset, kernel_shape=[7, 7])
        # stride 1 with padding (Inception's 3x3, an SPP block's 5x5): the padded-plane path
        pool('3x3_s1_pad', op, [1, 5, 13, 11], opset=opset, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        pool('5x5_s1_spp', op, [1, 3, 9, 10], opset=opset, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    # a pool with elementwise work after it (the runtime routine's epilogue)
    for op in ('MaxPool', 'AveragePool'):
        m = case('%s_epilogue' % op, 12 if op == 'MaxPool' else 11)
        y = m.node(op, [m.source([1, 4, 12, 13])], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        m.out(m.node('Relu', [m.node('Add', [y, m.source([1, 4, 1, 1])])]))
    pool('dil2', 'MaxPool', [1, 2, 11, 11], kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])
    pool('dil_ceil', 'MaxPool', [1, 2, 12, 12], kernel_shape=[2, 2], dilations=[2, 1], strides=[2, 2], ceil_mode=1)
    pool('opset8', 'MaxPool', [1, 3, 8, 8], opset=8, kernel_shape=[2, 2], strides=[2, 2])
    for tag, attrs in [('incl_pad', {'count_include_pad': 1, 'pads': [1, 1, 1, 1]}),
                       ('incl_pad_ceil', {'count_include_pad': 1, 'pads': [1, 1, 1, 1], 'strides': [2, 2],
                                          'ceil_mode': 1}),
                       ('incl_pad_asym', {'count_include_pad': 1, 'pads': [0, 2, 1, 0]}),
                       ('incl_same', {'count_include_pad': 1, 'auto_pad': 'SAME_UPPER', 'strides': [2, 2]})]:
        pool(tag, 'AveragePool', [1, 3, 10, 10], opset=11, kernel_shape=[3, 3], **attrs)
    for op in ('GlobalAveragePool', 'GlobalMaxPool'):
        for tag, xs, how in [('2d', [2, 3, 7, 9], 'plain'), ('1d', [1, 5, 33], 'plain'), ('3d', [1, 2, 3, 4, 5], 'plain'),
                             ('unit', [1, 4, 1, 1], 'plain'), ('ncT', [1, 3, 5, 17], 'T'), ('ncS', [2, 3, 5, 15], 'S')]:
            m = case('%s_%s' % (op, tag))
            m.out(m.node(op, [m.source(xs, how)]))
    # ReduceMean / ReduceMax over every spatial axis with keepdims: a global pool (squeeze-excite blocks)
    for op in ('ReduceMean', 'ReduceMax'):
        for tag, xs in [('2d', [1, 6, 13, 17]), ('1d', [2, 3, 40]), ('3d', [1, 2, 3, 5, 7])]:
            m = case('%s_spatial_%s' % (op, tag))
            m.out(m.node(op, [m.source(xs)], axes=list(range(2, len(xs))), keepdims=1))
    m = case('GlobalAveragePool_conv_relu')  # the classifier head of CNNs
    y = m.node('Relu', [m.node('Conv', [m.source([1, 4, 9, 9]), m.randc([8, 4, 3, 3]), m.randc([8])], pads=[1, 1, 1, 1])])
    m.out(m.node('Flatten', [m.node('GlobalAveragePool', [y])]))
    # a mean (sum * 1/n) plus a tensor: the interpreter's multiply-add must not swallow the routine's sum
    for tag, xs, bs in [('add_n', [31, 2, 31], [31, 1, 1]), ('add_c', [2, 3, 5, 7], [1, 3, 1, 1])]:
        m = case('GlobalAveragePool_%s' % tag)
        m.out(m.node('Add', [m.node('GlobalAveragePool', [m.source(xs)]), m.randc(bs)]))


def layernorm_cases():
    for tag, xs, axis, bias, how in [('last', [3, 17], -1, True, 'plain'), ('nobias', [3, 17], -1, False, 'plain'),
                                     ('a1', [2, 3, 33], 1, True, 'plain'), ('a0', [4, 15], 0, True, 'plain'),
                                     ('r1', [65], -1, True, 'plain'), ('ncT', [5, 17], -1, True, 'T'),
                                     ('ncS', [3, 33], -1, True, 'S'), ('am2', [2, 5, 16], -2, True, 'R')]:
        m = case('LayerNormalization_%s' % tag, 17)
        x = m.source(xs, how)
        norm = xs[axis:] if axis != 0 else xs
        ins = [x, m.randc(norm)] + ([m.randc(norm)] if bias else [])
        m.out(m.node('LayerNormalization', ins, axis=axis, epsilon=1e-3 if tag == 'a0' else 1e-5))
    m = case('LayerNormalization_scale_input', 17)  # scale and bias as graph inputs, broadcast
    m.out(m.node('LayerNormalization', [m.source([3, 5, 17]), m.source([5, 17]), m.source([17])], axis=1))
    m = case('LayerNormalization_then_add', 17)
    x = m.source([4, 33])
    y = m.node('LayerNormalization', [x, m.randc([33]), m.randc([33])])
    m.out(m.node('Add', [y, x]))


def epilogue_cases():
    """Elementwise consumers of MatMul/Gemm/Conv (run as per-tile epilogues
    of the contraction), with reductions long enough to be split into
    several K blocks, and other same-shape operands."""
    m = case('Epi_matmul_bigK_sigmoid')
    m.out(m.node('Sigmoid', [m.node('MatMul', [m.source([33, 1500]), m.randc([1500, 40]) ])]))
    m = case('Epi_matmul_bigK_in_relu')
    y = m.node('MatMul', [m.source([17, 1031]), m.source([1031, 65])])
    m.out(m.node('Relu', [m.node('Add', [y, m.source([17, 65])])]))
    m = case('Epi_matmul_batched_add_tanh')
    y = m.node('MatMul', [m.source([3, 17, 300]), m.source([3, 300, 33])])
    m.out(m.node('Tanh', [m.node('Mul', [y, m.source([3, 17, 33])])]))
    m = case('Epi_matmul_bcastB_relu')
    y = m.node('MatMul', [m.source([2, 3, 9, 600]), m.randc([600, 31])])
    m.out(m.node('Relu', [y]))
    m = case('Epi_matmul_scalar_mul')
    y = m.node('MatMul', [m.source([65, 257]), m.randc([257, 129])])
    m.out(m.node('Clip', [m.node('Mul', [y, m.const(np.float32(0.1))]), m.const(np.float32(-0.5)),
                          m.const(np.float32(0.5))]))
    m = case('Epi_gemm_generalC_tanh')
    y = m.node('Gemm', [m.source([31, 700]), m.randc([700, 45]), m.randc([31, 1])], alpha=0.5, beta=2.0)
    m.out(m.node('Tanh', [y]))
    m = case('Epi_gemm_bias_transB_sub')
    y = m.node('Gemm', [m.source([40, 900]), m.randc([50, 900]), m.randc([50])], transB=1)
    m.out(m.node('Sub', [m.node('Relu', [y]), m.source([40, 50])]))
    m = case('Epi_gemm_transA_inC_sigmoid')
    y = m.node('Gemm', [m.source([513, 20]), m.source([513, 30]), m.source([20, 30])], transA=1)
    m.out(m.node('Sigmoid', [y]))
    m = case('Epi_conv_bigK_relu')
    y = m.node('Conv', [m.source([1, 64, 9, 9]), m.randc([32, 64, 3, 3]), m.randc([32])], pads=[1, 1, 1, 1])
    m.out(m.node('Relu', [y]))
    m = case('Epi_conv_residual_relu_b2')
    x = m.source([2, 16, 7, 7])
    y = m.node('Conv', [x, m.randc([16, 16, 3, 3])], pads=[1, 1, 1, 1])
    m.out(m.node('Relu', [m.node('Add', [y, x])]))
    m = case('Epi_conv_group_sigmoid')
    y = m.node('Conv', [m.source([2, 8, 9, 9]), m.randc([12, 4, 3, 3]), m.randc([12])], group=2, strides=[2, 2])
    m.out(m.node('Sigmoid', [y]))
    m = case('Epi_conv_grouped_residual_relu')
    x = m.source([1, 64, 14, 14])
    y = m.node('Conv', [x, m.randc([64, 8, 3, 3]), m.randc([64])], group=8, pads=[1, 1, 1, 1])
    m.out(m.node('Relu', [m.node('Add', [y, x])]))
    m = case('Epi_conv_depthwise_relu')
    y = m.node('Conv', [m.source([1, 16, 15, 15]), m.randc([16, 1, 3, 3]), m.randc([16])], group=16, pads=[1, 1, 1, 1])
    m.out(m.node('Clip', [y, m.const(np.float32(0.0)), m.const(np.float32(6.0))]))
    m = case('Epi_conv_depthwise_add_b2')
    y = m.node('Conv', [m.source([2, 8, 9, 9]), m.randc([8, 1, 3, 3])], group=8, pads=[1, 1, 1, 1])
    m.out(m.node('Add', [y, m.source([2, 8, 9, 9])]))
    m = case('Epi_conv_1x1_hardswish')
    y = m.node('Conv', [m.source([1, 24, 13, 13]), m.randc([40, 24, 1, 1]), m.randc([40])])
    m.out(m.node('Mul', [y, m.node('HardSigmoid', [y])]))
    m = case('Epi_conv_1d_relu')
    y = m.node('Conv', [m.source([2, 8, 65]), m.randc([6, 8, 5]), m.randc([6])], pads=[2, 2])
    m.out(m.node('Relu', [y]))
    m = case('Epi_chain_two_outputs')  # the contraction result is also a graph output: no epilogue
    y = m.node('MatMul', [m.source([7, 33]), m.randc([33, 17])])
    m.out(y)
    m.out(m.node('Relu', [y]))


def structure_cases():
    """Graph shapes the executor must get right: outputs that are inputs,
    constants or listed twice, dead nodes, values with many consumers."""
    m = case('Struct_identity_only')
    m.out(m.node('Identity', [m.source([3, 17])]))
    m = case('Struct_output_twice')
    y = m.node('Exp', [m.source([3, 17])])
    m.out(y, [3, 17])
    m.out(y, [3, 17])
    m = case('Struct_input_is_output')
    x = m.source([3, 17])
    m.out(m.node('Identity', [x]))
    m.out(m.node('Relu', [x]))
    m = case('Struct_const_output')
    m.out(m.node('Add', [m.randc([3, 5]), m.randc([5])]))
    m.out(m.node('Tanh', [m.source([3, 5])]))
    m = case('Struct_dead_nodes')
    x = m.source([4, 9])
    m.node('Exp', [x])
    m.node('MatMul', [x, m.randc([9, 3])])
    m.out(m.node('Sigmoid', [x]))
    m = case('Struct_fanout')
    x = m.node('Sin', [m.source([5, 17])])
    a, b, c = m.node('Exp', [x]), m.node('Neg', [x]), m.node('Transpose', [x])
    d = m.node('MatMul', [c, x])
    m.out(m.node('Add', [m.node('Mul', [a, b]), m.node('ReduceSum', [d, m.const(ints([1]))], keepdims=0)]))
    m.out(d)
    m = case('Struct_intermediate_outputs')
    x = m.source([6, 33])
    e = m.node('Exp', [m.node('Neg', [x])])
    s = m.node('Softmax', [e])
    m.out(e)
    m.out(m.node('Mul', [s, x]))
    m.out(s)
    m = case('Struct_inplace_chain')
    x, y = m.source([4, 65]), m.source([4, 65])
    t = m.node('Exp', [m.node('Tanh', [x])])
    u = m.node('Add', [t, y])
    m.out(m.node('Mul', [m.node('Transpose', [u]), m.node('Transpose', [t])]))
    # Transposes an NHWC export puts around a Conv: sunk past pointwise ops
    # (simplify), they meet and cancel; one read twice, or a graph output, stays
    m = case('Struct_transpose_sink', 14)
    x = m.source([1, 6, 7, 5])
    t = m.node('HardSwish', [m.node('Transpose', [x], perm=[0, 2, 3, 1])])
    t = m.node('Cast', [m.node('Relu', [t])], to=1)
    m.out(m.node('Add', [m.node('Transpose', [t], perm=[0, 3, 1, 2]), x]))
    m = case('Struct_transpose_sink_kept')
    x = m.source([2, 5, 9])
    t = m.node('Transpose', [x], perm=[2, 0, 1])
    m.out(m.node('Sigmoid', [t]))
    m.out(m.node('Tanh', [t]))
    m.out(m.node('Exp', [m.node('Transpose', [m.node('Neg', [x])], perm=[1, 2, 0])]))
    # a Transpose read by several nodes sinks past all of them (simplify's
    # sink_transpose_readers): an NHWC squeeze-excite block (ReduceMean
    # keepdims, MatMul, gate Mul, back to NCHW), a keepdims=0 pool whose
    # kept axes keep or change their order, axes as an input (ReduceSum-13),
    # a constant and a scalar other operand, and a reader that blocks it
    m = case('Struct_transpose_sink_se')
    x = m.source([1, 6, 5, 7])
    a = m.node('Relu', [m.node('Transpose', [x], perm=[0, 2, 3, 1])])
    g = m.node('Sigmoid', [m.node('MatMul', [m.node('ReduceMean', [a], axes=[1, 2]), m.randc([6, 6])])])
    s = m.node('Mul', [a, g])
    m.out(m.node('Transpose', [s], perm=[0, 3, 1, 2]))
    m.out(m.node('ReduceMean', [a], axes=[1, 2], keepdims=0))
    m = case('Struct_transpose_sink_reduce')
    x = m.source([2, 3, 8, 9])
    t = m.node('Transpose', [x], perm=[0, 2, 3, 1])
    m.out(m.node('ReduceMax', [t], axes=[1], keepdims=0))
    m.out(m.node('ReduceSum', [t, m.const(np.array([2, -1], dtype=np.int64))], keepdims=1))
    m.out(m.node('Transpose', [m.node('Sub', [m.const(np.float32(0.5)), t])], perm=[0, 3, 1, 2]))
    m.out(m.node('Transpose', [m.node('Div', [t, m.randc([1, 1, 9, 3])])], perm=[0, 3, 1, 2]))
    m = case('Struct_transpose_sink_blocked')
    x = m.source([2, 3, 4, 5])
    t = m.node('Transpose', [x], perm=[0, 2, 3, 1])
    m.out(m.node('ReduceMean', [t], axes=[1, 2]))
    m.out(m.node('Add', [t, m.source([2, 4, 5, 3])]))
    m = case('Struct_dropout_ratio')
    m.out(m.node('Dropout', [m.source([3, 17]), m.const(np.float32(0.3)), m.const(np.array(False))]))


def pattern_cases():
    """Composite computations the patterns pass rewrites into ops the cpu claims."""
    m = case('Gelu_erf_pattern')
    x = m.source([3, 33])
    e = m.node('Erf', [m.node('Div', [x, m.const(np.float32(1.4142135))])])
    m.out(m.node('Mul', [m.node('Mul', [x, m.node('Add', [e, m.const(np.float32(1.0))])]), m.const(np.float32(0.5))]))
    m = case('Gelu_tanh_pattern')
    x = m.source([3, 33])
    x3 = m.node('Pow', [x, m.const(np.float32(3.0))])
    inner = m.node('Mul', [m.node('Add', [x, m.node('Mul', [x3, m.const(np.float32(0.044715))])]),
                           m.const(np.float32(0.7978845608))])
    t = m.node('Add', [m.node('Tanh', [inner]), m.const(np.float32(1.0))])
    m.out(m.node('Mul', [m.node('Mul', [x, m.const(np.float32(0.5))]), t]))
    # scaled dot-product attention written out (the patterns pass makes it
    # one kiln.FusedAttention node), with and without an additive mask
    for tag, b, sq, sk, d, dv, mask in [('nomask', [2, 3], 7, 9, 16, 16, None), ('mask', [2, 3], 7, 9, 16, 16, [1, 1, 7, 9]),
                                        ('mask2d', [2, 3], 7, 9, 17, 5, [7, 9]), ('maskrow', [1, 2], 1, 33, 8, 8, [1, 1, 1, 33]),
                                        ('rank3', [4], 15, 15, 31, 31, [4, 15, 15]), ('long', [1, 2], 65, 65, 64, 64, [1, 1, 1, 65])]:
        m = case('Attention_pattern_%s' % tag)
        q, k, v = m.source(b + [sq, d]), m.source(b + [sk, d]), m.source(b + [sk, dv])
        r = len(b) + 2
        kt = m.node('Transpose', [k], perm=list(range(r - 2)) + [r - 1, r - 2])
        sc = m.node('Mul', [m.node('MatMul', [q, kt]), m.const(np.float32(1.0 / math.sqrt(d)))])
        if mask:
            sc = m.node('Add', [sc, m.randc(mask)])
        m.out(m.node('MatMul', [m.node('Softmax', [sc], axis=-1), v]))
    m = case('Attention_pattern_div_scale')
    q, k, v = m.source([2, 4, 9, 8]), m.source([2, 4, 9, 8]), m.source([2, 4, 9, 8])
    kt = m.node('Transpose', [k], perm=[0, 1, 3, 2])
    sc = m.node('Div', [m.node('MatMul', [q, kt]), m.const(np.float32(2.828427))])
    m.out(m.node('MatMul', [m.node('Softmax', [sc], axis=3), v]))


def large_cases():
    """Tensors big enough that kernels split their loops over several
    threads (a parallel chunk is at least 16384 elements)."""
    m = case('large_unary_chain')
    m.out(m.node('Tanh', [m.node('Mul', [m.source([65, 1031]), m.const(np.float32(0.7))])]))
    m = case('large_bcast_nc')
    m.out(m.node('Add', [m.source([129, 257], 'T'), m.source([257])]))
    # A movement kernel past the interpreter's probe chunk (4M elements): RetinaNet's head concatenation,
    # each level transposed to (anchors, classes), runs of 91 cut where a chunk ends.
    m = case('large_concat_transposed')
    m.out(m.node('Concat', [m.node('Transpose', [m.source([1, 91, 30000])], perm=[0, 2, 1]),
                            m.node('Transpose', [m.source([1, 91, 20011])], perm=[0, 2, 1])], axis=1))
    m = case('large_softmax')
    m.out(m.node('Softmax', [m.source([300, 129])]))
    m = case('large_logsoftmax_nc')
    m.out(m.node('LogSoftmax', [m.source([257, 131], 'T')]))
    for tag, axes in [('a0', [0]), ('a1', [1]), ('all', None)]:
        m = case('large_reducesum_%s' % tag)
        ins = [m.source([257, 131])] + ([m.const(ints(axes))] if axes else [])
        m.out(m.node('ReduceSum', ins, keepdims=1))
        m = case('large_reducemax_%s' % tag, 11)
        attrs = {'axes': axes} if axes else {}
        m.out(m.node('ReduceMax', [m.source([257, 131])], keepdims=0, **attrs))
    m = case('large_transpose3')
    m.out(m.node('Transpose', [m.source([33, 65, 17])], perm=[2, 0, 1]))
    m = case('large_slice_concat')
    a = m.source([129, 257], 'S')
    m.out(m.node('Concat', [a, m.source([129, 33], 'R')], axis=1))
    m = case('large_row_scale')
    x = m.source([513, 65])
    mx = m.node('ReduceMax', [x], axes=[1], keepdims=1)
    l2 = m.node('ReduceL2', [x], axes=[1], keepdims=1)
    m.out(m.node('Div', [m.node('Sub', [x, mx]), m.node('Add', [l2, m.const(np.float32(1.0))])]))
    # LayerNormalization written out: the patterns pass makes it one node
    m = case('LayerNorm_pattern')
    x = m.source([513, 65])
    mean = m.node('ReduceMean', [x], axes=[1], keepdims=1)
    d = m.node('Sub', [x, mean])
    var = m.node('ReduceMean', [m.node('Mul', [d, d])], axes=[1], keepdims=1)
    m.out(m.node('Div', [d, m.node('Sqrt', [m.node('Add', [var, m.const(np.float32(1e-5))])])]))
    m = case('large_matmul')
    m.out(m.node('MatMul', [m.source([257, 129]), m.randc([129, 65])]))
    m = case('large_matmul_batched')
    m.out(m.node('MatMul', [m.source([3, 129, 65]), m.source([3, 65, 67])]))
    m = case('large_gemm_tt')
    m.out(m.node('Gemm', [m.source([129, 257]), m.randc([65, 129]), m.randc([65])], transA=1, transB=1,
                         alpha=0.5, beta=2.0))
    m = case('large_conv')
    m.out(m.node('Conv', [m.source([1, 8, 33, 35]), m.randc([16, 8, 3, 3]), m.randc([16])], pads=[1, 1, 1, 1]))
    m = case('large_conv_dw')
    m.out(m.node('Conv', [m.source([2, 16, 31, 33]), m.randc([16, 1, 3, 3])], group=16, pads=[1, 1, 1, 1],
                         strides=[1, 2]))
    m = case('large_conv_1x1')
    m.out(m.node('Conv', [m.source([1, 32, 29, 31]), m.randc([24, 32, 1, 1]), m.randc([24])]))
    # The GPU contraction template (codegen/schedule_tiles.c): M, N >= 16, K >= 8 and a million
    # multiply-adds at least (group2 stays on the plain mapping: x reads the output channel), with tiles cut at
    # every edge (M, N, K not multiples of 16/64), batch axes read by both operands or broadcast, operands
    # that are fused producers, and epilogues.
    m = case('tiles_matmul_edges')
    m.out(m.node('MatMul', [m.source([129, 70]), m.source([70, 130])]))
    m = case('tiles_matmul_bcast_batch')
    m.out(m.node('MatMul', [m.source([2, 1, 40, 100]), m.source([3, 100, 50])]))
    m = case('tiles_matmul_nc_operands')
    m.out(m.node('MatMul', [m.source([90, 150], 'T'), m.node('Tanh', [m.source([150, 100], 'S')])]))
    m = case('tiles_gemm_cmn')
    m.out(m.node('Gemm', [m.source([60, 100]), m.source([180, 60]), m.source([100, 180])], transA=1, transB=1,
                         alpha=-0.75, beta=0.5))
    m = case('tiles_conv_s2_residual_relu')
    y = m.node('Conv', [m.source([2, 12, 33, 35]), m.randc([40, 12, 3, 3]), m.randc([40])], pads=[1, 0, 1, 2],
               strides=[2, 2])
    m.out(m.node('Relu', [m.node('Add', [y, m.source([2, 40, 17, 18])])]))
    m = case('tiles_conv_1d_dilated')
    m.out(m.node('Conv', [m.source([3, 24, 100]), m.randc([64, 24, 3])], dilations=[2], pads=[2, 2]))
    m = case('tiles_conv_group2')
    m.out(m.node('Conv', [m.source([1, 16, 13, 13]), m.randc([32, 8, 3, 3])], group=2, pads=[1, 1, 1, 1]))
    # Convolutions with their elementwise consumers (the cpu's kiln_rt.conv): any f as a generated per-tile
    # epilogue (a sigmoid times a per-channel scale plus a per-pixel shift: the channel and pixel indices
    # stepped across tile rows, batch 2), and the forms the call applies itself (bias, a residual Add, Clip)
    # on a 1x1 and a depthwise Conv.
    m = case('conv_epilogue_generic')
    y = m.node('Conv', [m.source([2, 8, 15, 13]), m.randc([12, 8, 3, 3]), m.randc([12])], pads=[1, 1, 1, 1])
    z = m.node('Mul', [m.node('Sigmoid', [y]), m.randc([1, 12, 1, 1])])
    m.out(m.node('Add', [z, m.randc([1, 1, 15, 13])]))
    m = case('conv_1x1_residual_clip', 11)
    y = m.node('Conv', [m.source([2, 16, 9, 11]), m.randc([24, 16, 1, 1]), m.randc([24])])
    m.out(m.node('Clip', [m.node('Add', [y, m.source([2, 24, 9, 11])]), m.const(np.float32(0.0)),
                          m.const(np.float32(6.0))]))
    m = case('conv_depthwise_s2_clip', 11)
    y = m.node('Conv', [m.source([1, 24, 19, 17]), m.randc([24, 1, 3, 3]), m.randc([24])], group=24,
               pads=[1, 1, 1, 1], strides=[2, 2])
    m.out(m.node('Clip', [y, m.const(np.float32(-0.5)), m.const(np.float32(0.5))]))
    # Cooperative rows (codegen/schedule_rows.c: a group per row, the row's reductions split over its threads):
    # few long rows (lengths no multiple of the group), many short ones (the group shrinks to 32), sums over
    # two axes (one flattened loop), max and min through the combine tree with NaN rows among clean ones.
    m = case('rows_softmax_few_long')
    m.out(m.node('Softmax', [m.source([3, 1000])], axis=-1))
    m = case('rows_layernorm_short', 17)
    m.out(m.node('LayerNormalization', [m.source([300, 20]), m.randc([20]), m.randc([20])], axis=-1))
    m = case('rows_reducesum_two_axes')
    m.out(m.node('ReduceSum', [m.source([5, 37, 29]), m.const(ints([1, 2]))], keepdims=0))
    m = case('rows_reducemax_nan', 11)
    m.out(m.node('ReduceMax', [m.node('Sqrt', [m.node('Add', [m.source([40, 300]), m.const(np.float32(2.5))])])],
                 axes=[1], keepdims=1))
    m = case('rows_reducemin_nan', 11)
    m.out(m.node('ReduceMin', [m.node('Log', [m.node('Add', [m.source([4, 6, 70]), m.const(np.float32(2.5))])])],
                 axes=[2], keepdims=1))


def host_cases():
    """Host steps the cpu runs on its own routines (devices/cpu/cpu_host.c)
    between compiled kernels: nodes whose shapes are known only when they run
    (rows picked by NonZero) and ops no device compiles (RoiAlign,
    ScatterElements), checked against ref's kernels."""
    def picked_rows(m, x):
        # the rows of x [r, c] whose max is positive: [n, c], n known only at run time
        keep = m.node('Greater', [m.node('ReduceMax', [x], axes=[1], keepdims=0), m.const(np.float32(0.0))])
        return m.node('Gather', [x, m.node('Squeeze', [m.node('NonZero', [keep]), m.const(ints([0]))])], axis=0)
    for tag, c_shape, attrs in (('bias', [17], dict(transB=1)), ('row', [1, 17], dict(transB=1, alpha=0.5, beta=2.0)),
                                ('scalar', [1], dict(transB=1, beta=-1.0)), ('none', None, dict(transB=1)),
                                ('transA', [17], dict(transA=1, transB=1))):
        m = case('mixed_host_Gemm_%s' % tag)
        r = picked_rows(m, m.node('Add', [m.source([9, 20]), m.const(np.float32(0.3))]))
        if attrs.get('transA'):
            r = m.node('Transpose', [r], perm=[1, 0])
        ins = [r, m.randc([17, 20])] + ([m.randc(c_shape)] if c_shape else [])
        m.out(m.node('Relu', [m.node('Gemm', ins, **attrs)]))
    # Conv / ConvTranspose over the images NonZero keeps (a mask head over a detector's kept boxes)
    def picked_images(m, shape):
        x = m.source(shape)
        keep = m.node('Greater', [m.node('ReduceMax', [x], axes=list(range(1, len(shape))), keepdims=0),
                                  m.const(np.float32(0.5))])
        return m.node('Gather', [x, m.node('Squeeze', [m.node('NonZero', [keep]), m.const(ints([0]))])], axis=0)
    for tag, xs, ws, attrs, bias in (('2d', [6, 4, 9, 11], [5, 4, 3, 3], dict(pads=[1, 1, 1, 1]), True),
                                     ('2d_s2_group', [5, 4, 10, 9], [6, 2, 3, 2], dict(strides=[2, 1], group=2, dilations=[1, 2]), False),
                                     ('1d_same', [5, 3, 17], [4, 3, 4], dict(auto_pad='SAME_UPPER'), True),
                                     ('3d', [4, 2, 5, 6, 7], [3, 2, 3, 3, 3], dict(pads=[1, 0, 1, 1, 0, 1]), True)):
        m = case('mixed_host_Conv_%s' % tag)
        ins = [picked_images(m, xs), m.randc(ws)] + ([m.randc([ws[0]])] if bias else [])
        m.out(m.node('Relu', [m.node('Conv', ins, **attrs)]))
    for tag, xs, ws, attrs, bias in (('2d_s2', [6, 3, 5, 6], [3, 4, 3, 3], dict(strides=[2, 2], output_padding=[1, 0], pads=[1, 0, 1, 1]), True),
                                     ('2d_group_shape', [5, 4, 4, 5], [4, 1, 2, 3], dict(group=2, strides=[2, 2], output_shape=[9, 11]), False),
                                     ('1d', [5, 2, 9], [2, 3, 4], dict(strides=[3], dilations=[2]), True)):
        m = case('mixed_host_ConvTranspose_%s' % tag)
        ins = [picked_images(m, xs), m.randc(ws)] + ([m.randc([ws[1] * attrs.get('group', 1)])] if bias else [])
        m.out(m.node('Tanh', [m.node('ConvTranspose', ins, **attrs)]))
    # Resize over the images NonZero keeps (a keypoint head's heatmaps over a detector's kept boxes):
    # the op's tables built at run time, the separable routine
    for tag, opset, xs, scales, sizes, attrs in (
            ('linear', 13, [5, 3, 7, 9], [1, 1, 2, 2], None, dict(mode='linear')),
            ('cubic_sizes', 13, [6, 2, 8, 5], None, [0, 2, 11, 13], dict(mode='cubic', cubic_coeff_a=-0.5)),
            ('nearest_3d', 13, [4, 2, 3, 4, 5], [1, 1, 2, 1.5, 0.5], None,
             dict(mode='nearest', coordinate_transformation_mode='asymmetric', nearest_mode='floor'))):
        m = case('mixed_host_Resize_%s' % tag, opset)
        x = picked_images(m, xs)
        if sizes is not None:
            n = m.node('Slice', [m.node('Shape', [x]), m.const(ints([0])), m.const(ints([1]))])
            sz = m.node('Concat', [n, m.const(ints(sizes[1:]))], axis=0)
            y = m.node('Resize', [x, m.const(np.zeros(0, np.float32)), m.const(np.zeros(0, np.float32)), sz], **attrs)
        else:
            y = m.node('Resize', [x, m.const(np.zeros(0, np.float32)), m.const(np.array(scales, np.float32))], **attrs)
        m.out(m.node('Sigmoid', [y]))
    # a string tensor expanded to a run-time shape (ref deep-copies strings; the cpu leaves them to it), read
    # back as numbers
    m = case('mixed_host_Expand_string')
    r = picked_rows(m, m.source([7, 6]))
    n = m.node('Slice', [m.node('Shape', [r]), m.const(ints([0])), m.const(ints([1]))])
    st = m.const(np.array([['1.5'], ['-2.25']], dtype=object))
    m.out(m.node('Cast', [m.node('Expand', [st, m.node('Concat', [m.const(ints([2])), n], axis=0)])], to=1))
    # a string constant as a graph output (the plan copies it out: its strings deep-copied, the graph keeps
    # its own) next to a computed one
    m = case('mixed_host_string_constant_out')
    m.out(m.node('Identity', [m.const(np.array(['a', 'bc', ''], dtype=object))]))
    m.out(m.node('Relu', [m.source([3, 4])]))
    # no row kept: every host kernel on empty operands
    m = case('mixed_host_empty_rows')
    x = m.source([9, 20])
    keep = m.node('Greater', [m.node('ReduceMax', [x], axes=[1], keepdims=0), m.const(np.float32(100.0))])
    r = m.node('Gather', [x, m.node('Squeeze', [m.node('NonZero', [keep]), m.const(ints([0]))])], axis=0)
    m.out(m.node('Relu', [m.node('Gemm', [r, m.randc([17, 20]), m.randc([17])], transB=1)]))
    m.out(m.node('MatMul', [r, m.randc([20, 9])]))
    img = m.node('Reshape', [r, m.const(ints([-1, 4, 5, 1]))])
    m.out(m.node('Conv', [img, m.randc([3, 4, 3, 1]), m.randc([3])], pads=[1, 0, 1, 0]))
    m.out(m.node('ConvTranspose', [img, m.randc([4, 2, 2, 1])], strides=[2, 1]))
    n = m.node('Slice', [m.node('Shape', [r]), m.const(ints([0])), m.const(ints([1]))])
    m.out(m.node('Expand', [m.source([2, 1, 1]), m.node('Concat', [m.const(ints([2])), n, m.const(ints([5]))], axis=0)]))
    # Ops whose shapes only the run tells, specialized to them when they run (runtime/plan_bodies.c
    # kiln_body_plans_run_node: a plan of the node alone per signature, parameter inputs baked in):
    # elementwise float and int64 over NonZero's indices, a Transpose, a Slice, an integer ReduceMax, a
    # ConstantOfShape of the run's shape, a Gather with small run-time indices, a Where, a Cast; none
    # kept (empty operands) in the second.
    for tag, bar in (('some', 0.0), ('none', 100.0)):
        m = case('mixed_dynamic_%s' % tag)
        x = m.source([6, 9])
        nz = m.node('NonZero', [m.node('Greater', [x, m.const(np.float32(bar))])])  # i64 [2, n]
        t = m.node('Transpose', [nz], perm=[1, 0])                                  # [n, 2]
        m.out(m.node('Add', [m.node('Mul', [t, m.const(ints([3, 5]))]), m.const(ints([1]))]))
        m.out(m.node('ReduceMax', [nz], axes=[0], keepdims=0))
        f = m.node('Cast', [m.node('Slice', [t, m.const(ints([0])), m.const(ints([1])), m.const(ints([1]))])], to=1)
        m.out(m.node('Sigmoid', [m.node('Mul', [f, m.const(np.float32(0.3))])]))
        shape = m.node('Shape', [t])
        m.out(m.node('Add', [m.node('ConstantOfShape', [shape], value=helper.make_tensor('v', 1, [1], [1.5])),
                             m.node('Cast', [t], to=1)]))
        rows = m.node('Gather', [x, m.node('Slice', [nz, m.const(ints([0])), m.const(ints([1]))])], axis=0)
        m.out(m.node('Where', [m.node('Greater', [rows, m.const(np.float32(0.5))]), rows,
                               m.node('Neg', [rows])]))
    # TopK over f32 on the cpu's bounded-heap routine against ref's stable sort: ties (values rounded to
    # tenths), NaN (the largest), smallest and largest, a middle axis, k of 0, 1, some and all.
    for tag, shape, axis, k, largest in (('last_ties', [4, 50], -1, 7, 1), ('mid_small', [3, 40, 5], 1, 6, 0),
                                         ('all', [2, 9], 1, 9, 1), ('k0', [3, 8], 1, 0, 1), ('k1_nan', [5, 33], 1, 1, 1),
                                         ('nan_smallest', [6, 21], 1, 5, 0)):
        m = case('mixed_host_TopK_%s' % tag)
        x = m.node('Div', [m.node('Round', [m.node('Mul', [m.source(shape), m.const(np.float32(10.0))])]),
                           m.const(np.float32(10.0))])
        if 'nan' in tag:
            x = m.node('Sqrt', [m.node('Add', [x, m.const(np.float32(1.0))])])
        outs = [m.fresh('t'), m.fresh('t')]
        m.nodes.append(helper.make_node('TopK', [x, m.const(ints([k]))], outs, name=m.fresh('n_TopK_'), axis=axis,
                                        largest=largest))
        m.out(outs[0])
        m.out(outs[1])
    m = case('mixed_host_MatMul_rows')
    r = picked_rows(m, m.source([11, 33]))
    m.out(m.node('MatMul', [r, m.randc([33, 9])]))
    m.out(m.node('MatMul', [m.node('Unsqueeze', [r, m.const(ints([0]))]), m.randc([33, 5])]))
    m = case('mixed_host_Expand_rows')
    r = picked_rows(m, m.source([7, 6]))
    n = m.node('Slice', [m.node('Shape', [r]), m.const(ints([0])), m.const(ints([1]))])
    m.out(m.node('Neg', [m.node('Expand', [m.source([2, 1, 1]), m.node('Concat', [m.const(ints([2])), n, m.const(ints([5]))], axis=0)])]))
    m.out(m.node('Expand', [m.node('Unsqueeze', [r, m.const(ints([0]))]), m.const(ints([3, 1, 1]))]))
    rng = np.random.default_rng(7)
    def rois(nr, h, w):
        y0, x0 = rng.uniform(-2, h, nr), rng.uniform(-2, w, nr)
        return np.stack([x0, y0, x0 + rng.uniform(0, w, nr), y0 + rng.uniform(0, h, nr)], 1).astype(np.float32)
    for tag, opset, attrs in (('avg16', 16, dict(output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5)),
                              ('max16', 16, dict(mode='max', output_height=2, output_width=2, sampling_ratio=0,
                                                 coordinate_transformation_mode='output_half_pixel')),
                              ('avg10', 10, dict(output_height=5, output_width=5, sampling_ratio=0, spatial_scale=0.5))):
        m = case('mixed_host_RoiAlign_%s' % tag, opset)
        x = m.node('Relu', [m.source([2, 3, 10, 12])])
        y = m.node('RoiAlign', [x, m.const(rois(6, 20, 24)), m.const(np.array([0, 1, 1, 0, 1, 0], dtype=np.int64))], **attrs)
        m.out(m.node('Sigmoid', [y]))
    # NonMaxSuppression: clustered boxes (many overlaps, some corners given
    # reversed), scores from the model (ties broken by index), with and
    # without a score threshold, center boxes, a max_output cap
    for tag, center, maxo, thr in (('corners', 0, 5, 0.1), ('center', 1, 100, None), ('cap1', 0, 1, -1.0)):
        m = case('mixed_host_NonMaxSuppression_%s' % tag)
        base = rng.uniform(0, 10, (2, 40, 2)).astype(np.float32)
        size = rng.uniform(0.5, 4, (2, 40, 2)).astype(np.float32)
        boxes = np.concatenate([base, base + size], 2) if not center else np.concatenate([base, size], 2)
        if not center:
            boxes[:, ::3] = boxes[:, ::3][:, :, [2, 3, 0, 1]]
        scores = m.node('Sigmoid', [m.source([2, 3, 40])])
        ins = [m.const(boxes.astype(np.float32)), scores, m.const(np.array([maxo], dtype=np.int64)),
               m.const(np.array([0.4], dtype=np.float32))]
        if thr is not None:
            ins.append(m.const(np.array([thr], dtype=np.float32)))
        m.out(m.node('Add', [m.node('NonMaxSuppression', ins, center_point_box=center), m.const(np.int64(1))]))
    m = case('mixed_host_ScatterElements', 13)
    x = m.node('Relu', [m.source([4, 5, 6])])
    idx = rng.integers(-5, 5, size=(4, 3, 6)).astype(np.int64)
    m.out(m.node('Tanh', [m.node('ScatterElements', [x, m.const(idx), m.source([4, 3, 6])], axis=1)]))
    # one index per row of the last dim (a multi-scale RoiAlign's boxes scattered back by level): whole rows,
    # duplicates (the later wins), negative indices, and one row that is not constant
    m = case('mixed_host_ScatterElements_rows', 13)
    x = m.node('Relu', [m.source([5, 4, 6])])
    idx = np.repeat(rng.integers(-5, 5, size=(7, 3, 1)), 6, axis=2).astype(np.int64)
    idx[6, 2, 3] = (idx[6, 2, 0] + 6) % 5
    m.out(m.node('Tanh', [m.node('ScatterElements', [x, m.const(idx), m.source([7, 3, 6])], axis=0)]))


def attention_cases():
    """ONNX Attention (opset 23) on random geometry: 3-D and 4-D, grouped and multi-query heads, a past
    cache of several lengths, bool and float masks of rank 2-4 (per head or shared, per batch or shared;
    one that masks whole rows), causal, softcap, scale, the present outputs. Compiling devices run it as
    the graph passes/decompose.c makes of it (f32); the ref kernel is the truth. Saved without onnx's
    checker (see Model.build)."""
    rng = np.random.RandomState(2323)
    for i in range(36):
        m = case('Attention_rand_%d' % i, opset=23)
        rank3 = rng.rand() < 0.3
        hkv = int(rng.choice([1, 2]))
        grp = int(rng.choice([1, 2, 3]))
        hq = hkv * grp
        b, s, l = int(rng.choice([1, 2])), int(rng.randint(1, 6)), int(rng.randint(1, 7))
        p = int(rng.choice([0, 0, 3, 7]))
        e, ev = int(rng.choice([4, 8])), int(rng.choice([4, 6]))
        t = p + l
        attrs = {}
        if rank3:
            q, k, v = m.inp([b, s, hq * e]), m.inp([b, l, hkv * e]), m.inp([b, l, hkv * ev])
            attrs.update(q_num_heads=hq, kv_num_heads=hkv)
        else:
            q, k, v = m.inp([b, hq, s, e]), m.inp([b, hkv, l, e]), m.inp([b, hkv, l, ev])
        mask_kind = rng.choice(['none', 'bool', 'float', 'rows'])
        mask = ''
        if mask_kind != 'none':
            mrank = int(rng.randint(2, 5))
            full = [b if rng.rand() < 0.5 else 1, hq if rng.rand() < 0.5 else 1, s, t]
            x = m.inp(full[4 - mrank:])
            if mask_kind == 'float':
                mask = x
            else:  # bool: mostly true; 'rows': false everywhere (whole rows masked: zeros out)
                mask = m.node('Greater', [x, m.const(np.float32(10.0 if mask_kind == 'rows' else -1.0))])
        if rng.rand() < 0.4:
            attrs['is_causal'] = 1
        if rng.rand() < 0.3:
            attrs['softcap'] = 2.0
        if rng.rand() < 0.3:
            attrs['scale'] = 0.3
        ins = [q, k, v, mask]
        if p:
            ins += [m.inp([b, hkv, p, e]), m.inp([b, hkv, p, ev])]
        while ins[-1] == '':
            ins.pop()
        present = p > 0 or rng.rand() < 0.3
        outs = [m.fresh('y')] + ([m.fresh('pk'), m.fresh('pv')] if present else [])
        m.nodes.append(helper.make_node('Attention', ins, outs, name=m.fresh('n_Attention_'), **attrs))
        m.out(outs[0], [b, s, hq * ev] if rank3 else [b, hq, s, ev])
        if present:
            m.out(outs[1], [b, hkv, t, e])
            m.out(outs[2], [b, hkv, t, ev])
    # decoder steps without a mask (the cpu's Attention routine, cpu_attention.c): 1-4 query rows, grouped and
    # multi-query heads, causal, softcap, scale, head sizes around the routine's 16-wide sums, present outputs or not
    for i in range(12):
        m = case('Attention_decode_rand_%d' % i, opset=23)
        hkv = int(rng.choice([1, 2, 3]))
        hq = hkv * int(rng.choice([1, 2, 4]))
        b, s, l, p = int(rng.choice([1, 2])), int(rng.randint(1, 5)), int(rng.randint(1, 3)), int(rng.randint(0, 40))
        e, ev = int(rng.choice([5, 16, 17, 33])), int(rng.choice([3, 16, 20]))
        attrs = {}
        if rng.rand() < 0.5:
            attrs['is_causal'] = 1
        if rng.rand() < 0.3:
            attrs['softcap'] = 1.5
        if rng.rand() < 0.3:
            attrs['scale'] = 0.2
        ins = [m.inp([b, hq, s, e]), m.inp([b, hkv, l, e]), m.inp([b, hkv, l, ev]), '', m.inp([b, hkv, p, e]),
               m.inp([b, hkv, p, ev])]
        present = i % 4 != 3
        outs = [m.fresh('y')] + ([m.fresh('pk'), m.fresh('pv')] if present else [])
        m.nodes.append(helper.make_node('Attention', ins, outs, name=m.fresh('n_Attention_'), **attrs))
        m.out(outs[0], [b, hq, s, ev])
        if present:
            m.out(outs[1], [b, hkv, p + l, e])
            m.out(outs[2], [b, hkv, p + l, ev])
    # a decoder step against a long cache (T x E >= 64K: the scores' one-column product goes to the SGEMM's dot rows)
    for i, (hq, hkv) in enumerate([(2, 2), (4, 2)]):
        m = case('Attention_decode_long_%d' % i, opset=23)
        p, e = 1100, 64
        ins = [m.inp([1, hq, 1, e]), m.inp([1, hkv, 1, e]), m.inp([1, hkv, 1, e]), '', m.inp([1, hkv, p, e]),
               m.inp([1, hkv, p, e])]
        outs = [m.fresh('y'), m.fresh('pk'), m.fresh('pv')]
        m.nodes.append(helper.make_node('Attention', ins, outs, name=m.fresh('n_Attention_'), is_causal=i))
        m.out(outs[0], [1, hq, 1, e])
        m.out(outs[1], [1, hkv, p + 1, e])
        m.out(outs[2], [1, hkv, p + 1, e])


def transformer_cases():
    """The opset 18-28 activations, RMSNormalization and RotaryEmbedding (constant position ids or none)
    on random shapes (compiling devices run them as the
    elementwise and reduction graphs passes/decompose.c makes; ref's kernels are the truth). Saved without
    onnx's checker (see Model.build)."""
    rng = np.random.RandomState(2424)
    for i in range(6):
        shape = [int(d) for d in rng.randint(1, 9, size=rng.randint(1, 5))]
        alpha = [1.0, 0.5, 1.7][i % 3]
        m = case('Swish_rand_%d' % i, opset=24)
        m.out(m.node('Swish', [m.source(shape)], alpha=alpha), shape)
        m = case('SwiGLU_rand_%d' % i, opset=28)
        m.out(m.node('SwiGLU', [m.source(shape), m.source(shape)], alpha=alpha), shape)
        m = case('Mish_rand_%d' % i, opset=22)
        m.out(m.node('Mish', [m.source(shape)]), shape)
        m = case('Gelu_rand_%d' % i, opset=20)  # ONNX's own Gelu (opset 20), exact and tanh
        m.out(m.node('Gelu', [m.source(shape)], approximate=['none', 'tanh'][i % 2]), shape)
        r = len(shape)
        axis = int(rng.randint(-r, r))
        a = axis % r
        scale_shape = shape[a:] if i % 2 == 0 else [1] * (r - a - 1) + [shape[-1]]
        m = case('RMSNormalization_rand_%d' % i, opset=23)
        m.out(m.node('RMSNormalization', [m.source(shape), m.randc(scale_shape)], axis=axis,
                     epsilon=[1e-5, 1e-3][i % 2]), shape)

    for i in range(8):
        packed, inter, partial, with_pos = i & 1, (i >> 1) & 1, (i >> 2) & 1, i % 3 != 0
        b, h, sq, d = int(rng.randint(1, 3)), int(rng.randint(1, 4)), int(rng.randint(1, 6)), int(rng.choice([4, 8]))
        rot = d // 2 if partial and d >= 4 else d
        if rot % 2:
            rot = d
        half = rot // 2
        xshape = [b, sq, h * d] if packed else [b, h, sq, d]
        attrs = dict(interleaved=inter)
        if packed:
            attrs['num_heads'] = h
        if rot != d:
            attrs['rotary_embedding_dim'] = rot
        m = case('RotaryEmbedding_rand_%d' % i, opset=23)
        if with_pos:
            maxp = 16
            ang = rng.uniform(-3, 3, size=(maxp, half)).astype(np.float32)
            ins = [m.source(xshape), m.const(np.cos(ang)), m.const(np.sin(ang)),
                   m.const(rng.randint(0, maxp, size=(b, sq)).astype(np.int64))]
        else:
            ins = [m.source(xshape), m.source([b, sq, half]), m.source([b, sq, half])]
        m.out(m.node('RotaryEmbedding', ins, **attrs), xshape)

    # position ids computed at run time (a decoder's positions are an input): in range, from a source
    for i in range(4):
        packed, inter = i & 1, (i >> 1) & 1
        b, h, sq, d, maxp = int(rng.randint(1, 3)), int(rng.randint(1, 4)), int(rng.randint(1, 6)), 8, 12
        xshape = [b, sq, h * d] if packed else [b, h, sq, d]
        attrs = dict(interleaved=inter, **({'num_heads': h} if packed else {}))
        ang = rng.uniform(-3, 3, size=(maxp, d // 2)).astype(np.float32)
        m = case('RotaryEmbedding_runtime_pos_%d' % i, opset=23)
        steps = m.node('Cast', [m.node('Mul', [m.node('Abs', [m.source([b, sq])]), m.const(np.float32(5.0))])],
                       to=TensorProto.INT64)
        pos = m.node('Min', [steps, m.const(np.int64(maxp - 1))])
        m.out(m.node('RotaryEmbedding', [m.source(xshape), m.const(np.cos(ang)), m.const(np.sin(ang)), pos], **attrs),
              xshape)


def half_cases():
    """f16 and bf16 compiled as storage with f32 arithmetic (passes/widen_half.c widens the computing
    nodes between Casts; lower.c and the dialects load, store, move and convert the halves): elementwise
    chains, contractions, normalizations, reductions, the transformer ops, movement of halves and every
    cast to and from them, from f16 graph inputs and from f32 sources through a Cast. Named dtype_* (mixed
    on vulkan, whose GLSL stores f32 only)."""
    H, BH = TensorProto.FLOAT16, TensorProto.BFLOAT16
    rng = np.random.RandomState(2525)

    def hc(tag, dt, opset=17):
        return case('dtype_%s_%s' % ('f16' if dt == H else 'bf16', tag), opset)

    def half_const(m, shape, dt, scale=1.0):
        v = (m.rng.standard_normal(shape) * scale).astype(np.float32)
        if dt == H:
            return m.const(v.astype(np.float16))
        return m.node('Cast', [m.const(v)], to=BH)  # numpy has no bfloat16: a folded Cast makes the constant

    for dt in (H, BH):
        m = hc('elementwise', dt)
        x = m.inp([3, 37], dt) if dt == H else m.node('Cast', [m.source([3, 37])], to=dt)
        y = m.node('Sigmoid', [m.node('Add', [m.node('Mul', [m.node('Relu', [x]), half_const(m, [37], dt)]),
                                              half_const(m, [3, 1], dt)])])
        m.out(m.node('Tanh', [m.node('Sub', [y, x])]))
        m = hc('matmul_bias_gelu', dt)
        x = m.node('Cast', [m.source([2, 5, 24])], to=dt)
        h = m.node('Add', [m.node('MatMul', [x, half_const(m, [24, 33], dt, 0.2)]), half_const(m, [33], dt)])
        m.out(m.node('Mul', [h, m.node('Sigmoid', [m.node('Mul', [h, m.node('Cast', [m.const(np.float32(1.702))],
                                                                                     to=dt)])])]))
        m = hc('layernorm_softmax', dt)
        x = m.node('Cast', [m.source([4, 6, 32])], to=dt)
        ln = m.node('LayerNormalization', [x, half_const(m, [32], dt), half_const(m, [32], dt)], axis=-1)
        m.out(m.node('Softmax', [ln], axis=-1))
        m = hc('reduce', dt)
        x = m.node('Cast', [m.source([5, 7, 19])], to=dt)
        m.out(m.node('ReduceMean', [x], axes=[2], keepdims=1))
        m.out(m.node('ReduceSum', [x, m.const(ints([0, 2]))], keepdims=0))
        m.out(m.node('ReduceMax', [x], axes=[1], keepdims=0))
        m.out(m.node('ArgMax', [x], axis=2))
    m = hc('conv_relu_pool', H)  # (ONNX's Conv takes no bf16)
    x = m.node('Cast', [m.source([1, 3, 11, 11])], to=H)
    c = m.node('Conv', [x, half_const(m, [8, 3, 3, 3], H, 0.3), half_const(m, [8], H)], pads=[1, 1, 1, 1])
    m.out(m.node('GlobalAveragePool', [m.node('Relu', [c])]))
    m.out(m.node('MaxPool', [c], kernel_shape=[2, 2], strides=[2, 2]))
    m = hc('gemm_transB', H)
    m.out(m.node('Gemm', [m.inp([7, 20], H), half_const(m, [13, 20], H, 0.3), half_const(m, [13], H)], transB=1))
    m = hc('compare_where', H)
    x, y = m.inp([4, 9], H), m.inp([9], H)
    m.out(m.node('Where', [m.node('Less', [x, y]), x, m.node('Neg', [y])]))
    m.out(m.node('Equal', [x, x]))

    # Movement of halves (no arithmetic: the 16-bit words move), a Pad's fill value and ConstantOfShape's
    for dt in (H, BH):
        m = hc('movement', dt)
        x = m.inp([2, 3, 5], dt) if dt == H else m.node('Cast', [m.source([2, 3, 5])], to=dt)
        t = m.node('Transpose', [x], perm=[2, 0, 1])
        r = m.node('Reshape', [t, m.const(ints([5, 6]))])
        g = m.node('Gather', [r, m.const(ints([4, 0, 2, 2, 1]))], axis=0)
        sl = m.node('Slice', [r, m.const(ints([1])), m.const(ints([5])), m.const(ints([1])), m.const(ints([2]))])
        m.out(m.node('Concat', [g, sl], axis=1))
        pv = m.node('Cast', [m.const(np.float32(1.5))], to=dt)
        m.out(m.node('Pad', [x, m.const(ints([0, 1, 0, 0, 2, 1])), pv]))
        m.out(m.node('Expand', [m.node('Unsqueeze', [x, m.const(ints([1]))]), m.const(ints([2, 2, 3, 5]))]))
        if dt == H:  # (ONNX's ConstantOfShape makes no bf16)
            fill = numpy_helper.from_array(np.array([1.25], np.float16), 'v')
            m.out(m.node('Add', [m.node('ConstantOfShape', [m.const(ints([3, 5]))], value=fill), x]))
    # Casts to and from the halves: from f32 (rounding: ties, overflow to inf, subnormals, NaN), to
    # f32, integers (saturating as from f32), bool, each other, and from small integers
    # (opset 19: Cast to bf16 rounds to nearest even; before, it truncates, which ref does: lower.c leaves it)
    for dt, tag in ((H, 'f16'), (BH, 'bf16')):
        m = case('dtype_Cast_%s_all' % tag, 19)
        x = m.node('Mul', [m.source([4, 33]), m.const(np.float32(3e4 if dt == H else 1e5))])
        tiny = m.node('Mul', [m.source([4, 33]), m.const(np.float32(1e-6 if dt == H else 1e-39))])
        nan = m.node('Div', [m.node('Log', [m.source([4, 33])]), m.source([4, 33])])
        for v in (x, tiny, nan):
            hv = m.node('Cast', [v], to=dt)
            m.out(hv, [4, 33], dt)
            m.out(m.node('Cast', [hv], to=F), [4, 33], F)
        hv = m.node('Cast', [x], to=dt)
        for to in (TensorProto.INT32, TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8, B,
                   BH if dt == H else H):
            m.out(m.node('Cast', [hv], to=to), [4, 33], to)
        small = m.node('Cast', [m.node('Mul', [m.source([3, 17]), m.const(np.float32(200.0))])], to=TensorProto.INT16)
        m.out(m.node('Cast', [small], to=dt), [3, 17], dt)
        m.out(m.node('Cast', [m.node('Cast', [small], to=TensorProto.UINT8)], to=dt), [3, 17], dt)
        m.out(m.node('Cast', [m.node('Less', [x, m.const(np.float32(0))])], to=dt), [4, 33], dt)
    m = case('dtype_Cast_i64_f16')
    m.out(m.node('Cast', [m.node('Cast', [m.node('Mul', [m.source([5, 9]), m.const(np.float32(4e4))])],
                                  to=TensorProto.INT64)], to=H))

    # The transformer ops in f16 (issue 13's dtypes): Attention with a cache, RMSNormalization, RotaryEmbedding,
    # Gelu, Swish, as a half model exported from PyTorch has them
    for i in range(4):
        m = case('dtype_f16_Attention_%d' % i, opset=23)
        hkv, grp = int(rng.choice([1, 2])), int(rng.choice([1, 2]))
        hq, b, s, l, p, e = hkv * grp, int(rng.choice([1, 2])), int(rng.randint(1, 5)), int(rng.randint(1, 4)), \
            int(rng.choice([0, 5, 9])), 8
        ins = [m.inp([b, hq, s, e], H), m.inp([b, hkv, l, e], H), m.inp([b, hkv, l, e], H)]
        attrs = {'is_causal': 1} if i % 2 else {}
        if i == 2:
            ins.append(m.inp([b, 1, s, p + l], H))  # an additive mask
        elif p:
            ins.append('')
        if p:
            ins += [m.inp([b, hkv, p, e], H), m.inp([b, hkv, p, e], H)]
        outs = [m.fresh('y')] + ([m.fresh('pk'), m.fresh('pv')] if p else [])
        m.nodes.append(helper.make_node('Attention', ins, outs, name=m.fresh('n_Attention_'), **attrs))
        m.out(outs[0], [b, hq, s, e], H)
        if p:
            m.out(outs[1], [b, hkv, p + l, e], H)
            m.out(outs[2], [b, hkv, p + l, e], H)
    m = case('dtype_bf16_Attention_0', opset=23)  # grouped heads, a cache, causal
    ins = [m.inp([1, 4, 3, 8], BH), m.inp([1, 2, 3, 8], BH), m.inp([1, 2, 3, 8], BH), '', m.inp([1, 2, 6, 8], BH),
           m.inp([1, 2, 6, 8], BH)]
    outs = [m.fresh('y'), m.fresh('pk'), m.fresh('pv')]
    m.nodes.append(helper.make_node('Attention', ins, outs, name=m.fresh('n_Attention_'), is_causal=1))
    m.out(outs[0], [1, 4, 3, 8], BH)
    m.out(outs[1], [1, 2, 9, 8], BH)
    m.out(outs[2], [1, 2, 9, 8], BH)
    for dt in (H, BH):
        tag = 'f16' if dt == H else 'bf16'
        shape = [2, 3, 16]
        m = case('dtype_%s_RMSNormalization' % tag, opset=23)
        x = m.node('Cast', [m.source(shape)], to=dt)
        m.out(m.node('RMSNormalization', [x, half_const(m, [16], dt)], axis=-1, epsilon=1e-5), shape, dt)
        m = case('dtype_%s_Gelu_Swish' % tag, opset=24)
        x = m.node('Cast', [m.source(shape)], to=dt)
        m.out(m.node('Gelu', [x], approximate='tanh'), shape, dt)
        m.out(m.node('Swish', [x], alpha=1.0), shape, dt)
        m = case('dtype_%s_RotaryEmbedding' % tag, opset=23)
        ang = rng.uniform(-3, 3, size=(12, 4)).astype(np.float32)
        x = m.node('Cast', [m.source([1, 2, 5, 8])], to=dt)
        cos = m.node('Cast', [m.const(np.cos(ang))], to=dt)
        sin = m.node('Cast', [m.const(np.sin(ang))], to=dt)
        m.out(m.node('RotaryEmbedding', [x, cos, sin, m.const(rng.randint(0, 12, size=(1, 5)).astype(np.int64))]),
              [1, 2, 5, 8], dt)


def index_cases():
    """GatherElements, ScatterElements, ScatterND, Trilu, CumSum, CumProd, OneHot, EyeLike, DepthToSpace and
    SpaceToDepth compiled
    (codegen/lower.c): constant indices with negative and repeated ones, indices smaller than the data off
    the axis, every scatter reduction the compiled kernels take, and indices computed at run time (their
    range checked by the plan first; compiled where the plan can check them on the host, the cpu)."""
    def runtime_ids(m, shape, lo, hi, dt=TensorProto.INT64):
        """Indices in [lo, hi] computed from a source at run time."""
        span = np.float32(hi - lo + 0.99)
        v = m.node('Cast', [m.node('Mul', [m.node('Sigmoid', [m.source(shape)]), m.const(span)])], to=dt)
        return m.node('Add', [v, m.const(np.array(lo, np.int64 if dt == TensorProto.INT64 else np.int32))])

    rng = np.random.RandomState(5150)
    m = case('GatherElements_const_axis0')
    m.out(m.node('GatherElements', [m.source([4, 5]), m.const(rng.randint(-4, 4, size=(3, 5)))], axis=0))
    m = case('GatherElements_const_neg_axis_T')
    m.out(m.node('GatherElements', [m.source([3, 6, 4], 'T'), m.const(rng.randint(-6, 6, size=(3, 2, 4)))], axis=-2))
    m = case('GatherElements_const_smaller')
    m.out(m.node('Relu', [m.node('GatherElements', [m.source([5, 7]),
                                                     m.const(rng.randint(-7, 7, size=(3, 4)).astype(np.int32))],
                                 axis=1)]))
    m = case('GatherElements_runtime_axis1')
    m.out(m.node('GatherElements', [m.source([3, 9]), runtime_ids(m, [3, 5], -9, 8)], axis=1))
    m = case('GatherElements_runtime_i32_axis0')
    m.out(m.node('GatherElements', [m.source([6, 4]), runtime_ids(m, [2, 3], -6, 5, TensorProto.INT32)], axis=0))

    m = case('ScatterElements_const_none')
    m.out(m.node('ScatterElements', [m.source([5, 4]), m.const(ints([[1, -1, 0, 3], [1, 2, -5, 0]])),
                                     m.source([2, 4])], axis=0))
    m = case('ScatterElements_const_dup_axis1')
    m.out(m.node('ScatterElements', [m.source([3, 6], 'T'), m.const(ints([[2, 2], [-1, 0], [5, 5]])),
                                     m.source([3, 2])], axis=1))
    for red in ('add', 'mul'):
        m = case('ScatterElements_const_%s' % red, 16)
        m.out(m.node('ScatterElements', [m.source([4, 3, 5]), m.const(rng.randint(-3, 3, size=(2, 4, 5))),
                                         m.source([2, 4, 5])], axis=1, reduction=red))
    m = case('ScatterElements_runtime_axis0')
    m.out(m.node('ScatterElements', [m.source([7, 3]), runtime_ids(m, [4, 3], -7, 6), m.source([4, 3])], axis=0))
    for red in ('none', 'add', 'min', 'max'):
        m = case('dtype_ScatterElements_i64_%s' % red, 18)
        data = m.node('Cast', [m.node('Mul', [m.source([4, 6]), m.const(np.float32(9.0))])], to=TensorProto.INT64)
        upd = m.node('Cast', [m.node('Mul', [m.source([4, 3]), m.const(np.float32(9.0))])], to=TensorProto.INT64)
        m.out(m.node('ScatterElements', [data, m.const(rng.randint(-6, 6, size=(4, 3))), upd], axis=1,
                     reduction=red), [4, 6], TensorProto.INT64)

    m = case('ScatterND_const_rows')
    m.out(m.node('ScatterND', [m.source([6, 4, 3]), m.const(ints([[1], [-2], [3]])), m.source([3, 4, 3])]))
    m = case('ScatterND_const_elems_T')
    m.out(m.node('ScatterND', [m.source([5, 4], 'T'), m.const(ints([[[0, 1], [4, -1]], [[2, 2], [-5, 0]]])),
                               m.source([2, 2])]))
    for red in ('add', 'mul'):
        m = case('ScatterND_const_dup_%s' % red, 16)
        m.out(m.node('ScatterND', [m.source([4, 5]), m.const(ints([[0, 1], [2, -1], [0, 1], [-4, 1]])),
                                   m.source([4])], reduction=red))
    # a decoder's cache write: this step's key rows into [batch, heads, positions, dim] at position 5
    m = case('ScatterND_const_cache_write')
    pos = np.array([[[b, h, 5] for h in range(2)] for b in range(1)], np.int64)   # [1, 2, 3]
    m.out(m.node('ScatterND', [m.source([1, 2, 8, 4]), m.const(pos), m.source([1, 2, 4])]))
    m = case('ScatterND_runtime_rows')
    m.out(m.node('ScatterND', [m.source([6, 5]), runtime_ids(m, [3, 1], -6, 5), m.source([3, 5])]))
    m = case('dtype_ScatterND_i32_max', 18)
    data = m.node('Cast', [m.node('Mul', [m.source([3, 4]), m.const(np.float32(9.0))])], to=TensorProto.INT32)
    upd = m.node('Cast', [m.node('Mul', [m.source([3, 4]), m.const(np.float32(9.0))])], to=TensorProto.INT32)
    m.out(m.node('ScatterND', [data, m.const(ints([[2], [0], [2]])), upd], reduction='max'), [3, 4], TensorProto.INT32)

    for tag, upper, k, shape, how in (('upper', 1, None, [4, 6], 'plain'), ('lower_k2', 0, 2, [3, 5, 4], 'T'),
                                      ('upper_negk', 1, -2, [2, 7, 3], 'plain'), ('lower_bigk', 0, -100, [5, 5], 'S'),
                                      ('upper_hugek', 1, 2**40, [3, 4], 'plain')):
        m = case('Trilu_%s' % tag, 14)
        ins = [m.source(shape, how)] + ([m.const(np.int64(k))] if k is not None else [])
        m.out(m.node('Trilu', ins, upper=upper))
    m = case('dtype_Trilu_i64', 14)
    x = m.node('Cast', [m.node('Mul', [m.source([4, 4]), m.const(np.float32(9.0))])], to=TensorProto.INT64)
    m.out(m.node('Trilu', [x, m.const(np.int64(1))], upper=0))

    # CumSum/CumProd (every axis, exclusive, reverse; a decoder's position ids as an int64 cumsum of its
    # attention mask), OneHot (float and int indices, negative and out-of-range ones: all-off rows),
    # EyeLike (diagonals past the matrix too).
    for i, (shape, axis, excl, rev, how) in enumerate((([7], 0, 0, 0, 'plain'), ([3, 9], 1, 1, 0, 'T'),
                                                         ([4, 5, 6], -2, 0, 1, 'plain'), ([5, 33], -1, 1, 1, 'S'))):
        m = case('CumSum_%d' % i, 14)
        m.out(m.node('CumSum', [m.source(shape, how), m.const(np.int64(axis))], exclusive=excl, reverse=rev))
        m = case('CumProd_%d' % i, 26)
        x = m.node('Add', [m.node('Mul', [m.source(shape, how), m.const(np.float32(0.1))]), m.const(np.float32(1.0))])
        m.out(m.node('CumProd', [x, m.const(np.int32(axis))], exclusive=excl, reverse=rev), shape)
    m = case('dtype_CumSum_position_ids', 14)
    mask = m.node('Cast', [m.node('Less', [m.source([2, 11]), m.const(np.float32(0.7))])], to=TensorProto.INT64)
    m.out(m.node('Sub', [m.node('CumSum', [mask, m.const(np.int64(1))]), m.const(np.int64(1))]))
    m = case('dtype_CumSum_i32_reverse', 14)
    x = m.node('Cast', [m.node('Mul', [m.source([3, 6]), m.const(np.float32(9.0))])], to=TensorProto.INT32)
    m.out(m.node('CumSum', [x, m.const(np.int64(0))], reverse=1))
    for i, (ishape, depth, axis, float_idx) in enumerate((([5], 7, -1, True), ([2, 3], 4, 0, False),
                                                          ([3, 2], 6, 1, True), ([4], 3, -1, False))):
        m = case(('OneHot_%d' if float_idx else 'dtype_OneHot_i64_%d') % i, 11)   # vulkan stores no int64
        raw = m.node('Mul', [m.source(ishape), m.const(np.float32(depth * 1.6))])   # some outside [-depth, depth)
        idx = raw if float_idx else m.node('Cast', [raw], to=TensorProto.INT64)
        vals = m.const(np.array([-0.5, 2.0], np.float32)) if i % 2 == 0 else m.node('Relu', [m.source([2])])
        m.out(m.node('OneHot', [idx, m.const(np.float32(depth) if i == 2 else np.int64(depth)), vals], axis=axis))
    for i, (shape, k) in enumerate((([4, 6], 0), ([5, 3], -2), ([3, 3], 7))):
        m = case('EyeLike_%d' % i, 9)
        m.out(m.node('Add', [m.node('EyeLike', [m.source(shape)], k=k), m.source(shape)]))
    m = case('dtype_EyeLike_i32', 9)
    m.out(m.node('EyeLike', [m.source([3, 5])], k=1, dtype=TensorProto.INT32))

    # Hardmax (ties and the opset-11 last-axis form), ReverseSequence (constant lengths, both axis orders),
    # Shrink, integer Div and Mod by constants (negative operands, both fmod modes, unsigned).
    for i, (shape, axis, opset, how) in enumerate((([3, 7], -1, 13, 'plain'), ([4, 5, 6], 1, 13, 'T'),
                                                    ([2, 9], 1, 11, 'S'))):
        m = case('Hardmax_%d' % i, opset)
        x = m.node('Floor', [m.node('Mul', [m.source(shape, how), m.const(np.float32(2.0))])])  # ties
        m.out(m.node('Hardmax', [x], axis=axis))
    m = case('ReverseSequence_time0', 10)
    m.out(m.node('ReverseSequence', [m.source([6, 4, 3]), m.const(ints([6, 0, 3, 1]))], time_axis=0, batch_axis=1))
    m = case('ReverseSequence_batch0_T', 10)
    m.out(m.node('ReverseSequence', [m.source([3, 5, 2], 'T'), m.const(ints([2, 5, 4]))], time_axis=1, batch_axis=0))
    for i, (edt, e) in enumerate(((np.int64, 3), (np.int32, -2))):   # an f32 base, an integer exponent (opset 12+)
        m = case(('dtype_Pow_int_exponent_%d' if edt == np.int64 else 'Pow_int_exponent_%d') % i, 13)  # vulkan: no int64
        m.out(m.node('Pow', [m.node('Add', [m.node('Abs', [m.source([4, 7])]), m.const(np.float32(0.5))]),
                             m.const(np.array(e, edt))]))
    for dt, npdt, lo, hi in ((TensorProto.INT64, np.int64, -5, 2**40), (TensorProto.INT32, np.int32, -7, None),
                             (TensorProto.UINT8, np.uint8, None, 9)):
        nm = {TensorProto.INT64: 'i64', TensorProto.INT32: 'i32', TensorProto.UINT8: 'u8'}[dt]
        m = case('dtype_Clip_%s' % nm, 13)   # integer Clip (opset 12+), bounds of x's dtype, one left out
        xf = m.node('Mul', [m.source([3, 9]), m.const(np.float32(12.0))])
        if dt == TensorProto.UINT8:
            xf = m.node('Abs', [xf])
        ins = [m.node('Cast', [xf], to=dt), m.const(npdt(lo)) if lo is not None else '',
               m.const(npdt(hi)) if hi is not None else '']
        while ins[-1] == '':
            ins.pop()
        m.out(m.node('Clip', ins))
    m = case('Shrink_rand', 9)
    m.out(m.node('Shrink', [m.source([5, 9])], lambd=0.7, bias=0.2))
    for dt, tdt in ((TensorProto.INT64, np.int64), (TensorProto.INT32, np.int32), (TensorProto.UINT8, np.uint8)):
        nm = {TensorProto.INT64: 'i64', TensorProto.INT32: 'i32', TensorProto.UINT8: 'u8'}[dt]
        signed = tdt != np.uint8
        for op, attrs in (('Div', {}), ('Mod', {'fmod': 0}), ('Mod', {'fmod': 1})):
            tag = '%s%s' % (op, '_fmod' if attrs.get('fmod') else '')
            m = case('dtype_%s_const_%s' % (tag, nm), 14)
            scale = m.const(np.float32(40.0))
            xf = m.source([3, 8])
            xf = m.node('Mul', [xf, scale]) if signed else m.node('Abs', [m.node('Mul', [xf, scale])])
            x = m.node('Cast', [xf], to=dt)
            d = np.array([3, -4, 7, 5, -2, 9, 6, -11] if signed else [3, 4, 7, 5, 2, 9, 6, 11], tdt)
            m.out(m.node(op, [x, m.const(d)], **attrs))

    for mode in ('DCR', 'CRD'):
        m = case('DepthToSpace_%s' % mode, 13)
        m.out(m.node('DepthToSpace', [m.source([2, 12, 3, 2])], blocksize=2, mode=mode))
    m = case('DepthToSpace_b3_T', 13)
    m.out(m.node('DepthToSpace', [m.source([1, 9, 2, 4], 'T')], blocksize=3))
    m = case('SpaceToDepth_b2', 13)
    m.out(m.node('SpaceToDepth', [m.source([2, 3, 4, 6])], blocksize=2))
    m = case('SpaceToDepth_CRD', 28)
    m.out(m.node('SpaceToDepth', [m.source([1, 2, 6, 3])], blocksize=3, mode='CRD'), [1, 18, 2, 1])
def decompose_norm_cases():
    """GroupNormalization (opset 18: scale and bias per group; 21: per channel), MeanVarianceNormalization,
    LpNormalization, LayerNormalization with its Mean and InvStdDev outputs, NegativeLogLikelihoodLoss,
    SoftmaxCrossEntropyLoss and CastLike, which compiling devices run as the graphs passes/decompose.c
    (CastLike: passes/simplify.c's Cast) makes of them; ref runs the ops themselves. Random shapes and
    attributes from fixed seeds.
    The losses pick each target's log-probability with GatherElements: NLL_* and SCE_* compile entirely
    only where GatherElements does (NLL_runtime_* / SCE_runtime_*: targets computed at run time, whose
    range the plan checks on the host: the cpu; elsewhere mixed, see run_diff.sh). CastLike cases with a
    half or int64 operand or a bool result are named dtype_CastLike_* (mixed on vulkan, as the Casts of
    dtype_cases are)."""
    rng = np.random.RandomState(3131)
    I64, I32, H, BH = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16, TensorProto.BFLOAT16

    # GroupNormalization: 3-D to 5-D, 1 group to one per channel, constant and run-time scale/bias
    for i in range(8):
        opset = 18 if i % 2 == 0 else 21
        groups = int(rng.choice([1, 2, 3, 4]))
        c = groups * int(rng.randint(1, 4))
        shape = [int(rng.randint(1, 4)), c] + [int(d) for d in rng.randint(1, 7, size=int(rng.randint(1, 4)))]
        np_ = groups if opset == 18 else c
        m = case('GroupNorm_%d_opset%d' % (i, opset), opset)
        how = 'T' if i == 3 else 'plain'
        par = [m.source([np_]), m.source([np_])] if i % 3 == 2 else [m.randc([np_]), m.randc([np_])]
        attrs = dict(num_groups=groups)
        if i % 4 == 1:
            attrs['epsilon'] = 1e-3
        m.out(m.node('GroupNormalization', [m.source(shape, how)] + par, **attrs), shape)

    # MeanVarianceNormalization: the default axes on 4-D, negative and single axes, 3-D and 5-D
    for i, (shape, axes) in enumerate([([2, 3, 5, 7], None), ([3, 4, 6], [1]), ([2, 5, 9], [0, -1]),
                                       ([2, 3, 4, 5, 3], [2, -2, -1]), ([4, 17], [-1]), ([3, 5, 2, 4], [0, 2, 3])]):
        m = case('MVN_%d' % i)
        attrs = {} if axes is None else dict(axes=axes)
        m.out(m.node('MeanVarianceNormalization', [m.source(shape, 'T' if i == 5 else 'plain')], **attrs))

    # LpNormalization: p 1 and 2, negative and leading axes; the last case has a zero row (its norm 0)
    for i in range(6):
        r = int(rng.randint(1, 5))
        shape = [int(d) for d in rng.randint(1, 8, size=r)]
        axis = int(rng.randint(-r, r))
        m = case('LpNorm_%d_p%d' % (i, 1 + i % 2))
        m.out(m.node('LpNormalization', [m.source(shape)], axis=axis, p=1 + i % 2))
    m = case('LpNorm_zero_row')
    mask = np.ones([4, 6], np.float32)
    mask[2] = 0
    m.out(m.node('LpNormalization', [m.node('Mul', [m.source([4, 6]), m.const(mask)])], axis=1, p=2))

    # LayerNormalization with Mean and InvStdDev read (each, both), without B, a named Mean nobody reads
    for i, (shape, axis, outs, bias) in enumerate([([3, 17], -1, 'ymv', True), ([2, 3, 5], 1, 'ymv', True),
                                                   ([2, 4, 6], -2, 'ym', False), ([5, 33], 0, 'yv', True),
                                                   ([2, 3, 4, 5], -3, 'ymv', True), ([3, 9], -1, 'y_unread', True)]):
        m = case('LayerNorm_outs_%d_%s' % (i, outs), 17)
        a = axis % len(shape)
        x = m.source(shape)
        ins = [x, m.randc(shape[a:])] + ([m.randc(shape[-1:])] if bias else [])
        names = [m.fresh('y'), m.fresh('mean'), m.fresh('inv')]
        m.nodes.append(helper.make_node('LayerNormalization', ins, names, name=m.fresh('n_LayerNormalization_'),
                                        axis=axis, epsilon=1e-5 if i % 2 else 1e-3))
        m.out(names[0])
        if 'm' in outs:
            m.out(names[1])
        if 'v' in outs:
            m.out(m.node('Mul', [names[2], m.const(np.float32(0.5))]))  # read by a node, not only as an output

    # NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: 2-D and 4-D, each reduction, with and
    # without weights, ignore_index present in the targets; constant targets and run-time ones (kiln_diff
    # fills int64 inputs with 0..2; minus 1 for a negative ignore_index)
    for i in range(12):
        sce = i % 2 == 1
        op = 'SoftmaxCrossEntropyLoss' if sce else 'NegativeLogLikelihoodLoss'
        red = ['none', 'sum', 'mean'][(i // 2) % 3]
        four = i % 4 >= 2
        n, c = int(rng.randint(1, 5)), int(rng.randint(3, 7))
        spatial = [int(rng.randint(1, 4)), int(rng.randint(1, 5))] if four else []
        runtime = i >= 6
        tshape = [n] + spatial
        m = case('%s_%s_%d_%s%s' % ('SCE' if sce else 'NLL', 'runtime' if runtime else 'const', i, red,
                                    '_4d' if four else ''))
        x = m.source([n, c] + spatial)
        if not sce:
            x = m.node('LogSoftmax', [x], axis=1)
        attrs = dict(reduction=red)
        ignore = None
        if i % 3 != 0:
            ignore = [1, -1, 2, -100][i % 4]
            attrs['ignore_index'] = ignore
        if runtime:
            t = m.inp(tshape, I64)
            if ignore == -1:
                t = m.node('Sub', [t, m.const(np.int64(1))])
            if i % 5 == 0:
                t = m.node('Cast', [t], to=I32)
        else:
            tv = rng.randint(0, c, size=tshape).astype(np.int64)
            if ignore is not None:
                tv.flat[::3] = ignore
            t = m.const(tv if i % 5 else tv.astype(np.int32))
        ins = [x, t]
        if i % 4 in (1, 2):
            ins.append(m.randc([c]) if i % 8 < 4 else m.node('Abs', [m.source([c])]))
        outs = [m.fresh('loss')] + ([m.fresh('log_prob')] if sce and i % 3 == 1 else [])
        m.nodes.append(helper.make_node(op, ins, outs, name=m.fresh('n_' + op + '_'), **attrs))
        for o in outs:
            m.out(o)
    m = case('NLL_const_all_ignored_mean')  # every target ignored: 0 / 0, NaN as ref
    x = m.node('LogSoftmax', [m.source([3, 4])], axis=1)
    m.nodes.append(helper.make_node('NegativeLogLikelihoodLoss', [x, m.const(np.full([3], 2, np.int64))], ['loss'],
                                    name='n_nll_all', reduction='mean', ignore_index=2))
    m.out('loss')

    # CastLike between f32, f16, bf16, int32, int64 and bool (bf16 from f32 truncates before opset 19)
    kinds = {'f32': F, 'f16': H, 'bf16': BH, 'i32': I32, 'i64': I64, 'bool': B}
    pairs = [('f32', 'f16', 15), ('f32', 'bf16', 15), ('f32', 'bf16', 19), ('f32', 'i32', 15), ('f32', 'i64', 15),
             ('f32', 'bool', 15), ('f16', 'f32', 15), ('bf16', 'f32', 19), ('i32', 'f32', 15), ('i64', 'f32', 19),
             ('bool', 'f32', 15), ('i32', 'i64', 15), ('i64', 'i32', 15), ('f16', 'bf16', 19), ('bool', 'i32', 15),
             ('i64', 'bool', 15), ('f16', 'i64', 19), ('i32', 'f16', 15)]
    for src, dst, opset in pairs:
        name = 'CastLike_%s_%s_opset%d' % (src, dst, opset)
        # vulkan reads and writes f32, int32 and bool only, and makes no bool of a float
        vulkan = src in ('f32', 'i32', 'bool') and dst in ('f32', 'i32')
        m = case(name if vulkan else 'dtype_' + name, opset)
        shape = [3, 17]
        if src == 'f32':
            x = m.node('Mul', [m.source(shape), m.const(np.float32(50.0))])  # integers past 0 and 1
        elif src == 'bf16':
            x = m.node('Cast', [m.node('Mul', [m.source(shape), m.const(np.float32(50.0))])], to=BH)
        else:
            x = m.inp(shape, kinds[src])
        attrs = dict(saturate=1) if opset >= 19 else {}
        y = m.node('CastLike', [x, m.inp([2], kinds[dst])], **attrs)
        if opset > 17:
            m.out(y, shape, kinds[dst])
        else:
            m.out(y)  # typed by onnx's inference (a declared shape is typed f32, see Model.build)


def qlinear_cases():
    # QLinearConv / QLinearMatMul compiled (passes/decompose.c: ConvInteger / MatMulInteger, Cast, Mul by the
    # constant multiplier, QuantizeLinear with scale 1; ref requantizes in float32, ops/quant.c). 8-bit
    # inputs from QuantizeLinear of the f32 sources (scale 0.02: about +-50 steps around the zero point),
    # weights drawn from the case's RandomState; y_scale set from the sums' spread so that most outputs land
    # inside the range and the tails saturate. Named dtype_* (integer outputs, compared exactly; mixed on
    # vulkan, whose GLSL stores no 8-bit results).
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    npt = {U8: np.uint8, I8: np.int8}

    def qsrc(m, shape, dt, zp, how='plain'):
        return m.node('QuantizeLinear', [m.source(shape, how), m.const(np.float32(0.02)), m.const(npt[dt](zp))])

    def qints(m, shape, dt):
        lo, hi = (0, 256) if dt == U8 else (-128, 128)
        return m.rng.randint(lo, hi, shape).astype(npt[dt])

    def y_scale(xs, ws, k, wspread, spread):
        # The sums' standard deviation is about 50 (x's steps) * sqrt(k) * w's spread around its zero point;
        # y's steps: `spread` per standard deviation (~60: a few percent saturate; small: most do).
        return np.float32(xs * float(np.mean(ws)) * 50.0 * math.sqrt(k) * wspread / spread)

    def qconv(tag, xshape, wshape, xdt=U8, wdt=U8, ydt=U8, xzp=128, wzp=None, per_channel=False, bias=False,
              spread=60.0, **attrs):
        m = case('dtype_QLinearConv_' + tag, 10)
        co, k = wshape[0], int(np.prod(wshape[1:]))
        x = qsrc(m, xshape, xdt, xzp)
        w = qints(m, wshape, wdt)
        if wzp is None:
            wzp = 128 if wdt == U8 else 0
        wz = np.asarray(wzp, npt[wdt]).reshape(co if np.ndim(wzp) else ())
        xs = np.float32(0.02)
        ws = (np.linspace(0.5, 1.5, co) * 0.01).astype(np.float32) if per_channel else np.float32(0.01)
        wspread = float(np.std(w.astype(np.float64) - wz.reshape((-1,) + (1,) * (len(wshape) - 1)).astype(np.float64)))
        ys = y_scale(xs, ws, k, wspread, spread)
        yzp = npt[ydt](128 if ydt == U8 else -5)
        ins = [x, m.const(xs), m.const(npt[xdt](xzp)), m.const(w), m.const(ws), m.const(wz), m.const(ys), m.const(yzp)]
        if bias:
            sigma = 50.0 * math.sqrt(k) * wspread
            ins.append(m.const((m.rng.standard_normal(co) * sigma).astype(np.int32)))
        m.out(m.node('QLinearConv', ins, **attrs))

    qconv('u8_3x3_pads_bias', [1, 3, 9, 8], [4, 3, 3, 3], wzp=120, bias=True, pads=[1, 1, 1, 1])
    qconv('u8_per_channel', [2, 4, 7, 7], [5, 4, 3, 3], xzp=100, wzp=[10, 128, 0, 255, 77], per_channel=True)
    qconv('i8_per_channel_bias_s2', [1, 8, 10, 10], [12, 8, 3, 3], xdt=I8, wdt=I8, ydt=I8, xzp=-3,
          per_channel=True, bias=True, strides=[2, 2], pads=[1, 0, 1, 2])
    qconv('u8_i8_1x1_bias', [1, 16, 9, 9], [24, 16, 1, 1], wdt=I8, per_channel=True, bias=True)
    qconv('depthwise_s2_bias', [1, 6, 9, 9], [6, 1, 3, 3], wzp=128, bias=True, group=6, strides=[2, 2],
          pads=[1, 1, 1, 1])
    qconv('grouped_dilated', [1, 6, 12, 12], [9, 2, 3, 3], wdt=I8, ydt=I8, per_channel=True, group=3,
          dilations=[2, 2], pads=[2, 2, 2, 2])
    qconv('1d', [1, 3, 17], [4, 3, 5], xzp=7, pads=[2, 2])
    qconv('3d_bias', [1, 2, 5, 6, 5], [3, 2, 2, 3, 2], xdt=I8, wdt=I8, xzp=0, bias=True, pads=[1, 0, 1, 0, 1, 1])
    qconv('same_upper', [1, 3, 8, 8], [4, 3, 3, 3], auto_pad='SAME_UPPER', strides=[2, 2])
    qconv('saturating', [1, 4, 8, 8], [6, 4, 3, 3], wdt=I8, ydt=I8, per_channel=True, bias=True, spread=600.0)
    qconv('igemm_large', [1, 32, 14, 14], [32, 32, 3, 3], wdt=I8, per_channel=True, bias=True, pads=[1, 1, 1, 1])

    def qmm(tag, ashape, bshape, adt=U8, bdt=U8, ydt=U8, azp=128, bzp=None, per_row=False, per_col=False,
            b_runtime=False, spread=60.0, opset=10, scale_dtype=np.float32, out_shape=None, zp_vector=False):
        m = case('dtype_QLinearMatMul_' + tag, opset)
        k = ashape[-1]
        rows = ashape[-2] if len(ashape) > 1 else 1
        cols = bshape[-1] if len(bshape) > 1 else 1
        a = qsrc(m, ashape, adt, azp)
        if bzp is None:
            bzp = 128 if bdt == U8 else 0
        if b_runtime:
            b, bspread = qsrc(m, bshape, bdt, bzp), 50.0
        else:
            bw = qints(m, bshape, bdt)
            b, bspread = m.const(bw), float(np.std(bw.astype(np.float64) - bzp))
        as_ = (np.linspace(0.8, 1.2, rows) * 0.02) if per_row else np.float64(0.02)
        bs = (np.linspace(0.5, 1.5, cols) * 0.01) if per_col else np.float64(0.01)
        ys = y_scale(0.02, bs, k, bspread, spread) * (np.linspace(0.9, 1.1, rows) if per_row else 1.0)
        yzp = npt[ydt](128 if ydt == U8 else 3)
        ins = [a, m.const(np.asarray(as_).astype(scale_dtype)), m.const(npt[adt](azp)), b,
               m.const(np.asarray(bs).astype(scale_dtype)),
               m.const(np.full(cols, bzp, npt[bdt]) if zp_vector else npt[bdt](bzp)),
               m.const(np.asarray(ys).astype(scale_dtype)), m.const(yzp)]
        m.out(m.node('QLinearMatMul', ins), out_shape, ydt)

    qmm('2d_u8', [5, 33], [33, 7])
    qmm('2d_i8_per_col', [7, 40], [40, 9], adt=I8, bdt=I8, ydt=I8, azp=-2, per_col=True)
    qmm('2d_per_row_per_col', [6, 24], [24, 10], bdt=I8, per_row=True, per_col=True)
    qmm('3d_u8_i8', [2, 6, 17], [17, 5], bdt=I8, per_col=True)
    qmm('3d_batched_runtime_b', [3, 4, 20], [3, 20, 6], adt=I8, bdt=U8, azp=0, b_runtime=True)
    qmm('1d_a', [33], [33, 7], ydt=I8)
    qmm('saturating', [4, 30], [30, 8], bdt=I8, ydt=I8, per_col=True, spread=500.0)
    qmm('igemm_u8_i8', [37, 71], [71, 45], bdt=I8, per_col=True)
    # ORT's per-channel quantizer writes b's zero point as a vector of one value: compiled as that scalar
    qmm('per_col_zero_vector', [6, 32], [32, 8], bdt=I8, per_col=True, zp_vector=True)
    qmm('per_col_zero_vector_u8', [3, 20], [20, 5], per_col=True, zp_vector=True)
    qmm('f16_scales', [5, 33], [33, 7], bdt=I8, per_col=True, opset=21, scale_dtype=np.float16, out_shape=[5, 7])


def main(argv):
    if len(argv) < 2:
        print('usage: gen_op_sweep.py OUTDIR [--list]', file=sys.stderr)
        return 2
    out = argv[1]
    for gen in (unary_cases, binary_cases, where_cases, reduce_cases, softmax_cases, movement_cases, matmul_cases,
                gemm_cases, conv_cases, conv_transpose_cases, dtype_cases, half_cases, rnn_cases, pool_cases, layernorm_cases, epilogue_cases, structure_cases, pattern_cases,
                large_cases, host_cases, attention_cases, transformer_cases, index_cases, decompose_norm_cases, qlinear_cases):
        gen()
    os.makedirs(out, exist_ok=True)
    names = set()
    for m in CASES:
        if m.name in names:
            raise ValueError('duplicate case name ' + m.name)
        names.add(m.name)
        try:
            model = m.build()
        except Exception as e:  # a generator bug: say which case
            raise RuntimeError('case %s: %s' % (m.name, e))
        if '--list' in argv:
            print(m.name)
        onnx.save(model, os.path.join(out, m.name + '.onnx'))
    print('gen_op_sweep: %d models in %s' % (len(CASES), out))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
