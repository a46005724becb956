#!/bin/sh
# Installs what one make target needs when it is missing (Debian; as root):
#   scripts/deps.sh build   `make`, `make demo`: the compilers, cmake, make and python3 (the
#                           configure step finds it for the tool's tests; the demo runs in it)
#   scripts/deps.sh test    `make test`: the above, and what the tests run (sqlite3, git,
#                           valgrind, clang and libFuzzer)
#   scripts/deps.sh format  `make format`, `make format-check`: clang-format
# Without an argument: build.
set -e
mode=${1:-build}
case $mode in
# The tests run Debian's own python3 (/usr/bin/python3), whatever else is on PATH.
build)  pairs="cmake:cmake gcc:gcc g++:g++ make:make /usr/bin/python3:python3" ;;
test)   pairs="cmake:cmake gcc:gcc g++:g++ make:make /usr/bin/python3:python3 sqlite3:sqlite3
               git:git valgrind:valgrind clang:clang" ;;
format) pairs="clang-format:clang-format" ;;
*) echo "usage: scripts/deps.sh [build|test|format]" >&2; exit 2 ;;
esac
need=""
for pair in $pairs; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need="$need $pkg"
done
# The fuzz target (tests/fuzz) links libFuzzer, which is in compiler-rt: Debian's clang only
# recommends it.
if [ "$mode" = test ]; then
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1 ||
    need="$need libclang-rt-dev"
fi
[ -n "$need" ] || exit 0
echo "deps ($mode): installing$need"
if [ "$(id -u)" != 0 ]; then
  echo "deps ($mode): missing$need and not root: install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq $need >/dev/null
