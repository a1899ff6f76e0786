"""Cases for opset 18-28 changes of existing ops and the opset-20 string ops
(suite `attrs`, names `latest_*`): Resize's axes / keep_aspect_ratio_policy
/ antialias / half_pixel_symmetric, Pad wrap, GridSample 5-D, DFT's axis
input and IRFFT, ReduceMax/Min over bool, Range over f16, Equal over
strings, SpaceToDepth CRD, LpNormalization's zero rows, StringConcat,
StringSplit and RegexFullMatch, and the ai.onnx.ml ops LabelEncoder,
TreeEnsemble, ArrayFeatureExtractor and Binarizer.

Expected values are computed here, independently of kiln: numpy in float64
(Resize by per-axis weight matrices written from the spec's formulas,
numpy.pad, numpy.fft), torch's grid_sample for the 5-D GridSample, Python's
str.split and re.fullmatch for the string ops. Debian's onnx (1.12) knows
none of these opsets: the models are built with onnx.helper and saved
without the checker (run gen_op_cases.py --check to see it refuse them)."""
import math
import re

import numpy as np

SUITE = 'attrs'


def gen(w, torch):
    def case(name, op, opset, ins, outs, attrs=None, **kw):
        w.case(SUITE, 'latest_' + name, op, ins, outs, attrs or {}, opset, **kw)

    gen_resize(case)
    gen_misc(case, torch)
    gen_strings(case)
    gen_ml(case)


# ---- Resize --------------------------------------------------------------------------

def _cubic(x, a):
    x = abs(x)
    if x <= 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def resize_matrix(n_in, n_out, scale, mode, ctm='half_pixel', antialias=False, a=-0.75):
    """(n_out, n_in) float64 weights of one axis: output x reads sum_k W[x, k] * in[k]."""
    m = np.zeros((n_out, n_in))
    out_width = scale * n_in
    for x in range(n_out):
        if ctm == 'half_pixel':
            xo = (x + 0.5) / scale - 0.5
        elif ctm == 'half_pixel_symmetric':
            off = n_in / 2 * (1 - n_out / out_width)
            xo = off + (x + 0.5) / scale - 0.5
        elif ctm == 'asymmetric':
            xo = x / scale
        else:
            raise ValueError(ctm)
        if mode == 'nearest':  # round_prefer_floor
            i = int(math.floor(xo)) if xo - math.floor(xo) <= 0.5 else int(math.floor(xo)) + 1
            m[x, min(max(i, 0), n_in - 1)] += 1
            continue
        # Filter support 1 (linear) or 2 (cubic), stretched by 1/scale when antialiasing a downsample.
        support = 1.0 if mode == 'linear' else 2.0
        s = min(scale, 1.0) if antialias else 1.0
        lo = math.floor(xo - support / s) + 1
        hi = math.ceil(xo + support / s) - 1
        taps = []
        for k in range(lo, hi + 1):
            d = (k - xo) * s
            wgt = max(0.0, 1 - abs(d)) if mode == 'linear' else _cubic(d, a)
            taps.append((k, wgt))
        tot = sum(t[1] for t in taps)
        for k, wgt in taps:
            m[x, min(max(k, 0), n_in - 1)] += wgt / tot
    return m


def apply_axes(x, mats):
    """x resized by mats {axis: matrix}."""
    y = x.astype(np.float64)
    for ax, mat in mats.items():
        y = np.moveaxis(np.tensordot(mat, np.moveaxis(y, ax, 0), axes=(1, 0)), 0, ax)
    return y


