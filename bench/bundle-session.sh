#!/bin/sh
# The device bundle's whole session (copied to bundle/session.sh by bench/bundle.sh): what a
# device call should run, in one command that stays inside the call's 600 seconds and brings
# everything back as one file. In order, each step given at most its share of SESSION_S:
#   0. crash.txt, where CRASH_RUNS is set: the server mix at CRASH_THREADS threads under magpie,
#      CRASH_RUNS times (issue 20's check of the 64-thread crash), and how many runs exited 0,
#      with the last lines of each failed run's stderr;
#   1. counters.txt: whether the kernel gives this user hardware counters (perf stat on a
#      short run, where the bundle has perf), and the CPUs, model, kernel and its transparent
#      huge page settings;
#   2. matrix.tgz: run.sh on WORKLOADS x ALLOCATORS (producer/consumer without tcmalloc,
#      whose runs there take 20-100 times the others': bench/README.md);
#   3. large.txt: bench_large's rows whose waits and rebuilds depend on the CPUs (wake, and trim
#      with purge_batch=0 and 64, at LARGE_THREADS), magpie alternating with magbase where the
#      bundle has it (bench/bundle.sh -B REV), LARGE_REPS times;
#   4. profile.tgz, where PROFILE_CELLS is set and the bundle has perf: profile.sh on those
#      cells (magpie, mimalloc3 and tcmalloc) in what time is left.
# Then OUTDIR becomes OUTDIR.tgz (PACK=0: not). Nothing of the host but its kernel, a shell and
# tar (as run.sh). Here, afterwards:
#   tar xzf session.tgz; python3 bench/scaling.py --from-bundle session/matrix.tgz
#
#   bundle/session.sh [OUTDIR]    (default $OUT/session, else bundle/session)
# Environment (optional):
#   SESSION_S=540        seconds for all of it; the matrix gets 60%, producer/consumer 20%
#   WORKLOADS="threadchurn larson scratch"   the matrix's workloads besides prodcons
#   ALLOCATORS="magpie magbase mimalloc3 jemalloc mimalloc tcmalloc"   those that are bundled
#   REPS=3               the matrix's repetitions
#   VARIANTS=""          magpie's MAGPIE_OPTIONS sets and peers' (PEER@SET), as run.sh takes them
#   LARGE_REPS=3         rounds of the large rows
#   LARGE_THREADS=16     their threads
#   LARGE_MIB=256        their heap, MiB (-n; each run builds it 3 times, -i)
#   PROFILE_CELLS=""     e.g. "threadchurn:16 larson:16": profile.sh's CELLS (step 4)
#   CRASH_RUNS=0         runs of step 0 (none: no step 0)
#   CRASH_THREADS=64     their threads (a thread count of the bundle's plan)
set -u
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
out=${1:-${OUT:+$OUT/session}}
out=${out:-$here/session}
ld=$here/ld-linux-x86-64.so.2
libs=$here/lib
SESSION_S=${SESSION_S:-540}
WORKLOADS=${WORKLOADS:-threadchurn larson scratch}
REPS=${REPS:-3}
LARGE_REPS=${LARGE_REPS:-3}
LARGE_THREADS=${LARGE_THREADS:-16}
LARGE_MIB=${LARGE_MIB:-256}
mkdir -p "$out" || exit 1
. "$here/helpers.sh" # now, pack
start=$(now)

# The allocators asked for that the bundle has.
have=""
while IFS='|' read -r name _; do have="$have $name"; done < "$here/allocators.txt"
bundled() { # names...: those the bundle has
  for a in "$@"; do
    case " $have " in *" $a "*) printf ' %s' "$a" ;; esac
  done
}
allocs=$(bundled ${ALLOCATORS:-magpie magbase mimalloc3 jemalloc mimalloc tcmalloc})
no_tc=""
for a in $allocs; do [ "$a" = tcmalloc ] || no_tc="$no_tc $a"; done

