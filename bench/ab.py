#!/usr/bin/env python3
"""Two kiln configurations on one model, alternating: the A/B check of a
change (a build before and after, the JIT against the precompiled tier).

    python3 bench/ab.py MODEL 'A' 'B' [--rounds 5] [--iterations 50] [--threads 1] [--device cpu]

MODEL is a zoo name (its inputs from bench/.zoo/NAME.meta.json) or an
.onnx path (random inputs). A and B are space-separated settings:
`KILN=path` picks the kiln binary (default build/kiln), anything else is an
environment variable for that run (`KILN_CC=/nonexistent` hides the C
compiler, `KILN_JIT=sync` compiles everything first). Each round runs A then
B, each a fresh `kiln bench --json` process of --iterations timed runs (3
warm-ups); it prints the median of each side's per-round medians, their
ratio B/A and the rounds, so a noisy machine shows in the spread.
Runs with the first `python3` on PATH (the standard library only).
"""
import argparse
import json
import os
import statistics
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "zoo"))
import run_bench as rb  # noqa: E402  (kiln_bench: one `kiln bench --json` process)
from run_zoo import input_specs  # noqa: E402  (a zoo model's --input NAME=FILE specs)


def model_inputs(model, zoo_dir):
    """The model file and its input specs (none for an .onnx path: random inputs)."""
    if model.endswith('.onnx'):
        return model, []
    with open(os.path.join(zoo_dir, model + '.meta.json')) as f:
        meta = json.load(f)
    return os.path.join(zoo_dir, meta['file']), input_specs(zoo_dir, meta)


def run(setting, model, inputs, args):
    env = dict(os.environ)
    kiln = os.path.join(ROOT, 'build', 'kiln')
    for kv in setting.split():
        k, _, v = kv.partition('=')
        if k == 'KILN':
            kiln = v
        else:
            env[k] = v
    side = types.SimpleNamespace(kiln=kiln, warmup=3, device=args.device)
    try:
        r = rb.kiln_bench(side, model, inputs, args.threads, args.iterations, env=env, timeout=args.timeout)
    except RuntimeError as e:
        sys.exit('ab.py (%s): %s' % (setting, str(e)[-400:]))
    return r['latency_ms']['median']


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--iterations', type=int, default=50)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--device', default=None, help='kiln device (default: kiln bench\'s, cpu)')
    ap.add_argument('--timeout', type=int, default=1200)
    ap.add_argument('--zoo-dir', default=os.path.join(ROOT, 'bench', '.zoo'))
    args = ap.parse_args()
    model, inputs = model_inputs(args.model, args.zoo_dir)
    side_a, side_b = [], []
    for _ in range(args.rounds):
        side_a.append(run(args.a, model, inputs, args))
        side_b.append(run(args.b, model, inputs, args))
    ma, mb = statistics.median(side_a), statistics.median(side_b)
    print('%s, %d thread(s): A %.4f ms  B %.4f ms  B/A %.3f   (A %s | B %s)' %
          (os.path.basename(args.model), args.threads, ma, mb, mb / ma, ' '.join('%.4g' % x for x in side_a),
           ' '.join('%.4g' % x for x in side_b)))


if __name__ == '__main__':
    main()
