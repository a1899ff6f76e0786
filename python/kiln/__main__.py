"""python -m kiln: the `kiln` command line over the Python package.

    python -m kiln run MODEL.onnx [--device D] [--threads N] [--fp16] [--input NAME=FILE.npy|.npz]...
                                  [--output-dir DIR] [--labels FILE.txt] [--top K]
    python -m kiln info MODEL.onnx [--dot] [--device D] [--json]
    python -m kiln bench MODEL.onnx [--device D] [--threads N] [--warmup W] [--iterations K]
                                    [--input NAME=FILE.npy]... [--dim NAME=VALUE]... [--seed S]
                                    [--profile] [--top T] [--json] [--fp16]
    python -m kiln verify MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--dim NAME=VALUE]... [--seed S]
                                     [--rtol R] [--atol A] [--max-report N] [--json]
    python -m kiln train MODEL.onnx --data TRAIN.npz --loss L [kiln train's options]
    python -m kiln devices [--json]

The commands and options are the `kiln` binary's (src/cli/), implemented
over kiln's Python API and C API, not by running the binary. What the C
API reports, this prints as the binary does: `info` (kiln_model_info_json,
kiln_model_dot for --dot, kiln_session_describe / kiln_session_report_json
with --device), `verify` (kiln_verify_json with --rtol, --atol and
--max-report; its text is the binary's), `run` (sequence inputs from .npz,
sequence outputs to .npz, --fp16 as SessionOptions.precision = "fp16"),
`devices`.

Differences, and why:
  - `run --labels/--top` print the top classes (as examples/classify.c does);
    the binary has no such option.
  - `bench` prints kiln_bench_json's statistics: no load time, peak RSS or
    per-op GFLOP/s table (the binary measures those around its own process
    and a private FMA loop that the C API does not offer).
  - random inputs (bench, verify) come from numpy where --dim or --seed is
    given, else from kiln's own generator as the binary's; bench and verify
    take tensors only (.npy), as kiln_bench_json and kiln_verify_json do.
  - `verify --inject-error NODE`, a hidden option of the binary for tests of
    the tool itself, is not offered: it perturbs a device's buffers, which no
    public call does.
  - `verify --json` and `bench --json` print the parsed object again
    (json.dumps), so the text is the same data, not the same bytes.
Errors: one line `kiln: error: ...` on stderr, exit status 1 (2 for a bad
command line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Optional, Sequence

import numpy as np

from . import _capi as C
from . import _dtypes, _proto
from ._errors import InvalidArgument, KilnError, NoSuchFile, Unsupported
from ._tools import ModelHandle, bench, devices, format_devices, verify


def _fail(msg: str) -> int:
    sys.stderr.write("kiln: error: " + " ".join(str(msg).split("\n")) + "\n")
    return 1


def _dtype_name(kd: int) -> str:
    n = C.lib().kiln_dtype_name(kd)
    return n.decode() if n else "?"


def _parse_inputs(specs: Sequence[str], sequences: bool = False) -> dict[str, Any]:
    """--input NAME=FILE.npy values as arrays; with `sequences`, NAME=FILE.npz
    as a list of its arrays in order (a sequence input, as `kiln run` reads it)."""
    out: dict[str, Any] = {}
    for spec in specs or ():
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise InvalidArgument(f"--input takes NAME=FILE.npy, got '{spec}'")
        if name in out:
            raise InvalidArgument(f"input '{name}' given twice")
        if path.endswith(".npz") and not sequences:
            raise Unsupported(f"input '{name}': {path} is a sequence (.npz); kiln_verify_json and kiln_bench_json "
                              "take tensors only (`python -m kiln run` takes it)")
        if not os.path.exists(path):
            raise NoSuchFile(f"input '{name}': {path} does not exist")
        try:
            if path.endswith(".npz"):
                with np.load(path, allow_pickle=False) as z:
                    out[name] = [z[k] for k in z.files]
            else:
                out[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise InvalidArgument(f"input '{name}': {path}: {e}") from None
    return out


def _random_inputs(model: ModelHandle, given: dict[str, Any], dims: Sequence[str], seed: Optional[int]
                   ) -> dict[str, Any]:
    """Inputs not given, made with numpy (--dim / --seed): floats normal(0,1),
    ints in [0,3], symbolic dims from --dim (default 1)."""
    named: dict[str, int] = {}
    for spec in dims or ():
        k, eq, v = spec.partition("=")
        if not eq or not v.isdigit():
            raise InvalidArgument(f"--dim takes NAME=VALUE with VALUE >= 0, got '{spec}'")
        named[k] = int(v)
    used = {d for s in model.shapes.values() if s for d in s if isinstance(d, str)}
    for k in named:
        if k not in used:
            raise InvalidArgument(f"--dim {k}: no model input has a dimension named '{k}'")
    rng = np.random.default_rng(seed or 0)
    out = dict(given)
    for name, kd in model.inputs.items():
        if name in out:
            continue
        shape = [d if isinstance(d, int) else named.get(d, 1) for d in (model.shapes.get(name) or [])]
        dt = _dtypes.to_numpy(kd)
        if dt is None:
            raise Unsupported(f"input '{name}': no numpy dtype for {_dtype_name(kd)} to make random values")
        if dt.kind == "f":
            out[name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(dt)
        elif dt.kind in "iu":
            out[name] = rng.integers(0, 4, shape).astype(dt)
        else:
            raise Unsupported(f"input '{name}': cannot make random {_dtype_name(kd)} values")
    return out


# ---- run ----------------------------------------------------------------------------


def _values(arr: np.ndarray, limit: int = 10) -> str:
    flat = arr.reshape(-1)
    parts = []
    for v in flat[:limit]:
        if arr.dtype.kind == "f":
            parts.append(f"{float(v):.6g}")
        elif arr.dtype.kind == "c":
            parts.append("(complex)")
            break
        elif arr.dtype.kind in "OUS":
            parts.append('"' + (v.decode() if isinstance(v, bytes) else str(v)) + '"')
        else:
            parts.append(str(int(v)))
    text = "  values: " + " ".join(parts)
    if flat.size > limit:
        text += f" ... ({flat.size} values)"
    return text


def _print_output(name: str, y: Any, elem_dtype: str) -> None:
    """One output as `kiln run` prints it: a tensor's dtype, shape and first
    values; a sequence's items (up to 4); an empty optional."""
    if y is None:
        print(f"{name}: empty optional")
        return
    if isinstance(y, list):
        dt = elem_dtype
        if y:
            kd = _dtypes.from_numpy(y[0].dtype)
            dt = _dtype_name(kd) if kd else str(y[0].dtype)
        print(f"{name}: sequence of {len(y)} {dt} tensors")
        for i, item in enumerate(y[:4]):
            print(f"  [{i}] [{','.join(map(str, item.shape))}]")
            print(_values(item))
        return
    kd = _dtypes.from_numpy(y.dtype)
    print(f"{name}: {_dtype_name(kd) if kd else y.dtype} [{','.join(map(str, y.shape))}]")
    print(_values(y))