def gen_resize(case):
    rng = np.random.default_rng(18)
    x = rng.uniform(-2, 2, (2, 3, 7, 9)).astype(np.float32)
    f32 = np.float32

    # axes: scales / sizes name only the listed axes (in their order).
    for axes in ([2, 3], [3, 2], [-1]):
        pos = [a % 4 for a in axes]
        scales = {2: 1.5, 3: 0.75}
        mats = {a: resize_matrix(x.shape[a], int(math.floor(x.shape[a] * scales[a])), scales[a], 'linear') for a in pos}
        name = 'resize18_axes_%s_linear_scales' % '_'.join(str(a).replace('-', 'm') for a in axes)
        case(name, 'Resize', 18, [x, None, np.array([scales[a] for a in pos], f32)],
             [apply_axes(x, mats).astype(f32)], {'mode': 'linear', 'axes': axes}, inits=(2,))
    sizes = {2: 4, 3: 12}
    mats = {a: resize_matrix(x.shape[a], sizes[a], sizes[a] / x.shape[a], 'nearest', 'asymmetric') for a in (3, 2)}
    case('resize18_axes_3_2_nearest_sizes', 'Resize', 18, [x, None, None, np.array([12, 4], np.int64)],
         [apply_axes(x, mats).astype(f32)], {'mode': 'nearest', 'axes': [3, 2],
                                            'coordinate_transformation_mode': 'asymmetric'}, inits=(3,))

    # keep_aspect_ratio_policy: one scale for every listed axis, sizes rounded half up.
    for policy, pick in (('not_larger', min), ('not_smaller', max)):
        want = [5, 5]
        sc = pick(want[0] / 7, want[1] / 9)
        outs = [int(math.floor(sc * n + 0.5)) for n in (7, 9)]
        mats = {2: resize_matrix(7, outs[0], sc, 'linear'), 3: resize_matrix(9, outs[1], sc, 'linear')}
        case('resize18_keep_aspect_%s' % policy, 'Resize', 18, [x, None, None, np.array(want, np.int64)],
             [apply_axes(x, mats).astype(f32)], {'mode': 'linear', 'axes': [2, 3], 'keep_aspect_ratio_policy': policy},
             inits=(3,))

    # antialias: downsampling linear and cubic (scales and sizes), and an upsample it leaves alone.
    for mode in ('linear', 'cubic'):
        sc = (0.4, 0.6)
        outs = [int(math.floor(n * s)) for n, s in zip((7, 9), sc)]
        mats = {2: resize_matrix(7, outs[0], sc[0], mode, antialias=True),
                3: resize_matrix(9, outs[1], sc[1], mode, antialias=True)}
        case('resize18_antialias_%s_scales' % mode, 'Resize', 18,
             [x, None, np.array([1, 1, sc[0], sc[1]], f32)], [apply_axes(x, mats).astype(f32)],
             {'mode': mode, 'antialias': 1}, inits=(2,))
        mats = {2: resize_matrix(7, 3, 3 / 7, mode, antialias=True), 3: resize_matrix(9, 13, 13 / 9, mode, antialias=True)}
        case('resize18_antialias_%s_sizes_mixed' % mode, 'Resize', 18,
             [x, None, None, np.array([3, 13], np.int64)], [apply_axes(x, mats).astype(f32)],
             {'mode': mode, 'antialias': 1, 'axes': [2, 3]}, inits=(3,))
    # A run-time (non-constant) scales input keeps the kernel's own path.
    mats = {3: resize_matrix(9, 2, 0.25, 'linear', antialias=True)}
    case('resize18_antialias_linear_runtime_scales', 'Resize', 18,
         [x, None, np.array([0.25], f32)], [apply_axes(x, mats).astype(f32)],
         {'mode': 'linear', 'antialias': 1, 'axes': [3]})

    # half_pixel_symmetric: fractional output widths (7 * 0.7 = 4.9 -> 4, 9 * 1.3 = 11.7 -> 11).
    for mode in ('linear', 'nearest'):
        sc = (0.7, 1.3)
        outs = [int(math.floor(n * s)) for n, s in zip((7, 9), sc)]
        mats = {2: resize_matrix(7, outs[0], sc[0], mode, 'half_pixel_symmetric'),
                3: resize_matrix(9, outs[1], sc[1], mode, 'half_pixel_symmetric')}
        case('resize19_half_pixel_symmetric_%s' % mode, 'Resize', 19,
             [x, None, np.array([1, 1, sc[0], sc[1]], f32)], [apply_axes(x, mats).astype(f32)],
             {'mode': mode, 'coordinate_transformation_mode': 'half_pixel_symmetric'}, inits=(2,))


# ---- Pad, GridSample, DFT, reductions, Range, Equal, SpaceToDepth, LpNormalization ----------

