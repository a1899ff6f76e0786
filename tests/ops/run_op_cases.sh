#!/usr/bin/env bash
# Generates the extra op cases (tests/ops/gen_op_cases.py: suites `dtypes`,
# `attrs` and `transformer`) into a temporary folder and runs kiln_conformance on each
# suite against tests/ops/expected_pass.txt.
#
#   run_op_cases.sh KILN_CONFORMANCE_BINARY SOURCE_DIR [runner options...]
#
# Extra options go to kiln_conformance (e.g. --timeout 300, --via-cli PATH).
# Fails if generation fails, if any listed case fails, or if a generated case
# is missing from expected_pass.txt (each must be listed: as "suite/case" to
# pass, or as a "#FAIL suite/case: reason" comment while a kiln bug is open).
# The generator needs /usr/bin/python3 (or $KILN_PYTHON) with onnx, numpy and
# torch; without them the script prints SKIP and exits 77 (ctest's
# SKIP_RETURN_CODE), or fails when KILN_REQUIRE_PYTHON=1.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 KILN_CONFORMANCE_BINARY SOURCE_DIR [runner options...]" >&2
  exit 2
fi
conf=$1 src=$2
shift 2
py=${KILN_PYTHON:-/usr/bin/python3}
expect=$src/tests/ops/expected_pass.txt
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln_opcases.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! "$py" -c 'import onnx, numpy, torch' > /dev/null 2>&1; then
  if [ "${KILN_REQUIRE_PYTHON:-}" = 1 ]; then
    echo "FAIL: KILN_REQUIRE_PYTHON=1 but $py with onnx, numpy and torch is missing" >&2
    exit 1
  fi
  echo "SKIP: $py with onnx, numpy and torch is needed to generate the op cases"
  exit 77
fi
if ! "$py" "$src/tests/ops/gen_op_cases.py" "$tmp/data"; then
  echo "FAIL: gen_op_cases.py failed" >&2
  exit 1
fi

status=0
# Every generated case must be in the list, as a case or as a #FAIL comment.
sed -n -e 's/^#FAIL \([^: ]*\).*/\1/p' -e 's/^\([^# ][^ #]*\).*/\1/p' "$expect" | sort -u > "$tmp/listed"
(cd "$tmp/data" && ls -d -- */*/) | sed 's:/$::' | sort > "$tmp/generated"
unlisted=$(comm -23 "$tmp/generated" "$tmp/listed")
if [ -n "$unlisted" ]; then
  echo "FAIL: generated cases not in $expect (add them):"
  echo "$unlisted" | sed 's/^/  /'
  status=1
fi

summary=""
for suite in dtypes attrs transformer; do
  echo "== suite $suite"
  "$conf" --data "$tmp/data" --suite "$suite" --expect "$expect" "$@" > "$tmp/$suite.log" 2>&1
  rc=$?
  # The runner prints failing cases, regressions and its summary (not every pass).
  grep -v '^PASS ' "$tmp/$suite.log"
  [ $rc -eq 0 ] || status=1
  summary="$summary$(grep "^suite $suite " "$tmp/$suite.log")"$'\n'
done
known=$(grep -c '^#FAIL ' "$expect")
echo "== summary"
printf '%s' "$summary"
echo "known failures listed as #FAIL in expected_pass.txt: $known"
[ $status -eq 0 ] && echo "op cases: OK" || echo "op cases: FAILED"
exit $status
