"""Tensors across the boundary: dtypes both ways (against onnxruntime where
it has them), outputs over kiln's memory without a copy, DLPack to numpy and
torch, zero-copy inputs, lifetimes, and no memory growth over many sessions."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest
from conftest import TensorProto, cpu_providers, helper, identity_model, make_model, vi

DTYPES = [
    (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
    (TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8), (TensorProto.INT16, np.int16),
    (TensorProto.UINT16, np.uint16), (TensorProto.INT32, np.int32), (TensorProto.UINT32, np.uint32),
    (TensorProto.INT64, np.int64), (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_),
]


def _random(rng: np.random.Generator, dt: Any, shape: tuple[int, ...] = (4, 3)) -> np.ndarray:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("elem,dt", DTYPES, ids=[np.dtype(d).name for _, d in DTYPES])
def test_dtype_round_trip(rt: Any, rng: np.random.Generator, elem: int, dt: Any) -> None:
    sess = rt.InferenceSession(identity_model(elem).SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == sess.get_outputs()[0].type
    x = _random(rng, dt)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)


def test_string_tensors(rt: Any) -> None:
    sess = rt.InferenceSession(identity_model(TensorProto.STRING).SerializeToString(),
                               providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "tensor(string)"
    x = np.array([["a", "bb", "ccc"], ["", "ünï", "x" * 100]], dtype=object)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == object and y.tolist() == x.tolist()
    (y,) = sess.run(None, {"x": x.astype(str)})  # numpy str arrays are accepted too
    assert y.tolist() == x.tolist()


def test_bfloat16_and_float8_with_ml_dtypes(rng: np.random.Generator) -> None:
    import kiln
    ml = pytest.importorskip("ml_dtypes")
    for elem, dt in ((TensorProto.BFLOAT16, ml.bfloat16), (TensorProto.FLOAT8E4M3FN, ml.float8_e4m3fn),
                     (TensorProto.FLOAT8E5M2, ml.float8_e5m2)):
        sess = kiln.InferenceSession(identity_model(elem))
        x = rng.standard_normal((4, 3)).astype(dt)
        (y,) = sess.run(None, {"x": x})
        assert y.dtype == np.dtype(dt)
        np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def test_output_is_a_view_over_kiln_memory(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    sess = kiln.InferenceSession(mlp)
    (t,) = sess.run_tensors(["y"], {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    a = t.numpy()
    assert a.ctypes.data == t.data_ptr()
    assert np.asarray(t).ctypes.data == t.data_ptr()
    (y,) = sess.run(["y"], {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    assert y.base is not None and not y.flags.owndata  # kiln's memory, kept alive by the base


def test_dlpack_numpy_shares_memory(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    sess = kiln.InferenceSession(mlp)
    (t,) = sess.run_tensors(["y"], {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr() and a.shape == (3, 3) and a.dtype == np.float32
    expected = a.copy()
    del t, sess
    gc.collect()
    np.testing.assert_array_equal(a, expected)  # the capsule's reference keeps the memory


def test_dlpack_torch_shares_memory(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    torch = pytest.importorskip("torch")
    sess = kiln.InferenceSession(mlp)
    (t,) = sess.run_tensors(["y"], {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    tt = torch.utils.dlpack.from_dlpack(t)
    assert tt.data_ptr() == t.data_ptr() and tuple(tt.shape) == (3, 3)
    expected = tt.clone()
    del t, sess
    gc.collect()
    assert torch.equal(tt, expected)
    # an unconsumed capsule frees its reference on its own
    (t2,) = kiln.InferenceSession(mlp).run_tensors(["y"], {"x": np.ones((1, 4), np.float32) * 0.5})
    cap = t2.__dlpack__()
    del cap
    gc.collect()


def test_output_outlives_session(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    sess = kiln.InferenceSession(mlp)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y, z = sess.run(None, {"x": x})
    y_copy, z_copy = y.copy(), z.copy()
    del sess
    gc.collect()
    for _ in range(3):  # other allocations must not land on the outputs
        kiln.InferenceSession(mlp).run(None, {"x": rng.standard_normal((6, 4)).astype(np.float32)})
    np.testing.assert_array_equal(y, y_copy)
    np.testing.assert_array_equal(z, z_copy)


def test_contiguous_input_is_not_copied(monkeypatch: pytest.MonkeyPatch, mlp: Any, rng: np.random.Generator) -> None:
    """With kiln_tensor_wrap, a C-contiguous input of the right dtype is
    lent to kiln: the pointer kiln gets is the array's."""
    import kiln
    from kiln import _capi
    lib = _capi.lib()
    wrap = lib.optional("kiln_tensor_wrap")
    if wrap is None:
        pytest.skip("this libkiln.so has no kiln_tensor_wrap: inputs are copied once (kiln_tensor_create)")
    seen: list[int] = []

    def spy(*args: Any) -> Any:
        seen.append(int(args[3]))
        return wrap(*args)
    monkeypatch.setitem(lib._optional, "kiln_tensor_wrap", spy)
    sess = kiln.InferenceSession(mlp)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = sess.run(["y"], {"x": x})[0]
    assert seen == [x.ctypes.data]
    seen.clear()
    strided = rng.standard_normal((5, 8)).astype(np.float32)[:, ::2]
    sess.run(["y"], {"x": strided})
    assert len(seen) == 1 and seen[0] != strided.ctypes.data  # one conversion, then lent
    assert y.shape == (5, 3)


