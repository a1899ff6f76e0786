#!/usr/bin/env python3
"""kiln vs ONNX Runtime over the model zoo, in one run (issue 11, item 1).

    python3 bench/zoo/run_zoo.py [--kiln build/kiln] [--zoo-dir bench/.zoo] [--tier suite|full]
                                 [--families F,...] [--only NAME,...] [--threads 1,2] [--iterations 10]
                                 [--warmup 1] [--rounds 2] [--timeout 600] [--no-cold] [--no-export]
                                 [--quick] [--json-out FILE]

Run it with the first `python3` on PATH. It
  1. makes bench/.venv (scripts/python-venv.sh: onnxruntime, onnx, numpy from
     pip) and exports the selected models with bench/zoo/export_zoo.py into
     --zoo-dir (models already there are skipped; --no-export: only what is
     there);
  2. per model, `kiln info MODEL --device D` once: the nodes left on ref (and
     the host-only ops apart: Shape, NonZero, reshapes of run-time shapes) and
     their ops ("all" when the whole graph runs on the interpreter, e.g.
     graphs with If or Loop today);
  3. per model and thread count:
     - cold start, each runtime in a fresh process on an empty cache (the
       model file read once before, so neither pays a disk read; each
       runtime's best of two, the second pair in the other order): kiln
       `kiln bench --warmup 0 --iterations 1` with KILN_CACHE_DIR a new empty
       directory, cold = load_ms + session_ms + first_run_ms; ONNX Runtime
       (bench/ort_worker.py --once) = session creation + first run;
     - warm latency, interleaved as bench/run_bench.py does (its code,
       imported): --iterations timed runs split into --rounds rounds, kiln
       (`kiln bench --json`, a fresh process per round on a warm cache) and
       ONNX Runtime (one ort_worker.py process: intra_op_num_threads=N,
       inter_op_num_threads=1, ORT_ENABLE_ALL, ORT_SEQUENTIAL) alternating
       which goes first in each round, never at the same time; medians. The
       first round times one run of each; a slow model then gets fewer timed
       runs than --iterations (at least one per round), as many as fit
       --cell-budget seconds at the slower runtime's first timed run, so a
       model left on the interpreter does not hold the run for an hour;
  4. prints a Markdown table per thread count: kiln and ORT median ms, the
     ratio kiln/ORT, nodes on ref (and which ops), cold start of each and
     their ratio; then the geometric mean of the ratios, the worst model, and
     the models that failed or timed out (listed with their error, left out
     of the geometric mean and counted).

Every kiln or ORT call has a time limit (--timeout seconds); a model that
fails, times out or errors on either runtime is reported as such, never a
crash of the harness. --quick: 4 timed runs in 2 rounds, 1 warm-up, for
checking the harness; not for the record.
"""
import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import run_bench as rb  # noqa: E402  (the venv, the ORT worker, kiln bench, statistics, machine info)

EXPORT_ZOO = os.path.join(HERE, "export_zoo.py")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def input_specs(zoo, meta):
    return [f"{i['name']}={os.path.join(zoo, i['file'])}" for i in meta["inputs"]]


def nodes_on_ref(args, model):
    """(count or "all", "op xN, ..." or the reason) from `kiln info --device D`."""
    cmd = [args.kiln, "info", model, "--device", args.device or "cpu"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"kiln info timed out after {args.timeout} s"
    if r.returncode != 0:
        return None, "kiln info: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    out = r.stdout
    m = re.search(r"every node runs on ref: (.*)", out)
    if m:
        return "all", m.group(1).strip()
    if "interpreted node by node" in out:
        return "all", "interpreted node by node"
    m = re.search(r"(\d+) nodes on ref", out)
    if not m:
        return None, "no plan line in kiln info"
    n = int(m.group(1))
    ops = {}
    if n:
        tail = out.split("fell back to ref:", 1)[1].splitlines()[1:]
        for line in tail:
            if not line.startswith("  "):
                break
            op = line.split()[0]
            ops[op] = ops.get(op, 0) + 1
    listed = ", ".join(f"{op} x{c}" if c > 1 else op for op, c in sorted(ops.items(), key=lambda kv: -kv[1]))
    # The host's by nature (runtime/plan.c kiln_plan_step_host_only), listed apart: Shape, NonZero, and the
    # reshapes and block copies of shapes only the run tells.
    h = re.search(r"(\d+) host-only ops on the host \(([^)]*)\)", out)
    if h:
        listed = (listed + "; " if listed else "") + f"host-only: {h.group(2)}"
    return n, listed


def read_file(path):
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def cold_kiln(args, model, inputs, threads):
    cache = tempfile.mkdtemp(prefix="kiln_zoo_cold_")
    try:
        # Tiered, as a session starts by default: the first run on the
        # precompiled kernels while the JIT compiles in the background.
        j = rb.kiln_bench(args, model, inputs, threads, 1, warmup=0,
                          env=dict(os.environ, KILN_CACHE_DIR=cache, KILN_JIT="tiered"), timeout=args.timeout)
        return j["load_ms"] + j["session_ms"] + j["first_run_ms"]
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def cold_ort(args, model, inputs, threads):
    cmd = [rb.VENV_PY, os.path.join(BENCH, "ort_worker.py"), model, "--threads", str(threads), "--once"]
    for spec in inputs:
        cmd += ["--input", spec]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"onnxruntime timed out after {args.timeout} s") from None
    if r.returncode != 0:
        raise RuntimeError("onnxruntime: " + (r.stderr.strip().splitlines() or ["?"])[-1][:300])
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["load_ms"] + j["first_run_ms"]