def gen_misc(case, torch):
    rng = np.random.default_rng(19)
    f32 = np.float32
    x = rng.uniform(-3, 3, (2, 3, 4)).astype(f32)
    for pads in ([0, 2, 1, 0, 3, 2], [1, 0, 5, 0, 2, 0]):
        pw = [(pads[i], pads[i + 3]) for i in range(3)]
        case('pad19_wrap_%s' % '_'.join(map(str, pads)), 'Pad', 19, [x, np.array(pads, np.int64)],
             [np.pad(x, pw, mode='wrap')], {'mode': 'wrap'}, inits=(1,))
    case('pad19_wrap_axes_runtime', 'Pad', 19, [x, np.array([3, 1], np.int64), None, np.array([-1], np.int64)],
         [np.pad(x, [(0, 0), (0, 0), (3, 1)], mode='wrap')], {'mode': 'wrap'})
    xi = rng.integers(-50, 50, (3, 5)).astype(np.int32)
    case('pad19_wrap_int32', 'Pad', 19, [xi, np.array([2, 7, 1, 6], np.int64)],
         [np.pad(xi, [(2, 1), (7, 6)], mode='wrap')], {'mode': 'wrap'}, inits=(1,))

    # GridSample-20 on a 5-D input (trilinear / nearest), against torch.
    xv = rng.uniform(-1, 1, (2, 2, 3, 4, 5)).astype(f32)
    grid = rng.uniform(-1.2, 1.2, (2, 3, 2, 4, 3)).astype(f32)
    for mode, tmode in (('linear', 'bilinear'), ('nearest', 'nearest')):
        for pad in ('zeros', 'border', 'reflection'):
            for ac in (0, 1):
                ref = torch.nn.functional.grid_sample(torch.from_numpy(xv).double(), torch.from_numpy(grid).double(),
                                                      mode=tmode, padding_mode=pad, align_corners=bool(ac))
                case('gridsample20_5d_%s_%s_ac%d' % (mode, pad, ac), 'GridSample', 20, [xv, grid],
                     [ref.numpy().astype(f32)], {'mode': mode, 'padding_mode': pad, 'align_corners': ac})

    # DFT-20: axis as input 2 (default -2), dft_length input 1; IRFFT at opsets 17 and 20.
    sig = rng.uniform(-1, 1, (2, 6, 5, 1)).astype(f32)
    csig = rng.uniform(-1, 1, (2, 6, 5, 2)).astype(f32)
    cval = csig[..., 0].astype(np.float64) + 1j * csig[..., 1]

    def cplx(z):
        return np.stack([z.real, z.imag], -1).astype(f32)

    case('dft20_default_axis', 'DFT', 20, [sig], [cplx(np.fft.fft(sig[..., 0].astype(np.float64), axis=2))])
    case('dft20_axis1_len8', 'DFT', 20, [sig, np.array(8, np.int64), np.array(1, np.int64)],
         [cplx(np.fft.fft(sig[..., 0].astype(np.float64), n=8, axis=1))], inits=(1, 2))
    case('dft20_axis_m3_inverse', 'DFT', 20, [csig, None, np.array(-3, np.int64)],
         [cplx(np.fft.ifft(cval, axis=1))], {'inverse': 1}, inits=(2,))
    case('dft20_rfft_axis_runtime', 'DFT', 20, [sig, None, np.array(1, np.int64)],
         [cplx(np.fft.rfft(sig[..., 0].astype(np.float64), axis=1))], {'onesided': 1})
    for opset, extra in ((17, {'axis': 1}), (20, {})):
        ins = [csig] if opset == 17 else [csig, None, np.array(1, np.int64)]
        case('dft%d_irfft' % opset, 'DFT', opset, ins,
             [np.fft.irfft(cval, axis=1)[..., None].astype(f32)], dict(extra, inverse=1, onesided=1),
             inits=() if opset == 17 else (2,))
        ins = [csig, np.array(7, np.int64)] + ([] if opset == 17 else [np.array(1, np.int64)])
        case('dft%d_irfft_len7' % opset, 'DFT', opset, ins,
             [np.fft.irfft(cval, n=7, axis=1)[..., None].astype(f32)], dict(extra, inverse=1, onesided=1),
             inits=(1,) if opset == 17 else (1, 2))

    # ReduceMax / ReduceMin over bool (opset 20).
    b = rng.uniform(0, 1, (3, 4, 5)) > 0.4
    for op, f in (('ReduceMax', np.any), ('ReduceMin', np.all)):
        case('%s20_bool_axis1' % op.lower(), op, 20, [b, np.array([1], np.int64)], [f(b, axis=1, keepdims=True)],
             inits=(1,))
        case('%s20_bool_all_nokeep' % op.lower(), op, 20, [b], [np.array(f(b))], {'keepdims': 0})

    # Range-27 over f16 (stash_type float by default, double too).
    for stash in (None, 11):
        s, l, d = np.float16(-3.5), np.float16(40.0), np.float16(1.25)
        n = max(int(math.ceil((float(l) - float(s)) / float(d))), 0)
        ref = (float(s) + np.arange(n) * float(d)).astype(np.float16)
        case('range27_f16%s' % ('' if stash is None else '_stash_double'), 'Range', 27,
             [np.array(s), np.array(l), np.array(d)], [ref], {} if stash is None else {'stash_type': stash})

    # Equal-19 over strings, broadcast.
    sa = np.array([['a', 'bc', ''], ['x', 'y', 'bc']], dtype=object)
    sb = np.array(['a', 'bc', ''], dtype=object)
    case('equal19_string_bcast', 'Equal', 19, [sa, sb], [np.array([[a == c for a, c in zip(r, sb)] for r in sa])])

    # SpaceToDepth-28 CRD and DCR.
    xs = rng.uniform(-1, 1, (2, 3, 4, 6)).astype(f32)
    r = xs.reshape(2, 3, 2, 2, 3, 2)
    case('spacetodepth28_crd', 'SpaceToDepth', 28, [xs],
         [r.transpose(0, 1, 3, 5, 2, 4).reshape(2, 12, 2, 3)], {'blocksize': 2, 'mode': 'CRD'})
    case('spacetodepth28_dcr', 'SpaceToDepth', 28, [xs],
         [r.transpose(0, 3, 5, 1, 2, 4).reshape(2, 12, 2, 3)], {'blocksize': 2})

    # LpNormalization: an all-zero row gives zeros (p = 1 and 2).
    xl = rng.uniform(-2, 2, (3, 4)).astype(f32)
    xl[1] = 0
    for p in (1, 2):
        nrm = np.linalg.norm(xl.astype(np.float64), ord=p, axis=1, keepdims=True)
        ref = np.divide(xl, nrm, out=np.zeros((3, 4)), where=nrm != 0).astype(f32)
        case('lpnorm22_zero_row_p%d' % p, 'LpNormalization', 22, [xl], [ref], {'axis': 1, 'p': p})


