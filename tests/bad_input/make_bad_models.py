"""Writes hostile or broken ONNX models (and inputs) into a folder, one case
per file, for test_bad_models.sh. Run with Debian's /usr/bin/python3 (onnx,
numpy). Each case is `<name>.onnx` plus optional `<name>.<input>.npy`, and
`<name>.expect` holds an extended regex the one-line error must match."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, model, expect, inputs=None, check=False, env=None):
    """env: environment variables the case runs with (a `<name>.env` file)."""
    path = os.path.join(out, name + ".onnx")
    if env:
        open(os.path.join(out, name + ".env"), "w").write("".join(f"{k}={v}\n" for k, v in env.items()))
    if isinstance(model, bytes):
        open(path, "wb").write(model)
    else:
        onnx.save(model, path)
    open(os.path.join(out, name + ".expect"), "w").write(expect + "\n")
    for k, v in (inputs or {}).items():
        np.save(os.path.join(out, f"{name}.{k}.npy"), v)


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


f32 = TensorProto.FLOAT
vi = helper.make_tensor_value_info
x4 = np.random.default_rng(1).standard_normal(4).astype(np.float32)

# Structure
save("cycle", model([helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2")],
                    [vi("x", f32, [4])], [vi("b", f32, [4])]), "cycle", {"x": x4})
save("unknown_op", model([helper.make_node("Frobnicate", ["x"], ["y"], name="f")], [vi("x", f32, [4])], [vi("y", f32, [4])]),
     "Frobnicate", {"x": x4})
m = model([helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example.nothing")], [vi("x", f32, [4])], [vi("y", f32, [4])])
m.opset_import.append(helper.make_opsetid("com.example.nothing", 1))
save("unknown_domain", m, "com.example.nothing", {"x": x4})
save("missing_initializer", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])]),
     "'w'", {"x": x4})
save("produced_twice", model([helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Relu", ["x"], ["y"], name="b")],
                             [vi("x", f32, [4])], [vi("y", f32, [4])]), "'y'.*produced", {"x": x4})
save("wrong_arity", model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", f32, [4])], [vi("y", f32, [4])]),
     "'r'.*inputs", {"x": x4})
save("output_never_produced", model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", f32, [4])], [vi("z", f32, [4])]),
     "'z'", {"x": x4})

# Shapes
save("inconsistent_shapes",
     model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])],
           [numpy_helper.from_array(np.ones(3, np.float32), "w")]), "'add'.*(broadcast|shape)", {"x": x4})
save("matmul_mismatch",
     model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", f32, [2, 4])], [vi("y", f32, None)],
           [numpy_helper.from_array(np.ones((3, 2), np.float32), "w")]), "'mm'", {"x": np.ones((2, 4), np.float32)})
def raw_tensor(name, dims, raw):
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, f32, raw
    t.dims.extend(dims)
    return t


huge = raw_tensor("w", [1 << 40, 1 << 30], b"")
save("huge_dims", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])], [huge]),
     "(too large|size|bytes|dims|data)", {"x": x4})
neg = raw_tensor("w", [-4], np.ones(4, np.float32).tobytes())
save("negative_dims", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])], [neg]),
     "(negative|dim)", {"x": x4})
short = raw_tensor("w", [4], np.ones(2, np.float32).tobytes())
save("short_raw_data", model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])], [short]),
     "'w'.*(bytes|size|data)", {"x": x4})
ext = raw_tensor("w", [4], b"")
ext.data_location = TensorProto.EXTERNAL
ext.external_data.add(key="location", value="../../../../etc/passwd")
# Serialized by hand: onnx.save would write (or truncate) the external files.
save("external_data_escape",
     model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])],
           [ext]).SerializeToString(),
     "(external|location|\\.\\.)", {"x": x4})
ext2 = raw_tensor("w", [4], b"")
ext2.data_location = TensorProto.EXTERNAL
ext2.external_data.add(key="location", value="missing_weights.bin")
save("external_data_missing",
     model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", f32, [4])], [vi("y", f32, [4])],
           [ext2]).SerializeToString(),
     "missing_weights.bin", {"x": x4})

# Run time: indices read from data
idx = numpy_helper.from_array(np.array([0, 7], np.int64), "i")
save("gather_index_out_of_range",
     model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather")], [vi("x", f32, [4])], [vi("y", f32, [2])], [idx]),
     "'gather'.*7", {"x": x4})
save("scatter_index_out_of_range",
     model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="scatter")],
           [vi("x", f32, [4]), vi("i", TensorProto.INT64, [2]), vi("u", f32, [2])], [vi("y", f32, [4])]),
     "'scatter'.*(-9|range)", {"x": x4, "i": np.array([1, -9], np.int64), "u": np.ones(2, np.float32)})
save("reshape_bad_shape",
     model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")], [vi("x", f32, [4]), vi("s", TensorProto.INT64, [2])],
           [vi("y", f32, None)]), "'reshape'", {"x": x4, "s": np.array([3, 3], np.int64)})
save("constant_of_shape_huge",
     model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [vi("s", TensorProto.INT64, [3])], [vi("y", f32, None)]),
     "'cos'.*(too large|memory)", {"s": np.array([1 << 20, 1 << 20, 1 << 20], np.int64)})

# Found by fuzz_pipeline: the cpu device compiled it as a view of the
# declared output shape and read past the input.
save("reshape_without_shape",
     model([helper.make_node("Reshape", ["x"], ["y"], name="reshape")], [vi("x", f32, [4])], [vi("y", f32, [24])]),
     "'reshape'.*input 1 \\(shape\\) is required", {"x": x4})

# Limits a host sets (base/limits.h): a valid model that asks for more.
save("tensor_over_limit",
     model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [vi("s", TensorProto.INT64, [2])], [vi("y", f32, None)]),
     "'cos'.*too large \\(limit 1048576 bytes, KILN_MAX_TENSOR_BYTES\\)", {"s": np.array([1024, 1024], np.int64)},
     env={"KILN_MAX_TENSOR_BYTES": "1M"})
body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
                         "body", [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("v_in", f32, [4])],
                         [vi("cond_out", TensorProto.BOOL, []), vi("v_out", f32, [4])])
save("loop_past_run_timeout",  # 2^40 iterations: stopped by KILN_RUN_TIMEOUT, not by the 2^31 guard hours later
     model([helper.make_node("Loop", ["m", "", "x"], ["y"], name="loop", body=body)], [vi("x", f32, [4])], [vi("y", f32, [4])],
           [numpy_helper.from_array(np.array(1 << 40, np.int64), "m")]),
     "'loop'.*took longer than its limit of 1 s \\(KILN_RUN_TIMEOUT\\)", {"x": x4}, env={"KILN_RUN_TIMEOUT": "1"})

# Window geometry of the opset 18-24 ops: pads near 2^62 overflowed int64
# sums (Col2Im, DeformConv) before they were bounded.
cols = np.ones((1, 4, 1), np.float32)
save("col2im_huge_pads",
     model([helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], name="c2i", pads=[1 << 62] * 4)], [vi("x", f32, [1, 4, 1])],
           [vi("y", f32, None)], [numpy_helper.from_array(np.array([3, 4], np.int64), "img"),
                                  numpy_helper.from_array(np.array([2, 2], np.int64), "blk")], opset=18),
     "'c2i'.*pads", {"x": cols})
save("deform_conv_huge_pads",
     model([helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="dc", pads=[1 << 40] * 4)], [vi("x", f32, [1, 1, 3, 3])],
           [vi("y", f32, None)], [numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "w"),
                                  numpy_helper.from_array(np.ones((1, 8, 2, 2), np.float32), "off")], opset=22),
     "'dc'", {"x": np.ones((1, 1, 3, 3), np.float32)})
save("tensor_scatter_past_the_end",
     model([helper.make_node("TensorScatter", ["past", "upd", "wi"], ["y"], name="ts")], [vi("past", f32, [2, 4, 3])],
           [vi("y", f32, None)], [numpy_helper.from_array(np.ones((2, 2, 3), np.float32), "upd"),
                                  numpy_helper.from_array(np.array([(1 << 63) - 1, 0], np.int64), "wi")], opset=24),
     "'ts'.*write_indices", {"past": np.ones((2, 4, 3), np.float32)})

# Bytes that are not a model
good = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", f32, [4])], [vi("y", f32, [4])]).SerializeToString()
save("truncated", good[: len(good) // 2], "(truncated|past the end|malformed)", {"x": x4})
save("garbage", bytes(range(256)) * 4, "(malformed|invalid|wire|past the end|truncated|field)", {"x": x4})
save("empty_file", b"", "(empty|no graph|graph)", {"x": x4})
# A length prefix claiming ~2^62 bytes.
save("huge_length", b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\x3f", "(past the end|truncated|length)", {"x": x4})
# Narrow dtypes (ONNX 17-26; set by number: this onnx may predate them).
INT4, F8E4M3FN = 22, 17


def typed_raw(name, dtype, dims, raw):
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, dtype, raw
    t.dims.extend(dims)
    return t


# An odd-length int4 initializer whose raw_data lacks the padding nibble's byte.
save("int4_odd_no_padding",
     model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", INT4, [3])],
           [typed_raw("w", INT4, [3], b"\x21")], opset=21),
     "'w'.*raw_data holds 1 bytes but i4 \\[3\\] needs 2")
# An op whose schema does not name float8 must refuse it, naming node and input.
save("relu_float8",
     model([helper.make_node("Relu", ["w"], ["y"], name="relu")], [], [vi("y", F8E4M3FN, [2])],
           [typed_raw("w", F8E4M3FN, [2], b"\x38\x40")], opset=21),
     "'relu'.*input 0 has dtype f8e4m3fn; Relu does not take")
# A float8 zero point that is a NaN encoding.
save("dequantize_float8_nan_zero_point",
     model([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")], [], [vi("y", f32, [2])],
           [typed_raw("q", F8E4M3FN, [2], b"\x38\x40"), numpy_helper.from_array(np.array(2.0, np.float32), "s"),
            typed_raw("z", F8E4M3FN, [], b"\x7f")], opset=21),
     "'dq'.*input 2 \\(x_zero_point\\): element 0 is a f8e4m3fn NaN")
# ImageDecoder: broken image bytes are one-line errors naming the node.
def image_bytes(fmt):
    try:
        import io
        from PIL import Image
        b = io.BytesIO()
        Image.fromarray(np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3), "RGB").save(b, fmt)
        return b.getvalue()
    except ImportError:  # without Pillow: a JPEG header and its first segment, cut short
        return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + b"\xff\xdb\x00\x43\x00" * 64


decoder = model([helper.make_node("ImageDecoder", ["x"], ["y"], name="dec")], [vi("x", TensorProto.UINT8, [None])],
                [vi("y", TensorProto.UINT8, None)], opset=20)
save("image_decoder_truncated_jpeg", decoder, "'dec'.*JPEG: (Premature end|.*)",
     {"x": np.frombuffer(image_bytes("JPEG")[:300], np.uint8)})
save("image_decoder_truncated_png", decoder, "'dec'.*PNG: ",
     {"x": np.frombuffer(image_bytes("PNG")[:-30], np.uint8)})
save("image_decoder_random_bytes", decoder, "'dec'.*no supported image format",
     {"x": np.concatenate([[0], np.random.default_rng(7).integers(0, 256, 999)]).astype(np.uint8)})
save("image_decoder_empty", decoder, "'dec'.*encoded_stream.*empty", {"x": np.zeros(0, np.uint8)})
bmp = bytearray(image_bytes("BMP"))
bmp[18:26] = (1 << 30).to_bytes(4, "little") + (1 << 30).to_bytes(4, "little")  # a header claiming 2^60 pixels
save("image_decoder_bmp_huge", decoder, "'dec'.*BMP", {"x": np.frombuffer(bytes(bmp), np.uint8)})

# Deeply nested If subgraphs.
leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "leaf", [], [vi("o", f32, [4])])
inner = leaf
for d in range(200):
    n = helper.make_node("If", ["c"], ["o"], then_branch=inner, else_branch=leaf)
    inner = helper.make_graph([n], f"g{d}", [], [vi("o", f32, [4])])
deep = model(list(inner.node), [vi("c", TensorProto.BOOL, []), vi("x", f32, [4])], [vi("o", f32, [4])])
save("deep_nesting", deep, "(depth|nest|deep)", {"c": np.array(True), "x": x4})
print(f"wrote {len(os.listdir(out))} files to {out}")
