#!/usr/bin/python3
"""Writes random ONNX Attention (opset 23/24) cases checked against a float64
numpy implementation written here, independent of kiln and of ONNX's own
reference, plus malformed Attention models that must fail cleanly:

    gen_attention_cases.py OUTDIR

OUTDIR/attention/CASE/...   backend-test layout, for kiln_conformance
OUTDIR/errors/CASE.onnx     with CASE.<input>.npy and CASE.expect (an
                            extended regex the one-line error must match),
                            for `kiln run`

Runs with Debian's /usr/bin/python3 (onnx 1.12, numpy): that onnx knows no
opset-23 schemas, so the models are built with onnx.helper and written
without its checker. Inputs are f32 or f64 so the float64 truth holds at
kiln_conformance's tolerance (rtol 1e-3)."""
import os
import sys

sys.dont_write_bytecode = True  # leave the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from oplib import Writer  # noqa: E402


def to_heads(x, heads):
    """[B, S, heads*E] -> [B, heads, S, E]."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def attention_f64(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None, is_causal=0, q_num_heads=None,
                  kv_num_heads=None, scale=None, softcap=0.0, qk_mode=0):
    """Y, present_key, present_value, qk_matmul_output, all float64."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    three_d = q.ndim == 3
    if three_d:
        q, k, v = to_heads(q, q_num_heads), to_heads(k, kv_num_heads), to_heads(v, kv_num_heads)
    if past_k is not None:
        k = np.concatenate([np.asarray(past_k, np.float64), k], axis=2)
        v = np.concatenate([np.asarray(past_v, np.float64), v], axis=2)
    batch, hq, sq, d = q.shape
    hkv, total = k.shape[1], k.shape[2]
    past = 0 if past_k is None else past_k.shape[2]
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    # Query head h reads key/value head h // (hq // hkv).
    kv_of = np.arange(hq) // (hq // hkv)
    kh, vh = k[:, kv_of], v[:, kv_of]
    raw = np.einsum('bhid,bhjd->bhij', q, kh) * scale
    capped = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
    # Which keys each query may read, and the additive bias on top.
    allowed = np.ones((batch, hq, sq, total), bool)
    bias = np.zeros((batch, hq, sq, total))
    if mask is not None:
        m = np.asarray(mask)
        full = np.zeros(m.shape[:-1] + (total,), m.dtype)
        full[..., :m.shape[-1]] = m
        ok = np.ones(m.shape[:-1] + (total,), bool)
        ok[..., m.shape[-1]:] = False  # keys past a short mask are masked
        if m.dtype == bool:
            ok &= full
        else:
            bias = bias + full.astype(np.float64)
        allowed &= np.broadcast_to(ok, allowed.shape)
    i = np.arange(sq)[:, None]
    j = np.arange(total)[None, :]
    for b in range(batch):
        offset = past if nonpad is None else nonpad[b] - sq
        if is_causal:
            allowed[b] &= (j <= i + offset)[None]
        if nonpad is not None:
            allowed[b] &= (j < nonpad[b])[None]
    biased = np.where(allowed, capped + bias, -np.inf)
    probs = np.zeros_like(biased)
    for idx in np.ndindex(batch, hq, sq):
        row = biased[idx]
        if not allowed[idx].any():
            continue  # a fully masked row reads nothing: zeros
        e = np.exp(row - row.max())
        probs[idx] = e / e.sum()
    y = np.einsum('bhij,bhje->bhie', probs, vh)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, sq, -1)
    qk = [raw, capped, biased, probs][qk_mode]
    return y, k, v, qk