# 0. The crash check, in at most a fifth of SESSION_S.
if [ "${CRASH_RUNS:-0}" -gt 0 ]; then
  THREADS=${CRASH_THREADS:-64} WORKLOADS=servermix ALLOCATORS=magpie REPS=$CRASH_RUNS \
    BUDGET_S=$((SESSION_S / 5)) STATS=0 VARIANTS="" PACK=0 \
    sh "$here/run.sh" "$out/crash" > "$out/crash.log" 2>&1
  runs=0 ok=0
  [ -e "$out/crash/runs.csv" ] && while IFS=, read -r _ _ _ _ status _; do
    case $status in
      status) ;;
      0) runs=$((runs + 1)) ok=$((ok + 1)) ;;
      *) runs=$((runs + 1)) ;;
    esac
  done < "$out/crash/runs.csv"
  {
    echo "servermix -t ${CRASH_THREADS:-64}, magpie: $ok of $runs runs exited 0"
    cat "$out/crash/failures.log" 2>/dev/null
  } > "$out/crash.txt"
  rm -r "$out/crash"
fi

# 1. Counters and machine.
{
  echo "start_uptime_s=$start"
  while IFS= read -r line; do
    case $line in processor* | "model name"*) echo "$line" ;; esac
  done < /proc/cpuinfo
  read -r kernel < /proc/sys/kernel/osrelease
  echo "kernel=$kernel"
  # The kernel's huge-page policy decides which allocators' heaps get 2 MiB pages unasked.
  for f in enabled defrag shmem_enabled; do
    [ -r "/sys/kernel/mm/transparent_hugepage/$f" ] &&
      read -r v < "/sys/kernel/mm/transparent_hugepage/$f" && echo "thp_$f=$v"
  done
  echo "allocators=$allocs"
  if [ -e "$here/perf" ]; then
    "$ld" --library-path "$libs" "$here/perf" stat -e cycles:u,instructions:u -- \
      "$ld" --library-path "$libs" "$here/bench_threadchurn" -t 1 -i 200000 2>&1
  else
    echo "perf: not in the bundle (bench/bundle.sh -P left it out)"
  fi
} > "$out/counters.txt" 2>&1

# 2. The matrix, then producer/consumer without tcmalloc.
share() { # seconds left for a step that may take this percentage of SESSION_S
  left=$((SESSION_S - ($(now) - start)))
  want=$((SESSION_S * $1 / 100))
  [ $want -lt $left ] && echo $want || echo $left
}
WORKLOADS="$WORKLOADS" ALLOCATORS="$allocs" REPS=$REPS BUDGET_S=$(share 60) PACK=1 \
  sh "$here/run.sh" "$out/matrix" > "$out/matrix.log" 2>&1
WORKLOADS=prodcons ALLOCATORS="$no_tc" REPS=$REPS BUDGET_S=$(share 20) PACK=1 STATS=0 \
  VARIANTS="" sh "$here/run.sh" "$out/prodcons" > "$out/prodcons.log" 2>&1

# 3. The large rows: one line each, "rep allocator options: RESULT ...".
large() { # name library options args...
  name=$1 lib=$2 opts=$3
  shift 3
  MAGPIE_OPTIONS=$opts "$ld" --library-path "$libs" --preload "$here/$lib" \
    "$here/bench_large" "$@" > "$out/.large" 2>&1
  result=failed
  while IFS= read -r line; do
    case $line in RESULT*) result=$line ;; esac
  done < "$out/.large"
  echo "$rep $name ${opts:-default}: $result" >> "$out/large.txt"
}
libs_of=""
while IFS='|' read -r name lib _; do
  case $name in magpie | magbase) libs_of="$libs_of $name|$lib" ;; esac
done < "$here/allocators.txt"
rep=1
while [ $rep -le "$LARGE_REPS" ] && [ $(($(now) - start)) -lt "$SESSION_S" ]; do
  for pair in $libs_of; do
    large "${pair%%|*}" "${pair#*|}" "" -m wake -t "$LARGE_THREADS" -i 3 -n "$LARGE_MIB"
  done
  for opts in purge_batch=0 purge_batch=64; do
    for pair in $libs_of; do
      large "${pair%%|*}" "${pair#*|}" "$opts" -m trim -t "$LARGE_THREADS" -i 3 -n "$LARGE_MIB"
    done
  done
  rep=$((rep + 1))
done
rm -f "$out/.large"

# 4. Profiles, in what time is left.
if [ -n "${PROFILE_CELLS:-}" ] && [ -e "$here/profile.sh" ]; then
  CELLS=$PROFILE_CELLS ALLOCATORS="$(bundled magpie mimalloc3 tcmalloc)" BUDGET_S=$(share 100) PACK=1 \
    sh "$here/profile.sh" "$out/profile" > "$out/profile.log" 2>&1
fi
echo "end_uptime_s=$(now)" >> "$out/counters.txt"
[ "${PACK:-1}" = 0 ] || pack "$out"
