#!/usr/bin/env python3
"""Writes the fuzz seeds that carry the narrow dtypes (ONNX 17-26: float8,
float4, int4, int2), so the fuzz targets start from inputs that reach their
packing, conversion and .npy paths:

  corpus_model/narrow_initializers.onnx   one initializer of every narrow
      dtype, packed raw_data with odd lengths, int32_data, a Constant int4
  corpus_pipeline/narrow-*                small Cast / QuantizeLinear /
      DequantizeLinear models over them (kept by make_pipeline_seeds.py)
  corpus_npy/ml_*.npy                     np.save of ml_dtypes arrays
      ('<V1', '<V2'); the last byte picks the dtype fuzz_npy reads V1 as

Needs onnx >= 1.20 and ml_dtypes (the bench venv has both):
    /tmp/fresh12/bench/.venv/bin/python tests/fuzz/make_narrow_seeds.py
"""
import io
import os

import ml_dtypes as m
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

here = os.path.dirname(os.path.abspath(__file__))
NARROW = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ, T.UINT4, T.INT4, T.FLOAT4E2M1,
          T.FLOAT8E8M0, T.UINT2, T.INT2]


def model(nodes, inputs, outputs, inits=(), opset=25):
    g = h.make_graph(nodes, "narrow", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=11)


def save(m_, path):
    with open(path, "wb") as f:
        f.write(m_.SerializeToString())


# corpus_model: every narrow dtype as an initializer (raw, odd length) and
# as int32_data, all passed through Identity.
inits, nodes, outs = [], [], []
for dt in NARROW:
    name = T.DataType.Name(dt).lower()
    n = 3 if dt in (T.UINT4, T.INT4, T.FLOAT4E2M1) else 5 if dt in (T.UINT2, T.INT2) else 2
    bits = 4 if n == 3 else 2 if n == 5 else 8
    per = 8 // bits
    raw = bytes((0x21 + k) & 0xff for k in range((n + per - 1) // per))
    inits.append(h.make_tensor(name + "_raw", dt, [n], raw, raw=True))
    t = onnx.TensorProto()
    t.name, t.data_type = name + "_typed", dt
    t.dims.append(n)
    t.int32_data.extend(raw)
    inits.append(t)
    for src in (name + "_raw", name + "_typed"):
        nodes.append(h.make_node("Identity", [src], [src + "_out"]))
        outs.append(h.make_tensor_value_info(src + "_out", dt, [n]))
c = h.make_tensor("c", T.INT4, [3], b"\x7f\x08", raw=True)
nodes.append(h.make_node("Constant", [], ["const_int4"], value=c))
outs.append(h.make_tensor_value_info("const_int4", T.INT4, [3]))
save(model(nodes, [], outs, inits), os.path.join(here, "corpus_model", "narrow_initializers.onnx"))

# corpus_pipeline: small ops over the narrow types.
pipe = os.path.join(here, "corpus_pipeline")
x = h.make_tensor_value_info("x", T.FLOAT, [2, 3])
for dt in NARROW:
    name = T.DataType.Name(dt).lower()
    y = h.make_tensor_value_info("y", dt, [2, 3])
    back = h.make_tensor_value_info("z", T.FLOAT, [2, 3])
    save(model([h.make_node("Cast", ["x"], ["y"], to=dt, saturate=0),
                h.make_node("Cast", ["y"], ["z"], to=T.FLOAT)], [x], [y, back]),
         os.path.join(pipe, "narrow-cast-%s" % name))
for dt in (T.INT4, T.UINT2, T.FLOAT8E4M3FN, T.FLOAT4E2M1):
    name = T.DataType.Name(dt).lower()
    scale = h.make_tensor("s", T.FLOAT, [2, 2], [0.5, 1.0, 2.0, 0.25])
    zp = h.make_tensor("zp", dt, [2, 2], b"\x00\x00" if dt in (T.INT4, T.FLOAT4E2M1) else b"\x00" if dt == T.UINT2
                       else b"\x00\x00\x00\x00", raw=True)
    y = h.make_tensor_value_info("y", dt, [2, 3])
    z = h.make_tensor_value_info("z", T.FLOAT16, [2, 3])
    save(model([h.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=1, block_size=2),
                h.make_node("DequantizeLinear", ["y", "s", "zp"], ["z"], axis=1, block_size=2,
                            output_dtype=T.FLOAT16)], [x], [y, z], [scale, zp]),
         os.path.join(pipe, "narrow-qdq-%s" % name))

# corpus_npy: what np.save writes for ml_dtypes arrays. fuzz_npy reads '<V1'
# as the dtype void_as[last byte % 12] (see fuzz_npy.c): end each file on
# a byte that picks its own dtype.
npy = os.path.join(here, "corpus_npy")
order = [None, "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
         "float8_e8m0fnu", "float4_e2m1fn", "uint4", "int4", "uint2", "int2"]
for k, tn in enumerate(order):
    if tn is None:
        continue
    t = getattr(m, tn)
    codes = np.array([0x38, 0x3c, 0x40, k], np.uint8)
    if tn in ("float4_e2m1fn", "uint4", "int4", "uint2", "int2"):
        codes = np.array([1, 2, 3, k], np.uint8)  # valid values in the low bits
    if tn == "int4":
        codes = np.array([0xf8, 1, 7, k], np.uint8).view(np.int8).astype(np.int8)
    if tn == "bfloat16":
        a = np.array([1.5, -2.0, 3.0, 0.0], np.float32).astype(t).view(np.uint8).reshape(-1)
        a[-1] = 13  # 13 % 12 == 1: bf16
        arr = a.view(t).reshape(2, 2)
    else:
        arr = codes.view(t).reshape(2, 2)
    b = io.BytesIO()
    np.save(b, arr)
    with open(os.path.join(npy, "ml_%s.npy" % tn), "wb") as f:
        f.write(b.getvalue())
print("narrow seeds written")
