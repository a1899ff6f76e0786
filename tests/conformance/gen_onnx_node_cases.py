#!/usr/bin/env python3
"""Writes the node test cases of the `onnx` wheel in the backend-test layout
(OUT/node/CASE/model.onnx, OUT/node/CASE/test_data_set_N/{input,output}_K.pb),
the layout kiln_conformance reads for Debian's libonnx-testdata (issue 13,
item 1: today's ONNX, opsets 18-28).

    bench/.venv/bin/python tests/conformance/gen_onnx_node_cases.py OUT

Run it with the Python of the venv scripts/python-venv.sh makes (pip's onnx
wheel, pinned there): the wheel ships its node cases as generators only
(onnx.backend.test.case.node.collect_testcases), not as data. The cases
compute their expected outputs with numpy or onnx's reference evaluator as
the wheel's own `backend-test-tools generate-data` does for model cases.

Idempotent: OUT/ONNX_VERSION records the wheel it was written from, and a
folder written by the same version is left as it is. Prints the number of
cases written.
"""
import os
import shutil
import sys
import warnings


def write_case(out_dir, case):
    from onnx import TensorProto, numpy_helper
    case_dir = os.path.join(out_dir, case.kind, case.name)
    os.makedirs(case_dir, exist_ok=True)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        ds = os.path.join(case_dir, f"test_data_set_{i}")
        os.makedirs(ds, exist_ok=True)
        for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                info = infos[j]
                t = info.type
                if t.HasField("map_type"):
                    proto = numpy_helper.from_dict(value, info.name)
                elif t.HasField("sequence_type"):
                    proto = numpy_helper.from_list(value, info.name)
                elif t.HasField("optional_type"):
                    proto = numpy_helper.from_optional(value, info.name)
                elif isinstance(value, TensorProto):
                    proto = value
                else:
                    proto = numpy_helper.from_array(value, info.name)
                with open(os.path.join(ds, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    import onnx
    from onnx.backend.test.case import node as node_cases
    stamp = os.path.join(out, "ONNX_VERSION")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == onnx.__version__:
                n = len(os.listdir(os.path.join(out, "node")))
                print(f"gen_onnx_node_cases: {out} already holds onnx {onnx.__version__}'s {n} node cases")
                return
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "node"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own divide-by-zero and cast warnings
        cases = node_cases.collect_testcases(None)
    for case in cases:
        write_case(out, case)
    with open(stamp, "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"gen_onnx_node_cases: {len(cases)} node cases of onnx {onnx.__version__} in {out}/node")


if __name__ == "__main__":
    main()
