"""kiln tensors in Python: `Tensor` (a kiln_tensor, released once when the
last Python reference goes), numpy arrays over its memory without a copy,
DLPack export, and numpy inputs turned into kiln tensors.

Lifetime: a `_Handle` owns one reference to a kiln_tensor. Every numpy array
made from it keeps the handle alive through its `base` chain, every DLPack
capsule through a registry entry its deleter drops, so the memory lives
exactly as long as its last user.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p
from typing import Any, Optional, Sequence

import numpy as np

from . import _capi as C
from . import _dtypes
from ._errors import InvalidArgument, Unsupported, check


class _Handle:
    """One reference to a kiln_tensor; released on collection."""

    __slots__ = ("ptr", "__weakref__")
    ptr: Optional[int]

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __del__(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr and C._lib is not None:
            C._lib.kiln_tensor_release(ptr)


class _ArrayView:
    """What numpy wraps (__array_interface__): the tensor's bytes as they are;
    the array's base, so it keeps the handle alive."""

    __slots__ = ("handle", "__array_interface__")

    def __init__(self, handle: _Handle, data: int, shape: tuple[int, ...], typestr: str):
        self.handle = handle
        self.__array_interface__ = {"version": 3, "data": (data, False), "shape": shape, "typestr": typestr}


def _info(ptr: int) -> tuple[int, tuple[int, ...], int, int]:
    lib = C.lib()
    kd = lib.kiln_tensor_dtype(ptr)
    rank = lib.kiln_tensor_rank(ptr)
    dims = lib.kiln_tensor_dims(ptr)
    shape = tuple(int(dims[i]) for i in range(rank))
    return kd, shape, int(lib.kiln_tensor_numel(ptr)), int(lib.kiln_tensor_data(ptr) or 0)


class Tensor:
    """A kiln tensor in host memory. `numpy()` / `np.asarray(t)` view it
    without a copy; `np.from_dlpack(t)` and `torch.from_dlpack(t)` share its
    memory too. Made by `InferenceSession.run_tensors` or `Tensor.from_numpy`."""

    def __init__(self, _handle: _Handle):
        self._handle = _handle

    @classmethod
    def _adopt(cls, ptr: int) -> "Tensor":
        return cls(_Handle(ptr))

    @classmethod
    def from_numpy(cls, array: Any, dtype: Optional[int] = None) -> "Tensor":
        """A kiln tensor holding `array` (copied; see InferenceSession.run
        for the zero-copy input path)."""
        arr = np.asarray(array)
        return cls._adopt(_new_from_array(arr, dtype if dtype is not None else _dtypes.from_numpy(arr.dtype),
                                          "tensor", copy=True)[0])

    @property
    def ptr(self) -> int:
        """The kiln_tensor* (borrowed)."""
        return self._handle.ptr or 0

    @property
    def kiln_dtype(self) -> int:
        return C.lib().kiln_tensor_dtype(self.ptr)

    @property
    def dtype(self) -> Optional[np.dtype]:
        return _dtypes.to_numpy(self.kiln_dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return _info(self.ptr)[1]

    def data_ptr(self) -> int:
        return _info(self.ptr)[3]

    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array over kiln's memory (no copy; strings
        are copied into an object array)."""
        return _to_numpy(self._handle)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __repr__(self) -> str:
        return f"kiln.Tensor({_dtypes.onnx_name(self.kiln_dtype)}, shape={list(self.shape)})"

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCPU, 0)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule ("dltensor", DLPack 0.x ABI, which every consumer
        reads) sharing the tensor's memory; its deleter drops the reference."""
        if dl_device is not None and tuple(dl_device) != (_KDLCPU, 0):
            raise BufferError("kiln tensors live in host memory (kDLCPU, 0)")
        if copy:
            return Tensor.from_numpy(self.numpy()).__dlpack__()
        return _dlpack_capsule(self._handle)


def _to_numpy(handle: _Handle) -> np.ndarray:
    kd, shape, numel, data = _info(handle.ptr or 0)
    if kd == C.DTYPE_STRING:
        out = np.empty(numel, dtype=object)
        ptrs = ctypes.cast(data, POINTER(c_void_p))
        for i in range(numel):
            out[i] = ctypes.string_at(ptrs[i]).decode("utf-8", "surrogateescape") if ptrs[i] else ""
        return out.reshape(shape)
    npdt = _dtypes.to_numpy(kd)
    if npdt is None:
        name = _dtypes.onnx_name(kd)
        raise Unsupported(f"a {name} tensor has no numpy dtype here: install ml_dtypes (pip install ml_dtypes)")
    store = _dtypes.storage(kd) or npdt
    if numel == 0 or not data:
        return np.empty(shape, dtype=npdt)
    arr = np.asarray(_ArrayView(handle, data, shape, store.str))
    return arr if store == npdt else arr.view(npdt)


