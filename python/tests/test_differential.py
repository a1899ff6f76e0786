"""kiln against ONNX Runtime in one process: the repository's test models
(build/models, made by tests/models/export_models.py), the example model
(examples/models/shapes.onnx) and the ONNX node tests that kiln's
C conformance test passes, through kiln.InferenceSession and
onnxruntime.InferenceSession: get_inputs()/get_outputs() equal field by
field, outputs equal within per-dtype tolerances.

And onnx.backend.test.BackendTest over kiln.backend for the node
cases from tests/conformance/expected_pass*.txt (the onnx package's own
copies of the cases)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
from conftest import BUILD, REPO

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

# (rtol, atol) per numpy dtype kind/size; exact for everything else.
TOLERANCE = {np.dtype(np.float64): (1e-7, 1e-9), np.dtype(np.float32): (1e-4, 1e-5),
             np.dtype(np.float16): (1e-2, 1e-3), np.dtype(np.complex64): (1e-4, 1e-5),
             np.dtype(np.complex128): (1e-7, 1e-9)}


def _compare(name: str, got: Any, want: Any, loose: float = 1.0) -> None:
    if got is None or want is None or isinstance(got, list) or isinstance(want, list):  # optionals, sequences
        assert (got is None) == (want is None), f"{name}: {got!r}, onnxruntime {want!r}"
        if isinstance(got, list) or isinstance(want, list):
            assert isinstance(got, list) and isinstance(want, list) and len(got) == len(want), \
                f"{name}: a sequence of {len(got) if isinstance(got, list) else got!r}, onnxruntime " \
                f"{len(want) if isinstance(want, list) else want!r}"
            for k, (g, w) in enumerate(zip(got, want)):
                _compare(f"{name}[{k}]", g, w, loose)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, onnxruntime {want.shape}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, onnxruntime {want.dtype}"
    if got.dtype in TOLERANCE:
        rtol, atol = TOLERANCE[got.dtype]
        np.testing.assert_allclose(got, want, rtol=rtol * loose, atol=atol * loose, equal_nan=True, err_msg=name)
    elif got.dtype.kind == "f":  # bfloat16 and the narrow floats (ml_dtypes)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2,
                                   equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def _same_io(ks: Any, os_: Any) -> None:
    for what, a, b in (("input", ks.get_inputs(), os_.get_inputs()), ("output", ks.get_outputs(), os_.get_outputs())):
        assert [x.name for x in a] == [x.name for x in b], what
        for x, y in zip(a, b):
            assert x.type == y.type, f"{what} {x.name}: type {x.type}, onnxruntime {y.type}"
            assert x.shape == y.shape, f"{what} {x.name}: shape {x.shape}, onnxruntime {y.shape}"


def _feed_for(sess: Any, rng: np.random.Generator, given: Optional[dict[str, np.ndarray]] = None
              ) -> dict[str, np.ndarray]:
    feed = dict(given or {})
    for i in sess.get_inputs():
        if i.name in feed:
            continue
        shape = [d if isinstance(d, int) else 2 for d in (i.shape or [])]
        assert i.type == "tensor(float)", f"no random input for {i.type}"
        feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def _models() -> list[Any]:
    out = []
    names = ["mlp", "small_cnn", "small_cnn_dyn", "transformer_encoder", "mobilenet_v2"]
    for n in names:
        out.append(pytest.param(BUILD / "models" / f"{n}.onnx", id=n))
    out.append(pytest.param(REPO / "examples" / "models" / "shapes.onnx", id="example_shapes"))
    return out


@pytest.mark.parametrize("path", _models())
def test_models_match_onnxruntime(ort: Any, path: Path, rng: np.random.Generator) -> None:
    import kiln
    if not path.exists():
        pytest.skip(f"{path} not built (tests/models/export_models.py build/models)")
    ks = kiln.InferenceSession(str(path))
    os_ = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    _same_io(ks, os_)
    given: dict[str, np.ndarray] = {}
    sample = path.with_name(path.stem + ".input.npy")
    if path.name == "shapes.onnx":
        sample = path.with_name("sample_circle.npy")
    if sample.exists():
        given[ks.get_inputs()[0].name] = np.load(sample)
    feed = _feed_for(ks, rng, given)
    got = ks.run(None, feed)
    want = os_.run(None, feed)
    for o, g, w in zip(ks.get_outputs(), got, want):
        _compare(f"{path.name}:{o.name}", g, w, loose=10.0)  # deep models: sums in other orders


# ---- ONNX node tests -------------------------------------------------------------


def _node_data() -> tuple[Optional[Path], Optional[Path]]:
    """(folder of node cases, its expected-pass list): the newest-ONNX cases
    where this build made them, else Debian's libonnx-testdata."""
    latest = BUILD / "onnx-node-latest" / "node"
    if latest.is_dir() and any(latest.iterdir()):
        return latest, REPO / "tests" / "conformance" / "expected_pass_onnx_latest.txt"
    debian = Path("/usr/share/libonnx-testdata/data/node")
    if debian.is_dir():
        return debian, REPO / "tests" / "conformance" / "expected_pass.txt"
    return None, None


