"""Shared helpers for gen_op_cases.py: dtypes, random inputs, bfloat16 bits,
and a writer for single-node cases in the libonnx-testdata layout
(SUITE/CASE/model.onnx + test_data_set_0/{input,output}_K.pb).

Tensors are numpy arrays, except bfloat16 ones: numpy has no bfloat16, so a
BF16 wraps float32 values that are exactly representable in bfloat16. They
are written as uint16 bits (like ONNX 1.12's own test data) while the model
declares BFLOAT16; the runner reads them as the model says."""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ---- dtypes -------------------------------------------------------------------

# ONNX schema type strings -> our dtype names (numpy names, plus 'bfloat16').
SCHEMA_NAME = {
    'float': 'float32', 'double': 'float64', 'float16': 'float16', 'bfloat16': 'bfloat16',
    'int8': 'int8', 'int16': 'int16', 'int32': 'int32', 'int64': 'int64',
    'uint8': 'uint8', 'uint16': 'uint16', 'uint32': 'uint32', 'uint64': 'uint64',
    'bool': 'bool', 'string': 'string',
}
ONNX_TYPE = {
    'float32': TensorProto.FLOAT, 'float64': TensorProto.DOUBLE, 'float16': TensorProto.FLOAT16,
    'bfloat16': TensorProto.BFLOAT16, 'int8': TensorProto.INT8, 'int16': TensorProto.INT16,
    'int32': TensorProto.INT32, 'int64': TensorProto.INT64, 'uint8': TensorProto.UINT8,
    'uint16': TensorProto.UINT16, 'uint32': TensorProto.UINT32, 'uint64': TensorProto.UINT64,
    'bool': TensorProto.BOOL, 'string': TensorProto.STRING,
}
FLOATS = ['float16', 'float32', 'float64', 'bfloat16']
SINTS = ['int8', 'int16', 'int32', 'int64']
UINTS = ['uint8', 'uint16', 'uint32', 'uint64']
INTS = SINTS + UINTS
SHORT = {'float16': 'f16', 'float32': 'f32', 'float64': 'f64', 'bfloat16': 'bf16', 'int8': 'i8', 'int16': 'i16',
         'int32': 'i32', 'int64': 'i64', 'uint8': 'u8', 'uint16': 'u16', 'uint32': 'u32', 'uint64': 'u64',
         'bool': 'bool', 'string': 'str'}


def schema_types(op, param, opset=17, domain=''):
    """The dtypes (our names) that op's schema at opset allows for type
    parameter param; complex and non-tensor types left out (the runner does
    not compare complex outputs)."""
    s = onnx.defs.get_schema(op, opset, domain)
    for tc in s.type_constraints:
        if tc.type_param_str == param:
            out = []
            for t in tc.allowed_type_strs:
                if not t.startswith('tensor('):
                    continue
                n = t[len('tensor('):-1]
                if n in SCHEMA_NAME:
                    out.append(SCHEMA_NAME[n])
            return out
    raise KeyError('%s has no type parameter %s' % (op, param))


def is_float(dt):
    return dt in FLOATS


def is_int(dt):
    return dt in INTS


def npdt(dt):
    """numpy dtype used to hold values of dt (bf16 values live in float32)."""
    return {'bfloat16': np.float32, 'string': object}.get(dt, dt)


# ---- bfloat16 -----------------------------------------------------------------

def bf16_bits(x):
    """float values -> bfloat16 bits: to float32 first, then round to nearest
    even (NaN kept as a quiet NaN)."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float64).astype(np.float32)).view(np.uint32).astype(np.uint64)
    r = ((a + 0x7fff + ((a >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    r[nan] = 0x7fc0
    return r


def bf16_round(x):
    """float values -> the float32 values of their bfloat16 rounding."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


class BF16:
    """A bfloat16 tensor: .v holds its values as float32."""

    def __init__(self, values):
        self.v = bf16_round(values)
        self.shape = self.v.shape
        self.ndim = self.v.ndim
        self.dtype = 'bfloat16'

    def __repr__(self):
        return 'BF16(%r)' % (self.v,)


