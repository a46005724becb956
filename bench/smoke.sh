#!/bin/sh
# Smoke test of one benchmark workload (ctest runs it; see bench/CMakeLists.txt).
#   smoke.sh PRELOAD NAME BINARY [ARGS...]
# Runs BINARY ARGS with LD_PRELOAD=PRELOAD (empty: none) and passes when it exits 0 and printed
# one line starting "RESULT NAME ".
preload=$1
name=$2
shift 2
if [ -n "$preload" ]; then
  out=$(LD_PRELOAD="$preload" "$@")
else
  out=$("$@")
fi
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "smoke: $name exited with status $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q "^RESULT $name "; then
  echo "smoke: $name printed no 'RESULT $name' line" >&2
  exit 1
fi
exit 0
