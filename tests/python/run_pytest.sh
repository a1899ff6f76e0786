#!/usr/bin/env bash
# Runs the Python package's tests (python/tests, pytest) with one python on
# one libkiln.so, the package used in place: PYTHONPATH=<repo>/python and
# KILN_LIBRARY=<lib>. Registered in ctest (tests/CMakeLists.txt) for the
# venv's python, Debian's /usr/bin/python3 and the ASan library.
#
#   tests/python/run_pytest.sh PYTHON|venv REPO LIBKILN BUILD_DIR [pytest args...]
#
# "venv" makes (idempotently) and uses scripts/python-venv.sh's bench/.venv.
# pytest's "no tests collected" (exit 5) is a failure here, like any other
# non-zero exit: a suite that runs nothing proves nothing.
set -uo pipefail
py=$1 repo=$2 lib=$3 build=$4
shift 4
if [ "$py" = venv ]; then
  py=$("$repo/scripts/python-venv.sh" "$repo/bench/.venv") || { echo "run_pytest: could not make the venv" >&2; exit 1; }
fi
if ! "$py" -c "import pytest" 2>/dev/null; then
  echo "run_pytest: $py has no pytest (Debian: apt-get install python3-pytest, scripts/install-deps.sh does)" >&2
  exit 1
fi
if [ ! -e "$lib" ]; then
  echo "run_pytest: $lib does not exist" >&2
  exit 1
fi
echo "run_pytest: $("$py" -c 'import sys, numpy; print(sys.executable, sys.version.split()[0], "numpy", numpy.__version__)') on $lib"
cd "$repo"
PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}" KILN_LIBRARY="$lib" KILN_BUILD_DIR="$build" \
  PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -q -rs -p no:cacheprovider -W ignore::RuntimeWarning python/tests "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "run_pytest: no tests collected (pytest exit 5): failing" >&2
  exit 1
fi
exit "$rc"
