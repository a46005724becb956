#!/usr/bin/env python3
"""Runs the magpie benchmark suite under several allocators, side by side.

  python3 bench/run.py --demo       glibc vs magpie on a few workloads, readable report (~2 min)
  python3 bench/run.py --quick      every workload, every allocator, small sizes (< 5 min)
  python3 bench/run.py --full       every workload, every allocator, bigger sizes (< 30 min)
  python3 bench/run.py --callgrind  instructions per malloc+free and new+delete pair (valgrind)
  python3 bench/run.py --scaling    the many-core matrix at 1..64 threads (bench/scaling.py)
Filters: --allocators glibc,magpie  --workloads larson,server  (a group or a row name).
See bench/README.md for the workloads and how to read the output.

The allocator is chosen per run with LD_PRELOAD (glibc: none). Allocators alternate within each
repetition (A B C D E, then the next workload, then A B C D E of the next repetition ...) so that
slow drifts of a noisy machine spread over all of them. Every child runs under bench_rusage
(bench/rusage.c), which reports its wall time, CPU time and peak RSS (ru_maxrss from wait4); the
workloads also report the time of their measured phase and their own metrics.
This file uses the standard library only; the chart is drawn by bench/svgchart.py (the demo's,
and any other where matplotlib is missing) or bench/chart.py where matplotlib can be imported,
RSS over time (server, breathe) by bench/rss_svg.py as an SVG everywhere.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import rss_svg  # bench/: RSS over time as an SVG
import scaling  # bench/: the many-core matrix (--scaling), and where the mimalloc 3 peer lies

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PROGRAMS = os.path.join(BENCH, "programs")
LIBDIR = "/usr/lib/x86_64-linux-gnu" if os.path.isdir("/usr/lib/x86_64-linux-gnu") else \
    "/usr/lib/%s-linux-gnu" % platform.machine()

# name -> (library to preload or None, Debian package it comes from). magpie's path is an option.
PEERS = {
    "jemalloc": (os.path.join(LIBDIR, "libjemalloc.so.2"), "libjemalloc2"),
    "tcmalloc": (os.path.join(LIBDIR, "libtcmalloc_minimal.so.4"), "libtcmalloc-minimal4"),
    "mimalloc": (os.path.join(LIBDIR, "libmimalloc.so.2"), "libmimalloc2.0"),
}
ALL_ALLOCATORS = ["glibc", "magpie", "jemalloc", "tcmalloc", "mimalloc", "mimalloc3"]
SUBJECT = "magpie"  # the allocator the ratio columns are about
LIBC = os.path.join(LIBDIR, "libc.so.6")

MODES = {
    # reps: repetitions; timeout: seconds per child before it is killed.
    "demo": {"reps": 3, "timeout": 60},
    "quick": {"reps": 3, "timeout": 90},
    "full": {"reps": 5, "timeout": 120},
}
SCALING_THREADS = [1, 2, 4, 8, 16, 32, 64]  # --scaling's default, run by bench/scaling.py


# idle: RSS over live bytes with the threads' stacks (the program's, the same for every allocator)
# and without them (what the allocator itself holds: the target)
IDLE_METRICS = [("rss_over_live", "RSS/live", "lower"),
                ("heap_over_live", "RSS/live, stacks excluded", "lower")]


def wait_metrics(what):
    """shrink-wait, trim-wait: the other threads' longest and 99th-percentile wait for `what`."""
    return [("wait_max_ms", "longest %s wait, ms" % what, "lower"),
            ("wait_p99_ms", "99th-percentile wait, ms", "lower")]


# Each allocator's own transparent huge page option, turned on in the rows that measure huge pages
# (tlb), since child_env() otherwise clears every allocator setting. Debian's jemalloc 5.3 and
# mimalloc 2.0 leave THP to the kernel by default, which in its madvise mode means 4 KiB pages;
# tcmalloc (gperftools 2.10) has no such option and runs with its defaults, as do glibc and magpie.
THP_ENV = {"jemalloc": {"MALLOC_CONF": "thp:always,metadata_thp:auto"},
           "mimalloc": {"MIMALLOC_LARGE_OS_PAGES": "1"}}


class Workload:
    """One row of the table: a program, its arguments for the mode, and how to read its result."""

    def __init__(self, name, group, desc, argv=None, kind="c", metric=None, reps=None,
                 only=None, memory_only=False, **extra):
        self.name = name          # row name, e.g. larson-t8
        self.group = group        # workload family, e.g. larson (what --workloads also matches)
        self.desc = desc          # one line: what it models
        self.argv = argv or []    # for kind "c": arguments after the binary
        self.kind = kind          # c, python, sqlite, redis, gxx
        # (key in the RESULT line, label, "lower"/"higher" is better), or a list of them: the
        # first is the row's metric in the demo and in s["metric"], all are in the metric table
        self.metrics = [metric] if isinstance(metric, tuple) else list(metric or [])
        self.metric = self.metrics[0] if self.metrics else None
        self.reps = reps          # repetitions, if fewer than the mode's
        self.only = only          # allocators this row is limited to (objcache: magpie)
        self.memory_only = memory_only  # its point is memory: the demo reports no speed-up
        # kind c: allocator name -> environment added to its runs (e.g. THP_ENV)
        self.alloc_env = extra.pop("alloc_env", {})
        self.extra = extra        # kind-specific settings


