"""`python -m kiln` against the `kiln` binary (issue 14, item 6): the same
arguments and the same output for info (text, --dot, --json, --device),
verify (tolerances and --max-report reaching the comparison), run and
bench --fp16 (SessionOptions.precision), run's sequence inputs and outputs;
and the C API behind them (kiln.model_info, kiln.model_dot, kiln.verify's
tolerances) against onnx's own reading of the models."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from conftest import BUILD, KILN_BIN_SAME_BUILD, REPO, make_model, mlp_model, vi
from onnx import TensorProto, helper, numpy_helper
from test_tools import SHAPES, kiln_bin, py_kiln

same_build = pytest.mark.skipif(not KILN_BIN_SAME_BUILD, reason="the kiln binary is another build's")


def has_cpu() -> bool:
    return any(d.name == "cpu" for d in kiln.devices())


def chain_model() -> Any:
    """x[1, 256] -> MatMul -> Tanh -> MatMul -> Tanh -> MatMul -> y: sums of
    256 products, which the cpu's kernels add in another order than ref, so
    their results differ in the last bits (several values, in graph order)."""
    rng = np.random.default_rng(3)
    ws = [numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"W{i}")
          for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h0"], name="mm0"),
             helper.make_node("Tanh", ["h0"], ["t0"], name="tanh0"),
             helper.make_node("MatMul", ["t0", "W1"], ["h1"], name="mm1"),
             helper.make_node("Tanh", ["h1"], ["t1"], name="tanh1"),
             helper.make_node("MatMul", ["t1", "W2"], ["y"], name="mm2")]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [1, 256])], [vi("y", TensorProto.FLOAT, [1, 256])], ws,
                      name="chain")


def loop_model() -> Any:
    """An If with two bodies, a symbolic input dim and metadata: subgraph
    nodes count in the histogram."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"])], "then", [],
                               [vi("a", TensorProto.FLOAT, ["n", 2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Relu", ["b"], ["c"])], "else",
                               [], [vi("c", TensorProto.FLOAT, ["n", 2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="if0")]
    m = make_model(nodes, [vi("cond", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, ["n", 2])],
                   [vi("y", TensorProto.FLOAT, ["n", 2])], name="branches", producer_name="test",
                   producer_version="1.2", model_version=7)
    helper.set_model_props(m, {"author": "kiln tests", "licence": "MIT"})
    return m


def info_models(tmp_path: Path) -> list[Path]:
    paths = sorted((REPO / "examples" / "models").glob("*.onnx"))
    paths += sorted((REPO / "tests" / "conformance" / "models").glob("*.onnx"))
    paths += [p for p in (BUILD / "models" / f"{n}.onnx" for n in ("mlp", "small_cnn")) if p.exists()]
    for name, m in (("mlp", mlp_model()), ("chain", chain_model()), ("branches", loop_model())):
        p = tmp_path / f"{name}.onnx"
        p.write_bytes(m.SerializeToString())
        paths.append(p)
    return paths


def mask_ms(text: str) -> str:
    return re.sub(r"[0-9.]+ ms", "X ms", text)


# ---- info ----------------------------------------------------------------------------------


@same_build
def test_info_prints_what_kiln_info_prints(tmp_path, monkeypatch):
    # The cpu's description counts the kernels its JIT has compiled so far: compile them all first.
    monkeypatch.setenv("KILN_JIT", "sync")
    devices = ["ref"] + (["cpu"] if has_cpu() else [])
    variants = [[], ["--dot"], ["--json"]] + [["--device", d] for d in devices] + [["--device", "ref", "--json"]]
    for path in info_models(tmp_path):
        for args in variants:
            py, cli = py_kiln("info", str(path), *args), kiln_bin("info", str(path), *args)
            what = f"info {path.name} {' '.join(args)}"
            assert (py.returncode, py.stdout, py.stderr) == (cli.returncode, cli.stdout, cli.stderr), what
    # The models above cover what the summary can hold.
    text = py_kiln("info", str(tmp_path / "branches.onnx")).stdout
    assert "  author: kiln tests" in text and "nodes: 4 (1 in the main graph)" in text and "  (n,_)" in text
    assert "unsupported ops: NoSuchOp (node 'mystery')" in py_kiln(
        "info", str(REPO / "tests" / "conformance" / "models" / "unknown_op.onnx")).stdout


def test_model_info_against_onnx(tmp_path):
    m = loop_model()
    path = tmp_path / "branches.onnx"
    path.write_bytes(m.SerializeToString())
    infos = [kiln.model_info(x) for x in (str(path), path, m.SerializeToString(), m)]
    assert all(i == infos[0] for i in infos)
    i = infos[0]
    assert i["producer_name"] == "test" and i["producer_version"] == "1.2" and i["model_version"] == 7
    assert i["metadata_props"] == [{"key": p.key, "value": p.value} for p in m.metadata_props]
    assert i["opsets"] == [{"domain": "ai.onnx", "version": 17}]
    assert [(x["name"], x["dtype"], x["shape"]) for x in i["inputs"]] == [("cond", "bool", []), ("x", "f32", ["n", 2])]
    assert i["nodes"] == 4 and i["main_graph_nodes"] == 1
    assert i["op_histogram"] == [{"op": "Relu", "count": 2}, {"op": "If", "count": 1}, {"op": "Neg", "count": 1}]
    assert i["unsupported_ops"] == [] and i["initializers"] == 0
    c = kiln.model_info(chain_model())
    assert c["parameters"] == 3 * 256 * 256 and c["parameter_bytes"] == 4 * c["parameters"]
    assert c["flops"] >= 3 * 2 * 256 * 256  # three [1,256] x [256,256] products
    dot = kiln.model_dot(m)
    assert dot.startswith("digraph kiln {") and dot.endswith("}\n") and "If\\nif0" in dot
    with pytest.raises(kiln.InvalidModel):
        kiln.model_info(b"not a model")


# ---- verify ---------------------------------------------------------------------------------


@pytest.mark.skipif(not has_cpu(), reason="no cpu device in this library")
def test_verify_tolerances_reach_the_comparison(tmp_path):
    m = chain_model()
    loose = kiln.verify(m, "cpu")
    assert loose["ok"] and (loose["rtol"], loose["atol"]) == (1e-3, 1e-4) and loose["max_abs_err"] > 0, loose
    tight = kiln.verify(m, "cpu", rtol=0, atol=0)
    assert not tight["ok"] and (tight["rtol"], tight["atol"]) == (0, 0)
    fd = tight["first_divergence"]
    assert fd["tolerance"] == {"rtol": 0, "atol": 0} and fd["n_bad"] >= 1 and fd["max_abs_err"] > 0
    # An atol just above the largest error passes; just below it, fails: the number is the comparison's.
    err = loose["max_abs_err"]
    assert kiln.verify(m, "cpu", rtol=0, atol=err * 1.01)["ok"]
    assert not kiln.verify(m, "cpu", rtol=0, atol=err * 0.5)["ok"]
    n = tight["diverging"]
    assert n >= 3 and len(tight["later_divergences"]) == min(n - 1, 5)
    assert [d["node_index"] for d in tight["later_divergences"]] == sorted(d["node_index"]
                                                                           for d in tight["later_divergences"])
    assert kiln.verify(m, "cpu", rtol=0, atol=0, max_report=1)["later_divergences"] == tight["later_divergences"][:1]
    assert kiln.verify(m, "cpu", rtol=0, atol=0, max_report=0)["later_divergences"] == []
    for bad in ({"rtol": -1}, {"atol": float("nan")}, {"atol": float("inf")}, {"max_report": -1}):
        with pytest.raises(kiln.InvalidArgument):
            kiln.verify(m, "cpu", **bad)
    # The command line: the options applied, and the text the binary prints.
    path = tmp_path / "chain.onnx"
    path.write_bytes(m.SerializeToString())
    assert py_kiln("verify", str(path), "--device", "cpu").returncode == 0
    for args in (["--rtol", "0", "--atol", "0"], ["--rtol", "0", "--atol", "0", "--max-report", "1"],
                 ["--atol", "1e-9", "--rtol", "1e-9", "--max-report", "0"], []):
        py = py_kiln("verify", str(path), "--device", "cpu", *args)
        assert py.returncode == (0 if not args else 1), (args, py.stdout, py.stderr)
        if KILN_BIN_SAME_BUILD:
            cli = kiln_bin("verify", str(path), "--device", "cpu", *args)
            assert (py.returncode, mask_ms(py.stdout)) == (cli.returncode, mask_ms(cli.stdout)), args
    one = py_kiln("verify", str(path), "--device", "cpu", "--rtol", "0", "--atol", "0", "--max-report", "1").stdout
    assert "later diverging values (graph order):" in one and f"... and {n - 2} more" in one
    j = json.loads(py_kiln("verify", str(path), "--device", "cpu", "--rtol", "0.5", "--json").stdout)
    assert j["ok"] and j["rtol"] == 0.5
    bad = py_kiln("verify", str(path), "--rtol", "-1")
    assert bad.returncode == 1 and "rtol" in bad.stderr


# ---- precision ------------------------------------------------------------------------------


def test_session_options_precision():
    so = kiln.SessionOptions()
    assert so.precision == "fp32"
    so.precision = "fp16"
    assert so.precision == "fp16"
    for bad in ("fp8", "FP16", 16, None):
        with pytest.raises(ValueError, match="precision"):
            so.precision = bad  # type: ignore[assignment]
    assert so.precision == "fp16"
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    outs = {}
    for dev in ["ref"] + (["cpu"] if has_cpu() else []):
        for prec in ("fp32", "fp16"):
            so = kiln.SessionOptions()
            so.precision = prec
            with kiln.InferenceSession(mlp_model(), so, providers=[dev]) as s:
                assert s.info()["precision"] == prec  # it reached kiln_session_options
                outs[dev, prec] = s.run(None, {"x": x})
        # cpu and ref accept fp16 and compute in fp32, as `kiln run --fp16` there
        for a, b in zip(outs[dev, "fp32"], outs[dev, "fp16"]):
            np.testing.assert_array_equal(a, b)


def test_run_and_bench_fp16():
    args = ["run", str(SHAPES), "--input", f"image={REPO / 'examples' / 'models' / 'sample_circle.npy'}", "--fp16"]
    py = py_kiln(*args)
    assert py.returncode == 0, py.stderr
    if KILN_BIN_SAME_BUILD:
        assert py.stdout == kiln_bin(*args).stdout
    b = json.loads(py_kiln("bench", str(SHAPES), "--iterations", "2", "--warmup", "0", "--fp16", "--json").stdout)
    assert b["precision"] == "fp16"
    b = json.loads(py_kiln("bench", str(SHAPES), "--iterations", "2", "--warmup", "0", "--json").stdout)
    assert b["precision"] == "fp32"
    assert kiln.bench(str(SHAPES), iterations=1, warmup=0, precision="fp16")["precision"] == "fp16"
    with pytest.raises(ValueError):
        kiln.bench(str(SHAPES), iterations=1, precision="half")


# ---- run: sequences, threads ------------------------------------------------------------------


def test_run_sequences_as_kiln_run(tmp_path):
    seq_f = helper.make_tensor_sequence_value_info
    nodes = [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
             helper.make_node("SplitToSequence", ["y"], ["parts"], axis=0, keepdims=1)]
    m = make_model(nodes, [seq_f("s", TensorProto.FLOAT, [2])],
                   [vi("y", TensorProto.FLOAT, ["n"]), seq_f("parts", TensorProto.FLOAT, [1])])
    path = tmp_path / "seq.onnx"
    path.write_bytes(m.SerializeToString())
    np.savez(tmp_path / "s.npz", a=np.array([1, 2], np.float32), b=np.array([3, 4], np.float32))
    args = ["run", str(path), "--input", f"s={tmp_path / 's.npz'}"]
    py = py_kiln(*args)
    assert py.returncode == 0, py.stderr
    assert "parts: sequence of 4 f32 tensors" in py.stdout and "  [3] [1]" in py.stdout
    if KILN_BIN_SAME_BUILD:
        assert py.stdout == kiln_bin(*args).stdout
    assert py_kiln(*args, "--output-dir", str(tmp_path / "py")).returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "py" / "output_0.npy"), [1, 2, 3, 4])
    with np.load(tmp_path / "py" / "output_1.npz") as z:
        assert z.files == ["item_0", "item_1", "item_2", "item_3"] and z["item_2"].tolist() == [3]
    if KILN_BIN_SAME_BUILD:
        kiln_bin(*args, "--output-dir", str(tmp_path / "cli"))
        with np.load(tmp_path / "cli" / "output_1.npz") as z:
            assert z.files == ["item_0", "item_1", "item_2", "item_3"]
    r = py_kiln("run", str(SHAPES), "--threads", "0")
    assert r.returncode == 1 and "--threads needs a positive number" in r.stderr


# ---- the options themselves ---------------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["run", "info", "bench", "verify", "devices", "train"])
def test_every_option_of_the_binary(cmd):
    """Every option `kiln CMD --help` names, `python -m kiln CMD --help`
    names too (run's --labels/--top are the package's own additions)."""
    cli = kiln_bin(cmd, "--help")
    py = py_kiln(cmd, "--help")
    assert py.returncode == 0
    want = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", cli.stdout)) - {"--help"}
    got = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", py.stdout))
    assert want and want <= got, f"python -m kiln {cmd} lacks {sorted(want - got)}"