# Cases whose outputs are random draws (as tests/conformance/conformance.c
# lists them): no two runtimes agree on their values.
RANDOM = ("test_bernoulli", "test_training_dropout")


def _passing(expect: Path) -> list[str]:
    return sorted(c for c in (line.split("/", 1)[1] for line in expect.read_text().splitlines()
                              if line.startswith("node/"))
                  if not c.startswith(RANDOM) or c.startswith("test_training_dropout_zero_ratio"))


def _elem_type(t: Any) -> int:
    """The element type of a tensor, sequence or optional type proto (0: none)."""
    if t.HasField("tensor_type"):
        return int(t.tensor_type.elem_type)
    if t.HasField("sequence_type"):
        return _elem_type(t.sequence_type.elem_type)
    if t.HasField("optional_type"):
        return _elem_type(t.optional_type.elem_type)
    return 0


def _tensors_only(model: Any) -> bool:
    """Whether every graph input and output is a tensor, a sequence of
    tensors or an optional of either (maps are not ONNX Runtime's to run
    here either), of an element type numpy holds here (bfloat16 and the
    narrow types need ml_dtypes, as in onnxruntime)."""
    from kiln import _dtypes
    inits = {t.name for t in model.graph.initializer}
    io = [v for v in list(model.graph.input) + list(model.graph.output) if v.name not in inits]
    return all(0 < _elem_type(v.type) and (_elem_type(v.type) < 16 or _dtypes.ml_dtypes_available()) for v in io)


def _node_sample() -> list[Any]:
    folder, expect = _node_data()
    if folder is None or expect is None:
        return [pytest.param(None, id="no-node-data")]
    every = int(os.environ.get("KILN_PY_NODE_EVERY", "1"))
    cases = _passing(expect)[::every]
    return [pytest.param(folder / c, id=c) for c in cases if (folder / c).is_dir()]


def _read_value(f: Path, t: Any) -> Any:
    """One .pb of a node case as its graph value's type says: an array, a
    list of arrays (SequenceProto) or an optional's array or None."""
    if t.HasField("sequence_type"):
        sp = onnx.SequenceProto()
        sp.ParseFromString(f.read_bytes())
        return [numpy_helper.to_array(x) for x in sp.tensor_values]
    if t.HasField("optional_type"):
        op = onnx.OptionalProto()
        op.ParseFromString(f.read_bytes())
        if op.HasField("tensor_value"):
            return numpy_helper.to_array(op.tensor_value)
        if op.HasField("sequence_value"):
            return [numpy_helper.to_array(x) for x in op.sequence_value.tensor_values]
        return None
    tp = onnx.TensorProto()
    tp.ParseFromString(f.read_bytes())
    return numpy_helper.to_array(tp)


def _load_case(case: Path) -> tuple[bytes, list[Any], list[Any]]:
    data = case / "test_data_set_0"
    model_bytes = (case / "model.onnx").read_bytes()
    model = onnx.load_from_string(model_bytes)
    inits = {t.name for t in model.graph.initializer}
    types = {"input": [v.type for v in model.graph.input if v.name not in inits],
             "output": [v.type for v in model.graph.output]}

    def read(prefix: str) -> list[Any]:
        files = sorted(data.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return [_read_value(f, types[prefix][i]) for i, f in enumerate(files)]
    return model_bytes, read("input"), read("output")


@pytest.mark.parametrize("case", _node_sample())
def test_node_cases_match_onnxruntime(ort: Any, case: Optional[Path]) -> None:
    import kiln
    if case is None:
        pytest.skip("no ONNX node test data (build/onnx-node-latest or libonnx-testdata)")
    model = onnx.load_from_string((case / "model.onnx").read_bytes())
    if not _tensors_only(model):
        pytest.skip("maps, or element types numpy does not hold here")
    model_bytes, inputs, expected = _load_case(case)
    graph_inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    assert len(inputs) == len(graph_inputs)
    try:
        os_ = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(graph_inputs, inputs)}
        want = os_.run(None, feed)
    except Exception as e:  # onnxruntime lacks the op or the opset: nothing to compare with
        pytest.skip(f"onnxruntime cannot run it: {str(e).splitlines()[0][:120]}")
    ks = kiln.InferenceSession(model_bytes)
    _same_io(ks, os_)
    got = ks.run(None, feed)
    assert len(got) == len(want) == len(expected)
    for o, g, w, e in zip(ks.get_outputs(), got, want, expected):
        try:
            _compare(f"{case.name}:{o.name}", g, w, loose=10.0)
        except AssertionError:
            # Where the two disagree the case's own expected output decides:
            # kiln must match it (onnxruntime deviates, e.g. CastLike to
            # string prints 9 digits where ONNX's reference prints the shortest).
            _compare(f"{case.name}:{o.name} (against the case's expected output)", g, e, loose=10.0)