def test_tensor_from_numpy(rng: np.random.Generator) -> None:
    import kiln
    x = rng.standard_normal((2, 3)).astype(np.float32)
    t = kiln.Tensor.from_numpy(x)
    assert t.shape == (2, 3) and t.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(t), x)
    sess = kiln.InferenceSession(identity_model(TensorProto.FLOAT))
    (y,) = sess.run(None, {"x": t})
    np.testing.assert_array_equal(y, x)
    assert "float" in repr(t)


def test_optional_input_omitted(rt: Any, rng: np.random.Generator) -> None:
    """An optional input left out is an empty optional (OptionalHasElement -> False)."""
    opt = helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])
    opt.type.CopyFrom(helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    model = make_model([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                        helper.make_node("Relu", ["x"], ["y"])],
                       [opt, vi("x", TensorProto.FLOAT, [2])],
                       [vi("has", TensorProto.BOOL, []), vi("y", TensorProto.FLOAT, [2])], opset=18)
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "optional(tensor(float))"
    x = rng.standard_normal(2).astype(np.float32)
    has, _ = sess.run(None, {"o": rng.standard_normal(2).astype(np.float32), "x": x})
    assert bool(has)
    if rt.__name__ == "kiln":  # ONNX Runtime wants every input fed
        has, _ = sess.run(None, {"x": x})
        assert not bool(has)
        has, _ = sess.run(None, {"o": None, "x": x})
        assert not bool(has)


def test_sequence_outputs_are_lists(rt: Any, rng: np.random.Generator) -> None:
    """A sequence output is a list of arrays (kiln_session_run_values), as
    in ONNX Runtime: SequenceConstruct of two computed tensors, and one
    grown by SequenceInsert; the tensor outputs beside it as arrays."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"]),
                        helper.make_node("Neg", ["x"], ["n"]),
                        helper.make_node("SequenceConstruct", ["y", "n"], ["s"]),
                        helper.make_node("SequenceInsert", ["s", "x"], ["s3"])],
                       [vi("x", TensorProto.FLOAT, [3])],
                       [vi("y", TensorProto.FLOAT, [3]),
                        helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [3]),
                        helper.make_tensor_sequence_value_info("s3", TensorProto.FLOAT, [3])])
    sess = rt.InferenceSession(model.SerializeToString(), providers=cpu_providers(rt))
    assert [o.type for o in sess.get_outputs()] == ["tensor(float)", "seq(tensor(float))", "seq(tensor(float))"]
    x = rng.standard_normal(3).astype(np.float32)
    y, s, s3 = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert isinstance(s, list) and len(s) == 2 and isinstance(s3, list) and len(s3) == 3
    np.testing.assert_array_equal(s[0], np.maximum(x, 0))
    np.testing.assert_array_equal(s[1], -x)
    np.testing.assert_array_equal(s3[2], x)
    (only,) = sess.run(["s"], {"x": x})
    assert len(only) == 2


def test_sequence_inputs_from_lists(rt: Any, rng: np.random.Generator) -> None:
    """A sequence input takes a list of arrays (of any length, empty
    included where the op allows), as in ONNX Runtime."""
    model = make_model([helper.make_node("SequenceLength", ["s"], ["n"]),
                        helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0)],
                       [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [None, 2])],
                       [vi("n", TensorProto.INT64, []), vi("c", TensorProto.FLOAT, [None, 2])])
    sess = rt.InferenceSession(model.SerializeToString(), providers=cpu_providers(rt))
    parts = [rng.standard_normal((k, 2)).astype(np.float32) for k in (1, 3, 2)]
    n, c = sess.run(None, {"s": parts})
    assert int(n) == 3
    np.testing.assert_array_equal(c, np.concatenate(parts, 0))


def test_sequence_input_errors(rng: np.random.Generator) -> None:
    """A sequence input fed something else than a list, or items of the
    wrong dtype, raises the documented class naming the input."""
    import kiln
    model = make_model([helper.make_node("SequenceLength", ["s"], ["n"])],
                       [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])],
                       [vi("n", TensorProto.INT64, [])])
    sess = kiln.InferenceSession(model)
    with pytest.raises(kiln.InvalidArgument, match="'s'") as e:
        sess.run(None, {"s": rng.standard_normal(2).astype(np.float32)})
    assert isinstance(e.value, ValueError)
    with pytest.raises(kiln.InvalidArgument, match=r"s\[1\]"):
        sess.run(None, {"s": [np.zeros(2, np.float32), np.zeros(2, np.int64)]})


def test_optional_output_none_and_value(rt: Any, rng: np.random.Generator) -> None:
    """An optional output: None when it holds nothing (ONNX Runtime: None
    too), the array when it holds a tensor."""
    model = make_model([helper.make_node("Optional", ["x"], ["full"]),
                        helper.make_node("Optional", [], ["empty"],
                                         type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))],
                       [vi("x", TensorProto.FLOAT, [2])],
                       [helper.make_value_info("full", helper.make_optional_type_proto(
                           helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
                        helper.make_value_info("empty", helper.make_optional_type_proto(
                            helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))], opset=18)
    try:
        sess = rt.InferenceSession(model.SerializeToString(), providers=cpu_providers(rt))
        x = rng.standard_normal(2).astype(np.float32)
        full, empty = sess.run(None, {"x": x})
    except Exception as e:  # pragma: no cover - a runtime without optional outputs
        if rt.__name__ == "kiln":
            raise
        pytest.skip(f"onnxruntime: {str(e).splitlines()[0][:100]}")
    np.testing.assert_array_equal(full, x)
    assert empty is None


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_no_rss_growth_over_1000_sessions(mlp: Any, rng: np.random.Generator) -> None:
    """1,000 create/run/close cycles: RSS after the last within a bounded
    tolerance of RSS after the first 100 (allocator noise, not a leak per
    cycle: 1,000 leaked sessions would be far above it)."""
    import kiln
    data = mlp.SerializeToString()
    x = rng.standard_normal((2, 4)).astype(np.float32)
    n = int(os.environ.get("KILN_PY_RSS_CYCLES", "1000"))
    if n <= 0:
        pytest.skip("KILN_PY_RSS_CYCLES=0 (the ASan run: its quarantine keeps freed memory)")
    warm = min(100, n // 2)
    base = 0
    for i in range(n):
        with kiln.InferenceSession(data, providers=["ref"] if i % 2 else None) as sess:
            y, z = sess.run(None, {"x": x})
            t = sess.run_tensors(["y"], {"x": x})[0]
            np.from_dlpack(t)
        del y, z, t
        if i == warm:
            gc.collect()
            base = _rss_kb()
    gc.collect()
    grown = _rss_kb() - base
    assert grown < 8 * 1024, f"RSS grew by {grown} kB over {n - warm} cycles"


def test_library_without_the_newer_calls(monkeypatch: pytest.MonkeyPatch, mlp: Any, rng: np.random.Generator,
                                         tmp_path: Any) -> None:
    """On a libkiln.so that predates kiln_tensor_wrap, the metadata and the
    profiling calls (each looked up lazily), sessions still run: inputs are
    copied once, metadata is empty, the profile has the session's events."""
    import json

    import kiln
    from kiln import _capi
    lib = _capi.lib()
    monkeypatch.setattr(lib, "optional", lambda name: None)
    so = kiln.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "old_")
    sess = kiln.InferenceSession(mlp, so)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y, z = sess.run(None, {"x": x})
    from conftest import mlp_reference
    np.testing.assert_allclose(y, mlp_reference(x)[0], rtol=1e-5, atol=1e-6)
    md = sess.get_modelmeta()
    assert md.producer_name == "" and md.custom_metadata_map == {}
    events = json.loads(open(sess.end_profiling()).read())
    assert [e["name"] for e in events if e["cat"] == "Session"][-1] == "model_run"
    assert kiln.get_version_string() == "0.1.0"


