#!/usr/bin/env python3
"""Carry a model to a machine that has no copy of it, without its weights.

    python3 bench/zoo/weights_stub.py strip  SRC.onnx DST.onnx [--min-elements 4096]
    python3 bench/zoo/weights_stub.py refill STUB.onnx OUT.onnx
    python3 bench/zoo/weights_stub.py strip-zoo ZOO_DIR DST_DIR [--only NAME,...] [--max-input-bytes N]
    python3 bench/zoo/weights_stub.py refill-zoo DST_DIR OUT_ZOO_DIR

The GPU machine lent to some sessions takes at most 64 MiB with it, while
ResNet-50 alone is 100 MB and the whole zoo 2 GB. Latency and a comparison
of two runtimes on the same file need the graph and weights of the right
scale, not the trained values, so:

- `strip` empties every initializer of at least --min-elements elements
  whose type is float, float16, int8, uint8 or int32 (in subgraphs too) and
  writes, beside DST, DST.stub.json with each one's type, shape, mean,
  standard deviation, minimum and maximum;
- `refill` writes a model whose emptied initializers hold random values with
  those statistics: from a normal distribution clipped to the original
  range (so variances stay positive), rounded for integer types, each from
  a generator seeded by the tensor's name.

`strip-zoo` does that to every model of a zoo folder (bench/zoo/export_zoo.py's
manifest.json and files; --only picks some), copies inputs of up to
--max-input-bytes and replaces larger float inputs by their statistics the
same way; `refill-zoo` makes a zoo folder check_zoo.py and run_zoo.py read.
Both runtimes then run the refilled file; its outputs are not the original
model's. Uses whichever python3 runs it (numpy and onnx needed): Debian's
/usr/bin/python3 here, the image's python3 on the GPU machine.
"""
import argparse
import json
import sys
import zlib

import numpy as np
import onnx
from onnx import numpy_helper

KINDS = {onnx.TensorProto.FLOAT: "float", onnx.TensorProto.FLOAT16: "float", onnx.TensorProto.INT8: "int",
         onnx.TensorProto.UINT8: "int", onnx.TensorProto.INT32: "int"}


def graphs(g):
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from graphs(sub)


def strip(src, dst, min_elements):
    model = onnx.load(src)
    stats = {}
    for g in graphs(model.graph):
        for t in g.initializer:
            n = int(np.prod(t.dims)) if len(t.dims) else 1
            if t.data_type not in KINDS or n < min_elements or t.data_location == onnx.TensorProto.EXTERNAL:
                continue
            a = numpy_helper.to_array(t).astype(np.float64)
            if t.name in stats:
                sys.exit(f"weights_stub: initializer name {t.name!r} appears twice; refill could not tell them apart")
            stats[t.name] = {"type": t.data_type, "shape": list(t.dims), "mean": float(a.mean()),
                             "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}
            dims, name, dtype = list(t.dims), t.name, t.data_type
            t.Clear()
            t.name, t.data_type = name, dtype
            t.dims.extend(dims)
    onnx.save(model, dst)
    with open(dst + ".stub.json", "w") as f:
        json.dump(stats, f)
    return len(stats)


def refill(stub, out):
    model = onnx.load(stub)
    with open(stub + ".stub.json") as f:
        stats = json.load(f)
    done = 0
    for g in graphs(model.graph):
        for t in g.initializer:
            s = stats.get(t.name)
            if s is None:
                continue
            dtype = onnx.helper.tensor_dtype_to_np_dtype(s["type"]) if hasattr(onnx.helper, "tensor_dtype_to_np_dtype") \
                else onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[s["type"]]
            t.CopyFrom(numpy_helper.from_array(random_like(s, s["shape"], np.dtype(dtype), t.name), t.name))
            done += 1
    if done != len(stats):
        sys.exit(f"weights_stub: {stub}: {len(stats) - done} of {len(stats)} stubbed initializers not found")
    onnx.save(model, out)
    return done


def stats_of(a):
    a = a.astype(np.float64)
    return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()), "max": float(a.max())}


def random_like(s, shape, dtype, seed_name):
    rng = np.random.default_rng(zlib.crc32(seed_name.encode()))
    if np.issubdtype(dtype, np.floating):
        return np.clip(rng.normal(s["mean"], s["std"], shape), s["min"], s["max"]).astype(dtype)
    # Integers too from the normal distribution, rounded: uniform int8 weights would be far larger than trained
    # ones, and ONNX Runtime's u8s8 kernels without VNNI (vpmaddubsw) saturate on such products.
    return np.clip(np.rint(rng.normal(s["mean"], s["std"], shape)), s["min"], s["max"]).astype(dtype)


def strip_zoo(src, dst, only, max_input_bytes):
    import os
    import shutil
    with open(os.path.join(src, "manifest.json")) as f:
        manifest = json.load(f)
    want = set(only.split(",")) if only else None
    models = [m for m in manifest["models"] if want is None or m["name"] in want]
    os.makedirs(dst, exist_ok=True)
    for m in models:
        n = strip(os.path.join(src, m["file"]), os.path.join(dst, m["file"]), 4096)
        for i in m["inputs"]:
            path = os.path.join(src, i["file"])
            if os.path.getsize(path) <= max_input_bytes:
                shutil.copyfile(path, os.path.join(dst, i["file"]))
                continue
            a = np.load(path)
            with open(os.path.join(dst, i["file"] + ".stub.json"), "w") as f:
                json.dump(dict(stats_of(a), shape=list(a.shape), dtype=str(a.dtype)), f)
        print(f"{m['name']}: {n} initializers stubbed")
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump({"written": manifest.get("written"), "models": models, "failed": []}, f, indent=1)


def refill_zoo(src, out):
    import os
    import shutil
    with open(os.path.join(src, "manifest.json")) as f:
        manifest = json.load(f)
    os.makedirs(out, exist_ok=True)
    for m in manifest["models"]:
        refill(os.path.join(src, m["file"]), os.path.join(out, m["file"]))
        for i in m["inputs"]:
            path = os.path.join(src, i["file"])
            if os.path.exists(path):
                shutil.copyfile(path, os.path.join(out, i["file"]))
            else:
                with open(path + ".stub.json") as f:
                    s = json.load(f)
                np.save(os.path.join(out, i["file"]), random_like(s, s["shape"], np.dtype(s["dtype"]), i["file"]))
    shutil.copyfile(os.path.join(src, "manifest.json"), os.path.join(out, "manifest.json"))
    print(f"{out}: {len(manifest['models'])} models refilled")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--min-elements", type=int, default=4096)
    r = sub.add_parser("refill")
    r.add_argument("stub")
    r.add_argument("out")
    sz = sub.add_parser("strip-zoo")
    sz.add_argument("zoo")
    sz.add_argument("dst")
    sz.add_argument("--only")
    sz.add_argument("--max-input-bytes", type=int, default=1 << 20)
    rz = sub.add_parser("refill-zoo")
    rz.add_argument("src")
    rz.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "strip-zoo":
        strip_zoo(args.zoo, args.dst, args.only, args.max_input_bytes)
    elif args.cmd == "refill-zoo":
        refill_zoo(args.src, args.out)
    elif args.cmd == "strip":
        print(f"{args.dst}: {strip(args.src, args.dst, args.min_elements)} initializers stubbed")
    else:
        print(f"{args.out}: {refill(args.stub, args.out)} initializers refilled")


if __name__ == "__main__":
    main()
