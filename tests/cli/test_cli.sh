#!/usr/bin/env bash
# The `kiln` command's contract: exit codes, one-line errors that name the
# input and what was expected, outputs written as .npy, info and devices.
#   test_cli.sh KILN_BINARY SOURCE_DIR ONNX_TESTDATA_DIR
set -uo pipefail
kiln=$1 src=$2 data=$3
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/lib.sh"

check "--version" '"$kiln" --version | grep -q "^kiln [0-9]"'
check "help" '"$kiln" help | grep -q "run MODEL.onnx"'
check "run --help" '"$kiln" run --help | grep -q "output-dir"'
check "info --help" '"$kiln" info --help | grep -q "dot"'
check "devices lists ref" '"$kiln" devices | grep -q "^ref "'
# --json: kiln_devices_json's object, the same devices as the text.
check "devices --json parses and names the same devices" \
  '"$kiln" devices --json | $py -c "import json, sys; d = json.load(sys.stdin); print(\"\n\".join(x[\"name\"] for x in d[\"devices\"]))" > "$tmp/dev_json.txt" &&
   "$kiln" devices | grep -v "^ " | grep -v " absent: " | cut -d" " -f1 > "$tmp/dev_text.txt" && diff "$tmp/dev_json.txt" "$tmp/dev_text.txt"'
check "unknown command exits non-zero" '! "$kiln" frobnicate 2>/dev/null'

model=$data/node/test_add/model.onnx
$py - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
x = rng.standard_normal((3, 4, 5)).astype(np.float32)
y = rng.standard_normal((3, 4, 5)).astype(np.float32)
np.save(f"{d}/x.npy", x); np.save(f"{d}/y.npy", y); np.save(f"{d}/sum.npy", x + y)
np.save(f"{d}/y_bad_shape.npy", y[:, :, :2].copy())
np.save(f"{d}/y_f64.npy", y.astype(np.float64))
PY

expect_error "missing model file" "no-such.onnx" -- run "$tmp/no-such.onnx"
expect_error "missing input names it and its type" "'y'.*f32\[3,4,5\]" -- run "$model" --input x="$tmp/x.npy"
expect_error "extra input is named" "'z'" -- run "$model" --input x="$tmp/x.npy" --input y="$tmp/y.npy" --input z="$tmp/y.npy"
expect_error "mis-shaped input names expected shape" "'y'.*f32\[3,4,5\].*\[3,4,2\]" -- run "$model" --input x="$tmp/x.npy" --input y="$tmp/y_bad_shape.npy"
expect_error "wrong dtype is named" "'y'.*f32.*f64" -- run "$model" --input x="$tmp/x.npy" --input y="$tmp/y_f64.npy"
expect_error "missing .npy file" "nope.npy" -- run "$model" --input x="$tmp/nope.npy" --input y="$tmp/y.npy"
expect_error "bad --input syntax" "NAME=FILE" -- run "$model" --input x
head -c 100 "$model" > "$tmp/truncated.onnx"
expect_error "truncated model" "truncated|malformed|invalid|past the end" -- run "$tmp/truncated.onnx"
expect_error "unknown device" "no device named 'warp9'" -- run "$model" --device warp9 --input x="$tmp/x.npy" --input y="$tmp/y.npy"

"$kiln" run "$model" --input x="$tmp/x.npy" --input y="$tmp/y.npy" --output-dir "$tmp/out1"
check "run writes output_0.npy equal to x+y" \
  "$py -c 'import numpy as np,sys; a=np.load(\"$tmp/out1/output_0.npy\"); b=np.load(\"$tmp/sum.npy\"); sys.exit(0 if a.dtype==b.dtype and a.shape==b.shape and np.allclose(a,b,rtol=1e-6,atol=0) else 1)'"
check "run prints name, dtype, shape, values" \
  '"$kiln" run "$model" --input x="$tmp/x.npy" --input y="$tmp/y.npy" | grep -q "^sum: f32 \[3,4,5\]"'

# An index out of range at run time: the compiled Gather's range check (the
# plan, before the kernel) gives the error ref gives, naming node and input.
$py - "$tmp" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T
d = sys.argv[1]
g = h.make_graph([h.make_node("Gather", ["data", "ids"], ["y"], name="lookup", axis=0)], "g",
                 [h.make_tensor_value_info("data", T.FLOAT, [5, 3]), h.make_tensor_value_info("ids", T.INT64, [4])],
                 [h.make_tensor_value_info("y", T.FLOAT, [4, 3])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)]); m.ir_version = 8
