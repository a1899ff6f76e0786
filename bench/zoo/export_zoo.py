#!/usr/bin/env python3
"""Exports kiln's model zoo (issue 11, item 1): ONNX files plus one random input per graph input.

    python3 bench/zoo/export_zoo.py [--out bench/.zoo] [--tier suite|full] [--families F,...]
                                    [--only NAME,...] [--max-params N] [--retry-failed] [--list]

Run it with any python3: it runs two stages itself, each in the interpreter
that has what it needs:
  torch stage  Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14, onnx
               1.12): the torchvision models, the U-Net, the LSTM/GRU/RNN
               models, the If and Loop models (torch.jit.script, then
               torch.onnx.export), and ResNet-50 and the bench BERT encoder
               through tests/models/export_models.py (imported, not copied);
  venv stage   bench/.venv's python (made by scripts/python-venv.sh:
               onnxruntime, onnx, numpy from pip): QDQ and QOperator int8 (static,
               onnxruntime.quantization.quantize_static, calibrated on 4
               random inputs of the model's distribution) and dynamic int8
               (quantize_dynamic) versions, the weight-only int8 model
               (int8 initializers through DequantizeLinear), the NHWC graph
               (onnx.helper, a Transpose pair around each Conv as tf2onnx
               emits them) and the light_* models the onnx wheel ships under
               onnx/backend/test/data/light (copied; their weights are
               ConstantOfShape fills).

For each model NAME it writes NAME.onnx, NAME.in<i>.npy for the i-th graph
input (NAME.input.npy for the export_models.py models) and NAME.meta.json;
at the end OUT/manifest.json lists every exported model (name, family, tiers,
file, inputs with name/file/shape/dtype, output names, source, opset, size in
bytes, parameters) and every model that failed to export (with the error). Models
already exported are skipped; a model that does not export is logged,
recorded as NAME.failed.json and skipped on later runs (--retry-failed
tries again), never fatal. Weights are random with a fixed seed per model
(zlib.crc32 of its name), BatchNorm statistics randomized as export_models.py
does, all-zero weight matrices (vit_*'s head) drawn at random and the
detection models' class heads spread (std sqrt(2/fan_in): torchvision's
0.01 ties nearly every score); inputs are random with fixed seeds in realistic ranges: images uniform
in [0, 1] then ImageNet-normalized (detection models and RAFT take [0, 1] and
[-1, 1] images, as torchvision's transforms give them), sequences N(0, 1),
token ids in [0, vocab).

Tiers:
  suite  small, for tests/zoo/check_zoo.py (the ctest zoo.cpu; export plus
         check stays within a few minutes on 2 cores): mobilenet_v3_small and
         shufflenet_v2_x0_5 at 96x96, ssdlite320_mobilenet_v3_large on a
         160x160 image, lraspp_mobilenet_v3_large at 128x128, mc3_18 on 4
         frames of 56x56, raft_small on 128x128 (opset 16), the U-Net, the
         LSTM/GRU/RNN models, the If and Loop models, the weight-only int8
         model, the NHWC model, five light_* models (alexnet, inception_v1,
         resnet50, shufflenet, squeezenet), and small_cnn
         (export_models.py) quantized static QDQ and transformer_encoder
         quantized dynamically, both also static in QOperator format
         (QLinearConv, QLinearMatMul);
  full   every torchvision classification, detection, segmentation, video
         and optical-flow model (torchvision.models.list_models) at realistic
         sizes (224x224, inception_v3 299, efficientnet_b0..b7 and v2 at
         their eval sizes, detection on a 480x640 image, segmentation
         520x520, video 16 frames of 112x112 (s3d, mvit 224x224), RAFT
         368x496), ResNet-50 and the bench BERT encoder (export_models.py)
         with their static QDQ and dynamic int8 versions, ResNet-50 in QOperator format, all nine light_*
         models, plus the custom models of the suite tier. --max-params (default for full:
         500e6) skips the few models whose ONNX file would pass protobuf's
         2 GiB (vit_h_14, regnet_y_128gf).
--families (classification, detection, segmentation, video, optical_flow,
sequence, control_flow, unet, quantized, nhwc, light) and --only narrow a tier.
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEBIAN_PY = "/usr/bin/python3"
VENV_SCRIPT = os.path.join(ROOT, "scripts", "python-venv.sh")
EXPORT_MODELS_DIR = os.path.join(ROOT, "tests", "models")
DEFAULT_OUT = os.path.join(ROOT, "bench", ".zoo")
FULL_MAX_PARAMS = 500e6  # a model of more would pass protobuf's 2 GiB as float32 (vit_h_14, regnet_y_128gf)

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

# ---- the model list ----------------------------------------------------------------------
# Each entry: name, family, stage ("torch" or "venv"), tiers, kind (how it is built) and its
# arguments. The torchvision part of the full tier is filled in by torchvision_entries().

EFFICIENTNET_SIZE = {"efficientnet_b0": 224, "efficientnet_b1": 240, "efficientnet_b2": 288, "efficientnet_b3": 300,
                     "efficientnet_b4": 380, "efficientnet_b5": 456, "efficientnet_b6": 528,
                     "efficientnet_b7": 600, "efficientnet_v2_s": 384, "efficientnet_v2_m": 480,
                     "efficientnet_v2_l": 480}
LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]
# The suite tier's light models: LRN, channel shuffle, fire modules, a ResNet; the others (densenet121,
# inception_v2, vgg19, zfnet512) add run time more than ops (5-35 s each on kiln on 2 busy cores).
LIGHT_SUITE = ["light_bvlc_alexnet", "light_inception_v1", "light_resnet50", "light_shufflenet", "light_squeezenet"]


def E(name, family, stage, tiers, kind, **kw):
    return dict(name=name, family=family, stage=stage, tiers=tiers, kind=kind, **kw)


BOTH = ["suite", "full"]
FIXED_ENTRIES = [
    # suite: one or two small torchvision models per family at reduced input sizes
    E("mobilenet_v3_small_in96", "classification", "torch", ["suite"], "tv", arch="mobilenet_v3_small", hw=96),
    E("shufflenet_v2_x0_5_in96", "classification", "torch", ["suite"], "tv", arch="shufflenet_v2_x0_5", hw=96),
    E("ssdlite320_mobilenet_v3_large_in160", "detection", "torch", ["suite"], "tv",
      arch="ssdlite320_mobilenet_v3_large", hw=160),
    E("lraspp_mobilenet_v3_large_in128", "segmentation", "torch", ["suite"], "tv", arch="lraspp_mobilenet_v3_large",
      hw=128),
    E("mc3_18_4x56", "video", "torch", ["suite"], "tv", arch="mc3_18", frames=4, hw=56),
    E("raft_small_in128", "optical_flow", "torch", ["suite"], "tv", arch="raft_small", hw=128),
    # custom models, both tiers
    E("unet", "unet", "torch", BOTH, "unet"),
    E("lstm_bidir", "sequence", "torch", BOTH, "rnn", cell="LSTM"),
    E("gru", "sequence", "torch", BOTH, "rnn", cell="GRU"),
    E("rnn_tanh", "sequence", "torch", BOTH, "rnn", cell="RNN"),
    E("if_branch", "control_flow", "torch", BOTH, "if_branch"),
    E("greedy_loop", "control_flow", "torch", BOTH, "greedy_loop"),
    # export_models.py models (the bases of the quantized ones)
    E("small_cnn", "classification", "torch", ["suite"], "export_models"),
    E("transformer_encoder", "sequence", "torch", ["suite"], "export_models"),
    E("resnet50", "classification", "torch", ["full"], "export_models"),
    E("bert_encoder", "sequence", "torch", ["full"], "export_models"),
    # venv stage
    E("small_cnn_qdq", "quantized", "venv", ["suite"], "qdq", base="small_cnn"),
    E("transformer_encoder_int8_dynamic", "quantized", "venv", ["suite"], "dynamic", base="transformer_encoder"),
    # QOperator format (QLinearConv, QLinearMatMul between QuantizeLinear/DequantizeLinear), as TFLite-style
    # converters and ORT's quantizer in that mode ship them
    E("small_cnn_qop", "quantized", "venv", ["suite"], "qop", base="small_cnn"),
    E("transformer_encoder_qop", "quantized", "venv", ["suite"], "qop", base="transformer_encoder"),
    E("resnet50_qop", "quantized", "venv", ["full"], "qop", base="resnet50"),
    E("resnet50_qdq", "quantized", "venv", ["full"], "qdq", base="resnet50"),
    E("resnet50_int8_dynamic", "quantized", "venv", ["full"], "dynamic", base="resnet50"),
    E("bert_encoder_qdq", "quantized", "venv", ["full"], "qdq", base="bert_encoder"),
    E("bert_encoder_int8_dynamic", "quantized", "venv", ["full"], "dynamic", base="bert_encoder"),
    E("weight_only_int8", "quantized", "venv", BOTH, "weight_only_int8"),
    # half precision as people ship it for inference: every float (weights, inputs, outputs) in f16
    E("small_cnn_f16", "half", "venv", ["suite"], "f16", base="small_cnn"),
    E("transformer_encoder_f16", "half", "venv", ["suite"], "f16", base="transformer_encoder"),
    E("resnet50_f16", "half", "venv", ["full"], "f16", base="resnet50"),
    E("bert_encoder_f16", "half", "venv", ["full"], "f16", base="bert_encoder"),
    E("nhwc_tf", "nhwc", "venv", BOTH, "nhwc"),
] + [E(n, "light", "venv", BOTH if n in LIGHT_SUITE else ["full"], "light") for n in LIGHT]

TV_FAMILIES = {"classification": "", "detection": "detection", "segmentation": "segmentation", "video": "video",
               "optical_flow": "optical_flow"}


def torchvision_entries():
    """The full tier's torchvision models, listed by this interpreter's torchvision or Debian's."""
    code = ("import json, torchvision.models as tvm; print(json.dumps({fam: tvm.list_models(module=getattr(tvm, mod) "
            f"if mod else tvm) for fam, mod in {TV_FAMILIES!r}.items()}}))")
    try:
        import torchvision
        py = sys.executable if torchvision else DEBIAN_PY
    except ImportError:
        py = DEBIAN_PY
    try:
        names = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout)
    except (OSError, subprocess.CalledProcessError, ValueError) as ex:
        log(f"export_zoo: cannot list torchvision's models with {py} ({ex}); no torchvision models")
        return []
    out = []
    for fam, archs in names.items():
        for arch in archs:
            if arch in ("resnet50",):  # exported through export_models.py (the bench's ResNet-50)
                continue
            kw = {}
            if fam == "classification":
                kw["hw"] = 299 if arch == "inception_v3" else EFFICIENTNET_SIZE.get(arch, 224)
            elif fam == "detection":
                kw["hw"] = (480, 640)
            elif fam == "segmentation":
                kw["hw"] = 520
            elif fam == "video":
                kw["frames"], kw["hw"] = 16, (224 if arch.startswith(("s3d", "mvit")) else 112)
            else:
                kw["hw"] = (368, 496)
            out.append(E(arch, fam, "torch", ["full"], "tv", arch=arch, **kw))
    return out