def cmd_run(a: argparse.Namespace) -> int:
    from ._session import InferenceSession, SessionOptions
    if a.threads is not None and a.threads < 1:
        raise InvalidArgument("--threads needs a positive number")
    feed = _parse_inputs(a.input, sequences=True)
    so = SessionOptions()
    so.intra_op_num_threads = a.threads or 0
    if a.fp16:
        so.precision = "fp16"  # GPUs with fp16 support keep float tensors in fp16; other devices ignore it
    providers = [a.device] if a.device else None
    with InferenceSession(a.model, so, providers=providers) as sess:
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(None, feed)
    if a.output_dir:
        os.makedirs(a.output_dir, exist_ok=True)
        for i, y in enumerate(outs):
            if y is None:  # an empty optional has no array to write: the file is absent
                sys.stderr.write(f"kiln: note: output {i} is an empty optional; no file written\n")
            elif isinstance(y, list):
                np.savez(os.path.join(a.output_dir, f"output_{i}.npz"), **{f"item_{k}": v for k, v in enumerate(y)})
            else:
                np.save(os.path.join(a.output_dir, f"output_{i}.npy"), y)
        return 0
    elem = {}
    if any(isinstance(y, list) and not y for y in outs):  # an empty sequence: its declared dtype
        from ._tools import model_info
        elem = {o["name"]: o["dtype"] for o in model_info(a.model)["outputs"]}
    for name, y in zip(names, outs):
        _print_output(name, y, elem.get(name, "?"))
    if a.labels:
        with open(a.labels) as f:
            labels = [line.strip() for line in f if line.strip()]
        logits = np.asarray(outs[0], dtype=np.float64).reshape(-1)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        src = a.input[0].partition("=")[2] if a.input else a.model
        print(f"top classes for {src}:")
        for rank, k in enumerate(np.argsort(-p, kind="stable")[:a.top], 1):
            label = labels[k] if k < len(labels) else str(k)
            print(f"  {rank}. {label:<12} p={p[k]:.3f}")
    return 0


