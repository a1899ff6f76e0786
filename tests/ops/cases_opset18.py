"""Suite `attrs`, cases named op18_*: ops of opsets 18-28 that the official
data covers thinly: BitwiseAnd/Or/Xor/Not with broadcasting on every integer
dtype, BitShift's signed edge cases (opset 28: negative shifts, shifts of
the width or more, negative values), CumProd with exclusive/reverse/axis,
Col2Im with strides, dilations and pads, and a few CenterCropPad, BitCast
and TensorScatter variants.

The truth is computed here independently of kiln's kernels: Python integers
for the shifts (two's complement wrapped by hand), numpy's bitwise ops and
cumprod in float64 or exact integers, Col2Im as the adjoint of an im2col
gather built with numpy index arrays (np.add.at onto a padded image).

The ops tests run with Debian's onnx 1.12, whose schemas stop at opset 17:
the models are made with onnx.helper and saved without onnx.checker (the
Writer only checks with --check, which reports these ops as unknown)."""
import numpy as np

from oplib import SINTS, UINTS, INTS, Rand, out

SUITE = 'attrs'


def gen(w, torch=None):
    def case(name, op, opset, ins, outs, attrs=None, **kw):
        w.case(SUITE, 'op18_' + name, op, opset=opset, inputs=ins, outputs=outs, attrs=attrs or {}, **kw)

    gen_bitwise(case)
    gen_bitshift(case)
    gen_cumprod(case)
    gen_col2im(case)
    gen_misc(case)


def _short(dt):
    return {'int8': 'i8', 'int16': 'i16', 'int32': 'i32', 'int64': 'i64',
            'uint8': 'u8', 'uint16': 'u16', 'uint32': 'u32', 'uint64': 'u64'}[dt]


def _full_range(r, dt, shape):
    """Integers over dt's whole range, with its extremes mixed in."""
    info = np.iinfo(dt)
    v = r.rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)
    flat = v.reshape(-1)
    if flat.size >= 3:
        flat[0], flat[1], flat[2] = info.min, info.max, 0
    return v


# ---- BitwiseAnd / Or / Xor / Not ---------------------------------------------------

def gen_bitwise(case):
    r = Rand(1801)
    shapes = [((2, 3, 4), (3, 1)), ((1, 4), (2, 3, 1)), ((5,), ()), ((2, 1, 3), (2, 4, 1))]
    fns = {'BitwiseAnd': np.bitwise_and, 'BitwiseOr': np.bitwise_or, 'BitwiseXor': np.bitwise_xor}
    for dt in INTS:
        for k, (op, fn) in enumerate(sorted(fns.items())):
            sa, sb = shapes[(INTS.index(dt) + k) % len(shapes)]
            a, b = _full_range(r, dt, sa), _full_range(r, dt, sb)
            case('%s_%s_bcast' % (op[7:].lower(), _short(dt)), op, 18, [a, b], [fn(a, b)])
        x = _full_range(r, dt, (2, 3, 4))
        case('not_%s' % _short(dt), 'BitwiseNot', 18, [x], [np.invert(x)])


# ---- BitShift (signed from opset 28) ---------------------------------------------

def _shift_truth(x, y, dt, right):
    """Opset 28's rule on Python ints: a shift that is negative or not below
    the width leaves the sign fill (-1 for a negative value shifted right,
    else 0); otherwise an arithmetic right shift or a left shift whose bits
    past the width are dropped (two's complement for signed dtypes)."""
    info = np.iinfo(dt)
    width = info.bits
    res = []
    for xv, yv in zip(np.asarray(x).reshape(-1).tolist(), np.asarray(y).reshape(-1).tolist()):
        if yv < 0 or yv >= width:
            v = -1 if (right and xv < 0) else 0
        elif right:
            v = xv >> yv  # Python's >> floors: the arithmetic shift
        else:
            v = (xv << yv) & ((1 << width) - 1)
            if info.min < 0 and v >= 1 << (width - 1):
                v -= 1 << width
        res.append(v)
    return np.array(res, dtype=object).astype(dt).reshape(np.asarray(x).shape)


