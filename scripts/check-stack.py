#!/usr/bin/env python3
"""Fails when a function of the library has a stack frame over FRAME_MAX bytes and is not one of
the rare paths named below (one named below that has no such frame with this compiler is only
mentioned).

Every page of a thread's stack that a call ever touches stays resident for the thread's life,
so a frame that malloc's or free's slow paths reach costs each thread of a pool that takes them
(a thousand threads that each give back a span once kept a page more each, while the arena's
free kept room for a reap's batch of jobs in its frame: docs/measurements.md, session 29). Big
frames belong to paths that run once or on request: reports, statistics, debug mode, start-up,
reaps. The sizes come from the compiler (-fstack-usage, which CMakeLists.txt gives the
library's objects): each object's NAME.su beside it, a line "file:line:column:function<TAB>
bytes<TAB>static|dynamic[,bounded]". Usage: check-stack.py OBJECT...: the library's objects
(ctest: stack).
"""
import os
import sys

FRAME_MAX = 1024

# Functions whose frames may be bigger, by why they are rare.
RARE = {
    # reports of errors and misuse, and the heap profiler's capture of a sampled allocation's
    # stack (libgcc's unwinder state), once per sample
    "report_fatal": "report", "report_warning_n": "report", "report_heap_error": "report",
    "debug_report_error": "report", "sample_report": "report", "demangle_itanium": "report",
    "report_capture": "profiler sample",
    "report_current_stack": "report",  # report_capture inlined into it where -O3 inlines more
    # statistics and profiles written on request
    "stats_write": "statistics", "stats_write_glibc": "statistics",
    "stats_write_xml": "statistics", "api_malloc_info": "statistics",
    "folded_write": "profile", "pprof_write": "profile",
    # debug mode (MAGPIE_DEBUG), which serves no block otherwise
    "free_internal": "debug mode", "live_block": "debug mode",
    "debug_verify_records": "debug mode", "debug_leaks_report": "debug mode",
    # start-up: the environment, /proc and cgroup files, options' warnings
    "os_pid_env_has": "start-up", "os_each_line": "start-up", "opt_clamp": "start-up",
    "os_cgroup_read": "start-up",
    # reaps: the reaper thread, or a slow path once a reap interval
    "slab_give_back": "reap", "vmem_reap": "reap", "mag_cpu_reclaim": "reap",
}


def frames(obj):
    """[(function, bytes)] from obj's .su file (NAME.c.o -> NAME.c.su, or NAME.su)."""
    base = obj[:-2] if obj.endswith(".o") else obj
    for su in (base + ".su", os.path.splitext(base)[0] + ".su"):
        if os.path.exists(su):
            break
    else:
        sys.exit("check-stack: no stack usage file beside %s (built without -fstack-usage?)" % obj)
    out = []
    with open(su) as f:
        for line in f:
            where, size, _kind = line.rstrip("\n").split("\t")
            name = where.split(":", 3)[3].split(".")[0]  # jobs_run.part.0: GCC's piece of one
            out.append((name, int(size)))
    return out


def main(objs):
    if not objs:
        sys.exit("usage: check-stack.py OBJECT...")
    big, count = {}, 0
    for obj in objs:
        for name, size in frames(obj):
            count += 1
            if size > FRAME_MAX:
                big[name] = max(size, big.get(name, 0))
    bad = sorted((size, name) for name, size in big.items() if name not in RARE)
    stale = sorted(name for name in RARE if name not in big)
    for size, name in reversed(bad):
        print("check-stack: %s has a %d-byte frame (at most %d outside the rare paths of "
              "scripts/check-stack.py)" % (name, size, FRAME_MAX))
    for name in stale:
        print("check-stack: note: %s is listed as a rare path with a big frame, but has none "
              "here" % name)
    if bad:
        sys.exit(1)
    print("check-stack: %d functions, every frame over %d bytes on a rare path (%d)"
          % (count, FRAME_MAX, len(big)))


if __name__ == "__main__":
    main([o for arg in sys.argv[1:] for o in arg.split(";") if o])  # CMake passes a list
