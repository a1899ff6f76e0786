"""ONNX Runtime's inference API over kiln: InferenceSession, SessionOptions,
RunOptions, NodeArg, ModelMetadata and the provider functions.

Providers are kiln devices. ONNX Runtime's names map where one exists
(CPUExecutionProvider -> cpu, or ref where a library has no cpu device;
CUDAExecutionProvider -> cuda); kiln's own names ("cpu", "ref", "vulkan",
"vulkan:1", ("opencl", {"device_id": 0})) work as they are. A kiln session
runs on one device, nodes it cannot run falling back to ref: the first
provider listed is that device. Every provider listed must be available:
a list that cannot be honoured raises ProviderNotAvailable instead of
falling back silently to the CPU, unlike ONNX Runtime.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
import threading
import time
from ctypes import c_char_p, c_void_p
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _capi as C
from . import _dtypes
from ._closeable import Closeable
from ._errors import InvalidArgument, ProviderNotAvailable, Unsupported, check
from ._model import load_model
from ._tensor import Tensor, _Handle, copy_tensor, input_array, outputs_to_numpy, tensor_from_input

# ---- options ------------------------------------------------------------------


class GraphOptimizationLevel(enum.IntEnum):
    """Accepted for compatibility: kiln always runs its graph passes on the
    compiling devices (ref runs the graph as written)."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


_PRECISIONS = {"fp32": C.PRECISION_FP32, "fp16": C.PRECISION_FP16}


def precision_code(value: str) -> int:
    """kiln_precision for "fp32" or "fp16"; ValueError for anything else."""
    if not isinstance(value, str) or value not in _PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(repr(p) for p in _PRECISIONS)}, got {value!r}")
    return _PRECISIONS[value]


class SessionOptions:
    """ONNX Runtime's SessionOptions. Honoured: intra_op_num_threads (kiln's
    thread count, 0 = the default), enable_profiling and
    profile_file_prefix. Accepted and ignored (kiln has no such knob):
    graph_optimization_level, inter_op_num_threads, execution_mode,
    log_severity_level, log_verbosity_level, logid, enable_cpu_mem_arena,
    enable_mem_pattern, enable_mem_reuse, use_deterministic_compute,
    optimized_model_filepath and the session config entries.

    kiln's own: `precision`, "fp32" (the default) or "fp16" (kiln_session_options'
    precision, `kiln run --fp16`): GPUs with fp16 support keep float tensors
    in fp16 (storage, and arithmetic where safe; sums accumulate in fp32);
    the other devices (cpu, ref) accept it and compute in fp32. Any other
    value raises ValueError when set."""

    def __init__(self) -> None:
        self._precision = "fp32"
        self.intra_op_num_threads: int = 0
        self.inter_op_num_threads: int = 0
        self.graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling: bool = False
        self.profile_file_prefix: str = "kiln_profile_"
        self.log_severity_level: int = 2
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.enable_cpu_mem_arena: bool = True
        self.enable_mem_pattern: bool = True
        self.enable_mem_reuse: bool = True
        self.use_deterministic_compute: bool = False
        self.optimized_model_filepath: str = ""
        self._config: dict[str, str] = {}

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        precision_code(value)
        self._precision = value

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"SessionOptions has no config entry '{key}'")
        return self._config[key]

    def register_custom_ops_library(self, path: str) -> None:
        raise Unsupported("kiln has no custom-op libraries")


class RunOptions:
    """ONNX Runtime's RunOptions: accepted; none changes a kiln run
    (KILN_RUN_TIMEOUT bounds a run's time)."""

    def __init__(self) -> None:
        self.log_severity_level: int = 2
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.run_tag: str = ""
        self.terminate: bool = False
        self.only_execute_path_to_fetches: bool = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        return self._config[key]


class NodeArg:
    """A graph input or output as ONNX Runtime describes it: name, type
    ('tensor(float)') and shape (ints, symbolic dims by name, None where
    unknown; [] for an unknown rank, as for a scalar)."""

    def __init__(self, name: str, type: str, shape: list[Union[int, str, None]]):
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """ONNX Runtime's ModelMetadata."""

    def __init__(self, producer_name: str = "", graph_name: str = "", domain: str = "", description: str = "",
                 graph_description: str = "", version: int = 0,
                 custom_metadata_map: Optional[dict[str, str]] = None):
        self.producer_name = producer_name
        self.graph_name = graph_name
        self.domain = domain
        self.description = description
        self.graph_description = graph_description
        self.version = version
        self.custom_metadata_map = custom_metadata_map or {}