def all_entries():
    return FIXED_ENTRIES + torchvision_entries()


def select(entries, args):
    tier = args.tier
    sel = [e for e in entries if tier in e["tiers"]]
    if args.families:
        fams = set(args.families.split(","))
        sel = [e for e in sel if e["family"] in fams]
    if args.only:
        names = args.only.split(",")
        byname = {e["name"]: e for e in entries}
        unknown = [n for n in names if n not in byname]
        if unknown:
            sys.exit(f"export_zoo: unknown model(s) {', '.join(unknown)} (see --list)")
        sel = [byname[n] for n in names]
    # quantized models need their base model in the same run (exported first, stage torch)
    names = {e["name"] for e in sel}
    byname = {e["name"]: e for e in entries}
    for e in list(sel):
        if e.get("base") and e["base"] not in names:
            sel.insert(0, byname[e["base"]])
            names.add(e["base"])
    return sel


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def seed_of(name):
    return zlib.crc32(name.encode())


def meta_path(out, name):
    return os.path.join(out, name + ".meta.json")


def failed_path(out, name):
    return os.path.join(out, name + ".failed.json")


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def onnx_facts(path):
    """(parameters, opset, output names) of an ONNX file."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    n = 0
    for t in m.graph.initializer:
        k = 1
        for d in t.dims:
            k *= d
        n += k
    return (n, max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=None),
            [o.name for o in m.graph.output])


def finish(out, e, inputs, source, extra=None):
    """Writes NAME.meta.json for an exported model: inputs is a list of (name, file, array)."""
    path = os.path.join(out, e["name"] + ".onnx")
    params, opset, outputs = onnx_facts(path)
    meta = {"name": e["name"], "family": e["family"], "tiers": e["tiers"], "file": e["name"] + ".onnx",
            "inputs": [{"name": n, "file": f, "shape": list(a.shape), "dtype": str(a.dtype)} for n, f, a in inputs],
            "outputs": outputs, "source": source, "opset": opset, "size_bytes": os.path.getsize(path), "params": params}
    meta.update(extra or {})
    write_json(meta_path(out, e["name"]), meta)
    if os.path.exists(failed_path(out, e["name"])):
        os.remove(failed_path(out, e["name"]))
    return meta


def save_inputs(out, name, arrays):
    import numpy as np
    res = []
    for i, (iname, a) in enumerate(arrays):
        f = f"{name}.in{i}.npy"
        np.save(os.path.join(out, f), a)
        res.append((iname, f, a))
    return res


# ---- torch stage (Debian's /usr/bin/python3) ------------------------------------------------

def image(gen, shape, kind="imagenet"):
    import torch
    x = torch.rand(*shape, generator=gen)
    if kind == "imagenet":
        c = [1] * len(shape)
        c[-3 if len(shape) != 5 else 1] = 3
        mean = torch.tensor(IMAGENET_MEAN).view(*c)
        std = torch.tensor(IMAGENET_STD).view(*c)
        x = (x - mean) / std
    elif kind == "pm1":
        x = x * 2 - 1
    return x


def build_tv(e, gen):
    """A torchvision model (weights=None) and its example inputs."""
    import torch
    import torchvision.models as tvm
    from torch import nn
    fam, arch = e["family"], e["arch"]
    mod = tvm if fam == "classification" else getattr(tvm, TV_FAMILIES[fam])
    kw = {"weights": None}
    if fam == "classification" and arch in ("inception_v3", "googlenet"):
        kw["aux_logits"] = False
        kw["init_weights"] = True
    if fam == "segmentation":
        kw["weights_backbone"] = None
    if fam == "detection":
        kw["weights_backbone"] = None
    model = getattr(mod, arch)(**kw)
    hw = e["hw"] if isinstance(e["hw"], (tuple, list)) else (e["hw"], e["hw"])

    class Flat(nn.Module):
        """Dict outputs as a tuple (segmentation); the last of RAFT's per-iteration flows."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *xs):
            y = self.m(*xs)
            if isinstance(y, dict):
                return tuple(y.values())
            if isinstance(y, list):
                return y[-1]
            return y

    with torch.no_grad():  # zero-initialized layers (vit_*'s head) would make every output equal its bias
        for p in model.parameters():
            if p.dim() > 1 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p[0].numel()) ** 0.5)
    if fam == "detection":
        # torchvision starts the class heads at std 0.01: near-uniform class scores, so most detections tie
        # and which tied ones survive NMS and the top-k cut is each runtime's choice. Spread them.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if any(k in pname for k in ("classification_head", "cls_score", "cls_logits")) and p.dim() > 1:
                    fan_in = p[0].numel()
                    p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
        x = image(gen, (3,) + hw, kind="01")
        # The outputs are the result dict's values in its order, which differs by family (R-CNNs: boxes,
        # labels, scores, then masks or keypoints; SSD, RetinaNet, FCOS: boxes, scores, labels).
        model.eval()
        with torch.no_grad():
            names = list(model([x])[0].keys())
        return model, ([x],), ["image"], names, 13
    if fam == "optical_flow":
        a, b = image(gen, (1, 3) + hw, "pm1"), image(gen, (1, 3) + hw, "pm1")
        return Flat(model), (a, b), ["image1", "image2"], ["flow"], 16
    if fam == "video":
        x = image(gen, (1, 3, e["frames"]) + hw)
        return model, (x,), ["input"], ["output"], 13
    if fam == "segmentation":
        x = image(gen, (1, 3) + hw)
        names = ["out", "aux"] if getattr(model, "aux_classifier", None) is not None else ["out"]
        return Flat(model), (x,), ["input"], names, 13
    x = image(gen, (1, 3) + hw)
    return model, (x,), ["input"], ["output"], 13


