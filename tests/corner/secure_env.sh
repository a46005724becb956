#!/bin/sh
# secure_env.sh PROGRAM: PROGRAM (corner_secure_env, linked with libmagpie.so) with
# MAGPIE_OPTIONS=stats=json,stats_file=... and MAGPIE_DEBUG=leaks,log=...: as built, both
# files appear; as a set-group-ID copy (group nogroup, made next to PROGRAM: /tmp may be
# mounted nosuid), neither may, and magpie warns that it ignored the two. Needs root, to give
# the copy another group; skipped otherwise (exit status 77).
set -eu
prog=$1
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root to make a set-group-ID copy"
  exit 77
fi
dir=$(mktemp -d "$(dirname "$prog")/secure_env.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cp "$prog" "$dir/plain"
cp "$prog" "$dir/setgid"
chgrp 65534 "$dir/setgid"
chmod 2755 "$dir/setgid"

# run NAME SECURE: the copy NAME with both variables set; its stderr in $dir/NAME.err
run() {
  status=0
  MAGPIE_OPTIONS="stats=json,stats_file=$dir/$1.stats" MAGPIE_DEBUG="leaks,log=$dir/$1.log" \
    "$dir/$1" "$2" 2>"$dir/$1.err" || status=$?
  if [ $status = 77 ]; then exit 77; fi
  if [ $status != 0 ]; then
    cat "$dir/$1.err" >&2
    echo "secure_env: FAIL: $1 exited with status $status" >&2
    exit 1
  fi
}

run plain 0
for f in plain.stats plain.log; do
  [ -s "$dir/$f" ] || { echo "secure_env: FAIL: the plain run wrote no $f" >&2; exit 1; }
done
run setgid 1
for f in setgid.stats setgid.log; do
  if [ -e "$dir/$f" ]; then
    echo "secure_env: FAIL: the set-group-ID run created $f" >&2
    exit 1
  fi
done
for var in MAGPIE_OPTIONS MAGPIE_DEBUG; do
  grep -q "magpie: ignored in a set-user-ID.*: $var\$" "$dir/setgid.err" ||
    { cat "$dir/setgid.err" >&2; echo "secure_env: FAIL: no warning for $var" >&2; exit 1; }
done
echo "secure_env: the plain run wrote its stats and leak report, the set-group-ID one neither"
