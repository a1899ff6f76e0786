"""Checks a JSON report of the public C API (include/kiln.h), read from
stdin, against its documented schema; the metadata mode checks the lines
the test prints against what onnx's Python reads from the model file.

usage: check_json.py devices|report|report_ref|report_gpu|profile|profile_empty|verify|verify_given|verify_exact|
                     bench|bench_noprof|metadata MODEL|model_info MODEL
Exit status 0 when every check passes; the failures are printed.
"""
import json
import math
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def has(obj, fields, where):
    for name, kind in fields.items():
        check(name in obj, f"{where}: no '{name}' in {sorted(obj)}")
        if name in obj and kind is not None:
            check(isinstance(obj[name], kind), f"{where}.{name}: {obj[name]!r} is not {kind}")


num = (int, float)
mode = sys.argv[1]
text = sys.stdin.read()

if mode == "metadata":
    import onnx
    m = onnx.load(sys.argv[2])
    got = {}
    for line in text.split("\x1e"):
        if line:
            k, _, v = line.partition("=")
            got[k] = v
    want = {"producer_name": m.producer_name, "producer_version": m.producer_version, "domain": m.domain,
            "doc_string": m.doc_string, "graph_name": m.graph.name, "graph_doc_string": m.graph.doc_string,
            "model_version": str(m.model_version), "ir_version": str(m.ir_version),
            "n_opsets": str(len(m.opset_import)), "n_props": str(len(m.metadata_props))}
    for i, o in enumerate(m.opset_import):
        want[f"opset{i}"] = f"{o.domain}:{o.version}"
    for i, p in enumerate(m.metadata_props):
        want[f"prop{i}"] = f"{p.key}:{p.value}"
    for k, v in want.items():
        check(got.get(k) == v, f"{k}: kiln says {got.get(k)!r}, onnx {v!r}")
    check(set(got) == set(want), f"fields: {sorted(set(got) ^ set(want))}")
