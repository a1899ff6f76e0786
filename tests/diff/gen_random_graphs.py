#!/usr/bin/env python3
"""Writes random ONNX graphs for kiln's differential test (kiln_diff runs
each on the cpu device and on ref and compares the outputs).

    gen_random_graphs.py OUTDIR [--count N] [--seed S]

Each graph is a DAG of 3-20 nodes mixing the ops the cpu device claims:
elementwise and broadcast ops, reductions and softmax, transpose / reshape /
flatten / squeeze / unsqueeze / slice / concat / expand, MatMul, Gemm,
Conv, pooling and LayerNormalization, with random constants as initializers, 1-3 graph inputs (f32, plus a
bool condition input now and then) and 1-2 outputs. Operands are picked
among all earlier values, so values often have several consumers, and
graph outputs may also feed other nodes. A few nodes the cpu device does
not claim (comparisons feeding Where, softmax over a leading axis) put
reference steps between compiled kernels.

Shapes are tracked while building and checked against onnx's shape
inference. Values are kept O(1) (weights scaled by 1/sqrt(fan-in),
denominators and logarithm/square-root arguments kept away from zero,
discontinuous ops such as Floor only applied to values both devices hold
bit-exactly, LayerNormalization epsilon >= 1e-3), so a difference beyond rtol 1e-3 / atol 1e-4 is a bug, not
rounding.

The seed defaults to the time and is printed; `--seed S` regenerates the
same graphs (file names carry the seed and the graph number)."""
import argparse
import math
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
BOOL = TensorProto.BOOL
OPSET = 17  # LayerNormalization; the other ops keep their opset-13/14 forms
MAX_NUMEL = 2048
BIG_NUMEL = 65536
DIMS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33]
INT64_MAX = 2**63 - 1
INT64_MIN = -2**63


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def bcast(a, b):
    """numpy broadcast of two shapes, or None."""
    r = max(len(a), len(b))
    a = [1] * (r - len(a)) + list(a)
    b = [1] * (r - len(b)) + list(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return out


class Val:
    def __init__(self, name, shape, mag=1.0, exact=False, kind='f'):
        self.name = name
        self.shape = list(shape)
        self.mag = mag        # rough bound of typical |values|
        self.exact = exact    # both devices hold the same bits (inputs, constants, exact ops of them)
        self.kind = kind      # 'f' float, 'b' bool


class GraphGen:
    def __init__(self, rng, name):
        self.r = rng
        self.name = name
        self.nodes, self.inputs, self.inits = [], [], []
        self.pool = []        # float values usable as operands
        self.n = 0
        self.n_inputs = 0
        self.ops_used = []
        # One graph in eight uses tensors big enough that compiled kernels
        # split their loops over threads (chunks of >= 16384 elements).
        self.big = self.coin(0.125)
        self.max_numel = BIG_NUMEL if self.big else MAX_NUMEL

    # ---- plumbing ---------------------------------------------------------------

    def fresh(self, base):
        self.n += 1
        return '%s%d' % (base, self.n)

    def choice(self, seq):
        return seq[self.r.randint(len(seq))]

    def coin(self, p=0.5):
        return self.r.rand() < p

    def new_input(self, shape, kind='f'):
        name = self.fresh('in')
        self.inputs.append(helper.make_tensor_value_info(name, F if kind == 'f' else BOOL, list(shape)))
        self.n_inputs += 1
        v = Val(name, shape, 1.0, True, kind)
        if kind == 'f':
            self.pool.append(v)
        return v

    def const(self, arr):
        name = self.fresh('w')
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def const_val(self, shape, scale=1.0):
        arr = (self.r.standard_normal(shape) * scale).astype(np.float32)
        return Val(self.const(arr), shape, scale, True)

    def ints(self, v):
        return self.const(np.array(v, dtype=np.int64))

    def scalar(self, x):
        return self.const(np.array(x, dtype=np.float32))

    def emit(self, op, ins, shape, mag=1.0, exact=False, add=True, **attrs):
        out = self.fresh('v')
        self.nodes.append(helper.make_node(op, [i if isinstance(i, str) else i.name for i in ins], [out],
                                           name=self.fresh(op + '_'), **attrs))
        self.ops_used.append(op)
        v = Val(out, shape, mag, exact)
        if add:
            self.pool.append(v)
        return v

    def pick(self, pred=None):
        """An operand: usually the newest value (chains), else any earlier one (DAG)."""
        cands = [v for v in self.pool if pred is None or pred(v)]
        if not cands:
            return None
        if self.coin(0.55):
            return cands[-1]
        return self.choice(cands)

    # ---- value conditioning ----------------------------------------------------------

    def normalized(self, v, limit=4.0):
        """v with typical magnitude <= limit (a Mul by a constant, or Tanh)."""
        if v.mag <= limit:
            return v
        if self.coin(0.3):
            return self.emit('Tanh', [v], v.shape, 1.0)
        return self.emit('Mul', [v, self.scalar(1.0 / v.mag)], v.shape, 1.0)

    def positive(self, v, lo=0.1):
        """|v| + c with c >= lo: away from zero (Log, Sqrt, denominators)."""
        a = self.emit('Abs', [v], v.shape, v.mag, v.exact, add=False)
        c = float(self.r.uniform(lo, 1.0))
        return self.emit('Add', [a, self.scalar(c)], v.shape, v.mag + c, add=False)

    def partner_shape(self, shape):
        """A shape broadcast-compatible with `shape` (unit dims, fewer leading dims)."""
        s = list(shape)
        if s and self.coin(0.3):
            s = s[self.r.randint(len(s) + 1):]
        s = [1 if self.coin(0.3) else d for d in s]
        if self.coin(0.15) and len(s) == len(shape) and len(s) < 4:
            s = [self.choice([2, 3])] + s if numel(shape) * 3 <= self.max_numel else s
        return s

    def operand_like(self, shape):
        """A second operand for a binary op with `shape`: a pool value that
        broadcasts with it, a constant, or a new graph input."""
        u = self.r.rand()
        if u < 0.35:
            cands = [v for v in self.pool if v.shape != [] or True]
            cands = [v for v in cands if bcast(shape, v.shape) is not None and numel(bcast(shape, v.shape)) <= self.max_numel]
            if cands:
                return self.choice(cands)
        ps = self.partner_shape(shape)
        if u < 0.5 and self.n_inputs < 3:
            return self.new_input(ps)
        return self.const_val(ps)

    # ---- op generators ---------------------------------------------------------------

    def g_unary(self):
        v = self.pick()
        ops = ['Relu', 'LeakyRelu', 'Sigmoid', 'Tanh', 'Exp', 'Log', 'Sqrt', 'Neg', 'Abs', 'Erf', 'Reciprocal',
               'Floor', 'Ceil', 'Round', 'Elu', 'HardSigmoid', 'HardSwish', 'Clip', 'Softplus', 'Softsign', 'Sin',
               'Cos', 'Identity', 'Selu', 'Dropout']
        op = self.choice(ops)
        if op in ('Floor', 'Ceil', 'Round') and not v.exact:
            cands = [x for x in self.pool if x.exact]
            if not cands:
                op = 'Relu'
            else:
                v = self.choice(cands)
        attrs, mag, exact = {}, v.mag, False
        ins = [v]
        if op == 'Exp':
            v = self.normalized(v, 2.5)
            ins, mag = [v], math.exp(min(v.mag, 2.5)) + 1
        elif op in ('Log', 'Sqrt'):
            ins = [self.positive(v)]
            mag = 3.0
        elif op == 'Reciprocal':
            ins, mag = [self.positive(v, 0.5)], 2.0
        elif op in ('Neg', 'Abs', 'Relu', 'Identity', 'Floor', 'Ceil', 'Round', 'Dropout'):
            exact = v.exact
            mag = v.mag + (1 if op in ('Floor', 'Ceil', 'Round') else 0)
        elif op == 'LeakyRelu':
            attrs['alpha'] = float(self.choice([0.01, 0.2, 0.5]))
        elif op == 'Elu':
            attrs['alpha'] = float(self.choice([1.0, 0.5]))
            v = self.normalized(v, 8)
            ins = [v]
        elif op == 'Selu':
            v = self.normalized(v, 8)
            ins, mag = [v], v.mag * 1.1 + 2
        elif op == 'HardSigmoid':
            attrs = {'alpha': float(self.choice([0.2, 0.3])), 'beta': float(self.choice([0.5, 0.4]))}
            mag = 1.0
        elif op == 'Clip':
            lo = float(self.r.uniform(-1.5, 0))
            hi = float(self.r.uniform(0, 1.5))
            ins = [v, self.scalar(lo), self.scalar(hi)] if self.coin() else [v, '', self.scalar(hi)]
            exact = v.exact
            mag = min(v.mag, 1.5)
        elif op in ('Sin', 'Cos'):
            # a bounded argument: sin turns an input's relative rounding into an absolute error
            # (Sin(Exp(x * x)) over a normal tail: exp(9) = 8103, a few ulp of it 0.007 of sin, seed 505081)
            # (Tanh first, always: "typical" magnitudes are estimates a tail exceeds)
            v = self.emit('Tanh', [v], v.shape, 1.0)
            ins, mag = [v], 1.0
        elif op in ('Sigmoid', 'Tanh', 'Erf', 'Softsign'):
            mag = 1.0
        elif op == 'Softplus':
            mag = v.mag + 1
        self.emit(op, ins, v.shape, mag, exact, **attrs)

    def g_binary(self):
        v = self.pick()
        op = self.choice(['Add', 'Sub', 'Mul', 'Div', 'Max', 'Min', 'Sum', 'Mean', 'Pow', 'PRelu', 'Where', 'Add',
                          'Mul'])
        if op == 'PRelu':
            s = [1 if self.coin(0.5) else d for d in v.shape]
            s = s[self.r.randint(len(s) + 1):] if s else s
            slope = self.const_val(s, 0.5)
            self.emit('PRelu', [v, slope], v.shape, v.mag)
            return
        if op == 'Where':
            cond_src = [x for x in self.pool if x.exact]
            if cond_src and self.coin(0.6):
                c0 = self.choice(cond_src)
                cond = self.emit('Greater', [c0, self.scalar(float(self.r.uniform(-0.5, 0.5)))], c0.shape, add=False)
                cshape = c0.shape
            else:
                cshape = self.partner_shape(v.shape)
                cond = self.new_input(cshape, 'b') if self.n_inputs < 4 else None
                if cond is None:
                    cshape = v.shape
                    c0 = v if v.exact else self.new_input(v.shape) if self.n_inputs < 3 else None
                    if c0 is None:
                        return self.g_unary()
                    cond = self.emit('Less', [c0, self.scalar(0.0)], c0.shape, add=False)
            w = self.operand_like(v.shape)
            shape = bcast(bcast(cshape, v.shape) or v.shape, w.shape)
            if shape is None or bcast(cshape, v.shape) is None or numel(shape) > self.max_numel:
                return self.g_unary()
            self.emit('Where', [cond, v, w], shape, max(v.mag, w.mag), v.exact and w.exact)
            return
        w = self.operand_like(v.shape)
        if self.coin(0.3):
            v, w = w, v
        shape = bcast(v.shape, w.shape)
        if shape is None or numel(shape) > self.max_numel:
            return self.g_unary()
        if op in ('Sum', 'Mean') and self.coin(0.5):
            x = self.operand_like(shape)
            s2 = bcast(shape, x.shape)
            if s2 is not None and numel(s2) <= self.max_numel:
                self.emit(op, [v, w, x], s2, v.mag + w.mag + x.mag)
                return
        mag = v.mag + w.mag
        exact = False
        ins = [v, w]
        if op == 'Mul':
            mag = v.mag * w.mag
        elif op == 'Div':
            if self.coin(0.5):
                ins = [v, self.positive(w, 0.5)]
            else:
                c = self.r.uniform(0.5, 2.0, size=self.partner_shape(v.shape)) * self.choice([-1, 1])
                ins = [v, self.const(c.astype(np.float32))]
                shape = bcast(v.shape, list(c.shape))
            mag = v.mag * 2
        elif op in ('Max', 'Min'):
            mag = max(v.mag, w.mag)
            exact = v.exact and w.exact
        elif op == 'Pow':
            base = self.positive(self.normalized(v, 2), 0.2)
            if self.coin(0.6):
                e = float(self.choice([2.0, 3.0, 0.5, 1.5, -1.0]))
                ins = [base, self.scalar(e)]
                shape = v.shape
            else:
                ins = [base, self.emit('Tanh', [w], w.shape, add=False)]
            mag = 30.0
        out = self.emit(op, ins, shape, mag, exact)
        if out.mag > 8:
            self.normalized(out)

    def g_reduce(self):
        v = self.pick(lambda x: len(x.shape) >= 1)
        if v is None:
            return self.g_unary()
        r = len(v.shape)
        if self.coin(0.25):
            op = self.choice(['Softmax', 'LogSoftmax'])
            # a trailing axis usually (claimed), a leading one now and then (runs on ref)
            axis = -1 if self.coin(0.85) else self.r.randint(r)
            self.emit(op, [self.normalized(v, 6)], v.shape, 1.0 if op == 'Softmax' else 8.0, axis=int(axis))
            return
        op = self.choice(['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceSumSquare',
                          'ReduceL1', 'ReduceL2', 'ReduceLogSumExp', 'ReduceLogSum'])
        if self.coin(0.2):
            axes = None
        else:
            k = self.r.randint(1, r + 1)
            axes = sorted(self.r.choice(r, k, replace=False).tolist())
        red = list(range(r)) if axes is None else axes
        count = numel([v.shape[i] for i in red])
        keep = int(self.coin())
        shape = [1 if i in red else d for i, d in enumerate(v.shape)] if keep else \
            [d for i, d in enumerate(v.shape) if i not in red]
        x = v
        mag = v.mag
        if op == 'ReduceProd':
            if count > 8:
                return self.g_unary()
            x = self.normalized(v, 1.5)
            mag = 1.5 ** count
        elif op == 'ReduceLogSum':
            x = self.positive(v)
            mag = 5.0
        elif op in ('ReduceSum', 'ReduceL1'):
            mag = v.mag * count
        elif op == 'ReduceSumSquare':
            mag = v.mag * v.mag * count
        elif op == 'ReduceL2':
            mag = v.mag * math.sqrt(count)
        elif op == 'ReduceLogSumExp':
            x = self.normalized(v, 6)
            mag = x.mag + math.log(count + 1)
        if axes is not None and self.coin(0.3):
            axes = [a - r if self.coin() else a for a in axes]  # negative axes
        if op == 'ReduceSum':
            ins = [x] + ([self.ints(axes)] if axes is not None else [])
            out = self.emit(op, ins, shape, mag, keepdims=keep)
        else:
            attrs = {'keepdims': keep}
            if axes is not None:
                attrs['axes'] = axes
            out = self.emit(op, [x], shape, mag, **attrs)
        if out.mag > 8:
            self.normalized(out)

    def g_transpose(self):
        v = self.pick(lambda x: len(x.shape) >= 2)
        if v is None:
            return self.g_reshape()
        perm = self.r.permutation(len(v.shape)).tolist()
        attrs = {} if self.coin(0.15) else {'perm': perm}
        if not attrs:
            perm = list(range(len(v.shape)))[::-1]
        self.emit('Transpose', [v], [v.shape[p] for p in perm], v.mag, v.exact, **attrs)

    def factor_shape(self, n):
        """A random shape (rank 1-4) with n elements."""
        f, m, p = [], n, 2
        while m > 1:
            while m % p == 0:
                f.append(p)
                m //= p
            p += 1
        rank = self.r.randint(1, 5)
        dims = [1] * rank
        for x in f:
            dims[self.r.randint(rank)] *= x
        return dims

    def g_reshape(self):
        v = self.pick()
        n = numel(v.shape)
        op = self.choice(['Reshape', 'Reshape', 'Flatten', 'Squeeze', 'Unsqueeze'])
        if op == 'Reshape':
            new = self.factor_shape(n)
            spec = list(new)
            if self.coin(0.4):
                spec[self.r.randint(len(spec))] = -1
            elif self.coin(0.3) and len(v.shape) >= 1 and len(spec) >= 1 and spec[0] == v.shape[0]:
                spec[0] = 0
            self.emit('Reshape', [v, self.ints(spec)], new, v.mag, v.exact)
        elif op == 'Flatten':
            r = len(v.shape)
            axis = self.r.randint(0, r + 1)
            a, b = numel(v.shape[:axis]), numel(v.shape[axis:])
            if self.coin(0.3) and 0 < axis < r:
                axis -= r
            self.emit('Flatten', [v], [a, b], v.mag, v.exact, axis=int(axis))
        elif op == 'Squeeze':
            units = [i for i, d in enumerate(v.shape) if d == 1]
            if not units:
                return self.g_unsqueeze(v)
            k = self.r.randint(1, len(units) + 1)
            axes = sorted(self.r.choice(units, k, replace=False).tolist())
            shape = [d for i, d in enumerate(v.shape) if i not in axes]
            self.emit('Squeeze', [v, self.ints(axes)], shape, v.mag, v.exact)
        else:
            self.g_unsqueeze(v)

    def g_unsqueeze(self, v):
        if len(v.shape) >= 5:
            return self.emit('Identity', [v], v.shape, v.mag, v.exact)
        k = self.r.randint(1, 3)
        out_r = len(v.shape) + k
        axes = sorted(self.r.choice(out_r, k, replace=False).tolist())
        shape, it = [], iter(v.shape)
        for i in range(out_r):
            shape.append(1 if i in axes else next(it))
        if self.coin(0.3):
            axes = [a - out_r for a in axes]
        self.emit('Unsqueeze', [v, self.ints(axes)], shape, v.mag, v.exact)

    def g_slice(self):
        v = self.pick(lambda x: len(x.shape) >= 1 and numel(x.shape) > 1)
        if v is None:
            return self.g_unary()
        r = len(v.shape)
        k = self.r.randint(1, r + 1)
        axes = sorted(self.r.choice(r, k, replace=False).tolist())
        starts, ends, steps, shape = [], [], [], list(v.shape)
        for a in axes:
            d = v.shape[a]
            for _ in range(20):
                step = int(self.choice([1, 1, 2, 3, -1, -2]))
                cand = [0, 1, 2, -1, -2, d // 2, d - 1, d, d + 3, -d - 3, INT64_MAX, INT64_MIN]
                s, e = int(self.choice(cand)), int(self.choice(cand))
                n = len(range(*slice(s, e, step).indices(d)))
                if n >= 1:
                    break
            else:
                s, e, step, n = 0, d, 1, d
            starts.append(s)
            ends.append(e)
            steps.append(step)
            shape[a] = n
        ins = [v, self.ints(starts), self.ints(ends)]
        use_axes = [a - r if self.coin(0.3) else a for a in axes]
        if use_axes != list(range(k)) or any(st != 1 for st in steps) or self.coin(0.3):
            ins.append(self.ints(use_axes))
            if any(st != 1 for st in steps) or self.coin(0.3):
                ins.append(self.ints(steps))
        self.emit('Slice', ins, shape, v.mag, v.exact)

    def g_concat(self):
        v = self.pick(lambda x: len(x.shape) >= 1)
        if v is None:
            return self.g_unary()
        r = len(v.shape)
        axis = self.r.randint(r)
        parts = [v]
        total = v.shape[axis]
        for _ in range(self.r.randint(1, 4)):
            rest = numel(v.shape) // v.shape[axis]
            same = [x for x in self.pool if len(x.shape) == r and
                    all(x.shape[i] == v.shape[i] for i in range(r) if i != axis)]
            if same and self.coin(0.6):
                w = self.choice(same)
            else:
                s = list(v.shape)
                s[axis] = int(self.choice([1, 2, 3, 5]))
                w = self.new_input(s) if self.n_inputs < 3 and self.coin(0.4) else self.const_val(s)
            if (total + w.shape[axis]) * rest > self.max_numel:
                break
            parts.append(w)
            total += w.shape[axis]
        if len(parts) == 1 and self.coin(0.5):
            parts.append(v)  # the same value twice
            total *= 2
        shape = list(v.shape)
        shape[axis] = total
        a = axis - r if self.coin(0.3) else axis
        self.emit('Concat', parts, shape, max(p.mag for p in parts), all(p.exact for p in parts), axis=int(a))

    def g_expand(self):
        v = self.pick(lambda x: numel(x.shape) * 2 <= self.max_numel)
        if v is None:
            return self.g_unary()
        target = [self.choice([2, 3, 5]) if d == 1 and self.coin(0.7) else d for d in v.shape]
        if len(target) < 4 and self.coin(0.3):
            target = [self.choice([2, 3])] + target
        if numel(target) > self.max_numel:
            target = list(v.shape)
        spec = [1 if (self.coin(0.2) and i >= len(target) - len(v.shape) and
                      v.shape[i - (len(target) - len(v.shape))] == t) else t for i, t in enumerate(target)]
        self.emit('Expand', [v, self.ints(spec)], target, v.mag, v.exact)

    def g_matmul(self):
        v = self.pick(lambda x: len(x.shape) >= 1)
        if v is None:
            return self.g_unary()
        v = self.normalized(v, 3)
        K = v.shape[-1]
        N = int(self.choice([1, 3, 5, 8, 16, 17, 33]))
        batch = v.shape[:-2]
        u = self.r.rand()
        if u < 0.15:
            bshape = [K]                      # 1-D right operand
        elif u < 0.3 and len(v.shape) >= 3:
            bshape = list(v.shape[-3:-2]) + [K, N]   # batched
        elif u < 0.4:
            bshape = [self.choice([1, 2])] + [K, N]
        else:
            bshape = [K, N]
        a_rows = v.shape[:-1] if len(v.shape) >= 2 else []
        if len(bshape) == 1:
            shape = a_rows
        else:
            bb = bcast(batch, bshape[:-2])
            if bb is None:
                return self.g_unary()
            shape = bb + (a_rows[-1:] if len(v.shape) >= 2 else []) + [N]
        if numel(shape) > self.max_numel:
            return self.g_unary()
        if self.coin(0.7):
            b = self.const_val(bshape, 1.0 / math.sqrt(K))
            mag = 3.0
        else:
            src = self.new_input(bshape) if self.n_inputs < 3 else self.const_val(bshape)
            b = src
            mag = 3.0 * math.sqrt(K)
        out = self.emit('MatMul', [v, b], shape, mag)
        if out.mag > 8:
            self.normalized(out)

    def g_gemm(self):
        v = self.pick(lambda x: len(x.shape) >= 1)
        if v is None:
            return self.g_unary()
        v = self.normalized(v, 3)
        if len(v.shape) != 2:
            r = len(v.shape)
            axis = self.r.randint(0, r + 1)
            v = self.emit('Flatten', [v], [numel(v.shape[:axis]), numel(v.shape[axis:])], v.mag, v.exact, axis=axis)
        ta, tb = int(self.coin(0.3)), int(self.coin(0.4))
        M, K = (v.shape[1], v.shape[0]) if ta else (v.shape[0], v.shape[1])
        N = int(self.choice([1, 3, 7, 16, 17, 33]))
        if M * N > self.max_numel:
            return self.g_unary()
        b = self.const_val([N, K] if tb else [K, N], 1.0 / math.sqrt(K))
        alpha = float(self.choice([1.0, 1.0, 0.5, -1.25]))
        beta = float(self.choice([1.0, 1.0, 0.0, 2.0]))
        cs = self.choice([None, [N], [1, N], [M, N], [M, 1], [1], []])
        ins = [v, b]
        if cs is not None:
            ins.append(self.const_val(cs) if self.coin(0.7) or self.n_inputs >= 3 else self.new_input(cs))
        out = self.emit('Gemm', ins, [M, N], 3.0 * abs(alpha) + 2 * abs(beta), transA=ta, transB=tb, alpha=alpha,
                        beta=beta)
        if out.mag > 8:
            self.normalized(out)

    def g_conv(self):
        v = self.pick(lambda x: len(x.shape) in (3, 4) and all(d >= 2 for d in x.shape[2:]))
        if v is None:
            # make a conv-shaped input now and then
            if self.n_inputs < 3:
                v = self.new_input([self.choice([1, 2]), self.choice([1, 2, 3, 4, 8])] +
                                   [self.choice([3, 5, 7, 9])] * self.choice([1, 2]))
            else:
                return self.g_unary()
        v = self.normalized(v, 3)
        nsp = len(v.shape) - 2
        C = v.shape[1]
        groups = [g for g in (1, 2, C) if C % g == 0]
        group = int(self.choice(groups))
        co = group * int(self.choice([1, 2, 3]))
        ks = [int(self.choice([1, 2, 3])) if v.shape[2 + i] >= 3 else 1 for i in range(nsp)]
        strides = [int(self.choice([1, 1, 2])) for _ in range(nsp)]
        dil = [int(self.choice([1, 1, 2])) if ks[i] > 1 and v.shape[2 + i] >= 5 else 1 for i in range(nsp)]
        attrs = {}
        auto = self.choice(['NOTSET', 'NOTSET', 'NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'])
        out_sp = []
        if auto == 'NOTSET':
            pads = [int(self.r.randint(0, ks[i])) for i in range(nsp)] + [int(self.r.randint(0, ks[i])) for i in range(nsp)]
            for i in range(nsp):
                span = dil[i] * (ks[i] - 1) + 1
                o = (v.shape[2 + i] + pads[i] + pads[nsp + i] - span) // strides[i] + 1
                out_sp.append(o)
            if any(p for p in pads) or self.coin(0.3):
                attrs['pads'] = pads
        else:
            attrs['auto_pad'] = auto
            for i in range(nsp):
                span = dil[i] * (ks[i] - 1) + 1
                if auto == 'VALID':
                    out_sp.append((v.shape[2 + i] - span) // strides[i] + 1)
                else:
                    out_sp.append(-(-v.shape[2 + i] // strides[i]))
        if any(o < 1 for o in out_sp):
            return self.g_unary()
        shape = [v.shape[0], co] + out_sp
        if numel(shape) > self.max_numel:
            return self.g_unary()
        if any(s != 1 for s in strides) or self.coin(0.3):
            attrs['strides'] = strides
        if any(d != 1 for d in dil):
            attrs['dilations'] = dil
        if group != 1:
            attrs['group'] = group
        if self.coin(0.3):
            attrs['kernel_shape'] = ks
        fan = (C // group) * numel(ks)
        w = self.const_val([co, C // group] + ks, 1.0 / math.sqrt(fan))
        ins = [v, w]
        if self.coin(0.6):
            ins.append(self.const_val([co], 0.5))
        self.emit('Conv', ins, shape, 4.0, **attrs)

    def g_pool(self):
        v = self.pick(lambda x: len(x.shape) in (3, 4) and all(d >= 2 for d in x.shape[2:]))
        if v is None:
            return self.g_conv()
        nsp = len(v.shape) - 2
        op = self.choice(['MaxPool', 'AveragePool', 'MaxPool', 'AveragePool', 'GlobalAveragePool', 'GlobalMaxPool'])
        if op.startswith('Global'):
            self.emit(op, [v], v.shape[:2] + [1] * nsp, v.mag)
            return
        ins = v.shape[2:]
        ks = [int(self.r.randint(1, min(3, d) + 1)) for d in ins]
        strides = [int(self.choice([1, 2, 2, 3])) for _ in range(nsp)]
        dil = [int(self.choice([1, 1, 2])) if op == 'MaxPool' and ins[i] >= 5 else 1 for i in range(nsp)]
        attrs = {'kernel_shape': ks}
        auto = self.choice(['NOTSET', 'NOTSET', 'NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'])
        out_sp = []
        if auto == 'NOTSET':
            pads = [int(self.r.randint(0, k)) for k in ks] + [int(self.r.randint(0, k)) for k in ks]
            ceil = int(self.coin(0.3))
            for i in range(nsp):
                eff = dil[i] * (ks[i] - 1) + 1
                num = ins[i] + pads[i] + pads[nsp + i] - eff
                if num < 0:
                    return self.g_unary()
                o = (-(-num // strides[i]) if ceil else num // strides[i]) + 1
                # a last window starting in the end padding: onnx 1.12 and
                # kiln disagree about whether it exists, so avoid it
                if ceil and (o - 1) * strides[i] >= ins[i] + pads[i]:
                    return self.g_unary()
                out_sp.append(o)
            if any(pads):
                attrs['pads'] = pads
            if ceil:
                attrs['ceil_mode'] = 1
        else:
            attrs['auto_pad'] = auto
            for i in range(nsp):
                eff = dil[i] * (ks[i] - 1) + 1
                if auto == 'VALID':
                    if ins[i] < eff:
                        return self.g_unary()
                    out_sp.append((ins[i] - eff) // strides[i] + 1)
                else:
                    out_sp.append(-(-ins[i] // strides[i]))
        if any(s != 1 for s in strides) or self.coin(0.3):
            attrs['strides'] = strides
        if any(d != 1 for d in dil):
            attrs['dilations'] = dil
        if op == 'AveragePool' and self.coin(0.4):
            attrs['count_include_pad'] = 1
        self.emit(op, [v], v.shape[:2] + out_sp, v.mag, **attrs)

    def g_layernorm(self):
        v = self.pick(lambda x: len(x.shape) >= 1)
        if v is None:
            return self.g_unary()
        v = self.normalized(v, 3)
        r = len(v.shape)
        axis = int(self.r.randint(-r, r))
        norm = v.shape[axis:]
        ins = [v, self.const_val(norm, 1.0)]
        if self.coin(0.7):
            ins.append(self.const_val(norm, 0.5))
        # epsilon >= 1e-3: rows of equal values (after Expand) have variance 0
        # and their rounding noise is scaled by 1/sqrt(epsilon)
        self.emit('LayerNormalization', ins, v.shape, 4.0, axis=axis, epsilon=float(self.choice([1e-3, 1e-2])))

    # ---- the graph ---------------------------------------------------------------------

    def build(self):
        n_in = self.r.randint(1, 4)
        for i in range(n_in):
            if i == 0 and self.coin(0.25):
                shape = [self.choice([1, 2]), self.choice([1, 2, 3, 4, 8])] + \
                        [self.choice([3, 5, 7, 9, 16])] * self.choice([1, 2])
            elif self.big:
                rank = self.r.randint(2, 4)
                shape = [self.choice(DIMS) for _ in range(rank)]
                shape[self.r.randint(rank)] = self.choice([129, 257, 513])
                while numel(shape) > BIG_NUMEL // 2:
                    shape[self.r.randint(rank)] = self.choice([1, 2, 3])
            else:
                rank = self.r.randint(1, 5)
                shape = [self.choice(DIMS) for _ in range(rank)]
                while numel(shape) > 1024:
                    shape[self.r.randint(rank)] = self.choice([1, 2, 3])
            self.new_input(shape)
        gens = [(self.g_unary, 18), (self.g_binary, 22), (self.g_reduce, 12), (self.g_transpose, 7),
                (self.g_reshape, 8), (self.g_slice, 8), (self.g_concat, 6), (self.g_expand, 4),
                (self.g_matmul, 7), (self.g_gemm, 4), (self.g_conv, 5), (self.g_pool, 3), (self.g_layernorm, 2)]
        total = sum(w for _, w in gens)
        target = self.r.randint(3, 21)
        guard = 0
        while len(self.nodes) < target and guard < 200:
            guard += 1
            u = self.r.rand() * total
            for fn, w in gens:
                if u < w:
                    fn()
                    break
                u -= w
        produced = [v for v in self.pool if not v.name.startswith('in') and not v.name.startswith('w')]
        if not produced:
            return None
        outs = [produced[-1]]
        if len(produced) > 1 and self.coin(0.5):
            o2 = self.choice(produced[:-1])
            outs.append(o2)
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  [helper.make_tensor_value_info(o.name, F, o.shape) for o in outs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                                  producer_name='kiln-diff-random')
        model.ir_version = 8
        return model


def check(model):
    """Shape inference must agree with the shapes tracked while building."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in model.graph.output:
        want = [d.dim_value for d in o.type.tensor_type.shape.dim]
        got = [d.dim_value for d in known[o.name].type.tensor_type.shape.dim]
        if want != got:
            raise ValueError('output %s: tracked shape %s, onnx infers %s' % (o.name, want, got))


def main(argv):
    ap = argparse.ArgumentParser(description='random graphs for kiln_diff')
    ap.add_argument('outdir')
    ap.add_argument('--count', type=int, default=200)
    ap.add_argument('--seed', type=int, default=None)
    args = ap.parse_args(argv[1:])
    seed = args.seed if args.seed is not None else int(time.time()) % 1000000
    print('gen_random_graphs: seed %d (rerun with --seed %d)' % (seed, seed), flush=True)
    os.makedirs(args.outdir, exist_ok=True)
    made, attempt, bad = 0, 0, 0
    while made < args.count:
        rng = np.random.RandomState((seed * 1000003 + attempt * 7919) % (2**32))
        attempt += 1
        name = 'rg_s%d_%04d' % (seed, made)
        model = GraphGen(rng, name).build()
        if model is None:
            continue
        try:
            check(model)
        except Exception as e:  # a generator bug: report it, try the next graph
            bad += 1
            print('gen_random_graphs: %s (attempt %d) rejected: %s' % (name, attempt, str(e).splitlines()[0]),
                  file=sys.stderr)
            if bad > max(10, args.count // 10):
                print('gen_random_graphs: too many invalid graphs', file=sys.stderr)
                return 1
            continue
        onnx.save(model, os.path.join(args.outdir, name + '.onnx'))
        made += 1
    print('gen_random_graphs: %d graphs in %s' % (made, args.outdir))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
