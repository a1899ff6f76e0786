"""Suite `dtypes`: every op of a broad list, for every dtype its opset-17
schema allows (complex left out), with random inputs and a reference
computed independently: numpy in float64 (exact integer arithmetic for
integer dtypes), torch (float64, CPU) for convolutions, pools and norms.

Reference rounding: results are computed in float64 from the (already
rounded) input values and rounded once to the output dtype; bfloat16 goes
float64 -> float32 -> bfloat16 (nearest even). numpy's own float16
arithmetic (which rounds every intermediate to float16) is not used: kiln
computes float16/bfloat16 through float/double and rounds back, as the
ONNX reference effectively does in float32/float64. The exception is
Softmax/LogSoftmax, which the ONNX reference computes step by step in the
element type (oplib.softmax_steps), and kiln with it.
Integer results of float math (Erf on ints, ReduceMean/L2/LogSum on ints,
Pow with a float exponent) truncate toward zero like numpy's astype."""
import math

import numpy as np

from oplib import (BF16, FLOATS, SHORT, UINTS, Rand, bf16_round, f64, is_float, is_int, make, out,
                   schema_types, softmax_steps, vals)

SUITE = 'dtypes'
SH = (3, 5, 7)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def f32(v):
    """An attribute value as the float32 the model stores, in float64."""
    return float(np.float32(v))


