#!/usr/bin/env bash
# Creates (once) the Python virtual environment that the benchmarks and the
# zoo check run ONNX Runtime in, and pip-installs onnxruntime, onnx, numpy,
# pytest and mypy there (onnx: onnxruntime.quantization needs it, and its
# wheel ships the light_* models; pytest and mypy: the Python package's
# tests, python/tests, and its annotations). Idempotent: when the venv exists
# and imports all five (onnx at its pin) it does nothing, without touching
# the network. Uses the
# first `python3` on PATH (Debian's /usr/bin/python3 has torch for the
# exports; this one need not).
#
#   scripts/python-venv.sh [--update] [VENV_DIR]     (default: bench/.venv)
#
# --update pip-upgrades onnxruntime and numpy (onnx stays at its pin). Prints the venv's python path last.
set -euo pipefail
cd "$(dirname "$0")/.."
update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
venv=${1:-bench/.venv}
py="$venv/bin/python"
if [ ! -x "$py" ]; then
  echo "python-venv: creating $venv with $(command -v python3)" >&2
  python3 -m venv "$venv"
fi
# onnx is pinned: its node cases are the newest-ONNX conformance suite
# (tests/conformance/gen_onnx_node_cases.py), whose expected-pass list is
# written for this version.
onnx_pin=1.23.2
if [ "$update" = 1 ] || ! "$py" -c "import onnxruntime, numpy, onnx, pytest, mypy; assert onnx.__version__ == '$onnx_pin'" >/dev/null 2>&1; then
  echo "python-venv: pip-installing onnxruntime, onnx==$onnx_pin, numpy, pytest and mypy into $venv" >&2
  "$py" -m pip install --quiet --disable-pip-version-check --upgrade onnxruntime "onnx==$onnx_pin" numpy pytest mypy >&2
fi
echo "$py"
