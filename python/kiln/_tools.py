"""kiln's own tools as Python data: the devices and their properties, a
model's summary (what `kiln info` prints) and its graph in DOT, what a
session compiled (kernels, fallbacks, memory plan), verification against
the reference device, benchmarks and per-kernel profiles.

Each is a JSON report of the C API (kiln_devices_json, kiln_model_info_json,
kiln_session_report_json, kiln_verify_json, kiln_bench_json,
kiln_session_profile_json; their schemas are in include/kiln.h) parsed into
dicts; `devices()` into small dataclasses; `model_dot()` kiln_model_dot's text.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import time
from ctypes import c_char_p, c_void_p
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from . import _capi as C
from . import _dtypes
from ._closeable import Closeable
from ._errors import InvalidArgument, Unsupported, check
from ._model import load_model
from ._tensor import _Handle, input_array, tensor_from_input


def _json_text(name: str, *args: Any) -> str:
    """Calls one of the library's `..._json(..., char **out_json)` (or a
    `char **out_text` call) and returns its text as the library wrote it."""
    lib = C.lib()
    fn = lib.optional(name)
    if fn is None:
        raise Unsupported(f"{lib.path} predates {name}: rebuild libkiln.so")
    out = c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return lib.take_string(out.value) or ""


def _json_call(name: str, *args: Any) -> dict[str, Any]:
    """_json_text's object, parsed."""
    text = _json_text(name, *args)
    return json.loads(text) if text else {}


