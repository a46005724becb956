#!/bin/sh
# Builds the device bundle: a self-contained folder that runs the many-core matrix
# (bench/scaling.py's workloads) on a machine with no package manager and maybe no python3.
# It holds the benchmark programs and bench_rusage (and bench_large, whose shrink-wait,
# trim-wait and wake-t2 rows are run by hand there: bench/README.md), libmagpie.so and the
# peers' libraries (jemalloc, tcmalloc, mimalloc 2.0 from Debian; mimalloc 3 from build/peers, see
# scripts/peer-mimalloc3.sh), Debian's ld-linux-x86-64.so.2 and, in lib/, every shared library
# they load (libc, libm, libstdc++, libgcc_s, ...), so every program runs as
#   bundle/ld-linux-x86-64.so.2 --library-path bundle/lib [--preload bundle/libX.so] bundle/prog
# with nothing of the host's but its kernel. Also: plan.txt (the cells: name|threads|program|
# arguments, from scaling.py --emit-plan), allocators.txt (name|library|version), run.sh (the
# runner, bench/bundle-run.sh: POSIX sh, no python), session.sh (bench/bundle-session.sh: what
# a device call runs, in one command) and helpers.sh (bench/bundle-helpers.sh, which they and
# profile.sh source); where the host has perf and objdump, they too with profile.sh
# (bench/bundle-profile.sh: sampled profiles of chosen cells). bench/README.md says how to run it.
#
#   bench/bundle.sh [-t THREADS] [-w WORK] [-b BUILD] [-B REV] [-V NAME=REV|PATCH]... [-n] [-P]
#                   [DEST]
#     THREADS  comma-separated thread counts (default 1,4,16,64)
#     WORK     factor on each program's total work (default 6: on 16 CPUs a run at 16 threads
#              then takes 0.1-0.3 s, at 1 thread 0.6-3 s)
#     BUILD    the build folder with libmagpie.so and bench/ (default $BUILD or build)
#     REV      also libmagpie.so of git revision REV, built as `make build` builds (about a
#              minute), as the allocator magbase: a change and the library it starts from
#              then alternate in the same runs on the same machine
#     NAME=REV also libmagpie.so of REV as the allocator NAME, which must begin with "mag"
#              (bench/scaling.py reports such builds against the peers, not as peers): an
#              experiment committed on a branch of its own, say; -B REV is -V magbase=REV
#     NAME=PATCH   also libmagpie.so of HEAD with the patch file PATCH applied (git apply), as
#              the allocator NAME: the experiments in bench/variants/, which a fresh clone has
#     -n       fetch nothing: leave out mimalloc3 unless it is already under BUILD/peers
#     -P       no profiler: leave out perf, objdump and profile.sh (about 35 MiB)
#     DEST     the bundle (default bundle/ at the top of the checkout, ignored by git)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
threads=1,4,16,64
work=6
build=$root/${BUILD:-build}
builds= # NAME=REV ...
fetch=yes
profile=yes
usage() { sed -n '2,33p' "$0" >&2; exit 2; }
while getopts t:w:b:B:V:nP opt; do
  case $opt in
  t) threads=$OPTARG ;;
  w) work=$OPTARG ;;
  b) build=$OPTARG ;;
  B) builds="$builds magbase=$OPTARG" ;;
  V) case $OPTARG in magpie=* | *=*=* | *[!A-Za-z0-9_=.~^/-]*) usage ;; mag?*=?*) ;; *) usage ;; esac
     builds="$builds $OPTARG" ;;
  n) fetch=no ;;
  P) profile=no ;;
  *) usage ;;
  esac
done
shift $((OPTIND - 1))
dest=${1:-$root/bundle}
libdir=/usr/lib/x86_64-linux-gnu

progs="larson prodcons threadchurn mstress servermix falseshare large rusage"
for p in $progs; do
  [ -x "$build/bench/bench_$p" ] ||
    { echo "bundle: $build/bench/bench_$p not built (make build)" >&2; exit 1; }
done
[ -e "$build/libmagpie.so" ] || { echo "bundle: $build/libmagpie.so not built" >&2; exit 1; }
[ $fetch = no ] || "$root/scripts/peer-mimalloc3.sh" "$build/peers/mimalloc3"

