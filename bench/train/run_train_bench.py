#!/usr/bin/python3
"""Training step time: kiln train against PyTorch eager on the CPU, in one run.

    /usr/bin/python3 bench/train/run_train_bench.py [--kiln build/kiln] [--threads 2] [--rounds 3]
                                                   [--models mlp,fmnist_cnn,resnet18,bert_mini] [--device cpu]

Runs with Debian's /usr/bin/python3 (torch 1.13; for fast PyTorch reference
runs install libopenblas0-pthread). Per model (issue 12's four: an MLP at
batch 128, the Fashion-MNIST CNN at 64, ResNet-18 on 32x32 inputs at 32, a
BERT-mini encoder, 4 layers, d 256, sequence 128, at 32), all with
cross-entropy and SGD with momentum 0.9:
  - PyTorch: the model trained in-process with torch.set_num_threads(T):
    warm-up steps, then timed steps; the median step time;
  - kiln: the model exported from PyTorch (training mode), then `kiln train
    --steps S` for two step counts in fresh processes; the step time is the
    difference of their wall times over the difference of steps, so the
    set-up (loading, compiling, the first step) cancels out. Rounds
    alternate which runtime goes first; medians over rounds.
  - peak memory: the maximum resident set of each runtime's process, from
    GNU time (kiln's longer run; PyTorch's in a child process of its own).
Prints a Markdown table with the ratios kiln / PyTorch (the issue's bar:
<= 1.0 on each; the goal beyond it: <= 0.6).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TORCH_CHILD = r'''
import json, sys, time, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import run_train_bench as B
name, threads, steps, warm = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
net, x, y, batch = B.make(name)
net.train()
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
times = []
for s in range(warm + steps):
    b = s % (len(x) // batch)
    xb, yb = torch.from_numpy(x[b * batch:(b + 1) * batch]), torch.from_numpy(y[b * batch:(b + 1) * batch])
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(net(xb), yb)
    loss.backward()
    opt.step()
    if s >= warm:
        times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"median_ms": float(np.median(times))}))
'''


def make(name):
    """(model, inputs, labels, batch) for one benchmark model; inputs hold several batches."""
    import numpy as np
    import torch
    rng = np.random.default_rng(3)
    if name == "mlp":
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                  torch.nn.ReLU(), torch.nn.Linear(256, 10))
        batch, shape, classes = 128, (1, 28, 28), 10
    elif name == "fmnist_cnn":
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        batch, shape, classes = 64, (1, 28, 28), 10
    elif name == "resnet18":
        import torchvision
        net = torchvision.models.resnet18(num_classes=10)
        batch, shape, classes = 32, (3, 32, 32), 10
    elif name == "bert_mini":
        class BertMini(torch.nn.Module):
            def __init__(self):
                super().__init__()
                layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True, activation="gelu")
                self.enc = torch.nn.TransformerEncoder(layer, 4)
                self.head = torch.nn.Linear(256, 2)

            def forward(self, x):
                return self.head(self.enc(x)[:, 0])
        net = BertMini()
        batch, shape, classes = 32, (128, 256), 2
    else:
        raise ValueError(name)
    n = batch * 4
    x = rng.standard_normal((n,) + shape).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int64)
    return net, x, y, batch


def kiln_time(args, model, data, batch, steps):
    cmd = [args.kiln, "train", model, "--data", data, "--loss", "cross_entropy", "--batch-size", str(batch),
           "--no-shuffle", "--steps", str(steps), "--epochs", str(steps), "--optimizer", "sgd", "--lr", "0.01",
           "--momentum", "0.9", "--threads", str(args.threads), "--device", args.device]
    env = dict(os.environ, KILN_CACHE_DIR=args.cache)
    t0 = time.perf_counter()
    r = subprocess.run(TIME + cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if not l.startswith("KILN_PEAK_KB")]
        raise RuntimeError(lines[-1] if lines else f"exit {r.returncode}")
    return wall, peak_mb(r.stderr)


# GNU time reports the peak resident set of the process it starts: a child's own ru_maxrss would count the
# Python parent's pages (torch imported) that it had between fork and exec.
TIME = ["/usr/bin/time", "-f", "KILN_PEAK_KB %M"]


def peak_mb(stderr):
    for line in stderr.splitlines():
        if line.startswith("KILN_PEAK_KB"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="mlp,fmnist_cnn,resnet18,bert_mini")
    ap.add_argument("--short", type=int, default=5, help="kiln's short run, steps")
    ap.add_argument("--long", type=int, default=25, help="kiln's long run, steps")
    args = ap.parse_args()
    import numpy as np
    import torch
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        args.cache = os.path.join(tmp, "cache")
        for name in args.models.split(","):
            torch.manual_seed(0)
            net, x, y, batch = make(name)
            model = os.path.join(tmp, name + ".onnx")
            net.train()
            torch.onnx.export(net, torch.from_numpy(x[:batch]), model, input_names=["x"], output_names=["logits"],
                              opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
            data = os.path.join(tmp, name + ".npz")
            np.savez(data, x=x, target=y)
            kiln_ms, torch_ms, kiln_mb, torch_mb, err = [], [], 0.0, 0.0, None
            try:  # compiles the kernels into the cache: the timed runs find them there
                kiln_time(args, model, data, batch, args.short)
            except RuntimeError as e:
                err = str(e)[:200]
            for r in range(args.rounds):
                order = ("kiln", "torch") if r % 2 == 0 else ("torch", "kiln")
                for who in order:
                    if who == "kiln" and err is None:
                        try:
                            short, _ = kiln_time(args, model, data, batch, args.short)
                            long_, rss = kiln_time(args, model, data, batch, args.long)
                            kiln_ms.append((long_ - short) / (args.long - args.short) * 1e3)
                            kiln_mb = max(kiln_mb, rss)
                        except RuntimeError as e:
                            err = str(e)[:200]
                    elif who == "torch":
                        out = subprocess.run(TIME + [sys.executable, "-c", TORCH_CHILD, HERE, name, str(args.threads),
                                                     "20", "3"], capture_output=True, text=True)
                        if out.returncode != 0:
                            sys.exit(f"PyTorch run of {name} failed: {out.stderr[-500:]}")
                        res = json.loads(out.stdout.strip().splitlines()[-1])
                        torch_ms.append(res["median_ms"])
                        torch_mb = max(torch_mb, peak_mb(out.stderr))
            row = {"model": name, "batch": batch, "torch_ms": statistics.median(torch_ms), "torch_mb": torch_mb}
            if err:
                row["error"] = err
            else:
                row.update(kiln_ms=statistics.median(kiln_ms), kiln_mb=kiln_mb,
                           ratio=statistics.median(kiln_ms) / statistics.median(torch_ms))
            rows.append(row)
            print(f"{name}: {row}", file=sys.stderr, flush=True)
    print(f"\n## Training step time, kiln ({args.device}) vs PyTorch eager (CPU), {args.threads} threads\n")
    print(f"- torch {torch.__version__}; kiln {subprocess.run([args.kiln, '--version'], capture_output=True, text=True).stdout.strip()}")
    print(f"- command: `{' '.join(['/usr/bin/python3', os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`")
    print("- kiln's step: (wall(--steps %d) - wall(--steps %d)) / %d, fresh processes; PyTorch: median of 20 steps "
          "after 3; medians of %d rounds, alternating which goes first\n" % (args.long, args.short, args.long - args.short,
                                                                            args.rounds))
    print("| model | batch | kiln ms/step | PyTorch ms/step | kiln/PyTorch | kiln peak MB | PyTorch peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['batch']} | FAILED: {r['error']} | {r['torch_ms']:.2f} | | | {r['torch_mb']:.0f} |")
        else:
            print(f"| {r['model']} | {r['batch']} | {r['kiln_ms']:.2f} | {r['torch_ms']:.2f} | {r['ratio']:.2f} | "
                  f"{r['kiln_mb']:.0f} | {r['torch_mb']:.0f} |")


if __name__ == "__main__":
    main()
