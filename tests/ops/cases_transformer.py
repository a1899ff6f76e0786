"""Suite `transformer`: the opset 18-28 ops of kiln's transformer family
(src/ops/nn_transformer.c) on random shapes, attributes and dtypes:
RMSNormalization-23, RotaryEmbedding-23 (both layouts, 3-D input with
num_heads, partial rotary dim, with and without position_ids), Gelu-20
(approximate none and tanh), Swish-24, SwiGLU-28, Mish-18 and
GroupNormalization-18/21 (scale and bias per group, then per channel).

How the models are made: onnx 1.12 (Debian's /usr/bin/python3) knows none
of these ops, so each model is one node built with onnx.helper.make_node /
make_model with an opset import of the op's version (20-28), ir_version 8,
and saved without onnx.checker (the Writer runs the checker only with
--check, where these models are expected to be refused).

The truth is float64 numpy written here from the ONNX spec, not kiln's code:
inputs are the (already rounded) values the model receives, results are
rounded once to the output dtype, except where the spec's function casts an
intermediate to the input's type (RMSNormalization's and
GroupNormalization-21's normalized value): the reference rounds there too."""
import math

import numpy as np

from oplib import SHORT, Rand, f64, make, out

SUITE = 'transformer'
FLOATS = ['float32', 'float16', 'bfloat16', 'float64']


def f32(v):
    """An attribute value as the float32 the model stores, in float64."""
    return float(np.float32(v))


