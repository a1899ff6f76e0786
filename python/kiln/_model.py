"""Loading a kiln_model* from what InferenceSession and the tools accept."""

from __future__ import annotations

import ctypes
import os
from ctypes import c_void_p
from typing import Any, Optional

from ._errors import InvalidArgument, NoSuchFile, check


def load_model(lib: Any, model: Any) -> tuple[Optional[int], Optional[str], Optional[bytes]]:
    """kiln_model_load_file or _memory on a path (str or os.PathLike),
    bytes-like data or an onnx.ModelProto: (the kiln_model*, owned by the
    caller; the path or None; the serialized bytes or None)."""
    out = c_void_p()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise NoSuchFile(f"model file '{path}' does not exist")
        check(lib.kiln_model_load_file(os.fsencode(path), ctypes.byref(out)))
        return out.value, path, None
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        model = model.SerializeToString()
    if not isinstance(model, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"model: expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    data = bytes(model)
    check(lib.kiln_model_load_memory(data, len(data), ctypes.byref(out)))
    return out.value, None, data
