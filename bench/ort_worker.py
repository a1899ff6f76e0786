"""ONNX Runtime side of bench/run_bench.py, bench/zoo/run_zoo.py and tests/zoo/check_zoo.py,
run with bench/.venv's python.

    ort_worker.py MODEL.onnx --threads N [--input NAME=FILE.npy]... [--warmup W]
    ort_worker.py MODEL.onnx --threads N [--input NAME=FILE.npy]... --once [--outputs-dir DIR]

Creates one session (intra_op_num_threads=N, inter_op_num_threads=1,
ORT_ENABLE_ALL unless --opt-level, ORT_SEQUENTIAL, CPU execution provider), runs W warm-up
inferences, then serves commands on stdin, one per line, answering each with
one JSON line on stdout:

    (on start)  {"ready": true, "ort_version": ..., "load_ms": ..., "first_run_ms": ...}
    run K       {"samples_ms": [K latencies]}  (after one untimed run)
    quit        {"peak_rss_bytes": ...}   (then exits)

--once: create the session, run once, print the "ready" line and exit (a cold
start when the process is fresh: load_ms + first_run_ms); with --outputs-dir
it also writes DIR/output_<i>.npy for the i-th graph output, as `kiln run
--output-dir` does.

It lives in its own process so its peak RSS is ONNX Runtime's alone, and it
stays up between the harness's rounds so the runtimes can be interleaved.
"""
import argparse
import json
import resource
import sys
import time

import numpy as np
import onnxruntime as ort


_L = ort.GraphOptimizationLevel
OPT_LEVELS = {"disable": _L.ORT_DISABLE_ALL, "basic": _L.ORT_ENABLE_BASIC, "extended": _L.ORT_ENABLE_EXTENDED,
              "all": _L.ORT_ENABLE_ALL}


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--opt-level", choices=list(OPT_LEVELS), default="all",
                    help="graph optimization level (default all; check_zoo.py uses basic, see there)")
    ap.add_argument("--once", action="store_true", help="one run, print the ready line, exit")
    ap.add_argument("--outputs-dir", help="with --once: write output_<i>.npy here")
    args = ap.parse_args()

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = OPT_LEVELS[args.opt_level]
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Errors only: greedy_loop's declared output shape draws one warning per loop step and run
    # (VerifyOutputSizes), thousands of lines in a zoo log.
    so.log_severity_level = 3
    t0 = time.perf_counter()
    sess = ort.InferenceSession(args.model, sess_options=so, providers=["CPUExecutionProvider"])
    load_ms = (time.perf_counter() - t0) * 1e3

    feeds = {}
    for spec in args.input:
        name, _, path = spec.partition("=")
        feeds[name] = np.load(path)
    for i in sess.get_inputs():
        if i.name not in feeds:
            sys.exit(f"ort_worker: input '{i.name}' not given (--input {i.name}=FILE.npy)")

    if args.once:
        t0 = time.perf_counter()
        outs = sess.run(None, feeds)
        first_ms = (time.perf_counter() - t0) * 1e3
        if args.outputs_dir:
            for i, y in enumerate(outs):
                np.save(f"{args.outputs_dir}/output_{i}.npy", np.asarray(y))
        reply({"ready": True, "ort_version": ort.__version__, "load_ms": load_ms, "first_run_ms": first_ms,
               "outputs": [o.name for o in sess.get_outputs()]})
        return

    first_ms = None
    for k in range(args.warmup):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        if k == 0:
            first_ms = (time.perf_counter() - t0) * 1e3
    reply({"ready": True, "ort_version": ort.__version__, "load_ms": load_ms, "first_run_ms": first_ms})

    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            # One untimed run first, as each kiln process has its --warmup: the pool's threads went
            # idle while the other runtime had its turn (run_bench.py waits for them to).
            sess.run(None, feeds)
            samples = []
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                samples.append((time.perf_counter() - t0) * 1e3)
            reply({"samples_ms": samples})
        elif cmd[0] == "quit":
            break
    reply({"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


if __name__ == "__main__":
    main()
