"""kiln as an ONNX backend (onnx.backend.base), so that

    import kiln.backend, onnx.backend.test
    onnx.backend.test.BackendTest(kiln.backend, __name__)

runs ONNX's backend tests on kiln. Devices: "CPU" is kiln's default device
(cpu, or ref without one), "CUDA" kiln's cuda device; kiln's own device names
("ref", "vulkan", "opencl:0", ...) work too. Needs the onnx package.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ._session import InferenceSession, SessionOptions, _kiln_devices


def _providers(device: str) -> Optional[list[str]]:
    d = device.strip()
    if d.upper() == "CPU":
        return None  # kiln's default device
    if d.upper().startswith("CUDA"):
        return ["cuda" + d[4:]] if ":" in d else ["cuda"]
    return [d]


class KilnBackendRep(BackendRep):
    """A prepared model: an InferenceSession whose run takes the inputs as a
    list (in graph-input order) or a dict, and returns the outputs as a tuple."""

    def __init__(self, session: InferenceSession):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [i.name for i in self.session.get_inputs()]
        if isinstance(inputs, dict):
            feed = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) > len(names):
                raise ValueError(f"{len(inputs)} inputs given, the model has {len(names)}")
            feed = dict(zip(names, inputs))
        else:
            feed = {names[0]: inputs}
        return tuple(self.session.run(None, feed))


class KilnBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        p = _providers(device)
        if p is None:
            return True
        base = p[0].split(":")[0]
        return any(d.split(":")[0] == base for d in _kiln_devices())

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> KilnBackendRep:
        """model: an onnx.ModelProto, serialized bytes or a path."""
        options = kwargs.pop("sess_options", None) or SessionOptions()
        for k, v in kwargs.items():
            if hasattr(options, k):
                setattr(options, k, v)
        return KilnBackendRep(InferenceSession(model, options, providers=_providers(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence[tuple[Any, Any]]] = None, **kwargs: Any) -> tuple[Any, ...]:
        """Runs one node on numpy inputs (a list in the node's input order, or
        a dict by name), as a one-node model at the newest opset this onnx
        knows (kwargs opset_version to choose)."""
        names = [n for n in node.input if n]
        values = [inputs[n] for n in names] if isinstance(inputs, dict) else list(inputs)
        graph_inputs = [onnx.helper.make_tensor_value_info(n, _tensor_type(np.asarray(v).dtype), np.shape(v))
                        for n, v in zip(names, values)]
        graph_outputs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", None) or onnx.defs.onnx_opset_version()
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, dict(zip(names, values)), device, **kwargs)


def _tensor_type(dtype: np.dtype) -> int:
    helper = getattr(onnx.helper, "np_dtype_to_tensor_dtype", None)
    if helper is not None:
        return int(helper(np.dtype(dtype)))
    from onnx import mapping  # type: ignore[attr-defined]  # onnx < 1.13
    return int(mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)])


is_compatible = KilnBackend.is_compatible
prepare = KilnBackend.prepare
run = KilnBackend.run_model
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device
