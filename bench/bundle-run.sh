#!/bin/sh
# The device bundle's runner (copied to bundle/run.sh by bench/bundle.sh): runs the many-core
# matrix with nothing but a POSIX shell and the bundle, and writes into OUTDIR:
#   runs.csv        one line per run (bench/scaling.py's CSV_FIELDS)
#   machine.txt     key=value: CPUs, model, kernel, date, load, how the run ended
#   allocators.txt  the bundle's allocators (name|library|version)
#   failures.log    the last lines of stderr of each failed run
#   stats/          magpie's exit report of each of its runs (MAGPIE_OPTIONS=stats=json), named
#                   WORKLOAD-tTHREADS-rREP.json, and in stats/NAME/ those of each other build
#                   of magpie's (bench/bundle.sh -B, -V): bench/scaling.py tabulates their
#                   misses and locks
# Summarise it anywhere with python3: python3 bench/scaling.py --from-bundle OUTDIR
#
#   bundle/run.sh [OUTDIR]    (default $OUT, else bundle/out)
# Environment (optional):
#   REPS=2                  repetitions; each runs every cell, allocators in an order rotated by
#                           one per repetition
#   THREADS="1 16"          only these thread counts of plan.txt
#   WORKLOADS="larson prodcons"  only these workloads
#   ALLOCATORS="glibc magpie"    only these allocators
#   BUDGET_S=500            start no run after this many seconds (results so far are kept)
#   PACK=1                  at the end, OUTDIR becomes OUTDIR.tgz (tar czf), for the device
#   TIMEOUT_S=60            a run still going after this is killed (recorded as "timeout")
#   STATS=0                 no exit reports from magpie's runs
#   COUNTERS=0              no hardware counters (bench_rusage's BENCH_COUNTERS; where the
#                           kernel has none, runs.csv says counters=none:ERRNO and goes on)
#   VARIANTS="percpu_threads=1 hugepages=never+retain=0"  magpie again under each of these
#                           MAGPIE_OPTIONS sets ('+' between the options of one), as the
#                           allocators magpie[SET], alternating with the others (no exit reports);
#                           PEER@SET a peer again under its own options, as PEER[SET]:
#                           jemalloc@narenas:1 (MALLOC_CONF, '+' made ','), mimalloc@NAME=V or
#                           mimalloc3@NAME=V (MIMALLOC_NAME=V each). Variants are no peers.
# Each program runs as: ld-linux-x86-64.so.2 --library-path lib [--preload libX.so] bench_prog
# under bench_rusage (itself run by the bundled ld.so), which gives exit status, wall time and
# peak RSS. Only shell built-ins are needed besides the bundle (clock: /proc/uptime).
set -u
set -f # no pathname expansion: variants' names hold brackets
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
if [ ! -e "$here/plan.txt" ] || [ ! -e "$here/allocators.txt" ]; then
  echo "run.sh: $here holds no plan.txt and allocators.txt (bench/bundle.sh builds them)" >&2
  exit 2
fi
out=${1:-${OUT:-$here/out}}
REPS=${REPS:-2}
BUDGET_S=${BUDGET_S:-500}
TIMEOUT_S=${TIMEOUT_S:-60}
ld=$here/ld-linux-x86-64.so.2
libs=$here/lib
unset LD_PRELOAD LD_LIBRARY_PATH MALLOC_CONF MIMALLOC_OPTIONS MAGPIE_OPTIONS MAGPIE_DEBUG \
  TCMALLOC_RELEASE_RATE BENCH_CHILD_PRELOAD
mkdir -p "$out" || exit 1
csv=$out/runs.csv
tmp=$out/.tmp
mkdir -p "$tmp"
[ "${STATS:-1}" = 0 ] || mkdir -p "$out/stats"

. "$here/helpers.sh" # now, pack
member() { # word list: is word in list (an empty list holds everything)
  [ -z "$2" ] && return 0
  for x in $2; do [ "$x" = "$1" ] && return 0; done
  return 1
}

