#!/usr/bin/env bash
# Lines of C (.c and .h, comments and blank lines included) per layer of
# src/, and the budget of the compiler core: src/{ir,passes,codegen,runtime}
# together may hold at most KILN_CORE_LINE_BUDGET (25,000) lines, so that a
# new device stays a dialect and a small runtime rather than a copy of the
# core (tinygrad keeps such a budget in CI). Devices built on the shared
# plan and a dialect of the C emitter (ref, null, opencl, cuda) may hold at
# most KILN_DEVICE_LINE_BUDGET (1,500) lines each. Exits 1 past a budget.
#   scripts/line_budget.sh [SOURCE_DIR]
set -euo pipefail
src=${1:-$(dirname "$0")/..}/src
budget=${KILN_CORE_LINE_BUDGET:-25000}
device_budget=${KILN_DEVICE_LINE_BUDGET:-1500}
small_devices="ref null opencl cuda"
over=0
count() { find "$@" -name '*.[ch]' -print0 2>/dev/null | xargs -0 -r cat | wc -l; }
printf '%-34s %7s\n' layer lines
for d in "$src"/*/; do
  d=${d%/}
  name=${d#"$src"/}
  if [ "$name" = devices ]; then
    for dev in "$d"/*/; do
      dev=${dev%/}
      n=$(count "$dev")
      case " $small_devices " in
        *" ${dev##*/} "*)
          printf '%-34s %7d  (budget %d)\n' "devices/${dev##*/}" "$n" "$device_budget"
          if [ "$n" -gt "$device_budget" ]; then
            echo "FAIL: src/devices/${dev##*/} has $n lines, over the budget of $device_budget"
            over=1
          fi ;;
        *) printf '%-34s %7d\n' "devices/${dev##*/}" "$n" ;;
      esac
    done
  else
    printf '%-34s %7d\n' "$name" "$(count "$d")"
  fi
done
core=$(count "$src/ir" "$src/passes" "$src/codegen" "$src/runtime")
printf '%-34s %7d  (budget %d)\n' "core: ir+passes+codegen+runtime" "$core" "$budget"
if [ "$core" -gt "$budget" ]; then
  echo "FAIL: src/{ir,passes,codegen,runtime} has $core lines, over the budget of $budget"
  over=1
fi
exit $over