# ---- info ---------------------------------------------------------------------------


def _ljust_bytes(text: str, width: int) -> str:
    """C's %-Ns: padded to `width` bytes of UTF-8, not characters."""
    return text + " " * max(width - len(text.encode()), 0)


def format_model_info(info: dict[str, Any], path: str) -> str:
    """The text `kiln info MODEL` prints, from kiln_model_info_json's object."""
    lines = [f"model: {path}"]
    head = f"  ir_version {info['ir_version']}, producer {info['producer_name'] or '?'} {info['producer_version']}"
    if info["domain"] or info["model_version"]:
        head += f", domain '{info['domain']}' version {info['model_version']}"
    lines.append(head)
    lines += [f"  {p['key']}: {p['value']}" for p in info["metadata_props"]]
    lines.append("opsets:" + "".join(f" {o['domain']}={o['version']}" for o in info["opsets"]))
    for what, key in (("input", "inputs"), ("output", "outputs")):
        lines.append(f"{key}:")
        for io in info[key]:
            line = f"  {_ljust_bytes(what, 7)} {_ljust_bytes(io['name'], 24)} {io['type']}"
            shape = io["shape"] or []
            if any(isinstance(d, str) for d in shape):
                line += "  (" + ",".join(d if isinstance(d, str) else "_" for d in shape) + ")"
            lines.append(line)
    lines.append(f"nodes: {info['nodes']} ({info['main_graph_nodes']} in the main graph)")
    lines.append(f"parameters: {info['parameters']} in {info['initializers']} initializers "
                 f"({info['parameter_bytes'] / 1e6:.2f} MB)")
    flops = info["flops"]
    lines.append("estimated FLOPs: %.4g (%s)" % (flops, "for the declared input shapes" if flops else "unknown shapes"))
    lines.append("op histogram:")
    lines += [f"  {_ljust_bytes(h['op'], 28)} {h['count']}" for h in info["op_histogram"]]
    lines.append("unsupported ops: " + (", ".join(info["unsupported_ops"]) or "none"))
    return "\n".join(lines) + "\n"


def cmd_info(a: argparse.Namespace) -> int:
    from ._tools import _json_text, model_dot, model_info
    if a.json and a.dot:
        raise InvalidArgument("--json and --dot: one at a time")
    if a.dot:
        sys.stdout.write(model_dot(a.model))
        return 0
    if a.json and not a.device:
        with ModelHandle(a.model) as m:
            print(_json_text("kiln_model_info_json", m.ptr))
        return 0
    if not a.json:  # the summary comes first, even where the device then refuses the model
        sys.stdout.write(format_model_info(model_info(a.model), a.model))
    if a.device:
        from ._session import InferenceSession
        with InferenceSession(a.model, providers=[a.device]) as sess:
            with sess._lock:
                sess._require_open()
                if a.json:  # kiln_session_report_json's object, only that (as `kiln info --device D --json`)
                    print(_json_text("kiln_session_report_json", sess._sess))
                else:
                    sys.stdout.write(_json_text("kiln_session_describe", sess._sess))
    return 0


# ---- bench, verify --------------------------------------------------------------------


def _inputs_for(a: argparse.Namespace) -> Optional[dict[str, Any]]:
    given = _parse_inputs(a.input)
    if a.dim or a.seed is not None:
        with ModelHandle(a.model) as m:
            return _random_inputs(m, given, a.dim, a.seed)
    return given or None


