#!/usr/bin/env bash
# `kiln bench` and `kiln verify`: statistics in text and JSON, the profile
# table, random inputs (symbolic dims, integer inputs), and that verify
# passes ref against ref and finds an injected error at the right node.
#   test_bench_verify.sh KILN_BINARY SOURCE_DIR
set -uo pipefail
kiln=$1 src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/lib.sh"

# A small model: x f32[N,8] (N symbolic), idx i64[4] (indices into a [4,8] table):
#   h = relu1(mm1(x, W1) + b1); y = mm2(h, W2); e = gather(T, idx); z = reduce(e)
$py - "$tmp" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
d = sys.argv[1]
rng = np.random.default_rng(3)
inits = [nh.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in [("W1", (8, 16)), ("b1", (16,)), ("W2", (16, 4)), ("T", (4, 8))]]
nodes = [
    h.make_node("MatMul", ["x", "W1"], ["mm1_out"], name="mm1"),
    h.make_node("Add", ["mm1_out", "b1"], ["add1_out"], name="add1"),
    h.make_node("Relu", ["add1_out"], ["h"], name="relu1"),
    h.make_node("MatMul", ["h", "W2"], ["y"], name="mm2"),
    h.make_node("Gather", ["T", "idx"], ["e"], name="gather1", axis=0),
    h.make_node("ReduceSum", ["e"], ["z"], name="reduce1", keepdims=0),
]
g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, ["N", 8]),
                                h.make_tensor_value_info("idx", T.INT64, [4])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 4]), h.make_tensor_value_info("z", T.FLOAT, [])],
                 inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, f"{d}/m.onnx")
np.save(f"{d}/x.npy", rng.standard_normal((5, 8)).astype(np.float32))
PY
m=$tmp/m.onnx

check "help lists bench and verify" '"$kiln" help | grep -q "bench MODEL" && "$kiln" help | grep -q "verify MODEL"'
check "bench --help" '"$kiln" bench --help | grep -q -- "--iterations"'
check "verify --help" '"$kiln" verify --help | grep -q -- "--rtol"'

# bench: text report
"$kiln" bench "$m" --device ref --warmup 1 --iterations 7 >"$tmp/bench.txt" 2>&1; rc=$?
check "bench exits 0" '[ $rc -eq 0 ]'
for w in median p10 p90 min throughput "peak RSS" "7 timed"; do
  check "bench prints '$w'" 'grep -q "$w" "$tmp/bench.txt"'
done
check "bench: symbolic dim N defaults to 1" 'grep -q "x f32\[1,8\] random normal(0,1)" "$tmp/bench.txt"'
check "bench: integer input is random small ints" 'grep -q "idx i64\[4\] random ints in \[0,3\]" "$tmp/bench.txt"'

# bench --json: one valid object with consistent statistics
"$kiln" bench "$m" --device ref --warmup 0 --iterations 6 --dim N=3 --json >"$tmp/bench.json" 2>"$tmp/err"; rc=$?
check "bench --json exits 0" '[ $rc -eq 0 ]'
check "bench --json is one valid JSON object with the statistics" "$py - '$tmp/bench.json' <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
l = j['latency_ms']
assert j['iterations'] == 6 and len(j['samples_ms']) == 6, j
assert l['min'] <= l['p10'] <= l['median'] <= l['p90'] <= l['max'], l
assert j['throughput_per_s'] > 0 and j['peak_rss_bytes'] > 0 and j['device'] == 'ref', j
assert any('x f32[3,8]' in s for s in j['inputs']), j['inputs']
PY"
check "bench --input file" '"$kiln" bench "$m" --device ref --iterations 2 --input x="$tmp/x.npy" | grep -q "x f32\[5,8\] from"'

# bench --profile: table sorted by time, naming every node
"$kiln" bench "$m" --device ref --warmup 1 --iterations 3 --profile >"$tmp/prof.txt" 2>&1; rc=$?
check "bench --profile exits 0" '[ $rc -eq 0 ]'
check "profile has a table header" 'grep -qE "#  op +node +ms/run +share +GFLOP/s +%peak" "$tmp/prof.txt"'
check "profile names the peak and how it was found" 'grep -qE "peak [0-9.]+ GFLOP/s = 1 thread x" "$tmp/prof.txt"'
for n in mm1 add1 relu1 mm2 gather1 reduce1; do
  check "profile lists node $n" 'grep -qE "^ +[0-9]+ +[A-Za-z]+ +$n " "$tmp/prof.txt"'
