#!/usr/bin/env python3
"""Writes the seed corpus and dictionary of the whole-pipeline fuzz target.

    /usr/bin/python3 tests/fuzz/make_pipeline_seeds.py [NODE_SUITE_DIR]

Seeds (tests/fuzz/corpus_pipeline/): for each distinct set of op types in
the official node suite's models (libonnx-testdata), its smallest model, so
every op is seeded alone and in the combinations the suite has (If, Loop and
Scan with their bodies too). Models over 4 KiB are skipped: mutations of
small protobufs reach more of the pipeline per second. Files named
regress-* are inputs that once broke kiln (see docs/TESTING.md); they are
kept.

Dictionary (tests/fuzz/pipeline.dict): every op type, attribute name, domain
and dim_param of those models, and the protobuf tags and dtype varints a
mutation needs to retype a tensor or an attribute.

Uses Debian's /usr/bin/python3 with python3-onnx (onnx only reads here).
Rerun it when the node suite changes; the outputs are committed.
"""
import hashlib
import os
import sys

import onnx

here = os.path.dirname(os.path.abspath(__file__))
suite = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/libonnx-testdata/data/node"
corpus = os.path.join(here, "corpus_pipeline")
MAX_SEED_BYTES = 4096

best = {}  # op type -> (size, path)
strings = set()
for case in sorted(os.listdir(suite)):
    path = os.path.join(suite, case, "model.onnx")
    if not os.path.exists(path):
        continue
    size = os.path.getsize(path)
    m = onnx.load(path)
    for n in m.graph.node:
        strings.add(n.op_type)
        if n.domain:
            strings.add(n.domain)
        for a in n.attribute:
            strings.add(a.name)
    for v in list(m.graph.input) + list(m.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                strings.add(d.dim_param)
    if size > MAX_SEED_BYTES:
        continue
    key = "+".join(sorted({n.op_type for n in m.graph.node}))
    if key not in best or size < best[key][0]:
        best[key] = (size, path)

os.makedirs(corpus, exist_ok=True)
for f in os.listdir(corpus):
    if not f.startswith(("regress-", "narrow-", "image-")):  # fixed findings, make_narrow_seeds.py and make_image_seeds.py stay
        os.remove(os.path.join(corpus, f))
for key, (size, path) in sorted(best.items()):
    data = open(path, "rb").read()
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(corpus, name), "wb") as out:
        out.write(data)

def escape(s):
    return "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c) for c in s)

entries = ['"%s"' % escape(s) for s in sorted(strings)]
# TensorProto.DataType varints after the elem_type / data_type tags, small
# ints and dims as varints, -1 as an int64 varint, a dim_param.
for tag in (0x08, 0x10):
    entries += ['"\\x%02x\\x%02x"' % (tag, v) for v in list(range(1, 27)) + [0x7f]]
entries.append('"\\x08\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x01"')
entries.append('"\\x12\\x01N"')
with open(os.path.join(here, "pipeline.dict"), "w") as d:
    d.write("# libFuzzer dictionary for fuzz_pipeline (made by make_pipeline_seeds.py):\n")
    d.write("# the node suite's op types, attribute names, domains and dim_params,\n")
    d.write("# dtype and small-int varints after the 0x08 / 0x10 tags, -1, a dim_param\n")
    d.write("\n".join(dict.fromkeys(entries)) + "\n")
print("%d seeds in %s, %d dictionary strings" % (len(best), corpus, len(strings)))
