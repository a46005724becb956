#!/bin/sh
# Runs a command for ctest and passes only when it exits 0 and its output (stdout and stderr)
# has a line matching an extended regular expression, and one matching each further
# expression given with --and. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status:
# a program that printed the expected line and then failed, or crashed at exit, would pass.
#   expect_output.sh REGEX [--and REGEX]... COMMAND [ARGS...]
regexes=$1
shift
while [ "$1" = "--and" ]; do
  regexes="$regexes
$2"
  shift 2
done
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "expect_output: $1 exited with status $rc" >&2
  exit 1
fi
failed=0
while IFS= read -r regex; do
  if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
    echo "expect_output: no line of the output matches: $regex" >&2
    failed=1
  fi
done <<END
$regexes
END
exit $failed
