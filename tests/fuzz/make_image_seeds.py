#!/usr/bin/env python3
"""Writes the ImageDecoder seeds of the whole-pipeline fuzz target:
corpus_pipeline/image-<format>-<pixel_format>, each an opset-20 model whose
encoded_stream is an initializer holding a small real image (16x16, one per
format kiln decodes: JPEG, PNG, BMP, PPM, TIFF, WebP, JPEG 2000), so the
fuzzer's initializer and byte mutations reach the decoders with bytes that
start right (random graph inputs never carry a signature). Kept by
make_pipeline_seeds.py.

    /usr/bin/python3 tests/fuzz/make_image_seeds.py   (python3-onnx, python3-pil)
"""
import io
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "corpus_pipeline")
y, x = np.mgrid[0:16, 0:16]
pixels = np.stack([x * 16, y * 16, (x + y) * 8], -1).astype(np.uint8)
img = Image.fromarray(pixels, "RGB")
formats = [("jpeg", "JPEG", {}), ("png", "PNG", {}), ("bmp", "BMP", {}), ("ppm", "PPM", {}),
           ("tiff", "TIFF", {"compression": "tiff_lzw"}), ("webp", "WEBP", {}), ("jp2", "JPEG2000", {})]
for i, (name, fmt, kw) in enumerate(formats):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    data = np.frombuffer(b.getvalue(), np.uint8)
    pixel_format = ["RGB", "BGR", "Grayscale"][i % 3]
    node = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)
    g = helper.make_graph([node], "image", [], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          initializer=[numpy_helper.from_array(data, "x")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    path = os.path.join(corpus, "image-%s-%s" % (name, pixel_format))
    open(path, "wb").write(m.SerializeToString())
    print(path, os.path.getsize(path))