def gen_cases(w, rng):
    def rand(shape, dt):
        return rng.standard_normal(shape).astype(dt)

    def case(name, dt, q, k, v, mask=None, past=None, nonpad=None, outputs=1, opset=23, **attrs):
        ins = [q, k, v, mask]
        if past is not None:
            ins += list(past)
        if nonpad is not None:
            ins += [None, None, nonpad]
        while ins[-1] is None:
            ins.pop()
        ref = attention_f64(q, k, v, mask, *(past or (None, None)), nonpad, is_causal=attrs.get('is_causal', 0),
                            q_num_heads=attrs.get('q_num_heads'), kv_num_heads=attrs.get('kv_num_heads'),
                            scale=attrs.get('scale'), softcap=attrs.get('softcap', 0.0),
                            qk_mode=attrs.get('qk_matmul_output_mode', 0))
        outs = [r.astype(dt) for r in ref[:outputs]]
        w.case('attention', name, 'Attention', ins, outs, attrs=attrs, opset=opset)

    f32 = np.float32
    # GQA with a KV cache, causal, 3-D, every output.
    q, k, v = rand((2, 3, 4 * 8), f32), rand((2, 3, 2 * 8), f32), rand((2, 3, 2 * 6), f32)
    past = (rand((2, 2, 5, 8), f32), rand((2, 2, 5, 6), f32))
    case('gqa_past_causal_3d', f32, q, k, v, None, past, outputs=4, q_num_heads=4, kv_num_heads=2, is_causal=1)
    # GQA with a cache and a float 4-D mask, double, biased scores out.
    q, k, v = rand((1, 6, 2, 4), np.float64), rand((1, 3, 2, 4), np.float64), rand((1, 3, 2, 5), np.float64)
    past = (rand((1, 3, 3, 4), np.float64), rand((1, 3, 3, 5), np.float64))
    case('gqa_past_float_mask_f64', np.float64, q, k, v, rand((1, 6, 2, 5), np.float64), past, outputs=4,
         qk_matmul_output_mode=2)
    # Causal plus a boolean mask that leaves one query row nothing.
    q, k, v = rand((2, 2, 4, 8), f32), rand((2, 2, 4, 8), f32), rand((2, 2, 4, 8), f32)
    bmask = rng.random((4, 4)) > 0.3
    bmask[2, :] = False
    case('causal_bool_mask', f32, q, k, v, bmask, outputs=4, is_causal=1, qk_matmul_output_mode=3)
    # MQA with softcap and an explicit scale, scores after softcap out.
    q, k, v = rand((1, 4, 3, 16), f32) * 3, rand((1, 1, 7, 16), f32) * 3, rand((1, 1, 7, 16), f32)
    case('mqa_softcap_scale', f32, q, k, v, outputs=4, softcap=2.5, scale=0.3, qk_matmul_output_mode=1)
    # A float mask shorter than the cache + new keys (the rest masked), 3-D, probabilities out.
    q, k, v = rand((2, 2, 2 * 4), f32), rand((2, 2, 2 * 4), f32), rand((2, 2, 2 * 4), f32)
    past = (rand((2, 2, 3, 4), f32), rand((2, 2, 3, 4), f32))
    case('short_float_mask_3d', f32, q, k, v, rand((2, 1, 2, 4), f32), past, outputs=4, q_num_heads=2,
         kv_num_heads=2, qk_matmul_output_mode=3)
    # Cross attention with a rank-3 boolean (per head) mask and causal.
    q, k, v = rand((2, 3, 2, 6), f32), rand((2, 3, 5, 6), f32), rand((2, 3, 5, 3), f32)
    case('cross_head_bool_mask_causal', f32, q, k, v, rng.random((3, 2, 5)) > 0.4, outputs=1, is_causal=1)
    # Opset 24: an external cache, nonpad_kv_seqlen and causal (bottom-right).
    q, k, v = rand((2, 2, 3, 4), f32), rand((2, 1, 6, 4), f32), rand((2, 1, 6, 4), f32)
    case('nonpad_causal_gqa', f32, q, k, v, nonpad=np.array([5, 3], np.int64), outputs=1, opset=24, is_causal=1)


# ---- malformed models ------------------------------------------------------------

