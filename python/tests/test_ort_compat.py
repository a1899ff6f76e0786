"""ONNX Runtime's common usage patterns, each run against kiln and against
onnxruntime (the `rt` fixture) so that both are seen to behave the same."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TensorProto, close, helper, make_model, mlp_reference, numpy_helper, vi


def _x(rng: np.random.Generator, n: int = 5) -> np.ndarray:
    return rng.standard_normal((n, 4)).astype(np.float32)


@pytest.mark.parametrize("source", ["str", "path", "bytes", "proto"])
def test_load_from_every_source(rt: Any, mlp: Any, tmp_path: Path, rng: np.random.Generator, source: str) -> None:
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp.SerializeToString())
    model = {"str": str(path), "path": path, "bytes": mlp.SerializeToString(), "proto": mlp}[source]
    if source == "proto" and rt.__name__ == "onnxruntime":
        model = mlp.SerializeToString()  # onnxruntime takes a path or bytes only
    sess = rt.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = _x(rng)
    y, z = sess.run(None, {"x": x})
    ry, rz = mlp_reference(x)
    close(y, ry)
    close(z, rz)
    assert y.dtype == np.float32 and y.shape == (5, 3)


def test_run_all_or_some_outputs(rt: Any, mlp: Any, rng: np.random.Generator) -> None:
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _x(rng, 2)
    every = sess.run(None, {"x": x})
    assert isinstance(every, list) and len(every) == 2
    (z,) = sess.run(["z"], {"x": x})
    close(z, every[1])
    z2, y2 = sess.run(["z", "y"], {"x": x})
    close(y2, every[0])
    close(z2, every[1])


def test_metadata_symbolic_and_unknown_dims(rt: Any) -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Cast", ["x"], ["c"], to=7)],
                       [vi("x", TensorProto.FLOAT, ["batch", None, 3])],
                       [vi("y", TensorProto.FLOAT, ["batch", None, 3]), vi("c", TensorProto.INT64, ["batch", None, 3])])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (i,) = sess.get_inputs()
    assert (i.name, i.type, i.shape) == ("x", "tensor(float)", ["batch", None, 3])
    o = sess.get_outputs()
    assert [(a.name, a.type, a.shape) for a in o] == [("y", "tensor(float)", ["batch", None, 3]),
                                                       ("c", "tensor(int64)", ["batch", None, 3])]


def test_metadata_unknown_rank(rt: Any) -> None:
    """A value of unknown rank has shape [] in ONNX Runtime (as a scalar's)."""
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [vi("x", TensorProto.FLOAT, None), vi("s", TensorProto.INT64, ["k"])],
                       [vi("y", TensorProto.FLOAT, None)])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(a.name, a.type, a.shape) for a in sess.get_inputs() + sess.get_outputs()] == [
        ("x", "tensor(float)", []), ("s", "tensor(int64)", ["k"]), ("y", "tensor(float)", [])]