rm -rf "$dest"
mkdir -p "$dest/lib"
# name|library|version of each allocator; glibc preloads nothing.
printf 'glibc||glibc %s\n' "$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)" > "$dest/allocators.txt"
add_lib() { # name source version
  cp -L "$2" "$dest/$(basename "$2")"
  printf '%s|%s|%s\n' "$1" "$(basename "$2")" "$3" >> "$dest/allocators.txt"
}
add_deb() { # name library package
  [ -e "$libdir/$2" ] || return 0
  add_lib "$1" "$libdir/$2" "$3 $(dpkg-query -W -f '${Version}' "$3" 2>/dev/null || echo '?')"
}
built=$(date -r "$build/libmagpie.so" '+%Y-%m-%d %H:%M')
add_lib magpie "$build/libmagpie.so" "git $(git -C "$root" describe --always --dirty), built $built"
add_deb jemalloc libjemalloc.so.2 libjemalloc2
add_deb tcmalloc libtcmalloc_minimal.so.4 libtcmalloc-minimal4
add_deb mimalloc libmimalloc.so.2 libmimalloc2.0
m3=$build/peers/mimalloc3/cmeel.prefix/lib/libmimalloc.so.3
[ -e "$m3" ] && add_lib mimalloc3 "$m3" "cmeel-mimalloc 3.4.3 (PyPI)"
for nr in $builds; do # each REV in a worktree of its own, built and dropped
  name=${nr%%=*}
  patch= # NAME=PATCH: HEAD with the patch applied
  if [ -f "${nr#*=}" ]; then
    patch=$(cd "$(dirname "${nr#*=}")" && pwd)/$(basename "${nr#*=}")
    rev=$(git -C "$root" rev-parse --short HEAD)
  else
    rev=$(git -C "$root" rev-parse --short "${nr#*=}^{commit}")
  fi
  tmp=$(mktemp -d)
  git -C "$root" worktree add -q --detach "$tmp/src" "$rev"
  [ -z "$patch" ] || git -C "$tmp/src" apply "$patch" || {
    git -C "$root" worktree remove --force "$tmp/src"
    echo "bundle: $patch does not apply to $rev" >&2
    exit 1
  }
  cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$tmp/log" 2>&1 &&
    cmake --build "$tmp/build" -j "$(nproc)" --target magpie >> "$tmp/log" 2>&1 ||
    { tail -20 "$tmp/log" >&2; echo "bundle: building $rev failed" >&2; exit 1; }
  cp -L "$tmp/build/libmagpie.so" "$dest/lib$name.so"
  printf '%s|lib%s.so|git %s%s\n' "$name" "$name" "$rev" "${patch:+ + $(basename "$patch")}" \
    >> "$dest/allocators.txt"
  git -C "$root" worktree remove --force "$tmp/src"
  rm -rf "$tmp"
done

for p in $progs; do
  cp "$build/bench/bench_$p" "$dest/"
done
# perf and objdump for profile.sh, where the host has them (-P: not); objdump through a
# wrapper that runs it under the bundled ld.so, as perf annotate calls it by path.
tools=
if [ $profile = yes ] && command -v perf > /dev/null && command -v objdump > /dev/null; then
  cp -L "$(command -v perf)" "$dest/perf"
  mkdir -p "$dest/bin"
  cp -L "$(command -v objdump)" "$dest/bin/objdump.bin"
  cat > "$dest/bin/objdump" << 'EOF_WRAPPER'
#!/bin/sh
here=$(cd "${0%/*}/.." && pwd)
exec "$here/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/bin/objdump.bin" "$@"
EOF_WRAPPER
  chmod +x "$dest/bin/objdump"
  cp "$root/bench/bundle-profile.sh" "$dest/profile.sh"
  chmod +x "$dest/profile.sh"
  tools="$dest/perf $dest/bin/objdump.bin"
fi
# Every library the programs, allocators and tools load, by the name they ask for (ldd:
# "name => path").
for f in "$dest"/bench_* "$dest"/lib*.so* $tools; do
  ldd "$f" 2>/dev/null | while read -r name arrow path _; do
    if [ "$arrow" = "=>" ] && [ -e "$path" ] && [ ! -e "$dest/lib/$name" ]; then
      cp -L "$path" "$dest/lib/$name"
    fi
  done
done
cp -L /lib64/ld-linux-x86-64.so.2 "$dest/ld-linux-x86-64.so.2"
python3 "$root/bench/scaling.py" --emit-plan "$dest/plan.txt" --threads "$threads" --work "$work"
cp "$root/bench/bundle-run.sh" "$dest/run.sh"
chmod +x "$dest/run.sh"
cp "$root/bench/bundle-helpers.sh" "$dest/helpers.sh"
cp "$root/bench/bundle-session.sh" "$dest/session.sh"
chmod +x "$dest/session.sh"
echo "bundle: $dest ($(du -sh "$dest" | cut -f1); $(wc -l < "$dest/plan.txt") cells," \
  "$(wc -l < "$dest/allocators.txt") allocators)"