done
check "profile has the per-op summary" 'grep -q "by op type" "$tmp/prof.txt"'
"$kiln" bench "$m" --device ref --iterations 2 --profile --json >"$tmp/prof.json" 2>"$tmp/err"
check "bench --profile --json: nodes sorted by time, shares sum to 1" "$py - '$tmp/prof.json' <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))['profile']
ms = [n['ms'] for n in p['nodes']]
assert sorted(n['name'] for n in p['nodes']) == sorted(['mm1', 'add1', 'relu1', 'mm2', 'gather1', 'reduce1'])
assert ms == sorted(ms, reverse=True), ms
assert abs(sum(n['share'] for n in p['nodes']) - 1) < 1e-3
assert p['peak_gflops'] > 0 and [n for n in p['nodes'] if n['name'] == 'mm1'][0]['flops'] == 2 * 8 * 16
PY"

# verify: ref against ref matches; an injected error is found at its node
"$kiln" verify "$m" --device ref >"$tmp/v.txt" 2>&1; rc=$?
check "verify ref vs ref exits 0" '[ $rc -eq 0 ]'
check "verify ref vs ref: all values match" 'grep -q "^verify: OK: all 6 values match" "$tmp/v.txt"'
"$kiln" verify "$m" --device ref --inject-error relu1 >"$tmp/v2.txt" 2>&1; rc=$?
check "verify --inject-error exits 1" '[ $rc -eq 1 ]'
check "verify reports the injected node first" 'grep -q "^FIRST DIVERGENCE at node #2 .relu1. (Relu), output 0 .h." "$tmp/v2.txt"'
check "verify reports shapes and the worst element" \
  'grep -q "output: device f32\[1,16\], ref f32\[1,16\]" "$tmp/v2.txt" && grep -qE "worst element \[0,8\]: device" "$tmp/v2.txt" && grep -q "1 of 16 elements beyond tolerance" "$tmp/v2.txt"'
check "verify summary names the node" 'grep -q "^verify: FAIL: .* first at node .relu1. (Relu)" "$tmp/v2.txt"'
# --json: kiln_verify_json's object, the same finding.
"$kiln" verify "$m" --device ref --inject-error relu1 --json >"$tmp/v2.json"; rc=$?
check "verify --json exits 1 and names the injected node" \
  '[ $rc -eq 1 ] && $py -c "import json, sys; d = json.load(open(sys.argv[1])); f = d[\"first_divergence\"]; assert not d[\"ok\"] and f[\"node\"] == \"relu1\" and f[\"op\"] == \"Relu\" and f[\"n_bad\"] == 1 and d[\"diverging\"] >= 1, d" "$tmp/v2.json"'
"$kiln" verify "$m" --device ref --json --rtol 0.5 >"$tmp/v.json"; rc=$?
check "verify --json: all match, the tolerances given" \
  '[ $rc -eq 0 ] && $py -c "import json, sys; d = json.load(open(sys.argv[1])); assert d[\"ok\"] and d[\"first_divergence\"] is None and d[\"compared\"] == 6 and d[\"rtol\"] == 0.5, d" "$tmp/v.json"'
"$kiln" verify "$m" --device ref --inject-error gather1 --input x="$tmp/x.npy" --dim N=5 >"$tmp/v3.txt" 2>&1; rc=$?
check "verify finds an error in an integer-input branch" '[ $rc -eq 1 ] && grep -q "first at node .gather1." "$tmp/v3.txt"'
"$kiln" verify "$m" --device ref --inject-error mm2 --atol 1e9 --rtol 0 >"$tmp/v4.txt" 2>&1; rc=$?
check "verify --atol: a loose tolerance accepts the error" '[ $rc -eq 0 ] && grep -q "^verify: OK" "$tmp/v4.txt"'

expect_error "bench: missing model" "no-such.onnx" -- bench "$tmp/no-such.onnx"
expect_error "bench: bad --iterations" "iterations takes an integer >= 1" -- bench "$m" --device ref --iterations 0
expect_error "bench: unknown option" "unknown option '--frob'" -- bench "$m" --device ref --frob
expect_error "bench: unknown --dim name" "no model input has a dimension named 'Q'" -- bench "$m" --device ref --dim Q=2
expect_error "bench: unknown --input name" "no input named 'q'" -- bench "$m" --device ref --input q="$tmp/x.npy"
expect_error "bench: unknown device" "no device named 'warp9'" -- bench "$m" --device warp9
expect_error "verify: unknown node for --inject-error" "no node named 'nope'" -- verify "$m" --device ref --inject-error nope
expect_error "verify: bad --rtol" "rtol takes a non-negative number" -- verify "$m" --device ref --rtol abc

if [ $fails -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all bench/verify checks passed"
