#!/usr/bin/env python3
"""kiln-vulkan vs PyTorch CUDA on one NVIDIA GPU, in one run (issue 4, item 7).

Driven by bench/gpu/run.sh, which finds the Vulkan loader, driver and GLSL
compiler, builds kiln and calls this file twice, with a python that has torch:

    bench_gpu.py export --work DIR [model options]
        checks torch (and CUDA unless --torch-device cpu), then writes into DIR
        the ONNX models: ResNet-50 and the BERT-base encoder at each batch
        (tests/models/export_models.py's builders and seeds, static shapes,
        opset 13, TorchScript exporter) and the GEMM models; models already
        there are kept.
    bench_gpu.py bench --work DIR --kiln KILN --kiln-device vulkan:N [options]
        times each model on kiln (`kiln bench --json`, its own process per
        round) and on PyTorch eager fp32 (TF32 off) and fp16 in this process,
        interleaved in rounds, then the GEMM; then, in a second pass with the
        time left, `kiln bench --fp16` on each cell interleaved with torch
        fp16 (and the GEMM in fp16); prints the table and writes it as
        Markdown (--md) and everything as JSON (--json-out).

Every phase watches the deadline (--deadline, seconds since the epoch): a
cell that cannot finish in time is skipped and said so, and the table of what
ran is still printed (also on SIGTERM from run.sh's timeout).

Timing. kiln: `kiln bench` wall-clock per run, which includes uploading the
inputs from host memory and reading the outputs back (one queue submission
per run). torch: wall-clock per call with torch.cuda.synchronize() before and
after, input already on the GPU, output left there; the median host<->device
copy time of the same input and output is reported beside it (copies ms) so
the two can be compared either way. GEMM: torch.matmul(out=) of two resident
4096x4096 fp32 matrices (cuBLAS, TF32 off); kiln: `kiln bench` of an ONNX
MatMul of two 4096x4096 inputs, end to end (192 MB of transfers per run), and
of a chain of --gemm-chain MatMuls with the same inputs and output, whose
difference gives the time of one GEMM on the device alone.

kiln fp16 (`kiln bench --fp16`: float tensors stored as half on the device)
comes after every fp32 cell, so fp32 never loses rounds to it; its output
(`kiln run --fp16`) is checked against torch fp32 with kiln's fp16 model
tests' tolerance, |got - y| <= 1e-2 |y| + 1e-2 max|y|.
"""
import argparse
import datetime
import importlib.util
import inspect
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import warnings
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPORT_MODELS = os.path.join(ROOT, "tests", "models", "export_models.py")
OPSET = 13


