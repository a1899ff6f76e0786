#!/usr/bin/env bash
# The LeakSanitizer control: a leak planted in kiln code must be reported
# under tests/sanitize/lsan.supp, and the suppressions must hide the driver's
# leaks and nothing else.
#
#   run_leak_control.sh ASAN_LEAK_CONTROL_BINARY SUPPRESSIONS_FILE [vulkan]
#
# Runs leak_control (see leak_control.c) and reads LeakSanitizer's report:
#   1. kiln mode, suppressions on: the process must fail, and every leak
#      reported must be the planted one (plant_kiln_leak in its stack): a
#      driver leak kiln's Vulkan device let through would show up here;
#   2. none mode, suppressions on: the planted leak alone, without Vulkan;
#   with "vulkan":
#   3. driver mode (the driver loaded and unloaded by the loader, as kiln did
#      before it kept driver libraries loaded), no suppressions, full stacks:
#      reports how many driver leaks this machine has (0 on some CPUs);
#   4. the same with the suppressions: only the planted leak is left.
set -u
bin=$1 supp=$2 vulkan=${3:-}
fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME MODE LSAN_OPTIONS ASAN_OPTIONS: writes $work/NAME.log, sets $rc,
# $planted (leak reports naming plant_kiln_leak) and $other (the rest).
run() {
  LSAN_OPTIONS=$3 ASAN_OPTIONS=$4 "$bin" "$2" >"$work/$1.log" 2>&1
  rc=$?
  # One record per "Direct/Indirect leak of" block, up to the next blank line.
  awk '/^(Direct|Indirect) leak of/ {if (b != "") print b; b = ""; inb = 1}
       inb && /^$/ {print b; b = ""; inb = 0}
       inb {b = b " " $0}
       END {if (b != "") print b}' "$work/$1.log" >"$work/$1.leaks"
  planted=$(grep -c 'plant_kiln_leak' "$work/$1.leaks")
  other=$(grep -vc 'plant_kiln_leak' "$work/$1.leaks")
}

expect_only_planted() { # NAME
  if [ "$rc" -eq 0 ]; then
    echo "FAIL $1: exit status 0, but kiln leaked on purpose (LeakSanitizer did not fail the process)"; fail=1
  elif [ "$planted" -lt 1 ]; then
    echo "FAIL $1: no leak report names plant_kiln_leak (exit $rc)"; fail=1
  elif [ "$other" -ne 0 ]; then
    echo "FAIL $1: $other leak(s) besides the planted one:"; grep -v plant_kiln_leak "$work/$1.leaks" | cut -c1-400; fail=1
  else
    echo "ok   $1: exit $rc, the planted leak reported ($planted blocks), nothing else"
  fi
}

sup="suppressions=$supp"
run kiln kiln "$sup" ""
expect_only_planted "kiln's leak under the suppressions"
run none none "$sup" ""
expect_only_planted "kiln's leak without Vulkan"
if [ "$vulkan" = vulkan ]; then
  # Full (DWARF) stacks: the fast unwinder stops inside the driver, whose
  # frames name no module once it is unloaded; full stacks reach the loader.
  run driver_raw driver "" "fast_unwind_on_malloc=0"
  echo "info driver loaded and unloaded, no suppressions: $other driver leak(s) on this machine ($(grep -m1 -o 'model name.*' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
  if [ "$planted" -lt 1 ]; then echo "FAIL driver mode: the planted leak was not reported"; fail=1; fi
  run driver driver "$sup" "fast_unwind_on_malloc=0"
  expect_only_planted "driver leaks under the suppressions"
fi
if [ $fail -ne 0 ]; then
  echo "logs:"; for f in "$work"/*.log; do echo "--- $f"; head -60 "$f"; done
  exit 1
fi
echo "PASS: kiln's leaks are reported under the suppressions; the driver's are not"
