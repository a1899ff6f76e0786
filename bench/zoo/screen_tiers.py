#!/usr/bin/env python3
"""The precompiled tier against the JIT over the whole zoo, kiln alone: a
quick screen for the models whose no-compiler latency is far from their
compiled one (run_zoo.py --no-jit measures the same ratio with ONNX Runtime
beside it, at the cost of hours over the full tier).

    python3 bench/zoo/screen_tiers.py [--kiln build/kiln] [--zoo-dir bench/.zoo] [--only A,B]
                                      [--threads 1] [--budget-ms 1500] [--json-out FILE]

Per model (every *.meta.json in --zoo-dir, or --only): `kiln bench --json`
with KILN_JIT=sync (everything compiled first), then with
KILN_CC=/nonexistent (precompiled kernels only), the same number of timed
runs (as many as fit --budget-ms at the compiled latency, 3 to 30; one
warm-up, two for the precompiled tier whose first launches build its
movement copies); medians and their ratio, the models above 1.5 listed
last. --json-out keeps the results and skips the models already in it (a
long screen resumes). Standard library only: the first `python3` on PATH.
"""
import argparse
import glob
import json
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run_bench as rb  # noqa: E402  (kiln_bench: one `kiln bench --json` process)
from run_zoo import input_specs  # noqa: E402  (a zoo model's --input NAME=FILE specs)


def bench(kiln, model, inputs, threads, warmup, iterations, env_extra):
    """The median latency, or None and the error."""
    side = types.SimpleNamespace(kiln=kiln, warmup=warmup, device=None)
    try:
        r = rb.kiln_bench(side, model, inputs, threads, iterations, env=dict(os.environ, **env_extra), timeout=1800)
    except RuntimeError as e:
        return None, str(e)[-300:]
    return r['latency_ms']['median'], None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--kiln', default=os.path.join(ROOT, 'build', 'kiln'))
    ap.add_argument('--zoo-dir', default=os.path.join(ROOT, 'bench', '.zoo'))
    ap.add_argument('--only', default='')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--budget-ms', type=float, default=1500)
    ap.add_argument('--json-out', default='')
    args = ap.parse_args()
    only = set(filter(None, args.only.split(',')))
    res = {}
    if args.json_out and os.path.exists(args.json_out):
        with open(args.json_out) as f:
            res = json.load(f)
    for mf in sorted(glob.glob(os.path.join(args.zoo_dir, '*.meta.json'))):
        with open(mf) as f:
            meta = json.load(f)
        name = meta['name']
        if (only and name not in only) or name in res:
            continue
        model, inputs = os.path.join(args.zoo_dir, meta['file']), input_specs(args.zoo_dir, meta)
        t0 = time.time()
        jit, err = bench(args.kiln, model, inputs, args.threads, 1, 3, {'KILN_JIT': 'sync'})
        if jit is None:
            res[name] = {'error': 'jit: ' + err}
            print('%-40s error (compiled): %s' % (name, err), flush=True)
            continue
        it = max(3, min(30, int(args.budget_ms / max(jit, 1e-3))))
        if it > 3:
            jit, err = bench(args.kiln, model, inputs, args.threads, 1, it, {'KILN_JIT': 'sync'})
        pre, err = bench(args.kiln, model, inputs, args.threads, 2 if it > 3 else 1, it, {'KILN_CC': '/nonexistent'})
        if jit is None or pre is None:
            res[name] = {'error': err}
            print('%-40s error: %s' % (name, err), flush=True)
            continue
        res[name] = {'jit_ms': jit, 'precompiled_ms': pre, 'ratio': pre / jit, 'runs': it}
        print('%-40s JIT %10.3f ms  precompiled %10.3f ms  ratio %.2f  (%d runs, %.0f s)' %
              (name, jit, pre, pre / jit, it, time.time() - t0), flush=True)
        if args.json_out:
            with open(args.json_out, 'w') as f:
                json.dump(res, f, indent=1)
    ratios = [v['ratio'] for v in res.values() if 'ratio' in v]
    if ratios:
        geo = 1.0
        for r in ratios:
            geo *= r ** (1.0 / len(ratios))
        print('\n%d models: precompiled / JIT geometric mean %.2f, worst %.2f' % (len(ratios), geo, max(ratios)))
        for name, v in sorted(res.items(), key=lambda kv: -kv[1].get('ratio', 0)):
            if v.get('ratio', 0) > 1.5:
                print('  above 1.5: %s %.2f' % (name, v['ratio']))
    errors = [n for n, v in res.items() if 'error' in v]
    if errors:
        print('errors: %s' % ', '.join(errors))


if __name__ == '__main__':
    main()