def plan(mode, threads=None):
    """The workload rows for a mode. Sizes are chosen so that a glibc run takes 0.2-1 s in quick
    and a few seconds in full, on the 2-core machine these were tuned on."""
    quick = mode == "quick"
    many = [2, 32] if quick else [2, 8, 32]
    w = []
    if mode == "demo":
        return [
            Workload("larson-t8", "larson",
                     "server threads swap random-size objects between them (8 threads)",
                     ["-t", "8", "-i", "8000000"]),
            Workload("prodcons-t2", "prodcons",
                     "one thread allocates, another frees (a pipeline)",
                     ["-t", "2", "-i", "6000000"]),
            Workload("idle-t256", "idle",
                     "256 mostly idle threads holding small working sets",
                     ["-t", "256", "-i", "20", "-n", "64"],
                     metric=IDLE_METRICS, memory_only=True),
            Workload("python", "python", "python3 running a fixed script (PYTHONMALLOC=malloc)",
                     kind="python", scale="1"),
        ]
    w.append(Workload("churn", "churn", "1 thread, 8..32K blocks freed LIFO/FIFO/random",
                      ["-i", "300" if quick else "1500", "-n", "1000"]))
    w.append(Workload("simple", "simple",
                      "batches of 25..1600 blocks of 16..64 B allocated, freed in order",
                      ["-i", "300000" if quick else "2000000"]))
    for t in many:
        w.append(Workload("larson-t%d" % t, "larson",
                          "threads replace and swap random objects; threads replaced",
                          ["-t", str(t), "-i", "3000000" if quick else "10000000"]))
    for t in [2] if quick else [2, 8]:
        w.append(Workload("larson-sized-t%d" % t, "larson_sized",
                          "C++ server: new, sized delete, threads respawned unjoined",
                          ["-t", str(t), "-i", "3000000" if quick else "10000000",
                           "-n", "5000", "-m", "uniform,respawn"]))
    for t in many:
        w.append(Workload("prodcons-t%d" % t, "prodcons", "half the threads allocate, half free",
                          ["-t", str(t), "-i", "2000000" if quick else "8000000"]))
    for t in [2] if quick else [2, 8]:
        w.append(Workload("scatter-t%d" % t, "scatter",
                          "threads free big batches of 64 B blocks in random order",
                          ["-t", str(t), "-i", "4" if quick else "16", "-n", "500000"]))
    for m in ("thrash", "scratch"):
        for t in [2] if quick else [2, 8]:
            w.append(Workload("%s-t%d" % (m, t), "falseshare",
                              "false sharing, cache-%s style (8-byte blocks)" % m,
                              ["-m", m, "-t", str(t), "-i", "400000" if quick else "2000000"]))
    for t in [2] if quick else [2, 8]:
        w.append(Workload("server-t%d" % t, "server",
                          "changing size mix, then free 90% and idle 5 s",
                          ["-t", str(t), "-i", "1000000" if quick else "4000000",
                           "-n", "32" if quick else "64", "-w", "5"],
                          metric=("idle_ratio", "RSS/live after idle", "lower"),
                          reps=1 if quick else 3, series=True))
    w.append(Workload("burst", "burst", "steady live set; a burst 16x its size freed; idle 5 s",
                      ["-t", "2", "-n", "16", "-w", "5"],
                      metric=("idle_ratio", "RSS/live after idle", "lower"),
                      reps=3))  # its timed step is ~70 ms: one run was too noisy to rank
    # The breathing server without huge pages and with them: magpie's hugepages option, the
    # peers' THP options; its RSS over time goes to the results' -rss.svg.
    for suffix, env in (("", {SUBJECT: {"MAGPIE_OPTIONS": "hugepages=never"}}),
                        ("-thp", dict(THP_ENV, **{SUBJECT: {"MAGPIE_OPTIONS": "hugepages=auto"}}))):
        w.append(Workload("breathe" + suffix, "breathe",
                          "heap grows to %s MiB, shrinks to a tenth, %s times; idle 5 s%s"
                          % ("512" if quick else "1024", "3" if quick else "4",
                             "; huge pages on" if suffix else ""),
                          ["-t", "2", "-i", "3" if quick else "4",
                           "-n", "512" if quick else "1024", "-w", "5"],
                          metric=("idle_ratio", "RSS/live after idle", "lower"),
                          reps=1 if quick else 3, series=True, alloc_env=env))
    for t in (256, 1024):
        w.append(Workload("idle-t%d" % t, "idle", "many mostly idle threads, small working sets",
                          ["-t", str(t), "-i", "20", "-n", "64"],
                          metric=IDLE_METRICS))
    w.append(Workload("tlb-t2", "tlb",
                      "%s MiB of 48..200 B nodes pointer-chased in random order; peers' THP on"
                      % ("256" if quick else "1024"),
                      ["-t", "2", "-i", "10000000" if quick else "20000000",
                       "-n", "256" if quick else "1024"],
                      metric=("huge_share", "share of RSS on huge pages", "higher"),
                      reps=None if quick else 3,  # a full run builds 1 GiB: 10-20 s on 2 cores
                      alloc_env=THP_ENV))
    w.append(Workload("realloc", "large", "strings and vectors grown by realloc to many MiB",
                      ["-m", "realloc", "-t", "2", "-i", "1" if quick else "2", "-n", "8"]))
    w.append(Workload("bigchurn", "large", "64 KiB..64 MiB blocks allocated and freed",
                      ["-m", "churn", "-t", "2", "-i", "100" if quick else "400"]))
    w.append(Workload("calloc", "large", "large zeroed blocks from calloc",
                      ["-m", "calloc", "-t", "2", "-i", "100" if quick else "400"]))
    w.append(Workload("shrink-wait", "large",
                      "1 MiB malloc+free while another thread frees and trims a %s MiB heap"
                      % ("512" if quick else "1024"),
                      ["-m", "shrink", "-t", "2", "-i", "3", "-n", "512" if quick else "1024"],
                      metric=wait_metrics("malloc+free")))
    w.append(Workload("trim-wait", "large",
                      "64-byte mallocs while another thread trims a %s MiB heap of 64-byte "
                      "blocks, 1 in 256 kept" % ("256" if quick else "512"),
                      ["-m", "trim", "-t", "2", "-i", "3", "-n", "256" if quick else "512"],
                      metric=wait_metrics("malloc")))
    w.append(Workload("wake-t2", "large",
                      "2 threads build again at once a %s MiB heap of 64-byte blocks that a "
                      "trim gave back, 1 in 256 kept" % ("256" if quick else "512"),
                      ["-m", "wake", "-t", "2", "-i", "3", "-n", "256" if quick else "512"],
                      metric=("rebuild_s", "time of the rebuilds after the trims, s", "lower")))
    w.append(Workload("objcache", "objcache", "magpie_cache_* with a constructor vs malloc+init",
                      ["-t", "2", "-i", "1000000" if quick else "4000000"], kind="objcache",
                      metric=("speedup", "malloc+init / cache", "higher"), only=[SUBJECT]))
    w.append(Workload("python", "python", "python3 running a fixed script (PYTHONMALLOC=malloc)",
                      kind="python", scale="0.5" if quick else "2"))
    w.append(Workload("sqlite", "sqlite", "sqlite3 in-memory database, fixed SQL script",
                      kind="sqlite", rows="100000" if quick else "300000"))
    w.append(Workload("redis", "redis", "redis-server under redis-benchmark (server measured)",
                      kind="redis", requests="10000" if quick else "50000"))
    w.append(Workload("g++", "gxx", "g++ -O2 build of a 4-file C++ program",
                      kind="gxx"))
    return w


# ---- machine and versions ------------------------------------------------------------------

def machine_description():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        glibc = "unknown"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "memory_mib": mem,
        "kernel": platform.release(),
        "glibc": glibc,
        "os": os_release(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "loadavg_start": os.getloadavg()[0],
        "python": platform.python_version(),
    }


def os_release():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def package_version(pkg):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def magpie_version(path):
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    stamp = ""
    if os.path.exists(path):
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d %H:%M")
    return ("git %s, built %s" % (rev or "?", stamp or "?")).strip()


def resolve_allocators(names, magpie_path, build):
    """Returns ([(name, preload path or None, version)], [(name, why skipped)])."""
    found, missing = [], []
    for name in names:
        if name == "glibc":
            found.append((name, None, "glibc " + machine_glibc()))
        elif name == "magpie":
            if os.path.exists(magpie_path):
                found.append((name, magpie_path, magpie_version(magpie_path)))
            else:
                missing.append((name, "%s not found (build it: make)" % magpie_path))
        elif name in PEERS:
            path, pkg = PEERS[name]
            if os.path.exists(path):
                found.append((name, path, "%s %s" % (pkg, package_version(pkg) or "?")))
            else:
                missing.append((name, "%s not found (apt-get install %s, or "
                                      "scripts/bench-deps.sh)" % (path, pkg)))
        elif name == "mimalloc3":  # not packaged by Debian: under the build directory
            path = os.path.abspath(scaling.mimalloc3_path(build))
            if os.path.exists(path):
                version = "mimalloc %s, cmeel-mimalloc" % scaling.MIMALLOC3_VERSION
                found.append((name, path, version))
            else:
                missing.append((name, "%s not found (scripts/peer-mimalloc3.sh)" % path))
        else:
            missing.append((name, "unknown allocator (known: %s)" % ", ".join(ALL_ALLOCATORS)))
    return found, missing


def machine_glibc():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (ValueError, OSError, IndexError):
        return "?"


# ---- running one child ---------------------------------------------------------------------

class Outcome:
    """What one run of one workload under one allocator produced."""

    def __init__(self):
        self.ok = False
        self.status = "not run"   # "ok", or why it failed
        self.wall = None          # seconds, parent's clock around the child
        self.cpu = None           # user + system seconds of the child and its waited children
        self.maxrss_kib = None    # peak RSS of the child (or of its largest descendant)
        self.result = {}          # key=value pairs of the RESULT line
        self.fingerprint = None   # for real programs: hash of their output, compared across
        self.repro = ""           # shell command that reproduces the run
        self.series = None        # [seconds, live bytes, RSS bytes] samples, where recorded
        self.stderr_tail = ""
        self.link_ns = None       # bench_rusage's link between two CPUs before the run, or None

    @property
    def time(self):
        t = self.result.get("time")
        try:
            if t is not None and float(t) > 0:
                return float(t)
        except ValueError:
            pass
        return self.wall


# The helper (bench/rusage.c) that measures each child; see its header for why it is needed.
# Set by main(); None means measure from here, where peak RSS has the runner's own as a floor.
HELPER = None


class Measured:
    """A finished child: exit status (-N: signal N), wall and CPU seconds, peak RSS, output, and
    the link between two CPUs that the helper measured before it (its text, or None)."""

    def __init__(self, rc, wall, cpu, maxrss_kib, out, err, timed_out, link_ns=None):
        self.rc, self.wall, self.cpu, self.maxrss_kib = rc, wall, cpu, maxrss_kib
        self.out, self.err, self.timed_out = out, err, timed_out
        self.link_ns = link_ns


