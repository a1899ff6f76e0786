#!/usr/bin/env python3
"""Two kiln configurations on one model, alternating: the A/B check of a
change (a build before and after, the JIT against the precompiled tier).

    python3 bench/ab.py MODEL 'A' 'B' [--rounds 5] [--iterations 50] [--threads 1]

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
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_args(model, zoo_dir):
    if model.endswith('.onnx'):
        return [model]
    with open(os.path.join(zoo_dir, model + '.meta.json')) as f:
        meta = json.load(f)
    args = [os.path.join(zoo_dir, meta['file'])]
    for i in meta['inputs']:
        args += ['--input', '%s=%s' % (i['name'], os.path.join(zoo_dir, i['file']))]
    return args


def run(setting, margs, args):
    env = dict(os.environ)
    kiln = os.path.join(ROOT, 'build', 'kiln')
    for kv in setting.split():
        k, _, v = kv.partition('=')
        if k == 'KILN':
            kiln = v
        else:
            env[k] = v
    cmd = [kiln, 'bench'] + margs + ['--threads', str(args.threads), '--iterations', str(args.iterations),
                                     '--warmup', '3', '--json']
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode:
        sys.exit('ab.py: %s failed (%s): %s' % (' '.join(cmd), setting, p.stderr.strip()[-400:]))
    return json.loads(p.stdout)['latency_ms']['median']


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--iterations', type=int, default=50)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--timeout', type=int, default=1200)
    ap.add_argument('--zoo-dir', default=os.path.join(ROOT, 'bench', '.zoo'))
    args = ap.parse_args()
    margs = model_args(args.model, args.zoo_dir)
    ra, rb = [], []
    for _ in range(args.rounds):
        ra.append(run(args.a, margs, args))
        rb.append(run(args.b, margs, args))
    ma, mb = statistics.median(ra), statistics.median(rb)
    print('%s, %d thread(s): A %.4f ms  B %.4f ms  B/A %.3f   (A %s | B %s)' %
          (os.path.basename(args.model), args.threads, ma, mb, mb / ma, ' '.join('%.4g' % x for x in ra),
           ' '.join('%.4g' % x for x in rb)))


if __name__ == '__main__':
    main()