# ---- string ops (opset 20) -------------------------------------------------------------

def gen_strings(case):
    obj = object
    a = np.array([['ab', '', 'héllo'], ['x', 'yz', ' ']], dtype=obj)
    for name, b in (('same_shape', np.array([['1', '2', '3'], ['', 'é', '!']], dtype=obj)),
                    ('bcast_row', np.array(['-', '', '_end'], dtype=obj)),
                    ('scalar', np.array('+', dtype=obj))):
        ref = np.array([[u + v for u, v in zip(r, np.broadcast_to(b, a.shape)[i])] for i, r in enumerate(a)], dtype=obj)
        case('stringconcat20_' + name, 'StringConcat', 20, [a, b], [ref])

    texts = ['a,b,,c', ',lead', 'trail,', '', 'none', '  two  words here ', '\tx\ny  ', 'a,,b,c,d']

    def split_case(name, arr, delim=None, maxsplit=None):
        parts = [s.split(delim, -1 if maxsplit is None else maxsplit) for s in arr.reshape(-1)]
        width = max([len(p) for p in parts], default=0)
        y = np.array([p + [''] * (width - len(p)) for p in parts], dtype=obj).reshape(arr.shape + (width,))
        z = np.array([len(p) for p in parts], dtype=np.int64).reshape(arr.shape)
        attrs = {}
        if delim is not None:
            attrs['delimiter'] = delim
        if maxsplit is not None:
            attrs['maxsplit'] = maxsplit
        case('stringsplit20_' + name, 'StringSplit', 20, [arr], [y, z], attrs)

    t = np.array(texts, dtype=obj).reshape(2, 4)
    split_case('comma', t, ',')
    split_case('comma_max1', t, ',', 1)
    split_case('multichar', np.array(['a--b---c', '--', 'x-y'], dtype=obj), '--')
    split_case('whitespace', t)
    split_case('whitespace_max1', t, None, 1)
    split_case('whitespace_max0', t, None, 0)
    split_case('utf8', np.array(['é|ü|ß', 'añb'], dtype=obj), '|')

    words = np.array(['www.google.com', 'www.a-b.co.uk', 'abc@gmail.com', 'x_1@yahoo.com', '', '12-345',
                      'a]b', 'a-b', 'a^b', 'aéb', 'ab', 'abcd', 'abbbd', 'acd', 'AbC', 'tab\there', 'x.y'], dtype=obj)
    patterns = [r'www\.[\w.-]+\.com', r'[\w.\-]{0,25}@(yahoo|gmail)\.com', r'\d{2}-\d+', r'a[]^-]b', r'a.b',
                r'a(?:b|c)*?d', r'[^\s]+', r'\w+\s\w+', r'(?P<first>a)b+d', r'[A-Z][a-z]?[A-Z]', r'x\.y|ab', r'',
                r'\S*\.\S*', r'[a-c]{2,3}d?']
    for k, pat in enumerate(patterns):
        rx = re.compile(pat)
        ref = np.array([rx.fullmatch(s) is not None for s in words])
        case('regexfullmatch20_%02d' % k, 'RegexFullMatch', 20, [words], [ref], {'pattern': pat})


