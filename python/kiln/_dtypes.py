"""kiln dtypes <-> numpy dtypes <-> ONNX Runtime's type strings.

bfloat16, the float8 family, float4 and int4/int2 have no numpy dtype of
their own: they map to ml_dtypes' when it is installed (kiln keeps one byte
per element for the narrow ones, as ml_dtypes does), and are Unsupported
otherwise. STRING maps to numpy object arrays of str (what ONNX Runtime
returns); str ('U') and bytes ('S') arrays are accepted as inputs.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _capi as C

_NUMPY = {
    C.DTYPE_F32: np.float32, C.DTYPE_U8: np.uint8, C.DTYPE_I8: np.int8, C.DTYPE_U16: np.uint16,
    C.DTYPE_I16: np.int16, C.DTYPE_I32: np.int32, C.DTYPE_I64: np.int64, C.DTYPE_STRING: np.object_,
    C.DTYPE_BOOL: np.bool_, C.DTYPE_F16: np.float16, C.DTYPE_F64: np.float64, C.DTYPE_U32: np.uint32,
    C.DTYPE_U64: np.uint64, C.DTYPE_C64: np.complex64, C.DTYPE_C128: np.complex128,
}

# kiln dtype -> (ml_dtypes attribute, the unsigned integer type of its bytes)
_ML_DTYPES = {
    C.DTYPE_BF16: ("bfloat16", np.uint16), C.DTYPE_F8E4M3FN: ("float8_e4m3fn", np.uint8),
    C.DTYPE_F8E4M3FNUZ: ("float8_e4m3fnuz", np.uint8), C.DTYPE_F8E5M2: ("float8_e5m2", np.uint8),
    C.DTYPE_F8E5M2FNUZ: ("float8_e5m2fnuz", np.uint8), C.DTYPE_U4: ("uint4", np.uint8),
    C.DTYPE_I4: ("int4", np.uint8), C.DTYPE_F4E2M1: ("float4_e2m1fn", np.uint8),
    C.DTYPE_F8E8M0: ("float8_e8m0fnu", np.uint8), C.DTYPE_U2: ("uint2", np.uint8), C.DTYPE_I2: ("int2", np.uint8),
}

# ONNX Runtime's NodeArg.type element names.
_ONNX_NAMES = {
    C.DTYPE_F32: "float", C.DTYPE_U8: "uint8", C.DTYPE_I8: "int8", C.DTYPE_U16: "uint16", C.DTYPE_I16: "int16",
    C.DTYPE_I32: "int32", C.DTYPE_I64: "int64", C.DTYPE_STRING: "string", C.DTYPE_BOOL: "bool",
    C.DTYPE_F16: "float16", C.DTYPE_F64: "double", C.DTYPE_U32: "uint32", C.DTYPE_U64: "uint64",
    C.DTYPE_C64: "complex64", C.DTYPE_C128: "complex128", C.DTYPE_BF16: "bfloat16",
    C.DTYPE_F8E4M3FN: "float8e4m3fn", C.DTYPE_F8E4M3FNUZ: "float8e4m3fnuz", C.DTYPE_F8E5M2: "float8e5m2",
    C.DTYPE_F8E5M2FNUZ: "float8e5m2fnuz", C.DTYPE_U4: "uint4", C.DTYPE_I4: "int4",
    C.DTYPE_F4E2M1: "float4e2m1", C.DTYPE_F8E8M0: "float8e8m0", C.DTYPE_U2: "uint2", C.DTYPE_I2: "int2",
}

_ml: Any
try:  # optional: numpy dtypes for bfloat16 and the narrow types
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - depends on the environment
    _ml = None


def ml_dtypes_available() -> bool:
    return _ml is not None


def to_numpy(kdtype: int) -> Optional[np.dtype]:
    """The numpy dtype of a kiln dtype, or None where numpy (with ml_dtypes if
    installed) has none."""
    if kdtype in _NUMPY:
        return np.dtype(_NUMPY[kdtype])
    if kdtype in _ML_DTYPES and _ml is not None:
        name = _ML_DTYPES[kdtype][0]
        if hasattr(_ml, name):
            return np.dtype(getattr(_ml, name))
    return None


def storage(kdtype: int) -> Optional[np.dtype]:
    """The plain numpy type that holds a narrow type's bytes (uint16 for
    bfloat16, uint8 for the one-byte types)."""
    return np.dtype(_ML_DTYPES[kdtype][1]) if kdtype in _ML_DTYPES else None


def from_numpy(dt: np.dtype) -> int:
    """The kiln dtype of a numpy dtype (UNDEFINED when kiln has none)."""
    dt = np.dtype(dt)
    if dt.kind in "OUS":
        return C.DTYPE_STRING
    for k, t in _NUMPY.items():
        if k != C.DTYPE_STRING and np.dtype(t) == dt:
            return k
    if _ml is not None:
        for k, (name, _) in _ML_DTYPES.items():
            if hasattr(_ml, name) and np.dtype(getattr(_ml, name)) == dt:
                return k
    return C.DTYPE_UNDEFINED


def onnx_name(kdtype: int) -> str:
    """'float', 'int64', ... (ONNX Runtime's spelling)."""
    return _ONNX_NAMES.get(kdtype, "undefined")


def type_string(kdtype: int, is_sequence: bool = False, is_optional: bool = False) -> str:
    """ONNX Runtime's NodeArg.type: 'tensor(float)', 'seq(tensor(int64))',
    'optional(tensor(float))'."""
    s = f"tensor({onnx_name(kdtype)})"
    if is_sequence:
        s = f"seq({s})"
    if is_optional:
        s = f"optional({s})"
    return s