def build_unet(e, gen):
    """A small U-Net: ConvTranspose2d upsampling, nn.Upsample (bilinear), F.interpolate (nearest)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3, self.mid = block(3, 16), block(16, 32), block(32, 64), block(64, 128)
            self.up3 = nn.ConvTranspose2d(128, 64, 2, stride=2)
            self.d3 = block(128, 64)
            self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.d2 = block(64 + 32, 32)
            self.d1 = block(32 + 16, 16)
            self.head = nn.Conv2d(16, 2, 1)

        def forward(self, x):
            s1 = self.e1(x)
            s2 = self.e2(F.max_pool2d(s1, 2))
            s3 = self.e3(F.max_pool2d(s2, 2))
            m = self.mid(F.max_pool2d(s3, 2))
            d3 = self.d3(torch.cat([self.up3(m), s3], 1))
            d2 = self.d2(torch.cat([self.up2(d3), s2], 1))
            d1 = self.d1(torch.cat([F.interpolate(d2, scale_factor=2.0, mode="nearest"), s1], 1))
            return self.head(d1)

    return UNet(), (image(gen, (1, 3, 128, 128)),), ["input"], ["output"], 13


def build_rnn(e, gen):
    import torch
    from torch import nn
    cell = e["cell"]

    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            if cell == "LSTM":
                self.rnn = nn.LSTM(64, 128, num_layers=2, batch_first=True, bidirectional=True)
            elif cell == "GRU":
                self.rnn = nn.GRU(64, 128, num_layers=2, batch_first=True)
            else:
                self.rnn = nn.RNN(64, 128, nonlinearity="tanh", batch_first=True)
            self.head = nn.Linear(256 if cell == "LSTM" else 128, 10)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y)

    return Seq(), (torch.randn(1, 32, 64, generator=gen),), ["input"], ["output"], 13


def build_if_branch(e, gen):
    """A data-dependent branch (torch.jit.script: `if x.sum() > 0`), exported as an ONNX If."""
    import torch
    from torch import nn

    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
            self.b = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 16))

        def forward(self, x):
            if x.sum() > 0:
                y = self.a(x)
            else:
                y = self.b(x) * 2.0
            return y

    x = torch.randn(4, 64, generator=gen)
    if x.sum() <= 0:
        x = -x  # the recorded input takes the first branch; tests can flip its sign for the other
    return torch.jit.script(Branch()), (x,), ["input"], ["output"], 13


def build_greedy_loop(e, gen):
    """Greedy decoding: a scripted while loop that stops at the end token or after 16 steps (an ONNX Loop)."""
    import torch
    from torch import nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 32)
            self.wx = nn.Linear(32, 32)  # an Elman cell: torch 1.13 cannot export aten::gru_cell
            self.wh = nn.Linear(32, 32)
            self.out = nn.Linear(32, 16)
            self.eos = 0
            self.max_len = 16

        def forward(self, h, tok):
            toks = tok
            i = 0
            go = True
            while go and i < self.max_len:
                h = torch.tanh(self.wx(self.emb(tok)) + self.wh(h))
                tok = self.out(h).argmax(dim=1)
                toks = torch.cat([toks, tok], 0)
                go = bool(tok[0] != self.eos)
                i += 1
            return toks, h

    h = torch.randn(1, 32, generator=gen)
    tok = torch.randint(1, 16, (1,), generator=gen)
    return torch.jit.script(Decoder()), (h, tok), ["hidden", "token"], ["tokens", "hidden_out"], 13


TORCH_BUILDERS = {"tv": build_tv, "unet": build_unet, "rnn": build_rnn, "if_branch": build_if_branch,
                  "greedy_loop": build_greedy_loop}


def export_torch(e, out):
    import numpy as np
    import torch
    name = e["name"]
    if e["kind"] == "export_models":
        sys.path.insert(0, EXPORT_MODELS_DIR)
        import export_models
        export_models.export(name, out)
        x = np.load(os.path.join(out, name + ".input.npy"))
        return finish(out, e, [("input", name + ".input.npy", x)], "tests/models/export_models.py (torch "
                      f"{torch.__version__})")
    sys.path.insert(0, EXPORT_MODELS_DIR)
    import export_models
    import warnings
    torch.manual_seed(seed_of(name))
    gen = torch.Generator().manual_seed(seed_of(name))
    model, args, in_names, out_names, opset = TORCH_BUILDERS[e["kind"]](e, gen)
    if e["kind"] != "if_branch" and e["kind"] != "greedy_loop":
        export_models.randomize_batchnorm(model, gen)
    model.eval()
    tmp = os.path.join(out, name + ".onnx.tmp")
    # Not under torch.no_grad(): without autograd, nn.MultiheadAttention takes its fast path
    # (aten::_native_multi_head_attention), which torch 1.13 cannot export (vit_*, nn.TransformerEncoder).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, tmp, opset_version=opset, input_names=in_names, output_names=out_names,
                          do_constant_folding=True)
    flat = args[0] if e["family"] == "detection" else args
    arrays = [(n, t.numpy()) for n, t in zip(in_names, flat)]
    arrays = [(n, a.astype(np.float32) if a.dtype == np.float64 else a) for n, a in arrays]
    inputs = save_inputs(out, name, arrays)
    os.replace(tmp, os.path.join(out, name + ".onnx"))
    src = f"torchvision {e['arch']} (weights=None)" if e["kind"] == "tv" else f"bench/zoo/export_zoo.py {e['kind']}"
    import torchvision
    return finish(out, e, inputs, f"{src}; torch {torch.__version__}, torchvision {torchvision.__version__}")


# ---- venv stage (bench/.venv: onnxruntime, onnx, numpy) -----------------------------------------

class RandomReader:
    """Calibration inputs for quantize_static: 4 draws of the base model's input distribution."""

    def __init__(self, base_meta, out, n=4):
        import numpy as np
        rng = np.random.default_rng(seed_of(base_meta["name"]) + 1)
        self.items = []
        for k in range(n):
            feed = {}
            for inp in base_meta["inputs"]:
                x = np.load(os.path.join(out, inp["file"]))
                # the same scale as the recorded input, a fresh draw
                feed[inp["name"]] = (rng.standard_normal(x.shape) * x.std() + x.mean()).astype(x.dtype)
            self.items.append(feed)
        self.items[0] = {i["name"]: np.load(os.path.join(out, i["file"])) for i in base_meta["inputs"]}
        self.it = iter(self.items)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.items)