def gen(w, torch):
    r = Rand(1701)

    def case(name, op, ins, outs, attrs=None, opset=17, **kw):
        w.case(SUITE, name, op, ins, outs, attrs, opset, **kw)

    # ---- unary float math --------------------------------------------------------
    # op: (lo, hi, reference on float64, attrs)
    sel_alpha, sel_gamma = f32(1.6), f32(1.05)
    unary = {
        'Floor': (-5, 5, np.floor, {}),
        'Ceil': (-5, 5, np.ceil, {}),
        'Reciprocal': (0.5, 4, lambda x: 1 / x, {}),
        'Sqrt': (0.05, 10, np.sqrt, {}),
        'Exp': (-4, 4, np.exp, {}),
        'Log': (0.05, 10, np.log, {}),
        'Sin': (-3, 3, np.sin, {}),
        'Cos': (-3, 3, np.cos, {}),
        'Tan': (-1.3, 1.3, np.tan, {}),
        'Asin': (-0.95, 0.95, np.arcsin, {}),
        'Acos': (-0.95, 0.95, np.arccos, {}),
        'Atan': (-3, 3, np.arctan, {}),
        'Sinh': (-3, 3, np.sinh, {}),
        'Cosh': (-3, 3, np.cosh, {}),
        'Tanh': (-3, 3, np.tanh, {}),
        'Asinh': (-3, 3, np.arcsinh, {}),
        'Acosh': (1.05, 5, np.arccosh, {}),
        'Atanh': (-0.9, 0.9, np.arctanh, {}),
        'Sigmoid': (-5, 5, lambda x: 1 / (1 + np.exp(-x)), {}),
        'HardSigmoid': (-5, 5, lambda x: np.clip(f32(0.3) * x + f32(0.4), 0, 1), {'alpha': 0.3, 'beta': 0.4}),
        'LeakyRelu': (-3, 3, lambda x: np.where(x < 0, f32(0.15) * x, x), {'alpha': 0.15}),
        'Elu': (-3, 3, lambda x: np.where(x < 0, f32(0.7) * (np.exp(x) - 1), x), {'alpha': 0.7}),
        'Selu': (-3, 3, lambda x: sel_gamma * np.where(x <= 0, sel_alpha * (np.exp(x) - 1), x),
                 {'alpha': 1.6, 'gamma': 1.05}),
        'Celu': (-3, 3, lambda x: np.maximum(0, x) + np.minimum(0, f32(1.3) * (np.exp(x / f32(1.3)) - 1)),
                 {'alpha': 1.3}),
        'Softplus': (-4, 4, lambda x: np.log1p(np.exp(x)), {}),
        'Softsign': (-4, 4, lambda x: x / (1 + np.abs(x)), {}),
        'HardSwish': (-5, 5, lambda x: x * np.clip(x / 6 + 0.5, 0, 1), {}),
        'ThresholdedRelu': (-3, 3, lambda x: np.where(x > f32(0.8), x, 0), {'alpha': 0.8}),
    }
    for op, (lo, hi, fn, attrs) in unary.items():
        for dt in schema_types(op, 'T'):
            if op == 'Reciprocal':
                x = make(dt, r.uniform(lo, hi, SH) * np.where(r.uniform(0, 1, SH) < 0.5, -1, 1))
            else:
                x = r.of(dt, SH, lo, hi)
            case('%s_%s' % (op, SHORT[dt]), op, [x], [out(dt, fn(f64(x)))], attrs)

    # Round: halves included (ties go to even).
    for dt in schema_types('Round', 'T'):
        x = make(dt, r.integers(-24, 24, SH) / 4.0)
        case('Round_%s' % SHORT[dt], 'Round', [x], [out(dt, np.round(f64(x)))])

    # Abs / Neg / Sign / Relu: integer types too.
    for op, fn in [('Abs', np.abs), ('Neg', np.negative), ('Sign', np.sign), ('Relu', lambda x: np.maximum(x, 0))]:
        for dt in schema_types(op, 'T'):
            x = r.of(dt, SH, -3, 3, -100, 100)
            if is_float(dt):
                x = make(dt, np.where(r.uniform(0, 1, SH) < 0.1, 0.0, f64(x)))
            case('%s_%s' % (op, SHORT[dt]), op, [x], [out(dt, fn(vals(x)))])
    # 64-bit integers beyond 2^53 must not go through double.
    for dt in ['int64', 'uint64']:
        big = r.ints(dt, SH, -(2 ** 62), 2 ** 62)
        for op, fn in [('Abs', np.abs), ('Sign', np.sign), ('Relu', lambda x: np.maximum(x, 0))] + \
                ([('Neg', np.negative)] if dt == 'int64' else []):
            if op in ('Relu', 'Neg') and dt == 'uint64':
                continue
            case('%s_%s_big' % (op, SHORT[dt]), op, [big], [out(dt, fn(big))])

    # Erf: float and integer types (integers: erf truncated toward zero).
    for dt in schema_types('Erf', 'T'):
        x = r.of(dt, SH, -2, 2, -3, 3)
        case('Erf_%s' % SHORT[dt], 'Erf', [x], [out(dt, _erf(f64(x)))])

    # Shrink: floats and integers.
    for dt in schema_types('Shrink', 'T'):
        x = r.of(dt, SH, -3, 3, -6, 6)
        lambd, bias = (1.5, 0.75) if is_float(dt) else (1.5, 1.0)
        v = f64(x)
        ref = np.where(v < -lambd, v + bias, np.where(v > lambd, v - bias, 0))
        case('Shrink_%s' % SHORT[dt], 'Shrink', [x], [out(dt, ref)], {'lambd': lambd, 'bias': bias})

    # PRelu: slope broadcasts (unidirectionally).
    for dt in schema_types('PRelu', 'T'):
        x = r.of(dt, SH, -3, 3, -50, 50)
        slope = r.of(dt, (5, 1), 0.05, 2, 0, 4)
        v, s = vals(x), vals(slope)
        case('PRelu_%s' % SHORT[dt], 'PRelu', [x, slope], [out(dt, np.where(v < 0, v * s, v))])

    # IsNaN / IsInf with special values.
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.25])
    for dt in schema_types('IsNaN', 'T1'):
        x = make(dt, np.where(r.uniform(0, 1, SH) < 0.5, specials[r.integers(0, 7, SH)], r.uniform(-5, 5, SH)))
        case('IsNaN_%s' % SHORT[dt], 'IsNaN', [x], [np.isnan(f64(x))])
    for dt in schema_types('IsInf', 'T1'):
        x = make(dt, np.where(r.uniform(0, 1, SH) < 0.5, specials[r.integers(0, 7, SH)], r.uniform(-5, 5, SH)))
        v = f64(x)
        case('IsInf_%s' % SHORT[dt], 'IsInf', [x], [np.isinf(v)])
        case('IsInf_%s_neg_only' % SHORT[dt], 'IsInf', [x], [np.isneginf(v)], {'detect_positive': 0})
        case('IsInf_%s_pos_only' % SHORT[dt], 'IsInf', [x], [np.isposinf(v)], {'detect_negative': 0})

    x = r.of('bool', SH)
    case('Not_bool', 'Not', [x], [~x])

    # BitShift: unsigned, both directions, shifts below the bit width.
    for dt in schema_types('BitShift', 'T'):
        bits = np.dtype(dt).itemsize * 8
        x = r.ints(dt, SH, 0, 2 ** bits - 1)
        s = r.ints(dt, (7,), 0, bits - 1)
        with np.errstate(over='ignore'):
            case('BitShift_%s_left' % SHORT[dt], 'BitShift', [x, s], [np.left_shift(x, s)], {'direction': 'LEFT'})
            case('BitShift_%s_right' % SHORT[dt], 'BitShift', [x, s], [np.right_shift(x, s)], {'direction': 'RIGHT'})

    # ---- binary arithmetic ----------------------------------------------------------
    for dt in schema_types('Add', 'T'):
        a = r.of(dt, SH, -3, 3, -50, 50)
        b = r.of(dt, (5, 1), -3, 3, -50, 50)
        va, vb = vals(a), vals(b)
        case('Add_%s' % SHORT[dt], 'Add', [a, b], [out(dt, va + vb)])
        if dt in UINTS:
            a2 = r.of(dt, SH, 0, 0, 50, 100)
            case('Sub_%s' % SHORT[dt], 'Sub', [a2, b], [out(dt, vals(a2) - vb)])
        else:
            case('Sub_%s' % SHORT[dt], 'Sub', [a, b], [out(dt, va - vb)])
        c = r.of(dt, (7,), -3, 3, -9, 9)
        am = r.of(dt, SH, -3, 3, -12, 12)
        case('Mul_%s' % SHORT[dt], 'Mul', [am, c], [out(dt, vals(am) * vals(c))])
        if is_float(dt):
            d = make(dt, r.uniform(0.5, 3, (7,)) * np.where(r.uniform(0, 1, 7) < 0.5, -1, 1))
            case('Div_%s' % SHORT[dt], 'Div', [a, d], [out(dt, va / f64(d))])
        else:
            d = r.of(dt, (7,), 0, 0, -7, 7)
            d = np.where(d == 0, np.ones_like(d), d)
            # Integer division truncates toward zero (C semantics, as onnxruntime).
            q = np.trunc(va.astype(np.float64) / d.astype(np.float64))
            case('Div_%s' % SHORT[dt], 'Div', [a, d], [out(dt, q)])
    # 64-bit integer arithmetic beyond 2^53 stays exact.
    for dt in ['int64', 'uint64']:
        a = r.ints(dt, SH, 0 if dt == 'uint64' else -(2 ** 61), 2 ** 61)
        b = r.ints(dt, (7,), 0 if dt == 'uint64' else -(2 ** 61), 2 ** 61)
        case('Add_%s_big' % SHORT[dt], 'Add', [a, b], [a + b])
        if dt == 'int64':
            case('Sub_%s_big' % SHORT[dt], 'Sub', [a, b], [a - b])
        m = r.ints(dt, (7,), 1, 7)
        case('Mul_%s_big' % SHORT[dt], 'Mul', [a, m], [a * m])
        case('Div_%s_big' % SHORT[dt], 'Div', [a, m], [np.sign(a) * (np.abs(a) // m) if dt == 'int64' else a // m])

    # Mod: integers with fmod 0 (sign of the divisor) and 1 (sign of the dividend); floats need fmod 1.
    for dt in schema_types('Mod', 'T'):
        a = r.of(dt, SH, -10, 10, -60, 60)
        if is_float(dt):
            b = make(dt, r.uniform(0.5, 4, (7,)) * np.where(r.uniform(0, 1, 7) < 0.5, -1, 1))
            case('Mod_%s' % SHORT[dt], 'Mod', [a, b], [out(dt, np.fmod(f64(a), f64(b)))], {'fmod': 1})
        else:
            b = r.of(dt, (7,), 0, 0, -9, 9)
            b = np.where(b == 0, np.full_like(b, 3), b)
            case('Mod_%s' % SHORT[dt], 'Mod', [a, b], [np.mod(a, b)])
            case('Mod_%s_fmod' % SHORT[dt], 'Mod', [a, b], [np.fmod(a, b)], {'fmod': 1})

    # Pow: every base type with the same exponent type, and float32 / int64 bases
    # with every exponent type.
    pow_pairs = set()
    for t in schema_types('Pow', 'T'):
        pow_pairs.add((t, t))
    for t1 in schema_types('Pow', 'T1'):
        pow_pairs.add(('float32', t1))
        if t1 in ('int64', 'float32', 'uint8', 'float16', 'int8'):
            pow_pairs.add(('int64', t1))
        pow_pairs.add(('float16', t1) if t1 in ('float32', 'int8', 'uint64') else ('float32', t1))
    for bt, et in sorted(pow_pairs):
        if is_float(bt):
            if is_float(et):
                base = make(bt, r.uniform(0.3, 2.5, SH))
                ex = make(et, r.uniform(-2, 2.5, (7,)))
            else:  # negative bases with integer exponents
                base = make(bt, r.uniform(0.3, 2.5, SH) * np.where(r.uniform(0, 1, SH) < 0.5, -1, 1))
                ex = r.ints(et, (7,), -3, 4)
        elif is_float(et):  # integer base, float exponent with fractions: base >= 0
            base = r.ints(bt, SH, 0, 4)
            ex = make(et, r.integers(0, 9, (7,)) / 2.0)
        else:  # |base| <= 3, exponent <= 4: fits int8
            base = r.ints(bt, SH, -3, 3)
            ex = r.ints(et, (7,), 0, 4)
        with np.errstate(all='ignore'):
            ref = np.power(f64(base), f64(ex))
        case('Pow_%s_%s' % (SHORT[bt], SHORT[et]), 'Pow', [base, ex], [out(bt, ref)])

    # ---- comparisons and logic --------------------------------------------------------
    cmp_ops = [('Equal', np.equal), ('Less', np.less), ('Greater', np.greater),
               ('LessOrEqual', np.less_equal), ('GreaterOrEqual', np.greater_equal)]
    for op, fn in cmp_ops:
        for dt in schema_types(op, 'T'):
            if dt == 'bool':
                a, b = r.of('bool', SH), r.of('bool', (5, 1))
            else:  # few distinct values so ties happen
                a = make(dt, r.integers(0 if dt in UINTS else -4, 5, SH) / (1 if is_int(dt) else 2.0))
                b = make(dt, r.integers(0 if dt in UINTS else -4, 5, (5, 1)) / (1 if is_int(dt) else 2.0))
            case('%s_%s' % (op, SHORT[dt]), op, [a, b], [fn(vals(a), vals(b))])
    for dt in ['int64', 'uint64']:  # values 1 apart beyond 2^53
        a = (np.array(2 ** 60, dtype=dt) + r.ints(dt, SH, 0, 3).astype(dt)).astype(dt)
        b = (np.array(2 ** 60, dtype=dt) + r.ints(dt, (7,), 0, 3).astype(dt)).astype(dt)
        case('Less_%s_big' % SHORT[dt], 'Less', [a, b], [a < b])
        case('Equal_%s_big' % SHORT[dt], 'Equal', [a, b], [a == b])
    for op, fn in [('And', np.logical_and), ('Or', np.logical_or), ('Xor', np.logical_xor)]:
        a, b = r.of('bool', SH), r.of('bool', (7,))
        case('%s_bool' % op, op, [a, b], [fn(a, b)])

    # ---- Where / Clip / Max / Min / Sum / Mean ------------------------------------------
    for dt in schema_types('Where', 'T'):
        c = r.of('bool', (5, 1))
        x, y = r.of(dt, SH), r.of(dt, (7,))
        if dt == 'bfloat16':
            ref = BF16(np.where(c, x.v, y.v))
        else:
            ref = np.where(c, x, y)
        case('Where_%s' % SHORT[dt], 'Where', [c, x, y], [ref])
    for dt in schema_types('Clip', 'T'):
        x = r.of(dt, SH, -3, 3, -40, 40)
        lo, hi = (make(dt, -1.25), make(dt, 0.75)) if is_float(dt) else \
            (make(dt, 3 if dt in UINTS else -5), make(dt, 17))
        case('Clip_%s' % SHORT[dt], 'Clip', [x, lo, hi], [out(dt, np.clip(vals(x), vals(lo), vals(hi)))])
        if dt in ('float32', 'int32', 'uint8', 'bfloat16'):
            case('Clip_%s_max_only' % SHORT[dt], 'Clip', [x, None, hi], [out(dt, np.minimum(vals(x), vals(hi)))])
    for op, fn in [('Max', np.maximum), ('Min', np.minimum)]:
        for dt in schema_types(op, 'T'):
            a, b, c = r.of(dt, SH, ilo=-100, ihi=100), r.of(dt, (5, 1), ilo=-100, ihi=100), r.of(dt, (7,), ilo=-100, ihi=100)
            case('%s_%s' % (op, SHORT[dt]), op, [a, b, c], [out(dt, fn(fn(vals(a), vals(b)), vals(c)))])
        for dt in ['int64', 'uint64']:
            a, b = r.ints(dt, SH, 0, 2 ** 62), r.ints(dt, (7,), 0, 2 ** 62)
            case('%s_%s_big' % (op, SHORT[dt]), op, [a, b], [fn(a, b)])
    for op in ['Sum', 'Mean']:
        for dt in schema_types(op, 'T'):
            a, b, c = r.of(dt, SH), r.of(dt, (5, 1)), r.of(dt, (7,))
            s = f64(a) + f64(b) + f64(c)
            case('%s_%s' % (op, SHORT[dt]), op, [a, b, c], [out(dt, s if op == 'Sum' else s / 3)])

    gen_cast(case, r, w)
    gen_reduce(case, r)
    gen_movement(case, r)
    gen_nn(case, r, torch)


# ---- Cast ---------------------------------------------------------------------------

def _float_str(v, dt):
    """numpy's str() of a float, with ONNX's spellings of the special values."""
    if np.isnan(v):
        return 'NaN'
    if np.isinf(v):
        return 'INF' if v > 0 else '-INF'
    if dt == 'bfloat16':  # values are chosen so float64's shortest form is bf16's too
        return str(float(v))
    return str(np.asarray(v, dtype=dt)[()])


def cast_input(r, src, dst, shape):
    """Input values for Cast src -> dst whose result every reading agrees on."""
    unsigned = src in UINTS or dst in UINTS
    lo, hi = (0, 100) if unsigned else (-100, 100)
    if src == 'string':
        if dst in FLOATS:
            pool = ['3.25', '-0.5', '1e-3', '1.5E2', '-7', '100', '0.125', '2.75e1', '-1.0', '0']
            if dst == 'bfloat16':  # kiln truncates to bf16 (ONNX 1.12 data): exact values only
                pool = ['3.25', '-0.5', '150', '-7', '100', '0.125', '1.5E2', '2.75e1', '-1.0', '0']
            return np.array(pool, dtype=object)[r.integers(0, len(pool), shape)]
        return np.array([str(v) for v in r.integers(lo, hi + 1, np.prod(shape))], dtype=object).reshape(shape)
    if src == 'bool':
        return r.of('bool', shape)
    if src in FLOATS:
        if dst == 'string':
            if src == 'bfloat16':
                return make(src, r.integers(-127, 128, shape) / 2.0)
            return make(src, r.uniform(lo, hi, shape))
        v = r.uniform(lo, hi, shape)
        if dst == 'bool':
            v = np.where(r.uniform(0, 1, shape) < 0.3, 0.0, v / 50)  # zeros and small fractions
        if dst == 'bfloat16' or src == 'bfloat16':
            v = bf16_round(v)  # Cast to bf16 truncates in ONNX 1.12's data; use exact values
        return make(src, v)
    v = r.integers(lo, hi + 1, shape)
    if dst == 'bool':
        v = np.where(r.uniform(0, 1, shape) < 0.3, 0, v)
    return make(src, v)


def cast_ref(x, src, dst):
    if dst == 'string':
        if src in FLOATS:
            return np.array([_float_str(v, src) for v in f64(x).ravel()], dtype=object).reshape(x.shape)
        if src == 'bool':
            return np.array(['True' if v else 'False' for v in x.ravel()], dtype=object).reshape(x.shape)
        return np.asarray(x).astype(str).astype(object)
    if src == 'string':
        if dst in FLOATS:
            return out(dst, np.array([float(s) for s in x.ravel()]).reshape(x.shape))
        return out(dst, np.array([int(s) for s in x.ravel()]).reshape(x.shape))
    if dst == 'bool':
        return vals(x) != 0
    return out(dst, vals(x))


def gen_cast(case, r, w):
    """Cast: one case per source dtype, one Cast node (and graph output
    'to_<dtype>') per target dtype, each with inputs of its own."""
    from onnx import helper
    types = schema_types('Cast', 'T1', 13)
    from oplib import ONNX_TYPE
    for src in types:
        nodes, ins, outs = [], [], []
        for dst in types:
            if src == 'string' and dst == 'bool':
                continue  # the spec does not say how text reads as bool
            x = cast_input(r, src, dst, (3, 5))
            nodes.append(helper.make_node('Cast', ['from_for_%s' % SHORT[dst]], ['to_%s' % SHORT[dst]], to=ONNX_TYPE[dst]))
            ins.append(('from_for_%s' % SHORT[dst], x))
            outs.append(('to_%s' % SHORT[dst], cast_ref(x, src, dst)))
        w.graph_case(SUITE, 'Cast_from_%s' % SHORT[src], nodes, ins, outs)
    # CastLike: every target from float32, every source to float32.
    pairs = sorted({('float32', t) for t in types} | {(t, 'float32') for t in types})
    for src, dst in pairs:
        if src == 'string' and dst == 'bool':
            continue
        x = cast_input(r, src, dst, (4, 3))
        like = cast_input(r, 'int32' if dst != 'string' else 'int32', dst, (2,))
        like = cast_ref(like, 'int32', dst)
        case('CastLike_%s_to_%s' % (SHORT[src], SHORT[dst]), 'CastLike', [x, like], [cast_ref(x, src, dst)])


# ---- reductions, arg, softmax, cumsum, topk -----------------------------------------

def gen_reduce(case, r):
    kinds = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1', 'ReduceL2',
             'ReduceSumSquare', 'ReduceLogSum', 'ReduceLogSumExp']

    def ref(kind, v, axes, keep):
        ax = tuple(axes)
        if kind == 'ReduceSum':
            return np.sum(v, axis=ax, keepdims=keep)
        if kind == 'ReduceMean':
            return np.sum(v, axis=ax, keepdims=keep) / np.prod([v.shape[a] for a in ax])
        if kind == 'ReduceMax':
            return np.max(v, axis=ax, keepdims=keep)
        if kind == 'ReduceMin':
            return np.min(v, axis=ax, keepdims=keep)
        if kind == 'ReduceProd':
            return np.prod(v, axis=ax, keepdims=keep)
        if kind == 'ReduceL1':
            return np.sum(np.abs(v), axis=ax, keepdims=keep)
        if kind == 'ReduceL2':
            return np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=ax, keepdims=keep))
        if kind == 'ReduceSumSquare':
            return np.sum(v * v, axis=ax, keepdims=keep)
        if kind == 'ReduceLogSum':
            return np.log(np.sum(v.astype(np.float64), axis=ax, keepdims=keep))
        if kind == 'ReduceLogSumExp':
            return np.log(np.sum(np.exp(v.astype(np.float64)), axis=ax, keepdims=keep))

    for kind in kinds:
        for dt in schema_types(kind, 'T'):
            if kind == 'ReduceLogSum':
                x = r.of(dt, SH, 0.5, 3, 1, 5)
            elif kind == 'ReduceProd':
                x = r.of(dt, SH, 0.6, 1.5, 1 if dt in UINTS else -2, 2)
            elif kind == 'ReduceLogSumExp':
                x = r.of(dt, SH, -2, 2, 0, 3)
            elif kind in ('ReduceMax', 'ReduceMin') and dt in ('int8', 'uint8'):
                x = r.ints(dt, SH, -128, 255)
            else:
                x = r.of(dt, SH, -2, 2, -20, 20)
            v = vals(x)
            for axes, keep, tag in [([0, 2], 1, ''), ([-2], 0, '_ax-2_nokeep')]:
                if tag and dt not in ('float32', 'int64', 'bfloat16'):
                    continue
                want = out(dt, ref(kind, v, axes, bool(keep)))
                name = '%s_%s%s' % (kind, SHORT[dt], tag)
                if kind == 'ReduceSum':
                    case(name, kind, [x, np.array(axes, np.int64)], [want], {'keepdims': keep})
                else:
                    case(name, kind, [x], [want], {'axes': axes, 'keepdims': keep})
        if 'int64' in schema_types(kind, 'T') and kind in ('ReduceSum', 'ReduceMax', 'ReduceMin'):
            x = r.ints('int64', SH, -(2 ** 58), 2 ** 58)
            want = ref(kind, x, [1], True)
            if kind == 'ReduceSum':
                case('%s_i64_big' % kind, kind, [x, np.array([1], np.int64)], [want])
            else:
                case('%s_i64_big' % kind, kind, [x], [want], {'axes': [1]})

    # ArgMax / ArgMin: ties (few distinct values), first and last index.
    for op, fn in [('ArgMax', np.argmax), ('ArgMin', np.argmin)]:
        for dt in schema_types(op, 'T'):
            x = make(dt, r.integers(0, 4, SH) + (0 if is_int(dt) else 0.5))
            v = vals(x)
            case('%s_%s' % (op, SHORT[dt]), op, [x], [np.expand_dims(fn(v, axis=1), 1).astype(np.int64)], {'axis': 1})
            if dt not in ('float32', 'int64', 'uint8', 'bfloat16', 'float16'):
                continue
            last = SH[2] - 1 - fn(np.flip(v, 2), axis=2)
            case('%s_%s_last' % (op, SHORT[dt]), op, [x], [last.astype(np.int64)],
                 {'axis': -1, 'keepdims': 0, 'select_last_index': 1})

    # Softmax family (opset 13: along one axis).
    for op in ['Softmax', 'LogSoftmax', 'Hardmax']:
        for dt in schema_types(op, 'T'):
            x = r.of(dt, SH, -4, 4)
            v = f64(x)
            for axis, tag in [(-1, ''), (1, '_axis1')]:
                if op == 'Hardmax':
                    res = np.zeros_like(v)
                    np.put_along_axis(res, np.expand_dims(np.argmax(v, axis), axis), 1, axis)
                elif dt in ('float16', 'bfloat16'):  # as ONNX's reference: rounded at every step
                    res = softmax_steps(dt, v, axis, op == 'LogSoftmax')
                else:
                    m = v.max(axis, keepdims=True)
                    e = np.exp(v - m)
                    s = e.sum(axis, keepdims=True)
                    res = e / s if op == 'Softmax' else v - m - np.log(s)
                case('%s_%s%s' % (op, SHORT[dt], tag), op, [x], [out(dt, res)], {} if axis == -1 else {'axis': axis})

    # CumSum
    for dt in schema_types('CumSum', 'T'):
        x = r.of(dt, SH, -3, 3, 0 if dt in UINTS else -20, 20)
        v = vals(x)
        case('CumSum_%s' % SHORT[dt], 'CumSum', [x, np.array(1, np.int64)], [out(dt, np.cumsum(v, 1))])
        rv = np.flip(v, 2)
        ex = np.flip(np.cumsum(rv, 2) - rv, 2)
        case('CumSum_%s_excl_rev' % SHORT[dt], 'CumSum', [x, np.array(-1, np.int32)], [out(dt, ex)],
             {'exclusive': 1, 'reverse': 1})

    # TopK: distinct values along the axis, largest and smallest.
    for dt in schema_types('TopK', 'T'):
        base = np.stack([np.stack([r.perm(7) for _ in range(5)]) for _ in range(3)])  # (3, 5, 7)
        if dt in UINTS:
            v = base * 3
        elif is_int(dt):
            v = base * 3 - 10
        else:
            v = base * 0.75 - 2
        x = make(dt, v)
        for largest in [1, 0]:
            idx = np.argsort(-f64(x) if largest else f64(x), axis=2, kind="stable")[:, :, :3]
            vals_ = np.take_along_axis(x if not isinstance(x, BF16) else x.v, idx, 2)
            case('TopK_%s%s' % (SHORT[dt], '' if largest else '_smallest'), 'TopK', [x, np.array([3], np.int64)],
                 [make(dt, vals_) if isinstance(x, BF16) else vals_, idx.astype(np.int64)],
                 {'axis': -1, 'largest': largest})