# ---- inputs -----------------------------------------------------------------

_libc = ctypes.CDLL(None)
_libc.strdup.restype = c_void_p
_libc.strdup.argtypes = [ctypes.c_char_p]

# Arrays lent to kiln_tensor_wrap, until the library calls release(token).
_lent: dict[int, Any] = {}
_lent_lock = threading.Lock()
_tokens = itertools.count(1)


@C.kiln_release_fn
def _release_lent(user_data: Optional[int]) -> None:
    with _lent_lock:
        _lent.pop(user_data or 0, None)


def wrap_available() -> bool:
    """Whether the library can borrow numpy memory (kiln_tensor_wrap)."""
    return C.lib().optional("kiln_tensor_wrap") is not None


def _new_from_array(arr: np.ndarray, kd: int, what: str, copy: bool = False) -> tuple[int, bool]:
    """A new kiln_tensor* (owned by the caller) holding `arr`, which must be
    of kiln dtype `kd`; borrowed without a copy where the library has
    kiln_tensor_wrap and the array is C-contiguous and aligned (the array
    stays alive until kiln releases it), else created and copied. Returns
    (pointer, borrowed)."""
    lib = C.lib()
    if kd == C.DTYPE_UNDEFINED:
        raise InvalidArgument(f"{what}: numpy dtype {arr.dtype} has no kiln dtype")
    dims = (c_int64 * max(arr.ndim, 1))(*arr.shape)
    out = c_void_p()
    if kd == C.DTYPE_STRING:
        check(lib.kiln_tensor_create(kd, arr.ndim, dims, ctypes.byref(out)))
        ptrs = ctypes.cast(lib.kiln_tensor_data(out), POINTER(c_void_p))
        for i, s in enumerate(arr.reshape(-1)):
            b = s if isinstance(s, bytes) else str(s).encode("utf-8", "surrogateescape")
            ptrs[i] = _libc.strdup(b)  # freed by the tensor (kiln.h: owned by the tensor)
        return out.value or 0, False
    if not (arr.flags.c_contiguous and arr.flags.aligned):
        arr = np.ascontiguousarray(arr)
    wrap = lib.optional("kiln_tensor_wrap")
    if wrap is not None and not copy and arr.size > 0:
        token = next(_tokens)
        with _lent_lock:
            _lent[token] = arr
        st = wrap(kd, arr.ndim, dims, arr.ctypes.data, arr.nbytes, _release_lent, token, ctypes.byref(out))
        if st:
            _release_lent(token)
            check(st)
        return out.value or 0, True
    check(lib.kiln_tensor_create(kd, arr.ndim, dims, ctypes.byref(out)))
    if arr.nbytes:
        ctypes.memmove(lib.kiln_tensor_data(out), arr.ctypes.data, arr.nbytes)
    return out.value or 0, False


def copy_tensor(ptr: int) -> int:
    """A new kiln_tensor* (the caller's) with a copy of `ptr`'s elements
    (not for STRING)."""
    lib = C.lib()
    kd, shape, numel, data = _info(ptr)
    dims = (c_int64 * max(len(shape), 1))(*shape)
    out = c_void_p()
    check(lib.kiln_tensor_create(kd, len(shape), dims, ctypes.byref(out)))
    if numel and data:
        ctypes.memmove(lib.kiln_tensor_data(out), data, numel * lib.kiln_dtype_size(kd))
    return out.value or 0


