#!/bin/sh
# Installs what one make target needs when it is missing (Debian; as root):
#   scripts/deps.sh build   `make`, `make demo`: the compilers, cmake, make and python3 (the
#                           configure step finds it for the tool's tests; the demo runs in it)
#   scripts/deps.sh test    `make test`: the above, and what the tests run (sqlite3, git,
#                           valgrind, clang and libFuzzer, pkg-config, groff, cargo; tmux and
#                           redis for `magpie top`'s tests; glibc-source, whose malloc tests
#                           tests/glibc builds; linux-perf, which the device bundle carries;
#                           CPython's own test suite, which preload_pytests runs)
#   scripts/deps.sh package `make deb`: the build's, and dpkg-dev and file
#   scripts/deps.sh format  `make format`, `make format-check`: clang-format
# Without an argument: build.
set -e
mode=${1:-build}
# The tests run Debian's own python3 (/usr/bin/python3), whatever else is on PATH. A .deb needs
# dpkg-shlibdeps and file (CPack derives Depends with them).
build="cmake:cmake gcc:gcc g++:g++ make:make /usr/bin/python3:python3"
package="dpkg-shlibdeps:dpkg-dev file:file"
case $mode in
build)   pairs=$build ;;
package) pairs="$build $package" ;;
# The install tests need pkg-config (programs built against the installed library), groff (the
# man pages' check) and what a .deb needs.
test)    pairs="$build $package sqlite3:sqlite3 git:git valgrind:valgrind clang:clang
                pkg-config:pkgconf groff:groff-base tmux:tmux redis-server:redis-server
                redis-benchmark:redis-tools perf:linux-perf" ;;
format)  pairs="clang-format:clang-format" ;;
*) echo "usage: scripts/deps.sh [build|test|package|format]" >&2; exit 2 ;;
esac
# CPython's regression tests (tests/preload, case pytests) for Debian's own python3: the package
# to install where they are missing (nothing where python3 itself is not installed yet).
python_tests() {
  py=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 0
  [ -f "/usr/lib/python$py/test/test_threading.py" ] || echo "libpython$py-testsuite"
}
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
  # The Rust binding's test (bindings/rust) runs cargo: rustup's in ~/.cargo/bin if there is
  # one, else Debian's (the crates build with its rustc 1.63).
  command -v cargo >/dev/null 2>&1 || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ] ||
    need="$need cargo"
  # glibc's own malloc tests (tests/glibc) come from the source of the glibc that runs here.
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //')
  [ -f "/usr/src/glibc/glibc-$glibc.tar.xz" ] || need="$need glibc-source"
  tests=$(python_tests)
  [ -z "$tests" ] || need="$need $tests"
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
# python3 may have come in just now: its tests follow it.
if [ "$mode" = test ] && [ -n "$(python_tests)" ]; then
  apt-get install -y -qq "$(python_tests)" >/dev/null
fi
