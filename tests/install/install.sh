#!/bin/sh
# What `make install` and `make uninstall` run (cmake --install, cmake/uninstall.cmake), in a
# temporary prefix: installs the build there, builds programs against the installed files only
# (a C program with pkg-config, linked with libmagpie.so and with libmagpie.a; a C++ program with
# find_package(magpie), with magpie::magpie and magpie::magpie_static), runs each (probe.c and
# consumer/probe.cc fail unless magpie serves their allocations), checks the installed command
# finds the installed library and that a DESTDIR install lands under DESTDIR, then uninstalls and
# checks no file is left. The user's own build/install_manifest.txt (make uninstall's list) is
# kept as it was.
#
# usage: install.sh SOURCE_DIR BUILD_DIR VERSION
set -eu
src=$1 build=$2 version=$3
here=$src/tests/install
tmp=$(mktemp -d "${TMPDIR:-/tmp}/magpie-install-test.XXXXXX")
manifest=$build/install_manifest.txt
[ -f "$manifest" ] && cp "$manifest" "$tmp/user-manifest"
restore() {
  if [ -f "$tmp/user-manifest" ]; then cp "$tmp/user-manifest" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$tmp"
}
trap restore EXIT
trap "exit 1" INT TERM HUP
fail() { echo "install: FAILED: $*" >&2; exit 1; }
for tool in pkg-config cc c++ cmake; do
  command -v $tool >/dev/null || fail "$tool is missing (scripts/deps.sh installs it)"
done

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name magpie.pc)")
libdir=$(pkg-config --variable=libdir magpie)
[ "$(pkg-config --modversion magpie)" = "$version" ] || fail "magpie.pc says version $(pkg-config --modversion magpie)"
[ "$("$prefix/bin/magpie" version)" = "magpie $version" ] || fail "magpie version says $("$prefix/bin/magpie" version)"
for f in "$libdir/libmagpie.so.1" "$libdir/libmagpie.so" "$libdir/libmagpie.a" \
         "$prefix/include/magpie.h" "$prefix/include/magpie_stats.h" "$prefix/bin/magpie" \
         "$libdir/cmake/magpie/magpieConfig.cmake" \
         "$prefix/share/man/man1/magpie.1" "$prefix/share/man/man3/magpie.3"; do
  [ -e "$f" ] || fail "not installed: $f"
done
soname=$(readelf -d "$libdir/libmagpie.so.1" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libmagpie.so.1 ] || fail "SONAME is '$soname'"

# C, pkg-config, shared (the rpath: the prefix is not in ld.so's path) and static.
cc -fno-builtin -I"$src/tests/api" "$here/probe.c" -o "$tmp/probe_c" \
  $(pkg-config --cflags --libs magpie) -Wl,-rpath,"$libdir"
cc -fno-builtin -I"$src/tests/api" "$here/probe.c" -o "$tmp/probe_c_static" \
  $(pkg-config --cflags magpie) -Wl,-Bstatic $(pkg-config --static --libs magpie) -Wl,-Bdynamic
readelf -d "$tmp/probe_c" | grep -q 'NEEDED.*libmagpie.so.1' || fail "probe_c does not need libmagpie.so.1"
if readelf -d "$tmp/probe_c_static" | grep -q 'NEEDED.*libmagpie'; then
  fail "probe_c_static needs libmagpie.so"
fi
"$tmp/probe_c" pkg-config_shared
"$tmp/probe_c_static" pkg-config_static

# C++, find_package(magpie).
cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCHECK_DIR="$src/tests/api" -DCMAKE_BUILD_RPATH="$libdir" >"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log"; fail "configuring the find_package project"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log"; fail "building the find_package project"; }
"$tmp/consumer/probe_shared" find_package_shared
"$tmp/consumer/probe_static" find_package_static

# The installed command preloads the installed library.
preload=$("$prefix/bin/magpie" run -- sh -c 'printf %s "$LD_PRELOAD"')
[ "$preload" = "$(realpath "$libdir")/libmagpie.so.1" ] || fail "magpie run preloads '$preload'"

# make uninstall's script, with this install's manifest: nothing of magpie is left.
cmake -DMANIFEST="$manifest" -P "$src/cmake/uninstall.cmake" >/dev/null
left=$(find "$prefix" ! -type d)
[ -z "$left" ] || fail "left after uninstall: $left"

# DESTDIR: the files go under it, magpie.pc names the prefix itself.
DESTDIR=$tmp/stage cmake --install "$build" --prefix /usr/local >/dev/null
pc=$(find "$tmp/stage/usr/local" -name magpie.pc)
grep -qx 'prefix=/usr/local' "$pc" || fail "DESTDIR install: $pc does not say prefix=/usr/local"
[ -z "$(find "$tmp/stage" ! -type d ! -path "$tmp/stage/usr/local/*")" ] || fail "DESTDIR install outside the prefix"
DESTDIR=$tmp/stage cmake -DMANIFEST="$manifest" -P "$src/cmake/uninstall.cmake" >/dev/null
left=$(find "$tmp/stage" ! -type d)
[ -z "$left" ] || fail "left after uninstalling from DESTDIR: $left"
echo "install: ok (pkg-config and find_package programs, shared and static, served by magpie; uninstall left nothing)"