def softmax_steps(dt, v, axis, log):
    """Softmax (or LogSoftmax, log=True) along axis of the float64 values v
    as ONNX's reference evaluates it in a 16-bit float dtype dt: every step
    of the function body (x - max, exp, sum, then e / sum or (x - max) -
    log(sum)) rounds to dt. float16 is numpy's own float16 arithmetic (the
    reference's): its sum accumulates in float and rounds once along the
    contiguous axis, and rounds each addition along a strided one. bfloat16
    is float32 arithmetic rounded to bfloat16, the sum rounded after every
    addition as ml_dtypes' reduction does. Returns float64 values."""
    if dt == 'float16':
        x = np.asarray(v).astype(np.float16)
        d = x - x.max(axis, keepdims=True)
        e = np.exp(d)
        s = e.sum(axis, keepdims=True)
        return (d - np.log(s) if log else e / s).astype(np.float64)
    assert dt == 'bfloat16', dt

    def rnd(a):
        return bf16_round(np.asarray(a, dtype=np.float32))
    x = np.asarray(v, dtype=np.float32)
    d = rnd(x - x.max(axis, keepdims=True))
    e = rnd(np.exp(d))
    s = np.zeros_like(np.take(e, [0], axis))
    for k in range(e.shape[axis]):
        s = rnd(s + np.take(e, [k], axis))
    return (rnd(d - rnd(np.log(s))) if log else rnd(e / s)).astype(np.float64)


def dtname(t):
    """Our dtype name for a tensor value."""
    if isinstance(t, BF16):
        return 'bfloat16'
    t = np.asarray(t)
    if t.dtype == object or t.dtype.kind in 'US':
        return 'string'
    return t.dtype.name


def make(dt, values):
    """A tensor of dtype dt holding values (rounded/converted as astype does)."""
    if dt == 'bfloat16':
        return BF16(np.asarray(values, dtype=np.float64))
    if dt == 'string':
        return np.asarray(values, dtype=object)
    return np.asarray(values).astype(dt)


def out(dt, r):
    """A reference result r (float64 or exact integers) as a dtype-dt output:
    floats round to nearest (bf16: via float32, then nearest even), float
    results for integer outputs truncate toward zero, integers wrap."""
    r = np.asarray(r)
    if dt == 'bfloat16':
        return BF16(r.astype(np.float64))
    if dt == 'string':
        return r.astype(object)
    if dt == 'bool':
        return r.astype(bool)
    if is_int(dt) and r.dtype.kind == 'f':
        with np.errstate(invalid='ignore'):
            return np.trunc(r).astype(dt)
    with np.errstate(over='ignore'):
        return r.astype(dt)


def f64(t):
    """Values of a tensor in float64 (bf16 included)."""
    if isinstance(t, BF16):
        return t.v.astype(np.float64)
    return np.asarray(t).astype(np.float64)


def vals(t):
    """Values for a reference: float64 for float tensors, the exact array
    otherwise."""
    if isinstance(t, BF16) or np.asarray(t).dtype.kind == 'f':
        return f64(t)
    return np.asarray(t)


INT_RANGE = {d: (np.iinfo(d).min, np.iinfo(d).max) for d in INTS}


