#!/bin/bash
# soak: the stress programs again and again, each run with a new seed and one of a set of option
# settings, with the fork, cancellation, out-of-memory and reaper tests between rounds, until
# the time is up. ctest runs each stress program with one seed and a few settings; interleavings
# that need a rarer seed, setting or timing show up here.
#
#   tests/soak.sh [-m minutes] [-n rounds] [-s seed] [-t seconds] [-b build dir] [-o output dir] [-q]
#
# -m: stop starting rounds after this many minutes (default 30); -n: after this many rounds;
# -s: the first round's seed (default: from the clock); -t: a run's limit (default 300 s);
# -q: small workloads and no ctest (the smoke test of this script). A run that fails leaves its
# output and the command that repeats it in the output directory (default build/soak); one
# that passes its limit also leaves every thread's stack (gdb, where installed) and is killed
# with SIGKILL: a deadlock inside magpie's thread start holds every signal blocked, so the
# programs' own watchdog (SIGALRM) and a plain timeout (SIGTERM) cannot end it. Exit status: 0
# when every run passed.
set -u
minutes=30 rounds=0 seed=$(( $(date +%s) % 100000 )) quick=0 limit=300
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build out=""
while getopts "m:n:s:t:b:o:q" opt; do
  case $opt in
    m) minutes=$OPTARG ;; n) rounds=$OPTARG ;; s) seed=$OPTARG ;; t) limit=$OPTARG ;;
    b) build=$(cd "$OPTARG" && pwd) ;; o) out=$OPTARG ;; q) quick=1 ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
out=${out:-$build/soak}
mkdir -p "$out"
stress=$build/tests/stress
[ -x "$stress/stress_handoff_inject" ] || { echo "soak: no stress programs in $stress (make test builds them)"; exit 2; }

# Option settings, one a round in turn; DEBUG stands for MAGPIE_DEBUG=default, RSEQ_OWN for the
# CPUs' magazines on magpie's own rseq area (glibc's turned off, percpu=2).
settings=("" "percpu_threads=1" "percpu=0" "hugepages=always" "reap_ms=1"
  "retain=0,reap_ms=2" "percpu_threads=1,reap_ms=1" "sample=1,profile_rate=4k"
  "mag_rounds=2,sweep_ms=1" "DEBUG" "percpu_threads=1,publish_ms=1" "RSEQ_OWN")
programs=(handoff_inject mixed prodcons churn cache fork remap handoff trim)
declare -A small=([handoff_inject]="threads=16 ops=1000" [mixed]="threads=8 ops=20000"
  [prodcons]="producers=4 consumers=4 items=2000 rounds=2" [churn]="threads=500 wave=32 ops=100 baseline=200"
  [cache]="threads=8 ops=40000 private_every=8000" [fork]="hammers=2 forks=4 child_timeout=30"
  [remap]="growers=2 slabbers=4 rounds=4 top=8 objects=2000" [handoff]="threads=16 ops=4000"
  [trim]="blocks=250 rounds=30")
runs=0 failed=0 round=0 end=$(( $(date +%s) + minutes * 60 ))

# run NAME ENV... -- COMMAND...: runs it with a limit; records a failure or a hang.
run() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log=$out/last.out
  env "${envs[@]}" "$@" > "$log" 2>&1 &
  local pid=$! tenths=0 rc
  while kill -0 $pid 2>/dev/null && [ $tenths -lt $((limit * 10)) ]; do
    sleep 0.1
    tenths=$((tenths + 1))
  done
  if kill -0 $pid 2>/dev/null; then
    { echo "hung past ${limit} s"; command -v gdb > /dev/null &&
      gdb -p $pid -batch -ex "thread apply all bt" 2>&1 | tail -200; } >> "$log"
    kill -KILL $pid 2>/dev/null
  fi
  { wait $pid; } 2> /dev/null
  rc=$?
  # the test build's count of page faults under quiet locks (src/platform/inject.h) must be 0
  if [ $rc -eq 0 ] && grep -q "page faults under quiet locks: [1-9]" "$log"; then
    echo "page faults were taken under quiet locks" >> "$log"
    rc=1
  fi
  runs=$((runs + 1))
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    { echo "repeat: ${envs[*]} $*"; echo "exit status $rc"; cat "$log"; } > "$out/fail-$round-$name"
    echo "soak: FAIL $name (exit status $rc): $out/fail-$round-$name"
  fi
}

while :; do
  round=$((round + 1))
  s=$((seed + round - 1))
  setting=${settings[$(( (round - 1) % ${#settings[@]} ))]}
  debug="" tunables=""
  [ "$setting" = DEBUG ] && { debug=default; setting=""; }
  [ "$setting" = RSEQ_OWN ] && { tunables=glibc.pthread.rseq=0; setting="percpu=2,percpu_threads=1"; }
  for p in "${programs[@]}"; do
    opts=$setting
    [ $p = handoff_inject ] && opts="inject=$s,reap_ms=1${setting:+,$setting}"
    args=(seed=$s)
    [ $quick = 1 ] && args+=(${small[$p]})
    envs=(MAGPIE_OPTIONS="$opts")
    [ -n "$debug" ] && envs+=(MAGPIE_DEBUG="$debug")
    [ -n "$tunables" ] && envs+=(GLIBC_TUNABLES="$tunables")
    run "$p" "${envs[@]}" -- "$stress/stress_$p" "${args[@]}"
  done
  if [ $quick = 0 ]; then
    run ctest -- ctest --test-dir "$build" -j2 --timeout 150 --output-on-failure \
      -R "preload_fork|preload_reaper|api_cancel|api_oom|glibc_tst|stress_crowd|stress_stack|unit_layers|unit_percpu"
  fi
  echo "soak: round $round (seed $s, ${setting:-default options}${debug:+, MAGPIE_DEBUG}${tunables:+, $tunables}): $runs runs, $failed failed"
  [ $rounds -gt 0 ] && [ $round -ge $rounds ] && break
  [ "$(date +%s)" -ge $end ] && break
done
echo "soak: $round rounds, $runs runs, $failed failed (seeds $seed..$s)"
[ $failed -eq 0 ]