# ---- devices ----------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One device as `kiln devices` lists it. `available` is False for a
    device built in but not usable here; `reason` says why."""

    name: str
    description: str = ""
    vendor: str = ""
    driver: Optional[str] = None
    memory: str = "host"  # "host" or "device"
    memory_bytes: int = 0  # 0: host memory / unknown
    compute_units: int = 0  # 0: unknown
    subgroup_size: int = 0  # 0: n/a
    features: tuple[str, ...] = ()
    available: bool = True
    reason: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # members added later

    @classmethod
    def _from_json(cls, d: dict[str, Any], available: bool = True) -> "Device":
        known = {"name", "description", "vendor", "driver", "memory", "memory_bytes", "compute_units",
                 "subgroup_size", "features", "reason"}
        return cls(name=str(d.get("name", "")), description=str(d.get("description", "")),
                   vendor=str(d.get("vendor", "")), driver=d.get("driver"), memory=str(d.get("memory", "host")),
                   memory_bytes=int(d.get("memory_bytes") or 0), compute_units=int(d.get("compute_units") or 0),
                   subgroup_size=int(d.get("subgroup_size") or 0), features=tuple(d.get("features") or ()),
                   available=available, reason=d.get("reason"),
                   extra={k: v for k, v in d.items() if k not in known})

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("name", "description", "vendor", "driver", "memory", "memory_bytes",
                                           "compute_units", "subgroup_size", "available", "reason")}
        d["features"] = list(self.features)
        d.update(self.extra)
        return d


def devices(include_absent: bool = False) -> list[Device]:
    """The devices kiln can run on here (the first is the default), with
    their properties; with include_absent, also those built in but not
    usable on this machine (available False, reason set)."""
    report = _json_call("kiln_devices_json")
    out = [Device._from_json(d) for d in report.get("devices", [])]
    if include_absent:
        out += [Device._from_json(d, available=False) for d in report.get("absent", [])]
    return out


# ---- models and inputs ----------------------------------------------------------


def _dims(info: C.kiln_io_info) -> Optional[list[Any]]:
    """A declared shape: ints, a str for a symbolic dim ("?" unnamed); None for unknown rank."""
    if info.rank < 0:
        return None
    return [int(info.dims[d]) if info.dims[d] >= 0 else (info.dim_names[d] or b"?").decode() for d in range(info.rank)]


class ModelHandle(Closeable):
    """A kiln_model* loaded from a path, bytes or an onnx.ModelProto, with
    its graph inputs' names and dtypes. Freed by close() or when collected."""

    def __init__(self, model: Any):
        self._lib = C.lib()
        self.ptr: Optional[int] = None
        self.path: Optional[str] = None
        self.data: Optional[bytes] = None
        self.ptr, self.path, self.data = load_model(self._lib, model)
        self.inputs: dict[str, int] = {}  # name -> kiln dtype
        self.shapes: dict[str, Optional[list[Any]]] = {}  # name -> dims (a str for a symbolic one)
        info = C.kiln_io_info()
        for i in range(self._lib.kiln_model_input_count(self.ptr)):
            check(self._lib.kiln_model_input_info(self.ptr, i, ctypes.byref(info)))
            self.inputs[info.name.decode()] = int(info.dtype)
            self.shapes[info.name.decode()] = _dims(info)
        self.outputs: list[str] = []
        self.output_shapes: list[Optional[list[Any]]] = []
        for i in range(self._lib.kiln_model_output_count(self.ptr)):
            check(self._lib.kiln_model_output_info(self.ptr, i, ctypes.byref(info)))
            self.outputs.append(info.name.decode())
            self.output_shapes.append(_dims(info))

    def read_bytes(self) -> bytes:
        """The serialized model."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        with open(self.path, "rb") as f:
            return f.read()

    def close(self) -> None:
        if self.ptr is not None:
            self._lib.kiln_model_destroy(self.ptr)
            self.ptr = None



class InputTensors:
    """kiln tensors for a {name: array} feed, checked against the model's
    inputs (an unknown name or a wrong dtype is InvalidArgument naming the
    input); `names` and `ptrs` as the C calls take them. Holds its tensors
    until collected."""

    def __init__(self, model: ModelHandle, feed: Optional[Mapping[str, Any]]):
        self.handles: list[_Handle] = []
        names: list[bytes] = []
        for name, value in (feed or {}).items():
            if name not in model.inputs:
                raise InvalidArgument(f"input '{name}': the model has no such input "
                                      f"(inputs: {', '.join(model.inputs) or 'none'})")
            kd = model.inputs[name]
            arr = input_array(name, value, kd, _dtypes.type_string(kd) if kd else "a tensor")
            ptr, _ = tensor_from_input(name, arr, kd)
            self.handles.append(_Handle(ptr))
            names.append(name.encode())
        self.n = len(names)
        self.names = (c_char_p * max(self.n, 1))(*names)
        self.ptrs = (c_void_p * max(self.n, 1))(*[h.ptr for h in self.handles])


def _device_arg(device: Optional[str], providers: Optional[Sequence[Any]]) -> Optional[str]:
    if device is not None and providers is not None:
        raise InvalidArgument("give device or providers, not both")
    if providers is not None:
        from ._session import _resolve_providers
        return _resolve_providers(providers, None)[0]
    if device is not None:
        from ._session import _device_for, _kiln_devices
        return _device_for(device, {}, _kiln_devices())
    return None


# ---- verify, bench ----------------------------------------------------------------


def verify(model: Any, device: Optional[str] = None, inputs: Optional[Mapping[str, Any]] = None,
           providers: Optional[Sequence[Any]] = None, rtol: float = 1e-3, atol: float = 1e-4,
           max_report: int = 5) -> dict[str, Any]:
    """What `kiln verify` does: the model on `device` (None: the default)
    and on ref with the same inputs (random where not given: floats
    normal(0,1), ints in [0,3], seed 0, symbolic dims 1), every value both
    produce compared: an element matches when |device - ref| <= atol +
    rtol * |ref| (integers, bools and strings exactly; NaN matches NaN).
    Returns kiln_verify_json's report: "ok", "first_divergence" (None, or
    the first node in graph order whose output diverges, with its errors),
    "later_divergences" (the next `max_report` diverging values),
    "outputs", "errors", timings. A run failing on one side is reported
    ("ok" False, "errors"), not raised; a negative or non-finite tolerance
    or a negative max_report is InvalidArgument."""
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InvalidArgument(f"{name} must be a non-negative finite number, got {v!r}")
    if not isinstance(max_report, int) or max_report < 0:
        raise InvalidArgument(f"max_report must be an integer >= 0, got {max_report!r}")
    dev = _device_arg(device, providers)
    lib = C.lib()
    if lib.optional("kiln_verify_json") is None:
        raise Unsupported(f"{lib.path} predates kiln_verify_json with options: rebuild libkiln.so")
    opts = lib.kiln_verify_options_default()
    dev_bytes = dev.encode() if dev else None  # kept alive while opts points at it
    opts.device = dev_bytes
    opts.rtol = float(rtol)
    opts.atol = float(atol)
    opts.max_report = max_report
    with ModelHandle(model) as m:
        feed = InputTensors(m, inputs)
        return _json_call("kiln_verify_json", m.ptr, ctypes.byref(opts), feed.n, feed.names, feed.ptrs)


# ---- the model -------------------------------------------------------------------


def model_info(model: Any) -> dict[str, Any]:
    """What `kiln info MODEL` prints, as data (kiln_model_info_json): ir
    and producer, "metadata_props", "opsets", "inputs" and "outputs" (name,
    type, dtype, shape), "nodes" (control-flow bodies included),
    "main_graph_nodes", "parameters", "initializers", "parameter_bytes",
    "flops" (estimated for the declared input shapes; 0 when unknown),
    "op_histogram" (most frequent first), "unsupported_ops". `model`: a
    path, the serialized model (bytes) or an onnx.ModelProto."""
    with ModelHandle(model) as m:
        return _json_call("kiln_model_info_json", m.ptr)


def model_dot(model: Any) -> str:
    """The model's main graph in Graphviz DOT, as `kiln info MODEL --dot`
    prints it (kiln_model_dot)."""
    with ModelHandle(model) as m:
        return _json_text("kiln_model_dot", m.ptr)


def bench(model: Any, providers: Optional[Sequence[Any]] = None, device: Optional[str] = None,
          inputs: Optional[Mapping[str, Any]] = None, warmup: int = 3, iterations: int = 10, threads: int = 0,
          profile: bool = False, fp16: bool = False, precision: Optional[str] = None) -> dict[str, Any]:
    """What `kiln bench` measures, on a session of its own: `warmup` runs,
    then `iterations` timed ones ("median_ms", "p10_ms", "p90_ms", "min_ms",
    "max_ms", "mean_ms", "throughput_per_s", "create_ms", "first_run_ms");
    with profile, as many runs again with a clock around each kernel:
    "profiled_ms" and "kernels" (name, op, calls, total_ms, ms_per_run,
    percent; slowest first). Inputs not given are random (see verify).
    precision "fp32" or "fp16" as SessionOptions.precision (fp16=True is
    precision="fp16"). On the cpu set KILN_JIT=sync to time compiled
    kernels only."""
    from ._session import precision_code
    prec = precision_code(precision if precision is not None else "fp16" if fp16 else "fp32")
    if iterations < 1:
        raise InvalidArgument(f"iterations must be >= 1, got {iterations}")
    if warmup < 0 or threads < 0:
        raise InvalidArgument(f"warmup and threads must be >= 0, got {warmup} and {threads}")
    dev = _device_arg(device, providers)
    lib = C.lib()
    with ModelHandle(model) as m:
        feed = InputTensors(m, inputs)
        opts = lib.kiln_session_options_default()
        dev_bytes = dev.encode() if dev else None
        opts.device = dev_bytes
        opts.threads = threads
        opts.precision = prec
        return _json_call("kiln_bench_json", m.ptr, ctypes.byref(opts), feed.n, feed.names, feed.ptrs, warmup,
                          iterations, 1 if profile else 0)


# ---- sessions ---------------------------------------------------------------------


def session_report(sess: Any) -> dict[str, Any]:
    """kiln_session_report_json of an InferenceSession."""
    with sess._lock:
        sess._require_open()
        return _json_call("kiln_session_report_json", sess._sess)


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def kernel_table(events: list[dict[str, Any]], runs: int) -> tuple[float, list[dict[str, Any]]]:
    """Profile events summed per kernel, as kiln_bench_json's "kernels":
    (ms per run over all kernels, rows slowest first)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        key = (str(e.get("name", "")), str(e.get("op", "")))
        r = rows.setdefault(key, {"name": key[0], "op": key[1], "calls": 0, "total_ms": 0.0})
        r["calls"] += 1
        r["total_ms"] += float(e.get("dur_us") or 0.0) / 1e3
    total = sum(r["total_ms"] for r in rows.values())
    out = sorted(rows.values(), key=lambda r: -r["total_ms"])
    for r in out:
        r["ms_per_run"] = r["total_ms"] / max(runs, 1)
        r["percent"] = 100.0 * r["total_ms"] / total if total > 0 else 0.0
    return total / max(runs, 1), out


