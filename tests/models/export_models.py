#!/usr/bin/python3
"""Exports kiln's PyTorch test models to ONNX, with one input and PyTorch's output.

    /usr/bin/python3 tests/models/export_models.py OUT_DIR [--bert] [--big] [--only NAME,...]

For each model NAME it writes OUT_DIR/NAME.onnx (opset 13, one input "input",
one output "output", static shapes but for DYNAMIC_BATCH), NAME.input.npy (a random f32 input) and
NAME.expected.npy (PyTorch's f32 output for it). Everything runs offline:
weights are random with a fixed seed per model (no pretrained downloads), so
the files are reproducible. BatchNorm layers get random running statistics and
affine parameters, so a BatchNorm that ignored them would not pass (the
exporter folds them into the Conv weights); every transformer layer gets its
own random weights (nn.TransformerEncoder starts them as copies).

Default models:
    mlp                  3 Linear layers, input [4,64]
    small_cnn            Conv-BN-ReLU-MaxPool x2, global average pool, Linear; [1,3,32,32]
    mobilenet_v2         torchvision, weights=None, eval; [1,3,224,224]
    resnet50             torchvision, weights=None, eval; [1,3,224,224]
    transformer_encoder  nn.TransformerEncoder, 2 layers, d_model 64, 4 heads, [1,16,64]
    small_cnn_dyn        small_cnn's layers with a symbolic batch axis ("batch"); input [2,3,32,32]
                         (the session tests run it at several batch sizes)
--bert adds bert_encoder (12 layers, d 768, 12 heads, ff 3072, GELU, [1,128,768]; ~340 MB),
--big adds big_mlp (~100 MB of Linear weights, for the load-memory test).

Models whose three files already exist are skipped, so rerunning is cheap;
files are written under a temporary name and renamed when complete.
"""
import argparse
import os
import sys
import time
import warnings
import zlib

import numpy as np
import torch
from torch import nn

OPSET = 13


def randomize_batchnorm(model, gen):
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            n = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)


def randomize_transformer(model, gen):
    """nn.TransformerEncoder deep-copies one layer, so all layers start equal
    (and the exporter then stores their weights once): give each its own."""
    for layer in model.modules():
        if not isinstance(layer, nn.TransformerEncoderLayer):
            continue
        with torch.no_grad():
            for m in layer.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
            for pname, p in layer.named_parameters():
                if p.dim() == 2:  # Xavier-uniform, as PyTorch initializes them
                    bound = (6.0 / (p.shape[0] + p.shape[1])) ** 0.5
                    p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
                elif "norm" not in pname:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def mlp():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.Tanh(), nn.Linear(64, 10)), [4, 64]


def small_cnn():
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return model, [1, 3, 32, 32]


def small_cnn_dyn():
    return small_cnn()[0], [2, 3, 32, 32]


DYNAMIC_BATCH = {"small_cnn_dyn"}  # exported with input and output axis 0 symbolic


def mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None), [1, 3, 224, 224]


def resnet50():
    import torchvision
    return torchvision.models.resnet50(weights=None), [1, 3, 224, 224]


def transformer(layers, d_model, heads, ff, seq, activation):
    layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ff, dropout=0.0, activation=activation,
                                       batch_first=True)
    # enable_nested_tensor only matters for padding masks; off keeps tracing plain.
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False), [1, seq, d_model]


def transformer_encoder():
    return transformer(2, 64, 4, 128, 16, "relu")


def bert_encoder():
    return transformer(12, 768, 12, 3072, 128, "gelu")


def big_mlp():
    # 1024*4096 + 4096*4096 + 4096*1024 weights: ~24M f32 = ~100 MB.
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024)), [1, 1024]


DEFAULT = ["mlp", "small_cnn", "mobilenet_v2", "resnet50", "transformer_encoder", "small_cnn_dyn"]
BUILDERS = {f.__name__: f for f in [mlp, small_cnn, mobilenet_v2, resnet50, transformer_encoder, bert_encoder,
                                    big_mlp, small_cnn_dyn]}


def files_of(out_dir, name):
    return [os.path.join(out_dir, name + suffix) for suffix in (".onnx", ".input.npy", ".expected.npy")]


def export(name, out_dir):
    onnx_path, input_path, expected_path = files_of(out_dir, name)
    seed = zlib.crc32(name.encode())  # a fixed, distinct seed per model
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model, shape = BUILDERS[name]()
    randomize_batchnorm(model, gen)
    randomize_transformer(model, gen)
    model.eval()
    x = torch.randn(*shape, generator=gen)
    with torch.no_grad():
        y = model(x)
    tmp = onnx_path + ".tmp"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if name in DYNAMIC_BATCH else None
        torch.onnx.export(model, x, tmp, opset_version=OPSET, input_names=["input"], output_names=["output"],
                          do_constant_folding=True, dynamic_axes=dynamic)
    np.save(input_path + ".tmp.npy", x.numpy().astype(np.float32))
    np.save(expected_path + ".tmp.npy", y.numpy().astype(np.float32))
    os.replace(input_path + ".tmp.npy", input_path)
    os.replace(expected_path + ".tmp.npy", expected_path)
    os.replace(tmp, onnx_path)  # last: its presence marks the model complete
    return y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--bert", action="store_true", help="also export bert_encoder (~340 MB)")
    ap.add_argument("--big", action="store_true", help="also export big_mlp (~100 MB)")
    ap.add_argument("--only", help="comma-separated model names (overrides the default list)")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(DEFAULT)
    names += (["bert_encoder"] if args.bert else []) + (["big_mlp"] if args.big else [])
    for n in names:
        if n not in BUILDERS:
            sys.exit(f"unknown model '{n}' (known: {', '.join(BUILDERS)})")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for name in names:
        paths = files_of(args.out_dir, name)
        if all(os.path.exists(p) for p in paths):
            print(f"{name}: present, skipped")
            continue
        t0 = time.time()
        y = export(name, args.out_dir)
        size = os.path.getsize(paths[0])
        print(f"{name}: {size / 1e6:.1f} MB, output {list(y.shape)} "
              f"(|y| max {y.abs().max().item():.3g}), {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
