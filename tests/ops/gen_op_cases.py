#!/usr/bin/python3
"""Writes extra single-node ONNX test cases for kiln's ops, laid out like the
ONNX backend test data, so kiln_conformance runs them:

    gen_op_cases.py OUTDIR [--check]

OUTDIR/dtypes/...  every op of a broad list for every dtype its schema allows
OUTDIR/attrs/...   attribute and opset variants the official data misses
                   (op18_*: ops of opsets 18-28, cases_opset18.py;
                   latest_*: opset 18-28 changes of existing ops, cases_latest.py)
OUTDIR/transformer/...  the opset 18-28 transformer-family ops on random shapes
                   (cases_transformer.py: models of opsets onnx 1.12 does not know)

Expected outputs are computed independently (numpy in float64 or exact
integer math; torch on the CPU for convolutions, pools, norms, RNNs).
Deterministic; --check also runs onnx's checker and strict shape inference
on every model (slow; for working on this generator).
Needs /usr/bin/python3 with onnx 1.12, numpy and torch."""
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # leave the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from oplib import Writer  # noqa: E402


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    if len(args) != 1:
        print(__doc__)
        return 2
    root = args[0]
    t0 = time.time()
    import torch
    torch.set_num_threads(1)
    import cases_attrs
    import cases_dtypes
    import cases_opset18
    import cases_transformer
    import cases_latest
    w = Writer(root, check='--check' in sys.argv)
    for suite in ('dtypes', 'attrs', 'transformer'):
        shutil.rmtree(os.path.join(root, suite), ignore_errors=True)
    np.seterr(all='ignore')
    cases_dtypes.gen(w, torch)
    cases_attrs.gen(w, torch)
    cases_opset18.gen(w, torch)
    cases_transformer.gen(w)
    cases_latest.gen(w, torch)
    for suite in sorted(w.names):
        print('%s: %d cases' % (suite, len(w.names[suite])))
    print('wrote %.1f MB in %.1f s' % (w.bytes / 1e6, time.time() - t0))
    return 0


if __name__ == '__main__':
    sys.exit(main())
