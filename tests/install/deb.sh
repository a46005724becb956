#!/bin/sh
# The Debian package as a user meets it: builds it from this build directory with CPack (what
# `make deb` does), checks its name and contents, installs it with dpkg, runs the installed
# /usr/bin/magpie on python3 and checks the report, then removes (purges) the package and checks its
# files are gone. Whatever happens, the package is removed on exit (if this test installed
# it), and the user's build/install_manifest.txt is kept as it was (CPack's install rewrites it).
#
# usage: deb.sh BUILD_DIR VERSION
set -eu
build=$1 version=$2
skip() { echo "SKIPPED: deb: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "installing a package needs root"
for tool in dpkg dpkg-deb cpack dpkg-shlibdeps file flock python3; do
  command -v $tool >/dev/null || skip "$tool is missing (scripts/deps.sh installs it)"
done
# One such test at a time on this machine (other checkouts run it too): they share /usr.
exec 9>"${TMPDIR:-/tmp}/magpie-deb-test.lock"
flock -w 300 9 || skip "another deb test held the lock for 5 minutes"
if dpkg-query -W -f '${Status}' magpie 2>/dev/null | grep -q installed; then
  skip "a magpie package is installed already; this test leaves it alone"
fi
[ ! -e /usr/bin/magpie ] || skip "/usr/bin/magpie exists and is not from a magpie package"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/magpie-deb-test.XXXXXX")
manifest=$build/install_manifest.txt
[ -f "$manifest" ] && cp "$manifest" "$tmp/user-manifest"
installed=0
cleanup() {
  [ $installed = 0 ] || dpkg -P magpie >/dev/null 2>&1 || echo "deb: could not remove the package" >&2
  if [ -f "$tmp/user-manifest" ]; then cp "$tmp/user-manifest" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() { echo "deb: FAILED: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail "cpack"; }
deb=$tmp/out/magpie_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail "no $deb; cpack made: $(ls "$tmp/out")"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
lib=/usr/lib/$multiarch
dpkg-deb -c "$deb" >"$tmp/contents"
for f in /usr/bin/magpie $lib/libmagpie.so.1.0.0 $lib/libmagpie.so.1 $lib/libmagpie.so $lib/libmagpie.a \
         /usr/include/magpie.h $lib/pkgconfig/magpie.pc $lib/cmake/magpie/magpieConfig.cmake \
         /usr/share/man/man1/magpie.1 /usr/share/man/man3/magpie.3; do
  grep -q " \.$f\( \|$\)" "$tmp/contents" || fail "the package lacks $f"
done
dpkg-deb -f "$deb" Depends | grep -q 'libc6' || fail "Depends: $(dpkg-deb -f "$deb" Depends)"

installed=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
ldconfig -p | grep -q "libmagpie.so.1 .*=> .*/libmagpie.so.1$" || fail "ld.so's cache lacks libmagpie.so.1"
env -u LD_PRELOAD -u MAGPIE_OPTIONS /usr/bin/magpie run --stats -- python3 -c 'print(1)' \
  >"$tmp/stdout" 2>"$tmp/stderr" || { cat "$tmp/stderr"; fail "magpie run exited with status $?"; }
[ "$(cat "$tmp/stdout")" = 1 ] || fail "python3 printed '$(cat "$tmp/stdout")'"
grep -q '^== magpie: python3 (pid [0-9]*) exited with status 0' "$tmp/stderr" &&
  grep -q '^  allocations  *[1-9]' "$tmp/stderr" || { cat "$tmp/stderr"; fail "no report of python3's allocations"; }

dpkg -P magpie >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -P"; }
installed=0
for f in /usr/bin/magpie $lib/libmagpie.so.1 $lib/libmagpie.so $lib/libmagpie.a /usr/include/magpie.h \
         $lib/pkgconfig/magpie.pc $lib/cmake/magpie /usr/share/man/man1/magpie.1; do
  [ ! -e "$f" ] || fail "$f is still there after dpkg -P"
done
! ldconfig -p | grep -q libmagpie || fail "ld.so's cache still has libmagpie after dpkg -P"
echo "deb: ok ($(basename "$deb"): installed, /usr/bin/magpie ran python3 under magpie, removed)"