def base_meta(out, base):
    path = meta_path(out, base)
    if not os.path.exists(path):
        raise RuntimeError(f"base model {base} was not exported")
    with open(path) as f:
        return json.load(f)


def export_quantized(e, out):
    """Static QDQ, static QOperator or dynamic int8 version of an exported model. The dynamic one uses reduce_range (weights in
    [-64, 63]) as ORT's documentation asks on x86 without VNNI: there ORT's MatMulInteger (u8 x s8 through
    vpmaddubsw) saturates pair sums past int16 and no longer computes what the graph says (seen on this AVX2
    machine: transformer_encoder_int8_dynamic off by 0.49 where onnx.reference and kiln agree)."""
    import numpy as np
    import onnxruntime
    from onnxruntime import quantization as q
    bm = base_meta(out, e["base"])
    src = os.path.join(out, bm["file"])
    dst = os.path.join(out, e["name"] + ".onnx")
    tmp = dst + ".tmp.onnx"
    if e["kind"] == "qdq":
        q.quantize_static(src, tmp, RandomReader(bm, out), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8)
        how = "quantize_static QDQ, per-channel, int8 activations and weights, 4 random calibration inputs"
    elif e["kind"] == "qop":
        # Conv and MatMul only: for the other ops (Add, pools, Gemm) QOperator mode writes com.microsoft
        # contrib ops (QLinearAdd, QGemm...), which are not ONNX
        q.quantize_static(src, tmp, RandomReader(bm, out), quant_format=q.QuantFormat.QOperator, per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          op_types_to_quantize=["Conv", "MatMul"])
        how = ("quantize_static QOperator (QLinearConv, QLinearMatMul), Conv and MatMul only, per-channel int8 "
               "weights, uint8 activations, 4 random calibration inputs")
    else:
        q.quantize_dynamic(src, tmp, weight_type=q.QuantType.QInt8, reduce_range=True)
        how = "quantize_dynamic, int8 weights, reduce_range (7-bit: see export_quantized)"
    for f in glob.glob(os.path.join(out, "*-inferred.onnx")) + glob.glob(os.path.join(out, "augmented_model*.onnx")):
        os.remove(f)
    arrays = [(i["name"], np.load(os.path.join(out, i["file"]))) for i in bm["inputs"]]
    inputs = save_inputs(out, e["name"], arrays)
    os.replace(tmp, dst)
    return finish(out, e, inputs, f"onnxruntime {onnxruntime.__version__} quantization of {e['base']}: {how}")


