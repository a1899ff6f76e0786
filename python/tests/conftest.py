"""Shared fixtures of kiln's Python tests.

`rt` runs a test against kiln and against ONNX Runtime (both imported as
`ort` would be), so each usage pattern is checked to behave the same; the
onnxruntime parameter is a visible skip where onnxruntime is not installed
(Debian's python). Models are built here with onnx.helper, at IR version 8
and opset 17, which every onnx and onnxruntime the tests meet can read.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KILN_BUILD_DIR", REPO / "build"))
# The kiln binary of the library under test (its build tree's; else BUILD's):
# tests comparing the package with the binary need the same compiled code.
_LIB_DIR = Path(os.environ["KILN_LIBRARY"]).resolve().parent if os.environ.get("KILN_LIBRARY") else BUILD
KILN_BIN = _LIB_DIR / "kiln" if (_LIB_DIR / "kiln").exists() else BUILD / "kiln"
KILN_BIN_SAME_BUILD = KILN_BIN.parent.resolve() == _LIB_DIR.resolve()

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _import_or_skip(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed in this python")


@pytest.fixture(params=["kiln", "onnxruntime"])
def rt(request: pytest.FixtureRequest) -> Any:
    """The runtime under test: the kiln package or onnxruntime."""
    return _import_or_skip(request.param)


@pytest.fixture
def ort() -> Any:
    return _import_or_skip("onnxruntime")


def cpu_providers(rt: Any) -> list[str]:
    return ["CPUExecutionProvider"]


def make_model(nodes: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
               initializers: Sequence[Any] = (), name: str = "graph", opset: int = 17, **kw: Any) -> Any:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    for k in ("doc_string",):
        if k in kw:
            graph.doc_string = kw.pop(k)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
    model.ir_version = 8
    return model


def vi(name: str, elem: int, shape: Optional[Sequence[Any]]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def mlp_model() -> Any:
    """x[batch, 4] -> MatMul(W) + b -> Relu -> y[batch, 3], and a second
    output z = Sigmoid of the pre-activation."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["p"]),
             helper.make_node("Relu", ["p"], ["y"]), helper.make_node("Sigmoid", ["p"], ["z"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, ["batch", 4])],
                      [vi("y", TensorProto.FLOAT, ["batch", 3]), vi("z", TensorProto.FLOAT, ["batch", 3])], inits,
                      name="mlp")


def mlp_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    p = x.astype(np.float64) @ w + b
    return np.maximum(p, 0), 1 / (1 + np.exp(-p))


@pytest.fixture
def mlp() -> Any:
    return mlp_model()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def identity_model(elem: int, shape: Sequence[Any] = ("n", 3)) -> Any:
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", elem, list(shape))],
                      [vi("y", elem, list(shape))], name="identity")


def close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


Builder = Callable[[], Any]