# ---- providers ----------------------------------------------------------------

_ORT_TO_KILN = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}


def _kiln_devices() -> list[str]:
    lib = C.lib()
    return [lib.kiln_device_name(i).decode() for i in range(lib.kiln_device_count())]


def _ort_name(device: str) -> str:
    base = device.split(":")[0]
    for ort, kiln in _ORT_TO_KILN.items():
        if base == kiln:
            return ort
    return device


def get_available_providers() -> list[str]:
    """Every kiln device on this machine, by ONNX Runtime's name where one
    maps (CPUExecutionProvider for cpu, CUDAExecutionProvider for cuda) and
    by kiln's otherwise ("ref", "vulkan:0", ...); the default first."""
    out: list[str] = []
    for d in _kiln_devices():
        name = _ort_name(d) if d.split(":")[0] in ("cpu", "cuda") else d
        if name not in out:
            out.append(name)
    return out


def get_all_providers() -> list[str]:
    """Every provider name kiln understands, present here or not."""
    return list(_ORT_TO_KILN) + ["cpu", "ref", "null", "vulkan", "opencl", "cuda"]


def get_device() -> str:
    """"GPU" where kiln has a CUDA device here, else "CPU" (ONNX Runtime's
    build flavour; kiln's Vulkan and OpenCL devices may be either)."""
    return "GPU" if any(d.startswith("cuda") for d in _kiln_devices()) else "CPU"


def _device_for(name: str, options: dict[str, Any], available: list[str]) -> str:
    """The kiln device string for one provider entry (ProviderNotAvailable
    when unknown or absent)."""
    if name in _ORT_TO_KILN:
        base = _ORT_TO_KILN[name]
        if base == "cpu" and "cpu" not in available:
            base = "ref"  # a library without the compiled cpu device
    else:
        base = name
    dev_id = options.get("device_id")
    if dev_id is not None and ":" not in base and not (base in available and int(dev_id) == 0):
        base = f"{base}:{int(dev_id)}"  # cpu, ref and null have no index: device_id 0 is themselves
    ok = base in available or (":" not in base and any(a.split(":")[0] == base for a in available))
    if base.endswith(":0") and base[:-2] in available:
        ok = True
    if not ok:
        known = name in _ORT_TO_KILN or base.split(":")[0] in ("cpu", "ref", "null", "vulkan", "opencl", "cuda")
        why = "is not available on this machine" if known else "is not a provider kiln knows"
        raise ProviderNotAvailable(f"provider '{name}'{' (kiln device ' + base + ')' if base != name else ''} {why}; "
                                   f"available: {', '.join(get_available_providers())}")
    return base


def _resolve_providers(providers: Optional[Sequence[Any]], provider_options: Optional[Sequence[dict[str, Any]]]
                       ) -> tuple[Optional[str], list[str], list[dict[str, Any]]]:
    available = _kiln_devices()
    if not providers:
        dev = available[0] if available else None
        return None, [_ort_name(dev) if dev else "ref"], [{}]
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument(f"{len(providers)} providers but {len(provider_options)} provider_options")
    names: list[str] = []
    opts: list[dict[str, Any]] = []
    devices: list[str] = []
    for i, p in enumerate(providers):
        if isinstance(p, (tuple, list)):
            if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], dict):
                raise InvalidArgument(f"provider {i}: expected a name or (name, options dict), got {p!r}")
            name, o = p[0], dict(p[1])
            if provider_options is not None:
                raise InvalidArgument("options given in 'providers' and in 'provider_options'")
        elif isinstance(p, str):
            name, o = p, dict(provider_options[i]) if provider_options is not None else {}
        else:
            raise InvalidArgument(f"provider {i}: expected a name or (name, options dict), got {p!r}")
        devices.append(_device_for(name, o, available))
        names.append(name)
        opts.append({k: str(v) for k, v in o.items()})
    return devices[0], names, opts


# ---- the session -----------------------------------------------------------------

_Model = Union[str, bytes, os.PathLike, Any]


