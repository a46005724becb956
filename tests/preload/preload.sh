#!/bin/sh
# Real programs under LD_PRELOAD=libmagpie.so, compared with the same programs under glibc.
#
#   preload.sh CASE LIBMAGPIE
#
# CASE is one of: python pytests sqlite gcc git sort options.
#
# Each step of a case runs twice in a fresh directory $tmp/work (the same path both times, so
# paths in the output agree), in a clean environment (env -i, PATH=/usr/bin:/bin so that the
# Debian tools are the ones tested): first with the system malloc, then with LD_PRELOAD set to
# libmagpie.so and MAGPIE_OPTIONS=stats=json,stats_file=$tmp/stats/stats.%p. The step passes when
# stdout, stderr and the exit status are equal byte for byte, and when magpie really ran: at least
# one stats file appeared, each one is a JSON object for the process its name gives, with figures
# that agree with each other (peaks not below current values, per-class counts adding up to the
# totals), and at least one counts allocations.
#
# pytests compares test outcomes instead of output (below, case_pytests).
#
# A missing tool fails the test with a message (scripts/deps.sh installs them); nothing is skipped.
# On failure the work directory is kept and its path printed.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 python|pytests|sqlite|gcc|git|sort|options LIBMAGPIE" >&2
  exit 2
fi
case_name=$1
lib=$2
here=$(cd "$(dirname "$0")" && pwd)
validator=/usr/bin/python3 # reads the stats files; runs without magpie

fail() {
  echo "preload $case_name: FAIL: $*" >&2
  echo "preload $case_name: files kept in $tmp" >&2
  exit 1
}

