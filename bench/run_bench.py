#!/usr/bin/env python3
"""kiln vs ONNX Runtime on the same machine, in one run (issue 3, item 10).

    python3 bench/run_bench.py [--kiln build/kiln] [--device D] [--models resnet50,mobilenet_v2,bert_encoder]
                               [--threads 1,2] [--iterations 20] [--warmup 2] [--rounds 4] [--quick]
                               [--models-dir bench/.models] [--no-gemm] [--gemm-args "..."]
                               [--update-venv] [--json-out FILE]

Run it with the first `python3` on PATH. It
  1. creates bench/.venv (scripts/python-venv.sh: python3 -m venv) and
     pip-installs the newest onnxruntime, onnx and numpy there (once;
     --update-venv upgrades them);
  2. exports the models with Debian's /usr/bin/python3 + torch through
     tests/models/export_models.py (ResNet-50 and MobileNetV2 from torchvision,
     weights=None; bert_encoder: 12 layers, d 768, 12 heads, ff 3072, seq 128;
     batch 1; random weights with fixed seeds) into --models-dir, skipping
     models already there;
  3. for each model and thread count times kiln (`kiln bench --json`, default
     device unless --device) and ONNX Runtime (intra_op_num_threads=N,
     inter_op_num_threads=1, ORT_ENABLE_ALL, ORT_SEQUENTIAL, in its own process:
     bench/ort_worker.py) on the same input file, interleaved: the timed runs
     are split into --rounds rounds and the runtimes alternate which goes
     first in each round; the two never run at the same time;
  4. prints a Markdown table: median latency (and p10-p90) of each, the ratio
     kiln/ORT of the medians, and each process's peak RSS;
  5. runs the SGEMM comparison in bench/gemm (kiln vs oneDNN vs OpenBLAS) if
     its script is there, with OPENBLAS_CORETYPE unset.

--quick: 5 timed runs in 2 rounds and 1 warm-up per process (for checking the
harness; not for the record: the issue asks for the median of >= 20 runs).
"""
import argparse
import datetime
import json
import os
import platform
import select
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")
DEBIAN_PY = "/usr/bin/python3"
EXPORT = os.path.join(ROOT, "tests", "models", "export_models.py")
DEFAULT_MODELS = ["resnet50", "mobilenet_v2", "bert_encoder"]
GEMM_SCRIPTS = ["run_gemm_bench.py", "run_gemm_bench.sh", "run_bench.py", "run_bench.sh", "run.py", "run.sh"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log(f"run_bench: error: {msg}")
    sys.exit(1)


# ---- environment ----------------------------------------------------------------

def ensure_venv(update):
    """bench/.venv with onnxruntime, onnx and numpy (scripts/python-venv.sh); idempotent."""
    cmd = [os.path.join(ROOT, "scripts", "python-venv.sh")] + (["--update"] if update else []) + [VENV]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        die(f"{' '.join(cmd)} failed with status {r.returncode}")
    out = subprocess.run([VENV_PY, "-c", "import onnxruntime as o, numpy as n; print(o.__version__, n.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {"onnxruntime": out[0], "numpy": out[1]}


def export_models(models, models_dir):
    missing = [m for m in models if not all(os.path.exists(p) for p in model_files(models_dir, m))]
    if not missing:
        return
    if not os.path.exists(DEBIAN_PY):
        die(f"{DEBIAN_PY} (Debian's python with torch) is needed to export {', '.join(missing)}")
    log(f"exporting {', '.join(missing)} into {models_dir} (torch; takes a minute or two)")
    subprocess.run([DEBIAN_PY, EXPORT, models_dir, "--only", ",".join(missing)], check=True)


def model_files(models_dir, name):
    return [os.path.join(models_dir, name + s) for s in (".onnx", ".input.npy")]


def machine_info():
    info = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, env=dict(os.environ, LC_ALL="C")).stdout
        kv = {}
        for line in out.splitlines():
            k, _, v = line.partition(":")
            kv[k.strip()] = v.strip()
        info["cpu"] = kv.get("Model name", "?")
        info["cpus"] = kv.get("CPU(s)", "?")
        cores = kv.get("Core(s) per socket"), kv.get("Socket(s)")
        if all(c and c.isdigit() for c in cores):
            info["cores"] = str(int(cores[0]) * int(cores[1]))
        info["threads_per_core"] = kv.get("Thread(s) per core", "?")
    except OSError:
        info["cpu"] = platform.processor() or "?"
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        info["kiln_commit"] = rev + ("+dirty" if dirty else "")
    except OSError:
        pass
    return info


# ---- statistics ---------------------------------------------------------------------

def percentile(samples, p):
    """Linear interpolation between closest ranks (NumPy's default)."""
    s = sorted(samples)
    if not s:
        return float("nan")
    pos = p / 100 * (len(s) - 1)
    lo = int(pos)
    if lo >= len(s) - 1:
        return s[-1]
    return s[lo] + (s[lo + 1] - s[lo]) * (pos - lo)


def summarize(samples):
    return {"n": len(samples), "median": percentile(samples, 50), "p10": percentile(samples, 10),
            "p90": percentile(samples, 90), "min": min(samples) if samples else float("nan")}


# ---- the two runtimes ----------------------------------------------------------------

ORT_SPIN_SETTLE_S = 0.5


class OrtWorker:
    """bench/ort_worker.py in its own process; inputs: ["NAME=FILE.npy", ...]. With timeout (seconds), a reply
    that does not come in time kills the worker and raises TimeoutError."""

    def __init__(self, model, inputs, threads, warmup, timeout=None):
        cmd = [VENV_PY, os.path.join(HERE, "ort_worker.py"), model, "--threads", str(threads), "--warmup", str(warmup)]
        for spec in inputs:
            cmd += ["--input", spec]
        self.timeout = timeout
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._read()
        time.sleep(ORT_SPIN_SETTLE_S)  # after its warm-up runs, as after run()

    def _read(self):
        if self.timeout is not None:
            ready, _, _ = select.select([self.p.stdout], [], [], self.timeout)
            if not ready:
                self.p.kill()
                self.p.wait()
                raise TimeoutError(f"onnxruntime timed out after {self.timeout} s")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"ort_worker exited with status {self.p.wait()}")
        return json.loads(line)

    def run(self, k):
        self.p.stdin.write(f"run {k}\n")
        self.p.stdin.flush()
        samples = self._read()["samples_ms"]
        # ONNX Runtime's pool threads spin after a run (allow_spinning, its default) and hold a core for
        # a while: the kiln process timed next shared its cores with them (mobilenet_v3_small at 2
        # threads: 2.0-2.35 ms right after ORT's turn, 1.25-1.3 ms after half a second or with no ORT
        # worker). Let them go idle before the other runtime's turn.
        time.sleep(ORT_SPIN_SETTLE_S)
        return samples

    def close(self):
        if self.p.poll() is not None:
            return 0
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        rss = self._read()["peak_rss_bytes"]
        self.p.wait()
        return rss


def kiln_bench(args, model, inputs, threads, k, warmup=None, env=None, timeout=None):
    """`kiln bench --json` in a fresh process; inputs: ["NAME=FILE.npy", ...]. Raises RuntimeError on failure."""
    cmd = [args.kiln, "bench", model, "--json", "--iterations", str(k),
           "--warmup", str(args.warmup if warmup is None else warmup), "--threads", str(threads)]
    for spec in inputs:
        cmd += ["--input", spec]
    if args.device:
        cmd += ["--device", args.device]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"kiln timed out after {timeout} s") from None
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(shlex.quote, cmd))} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def bench_pair(args, name, threads):
    model, input_file = model_files(args.models_dir, name)
    rounds = max(1, min(args.rounds, args.iterations))
    per_round = [args.iterations // rounds + (1 if r < args.iterations % rounds else 0) for r in range(rounds)]
    kiln_samples, ort_samples, kiln_rss, kiln_first = [], [], 0, None
    device = None
    t0 = time.time()
    ort = OrtWorker(model, [f"input={input_file}"], threads, args.warmup)
    try:
        for r, k in enumerate(per_round):
            order = ["kiln", "ort"] if r % 2 == 0 else ["ort", "kiln"]
            for who in order:
                if who == "kiln":
                    j = kiln_bench(args, model, [f"input={input_file}"], threads, k)
                    kiln_samples += j["samples_ms"]
                    kiln_rss = max(kiln_rss, j["peak_rss_bytes"])
                    device = j["device"]
                    if kiln_first is None:
                        kiln_first = j["first_run_ms"]
                else:
                    ort_samples += ort.run(k)
            log(f"  {name} threads={threads}: round {r + 1}/{rounds} done ({time.time() - t0:.0f} s)")
    finally:
        ort_rss = ort.close()
    return {"model": name, "threads": threads, "device": device,
            "kiln": dict(summarize(kiln_samples), peak_rss_bytes=kiln_rss, first_run_ms=kiln_first,
                         samples_ms=kiln_samples),
            "ort": dict(summarize(ort_samples), peak_rss_bytes=ort_rss, first_run_ms=ort.ready["first_run_ms"],
                        samples_ms=ort_samples),
            "ratio": summarize(kiln_samples)["median"] / summarize(ort_samples)["median"]}


# ---- SGEMM -------------------------------------------------------------------------

def run_gemm(args):
    gdir = os.path.join(HERE, "gemm")
    script = next((os.path.join(gdir, s) for s in GEMM_SCRIPTS if os.path.isfile(os.path.join(gdir, s))), None)
    print("\n## SGEMM (bench/gemm)\n")
    if not script:
        print(f"bench/gemm: missing (none of {', '.join(GEMM_SCRIPTS)} in {gdir}); SGEMM comparison skipped")
        return None
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)  # the issue: unset for the OpenBLAS comparison
    env["KILN"] = os.path.abspath(args.kiln)
    cmd = ([sys.executable] if script.endswith(".py") else ["bash"]) + [script] + shlex.split(args.gemm_args)
    print(f"command: env -u OPENBLAS_CORETYPE {' '.join(map(shlex.quote, cmd))}\n", flush=True)
    r = subprocess.run(cmd, env=env, cwd=ROOT)
    if r.returncode != 0:
        print(f"bench/gemm script failed with status {r.returncode}")
    return r.returncode