def _io_info(info: C.kiln_io_info) -> tuple[NodeArg, int]:
    name = info.name.decode() if info.name else ""
    shape: list[Union[int, str, None]] = []  # unknown rank: [] as ONNX Runtime says (like a scalar's)
    # A sequence or an optional has no shape of its own: [] (ONNX Runtime's NodeArg too).
    if info.rank >= 0 and not info.is_sequence and not info.is_optional:
        for d in range(info.rank):
            if info.dims[d] >= 0:
                shape.append(int(info.dims[d]))
            elif info.dim_names[d]:
                shape.append(info.dim_names[d].decode())
            else:
                shape.append(None)
    t = _dtypes.type_string(info.dtype, bool(info.is_sequence), bool(info.is_optional))
    return NodeArg(name, t, shape), int(info.dtype)


# kiln_value_kind (kiln.h)
_VALUE_TENSOR, _VALUE_SEQUENCE, _VALUE_NONE = 0, 1, 2


class _ValueHandle:
    """One kiln_value* this side owns (kiln_value_free when collected)."""

    def __init__(self, lib: Any, tensor: Optional[_Handle] = None):
        self._lib = lib
        self.ptr: Optional[int] = None
        if tensor is not None:  # a TENSOR value taking a reference of its own to the tensor
            out = c_void_p()
            check(lib.kiln_value_from_tensor(lib.kiln_tensor_retain(tensor.ptr), ctypes.byref(out)))
            self.ptr = out.value

    @classmethod
    def adopt(cls, lib: Any, ptr: Optional[int]) -> "_ValueHandle":
        h = cls(lib)
        h.ptr = ptr or None
        return h

    def __del__(self) -> None:
        if self.ptr:
            self._lib.kiln_value_free(self.ptr)
            self.ptr = None


class _SequenceHandle(_ValueHandle):
    """A SEQUENCE value of the given tensors (each handle's tensor retained by the value)."""

    def __init__(self, lib: Any, kd: int, items: list[_Handle]):
        super().__init__(lib)
        out = c_void_p()
        check(lib.kiln_value_new_sequence(kd, ctypes.byref(out)))
        self.ptr = out.value
        for h in items:
            check(lib.kiln_value_seq_insert(self.ptr, -1, lib.kiln_tensor_retain(h.ptr)))