def cmd_bench(a: argparse.Namespace) -> int:
    os.environ.setdefault("KILN_JIT", "sync")  # as `kiln bench`: time the compiled kernels
    r = bench(a.model, device=a.device, inputs=_inputs_for(a), warmup=a.warmup, iterations=a.iterations,
              threads=a.threads, profile=a.profile, precision="fp16" if a.fp16 else "fp32")
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"model       {a.model}")
    thr = r.get("threads") or 0
    print(f"device      {r['device']}, " + (f"{thr} thread{'s' if thr != 1 else ''}" if thr else "default threads"))
    for i, d in enumerate(r.get("inputs", [])):
        print(f"{'inputs     ' if i == 0 else '           '} {d}")
    print(f"start-up    session {r['create_ms']:.1f} ms, first run {r['first_run_ms']:.2f} ms")
    print(f"runs        {r['warmup']} warm-up, {r['iterations']} timed")
    print(f"latency     median {r['median_ms']:.3f} ms  p10 {r['p10_ms']:.3f} ms  p90 {r['p90_ms']:.3f} ms  "
          f"min {r['min_ms']:.3f} ms  max {r['max_ms']:.3f} ms  mean {r['mean_ms']:.3f} ms")
    print(f"throughput  {r['throughput_per_s'] or 0:.3f} inferences/s")
    if a.profile:
        ks = r.get("kernels", [])
        print(f"\nprofile: {r['iterations']} more runs with a clock around each kernel;")
        print(f"  {len(ks)} timed kernels, {r.get('profiled_ms', 0):.3f} ms per run in them")
        print(f"\n  {'#':>4}  {'op':<22} {'node':<40} {'ms/run':>10} {'share':>7} {'calls':>7}")
        show = ks if a.top == 0 else ks[:a.top]
        for i, k in enumerate(show):
            name = k["name"] if len(k["name"]) <= 40 else "..." + k["name"][-37:]
            print(f"  {i:4d}  {k['op'][:22]:<22} {name:<40} {k['ms_per_run']:10.4f} {k['percent']:6.2f}% "
                  f"{k['calls']:7d}")
        if len(show) < len(ks):
            rest = sum(k["ms_per_run"] for k in ks[len(show):])
            print(f"  ... {len(ks) - len(show)} more, {rest:.4f} ms; --top 0 lists all")
    return 0


_NOTHING_COMPARED = "no value was produced by both sides, nothing compared"


def _divergence_figures(d: dict[str, Any], indent: str) -> list[str]:
    """What `kiln verify` prints about one diverging value's elements."""
    if d.get("why"):
        return [f"{indent}{d['why']}"]
    lines = [f"{indent}{d['n_bad']} of {d['n_elements']} elements beyond tolerance; max abs err "
             f"{d['max_abs_err']:.6g}, max rel err {d['max_rel_err']:.6g}"]
    w = d.get("worst")
    if w:
        where = (f"item {w['item']} " if w.get("item") is not None else "") + \
            "[" + ",".join(str(i) for i in w["index"]) + "]"
        if isinstance(w["device"], str):
            vals = f': device "{w["device"]}", ref "{w["ref"]}"'
        elif w["is_float"]:
            vals = ": device %.9g, ref %.9g" % (w["device"], w["ref"])
        else:
            vals = ": device %.17g, ref %.17g" % (w["device"], w["ref"])
        lines.append(f"{indent}worst element {where}{vals}")
    return lines