def gen_bitshift(case):
    r = Rand(1802)
    for dt in SINTS + UINTS:
        width = np.iinfo(dt).bits
        n = 4 * (width + 8)
        x = _full_range(r, dt, (n,))
        if dt in SINTS:
            amounts = range(-4, width + 4)  # every in-range shift, negatives and past the width
        else:
            amounts = list(range(0, width + 4)) + [int(np.iinfo(dt).max), int(np.iinfo(dt).max) - 1]
        y = np.array((list(amounts) * n)[:n], dtype=dt)
        for direction in ('LEFT', 'RIGHT'):
            want = _shift_truth(x, y, dt, direction == 'RIGHT')
            case('bitshift_%s_%s_edges' % (direction.lower(), _short(dt)), 'BitShift', 28, [x, y], [want],
                 {'direction': direction})
        # Broadcast: a column of values against a row of shifts.
        xs = _full_range(r, dt, (5, 1))
        ys = np.array([0, 1, width - 1, width, width + 1], dtype=np.int64)
        if dt in SINTS:
            ys = np.concatenate([ys, [-1, -width]])
        ys = ys.astype(dt).reshape(1, -1)
        xb, yb = np.broadcast_arrays(xs, ys)
        case('bitshift_right_%s_bcast' % _short(dt), 'BitShift', 28, [xs, ys],
             [_shift_truth(xb, yb, dt, True)], {'direction': 'RIGHT'})


# ---- CumProd -----------------------------------------------------------------------

def _cumprod_truth(x, axis, exclusive, reverse, dt):
    """numpy cumprod in float64 (floats) or Python ints wrapped to dt."""
    v = np.asarray(x)
    exact = dt not in ('float16', 'float32', 'float64', 'bfloat16')
    v = v.astype(object) if exact else v.astype(np.float64)
    if reverse:
        v = np.flip(v, axis)
    ones = np.ones_like(np.take(v, [0], axis=axis))
    if exclusive:
        v = np.concatenate([ones, np.take(v, np.arange(v.shape[axis] - 1), axis=axis)], axis=axis)
    res = np.cumprod(v, axis=axis)
    if reverse:
        res = np.flip(res, axis)
    if exact:
        info = np.iinfo(dt)
        mod = 1 << info.bits
        wrap = np.vectorize(lambda q: ((int(q) - info.min) % mod) + info.min, otypes=[object])
        return wrap(res).astype(dt)
    return out(dt, res)


def gen_cumprod(case):
    r = Rand(1803)
    shape = (3, 4, 5)
    for dt in ('float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint32', 'uint64'):
        if dt in ('int32', 'int64', 'uint32', 'uint64'):
            lo = 0 if dt.startswith('u') else -3
            x = r.ints(dt, shape, lo, 3)
            if dt.endswith('64'):
                x = _full_range(r, dt, shape)  # products wrap
        else:
            x = r.floats(dt, shape, 0.5, 1.5)
        xv = x.v if hasattr(x, 'v') else x
        for axis, exclusive, reverse in ((0, 0, 0), (1, 1, 0), (2, 0, 1), (-1, 1, 1), (-3, 1, 1)):
            name = 'cumprod_%s_axis%s%s%s' % (dt, str(axis).replace('-', 'm'), '_excl' if exclusive else '',
                                              '_rev' if reverse else '')
            axis_t = np.array(axis, dtype=np.int32 if axis % 2 else np.int64)
            ax = axis % len(shape)
            case(name, 'CumProd', 26, [x, axis_t], [_cumprod_truth(xv, ax, exclusive, reverse, dt)],
                 {'exclusive': exclusive, 'reverse': reverse})


# ---- Col2Im ------------------------------------------------------------------------

def _col2im_truth(cols, image, block, strides, dilations, pads):
    """The adjoint of im2col: each column entry is added at the padded-image
    position its block and tap read; the padding is cut off at the end."""
    nd = len(image)
    n, ck, length = cols.shape
    k = int(np.prod(block))
    c = ck // k
    padded = [image[i] + pads[i] + pads[nd + i] for i in range(nd)]
    nblocks = [(padded[i] - (dilations[i] * (block[i] - 1) + 1)) // strides[i] + 1 for i in range(nd)]
    assert int(np.prod(nblocks)) == length
    taps = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing='ij'), -1).reshape(-1, nd)
    starts = np.stack(np.meshgrid(*[np.arange(b) for b in nblocks], indexing='ij'), -1).reshape(-1, nd)
    pos = starts[None, :, :] * np.array(strides) + taps[:, None, :] * np.array(dilations)  # [k, L, nd]
    acc = np.zeros((n, c) + tuple(padded), dtype=np.float64 if cols.dtype.kind == 'f' else object)
    vals = cols.reshape(n, c, k, length).astype(acc.dtype)
    for t in range(k):
        for b in range(length):
            np.add.at(acc, (slice(None), slice(None)) + tuple(pos[t, b]), vals[:, :, t, b])
    crop = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(nd))
    return acc[crop]


