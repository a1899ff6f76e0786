#!/usr/bin/env python3
"""What the Python package costs over the C API (issue 14), in one process:

1. The overhead of one `InferenceSession.run` call: the same model, device
   and input timed by the C API's own loop (`kiln.bench`, i.e.
   kiln_bench_json: kiln_session_run in C, its clock around each call) and by
   a Python loop around `sess.run(None, feed)` (time.perf_counter around each
   call), alternating in rounds; it prints both medians and their difference
   (the bar: under 50 us).
2. Whether `run` releases the GIL: two sessions (1 thread each) in two Python
   threads against the same work done by one thread after the other. With
   the GIL held the pair takes twice as long; released, about as long as one
   (on a machine with 2 free cores).

    PYTHONPATH=python KILN_LIBRARY=build/libkiln.so python3 bench/python/run_python_overhead.py
        [--model examples/models/shapes.onnx] [--input image=examples/models/sample_circle.npy]
        [--device cpu] [--iterations 2000] [--rounds 5]
        [--gil-model build/models/mobilenet_v2.onnx] [--gil-runs 40]

Runs with any python that has numpy and the kiln package on its path
(Debian's /usr/bin/python3 or bench/.venv's). Sets KILN_JIT=sync, as
`kiln bench` does, so both sides time compiled kernels.
"""
import argparse
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("KILN_JIT", "sync")
import numpy as np  # noqa: E402

import kiln  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def feed_of(sess, specs, rng):
    feed = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        feed[name] = np.load(path)
    for i in sess.get_inputs():
        if i.name not in feed:
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def python_median_us(sess, feed, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def overhead(args):
    rng = np.random.default_rng(0)
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = kiln.InferenceSession(args.model, opts, providers=[args.device])
    feed = feed_of(sess, args.input, rng)
    for _ in range(50):
        sess.run(None, feed)
    c_med, py_med = [], []
    for _ in range(args.rounds):
        r = kiln.bench(args.model, device=args.device, inputs=feed, warmup=20, iterations=args.iterations, threads=1)
        c_med.append(r["median_ms"] * 1e3)
        py_med.append(python_median_us(sess, feed, args.iterations))
    c, p = statistics.median(c_med), statistics.median(py_med)
    print(f"## run() overhead: {os.path.basename(args.model)}, {args.device}, 1 thread, "
          f"{args.rounds} rounds of {args.iterations} calls\n")
    print("| | median per call (us) | rounds |")
    print("|---|---:|---|")
    print(f"| C API (kiln.bench: kiln_session_run in C) | {c:.1f} | {' '.join('%.1f' % x for x in c_med)} |")
    print(f"| Python (InferenceSession.run) | {p:.1f} | {' '.join('%.1f' % x for x in py_med)} |")
    print(f"| overhead | **{p - c:.1f}** | (bar: < 50 us) |\n")


def gil(args):
    if not os.path.exists(args.gil_model):
        print(f"## GIL: {args.gil_model} missing (tests/models/export_models.py makes it); skipped")
        return
    rng = np.random.default_rng(1)
    opts = kiln.SessionOptions()
    opts.intra_op_num_threads = 1
    sessions = [kiln.InferenceSession(args.gil_model, opts, providers=[args.device]) for _ in range(2)]
    feeds = [feed_of(s, [], rng) for s in sessions]
    for s, f in zip(sessions, feeds):
        for _ in range(3):
            s.run(None, f)

    def work(i):
        for _ in range(args.gil_runs):
            sessions[i].run(None, feeds[i])

    seq, par = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        work(0)
        work(1)
        seq.append(time.perf_counter() - t)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        par.append(time.perf_counter() - t)
    s, p = statistics.median(seq), statistics.median(par)
    print(f"## GIL: two sessions of {os.path.basename(args.gil_model)} ({args.device}, 1 thread each), "
          f"{args.gil_runs} runs each, {args.rounds} rounds, {os.cpu_count()} CPUs\n")
    print("| | median (s) |")
    print("|---|---:|")
    print(f"| one thread after the other | {s:.3f} |")
    print(f"| two Python threads at once | {p:.3f} |")
    print(f"| parallel / sequential | **{p / s:.2f}** (GIL held: 1.0; released, on 2 free cores: about 0.5) |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "models", "shapes.onnx"))
    ap.add_argument("--input", action="append",
                    default=None, help="NAME=FILE.npy (default: the example's circle image)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gil-model", default=os.path.join(ROOT, "build", "models", "mobilenet_v2.onnx"))
    ap.add_argument("--gil-runs", type=int, default=40)
    args = ap.parse_args()
    if args.input is None:
        args.input = ["image=" + os.path.join(ROOT, "examples", "models", "sample_circle.npy")] \
            if args.model.endswith("shapes.onnx") else []
    print(f"# kiln {kiln.get_version_string()}, python {sys.version.split()[0]}, numpy {np.__version__}\n")
    overhead(args)
    gil(args)


if __name__ == "__main__":
    main()
