#!/bin/sh
# Installs the peer "mimalloc3" of the benchmarks (bench/scaling.py): mimalloc 3.4.3's shared
# library, libmimalloc.so.3, which Debian 12 does not package (it has 2.0.9). It comes from
# PyPI's cmeel-mimalloc wheel, fetched with pip (pinned version; pip checks the index's hash) and
# unpacked with Python's zipfile into DEST (default build/peers/mimalloc3), so the library is
# DEST/cmeel.prefix/lib/libmimalloc.so.3. Nothing is installed into any Python environment.
# Idempotent; exits 0 without the library when pip or the network is missing (the runners then
# name mimalloc3 and skip it).
#
#   scripts/peer-mimalloc3.sh [DEST]
set -u
VERSION=3.4.3
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
dest=${1:-$build/peers/mimalloc3}
lib=$dest/cmeel.prefix/lib/libmimalloc.so.3
[ -e "$lib" ] && exit 0
py=$(command -v python3) || { echo "peer-mimalloc3: no python3" >&2; exit 0; }
if ! "$py" -m pip --version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip \
      >/dev/null 2>&1
  fi
  "$py" -m pip --version >/dev/null 2>&1 ||
    { echo "peer-mimalloc3: no pip (apt-get install python3-pip); mimalloc3 skipped" >&2; exit 0; }
fi
tmp=$(mktemp -d) || exit 0
trap 'rm -rf "$tmp"' EXIT
echo "peer-mimalloc3: fetching cmeel-mimalloc $VERSION from PyPI into $dest"
if ! "$py" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    -d "$tmp" "cmeel-mimalloc==$VERSION" >/dev/null 2>&1; then
  echo "peer-mimalloc3: pip could not fetch cmeel-mimalloc $VERSION; mimalloc3 skipped" >&2
  exit 0
fi
mkdir -p "$dest" && "$py" -m zipfile -e "$tmp"/cmeel_mimalloc-*.whl "$dest" || exit 0
[ -e "$lib" ] || { echo "peer-mimalloc3: the wheel holds no $lib" >&2; exit 0; }
exit 0
