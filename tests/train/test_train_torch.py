#!/usr/bin/python3
"""kiln train against PyTorch: the same initial weights (exported to ONNX),
data order and optimizer give the same losses.

    /usr/bin/python3 tests/train/test_train_torch.py KILN [--device D] [--steps N]

(Debian's /usr/bin/python3: torch and onnx.) For an MLP, a CNN with
BatchNormalization and max pooling, and a one-layer transformer encoder
(dropout 0), each with SGD (momentum 0.9) and AdamW (weight decay 0.01):
PyTorch trains N steps (default 300; cross-entropy, batches in order, the
labels a random linear teacher's),
then `kiln train MODEL --no-shuffle --steps N --log` on device D (default
cpu) from the exported model; the first 10 steps' losses must agree within
1e-4 relative and the means of the last 50 within 2%. On a device other
than ref, each model's SGD step graph (KILN_TRAIN_SAVE_GRAPH) must run with
no node on ref (`kiln info --device D`), and on vulkan as one queue
submission. Prints one line per run and exits 1 on any failure.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

N_SAMPLES, BATCH = 512, 16


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))

    def forward(self, x):
        return self.f(x)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.layer(x).mean(dim=1))


def models():
    rng = np.random.default_rng(7)
    mlp = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    return [
        ("mlp", mlp, rng.standard_normal((N_SAMPLES, 12)).astype(np.float32), 5, 13),
        ("cnn_bn", Cnn(), rng.standard_normal((N_SAMPLES, 1, 12, 12)).astype(np.float32), 10, 15),
        ("transformer", Encoder(), rng.standard_normal((N_SAMPLES, 6, 16)).astype(np.float32), 5, 17),
    ]


def torch_losses(net, state, x, y, opt_name, steps):
    net.load_state_dict(state)
    net.train()
    opt = (torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if opt_name == "sgd"
           else torch.optim.AdamW(net.parameters(), lr=0.005, weight_decay=0.01))
    per_epoch = (len(x) + BATCH - 1) // BATCH
    out = []
    for s in range(steps):
        b = s % per_epoch
        xb, yb = torch.tensor(x[b * BATCH:(b + 1) * BATCH]), torch.tensor(y[b * BATCH:(b + 1) * BATCH])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    kiln, device, steps = args[0], "cpu", 300
    i = 1
    while i < len(args):
        if args[i] == "--device":
            device = args[i + 1]
        elif args[i] == "--steps":
            steps = int(args[i + 1])
        else:
            sys.exit(f"unknown argument {args[i]}")
        i += 2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, net, x, classes, opset in models():
            # labels of a random linear teacher: learnable, so 300 steps (9 epochs) make progress without
            # memorizing noise down to a loss near zero, where float32 rounding differences decide
            teacher = np.random.default_rng(11).standard_normal((x[0].size, classes))
            y = np.argmax(x.reshape(len(x), -1) @ teacher, axis=1).astype(np.int64)
            state = {k: v.clone() for k, v in net.state_dict().items()}
            path = os.path.join(tmp, name + ".onnx")
            # A training-mode export: an inference export merges initializers of equal values (the zeros of
            # several biases become one initializer: a tie the PyTorch model does not have) and folds a
            # BatchNorm that follows a Conv into the Conv's weights.
            net.train()
            torch.onnx.export(net, torch.tensor(x[:2]), path, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=opset,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
            data = os.path.join(tmp, name + ".npz")
            np.savez(data, x=x, target=y)
            epochs = (steps * BATCH + len(x) - 1) // len(x) + 1
            for opt_name in ("sgd", "adamw"):
                want = torch_losses(net, state, x, y, opt_name, steps)
                log = os.path.join(tmp, f"{name}_{opt_name}.jsonl")
                cmd = [kiln, "train", path, "--data", data, "--loss", "cross_entropy", "--batch-size", str(BATCH),
                       "--no-shuffle", "--steps", str(steps), "--epochs", str(epochs), "--log", log, "--device", device,
                       "--threads", "1"]
                cmd += (["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"] if opt_name == "sgd" else
                        ["--optimizer", "adamw", "--lr", "0.005", "--weight-decay", "0.01"])
                step_graph = os.path.join(tmp, f"{name}_step.onnx")
                env = dict(os.environ, KILN_TRAIN_SAVE_GRAPH=step_graph) if opt_name == "sgd" else None
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if r.returncode == 0 and env and device != "ref":
                    info = subprocess.run([kiln, "info", step_graph, "--device", device], capture_output=True,
                                          text=True)
                    on_ref = re.search(r"(\d+) nodes? on ref", info.stdout)
                    subs = re.search(r"(\d+) submissions? per run", info.stdout)
                    plan_ok = bool(on_ref) and on_ref.group(1) == "0" and (device != "vulkan" or
                                                                           (subs and subs.group(1) == "1"))
                    failures += not plan_ok
                    print(f"{'PASS' if plan_ok else 'FAIL'} {name} step graph on {device}: "
                          f"{on_ref.group(0) if on_ref else 'no plan line'}"
                          f"{'; ' + subs.group(0) if subs else ''}")
                if r.returncode != 0:
                    print(f"FAIL {name} {opt_name}: kiln train exited {r.returncode}: {r.stderr.strip()[-400:]}")
                    failures += 1
                    continue
                got = [json.loads(line)["loss"] for line in open(log) if '"loss"' in line]
                if len(got) != steps:
                    print(f"FAIL {name} {opt_name}: {len(got)} steps logged, {steps} expected")
                    failures += 1
                    continue
                first = max(abs(a - b) / abs(b) for a, b in zip(got[:10], want[:10]))
                tail = min(50, steps)
                mk, mt = np.mean(got[-tail:]), np.mean(want[-tail:])
                last = abs(mk - mt) / abs(mt)
                ok = first <= 1e-4 and last <= 0.02
                failures += not ok
                print(f"{'PASS' if ok else 'FAIL'} {name} {opt_name} on {device}: first 10 steps max rel diff "
                      f"{first:.2e} (<= 1e-4); mean of the last {tail} {mk:.5f} vs PyTorch {mt:.5f}, rel diff "
                      f"{last:.2e} (<= 0.02); loss {want[0]:.4f} -> {want[-1]:.4f}")
    print(f"test_train_torch: {6 - failures} of 6 runs passed on {device}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