def format_verify(r: dict[str, Any], path: str) -> str:
    """The text `kiln verify` prints, from kiln_verify_json's object."""
    lines = [f"verify {path}: {r['device']} vs ref, rtol {r['rtol']:g}, atol {r['atol']:g}"]
    lines += [f"{'inputs' if i == 0 else '      '} {d}" for i, d in enumerate(r.get("inputs", []))]
    fd = r.get("first_divergence")
    if fd:
        lines += ["", f"FIRST DIVERGENCE at node #{fd['node_index']} '{fd['node']}' ({fd['op']}), output "
                      f"{fd['output_index']} '{fd['output']}'",
                  f"  output: device {fd['device_type']}, ref {fd['ref_type']}"]
        for x in fd.get("node_inputs", []):
            src = f" ({x['source']})" if x.get("source") else ""
            lines.append(f"  input {x['index']}: '{x['name']}' {x['type']}{src}")
        lines += _divergence_figures(fd, "  ")
    later = r.get("later_divergences", [])
    if later:
        lines += ["", "later diverging values (graph order):"]
        for d in later:
            lines.append(f"  node #{d['node_index']} '{d['node']}' ({d['op']}), output '{d['output']}' {d['ref_type']}")
            lines += _divergence_figures(d, "    ")
    if r["diverging"] > 1 + len(later):
        lines.append(f"  ... and {r['diverging'] - 1 - len(later)} more")
    lines += ["", f"compared {r['compared']} values; {r['device']}: {r['device_steps']} steps observed in "
                  f"{r['device_ms']:.1f} ms, ref: {r['ref_nodes']} nodes in {r['ref_ms']:.1f} ms;",
              f"not compared: {r['device_only']} values only on the device, {r['ref_only']} only on the reference"]
    if r["diverging"]:
        lines.append(f"verify: FAIL: {r['diverging']} of {r['compared']} values diverge beyond rtol {r['rtol']:g}, "
                     f"atol {r['atol']:g}; first at node '{fd['node'] if fd else '?'}' ({fd['op'] if fd else '?'})")
    elif not r["compared"]:
        lines.append(f"verify: FAIL: {_NOTHING_COMPARED}")
    else:
        lines.append(f"verify: OK: all {r['compared']} values match (max abs err {r['max_abs_err']:.3g}, "
                     f"max rel err {r['max_rel_err']:.3g})")
    return "\n".join(lines) + "\n"


def cmd_verify(a: argparse.Namespace) -> int:
    for name in ("rtol", "atol"):
        v = getattr(a, name)
        if not (v >= 0) or v == float("inf"):
            raise InvalidArgument(f"--{name} takes a non-negative number, got '{v}'")
    if a.max_report < 0:
        raise InvalidArgument(f"--max-report takes a non-negative number, got '{a.max_report}'")
    r = verify(a.model, device=a.device, inputs=_inputs_for(a), rtol=a.rtol, atol=a.atol, max_report=a.max_report)
    if a.json:
        print(json.dumps(r))
        return 0 if r.get("ok") else 1
    errors = [e for e in r.get("errors", []) if e != _NOTHING_COMPARED]
    if errors:  # a run that failed on one side: `kiln verify` reports it as an error
        return _fail(errors[0])
    sys.stdout.write(format_verify(r, a.model))
    return 0 if r.get("ok") else 1


def cmd_devices(a: argparse.Namespace) -> int:
    devs = devices(include_absent=True)
    if a.json:
        print(json.dumps({"devices": [d.as_dict() for d in devs if d.available],
                          "absent": [{"name": d.name, "reason": d.reason} for d in devs if not d.available]}))
        return 0
    format_devices(devs, sys.stdout.write)
    return 0


# ---- train --------------------------------------------------------------------------