def profile_session(sess: Any, inputs: Mapping[str, Any], warmup: int = 3, iterations: int = 10) -> dict[str, Any]:
    """Runs an InferenceSession `warmup` times, then `iterations` timed
    runs with kiln's per-kernel profiling on: the latency statistics
    (median_ms, p10_ms, p90_ms, min_ms, max_ms, mean_ms, throughput_per_s,
    as kiln_bench_json names them; the timed runs are the profiled ones, so
    on devices without host memory they include a wait per kernel) and the
    per-kernel table ("profiled_ms", "kernels")."""
    if iterations < 1:
        raise InvalidArgument(f"iterations must be >= 1, got {iterations}")
    lib = C.lib()
    set_prof = lib.optional("kiln_session_set_profiling")
    if set_prof is None:
        raise Unsupported(f"{lib.path} predates kiln_session_set_profiling: rebuild libkiln.so")
    for _ in range(warmup):
        sess.run(None, dict(inputs))
    with sess._lock:
        sess._require_open()
        check(set_prof(sess._sess, 1))
    times: list[float] = []
    try:
        for _ in range(iterations):
            t = time.perf_counter()
            sess.run(None, dict(inputs))
            times.append((time.perf_counter() - t) * 1e3)
        with sess._lock:
            prof = _json_call("kiln_session_profile_json", sess._sess)
    finally:
        with sess._lock:
            if sess._sess is not None:
                # The session's own profiling (enable_profiling) stays on.
                check(set_prof(sess._sess, 1 if sess._profiling else 0))
    per_run, rows = kernel_table(prof.get("events", []), iterations)
    med = statistics.median(times)
    return {"device": prof.get("device", sess._device), "warmup": warmup, "iterations": iterations,
            "median_ms": med, "mean_ms": statistics.fmean(times), "min_ms": min(times), "max_ms": max(times),
            "p10_ms": _percentile(times, 0.1), "p90_ms": _percentile(times, 0.9),
            "throughput_per_s": 1e3 / med if med > 0 else None, "samples_ms": times,
            "profiled_ms": per_run, "kernels": rows}


# ---- text forms (python -m kiln) -------------------------------------------------


def format_devices(devs: list[Device], write: Callable[[str], Any]) -> None:
    """The text `kiln devices` prints."""
    for d in devs:
        if not d.available:
            write(f"{d.name:<10} absent: {d.reason}\n")
            continue
        line = f"{'':<10} vendor: {d.vendor}; memory: {d.memory}"
        if d.memory_bytes:
            line += f" ({d.memory_bytes / (1 << 30):.1f} GiB)"
        if d.compute_units:
            line += f"; compute units: {d.compute_units}"
        if d.subgroup_size:
            line += f"; subgroup size: {d.subgroup_size}"
        if d.driver:
            line += f"; driver: {d.driver}"
        line += "; features:" + "".join(" " + f for f in d.features)
        write(f"{d.name:<10} {d.description}\n{line}\n")
