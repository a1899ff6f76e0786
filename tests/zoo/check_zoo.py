#!/usr/bin/python3
"""Every zoo model on kiln against ONNX Runtime's outputs on the same inputs (issue 11, item 1).

    /usr/bin/python3 tests/zoo/check_zoo.py [--kiln build/kiln] [--zoo-dir DIR] [--tier suite|full]
                                           [--device cpu] [--only NAME,...] [--timeout 300] [--no-export]
                                           [--ort-python PYTHON]

The ctest `zoo.cpu` (tests/CMakeLists.txt) runs it on the suite tier with
--zoo-dir build/zoo. It
  1. makes the venv with ONNX Runtime (scripts/python-venv.sh: bench/.venv,
     pip-installed onnxruntime, onnx, numpy; once) and exports the tier's
     models with bench/zoo/export_zoo.py into --zoo-dir (models already there
     are skipped; --no-export checks only what is there);
  2. for each model runs `kiln run MODEL --device D --input ... --output-dir`
     (time limit --timeout seconds each, fresh KILN_CACHE_DIR per run of the
     check) and ONNX Runtime (bench/ort_worker.py --once --outputs-dir: CPU
     provider, ORT_ENABLE_BASIC) on the model's recorded inputs. Basic, not
     all: ORT's extended fusions change the numbers a graph defines (e.g.
     DequantizeLinear + MatMul on constant weights becomes a matmul that
     quantizes the activations too: weight_only_int8 moves by 0.6% at
     ORT_ENABLE_ALL, by 3e-7 at basic, against float64 numpy); basic keeps
     constant folding and the semantics-preserving rewrites;
  3. compares every output: same shape; integer and bool outputs exactly;
     float outputs with |kiln - ort| <= atol + rtol * |ort| element-wise,
     where atol is scaled by the output's magnitude: atol = atol0 * max(1,
     max |ort|). Defaults rtol 1e-3, atol0 1e-4 (f32, as tests/models);
     overrides in TOLERANCE below (1e-2 for the quantized models), and for
     the int8 BERT encoders a relative L2 error <= 0.15 (REL_L2), each with
     its reason;
     Detection models' rows are matched one to one (label, box within 1% of
     the image's scale, score within 5%: DET_* below says why), the matched
     rows of their other outputs compared (1% of the elements may differ;
     not those of a box under a pixel wide or high; a row's rtol grows by
     its box's displacement over the box's shorter side, since what is
     sampled at a box moves with it),
     and a row left unmatched must be
     one a tie could have changed: at or below its class's highest tied
     score (within 1e-4 relative; random weights give many equal scores, and
     which of two tied, overlapping boxes NonMaxSuppression keeps is the
     implementation's choice, which changes the class's survivors below
     them) or the other runtime's lowest row (the detections cap); the line
     says how many rows were matched;
  4. prints one line per model (PASS, FAIL with the worst element, ERROR with
     kiln's message, KNOWN with the reason) and a summary; exits 1 on any
     FAIL or ERROR, and also when a model listed in KNOWN_FAILURES passes
     (so the list cannot go stale).

Models that did not export (export_zoo.py's *.failed.json) are printed as
NOT EXPORTED; in the suite tier that fails the check too.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPORT_ZOO = os.path.join(ROOT, "bench", "zoo", "export_zoo.py")
ORT_WORKER = os.path.join(ROOT, "bench", "ort_worker.py")
VENV_SCRIPT = os.path.join(ROOT, "scripts", "python-venv.sh")

DEFAULT_TOL = (1e-3, 1e-4)
# Detection models with random weights are chaotic below their region proposals: the proposal stage
# takes the top scores of thousands of anchors and suppresses overlaps among them, and which of two
# equal objectness scores goes first is each implementation's choice (ONNX leaves NonMaxSuppression's
# order of ties open); a different proposal moves the boxes and scores built on it. Measured on
# fasterrcnn_resnet50_fpn: ONNX Runtime at ORT_ENABLE_BASIC and at ORT_ENABLE_ALL differ by 1.2 px and
# 0.6% in a score; kiln's cpu and kiln's own reference interpreter by 1.6 px and 0.5%, and both by 5.7
# px and 3% from ORT (the same tie-breaking in both kiln devices, another in ORT). So detections match
# within 1% of the image's scale for boxes and 5% for scores, and a detection's other outputs (masks,
# keypoints) may differ in 1% of their elements.
DET_BOX_ATOL, DET_SCORE_RTOL, DET_OTHER_FRACTION = 1e-2, 5e-2, 1e-2
# name -> (rtol, atol0, why). Quantized graphs: a float computed in a
# different order can land on the other side of a quantizer's rounding
# boundary, moving that element by one quantization step, which propagates;
# 1e-2 of the output's magnitude covers a step at the logits. (The suite's two
# quantized models match ORT exactly today: max |d| 0 and 7e-7.)
TOLERANCE = {name: (1e-2, 1e-2, why) for name, why in [
    ("small_cnn_qdq", "static QDQ int8"), ("small_cnn_qop", "static QOperator int8 (QLinearConv)"),
    ("transformer_encoder_qop", "static QOperator int8 (QLinearMatMul)"),
    ("transformer_encoder_int8_dynamic", "dynamic int8"), ("resnet50_int8_dynamic", "dynamic int8")]}
# f16 models: kiln rounds every node's result to f16 as the graph says (ref does too) where ORT's CPU
# provider keeps f32 between the nodes it has no f16 kernel for; both are a few f16 ulps (2^-11 relative)
# from the f32 model, so they differ by a few of them, more after a residual sum of large values.
TOLERANCE.update({name: (1e-2, 5e-3, "f16 throughout: rounding after each node vs ORT's f32 between casts")
                  for name in ("small_cnn_f16", "transformer_encoder_f16", "resnet50_f16", "bert_encoder_f16")})
# name -> (max relative L2 error ||kiln - ort|| / ||ort||, why), instead of element-wise limits. The 12-layer
# BERT encoder with int8 activations is chaotic at its quantizers' rounding boundaries: kiln's own cpu and ref
# devices differ by 8.6% (relative L2) on bert_encoder_qdq, kiln vs ORT by 8.8%, and int8 vs the float model by
# 13.6%; element-wise limits cannot tell a wrong kernel from that. 0.15 still fails an op that computes garbage.
# ResNet-50 QDQ (50 quantized layers) is the same on a smaller scale: on an AVX-512 EPYC the logits of ref,
# ORT and kiln's AVX-512, AVX2 and portable paths (and KILN_QDQ_INTEGER=1) each differ from every other by
# 1.3-1.5% relative L2 and up to 47 at logits of magnitude 3190 (ref vs ORT too), beyond an element-wise 1e-2.
REL_L2 = {
    "resnet50_qdq": (0.05, "static QDQ int8 through 50 layers: rounding-boundary flips compound"),
    "resnet50_qop": (0.05, "static QOperator int8 through 53 QLinearConvs: rounding-boundary flips compound"),
    "bert_encoder_qdq": (0.15, "static QDQ int8 through 12 layers: rounding-boundary flips compound"),
    "bert_encoder_int8_dynamic": (0.15, "dynamic int8 through 12 layers: rounding-boundary flips compound"),
}
# name -> why. Printed on every run as KNOWN (not a silent skip); the check
# fails if one of them passes, so fixing kiln means deleting its line here.
KNOWN_FAILURES = {
}


def log(msg):
    print(msg, flush=True)


def venv_python():
    r = subprocess.run([VENV_SCRIPT], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_zoo: {VENV_SCRIPT} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return os.path.join(ROOT, r.stdout.strip().splitlines()[-1])


def input_args(zoo, meta):
    out = []
    for i in meta["inputs"]:
        out += ["--input", f"{i['name']}={os.path.join(zoo, i['file'])}"]
    return out


def run_kiln(args, zoo, meta, out_dir, env):
    cmd = [args.kiln, "run", os.path.join(zoo, meta["file"]), "--device", args.device, "--output-dir", out_dir]
    cmd += input_args(zoo, meta)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"timed out after {args.timeout} s"
    if r.returncode != 0:
        return (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1][:500]
    return None


def run_ort(args, py, zoo, meta, out_dir):
    cmd = [py, ORT_WORKER, os.path.join(zoo, meta["file"]), "--threads", "2", "--opt-level", "basic", "--once",
           "--outputs-dir", out_dir]
    cmd += input_args(zoo, meta)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return f"onnxruntime timed out after {args.timeout} s"
    if r.returncode != 0:
        return "onnxruntime: " + (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:500]
    return None


def detection_roles(outs):
    """Which outputs are the boxes ([N, 4] float), labels ([N] integer) and scores ([N] float), or None.
    By type, not name: the zoo's first exports named torchvision's (boxes, labels, scores) outputs
    boxes, scores, labels."""
    if len(outs) < 3 or outs[0].ndim != 2 or outs[0].shape[-1] != 4:
        return None
    n = outs[0].shape[0]
    labels = [i for i in (1, 2) if outs[i].shape == (n,) and outs[i].dtype.kind in "iu"]
    scores = [i for i in (1, 2) if outs[i].shape == (n,) and outs[i].dtype.kind == "f"]
    return (0, labels[0], scores[0]) if len(labels) == 1 and len(scores) == 1 else None


def detection_order(outs):
    """Row order that sorts detections by score (descending), then label and box: NonMaxSuppression and TopK
    leave the order of equal scores to the implementation, and random weights give many equal scores."""
    roles = detection_roles(outs)
    if roles is None:
        return None
    role = dict(zip(("boxes", "labels", "scores"), (outs[r] for r in roles)))
    b = np.round(role["boxes"].astype(np.float64), 2)
    keys = [b[:, j] for j in reversed(range(b.shape[1]))] + [role["labels"], -np.round(role["scores"], 5)]
    return np.lexsort(keys)


def load_outputs(d):
    outs, i = [], 0
    while os.path.exists(os.path.join(d, f"output_{i}.npy")):
        outs.append(np.load(os.path.join(d, f"output_{i}.npy")))
        i += 1
    return outs


def compare(meta, k_dir, o_dir):
    """None when every output matches, else a one-line description of the first mismatch."""
    name = meta["name"]
    rtol, atol0 = TOLERANCE.get(name, DEFAULT_TOL)[:2]
    o_outs, k_outs = load_outputs(o_dir), load_outputs(k_dir)
    if len(k_outs) < len(o_outs):
        return f"kiln wrote {len(k_outs)} outputs, ONNX Runtime {len(o_outs)}"
    note = ""
    if meta["family"] == "detection":
        ko, oo = detection_order(k_outs), detection_order(o_outs)
        if ko is not None and oo is not None:
            # NonMaxSuppression and TopK leave the order of equal scores to the implementation: of two tied
            # overlapping boxes either may survive (the number that survive may differ too: random weights
            # saturate every score of fasterrcnn_resnet50_fpn_v2 at 1.0). So the rows are matched one to one
            # (same label, box and score within DET_BOX_ATOL and DET_SCORE_RTOL), the matched rows of
            # every output compared below, and a row left unmatched on either side must be one a tie could
            # have changed (below).
            b, lab, s = detection_roles(o_outs)
            ks, os_ = k_outs[s].astype(np.float64), o_outs[s].astype(np.float64)
            kb, ob = k_outs[b].astype(np.float64), o_outs[b].astype(np.float64)
            kl, ol = k_outs[lab].astype(np.int64), o_outs[lab].astype(np.int64)
            box_tol = DET_BOX_ATOL * max(1.0, float(np.abs(ob).max()) if ob.size else 1.0)
            used = np.zeros(len(ks), bool)
            pairs = []
            for j in np.argsort(-os_, kind="stable"):
                cand = np.flatnonzero(~used & (kl == ol[j]) & (np.abs(ks - os_[j]) <= DET_SCORE_RTOL * abs(os_[j]) + 1e-7) &
                                      (np.abs(kb - ob[j]).max(axis=1, initial=0) <= box_tol))
                if cand.size:
                    i = cand[np.argmin(np.abs(kb[cand] - ob[j]).max(axis=1))]
                    used[i] = True
                    pairs.append((i, j))

            # A tie decides nothing above it: NonMaxSuppression runs per class in score order, so a tie at
            # score t in class c may change every row of c below t (which box suppressed which), and the
            # detections cap may then let in or push out rows at the bottom. A row must be matched when it
            # scores above its class's highest tie (either runtime's) and above the other runtime's lowest row.
            def top_ties(sc, lb):
                t = {}
                for r in range(len(sc)):
                    same = np.flatnonzero((lb == lb[r]) & (np.arange(len(sc)) != r))
                    if (np.abs(sc[same] - sc[r]) <= 1e-4 * abs(sc[r])).any():
                        t[lb[r]] = max(t.get(lb[r], -np.inf), sc[r])
                return t
            tk, to = top_ties(ks, kl), top_ties(os_, ol)
            floor = {"kiln": os_.min() if os_.size else np.inf, "ONNX Runtime": ks.min() if ks.size else np.inf}

            def decided(side, sc, lb, r):
                t = max(tk.get(lb[r], -np.inf), to.get(lb[r], -np.inf))
                return sc[r] > t * (1 + 1e-4) and sc[r] > floor[side] * (1 + 1e-4)
            matched_o = {j for _, j in pairs}
            for side, sc, lb, free in (("kiln", ks, kl, [i for i in range(len(ks)) if not used[i]]),
                                       ("ONNX Runtime", os_, ol, [j for j in range(len(os_)) if j not in matched_o])):
                loose = [r for r in free if decided(side, sc, lb, r)]
                if loose:
                    r = loose[0]
                    return (f"{len(loose)} detection(s) above every tie only on {side}, e.g. score {sc[r]:.6g} label "
                            f"{(kl if side == 'kiln' else ol)[r]} box {np.round((kb if side == 'kiln' else ob)[r], 2)}")
            # The other outputs (masks, keypoints) of a box under a pixel wide or high on either side are
            # not compared: clipped to the image's edge, such a box is 0.1 px on one runtime and empty on
            # the other (keypointrcnn: every keypoint score 0 in ORT's).
            def solid(bx):
                return min(bx[2] - bx[0], bx[3] - bx[1]) >= 1.0
            kept = [(i, j) for i, j in pairs if solid(kb[i]) and solid(ob[j])]
            ki = np.array([i for i, _ in kept], dtype=np.int64)
            oi = np.array([j for _, j in kept], dtype=np.int64)
            # What is sampled at a box (RoIAlign's grid, a heatmap's peak) moves with the box by its
            # displacement over the box's shorter side: keypointrcnn's 8 x 263 px box moved by 0.16 px
            # between two float32 runtimes (vulkan, ORT) and its keypoint scores by 0.26%; a 0.5 px wide
            # box moved by 0.017 px and its scores by 0.3%. So a row's relative tolerance grows by that
            # fraction (not past 1: a wrong kernel is off by more).
            row_move = np.array([min(1.0, float(np.abs(kb[i] - ob[j]).max()) /
                                     max(min(ob[j][2] - ob[j][0], ob[j][3] - ob[j][1]), 1e-6)) for i, j in kept])
            k_outs = [a[ki] if a.ndim and a.shape[0] == len(ko) else a for a in k_outs]
            o_outs = [a[oi] if a.ndim and a.shape[0] == len(oo) else a for a in o_outs]
            note = f"{len(pairs)} of {len(oo)} detections matched (the rest below a tie" + (
                f"; {len(ko)} in all on kiln" if len(ko) != len(oo) else "") + ") "
    worst = ""
    det = meta["family"] == "detection" and detection_roles(o_outs) is not None
    if not det or not note:
        row_move = None
    for i, o in enumerate(o_outs):
        k = k_outs[i]
        if det and i < 3:
            continue  # boxes, labels and scores: matched above, within DET_BOX_ATOL and DET_SCORE_RTOL
        if k.shape != o.shape:
            return f"output {i}: shape {list(k.shape)}, ONNX Runtime {list(o.shape)}"
        if o.dtype.kind in "iub":
            bad = np.flatnonzero(k.astype(np.int64).ravel() != o.astype(np.int64).ravel())
            if bad.size:
                j = bad[0]
                return (f"output {i} ({o.dtype}): {bad.size} of {o.size} differ, first at {j}: "
                        f"{k.ravel()[j]} vs {o.ravel()[j]}")
        elif name in REL_L2:
            k64, o64 = k.astype(np.float64), o.astype(np.float64)
            rel = float(np.linalg.norm(k64 - o64) / max(np.linalg.norm(o64), 1e-30))
            if not rel <= REL_L2[name][0]:
                return f"output {i}: relative L2 error {rel:.3g} > {REL_L2[name][0]:g}"
            worst += f"{' ' if worst else ''}rel L2 {rel:.2g}"
        else:
            k64, o64 = k.astype(np.float64), o.astype(np.float64)
            if np.isnan(o64).any() or np.isnan(k64).any():
                if not np.array_equal(np.isnan(k64), np.isnan(o64)):
                    return f"output {i}: NaNs in different places ({np.isnan(k64).sum()} vs {np.isnan(o64).sum()})"
            finite = ~np.isnan(o64)
            scale = max(1.0, float(np.abs(o64[finite]).max()) if finite.any() else 1.0)
            atol = atol0 * scale
            err = np.where(finite, np.abs(k64 - o64), 0.0)
            rt = rtol
            if row_move is not None and o.ndim and o.shape[0] == len(row_move):
                rt = rtol + row_move.reshape((-1,) + (1,) * (o.ndim - 1))
            lim = atol + rt * np.abs(np.where(finite, o64, 0.0))
            # A detection's masks and keypoints are resampled at its box, or the argmax of a heatmap: a
            # pixel at a mask's edge or a keypoint on a near-tie moves with a box that moved by a fraction.
            allowed = int(DET_OTHER_FRACTION * o.size) if det else 0
            if (err > lim).sum() > allowed:
                j = int(np.argmax(err - lim))
                return (f"output {i}: {(err > lim).sum()} of {o.size} beyond rtol {rtol:g}"
                        f"{' (+ its box movement per row)' if rt is not rtol else ''} atol {atol:.3g}; worst at "
                        f"{np.unravel_index(j, o.shape)}: kiln {k64.ravel()[j]:.6g}, ORT {o64.ravel()[j]:.6g}")
            if o.size:
                worst += f"{' ' if worst else ''}max|d| {err.max():.2g}"
    if not o_outs:
        return "ONNX Runtime wrote no outputs"
    return None if not worst and not note else ("", note + worst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--zoo-dir", default=os.path.join(ROOT, "bench", ".zoo"))
    ap.add_argument("--tier", choices=["suite", "full"], default="suite")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per model and runtime (default %(default)s)")
    ap.add_argument("--no-export", action="store_true", help="check the models already in --zoo-dir")
    ap.add_argument("--ort-python", help="a python3 that imports onnxruntime, instead of bench/.venv's (e.g. on a "
                                         "machine with no network for pip)")
    args = ap.parse_args()
    t_start = time.time()
    py = args.ort_python or venv_python()
    zoo = os.path.abspath(args.zoo_dir)
    if not args.no_export:
        cmd = [sys.executable, EXPORT_ZOO, "--out", zoo, "--tier", args.tier] + (["--only", args.only] if args.only
                                                                                 else [])
        log(f"check_zoo: exporting ({' '.join(cmd[1:])})")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"check_zoo: export_zoo.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(os.path.join(zoo, "manifest.json")) as f:
        manifest = json.load(f)
    if args.only:
        want = set(args.only.split(","))
    elif args.tier == "suite":  # the tier as export_zoo.py defines it now (a manifest may hold more)
        import importlib.util
        spec = importlib.util.spec_from_file_location("export_zoo", EXPORT_ZOO)
        ez = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ez)
        want = {e["name"] for e in ez.FIXED_ENTRIES if "suite" in e["tiers"]}
    else:  # full: every model the manifest lists
        want = {m["name"] for m in manifest["models"] + manifest["failed"]}
    models = [m for m in manifest["models"] if m["name"] in want]
    failed_export = [m for m in manifest["failed"] if m["name"] in want]
    log(f"check_zoo: {len(models)} models on kiln --device {args.device} vs ONNX Runtime; known failures: "
        f"{', '.join(f'{k} ({v})' for k, v in KNOWN_FAILURES.items()) or 'none'}")
    for name, (rt, at, why) in TOLERANCE.items():
        if any(m["name"] == name for m in models):
            log(f"  tolerance {name}: rtol {rt:g}, atol {at:g} x max(1, max|ORT|) ({why})")
    for name, (lim, why) in REL_L2.items():
        if any(m["name"] == name for m in models):
            log(f"  tolerance {name}: relative L2 error <= {lim:g} ({why})")
    tmp = tempfile.mkdtemp(prefix="kiln_zoo_check_")
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, "cache"))
    counts = {"PASS": 0, "FAIL": 0, "ERROR": 0, "KNOWN": 0, "FIXED": 0}
    bad = []
    try:
        for m in models:
            name = m["name"]
            kd, od = os.path.join(tmp, name, "kiln"), os.path.join(tmp, name, "ort")
            os.makedirs(kd)
            os.makedirs(od)
            t0 = time.time()
            err = run_kiln(args, zoo, m, kd, env)
            tk = time.time() - t0
            verdict, detail = None, ""
            if err is None:
                oerr = run_ort(args, py, zoo, m, od)
                if oerr:
                    verdict, detail = "ERROR", oerr
                else:
                    res = compare(m, kd, od)
                    if res is None or isinstance(res, tuple):
                        verdict, detail = "PASS", (res[1] if res else "")
                    else:
                        verdict, detail = "FAIL", res
            else:
                verdict, detail = "ERROR", "kiln: " + err
            if name in KNOWN_FAILURES:
                if verdict == "PASS":
                    verdict = "FIXED"
                    detail = f"passes but is in KNOWN_FAILURES ({KNOWN_FAILURES[name]}): delete its line"
                else:
                    verdict, detail = "KNOWN", f"{KNOWN_FAILURES[name]} [{detail}]"
            counts[verdict] += 1
            if verdict in ("FAIL", "ERROR", "FIXED"):
                bad.append(name)
            log(f"{verdict:6s} {name:40s} kiln {tk:5.1f} s  {detail}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failed_export:
        log(f"NOT EXPORTED {f['name']}: {f['error'].splitlines()[0][:300]}")
    if args.tier == "suite" and failed_export:
        bad += [f["name"] for f in failed_export]
    log(f"check_zoo: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['ERROR']} errors, "
        f"{counts['KNOWN']} known failures, {counts['FIXED']} known failures that pass, {len(failed_export)} not "
        f"exported; {time.time() - t_start:.0f} s")
    if bad:
        log(f"check_zoo: FAILED: {', '.join(bad)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