def gen_col2im(case):
    r = Rand(1804)
    configs = [
        # name, image, block, strides, dilations, pads, n, c
        ('1d', [9], [3], [2], [1], [1, 0], 2, 2),
        ('2d_strides', [5, 6], [2, 3], [2, 1], [1, 1], [0, 0, 0, 0], 1, 2),
        ('2d_dilations', [6, 5], [2, 2], [1, 1], [2, 2], [0, 0, 0, 0], 1, 3),
        ('2d_pads', [4, 5], [3, 3], [1, 1], [1, 1], [1, 2, 1, 0], 2, 1),
        ('2d_all', [7, 6], [3, 2], [2, 3], [2, 1], [2, 1, 1, 2], 1, 2),
        ('3d', [4, 3, 5], [2, 2, 3], [1, 2, 2], [1, 1, 1], [0, 1, 1, 1, 0, 0], 1, 2),
    ]
    for name, image, block, strides, dilations, pads, n, c in configs:
        nd = len(image)
        padded = [image[i] + pads[i] + pads[nd + i] for i in range(nd)]
        length = int(np.prod([(padded[i] - (dilations[i] * (block[i] - 1) + 1)) // strides[i] + 1 for i in range(nd)]))
        k = int(np.prod(block))
        attrs = {'strides': strides, 'dilations': dilations, 'pads': pads}
        for dt in ('float32', 'float64', 'int32'):
            if dt == 'int32':
                cols = r.ints(dt, (n, c * k, length), -50, 50)
            else:
                cols = r.floats(dt, (n, c * k, length))
            want = _col2im_truth(cols, image, block, strides, dilations, pads)
            case('col2im_%s_%s' % (name, dt), 'Col2Im', 18,
                 [cols, np.array(image, np.int64), np.array(block, np.int64)], [out(dt, want)], attrs)
    # Default attributes: stride 1, no dilation or padding.
    cols = r.floats('float32', (1, 4, 12))
    want = _col2im_truth(cols, [4, 5], [2, 2], [1, 1], [1, 1], [0, 0, 0, 0])
    case('col2im_defaults', 'Col2Im', 18, [cols, np.array([4, 5], np.int64), np.array([2, 2], np.int64)],
         [out('float32', want)])


# ---- CenterCropPad, BitCast, TensorScatter ----------------------------------------------

def gen_misc(case):
    r = Rand(1805)
    strs = r.of('string', (3, 5))
    # crop axis 1 by 3 (start 1), pad axis 0 by 3 (1 before, 2 after)
    want = np.full((6, 2), '', dtype=object)
    want[1:4, :] = strs[:, 1:3]
    case('center_crop_pad_str', 'CenterCropPad', 18, [strs, np.array([6, 2], np.int64)], [want])
    x = r.floats('float32', (4, 3, 2))
    want = np.zeros((4, 2, 5), np.float32)
    want[:, :, 1:3] = x[:, 0:2, :]
    case('center_crop_pad_neg_axes', 'CenterCropPad', 18, [x, np.array([5, 2], np.int32)], [want],
         {'axes': [-1, 1]})
    for src, dst in (('float32', 'uint32'), ('int64', 'float64'), ('uint16', 'float16'), ('int8', 'uint8')):
        v = r.of(src, (2, 3)) if src != 'int64' else _full_range(r, 'int64', (2, 3))
        to = {'uint32': 12, 'float64': 11, 'float16': 10, 'uint8': 2}[dst]
        case('bitcast_%s_%s' % (_short_any(src), _short_any(dst)), 'BitCast', 26, [v],
             [np.ascontiguousarray(v).view(dst)], {'to': to})
    # TensorScatter: one write position per batch entry; circular wraps.
    past = r.floats('float32', (2, 3, 6, 4))
    upd = r.floats('float32', (2, 3, 3, 4))
    for mode, wi in (('linear', [3, 0]), ('circular', [5, -2])):
        want = past.copy()
        for b in range(2):
            for s in range(3):
                pos = wi[b] + s
                want[b, :, pos % 6 if mode == 'circular' else pos, :] = upd[b, :, s, :]
        case('tensorscatter_%s' % mode, 'TensorScatter', 24, [past, upd, np.array(wi, np.int64)], [want],
             {'mode': mode})
    past = r.floats('float32', (2, 5, 3))
    upd = r.floats('float32', (2, 2, 3))
    want = past.copy()
    want[:, 0:2, :] = upd
    case('tensorscatter_axis1_no_indices', 'TensorScatter', 24, [past, upd], [want], {'axis': 1})


def _short_any(dt):
    return {'float32': 'f32', 'float64': 'f64', 'float16': 'f16'}.get(dt) or _short(dt)
