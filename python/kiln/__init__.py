"""kiln: a deep-learning compiler and runtime, with ONNX Runtime's Python API.

    import kiln as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    y, = sess.run(None, {"x": x})

A ctypes binding over libkiln.so (kiln._capi); see python/README.md.
"""

from __future__ import annotations

from ._capi import version as _version
from ._errors import (EPFail, Fail, InvalidArgument, InvalidGraph, InvalidModel, InvalidProtobuf, Internal, KilnError,
                      KilnIOError, NoSuchFile, NotFound, NotImplemented, OutOfMemory, OutOfRange, ProviderNotAvailable,
                      RuntimeException, Timeout, Unsupported, DeviceError)
from ._session import (ExecutionMode, GraphOptimizationLevel, InferenceSession, ModelMetadata, NodeArg, RunOptions,
                       SessionOptions, get_all_providers, get_available_providers, get_device)
from ._tensor import Tensor
from ._tools import Device, bench, devices, model_dot, model_info, verify
from ._train import Trainer

__version__ = "0.1.0"

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "NodeArg", "ModelMetadata", "GraphOptimizationLevel",
    "ExecutionMode", "Tensor", "get_available_providers", "get_all_providers", "get_device", "get_version_string",
    "KilnError", "InvalidArgument", "InvalidModel", "Unsupported", "OutOfMemory", "KilnIOError", "NoSuchFile",
    "OutOfRange", "NotFound", "ProviderNotAvailable", "Internal", "DeviceError", "Timeout",
    "Fail", "InvalidProtobuf", "NotImplemented", "RuntimeException", "InvalidGraph", "EPFail",
    "Device", "devices", "verify", "bench", "model_info", "model_dot", "Trainer",
]


def get_version_string() -> str:
    """The library's version (ONNX Runtime's get_version_string)."""
    return _version()