def as_dtype(dt, v):
    """float64 values rounded to dtype dt, back in float64 (a spec Cast)."""
    return f64(out(dt, v))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gen(w):
    r = Rand(2323)

    def case(name, op, opset, ins, outs, attrs=None, **kw):
        w.case(SUITE, name, op, ins, outs, attrs or {}, opset, **kw)

    def shape(rank, lo=1, hi=5):
        return tuple(int(d) for d in r.integers(lo, hi + 1, rank))

    # ---- elementwise activations ---------------------------------------------------
    for dt in FLOATS:
        for k in range(2):
            x = r.of(dt, shape(int(r.integers(0, 4))), -5, 5)
            v = f64(x)
            case('gelu_none_%s_%d' % (SHORT[dt], k), 'Gelu', 20, [x],
                 [out(dt, 0.5 * v * (1 + _erf(v / math.sqrt(2))))], {} if k == 0 else {'approximate': 'none'})
            c = math.sqrt(2 / math.pi)
            case('gelu_tanh_%s_%d' % (SHORT[dt], k), 'Gelu', 20, [x],
                 [out(dt, 0.5 * v * (1 + np.tanh(c * (v + 0.044715 * v ** 3))))], {'approximate': 'tanh'})
        x = r.of(dt, shape(3), -8, 8)
        v = f64(x)
        alpha = f32(r.uniform(0.2, 2.5))
        case('swish_%s' % SHORT[dt], 'Swish', 24, [x], [out(dt, v / (1 + np.exp(-alpha * v)))], {'alpha': alpha})
        case('swish_%s_default' % SHORT[dt], 'Swish', 24, [x], [out(dt, v / (1 + np.exp(-v)))])
        a, b = r.of(dt, x.shape, -6, 6), r.of(dt, x.shape)
        va, vb = f64(a), f64(b)
        case('swiglu_%s' % SHORT[dt], 'SwiGLU', 28, [a, b], [out(dt, va / (1 + np.exp(-alpha * va)) * vb)],
             {'alpha': alpha})
        x = r.of(dt, shape(2), -10, 10)
        v = f64(x)
        case('mish_%s' % SHORT[dt], 'Mish', 22 if dt == 'bfloat16' else 18, [x], [out(dt, v * np.tanh(np.log1p(np.exp(v))))])

    # ---- RMSNormalization ---------------------------------------------------------------
    for dt in FLOATS:
        for k in range(3):
            rank = int(r.integers(1, 5))
            xs = shape(rank)
            axis = int(r.integers(-rank, rank))
            pos = axis + rank if axis < 0 else axis
            # scale: a suffix of X's normalized dims, some of them 1 (unidirectional broadcast)
            tail = xs[pos:]
            n_sc = int(r.integers(1, len(tail) + 1))
            ss = tuple(d if r.uniform(0, 1) < 0.7 else 1 for d in tail[len(tail) - n_sc:])
            x, sc = r.of(dt, xs), r.of(dt, ss)
            attrs = {'axis': axis}
            eps = 1e-5
            if k == 1:
                eps = f32(r.uniform(1e-3, 0.5))
                attrs['epsilon'] = eps
            eps = f32(eps)
            v = f64(x)
            red = tuple(range(pos, rank))
            norm = as_dtype(dt, v / np.sqrt((v * v).mean(axis=red, keepdims=True) + eps))
            case('rms_%s_r%d_axis%d_%d' % (SHORT[dt], rank, axis, k), 'RMSNormalization', 23, [x, sc],
                 [out(dt, norm * f64(sc))], attrs)
    # X float16, scale float: Y has the scale's type (V), the normalized value X's (T).
    x, sc = r.of('float16', (3, 4, 6)), r.of('float32', (6,))
    v = f64(x)
    norm = as_dtype('float16', v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + f32(1e-5)))
    case('rms_x_f16_scale_f32', 'RMSNormalization', 23, [x, sc], [out('float32', norm * f64(sc))])

    # ---- GroupNormalization -------------------------------------------------------------
    for dt in FLOATS:
        for opset in (18, 21):
            groups = int(r.integers(1, 4))
            xs = (int(r.integers(1, 4)), groups * int(r.integers(1, 4))) + shape(int(r.integers(0, 3)))
            npar = xs[1] if opset >= 21 else groups
            x, s, b = r.of(dt, xs), r.of(dt, (npar,)), r.of(dt, (npar,))
            eps = f32(r.uniform(1e-5, 0.1))
            v = f64(x).reshape(xs[0], groups, -1)
            norm = ((v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps)).reshape(xs[0], xs[1], -1)
            if opset >= 21:
                norm = as_dtype(dt, norm)
                sv, bv = f64(s)[None, :, None], f64(b)[None, :, None]
            else:  # per group: channel c uses parameter c // (C / groups)
                per = xs[1] // groups
                sv, bv = np.repeat(f64(s), per)[None, :, None], np.repeat(f64(b), per)[None, :, None]
            y = (norm * sv + bv).reshape(xs)
            case('groupnorm%d_%s_g%d' % (opset, SHORT[dt], groups), 'GroupNormalization', opset, [x, s, b], [out(dt, y)],
                 {'num_groups': groups, 'epsilon': eps})

    # ---- RotaryEmbedding -------------------------------------------------------------------
    k = 0
    for dt in ['float32', 'float16', 'bfloat16']:
        for packed in (False, True):
            for interleaved in (0, 1):
                for with_pos in (False, True):
                    for partial in (False, True):
                        k += 1
                        B, S, H = int(r.integers(1, 4)), int(r.integers(1, 6)), int(r.integers(1, 5))
                        D = 2 * int(r.integers(1, 7))
                        rot = 2 * int(r.integers(1, D // 2 + 1)) if partial else D
                        half = rot // 2
                        x4 = r.of(dt, (B, H, S, D))  # the [B, H, S, D] layout
                        xv = f64(x4)
                        if with_pos:
                            max_pos = int(r.integers(S, S + 20))
                            pos = r.integers(0, max_pos, (B, S)).astype(np.int64)
                            cos, sin = r.of(dt, (max_pos, half), -1, 1), r.of(dt, (max_pos, half), -1, 1)
                            cv, sv = f64(cos)[pos], f64(sin)[pos]  # [B, S, half]
                        else:
                            pos = None
                            cos, sin = r.of(dt, (B, S, half), -1, 1), r.of(dt, (B, S, half), -1, 1)
                            cv, sv = f64(cos), f64(sin)
                        cv, sv = cv[:, None], sv[:, None]  # [B, 1, S, half] against [B, H, S, .]
                        y = xv.copy()
                        if interleaved:
                            i1, i2 = np.arange(0, rot, 2), np.arange(1, rot, 2)
                        else:
                            i1, i2 = np.arange(half), np.arange(half, rot)
                        x1, x2 = xv[..., i1], xv[..., i2]
                        y[..., i1] = cv * x1 - sv * x2
                        y[..., i2] = sv * x1 + cv * x2
                        attrs = {}
                        if interleaved:
                            attrs['interleaved'] = 1
                        if partial:
                            attrs['rotary_embedding_dim'] = rot
                        if packed:  # [B, S, H*D] with num_heads
                            attrs['num_heads'] = H
                            x_in = make(dt, xv.transpose(0, 2, 1, 3).reshape(B, S, H * D))
                            y = y.transpose(0, 2, 1, 3).reshape(B, S, H * D)
                        else:
                            x_in = x4
                        name = 'rope_%s_%s%s%s%s' % (SHORT[dt], '3d' if packed else '4d', '_interleaved' if interleaved else '',
                                                     '_pos' if with_pos else '', '_dim%d_of%d' % (rot, D) if partial else '')
                        ins = [x_in, cos, sin] + ([pos] if with_pos else [])
                        case(name, 'RotaryEmbedding', 23, ins, [out(dt, y)], attrs)