def bench_model(args, zoo, meta, threads, warm_cache):
    """One model at one thread count: cold starts, then interleaved warm runs. Never raises."""
    model, inputs = os.path.join(zoo, meta["file"]), input_specs(zoo, meta)
    res = {"model": meta["name"], "family": meta["family"], "threads": threads}
    if not args.no_cold:
        # Both start with the file in the page cache: "cold" is a fresh process and an empty compile cache,
        # not a disk read, which only the first of the two would pay (light_vgg19's 548 MB: 9 s for the
        # one that came first after the cache had dropped it, 0.5 s after).
        # Each runtime's best of two, the second pair in the other order: this host (a Firecracker guest)
        # hands idle memory back, and the first process to touch a few hundred MB after a pause pays
        # seconds to get it again (light_vgg19: 9.3 s for whichever ran first, 0.5 s after).
        read_file(model)
        for order in ((("kiln", cold_kiln), ("ort", cold_ort)), (("ort", cold_ort), ("kiln", cold_kiln))):
            for who, fn in order:
                try:
                    t = fn(args, model, inputs, threads)
                    res[f"cold_{who}_ms"] = min(t, res.get(f"cold_{who}_ms", t))
                except (RuntimeError, OSError, ValueError, KeyError) as e:
                    res[f"cold_{who}_error"] = str(e)[:300]
    rounds = max(1, min(args.rounds, args.iterations))
    # Round 0 times one run of each; the rest of --iterations (fewer if the slower runtime's run says they
    # would pass --cell-budget, at least one per round) are split over the remaining rounds.
    per_round = [1] if rounds > 1 else [args.iterations]
    env = dict(os.environ, KILN_CACHE_DIR=warm_cache)
    ks, os_, ort = [], [], None
    kiln_err = ort_err = None
    try:
        ort = rb.OrtWorker(model, inputs, threads, args.warmup, timeout=args.timeout)
    except (RuntimeError, TimeoutError, OSError, ValueError) as e:
        ort_err = str(e)[:300]
    t0 = time.time()
    r = 0
    while r < len(per_round):
        k = per_round[r]
        for who in (["kiln", "ort"] if r % 2 == 0 else ["ort", "kiln"]):
            if who == "kiln" and kiln_err is None:
                try:
                    ks += rb.kiln_bench(args, model, inputs, threads, k, env=env, timeout=args.timeout)["samples_ms"]
                except (RuntimeError, OSError, ValueError, KeyError) as e:
                    m = re.search(r" failed \((-?\d+)\): (.*)", str(e), re.S)
                    kiln_err = (f"exit {m.group(1)}: " + (m.group(2).strip().splitlines() or [""])[-1]
                                if m else str(e))[:300]
            elif who == "ort" and ort_err is None and ort is not None:
                try:
                    os_ += ort.run(k)
                except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as e:
                    ort_err = str(e)[:300]
        log(f"  {meta['name']} threads={threads}: round {r + 1}/{rounds} ({time.time() - t0:.0f} s)")
        if r == 0 and rounds > 1:
            est = max(ks + os_ or [0.0])
            n = args.iterations
            if est > 0 and args.cell_budget:
                n = max(rounds, min(n, int(args.cell_budget * 1e3 / est)))
            rest = n - 1
            per_round += [rest // (rounds - 1) + (1 if i < rest % (rounds - 1) else 0) for i in range(rounds - 1)]
        r += 1
    res["iterations"] = sum(per_round)
    if ort is not None and ort_err is None:
        try:
            ort.close()
        except (RuntimeError, TimeoutError, OSError, ValueError, KeyError):
            pass
    elif ort is not None and ort.p.poll() is None:
        ort.p.kill()
    if kiln_err:
        res["kiln_error"] = kiln_err
    elif ks:
        res["kiln"] = rb.summarize(ks)
    if ort_err:
        res["ort_error"] = ort_err
    elif os_:
        res["ort"] = rb.summarize(os_)
    if "kiln" in res and "ort" in res:
        res["ratio"] = res["kiln"]["median"] / res["ort"]["median"]
    if "cold_kiln_ms" in res and "cold_ort_ms" in res:
        res["cold_ratio"] = res["cold_kiln_ms"] / res["cold_ort_ms"]
    if args.no_jit and "kiln" in res:
        # The same model with no C compiler: the precompiled kernels alone.
        try:
            n = max(3, res["iterations"] // 2)
            js = rb.kiln_bench(args, model, inputs, threads, n, env=dict(env, KILN_CC="/nonexistent"),
                               timeout=args.timeout)["samples_ms"]
            res["nojit"] = rb.summarize(js)
            res["nojit_ratio"] = res["nojit"]["median"] / res["kiln"]["median"]
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            res["nojit_error"] = str(e)[:300]
    return res


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def fmt(x):
    return "" if x is None else rb.fmt_ms(x)


def print_tables(results, meta, threads):
    print("\n## kiln vs ONNX Runtime over the model zoo\n")
    m = meta["machine"]
    print(f"- date: {meta['date']}")
    print(f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores ({m.get('cpus', '?')} CPUs, "
          f"{m.get('threads_per_core', '?')} thread(s) per core); {m.get('platform', '')}")
    print(f"- {meta['kiln_version']} (the binary; the checkout: {m.get('kiln_commit', '?')}), device {meta['device']}; "
          f"onnxruntime {meta['venv']['onnxruntime']}, numpy {meta['venv']['numpy']}")
    print(f"- warm: {meta['iterations']} timed runs per cell (fewer where the first round says they would pass "
          f"{meta['cell_budget']:g} s: column runs) in {meta['rounds']} interleaved rounds, "
          f"{meta['warmup']} warm-up per process, medians; cold: a fresh process on an empty cache "
          f"(kiln load + session + first run, ORT session + first run); time limit {meta['timeout']} s per call")
    print(f"- command: `{meta['command']}`")
    for t in threads:
        rows = [r for r in results if r["threads"] == t]
        print(f"\n### {t} thread{'s' if t > 1 else ''}\n")
        nojit = any("nojit" in r or "nojit_error" in r for r in rows)
        print("| model | family | runs | kiln ms | ORT ms | kiln/ORT | nodes on ref | cold kiln ms | cold ORT ms "
              "| cold kiln/ORT |" + (" no-JIT ms | no-JIT/JIT |" if nojit else ""))
        print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|" + ("---:|---:|" if nojit else ""))
        for r in rows:
            kiln = fmt(r["kiln"]["median"]) if "kiln" in r else f"FAILED: {r.get('kiln_error', '?')[:120]}"
            ort = fmt(r["ort"]["median"]) if "ort" in r else f"FAILED: {r.get('ort_error', '?')[:120]}"
            ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
            nref = r.get("nodes_on_ref")
            ref = "?" if nref is None else str(nref)
            if r.get("ref_ops"):
                ref += f" ({r['ref_ops'][:160]})"
            ck = fmt(r.get("cold_kiln_ms")) if "cold_kiln_ms" in r else (
                f"FAILED: {r['cold_kiln_error'][:60]}" if "cold_kiln_error" in r else "")
            co = fmt(r.get("cold_ort_ms")) if "cold_ort_ms" in r else (
                f"FAILED: {r['cold_ort_error'][:60]}" if "cold_ort_error" in r else "")
            cr = f"{r['cold_ratio']:.2f}" if "cold_ratio" in r else ""
            nj = ""
            if nojit:
                nj = (f" {fmt(r['nojit']['median'])} | {r['nojit_ratio']:.2f} |" if "nojit" in r
                      else f" FAILED: {r.get('nojit_error', '?')[:60]} | |")
            mark = " \\*" if r.get("rerun") else ""
            print(f"| {r['model']}{mark} | {r['family']} | {r.get('iterations', '')} | {kiln} | {ort} | {ratio} | {ref} "
                  f"| {ck} | {co} | {cr} |" + nj)
        ok = [r for r in rows if "ratio" in r]
        bad = [r for r in rows if "ratio" not in r]
        print()
        if any(r.get("rerun") for r in rows):
            print("\\* measured again in a later part of the run (its cold starts from the first part when the rerun "
                  "took none)\n")
        if ok:
            worst = max(ok, key=lambda r: r["ratio"])
            cold = [r["cold_ratio"] for r in ok if "cold_ratio" in r]
            print(f"- geometric mean of kiln/ORT over {len(ok)} models: **{geomean([r['ratio'] for r in ok]):.2f}**"
                  + (f"; cold start: {geomean(cold):.2f}" if cold else ""))
            print(f"- worst: {worst['model']} ({worst['ratio']:.2f})")

            def above(key, limit):
                xs = sorted((r for r in ok if r.get(key, 0) > limit), key=lambda r: -r[key])
                return ", ".join(f"{r['model']} {r[key]:.2f}" for r in xs) or "none"
            # The bars: no model above 1.5x ORT, no cold start above 2x ORT's, no model without the C
            # compiler above 1.5x its JIT latency.
            print(f"- above 1.5x ORT: {above('ratio', 1.5)}")
            if cold:
                print(f"- cold start above 2x ORT's: {above('cold_ratio', 2.0)}")
            nj = [r for r in ok if "nojit_ratio" in r]
            if nj:
                wn = max(nj, key=lambda r: r["nojit_ratio"])
                print(f"- no C compiler (precompiled kernels) / JIT: geometric mean "
                      f"{geomean([r['nojit_ratio'] for r in nj]):.2f}, worst {wn['model']} ({wn['nojit_ratio']:.2f}); "
                      f"above 1.5: {above('nojit_ratio', 1.5)}")
            allref = [r["model"] for r in ok if r.get("nodes_on_ref") == "all"]
            if allref:
                print(f"- whole graph on ref: {', '.join(allref)}")
        print(f"- failed or timed out (not in the geometric mean): {len(bad)}"
              + (": " + "; ".join(f"{r['model']} ({'kiln' if 'kiln_error' in r else 'ORT'}: "
                                  f"{(r.get('kiln_error') or r.get('ort_error') or '?')[:160]})" for r in bad)
                 if bad else ""))
    if meta["iterations"] < 10:
        print(f"\nnote: {meta['iterations']} timed runs per cell (--quick or small --iterations): for checking the "
              "harness, not for the record")
    sys.stdout.flush()


def merge(paths):
    """One set of tables from the --json-out files of a run made in parts (a model in two parts: the last,
    with the earlier one's cold starts when the last measured none)."""
    parts = []
    for p in paths:
        with open(p) as f:
            parts.append(json.load(f))
    meta = dict(parts[0]["meta"])
    for key in ("kiln_version", "device", "iterations", "warmup", "rounds", "cell_budget", "timeout"):
        if any(d["meta"][key] != meta[key] for d in parts):
            rb.die(f"--merge: the parts differ in {key}: {sorted({str(d['meta'][key]) for d in parts})}")
    threads = sorted({t for d in parts for t in d["meta"]["threads"]})
    by_cell = {}
    for d in parts:
        for r in d["results"]:
            old = by_cell.get((r["model"], r["threads"]))
            if old:  # a later part's rerun (--no-cold) keeps the earlier part's cold starts
                no_cold = not any(c.startswith("cold_") for c in r)
                for k in ("cold_kiln_ms", "cold_ort_ms", "cold_ratio", "cold_kiln_error", "cold_ort_error"):
                    if k in old and no_cold:
                        r[k] = old[k]
                r["rerun"] = True
            by_cell[(r["model"], r["threads"])] = r
    dates = [d["meta"]["date"] for d in parts]
    meta["date"] = f"{dates[0]} to {dates[-1]} ({len(parts)} parts)"
    meta["command"] = "`, `".join(d["meta"]["command"] for d in parts)
    print_tables(list(by_cell.values()), meta, threads)
    missing = [f for d in parts for f in d.get("not_exported", [])]
    if missing:
        print(f"\nnot exported ({len(missing)}): " + "; ".join(f"{f['name']}" for f in missing))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kiln", default=os.environ.get("KILN", os.path.join(ROOT, "build", "kiln")))
    ap.add_argument("--device", help="kiln device (default: kiln's default device)")
    ap.add_argument("--zoo-dir", default=os.path.join(ROOT, "bench", ".zoo"))
    ap.add_argument("--tier", choices=["suite", "full"], default="suite")
    ap.add_argument("--families", help="comma-separated families (see export_zoo.py)")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default %(default)s)")
    ap.add_argument("--iterations", type=int, help="timed runs per runtime, model and thread count (default 10)")
    ap.add_argument("--warmup", type=int, help="warm-up runs per process (default 1)")
    ap.add_argument("--rounds", type=int, help="interleaving rounds (default 2)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per kiln or ORT call (default %(default)s)")
    ap.add_argument("--cell-budget", type=float, default=60,
                    help="seconds of timed runs per runtime and cell: slow models get fewer runs, at least one per "
                    "round (estimated from the first round; 0: always --iterations; default %(default)s)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start measurements")
    ap.add_argument("--no-jit", action="store_true",
                    help="also time kiln with no C compiler (KILN_CC=/nonexistent: precompiled kernels only) and "
                         "print its ratio to kiln's JIT latency")
    ap.add_argument("--no-export", action="store_true", help="only the models already in --zoo-dir")
    ap.add_argument("--quick", action="store_true", help="4 runs in 2 rounds, 1 warm-up: checks the harness")
    ap.add_argument("--json-out", help="also write all results to this file")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="print the tables of earlier runs' --json-out files as one run (a zoo run in parts: "
                         "each part's command is listed) and exit")
    args = ap.parse_args()
    if args.merge:
        merge(args.merge)
        return
    if args.iterations is None:
        args.iterations = 4 if args.quick else 10
    if args.warmup is None:
        args.warmup = 1
    if args.rounds is None:
        args.rounds = 2
    if args.iterations < 1 or args.warmup < 0 or args.rounds < 1:
        rb.die("--iterations and --rounds must be >= 1, --warmup >= 0")
    try:
        threads = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        rb.die(f"--threads takes comma-separated integers, got '{args.threads}'")
    if not threads or min(threads) < 1:
        rb.die("--threads: thread counts must be >= 1")
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        rb.die(f"no kiln binary at {args.kiln} (build it first, or pass --kiln)")
    version = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    venv = rb.ensure_venv(False)
    zoo = os.path.abspath(args.zoo_dir)
    sel = ["--tier", args.tier] + (["--families", args.families] if args.families else []) + (
        ["--only", args.only] if args.only else [])
    if not args.no_export:
        subprocess.run([sys.executable, EXPORT_ZOO, "--out", zoo] + sel, check=True)
    names = subprocess.run([sys.executable, EXPORT_ZOO, "--out", zoo, "--list"] + sel, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    names = [n.split()[0] for n in names if n.strip()]
    with open(os.path.join(zoo, "manifest.json")) as f:
        manifest = json.load(f)
    metas = {m["name"]: m for m in manifest["models"]}
    models = [metas[n] for n in names if n in metas]
    not_exported = [f for f in manifest["failed"] if f["name"] in names]
    not_exported += [{"name": n, "error": "not in the manifest (not exported yet: drop --no-export)"}
                     for n in names if n not in metas and n not in {f["name"] for f in not_exported}]
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "machine": rb.machine_info(), "venv": venv, "kiln_version": version,
            "device": args.device or "default", "iterations": args.iterations, "warmup": args.warmup,
            "rounds": min(args.rounds, args.iterations), "threads": threads, "timeout": args.timeout,
            "cell_budget": args.cell_budget,
            "command": " ".join(map(shlex.quote, ["python3", os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]))}
    results = []
    warm_cache = tempfile.mkdtemp(prefix="kiln_zoo_warm_")
    try:
        for m in models:
            n_ref, ops = nodes_on_ref(args, os.path.join(zoo, m["file"]))
            for t in threads:
                log(f"{m['name']}, {t} thread(s)")
                r = bench_model(args, zoo, m, t, warm_cache)
                r["nodes_on_ref"], r["ref_ops"] = n_ref, ops
                results.append(r)
    finally:
        shutil.rmtree(warm_cache, ignore_errors=True)
    print_tables(results, meta, threads)
    if not_exported:
        print(f"\nnot exported ({len(not_exported)}): " +
              "; ".join(f"{f['name']} ({f['error'].splitlines()[0][:160]})" for f in not_exported))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "results": results, "not_exported": not_exported}, f, indent=1)


if __name__ == "__main__":
    main()