class InferenceSession(Closeable):
    """ONNX Runtime's InferenceSession over a kiln session.

    `model` is a path (str or pathlib.Path), the serialized model (bytes) or
    an onnx.ModelProto. Thread-safe: concurrent run() calls on one session
    are serialized by the session's lock (each releases the GIL while kiln
    runs); distinct sessions run concurrently."""

    def __init__(self, path_or_bytes: _Model, sess_options: Optional[SessionOptions] = None,
                 providers: Optional[Sequence[Any]] = None, provider_options: Optional[Sequence[dict[str, Any]]] = None,
                 **kwargs: Any):
        self._lib = C.lib()
        self._model: Optional[int] = None
        self._sess: Optional[int] = None
        self._lock = threading.Lock()
        self._sess_options = sess_options or SessionOptions()
        self._t0_ns = time.perf_counter_ns()
        self._start_ns = time.time_ns()
        self._events: list[dict[str, Any]] = []
        self._profiling = bool(self._sess_options.enable_profiling)
        self._model_path: Optional[str] = None
        device, self._providers, self._provider_options = _resolve_providers(providers, provider_options)
        self._device = device
        t = time.perf_counter_ns()
        self._load(path_or_bytes)
        self._event("Session", "model_loading_uri" if self._model_path else "model_loading_array", t)
        try:
            t = time.perf_counter_ns()
            self._create_session(device)
            self._event("Session", "session_initialization", t)
        except BaseException:
            self.close()
            raise

    # -- construction
    def _load(self, model: _Model) -> None:
        self._model, path, _ = load_model(self._lib, model)
        if path is not None:
            self._model_path = path
        self._inputs: list[NodeArg] = []
        self._input_dtypes: dict[str, int] = {}
        self._outputs: list[NodeArg] = []
        info = C.kiln_io_info()
        for i in range(self._lib.kiln_model_input_count(self._model)):
            check(self._lib.kiln_model_input_info(self._model, i, ctypes.byref(info)))
            arg, kd = _io_info(info)
            self._inputs.append(arg)
            self._input_dtypes[arg.name] = kd
        for i in range(self._lib.kiln_model_output_count(self._model)):
            check(self._lib.kiln_model_output_info(self._model, i, ctypes.byref(info)))
            self._outputs.append(_io_info(info)[0])
        self._output_index = {o.name: i for i, o in enumerate(self._outputs)}
        self._optional_inputs = {a.name for a in self._inputs if a.type.startswith("optional(")}
        self._sequence_inputs = {a.name for a in self._inputs if a.type.startswith(("seq(", "optional(seq("))}

    def _create_session(self, device: Optional[str]) -> None:
        opts = self._lib.kiln_session_options_default()
        dev_bytes = device.encode() if device else None
        opts.device = dev_bytes
        threads = int(self._sess_options.intra_op_num_threads or 0)
        if threads < 0:
            raise InvalidArgument(f"intra_op_num_threads must be >= 0, got {threads}")
        opts.threads = threads
        opts.precision = precision_code(self._sess_options.precision)
        out = c_void_p()
        check(self._lib.kiln_session_create(self._model, ctypes.byref(opts), ctypes.byref(out)))
        self._sess = out.value
        self._sess_created_ns = time.perf_counter_ns()  # kiln's profile times count from here
        if self._profiling:
            fn = self._lib.optional("kiln_session_set_profiling")
            if fn is not None:
                check(fn(self._sess, 1))

    # -- ONNX Runtime's queries
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """kiln's C API does not list initializers; they can still be fed by name."""
        return []

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {n: dict(o) for n, o in zip(self._providers, self._provider_options)}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(self, providers: Optional[Sequence[Any]] = None,
                      provider_options: Optional[Sequence[dict[str, Any]]] = None) -> None:
        """Re-creates the session on other providers (the model stays)."""
        device, names, opts = _resolve_providers(providers, provider_options)
        with self._lock:
            self._require_open()
            self._lib.kiln_session_destroy(self._sess)
            self._sess = None
            self._create_session(device)
            self._device, self._providers, self._provider_options = device, names, opts

    def disable_fallback(self) -> None:
        """No-op: kiln never falls back to another provider silently."""

    def enable_fallback(self) -> None:
        """No-op (see disable_fallback)."""

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (needs kiln_model_metadata_get; an older
        library gives empty fields)."""
        self._require_open()
        get = self._lib.optional("kiln_model_metadata_get")
        if get is None:
            return ModelMetadata()
        md = C.kiln_model_metadata()
        check(get(self._model, ctypes.byref(md)))

        def s(b: Optional[bytes]) -> str:
            return b.decode("utf-8", "replace") if b else ""
        props: dict[str, str] = {}
        prop = self._lib.optional("kiln_model_metadata_prop")
        if prop is not None:
            for i in range(md.n_props):
                k, v = c_char_p(), c_char_p()
                check(prop(self._model, i, ctypes.byref(k), ctypes.byref(v)))
                props[s(k.value)] = s(v.value)
        # ONNX Runtime reports a model_version the file leaves unset as
        # INT64_MAX; kiln reads an unset one as 0, and 0 maps back to that.
        version = int(md.model_version) or 2**63 - 1
        return ModelMetadata(s(md.producer_name), s(md.graph_name), s(md.domain), s(md.doc_string),
                             s(md.graph_doc_string), version, props)

    def get_profiling_start_time_ns(self) -> int:
        return self._start_ns

    # -- running
    def _require_open(self) -> None:
        if self._sess is None:
            raise InvalidArgument("the session is closed")

    def _event(self, cat: str, name: str, t_ns: int, args: Optional[dict[str, Any]] = None) -> None:
        if not self._profiling:
            return
        now = time.perf_counter_ns()
        self._events.append({"cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(),
                             "dur": (now - t_ns) // 1000, "ts": (t_ns - self._t0_ns) // 1000, "ph": "X",
                             "name": name, "args": args or {}})

    def _run_ptrs(self, output_names: Optional[Sequence[str]], input_feed: dict[str, Any]) -> list[Any]:
        """The wanted outputs as owned kiln_tensor* (an int), a list of them
        (a sequence output) or None (an empty optional)."""
        if not isinstance(input_feed, dict):
            raise InvalidArgument(f"input_feed: expected a dict of name -> value, got {type(input_feed).__name__}")
        if output_names is None or len(output_names) == 0:
            want = list(range(len(self._outputs)))
        else:
            want = []
            for n in output_names:
                if n not in self._output_index:
                    raise InvalidArgument(f"the model has no output named '{n}' "
                                          f"(outputs: {', '.join(o.name for o in self._outputs)})")
                want.append(self._output_index[n])
        missing = [a for a in self._inputs if a.name not in input_feed and a.name not in self._optional_inputs]
        if missing:
            a = missing[0]
            raise InvalidArgument(f"input '{a.name}' ({a.type}, shape {a.shape}) is missing from the input feed "
                                  f"(given: {', '.join(map(repr, input_feed)) or 'nothing'})")
        names: list[bytes] = []
        handles: list[Any] = []  # _Handle per tensor input, _SequenceHandle per sequence
        lent: set[int] = set()  # inputs over the caller's arrays (kiln_tensor_wrap)
        for name, value in input_feed.items():
            if not isinstance(name, str):
                raise InvalidArgument(f"input names must be str, got {name!r}")
            if value is None and name in self._optional_inputs:
                continue  # an empty optional: omitted, as kiln takes it
            if name in self._sequence_inputs:
                if self._lib.optional("kiln_value_kind_of") is None:
                    raise Unsupported(f"input '{name}' is a sequence: this libkiln.so takes tensors only")
                if not isinstance(value, (list, tuple)):
                    raise InvalidArgument(f"input '{name}' is a sequence: expected a list "
                                          f"of arrays, got {type(value).__name__}")
                kd = self._input_dtypes.get(name, C.DTYPE_UNDEFINED)
                items = []
                for k, item in enumerate(value):
                    arr = input_array(f"{name}[{k}]", item, kd, _dtypes.type_string(kd) if kd else "a tensor")
                    items.append(_Handle(tensor_from_input(f"{name}[{k}]", arr, kd)[0]))
                handles.append(_SequenceHandle(self._lib, kd, items))
                names.append(name.encode())
                continue
            if isinstance(value, Tensor):
                ptr = self._lib.kiln_tensor_retain(value.ptr)
            else:
                kd = self._input_dtypes.get(name, C.DTYPE_UNDEFINED)
                arr = input_array(name, value, kd, _dtypes.type_string(kd) if kd else "a tensor")
                ptr, borrowed = tensor_from_input(name, arr, kd)
                if borrowed:
                    lent.add(ptr)
            handles.append(_Handle(ptr))
            names.append(name.encode())
        n_out = max(want) + 1 if want else 0
        c_names = (c_char_p * max(len(names), 1))(*names)
        if self._lib.optional("kiln_value_kind_of") is None:  # an older libkiln.so: tensors only
            return self._run_tensor_ptrs(want, n_out, c_names, handles, lent)
        values = [h if isinstance(h, _SequenceHandle) else _ValueHandle(self._lib, h) for h in handles]
        c_inputs = (c_void_p * max(len(values), 1))(*[v.ptr for v in values])
        c_outputs = (c_void_p * max(n_out, 1))()
        with self._lock:
            self._require_open()
            t = time.perf_counter_ns()
            st = self._lib.kiln_session_run_values(self._sess, len(names), c_names, c_inputs, n_out, c_outputs)
            self._event("Session", "model_run", t)
        del values, handles  # the inputs: kiln holds its own references where it needs them
        owned = [_ValueHandle.adopt(self._lib, c_outputs[i]) for i in range(n_out)]
        check(st)

        def take(p: int) -> int:
            # An output may be a lent input itself (a graph input passed
            # through unchanged, on ref): copied, so that it never shares the
            # caller's array, as in ONNX Runtime.
            return copy_tensor(p) if p in lent else int(self._lib.kiln_tensor_retain(p))

        result: list[Any] = []
        for i in want:
            v = owned[i].ptr
            kind = self._lib.kiln_value_kind_of(v) if v else _VALUE_NONE
            if kind == _VALUE_NONE:
                result.append(None)
            elif kind == _VALUE_SEQUENCE:
                result.append([take(self._lib.kiln_value_item(v, k)) for k in range(self._lib.kiln_value_count(v))])
            else:
                result.append(take(self._lib.kiln_value_item(v, 0)))
        return result

    def _run_tensor_ptrs(self, want: list[int], n_out: int, c_names: Any, handles: list[_Handle],
                         lent: set[int]) -> list[Any]:
        c_inputs = (c_void_p * max(len(handles), 1))(*[h.ptr for h in handles])
        c_outputs = (c_void_p * max(n_out, 1))()
        with self._lock:
            self._require_open()
            t = time.perf_counter_ns()
            st = self._lib.kiln_session_run(self._sess, len(handles), c_names, c_inputs, n_out, c_outputs)
            self._event("Session", "model_run", t)
        del handles
        check(st)
        owned = [_Handle(c_outputs[i] or 0) for i in range(n_out)]
        return [copy_tensor(owned[i].ptr or 0) if (owned[i].ptr or 0) in lent
                else self._lib.kiln_tensor_retain(owned[i].ptr or 0) for i in want]

    def run(self, output_names: Optional[Sequence[str]], input_feed: dict[str, Any],
            run_options: Optional[RunOptions] = None) -> list[Any]:
        """Runs the model: output_names (None: all) as numpy arrays over
        kiln's memory (no copy), in order; a sequence output as a list of
        arrays, an empty optional as None."""
        return [o if o is None else outputs_to_numpy(o) if isinstance(o, list) else outputs_to_numpy([o])[0]
                for o in self._run_ptrs(output_names, input_feed)]

    def run_tensors(self, output_names: Optional[Sequence[str]], input_feed: dict[str, Any],
                    run_options: Optional[RunOptions] = None) -> list[Any]:
        """As run(), the outputs as kiln.Tensor (for DLPack consumers; a
        sequence output a list of them, an empty optional None)."""
        return [o if o is None else [Tensor._adopt(p) for p in o] if isinstance(o, list) else Tensor._adopt(o)
                for o in self._run_ptrs(output_names, input_feed)]

    def end_profiling(self) -> str:
        """Writes the profile as ONNX Runtime does (Chrome trace JSON: a list
        of {"cat","name","ph":"X","ts","dur","pid","tid","args"}) to
        <profile_file_prefix><date>.json and returns that file name; "" when
        profiling is off. kiln's per-node events (cat "Node", the library's
        kiln_session_profile_json) join the session's where the library has it."""
        if not self._profiling:
            return ""
        events = list(self._events)
        fn = self._lib.optional("kiln_session_profile_json")
        if fn is not None and self._sess is not None:
            out = c_void_p()
            with self._lock:
                check(fn(self._sess, ctypes.byref(out)))
                off = self._lib.optional("kiln_session_set_profiling")
                if off is not None:
                    check(off(self._sess, 0))  # profiling ends here, as in ONNX Runtime
            text = self._lib.take_string(out.value)
            events += self._node_events(json.loads(text) if text else {})
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self._start_ns / 1e9))
        path = f"{self._sess_options.profile_file_prefix}{stamp}_{os.getpid()}_{id(self) & 0xffff}.json"
        with open(path, "w") as f:
            json.dump(events, f)
        self._profiling = False
        return path

    def _node_events(self, prof: dict[str, Any]) -> list[dict[str, Any]]:
        evs = prof.get("events", []) if isinstance(prof, dict) else []
        created_us = (self._sess_created_ns - self._t0_ns) / 1000  # start_us counts from the session's creation
        out = []
        for e in evs:
            dev = str(e.get("device", self._device or ""))
            out.append({"cat": "Node", "pid": os.getpid(), "tid": int(e.get("thread", 0)),
                        "dur": int(round(float(e.get("dur_us", 0)))),
                        "ts": int(round(created_us + float(e.get("start_us", 0)))), "ph": "X",
                        "name": f"{e.get('name', '')}_kernel_time",
                        "args": {"op_name": str(e.get("op", "")), "provider": _ort_name(dev),
                                 "run": int(e.get("run", 0))}})
        return out

    # -- kiln's own reports (python/kiln/_tools.py)
    def info(self) -> dict[str, Any]:
        """What the session compiled (kiln_session_report_json): device and
        mode, "kernels", "fallbacks" (nodes left to ref and why), "memory"."""
        from ._tools import session_report
        return session_report(self)

    def profile(self, input_feed: dict[str, Any], warmup: int = 3, iterations: int = 10) -> dict[str, Any]:
        """Latency statistics and the per-kernel table of `iterations` runs
        of input_feed (after `warmup` runs), kiln_bench_json's keys."""
        from ._tools import profile_session
        return profile_session(self, input_feed, warmup, iterations)

    # -- lifetime
    def close(self) -> None:
        """Frees the session and the model now (outputs already returned stay
        valid). Idempotent; run() afterwards raises."""
        with self._lock:
            if self._sess is not None:
                self._lib.kiln_session_destroy(self._sess)
                self._sess = None
            if self._model is not None:
                self._lib.kiln_model_destroy(self._model)
                self._model = None


