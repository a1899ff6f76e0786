#!/usr/bin/env python3
"""Writes two benchmark models with a Loop around contractions into OUTDIR
(docs/PERFORMANCE.md, "control flow compiled"):

  loop_conv.onnx: x f32[1,16,32,32]; Loop of 8 iterations over a residual
                  block (Conv 3x3 + Relu, Conv 3x3, Add), the pooled state as
                  a scan output;
  loop_mlp.onnx:  x f32[8,256]; Loop of 16 iterations over two MatMuls
                  (+ bias, Tanh, residual Add).

    gen_loop_models.py OUTDIR      (Debian's /usr/bin/python3 with onnx, numpy)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
rng = np.random.RandomState(5)


def arr(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(path, body, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, os.path.basename(path)[:-5], inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)], producer_name='kiln-bench')
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def loop_conv(outdir):
    n = helper.make_node
    body = helper.make_graph(
        [n('Identity', ['cond_in'], ['cond_out']),
         n('Conv', ['h', 'W1', 'b1'], ['c1'], pads=[1, 1, 1, 1]), n('Relu', ['c1'], ['r1']),
         n('Conv', ['r1', 'W2', 'b2'], ['c2'], pads=[1, 1, 1, 1]), n('Add', ['c2', 'h'], ['h2']),
         n('GlobalAveragePool', ['h2'], ['pooled'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [1, 16, 32, 32])],
        [vi('cond_out', B, []), vi('h2', F, [1, 16, 32, 32]), vi('pooled', F, [1, 16, 1, 1])])
    save(os.path.join(outdir, 'loop_conv.onnx'), body,
         [n('Loop', ['M', 'true', 'x'], ['y', 'pools'], body=body)],
         [vi('x', F, [1, 16, 32, 32])], [vi('y', F, [1, 16, 32, 32]), vi('pools', F, [8, 1, 16, 1, 1])],
         [arr('W1', rng.randn(16, 16, 3, 3) * 0.05), arr('b1', rng.randn(16) * 0.1),
          arr('W2', rng.randn(16, 16, 3, 3) * 0.05), arr('b2', rng.randn(16) * 0.1),
          arr('M', 8, np.int64), arr('true', True, np.bool_)])


def loop_mlp(outdir):
    n = helper.make_node
    body = helper.make_graph(
        [n('Identity', ['cond_in'], ['cond_out']),
         n('MatMul', ['h', 'W1'], ['m1']), n('Add', ['m1', 'b1'], ['a1']), n('Tanh', ['a1'], ['t1']),
         n('MatMul', ['t1', 'W2'], ['m2']), n('Add', ['m2', 'h'], ['h2'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [8, 256])],
        [vi('cond_out', B, []), vi('h2', F, [8, 256])])
    save(os.path.join(outdir, 'loop_mlp.onnx'), body,
         [n('Loop', ['M', 'true', 'x'], ['y'], body=body)],
         [vi('x', F, [8, 256])], [vi('y', F, [8, 256])],
         [arr('W1', rng.randn(256, 256) * 0.05), arr('b1', rng.randn(256) * 0.1),
          arr('W2', rng.randn(256, 256) * 0.05), arr('M', 16, np.int64), arr('true', True, np.bool_)])


if __name__ == '__main__':
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    os.makedirs(sys.argv[1], exist_ok=True)
    loop_conv(sys.argv[1])
    loop_mlp(sys.argv[1])