class Rand:
    """Deterministic random inputs."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def floats(self, dt, shape, lo=-3.0, hi=3.0):
        return make(dt, self.rng.uniform(lo, hi, shape))

    def ints(self, dt, shape, lo=-20, hi=20):
        lo = max(lo, INT_RANGE[dt][0])
        hi = min(hi, INT_RANGE[dt][1])
        return self.rng.integers(lo, hi, shape, endpoint=True, dtype=np.int64 if dt != 'uint64' else np.uint64).astype(dt)

    def of(self, dt, shape, lo=-3.0, hi=3.0, ilo=None, ihi=None):
        """Values of dtype dt: floats in [lo, hi], ints in [ilo, ihi] (default
        the float range widened to ints), bools random, strings from a pool."""
        if is_float(dt):
            return self.floats(dt, shape, lo, hi)
        if is_int(dt):
            return self.ints(dt, shape, int(np.floor(lo * 4)) if ilo is None else ilo,
                             int(np.ceil(hi * 4)) if ihi is None else ihi)
        if dt == 'bool':
            return self.rng.random(shape) < 0.5
        if dt == 'string':
            pool = np.array(['', 'a', 'bc', 'Def', 'xyz', 'é', 'long string', '0', 'ab', 'zz'], dtype=object)
            return pool[self.rng.integers(0, len(pool), shape)]
        raise ValueError(dt)

    def perm(self, n):
        return self.rng.permutation(n)

    def integers(self, lo, hi, shape=None):
        return self.rng.integers(lo, hi, shape)

    def uniform(self, lo, hi, shape=None):
        return self.rng.uniform(lo, hi, shape)

    def normal(self, shape):
        return self.rng.standard_normal(shape)


# ---- the writer -----------------------------------------------------------------

def tensor_proto(t, name):
    if isinstance(t, BF16):
        p = numpy_helper.from_array(bf16_bits(t.v), name)
        return p
    a = np.asarray(t)
    if a.dtype.kind in 'US':
        a = a.astype(object)
    return numpy_helper.from_array(a, name)


class Seq(list):
    """A sequence of tensors whose element dtype is stated (for empty ones)."""

    def __init__(self, items, elem):
        super().__init__(items)
        self.elem = elem


class Opt:
    """An optional value: a tensor, a sequence (list) or None (empty), with
    the element type for the empty case ('float32' or Seq([], dt))."""

    def __init__(self, value, like=None):
        self.value = value
        self.like = value if value is not None else like


def _seq_elem(v):
    return v.elem if isinstance(v, Seq) else (dtname(v[0]) if v else 'float32')


def type_proto(v, shape=True):
    """A TypeProto for a tensor, a sequence (list) of tensors or an Opt."""
    if isinstance(v, Opt):
        return helper.make_optional_type_proto(type_proto(v.like, shape=False))
    if isinstance(v, list):
        return helper.make_sequence_type_proto(helper.make_tensor_type_proto(ONNX_TYPE[_seq_elem(v)], None))
    return helper.make_tensor_type_proto(ONNX_TYPE[dtname(v)], list(v.shape) if shape else None)


def value_proto(v, name):
    return helper.make_value_info(name, type_proto(v))


def _sequence_proto(v, name):
    seq = onnx.SequenceProto()
    seq.name = name
    seq.elem_type = onnx.SequenceProto.TENSOR
    for item in v:
        seq.tensor_values.append(tensor_proto(item, ''))
    return seq


def serialize(v, name):
    if isinstance(v, Opt):
        o = onnx.OptionalProto()
        o.name = name
        if v.value is None:
            o.elem_type = onnx.OptionalProto.UNDEFINED
        elif isinstance(v.value, list):
            o.elem_type = onnx.OptionalProto.SEQUENCE
            o.sequence_value.CopyFrom(_sequence_proto(v.value, name))
        else:
            o.elem_type = onnx.OptionalProto.TENSOR
            o.tensor_value.CopyFrom(tensor_proto(v.value, name))
        return o.SerializeToString()
    if isinstance(v, list):
        return _sequence_proto(v, name).SerializeToString()
    return tensor_proto(v, name).SerializeToString()


class Writer:
    """Writes cases under root/<suite>/<name>; remembers the names."""

    def __init__(self, root, check=False):
        self.root = root
        self.check = check
        self.names = {}
        self.bytes = 0

    def graph_case(self, suite, name, nodes, inputs, outputs, opset=17):
        """A model of several nodes: inputs and outputs are (name, value)
        pairs (graph inputs in order, graph outputs in order)."""
        names = self.names.setdefault(suite, set())
        if name in names:
            raise ValueError('duplicate case %s/%s' % (suite, name))
        names.add(name)
        g = helper.make_graph(nodes, name, [value_proto(v, n) for n, v in inputs], [value_proto(v, n) for n, v in outputs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)], producer_name='kiln gen_op_cases')
        m.ir_version = 8
        if self.check:
            try:
                onnx.checker.check_model(m)
                onnx.shape_inference.infer_shapes(m, strict_mode=True)
            except Exception as e:  # noqa: BLE001 - report and go on
                print('check %s/%s: %s' % (suite, name, str(e).splitlines()[-1]))
        self._write(suite, name, m, inputs, outputs)

    def _write(self, suite, name, m, inputs, outputs):
        d = os.path.join(self.root, suite, name)
        sd = os.path.join(d, 'test_data_set_0')
        os.makedirs(sd)
        files = [('model.onnx', m.SerializeToString())]
        files += [('test_data_set_0/input_%d.pb' % k, serialize(v, n)) for k, (n, v) in enumerate(inputs)]
        files += [('test_data_set_0/output_%d.pb' % k, serialize(v, n)) for k, (n, v) in enumerate(outputs)]
        for path, blob in files:
            self.bytes += len(blob)
            with open(os.path.join(d, path), 'wb') as f:
                f.write(blob)

    def case(self, suite, name, op, inputs, outputs, attrs=None, opset=17, domain='', inits=(),
             n_outputs=None, out_shapes=True, extra_inputs=()):
        """One single-node model. inputs: tensors, BF16s, lists (sequences)
        or None (an absent optional input). outputs: the expected outputs of
        the node's first len(outputs) outputs; n_outputs > len(outputs) asks
        for more node outputs that are not graph outputs (unused). inits:
        indices of inputs given as initializers instead of graph inputs.
        extra_inputs: (name, value) graph inputs the node does not take
        (read by subgraphs from the outer scope); fed after the node's."""
        names = self.names.setdefault(suite, set())
        if name in names:
            raise ValueError('duplicate case %s/%s' % (suite, name))
        names.add(name)
        in_names = ['x%d' % i for i in range(len(inputs))]
        node_in = [n if v is not None else '' for n, v in zip(in_names, inputs)]
        while node_in and node_in[-1] == '':
            node_in.pop()
        out_names = ['y%d' % i for i in range(len(outputs))]
        node_out = list(out_names)
        if n_outputs:
            node_out += ['unused%d' % i for i in range(n_outputs - len(outputs))]
        node = helper.make_node(op, node_in, node_out, domain=domain or None, **(attrs or {}))
        g_in = [value_proto(v, n) for i, (n, v) in enumerate(zip(in_names, inputs))
                if v is not None and i not in inits]
        g_in += [value_proto(v, n) for n, v in extra_inputs]
        init = [tensor_proto(v, n) for i, (n, v) in enumerate(zip(in_names, inputs)) if i in inits]
        g_out = []
        for n, v in zip(out_names, outputs):
            if isinstance(v, (list, Opt)) or out_shapes:
                g_out.append(value_proto(v, n))
            else:
                g_out.append(helper.make_value_info(n, type_proto(v, shape=False)))
        g = helper.make_graph([node], name, g_in, g_out, initializer=init)
        imports = [helper.make_opsetid('', opset if not domain else 17)]
        if domain:
            imports.append(helper.make_opsetid(domain, opset))
        m = helper.make_model(g, opset_imports=imports, producer_name='kiln gen_op_cases')
        m.ir_version = 8
        if self.check:
            try:
                onnx.checker.check_model(m)
                onnx.shape_inference.infer_shapes(m, strict_mode=True)
            except Exception as e:  # noqa: BLE001 - report and go on
                print('check %s/%s: %s' % (suite, name, str(e).splitlines()[-1]))
        fed = [(n, v) for i, (n, v) in enumerate(zip(in_names, inputs)) if v is not None and i not in inits]
        self._write(suite, name, m, fed + list(extra_inputs), list(zip(out_names, outputs)))