ncpu=0
cpu=?
while IFS= read -r line; do
  case $line in
  processor*) ncpu=$((ncpu + 1)) ;;
  "model name"*) cpu=${line#*: } ;;
  esac
done < /proc/cpuinfo
read -r load_start _ < /proc/loadavg
read -r kernel < /proc/sys/kernel/osrelease
glibc=$("$ld" --version 2>/dev/null | { read -r first; first=${first%.}; echo "${first##* }"; })
start=$(now)

# The allocators, as "name|library" words, in the bundle's order, then magpie's variants.
allocs=""
n_allocs=0
cp "$here/allocators.txt" "$out/allocators.txt"
while IFS='|' read -r name lib version; do
  if member "$name" "${ALLOCATORS:-}"; then
    allocs="$allocs $name|$lib"
    n_allocs=$((n_allocs + 1))
  fi
  for v in ${VARIANTS:-}; do
    case $v in
    *@*) [ "${v%%@*}" = "$name" ] || continue; v=${v#*@} ;;
    *) [ "$name" = magpie ] || continue ;;
    esac
    case $name in
    magpie) var=MAGPIE_OPTIONS= ;;
    jemalloc) var=MALLOC_CONF= ;;
    mimalloc | mimalloc3) var=MIMALLOC_ ;;
    *) echo "run.sh: VARIANTS: no options variable for $name" >&2; exit 2 ;;
    esac
    allocs="$allocs $name[$v]|$lib"
    n_allocs=$((n_allocs + 1))
    echo "$name[$v]|$lib|$version, $var$v" >> "$out/allocators.txt"
  done
done < "$here/allocators.txt"

# Each preload must serve the programs: ld.so only warns when it cannot load one, and the program
# then runs on glibc's malloc under another allocator's name. magpie must also print its exit
# report (MAGPIE_OPTIONS=stats=1) with allocations counted. Nothing runs when one fails.
preloads=ok
for pair in $allocs; do
  name=${pair%%|*}
  lib=${pair#*|}
  case $name in "" | *\[*) continue ;; esac # a variant's library is its allocator's, checked
  [ -n "$lib" ] || continue
  served=no
  MAGPIE_OPTIONS=stats=1 "$ld" --library-path "$libs" --preload "$here/$lib" \
    "$here/bench_larson" -t 2 -i 2000 -n 10 > /dev/null 2> "$tmp/stderr" < /dev/null &&
    served=yes
  while IFS= read -r line; do
    case $line in
    *"cannot be preloaded"*) served=no ;;
    " "*allocations" "*[1-9]*) [ "$name" = magpie ] && served=yes-report ;;
    esac
  done < "$tmp/stderr"
  [ "$name" = magpie ] && [ "$served" = yes ] && served=no-report
  case $served in
  yes*) ;;
  *) preloads="failed for $name ($served)"; cat "$tmp/stderr" >&2 ;;
  esac
done
if [ "$preloads" != ok ]; then
  echo "preloads=$preloads" > "$out/machine.txt"
  echo "run.sh: the preload check $preloads: nothing run" >&2
  exit 1
fi
echo "rep,workload,threads,allocator,status,wall_s,maxrss_kib,result,counters" > "$csv"
: > "$out/failures.log"

