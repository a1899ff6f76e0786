#!/usr/bin/env bash
# Writes the newest ONNX node cases (issue 13) into OUT, once: makes the
# venv of scripts/python-venv.sh (pip's onnx, pinned there) if it is
# missing, then runs gen_onnx_node_cases.py with its python. Idempotent: a
# folder already written from the same onnx version is left as it is.
#   tests/conformance/latest_cases.sh SOURCE_DIR OUT
set -euo pipefail
src=$1
out=$2
py=$("$src/scripts/python-venv.sh" "$src/bench/.venv" | tail -1)
exec "$py" "$src/tests/conformance/gen_onnx_node_cases.py" "$out"