else:
    try:
        doc = json.loads(text)
    except ValueError as e:
        print(f"not JSON ({e}): {text[:500]!r}")
        sys.exit(1)
    check(isinstance(doc, dict), "not an object")

    if mode == "devices":
        has(doc, {"devices": list, "absent": list}, "devices")
        names = [d.get("name") for d in doc["devices"]]
        check("ref" in names and "cpu" in names, f"ref and cpu not both listed: {names}")
        for d in doc["devices"]:
            has(d, {"name": str, "description": str, "vendor": str, "memory": str, "memory_bytes": int,
                    "compute_units": int, "subgroup_size": int, "features": list}, f"device {d.get('name')}")
            check(d.get("driver") is None or isinstance(d["driver"], str), "driver")
        ref = [d for d in doc["devices"] if d["name"] == "ref"]
        check(ref and "all-dtypes" in ref[0]["features"] and ref[0]["memory"] == "host", f"ref: {ref}")
        for a in doc["absent"]:
            has(a, {"name": str, "reason": str}, "absent")

    elif mode in ("report", "report_ref", "report_gpu"):
        has(doc, {"device": str, "mode": str, "threads": int, "precision": str, "nodes": int, "n_kernels": int,
                  "fused_nodes": int, "nodes_on_ref": int, "device_segments": int, "kernels": list,
                  "fallbacks": list, "memory": dict}, "report")
        has(doc["memory"], {"host_memory": bool, "intermediate_bytes": int, "arena_bytes": int,
                            "weight_bytes_on_device": int}, "report.memory")
        for k in doc["kernels"]:
            has(k, {"name": str, "node": str, "kind": str, "op": str, "ops": list, "flops": int}, "kernel")
            check(k["node"] in k["ops"], f"kernel node {k['node']!r} not in its ops")
            check(len(k["ops"]) >= 1 and all(isinstance(n, str) for n in k["ops"]), f"kernel ops {k}")
        for f in doc["fallbacks"]:
            has(f, {"node": str, "op": str, "reason": str}, "fallback")
        nodes = [n for k in doc["kernels"] for n in k["ops"]] + [f["node"] for f in doc["fallbacks"]]
        if mode == "report":
            check(doc["device"] == "cpu" and doc["mode"] == "compiled", f"device/mode {doc['device']} {doc['mode']}")
            check(doc["n_kernels"] >= 1 and any(k["kind"] == "kernel" for k in doc["kernels"]), "no kernel")
            check(doc["memory"]["arena_bytes"] > 0, "arena_bytes 0")
            # The three nodes of the metadata model, names with quotes, newlines, tabs and UTF-8, fused into one kernel.
            if len(sys.argv) > 2:
                want = {'mat"mul\\1', "add\n\u00e9\u2713", "relu\t\u03bb"}
                check(want <= set(nodes), f"node names {nodes!r}")
                fused = [k for k in doc["kernels"] if set(k["ops"]) == want]
                check(len(fused) == 1 and fused[0]["op"] == "MatMul+Add+Relu", f"fused kernel {doc['kernels']}")
        elif mode == "report_gpu":
            check(doc["mode"] == "compiled" and doc["n_kernels"] >= 1, f"mode {doc['mode']}, {doc['n_kernels']} kernels")
            check(doc["memory"]["host_memory"] is False and doc["memory"]["weight_bytes_on_device"] > 0, "memory")
        else:
            check(doc["device"] == "ref" and doc["mode"] == "interpreted", f"device/mode {doc['device']} {doc['mode']}")
            check(len(doc["kernels"]) == doc["nodes"] and not doc["fallbacks"], "ref lists each node")

    elif mode in ("profile", "profile_empty"):
        has(doc, {"device": str, "runs": int, "events": list}, "profile")
        ev = doc["events"]
        if mode == "profile_empty":
            check(ev == [], f"events not cleared: {len(ev)}")
        else:
            check(doc["runs"] == 3, f"runs {doc['runs']}")
            check(len(ev) >= 3, f"{len(ev)} events")
            for e in ev:
                has(e, {"name": str, "op": str, "device": str, "thread": int, "run": int, "start_us": num,
                        "dur_us": num}, "event")
                check(e["dur_us"] >= 0 and e["start_us"] >= 0, f"times {e}")
            runs = sorted({e["run"] for e in ev})
            check(runs == [0, 1, 2], f"run indices {runs}")
            per_run = [[e for e in ev if e["run"] == r] for r in runs]
            check(all(len(p) == len(per_run[0]) for p in per_run), "runs differ in their events")
            for p in per_run:
                starts = [e["start_us"] for e in p]
                check(starts == sorted(starts), "events out of order within a run")
            for a, b in zip(per_run, per_run[1:]):
                check(a[-1]["start_us"] <= b[0]["start_us"], "runs out of order")

    elif mode == "model_info":
        import onnx
        m = onnx.load(sys.argv[2])
        has(doc, {"ir_version": int, "producer_name": str, "producer_version": str, "domain": str,
                  "model_version": int, "metadata_props": list, "opsets": list, "inputs": list, "outputs": list,
                  "nodes": int, "main_graph_nodes": int, "parameters": int, "initializers": int,
                  "parameter_bytes": int, "flops": int, "op_histogram": list, "unsupported_ops": list}, "model_info")
        check(doc["ir_version"] == m.ir_version and doc["producer_name"] == m.producer_name, "ir_version/producer")
        check([(o["domain"], o["version"]) for o in doc["opsets"]] ==
              [(o.domain or "ai.onnx", o.version) for o in m.opset_import], f"opsets {doc['opsets']}")
        inits = {i.name: i for i in m.graph.initializer}
        check([i["name"] for i in doc["inputs"]] == [i.name for i in m.graph.input if i.name not in inits],
              f"inputs {doc['inputs']}")
        check([o["name"] for o in doc["outputs"]] == [o.name for o in m.graph.output], f"outputs {doc['outputs']}")
        for io in doc["inputs"] + doc["outputs"]:
            has(io, {"name": str, "type": str, "dtype": str}, "io")
            check(io["shape"] is None or all(d is None or isinstance(d, (int, str)) for d in io["shape"]),
                  f"shape {io}")
        for io, v in zip(doc["inputs"], [i for i in m.graph.input if i.name not in inits]):
            dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            check(io["shape"] == dims, f"input {io['name']}: kiln {io['shape']}, onnx {dims}")

        def all_nodes(g):
            for n in g.node:
                yield n
                for a in n.attribute:
                    for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                        yield from all_nodes(sub)
        nodes = list(all_nodes(m.graph))
        check(doc["main_graph_nodes"] == len(m.graph.node) and doc["nodes"] == len(nodes), "node counts")
        hist = {}
        for n in nodes:
            hist[n.op_type] = hist.get(n.op_type, 0) + 1
        want = sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))
        check([(h["op"], h["count"]) for h in doc["op_histogram"]] == want, f"histogram {doc['op_histogram']}")
        import numpy as np
        from onnx import numpy_helper
        check(doc["initializers"] == len(inits), "initializers")
        check(doc["parameters"] == sum(int(np.prod(i.dims)) for i in inits.values()), "parameters")
        check(doc["parameter_bytes"] == sum(numpy_helper.to_array(i).nbytes for i in inits.values()),
              "parameter_bytes")
        check(doc["flops"] > 0 and doc["unsupported_ops"] == [], f"flops {doc['flops']}, {doc['unsupported_ops']}")

    elif mode in ("verify", "verify_given", "verify_exact"):
        has(doc, {"device": str, "ok": bool, "rtol": num, "atol": num, "inputs": list, "outputs": list,
                  "compared": int, "diverging": int, "max_abs_err": num, "errors": list,
                  "later_divergences": list, "device_steps": int, "ref_nodes": int}, "verify")
        if mode == "verify_exact":
            check(doc["device"] == "ref" and doc["rtol"] == 0 and doc["atol"] == 0 and doc["max_abs_err"] == 0,
                  f"exact: {doc}")
        check(doc["ok"] is True and doc["first_divergence"] is None and doc["errors"] == [], f"not ok: {doc}")
        check(doc["compared"] >= 1 and doc["diverging"] == 0, "compared")
        check(doc["max_abs_err"] <= 1e-3, f"max_abs_err {doc['max_abs_err']}")
        for o in doc["outputs"]:
            has(o, {"name": str, "ok": bool, "compared": bool}, "output")
            check(o["ok"] and o["compared"] and isinstance(o["max_abs_err"], num), f"output {o}")
        check(len(doc["outputs"]) >= 1, "no outputs")
        check(doc["later_divergences"] == [] and doc["ref_nodes"] >= 1 and doc["device_steps"] >= 1, "counts")
        word = "given" if mode == "verify_given" else "random normal(0,1)"
        check(all(word in d for d in doc["inputs"]), f"inputs {doc['inputs']}")

    elif mode in ("bench", "bench_noprof"):
        has(doc, {"device": str, "threads": int, "iterations": int, "warmup": int, "median_ms": num, "mean_ms": num,
                  "min_ms": num, "max_ms": num, "p10_ms": num, "p90_ms": num, "create_ms": num,
                  "first_run_ms": num, "throughput_per_s": num, "inputs": list}, "bench")
        check(doc["iterations"] == 5 and doc["warmup"] == 2, "iterations/warmup")
        check(0 < doc["min_ms"] <= doc["p10_ms"] <= doc["median_ms"] <= doc["p90_ms"] <= doc["max_ms"],
              f"order of the statistics {doc}")
        check(doc["min_ms"] <= doc["mean_ms"] <= doc["max_ms"], "mean")
        if mode == "bench":
            has(doc, {"kernels": list, "profiled_ms": num}, "bench")
            ks = doc["kernels"]
            check(len(ks) >= 1, "no kernels")
            for k in ks:
                has(k, {"name": str, "op": str, "calls": int, "total_ms": num, "ms_per_run": num, "percent": num},
                    "kernel")
                check(k["calls"] == 5, f"calls {k}")
            check(math.isclose(sum(k["percent"] for k in ks), 100, abs_tol=0.01), "percent sum")
            check([k["total_ms"] for k in ks] == sorted((k["total_ms"] for k in ks), reverse=True), "sorted")
        else:
            check("kernels" not in doc, "kernels without profile")
    else:
        failures.append(f"unknown mode {mode}")

for f in failures:
    print(f"FAIL ({mode}): {f}")
sys.exit(1 if failures else 0)
