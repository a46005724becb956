#!/bin/sh
# Installs what bench/run.py needs when it is missing (Debian 12; as root): the peer allocators it
# compares magpie with, the real programs it runs (sqlite3, redis, g++, python3), valgrind for the
# fast-path counts and Debian's matplotlib for the chart. Idempotent and quiet when nothing is
# missing. Exits 0 when something could not be installed (not root, no network): run.py reports
# and skips what is absent rather than failing the whole run.
#
#   scripts/bench-deps.sh          install what is missing
#   scripts/bench-deps.sh --check  only list what is missing (exit 1 when something is)
set -u

LIBDIR=/usr/lib/x86_64-linux-gnu
[ -d "$LIBDIR" ] || LIBDIR=/usr/lib/$(uname -m)-linux-gnu

# Each entry is "test:package"; a test starting with / is a file that must exist, anything else
# is a command that must be on PATH.
WANT="
$LIBDIR/libjemalloc.so.2:libjemalloc2
$LIBDIR/libtcmalloc_minimal.so.4:libtcmalloc-minimal4
$LIBDIR/libmimalloc.so.2:libmimalloc2.0
/usr/bin/python3:python3
/usr/bin/sqlite3:sqlite3
/usr/bin/redis-server:redis-server
/usr/bin/redis-benchmark:redis-tools
/usr/bin/g++:g++
valgrind:valgrind
cmake:cmake
/usr/lib/python3/dist-packages/matplotlib/__init__.py:python3-matplotlib
"

need=""
for pair in $WANT; do
  test_=${pair%%:*}
  pkg=${pair#*:}
  case $test_ in
    /*) [ -e "$test_" ] || need="$need $pkg" ;;
    *) command -v "$test_" >/dev/null 2>&1 || need="$need $pkg" ;;
  esac
done

if [ "${1:-}" = "--check" ]; then
  [ -z "$need" ] && exit 0
  echo "bench-deps: missing:$need"
  exit 1
fi
# mimalloc 3 (peer mimalloc3 of bench/scaling.py) is not in Debian 12: PyPI's wheel, unpacked
# under the build directory ($BUILD, default build).
"$(dirname "$0")/peer-mimalloc3.sh"
[ -n "$need" ] || exit 0

echo "bench-deps: installing$need"
if [ "$(id -u)" != 0 ]; then
  echo "bench-deps: not root; install with: apt-get install$need (run.py skips what is missing)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# Install one at a time so that one unavailable package does not block the others.
updated=0
for pkg in $need; do
  if ! apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1; then
    if [ $updated = 0 ]; then
      apt-get update -qq >/dev/null 2>&1
      updated=1
    fi
    apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1 ||
      echo "bench-deps: could not install $pkg (run.py will skip what needs it)" >&2
  fi
done
# The Debian redis-server package starts a system instance on port 6379; the benchmark starts its
# own on a free port, so stop the system one to keep it from using CPU during measurements.
if [ -x /usr/bin/redis-server ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
exit 0
