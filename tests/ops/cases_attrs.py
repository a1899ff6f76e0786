"""Suite `attrs`: attribute and opset variants the official data misses: old
opset forms, strings and bools through movement ops, odd Slice steps,
GatherND batch dims, Unique along an axis, Conv/ConvTranspose/pool
variants, Einsum equations, RNN/GRU/LSTM against torch, Resize modes,
quantization, signal ops, sequences.

Many case lists and reference formulas come from the op helpers'
private generators (build-movement/gen_cases.py, the reduce, nn, misc and
rnn/quant helpers' scripts), rewritten for this writer."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from oplib import BF16, Opt, Rand, Seq, out, softmax_steps

SUITE = 'attrs'


def f32(v):
    return float(np.float32(v))


def i64(*v):
    return np.array(v, dtype=np.int64)


def S(*v):
    return np.array(v, dtype=object)


def gen(w, torch):
    def case(name, op, opset, ins, outs, attrs=None, **kw):
        w.case(SUITE, name, op, ins, outs, attrs or {}, opset, **kw)

    gen_movement(case)
    gen_reduce(case)
    gen_elementwise(case)
    gen_nn(case, torch)
    gen_resize(case, torch)
    gen_rnn(case, torch)
    gen_quant_signal(case)
    gen_misc(case, torch)
    gen_edges(case)
    gen_more(case)
    gen_more_nn(case, torch)


# ---- movement (from the movement helper's gen_cases.py) --------------------------------

def gen_movement(case):
    def mv(name, op, opset, inputs, outputs, inits=(), **attrs):
        case('mv_' + name, op, opset, inputs, outputs, attrs, inits=inits)

    strs = np.array([['a', 'bb', 'ccc', ''], ['d', 'ee', 'f', 'gg'], ['h', 'i', 'jj', 'k']], dtype=object)
    boo = np.array([[True, False, True], [False, False, True]])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    # Slice
    mv('slice_opset1_str', 'Slice', 1, [strs], [strs[0:2, 1:-1]], starts=[0, 1], ends=[2, -1])
    mv('slice_opset1_axes', 'Slice', 9, [x], [x[:, :, 1:3]], starts=[1], ends=[3], axes=[2])
    mv('slice_negsteps_bool', 'Slice', 13, [boo, np.array([-1, 5], np.int32), np.array([-100, -100], np.int32), None,
                                              np.array([-1, -2], np.int32)], [boo[::-1, ::-2]])
    mv('slice_big', 'Slice', 13, [x, i64(-2 ** 63, 10), i64(2 ** 63 - 1, -2 ** 63), i64(0, -1), i64(1, -3)],
       [x[:, :, 10::-3]])
    mv('slice_empty', 'Slice', 13, [x, i64(2), i64(1), i64(1)], [x[:, 2:1]])
    mv('slice_huge_step', 'Slice', 13, [x, i64(0), i64(4), i64(2), i64(2 ** 62)], [x[:, :, 0:4:2 ** 62]])
    mv('slice_huge_negstep', 'Slice', 13, [x, i64(-1), i64(-2 ** 63), i64(1), i64(-2 ** 62)], [x[:, ::-2 ** 62]])
    mv('slice_default_axes_steps', 'Slice', 10, [x, i64(1, -2), i64(2, 1000)], [x[1:2, -2:]])
    # Pad
    mv('pad2_value', 'Pad', 2, [x[0]], [np.pad(x[0], ((1, 0), (2, 1)), constant_values=1.5)], pads=[1, 2, 0, 1], value=1.5)
    mv('pad1_paddings', 'Pad', 1, [x[0]], [np.pad(x[0], ((0, 1), (1, 0)), mode='edge')], paddings=[0, 1, 1, 0], mode='edge')
    mv('pad_reflect_big', 'Pad', 11, [x[0], i64(2, 5, 3, 7)], [np.pad(x[0], ((2, 3), (5, 7)), mode='reflect')],
       mode='reflect')
    mv('pad_reflect_one', 'Pad', 11, [x[0][:, :1].copy(), i64(0, 2, 0, 3)],
       [np.pad(x[0][:, :1], ((0, 0), (2, 3)), mode='reflect')], mode='reflect')
    mv('pad_str', 'Pad', 13, [strs, i64(1, 0, 0, 1), S('x')], [np.pad(strs, ((1, 0), (0, 1)), constant_values='x')])
    mv('pad_str_default', 'Pad', 13, [strs, i64(0, 1, 1, 0)], [np.pad(strs, ((0, 1), (1, 0)), constant_values='')])
    mv('pad_neg', 'Pad', 11, [x[0], i64(-1, 2, 1, -1), np.array(9, np.float32)],
       [np.pad(x[0][1:, :-1], ((0, 1), (2, 0)), constant_values=9)])
    mv('pad_neg_edge', 'Pad', 11, [x[0], i64(-1, -1, 2, 2)], [np.pad(x[0][1:, 1:], ((0, 2), (0, 2)), mode='edge')],
       mode='edge')
    mv('pad_i64', 'Pad', 11, [np.arange(6).reshape(2, 3), i64(1, 1, 1, 1), i64(-7)],
       [np.pad(np.arange(6).reshape(2, 3), 1, constant_values=-7)])
    mv('pad_bool', 'Pad', 13, [boo, i64(0, 1, 0, 1)], [np.pad(boo, ((0, 0), (1, 1)))])
    mv('pad_reflect_3d', 'Pad', 13, [x, i64(1, 0, 2, 1, 2, 3)], [np.pad(x, ((1, 1), (0, 2), (2, 3)), mode='reflect')],
       mode='reflect')
    # Reshape
    mv('reshape5_zero', 'Reshape', 5, [x, i64(0, -1)], [x.reshape(2, 12)])
    mv('reshape_str', 'Reshape', 13, [strs, i64(0, 2, -1)], [strs.reshape(3, 2, 2)])
    mv('reshape_allowzero_empty', 'Reshape', 14, [np.zeros((0, 3), np.float32), i64(3, 0)], [np.zeros((3, 0), np.float32)],
       allowzero=1)
    mv('reshape_scalar', 'Reshape', 13, [np.array([5.0], np.float32), i64()], [np.array(5.0, np.float32)])
    # Split
    mv('split2_attr', 'Split', 2, [x], [x[:, :, :1], x[:, :, 1:]], axis=2, split=[1, 3])
    mv('split1_input', 'Split', 1, [x, i64(1, 2)], [x[:, :1], x[:, 1:]], axis=1)
    mv('split13_equal_str', 'Split', 13, [strs], [strs[:, :2], strs[:, 2:]], axis=-1)
    mv('split13_input', 'Split', 13, [strs, i64(1, 0, 2)], [strs[:1], strs[1:1], strs[1:]])
    mv('split11_default', 'Split', 11, [x], [x[:1], x[1:]])
    mv('split11_attr_neg', 'Split', 11, [x], [x[..., :3], x[..., 3:]], axis=-1, split=[3, 1])
    # Squeeze / Unsqueeze
    y1 = x.reshape(2, 1, 3, 1, 4)
    mv('squeeze1_attr', 'Squeeze', 1, [y1], [x.reshape(2, 3, 1, 4)], axes=[1])
    mv('squeeze11_all', 'Squeeze', 11, [y1], [x])
    mv('squeeze11_neg', 'Squeeze', 11, [y1], [x.reshape(2, 1, 3, 4)], axes=[-2])
    mv('squeeze13_none', 'Squeeze', 13, [y1], [x])
    mv('squeeze13_str', 'Squeeze', 13, [strs.reshape(1, 3, 4, 1), i64(-1, 0)], [strs])
    mv('unsqueeze1', 'Unsqueeze', 1, [x], [x.reshape(1, 2, 3, 4, 1)], axes=[0, 4])
    mv('unsqueeze11_neg', 'Unsqueeze', 11, [x], [x.reshape(2, 3, 4, 1)], axes=[-1])
    mv('unsqueeze13_bool_scalar', 'Unsqueeze', 13, [np.array(True), i64(0, 1)], [np.array(True).reshape(1, 1)])
    mv('unsqueeze13_unsorted', 'Unsqueeze', 13, [x, i64(5, 0, 2)], [x.reshape(1, 2, 1, 3, 4, 1)])
    # Gather family
    mv('gather_str', 'Gather', 13, [strs, i64(-1, 0, 2, 2)], [strs[:, [3, 0, 2, 2]]], axis=1)
    mv('gather_scalar_idx', 'Gather', 13, [x, np.array(-1, np.int32)], [x[:, :, -1]], axis=-1)
    mv('gather_bool', 'Gather', 1, [boo, i64(1, 0, 1)], [boo[[1, 0, 1]]])
    mv('gatherelements_str', 'GatherElements', 13, [strs, i64([2, 0], [1, 1])],
       [np.take_along_axis(strs[:, :2], i64([2, 0], [1, 1]), 0)])
    mv('gatherelements_neg', 'GatherElements', 11, [x, np.array([[[-1, 0]]], np.int32).repeat(2, 0).repeat(3, 1)],
       [np.take_along_axis(x, np.array([[[3, 0]]]).repeat(2, 0).repeat(3, 1), 2)], axis=-1)
    d = np.arange(2 * 3 * 4 * 2).reshape(2, 3, 4, 2).astype(np.float32)
    gi = i64([[1, 2], [0, -1]], [[2, 3], [-3, 0]])
    mv('gathernd_b1', 'GatherND', 13, [d, gi], [np.stack([d[b][tuple((gi[b] % [3, 4]).T)] for b in range(2)])], batch_dims=1)
    mv('gathernd_str', 'GatherND', 11, [strs, i64([1], [0], [-1])], [strs[[1, 0, -1]]])
    gi2 = i64([[1], [2]], [[0], [-1]])
    d2 = np.arange(2 * 2 * 3 * 2).reshape(2, 2, 3, 2).astype(np.int32)
    mv('gathernd_b2', 'GatherND', 13, [d2, gi2],
       [np.stack([np.stack([d2[a, b][gi2[a, b][0]] for b in range(2)]) for a in range(2)])], batch_dims=2)
    gi3 = i64([[[1, 0], [2, 1]], [[0, 1], [-1, -2]]])  # (2, 2, 2): batch dims 2 into d2 (2, 2, 3, 2) -> full index
    gi3 = gi3.reshape(2, 2, 1, 2)
    mv('gathernd_b2_full', 'GatherND', 13, [d2, gi3],
       [np.array([[[d2[a, b][tuple(gi3[a, b, 0] % [3, 2])]] for b in range(2)] for a in range(2)], np.int32)],
       batch_dims=2)
    # Scatter family
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = i64([1, 0, 2, 1], [1, 2, 0, 1])
    upd = np.full((2, 4), 2.0, np.float32)

    def scatter_ref(data, idx, upd, axis, red):
        o = data.copy()
        for c in np.ndindex(idx.shape):
            t = list(c)
            t[axis] = idx[c]
            t = tuple(t)
            if red == 'add':
                o[t] += upd[c]
            elif red == 'mul':
                o[t] *= upd[c]
            else:
                o[t] = upd[c]
        return o
    mv('scatterel_add', 'ScatterElements', 16, [data, idx, upd], [scatter_ref(data, idx, upd, 0, 'add')], reduction='add')
    mv('scatterel_mul', 'ScatterElements', 16, [data, idx, upd], [scatter_ref(data, idx, upd, 0, 'mul')], reduction='mul')
    mv('scatterel_str', 'ScatterElements', 13, [strs, i64([-1, 0]), S(['z', 'y'])],
       [scatter_ref(strs, i64([-1, 0]), S(['z', 'y']), 1, 'none')], axis=1)
    mv('scatter9', 'Scatter', 9, [data, idx[:, :3], upd[:, :3]], [scatter_ref(data, idx[:, :3], upd[:, :3], 0, 'none')])
    mv('scatterel11_neg', 'ScatterElements', 11, [data, i64([-1], [-4]), np.array([[7.0], [8.0]], np.float32)],
       [scatter_ref(data, i64([3], [0]), np.array([[7.0], [8.0]], np.float32), 1, 'none')], axis=1)
    mv('scatterel_i32_add', 'ScatterElements', 16,
       [np.arange(5, dtype=np.int32), i64(1, 1, 4), np.array([2 ** 31 - 1, 3, 7], np.int32)],
       [np.array([0, 1 + 2 ** 31 - 1 + 3 - 2 ** 32, 2, 3, 11], np.int32)], reduction='add')
    sd = np.arange(16, dtype=np.float64).reshape(4, 4)
    mv('scatternd_mul', 'ScatterND', 16, [sd, i64([1], [1], [-1]), np.full((3, 4), 3.0)],
       [np.where(np.arange(4)[:, None] == 1, sd * 9, np.where(np.arange(4)[:, None] == 3, sd * 3, sd))], reduction='mul')
    mv('scatternd_add', 'ScatterND', 16, [sd, i64([0, 1], [0, 1], [3, -1]), np.array([1.5, 2.0, -4.0])],
       [sd + np.array([[0, 3.5, 0, 0], [0] * 4, [0] * 4, [0, 0, 0, -4.0]])], reduction='add')
    sn = strs.copy()
    sn[0, 1] = 'Q'
    sn[2, 3] = 'R'
    mv('scatternd_str', 'ScatterND', 13, [strs, i64([0, 1], [-1, -1]), S('Q', 'R')], [sn])
    mv('scatternd11_scalar_slices', 'ScatterND', 11, [x, np.array([[1, 2]], np.int64), np.array([[9, 8, 7, 6]], np.float32)],
       [np.where((np.arange(2)[:, None, None] == 1) & (np.arange(3)[None, :, None] == 2), np.array([9, 8, 7, 6], np.float32), x)])

    # OneHot
    oi = np.array([[0, 3, -1], [7, -4, 2]], np.float32)

    def onehot_ref(ind, depth, vals, axis):
        ind = np.asarray(ind).astype(np.int64)
        r = ind.ndim + 1
        axis = axis + r if axis < 0 else axis
        o = np.full(ind.shape + (depth,), vals[0], dtype=vals.dtype)
        for c in np.ndindex(ind.shape):
            v = ind[c]
            if -depth <= v < depth:
                o[c + (v % depth,)] = vals[1]
        return np.moveaxis(o, -1, axis)
    mv('onehot_float_idx', 'OneHot', 11, [oi, np.array(4.0, np.float32), np.array([1, 5], np.int32)],
       [onehot_ref(oi, 4, np.array([1, 5], np.int32), 1)], axis=1)
    mv('onehot_str', 'OneHot', 11, [i64(0, 2, -2), i64(3), S('off', 'on')], [onehot_ref(i64(0, 2, -2), 3, S('off', 'on'), 0)],
       axis=0)
    mv('onehot9', 'OneHot', 9, [i64([1, 9], [0, 2]), np.array([3], np.int32), np.array([0.0, 1.0])],
       [onehot_ref(i64([1, 9], [0, 2]), 3, np.array([0.0, 1.0]), -1)])
    mv('onehot_neg_axis', 'OneHot', 11, [i64([1, 4], [0, 2]), np.array(5.7, np.float32), np.array([0, 1], np.int64)],
       [onehot_ref(i64([1, 4], [0, 2]), 5, np.array([0, 1], np.int64), -2)], axis=-2)
    # Compress
    mv('compress_axis1_short', 'Compress', 11, [x, np.array([True, False])], [np.compress([True, False], x, axis=1)], axis=1)
    mv('compress_str_flat', 'Compress', 11, [strs, np.array([0, 1, 1, 0, 0, 1], bool)], [np.compress([0, 1, 1, 0, 0, 1], strs)])
    mv('compress9_neg_axis', 'Compress', 9, [x, np.array([False, True, True, True])],
       [np.compress([False, True, True, True], x, axis=2)], axis=2)
    # NonZero
    mv('nonzero_str', 'NonZero', 13, [strs], [np.array(np.nonzero(strs != ''), np.int64)])
    nzf = np.array([[0, 1.5, np.nan], [0, 0, -2]], np.float32)
    mv('nonzero_float', 'NonZero', 9, [nzf], [np.array(np.nonzero(nzf), np.int64)])
    mv('nonzero_empty', 'NonZero', 13, [np.zeros((2, 0, 3), np.int32)], [np.zeros((3, 0), np.int64)])

    # Unique
    def unique_ref(a, axis, sorted_):
        y, ind, inv, cnt = np.unique(a, return_index=True, return_inverse=True, return_counts=True, axis=axis)
        if not sorted_:
            order = np.argsort(ind, kind='stable')
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            y = np.take(y, order, axis=0 if axis is None else axis)
            ind = ind[order]
            cnt = cnt[order]
            inv = rank[inv]
        return [y, ind.astype(np.int64), inv.reshape(-1).astype(np.int64), cnt.astype(np.int64)]
    ua = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [1, 0, 0], [0, 5, 1]], np.int32)
    mv('unique_unsorted_axis', 'Unique', 11, [ua], unique_ref(ua, 0, False), axis=0, sorted=0)
    mv('unique_sorted_axis1', 'Unique', 11, [ua.T.copy()], unique_ref(ua.T, 1, True), axis=-1)
    ub = np.array([[[1, 2], [1, 2]], [[0, 0], [1, 2]], [[1, 2], [1, 2]]], np.float32)  # (3, 2, 2)
    mv('unique_unsorted_axis0_3d', 'Unique', 11, [ub], unique_ref(ub, 0, False), axis=0, sorted=0)
    mv('unique_unsorted_axis2_3d', 'Unique', 11, [ub], unique_ref(ub, 2, False), axis=2, sorted=0)
    us = np.array(['b', 'a', 'b', 'c', 'a', ''], dtype=object)
    mv('unique_str_unsorted', 'Unique', 11, [us], [np.array(['b', 'a', 'c', ''], dtype=object)] +
       unique_ref(us.astype(str), None, False)[1:], sorted=0)
    uf = np.array([[2.5, -1, 2.5], [0, -1, 7]], np.float64)
    mv('unique_f64_sorted', 'Unique', 11, [uf], unique_ref(uf, None, True))
    mv('unique_y_only', 'Unique', 11, [uf], unique_ref(uf, None, False)[:1], sorted=0)
    # Tile
    mv('tile1', 'Tile', 1, [x[0], np.array(3, np.int64), np.array(1, np.int64)], [np.tile(x[0], (1, 3))])
    mv('tile_str', 'Tile', 13, [strs, i64(2, 0)], [np.tile(strs, (2, 0))])
    mv('tile_bool', 'Tile', 6, [boo, i64(1, 2)], [np.tile(boo, (1, 2))])
    # Transpose
    mv('transpose_str', 'Transpose', 13, [strs], [strs.T])
    mv('transpose_perm', 'Transpose', 1, [d], [d.transpose(2, 0, 3, 1)], perm=[2, 0, 3, 1])
    # Expand
    mv('expand_str', 'Expand', 13, [strs[:1], i64(2, 1, 1, 4)], [np.broadcast_to(strs[:1], (2, 1, 1, 4))])
    mv('expand_smaller_shape', 'Expand', 8, [x[:, :1], i64(3, 1)], [np.broadcast_to(x[:, :1], (2, 3, 4))])
    mv('expand_bool0', 'Expand', 13, [boo[:, :1], i64(2, 0)], [np.zeros((2, 0), bool)])
    # DepthToSpace / SpaceToDepth
    dd = np.arange(1 * 8 * 2 * 3).reshape(1, 8, 2, 3).astype(np.int8)

    def d2s(a, b, mode):
        n, c, h, w = a.shape
        if mode == 'DCR':
            t = a.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = a.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return t.reshape(n, c // (b * b), h * b, w * b)

    def s2d(a, b):
        n, c, h, w = a.shape
        return a.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)
    mv('d2s_crd_i8', 'DepthToSpace', 13, [dd], [d2s(dd, 2, 'CRD')], blocksize=2, mode='CRD')
    mv('d2s_opset1', 'DepthToSpace', 1, [dd], [d2s(dd, 2, 'DCR')], blocksize=2)
    mv('d2s_b3', 'DepthToSpace', 11, [np.arange(18, dtype=np.float32).reshape(1, 9, 1, 2)],
       [d2s(np.arange(18, dtype=np.float32).reshape(1, 9, 1, 2), 3, 'DCR')], blocksize=3)
    ss = np.array(['s%d' % i for i in range(2 * 2 * 4 * 6)], dtype=object).reshape(2, 2, 4, 6)
    mv('s2d_str', 'SpaceToDepth', 13, [ss], [s2d(ss, 2)], blocksize=2)
    # Trilu
    tb = np.ones((2, 3, 5), bool)
    mv('trilu_bool_lower_k', 'Trilu', 14, [tb, i64(-1)], [np.tril(tb, -1)], upper=0)
    mv('trilu_str', 'Trilu', 14, [strs], [np.where(np.triu(np.ones(strs.shape, bool), 0), strs, '').astype(object)])
    mv('trilu_str_k', 'Trilu', 14, [strs, i64(1)], [np.where(np.triu(np.ones(strs.shape, bool), 1), strs, '').astype(object)])
    mv('trilu_bigk', 'Trilu', 14, [x, i64(-2 ** 63)], [x])
    mv('trilu_lower_bigk', 'Trilu', 14, [x, i64(2 ** 62)], [x], upper=0)

    # ReverseSequence
    rs = np.array([['a%d' % i + str(j) for j in range(5)] for i in range(3)], dtype=object)

    def revseq(a, lens, t, b):
        o = a.copy()
        for bi, n in enumerate(lens):
            sl = [slice(None)] * a.ndim
            sl[b] = bi
            sl[t] = slice(0, n)
            src = a[tuple(sl)]
            o[tuple(sl)] = src[::-1]
        return o
    mv('revseq_str', 'ReverseSequence', 10, [rs, i64(5, 0, 2)], [revseq(rs, [5, 0, 2], 1, 0)], batch_axis=0, time_axis=1)
    # Shape / Size
    mv('shape15_neg', 'Shape', 15, [x], [i64(3, 4)], start=-2)
    mv('shape15_empty', 'Shape', 15, [x], [i64()], start=2, end=1)
    mv('shape15_clamp', 'Shape', 15, [x], [i64(2, 3, 4)], start=-10, end=10)
    mv('shape1_str', 'Shape', 1, [strs], [i64(3, 4)])
    mv('size_str', 'Size', 13, [strs], [np.array(12, np.int64)])
    # Constant / ConstantOfShape / EyeLike
    mv('constant_strings', 'Constant', 13, [], [S('a', 'bc', '')], value_strings=['a', 'bc', ''])
    mv('constant_string', 'Constant', 12, [], [np.array('hello', dtype=object)], value_string='hello')
    mv('constant_ints', 'Constant', 13, [], [i64(1, -2, 3)], value_ints=[1, -2, 3])
    mv('constant_int', 'Constant', 13, [], [np.array(-5, np.int64)], value_int=-5)
    mv('constant_float', 'Constant', 13, [], [np.array(2.5, np.float32)], value_float=2.5)
    mv('constant_floats', 'Constant', 13, [], [np.array([2.5, -1], np.float32)], value_floats=[2.5, -1])
    mv('constant_tensor_str', 'Constant', 9, [], [strs], value=numpy_helper.from_array(strs))
    mv('cos_i32', 'ConstantOfShape', 9, [i64(2, 3)], [np.full((2, 3), 7, np.int32)],
       value=numpy_helper.from_array(np.array([7], np.int32)))
    mv('cos_scalar', 'ConstantOfShape', 9, [i64()], [np.array(0, np.float32)])
    mv('cos_bool', 'ConstantOfShape', 9, [i64(0, 2)], [np.zeros((0, 2), bool)], value=numpy_helper.from_array(np.array([True])))
    mv('eyelike_bool_k', 'EyeLike', 9, [np.zeros((3, 5), np.int32)], [np.eye(3, 5, -1, dtype=bool)], dtype=TensorProto.BOOL, k=-1)
    mv('eyelike_bigk', 'EyeLike', 9, [np.zeros((3, 5), np.float64)], [np.zeros((3, 5))], k=2 ** 62)
    mv('eyelike_f16', 'EyeLike', 9, [np.zeros((4, 2), np.float16)], [np.eye(4, 2, 1, dtype=np.float16)], k=1)
    # Range
    mv('range_i16', 'Range', 11, [np.array(10, np.int16), np.array(-3, np.int16), np.array(-4, np.int16)],
       [np.arange(10, -3, -4, dtype=np.int16)])
    mv('range_f64_empty', 'Range', 11, [np.array(1.0), np.array(0.0), np.array(0.5)], [np.zeros(0)])
    mv('range_f32_frac', 'Range', 11, [np.array(0.5, np.float32), np.array(2.0, np.float32), np.array(0.3, np.float32)],
       [np.array([0.5, 0.8, 1.1, 1.4, 1.7], np.float32)])
    mv('range_i64_big', 'Range', 11, [np.array(-2 ** 62, np.int64), np.array(2 ** 62, np.int64), np.array(2 ** 61, np.int64)],
       [np.arange(-2 ** 62, 2 ** 62, 2 ** 61, dtype=np.int64)])
    # Concat / Flatten
    mv('concat_str', 'Concat', 13, [strs, strs[:, :1]], [np.concatenate([strs, strs[:, :1]], 1)], axis=-1)
    mv('concat_bool_empty', 'Concat', 4, [boo, np.zeros((0, 3), bool), boo], [np.concatenate([boo, boo])], axis=0)
    mv('concat1_default', 'Concat', 1, [x, x], [np.concatenate([x, x], 1)])
    mv('flatten1_axis0_str', 'Flatten', 1, [strs], [strs.reshape(1, 12)], axis=0)
    mv('flatten_scalar_axis0', 'Flatten', 13, [np.array(3.0, np.float32)], [np.array([[3.0]], np.float32)], axis=0)
    mv('flatten11_neg', 'Flatten', 11, [x], [x.reshape(6, 4)], axis=-1)
    mv('flatten9_default', 'Flatten', 9, [x], [x.reshape(2, 12)])
    # Constant inputs as initializers: inference must use them.
    mv('c_reshape', 'Reshape', 13, [x, i64(0, -1)], [x.reshape(2, 12)], inits=(1,))
    mv('c_slice', 'Slice', 13, [x, i64(-1, 0), i64(-100, 3), i64(2, 0), i64(-2, 1)], [x[:2, :, ::-2]], inits=(1, 2, 3, 4))
    mv('c_range', 'Range', 11, [np.array(1, np.int32), np.array(10, np.int32), np.array(4, np.int32)],
       [np.arange(1, 10, 4, dtype=np.int32)], inits=(0, 1, 2))
    mv('c_cos', 'ConstantOfShape', 9, [i64(2, 3)], [np.zeros((2, 3), np.float32)], inits=(0,))
    mv('c_expand', 'Expand', 13, [x[:, :1], i64(3, 1)], [np.broadcast_to(x[:, :1], (2, 3, 4))], inits=(1,))
    mv('c_tile', 'Tile', 13, [x, i64(1, 2, 1)], [np.tile(x, (1, 2, 1))], inits=(1,))
    mv('c_pad', 'Pad', 13, [x, i64(0, 1, 2, 1, 0, 0)], [np.pad(x, ((0, 1), (1, 0), (2, 0)))], inits=(1,))
    mv('c_unsqueeze', 'Unsqueeze', 13, [x, i64(-1, 1)], [x.reshape(2, 1, 3, 4, 1)], inits=(1,))
    mv('c_squeeze', 'Squeeze', 13, [y1, i64(3)], [x.reshape(2, 1, 3, 4)], inits=(1,))
    mv('c_split', 'Split', 13, [x, i64(3, 1)], [x[..., :3], x[..., 3:]], inits=(1,), axis=2)
    mv('c_onehot', 'OneHot', 11, [i64(0, 2), i64(3), np.array([0, 1], np.float32)], [np.eye(3, dtype=np.float32)[[0, 2]]],
       inits=(1,))
    mv('c_tile1', 'Tile', 1, [x[0], np.array(3, np.int64), np.array(1, np.int64)], [np.tile(x[0], (1, 3))], inits=(1, 2))
    mv('c_topk', 'TopK', 11, [x, i64(2)], [x[..., ::-1][..., :2], np.broadcast_to(i64(3, 2), (2, 3, 2))], inits=(1,))


# ---- reductions, arg, softmax family, cumsum, topk, sequences (from the reduce helper) -----

def gen_reduce(case):
    rng = np.random.default_rng(7)

    def npreduce(kind, x, axes, keep):
        ax = tuple(axes) if axes is not None else None
        v = x.astype(np.float64)
        if kind == 'ReduceSum':
            r = np.sum(v, axis=ax, keepdims=keep)
        if kind == 'ReduceProd':
            r = np.prod(v, axis=ax, keepdims=keep)
        if kind == 'ReduceMax':
            r = np.max(v, axis=ax, keepdims=keep) if x.size else np.full(np.sum(v, axis=ax, keepdims=keep).shape, -np.inf)
        if kind == 'ReduceMin':
            r = np.min(v, axis=ax, keepdims=keep) if x.size else np.full(np.sum(v, axis=ax, keepdims=keep).shape, np.inf)
        if kind == 'ReduceMean':
            r = np.mean(v, axis=ax, keepdims=keep)
        if kind == 'ReduceL1':
            r = np.sum(np.abs(v), axis=ax, keepdims=keep)
        if kind == 'ReduceL2':
            r = np.sqrt(np.sum(np.square(v), axis=ax, keepdims=keep))
        if kind == 'ReduceSumSquare':
            r = np.sum(np.square(v), axis=ax, keepdims=keep)
        if kind == 'ReduceLogSum':
            r = np.log(np.sum(v, axis=ax, keepdims=keep))
        if kind == 'ReduceLogSumExp':
            r = np.log(np.sum(np.exp(v), axis=ax, keepdims=keep))
        return out(x.dtype.name, r)
    kinds = ['ReduceSum', 'ReduceProd', 'ReduceMax', 'ReduceMin', 'ReduceMean', 'ReduceL1', 'ReduceL2',
             'ReduceSumSquare', 'ReduceLogSum', 'ReduceLogSumExp']
    for kind in kinds:
        for dt in [np.float32, np.int32]:
            if kind == 'ReduceLogSum':
                x = rng.uniform(0.5, 3, (3, 4, 5)) if dt == np.float32 else rng.integers(1, 5, (3, 4, 5))
            elif dt == np.float32:
                x = rng.uniform(-2, 2, (3, 4, 5)) if kind != 'ReduceProd' else rng.uniform(0.5, 1.5, (3, 4, 5))
            elif kind == 'ReduceProd':
                x = rng.integers(-2, 3, (3, 4, 5))
            elif kind == 'ReduceLogSumExp':
                x = rng.integers(0, 3, (3, 4, 5))
            else:
                x = rng.integers(-7, 7, (3, 4, 5))
            x = x.astype(dt)
            for axes, keep in [([1], 1), ([0, 2], 0), (None, 0)] if dt == np.float32 else [([0, 2], 0)]:
                tag = '%s_%s_%s_%d' % (kind, np.dtype(dt).name, 'all' if axes is None else '_'.join(map(str, axes)), keep)
                attrs = {'keepdims': keep}
                if axes is not None:
                    attrs['axes'] = axes
                if keep == 1 and axes == [1]:
                    del attrs['keepdims']  # the default
                case('r11_' + tag, kind, 11, [x], [npreduce(kind, x, axes, bool(keep))], attrs)
                if kind == 'ReduceSum' and axes is not None and dt == np.float32:
                    case('r13_' + tag, kind, 13, [x, np.array(axes, np.int64)], [npreduce(kind, x, axes, bool(keep))],
                         {'keepdims': keep})
            if kind == 'ReduceSum':
                case('r13_%s_%s_absent_axes' % (kind, np.dtype(dt).name), kind, 13, [x], [npreduce(kind, x, None, True)])
        # Reduction over an empty set: the identity of the reduction (Mean left out: no identity).
        if kind != 'ReduceMean':
            x = np.zeros((2, 0, 3), np.float32)
            case('r_empty_%s' % kind, kind, 13 if kind != 'ReduceSum' else 11, [x], [npreduce(kind, x, [1], True)],
                 {'axes': [1], 'keepdims': 1})
    x = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    case('r_sum_noop', 'ReduceSum', 13, [x, np.array([], np.int64)], [x], {'noop_with_empty_axes': 1})
    case('r_sum_noop_absent', 'ReduceSum', 13, [x], [x], {'noop_with_empty_axes': 1})
    case('r_sum_empty_axes', 'ReduceSum', 13, [x, np.array([], np.int64)], [np.array(x.astype(np.float64).sum(), np.float32)],
         {'keepdims': 0})
    xb = (rng.integers(-8, 8, (2, 3)) / 4).astype(np.float32)
    case('r_sum_bf16', 'ReduceSum', 13, [BF16(xb), np.array([1], np.int64)], [BF16(xb.sum(1))], {'keepdims': 0})
    case('r_max_bf16', 'ReduceMax', 13, [BF16(xb)], [BF16(xb.max(0))], {'keepdims': 0, 'axes': [0]})
    xn = np.array([[1, np.nan, 3], [4, 5, 6]], np.float32)
    case('r_max_nan', 'ReduceMax', 13, [xn], [np.array([np.nan, 6], np.float32)], {'keepdims': 0, 'axes': [1]})
    case('r_min_nan', 'ReduceMin', 13, [xn], [np.array([np.nan, 4], np.float32)], {'keepdims': 0, 'axes': [1]})
    xl = np.array([[1000, 1000], [-1000, -1001]], np.float64)
    case('r_lse_large', 'ReduceLogSumExp', 13, [xl], [np.array([1000 + np.log(2), -1000 + np.log(1 + np.exp(-1))])],
         {'keepdims': 0, 'axes': [1]})
    case('r_l2_scalar', 'ReduceL2', 13, [np.array(-3.0, np.float32)], [np.array(3.0, np.float32)], {'keepdims': 1})
    case('r_sum1_f16', 'ReduceSum', 1, [np.arange(6, dtype=np.float16).reshape(2, 3)], [np.array([[3], [12]], np.float16)],
         {'axes': [1]})
    # Arg
    xu = np.array([1, 2 ** 63 + 5, 2 ** 63 + 4, 7], np.uint64)
    case('arg_argmax_u64big', 'ArgMax', 13, [xu], [np.array([1], np.int64)])
    case('arg_argmin_u64big', 'ArgMin', 13, [xu], [np.array(0, np.int64)], {'keepdims': 0})
    xi = np.array([[3, 1, 3], [2, 2, 0]], np.int64) + 2 ** 60
    case('arg_argmax1_default', 'ArgMax', 1, [xi], [np.array([[0, 1, 0]], np.int64)])
    case('arg_argmin11_neg_axis', 'ArgMin', 11, [xi], [np.array([1, 2], np.int64)], {'axis': -1, 'keepdims': 0})
    case('arg_argmax12_last', 'ArgMax', 12, [xi], [np.array([[2], [1]], np.int64)], {'axis': 1, 'select_last_index': 1})

    # Softmax family: opset 1 and 11 coerce to 2D at axis; 13 works along one axis.
    def softmax2d(x, axis, fn):
        s = x.shape
        n = int(np.prod(s[:axis]))
        return fn(x.reshape(n, -1).astype(np.float64), 1).reshape(s)

    def sm(x2, ax):
        e = np.exp(x2 - x2.max(ax, keepdims=True))
        return e / e.sum(ax, keepdims=True)

    def lsm(x2, ax):
        m = x2.max(ax, keepdims=True)
        return x2 - m - np.log(np.exp(x2 - m).sum(ax, keepdims=True))

    def hm(x2, ax):
        r = np.zeros_like(x2)
        np.put_along_axis(r, np.expand_dims(np.argmax(x2, ax), ax), 1, ax)
        return r
    x = rng.uniform(-3, 3, (2, 3, 4)).astype(np.float32)
    x[0, 1, 2] = x[0, 1, 3]  # a tie
    for op, fn64 in [('Softmax', sm), ('LogSoftmax', lsm), ('Hardmax', hm)]:
        for dt in [np.float32, np.float64, np.float16]:
            xd = x.astype(dt)
            fn = fn64
            if dt == np.float16 and op != 'Hardmax':  # ONNX's reference rounds every step to float16
                fn = lambda x2, ax, log=(op == 'LogSoftmax'): softmax_steps('float16', x2, ax, log)
            for axis in ([0, 1, 2, -1] if dt == np.float32 else [1, -2]):
                for opset in [1, 11, 13] if dt == np.float32 else [11, 13]:
                    if opset == 13 and axis == 3:
                        continue
                    if opset == 1 and axis < 0:
                        continue
                    if opset < 13:
                        r = softmax2d(xd, axis if axis >= 0 else axis + 3, fn)
                    else:
                        r = fn(xd.astype(np.float64), axis)
                    case('sm_%s_%s_%d_%d' % (op, np.dtype(dt).name, axis, opset), op, opset, [xd], [r.astype(dt)], {'axis': axis})
            if dt == np.float32:
                case('sm_%s_def_11' % op, op, 11, [xd], [softmax2d(xd, 1, fn).astype(dt)])
                case('sm_%s_def_1' % op, op, 1, [xd], [softmax2d(xd, 1, fn).astype(dt)])
    # CumSum
    for dt in [np.float32, np.int32]:
        x = rng.integers(0, 9, (3, 4)).astype(dt)
        for axis in [0, -1]:
            for ex in [0, 1]:
                for rev in [0, 1]:
                    xa = np.flip(x, axis) if rev else x
                    c = np.cumsum(xa, axis=axis)
                    if ex:
                        c = c - xa
                    if rev:
                        c = np.flip(c, axis)
                    case('cumsum_%s_%d_%d_%d' % (np.dtype(dt).name, axis, ex, rev), 'CumSum', 14,
                         [x, np.array(axis, np.int32 if axis == 0 else np.int64)], [c.astype(dt)],
                         {'exclusive': ex, 'reverse': rev})
    x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    case('cumsum11_scalar1d_axis', 'CumSum', 11, [x, np.array([1], np.int64)], [np.cumsum(x.astype(np.float64), 1).astype(np.float32)])
    # TopK: ties go to the lower index; k = 0 and k = the whole axis.
    for dt in [np.float32, np.int64]:
        x = rng.integers(0, 5, (3, 6)).astype(dt)
        for axis in [0, -1]:
            for largest in [0, 1]:
                for k in [0, 2, x.shape[axis]]:
                    key = -x.astype(np.float64) if largest else x.astype(np.float64)
                    idx = np.argsort(key, axis=axis, kind='stable')
                    idx = np.take(idx, np.arange(k), axis=axis)
                    v = np.take_along_axis(x, idx, axis=axis)
                    tag = '%s_%d_%d_%d' % (np.dtype(dt).name, axis, largest, k)
                    case('topk_' + tag, 'TopK', 11, [x, np.array([k], np.int64)], [v, idx.astype(np.int64)],
                         {'axis': axis, 'largest': largest})
                    if largest and dt == np.float32:
                        if k:  # TopK-1 needs k >= 1
                            case('topk1_' + tag, 'TopK', 1, [x], [v, idx.astype(np.int64)], {'axis': axis, 'k': k})
                        case('topk10_' + tag, 'TopK', 10, [x, np.array([k], np.int64)], [v, idx.astype(np.int64)],
                             {'axis': axis})
    x = np.array([[3.0, np.nan, 1.0, 5.0]], np.float32)  # NaN counts as the largest (numpy's sort order)
    case('topk_nan', 'TopK', 11, [x, i64(2)], [np.array([[np.nan, 5.0]], np.float32), i64([1, 3])])
    # Sequences
    a = rng.uniform(size=(2, 3)).astype(np.float32)
    b = rng.uniform(size=(2, 3)).astype(np.float32)
    c = rng.uniform(size=(2, 1)).astype(np.float32)
    case('seq_construct', 'SequenceConstruct', 11, [a, b, c], [[a, b, c]])
    case('seq_insert_mid', 'SequenceInsert', 11, [[a, b], c, np.array(1, np.int64)], [[a, c, b]])
    case('seq_insert_neg', 'SequenceInsert', 11, [[a, b], c, np.array(-2, np.int32)], [[c, a, b]])
    case('seq_insert_end', 'SequenceInsert', 11, [[a, b], c], [[a, b, c]])
    case('seq_at', 'SequenceAt', 11, [[a, b, c], np.array(-1, np.int64)], [c])
    case('seq_erase', 'SequenceErase', 11, [[a, b, c], np.array(0, np.int64)], [[b, c]])
    case('seq_erase_last', 'SequenceErase', 11, [[a, b, c]], [[a, b]])
    case('seq_len', 'SequenceLength', 11, [[a, b, c]], [np.array(3, np.int64)])
    x = rng.uniform(size=(3, 5, 2)).astype(np.float32)
    case('seq_split_default', 'SplitToSequence', 11, [x], [[x[:, i:i + 1] for i in range(5)]], {'axis': 1})
    case('seq_split_nokeep', 'SplitToSequence', 11, [x], [[x[:, i] for i in range(5)]], {'axis': -2, 'keepdims': 0})
    case('seq_split_scalar', 'SplitToSequence', 11, [x, np.array(2, np.int64)], [[x[:, 0:2], x[:, 2:4], x[:, 4:5]]],
         {'axis': 1})
    case('seq_split_list', 'SplitToSequence', 11, [x, np.array([1, 0, 2], np.int32)], [[x[0:1], x[1:1], x[1:3]]],
         {'axis': 0, 'keepdims': 0})
    case('seq_concat', 'ConcatFromSequence', 11, [[a, b, c]], [np.concatenate([a, b, c], 1)], {'axis': 1})
    case('seq_concat_new', 'ConcatFromSequence', 11, [[a, b]], [np.stack([a, b], -1)], {'axis': -1, 'new_axis': 1})
    case('seq_concat_new0', 'ConcatFromSequence', 11, [[a, b]], [np.stack([a, b], 0)], {'axis': 0, 'new_axis': 1})
    case('seq_concat_new1', 'ConcatFromSequence', 11, [[a, b]], [np.stack([a, b], 1)], {'axis': 1, 'new_axis': 1})
    s = np.array(['x', 'yy'], dtype=object)
    case('seq_str_construct_at', 'SequenceAt', 11, [[s, s[::-1].copy()], np.array(1, np.int32)], [s[::-1].copy()])
    case('seq_identity', 'Identity', 16, [[a, c]], [[a, c]])


# ---- elementwise: old opsets, defaults, edge values -------------------------------------

def gen_elementwise(case):
    rng = np.random.default_rng(11)
    a = rng.uniform(-3, 3, (3, 5, 7)).astype(np.float32)
    b5 = rng.uniform(-3, 3, (5,)).astype(np.float32)
    b57 = rng.uniform(0.5, 3, (5, 7)).astype(np.float32)
    av = a.astype(np.float64)
    # Add-1/6 style broadcasting: broadcast=1 with axis.
    case('ew_add6_bcast_axis1', 'Add', 6, [a, b5], [(av + b5.reshape(1, 5, 1)).astype(np.float32)], {'broadcast': 1, 'axis': 1})
    case('ew_mul6_bcast_suffix', 'Mul', 6, [a, b57], [(av * b57).astype(np.float32)], {'broadcast': 1})
    case('ew_sub1_bcast_axis0', 'Sub', 1, [a, a[:, 0, 0].copy()], [(av - av[:, 0:1, 0:1]).astype(np.float32)],
         {'broadcast': 1, 'axis': 0})
    case('ew_div6_same', 'Div', 6, [a, b57.reshape(1, 5, 7).repeat(3, 0)], [(av / b57).astype(np.float32)])
    case('ew_pow7_bcast', 'Pow', 7, [np.abs(a) + 0.5, b5[:, None].repeat(7, 1).astype(np.float32)[None]],
         [np.power(np.abs(av) + 0.5, b5[:, None].astype(np.float64)).astype(np.float32)])
    case('ew_sum6_same', 'Sum', 6, [a, a, a], [(av * 3).astype(np.float32)])
    case('ew_max6_one', 'Max', 6, [a], [a])
    case('ew_mean8_bcast', 'Mean', 8, [a, b57], [((av + b57) / 2).astype(np.float32)])
    case('ew_min8_bcast_i', 'Min', 12, [np.arange(12, dtype=np.int32).reshape(3, 4), np.array([5], np.int32)],
         [np.minimum(np.arange(12).reshape(3, 4), 5).astype(np.int32)])
    # Clip-6 attributes (defaults are the float range), Clip-11/13 with one bound.
    case('ew_clip6', 'Clip', 6, [a], [np.clip(a, -1.5, 0.5)], {'min': -1.5, 'max': 0.5})
    case('ew_clip6_min_only', 'Clip', 6, [a], [np.maximum(a, -1.0)], {'min': -1.0})
    case('ew_clip1', 'Clip', 1, [a], [np.clip(a, -0.5, 2.0)], {'min': -0.5, 'max': 2.0})
    case('ew_clip11_min_only', 'Clip', 11, [a, np.array(0.25, np.float32)], [np.maximum(a, np.float32(0.25))])
    case('ew_clip13_none', 'Clip', 13, [a], [a])
    case('ew_clip13_min_gt_max', 'Clip', 13, [a, np.array(1.0, np.float32), np.array(-1.0, np.float32)],
         [np.full_like(a, -1.0)])
    # Defaults of activation attributes.
    case('ew_selu_default', 'Selu', 6, [a], [(np.where(av <= 0, f32(1.67326319217681884765625) * (np.exp(av) - 1), av) *
                                               f32(1.05070102214813232421875)).astype(np.float32)])
    case('ew_elu_default', 'Elu', 6, [a], [np.where(av < 0, np.exp(av) - 1, av).astype(np.float32)])
    case('ew_leakyrelu_default', 'LeakyRelu', 6, [a], [np.where(av < 0, f32(0.01) * av, av).astype(np.float32)])
    case('ew_hardsigmoid_default', 'HardSigmoid', 6, [a], [np.clip(f32(0.2) * av + 0.5, 0, 1).astype(np.float32)])
    case('ew_thresholdedrelu_default', 'ThresholdedRelu', 10, [a], [np.where(av > 1, av, 0).astype(np.float32)])
    case('ew_celu_default', 'Celu', 12, [a], [(np.maximum(0, av) + np.minimum(0, np.exp(av) - 1)).astype(np.float32)])
    case('ew_shrink_default', 'Shrink', 9, [a], [np.where(av < -0.5, av, np.where(av > 0.5, av, 0)).astype(np.float32)])
    case('ew_prelu7_bcast', 'PRelu', 7, [a, b57], [np.where(av < 0, av * b57, av).astype(np.float32)])
    case('ew_prelu9_scalar_slope', 'PRelu', 9, [a, np.array([0.3], np.float32)], [np.where(av < 0, av * f32(0.3), av).astype(np.float32)])
    case('ew_relu6', 'Relu', 6, [a], [np.maximum(a, 0)])
    case('ew_sigmoid6', 'Sigmoid', 6, [a], [(1 / (1 + np.exp(-av))).astype(np.float32)])
    case('ew_softplus_large', 'Softplus', 1, [np.array([-100, -20, 0, 20, 100, 1000], np.float32)],
         [np.logaddexp(0, np.array([-100, -20, 0, 20, 100, 1000], np.float64)).astype(np.float32)])
    case('ew_sigmoid_extreme', 'Sigmoid', 13, [np.array([-1000, -50, 50, 1000], np.float32)],
         [(1 / (1 + np.exp(-np.array([-1000, -50, 50, 1000], np.float64)))).astype(np.float32)])
    hs = np.array([-3, -2.9, 0, 2.9, 3, 3.1], np.float32)
    hv = hs.astype(np.float64)
    case('ew_hardswish_edges', 'HardSwish', 14, [hs], [(hv * np.clip(hv / 6 + 0.5, 0, 1)).astype(np.float32)])
    # Special float values.
    sp = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e30], np.float32)
    with np.errstate(all='ignore'):
        spv = sp.astype(np.float64)
        case('ew_special_exp', 'Exp', 13, [sp], [np.exp(spv).astype(np.float32)])
        case('ew_special_tanh', 'Tanh', 13, [sp], [np.tanh(spv).astype(np.float32)])
        case('ew_special_abs', 'Abs', 13, [sp], [np.abs(sp)])
        case('ew_special_sign', 'Sign', 13, [sp], [np.sign(sp)])
        case('ew_special_floor', 'Floor', 13, [sp], [np.floor(sp)])
        case('ew_special_relu', 'Relu', 14, [sp], [np.maximum(sp, 0)])
        case('ew_special_sqrt', 'Sqrt', 13, [sp], [np.sqrt(spv).astype(np.float32)])
        case('ew_special_log', 'Log', 13, [sp], [np.log(spv).astype(np.float32)])
        case('ew_special_reciprocal', 'Reciprocal', 13, [sp], [(1 / spv).astype(np.float32)])
        case('ew_special_isnan', 'IsNaN', 13, [sp], [np.isnan(sp)])
        case('ew_special_isinf', 'IsInf', 10, [sp], [np.isinf(sp)])
        case('ew_special_div', 'Div', 14, [sp, np.float32([0, 0, 1, 0, 1, 0, -0.0])],
             [(spv / np.array([0, 0, 1, 0, 1, 0, -0.0])).astype(np.float32)])
        case('ew_special_max', 'Max', 13, [sp, np.zeros(7, np.float32)], [np.maximum(sp, 0)])
        case('ew_special_equal', 'Equal', 13, [sp, sp], [sp == sp])
        case('ew_special_round', 'Round', 11, [np.array([0.5, 1.5, 2.5, -0.5, -2.5, np.inf, np.nan, 1e20], np.float32)],
             [np.round(np.array([0.5, 1.5, 2.5, -0.5, -2.5, np.inf, np.nan, 1e20], np.float32))])
        case('ew_special_mod_fmod', 'Mod', 13, [np.float32([5.5, -5.5, 5.5, -5.5, 3, 0]), np.float32([2, 2, -2, -2, np.inf, 3])],
             [np.fmod(np.float32([5.5, -5.5, 5.5, -5.5, 3, 0]), np.float32([2, 2, -2, -2, np.inf, 3]))], {'fmod': 1})
    # Integer edge values: wrap, Mod by negative, Abs of the minimum.
    i8 = np.array([-128, -127, -1, 0, 1, 127], np.int8)
    with np.errstate(over='ignore'):
        case('ew_i8_add_wrap', 'Add', 14, [i8, np.int8([1, 1, 1, 1, 1, 1])], [i8 + np.int8(1)])
        case('ew_i8_mul_wrap', 'Mul', 14, [i8, np.int8([2, 2, 2, 2, 2, 2])], [i8 * np.int8(2)])
        case('ew_u8_sub_wrap', 'Sub', 14, [np.uint8([0, 1, 255]), np.uint8([1, 2, 255])], [np.uint8([255, 255, 0])])
    case('ew_i32_mod_neg', 'Mod', 13, [np.int32([-7, 7, -7, 7, 0, -2 ** 31]), np.int32([3, -3, -3, 3, 5, 3])],
         [np.mod(np.int32([-7, 7, -7, 7, 0, -2 ** 31]), np.int32([3, -3, -3, 3, 5, 3]))])
    case('ew_i64_mod_big', 'Mod', 13, [np.array([2 ** 62 + 1, -(2 ** 62) - 1], np.int64), np.array([3, 7], np.int64)],
         [np.mod(np.array([2 ** 62 + 1, -(2 ** 62) - 1], np.int64), np.array([3, 7], np.int64))])
    case('ew_i64_div_big', 'Div', 14, [np.array([2 ** 62 + 1, -(2 ** 62) - 1], np.int64), np.array([3, 7], np.int64)],
         [np.array([(2 ** 62 + 1) // 3, -((2 ** 62 + 1) // 7)], np.int64)])
    case('ew_i64_mul_big', 'Mul', 14, [np.array([2 ** 40 + 3, -(2 ** 41) - 1], np.int64), np.array([2 ** 20 + 1, 3], np.int64)],
         [np.array([(2 ** 40 + 3) * (2 ** 20 + 1), (-(2 ** 41) - 1) * 3], np.int64)])
    case('ew_i64_pow_big', 'Pow', 15, [np.array([3, -3, 2], np.int64), np.array([39, 39, 62], np.int64)],
         [np.array([3 ** 39, (-3) ** 39, 2 ** 62], np.int64)])
    case('ew_i32_pow_int', 'Pow', 15, [np.array([2, -2, 5, 7], np.int32), np.array([30, 31, 13, 11], np.int32)],
         [np.array([2 ** 30, -(2 ** 31), 5 ** 13, 7 ** 11], np.int32)])
    case('ew_i32_abs_min', 'Abs', 13, [np.int32([-2 ** 31, -5, 5])], [np.int32([-2 ** 31, 5, 5])])
    case('ew_pow_f32_i64exp', 'Pow', 12, [np.float32([2, -2, 0.5, -3]), np.int64([3, 3, -2, 2])],
         [np.float32([8, -8, 4, 9])])
    case('ew_pow_nan_cases', 'Pow', 13, [np.float32([-8, 0, 0, 1, np.nan]), np.float32([1 / 3, -1, 0, np.nan, 0])],
         [np.power(np.float64([-8, 0, 0, 1, np.nan]), np.float64([np.float32(1 / 3), -1, 0, np.nan, 0])).astype(np.float32)])
    case('ew_bitshift_u32_by31', 'BitShift', 11, [np.uint32([1, 3, 0xffffffff]), np.uint32([31, 31, 31])],
         [np.uint32([2 ** 31, 2 ** 31, 2 ** 31])], {'direction': 'LEFT'})
    # Cast: old attribute forms, special values, saturation-free corners.
    xf = np.array([1.7, -1.7, 0.5, -0.5, 100.9, -100.9], np.float32)
    case('cast1_to_string_attr', 'Cast', 1, [xf], [np.trunc(xf).astype(np.int32)], {'to': 'INT32'})
    case('cast6_to_int', 'Cast', 6, [xf], [np.trunc(xf).astype(np.int64)], {'to': TensorProto.INT64})
    case('cast9_bool', 'Cast', 9, [np.float32([0, -0.0, 0.1, np.nan, -3])], [np.array([False, False, True, True, True])],
         {'to': TensorProto.BOOL})
    sf = np.array([np.nan, np.inf, -np.inf, 1e-5, 123456790.0, -0.0, 1e20, 0.1], np.float32)
    case('cast_f32_special_to_str', 'Cast', 13, [sf],
         [np.array(['NaN', 'INF', '-INF', '1e-05', '123456790.0', '-0.0', '1e+20', '0.1'], dtype=object)],
         {'to': TensorProto.STRING})
    case('cast_str_special_to_f32', 'Cast', 13, [S('NaN', 'INF', '-INF', '+INF', 'inf', '-1e-05', '1E3', ' 2.5')],
         [np.float32([np.nan, np.inf, -np.inf, np.inf, np.inf, -1e-5, 1000, 2.5])], {'to': TensorProto.FLOAT})
    case('cast_str_to_i64_big', 'Cast', 13, [S('9223372036854775807', '-9223372036854775808', '12345678901234567')],
         [np.array([2 ** 63 - 1, -2 ** 63, 12345678901234567], np.int64)], {'to': TensorProto.INT64})
    case('cast_str_to_u64_big', 'Cast', 13, [S('18446744073709551615', '9223372036854775809')],
         [np.array([2 ** 64 - 1, 2 ** 63 + 1], np.uint64)], {'to': TensorProto.UINT64})
    case('cast_i64_to_f32_round', 'Cast', 13, [np.array([2 ** 53 + 1, 2 ** 24 + 1, -(2 ** 62) - 1], np.int64)],
         [np.array([2 ** 53 + 1, 2 ** 24 + 1, -(2 ** 62) - 1], np.int64).astype(np.float32)], {'to': TensorProto.FLOAT})
    case('cast_i64_to_f64_big', 'Cast', 13, [np.array([2 ** 53 + 1, 2 ** 62 + 3], np.int64)],
         [np.array([2 ** 53 + 1, 2 ** 62 + 3], np.int64).astype(np.float64)], {'to': TensorProto.DOUBLE})
    case('cast_u64_to_f64_big', 'Cast', 13, [np.array([2 ** 64 - 1, 2 ** 63 + 2 ** 11], np.uint64)],
         [np.array([2 ** 64 - 1, 2 ** 63 + 2 ** 11], np.uint64).astype(np.float64)], {'to': TensorProto.DOUBLE})
    case('cast_i32_to_i8_wrap', 'Cast', 13, [np.int32([300, -129, 255, 128, -1])], [np.int32([300, -129, 255, 128, -1]).astype(np.int8)],
         {'to': TensorProto.INT8})
    case('cast_i64_to_u32_wrap', 'Cast', 13, [np.int64([-1, 2 ** 32 + 5])], [np.uint32([2 ** 32 - 1, 5])], {'to': TensorProto.UINT32})
    case('cast_f32_to_f16_overflow', 'Cast', 13, [np.float32([70000, -70000, 65504, 1e-8, 6e-8])],
         [np.float32([70000, -70000, 65504, 1e-8, 6e-8]).astype(np.float16)], {'to': TensorProto.FLOAT16})
    case('cast_f16_to_str', 'Cast', 13, [np.float16([0.1, 65504, 6e-8, -2.5])],
         [np.array([str(v) for v in np.float16([0.1, 65504, 6e-8, -2.5])], dtype=object)], {'to': TensorProto.STRING})
    case('cast_f64_to_str', 'Cast', 13, [np.float64([0.1, 1 / 3, 1e16, 1e-4, 2.0 ** 70])],
         [np.array([str(v) for v in np.float64([0.1, 1 / 3, 1e16, 1e-4, 2.0 ** 70])], dtype=object)], {'to': TensorProto.STRING})
    # Where-9 (no broadcasting needed) and with a scalar condition.
    case('where9_same', 'Where', 9, [np.array([[True, False], [False, True]]), np.float32([[1, 2], [3, 4]]),
                                     np.float32([[5, 6], [7, 8]])], [np.float32([[1, 6], [7, 4]])])
    case('where_scalar_cond', 'Where', 16, [np.array(False), np.float32([1, 2]), np.float32([[5], [6]])],
         [np.float32([[5, 5], [6, 6]])])
    # Logic-1 style broadcast attribute.
    ba = np.array([[True, False, True], [False, False, True]])
    case('and1_bcast_axis', 'And', 1, [ba, np.array([True, False])], [ba & np.array([[True], [False]])], {'broadcast': 1, 'axis': 0})
    case('equal1_bcast', 'Equal', 7, [np.int32([[1, 2, 3], [3, 2, 1]]), np.int32([3, 2, 1])], [np.array([[False, True, False], [True, True, True]])])
    case('greater1_bcast_attr', 'Greater', 1, [np.float32([[1, 2, 3], [3, 2, 1]]), np.float32([2, 2, 2])],
         [np.array([[False, False, True], [True, False, False]])], {'broadcast': 1})


# ---- nn: conv, pools, norms, gemm, matmul, einsum, det, losses, dropout --------------------

def gen_nn(case, torch):
    F = torch.nn.functional
    T = lambda v: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))
    rng = np.random.default_rng(0)
    N = lambda *s: rng.standard_normal(s)

    def same_pads(ins, k, st, dl, upper):
        pb, pe = [], []
        for n, kk, s, d in zip(ins, k, st, dl):
            o = -(-n // s)
            tot = max(0, (o - 1) * s + (kk - 1) * d + 1 - n)
            b = tot // 2 if upper else tot - tot // 2
            pb.append(b)
            pe.append(tot - b)
        return pb, pe

    def padnd(x, pb, pe, value=0.0):
        return np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)), constant_values=value)

    # Conv
    for dt in [np.float32, np.float64, np.float16]:
        x, wt, b = N(2, 4, 7, 6).astype(dt), N(6, 2, 3, 2).astype(dt), N(6).astype(dt)
        ref = F.conv2d(T(x), T(wt), T(b), stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2).numpy()
        case('conv_groups_%s' % np.dtype(dt).name, 'Conv', 11, [x, wt, b], [ref.astype(dt)],
             {'group': 2, 'strides': [2, 1], 'pads': [1, 1, 1, 1], 'dilations': [1, 2]})
    x = N(1, 2, 10).astype(np.float32)
    wt = N(3, 2, 4).astype(np.float32)
    for ap in ['SAME_UPPER', 'SAME_LOWER', 'VALID']:
        if ap == 'VALID':
            ref = F.conv1d(T(x), T(wt), stride=3).numpy()
        else:
            pb, pe = same_pads([10], [4], [3], [1], ap == 'SAME_UPPER')
            ref = F.conv1d(T(padnd(x, pb, pe)), T(wt), stride=3).numpy()
        case('conv1d_%s' % ap.lower(), 'Conv', 11, [x, wt], [ref.astype(np.float32)], {'auto_pad': ap, 'strides': [3]})
    x2, w2 = N(1, 3, 7, 8).astype(np.float32), N(4, 3, 3, 4).astype(np.float32)
    for ap in ['SAME_UPPER', 'SAME_LOWER']:
        pb, pe = same_pads([7, 8], [3, 4], [2, 3], [2, 1], ap == 'SAME_UPPER')
        ref = F.conv2d(T(padnd(x2, pb, pe)), T(w2), stride=(2, 3), dilation=(2, 1)).numpy()
        case('conv2d_%s_dil_stride' % ap.lower(), 'Conv', 11, [x2, w2], [ref.astype(np.float32)],
             {'auto_pad': ap, 'strides': [2, 3], 'dilations': [2, 1]})
    ref = F.conv2d(T(padnd(x2, [0, 2], [3, 1])), T(w2), stride=(1, 2)).numpy()
    case('conv2d_asym_pads', 'Conv', 11, [x2, w2], [ref.astype(np.float32)], {'pads': [0, 2, 3, 1], 'strides': [1, 2]})
    ref = F.conv2d(T(x2), T(w2[:, :, :2, :2]), stride=1).numpy()
    case('conv1_kernel_shape', 'Conv', 1, [x2, w2[:, :, :2, :2].copy()], [ref.astype(np.float32)], {'kernel_shape': [2, 2]})
    xd = N(1, 6, 5, 5).astype(np.float32)
    wd = N(6, 1, 3, 3).astype(np.float32)
    case('conv_depthwise', 'Conv', 11, [xd, wd], [F.conv2d(T(xd), T(wd), padding=1, groups=6).numpy().astype(np.float32)],
         {'group': 6, 'pads': [1, 1, 1, 1]})
    x3, w3 = N(1, 3, 5, 4, 6).astype(np.float32), N(2, 3, 2, 3, 2).astype(np.float32)
    case('conv3d_pads_strides', 'Conv', 11, [x3, w3],
         [F.conv3d(T(padnd(x3, [1, 0, 1], [0, 1, 1])), T(w3), stride=(1, 2, 2)).numpy().astype(np.float32)],
         {'pads': [1, 0, 1, 0, 1, 1], 'strides': [1, 2, 2]})
    # ConvTranspose
    x, wt, b = N(2, 4, 3, 5), N(4, 3, 3, 2), N(6)
    ref = F.conv_transpose2d(T(x), T(wt), T(b), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2,
                             dilation=(2, 1)).numpy()
    case('convt_groups_outpad_dil', 'ConvTranspose', 11, [x, wt, b], [ref],
         {'group': 2, 'strides': [2, 3], 'pads': [1, 0, 1, 0], 'output_padding': [1, 2], 'dilations': [2, 1]})
    xt = N(1, 2, 3, 4).astype(np.float32)
    wt2 = N(2, 3, 3, 3).astype(np.float32)
    full = F.conv_transpose2d(T(xt), T(wt2), stride=2).numpy()  # (1, 3, 7, 9)
    # total_padding = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - out_size; SAME_UPPER (and
    # the official test data) put total // 2 at the start, SAME_LOWER the rest; even totals for the default.
    for ap, (H, W), tag in [('', (5, 7), 'default'), ('SAME_UPPER', (6, 8), 'same_upper'), ('SAME_LOWER', (6, 6), 'same_lower')]:
        tot = [2 * (3 - 1) + 3 - H, 2 * (4 - 1) + 3 - W]
        pb = [t - t // 2 for t in tot] if tag == 'same_lower' else [t // 2 for t in tot]
        y = full[:, :, pb[0]:pb[0] + H, pb[1]:pb[1] + W]
        attrs = {'strides': [2, 2], 'output_shape': [H, W]}
        if ap:
            attrs['auto_pad'] = ap
        case('convt_output_shape_%s' % tag, 'ConvTranspose', 11, [xt, wt2], [y.astype(np.float32)], attrs)
    case('convt_auto_pad_same_upper', 'ConvTranspose', 11, [xt, wt2], [full[:, :, 0:6, 0:8].astype(np.float32)],
         {'strides': [2, 2], 'auto_pad': 'SAME_UPPER'})
    case('convt_auto_pad_same_lower', 'ConvTranspose', 11, [xt, wt2], [full[:, :, 1:7, 1:9].astype(np.float32)],
         {'strides': [2, 2], 'auto_pad': 'SAME_LOWER'})
    case('convt_pads_outpad', 'ConvTranspose', 11, [xt, wt2],
         [F.conv_transpose2d(T(xt), T(wt2), stride=2, padding=1, output_padding=1).numpy().astype(np.float32)],
         {'strides': [2, 2], 'pads': [1, 1, 1, 1], 'output_padding': [1, 1]})
    case('convt1_kernel_shape', 'ConvTranspose', 1, [xt, wt2], [full.astype(np.float32)], {'strides': [2, 2], 'kernel_shape': [3, 3]})
    xh, wh = N(1, 2, 4).astype(np.float16), N(2, 1, 3).astype(np.float16)
    case('convt1d_f16', 'ConvTranspose', 11, [xh, wh], [F.conv_transpose1d(T(xh), T(wh), stride=2).numpy().astype(np.float16)],
         {'strides': [2]})
    x3, w3 = N(1, 2, 2, 3, 2).astype(np.float32), N(2, 2, 2, 2, 3).astype(np.float32)
    case('convt3d', 'ConvTranspose', 11, [x3, w3], [F.conv_transpose3d(T(x3), T(w3), stride=(1, 2, 1), padding=(0, 1, 1)).numpy().astype(np.float32)],
         {'strides': [1, 2, 1], 'pads': [0, 1, 1, 0, 1, 1]})
    # Pools
    x = N(2, 3, 7, 8).astype(np.float32)
    ref = F.max_pool2d(T(x), 3, stride=2, padding=1, ceil_mode=True, return_indices=True)
    idx = ref[1].numpy() + (np.arange(6) * 56).reshape(2, 3, 1, 1)
    case('maxpool_ceil_indices', 'MaxPool', 12, [x], [ref[0].numpy().astype(np.float32), idx.astype(np.int64)],
         {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1], 'ceil_mode': 1})
    ri = ref[1].numpy()
    h, wd = ri // 8, ri % 8
    case('maxpool_ceil_indices_colmajor', 'MaxPool', 12, [x],
         [ref[0].numpy().astype(np.float32), (h + wd * 7 + (np.arange(6) * 56).reshape(2, 3, 1, 1)).astype(np.int64)],
         {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1], 'ceil_mode': 1, 'storage_order': 1})
    ref = F.max_pool2d(T(x), (2, 3), stride=(1, 2), dilation=(2, 2), return_indices=True)
    case('maxpool_dilations_indices', 'MaxPool', 12, [x],
         [ref[0].numpy().astype(np.float32), (ref[1].numpy() + (np.arange(6) * 56).reshape(2, 3, 1, 1)).astype(np.int64)],
         {'kernel_shape': [2, 3], 'strides': [1, 2], 'dilations': [2, 2]})
    pb, pe = same_pads([7, 8], [3, 3], [2, 2], [1, 1], False)
    ref = F.max_pool2d(T(padnd(x, pb, pe, -np.inf)), 3, stride=2).numpy()
    case('maxpool_same_lower', 'MaxPool', 11, [x], [ref.astype(np.float32)], {'kernel_shape': [3, 3], 'strides': [2, 2], 'auto_pad': 'SAME_LOWER'})
    x6 = x[:, :, :6, :6].copy()
    ref = F.max_pool2d(T(x6), 2, return_indices=True)
    case('maxpool8_indices', 'MaxPool', 8, [x6],
         [ref[0].numpy().astype(np.float32), (ref[1].numpy() + (np.arange(6) * 36).reshape(2, 3, 1, 1)).astype(np.int64)],
         {'kernel_shape': [2, 2], 'strides': [2, 2]})
    case('maxpool1_default_strides', 'MaxPool', 1, [x], [F.max_pool2d(T(x), 2, stride=1).numpy().astype(np.float32)],
         {'kernel_shape': [2, 2]})
    ref = F.avg_pool2d(T(x), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    case('avgpool_ceil', 'AveragePool', 11, [x], [ref.numpy().astype(np.float32)],
         {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1], 'ceil_mode': 1})
    ref = F.avg_pool2d(T(x), 3, stride=2, padding=1, count_include_pad=True)
    case('avgpool_count_pad', 'AveragePool', 11, [x], [ref.numpy().astype(np.float32)],
         {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 1, 1, 1], 'count_include_pad': 1})
    ref = F.avg_pool2d(T(padnd(x, [0, 2], [1, 0])), (2, 3), stride=(2, 2)).numpy()
    case('avgpool_asym_pads_count', 'AveragePool', 11, [x], [ref.astype(np.float32)],
         {'kernel_shape': [2, 3], 'strides': [2, 2], 'pads': [0, 2, 1, 0], 'count_include_pad': 1})
    pb, pe = same_pads([7, 8], [3, 2], [1, 1], [1, 1], True)
    ones = padnd(np.ones_like(x), pb, pe)
    ref = F.avg_pool2d(T(padnd(x, pb, pe)), (3, 2), stride=1).numpy() / F.avg_pool2d(T(ones), (3, 2), stride=1).numpy()
    case('avgpool_same_upper', 'AveragePool', 7, [x], [ref.astype(np.float32)], {'kernel_shape': [3, 2], 'auto_pad': 'SAME_UPPER'})
    x1 = N(2, 3, 9).astype(np.float32)
    case('avgpool1d', 'AveragePool', 11, [x1], [F.avg_pool1d(T(x1), 3, stride=2).numpy().astype(np.float32)],
         {'kernel_shape': [3], 'strides': [2]})
    x3 = N(1, 2, 4, 4, 4).astype(np.float32)
    ref = F.max_pool3d(T(x3), 2, 2, return_indices=True)
    ri = ref[1].numpy()
    dd, hh, ww = ri // 16, (ri // 4) % 4, ri % 4
    case('maxpool3d_colmajor', 'MaxPool', 12, [x3],
         [ref[0].numpy().astype(np.float32), (dd + hh * 4 + ww * 16 + (np.arange(2) * 64).reshape(1, 2, 1, 1, 1)).astype(np.int64)],
         {'kernel_shape': [2, 2, 2], 'strides': [2, 2, 2], 'storage_order': 1})
    xi = rng.integers(-128, 127, (1, 2, 5, 5)).astype(np.int8)
    case('maxpool_i8_pads', 'MaxPool', 12, [xi], [F.max_pool2d(T(xi), 2, 1, padding=1).numpy().astype(np.int8)],
         {'kernel_shape': [2, 2], 'pads': [1, 1, 1, 1]})
    case('lppool_p3', 'LpPool', 11, [x],
         [np.power(F.avg_pool2d(T(np.abs(x)) ** 3, 2, stride=(2, 1)).numpy() * 4, 1 / 3).astype(np.float32)],
         {'kernel_shape': [2, 2], 'strides': [2, 1], 'p': 3})
    case('lppool_p1_pads', 'LpPool', 11, [x], [(F.avg_pool2d(T(padnd(np.abs(x), [1, 0], [1, 0])), 3, stride=2).numpy() * 9).astype(np.float32)],
         {'kernel_shape': [3, 3], 'strides': [2, 2], 'pads': [1, 0, 1, 0], 'p': 1})
    case('globallp1_float_p', 'GlobalLpPool', 1, [x], [np.power((np.abs(x.astype(np.float64)) ** 3).sum((2, 3), keepdims=True), 1 / 3).astype(np.float32)],
         {'p': 3.0})
    case('globalmaxpool_3d', 'GlobalMaxPool', 1, [x3], [x3.max((2, 3, 4), keepdims=True)])
    case('globalavgpool_1d', 'GlobalAveragePool', 1, [x1], [x1.astype(np.float64).mean(2, keepdims=True).astype(np.float32)])

    # BatchNormalization
    def bn(x, s, b, m, v, eps=1e-5):
        sh = (1, -1) + (1,) * (x.ndim - 2)
        return (x.astype(np.float64) - m.reshape(sh)) / np.sqrt(v.reshape(sh).astype(np.float64) + f32(eps)) * s.reshape(sh) + b.reshape(sh)
    x = N(2, 3, 4).astype(np.float32)
    s, b = N(3, 4).astype(np.float32), N(3, 4).astype(np.float32)
    m, v = N(3, 4).astype(np.float32), (rng.random((3, 4)) + 0.5).astype(np.float32)
    case('bn7_spatial0', 'BatchNormalization', 7, [x, s, b, m, v], [((x - m) / np.sqrt(v + f32(1e-5)) * s + b).astype(np.float32)],
         {'spatial': 0})
    s, b, m = N(3).astype(np.float32), N(3).astype(np.float32), N(3).astype(np.float32)
    v = (rng.random(3) + 0.5).astype(np.float32)
    case('bn6_is_test', 'BatchNormalization', 6, [x, s, b, m, v], [bn(x, s, b, m, v).astype(np.float32)], {'is_test': 1})
    case('bn9_inference', 'BatchNormalization', 9, [x, s, b, m, v], [bn(x, s, b, m, v, 1e-3).astype(np.float32)], {'epsilon': 1e-3})
    case('bn_2d_input', 'BatchNormalization', 15, [x[:, :, 0].copy(), s, b, m, v], [bn(x[:, :, 0], s, b, m, v).astype(np.float32)])
    x5 = N(2, 3, 2, 2, 3).astype(np.float32)
    case('bn_5d_input', 'BatchNormalization', 15, [x5, s, b, m, v], [bn(x5, s, b, m, v).astype(np.float32)])
    cm, cv = x.astype(np.float64).mean((0, 2)), x.astype(np.float64).var((0, 2))
    yt = ((x - cm.reshape(1, 3, 1)) / np.sqrt(cv.reshape(1, 3, 1) + f32(1e-5)) * s.reshape(1, 3, 1) + b.reshape(1, 3, 1)).astype(np.float32)
    case('bn15_training', 'BatchNormalization', 15, [x, s, b, m, v],
         [yt, (m * f32(0.8) + cm * (1 - f32(0.8))).astype(np.float32), (v * f32(0.8) + cv * (1 - f32(0.8))).astype(np.float32)],
         {'momentum': 0.8, 'training_mode': 1})
    case('bn14_training_y_only', 'BatchNormalization', 14, [x, s, b, m, v], [yt], {'momentum': 0.8, 'training_mode': 1}, n_outputs=3)
    # LayerNormalization
    x = N(2, 3, 4).astype(np.float16)
    sc = N(1, 4).astype(np.float16)
    xd = x.astype(np.float64)
    mu, var = xd.mean((1, 2), keepdims=True), xd.var((1, 2), keepdims=True)
    case('ln_f16_axis1_bcast_scale', 'LayerNormalization', 17, [x, sc],
         [((xd - mu) / np.sqrt(var + f32(1e-5)) * sc).astype(np.float16), mu.astype(np.float32), (1 / np.sqrt(var + f32(1e-5))).astype(np.float32)],
         {'axis': 1})
    xf = N(2, 3, 4)
    case('ln_f64_axis_neg2_eps', 'LayerNormalization', 17, [xf, np.ones((3, 4)), np.zeros((3, 4))],
         [(xf - xf.mean((1, 2), keepdims=True)) / np.sqrt(xf.var((1, 2), keepdims=True) + f32(0.1))],
         {'axis': -2, 'epsilon': 0.1})
    # InstanceNorm, LRN, MVN, LpNormalization
    x = N(2, 3, 4, 5, 2)
    s, b = N(3), N(3)
    case('instnorm_5d', 'InstanceNormalization', 6, [x, s, b], [F.instance_norm(T(x), weight=T(s), bias=T(b), eps=f32(1e-3)).numpy()],
         {'epsilon': 1e-3})
    x3d = N(2, 3, 5).astype(np.float32)
    case('instnorm_3d', 'InstanceNormalization', 6, [x3d, s.astype(np.float32), b.astype(np.float32)],
         [F.instance_norm(T(x3d), weight=T(s), bias=T(b), eps=f32(1e-5)).numpy().astype(np.float32)])

    def lrn_ref(x, size, alpha, beta, bias):
        C = x.shape[1]
        sq = np.zeros_like(x)
        for c in range(C):
            lo = max(0, c - (size - 1) // 2)
            hi = min(C - 1, c + int(np.ceil((size - 1) / 2)))
            sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        return x / (bias + alpha / size * sq) ** beta
    x = N(2, 6, 3, 3)
    case('lrn_even_size', 'LRN', 13, [x], [lrn_ref(x, 4, f32(0.01), f32(0.6), f32(1.5))], {'size': 4, 'alpha': 0.01, 'beta': 0.6, 'bias': 1.5})
    case('lrn1_defaults', 'LRN', 1, [x.astype(np.float32)], [lrn_ref(x.astype(np.float32).astype(np.float64), 5, f32(1e-4), f32(0.75), 1.0).astype(np.float32)],
         {'size': 5})
    x = N(2, 3, 4, 5).astype(np.float32)
    xd = x.astype(np.float64)
    mu = xd.mean(axis=(0, 3), keepdims=True)
    sd = np.sqrt((xd ** 2).mean(axis=(0, 3), keepdims=True) - mu ** 2)
    case('mvn_axes', 'MeanVarianceNormalization', 13, [x], [((xd - mu) / (sd + 1e-9)).astype(np.float32)], {'axes': [0, -1]})
    mu = xd.mean(axis=(0, 2, 3), keepdims=True)
    sd = np.sqrt((xd ** 2).mean(axis=(0, 2, 3), keepdims=True) - mu ** 2)
    case('mvn9_default', 'MeanVarianceNormalization', 9, [x], [((xd - mu) / (sd + 1e-9)).astype(np.float32)])
    for p in [1, 2]:
        for axis in [0, -1, 1]:
            n = np.power(np.power(np.abs(xd), p).sum(axis, keepdims=True), 1.0 / p)
            case('lpnorm_p%d_axis%d' % (p, axis), 'LpNormalization', 1, [x], [(xd / n).astype(np.float32)], {'axis': axis, 'p': p})
    # Gemm
    for dt in [np.int32, np.int64, np.uint32, np.uint64]:
        a, bb, c = rng.integers(0, 100, (3, 4)).astype(dt), rng.integers(0, 100, (5, 4)).astype(dt), rng.integers(0, 100, (5,)).astype(dt)
        case('gemm_%s_transB_alpha' % np.dtype(dt).name, 'Gemm', 13, [a, bb, c], [(2 * a.astype(np.int64) @ bb.T.astype(np.int64) + c).astype(dt)],
             {'transB': 1, 'alpha': 2.0})
    a, bb, c = N(4, 3).astype(np.float16), N(4, 2).astype(np.float16), N(3, 1).astype(np.float16)
    case('gemm_f16_transA_Ccol', 'Gemm', 13, [a, bb, c], [(0.5 * a.astype(np.float64).T @ bb + 2 * c).astype(np.float16)],
         {'transA': 1, 'alpha': 0.5, 'beta': 2.0})
    case('gemm_noC', 'Gemm', 11, [a.T.copy(), bb], [(a.astype(np.float64).T @ bb).astype(np.float16)])
    a, bb = N(3, 4).astype(np.float32), N(4, 5).astype(np.float32)
    ad, bd = a.astype(np.float64), bb.astype(np.float64)
    case('gemm_scalarC', 'Gemm', 13, [a, bb, np.array(1.5, np.float32)], [(ad @ bd + 1.5 * f32(0.5)).astype(np.float32)], {'beta': 0.5})
    case('gemm6_broadcast', 'Gemm', 6, [a, bb, np.float32([1, 2, 3, 4, 5])], [(ad @ bd + [1, 2, 3, 4, 5]).astype(np.float32)], {'broadcast': 1})
    case('gemm7_C_row', 'Gemm', 7, [a, bb, np.float32([[1, 2, 3, 4, 5]])], [(ad @ bd + [1, 2, 3, 4, 5]).astype(np.float32)])
    case('gemm_beta0_ignores_C', 'Gemm', 13, [a, bb, np.full((3, 5), 7.0, np.float32)], [(ad @ bd).astype(np.float32)], {'beta': 0.0})
    # MatMul
    for sa, sb in [((3,), (3,)), ((3,), (2, 3, 4)), ((2, 1, 5, 3), (3,)), ((2, 1, 5, 3), (4, 3, 2)), ((1, 3), (3, 1)),
                   ((0, 3), (3, 2)), ((2, 0), (0, 3))]:
        a, bb = N(*sa), N(*sb)
        case('matmul_%s_%s' % ('x'.join(map(str, sa)), 'x'.join(map(str, sb))), 'MatMul', 13, [a, bb], [np.matmul(a, bb)])
    a = rng.integers(-2 ** 40, 2 ** 40, (2, 3, 4)).astype(np.int64)
    bb = rng.integers(-2 ** 40, 2 ** 40, (4, 5)).astype(np.int64)
    with np.errstate(over='ignore'):
        case('matmul_i64_wrap', 'MatMul', 13, [a, bb], [np.matmul(a, bb)])
    a = rng.integers(0, 2 ** 32, (2, 3)).astype(np.uint32)
    bb = rng.integers(0, 2 ** 32, (3, 5)).astype(np.uint32)
    with np.errstate(over='ignore'):
        case('matmul_u32_wrap', 'MatMul', 13, [a, bb], [np.matmul(a, bb)])
    a = rng.integers(-2 ** 20, 2 ** 20, (3, 4)).astype(np.int64) + 2 ** 40
    bb = rng.integers(-2 ** 12, 2 ** 12, (4, 2)).astype(np.int64)
    case('matmul_i64_exact_big', 'MatMul', 13, [a, bb], [np.matmul(a, bb)])
    # Einsum
    eqs = [('ii', [(4, 4)]), ('ii->i', [(4, 4)]), ('ij,jk', [(2, 3), (3, 4)]), ('ba,cb->ac', [(3, 2), (4, 3)]),
           ('...ij,...jk->...ik', [(2, 1, 3, 4), (5, 4, 2)]), ('i,j->ij', [(3,), (4,)]), ('bii->b', [(2, 3, 3)]),
           ('iji->j', [(3, 4, 3)]), ('Ab,bA', [(2, 3), (3, 2)]), ('...', [(2, 3)]), ('i...->...', [(3, 2, 2)]),
           ('ij,ij->', [(2, 3), (2, 3)]), ('i,i,i->i', [(4,), (4,), (4,)]), ('ijk', [(2, 3, 4)]), ('kji', [(2, 3, 4)]),
           ('ij,jk,kl->il', [(2, 3), (3, 4), (4, 2)]), ('a...b,b...->a...', [(2, 3, 4), (4, 3)]), ('ij,j->i', [(2, 3), (1,)]),
           ('...ii->...i', [(2, 3, 3)]), ('ji', [(2, 3)]), ('i , i -> ', [(3,), (3,)]), ('bij,bjk', [(2, 3, 4), (2, 4, 2)]),
           ('iij,jk->ik', [(3, 3, 2), (2, 4)]), ('ij...,j...->i...', [(2, 3), (3,)])]
    for k, (eq, shapes) in enumerate(eqs):
        ins = [N(*s_) for s_ in shapes]
        case('einsum_%02d' % k, 'Einsum', 12, ins, [np.asarray(np.einsum(eq.replace(' ', ''), *ins))], {'equation': eq})
    ins = [rng.integers(-5, 5, (3, 4)).astype(np.int32), rng.integers(-5, 5, (4,)).astype(np.int32)]
    case('einsum_i32', 'Einsum', 12, ins, [np.einsum('ij,j->i', *ins)], {'equation': 'ij,j->i'})
    ins = [rng.integers(0, 20, (3, 4)).astype(np.uint8), rng.integers(0, 20, (4,)).astype(np.uint8)]
    with np.errstate(over='ignore'):
        case('einsum_u8_wrap', 'Einsum', 12, ins, [np.einsum('ij,j->i', *ins).astype(np.uint8)], {'equation': 'ij,j->i'})
    # Det
    for sh in [(1, 1), (3, 3), (2, 4, 4), (2, 0, 0), (5, 5)]:
        a = N(*sh)
        case('det_%s' % 'x'.join(map(str, sh)), 'Det', 11, [a], [np.linalg.det(a) if sh[-1] else np.ones(sh[:-2])])
    case('det_singular', 'Det', 11, [np.array([[1., 2.], [2., 4.]])], [np.array(0.0)])
    case('det_needs_pivot', 'Det', 11, [np.array([[0., 1., 2.], [1., 0., 3.], [4., -3., 8.]])],
         [np.array(np.linalg.det(np.array([[0., 1., 2.], [1., 0., 3.], [4., -3., 8.]])))])
    # Losses
    x = N(3, 4, 2)
    t = rng.integers(0, 4, (3, 2)).astype(np.int32)
    wgt = rng.random(4)
    for red in ['none', 'sum', 'mean']:
        ref = F.nll_loss(T(x), torch.tensor(t.astype(np.int64)), weight=T(wgt), reduction=red, ignore_index=1).numpy()
        case('nll_%s_ignore_w' % red, 'NegativeLogLikelihoodLoss', 13, [x, t, wgt], [np.asarray(ref)], {'reduction': red, 'ignore_index': 1})
        ref = F.cross_entropy(T(x), torch.tensor(t.astype(np.int64)), weight=T(wgt), reduction=red, ignore_index=1).numpy()
        case('sce_%s_ignore_w' % red, 'SoftmaxCrossEntropyLoss', 13, [x, t, wgt],
             [np.asarray(ref), F.log_softmax(T(x), 1).numpy()], {'reduction': red, 'ignore_index': 1})
    xh = N(5, 3).astype(np.float16)
    th = rng.integers(0, 3, (5,)).astype(np.int64)
    case('sce_f16_mean', 'SoftmaxCrossEntropyLoss', 13, [xh, th],
         [np.asarray(F.cross_entropy(T(xh), torch.tensor(th)).numpy()).astype(np.float16)])
    x2 = N(4, 5)
    t2 = rng.integers(0, 5, (4,)).astype(np.int64)
    case('nll12_mean_noweight', 'NegativeLogLikelihoodLoss', 12, [x2, t2], [np.asarray(F.nll_loss(T(x2), torch.tensor(t2)).numpy())])
    # Dropout (inference forms: identity, mask all true)
    x = N(10, 10).astype(np.float32)
    case('dropout7_ratio', 'Dropout', 7, [x], [x, np.ones_like(x)], {'ratio': 0.3})
    case('dropout6_is_test', 'Dropout', 6, [x], [x], {'ratio': 0.3, 'is_test': 1})
    case('dropout10_mask_bool', 'Dropout', 10, [x.astype(np.float64)], [x.astype(np.float64), np.ones(x.shape, bool)], {'ratio': 0.3})
    case('dropout12_not_training', 'Dropout', 12, [x, np.array(0.4, np.float32), np.array(False)], [x, np.ones(x.shape, bool)])
    case('dropout13_ratio_only', 'Dropout', 13, [x, np.array(0.4, np.float32)], [x])
    case('dropout13_training_ratio0', 'Dropout', 13, [x, np.array(0.0, np.float32), np.array(True)], [x, np.ones(x.shape, bool)],
         {'seed': 5})


# ---- Resize / Upsample / GridSample ----------------------------------------------------

def gen_resize(case, torch):
    from onnx.backend.test.case.node.resize import cubic_coeffs, interpolate_nd, linear_coeffs, nearest_coeffs
    F = torch.nn.functional
    rng = np.random.RandomState(0)
    cnt = 0
    for mode in ['nearest', 'linear', 'cubic']:
        for ctm in ['half_pixel', 'pytorch_half_pixel', 'align_corners', 'asymmetric', 'tf_crop_and_resize']:
            for use_sizes in [False, True]:
                if ctm == 'tf_crop_and_resize' and not use_sizes:
                    continue  # the reference ignores roi for the size
                if ctm == 'pytorch_half_pixel' and mode == 'cubic':
                    continue  # the reference uses -0.5 for length 1, the spec 0
                shape, tgt = ((1, 2, 4, 6), (1, 2, 3, 9)) if use_sizes else ((2, 3, 5), (2, 3, 7))
                x = rng.randn(*shape).astype(np.float32)
                if use_sizes:
                    sizes, scales = np.array(tgt, dtype=np.int64), None
                else:
                    scales = (np.array(tgt, dtype=np.float32) / np.array(shape, dtype=np.float32) * np.float32(1.03)).astype(np.float32)
                    scales[0] = 1.0
                    sizes = None
                roi = None
                if ctm == 'tf_crop_and_resize':
                    r = len(shape)
                    roi = np.concatenate([np.zeros(r), np.ones(r)]).astype(np.float32)
                    roi[r - 1], roi[2 * r - 1], roi[r - 2], roi[2 * r - 2] = 0.2, 1.1, -0.1, 0.7
                kw = dict(coordinate_transformation_mode=ctm)
                excl = 1 if (mode == 'cubic' and use_sizes) else 0
                if mode == 'cubic':
                    coeffs = (lambda a: lambda ratio: cubic_coeffs(ratio, A=a))(-0.5 if excl else -0.75)
                    kw['exclude_outside'] = bool(excl)
                elif mode == 'linear':
                    coeffs = linear_coeffs
                else:
                    coeffs = lambda ratio: nearest_coeffs(ratio, mode='round_prefer_floor')
                if ctm == 'tf_crop_and_resize':
                    kw['extrapolation_value'] = 3.5
                want = interpolate_nd(x, coeffs, output_size=sizes, scale_factors=scales, roi=roi, **kw).astype(np.float32)
                attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
                if mode == 'cubic':
                    attrs['exclude_outside'] = excl
                    attrs['cubic_coeff_a'] = -0.5 if excl else -0.75
                if ctm == 'tf_crop_and_resize':
                    attrs['extrapolation_value'] = 3.5
                ins = [x, roi, scales, sizes] if roi is not None or use_sizes else [x, None, scales]
                if roi is None and use_sizes:
                    ins = [x, None, None, sizes]
                case('resize_%s_%s_%s' % (mode, ctm, 'sizes' if use_sizes else 'scales'), 'Resize', 13, ins, [want], attrs)
                cnt += 1
    # nearest modes
    x = rng.randn(1, 1, 5, 4).astype(np.float32)
    for nm in ['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil']:
        for ctm in ['half_pixel', 'asymmetric']:
            want = interpolate_nd(x, lambda ratio: nearest_coeffs(ratio, mode=nm), output_size=np.array([1, 1, 8, 7]),
                                  coordinate_transformation_mode=ctm).astype(np.float32)
            case('resize_nearest_%s_%s' % (nm, ctm), 'Resize', 13, [x, None, None, i64(1, 1, 8, 7)], [want],
                 dict(mode='nearest', nearest_mode=nm, coordinate_transformation_mode=ctm))
    # Resize-11: roi and scales given as (empty) inputs
    want = interpolate_nd(x, linear_coeffs, scale_factors=np.array([1, 1, 0.6, 1.5]), coordinate_transformation_mode='half_pixel')
    case('resize11_linear_scales_empty_roi', 'Resize', 11, [x, np.zeros(0, np.float32), np.float32([1, 1, 0.6, 1.5])],
         [want.astype(np.float32)], {'mode': 'linear'})
    case('resize11_sizes_empty_scales', 'Resize', 11, [x, np.zeros(0, np.float32), np.zeros(0, np.float32), i64(1, 1, 3, 6)],
         [interpolate_nd(x, linear_coeffs, output_size=np.array([1, 1, 3, 6])).astype(np.float32)], {'mode': 'linear'})
    # Resize-10 / Upsample-7/9 (asymmetric, nearest = floor)
    f = lambda a: np.array(a, dtype=np.float32)
    x = f([[[[1, 2], [3, 4]]]])
    case('resize10_up_linear', 'Resize', 10, [x, f([1, 1, 2, 2])], [f([[[[1, 1.5, 2, 2], [2, 2.5, 3, 3], [3, 3.5, 4, 4], [3, 3.5, 4, 4]]]])],
         {'mode': 'linear'})
    x2 = f([[[[1, 2, 3, 4], [5, 6, 7, 8]]]])
    case('resize10_down_linear', 'Resize', 10, [x2, f([1, 1, 0.6, 0.6])], [f([[[[1, 2.6666665]]]])], {'mode': 'linear'})
    case('resize10_down_nearest', 'Resize', 10, [x2, f([1, 1, 0.6, 0.6])], [f([[[[1, 3]]]])], {'mode': 'nearest'})
    case('upsample7_nearest', 'Upsample', 7, [x], [f([[[[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]]])],
         {'mode': 'nearest', 'scales': [1.0, 1.0, 2.0, 3.0]})
    case('upsample9_linear', 'Upsample', 9, [x, f([1, 1, 2, 2])], [f([[[[1, 1.5, 2, 2], [2, 2.5, 3, 3], [3, 3.5, 4, 4], [3, 3.5, 4, 4]]]])],
         {'mode': 'linear'})
    case('upsample7_linear_3d', 'Upsample', 7, [f([[1, 2, 4]])], [f([[1, 1.5, 2, 3, 4, 4], [1, 1.5, 2, 3, 4, 4]])],
         {'mode': 'linear', 'scales': [2.0, 2.0]})
    case('upsample9_int_nearest', 'Upsample', 9, [np.int32([[1, 2], [3, 4]]), f([2, 1.5])], [np.int32([[1, 1, 2], [1, 1, 2], [3, 3, 4], [3, 3, 4]])],
         {'mode': 'nearest'})
    xs = np.array([['a', 'bé'], ['c', 'd']], dtype=object)
    case('resize_str_nearest', 'Resize', 13, [xs, None, f([1, 2])], [np.array([['a', 'a', 'bé', 'bé'], ['c', 'c', 'd', 'd']], dtype=object)],
         {'mode': 'nearest'})
    case('resize_u8_linear', 'Resize', 13, [np.uint8([[0, 255]]), None, f([1, 1.5])], [np.uint8([[0, 128, 255]])],
         {'mode': 'linear', 'coordinate_transformation_mode': 'align_corners'})
    x = f([[[[1, 2], [3, 4]]]])
    case('resize_init_scales', 'Resize', 13, [x, None, f([1, 1, 2, 3])],
         [f([[[[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]]])], {'mode': 'nearest'}, inits=(2,))
    # GridSample vs torch
    for mode in ['bilinear', 'nearest', 'bicubic']:
        for pad in ['zeros', 'border', 'reflection']:
            for ac in [0, 1] if mode == 'bilinear' else [pad != 'border']:
                x = rng.randn(1, 2, 4, 5).astype(np.float32)
                grid = (rng.rand(1, 3, 4, 2).astype(np.float32) * 3.2 - 1.6)
                # keep nearest away from .5 ties in the sampled coordinate
                want = F.grid_sample(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(grid.astype(np.float64)), mode=mode,
                                     padding_mode=pad, align_corners=bool(ac)).numpy()
                case('gridsample_%s_%s_%d' % (mode, pad, ac), 'GridSample', 16, [x, grid], [want.astype(np.float32)],
                     {'mode': mode, 'padding_mode': pad, 'align_corners': ac})


# ---- RNN / GRU / LSTM (from the rnn helper's torch and numpy generators) ---------------------

def gen_rnn(case, torch):
    torch.manual_seed(0)

    def perm_rows(w, order, H):
        return torch.cat([w[i * H:(i + 1) * H] for i in order], 0)

    def run(kind, bidir, layout, lens, nonlin='tanh', dtype=np.float32, name=None, with_h0=True):
        S_, B, I, H = 5, 3, 4, 6
        nd = 2 if bidir else 1
        tdt = torch.float64
        if kind == 'RNN':
            m = torch.nn.RNN(I, H, nonlinearity=nonlin, bidirectional=bidir, batch_first=bool(layout)).to(tdt)
        elif kind == 'GRU':
            m = torch.nn.GRU(I, H, bidirectional=bidir, batch_first=bool(layout)).to(tdt)
        else:
            m = torch.nn.LSTM(I, H, bidirectional=bidir, batch_first=bool(layout)).to(tdt)
        rnd = lambda t: torch.from_numpy(t.numpy().astype(dtype).astype(np.float64))  # inputs exact in dtype
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(rnd(p.data))
        x = rnd(torch.randn(S_, B, I, dtype=tdt))
        h0 = rnd(torch.randn(nd, B, H, dtype=tdt))
        c0 = rnd(torch.randn(nd, B, H, dtype=tdt))
        if not with_h0:
            h0, c0 = torch.zeros_like(h0), torch.zeros_like(c0)
        order = {'RNN': [0], 'GRU': [1, 0, 2], 'LSTM': [0, 3, 1, 2]}[kind]
        Ws, Rs, Bs = [], [], []
        for d in range(nd):
            sfx = '_reverse' if d else ''
            Ws.append(perm_rows(getattr(m, 'weight_ih_l0' + sfx).data, order, H))
            Rs.append(perm_rows(getattr(m, 'weight_hh_l0' + sfx).data, order, H))
            Bs.append(torch.cat([perm_rows(getattr(m, 'bias_ih_l0' + sfx).data, order, H),
                                 perm_rows(getattr(m, 'bias_hh_l0' + sfx).data, order, H)]))
        W, R, Bb = torch.stack(Ws), torch.stack(Rs), torch.stack(Bs)
        xin = x.transpose(0, 1) if layout else x
        with torch.no_grad():
            st = (h0, c0) if kind == 'LSTM' else h0
            if lens is not None:
                packed = torch.nn.utils.rnn.pack_padded_sequence(xin, torch.tensor(lens), batch_first=bool(layout), enforce_sorted=False)
                y, hn = m(packed, st)
                y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=bool(layout), total_length=S_)
            else:
                y, hn = m(xin, st)
        if kind == 'LSTM':
            hn, cn = hn
        Y = y.reshape(S_, B, nd, H).permute(0, 2, 1, 3) if layout == 0 else y.reshape(B, S_, nd, H)
        st_ = lambda t: t if layout == 0 else t.permute(1, 0, 2)
        attrs = {'hidden_size': H, 'direction': 'bidirectional' if bidir else 'forward', 'layout': layout}
        if kind == 'GRU':
            attrs['linear_before_reset'] = 1
        if kind == 'RNN' and nonlin == 'relu':
            attrs['activations'] = ['Relu'] * nd
        c = lambda t: np.ascontiguousarray(t.numpy()).astype(dtype)
        ins = [c(xin), c(W), c(R), c(Bb), None if lens is None else np.array(lens, dtype=np.int32), c(st_(h0)) if with_h0 else None]
        outs = [c(Y), c(st_(hn))]
        if kind == 'LSTM':
            ins.append(c(st_(c0)) if with_h0 else None)
            outs.append(c(st_(cn)))
        case(name, kind, 14, ins, outs, attrs)
    for kind in ['RNN', 'GRU', 'LSTM']:
        for bidir, layout, lens in [(False, 0, None), (False, 1, [5, 2, 4]), (True, 0, [5, 2, 4]), (True, 1, None),
                                    (True, 1, [2, 5, 3])]:
            run(kind, bidir, layout, lens, name='rnn_torch_%s_b%d_l%d_s%d' % (kind, bidir, layout, lens is not None))
        run(kind, True, 0, [3, 5, 1], dtype=np.float64, name='rnn_torch_%s_f64' % kind)
        run(kind, False, 0, None, dtype=np.float16, name='rnn_torch_%s_f16' % kind, with_h0=False)
    run('RNN', True, 0, [3, 5, 1], nonlin='relu', name='rnn_torch_RNN_relu_bidir')

    # numpy reading of the spec for what torch lacks: clip, other activations, input_forget,
    # linear_before_reset 0, reverse, peepholes.
    rng = np.random.default_rng(1)
    acts = {'Relu': lambda x, a, b: np.maximum(x, 0), 'Tanh': lambda x, a, b: np.tanh(x), 'Sigmoid': lambda x, a, b: 1 / (1 + np.exp(-x)),
            'Affine': lambda x, a, b: a * x + b, 'LeakyRelu': lambda x, a, b: np.where(x >= 0, x, a * x),
            'ThresholdedRelu': lambda x, a, b: np.where(x >= a, x, 0), 'ScaledTanh': lambda x, a, b: a * np.tanh(b * x),
            'HardSigmoid': lambda x, a, b: np.clip(a * x + b, 0, 1), 'Elu': lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
            'Softsign': lambda x, a, b: x / (1 + np.abs(x)), 'Softplus': lambda x, a, b: np.log1p(np.exp(x))}
    uses = {'Affine': (1, 1), 'LeakyRelu': (1, 0), 'ThresholdedRelu': (1, 0), 'ScaledTanh': (1, 1), 'HardSigmoid': (1, 1), 'Elu': (1, 0)}

    def ref(kind, X, W, R, B, h0, c0, P, names, alphas, betas, clip, direction, lbr=0, input_forget=0):
        S_, Bt, I = X.shape
        nd = W.shape[0]
        H = R.shape[2]
        ai, bi = iter([f32(a) for a in alphas]), iter([f32(b) for b in betas])
        fs = []
        for n in names:
            ua, ub = uses.get(n, (0, 0))
            a = next(ai) if ua else 0
            b = next(bi) if ub else 0
            fs.append((lambda n, a, b: (lambda x: acts[n](x, a, b)))(n, a, b))
        nr = {'RNN': 1, 'GRU': 2, 'LSTM': 3}[kind]
        cl = (lambda v: np.clip(v, -f32(clip), f32(clip))) if clip is not None else (lambda v: v)
        Y = np.zeros((S_, nd, Bt, H))
        Yh = np.zeros((nd, Bt, H))
        Yc = np.zeros((nd, Bt, H))
        for d in range(nd):
            f = fs[d * nr:(d + 1) * nr]
            rev = (direction == 'reverse') or d == 1
            h = h0[d].copy()
            c = c0[d].copy() if c0 is not None else None
            Wb, Rb = np.split(B[d], 2)
            for s in range(S_):
                t = S_ - 1 - s if rev else s
                x = X[t]
                if kind == 'RNN':
                    h = f[0](cl(x @ W[d].T + h @ R[d].T + Wb + Rb))
                elif kind == 'GRU':
                    Wz, Wr, Wh = np.split(W[d], 3)
                    Rz, Rr, Rh = np.split(R[d], 3)
                    bz, br, bh = np.split(Wb, 3)
                    rz, rr, rh = np.split(Rb, 3)
                    z = f[0](cl(x @ Wz.T + h @ Rz.T + bz + rz))
                    r = f[0](cl(x @ Wr.T + h @ Rr.T + br + rr))
                    if lbr:
                        hh = f[1](cl(x @ Wh.T + r * (h @ Rh.T + rh) + bh))
                    else:
                        hh = f[1](cl(x @ Wh.T + (r * h) @ Rh.T + rh + bh))
                    h = (1 - z) * hh + z * h
                else:
                    Wi, Wo, Wf, Wc = np.split(W[d], 4)
                    Ri, Ro, Rf, Rc = np.split(R[d], 4)
                    bi_, bo, bf, bc = np.split(Wb + Rb, 4)
                    Pi, Po, Pf = np.split(P[d], 3)
                    i = f[0](cl(x @ Wi.T + h @ Ri.T + Pi * c + bi_))
                    ff = 1 - i if input_forget else f[0](cl(x @ Wf.T + h @ Rf.T + Pf * c + bf))
                    cc = f[1](cl(x @ Wc.T + h @ Rc.T + bc))
                    c = ff * c + i * cc
                    o = f[0](cl(x @ Wo.T + h @ Ro.T + Po * c + bo))
                    h = o * f[2](c)
                Y[t, d] = h
            Yh[d] = h
            Yc[d] = c if c is not None else 0
        return Y, Yh, Yc

    def np_case(name, kind, names, alphas=(), betas=(), clip=None, direction='forward', lbr=0, input_forget=0, opset=14):
        S_, Bt, I, H = 4, 2, 3, 5
        G = {'RNN': 1, 'GRU': 3, 'LSTM': 4}[kind]
        nd = 2 if direction == 'bidirectional' else 1
        X = rng.normal(size=(S_, Bt, I))
        W = rng.normal(size=(nd, G * H, I))
        R = rng.normal(size=(nd, G * H, H))
        B = rng.normal(size=(nd, 2 * G * H))
        h0 = rng.normal(size=(nd, Bt, H))
        c0 = rng.normal(size=(nd, Bt, H)) if kind == 'LSTM' else None
        P = rng.normal(size=(nd, 3 * H)) if kind == 'LSTM' else None
        Y, Yh, Yc = ref(kind, X, W, R, B, h0, c0, P, names, list(alphas), list(betas), clip, direction, lbr, input_forget)
        attrs = {'hidden_size': H, 'direction': direction, 'activations': names}
        if alphas:
            attrs['activation_alpha'] = list(alphas)
        if betas:
            attrs['activation_beta'] = list(betas)
        if clip is not None:
            attrs['clip'] = clip
        if kind == 'GRU':
            attrs['linear_before_reset'] = lbr
        if kind == 'LSTM':
            attrs['input_forget'] = input_forget
        ins = [X, W, R, B, None, h0]
        outs = [Y, Yh]
        if kind == 'LSTM':
            ins += [c0, P]
            outs.append(Yc)
        case(name, kind, opset, ins, outs, attrs)
    np_case('rnn_np_rnn_acts', 'RNN', ['LeakyRelu', 'Affine'], [0.3, 0.7], [0.2], direction='bidirectional')
    np_case('rnn_np_rnn_clip_reverse', 'RNN', ['Softplus'], clip=0.5, direction='reverse')
    np_case('rnn_np_gru_lbr0_bidir', 'GRU', ['HardSigmoid', 'ScaledTanh', 'Sigmoid', 'Elu'], [0.3, 0.9, 1.5], [0.4, 0.6],
            direction='bidirectional')
    np_case('rnn_np_gru7_clip', 'GRU', ['Sigmoid', 'Softsign'], clip=1.0, lbr=1, direction='reverse', opset=7)
    np_case('rnn_np_lstm_input_forget', 'LSTM', ['Sigmoid', 'Tanh', 'ThresholdedRelu'], [0.2], input_forget=1, clip=2.0)
    np_case('rnn_np_lstm_bidir_acts', 'LSTM', ['Sigmoid', 'Relu', 'Tanh', 'HardSigmoid', 'Tanh', 'Softsign'], [0.25], [0.45],
            direction='bidirectional')
    np_case('rnn_np_lstm7_peep', 'LSTM', ['Sigmoid', 'Tanh', 'Tanh'], opset=7)


# ---- quantization and signal ops (from the rnn/quant helper) -------------------------------

def gen_quant_signal(case):
    import torch
    F = torch.nn.functional
    rng = np.random.default_rng(2)

    def sat(v, dt):
        i = np.iinfo(dt)
        return np.clip(v, i.min, i.max).astype(dt)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32) * 50
    s = np.array([0.5, 1.5, 2.0, 0.75], np.float32)
    z = np.array([-3, 0, 10, 127], np.int8)
    case('q_quant_axis_neg', 'QuantizeLinear', 13, [x, s, z], [sat(np.rint(x.astype(np.float64) / s) + z, np.int8)], {'axis': -1})
    case('q_quant_nozp', 'QuantizeLinear', 10, [x, np.float32(0.7)], [sat(np.rint(x.astype(np.float64) / np.float32(0.7)), np.uint8)])
    xi = rng.integers(-100000, 100000, size=(5,)).astype(np.int32)
    case('q_quant_i32', 'QuantizeLinear', 13, [xi, np.float32(1000.0), np.int8(5)], [sat(np.rint(xi / 1000.0) + 5, np.int8)])
    xt = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 254.5, 255.5], np.float32)
    case('q_quant_ties', 'QuantizeLinear', 13, [xt, np.float32(1), np.uint8(0)], [sat(np.rint(xt), np.uint8)])
    xq = rng.integers(-128, 128, size=(3, 2, 2)).astype(np.int8)
    s3 = np.array([0.1, 0.2, 0.3], np.float32)
    z3 = np.array([1, -2, 3], np.int8)
    case('q_deq_axis0', 'DequantizeLinear', 13, [xq, s3, z3],
         [((xq.astype(np.float64) - z3.reshape(3, 1, 1)) * s3.reshape(3, 1, 1)).astype(np.float32)], {'axis': 0})
    case('q_deq_i32', 'DequantizeLinear', 10, [xi, np.float32(0.01)], [(xi.astype(np.float64) * np.float32(0.01)).astype(np.float32)])
    xd = rng.normal(size=(3, 4)).astype(np.float32)
    mn, mx = min(0.0, float(xd.min())), max(0.0, float(xd.max()))
    sc = np.float32((mx - mn) / 255)
    zp = sat(np.rint(-mn / np.float64(sc)), np.uint8)
    case('q_dynquant', 'DynamicQuantizeLinear', 11, [xd],
         [sat(np.rint(xd.astype(np.float64) / sc) + zp, np.uint8), np.array(sc, np.float32), np.array(zp, np.uint8)])

    def conv_ref(x, w, xz, wz, stride, pads, dil, group):
        xf = torch.tensor(x.astype(np.float64) - xz)
        wf = torch.tensor(w.astype(np.float64) - np.asarray(wz, np.float64).reshape(-1, *([1] * (w.ndim - 1))))
        nsp = x.ndim - 2
        padlist = []
        for i in reversed(range(nsp)):
            padlist += [pads[i], pads[i + nsp]]
        xf = F.pad(xf, padlist)
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
        return fn(xf, wf, stride=stride, dilation=dil, groups=group).numpy()
    x = rng.integers(0, 256, size=(2, 4, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, size=(6, 2, 3, 2)).astype(np.int8)
    wz = rng.integers(-5, 5, size=(6,)).astype(np.int8)
    acc = conv_ref(x, w, 7, wz, (2, 1), [1, 0, 2, 1], (1, 2), 2)
    case('q_convint_grp', 'ConvInteger', 10, [x, w, np.uint8(7), wz], [acc.astype(np.int32)],
         {'group': 2, 'strides': [2, 1], 'pads': [1, 0, 2, 1], 'dilations': [1, 2]})
    x1 = rng.integers(-128, 128, size=(1, 3, 9)).astype(np.int8)
    w1 = rng.integers(0, 256, size=(2, 3, 4)).astype(np.uint8)
    case('q_convint_1d_valid', 'ConvInteger', 10, [x1, w1, np.int8(-3), np.uint8(128)],
         [conv_ref(x1, w1, -3, [128], (2,), [0, 0], (1,), 1).astype(np.int32)], {'auto_pad': 'VALID', 'strides': [2]})
    ws = (rng.random(6) * 0.01 + 0.001).astype(np.float32)
    xs, ys = np.float32(0.02), np.float32(0.05)
    bias = rng.integers(-1000, 1000, size=(6,)).astype(np.int32)
    acc = conv_ref(x, w, 7, wz, (2, 1), [1, 0, 2, 1], (1, 2), 2) + bias.reshape(1, 6, 1, 1)
    # float32 requantization, ORT's (ops/quant.c): m = (xs * ws) / ys and acc * m as float32 ops
    yq = sat(np.rint(acc.astype(np.float32) * ((xs * ws) / ys).reshape(1, 6, 1, 1)) + (-10), np.int8)
    case('q_qlconv_perch', 'QLinearConv', 10, [x, xs, np.uint8(7), w, ws, wz, ys, np.int8(-10), bias], [yq],
         {'group': 2, 'strides': [2, 1], 'pads': [1, 0, 2, 1], 'dilations': [1, 2]})
    A = rng.integers(0, 256, size=(2, 1, 3, 5)).astype(np.uint8)
    Bm = rng.integers(-128, 128, size=(4, 5, 2)).astype(np.int8)
    az = rng.integers(0, 256, size=(3,)).astype(np.uint8)
    bz = rng.integers(-128, 128, size=(2,)).astype(np.int8)
    case('q_mmint_rowcol', 'MatMulInteger', 10, [A, Bm, az, bz],
         [np.matmul(A.astype(np.int64) - az.reshape(3, 1), Bm.astype(np.int64) - bz).astype(np.int32)])
    A1 = rng.integers(0, 256, size=(5,)).astype(np.uint8)
    case('q_mmint_1d', 'MatMulInteger', 10, [A1, Bm], [np.matmul(A1.astype(np.int64), Bm.astype(np.int64)).astype(np.int32)])
    A8 = rng.integers(-128, 128, size=(3, 4)).astype(np.int8)
    Bq = rng.integers(-128, 128, size=(4, 5)).astype(np.int8)
    asc = np.float32(0.03)
    bsc = (rng.random(5) * 0.02).astype(np.float32)
    bzz = rng.integers(-3, 3, size=(5,)).astype(np.int8)
    acc = np.matmul(A8.astype(np.int64) - 2, Bq.astype(np.int64) - bzz)
    yy = sat(np.rint(acc.astype(np.float32) * ((asc * bsc) / np.float32(0.1))) + 3, np.int8)
    case('q_qlmm_int8_percol', 'QLinearMatMul', 10, [A8, asc, np.int8(2), Bq, bsc, bzz, np.float32(0.1), np.int8(3)], [yy])

    # DFT / STFT / windows / mel
    xr = rng.normal(size=(2, 6, 3, 1))
    xc = rng.normal(size=(2, 6, 3, 2))
    c = xc[..., 0] + 1j * xc[..., 1]
    st = lambda z: np.stack([z.real, z.imag], -1)
    case('s_dft_onesided', 'DFT', 17, [xr], [st(np.fft.rfft(xr[..., 0], axis=1))], {'axis': 1, 'onesided': 1})
    case('s_dft_len_pad', 'DFT', 17, [xr.astype(np.float32), np.int64(9)], [st(np.fft.fft(xr.astype(np.float32)[..., 0], n=9, axis=1)).astype(np.float32)],
         {'axis': 1})
    case('s_dft_len_trunc_c', 'DFT', 17, [xc, np.int32(2)], [st(np.fft.fft(c, n=2, axis=2))], {'axis': 2})
    case('s_dft_inv_c_ax2', 'DFT', 17, [xc], [st(np.fft.ifft(c, axis=2))], {'axis': 2, 'inverse': 1})
    case('s_dft_neg_axis', 'DFT', 17, [xc], [st(np.fft.fft(c, axis=1))], {'axis': -3})
    xh = xr.astype(np.float16)
    case('s_dft_f16', 'DFT', 17, [xh], [st(np.fft.fft(xh.astype(np.float64)[..., 0], axis=1)).astype(np.float16)], {'axis': 1})
    sig = rng.normal(size=(2, 20, 2))
    win = np.hanning(6)
    zz = sig[..., 0] + 1j * sig[..., 1]
    fr = (20 - 6) // 4 + 1
    o = np.stack([np.fft.fft(zz[:, f * 4:f * 4 + 6] * win, axis=1) for f in range(fr)], 1)
    case('s_stft_complex', 'STFT', 17, [sig, np.int64(4), win, np.int64(6)], [st(o)], {'onesided': 0})
    sigr = rng.normal(size=(1, 33, 1)).astype(np.float32)
    o = np.stack([np.fft.rfft(sigr[:, f * 5:f * 5 + 8, 0].astype(np.float64), axis=1) for f in range((33 - 8) // 5 + 1)], 1)
    case('s_stft_real_noframe_window', 'STFT', 17, [sigr, np.int32(5), None, np.int32(8)], [st(o).astype(np.float32)])
    n = np.arange(7)
    case('s_hann_f64', 'HannWindow', 17, [np.int64(7)], [0.5 - 0.5 * np.cos(2 * np.pi * n / 7)], {'output_datatype': 11})
    case('s_hamming_sym', 'HammingWindow', 17, [np.int32(7)], [(25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / 6)).astype(np.float32)],
         {'periodic': 0})
    case('s_blackman_periodic', 'BlackmanWindow', 17, [np.int64(9)],
         [(0.42 - 0.5 * np.cos(2 * np.pi * np.arange(9) / 9) + 0.08 * np.cos(4 * np.pi * np.arange(9) / 9)).astype(np.float32)])
    case('s_blackman_1', 'BlackmanWindow', 17, [np.int32(1)], [np.ones(1, np.float32)], {'periodic': 0})

    def mel(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        nsb = dft_length // 2 + 1
        fb = np.arange(0, num_mel_bins + 2)
        lo = 2595 * np.log10(1 + lower_edge_hertz / 700)
        hi = 2595 * np.log10(1 + upper_edge_hertz / 700)
        step = (hi - lo) / fb.shape[0]
        fb = fb * step + lo
        fb = 700 * (np.power(10, (fb / 2595)) - 1)
        fb = ((dft_length + 1) * fb) // sample_rate
        fb = fb.astype(int)
        o = np.zeros((nsb, num_mel_bins))
        for i in range(num_mel_bins):
            lo_, cc, hi_ = fb[i], fb[i + 1], fb[i + 2]
            if cc - lo_ == 0:
                o[cc, i] = 1
            else:
                for j in range(lo_, cc + 1):
                    o[j, i] = float(j - lo_) / float(cc - lo_)
            if hi_ - cc > 0:
                for j in range(cc, hi_):
                    o[j, i] = float(hi_ - j) / float(hi_ - cc)
        return o
    case('s_mel_f64', 'MelWeightMatrix', 17, [np.int64(20), np.int64(512), np.int64(16000), np.float64(125.0), np.float64(7600.0)],
         [mel(20, 512, 16000, 125.0, 7600.0)], {'output_datatype': 11})


# ---- misc: text, NMS, RoiAlign, random with certain outcomes ----------------------------------

def gen_misc(case, torch):
    f = lambda a: np.array(a, dtype=np.float32)
    xs = np.array(['Éclair', 'straße', 'ÀÖ×Ø', 'MONDAY', 'naïve 😀'], dtype=object)
    case('sn_utf8_lower', 'StringNormalizer', 10, [xs], [np.array(['éclair', 'straße', 'àö×ø', 'naïve 😀'], dtype=object)],
         {'case_change_action': 'LOWER', 'stopwords': ['monday']})
    case('sn_utf8_upper_insensitive', 'StringNormalizer', 10, [xs], [np.array(['STRAßE', 'ÀÖ×Ø', 'MONDAY', 'NAÏVE 😀'], dtype=object)],
         {'case_change_action': 'UPPER', 'stopwords': ['éclair'], 'is_case_sensitive': 0})
    case('sn_empty_2d', 'StringNormalizer', 10, [np.array([['monday', 'Monday']], dtype=object)], [np.array([['']], dtype=object)],
         {'stopwords': ['monday']})
    X = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], dtype=np.int32)
    common = dict(max_gram_length=2, max_skip_count=0, min_gram_length=2, ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                  pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])
    case('tfidf_idf_weights', 'TfIdfVectorizer', 9, [X], [f([[0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, .5, 0, .7]])],
         dict(mode='IDF', weights=[.1, .2, .3, .4, .5, .6, .7], **common))
    X = np.array([[1, 1, 3, 3, 3, 7], [5, 6, 7, 8, 5, 6]], dtype=np.int64)
    case('tfidf_tfidf_weights', 'TfIdfVectorizer', 9, [X], [f([[0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1.0, .6, .7]])],
         dict(mode='TFIDF', weights=[.1, .2, .3, .4, .5, .6, .7], **common))
    Xs = np.array(['a', 'b', 'c', 'a', 'b', 'x', 'c'], dtype=object)
    case('tfidf_strings_skip', 'TfIdfVectorizer', 9, [Xs], [f([2, 2, 2, 2, 1])],
         dict(mode='TF', max_gram_length=2, max_skip_count=1, min_gram_length=1, ngram_counts=[0, 3], ngram_indexes=[2, 1, 0, 3, 4],
              pool_strings=['a', 'b', 'c', 'a', 'b', 'a', 'c']))
    boxes = f([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6]]])
    scores = f([[[0.9, 0.8, 0.7]]])
    case('nms_no_score_threshold', 'NonMaxSuppression', 11, [boxes, scores, np.array([3], dtype=np.int64), f([0.5])],
         [np.array([[0, 0, 0], [0, 0, 2]], dtype=np.int64)])
    case('nms_no_max_output', 'NonMaxSuppression', 11, [boxes, scores], [np.zeros((0, 3), dtype=np.int64)])
    case('nms_center_point', 'NonMaxSuppression', 11,
         [f([[[0.5, 0.5, 1, 1], [0.5, 0.6, 1, 1], [0.5, 5.5, 1, 1]]]), scores, np.array([3], dtype=np.int64), f([0.5])],
         [np.array([[0, 0, 0], [0, 0, 2]], dtype=np.int64)], {'center_point_box': 1})
    case('multinomial_certain', 'Multinomial', 7, [f(np.log([[0.0, 1.0, 0.0], [1, 0, 0]]))], [np.array([[1] * 5, [0] * 5], np.int32)],
         {'sample_size': 5})
    case('bernoulli_certain', 'Bernoulli', 15, [f([[0, 1, 1, 0]])], [np.array([[0, 1, 1, 0]], np.int64)], {'dtype': 7})
    case('randomuniformlike_degenerate', 'RandomUniformLike', 1, [np.zeros((2, 3), np.float64)], [np.full((2, 3), 2.5)],
         {'low': 2.5, 'high': 2.5})
    case('randomnormal_scale0', 'RandomNormal', 1, [], [np.full((2, 2), -1.5, np.float32)], {'shape': [2, 2], 'mean': -1.5, 'scale': 0.0})


# ---- edge shapes: scalars, empty tensors, high ranks, odd broadcasting -----------------------

def gen_edges(case):
    r = Rand(99)
    fl = lambda *sh: r.floats('float32', sh)
    d = lambda a: np.asarray(a).astype(np.float64)
    e03 = np.zeros((0, 3), np.float32)
    s0 = np.array(1.5, np.float32)
    x35 = fl(3, 5)
    case('edge_add_scalar', 'Add', 14, [x35, s0], [(d(x35) + 1.5).astype(np.float32)])
    case('edge_add_scalar_scalar', 'Add', 14, [s0, np.array(-4.0, np.float32)], [np.array(-2.5, np.float32)])
    case('edge_add_empty_bcast', 'Add', 14, [e03, fl(1, 3)], [e03])
    case('edge_add_empty_to_empty', 'Mul', 14, [np.zeros((2, 0, 1), np.int32), np.zeros((3,), np.int32)], [np.zeros((2, 0, 3), np.int32)])
    a, b = fl(3, 1, 7), fl(5, 1)
    case('edge_add_two_sided_bcast', 'Sub', 14, [a, b], [(d(a) - d(b)).astype(np.float32)])
    a, b = fl(2, 1, 3, 1, 4), fl(5, 1)
    case('edge_add_rank5_bcast', 'Add', 14, [a, b], [(d(a) + d(b)).astype(np.float32)])
    c, p, q = r.of('bool', (1, 4, 1)), fl(3, 1, 1), fl(5)
    case('edge_where_three_way_bcast', 'Where', 16, [c, p, q], [np.where(c, p, q)])
    case('edge_where_empty', 'Where', 16, [np.zeros((0, 3), bool), e03, fl(3)], [e03])
    ins = [fl(2, 3, 4), fl(3, 1), fl(4), fl(1, 1, 1)]
    case('edge_max_4_inputs', 'Max', 13, ins, [np.maximum.reduce(np.broadcast_arrays(*ins))])
    case('edge_min_1_input', 'Min', 13, [x35], [x35])
    case('edge_sum_1_input', 'Sum', 13, [x35], [x35])
    case('edge_mean_4_inputs', 'Mean', 13, ins, [(sum(d(t) for t in ins) / 4).astype(np.float32)])
    case('edge_exp_scalar', 'Exp', 13, [s0], [np.array(np.exp(1.5), np.float32)])
    case('edge_relu_empty', 'Relu', 14, [np.zeros((0, 4), np.float32)], [np.zeros((0, 4), np.float32)])
    case('edge_cast_empty', 'Cast', 13, [np.zeros((2, 0), np.float32)], [np.zeros((2, 0), object)], {'to': TensorProto.STRING})
    case('edge_sign_zero', 'Sign', 13, [np.float32([-0.0, 0.0, -1e-40, 1e-40])], [np.float32([0, 0, -1, 1])])
    case('edge_neg_zero', 'Neg', 13, [np.float32([0.0, -0.0])], [np.float32([-0.0, 0.0])])
    # Concat / Split / Slice / Gather
    case('edge_concat_one', 'Concat', 13, [x35], [x35], {'axis': -1})
    case('edge_concat_empty_mid', 'Concat', 13, [x35, np.zeros((3, 0), np.float32), x35], [np.concatenate([x35, x35], 1)], {'axis': -1})
    x6 = fl(2, 6)
    case('edge_split_three_equal', 'Split', 13, [x6], [x6[:, 0:2], x6[:, 2:4], x6[:, 4:6]], {'axis': 1})
    x5 = fl(2, 3, 4, 5, 6)
    case('edge_slice_all_axes_steps', 'Slice', 13, [x5, i64(-1, 0, 1, 4, 5), i64(-100, 3, 100, 0, -7), i64(0, 1, 2, 3, 4),
                                                       i64(-1, 2, 2, -2, -3)], [x5[::-1, 0:3:2, 1::2, 4:0:-2, 5::-3]])
    case('edge_slice_unsorted_neg_axes', 'Slice', 13, [x5, i64(1, 2), i64(5, 4), i64(-1, 1)], [x5[:, 2:4, :, :, 1:5]])
    case('edge_transpose_rank5', 'Transpose', 13, [x5], [x5.transpose(4, 1, 3, 0, 2)], {'perm': [4, 1, 3, 0, 2]})
    case('edge_transpose_default_reverse', 'Transpose', 13, [x5], [x5.transpose()])
    case('edge_gather_scalar_idx_axis0', 'Gather', 13, [x35, np.array(-3, np.int64)], [x35[0]])
    case('edge_gather_empty_idx', 'Gather', 13, [x35, np.zeros((0,), np.int64)], [np.zeros((3, 0), np.float32)], {'axis': 1})
    case('edge_gather_2d_idx', 'Gather', 13, [x5, np.array([[0, 3], [3, 2]], np.int32)], [x5[:, :, [[0, 3], [3, 2]]]], {'axis': 2})
    gi = r.integers(0, 3, (2, 5)).astype(np.int64)
    case('edge_gatherelements_axis0', 'GatherElements', 13, [x35, gi], [np.take_along_axis(x35, gi, 0)], {'axis': 0})
    si = np.array([[2, 0, 1, 2, 0]], np.int64)
    u = fl(1, 5)
    o = x35.copy()
    o[si[0], np.arange(5)] = u[0]
    case('edge_scatterelements_axis_neg2', 'ScatterElements', 13, [x35, si, u], [o], {'axis': -2})
    t3 = fl(2, 1, 3)
    case('edge_tile_3d', 'Tile', 13, [t3, i64(2, 4, 1)], [np.tile(t3, (2, 4, 1))])
    e31 = fl(3, 1)
    case('edge_expand_rank_up', 'Expand', 13, [e31, i64(2, 1, 1, 4)], [np.broadcast_to(e31, (2, 1, 3, 4)).copy()])
    case('edge_unsqueeze_scalar', 'Unsqueeze', 13, [s0, i64(0)], [s0.reshape(1)])
    case('edge_flatten_axis_rank', 'Flatten', 13, [x5], [x5.reshape(-1, 1)], {'axis': 5})
    case('edge_shape_scalar', 'Shape', 15, [s0], [np.zeros(0, np.int64)])
    case('edge_size_empty', 'Size', 13, [e03], [np.array(0, np.int64)])
    case('edge_identity_empty', 'Identity', 16, [e03], [e03])
    case('edge_nonzero_all_zero', 'NonZero', 13, [np.zeros((2, 3), np.int32)], [np.zeros((2, 0), np.int64)])
    case('edge_onehot_depth1', 'OneHot', 11, [i64(0, -1, 1), i64(1), np.float32([0, 1])], [np.float32([[1], [1], [0]])])
    case('edge_trilu_k_beyond', 'Trilu', 14, [x35, i64(7)], [np.zeros_like(x35)])
    case('edge_pad_zero_pads', 'Pad', 13, [x35, i64(0, 0, 0, 0)], [x35])
    case('edge_pad_1d_reflect', 'Pad', 13, [np.float32([1, 2, 3]), i64(2, 2)], [np.float32([3, 2, 1, 2, 3, 2, 1])], {'mode': 'reflect'})
    # reductions and friends
    x = fl(3, 5, 7)
    case('edge_reducesum_all_nokeep', 'ReduceSum', 13, [x], [np.array(d(x).sum(), np.float32)], {'keepdims': 0})
    case('edge_reducemax_unsorted_axes', 'ReduceMax', 13, [x], [x.max((0, 2))], {'axes': [2, 0], 'keepdims': 0})
    case('edge_reducemean_neg_axes', 'ReduceMean', 13, [x], [d(x).mean((0, 2), keepdims=True).astype(np.float32)], {'axes': [-1, -3]})
    case('edge_reducesum_empty_out', 'ReduceSum', 13, [np.zeros((0, 3), np.float32), i64(1)], [np.zeros((0, 1), np.float32)])
    case('edge_reduceprod_empty_all', 'ReduceProd', 13, [np.zeros((0, 3), np.float32)], [np.ones((1, 1), np.float32)])
    case('edge_softmax_size1_axis', 'Softmax', 13, [fl(3, 1)], [np.ones((3, 1), np.float32)])
    case('edge_softmax_empty', 'Softmax', 13, [np.zeros((0, 4), np.float32)], [np.zeros((0, 4), np.float32)])
    case('edge_logsoftmax_large', 'LogSoftmax', 13, [np.float32([[1000, 0, -1000], [1e30, 1e30, 0]])],
         [np.float32([[0, -1000, -2000], [-np.log(2), -np.log(2), -1e30]])])
    case('edge_argmax_scalar_row', 'ArgMax', 13, [np.float32([[5]])], [np.int64([[0]])], {'axis': 1})
    case('edge_cumsum_1d', 'CumSum', 14, [np.int64([1, 2, 3, 2 ** 60]), np.array(0, np.int64)], [np.int64([1, 3, 6, 2 ** 60 + 6])])
    case('edge_topk_1d_k1', 'TopK', 11, [np.float32([1, 9, 3]), i64(1)], [np.float32([9]), i64(1)])
    case('edge_matmul_scalar_out', 'MatMul', 13, [np.float32([1, 2, 3]), np.float32([4, 5, 6])], [np.array(32, np.float32)])
    case('edge_einsum_scalar_out', 'Einsum', 12, [x35], [np.array(d(x35).sum(), np.float32)], {'equation': 'ij->'})
    xa, xb, xc = fl(2), fl(3), fl(4)
    case('edge_einsum_outer_3', 'Einsum', 12, [xa, xb, xc], [np.einsum('i,j,k->kji', d(xa), d(xb), d(xc)).astype(np.float32)],
         {'equation': 'i,j,k->kji'})
    case('edge_layernorm_axis0', 'LayerNormalization', 17, [x, np.ones(x.shape, np.float32)],
         [((d(x) - d(x).mean()) / np.sqrt(d(x).var() + f32(1e-5))).astype(np.float32)], {'axis': 0})
    case('edge_instnorm_hw1', 'InstanceNormalization', 6, [fl(2, 3, 1), np.float32([1, 2, 3]), np.float32([4, 5, 6])],
         [np.broadcast_to(np.float32([4, 5, 6]).reshape(1, 3, 1), (2, 3, 1)).copy()])
    case('edge_lrn_c1', 'LRN', 13, [np.float32([[[[2.0]]]])], [np.float32([[[[2.0 / (1 + f32(1e-4) * 4) ** 0.75]]]])], {'size': 1})
    xc4 = fl(3, 2, 4, 4)
    wc = fl(5, 2, 1, 1)
    case('edge_conv_1x1', 'Conv', 11, [xc4, wc], [np.einsum('nchw,oc->nohw', d(xc4), d(wc)[:, :, 0, 0]).astype(np.float32)])
    xb1 = fl(2, 1, 3)
    case('edge_bn_c1', 'BatchNormalization', 15, [xb1, np.float32([2]), np.float32([1]), np.float32([0.5]), np.float32([4])],
         [((d(xb1) - 0.5) / np.sqrt(4 + f32(1e-5)) * 2 + 1).astype(np.float32)])
    # NaN and infinities through ops whose numpy reference propagates them
    nan3 = np.float32([np.nan, 1.0, -2.0])
    case('edge_max_nan', 'Max', 13, [nan3, np.float32([0.0, np.nan, -3.0])], [np.float32([np.nan, np.nan, -2.0])])
    case('edge_min_nan', 'Min', 13, [nan3, np.float32([0.0, np.nan, -3.0])], [np.float32([np.nan, np.nan, -3.0])])
    case('edge_clip_nan', 'Clip', 13, [nan3, np.float32(-1), np.float32(0.5)], [np.float32([np.nan, 0.5, -1])])
    case('edge_relu_nan', 'Relu', 14, [nan3], [np.float32([np.nan, 1.0, 0.0])])
    case('edge_leakyrelu_nan', 'LeakyRelu', 16, [nan3], [np.float32([np.nan, 1.0, -2.0 * f32(0.01)])])
    case('edge_softmax_neg_inf', 'Softmax', 13, [np.float32([[-np.inf, 0, 1], [-np.inf, 2, -np.inf]])],
         [np.float32([[0, 1 / (1 + np.e), np.e / (1 + np.e)], [0, 1, 0]])])
    case('edge_logsoftmax_neg_inf', 'LogSoftmax', 13, [np.float32([[-np.inf, 0, 0]])], [np.float32([[-np.inf, -np.log(2), -np.log(2)]])])
    case('edge_reducelogsumexp_neg_inf', 'ReduceLogSumExp', 13, [np.float32([[-np.inf, 0], [-np.inf, -np.inf]])],
         [np.float32([0, -np.inf])], {'axes': [1], 'keepdims': 0})
    case('edge_cast_f64_to_f32_overflow', 'Cast', 13, [np.float64([1e300, -1e300, 1e-300, np.nan])],
         [np.float32([np.inf, -np.inf, 0, np.nan])], {'to': TensorProto.FLOAT})
    case('edge_cast_special_to_f16', 'Cast', 13, [np.float32([np.inf, -np.inf, np.nan, 1e-6, -6e-5])],
         [np.float32([np.inf, -np.inf, np.nan, 1e-6, -6e-5]).astype(np.float16)], {'to': TensorProto.FLOAT16})
    case('edge_cast_special_to_bf16', 'Cast', 13, [np.float32([np.inf, -np.inf, np.nan, 2.0 ** 100, -(2.0 ** -100)])],
         [BF16(np.float32([np.inf, -np.inf, np.nan, 2.0 ** 100, -(2.0 ** -100)]))], {'to': TensorProto.BFLOAT16})
    case('edge_cast_int_extremes_to_str', 'Cast', 13, [np.array([-2 ** 63, 2 ** 63 - 1, 0], np.int64)],
         [S('-9223372036854775808', '9223372036854775807', '0')], {'to': TensorProto.STRING})
    case('edge_cast_u64_to_str', 'Cast', 13, [np.array([2 ** 64 - 1, 2 ** 63], np.uint64)],
         [S('18446744073709551615', '9223372036854775808')], {'to': TensorProto.STRING})
    # Conv whose padding exceeds the kernel: border outputs are the bias alone.
    xc = fl(1, 2, 3, 3)
    wc2 = fl(2, 2, 2, 2)
    bc = np.float32([0.5, -1.5])
    xp = np.pad(d(xc), ((0, 0), (0, 0), (3, 3), (3, 3)))
    yc = np.zeros((1, 2, 8, 8))
    for o in range(2):
        for i in range(8):
            for j in range(8):
                yc[0, o, i, j] = (xp[0, :, i:i + 2, j:j + 2] * d(wc2[o])).sum() + bc[o]
    case('edge_conv_pads_beyond_kernel', 'Conv', 11, [xc, wc2, bc], [yc.astype(np.float32)], {'pads': [3, 3, 3, 3]})
    case('edge_globalavgpool_1x1', 'GlobalAveragePool', 1, [xb1.reshape(2, 1, 3, 1)], [d(xb1).mean(2, keepdims=True).reshape(2, 1, 1, 1).astype(np.float32)])


# ---- control flow, optionals, unpooling and roi ops ------------------------------------------

def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def gen_more(case):
    r = Rand(123)
    FL, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    a = r.floats('float32', (3,))
    b = r.floats('float32', (3,))
    ext = [('a', a), ('b', b)]
    # If: branches read a and b from the outer scope.
    then_g = helper.make_graph([helper.make_node('Add', ['a', 'b'], ['t'])], 'then', [], [_vi('t', FL, [3])])
    else_g = helper.make_graph([helper.make_node('Sub', ['a', 'b'], ['e'])], 'else', [], [_vi('e', FL, [3])])
    for cond in [True, False]:
        want = (a.astype(np.float64) + b) if cond else (a.astype(np.float64) - b)
        case('cf_if_%s' % str(cond).lower(), 'If', 16, [np.array(cond)], [want.astype(np.float32)],
             {'then_branch': then_g, 'else_branch': else_g}, extra_inputs=ext)
    # Loop: v += a each iteration, stop when i >= 2 (cond) or after M; scan output of v.
    body = helper.make_graph(
        [helper.make_node('Add', ['v', 'a'], ['v_out']),
         helper.make_node('Constant', [], ['lim'], value=numpy_helper.from_array(np.array(2, np.int64))),
         helper.make_node('Less', ['i', 'lim'], ['c_out']),
         helper.make_node('Identity', ['v_out'], ['scan'])],
        'body', [_vi('i', I64, []), _vi('c', BOOL, []), _vi('v', FL, [3])],
        [_vi('c_out', BOOL, []), _vi('v_out', FL, [3]), _vi('scan', FL, [3])])
    v0 = r.floats('float32', (3,))
    ad = a.astype(np.float64)
    for M, tag in [(5, 'cond_stops'), (2, 'trip_count_stops'), (0, 'zero_trips'), (None, 'no_trip_count')]:
        n = 3 if M is None else min(M, 3)
        want_v = (v0 + n * ad).astype(np.float32)
        want_s = np.stack([(v0 + (k + 1) * ad).astype(np.float32) for k in range(n)]) if n else np.zeros((0, 3), np.float32)
        case('cf_loop_%s' % tag, 'Loop', 16, [None if M is None else np.array(M, np.int64), np.array(True), v0],
             [want_v, want_s], {'body': body}, extra_inputs=[('a', a)])
    # Loop with cond input absent: runs M times.
    case('cf_loop_no_cond', 'Loop', 13, [np.array(1, np.int64), None, v0], [(v0 + ad).astype(np.float32), (v0 + ad).astype(np.float32)[None]],
         {'body': body}, extra_inputs=[('a', a)])
    # Scan: running sum; directions and axes.
    sb = helper.make_graph([helper.make_node('Add', ['s', 'x'], ['s_out']), helper.make_node('Identity', ['s_out'], ['y'])],
                           'scan_body', [_vi('s', FL, [3]), _vi('x', FL, [3])], [_vi('s_out', FL, [3]), _vi('y', FL, [3])])
    s0 = r.floats('float32', (3,))
    X = r.floats('float32', (4, 3))
    cs = np.cumsum(np.concatenate([s0[None].astype(np.float64), X]), 0)[1:]
    case('cf_scan_sum', 'Scan', 16, [s0, X], [cs[-1].astype(np.float32), cs.astype(np.float32)], {'body': sb, 'num_scan_inputs': 1})
    csr = np.cumsum(np.concatenate([s0[None].astype(np.float64), X[::-1]]), 0)[1:]
    case('cf_scan_reverse_in_out', 'Scan', 11, [s0, X], [csr[-1].astype(np.float32), csr[::-1].astype(np.float32)],
         {'body': sb, 'num_scan_inputs': 1, 'scan_input_directions': [1], 'scan_output_directions': [1]})
    case('cf_scan_axes', 'Scan', 11, [s0, X.T.copy()], [cs[-1].astype(np.float32), cs.T.astype(np.float32)],
         {'body': sb, 'num_scan_inputs': 1, 'scan_input_axes': [1], 'scan_output_axes': [-1]})
    # SequenceMap: each item times a tensor.
    mb = helper.make_graph([helper.make_node('Mul', ['x', 'w'], ['y'])], 'map_body',
                           [_vi('x', FL, None), _vi('w', FL, [3])], [_vi('y', FL, None)])
    s1, s2 = r.floats('float32', (2, 3)), r.floats('float32', (3,))
    w = r.floats('float32', (3,))
    case('cf_sequencemap', 'SequenceMap', 17, [[s1, s2], w],
         [[(s1.astype(np.float64) * w).astype(np.float32), (s2.astype(np.float64) * w).astype(np.float32)]], {'body': mb})
    # Optionals and empty sequences
    case('opt_optional_tensor', 'Optional', 15, [a], [Opt(a)])
    case('opt_optional_seq', 'Optional', 15, [[a, b]], [Opt([a, b])])
    case('opt_optional_empty', 'Optional', 15, [], [Opt(None, like=np.zeros(0, np.int64))],
         {'type': helper.make_tensor_type_proto(I64, None)})
    case('opt_has_element', 'OptionalHasElement', 15, [Opt(a)], [np.array(True)])
    case('opt_has_element_empty', 'OptionalHasElement', 15, [Opt(None, like=np.zeros(0, np.int32))], [np.array(False)])
    case('opt_get_element', 'OptionalGetElement', 15, [Opt(b)], [b])
    case('opt_get_element_seq', 'OptionalGetElement', 15, [Opt([a, b])], [[a, b]])
    case('seq_empty_i64', 'SequenceEmpty', 11, [], [Seq([], 'int64')], {'dtype': TensorProto.INT64})
    case('seq_empty_default', 'SequenceEmpty', 11, [], [Seq([], 'float32')])
    case('seq_insert_into_empty', 'SequenceInsert', 11, [Seq([], 'float32'), a], [[a]])
    case('seq_length_empty', 'SequenceLength', 11, [Seq([], 'int32')], [np.array(0, np.int64)])
    case('random_uniform_degenerate', 'RandomUniform', 1, [], [np.full((2, 3), 0.75, np.float64)],
         {'shape': [2, 3], 'low': 0.75, 'high': 0.75, 'dtype': TensorProto.DOUBLE})

    # MaxUnpool: from MaxPool's indices.
    x = r.floats('float32', (1, 2, 4, 4))
    pooled = x.reshape(1, 2, 2, 2, 2, 2).max((3, 5))
    flat = np.arange(32).reshape(1, 2, 4, 4)
    idx = np.zeros((1, 2, 2, 2), np.int64)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                blk = x[0, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
                k = np.argmax(blk)
                idx[0, c, i, j] = flat[0, c, 2 * i + k // 2, 2 * j + k % 2]
    y = np.zeros(32, np.float32)
    y[idx.ravel()] = pooled.ravel()
    case('maxunpool_default_shape', 'MaxUnpool', 11, [pooled, idx], [y.reshape(1, 2, 4, 4)], {'kernel_shape': [2, 2], 'strides': [2, 2]})
    # With output_shape the indices still address the default-shape tensor, which sits at the
    # output's origin (as in the official test_maxunpool_export_with_output_shape).
    case('maxunpool_output_shape', 'MaxUnpool', 11, [pooled, idx, i64(1, 2, 5, 6)],
         [np.pad(y.reshape(1, 2, 4, 4), ((0, 0), (0, 0), (0, 1), (0, 2)))],
         {'kernel_shape': [2, 2], 'strides': [2, 2]})

    # MaxRoiPool (Caffe's ROI pooling: rounded roi corners, floor/ceil bins).
    X = r.floats('float32', (2, 2, 6, 7))
    rois = np.float32([[0, 0.6, 1.2, 8.8, 6.2], [1, 2.2, 0.4, 5.1, 4.9], [0, 9.0, 9.0, 12.0, 12.0]])

    def maxroipool(X, rois, ph_, pw_, scale):
        H, W = X.shape[2:]
        o = np.zeros((len(rois), X.shape[1], ph_, pw_), np.float32)
        rnd = lambda v: np.floor(v + 0.5) if v >= 0 else -np.floor(-v + 0.5)
        for n, (bi, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
            sw, sh, ew, eh = (int(rnd(v * f32(scale))) for v in (x1, y1, x2, y2))
            rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
            bh, bw = rh / ph_, rw / pw_
            for i in range(ph_):
                for j in range(pw_):
                    hs = min(max(int(np.floor(i * bh)) + sh, 0), H)
                    he = min(max(int(np.ceil((i + 1) * bh)) + sh, 0), H)
                    ws = min(max(int(np.floor(j * bw)) + sw, 0), W)
                    we = min(max(int(np.ceil((j + 1) * bw)) + sw, 0), W)
                    if he > hs and we > ws:
                        o[n, :, i, j] = X[int(bi), :, hs:he, ws:we].max((1, 2))
        return o
    # pooled sizes 2 and 4: bin edges are exact binary fractions (no float-vs-double floor/ceil ties)
    case('maxroipool_scale', 'MaxRoiPool', 1, [X, rois], [maxroipool(X, rois, 2, 4, 0.75)], {'pooled_shape': [2, 4], 'spatial_scale': 0.75})
    case('maxroipool_default_scale', 'MaxRoiPool', 1, [X, rois[:2]], [maxroipool(X, rois[:2], 4, 2, 1.0)], {'pooled_shape': [4, 2]})

    # RoiAlign, average mode (bilinear samples; half_pixel and the legacy output_half_pixel).
    def roialign(X, rois, bidx, oh, ow, sr, scale, half):
        H, W = X.shape[2:]
        Xd = X.astype(np.float64)
        o = np.zeros((len(rois), X.shape[1], oh, ow))
        off = 0.5 if half else 0.0
        for n in range(len(rois)):
            x1, y1, x2, y2 = (float(v) * f32(scale) - off for v in rois[n])
            rw, rh = x2 - x1, y2 - y1
            if not half:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / oh, rw / ow
            gh = sr if sr > 0 else int(np.ceil(rh / oh))
            gw = sr if sr > 0 else int(np.ceil(rw / ow))
            cnt = max(gh * gw, 1)
            img = Xd[int(bidx[n])]
            for i in range(oh):
                for j in range(ow):
                    acc = np.zeros(X.shape[1])
                    for iy in range(gh):
                        y = y1 + i * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            xx = x1 + j * bw + (ix + 0.5) * bw / gw
                            if y < -1.0 or y > H or xx < -1.0 or xx > W:
                                continue
                            yy, xc = max(y, 0.0), max(xx, 0.0)
                            yl, xl = int(yy), int(xc)
                            if yl >= H - 1:
                                yh = yl = H - 1
                                yy = float(yl)
                            else:
                                yh = yl + 1
                            if xl >= W - 1:
                                xh = xl = W - 1
                                xc = float(xl)
                            else:
                                xh = xl + 1
                            ly, lx = yy - yl, xc - xl
                            hy, hx = 1 - ly, 1 - lx
                            acc += hy * hx * img[:, yl, xl] + hy * lx * img[:, yl, xh] + ly * hx * img[:, yh, xl] + ly * lx * img[:, yh, xh]
                    o[n, :, i, j] = acc / cnt
        return o.astype(np.float32)
    rois = np.float32([[0.5, 1.0, 5.5, 4.0], [1.2, 0.2, 3.3, 5.8], [-1.5, -0.5, 2.0, 1.0], [4.0, 3.0, 4.2, 3.1]])
    bidx = i64(0, 1, 1, 0)
    for half, sr, tag in [(1, 2, 'half_pixel_sr2'), (1, 0, 'half_pixel_adaptive'), (0, 2, 'output_half_pixel_sr2'),
                          (0, 0, 'output_half_pixel_adaptive')]:
        case('roialign_avg_%s' % tag, 'RoiAlign', 16, [X, rois, bidx], [roialign(X, rois, bidx, 3, 2, sr, 0.8, half)],
             {'output_height': 3, 'output_width': 2, 'sampling_ratio': sr, 'spatial_scale': 0.8,
              'coordinate_transformation_mode': 'half_pixel' if half else 'output_half_pixel'})
    case('roialign10_avg', 'RoiAlign', 10, [X, rois, bidx], [roialign(X, rois, bidx, 2, 2, 2, 1.0, 0)],
         {'output_height': 2, 'output_width': 2, 'sampling_ratio': 2})


# ---- more geometry: 3-D/5-D convs, pools, resize; NMS; einsum ---------------------------------

def gen_more_nn(case, torch):
    F = torch.nn.functional
    T = lambda v: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))
    r = Rand(4242)
    fl = lambda *sh: r.floats('float32', sh)
    x = fl(1, 4, 5, 4, 6)
    w = fl(6, 2, 2, 3, 2)
    b = fl(6)
    ref = F.conv3d(T(x), T(w), T(b), stride=(2, 1, 2), padding=(1, 1, 0), dilation=(1, 1, 2), groups=2).numpy()
    case('conv3d_groups_dilations', 'Conv', 11, [x, w, b], [ref.astype(np.float32)],
         {'group': 2, 'strides': [2, 1, 2], 'pads': [1, 1, 0, 1, 1, 0], 'dilations': [1, 1, 2]})
    x1 = fl(2, 4, 5)
    w1 = fl(4, 1, 3)
    full = F.conv_transpose1d(T(x1), T(w1), stride=3, groups=2).numpy()  # (2, 2, 15)
    # total padding 3 (odd): with auto_pad NOTSET the spec puts total - total // 2 at the start
    case('convt1d_groups_output_shape', 'ConvTranspose', 11, [x1, w1], [full[:, :, 2:14].astype(np.float32)],
         {'group': 2, 'strides': [3], 'output_shape': [12]})
    # sizes where no ceil-mode window starts in the padding (ONNX 1.12 and torch agree on the shape)
    x3 = fl(1, 2, 6, 6, 7)
    ref = F.avg_pool3d(T(x3), (2, 3, 2), stride=(2, 2, 3), padding=(1, 1, 0), ceil_mode=True, count_include_pad=False).numpy()
    case('avgpool3d_ceil_pads', 'AveragePool', 11, [x3], [ref.astype(np.float32)],
         {'kernel_shape': [2, 3, 2], 'strides': [2, 2, 3], 'pads': [1, 1, 0, 1, 1, 0], 'ceil_mode': 1})
    ref = F.max_pool1d(T(x1), 3, stride=2, padding=1).numpy()
    case('maxpool1d_pads', 'MaxPool', 12, [x1], [ref.astype(np.float32)], {'kernel_shape': [3], 'strides': [2], 'pads': [1, 1]})
    case('lppool1d_p2', 'LpPool', 11, [x1], [np.sqrt(F.avg_pool1d(T(x1) ** 2, 2, stride=1).numpy() * 2).astype(np.float32)],
         {'kernel_shape': [2], 'p': 2})
    x5 = fl(1, 2, 2, 3, 4)
    ref = F.interpolate(T(x5), size=(3, 5, 6), mode='trilinear', align_corners=True).numpy()
    case('resize_5d_trilinear_align', 'Resize', 13, [x5, None, None, i64(1, 2, 3, 5, 6)], [ref.astype(np.float32)],
         {'mode': 'linear', 'coordinate_transformation_mode': 'align_corners'})
    ref = F.interpolate(T(x5), scale_factor=(2, 2, 1.5), mode='trilinear', align_corners=False, recompute_scale_factor=False).numpy()
    case('resize_5d_trilinear_half_pixel', 'Resize', 13, [x5, None, np.float32([1, 1, 2, 2, 1.5])], [ref.astype(np.float32)],
         {'mode': 'linear'})
    xc = fl(1, 1, 4, 5)
    ref = F.interpolate(T(xc), size=(7, 9), mode='bicubic', align_corners=True).numpy()
    case('resize_cubic_align_corners', 'Resize', 13, [xc, None, None, i64(1, 1, 7, 9)], [ref.astype(np.float32)],
         {'mode': 'cubic', 'coordinate_transformation_mode': 'align_corners'})
    a, bb = fl(2, 1, 3, 4), fl(1, 5, 4, 2)
    case('matmul_batch_bcast_both', 'MatMul', 13, [a, bb], [np.matmul(a.astype(np.float64), bb).astype(np.float32)])
    xp = fl(2, 3, 2, 3)
    case('pad_edge_4d', 'Pad', 13, [xp, i64(1, 0, 2, 1, 0, 2, 1, 3)],
         [np.pad(xp, ((1, 0), (0, 2), (2, 1), (1, 3)), mode='edge')], {'mode': 'edge'})
    ops = [fl(2, 3), fl(3, 4), fl(4, 2), fl(2)]
    case('einsum_4_operands', 'Einsum', 12, ops,
         [np.einsum('ij,jk,kl,l->i', *[o.astype(np.float64) for o in ops]).astype(np.float32)], {'equation': 'ij,jk,kl,l->i'})
    xe = fl(3, 3)
    case('einsum_trace_scalar', 'Einsum', 12, [xe], [np.array(np.trace(xe.astype(np.float64)), np.float32)], {'equation': 'ii->'})

    # NonMaxSuppression: 2 batches x 2 classes, score threshold, max per class; corners in any order.
    rng = np.random.default_rng(5)
    boxes = np.zeros((2, 6, 4), np.float32)
    for bi in range(2):
        for k in range(6):
            y, x_ = rng.uniform(0, 4, 2)
            h, w_ = rng.uniform(1, 3, 2)
            bx = [y, x_, y + h, x_ + w_]
            if k % 3 == 1:
                bx = [y + h, x_ + w_, y, x_]  # flipped corners
            boxes[bi, k] = bx
    scores = rng.uniform(0, 1, (2, 2, 6)).astype(np.float32)

    def iou(p, q):
        p = [min(p[0], p[2]), min(p[1], p[3]), max(p[0], p[2]), max(p[1], p[3])]
        q = [min(q[0], q[2]), min(q[1], q[3]), max(q[0], q[2]), max(q[1], q[3])]
        ih = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
        iw = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
        inter = ih * iw
        union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
        return inter / union if union > 0 else 0.0
    sel = []
    for bi in range(2):
        for c in range(2):
            order = sorted(range(6), key=lambda k: (-scores[bi, c, k], k))
            kept = []
            for k in order:
                if scores[bi, c, k] <= np.float32(0.3):
                    continue
                if all(iou(boxes[bi, k].astype(np.float64), boxes[bi, j].astype(np.float64)) <= np.float32(0.4) for j in kept):
                    kept.append(k)
                if len(kept) == 2:
                    break
            sel += [[bi, c, k] for k in kept]
    case('nms_batches_classes_threshold', 'NonMaxSuppression', 11,
         [boxes, scores, i64(2), np.float32([0.4]), np.float32([0.3])], [np.array(sel, np.int64).reshape(-1, 3)])
