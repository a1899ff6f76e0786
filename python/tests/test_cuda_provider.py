"""ONNX Runtime's CUDAExecutionProvider name on kiln's cuda device.

No GPU is lent to this project's machines, so ctest's python.cuda_fake runs
these against the fake CUDA driver (tests/cuda/fake_libcuda.c: the driver
API on host memory; every kernel is compiled by the real NVRTC and launched,
but not executed) by setting KILN_CUDA_LIBRARY and KILN_TEST_FAKE_CUDA=1:
the provider mapping, the session's device, a run's staging and outputs'
shapes and dtypes. Their values are only checked on a real GPU
(KILN_TEST_REAL_CUDA=1: equal to the cpu's within tolerance). Elsewhere the
tests skip.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import REPO

FAKE = os.environ.get("KILN_TEST_FAKE_CUDA") == "1"
REAL = os.environ.get("KILN_TEST_REAL_CUDA") == "1"
pytestmark = pytest.mark.skipif(not (FAKE or REAL), reason="no CUDA driver (KILN_TEST_FAKE_CUDA / KILN_TEST_REAL_CUDA)")

MODEL = str(REPO / "examples" / "models" / "shapes.onnx")


def test_cuda_is_an_available_provider() -> None:
    import kiln

    providers = kiln.get_available_providers()
    assert "CUDAExecutionProvider" in providers
    assert kiln.get_device() == "GPU"


@pytest.mark.parametrize("provider", ["CUDAExecutionProvider", ("CUDAExecutionProvider", {"device_id": 0}), "cuda",
                                      "cuda:0"])
def test_cuda_provider_runs_on_the_cuda_device(provider: object) -> None:
    import kiln

    s = kiln.InferenceSession(MODEL, providers=[provider])
    # ORT's name comes back as ORT's, kiln's as the device it names
    want = ["CUDAExecutionProvider"] if "CUDA" in str(provider) else [provider]
    assert s.get_providers() == want
    info = s.info()
    assert str(info["device"]).startswith("cuda")
    x = np.load(REPO / "examples" / "models" / "sample_circle.npy")
    (y,) = s.run(None, {s.get_inputs()[0].name: x})
    assert y.shape == (1, 8) and y.dtype == np.float32
    if REAL:
        ref = kiln.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, {s.get_inputs()[0].name: x})
        np.testing.assert_allclose(y, ref[0], rtol=1e-3, atol=1e-4)
    s.close()


def test_cuda_then_cpu_is_not_a_silent_fallback() -> None:
    """A provider list naming CUDA first runs on CUDA (ONNX Runtime would fall back quietly to the CPU when
    CUDA is missing; kiln raises instead, checked in test_errors.py)."""
    import kiln

    s = kiln.InferenceSession(MODEL, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers()[0] == "CUDAExecutionProvider"