def save_error(root, name, nodes_attrs, inputs, expect, symbolic=False, opset=23, n_outputs=1):
    """One Attention node over the given inputs ({name: array} in order; None
    skips a slot); symbolic: inputs declared with named dims only, so only the
    kernel sees the shapes."""
    d = os.path.join(root, 'errors')
    os.makedirs(d, exist_ok=True)
    names = [n if a is not None else '' for n, a in inputs]
    while names and names[-1] == '':
        names.pop()
    outs = ['Y', 'present_key', 'present_value', 'qk'][:n_outputs]
    node = helper.make_node('Attention', names, outs, name='attn', **nodes_attrs)
    vi = []
    for n, a in inputs:
        if a is None:
            continue
        dt = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(bool): TensorProto.BOOL,
              np.dtype(np.int64): TensorProto.INT64}[a.dtype]
        shape = ['%s_d%d' % (n, i) for i in range(a.ndim)] if symbolic else list(a.shape)
        vi.append(helper.make_tensor_value_info(n, dt, shape))
    g = helper.make_graph([node], name, vi, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    with open(os.path.join(d, name + '.onnx'), 'wb') as f:
        f.write(m.SerializeToString())
    with open(os.path.join(d, name + '.expect'), 'w') as f:
        f.write(expect + '\n')
    for n, a in inputs:
        if a is not None:
            np.save(os.path.join(d, '%s.%s.npy' % (name, n)), a)


def gen_errors(root, rng):
    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    q4, k4, v4 = r(1, 2, 3, 4), r(1, 2, 5, 4), r(1, 2, 5, 4)
    for sym in (False, True):
        tag = '_symbolic' if sym else ''
        # A mask longer than the keys.
        save_error(root, 'mask_too_long' + tag, {}, [('Q', q4), ('K', k4), ('V', v4), ('attn_mask', r(3, 6))],
                   "'attn'.*attn_mask.*shape \\[3,6\\]", sym)
        # A mask whose query axis is neither 1 nor Sq.
        save_error(root, 'mask_bad_rows' + tag, {}, [('Q', q4), ('K', k4), ('V', v4), ('attn_mask', r(2, 5))],
                   "'attn'.*attn_mask.*does not broadcast", sym)
        # past_key and past_value of different lengths.
        save_error(root, 'past_lengths_differ' + tag, {},
                   [('Q', q4), ('K', k4), ('V', v4), ('attn_mask', None), ('past_key', r(1, 2, 3, 4)),
                    ('past_value', r(1, 2, 4, 4))], "'attn'.*past_value.*shape \\[1,2,4,4\\]", sym, n_outputs=3)
        # 3 query heads over 2 key/value heads.
        save_error(root, 'heads_do_not_divide' + tag, {}, [('Q', r(1, 3, 3, 4)), ('K', k4), ('V', v4)],
                   "'attn'.*3 query heads are not a multiple of 2", sym)
        # A 3-D hidden size that q_num_heads does not divide.
        save_error(root, 'hidden_not_multiple' + tag, {'q_num_heads': 4, 'kv_num_heads': 2},
                   [('Q', r(1, 3, 10)), ('K', r(1, 5, 8)), ('V', r(1, 5, 8))],
                   "'attn'.*input 0 \\(Q\\).*not a multiple of q_num_heads", sym)
    # past_key given without past_value.
    save_error(root, 'past_key_alone', {}, [('Q', q4), ('K', k4), ('V', v4), ('attn_mask', None),
                                            ('past_key', r(1, 2, 3, 4))], "'attn'.*past_key and past_value")
    # A non-padding length past the keys (only the kernel sees the values).
    save_error(root, 'nonpad_past_keys', {'is_causal': 1},
               [('Q', q4), ('K', k4), ('V', v4), ('attn_mask', None), ('past_key', None), ('past_value', None),
                ('nonpad_kv_seqlen', np.array([7], np.int64))], "'attn'.*nonpad_kv_seqlen.*7, expected 0..5", opset=24)
    # 3-D inputs without head counts.
    save_error(root, 'three_d_without_heads', {}, [('Q', r(1, 3, 8)), ('K', r(1, 5, 8)), ('V', r(1, 5, 8))],
               "'attn'.*q_num_heads and kv_num_heads")


def gen_flex_errors(root, rng):
    """FlexAttention whose score_mod changes the scores' shape."""
    d = os.path.join(root, 'errors')
    scores = helper.make_tensor_value_info('scores', TensorProto.FLOAT, ['B', 'H', 'L', 'S'])
    summed = helper.make_tensor_value_info('summed', TensorProto.FLOAT, None)
    body = helper.make_graph([helper.make_node('ReduceSum', ['scores'], ['summed'], keepdims=0)], 'shrink',
                             [scores], [summed])
    node = helper.make_node('FlexAttention', ['Q', 'K', 'V'], ['Y'], name='flex', domain='ai.onnx.preview',
                            score_mod=body)
    names = ('Q', 'K', 'V')
    vals = [rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for _ in names]
    g = helper.make_graph([node], 'flex_bad_score_mod',
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 3, 4]) for n in names],
                          [helper.make_tensor_value_info('Y', TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 26), helper.make_opsetid('ai.onnx.preview', 1)])
    m.ir_version = 8
    with open(os.path.join(d, 'flex_score_mod_shape.onnx'), 'wb') as f:
        f.write(m.SerializeToString())
    with open(os.path.join(d, 'flex_score_mod_shape.expect'), 'w') as f:
        f.write("'flex'.*score_mod.*returned f32 \\[\\], expected f32 \\[1,2,3,3\\]\n")
    for n, a in zip(names, vals):
        np.save(os.path.join(d, 'flex_score_mod_shape.%s.npy' % n), a)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = sys.argv[1]
    rng = np.random.default_rng(23)
    w = Writer(root)
    gen_cases(w, rng)
    gen_errors(root, rng)
    gen_flex_errors(root, rng)
    print('attention: %d cases, errors: %d models' % (len(w.names['attention']),
                                                      len([f for f in os.listdir(os.path.join(root, 'errors'))
                                                           if f.endswith('.onnx')])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
