#!/usr/bin/env python3
"""Writes single-op benchmark models, each with a random input file (graph input `input`, as run_bench.py binds it), into
OUTDIR (docs/PERFORMANCE.md, "ConvTranspose and Resize compiled"), for
bench/run_bench.py --models-dir OUTDIR --models NAME,...:

  convT_2x2_s2:   ConvTranspose [1,64,64,64] -> 32 channels, 2x2 stride 2 (a U-Net up-convolution)
  convT_4x4_s2:   ConvTranspose [1,128,32,32] -> 64 channels, 4x4 stride 2 pads 1 (a DCGAN/detector head)
  convT_1d_s8:    ConvTranspose [1,256,200] -> 128 channels, kernel 16 stride 8 (an audio decoder)
  resize_linear:  Resize [1,64,128,128] x2, linear, half_pixel (an FPN / segmentation upsample)
  resize_nearest: Resize [1,64,128,128] x2, nearest
  resize_down:    Resize [1,32,256,256] x0.25, linear

    gen_op_models.py OUTDIR      (Debian's /usr/bin/python3 with onnx and numpy)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def save(outdir, name, nodes, xshape, inits):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info('input', F, xshape)],
                              [helper.make_tensor_value_info('y', F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)], producer_name='kiln-op-bench')
    model.ir_version = 7
    onnx.save(model, os.path.join(outdir, name + '.onnx'))
    rng = np.random.RandomState(len(name))
    np.save(os.path.join(outdir, name + '.input.npy'), rng.standard_normal(xshape).astype(np.float32))


def conv_transpose(outdir, name, xshape, wshape, **attrs):
    rng = np.random.RandomState(1)
    w = numpy_helper.from_array((rng.standard_normal(wshape) * 0.1).astype(np.float32), 'w')
    b = numpy_helper.from_array(rng.standard_normal([wshape[1]]).astype(np.float32), 'b')
    save(outdir, name, [helper.make_node('ConvTranspose', ['input', 'w', 'b'], ['y'], **attrs)], xshape, [w, b])


def resize(outdir, name, xshape, scales, **attrs):
    s = numpy_helper.from_array(np.array(scales, np.float32), 's')
    r = numpy_helper.from_array(np.zeros([0], np.float32), 'r')
    save(outdir, name, [helper.make_node('Resize', ['input', 'r', 's'], ['y'], **attrs)], xshape, [r, s])


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    conv_transpose(out, 'convT_2x2_s2', [1, 64, 64, 64], [64, 32, 2, 2], strides=[2, 2])
    conv_transpose(out, 'convT_4x4_s2', [1, 128, 32, 32], [128, 64, 4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
    conv_transpose(out, 'convT_1d_s8', [1, 256, 200], [256, 128, 16], strides=[8], pads=[4, 4])
    resize(out, 'resize_linear', [1, 64, 128, 128], [1, 1, 2, 2], mode='linear')
    resize(out, 'resize_nearest', [1, 64, 128, 128], [1, 1, 2, 2], mode='nearest')
    resize(out, 'resize_down', [1, 32, 256, 256], [1, 1, 0.25, 0.25], mode='linear')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