# ---- ai.onnx.ml ------------------------------------------------------------------------

ML = 'ai.onnx.ml'


def gen_ml(case):
    from onnx import numpy_helper
    rng = np.random.default_rng(20)
    obj = object

    def t(a, name):
        return numpy_helper.from_array(np.asarray(a), name)

    # LabelEncoder-4: repeated keys (the last wins), NaN keys, defaults, tensors.
    x = np.array([1.5, np.nan, -2.0, 7.0, 1.5], np.float32)
    keys, vals = [1.5, -2.0, float('nan'), 1.5], ['a', 'b', 'nan', 'last']

    def lookup(v, dflt):
        hit = dflt
        for k, w in zip(keys, vals):
            if k == v or (math.isnan(k) and math.isnan(v)):
                hit = w
        return hit
    case('ml_labelencoder4_float_string', 'LabelEncoder', 4, [x],
         [np.array([lookup(float(v), 'none') for v in x], dtype=obj)],
         {'keys_floats': keys, 'values_strings': vals, 'default_string': 'none'}, domain=ML)
    case('ml_labelencoder4_float_string_spec_default', 'LabelEncoder', 4, [x],
         [np.array([lookup(float(v), '_Unused') for v in x], dtype=obj)],
         {'keys_floats': keys, 'values_strings': vals}, domain=ML)
    xi = np.array([[3, 1], [4, 1]], np.int64)
    case('ml_labelencoder4_int_float', 'LabelEncoder', 4, [xi],
         [np.array([[0.5, -1.0], [-0.0, -1.0]], np.float32)],
         {'keys_int64s': [3, 1, 9], 'values_floats': [0.5, -1.0, 2.0]}, domain=ML)
    xs = np.array(['b', 'z', 'a'], dtype=obj)
    case('ml_labelencoder4_tensor_int16', 'LabelEncoder', 4, [xs], [np.array([7, -3, 5], np.int16)],
         {'keys_tensor': t(np.array(['a', 'b'], dtype=obj), 'k'), 'values_tensor': t(np.array([5, 7], np.int16), 'v'),
          'default_tensor': t(np.array([-3], np.int16), 'd')}, domain=ML)
    case('ml_labelencoder2_string_int', 'LabelEncoder', 2, [xs], [np.array([2, -1, 1], np.int64)],
         {'keys_strings': ['a', 'b'], 'values_int64s': [1, 2]}, domain=ML)

    # TreeEnsemble-5: two trees over three features, every mode but MEMBER on one, MEMBER on the other.
    nodes = dict(featureids=[0, 1, 2, 2, 0], modes=[0, 3, 6, 4, 5], splits=[0.0, 0.5, 0.0, 1.0, 0.25],
                 truenodeids=[1, 0, 0, 1, 2], falsenodeids=[2, 3, 1, 4, 3],
                 trueleafs=[0, 1, 1, 1, 1], falseleafs=[1, 0, 0, 1, 1], tracks=[1, 0, 0, 0, 0])
    leaves = dict(targetids=[0, 1, 2, 0, 1, 2, 0], weights=[1.5, -2.0, 0.25, 3.0, 4.5, -1.0, 0.75])
    members = [1.0, 2.0, float('nan')]
    roots = [0, 2]
    # Tree 0: node0 (f0 <= 0, NaN -> true) -> node1 (f1 > 0.5 ? leaf0 : node3); false -> leaf2.
    #         node3 (f2 == 1 ? leaf1 : leaf4).
    # Tree 1: node2 (f2 in {1, 2} ? leaf0 : node1 ...) reuses node1 as its false branch's subtree.

    def walk(root, xr):
        i = root
        for _ in range(10):
            f, mode, sp = nodes['featureids'][i], nodes['modes'][i], nodes['splits'][i]
            v = float(xr[f])
            if math.isnan(v) and nodes['tracks'][i]:
                go = True
            elif mode == 0:
                go = v <= sp
            elif mode == 3:
                go = v > sp
            elif mode == 4:
                go = v == sp
            elif mode == 5:
                go = v != sp
            else:
                go = v in members[:2]
            nxt = nodes['truenodeids'][i] if go else nodes['falsenodeids'][i]
            if (nodes['trueleafs'] if go else nodes['falseleafs'])[i]:
                return nxt
            i = nxt
        raise ValueError('cycle')

    xt = rng.choice([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0], (8, 3)).astype(np.float32)
    xt[1, 0] = np.nan
    xt[2, 2] = np.nan
    attrs = {'nodes_featureids': nodes['featureids'], 'nodes_modes': t(np.array(nodes['modes'], np.uint8), 'm'),
             'nodes_splits': t(np.array(nodes['splits'], np.float32), 's'),
             'nodes_truenodeids': nodes['truenodeids'], 'nodes_falsenodeids': nodes['falsenodeids'],
             'nodes_trueleafs': nodes['trueleafs'], 'nodes_falseleafs': nodes['falseleafs'],
             'nodes_missing_value_tracks_true': nodes['tracks'],
             'leaf_targetids': leaves['targetids'], 'leaf_weights': t(np.array(leaves['weights'], np.float32), 'w'),
             'membership_values': t(np.array(members, np.float32), 'mv'), 'tree_roots': roots, 'n_targets': 3}
    for agg, aname in ((0, 'average'), (1, 'sum'), (2, 'min'), (3, 'max')):
        for post, pname in ((0, 'none'), (1, 'softmax'), (2, 'logistic'), (3, 'softmax_zero')):
            if agg not in (1,) and post != 0:
                continue
            big = np.finfo(np.float32).max
            out = np.full((8, 3), big if agg == 2 else -big if agg == 3 else 0.0)
            for b in range(8):
                for r in roots:
                    leaf = walk(r, xt[b])
                    tid, wgt = leaves['targetids'][leaf], float(np.float32(leaves['weights'][leaf]))
                    if agg == 0:
                        out[b, tid] += wgt / len(roots)
                    elif agg == 1:
                        out[b, tid] += wgt
                    elif agg == 2:
                        out[b, tid] = min(out[b, tid], wgt)
                    else:
                        out[b, tid] = max(out[b, tid], wgt)
            if post == 2:
                out = 1 / (1 + np.exp(-out))
            elif post in (1, 3):
                for b in range(8):
                    keep = np.ones(3, bool) if post == 1 else out[b] != 0
                    e = np.exp(out[b][keep] - out[b][keep].max()) if keep.any() else np.zeros(0)
                    out[b][keep] = e / e.sum() if keep.any() else e
            case('ml_treeensemble5_%s_%s' % (aname, pname), 'TreeEnsemble', 5, [xt], [out.astype(np.float32)],
                 dict(attrs, aggregate_function=agg, post_transform=post), domain=ML)

    # ArrayFeatureExtractor: the last axis, and a 1-D X as one row.
    xa = rng.uniform(-1, 1, (2, 3, 5)).astype(np.float32)
    ia = np.array([[4, 0, 4]], np.int64)
    case('ml_arrayfeatureextractor_3d', 'ArrayFeatureExtractor', 1, [xa, ia], [xa[..., [4, 0, 4]]], domain=ML)
    xs1 = np.array(['p', 'q', 'r'], dtype=obj)
    case('ml_arrayfeatureextractor_1d_string', 'ArrayFeatureExtractor', 1, [xs1, np.array([2, 1], np.int64)],
         [np.array([['r', 'q']], dtype=obj)], domain=ML)

    # Binarizer: strictly greater than the threshold is 1.
    xb = np.array([[-3, 2, 5], [7, 2, 0]], np.int64)
    case('ml_binarizer_int64', 'Binarizer', 1, [xb], [(xb > 2).astype(np.int64)], {'threshold': 2.0}, domain=ML)
    xd = rng.uniform(-1, 1, (4, 4))
    case('ml_binarizer_f64_default', 'Binarizer', 1, [xd], [(xd > 0).astype(np.float64)], domain=ML)
