"""Just enough of ONNX's protobuf wire format to list a model's
initializers (name, dtype, dims) and its nodes' op types, without the onnx
package: the trainer translates `trainable` into a freeze pattern over
initializer names, and `python -m kiln info` prints the op histogram and
parameter counts. Only the main graph is read (not subgraphs' bodies).

Field numbers (onnx.proto): ModelProto.graph = 7; GraphProto.node = 1,
.initializer = 5, .input = 11; NodeProto.input = 1, .op_type = 4;
ValueInfoProto.name = 1; TensorProto.dims = 1,
.data_type = 2, .name = 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ._errors import InvalidModel


@dataclass(frozen=True)
class Initializer:
    name: str
    dtype: int  # kiln_dtype / TensorProto.DataType
    dims: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidModel("truncated protobuf varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


_EMPTY = memoryview(b"")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int, memoryview]]:
    """(field number, wire type, number, bytes): the number for varints and
    fixed widths, the bytes (a view, no copy) for length-delimited fields."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
            yield num, wt, v, _EMPTY
        elif wt == 1:
            yield num, wt, int.from_bytes(buf[pos:pos + 8], "little"), _EMPTY
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise InvalidModel("truncated protobuf field")
            yield num, wt, 0, buf[pos:pos + n]
            pos += n
        elif wt == 5:
            yield num, wt, int.from_bytes(buf[pos:pos + 4], "little"), _EMPTY
            pos += 4
        else:
            raise InvalidModel(f"protobuf wire type {wt} is not ONNX's")


def _graph(model: bytes) -> memoryview:
    for num, wt, _, v in _fields(memoryview(model)):
        if num == 7 and wt == 2:
            return v
    raise InvalidModel("the model has no graph")


def _tensor(buf: memoryview) -> Initializer:
    name, dtype, dims = "", 0, []
    for num, wt, x, v in _fields(buf):
        if num == 8 and wt == 2:
            name = bytes(v).decode("utf-8", "replace")
        elif num == 2 and wt == 0:
            dtype = x
        elif num == 1 and wt == 0:
            dims.append(x)
        elif num == 1 and wt == 2:  # packed dims
            p = 0
            while p < len(v):
                d, p = _varint(v, p)
                dims.append(d)
    return Initializer(name, dtype, tuple(dims))


def initializers(model: bytes) -> list[Initializer]:
    """The main graph's initializers, in file order."""
    return [_tensor(v) for num, wt, _, v in _fields(_graph(model)) if num == 5 and wt == 2]


def nodes(model: bytes) -> list[tuple[str, list[str]]]:
    """The main graph's nodes as (op type, input names), in file order."""
    out = []
    for num, wt, _, v in _fields(_graph(model)):
        if num == 1 and wt == 2:
            op, inputs = "", []
            for n2, w2, _, v2 in _fields(v):
                if n2 == 4 and w2 == 2:
                    op = bytes(v2).decode("utf-8", "replace")
                elif n2 == 1 and w2 == 2:
                    inputs.append(bytes(v2).decode("utf-8", "replace"))
            out.append((op, inputs))
    return out


def input_names(model: bytes) -> list[str]:
    """The main graph's inputs (with and without initializers), by name."""
    out = []
    for num, wt, _, v in _fields(_graph(model)):
        if num == 11 and wt == 2:
            for n2, w2, _, v2 in _fields(v):
                if n2 == 1 and w2 == 2:
                    out.append(bytes(v2).decode("utf-8", "replace"))
    return out


def op_types(model: bytes) -> list[str]:
    """The main graph's nodes' op types, in file order."""
    return [op for op, _ in nodes(model)]