def test_list_and_noncontiguous_inputs(rt: Any, mlp: Any, rng: np.random.Generator) -> None:
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _x(rng, 3)
    (from_list,) = sess.run(["y"], {"x": x.tolist()})
    close(from_list, mlp_reference(x)[0])
    wide = rng.standard_normal((3, 8)).astype(np.float32)
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    (y,) = sess.run(["y"], {"x": strided})
    close(y, mlp_reference(np.ascontiguousarray(strided))[0])
    transposed = np.asfortranarray(x)
    (y,) = sess.run(["y"], {"x": transposed})
    close(y, mlp_reference(x)[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_intra_op_threads(rt: Any, mlp: Any, rng: np.random.Generator, threads: int) -> None:
    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = rt.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = rt.InferenceSession(mlp.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = _x(rng, 16)
    close(sess.run(["y"], {"x": x})[0], mlp_reference(x)[0])


def test_profiling_json(rt: Any, mlp: Any, rng: np.random.Generator, tmp_path: Path) -> None:
    so = rt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = rt.InferenceSession(mlp.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, {"x": _x(rng)})
    name = sess.end_profiling()
    assert name and Path(name).exists() and Path(name).name.startswith("prof")
    events = json.loads(Path(name).read_text())
    assert isinstance(events, list) and events
    for e in events:
        assert {"cat", "name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e), e
        assert e["ph"] == "X" and isinstance(e["ts"], int) and isinstance(e["dur"], int)
    assert sum(e["name"] == "model_run" for e in events) == 3
    nodes = [e for e in events if e["cat"] == "Node"]
    if rt.__name__ == "kiln":
        from kiln import _capi
        if _capi.lib().optional("kiln_session_profile_json") is None:
            return  # an older libkiln.so: the session's events only
    assert nodes, "no per-node events"
    for e in nodes:
        assert e["name"].endswith("_kernel_time") and e["args"]["op_name"] and e["args"]["provider"]
    runs = [e for e in events if e["name"] == "model_run"]
    first, last = runs[0]["ts"], runs[-1]["ts"] + runs[-1]["dur"]
    slack = 2000  # us: the two clocks are read at slightly different moments
    assert all(first - slack <= e["ts"] <= last + slack for e in nodes), (first, last, nodes[:3])


def test_profiling_ends_with_end_profiling(rt: Any, mlp: Any, rng: np.random.Generator, tmp_path: Path) -> None:
    so = rt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "once")
    sess = rt.InferenceSession(mlp.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": _x(rng)})
    assert sess.end_profiling()
    sess.run(None, {"x": _x(rng)})
    assert sess.end_profiling() == ""


def test_profiling_off_returns_empty(rt: Any, mlp: Any) -> None:
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.end_profiling() == ""


def test_concurrent_runs_on_one_session(rt: Any, mlp: Any) -> None:
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for _ in range(20):
                x = r.standard_normal((int(r.integers(1, 9)), 4)).astype(np.float32)
                close(sess.run(["y"], {"x": x})[0], mlp_reference(x)[0])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_providers(rt: Any, mlp: Any) -> None:
    assert "CPUExecutionProvider" in rt.get_available_providers()
    assert rt.get_device() in ("CPU", "GPU")
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_providers()[0] == "CPUExecutionProvider"
    assert "CPUExecutionProvider" in sess.get_provider_options()


def test_modelmeta(rt: Any, mlp: Any) -> None:
    if rt.__name__ == "kiln":
        from kiln import _capi
        if _capi.lib().optional("kiln_model_metadata_get") is None:
            pytest.skip("this libkiln.so predates kiln_model_metadata_get")
    mlp.producer_name = "kiln-tests"
    mlp.producer_version = "1.0"
    mlp.domain = "org.kiln.test"
    mlp.doc_string = "a small MLP"
    mlp.graph.doc_string = "the graph's own words"
    mlp.model_version = 42
    helper.set_model_props(mlp, {"author": "kiln", "license": "MIT"})
    md = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"]).get_modelmeta()
    assert md.producer_name == "kiln-tests"
    assert md.graph_name == "mlp"
    assert md.domain == "org.kiln.test"
    assert md.description == "a small MLP"
    assert md.graph_description == "the graph's own words"
    assert md.version == 42
    assert md.custom_metadata_map == {"author": "kiln", "license": "MIT"}


def test_modelmeta_unset_fields(rt: Any, mlp: Any) -> None:
    if rt.__name__ == "kiln":
        from kiln import _capi
        if _capi.lib().optional("kiln_model_metadata_get") is None:
            pytest.skip("this libkiln.so predates kiln_model_metadata_get")
    md = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"]).get_modelmeta()
    assert (md.producer_name, md.domain, md.description, md.graph_description) == ("", "", "", "")
    assert md.graph_name == "mlp" and md.version == 2**63 - 1 and md.custom_metadata_map == {}


def test_run_options_accepted(rt: Any, mlp: Any, rng: np.random.Generator) -> None:
    ro = rt.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "t"
    sess = rt.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _x(rng)
    close(sess.run(["y"], {"x": x}, ro)[0], mlp_reference(x)[0])


def test_initializer_input_can_be_overridden(rt: Any, rng: np.random.Generator) -> None:
    """A graph input with an initializer is not listed by get_inputs() but
    can be fed by name, in both runtimes."""
    b = rng.standard_normal(3).astype(np.float32)
    model = make_model([helper.make_node("Add", ["x", "b"], ["y"])],
                       [vi("x", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [3])],
                       [vi("y", TensorProto.FLOAT, [2, 3])], [numpy_helper.from_array(b, "b")])
    sess = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    close(sess.run(None, {"x": x})[0], x + b)
    b2 = rng.standard_normal(3).astype(np.float32)
    close(sess.run(None, {"x": x, "b": b2})[0], x + b2)


# ---- kiln only: what ONNX Runtime's API does not have --------------------------------


def test_close_and_context_manager(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    x = _x(rng)
    with kiln.InferenceSession(mlp) as sess:
        (y,) = sess.run(["y"], {"x": x})
    close(y, mlp_reference(x)[0])  # the output outlives the session
    with pytest.raises(kiln.InvalidArgument, match="closed"):
        sess.run(None, {"x": x})
    sess.close()  # idempotent


def test_kiln_device_names(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    x = _x(rng)
    avail = kiln.get_available_providers()
    for p in ["ref", "cpu", ("ref", {}), ("cpu", {"device_id": 0})]:
        name = p[0] if isinstance(p, tuple) else p
        if name == "cpu" and "CPUExecutionProvider" not in avail:
            continue
        sess = kiln.InferenceSession(mlp, providers=[p])
        close(sess.run(["y"], {"x": x})[0], mlp_reference(x)[0])
    for dev in avail:
        if dev.split(":")[0] in ("vulkan", "opencl"):
            sess = kiln.InferenceSession(mlp, providers=[dev])
            close(sess.run(["y"], {"x": x})[0], mlp_reference(x)[0], rtol=1e-4, atol=1e-5)


def test_set_providers(mlp: Any, rng: np.random.Generator) -> None:
    import kiln
    sess = kiln.InferenceSession(mlp)
    sess.set_providers(["ref"])
    assert sess.get_providers() == ["ref"]
    x = _x(rng)
    close(sess.run(["y"], {"x": x})[0], mlp_reference(x)[0])


def test_version() -> None:
    import kiln
    assert kiln.get_version_string().count(".") == 2
    assert kiln.__version__
