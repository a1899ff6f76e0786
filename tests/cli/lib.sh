# Sourced by the CLI tests; they set $kiln and $tmp and count failures in
# $fails.
# check NAME CONDITION: CONDITION is a command string, evaluated.
check() {
  if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails+1)); fi
}
# expect_error NAME PATTERN -- ARGS: runs "$kiln" ARGS and passes when it
# exits 1 with stderr one line 'kiln: error: ...' matching PATTERN.
expect_error() {
  local name=$1 pat=$2; shift 3
  "$kiln" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^kiln: error: " "$tmp/err" && grep -qE "$pat" "$tmp/err"; then
    echo "ok   $name"
  else
    echo "FAIL $name (rc=$rc)"; cat "$tmp/err"; fails=$((fails+1))
  fi
}
