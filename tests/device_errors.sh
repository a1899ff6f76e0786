# device_errors.sh — sourced by the devices' error tests
# (tests/<device>/test_<device>_errors.sh): each case runs kiln under
# `timeout` and checks the exit status (failure expected: non-zero, not a
# signal, not a timeout) and the message. The caller sets KILN, DIR (the
# models), DEVICE (its provider name) and LIMIT_S, then calls
# device_errors_setup, which checks the models and the device (exit 2 /
# 77), and sets TMP, SMALL(_IN), BIG(_IN), fail=0 and n_cases=0.

device_errors_setup() {
  SMALL=$DIR/mlp.onnx
  SMALL_IN=$DIR/mlp.input.npy
  BIG=$DIR/resnet50.onnx
  BIG_IN=$DIR/resnet50.input.npy
  local f
  for f in "$SMALL" "$SMALL_IN" "$BIG" "$BIG_IN"; do
    if [ ! -f "$f" ]; then
      echo "FAIL: $f is missing: export the models first (/usr/bin/python3 tests/models/export_models.py $DIR)"
      exit 2
    fi
  done
  if ! "$KILN" devices 2>/dev/null | grep -q "^$DEVICE:[0-9]"; then
    echo "SKIP: no $DEVICE device here:"; "$KILN" devices 2>&1 | sed 's/^/  /'
    exit 77
  fi
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln_${DEVICE}_errors.XXXXXX") || exit 1
  trap 'rm -rf "$TMP"' EXIT
  fail=0
  n_cases=0
  NOT_AVAILABLE="$DEVICE device '$DEVICE' is not available"
}

# run_kiln OUT [VAR=VALUE...] -- KILN-ARGS...: runs kiln under timeout with
# the given environment, stdout+stderr to OUT; sets $rc.
run_kiln() {
  local out=$1
  shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env ${envs[@]+"${envs[@]}"} timeout "$LIMIT_S" "$KILN" "$@" >"$out" 2>&1
  rc=$?
}

# did_not_crash NAME OUT: fails the case if $rc says signal or timeout, or
# a sanitizer (an ASan/UBSan build) reported something: such a report can
# exit 1 like the expected error.
did_not_crash() {
  if grep -Eq "ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error: " "$2"; then
    echo "FAIL: $1: a sanitizer reported an error (exit $rc)"; return 1
  elif [ "$rc" -eq 124 ]; then
    echo "FAIL: $1: timed out after $LIMIT_S s"; return 1
  elif [ "$rc" -ge 128 ]; then
    echo "FAIL: $1: killed by signal $((rc - 128)) (a crash)"; return 1
  fi
  return 0
}

# expect_error NAME EXTENDED-REGEX [VAR=VALUE...] -- KILN-ARGS...
# The command must fail cleanly (exit status 1..123) and print a line
# matching the regex.
expect_error() {
  local name=$1 re=$2
  shift 2
  n_cases=$((n_cases + 1))
  local out=$TMP/out.$n_cases
  run_kiln "$out" "$@"
  if ! did_not_crash "$name" "$out"; then
    sed 's/^/  /' "$out" | tail -n 20; fail=1; return
  fi
  if [ "$rc" -eq 0 ]; then
    echo "FAIL: $name: succeeded (exit 0), expected an error:"; sed 's/^/  /' "$out" | tail -n 20; fail=1; return
  fi
  if ! grep -Eq -- "$re" "$out"; then
    echo "FAIL: $name: exit $rc, but no line matches /$re/:"; sed 's/^/  /' "$out" | tail -n 20; fail=1; return
  fi
  echo "ok: $name: exit $rc: $(grep -E -- "$re" "$out" | head -n 1)"
}

# expect_ok NAME EXTENDED-REGEX [VAR=VALUE...] -- KILN-ARGS...
# The command must succeed and print a line matching the regex.
expect_ok() {
  local name=$1 re=$2
  shift 2
  n_cases=$((n_cases + 1))
  local out=$TMP/out.$n_cases
  run_kiln "$out" "$@"
  if ! did_not_crash "$name" "$out" || [ "$rc" -ne 0 ]; then
    echo "FAIL: $name: exit $rc, expected success:"; sed 's/^/  /' "$out" | tail -n 20; fail=1; return
  fi
  if ! grep -Eq -- "$re" "$out"; then
    echo "FAIL: $name: no line matches /$re/:"; sed 's/^/  /' "$out" | tail -n 20; fail=1; return
  fi
  echo "ok: $name: $(grep -E -- "$re" "$out" | head -n 1)"
}


# absent_cases LABEL REASON-REGEX VAR=VALUE...: the three checks of an
# environment where the device must be absent for REASON.
absent_cases() {
  local label=$1 why=$2
  shift 2
  expect_ok "$label: kiln devices" "^$DEVICE +absent: .*$why" "$@" -- devices
  # ... and no $DEVICE:N line.
  if grep -q "^$DEVICE:[0-9]" "$TMP/out.$n_cases"; then
    echo "FAIL: $label: kiln devices still lists a $DEVICE:N device"; fail=1
  fi
  expect_error "$label: kiln run --device $DEVICE" "$NOT_AVAILABLE.*$why" "$@" -- run "$SMALL" --device "$DEVICE" \
    --input "input=$SMALL_IN"
  expect_ok "$label: kiln run (default device)" "^output: f32 \[4,10\]" "$@" -- run "$SMALL" --input "input=$SMALL_IN"
}
