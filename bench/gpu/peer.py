#!/usr/bin/env python3
"""kiln on a GPU device against PyTorch on the same GPU, one run, interleaved.

    python3 bench/gpu/peer.py --kiln build/kiln --models-dir DIR [--device cuda]
                              [--models resnet50,mobilenet_v2,transformer_encoder,bert_encoder]
                              [--iterations 30] [--rounds 3]

For each model, DIR/NAME.onnx (as tests/models/export_models.py writes it,
or bench/zoo/weights_stub.py's refill of it) runs under `kiln bench --device
D --json`, and the PyTorch module that file was exported from
(export_models.py's BUILDERS: the same architecture, its own random
weights) runs eagerly on cuda:0. Both time what a user's call costs: the
input from host memory, the run, the output back in host memory, one
inference at a time, batch 1. PyTorch runs twice: fp32 with TF32 off (the
arithmetic kiln does: plain fp32 FMA) and PyTorch's defaults (cuDNN
convolutions may use TF32). The rounds alternate kiln and PyTorch; the table
gives medians over all rounds and the ratio kiln/PyTorch (below 1: kiln is
faster). Uses the python3 that runs it, which must import torch and
torchvision with CUDA (the GPU machine's image python3).

bench_gpu.py beside it is the Vulkan harness of issue 4 (it exports its own
models on the machine and checks a vulkan device); this one takes any kiln
device and the models scripts/gpu-check carries in.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run_bench  # noqa: E402  (its `kiln bench --json` runner)


def kiln_samples(args, model, iterations):
    """kiln's latencies (ms) and its `kiln bench --json` record, through run_bench.py's runner."""
    try:
        out = run_bench.kiln_bench(args, model, [], 0, iterations, warmup=3, timeout=args.timeout)
    except RuntimeError as e:
        raise RuntimeError(str(e).splitlines()[-1][:400]) from None
    return out["samples_ms"], out


def torch_samples(module, x_host, iterations, torch, dev):
    with torch.no_grad():
        for _ in range(3):
            module(x_host.to(dev)).cpu()
        out = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            y = module(x_host.to(dev)).cpu()
            out.append((time.perf_counter() - t0) * 1e3)
            del y
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models-dir", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,transformer_encoder,bert_encoder")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--torch-device", default="cuda:0", help="PyTorch's device (cpu: checks the harness anywhere)")
    args = ap.parse_args()

    import numpy as np
    import torch
    import export_models

    dev = torch.device(args.torch_device)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else args.torch_device
    print(f"gpu_peer: kiln --device {args.device} vs PyTorch {torch.__version__} on {where}; {args.rounds} rounds x {args.iterations} runs, batch 1, host in/out",
          flush=True)
    rows = []
    for name in args.models.split(","):
        path = os.path.join(args.models_dir, name + ".onnx")
        inp = os.path.join(args.models_dir, name + ".input.npy")
        module, shape = export_models.BUILDERS[name]()
        module = module.eval().to(dev)
        x = torch.from_numpy(np.load(inp)) if os.path.exists(inp) else torch.randn(*shape)
        k, t32, tdef, first = [], [], [], None
        err = None
        for _ in range(args.rounds):
            try:
                s, info = kiln_samples(args, path, args.iterations)
            except (RuntimeError, OSError) as e:
                err = str(e)
                break
            first = first or info
            k += s
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            t32 += torch_samples(module, x, args.iterations, torch, dev)
            torch.backends.cudnn.allow_tf32 = True
            tdef += torch_samples(module, x, args.iterations, torch, dev)
        if err:
            print(f"{name}: kiln failed: {err}", flush=True)
            rows.append((name, None, None, None, None))
            continue
        km, t32m, tdm = statistics.median(k), statistics.median(t32), statistics.median(tdef)
        rows.append((name, km, t32m, tdm, first["session_ms"] + first["first_run_ms"]))
        print(f"{name}: kiln {km:.3f} ms, torch fp32 {t32m:.3f} ms, torch default {tdm:.3f} ms", flush=True)
    print(f"\n{'model':22s} {'kiln ms':>9s} {'torch fp32':>11s} {'torch dflt':>11s} {'kiln/fp32':>10s} "
          f"{'kiln/dflt':>10s} {'kiln cold ms':>13s}")
    for name, km, t32m, tdm, cold in rows:
        if km is None:
            print(f"{name:22s} {'failed':>9s}")
            continue
        print(f"{name:22s} {km:9.3f} {t32m:11.3f} {tdm:11.3f} {km / t32m:10.2f} {km / tdm:10.2f} {cold:13.1f}")


if __name__ == "__main__":
    main()
