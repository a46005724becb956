#!/bin/sh
# Runs a command for ctest and passes only when it exits 0 and its output (stdout and stderr)
# has a line matching an extended regular expression. ctest's PASS_REGULAR_EXPRESSION alone
# ignores the exit status: a program that printed the expected line and then failed, or crashed
# at exit, would pass.
#   expect_output.sh REGEX COMMAND [ARGS...]
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "expect_output: $1 exited with status $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_output: no line of the output matches: $regex" >&2
  exit 1
fi
exit 0