def test_release_on_collection(mlp: Any, rng: np.random.Generator) -> None:
    """The kiln tensor goes when its last user does: the numpy view, then a
    DLPack consumer; lent inputs are given back after the run."""
    import weakref

    import kiln
    from kiln import _tensor
    sess = kiln.InferenceSession(mlp)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    (t,) = sess.run_tensors(["y"], {"x": x})
    handle = weakref.ref(t._handle)
    view = t.numpy()
    del t
    gc.collect()
    assert handle() is not None  # the view keeps it
    del view
    gc.collect()
    assert handle() is None
    (t,) = sess.run_tensors(["y"], {"x": x})
    handle = weakref.ref(t._handle)
    consumer = np.from_dlpack(t)
    del t
    gc.collect()
    assert handle() is not None and len(_tensor._dl_live) >= 1
    del consumer
    gc.collect()
    assert handle() is None and not _tensor._dl_live
    assert not _tensor._lent  # kiln released every lent input


def test_output_never_shares_an_input_array(rt: Any, rng: np.random.Generator) -> None:
    """A graph input passed through unchanged (Identity on ref, where kiln's
    output may be the lent input tensor itself) comes back as its own array."""
    providers = ["ref"] if rt.__name__ == "kiln" else ["CPUExecutionProvider"]
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [3])],
                       [vi("y", TensorProto.FLOAT, [3])])
    sess = rt.InferenceSession(model.SerializeToString(), providers=providers)
    x = rng.standard_normal(3).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    expected = x.copy()
    x[:] = 0
    np.testing.assert_array_equal(y, expected)