# ---- onnx.backend.test over kiln.backend ----------------------------------------------


def _backend_data() -> tuple[Path, Path]:
    """The expected-pass list for the cases of the onnx that BackendTest
    runs here, and a folder of the same cases' models: onnx 1.23 (the venv's
    pin) for the newest list, onnx 1.12 (Debian's, the same cases as
    libonnx-testdata) for the other."""
    conf = REPO / "tests" / "conformance"
    version = tuple(int(v) for v in onnx.__version__.split(".")[:2])
    latest = BUILD / "onnx-node-latest" / "node"
    own = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if version < (1, 13) and own.is_dir():
        return conf / "expected_pass.txt", own
    # Newer onnx: the newest list (every case of 1.23.2 passes); its models
    # from build/onnx-node-latest, else those of libonnx-testdata's cases of
    # the same names (the ones it lacks are left out).
    debian = Path("/usr/share/libonnx-testdata/data/node")
    return conf / "expected_pass_onnx_latest.txt", latest if latest.is_dir() else debian


def _backend_selection(expect: Path) -> list[str]:
    """Node cases that kiln's C conformance passes (KILN_PY_BACKEND_EVERY=N: one in N; the
    patterns BackendTest includes)."""
    every = int(os.environ.get("KILN_PY_BACKEND_EVERY", "1"))
    return _passing(expect)[::every]


def _backend_tests() -> dict[str, Any]:
    try:
        import onnx.backend.test

        import kiln.backend
    except ImportError:  # pragma: no cover - onnx without its backend tests
        return {}
    if tuple(int(v) for v in onnx.__version__.split(".")[:2]) < (1, 13) and "object" not in vars(np):
        # onnx 1.12's runner (Debian's) still says np.object, which numpy
        # 1.24 removed: give it the builtin it meant.
        np.object = object  # type: ignore[attr-defined]
    # The models, to leave out those with sequence or optional inputs and
    # outputs (onnx >= 1.15 generates its cases in memory: the copy
    # gen_onnx_node_cases.py wrote is read instead).
    expect, data = _backend_data()
    # onnx's runner compares a sequence item by item with len(), which a
    # 0-d item has not (test_loop16_seq_none: a TypeError in the runner
    # itself, onnxruntime.backend's too); test_node_cases_match_onnxruntime
    # compares that case.
    runner_cannot = {"test_loop16_seq_none"}
    selected = {f"{n}_cpu" for n in _backend_selection(expect)
                if n not in runner_cannot and (data / n / "model.onnx").exists()
                and _tensors_only(onnx.load(str(data / n / "model.onnx")))}
    class KilnBackendTest(onnx.backend.test.BackendTest):  # type: ignore[misc]
        @classmethod
        def assert_similar_outputs(cls, ref_outputs: Any, outputs: Any, rtol: float, atol: float,
                                   *args: Any, **kwargs: Any) -> None:
            # kiln's conformance tolerance (tests/conformance/conformance.c:
            # |got - want| <= 1e-4 + 1e-3 |want|) where a case asks for less:
            # the inverse DFT's zeros are 3e-15 here and 1.9e-7 in the data.
            super().assert_similar_outputs(ref_outputs, outputs, max(rtol, 1e-3), max(atol, 1e-4), *args, **kwargs)

    bt = KilnBackendTest(kiln.backend, __name__)
    for name in sorted(selected):
        bt.include(f"^{name}$")
    cases = dict(bt.test_cases)
    # Only the selected cases, not thousands of "no matched include pattern" skips.
    for cls in cases.values():
        for attr in [a for a in vars(cls) if a.startswith("test_") and a not in selected]:
            delattr(cls, attr)
    return cases


globals().update(_backend_tests())
