"""Writes the public API test's model with onnx's Python API: a small MLP
(MatMul, Add, Relu) with every ModelProto and GraphProto field that
kiln_model_metadata_get reports set, node names that need JSON escaping,
and a second opset import.

usage: make_metadata_model.py OUT.onnx [IDENTITY.onnx]
IDENTITY.onnx: a graph output that is its input passed through (Identity).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(14)
w = rng.standard_normal((8, 4)).astype(np.float32)
b = rng.standard_normal((4,)).astype(np.float32)
nodes = [
    helper.make_node("MatMul", ["x", "w"], ["xw"], name='mat"mul\\1'),
    helper.make_node("Add", ["xw", "b"], ["y0"], name="add\n\u00e9\u2713"),
    helper.make_node("Relu", ["y0"], ["y"], name="relu\t\u03bb"),
]
graph = helper.make_graph(
    nodes, "api graph \u00e9",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    doc_string="the graph's \"doc\"\nsecond line")
model = helper.make_model(
    graph,
    opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example.kiln", 2)],
    producer_name="kiln-api-test \u2713", producer_version="1.2.3", domain="org.kiln.test",
    model_version=7, doc_string="A model with \"quotes\", a\ttab and \u00fcnicode.")
model.ir_version = 8
onnx.helper.set_model_props(model, {"author": "h1", "license": "MIT \u00a9", "empty": ""})
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])

if len(sys.argv) > 2:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, sys.argv[2])