def input_array(name: str, value: Any, kd: int, type_str: str) -> np.ndarray:
    """The numpy array of one fed input, checked against the declared kiln
    dtype `kd` (UNDEFINED: take the array's): a numpy array (or anything
    with __array__/__dlpack__) must already have that dtype, as in ONNX
    Runtime; lists, tuples and scalars are converted to it."""
    want = _dtypes.to_numpy(kd) if kd != C.DTYPE_UNDEFINED else None
    if kd != C.DTYPE_UNDEFINED and kd != C.DTYPE_STRING and want is None:
        raise Unsupported(f"input '{name}': {type_str} needs ml_dtypes (pip install ml_dtypes)")
    if isinstance(value, (list, tuple, int, float, bool, complex, str, bytes)):
        try:
            return np.asarray(value, dtype=want if kd != C.DTYPE_STRING else object)
        except (ValueError, TypeError, OverflowError) as e:
            raise InvalidArgument(f"input '{name}': expected {type_str}, got a {type(value).__name__} "
                                  f"that does not convert to it ({e})") from None
    if not isinstance(value, np.ndarray):
        if hasattr(value, "__array__") or hasattr(value, "__array_interface__"):
            value = np.asarray(value)
        elif hasattr(value, "__dlpack__"):
            value = np.from_dlpack(value)
        else:
            raise InvalidArgument(f"input '{name}': expected {type_str}, got a {type(value).__name__}")
    got = _dtypes.from_numpy(value.dtype)
    if kd != C.DTYPE_UNDEFINED and got != kd:
        raise InvalidArgument(f"input '{name}': expected {type_str}, got "
                              f"{_dtypes.type_string(got) if got else 'numpy ' + str(value.dtype)} "
                              f"(a numpy array of dtype {value.dtype})")
    return value


def tensor_from_input(name: str, arr: np.ndarray, kd: int) -> tuple[int, bool]:
    return _new_from_array(arr, kd if kd != C.DTYPE_UNDEFINED else _dtypes.from_numpy(arr.dtype), f"input '{name}'")


# ---- DLPack -----------------------------------------------------------------

_KDLCPU = 1
_DL_CODES = {C.DTYPE_F32: (2, 32), C.DTYPE_F64: (2, 64), C.DTYPE_F16: (2, 16), C.DTYPE_BF16: (4, 16),
             C.DTYPE_I8: (0, 8), C.DTYPE_I16: (0, 16), C.DTYPE_I32: (0, 32), C.DTYPE_I64: (0, 64),
             C.DTYPE_U8: (1, 8), C.DTYPE_U16: (1, 16), C.DTYPE_U32: (1, 32), C.DTYPE_U64: (1, 64),
             C.DTYPE_BOOL: (6, 8), C.DTYPE_C64: (5, 64), C.DTYPE_C128: (5, 128)}


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32), ("dtype", _DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


_DL_DELETER = ctypes.CFUNCTYPE(None, c_void_p)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_void_p)
_CAPSULE_NAME = b"dltensor"
# Live exports: address of the DLManagedTensor -> (struct, shape, handle).
_dl_live: dict[int, tuple[Any, Any, _Handle]] = {}
_dl_lock = threading.Lock()

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]
_api.PyCapsule_GetName.restype = c_void_p
_api.PyCapsule_GetName.argtypes = [c_void_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, ctypes.c_char_p]


@_DL_DELETER
def _dl_deleter(managed: Optional[int]) -> None:
    """Called by the consumer (numpy, torch) when it is done with the memory."""
    with _dl_lock:
        _dl_live.pop(managed or 0, None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: Optional[int]) -> None:
    """A capsule nobody consumed (its name is still "dltensor") frees its
    tensor; a consumed one was renamed "used_dltensor" and the consumer
    calls the deleter."""
    name = _api.PyCapsule_GetName(capsule)
    if name and ctypes.string_at(name) == _CAPSULE_NAME:
        managed = _api.PyCapsule_GetPointer(capsule, _CAPSULE_NAME)
        _dl_deleter(managed)


def _dlpack_capsule(handle: _Handle) -> Any:
    kd, shape, numel, data = _info(handle.ptr or 0)
    if kd not in _DL_CODES:
        raise BufferError(f"DLPack has no {_dtypes.onnx_name(kd)} type")
    code, bits = _DL_CODES[kd]
    managed = _DLManagedTensor()
    dims = (c_int64 * max(len(shape), 1))(*shape)
    t = managed.dl_tensor
    t.data = data or None
    t.device = _DLDevice(_KDLCPU, 0)
    t.ndim = len(shape)
    t.dtype = _DLDataType(code, bits, 1)
    t.shape = ctypes.cast(dims, POINTER(c_int64))
    t.strides = None  # compact row-major
    t.byte_offset = 0
    managed.deleter = ctypes.cast(_dl_deleter, c_void_p).value
    addr = ctypes.addressof(managed)
    managed.manager_ctx = addr
    with _dl_lock:
        _dl_live[addr] = (managed, dims, handle)
    return _api.PyCapsule_New(addr, _CAPSULE_NAME, ctypes.cast(_capsule_destructor, c_void_p).value)


def outputs_to_numpy(ptrs: Sequence[int]) -> list[np.ndarray]:
    return [_to_numpy(_Handle(p)) for p in ptrs]
