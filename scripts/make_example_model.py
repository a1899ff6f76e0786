#!/usr/bin/python3
"""Builds the README's example model: a small CNN that names simple shapes.

    /usr/bin/python3 scripts/make_example_model.py [OUT_DIR]   (default examples/models)

Writes
    shapes.onnx          opset 13, input "image" f32[1,1,16,16] (0..1, white on
                         black), output "logits" f32[1,8]
    shapes_labels.txt    one class name per line, in logit order
    sample_<class>.npy   one f32[1,1,16,16] image per class that the model
                         classifies correctly

The training data is synthesized (16x16 grayscale drawings of shapes at random
positions, sizes, intensities, with noise), so nothing is downloaded. Training
takes well under a minute on one CPU core and is deterministic (fixed seeds,
one thread, deterministic algorithms). The script fails unless test accuracy
exceeds 95%.
"""
import os
import sys
import time

import numpy as np
import torch
from torch import nn

CLASSES = ["circle", "square", "triangle", "cross", "horizontal_line", "vertical_line", "diagonal_line", "dot"]
SIZE = 16


def render(cls, rng):
    """One image of class `cls` (index into CLASSES): float32 [16,16] in 0..1."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    name = CLASSES[cls]
    width = rng.uniform(0.7, 1.4)            # stroke half-width in pixels
    r = rng.uniform(3.0, 6.5)                # shape radius / half-size
    cx, cy = rng.uniform(r + 1, SIZE - r - 1, size=2)

    def stroke(dist):  # soft-edged ink from distance to the ideal curve
        return np.clip(width + 0.5 - dist, 0.0, 1.0)

    if name == "circle":
        ink = stroke(np.abs(np.hypot(x - cx, y - cy) - r))
    elif name == "square":
        d = np.maximum(np.abs(x - cx), np.abs(y - cy))
        ink = stroke(np.abs(d - r))
    elif name == "triangle":  # filled, pointing up
        top, base = cy - r, cy + r * 0.8
        half = (y - top) / (base - top) * r  # half-width at row y
        inside = (y >= top) & (y <= base) & (np.abs(x - cx) <= half)
        ink = inside.astype(np.float32)
    elif name == "cross":
        arm = (np.abs(x - cx) <= r) & (np.abs(y - cy) <= r)
        ink = np.maximum(stroke(np.abs(x - cx)), stroke(np.abs(y - cy))) * arm
    elif name == "horizontal_line":
        cx = rng.uniform(r, SIZE - r)
        ink = stroke(np.abs(y - cy)) * (np.abs(x - cx) <= r + 1)
    elif name == "vertical_line":
        cy = rng.uniform(r, SIZE - r)
        ink = stroke(np.abs(x - cx)) * (np.abs(y - cy) <= r + 1)
    elif name == "diagonal_line":
        s = rng.choice([-1.0, 1.0])  # "\" or "/"
        dist = np.abs((x - cx) - s * (y - cy)) / np.sqrt(2.0)
        along = np.abs((x - cx) + s * (y - cy)) / np.sqrt(2.0)
        ink = stroke(dist) * (along <= r + 1)
    elif name == "dot":
        ink = np.clip(rng.uniform(1.2, 2.2) + 0.5 - np.hypot(x - cx, y - cy), 0.0, 1.0)
    else:
        raise ValueError(name)
    img = ink * rng.uniform(0.6, 1.0) + rng.normal(0.0, 0.08, size=(SIZE, SIZE))
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def dataset(n, seed):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % len(CLASSES)
    rng.shuffle(labels)
    images = np.stack([render(int(c), rng) for c in labels])[:, None]
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


class ShapesNet(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16x8x8
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32x4x4
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, n_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "models")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    train_x, train_y = dataset(12000, seed=1)
    test_x, test_y = dataset(2000, seed=2)
    model = ShapesNet(len(CLASSES))
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(3)
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(train_x), generator=gen)
        for i in range(0, len(perm), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = loss_fn(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        print(f"epoch {epoch}: loss {loss.item():.4f}, test accuracy {acc:.4f}")
    print(f"{n_params} parameters, trained in {time.time() - t0:.1f}s")
    if acc <= 0.95:
        sys.exit(f"test accuracy {acc:.4f} is not above 0.95")

    model.eval()
    onnx_path = os.path.join(out_dir, "shapes.onnx")
    torch.onnx.export(model, torch.zeros(1, 1, SIZE, SIZE), onnx_path, opset_version=13,
                      input_names=["image"], output_names=["logits"], do_constant_folding=True)
    with open(os.path.join(out_dir, "shapes_labels.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")

    # One confidently, correctly classified sample per class (fresh seed).
    rng = np.random.default_rng(4)
    with torch.no_grad():
        for c, name in enumerate(CLASSES):
            for _ in range(1000):
                img = render(c, rng)[None, None]
                p = torch.softmax(model(torch.from_numpy(img)), 1)[0]
                if p.argmax().item() == c and p[c].item() > 0.9:
                    break
            else:
                sys.exit(f"no confident sample for {name}")
            np.save(os.path.join(out_dir, f"sample_{name}.npy"), img)
            print(f"sample_{name}.npy: p={p[c].item():.3f}")

    try:  # structural check when the onnx package is present
        import onnx
        m = onnx.load(onnx_path)
        onnx.checker.check_model(m)
        print("ops:", sorted({n.op_type for n in m.graph.node}))
    except ImportError:
        pass
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"wrote {out_dir} ({total} bytes) in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