def log(msg):
    print(f"[bench_gpu {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Fail(Exception):
    """A clear, final error: printed without a traceback."""


class OutOfTime(Exception):
    pass


def on_sigterm(signum, frame):
    raise OutOfTime(f"signal {signum} (run.sh's phase timeout)")


# ---- models -------------------------------------------------------------------------

def load_export_models():
    """tests/models/export_models.py as a module (its builders and seeds), or None."""
    if not os.path.isfile(EXPORT_MODELS):
        return None
    try:
        spec = importlib.util.spec_from_file_location("kiln_export_models", EXPORT_MODELS)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if all(hasattr(mod, a) for a in ("resnet50", "transformer", "randomize_batchnorm", "randomize_transformer")):
            return mod
    except Exception as e:  # a broken or changed file: use the equivalents below
        log(f"cannot import {EXPORT_MODELS} ({e}); using bench_gpu.py's own builders")
    return None


def own_randomize(model, gen):
    """Equivalent of export_models.py's randomize_batchnorm + randomize_transformer."""
    import torch
    from torch import nn
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            n = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    for layer in model.modules():
        if not isinstance(layer, nn.TransformerEncoderLayer):
            continue
        with torch.no_grad():
            for m in layer.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
            for pname, p in layer.named_parameters():
                if p.dim() == 2:
                    bound = (6.0 / (p.shape[0] + p.shape[1])) ** 0.5
                    p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
                elif "norm" not in pname:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


MODEL_NAMES = {"resnet50": "resnet50", "bert": "bert_encoder"}  # ours -> export_models.py's (the seed)


def build_model(kind, batch, args, em):
    """(model in eval mode with export_models.py's random weights, input shape).
    kind: 'resnet50' ([B,3,S,S], S = --image-size) or 'bert' (12 layers, d 768,
    12 heads, ff 3072, GELU, [B,seq,768]; --bert-layers/--seq shrink it)."""
    import torch
    from torch import nn
    seed = zlib.crc32(MODEL_NAMES[kind].encode())  # export_models.py's seed for the same model
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if kind == "resnet50":
        if em:
            model, _ = em.resnet50()
        else:
            import torchvision
            model = torchvision.models.resnet50(weights=None)
        shape = [batch, 3, args.image_size, args.image_size]
    else:
        if em:
            model, _ = em.transformer(args.bert_layers, 768, 12, 3072, args.seq, "gelu")
        else:
            layer = nn.TransformerEncoderLayer(768, 12, dim_feedforward=3072, dropout=0.0, activation="gelu",
                                               batch_first=True)
            model = nn.TransformerEncoder(layer, args.bert_layers, enable_nested_tensor=False)
        shape = [batch, args.seq, 768]
    if em:
        em.randomize_batchnorm(model, gen)
        em.randomize_transformer(model, gen)
    else:
        own_randomize(model, gen)
    model.eval()
    return model, shape


def cell_tag(kind, batch, args):
    if kind == "resnet50":
        return f"resnet50_b{batch}_s{args.image_size}"
    return f"bert_l{args.bert_layers}_s{args.seq}_b{batch}"


def parse_cells(spec):
    cells = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        kind, _, b = item.partition(":")
        if kind not in MODEL_NAMES:
            raise Fail(f"--models: unknown model '{kind}' (known: {', '.join(MODEL_NAMES)})")
        try:
            batch = int(b or "1")
        except ValueError:
            raise Fail(f"--models: '{item}': the batch after ':' must be an integer")
        if batch < 1:
            raise Fail(f"--models: '{item}': batch must be >= 1")
        cells.append((kind, batch))
    return cells


def onnx_export(model, x, path):
    """torch's TorchScript exporter at opset 13 (what kiln's tests use), else
    14, else 17 (torch 2.x's attention is scaled_dot_product_attention, whose
    TorchScript symbolic starts at opset 14); on a torch whose TorchScript
    exporter fails at all three, the dynamo exporter at opset 18 with the
    weights inside the file. Returns which exporter and opset wrote it."""
    import torch
    params = inspect.signature(torch.onnx.export).parameters
    tmp = path + ".tmp"
    errors = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for opset in (OPSET, 14, 17):
            kw = dict(opset_version=opset, input_names=["input"], output_names=["output"], do_constant_folding=True)
            if "dynamo" in params:
                kw["dynamo"] = False  # torch >= 2.9 defaults to the dynamo exporter
            try:
                torch.onnx.export(model, (x,), tmp, **kw)
                os.replace(tmp, path)
                return f"torch.onnx TorchScript exporter, opset {opset}"
            except Exception as e:
                errors.append(f"opset {opset}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
                log(f"TorchScript exporter failed at opset {opset} ({errors[-1]})")
        if "dynamo" not in params:
            raise Fail("torch.onnx.export failed: " + "; ".join(errors))
        kw = dict(opset_version=18, input_names=["input"], output_names=["output"], dynamo=True)
        if "external_data" in params:
            kw["external_data"] = False
        torch.onnx.export(model, (x,), tmp, **kw)
    os.replace(tmp, path)
    return "torch.onnx dynamo exporter, opset 18"


def gemm_models(work, n, chain):
    """gemm_N_c1.onnx: Y = A @ B (A, B inputs [N,N] f32); gemm_N_cK.onnx:
    Y = (...((A @ B) @ B)...) @ B, K MatMuls, same inputs and output."""
    paths = {}
    for c in sorted({1, chain}):
        path = os.path.join(work, f"gemm_{n}_c{c}.onnx")
        paths[c] = path
        if os.path.exists(path):
            continue
        try:
            import onnx
            from onnx import TensorProto, helper
        except ImportError:
            onnx = None
        if onnx is not None:
            vi = [helper.make_tensor_value_info(nm, TensorProto.FLOAT, [n, n]) for nm in ("A", "B", "Y")]
            nodes, prev = [], "A"
            for i in range(c):
                out = "Y" if i == c - 1 else f"T{i}"
                nodes.append(helper.make_node("MatMul", [prev, "B"], [out], name=f"matmul{i}"))
                prev = out
            g = helper.make_graph(nodes, f"gemm{n}x{c}", vi[:2], vi[2:])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kiln bench/gpu")
            m.ir_version = 7  # what opset 13 came with; any onnx version writes it
            onnx.save(m, path + ".tmp")
            os.replace(path + ".tmp", path)
        else:  # no onnx package: let torch write the same graph
            import torch

            class Chain(torch.nn.Module):
                def forward(self, a, b):
                    for _ in range(c):
                        a = torch.matmul(a, b)
                    return a
            kw = dict(opset_version=OPSET, input_names=["A", "B"], output_names=["Y"])
            if "dynamo" in inspect.signature(torch.onnx.export).parameters:
                kw["dynamo"] = False
            torch.onnx.export(Chain(), (torch.zeros(n, n), torch.zeros(n, n)), path + ".tmp", **kw)
            os.replace(path + ".tmp", path)
    return paths


# ---- torch -------------------------------------------------------------------------

def torch_setup(args):
    """Imports torch, checks the device, turns TF32 off. Returns (torch, device, info)."""
    try:
        import torch
    except ImportError as e:
        raise Fail(f"{sys.executable} cannot import torch ({e}); run with a python that has torch "
                   "(run.sh --python PY or PYTHON=...)")
    info = {"python": sys.executable, "python_version": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": getattr(torch.version, "cuda", None)}
    if args.torch_device == "cuda":
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if not torch.version.cuda else "no CUDA device visible to torch"
            raise Fail(f"torch {torch.__version__} at {sys.executable}: {why}. The GPU bench needs PyTorch with "
                       "CUDA on an NVIDIA GPU; --torch-device cpu runs the harness on the CPU (not for the record)")
        dev = torch.device("cuda", 0)
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu=torch.cuda.get_device_name(dev), gpu_memory_gb=round(p.total_memory / 2**30, 1),
                    sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
                    cudnn=torch.backends.cudnn.version())
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(max(1, args.torch_threads or os.cpu_count() or 1))
        info.update(gpu=None, cpu_threads=torch.get_num_threads())
    # The baseline: fp32 is real fp32 (no TF32 tensor-core rounding).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    info.update(allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                allow_tf32_cudnn=torch.backends.cudnn.allow_tf32, cudnn_benchmark=torch.backends.cudnn.benchmark)
    return torch, dev, info


class TorchCell:
    """The model on the torch device in fp32 and fp16, a resident input each."""

    def __init__(self, torch, dev, kind, batch, args, em):
        import copy
        self.torch, self.dev = torch, dev
        self.sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        model, shape = build_model(kind, batch, args, em)
        self.shape = shape
        g = torch.Generator().manual_seed(1)
        x = torch.randn(*shape, generator=g)
        self.x_host = x
        self.m32 = model.to(dev)
        self.x32 = x.to(dev)
        self.fp16_error = None
        self.m16 = self.x16 = None
        self.ref_cache = None  # torch's fp32 output for x_host (float64 NumPy), once a check asked for it
        if not args.no_fp16:
            try:
                self.m16 = copy.deepcopy(model).half().to(dev)
                self.x16 = x.half().to(dev)
                with torch.inference_mode():
                    self.m16(self.x16)
            except Exception as e:  # e.g. fp16 kernels missing on an old CPU torch
                self.fp16_error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                self.m16 = self.x16 = None
        with torch.inference_mode():
            self.out_shape = list(self.m32(self.x32).shape)

    def time(self, which, iters):
        torch = self.torch
        m, x = (self.m32, self.x32) if which == "fp32" else (self.m16, self.x16)
        samples = []
        with torch.inference_mode():
            for _ in range(iters):
                self.sync()
                t0 = time.perf_counter()
                m(x)
                self.sync()
                samples.append((time.perf_counter() - t0) * 1e3)
        return samples

    def reference(self):
        """torch's fp32 output for x_host, as a NumPy array."""
        with self.torch.inference_mode():
            return self.m32(self.x32).float().cpu().numpy()

    def copy_ms(self, iters=10):
        """Median time to copy the fp32 input to the device and an output-sized
        tensor back (pageable host memory, as kiln's host tensors are)."""
        if self.dev.type != "cuda":
            return None
        torch = self.torch
        out = torch.empty(self.out_shape, device=self.dev)
        s = []
        for _ in range(iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            self.x_host.to(self.dev)
            out.cpu()
            torch.cuda.synchronize()
            s.append((time.perf_counter() - t0) * 1e3)
        return percentile(s, 50)

    def close(self):
        self.m32 = self.m16 = self.x32 = self.x16 = self.ref_cache = None
        if self.dev.type == "cuda":
            self.torch.cuda.empty_cache()


# ---- kiln ----------------------------------------------------------------------------

def kiln_bench(args, model, warmup, iters, timeout, fp16=False):
    """One `kiln bench --json` process (--fp16: float tensors kept as half on
    the device); its parsed JSON."""
    cmd = [args.kiln, "bench", model, "--device", args.kiln_device, "--warmup", str(warmup), "--iterations",
           str(iters), "--json"] + (["--fp16"] if fp16 else [])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, timeout))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"kiln bench timed out after {timeout:.0f} s ({' '.join(map(shlex.quote, cmd))})")
    if r.returncode != 0:
        err = r.stderr.strip().splitlines()
        raise RuntimeError(f"kiln bench{' --fp16' if fp16 else ''} failed ({r.returncode}): "
                           f"{' | '.join(err[-3:])[:400]}")
    j = json.loads(r.stdout)
    if not str(j.get("device", "")).startswith("vulkan"):
        raise RuntimeError(f"kiln ran on '{j.get('device')}', not on the Vulkan device")
    return j


