"""kiln's exceptions: one class per kiln_status_code, each also the builtin
exception a Python caller would catch for it, with ONNX Runtime's class names
as aliases (onnxruntime.capi.onnxruntime_pybind11_state.*)."""

from __future__ import annotations

import ctypes
from typing import Optional

from . import _capi


class KilnError(Exception):
    """Any error kiln reports. `code` is the kiln_status_code (0 when the
    error was found in Python before reaching the library)."""

    code: int = _capi.INTERNAL

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(KilnError, ValueError):
    code = _capi.INVALID_ARGUMENT


class InvalidModel(KilnError, ValueError):
    code = _capi.INVALID_MODEL


class Unsupported(KilnError, NotImplementedError):
    code = _capi.UNSUPPORTED


class OutOfMemory(KilnError, MemoryError):
    code = _capi.OUT_OF_MEMORY


class KilnIOError(KilnError, OSError):
    code = _capi.IO_ERROR

    def __init__(self, message: str, code: Optional[int] = None):
        KilnError.__init__(self, message, code)


class NoSuchFile(KilnIOError, FileNotFoundError):
    """A model file that does not exist."""


class OutOfRange(KilnError, IndexError):
    code = _capi.OUT_OF_RANGE


class NotFound(KilnError, LookupError):
    """A named thing that does not exist: a device, an output name."""
    code = _capi.NOT_FOUND


class ProviderNotAvailable(NotFound, ValueError):
    """A provider (device) that is unknown or absent on this machine. Also a
    ValueError, as ONNX Runtime raises for providers it does not know."""


class Internal(KilnError, RuntimeError):
    code = _capi.INTERNAL


class DeviceError(KilnError, RuntimeError):
    code = _capi.DEVICE_ERROR


class Timeout(KilnError, RuntimeError):
    code = _capi.TIMEOUT


_BY_CODE: dict[int, type[KilnError]] = {
    _capi.INVALID_ARGUMENT: InvalidArgument,
    _capi.INVALID_MODEL: InvalidModel,
    _capi.UNSUPPORTED: Unsupported,
    _capi.OUT_OF_MEMORY: OutOfMemory,
    _capi.IO_ERROR: KilnIOError,
    _capi.OUT_OF_RANGE: OutOfRange,
    _capi.NOT_FOUND: NotFound,
    _capi.INTERNAL: Internal,
    _capi.DEVICE_ERROR: DeviceError,
    _capi.TIMEOUT: Timeout,
}

# ONNX Runtime's names (onnxruntime.capi.onnxruntime_pybind11_state), so
# `except ort.InvalidArgument` and friends keep working with `import kiln as ort`.
Fail = KilnError
InvalidProtobuf = InvalidModel
NotImplemented = Unsupported  # noqa: A001 - ONNX Runtime's name
RuntimeException = Internal
InvalidGraph = InvalidModel
EPFail = DeviceError


def error_class(code: int) -> type[KilnError]:
    return _BY_CODE.get(code, KilnError)


def check(status: Optional[int]) -> None:
    """Raises the class of a non-NULL kiln_status_t (and frees it)."""
    if not status:
        return
    lib = _capi.lib()
    try:
        code = lib.kiln_status_code_of(status)
        message = (lib.kiln_status_message(status) or b"").decode("utf-8", "replace")
    finally:
        lib.kiln_status_free(status)
    raise error_class(code)(message, code)