onnx.save(m, f"{d}/gather.onnx")
np.save(f"{d}/data.npy", np.arange(15, dtype=np.float32).reshape(5, 3))
np.save(f"{d}/ids_ok.npy", np.array([0, -1, 4, -5], np.int64))
np.save(f"{d}/ids_bad.npy", np.array([0, 5, 1, 2], np.int64))
PY
for dev in cpu ref; do
  expect_error "run-time Gather index out of range on $dev" "lookup.*indices.*5 out of range \[-5, 5\)" -- \
    run "$tmp/gather.onnx" --device $dev --input data="$tmp/data.npy" --input ids="$tmp/ids_bad.npy"
done
check "run-time Gather indices, negative ones too, on cpu" \
  '"$kiln" run "$tmp/gather.onnx" --device cpu --input data="$tmp/data.npy" --input ids="$tmp/ids_ok.npy" | grep -q "values: 0 1 2 12 13 14 12 13 14 0"'

# The same check for GatherElements' and ScatterND's run-time indices (compiled on cpu).
$py - "$tmp" <<'PY'
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T
d = sys.argv[1]
for op, ids_shape, extra in (("GatherElements", [2, 3], []), ("ScatterND", [2, 1], ["upd"])):
    ins = [h.make_tensor_value_info("data", T.FLOAT, [5, 3]), h.make_tensor_value_info("ids", T.INT64, ids_shape)]
    if extra:
        ins.append(h.make_tensor_value_info("upd", T.FLOAT, [2, 3]))
    g = h.make_graph([h.make_node(op, ["data", "ids"] + extra, ["y"], name="pick")], "g", ins,
                     [h.make_tensor_value_info("y", T.FLOAT, ids_shape if op == "GatherElements" else [5, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)]); m.ir_version = 8
    onnx.save(m, f"{d}/{op}.onnx")
np.save(f"{d}/ids23_bad.npy", np.array([[0, 1, -6], [4, 0, 2]], np.int64))
np.save(f"{d}/ids21_bad.npy", np.array([[1], [5]], np.int64))
np.save(f"{d}/upd.npy", np.ones((2, 3), np.float32))
PY
for dev in cpu ref; do
  expect_error "run-time GatherElements index out of range on $dev" "pick.*indices.*-6 out of range \[-5, 5\)" -- \
    run "$tmp/GatherElements.onnx" --device $dev --input data="$tmp/data.npy" --input ids="$tmp/ids23_bad.npy"
  expect_error "run-time ScatterND index out of range on $dev" "pick.*indices.*5 out of range \[-5, 5\)" -- \
    run "$tmp/ScatterND.onnx" --device $dev --input data="$tmp/data.npy" --input ids="$tmp/ids21_bad.npy" \
    --input upd="$tmp/upd.npy"
done

conv=$data/node/test_basic_conv_with_padding/model.onnx
check "info shows op histogram and FLOPs" '"$kiln" info "$conv" | grep -q "Conv" && "$kiln" info "$conv" | grep -q "estimated FLOPs: [1-9]"'
check "info --dot is Graphviz" '"$kiln" info "$conv" --dot | head -1 | grep -q "^digraph"'
check "info --device cpu --json is kiln_session_report_json's object" \
  '"$kiln" info "$conv" --device cpu --json | $py -c "import json, sys; d = json.load(sys.stdin); assert d[\"device\"] == \"cpu\" and d[\"kernels\"] and \"arena_bytes\" in d[\"memory\"], d"'
check "info --json is kiln_model_info_json's object" \
  '"$kiln" info "$conv" --json | $py -c "import json, sys; d = json.load(sys.stdin); assert d[\"op_histogram\"] == [{\"op\": \"Conv\", \"count\": 1}] and d[\"flops\"] > 0, d"'
check "info --json lists the unsupported ops" \
  '"$kiln" info "$src/tests/conformance/models/unknown_op.onnx" --json | $py -c "import json, sys; u = json.load(sys.stdin)[\"unsupported_ops\"]; assert len(u) == 1 and u[0].startswith(\"NoSuchOp \"), u"'
expect_error "info --json and --dot" "one at a time" -- info "$conv" --json --dot
check "info reports unsupported ops" '"$kiln" info "$src/tests/conformance/models/unknown_op.onnx" | grep -q "unsupported ops: .*NoSuchOp"'
expect_error "run refuses unknown ops, naming them" "NoSuchOp" -- run "$src/tests/conformance/models/unknown_op.onnx"

check "without a C compiler cpu runs on its precompiled kernels" \
  'KILN_CC=/nonexistent/cc "$kiln" run "$model" --device cpu --input x="$tmp/x.npy" --input y="$tmp/y.npy" | grep -q "^sum: f32"'
check "without a C compiler the default device is still cpu" \
  'KILN_CC=/nonexistent/cc "$kiln" devices | head -1 | grep -q "^cpu .*JIT unavailable"'

echo "$fails failed"
[ "$fails" -eq 0 ]
