#!/usr/bin/env bash
# Control flow on a compiling device (default cpu; KILN_CF_DEVICE): `kiln
# info` lists each body's plan, control flow known before running is
# inlined, a malformed body or trip count fails with
# an error naming the node, and a Loop whose carried value changes shape
# every iteration runs past the signature bound on the interpreter, with
# the right result and the reason in `kiln info`-style output.
#   test_control_flow.sh KILN_BINARY SOURCE_DIR
set -uo pipefail
kiln=$1 src=$2
py=/usr/bin/python3
dev=${KILN_CF_DEVICE:-cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
. "$(dirname "$0")/lib.sh"
if ! "$py" -c 'import onnx, numpy' >/dev/null 2>&1; then
  echo "SKIP: $py with onnx and numpy is needed"; exit 77
fi
"$py" "$src/tests/diff/gen_control_flow.py" "$tmp" || exit 1
"$py" - "$tmp" <<'PY' || exit 1
import sys, numpy as np, onnx
from onnx import helper, TensorProto as T, numpy_helper
d = sys.argv[1]
n, vi = helper.make_node, helper.make_tensor_value_info
def save(name, nodes, ins, outs, inits=()):
    g = helper.make_graph(nodes, name, ins, outs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]); m.ir_version = 8
    onnx.save(m, '%s/%s.onnx' % (d, name))
M3 = numpy_helper.from_array(np.array(3, np.int64), 'M')
# the body declares 4 inputs; Loop gives it 3
body = helper.make_graph([n('Identity', ['c'], ['co']), n('Relu', ['h'], ['h2'])], 'body',
    [vi('i', T.INT64, []), vi('c', T.BOOL, []), vi('h', T.FLOAT, [4]), vi('extra', T.FLOAT, [4])],
    [vi('co', T.BOOL, []), vi('h2', T.FLOAT, [4])])
save('bad_body', [n('Loop', ['M', '', 'x'], ['y'], body=body, name='bad_loop')], [vi('x', T.FLOAT, [4])],
     [vi('y', T.FLOAT, [4])], [M3])
# a trip count of two elements
body = helper.make_graph([n('Identity', ['c'], ['co']), n('Relu', ['h'], ['h2'])], 'body',
    [vi('i', T.INT64, []), vi('c', T.BOOL, []), vi('h', T.FLOAT, [4])], [vi('co', T.BOOL, []), vi('h2', T.FLOAT, [4])])
save('bad_trip', [n('Loop', ['M', '', 'x'], ['y'], body=body, name='bad_trip')],
     [vi('x', T.FLOAT, [4]), vi('M', T.INT64, [2])], [vi('y', T.FLOAT, [4])])
np.save('%s/x4.npy' % d, np.arange(4, dtype=np.float32))
np.save('%s/m2.npy' % d, np.array([2, 3], np.int64))
# a carried value that grows by one row per iteration: 12 signatures (the condition i < 1000 is
# true throughout, but only the run tells, so the optimizer does not unroll the loop)
body = helper.make_graph([n('Less', ['i', 'big'], ['co']), n('Relu', ['h'], ['r']), n('Concat', ['r', 'row'], ['h2'], axis=0)],
    'body', [vi('i', T.INT64, []), vi('c', T.BOOL, []), vi('h', T.FLOAT, [None, 4])],
    [vi('co', T.BOOL, []), vi('h2', T.FLOAT, [None, 4])])
save('growing', [n('Loop', ['M', '', 'x'], ['y'], body=body, name='grow')], [vi('x', T.FLOAT, [1, 4])],
     [vi('y', T.FLOAT, [None, 4])], [numpy_helper.from_array(np.array(12, np.int64), 'M'),
                                     numpy_helper.from_array(np.ones((1, 4), np.float32), 'row'),
                                     numpy_helper.from_array(np.array(1000, np.int64), 'big')])
np.save('%s/x14.npy' % d, np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5)
PY

"$kiln" info "$tmp/cf_nested_if.onnx" --device "$dev" >"$tmp/info" 2>&1
check "info: a line per body plan, the nested ones indented" \
  "grep -q \"^body of If 'If_2' (then_branch) for \[.*\]: 3 kernels\" $tmp/info && grep -q \"^  body of If 'If_3' (else_branch)\" $tmp/info"
check "info: the If is a control-flow node on the host, not a fallback" \
  "grep -q '1 control-flow nodes on the host' $tmp/info && ! grep -qE '^  If +If_' $tmp/info"
"$kiln" info "$tmp/cf_loop_dynamic_trip.onnx" --device "$dev" >"$tmp/info2" 2>&1
check "info: the Loop body's plan, its integer counter and condition compiled too" \
  "grep -qE \"^body of Loop 'Loop_[0-9]+' \(body\) for \[i64\[\], bool\[\], f32\[3,8\].*\]: 2 kernels \(fusing 6 nodes\), 0 nodes on ref\" $tmp/info2"

expect_error "a body with the wrong input count names the node" "node 'bad_loop' \(Loop\): body takes 4 inputs" -- \
  run "$tmp/bad_body.onnx" --device "$dev" --input x="$tmp/x4.npy"
expect_error "a bad trip count names the node" "node 'bad_trip' \(Loop\): input 0 \(M\) must be an integer scalar" -- \
  run "$tmp/bad_trip.onnx" --device "$dev" --input x="$tmp/x4.npy" --input M="$tmp/m2.npy"

"$kiln" info "$tmp/cf_split_sequence_unrolled.onnx" --device "$dev" >"$tmp/info3" 2>&1
check "info: a fixed-trip Loop, a constant If and the list they build inlined and folded: nothing on the host" \
  "grep -q '0 nodes on ref' $tmp/info3 && ! grep -q 'control-flow' $tmp/info3 && ! grep -q 'host-only' $tmp/info3"
"$kiln" run "$tmp/growing.onnx" --device "$dev" --input x="$tmp/x14.npy" --output-dir "$tmp/o_dev" >/dev/null 2>"$tmp/err_dev"
"$kiln" run "$tmp/growing.onnx" --device ref --input x="$tmp/x14.npy" --output-dir "$tmp/o_ref" >/dev/null 2>&1
check "a carried value that changes shape every iteration: same result as ref past the bound" \
  "[ -f $tmp/o_dev/output_0.npy ] && cmp -s $tmp/o_dev/output_0.npy $tmp/o_ref/output_0.npy"

echo "$fails failure(s)"
[ $fails -eq 0 ]
