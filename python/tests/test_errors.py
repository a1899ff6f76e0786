"""Every bad-input row raises kiln's documented class, which is also the
builtin one a Python caller would catch, with a message naming the input.
Each row runs against onnxruntime too, where it must raise as well (its
classes are its own: only kiln's are checked against the builtins); the
rows where kiln deliberately differs say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from conftest import TensorProto, helper, make_model, vi


@pytest.fixture
def model() -> Any:
    """x[batch, 3] float, k[2] int64 -> y = Relu(x), s = Shape(k)."""
    return make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Shape", ["k"], ["s"])],
                      [vi("x", TensorProto.FLOAT, ["batch", 3]), vi("k", TensorProto.INT64, [2])],
                      [vi("y", TensorProto.FLOAT, ["batch", 3]), vi("s", TensorProto.INT64, [1])])


def _feed(rng: np.random.Generator, **over: Any) -> dict[str, Any]:
    feed: dict[str, Any] = {"x": rng.standard_normal((4, 3)).astype(np.float32),
                            "k": rng.integers(-9, 9, size=2).astype(np.int64)}
    for k, v in over.items():
        if v is None:
            feed.pop(k)
        else:
            feed[k] = v
    return feed


# name, feed builder, kiln class name, builtin class, words the message must hold
RUN_ROWS: list[tuple[str, Callable[[np.random.Generator], dict[str, Any]], str, type, list[str]]] = [
    ("missing input", lambda r: _feed(r, k=None), "InvalidArgument", ValueError, ["'k'", "missing"]),
    ("unknown input name", lambda r: {**_feed(r), "q": np.zeros(2, np.float32)}, "InvalidArgument", ValueError,
     ["'q'"]),
    ("wrong dtype", lambda r: _feed(r, x=r.standard_normal((4, 3))), "InvalidArgument", ValueError,
     ["'x'", "float", "double"]),
    ("wrong dtype int", lambda r: _feed(r, k=np.array([1, 2], np.int32)), "InvalidArgument", ValueError,
     ["'k'", "int64", "int32"]),
    ("wrong rank", lambda r: _feed(r, x=r.standard_normal(3).astype(np.float32)), "InvalidArgument", ValueError,
     ["'x'"]),
    ("wrong shape", lambda r: _feed(r, x=r.standard_normal((4, 5)).astype(np.float32)), "InvalidArgument",
     ValueError, ["'x'"]),
    ("wrong static dim", lambda r: _feed(r, k=np.array([1, 2, 3], np.int64)), "InvalidArgument", ValueError,
     ["'k'"]),
]


@pytest.mark.parametrize("row", RUN_ROWS, ids=[r[0] for r in RUN_ROWS])
def test_bad_run_inputs(rt: Any, model: Any, rng: np.random.Generator, row: Any) -> None:
    _, build, cls_name, builtin, words = row
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        sess.run(None, build(rng))
    if rt.__name__ == "kiln":
        assert type(info.value).__name__ == cls_name, repr(info.value)
        assert isinstance(info.value, rt.KilnError) and isinstance(info.value, builtin)
        msg = str(info.value)
        assert "\n" not in msg
        for w in words:
            assert w in msg, f"{msg!r} lacks {w!r}"


def test_unknown_output_name(rt: Any, model: Any, rng: np.random.Generator) -> None:
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        sess.run(["nope"], _feed(rng))
    if rt.__name__ == "kiln":
        assert isinstance(info.value, rt.InvalidArgument) and isinstance(info.value, ValueError)
        assert "'nope'" in str(info.value)


def test_missing_model_file(rt: Any, tmp_path: Path) -> None:
    path = tmp_path / "absent.onnx"
    with pytest.raises(Exception) as info:
        rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    classes = rt if rt.__name__ == "kiln" else rt.capi.onnxruntime_pybind11_state
    assert isinstance(info.value, classes.NoSuchFile)
    if rt.__name__ == "kiln":
        assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, rt.KilnIOError)
        assert str(path) in str(info.value)


@pytest.mark.parametrize("how", ["garbage", "truncated"])
def test_corrupt_model(rt: Any, model: Any, tmp_path: Path, how: str) -> None:
    data = model.SerializeToString()
    data = b"\x07\xff\xfe garbage" * 5 if how == "garbage" else data[: len(data) // 2]
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    for source in (str(path), data):
        with pytest.raises(Exception) as info:
            rt.InferenceSession(source, providers=["CPUExecutionProvider"])
        if rt.__name__ == "kiln":
            assert isinstance(info.value, rt.InvalidModel) and isinstance(info.value, ValueError), repr(info.value)
            assert isinstance(info.value, rt.InvalidProtobuf)
            if isinstance(source, str):
                assert str(path) in str(info.value)


def test_provider_not_available(mlp: Any) -> None:
    """kiln raises where ONNX Runtime warns and falls back to the CPU: an
    explicit provider list that cannot be honoured is an error."""
    import kiln
    for providers in (["NoSuchExecutionProvider"], ["vulkan:99"], ["CPUExecutionProvider", "opencl:42"]):
        with pytest.raises(kiln.ProviderNotAvailable) as info:
            kiln.InferenceSession(mlp, providers=providers)
        assert isinstance(info.value, LookupError) and isinstance(info.value, ValueError)
        assert isinstance(info.value, kiln.NotFound)
        assert "available" in str(info.value)
    if "CUDAExecutionProvider" not in kiln.get_available_providers():
        with pytest.raises(kiln.ProviderNotAvailable, match="CUDAExecutionProvider"):
            kiln.InferenceSession(mlp, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_bad_arguments(mlp: Any) -> None:
    import kiln
    with pytest.raises(kiln.InvalidArgument):
        kiln.InferenceSession(12345)  # type: ignore[arg-type]
    with pytest.raises(kiln.InvalidArgument):
        kiln.InferenceSession(mlp, providers=[("cpu", "not a dict")])
    sess = kiln.InferenceSession(mlp)
    with pytest.raises(kiln.InvalidArgument):
        sess.run(None, [np.zeros((1, 4), np.float32)])  # type: ignore[arg-type]
    with pytest.raises(kiln.InvalidArgument, match="'x'"):
        sess.run(None, {"x": object()})
    with pytest.raises(kiln.InvalidArgument, match="'x'"):
        sess.run(None, {"x": [["a", "b", "c", "d"]]})


def test_error_classes_and_aliases() -> None:
    import kiln
    assert issubclass(kiln.InvalidArgument, ValueError)
    assert issubclass(kiln.InvalidModel, ValueError)
    assert issubclass(kiln.Unsupported, NotImplementedError)
    assert issubclass(kiln.OutOfMemory, MemoryError)
    assert issubclass(kiln.KilnIOError, OSError)
    assert issubclass(kiln.NoSuchFile, FileNotFoundError)
    assert issubclass(kiln.OutOfRange, IndexError)
    assert issubclass(kiln.NotFound, LookupError)
    for c in (kiln.Internal, kiln.DeviceError, kiln.Timeout):
        assert issubclass(c, RuntimeError)
    for c in (kiln.InvalidArgument, kiln.InvalidModel, kiln.Unsupported, kiln.OutOfMemory, kiln.KilnIOError,
              kiln.OutOfRange, kiln.NotFound, kiln.Internal, kiln.DeviceError, kiln.Timeout):
        assert issubclass(c, kiln.KilnError)
    # ONNX Runtime's names
    assert kiln.Fail is kiln.KilnError and kiln.InvalidProtobuf is kiln.InvalidModel
    assert kiln.NotImplemented is kiln.Unsupported and kiln.RuntimeException is kiln.Internal
    assert kiln.InvalidGraph is kiln.InvalidModel and kiln.EPFail is kiln.DeviceError
    from kiln import _capi, _errors
    codes = {c.code for c in _errors._BY_CODE.values()}
    assert codes == set(range(1, _capi.TIMEOUT + 1))