# ---- main --------------------------------------------------------------------------

def fmt_ms(x):
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def print_table(results, meta):
    print("\n## kiln vs ONNX Runtime\n")
    print(f"- date: {meta['date']}")
    m = meta["machine"]
    print(f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores ({m.get('cpus', '?')} CPUs, "
          f"{m.get('threads_per_core', '?')} thread(s) per core); {m.get('platform', '')}")
    print(f"- {meta['kiln_version']} (the binary; the checkout: {m.get('kiln_commit', '?')}), device {meta['device']}; "
          f"onnxruntime {meta['venv']['onnxruntime']}, numpy {meta['venv']['numpy']}")
    print(f"- timed runs per cell: {meta['iterations']} in {meta['rounds']} interleaved rounds, "
          f"{meta['warmup']} warm-up per process; batch 1")
    print(f"- command: `{meta['command']}`\n")
    print("| model | threads | kiln median ms (p10-p90) | ORT median ms (p10-p90) | kiln/ORT | kiln peak RSS MB "
          "| ORT peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['model']} | {r['threads']} | error: {r['error'][:80]} | | | | |")
            continue
        k, o = r["kiln"], r["ort"]
        print(f"| {r['model']} | {r['threads']} | {fmt_ms(k['median'])} ({fmt_ms(k['p10'])}-{fmt_ms(k['p90'])}) "
              f"| {fmt_ms(o['median'])} ({fmt_ms(o['p10'])}-{fmt_ms(o['p90'])}) | {r['ratio']:.2f} "
              f"| {k['peak_rss_bytes'] / 1e6:.0f} | {o['peak_rss_bytes'] / 1e6:.0f} |")
    if meta["iterations"] < 20:
        print(f"\nnote: {meta['iterations']} timed runs per cell; the issue's criterion needs >= 20 "
              "(drop --quick / raise --iterations)")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kiln", default=os.environ.get("KILN", os.path.join(ROOT, "build", "kiln")),
                    help="the kiln binary (default $KILN or build/kiln; build it Release)")
    ap.add_argument("--device", help="kiln device (default: kiln's default device)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help="comma-separated names from tests/models/export_models.py (default %(default)s)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default %(default)s)")
    ap.add_argument("--iterations", type=int, help="timed runs per runtime, model and thread count (default 20)")
    ap.add_argument("--warmup", type=int, help="warm-up runs per process (default 2)")
    ap.add_argument("--rounds", type=int, help="interleaving rounds (default 4)")
    ap.add_argument("--quick", action="store_true", help="5 runs in 2 rounds, 1 warm-up: checks the harness")
    ap.add_argument("--models-dir", default=os.path.join(HERE, ".models"), help="default bench/.models")
    ap.add_argument("--no-gemm", action="store_true", help="skip the SGEMM comparison")
    ap.add_argument("--gemm-args", default="", help="arguments passed to bench/gemm's script")
    ap.add_argument("--update-venv", action="store_true", help="pip-upgrade onnxruntime, onnx and numpy in bench/.venv")
    ap.add_argument("--json-out", help="also write all results (raw samples included) to this file")
    args = ap.parse_args()
    if args.iterations is None:
        args.iterations = 5 if args.quick else 20
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.rounds is None:
        args.rounds = 2 if args.quick else 4
    if args.iterations < 1 or args.warmup < 0 or args.rounds < 1:
        die("--iterations and --rounds must be >= 1, --warmup >= 0")
    models = [m for m in args.models.split(",") if m]
    try:
        threads = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        die(f"--threads takes comma-separated integers, got '{args.threads}'")
    if not threads or min(threads) < 1:
        die("--threads: thread counts must be >= 1")
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        die(f"no kiln binary at {args.kiln} (build it: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && "
            "cmake --build build -j2; or pass --kiln)")
    version = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()

    venv = ensure_venv(args.update_venv)
    os.makedirs(args.models_dir, exist_ok=True)
    export_models(models, args.models_dir)
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "machine": machine_info(), "venv": venv, "kiln_version": version, "device": args.device or "default",
            "iterations": args.iterations, "warmup": args.warmup, "rounds": min(args.rounds, args.iterations),
            "threads": threads, "models": models,
            "command": " ".join(map(shlex.quote, ["python3", os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]))}

    results = []
    for name in models:
        for t in threads:
            log(f"{name}, {t} thread(s): kiln vs onnxruntime")
            try:
                results.append(bench_pair(args, name, t))
            except (RuntimeError, OSError, json.JSONDecodeError, KeyError) as e:
                log(f"  failed: {e}")
                results.append({"model": name, "threads": t, "error": str(e)})
    devices = sorted({r["device"] for r in results if r.get("device")})
    if devices:
        meta["device"] = ",".join(devices) + ("" if args.device else " (kiln's default)")
    print_table(results, meta)
    gemm_rc = None if args.no_gemm else run_gemm(args)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "results": results, "gemm_status": gemm_rc}, f, indent=1)
    sys.exit(1 if any("error" in r for r in results) else 0)


if __name__ == "__main__":
    main()
