#!/usr/bin/env python3
"""kiln vs ONNX Runtime on the decoder-attention models (issue 13, item 4), in one run.

    python3 bench/attention/run_attention_bench.py [--kiln build/kiln] [--threads 2,1] [--iterations 20]
                                                   [--rounds 4] [--warmup 2] [--models-dir bench/.attention]

Runs with the first `python3` on PATH. It makes bench/.venv (scripts/python-venv.sh) if needed, writes
the models with its python (gen_attention_models.py: decode_kv, decode_nokv, block; batch 1, 32 heads x
128, a KV cache of 2,048), then for each model and thread count times kiln (`kiln bench --json`, cpu) and
ONNX Runtime (bench/ort_worker.py) on the same input files, interleaved in rounds as bench/run_bench.py
does, and prints the medians and the ratio kiln/ORT.
"""
import argparse
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import run_bench as rb  # noqa: E402  (OrtWorker, kiln_bench, summarize, the venv)

MODELS = ["decode_kv", "decode_nokv", "block"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models-dir", default=os.path.join(BENCH, ".attention"))
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    args.device = "cpu"
    rb.ensure_venv(False)
    if not all(os.path.exists(os.path.join(args.models_dir, m + ".onnx")) for m in MODELS):
        subprocess.run([rb.VENV_PY, os.path.join(HERE, "gen_attention_models.py"), args.models_dir], check=True)
    out = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"# decoder attention, kiln vs ONNX Runtime ({out}; cpu)\n")
    print("| model | threads | kiln ms (p10-p90) | ORT ms (p10-p90) | kiln/ORT |")
    print("|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        model = os.path.join(args.models_dir, name + ".onnx")
        inputs = []
        for f in sorted(glob.glob(os.path.join(args.models_dir, name + ".*.npy"))):
            inputs.append(f"{os.path.basename(f)[len(name) + 1:-4]}={f}")
        for threads in [int(t) for t in args.threads.split(",")]:
            rounds = max(1, min(args.rounds, args.iterations))
            per = [args.iterations // rounds + (1 if r < args.iterations % rounds else 0) for r in range(rounds)]
            ks, os_ = [], []
            ort = rb.OrtWorker(model, inputs, threads, args.warmup)
            try:
                for r, k in enumerate(per):
                    for who in (["kiln", "ort"] if r % 2 == 0 else ["ort", "kiln"]):
                        if who == "kiln":
                            ks += rb.kiln_bench(args, model, inputs, threads, k)["samples_ms"]
                        else:
                            os_ += ort.run(k)
            finally:
                ort.close()
            a, b = rb.summarize(ks), rb.summarize(os_)
            print(f"| {name} | {threads} | {a['median']:.2f} ({a['p10']:.2f}-{a['p90']:.2f}) | "
                  f"{b['median']:.2f} ({b['p10']:.2f}-{b['p90']:.2f}) | {a['median'] / b['median']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
