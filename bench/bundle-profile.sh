#!/bin/sh
# The device bundle's profiler (copied to bundle/profile.sh by bench/bundle.sh, with perf and
# objdump where the host has them): where the time of chosen cells of the matrix goes, under
# magpie and its peers, as text the session reads afterwards. For each cell and allocator,
# OUTDIR/WORKLOAD-tTHREADS-ALLOCATOR.txt holds the program's RESULT line and perf's flat profile
# (self time by library and symbol, sampled in user space on every thread), and for magpie
# perf's annotation of malloc and free, instruction by instruction. OUTDIR/profile.log says
# which event was sampled and what failed. Like run.sh it needs nothing of the host but its
# kernel and a shell: perf and objdump run under the bundled ld.so.
#
#   bundle/profile.sh [OUTDIR]    (default $OUT/profile, else bundle/profile-out)
# Environment (optional):
#   CELLS="threadchurn:16 larson:16 prodcons:16"   workload:threads cells of plan.txt
#   ALLOCATORS="magpie mimalloc3 tcmalloc"         of allocators.txt
#   EVENT=cycles:u     what to sample; where the kernel gives no hardware counters to this user,
#                      cpu-clock (a timer: its samples land a few instructions late)
#   FREQ=2000          samples a second on each thread
#   SCALE=1            runs each program for this many times the plan's operations (-i): more
#                      samples where the matrix's runs are short
#   BUDGET_S=120       start no run after this many seconds
#   PACK=1             at the end, OUTDIR becomes OUTDIR.tgz (tar czf), for the device
set -u
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
out=${1:-${OUT:+$OUT/profile}}
out=${out:-$here/profile-out}
ld=$here/ld-linux-x86-64.so.2
libs=$here/lib
perf=$here/perf
if [ ! -e "$perf" ] || [ ! -e "$here/plan.txt" ]; then
  echo "profile.sh: $here holds no perf or no plan.txt (bench/bundle.sh adds perf where the" \
    "host has it: apt-get install linux-perf)" >&2
  exit 2
fi
CELLS=${CELLS:-threadchurn:16 larson:16 prodcons:16}
ALLOCATORS=${ALLOCATORS:-magpie mimalloc3 tcmalloc}
FREQ=${FREQ:-2000}
BUDGET_S=${BUDGET_S:-120}
unset LD_PRELOAD LD_LIBRARY_PATH MALLOC_CONF MIMALLOC_OPTIONS MAGPIE_OPTIONS MAGPIE_DEBUG
mkdir -p "$out" || exit 1
log=$out/profile.log
data=$out/.perf.data
: > "$log"

. "$here/helpers.sh" # now, pack
run_perf() { # perf, under the bundled ld.so, writing no build-id cache into the home folder
  HOME=$out "$ld" --library-path "$libs" "$perf" "$@"
}
start=$(now)

# The kernel lowers its highest sampling rate when sampling interrupts run long (a busy
# machine): perf refuses a higher -F, so ask for no more than it allows now.
# (cat, not read: the shell's read takes a byte at a time, and this file gives only its first)
max_rate=$(cat /proc/sys/kernel/perf_event_max_sample_rate 2> /dev/null)
[ -n "$max_rate" ] && [ "$max_rate" -lt "$FREQ" ] && FREQ=$max_rate
event=${EVENT:-cycles:u}
if ! run_perf record -q -N -e "$event" -o "$data" -- "$ld" --version > /dev/null 2>> "$log"; then
  echo "event $event refused: sampling cpu-clock instead" >> "$log"
  event=cpu-clock
fi
echo "event=$event freq=$FREQ cells=$CELLS allocators=$ALLOCATORS" >> "$log"

for cell in $CELLS; do
  wl=${cell%%:*}
  t=${cell#*:}
  line=
  while IFS='|' read -r pwl pt prog args; do
    [ "$pwl" = "$wl" ] && [ "$pt" = "$t" ] && line="$prog|$args"
  done < "$here/plan.txt"
  if [ -z "$line" ]; then
    echo "$cell: no such cell in plan.txt" >> "$log"
    continue
  fi
  prog=${line%%|*}
  args=
  prev=
  for a in ${line#*|}; do
    [ "$prev" = -i ] && a=$((a * ${SCALE:-1}))
    args="$args $a"
    prev=$a
  done
  for name in $ALLOCATORS; do
    if [ $(( $(now) - start )) -ge "$BUDGET_S" ]; then
      echo "budget of $BUDGET_S s spent before $cell $name" >> "$log"
      break 2
    fi
    lib=
    found=no
    while IFS='|' read -r aname alib _; do
      [ "$aname" = "$name" ] && { lib=$alib; found=yes; }
    done < "$here/allocators.txt"
    if [ $found = no ]; then
      echo "$cell: no allocator $name in allocators.txt" >> "$log"
      continue
    fi
    preload=
    [ -n "$lib" ] && preload="--preload $here/$lib"
    report=$out/$wl-t$t-$name.txt
    # shellcheck disable=SC2086 # preload and args are word lists
    run_perf record -q -N -e "$event" -F "$FREQ" -o "$data" -- \
      "$ld" --library-path "$libs" $preload "$here/$prog" $args > "$out/.stdout" 2>> "$log"
    status=$?
    {
      echo "# $wl, $t threads, $name ($event, $FREQ a second), status $status"
      while IFS= read -r l; do
        case $l in RESULT\ *) echo "$l" ;; esac
      done < "$out/.stdout"
      run_perf report -i "$data" --stdio --no-children --sort dso,symbol --percent-limit 0.3 \
        2>> "$log"
      if [ "$name" = magpie ]; then
        for sym in malloc free; do
          echo "# annotate $sym"
          run_perf annotate -i "$data" --stdio --no-source --objdump="$here/bin/objdump" "$sym" 2>> "$log"
        done
      fi
    } > "$report"
    echo "$cell $name: status $status" >> "$log"
    echo "profile $cell $name: status $status"
  done
done
rm -f "$data" "$data.old" "$out/.stdout"
rm -rf "$out/.debug"
echo "profile: $(( $(now) - start )) s; results in $out"
if [ "${PACK:-0}" = 1 ]; then pack "$out"; fi
