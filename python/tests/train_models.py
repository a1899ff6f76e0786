"""The training issue's two real-data models and their data, built with
onnx.helper (no torch: the venv has none), as bench/train/real_data.py
trains them with `kiln train`:
  - digits: an MLP 64-128-10 on scikit-learn's 8x8 digits (the CSV that
    Debian's python3-sklearn ships, read with numpy), 1500 training / 297
    test samples after a permutation seeded 0; AdamW lr 3e-3, batch 32.
    Bar: >= 95% test accuracy (docs/PERFORMANCE.md: 99.66% after 40 epochs).
  - fmnist: the CNN (2 x conv3x3-BatchNorm-ReLU-maxpool2, 32 and 64
    channels, Linear 3136-128, ReLU, Linear 128-10) on Fashion-MNIST
    (Debian's dataset-fashion-mnist), AdamW lr 1e-3, batch 64.
    Bar: >= 88% test accuracy (issue 12; 89.3% after one epoch).
Weights are initialized as PyTorch's defaults are (uniform in +-1/sqrt(fan_in)),
from a numpy generator.
"""

from __future__ import annotations

import gzip
import os
from typing import Optional

import numpy as np
from onnx import TensorProto, helper, numpy_helper

DIGITS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
FMNIST = "/usr/share/datasets/fashion-mnist"


def _model(nodes, x_shape, inits, name):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _uniform(rng, fan_in, shape):
    b = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-b, b, shape).astype(np.float32)


def digits_mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    inits = {"fc1.weight": _uniform(rng, 64, (128, 64)), "fc1.bias": _uniform(rng, 64, 128),
             "fc2.weight": _uniform(rng, 128, (10, 128)), "fc2.bias": _uniform(rng, 128, 10)}
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    return _model(nodes, ["n", 64], inits, "digits_mlp")


def fmnist_cnn(seed: int = 0):
    rng = np.random.default_rng(seed)
    inits = {}
    nodes = []
    x = "x"
    for i, (ci, co) in enumerate(((1, 32), (32, 64))):
        p = f"block{i}"
        inits[f"{p}.conv.weight"] = _uniform(rng, ci * 9, (co, ci, 3, 3))
        inits[f"{p}.conv.bias"] = _uniform(rng, ci * 9, co)
        inits[f"{p}.bn.weight"] = np.ones(co, np.float32)
        inits[f"{p}.bn.bias"] = np.zeros(co, np.float32)
        inits[f"{p}.bn.running_mean"] = np.zeros(co, np.float32)
        inits[f"{p}.bn.running_var"] = np.ones(co, np.float32)
        nodes += [helper.make_node("Conv", [x, f"{p}.conv.weight", f"{p}.conv.bias"], [f"{p}.c"], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"{p}.c", f"{p}.bn.weight", f"{p}.bn.bias",
                                                          f"{p}.bn.running_mean", f"{p}.bn.running_var"], [f"{p}.b"],
                                   epsilon=1e-5, momentum=0.9),
                  helper.make_node("Relu", [f"{p}.b"], [f"{p}.r"]),
                  helper.make_node("MaxPool", [f"{p}.r"], [f"{p}.p"], kernel_shape=[2, 2], strides=[2, 2])]
        x = f"{p}.p"
    inits["fc1.weight"] = _uniform(rng, 3136, (128, 3136))
    inits["fc1.bias"] = _uniform(rng, 3136, 128)
    inits["fc2.weight"] = _uniform(rng, 128, (10, 128))
    inits["fc2.bias"] = _uniform(rng, 128, 10)
    nodes += [helper.make_node("Flatten", [x], ["f"]),
              helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["h"], transB=1),
              helper.make_node("Relu", ["h"], ["hr"]),
              helper.make_node("Gemm", ["hr", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    return _model(nodes, ["n", 1, 28, 28], inits, "fmnist_cnn")


def load_digits() -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(x_train, y_train, x_test, y_test), or None without the CSV."""
    if not os.path.exists(DIGITS_CSV):
        return None
    with gzip.open(DIGITS_CSV, "rt") as f:
        d = np.loadtxt(f, delimiter=",")
    x = (d[:, :-1] / 16.0).astype(np.float32)
    y = d[:, -1].astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    x, y = x[perm], y[perm]
    return x[:1500], y[:1500], x[1500:], y[1500:]


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_fmnist() -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(x_train, y_train, x_test, y_test) normalized as real_data.py does, or None without the data."""
    if not os.path.isdir(FMNIST):
        return None

    def load(kind: str) -> tuple[np.ndarray, np.ndarray]:
        x = _idx(f"{FMNIST}/{kind}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
        y = _idx(f"{FMNIST}/{kind}-labels-idx1-ubyte.gz").astype(np.int64)
        return ((x - 0.2860) / 0.3530).reshape(-1, 1, 28, 28).astype(np.float32), y

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    return xtr, ytr, xte, yte