def export_weight_only_int8(e, out):
    """Conv + MLP whose weights are int8 initializers dequantized (DequantizeLinear) at run time."""
    import numpy as np
    import onnx
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(seed_of(e["name"]))
    inits, nodes = [], []

    def dq_weight(name, w, axis):
        """int8 per-channel (axis) or per-tensor (axis None) symmetric quantization of w."""
        if axis is None:
            scale = np.array(np.abs(w).max() / 127, np.float32)
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            scale = (np.abs(w).max(axis=red) / 127).astype(np.float32)
        shp = [1] * w.ndim
        if axis is not None:
            shp[axis] = -1
        qw = np.clip(np.round(w / scale.reshape(shp) if axis is not None else w / scale), -127, 127).astype(np.int8)
        zp = np.zeros(scale.shape, np.int8)
        inits.extend([nh.from_array(qw, name + "_q"), nh.from_array(scale, name + "_scale"),
                      nh.from_array(zp, name + "_zp")])
        attrs = {"axis": axis} if axis is not None else {}
        nodes.append(h.make_node("DequantizeLinear", [name + "_q", name + "_scale", name + "_zp"], [name],
                                 name="dq_" + name, **attrs))

    dq_weight("conv_w", rng.standard_normal((32, 3, 3, 3)).astype(np.float32) * 0.2, 0)
    inits.append(nh.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "conv_b"))
    dq_weight("fc1_w", rng.standard_normal((32, 256)).astype(np.float32) * 0.2, 1)
    inits.append(nh.from_array((rng.standard_normal(256) * 0.1).astype(np.float32), "fc1_b"))
    dq_weight("fc2_w", rng.standard_normal((256, 10)).astype(np.float32) * 0.1, None)
    nodes += [
        h.make_node("Conv", ["input", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        h.make_node("Flatten", ["g"], ["f"], name="flatten"),
        h.make_node("MatMul", ["f", "fc1_w"], ["m1"], name="fc1"),
        h.make_node("Add", ["m1", "fc1_b"], ["a1"], name="fc1_bias"),
        h.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        h.make_node("MatMul", ["r1", "fc2_w"], ["output"], name="fc2"),
    ]
    g = h.make_graph(nodes, "weight_only_int8", [h.make_tensor_value_info("input", TP.FLOAT, [1, 3, 32, 32])],
                     [h.make_tensor_value_info("output", TP.FLOAT, [1, 10])], inits)
    # IR 8 is what opsets 13-14 need; the onnx library would stamp its newest, which older runtimes refuse
    # (ONNX Runtime 1.30: "Unsupported model IR version: 14").
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], producer_name="kiln export_zoo", ir_version=8)
    onnx.checker.check_model(m)
    x = ((rng.random((1, 3, 32, 32), np.float32) - np.array(IMAGENET_MEAN, np.float32).reshape(1, 3, 1, 1))
         / np.array(IMAGENET_STD, np.float32).reshape(1, 3, 1, 1)).astype(np.float32)
    onnx.save(m, os.path.join(out, e["name"] + ".onnx"))
    return finish(out, e, save_inputs(out, e["name"], [("input", x)]),
                  f"bench/zoo/export_zoo.py onnx.helper (onnx {onnx.__version__})")