def child_env(preload, extra=None, helper=False):
    """The environment of a child: ours without allocator settings, plus the preload (handed to
    the helper in BENCH_CHILD_PRELOAD so that the helper itself runs on the system allocator,
    which also times the link between two CPUs before the child starts: BENCH_LINK)."""
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "BENCH_CHILD_PRELOAD", "BENCH_LINK", "MALLOC_CONF",
              "MIMALLOC_OPTIONS", "MAGPIE_OPTIONS", "MAGPIE_DEBUG", "TCMALLOC_RELEASE_RATE"):
        env.pop(k, None)
    if helper:
        env["BENCH_LINK"] = "1"
    if preload:
        env["BENCH_CHILD_PRELOAD" if helper else "LD_PRELOAD"] = preload
    if extra:
        env.update(extra)
    return env


class Child:
    """A measured child process running in its own session (so a timeout kills all of it)."""

    def __init__(self, argv, preload, extra_env=None, stdin_path=None, cwd=None, tmp=None):
        self.statfile = None
        if HELPER:
            fd, self.statfile = tempfile.mkstemp(prefix="rusage-", dir=tmp)
            os.close(fd)
            argv = [HELPER, self.statfile] + list(argv)
        self.out = tempfile.TemporaryFile(dir=tmp)
        self.err = tempfile.TemporaryFile(dir=tmp)
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        self.t0 = time.perf_counter()
        try:
            self.p = subprocess.Popen(argv, env=child_env(preload, extra_env, HELPER is not None),
                                      stdin=stdin, stdout=self.out, stderr=self.err, cwd=cwd,
                                      start_new_session=True)
        finally:
            if stdin_path:
                stdin.close()

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout):
        """Waits (killing the child after timeout seconds) and returns a Measured."""
        timed_out = []
        timer = threading.Timer(timeout, lambda: (timed_out.append(True), self.kill()))
        timer.start()
        try:
            _, status, ru = os.wait4(self.p.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - self.t0
        self.p.returncode = rc = os.waitstatus_to_exitcode(status)
        cpu, maxrss = ru.ru_utime + ru.ru_stime, ru.ru_maxrss
        link = None
        if self.statfile:
            with open(self.statfile) as f:
                kv = dict(t.split("=", 1) for t in f.read().split() if "=" in t)
            os.unlink(self.statfile)
            if "status" in kv:  # absent when the helper itself was killed (timeout)
                rc, wall = int(kv["status"]), float(kv["wall"])
                cpu = float(kv["utime"]) + float(kv["stime"])
                maxrss = int(kv["maxrss_kib"])
                link = kv.get("link_ns")
        texts = []
        for f in (self.out, self.err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()
        return Measured(rc, wall, cpu, maxrss, texts[0], texts[1], bool(timed_out), link)


def run_child(argv, preload, timeout, extra_env=None, stdin_path=None, cwd=None, tmp=None):
    return Child(argv, preload, extra_env, stdin_path, cwd, tmp).wait(timeout)


def parse_result(stdout, prefix="RESULT "):
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            kv = {}
            for tok in line.split()[2:]:
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    kv[k] = v
            kv["_name"] = line.split()[1] if len(line.split()) > 1 else ""
            return kv
    return None


def shell_quote(argv):
    return " ".join(a if a and all(c.isalnum() or c in "-_./=:,+@" for c in a) else
                    "'" + a.replace("'", "'\\''") + "'" for a in argv)


def repro_line(preload, argv, extra_env=None, stdin_path=None, cwd=None):
    env = ["%s=%s" % kv for kv in (extra_env or {}).items()]
    if preload:
        env.insert(0, "LD_PRELOAD=" + preload)
    cmd = shell_quote(env + list(argv)) + (" < " + stdin_path if stdin_path else "")
    return ("cd %s && " % cwd if cwd else "") + cmd


def finish(o, m, want_result=True):
    """Fills Outcome o from Measured m; a RESULT line is required when want_result."""
    o.wall, o.cpu, o.maxrss_kib, o.link_ns = m.wall, m.cpu, m.maxrss_kib, m.link_ns
    o.stderr_tail = "\n".join(m.err.strip().splitlines()[-5:])
    rc, wall = m.rc, m.wall
    if m.timed_out:
        o.status = "timeout after %.0f s" % wall
    elif rc < 0:
        o.status = "killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name
                                                 if -rc in signal.valid_signals() else "?")
    elif rc == 3:
        o.status = "verification failed (exit 3)"
    elif rc != 0:
        o.status = "exit status %d" % rc
    else:
        res = parse_result(m.out)
        if want_result and res is None:
            o.status = "no RESULT line"
        else:
            o.result = res or {}
            o.ok = True
            o.status = "ok"
    return o


# ---- the kinds of workload -------------------------------------------------------------------

class Runner:
    def __init__(self, args, build, tmpdir, variant_env=None):
        self.args = args
        self.build = build
        self.tmp = tmpdir
        self.variant_env = variant_env or {}  # allocator name -> environment (--magpie-variants)
        self.extra = {}  # the variant environment of the run in progress

    def binary(self, prog):
        for d in (os.path.join(self.build, "bench"), self.build):
            p = os.path.join(d, "bench_" + prog)
            if os.access(p, os.X_OK):
                return p
        return None

    def run(self, w, alloc, preload, timeout):
        fn = getattr(self, "run_" + w.kind)
        self.extra = self.variant_env.get(alloc, {})
        o = fn(w, alloc, preload, timeout)
        if self.extra:
            o.repro = " ".join("%s=%s" % kv for kv in self.extra.items()) + " " + o.repro
        return o

    def child(self, argv, preload, timeout, extra_env=None, **kw):
        """run_child for the allocator under test, with the environment of its variant."""
        env = dict(extra_env or {}, **self.extra)
        return run_child(argv, preload, timeout, extra_env=env or None, **kw)

    def run_c(self, w, alloc, preload, timeout, prog=None):
        prog = prog or w.group
        exe = self.binary(prog)
        o = Outcome()
        if exe is None:
            o.status = "bench_%s not built" % prog
            return o
        argv = [exe] + w.argv
        env = w.alloc_env.get(alloc)
        o.repro = repro_line(preload, argv, env)
        series = None
        if w.extra.get("series"):  # the program writes its RSS/live samples here (-m FILE)
            fd, series = tempfile.mkstemp(prefix="series-", suffix=".csv", dir=self.tmp)
            os.close(fd)
            argv = argv + ["-m", series]
        finish(o, self.child(argv, preload, timeout, extra_env=env, tmp=self.tmp))
        if series:
            try:
                with open(series) as f:
                    pts = [[float(x) for x in line.split(",")] for line in f.read().split()[1:]]
                step = max(1, len(pts) // 300)
                o.series = pts[::step] or None
            except (OSError, ValueError):
                pass  # a run that failed before writing its samples; its status says why
            os.unlink(series)
        return o

    def run_objcache(self, w, alloc, preload, timeout):
        # Linked against libmagpie; the preload makes sure it is the library under test.
        return self.run_c(w, alloc, preload, timeout, prog="objcache")

    def run_python(self, w, alloc, preload, timeout):
        argv = ["/usr/bin/python3", os.path.join(PROGRAMS, "workload.py"), w.extra["scale"]]
        extra = {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        o = Outcome()
        o.repro = repro_line(preload, argv, extra)
        finish(o, self.child(argv, preload, timeout, extra_env=extra, tmp=self.tmp))
        if o.ok:
            o.fingerprint = o.result.get("checksum")
            o.result = {k: v for k, v in o.result.items() if k != "time"}
        return o

    def run_sqlite(self, w, alloc, preload, timeout):
        script = os.path.join(self.tmp, "sqlite-%s.sql" % w.extra["rows"])
        if not os.path.exists(script):
            with open(os.path.join(PROGRAMS, "workload.sql")) as f:
                body = f.read()
            with open(script, "w") as f:
                f.write("CREATE TEMP TABLE bench_rows(value INTEGER);\n"
                        "INSERT INTO bench_rows VALUES (%d);\n" % int(w.extra["rows"]))
                f.write(body)
        argv = ["/usr/bin/sqlite3", "-bail", ":memory:"]
        o = Outcome()
        o.repro = repro_line(preload, argv, stdin_path=script)
        m = self.child(argv, preload, timeout, stdin_path=script, tmp=self.tmp)
        finish(o, m, want_result=False)
        if o.ok:
            if m.err.strip():
                o.ok, o.status = False, "sqlite error: " + m.err.strip().splitlines()[0]
            o.fingerprint = hashlib.sha256(m.out.encode()).hexdigest()[:16]
            o.result = {"lines": str(len(m.out.splitlines()))}
        return o

    def run_gxx(self, w, alloc, preload, timeout):
        cxx = os.path.join(PROGRAMS, "cxx")
        exe = os.path.join(self.tmp, "cxxprog-" + alloc)
        argv = ["/usr/bin/g++", "-O2", "-std=c++17", "-o", exe,
                "main.cc", "graph.cc", "text.cc", "matrix.cc"]
        o = Outcome()
        o.repro = repro_line(preload, argv, cwd=cxx)
        finish(o, self.child(argv, preload, timeout, cwd=cxx, tmp=self.tmp), want_result=False)
        if o.ok:
            # The program it built must work: run it (on the system allocator) and compare.
            m = run_child([exe], None, 30, tmp=self.tmp)
            if m.rc != 0 or parse_result(m.out) is None:
                o.ok, o.status = False, "the program g++ built does not run (exit %d)" % m.rc
            else:
                o.fingerprint = hashlib.sha256(m.out.encode()).hexdigest()[:16]
                o.result = {}
            try:
                os.unlink(exe)
            except OSError:
                pass
        return o

    def run_redis(self, w, alloc, preload, timeout):
        """Starts redis-server on a free port under the allocator, drives it with a bounded
        redis-benchmark (on the system allocator), stops it, and reports the server's peak RSS
        and the benchmark's wall time. Debian links redis-server against jemalloc, so glibc's
        malloc is obtained by preloading libc itself (symbols of a preloaded object come first)."""
        o = Outcome()
        port = free_port()
        datadir = tempfile.mkdtemp(prefix="redis-", dir=self.tmp)
        srv_argv = ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--daemonize", "no",
                    "--protected-mode", "no", "--dir", datadir, "--loglevel", "warning",
                    "--logfile", ""]
        srv_preload = preload or LIBC
        n = w.extra["requests"]
        bench_argv = ["/usr/bin/redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
                      "-n", n, "-c", "20", "-r", "100000", "-d", "200", "--csv",
                      "-t", "set,get,incr,lpush,rpop,sadd,hset,lrange_100,mset"]
        o.repro = repro_line(srv_preload, srv_argv) + " &  " + shell_quote(bench_argv)
        srv = Child(srv_argv, srv_preload, extra_env=self.extra or None, tmp=self.tmp)
        stopped = None
        try:
            if not wait_redis(port, srv.p, 15):
                o.status = "redis-server did not start"
                return o
            b = run_child(bench_argv, None, timeout, tmp=self.tmp)
            if b.timed_out or b.rc != 0:
                o.status = "redis-benchmark %s" % ("timed out" if b.timed_out else
                                                   "exit %d" % b.rc)
                o.stderr_tail = b.err.strip()[-300:]
                return o
            rps = []
            for line in b.out.splitlines():
                cols = [c.strip('"') for c in line.split(",")]
                if len(cols) > 1 and cols[0] != "test":
                    try:
                        rps.append(float(cols[1]))
                    except ValueError:
                        pass
            ok, detail = check_redis(port)
            redis_cmd(port, ["SHUTDOWN", "NOSAVE"])
            stopped = srv.wait(15)
            o.wall, o.cpu, o.maxrss_kib = b.wall, stopped.cpu, stopped.maxrss_kib
            o.link_ns = stopped.link_ns
            if stopped.timed_out:
                o.status = "redis-server did not stop"
            elif stopped.rc != 0:
                o.status = "redis-server exit status %d" % stopped.rc
            elif not ok:
                o.status = "redis check failed: " + detail
            elif len(rps) < 9:
                o.status = "redis-benchmark printed %d results, expected 9" % len(rps)
            else:
                o.ok, o.status = True, "ok"
                o.result = {"krps_mean": "%.1f" % (statistics.mean(rps) / 1000)}
            return o
        finally:
            if stopped is None:
                srv.kill()
                stopped = srv.wait(5)
            if not o.ok:
                tail = (stopped.out + stopped.err).strip().splitlines()[-3:]
                o.stderr_tail = (o.stderr_tail + "\n" + "\n".join(tail)).strip()
            shutil.rmtree(datadir, ignore_errors=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cmd(port, words, timeout=5.0):
    """Sends one command in RESP and returns its reply (bytes, one simple or bulk reply), or
    None when the server cannot be reached."""
    msg = b"*%d\r\n" % len(words) + b"".join(
        b"$%d\r\n%s\r\n" % (len(x), x) for x in (w.encode() for w in words))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(msg)
            data = b""
            while True:
                if b"\r\n" in data:
                    head = data.split(b"\r\n", 1)[0]
                    if not head.startswith(b"$") or head == b"$-1":
                        return data
                    if len(data) >= len(head) + 2 + int(head[1:]) + 2:
                        return data
                chunk = s.recv(65536)
                if not chunk:
                    return data
                data += chunk
    except (OSError, ValueError):
        return None


def wait_redis(port, srv, limit):
    end = time.time() + limit
    while time.time() < end:
        if srv.poll() is not None:
            return False
        if redis_cmd(port, ["PING"], 1.0) == b"+PONG\r\n":
            return True
        time.sleep(0.05)
    return False


def check_redis(port):
    value = "magpie-bench-" + "x" * 300
    if redis_cmd(port, ["SET", "bench:check", value]) != b"+OK\r\n":
        return False, "SET failed"
    got = redis_cmd(port, ["GET", "bench:check"]) or b""
    if value.encode() not in got:
        return False, "GET returned %r" % got[:40]
    size = redis_cmd(port, ["DBSIZE"]) or b""
    if not size.startswith(b":") or int(size[1:].strip() or 0) < 100:
        return False, "DBSIZE %r" % size
    return True, ""


# ---- statistics and tables -----------------------------------------------------------------

def summarise(runs, rows, allocs):
    """runs: {(row, alloc): [Outcome]}. Returns {(row, alloc): stats dict}, after checking that
    the real programs gave the same output under every allocator (glibc's is the reference)."""
    for w in rows:
        prints = {}
        for a in allocs:
            for o in runs.get((w.name, a), []):
                if o.ok and o.fingerprint is not None:
                    prints.setdefault(a, set()).add(o.fingerprint)
        if not prints:
            continue
        if "glibc" in prints:
            ref = sorted(prints["glibc"])[0]
        else:
            counts = {}
            for s in prints.values():
                for f in s:
                    counts[f] = counts.get(f, 0) + 1
            ref = max(sorted(counts), key=counts.get)
        for a in allocs:
            for o in runs.get((w.name, a), []):
                if o.ok and o.fingerprint is not None and o.fingerprint != ref:
                    o.ok, o.status = False, "output differs from the reference run's"
    stats = {}
    for (row, a), outs in runs.items():
        good = [o for o in outs if o.ok]
        s = {"n": len(outs), "ok": len(good), "failures": [o.status for o in outs if not o.ok]}
        for key, get in (("time", lambda o: o.time), ("wall", lambda o: o.wall),
                         ("cpu", lambda o: o.cpu), ("rss_kib", lambda o: o.maxrss_kib)):
            vals = [get(o) for o in good if get(o) is not None]
            if vals:
                s[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        w = next((x for x in rows if x.name == row), None)
        for i, m in enumerate(w.metrics if w is not None else []):
            vals = []
            for o in good:
                try:
                    vals.append(float(o.result[m[0]]))
                except (KeyError, ValueError):
                    pass
            if vals:
                s["metric:" + m[0]] = {"median": statistics.median(vals), "min": min(vals),
                                       "max": max(vals)}
                if i == 0:
                    s["metric"] = s["metric:" + m[0]]
        stats[(row, a)] = s
    return stats


def med(stats, row, a, key, which="median"):
    s = stats.get((row, a))
    if s is None or key not in s:
        return None
    return s[key][which]


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    prod = 1.0
    for x in xs:
        prod *= x
    return prod ** (1.0 / len(xs))


def fmt_time(t):
    if t is None:
        return "-"
    return "%.3fs" % t if t < 10 else "%.1fs" % t


def fmt_mib(kib):
    if kib is None:
        return "-"
    mib = kib / 1024.0
    return "%.1fM" % mib if mib < 100 else "%.0fM" % mib


def fmt_ratio(r):
    return "-" if r is None else "%.2fx" % r


def build_table(rows, allocs, stats, key, fmt, which="median"):
    """Rows of cells for one quantity (time or rss_kib): value per allocator with its ratio to
    glibc, then the subject's ratio to glibc and to the best peer. Returns (header, body,
    geomean row)."""
    peers = [a for a in allocs if a not in ("glibc", SUBJECT)]
    header = ["workload"] + list(allocs)
    has_subject = SUBJECT in allocs
    if has_subject:
        header += ["%s/glibc" % SUBJECT, "%s/best peer" % SUBJECT]
    if not peers:
        header = header[:-1] if has_subject else header
    body, ratios_g, ratios_p = [], {a: [] for a in allocs}, []
    for w in rows:
        if not any((w.name, a) in stats for a in allocs):
            continue
        base = med(stats, w.name, "glibc", key, which)
        cells = [w.name]
        for a in allocs:
            v = med(stats, w.name, a, key, which)
            s = stats.get((w.name, a))
            if v is None:
                cells.append("FAIL" if s and s["failures"] else "-")
                continue
            cell = fmt(v)
            if s and s["failures"]:
                cell += " (%d fail)" % len(s["failures"])
            if base and a != "glibc":
                cell += " %s" % fmt_ratio(v / base)
                ratios_g[a].append(v / base)
            cells.append(cell)
        if has_subject:
            v = med(stats, w.name, SUBJECT, key, which)
            cells.append(fmt_ratio(v / base) if v is not None and base else "-")
            if not peers:
                body.append(cells)
                continue
            pv = [(med(stats, w.name, p, key, which), p) for p in peers]
            pv = [x for x in pv if x[0] is not None]
            if v is not None and pv:
                best, who = min(pv)
                r = v / best if best else None
                if r:
                    ratios_p.append(r)
                cells.append("%s (%s)" % (fmt_ratio(r), who))
            else:
                cells.append("-")
        body.append(cells)
    geo = ["geomean vs glibc"]
    for a in allocs:
        g = geomean(ratios_g[a])
        geo.append("1.00x" if a == "glibc" else fmt_ratio(g))
    if has_subject:
        geo.append(fmt_ratio(geomean(ratios_g[SUBJECT])))
        if peers:
            geo.append(fmt_ratio(geomean(ratios_p)))
    return header, body, geo


def variant_table(rows, variants, stats):
    """--magpie-variants: time and peak RSS of each row under each variant, and the ratio of the
    first variant to the second (above 1: the first costs more). Returns (header, body, geomean
    row)."""
    a, b = variants[0], variants[1] if len(variants) > 1 else variants[0]
    short = [v[v.index("[") + 1:-1] for v in variants]
    header = ["workload"]
    for key in ("time", "peak RSS"):
        header += ["%s %s" % (key, v) for v in short] + ["%s/%s" % (short[0], short[1] if
                                                                      len(short) > 1 else "")]
    body, ratios = [], {"time": [], "rss_kib": []}
    for w in rows:
        if not any((w.name, v) in stats for v in variants):
            continue
        cells = [w.name]
        for key, fmt in (("time", fmt_time), ("rss_kib", fmt_mib)):
            vals = [med(stats, w.name, v, key) for v in variants]
            cells += [fmt(x) for x in vals]
            va, vb = med(stats, w.name, a, key), med(stats, w.name, b, key)
            r = va / vb if va and vb else None
            if r:
                ratios[key].append(r)
            cells.append(fmt_ratio(r))
        body.append(cells)
    geo = ["geomean"]
    for key in ("time", "rss_kib"):
        geo += [""] * len(variants) + [fmt_ratio(geomean(ratios[key]))]
    return header, body, geo


def metric_table(rows, allocs, stats):
    header = ["workload", "metric"] + list(allocs)
    body = []
    for w in rows:
        for m in w.metrics:
            cells = [w.name, "%s (%s is better)" % (m[1], m[2])]
            for a in allocs:
                v = med(stats, w.name, a, "metric:" + m[0])
                cells.append("-" if v is None else "%.2f" % v)
            body.append(cells)
    return header, body


def text_table(header, body, footer=None):
    allrows = [header] + body + ([footer] if footer else [])
    widths = [max(len(r[i]) for r in allrows) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                               for i, c in enumerate(r))
    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    if footer:
        out += ["  ".join("-" * w for w in widths), line(footer)]
    return "\n".join(out)


def md_table(header, body, footer=None):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    for r in body + ([footer] if footer else []):
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def detail_table(rows, allocs, stats):
    header = ["workload", "allocator", "n ok", "time median [min..max]", "peak RSS median",
              "cpu median", "failures"]
    body = []
    for w in rows:
        for a in allocs:
            s = stats.get((w.name, a))
            if s is None:
                continue
            t = s.get("time")
            r = s.get("rss_kib")
            c = s.get("cpu")
            body.append([w.name, a, "%d/%d" % (s["ok"], s["n"]),
                         "%s [%s..%s]" % (fmt_time(t["median"]), fmt_time(t["min"]),
                                          fmt_time(t["max"])) if t else "-",
                         fmt_mib(r["median"]) if r else "-",
                         fmt_time(c["median"]) if c else "-",
                         "; ".join(sorted(set(s["failures"]))) or ""])
    return header, body


# ---- callgrind ---------------------------------------------------------------------------

# The pairs measured: (label, extra compiler arguments for bench/fastpath.c).
CALLGRIND_PAIRS = [("malloc+free", []),
                   ("new+sized delete", ["-DFASTPATH_NEW", "-lstdc++"])]


def callgrind(args, allocs, outdir, machine):
    """Instructions per malloc+free pair, and per C++ new + sized delete pair, on the fast path,
    (Ir(N2) - Ir(N1)) / (N2 - N1)."""
    if shutil.which("valgrind") is None:
        sys.exit("run.py: valgrind not found (apt-get install valgrind)")
    tmp = os.path.join(outdir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    exes = []
    for i, (label, extra) in enumerate(CALLGRIND_PAIRS):
        exe = os.path.join(tmp, "fastpath%d" % i)
        subprocess.run([cc, "-O2", "-fno-builtin-malloc", "-fno-builtin-free", "-o", exe,
                        os.path.join(BENCH, "fastpath.c")] + extra, check=True)
        exes.append((label, exe))
    n1, n2 = 100000, 300000
    sizes = [16 << i for i in range(7)]  # 16 .. 1024
    counts = {}
    print("callgrind: instructions per pair, (Ir(%d) - Ir(%d)) / %d, less the "
          "benchmark loop's own" % (n2, n1, n2 - n1))
    for label, exe in exes:
        for name, preload, _ in allocs:
            for size in sizes:
                irs = []
                for n in (n1, n2):
                    outf = os.path.join(tmp, "callgrind.out.%s.%d.%d" % (name, size, n))
                    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outf,
                            exe, str(size), str(n)]
                    r = subprocess.run(argv, env=child_env(preload), capture_output=True,
                                       text=True, timeout=600)
                    ir = None
                    if r.returncode == 0 and os.path.exists(outf):
                        ir = total_minus_self(outf, "main")
                        os.unlink(outf)
                    if ir is None:
                        print("  %s size %d: valgrind failed: %s" % (name, size,
                              (r.stderr.strip().splitlines() or ["?"])[-1]))
                    irs.append(ir)
                if None not in irs:
                    counts[(label, name, size)] = (irs[1] - irs[0]) / float(n2 - n1)
            print("  %-16s %-9s %s" % (label, name, "  ".join(
                "%d:%s" % (s, "%.1f" % counts[(label, name, s)]
                           if (label, name, s) in counts else "-") for s in sizes)))
    # bench/simple.c at a fixed size: the allocator's instructions per pair over batches, where
    # magazine misses count too (the program's own, the self cost of pass, left out).
    simple_exe = os.path.join(tmp, "simple")
    subprocess.run([cc, "-O2", "-fno-builtin-malloc", "-fno-builtin-free", "-I", BENCH, "-o",
                    simple_exe, os.path.join(BENCH, "simple.c"), "-lpthread"], check=True)
    simple_iters, simple = 100000, {}
    simple_pairs = simple_iters * 4 * 4 * 3  # batch sizes, passes (warm-up included), sizes
    for name, preload, _ in allocs:
        outf = os.path.join(tmp, "callgrind.out.simple.%s" % name)
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outf,
                            simple_exe, "-i", str(simple_iters)], env=child_env(preload),
                           capture_output=True, text=True, timeout=900)
        if r.returncode == 0 and os.path.exists(outf):
            ir = total_minus_self(outf, "pass")
            os.unlink(outf)
            if ir is not None:
                simple[name] = ir / float(simple_pairs)
        print("  %-16s %-9s %s" % ("simple batches", name, "%.1f" % simple[name]
                                   if name in simple else "valgrind failed"))
    header = ["pair", "allocator"] + [str(s) for s in sizes]
    body = [[label, name] + ["%.1f" % counts[(label, name, s)] if (label, name, s) in counts
                             else "-" for s in sizes]
            for label, _ in exes for name, _, _ in allocs]
    simple_body = [[name, "%.1f" % simple[name] if name in simple else "-"]
                   for name, _, _ in allocs]
    print()
    print(text_table(header, body))
    print()
    print(text_table(["allocator", "simple: per pair"], simple_body))
    if args.no_save:
        return
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(outdir, "callgrind-%s.md" % stamp)
    with open(path, "w") as f:
        f.write("# Fast-path instructions per pair (callgrind)\n\n")
        f.write(machine_md(machine, allocs))
        f.write("\nEach cell: (Ir(N=%d) - Ir(N=%d)) / %d for `bench/fastpath.c SIZE N` "
                "(malloc(SIZE) then free, N times; built with -DFASTPATH_NEW, C++'s "
                "operator new(SIZE) then operator delete(p, SIZE), with one block of the size "
                "kept allocated throughout), so start-up cancels, and the loop's own "
                "instructions (the self cost of main) are left out: what remains is the "
                "allocator's two calls and their PLT jumps. Under valgrind, rseq is "
                "unavailable, so allocators that use it run their fallback path.\n\n"
                % (n2, n1, n2 - n1))
        f.write(md_table(header, body) + "\n")
        f.write("\n`bench/simple.c -i %d` (batches of 25, 100, 400 and 1600 blocks of 16, 32 "
                "and 64 bytes allocated, written and freed in order; %d pairs): the "
                "allocator's instructions per pair, the program's own (the self cost of pass) "
                "left out; magazine misses and refills count here.\n\n"
                % (simple_iters, simple_pairs))
        f.write(md_table(["allocator", "per pair"], simple_body) + "\n")
    with open(path[:-3] + ".json", "w") as f:
        json.dump({"machine": machine, "n1": n1, "n2": n2,
                   "counts": {"%s/%s/%d" % k: v for k, v in counts.items()},
                   "simple_iters": simple_iters, "simple_per_pair": simple}, f, indent=1)
    print("\nwrote %s" % os.path.relpath(path))


def total_minus_self(path, fn_name):
    """Total Ir of a callgrind profile less the self cost of one function (the benchmark loop in
    main), so that only the allocator's instructions (and its PLT jumps) remain."""
    names, cur, total, own, after_calls = {}, None, None, 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("fn=") or line.startswith("cfn="):
                # Names are compressed: "(id) name" the first time (in fn= or cfn=), "(id)" after.
                v = line.split("=", 1)[1].strip()
                name = v
                if v.startswith("("):
                    ident, _, name = v.partition(")")
                    name = name.strip()
                    if name:
                        names[ident] = name
                    name = names.get(ident)
                if line.startswith("fn="):
                    cur = name
            elif line.startswith("calls="):
                after_calls = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_calls:
                    after_calls = False
                elif cur == fn_name:
                    parts = line.split()
                    if len(parts) > 1:
                        own += int(parts[1])
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    return None if total is None else total - own


def machine_md(m, allocs):
    lines = ["Machine: %d CPUs (%s), %d MiB, %s, kernel %s, %s; load average at start %.2f; "
             "%s." % (m["nproc"], m["cpu"], m["memory_mib"], m["os"], m["kernel"], m["glibc"],
                      m["loadavg_start"], m["date"]), ""]
    lines.append("Allocators: " + "; ".join("%s (%s)" % (n, v) for n, _, v in allocs) + ".")
    return "\n".join(lines) + "\n"


# ---- demo report ---------------------------------------------------------------------------

RSS_OVER_LIVE_DEFINED = ("RSS/live: the memory the process gained while its threads worked "
                         "(resident pages, as the kernel counts them) divided by the bytes its "
                         "live blocks hold; 1.00 would be no overhead, lower is better.")


def spread(stats, row, a, key, fmt):
    """'median (min-max)' of one cell, formatted with fmt, or '-'."""
    m = med(stats, row, a, key)
    if m is None:
        return "-"
    lo, hi = med(stats, row, a, key, "min"), med(stats, row, a, key, "max")
    return "%s (%s-%s)" % (fmt(m), fmt(lo), fmt(hi))


def compare(stats, row, key, what, better, worse):
    """magpie against glibc on one figure: the ratio of the medians with the range the ratio
    takes over the runs, and, where the two allocators' ranges overlap, says so rather than
    claim a difference."""
    g, m = med(stats, row, "glibc", key), med(stats, row, "magpie", key)
    if not g or not m:
        return None
    g_lo, g_hi = med(stats, row, "glibc", key, "min"), med(stats, row, "glibc", key, "max")
    m_lo, m_hi = med(stats, row, "magpie", key, "min"), med(stats, row, "magpie", key, "max")
    if m_lo <= g_hi and g_lo <= m_hi:
        return "%s within noise (the runs' ranges overlap)" % what
    if m <= g:
        return "%.2fx %s (%.2f-%.2fx over the runs)" % (g / m, better, g_lo / m_hi, g_hi / m_lo)
    return "%.2fx %s (%.2f-%.2fx over the runs)" % (m / g, worse, m_lo / g_hi, m_hi / g_lo)


def demo_report(rows, stats, reps, machine):
    out = ["", "magpie demo: glibc malloc vs magpie, %d alternating runs each: medians, with the "
           "lowest and highest run in brackets" % reps,
           "(%d CPUs, %s, %s, load average %.1f)" % (machine["nproc"], machine["cpu"],
                                                       machine["glibc"], machine["loadavg_start"]),
           ""]
    if any(w.metric and w.metric[1].startswith("RSS/live") for w in rows):
        out += [RSS_OVER_LIVE_DEFINED, ""]
    for w in rows:
        out.append("  %s: %s" % (w.name, w.desc))
        for a in ("glibc", "magpie"):
            s = stats.get((w.name, a), {})
            extra = ""
            if w.metric and med(stats, w.name, a, "metric") is not None:
                extra = "   %s %s" % (w.metric[1],
                                      spread(stats, w.name, a, "metric", lambda v: "%.2f" % v))
            fails = "   FAILED: %s" % "; ".join(sorted(set(s["failures"]))) \
                if s.get("failures") else ""
            timing = "" if w.memory_only else "%-26s " % spread(stats, w.name, a, "time",
                                                                 fmt_time)
            out.append("      %-7s %speak RSS %s%s%s" % (
                a, timing, spread(stats, w.name, a, "rss_kib", fmt_mib), extra, fails))
        verdict = []
        if not w.memory_only:
            verdict.append(compare(stats, w.name, "time", "time", "faster", "slower"))
        verdict.append(compare(stats, w.name, "rss_kib", "peak RSS", "less peak memory",
                               "more peak memory"))
        if w.metric:
            gm, mm = med(stats, w.name, "glibc", "metric"), med(stats, w.name, "magpie", "metric")
            if gm and mm:
                verdict.append("%s %.2f vs glibc's %.2f" % (w.metric[1], mm, gm))
        verdict = [v for v in verdict if v]
        out.append("      => magpie: " + ("; ".join(verdict) if verdict else "no comparison"))
        if w.memory_only:
            out.append("         (its point is memory: the threads mostly sleep, so its time "
                       "says nothing)")
        out.append("")

    def ratios(key, timed_only):
        return [med(stats, w.name, "magpie", key) / med(stats, w.name, "glibc", key)
                for w in rows if not (timed_only and w.memory_only)
                and med(stats, w.name, "magpie", key) and med(stats, w.name, "glibc", key)]
    tg, rg = ratios("time", True), ratios("rss_kib", False)
    if tg and rg:
        out.append("  Overall (geometric means of the medians): magpie takes %.2fx glibc's time "
                   "over %d timed workloads and %.2fx its peak RSS over %d."
                   % (geomean(tg), len(tg), geomean(rg), len(rg)))
    out.append("  Every workload and allocator: make bench (bench/run.py --quick); see "
               "bench/README.md.")
    return "\n".join(out)


# ---- main ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See bench/README.md.")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--demo", action="store_const", dest="mode", const="demo")
    g.add_argument("--quick", action="store_const", dest="mode", const="quick")
    g.add_argument("--full", action="store_const", dest="mode", const="full")
    g.add_argument("--callgrind", action="store_const", dest="mode", const="callgrind")
    g.add_argument("--scaling", action="store_const", dest="mode", const="scaling")
    ap.add_argument("--threads", help="thread counts for --scaling, comma-separated (default %s)"
                    % ",".join(map(str, SCALING_THREADS)))
    ap.add_argument("--allocators", help="comma-separated subset of " + ",".join(ALL_ALLOCATORS))
    ap.add_argument("--workloads", help="comma-separated rows or groups (see --list)")
    ap.add_argument("--magpie", help="magpie library to preload (default "
                                       "BUILD/libmagpie.so, BUILD as for --build)")
    ap.add_argument("--magpie-version", metavar="TEXT",
                    help="what to record as magpie's version (default: git describe of this "
                         "checkout and the library's build time)")
    # `make demo BUILD=dir` passes BUILD in the environment: use it, as the Makefile does.
    default_build = os.path.join(ROOT, os.environ.get("BUILD") or "build")
    ap.add_argument("--build", default=default_build,
                    help="build directory holding bench/bench_* (default $BUILD or build)")
    ap.add_argument("--magpie-variants", metavar="SETS",
                    help="run magpie once per MAGPIE_OPTIONS set (comma-separated sets, '+' "
                         "between the options of one: hugepages=auto+retain=0), as allocators "
                         "magpie[SET], alternating with the others, and add a table of time and "
                         "peak RSS per set with the ratio of the first to the second")
    ap.add_argument("--reps", type=int, help="repetitions (default: the mode's)")
    ap.add_argument("--out", help="directory for the results files (default BUILD/results, "
                                  "out of git's sight)")
    ap.add_argument("--no-deps", action="store_true", help="do not run scripts/bench-deps.sh")
    ap.add_argument("--no-save", action="store_true", help="print only; write no files")
    ap.add_argument("--list", action="store_true", help="list the mode's workloads and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    args = ap.parse_args()
    if args.mode == "scaling":  # the many-core matrix has a module of its own
        return scaling.main_from_run(args)
    mode = args.mode or "quick"
    if args.out is None:
        args.out = os.path.join(args.build, "results")
    if args.mode is None:
        print("run.py: no mode given, running --quick (see --help)")
    try:
        threads = [int(t) for t in args.threads.split(",")] if args.threads else None
    except ValueError:
        print("run.py: --threads takes comma-separated numbers, not %r" % args.threads)
        return 2
    if threads and any(t < 1 for t in threads):
        print("run.py: --threads: every count must be at least 1")
        return 2

    if args.list:
        for w in plan("quick" if mode == "callgrind" else mode, threads):
            print("%-14s %-10s %s" % (w.name, w.group, w.desc))
        return 0

    wanted = args.allocators.split(",") if args.allocators else (
        ["glibc", "magpie"] if mode == "demo" else list(ALL_ALLOCATORS))
    if mode == "callgrind" and not args.allocators:
        wanted = ["glibc", "magpie", "jemalloc", "tcmalloc", "mimalloc", "mimalloc3"]

    if not args.no_deps and not args.dry_run and mode != "demo":
        deps = os.path.join(ROOT, "scripts", "bench-deps.sh")
        if os.access(deps, os.X_OK):
            subprocess.run([deps])
    magpie_path = os.path.abspath(args.magpie or os.path.join(args.build, "libmagpie.so"))
    allocs, missing = resolve_allocators(wanted, magpie_path, args.build)
    if args.magpie_version:
        allocs = [(n, p, args.magpie_version if n == "magpie" else v) for n, p, v in allocs]
    for name, why in missing:
        print("run.py: SKIPPING %s: %s" % (name, why))
    variant_env = {}
    if args.magpie_variants:
        sets = [v for v in args.magpie_variants.split(",") if v]
        subject = [x for x in allocs if x[0] == SUBJECT]
        if not sets or not subject:
            print("run.py: --magpie-variants needs option sets and magpie among the allocators")
            return 2
        at = allocs.index(subject[0])
        variants = [("%s[%s]" % (SUBJECT, v), subject[0][1], subject[0][2]) for v in sets]
        allocs[at:at + 1] = variants
        variant_env = {n: {"MAGPIE_OPTIONS": n[len(SUBJECT) + 1:-1].replace("+", ",")}
                       for n, _, _ in variants}
    if not allocs:
        print("run.py: no allocator to run")
        return 1
    os.makedirs(args.out, exist_ok=True)
    machine = machine_description()

    if mode == "callgrind":
        if args.dry_run:
            print("callgrind: would measure %s" % ", ".join(a[0] for a in allocs))
            return 0
        callgrind(args, allocs, args.out, machine)
        return 0

    rows = plan(mode, threads)
    if args.workloads:
        keys = set(args.workloads.split(","))
        unknown = keys - {w.name for w in rows} - {w.group for w in rows}
        if unknown:
            print("run.py: no workload named %s in --%s (see --list)" %
                  (", ".join(sorted(unknown)), mode))
            return 1
        rows = [w for w in rows if w.name in keys or w.group in keys]
    names = [a[0] for a in allocs]
    reps = args.reps or MODES[mode]["reps"]
    timeout = MODES[mode]["timeout"]

    build = os.path.abspath(args.build)
    runner = Runner(args, build, None, variant_env)
    global HELPER
    HELPER = runner.binary("rusage")
    if HELPER is None and not args.dry_run:
        print("run.py: bench_rusage not built: peak RSS is measured from here and includes "
              "this runner's own RSS as a floor (about 20 MiB)")
        machine["rss_note"] = "measured without bench_rusage: peak RSS has a floor of the " \
                              "runner's own RSS"
    # Rows that will run at all (objcache only with magpie), and their binaries.
    bases = {n.split("[")[0]: n for n in names}  # a variant runs the rows of its allocator
    rows = [w for w in rows if not w.only or set(w.only) & set(bases)]
    progs = {w.group if w.kind == "c" else "objcache" for w in rows if w.kind in ("c", "objcache")}
    unbuilt = sorted(p for p in progs if runner.binary(p) is None)
    if unbuilt and not args.dry_run:
        print("run.py: workload binaries not built in %s/bench: %s. Build first: make "
              "(or cmake -S . -B build && cmake --build build)." % (build, ", ".join(unbuilt)))
        if len(unbuilt) == len(progs):
            return 1
        print("run.py: those rows will show as failures")

    plan_runs = []
    for rep in range(reps):
        for w in rows:
            if w.reps is not None and rep >= w.reps:
                continue
            for name, preload, _ in allocs:
                if w.only and name.split("[")[0] not in w.only:
                    continue
                plan_runs.append((rep, w, name, preload))
    print("run.py --%s: %d workloads x %d allocators (%s), %d repetitions: %d runs" %
          (mode, len(rows), len(allocs), ", ".join(names), reps, len(plan_runs)))
    if args.dry_run:
        for rep, w, name, preload in plan_runs:
            if rep == 0:
                env = " ".join("%s=%s" % kv for kv in
                               dict(w.alloc_env.get(name, {}), **variant_env.get(name, {})).items())
                print("  %-14s %-9s %s" % (w.name, name, (env + " " if env else "") +
                                            (" ".join(w.argv) or w.kind)))
        return 0

    with tempfile.TemporaryDirectory(prefix="magpie-bench-") as tmp:
        runner.tmp = tmp
        runs = {}
        t_start = time.time()
        for i, (rep, w, name, preload) in enumerate(plan_runs):
            o = runner.run(w, name, preload, timeout)
            runs.setdefault((w.name, name), []).append(o)
            line = "[%3d/%d] rep %d %-14s %-9s " % (i + 1, len(plan_runs), rep + 1, w.name, name)
            if o.ok:
                line += "%s  RSS %s" % (fmt_time(o.time), fmt_mib(o.maxrss_kib))
                for m in w.metrics:
                    if m[0] in o.result:
                        line += "  %s %s" % (m[1], o.result[m[0]])
            else:
                line += "FAILED: %s\n      reproduce: %s" % (o.status, o.repro)
                if o.stderr_tail:
                    line += "\n      " + o.stderr_tail.replace("\n", "\n      ")
            print(line, flush=True)
        elapsed = time.time() - t_start
    machine["loadavg_end"] = os.getloadavg()[0]
    machine["elapsed_s"] = round(elapsed, 1)
    stats = summarise(runs, rows, names)

    tt = build_table(rows, names, stats, "time", fmt_time)
    rt = build_table(rows, names, stats, "rss_kib", fmt_mib)
    tmin = build_table(rows, names, stats, "time", fmt_time, "min")
    mt = metric_table(rows, names, stats)
    vt = variant_table(rows, list(variant_env), stats) if variant_env else None
    failures = [(w.name, a, o) for w in rows for a in names for o in runs.get((w.name, a), [])
                if not o.ok]
    # Where the host placed two CPUs far apart for a while, the cross-thread rows ran slower for
    # a reason of the host's: the report says which runs began so.
    link = scaling.link_summary((row, o.link_ns) for (row, _), outs in runs.items() for o in outs)
    link_text = scaling.link_sentence(link) if link else \
        "The link between two CPUs before each run: not measured (one CPU, or no bench_rusage)."

    if mode == "demo":
        print(demo_report(rows, stats, reps, machine))
    else:
        print()
        print("Time, median of %d (lower is better; Nx = ratio to glibc)" % reps)
        print(text_table(*tt))
        print(link_text)
        print()
        print("Peak RSS, median (lower is better; Nx = ratio to glibc)")
        print(text_table(*rt))
        if mt[1]:
            print()
            print("Workload metrics, median")
            print(text_table(*mt))
        if vt:
            print()
            print("magpie's variants, median (ratio: first over second; lower is better)")
            print(text_table(*vt))
    if failures:
        print()
        print("Failures (%d):" % len(failures))
        seen = set()
        for row, a, o in failures:
            if (row, a, o.status) in seen:
                continue
            seen.add((row, a, o.status))
            print("  %s under %s: %s\n    reproduce: %s" % (row, a, o.status, o.repro))
    print()
    print("%d runs in %.0f s; load average %.2f at start, %.2f at end" %
          (len(plan_runs), elapsed, machine["loadavg_start"], machine["loadavg_end"]))

    if args.no_save:
        return 1 if failures else 0
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(args.out, "%s-%s" % (mode, stamp))
    with open(base + ".md", "w") as f:
        f.write("# magpie benchmarks: --%s, %s\n\n" % (mode, machine["date"]))
        f.write(machine_md(machine, allocs))
        for name, why in missing:
            f.write("\nSkipped: %s: %s.\n" % (name, why))
        f.write("\n%d repetitions, allocators alternating within each; %d runs in %.0f s; load "
                "average %.2f at start, %.2f at end. Command: `python3 bench/run.py %s`.\n" %
                (reps, len(plan_runs), elapsed, machine["loadavg_start"], machine["loadavg_end"],
                 shell_quote(sys.argv[1:])))
        f.write("\n## Time (median; lower is better; Nx = ratio to glibc)\n\n")
        f.write(md_table(*tt) + "\n\n" + link_text + "\n")
        f.write("\n## Time, fastest of the repetitions\n\nOn a shared machine, other "
                "processes only ever add time, so the minimum is the steadier estimate; where "
                "it disagrees with the median, the row was disturbed.\n\n")
        f.write(md_table(*tmin) + "\n")
        f.write("\n## Peak RSS (median of ru_maxrss; lower is better)\n\n")
        f.write(md_table(*rt) + "\n")
        if mt[1]:
            f.write("\n## Workload metrics (median)\n\n" + md_table(*mt) + "\n")
        if vt:
            f.write("\n## magpie's variants (median; ratio: first over second)\n\n" +
                    md_table(*vt) + "\n")
        f.write("\n## Workloads\n\n")
        for w in rows:
            f.write("- **%s**: %s. `%s`\n" % (w.name, w.desc, " ".join(w.argv) or w.kind))
        if failures:
            f.write("\n## Failures\n\n")
            for row, a, o in failures:
                f.write("- %s under %s: %s. Reproduce: `%s`\n" % (row, a, o.status, o.repro))
        f.write("\n## Every cell\n\n" + md_table(*detail_table(rows, names, stats)) + "\n")
    data = {
        "mode": mode, "machine": machine, "reps": reps, "command": sys.argv[1:],
        "allocators": [{"name": n, "preload": p, "version": v} for n, p, v in allocs],
        "skipped": [{"name": n, "why": y} for n, y in missing],
        "workloads": [{"name": w.name, "group": w.group, "desc": w.desc, "kind": w.kind,
                       "argv": w.argv, "env": w.alloc_env, "metric": w.metric,
                       "metrics": w.metrics, "memory_only": w.memory_only} for w in rows],
        "runs": [{"workload": row, "allocator": a, "ok": o.ok, "status": o.status,
                  "time": o.time, "wall": o.wall, "cpu": o.cpu, "maxrss_kib": o.maxrss_kib,
                  "result": o.result, "repro": o.repro, "link_ns": o.link_ns}
                 for (row, a), outs in runs.items() for o in outs],
        "summary": [{"workload": row, "allocator": a, **s} for (row, a), s in stats.items()],
        "link": link,
        "series": {},
    }
    # RSS and live bytes over time, from the first run of each (row, allocator) recording them.
    for (row, a), outs in runs.items():
        for o in outs:
            if o.series:
                data["series"].setdefault(row, {})[a] = o.series
                break
    with open(base + ".json", "w") as f:
        json.dump(data, f, indent=1)
    print("wrote %s.md and .json" % os.path.relpath(base))
    if rss_svg.write_svg(data, base + "-rss.svg"):
        print("wrote %s-rss.svg" % os.path.relpath(base))
    chart(base, mode)
    return 1 if failures else 0


def chart(base, mode):
    """Draws the chart of base.json: the demo's as base.svg with bench/svgchart.py (standard
    library only); the other modes' as base.png with bench/chart.py, using this interpreter if
    it has matplotlib, else Debian's /usr/bin/python3 (python3-matplotlib), else as SVG too."""
    for py in ([] if mode == "demo" else dict.fromkeys([sys.executable, "/usr/bin/python3"])):
        if not os.path.exists(py):
            continue
        probe = subprocess.run([py, "-c", "import matplotlib"], capture_output=True)
        if probe.returncode == 0:
            return draw_chart(py, "chart.py", base, ".png")
    draw_chart(sys.executable, "svgchart.py", base, ".svg")


def draw_chart(py, script, base, ext):
    r = subprocess.run([py, os.path.join(BENCH, script), base + ".json", base + ext],
                       capture_output=True, text=True)
    if r.returncode == 0:
        print("wrote %s%s" % (os.path.relpath(base), ext))
    else:
        print("chart skipped: %s failed: %s" %
              (script, (r.stderr.strip().splitlines() or ["?"])[-1]))


if __name__ == "__main__":
    sys.exit(main())