def _load_npz(path: str, target: str, input_names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    if not os.path.exists(path):
        raise NoSuchFile(f"{path} does not exist")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if target not in arrays:
        raise InvalidArgument(f"{path}: no array '{target}' (the targets)")
    x = {}
    for n in input_names:
        if n not in arrays:
            raise InvalidArgument(f"{path}: no array '{n}' for the model's input")
        x[n] = arrays[n]
    y = arrays[target]
    for k, v in list(x.items()) + [(target, y)]:
        if v.ndim < 1:
            raise InvalidArgument(f"{path}: array '{k}' is a scalar; axis 0 must be the samples")
        if len(v) != len(y):
            raise InvalidArgument(f"{path}: array '{k}' has {len(v)} samples, '{target}' {len(y)}")
    if len(y) < 1:
        raise InvalidArgument(f"{path}: no samples")
    return x, y


def cmd_train(a: argparse.Namespace) -> int:
    from ._train import Trainer, epoch_order
    os.environ.setdefault("KILN_JIT", "sync")  # as `kiln train`: a run repeats exactly
    if a.lr <= 0 or a.epochs < 1 or a.batch_size < 1 or a.grad_accum < 1 or (a.steps is not None and a.steps < 1):
        raise InvalidArgument("--lr, --epochs, --batch-size, --grad-accum and --steps must be positive")
    with ModelHandle(a.model) as m:
        inits = {i.name for i in _proto.initializers(m.read_bytes())}
        input_names = [n for n in m.inputs if n not in inits]
    x, y = _load_npz(a.data, a.target, input_names)
    ev = _load_npz(a.eval, a.target, input_names) if a.eval else None
    n = len(y)
    per_epoch = (n + a.batch_size - 1) // a.batch_size
    total = a.steps if a.steps else a.epochs * ((per_epoch + a.grad_accum - 1) // a.grad_accum)
    sched = a.lr_schedule
    kw: dict[str, Any] = {}
    if sched == "cosine":
        kw["total_steps"] = total
    t = Trainer(a.model, loss=a.loss, optimizer=a.optimizer, lr=a.lr, device=a.device, output=a.output,
                momentum=a.momentum, nesterov=a.nesterov, weight_decay=a.weight_decay,
                schedule=None if sched == "constant" else sched, grad_accum=a.grad_accum, clip_norm=a.clip_norm,
                freeze=a.freeze, threads=a.threads, seed=a.shuffle, **kw)
    with t:
        start_micro = 0
        if a.resume:
            t.load_checkpoint(a.resume)
            start_micro = t.micro_batches
        log = open(a.log, "a" if a.resume else "w") if a.log else None
        try:
            t0, acc, in_update, done = time.perf_counter(), 0.0, 0, 0
            first_epoch = start_micro // per_epoch
            for e in range(first_epoch, a.epochs):
                if t.updates >= total:
                    break
                order = epoch_order(n, a.shuffle, e) if not a.no_shuffle else np.arange(n)
                b0 = start_micro % per_epoch if e == first_epoch else 0
                for b in range(b0, per_epoch):
                    idx = order[b * a.batch_size:(b + 1) * a.batch_size]
                    lr, before = t.lr, t.updates
                    acc += t.step({k: v[idx] for k, v in x.items()}, y[idx])
                    in_update += 1
                    done += len(idx)
                    step = t.updates
                    if step == before:
                        continue
                    mean = acc / in_update
                    acc, in_update = 0.0, 0
                    if log:
                        log.write(f'{{"step": {step}, "epoch": {e + 1}, "loss": {_g9(mean)}, "lr": {_g9(lr)}}}\n')
                    dt = time.perf_counter() - t0
                    rate = done / dt if dt > 0 else 0
                    left = dt / max((t.micro_batches - start_micro) / a.grad_accum, 1e-9) * (total - step)
                    sys.stderr.write(f"\repoch {e + 1}/{a.epochs}  step {step}/{total}  loss {mean:.5g}  "
                                     f"{rate:.0f} samples/s  {max(left, 0):.0f} s left   ")
                    if step >= total:
                        break
                if ev is not None:
                    el, ea = t.evaluate(ev[0], ev[1], a.batch_size)
                    if log:
                        extra = f', "eval_accuracy": {ea:.6f}' if ea is not None else ""
                        log.write(f'{{"epoch": {e + 1}, "eval_loss": {_g9(el)}{extra}}}\n')
                    sys.stderr.write(f"\nepoch {e + 1}: eval loss {el:.5g}" +
                                     (f", accuracy {ea:.4f}" if ea is not None else ""))
                if a.checkpoint:
                    t.save_checkpoint(a.checkpoint)
                if log:
                    log.flush()
            sys.stderr.write("\n")
            if a.checkpoint:
                t.save_checkpoint(a.checkpoint)
            if a.save:
                t.export(a.save)
        finally:
            if log:
                log.close()
    return 0


def _g9(v: float) -> str:
    """C's %.9g."""
    return "%.9g" % v


# ---- the parser -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kiln", description="kiln's command line over the Python package",
                                epilog="`python -m kiln CMD --help` for one command")
    sub = p.add_subparsers(dest="cmd", metavar="run|info|bench|verify|train|devices")
    sub.required = True

    r = sub.add_parser("run", help="run a model; write DIR/output_<i>.npy or print the outputs")
    r.add_argument("model")
    r.add_argument("--device")
    r.add_argument("--threads", type=int, help="threads (a positive number; default: the physical cores)")
    r.add_argument("--fp16", action="store_true",
                   help="fp16 precision (GPUs with fp16 support keep float tensors in fp16; others ignore it)")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input by name (FILE.npz: a sequence input, its arrays in order)")
    r.add_argument("--output-dir", help="write DIR/output_<i>.npy (sequences: .npz) instead of printing")
    r.add_argument("--labels", help="a text file of class names, one a line: print the top classes")
    r.add_argument("--top", type=int, default=3)
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("info", help="opsets, inputs/outputs, op histogram, parameters, FLOPs, unsupported ops; "
                                    "--device: kernels, fallbacks")
    i.add_argument("model")
    i.add_argument("--device", help="also compile for D and show its kernels, fallbacks and memory")
    i.add_argument("--json", action="store_true",
                   help="kiln_model_info_json's object (with --device: kiln_session_report_json's)")
    i.add_argument("--dot", action="store_true", help="the graph in Graphviz DOT instead")
    i.set_defaults(fn=cmd_info)

    for name, fn, hlp in (("bench", cmd_bench, "latency statistics, throughput; --profile: per-kernel table"),
                          ("verify", cmd_verify, "run on D and on ref with the same inputs; the first divergence")):
        b = sub.add_parser(name, help=hlp)
        b.add_argument("model")
        b.add_argument("--device")
        b.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
        b.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE")
        b.add_argument("--seed", type=int)
        b.add_argument("--json", action="store_true")
        if name == "bench":
            b.add_argument("--threads", type=int, default=0)
            b.add_argument("--warmup", type=int, default=3)
            b.add_argument("--iterations", type=int, default=20)
            b.add_argument("--profile", action="store_true")
            b.add_argument("--top", type=int, default=40)
            b.add_argument("--fp16", action="store_true",
                           help="fp16 precision (GPUs with fp16 support keep float tensors in fp16)")
        else:
            b.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
            b.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
            b.add_argument("--max-report", type=int, default=5, metavar="N",
                           help="diverging values listed after the first (default 5)")
        b.set_defaults(fn=fn)

    t = sub.add_parser("train", help="train the model (docs/TRAINING.md)")
    t.add_argument("model")
    t.add_argument("--data", required=True)
    t.add_argument("--loss", required=True, choices=["mse", "l1", "cross_entropy", "nll", "bce_with_logits"])
    t.add_argument("--target", default="target")
    t.add_argument("--output")
    t.add_argument("--eval")
    t.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    t.add_argument("--lr", type=float, default=0.01)
    t.add_argument("--momentum", type=float, default=0.0)
    t.add_argument("--nesterov", action="store_true")
    t.add_argument("--weight-decay", type=float)
    t.add_argument("--lr-schedule", default="constant", metavar="constant|step:EVERY:GAMMA|cosine|warmup:STEPS")
    t.add_argument("--grad-accum", type=int, default=1)
    t.add_argument("--clip-norm", type=float, default=0.0)
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--steps", type=int)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--shuffle", type=int, default=0, metavar="SEED")
    t.add_argument("--no-shuffle", action="store_true")
    t.add_argument("--freeze", metavar="REGEX")
    t.add_argument("--device")
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--save")
    t.add_argument("--checkpoint")
    t.add_argument("--resume")
    t.add_argument("--log")
    t.set_defaults(fn=cmd_train)

    d = sub.add_parser("devices", help="the devices available and their properties")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_devices)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "help":
        _parser().print_help()
        return 0
    if args and args[0] in ("--version", "version"):
        from . import get_version_string
        print(f"kiln {get_version_string()} (python)")
        return 0
    a = _parser().parse_args(args)
    try:
        return a.fn(a)
    except KilnError as e:
        return _fail(str(e))
    except (OSError, ValueError) as e:  # files numpy could not read, and the like
        return _fail(str(e))


if __name__ == "__main__":
    sys.exit(main())