# need TOOL...: each TOOL exists where the runs look for it (PATH=/usr/bin:/bin), or fail.
need() {
  for tool in "$@"; do
    case "$tool" in
    /*) found=$tool ;;
    *) found=$(PATH=/usr/bin:/bin command -v "$tool" 2>/dev/null || true) ;;
    esac
    if [ -z "$found" ] || [ ! -x "$found" ]; then
      echo "preload $case_name: FAIL: required program '$tool' is not installed" \
        "(scripts/deps.sh installs it)" >&2
      rm -rf "$tmp"
      exit 1
    fi
  done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/magpie-preload-$case_name.XXXXXX")
mkdir "$tmp/home"
case "$lib" in /*) ;; *) lib=$(pwd)/$lib ;; esac
[ -f "$lib" ] || fail "no library at $lib"
need "$validator"

# run_side SIDE LABEL CMD...: one run of CMD in a fresh $tmp/work, output in $tmp/LABEL.SIDE.*;
# magpie's side adds $magpie_options to MAGPIE_OPTIONS.
magpie_options=""
run_side() {
  side=$1 label=$2
  shift 2
  rm -rf "$tmp/work" "$tmp/stats"
  mkdir "$tmp/work" "$tmp/stats"
  status=0
  if [ "$side" = magpie ]; then
    (cd "$tmp/work" && exec env -i PATH=/usr/bin:/bin HOME="$tmp/home" LC_ALL=C TZ=UTC \
      LD_PRELOAD="$lib" MAGPIE_OPTIONS="${magpie_options}stats=json,stats_file=$tmp/stats/stats.%p" \
      "$@") \
      >"$tmp/$label.$side.out" 2>"$tmp/$label.$side.err" || status=$?
  else
    (cd "$tmp/work" && exec env -i PATH=/usr/bin:/bin HOME="$tmp/home" LC_ALL=C TZ=UTC "$@") \
      >"$tmp/$label.$side.out" 2>"$tmp/$label.$side.err" || status=$?
  fi
  echo "$status" >"$tmp/$label.$side.status"
}

# check_stats LABEL: magpie's stats files of the last magpie run are well-formed and count work.
check_stats() {
  if [ -e "$tmp/stats/stats.%p" ]; then
    fail "$1: stats file named literally 'stats.%p' (%p was not replaced by the pid)"
  fi
  "$validator" -S -B -c '
import json, os, sys
folder, label = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(folder))
if not names:
    sys.exit("%s: no stats file: was magpie loaded? (MAGPIE_OPTIONS stats=json)" % label)
total, busiest = 0, 0
for name in names:
    path = os.path.join(folder, name)
    pid = name.rsplit(".", 1)[-1]
    try:
        with open(path) as f:
            stats = json.load(f)
    except ValueError as e:
        sys.exit("%s: %s is not JSON: %s" % (label, name, e))
    if not isinstance(stats, dict) or stats.get("magpie") != 1:
        sys.exit("%s: %s lacks \"magpie\": 1" % (label, name))
    if str(stats.get("pid")) != pid:
        sys.exit("%s: %s says pid %r" % (label, name, stats.get("pid")))
    for field in ("allocs", "frees", "bytes_requested", "live_bytes", "peak_live_bytes",
                  "mapped_bytes", "peak_mapped_bytes"):
        if not isinstance(stats.get(field), int) or stats[field] < 0:
            sys.exit("%s: %s: bad %r: %r" % (label, name, field, stats.get(field)))
    def require(ok, what):
        if not ok:
            sys.exit("%s: %s: %s (%s)" % (label, name, what, json.dumps(
                {k: v for k, v in stats.items() if k != "classes"})))
    require(stats["frees"] <= stats["allocs"], "more frees than allocs")
    require(stats["peak_live_bytes"] >= stats["live_bytes"], "peak_live_bytes < live_bytes")
    require(stats["peak_mapped_bytes"] >= stats["mapped_bytes"], "peak_mapped_bytes < mapped_bytes")
    require(stats["mapped_bytes"] >= stats["live_bytes"], "live bytes exceed mapped bytes")
    classes, large = stats.get("classes"), stats.get("large")
    require(isinstance(classes, list) and isinstance(large, dict), "no classes or large figures")
    require(sum(c["allocs"] for c in classes) + large["allocs"] == stats["allocs"],
            "class and large allocs do not add up to allocs")
    require(sum(c["frees"] for c in classes) + large["frees"] == stats["frees"],
            "class and large frees do not add up to frees")
    total += stats["allocs"]
    busiest = max(busiest, stats["allocs"])
if busiest <= 0:
    sys.exit("%s: no process counted any allocation" % label)
print("%s: magpie stats from %d process(es), %d allocations" % (label, len(names), total))
' "$tmp/stats" "$1" || fail "$1: magpie stats check failed"
}

# both LABEL CMD...: runs CMD under glibc and under magpie and compares everything.
both() {
  label=$1
  shift
  started=$(date +%s)
  run_side glibc "$label" "$@"
  run_side magpie "$label" "$@"
  for part in status out err; do
    if ! cmp -s "$tmp/$label.glibc.$part" "$tmp/$label.magpie.$part"; then
      echo "---- $label: $part differs (glibc vs magpie); first differences:" >&2
      diff "$tmp/$label.glibc.$part" "$tmp/$label.magpie.$part" | head -n 30 >&2 || true
      echo "---- magpie stderr (head):" >&2
      head -n 20 "$tmp/$label.magpie.err" >&2 || true
      fail "$label: $part differs between glibc and magpie"
    fi
  done
  [ "$(cat "$tmp/$label.glibc.status")" = 0 ] ||
    fail "$label: exit status $(cat "$tmp/$label.glibc.status") even under glibc (a broken test)"
  [ -s "$tmp/$label.glibc.out" ] || fail "$label: no output even under glibc (a broken test)"
  check_stats "$label"
  echo "$label: identical under glibc and magpie ($(wc -c <"$tmp/$label.glibc.out") bytes of" \
    "output, $(($(date +%s) - started)) s for both runs)"
}

case_python() {
  need /usr/bin/python3
  both python /usr/bin/python3 -s -B "$here/workload.py"
  # Every object allocation through malloc, not only the large ones.
  both python-malloc env PYTHONMALLOC=malloc /usr/bin/python3 -s -B "$here/workload.py"
}

# CPython's own regression tests of the parts that lean on malloc hardest (threads, fork,
# signals, the cyclic GC, weak references, mmap, ctypes, the C API's memory hooks, tracemalloc,
# big containers), every object through malloc (PYTHONMALLOC=malloc), two workers, under each
# malloc with JUnit results. magpie's side runs threads past the first on the CPUs' magazines
# (percpu_threads=1), so both of its fast paths are used. Passes when every test that passed
# under glibc passed under magpie too, and magpie ran (its stats files, as above); a test that
# fails under glibc as well (this machine's environment) is not magpie's to pass.
pytests_modules="test_threading test_thread test_threading_local test_gc test_weakref test_mmap
  test_signal test_fork1 test_wait4 test_ctypes test_capi test_tracemalloc test_memoryview
  test_bytes test_dict test_list test_set test_array test_json test_sys test_faulthandler
  test_queue test_zlib test_struct"

# pytests_check MODE GLIBC.xml MAGPIE.xml [AGAIN.xml]: the tests that passed under glibc and not
# under magpie. MODE modules: prints their modules, to run again; MODE check: fails naming them,
# less those that passed in AGAIN.xml, a second run of those modules under magpie (a test that
# depends on timing may miss on a loaded machine, under either malloc).
pytests_check='
import sys
import xml.etree.ElementTree as ET

def outcomes(path):
    got = {}
    for case in ET.parse(path).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        name = ".".join(part for part in (case.get("classname"), case.get("name")) if part)
        got[name] = kinds[0] if kinds else "passed"
    return got

mode, files = sys.argv[1], sys.argv[2:]
glibc, magpie = outcomes(files[0]), outcomes(files[1])
passed = [t for t, o in glibc.items() if o == "passed"]
if len(passed) < 1000:
    sys.exit("only %d tests passed under glibc (a broken test)" % len(passed))
lost = sorted(t for t in passed if magpie.get(t) != "passed")
if mode == "modules":
    print(" ".join(sorted({t.split(".")[1] for t in lost if t.startswith("test.")})))
    sys.exit(0)
if len(files) > 2:
    again = outcomes(files[2])
    for t in lost:
        if again.get(t) == "passed":
            print("pytests: %s passed when run again" % t)
    lost = [t for t in lost if again.get(t) != "passed"]
for t in lost[:30]:
    print("%s: %s under magpie" % (t, magpie.get(t, "not run")))
if lost:
    sys.exit("%d tests that passed under glibc did not pass under magpie" % len(lost))
print("pytests: %d tests passed under glibc, all of them under magpie too (%d failed or were "
      "skipped under glibc)" % (len(passed), len(glibc) - len(passed)))
'

case_pytests() {
  need /usr/bin/python3
  tests=$(/usr/bin/python3 -c 'import os, test; print(os.path.dirname(test.__file__))')
  [ -f "$tests/test_threading.py" ] ||
    fail "CPython's test suite is not installed in $tests (scripts/deps.sh installs it)"
  started=$(date +%s)
  magpie_options="percpu_threads=1,"
  for side in glibc magpie; do
    run_side $side pytests env PYTHONMALLOC=malloc /usr/bin/python3 -B -m test -j2 \
      --timeout 300 -u cpu,subprocess --junit-xml "$tmp/pytests.$side.xml" $pytests_modules
  done
  # the module names and the result files are words (no spaces in $tmp: mktemp's template)
  results="$tmp/pytests.glibc.xml $tmp/pytests.magpie.xml"
  again=$("$validator" -S -B -c "$pytests_check" modules $results) ||
    fail "pytests: no results to compare"
  if [ -n "$again" ]; then
    echo "pytests: running again under magpie: $again"
    run_side magpie pytests-again env PYTHONMALLOC=malloc /usr/bin/python3 -B -m test \
      --timeout 300 -u cpu,subprocess --junit-xml "$tmp/pytests.again.xml" $again
    results="$results $tmp/pytests.again.xml"
  fi
  "$validator" -S -B -c "$pytests_check" check $results ||
    { tail -n 30 "$tmp/pytests.magpie.out" >&2; fail "pytests: outcomes differ"; }
  check_stats pytests
  echo "pytests: $(($(date +%s) - started)) s"
}

case_sqlite() {
  need sqlite3
  both sqlite-file sh -c 'sqlite3 work.db <"$1" && sqlite3 work.db "PRAGMA integrity_check"' sh \
    "$here/workload.sql"
  both sqlite-memory sh -c 'exec sqlite3 :memory: <"$1"' sh "$here/workload.sql"
}

case_gcc() {
  need gcc cksum
  # Compile (the driver, cc1, as, collect2 and ld all run under the same malloc), run the result,
  # and print checksums of the object and the executable: a miscompilation shows up there.
  both gcc sh -c '
    set -e
    cp "$1" prog.c
    gcc -O2 -Wall -Wextra -o prog prog.c
    gcc -O0 -g -c -o prog.o prog.c
    ./prog
    cksum prog prog.o' sh "$here/workload_prog.c"
}

case_git() {
  need git
  both git sh -c '
    set -e
    export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
    export GIT_AUTHOR_NAME="Magpie Test" GIT_AUTHOR_EMAIL=magpie@example.org
    export GIT_COMMITTER_NAME="Magpie Test" GIT_COMMITTER_EMAIL=magpie@example.org
    git init -q -b main repo
    cd repo
    i=1
    while [ $i -le 12 ]; do
      mkdir -p "dir$((i % 3))"
      awk -v seed=$i "BEGIN { x = seed; for (n = 0; n < 400 * seed; n++) {
        x = (x * 16807) % 2147483647; printf \"line %d of file %d: %d\\n\", n, seed, x } }" \
        >"dir$((i % 3))/file$i.txt"
      if [ $i -gt 2 ]; then sed -i "s/^line 1/LINE 1/" "dir$(((i - 2) % 3))/file$((i - 2)).txt"; fi
      if [ $i -eq 9 ]; then git rm -q dir1/file4.txt; fi
      git add -A
      GIT_AUTHOR_DATE="@$((1700000000 + i * 3600)) +0000" \
        GIT_COMMITTER_DATE="@$((1700000000 + i * 3600 + 60)) +0000" \
        git commit -q -m "commit $i" -m "Body of commit $i."
      i=$((i + 1))
    done
    git log --stat
    git diff --stat HEAD~5 HEAD
    git grep -c "LINE 1" HEAD -- dir2
    git gc -q
    git fsck --strict --no-progress
    git rev-list --all --objects | sort
    git log --format="%H %s" -- dir0' sh
}

case_sort() {
  need sort awk cksum
  # 20 MB of deterministic pseudo-random lines, generated once (under glibc, outside the runs).
  awk 'BEGIN { x = 12345; for (n = 0; n < 620000; n++) {
         x = (x * 16807) % 2147483647; y = (x * 16807) % 2147483647; x = y
         printf "%010d %s %d key%05d\n", x, substr("abcdefghijklmnopqrstuvwxyz", 1 + x % 26, 1 + y % 20), y % 1000, n % 99991 } }' \
    >"$tmp/input.txt"
  size=$(wc -c <"$tmp/input.txt")
  [ "$size" -gt 15000000 ] || fail "generated input is only $size bytes"
  both sort sort "$tmp/input.txt"
  both sort-keys sh -c 'sort -t" " -k3,3n -k2,2r -k1,1 "$1" | cksum; sort -u -k4,4 "$1" | tail -n 5' \
    sh "$tmp/input.txt"
}

case_options() {
  need sort
  printf 'pear\napple\nfig\n' >"$tmp/fruit.txt"
  run_side glibc options sort "$tmp/fruit.txt"
  rm -rf "$tmp/work"
  mkdir "$tmp/work"
  status=0
  (cd "$tmp/work" && exec env -i PATH=/usr/bin:/bin LC_ALL=C LD_PRELOAD="$lib" \
    MAGPIE_OPTIONS=bogus_magpie_option=1 sort "$tmp/fruit.txt") \
    >"$tmp/options.magpie.out" 2>"$tmp/options.magpie.err" || status=$?
  [ "$status" = 0 ] || fail "exit status $status with an unknown option"
  cmp -s "$tmp/options.glibc.out" "$tmp/options.magpie.out" ||
    fail "output changed with an unknown option"
  mentions=$(grep -c bogus_magpie_option "$tmp/options.magpie.err" || true)
  if [ "$mentions" != 1 ]; then
    echo "---- stderr:" >&2
    cat "$tmp/options.magpie.err" >&2
    fail "stderr mentions the unknown option name on $mentions lines, wanted 1 warning"
  fi
  if grep -q bogus_magpie_option "$tmp/options.magpie.out"; then
    fail "the warning went to stdout"
  fi
  echo "options: one warning naming the unknown option: $(cat "$tmp/options.magpie.err")"
}

case "$case_name" in
python | pytests | sqlite | gcc | git | sort | options) "case_$case_name" ;;
*)
  echo "preload: unknown case $case_name" >&2
  exit 2
  ;;
esac
rm -rf "$tmp"
echo "preload $case_name: ok"
