#!/bin/sh
# Checks that libkiln.so exports exactly the public API: every defined
# dynamic symbol is a kiln_* function declared in include/kiln.h, and every
# function kiln.h declares is exported.
# usage: check_exports.sh LIBKILN_SO KILN_H
set -eu
lib=$1
header=$2
tmp=${TMPDIR:-/tmp}/kiln_exports.$$
trap 'rm -f "$tmp".*' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWwi]$/ {print $3}' | sed 's/@.*//' | sort -u >"$tmp.exported"
# Declarations: 'KILN_API <type> [*]name(' possibly with the '*' attached to the name.
grep -o '^KILN_API [^(]*(' "$header" | sed 's/($//; s/.*[ *]//' | sort -u >"$tmp.declared"
status=0
extra=$(comm -23 "$tmp.exported" "$tmp.declared")
if [ -n "$extra" ]; then
  echo "exported but not declared in kiln.h:"
  echo "$extra" | head -50
  echo "($(echo "$extra" | wc -l) symbols)"
  status=1
fi
missing=$(comm -13 "$tmp.exported" "$tmp.declared")
if [ -n "$missing" ]; then
  echo "declared in kiln.h but not exported:"
  echo "$missing"
  status=1
fi
n=$(wc -l <"$tmp.exported")
if [ "$status" = 0 ]; then echo "libkiln.so exports $n symbols, all kiln_* and declared in kiln.h"; fi
bad=$(grep -v '^kiln_' "$tmp.exported" || true)
if [ -n "$bad" ]; then echo "not kiln_*: $bad"; status=1; fi
exit $status
