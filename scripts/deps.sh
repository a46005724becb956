#!/bin/sh
# Installs what the build and the tests need when it is missing (Debian; as root).
set -e
need=""
# The tests run Debian's own python3 (/usr/bin/python3), whatever else is on PATH. The install
# tests need pkg-config (programs built against the installed library), groff (the man pages'
# check) and, for the .deb, dpkg-shlibdeps and file (CPack derives Depends with them).
for pair in cmake:cmake gcc:gcc g++:g++ make:make /usr/bin/python3:python3 sqlite3:sqlite3 \
            git:git valgrind:valgrind clang-format:clang-format clang:clang \
            pkg-config:pkgconf groff:groff-base dpkg-shlibdeps:dpkg-dev file:file; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need="$need $pkg"
done
# The fuzz target (tests/fuzz) links libFuzzer, which is in compiler-rt: Debian's clang only
# recommends it.
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1 ||
  need="$need libclang-rt-dev"
# The Rust binding's test (bindings/rust) runs cargo: rustup's in ~/.cargo/bin if there is one,
# else Debian's (the crates build with its rustc 1.63).
command -v cargo >/dev/null 2>&1 || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ] ||
  need="$need cargo"
[ -n "$need" ] || exit 0
echo "deps: installing$need"
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing$need and not root: install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq $need >/dev/null