def export_nhwc(e, out):
    """An NHWC graph as tf2onnx writes a Keras model: Transpose NHWC->NCHW before each Conv and back after,
    HardSwish and HardSigmoid (squeeze-excite) blocks in NHWC between them, a mean over H, W and a dense head."""
    import numpy as np
    import onnx
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(seed_of(e["name"]))
    inits, nodes = [], []
    cur, c_in = "input", 3

    def const(name, a):
        inits.append(nh.from_array(np.asarray(a), name))
        return name

    for i, (c_out, k, stride, group) in enumerate([(16, 3, 2, 1), (16, 3, 1, 16), (32, 1, 1, 1), (32, 3, 2, 32),
                                                   (48, 1, 1, 1)]):
        p = f"b{i}"
        w = const(p + "_w", (rng.standard_normal((c_out, c_in // group, k, k)) * (2 / (c_in // group * k * k)) ** 0.5)
                  .astype(np.float32))
        b = const(p + "_b", (rng.standard_normal(c_out) * 0.1).astype(np.float32))
        nodes += [
            h.make_node("Transpose", [cur], [p + "_nchw"], perm=[0, 3, 1, 2], name=p + "_to_nchw"),
            h.make_node("Conv", [p + "_nchw", w, b], [p + "_conv"], kernel_shape=[k, k], strides=[stride, stride],
                        pads=[k // 2] * 4, group=group, name=p + "_conv"),
            h.make_node("Transpose", [p + "_conv"], [p + "_nhwc"], perm=[0, 2, 3, 1], name=p + "_to_nhwc"),
        ]
        if i % 2 == 0:
            nodes.append(h.make_node("HardSwish", [p + "_nhwc"], [p + "_out"], name=p + "_hswish"))
        else:  # squeeze-excite: mean over H, W, dense, HardSigmoid gate
            sw = const(p + "_se_w", (rng.standard_normal((c_out, c_out)) * 0.2).astype(np.float32))
            nodes += [
                h.make_node("Relu", [p + "_nhwc"], [p + "_act"], name=p + "_relu"),
                h.make_node("ReduceMean", [p + "_act"], [p + "_pool"], axes=[1, 2], keepdims=1, name=p + "_pool"),
                h.make_node("MatMul", [p + "_pool", sw], [p + "_se"], name=p + "_se"),
                h.make_node("HardSigmoid", [p + "_se"], [p + "_gate"], alpha=1 / 6, beta=0.5, name=p + "_hsig"),
                h.make_node("Mul", [p + "_act", p + "_gate"], [p + "_out"], name=p + "_scale"),
            ]
        cur, c_in = p + "_out", c_out
    hw_ = const("head_w", (rng.standard_normal((c_in, 10)) * 0.2).astype(np.float32))
    hb = const("head_b", (rng.standard_normal(10) * 0.1).astype(np.float32))
    nodes += [h.make_node("ReduceMean", [cur], ["pooled"], axes=[1, 2], keepdims=0, name="gap"),
              h.make_node("MatMul", ["pooled", hw_], ["logits"], name="head"),
              h.make_node("Add", ["logits", hb], ["output"], name="head_bias")]
    g = h.make_graph(nodes, "nhwc_tf", [h.make_tensor_value_info("input", TP.FLOAT, [1, 96, 96, 3])],
                     [h.make_tensor_value_info("output", TP.FLOAT, [1, 10])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], producer_name="kiln export_zoo (tf2onnx-style)",
                     ir_version=8)  # as weight_only_int8
    onnx.checker.check_model(m)
    x = (rng.random((1, 96, 96, 3), np.float32) * 2 - 1).astype(np.float32)  # Keras MobileNet scaling
    onnx.save(m, os.path.join(out, e["name"] + ".onnx"))
    return finish(out, e, save_inputs(out, e["name"], [("input", x)]),
                  f"bench/zoo/export_zoo.py onnx.helper (onnx {onnx.__version__})")


def export_light(e, out):
    import numpy as np
    import onnx
    src = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", e["name"] + ".onnx")
    if not os.path.exists(src):
        raise RuntimeError(f"onnx {onnx.__version__} does not ship {src}")
    m = onnx.load(src)
    init = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(seed_of(e["name"]))
    arrays = []
    for i in m.graph.input:
        if i.name in init:
            continue
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        x = (rng.random(shape, np.float32) - 0.5) / 0.25  # ImageNet-normalized scale
        arrays.append((i.name, x.astype(np.float32)))
    shutil.copyfile(src, os.path.join(out, e["name"] + ".onnx"))
    return finish(out, e, save_inputs(out, e["name"], arrays),
                  f"onnx {onnx.__version__} wheel, onnx/backend/test/data/light")


def export_f16(e, out):
    """The base model with every float in f16, inputs and outputs included (onnxruntime's own converter,
    onnxruntime.transformers.float16, as its documentation converts models for fp16 inference)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.transformers.float16 import convert_float_to_float16
    bm = base_meta(out, e["base"])
    m = convert_float_to_float16(onnx.load(os.path.join(out, bm["file"])), keep_io_types=False)
    onnx.save(m, os.path.join(out, e["name"] + ".onnx"))
    arrays = []
    for i in bm["inputs"]:
        a = np.load(os.path.join(out, i["file"]))
        arrays.append((i["name"], a.astype(np.float16) if a.dtype == np.float32 else a))
    return finish(out, e, save_inputs(out, e["name"], arrays),
                  f"onnxruntime {onnxruntime.__version__} transformers.float16.convert_float_to_float16 of "
                  f"{e['base']} (keep_io_types=False)")


VENV_EXPORTERS = {"qdq": export_quantized, "qop": export_quantized, "dynamic": export_quantized, "weight_only_int8": export_weight_only_int8,
                  "nhwc": export_nhwc, "light": export_light, "f16": export_f16}


# ---- driver ---------------------------------------------------------------------------------

def run_stage(stage, names, out, retry_failed, max_params):
    """Exports `names` (entries of this stage) in this interpreter."""
    byname = {e["name"]: e for e in all_entries()}
    for name in names:
        e = byname[name]
        if os.path.exists(meta_path(out, name)) and os.path.exists(os.path.join(out, name + ".onnx")):
            log(f"{name}: present, skipped")
            continue
        if os.path.exists(failed_path(out, name)) and not retry_failed:
            with open(failed_path(out, name)) as f:
                log(f"{name}: failed before ({json.load(f)['error'][:200]}), skipped (--retry-failed tries again)")
            continue
        t0 = time.time()
        try:
            if stage == "torch":
                if max_params and e["kind"] == "tv":
                    n = tv_params(e)
                    if n > max_params:
                        log(f"{name}: {n / 1e6:.0f}M parameters > --max-params {max_params / 1e6:.0f}M, skipped")
                        continue
                meta = export_torch(e, out)
            else:
                meta = VENV_EXPORTERS[e["kind"]](e, out)
            log(f"{name}: {meta['size_bytes'] / 1e6:.1f} MB, opset {meta['opset']}, inputs "
                f"{[(i['name'], i['shape'], i['dtype']) for i in meta['inputs']]}, {time.time() - t0:.1f} s")
        except Exception as ex:  # noqa: BLE001 - an export failure is logged and recorded, never fatal
            msg = f"{type(ex).__name__}: {ex}".strip()
            log(f"{name}: export FAILED after {time.time() - t0:.1f} s: {msg.splitlines()[0][:300]}")
            write_json(failed_path(out, name), {"name": name, "family": e["family"], "stage": stage,
                                                "error": msg[:4000], "traceback": traceback.format_exc()[-4000:]})
            for f in glob.glob(os.path.join(out, name + ".onnx.tmp")) + glob.glob(os.path.join(out, name + "*.tmp*")):
                os.remove(f)


def tv_params(e):
    import torchvision.models as tvm
    fam = e["family"]
    mod = tvm if fam == "classification" else getattr(tvm, TV_FAMILIES[fam])
    kw = {"weights": None}
    if fam == "classification" and e["arch"] in ("inception_v3", "googlenet"):
        kw["aux_logits"], kw["init_weights"] = False, False
    if fam in ("detection", "segmentation"):
        kw["weights_backbone"] = None  # the default downloads ImageNet weights (no network here)
    m = getattr(mod, e["arch"])(**kw)
    return sum(p.numel() for p in m.parameters())


def write_manifest(out):
    models, failed = [], []
    tiers = {e["name"]: e["tiers"] for e in FIXED_ENTRIES}  # the tiers as defined now, not at export time
    for f in sorted(glob.glob(os.path.join(out, "*.meta.json"))):
        with open(f) as fh:
            m = json.load(fh)
            m["tiers"] = tiers.get(m["name"], ["full"])
            models.append(m)
    for f in sorted(glob.glob(os.path.join(out, "*.failed.json"))):
        with open(f) as fh:
            d = json.load(fh)
            failed.append({k: d[k] for k in ("name", "family", "stage", "error")})
    write_json(os.path.join(out, "manifest.json"),
               {"written": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "models": models, "failed": failed})
    return models, failed


def venv_python():
    r = subprocess.run([VENV_SCRIPT], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"export_zoo: {VENV_SCRIPT} failed: {r.stderr.strip()}")
    return os.path.join(ROOT, r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default bench/.zoo)")
    ap.add_argument("--tier", choices=["suite", "full"], default="suite")
    ap.add_argument("--families", help="comma-separated families to keep")
    ap.add_argument("--only", help="comma-separated model names (any tier; overrides --tier/--families)")
    ap.add_argument("--max-params", type=float, help="skip torchvision models with more parameters "
                    f"(default for --tier full: {FULL_MAX_PARAMS:.0e})")
    ap.add_argument("--retry-failed", action="store_true", help="retry models recorded as failed")
    ap.add_argument("--list", action="store_true", help="print the selected models and exit")
    ap.add_argument("--stage", choices=["torch", "venv"], help=argparse.SUPPRESS)
    ap.add_argument("--names", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.max_params is None and args.tier == "full" and not args.only:
        args.max_params = FULL_MAX_PARAMS
    if args.stage:  # one stage, run by the driver below in the right interpreter
        run_stage(args.stage, [n for n in args.names.split(",") if n], out, args.retry_failed, args.max_params)
        return
    entries = all_entries() if args.tier == "full" or args.only else FIXED_ENTRIES
    sel = select(entries, args)
    if args.list:
        for e in sel:
            print(f"{e['name']:40s} {e['family']:15s} {e['stage']:6s} {','.join(e['tiers'])}")
        return
    t0 = time.time()
    common = ["--out", out] + (["--retry-failed"] if args.retry_failed else []) + (
        ["--max-params", str(args.max_params)] if args.max_params else [])
    for stage, py in (("torch", DEBIAN_PY), ("venv", None)):
        names = [e["name"] for e in sel if e["stage"] == stage]
        if not names:
            continue
        if stage == "torch" and not os.path.exists(DEBIAN_PY):
            log(f"export_zoo: {DEBIAN_PY} (Debian's python with torch) is missing: skipping {', '.join(names)}")
            continue
        py = py or venv_python()
        log(f"== {stage} stage ({py}): {len(names)} model(s)")
        subprocess.run([py, os.path.abspath(__file__), "--stage", stage, "--names", ",".join(names)] + common,
                       check=True)
    models, failed = write_manifest(out)
    want = {e["name"] for e in sel}
    nfail = [f["name"] for f in failed if f["name"] in want]
    log(f"export_zoo: {len([m for m in models if m['name'] in want])} of {len(want)} selected models in {out} "
        f"({time.time() - t0:.0f} s); failed to export: {', '.join(nfail) or 'none'}")


if __name__ == "__main__":
    main()