def kiln_device_stats(args, model, timeout):
    """`kiln bench --profile`'s line on the device's work per run (submissions,
    command buffers, dispatches), or None."""
    cmd = [args.kiln, "bench", model, "--device", args.kiln_device, "--warmup", "1", "--iterations", "1",
           "--profile", "--top", "0"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, timeout))
    except subprocess.TimeoutExpired:
        return None
    for line in r.stdout.splitlines():
        if line.startswith("device work per timed run:"):
            return line.split(":", 1)[1].strip()
    return None


# kiln's fp16 model tests' tolerance (tests/models/check_model.c --fp16):
# |got - y| <= FP16_RTOL |y| + FP16_ATOL_OF_MAX max|y| for every value.
FP16_RTOL, FP16_ATOL_OF_MAX = 1e-2, 1e-2


def kiln_check(args, tc, model, tag, timeout, fp16=False):
    """Runs the model once on kiln's device (`kiln run`, with --fp16 if asked)
    with the torch input and compares with torch's fp32 output on its device:
    a bench of wrong results would mean nothing. fp32 is judged by the largest
    error against the output's scale; fp16 value by value with the tolerance
    of kiln's fp16 model tests (FP16_RTOL, FP16_ATOL_OF_MAX). Returns a dict
    for the report."""
    import numpy as np
    inp = os.path.join(args.work, tag + ".check_input.npy")
    outdir = os.path.join(args.work, tag + (".check16_out" if fp16 else ".check_out"))
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, "output_0.npy")
    if os.path.exists(out):
        os.remove(out)
    np.save(inp, tc.x_host.numpy())
    cmd = [args.kiln, "run", model, "--device", args.kiln_device, "--input", f"input={inp}", "--output-dir", outdir]
    if fp16:
        cmd.append("--fp16")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, timeout))
    except subprocess.TimeoutExpired:
        return {"error": f"kiln run timed out after {timeout:.0f} s"}
    if r.returncode != 0 or not os.path.exists(out):
        err = r.stderr.strip().splitlines()
        return {"error": f"kiln run{' --fp16' if fp16 else ''} failed ({r.returncode}): {' | '.join(err[-2:])[:300]}"}
    got = np.load(out).astype(np.float64)
    if getattr(tc, "ref_cache", None) is None:  # the fp16 check compares with the same output
        tc.ref_cache = tc.reference().astype(np.float64)
    ref = tc.ref_cache
    if got.shape != ref.shape:
        return {"error": f"kiln output shape {list(got.shape)} != torch {list(ref.shape)}"}
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    rel = err / scale if scale > 0 else err
    if fp16:
        tol = FP16_RTOL * np.abs(ref) + FP16_ATOL_OF_MAX * scale
        d = np.abs(got - ref)
        bad = int(np.count_nonzero(~(d <= tol)))  # NaN counts as outside
        worst = float(np.max(d / np.maximum(tol, 1e-300))) if got.size else 0.0
        verdict = "ok" if bad == 0 else f"MISMATCH ({bad} of {got.size} values outside)"
        if not np.all(np.isfinite(got)):
            verdict = "MISMATCH (non-finite)"
        return {"max_abs_err": err, "max_abs_ref": scale, "rel_err": rel, "worst_err_over_tol": worst,
                "outside": bad, "verdict": verdict,
                "tolerance": f"|got - y| <= {FP16_RTOL:g} |y| + {FP16_ATOL_OF_MAX:g} max|y|"}
    # The ref tolerance is rtol 1e-3 / atol 1e-4; torch's own fp32
    # kernels sum in other orders, so judge the error against the output's scale.
    verdict = "ok" if rel <= 1e-3 else "check" if rel <= 1e-2 else "MISMATCH"
    if not np.all(np.isfinite(got)):
        verdict = "MISMATCH (non-finite)"
    return {"max_abs_err": err, "max_abs_ref": scale, "rel_err": rel, "verdict": verdict}


# ---- statistics -------------------------------------------------------------------------

def percentile(samples, p):
    s = sorted(samples)
    if not s:
        return float("nan")
    pos = p / 100 * (len(s) - 1)
    lo = int(pos)
    if lo >= len(s) - 1:
        return s[-1]
    return s[lo] + (s[lo + 1] - s[lo]) * (pos - lo)


def summarize(samples):
    return {"n": len(samples), "median": percentile(samples, 50), "p10": percentile(samples, 10),
            "p90": percentile(samples, 90), "min": min(samples) if samples else float("nan")}


class Clock:
    def __init__(self, deadline):
        self.deadline = deadline

    def left(self):
        return self.deadline - time.time() if self.deadline else 1e9


# ---- the bench -------------------------------------------------------------------------------