# ---- movement ---------------------------------------------------------------------

def _keep(x, fn):
    """Applies a numpy index/shape function to a tensor, bf16 included."""
    if isinstance(x, BF16):
        return BF16(fn(x.v))
    return fn(np.asarray(x))


def gen_movement(case, r):
    i64 = lambda *v: np.array(v, dtype=np.int64)
    for dt in schema_types('Concat', 'T'):
        a, b, c = r.of(dt, (3, 2, 7)), r.of(dt, (3, 1, 7)), r.of(dt, (3, 4, 7))
        cat = lambda *t: np.concatenate(t, 1)
        case('Concat_%s' % SHORT[dt], 'Concat', [a, b, c],
             [_keep(a, lambda av: cat(av, b.v if isinstance(b, BF16) else b, c.v if isinstance(c, BF16) else c))],
             {'axis': 1})
    for dt in schema_types('Slice', 'T'):
        x = r.of(dt, SH)
        case('Slice_%s' % SHORT[dt], 'Slice', [x, i64(1, 6, -1), i64(5, -100, 0), i64(1, 2, 0), i64(2, -2, -1)],
             [_keep(x, lambda v: v[-1:0:-1, 1:5:2, 6::-2])])
    for dt in schema_types('Gather', 'T'):
        x = r.of(dt, SH)
        idx = i64([4, -1, 0], [2, 2, -5])
        case('Gather_%s' % SHORT[dt], 'Gather', [x, idx], [_keep(x, lambda v: np.take(v, idx % 5, axis=1))], {'axis': 1})
        if dt == 'float32':
            case('Gather_%s_i32_idx' % SHORT[dt], 'Gather', [x, idx.astype(np.int32)],
                 [_keep(x, lambda v: np.take(v, idx % 5, axis=1))], {'axis': 1})
    for dt in schema_types('GatherElements', 'T'):
        x = r.of(dt, SH)
        idx = r.integers(-7, 7, (3, 5, 4)).astype(np.int64)
        case('GatherElements_%s' % SHORT[dt], 'GatherElements', [x, idx],
             [_keep(x, lambda v: np.take_along_axis(v, idx % 7, 2))], {'axis': 2})
    for dt in schema_types('GatherND', 'T'):
        x = r.of(dt, SH)
        idx = i64([[0, 4], [2, -1]], [[-1, 0], [1, 3]])
        case('GatherND_%s' % SHORT[dt], 'GatherND', [x, idx],
             [_keep(x, lambda v: v[idx[..., 0] % 3, idx[..., 1] % 5])])
    for dt in schema_types('ScatterElements', 'T'):
        x = r.of(dt, (3, 5))
        idx = np.stack([r.perm(5)[:3] for _ in range(3)]).astype(np.int64)  # unique per row
        idx[0, 0] -= 5  # a negative index
        upd = r.of(dt, (3, 3))

        def scat(v, u):
            o = v.copy()
            np.put_along_axis(o, idx % 5, u, 1)
            return o
        case('ScatterElements_%s' % SHORT[dt], 'ScatterElements', [x, idx, upd],
             [BF16(scat(x.v, upd.v)) if isinstance(x, BF16) else scat(x, upd)], {'axis': 1})
        if dt not in ('string', 'bool'):
            # Duplicate indices: values chosen so every partial result is exact in
            # the dtype (order and intermediate rounding cannot matter).
            idx2 = r.integers(0, 5, (3, 4)).astype(np.int64)
            x2 = make(dt, r.integers(-32, 33, (3, 5)) / 4.0) if is_float(dt) else r.ints(dt, (3, 5), -3, 3)
            for red in ['add', 'mul'] if dt in ('float32', 'int32', 'float16', 'bfloat16', 'uint64') else ['add']:
                if red == 'add':
                    upd2 = make(dt, r.integers(1, 4, (3, 4)) / (4.0 if is_float(dt) else 1.0))
                else:
                    upd2 = make(dt, np.array([0.5, 1, 2, -1])[r.integers(0, 4, (3, 4))] if is_float(dt)
                                else r.integers(1, 3, (3, 4)))
                o = vals(x2).copy()
                u = vals(upd2)
                for i in range(3):
                    for j in range(4):
                        if red == 'add':
                            o[i, idx2[i, j]] = o[i, idx2[i, j]] + u[i, j]
                        else:
                            o[i, idx2[i, j]] = o[i, idx2[i, j]] * u[i, j]
                case('ScatterElements_%s_%s' % (SHORT[dt], red), 'ScatterElements', [x2, idx2, upd2], [out(dt, o)],
                     {'axis': 1, 'reduction': red})
    for dt in schema_types('ScatterND', 'T'):
        x = r.of(dt, SH)
        idx = i64([[2, 1]], [[0, -1]])  # (2, 1, 2): rows x[2, 1] and x[0, 4]
        upd = r.of(dt, (2, 1, 7))

        def scat(v, u):
            o = v.copy()
            o[2, 1] = u[0, 0]
            o[0, 4] = u[1, 0]
            return o
        case('ScatterND_%s' % SHORT[dt], 'ScatterND', [x, idx, upd],
             [BF16(scat(x.v, upd.v)) if isinstance(x, BF16) else scat(x, upd)])
    for dt in schema_types('Transpose', 'T'):
        x = r.of(dt, SH)
        case('Transpose_%s' % SHORT[dt], 'Transpose', [x], [_keep(x, lambda v: v.transpose(2, 0, 1))], {'perm': [2, 0, 1]})
    few = ['float32', 'bfloat16', 'string', 'bool', 'int8', 'uint64']  # pure data movement: a few element sizes
    for dt in few:
        x = r.of(dt, SH)
        case('Reshape_%s' % SHORT[dt], 'Reshape', [x, i64(0, -1, 1)], [_keep(x, lambda v: v.reshape(3, 35, 1))])
    for dt in schema_types('Expand', 'T'):
        x = r.of(dt, (5, 1))
        case('Expand_%s' % SHORT[dt], 'Expand', [x, i64(3, 1, 7)], [_keep(x, lambda v: np.broadcast_to(v, (3, 5, 7)).copy())])
    for dt in schema_types('Tile', 'T'):
        x = r.of(dt, (3, 5))
        case('Tile_%s' % SHORT[dt], 'Tile', [x, i64(2, 3)], [_keep(x, lambda v: np.tile(v, (2, 3)))])
    for dt in schema_types('Pad', 'T'):
        x = r.of(dt, (3, 5))
        cv = {'string': np.array('pad', dtype=object), 'bool': np.array(True)}.get(dt)
        if cv is None:
            cv = make(dt, 7 if is_int(dt) else 1.5)
        pv = cv.v[()] if isinstance(cv, BF16) else np.asarray(cv)[()]
        case('Pad_%s' % SHORT[dt], 'Pad', [x, i64(1, 0, 2, 3), cv],
             [_keep(x, lambda v: np.pad(v, ((1, 2), (0, 3)), constant_values=pv))])
        if dt not in ('float32', 'int8', 'string', 'bool', 'bfloat16', 'float16'):
            continue
        case('Pad_%s_edge' % SHORT[dt], 'Pad', [x, i64(0, 2, 1, -1)],
             [_keep(x, lambda v: np.pad(v[:, :-1], ((0, 1), (2, 0)), mode='edge'))], {'mode': 'edge'})
    for dt in schema_types('Split', 'T'):
        x = r.of(dt, SH)
        case('Split_%s' % SHORT[dt], 'Split', [x, i64(2, 3)], [_keep(x, lambda v: v[:, :2]), _keep(x, lambda v: v[:, 2:])],
             {'axis': 1})
    for dt in few:
        x = r.of(dt, (3, 1, 5, 1))
        case('Squeeze_%s' % SHORT[dt], 'Squeeze', [x, i64(1, -1)], [_keep(x, lambda v: v.reshape(3, 5))])
    for dt in few:
        x = r.of(dt, (3, 5))
        case('Unsqueeze_%s' % SHORT[dt], 'Unsqueeze', [x, i64(0, -1)], [_keep(x, lambda v: v.reshape(1, 3, 5, 1))])
    for dt in few:
        x = r.of(dt, SH)
        case('Flatten_%s' % SHORT[dt], 'Flatten', [x], [_keep(x, lambda v: v.reshape(15, 7))], {'axis': 2})
    for dt in ['float32', 'bfloat16', 'string', 'bool', 'int8']:
        x = r.of(dt, SH)
        case('Identity_%s' % SHORT[dt], 'Identity', [x], [x])
    for dt in schema_types('Compress', 'T'):
        x = r.of(dt, SH)
        cond = np.array([True, False, True, True, False])
        case('Compress_%s' % SHORT[dt], 'Compress', [x, cond], [_keep(x, lambda v: np.compress(cond, v, 1))], {'axis': 1})
    for dt in schema_types('Trilu', 'T'):
        x = r.of(dt, (2, 5, 7))
        zero = {'string': '', 'bool': False}.get(dt, 0)
        for upper, k in [(1, 1), (0, -1)] if dt in ('float32', 'int64', 'string', 'bool') else [(1, 1)]:
            mask = np.triu(np.ones((5, 7), bool), k) if upper else np.tril(np.ones((5, 7), bool), k)
            ref = _keep(x, lambda v: np.where(mask, v, np.array(zero, dtype=v.dtype)))
            case('Trilu_%s_%s' % (SHORT[dt], 'upper' if upper else 'lower'), 'Trilu', [x, np.array(k, np.int64)], [ref],
                 {'upper': upper})
    for dt in schema_types('Unique', 'T'):
        if dt == 'string':
            x = r.of(dt, (4, 6))
        elif dt == 'bool':
            x = r.of(dt, (4, 6))
        else:
            x = make(dt, r.integers(0 if dt in UINTS else -3, 4, (4, 6)) * (1 if is_int(dt) else 0.75))
        vx = np.asarray(x).astype(str) if dt == 'string' else vals(x)
        y, ind, inv, cnt = np.unique(vx.ravel(), return_index=True, return_inverse=True, return_counts=True)
        ys = y.astype(object) if dt == 'string' else out(dt, y)
        case('Unique_%s' % SHORT[dt], 'Unique', [x], [ys, ind.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)])
    for dt in schema_types('NonZero', 'T'):
        x = r.of(dt, SH)
        if dt == 'string':
            x = np.where(r.uniform(0, 1, SH) < 0.4, '', x).astype(object)
            nz = np.nonzero(x != '')
        else:
            x = make(dt, np.where(r.uniform(0, 1, SH) < 0.4, 0, vals(x)))
            nz = np.nonzero(vals(x))
        case('NonZero_%s' % SHORT[dt], 'NonZero', [x], [np.array(nz, dtype=np.int64)])

    # OneHot: sweep indices, depth and values types separately.
    def onehot(ind, depth, v, axis=-1):
        ind = np.asarray(ind).astype(np.int64)
        o = np.full(ind.shape + (depth,), v[0], dtype=object)
        for c in np.ndindex(ind.shape):
            if -depth <= ind[c] < depth:
                o[c + (ind[c] % depth,)] = v[1]
        return np.moveaxis(o, -1, axis)
    oh_idx = lambda dt: make(dt, r.integers(0 if dt in UINTS else -5, 5, (3, 4)))
    for dt in schema_types('OneHot', 'T1', 11):
        ind = oh_idx(dt)
        vv = np.array([0.5, -2], np.float32)
        case('OneHot_idx_%s' % SHORT[dt], 'OneHot', [ind, np.array(5, np.int64), vv],
             [onehot(f64(ind), 5, vv, 1).astype(np.float32)], {"axis": 1})
    for dt in ['int64', 'float32', 'uint8', 'float16', 'int32']:
        ind = oh_idx('int64')
        vv = np.array([0, 3], np.int32)
        case('OneHot_depth_%s' % SHORT[dt], 'OneHot', [ind, make(dt, [5]), vv], [onehot(ind, 5, vv).astype(np.int32)])
    for dt in schema_types('OneHot', 'T3', 11):
        ind = oh_idx('int32')
        vv = {'string': np.array(['off', 'on'], dtype=object), 'bool': np.array([False, True])}.get(dt)
        if vv is None:
            vv = make(dt, [2, 9] if is_int(dt) else [-0.25, 1.75])
        ref = onehot(ind, 5, list(vv.v if isinstance(vv, BF16) else vv), 0)
        case('OneHot_values_%s' % SHORT[dt], 'OneHot', [ind, np.array(5, np.int64), vv],
             [make(dt, ref.astype(np.float64)) if is_float(dt) else ref.astype(object if dt == 'string' else dt)],
             {'axis': 0})
    for dt in schema_types('Range', 'T', 11):
        if is_float(dt):
            s, l, d = make(dt, 1.25), make(dt, -3.5), make(dt, -0.75)
            n = int(max(np.ceil((f64(l) - f64(s)) / f64(d)), 0))
            ref = out(dt, f64(s) + np.arange(n) * f64(d))
        else:
            s, l, d = make(dt, -7), make(dt, 20), make(dt, 3)
            ref = np.arange(-7, 20, 3).astype(dt)
        case('Range_%s' % SHORT[dt], 'Range', [s, l, d], [ref])
    for dt in schema_types('DepthToSpace', 'T'):
        x = r.of(dt, (2, 8, 3, 2))
        for mode in ['DCR', 'CRD'] if dt in ('float32', 'string', 'bfloat16') else ['DCR']:
            def d2s(v, mode=mode):
                n, c, h, wd = v.shape
                if mode == 'DCR':
                    t = v.reshape(n, 2, 2, c // 4, h, wd).transpose(0, 3, 4, 1, 5, 2)
                else:
                    t = v.reshape(n, c // 4, 2, 2, h, wd).transpose(0, 1, 4, 2, 5, 3)
                return t.reshape(n, c // 4, h * 2, wd * 2)
            case('DepthToSpace_%s_%s' % (SHORT[dt], mode), 'DepthToSpace', [x], [_keep(x, d2s)], {'blocksize': 2, 'mode': mode})
    for dt in schema_types('SpaceToDepth', 'T'):
        x = r.of(dt, (2, 3, 4, 6))
        s2d = lambda v: v.reshape(2, 3, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(2, 12, 2, 3)
        case('SpaceToDepth_%s' % SHORT[dt], 'SpaceToDepth', [x], [_keep(x, s2d)], {'blocksize': 2})
    for dt in schema_types('ReverseSequence', 'T', 10):
        x = r.of(dt, (4, 3, 2))  # time, batch, feature
        lens = i64(4, 1, 3)

        def rev(v):
            o = v.copy()
            for b, n in enumerate(lens):
                o[:n, b] = v[:n, b][::-1]
            return o
        case('ReverseSequence_%s' % SHORT[dt], 'ReverseSequence', [x, lens], [_keep(x, rev)],
             {'batch_axis': 1, 'time_axis': 0})


# ---- nn: matmul, conv, pools, norms, resize, einsum -----------------------------------

def gen_nn(case, r, torch):
    F = torch.nn.functional
    T = lambda v: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))

    for dt in schema_types('MatMul', 'T'):
        a, b = r.of(dt, (2, 3, 5), -2, 2, 0, 9), r.of(dt, (5, 4), -2, 2, 0, 9)
        case('MatMul_%s' % SHORT[dt], 'MatMul', [a, b], [out(dt, np.matmul(vals(a), vals(b)))])
        if dt not in ('float32', 'int64', 'bfloat16'):
            continue
        a1 = r.of(dt, (5,), -2, 2, 0, 9)
        b3 = r.of(dt, (2, 5, 3), -2, 2, 0, 9)
        case('MatMul_%s_vec' % SHORT[dt], 'MatMul', [a1, b3], [out(dt, np.matmul(vals(a1), vals(b3)))])
    for dt in schema_types('Gemm', 'T'):
        a, b, c = r.of(dt, (5, 3), -2, 2, 0, 9), r.of(dt, (4, 5), -2, 2, 0, 9), r.of(dt, (4,), -2, 2, 0, 9)
        alpha, beta = (0.5, 2.0) if is_float(dt) else (2.0, 3.0)
        ref = alpha * vals(a).T.astype(np.float64) @ vals(b).T.astype(np.float64) + beta * vals(c).astype(np.float64)
        case('Gemm_%s' % SHORT[dt], 'Gemm', [a, b, c], [out(dt, ref)],
             {'transA': 1, 'transB': 1, 'alpha': alpha, 'beta': beta})
    for dt in schema_types('Einsum', 'T'):
        a, b = r.of(dt, (2, 3, 4), -2, 2, 0, 5), r.of(dt, (2, 4, 5), -2, 2, 0, 5)
        eq = 'bij,bjk->bik'
        with np.errstate(over='ignore'):
            ref = np.einsum(eq, vals(a), vals(b)) if is_float(dt) else np.einsum(eq, a.astype(np.int64), b.astype(np.int64))
        case('Einsum_%s' % SHORT[dt], 'Einsum', [a, b], [out(dt, ref)], {'equation': eq})
        if dt not in ('float32', 'int32', 'float16'):
            continue
        x = r.of(dt, (3, 3, 4), -2, 2, 0, 5)
        case('Einsum_%s_trace' % SHORT[dt], 'Einsum', [x], [out(dt, np.einsum('iij->j', vals(x)))], {'equation': 'iij->j'})

    for dt in schema_types('Conv', 'T', 11):
        x, wt, b = r.of(dt, (2, 4, 7, 6), -2, 2), r.of(dt, (6, 2, 3, 2), -1, 1), r.of(dt, (6,), -1, 1)
        ref = F.conv2d(T(f64(x)), T(f64(wt)), T(f64(b)), stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2).numpy()
        case('Conv_%s' % SHORT[dt], 'Conv', [x, wt, b], [out(dt, ref)],
             {'group': 2, 'strides': [2, 1], 'pads': [1, 1, 1, 1], 'dilations': [1, 2], 'kernel_shape': [3, 2]})
        x1, w1 = r.of(dt, (1, 3, 9), -2, 2), r.of(dt, (2, 3, 3), -1, 1)
        case('Conv_%s_1d' % SHORT[dt], 'Conv', [x1, w1], [out(dt, F.conv1d(T(f64(x1)), T(f64(w1)), stride=2).numpy())],
             {'strides': [2]})
    for dt in schema_types('ConvTranspose', 'T', 11):
        x, wt, b = r.of(dt, (2, 4, 3, 5), -2, 2), r.of(dt, (4, 3, 3, 2), -1, 1), r.of(dt, (6,), -1, 1)
        ref = F.conv_transpose2d(T(f64(x)), T(f64(wt)), T(f64(b)), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                 groups=2, dilation=(2, 1)).numpy()
        case('ConvTranspose_%s' % SHORT[dt], 'ConvTranspose', [x, wt, b], [out(dt, ref)],
             {'group': 2, 'strides': [2, 3], 'pads': [1, 0, 1, 0], 'output_padding': [1, 2], 'dilations': [2, 1]})
    for dt in schema_types('AveragePool', 'T', 11):
        x = r.of(dt, (2, 3, 7, 8))
        ref = F.avg_pool2d(T(f64(x)), 3, stride=2, padding=1, ceil_mode=False, count_include_pad=False).numpy()
        case('AveragePool_%s' % SHORT[dt], 'AveragePool', [x], [out(dt, ref)],
             {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1]})
    for dt in schema_types('MaxPool', 'T', 12):
        x = r.of(dt, (2, 3, 7, 8), -3, 3, -128, 127)
        ref = F.max_pool2d(T(vals(x).astype(np.float64)), (3, 2), stride=(2, 1), padding=(1, 0)).numpy()
        case('MaxPool_%s' % SHORT[dt], 'MaxPool', [x], [out(dt, ref)],
             {'kernel_shape': [3, 2], 'strides': [2, 1], 'pads': [1, 0, 1, 0]})
    for op in ['GlobalAveragePool', 'GlobalMaxPool']:
        for dt in schema_types(op, 'T', 1):
            x = r.of(dt, (2, 3, 5, 4))
            v = f64(x)
            ref = v.mean((2, 3), keepdims=True) if op == 'GlobalAveragePool' else v.max((2, 3), keepdims=True)
            case('%s_%s' % (op, SHORT[dt]), op, [x], [out(dt, ref)])
    for dt in schema_types('LpPool', 'T', 11):
        x = r.of(dt, (1, 2, 5, 6))
        ref = np.power(F.avg_pool2d(T(np.abs(f64(x)) ** 3), 2, stride=(2, 1)).numpy() * 4, 1 / 3)
        case('LpPool_%s' % SHORT[dt], 'LpPool', [x], [out(dt, ref)], {'kernel_shape': [2, 2], 'strides': [2, 1], 'p': 3})
    for dt in schema_types('GlobalLpPool', 'T', 2):
        x = r.of(dt, (2, 3, 4, 3))
        case('GlobalLpPool_%s' % SHORT[dt], 'GlobalLpPool', [x],
             [out(dt, np.sqrt((f64(x) ** 2).sum((2, 3), keepdims=True)))])

    # BatchNormalization: T sweep (T1 = T2 = T), then mixed scale/mean types.
    def bn(x, s, b, m, v, eps=1e-5):
        sh = (1, -1) + (1,) * (x.ndim - 2)
        return (f64(x) - f64(m).reshape(sh)) / np.sqrt(f64(v).reshape(sh) + f32(eps)) * f64(s).reshape(sh) + f64(b).reshape(sh)
    bn_t = schema_types('BatchNormalization', 'T', 15)
    combos = [(t, t, t) for t in bn_t] + [('float32', t1, 'float32') for t1 in bn_t if t1 != 'float32'] + \
             [('float16', 'float32', t2) for t2 in bn_t if t2 != 'float32']
    for t, t1, t2 in combos:
        x = r.of(t, (2, 3, 4, 5))
        s, b = r.of(t1, (3,)), r.of(t1, (3,))
        m, v = r.of(t2, (3,)), r.of(t2, (3,), 0.5, 2)
        name = 'BatchNormalization_%s' % SHORT[t] if (t == t1 == t2) else 'BatchNormalization_%s_%s_%s' % (
            SHORT[t], SHORT[t1], SHORT[t2])
        case(name, 'BatchNormalization', [x, s, b, m, v], [out(t, bn(x, s, b, m, v))], {'epsilon': 1e-5})
    # LayerNormalization: T sweep, stash float (mean / inv std dev outputs float32), then bf16 stash.
    for dt in schema_types('LayerNormalization', 'T', 17):
        x = r.of(dt, (3, 5, 7))
        sc, bi = r.of(dt, (7,)), r.of(dt, (7,))
        v = f64(x)
        mu = v.mean(-1, keepdims=True)
        inv = 1 / np.sqrt(v.var(-1, keepdims=True) + f32(1e-5))
        y = (v - mu) * inv * f64(sc) + f64(bi)
        case('LayerNormalization_%s' % SHORT[dt], 'LayerNormalization', [x, sc, bi],
             [out(dt, y), mu.astype(np.float32), inv.astype(np.float32)])
        mu2 = v.mean((1, 2), keepdims=True)
        inv2 = 1 / np.sqrt(v.var((1, 2), keepdims=True) + f32(1e-5))
        sc2 = r.of(dt, (5, 7))
        case('LayerNormalization_%s_axis1_nobias' % SHORT[dt], 'LayerNormalization', [x, sc2],
             [out(dt, (v - mu2) * inv2 * f64(sc2))], {'axis': 1}, n_outputs=1)
    x = r.of('float32', (3, 5, 7))
    sc = r.of('float32', (7,))
    v = f64(x)
    mu = v.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(v.var(-1, keepdims=True) + f32(1e-5))
    case('LayerNormalization_f32_stash_bf16', 'LayerNormalization', [x, sc],
         [out('float32', (v - mu) * inv * f64(sc)), BF16(mu), BF16(inv)], {'stash_type': 16})
    for dt in schema_types('InstanceNormalization', 'T', 6):
        x = r.of(dt, (2, 3, 4, 5))
        s, b = r.of(dt, (3,)), r.of(dt, (3,))
        ref = F.instance_norm(T(f64(x)), weight=T(f64(s)), bias=T(f64(b)), eps=f32(1e-3)).numpy()
        case('InstanceNormalization_%s' % SHORT[dt], 'InstanceNormalization', [x, s, b], [out(dt, ref)], {'epsilon': 1e-3})
    for dt in schema_types('LRN', 'T', 13):
        x = r.of(dt, (2, 6, 3, 3))
        v = f64(x)
        sq = np.zeros_like(v)
        size, alpha, beta, bias = 3, f32(0.02), f32(0.6), f32(1.5)
        for c in range(6):
            lo, hi = max(0, c - 1), min(5, c + 1)
            sq[:, c] = (v[:, lo:hi + 1] ** 2).sum(1)
        case('LRN_%s' % SHORT[dt], 'LRN', [x], [out(dt, v / (bias + alpha / size * sq) ** beta)],
             {'size': 3, 'alpha': 0.02, 'beta': 0.6, 'bias': 1.5})
    for dt in schema_types('MeanVarianceNormalization', 'T', 13):
        x = r.of(dt, (2, 3, 4, 5))
        v = f64(x)
        mu = v.mean((0, 2, 3), keepdims=True)
        sd = np.sqrt(((v - mu) ** 2).mean((0, 2, 3), keepdims=True))
        case('MeanVarianceNormalization_%s' % SHORT[dt], 'MeanVarianceNormalization', [x], [out(dt, (v - mu) / (sd + 1e-9))])
    for dt in schema_types('LpNormalization', 'T', 1):
        x = r.of(dt, (3, 5, 7))
        v = f64(x)
        case('LpNormalization_%s' % SHORT[dt], 'LpNormalization', [x], [out(dt, v / np.sqrt((v ** 2).sum(-1, keepdims=True)))])
        case('LpNormalization_%s_p1_axis1' % SHORT[dt], 'LpNormalization', [x],
             [out(dt, v / np.abs(v).sum(1, keepdims=True))], {'p': 1, 'axis': 1})
    for dt in schema_types('Det', 'T', 11):
        x = r.of(dt, (2, 3, 3), -2, 2)
        case('Det_%s' % SHORT[dt], 'Det', [x], [out(dt, np.linalg.det(f64(x)))])

    # Resize: nearest (asymmetric, floor) for every element type, linear for floats,
    # every scales dtype.
    for dt in schema_types('Resize', 'T1', 13):
        x = r.of(dt, (1, 2, 3, 4))
        iy = np.floor(np.arange(5) / (5 / 3)).astype(int)
        ix = np.floor(np.arange(6) / 1.5).astype(int)
        ref = _keep(x, lambda v: v[:, :, iy][:, :, :, ix])
        case('Resize_%s_nearest' % SHORT[dt], 'Resize', [x, None, None, np.array([1, 2, 5, 6], np.int64)], [ref],
             {'mode': 'nearest', 'coordinate_transformation_mode': 'asymmetric', 'nearest_mode': 'floor'})
    for dt in schema_types('Resize', 'T2', 13):
        x = r.of('float32', (1, 2, 3, 4))
        sc = make(dt, [1, 1, 2, 1.5])
        ref = F.interpolate(T(f64(x)), scale_factor=(2, 1.5), mode='bilinear', align_corners=False,
                            recompute_scale_factor=False).numpy()
        case('Resize_scales_%s_linear' % SHORT[dt], 'Resize', [x, None, sc], [out('float32', ref)], {'mode': 'linear'})
    for dt in FLOATS:
        x = r.of(dt, (1, 2, 3, 4))
        ref = F.interpolate(T(f64(x)), size=(5, 7), mode='bilinear', align_corners=True).numpy()
        case('Resize_%s_linear_align' % SHORT[dt], 'Resize', [x, None, None, np.array([1, 2, 5, 7], np.int64)],
             [out(dt, ref)], {'mode': 'linear', 'coordinate_transformation_mode': 'align_corners'})
