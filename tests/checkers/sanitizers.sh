#!/bin/sh
# Checks what docs/sanitizers.md says of magpie in programs built with a sanitizer: builds small
# programs with clang (and gcc for its shared ASan runtime) the documented ways, runs them, and
# checks the documented outcome. Usage: sanitizers.sh SRC_DIR INCLUDE_DIR LIBMAGPIE_SO
# LIBMAGPIE_A. Exits 77 (SKIPPED) where clang or its sanitizer runtimes are missing.
set -u
src=$1 inc=$2 so=$3 archive=$4
libdir=$(dirname "$so")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

fail() {
  echo "FAILED: $*"
  failed=1
}

# expect NAME PATTERN OUTPUT-FILE: OUTPUT-FILE must hold a line matching PATTERN.
expect() {
  grep -q -e "$2" "$3" || { fail "$1: no '$2' in:"; cat "$3"; }
}

# refuse NAME PATTERN OUTPUT-FILE: OUTPUT-FILE must hold no line matching PATTERN.
refuse() {
  if grep -q -e "$2" "$3"; then fail "$1: '$2' in:"; cat "$3"; fi
}

cc_flags="-g -O1 -I$src/../api -I$inc"
echo 'int main(void) { return 0; }' >"$work/probe.c"
for s in address thread; do
  if ! clang -fsanitize=$s "$work/probe.c" -o "$work/probe" 2>/dev/null; then
    echo "SKIPPED: clang -fsanitize=$s cannot build a program here (scripts/deps.sh installs clang)"
    exit 77
  fi
done

build() { # build OUTPUT CC FLAGS...
  out=$1 compiler=$2
  shift 2
  $compiler $cc_flags "$@" -o "$work/$out" -lpthread -ldl || fail "cannot build $out"
}
run() { # run NAME PROGRAM ARGS...: output (stdout and stderr) in $work/NAME.out
  name=$1
  shift
  "$@" >"$work/$name.out" 2>&1
  echo $? >"$work/$name.rc"
}

# 1. magpie preloaded into a clang ASan/TSan program: the sanitizer's malloc serves (its runtime
#    is inside the executable, which comes before any preload), and reports the overrun.
build asan_malloc clang -fsanitize=address "$src/san_malloc.c"
build tsan_malloc clang -fsanitize=thread "$src/san_malloc.c"
LD_PRELOAD=$so run asan_preload "$work/asan_malloc" overrun
expect asan_preload "malloc: not magpie" "$work/asan_preload.out"
expect asan_preload "heap-buffer-overflow" "$work/asan_preload.out"
LD_PRELOAD=$so run tsan_preload "$work/tsan_malloc"
expect tsan_preload "malloc: not magpie" "$work/tsan_preload.out"

# 2. gcc's ASan runtime is a shared library that must come first: preloading magpie before it
#    makes it refuse to start.
if gcc -fsanitize=address "$work/probe.c" -o "$work/probe" 2>/dev/null; then
  build gasan_malloc gcc -fsanitize=address "$src/san_malloc.c"
  LD_PRELOAD=$so run gasan_preload "$work/gasan_malloc"
  expect gasan_preload "ASan runtime does not come first" "$work/gasan_preload.out"
  [ "$(cat "$work/gasan_preload.rc")" != 0 ] || fail "gasan_preload: exited 0"
fi

# 3. An ASan program linked with libmagpie.so or libmagpie.a: ASan's malloc, magpie's object
#    caches, whose objects ASan checks (poisoned while magpie holds them).
build asan_linked clang -fsanitize=address "$src/san_objects.c" -L"$libdir" -lmagpie \
  -Wl,-rpath,"$libdir"
build asan_static clang -fsanitize=address "$src/san_objects.c" "$archive"
for prog in asan_linked asan_static; do
  run ${prog}_who "$work/$prog" who
  expect ${prog}_who "malloc: not magpie" "$work/${prog}_who.out"
  run ${prog}_clean "$work/$prog" clean
  expect ${prog}_clean "clean: done" "$work/${prog}_clean.out"
  refuse ${prog}_clean "ERROR: AddressSanitizer" "$work/${prog}_clean.out"
  run ${prog}_overrun "$work/$prog" overrun
  expect ${prog}_overrun "ERROR: AddressSanitizer: use-after-poison" "$work/${prog}_overrun.out"
  expect ${prog}_overrun "in overrun_object" "$work/${prog}_overrun.out"
  run ${prog}_after_free "$work/$prog" after-free
  expect ${prog}_after_free "ERROR: AddressSanitizer: use-after-poison" \
    "$work/${prog}_after_free.out"
  expect ${prog}_after_free "in use_after_free_object" "$work/${prog}_after_free.out"
done

# 4. A TSan program linked with libmagpie.so: objects handed from thread to thread through a
#    cache draw no race report (magpie tells TSan of each hand-over).
build tsan_linked clang -fsanitize=thread "$src/san_objects.c" -L"$libdir" -lmagpie \
  -Wl,-rpath,"$libdir"
run tsan_clean "$work/tsan_linked" clean
expect tsan_clean "clean: done" "$work/tsan_clean.out"
refuse tsan_clean "WARNING: ThreadSanitizer" "$work/tsan_clean.out"

[ $failed = 0 ] && echo "sanitizers: every documented outcome seen"
exit $failed
