#!/bin/sh
# Smoke test of one benchmark workload (ctest runs it; see bench/CMakeLists.txt).
#   smoke.sh PRELOAD NAME BINARY [ARGS...]
# Runs BINARY ARGS with LD_PRELOAD=PRELOAD (empty: none) and passes when it exits 0 and printed
# one line starting "RESULT NAME ". With a PRELOAD, the workload also runs with magpie's exit
# report on (MAGPIE_OPTIONS=stats=1), which must show that magpie served its allocations: a
# preload that failed to load (ld.so only warns) leaves the workload on glibc, and no report.
# SMOKE_MAX=KEY=LIMIT: the RESULT line's KEY must also be there and at most LIMIT.
preload=$1
name=$2
shift 2
if [ -n "$preload" ]; then
  report=$(mktemp)
  out=$(LD_PRELOAD="$preload" MAGPIE_OPTIONS="${MAGPIE_OPTIONS:+$MAGPIE_OPTIONS,}stats=1" "$@" \
    2>"$report")
  rc=$?
  cat "$report" >&2
  served=$(grep -Ec '^ +allocations +[1-9]' "$report")
  rm -f "$report"
else
  out=$("$@")
  rc=$?
fi
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "smoke: $name exited with status $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q "^RESULT $name "; then
  echo "smoke: $name printed no 'RESULT $name' line" >&2
  exit 1
fi
if [ -n "$preload" ] && [ "$served" -eq 0 ]; then
  echo "smoke: $name ran without magpie: no exit report counting allocations ($preload)" >&2
  exit 1
fi
if [ -n "${SMOKE_MAX:-}" ]; then
  key=${SMOKE_MAX%%=*}
  limit=${SMOKE_MAX#*=}
  value=$(printf '%s\n' "$out" | grep "^RESULT $name " | tr ' ' '\n' | grep "^$key=" | cut -d= -f2)
  if [ -z "$value" ] || ! awk -v v="$value" -v l="$limit" 'BEGIN { exit !(v + 0 <= l + 0) }'; then
    echo "smoke: $name's $key is ${value:-missing}, above $limit" >&2
    exit 1
  fi
fi
exit 0