def bench_cell(args, torch, dev, em, kind, batch, clock, cell_budget, keep=None):
    """kiln fp32 vs torch fp32 and fp16 on one cell, interleaved in rounds,
    then kiln's output check. keep: a dict; when given, the cell's TorchCell
    is left open in keep[tag] for the kiln fp16 pass (bench_cell_fp16), and
    the caller closes it."""
    tag = cell_tag(kind, batch, args)
    model = os.path.join(args.work, tag + ".onnx")
    res = {"model": kind, "batch": batch, "tag": tag, "onnx": model}
    if not os.path.exists(model):
        res["error"] = f"{model} missing (the export phase did not write it)"
        return res
    t_start = time.time()
    cell_end = t_start + cell_budget
    tc = TorchCell(torch, dev, kind, batch, args, em)
    kept = False
    try:
        res["input_shape"] = tc.shape
        if tc.fp16_error:
            res["fp16_error"] = tc.fp16_error
        variants = ["fp32"] + (["fp16"] if tc.m16 is not None else [])
        for v in variants:  # warm-up: cuDNN/cuBLAS handles, allocator, autotuning
            tc.time(v, args.warmup)
        samples = {"kiln": [], "fp32": [], "fp16": []}
        kiln_meta = None
        rounds = max(1, min(args.rounds, args.iterations))
        per_round = [args.iterations // rounds + (1 if r < args.iterations % rounds else 0) for r in range(rounds)]
        for r, k in enumerate(per_round):
            left = min(cell_end, clock.deadline or 1e18) - time.time()
            if r > 0 and kiln_meta:
                # Size this round to the time left: kiln's launch costs
                # (load, session, warm-up) plus k runs of each runtime.
                per_run = (kiln_meta["latency_ms"]["median"] + summarize(samples["fp32"])["median"] +
                           (summarize(samples["fp16"])["median"] if samples["fp16"] else 0)) / 1e3
                launch = (kiln_meta["load_ms"] + kiln_meta["session_ms"]) / 1e3 + \
                    args.warmup * kiln_meta["latency_ms"]["median"] / 1e3
                fit = int((left * 0.8 - launch) / max(per_run, 1e-6))
                if fit < 1:
                    res.setdefault("notes", []).append(f"stopped after {r} of {rounds} rounds (time budget)")
                    break
                k = min(k, fit)
            order = ["kiln", "torch"] if r % 2 == 0 else ["torch", "kiln"]
            for who in order:
                if who == "kiln":
                    timeout = min(args.kiln_timeout, max(5.0, min(cell_end, clock.deadline or 1e18) - time.time()))
                    j = kiln_bench(args, model, args.warmup, k, timeout)
                    samples["kiln"] += j["samples_ms"]
                    if kiln_meta is None:
                        kiln_meta = j
                        res["kiln_device"] = j["device"]
                        res["kiln_load_ms"] = j["load_ms"]
                        res["kiln_session_ms"] = j["session_ms"]
                        res["kiln_first_run_ms"] = j["first_run_ms"]
                    res["kiln_peak_rss_bytes"] = max(res.get("kiln_peak_rss_bytes", 0), j["peak_rss_bytes"])
                else:
                    for v in variants:
                        samples[v] += tc.time(v, k)
            log(f"  {tag}: round {r + 1}/{rounds} ({len(samples['kiln'])} runs each, "
                f"{time.time() - t_start:.0f} s)")
        res["copies_ms"] = tc.copy_ms()
        if not args.no_check:
            left = min(args.kiln_timeout, (clock.deadline or 1e18) - time.time() - args.reserve)
            if left > 10:
                res["check"] = kiln_check(args, tc, model, tag, left)
            else:
                res["check"] = {"error": "skipped (time)"}
        if keep is not None:
            keep[tag] = tc
            kept = True
    finally:
        if not kept:
            tc.close()
    res["kiln"] = dict(summarize(samples["kiln"]), samples_ms=samples["kiln"])
    res["torch_fp32"] = dict(summarize(samples["fp32"]), samples_ms=samples["fp32"])
    if samples["fp16"]:
        res["torch_fp16"] = dict(summarize(samples["fp16"]), samples_ms=samples["fp16"])
    res["seconds"] = time.time() - t_start
    return res


def bench_cell_fp16(args, tc, res, clock, cell_budget):
    """kiln fp16 (`kiln bench --fp16`) on a cell that bench_cell already ran,
    interleaved with torch fp16 in rounds as bench_cell does with kiln fp32,
    then `kiln run --fp16`'s output checked against torch fp32. It runs after
    every fp32 cell (cmd_bench's second pass), so fp32 never loses time to it;
    every round, the first included, is sized to the time left (the first
    from the cell's kiln fp32 figures), and a round that cannot fit one run
    stops the pass with a note. Adds kiln_fp16*, check_fp16 and the torch
    fp16 samples (to res['torch_fp16']) to res, also when time runs out in
    the middle."""
    tag, model = res["tag"], res["onnx"]
    t_start = time.time()
    cell_end = t_start + cell_budget
    torch16 = tc.m16 is not None
    s_kiln, s_torch = [], []
    meta = None
    rounds = max(1, min(args.rounds, args.iterations))
    per_round = [args.iterations // rounds + (1 if r < args.iterations % rounds else 0) for r in range(rounds)]
    try:
        if torch16:
            tc.time("fp16", args.warmup)  # other cells ran since: warm it again
        for r, k in enumerate(per_round):
            left = min(cell_end, clock.deadline or 1e18) - time.time()
            # kiln's launch (load, session, warm-up) plus k runs of each runtime;
            # before the first fp16 process, its fp32 twin's figures (the first
            # fp16 process compiles its own shaders, as the first fp32 one did).
            if meta:
                lat = meta["latency_ms"]["median"] / 1e3
                launch = (meta["load_ms"] + meta["session_ms"]) / 1e3 + args.warmup * lat
            else:
                lat = res["kiln"]["median"] / 1e3
                launch = (res.get("kiln_load_ms", 0) + res.get("kiln_session_ms", 0) +
                          res.get("kiln_first_run_ms", 0)) / 1e3 + args.warmup * lat
            t16 = 0.0
            if torch16:
                t16 = (percentile(s_torch, 50) if s_torch else res["torch_fp16"]["median"]) / 1e3
            fit = int((left * 0.8 - launch) / max(lat + t16, 1e-6))
            if fit < 1:
                res.setdefault("notes", []).append(
                    f"kiln fp16: stopped after {r} of {rounds} rounds (time budget)" if r else
                    f"kiln fp16: skipped ({max(0, left):.0f} s left for it, about {launch + lat + t16:.0f} s "
                    "needed for one round)")
                break
            k = min(k, fit)
            order = ["kiln", "torch"] if r % 2 == 0 else ["torch", "kiln"]
            for who in order:
                if who == "kiln":
                    timeout = min(args.kiln_timeout, max(5.0, min(cell_end, clock.deadline or 1e18) - time.time()))
                    j = kiln_bench(args, model, args.warmup, k, timeout, fp16=True)
                    s_kiln += j["samples_ms"]
                    if meta is None:
                        meta = j
                        res["kiln_fp16_load_ms"] = j["load_ms"]
                        res["kiln_fp16_session_ms"] = j["session_ms"]
                        res["kiln_fp16_first_run_ms"] = j["first_run_ms"]
                    res["kiln_fp16_peak_rss_bytes"] = max(res.get("kiln_fp16_peak_rss_bytes", 0),
                                                          j["peak_rss_bytes"])
                elif torch16:
                    s_torch += tc.time("fp16", k)
            log(f"  {tag} fp16: round {r + 1}/{rounds} ({len(s_kiln)} kiln fp16 runs, "
                f"{time.time() - t_start:.0f} s)")
        if s_kiln and not args.no_check:
            left = min(args.kiln_timeout, (clock.deadline or 1e18) - time.time() - args.reserve)
            if left > 10:
                res["check_fp16"] = kiln_check(args, tc, model, tag, left, fp16=True)
            else:
                res["check_fp16"] = {"error": "skipped (time)"}
    finally:
        if s_kiln:
            res["kiln_fp16"] = dict(summarize(s_kiln), samples_ms=s_kiln)
        if s_torch:
            # One torch fp16 figure per cell: the samples taken beside kiln
            # fp32 and those taken beside kiln fp16 (also kept apart here).
            res["torch_fp16_beside_kiln_fp16"] = dict(summarize(s_torch), samples_ms=s_torch)
            res["torch_fp16_beside_kiln_fp32"] = res["torch_fp16"]
            both = res["torch_fp16"]["samples_ms"] + s_torch
            res["torch_fp16"] = dict(summarize(both), samples_ms=both)
        res["seconds_fp16"] = time.time() - t_start
    return res


def torch_gemm_samples(args, torch, dev, n, dtype):
    """Milliseconds of torch.matmul of two resident n x n matrices of dtype
    (N(0,1), seed 2), after args.warmup untimed calls; frees them after."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(n, n, generator=g).to(dtype).to(dev)
    b = torch.randn(n, n, generator=g).to(dtype).to(dev)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    s = []
    try:
        for i in range(args.warmup + args.gemm_iterations):
            sync()
            t0 = time.perf_counter()
            torch.matmul(a, b, out=c)
            sync()
            if i >= args.warmup:
                s.append((time.perf_counter() - t0) * 1e3)
    finally:
        del a, b, c
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return s


def bench_gemm(args, torch, dev, clock):
    n, chain = args.gemm_n, args.gemm_chain
    paths = gemm_models(args.work, n, chain)
    flops = 2.0 * n * n * n
    res = {"n": n, "chain": chain, "flops": flops}
    t_start = time.time()
    # torch (cuBLAS on CUDA), resident operands, TF32 off.
    s = torch_gemm_samples(args, torch, dev, n, torch.float32)
    res["torch"] = dict(summarize(s), samples_ms=s)
    kiln_gemm(args, paths, chain, clock, res, "", 2, clock.left())
    res["seconds"] = time.time() - t_start
    return res


def kiln_gemm(args, paths, chain, clock, res, suffix, rounds, budget, fp16=False):
    """kiln: the one-MatMul model end to end, then the chain; both interleaved
    in `rounds` rounds of gemm_iterations / rounds runs. Sets res['kiln_e2e' +
    suffix], res['kiln_chain' + suffix] and res['kiln_gemm_ms' + suffix] (per
    GEMM on the device: (chain - single) / (chain - 1))."""
    k1, kc = [], []
    meta = {}
    end = time.time() + budget
    for r in range(rounds):
        for c_, dst in ((1, k1), (chain, kc)) if r % 2 == 0 else ((chain, kc), (1, k1)):
            if c_ == chain and chain == 1 and dst is kc:
                continue
            left = min(clock.left(), end - time.time())
            if left < 10:
                raise OutOfTime(f"no time left for the kiln{' fp16' if fp16 else ''} GEMM")
            j = kiln_bench(args, paths[c_], args.warmup, max(1, args.gemm_iterations // rounds),
                           min(args.kiln_timeout, left - 5), fp16=fp16)
            dst += j["samples_ms"]
            meta.setdefault(c_, {"session_ms": j["session_ms"], "first_run_ms": j["first_run_ms"]})
    res["kiln_e2e" + suffix] = dict(summarize(k1), samples_ms=k1, **meta.get(1, {}))
    if chain > 1:
        res["kiln_chain" + suffix] = dict(summarize(kc), samples_ms=kc, **meta.get(chain, {}))
        per = (res["kiln_chain" + suffix]["median"] - res["kiln_e2e" + suffix]["median"]) / (chain - 1)
        res["kiln_gemm_ms" + suffix] = per if per > 0 else float("nan")
    else:
        res["kiln_gemm_ms" + suffix] = float("nan")


def bench_gemm_fp16(args, torch, dev, clock, res, budget):
    """The GEMM in fp16, after everything fp32 and the fp16 cells: torch.matmul
    of two resident half matrices (cuBLAS half; recorded as an error where
    torch has no half matmul, as on a CPU torch 1.13) and kiln --fp16 of the
    same two models as the fp32 GEMM, one round each (inputs N(0,1): the
    chain's later products overflow half to inf, which costs an NVIDIA GPU
    nothing, so the timing stands; the values are not checked). Adds
    torch_fp16 / torch_fp16_error and kiln_*_fp16 to res."""
    n, chain = args.gemm_n, args.gemm_chain
    paths = gemm_models(args.work, n, chain)
    try:
        s = torch_gemm_samples(args, torch, dev, n, torch.float16)
        res["torch_fp16"] = dict(summarize(s), samples_ms=s)
    except RuntimeError as e:
        res["torch_fp16_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    kiln_gemm(args, paths, chain, clock, res, "_fp16", 1, budget, fp16=True)


# ---- report ----------------------------------------------------------------------------------

def fmt_ms(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def fmt_ratio(a, b):
    if a is None or b is None or not (a > 0 and b > 0):
        return "-"
    return f"{a / b:.2f}"


def report(meta, results, gemm, gemm_error):
    on_cuda = meta["torch"]["gpu"] is not None
    tdev = "CUDA" if on_cuda else "CPU"
    kiln_on_nv = "nvidia" in (meta.get("kiln_vulkan_device") or "").lower()
    L = []
    L.append(f"## kiln-vulkan vs PyTorch {'CUDA' if on_cuda else '(CPU: not the issue figures)'} "
             f"({meta['date']})\n")
    if not on_cuda:
        L.append("**NOT A CUDA RUN: torch ran on the CPU (--torch-device cpu). These figures check the harness "
                 "only; they are not PyTorch CUDA figures.**\n")
    if not kiln_on_nv:
        L.append("**kiln's Vulkan device is not an NVIDIA GPU here (see below): not the issue's kiln-vulkan "
                 "figures.**\n")
    t = meta["torch"]
    L.append(f"- GPU: {meta.get('gpu') or t.get('gpu') or 'none'}"
             + (f"; driver {meta['nvidia_driver']}" if meta.get("nvidia_driver") else ""))
    L.append(f"- kiln: {meta['kiln_version']} ({meta.get('kiln_commit', '?')}), device `{meta['kiln_device']}`: "
             f"`{meta.get('kiln_vulkan_device') or '?'}`")
    if meta.get("shader_compiler"):
        L.append(f"- kiln shader compiler: {meta['shader_compiler']}")
    L.append(f"- torch {t['torch']} (CUDA {t.get('torch_cuda')}, cuDNN {t.get('cudnn')}) on {tdev}, "
             f"{t['python']}; eager, inference_mode; fp32 with TF32 off (matmul {t['allow_tf32_matmul']}, "
             f"cudnn {t['allow_tf32_cudnn']}), cudnn.benchmark {t['cudnn_benchmark']}; fp16 = model.half()")
    L.append(f"- models: ResNet-50 (torchvision, random weights) at {meta['image_size']}x{meta['image_size']}; "
             f"BERT-base encoder ({meta['bert_layers']} layers, d 768, 12 heads, ff 3072, GELU, seq {meta['seq']}); "
             f"ONNX, static shapes ({meta.get('exporter', '?')})")
    L.append(f"- runs: {meta['iterations']} timed per runtime and cell in {meta['rounds']} interleaved rounds, "
             f"{meta['warmup']} warm-up per kiln process and per torch variant; medians. kiln times include the "
             "host->device input upload and output readback (`kiln bench`); torch times are device-resident "
             "(copies ms: the same input up and output down through torch)")
    if meta.get("kiln_fp16"):
        L.append(f"- kiln fp16 = `kiln bench --fp16` (float tensors stored as half on the device; half arithmetic "
                 "in the tiled GEMM/conv on GPUs, f32 arithmetic on CPU Vulkan devices such as lavapipe), timed in "
                 "its own pass after every fp32 cell (so fp32 never loses time to it), interleaved with torch fp16 "
                 "in the same rounds; the torch fp16 column pools the samples of both passes. Its output "
                 f"(`kiln run --fp16`) is checked against torch fp32 value by value with kiln's fp16 model tests' "
                 f"tolerance |got - y| <= {FP16_RTOL:g} |y| + {FP16_ATOL_OF_MAX:g} max|y| (ok, else MISMATCH; "
                 "worst = the largest error / tolerance)")
    if meta.get("quick"):
        L.append("- **--quick**: fewer runs (harness check, not for the record)")
    L.append(f"- command: `{meta['command']}`\n")
    h_t = f"torch {tdev}"
    L.append(f"| model | batch | kiln ms | kiln fp16 ms | {h_t} fp32 ms | {h_t} fp16 ms | kiln / {h_t} fp32 | "
             f"kiln / {h_t} fp16 | kiln fp16 / {h_t} fp16 | kiln output vs torch fp32 | "
             f"kiln fp16 output vs torch fp32 |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in results:
        name = "ResNet-50" if r["model"] == "resnet50" else "BERT-base encoder"
        if "error" in r and "kiln" not in r:
            L.append(f"| {name} | {r['batch']} | error: {r['error'][:100]} | | | | | | | | |")
            continue
        k = r["kiln"]["median"] if r["kiln"]["n"] else None
        k16 = r["kiln_fp16"]["median"] if r.get("kiln_fp16") else None
        f32 = r["torch_fp32"]["median"] if r["torch_fp32"]["n"] else None
        f16 = r["torch_fp16"]["median"] if r.get("torch_fp16") else None
        c = r.get("check") or {}
        chk = (f"{c['verdict']} (max abs err {c['rel_err']:.1e} x max abs y)" if "verdict" in c
               else f"{c['error'][:60]}" if "error" in c else "-")
        c = r.get("check_fp16") or {}
        chk16 = (f"{c['verdict']} (max abs err {c['rel_err']:.1e} x max abs y, worst {c['worst_err_over_tol']:.2f} "
                 "of tol)" if "verdict" in c else f"{c['error'][:60]}" if "error" in c
                 else "skipped (see notes)" if meta.get("kiln_fp16") else "-")
        L.append(f"| {name} | {r['batch']} | {fmt_ms(k)} | {fmt_ms(k16)} | {fmt_ms(f32)} | {fmt_ms(f16)} | "
                 f"{fmt_ratio(k, f32)} | {fmt_ratio(k, f16)} | {fmt_ratio(k16, f16)} | {chk} | {chk16} |")
    if gemm:
        n = gemm["n"]
        gf = lambda ms: gemm["flops"] / (ms * 1e-3) / 1e9 if ms and ms > 0 else float("nan")
        tl = "cuBLAS (torch.matmul)" if on_cuda else "torch.matmul on the CPU (not cuBLAS)"
        kg, tg = gemm.get("kiln_gemm_ms"), gemm["torch"]["median"]
        ke = gemm["kiln_e2e"]["median"]
        L.append("")
        L.append(f"GEMM {n}x{n}x{n} fp32: kiln-vulkan {fmt_ms(kg)} ms = {gf(kg):.0f} GFLOP/s on the device "
                 f"(per GEMM: a chain of {gemm['chain']} MatMuls minus one MatMul, same transfers), {fmt_ms(ke)} ms = {gf(ke):.0f} GFLOP/s end "
                 f"to end with transfers; {tl} {fmt_ms(tg)} ms = {gf(tg):.0f} GFLOP/s (TF32 off); "
                 f"kiln/{'cuBLAS' if on_cuda else 'torch-cpu'} throughput {gf(kg) / gf(tg) * 100:.0f}% "
                 f"(end to end {gf(ke) / gf(tg) * 100:.0f}%)")
        if "kiln_e2e_fp16" in gemm:
            kg16, ke16 = gemm.get("kiln_gemm_ms_fp16"), gemm["kiln_e2e_fp16"]["median"]
            t16 = gemm["torch_fp16"]["median"] if "torch_fp16" in gemm else None
            tl16 = "cuBLAS half (torch.matmul)" if on_cuda else "torch.matmul half on the CPU"
            tpart = (f"{tl16} {fmt_ms(t16)} ms = {gf(t16):.0f} GFLOP/s; kiln fp16/{'cuBLAS' if on_cuda else 'torch-cpu'} "
                     f"half throughput {gf(kg16) / gf(t16) * 100:.0f}% (end to end {gf(ke16) / gf(t16) * 100:.0f}%)"
                     if t16 else f"torch half: {gemm.get('torch_fp16_error', 'not run')}")
            L.append("")
            L.append(f"GEMM {n}x{n}x{n} fp16: kiln-vulkan --fp16 {fmt_ms(kg16)} ms = {gf(kg16):.0f} GFLOP/s on the "
                     f"device (same chain difference; one round), {fmt_ms(ke16)} ms = {gf(ke16):.0f} GFLOP/s end to "
                     f"end (the same f32 inputs and output, stored as half on the device); {tpart}")
        elif gemm.get("fp16_error"):
            L.append(f"\nGEMM fp16: {gemm['fp16_error']}")
    elif gemm_error:
        L.append(f"\nGEMM: {gemm_error}")
    if on_cuda and kiln_on_nv:
        ratios = [(r["tag"], r["kiln"]["median"] / r["torch_fp32"]["median"]) for r in results
                  if "kiln" in r and r["kiln"]["n"] and r["torch_fp32"]["n"]]
        met = [t for t, x in ratios if x <= 2.0]
        aim = (f"\nIssue 4's aims: kiln-vulkan within 2x of PyTorch CUDA eager fp32: {len(met)} of {len(results)} "
               f"cells ({', '.join(f'{t} {x:.2f}x' for t, x in ratios) or 'none timed'})")
        if gemm and gemm.get("kiln_gemm_ms", 0) > 0:
            share = gemm["torch"]["median"] / gemm["kiln_gemm_ms"]
            aim += f"; GEMM at >= 50% of cuBLAS fp32: {'met' if share >= 0.5 else 'not met'} ({share * 100:.0f}%)"
        L.append(aim)
    # Details: spread, start-up, copies.
    L.append("\n<details><summary>details</summary>\n")
    L.append("| cell | kiln p10-p90 ms | kiln load / session / first run ms | kiln peak RSS MB | kiln fp16 p10-p90 ms "
             "| kiln fp16 load / session / first run ms | torch fp32 p10-p90 "
             "| torch fp16 p10-p90 | copies ms | device work per run |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        if "kiln" not in r:
            continue
        k, f = r["kiln"], r["torch_fp32"]
        h, k16 = r.get("torch_fp16"), r.get("kiln_fp16")
        k16s = f"{fmt_ms(k16['p10'])}-{fmt_ms(k16['p90'])} (n {k16['n']})" if k16 else "-"
        L.append(f"| {r['tag']} | {fmt_ms(k['p10'])}-{fmt_ms(k['p90'])} | "
                 f"{fmt_ms(r.get('kiln_load_ms'))} / {fmt_ms(r.get('kiln_session_ms'))} / "
                 f"{fmt_ms(r.get('kiln_first_run_ms'))} | {r.get('kiln_peak_rss_bytes', 0) / 1e6:.0f} | "
                 f"{k16s} | "
                 f"{fmt_ms(r.get('kiln_fp16_load_ms'))} / {fmt_ms(r.get('kiln_fp16_session_ms'))} / "
                 f"{fmt_ms(r.get('kiln_fp16_first_run_ms'))} | "
                 f"{fmt_ms(f['p10'])}-{fmt_ms(f['p90'])} | "
                 f"{(fmt_ms(h['p10']) + '-' + fmt_ms(h['p90'])) if h else r.get('fp16_error', '-')} | "
                 f"{fmt_ms(r.get('copies_ms'))} | {r.get('device_stats') or '-'} |")
    L.append("\n</details>")
    notes = [f"{r['tag']}: {n}" for r in results for n in r.get("notes", [])]
    notes += [f"{r['tag']}: {r['error']}" for r in results if "error" in r]
    notes += [f"{r['tag']}: output check: {r['check']['error']}" for r in results
              if "error" in (r.get("check") or {})]
    notes += [f"{r['tag']}: fp16 output check: {r['check_fp16']['error']}" for r in results
              if "error" in (r.get("check_fp16") or {})]
    if notes:
        L.append("\nnotes:\n" + "\n".join(f"- {n}" for n in notes))
    return "\n".join(L) + "\n"


# ---- main ------------------------------------------------------------------------------------

def add_common(ap):
    ap.add_argument("--work", required=True, help="folder for the ONNX models and caches")
    ap.add_argument("--models", default="resnet50:1,resnet50:32,bert:1,bert:8",
                    help="comma-separated MODEL:BATCH cells, MODEL in resnet50, bert (default %(default)s)")
    ap.add_argument("--image-size", type=int, default=224, help="ResNet-50 input size (default 224)")
    ap.add_argument("--bert-layers", type=int, default=12, help="BERT encoder layers (default 12)")
    ap.add_argument("--seq", type=int, default=128, help="BERT sequence length (default 128)")
    ap.add_argument("--gemm-n", type=int, default=4096, help="GEMM size N (N x N x N; default 4096)")
    ap.add_argument("--gemm-chain", type=int, default=5, help="MatMuls in the chained GEMM model (default 5)")
    ap.add_argument("--no-gemm", action="store_true")
    ap.add_argument("--torch-device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: check the harness without a GPU (its figures are labelled CPU, never CUDA)")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch CPU threads with --torch-device cpu")
    ap.add_argument("--deadline", type=float, default=0, help="seconds since the epoch to finish by")
    ap.add_argument("--quick", action="store_true")


def cmd_export(args):
    torch, dev, info = torch_setup(args)
    log(f"torch {info['torch']} (CUDA {info['torch_cuda']}) at {sys.executable}; device {info.get('gpu') or 'cpu'}")
    if info.get("gpu"):
        print(f"torch: {info['torch']}, CUDA {info['torch_cuda']}, cuDNN {info.get('cudnn')}, GPU {info['gpu']} "
              f"({info['gpu_memory_gb']} GiB, {info['sm_count']} SMs, sm_{info['capability'].replace('.', '')})",
              flush=True)
    else:
        print(f"torch: {info['torch']} on the CPU ({info['cpu_threads']} threads) -- NOT a CUDA run", flush=True)
    clock = Clock(args.deadline)
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(max(1, args.torch_threads or os.cpu_count() or 1))
    em = load_export_models()
    exporters = {}
    for kind, batch in parse_cells(args.models):
        tag = cell_tag(kind, batch, args)
        path = os.path.join(args.work, tag + ".onnx")
        if os.path.exists(path):
            log(f"{tag}: present")
            continue
        if clock.left() < 5:
            raise OutOfTime(f"no time left to export {tag}")
        t0 = time.time()
        model, shape = build_model(kind, batch, args, em)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        # Not under no_grad: there nn.TransformerEncoder takes its fused fast
        # path (aten::_transformer_encoder_layer_fwd), which has no ONNX form.
        exporters[tag] = onnx_export(model, x, path)
        log(f"{tag}: {os.path.getsize(path) / 1e6:.0f} MB, {exporters[tag]}, {time.time() - t0:.1f} s")
    if not args.no_gemm:
        gemm_models(args.work, args.gemm_n, args.gemm_chain)
    gemm_models(args.work, 8, 1)  # gemm_8_c1.onnx: run.sh's probe of kiln's Vulkan device
    ex_path = os.path.join(args.work, "exporters.json")
    old = json.load(open(ex_path)) if os.path.exists(ex_path) else {}
    old.update(exporters)
    with open(ex_path, "w") as f:
        json.dump(old, f)
    json.dump({"torch": info, "builders": EXPORT_MODELS if em else "bench_gpu.py"},
              open(os.path.join(args.work, "torch_env.json"), "w"))


def cmd_bench(args):
    torch, dev, info = torch_setup(args)
    clock = Clock(args.deadline)
    em = load_export_models()
    cells = parse_cells(args.models)
    exporters = {}
    try:
        exporters = json.load(open(os.path.join(args.work, "exporters.json")))
    except (OSError, ValueError):
        pass
    version = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "torch": info,
            "kiln_version": version, "kiln_device": args.kiln_device, "kiln_vulkan_device": args.kiln_device_line,
            "shader_compiler": args.shader_compiler, "gpu": args.gpu_name or info.get("gpu"),
            "nvidia_driver": args.nvidia_driver, "kiln_commit": args.kiln_commit or "?", "image_size": args.image_size,
            "bert_layers": args.bert_layers, "seq": args.seq, "iterations": args.iterations, "rounds": args.rounds,
            "warmup": args.warmup, "quick": args.quick, "command": args.command or " ".join(sys.argv),
            "exporter": ", ".join(sorted(set(exporters.values()))) or "?", "kiln_fp16": not args.no_kiln_fp16}
    results, gemm, gemm_error = [], None, None
    interrupted = None
    # The cells' TorchCells, kept open for the kiln fp16 pass (closed below).
    kept = {} if not args.no_kiln_fp16 else None
    try:
        if not args.no_gemm:
            log(f"GEMM {args.gemm_n}^3 fp32 (chain {args.gemm_chain})")
            try:
                gemm = bench_gemm(args, torch, dev, clock)
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                gemm_error = f"failed: {e}"
                log(f"  GEMM {gemm_error}")
        for i, (kind, batch) in enumerate(cells):
            left = clock.left() - args.reserve
            budget = left / (len(cells) - i)
            tag = cell_tag(kind, batch, args)
            if left < 15:
                results.append({"model": kind, "batch": batch, "tag": tag,
                                "error": f"skipped: {max(0, left):.0f} s left of the time budget"})
                log(f"{tag}: skipped (time)")
                continue
            log(f"{tag}: kiln {args.kiln_device} vs torch {dev} (budget {budget:.0f} s)")
            try:
                results.append(bench_cell(args, torch, dev, em, kind, batch, clock, budget, kept))
            except (RuntimeError, OSError, ValueError, KeyError) as e:
                log(f"  {tag} failed: {e}")
                results.append({"model": kind, "batch": batch, "tag": tag, "error": str(e)})
        if args.device_stats:
            for r in results:
                if "kiln" in r and clock.left() > args.reserve / 2 + 20:
                    r["device_stats"] = kiln_device_stats(args, r["onnx"], min(60, clock.left() - 10))
        # kiln fp16: its own pass after everything fp32, so fp32 never loses
        # rounds to it. Each cell (and the fp16 GEMM, last) gets a share of
        # what is left in proportion to the seconds its fp32 twin took (the
        # same work again, in half: an even split starved a ResNet cell whose
        # first fp16 process compiles its shaders while a small BERT cell
        # needed little); what does not fit is skipped with a note.
        if kept is not None:
            todo = [r for r in results if "kiln" in r and r["kiln"]["n"] and r["tag"] in kept]
            do_gemm16 = gemm is not None and not args.no_gemm
            weights = [max(1.0, r.get("seconds", 1.0)) for r in todo] + \
                ([max(1.0, gemm.get("seconds", 1.0))] if do_gemm16 else [])
            for i, r in enumerate(todo):
                left = clock.left() - args.reserve
                budget = left * weights[i] / sum(weights[i:])
                if left < 15:
                    r.setdefault("notes", []).append(f"kiln fp16: skipped ({max(0, left):.0f} s left of the time budget)")
                    log(f"{r['tag']} fp16: skipped (time)")
                    continue
                log(f"{r['tag']}: kiln {args.kiln_device} --fp16 vs torch {dev} fp16 (budget {budget:.0f} s)")
                try:
                    bench_cell_fp16(args, kept[r["tag"]], r, clock, budget)
                except (RuntimeError, OSError, ValueError, KeyError) as e:
                    log(f"  {r['tag']} fp16 failed: {e}")
                    r.setdefault("notes", []).append(f"kiln fp16 failed: {e}")
                finally:
                    kept.pop(r["tag"]).close()
            if do_gemm16:
                left = clock.left() - args.reserve
                if left < 20:
                    gemm["fp16_error"] = f"skipped ({max(0, left):.0f} s left of the time budget)"
                else:
                    log(f"GEMM {args.gemm_n}^3 fp16 (chain {args.gemm_chain}; budget {left:.0f} s)")
                    try:
                        bench_gemm_fp16(args, torch, dev, clock, gemm, left)
                    except (RuntimeError, OSError, ValueError, KeyError) as e:
                        gemm["fp16_error"] = f"failed: {e}"
                        log(f"  GEMM fp16 {gemm['fp16_error']}")
                    except OutOfTime as e:
                        gemm["fp16_error"] = f"not run: {e}"
                        if str(e).startswith("signal"):
                            raise
    except OutOfTime as e:
        interrupted = str(e)
        log(f"out of time: {e}; printing what ran")
    except KeyboardInterrupt:
        interrupted = "interrupted"
    finally:
        for tc in (kept or {}).values():
            tc.close()
    if interrupted:
        done = {(r["model"], r["batch"]) for r in results}
        for kind, batch in cells:
            if (kind, batch) not in done:
                results.append({"model": kind, "batch": batch, "tag": cell_tag(kind, batch, args),
                                "error": f"not run: {interrupted}"})
        if not args.no_gemm and gemm is None and gemm_error is None:
            gemm_error = f"not run: {interrupted}"
        if kept is not None:
            for r in results:
                if "kiln" in r and "kiln_fp16" not in r and not any(n.startswith("kiln fp16") for n in r.get("notes", [])):
                    r.setdefault("notes", []).append(f"kiln fp16: not run: {interrupted}")
            if gemm is not None and "kiln_e2e_fp16" not in gemm and "fp16_error" not in gemm:
                gemm["fp16_error"] = f"not run: {interrupted}"
    text = report(meta, results, gemm, gemm_error)
    print("\n" + text, flush=True)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
        log(f"wrote {args.md}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "results": results, "gemm": gemm, "gemm_error": gemm_error}, f, indent=1,
                      default=str)
        log(f"wrote {args.json_out}")
    bad = interrupted or any("error" in r for r in results) or gemm_error
    return 1 if bad else 0


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["export", "bench"])
    add_common(ap)  # one option set for both steps, so run.sh can pass the same options to each
    ap.add_argument("--kiln", help="the kiln binary (bench)")
    ap.add_argument("--kiln-device", help="kiln's Vulkan device, e.g. vulkan:0 (bench)")
    ap.add_argument("--kiln-device-line", help="`kiln devices`' line for it (for the report)")
    ap.add_argument("--shader-compiler", help="what run.sh found (for the report)")
    ap.add_argument("--gpu-name")
    ap.add_argument("--nvidia-driver")
    ap.add_argument("--kiln-commit")
    ap.add_argument("--command", help="the command line to print")
    ap.add_argument("--iterations", type=int, help="timed runs per runtime and cell (default 20, --quick 6)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 2)")
    ap.add_argument("--warmup", type=int, help="warm-up runs (default 3, --quick 2)")
    ap.add_argument("--gemm-iterations", type=int, help="timed GEMMs per runtime (default 10, --quick 4)")
    ap.add_argument("--kiln-timeout", type=float, default=180, help="cap for one kiln process (s, default 180)")
    ap.add_argument("--reserve", type=float, default=10, help="seconds kept for the report (default 10)")
    ap.add_argument("--no-fp16", action="store_true", help="no fp16 at all: neither torch fp16 nor kiln --fp16")
    ap.add_argument("--no-kiln-fp16", action="store_true",
                    help="no kiln --fp16 pass (by default it runs after every fp32 cell, in the time left)")
    ap.add_argument("--no-check", action="store_true",
                    help="skip comparing kiln's output (one `kiln run`) with torch's fp32 output per cell")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    ap.add_argument("--device-stats", action="store_true",
                    help="after the cells, one `kiln bench --profile` per model for its submissions/dispatches")
    ap.add_argument("--md", help="also write the report (Markdown) here")
    ap.add_argument("--json-out", help="also write all results (raw samples) here")
    args = ap.parse_args()
    q = args.quick
    args.iterations = args.iterations or (6 if q else 20)
    args.rounds = args.rounds or 2
    args.warmup = args.warmup if args.warmup is not None else (2 if q else 3)
    args.gemm_iterations = args.gemm_iterations or (4 if q else 10)
    args.no_kiln_fp16 = args.no_kiln_fp16 or args.no_fp16
    if args.iterations < 1 or args.rounds < 1 or args.warmup < 0:
        raise Fail("--iterations and --rounds must be >= 1, --warmup >= 0")
    if args.gemm_chain < 1 or args.gemm_n < 1:
        raise Fail("--gemm-n and --gemm-chain must be >= 1")
    if args.cmd == "export":
        return cmd_export(args)
    if not args.kiln or not args.kiln_device:
        raise Fail("bench needs --kiln and --kiln-device")
    return cmd_bench(args)


if __name__ == "__main__":
    try:
        sys.exit(main() or 0)
    except Fail as e:
        print(f"bench_gpu: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except OutOfTime as e:
        print(f"bench_gpu: stopped: {e}", file=sys.stderr, flush=True)
        sys.exit(124)
