"""python -m kiln: the `kiln` command line over the Python package.

    python -m kiln run MODEL.onnx [--device D] [--threads N] [--fp16] [--input NAME=FILE.npy]... [--output-dir DIR]
                                  [--labels FILE.txt] [--top K]
    python -m kiln info MODEL.onnx [--device D] [--json]
    python -m kiln bench MODEL.onnx [--device D] [--threads N] [--warmup W] [--iterations K]
                                    [--input NAME=FILE.npy]... [--dim NAME=VALUE]... [--seed S]
                                    [--profile] [--top T] [--json] [--fp16]
    python -m kiln verify MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--dim NAME=VALUE]... [--seed S] [--json]
    python -m kiln train MODEL.onnx --data TRAIN.npz --loss L [kiln train's options]
    python -m kiln devices [--json]

The commands and flags are the `kiln` binary's (src/cli/), implemented over
kiln's Python API and C API, not by running the binary; output formats
follow its. Differences: `run --labels/--top` print the top classes (as
examples/classify.c does); `info` has no --dot and lists no unsupported ops
or FLOPs estimate (the C API does not expose the graph); verify compares at
the C API's tolerances (rtol 1e-3, atol 1e-4); random inputs (bench,
verify) come from numpy where --dim or --seed is given, else from kiln's
own generator as the binary's. Errors: one line `kiln: error: ...` on
stderr, exit status 1 (2 for a bad command line).
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


def _parse_inputs(specs: Sequence[str]) -> dict[str, Any]:
    """--input NAME=FILE.npy values as arrays."""
    out: dict[str, Any] = {}
    for spec in specs or ():
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise InvalidArgument(f"--input takes NAME=FILE.npy, got '{spec}'")
        if path.endswith(".npz"):
            raise Unsupported(f"input '{name}': {path} is a sequence (.npz); kiln's C API takes tensors only")
        if not os.path.exists(path):
            raise NoSuchFile(f"input '{name}': {path} does not exist")
        try:
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


def cmd_run(a: argparse.Namespace) -> int:
    from ._session import InferenceSession, SessionOptions
    feed = _parse_inputs(a.input)
    so = SessionOptions()
    so.intra_op_num_threads = a.threads
    providers = [a.device] if a.device else None
    if a.fp16:
        raise Unsupported("--fp16: the Python session has no precision option; use `kiln run --fp16`")
    with InferenceSession(a.model, so, providers=providers) as sess:
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(None, feed)
    if a.output_dir:
        os.makedirs(a.output_dir, exist_ok=True)
        for i, y in enumerate(outs):
            np.save(os.path.join(a.output_dir, f"output_{i}.npy"), y)
        return 0
    for name, y in zip(names, outs):
        kd = _dtypes.from_numpy(y.dtype)
        print(f"{name}: {_dtype_name(kd) if kd else y.dtype} [{','.join(map(str, y.shape))}]")
        print(_values(y))
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


def _model_summary(model: ModelHandle, path: str) -> dict[str, Any]:
    lib = C.lib()
    out: dict[str, Any] = {"model": path}
    meta_get = lib.optional("kiln_model_metadata_get")
    opset = lib.optional("kiln_model_opset")
    if meta_get is not None:
        from ._errors import check
        import ctypes
        meta = C.kiln_model_metadata()
        check(meta_get(model.ptr, ctypes.byref(meta)))
        out["ir_version"] = int(meta.ir_version)
        out["producer"] = " ".join(x.decode() for x in (meta.producer_name, meta.producer_version) if x)
        ops = []
        for i in range(meta.n_opsets):
            d, v = ctypes.c_char_p(), ctypes.c_int64()
            if opset is not None:
                check(opset(model.ptr, i, ctypes.byref(d), ctypes.byref(v)))
                ops.append([(d.value or b"").decode() or "ai.onnx", int(v.value)])
        out["opsets"] = ops
    out["inputs"] = [{"name": n, "dtype": _dtype_name(kd), "shape": model.shapes.get(n)}
                     for n, kd in model.inputs.items()]
    info = C.kiln_io_info()
    outs = []
    from ._errors import check
    import ctypes
    for i in range(lib.kiln_model_output_count(model.ptr)):
        check(lib.kiln_model_output_info(model.ptr, i, ctypes.byref(info)))
        shape = None if info.rank < 0 else [int(info.dims[d]) if info.dims[d] >= 0 else
                                            (info.dim_names[d] or b"?").decode() for d in range(info.rank)]
        outs.append({"name": info.name.decode(), "dtype": _dtype_name(info.dtype), "shape": shape})
    out["outputs"] = outs
    data = model.read_bytes()
    ops_list = _proto.op_types(data)
    inits = _proto.initializers(data)
    hist: dict[str, int] = {}
    for op in ops_list:
        hist[op] = hist.get(op, 0) + 1
    out["nodes"] = len(ops_list)
    out["parameters"] = sum(i.numel for i in inits)
    out["initializers"] = len(inits)
    out["parameter_bytes"] = sum(i.numel * int(lib.kiln_dtype_size(i.dtype)) for i in inits)
    out["op_histogram"] = dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def _print_report(r: dict[str, Any]) -> None:
    print(f"device {r.get('device')}:")
    mode = r.get("mode")
    if mode == "fallback":
        print(f"  every node runs on ref: {r.get('fallback_reason')}")
    elif mode == "interpreted":
        print("  interpreted node by node")
    print(f"  {r.get('nodes')} nodes after optimization, {r.get('n_kernels')} kernels "
          f"({r.get('fused_nodes')} nodes fused), {r.get('nodes_on_ref')} on ref, {r.get('device_segments')} device "
          f"segment(s); threads {r.get('threads') or 'default'}, {r.get('precision')}")
    for i, k in enumerate(r.get("kernels", [])):
        ops = ", ".join(k.get("ops", []))
        print(f"  {i:4d}  {k.get('kind', ''):<12} {k.get('op', ''):<28} {k.get('flops', 0):>12} FLOPs  {ops}")
    fb = r.get("fallbacks", [])
    if fb:
        print("  fallbacks to ref:")
        for f in fb:
            print(f"    {f.get('node')} ({f.get('op')}): {f.get('reason')}")
    mem = r.get("memory") or {}
    if mem:
        print(f"  memory: {'host' if mem.get('host_memory') else 'device'}; intermediates "
              f"{mem.get('intermediate_bytes', 0) / 1e6:.3f} MB in an arena of {mem.get('arena_bytes', 0) / 1e6:.3f} MB"
              f"; weights on the device {mem.get('weight_bytes_on_device', 0) / 1e6:.3f} MB")


def cmd_info(a: argparse.Namespace) -> int:
    if a.dot:
        raise Unsupported("info --dot: the C API does not expose the graph; use `kiln info MODEL --dot`")
    with ModelHandle(a.model) as m:
        s = _model_summary(m, a.model)
    report = None
    if a.device:
        from ._session import InferenceSession
        with InferenceSession(a.model, providers=[a.device]) as sess:
            report = sess.info()
    if a.json:
        if report is not None:
            s["session"] = report
        print(json.dumps(s, indent=1))
        return 0
    print(f"model: {a.model}")
    if "ir_version" in s:
        print(f"  ir_version {s['ir_version']}, producer {s['producer'] or '?'}")
        print("opsets:" + "".join(f" {d}={v}" for d, v in s["opsets"]))
    for what in ("inputs", "outputs"):
        print(f"{what}:")
        for io in s[what]:
            shape = "?" if io["shape"] is None else "[" + ",".join(map(str, io["shape"])) + "]"
            print(f"  {what[:-1]:<7} {io['name']:<24} {io['dtype']}{shape}")
    print(f"nodes: {s['nodes']} (in the main graph)")
    print(f"parameters: {s['parameters']} in {s['initializers']} initializers ({s['parameter_bytes'] / 1e6:.2f} MB)")
    print("op histogram:")
    for op, n in s["op_histogram"].items():
        print(f"  {op:<28} {n}")
    if report is not None:
        _print_report(report)
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
              threads=a.threads, profile=a.profile, fp16=a.fp16)
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


def cmd_verify(a: argparse.Namespace) -> int:
    if a.rtol != 1e-3 or a.atol != 1e-4:
        raise Unsupported("--rtol/--atol: kiln_verify_json compares at rtol 1e-3, atol 1e-4; "
                          "use the kiln binary for other tolerances")
    r = verify(a.model, device=a.device, inputs=_inputs_for(a))
    if a.json:
        print(json.dumps(r))
        return 0 if r.get("ok") else 1
    print(f"verify {a.model}: {r['device']} vs ref, rtol {r['rtol']:g}, atol {r['atol']:g}")
    for i, d in enumerate(r.get("inputs", [])):
        print(f"{'inputs' if i == 0 else '      '} {d}")
    for e in r.get("errors", []):
        print(f"error: {e}")
    fd = r.get("first_divergence")
    if fd:
        print(f"\nFIRST DIVERGENCE at node '{fd['node']}' ({fd['op']}), output '{fd['output']}'")
        print(f"  output: device {fd.get('device_type')}, ref {fd.get('ref_type')}")
        if fd.get("why"):
            print(f"  {fd['why']}")
        else:
            print(f"  {fd['n_bad']} of {fd['n_elements']} elements beyond tolerance; max abs err "
                  f"{fd['max_abs_err']:.6g}, max rel err {fd['max_rel_err']:.6g}")
    print(f"\ncompared {r['compared']} values; {r['device']}: {r['device_ms']:.1f} ms, ref: {r['ref_ms']:.1f} ms; "
          f"{r['device_only']} only on the device, {r['ref_only']} only on ref")
    if r.get("ok"):
        print(f"verify: OK: all {r['compared']} values match (max abs err {r['max_abs_err']:.3g}, "
              f"max rel err {r['max_rel_err']:.3g})")
        return 0
    if fd:
        print(f"verify: FAIL: {r['diverging']} of {r['compared']} values diverge beyond rtol {r['rtol']:g}, "
              f"atol {r['atol']:g}; first at node '{fd['node']}' ({fd['op']})")
    else:
        print("verify: FAIL" + (f": {r['errors'][0]}" if r.get("errors") else ""))
    return 1


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
    r.add_argument("--threads", type=int, default=0)
    r.add_argument("--fp16", action="store_true")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    r.add_argument("--output-dir")
    r.add_argument("--labels", help="a text file of class names, one a line: print the top classes")
    r.add_argument("--top", type=int, default=3)
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("info", help="opsets, inputs/outputs, op histogram, parameters; --device: kernels, fallbacks")
    i.add_argument("model")
    i.add_argument("--device")
    i.add_argument("--json", action="store_true")
    i.add_argument("--dot", action="store_true", help="not here: the C API does not expose the graph")
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
            b.add_argument("--fp16", action="store_true")
        else:
            b.add_argument("--rtol", type=float, default=1e-3)
            b.add_argument("--atol", type=float, default=1e-4)
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
