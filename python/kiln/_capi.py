"""The ctypes binding of kiln's public C API (include/kiln.h): the library
loader, the struct mirrors and the function prototypes.

Everything else in the package goes through this module; nothing here knows
about sessions or numpy. Functions that newer libraries add (kiln_version,
kiln_tensor_wrap, the metadata and profiling calls) are looked up lazily with
`optional()`, so the package keeps working on a library without them.

Where the library comes from, first match wins:
  1. $KILN_LIBRARY (a path to libkiln.so);
  2. libkiln.so next to this file (the wheel carries it there);
  3. build/libkiln.so of the repository this file sits in (python/kiln/ in a
     checkout: developers and CI with PYTHONPATH=python).

Ownership follows kiln.h: an out_* object is the caller's (this package wraps
each in a Python object that releases it once); strings the library returns
through char** are freed with kiln_string_free.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float, c_int, c_int64, c_size_t,
                    c_uint64, c_void_p)
from pathlib import Path
from typing import Any, Callable, Optional

KILN_MAX_RANK = 12

# kiln_status_code
OK = 0
INVALID_ARGUMENT = 1
INVALID_MODEL = 2
UNSUPPORTED = 3
OUT_OF_MEMORY = 4
IO_ERROR = 5
OUT_OF_RANGE = 6
NOT_FOUND = 7
INTERNAL = 8
DEVICE_ERROR = 9
TIMEOUT = 10

# kiln_dtype (values match ONNX TensorProto.DataType)
DTYPE_UNDEFINED = 0
DTYPE_F32 = 1
DTYPE_U8 = 2
DTYPE_I8 = 3
DTYPE_U16 = 4
DTYPE_I16 = 5
DTYPE_I32 = 6
DTYPE_I64 = 7
DTYPE_STRING = 8
DTYPE_BOOL = 9
DTYPE_F16 = 10
DTYPE_F64 = 11
DTYPE_U32 = 12
DTYPE_U64 = 13
DTYPE_C64 = 14
DTYPE_C128 = 15
DTYPE_BF16 = 16
DTYPE_F8E4M3FN = 17
DTYPE_F8E4M3FNUZ = 18
DTYPE_F8E5M2 = 19
DTYPE_F8E5M2FNUZ = 20
DTYPE_U4 = 21
DTYPE_I4 = 22
DTYPE_F4E2M1 = 23
DTYPE_F8E8M0 = 24
DTYPE_U2 = 25
DTYPE_I2 = 26

# kiln_precision
PRECISION_FP32 = 0
PRECISION_FP16 = 1

# Opaque handles: pointers the library owns.
kiln_status_t = c_void_p
kiln_tensor_p = c_void_p
kiln_model_p = c_void_p
kiln_session_p = c_void_p
kiln_trainer_p = c_void_p
kiln_value_p = c_void_p

kiln_release_fn = CFUNCTYPE(None, c_void_p)


class kiln_io_info(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_int),
        ("rank", c_int),
        ("dims", c_int64 * KILN_MAX_RANK),
        ("dim_names", c_char_p * KILN_MAX_RANK),
        ("is_sequence", c_int),
        ("is_optional", c_int),
    ]


class kiln_session_options(Structure):
    _fields_ = [
        ("device", c_char_p),
        ("threads", c_int),
        ("precision", c_int),
    ]


class kiln_trainer_options(Structure):
    _fields_ = [
        ("loss", c_int),
        ("output", c_char_p),
        ("has_ignore_index", c_int),
        ("ignore_index", c_int64),
        ("label_smoothing", c_float),
        ("optimizer", c_int),
        ("lr", c_float),
        ("momentum", c_float),
        ("weight_decay", c_float),
        ("beta1", c_float),
        ("beta2", c_float),
        ("eps", c_float),
        ("nesterov", c_int),
        ("schedule", c_int),
        ("step_every", c_int64),
        ("gamma", c_float),
        ("warmup_steps", c_int64),
        ("total_steps", c_int64),
        ("grad_accum", c_int),
        ("clip_norm", c_float),
        ("freeze", c_char_p),
        ("device", c_char_p),
        ("threads", c_int),
        ("seed", c_uint64),
    ]


class kiln_model_metadata(Structure):
    _fields_ = [
        ("producer_name", c_char_p),
        ("producer_version", c_char_p),
        ("domain", c_char_p),
        ("doc_string", c_char_p),
        ("graph_name", c_char_p),
        ("graph_doc_string", c_char_p),
        ("model_version", c_int64),
        ("ir_version", c_int64),
        ("n_opsets", c_int),
        ("n_props", c_int),
    ]


class kiln_verify_options(Structure):
    _fields_ = [
        ("device", c_char_p),
        ("rtol", c_double),
        ("atol", c_double),
        ("max_report", c_int),
    ]


# The structs the size/offset test (python/tests/test_capi_layout.py)
# compares with the C compiler's view of kiln.h.
STRUCTS = {
    "kiln_io_info": kiln_io_info,
    "kiln_session_options": kiln_session_options,
    "kiln_trainer_options": kiln_trainer_options,
    "kiln_model_metadata": kiln_model_metadata,
    "kiln_verify_options": kiln_verify_options,
}

P = POINTER
# name: (restype, argtypes). Present in every libkiln.so this package loads.
_REQUIRED: dict[str, tuple[Any, list[Any]]] = {
    "kiln_status_code_of": (c_int, [kiln_status_t]),
    "kiln_status_message": (c_char_p, [kiln_status_t]),
    "kiln_status_free": (None, [kiln_status_t]),
    "kiln_dtype_name": (c_char_p, [c_int]),
    "kiln_dtype_size": (c_size_t, [c_int]),
    "kiln_tensor_create": (kiln_status_t, [c_int, c_int, P(c_int64), P(kiln_tensor_p)]),
    "kiln_tensor_release": (None, [kiln_tensor_p]),
    "kiln_tensor_retain": (kiln_tensor_p, [kiln_tensor_p]),
    "kiln_tensor_dtype": (c_int, [kiln_tensor_p]),
    "kiln_tensor_rank": (c_int, [kiln_tensor_p]),
    "kiln_tensor_dims": (P(c_int64), [kiln_tensor_p]),
    "kiln_tensor_numel": (c_int64, [kiln_tensor_p]),
    "kiln_tensor_data": (c_void_p, [kiln_tensor_p]),
    "kiln_tensor_load_npy": (kiln_status_t, [c_char_p, P(kiln_tensor_p)]),
    "kiln_tensor_save_npy": (kiln_status_t, [kiln_tensor_p, c_char_p]),
    "kiln_model_load_file": (kiln_status_t, [c_char_p, P(kiln_model_p)]),
    "kiln_model_load_memory": (kiln_status_t, [c_void_p, c_size_t, P(kiln_model_p)]),
    "kiln_model_destroy": (None, [kiln_model_p]),
    "kiln_model_input_count": (c_int, [kiln_model_p]),
    "kiln_model_output_count": (c_int, [kiln_model_p]),
    "kiln_model_input_info": (kiln_status_t, [kiln_model_p, c_int, P(kiln_io_info)]),
    "kiln_model_output_info": (kiln_status_t, [kiln_model_p, c_int, P(kiln_io_info)]),
    "kiln_device_count": (c_int, []),
    "kiln_device_name": (c_char_p, [c_int]),
    "kiln_device_description": (c_char_p, [c_int]),
    "kiln_session_options_default": (kiln_session_options, []),
    "kiln_session_create": (kiln_status_t, [kiln_model_p, P(kiln_session_options), P(kiln_session_p)]),
    "kiln_session_destroy": (None, [kiln_session_p]),
    "kiln_session_run": (kiln_status_t, [kiln_session_p, c_int, P(c_char_p), P(kiln_tensor_p), c_int,
                                         P(kiln_tensor_p)]),
    "kiln_session_run_into": (kiln_status_t, [kiln_session_p, c_int, P(c_char_p), P(kiln_tensor_p), c_int,
                                              P(kiln_tensor_p), P(kiln_tensor_p)]),
    "kiln_trainer_options_default": (kiln_trainer_options, []),
    "kiln_trainer_create": (kiln_status_t, [kiln_model_p, P(kiln_trainer_options), P(kiln_trainer_p)]),
    "kiln_trainer_destroy": (None, [kiln_trainer_p]),
    "kiln_trainer_step": (kiln_status_t, [kiln_trainer_p, c_int, P(c_char_p), P(kiln_tensor_p), kiln_tensor_p,
                                          P(c_double)]),
    "kiln_trainer_evaluate": (kiln_status_t, [kiln_trainer_p, c_int, P(c_char_p), P(kiln_tensor_p),
                                              kiln_tensor_p, P(c_double), P(c_int64), P(c_int64)]),
    "kiln_trainer_updates": (c_int64, [kiln_trainer_p]),
    "kiln_trainer_micro_batches": (c_int64, [kiln_trainer_p]),
    "kiln_trainer_lr": (c_double, [kiln_trainer_p]),
    "kiln_trainer_save_checkpoint": (kiln_status_t, [kiln_trainer_p, c_char_p]),
    "kiln_trainer_load_checkpoint": (kiln_status_t, [kiln_trainer_p, c_char_p]),
    "kiln_trainer_export": (kiln_status_t, [kiln_trainer_p, c_char_p]),
}

# Newer calls, looked up on first use (optional() returns None without them).
# A call whose signature changed is trusted only where the library also has
# the call that came with the change (_NEEDS): kiln_version marks the API
# generation that made kiln_tensor_wrap public (older libraries export an
# internal kiln_tensor_wrap with another signature), and
# kiln_verify_options_default the one where kiln_verify_json takes options
# (before, a device name in that place).
_OPTIONAL: dict[str, tuple[Any, list[Any]]] = {
    "kiln_version": (c_char_p, []),
    "kiln_tensor_wrap": (kiln_status_t, [c_int, c_int, P(c_int64), c_void_p, c_size_t, kiln_release_fn, c_void_p,
                                         P(kiln_tensor_p)]),
    "kiln_string_free": (None, [c_void_p]),
    "kiln_model_metadata_get": (kiln_status_t, [kiln_model_p, P(kiln_model_metadata)]),
    "kiln_model_opset": (kiln_status_t, [kiln_model_p, c_int, P(c_char_p), P(c_int64)]),
    "kiln_model_metadata_prop": (kiln_status_t, [kiln_model_p, c_int, P(c_char_p), P(c_char_p)]),
    "kiln_session_set_profiling": (kiln_status_t, [kiln_session_p, c_int]),
    "kiln_session_profile_json": (kiln_status_t, [kiln_session_p, P(c_void_p)]),
    "kiln_devices_json": (kiln_status_t, [P(c_void_p)]),
    "kiln_session_report_json": (kiln_status_t, [kiln_session_p, P(c_void_p)]),
    "kiln_session_describe": (kiln_status_t, [kiln_session_p, P(c_void_p)]),
    "kiln_verify_options_default": (kiln_verify_options, []),
    "kiln_verify_json": (kiln_status_t, [kiln_model_p, P(kiln_verify_options), c_int, P(c_char_p), P(kiln_tensor_p),
                                         P(c_void_p)]),
    "kiln_model_info_json": (kiln_status_t, [kiln_model_p, P(c_void_p)]),
    "kiln_model_dot": (kiln_status_t, [kiln_model_p, P(c_void_p)]),
    "kiln_bench_json": (kiln_status_t, [kiln_model_p, P(kiln_session_options), c_int, P(c_char_p), P(kiln_tensor_p),
                                        c_int, c_int, c_int, P(c_void_p)]),
    # sequences and optionals (kiln_value_kind_of marks the generation that made them public)
    "kiln_value_kind_of": (c_int, [kiln_value_p]),
    "kiln_value_count": (c_int, [kiln_value_p]),
    "kiln_value_item": (kiln_tensor_p, [kiln_value_p, c_int]),
    "kiln_value_elem_dtype": (c_int, [kiln_value_p]),
    "kiln_value_from_tensor": (kiln_status_t, [kiln_tensor_p, P(kiln_value_p)]),
    "kiln_value_new_sequence": (kiln_status_t, [c_int, P(kiln_value_p)]),
    "kiln_value_seq_insert": (kiln_status_t, [kiln_value_p, c_int, kiln_tensor_p]),
    "kiln_value_new_none": (kiln_status_t, [c_int, c_bool, P(kiln_value_p)]),
    "kiln_value_free": (None, [kiln_value_p]),
    "kiln_session_run_values": (kiln_status_t, [kiln_session_p, c_int, P(c_char_p), P(kiln_value_p), c_int,
                                                P(kiln_value_p)]),
}
_NEEDS = {"kiln_tensor_wrap": "kiln_version", "kiln_verify_json": "kiln_verify_options_default"}


def _candidates() -> list[Path]:
    here = Path(__file__).resolve().parent
    env = os.environ.get("KILN_LIBRARY")
    if env:
        return [Path(env)]
    return [here / "libkiln.so", here.parent.parent / "build" / "libkiln.so"]


class Library:
    """The loaded libkiln.so with its prototypes set; `lib.<name>` for the
    required calls, `optional(name)` for the newer ones."""

    def __init__(self, path: Path):
        self.path = path
        # RTLD_LOCAL (the default): kiln's symbols stay out of the global
        # namespace, so a second copy (another wheel's) cannot collide.
        self.cdll = ctypes.CDLL(str(path))
        missing = []
        for name, (restype, argtypes) in _REQUIRED.items():
            try:
                fn = getattr(self.cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        if missing:
            raise ImportError(f"{path} is not a kiln library this package can use: it lacks {', '.join(missing)}")
        self._optional: dict[str, Optional[Callable[..., Any]]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        # Only reached for names __init__ did not set: the required calls are
        # instance attributes (this also tells type checkers they exist). A
        # newer call reads the same way once its caller has checked that the
        # library has it (Library.optional).
        fn = self.optional(name) if name in _OPTIONAL else None
        if fn is None:
            raise AttributeError(f"libkiln has no call {name!r} (newer ones may be absent: Library.optional)")
        return fn

    def optional(self, name: str) -> Optional[Callable[..., Any]]:
        """The newer call `name` with its prototype, or None where this
        library predates it."""
        with self._lock:
            if name in self._optional:
                return self._optional[name]
            fn: Optional[Callable[..., Any]] = None
            trusted = name not in _NEEDS or hasattr(self.cdll, _NEEDS[name])
            if trusted and hasattr(self.cdll, name):
                restype, argtypes = _OPTIONAL[name]
                f = getattr(self.cdll, name)
                f.restype = restype
                f.argtypes = argtypes
                fn = f
            self._optional[name] = fn
            return fn

    def take_string(self, ptr: Optional[int]) -> Optional[str]:
        """A char* the library handed over (out_json...): decoded, then freed
        with kiln_string_free."""
        if not ptr:
            return None
        text = ctypes.string_at(ptr).decode("utf-8", "replace")
        free = self.optional("kiln_string_free")
        if free is not None:
            free(ptr)
        return text


_lib: Optional[Library] = None
_lib_lock = threading.Lock()


def lib() -> Library:
    """The library, loaded on first use."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            tried = []
            for cand in _candidates():
                if cand.exists():
                    _lib = Library(cand)
                    break
                tried.append(str(cand))
            else:
                raise ImportError("kiln: libkiln.so not found (tried " + ", ".join(tried) +
                                  "); build it (cmake --build build) or set KILN_LIBRARY=/path/to/libkiln.so")
    return _lib


def version() -> str:
    """The library's version string (kiln_version where the library has it,
    else the header's KILN_VERSION_STRING of this binding)."""
    fn = lib().optional("kiln_version")
    if fn is not None:
        return fn().decode()
    return "0.1.0"
