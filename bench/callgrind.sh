#!/bin/sh
# Fast-path cost: instructions per malloc+free pair, counted by valgrind's callgrind, for sizes
# 16..1024 under glibc, magpie, jemalloc, tcmalloc and mimalloc. A thin wrapper over
# `bench/run.py --callgrind` (which builds bench/fastpath.c with cc and saves the table in
# build/results/callgrind-<date>.md, or under --out DIR); options are passed on, e.g. --allocators magpie,mimalloc
# or --magpie build/libmagpie.so.
exec python3 "$(dirname "$0")/run.py" --callgrind "$@"