ended=complete
runs=0
rep=1
while [ $rep -le "$REPS" ] && [ "$ended" = complete ]; do
  while IFS='|' read -r wl t prog args; do
    member "$wl" "${WORKLOADS:-}" && member "$t" "${THREADS:-}" || continue
    # This repetition's order: the allocators rotated by (rep - 1).
    k=$(( (rep - 1) % n_allocs ))
    set -- $allocs
    i=0
    while [ $i -lt $k ]; do first=$1; shift; set -- "$@" "$first"; i=$((i + 1)); done
    for pair in "$@"; do
      if [ $(( $(now) - start )) -ge "$BUDGET_S" ]; then
        ended="budget of $BUDGET_S s spent during repetition $rep"
        break 2
      fi
      name=${pair%%|*}
      lib=${pair#*|}
      rm -f "$tmp/stat"
      mopts= # magpie's counters, written at its exit: the run itself is the same
      if [ "${STATS:-1}" != 0 ]; then
        case $name in
        magpie) mopts="stats=json,stats_file=$out/stats/$wl-t$t-r$rep.json" ;;
        *\[*) ;; # a variant: its options are its own
        mag*) # another build of magpie's: its reports in a folder of its own
          mkdir -p "$out/stats/$name"
          mopts="stats=json,stats_file=$out/stats/$name/$wl-t$t-r$rep.json"
          ;;
        esac
      fi
      vset= # a variant's option set, '+' made ','
      case $name in
      *\[*)
        v=${name#*[}
        v=${v%]}
        while :; do
          case $v in
          *+*)
            vset="$vset${v%%+*},"
            v=${v#*+}
            ;;
          *)
            vset="$vset$v"
            break
            ;;
          esac
        done
        ;;
      esac
      if [ -n "$lib" ]; then
        (
          case $name in
          magpie\[*) mopts=$vset ;;
          jemalloc\[*) export MALLOC_CONF="$vset" ;;
          mimalloc*\[*)
            IFS=,
            for o in $vset; do export "MIMALLOC_$o"; done
            IFS=' 	
'
            ;;
          esac
          MAGPIE_OPTIONS=$mopts BENCH_COUNTERS=${COUNTERS:-1} BENCH_TIMEOUT_S=$TIMEOUT_S \
            exec "$ld" --library-path "$libs" "$here/bench_rusage" "$tmp/stat" \
            "$ld" --library-path "$libs" --preload "$here/$lib" "$here/$prog" $args \
            > "$tmp/stdout" 2> "$tmp/stderr" < /dev/null
        )
      else
        BENCH_COUNTERS=${COUNTERS:-1} BENCH_TIMEOUT_S=$TIMEOUT_S \
          "$ld" --library-path "$libs" "$here/bench_rusage" "$tmp/stat" \
          "$ld" --library-path "$libs" "$here/$prog" $args \
          > "$tmp/stdout" 2> "$tmp/stderr" < /dev/null
      fi
      status=helper-failed wall= rss= timeout= counts=
      if [ -s "$tmp/stat" ]; then
        read -r statline < "$tmp/stat"
        for kv in $statline; do
          case $kv in
          status=*) status=${kv#status=} ;;
          wall=*) wall=${kv#wall=} ;;
          maxrss_kib=*) rss=${kv#maxrss_kib=} ;;
          timeout=1) timeout=1 ;;
          utime=* | stime=*) ;;
          *=*) counts="${counts:+$counts }$kv" ;; # the counters
          esac
        done
      fi
      [ -n "$timeout" ] && status=timeout
      result=
      while IFS= read -r line; do
        case $line in RESULT\ *) result=$line ;; esac
      done < "$tmp/stdout"
      echo "$rep,$wl,$t,$name,$status,$wall,$rss,$result,$counts" >> "$csv"
      runs=$((runs + 1))
      if [ "$status" = 0 ] && [ -n "$result" ]; then
        echo "rep $rep $wl t=$t $name: ${wall}s ${rss}KiB"
      else
        echo "rep $rep $wl t=$t $name: FAILED status=$status"
        { echo "== rep $rep $wl t=$t $name: status $status"; cat "$tmp/stderr"; } \
          >> "$out/failures.log"
      fi
    done
  done < "$here/plan.txt"
  rep=$((rep + 1))
done
rm -rf "$tmp"
read -r load_end _ < /proc/loadavg
{
  echo "nproc=$ncpu"
  echo "cpu=$cpu"
  echo "kernel=$kernel"
  echo "glibc=glibc $glibc (bundled)"
  echo "date=$(date -u '+%Y-%m-%dT%H:%M:%SZ' 2>/dev/null || echo '?')"
  echo "loadavg_start=$load_start"
  echo "loadavg_end=$load_end"
  echo "elapsed_s=$(( $(now) - start ))"
  echo "runs=$runs"
  echo "ended=$ended"
  echo "preloads=$preloads"
} > "$out/machine.txt"
echo "bundle: $runs runs in $(( $(now) - start )) s ($ended); results in $out"
if [ "${PACK:-0}" = 1 ]; then pack "$out"; fi
