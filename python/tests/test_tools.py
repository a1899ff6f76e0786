"""kiln's own tools from Python (python/kiln/_tools.py) and `python -m kiln`
(python/kiln/__main__.py), held to the `kiln` binary's own reports and
output where both exist: devices, info, verify, bench, profile, run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from conftest import KILN_BIN, KILN_BIN_SAME_BUILD, REPO, mlp_model

SHAPES = REPO / "examples" / "models" / "shapes.onnx"
CIRCLE = REPO / "examples" / "models" / "sample_circle.npy"
LABELS = REPO / "examples" / "models" / "shapes_labels.txt"


def kiln_bin(*args: str) -> subprocess.CompletedProcess:
    if not KILN_BIN.exists():
        pytest.skip(f"no kiln binary at {KILN_BIN}")
    return subprocess.run([str(KILN_BIN), *args], capture_output=True, text=True)


def py_kiln(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True, env=env)


# ---- devices ---------------------------------------------------------------------------


def test_devices_are_kiln_devices_json():
    devs = kiln.devices()
    assert devs and all(d.available for d in devs)
    ref = json.loads(kiln_bin("devices", "--json").stdout)
    assert [d.name for d in devs] == [d["name"] for d in ref["devices"]]
    for d, r in zip(devs, ref["devices"]):
        assert (d.vendor, d.memory, d.memory_bytes, list(d.features)) == \
               (r["vendor"], r["memory"], r["memory_bytes"], r["features"])
    every = kiln.devices(include_absent=True)
    assert [d.name for d in every if not d.available] == [a["name"] for a in ref["absent"]]
    assert all(d.reason for d in every if not d.available)
    assert "ref" in [d.name for d in devs] and isinstance(devs[0].as_dict()["features"], list)


# ---- session reports -------------------------------------------------------------------


def test_session_info_lists_kernels_and_memory():
    with kiln.InferenceSession(str(SHAPES), providers=["cpu"]) as s:
        r = s.info()
    assert r["device"] == "cpu" and r["mode"] == "compiled" and r["nodes_on_ref"] == 0
    ops = [k["op"] for k in r["kernels"]]
    assert "Conv+Relu" in ops and r["n_kernels"] == len(r["kernels"])
    import onnx
    nodes = sorted(n.name for n in onnx.load(str(SHAPES)).graph.node)
    assert sorted(n for k in r["kernels"] for n in k["ops"]) == nodes  # every node in one kernel
    assert r["memory"]["host_memory"] is True and r["fallbacks"] == []
    with kiln.InferenceSession(mlp_model(), providers=["ref"]) as s:
        r = s.info()
    assert r["mode"] == "interpreted" and len(r["kernels"]) == 4  # ref: one kernel per node
    s.close()
    with pytest.raises(kiln.InvalidArgument, match="closed"):
        s.info()


def test_session_profile_table(rng):
    x = rng.standard_normal((1, 1, 16, 16)).astype(np.float32)
    with kiln.InferenceSession(str(SHAPES), providers=["cpu"]) as s:
        p = s.profile({"image": x}, warmup=1, iterations=7)
        y = s.run(None, {"image": x})[0]  # the session runs on after profiling
    assert p["iterations"] == 7 and len(p["samples_ms"]) == 7
    assert p["min_ms"] <= p["median_ms"] <= p["max_ms"]
    assert p["kernels"] and all(k["calls"] == 7 for k in p["kernels"])
    assert sum(k["percent"] for k in p["kernels"]) == pytest.approx(100.0)
    assert [k["total_ms"] for k in p["kernels"]] == sorted((k["total_ms"] for k in p["kernels"]), reverse=True)
    assert y.shape == (1, 8)


# ---- verify, bench ------------------------------------------------------------------------


def test_verify_agrees_with_kiln_verify(rng):
    r = kiln.verify(str(SHAPES), "cpu")
    assert r["ok"] is True and r["first_divergence"] is None and r["errors"] == []
    assert r["outputs"][0]["name"] == "logits" and r["compared"] >= 1
    cli = kiln_bin("verify", str(SHAPES), "--device", "cpu")
    assert cli.returncode == 0 and "verify: OK" in cli.stdout
    model = mlp_model()
    x = rng.standard_normal((5, 4)).astype(np.float32)
    for m in (model, model.SerializeToString()):
        r = kiln.verify(m, providers=["CPUExecutionProvider"], inputs={"x": x})
        assert r["ok"] and "x f32[5,4]" in r["inputs"][0]
    r = kiln.verify(str(SHAPES), "null")  # executes nothing: reported, not raised
    assert r["ok"] is False and r["errors"]


@pytest.mark.parametrize("kind", ["cpu", "vulkan", "opencl", "cuda"])
def test_verify_every_device(kind):
    names = [d.name for d in kiln.devices() if d.name.split(":")[0] == kind]
    if not names:
        pytest.skip(f"no {kind} device here")
    r = kiln.verify(str(SHAPES), names[0])
    assert r["ok"] and r["device"] == names[0] and r["max_abs_err"] < 1e-3, r


def test_bench_report():
    r = kiln.bench(str(SHAPES), device="cpu", warmup=1, iterations=5, profile=True, threads=1)
    assert r["iterations"] == 5 and r["threads"] == 1 and r["min_ms"] <= r["median_ms"] <= r["max_ms"]
    assert r["kernels"] and sum(k["percent"] for k in r["kernels"]) == pytest.approx(100, abs=0.1)
    r = kiln.bench(mlp_model(), providers=["ref"], inputs={"x": np.ones((2, 4), np.float32)}, iterations=2)
    assert r["device"] == "ref" and "kernels" not in r and "x f32[2,4]" in r["inputs"][0]


def test_tools_bad_input(tmp_path):
    with pytest.raises(kiln.NoSuchFile, match="nope.onnx"):
        kiln.verify(str(tmp_path / "nope.onnx"))
    with pytest.raises(kiln.NoSuchFile, match="nope.onnx"):
        kiln.bench(str(tmp_path / "nope.onnx"))
    with pytest.raises(kiln.ProviderNotAvailable, match="warp9"):
        kiln.verify(str(SHAPES), "warp9")
    with pytest.raises(kiln.ProviderNotAvailable, match="warp9"):
        kiln.bench(str(SHAPES), device="warp9")
    with pytest.raises(kiln.InvalidArgument, match="input 'img'"):
        kiln.verify(str(SHAPES), inputs={"img": np.zeros((1, 1, 16, 16), np.float32)})
    with pytest.raises(kiln.InvalidArgument, match="input 'image'"):
        kiln.bench(str(SHAPES), inputs={"image": np.zeros((1, 1, 16, 16), np.float64)})
    with pytest.raises(kiln.InvalidArgument, match="iterations"):
        kiln.bench(str(SHAPES), iterations=0)
    with pytest.raises(kiln.InvalidModel):
        kiln.verify(b"not a model")


# ---- python -m kiln ---------------------------------------------------------------------


def test_run_classifies_the_example_as_kiln_run(tmp_path):
    args = ["run", str(SHAPES), "--input", f"image={CIRCLE}"]
    py, cli = py_kiln(*args), kiln_bin(*args)
    assert py.returncode == 0, py.stderr
    if KILN_BIN_SAME_BUILD:
        assert py.stdout == cli.stdout  # "logits: f32 [1,8]" and its values, as the binary prints them
    else:  # another build's binary: the same text to rounding
        assert py.stdout.splitlines()[0] == cli.stdout.splitlines()[0] == "logits: f32 [1,8]"
        np.testing.assert_allclose([float(v) for v in py.stdout.split()[4:]], [float(v) for v in cli.stdout.split()[4:]],
                                   rtol=1e-4)
    top = py_kiln(*args, "--labels", str(LABELS))
    assert "top classes for" in top.stdout and "1. circle" in top.stdout
    assert py_kiln(*args, "--output-dir", str(tmp_path / "out")).returncode == 0
    kiln_bin(*args, "--output-dir", str(tmp_path / "ref"))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output_0.npy"), np.load(tmp_path / "ref" / "output_0.npy"),
                               rtol=0 if KILN_BIN_SAME_BUILD else 1e-4)


def test_devices_info_bench_verify_commands():
    d = py_kiln("devices")
    assert d.returncode == 0 and d.stdout == kiln_bin("devices").stdout
    dj = json.loads(py_kiln("devices", "--json").stdout)
    assert [x["name"] for x in dj["devices"]] == [x["name"] for x in json.loads(kiln_bin("devices", "--json").stdout)["devices"]]
    i = py_kiln("info", str(SHAPES), "--device", "cpu")
    assert i.returncode == 0, i.stderr
    cli = kiln_bin("info", str(SHAPES)).stdout
    for line in ("opsets: ai.onnx=13", "parameters: 38152 in 8 initializers", "  Conv                         2"):
        assert line in i.stdout and line in cli
    assert "device cpu:" in i.stdout and "generated kernels" in i.stdout  # kiln_session_describe's text
    ij = json.loads(py_kiln("info", str(SHAPES), "--device", "ref", "--json").stdout)
    assert ij["nodes"] == 10 and ij["mode"] == "interpreted"  # kiln_session_report_json's, as `kiln info`'s
    mj = json.loads(py_kiln("info", str(SHAPES), "--json").stdout)
    assert mj["nodes"] == 10 and mj["flops"] > 0 and mj["unsupported_ops"] == []
    b = py_kiln("bench", str(SHAPES), "--iterations", "3", "--warmup", "1", "--profile", "--top", "2")
    assert b.returncode == 0 and "latency     median" in b.stdout and "... 5 more" in b.stdout
    bj = json.loads(py_kiln("bench", str(SHAPES), "--iterations", "2", "--json").stdout)
    assert bj["iterations"] == 2
    v = py_kiln("verify", str(SHAPES), "--device", "cpu", "--seed", "3")
    assert v.returncode == 0 and "verify: OK" in v.stdout
    v = py_kiln("verify", str(SHAPES), "--device", "null")  # a run failing on one side: an error, as the binary's
    assert v.returncode == 1 and v.stderr.startswith("kiln: error: ") and "null device does not execute" in v.stderr
    assert v.stderr == kiln_bin("verify", str(SHAPES), "--device", "null").stderr


def test_command_errors_are_one_line(tmp_path):
    for args, words in [(["run", str(tmp_path / "missing.onnx")], "missing.onnx"),
                        (["run", str(SHAPES), "--device", "warp9"], "warp9"),
                        (["run", str(SHAPES), "--input", "image"], "NAME=FILE.npy"),
                        (["run", str(SHAPES), "--input", f"img={CIRCLE}"], "'img'"),
                        (["verify", str(SHAPES), "--device", "warp9"], "warp9"),
                        (["bench", str(tmp_path / "missing.onnx")], "missing.onnx"),
                        (["bench", str(SHAPES), "--dim", "batch=2"], "batch"),
                        (["info", str(SHAPES), "--dot", "--json"], "one at a time"),
                        (["verify", str(SHAPES), "--atol", "-1"], "atol")]:
        r = py_kiln(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("kiln: error: ") and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert py_kiln("frobnicate").returncode == 2
    h = py_kiln("help")
    assert h.returncode == 0 and all(c in h.stdout for c in ("run", "info", "bench", "verify", "train", "devices"))
