#!/usr/bin/env python3
"""Writes the decoder-attention benchmark models (issue 13, item 4) and one
random input file per graph input into OUT:

  decode_kv    Attention-23, one new token against a KV cache: Q, K, V
               [1, 32, 1, 128], past_key / past_value [1, 32, 2048, 128] ->
               Y, present_key, present_value (the cache grown by one)
  decode_nokv  the same step with the 2,049 keys and values given whole
               (no cache inputs or outputs): Q [1, 32, 1, 128], K, V
               [1, 32, 2049, 128] -> Y
  block        RMSNormalization-23 of Q and K over the head axis (a learned
               scale), RotaryEmbedding-23 of both at position 2048 (cos/sin
               caches of 4096 positions x 64), then decode_kv's Attention

    bench/.venv/bin/python bench/attention/gen_attention_models.py OUT

Needs the venv's onnx (opset 23); random weights and inputs with fixed seeds.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, D, PAST = 32, 128, 2048
F = TensorProto.FLOAT


def vi(name, shape, dt=F):
    return helper.make_tensor_value_info(name, dt, shape)


def save(out, name, nodes, inputs, outputs, inits, feeds):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], producer_name="kiln-bench-attention")
    m.ir_version = 10
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, name + ".onnx"))
    for k, v in feeds.items():
        np.save(os.path.join(out, f"{name}.{k}.npy"), v)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(23)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    q, k, v = r(1, H, 1, D), r(1, H, 1, D), r(1, H, 1, D)
    pk, pv = r(1, H, PAST, D), r(1, H, PAST, D)
    att = helper.make_node("Attention", ["q", "k", "v", "", "past_key", "past_value"],
                           ["y", "present_key", "present_value"])
    io = [vi("q", [1, H, 1, D]), vi("k", [1, H, 1, D]), vi("v", [1, H, 1, D]),
          vi("past_key", [1, H, PAST, D]), vi("past_value", [1, H, PAST, D])]
    outs = [vi("y", [1, H, 1, D]), vi("present_key", [1, H, PAST + 1, D]), vi("present_value", [1, H, PAST + 1, D])]
    save(out, "decode_kv", [att], io, outs, [], {"q": q, "k": k, "v": v, "past_key": pk, "past_value": pv})

    kk, vv = np.concatenate([pk, k], 2), np.concatenate([pv, v], 2)
    save(out, "decode_nokv", [helper.make_node("Attention", ["q", "k", "v"], ["y"])],
         [vi("q", [1, H, 1, D]), vi("k", [1, H, PAST + 1, D]), vi("v", [1, H, PAST + 1, D])],
         [vi("y", [1, H, 1, D])], [], {"q": q, "k": kk, "v": vv})

    pos = np.arange(4096, dtype=np.float64)[:, None] / (10000.0 ** (np.arange(0, D, 2) / D))[None, :]
    inits = [numpy_helper.from_array((1 + 0.1 * r(D)).astype(np.float32), "q_scale"),
             numpy_helper.from_array((1 + 0.1 * r(D)).astype(np.float32), "k_scale"),
             numpy_helper.from_array(np.cos(pos).astype(np.float32), "cos_cache"),
             numpy_helper.from_array(np.sin(pos).astype(np.float32), "sin_cache"),
             numpy_helper.from_array(np.array([[PAST]], np.int64), "position_ids")]
    nodes = [helper.make_node("RMSNormalization", ["q", "q_scale"], ["qn"], axis=-1),
             helper.make_node("RMSNormalization", ["k", "k_scale"], ["kn"], axis=-1),
             helper.make_node("RotaryEmbedding", ["qn", "cos_cache", "sin_cache", "position_ids"], ["qr"]),
             helper.make_node("RotaryEmbedding", ["kn", "cos_cache", "sin_cache", "position_ids"], ["kr"]),
             helper.make_node("Attention", ["qr", "kr", "v", "", "past_key", "past_value"],
                              ["y", "present_key", "present_value"])]
    save(out, "block", nodes, io, outs, inits, {"q": q, "k": k, "v": v, "past_key": pk, "past_value": pv})
    print(f"gen_attention_models: decode_kv, decode_nokv, block in {out}")


if __name__ == "__main__":
    main()
