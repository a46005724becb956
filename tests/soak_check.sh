#!/bin/sh
# soak_check: tests/soak.sh reports what it is for. Against a build directory of stand-ins
# whose stress_mixed fails and whose stress_fork hangs with SIGTERM ignored (as a deadlock
# inside magpie's thread start leaves every signal blocked), one round must end with exit
# status 1, name both runs, keep the repeat line of each and kill the hung one at its limit.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/build/tests/stress"
for p in handoff_inject mixed prodcons churn cache fork remap handoff trim; do
  printf '#!/bin/sh\nexit 0\n' > "$dir/build/tests/stress/stress_$p"
done
printf '#!/bin/sh\necho "stand-in: mixed fails"\nexit 3\n' > "$dir/build/tests/stress/stress_mixed"
printf '#!/bin/sh\ntrap "" TERM\nexec sleep 60\n' > "$dir/build/tests/stress/stress_fork"
chmod +x "$dir/build/tests/stress/"*
status=0
"$root/tests/soak.sh" -q -n 1 -t 2 -s 7 -b "$dir/build" -o "$dir/out" > "$dir/log" 2>&1 || status=$?
cat "$dir/log"
fail() { echo "soak_check: $*"; exit 1; }
[ "$status" -eq 1 ] || fail "exit status $status, expected 1"
grep -q "FAIL mixed (exit status 3)" "$dir/log" || fail "the failing run is not named"
grep -q "FAIL fork" "$dir/log" || fail "the hung run is not named"
grep -q "^repeat: MAGPIE_OPTIONS= .*stress_mixed seed=7" "$dir/out/fail-1-mixed" || fail "no repeat line"
grep -q "hung past 2 s" "$dir/out/fail-1-fork" || fail "the hang is not reported"
grep -q "9 runs, 2 failed" "$dir/log" || fail "the counts are wrong"
echo "soak_check: ok"
