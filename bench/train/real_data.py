#!/usr/bin/python3
"""kiln train on real data: the accuracy a small model reaches.

    /usr/bin/python3 bench/train/real_data.py [--kiln build/kiln] [--device cpu] [--threads 2]
                                             [--only fmnist,digits] [--epochs-fmnist 3] [--epochs-digits 40]

Runs with Debian's /usr/bin/python3 (torch to export the models, numpy,
scikit-learn); the data installs offline with scripts/install-deps.sh
(Debian's dataset-fashion-mnist and python3-sklearn).
  - fmnist: the Fashion-MNIST CNN (two conv + BatchNorm + ReLU + max-pool
    blocks, two linear layers) on the 60k training images, AdamW lr 1e-3,
    batch 64; test accuracy on the 10k test images after each epoch (kiln
    train --eval). Issue 12's bar: >= 88%.
  - digits: an MLP (64-128-10) on scikit-learn's 8x8 digits, 1500 for
    training, the other 297 for testing; AdamW lr 3e-3, batch 32. Bar: >= 95%.
Prints the per-epoch accuracies, the time, and the commands.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FMNIST = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def export(net, example, path):
    net.train()
    torch.onnx.export(net, example, path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=15,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def run(args, name, model, train, test, epochs, lr, batch):
    log = os.path.join(args.tmp, name + ".jsonl")
    cmd = [args.kiln, "train", model, "--data", train, "--eval", test, "--loss", "cross_entropy", "--optimizer", "adamw",
           "--lr", str(lr), "--batch-size", str(batch), "--epochs", str(epochs), "--shuffle", "0", "--log", log,
           "--device", args.device, "--threads", str(args.threads)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"{name}: kiln train failed: {r.stderr.strip()[-500:]}")
        return False
    evals = [json.loads(l) for l in open(log) if "eval_accuracy" in l]
    steps = sum(1 for l in open(log) if '"step"' in l)
    print(f"\n### {name}\n\n- command: `kiln train {name}.onnx --data train.npz --eval test.npz --loss cross_entropy "
          f"--optimizer adamw --lr {lr} --batch-size {batch} --epochs {epochs} --shuffle 0 --device {args.device} "
          f"--threads {args.threads}`")
    print(f"- {steps} steps in {wall:.1f} s ({wall / max(steps, 1) * 1e3:.1f} ms per step with evaluation)")
    for e in evals:
        print(f"- epoch {e['epoch']}: test loss {e['eval_loss']:.4f}, accuracy {100 * e['eval_accuracy']:.2f}%")
    return evals[-1]["eval_accuracy"] if evals else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="fmnist,digits")
    ap.add_argument("--epochs-fmnist", type=int, default=3)
    ap.add_argument("--epochs-digits", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        if "fmnist" in args.only:
            if not os.path.isdir(FMNIST):
                sys.exit(f"no {FMNIST}: run scripts/install-deps.sh (Debian's dataset-fashion-mnist)")
            def load(kind):
                x = idx(f"{FMNIST}/{kind}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
                y = idx(f"{FMNIST}/{kind}-labels-idx1-ubyte.gz").astype(np.int64)
                return ((x - 0.2860) / 0.3530).reshape(-1, 1, 28, 28).astype(np.float32), y
            xtr, ytr = load("train")
            xte, yte = load("t10k")
            np.savez(os.path.join(tmp, "fm_train.npz"), x=xtr, target=ytr)
            np.savez(os.path.join(tmp, "fm_test.npz"), x=xte, target=yte)
            sys.path.insert(0, HERE)
            import run_train_bench as B
            net, _, _, _ = B.make("fmnist_cnn")
            model = os.path.join(tmp, "fmnist_cnn.onnx")
            export(net, torch.from_numpy(xtr[:2]), model)
            acc = run(args, "fmnist_cnn", model, os.path.join(tmp, "fm_train.npz"), os.path.join(tmp, "fm_test.npz"),
                      args.epochs_fmnist, 1e-3, 64)
            print(f"- bar >= 88%: {'met' if acc >= 0.88 else 'NOT met'}")
            ok &= acc >= 0.88
        if "digits" in args.only:
            from sklearn.datasets import load_digits
            d = load_digits()
            x = (d.data / 16.0).astype(np.float32)
            y = d.target.astype(np.int64)
            perm = np.random.default_rng(0).permutation(len(x))
            x, y = x[perm], y[perm]
            np.savez(os.path.join(tmp, "dg_train.npz"), x=x[:1500], target=y[:1500])
            np.savez(os.path.join(tmp, "dg_test.npz"), x=x[1500:], target=y[1500:])
            net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
            model = os.path.join(tmp, "digits_mlp.onnx")
            export(net, torch.from_numpy(x[:2]), model)
            acc = run(args, "digits_mlp", model, os.path.join(tmp, "dg_train.npz"), os.path.join(tmp, "dg_test.npz"),
                      args.epochs_digits, 3e-3, 32)
            print(f"- bar >= 95%: {'met' if acc >= 0.95 else 'NOT met'}")
            ok &= acc >= 0.95
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
