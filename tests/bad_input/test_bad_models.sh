#!/usr/bin/env bash
# Every hostile or broken model gives a clean one-line error (exit 1, no
# crash, no hang) that matches what the case expects.
#   test_bad_models.sh KILN_BINARY SOURCE_DIR [TIMEOUT_S]
set -uo pipefail
kiln=$1 src=$2 limit=${3:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$src/tests/bad_input/make_bad_models.py" "$tmp" >/dev/null || { echo "FAIL: could not generate models"; exit 1; }
fails=0 n=0
for m in "$tmp"/*.onnx; do
  name=$(basename "$m" .onnx)
  args=()
  for f in "$tmp/$name".*.npy; do
    [ -e "$f" ] || continue
    in=${f#"$tmp/$name".}; in=${in%.npy}
    args+=(--input "$in=$f")
  done
  envs=()
  [ -e "$tmp/$name.env" ] && mapfile -t envs <"$tmp/$name.env"
  timeout "$limit" env "${envs[@]}" "$kiln" run "$m" "${args[@]}" >"$tmp/out" 2>"$tmp/err"; rc=$?
  n=$((n+1))
  pat=$(cat "$tmp/$name.expect")
  if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qE "^kiln: error: .*$pat" "$tmp/err"; then
    echo "ok   $name: $(cut -c1-150 "$tmp/err")"
  else
    echo "FAIL $name (exit $rc, wanted /$pat/):"; head -5 "$tmp/err"; fails=$((fails+1))
  fi
done
echo "$((n-fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
